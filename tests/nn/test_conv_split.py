"""Convolution's batch chunks run as parts of ferro._intraop (Note [Intra-op split]): the same
bits with one thread or several, a float64 check of the split, and an error inside a part."""

from __future__ import annotations

import threading
import types

import numpy as np
import pytest

import ferro
from ferro import _intraop
from ferro._C import conv_kernels as K
from ferro._C import gemm
from ferro.nn import functional as F
from ferro.ops import conv as conv_ops

needs_blas = pytest.mark.skipif(
    _intraop._BLAS is None, reason="NumPy's BLAS is not an OpenBLAS ferro can control"
)

# (function, input shape, weight shape, keyword arguments, the path the chunks take)
CASES = [
    (F.conv2d, (9, 16, 10, 10), (16, 16, 3, 3), {"padding": 1}, "winograd 2-d"),
    (F.conv3d, (5, 16, 8, 8, 8), (16, 16, 3, 3, 3), {"padding": 1}, "winograd 3-d"),
    (F.conv1d, (7, 16, 20), (16, 16, 5), {"padding": 2}, "winograd 1-d"),
    (F.conv2d, (9, 3, 9, 8), (6, 3, 3, 2), {"stride": 2, "padding": 1}, "columns, sub-pixel"),
    (F.conv2d, (6, 2, 7, 7), (5, 2, 3, 3), {"dilation": 2, "padding": 1}, "columns, col2im"),
    (F.conv2d, (6, 4, 7, 7), (6, 2, 3, 3), {"groups": 2}, "columns, groups"),
    (F.conv_transpose2d, (9, 4, 5, 6), (4, 3, 4, 4), {"stride": 2, "padding": 1}, "transposed"),
    (F.conv_transpose2d, (5, 16, 6, 5), (16, 8, 4, 4), {"stride": 2, "padding": 1}, "sub-pixel"),
    (F.conv2d, (5, 16, 11, 12), (16, 16, 4, 3), {"stride": 2, "padding": 1}, "winograd strided"),
]

# Batches that are one cache-sized chunk, cut by their work (_chunk's PART_MIN_WORK): the
# digits CNN's 16 -> 32 layer on 4x4 maps (columns kept per chunk, col2im input gradient), the
# other column paths.
SMALL_BATCH_CASES = [
    (F.conv2d, (8, 16, 4, 4), (32, 16, 3, 3), {"padding": 1}, "digits cnn layer 3"),
    (F.conv2d, (7, 16, 4, 4), (8, 16, 3, 3), {"padding": 1}, "columns, flipped input grad"),
    *(c for c in CASES if c[-1].startswith(("columns", "transposed"))),
]


def _run(fn, x, w, kw, threads, bias=False):
    # A bias: the Winograd parts add it and sum its gradient (Note [Kept transforms]).
    _intraop.set_num_threads(threads)
    tx, tw = ferro.tensor(x, requires_grad=True), ferro.tensor(w, requires_grad=True)
    o = w.shape[1] if fn is F.conv_transpose2d else w.shape[0]
    tb = ferro.tensor(np.linspace(-1, 1, o, dtype=x.dtype), requires_grad=True) if bias else None
    y = fn(tx, tw, tb, **kw)
    (y * y).sum().backward()
    return (y.data, tx.grad.data, tw.grad.data) + ((tb.grad.data,) if bias else ())


@pytest.fixture
def one_sample_chunks(monkeypatch):
    # One sample a chunk, so that every batch above is several chunks and several lanes; the
    # small shapes take Winograd too.
    monkeypatch.setattr(conv_ops, "CACHE_BYTES", 1)
    monkeypatch.setattr(conv_ops, "WINOGRAD_MIN_SIZE", 1)
    monkeypatch.setattr(conv_ops, "SUBPIXEL_WINOGRAD_MIN_SIZE", 1)
    old = _intraop.num_threads()
    yield
    _intraop.set_num_threads(old)


@needs_blas
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES, ids=[c[-1] for c in CASES])
def test_a_split_gives_the_bits_of_one_part(case, dtype, one_sample_chunks, monkeypatch):
    fn, xs, ws, kw, _ = case
    rng = np.random.default_rng(3)
    x = rng.normal(size=xs).astype(dtype)
    w = (rng.normal(size=ws) / np.sqrt(np.prod(ws[1:]))).astype(dtype)
    counts = []
    run = _intraop.run
    monkeypatch.setattr(_intraop, "run", lambda f, n: counts.append(n) or run(f, n))
    one = _run(fn, x, w, kw, 1, bias=True)
    assert set(counts) <= {1}  # one thread: no split (one part runs without the pool)
    for threads in (2, 3):
        counts.clear()
        got = _run(fn, x, w, kw, threads, bias=True)
        assert max(counts) == threads  # the chunks did run as parts
        for a, b in zip(got, one, strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.fixture
def work_split_chunks(monkeypatch):
    # Any work is worth a part: a one-chunk batch is cut into 2 or LANES chunks.
    monkeypatch.setattr(conv_ops, "PART_MIN_WORK", 1)
    old = _intraop.num_threads()
    yield
    _intraop.set_num_threads(old)


@needs_blas
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", SMALL_BATCH_CASES, ids=[c[-1] for c in SMALL_BATCH_CASES])
def test_a_one_chunk_batch_cut_by_its_work_gives_the_same_bits(
    case, dtype, work_split_chunks, monkeypatch
):
    fn, xs, ws, kw, _ = case
    rng = np.random.default_rng(4)
    x = rng.normal(size=xs).astype(dtype)
    w = (rng.normal(size=ws) / np.sqrt(np.prod(ws[1:]))).astype(dtype)
    counts = []
    run = _intraop.run
    monkeypatch.setattr(_intraop, "run", lambda f, n: counts.append(n) or run(f, n))
    one = _run(fn, x, w, kw, 1)
    for threads in (2, 3):
        counts.clear()
        got = _run(fn, x, w, kw, threads)
        assert max(counts) == threads  # the batch's pieces did run as parts
        for a, b in zip(got, one, strict=True):
            np.testing.assert_array_equal(a, b)
    monkeypatch.setattr(conv_ops, "PART_MIN_WORK", 1 << 60)  # one chunk, as before the cut
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for a, b in zip(_run(fn, x, w, kw, 2), one, strict=True):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * np.abs(b).max())


@pytest.mark.parametrize("batch", [1, 3, 8])
def test_the_weight_gradient_takes_each_chunks_kept_columns(batch, work_split_chunks, monkeypatch):
    # The digits CNN's layer 3 cut by its work: the forward's im2col runs once a chunk and the
    # weight gradient builds none (the input gradient is col2im's: C_out > C_in).
    calls = []
    im2col = K.im2col
    monkeypatch.setattr(K, "im2col", lambda *a: calls.append(1) or im2col(*a))
    x = np.random.default_rng(6).normal(size=(batch, 16, 4, 4)).astype(np.float32)
    w = np.random.default_rng(7).normal(size=(32, 16, 3, 3)).astype(np.float32)
    got = _run(F.conv2d, x, w, {"padding": 1}, 2)
    assert len(calls) == -(-batch // conv_ops._chunk(np, batch, 1, 32 * 16 * 9 * 16))
    monkeypatch.setattr(conv_ops, "PART_MIN_WORK", 1 << 60)
    for a, b in zip(got, _run(F.conv2d, x, w, {"padding": 1}, 2), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * np.abs(b).max())


@needs_blas
@pytest.mark.parametrize("case", CASES, ids=[c[-1] for c in CASES])
def test_a_split_float32_matches_float64(case, one_sample_chunks):
    fn, xs, ws, kw, _ = case
    rng = np.random.default_rng(5)
    x = rng.normal(size=xs)
    w = rng.normal(size=ws) / np.sqrt(np.prod(ws[1:]))
    want = _run(fn, x, w, kw, 1)
    got = _run(fn, x.astype(np.float32), w.astype(np.float32), kw, 2)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4 * np.abs(b).max())


@needs_blas
@pytest.mark.parametrize("where", ["forward", "backward"])
def test_an_error_inside_a_part_leaves_no_output_and_the_next_call_works(
    where, one_sample_chunks, monkeypatch
):
    rng = np.random.default_rng(7)
    x = rng.normal(size=(6, 16, 8, 8)).astype(np.float32)
    w = rng.normal(size=(16, 16, 3, 3)).astype(np.float32)
    want = _run(F.conv2d, x, w, {"padding": 1}, 1)
    _intraop.set_num_threads(2)
    blas_threads = _intraop._BLAS[0]()
    calls = []
    real = K.winograd_output_grad if where == "backward" else K.winograd_output

    def failing(*args):  # the fourth chunk fails, in whichever part runs it
        calls.append(1)
        if len(calls) == 4:
            raise RuntimeError("a part failed")
        return real(*args)

    monkeypatch.setattr(K, real.__name__, failing)
    tx, tw = ferro.tensor(x, requires_grad=True), ferro.tensor(w, requires_grad=True)
    with pytest.raises(RuntimeError, match="a part failed"):
        y = F.conv2d(tx, tw, padding=1)
        (y * y).sum().backward()
    assert tx.grad is None and tw.grad is None
    monkeypatch.setattr(K, real.__name__, real)
    assert _intraop._BLAS[0]() == blas_threads and not _intraop._state.active  # given back
    for a, b in zip(_run(F.conv2d, x, w, {"padding": 1}, 2), want, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("case", CASES, ids=[c[-1] for c in CASES])
def test_an_empty_batch_has_empty_gradients(case):
    fn, xs, ws, kw, _ = case
    x = ferro.zeros(0, *xs[1:], requires_grad=True)
    w = ferro.ones(*ws, requires_grad=True)
    y = fn(x, w, **kw)
    y.sum().backward()
    assert y.shape[0] == 0 and x.grad.shape == x.shape
    np.testing.assert_array_equal(w.grad.data, np.zeros(ws))


def test_chunks_are_a_multiple_of_the_lanes_and_equal(monkeypatch):
    monkeypatch.setattr(conv_ops, "CACHE_BYTES", 1000)
    assert conv_ops._chunk(np, 16, 60) == 16  # one chunk: the whole batch
    assert conv_ops._chunk(np, 16, 70) == 4  # two chunks of 14 and 2 -> four of 4
    assert conv_ops._chunk(np, 3, 700) == 1  # no more chunks than samples
    assert conv_ops._chunk(np, 0, 70) == 1
    assert conv_ops._chunk(np, 32, 2000) == 1


def test_a_one_chunk_batch_is_cut_in_two_or_the_lanes_by_its_work():
    least = conv_ops.PART_MIN_WORK
    assert conv_ops._chunk(np, 64, 100) == 64  # no work given: one chunk
    assert conv_ops._chunk(np, 64, 100, 2 * least // 64 - 1) == 64  # too little for two
    assert conv_ops._chunk(np, 64, 100, 2 * least // 64) == 32
    assert conv_ops._chunk(np, 64, 100, 4 * least // 64) == 16  # LANES pieces
    assert conv_ops._chunk(np, 63, 100, least) == 16  # equal but the last
    assert conv_ops._chunk(np, 3, 100, least) == 2  # no more pieces than samples
    assert conv_ops._chunk(np, 1, 100, 8 * least) == 1
    assert conv_ops._chunk(np, 0, 100, least) == 1


@needs_blas
def test_two_threads_splitting_at_once_get_the_bits_of_one_part(one_sample_chunks):
    fn, xs, ws, kw, _ = CASES[0]
    rng = np.random.default_rng(9)
    inputs = [(rng.normal(size=xs), rng.normal(size=ws) / 12) for _ in range(2)]
    inputs = [(x.astype(np.float32), w.astype(np.float32)) for x, w in inputs]
    want = [_run(fn, x, w, kw, 1) for x, w in inputs]
    _intraop.set_num_threads(2)
    got, errors = [None, None], []

    def work(i):
        try:
            for _ in range(5):  # the two threads' splits overlap and share the one pool thread
                got[i] = _run(fn, *inputs[i], kw, 2)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for g, w in zip(got, want, strict=True):
        for a, b in zip(g, w, strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "fn, xshape, cout",
    [
        (F.conv2d, (9, 8, 5, 5), 6),
        (F.conv2d, (1, 500, 3, 4), 7),  # one sample; sums over more than ~450 channels
        (F.conv1d, (5, 16, 33), 12),
        (F.conv3d, (3, 6, 4, 3, 5), 4),
    ],
)
def test_the_pointwise_path_runs_on_the_team_with_the_same_bits_at_any_thread_count(
    fn, xshape, cout, dtype, monkeypatch
):
    # Note [Pointwise products]: every pass is one gemm.batched call (no Python split); its
    # products are independent and its sum runs in two fixed runs, so the bits do not depend on
    # the thread count; the values are the float64 product's.
    calls = []
    real = conv_ops.gemm.batched

    def batched(*args, **kwargs):
        calls.append(kwargs.get("reduce", False))
        return real(*args, **kwargs)

    monkeypatch.setattr(conv_ops, "gemm", types.SimpleNamespace(batched=batched, walk=gemm.walk))
    rng = np.random.default_rng(7)
    x = rng.normal(size=xshape).astype(dtype)
    w = (rng.normal(size=(cout, xshape[1]) + (1,) * (len(xshape) - 2)) / 8).astype(dtype)
    old = _intraop.num_threads()
    try:
        runs = [_run(fn, x, w, {}, t) for t in (1, 2, 3)]
    finally:
        _intraop.set_num_threads(old)
    if gemm.have_blas():
        assert calls == [False, False, True] * 3  # forward, input gradient, weight gradient
    for got in runs[1:]:
        for a, b in zip(got, runs[0], strict=True):
            np.testing.assert_array_equal(a, b)
    xs, ws = x.reshape(*xshape[:2], -1).astype(np.float64), w.reshape(cout, -1).astype(np.float64)
    y = np.einsum("oc,ncl->nol", ws, xs)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    want = (y, np.einsum("oc,nol->ncl", ws, 2 * y), np.einsum("ncl,nol->oc", xs, 2 * y))
    for a, b in zip(runs[0], want, strict=True):
        np.testing.assert_allclose(a.reshape(b.shape), b, rtol=tol, atol=tol * np.abs(b).max())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "xshape, m, kw",
    [
        ((4, 8, 24, 24), 1, {"padding": 1}),  # the benchmark's kind: one output per channel
        ((16, 8, 24, 24), 2, {"padding": 1, "stride": 2}),  # a multiplier: 2 planes per gx plane
        ((4, 8, 24, 24), 2, {"padding": 2, "dilation": 2}),
    ],
)
def test_depthwise_loops_give_the_same_bits_at_any_thread_count(dtype, xshape, m, kw):
    # The direct depthwise loops split planes over ferro's OpenMP team (over 2^18 multiply-adds,
    # which these shapes are): each element's sum keeps the serial order.
    rng = np.random.default_rng(7)
    c = xshape[1]
    x = rng.standard_normal(xshape).astype(dtype)
    w = rng.standard_normal((c * m, 1, 3, 3)).astype(dtype)
    old = _intraop.num_threads()
    try:
        runs = [_run(F.conv2d, x, w, dict(kw, groups=c), t) for t in (1, 2, 3)]
    finally:
        _intraop.set_num_threads(old)
    for other in runs[1:]:
        for a, b in zip(runs[0], other, strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "fn, xshape, wshape, kw",
    [
        (F.conv2d, (4, 64, 2, 2), (512, 64, 3, 3), {"padding": 1}),  # ResNet-18's deep layers
        (F.conv2d, (4, 32, 4, 4), (256, 32, 3, 3), {"padding": 1, "stride": 2}),
        (F.conv_transpose2d, (2, 256, 2, 2), (256, 16, 3, 3), {"padding": 1}),
        (F.conv2d, (2, 32, 8, 8), (256, 32, 4, 4), {"stride": 2, "padding": 1}),  # DCGAN's
        (F.conv_transpose2d, (2, 256, 4, 4), (256, 32, 4, 4), {"stride": 2, "padding": 1}),
    ],
)
def test_weight_bound_layers_split_their_gemms_with_the_same_bits_at_any_thread_count(
    fn, xshape, wshape, kw, dtype, monkeypatch
):
    # Note [Weight-bound convolutions]: C_out >= n * L, so the batch is one chunk and its GEMMs
    # run through gemm.matmul's split (no Python parts, no partial sums).
    calls = []
    real = conv_ops.gemm.matmul

    def matmul(*args, **kwargs):
        calls.append(kwargs.get("parts", False))
        return real(*args, **kwargs)

    space = types.SimpleNamespace(matmul=matmul, walk=gemm.walk, have_blas=gemm.have_blas)
    monkeypatch.setattr(conv_ops, "gemm", space)
    rng = np.random.default_rng(5)
    x = rng.normal(size=xshape).astype(dtype)
    w = (rng.normal(size=wshape) / np.sqrt(np.prod(wshape[1:]))).astype(dtype)
    old = _intraop.num_threads()
    try:
        runs = [_run(fn, x, w, kw, t) for t in (1, 2, 3)]
    finally:
        _intraop.set_num_threads(old)
    if gemm.have_blas():
        assert calls and all(calls)
    for got in runs[1:]:
        for a, b in zip(got, runs[0], strict=True):
            np.testing.assert_array_equal(a, b)
    want = _run(fn, x.astype(np.float64), w.astype(np.float64), kw, 1)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    for a, b in zip(runs[0], want, strict=True):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * np.abs(b).max())
