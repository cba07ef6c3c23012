"""Random number generators, as ``torch.Generator`` and ``torch.random``.

Every random op in ferro (``rand``, ``randn``, dropout, initializers, ``DataLoader`` shuffling)
draws from :data:`default_generator` unless it is given its own ``generator=``, so
``ferro.manual_seed(s)`` makes a run reproducible and ``get_rng_state``/``set_rng_state`` let
checkpointing replay dropout exactly. Like PyTorch, a generator starts from a fixed seed, so an
unseeded script is reproducible too. A :class:`Generator` wraps a NumPy ``PCG64`` generator; the
same seed gives the same numbers as ``numpy.random.Generator(numpy.random.PCG64(seed))``, not
PyTorch's (a different algorithm).

Threads: a generator may be shared between threads. Each draw, ``manual_seed`` and
``set_state`` holds the generator's lock (NumPy's bit-generator lock), so no draw sees a
half-written state, but which thread gets which numbers depends on the interleaving; give each
thread its own :class:`Generator` for reproducible results. ``fork_rng`` restores the process-wide
state on exit, also for draws other threads made inside the block.
"""

from __future__ import annotations

import contextlib
import copy
import secrets

import numpy as np

from ferro.errors import ArgumentError, ArgumentTypeError, DeviceError, NotSupportedError

DEFAULT_SEED = 67280421310721  # PyTorch's default seed

_SEED_MIN, _SEED_MAX = -(2**63), 2**64 - 1


def _seed_value(seed, where: str) -> int:
    """A seed as PyTorch takes it: an int in [-2**63, 2**64 - 1]; a negative seed s means
    s + 2**64 (so -1 and 2**64 - 1 seed the same stream)."""
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, (bool, np.bool_)):
        raise ArgumentTypeError(f"{where}: seed must be an int, got {type(seed).__name__}")
    seed = int(seed)
    if not _SEED_MIN <= seed <= _SEED_MAX:
        raise ArgumentError(f"{where}: seed must be in [-2**63, 2**64 - 1], got {seed}")
    return seed + 2**64 if seed < 0 else seed


class Generator:
    """A random number generator for the CPU, as ``torch.Generator``.

    Pass it as ``generator=`` to a random function, sampler or ``DataLoader`` to draw from it
    instead of the default generator. ``manual_seed`` returns the generator, so
    ``g = ferro.Generator().manual_seed(0)`` works as in PyTorch.

    Args:
        device: ``"cpu"`` (or a device object naming the CPU). Random tensors for a CUDA device
            are drawn on the CPU and moved, so a CUDA generator is not supported.

    Example:
        >>> g = ferro.Generator().manual_seed(0)
        >>> a = ferro.rand(3, generator=g)
        >>> bool((ferro.rand(3, generator=g.manual_seed(0)) == a).all())
        True
    """

    def __init__(self, device="cpu") -> None:
        if str(device) != "cpu":
            raise NotSupportedError(
                f"Generator: ferro's generators live on the CPU, got device {device!r}; random "
                "tensors for a CUDA device are drawn on the CPU and moved (device='cpu')"
            )
        self._np = np.random.Generator(np.random.PCG64(DEFAULT_SEED))
        self._initial_seed = DEFAULT_SEED

    @property
    def device(self) -> str:
        """The device the generator draws for: always ``"cpu"``."""
        return "cpu"

    def manual_seed(self, seed: int) -> Generator:
        """Seed the generator (an int in [-2**63, 2**64 - 1]) and return it."""
        seed = _seed_value(seed, "manual_seed")
        fresh = np.random.PCG64(seed).state
        with self._np.bit_generator.lock:
            self._np.bit_generator.state = fresh
            self._initial_seed = seed
        return self

    def seed(self) -> int:
        """Seed the generator from the operating system's entropy and return that seed."""
        seed = secrets.randbits(64)
        self.manual_seed(seed)
        return seed

    def initial_seed(self) -> int:
        """The seed last given to :meth:`manual_seed` or chosen by :meth:`seed`."""
        return self._initial_seed

    def get_state(self) -> dict:
        """A copy of the generator's state (NumPy's ``PCG64`` state dict); restore it with
        :meth:`set_state`. ``ferro.save`` can store it."""
        with self._np.bit_generator.lock:
            return copy.deepcopy(self._np.bit_generator.state)

    def set_state(self, state: dict) -> Generator:
        """Restore a state returned by :meth:`get_state` (or ``ferro.get_rng_state``).

        Raises:
            ArgumentTypeError: ``state`` is not such a state; the generator is unchanged.
        """
        if not isinstance(state, dict) or state.get("bit_generator") != "PCG64":
            raise ArgumentTypeError(
                "set_state: expected a state dict returned by get_state() or "
                f"ferro.get_rng_state(), got {type(state).__name__}"
            )
        probe = np.random.PCG64()  # validates every field before the generator changes
        try:
            probe.state = copy.deepcopy(state)
        except (KeyError, TypeError, ValueError) as exc:
            raise ArgumentTypeError(f"set_state: not a valid PCG64 state dict ({exc!r})") from None
        with self._np.bit_generator.lock:
            self._np.bit_generator.state = probe.state
        return self

    def __repr__(self) -> str:
        return f"<ferro.Generator device='cpu' initial_seed={self._initial_seed}>"


# What random functions draw from when they are given no generator (``torch.default_generator``).
default_generator = Generator()


def numpy_generator(generator: Generator | None = None, op: str = "random") -> np.random.Generator:
    """The NumPy generator behind ``generator`` (the default generator for None), for ferro's
    random functions to draw from.

    Raises:
        ArgumentTypeError: ``generator`` is neither None nor a :class:`Generator`; names ``op``.
    """
    if generator is None:
        return default_generator._np
    if not isinstance(generator, Generator):
        raise ArgumentTypeError(
            f"{op}: generator must be a ferro.Generator or None, got {type(generator).__name__}"
        )
    return generator._np


def manual_seed(seed: int) -> Generator:
    """Seed the default generator and return it.

    Example:
        >>> _ = ferro.manual_seed(0); a = ferro.rand(3)
        >>> _ = ferro.manual_seed(0); bool((ferro.rand(3) == a).all())
        True
    """
    return default_generator.manual_seed(seed)


def seed() -> int:
    """Seed the default generator from the operating system's entropy and return the seed."""
    return default_generator.seed()


def initial_seed() -> int:
    """The default generator's seed (set by :func:`manual_seed` or :func:`seed`)."""
    return default_generator.initial_seed()


def get_rng_state() -> dict:
    """A copy of the default generator's state (restore it with :func:`set_rng_state`)."""
    return default_generator.get_state()


def set_rng_state(state: dict) -> None:
    """Restore a state returned by :func:`get_rng_state`."""
    default_generator.set_state(state)


def _device_index(d, where: str) -> int:
    """A CUDA device named as an int, ``"cuda:N"`` or a device object, checked against the
    devices CuPy sees (importing it: a device was named)."""
    from ferro import cuda

    spec = str(d)
    if isinstance(d, (int, np.integer)) and not isinstance(d, bool):
        index = int(d)
    elif spec.startswith("cuda:") and spec[5:].isdigit():
        index = int(spec[5:])
    else:
        raise ArgumentTypeError(
            f"{where}: devices must be CUDA device indices or 'cuda:N', got {d!r}"
        )
    count = cuda.device_count()
    if not 0 <= index < count:
        raise DeviceError(f"{where}: no CUDA device {index} ({count} visible)")
    return index


@contextlib.contextmanager
def fork_rng(devices=None, enabled: bool = True, device_type: str | None = None):
    """Run a block with the random state forked: on exit, the default CPU generator and the CUDA
    devices' generators are back where they were on entry, as ``torch.random.fork_rng``.

    Args:
        devices: the CUDA devices whose generators to restore (ints or ``"cuda:N"``). None
            restores every device generator without importing CuPy.
        enabled: False runs the block without forking.
        device_type: the accelerator type: None or ``"cuda"`` (the only one ferro has).

    Only the default generator is forked, not a :class:`Generator` given to a function.

    Example:
        >>> with ferro.random.fork_rng():
        ...     noise = ferro.rand(3)   # the default generator is restored after the block
    """
    if device_type not in (None, "cuda"):
        raise NotSupportedError(
            f"fork_rng: ferro's accelerator is CUDA, got device_type={device_type!r}"
        )
    if not enabled:
        yield
        return
    from ferro import cuda

    if devices is None:
        device_states = cuda.get_all_rng_states()
    else:
        indices = [_device_index(d, "fork_rng") for d in devices]
        device_states = {i: cuda.get_rng_state(i) for i in indices}
    cpu_state = get_rng_state()
    try:
        yield
    finally:
        set_rng_state(cpu_state)
        if devices is None:
            cuda.set_all_rng_states(device_states)
        else:
            for i, st in device_states.items():
                cuda.set_rng_state(st, i)


__all__ = [
    "Generator",
    "default_generator",
    "manual_seed",
    "seed",
    "initial_seed",
    "get_rng_state",
    "set_rng_state",
    "fork_rng",
]
