"""ferro's own random number generator (one per process for the CPU).

Every random op in ferro (``rand``, ``randn``, dropout, initializers, ``DataLoader`` shuffling)
draws from this generator, so ``ferro.manual_seed(s)`` makes a run reproducible and
``get_rng_state``/``set_rng_state`` let checkpointing replay dropout exactly. Like PyTorch, the
generator starts from a fixed seed, so an unseeded script is reproducible too.
"""

from __future__ import annotations

import copy

import numpy as np

from ferro.errors import ArgumentTypeError

DEFAULT_SEED = 67280421310721

_generator = np.random.Generator(np.random.PCG64(DEFAULT_SEED))


def default_generator() -> np.random.Generator:
    """The NumPy ``Generator`` behind ferro's CPU random ops."""
    return _generator


def manual_seed(seed: int) -> np.random.Generator:
    """Seed ferro's CPU generator.

    Example:
        >>> ferro.manual_seed(0); a = ferro.rand(3)
        >>> ferro.manual_seed(0); bool((ferro.rand(3).numpy() == a.numpy()).all())
        True
    """
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise ArgumentTypeError(f"manual_seed: seed must be an int, got {type(seed).__name__}")
    _generator.bit_generator.state = np.random.PCG64(int(seed)).state
    return _generator


def get_rng_state() -> dict:
    """A copy of the generator's state (restore it with :func:`set_rng_state`)."""
    return copy.deepcopy(_generator.bit_generator.state)


def set_rng_state(state: dict) -> None:
    """Restore a state returned by :func:`get_rng_state`."""
    if not isinstance(state, dict) or state.get("bit_generator") != "PCG64":
        raise ArgumentTypeError(
            "set_rng_state: expected a state dict returned by ferro.get_rng_state()"
        )
    _generator.bit_generator.state = copy.deepcopy(state)
