"""``ferro.accelerator``: PyTorch's (2.6+) device-neutral accelerator API, over CUDA (CuPy).

Device-selection code written for current PyTorch runs unchanged::

    device = ferro.accelerator.current_accelerator() if ferro.accelerator.is_available() else "cpu"
    model.to(device)

CUDA through CuPy is ferro's only accelerator. Nothing here imports CuPy before it is asked.
"""

from __future__ import annotations

import importlib.util

from ferro import backend
from ferro.errors import DeviceError


def is_available() -> bool:
    """True if an accelerator (a CUDA device, through CuPy) can be used now."""
    return backend.cuda_device_count() > 0


def current_accelerator(check_available: bool = False) -> backend.device | None:
    """``ferro.device("cuda")`` when ferro has its CUDA backend installed (CuPy), else None;
    with ``check_available=True``, only when a device can also be used now (PyTorch's
    compile-time and run-time checks). The index is None, as in PyTorch.

    Example:
        >>> ferro.accelerator.current_accelerator(check_available=True) in (None, "cuda")
        True
    """
    if importlib.util.find_spec("cupy") is None:
        return None
    if check_available and not is_available():
        return None
    return backend.device("cuda")


def device_count() -> int:
    """The number of accelerator devices that can be used (0 without one)."""
    return backend.cuda_device_count()


def _cupy_for(where: str):
    if not is_available():
        raise DeviceError(f"accelerator.{where}: no accelerator is available")
    import cupy

    return cupy


def _index(device, where: str, cupy) -> int:
    """The CUDA device index ``device`` (an int, a string or a ``ferro.device``) names; the
    current device for ``"cuda"``."""
    d = backend.parse_device(device)
    if d.type != "cuda":
        raise DeviceError(f"accelerator.{where}: expected a CUDA device, got {d}")
    if d.index is None:
        return cupy.cuda.runtime.getDevice()
    if d.index >= device_count():
        raise DeviceError(f"accelerator.{where}: there is no {d}; {device_count()} CUDA device(s)")
    return d.index


def current_device_index() -> int:
    """The index of the current accelerator device.

    Raises:
        DeviceError: no accelerator is available (PyTorch raises there too).
    """
    return _cupy_for("current_device_index").cuda.runtime.getDevice()


def set_device_index(device) -> None:
    """Make ``device`` (an index, ``"cuda:N"`` or a ``ferro.device``) the current device.

    Raises:
        DeviceError: no accelerator is available, or ``device`` names no CUDA device here.
    """
    cupy = _cupy_for("set_device_index")
    cupy.cuda.runtime.setDevice(_index(device, "set_device_index", cupy))


def synchronize(device=None) -> None:
    """Wait for the work queued on ``device`` (default: the current one); a no-op without an
    accelerator, so CPU code may call it."""
    if not is_available():
        return
    import cupy

    index = None if device is None else _index(device, "synchronize", cupy)
    cupy.cuda.Device(index).synchronize()


__all__ = [
    "is_available",
    "current_accelerator",
    "device_count",
    "current_device_index",
    "set_device_index",
    "synchronize",
]
