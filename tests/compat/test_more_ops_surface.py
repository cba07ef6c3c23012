"""The rest of issue 13's item 7 (random sampling, unique, bucketize/searchsorted, where(cond),
cross, cdist, einsum with '...', addmm/addmv/baddbmm, channel and alpha dropout, ferro.Size)
and item 3's promotion of integer tensors with Python floats: NumPy references always, PyTorch
as an oracle when installed."""

import numpy as np
import pytest

import ferro
import ferro.nn.functional as F
from ferro.errors import ArgumentError, DtypeError, ShapeError


def test_size_is_a_tuple_with_numel():
    s = ferro.zeros(2, 3, 4).shape
    assert isinstance(s, ferro.Size) and isinstance(s, tuple) and s == (2, 3, 4)
    assert s.numel() == 24 and ferro.zeros(2, 3).size() == (2, 3) and s[1:] == (3, 4)


def test_integer_tensors_with_python_floats_give_the_default_dtype():
    i = ferro.tensor([1, 2, 3])
    for out in (i + 0.5, 0.5 * i, i - 1.5, i / 2, i / i, 3 / i):
        assert out.dtype == ferro.float32
    assert (i + 1).dtype == ferro.int64
    assert (ferro.tensor([1.0], dtype=ferro.float64) / i).dtype == ferro.float64
    ferro.set_default_dtype(ferro.float64)
    try:
        assert (i * 0.5).dtype == ferro.float64
    finally:
        ferro.set_default_dtype(ferro.float32)


def test_where_with_one_argument_is_nonzero_as_tuple():
    c = ferro.tensor([[True, False], [False, True]])
    rows, cols = ferro.where(c)
    assert rows.tolist() == [0, 1] and cols.tolist() == [0, 1]


def test_multinomial_with_and_without_replacement():
    g = ferro.Generator().manual_seed(0)
    w = ferro.tensor([0.1, 0.0, 0.6, 0.3])
    draws = ferro.multinomial(w, 4000, replacement=True, generator=g)
    assert draws.dtype == ferro.int64 and draws.shape == (4000,)
    freq = np.bincount(draws.numpy(), minlength=4) / 4000
    np.testing.assert_allclose(freq, [0.1, 0.0, 0.6, 0.3], atol=0.03)
    rows = ferro.multinomial(ferro.ones(5, 6), 6, generator=g)
    assert all(sorted(r) == list(range(6)) for r in rows.tolist())  # a permutation per row
    with pytest.raises(ArgumentError):
        ferro.multinomial(w, 4)  # only 3 non-zero categories
    again = ferro.multinomial(w, 10, True, generator=ferro.Generator().manual_seed(0))
    assert again.tolist() == draws[:10].tolist()


def test_bernoulli_and_normal():
    g = ferro.Generator().manual_seed(1)
    b = ferro.bernoulli(ferro.full((10000,), 0.3), generator=g)
    assert b.dtype == ferro.float32 and set(np.unique(b.numpy())) <= {0.0, 1.0}
    assert abs(b.mean().item() - 0.3) < 0.02
    with pytest.raises(ArgumentError):
        ferro.bernoulli(ferro.tensor([1.5]))
    n = ferro.normal(2.0, 3.0, (20000,), generator=g)
    assert abs(n.mean().item() - 2.0) < 0.1 and abs(n.std().item() - 3.0) < 0.1
    mean = ferro.zeros(3, requires_grad=True)
    std = ferro.ones(3, requires_grad=True)
    ferro.normal(mean, std, generator=g).sum().backward()
    assert mean.grad.tolist() == [1.0, 1.0, 1.0] and std.grad is not None


def test_unique_searchsorted_bucketize_against_numpy():
    x = np.array([[3, 1, 2], [3, 1, 2], [0, 5, 1]])
    values, inverse, counts = ferro.unique(ferro.tensor(x), return_inverse=True, return_counts=True)
    v, inv, cnt = np.unique(x, return_inverse=True, return_counts=True)
    assert values.tolist() == v.tolist() and counts.tolist() == cnt.tolist()
    assert inverse.shape == x.shape and inverse.numpy().ravel().tolist() == inv.ravel().tolist()
    assert ferro.unique(ferro.tensor(x), dim=0).tolist() == [[0, 5, 1], [3, 1, 2]]
    seq = ferro.tensor([1.0, 2.0, 2.0, 4.0])
    vals = ferro.tensor([2.0, 3.0, 5.0, 0.0])
    assert ferro.searchsorted(seq, vals).tolist() == [1, 3, 4, 0]
    assert ferro.searchsorted(seq, vals, side="right").tolist() == [3, 3, 4, 0]
    shuffled = ferro.tensor([4.0, 1.0, 2.0])
    order = ferro.argsort(shuffled)
    assert ferro.searchsorted(shuffled, ferro.tensor([3.0]), sorter=order).tolist() == [2]
    assert ferro.bucketize(vals, seq, right=True).tolist() == [3, 3, 4, 0]
    with pytest.raises(ShapeError):
        ferro.bucketize(vals, ferro.ones(2, 2))


def test_channel_dropout_zeroes_whole_channels():
    ferro.manual_seed(0)
    x = ferro.ones(8, 16, 5, 5)
    y = F.dropout2d(x, 0.5)
    per_channel = y.numpy().reshape(8, 16, -1)
    assert np.all((per_channel == 0).all(-1) | (per_channel == 2.0).all(-1))
    assert 0.2 < (per_channel[..., 0] == 0).mean() < 0.8
    m = ferro.nn.Dropout1d(0.3).eval()
    assert m(x[:, :, 0]) is x[:, :, 0] or m(x[:, :, 0]).tolist() == x[:, :, 0].tolist()
    assert repr(ferro.nn.Dropout3d(0.2)) == "Dropout3d(p=0.2, inplace=False)"
    with pytest.raises(ShapeError):
        F.dropout2d(ferro.ones(3), 0.5)


def test_alpha_dropout_keeps_mean_and_variance():
    ferro.manual_seed(0)
    x = ferro.randn(200000)
    y = F.alpha_dropout(x, 0.2, training=True)
    assert abs(y.mean().item()) < 0.02 and abs(y.std().item() - 1.0) < 0.02
    assert F.alpha_dropout(x, 0.2) is x  # training defaults to False, as in PyTorch
    assert ferro.nn.AlphaDropout(0.2).eval()(x) is x


@pytest.mark.torch
def test_new_ops_match_torch():
    import torch

    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 4, 5))
    ours = ferro.einsum("...ij,...jk", ferro.tensor(a), ferro.tensor(b)).numpy()
    theirs = torch.einsum("...ij,...jk", torch.tensor(a), torch.tensor(b)).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)

    def grads(lib, fn, *arrays):
        ts = [lib.tensor(x, requires_grad=True) for x in arrays]
        out = fn(lib, *ts)
        out.sum().backward()
        return [out.detach().numpy()] + [t.grad.numpy() for t in ts]

    cases = [
        (lambda lib, x, y: lib.cross(x, y, dim=1), (3, 3), (3, 3)),
        (lambda lib, x, y: lib.cdist(x, y), (4, 3), (5, 3)),
        (lambda lib, x, y: lib.cdist(x, y, p=1.0), (2, 4, 3), (2, 5, 3)),
        (lambda lib, x, y: lib.cdist(x, y, p=3.0), (4, 3), (5, 3)),
        (lambda lib, i, x: lib.addmm(i, x, x.t(), beta=0.5, alpha=2), (3, 3), (3, 2)),
        (lambda lib, i, x: lib.baddbmm(i, x, x.mT, alpha=0.5), (2, 3, 3), (2, 3, 4)),
    ]
    for fn, *shapes in cases:
        arrays = [rng.normal(size=s) for s in shapes]
        for o, t in zip(grads(ferro, fn, *arrays), grads(torch, fn, *arrays), strict=True):
            np.testing.assert_allclose(o, t, rtol=1e-10, atol=1e-12)

    x = np.array([3, 1, 2, 3, 1, 7])
    for kw in ({}, {"return_inverse": True}, {"return_counts": True, "return_inverse": True}):
        o, t = ferro.unique(ferro.tensor(x), **kw), torch.unique(torch.tensor(x), **kw)
        o, t = (o, t) if isinstance(o, tuple) else ((o,), (t,))
        for u, v in zip(o, t, strict=True):
            assert u.tolist() == v.tolist()
    seq, vals = np.array([1.0, 2.0, 2.0, 4.0]), np.array([[2.0, 3.0], [5.0, 0.0]])
    for right in (False, True):
        o = ferro.bucketize(ferro.tensor(vals), ferro.tensor(seq), right=right)
        t = torch.bucketize(torch.tensor(vals), torch.tensor(seq), right=right)
        assert o.tolist() == t.tolist()
    i = [1, 2, 3]
    for expr in (lambda L: L.tensor(i) + 0.5, lambda L: L.tensor(i) / 2):
        assert str(expr(ferro).dtype).split(".")[-1] == str(expr(torch).dtype).split(".")[-1]
    t = torch.tensor(i)
    with pytest.raises(RuntimeError):
        t.add_(0.5)
    with pytest.raises(DtypeError):
        ferro.tensor(i).add_(0.5)


def test_isclose_allclose_equal():
    a = ferro.tensor([1.0, float("nan"), 2.0])
    b = ferro.tensor([1.0 + 1e-7, float("nan"), 2.5])
    assert ferro.isclose(a, b).tolist() == [True, False, False]
    assert ferro.isclose(a, b, equal_nan=True).tolist() == [True, True, False]
    assert ferro.allclose(a[:1], b[:1]) is True and ferro.allclose(a, b, atol=1.0) is False
    assert ferro.allclose(a, b, atol=1.0, equal_nan=True) is True
    assert ferro.equal(ferro.tensor([1, 2]), ferro.tensor([1, 2])) is True
    assert not ferro.equal(ferro.ones(2), ferro.ones(3)) and ferro.ones(2).allclose(ferro.ones(2))


# The char-RNN generation tutorial's ``target_line_tensor.unsqueeze_(-1)`` (a gap found by the
# ports): the in-place shape methods, for tensors without history.
def test_in_place_shape_methods_reshape_the_tensor_itself():
    from ferro.errors import GraphError

    x = ferro.tensor([1, 2, 3])
    view = x[:]
    assert x.unsqueeze_(-1) is x and x.shape == (3, 1) and view.shape == (3,)
    x[0, 0] = 7  # still the same memory
    assert view.tolist() == [7, 2, 3]
    assert x.t_().shape == (1, 3) and x.squeeze_(0).shape == (3,)
    assert ferro.zeros(2, 3, 4).transpose_(0, 2).shape == (4, 3, 2)
    assert ferro.zeros(1, 2, 1).squeeze_().shape == (2,)
    w = ferro.ones(2, requires_grad=True)
    with pytest.raises(GraphError, match="unsqueeze_: a leaf tensor that requires grad"):
        w.unsqueeze_(0)
    with pytest.raises(GraphError, match=r"use t = t.unsqueeze\(...\) instead"):
        (w * 2).unsqueeze_(0)
    with ferro.no_grad():
        assert w.unsqueeze_(0).shape == (1, 2) and w.requires_grad
    (w.sum() * 2).backward()
    assert w.grad.shape == (1, 2)


@pytest.mark.torch
def test_in_place_shape_methods_match_torch():
    torch = pytest.importorskip("torch")
    a = np.arange(24.0).reshape(2, 1, 3, 4)
    for name, args in (
        ("unsqueeze_", (1,)),
        ("squeeze_", (1,)),
        ("squeeze_", ()),
        ("transpose_", (0, 3)),
    ):
        ours, theirs = getattr(ferro.tensor(a), name)(*args), getattr(torch.tensor(a), name)(*args)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    np.testing.assert_array_equal(
        ferro.tensor(a[0, 0]).t_().numpy(), torch.tensor(a[0, 0]).t_().numpy()
    )


# pytorch/examples mnist_rnn applies nn.Dropout2d to the LSTM's (N, 64) output: PyTorch reads
# every rank as (N, C, ...) with a warning (a 3-D input as (N, C, L)); ferro raised ShapeError
# on 2-D and read 3-D as (C, H, W) (gaps found by the ports).
@pytest.mark.parametrize("shape", [(40, 50), (20, 30, 6), (10, 12, 2, 2, 2)])
def test_dropout2d_draws_per_sample_and_channel_at_every_rank(shape):
    def granularity(y):
        zero = np.asarray(y).reshape(shape[0], shape[1], -1) == 0
        whole = (zero.all(-1) == zero.any(-1)).all()  # each (n, c) slice all kept or all dropped
        return whole, 0.3 < zero[..., 0].mean() < 0.7, len({tuple(r) for r in zero[..., 0]}) > 1

    ferro.manual_seed(0)
    with pytest.warns(UserWarning, match=f"dropout2d: a {len(shape)}-D input is read as"):
        y = ferro.nn.Dropout2d(0.5)(ferro.ones(*shape))
    assert granularity(y.numpy()) == (True, True, True)
    try:
        import torch
    except ImportError:
        return
    with pytest.warns(UserWarning):
        expected = granularity(torch.nn.Dropout2d(0.5)(torch.ones(*shape)).numpy())
    assert expected == (True, True, True)
