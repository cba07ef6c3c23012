"""Saved-tensor hooks: control what ops keep for backward.

Inside ``saved_tensors_hooks(pack, unpack)`` every array an op saves is passed (as a Tensor) to
``pack`` when the op runs, and the result is kept instead; when backward reads it, ``unpack``
gets that value and returns the Tensor (or array) to use. The innermost context wins; contexts
nest and are per thread (and per asyncio task).

The order is fixed: ``pack`` is called in the order the op saves, when the op runs; ``unpack``
is called for each saved value in the same order, every time backward reads the op's saved
values, which it does once per node, in the order the engine runs the nodes (reverse of the
dependencies: the last op of the forward first). Checkpointing is built on these hooks.
"""

from __future__ import annotations

from ferro._C import engine as _engine
from ferro.backend import device_of, is_device_array, move
from ferro.errors import ArgumentError, ArgumentTypeError


class saved_tensors_hooks:
    """Context manager installing ``pack_hook(tensor) -> object`` and
    ``unpack_hook(object) -> Tensor`` for everything saved inside it.

    Example:
        >>> x = ferro.zeros(2, requires_grad=True)
        >>> with ferro.autograd.graph.saved_tensors_hooks(lambda t: t * 1, lambda t: t):
        ...     y = ferro.exp(x)
        >>> y.sum().backward(); x.grad
        tensor([1., 1.])
    """

    def __init__(self, pack_hook, unpack_hook) -> None:
        if not callable(pack_hook) or not callable(unpack_hook):
            raise ArgumentTypeError(
                "saved_tensors_hooks: pack_hook and unpack_hook must be callable"
            )
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook
        self._tokens: list = []

    def __enter__(self):
        self._tokens.append(_engine._push_saved_hooks(self.pack_hook, self.unpack_hook))
        return self

    def __exit__(self, *exc) -> None:
        _engine._pop_saved_hooks(self._tokens.pop())


class disable_saved_tensors_hooks:
    """Inside this context ops save arrays plainly, even within ``saved_tensors_hooks``."""

    def __init__(self) -> None:
        self._tokens: list = []

    def __enter__(self):
        self._tokens.append(_engine._push_saved_hooks(None, None))
        return self

    def __exit__(self, *exc) -> None:
        _engine._pop_saved_hooks(self._tokens.pop())


def _to_host(t):
    data = t._data
    if is_device_array(data):
        return (device_of(data), move(data, "cpu"))
    return (None, data)


def _from_host(packed):
    device, data = packed
    return data if device is None else move(data, device)


class save_on_cpu(saved_tensors_hooks):
    """Keep saved GPU arrays in host memory until backward needs them (CPU arrays are kept as
    they are, without a copy).

    ``pin_memory`` and ``device_type`` are PyTorch's arguments: ferro's host copies are
    synchronous, so pinning changes nothing (as ``Tensor.pin_memory``), and CUDA is the one
    device type with its own memory.
    """

    def __init__(self, pin_memory: bool = False, device_type: str = "cuda") -> None:
        if device_type != "cuda":
            raise ArgumentError(
                f"save_on_cpu: device_type must be 'cuda' (ferro's one accelerator), got "
                f"{device_type!r}"
            )
        self.pin_memory = bool(pin_memory)
        super().__init__(_to_host, _from_host)


__all__ = ["saved_tensors_hooks", "disable_saved_tensors_hooks", "save_on_cpu"]
