"""ferro._intraop: the intra-op split's pool, its BLAS/OpenMP thread settings, nesting, errors
and fork safety (Note [Intra-op split])."""

import contextvars
import multiprocessing
import threading

import numpy as np
import pytest

from ferro import _intraop as intraop
from ferro.errors import ArgumentError

needs_blas = pytest.mark.skipif(
    intraop._BLAS is None, reason="NumPy's BLAS is not an OpenBLAS ferro can control"
)


@pytest.fixture
def two_threads():
    old = intraop.num_threads()
    intraop.set_num_threads(2)
    yield
    intraop.set_num_threads(old)


def _blas_threads():
    return intraop._BLAS[0]()


@needs_blas
def test_run_returns_the_parts_in_order_with_one_blas_thread_inside(two_threads):
    before = _blas_threads()
    seen = []

    def part(i):
        seen.append((i, _blas_threads(), intraop.parts(8), threading.current_thread().name))
        return i * 10

    assert intraop.run(part, 2) == [0, 10]
    assert sorted(s[:3] for s in seen) == [(0, 1, 1), (1, 1, 1)]  # one BLAS thread, no nesting
    # (Which thread ran part 1 is the scheduler's: one the pool has not started by the time
    # the caller's part ends runs on the caller.)
    assert _blas_threads() == before  # given back


_VAR = contextvars.ContextVar("test_intraop_var", default="unset")


@needs_blas
def test_a_pool_thread_runs_its_part_in_a_copy_of_the_callers_context(two_threads):
    # NumPy's memory handler lives in a context variable: a part on a pool thread allocates
    # with ferro's (64-byte aligned) handler, as the caller does, only in the caller's context.
    started = threading.Event()
    token = _VAR.set("caller")
    try:

        def part(i):
            if i == 0:  # hold the caller's thread until the pool has run part 1
                assert started.wait(30)
            else:
                started.set()
            buf = np.empty(1 << 16, np.float32)
            name = np._core.multiarray.get_handler_name(buf)
            return _VAR.get(), threading.current_thread().name, name, buf.ctypes.data % 64

        (v0, t0, h0, a0), (v1, t1, h1, a1) = intraop.run(part, 2)
    finally:
        _VAR.reset(token)
    assert t0 != t1 and v0 == v1 == "caller"
    assert h1 == h0 == np._core.multiarray.get_handler_name()
    if h0 == "ferro_caching_allocator":
        assert a0 == a1 == 0


@needs_blas
@pytest.mark.skipif(intraop._GOMP is None, reason="ferro's libgomp is not loaded")
def test_openmp_runs_one_thread_inside_a_part_and_the_caller_gets_its_setting_back(two_threads):
    caller = intraop._GOMP[0]()
    inside = intraop.run(lambda i: intraop._GOMP[0](), 2)
    assert inside == [1, 1]
    assert intraop._GOMP[0]() == caller


@needs_blas
def test_an_error_in_a_part_is_raised_after_every_part_ends(two_threads):
    ended = []

    def part(i):
        if i == 0:
            raise ValueError("part 0 failed")
        ended.append(i)
        return i

    before = _blas_threads()
    with pytest.raises(ValueError, match="part 0 failed"):
        intraop.run(part, 2)
    assert ended == [1]
    assert _blas_threads() == before
    assert intraop.run(lambda i: i, 2) == [0, 1]  # the pool still works


@needs_blas
def test_overlapping_splits_give_the_blas_count_back_once_the_last_ends(two_threads):
    before = _blas_threads()
    inside, release = threading.Event(), threading.Event()
    other = []

    def slow(i):
        inside.set()
        release.wait(10)
        return i

    t = threading.Thread(target=lambda: other.append(intraop.run(slow, 2)))
    t.start()
    assert inside.wait(10)
    assert intraop.run(lambda i: _blas_threads(), 2) == [1, 1]
    assert _blas_threads() == 1  # the first split still runs
    release.set()
    t.join(10)
    assert other == [[0, 1]]
    assert _blas_threads() == before


def test_parts_is_one_where_a_split_cannot_help(two_threads):
    assert intraop.parts(1) == 1
    assert intraop.parts(8, minimum=8) == 1
    intraop.set_num_threads(1)
    assert intraop.parts(100) == 1
    assert intraop.run(lambda i: i, 1) == [0]
    with pytest.raises(ArgumentError, match="set_num_threads"):
        intraop.set_num_threads(0)


def _child(queue):
    queue.put(intraop.run(lambda i: float(np.ones((64, 64)) @ np.ones(64) @ np.ones(64)) + i, 2))


@needs_blas
def test_a_forked_child_runs_splits(two_threads):
    intraop.run(lambda i: i, 2)  # the parent's pool exists before the fork
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue,))
    proc.start()
    try:
        assert queue.get(timeout=60) == [4096.0, 4097.0]
    finally:
        proc.join(60)
    assert proc.exitcode == 0


def test_set_num_threads_sets_the_split_the_blas_and_this_threads_openmp():
    import ferro

    before = ferro.get_num_threads()
    try:
        ferro.set_num_threads(1)
        assert ferro.get_num_threads() == 1 and intraop.parts(100) == 1
        if intraop._BLAS is not None:
            assert _blas_threads() == 1
        if intraop._GOMP is not None:
            assert intraop._GOMP[0]() == 1
        ferro.set_num_threads(3)
        assert ferro.get_num_threads() == 3
        if intraop._BLAS is not None:
            assert _blas_threads() == 3
            assert intraop.parts(100) == 3
    finally:
        ferro.set_num_threads(before)
    for bad, err in ((0, ArgumentError), (-2, ArgumentError), (2.0, TypeError), (True, TypeError)):
        with pytest.raises(err, match="set_num_threads"):
            ferro.set_num_threads(bad)
    assert ferro.get_num_threads() == before


@needs_blas
def test_set_num_threads_during_a_split_is_what_the_split_gives_back(two_threads):
    def part(i):
        if i == 0:
            intraop.set_num_threads(2)
        return _blas_threads()

    intraop.set_num_threads(3)
    assert intraop.run(part, 2)[1] == 1
    assert _blas_threads() == 2


@needs_blas
def test_products_splits_and_walks_share_one_count_whatever_order_they_end_in(two_threads):
    # A product (ferro._C.gemm) that starts before a split and ends inside it must neither give
    # the split two BLAS threads nor leave the count at one after both end.
    from ferro._C import gemm

    before = _blas_threads()
    gemm.hold()
    with intraop.one_blas_thread():
        gemm.release()
        assert _blas_threads() == 1
    assert _blas_threads() == before
    with intraop.one_blas_thread():
        intraop.set_num_threads(3)  # given back at the last release
        assert _blas_threads() == 1
    assert _blas_threads() == 3
