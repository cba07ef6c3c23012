"""GPU kernels of the recurrent cells, forward and backward: launch wrappers for
``kernels/recurrent.cu``.

The same names, arguments and results as ``ferro._C.recurrent_kernels`` (and the reference,
``ferro.ops.recurrent.GenericCells``): bound through the ``recurrent_layer`` entry of
``OVERRIDES``, which runs the layer's forward and backward loops with them (every dtype: the
GPU's tanh is no slower in one fused kernel than in CuPy's). :func:`accepts` reads array
flags only; each wrapper checks what its kernel assumes and raises a typed error for a direct
caller. Nothing here imports CuPy until a kernel runs.
"""

from __future__ import annotations

import numpy as np

from ferro.cuda.loader import ctype, grid_for, kernel
from ferro.errors import DtypeError, ShapeError

FUSED_KERNELS = frozenset({"lstm_fwd", "lstm_bwd", "gru_fwd", "gru_bwd"})

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


def _launch(name: str, t: str, rows: int, hidden: int, args: tuple) -> None:
    if rows * hidden:
        grid, block = grid_for(rows * hidden)
        kernel("recurrent", f"ferro_{name}<{t}>")(
            grid, block, (*args, np.int64(rows), np.int64(hidden))
        )


def lstm_fwd(x, acts, c, tc):
    """One LSTM step: ``(h, c_new)`` from the input projection ``x`` (both biases in it) and
    ``acts`` (rows, 4 * hidden), which holds ``h_prev @ weight_hh.T`` and is overwritten with
    the activated gates; writes ``tanh(c_new)`` into ``tc``."""
    import cupy

    rows, hidden = c.shape
    t = _check(
        "lstm_fwd",
        ("x", "acts", "c", "tc"),
        (x, acts, c, tc),
        ((rows, 4 * hidden), (rows, 4 * hidden), (rows, hidden), (rows, hidden)),
    )
    h = cupy.empty((rows, hidden), dtype=c.dtype)
    cn = cupy.empty((rows, hidden), dtype=c.dtype)
    _launch("lstm_fwd", t, rows, hidden, (x, acts, c, tc, cn, h))
    return h, cn


def gru_fwd(x, hg, h, acts, hg_n):
    """One GRU step: the new hidden state, from the input projection ``x`` (with ``bias_ih``)
    and the hidden one ``hg`` (with ``bias_hh``), both (rows, 3 * hidden); writes ``r, z, n``
    into ``acts`` and ``hg``'s n block into ``hg_n`` (rows, hidden)."""
    import cupy

    rows, hidden = h.shape
    t = _check(
        "gru_fwd",
        ("x", "hg", "h", "acts", "hg_n"),
        (x, hg, h, acts, hg_n),
        ((rows, 3 * hidden), (rows, 3 * hidden), (rows, hidden), (rows, 3 * hidden),
         (rows, hidden)),
    )  # fmt: skip
    hn = cupy.empty((rows, hidden), dtype=h.dtype)
    _launch("gru_fwd", t, rows, hidden, (x, hg, h, acts, hg_n, hn))
    return hn


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
    _launch("lstm_bwd", t, rows, hidden, (gh, gc, acts, c_prev, tc, g_gates, gcp))
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
    _launch("gru_bwd", t, rows, hidden, (gh, acts, hg_n, h_prev, g_in, g_hid, ghz))
    return ghz
