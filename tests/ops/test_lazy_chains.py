"""Note [Lazy elementwise chains] (ferro/_C/cpu_kernels.pyx): large add/sub/mul chains run as
one loop when first needed, with the bits of the ops run one at a time, and nothing that could
change a leaf between the op and the loop goes unseen. Most tests lower the size from which ops
are lazy to 1 element (the CI also runs the op and autograd suites that way)."""

import numpy as np
import pytest

import ferro
from ferro._C import cpu_kernels
from ferro._C.tensor import flush, is_pending


@pytest.fixture
def lazy():
    old = cpu_kernels.set_lazy_min(1)
    yield
    cpu_kernels.set_lazy_min(old)
    flush()


def _fresh(rng, n, dtype=np.float32, requires_grad=False):
    # a tensor whose array nothing else references (no NumPy source kept alive)
    return ferro.from_numpy(rng.standard_normal(n).astype(dtype)).requires_grad_(requires_grad)


def _eager(fn):
    old = cpu_kernels.set_lazy_min(0)
    try:
        return fn()
    finally:
        cpu_kernels.set_lazy_min(old)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_chain_waits_and_gives_the_eager_bits(lazy, dtype):
    rng = np.random.default_rng(0)
    a, b, c = (_fresh(rng, 1000, dtype) for _ in range(3))

    def chain():
        return ((a * b + c) - 0.5 * a) * 3 + (c - b) * 2.5

    y = chain()
    assert is_pending(y)
    assert tuple(y.shape) == (1000,) and y.dtype == dtype and y.ndim == 1 and y.numel() == 1000
    assert is_pending(y)  # metadata computes nothing
    assert y.numpy().tobytes() == _eager(chain).numpy().tobytes()
    assert not is_pending(y)


@pytest.mark.parametrize("n", [1, 1000, 65536 * 3 + 7])
def test_the_sum_of_a_chain_is_the_sum_of_its_values(lazy, n):
    rng = np.random.default_rng(1)
    a, b, c = (_fresh(rng, n) for _ in range(3))
    s = (a * b + c).sum()
    assert s.numpy().tobytes() == _eager(lambda: (a * b + c).sum()).numpy().tobytes()


def test_the_default_size_fuses_the_benchmark_expression_with_eager_bits():
    # (a*b + c).sum() forward+backward at 2M float32 elements, fusion on and off
    rng = np.random.default_rng(2)
    a, b, c = (_fresh(rng, 2_000_000, requires_grad=True) for _ in range(3))

    def run():
        a.grad = b.grad = c.grad = None
        t = a * b
        lazy_seen = is_pending(t)
        s = (t + c).sum()
        s.backward()
        grads = [x.grad.numpy().tobytes() for x in (a, b, c)]
        return lazy_seen, s.detach().numpy().tobytes(), grads

    seen, *on = run()
    assert seen
    seen_off, *off = _eager(run)
    assert not seen_off
    assert on == off


def test_an_array_numpy_still_sees_is_not_a_lazy_leaf(lazy):
    v = np.ones(10, np.float32)
    t = ferro.from_numpy(v)  # v stays alive: writes through it must not reach y late
    y = t * 2
    assert not is_pending(y)
    v[:] = 5
    np.testing.assert_array_equal(y.numpy(), 2)


def test_writes_after_the_op_are_not_seen_by_the_chain(lazy):
    rng = np.random.default_rng(3)
    a, b = _fresh(rng, 8), _fresh(rng, 8)

    want = a.numpy() * b.numpy()
    y = a * b
    assert is_pending(y)
    a.add_(1)  # an in-place op runs the chain first
    np.testing.assert_array_equal(y.numpy(), want)

    want = a.numpy() * b.numpy()
    y = a * b
    assert is_pending(y)
    arr = b.numpy()  # handing an array out runs every chain
    assert not is_pending(y)
    arr[:] = 0
    np.testing.assert_array_equal(y.numpy(), want)

    y = a + 0.0
    z = b * 1.0
    a[0] = 100.0  # setitem
    np.testing.assert_array_equal(y.numpy()[1:], a.numpy()[1:])
    assert y.numpy()[0] != 100.0
    np.testing.assert_array_equal(z.numpy(), b.numpy())


def test_backward_and_optimizer_writes_run_chains_first(lazy):
    rng = np.random.default_rng(4)
    w = _fresh(rng, 16, requires_grad=True)
    (w * w).sum().backward()
    g0 = w.grad.numpy().copy()
    y = w.grad * 2  # reads w.grad's array, which the next backward adds into
    (w * w).sum().backward()
    np.testing.assert_array_equal(y.numpy(), g0 * 2)

    z = w.detach() * 1  # reads w's array, which the step writes
    w0 = w.detach().numpy().copy()
    ferro.optim.SGD([w], lr=0.1).step()
    np.testing.assert_array_equal(z.numpy(), w0)


def test_chains_hold_their_graph_and_second_derivatives(lazy):
    rng = np.random.default_rng(5)
    a = _fresh(rng, 6, np.float64, requires_grad=True)
    b = _fresh(rng, 6, np.float64, requires_grad=True)
    y = ((a * 0.8 + 0.05) * b - a).sum()
    (ga, gb) = ferro.autograd.grad(y, (a, b), create_graph=True)
    np.testing.assert_allclose(ga.detach().numpy(), 0.8 * b.detach().numpy() - 1)
    (h,) = ferro.autograd.grad((ga * gb).sum(), (a,))
    # d/da sum((0.8 b - 1) (0.8 a + 0.05)) = 0.8 (0.8 b - 1)
    np.testing.assert_allclose(h.numpy(), 0.8 * (0.8 * b.detach().numpy() - 1))
    assert ferro.testing.gradgradcheck(
        lambda x, t: ferro.cross_entropy(x, t, label_smoothing=0.2),
        (
            _fresh(rng, 12, np.float64, True).reshape(3, 4).detach().requires_grad_(),
            ferro.softmax(_fresh(rng, 12, np.float64).reshape(3, 4), 1).requires_grad_(),
        ),
    )


def test_what_cannot_be_lazy_runs_now(lazy):
    rng = np.random.default_rng(6)
    a, b = _fresh(rng, 12), _fresh(rng, 12)
    assert not is_pending(a * a)  # one array twice: referenced beyond its tensor
    assert not is_pending(a.reshape(3, 4) + b.reshape(3, 4)[0])  # broadcasting
    np.testing.assert_array_equal((a * b.double()).numpy(), a.numpy() * b.double().numpy())
    assert not is_pending(2.0 - a)  # a number first, not commutative: as binary() refuses
    assert is_pending(2.0 * a)
    with ferro.profiler.profile():
        assert not is_pending(a * b)  # the profiler records each op's arrays


def test_long_chains_split_where_a_program_is_full(lazy):
    rng = np.random.default_rng(7)
    xs = [_fresh(rng, 50) for _ in range(20)]

    def total():
        y = xs[0]
        for x in xs[1:]:
            y = y * 0.5 + x
        return y

    assert total().numpy().tobytes() == _eager(total).numpy().tobytes()


def test_chains_never_read_do_not_pile_up(lazy):
    rng = np.random.default_rng(8)
    a, b = _fresh(rng, 4), _fresh(rng, 4)
    for _ in range(1000):
        a * b
    c = a * b
    assert is_pending(c)
    np.testing.assert_array_equal(c.numpy(), a.numpy() * b.numpy())


def test_a_pending_made_outside_the_engine_is_refused_not_read():
    with pytest.raises(ferro.errors.ArgumentTypeError, match="Pending"):
        cpu_kernels.Pending()
    empty = cpu_kernels.Pending.__new__(cpu_kernels.Pending)
    with pytest.raises(ferro.errors.ArgumentError, match="empty Pending"):
        cpu_kernels.realize(empty)
    assert cpu_kernels.sum_all(empty) is NotImplemented
    assert cpu_kernels.lazy(0, empty, 1.0, False, False) is NotImplemented


def test_the_function_and_method_forms_chain_too(lazy):
    # ferro.mul / Tensor.add with a Python number read only the dtype of their tensors
    rng = np.random.default_rng(9)
    x, y = _fresh(rng, 40), _fresh(rng, 40)

    def chain():
        return ferro.sub(x.mul(0.5).add(y), 0.25)

    z = chain()
    assert is_pending(z)
    assert z.numpy().tobytes() == _eager(chain).numpy().tobytes()
