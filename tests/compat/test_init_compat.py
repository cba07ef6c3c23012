"""nn.init functions used by public models (timm's trunc_normal_, RL code's orthogonal_,
calculate_gain) that were missing."""

import math

import numpy as np
import pytest

import ferro
from ferro.nn import init


def test_trunc_normal_stays_in_its_absolute_bounds_and_is_seeded():
    ferro.manual_seed(0)
    w = init.trunc_normal_(ferro.empty(200, 50), std=0.02)
    x = w.numpy()
    assert x.min() >= -2.0 and x.max() <= 2.0
    assert abs(x.std() - 0.02) < 0.002
    y = init.trunc_normal_(ferro.empty(1000), mean=0.0, std=1.0, a=-0.5, b=0.5).numpy()
    assert y.min() >= -0.5 and y.max() <= 0.5
    ferro.manual_seed(0)
    np.testing.assert_array_equal(init.trunc_normal_(ferro.empty(200, 50), std=0.02).numpy(), x)
    with pytest.raises(ValueError):
        init.trunc_normal_(ferro.empty(3), a=1.0, b=-1.0)


@pytest.mark.parametrize("shape", [(4, 6), (6, 4), (3, 2, 2, 2)])
def test_orthogonal_gives_orthonormal_rows_or_columns(shape):
    w = init.orthogonal_(ferro.empty(*shape), gain=2.0).numpy().astype(np.float64)
    m = w.reshape(shape[0], -1) / 2.0
    if m.shape[0] <= m.shape[1]:
        np.testing.assert_allclose(m @ m.T, np.eye(m.shape[0]), atol=1e-5)
    else:
        np.testing.assert_allclose(m.T @ m, np.eye(m.shape[1]), atol=1e-5)


@pytest.mark.torch
def test_calculate_gain_matches_torch():
    import torch

    for args in [
        ("linear",),
        ("conv2d",),
        ("sigmoid",),
        ("tanh",),
        ("relu",),
        ("leaky_relu",),
        ("leaky_relu", 0.2),
        ("leaky_relu", math.sqrt(5)),
        ("selu",),
    ]:
        assert init.calculate_gain(*args) == pytest.approx(torch.nn.init.calculate_gain(*args))


@pytest.mark.torch
@pytest.mark.parametrize(
    ("shape", "groups"), [((4, 2, 3), 1), ((4, 2, 3), 2), ((6, 3, 3, 5), 3), ((2, 5, 3, 3, 3), 1)]
)
def test_dirac_and_eye_match_torch(shape, groups):
    torch = pytest.importorskip("torch")
    ours = ferro.nn.init.dirac_(ferro.empty(*shape), groups=groups)
    theirs = torch.nn.init.dirac_(torch.empty(*shape), groups=groups)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    for rows, cols in ((3, 5), (5, 3)):
        expected = torch.nn.init.eye_(torch.empty(rows, cols)).numpy()
        np.testing.assert_array_equal(ferro.nn.init.eye_(ferro.empty(rows, cols)).numpy(), expected)


def test_sparse_zeros_that_many_rows_of_each_column_and_is_seeded():
    w = ferro.nn.init.sparse_(ferro.empty(10, 6), 0.25, std=0.5)
    assert ((w.numpy() == 0).sum(0) == 3).all()  # ceil(0.25 * 10)
    assert 0.2 < w.numpy()[w.numpy() != 0].std() < 1.0
    again = ferro.nn.init.sparse_(
        ferro.empty(10, 6), 0.25, generator=ferro.Generator().manual_seed(1)
    )
    same = ferro.nn.init.sparse_(
        ferro.empty(10, 6), 0.25, generator=ferro.Generator().manual_seed(1)
    )
    assert ferro.equal(again, same)


def test_init_shape_errors():
    from ferro.errors import ArgumentError, ShapeError

    with pytest.raises(ShapeError, match="eye_: only 2-D"):
        ferro.nn.init.eye_(ferro.empty(2, 2, 2))
    with pytest.raises(ShapeError, match="dirac_: only 3-, 4- and 5-D"):
        ferro.nn.init.dirac_(ferro.empty(2, 2))
    with pytest.raises(ArgumentError, match="divisible by groups"):
        ferro.nn.init.dirac_(ferro.empty(3, 2, 3), groups=2)
    with pytest.raises(ShapeError, match="sparse_: only 2-D"):
        ferro.nn.init.sparse_(ferro.empty(2), 0.5)


# The super-resolution example's model.py (older revisions) initializes with
# ``init.orthogonal(w, init.calculate_gain('relu'))``: PyTorch keeps the names without the
# underscore as deprecated aliases that warn.
@pytest.mark.parametrize(
    "name", ["uniform", "normal", "xavier_uniform", "kaiming_normal", "orthogonal"]
)
def test_deprecated_spellings_warn_and_fill(name):
    w = ferro.zeros(3, 4)
    with pytest.warns(
        FutureWarning, match=f"`nn.init.{name}` is now deprecated in favor of `nn.init.{name}_`"
    ):
        assert getattr(ferro.nn.init, name)(w) is w
    assert (w.numpy() != 0).any()
