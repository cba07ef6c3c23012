"""``ferro.cuda``: the CuPy backend's device functions and kernels.

``import ferro`` never imports CuPy; everything here imports it on first use and answers
sensibly without it (``is_available()`` is False, ``device_count()`` is 0).
"""

from __future__ import annotations

from ferro import accelerator as _accelerator
from ferro import backend as _backend


def is_available() -> bool:
    """True if CuPy is installed and sees at least one CUDA device."""
    return _backend.cuda_device_count() > 0


def device_count() -> int:
    """Number of visible CUDA devices (0 without CuPy or a driver)."""
    return _backend.cuda_device_count()


def synchronize(device=None) -> None:
    """Wait for all work on ``device`` (an index, ``"cuda:N"`` or a ``ferro.device``; default:
    the current one) to finish; a no-op without CUDA."""
    _accelerator.synchronize(device)


# Per-device generator state: (seed, offset) for the counter-based dropout kernel.
_states: dict[int, list[int]] = {}


def manual_seed_all(seed: int) -> None:
    """Seed the generator of every device (used by dropout masks on the GPU)."""
    for d in range(max(device_count(), 1)):
        _states[d] = [int(seed), 0]


def get_all_rng_states() -> dict:
    """Every device generator's state (checkpoint saves and restores these)."""
    return {d: tuple(st) for d, st in _states.items()}


def set_all_rng_states(states: dict) -> None:
    """Restore states from :func:`get_all_rng_states`."""
    _states.clear()
    _states.update({d: list(st) for d, st in states.items()})


def get_rng_state(device: int = 0) -> tuple[int, int]:
    """The (seed, offset) state of ``device``'s generator."""
    return tuple(_states.setdefault(device, [0, 0]))


def set_rng_state(state, device: int = 0) -> None:
    """Restore a state from :func:`get_rng_state`."""
    seed, offset = state
    _states[device] = [int(seed), int(offset)]


__all__ = [
    "is_available",
    "device_count",
    "synchronize",
    "manual_seed_all",
    "get_rng_state",
    "set_rng_state",
]


def __getattr__(name: str):
    # ferro.cuda.FloatTensor & co. (ferro.legacy), imported on first use: ferro.legacy needs the
    # tensor class, which is not built yet when ``import ferro`` imports this module.
    from ferro.legacy import CUDA_TYPES

    if name in CUDA_TYPES:
        return CUDA_TYPES[name]
    raise AttributeError(f"module 'ferro.cuda' has no attribute {name!r}")
