"""PyTorch's legacy typed tensor constructors: ``ferro.FloatTensor``, ``ferro.LongTensor``, ...
and their ``ferro.cuda`` twins.

Old tutorials and datasets still write ``torch.LongTensor(ids)`` or ``torch.FloatTensor(2, 3)``,
test ``isinstance(t, torch.FloatTensor)`` and convert with ``t.type(torch.DoubleTensor)``. Each
name here is a class whose instances are the tensors of its dtype and device (the check looks
at the tensor; no tensor is ever of these classes), and calling it builds one, as PyTorch does:

- ``FloatTensor()``: an empty tensor; ``FloatTensor(2, 3)`` or ``FloatTensor(ferro.Size(...))``:
  an uninitialized tensor of that shape (sizes are ints, as in PyTorch);
- ``FloatTensor(data)``: a list, tuple, scalar-free sequence or array converted to the type's
  dtype (a copy, ``ferro.tensor(data, dtype=...)``);
- ``FloatTensor(t)`` with a tensor of the same type: ``t.detach()``, sharing its memory
  (PyTorch returns an alias); of another dtype: DtypeError, as PyTorch's TypeError ("expected
  Float (got Long)").

``IntTensor``, ``HalfTensor`` and ``ByteTensor`` exist for the names; building one raises the
NotSupportedError of their dtype (ferro holds float32, float64, int64 and bool).
"""

from __future__ import annotations

import numpy as np

from ferro import dtypes as _dtypes
from ferro._C.tensor import TensorBase
from ferro._tensor import _TYPE_NAMES, Size
from ferro.creation import empty, tensor
from ferro.errors import ArgumentTypeError, DtypeError


class _TensorType(type):
    """The metaclass of the typed constructors (see the module docstring)."""

    dtype: _dtypes.dtype
    is_cuda: bool

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, TensorBase) and obj.dtype == cls.dtype and obj.is_cuda == cls.is_cuda

    def __call__(cls, *args, device=None):
        where = cls.__qualname__ if not cls.is_cuda else "cuda." + cls.__qualname__
        if device is None:
            device = "cuda" if cls.is_cuda else "cpu"
        dt = _dtypes.as_dtype(cls.dtype, where=where)
        if len(args) == 1 and isinstance(args[0], TensorBase):
            (t,) = args
            if t.dtype != cls.dtype or t.is_cuda != cls.is_cuda:
                raise DtypeError(
                    f"{where}: expected a tensor of type ferro.{where}, got {t.type()} "
                    f"(convert with t.type(ferro.{where}))"
                )
            return t.detach()
        if len(args) == 1 and isinstance(args[0], Size):
            return empty(*args[0], dtype=dt, device=device)
        if args and all(_is_size(a) for a in args):
            return empty(*args, dtype=dt, device=device)
        if len(args) == 1 and not isinstance(args[0], (str, bytes)):
            return tensor(args[0], dtype=dt, device=device)
        if not args:
            return empty(0, dtype=dt, device=device)
        raise ArgumentTypeError(
            f"{where}: expected sizes (ints), a Size, or one sequence, array or tensor of data, "
            f"got ({', '.join(type(a).__name__ for a in args)})"
        )

    def __repr__(cls) -> str:
        return f"<class 'ferro.{'cuda.' if cls.is_cuda else ''}{cls.__name__}'>"


def _is_size(a) -> bool:
    return isinstance(a, (int, np.integer)) and not isinstance(a, (bool, np.bool_))


def _types(is_cuda: bool) -> dict:
    # One class per name of Tensor.type()'s table: "Float" -> FloatTensor of ferro.float32, ...
    out = {}
    for np_name, kind in _TYPE_NAMES.items():
        dt, name = _dtypes.FROM_NUMPY[np.dtype(np_name)], kind + "Tensor"
        out[name] = _TensorType(
            name, (), {"dtype": dt, "is_cuda": is_cuda, "__doc__": _doc(name, dt)}
        )
    return out


def _doc(name: str, dt) -> str:
    return f"PyTorch's legacy ``{name}``: the tensors of dtype ``{dt!r}`` (see ferro.legacy)."


CPU_TYPES = _types(False)
CUDA_TYPES = _types(True)
FloatTensor = CPU_TYPES["FloatTensor"]
DoubleTensor = CPU_TYPES["DoubleTensor"]
LongTensor = CPU_TYPES["LongTensor"]
BoolTensor = CPU_TYPES["BoolTensor"]
IntTensor = CPU_TYPES["IntTensor"]
HalfTensor = CPU_TYPES["HalfTensor"]
ByteTensor = CPU_TYPES["ByteTensor"]
