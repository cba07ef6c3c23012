"""Tensor creation: ``tensor``, ``from_numpy``, ``zeros``, ``ones``, ``full``, ``arange``, ``rand``.

Dtypes follow PyTorch: Python floats give float32 (the default dtype), Python ints give int64,
bools give bool. NumPy arrays keep float32/float64; other integer widths become int64. A tensor
holds one of float32, float64, int64 or bool, in native byte order; only the float dtypes may
require grad.

Data is checked where it enters: what has no ferro dtype (strings, None, objects, complex, long
double), ragged nested lists, integers outside int64, negative sizes and sizes no array can hold
raise a typed error naming what was wrong, instead of a wrapped-around or empty tensor.
"""

from __future__ import annotations

import math
import numbers
import operator

import numpy as np

from ferro import random as _random
from ferro._C.tensor import TensorBase, wrap
from ferro.errors import ArgumentError, ArgumentTypeError, DtypeError

float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
int64 = np.dtype(np.int64)
bool_ = np.dtype(np.bool_)

SUPPORTED_DTYPES = (float32, float64, int64, bool_)
default_dtype = float32

_ALIASES = {
    "float": float32,
    "float32": float32,
    "double": float64,
    "float64": float64,
    "long": int64,
    "int64": int64,
    "bool": bool_,
}

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# NumPy's limit: an array's size in bytes (and each dimension) must fit a signed pointer.
_MAX_BYTES = np.iinfo(np.intp).max
_SUPPORTED = "ferro tensors hold float32, float64, int64 or bool"
# Dtype kinds that are not numbers at all (objects, strings, bytes, records): an argument of the
# wrong type (ArgumentTypeError), where a numeric dtype ferro lacks is a DtypeError.
_NOT_NUMBERS = "OUSV"


def as_dtype(dtype, *, where: str = "dtype") -> np.dtype:
    """Normalize a dtype argument (a NumPy dtype, ``float``, ``"float64"``...) or raise."""
    if dtype is float:
        return float32
    if dtype is int:
        return int64
    if dtype is bool:
        return bool_
    if isinstance(dtype, str) and dtype in _ALIASES:
        return _ALIASES[dtype]
    if dtype is None:
        raise DtypeError(f"{where}: None is not a dtype")
    try:
        dt = np.dtype(dtype)
    except (TypeError, ValueError):
        raise DtypeError(f"{where}: {dtype!r} is not a dtype") from None
    if not dt.isnative:
        dt = dt.newbyteorder("=")  # ">f4" names float32 stored big-endian: ferro stores native
    if dt not in SUPPORTED_DTYPES:
        raise DtypeError(f"{where}: unsupported dtype {dt}; {_SUPPORTED}")
    return dt


def _infer_dtype(arr, from_python: bool, op: str = "tensor") -> np.dtype:
    """The ferro dtype for data of ``arr``'s dtype (always native byte order), or raise."""
    kind, size = arr.dtype.kind, arr.dtype.itemsize
    if kind == "b":
        return bool_
    if kind in "iu":
        return int64
    if kind == "f":
        if from_python or size < 4:
            return default_dtype  # Python floats, and float16 (no float16 on the CPU)
        if size in (4, 8):
            return float32 if size == 4 else float64
        raise DtypeError(
            f"{op}: {arr.dtype} (long double) is not supported; {_SUPPORTED}. Convert with "
            ".astype(np.float64) first, if float64's range and precision are enough"
        )
    if kind == "c":
        raise DtypeError(f"{op}: complex data ({arr.dtype}) is not supported; {_SUPPORTED}")
    if kind in _NOT_NUMBERS:
        raise ArgumentTypeError(f"{op}: the data holds {arr.dtype} values, not numbers")
    raise DtypeError(f"{op}: unsupported data of dtype {arr.dtype}; {_SUPPORTED}")


def _not_numbers(arr, data, op):
    """The error for Python data that NumPy could only store as objects."""
    for v in arr.ravel().tolist():
        if isinstance(v, numbers.Integral) and not _INT64_MIN <= v <= _INT64_MAX:
            return ArgumentError(f"{op}: the integer {v} does not fit int64 [-2**63, 2**63 - 1]")
        if not isinstance(v, numbers.Real):
            what = "None" if v is None else f"a {type(v).__name__}"
            return ArgumentTypeError(
                f"{op}: cannot make a tensor from {type(data).__name__} data holding {what}; "
                "tensors hold numbers"
            )
    return ArgumentTypeError(f"{op}: cannot make a tensor from {type(data).__name__} data")


def _python_array(data, op):
    """NumPy's array of Python data (nested lists, scalars), or a typed error."""
    try:
        arr = np.array(data, order="C")
    except OverflowError:
        raise ArgumentError(f"{op}: an integer in the data does not fit int64") from None
    except (ValueError, TypeError) as exc:
        # NumPy's message says where a nested list is ragged.
        raise ArgumentTypeError(
            f"{op}: cannot make a tensor from this {type(data).__name__}: {exc}"
        ) from None
    if arr.dtype.kind == "O":
        raise _not_numbers(arr, data, op)
    return arr


def _fits_int64(arr, op):
    """Raise unless every value of ``arr`` converts to int64 without wrapping around."""
    if not arr.size or arr.dtype.kind in "bi":
        return
    if arr.dtype.kind == "u":
        if arr.dtype.itemsize == 8 and int(arr.max()) > _INT64_MAX:
            raise ArgumentError(
                f"{op}: the value {int(arr.max())} does not fit int64 (the largest is 2**63 - 1)"
            )
        return
    lo, hi = float(arr.min()), float(arr.max())  # floats (NaN propagates)
    if not (-(2.0**63) <= lo and hi < 2.0**63):
        bad = lo if not -(2.0**63) <= lo else hi
        raise ArgumentError(f"{op}: the value {bad} cannot be converted to int64")


def _convert(arr, target, op, copy):
    if target == int64:
        _fits_int64(arr, op)
    if copy or arr.dtype != target or not arr.flags.c_contiguous:
        return arr.astype(target, order="C")
    return arr


def _make(arr, requires_grad: bool, device=None):
    if device is not None:
        from ferro.ops.device import move

        arr = move(arr, device)
    t = wrap(arr)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _xp_of(arr):
    if type(arr) is np.ndarray:
        return np
    import cupy

    return cupy


def _is_cupy(data) -> bool:
    return type(data).__module__.split(".")[0] == "cupy"


def tensor(data, dtype=None, requires_grad: bool = False, device=None):
    """Create a tensor from data (a list, a scalar, an array or a Tensor); always copies.

    Python floats give float32, ints int64, bools bool; arrays keep float32/float64, other
    integer widths become int64 and float16 float32; data in non-native byte order is converted
    to native order. Strings, None, objects, complex and long double data, ragged nested lists
    and integers outside int64 raise a typed error (ArgumentTypeError, DtypeError, ArgumentError).

    Example:
        >>> ferro.tensor([1.0, 2.0], requires_grad=True)
        tensor([1., 2.], requires_grad=True)
    """
    target = as_dtype(dtype, where="tensor") if dtype is not None else None
    if isinstance(data, TensorBase):
        data = data.data
    if _is_cupy(data) or isinstance(data, np.ndarray | np.generic):
        arr = data if _is_cupy(data) else np.asarray(data)
        target = target or _infer_dtype(arr, False)
        return _make(_convert(arr, target, "tensor", copy=True), requires_grad, device)
    arr = _python_array(data, "tensor")
    target = target or _infer_dtype(arr, True)
    return _make(_convert(arr, target, "tensor", copy=False), requires_grad, device)


def from_numpy(array: np.ndarray):
    """Wrap a NumPy array without copying: the tensor and the array share memory.

    The array must hold float32, float64, int64 or bool in native byte order; ``ferro.tensor``
    converts other data (copying). A read-only array (``np.load(f, mmap_mode="r")``,
    ``np.frombuffer`` of bytes, a broadcast view) gives a tensor that shares read-only memory:
    ops may read it, but writing into it in place (an in-place op, an optimizer step) raises
    ReadOnlyError; train a copy (``ferro.tensor(array)``) instead.

    Example:
        >>> a = np.zeros(2, np.float32)
        >>> t = ferro.from_numpy(a); a[0] = 1.0; t
        tensor([1., 0.])
    """
    if not isinstance(array, np.ndarray):
        raise ArgumentTypeError(f"from_numpy: expected a numpy.ndarray, got {type(array).__name__}")
    if not array.dtype.isnative:
        raise DtypeError(
            f"from_numpy: the array's dtype {array.dtype.str} has a byte order different from "
            "the native byte order, which ferro's kernels read; ferro.tensor(array) converts it "
            "(copying)"
        )
    if array.dtype.kind in _NOT_NUMBERS:
        raise ArgumentTypeError(f"from_numpy: the array holds {array.dtype} values, not numbers")
    if array.dtype not in SUPPORTED_DTYPES:
        raise DtypeError(
            f"from_numpy: unsupported dtype {array.dtype}; {_SUPPORTED} (convert with "
            "array.astype first)"
        )
    if type(array) is not np.ndarray:
        array = array.view(np.ndarray)  # a memmap or np.matrix: the same memory, plain semantics
    return wrap(array)


def _shape(size, op, dtype) -> tuple:
    """The shape given as ``(2, 3)`` or ``2, 3``: non-negative ints that an array can hold."""
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    for s in size:
        # Anything with __index__ (NumPy integers, one-element integer tensors), but not bools.
        if isinstance(s, bool) or not hasattr(type(s), "__index__"):
            raise ArgumentTypeError(
                f"{op}: sizes must be ints, got {type(s).__name__} in {tuple(size)!r}"
            )
    dims = [operator.index(s) for s in size]
    if any(d < 0 for d in dims):
        raise ArgumentError(f"{op}: sizes must be non-negative, got {tuple(dims)}")
    n = math.prod(dims)
    if max(dims, default=0) > _MAX_BYTES or n * dtype.itemsize > _MAX_BYTES:
        raise ArgumentError(
            f"{op}: a tensor of shape {tuple(dims)} ({n} elements of {dtype}) is larger than "
            "an array can hold"
        )
    return tuple(dims)


def _fill(value, dtype, op):
    """A fill value as a NumPy scalar of ``dtype`` (None: inferred as PyTorch does)."""
    if isinstance(value, TensorBase):
        if value.data.size != 1:
            raise ArgumentError(f"{op}: the fill value must be a number, got shape {value.shape}")
        value = value.item()
    if not isinstance(value, numbers.Real | np.bool_):
        raise ArgumentTypeError(
            f"{op}: the fill value must be a real number, got {type(value).__name__}"
        )
    arr = _python_array(value, op)
    target = as_dtype(dtype, where=op) if dtype is not None else _infer_dtype(arr, True, op)
    return _convert(arr, target, op, copy=False)[()], target


def zeros(*size, dtype=None, requires_grad: bool = False, device=None):
    """A tensor of zeros: ``zeros(2, 3)`` or ``zeros((2, 3))``."""
    dt = as_dtype(dtype, where="zeros") if dtype is not None else default_dtype
    return _make(np.zeros(_shape(size, "zeros", dt), dtype=dt), requires_grad, device)


def ones(*size, dtype=None, requires_grad: bool = False, device=None):
    """A tensor of ones."""
    dt = as_dtype(dtype, where="ones") if dtype is not None else default_dtype
    return _make(np.ones(_shape(size, "ones", dt), dtype=dt), requires_grad, device)


def empty(*size, dtype=None, requires_grad: bool = False, device=None):
    """An uninitialized tensor."""
    dt = as_dtype(dtype, where="empty") if dtype is not None else default_dtype
    return _make(np.empty(_shape(size, "empty", dt), dtype=dt), requires_grad, device)


def full(size, fill_value, dtype=None, requires_grad: bool = False, device=None):
    """A tensor filled with ``fill_value`` (dtype inferred from it, as PyTorch does)."""
    value, dt = _fill(fill_value, dtype, "full")
    shape = _shape((size,) if isinstance(size, (tuple, list)) else (size,), "full", dt)
    return _make(np.full(shape, value, dtype=dt), requires_grad, device)


def _like(t, fill, dtype, requires_grad, op):
    if not isinstance(t, TensorBase):
        raise ArgumentTypeError(f"{op}: expected a Tensor, got {type(t).__name__}")
    data = t.data
    xp = _xp_of(data)
    value, dt = _fill(fill, data.dtype if dtype is None else dtype, op)
    return _make(xp.full(data.shape, value, dtype=dt), requires_grad)


def zeros_like(t, dtype=None, requires_grad: bool = False):
    """Zeros with the shape (and dtype, device) of ``t``."""
    return _like(t, 0, dtype, requires_grad, "zeros_like")


def ones_like(t, dtype=None, requires_grad: bool = False):
    """Ones with the shape (and dtype, device) of ``t``."""
    return _like(t, 1, dtype, requires_grad, "ones_like")


def full_like(t, fill_value, dtype=None, requires_grad: bool = False):
    """``fill_value`` with the shape (and dtype, device) of ``t``."""
    return _like(t, fill_value, dtype, requires_grad, "full_like")


def _arange_bound(value, name):
    if isinstance(value, TensorBase):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(f"arange: {name} must be a real number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ArgumentError(f"arange: {name} must be finite, got {value}")
    return value


def arange(start, end=None, step=1, dtype=None, requires_grad: bool = False, device=None):
    """Values from ``start`` to ``end`` (exclusive) by ``step``; int64 for ints, else float32.

    As PyTorch: a step whose sign does not lead from start to end, a length no array can hold
    and integer bounds outside int64 raise ArgumentError.
    """
    if end is None:
        start, end = 0, start
    start, end = _arange_bound(start, "start"), _arange_bound(end, "end")
    step = _arange_bound(step, "step")
    if step == 0:
        raise ArgumentError("arange: step must be nonzero")
    if (end - start) * step < 0:
        raise ArgumentError(
            f"arange: the step {step} does not lead from start {start} to end {end}"
        )
    ints = all(isinstance(v, numbers.Integral) for v in (start, end, step))
    dt = int64 if ints else default_dtype
    if dtype is not None:
        dt = as_dtype(dtype, where="arange")
    if ints:
        if not all(_INT64_MIN <= v <= _INT64_MAX for v in (start, end, step)):
            raise ArgumentError(
                f"arange: start {start}, end {end} and step {step} must fit int64 "
                "[-2**63, 2**63 - 1]"
            )
        n = -((start - end) // step)  # exact ceil((end - start) / step)
    else:
        n = (end - start) / step  # may be inf (a tiny step): compared, never converted
    # NumPy builds the values in 8 bytes each before the conversion to dt.
    if n * max(dt.itemsize, 8) > _MAX_BYTES:
        raise ArgumentError(
            f"arange: {n:.0f} values from {start} to {end} by {step} are more than an array "
            "can hold"
        )
    return _make(np.arange(start, end, step).astype(dt), requires_grad, device)


def rand(*size, dtype=None, requires_grad: bool = False, device=None):
    """Uniform samples in [0, 1) from ferro's generator (see ``ferro.manual_seed``)."""
    dt = as_dtype(dtype, where="rand") if dtype is not None else default_dtype
    if dt.kind != "f":
        raise DtypeError(f"rand: dtype must be floating, got {dt}")
    arr = _random.default_generator().random(_shape(size, "rand", dt), dtype=dt)
    return _make(np.asarray(arr), requires_grad, device)


def randn(*size, dtype=None, requires_grad: bool = False, device=None):
    """Standard normal samples from ferro's generator (see ``ferro.manual_seed``)."""
    dt = as_dtype(dtype, where="randn") if dtype is not None else default_dtype
    if dt.kind != "f":
        raise DtypeError(f"randn: dtype must be floating, got {dt}")
    arr = _random.default_generator().standard_normal(_shape(size, "randn", dt), dtype=dt)
    return _make(np.asarray(arr), requires_grad, device)
