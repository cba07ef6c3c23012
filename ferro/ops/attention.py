"""Attention: ``scaled_dot_product_attention`` as one op with a closed-form backward.

``softmax(q @ k^T * scale + bias) @ v`` is one node: its backward is the closed form
``dS = P * (dP - rowsum(dO * O))`` with ``dP = dO @ v^T``, not a chain of matmul, softmax and
masking nodes. Two paths compute it, with the same results:

- **dense** (short key sequences, or dropout): the (L, S) weights ``P`` of every head are
  materialised once and kept for the backward;
- **blockwise** (long key sequences): an online softmax over blocks of keys (FlashAttention's
  recurrence: a running row maximum, a running sum and a rescaled accumulator), keeping each
  row's logsumexp; the backward rescales the forward's tiles, kept while they take at most
  ``KEEP_TILES_BYTES``, or recomputes each block's weights from the logsumexp. Beyond the kept
  tiles, peak extra memory is a few (L, block) tiles per head instead of (L, S) matrices; with
  ``is_causal`` the blocks a query cannot see are skipped, only the rows that can see a block
  are computed, and the future is hidden in place on the first rows of a tile (no mask
  matrix).

Both paths run the heads in chunks whose tiles stay in a core's L2 cache, and on the CPU the
chunks are split over the intra-op threads (Note [Intra-op split]): each head's work is
independent of the others', so the results do not depend on the number of threads.

Both backwards read buffers written in place, so the op also has a ``differentiable_backward``
(the same gradients from public ferro ops) for double backward.
"""

from __future__ import annotations

import functools
import math
import numbers

import numpy as np

from ferro import _intraop
from ferro._C.engine import sum_to_shape
from ferro._C.tensor import TensorBase, wrap
from ferro.errors import ArgumentError, ArgumentTypeError, DtypeError, ShapeError
from ferro.ops.elementwise import real_arg
from ferro.ops.registry import apply, register

#: Keys per block of the blockwise path.
BLOCK = 64
#: The blockwise path runs when there are more keys than this (and no dropout). At 256 keys
#: the dense path would hold two (L, S) matrices per head in its backward; single-threaded
#: the two paths ran at the same speed there (B=8, H=8, T=256, D=64, causal, float32).
DENSE_MAX_KEYS = 128


def _causal_keep(xp, rows, cols, r0=0, c0=0):
    # Query i (top-left aligned, as PyTorch) sees key j <= i: the (rows, cols) tile at (r0, c0).
    i = xp.arange(r0, r0 + rows)[:, None]
    j = xp.arange(c0, c0 + cols)[None, :]
    return j <= i


def _bias(xp, mask, causal, L, S, dtype):
    """The additive bias (broadcastable to (..., L, S)) for a mask (bool: keep where True;
    float: added) and/or the causal mask; None when there is neither."""
    bias = None
    if mask is not None:
        if mask.dtype == xp.bool_:
            if causal:
                mask = mask & _causal_keep(xp, L, S)
                causal = False
            bias = xp.where(mask, xp.zeros((), dtype), xp.asarray(-math.inf, dtype))
        else:
            bias = mask
    if causal:
        c = xp.where(_causal_keep(xp, L, S), xp.zeros((), dtype), xp.asarray(-math.inf, dtype))
        bias = c if bias is None else bias + c
    return bias


class _Layout:
    """How q, k, v and the mask are viewed for the math: with grouped-query attention the
    query heads become (kv heads, group) so one key head serves its group without a copy."""

    def __init__(self, q, k, v, mask, groups):
        self.groups = groups
        self.q_shape, self.mask_shape = q.shape, None if mask is None else mask.shape
        if groups > 1:
            h = k.shape[-3]
            q = q.reshape(q.shape[:-3] + (h, groups) + q.shape[-2:])
            k = k.reshape(k.shape[:-3] + (h, 1) + k.shape[-2:])
            v = v.reshape(v.shape[:-3] + (h, 1) + v.shape[-2:])
            if mask is not None:
                mask = mask.reshape((1,) * (len(self.q_shape) - mask.ndim) + mask.shape)
                if mask.shape[-3] == 1:
                    mask = mask[..., None, :, :]
                else:
                    mask = mask.reshape(mask.shape[:-3] + (h, groups) + mask.shape[-2:])
        self.q, self.k, self.v, self.mask = q, k, v, mask

    def like_q(self, a):
        """An array shaped like the output (..., heads, L, Ev) viewed as the query is."""
        if self.groups > 1:
            h = self.k.shape[-4]
            return a.reshape(a.shape[:-3] + (h, self.groups) + a.shape[-2:])
        return a

    def grad_q(self, g):
        """Merge (kv heads, group) of a query-shaped array back into the query heads."""
        if self.groups > 1:
            g = g.reshape(g.shape[:-4] + (g.shape[-4] * g.shape[-3],) + g.shape[-2:])
        return g

    def grad_kv(self, g):
        # Sum each key head's gradient over the query heads of its group.
        return g.sum(axis=-3) if self.groups > 1 else g

    grad_mask = grad_q


def _add_bias(xp, s, b):
    # In place when the bias broadcasts into the scores' shape (the common case).
    if xp.broadcast_shapes(s.shape, b.shape) == s.shape:
        s += b
        return s
    return s + b


def _swap(a):
    return a.swapaxes(-1, -2)


def _safe_max(xp, s):
    # The row maximum, 0 for a row with no visible key (so exp(-inf - 0) = 0, not nan).
    if s.shape[-1] == 0:
        return xp.zeros(s.shape[:-1] + (1,), s.dtype)
    m = s.max(axis=-1, keepdims=True)
    return xp.where(xp.isneginf(m), xp.zeros((), s.dtype), m)


def _dropout_mask(xp, shape, p, dtype):
    if p == 0.0:
        return None
    if xp.__name__ != "numpy":
        from ferro.backend import device_dropout_mask

        return device_dropout_mask(xp.empty(shape, dtype), p)
    from ferro.random import numpy_generator

    bits = numpy_generator().integers(0, 2**32, size=shape, dtype="uint32")
    keep = bits >= min(int(p * 2**32), 2**32)
    return keep * dtype.type(0.0 if p >= 1.0 else 1.0 / (1.0 - p))


def _batch(xp, q, k, v, bias):
    # The broadcast batch shape (all dimensions before the last two).
    batch = xp.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    return batch if bias is None else xp.broadcast_shapes(batch, bias.shape[:-2])


def _dense_forward(ctx, lay, bias, scale, dropout_p):
    xp = ctx.xp
    q, k, v = lay.q, lay.k, lay.v
    L, S = q.shape[-2], k.shape[-2]
    batch = _batch(xp, q, k, v, bias)
    p = xp.empty(batch + (L, S), q.dtype)
    out = xp.empty(batch + (L, v.shape[-1]), q.dtype)
    drop = _dropout_mask(xp, p.shape, dropout_p, p.dtype)
    _in_chunks(xp, batch, q, S, S, _dense_forward_chunk, (q, k, v, bias, drop, p, out), scale)
    ctx.p = p  # the fast backward's weights (never read by differentiable_backward)
    return out, drop


def _dense_forward_chunk(xp, q, k, v, bias, drop, p, out, scale):
    # p and out: this chunk's slices of the weights and of the output, written in place.
    s = xp.matmul(q * q.dtype.type(scale), _swap(k))
    if bias is not None:
        s = _add_bias(xp, s, bias)
    s -= _safe_max(xp, s)
    xp.exp(s, out=p)
    total = p.sum(axis=-1, keepdims=True)
    total[total == 0] = 1  # a row that sees no key: weights 0, output 0 (as PyTorch)
    p /= total
    xp.matmul(p if drop is None else p * drop, v, out=out)


def _dense_backward(ctx, lay, gy, out, drop, need):
    xp = ctx.xp
    p = ctx.p
    grads = _grad_buffers(xp, p.shape[:-2], lay, need, xp.empty)
    arrays = (lay.q, lay.k, lay.v, gy, out, drop, p, *grads)
    _in_chunks(xp, p.shape[:-2], lay.q, p.shape[-1], p.shape[-1], _dense_backward_chunk, arrays)
    return _merged(lay, grads, ctx.scale)


def _dense_backward_chunk(xp, q, k, v, gy, out, drop, p, gq, gk, gv, gm):
    # The gradients' slices of this chunk are written in place (gq and gk before the scale).
    if gv is not None:
        xp.matmul(_swap(p if drop is None else p * drop), gy, out=gv)
    if gq is None and gk is None and gm is None:
        return
    ds = xp.matmul(gy, _swap(v), out=gm)  # dP, then dS in place
    if drop is not None:
        ds *= drop
    ds -= (gy * out).sum(axis=-1, keepdims=True)
    ds *= p  # dS, the gradient of the scores
    if gq is not None:
        xp.matmul(ds, k, out=gq)
    if gk is not None:
        xp.matmul(_swap(ds), q, out=gk)


def _block_bias(bias, r0, c0, c1):
    """The user's bias on the tile rows [r0, L) x keys [c0, c1), or None."""
    if bias is None:
        return None
    return bias[..., r0:, c0:c1] if bias.shape[-2] != 1 else bias[..., c0:c1]


def _hide_future(xp, s, r0, c0, c1, L):
    # Causal: -inf where a tile row (query r0 + i) comes before its key (c0 + j); only the
    # first rows of a tile on the diagonal miss keys, the others see the whole tile.
    n = max(0, min(c1 - 1, L) - r0)
    if n:
        tri = _future_bias(n, c1 - c0, r0 - c0, s.dtype)
        s[..., :n, :] += tri if xp is np else xp.asarray(tri)


@functools.lru_cache(maxsize=32)
def _future_bias(rows, cols, shift, dtype):
    # 0 where key j <= query i + shift, else -inf (kept read-only for the next tiles and calls):
    # an add hides the future in one vectorized pass, where a masked fill of -inf ran NumPy's
    # per-element masked transfer (3% of the op).
    bias = np.where(_causal_keep(np, rows, cols, shift, 0), dtype.type(0), dtype.type(-math.inf))
    bias.flags.writeable = False
    return bias


def _blocks(L, S, causal, block):
    # (first row, first key, end key) of each tile that some query sees.
    for c0 in range(0, S, block):
        r0 = min(c0, L) if causal else 0
        if r0 < L:
            yield r0, c0, min(c0 + block, S)


#: Both paths split the batch (all dimensions before the last two) into parts that run on the
#: intra-op threads (Note [Intra-op split]) from this many multiply-adds of q @ k^T.
PART_MIN_WORK = 1 << 22
#: Within a part, heads run in chunks whose score tiles take about this many bytes, so a tile's
#: passes (exp, sums, the backward's products) read it from the core's L2 cache, not from L3.
CHUNK_BYTES = 1 << 19


def _in_chunks(xp, batch, q, S, block, fn, arrays, *args):
    """``fn(xp, *slices, *args)`` for each chunk of the batch (``_Slicer``), ``slices`` the
    chunk's slices of ``arrays``."""
    sl = _Slicer(xp, batch, q.shape[-2], S, q.shape[-1], q.dtype.itemsize, block)
    sl.run(lambda c: fn(xp, *(sl.take(a, c) for a in arrays), *args))


def _grad_buffers(xp, batch, lay, need, mask_alloc):
    """The gradients' buffers (None where not needed) over the whole batch."""
    L, S = lay.q.shape[-2], lay.k.shape[-2]
    shapes = ((L, lay.q.shape[-1]), (S, lay.k.shape[-1]), (S, lay.v.shape[-1]), (L, S))
    allocs = (xp.empty, xp.empty, xp.empty, mask_alloc)
    grads = zip(allocs, shapes, need, strict=True)
    return [a(batch + s, lay.q.dtype) if n else None for a, s, n in grads]


def _merged(lay, grads, scale):
    """The gradients in the inputs' layout, q's and k's times ``scale``."""
    gq, gk, gv, gm = grads
    for g in (gq, gk):
        if g is not None:
            g *= scale
    merge = (lay.grad_q, lay.grad_kv, lay.grad_kv, lay.grad_mask)
    return tuple(None if g is None else f(g) for f, g in zip(merge, grads, strict=True))


class _Slicer:
    """Cuts the broadcast batch shape into chunks along its first axis longer than 1, and the
    chunks into parts for the intra-op threads (one part on a GPU); ``take`` slices an array
    whose batch dimensions broadcast to the batch (None stays None)."""

    def __init__(self, xp, batch, L, S, E, itemsize, block):
        self.ndim = len(batch)
        self.axis = next((i for i, n in enumerate(batch) if n > 1), None)
        if self.axis is None:
            self.chunks, self.parts = [(0, 1)], 1
            return
        n = batch[self.axis]
        inner = math.prod(batch[self.axis + 1 :])
        tile = inner * L * min(block, S) * itemsize
        # On a GPU every launch covers the whole batch: one chunk.
        step = max(1, min(n, CHUNK_BYTES // max(tile, 1))) if xp is np else n
        self.chunks = [(i, min(i + step, n)) for i in range(0, n, step)]
        work = math.prod(batch) * L * S * E
        parts = _intraop.parts(len(self.chunks)) if xp is np and work >= PART_MIN_WORK else 1
        self.parts = parts

    def take(self, a, chunk):
        if isinstance(a, list):  # the kept tiles: (weights, maxima) pairs
            return [tuple(self.take(b, chunk) for b in pair) for pair in a]
        if a is None or self.axis is None:
            return a
        d = a.ndim - 2 - self.ndim + self.axis
        if d < 0 or a.shape[d] == 1:
            return a
        return a[(slice(None),) * d + (slice(*chunk),)]

    def run(self, fn):
        """``fn(chunk)`` for every chunk, the chunks dealt to the parts in contiguous runs."""
        chunks, n = self.chunks, self.parts
        if n == 1:
            for c in chunks:
                fn(c)
            return
        runs = [chunks[i * len(chunks) // n : (i + 1) * len(chunks) // n] for i in range(n)]
        _intraop.run(lambda i: [fn(c) for c in runs[i]], n)


def _scaled_over(xp, q, scale, batch):
    # q * scale over the whole batch (q may broadcast): every tile then has the batch's shape,
    # which the tile's in-place updates and the outputs' slices need.
    qs = xp.empty(batch + q.shape[-2:], q.dtype)
    return xp.multiply(q, q.dtype.type(scale), out=qs)


def _block_forward(ctx, lay, bias, scale, causal, block):
    xp = ctx.xp
    q, k, v = lay.q, lay.k, lay.v
    L, S = q.shape[-2], k.shape[-2]
    batch = _batch(xp, q, k, v, bias)
    acc = xp.empty(batch + (L, v.shape[-1]), q.dtype)
    lse = xp.empty(batch + (L, 1), q.dtype)
    tiles = _tiles_to_keep(xp, ctx, batch, L, S, causal, block, q.dtype)
    arrays = (q, k, v, bias, acc, lse, tiles)
    _in_chunks(xp, batch, q, S, block, _block_forward_chunk, arrays, scale, causal, block)
    ctx.lse, ctx.tiles = lse, tiles
    return acc


#: The blockwise forward keeps its tiles' weights for the backward (which then skips
#: recomputing q @ k^T and the exp) while they take at most this many bytes, about one (L, S)
#: matrix per head of the benchmark's (8, 8, 256, 256) float32 (a causal one keeps 10 MiB of
#: its 16); longer sequences recompute them from each row's logsumexp.
KEEP_TILES_BYTES = 1 << 24


def _tiles_to_keep(xp, ctx, batch, L, S, causal, block, dtype):
    """Buffers for the forward's tiles (exp(s - m) and each row's m), or None."""
    if not any(ctx.needs_input_grad):
        return None
    blocks = list(_blocks(L, S, causal, block))
    size = math.prod(batch) * sum((L - r0) * (c1 - c0 + 1) for r0, c0, c1 in blocks)
    if size * dtype.itemsize > KEEP_TILES_BYTES:
        return None
    return [
        (xp.empty(batch + (L - r0, c1 - c0), dtype), xp.empty(batch + (L - r0, 1), dtype))
        for r0, c0, c1 in blocks
    ]


def _block_forward_chunk(xp, q, k, v, bias, acc, lse, tiles, scale, causal, block):
    # acc and lse: this chunk's slices of the output and of each row's logsumexp; tiles: None
    # or, per tile, its buffers (exp(s - m), m). The first tile (keys from 0) has every row: it
    # sets acc, total and m instead of updating them.
    L, S = q.shape[-2], k.shape[-2]
    dtype = q.dtype
    q = _scaled_over(xp, q, scale, lse.shape[:-2])
    m = xp.full(lse.shape, -math.inf, dtype)
    total = xp.zeros(lse.shape, dtype)
    if S == 0:
        acc[...] = 0
    for i, (r0, c0, c1) in enumerate(_blocks(L, S, causal, block)):
        keep = tiles[i] if tiles else (None, None)
        s = xp.matmul(q[..., r0:, :], _swap(k[..., c0:c1, :]), out=keep[0])
        b = _block_bias(bias, r0, c0, c1)
        if b is not None:
            s = _add_bias(xp, s, b)
        if causal:
            _hide_future(xp, s, r0, c0, c1, L)
        m_old = m[..., r0:, :]
        m_new = s.max(axis=-1, keepdims=True, out=keep[1])
        if c0:
            xp.maximum(m_old, m_new, out=m_new)
        m_new[xp.isneginf(m_new)] = 0
        s -= m_new
        xp.exp(s, out=s)
        if keep[0] is not None and s is not keep[0]:  # a bias that did not add in place
            keep[0][...] = s
        if not c0:
            s.sum(axis=-1, keepdims=True, out=total)
            xp.matmul(s, v[..., c0:c1, :], out=acc)
            m[...] = m_new
            continue
        alpha = m_old - m_new
        xp.exp(alpha, out=alpha)
        t = total[..., r0:, :]
        t *= alpha
        t += s.sum(axis=-1, keepdims=True)
        a = acc[..., r0:, :]
        a *= alpha
        a += xp.matmul(s, v[..., c0:c1, :])
        m[..., r0:, :] = m_new
    empty = total == 0  # a row that sees no key: output 0 (as PyTorch)
    total[empty] = 1
    acc /= total
    # Each row's logsumexp; +inf for an empty row, so its recomputed weights are exp(-inf) = 0.
    m[xp.isneginf(m)] = 0
    xp.log(total, out=lse)
    lse += m
    lse[empty] = math.inf


def _block_backward(ctx, lay, gy, out, need):
    xp = ctx.xp
    q, lse, block = lay.q, ctx.lse, ctx.block
    grads = _grad_buffers(xp, lse.shape[:-2], lay, need, xp.zeros)
    arrays = (q, lay.k, lay.v, ctx.bias, lse, gy, out, *grads, ctx.tiles)
    args = (ctx.scale, ctx.is_causal, block)
    _in_chunks(xp, lse.shape[:-2], q, lay.k.shape[-2], block, _block_backward_chunk, arrays, *args)
    return _merged(lay, grads, ctx.scale)


def _block_backward_chunk(
    xp, q, k, v, bias, lse, gy, out, gq, gk, gv, gm, tiles, scale, causal, block
):
    # The gradients' slices of this chunk are written in place (gq and gk before the scale):
    # gq by the first tile (every row) and then added to, gk and gv per tile, the keys no
    # query sees set to 0; gm (zeros) on the tiles. Each tile's weights are the forward's kept
    # ones rescaled, exp(s - m) * exp(m - lse), or recomputed from q and k.
    L, S = q.shape[-2], k.shape[-2]
    qs = None if tiles else _scaled_over(xp, q, scale, lse.shape[:-2])  # the forward's scores
    delta = (gy * out).sum(axis=-1, keepdims=True)
    seen = 0  # the keys [0, seen) are some query's
    for i, (r0, c0, c1) in enumerate(_blocks(L, S, causal, block)):
        seen = c1
        qr = q[..., r0:, :]
        kb = k[..., c0:c1, :]
        if tiles:
            f = tiles[i][1] - lse[..., r0:, :]
            p = xp.multiply(tiles[i][0], xp.exp(f, out=f))  # the kept tile stays as it is
        else:
            p = xp.matmul(qs[..., r0:, :], _swap(kb))
            b = _block_bias(bias, r0, c0, c1)
            if b is not None:
                p = _add_bias(xp, p, b)
            if causal:
                _hide_future(xp, p, r0, c0, c1, L)
            p -= lse[..., r0:, :]
            xp.exp(p, out=p)
        g = gy[..., r0:, :]
        if gv is not None:
            xp.matmul(_swap(p), g, out=gv[..., c0:c1, :])
        if gq is None and gk is None and gm is None:
            continue
        ds = xp.matmul(g, _swap(v[..., c0:c1, :]))
        ds -= delta[..., r0:, :]
        ds *= p  # the scores' gradient
        if gm is not None:
            gm[..., r0:, c0:c1] = ds
        if gq is not None and c0:
            gq[..., r0:, :] += xp.matmul(ds, kb)
        elif gq is not None:
            xp.matmul(ds, kb, out=gq)
        if gk is not None:
            xp.matmul(_swap(ds), qr, out=gk[..., c0:c1, :])
    for g in (gk, gv):
        if g is not None:
            g[..., seen:, :] = 0
    if gq is not None and not seen:
        gq[...] = 0


def _differentiable_backward(ctx, gy):
    """The gradients of ``backward`` from public ferro ops (recomputing the weights from the
    saved q, k, v and mask), so that a second derivative flows through them."""
    from ferro import ops
    from ferro.backend import xp_of

    saved = ctx.saved
    q, k, v = saved[:3]
    mask = saved[4] if ctx.has_mask else None
    drop = saved[-1] if ctx.has_drop else None
    groups, scale = ctx.groups, ctx.scale
    L, S = q.shape[-2], k.shape[-2]
    xp = xp_of(q._data)
    if groups > 1:  # one key head per group of query heads, as in the forward's layout
        k = ops.unsqueeze(k, -3)
        v = ops.unsqueeze(v, -3)
        q = _split_heads(ops, q, groups)
        gy = _split_heads(ops, gy, groups)
        if mask is not None and mask.ndim >= 3:
            if mask.shape[-3] > 1:
                mask = _split_heads(ops, mask, groups)
            else:
                mask = ops.unsqueeze(mask, -3)
    s = ops.matmul(q, k.transpose(-1, -2)) * scale
    keep = None
    if mask is not None and mask.dtype.kind == "f":
        s = s + mask
    elif mask is not None:
        keep = mask._data
    if ctx.is_causal:
        c = _causal_keep(xp, L, S)
        keep = c if keep is None else keep & c
    # Hidden scores as the dtype's lowest value, so a row that sees nothing stays finite;
    # such rows get weight 0 from ``seen``, as in the forward.
    finite = xp.isfinite(s._data)
    if keep is not None:
        finite = finite & keep
    s = ops.where(_tensor(finite), s, float(xp.finfo(s.dtype).min))
    seen = _tensor(finite.any(axis=-1, keepdims=True).astype(s.dtype))
    p = ops.softmax(s, dim=-1) * seen
    pd = p if drop is None else p * drop
    dp = ops.matmul(gy, v.transpose(-1, -2))
    if drop is not None:
        dp = dp * drop
    ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))
    gq = ops.matmul(ds, k) * scale
    gk = ops.matmul(ds.transpose(-1, -2), q) * scale
    gv = ops.matmul(pd.transpose(-1, -2), gy)
    if groups > 1:
        gq = _merge_heads(gq)
        gk, gv = gk.sum(dim=-3), gv.sum(dim=-3)
        ds = _merge_heads(ds)
    grads = (gq, gk, gv)
    if ctx.has_mask:
        grads += (ds if mask.dtype.kind == "f" else None,)
    inputs = saved[:3] + saved[4:5]
    return tuple(
        None if g is None else _reduce_to(g, x.shape) for g, x in zip(grads, inputs, strict=True)
    )


def _reduce_to(t, shape):
    # sum_to_shape with ferro ops (differentiable).
    shape = tuple(shape)
    lead = t.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and t.shape[lead + i] != 1
    )
    if axes:
        t = t.sum(dim=axes, keepdim=True)
    return t.reshape(shape) if lead or tuple(t.shape) != shape else t


@register("scaled_dot_product_attention", same_dtype=False)
class ScaledDotProductAttention:
    @staticmethod
    def forward(ctx, q, k, v, *mask, is_causal, scale, dropout_p, groups, block):
        xp = ctx.xp
        mask = mask[0] if mask else None
        lay = _Layout(q, k, v, mask, groups)
        # The blockwise path hides the future per tile: its bias is the user's mask only.
        bias = _bias(xp, lay.mask, is_causal and not block, q.shape[-2], k.shape[-2], q.dtype)
        ctx.is_causal, ctx.scale, ctx.groups, ctx.block = is_causal, scale, groups, block
        ctx.dropout_p = dropout_p
        if block:
            out = _block_forward(ctx, lay, bias, scale, is_causal, block)
            ctx.bias = bias
            drop = None
        else:
            out, drop = _dense_forward(ctx, lay, bias, scale, dropout_p)
        out = lay.grad_q(out)
        ctx.save(q, k, v, out, *([] if mask is None else [mask]), *([] if drop is None else [drop]))
        ctx.has_mask, ctx.has_drop = mask is not None, drop is not None
        return out

    @staticmethod
    def backward(ctx, gy):
        saved = ctx.saved
        q, k, v, out = saved[:4]
        mask = saved[4] if ctx.has_mask else None
        drop = saved[-1] if ctx.has_drop else None
        need = tuple(ctx.needs_input_grad) + (False,)
        need = need[:3] + (ctx.has_mask and need[3] and mask.dtype.kind == "f",)
        lay = _Layout(q, k, v, mask, ctx.groups)
        gy, out = lay.like_q(gy), lay.like_q(out)
        if ctx.block:
            grads = _block_backward(ctx, lay, gy, out, need)
        else:
            grads = _dense_backward(ctx, lay, gy, out, drop, need)
        # The batch dimensions broadcast: each gradient is summed back to its input's shape.
        inputs = saved[:3] + ((mask,) if ctx.has_mask else ())
        return tuple(
            None if g is None else sum_to_shape(g, x.shape)
            for g, x in zip(grads[: len(inputs)], inputs, strict=True)
        )

    differentiable_backward = staticmethod(_differentiable_backward)


def _tensor(arr):
    return wrap(arr)


def _split_heads(ops, t, groups):
    shape = tuple(t.shape)
    return ops.reshape(t, shape[:-3] + (shape[-3] // groups, groups) + shape[-2:])


def _merge_heads(t):
    shape = tuple(t.shape)
    return t.reshape(shape[:-4] + (shape[-4] * shape[-3],) + shape[-2:])


def _shape(t):
    return tuple(t.shape)


def _check_inputs(query, key, value, attn_mask, enable_gqa):
    op = "scaled_dot_product_attention"
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, TensorBase):
            raise ArgumentTypeError(f"{op}: {name} must be a Tensor, got {type(t).__name__}")
        if t.ndim < 2:
            raise ShapeError(f"{op}: {name} must have at least 2 dimensions, got {_shape(t)}")
    dtypes = {query.dtype, key.dtype, value.dtype}
    if len(dtypes) != 1 or query.dtype.kind != "f":
        raise DtypeError(
            f"{op}: query, key and value must have one float dtype, got {query.dtype}, "
            f"{key.dtype} and {value.dtype}"
        )
    if query.shape[-1] != key.shape[-1]:
        raise ShapeError(
            f"{op}: query {_shape(query)} and key {_shape(key)} differ in the last (embedding) "
            "dimension"
        )
    if key.shape[-2] != value.shape[-2]:
        raise ShapeError(
            f"{op}: key {_shape(key)} and value {_shape(value)} differ in the sequence "
            "dimension (-2)"
        )
    groups = 1
    if enable_gqa and query.ndim >= 3 and key.ndim >= 3 and value.ndim >= 3:
        hq, hk, hv = query.shape[-3], key.shape[-3], value.shape[-3]
        if hq != hk or hq != hv:
            if hk != hv or hq % hk:
                raise ShapeError(
                    f"{op}: with enable_gqa the number of query heads ({hq}) must be a multiple "
                    f"of the key and value heads, which must agree: query {_shape(query)}, key "
                    f"{_shape(key)}, value {_shape(value)}"
                )
            groups = hq // hk
    L, S = query.shape[-2], key.shape[-2]
    qb = query.shape[:-2]
    if groups > 1:
        qb = qb[:-1] + (key.shape[-3],)
    batch = _broadcast((qb, key.shape[:-2], value.shape[:-2]))
    if batch is None:
        raise ShapeError(
            f"{op}: the batch dimensions of query {_shape(query)}, key {_shape(key)} and value "
            f"{_shape(value)} do not broadcast"
        )
    if groups > 1:
        batch = batch[:-1] + (query.shape[-3],)
    if attn_mask is not None:
        kind = getattr(getattr(attn_mask, "dtype", None), "kind", None)
        if kind not in ("b", "f") or (kind == "f" and attn_mask.dtype != query.dtype):
            raise DtypeError(
                f"{op}: attn_mask must be bool or of the query's dtype {query.dtype}, got "
                f"{getattr(attn_mask, 'dtype', type(attn_mask).__name__)}"
            )
        mshape = tuple(attn_mask.shape)
        full = _broadcast((batch + (L, S), mshape))
        if full is None or full[-2:] != (L, S) or len(mshape) > len(batch) + 2:
            raise ShapeError(
                f"{op}: attn_mask of shape {mshape} does not broadcast to the attention "
                f"weights' shape {batch + (L, S)} (query {_shape(query)}, key {_shape(key)})"
            )
        if groups > 1 and len(mshape) >= 3 and mshape[-3] not in (1, query.shape[-3]):
            raise ShapeError(
                f"{op}: attn_mask of shape {mshape} does not broadcast over the "
                f"{query.shape[-3]} query heads"
            )
    return groups


def _broadcast(shapes):
    n = max(len(s) for s in shapes)
    out = []
    for i in range(n):
        sizes = {s[len(s) - n + i] for s in shapes if len(s) - n + i >= 0} - {1}
        if len(sizes) > 1:
            return None
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _mask_operand(attn_mask, query):
    if isinstance(attn_mask, TensorBase):
        return attn_mask
    # A raw array the user holds: the engine cannot see it change, so the op keeps a copy.
    from ferro.ops.shape import _index_operand

    return _index_operand(attn_mask, query, "scaled_dot_product_attention", kinds="bf")[0]


def _sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, block):
    groups = _check_inputs(query, key, value, attn_mask, enable_gqa)
    op = "scaled_dot_product_attention"
    dropout_p = real_arg(dropout_p, "dropout_p", op)
    if not 0.0 <= dropout_p <= 1.0:
        raise ArgumentError(f"{op}: dropout_p must be in [0, 1], got {dropout_p}")
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1]) if query.shape[-1] else 1.0
    scale = real_arg(scale, "scale", op)
    if not isinstance(is_causal, (bool, numbers.Integral)):
        raise ArgumentTypeError(f"{op}: is_causal must be a bool, got {type(is_causal).__name__}")
    if block is None:
        block = BLOCK if key.shape[-2] > DENSE_MAX_KEYS and dropout_p == 0.0 else 0
    elif dropout_p:
        block = 0  # dropout needs the whole weights: dense path
    mask = () if attn_mask is None else (_mask_operand(attn_mask, query),)
    return apply(
        ScaledDotProductAttention,
        query,
        key,
        value,
        *mask,
        is_causal=bool(is_causal),
        scale=scale,
        dropout_p=dropout_p,
        groups=groups,
        block=block,
    )


def scaled_dot_product_attention(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
):
    """``softmax(query @ key^T * scale + mask) @ value``, PyTorch's
    ``F.scaled_dot_product_attention``.

    Shapes: query (..., L, E), key (..., S, E), value (..., S, Ev) -> (..., L, Ev), the batch
    dimensions broadcast. ``attn_mask`` broadcasts to (..., L, S): bool (True = attend) or of
    the query's dtype (added to the scores; differentiable). ``is_causal``: query i sees keys
    j <= i (top-left aligned; combined with ``attn_mask`` when both are given). ``scale``
    defaults to ``1/sqrt(E)``. ``enable_gqa``: key and value may have fewer heads (dim -3)
    than the query, each serving a group of consecutive query heads. ``dropout_p`` drops
    attention weights (always, as PyTorch's functional does: pass 0 in eval). A row that sees
    no key gives 0. Long key sequences (more than ``DENSE_MAX_KEYS``) run blockwise with an
    online softmax, keeping only each row's logsumexp (see the module docstring).

    Gradient: with P the weights, O the output: gv = P^T gy, dS = P * (gy v^T - rowsum(gy * O)),
    gq = dS k * scale, gk = dS^T q * scale, gmask = dS.

    Example:
        >>> q = ferro.randn(2, 4, 8, 16)
        >>> ferro.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).shape
        ferro.Size([2, 4, 8, 16])
    """
    return _sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, None)


# The family's public functions (ferro.ops exports their union): a new op's name goes here.
__all__ = [
    "scaled_dot_product_attention",
]
