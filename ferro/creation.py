"""Tensor creation: ``tensor``, ``from_numpy``, ``zeros``, ``ones``, ``full``, ``arange``, ``rand``.

Dtypes follow PyTorch: Python floats give the default dtype (float32 unless
``ferro.set_default_dtype`` changed it), Python ints give int64, bools give bool. NumPy arrays
keep float32/float64; other integer widths become int64. A tensor holds one of float32, float64,
int64 or bool, in native byte order; only the float dtypes may require grad. ``dtype=`` takes a
dtype object (``ferro.float64``), a NumPy dtype, Python's ``float``/``int``/``bool`` or a name
(see ferro/dtypes.py); ``device=`` a string or a ``ferro.device``. Without ``device=``,
Python data and the factories go to the default device (``ferro.set_default_device``), data
already on a device stays there, and the ``*_like`` functions follow their tensor.

Data is checked where it enters: what has no ferro dtype (strings, None, objects, complex, long
double), ragged nested lists, integers outside int64, negative sizes and sizes no array can hold
raise a typed error naming what was wrong, instead of a wrapped-around or empty tensor.
"""

from __future__ import annotations

import ctypes
import math
import numbers
import operator

import numpy as np

from ferro import backend
from ferro import random as _random
from ferro._C.tensor import TensorBase, wrap
from ferro.dtypes import HELD, SUPPORTED_DTYPES, as_dtype, default_float
from ferro.dtypes import fill_value as _fill_value
from ferro.errors import ArgumentError, ArgumentTypeError, DeviceError, DtypeError

_INT64 = np.dtype(np.int64)
_BOOL = np.dtype(np.bool_)

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# NumPy's limit: an array's size in bytes (and each dimension) must fit a signed pointer.
_MAX_BYTES = np.iinfo(np.intp).max
# Dtype kinds that are not numbers at all (objects, strings, bytes, records): an argument of the
# wrong type (ArgumentTypeError), where a numeric dtype ferro lacks is a DtypeError.
_NOT_NUMBERS = "OUSV"


def _infer_dtype(arr, from_python: bool, op: str = "tensor") -> np.dtype:
    """The ferro dtype for data of ``arr``'s dtype (always native byte order), or raise."""
    kind, size = arr.dtype.kind, arr.dtype.itemsize
    if kind == "b":
        return _BOOL
    if kind in "iu":
        return _INT64
    if kind == "f":
        if from_python or size < 4:
            return default_float()  # Python floats, and float16 (no float16 on the CPU)
        if size in (4, 8):
            return arr.dtype.newbyteorder("=")
        raise DtypeError(
            f"{op}: {arr.dtype} (long double) is not supported; {HELD}. Convert with "
            ".astype(np.float64) first, if float64's range and precision are enough"
        )
    if kind == "c":
        raise DtypeError(f"{op}: complex data ({arr.dtype}) is not supported; {HELD}")
    if kind in _NOT_NUMBERS:
        raise ArgumentTypeError(f"{op}: the data holds {arr.dtype} values, not numbers")
    raise DtypeError(f"{op}: unsupported data of dtype {arr.dtype}; {HELD}")


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
    if target == _INT64:
        _fits_int64(arr, op)
    if copy or arr.dtype != target or not arr.flags.c_contiguous:
        return arr.astype(target, order="C")
    return arr


def _make(arr, requires_grad: bool, device=None):
    """Wrap ``arr`` on ``device`` (None: the default device, when it is not the CPU)."""
    if device is None:
        device = backend.default_device_or_none()
    if device is not None:
        arr = backend.move(arr, device)
    t = wrap(arr)
    if requires_grad:
        t.requires_grad_(True)
    return t


def tensor(data, dtype=None, requires_grad: bool = False, device=None):
    """Create a tensor from data (a list, a scalar, an array or a Tensor); always copies.

    Python floats give the default dtype (float32), ints int64, bools bool; arrays keep
    float32/float64, other integer widths become int64 and float16 the default dtype; data in
    non-native byte order is converted to native order. Data on a device stays there unless
    ``device`` is given. Strings, None, objects, complex and long double data, ragged nested lists
    and integers outside int64 raise a typed error (ArgumentTypeError, DtypeError, ArgumentError).

    Example:
        >>> ferro.tensor([1.0, 2.0], requires_grad=True)
        tensor([1., 2.], requires_grad=True)
    """
    target = as_dtype(dtype, where="tensor") if dtype is not None else None
    if isinstance(data, TensorBase):
        data = data._data
    if backend.is_array(data) or isinstance(data, np.generic):
        arr = data if backend.is_device_array(data) else np.asarray(data)
        target = target or _infer_dtype(arr, False)
        if device is None:
            device = backend.device_of(arr)  # data keeps its device
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
            f"from_numpy: unsupported dtype {array.dtype}; {HELD} (convert with array.astype first)"
        )
    if type(array) is not np.ndarray:
        array = array.view(np.ndarray)  # a memmap or np.matrix: the same memory, plain semantics
    return wrap(array)


# DLPack's device types (dlpack.h, DLDeviceType) that ferro can hold: host memory (NumPy) and
# CUDA memory (CuPy). Pinned (kDLCUDAHost) and managed (kDLCUDAManaged) memory are readable from
# the host, so NumPy takes them as CPU memory, as it does.
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13
_CAPSULE_NAMES = (b"dltensor", b"dltensor_versioned")
# Byte offsets of DLTensor.device in the structs a capsule points to: DLManagedTensor starts with
# its DLTensor; DLManagedTensorVersioned has a version (2 x uint32), manager_ctx, deleter and a
# uint64 flags before it. In DLTensor, device follows the one ``void* data`` pointer.
_POINTER = ctypes.sizeof(ctypes.c_void_p)
_DEVICE_OFFSET = {b"dltensor": _POINTER, b"dltensor_versioned": 8 + 2 * _POINTER + 8 + _POINTER}
_capsule_api = ctypes.pythonapi
_capsule_api.PyCapsule_IsValid.restype = ctypes.c_int
_capsule_api.PyCapsule_IsValid.argtypes = (ctypes.py_object, ctypes.c_char_p)
_capsule_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_capsule_api.PyCapsule_GetPointer.argtypes = (ctypes.py_object, ctypes.c_char_p)


class _Capsule:
    """A legacy DLPack capsule presented as an object with ``__dlpack__``, for the consumers.

    NumPy's and CuPy's ``from_dlpack`` take only objects; the device is read from the struct the
    capsule points to (the consumer renames the capsule once it takes ownership).
    """

    def __init__(self, capsule, name: bytes):
        address = _capsule_api.PyCapsule_GetPointer(capsule, name) + _DEVICE_OFFSET[name]
        device = (ctypes.c_int32 * 2).from_address(address)
        self._capsule, self._device = capsule, (int(device[0]), int(device[1]))

    def __dlpack__(self, **kwargs):
        return self._capsule

    def __dlpack_device__(self):
        return self._device


class _Writeable:
    """The same memory as a read-only array, described writeable (``__array_interface__``)."""

    def __init__(self, array):
        self.__array_interface__ = dict(array.__array_interface__, data=(array.ctypes.data, False))
        self._owner = array  # keeps the capsule's memory alive while the tensor uses it


def _writeable(array):
    """A writeable view of an array NumPy imported read-only from a legacy capsule.

    A legacy capsule cannot mark memory read-only, so NumPy imports every one read-only; its
    producers (``torch.utils.dlpack.to_dlpack``, ferro's ``to_dlpack``) hand out writeable memory
    and PyTorch imports it writeable, which ``ferro.utils.dlpack.from_dlpack`` follows.
    """
    return np.asarray(_Writeable(array))


def _capsule_name(obj):
    """The DLPack name of capsule ``obj``, or None if it is not an unconsumed DLPack capsule."""
    for name in _CAPSULE_NAMES:
        if _capsule_api.PyCapsule_IsValid(obj, name):
            return name
    return None


def from_dlpack(ext_tensor, *, copy=None):
    """Wrap another library's array through DLPack: a ferro tensor sharing its memory.

    ``ext_tensor`` is an object with ``__dlpack__`` and ``__dlpack_device__`` (a NumPy array, a
    PyTorch tensor, a CuPy or JAX array, ...) or an unconsumed DLPack capsule (the legacy
    ``torch.utils.dlpack.to_dlpack`` form). Host memory becomes a NumPy-backed tensor and CUDA
    memory a CuPy-backed one (CuPy is imported only then), without copying unless
    ``copy=True``; ``copy=False`` raises where the producer would have to copy. Writes through
    either side are seen by the other. Memory the producer marks read-only (a read-only NumPy
    array) gives a tensor that raises ReadOnlyError on in-place writes, as ``from_numpy`` does.
    The result never requires grad.

    Args:
        ext_tensor: the object (or capsule) to import.
        copy: None (share when possible), True (always copy) or False (never copy).

    Returns:
        A Tensor on the CPU or on the CUDA device that holds the memory.

    Raises:
        ArgumentTypeError: ``ext_tensor`` is neither a DLPack producer nor a DLPack capsule.
        DeviceError: the memory is on a device ferro does not support (not the host or CUDA).
        DtypeError: the data's dtype is not one ferro tensors hold (float32, float64, int64,
            bool); ``ferro.tensor(np.from_dlpack(x))`` converts host data, copying.

    Example:
        >>> a = np.zeros(2, np.float32)
        >>> t = ferro.from_dlpack(a); a[0] = 1.0; t
        tensor([1., 0.])
    """
    name = _capsule_name(ext_tensor) if type(ext_tensor).__name__ == "PyCapsule" else None
    if name is not None:
        ext_tensor = _Capsule(ext_tensor, name)
    elif not (hasattr(ext_tensor, "__dlpack__") and hasattr(ext_tensor, "__dlpack_device__")):
        what = type(ext_tensor).__name__
        if what == "PyCapsule":
            what = "a capsule that is not an unconsumed DLPack capsule (each is consumed once)"
        raise ArgumentTypeError(
            f"from_dlpack: expected an object with __dlpack__ and __dlpack_device__, or a DLPack "
            f"capsule, got {what}"
        )
    device_type, index = ext_tensor.__dlpack_device__()
    if device_type == _DL_CUDA:
        cupy = backend.cupy_or_none()
        if cupy is None:
            raise DeviceError(
                f"from_dlpack: the data is in CUDA memory (device {index}) but CuPy is not "
                "installed; ferro's CUDA tensors are CuPy arrays"
            )
        array = cupy.from_dlpack(ext_tensor)
        if copy:
            array = array.copy()
    elif device_type in (_DL_CPU, _DL_CUDA_HOST, _DL_CUDA_MANAGED):
        array = np.from_dlpack(ext_tensor, copy=copy)
        if name == b"dltensor" and not array.flags.writeable:
            array = _writeable(array)
    else:
        raise DeviceError(
            f"from_dlpack: the data is on DLPack device type {device_type} (index {index}); "
            "ferro tensors live in host memory (NumPy) or CUDA memory (CuPy)"
        )
    if array.dtype not in SUPPORTED_DTYPES:
        raise DtypeError(
            f"from_dlpack: unsupported dtype {array.dtype}; {HELD}. Convert with the producer "
            "first, or copy with ferro.tensor(numpy.from_dlpack(x))"
        )
    return wrap(array)


def _shape(size, op, dtype, keyword=None) -> tuple:
    """The shape given as ``(2, 3)``, ``2, 3`` or (``keyword``) ``size=(2, 3)``: non-negative
    ints that an array can hold."""
    if keyword is not None:
        if size:
            raise ArgumentTypeError(
                f"{op}: the sizes are given twice, as {tuple(size)!r} and as size={keyword!r}"
            )
        size = (keyword,)
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


def _dtype_or_default(dtype, op) -> np.dtype:
    return as_dtype(dtype, where=op) if dtype is not None else default_float()


def zeros(*sizes, size=None, dtype=None, requires_grad: bool = False, device=None):
    """A tensor of zeros: ``zeros(2, 3)``, ``zeros((2, 3))`` or ``zeros(size=(2, 3))``."""
    dt = _dtype_or_default(dtype, "zeros")
    return _make(np.zeros(_shape(sizes, "zeros", dt, size), dtype=dt), requires_grad, device)


def ones(*sizes, size=None, dtype=None, requires_grad: bool = False, device=None):
    """A tensor of ones."""
    dt = _dtype_or_default(dtype, "ones")
    return _make(np.ones(_shape(sizes, "ones", dt, size), dtype=dt), requires_grad, device)


def empty(*sizes, size=None, dtype=None, requires_grad: bool = False, device=None):
    """An uninitialized tensor."""
    dt = _dtype_or_default(dtype, "empty")
    return _make(np.empty(_shape(sizes, "empty", dt, size), dtype=dt), requires_grad, device)


def full(size, fill_value, dtype=None, requires_grad: bool = False, device=None):
    """A tensor filled with ``fill_value`` (dtype inferred from it, as PyTorch does)."""
    value, dt = _fill_value(fill_value, dtype, "full")
    shape = _shape((size,) if isinstance(size, (tuple, list)) else (size,), "full", dt)
    return _make(np.full(shape, value, dtype=dt), requires_grad, device)


def _like(t, fill, dtype, requires_grad, device, op):
    if not isinstance(t, TensorBase):
        raise ArgumentTypeError(f"{op}: expected a Tensor, got {type(t).__name__}")
    data = t._data
    value, dt = _fill_value(fill, data.dtype if dtype is None else dtype, op)
    out = backend.xp_of(data).full(data.shape, value, dtype=dt)
    return _make(out, requires_grad, backend.device_of(data) if device is None else device)


def zeros_like(t, dtype=None, requires_grad: bool = False, device=None):
    """Zeros with the shape of ``t``, and its dtype and device unless given."""
    return _like(t, 0, dtype, requires_grad, device, "zeros_like")


def ones_like(t, dtype=None, requires_grad: bool = False, device=None):
    """Ones with the shape of ``t``, and its dtype and device unless given."""
    return _like(t, 1, dtype, requires_grad, device, "ones_like")


def full_like(t, fill_value, dtype=None, requires_grad: bool = False, device=None):
    """``fill_value`` with the shape of ``t``, and its dtype and device unless given."""
    return _like(t, fill_value, dtype, requires_grad, device, "full_like")


def _arange_bound(value, name):
    if isinstance(value, TensorBase):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(f"arange: {name} must be a real number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ArgumentError(f"arange: {name} must be finite, got {value}")
    return value


def arange(start, end=None, step=1, dtype=None, requires_grad: bool = False, device=None):
    """Values from ``start`` to ``end`` (exclusive) by ``step``; int64 for ints, else the
    default dtype (float32).

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
    dt = _INT64 if ints else default_float()
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


def rand(*sizes, size=None, generator=None, dtype=None, requires_grad: bool = False, device=None):
    """Uniform samples in [0, 1) from ``generator`` (a ``ferro.Generator``; default: ferro's
    generator, see ``ferro.manual_seed``)."""
    dt = _dtype_or_default(dtype, "rand")
    if dt.kind != "f":
        raise DtypeError(f"rand: dtype must be floating, got {dt}")
    rng = _random.numpy_generator(generator, "rand")
    arr = rng.random(_shape(sizes, "rand", dt, size), dtype=dt)
    return _make(np.asarray(arr), requires_grad, device)


def randn(*sizes, size=None, generator=None, dtype=None, requires_grad: bool = False, device=None):
    """Standard normal samples from ``generator`` (a ``ferro.Generator``; default: ferro's
    generator, see ``ferro.manual_seed``)."""
    dt = _dtype_or_default(dtype, "randn")
    if dt.kind != "f":
        raise DtypeError(f"randn: dtype must be floating, got {dt}")
    rng = _random.numpy_generator(generator, "randn")
    arr = rng.standard_normal(_shape(sizes, "randn", dt, size), dtype=dt)
    return _make(np.asarray(arr), requires_grad, device)


def empty_like(t, dtype=None, requires_grad: bool = False, device=None):
    """An uninitialized tensor with the shape of ``t``, and its dtype and device unless given."""
    data = _tensor_arg(t, "empty_like")._data
    dt = data.dtype if dtype is None else as_dtype(dtype, where="empty_like")
    out = backend.xp_of(t._data).empty(t._data.shape, dtype=dt)
    return _make(out, requires_grad, backend.device_of(t._data) if device is None else device)


def _tensor_arg(t, op):
    if not isinstance(t, TensorBase):
        raise ArgumentTypeError(f"{op}: expected a Tensor, got {type(t).__name__}")
    return t


def _real(value, name, op):
    """A finite real bound (a Python or NumPy number, or a one-element tensor)."""
    if isinstance(value, TensorBase):
        if value._data.size != 1:
            raise ArgumentError(f"{op}: {name} must be a number, got shape {value.shape}")
        value = value._data.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(f"{op}: {name} must be a real number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ArgumentError(f"{op}: {name} must be finite, got {value}")
    return value


def _steps(steps, op) -> int:
    if isinstance(steps, bool) or not hasattr(type(steps), "__index__"):
        raise ArgumentTypeError(f"{op}: steps must be an int, got {type(steps).__name__}")
    steps = operator.index(steps)
    if steps < 0:
        raise ArgumentError(f"{op}: steps must be non-negative, got {steps}")
    return steps


def _linspace(start, end, steps, dt, op):
    """PyTorch's linspace in dtype ``dt``: the first half counts up from ``start`` and the
    second half down from ``end`` (so both ends are exact), in ``dt``'s own precision for the
    float dtypes. For the integer dtypes the bounds are truncated toward zero first and the
    values computed in float64, then truncated, as PyTorch does. PyTorch's vectorized kernel
    rounds some interior values differently in the last place (by the CPU's vector width)."""
    _shape((steps,), op, dt)
    work = dt if dt.kind == "f" else np.dtype(np.float64)
    if dt.kind != "f":
        start, end = math.trunc(start), math.trunc(end)
    start, end = work.type(start), work.type(end)
    if steps == 1:
        return np.full(1, start, dtype=work).astype(dt)
    step = (end - start) / work.type(steps - 1)
    idx = np.arange(steps, dtype=work)
    half = steps // 2
    out = np.empty(steps, dtype=work)
    out[:half] = start + step * idx[:half]
    out[half:] = end - step * (work.type(steps - 1) - idx[half:])
    if dt.kind == "i":
        _fits_int64(out, op)
    return out.astype(dt)


def linspace(start, end, steps, *, dtype=None, device=None, requires_grad: bool = False):
    """``steps`` evenly spaced values from ``start`` to ``end`` (both included), in the
    default dtype unless ``dtype`` is given, as PyTorch's ``linspace``.

    Raises:
        ArgumentTypeError: a bound that is not a real number, or ``steps`` not an int.
        ArgumentError: a bound that is not finite, or a negative ``steps``.

    Example:
        >>> ferro.linspace(0, 1, 5)
        tensor([0.0000, 0.2500, 0.5000, 0.7500, 1.0000])
    """
    start, end = _real(start, "start", "linspace"), _real(end, "end", "linspace")
    dt = _dtype_or_default(dtype, "linspace")
    values = _linspace(start, end, _steps(steps, "linspace"), dt, "linspace")
    return _make(values, requires_grad, device)


def logspace(start, end, steps, base=10.0, *, dtype=None, device=None, requires_grad=False):
    """``base ** linspace(start, end, steps)``, as PyTorch's ``logspace`` (the powers are taken
    in float64, then converted to the dtype).

    Example:
        >>> ferro.logspace(0, 2, 3)
        tensor([  1.,  10., 100.])
    """
    start, end = _real(start, "start", "logspace"), _real(end, "end", "logspace")
    base = _real(base, "base", "logspace")
    dt = _dtype_or_default(dtype, "logspace")
    exponents = _linspace(start, end, _steps(steps, "logspace"), np.dtype(np.float64), "logspace")
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        values = np.power(np.float64(base), exponents)
    if dt.kind == "i":
        _fits_int64(values, "logspace")
    return _make(values.astype(dt), requires_grad, device)


def eye(n, m=None, *, dtype=None, device=None, requires_grad: bool = False):
    """An ``n`` x ``m`` (default ``n`` x ``n``) matrix with ones on the diagonal.

    Example:
        >>> ferro.eye(2)
        tensor([[1., 0.],
                [0., 1.]])
    """
    dt = _dtype_or_default(dtype, "eye")
    rows, cols = _shape((n, n if m is None else m), "eye", dt)
    return _make(np.eye(rows, cols, dtype=dt), requires_grad, device)


def _int_arg(value, name, op) -> int:
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise ArgumentTypeError(f"{op}: {name} must be an int, got {type(value).__name__}")
    return operator.index(value)


def _random_ints(low, high, shape, generator, dt, op):
    """Integers drawn uniformly from [low, high) as an array of ``dt``."""
    low, high = _int_arg(low, "low", op), _int_arg(high, "high", op)
    if not _INT64_MIN <= low < high <= _INT64_MAX + 1:
        raise ArgumentError(
            f"{op}: expected low < high within int64 [-2**63, 2**63], got low={low}, high={high}"
        )
    if dt == _BOOL:
        raise DtypeError(f"{op}: dtype must be numeric, got bool")
    rng = _random.numpy_generator(generator, op)
    return rng.integers(low, high, size=shape, dtype=np.int64).astype(dt)


def randint(
    low=0,
    high=None,
    size=None,
    *,
    generator=None,
    dtype=None,
    device=None,
    requires_grad: bool = False,
):
    """Integers drawn uniformly from [``low``, ``high``), as PyTorch's ``randint``: call it as
    ``randint(high, size)`` or ``randint(low, high, size)``; int64 unless ``dtype`` is given.

    Raises:
        ArgumentTypeError: bounds that are not ints, or no ``size``.
        ArgumentError: ``low >= high``.

    Example:
        >>> ferro.randint(0, 10, (2, 3)).shape
        ferro.Size([2, 3])
    """
    if size is None and isinstance(high, (tuple, list)):
        low, high, size = 0, low, high  # randint(high, size)
    elif high is None:
        low, high = 0, low  # randint(high, size=...)
    if size is None:
        raise ArgumentTypeError("randint: missing the size argument, as in randint(high, size)")
    dt = _INT64 if dtype is None else as_dtype(dtype, where="randint")
    shape = _shape((size,) if isinstance(size, (tuple, list)) else (size,), "randint", dt)
    return _make(_random_ints(low, high, shape, generator, dt, "randint"), requires_grad, device)


def randperm(n, *, generator=None, dtype=None, device=None, requires_grad: bool = False):
    """A random permutation of ``0 .. n - 1`` (int64 unless ``dtype`` is given).

    Example:
        >>> sorted(ferro.randperm(4).tolist())
        [0, 1, 2, 3]
    """
    dt = _INT64 if dtype is None else as_dtype(dtype, where="randperm")
    (n,) = _shape((_int_arg(n, "n", "randperm"),), "randperm", dt)
    rng = _random.numpy_generator(generator, "randperm")
    return _make(rng.permutation(n).astype(dt), requires_grad, device)


def _random_like(t, dtype, device, op):
    """``t``'s array, the dtype to sample (``t``'s unless given) and the device to place on."""
    data = _tensor_arg(t, op)._data
    dt = data.dtype if dtype is None else as_dtype(dtype, where=op)
    return data, dt, backend.device_of(data) if device is None else device


def rand_like(t, *, generator=None, dtype=None, device=None, requires_grad: bool = False):
    """Uniform samples in [0, 1) with the shape of ``t``, and its dtype and device unless given."""
    data, dt, device = _random_like(t, dtype, device, "rand_like")
    return rand(
        data.shape, generator=generator, dtype=dt, requires_grad=requires_grad, device=device
    )


def randn_like(t, *, generator=None, dtype=None, device=None, requires_grad: bool = False):
    """Standard normal samples with the shape of ``t``, and its dtype and device unless given."""
    data, dt, device = _random_like(t, dtype, device, "randn_like")
    return randn(
        data.shape, generator=generator, dtype=dt, requires_grad=requires_grad, device=device
    )


def randint_like(
    t,
    low=0,
    high=None,
    *,
    generator=None,
    dtype=None,
    device=None,
    requires_grad: bool = False,
):
    """Integers from [``low``, ``high``) with the shape of ``t``, and its dtype (floats hold the
    integer values) and device unless given: ``randint_like(t, high)`` or
    ``randint_like(t, low, high)``."""
    if high is None:
        low, high = 0, low
    data, dt, device = _random_like(t, dtype, device, "randint_like")
    values = _random_ints(low, high, data.shape, generator, dt, "randint_like")
    return _make(values, requires_grad, device)


def as_tensor(data, dtype=None, device=None):
    """``data`` as a tensor, sharing memory where it can, as PyTorch's ``as_tensor``.

    A Tensor already of the dtype and on the device is returned itself; otherwise it is
    converted (with history: ``t.to(...)``). A NumPy array that ferro can hold as it is (see
    :func:`from_numpy`), with no other dtype or device asked for, shares its memory; anything
    else is copied by :func:`tensor`.

    Example:
        >>> a = np.zeros(2, np.float32)
        >>> ferro.as_tensor(a).numpy() is a
        True
    """
    if isinstance(data, TensorBase):
        return data.to(device=device, dtype=dtype)
    if (
        isinstance(data, np.ndarray)
        and data.dtype in SUPPORTED_DTYPES
        and data.dtype.isnative
        and (dtype is None or as_dtype(dtype, where="as_tensor") == data.dtype)
        and (
            device is None
            and backend.default_device_or_none() is None
            or device is not None
            and backend.parse_device(device).type == "cpu"
        )
    ):
        return from_numpy(data)
    return tensor(data, dtype=dtype, device=device)


def _probabilities(t, op):
    data = _tensor_arg(t, op)._data
    if data.dtype.kind != "f":
        raise DtypeError(
            f"{op}: expects a floating point tensor of probabilities, got {data.dtype}"
        )
    return backend.move(data, "cpu")


def bernoulli(input, p=None, *, generator=None):  # noqa: A002 - PyTorch's argument name
    """0s and 1s drawn with probability ``input`` (or the number ``p``) of a 1, of ``input``'s
    shape, dtype and device, as PyTorch's ``bernoulli`` (no gradient flows).

    Raises:
        ArgumentError: a probability outside [0, 1].

    Example:
        >>> ferro.bernoulli(ferro.tensor([0.0, 1.0])).tolist()
        [0.0, 1.0]
    """
    probs = _probabilities(input, "bernoulli")
    if p is not None:
        probs = np.full(probs.shape, _real(p, "p", "bernoulli"), dtype=probs.dtype)
    if probs.size and not (probs.min() >= 0 and probs.max() <= 1):
        raise ArgumentError(
            f"bernoulli: probabilities must be in [0, 1], got values in "
            f"[{float(probs.min())}, {float(probs.max())}]"
        )
    rng = _random.numpy_generator(generator, "bernoulli")
    draws = (rng.random(probs.shape) < probs).astype(probs.dtype)
    return _make(draws, False, backend.device_of(input._data))


def multinomial(input, num_samples: int, replacement: bool = False, *, generator=None):  # noqa: A002
    """Indices drawn from the categories of each row of ``input`` (non-negative weights, 1-D or
    2-D, not necessarily summing to 1), as PyTorch's ``multinomial``: int64 of shape
    ``(num_samples,)`` or ``(rows, num_samples)``. Without ``replacement`` a category is drawn
    at most once per row.

    Raises:
        ShapeError: ``input`` is not 1-D or 2-D.
        ArgumentError: negative, infinite or all-zero weights, or more samples than non-zero
            categories without replacement.

    Example:
        >>> ferro.multinomial(ferro.tensor([0.0, 1.0, 0.0]), 2, replacement=True).tolist()
        [1, 1]
    """
    from ferro.errors import ShapeError

    weights = _probabilities(input, "multinomial").astype(np.float64)
    n = _int_arg(num_samples, "num_samples", "multinomial")
    if weights.ndim not in (1, 2):
        raise ShapeError(f"multinomial: input must be 1-D or 2-D, got shape {weights.shape}")
    rows = weights.reshape(-1, weights.shape[-1])
    if n <= 0:
        raise ArgumentError(f"multinomial: num_samples must be positive, got {n}")
    if not np.isfinite(rows).all() or (rows < 0).any():
        raise ArgumentError("multinomial: weights must be finite and non-negative")
    rng = _random.numpy_generator(generator, "multinomial")
    out = np.empty((rows.shape[0], n), dtype=np.int64)
    for i, w in enumerate(rows):
        total = w.sum()
        if total <= 0:
            raise ArgumentError(f"multinomial: row {i} of the weights sums to {total}")
        if not replacement and n > np.count_nonzero(w):
            raise ArgumentError(
                f"multinomial: cannot draw {n} samples without replacement from "
                f"{np.count_nonzero(w)} categories of non-zero weight (row {i})"
            )
        out[i] = rng.choice(w.shape[0], size=n, replace=bool(replacement), p=w / total)
    out = out.reshape(weights.shape[:-1] + (n,))
    return _make(out, False, backend.device_of(input._data))


def normal(
    mean=0.0,
    std=1.0,
    size=None,
    *,
    generator=None,
    dtype=None,
    device=None,
    requires_grad: bool = False,
):
    """Samples of N(mean, std**2), as PyTorch's ``normal``: ``mean`` and ``std`` are tensors
    (broadcast together; differentiable, ``mean + std * eps``) or numbers (then ``size`` gives
    the shape).

    Gradient: gmean = gy; gstd = gy * eps (the standard normal draw).

    Example:
        >>> ferro.normal(0.0, 1.0, (2, 3)).shape
        ferro.Size([2, 3])
    """
    from ferro.ops import elementwise as _ew

    tensors = [v for v in (mean, std) if isinstance(v, TensorBase)]
    if not tensors:
        if size is None:
            raise ArgumentTypeError(
                "normal: with a number for both mean and std, give the size: "
                "normal(0.0, 1.0, (2, 3))"
            )
        eps = randn(size, generator=generator, dtype=dtype, device=device)
        return _make(
            (eps._data * _real(std, "std", "normal") + _real(mean, "mean", "normal")).astype(
                eps._data.dtype
            ),
            requires_grad,
            device,
        )
    if size is not None:
        raise ArgumentTypeError("normal: size is only for a number mean and std")
    shape = np.broadcast_shapes(*(tuple(t.shape) for t in tensors))
    like = tensors[0]
    eps = randn(shape, generator=generator, dtype=like._data.dtype, device=like.device)
    return _ew.add(mean, _ew.mul(std, eps))
