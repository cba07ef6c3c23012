"""The PyTorch surface of issue s6: the gamma family and erfinv, the scans, the NaN-aware and
order statistics, and the shape/linalg helpers. NumPy (or mpmath) references sit in the op
database (tests/ops/opdb); here PyTorch is the oracle for the conventions (ties, NaNs, poles,
argument names), plus what the database cannot say: errors, Tensor methods, second order."""

import types

import numpy as np
import pytest

import ferro
from ferro.errors import (
    ArgumentError,
    ArgumentTypeError,
    DtypeError,
    IndexOutOfRangeError,
    ShapeError,
)
from ferro.ops import scan
from ferro.testing import gradcheck, gradgradcheck


def _t(a):
    return ferro.tensor(np.asarray(a, dtype=np.float64))


@pytest.mark.torch
def test_special_functions_match_torch_including_poles_and_signed_zeros():
    import torch

    x = np.array([-2.5, -2.0, -1.0, -0.0, 0.0, 1e-8, 0.5, 1.0, 1.4616, 3.0, 7.3, 25.0, 1e5])
    tx = torch.tensor(x)
    for name in ("lgamma", "digamma"):
        np.testing.assert_allclose(
            getattr(ferro, name)(_t(x)).numpy(),
            getattr(torch, name)(tx).numpy(),
            rtol=1e-12,
            atol=1e-13,
        )
    finite = x > 0
    for n in (1, 2, 4):
        np.testing.assert_allclose(
            ferro.polygamma(n, _t(x[finite])).numpy(),
            torch.polygamma(n, tx[torch.tensor(finite)]).numpy(),
            rtol=1e-8,  # PyTorch's own is within 5e-10 (polygamma(1, 0.5) = pi**2 / 2)
        )
    u = np.array([-1.0, -0.999999, -0.5, 0.0, 1e-10, 0.3, 0.9, 0.99999999, 1.0, 1.5])
    np.testing.assert_allclose(
        ferro.erfinv(_t(u)).numpy(), torch.erfinv(torch.tensor(u)).numpy(), rtol=1e-12
    )


def test_special_functions_are_twice_differentiable_and_keep_float32():
    x = _t([0.3, 1.7, 2.5]).requires_grad_()
    u = _t([-0.7, 0.2, 0.6]).requires_grad_()
    assert gradgradcheck(ferro.lgamma, (x,)) and gradgradcheck(ferro.digamma, (x,))
    assert gradgradcheck(lambda v: ferro.polygamma(2, v), (x,))
    assert gradgradcheck(ferro.erfinv, (u,))
    f32 = ferro.tensor([0.25, 0.5])
    for f in (ferro.lgamma, ferro.digamma, ferro.erfinv, lambda v: v.polygamma(1)):
        assert f(f32).dtype == ferro.float32
    with pytest.raises(ArgumentTypeError):
        ferro.polygamma(-1, f32)
    with pytest.raises(ArgumentTypeError):
        ferro.polygamma(1.0, f32)


@pytest.mark.torch
def test_cummax_cummin_indices_follow_torch_at_ties_and_nans():
    import torch

    x = np.array([[1.0, 3, 2, 3, np.nan, 5, 0], [-1, -2, -2, 4, 4, 1, 7]])
    for name in ("cummax", "cummin"):
        got = getattr(ferro, name)(_t(x), 1)
        want = getattr(torch, name)(torch.tensor(x), 1)
        np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())
        np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
    t = _t(x[1]).requires_grad_()
    ferro.cummax(t, 0).values.sum().backward()
    tt = torch.tensor(x[1], requires_grad=True)
    torch.cummax(tt, 0).values.sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), tt.grad.numpy())


@pytest.mark.torch
def test_logcumsumexp_matches_torch_far_apart_and_its_gradient():
    import torch

    z = np.random.default_rng(0).normal(size=(3, 9)) * 300
    z[0, 0] = -1e4
    g = np.random.default_rng(1).normal(size=z.shape)
    t, tt = _t(z).requires_grad_(), torch.tensor(z, requires_grad=True)
    y, ty = ferro.logcumsumexp(t, 1), torch.logcumsumexp(tt, 1)
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-13)
    y.backward(_t(g))
    ty.backward(torch.tensor(g))
    np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=1e-10, atol=1e-12)
    assert np.isfinite(t.grad.numpy()).all()


def test_scans_are_twice_differentiable():
    x = _t(np.random.default_rng(2).permutation(12).reshape(3, 4) / 4.0).requires_grad_()
    assert gradgradcheck(lambda v: ferro.logcumsumexp(v, 1), (x,))
    assert gradgradcheck(lambda v: ferro.logcumsumexp(v, 0), (x,))
    assert gradgradcheck(lambda v: ferro.cummin(v, 1).values, (x,))


def test_the_doubling_scan_matches_accumulate():
    # The path CuPy takes, run here on NumPy under another module name.
    ns = types.SimpleNamespace(**{k: getattr(np, k) for k in dir(np) if not k.startswith("_")})
    ns.__name__ = "doubling"
    x = np.random.default_rng(3).normal(size=(4, 13)) * 50
    x[1, 5] = np.nan
    for name in ("maximum", "minimum", "logaddexp"):
        np.testing.assert_allclose(
            scan._scan(ns, name, x), getattr(np, name).accumulate(x, axis=-1), rtol=1e-13
        )
    for largest in (True, False):
        for got, want in zip(
            scan._cumextreme(ns, x, largest), scan._cumextreme(np, x, largest), strict=True
        ):
            np.testing.assert_array_equal(got, want)


def test_scans_reject_bad_arguments():
    with pytest.raises(DtypeError):
        ferro.logcumsumexp(ferro.tensor([1, 2]), 0)
    with pytest.raises(ArgumentTypeError):
        ferro.cummax(ferro.ones(3), None)
    with pytest.raises(IndexOutOfRangeError):
        ferro.cummin(ferro.ones(3), 1)


@pytest.mark.torch
def test_nan_statistics_and_kthvalue_match_torch():
    import torch

    x = np.array([[1.0, np.nan, 2, 5], [3, 1, 4, 1], [np.nan, 0.5, np.nan, 2]])
    tx = torch.tensor(x)
    for dim in (None, 0, 1):
        kw = {} if dim is None else {"dim": dim}
        np.testing.assert_allclose(ferro.nansum(_t(x), **kw).numpy(), torch.nansum(tx, **kw))
        np.testing.assert_allclose(ferro.nanmean(_t(x), **kw).numpy(), torch.nanmean(tx, **kw))
        got, want = ferro.nanmedian(_t(x), **kw), torch.nanmedian(tx, **kw)
        if dim is None:
            assert got.item() == want.item()
        else:
            np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())
            np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
    y = np.array([[3.0, 1, 2, 7], [5, 4, 9, 0]])
    for k, dim, keep in ((2, 1, False), (1, 0, True), (4, -1, False)):
        got, want = (
            ferro.kthvalue(_t(y), k, dim, keep),
            torch.kthvalue(torch.tensor(y), k, dim, keep),
        )
        np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())
        np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
    with pytest.raises(IndexOutOfRangeError):
        ferro.kthvalue(_t(y), 5)
    with pytest.raises(DtypeError):
        ferro.nanmean(ferro.tensor([1, 2]))


@pytest.mark.torch
def test_shape_helpers_match_torch():
    import torch

    x = np.random.default_rng(4).normal(size=(3, 7))
    tx = torch.tensor(x)
    for spec in (3, [1, 5], [-2, 10], [5, 2]):
        got = ferro.tensor_split(_t(x), spec, 1)
        want = torch.tensor_split(tx, spec, 1)
        assert [g.shape for g in got] == [tuple(w.shape) for w in want]
    idx = np.array([[0, 6, 2]])
    np.testing.assert_array_equal(
        ferro.take_along_dim(_t(x), ferro.tensor(idx), 1).numpy(),
        torch.take_along_dim(tx, torch.tensor(idx), 1).numpy(),
    )
    y = np.random.default_rng(5).normal(size=(2, 3, 4))
    for k in range(-3, 6):
        np.testing.assert_array_equal(
            ferro.rot90(_t(y), k, (2, 0)).numpy(), torch.rot90(torch.tensor(y), k, (2, 0)).numpy()
        )
    for args in ((3, 4), (4, 3, 1), (4, 3, -2), (0, 3)):
        np.testing.assert_array_equal(ferro.tril_indices(*args).numpy(), torch.tril_indices(*args))
        np.testing.assert_array_equal(ferro.triu_indices(*args).numpy(), torch.triu_indices(*args))
    assert ferro.trace(_t(x[:, :3])).item() == pytest.approx(torch.trace(tx[:, :3]).item())
    v = np.array([0.0, 1.5, -2.0])
    np.testing.assert_allclose(
        ferro.vander(_t(v), 4, True).numpy(), torch.vander(torch.tensor(v), 4, True)
    )
    runs = np.array([1, 1, 2, 2, 2, 1, 3, 3])
    got = ferro.unique_consecutive(ferro.tensor(runs), return_inverse=True, return_counts=True)
    want = torch.unique_consecutive(torch.tensor(runs), return_inverse=True, return_counts=True)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g.numpy(), w.numpy())
    h = np.random.default_rng(6).normal(size=200)
    np.testing.assert_array_equal(
        ferro.histc(_t(h), 9, -1, 2).numpy(), torch.histc(torch.tensor(h), 9, -1, 2).numpy()
    )


def test_shape_helpers_reject_bad_arguments():
    with pytest.raises(ShapeError):
        ferro.trace(ferro.ones(2, 2, 2))
    with pytest.raises(ArgumentError):
        ferro.tensor_split(ferro.ones(4), 0)
    with pytest.raises(ShapeError):
        ferro.take_along_dim(ferro.ones(2, 3), ferro.tensor([0]), 1)
    with pytest.raises(ArgumentError):
        ferro.rot90(ferro.ones(2, 2), 1, (0, 0))
    with pytest.raises(ShapeError):
        ferro.block_diag(ferro.ones(2, 2, 2))
    with pytest.raises(ShapeError):
        ferro.vander(ferro.ones(2, 2))
    with pytest.raises(ArgumentError):
        ferro.tril_indices(-1, 2)
    with pytest.raises(ArgumentError):
        ferro.histc(ferro.ones(3), bins=0)
    with pytest.raises(ArgumentError):
        ferro.histc(ferro.ones(3), min=2, max=1)
    with pytest.raises(ShapeError):
        ferro.addr(ferro.ones(2, 2), ferro.ones(2, 1), ferro.ones(2))


def test_tensor_methods_reach_the_new_ops():
    t = _t([[0.5, 1.5], [2.0, 0.25]])
    assert t.lgamma().allclose(ferro.lgamma(t)) and t.polygamma(1).allclose(ferro.polygamma(1, t))
    assert t.cummax(1).indices.tolist() == [[0, 1], [0, 0]]
    assert t.logcumsumexp(0).allclose(ferro.logcumsumexp(t, 0))
    assert t.trace().item() == 0.75 and t.rot90().tolist() == [[1.5, 0.25], [0.5, 2.0]]
    assert t.kthvalue(1).values.tolist() == [0.5, 0.25]
    assert [p.shape for p in t.tensor_split(2, 1)] == [(2, 1), (2, 1)]
    assert t.addr(_t([1, 2]), _t([3, 4])).allclose(t + _t([[3, 4], [6, 8]]))
    assert (t / 3).erfinv().allclose(ferro.erfinv(t / 3)) and t.nansum().item() == 4.25
    assert gradcheck(lambda v: v.addbmm(v.unsqueeze(0), v.unsqueeze(0)), (t.requires_grad_(),))


@pytest.mark.torch
def test_stacking_and_small_helpers_match_torch():
    import torch

    rng = np.random.default_rng(7)
    a, b, v = rng.normal(size=(2, 3)), rng.normal(size=(2, 3)), rng.normal(size=3)
    for name in ("hstack", "vstack", "dstack", "column_stack", "row_stack"):
        for parts in ([a, b], [v, v]):
            got = getattr(ferro, name)([_t(p) for p in parts]).numpy()
            np.testing.assert_array_equal(
                got, getattr(torch, name)([torch.tensor(p) for p in parts])
            )
    for name in ("atleast_1d", "atleast_2d", "atleast_3d"):
        for p in (np.array(1.5), v, a):
            assert getattr(ferro, name)(_t(p)).shape == tuple(
                getattr(torch, name)(torch.tensor(p)).shape
            )
    idx = np.array([[0, -1], [5, 2]])
    np.testing.assert_array_equal(
        ferro.take(_t(a), ferro.tensor(idx)).numpy(), torch.take(torch.tensor(a), torch.tensor(idx))
    )
    x = rng.normal(size=(3, 5))
    for q, dim, keep, how in ((0.3, None, False, "linear"), (0.5, 1, True, "nearest")):
        np.testing.assert_allclose(
            ferro.quantile(_t(x), q, dim, keep, interpolation=how).numpy(),
            torch.quantile(torch.tensor(x), q, dim, keep, interpolation=how).numpy(),
        )
    qs = np.array([0.1, 0.9])
    np.testing.assert_allclose(
        ferro.quantile(_t(x), _t(qs), 0).numpy(),
        torch.quantile(torch.tensor(x), torch.tensor(qs), 0),
    )
    y = rng.normal(size=(4, 3, 5))
    np.testing.assert_allclose(
        ferro.tensordot(_t(y), _t(x), ([1, 2], [0, 1])).numpy(),
        torch.tensordot(torch.tensor(y), torch.tensor(x), ([1, 2], [0, 1])).numpy(),
    )
    np.testing.assert_allclose(
        ferro.kron(_t(a), _t(v)).numpy(), torch.kron(torch.tensor(a), torch.tensor(v))
    )
    np.testing.assert_allclose(
        ferro.inner(_t(a), _t(b)).numpy(), torch.inner(torch.tensor(a), torch.tensor(b))
    )
    for mode in (None, "trunc", "floor"):
        got = ferro.divide(ferro.tensor([7, -7]), 2, rounding_mode=mode)
        want = torch.divide(torch.tensor([7, -7]), 2, rounding_mode=mode)
        assert (
            got.tolist() == want.tolist()
            and got.dtype.is_floating_point == want.is_floating_point()
        )
    mm = ferro.aminmax(_t(x), dim=1)
    np.testing.assert_array_equal(mm.max.numpy(), torch.aminmax(torch.tensor(x), dim=1).max.numpy())
    assert ferro.count_nonzero(ferro.tensor([[0, 1], [2, 0]]), 0).tolist() == [1, 1]
    assert ferro.bincount(ferro.tensor([1, 1, 3])).tolist() == [0, 2, 0, 1]


def test_helpers_reject_bad_arguments():
    with pytest.raises(ShapeError):
        ferro.t(ferro.ones(2, 2, 2))
    with pytest.raises(ShapeError):
        ferro.fliplr(ferro.ones(3))
    with pytest.raises(ArgumentError):
        ferro.quantile(ferro.ones(3), 1.5)
    with pytest.raises(ArgumentError):
        ferro.quantile(ferro.ones(3), 0.5, interpolation="cubic")
    with pytest.raises(ShapeError):
        ferro.tensordot(ferro.ones(2, 3), ferro.ones(2, 3), 1)
    with pytest.raises(ArgumentError):
        ferro.divide(ferro.ones(2), 2, rounding_mode="round")
    with pytest.raises(ArgumentError):
        ferro.bincount(ferro.tensor([-1, 2]))
