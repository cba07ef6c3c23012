"""GPU kernels of the resampling family: deformable convolution's bilinear sampling (CuPy arrays
in, CuPy arrays out), under the names and signatures of ``ferro._C.resampling_kernels``.

``deform_im2col`` builds ``deform_conv2d``'s column matrix; ``deform_col2im`` runs its
transpose: the input's gradient (atomics into zeros: any column may read any pixel), and the
offsets' and mask's (one thread per offset pair, summing the group's channels). The sources are
``kernels/resampling.cu``. Nothing here imports CuPy until a kernel runs; the tests run the
wrappers and kernels on a device and on the CPU emulation (``tests/cuda``).
"""

from __future__ import annotations

import numpy as np

from ferro.cuda.loader import ctype, grid_for, kernel
from ferro.errors import DtypeError, ShapeError

#: The kernels this module implements (``ferro._C.resampling_kernels`` has the same names).
FUSED_KERNELS = frozenset({"deform_col2im", "deform_im2col"})

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


__all__ = ["FUSED_KERNELS", "accepts", "accepts_grad", "deform_col2im", "deform_im2col"]
