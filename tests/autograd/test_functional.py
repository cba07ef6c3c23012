"""ferro.autograd.functional: values against closed forms, and against torch.autograd.functional
when PyTorch is installed."""

from __future__ import annotations

import numpy as np
import pytest

import ferro
from ferro.autograd import functional as F
from ferro.errors import ArgumentError, GraphError

RNG = np.random.default_rng(0)
A = RNG.standard_normal(3)
B = RNG.standard_normal((2, 3))
V2 = RNG.standard_normal(2)
V3 = RNG.standard_normal(3)


def _t(a):
    return ferro.from_numpy(np.array(a, dtype=np.float64))


def f_two(x, w):
    return (w @ x).tanh()


def scalar(x):
    return (x.tanh() ** 3).sum()


def test_vjp_and_jvp_match_the_jacobian():
    x, w = _t(A), _t(B)
    jx, jw = F.jacobian(f_two, (x, w))
    _, (gx, gw) = F.vjp(f_two, (x, w), _t(V2))
    np.testing.assert_allclose(gx._data, V2 @ jx._data, rtol=1e-12)
    np.testing.assert_allclose(gw._data, np.tensordot(V2, jw._data, 1), rtol=1e-12)
    _, jv = F.jvp(f_two, (x, w), (_t(V3), _t(B)))
    want = jx._data @ V3 + np.tensordot(jw._data, B, 2)
    np.testing.assert_allclose(jv._data, want, rtol=1e-12)


def test_jacobian_closed_form():
    x = _t(A)
    j = F.jacobian(lambda t: t * t, x)
    np.testing.assert_allclose(j._data, np.diag(2 * A))


def test_hessian_hvp_vhp_closed_form():
    x = _t(A)
    t = np.tanh(A)
    d2 = 6 * t * (1 - t * t) ** 2 - 6 * t**3 * (1 - t * t)  # (tanh^3)''
    h = F.hessian(scalar, x)
    np.testing.assert_allclose(h._data, np.diag(d2), rtol=1e-10, atol=1e-12)
    out, hv = F.hvp(scalar, x, _t(V3))
    np.testing.assert_allclose(hv._data, d2 * V3, rtol=1e-10)
    np.testing.assert_allclose(out._data, (t**3).sum())
    _, vh = F.vhp(scalar, x, _t(V3))
    np.testing.assert_allclose(vh._data, d2 * V3, rtol=1e-10)
    assert not hv.requires_grad


def test_create_graph_results_are_differentiable():
    x = _t(A).requires_grad_(True)
    _, hv = F.hvp(scalar, x, _t(V3), create_graph=True)
    assert hv.requires_grad
    (g,) = ferro.autograd.grad(hv.sum(), x)
    assert np.isfinite(g._data).all()


def test_strict_and_argument_errors():
    x = _t(A)
    with pytest.raises(GraphError, match="independent"):
        F.vjp(lambda t, u: t * 2, (x, _t(A)), _t(A), strict=True)
    _, (g0, g1) = F.vjp(lambda t, u: t * 2, (x, _t(A)), _t(A))
    np.testing.assert_allclose(g1._data, 0)
    with pytest.raises(ArgumentError, match="v has shape|v\\[0\\]"):
        F.vjp(lambda t: t * 2, x, _t(V2))
    with pytest.raises(ArgumentError, match="reverse-mode"):
        F.jacobian(lambda t: t, x, strategy="forward-mode")


@pytest.mark.torch
def test_functional_matches_torch():
    import torch
    import torch.autograd.functional as TF

    def tf_two(x, w):
        return torch.tanh(w @ x)

    def tscalar(x):
        return (torch.tanh(x) ** 3).sum()

    x, w = _t(A), _t(B)
    tx, tw = torch.from_numpy(A.copy()), torch.from_numpy(B.copy())
    _, g = F.vjp(f_two, (x, w), _t(V2))
    _, tg = TF.vjp(tf_two, (tx, tw), torch.from_numpy(V2))
    for a, b in zip(g, tg, strict=True):
        np.testing.assert_allclose(a._data, b.numpy(), rtol=1e-12)
    _, j = F.jvp(f_two, (x, w), (_t(V3), _t(B)))
    _, tj = TF.jvp(tf_two, (tx, tw), (torch.from_numpy(V3), torch.from_numpy(B)))
    np.testing.assert_allclose(j._data, tj.numpy(), rtol=1e-12)
    jac = F.jacobian(f_two, (x, w))
    tjac = TF.jacobian(tf_two, (tx, tw))
    for a, b in zip(jac, tjac, strict=True):
        np.testing.assert_allclose(a._data, b.numpy(), rtol=1e-12)
    h = F.hessian(lambda x, w: f_two(x, w).sum(), (x, w))
    th = TF.hessian(lambda x, w: tf_two(x, w).sum(), (tx, tw))
    for i in range(2):
        for k in range(2):
            np.testing.assert_allclose(h[i][k]._data, th[i][k].numpy(), rtol=1e-10, atol=1e-12)
    _, hv = F.hvp(scalar, x, _t(V3))
    _, thv = TF.hvp(tscalar, tx, torch.from_numpy(V3))
    np.testing.assert_allclose(hv._data, thv.numpy(), rtol=1e-10)
    _, vh = F.vhp(scalar, x, _t(V3))
    _, tvh = TF.vhp(tscalar, tx, torch.from_numpy(V3))
    np.testing.assert_allclose(vh._data, tvh.numpy(), rtol=1e-10)


@pytest.mark.torch
def test_double_backward_of_a_network_matches_torch():
    import torch

    rng = np.random.default_rng(5)
    x_np, w1, w2 = rng.standard_normal((4, 3)), rng.standard_normal((3, 5)), rng.standard_normal(5)

    def run(lib, x, a, b):
        y = (lib.nn.functional.softplus(x @ a) @ b).sum()
        (ga,) = lib.autograd.grad(y, a, create_graph=True)
        return lib.autograd.grad((ga * ga).sum(), (a, b))

    fa, fb = (ferro.from_numpy(v.copy()).requires_grad_(True) for v in (w1, w2))
    ta, tb = (torch.from_numpy(v.copy()).requires_grad_(True) for v in (w1, w2))
    got = run(ferro, ferro.from_numpy(x_np), fa, fb)
    want = run(torch, torch.from_numpy(x_np), ta, tb)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a._data, b.numpy(), rtol=1e-10)
