"""The GPU kernels of the convolution family: launch wrappers for ``kernels/conv.cu`` (CuPy
arrays in, CuPy arrays out).

- The depthwise 2-d convolution, forward and backward, under the names and arguments of
  ``ferro._C.conv_kernels``, so the ``conv`` entry of ``ferro.ops.fused.OVERRIDES`` binds to
  either backend.
- :func:`im2col` and :func:`col2im` for 1-d to 3-d windows (vol2col), GPU only (the CPU builds
  its columns from strided views): the column builders of the GEMM path of
  ``ferro/ops/conv.py`` (Note [Convolution as three functions]) for ``conv`` (what the
  depthwise kernels do not take), ``conv_transpose``, ``unfold`` and ``fold``; the GEMMs stay
  ``matmul`` (cuBLAS), in the same workspace-bounded batch chunks as on the CPU.

:func:`accepts`/:func:`accepts_grad` read array flags only; each wrapper still checks what its
kernel assumes and raises a typed error for a direct caller. Nothing here imports CuPy until a
kernel runs. ``tests/cuda/test_conv_kernels.py`` runs the wrappers against the NumPy reference
on a device when there is one and everywhere on the CPU emulation.
"""

from __future__ import annotations

import math

import numpy as np

from ferro.cuda.loader import ctype, grid_for, kernel
from ferro.errors import ArgumentError, DtypeError, ShapeError

FUSED_KERNELS = frozenset(
    {"depthwise2d_fwd", "depthwise2d_bwd", "im2col", "col2im", "unfold_cols", "fold_cols"}
)

_FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_WEIGHT_BLOCK = 256  # threads per block of the weight-gradient reduction


def accepts(arrays: tuple) -> bool:
    """True if the kernels take ``arrays``: one float32/float64 dtype, C-contiguous (shapes may
    differ)."""
    if not arrays:
        return False
    a0 = arrays[0]
    if a0.dtype not in _FLOAT_DTYPES:
        return False
    return all(a.dtype == a0.dtype and a.flags.c_contiguous for a in arrays)


def accepts_grad(gy, arrays: tuple) -> bool:
    """True if the backward kernels take upstream gradient ``gy`` with the saved ``arrays``."""
    return accepts((gy, *arrays))


def _check(who: str, names: tuple, arrays: tuple) -> str:
    if not accepts(arrays):
        for name, a in zip(names, arrays, strict=True):
            if a.dtype not in _FLOAT_DTYPES or a.dtype != arrays[0].dtype:
                raise DtypeError(f"{who}: {name} must be float32 or float64 of one dtype")
        raise ArgumentError(f"{who}: the kernels need C-contiguous arrays")
    return ctype(arrays[0].dtype)


def _geometry(who: str, x, w, stride, pads, dilation, out):
    """The 15 int64 values the kernels read (see conv.cu), after checking them."""
    if x.ndim != 4 or w.ndim != 4 or w.shape[1] != 1 or w.shape[0] % max(x.shape[1], 1):
        raise ShapeError(
            f"{who}: expected x (N, C, H, W) and a depthwise weight (C * m, 1, kH, kW), got "
            f"{x.shape} and {w.shape}"
        )
    (sh, sw), ((ph, ph2), (pw, pw2)), (dh, dw), (oh, ow) = stride, pads, dilation, out
    n, c, h, wd = x.shape
    kh, kw = w.shape[2:]
    if (
        min(sh, sw, dh, dw) < 1
        or min(ph, pw) < 0
        or (ph, pw) != (ph2, pw2)
        or oh != (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
        or ow != (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
        or min(oh, ow) < 1
    ):
        raise ArgumentError(
            f"{who}: inconsistent geometry stride={stride} pads={pads} dilation={dilation} "
            f"out={out} for x {x.shape} and weight {w.shape}"
        )
    return (n, c, w.shape[0] // c, h, wd, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw)


def _device_geometry(values):
    import cupy

    return cupy.asarray(np.asarray(values, dtype=np.int64))


def depthwise2d_fwd(x, w, stride: tuple, pads: tuple, dilation: tuple, out: tuple):
    """Depthwise 2-d convolution ``y`` ``(N, C*m, oH, oW)`` of ``x`` ``(N, C, H, W)`` by ``w``
    ``(C*m, 1, kH, kW)``; ``pads`` ``((ph, ph), (pw, pw))``, ``out`` ``(oH, oW)``."""
    import cupy

    t = _check("depthwise2d_fwd", ("x", "weight"), (x, w))
    g = _geometry("depthwise2d_fwd", x, w, stride, pads, dilation, out)
    y = cupy.empty((x.shape[0], w.shape[0], *out), dtype=x.dtype)
    if y.size:
        grid, block = grid_for(y.size)
        kernel("conv", f"ferro_depthwise2d_fwd<{t}>")(grid, block, (x, w, y, _device_geometry(g)))
    return y


def depthwise2d_bwd(
    gy, x, w, stride: tuple, pads: tuple, dilation: tuple, need_x: bool, need_w: bool
):
    """``(gx, gw)`` of :func:`depthwise2d_fwd` from ``gy`` (None where not needed)."""
    import cupy

    t = _check("depthwise2d_bwd", ("gy", "x", "weight"), (gy, x, w))
    g = _geometry("depthwise2d_bwd", x, w, stride, pads, dilation, tuple(gy.shape[2:]))
    if gy.shape[:2] != (x.shape[0], w.shape[0]):
        raise ShapeError(f"depthwise2d_bwd: gy {gy.shape} does not fit x {x.shape}, w {w.shape}")
    geom = _device_geometry(g)
    gx = gw = None
    if need_x:
        gx = cupy.empty_like(x)
        if gx.size:
            grid, block = grid_for(gx.size)
            kernel("conv", f"ferro_depthwise2d_bwd_x<{t}>")(grid, block, (gy, w, gx, geom))
    if need_w:
        gw = cupy.zeros_like(w)
        if gw.size and gy.size:
            kernel("conv", f"ferro_depthwise2d_bwd_w<{t}>")(
                (gw.size,), (_WEIGHT_BLOCK,), (gy, x, gw, geom)
            )
    return gx, gw


def _cols_args(who, shape, kernel_size, stride, pads, dilation, out, batch_major) -> list:
    """The kernels' geometry arguments (see ``ferro_cols_geom``), each spatial tuple
    left-padded to three dimensions, after checking them."""
    nd = len(kernel_size)
    if not 1 <= nd <= 3 or len(shape) != nd + 2:
        raise ShapeError(f"{who}: {nd} spatial dimensions do not fit an input of shape {shape}")
    lo = tuple(p[0] for p in pads)
    args = list(shape[:2])
    for what, v, fill, low in (
        ("input size", shape[2:], 1, 1),
        ("out", out, 1, 1),
        ("kernel_size", kernel_size, 1, 1),
        ("stride", stride, 1, 1),
        ("padding", lo, 0, 0),
        ("dilation", dilation, 1, 1),
    ):
        v = tuple(v)
        if len(v) != nd or any(e < low for e in v):
            raise ArgumentError(f"{who}: {what} must be {nd} ints >= {low}, got {v}")
        args += (fill,) * (3 - nd) + v
    return [np.int64(a) for a in args] + [np.int32(bool(batch_major))]


def _col_shape(n, c, kernel, out, batch_major):
    k, ell = c * math.prod(kernel), math.prod(out)
    return (n, k, ell) if batch_major else (k, n * ell)


def unfold_cols(x, kernel_size, stride, pads, dilation, out, cols=None, batch_major=True):
    """The columns of ``x`` ``(n, C, *size)`` (1 to 3 spatial dims) for windows ``kernel_size`` at
    ``stride``, ``dilation``, zero padding ``pads`` (one ``(lo, hi)`` per dim; the ends follow
    from ``out``): ``batch_major`` ``(n, C*prod(kernel_size), prod(out))``, as ``unfold``
    returns them, or channel-major ``(C*prod(kernel_size), n*prod(out))``, rows ``(c, *k)`` and
    columns ``(b, *l)``, as the GEMM path multiplies them. Written into ``cols`` where given
    (C-contiguous, writeable, ``x``'s dtype and that many elements), else a new array."""
    import cupy

    who = "unfold_cols"
    t = _check(who, ("x",), (x,))
    args = _cols_args(who, x.shape, kernel_size, stride, pads, dilation, out, batch_major)
    want = _col_shape(*x.shape[:2], kernel_size, out, batch_major)
    if cols is None:
        cols = cupy.empty(want, dtype=x.dtype)
    else:
        _check(who, ("x", "cols"), (x, cols))
        if not getattr(cols.flags, "writeable", True) or cols.size != math.prod(want):
            raise ShapeError(f"{who}: cols of shape {cols.shape} (writeable) must hold {want}")
    if cols.size:
        grid, block = grid_for(cols.size)
        kernel("conv", f"ferro_im2col<{t}>")(grid, block, (x, cols, *args))
    return cols


def fold_cols(cols, x, kernel_size, stride, pads, dilation, out, batch_major=True):
    """The adjoint of :func:`unfold_cols`: the columns ``cols`` (either layout, C-contiguous)
    summed into ``x`` ``(n, C, *size)``, which it overwrites (C-contiguous, writeable,
    ``cols``'s dtype) and returns; overlapping windows add up."""
    who = "fold_cols"
    t = _check(who, ("cols", "x"), (cols, x))
    if not getattr(x.flags, "writeable", True):
        raise ArgumentError(f"{who}: the output x is read-only")
    args = _cols_args(who, x.shape, kernel_size, stride, pads, dilation, out, batch_major)
    want = _col_shape(*x.shape[:2], kernel_size, out, batch_major)
    if cols.size != math.prod(want):
        raise ShapeError(f"{who}: cols of shape {cols.shape} do not fit {want} for x {x.shape}")
    if x.size:
        grid, block = grid_for(x.size)
        kernel("conv", f"ferro_col2im<{t}>")(grid, block, (cols, x, *args))
    return x


def _channel_major_geometry(who, x, col):
    """``(kernel, out)`` of a channel-major column array ``(C, *kernel, N, *out)`` for ``x``."""
    nd = x.ndim - 2
    if col.ndim != 2 * nd + 2 or col.shape[0] != x.shape[1] or col.shape[nd + 1] != x.shape[0]:
        raise ShapeError(f"{who}: columns of shape {col.shape} do not fit an array {x.shape}")
    return col.shape[1 : nd + 1], col.shape[nd + 2 :]


def im2col(x, stride, pads, dilation, col):
    """The CPU backend's ``im2col`` (``ferro._C.conv_kernels``), so the GEMM path takes either:
    the columns of ``x`` ``(N, C, *size)`` written into ``col`` ``(C, *kernel, N, *out)``;
    returns ``col``."""
    kernel_size, out = _channel_major_geometry("im2col", x, col)
    return unfold_cols(x, kernel_size, stride, pads, dilation, out, col, batch_major=False)


def col2im(col, stride, pads, dilation, gx):
    """The CPU backend's ``col2im``: ``gx`` ``(N, C, *size)`` set to the sum of the columns
    ``col`` ``(C, *kernel, N, *out)`` at the input positions they were read from; returns
    ``gx``."""
    kernel_size, out = _channel_major_geometry("col2im", gx, col)
    return fold_cols(col, gx, kernel_size, stride, pads, dilation, out, batch_major=False)


__all__ = [
    "FUSED_KERNELS",
    "accepts",
    "accepts_grad",
    "col2im",
    "depthwise2d_bwd",
    "depthwise2d_fwd",
    "fold_cols",
    "im2col",
    "unfold_cols",
]
