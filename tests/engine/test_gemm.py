"""Note [Two-core GEMM] (ferro/_C/gemm.pyx): a product of two matrices runs as a fixed number of
parts on ferro's threads, each one CBLAS call with OpenBLAS at one thread. Its results must not
depend on the thread count, must be the product (NumPy's to rounding), and whatever it does not
take must go to NumPy's matmul."""

import multiprocessing
import threading

import numpy as np
import pytest

import ferro
from ferro import _intraop
from ferro._C import gemm
from ferro.ops import linalg

pytestmark = pytest.mark.skipif(not gemm.have_blas(), reason="no CBLAS found in NumPy's BLAS")


@pytest.fixture(params=["own", "blas"])
def small(request):
    """Products of any size through the parts (the work thresholds lowered), float32 ones by
    ferro's own kernel (Note [Own SGEMM]; where the CPU runs it) or by the BLAS's sgemm."""
    before = gemm.set_least(0, 0)
    own_before = gemm.set_own(request.param == "own", 0, 0)
    yield request.param
    gemm.set_own(*own_before)
    gemm.set_least(*before)


@pytest.fixture
def threads():
    before = ferro.get_num_threads()
    yield
    ferro.set_num_threads(before)


def _operand(rng, shape, dtype, layout):
    """A (rows, cols) matrix: C-ordered, F-ordered (a transpose) or a column slice of a wider
    one (a leading dimension above its width)."""
    if layout == "F":
        return np.ascontiguousarray(rng.normal(size=shape[::-1]).astype(dtype)).T
    if layout == "slice":
        return rng.normal(size=(shape[0], shape[1] + 5)).astype(dtype)[:, 3 : 3 + shape[1]]
    return rng.normal(size=shape).astype(dtype)


def _bits(x):
    return x.view(f"u{x.itemsize}")


SHAPES = [(64, 784, 512), (512, 64, 784), (70, 33, 130), (2, 2, 2), (200, 3, 45)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("la", ["C", "F", "slice"])
@pytest.mark.parametrize("lb", ["C", "F", "slice"])
def test_product_and_the_same_bits_on_one_thread_and_two(small, threads, dtype, la, lb):
    rng = np.random.default_rng(0)
    for m, k, n in SHAPES:
        a, b = _operand(rng, (m, k), dtype, la), _operand(rng, (k, n), dtype, lb)
        ferro.set_num_threads(2)
        two = gemm.matmul(a, b)
        ferro.set_num_threads(1)
        one = gemm.matmul(a, b)
        assert two.flags.c_contiguous and two.dtype == dtype and two.shape == (m, n)
        np.testing.assert_array_equal(_bits(one), _bits(two))
        want = a.astype(np.float64) @ b.astype(np.float64)
        tol = 1e-4 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(two, want, rtol=tol, atol=tol * np.sqrt(k))


def test_blas_thread_count_given_back(small, threads):
    ferro.set_num_threads(2)
    a = np.ones((128, 64), np.float32)
    gemm.matmul(a, a.T)
    assert _intraop._BLAS[0]() == 2


def test_concurrent_products_and_inside_a_split(small, threads):
    ferro.set_num_threads(2)
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(300, 200)), rng.normal(size=(200, 250))
    want = gemm.matmul(a, b)
    results = []

    def worker():
        for _ in range(20):
            results.append(gemm.matmul(a, b))

    ts = [threading.Thread(target=worker) for _ in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(results) == 60 and all(np.array_equal(r, want) for r in results)
    parts = _intraop.run(lambda i: gemm.matmul(a, b), 2)
    assert all(np.array_equal(r, want) for r in parts)
    assert _intraop._BLAS[0]() == 2  # every hold given back


def test_out(small):
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(40, 30)), rng.normal(size=(30, 50))
    out = np.empty((40, 50))
    assert gemm.matmul(a, b, out) is out
    np.testing.assert_allclose(out, a @ b, rtol=1e-12)


def test_refusals_go_to_numpy(small):
    """Anything but aligned, native-order 2-D float32/float64 matrices of one dtype with one
    contiguous axis (and a writeable C-contiguous out of the right shape and dtype that overlaps
    no operand) is NotImplemented: the caller runs NumPy."""
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(40, 30)), rng.normal(size=(30, 50))
    refused = [
        (a.astype(np.float32), b),  # mixed dtypes
        (a.astype(np.int64), b.astype(np.int64)),
        (a.astype(np.float16), b.astype(np.float16)),
        (a.astype(">f8"), b.astype(">f8")),  # byte order
        (a[::-1], b),  # negative stride
        (a[:, ::2], b[:15]),  # no contiguous axis
        (a[None], b),  # 3-D
        (a, b[:, :1]),  # a column: NumPy's gemv
        (a, b.tolist()),
        (a, a),  # shapes that do not align
    ]
    raw = np.zeros(40 * 30 * 8 + 1, np.uint8)[1:].view(np.float64).reshape(40, 30)
    raw[...] = a
    refused.append((raw, b))  # misaligned
    for x, y in refused:
        assert gemm.matmul(x, y) is NotImplemented
    ro = np.empty((40, 50))
    ro.flags.writeable = False
    big = np.empty((40, 60))
    for out in (ro, np.empty((40, 50), np.float32), np.empty((50, 40)), big[:, :50], [0.0]):
        assert gemm.matmul(a, b, out) is NotImplemented
    square = rng.normal(size=(64, 64))
    assert gemm.matmul(square, square.copy(), square) is NotImplemented  # overlaps a


def test_threshold(threads):
    """Too little work: NumPy's matmul; then one part (OpenBLAS held at one thread); then parts,
    the product either way."""
    ferro.set_num_threads(2)
    rng = np.random.default_rng(6)
    a, b = rng.normal(size=(64, 512)), rng.normal(size=(512, 10))
    before = gemm.set_least(1 << 62, 1 << 62)  # off: NumPy's matmul
    try:
        assert gemm.matmul(a, b) is NotImplemented
        assert gemm.set_least(1 << 18, 1 << 21) == (1 << 62, 1 << 62)
        assert before == (1 << 62, 1 << 62)  # off by default (Note [Two-core GEMM])
        assert gemm.matmul(np.ones((8, 8)), np.ones((8, 8))) is NotImplemented
        one = gemm.matmul(a, b)  # 327,680: one part
        gemm.set_least(0, 0)
        parts = gemm.matmul(a, b)
    finally:
        gemm.set_least(*before)
    np.testing.assert_allclose(one, parts, rtol=1e-12)


def test_the_helper_thread_runs_second_parts_with_one_threads_bits(threads):
    """Note [GEMM helper thread]: each two-part product's second part runs on the helper or,
    where the helper has not claimed it, on the caller; the bits are one thread's."""
    rng = np.random.default_rng(7)
    a, b = rng.normal(size=(96, 300)).astype(np.float32), rng.normal(size=(300, 400))
    b = b.astype(np.float32)
    ferro.set_num_threads(1)
    want = gemm.matmul(a, b, parts=True)  # both parts on this thread
    ferro.set_num_threads(2)
    _, posted, by_helper, by_caller = gemm.helper_stats()
    got = [gemm.matmul(a, b, parts=True) for _ in range(40)]
    started, posted2, by_helper2, by_caller2 = gemm.helper_stats()
    assert started and posted2 - posted == 40
    assert (by_helper2 - by_helper) + (by_caller2 - by_caller) == 40
    assert all(np.array_equal(g, want) for g in got)


def _child_product(queue):
    rng = np.random.default_rng(8)
    a, b = rng.normal(size=(128, 64)), rng.normal(size=(64, 256))
    before = gemm.helper_stats()
    y = gemm.matmul(a, b, parts=True)
    queue.put((before, gemm.helper_stats(), y))


def test_a_forked_child_starts_its_own_helper(threads):
    ferro.set_num_threads(2)
    rng = np.random.default_rng(8)
    a, b = rng.normal(size=(128, 64)), rng.normal(size=(64, 256))
    want = gemm.matmul(a, b, parts=True)  # the parent's helper runs
    assert gemm.helper_stats()[0]
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_product, args=(queue,))
    child.start()
    before, after, y = queue.get(timeout=60)
    child.join(60)
    assert child.exitcode == 0
    assert before == (False, 0, 0, 0) and after[0] and after[1] == 1
    assert np.array_equal(y, want)


def test_fallback_without_blas(small):
    """No CBLAS found: matmul answers NotImplemented, and ferro's ops run NumPy's matmul."""
    rng = np.random.default_rng(4)
    an, wn = rng.normal(size=(64, 48)), rng.normal(size=(32, 48))
    a, w = ferro.tensor(an, requires_grad=True), ferro.tensor(wn, requires_grad=True)
    try:
        gemm.set_blas(0, 0, False, 0, 0)
        assert not gemm.have_blas() and gemm.matmul(an, an.T) is NotImplemented
        y = ferro.linear(a, w)
        y.sum().backward()
        np.testing.assert_array_equal(y.detach().numpy(), an @ wn.T)
        np.testing.assert_array_equal(w.grad.numpy(), np.ones((64, 32)).T @ an)
    finally:
        assert linalg.find_blas()


def test_ops_route_through_it(small):
    """matmul (the engine's direct path and the class), linear and their gradients give the
    primitive's bits."""
    rng = np.random.default_rng(5)
    an, bn, gn = rng.normal(size=(64, 48)), rng.normal(size=(48, 40)), rng.normal(size=(64, 40))
    for mm in (ferro.matmul, lambda x, y: x @ y):
        a, b = ferro.tensor(an, requires_grad=True), ferro.tensor(bn, requires_grad=True)
        y = mm(a, b)
        y.backward(ferro.tensor(gn))
        np.testing.assert_array_equal(y.detach().numpy(), gemm.matmul(an, bn))
        np.testing.assert_array_equal(a.grad.numpy(), gemm.matmul(gn, bn.T))
        np.testing.assert_array_equal(b.grad.numpy(), gemm.matmul(an.T, gn))
    w = ferro.tensor(bn.T.copy(), requires_grad=True)
    x = ferro.tensor(an, requires_grad=True)
    y = ferro.linear(x, w)
    y.backward(ferro.tensor(gn))
    np.testing.assert_array_equal(y.detach().numpy(), gemm.matmul(an, bn))
    np.testing.assert_array_equal(x.grad.numpy(), gemm.matmul(gn, bn.T))
    np.testing.assert_array_equal(w.grad.numpy(), gemm.matmul(gn.T, an))


def _stack(rng, n, shape, dtype, layout):
    """``n`` matrices ``shape`` as a 3-D stack: C-ordered, each a transpose, or column slices."""
    if layout == "F":
        return rng.normal(size=(n, *shape[::-1])).astype(dtype).transpose(0, 2, 1)
    if layout == "slice":
        return rng.normal(size=(n, shape[0], shape[1] + 5)).astype(dtype)[:, :, 2 : 2 + shape[1]]
    return rng.normal(size=(n, *shape)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shared", ["a", "b", None])
@pytest.mark.parametrize("layout", ["C", "F", "slice"])
@pytest.mark.parametrize("n", [1, 2, 5])
def test_batched_products_and_sums_are_the_same_bits_on_any_thread_count(
    threads, dtype, shared, layout, n
):
    """Note [Pointwise products] (ferro/ops/conv.py): each product one call, the sum in two
    fixed runs, so the bits do not depend on the thread count."""
    rng = np.random.default_rng(n)
    m, k, p = 48, 600, 40  # a sum over more than ~450 rows: OpenBLAS's 1- and 2-thread bits differ
    a = (
        _operand(rng, (m, k), dtype, layout)
        if shared == "a"
        else _stack(rng, n, (m, k), dtype, layout)
    )
    b = (
        _operand(rng, (k, p), dtype, layout)
        if shared == "b"
        else _stack(rng, n, (k, p), dtype, layout)
    )
    runs = []
    for t in (1, 2, 3):
        ferro.set_num_threads(t)
        runs.append((gemm.batched(a, b), gemm.batched(a, b, reduce=True)))
        assert _intraop._BLAS[0]() == t  # the hold given back
    for stack, total in runs[1:]:
        np.testing.assert_array_equal(_bits(stack), _bits(runs[0][0]))
        np.testing.assert_array_equal(_bits(total), _bits(runs[0][1]))
    stack, total = runs[0]
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    tol = 1e-4 if dtype == np.float32 else 1e-12
    assert stack.shape == (n, m, p) and stack.dtype == dtype and stack.flags.c_contiguous
    np.testing.assert_allclose(stack, want, rtol=tol, atol=tol * np.sqrt(k))
    np.testing.assert_allclose(total, want.sum(axis=0), rtol=tol, atol=tol * np.sqrt(k * n))
    out = np.full((n, m, p), np.nan, dtype)
    assert gemm.batched(a, b, out) is out
    np.testing.assert_array_equal(_bits(out), _bits(stack))


def test_batched_refusals_go_to_numpy():
    """Whatever gemm.batched does not take is NotImplemented, and no out is written."""
    rng = np.random.default_rng(8)
    a, b = rng.normal(size=(3, 20, 30)), rng.normal(size=(3, 30, 10))
    refused = [
        (a[0], b[0]),  # no stack
        (a[None], b),  # 4-D
        (a, b[:2]),  # stacks of different lengths
        (a, b[:, :20]),  # shapes that do not align
        (a.astype(np.float32), b),  # mixed dtypes
        (a.astype(np.int64), b.astype(np.int64)),
        (a.astype(">f8"), b.astype(">f8")),
        (a[::-1], b),  # a negative batch stride
        (a[:, :, ::2], b[:, :15]),  # no contiguous axis
        (a[:0], b[:0]),  # empty
        (a, b.tolist()),
    ]
    for x, y in refused:
        assert gemm.batched(x, y) is NotImplemented
        assert gemm.batched(x, y, reduce=True) is NotImplemented
    ro = np.zeros((3, 20, 10))
    ro.flags.writeable = False
    wide = np.zeros((3, 20, 12))
    for out in (ro, np.zeros((3, 20, 10), np.float32), np.zeros((3, 10, 20)), wide[:, :, :10]):
        assert gemm.batched(a, b, out) is NotImplemented
        assert not out.any()
    square = rng.normal(size=(3, 16, 16))
    assert gemm.batched(square, square.copy(), square) is NotImplemented  # out overlaps a
    assert gemm.batched(square[0], square.copy(), square) is NotImplemented  # and shared a


def test_parts_split_whatever_the_thresholds(threads):
    """Note [Weight-bound convolutions] (ferro/ops/conv.py): ``parts=True`` runs the product in
    parts with the thresholds off, the same bits on one thread and two."""
    rng = np.random.default_rng(9)
    a, b = rng.normal(size=(576, 512)).astype(np.float32), rng.normal(size=(512, 8))
    b = b.astype(np.float32)
    before = gemm.set_least(1 << 62, 1 << 62)
    own = gemm.set_own(False)  # the BLAS path (Note [Own SGEMM] has its own tests)
    try:
        assert gemm.matmul(a, b) is NotImplemented  # off
        ferro.set_num_threads(1)
        one = gemm.matmul(a, b, parts=True)
        ferro.set_num_threads(2)
        two = gemm.matmul(a, b, None, True)
    finally:
        gemm.set_own(*own)
        gemm.set_least(*before)
    np.testing.assert_array_equal(_bits(one), _bits(two))
    np.testing.assert_allclose(two, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4 * np.sqrt(512))
    assert _intraop._BLAS[0]() == 2
