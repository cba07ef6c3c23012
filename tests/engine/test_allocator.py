"""Note [Caching allocator]: large NumPy buffers freed in the importing context are reused; the
values NumPy hands out stay right (zeros are zero, copies are copies, resizes keep the data)."""

import contextvars
import threading

import numpy as np
import pytest

import ferro  # (installs the allocator unless FERRO_CACHING_ALLOCATOR=0)
from ferro._C import allocator

N = (allocator.THRESHOLD // 4) * 3  # float32 elements: a 3 MiB buffer, above the threshold


@pytest.fixture
def cache():
    prev = allocator.set_cache_limit(1 << 30)
    allocator.empty_cache()
    yield allocator
    allocator.set_cache_limit(prev)


def _installed():
    return np._core.multiarray.get_handler_name() == "ferro_caching_allocator"


pytestmark = pytest.mark.skipif(not _installed(), reason="FERRO_CACHING_ALLOCATOR=0")


def test_a_freed_large_buffer_is_reused_and_small_ones_are_not_cached(cache):
    a = np.ones(N, np.float32)
    addr = a.ctypes.data
    del a
    info = cache.cache_info()
    assert info["blocks"] == 1 and info["bytes"] >= N * 4
    b = np.empty(N, np.float32)
    assert b.ctypes.data == addr and cache.cache_info()["hits"] == info["hits"] + 1
    del b
    small = np.ones(1000, np.float32)
    del small
    assert cache.cache_info()["blocks"] == 1
    assert cache.empty_cache() >= N * 4 and cache.cache_info()["blocks"] == 0


def test_zeros_from_a_dirty_cached_block_are_zero(cache):
    a = np.full(N, 7.0, np.float32)
    del a
    z = np.zeros(N, np.float32)
    assert cache.cache_info()["hits"] >= 1
    assert not z.any()


@pytest.mark.parametrize("nbytes", [1024, 4000, 400_000, allocator.THRESHOLD, 4 * N, 40 << 20])
@pytest.mark.parametrize("make", ["empty", "zeros", "ones", "cached"])
def test_blocks_of_a_kibibyte_or_more_start_on_64_bytes(cache, nbytes, make):
    # (a fresh calloc above glibc's mmap threshold sat 16 bytes past a page; "cached": a block
    # freed and handed back out)
    n = nbytes // 4
    if make == "cached":
        a = np.zeros(n, np.float32)
        del a
        a = np.empty(n, np.float32)
    else:
        a = getattr(np, make)(n, np.float32)
    assert a.ctypes.data % 64 == 0
    assert make != "zeros" or not a.any()
    t = ferro.ones(n) + ferro.zeros(n)
    assert t.numpy().ctypes.data % 64 == 0 and t.numpy().min() == 1


def test_a_much_smaller_request_does_not_take_a_large_block(cache):
    a = np.ones(4 * N, np.float32)
    del a
    b = np.ones(N, np.float32)  # 4x smaller: a fresh block, the large one stays cached
    assert cache.cache_info()["blocks"] == 1
    del b


def test_a_full_cache_drops_its_oldest_blocks_for_the_sizes_now_in_use(cache):
    # 64 blocks of sizes no longer asked for, then a new size: its block takes the place of
    # the oldest and is handed back (before session 16 a full cache freed every new block).
    stale = [np.empty(N + 4096 * (3 * i + 1), np.float32) for i in range(64)]
    del stale
    assert cache.cache_info()["blocks"] == 64
    a = np.ones(3 * N, np.float32)
    addr = a.ctypes.data
    del a
    hits = cache.cache_info()["hits"]
    assert np.empty(3 * N, np.float32).ctypes.data == addr
    assert cache.cache_info()["hits"] == hits + 1 and cache.cache_info()["blocks"] == 64
    # At the byte limit too: a block freed into a full cache makes room by the oldest.
    cache.empty_cache()
    cache.set_cache_limit(int(N * 4 * 2.5))
    b, c = np.ones(N, np.float32), np.ones(N, np.float32)
    cc = c.ctypes.data
    del b, c  # two of the 2.5 blocks the limit holds, b first
    d = np.ones(N + 100, np.float32)  # fits neither: a fresh, larger block
    del d  # cached in b's place
    info = cache.cache_info()
    assert info["blocks"] == 2 and info["bytes"] <= info["limit"]
    assert np.empty(N, np.float32).ctypes.data == cc  # c stayed


def test_resize_keeps_the_data_and_limit_zero_caches_nothing(cache):
    a = np.arange(N, dtype=np.float32)
    a.resize(2 * N, refcheck=False)  # realloc of a block of ours
    np.testing.assert_array_equal(a[:N], np.arange(N, dtype=np.float32))
    assert not a[N:].any()
    del a
    cache.empty_cache()
    cache.set_cache_limit(0)
    b = np.ones(N, np.float32)
    del b
    assert cache.cache_info()["blocks"] == 0


def test_threads_allocating_and_freeing_at_once_get_right_values(cache):
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(20):
            v = rng.normal(size=N).astype(np.float32)
            w = v * 2
            if not np.array_equal(w / 2, v):
                errors.append(seed)
        if np._core.multiarray.get_handler_name() != "ferro_caching_allocator":
            errors.append("handler")

    # Each thread runs in a copy of this context, so it allocates through the handler too.
    threads = [
        threading.Thread(target=contextvars.copy_context().run, args=(work, s)) for s in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_a_forked_child_allocates_while_the_parent_keeps_working(cache):
    import multiprocessing as mp

    a = np.ones(N, np.float32)
    del a  # a cached block in the parent, inherited by the child
    ctx = mp.get_context("fork")
    with ctx.Pool(1) as pool:
        assert pool.apply(_child_sum) == float(N)
    assert np.ones(N, np.float32).sum() == N


def _child_sum():
    return float(np.ones(N, np.float32).sum())


@pytest.mark.parametrize(
    ("env", "applied"),
    [({}, True), ({"FERRO_MALLOC_TUNING": "0"}, False), ({"MALLOC_TRIM_THRESHOLD_": "1"}, False)],
)
def test_glibc_thresholds_are_fixed_unless_the_user_set_them(env, applied):
    # tune_heap (docs/autograd.md): a fresh process, since the thresholds are process-wide.
    import os
    import platform
    import subprocess
    import sys

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc only")
    code = "from ferro._C import allocator; print(allocator.tune_heap())"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert out.stdout.strip() == str(applied)
