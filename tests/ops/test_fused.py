"""Fused CPU overrides against the generic (reference) implementations: same values, same
gradients, for float32 and float64, small and large (parallel) sizes, and a non-contiguous
input that must take the generic path."""

import contextlib

import numpy as np
import pytest

import ferro
from ferro._C import engine


@contextlib.contextmanager
def overrides(enabled):
    prev = engine.set_overrides_enabled(enabled)
    try:
        yield
    finally:
        engine.set_overrides_enabled(prev)


def _run(fn, x_np, gy_np):
    x = ferro.from_numpy(x_np.copy()).requires_grad_()
    y = fn(x)
    y.backward(ferro.from_numpy(gy_np.astype(y.dtype)))
    return y.detach().numpy(), x.grad.numpy()


FUSED = {
    "tanh": ferro.tanh,
    "relu": ferro.relu,
    "sigmoid": ferro.sigmoid,
    "gelu": ferro.gelu,
    "gelu_tanh": lambda x: ferro.gelu(x, "tanh"),
    "silu": ferro.silu,
    "softmax": lambda x: ferro.softmax(x, -1),
    "log_softmax": lambda x: ferro.log_softmax(x, -1),
}


@pytest.mark.parametrize("name", sorted(FUSED))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1,), (7, 13), (300, 700)])
def test_fused_matches_generic(name, dtype, shape):
    rng = np.random.default_rng(0)
    x = rng.normal(0, 2, shape).astype(dtype)
    gy = rng.normal(size=shape).astype(dtype)
    with overrides(True):
        y1, g1 = _run(FUSED[name], x, gy)
    with overrides(False):
        y2, g2 = _run(FUSED[name], x, gy)
    tol = 2e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(y1, y2, rtol=tol, atol=tol)
    np.testing.assert_allclose(g1, g2, rtol=10 * tol, atol=10 * tol)
    assert y1.dtype == dtype and g1.dtype == dtype


def test_fused_path_is_taken_and_noncontiguous_falls_back():
    x = ferro.randn(4, 6, requires_grad=True)
    y = ferro.gelu(x)
    assert getattr(y.grad_fn, "fused", None) is True
    xt = ferro.from_numpy(np.asfortranarray(np.random.default_rng(0).normal(size=(4, 6))))
    xt.requires_grad_()
    yt = ferro.gelu(xt)
    assert getattr(yt.grad_fn, "fused", None) is None
    yt.sum().backward()
    assert xt.grad.shape == (4, 6)


def test_fused_forward_keeps_fused_backward_when_overrides_are_switched_off():
    x = ferro.randn(3, 5, requires_grad=True)
    y = ferro.gelu(x)
    assert getattr(y.grad_fn, "fused", False)
    with overrides(False):
        y.sum().backward()
    with overrides(False):
        x2 = ferro.from_numpy(x.detach().numpy().copy()).requires_grad_()
        ferro.gelu(x2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), x2.grad.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"reduction": "sum"},
        {"reduction": "none"},
        {"label_smoothing": 0.1},
        {"ignore_index": 2},
        {"weight": "w"},
        {"weight": "w", "label_smoothing": 0.2},
    ],
    ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()) or "plain",
)
def test_fused_cross_entropy_matches_generic(dtype, kw):
    rng = np.random.default_rng(1)
    logits = rng.normal(0, 3, (64, 10)).astype(dtype)
    target = rng.integers(0, 10, 64)
    kw = dict(kw)
    if kw.get("weight") == "w":
        kw["weight"] = rng.uniform(0.2, 2.0, 10)
    out = []
    for enabled in (True, False):
        with overrides(enabled):
            x = ferro.from_numpy(logits.copy()).requires_grad_()
            loss = ferro.cross_entropy(x, ferro.tensor(target), **kw)
            g = np.ones(loss.shape, dtype) if loss.ndim else None
            loss.backward(None if g is None else ferro.from_numpy(g))
            out.append((loss.detach().numpy(), x.grad.numpy()))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out[0][0], out[1][0], rtol=tol, atol=tol)
    np.testing.assert_allclose(out[0][1], out[1][1], rtol=tol, atol=tol)


def test_kernel_functions_refuse_nothing_silently():
    from ferro._C import cpu_kernels

    a = np.ones((2, 3), np.float32)
    assert cpu_kernels.same_layout((a, a))
    assert not cpu_kernels.same_layout((a, a.astype(np.float64)))
    assert not cpu_kernels.same_layout((a, np.ones((3, 2), np.float32).T))
