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


@pytest.mark.parametrize("per_row", [False, True])
def test_cross_entropy_kernels_match_the_cpu_op(per_row):
    from ferro.cuda import ops

    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 1000)) * 3
    t = rng.integers(0, 1000, 16)
    t[3] = -100
    loss, lse = ops.cross_entropy_forward(cp.asarray(x), cp.asarray(t))
    xt = ferro.tensor(x, requires_grad=True)
    ref = ferro.cross_entropy(xt, ferro.tensor(t), reduction="none")
    gy = rng.normal(size=16) if per_row else np.array(0.5)
    ref.backward(ferro.tensor(gy * np.ones(16)))
    np.testing.assert_allclose(loss.get(), ref.numpy(), rtol=1e-10, atol=1e-12)
    grad = ops.cross_entropy_backward(
        cp.asarray(x), cp.asarray(t), lse, cp.asarray(gy), cp.asarray([2.0])
    )
    np.testing.assert_allclose(grad.get() * 2, xt.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_softmax_kernel_takes_masked_rows():
    """-inf entries (masks) weigh nothing; a NaN poisons its row, as in NumPy."""
    from ferro.cuda import ops

    x = np.array(
        [[0.0, -np.inf, 1.0, -np.inf], [-np.inf, 2.0, -np.inf, -np.inf], [0, np.nan, 0, 0]]
    )
    e = np.exp(x - np.nanmax(x, axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)
    got = ops.softmax_forward(cp.asarray(x), False).get()
    np.testing.assert_allclose(got[:2], want[:2], rtol=1e-12)
    assert np.isnan(got[2]).all()


def test_cross_entropy_kernel_gives_nan_for_a_target_out_of_range():
    from ferro.cuda import ops

    x = cp.zeros((2, 4))
    loss, lse = ops.cross_entropy_forward(x, cp.asarray([1, 7]))
    assert np.isfinite(loss.get()[0]) and np.isnan(loss.get()[1])
    grad = ops.cross_entropy_backward(x, cp.asarray([1, 7]), lse, cp.ones(()), cp.ones(1))
    assert np.isfinite(grad.get()[0]).all() and np.isnan(grad.get()[1]).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [0, 1, 3, 4097, 1 << 20])
def test_elementwise_kernels_cover_tails_and_misaligned_views(dtype, n):
    """Vector loads for the aligned body, scalars for the tail and for offset views."""
    from ferro.cuda import ops

    rng = np.random.default_rng(n)
    a = rng.normal(size=n + 1).astype(dtype)
    b = rng.normal(size=n + 1).astype(dtype)
    for lo in (0, 1):  # an offset of one element breaks 16-byte alignment
        da = cp.array(a[lo : lo + n]) if lo == 0 else cp.asarray(a)[lo : lo + n]
        db = cp.asarray(b)[lo : lo + n]
        got = ops.activation_backward("relu", db, da).get()
        np.testing.assert_array_equal(got, np.where(a[lo : lo + n] > 0, b[lo : lo + n], 0))
        ops.accumulate(da, db)
        np.testing.assert_allclose(da.get(), a[lo : lo + n] + b[lo : lo + n], rtol=1e-6)


@pytest.mark.parametrize(
    "big, small",
    [
        ((1 << 22,), ()),  # one output: the reduction is split across blocks
        ((4096, 1024), (1024,)),  # bias over a batch
        ((1024, 4096), (1024, 1)),  # summed inner dim
        ((2, 3, 4, 5, 6), (3, 1, 5, 1)),  # several summed dims
        ((0, 3), (3,)),  # empty: zeros
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sum_to_shape_kernel_at_scale(big, small, dtype):
    from ferro._C.engine import sum_to_shape_generic
    from ferro.cuda import ops

    a = np.random.default_rng(0).normal(size=big).astype(dtype)
    want = sum_to_shape_generic(a.astype(np.float64), small)
    for _ in range(2):  # the tile counters reset themselves for the next call
        got = ops.sum_to_shape(cp.asarray(a), small).get()
        assert got.dtype == dtype and got.shape == small
        np.testing.assert_allclose(
            got,
            want,
            rtol=1e-5 if dtype == np.float32 else 1e-11,
            atol=1e-3 if dtype == np.float32 else 1e-9,
        )


def test_dropout_mask_replays_from_saved_state():
    from ferro.cuda import ops

    ferro.cuda.manual_seed_all(7)
    state = ferro.cuda.get_rng_state(0)
    m1 = ops.dropout_mask((1000,), 0.3, np.float32).get()
    ferro.cuda.set_rng_state(state, 0)
    m2 = ops.dropout_mask((1000,), 0.3, np.float32).get()
    assert np.array_equal(m1, m2) and 0.2 < (m1 == 0).mean() < 0.4
    assert np.allclose(m1[m1 != 0], 1 / 0.7)
