"""Which array module and which device: the one place ferro asks, above the compiled core.

A tensor holds a ``numpy.ndarray`` (the CPU) or a ``cupy.ndarray`` (a CUDA device). Code above
``ferro/_C`` (creation, ops, losses, the profiler, autograd, optimizers, nn, serialization) asks
these functions instead of looking at an array's module itself:

- :func:`xp_of` (the array module), :func:`is_array`, :func:`is_device_array`;
- :func:`device_of` (a :class:`device`), :func:`parse_device`, :func:`move`;
- :func:`set_default_device` / :func:`get_default_device`, read by the factories;
- :func:`use_deterministic_algorithms` and :func:`add_at`, the one scatter-add, which knows
  that CuPy's is not deterministic.

CuPy is imported only when a CuPy array or a CUDA device is really used, so ``import ferro``
never imports it. The compiled core keeps its own compiled check on the per-op hot path
(``_xp_of`` in ferro/_C/graph.pyx): ``_C`` imports nothing above it.
"""

from __future__ import annotations

import re
import warnings

import numpy as np

from ferro.errors import ArgumentError, ArgumentTypeError, DeviceError, NondeterministicError

_SPEC = re.compile(r"(cpu|cuda)(?::(0|[1-9][0-9]*))?")
_FORM = "use 'cpu', 'cuda' or 'cuda:N'"


class device:
    """A device a tensor lives on, as ``torch.device``: ``ferro.device("cpu")``,
    ``ferro.device("cuda:1")``, ``ferro.device("cuda", 1)``.

    ``type`` is ``"cpu"`` or ``"cuda"``; ``index`` is the device number, or None when not given
    (``"cuda"`` then means the current CUDA device). A tensor's ``.device`` always carries the
    index of a CUDA device (``cuda:0``) and none for the CPU. Devices are immutable and
    hashable, and compare equal to the strings that name them (``t.device == "cpu"``; PyTorch
    compares them unequal); ``device("cuda")`` and ``device("cuda:0")`` differ, as in PyTorch.
    An int names the current accelerator's device of that index (``ferro.device(0)`` is
    ``cuda:0``), which needs CUDA to be available.

    Raises:
        DeviceError: an unknown device name or a malformed string (``"tpu"``, ``"cuda:x"``),
            or an int index without an accelerator.
        ArgumentError: a negative index, or an index given twice (``device("cuda:0", 1)``).
        ArgumentTypeError: a spec that is neither a string, a device nor an int.

    Example:
        >>> d = ferro.device("cuda", 1)
        >>> d.type, d.index, str(d)
        ('cuda', 1, 'cuda:1')
        >>> ferro.zeros(2).device == "cpu"
        True
    """

    __slots__ = ("_type", "_index")

    def __new__(cls, type, index=None):  # PyTorch's argument name, shadowing type() here
        if isinstance(type, device):
            if index is not None:
                raise ArgumentError(f"device({type!r}, {index!r}): the device already has an index")
            return type
        if isinstance(type, int) and not isinstance(type, bool) and index is None:
            return _accelerator_index(type)
        if not isinstance(type, str):
            raise ArgumentTypeError(
                f"device: expected a string such as 'cuda:0', a device or an int, got "
                f"{_type_name(type)}"
            )
        m = _SPEC.fullmatch(type)
        if m is None:
            raise DeviceError(f"unknown device {type!r}; {_FORM} (ferro runs on CPUs and CUDA)")
        if index is not None:
            if m.group(2) is not None:
                raise ArgumentError(
                    f"device({type!r}, {index!r}): the string already names index {m.group(2)}"
                )
            index = _index(index, type)
        elif m.group(2) is not None:
            index = int(m.group(2))
        self = object.__new__(cls)
        object.__setattr__(self, "_type", m.group(1))
        object.__setattr__(self, "_index", index)
        return self

    @property
    def type(self) -> str:
        """``"cpu"`` or ``"cuda"``."""
        return self._type

    @property
    def index(self) -> int | None:
        """The device number, or None when not given."""
        return self._index

    def __setattr__(self, name, value):
        raise AttributeError(f"ferro.device is immutable (cannot set {name!r})")

    def __str__(self) -> str:
        return self._type if self._index is None else f"{self._type}:{self._index}"

    def __repr__(self) -> str:
        if self._index is None:
            return f"device(type={self._type!r})"
        return f"device(type={self._type!r}, index={self._index})"

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            m = _SPEC.fullmatch(other)
            if m is None:
                return False
            index = None if m.group(2) is None else int(m.group(2))
            return self._type == m.group(1) and self._index == index
        if isinstance(other, device):
            return self._type == other._type and self._index == other._index
        return NotImplemented

    def __hash__(self) -> int:
        # Equal to the hash of the string it equals, so either finds the other in a dict.
        return hash(str(self))

    def __reduce__(self):
        return (device, (self._type, self._index))


def _type_name(x) -> str:
    return "None" if x is None else type(x).__name__


def _index(index, where) -> int:
    if isinstance(index, bool) or not isinstance(index, int):
        raise ArgumentTypeError(
            f"device({where!r}, ...): the index must be an int, got {_type_name(index)}"
        )
    if index < 0:
        raise ArgumentError(f"device({where!r}, {index}): the index must not be negative")
    return index


def _accelerator_index(index: int) -> device:
    # PyTorch's device(0): the accelerator's device of that index, refused without one.
    if index < 0:
        raise ArgumentError(f"device({index}): the index must not be negative")
    if cuda_device_count() == 0:
        raise DeviceError(
            f"device({index}): an int names an accelerator device, and no accelerator is "
            "available; name the device instead ('cpu')"
        )
    return _cuda(index)


_CPU = device("cpu")
_CUDA: dict[int, device] = {}


def _cuda(index: int) -> device:
    d = _CUDA.get(index)
    if d is None:
        d = _CUDA[index] = device("cuda", index)
    return d


def parse_device(spec) -> device:
    """``spec`` (a string, a :class:`device` or an int index) as a :class:`device`, checked."""
    return spec if type(spec) is device else device(spec)


def is_device_array(arr) -> bool:
    """True for a CuPy array (memory on a CUDA device); asked without importing CuPy."""
    t = type(arr)
    if t is np.ndarray:
        return False  # the common case, answered first
    return t.__name__ == "ndarray" and t.__module__.split(".", 1)[0] == "cupy"


def is_array(x) -> bool:
    """True for an array a backend holds: a NumPy array (or subclass) or a CuPy array."""
    return isinstance(x, np.ndarray) or is_device_array(x)


def xp_of(arr):
    """The array module for ``arr``: ``cupy`` for a CuPy array, ``numpy`` for anything else."""
    if is_device_array(arr):
        import cupy

        return cupy
    return np


def device_of(arr) -> device:
    """The :class:`device` of an array: ``cuda:N`` for a CuPy array, the CPU for anything else."""
    if is_device_array(arr):
        return _cuda(arr.device.id)
    return _CPU


def cupy_or_none():
    """The ``cupy`` module, or None when it is not installed (imports it on the first call)."""
    try:
        import cupy
    except ImportError:
        return None
    return cupy


def cuda_device_count() -> int:
    """The number of CUDA devices CuPy sees: 0 without CuPy, a driver or a device."""
    cp = cupy_or_none()
    if cp is None:
        return 0
    try:
        return cp.cuda.runtime.getDeviceCount()
    except Exception:  # CuPy without a usable driver (missing, too old) or a partial install
        return 0


def is_on(arr, target: device) -> bool:
    """True if ``arr`` is on ``target``: the CPU is one device whatever its index, and a CUDA
    device without an index matches any CUDA device."""
    if not is_device_array(arr):
        return target._type == "cpu"
    return target._type == "cuda" and target._index in (None, arr.device.id)


def move(arr, target):
    """``arr`` on device ``target`` (a string or a :class:`device`): ``arr`` itself when it is
    there already, else a copy (a host copy for the CPU, a CuPy array on that CUDA device).

    A device without an index matches any device of its type; moving to one picks the current
    CUDA device.

    Raises:
        DeviceError: the target is a CUDA device and CUDA is not available, or it names a
            device that does not exist.
    """
    target = parse_device(target)
    if is_on(arr, target):
        return arr
    if target._type == "cpu":
        return arr.get()
    count = cuda_device_count()
    if count == 0:
        raise DeviceError(
            f"cannot move a tensor to {target}: CUDA is not available "
            "(install ferro[cuda12] or ferro[cuda13] on a machine with a GPU)"
        )
    if target._index is not None and target._index >= count:
        raise DeviceError(f"cannot move a tensor to {target}: only {count} CUDA device(s)")
    import cupy

    if target._index is None:
        return cupy.asarray(arr)
    with cupy.cuda.Device(target._index):
        return cupy.asarray(arr)


_default_device: device | None = None  # None: the CPU, where factories need no move


def set_default_device(target) -> None:
    """Make the factories (``ferro.zeros``, ``ferro.tensor`` of Python data, ``nn`` layers'
    parameters, ...) create tensors on ``target``; None restores the CPU, as in PyTorch.

    The setting is process-wide. Data already on a device (a CuPy array given to
    ``ferro.tensor``) keeps its device, and an explicit ``device=`` wins. The device is checked
    for its name only: a CUDA device that is not available fails at the next factory call.

    Example:
        >>> ferro.set_default_device("cuda")  # doctest: +SKIP
    """
    global _default_device
    parsed = None if target is None else parse_device(target)
    _default_device = None if parsed is None or parsed._type == "cpu" else parsed


def get_default_device() -> device:
    """The device the factories create tensors on (see :func:`set_default_device`)."""
    return _CPU if _default_device is None else _default_device


def default_device_or_none() -> device | None:
    """The default device when it is not the CPU, else None (the factories' cheap check)."""
    return _default_device


# Note [Deterministic algorithms]: every CPU op of ferro gives the same bits for the same inputs
# (fixed summation orders, also when split over threads). On a GPU, scatter-adds are atomic
# adds, whose order, and so whose float rounding, varies from run to run: CuPy's add.at (the
# backward of indexing, embedding, gather and index_select, scatter_add, fold) and ferro's
# grid_sample, deformable-convolution and resampling backward kernels. Under
# use_deterministic_algorithms(True) those raise NondeterministicError (or warn, with
# warn_only=True), as PyTorch's alert does; nothing else changes.
_deterministic = False
_warn_only = False


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """PyTorch's ``torch.use_deterministic_algorithms``: with ``mode`` True, an op that has no
    deterministic implementation on its device raises NondeterministicError (a RuntimeError),
    or warns with ``warn_only=True``. ferro's CPU ops are all deterministic; on CUDA the
    scatter-adds are not (Note [Deterministic algorithms] in ferro/backend.py)."""
    global _deterministic, _warn_only
    if not isinstance(mode, (bool, np.bool_)):
        raise ArgumentTypeError(
            f"use_deterministic_algorithms: mode must be a bool, got {type(mode).__name__}"
        )
    _deterministic, _warn_only = bool(mode), bool(warn_only)


def are_deterministic_algorithms_enabled() -> bool:
    """Whether :func:`use_deterministic_algorithms` is on."""
    return _deterministic


def is_deterministic_algorithms_warn_only_enabled() -> bool:
    """Whether :func:`use_deterministic_algorithms` is on with ``warn_only=True``."""
    return _deterministic and _warn_only


def alert_nondeterministic(op: str) -> None:
    """Called by an op about to run a nondeterministic device kernel: raise or warn under
    :func:`use_deterministic_algorithms`, else nothing."""
    if not _deterministic:
        return
    msg = (
        f"{op} does not have a deterministic implementation on CUDA (atomic adds), but "
        "ferro.use_deterministic_algorithms(True) is set; run it on the CPU, or pass "
        "warn_only=True to be warned instead"
    )
    if _warn_only:
        warnings.warn(msg, UserWarning, stacklevel=3)
    else:
        raise NondeterministicError(msg)


def add_at(xp, out, index, values, op: str) -> None:
    """``xp.add.at(out, index, values)``, repeated indices adding up: ferro's one scatter-add
    (on CuPy, atomics: :func:`alert_nondeterministic` first)."""
    if xp is not np:
        alert_nondeterministic(op)
    xp.add.at(out, index, values)


__all__ = [
    "use_deterministic_algorithms",
    "are_deterministic_algorithms_enabled",
    "is_deterministic_algorithms_warn_only_enabled",
    "device",
    "parse_device",
    "is_device_array",
    "is_array",
    "xp_of",
    "device_of",
    "is_on",
    "move",
    "cupy_or_none",
    "cuda_device_count",
    "set_default_device",
    "get_default_device",
    "default_device_or_none",
]


# The CUDA dropout-mask kernel, registered by the composition root (ferro/__init__.py) so that
# neither this layer nor ferro.ops imports ferro.cuda.
_dropout_mask_kernel = None


def register_dropout_mask(kernel) -> None:
    """Install ``kernel(shape, p, dtype, device_index)``, the device's dropout-mask generator."""
    global _dropout_mask_kernel
    _dropout_mask_kernel = kernel


def device_dropout_mask(x, p: float):
    """A dropout mask for the CuPy array ``x`` (keep with probability ``1 - p``, scaled by
    ``1 / (1 - p)``), drawn on its device by the counter-based generator kernel, so checkpointing
    replays it by restoring that device's (seed, offset). The CPU mask comes from ferro's
    generator instead (``ferro.ops.dropout``)."""
    if _dropout_mask_kernel is None:
        raise DeviceError("dropout: no device dropout kernel is registered (import ferro first)")
    return _dropout_mask_kernel(x.shape, p, x.dtype, x.device.id)
