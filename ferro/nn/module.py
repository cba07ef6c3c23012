"""``Module``: parameters, buffers and submodules, with hooks and state dicts (PyTorch's API)."""

from __future__ import annotations

from collections import OrderedDict, namedtuple
from collections.abc import Iterator, Mapping

import numpy as np

from ferro._C.engine import RemovableHandle, bump_version
from ferro._C.tensor import TensorBase
from ferro.errors import ArgumentError, ArgumentTypeError, DtypeError, ReadOnlyError, ShapeError
from ferro.nn.parameter import Parameter
from ferro.ops.device import device_of, move


class _Hooks:
    """An ordered registry whose entries are removed through RemovableHandle."""

    def __init__(self) -> None:
        self.fns: dict = {}

    def add(self, fn) -> RemovableHandle:
        if not callable(fn):
            raise ArgumentTypeError(
                f"register hook: the hook must be callable, got {type(fn).__name__}"
            )
        h = RemovableHandle(self.fns)
        self.fns[h.id] = fn
        return h

    def __iter__(self):
        return iter(list(self.fns.values()))

    def __bool__(self) -> bool:
        return bool(self.fns)


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What ``load_state_dict`` could not match, as PyTorch returns it."""

    __slots__ = ()

    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


def _checked_value(where: str, key: str, value, target: TensorBase):
    """``value``'s array, once it is known to fit ``target`` (shape, dtype, array type)."""
    if isinstance(value, TensorBase):
        arr = value.data
    elif isinstance(value, (np.ndarray, np.generic)):
        arr = np.asarray(value)
    elif type(value).__module__.split(".")[0] == "cupy" and hasattr(value, "dtype"):
        arr = value
    else:
        raise ArgumentTypeError(
            f"{where}: {key!r} must be a tensor or an array, got {type(value).__name__}"
        )
    if tuple(arr.shape) != tuple(target.shape):
        raise ShapeError(
            f"{where}: {key!r} has shape {tuple(arr.shape)} in the state dict but "
            f"{tuple(target.shape)} in the module"
        )
    if arr.dtype.kind not in "biuf" or not np.can_cast(arr.dtype, target.dtype, "same_kind"):
        raise DtypeError(
            f"{where}: {key!r} has dtype {arr.dtype} in the state dict, which does not cast "
            f"to the module's {target.dtype}"
        )
    if isinstance(target.data, np.ndarray) and not target.data.flags.writeable:
        raise ReadOnlyError(f"{where}: {key!r} in the module is backed by read-only memory")
    return arr


class Module:
    """Base class of layers and models.

    Assigning a :class:`Parameter` or a ``Module`` to an attribute registers it;
    :meth:`register_buffer` registers state that is saved but not learned.

    Example:
        >>> class Net(ferro.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.fc = ferro.nn.Linear(4, 2)
        ...     def forward(self, x):
        ...         return self.fc(x).relu()
    """

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_forward_pre_hooks", _Hooks())
        object.__setattr__(self, "_forward_hooks", _Hooks())
        object.__setattr__(self, "_backward_hooks", _Hooks())

    # Registration -----------------------------------------------------------------------------

    def __setattr__(self, name: str, value) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError(
                f"cannot assign {name!r} before Module.__init__() has run (call super().__init__())"
            )
        for store in (self._parameters, self._buffers, self._modules):
            store.pop(name, None)
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        else:
            object.__setattr__(self, name, value)
            return
        self.__dict__.pop(name, None)

    def __getattr__(self, name: str):
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            if store in d and name in d[store]:
                return d[store][name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        for store in (self._parameters, self._buffers, self._modules):
            if name in store:
                del store[name]
                return
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Register ``param`` (or None) under ``name``."""
        if param is not None and not isinstance(param, Parameter):
            raise ArgumentTypeError(f"register_parameter: {name!r} must be a Parameter or None")
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor, persistent: bool = True) -> None:
        """Register a tensor that is part of the state (saved by ``state_dict`` when
        ``persistent``) but not a parameter."""
        if tensor is not None and not isinstance(tensor, TensorBase):
            raise ArgumentTypeError(f"register_buffer: {name!r} must be a Tensor or None")
        self._buffers[name] = tensor
        if not persistent:
            self.__dict__.setdefault("_non_persistent", set()).add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        """Register a submodule under ``name``."""
        if module is not None and not isinstance(module, Module):
            raise ArgumentTypeError(f"add_module: {name!r} must be a Module")
        self._modules[name] = module

    # Traversal -------------------------------------------------------------------------------

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        """This module and every submodule, depth first, each once."""
        seen = set()
        stack = [(prefix, self)]
        while stack:
            name, mod = stack.pop()
            if id(mod) in seen:
                continue
            seen.add(id(mod))
            yield name, mod
            children = [
                (f"{name}.{k}" if name else k, m) for k, m in mod._modules.items() if m is not None
            ]
            stack.extend(reversed(children))

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[tuple[str, Module]]:
        for k, m in self._modules.items():
            if m is not None:
                yield k, m

    def children(self) -> Iterator[Module]:
        for _, m in self.named_children():
            yield m

    def named_parameters(self, prefix: str = "", recurse: bool = True):
        """``(name, parameter)`` pairs, each parameter once."""
        seen = set()
        mods = self.named_modules(prefix) if recurse else [(prefix, self)]
        for mname, mod in mods:
            for k, p in mod._parameters.items():
                if p is None or id(p) in seen:
                    continue
                seen.add(id(p))
                yield (f"{mname}.{k}" if mname else k), p

    def parameters(self, recurse: bool = True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = ""):
        for mname, mod in self.named_modules(prefix):
            for k, b in mod._buffers.items():
                if b is not None:
                    yield (f"{mname}.{k}" if mname else k), b

    def buffers(self):
        for _, b in self.named_buffers():
            yield b

    # Modes and gradients -------------------------------------------------------------------

    def train(self, mode: bool = True) -> Module:
        """Set training mode (dropout active) on this module and its submodules."""
        for m in self.modules():
            object.__setattr__(m, "training", bool(mode))
        return self

    def eval(self) -> Module:
        """Set evaluation mode: ``train(False)``."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients of every parameter (to None, or to zeros in place)."""
        for p in self.parameters():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.data[...] = 0

    def to(self, device=None, dtype=None) -> Module:
        """Move (or convert) every parameter and buffer in place; returns ``self``.

        ``device`` is ``"cpu"``, ``"cuda"`` or ``"cuda:N"``; ``dtype`` converts floating tensors.
        Gradients are dropped.
        """
        if device is not None:
            from ferro.ops.device import move

            for t in list(self.parameters()) + list(self.buffers()):
                t.data = move(t.data, str(device))
                t.grad = None
        if dtype is not None:
            from ferro.creation import as_dtype

            dt = as_dtype(dtype, where="Module.to")
            for t in list(self.parameters()) + list(self.buffers()):
                if t.dtype.kind == "f":
                    t.data = t.data.astype(dt)
                    t.grad = None
        return self

    # Calling ---------------------------------------------------------------------------------

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args, **kwargs):
        for hook in self._forward_pre_hooks:
            r = hook(self, args)
            if r is not None:
                args = r if isinstance(r, tuple) else (r,)
        if self._backward_hooks:
            from ferro.nn._backward_hooks import wrap_call

            out = wrap_call(self, args, kwargs)
        else:
            out = self.forward(*args, **kwargs)
        for hook in self._forward_hooks:
            r = hook(self, args, out)
            if r is not None:
                out = r
        return out

    def register_forward_pre_hook(self, hook):
        """``hook(module, args) -> new args | None`` runs before ``forward``."""
        return self._forward_pre_hooks.add(hook)

    def register_forward_hook(self, hook):
        """``hook(module, args, output) -> new output | None`` runs after ``forward``."""
        return self._forward_hooks.add(hook)

    def register_full_backward_hook(self, hook):
        """``hook(module, grad_input, grad_output) -> new grad_input | None`` runs once per
        backward through this module, after the gradients w.r.t. its tensor inputs are known
        (``grad_input`` entries are None for inputs that need no gradient)."""
        return self._backward_hooks.add(hook)

    # State ------------------------------------------------------------------------------------

    def _named_state(self) -> Iterator[tuple[str, TensorBase]]:
        """The tensors ``state_dict`` saves, by dotted name: parameters, then persistent
        buffers, module by module."""
        for mname, mod in self.named_modules():
            skip = mod.__dict__.get("_non_persistent", set())
            for k, p in mod._parameters.items():
                if p is not None:
                    yield (f"{mname}.{k}" if mname else k), p
            for k, b in mod._buffers.items():
                if b is not None and k not in skip:
                    yield (f"{mname}.{k}" if mname else k), b

    def state_dict(self) -> OrderedDict:
        """Parameters and persistent buffers by dotted name (arrays shared, not copied)."""
        return OrderedDict((k, t.detach()) for k, t in self._named_state())

    def load_state_dict(self, state_dict, strict: bool = True) -> _IncompatibleKeys:
        """Copy values from ``state_dict`` into this module's parameters and buffers.

        All or nothing: every key, shape, dtype and array type is checked before the first
        value is copied, so a failed load leaves every parameter and buffer as it was. Values
        may be tensors or NumPy/CuPy arrays on either device; they are copied to the target's
        device and cast to its dtype (float64 into float32 is allowed, float into an integer
        buffer is not).

        Returns:
            ``(missing_keys, unexpected_keys)``, a named tuple as PyTorch returns.

        Raises:
            ArgumentError: with ``strict``, keys of the module absent from ``state_dict`` or
                keys of ``state_dict`` the module does not have; the message lists all of them.
            ShapeError: a value whose shape differs from its target's (strict or not).
            DtypeError: a value whose dtype cannot be cast to its target's within its kind.
            ArgumentTypeError: ``state_dict`` is not a mapping, or a value is not an array.
            ReadOnlyError: a target parameter or buffer holds read-only memory.
        """
        where = f"{type(self).__name__}.load_state_dict"
        if not isinstance(state_dict, Mapping):
            raise ArgumentTypeError(
                f"{where}: expected a mapping of names to tensors, got {type(state_dict).__name__}"
            )
        own = OrderedDict(self._named_state())
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        if strict and (missing or unexpected):
            raise ArgumentError(
                f"{where}: missing keys {missing}, unexpected keys {unexpected} "
                "(strict=True; pass strict=False to load only the keys that match)"
            )
        checked = [
            (target, _checked_value(where, k, state_dict[k], target))
            for k, target in own.items()
            if k in state_dict
        ]
        for target, value in checked:
            target.data[...] = move(value, device_of(target.data))
            bump_version(target)  # saved copies of the old values in a live graph are stale
        return _IncompatibleKeys(missing, unexpected)

    # Display ---------------------------------------------------------------------------------

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = []
        for name, mod in self._modules.items():
            sub = repr(mod).replace("\n", "\n  ")
            lines.append(f"  ({name}): {sub}")
        head = f"{type(self).__name__}({self.extra_repr()}"
        if not lines:
            return head + ")"
        return head + "\n" + "\n".join(lines) + "\n)"
