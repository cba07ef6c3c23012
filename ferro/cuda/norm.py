"""The GPU normalization kernels: launch wrappers for ``kernels/norm.cu`` (CuPy arrays in, CuPy
arrays out), under the names and signatures of ``ferro._C.norm_kernels`` (the same state: the
output, and each statistic's mean and rstd in the input's dtype), so the adapters of
``ferro/ops/norm.py`` bind either backend. One block per row (layer, RMS, group norm) or per
channel (batch norm); statistics in two passes. Nothing here imports CuPy until a kernel runs.
"""

from __future__ import annotations

import numpy as np

from ferro.cuda.loader import ctype, kernel, row_block
from ferro.errors import ArgumentError, DtypeError, ShapeError

FUSED_KERNELS = frozenset(
    {
        "layer_norm_fwd",
        "layer_norm_bwd",
        "rms_norm_fwd",
        "rms_norm_bwd",
        "group_norm_fwd",
        "group_norm_bwd",
        "batch_norm_fwd",
        "batch_norm_bwd",
    }
)

_FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def accepts(arrays: tuple) -> bool:
    """True if every array that is not None is C-contiguous, float32/float64, all of one dtype
    (their shapes may differ: an input and its parameters)."""
    dtype = None
    for a in arrays:
        if a is None:
            continue
        dtype = dtype or a.dtype
        if a.dtype not in _FLOAT_DTYPES or a.dtype != dtype or not a.flags.c_contiguous:
            return False
    return dtype is not None


def accepts_grad(gy, arrays: tuple) -> bool:
    """True if ``accepts(arrays)`` and ``gy`` is C-contiguous of the first array's dtype and
    shape (the adapters make any other upstream gradient contiguous first)."""
    return (
        accepts(arrays)
        and gy.dtype == arrays[0].dtype
        and gy.shape == arrays[0].shape
        and gy.flags.c_contiguous
    )


def _check(who: str, names: tuple, arrays: tuple, shapes: tuple) -> str:
    if accepts(arrays) and all(
        a is None or a.shape == s for a, s in zip(arrays, shapes, strict=True)
    ):
        return ctype(next(a for a in arrays if a is not None).dtype)
    dtype = None
    for name, a, s in zip(names, arrays, shapes, strict=True):
        if a is None:
            continue
        dtype = dtype or a.dtype
        if a.dtype not in _FLOAT_DTYPES or a.dtype != dtype:
            raise DtypeError(
                f"{who}: {name} must be float32 or float64 of one dtype, got {a.dtype}"
            )
        if a.shape != s:
            raise ShapeError(f"{who}: {name} has shape {a.shape}, expected {s}")
    raise ArgumentError(f"{who}: the kernel needs C-contiguous arrays")


def _opt(a, like):
    # An optional pointer argument: the array, or ``like`` (never read) with the flag 0.
    return (like, np.int32(0)) if a is None else (a, np.int32(1))


def _rows_fwd(x, weight, bias, eps, s, groups, centered, stat_shape):
    import cupy

    r, k = x.shape
    t = ctype(x.dtype)
    y = cupy.empty_like(x)
    rstd = cupy.empty(stat_shape, dtype=x.dtype)
    mean = cupy.empty(stat_shape, dtype=x.dtype) if centered else None
    var = cupy.empty(stat_shape, dtype=x.dtype) if centered else None
    (w, hw), (b, hb) = _opt(weight, x), _opt(bias, x)
    if r and k:
        kernel("norm", f"ferro_norm_rows_fwd<{t}>")(
            (r,),
            (row_block(k),),
            (x, w, b, y, x if mean is None else mean, rstd, x if var is None else var)
            + (np.int64(k), np.int64(s), np.int64(groups), np.int32(centered))
            + (np.float64(eps), hw, hb),
        )
    return (y, mean, rstd, var) if centered else (y, rstd)


def _rows_bwd(gy, x, weight, mean, rstd, s, groups, centered):
    import cupy

    r, k = x.shape
    t = ctype(x.dtype)
    gx = cupy.empty_like(x)
    w, hw = _opt(weight, x)
    if r and k:
        kernel("norm", f"ferro_norm_rows_bwd<{t}>")(
            (r,),
            (row_block(k),),
            (gy, x, w, x if mean is None else mean, rstd, gx)
            + (np.int64(k), np.int64(s), np.int64(groups), np.int32(centered), hw),
        )
    return gx


def _cols_bwd(gy, x, mean, rstd, centered):
    """Column sums of ``gy * xhat`` and ``gy``: ``ferro_norm_cols_bwd`` sums blocks of rows into
    double partial rows (32 columns by at most ``rows_per`` rows a block), then the partial rows
    are added in order (a fixed order: deterministic)."""
    import cupy

    r, k = x.shape
    if not (r and k):
        return cupy.zeros(k, dtype=x.dtype), cupy.zeros(k, dtype=x.dtype)
    # About 64 rows a block, at most 65535 blocks down and 2**21 partial values each.
    rows_per = max(64, -(-r // 65535), -(-r // max(1, (1 << 21) // k)))
    parts = -(-r // rows_per)
    part_w = cupy.empty((parts, k), dtype=np.float64)
    part_b = cupy.empty((parts, k), dtype=np.float64)
    kernel("norm", f"ferro_norm_cols_bwd<{ctype(x.dtype)}>")(
        (-(-k // 32), parts),
        (32, 8),
        (gy, x, x if mean is None else mean, rstd, part_w, part_b)
        + (np.int64(r), np.int64(k), np.int64(rows_per), np.int32(centered)),
    )
    return part_w.sum(axis=0).astype(x.dtype), part_b.sum(axis=0).astype(x.dtype)


def _two_d(who: str, x) -> tuple:
    if x.ndim != 2:
        raise ShapeError(f"{who}: x must be 2-D (rows, values), got shape {x.shape}")
    return x.shape


def layer_norm_fwd(x, weight, bias, eps):
    """Layer norm of each row of ``x`` (R, K): ``(y, mean, rstd, var)``, statistics (R, 1)."""
    r, k = _two_d("layer_norm_fwd", x)
    _check("layer_norm_fwd", ("x", "weight", "bias"), (x, weight, bias), (x.shape, (k,), (k,)))
    return _rows_fwd(x, weight, bias, eps, 1, 1, True, (r, 1))


def layer_norm_bwd(gy, x, weight, mean, rstd, params):
    """Layer norm backward: ``(gx, gweight, gbias)`` (the last two None unless ``params``)."""
    r, k = _two_d("layer_norm_bwd", x)
    _check(
        "layer_norm_bwd",
        ("gy", "x", "weight", "mean", "rstd"),
        (gy, x, weight, mean, rstd),
        (x.shape, x.shape, (k,), (r, 1), (r, 1)),
    )
    gx = _rows_bwd(gy, x, weight, mean, rstd, 1, 1, True)
    gw, gb = _cols_bwd(gy, x, mean, rstd, True) if params else (None, None)
    return gx, gw, gb


def rms_norm_fwd(x, weight, eps):
    """RMS norm of each row of ``x`` (R, K): ``(y, rstd)``, rstd (R, 1)."""
    r, k = _two_d("rms_norm_fwd", x)
    _check("rms_norm_fwd", ("x", "weight"), (x, weight), (x.shape, (k,)))
    return _rows_fwd(x, weight, None, eps, 1, 1, False, (r, 1))


def rms_norm_bwd(gy, x, weight, rstd, params):
    """RMS norm backward: ``(gx, gweight)`` (gweight None unless ``params``)."""
    r, k = _two_d("rms_norm_bwd", x)
    _check(
        "rms_norm_bwd",
        ("gy", "x", "weight", "rstd"),
        (gy, x, weight, rstd),
        (x.shape, x.shape, (k,), (r, 1)),
    )
    gx = _rows_bwd(gy, x, weight, None, rstd, 1, 1, False)
    return gx, (_cols_bwd(gy, x, None, rstd, False)[0] if params else None)


def _groups(who: str, x, groups: int) -> tuple:
    if x.ndim != 3:
        raise ShapeError(f"{who}: x must be 3-D (N, C, S), got shape {x.shape}")
    n, c, s = x.shape
    if groups <= 0 or c % groups:
        raise ShapeError(f"{who}: {c} channels do not split into {groups} groups")
    return n, c, s


def group_norm_fwd(x, weight, bias, groups, eps):
    """Group norm of ``x`` (N, C, S): ``(y, mean, rstd, var)``, statistics (N, groups, 1)."""
    n, c, s = _groups("group_norm_fwd", x, groups)
    _check("group_norm_fwd", ("x", "weight", "bias"), (x, weight, bias), (x.shape, (c,), (c,)))
    rows = x.reshape(n * groups, (c // groups) * s)
    y, mean, rstd, var = _rows_fwd(rows, weight, bias, eps, s, groups, True, (n, groups, 1))
    return y.reshape(x.shape), mean, rstd, var


def group_norm_bwd(gy, x, weight, mean, rstd, groups, params):
    """Group norm backward: ``(gx, gweight, gbias)`` (the last two None unless ``params``)."""
    n, c, s = _groups("group_norm_bwd", x, groups)
    _check(
        "group_norm_bwd",
        ("gy", "x", "weight", "mean", "rstd"),
        (gy, x, weight, mean, rstd),
        (x.shape, x.shape, (c,), (n, groups, 1), (n, groups, 1)),
    )
    k = (c // groups) * s
    rows = (n * groups, k)
    gx = _rows_bwd(gy.reshape(rows), x.reshape(rows), weight, mean, rstd, s, groups, True)
    if not params:
        return gx.reshape(x.shape), None, None
    # Per-channel sums over (N, S): two reductions of CuPy expressions (C values each).
    xhat = ((x.reshape(n, groups, -1) - mean) * rstd).reshape(n, c, s)
    return gx.reshape(x.shape), (gy * xhat).sum(axis=(0, 2)), gy.sum(axis=(0, 2))


def _three_d(who: str, x) -> tuple:
    if x.ndim != 3:
        raise ShapeError(f"{who}: x must be 3-D (N, C, S), got shape {x.shape}")
    return x.shape


def batch_norm_fwd(x, weight, bias, eps):
    """Batch norm of ``x`` (N, C, S) with the batch's statistics: ``(y, mean, rstd, var)``,
    statistics (1, C, 1)."""
    import cupy

    n, c, s = _three_d("batch_norm_fwd", x)
    t = _check("batch_norm_fwd", ("x", "weight", "bias"), (x, weight, bias), (x.shape, (c,), (c,)))
    y = cupy.empty_like(x)
    mean, rstd, var = (cupy.empty((1, c, 1), dtype=x.dtype) for _ in range(3))
    (w, hw), (b, hb) = _opt(weight, x), _opt(bias, x)
    if c and n * s:
        kernel("norm", f"ferro_batch_norm_fwd<{t}>")(
            (c,),
            (row_block(n * s),),
            (x, w, b, y, mean, rstd, var, np.int64(n), np.int64(c), np.int64(s))
            + (np.float64(eps), hw, hb),
        )
    return y, mean, rstd, var


def batch_norm_bwd(gy, x, weight, mean, rstd):
    """Batch norm backward (training statistics): ``(gx, gweight, gbias)``."""
    import cupy

    n, c, s = _three_d("batch_norm_bwd", x)
    t = _check(
        "batch_norm_bwd",
        ("gy", "x", "weight", "mean", "rstd"),
        (gy, x, weight, mean, rstd),
        (x.shape, x.shape, (c,), (1, c, 1), (1, c, 1)),
    )
    gx = cupy.empty_like(x)
    gw = cupy.zeros(c, dtype=x.dtype)
    gb = cupy.zeros(c, dtype=x.dtype)
    w, hw = _opt(weight, x)
    if c and n * s:
        kernel("norm", f"ferro_batch_norm_bwd<{t}>")(
            (c,),
            (row_block(n * s),),
            (gy, x, w, mean, rstd, gx, gw, gb, np.int64(n), np.int64(c), np.int64(s), hw),
        )
    return gx, gw, gb
