"""Each CUDA kernel against NumPy, on a device (marked gpu: skipped without one)."""

import numpy as np
import pytest

import ferro

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")


@pytest.fixture(autouse=True)
def _needs_device():
    if not ferro.cuda.is_available():
        pytest.skip("no CUDA device")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_accumulate(dtype):
    from ferro.cuda import ops

    a = np.random.default_rng(0).normal(size=1000).astype(dtype)
    b = np.random.default_rng(1).normal(size=1000).astype(dtype)
    da, db = cp.asarray(a), cp.asarray(b)
    ops.accumulate(da, db)
    np.testing.assert_allclose(da.get(), a + b, rtol=1e-6)


@pytest.mark.parametrize(
    "big, small",
    [((4, 3, 5), (3, 1)), ((2, 3), (3,)), ((5,), ()), ((2, 1, 4), (2, 1, 4)), ((3, 4), (1, 1))],
)
def test_sum_to_shape(big, small):
    from ferro._C.engine import sum_to_shape_generic
    from ferro.cuda import ops

    a = np.random.default_rng(0).normal(size=big)
    got = ops.sum_to_shape(cp.asarray(a), small).get()
    np.testing.assert_allclose(got, sum_to_shape_generic(a, small), rtol=1e-12)


@pytest.mark.parametrize("name", ["relu", "leaky_relu", "sigmoid", "tanh", "gelu", "silu"])
def test_activation_backward(name):
    import math

    from ferro.cuda import ops

    rng = np.random.default_rng(0)
    x = rng.normal(size=500)
    g = rng.normal(size=500)
    s = 1 / (1 + np.exp(-x))
    saved, want = {
        "relu": (np.maximum(x, 0), g * (x > 0)),
        "leaky_relu": (np.where(x > 0, x, 0.1 * x), np.where(x > 0, g, 0.1 * g)),
        "sigmoid": (s, g * s * (1 - s)),
        "tanh": (np.tanh(x), g * (1 - np.tanh(x) ** 2)),
        "gelu": (
            x,
            g
            * (
                0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
                + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
            ),
        ),
        "silu": (x, g * s * (1 + x * (1 - s))),
    }[name]
    got = ops.activation_backward(name, cp.asarray(g), cp.asarray(saved), slope=0.1).get()
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("log", [False, True])
def test_softmax_forward_and_backward(log):
    from ferro.cuda import ops

    rng = np.random.default_rng(0)
    x = rng.normal(size=(7, 1000)) * 5
    g = rng.normal(size=(7, 1000))
    z = x - x.max(1, keepdims=True)
    lsm = z - np.log(np.exp(z).sum(1, keepdims=True))
    y = lsm if log else np.exp(lsm)
    np.testing.assert_allclose(ops.softmax_forward(cp.asarray(x), log).get(), y, rtol=1e-10)
    want = (
        g - np.exp(y) * g.sum(1, keepdims=True) if log else y * (g - (g * y).sum(1, keepdims=True))
    )
    got = ops.softmax_backward(cp.asarray(g), cp.asarray(y), log).get()
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_cross_entropy_matches_the_cpu_op():
    from ferro.cuda import ops

    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 10))
    t = rng.integers(0, 10, 16)
    t[3] = -100
    loss, grad = ops.cross_entropy(cp.asarray(x), cp.asarray(t), scale=1 / 15)
    xt = ferro.tensor(x, requires_grad=True)
    ref = ferro.cross_entropy(xt, ferro.tensor(t))
    ref.backward()
    np.testing.assert_allclose(loss.get().sum() / 15, ref.item(), rtol=1e-10)
    np.testing.assert_allclose(grad.get(), xt.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_dropout_mask_replays_from_saved_state():
    from ferro.cuda import ops

    ferro.cuda.manual_seed_all(7)
    state = ferro.cuda.get_rng_state(0)
    m1 = ops.dropout_mask((1000,), 0.3, np.float32).get()
    ferro.cuda.set_rng_state(state, 0)
    m2 = ops.dropout_mask((1000,), 0.3, np.float32).get()
    assert np.array_equal(m1, m2) and 0.2 < (m1 == 0).mean() < 0.4
    assert np.allclose(m1[m1 != 0], 1 / 0.7)
