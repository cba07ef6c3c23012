"""GPU kernels of the resampling family (CuPy arrays in, CuPy arrays out): interpolate's
separable resampling, grid_sample, and deformable convolution's bilinear sampling (the last
under the names and signatures of ``ferro._C.resampling_kernels``).

``resample_axis`` resamples one axis by a table of taps (index and weight per output), which
``interpolate``'s GPU override builds from the op's own PyTorch formulas for every mode; its
backward runs the same kernel with the transpose's taps (a gather: no atomics).
``grid_sample_fwd``/``grid_sample_bwd`` sample 4-D and 5-D inputs bilinearly (trilinearly) or at
the nearest point with zeros/border/reflection padding; backward scatters the input's gradient
with atomics and writes the grid's per point.

``deform_im2col`` builds ``deform_conv2d``'s column matrix; ``deform_col2im`` runs its
transpose: the input's gradient (atomics into zeros: any column may read any pixel), and the
offsets' and mask's (one thread per offset pair, summing the group's channels). The sources are
``kernels/resampling.cu``. Nothing here imports CuPy until a kernel runs; the tests run the
wrappers and kernels on a device and on the CPU emulation (``tests/cuda``).
"""

from __future__ import annotations

import numpy as np

from ferro.backend import alert_nondeterministic
from ferro.cuda.loader import ctype, grid_for, kernel
from ferro.errors import ArgumentError, DtypeError, ShapeError

#: The kernels this module implements (``ferro._C.resampling_kernels`` has the same names).
FUSED_KERNELS = frozenset(
    {"deform_col2im", "deform_im2col", "grid_sample_bwd", "grid_sample_fwd", "resample_axis"}
)

_FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def accepts(arrays: tuple) -> bool:
    """True if every array is float32/float64, all of one dtype, C-contiguous (shapes may
    differ: the kernels check them)."""
    if not arrays or arrays[0].dtype not in _FLOAT_DTYPES:
        return False
    return all(a.dtype == arrays[0].dtype and a.flags.c_contiguous for a in arrays)


def accepts_grad(gy, arrays: tuple) -> bool:
    """True if the backward kernels take ``gy`` with ``arrays`` (:func:`accepts` of all)."""
    return accepts((gy, *arrays))


def _geometry(who, x, offset, mask, kernel_size, stride, padding, dilation):
    """The 15 int64 the kernels read (see ``ferro_deform_geom``), after the shape checks."""
    arrays = (x, offset) if mask is None else (x, offset, mask)
    if not accepts(arrays):
        raise DtypeError(f"{who}: arrays must be C-contiguous float32 or float64 of one dtype")
    if x.ndim != 4 or offset.ndim != 4:
        raise ShapeError(f"{who}: x and offset must be 4-D, got {x.shape} and {offset.shape}")
    nb, cin, h, w = x.shape
    kh, kw = kernel_size
    k = kh * kw
    if offset.shape[0] != nb or offset.shape[1] % (2 * k) or offset.shape[1] == 0:
        raise ShapeError(f"{who}: offset of shape {offset.shape} does not fit input {x.shape}")
    og = offset.shape[1] // (2 * k)
    ho, wo = offset.shape[2:]
    if cin % og:
        raise ShapeError(f"{who}: {cin} input channels are not divisible by {og} offset groups")
    if mask is not None and mask.shape != (nb, og * k, ho, wo):
        raise ShapeError(f"{who}: mask must have shape {(nb, og * k, ho, wo)}, got {mask.shape}")
    return (nb, cin, h, w, og, kh, kw, *stride, *padding, *dilation, ho, wo)


def _device_geometry(geom):
    import cupy

    return cupy.asarray(np.array(geom, dtype=np.int64))


def deform_im2col(x, offset, mask, kernel_size, stride, padding, dilation):
    """The column matrix (nb, cin*kh*kw, ho*wo) of ``deform_conv2d`` (see the CPU kernel)."""
    import cupy

    geom = _geometry("deform_im2col", x, offset, mask, kernel_size, stride, padding, dilation)
    nb, cin, _, _, _, kh, kw = geom[:7]
    ho, wo = geom[13:]
    cols = cupy.empty((nb, cin * kh * kw, ho * wo), dtype=x.dtype)
    grid, block = grid_for(cols.size)
    t = ctype(x.dtype)
    has_mask = np.int32(mask is not None)
    args = (x, offset, x if mask is None else mask, cols, _device_geometry(geom), has_mask)
    kernel("resampling", f"ferro_deform_im2col<{t}>")(grid, block, args)
    return cols


def deform_col2im(
    x,
    offset,
    mask,
    gcols,
    kernel_size,
    stride,
    padding,
    dilation,
    need_x=True,
    need_offset=True,
    need_mask=True,
):
    """``(gx, goffset, gmask)`` for the upstream ``gcols`` of :func:`deform_im2col`, each None
    where not needed (``gmask`` always None without a mask)."""
    import cupy

    geom = _geometry("deform_col2im", x, offset, mask, kernel_size, stride, padding, dilation)
    nb, cin, _, _, og, kh, kw = geom[:7]
    ho, wo = geom[13:]
    if gcols.shape != (nb, cin * kh * kw, ho * wo) or not accepts((x, gcols)):
        raise ShapeError(
            f"deform_col2im: gcols must be C-contiguous of shape {(nb, cin * kh * kw, ho * wo)} "
            f"and dtype {x.dtype}, got {gcols.shape} ({gcols.dtype})"
        )
    t = ctype(x.dtype)
    dgeom = _device_geometry(geom)
    has_mask = np.int32(mask is not None)
    m = x if mask is None else mask
    gx = goff = gmask = None
    if need_x:
        alert_nondeterministic("deform_conv2d backward")  # atomics into gx
        gx = cupy.zeros(x.shape, dtype=x.dtype)
        grid, block = grid_for(gcols.size)
        args = (offset, m, gcols, gx, dgeom, has_mask)
        kernel("resampling", f"ferro_deform_col2im_input<{t}>")(grid, block, args)
    want = int(bool(need_offset)) | (2 if need_mask and mask is not None else 0)
    if want:
        goff = cupy.empty(offset.shape, dtype=x.dtype) if need_offset else None
        gmask = cupy.empty(mask.shape, dtype=x.dtype) if want & 2 else None
        grid, block = grid_for(nb * og * kh * kw * ho * wo)
        args = (
            x,
            offset,
            m,
            gcols,
            x if goff is None else goff,
            x if gmask is None else gmask,
            dgeom,
            has_mask,
            np.int32(want),
        )
        kernel("resampling", f"ferro_deform_col2im_coord<{t}>")(grid, block, args)
    return gx, goff, gmask


def resample_axis(x, axis, index, weight):
    """``x`` with axis ``axis`` resampled by the taps ``index`` (int64) and ``weight`` (x's
    dtype), each (taps, n_out): ``y[..., j, ...] = sum_k weight[k, j] * x[..., index[k, j], ...]``.
    An index outside the axis gives NaN (the kernel does not read out of bounds)."""
    import cupy

    who = "resample_axis"
    if not accepts((x, weight)):
        raise DtypeError(
            f"{who}: x and weight must be C-contiguous float32 or float64 of one dtype, got "
            f"{x.dtype} and {weight.dtype}"
        )
    if index.dtype != np.int64 or not index.flags.c_contiguous:
        raise DtypeError(f"{who}: index must be C-contiguous int64, got {index.dtype}")
    if not 0 <= axis < x.ndim:
        raise ArgumentError(f"{who}: axis {axis} is out of range for x of shape {x.shape}")
    if index.ndim != 2 or weight.shape != index.shape or index.shape[0] == 0:
        raise ShapeError(
            f"{who}: index and weight must both be (taps >= 1, n_out), got {index.shape} and "
            f"{weight.shape}"
        )
    taps, n_out = index.shape
    shape = x.shape
    y = cupy.empty(shape[:axis] + (n_out,) + shape[axis + 1 :], dtype=x.dtype)
    if y.size:
        grid, block = grid_for(y.size)
        sizes = (int(np.prod(shape[:axis])), shape[axis], n_out, int(np.prod(shape[axis + 1 :])))
        args = (x, index, weight, y, *(np.int64(v) for v in sizes), np.int64(taps))
        kernel("resampling", f"ferro_resample_axis<{ctype(x.dtype)}>")(grid, block, args)
    return y


_GRID_MODES = {"bilinear": 0, "nearest": 1}
_PADDING_MODES = {"zeros": 0, "border": 1, "reflection": 2}


def _grid_args(who, x, grid, mode, padding_mode, align_corners):
    """The kernels' scalar arguments after the checks: nb, c, P, three sizes, the modes."""
    if not accepts((x, grid)):
        raise DtypeError(
            f"{who}: x and grid must be C-contiguous float32 or float64 of one dtype, got "
            f"{x.dtype} and {grid.dtype}"
        )
    d = x.ndim - 2
    if d not in (2, 3) or grid.ndim != x.ndim or grid.shape[-1] != d or grid.shape[0] != x.shape[0]:
        raise ShapeError(
            f"{who}: x must be 4-D or 5-D and grid (N, *out, {d}) with N = {x.shape[0]}, got "
            f"{x.shape} and {grid.shape}"
        )
    if mode not in _GRID_MODES or padding_mode not in _PADDING_MODES:
        raise ArgumentError(
            f"{who}: mode must be one of {tuple(_GRID_MODES)} and padding_mode one of "
            f"{tuple(_PADDING_MODES)}, got {mode!r} and {padding_mode!r}"
        )
    sizes = tuple(x.shape[2:]) + (1,) * (3 - d)  # the kernel reads the first d
    p = int(np.prod(grid.shape[1:-1]))
    return (
        *(np.int64(v) for v in (x.shape[0], x.shape[1], p, *sizes)),
        np.int32(_GRID_MODES[mode]),
        np.int32(_PADDING_MODES[padding_mode]),
        np.int32(bool(align_corners)),
    )


def grid_sample_fwd(x, grid, mode, padding_mode, align_corners):
    """``x`` (N, C, *sizes) sampled at ``grid`` (N, *out, d), as ``F.grid_sample``: (N, C, *out)."""
    import cupy

    args = _grid_args("grid_sample_fwd", x, grid, mode, padding_mode, align_corners)
    d = x.ndim - 2
    y = cupy.empty(x.shape[:2] + grid.shape[1:-1], dtype=x.dtype)
    if y.size:
        blocks, threads = grid_for(int(args[0] * args[2]))
        name = f"ferro_grid_sample_fwd<{ctype(x.dtype)}, {d}>"
        kernel("resampling", name)(blocks, threads, (x, grid, y, *args))
    return y


def grid_sample_bwd(gy, x, grid, mode, padding_mode, align_corners, need_x=True, need_grid=True):
    """``(gx, ggrid)`` of :func:`grid_sample_fwd` for the upstream ``gy`` (N, C, *out), each None
    where not needed (``ggrid`` is zeros for ``nearest``)."""
    import cupy

    who = "grid_sample_bwd"
    args = _grid_args(who, x, grid, mode, padding_mode, align_corners)
    want_shape = x.shape[:2] + grid.shape[1:-1]
    if gy.shape != want_shape or not accepts((x, gy)):
        raise ShapeError(
            f"{who}: gy must be C-contiguous of shape {want_shape} and dtype {x.dtype}, got "
            f"{gy.shape} ({gy.dtype})"
        )
    if need_x:
        alert_nondeterministic("grid_sample backward")  # atomics into gx
    gx = cupy.zeros(x.shape, dtype=x.dtype) if need_x else None
    ggrid = cupy.empty(grid.shape, dtype=x.dtype) if need_grid else None
    n = int(args[0] * args[2])
    if n and (need_x or need_grid):
        want = np.int32(int(bool(need_x)) | (2 if need_grid else 0))
        blocks, threads = grid_for(n)
        name = f"ferro_grid_sample_bwd<{ctype(x.dtype)}, {x.ndim - 2}>"
        out = (x if gx is None else gx, x if ggrid is None else ggrid)
        kernel("resampling", name)(blocks, threads, (gy, x, grid, *out, *args, want))
    return gx, ggrid


__all__ = [
    "FUSED_KERNELS",
    "accepts",
    "accepts_grad",
    "deform_col2im",
    "deform_im2col",
    "grid_sample_bwd",
    "grid_sample_fwd",
    "resample_axis",
]
