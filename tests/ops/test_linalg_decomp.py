"""ferro.linalg beyond the op database (tests/ops/opdb/decomp.py has the registered ops'
forward, gradcheck and double backward): the composites' gradients, PyTorch as the oracle for
values and gradients, PyTorch's argument conventions, and bad input."""

from __future__ import annotations

import math
import pathlib
import re

import numpy as np
import pytest

import ferro
from ferro.errors import (
    ArgumentError,
    ArgumentTypeError,
    DtypeError,
    FerroError,
    NotSupportedError,
    ShapeError,
)
from ferro.testing import gradcheck, gradgradcheck

LA = ferro.linalg
RNG = np.random.default_rng(0)


def _t(a, grad=True):
    return ferro.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


def _wc(*shape):
    """Well-conditioned square matrices."""
    return RNG.normal(size=shape) + 3 * np.eye(shape[-1])


# -- composites: gradients against central differences, first and second order ---------------

COMPOSITES = [
    ("logdet", lambda a: ferro.logdet(a @ a.mT), (_wc(2, 3, 3),)),
    ("solve right", lambda a, b: LA.solve(a, b, left=False), (_wc(3, 3), RNG.normal(size=(2, 3)))),
    ("solve bcast", LA.solve, (_wc(2, 1, 3, 3), RNG.normal(size=(4, 3, 2)))),
    ("matrix_power 3", lambda a: LA.matrix_power(a, 3), (_wc(2, 3, 3),)),
    ("matrix_power -2", lambda a: LA.matrix_power(a, -2), (_wc(3, 3),)),
    ("pinv tall", LA.pinv, (RNG.normal(size=(4, 3)),)),
    ("pinv wide batched", LA.pinv, (RNG.normal(size=(2, 2, 3)),)),
    ("pinverse", ferro.pinverse, (RNG.normal(size=(3, 2)),)),
    (
        "lstsq",
        lambda a, b: LA.lstsq(a, b).solution,
        (RNG.normal(size=(2, 4, 3)), RNG.normal(size=(4, 1))),
    ),
    ("svdvals", LA.svdvals, (RNG.normal(size=(3, 4)),)),
    ("eigvalsh", lambda a: LA.eigvalsh(a + a.mT, UPLO="U"), (RNG.normal(size=(2, 3, 3)),)),
    ("vector_norm 3", lambda x: LA.vector_norm(x, 3, dim=-1), (RNG.normal(size=(2, 4)),)),
    ("vector_norm 0.5", lambda x: LA.vector_norm(x, 0.5), (RNG.normal(size=(5,)),)),
    (
        "vector_norm -inf",
        lambda x: LA.vector_norm(x, -math.inf, 0, True),
        (RNG.normal(size=(4, 2)),),
    ),
    ("matrix_norm fro", LA.matrix_norm, (RNG.normal(size=(2, 3, 4)),)),
    ("matrix_norm nuc", lambda a: LA.matrix_norm(a, "nuc"), (RNG.normal(size=(3, 4)),)),
    ("matrix_norm 2", lambda a: LA.matrix_norm(a, 2, keepdim=True), (RNG.normal(size=(2, 3, 3)),)),
    ("matrix_norm -2", lambda a: LA.matrix_norm(a, -2), (RNG.normal(size=(4, 3)),)),
    ("matrix_norm 1", lambda a: LA.matrix_norm(a, 1, dim=(0, 2)), (RNG.normal(size=(3, 2, 4)),)),
    ("matrix_norm -inf", lambda a: LA.matrix_norm(a, -math.inf), (RNG.normal(size=(3, 4)),)),
    ("norm", lambda a: LA.norm(a, dim=(0, 1)), (RNG.normal(size=(3, 4)),)),
    ("vecdot", LA.vecdot, (RNG.normal(size=(2, 3)), RNG.normal(size=(3,)))),
    (
        "multi_dot",
        lambda a, b, c: LA.multi_dot([a, b, c]),
        tuple(RNG.normal(size=s) for s in [(3,), (3, 4), (4, 2)]),
    ),
    ("cross", LA.cross, (RNG.normal(size=(2, 3)), RNG.normal(size=(2, 3)))),
    ("svd old", lambda a: ferro.svd(a).S, (RNG.normal(size=(4, 3)),)),
    (
        "svd full",
        lambda a: (lambda u, s, vh: (u[..., :2] * u[..., :1, :2], vh * vh[..., :1]))(
            *LA.svd(a, full_matrices=True)
        ),
        (RNG.normal(size=(4, 2)),),
    ),
]


@pytest.mark.parametrize("name,fn,args", COMPOSITES, ids=[c[0] for c in COMPOSITES])
def test_composite_gradients(name, fn, args):
    ts = tuple(_t(a) for a in args)
    assert gradcheck(fn, ts)
    assert gradgradcheck(fn, ts)


# -- PyTorch as the oracle ---------------------------------------------------------------------


def _both(*arrays):
    torch = pytest.importorskip("torch")
    f = [_t(a) for a in arrays]
    t = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]
    return torch, f, t


def _flat(out):
    outs = out if isinstance(out, tuple) else (out,)
    return [o for o in outs if o is not None]


ORACLE = [
    ("inv", lambda L, a: L.linalg.inv(a), (_wc(2, 3, 3),)),
    ("det", lambda L, a: L.linalg.det(a), (_wc(2, 3, 3),)),
    ("slogdet", lambda L, a: L.linalg.slogdet(a)[1], (_wc(3, 3) - 6 * np.eye(3),)),
    ("logdet", lambda L, a: L.logdet(a @ a.mT), (_wc(3, 3),)),
    ("solve", lambda L, a, b: L.linalg.solve(a, b), (_wc(2, 3, 3), RNG.normal(size=(3,)))),
    (
        "solve batch vec",
        lambda L, a, b: L.linalg.solve(a, b),
        (_wc(2, 3, 3), RNG.normal(size=(2, 3))),
    ),
    (
        "solve left=False",
        lambda L, a, b: L.linalg.solve(a, b, left=False),
        (_wc(3, 3), RNG.normal(size=(2, 3))),
    ),
    ("cholesky", lambda L, a: L.linalg.cholesky(a @ a.mT, upper=True), (_wc(2, 3, 3),)),
    ("qr", lambda L, a: L.linalg.qr(a), (RNG.normal(size=(4, 3)),)),
    ("qr wide", lambda L, a: L.linalg.qr(a), (RNG.normal(size=(2, 4)),)),
    (
        "qr complete square",
        lambda L, a: L.linalg.qr(a, mode="complete"),
        (RNG.normal(size=(3, 3)),),
    ),
    ("eigvalsh", lambda L, a: L.linalg.eigvalsh(a + a.mT), (RNG.normal(size=(2, 4, 4)),)),
    (
        "eigh vectors",
        lambda L, a: (lambda w, v: v * v[..., :1, :])(*L.linalg.eigh(a + a.mT)),
        (RNG.normal(size=(3, 3)),),
    ),
    (
        "svd",
        lambda L, a: (lambda u, s, vh: (u * u[..., :1, :], s, vh * vh[..., :1]))(
            *L.linalg.svd(a, full_matrices=False)
        ),
        (RNG.normal(size=(2, 4, 3)),),
    ),
    ("svdvals", lambda L, a: L.linalg.svdvals(a), (RNG.normal(size=(3, 5)),)),
    ("pinv", lambda L, a: L.linalg.pinv(a), (RNG.normal(size=(4, 3)),)),
    ("matrix_power", lambda L, a: L.linalg.matrix_power(a, -3), (_wc(3, 3),)),
    ("matrix_power 0", lambda L, a: L.linalg.matrix_power(a, 0), (_wc(2, 3, 3),)),
    (
        "vector_norm",
        lambda L, a: L.linalg.vector_norm(a, 2.5, dim=(0, 1)),
        (RNG.normal(size=(3, 4)),),
    ),
    ("vector_norm 0", lambda L, a: L.linalg.vector_norm(a, 0), (RNG.normal(size=(3, 4)),)),
    ("matrix_norm nuc", lambda L, a: L.linalg.matrix_norm(a, "nuc"), (RNG.normal(size=(2, 3, 4)),)),
    (
        "matrix_norm inf",
        lambda L, a: L.linalg.matrix_norm(a, math.inf, keepdim=True),
        (RNG.normal(size=(3, 4)),),
    ),
    ("matrix_norm -1", lambda L, a: L.linalg.matrix_norm(a, -1), (RNG.normal(size=(3, 4)),)),
    ("norm default", lambda L, a: L.linalg.norm(a), (RNG.normal(size=(2, 3, 4)),)),
    ("norm 2-D ord", lambda L, a: L.linalg.norm(a, 2), (RNG.normal(size=(3, 4)),)),
    ("norm dim", lambda L, a: L.linalg.norm(a, 1, dim=1), (RNG.normal(size=(3, 4)),)),
    (
        "vecdot",
        lambda L, a, b: L.linalg.vecdot(a, b, dim=0),
        (RNG.normal(size=(3, 2)), RNG.normal(size=(3, 2))),
    ),
    (
        "multi_dot",
        lambda L, a, b, c: L.linalg.multi_dot([a, b, c]),
        tuple(RNG.normal(size=s) for s in [(2, 3), (3, 4), (4,)]),
    ),
    ("diagonal", lambda L, a: L.linalg.diagonal(a, offset=1), (RNG.normal(size=(2, 3, 4)),)),
    (
        "old svd",
        lambda L, a: (lambda u, s, v: (u * u[..., :1, :], s, v * v[..., :1, :]))(*L.svd(a)),
        (RNG.normal(size=(4, 3)),),
    ),
    (
        "lstsq",
        lambda L, a, b: (lambda r: (r.solution, r.residuals.detach(), r.singular_values))(
            L.linalg.lstsq(a, b, driver="gelsd")
        ),
        (RNG.normal(size=(2, 5, 3)), RNG.normal(size=(2, 5, 2))),
    ),
    (
        "lstsq wide",
        lambda L, a, b: L.linalg.lstsq(a, b, driver="gelsd").solution,
        (RNG.normal(size=(2, 4)), RNG.normal(size=(2, 3))),
    ),
    (
        "methods",
        lambda L, a: (a.inverse(), a.det(), a.logdet(), a.matrix_power(2), a.pinverse()),
        (_wc(3, 3),),
    ),
]


@pytest.mark.parametrize("name,fn,args", ORACLE, ids=[c[0] for c in ORACLE])
def test_values_and_gradients_match_pytorch(name, fn, args):
    torch, f, t = _both(*args)
    fo, to = _flat(fn(ferro, *f)), _flat(fn(torch, *t))
    assert len(fo) == len(to)
    for a, b in zip(fo, to, strict=True):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-9, atol=1e-10)
        assert tuple(a.shape) == tuple(b.shape)
    w = [RNG.normal(size=tuple(o.shape)) for o in to]
    if not any(o.requires_grad for o in fo):
        return
    sum(
        ((o * _t(g, False)).sum() for o, g in zip(fo, w, strict=True) if o.requires_grad)
    ).backward()
    sum(
        ((o * torch.tensor(g)).sum() for o, g in zip(to, w, strict=True) if o.requires_grad)
    ).backward()
    for a, b in zip(f, t, strict=True):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-7, atol=1e-9)


def test_result_types_are_named_tuples_as_pytorch():
    a = _t(_wc(3, 3))
    assert LA.slogdet(a)._fields == ("sign", "logabsdet")
    assert LA.qr(a)._fields == ("Q", "R")
    assert LA.eigh(a)._fields == ("eigenvalues", "eigenvectors")
    assert LA.svd(a)._fields == ("U", "S", "Vh")
    assert ferro.svd(a)._fields == ("U", "S", "V")
    assert not LA.slogdet(a).sign.requires_grad
    q, r = LA.qr(_t(RNG.normal(size=(4, 2))), mode="r")
    assert q.numel() == 0 and tuple(r.shape) == (2, 2)
    q, r = LA.qr(_t(RNG.normal(size=(4, 2))), mode="complete")
    assert tuple(q.shape) == (4, 4) and tuple(r.shape) == (4, 2)
    u, s, v = ferro.svd(_t(RNG.normal(size=(4, 2))), compute_uv=False)
    assert float(abs(u).sum()) == 0 and tuple(s.shape) == (2,)
    assert tuple(u.shape) == (4, 4) and tuple(v.shape) == (2, 2)  # PyTorch's shapes


def test_float32_stays_float32_and_empty_batches_work():
    a = ferro.tensor(_wc(2, 3, 3).astype(np.float32), requires_grad=True)
    for out in (LA.inv(a), LA.det(a), LA.cholesky(a @ a.mT), LA.svdvals(a), LA.eigh(a).eigenvalues):
        assert out.dtype == ferro.float32
    LA.det(a).sum().backward()
    assert a.grad.dtype == ferro.float32
    e = _t(np.zeros((0, 3, 3)))
    assert tuple(LA.inv(e).shape) == (0, 3, 3) and tuple(LA.det(e).shape) == (0,)


# -- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda: LA.inv(_t(np.ones((2, 3)))),
        lambda: LA.det(_t(np.ones(3))),
        lambda: LA.slogdet(_t(np.ones((3, 2)))),
        lambda: LA.cholesky(_t(np.ones((2, 3, 4)))),
        lambda: LA.eigh(_t(np.ones((2, 3)))),
        lambda: LA.solve(_t(np.eye(3)), _t(np.ones((4, 2)))),
        lambda: LA.solve(_t(np.ones((2, 3, 3))), _t(np.ones((3, 3, 1)))),
        lambda: LA.qr(_t(np.ones(3))),
        lambda: LA.svd(_t(np.ones(3))),
        lambda: LA.matrix_power(_t(np.ones((2, 3))), 2),
        lambda: LA.norm(_t(np.ones((2, 2, 2))), 2),
        lambda: LA.lstsq(_t(np.ones((3, 2))), _t(np.ones((2, 1)))),
    ],
)
def test_bad_shapes_raise_shape_error(call):
    with pytest.raises(ShapeError, match=r"linalg\.\w+.*\(|linalg\.\w+"):
        call()


def test_singular_and_indefinite_matrices_raise_linalg_error_naming_op_and_shape():
    with pytest.raises(LA.LinAlgError, match=r"linalg\.inv: .*\(2, 2\).*singular"):
        LA.inv(_t(np.ones((2, 2))))
    with pytest.raises(LA.LinAlgError, match=r"linalg\.solve: .*singular"):
        LA.solve(_t(np.zeros((3, 3))), _t(np.ones(3)))
    with pytest.raises(LA.LinAlgError, match=r"linalg\.cholesky: .*\(3, 3\).*positive-definite"):
        LA.cholesky(_t(-np.eye(3)))
    assert issubclass(LA.LinAlgError, FerroError) and issubclass(LA.LinAlgError, ValueError)
    a = _t(np.ones((2, 2)))
    sign, log = LA.slogdet(a)
    assert float(sign) == 0 and float(log) == -math.inf
    with pytest.raises(LA.LinAlgError, match=r"linalg\.inv \(in a backward\): .*\(2, 2\)"):
        log.backward()
    assert math.isnan(float(ferro.logdet(_t(np.diag([1.0, -1.0])))))


def test_bad_arguments_raise_typed_errors():
    a = _t(_wc(3, 3))
    with pytest.raises(DtypeError, match="linalg.inv"):
        LA.inv(ferro.tensor(np.eye(3, dtype=np.int64)))
    with pytest.raises(ArgumentTypeError, match="linalg.det: A must be a Tensor"):
        LA.det(np.eye(2))
    with pytest.raises(ArgumentError, match="mode"):
        LA.qr(a, mode="full")
    with pytest.raises(ArgumentError, match="UPLO"):
        LA.eigh(a, UPLO="X")
    with pytest.raises(ArgumentError, match="matrix_power: n must be an int"):
        LA.matrix_power(a, 1.5)
    with pytest.raises(ArgumentError, match="ord"):
        LA.matrix_norm(a, 3)
    with pytest.raises(ArgumentError, match="multi_dot"):
        LA.multi_dot([a])


def test_det_gradient_at_a_singular_matrix_is_the_adjugate():
    """Where the inverse does not exist the gradient goes through the SVD; central differences
    (det is a polynomial) agree, in a batch that mixes singular and regular matrices too."""
    for a in (np.ones((2, 2)), np.array([[1.0, 2, 3], [2, 4, 6], [0, 1, 5]]), np.zeros((3, 3))):
        assert gradcheck(LA.det, (_t(a),))
    a = _t(np.stack([np.array([[1.0, 2], [2, 4]]), _wc(2, 2)]))
    LA.det(a).sum().backward()
    np.testing.assert_allclose(a.grad.numpy()[0], [[4, -2], [-2, 1]], atol=1e-12)
    assert gradcheck(LA.det, (_t(a.detach().numpy()),))


def test_qr_modes_without_a_gradient_say_so():
    for mode, shape in (("r", (3, 3)), ("complete", (4, 2))):
        a = _t(RNG.normal(size=shape))
        with pytest.raises(NotSupportedError, match=f"mode='{mode}'"):
            LA.qr(a, mode=mode).R.sum().backward()


def test_the_ops_take_their_array_module_from_the_input():
    """ferro/ops/decomp.py runs NumPy only on shapes, dtypes and errors: every array function
    comes from ``ctx.xp`` or ``xp_of(input)``, so the same code runs on CuPy arrays."""
    src = (pathlib.Path(ferro.ops.decomp.__file__)).read_text()
    used = set(re.findall(r"\bnp\.([\w.]+)", src))
    assert used <= {"linalg.LinAlgError", "broadcast_shapes", "finfo"}, used
