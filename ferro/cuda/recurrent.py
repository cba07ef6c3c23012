"""GPU kernels of the recurrent cells' backward: launch wrappers for ``kernels/recurrent.cu``.

The same names, arguments and results as ``ferro._C.recurrent_kernels`` (and the reference,
``ferro.ops.recurrent.GenericCells``): bound through the ``recurrent_layer`` entry of
``OVERRIDES``, which runs the layer's backward loop with them. :func:`accepts` reads array
flags only; each wrapper checks what its kernel assumes and raises a typed error for a direct
caller. Nothing here imports CuPy until a kernel runs.
"""

from __future__ import annotations

import numpy as np

from ferro.cuda.loader import ctype, grid_for, kernel
from ferro.errors import DtypeError, ShapeError

FUSED_KERNELS = frozenset({"lstm_bwd", "gru_bwd"})

_FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def accepts(arrays: tuple) -> bool:
    """True if every array is float32/float64 of one dtype and C-contiguous (the shapes are the
    kernels' to check)."""
    if not arrays or arrays[0].dtype not in _FLOAT_DTYPES:
        return False
    dt = arrays[0].dtype
    return all(a.dtype == dt and a.flags.c_contiguous for a in arrays)


def accepts_grad(gy, arrays: tuple) -> bool:
    """:func:`accepts` of ``gy`` with ``arrays``."""
    return accepts((gy, *arrays))


def _check(who: str, names: tuple, arrays: tuple, shapes: tuple) -> str:
    dt = arrays[0].dtype
    if dt not in _FLOAT_DTYPES:
        raise DtypeError(f"{who}: {names[0]} must be float32 or float64, got {dt}")
    for name, a, shape in zip(names, arrays, shapes, strict=True):
        if a.dtype != dt:
            raise DtypeError(f"{who}: {name} is {a.dtype}, expected {dt}")
        if tuple(a.shape) != shape or not a.flags.c_contiguous:
            raise ShapeError(
                f"{who}: {name} must be C-contiguous of shape {shape}, got {tuple(a.shape)} "
                f"(C-contiguous: {a.flags.c_contiguous})"
            )
    return ctype(dt)


def lstm_bwd(gh, gc, acts, c_prev, tc, g_gates):
    """One LSTM step back: the gradient for the previous cell state; writes the gate gradients
    into ``g_gates`` (rows, 4 * hidden)."""
    import cupy

    rows, hidden = gh.shape
    t = _check(
        "lstm_bwd",
        ("gh", "gc", "acts", "c_prev", "tc", "g_gates"),
        (gh, gc, acts, c_prev, tc, g_gates),
        ((rows, hidden), (rows, hidden), (rows, 4 * hidden), (rows, hidden), (rows, hidden),
         (rows, 4 * hidden)),
    )  # fmt: skip
    gcp = cupy.empty((rows, hidden), dtype=gh.dtype)
    if gh.size:
        grid, block = grid_for(gh.size)
        kernel("recurrent", f"ferro_lstm_bwd<{t}>")(
            grid,
            block,
            (gh, gc, acts, c_prev, tc, g_gates, gcp, np.int64(rows), np.int64(hidden)),
        )
    return gcp


def gru_bwd(gh, acts, hg_n, h_prev, g_in, g_hid):
    """One GRU step back: ``gh * z``; writes the gradients of the input and hidden gate
    projections into ``g_in`` and ``g_hid`` (rows, 3 * hidden)."""
    import cupy

    rows, hidden = gh.shape
    t = _check(
        "gru_bwd",
        ("gh", "acts", "hg_n", "h_prev", "g_in", "g_hid"),
        (gh, acts, hg_n, h_prev, g_in, g_hid),
        ((rows, hidden), (rows, 3 * hidden), (rows, hidden), (rows, hidden),
         (rows, 3 * hidden), (rows, 3 * hidden)),
    )  # fmt: skip
    ghz = cupy.empty((rows, hidden), dtype=gh.dtype)
    if gh.size:
        grid, block = grid_for(gh.size)
        kernel("recurrent", f"ferro_gru_bwd<{t}>")(
            grid,
            block,
            (gh, acts, hg_n, h_prev, g_in, g_hid, ghz, np.int64(rows), np.int64(hidden)),
        )
    return ghz
