"""Fused CPU kernels of the recurrent cells: one nogil pass per step for the LSTM and GRU gate
forward and one for their gate gradients (``recurrent_kernels.h``, compiled per ISA level), in
place of about ten to fifteen array temporaries each.

They have the names and signatures of ``ferro.ops.recurrent.GenericCells`` (the reference,
written against ``xp``), and are bound through the ``recurrent_layer`` entry of ``OVERRIDES``
(``ferro/ops/fused.py``), which runs the layer's forward and backward loops with them. Every
array must be an exact float32/float64 ndarray of one dtype, C-contiguous, aligned, in native
byte order and of the shape the kernel expects; every array a kernel writes must be writeable.
``accepts`` is the flag-only predicate the adapter asks first; each kernel checks again and
raises the error that says why (docs/design.md, "Kernel accept checks").

Gate order is PyTorch's (``i, f, g, o``; ``r, z, n``).
"""

cimport numpy as cnp

import numpy as np

from ferro.errors import (
    ArgumentError,
    ArgumentTypeError,
    DtypeError,
    ReadOnlyError,
    ShapeError,
)

cnp.import_array()


FUSED_KERNELS = frozenset({"lstm_fwd", "lstm_bwd", "gru_fwd", "gru_bwd"})

cdef extern from "recurrent_kernels.h" nogil:
    void ferro_lstm_fwd_part_f32(const float*, const float*, float*, float*, float*, float*,
                                 float*, Py_ssize_t, Py_ssize_t, Py_ssize_t)
    void ferro_lstm_fwd_part_f64(const double*, const double*, double*, double*, double*,
                                 double*, double*, Py_ssize_t, Py_ssize_t, Py_ssize_t)
    void ferro_gru_fwd_f32(const float*, const float*, const float*, float*, float*, float*,
                           Py_ssize_t, Py_ssize_t)
    void ferro_gru_fwd_f64(const double*, const double*, const double*, double*, double*,
                           double*, Py_ssize_t, Py_ssize_t)
    void ferro_lstm_bwd_part_f32(const float*, float*, const float*, const float*,
                                 const float*, float*, Py_ssize_t, Py_ssize_t, Py_ssize_t)
    void ferro_lstm_bwd_part_f64(const double*, double*, const double*, const double*,
                                 const double*, double*, Py_ssize_t, Py_ssize_t, Py_ssize_t)
    void ferro_gru_bwd_f32(const float*, const float*, const float*, const float*, float*,
                           float*, float*, Py_ssize_t, Py_ssize_t)
    void ferro_gru_bwd_f64(const double*, const double*, const double*, const double*,
                           double*, double*, double*, Py_ssize_t, Py_ssize_t)


cdef inline bint _ok(object o, int dtype) noexcept:
    if type(o) is not cnp.ndarray:
        return False
    cdef cnp.ndarray a = <cnp.ndarray>o
    return (cnp.PyArray_TYPE(a) == dtype and cnp.PyArray_ISNOTSWAPPED(a)
            and cnp.PyArray_ISCARRAY_RO(a) and cnp.PyArray_NDIM(a) == 2)


cpdef bint accepts(tuple arrays):
    """True if every array is an exact ndarray, float32 or float64 (all one), C-contiguous,
    aligned and in native byte order: what the kernels can read (shapes are theirs to check)."""
    if not arrays or type(arrays[0]) is not cnp.ndarray:
        return False
    cdef int dtype = cnp.PyArray_TYPE(<cnp.ndarray>arrays[0])
    if dtype != cnp.NPY_FLOAT32 and dtype != cnp.NPY_FLOAT64:
        return False
    for o in arrays:
        if type(o) is not cnp.ndarray:
            return False
        a = <cnp.ndarray>o
        if (cnp.PyArray_TYPE(a) != dtype or not cnp.PyArray_ISNOTSWAPPED(a)
                or not cnp.PyArray_ISCARRAY_RO(a)):
            return False
    return True


cpdef bint accepts_grad(object gy, tuple arrays):
    """``accepts`` of ``gy`` with ``arrays``."""
    return accepts((gy,) + arrays)


cdef int _check(str who, tuple names, tuple arrays, tuple shapes, unsigned int writes) except -1:
    # Every array: exact 2-D ndarray of the first one's float dtype, C-contiguous, aligned,
    # native, of its expected shape; writeable where its bit in ``writes`` is set.
    cdef Py_ssize_t k
    cdef cnp.ndarray a
    if type(arrays[0]) is not cnp.ndarray:
        raise ArgumentTypeError(f"{who}: {names[0]} must be a numpy.ndarray")
    cdef int dtype = cnp.PyArray_TYPE(<cnp.ndarray>arrays[0])
    if dtype != cnp.NPY_FLOAT32 and dtype != cnp.NPY_FLOAT64:
        raise DtypeError(f"{who}: {names[0]} must be float32 or float64, got {arrays[0].dtype}")
    for k in range(len(arrays)):
        if not _ok(arrays[k], dtype):
            o = arrays[k]
            if type(o) is not cnp.ndarray:
                raise ArgumentTypeError(
                    f"{who}: {names[k]} must be a numpy.ndarray, got {type(o).__name__}")
            if o.dtype != arrays[0].dtype or not o.dtype.isnative:
                raise DtypeError(
                    f"{who}: {names[k]} is {o.dtype}, expected native {arrays[0].dtype}")
            raise ShapeError(
                f"{who}: {names[k]} must be a 2-D C-contiguous aligned array, got shape "
                f"{o.shape} with strides {o.strides}")
        a = <cnp.ndarray>arrays[k]
        if a.shape[0] != shapes[k][0] or a.shape[1] != shapes[k][1]:
            raise ShapeError(
                f"{who}: {names[k]} has shape {arrays[k].shape}, expected {shapes[k]}")
        if writes >> k & 1 and not cnp.PyArray_ISWRITEABLE(a):
            raise ReadOnlyError(f"{who}: {names[k]} is read-only")
    return 0


cdef int _check_disjoint(str who, tuple names, tuple arrays, unsigned int writes) except -1:
    # The loops read and write through restrict pointers: no array a kernel writes may
    # share memory with another argument (all are C-contiguous, so byte ranges decide).
    cdef Py_ssize_t k, m
    cdef char* lo
    cdef char* hi
    for k in range(len(arrays)):
        if not writes >> k & 1:
            continue
        lo = <char*>cnp.PyArray_DATA(<cnp.ndarray>arrays[k])
        hi = lo + cnp.PyArray_NBYTES(<cnp.ndarray>arrays[k])
        for m in range(len(arrays)):
            if m != k and cnp.PyArray_NBYTES(<cnp.ndarray>arrays[m]) and lo < hi:
                if (<char*>cnp.PyArray_DATA(<cnp.ndarray>arrays[m]) < hi and lo <
                        <char*>cnp.PyArray_DATA(<cnp.ndarray>arrays[m])
                        + cnp.PyArray_NBYTES(<cnp.ndarray>arrays[m])):
                    raise ArgumentError(f"{who}: {names[k]} overlaps {names[m]} in memory")
    return 0


cdef inline void* _data(object a):
    return cnp.PyArray_DATA(<cnp.ndarray>a)


def lstm_fwd(object x, object acts, object c, object tc):
    """One LSTM step: ``(h, c_new)`` from the input projection ``x`` (both biases in it) and
    ``acts`` (rows, 4 * hidden), which holds ``h_prev @ weight_hh.T`` and is overwritten with
    the activated gates; writes ``tanh(c_new)`` into ``tc``."""
    if type(c) is not cnp.ndarray or cnp.PyArray_NDIM(<cnp.ndarray>c) != 2:
        raise ShapeError("lstm_fwd: c must be a 2-D numpy.ndarray")
    cdef Py_ssize_t rows = c.shape[0], hidden = c.shape[1]
    _check("lstm_fwd", ("x", "acts", "c", "tc"), (x, acts, c, tc),
           ((rows, 4 * hidden), (rows, 4 * hidden), (rows, hidden), (rows, hidden)), 0b1010)
    _check_disjoint("lstm_fwd", ("x", "acts", "c", "tc"), (x, acts, c, tc), 0b1010)
    cdef cnp.ndarray h = np.empty((rows, hidden), dtype=c.dtype)
    cdef cnp.ndarray cn = np.array(c)  # the kernel updates the state in place
    cdef cnp.ndarray hp = np.array(acts)  # the kernel reads h @ w_hh.T apart from acts
    cdef cnp.ndarray cp = np.empty((rows, hidden), dtype=c.dtype)
    cdef void *p0 = _data(x)
    cdef void *p1 = _data(hp)
    cdef void *p2 = _data(acts)
    cdef void *p3 = _data(cn)
    cdef void *p4 = _data(cp)
    cdef void *p5 = _data(tc)
    cdef void *p6 = _data(h)
    if cnp.PyArray_TYPE(<cnp.ndarray>c) == cnp.NPY_FLOAT32:
        with nogil:
            ferro_lstm_fwd_part_f32(<const float*>p0, <const float*>p1, <float*>p2, <float*>p3,
                                    <float*>p4, <float*>p5, <float*>p6, rows, hidden, hidden)
    else:
        with nogil:
            ferro_lstm_fwd_part_f64(<const double*>p0, <const double*>p1, <double*>p2,
                                    <double*>p3, <double*>p4, <double*>p5, <double*>p6, rows,
                                    hidden, hidden)
    return h, cn


def gru_fwd(object x, object hg, object h, object acts, object hg_n):
    """One GRU step: the new hidden state, from the input projection ``x`` (with
    ``bias_ih``) and the hidden one ``hg`` (with ``bias_hh``), both (rows, 3 * hidden); writes
    ``r, z, n`` into ``acts`` and ``hg``'s n block into ``hg_n`` (rows, hidden)."""
    if type(h) is not cnp.ndarray or cnp.PyArray_NDIM(<cnp.ndarray>h) != 2:
        raise ShapeError("gru_fwd: h must be a 2-D numpy.ndarray")
    cdef Py_ssize_t rows = h.shape[0], hidden = h.shape[1]
    names = ("x", "hg", "h", "acts", "hg_n")
    arrays = (x, hg, h, acts, hg_n)
    _check("gru_fwd", names, arrays,
           ((rows, 3 * hidden), (rows, 3 * hidden), (rows, hidden), (rows, 3 * hidden),
            (rows, hidden)), 0b11000)
    _check_disjoint("gru_fwd", names, arrays, 0b11000)
    cdef cnp.ndarray hn = np.empty((rows, hidden), dtype=h.dtype)
    cdef void *px = _data(x)
    cdef void *pg = _data(hg)
    cdef void *ph = _data(h)
    cdef void *pa = _data(acts)
    cdef void *pn = _data(hg_n)
    cdef void *po = _data(hn)
    if cnp.PyArray_TYPE(<cnp.ndarray>h) == cnp.NPY_FLOAT32:
        with nogil:
            ferro_gru_fwd_f32(<const float*>px, <const float*>pg, <const float*>ph, <float*>pa,
                              <float*>pn, <float*>po, rows, hidden)
    else:
        with nogil:
            ferro_gru_fwd_f64(<const double*>px, <const double*>pg, <const double*>ph,
                              <double*>pa, <double*>pn, <double*>po, rows, hidden)
    return hn


def lstm_bwd(object gh, object gc, object acts, object c_prev, object tc, object g_gates):
    """One LSTM step back: the gradient for the previous cell state; writes the gate gradients
    into ``g_gates`` (rows, 4 * hidden)."""
    if type(gh) is not cnp.ndarray or cnp.PyArray_NDIM(<cnp.ndarray>gh) != 2:
        raise ShapeError("lstm_bwd: gh must be a 2-D numpy.ndarray")
    cdef Py_ssize_t rows = gh.shape[0], hidden = gh.shape[1]
    names = ("gh", "gc", "acts", "c_prev", "tc", "g_gates")
    arrays = (gh, gc, acts, c_prev, tc, g_gates)
    _check("lstm_bwd", names, arrays,
           ((rows, hidden), (rows, hidden), (rows, 4 * hidden), (rows, hidden), (rows, hidden),
            (rows, 4 * hidden)), 0b100000)
    _check_disjoint("lstm_bwd", names, arrays, 0b100000)
    cdef cnp.ndarray gcp = np.array(gc)  # the kernel updates it in place
    cdef void *p0 = _data(gh)
    cdef void *p1 = _data(gcp)
    cdef void *p2 = _data(acts)
    cdef void *p3 = _data(c_prev)
    cdef void *p4 = _data(tc)
    cdef void *p5 = _data(g_gates)
    if cnp.PyArray_TYPE(<cnp.ndarray>gh) == cnp.NPY_FLOAT32:
        with nogil:
            ferro_lstm_bwd_part_f32(<const float*>p0, <float*>p1, <const float*>p2,
                                    <const float*>p3, <const float*>p4, <float*>p5, rows,
                                    hidden, hidden)
    else:
        with nogil:
            ferro_lstm_bwd_part_f64(<const double*>p0, <double*>p1, <const double*>p2,
                                    <const double*>p3, <const double*>p4, <double*>p5, rows,
                                    hidden, hidden)
    return gcp


def gru_bwd(object gh, object acts, object hg_n, object h_prev, object g_in, object g_hid):
    """One GRU step back: ``gh * z``; writes the gradients of the input and hidden gate
    projections into ``g_in`` and ``g_hid`` (rows, 3 * hidden)."""
    if type(gh) is not cnp.ndarray or cnp.PyArray_NDIM(<cnp.ndarray>gh) != 2:
        raise ShapeError("gru_bwd: gh must be a 2-D numpy.ndarray")
    cdef Py_ssize_t rows = gh.shape[0], hidden = gh.shape[1]
    names = ("gh", "acts", "hg_n", "h_prev", "g_in", "g_hid")
    arrays = (gh, acts, hg_n, h_prev, g_in, g_hid)
    _check("gru_bwd", names, arrays,
           ((rows, hidden), (rows, 3 * hidden), (rows, hidden), (rows, hidden),
            (rows, 3 * hidden), (rows, 3 * hidden)), 0b110000)
    _check_disjoint("gru_bwd", names, arrays, 0b110000)
    cdef cnp.ndarray ghz = np.empty((rows, hidden), dtype=gh.dtype)
    cdef void *p0 = _data(gh)
    cdef void *p1 = _data(acts)
    cdef void *p2 = _data(hg_n)
    cdef void *p3 = _data(h_prev)
    cdef void *p4 = _data(g_in)
    cdef void *p5 = _data(g_hid)
    cdef void *p6 = _data(ghz)
    if cnp.PyArray_TYPE(<cnp.ndarray>gh) == cnp.NPY_FLOAT32:
        with nogil:
            ferro_gru_bwd_f32(<const float*>p0, <const float*>p1, <const float*>p2,
                              <const float*>p3, <float*>p4, <float*>p5, <float*>p6, rows, hidden)
    else:
        with nogil:
            ferro_gru_bwd_f64(<const double*>p0, <const double*>p1, <const double*>p2,
                              <const double*>p3, <double*>p4, <double*>p5, <double*>p6, rows,
                              hidden)
    return ghz


cdef extern from "recurrent_kernels.h" nogil:
    ctypedef struct ferro_blas:
        void *gemm
        void *gemv
        int wide
    void ferro_layer_steps(int, int, const ferro_blas*, int, void* const*, const Py_ssize_t*,
                           const Py_ssize_t*, Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                           Py_ssize_t, Py_ssize_t, int)

cdef ferro_blas _blas[2]  # float32, float64: set by set_blas


def set_blas(size_t sgemm, size_t dgemm, size_t sgemv, size_t dgemv, bint wide):
    """The CBLAS functions the step loops call (addresses of ``cblas_?gemm``/``cblas_?gemv``
    of the BLAS NumPy uses; ``wide``: they take 64-bit ints); zeros unset them."""
    _blas[0].gemm, _blas[0].gemv = <void*>sgemm, <void*>sgemv
    _blas[1].gemm, _blas[1].gemv = <void*>dgemm, <void*>dgemv
    _blas[0].wide = _blas[1].wide = wide


def have_blas():
    """Whether :func:`set_blas` gave the step loops their BLAS."""
    return all(_blas[k].gemm != NULL and _blas[k].gemv != NULL for k in range(2))


cdef tuple _steps(str who, object offsets, object sizes, Py_ssize_t first, Py_ssize_t count,
                  Py_ssize_t direction, Py_ssize_t batch, Py_ssize_t rows, Py_ssize_t hout,
                  Py_ssize_t hidden):
    # The step table and range, and the layer's sizes, checked before the loop runs nogil.
    for name, a in (("offsets", offsets), ("sizes", sizes)):
        if (type(a) is not cnp.ndarray or a.dtype != np.intp or a.ndim != 1
                or not a.flags.c_contiguous or a.shape[0] != offsets.shape[0]):
            raise ArgumentError(f"{who}: {name} must be a 1-D contiguous intp array per step")
    cdef Py_ssize_t steps = offsets.shape[0], last = first + (count - 1) * direction
    if (direction != 1 and direction != -1) or count < 0 or (count and not (
            0 <= first < steps and 0 <= last < steps)):
        raise ArgumentError(f"{who}: steps {first} + {direction} * range({count}) not in "
                            f"range({steps})")
    lo, hi = (first, last + 1) if direction == 1 else (last, first + 1)
    o, b = offsets[lo:hi], sizes[lo:hi]
    if count and (b.min() < 1 or b.max() > batch or o.min() < 0 or (o + b).max() > rows):
        raise ShapeError(f"{who}: a step's rows fall outside the batch ({batch}) or the "
                         f"sequence's {rows} rows")
    if hout < 2 or hidden < 2 or (not _blas[0].wide and 4 * hidden * rows >= 2 ** 31):
        raise ArgumentError(f"{who}: sizes the BLAS calls do not cover (hidden {hidden}, "
                            f"output {hout}, {rows} rows)")
    if not have_blas():
        raise ArgumentError(f"{who}: no BLAS (set_blas)")
    return <Py_ssize_t>cnp.PyArray_DATA(<cnp.ndarray>offsets), \
        <Py_ssize_t>cnp.PyArray_DATA(<cnp.ndarray>sizes)


cdef tuple _present(tuple names, tuple arrays, tuple shapes, unsigned int writes):
    # The arguments that are not None, and their write bits.
    cdef unsigned int w = 0, bit = 0
    kept = []
    for k in range(len(arrays)):
        if arrays[k] is not None:
            kept.append(k)
            w |= (writes >> k & 1) << bit
            bit += 1
    return (tuple(names[k] for k in kept), tuple(arrays[k] for k in kept),
            tuple(shapes[k] for k in kept), w)


cdef int _run(bint backward, tuple arrays, bint gru, Py_ssize_t offs, Py_ssize_t bs,
              Py_ssize_t first, Py_ssize_t count, Py_ssize_t direction, Py_ssize_t hout,
              Py_ssize_t hidden, Py_ssize_t chunks, int threads) except -1:
    # The loop on the checked arrays (None: NULL), without the GIL.
    if chunks < 1 or chunks > hidden or threads < 1 or (chunks > 1 and (gru or hout != hidden)):
        raise ArgumentError(f"layer steps: {chunks} chunks of {hidden} hidden units on "
                            f"{threads} threads (more than one chunk: LSTM without weight_hr)")
    cdef void *p[16]
    for k, a in enumerate(arrays):
        p[k] = NULL if a is None else cnp.PyArray_DATA(<cnp.ndarray>a)
    cdef int f64 = cnp.PyArray_TYPE(<cnp.ndarray>arrays[1]) == cnp.NPY_FLOAT64
    with nogil:
        ferro_layer_steps(backward, f64, &_blas[f64], gru, p, <const Py_ssize_t*>offs,
                          <const Py_ssize_t*>bs, first, count, direction, hout, hidden, chunks,
                          threads)
    return 0


def layer_fwd(bint gru, x, h, c, w_t, b_hh, w_hr, out, h_prev, acts, c_prev, tc, cell_h, hgn,
              offsets, sizes, Py_ssize_t first, Py_ssize_t count, Py_ssize_t direction,
              Py_ssize_t chunks=1, int threads=1):
    """``count`` steps of a LSTM (or GRU) layer's forward from step ``first`` (``direction``
    +1 or -1), the step GEMMs through the BLAS and the cells as :func:`lstm_fwd`/:func:`gru_fwd`;
    the arrays as ``layer_forward`` (ferro/ops/recurrent.py) keeps them, ``b_hh`` (1, G) (GRU
    only: a LSTM's ``x`` has it), ``offsets``/``sizes`` each step's first row and row count.
    A LSTM without ``w_hr`` may run each step in ``chunks`` chunks of hidden units on
    ``threads`` threads (Note [Hidden-unit split]: ``w_t``'s columns then in chunk order; the
    BLAS must run one thread a call meanwhile)."""
    if type(h) is not cnp.ndarray or h.ndim != 2 or type(w_t) is not cnp.ndarray or w_t.ndim != 2:
        raise ShapeError("layer_fwd: h and w_t must be 2-D numpy.ndarrays")
    cdef Py_ssize_t batch = h.shape[0], hout = h.shape[1], g = w_t.shape[1]
    cdef Py_ssize_t hidden = g // (3 if gru else 4), rows = out.shape[0] if out is not None else 0
    p_off, p_bs = _steps("layer_fwd", offsets, sizes, first, count, direction, batch, rows, hout,
                         hidden)
    lstm = not gru
    eff = (x, h, c if lstm else None, w_t, b_hh if gru else None, w_hr if lstm else None, out,
           h_prev, acts, c_prev if lstm else None, tc if lstm else None,
           cell_h if lstm and w_hr is not None else None, hgn if gru else None)
    if g % (3 if gru else 4) or (gru and hout != hidden) or (lstm and (
            c is None or c_prev is None or tc is None or (w_hr is None and hout != hidden)
            or (w_hr is not None and cell_h is None))) or (gru and hgn is None):
        raise ShapeError(f"layer_fwd: arrays missing or sizes inconsistent: gates {g}, "
                         f"output {hout}")
    names, arrays, shapes, writes = _present(
        ("x", "h", "c", "w_t", "b_hh", "w_hr", "out", "h_prev", "acts", "c_prev", "tc",
         "cell_h", "hgn"), eff,
        ((rows, g), (batch, hout), (batch, hidden), (hout, g), (1, g), (hout, hidden),
         (rows, hout), (rows, hout), (rows, g), (rows, hidden), (rows, hidden), (rows, hidden),
         (rows, hidden)), 0b1111111000110)
    _check("layer_fwd", names, arrays, shapes, writes)
    _check_disjoint("layer_fwd", names, arrays, writes)
    _run(False, eff + (np.empty((batch, g), dtype=h.dtype),), gru, p_off, p_bs, first, count,
         direction, hout, hidden, chunks, threads)


def layer_bwd(bint gru, gout, gh, gc, w_hh, w_hr, h_prev, acts, c_prev, tc, hgn, g_in, g_hid,
              g_hr, offsets, sizes, Py_ssize_t first, Py_ssize_t count, Py_ssize_t direction,
              Py_ssize_t chunks=1, int threads=1):
    """``count`` steps of a LSTM (or GRU) layer's backward from step ``first``, walking
    ``direction``; the step GEMMs through the BLAS and the cells as :func:`lstm_bwd`/
    :func:`gru_bwd`; the arrays as ``layer_backward`` keeps them (``gout`` (N, H_out), the
    output's gradient; ``gh``, ``gc`` the running state gradients); ``chunks`` and ``threads``
    as :func:`layer_fwd`'s."""
    if type(gh) is not cnp.ndarray or gh.ndim != 2 or type(w_hh) is not cnp.ndarray or \
            w_hh.ndim != 2:
        raise ShapeError("layer_bwd: gh and w_hh must be 2-D numpy.ndarrays")
    cdef Py_ssize_t batch = gh.shape[0], hout = gh.shape[1], g = w_hh.shape[0]
    cdef Py_ssize_t hidden = g // (3 if gru else 4), rows = g_in.shape[0] if g_in is not None else 0
    p_off, p_bs = _steps("layer_bwd", offsets, sizes, first, count, direction, batch, rows, hout,
                         hidden)
    lstm = not gru
    proj = lstm and w_hr is not None
    eff = (gout, gh, gc if lstm else None, w_hh, w_hr if lstm else None, h_prev, acts,
           c_prev if lstm else None, tc if lstm else None, hgn if gru else None, g_in,
           g_hid if gru else None, g_hr if proj else None)
    if g % (3 if gru else 4) or (gru and (hout != hidden or hgn is None or g_hid is None)) or (
            lstm and (gc is None or c_prev is None or tc is None or (proj and g_hr is None)
                      or (not proj and hout != hidden))):
        raise ShapeError(f"layer_bwd: arrays missing or sizes inconsistent: gates {g}, "
                         f"output {hout}")
    names, arrays, shapes, writes = _present(
        ("gout", "gh", "gc", "w_hh", "w_hr", "h_prev", "acts", "c_prev", "tc", "hgn", "g_in",
         "g_hid", "g_hr"), eff,
        ((rows, hout), (batch, hout), (batch, hidden), (g, hout), (hout, hidden), (rows, hout),
         (rows, g), (rows, hidden), (rows, hidden), (rows, hidden), (rows, g), (rows, g),
         (rows, hout)), 0b1110000000110)
    _check("layer_bwd", names, arrays, shapes, writes)
    _check_disjoint("layer_bwd", names, arrays, writes)
    scratch = (np.empty(batch * (hout + hidden), dtype=gh.dtype),
               np.empty(batch * max(hout, hidden), dtype=gh.dtype))
    _run(True, eff + scratch, gru, p_off, p_bs, first, count, direction, hout, hidden, chunks,
         threads)
