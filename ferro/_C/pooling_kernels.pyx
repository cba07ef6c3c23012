# cython: language_level=3
"""nogil CPU kernels of the pooling family: max pooling's forward (values and flat per-plane
indices in one pass over the windows) and its backward (``gy`` scattered through those indices).

The CPU half of the pooling entries in ``ferro.ops.fused.OVERRIDES`` (through the adapter
``_max_pool``), under the same names and arguments as ``ferro.cuda.pooling``. Average and
adaptive-average pooling keep their generic NumPy code: ``benchmarks/bench_pool.py`` measured it
at 0.4-0.8x PyTorch already, so kernels there would not earn their place.

Every kernel checks its arrays itself before it touches memory (docs/design.md, "Kernel accept
checks"): exact ndarrays, native byte order, aligned, C-contiguous, the dtypes and shapes the
loop assumes; a refusal raises the typed error that says why.
"""

from cython.parallel cimport prange

cimport numpy as cnp
from libc.stdint cimport int64_t
from openmp cimport omp_get_max_threads

from ferro._C.typedefs cimport floating_t

import numpy as np

# The accept predicates the adapter asks are cpu_kernels' (one definition of what a flat loop
# reads); this module re-exports them as every backend module does.
from ferro._C.cpu_kernels import accepts, accepts_grad, supports

from ferro.errors import (
    ArgumentError,
    ArgumentTypeError,
    DtypeError,
    IndexOutOfRangeError,
    ShapeError,
)

cnp.import_array()

cdef extern from "pooling_kernels.h" nogil:
    void ferro_max_pool_planes_f32(const float*, float*, int64_t*, Py_ssize_t,
                                   const Py_ssize_t*, const Py_ssize_t*)
    void ferro_max_pool_planes_f64(const double*, double*, int64_t*, Py_ssize_t,
                                   const Py_ssize_t*, const Py_ssize_t*)

FUSED_KERNELS = frozenset({"max_pool_fwd", "max_pool_bwd"})

__all__ = ["FUSED_KERNELS", "accepts", "accepts_grad", "max_pool_bwd", "max_pool_fwd", "supports"]


cdef int _check_array(str who, str name, object a, bint floating) except -1:
    # Exact ndarray, C-contiguous, aligned, native order, float32/float64 (or int64).
    if type(a) is not np.ndarray:
        raise ArgumentTypeError(
            f"{who}: {name} must be a numpy.ndarray, got {type(a).__module__}."
            f"{type(a).__qualname__}"
        )
    if floating and a.dtype.type is not np.float32 and a.dtype.type is not np.float64:
        raise DtypeError(f"{who}: {name} must be float32 or float64, got {a.dtype}")
    if not floating and a.dtype.type is not np.int64:
        raise DtypeError(f"{who}: {name} must be int64, got {a.dtype}")
    if not a.dtype.isnative:
        raise DtypeError(f"{who}: {name} has non-native byte order (dtype {a.dtype.str})")
    if not a.flags.aligned or not a.flags.c_contiguous:
        raise ArgumentError(
            f"{who}: {name} must be aligned and C-contiguous, got strides {a.strides} for "
            f"shape {a.shape}"
        )
    return 0


# Planes are split across OpenMP threads from this many input elements on. Below, the team's
# start costs more than it saves, and its threads, spinning after the loop, take the cores from
# the OpenBLAS threads of the GEMMs around it: from 32768 on, the digits CNN's training step
# (64 x 16 x 8 x 8 pooled) ran 5-10x slower than serial pooling (bench_conv cnn_step).
cdef Py_ssize_t PARALLEL_MIN = 1 << 20


cdef tuple _three(str who, str what, tuple v, int nd, Py_ssize_t low):
    # ``v`` (nd ints >= low) left-padded with 1s (0s for padding) to three dimensions.
    if len(v) != nd:
        raise ArgumentError(f"{who}: {what} must have {nd} entries, got {v}")
    for e in v:
        if e < low:
            raise ArgumentError(f"{who}: {what} must be >= {low}, got {v}")
    fill = 0 if what == "padding" else 1
    return (fill,) * (3 - nd) + tuple(int(e) for e in v)


cdef inline void _ranges(Py_ssize_t* lo, Py_ssize_t* hi, Py_ssize_t n_out, Py_ssize_t n,
                         Py_ssize_t k, Py_ssize_t s, Py_ssize_t p, Py_ssize_t d) noexcept nogil:
    # For each output position o along one dimension: the offsets [lo, hi) of its window that
    # fall inside the input (0 <= o*s - p + j*d < n), so the window loops need no bound tests;
    # lo is the first offset at or past 0 also where none is inside (lo >= hi: an empty window,
    # whose index PyTorch and the generic path take from there).
    cdef Py_ssize_t o, start, j0, j1
    for o in range(n_out):
        start = o * s - p
        j0 = 0 if start >= 0 else (-start + d - 1) // d
        j1 = 0 if start >= n else min(k, (n - start + d - 1) // d)
        lo[o] = j0
        hi[o] = j1


cdef inline void _columns(Py_ssize_t* qlo, Py_ssize_t* qhi, const Py_ssize_t* wlo,
                          Py_ssize_t n_out, Py_ssize_t k) noexcept nogil:
    # For each kernel column q: the outputs [qlo, qhi) along the last dimension whose windows
    # hold q (wlo[o] <= q < whi[o], whi = wlo + n_out; a contiguous run: the windows slide).
    cdef Py_ssize_t q, o
    for q in range(k):
        qlo[q] = qhi[q] = 0
        for o in range(n_out):
            if wlo[o] <= q < wlo[n_out + o]:
                if qhi[q] == 0:
                    qlo[q] = o
                qhi[q] = o + 1


cdef void _max_pool_fwd(const floating_t* x, floating_t* y, int64_t* idx, Py_ssize_t planes,
                        const Py_ssize_t* g, const Py_ssize_t* rng) noexcept nogil:
    # The planes split in one contiguous run per thread; each run's loops are C
    # (pooling_kernels.h), with g and rng as there (rng from _ranges and _columns).
    cdef Py_ssize_t plane = g[0] * g[1] * g[2], per_plane = g[3] * g[4] * g[5], t, b0, b1
    cdef int runs = 1 if planes * plane < PARALLEL_MIN else omp_get_max_threads()
    for t in prange(runs, schedule="static", num_threads=runs):
        b0 = planes * t // runs
        b1 = planes * (t + 1) // runs
        if floating_t is float:
            ferro_max_pool_planes_f32(x + b0 * plane, y + b0 * per_plane, idx + b0 * per_plane,
                                      b1 - b0, g, rng)
        else:
            ferro_max_pool_planes_f64(x + b0 * plane, y + b0 * per_plane, idx + b0 * per_plane,
                                      b1 - b0, g, rng)


def max_pool_fwd(object x, tuple kernel_size, tuple stride, tuple padding, tuple dilation,
                 tuple out_size):
    """Max pooling of ``x`` (``(*lead, *spatial)``, 1 to 3 spatial dimensions as
    ``len(kernel_size)`` says): ``(y, indices)``, both of shape ``(*lead, *out_size)``, indices
    int64 and flat within each plane (PyTorch's ``return_indices``)."""
    cdef str who = "max_pool_fwd"
    _check_array(who, "x", x, True)
    cdef int nd = len(kernel_size)
    if not 1 <= nd <= 3 or x.ndim < nd + 1:
        raise ShapeError(f"{who}: {nd} spatial dimensions do not fit x of shape {x.shape}")
    k = _three(who, "kernel_size", kernel_size, nd, 1)
    s = _three(who, "stride", stride, nd, 1)
    p = _three(who, "padding", padding, nd, 0)
    dl = _three(who, "dilation", dilation, nd, 1)
    out = _three(who, "out_size", out_size, nd, 1)
    sp = (1,) * (3 - nd) + tuple(x.shape[-nd:])
    lead = tuple(x.shape[:-nd])
    y = np.empty(lead + tuple(out_size), dtype=x.dtype)
    idx = np.empty(lead + tuple(out_size), dtype=np.int64)
    cdef Py_ssize_t planes = x.size // (sp[0] * sp[1] * sp[2])
    cdef Py_ssize_t g[18]
    for i, v in enumerate(sp + out + k + s + p + dl):
        g[i] = v
    cdef cnp.ndarray xa = x, ya = y, ia = idx
    # The per-dimension offset ranges (see _ranges), then the column runs (_columns), in one
    # buffer.
    ranges = np.empty(2 * (out[0] + out[1] + out[2] + k[2]), dtype=np.intp)
    cdef Py_ssize_t[::1] rv = ranges
    cdef Py_ssize_t* rp = &rv[0]
    cdef Py_ssize_t at = 0, t
    for t in range(3):  # g: sizes, output sizes, kernel, stride, padding, dilation
        _ranges(rp + at, rp + at + g[3 + t], g[3 + t], g[t], g[6 + t], g[9 + t], g[12 + t],
                g[15 + t])
        at += 2 * g[3 + t]
    _columns(rp + at, rp + at + g[8], rp + at - 2 * g[5], g[5], g[8])
    if x.dtype.type is np.float32:
        with nogil:
            _max_pool_fwd[float](<const float*>cnp.PyArray_DATA(xa), <float*>cnp.PyArray_DATA(ya),
                                 <int64_t*>cnp.PyArray_DATA(ia), planes, g, rp)
    else:
        with nogil:
            _max_pool_fwd[double](<const double*>cnp.PyArray_DATA(xa),
                                  <double*>cnp.PyArray_DATA(ya),
                                  <int64_t*>cnp.PyArray_DATA(ia), planes, g, rp)
    return y, idx


cdef int _scatter(const floating_t* gy, const int64_t* idx, floating_t* gx, Py_ssize_t planes,
                  Py_ssize_t per_plane, Py_ssize_t plane) noexcept nogil:
    # gx[b, idx[b, o]] += gy[b, o], planes in parallel (each writes its own); returns -1 if an
    # index was out of range (that entry skipped; the caller raises and drops gx).
    cdef Py_ssize_t b, o, i, bad = 0
    cdef floating_t* g
    for b in prange(planes, schedule="static",
                    num_threads=1 if planes * plane < PARALLEL_MIN else omp_get_max_threads()):
        g = gx + b * plane
        for o in range(b * per_plane, (b + 1) * per_plane):
            i = idx[o]
            if i < 0 or i >= plane:
                bad += 1
            else:
                g[i] += gy[o]
    return -1 if bad else 0


def max_pool_bwd(object gy, object indices, tuple shape, tuple kernel_size, tuple stride,
                 tuple padding, tuple dilation):
    """Max pooling's input gradient: zeros of ``shape`` (the input's) with ``gy`` added at the
    flat per-plane ``indices`` (``gy``'s shape, int64). Repeated indices (overlapping windows)
    add up. The windows' geometry is checked but not needed here (the scatter follows the
    indices); the GPU kernel of the same signature gathers through it instead."""
    cdef str who = "max_pool_bwd"
    _check_array(who, "gy", gy, True)
    _check_array(who, "indices", indices, False)
    cdef int nd = len(kernel_size)
    for what, v, low in (("kernel_size", kernel_size, 1), ("stride", stride, 1),
                         ("padding", padding, 0), ("dilation", dilation, 1)):
        _three(who, what, v, nd, low)
    if indices.shape != gy.shape:
        raise ShapeError(f"{who}: indices of shape {indices.shape} must match gy's {gy.shape}")
    if (not 1 <= nd <= min(3, len(shape) - 1) or gy.ndim != len(shape)
            or gy.shape[:-nd] != shape[:-nd]):
        raise ShapeError(f"{who}: gy of shape {gy.shape} does not fit an input of shape {shape}")
    cdef Py_ssize_t plane = 1, per_plane = 1, planes = 1
    for n in shape[-nd:]:
        plane *= n
    for n in gy.shape[-nd:]:
        per_plane *= n
    for n in shape[:-nd]:
        planes *= n
    gx = np.zeros(shape, dtype=gy.dtype)
    cdef cnp.ndarray ga = gy, ia = indices, xa = gx
    cdef int rc
    if gy.dtype.type is np.float32:
        with nogil:
            rc = _scatter[float](<const float*>cnp.PyArray_DATA(ga),
                                 <const int64_t*>cnp.PyArray_DATA(ia),
                                 <float*>cnp.PyArray_DATA(xa), planes, per_plane, plane)
    else:
        with nogil:
            rc = _scatter[double](<const double*>cnp.PyArray_DATA(ga),
                                  <const int64_t*>cnp.PyArray_DATA(ia),
                                  <double*>cnp.PyArray_DATA(xa), planes, per_plane, plane)
    if rc < 0:
        raise IndexOutOfRangeError(
            f"{who}: an index is out of range for planes of {plane} elements (shape {shape})"
        )
    return gx
