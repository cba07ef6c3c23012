"""Assignment and in-place indexing (``x[idx] = v``, ``x[:, :k] *= 0``, ``index_put_`` and
friends) and PyTorch's ``.data`` (issue 13, items 5 and 6)."""

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import ferro
from ferro.errors import DtypeError, GraphError, IndexOutOfRangeError, ReadOnlyError, ShapeError
from ferro.ops.shape import IndexPut, _index_put_backward_ops


def _grads(fn, *arrays):
    leaves = [ferro.tensor(a, requires_grad=True) for a in arrays]
    out = fn(*leaves)
    out.backward(ferro.tensor(np.arange(out.numel(), dtype=np.float64).reshape(out.shape)))
    return out.detach().numpy(), [t.grad.numpy() for t in leaves]


INDEXES = [
    (1,),
    (slice(None), slice(0, 2)),
    (Ellipsis, -1),
    (slice(None, None, -2),),
    (np.array([0, 2]),),
    (np.array([[True, False, True, False]] * 3),),
    (slice(None), np.array([3, 1])),
    (None, 0),
]


@pytest.mark.parametrize("index", INDEXES, ids=repr)
def test_setitem_writes_and_differentiates_through_x_and_value(index):
    x = np.random.default_rng(0).normal(size=(3, 4))
    shape = np.empty((3, 4))[index].shape
    v = np.random.default_rng(1).normal(size=shape)

    def fn(x, v):
        y = x * 1.0
        y[tuple(ferro.tensor(i) if isinstance(i, np.ndarray) else i for i in index)] = v
        return y

    out, (gx, gv) = _grads(fn, x, v)
    want = x.copy()
    want[index] = v
    np.testing.assert_array_equal(out, want)
    seed = np.arange(12.0).reshape(3, 4)
    want_gx = seed.copy()
    want_gx[index] = 0
    np.testing.assert_array_equal(gx, want_gx)
    np.testing.assert_array_equal(gv, seed[index])


def test_augmented_assignment_on_a_slice_records_the_product():
    x = ferro.tensor(np.arange(12.0).reshape(3, 4), requires_grad=True)
    y = x * 1.0
    y[:, :2] *= 0
    y[1:] += 10
    (y * y).sum().backward()
    want = np.arange(12.0).reshape(3, 4)
    want[:, :2] = 0
    want[1:] += 10
    np.testing.assert_array_equal(y.detach().numpy(), want)
    cols = np.arange(4) >= 2  # the zeroed columns no longer depend on x
    np.testing.assert_array_equal(x.grad.numpy(), 2 * want * cols)


def test_setitem_broadcasts_a_value_and_sums_its_gradient():
    y = ferro.zeros(3, 4)
    v = ferro.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    y[1:] = v
    y.sum().backward()
    assert v.grad.tolist() == [2.0, 2.0, 2.0, 2.0]


def test_a_leaf_that_requires_grad_refuses_setitem_in_grad_mode_only():
    p = ferro.ones(3, requires_grad=True)
    with pytest.raises(GraphError, match="leaf"):
        p[0] = 2.0
    assert p.tolist() == [1.0, 1.0, 1.0]
    with ferro.no_grad():
        p[0] = 2.0
    assert p.tolist() == [2.0, 1.0, 1.0] and p.is_leaf and p._version == 1


def test_a_view_of_such_a_leaf_refuses_in_place_ops_before_writing():
    p = ferro.ones(2, 3, requires_grad=True)
    with pytest.raises(GraphError, match="view of a leaf"):
        p[:, :2] *= 0
    with pytest.raises(GraphError, match="view of a leaf"):
        p.reshape(6)[1:].add_(1.0)
    assert p.tolist() == [[1.0] * 3] * 2
    with ferro.no_grad():
        p[:, :2] *= 0
    assert p.tolist() == [[0.0, 0.0, 1.0]] * 2


def test_setitem_without_history_writes_in_place_and_bumps_the_version():
    arr = np.zeros(4)
    t = ferro.from_numpy(arr)
    t[ferro.tensor([1, 3])] = 5
    t[0] = ferro.tensor(2.5)
    assert arr.tolist() == [2.5, 5.0, 0.0, 5.0] and t._version == 2


def test_setitem_errors_are_typed():
    t = ferro.zeros(3)
    with pytest.raises(IndexOutOfRangeError):
        t[5] = 1.0
    with pytest.raises(ShapeError):
        ferro.index_put(t, (slice(None),), ferro.ones(2))
    ro = np.zeros(3)
    ro.flags.writeable = False
    with pytest.raises(ReadOnlyError):
        ferro.from_numpy(ro)[0] = 1.0


def test_a_stale_saved_value_is_caught_after_setitem():
    x = ferro.tensor([1.0, 2.0], requires_grad=True)
    y = x.exp()
    z = y * 1.0
    y[0] = 0.0  # y was saved by exp's backward
    with pytest.raises(GraphError):
        (z + y).sum().backward()


def test_index_ops_in_place():
    t = ferro.zeros(2, 4)
    t.index_add_(1, ferro.tensor([0, 0, 3]), ferro.ones(2, 3), alpha=2)
    assert t.tolist() == [[4.0, 0, 0, 2.0]] * 2
    t.index_fill_(1, ferro.tensor([1]), -1)
    t.index_copy_(0, ferro.tensor([1]), ferro.full((1, 4), 7.0))
    assert t.tolist() == [[4.0, -1.0, 0, 2.0], [7.0] * 4]
    t.masked_fill_(t > 3, 0.5)
    t.masked_scatter_(t == 0.5, ferro.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]))
    assert t.tolist() == [[1.0, -1.0, 0.0, 2.0], [2.0, 3.0, 4.0, 5.0]]
    t.scatter_(1, ferro.tensor([[2], [0]]), 9.0)
    t.scatter_add_(1, ferro.tensor([[0], [0]]), ferro.ones(2, 1))
    assert t.tolist() == [[2.0, -1.0, 9.0, 2.0], [10.0, 3.0, 4.0, 5.0]]
    t.index_put_((ferro.tensor([0, 0]), ferro.tensor([1, 1])), ferro.tensor(1.0), accumulate=True)
    assert t[0, 1].item() == 1.0


def test_copy_uniform_normal():
    t = ferro.zeros(2, 3)
    src = ferro.tensor([1.0, 2.0, 3.0], dtype=ferro.float64, requires_grad=True)
    y = t * 1.0
    y.copy_(src)
    (y * 2).sum().backward()
    assert y.dtype == ferro.float32 and y.tolist() == [[1.0, 2.0, 3.0]] * 2
    assert src.grad.tolist() == [4.0, 4.0, 4.0]
    g = ferro.Generator().manual_seed(0)
    u = ferro.empty(1000).uniform_(-2, 3, generator=g)
    assert -2 <= u.min().item() and u.max().item() < 3 and abs(u.mean().item() - 0.5) < 0.2
    n = ferro.empty(1000, dtype=ferro.float64).normal_(1.0, 0.5, generator=g)
    assert n.dtype == ferro.float64 and abs(n.std().item() - 0.5) < 0.05


def test_in_place_ops_follow_the_promotion_rule():
    i = ferro.tensor([1, 2])
    with pytest.raises(DtypeError, match="cannot be cast"):
        i.add_(1.5)
    with pytest.raises(DtypeError):
        i.div_(2)
    i.mul_(3)
    assert i.tolist() == [3, 6] and i.dtype == ferro.int64
    f = ferro.ones(2)
    f.add_(ferro.ones(2, dtype=ferro.float64))
    assert f.dtype == ferro.float32 and f.tolist() == [2.0, 2.0]
    i.masked_fill_(i > 4, 0.7)  # a fill value is cast, as in PyTorch
    assert i.tolist() == [3, 0]


def test_index_put_differentiable_backward_matches_backward():
    sys.path.insert(0, str(Path(__file__).parents[1] / "ops"))
    from opdb import BY_NAME

    rng = np.random.default_rng(0)
    for sample in BY_NAME["index_put"].samples(rng):
        x, v = sample.args
        index = sample.kwargs["index"]
        accumulate = sample.kwargs.get("accumulate", False)
        gy = rng.normal(size=x.shape)
        need = (True, not np.isscalar(v))
        raw = SimpleNamespace(xp=np, saved=index, needs_input_grad=need, accumulate=accumulate)
        want = IndexPut.backward(raw, gy.copy())
        saved = tuple(ferro.tensor(i) if isinstance(i, np.ndarray) else i for i in index)
        ctx = SimpleNamespace(saved=saved, needs_input_grad=need, accumulate=accumulate)
        got = _index_put_backward_ops(ctx, ferro.tensor(gy))
        np.testing.assert_allclose(got[0].numpy(), want[0])
        if need[1]:
            np.testing.assert_allclose(got[1].numpy(), want[1])


def test_data_is_a_tensor_sharing_memory_without_history():
    p = ferro.ones(3, requires_grad=True)
    d = p.data
    assert isinstance(d, ferro.Tensor) and not d.requires_grad and d.is_leaf
    d.add_(1.0)  # no leaf error, no version bump on p
    assert p.tolist() == [2.0, 2.0, 2.0] and p._version == 0
    y = (p * p).sum()
    p.data.mul_(0.5)  # PyTorch: changes through .data are not seen by autograd
    y.backward()
    assert p.grad.tolist() == [2.0, 2.0, 2.0]
    p.data = ferro.zeros(3)
    assert p.tolist() == [0.0, 0.0, 0.0] and p.requires_grad
    assert np.shares_memory(np.asarray(p), p.data.numpy())


def test_a_manual_sgd_step_through_data_as_in_pytorch_tutorials():
    w = ferro.tensor([1.0, -1.0], requires_grad=True)
    (w * w).sum().backward()
    w.data -= 0.25 * w.grad.data
    w.grad.data.zero_()
    assert w.tolist() == [0.5, -0.5] and w.grad.tolist() == [0.0, 0.0]


@pytest.mark.torch
@pytest.mark.parametrize(
    "index", [i for i in INDEXES if getattr(i[0], "step", None) != -2], ids=repr
)
def test_setitem_matches_torch(index):
    import torch

    x = np.random.default_rng(0).normal(size=(3, 4))
    v = np.random.default_rng(1).normal(size=np.empty((3, 4))[index].shape)
    results = []
    for lib in (ferro, torch):
        xt = lib.tensor(x, requires_grad=True)
        vt = lib.tensor(v, requires_grad=True)
        y = xt * 1.0
        y[tuple(lib.tensor(i) if isinstance(i, np.ndarray) else i for i in index)] = vt
        y[:, 1:3] *= 2
        (y * y).sum().backward()
        results.append([t.detach().numpy() for t in (y, xt.grad, vt.grad)])
    for ours, theirs in zip(*results, strict=True):
        np.testing.assert_allclose(ours, theirs)


def test_setitem_and_index_put_have_second_derivatives():
    from ferro.testing import gradgradcheck

    rng = np.random.default_rng(0)
    x = ferro.tensor(rng.random((4, 3)), requires_grad=True)
    v = ferro.tensor(rng.random((2, 3)), requires_grad=True)

    def assign(x, v):
        y = x * 1.0
        y[1:3] = v * v
        y[:, :2] *= 3
        return (y * y).sum()

    def put(x, v):
        y = ferro.index_put(x * x, (ferro.tensor([0, 2]),), v * v, accumulate=True)
        return (y**2).sum()

    assert gradgradcheck(assign, (x, v)) and gradgradcheck(put, (x, v))


def test_add_and_sub_take_pytorchs_alpha():
    # word_language_model's manual SGD: p.data.add_(p.grad, alpha=-lr)
    import ferro

    p = ferro.tensor([1.0, 2.0])
    g = ferro.tensor([0.5, 1.0])
    assert p.add_(g, alpha=-2.0) is p
    np.testing.assert_allclose(p.numpy(), [0.0, 0.0])
    p.sub_(g, alpha=2)
    np.testing.assert_allclose(p.numpy(), [-1.0, -2.0])
    np.testing.assert_allclose(p.add(g, alpha=3).numpy(), [0.5, 1.0])
    np.testing.assert_allclose(p.sub(g).numpy(), [-1.5, -3.0])
