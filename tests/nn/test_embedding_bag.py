"""``F.embedding_bag`` and ``nn.EmbeddingBag`` (a composition of embedding, index_add and max):
gradcheck of each mode, the bag layouts (2-D input, offsets, include_last_offset, empty bags,
padding_idx, per_sample_weights) against PyTorch, the module, and the errors."""

import numpy as np
import pytest

import ferro
import ferro.nn as nn
import ferro.nn.functional as F
from ferro.errors import (
    ArgumentError,
    DtypeError,
    IndexOutOfRangeError,
    NotSupportedError,
    ShapeError,
)
from ferro.testing import gradcheck

W = np.random.default_rng(0).standard_normal((7, 3))
IDX = [1, 2, 3, 1, 0, 6, 6]

CASES = [
    dict(input=IDX, offsets=[0, 2, 2, 5], mode="sum"),
    dict(input=IDX, offsets=[0, 2, 2, 5], mode="mean"),
    dict(input=IDX, offsets=[0, 2, 2, 5], mode="max"),
    dict(input=IDX, offsets=[0, 2, 2, 5, 7], mode="max", include_last_offset=True),
    dict(input=IDX, offsets=[0, 3, 7], mode="mean", include_last_offset=True),
    dict(input=IDX, offsets=[0, 2, 2, 5], mode="mean", padding_idx=1),
    dict(input=[1, 1, 3, 1, 0, 6, 6], offsets=[0, 2, 2, 5], mode="max", padding_idx=1),
    dict(input=[[1, 2, 3], [4, 4, 0]], offsets=None, mode="max"),
    dict(input=[[1, 2, 3], [4, 4, 0]], offsets=None, mode="sum", psw=True),
    dict(input=IDX, offsets=[0, 3], mode="sum", psw=True, padding_idx=-1),
    dict(input=[], offsets=[0, 0], mode="mean"),
    dict(input=[], offsets=[0, 0], mode="max"),
    dict(input=np.zeros((0, 2), np.int64), offsets=None, mode="max"),
]


def _call(lib, F_, case, weight, psw):
    off = case["offsets"]
    return F_.embedding_bag(
        lib.tensor(case["input"], dtype=lib.int64),
        weight,
        None if off is None else lib.tensor(off, dtype=lib.int64),
        mode=case["mode"],
        per_sample_weights=psw,
        include_last_offset=case.get("include_last_offset", False),
        padding_idx=case.get("padding_idx"),
    )


def _psw(lib, case):
    if not case.get("psw"):
        return None
    shape = np.shape(case["input"])
    return lib.tensor(np.arange(1.0, 1 + np.prod(shape)).reshape(shape), requires_grad=True)


@pytest.mark.parametrize("case", CASES, ids=range(len(CASES)))
def test_embedding_bag_gradchecks(case):
    w = ferro.tensor(W, requires_grad=True)
    psw = _psw(ferro, case)
    inputs = (w,) if psw is None else (w, psw)
    assert gradcheck(lambda w, p=psw: _call(ferro, F, case, w, p), inputs)


@pytest.mark.torch
@pytest.mark.parametrize("case", CASES, ids=range(len(CASES)))
def test_embedding_bag_matches_torch(case):
    torch = pytest.importorskip("torch")
    results = []
    for lib, F_ in ((ferro, F), (torch, torch.nn.functional)):
        w = lib.tensor(W, requires_grad=True)
        psw = _psw(lib, case)
        y = _call(lib, F_, case, w, psw)
        g = np.cos(np.arange(y.numel())).reshape(tuple(y.shape))
        (y * lib.tensor(g)).sum().backward()
        results.append(
            [y.detach().numpy(), w.grad.numpy()] + ([] if psw is None else [psw.grad.numpy()])
        )
    for ours, theirs in zip(*results, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)


def test_the_module_draws_like_embedding_and_bags_like_the_function():
    bag = nn.EmbeddingBag(10, 3, mode="sum", padding_idx=2, dtype=ferro.float64)
    assert repr(bag) == "EmbeddingBag(10, 3, mode='sum', padding_idx=2)"
    assert bag.weight[2].tolist() == [0.0, 0.0, 0.0] and bag.weight.requires_grad
    text, offsets = ferro.tensor([1, 2, 4, 5]), ferro.tensor([0, 1])
    y = bag(text, offsets)
    expected = F.embedding_bag(text, bag.weight, offsets, mode="sum", padding_idx=2)
    assert ferro.equal(y, expected)
    assert y[0].tolist() == bag.weight[1].tolist()
    frozen = nn.EmbeddingBag.from_pretrained(ferro.ones(4, 2), include_last_offset=True)
    assert not frozen.weight.requires_grad and frozen.mode == "mean"
    assert frozen(ferro.tensor([0, 1, 3]), ferro.tensor([0, 1, 3])).tolist() == [[1.0, 1.0]] * 2
    assert nn.EmbeddingBag.from_pretrained(ferro.ones(4, 2), freeze=False).weight.requires_grad
    assert set(nn.EmbeddingBag(4, 2).state_dict()) == {"weight"}
    # bags of no entries (PyTorch 2.13 raises "step must be nonzero" here)
    assert (
        F.embedding_bag(ferro.zeros((2, 0), dtype=ferro.int64), bag.weight).tolist()
        == [[0.0] * 3] * 2
    )


@pytest.mark.torch
def test_the_module_loads_a_torch_state_dict_and_matches():
    torch = pytest.importorskip("torch")
    theirs = torch.nn.EmbeddingBag(9, 4, mode="max")
    ours = nn.EmbeddingBag(9, 4, mode="max")
    ours.load_state_dict(theirs.state_dict())
    text, offsets = [3, 1, 8, 8, 0], [0, 3]
    expected = theirs(torch.tensor(text), torch.tensor(offsets)).detach().numpy()
    np.testing.assert_allclose(
        ours(ferro.tensor(text), ferro.tensor(offsets)).detach().numpy(), expected
    )
    assert repr(ours) == repr(theirs)


def test_embedding_bag_errors():
    w = ferro.tensor(W)
    idx = ferro.tensor(IDX)
    with pytest.raises(ArgumentError, match="offsets\\[0\\] must be 0"):
        F.embedding_bag(idx, w, ferro.tensor([1, 2]))
    with pytest.raises(IndexOutOfRangeError, match="non-decreasing"):
        F.embedding_bag(idx, w, ferro.tensor([0, 3, 1]))
    with pytest.raises(IndexOutOfRangeError, match="at most the input's length"):
        F.embedding_bag(idx, w, ferro.tensor([0, 9]))
    with pytest.raises(ArgumentError, match="the last offset must be the input's length 7"):
        F.embedding_bag(idx, w, ferro.tensor([0, 3, 4]), include_last_offset=True)
    with pytest.raises(ArgumentError, match="needs offsets"):
        F.embedding_bag(idx, w)
    with pytest.raises(ArgumentError, match="offsets must be None"):
        F.embedding_bag(idx.view(1, 7), w, ferro.tensor([0]))
    with pytest.raises(IndexOutOfRangeError, match="embedding: index 7"):
        F.embedding_bag(ferro.tensor([7]), w, ferro.tensor([0]))
    with pytest.raises(NotSupportedError, match="per_sample_weights is only supported"):
        F.embedding_bag(idx, w, ferro.tensor([0]), mode="mean", per_sample_weights=ferro.ones(7))
    with pytest.raises(ShapeError, match="per_sample_weights has shape"):
        F.embedding_bag(idx, w, ferro.tensor([0]), mode="sum", per_sample_weights=ferro.ones(6))
    with pytest.raises(ArgumentError, match="mode must be"):
        F.embedding_bag(idx, w, ferro.tensor([0]), mode="min")
    with pytest.raises(DtypeError, match="input must be integer"):
        F.embedding_bag(ferro.ones(3), w, ferro.tensor([0]))
    with pytest.raises(ShapeError, match="input must be 1-D or 2-D"):
        F.embedding_bag(idx.view(1, 1, 7), w)
    with pytest.raises(IndexOutOfRangeError, match="padding_idx 7"):
        F.embedding_bag(idx, w, ferro.tensor([0]), padding_idx=7)
    with pytest.raises(NotSupportedError, match="max_norm"):
        nn.EmbeddingBag(3, 2, max_norm=1.0)
    with pytest.raises(ArgumentError, match="mode must be"):
        nn.EmbeddingBag(3, 2, mode="min")
