"""Tensor creation: ``tensor``, ``from_numpy``, ``zeros``, ``ones``, ``full``, ``arange``, ``rand``.

Dtypes follow PyTorch: Python floats give float32 (the default dtype), Python ints give int64,
bools give bool. NumPy arrays keep float32/float64; other integer widths become int64. A tensor
holds one of float32, float64, int64 or bool; only the float dtypes may require grad.
"""

from __future__ import annotations

import numbers

import numpy as np

from ferro import random as _random
from ferro._C.tensor import TensorBase, wrap
from ferro.errors import DtypeError

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
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise DtypeError(f"{where}: {dtype!r} is not a dtype") from None
    if dt not in SUPPORTED_DTYPES:
        raise DtypeError(
            f"{where}: unsupported dtype {dt}; ferro tensors hold float32, float64, int64 or bool"
        )
    return dt


def _infer_dtype(arr: np.ndarray, from_python: bool) -> np.dtype:
    kind = arr.dtype.kind
    if kind == "b":
        return bool_
    if kind in "iu":
        return int64
    if kind == "f":
        if from_python or arr.dtype == np.float16:
            return default_dtype
        return arr.dtype
    raise DtypeError(f"tensor: unsupported data of dtype {arr.dtype}")


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


def tensor(data, dtype=None, requires_grad: bool = False, device=None):
    """Create a tensor from data (a list, a scalar, an array or a Tensor); always copies.

    Example:
        >>> ferro.tensor([1.0, 2.0], requires_grad=True)
        tensor([1., 2.], requires_grad=True)
    """
    if isinstance(data, TensorBase):
        data = data.data
    if type(data).__module__.split(".")[0] == "cupy":
        xp = _xp_of(data)
        arr = xp.array(data, copy=True)
        target = as_dtype(dtype) if dtype is not None else _infer_dtype(arr, False)
        return _make(arr.astype(target, copy=False), requires_grad, device)
    from_python = not isinstance(data, np.ndarray | np.generic)
    try:
        arr = np.array(data, copy=True, order="C")
    except (ValueError, TypeError) as exc:
        raise TypeError(f"tensor: cannot make a tensor from {type(data).__name__}: {exc}") from None
    if arr.dtype == object:
        raise TypeError(f"tensor: cannot make a tensor from {type(data).__name__} data")
    target = as_dtype(dtype) if dtype is not None else _infer_dtype(arr, from_python)
    if arr.dtype != target:
        arr = arr.astype(target)
    return _make(arr, requires_grad, device)


def from_numpy(array: np.ndarray):
    """Wrap a NumPy array without copying: the tensor and the array share memory."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy: expected a numpy.ndarray, got {type(array).__name__}")
    if array.dtype not in SUPPORTED_DTYPES:
        raise DtypeError(
            f"from_numpy: unsupported dtype {array.dtype}; ferro tensors hold float32, float64, "
            "int64 or bool (convert with array.astype first)"
        )
    # A subclass (np.memmap, a matrix, ...) is viewed as a plain ndarray: same memory, and the
    # engine only ever meets exact array types.
    return wrap(array if type(array) is np.ndarray else array.view(np.ndarray))


def _shape(size) -> tuple:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    for s in size:
        if not isinstance(s, numbers.Integral) or isinstance(s, bool) or s < 0:
            raise ValueError(f"invalid shape {size}: sizes must be non-negative ints")
    return tuple(int(s) for s in size)


def zeros(*size, dtype=None, requires_grad: bool = False, device=None):
    """A tensor of zeros: ``zeros(2, 3)`` or ``zeros((2, 3))``."""
    dt = as_dtype(dtype) if dtype is not None else default_dtype
    return _make(np.zeros(_shape(size), dtype=dt), requires_grad, device)


def ones(*size, dtype=None, requires_grad: bool = False, device=None):
    """A tensor of ones."""
    dt = as_dtype(dtype) if dtype is not None else default_dtype
    return _make(np.ones(_shape(size), dtype=dt), requires_grad, device)


def empty(*size, dtype=None, requires_grad: bool = False, device=None):
    """An uninitialized tensor."""
    dt = as_dtype(dtype) if dtype is not None else default_dtype
    return _make(np.empty(_shape(size), dtype=dt), requires_grad, device)


def full(size, fill_value, dtype=None, requires_grad: bool = False, device=None):
    """A tensor filled with ``fill_value`` (dtype inferred from it, as PyTorch does)."""
    if dtype is None:
        dtype = _infer_dtype(np.asarray(fill_value), True)
    dt = as_dtype(dtype)
    shape = _shape((size,) if isinstance(size, (tuple, list)) else (size,))
    return _make(np.full(shape, fill_value, dtype=dt), requires_grad, device)


def _like(t, fill, dtype, requires_grad):
    if not isinstance(t, TensorBase):
        raise TypeError(f"expected a Tensor, got {type(t).__name__}")
    data = t.data
    xp = _xp_of(data)
    dt = as_dtype(dtype) if dtype is not None else data.dtype
    return _make(xp.full(data.shape, fill, dtype=dt), requires_grad)


def zeros_like(t, dtype=None, requires_grad: bool = False):
    """Zeros with the shape (and dtype, device) of ``t``."""
    return _like(t, 0, dtype, requires_grad)


def ones_like(t, dtype=None, requires_grad: bool = False):
    """Ones with the shape (and dtype, device) of ``t``."""
    return _like(t, 1, dtype, requires_grad)


def full_like(t, fill_value, dtype=None, requires_grad: bool = False):
    """``fill_value`` with the shape (and dtype, device) of ``t``."""
    return _like(t, fill_value, dtype, requires_grad)


def arange(start, end=None, step=1, dtype=None, requires_grad: bool = False, device=None):
    """Values from ``start`` to ``end`` (exclusive) by ``step``; int64 for ints, else float32."""
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    if dtype is None:
        ints = all(isinstance(v, numbers.Integral) for v in (start, end, step))
        dtype = int64 if ints else default_dtype
    return _make(np.arange(start, end, step).astype(as_dtype(dtype)), requires_grad, device)


def rand(*size, dtype=None, requires_grad: bool = False, device=None):
    """Uniform samples in [0, 1) from ferro's generator (see ``ferro.manual_seed``)."""
    dt = as_dtype(dtype) if dtype is not None else default_dtype
    if dt.kind != "f":
        raise DtypeError(f"rand: dtype must be floating, got {dt}")
    arr = _random.default_generator().random(_shape(size), dtype=dt)
    return _make(np.asarray(arr), requires_grad, device)


def randn(*size, dtype=None, requires_grad: bool = False, device=None):
    """Standard normal samples from ferro's generator (see ``ferro.manual_seed``)."""
    dt = as_dtype(dtype) if dtype is not None else default_dtype
    if dt.kind != "f":
        raise DtypeError(f"randn: dtype must be floating, got {dt}")
    arr = _random.default_generator().standard_normal(_shape(size), dtype=dt)
    return _make(np.asarray(arr), requires_grad, device)
