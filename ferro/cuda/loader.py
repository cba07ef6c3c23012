"""The CUDA kernel loader: sources in ``ferro/cuda/kernels/*.cu``, compiled lazily through
``cupy.RawModule`` (NVRTC), memoized per device; the one place for compile options and launch
configuration.

Nothing here imports CuPy at import time; ``tests/cuda/test_kernels_compile.py`` compiles every
source with NVRTC for sm_80 and sm_90 on machines without a GPU, using :data:`COMPILE_OPTIONS`
and :data:`SOURCES` from this module.
"""

from __future__ import annotations

import functools
import os

from ferro.errors import DtypeError

KERNEL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels")

# Options for every kernel (the target architecture is added per device by CuPy, per arch by
# the compile test).
COMPILE_OPTIONS = ("-std=c++17",)

# Threads per block for elementwise kernels.
BLOCK = 256
# Threads per block for the row kernels (softmax, cross-entropy): a power of two from 32 to this,
# about one thread per 8 elements of a row.
ROW_BLOCK_MAX = 512

_FLOATS = ("float", "double")

# Source stem -> the template instantiations (NVRTC name expressions) ferro uses.
SOURCES: dict[str, list[str]] = {
    "accumulate": [f"ferro_accumulate<{t}>" for t in _FLOATS],
    "sum_to_shape": [f"ferro_sum_to_shape<{t}>" for t in _FLOATS],
    "activation": [
        f"ferro_{k}_bwd<{t}>"
        for k in ("relu", "leaky_relu", "sigmoid", "tanh", "gelu", "gelu_tanh", "silu")
        for t in _FLOATS
    ]
    + [f"ferro_gelu{k}_fwd<{t}>" for k in ("", "_tanh") for t in _FLOATS],
    "softmax": [f"ferro_softmax_{d}<{t}>" for d in ("fwd", "bwd") for t in _FLOATS],
    "cross_entropy": [f"ferro_cross_entropy_{d}<{t}>" for d in ("fwd", "bwd") for t in _FLOATS],
    "dropout": [f"ferro_dropout_mask<{t}>" for t in _FLOATS],
    "conv": [
        f"ferro_{k}<{t}>"
        for k in ("depthwise2d_fwd", "depthwise2d_bwd_x", "depthwise2d_bwd_w", "im2col", "col2im")
        for t in _FLOATS
    ],
    "pooling": [
        f"ferro_{k}_pool_{d}<{t}>"
        for k in ("max", "avg", "adaptive")
        for d in ("fwd", "bwd")
        for t in _FLOATS
    ],
    "norm": [
        f"ferro_{k}<{t}>"
        for k in ("norm_rows_fwd", "norm_rows_bwd", "norm_cols_bwd", "batch_norm_fwd")
        + ("batch_norm_bwd",)
        for t in _FLOATS
    ],
    "recurrent": [
        f"ferro_{k}_{d}<{t}>" for k in ("lstm", "gru") for d in ("fwd", "bwd") for t in _FLOATS
    ],
    "resampling": [
        f"ferro_deform_{k}<{t}>"
        for k in ("im2col", "col2im_input", "col2im_coord")
        for t in _FLOATS
    ]
    + [f"ferro_resample_axis<{t}>" for t in _FLOATS]
    + [f"ferro_grid_sample_{d}<{t}, {n}>" for d in ("fwd", "bwd") for t in _FLOATS for n in (2, 3)],
}


# Headers put in front of every source, in order: the formulas shared with the CPU kernels
# (ferro/_C/kernels.h includes the same file), then the CUDA helpers.
PRELUDE = ("formulas.cuh", "common.cuh")


def source(name: str) -> str:
    """The CUDA source of kernel file ``name`` (without ``.cu``), after :data:`PRELUDE`."""
    parts = []
    for file in (*PRELUDE, f"{name}.cu"):
        with open(os.path.join(KERNEL_DIR, file)) as f:
            parts.append(f.read())
    return "\n".join(parts)


def ctype(dtype) -> str:
    """The C type of a float32/float64 dtype."""
    import numpy as np

    dt = np.dtype(dtype)
    if dt == np.float32:
        return "float"
    if dt == np.float64:
        return "double"
    raise DtypeError(f"ferro.cuda: no kernel for dtype {dt}")


@functools.cache
def _module(name: str, device_id: int):
    import cupy

    with cupy.cuda.Device(device_id):
        return cupy.RawModule(
            code=source(name), options=COMPILE_OPTIONS, name_expressions=SOURCES[name]
        )


def kernel(name: str, expression: str):
    """The compiled kernel ``expression`` (e.g. ``ferro_accumulate<float>``) from source
    ``name`` on the current device; compiled on first use and cached per device."""
    import cupy

    return _module(name, cupy.cuda.Device().id).get_function(expression)


def grid_for(n: int) -> tuple[tuple[int], tuple[int]]:
    """Launch configuration for a grid-stride elementwise kernel over ``n`` elements."""
    blocks = max(1, min((n + BLOCK - 1) // BLOCK, 65535))
    return (blocks,), (BLOCK,)


def row_block(cols: int) -> int:
    """Threads per block for a one-block-per-row kernel over rows of ``cols`` elements."""
    threads = 32
    while threads < ROW_BLOCK_MAX and threads * 8 < cols:
        threads *= 2
    return threads
