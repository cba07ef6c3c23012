"""Note [Own SGEMM] (docs/design.md, ferro/_C/sgemm.h): float32 products on AVX-512 machines
run ferro's own kernel. It must be the product for every layout and edge (blocks of k, rows,
columns), give each element the same bits whatever part of C a call computes (so one thread,
two parts, or any column block of the product), and leave to NumPy what it does not take."""

import os
import subprocess
import sys

import numpy as np
import pytest

import ferro
from ferro._C import gemm

pytestmark = pytest.mark.skipif(not gemm.own_usable(), reason="the CPU lacks AVX-512")


@pytest.fixture
def own():
    """Every float32 product of two matrices through the own kernel, as the engine calls it."""
    before = gemm.set_own(True, 0, -1)
    threads = ferro.get_num_threads()
    yield
    ferro.set_num_threads(threads)
    gemm.set_own(*before)


def _matrix(rng, rows, cols, layout):
    # C-ordered, the transpose of a C-ordered one, or a column slice (leading dimension wider)
    if layout == "T":
        return np.ascontiguousarray(rng.standard_normal((cols, rows)).astype(np.float32)).T
    if layout == "slice":
        return rng.standard_normal((rows, cols + 7)).astype(np.float32)[:, 2 : 2 + cols]
    return rng.standard_normal((rows, cols)).astype(np.float32)


def _check(a, b, c):
    # within the float32 summation bound k * eps * sum |a_ip b_pj| (one term missing or doubled
    # is off by about a k-th of it)
    want = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    bound = 2 * a.shape[1] * np.finfo(np.float32).eps * scale
    assert c.dtype == np.float32 and c.shape == want.shape and c.flags.c_contiguous
    assert np.all(np.abs(c - want) <= bound)


# (m, k, n): edges of the 8-row and 48-column panels, k in one block, in equal blocks (784:
# four of 200), m past the 256-row block, n past the 1,024-column block, and tiny ones
SHAPES = [
    (64, 784, 512),
    (512, 64, 784),
    (9, 257, 49),
    (300, 513, 47),
    (2, 3, 2),
    (257, 40, 1030),
    (8, 2, 48),
    (17, 1000, 95),
]


@pytest.mark.parametrize("la", ["C", "T", "slice"])
@pytest.mark.parametrize("lb", ["C", "T", "slice"])
def test_the_product_for_every_layout_and_edge(own, la, lb):
    rng = np.random.default_rng(0)
    for m, k, n in SHAPES:
        a, b = _matrix(rng, m, k, la), _matrix(rng, k, n, lb)
        c = gemm.matmul(a, b)
        assert c is not NotImplemented, (m, k, n, la, lb)
        _check(a, b, c)


@pytest.mark.parametrize("lb", ["C", "T"])
def test_each_element_has_the_same_bits_whatever_part_computes_it(own, lb):
    rng = np.random.default_rng(1)
    a, b = _matrix(rng, 200, 784, "C"), _matrix(rng, 784, 600, lb)
    ferro.set_num_threads(2)
    whole = gemm.matmul(a, b, parts=True)  # two parts, the second on the helper thread
    ferro.set_num_threads(1)
    one = gemm.matmul(a, b, parts=True)
    before = gemm.set_own(True, 0, 1 << 62)
    try:
        single = gemm.matmul(a, b)  # one call
        cols = gemm.matmul(a, b[:, 100:397])  # any block of columns
        rows = gemm.matmul(a[13:150], b)  # or of rows
    finally:
        gemm.set_own(*before)
    for got in (one, single):
        assert got.tobytes() == whole.tobytes()
    assert cols.tobytes() == np.ascontiguousarray(whole[:, 100:397]).tobytes()
    assert rows.tobytes() == np.ascontiguousarray(whole[13:150]).tobytes()


def test_out_and_refusals():
    rng = np.random.default_rng(2)
    a, b = _matrix(rng, 64, 512, "C"), _matrix(rng, 512, 512, "T")
    out = np.full((64, 512), np.nan, np.float32)
    assert gemm.matmul(a, b, out) is out
    _check(a, b, out)
    # default thresholds: small products go to NumPy's matmul, narrow large ones do not (they
    # would wake OpenBLAS's spinning worker)
    assert gemm.matmul(a[:8, :64], b[:64, :64]) is NotImplemented
    narrow = _matrix(rng, 512, 10, "C")
    assert gemm.matmul(a[:, :500], narrow[:500]) is NotImplemented  # 320,000 < 2^19
    wide_a = _matrix(rng, 1024, 512, "C")
    _check(wide_a, narrow, gemm.matmul(wide_a, narrow))
    # another dtype is the BLAS's (or NumPy's), never the float32 kernel's
    assert gemm.matmul(a.astype(np.float16), b.astype(np.float16)) is NotImplemented


def test_set_own_off_gives_the_blas_path_back():
    rng = np.random.default_rng(3)
    a, b = _matrix(rng, 64, 512, "C"), _matrix(rng, 512, 512, "C")
    before = gemm.set_own(False)
    least = gemm.set_least(1 << 62, 1 << 62)  # the BLAS path's default: off
    try:
        assert gemm.set_own(False)[0] is False
        assert gemm.matmul(a, b) is NotImplemented  # NumPy's matmul runs it
    finally:
        gemm.set_least(*least)
        gemm.set_own(*before)
    assert gemm.matmul(a, b) is not NotImplemented


def test_the_environment_turns_it_off():
    code = "from ferro._C import gemm; print(gemm.set_own(True)[0])"
    env = dict(os.environ, FERRO_SGEMM="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_the_engine_products_and_their_gradients(own):
    # ferro.linear / matmul and their backward run the kernel; float64 gradcheck-level answers
    # come from the float64 path, so compare with NumPy in float64 here
    rng = np.random.default_rng(4)
    x = ferro.from_numpy(rng.standard_normal((64, 300)).astype(np.float32)).requires_grad_()
    w = ferro.from_numpy(rng.standard_normal((200, 300)).astype(np.float32)).requires_grad_()
    y = ferro.linear(x, w)
    g = rng.standard_normal((64, 200)).astype(np.float32)
    y.backward(ferro.from_numpy(g))
    xn, wn = x.detach().numpy(), w.detach().numpy()
    _check(xn, wn.T, y.detach().numpy())
    _check(g, wn, x.grad.numpy())
    _check(g.T, xn, w.grad.numpy())
