"""Note [Fused update] (ferro/_C/graph.pyx): under no_grad, ``lr * g`` is a Pending and
``p.sub_(lr * g)`` / ``p -= lr * g`` / ``p.add_(...)`` run as one pass with NumPy's two-pass
bits, the product still readable afterwards; anything else takes the path it took before."""

import numpy as np
import pytest

import ferro
from ferro._C import cpu_kernels
from ferro._C.tensor import is_pending

LR = 0.01
SCALE_MIN = 1 << 15


@pytest.fixture(autouse=True)
def default_lazy_size():
    # the default lazy_min() (the CI also runs this suite with every op lazy)
    old = cpu_kernels.set_lazy_min(cpu_kernels.TWO_CORE_MIN)
    yield
    cpu_kernels.set_lazy_min(old)


def _pair(n, dtype, seed=0):
    rng = np.random.default_rng(seed)
    p = ferro.from_numpy(rng.standard_normal(n).astype(dtype)).requires_grad_()
    p.grad = ferro.from_numpy(rng.standard_normal(n).astype(dtype))
    return p


def _numpy_update(p, g, op):
    # NumPy's two passes, in the array's precision: t = lr * g, then p -/+ t
    t = np.multiply(g, LR)
    return p - t if op == "sub" else p + t


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [SCALE_MIN, 401_408, (1 << 20) + 3])
@pytest.mark.parametrize("form", ["sub_", "isub", "add_", "iadd", "rmul"])
def test_the_update_loop_is_one_pass_with_numpy_bits(dtype, n, form):
    p = _pair(n, dtype)
    p0, g0 = p.detach().numpy().copy(), p.grad.numpy().copy()
    v0 = p._version
    with ferro.no_grad():
        u = LR * p.grad if form != "rmul" else p.grad * LR
        assert is_pending(u)  # the product waits for its consumer
        if form == "sub_":
            p.sub_(u)
        elif form == "isub":
            p -= u
        elif form == "add_":
            p.add_(u)
        elif form == "iadd":
            p += u
        else:
            p.sub_(u)
        assert is_pending(u)  # taken by the update, not computed into an array
    op = "add" if form in ("add_", "iadd") else "sub"
    assert p.detach().numpy().tobytes() == _numpy_update(p0, g0, op).tobytes()
    assert p._version == v0 + 1
    assert u.numpy().tobytes() == np.multiply(g0, LR).tobytes()  # still there when asked
    assert p.grad.numpy().tobytes() == g0.tobytes()


def test_below_the_size_or_with_lazy_off_the_product_is_computed_now():
    p = _pair(SCALE_MIN - 1, np.float32)
    with ferro.no_grad():
        assert not is_pending(LR * p.grad)
    p = _pair(SCALE_MIN, np.float32)
    old = cpu_kernels.set_lazy_min(0)
    try:
        with ferro.no_grad():
            assert not is_pending(LR * p.grad)
    finally:
        cpu_kernels.set_lazy_min(old)


def test_a_product_of_the_updated_tensor_itself_reads_it_before_the_write():
    p = _pair(SCALE_MIN, np.float32)
    p0 = p.detach().numpy().copy()
    with ferro.no_grad():
        u = LR * p
        p.sub_(u)
    t = np.multiply(p0, LR)
    assert p.detach().numpy().tobytes() == (p0 - t).tobytes()
    assert u.numpy().tobytes() == t.tobytes()


def test_a_later_write_to_the_gradient_is_not_seen_by_the_product():
    p = _pair(SCALE_MIN, np.float32)
    g0 = p.grad.numpy().copy()
    with ferro.no_grad():
        u = LR * p.grad
        p.sub_(u)
        p.grad.add_(1.0)  # the product is computed before g changes
    assert u.numpy().tobytes() == np.multiply(g0, LR).tobytes()


def test_a_view_alpha_or_recorded_update_takes_the_usual_path():
    p = _pair(2 * SCALE_MIN, np.float32)
    p0, g0 = p.detach().numpy().copy(), p.grad.numpy().copy()
    with ferro.no_grad():
        half = p[::2]  # not C-contiguous: NumPy's ufunc runs
        u = LR * ferro.from_numpy(g0[::2].copy())
        half.sub_(u)
        w = LR * p.grad
        p.sub_(w, alpha=2.0)  # two scalings: the product is computed, then NumPy's pass
    expect = p0.copy()
    expect[::2] = p0[::2] - np.multiply(g0[::2], LR)
    expect = expect - np.multiply(np.multiply(g0, LR), np.float32(2.0))
    np.testing.assert_array_equal(p.detach().numpy(), expect)
    # grad mode: a leaf that requires grad refuses an in-place op, untouched
    before = p.detach().numpy().copy()
    u = LR * p.grad
    with pytest.raises(RuntimeError):
        p.sub_(u)
    assert p.detach().numpy().tobytes() == before.tobytes()


def test_a_recorded_product_is_never_a_pending():
    g = ferro.from_numpy(np.ones(SCALE_MIN, np.float32)).requires_grad_()
    u = LR * g
    assert not is_pending(u) and u.grad_fn is not None


def test_the_hand_written_mlp_step_keeps_its_gradients_and_weights():
    # the benchmark's loop (bench_mlp): fused here, checked against the same loop in NumPy
    rng = np.random.default_rng(3)
    w = rng.standard_normal((256, 200)).astype(np.float32)
    x = rng.standard_normal((8, 256)).astype(np.float32)
    wt = ferro.from_numpy(w.copy()).requires_grad_()
    (ferro.from_numpy(x) @ wt).square().sum().backward()
    g = wt.grad.numpy().copy()
    with ferro.no_grad():
        wt.sub_(LR * wt.grad)
    assert wt.detach().numpy().tobytes() == (w - np.multiply(g, LR)).tobytes()
