"""Dtype objects (``ferro.float32``, ``ferro.int64``, ...), the dtype argument rules and the
default floating dtype.

A :class:`dtype` is PyTorch's ``torch.dtype`` for ferro, and a NumPy dtype wherever NumPy asks
for one: it carries the NumPy dtype as ``.dtype`` (the attribute NumPy reads), so
``np.zeros(2, dtype=ferro.float32)`` and ``arr.astype(ferro.float64)`` work, it compares and
hashes equal to that NumPy dtype (``t.dtype == np.float32``), and attributes it does not define
read through to it (``ferro.float32.kind``).

ferro tensors hold float32, float64, int64 and bool. The other dtype objects (``ferro.half``,
``ferro.int32``, ...) exist so that code written for PyTorch names them; creating or converting
a tensor to one raises NotSupportedError saying what to use instead.
"""

from __future__ import annotations

import builtins
import numbers

import numpy as np

from ferro._C.tensor import TensorBase
from ferro.errors import ArgumentError, ArgumentTypeError, DtypeError, NotSupportedError

HELD = "ferro tensors hold float32, float64, int64 or bool"


class dtype:
    """The element type of a tensor, as ``torch.dtype``: ``ferro.float32`` (``ferro.float``),
    ``ferro.float64`` (``ferro.double``), ``ferro.int64`` (``ferro.long``), ``ferro.bool``;
    ``ferro.float16`` (``ferro.half``), ``ferro.int32`` (``ferro.int``), ``ferro.int16``,
    ``ferro.int8`` and ``ferro.uint8`` name dtypes ferro does not hold.

    ``is_floating_point``, ``is_complex``, ``is_signed`` and ``itemsize`` are PyTorch's; it is
    also its NumPy dtype (see the module docstring), with NumPy's ``kind`` kept at hand (ops
    test it on every call). ``repr`` is ``ferro.float32``, ``str`` the NumPy name
    ``float32``.

    Example:
        >>> x = ferro.zeros(2, dtype=ferro.double)
        >>> x.dtype, x.dtype == ferro.float64, x.dtype == np.float64, x.dtype.is_floating_point
        (ferro.float64, True, True, True)
    """

    __slots__ = ("dtype", "kind", "itemsize", "_name", "_held")

    def __new__(cls, *args, **kwargs):
        raise NotSupportedError(
            "ferro.dtype objects cannot be created; use ferro.float32, ferro.float64, "
            "ferro.int64 or ferro.bool"
        )

    @property
    def is_floating_point(self) -> bool:
        """True for the floating dtypes."""
        return self.kind == "f"

    @property
    def is_complex(self) -> bool:
        """True for complex dtypes (ferro has none)."""
        return self.kind == "c"

    @property
    def is_signed(self) -> bool:
        """True for dtypes that hold negative values."""
        return self.kind in "if"

    def __setattr__(self, name, value):
        raise AttributeError(f"ferro.dtype is immutable (cannot set {name!r})")

    def __getattr__(self, name):
        # Only called for names the class does not define: NumPy's (kind, name, type, char, ...).
        if name.startswith("__") or name in dtype.__slots__:
            raise AttributeError(name)
        return getattr(self.dtype, name)

    def __eq__(self, other) -> bool:
        if isinstance(other, dtype):
            return self is other
        if other is None:
            return False  # NumPy reads None as float64
        try:
            return self.dtype == other
        except TypeError:
            return False

    def __hash__(self) -> int:
        return hash(self.dtype)

    def __repr__(self) -> str:
        return f"ferro.{self._name}"

    def __str__(self) -> str:
        return self._name

    def __reduce__(self):
        return (_by_name, (self._name,))


def _make(name: str, held: bool) -> dtype:
    d = object.__new__(dtype)
    np_dtype = np.dtype(name)
    object.__setattr__(d, "dtype", np_dtype)
    object.__setattr__(d, "kind", np_dtype.kind)
    object.__setattr__(d, "itemsize", np_dtype.itemsize)
    object.__setattr__(d, "_name", name)
    object.__setattr__(d, "_held", held)
    return d


float32 = _make("float32", True)
float64 = _make("float64", True)
int64 = _make("int64", True)
bool_ = _make("bool", True)
float16 = _make("float16", False)
int32 = _make("int32", False)
int16 = _make("int16", False)
int8 = _make("int8", False)
uint8 = _make("uint8", False)

# PyTorch's aliases; ferro/__init__.py exports them (``ferro.float``, ``ferro.long``, ...).
ALIASES = {
    "float": float32,
    "double": float64,
    "half": float16,
    "long": int64,
    "int": int32,
    "short": int16,
    "bool": bool_,
}
_NAMED = {d._name: d for d in (float32, float64, int64, bool_, float16, int32, int16, int8, uint8)}
# NumPy dtype -> dtype object (Tensor.dtype reads it directly: it is asked on every op call).
FROM_NUMPY = {d.dtype: d for d in _NAMED.values()}
# Strings a dtype argument may be: ferro's names and PyTorch's aliases (not NumPy's codes).
_STRINGS = {**_NAMED, **ALIASES}
# Python's types, as PyTorch reads them.
_PYTHON = {builtins.float: float64, builtins.int: int64, builtins.bool: bool_}

SUPPORTED_DTYPES = tuple(d.dtype for d in _NAMED.values() if d._held)

_HINTS = {
    "f": "; use ferro.float32 or ferro.float64 (NumPy has no fast float16 arithmetic on the CPU)",
    "i": "; integer tensors are int64 (ferro.long, .long())",
    "u": "; integer tensors are int64 (ferro.long, .long())",
    "c": "; ferro has no complex tensors",
}


def _by_name(name: str) -> dtype:
    return _NAMED[name]


def _not_held(dt: np.dtype, where: str) -> NotSupportedError:
    d = FROM_NUMPY.get(dt)
    what = repr(d) if d is not None else f"dtype {dt}"
    return NotSupportedError(f"{where}: {what} is not supported: {HELD}{_HINTS.get(dt.kind, '')}")


def is_dtype_like(x) -> bool:
    """True if ``x`` reads as a dtype argument rather than a device: a :class:`dtype`, a NumPy
    dtype or scalar type, Python's ``float``/``int``/``bool``, or a dtype name string."""
    if isinstance(x, dtype | np.dtype):
        return True
    if isinstance(x, str):
        return x in _STRINGS or _numpy_name(x)
    return isinstance(x, type) and (x in _PYTHON or issubclass(x, np.generic))


def _numpy_name(text: str) -> bool:
    try:
        np.dtype(text)
    except TypeError:
        return False
    return True


def as_dtype(spec, *, where: str = "dtype") -> np.dtype:
    """The NumPy dtype a dtype argument asks for, if ferro holds it.

    ``spec`` is a :class:`dtype`, a NumPy dtype or scalar type, Python's ``float`` (float64),
    ``int`` (int64) or ``bool``, or a name: ferro's (``"float32"``), PyTorch's aliases
    (``"float"`` is float32, ``"int"`` int32, as ``ferro.float`` and ``ferro.int``) or NumPy's
    (``"f8"``). Non-native byte order reads as native.

    Raises:
        NotSupportedError: a numeric dtype ferro does not hold (float16, int32, complex, ...).
        DtypeError: ``spec`` is not a dtype, or not a numeric one.
    """
    if type(spec) is dtype:
        if spec._held:
            return spec.dtype
        raise _not_held(spec.dtype, where)
    if spec is None:
        raise DtypeError(f"{where}: None is not a dtype")
    if isinstance(spec, str) and spec in _STRINGS:
        return as_dtype(_STRINGS[spec], where=where)
    if isinstance(spec, type) and spec in _PYTHON:
        return _PYTHON[spec].dtype
    try:
        dt = np.dtype(spec)
    except (TypeError, ValueError):
        raise DtypeError(f"{where}: {spec!r} is not a dtype") from None
    if not dt.isnative:
        dt = dt.newbyteorder("=")  # ">f4" names float32 stored big-endian: ferro stores native
    if dt in SUPPORTED_DTYPES:
        return dt
    if dt.kind in "fiuc":
        raise _not_held(dt, where)
    raise DtypeError(f"{where}: {dt} is not a numeric dtype; {HELD}")


def fill_value(value, dt, where: str):
    """A fill value (a real number, or a one-element tensor) as a NumPy scalar of the dtype
    argument ``dt``, or of the dtype PyTorch infers when ``dt`` is None (bool, int64, else the
    default dtype). Returns ``(scalar, numpy dtype)``.

    Raises:
        ArgumentTypeError: the value is not a real number.
        ArgumentError: a tensor of more than one element, or a value int64 cannot hold (NaN,
            Inf, or outside [-2**63, 2**63 - 1]); NumPy would wrap it around silently.
    """
    if isinstance(value, TensorBase):
        if value._data.size != 1:
            raise ArgumentError(
                f"{where}: the fill value must be a number, got shape {value.shape}"
            )
        value = value._data.item()
    if not isinstance(value, numbers.Real | np.bool_):
        raise ArgumentTypeError(
            f"{where}: the fill value must be a real number, got {type(value).__name__}"
        )
    if dt is not None:
        dt = as_dtype(dt, where=where)
    elif isinstance(value, builtins.bool | np.bool_):
        dt = bool_.dtype
    else:
        dt = int64.dtype if isinstance(value, numbers.Integral) else _default.dtype
    if dt.kind != "i":
        return dt.type(value), dt
    if isinstance(value, numbers.Integral):
        if not -(2**63) <= int(value) < 2**63:
            raise ArgumentError(f"{where}: the integer {value} does not fit int64")
        return dt.type(int(value)), dt
    if not -(2.0**63) <= float(value) < 2.0**63:  # False for NaN too
        raise ArgumentError(f"{where}: the value {value} cannot be converted to int64")
    return dt.type(value), dt  # truncates toward zero, as NumPy's cast


def of_numpy(dt: np.dtype):
    """The :class:`dtype` object for a NumPy dtype (``Tensor.dtype``); a dtype without one
    (only reachable through internal arrays) is returned as the NumPy dtype itself."""
    return FROM_NUMPY.get(dt, dt)


_default = float32


def get_default_dtype() -> dtype:
    """The floating dtype of tensors made from Python floats and of the factories
    (``zeros``, ``rand``, ``arange`` with float bounds, ...): ``ferro.float32`` unless set.

    Example:
        >>> ferro.get_default_dtype()
        ferro.float32
    """
    return _default


def set_default_dtype(d) -> None:
    """Set the default floating dtype (``ferro.float32`` or ``ferro.float64``), as PyTorch's
    ``set_default_dtype``. The setting is process-wide.

    Raises:
        DtypeError: ``d`` is not a floating dtype (PyTorch raises a TypeError there too).
        NotSupportedError: a floating dtype ferro does not hold (``ferro.half``).

    Example:
        >>> ferro.set_default_dtype(ferro.float64)
        >>> ferro.tensor([1.0]).dtype
        ferro.float64
        >>> ferro.set_default_dtype(ferro.float32)
    """
    global _default
    dt = as_dtype(d, where="set_default_dtype")
    if dt.kind != "f":
        raise DtypeError(
            f"set_default_dtype: only floating dtypes can be the default, got {FROM_NUMPY[dt]!r}"
        )
    _default = FROM_NUMPY[dt]


def default_float() -> np.dtype:
    """The default floating dtype as a NumPy dtype (what the factories allocate)."""
    return _default.dtype


__all__ = [
    "dtype",
    "float32",
    "float64",
    "int64",
    "bool_",
    "float16",
    "int32",
    "int16",
    "int8",
    "uint8",
    "ALIASES",
    "SUPPORTED_DTYPES",
    "is_dtype_like",
    "as_dtype",
    "fill_value",
    "of_numpy",
    "FROM_NUMPY",
    "get_default_dtype",
    "set_default_dtype",
    "default_float",
]
