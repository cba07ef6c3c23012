"""How tensors print (ferro._printing): PyTorch's format, checked on plain expectations and
against PyTorch itself where it is installed."""

import numpy as np
import pytest

import ferro
from ferro.errors import ArgumentError


@pytest.fixture(autouse=True)
def _default_options():
    yield
    ferro.set_printoptions(profile="default")


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (9.514754, "tensor(9.5148)"),
        ([1.5, 2.25], "tensor([1.5000, 2.2500])"),
        ([1.0, 2.0, -3.0], "tensor([ 1.,  2., -3.])"),
        ([1e-5, 1.0], "tensor([1.0000e-05, 1.0000e+00])"),
        ([float("nan"), 1.5, float("inf")], "tensor([   nan, 1.5000,    inf])"),
        ([1, 2, -300], "tensor([   1,    2, -300])"),
        ([True, False], "tensor([ True, False])"),
        ([[1.0, -2.5], [3.25, 4.0]], "tensor([[ 1.0000, -2.5000],\n        [ 3.2500,  4.0000]])"),
        (np.zeros((0, 3), np.float32), "tensor([], size=(0, 3))"),
        (np.zeros(0, np.int64), "tensor([], dtype=ferro.int64)"),
        (np.array([0.5, 1.0]), "tensor([0.5000, 1.0000], dtype=ferro.float64)"),
    ],
)
def test_pytorch_format(data, text):
    assert repr(ferro.tensor(data)) == text == str(ferro.tensor(data))


def test_summary_wrapping_and_suffixes():
    t = ferro.arange(2000.0).reshape(40, 50)
    lines = repr(t).splitlines()
    assert lines[0] == "tensor([[0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 4.7000e+01, 4.8000e+01,"
    assert lines[1] == "         4.9000e+01],"
    assert "        ...," in lines and len(lines) < 20
    long = repr(ferro.arange(30.0, requires_grad=True))
    assert all(len(line) <= 80 for line in long.splitlines())
    assert long.endswith("29.], requires_grad=True)")
    assert repr(ferro.ones(2, requires_grad=True) * 2) == "tensor([2., 2.], grad_fn=<MulBackward>)"
    p = ferro.nn.Parameter(ferro.ones(2))
    assert repr(p) == "Parameter containing:\ntensor([1., 1.], requires_grad=True)"


def test_set_printoptions():
    ferro.set_printoptions(precision=2)
    assert repr(ferro.tensor([1 / 3, 2.0])) == "tensor([0.33, 2.00])"
    ferro.set_printoptions(sci_mode=False)
    assert repr(ferro.tensor([1e-5, 1.0])) == "tensor([0.00, 1.00])"  # precision stays 2
    ferro.set_printoptions(threshold=4, edgeitems=1)
    assert repr(ferro.arange(10)) == "tensor([0,  ..., 9])"  # PyTorch's two spaces
    assert ferro.get_printoptions()["threshold"] == 4
    ferro.set_printoptions(profile="full")
    assert "..." not in repr(ferro.arange(5000))
    with pytest.raises(ArgumentError, match="profile"):
        ferro.set_printoptions(profile="long")
    with pytest.raises(ArgumentError, match="precision"):
        ferro.set_printoptions(precision=-1)


_ORACLE_CASES = [
    9.514754,
    [123456.7, 1.0],
    [0.1, 0.2, 0.3333333],
    [1e9, 1.0],
    [0.0, 0.0],
    [-1e-5, -2e-5],
    np.float64(2.5),
    np.arange(1001.0),
    np.arange(2000.0).reshape(40, 50) / 7,
    np.random.default_rng(0).standard_normal((3, 4, 5)).astype(np.float32),
    np.arange(24).reshape(2, 3, 4),
    np.arange(120.0).reshape(2, 3, 4, 5) - 60,
    np.zeros((2, 0)),
]


@pytest.mark.torch
@pytest.mark.parametrize("data", _ORACLE_CASES, ids=range(len(_ORACLE_CASES)))
@pytest.mark.parametrize("options", [{}, {"precision": 2}, {"sci_mode": True}, {"linewidth": 40}])
def test_against_pytorch(data, options):
    torch = pytest.importorskip("torch")
    ferro.set_printoptions(**options)
    torch.set_printoptions(**options)
    try:
        theirs = repr(torch.tensor(data)).replace("torch.", "ferro.")
    finally:
        torch.set_printoptions(profile="default")
    assert repr(ferro.tensor(data)) == theirs
