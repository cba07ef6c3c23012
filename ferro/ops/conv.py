"""Convolution: ``conv1d/2d/3d``, ``conv_transpose1d/2d/3d``, ``unfold`` and ``fold``.

PyTorch's layouts and signatures: input ``(N, C, *spatial)`` (``N C L``, ``N C H W``,
``N C D H W``; unbatched ``(C, *spatial)`` too), convolution weight ``(C_out, C_in / groups,
*kernel)``, transposed-convolution weight ``(C_in, C_out / groups, *kernel)``.

Note [Convolution as three functions]. Everything here is one N-d implementation made of three
array functions, written once against ``xp``:

- :func:`_conv_forward` ``y = conv(x, w)``: im2col (a strided window view of the padded input
  copied into a column matrix ``(n, groups, C_in/groups * prod(kernel), L)``), then one batched
  matmul by the weight ``(groups, C_out/groups, C_in/groups * prod(kernel))``.
- :func:`_conv_input_grad` ``gx``: the weight's transpose times ``gy`` gives the columns'
  gradient, and col2im adds each kernel offset's slice of it back into the padded input.
- :func:`_conv_weight_grad` ``gw``: ``gy`` times the columns' transpose, summed over the batch.

A transposed convolution *is* a convolution's input gradient (and its gradients are a
convolution and a weight gradient), so ``ConvTranspose`` calls the same three functions with
the roles exchanged, and ``unfold``/``fold`` are im2col/col2im as ops. The batch goes through in
chunks so the column matrix stays within :data:`WORKSPACE_BYTES` (on the CPU within
:data:`CACHE_BYTES`, so that the GEMMs run from cache, and run as parts on several cores:
:func:`_in_parts`, docs/conv.md "Two cores"). On the CPU the ops' paired overrides pass
the backend's nogil column loops (``kernels``), and a stride-1 3x3 convolution with enough
channels runs Winograd F(2x2, 3x3) instead of im2col (docs/conv.md); a 1x1 convolution with stride
1 and no padding needs no copy at all (one GEMM per sample on the input as it lies, forward and
both gradients: :func:`_pointwise`); a stride-1 1-d convolution by a kernel of 3 or 5 runs
Winograd F(4, k); a strided convolution's input gradient (a strided transposed convolution's
forward) is one GEMM over sub-pixel phases; a depthwise
convolution (one input channel per group) takes a direct loop over the kernel offsets instead of
a block-diagonal GEMM of 1-row matrices. The GPU's column kernels (``ferro.cuda.conv``) have the
CPU's signatures, so the same ``kernels`` argument takes either backend; ``unfold``/``fold`` on
the GPU take its batch-major column kernels (:func:`columns_override`).

Both op classes have a ``differentiable_backward`` that computes the same gradients from the
ops themselves (input gradient: the transposed convolution; weight gradient: a convolution of
the input by ``gy`` with stride and dilation exchanged), for double backward.
"""

from __future__ import annotations

import functools
import itertools
import math
import numbers
import operator
import threading

import numpy as np

from ferro import _intraop
from ferro._C import gemm
from ferro.errors import ArgumentError, ArgumentTypeError, DtypeError, ShapeError
from ferro.ops.registry import apply, register

#: The most bytes a column matrix may take; the batch is processed in chunks that fit.
WORKSPACE_BYTES = 32 << 20
#: On the CPU, a chunk's column matrix is also kept within a few MB, so that each GEMM's wide
#: operand stays in cache: OpenBLAS's (64 x 576) @ (576 x N) GEMM runs at 75 GFLOPS on one core
#: for N = 1024 and at 22-30 for N = 8192..32768 (memory-bound), so one GEMM over the whole
#: 32 MB workspace was 1.35x slower over a conv2d forward+backward (Note [Convolution as three
#: functions]).
CACHE_BYTES = 4 << 20


# --- the three array functions (Note [Convolution as three functions]) -----------------------


def _windows(xp, xpad, kernel, stride, dilation, out):
    """The strided view ``(n, C, *kernel, *out)`` of a padded input ``(n, C, *padded)``: element
    ``[n, c, k..., l...]`` is ``xpad[n, c, l*stride + k*dilation ...]``. Reads only."""
    s = xpad.strides
    nd = len(kernel)
    strides = (
        s[:2]
        + tuple(s[2 + i] * dilation[i] for i in range(nd))
        + tuple(s[2 + i] * stride[i] for i in range(nd))
    )
    return xp.lib.stride_tricks.as_strided(
        xpad, xpad.shape[:2] + tuple(kernel) + tuple(out), strides
    )


def _offset_slices(k, stride, dilation, out):
    """The slices of the padded input that kernel offset ``k`` touches, one per spatial dim."""
    return tuple(
        slice(k[i] * dilation[i], k[i] * dilation[i] + stride[i] * (out[i] - 1) + 1, stride[i])
        for i in range(len(k))
    )


def _padded(xp, x, pads, buf=None):
    """``x`` zero-padded by ``pads`` (one ``(lo, hi)`` per spatial dim); ``x`` itself when there
    is no padding. ``buf``, a previous result of a larger batch, is reused: its border is zero."""
    if not any(lo or hi for lo, hi in pads):
        return x
    shape = x.shape[:2] + tuple(s + lo + hi for s, (lo, hi) in zip(x.shape[2:], pads, strict=True))
    if buf is None or buf.shape[1:] != shape[1:] or buf.shape[0] < shape[0]:
        buf = xp.zeros(shape, dtype=x.dtype)
    buf = buf[: shape[0]]
    buf[(slice(None), slice(None)) + _interior(x.shape[2:], pads)] = x
    return buf


def _interior(size, pads):
    return tuple(slice(lo, lo + s) for s, (lo, _) in zip(size, pads, strict=True))


def _chunk(xp, n, row_bytes, work=0):
    """How many batch elements a chunk takes (at least one): as many as fit in the workspace on
    a GPU, as many as fit in :data:`CACHE_BYTES` on the CPU, where a batch of several chunks is
    cut into a multiple of :data:`LANES` chunks of equal size, so that parts get equal work; a
    one-chunk batch into 2 or LANES if each keeps :data:`PART_MIN_WORK` of ``work`` a sample."""
    if xp is not np:
        return max(1, min(n, WORKSPACE_BYTES // max(row_bytes, 1)))
    chunks = -(-n // max(1, min(WORKSPACE_BYTES, CACHE_BYTES) // max(row_bytes, 1)))
    if chunks <= 1:
        chunks = next((k for k in (LANES, 2) if n * work >= k * PART_MIN_WORK and n >= k), 1)
        return -(-n // chunks) if n else 1
    return -(-n // min(n, -(-chunks // LANES) * LANES))


#: The least work (multiply-adds) worth a part of its own (:func:`_chunk`). At 2^21 the digits
#: CNN's 16 -> 32 convolution on 4x4 maps (4.7M multiply-adds forward) ran in two parts; on the
#: quiet machine the whole step took 1.76-2.05 ms that way against 1.41-1.52 in one part
#: (OpenBLAS's own split; same-process interleaved A/B, docs/conv.md), so it stays whole now.
PART_MIN_WORK = 1 << 23


#: A weight gradient sums its batch chunks' products in at most this many lanes (contiguous
#: runs of chunks, each summed in order, then the lanes added in order) whatever the number of
#: threads: the parts run whole lanes, so the result is the same with one thread or several.
LANES = 4


def _in_parts(xp, n, step, body, lanes=None, split=True):
    """``body(chunks)`` on each of :func:`ferro._intraop.parts` parts (one on a GPU or with
    ``split=False``) of the
    batch's chunks ``[n0, n0 + step)`` (Note [Intra-op split]), ``chunks`` yielding ``(run,
    n0)``: the chunks are cut into ``lanes`` contiguous runs (by default one a chunk), and each
    part takes the next whole run as it comes free, so a part that starts late (a busy core)
    takes less. With ``lanes``, ``body`` returns ``{run: its partial sum}`` and this the sum of
    the runs' sums in run order (None for an empty batch)."""
    starts = range(0, n, step)
    nr = min(len(starts), lanes or len(starts))
    runs = [starts[i * len(starts) // nr : (i + 1) * len(starts) // nr] for i in range(nr)]
    lock, todo = threading.Lock(), iter(range(nr))

    def chunks():
        while (j := _locked_next(lock, todo)) is not None:
            yield from ((j, n0) for n0 in runs[j])

    if (k := _intraop.parts(nr) if xp is np and split else 1) == 1:  # no lock, no pool
        parts = [body((j, n0) for j in range(nr) for n0 in runs[j])]
    else:
        parts = _intraop.run(lambda i: body(chunks()), k)
    if lanes and n:
        sums = {j: a for part in parts for j, a in part.items()}
        return functools.reduce(operator.iadd, (sums[j] for j in range(1, nr)), sums[0])


def _locked_next(lock, it):
    with lock:
        return next(it, None)


def _add_product(xp, sums, run, a, b, prod, whole=False):
    """Add ``a @ b`` to ``sums[run]`` (or start it); returns the reused product buffer."""
    if run not in sums:
        sums[run] = _product(xp, a, b, whole)
    else:
        sums[run] += (prod := xp.matmul(a, b, out=prod))
    return prod


# Note [Weight-bound convolutions]: where a convolution's weight is at least as large as its
# whole batch's columns (C_out >= n * L: ResNet-18's deep layers, 512 -> 512 on 2x2 maps at
# batch 16), cutting the batch into parts makes each part read the whole weight (9.4 MB for
# each of 4 chunks) and the weight gradient sum 4 lanes of weight-sized products (3 adds of
# 9.4 MB, 2.2 ms of a 16 ms step). There the batch is one chunk and each GEMM splits over its
# rows on ferro's team instead (ferro._C.gemm.matmul with ``parts``: each thread half of the
# weight, no partial sums; the same bits on any thread count); in a parallel backward walk the
# node runs alone (ctx._alone), as a split's does. The same rule sends such a layer's input
# gradient through col2im (the weight's transpose times gy) rather than the convolution of gy
# by a flipped copy of the weight, and a strided layer's through col2im rather than sub-pixel
# phases, whose per-phase weight gathers copy the weight too (DCGAN's 256 -> 512 4x4 stride-2
# layer at batch 16: 57 -> 18.5 ms, PyTorch 20).


def _weight_bound(xp, n, c, o, kp, ell, groups, itemsize):
    """Whether a convolution's column passes run whole (Note [Weight-bound convolutions])."""
    return (
        xp is np
        and groups == 1
        and 0 < n * ell <= o
        and n * c * kp * ell * itemsize <= WORKSPACE_BYTES
        and gemm.have_blas()
    )


def _product(xp, a, b, whole, out=None):
    """``a @ b`` of one-group stacks ``(1, m, k) @ (1, k, p)``: split over the rows on ferro's
    team where ``whole`` (Note [Weight-bound convolutions]), else the array module's matmul."""
    if whole and not gemm.walk.on:
        y = gemm.matmul(a[0], b[0], None if out is None else out[0], parts=True)
        if y is not NotImplemented:
            return y[None]
    return xp.matmul(a, b, out=out)


def _im2col(xp, x, kernel, stride, pads, dilation, out, buf=None):
    """Columns ``(n, C, *kernel, *out)``, contiguous, of the input ``(n, C, *size)``."""
    view = _windows(xp, _padded(xp, x, pads, buf), kernel, stride, dilation, out)
    return xp.ascontiguousarray(view)


def _col2im(xp, col, size, stride, pads, dilation):
    """The adjoint of :func:`_im2col`: ``col`` ``(n, C, *kernel, *out)`` (any strides) added
    into an input of spatial ``size``, one kernel offset's slice at a time (overlapping windows
    sum)."""
    nd = len(size)
    kernel, out = col.shape[2 : 2 + nd], col.shape[2 + nd :]
    padded = tuple(s + lo + hi for s, (lo, hi) in zip(size, pads, strict=True))
    g = xp.zeros(col.shape[:2] + padded, dtype=col.dtype)
    whole = (slice(None), slice(None))
    for k in itertools.product(*(range(kk) for kk in kernel)):
        g[whole + _offset_slices(k, stride, dilation, out)] += col[whole + k]
    return g[whole + _interior(size, pads)] if padded != tuple(size) else g


# The GEMM path works on channel-major matrices, so that each chunk is ONE matrix product per
# group with the batch folded into the columns: ``(C_in/g * prod(kernel), n * L)`` columns and
# ``(C_out/g, n * L)`` outputs. (NumPy's stacked matmul, one small GEMM per sample, measured
# 2-3x slower than one large GEMM on the benchmark's shapes.) A 1x1 convolution is then one
# plain GEMM of the transposed input.


def _columns(xp, x, kernel, stride, dilation, out):
    """im2col of a padded chunk ``(n, C, *padded)``, channel-major: ``(C, *kernel, n, *out)``."""
    nd = len(kernel)
    view = _windows(xp, x, kernel, stride, dilation, out)
    perm = (1, *range(2, 2 + nd), 0, *range(2 + nd, 2 + 2 * nd))
    return xp.ascontiguousarray(view.transpose(perm))


def _channel_major(xp, a, groups):
    """``(n, C, *s)`` -> ``(groups, C/groups, n * prod(s))``, contiguous."""
    n, c = a.shape[:2]
    t = xp.ascontiguousarray(a.swapaxes(0, 1))
    return t.reshape(groups, c // groups, n * math.prod(a.shape[2:]))


class _Columns:
    """The column matrices of one convolution's batch chunks, ``(C, *kernel, n, *out)``
    (channel-major: see below). ``kernels``, a backend module with ``im2col``/``col2im`` (the
    CPU's nogil loops, which pad on the fly), builds them into one reused buffer; without it,
    strided views of a padded copy do."""

    def __init__(self, xp, kernels, c, kernel, step, out, dtype):
        self.xp, self.kernels, self.kernel, self.out = xp, kernels, tuple(kernel), tuple(out)
        self.flat = (
            xp.empty(c * math.prod(kernel) * step * math.prod(out), dtype) if kernels else None
        )
        self.buf = None

    def of(self, xc, stride, pads, dilation):
        """The columns of the chunk ``xc`` ``(n, C, *size)``."""
        if self.kernels is None:
            self.buf = _padded(self.xp, xc, pads, self.buf)
            return _columns(self.xp, self.buf, self.kernel, stride, dilation, self.out)
        shape = (xc.shape[1], *self.kernel, xc.shape[0], *self.out)
        col = self.flat[: math.prod(shape)].reshape(shape)
        return self.kernels.im2col(xc, stride, pads, dilation, col)


def _conv_forward(
    xp, x, w, stride, pads, dilation, groups, out, kernels=None, gw_for=None, cache=None, b=None
):
    """``y`` ``(N, C_out, *out)`` of the convolution of ``x`` ``(N, C_in, *size)`` by ``w``
    ``(C_out, C_in/groups, *kernel)``, plus the bias ``b`` if given; ``kernels``: see
    :class:`_Columns`. With ``gw_for``, the output gradient of another convolution of ``x`` (a
    transposed convolution's backward), returns ``(y, gw)``: that convolution's weight gradient
    too, from the same columns. ``cache``: see :func:`_columns_pass`."""
    n, c = x.shape[:2]
    o, cg = w.shape[:2]
    kernel = w.shape[2:]
    win = _winograd(kernels, kernel, c, o, out, stride, dilation, groups)
    if b is not None and not (win and gw_for is None):  # (Winograd's parts add it themselves)
        y = _conv_forward(xp, x, w, stride, pads, dilation, groups, out, kernels, gw_for, cache)
        return _add_bias(y, b)
    if _subpixel_winograd(kernels, kernel, c, o, stride, dilation, groups, out):
        z, wz = (
            _SpaceToDepth(xp, x, stride, pads, out, kernels),
            _space_to_depth_weight(xp, w, stride),
        )
        if gw_for is None:
            y = xp.empty((n, o) + tuple(out), dtype=x.dtype)
            return _winograd_forward(xp, kernels, z, wz, _UNPADDED, out, y)
        y, gw = _winograd_weight_grad(xp, kernels, z, gw_for, _UNPADDED, wf=wz, cache=cache)
        return y, _depth_to_space_weight(xp, gw, stride, kernel)
    if cg == 1 and groups > 1 or win:
        y = xp.empty((n, o) + tuple(out), dtype=x.dtype)
        if groups > 1:
            y = _depthwise_forward(xp, x, w, stride, pads, dilation, groups, out, y)
        else:
            keep = None if gw_for is not None else cache  # (a cache of this x's convolution)
            y = _winograd_forward(xp, kernels, x, w, pads, out, y, b, keep)
        if gw_for is None:
            return y
        return y, _conv_weight_grad(xp, x, gw_for, stride, pads, dilation, groups, kernel, kernels)
    if gw_for is None and _output_side(c, o, kernel, stride, pads, dilation, groups):
        flipped, wt = _flipped(stride, pads, kernel, dilation), _transposed_weight(xp, w, groups)
        return _conv_input_grad(xp, x, wt, stride, flipped, dilation, groups, out, kernels)
    y, gw = _columns_pass(
        xp, x, w, gw_for, stride, pads, dilation, groups, kernel, out, kernels, cache
    )
    return y if gw_for is None else (y, gw)


def _output_side(c, o, kernel, stride, pads, dilation, groups):
    """Whether a stride-1 convolution's forward is better taken from the output side: the
    weight's transpose times ``x`` and col2im, as the input gradient of the convolution by the
    flipped weight (:func:`_conv_input_grad`), whose columns are ``C_out * prod(k)`` rows, not
    ``C_in * prod(k)``. Where ``C_out`` is at most a quarter of ``C_in`` and the kernel large
    (the style transfer example's last 32 -> 3 9x9 layer on 64x64 maps: im2col's columns 42 MB
    a sample, its GEMM 3 rows tall; forward 32 -> 2.7 ms, PyTorch's whole step 15.5)."""
    return (
        groups == 1
        and 4 * o <= c
        and math.prod(kernel) >= 9
        and _flipped(stride, pads, kernel, dilation) is not None
    )


def _flipped(stride, pads, kernel, dilation):
    """The padding of the convolution by the flipped weight that gives a stride-1
    convolution's input gradient (from the output side, its forward): the kernel's span less
    each pad; None for a stride above 1 or a pad beyond the span."""
    span = [d * (k - 1) for d, k in zip(dilation, kernel, strict=True)]
    if any(s != 1 for s in stride) or not all(
        0 <= lo <= t and 0 <= hi <= t for (lo, hi), t in zip(pads, span, strict=True)
    ):
        return None
    return tuple((t - lo, t - hi) for (lo, hi), t in zip(pads, span, strict=True))


def _swap_last2(xp, kernels, a):
    """``a`` ``(..., M, N)`` as a C-contiguous ``(..., N, M)``: the backend's blocked kernel where
    it has one (NumPy's copy of the transposed view walks one side a column at a time: ResNet-18's
    512 -> 512 3x3 weight gradient, (4608, 512), took 10.2 ms against 0.34 for a plain copy)."""
    if _has(kernels, "swap_last2") and kernels.accepts((a,)):
        return kernels.swap_last2(a)
    return xp.ascontiguousarray(xp.swapaxes(a, -1, -2))


def _columns_pass(xp, x, w, gy, stride, pads, dilation, groups, kernel, out, kernels, cache=None):
    """One pass over the columns of ``x``'s batch chunks: ``y``, the product by ``w`` (None if
    ``w`` is), and ``gw``, the weight gradient of a convolution of ``x`` with output gradient
    ``gy`` (None if ``gy`` is).

    ``cache``, a dict (a forward's ``ctx.columns``): where the whole batch's columns fit in
    :data:`CACHE_BYTES`, the forward leaves each chunk's there and the weight gradient takes
    them instead of building them again (on the digits CNN's training step, a third of each
    convolution's backward), and the input gradient ``gy``'s chunks channel-major."""
    n, c = x.shape[:2]
    cg = c // groups
    kp, ell = math.prod(kernel), math.prod(out)
    o = w.shape[0] if w is not None else gy.shape[1]
    y = gwt = None
    if w is not None:
        wr = w.reshape(groups, o // groups, cg * kp)
        y = xp.empty((n, o) + tuple(out), dtype=x.dtype)
    whole = _weight_bound(xp, n, c, o, kp, ell, groups, x.itemsize)
    step = n if whole else _chunk(xp, n, c * kp * ell * x.itemsize, o * cg * kp * ell)
    kept, gys = (cache.pop("columns", {}), cache.pop("gy", {})) if cache is not None else ({}, {})
    keep = cache is not None and gy is None and n * c * kp * ell * x.itemsize <= CACHE_BYTES

    def part(chunks):  # each part its own column buffer; y's slices are disjoint
        cols = None
        sums, prod = {}, None
        for run, n0 in chunks:
            xc = x[n0 : n0 + step]
            nb = xc.shape[0]
            if (col := kept.get(n0)) is None:
                if cols is None or keep:  # kept columns each need their own buffer
                    cols = _Columns(xp, kernels, c, kernel, step, out, x.dtype)
                col = cols.of(xc, stride, pads, dilation)
            col = col.reshape(groups, cg * kp, nb * ell)
            if keep:
                cache.setdefault("columns", {})[n0] = col
            if w is not None and nb == 1:  # the sample's output is the product: no copy
                xp.matmul(wr, col, out=y[n0].reshape(groups, o // groups, ell))
            elif w is not None:
                yc = _product(xp, wr, col, whole)
                y[n0 : n0 + nb] = yc.reshape((o, nb) + tuple(out)).swapaxes(0, 1)
            if gy is not None:  # summed transposed: columns @ gyᵀ, whose long dimension
                # (n * L) is the columns' contiguous one, 1.3x faster than gy @ columnsᵀ
                gc = gys.get((n0, step))
                gc = _channel_major(xp, gy[n0 : n0 + nb], groups) if gc is None else gc
                gc = gc.transpose(0, 2, 1)
                prod = _add_product(xp, sums, run, col, gc, prod, whole)
        return sums

    gwt = _in_parts(xp, n, step, part, LANES if gy is not None else None, not whole)
    if gy is not None:
        gwt = xp.zeros((groups, cg * kp, gy.shape[1] // groups), x.dtype) if gwt is None else gwt
        gwt = _swap_last2(xp, kernels, gwt).reshape((gy.shape[1], cg) + tuple(kernel))
    return y, gwt


#: Winograd F(2x2, 3x3) is taken from this many input and output channels and this output
#: height and width on: below, its 16 GEMMs are too thin to beat one im2col GEMM (the digits
#: CNN's 16 -> 32 layer on 4x4 images: a training step 3.3 ms with Winograd, 2.7 without).
WINOGRAD_MIN_CHANNELS = 16
WINOGRAD_MIN_SIZE = 8


def _has(kernels, name):
    """Whether the backend ``kernels`` (None on the generic path) has the kernel ``name``."""
    return kernels is not None and name in kernels.FUSED_KERNELS


def _winograd(kernels, kernel, c, o, out, stride, dilation, groups):
    """Whether a convolution runs Winograd (F(2x2, 3x3), F(2x2x2, 3x3x3), 1-d F(4, k)): a
    backend with the transforms (the CPU), undilated, stride 1, no groups, large enough."""
    big = min(c, o) >= WINOGRAD_MIN_CHANNELS and min(out) >= WINOGRAD_MIN_SIZE
    if set(stride + dilation) != {1} or groups != 1 or not big:
        return False
    need = "winograd1d_scatter" if len(kernel) == 1 else "winograd_output_grad"
    ok = kernel[0] in WINOGRAD_1D_KERNELS if len(kernel) == 1 else set(kernel) == {3}
    return ok and _has(kernels, need)


#: 1-d Winograd F(4, k) (Toom-Cook on the points 0, ±1, ±2, ±1/2, ∞): k + 3 products per 4
#: outputs instead of 4k (docs/conv.md); the points' spread grows with k, so larger kernels
#: keep im2col.
WINOGRAD_1D_KERNELS = (3, 5)


@functools.cache
def _winograd1d_matrices(k, m=4):
    """``(Aᵀ, G, Bᵀ)`` of F(m, k) in float64, Bᵀ solved from ``y[i] = sum_j g[j] d[i + j]``."""
    p = m + k - 1
    # F(4, 3) takes -1/2, not -2: Note [Channels-last 3-d Winograd]
    points = (0, 1, -1, 2, -0.5, -2, 0.5)[: p - 1]
    at, g = np.zeros((m, p)), np.zeros((p, k))
    for i, a in enumerate(points):
        at[:, i] = [a**e for e in range(m)]
        g[i] = [a**e / math.prod(a - b for b in points if b != a) for e in range(k)]
    at[m - 1, p - 1] = g[p - 1, k - 1] = 1  # the point at infinity
    rhs = np.add.outer(np.arange(m), np.arange(k))[..., None] == np.arange(p)  # d[i + j]
    lhs = np.einsum("ip,pj->ijp", at, g).reshape(m * k, p)
    bt = np.linalg.lstsq(lhs, rhs.reshape(m * k, p), rcond=None)[0]
    return at, g, np.round(bt * 64) / 64  # exact: multiples of 1/64


_WINOGRAD_G = ((1, 0, 0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0, 0, 1))


def _winograd_scheme(xp, kernels, x, o, k, out):
    """A Winograd pass's products ``P``, batch step, blocks (``(block, tiles a sample has in
    it)``; ``None``, every tile, or in 3-d a range of depth tiles: WINOGRAD_BLOCK_BYTES) and the
    backend's ``input(x, pads, v, block)``, ``output(m, y, block)``, ``output_grad``."""
    # The step is a quarter of the im2col chunk: the 16 GEMMs over (C_in, tiles) ran at 82
    # GFLOPS on one core for one 32x32 sample of 64 channels (1 MB of tiles) and at 68 for four.
    n, c, nd = x.shape[0], x.shape[1], x.ndim - 2
    if cl := _channels_last(kernels, x, o, k, out):
        (_, g, _), tiles, fns = _winograd1d_matrices(3), *cl
    elif nd > 1 and k == 3:
        g, tiles = _WINOGRAD_G, math.prod((s + 1) // 2 for s in out)
        fns = (kernels.winograd_input, kernels.winograd_output, kernels.winograd_output_grad)
        fns += (kernels.winograd_input_grad,) if nd == 3 else ()
    elif nd == 2:  # F(4x4, 2x2): the 1-d F(4, 2)'s matrices along both dims
        at, g, bt = _winograd1d_matrices(k)
        tl = tuple(-(-s // len(at)) for s in out)
        tiles = math.prod(tl)
        fns = (
            lambda xc, pads, v, _: kernels.winograd2d_gather(
                xc, bt, len(at), (pads[0][0], pads[1][0]), tl, v
            ),
            lambda m, y, _: kernels.winograd2d_scatter(m, at, len(at), (0, 0), tl, y),
            lambda gy, m, _: kernels.winograd2d_gather(gy, at.T, len(at), (0, 0), tl, m),
        )
    else:
        at, g, bt = _winograd1d_matrices(k)
        tiles = -(-out[0] // len(at))
        fns = (
            lambda xc, pads, v, _: kernels.winograd1d_gather(xc, bt, len(at), pads[0][0], v),
            lambda m, y, _: kernels.winograd1d_scatter(m, at, y),
            lambda gy, m, _: kernels.winograd1d_gather(gy, at.T, len(at), 0, m),
        )
    p = len(g) ** nd
    step = _chunk(xp, n, 4 * p * max(c, o) * tiles * x.itemsize)
    if cl:  # a sample's transforms fit a block
        return p, step, [(None, tiles)], fns, True
    td = (out[0] + 1) // 2 if nd == 3 else 1  # depth tiles, blocks of b
    b = max(1, WINOGRAD_BLOCK_BYTES * td // (p * (c + o) * tiles * step * x.itemsize))
    ranges = [(t, min(t + b, td)) for t in range(0, td, b)]
    blocks = [((t0, t1) if nd == 3 else None, tiles // td * (t1 - t0)) for t0, t1 in ranges]
    return p, step, blocks, fns, False


# Note [Channels-last 3-d Winograd]: F(2x2x2, 3x3x3) makes 64 products of every 8 outputs, so
# its transforms and GEMMs move 8x the output's data, and on the conv3d benchmark (16 -> 32
# channels, 16^3) they were memory-bound: the kernels ran 2x slower inside the step than alone,
# and the GEMMs (K = C_in = 16) at ~75 GFLOP/s. F(4x4x4, 3x3x3) makes 216 products of every
# 64 outputs (3.4x): 2.4x less data and 2.4x fewer multiplies. Its 1-d matrices are F(4, 3)'s
# on the points 0, ±1, 2, -1/2 (_winograd1d_matrices): float32 results within ~4e-6 of the
# output's scale, against 1.6e-5 on 0, ±1, ±2 (whose spread, 8x a dim, compounds over three);
# ~1e-5 for a constant gradient's input gradient (im2col: ~1e-7).
# A 16^3 volume has only 4 tiles a row, so the transforms run channels-last, vectorized over the
# channels: each of the three separable passes computes 6 products at once over runs of (4 tiles
# x C) values (winograd3d_gather / winograd3d_scatter, C), on volumes (N, D, H, W, C) that NumPy
# transposes a chunk at a time (x and gy in, y and gx out), and the buffers are (P, tiles, C),
# so the GEMMs take their operands the other way round: y = V U (U as (P, C_in, C_out)),
# gw = Mᵀ V, gx's products M Uᵀ (U's transposed view, as in the other layout). It runs where
# a sample's transforms fit WINOGRAD_BLOCK_BYTES (one block a chunk: y's and gx's chunks are
# written once, the bias added as y's is); larger volumes keep F(2x2x2, 3x3x3) by depth blocks.


def _channels_last(kernels, x, o, k, out):
    """``(tiles a sample, transforms)`` of the 3-d F(4x4x4, 3x3x3) for :func:`_winograd_scheme`
    (Note [Channels-last 3-d Winograd]), whose buffers are ``(P, tiles, C)``, where the backend
    has it and a sample's transforms take at most WINOGRAD_BLOCK_BYTES; else None."""
    c, nd = x.shape[1], x.ndim - 2
    if nd != 3 or k != 3 or not _has(kernels, "winograd3d_gather"):
        return None
    tl = tuple(-(-s // 4) for s in out)
    if 216 * (c + o) * math.prod(tl) * x.itemsize > WINOGRAD_BLOCK_BYTES:
        return None
    at, _, bt = _winograd1d_matrices(3)
    last = (0, 2, 3, 4, 1)

    def lows(pads):
        return tuple(lo for lo, _ in pads)

    def gather(a, mat, lo, v):  # a channels-last copy of a, then its windows
        return kernels.winograd3d_gather(np.ascontiguousarray(a.transpose(last)), mat, 4, lo, tl, v)

    def scatter(m, mat, lo, y, add, b=None):  # a channels-last volume, then y (+ b) from it
        yl = np.zeros if add else np.empty
        yl = yl((y.shape[0],) + y.shape[2:] + y.shape[1:2], dtype=y.dtype)
        kernels.winograd3d_scatter(m, mat, 4, lo, tl, yl, add)
        yt = yl.transpose(0, 4, 1, 2, 3)  # y's chunk written once: one block a chunk
        return np.copyto(y, yt) if b is None else np.add(yt, b, out=y)

    return math.prod(tl), (
        lambda xc, pads, v, _: gather(xc, bt, lows(pads), v),
        lambda m, y, _, b=None: scatter(m, at, (0, 0, 0), y, False, b),
        lambda gy, m, _: gather(gy, at.T, (0, 0, 0), m),
        lambda gv, pads, gx, _: scatter(gv, bt.T, lows(pads), gx, True),
    )


def _layout(cl, p, rows, t):
    """A Winograd buffer's shape: ``(P, rows, tiles)``, or ``(P, tiles, rows)`` channels-last."""
    return (p, t, rows) if cl else (p, rows, t)


def _by_weight(xp, cl, u, d, out):
    """Weight side ``u`` times data side ``d`` into ``out``: ``u @ d``, channels-last ``d @ u``."""
    return xp.matmul(d, u, out=out) if cl else xp.matmul(u, d, out=out)


#: A 3-d Winograd pass transforms, multiplies and transforms back a chunk's tiles a block of
#: depth tiles at a time, the block's transformed input and products within this many bytes
#: (a 32^3 sample of 16 -> 32 channels makes 50 MB of them; each part holds a block's buffers).
#: Session 15 set 2 MB, two depth tiles (1.5 MB) on the benchmark's conv3d, to keep them in a
#: core's L2 (2 MB here) from the transform to the GEMMs: 6.8-7.1 ms against 8.4-8.6 at 4 MB.
#: Since the parts' buffers are 64-byte aligned and the forward keeps x's transform (Note
#: [Kept transforms]) the whole sample as one block (6 MB, 8 MB allowed) is faster: medians of
#: 14 same-process alternations 7.09 ms against 7.49 at 2 MB and 7.47 at 4 (without the kept
#: transform, 7.69 against 8.06): a fourth of the kernel calls, and GEMMs 4x wider.
WINOGRAD_BLOCK_BYTES = 8 << 20

# Note [Kept transforms]: a Winograd weight gradient sums products of gy's transform and x's,
# Bᵀ d B, which the forward computed too. Where a weight gradient will follow (the forward's
# ctx.columns exists) and x's transform of the whole batch takes at most KEEP_BYTES, the forward
# writes it into one buffer left in ctx.columns instead of a scratch block reused, and the
# backward reads it there (popped: a retained graph's second backward computes it again, with
# the same bits). The transform is 2x the input in 1-d F(4, 5), 4x in 2-d, 8x in 3-d, so this
# spends memory for time, within a bound: on the benchmark's conv3d (16 -> 32 channels, 16^3,
# batch 4: 8 MiB kept, 1 MiB input) forward+backward took 6.6-6.8 ms against 6.9-7.5 without
# (processes alternating), the input transform being ~1/6 of the backward's work on each core.
# The 3-d forward leaves its weight transform U too (within CACHE_BYTES, ~2.4x the weight),
# whose transposed view is the input gradient's Uᵀ (a view of U recomputed otherwise: the same
# bits); and the parts add the bias b to their chunks of y and sum its gradient (appended to
# the list gb) from gy's chunks (in lanes, as gw), rather than one pass each over the whole
# output after or before them.

#: A Winograd forward whose input's transform takes at most this many bytes keeps it for the
#: weight gradient, which would otherwise compute it again (Note [Kept transforms]).
KEEP_BYTES = 16 << 20


@functools.cache
def _winograd_weight_matrix(k, nd, p):
    """The weight transform ``(P, k**nd)`` in float64: ``G`` along every kernel dim, the
    products in the transforms' order (3-d: height, width, then depth); F(2, 3)'s ``G`` where
    ``P = 4**nd`` (2-d, 3-d), F(4, k)'s otherwise."""
    g = np.asarray(_WINOGRAD_G) if p == 4**nd and k == 3 else _winograd1d_matrices(k)[1]
    if nd == 3:
        return np.einsum("ah,bw,cd->abcdhw", g, g, g).reshape(len(g) ** 3, k**3)
    return np.kron(g, g) if nd == 2 else g


# The weight transform and its adjoint are each one GEMM whose result is in the layout its user
# reads: ``(P, K) @ (K, C_out C_in)`` over a transposed copy of the (small) weight (as a transposed
# view, OpenBLAS's (25, 4) @ (4, 8192) took 102 us on one thread against 10 + 26 for the copy and
# the plain GEMM), not a stack of one small GEMM per output channel and a transposing copy of
# the (P, C_out, C_in) result (on conv_transpose2d's benchmark, weight (64, 32, 4, 4), the stack
# and its copies were 1.2 ms of a 7.5 ms step on the main thread; the GEMMs and copies now 0.2).
# Each GEMM runs in blocks below OpenBLAS's threading threshold (_one_thread_gemm), so on the
# calling thread, also in a parallel backward walk (where nothing holds OpenBLAS at one thread):
# as one split GEMM, conv1d's (8, 5) @ (5, 16384) ran on two BLAS threads, 10 ms against 0.07 on
# one at load 4, and left OpenBLAS's worker spinning on the second core into the parts after.


def _one_thread_gemm(xp, a, b):
    """``a @ b`` of matrices in blocks of ``a``'s rows or ``b``'s columns below OpenBLAS's
    threading threshold (``gemm.BLAS_THREADED``)."""
    (m, k), n = a.shape, b.shape[1]
    y = xp.empty((m, n), dtype=a.dtype)
    step = max(1, (gemm.BLAS_THREADED - 1) // (k * min(m, n)))
    for i in range(0, max(m, n), step):
        part = slice(i, i + step)
        rows, cols = (part, slice(None)) if m > n else (slice(None), part)
        xp.matmul(a[rows], b[:, cols], out=y[rows, cols])
    return y


def _winograd_weights(xp, w, p, transposed=False):
    """``G w Gᵀ`` of the weight ``(C_out, C_in, *kernel)`` as ``(P, C_out, C_in)``, or as
    ``(P, C_in, C_out)`` with ``transposed``."""
    (o, c), k, nd = w.shape[:2], w.shape[2], w.ndim - 2
    gm = xp.asarray(_winograd_weight_matrix(k, nd, p), dtype=w.dtype)
    # (K, C_out, C_in) or (K, C_in, C_out): a copy, then a plain GEMM
    w = xp.ascontiguousarray(w.reshape(o, c, -1).transpose((2, 1, 0) if transposed else (2, 0, 1)))
    return _one_thread_gemm(xp, gm, w.reshape(len(w), -1)).reshape(gm.shape[:1] + w.shape[1:])


def _winograd_weights_adjoint(xp, gu, k, nd):
    """The adjoint of :func:`_winograd_weights`: ``gw`` ``(C_out, C_in, *kernel)`` of ``gu``
    ``(P, C_out, C_in)``."""
    p, o, c = gu.shape
    gm = xp.asarray(_winograd_weight_matrix(k, nd, p), dtype=gu.dtype)
    return _one_thread_gemm(xp, gu.reshape(p, o * c).T, gm).reshape((o, c) + (k,) * nd)


def _winograd_forward(xp, kernels, x, w, pads, out, y, b=None, cache=None):
    """``y`` of a stride-1 3x3 convolution by Winograd F(2x2, 3x3): per 2x2 output tile,
    ``y = Aᵀ [(G w Gᵀ) ⊙ (Bᵀ d B)] A`` (``d`` the tile's 4x4 input window), the 16 elementwise
    products summed over the input channels as 16 GEMMs ``(C_out, C_in) @ (C_in, tiles)``;
    the backend's transforms (:func:`_winograd_scheme`); 64 products in 3-d, k + 3 in 1-d.
    The bias ``b`` and the transforms kept in ``cache``: Note [Kept transforms]."""
    (n, c), o = x.shape[:2], w.shape[0]
    p, step, blocks, (inp, outp, *_), cl = _winograd_scheme(xp, kernels, x, o, w.shape[2], out)
    u = _winograd_weights(xp, w, p, transposed=cl)  # (P, C_in, C_out) channels-last
    if cache is not None and x.ndim == 5 and u.nbytes <= CACHE_BYTES:
        cache["winograd_u"] = u
    size = step * max(t for _, t in blocks)
    bias = None if b is None else b.reshape((1, -1) + (1,) * (y.ndim - 2))

    total, kept = sum(t for _, t in blocks), None  # tiles a sample; the kept transform
    if cache is not None and p * c * n * total * x.itemsize <= KEEP_BYTES:
        kept = xp.empty(p * c * n * total, dtype=x.dtype)
        cache["winograd_v"] = (kept, step, blocks)  # (as the backward's scheme must cut it)

    def part(chunks):  # each part its own buffers; the chunks write disjoint slices of y
        v = xp.empty(p * c * size, dtype=x.dtype) if kept is None else None
        m = xp.empty(p * o * size, dtype=x.dtype)
        for _, n0 in chunks:
            xc, yc = x[n0 : n0 + step], y[n0 : n0 + step]
            at = p * c * n0 * total  # the chunk's blocks one after another in kept
            for block, tiles in blocks:
                t = xc.shape[0] * tiles
                vb = v[: p * c * t] if kept is None else kept[at : at + p * c * t]
                vc = inp(xc, pads, vb.reshape(_layout(cl, p, c, t)), block)
                mc = _by_weight(xp, cl, u, vc, m[: p * o * t].reshape(_layout(cl, p, o, t)))
                # (channels-last: one block a chunk, the bias added as y's chunk is written)
                outp(mc, yc, block, *(bias,) if cl else ())
                at += p * c * t
            if bias is not None and not cl:
                yc += bias

    _in_parts(xp, n, step, part)
    return y


def _conv_input_grad(xp, gy, w, stride, pads, dilation, groups, size, kernels=None, cache=None):
    """``gx`` ``(N, C_in, *size)`` of the convolution, from ``gy`` ``(N, C_out, *out)``; the
    col2im path leaves ``gy``'s chunks in ``cache`` (see :func:`_columns_pass`).

    A stride-1 convolution whose padding is at most the kernel's span takes the input gradient
    as the convolution of ``gy`` by the flipped, transposed weight (im2col of ``gy``, which is
    a copy) when ``gy``'s columns are no larger than the input's (C_out <= C_in) or that
    convolution runs Winograd; otherwise the weight's transpose times ``gy`` gives the columns'
    gradient, and col2im adds it back."""
    n, o = gy.shape[:2]
    out = gy.shape[2:]
    cg = w.shape[1]
    kernel = w.shape[2:]
    c = cg * groups
    if cg == 1 and groups > 1:
        return _depthwise_input_grad(xp, gy, w, stride, pads, dilation, groups, size)
    kp, ell = math.prod(kernel), math.prod(out)
    whole = _weight_bound(xp, n, c, o, kp, ell, groups, gy.itemsize)
    flipped = _flipped(stride, pads, kernel, dilation)
    if flipped is not None and (
        o <= c and not whole or _winograd(kernels, kernel, o, c, size, stride, dilation, groups)
    ):
        wt = _transposed_weight(xp, w, groups)
        return _conv_forward(xp, gy, wt, stride, flipped, dilation, groups, size, kernels)
    if _subpixel_winograd(kernels, kernel, c, o, stride, dilation, groups, out):
        return _subpixel_winograd_input_grad(xp, kernels, gy, w, stride, pads, size, cache)
    phases = None if whole else _subpixel_phases(stride, pads, dilation, groups, kernel, size)
    if phases is not None:
        return _subpixel_input_grad(xp, gy, w, phases, size, kernels)
    wt = w.reshape(groups, o // groups, cg * kp).transpose(0, 2, 1)
    gx = xp.empty((n, c) + tuple(size), dtype=gy.dtype)
    step = n if whole else _chunk(xp, n, c * kp * ell * gy.itemsize, o * cg * kp * ell)
    gys = cache.setdefault("gy", {}) if cache is not None and gy.nbytes <= CACHE_BYTES else {}

    def part(chunks):  # the chunks write disjoint slices of gx
        for _, n0 in chunks:
            gc = gys[n0, step] = _channel_major(xp, gy[n0 : n0 + step], groups)
            gcol = _product(xp, wt, gc, whole).reshape((c, *kernel, min(step, n - n0), *out))
            if kernels is not None:
                kernels.col2im(gcol, stride, pads, dilation, gx[n0 : n0 + step])
                continue
            # col2im in the columns' own (C, n) order, whose slices are contiguous runs, then
            # one transposing copy into gx.
            gcol = xp.moveaxis(gcol, 1 + len(kernel), 1)
            gx[n0 : n0 + step] = xp.moveaxis(_col2im(xp, gcol, size, stride, pads, dilation), 0, 1)

    _in_parts(xp, n, step, part, split=not whole)
    return gx


#: The sub-pixel input gradient is taken while its zero taps (a kernel not a multiple of the
#: stride, padded up to one) add at most this factor to the GEMM's multiplies.
SUBPIXEL_MAX_WASTE = 1.5


def _subpixel_phases(stride, pads, dilation, groups, kernel, size):
    """Per spatial dim ``(s, taps, lo, first taps, offsets, counts, positions)`` of
    :func:`_subpixel_input_grad`, or None where it does not apply."""
    if groups != 1 or set(dilation) != {1} or set(stride) == {1}:
        return None
    dims = []
    for s, (p, _), k, n in zip(stride, pads, kernel, size, strict=True):
        t, counts = -(-k // s), [(n - r + s - 1) // s for r in range(s)]
        offsets = [(r + p) // s - p // s for r in range(s)]
        if t - 1 - p // s < 0 or min(counts) < 1:
            return None
        pos = max(c + o for c, o in zip(counts, offsets, strict=True))
        dims.append((s, t, t - 1 - p // s, [(r + p) % s for r in range(s)], offsets, counts, pos))
    waste = math.prod(d[0] * d[1] for d in dims) / math.prod(kernel)
    return dims if waste <= SUBPIXEL_MAX_WASTE else None


def _subpixel_input_grad(xp, gy, w, phases, size, kernels):
    """``gx`` of a strided convolution by sub-pixel phases: one GEMM per batch chunk over
    stride-1 columns of ``gy`` by all phases' taps, no col2im (docs/conv.md)."""
    n, o = gy.shape[:2]
    c, nd = w.shape[1], len(phases)
    strides, taps, pos = (tuple(d[i] for d in phases) for i in (0, 1, 6))
    widths = [(0, s * t - k) for s, t, k in zip(strides, taps, w.shape[2:], strict=True)]
    wp = xp.pad(w, [(0, 0)] * 2 + widths)
    for i, (s, t, _, first, *_) in enumerate(phases):  # tap (r + p) % s + s*(t - 1 - j)
        wp = xp.take(wp, xp.asarray([q + s * (t - 1 - j) for q in first for j in range(t)]), 2 + i)
    wp = wp.reshape((o, c) + tuple(x for d in phases for x in d[:2]))
    perm = (*range(2, 2 + 2 * nd, 2), 1, 0, *range(3, 3 + 2 * nd, 2))
    wp = xp.ascontiguousarray(wp.transpose(perm)).reshape(-1, o * math.prod(taps))
    gx = xp.empty((n, c) + tuple(size), dtype=gy.dtype)
    step = _chunk(xp, n, o * math.prod(taps) * math.prod(pos) * gy.itemsize)
    ones, lo = (1,) * nd, tuple((d[2], d[1] + d[6]) for d in phases)

    def part(chunks):  # each part its own column buffer; the chunks write disjoint slices of gx
        cols = _Columns(xp, kernels, o, taps, step, pos, gy.dtype)
        for _, n0 in chunks:
            gc = gy[n0 : n0 + step]
            col = cols.of(gc, ones, lo, ones)
            r = xp.matmul(wp, col.reshape(wp.shape[1], -1)).reshape(strides + (c, len(gc)) + pos)
            for ph in itertools.product(*(range(s) for s in strides)):
                src = tuple(
                    slice(d[4][q], d[4][q] + d[5][q]) for d, q in zip(phases, ph, strict=True)
                )
                dst = tuple(slice(q, None, s) for q, s in zip(ph, strides, strict=True))
                gx[n0 : n0 + len(gc), :, *dst] = xp.moveaxis(r[ph][..., *src], 0, 1)

    _in_parts(xp, n, step, part)
    return gx


# A strided 2-d convolution whose kernel spans at most two strides is the stride-1 2x2
# convolution of its input's sub-pixel phases stacked as channels (space-to-depth: ``z[(c, r),
# u] = x[c, s*u + r - lo]``, ``out + 1`` positions a dim) by ``w``'s taps ``s*j + r`` (zero past
# the kernel), so it runs Winograd F(4x4, 2x2) forward and in both gradients (docs/conv.md).
_UNPADDED = ((0, 0), (0, 0))  # the 2x2 convolution over z: its padding is in z already


def _subpixel_winograd(kernels, kernel, c, o, stride, dilation, groups, out):
    """Whether a strided convolution runs by space-to-depth and Winograd F(4x4, 2x2): 2-d,
    undilated, no groups, each kernel dim ``k`` with ``ceil(k / s) == 2`` and the zero taps
    adding at most ``SUBPIXEL_MAX_WASTE``, channels and sizes as :func:`_winograd` wants. (A
    plain stride-1 2x2 convolution keeps im2col, 1.2-2.3x faster: docs/conv.md.)"""
    if len(kernel) != 2 or groups != 1 or set(dilation) != {1} or set(stride) == {1}:
        return False
    if any(-(-k // s) != 2 for k, s in zip(kernel, stride, strict=True)):
        return False
    if math.prod(2 * s for s in stride) > SUBPIXEL_MAX_WASTE * math.prod(kernel):
        return False
    if min(c * math.prod(stride), o) < WINOGRAD_MIN_CHANNELS:
        return False
    return min(out) >= SUBPIXEL_WINOGRAD_MIN_SIZE and _has(kernels, "winograd2d_gather")


#: The space-to-depth Winograd is taken from this output height and width on (16 tiles a
#: plane): conv2d k=4 s=2 16->32 on 16x16 (an 8x8 output) took 3.05 ms forward+backward by it
#: against 2.51 by the GEMM paths; at 16x16 outputs 13.3 against 13.2 (32->64) and 41.7
#: against 43.1 (64->128), and conv_transpose2d's benchmark 11.0 against 11.7 (single-thread
#: CPU time, same process, interleaved).
SUBPIXEL_WINOGRAD_MIN_SIZE = 16


def _phases(stride):
    """The sub-pixel phases ``r`` (one offset per dim, below its stride) in order."""
    return itertools.product(*(range(s) for s in stride))


def _phase_slices(r, stride, pads, size, zsize):
    """The input positions ``s*u + r - lo`` (slices of ``x``) and their ``u`` (slices of ``z``)
    of sub-pixel phase ``r``, per dim."""
    src, dst = [], []
    for q, s, (lo, _), n, nz in zip(r, stride, pads, size, zsize, strict=True):
        u0 = max(0, -(-(lo - q) // s))
        i0 = s * u0 + q - lo
        cnt = max(0, min(nz - u0, -(-(n - i0) // s)))
        src.append(slice(i0, i0 + s * (cnt - 1) + 1 if cnt else i0, s))
        dst.append(slice(u0, u0 + cnt))
    return tuple(src), tuple(dst)


class _SpaceToDepth:
    """``z`` ``(n, C * prod(stride), *(out + 1))`` of ``x`` ``(n, C, *size)`` (see above) as the
    Winograd passes read it, made a batch chunk at a time (``z[n0:n1]``) inside their parts, so
    that its copies run on every core too."""

    def __init__(self, xp, x, stride, pads, out, kernels=None):
        self.xp, self.x, self.geom = xp, x, (stride, pads, tuple(v + 1 for v in out))
        self.shape = (x.shape[0], x.shape[1] * math.prod(stride)) + self.geom[2]
        self.ndim, self.dtype, self.itemsize = len(self.shape), x.dtype, x.itemsize
        self.kernels = kernels if _has(kernels, "space_to_depth2d") else None

    def __getitem__(self, rows):
        (stride, pads, zsize), x = self.geom, self.x[rows]
        if self.kernels is not None and self.kernels.accepts((x,)):  # one pass, no zeroing
            z = self.xp.empty(x.shape[:2] + stride + zsize, dtype=x.dtype)
            self.kernels.space_to_depth2d(x, stride, tuple(lo for lo, _ in pads), z)
            return z.reshape(x.shape[0], -1, *zsize)
        z = self.xp.zeros(x.shape[:2] + stride + zsize, dtype=x.dtype)
        for r in _phases(stride):
            src, dst = _phase_slices(r, stride, pads, x.shape[2:], zsize)
            z[(slice(None), slice(None), *r, *dst)] = x[(slice(None), slice(None), *src)]
        return z.reshape(x.shape[0], -1, *zsize)


@functools.cache
def _phase_gather(kernel, stride):
    # The (flat) kernel offset (s0 j0 + r0, s1 j1 + r1) each value (r0, r1, j0, j1) of a
    # space-to-depth weight takes (0 past the kernel), those past it, and the value each offset
    # goes to: gathers of 16 a row, not NumPy's pad and 6-d transposing copy (25 us against 118
    # of a (64, 32, 4, 4) weight, which conv_transpose2d's benchmark transforms both ways).
    (k0, k1), (s0, s1) = kernel, stride
    r0, r1, j0, j1 = np.meshgrid(range(s0), range(s1), range(2), range(2), indexing="ij")
    i0, i1 = s0 * j0 + r0, s1 * j1 + r1
    inside = ((i0 < k0) & (i1 < k1)).ravel()
    back = np.flatnonzero(inside)[np.argsort((i0 * k1 + i1).ravel()[inside], kind="stable")]
    return np.where(inside, (i0 * k1 + i1).ravel(), 0), ~inside, back


def _space_to_depth_weight(xp, w, stride):
    """``w`` ``(O, C, *kernel)`` as the 2x2 weight ``(O, C * prod(stride), 2, 2)`` over ``z``:
    ``[o, (c, r), j] = w[o, c, s*j + r]``, zero past the kernel."""
    (o, c), (s0, s1) = w.shape[:2], stride
    take, past, _ = _phase_gather(*map(tuple, (w.shape[2:], stride)))
    z = xp.take(w.reshape(o * c, -1), xp.asarray(take), axis=1)  # (C-contiguous, as [:, i] is not)
    if past.any():
        z[:, xp.asarray(past)] = 0
    return z.reshape(o, c * s0 * s1, 2, 2)


def _depth_to_space_weight(xp, gz, stride, kernel):
    """The adjoint of :func:`_space_to_depth_weight`: ``gw`` ``(O, C, *kernel)``."""
    o, c = gz.shape[0], gz.shape[1] // math.prod(stride)
    back = xp.asarray(_phase_gather(*map(tuple, (kernel, stride)))[2])
    return xp.take(gz.reshape(o * c, -1), back, axis=1).reshape((o, c) + tuple(kernel))


def _subpixel_winograd_input_grad(xp, kernels, gy, w, stride, pads, size, cache=None):
    """``gx`` of a strided convolution that :func:`_subpixel_winograd` takes: the input gradient
    of the stride-1 convolution over ``z``, as the adjoint of its Winograd forward (``B [Uᵀ
    (A g Aᵀ)] Bᵀ`` added over the tiles' overlapping windows: ``winograd2d_scatter`` with
    ``add``), then ``z``'s phases copied to their strided positions. ``gy``'s transform ``A g
    Aᵀ`` is left in ``cache`` where it fits :data:`CACHE_BYTES`: a transposed convolution's
    weight gradient (:func:`_winograd_weight_grad`) transforms the same array the same way."""
    n, out = gy.shape[0], gy.shape[2:]
    wz = _space_to_depth_weight(xp, w, stride)
    cz = wz.shape[1]
    at, _, bt = _winograd1d_matrices(2)
    p, step, blocks, (_, _, outgrad, *_), _ = _winograd_scheme(xp, kernels, gy, cz, 2, out)
    ut = _winograd_weights(xp, wz, p, transposed=True)  # (P, Cz, O)
    tl, zsize, c = tuple(-(-v // len(at)) for v in out), tuple(v + 1 for v in out), w.shape[1]
    lo, phases = tuple(v for v, _ in pads), None  # the kernel writes every element of gx
    if not _has(kernels, "depth_to_space2d"):  # NumPy copies each phase into zeros
        phases = [(r, *_phase_slices(r, stride, pads, size, zsize)) for r in _phases(stride)]
    gx = (xp.zeros if phases else xp.empty)((n, c) + tuple(size), dtype=gy.dtype)
    keep = cache is not None and p * gy.nbytes // 16 <= CACHE_BYTES
    kept = cache.setdefault("winograd", {}) if keep else {}

    def part(chunks):  # each part its own buffers; the chunks write disjoint slices of gx
        m, v = (xp.empty(p * ch * step * blocks[0][1], dtype=gy.dtype) for ch in ut.shape[2:0:-1])
        gz = xp.empty((step, cz) + zsize, dtype=gy.dtype)
        for _, n0 in chunks:
            gc = gy[n0 : n0 + step]
            nb, t = gc.shape[0], gc.shape[0] * blocks[0][1]
            mc = xp.empty((p, ut.shape[2], t), gy.dtype) if keep else m[: p * ut.shape[2] * t]
            mc = kept[n0, step] = outgrad(gc, mc.reshape(p, -1, t), None)
            gv = xp.matmul(ut, mc, out=v[: p * cz * t].reshape(p, cz, t))
            gz[:nb] = 0
            kernels.winograd2d_scatter(gv, bt.T, len(at), (0, 0), tl, gz[:nb], True)
            gzr = gz[:nb].reshape((nb, c, *stride) + zsize)
            if phases is None:
                kernels.depth_to_space2d(gzr, stride, lo, gx[n0 : n0 + nb])
            for r, src, dst in phases or ():
                gx[(slice(n0, n0 + nb), slice(None), *src)] = gzr[
                    (slice(None), slice(None), *r, *dst)
                ]

    _in_parts(xp, n, step, part)
    return gx


def _transposed_weight(xp, w, groups):
    """The weight of the convolution that is the input gradient of a stride-1 convolution by
    ``w`` ``(C_out, C_in/groups, *kernel)``: each group's channels exchanged and the kernel
    flipped, ``(C_in, C_out/groups, *kernel)``."""
    o, cg = w.shape[:2]
    nd = w.ndim - 2
    wg = w.reshape((groups, o // groups, cg) + tuple(w.shape[2:]))
    flip = (slice(None),) * 3 + (slice(None, None, -1),) * nd
    wt = xp.ascontiguousarray(wg[flip].transpose((0, 2, 1) + tuple(range(3, 3 + nd))))
    return wt.reshape((groups * cg, o // groups) + tuple(w.shape[2:]))


def _conv_weight_grad(xp, x, gy, stride, pads, dilation, groups, kernel, kernels=None, cache=None):
    """``gw`` ``(C_out, C_in/groups, *kernel)`` of the convolution of ``x`` with output
    gradient ``gy``; ``cache``: see :func:`_columns_pass`."""
    c, o, out = x.shape[1], gy.shape[1], gy.shape[2:]
    if c // groups == 1 and groups > 1:
        return _depthwise_weight_grad(xp, x, gy, stride, pads, dilation, groups, kernel)
    if _subpixel_winograd(kernels, kernel, c, o, stride, dilation, groups, out):
        z = _SpaceToDepth(xp, x, stride, pads, out, kernels)
        gw = _winograd_weight_grad(xp, kernels, z, gy, _UNPADDED)
        return _depth_to_space_weight(xp, gw, stride, kernel)
    if _winograd(kernels, kernel, c, o, out, stride, dilation, groups):
        return _winograd_weight_grad(xp, kernels, x, gy, pads, cache=cache)
    args = (stride, pads, dilation, groups, kernel, out, kernels, cache)
    return _columns_pass(xp, x, None, gy, *args)[1]


def _winograd_adjoint(kernels, x, w, gy, stride, dilation, groups):
    """Whether :func:`_winograd_weight_grad` gives both gradients (3-d Winograd)."""
    c, o, out = x.shape[1], gy.shape[1], gy.shape[2:]
    win = _winograd(kernels, w.shape[2:], c, o, out, stride, dilation, groups)
    return win and x.ndim == 5 and "winograd_input_grad" in kernels.FUSED_KERNELS


def _winograd_weight_grad(xp, kernels, x, gy, pads, w=None, wf=None, cache=None, gb=None):
    """``gw`` of a stride-1 3x3 convolution by Winograd F(2x2, 3x3), the adjoint of
    :func:`_winograd_forward`: ``gw = Gᵀ [sum over tiles of (A g Aᵀ) (Bᵀ d B)ᵀ] G``, the sums
    16 GEMMs ``(C_out, tiles) @ (tiles, C_in)`` over the batch chunks; 3-d and 1-d alike.

    With ``w`` (3-d), ``(gx, gw)``: ``gx`` the forward's adjoint, ``B [Uᵀ (A g Aᵀ)] Bᵀ`` added
    over the tiles' windows, from the same transform of ``gy`` (docs/conv.md). With ``wf``,
    ``(y, gw)``: ``y`` the convolution of ``x`` by ``wf``, from the same transform of ``x``;
    ``gy``'s from ``cache`` where a forward left them (:func:`_subpixel_winograd_input_grad`);
    ``x``'s, ``U`` and (into ``gb``) the bias gradient: Note [Kept transforms]."""
    (n, c), o, nd = x.shape[:2], gy.shape[1], x.ndim - 2
    k = x.shape[2] + sum(pads[0]) - gy.shape[2] + 1
    p, step, blocks, (inp, outp, outgrad, *ingrad), cl = _winograd_scheme(
        xp, kernels, x, o, k, gy.shape[2:]
    )
    size = step * max(t for _, t in blocks)
    kept = cache.pop("winograd", {}) if cache is not None else {}
    u = cache.pop("winograd_u", None) if cache is not None else None
    u = u if u is not None and len(u) == p else None  # (the forward's scheme, if the same)
    bsums = {}  # each run's bias gradient, written by the part that runs it
    keptv = cache.pop("winograd_v", None) if cache is not None else None
    keptv = keptv[0] if keptv and keptv[1:] == (step, blocks) else None  # if cut alike
    total = sum(t for _, t in blocks)

    def part(chunks):  # each part its own buffers, one partial sum a run of chunks (LANES)
        v = xp.empty(p * c * size, dtype=x.dtype) if keptv is None else None
        m = xp.empty(p * o * size, dtype=x.dtype)
        mf = None if wf is None else xp.empty(p * wf.shape[0] * size, dtype=x.dtype)
        sums, prod = {}, None
        for run, n0 in chunks:
            xc, gc = x[n0 : n0 + step], gy[n0 : n0 + step]
            at = p * c * n0 * total
            if gb is not None:  # each channel's planes first: the chunk's a sample or two
                s = gc.reshape(gc.shape[0], o, -1).sum(axis=2).sum(axis=0)
                bsums[run] = bsums[run] + s if run in bsums else s
            for block, tiles in blocks:
                t = xc.shape[0] * tiles
                vs = _layout(cl, p, c, t)
                if keptv is not None:  # the forward's
                    vc, at = keptv[at : at + p * c * t].reshape(vs), at + p * c * t
                else:
                    vc = inp(xc, pads, v[: p * c * t].reshape(vs), block)
                if uf is not None:
                    mfc = xp.matmul(uf, vc, out=mf[: p * uf.shape[1] * t].reshape(p, -1, t))
                    outp(mfc, y[n0 : n0 + step], block)
                mc = kept.get((n0, step))
                ms = _layout(cl, p, o, t)
                mc = outgrad(gc, m[: p * o * t].reshape(ms), block) if mc is None else mc
                ab = (mc.transpose(0, 2, 1), vc) if cl else (mc, vc.transpose(0, 2, 1))
                prod = _add_product(xp, sums, run, *ab, prod)
                if ut is not None:  # vc is free: Uᵀ (A g Aᵀ) there
                    gv = _by_weight(xp, cl, ut, mc, vc)
                    ingrad[0](gv, pads, gx[n0 : n0 + step], block)
        return sums

    ut = None  # Uᵀ: U (the forward's) as a transposed view, which OpenBLAS takes as fast and
    if w is not None:  # whose products have the same bits, kept or not
        ut = (_winograd_weights(xp, w, p, transposed=cl) if u is None else u).transpose(0, 2, 1)
    gx = None if w is None else (xp.empty if cl else xp.zeros)(x.shape, x.dtype)  # cl: written once
    uf = None if wf is None else _winograd_weights(xp, wf, p)
    y = None if wf is None else xp.empty((n, wf.shape[0]) + gy.shape[2:], x.dtype)
    gu = _in_parts(xp, n, step, part, LANES)
    if gb is not None:  # the runs' sums in run order
        gb.append(sum(bsums[j] for j in range(len(bsums))))
    gu = xp.zeros((p, o, c), x.dtype) if gu is None else gu  # the weight transform's adjoint:
    gw = _winograd_weights_adjoint(xp, gu, k, nd)
    return (y, gw) if wf is not None else gw if w is None else (gx, gw)


# Depthwise (one input channel per group, C_out = multiplier * groups): a sum over the kernel
# offsets of the input's strided slices times one weight per channel, all channels at once.


def _depthwise_forward(xp, x, w, stride, pads, dilation, groups, out, y):
    n = x.shape[0]
    mult = w.shape[0] // groups
    kernel = w.shape[2:]
    view = _windows(xp, _padded(xp, x, pads), kernel, stride, dilation, out)
    yr = y.reshape((n, groups, mult) + tuple(out))
    wr = w.reshape((1, groups, mult, math.prod(kernel)) + (1,) * len(out))
    tmp = None
    for i, k in enumerate(itertools.product(*(range(kk) for kk in kernel))):
        xs = view[(slice(None), slice(None)) + k][:, :, None]
        if i == 0:
            xp.multiply(xs, wr[:, :, :, 0], out=yr)
            continue
        tmp = xp.multiply(xs, wr[:, :, :, i], out=tmp)
        yr += tmp
    return y


def _depthwise_input_grad(xp, gy, w, stride, pads, dilation, groups, size):
    n = gy.shape[0]
    out = gy.shape[2:]
    mult = w.shape[0] // groups
    kernel = w.shape[2:]
    padded = tuple(s + lo + hi for s, (lo, hi) in zip(size, pads, strict=True))
    g = xp.zeros((n, groups) + padded, dtype=gy.dtype)
    gyr = gy.reshape((n, groups, mult) + tuple(out))
    wr = w.reshape((1, groups, mult, math.prod(kernel)) + (1,) * len(out))
    whole = (slice(None), slice(None))
    tmp = None
    for i, k in enumerate(itertools.product(*(range(kk) for kk in kernel))):
        if mult == 1:
            tmp = xp.multiply(gyr[:, :, 0], wr[:, :, 0, i], out=tmp)
        else:
            tmp = (gyr * wr[:, :, :, i]).sum(axis=2)
        g[whole + _offset_slices(k, stride, dilation, out)] += tmp
    return g[whole + _interior(size, pads)] if padded != tuple(size) else g


def _depthwise_weight_grad(xp, x, gy, stride, pads, dilation, groups, kernel):
    n = x.shape[0]
    out = gy.shape[2:]
    mult = gy.shape[1] // groups
    ell = math.prod(out)
    view = _windows(xp, _padded(xp, x, pads), kernel, stride, dilation, out)
    gyr = gy.reshape(n, groups, mult, ell).transpose(1, 2, 0, 3).reshape(groups, mult, n * ell)
    gw = xp.empty((groups, mult, math.prod(kernel)), dtype=x.dtype)
    for i, k in enumerate(itertools.product(*(range(kk) for kk in kernel))):
        xs = view[(slice(None), slice(None)) + k].reshape(n, groups, ell)
        xs = xs.transpose(1, 0, 2).reshape(groups, n * ell, 1)
        gw[:, :, i] = xp.matmul(gyr, xs)[:, :, 0]
    return gw.reshape((groups * mult, 1) + tuple(kernel))


def is_depthwise2d(x, w, pads, groups) -> bool:
    """Whether a convolution is what the direct depthwise loops take: 2-d, one input channel
    per group, symmetric padding (the conv override's condition)."""
    return (
        x.ndim == 4
        and groups > 1
        and w.shape[1] == 1
        and pads[0][0] == pads[0][1]
        and pads[1][0] == pads[1][1]
    )


def _bias_grad(gy):
    # The batch sum first (whole contiguous planes added), then each channel's plane: 3-6x
    # faster than one sum over the non-adjacent axes (0, 2, ...) on the digits CNN's shapes.
    s = gy.sum(axis=0)
    return s.reshape(s.shape[0], math.prod(s.shape[1:])).sum(axis=1)


def _add_bias(y, b):
    y += b.reshape((1, -1) + (1,) * (y.ndim - 2))
    return y


# --- the ops ----------------------------------------------------------------------------------


def _weight_grad_as_conv(x, gy, stride, pads, dilation, groups, kernel):
    """The weight gradient from ferro ops (Tensors in, a Tensor out): a convolution of ``x``,
    its batch and channels exchanged, by ``gy`` as the kernel, with stride and dilation
    exchanged and the output cropped to ``kernel``."""
    n, c = x.shape[:2]
    o = gy.shape[1]
    nd = x.ndim - 2
    cg, og = c // groups, o // groups
    sp = tuple(range(3, 3 + nd))
    inp = x.reshape((n, groups, cg) + tuple(x.shape[2:])).permute((2, 1, 0) + sp)
    inp = inp.reshape((cg, groups * n) + tuple(x.shape[2:]))
    ker = gy.reshape((n, groups, og) + tuple(gy.shape[2:])).permute((1, 2, 0) + sp)
    ker = ker.reshape((groups * og, n) + tuple(gy.shape[2:]))
    geom = {"stride": dilation, "pads": pads, "dilation": stride, "groups": groups}
    r = apply(Conv, inp, ker, None, **geom, size=tuple(kernel))
    return r.permute((1, 0) + tuple(range(2, 2 + nd)))


# Double backward: the same gradients as the ops' ``backward``, from ferro ops on Tensors (the
# engine calls them under create_graph=True; ``ctx.saved`` then holds Tensors).


def _differentiable_backward_of(transposed: bool):
    """The double-backward of conv (``transposed=False``) or conv_transpose: each op's input
    gradient is the other op applied to ``gy`` with the same weight and geometry, and the weight
    gradient is a convolution of the input with ``gy`` (their roles swapped for the transpose)."""

    def differentiable_backward(ctx, gy):
        x, w = ctx.saved
        need_x, need_w, need_b = ctx.needs_input_grad
        stride, pads, dilation, groups = ctx.geom
        gx = gw = gb = None
        if need_x:
            geom = {"stride": stride, "pads": pads, "dilation": dilation, "groups": groups}
            op = Conv if transposed else ConvTranspose
            gx = apply(op, gy, w, None, **geom, size=tuple(ctx.in_size))
        if need_w:
            a, b = (gy, x) if transposed else (x, gy)
            gw = _weight_grad_as_conv(a, b, stride, pads, dilation, groups, ctx.kernel)
        if need_b:
            gb = gy.sum(dim=(0,) + tuple(range(2, gy.ndim)))
        return gx, gw, gb

    return differentiable_backward


def _unfold_differentiable_backward(ctx, gy):
    geom = dict(zip(("stride", "pads", "dilation"), ctx.geom, strict=True))
    return (apply(Fold, gy, kernel=ctx.kernel, **geom, out=ctx.out, size=tuple(ctx.size)),)


def _fold_differentiable_backward(ctx, gy):
    geom = dict(zip(("stride", "pads", "dilation"), ctx.geom, strict=True))
    return (apply(Unfold, gy, kernel=ctx.kernel, **geom, out=ctx.out),)


def _pointwise(kernel, pads, groups):
    """Whether a convolution is 1x1 (any number of dims, any stride), unpadded, ungrouped: then
    it is one GEMM per sample on the input as it lies (at stride 1; else on its strided
    samples, :func:`_strided`), ``(C_out, C_in) @ (C_in, L)``, and so are its gradients
    (:func:`_pointwise_weight_grad`), with no column or transposing copies."""
    return groups == 1 and all(k == 1 for k in kernel) and not any(lo or hi for lo, hi in pads)


def _strided(xp, x, stride):
    """The points of ``x`` ``(n, C, *s)`` a 1x1 convolution of ``stride`` reads, contiguous
    (``x`` itself at stride 1)."""
    if all(s == 1 for s in stride):
        return x
    return xp.ascontiguousarray(x[(slice(None),) * 2 + tuple(slice(None, None, s) for s in stride)])


def _per_sample(a):
    """``(n, C, *s)`` as ``(n, C, prod(s))``."""
    return a.reshape(a.shape[0], a.shape[1], math.prod(a.shape[2:]))


# Note [Pointwise products]: a 1x1 convolution's three passes are stacks of per-sample GEMMs,
# ((64, 256) @ (256, 256) in conv2d_1x1): too small for OpenBLAS's own 2-thread split to pay
# (150 GFLOP/s of a 275 peak; 95 at one thread), and as parts of a Python split (_in_parts)
# they shared the second core with OpenBLAS's spinning worker (docs/conv.md). On the CPU they
# run as ferro._C.gemm.batched: runs of consecutive samples on ferro's team, each product one
# call at one OpenBLAS thread. The weight gradient sums its products in two fixed runs, so the
# bits do not depend on the thread count; the forward's and the input gradient's products are
# independent. In a parallel backward walk the node runs alone (ctx._alone), which holds
# OpenBLAS as a serial walk does; elsewhere (the GPU, or a forward inside a walk) NumPy's or
# CuPy's stacked matmul runs.


def _pointwise_products(xp, m, a, shape):
    """``m @ a[i]`` for every sample ``a[i]`` ``(K, *s)`` of ``a``, ``shape`` ``(n, M, *s)``:
    a pointwise convolution's forward and input gradient (Note [Pointwise products])."""
    y = xp.empty(shape, dtype=a.dtype)
    a, r = _per_sample(a), _per_sample(y)
    if xp is not np or gemm.walk.on or gemm.batched(m, a, r) is NotImplemented:
        xp.matmul(m, a, out=r)
    return y


def _pointwise_weight_grad(xp, x, gy):
    """``gw`` of a pointwise convolution: the sum over samples of ``x[n] @ gy[n]ᵀ``, then
    transposed (that product's long dimension is both operands' contiguous one, 1.3x faster
    than ``gy[n] @ x[n]ᵀ``; Note [Pointwise products])."""
    n, c, o = x.shape[0], x.shape[1], gy.shape[1]
    xs, gs = _per_sample(x), _per_sample(gy).transpose(0, 2, 1)
    on_team = xp is np and n and not gemm.walk.on
    if not on_team or (acc := gemm.batched(xs, gs, reduce=True)) is NotImplemented:
        acc = xp.zeros((c, o), x.dtype)  # chunks whose stacked products fit the workspace
        step = _chunk(xp, n, c * o * x.itemsize)
        for n0 in range(0, n, step):
            acc += xp.matmul(xs[n0 : n0 + step], gs[n0 : n0 + step]).sum(axis=0)
    return acc.T.reshape(gy.shape[1:2] + x.shape[1:2] + (1,) * (x.ndim - 2))


def conv_forward(transposed, kernels, ctx, x, w, b, stride, pads, dilation, groups, size):
    """The forward of :class:`Conv` (``transposed=False``) or :class:`ConvTranspose`, with the
    column kernels ``kernels`` (:class:`_Columns`; the CPU override passes its backend)."""
    need_x, need_w, _ = ctx.needs_input_grad
    ctx.save(x if need_w else None, w if need_x else None)
    ctx.geom = (stride, pads, dilation, groups)
    ctx.in_size, ctx.kernel = x.shape[2:], w.shape[2:]
    geom = (stride, pads, dilation, groups, size, kernels)
    # Where the CPU's GEMMs split on ferro's team, the node runs alone in a parallel walk (Notes
    # [Weight-bound convolutions], [Pointwise products]).
    c, ell = (w.shape[1] * groups, x.shape[2:]) if transposed else (x.shape[1], size)
    kp, n = math.prod(w.shape[2:]), x.shape[0]
    pointwise = not transposed and _pointwise(w.shape[2:], pads, groups)
    if _weight_bound(ctx.xp, n, c, w.shape[0], kp, math.prod(ell), groups, x.itemsize) or (
        pointwise and ctx.xp is np
    ):
        ctx._alone = True
    if transposed:  # (the cache: x's transform for a Winograd weight gradient, see below)
        ctx.columns = cache = {} if need_w else None
        y = _conv_input_grad(ctx.xp, x, w, *geom, cache=cache)
    else:
        ctx.depthwise2d = is_depthwise2d(x, w, pads, groups)  # the override's choice
        # The columns of a one-chunk batch, kept for the weight gradient (_columns_pass).
        ctx.columns = cache = {} if need_w else None
        if pointwise:
            wm, xs = w.reshape(w.shape[0], w.shape[1]), _strided(ctx.xp, x, stride)
            y = _pointwise_products(ctx.xp, wm, xs, x.shape[:1] + w.shape[:1] + size)
        else:
            return _conv_forward(ctx.xp, x, w, *geom, cache=cache, b=b)
    return y if b is None else _add_bias(y, b)


def conv_backward(transposed, kernels, ctx, gy):
    """The backward of :class:`Conv` or :class:`ConvTranspose` (see :func:`conv_forward`)."""
    xp = ctx.xp
    x, w = ctx.saved
    need_x, need_w, need_b = ctx.needs_input_grad
    gx = gw = None
    stride, pads, _, groups = ctx.geom
    if not transposed and _pointwise(ctx.kernel, pads, groups):
        if need_x:
            wt = w.reshape(w.shape[0], w.shape[1]).T
            gx = _pointwise_products(xp, wt, gy, gy.shape[:1] + w.shape[1:2] + gy.shape[2:])
            if gx.shape[2:] != tuple(ctx.in_size):  # strided: the points read, zeros between
                g, gx = gx, xp.zeros(gy.shape[:1] + w.shape[1:2] + tuple(ctx.in_size), gy.dtype)
                gx[(slice(None),) * 2 + tuple(slice(None, None, s) for s in stride)] = g
        gw = _pointwise_weight_grad(xp, _strided(xp, x, stride), gy) if need_w else None
        return gx, gw, _bias_grad(gy) if need_b else None
    gb = [] if need_b and gy.shape[0] else None  # the 3-d Winograd parts sum it as they read gy
    if need_x and transposed:  # gx and gw from gy's columns
        gx = _conv_forward(
            xp, gy, w, *ctx.geom, ctx.in_size, kernels, x if need_w else None, ctx.columns
        )
        gx, gw = gx if need_w else (gx, None)
    elif need_x and need_w and _winograd_adjoint(kernels, x, w, gy, stride, ctx.geom[2], groups):
        gx, gw = _winograd_weight_grad(xp, kernels, x, gy, pads, w, cache=ctx.columns, gb=gb)
    elif need_x:
        gx = _conv_input_grad(xp, gy, w, *ctx.geom, ctx.in_size, kernels, ctx.columns)
    pending = need_w and gw is None and not transposed
    if pending and _output_side(x.shape[1], gy.shape[1], ctx.kernel, *ctx.geom):
        # (as its forward, _output_side) from gy's columns: the flipped convolution's, flipped
        dilation = ctx.geom[2]
        flipped = _flipped(stride, pads, ctx.kernel, dilation)
        geom = (stride, flipped, dilation, groups, ctx.kernel, kernels)
        gw = _transposed_weight(xp, _conv_weight_grad(xp, gy, x, *geom), groups)
    if need_w and gw is None:
        a, b = (gy, x) if transposed else (x, gy)
        cache = None if transposed else ctx.columns
        gw = _conv_weight_grad(xp, a, b, *ctx.geom, ctx.kernel, kernels, cache)
    return gx, gw, gb[0] if gb else _bias_grad(gy) if need_b else None


@register("conv", early=1)
class Conv:
    """N-d convolution: ``x`` ``(N, C_in, *size)``, ``w`` ``(C_out, C_in/groups, *kernel)``,
    ``b`` ``(C_out,)`` or None. ``pads`` holds one ``(lo, hi)`` per spatial dim, ``size`` the
    output's spatial shape. The weight's and bias's gradients need no input gradient, so they
    may come first (``early=1``, Note [Early gradients]); not for conv_transpose, whose
    backward gets both gradients from one pass over ``gy``'s columns."""

    @staticmethod
    def forward(ctx, x, w, b, *, stride, pads, dilation, groups, size):
        return conv_forward(False, None, ctx, x, w, b, stride, pads, dilation, groups, size)

    @staticmethod
    def backward(ctx, gy):
        return conv_backward(False, None, ctx, gy)

    differentiable_backward = staticmethod(_differentiable_backward_of(transposed=False))


@register("conv_transpose")
class ConvTranspose:
    """N-d transposed convolution, the input gradient of :class:`Conv` as an op: ``x``
    ``(N, C_in, *in)``, ``w`` ``(C_in, C_out/groups, *kernel)``, output ``(N, C_out, *size)``."""

    @staticmethod
    def forward(ctx, x, w, b, *, stride, pads, dilation, groups, size):
        return conv_forward(True, None, ctx, x, w, b, stride, pads, dilation, groups, size)

    @staticmethod
    def backward(ctx, gy):
        return conv_backward(True, None, ctx, gy)

    differentiable_backward = staticmethod(_differentiable_backward_of(transposed=True))


def _unfold_array(xp, x, kernel, stride, pads, dilation, out, cols=None):
    """im2col of ``x`` ``(n, C, *size)`` as unfold returns it, ``(n, C*prod(kernel), L)``; from
    the column kernel of ``cols`` where given."""
    if cols is not None:
        x = xp.ascontiguousarray(x)
        return cols.unfold_cols(x, kernel, stride, pads, dilation, out)
    col = _im2col(xp, x, kernel, stride, pads, dilation, out)
    return col.reshape(x.shape[0], -1, math.prod(out))


def _fold_array(xp, col, size, kernel, stride, pads, dilation, out, cols=None):
    """col2im of ``col`` ``(n, C*prod(kernel), L)`` into ``(n, C, *size)``, the adjoint of
    :func:`_unfold_array`."""
    n = col.shape[0]
    if cols is not None:
        x = xp.empty((n, col.shape[1] // math.prod(kernel)) + tuple(size), dtype=col.dtype)
        col = xp.ascontiguousarray(col)
        return cols.fold_cols(col, x, kernel, stride, pads, dilation, out)
    col = col.reshape((n, -1) + tuple(kernel) + tuple(out))
    return _col2im(xp, col, size, stride, pads, dilation)


@register("unfold")
class Unfold:
    """im2col as an op: ``(N, C, *size)`` -> ``(N, C * prod(kernel), L)``."""

    @staticmethod
    def forward(ctx, x, *, kernel, stride, pads, dilation, out, cols=None):
        ctx.geom = (stride, pads, dilation)
        ctx.size, ctx.kernel, ctx.out = x.shape[2:], kernel, out
        return _unfold_array(ctx.xp, x, kernel, stride, pads, dilation, out, cols)

    @staticmethod
    def backward(ctx, gy, cols=None):
        geom = ctx.size, ctx.kernel, *ctx.geom, ctx.out
        return (_fold_array(ctx.xp, gy, *geom, cols),)

    differentiable_backward = staticmethod(_unfold_differentiable_backward)


@register("fold")
class Fold:
    """col2im as an op: ``(N, C * prod(kernel), L)`` -> ``(N, C, *size)``, overlaps summed."""

    @staticmethod
    def forward(ctx, col, *, kernel, stride, pads, dilation, out, size, cols=None):
        ctx.geom = (stride, pads, dilation)
        ctx.size, ctx.kernel, ctx.out = size, kernel, out
        return _fold_array(ctx.xp, col, size, kernel, stride, pads, dilation, out, cols)

    @staticmethod
    def backward(ctx, gy, cols=None):
        stride, pads, dilation = ctx.geom
        return (_unfold_array(ctx.xp, gy, ctx.kernel, stride, pads, dilation, ctx.out, cols),)

    differentiable_backward = staticmethod(_fold_differentiable_backward)


def columns_override(op):
    """The override adapter of ``op`` (:class:`Unfold`, :class:`Fold`) on a backend with
    batch-major column kernels (``unfold_cols``, ``fold_cols``: the GPU's): the op's own forward
    and backward and ``ctx`` state, with the kernels in place of the strided views and slice
    adds. Arrays the kernels do not take (another
    dtype, a saved array a hook made non-contiguous) run the generic code."""

    def adapter(backend):
        accepts = backend.accepts

        def forward(ctx, *arrays, **params):
            if not accepts(tuple(a for a in arrays if a is not None)):
                return NotImplemented
            return op.forward(ctx, *arrays, **params, cols=backend)

        def backward(ctx, gy):
            gy = ctx.xp.ascontiguousarray(gy)
            saved = tuple(a for a in ctx.saved if a is not None)
            return op.backward(ctx, gy, cols=backend if accepts((gy, *saved)) else None)

        return forward, backward

    return adapter


# --- argument checks and the public functions -------------------------------------------------


def _tuple(value, n, what, op, minimum):
    """``value`` (an int or a sequence of ``n`` ints) as an ``n``-tuple of ints >= minimum."""
    if type(value) is int:  # the common cases first: the numbers ABC's isinstance is slow
        value = (value,) * n
    elif type(value) is tuple and len(value) == n and all(type(v) is int for v in value):
        pass
    elif isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = (int(value),) * n
    elif isinstance(value, (tuple, list)) and all(
        isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in value
    ):
        value = tuple(int(v) for v in value)
        if len(value) == 1 and n > 1:
            value = value * n
        if len(value) != n:
            raise ArgumentError(f"{op}: {what} must be an int or {n} ints, got {value}")
    else:
        raise ArgumentTypeError(
            f"{op}: {what} must be an int or a tuple of {n} ints, got {value!r}"
        )
    if any(v < minimum for v in value):
        raise ArgumentError(f"{op}: {what} must be >= {minimum}, got {value}")
    return value


def _groups(groups, op):
    if type(groups) is not int and (  # an int first: the numbers ABC's isinstance is slow
        isinstance(groups, bool) or not isinstance(groups, numbers.Integral)
    ):
        raise ArgumentTypeError(f"{op}: groups must be an int, got {groups!r}")
    if groups < 1:
        raise ArgumentError(f"{op}: groups must be positive, got {groups}")
    return int(groups)


def _check_arrays(op, x, w, b, nd, transposed, groups):
    """Ranks, channels and dtypes; returns whether ``x`` is batched."""
    if w.ndim != nd + 2:
        raise ShapeError(
            f"{op}: weight must have {nd + 2} dims (out_channels, in_channels/groups, "
            f"*kernel), got shape {tuple(w.shape)}"
        )
    if x.ndim not in (nd + 1, nd + 2):
        raise ShapeError(
            f"{op}: input must have {nd + 2} dims (N, C, *spatial) or {nd + 1} (unbatched), "
            f"got shape {tuple(x.shape)}"
        )
    c = x.shape[-nd - 1]
    if transposed:
        if w.shape[0] != c or c % groups:
            raise ShapeError(
                f"{op}: input of shape {tuple(x.shape)} has {c} channels; weight of shape "
                f"{tuple(w.shape)} with groups={groups} expects {w.shape[0]} (divisible by "
                f"groups)"
            )
        out_channels = w.shape[1] * groups
    else:
        if w.shape[0] % groups:
            raise ShapeError(
                f"{op}: out_channels {w.shape[0]} of weight {tuple(w.shape)} is not divisible "
                f"by groups={groups}"
            )
        if c % groups or c // groups != w.shape[1]:
            raise ShapeError(
                f"{op}: input of shape {tuple(x.shape)} has {c} channels; weight of shape "
                f"{tuple(w.shape)} with groups={groups} expects {w.shape[1] * groups}"
            )
        out_channels = w.shape[0]
    if b is not None and tuple(b.shape) != (out_channels,):
        raise ShapeError(f"{op}: bias of shape {tuple(b.shape)}, expected ({out_channels},)")
    for name, t in (("weight", w), ("bias", b)):
        if t is not None and t.dtype.type is not x.dtype.type:  # byte order may differ
            raise DtypeError(
                f"{op}: input ({x.dtype}) and {name} ({t.dtype}) must have the same dtype"
            )
    if x.dtype.kind != "f":
        raise DtypeError(f"{op}: input must be a floating-point tensor, got {x.dtype}")
    return x.ndim == nd + 2


def _batched(x, batched):
    return x if batched else x.reshape((1,) + tuple(x.shape))


def _unbatched(y, batched):
    return y if batched else y.reshape(tuple(y.shape[1:]))


def _conv(nd, x, weight, bias, stride, padding, dilation, groups):
    op = f"conv{nd}d"
    groups = _groups(groups, op)
    batched = _check_arrays(op, x, weight, bias, nd, False, groups)
    stride = _tuple(stride, nd, "stride", op, 1)
    dilation = _tuple(dilation, nd, "dilation", op, 1)
    kernel = tuple(weight.shape[2:])
    size = tuple(x.shape[-nd:])
    if isinstance(padding, str):
        if padding == "valid":
            pads = ((0, 0),) * nd
        elif padding == "same":
            if any(s != 1 for s in stride):
                raise ArgumentError(
                    f"{op}: padding='same' is not supported for strided convolutions "
                    f"(stride={stride})"
                )
            # The total d*(k-1) split with the extra element at the end, as PyTorch does.
            total = [d * (k - 1) for d, k in zip(dilation, kernel, strict=True)]
            pads = tuple((t // 2, t - t // 2) for t in total)
        else:
            raise ArgumentError(f"{op}: padding must be 'same', 'valid' or ints, got {padding!r}")
    else:
        pads = tuple((p, p) for p in _tuple(padding, nd, "padding", op, 0))
    out = []
    for i in range(nd):
        span = dilation[i] * (kernel[i] - 1) + 1
        padded = size[i] + pads[i][0] + pads[i][1]
        if span > padded:
            raise ShapeError(
                f"{op}: kernel {kernel} with dilation {dilation} spans {span} in spatial dim "
                f"{i}, more than the padded input ({padded}; input {tuple(x.shape)}, "
                f"padding {padding})"
            )
        out.append((padded - span) // stride[i] + 1)
    geom = {"stride": stride, "pads": pads, "dilation": dilation, "groups": groups}
    y = apply(Conv, _batched(x, batched), weight, bias, **geom, size=tuple(out))
    return _unbatched(y, batched)


def _conv_transpose(nd, x, weight, bias, stride, padding, output_padding, groups, dilation):
    op = f"conv_transpose{nd}d"
    groups = _groups(groups, op)
    batched = _check_arrays(op, x, weight, bias, nd, True, groups)
    stride = _tuple(stride, nd, "stride", op, 1)
    dilation = _tuple(dilation, nd, "dilation", op, 1)
    padding = _tuple(padding, nd, "padding", op, 0)
    output_padding = _tuple(output_padding, nd, "output_padding", op, 0)
    kernel = tuple(weight.shape[2:])
    size = tuple(x.shape[-nd:])
    out = []
    for i in range(nd):
        if output_padding[i] >= max(stride[i], dilation[i]):
            raise ArgumentError(
                f"{op}: output_padding {output_padding} must be smaller than stride {stride} "
                f"or dilation {dilation}"
            )
        o = (
            (size[i] - 1) * stride[i]
            - 2 * padding[i]
            + dilation[i] * (kernel[i] - 1)
            + output_padding[i]
            + 1
        )
        if o < 1:
            raise ShapeError(
                f"{op}: output size {o} in spatial dim {i} is not positive (input "
                f"{tuple(x.shape)}, kernel {kernel}, stride {stride}, padding {padding}, "
                f"dilation {dilation})"
            )
        out.append(o)
    pads = tuple((p, p) for p in padding)
    geom = {"stride": stride, "pads": pads, "dilation": dilation, "groups": groups}
    y = apply(ConvTranspose, _batched(x, batched), weight, bias, **geom, size=tuple(out))
    return _unbatched(y, batched)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):  # noqa: A002
    """1-d convolution (cross-correlation) of ``input`` ``(N, C_in, L)`` by ``weight``
    ``(C_out, C_in/groups, k)``, PyTorch's ``F.conv1d``; ``padding`` an int, a tuple,
    ``'same'`` or ``'valid'``.

    Gradient: ginput = conv_transpose1d(gy, weight), gweight = gy correlated with the input,
    gbias = gy summed over N and L.

    Example:
        >>> ferro.conv1d(ferro.ones(1, 1, 5), ferro.ones(1, 1, 3)).shape
        ferro.Size([1, 1, 3])
    """
    return _conv(1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):  # noqa: A002
    """2-d convolution of ``input`` ``(N, C_in, H, W)`` by ``weight``
    ``(C_out, C_in/groups, kH, kW)``, PyTorch's ``F.conv2d``.

    Gradient: ginput = conv_transpose2d(gy, weight), gweight = gy correlated with the input,
    gbias = gy summed over N, H, W.

    Example:
        >>> ferro.conv2d(ferro.ones(1, 3, 8, 8), ferro.ones(4, 3, 3, 3), padding=1).shape
        ferro.Size([1, 4, 8, 8])
    """
    return _conv(2, input, weight, bias, stride, padding, dilation, groups)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):  # noqa: A002
    """3-d convolution of ``input`` ``(N, C_in, D, H, W)`` by ``weight``
    ``(C_out, C_in/groups, kD, kH, kW)``, PyTorch's ``F.conv3d``.

    Gradient: ginput = conv_transpose3d(gy, weight), gweight = gy correlated with the input,
    gbias = gy summed over N, D, H, W.

    Example:
        >>> ferro.conv3d(ferro.ones(1, 1, 4, 4, 4), ferro.ones(2, 1, 3, 3, 3)).shape
        ferro.Size([1, 2, 2, 2, 2])
    """
    return _conv(3, input, weight, bias, stride, padding, dilation, groups)


def conv_transpose1d(
    input,  # noqa: A002
    weight,
    bias=None,
    stride=1,
    padding=0,
    output_padding=0,
    groups=1,
    dilation=1,
):
    """1-d transposed convolution of ``input`` ``(N, C_in, L)`` by ``weight``
    ``(C_in, C_out/groups, k)``, PyTorch's ``F.conv_transpose1d``: the input gradient of
    ``conv1d``, output length ``(L-1)*stride - 2*padding + dilation*(k-1) + output_padding + 1``.

    Gradient: ginput = conv1d(gy, weight), gweight = the input correlated with gy,
    gbias = gy summed over N and L.

    Example:
        >>> ferro.conv_transpose1d(ferro.ones(1, 2, 4), ferro.ones(2, 1, 3), stride=2).shape
        ferro.Size([1, 1, 9])
    """
    return _conv_transpose(
        1, input, weight, bias, stride, padding, output_padding, groups, dilation
    )


def conv_transpose2d(
    input,  # noqa: A002
    weight,
    bias=None,
    stride=1,
    padding=0,
    output_padding=0,
    groups=1,
    dilation=1,
):
    """2-d transposed convolution of ``input`` ``(N, C_in, H, W)`` by ``weight``
    ``(C_in, C_out/groups, kH, kW)``, PyTorch's ``F.conv_transpose2d``.

    Gradient: ginput = conv2d(gy, weight), gweight = the input correlated with gy,
    gbias = gy summed over N, H, W.

    Example:
        >>> w = ferro.ones(8, 4, 4, 4)
        >>> ferro.conv_transpose2d(ferro.ones(1, 8, 5, 5), w, stride=2, padding=1).shape
        ferro.Size([1, 4, 10, 10])
    """
    return _conv_transpose(
        2, input, weight, bias, stride, padding, output_padding, groups, dilation
    )


def conv_transpose3d(
    input,  # noqa: A002
    weight,
    bias=None,
    stride=1,
    padding=0,
    output_padding=0,
    groups=1,
    dilation=1,
):
    """3-d transposed convolution of ``input`` ``(N, C_in, D, H, W)`` by ``weight``
    ``(C_in, C_out/groups, kD, kH, kW)``, PyTorch's ``F.conv_transpose3d``.

    Gradient: ginput = conv3d(gy, weight), gweight = the input correlated with gy,
    gbias = gy summed over N, D, H, W.

    Example:
        >>> ferro.conv_transpose3d(ferro.ones(1, 2, 2, 2, 2), ferro.ones(2, 1, 2, 2, 2)).shape
        ferro.Size([1, 1, 3, 3, 3])
    """
    return _conv_transpose(
        3, input, weight, bias, stride, padding, output_padding, groups, dilation
    )


def _fold_geometry(op, kernel_size, dilation, padding, stride):
    kernel = _tuple(kernel_size, 2, "kernel_size", op, 1)
    dilation = _tuple(dilation, 2, "dilation", op, 1)
    padding = _tuple(padding, 2, "padding", op, 0)
    stride = _tuple(stride, 2, "stride", op, 1)
    return kernel, dilation, tuple((p, p) for p in padding), stride


def _blocks(op, size, kernel, dilation, pads, stride):
    out = []
    for i in range(2):
        span = dilation[i] * (kernel[i] - 1) + 1
        padded = size[i] + 2 * pads[i][0]
        n = (padded - span) // stride[i] + 1 if padded >= span else 0
        if n < 1:
            raise ShapeError(
                f"{op}: kernel_size {kernel} with dilation {dilation} gives no block over "
                f"spatial size {tuple(size)} padded by {pads[0][0], pads[1][0]}"
            )
        out.append(n)
    return tuple(out)


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):  # noqa: A002
    """Sliding blocks of ``input`` ``(N, C, H, W)`` as columns ``(N, C*kH*kW, L)`` (im2col,
    PyTorch's ``F.unfold``); L is the number of blocks. Unbatched ``(C, H, W)`` works too.

    Gradient: ginput = fold(gy, (H, W), ...): each column's gradient added back where it came
    from.

    Example:
        >>> ferro.nn.functional.unfold(ferro.ones(1, 2, 4, 4), kernel_size=2).shape
        ferro.Size([1, 8, 9])
    """
    op = "unfold"
    if input.ndim not in (3, 4):
        raise ShapeError(
            f"{op}: input must be (N, C, H, W) or (C, H, W), got shape {tuple(input.shape)}"
        )
    kernel, dilation, pads, stride = _fold_geometry(op, kernel_size, dilation, padding, stride)
    batched = input.ndim == 4
    out = _blocks(op, input.shape[-2:], kernel, dilation, pads, stride)
    geom = {"kernel": kernel, "stride": stride, "pads": pads, "dilation": dilation, "out": out}
    return _unbatched(apply(Unfold, _batched(input, batched), **geom), batched)


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):  # noqa: A002
    """Columns ``(N, C*kH*kW, L)`` summed back into ``(N, C, *output_size)`` (col2im,
    PyTorch's ``F.fold``; overlapping blocks add up). Unbatched ``(C*kH*kW, L)`` works too.

    Gradient: ginput = unfold(gy, ...).

    Example:
        >>> ferro.nn.functional.fold(ferro.ones(1, 8, 9), (4, 4), kernel_size=2).shape
        ferro.Size([1, 2, 4, 4])
    """
    op = "fold"
    if input.ndim not in (2, 3):
        raise ShapeError(
            f"{op}: input must be (N, C*kH*kW, L) or (C*kH*kW, L), got shape {tuple(input.shape)}"
        )
    size = _tuple(output_size, 2, "output_size", op, 1)
    kernel, dilation, pads, stride = _fold_geometry(op, kernel_size, dilation, padding, stride)
    out = _blocks(op, size, kernel, dilation, pads, stride)
    batched = input.ndim == 3
    ck, ell = input.shape[-2:]
    if ck % math.prod(kernel) or ell != math.prod(out):
        raise ShapeError(
            f"{op}: input of shape {tuple(input.shape)} does not hold C*{math.prod(kernel)} rows "
            f"(kernel_size {kernel}) and {math.prod(out)} blocks (output_size {size})"
        )
    geom = {"kernel": kernel, "stride": stride, "pads": pads, "dilation": dilation, "out": out}
    return _unbatched(apply(Fold, _batched(input, batched), **geom, size=size), batched)


__all__ = [
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "fold",
    "unfold",
]
