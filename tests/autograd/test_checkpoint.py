"""Non-reentrant checkpointing with saved-tensor hooks, and the hooks themselves."""

import tracemalloc

import numpy as np
import pytest

import ferro
from ferro.autograd.graph import disable_saved_tensors_hooks, save_on_cpu, saved_tensors_hooks
from ferro.errors import ArgumentError, CheckpointError
from ferro.utils.checkpoint import checkpoint, checkpoint_sequential


def _layer(w):
    return lambda t: ferro.dropout((t @ w).tanh(), 0.3)


def _grads(params):
    return [p.grad.numpy().copy() for p in params]


def test_dropout_gradients_match_plain_run_bit_for_bit_and_rng_is_left_alone():
    w1, w2 = ferro.randn(6, 6, requires_grad=True), ferro.randn(6, 6, requires_grad=True)
    x = ferro.randn(4, 6, requires_grad=True)

    ferro.manual_seed(5)
    y = _layer(w2)(checkpoint(_layer(w1), x))
    after_forward = ferro.get_rng_state()
    y.sum().backward()
    assert ferro.get_rng_state() == after_forward  # recomputation restored the caller's state
    got = _grads([w1, w2, x])
    for p in (w1, w2, x):
        p.grad = None
    ferro.manual_seed(5)
    _layer(w2)(_layer(w1)(x)).sum().backward()
    for a, b in zip(got, _grads([w1, w2, x]), strict=True):
        assert np.array_equal(a, b)


def test_works_under_autograd_grad_and_with_inputs_not_requiring_grad():
    w = ferro.randn(3, 3, requires_grad=True)
    x = ferro.randn(2, 3)  # does not require grad: the parameter captured by fn still learns
    y = checkpoint(lambda t: (t @ w).exp(), x)
    assert y.requires_grad
    (gw,) = ferro.autograd.grad(y.sum(), w)
    (want,) = ferro.autograd.grad((x @ w).exp().sum(), w)
    np.testing.assert_allclose(gw.numpy(), want.numpy(), rtol=1e-6)
    assert w.grad is None


def test_several_inputs_and_outputs_and_kwargs():
    a = ferro.randn(3, requires_grad=True)
    b = ferro.randn(3, requires_grad=True)

    def fn(x, y, scale=1.0):
        return (x * y).tanh() * scale, (x - y).exp()

    p, q = checkpoint(fn, a, b, scale=2.0)
    (p.sum() + q.sum()).backward()
    got = _grads([a, b])
    a.grad = b.grad = None
    p, q = fn(a, b, scale=2.0)
    (p.sum() + q.sum()).backward()
    for g, w in zip(got, _grads([a, b]), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_nested_checkpoints():
    w = ferro.randn(4, 4, requires_grad=True)
    x = ferro.randn(2, 4, requires_grad=True)
    inner = lambda t: (t @ w).tanh()  # noqa: E731
    outer = lambda t: checkpoint(inner, checkpoint(inner, t)).exp()  # noqa: E731
    checkpoint(outer, x).sum().backward()
    got = _grads([w, x])
    w.grad = x.grad = None
    inner(inner(x)).exp().sum().backward()
    for g, want in zip(got, _grads([w, x]), strict=True):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)


def test_retain_graph_allows_recomputing_twice():
    w = ferro.randn(3, 3, requires_grad=True)
    y = checkpoint(lambda t: (t @ w).tanh(), ferro.randn(2, 3))
    y.sum().backward(retain_graph=True)
    g = w.grad.numpy().copy()
    y.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * g, rtol=1e-6)


def test_recomputation_that_differs_raises_checkpoint_error():
    state = {"n": 3}

    def fn(t):
        out = t
        for _ in range(state["n"]):
            out = out.tanh()
        return out

    x = ferro.randn(3, requires_grad=True)
    y = checkpoint(fn, x)
    state["n"] = 2
    with pytest.raises(CheckpointError, match="saved 2 arrays.*3"):
        y.sum().backward()


def test_input_modified_in_place_before_backward_raises():
    x = ferro.randn(3)
    w = ferro.randn(3, requires_grad=True)
    y = checkpoint(lambda t: (t * w).tanh(), x)
    x.add_(1.0)
    with pytest.raises(CheckpointError, match="modified in place"):
        y.sum().backward()


def test_checkpoint_sequential_matches_and_saves_memory():
    ws = [ferro.randn(64, 64) * 0.1 for _ in range(32)]
    layers = [(lambda t, w=w: (t @ w).tanh()) for w in ws]
    x = ferro.randn(256, 64, requires_grad=True)

    def peak(run):
        tracemalloc.start()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        out = run()
        out.sum().backward()
        p = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
        return p

    x.grad = None
    plain_peak = peak(lambda: checkpoint_sequential(layers, 1, x))
    plain_grad = x.grad.numpy().copy()
    x.grad = None
    ckpt_peak = peak(lambda: checkpoint_sequential(layers, 6, x))  # about sqrt(32) segments
    np.testing.assert_allclose(x.grad.numpy(), plain_grad, rtol=1e-5, atol=1e-6)
    assert ckpt_peak < 0.7 * plain_peak


def test_outputs_are_not_copied_through_the_host():
    x = ferro.randn(3, requires_grad=True)
    y = checkpoint(lambda t: t * 1.0, x)
    assert type(y._data) is np.ndarray and y.grad_fn.name() == "MulBackward"


def test_saved_tensors_hooks_order_and_nesting():
    log = []

    def pack(tag):
        return lambda t: (log.append(("pack", tag, t.shape)), (tag, t))[1]

    def unpack(v):
        log.append(("unpack", v[0], v[1].shape))
        return v[1]

    x = ferro.randn(2, requires_grad=True)
    with saved_tensors_hooks(pack("outer"), unpack):
        a = x.exp()  # saves y
        with saved_tensors_hooks(pack("inner"), unpack):
            b = a * x  # saves a and x
    (b.sum()).backward()
    assert [e[:2] for e in log] == [
        ("pack", "outer"),
        ("pack", "inner"),
        ("pack", "inner"),
        ("unpack", "inner"),  # MulBackward runs first (reverse of the forward) ...
        ("unpack", "inner"),  # ... and unpacks in save order
        ("unpack", "outer"),
    ]


def test_disable_saved_tensors_hooks_and_save_on_cpu():
    packed = []
    x = ferro.randn(2, requires_grad=True)
    with saved_tensors_hooks(lambda t: packed.append(1) or t, lambda t: t):
        with disable_saved_tensors_hooks():
            y = x.exp()
    assert packed == []
    with save_on_cpu():
        z = (x * 3.0).tanh()
    (y.sum() + z.sum()).backward()
    assert x.grad.shape == (2,)
    # PyTorch's arguments (the saved-tensors-hooks tutorial passes pin_memory=True)
    with save_on_cpu(pin_memory=True, device_type="cuda"):
        w = (x * x).sum()
    w.backward()
    assert x.grad.shape == (2,)
    with pytest.raises(ArgumentError, match="device_type must be 'cuda'"):
        save_on_cpu(device_type="xpu")
