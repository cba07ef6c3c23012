"""The engine and the ops with their GPU overrides, against the same graphs with the overrides
off (the generic CuPy path) and on NumPy. Marked gpu: skipped without a device."""

import numpy as np
import pytest

import ferro
from ferro._C import engine

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")


@pytest.fixture(autouse=True)
def _needs_device():
    if not ferro.cuda.is_available():
        pytest.skip("no CUDA device")


def _grads(fn, arrays, overrides):
    prev = engine.set_overrides_enabled(overrides)
    try:
        ts = [ferro.tensor(a, requires_grad=True) for a in arrays]
        out = fn(*ts)
        out.backward(ferro.ones_like(out))
        return out.detach().cpu().numpy(), [t.grad.cpu().numpy() for t in ts]
    finally:
        engine.set_overrides_enabled(prev)


def _ramp(n, like):
    """0, 1, ..., n-1 in ``like``'s dtype and device (weights that make every column count)."""
    return ferro.arange(n, dtype=like.dtype, device=like.device)


CASES = {
    "relu": lambda x: ferro.relu(x),
    "leaky_relu": lambda x: ferro.leaky_relu(x, 0.2),
    "sigmoid": lambda x: ferro.sigmoid(x),
    "tanh": lambda x: ferro.tanh(x),
    "gelu": lambda x: ferro.gelu(x),
    "gelu_tanh": lambda x: ferro.gelu(x, approximate="tanh"),
    "silu": lambda x: ferro.silu(x),
    "softmax": lambda x: ferro.softmax(x, axis=-1) * _ramp(x.shape[-1], x),
    "softmax_axis0": lambda x: ferro.softmax(x, axis=0) * 1.5,
    "log_softmax": lambda x: ferro.log_softmax(x, axis=-1).sum(axis=-1),
    "log_softmax_T": lambda x: ferro.log_softmax(x.T, axis=-1),  # a non-contiguous input
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(CASES))
def test_override_matches_generic_gpu_path_and_numpy(name, dtype):
    x = np.random.default_rng(0).normal(size=(33, 700)).astype(dtype) * 3
    fn = CASES[name]
    want_y, (want_g,) = _grads(fn, [x], True)  # NumPy (CPU overrides)
    gen_y, (gen_g,) = _grads(fn, [cp.asarray(x)], False)
    got_y, (got_g,) = _grads(fn, [cp.asarray(x)], True)
    tol = dict(rtol=2e-5, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-11)
    for y, g in ((gen_y, gen_g), (got_y, got_g)):
        np.testing.assert_allclose(y, want_y, **tol)
        np.testing.assert_allclose(g, want_g, **tol)
    assert got_g.dtype == dtype


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cross_entropy_override(reduction, dtype):
    rng = np.random.default_rng(1)
    x = (rng.normal(size=(64, 1000)) * 4).astype(dtype)
    t = rng.integers(0, 1000, 64)
    t[::7] = -100

    def run(arr, target, overrides):
        prev = engine.set_overrides_enabled(overrides)
        try:
            xt = ferro.tensor(arr, requires_grad=True)
            out = ferro.cross_entropy(
                xt, ferro.tensor(target, device=xt.device), reduction=reduction
            )
            (out * 1.0 if reduction != "none" else out * _ramp(64, xt)).sum().backward()
            return out.detach().cpu().numpy(), xt.grad.cpu().numpy()
        finally:
            engine.set_overrides_enabled(prev)

    want = run(x, t, True)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)
    for overrides in (False, True):
        got = run(cp.asarray(x), cp.asarray(t), overrides)
        np.testing.assert_allclose(got[0], want[0], **tol)
        np.testing.assert_allclose(got[1], want[1], **tol)


def test_cross_entropy_with_weights_or_smoothing_uses_the_generic_path():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(8, 5))
    t = rng.integers(0, 5, 8)
    w = rng.uniform(0.5, 2, 5)
    for kw in ({"weight": w}, {"label_smoothing": 0.1}):
        res = []
        for dev in ("cpu", "cuda"):
            xt = ferro.tensor(x, requires_grad=True, device=dev)
            kw2 = {k: ferro.tensor(v, device=dev) if k == "weight" else v for k, v in kw.items()}
            ferro.cross_entropy(xt, ferro.tensor(t, device=dev), **kw2).backward()
            res.append(xt.grad.cpu().numpy())
        np.testing.assert_allclose(res[1], res[0], rtol=1e-10)


def test_broadcast_gradients_sum_to_shape_on_the_gpu():
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(256, 1, 64)), rng.normal(size=(32, 1))
    want = _grads(lambda x, y: x * y, [a, b], True)[1]
    for overrides in (False, True):
        got = _grads(lambda x, y: x * y, [cp.asarray(a), cp.asarray(b)], overrides)[1]
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-10)


def test_accumulation_on_the_gpu_is_in_place_and_respects_ownership():
    x = ferro.tensor(cp.ones(1000), requires_grad=True)
    engine.reset_stats()
    (x * 2 + x * 3 + x * 4 + x).sum().backward()
    np.testing.assert_allclose(x.grad.cpu().numpy(), 10.0)
    assert engine.stats()["inplace_adds"] >= 2

    # An array a hook keeps is never written afterwards.
    kept = []
    y = ferro.tensor(cp.ones(1000), requires_grad=True)
    a = y * 2
    a.register_hook(lambda g: kept.append(g._data) or None)
    (a + a * 3).sum().backward()
    snapshot = kept[0].copy()
    np.testing.assert_allclose(y.grad.cpu().numpy(), 8.0)
    assert cp.array_equal(kept[0], snapshot)

    # A gradient the user passed in is never written.
    z = ferro.tensor(cp.ones(4), requires_grad=True)
    g = cp.full(4, 2.0)
    w = z * 1
    (w + w).backward(ferro.tensor(g))
    assert cp.array_equal(g, cp.full(4, 2.0))

    # .grad accumulates in place across backward calls.
    first = z.grad._data
    (z * 1).sum().backward()
    assert z.grad._data is first
    np.testing.assert_allclose(first.get(), 5.0)


def test_mlp_step_on_the_gpu_matches_the_cpu():
    from ferro import nn

    rng = np.random.default_rng(4)
    X, y = rng.normal(size=(128, 32)), rng.integers(0, 10, 128)
    results = []
    for dev in ("cpu", "cuda"):
        ferro.manual_seed(0)
        model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 10)).to(dev)
        model.to(dtype=ferro.float64)
        out = ferro.cross_entropy(model(ferro.tensor(X, device=dev)), ferro.tensor(y, device=dev))
        out.backward()
        results.append([p.grad.cpu().numpy() for p in model.parameters()])
    for g_gpu, g_cpu in zip(results[1], results[0], strict=True):
        np.testing.assert_allclose(g_gpu, g_cpu, rtol=1e-9, atol=1e-12)
