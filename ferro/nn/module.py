"""``Module``: parameters, buffers and submodules, with hooks and state dicts (PyTorch's API)."""

from __future__ import annotations

from collections import OrderedDict, namedtuple
from collections.abc import Callable, Iterator, Mapping

import numpy as np

from ferro._C.engine import RemovableHandle, bump_version
from ferro._C.tensor import TensorBase, wrap
from ferro._tensor import parse_to_args
from ferro.backend import device_of, is_device_array, move
from ferro.errors import (
    ArgumentError,
    ArgumentTypeError,
    DtypeError,
    NotSupportedError,
    ReadOnlyError,
    ShapeError,
)
from ferro.nn.parameter import Parameter


class _Hooks:
    """An ordered registry whose entries are removed through RemovableHandle. Iterating gives
    ``(hook, options)``: the registration's keyword options (``with_kwargs``, ...)."""

    def __init__(self) -> None:
        self.fns: dict = {}
        self.options: dict = {}

    def add(self, fn, prepend: bool = False, **options) -> RemovableHandle:
        if not callable(fn):
            raise ArgumentTypeError(
                f"register hook: the hook must be callable, got {type(fn).__name__}"
            )
        h = RemovableHandle(self.fns)
        self.fns[h.id] = fn
        if prepend:  # dicts keep insertion order: rebuild with the new hook first
            rest = [(k, v) for k, v in self.fns.items() if k != h.id]
            self.fns.clear()
            self.fns.update([(h.id, fn), *rest])
        self.options = {k: v for k, v in self.options.items() if k in self.fns}
        if any(options.values()):
            self.options[h.id] = options
        return h

    def __iter__(self):
        return iter([(fn, self.options.get(k, {})) for k, fn in list(self.fns.items())])

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


def _checked_value(where: str, key: str, value, target: TensorBase, writes: bool = True):
    """``value``'s array, once it is known to fit ``target`` (shape, dtype, array type, and
    writeable memory when the load ``writes`` into it)."""
    if isinstance(value, TensorBase):
        arr = value._data
    elif isinstance(value, (np.ndarray, np.generic)):
        arr = np.asarray(value)
    elif is_device_array(value):
        arr = value
    elif hasattr(value, "__array__") and hasattr(value, "shape"):
        # Another library's tensor: a PyTorch state_dict loads as it is (CPU tensors share
        # their memory through NumPy's array protocol; the load copies from it).
        try:
            arr = np.asarray(value)
        except Exception as exc:  # a GPU or bfloat16 torch tensor: say how to convert it
            raise ArgumentTypeError(
                f"{where}: {key!r} ({type(value).__name__}) cannot be read as a NumPy array "
                f"({exc}); convert it first (for PyTorch: .cpu().float().numpy())"
            ) from None
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
    if writes and isinstance(target._data, np.ndarray) and not target._data.flags.writeable:
        raise ReadOnlyError(f"{where}: {key!r} in the module is backed by read-only memory")
    return arr


def _check_name(where: str, kind: str, name, module: Module, store: dict) -> None:
    """The checks PyTorch makes on a parameter, buffer or submodule name before registering it
    (``KeyError`` there; an ``ArgumentError`` here, as ferro's error contract has it)."""
    if not isinstance(name, str):
        raise ArgumentTypeError(
            f"{where}: the {kind} name must be a str, got {type(name).__name__}"
        )
    if "." in name:
        raise ArgumentError(f"{where}: the {kind} name cannot contain '.', got {name!r}")
    if name == "":
        raise ArgumentError(f"{where}: the {kind} name cannot be the empty string")
    if name not in store and hasattr(module, name):
        raise ArgumentError(
            f"{where}: {type(module).__name__} already has an attribute {name!r} that is not a "
            f"{kind}"
        )


def _addindent(text: str, spaces: int) -> str:
    """``text`` with every line but the first indented (blank lines stay empty), as PyTorch
    indents nested module reprs."""
    first, *rest = text.split("\n")
    if not rest:
        return text
    pad = " " * spaces
    return "\n".join([first] + [pad + line if line.strip() else "" for line in rest])


class Module:
    """Base class of layers and models.

    Assigning a :class:`Parameter` or a ``Module`` to an attribute registers it;
    :meth:`register_buffer` registers state that is saved but not learned. Assigning to a
    registered name keeps it registered: a parameter takes a ``Parameter`` or None, a buffer a
    tensor or None, a submodule a ``Module`` or None (anything else raises
    ``ArgumentTypeError``, as PyTorch raises ``TypeError``).

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
        object.__setattr__(self, "_non_persistent_buffers_set", set())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_forward_pre_hooks", _Hooks())
        object.__setattr__(self, "_forward_hooks", _Hooks())
        object.__setattr__(self, "_backward_hooks", _Hooks())
        object.__setattr__(self, "_backward_pre_hooks", _Hooks())

    # Registration -----------------------------------------------------------------------------

    def __setattr__(self, name: str, value) -> None:
        d = self.__dict__
        if "_parameters" not in d:
            raise AttributeError(
                f"cannot assign {name!r} before Module.__init__() has run (call super().__init__())"
            )
        params, buffers, modules = d["_parameters"], d["_buffers"], d["_modules"]
        if isinstance(value, Parameter):
            self._forget(name, keep=params)
            self.register_parameter(name, value)
        elif name in params:
            if value is not None:
                raise ArgumentTypeError(
                    f"cannot assign a {type(value).__name__} as parameter {name!r} (a "
                    "ferro.nn.Parameter or None expected)"
                )
            params[name] = None
        elif isinstance(value, Module):
            self._forget(name, keep=modules)
            modules[name] = value
        elif name in modules:
            if value is not None:
                raise ArgumentTypeError(
                    f"cannot assign a {type(value).__name__} as child module {name!r} (a "
                    "ferro.nn.Module or None expected)"
                )
            modules[name] = None
        elif name in buffers:
            if value is not None and not isinstance(value, TensorBase):
                raise ArgumentTypeError(
                    f"cannot assign a {type(value).__name__} as buffer {name!r} (a Tensor or "
                    "None expected)"
                )
            buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def _forget(self, name: str, keep: dict) -> None:
        """Drop ``name`` from every store but ``keep``, before it is registered there."""
        d = self.__dict__
        for store in (d, d["_parameters"], d["_buffers"], d["_modules"]):
            if store is not keep:
                store.pop(name, None)
        d["_non_persistent_buffers_set"].discard(name)

    def __getattr__(self, name: str):
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            if store in d and name in d[store]:
                return d[store][name]
        from ferro._missing import nn_module_attribute  # PyTorch names ferro lacks, explained

        nn_module_attribute(type(self).__name__, name)

    def __delattr__(self, name: str) -> None:
        for store in (self._parameters, self._buffers, self._modules):
            if name in store:
                del store[name]
                self._non_persistent_buffers_set.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        keys = [
            *dir(type(self)),
            *self.__dict__,
            *self._parameters,
            *self._modules,
            *self._buffers,
        ]
        return sorted(k for k in set(keys) if not k[0].isdigit())

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Register ``param`` (or None, a declared but absent parameter) under ``name``."""
        _check_name("register_parameter", "parameter", name, self, self._parameters)
        if param is not None and not isinstance(param, Parameter):
            raise ArgumentTypeError(
                f"register_parameter: {name!r} must be a ferro.nn.Parameter or None, got "
                f"{type(param).__name__}"
            )
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor, persistent: bool = True) -> None:
        """Register a tensor that is part of the module's state but not learned.

        Args:
            name: the attribute name.
            tensor: a Tensor, or None (a declared but absent buffer).
            persistent: whether ``state_dict`` saves it (and ``load_state_dict`` expects it).
        """
        _check_name("register_buffer", "buffer", name, self, self._buffers)
        if tensor is not None and not isinstance(tensor, TensorBase):
            raise ArgumentTypeError(
                f"register_buffer: {name!r} must be a Tensor or None, got {type(tensor).__name__}"
            )
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        """Register a submodule (or None) under ``name``."""
        if module is not None and not isinstance(module, Module):
            raise ArgumentTypeError(
                f"add_module: {name!r} must be a Module or None, got {type(module).__name__}"
            )
        _check_name("add_module", "submodule", name, self, self._modules)
        self._modules[name] = module

    def register_module(self, name: str, module: Module | None) -> None:
        """Alias of :meth:`add_module`."""
        self.add_module(name, module)

    # Traversal -------------------------------------------------------------------------------

    def named_modules(
        self, memo: set | None = None, prefix: str = "", remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Module]]:
        """This module and every submodule, depth first (a module before its children), each
        once unless ``remove_duplicate`` is False. ``memo`` is a set of modules to skip."""
        memo = set() if memo is None else memo
        stack = [(prefix, self)]
        while stack:
            name, mod = stack.pop()
            if mod in memo:
                continue
            if remove_duplicate:
                memo.add(mod)
            yield name, mod
            children = [
                (f"{name}.{k}" if name else k, m) for k, m in mod._modules.items() if m is not None
            ]
            stack.extend(reversed(children))

    def modules(self) -> Iterator[Module]:
        """This module and every submodule, each once."""
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """The direct submodules with their names, each once."""
        memo = set()
        for k, m in self._modules.items():
            if m is not None and m not in memo:
                memo.add(m)
                yield k, m

    def children(self) -> Iterator[Module]:
        """The direct submodules, each once."""
        for _, m in self.named_children():
            yield m

    def _named_members(self, store: str, prefix: str, recurse: bool, remove_duplicate: bool):
        seen = set()
        mods = (
            self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate)
            if recurse
            else [(prefix, self)]
        )
        for mname, mod in mods:
            for k, t in getattr(mod, store).items():
                if t is None or id(t) in seen:
                    continue
                if remove_duplicate:
                    seen.add(id(t))
                yield (f"{mname}.{k}" if mname else k), t

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate=True):
        """``(name, parameter)`` pairs, each parameter once unless ``remove_duplicate`` is
        False; only this module's own with ``recurse=False``."""
        return self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        """Every parameter, each once."""
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate=True):
        """``(name, buffer)`` pairs (persistent or not), as :meth:`named_parameters`."""
        return self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[TensorBase]:
        """Every buffer, each once."""
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def get_submodule(self, target: str) -> Module:
        """The submodule at dotted path ``target`` (``""`` is this module).

        Raises:
            AttributeError: a name on the path is missing or not a Module (as in PyTorch).
        """
        mod = self
        for item in target.split(".") if target else []:
            if not hasattr(mod, item):
                raise AttributeError(f"{type(mod).__name__} has no attribute `{item}`")
            mod = getattr(mod, item)
            if not isinstance(mod, Module):
                raise AttributeError(f"`{item}` is not an nn.Module")
        return mod

    def set_submodule(self, target: str, module: Module, strict: bool = False) -> None:
        """Put ``module`` at dotted path ``target`` (``"encoder.0"``), replacing what is there;
        with ``strict``, the attribute must exist already.

        Raises:
            AttributeError: the path's parent is missing, or (``strict``) its last name.
            ArgumentTypeError: ``module`` is not a Module.
        """
        if not isinstance(module, Module):
            raise ArgumentTypeError(
                f"set_submodule: expected an nn.Module, got {type(module).__name__}"
            )
        if not target:
            raise ArgumentError("set_submodule: cannot set the module itself (target is '')")
        path, _, name = target.rpartition(".")
        owner = self.get_submodule(path)
        if strict and not hasattr(owner, name):
            raise AttributeError(f"{type(owner).__name__} has no attribute `{name}`")
        setattr(owner, name, module)

    def _owner_of(self, target: str) -> tuple[Module, str]:
        """The submodule that holds the attribute at dotted path ``target``, and its name."""
        path, _, name = target.rpartition(".")
        mod = self.get_submodule(path)
        if not hasattr(mod, name):
            raise AttributeError(f"{type(mod).__name__} has no attribute `{name}`")
        return mod, name

    def get_parameter(self, target: str) -> Parameter:
        """The parameter at dotted path ``target`` (``"encoder.0.weight"``).

        Raises:
            AttributeError: the path is missing or does not end at a Parameter.
        """
        mod, name = self._owner_of(target)
        param = getattr(mod, name)
        if not isinstance(param, Parameter):
            raise AttributeError(f"`{name}` is not an nn.Parameter")
        return param

    def get_buffer(self, target: str) -> TensorBase:
        """The buffer at dotted path ``target``.

        Raises:
            AttributeError: the path is missing or does not end at a buffer.
        """
        mod, name = self._owner_of(target)
        if name not in mod._buffers:
            raise AttributeError(f"`{name}` is not a buffer")
        return mod._buffers[name]

    def apply(self, fn: Callable[[Module], object]) -> Module:
        """Call ``fn`` on every submodule (children first, recursively) and then on this module;
        returns ``self``. The usual use is initialization:
        ``model.apply(lambda m: init.zeros_(m.bias) if isinstance(m, nn.Linear) else None)``."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # Modes and gradients -------------------------------------------------------------------

    def train(self, mode: bool = True) -> Module:
        """Set training mode (dropout active) on this module and, through their own ``train``,
        its submodules."""
        if not isinstance(mode, bool):
            raise ArgumentTypeError(
                f"{type(self).__name__}.train: mode must be a bool, got {type(mode).__name__}"
            )
        self.training = mode
        for m in self.children():
            m.train(mode)
        return self

    def eval(self) -> Module:
        """Set evaluation mode: ``train(False)``."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Set ``requires_grad`` on every parameter (freeze with False); returns ``self``."""
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
                p.grad._data[...] = 0

    # Conversion -----------------------------------------------------------------------------

    def _apply(self, fn: Callable) -> Module:
        """Replace the array of every parameter, gradient and buffer by ``fn(array)``.

        Parameters keep their identity (an optimizer built on them still holds them); a
        buffer whose array changes becomes a new tensor, as in PyTorch. All new arrays are made
        before the first is assigned, so a conversion that fails (no CUDA device, out of memory)
        leaves the module as it was.
        """
        params, buffers, seen = [], [], set()
        for mod in self.modules():
            for p in mod._parameters.values():
                if p is not None and id(p) not in seen:
                    seen.add(id(p))
                    g = None if p.grad is None else fn(p.grad._data)
                    params.append((p, fn(p._data), g))
            for k, b in mod._buffers.items():
                if b is not None:
                    buffers.append((mod, k, b, fn(b._data)))
        for p, data, g in params:
            if data is p._data and (g is None or g is p.grad._data):
                continue
            p.grad = None
            p.data = data
            if g is not None:
                p.grad = wrap(g)
        for mod, k, b, data in buffers:
            if data is not b._data:
                new = wrap(data)
                if b.requires_grad:
                    new.requires_grad_(True)
                mod._buffers[k] = new
        return self

    def share_memory(self) -> Module:
        """Move every parameter, gradient and buffer into shared memory
        (:meth:`ferro.Tensor.share_memory_`, CPU only) and return ``self``: processes the module
        is then sent to train the same weights (Hogwild), as in PyTorch."""
        params = list(self.parameters())
        grads = [p.grad for p in params if p.grad is not None]
        for t in (*params, *grads, *self.buffers()):
            t.share_memory_()
        return self

    def to(self, *args, **kwargs) -> Module:
        """Move and/or convert every parameter, gradient and buffer; returns ``self``.

        ``to(device)``, ``to(dtype)``, ``to(device, dtype)``, ``to(tensor)`` (its device and
        dtype), or the keywords ``device=``, ``dtype=`` (``non_blocking`` is accepted and
        ignored). A dtype converts the floating point tensors only (integer and bool buffers keep
        theirs) and must itself be floating point. Parameters stay the same objects.

        Raises:
            DeviceError: an unknown device, or CUDA is not available.
            DtypeError: a dtype ferro lacks (float16) or that is not floating point.
        """
        device, dtype, _ = parse_to_args("Module.to", args, kwargs, copy_allowed=False)
        if dtype is not None and dtype.kind != "f":
            raise DtypeError(
                "Module.to: only floating dtypes convert a module (only floating point "
                f"parameters and buffers are converted), got {dtype}"
            )

        def convert(arr):
            if dtype is not None and arr.dtype.kind == "f" and arr.dtype != dtype:
                arr = arr.astype(dtype)
            return arr if device is None else move(arr, device)

        return self._apply(convert)

    def type(self, dst_type) -> Module:
        """Convert EVERY parameter and buffer (integer ones too, as in PyTorch) to
        ``dst_type``: a dtype, or a type name or class as ``Tensor.type`` takes them
        (``"ferro.DoubleTensor"``, ``ferro.FloatTensor``)."""
        return self._apply(lambda arr: wrap(arr).type(dst_type)._data)

    def to_empty(self, *, device, recurse: bool = True) -> Module:
        """Give every parameter and buffer an uninitialized array of its shape and dtype on
        ``device`` (PyTorch's way out of its meta device; here it just allocates)."""
        from ferro.backend import device as as_device

        target = as_device(device)

        def empty(arr):
            return move(np.empty(arr.shape, dtype=arr.dtype), target)

        if not recurse:
            raise NotSupportedError("to_empty: recurse=False is not supported; use recurse=True")
        return self._apply(empty)

    def float(self) -> Module:
        """Convert floating point parameters and buffers to float32."""
        return self.to(np.float32)

    def double(self) -> Module:
        """Convert floating point parameters and buffers to float64."""
        return self.to(np.float64)

    def half(self) -> Module:
        """Not supported: ferro has no float16 tensors.

        Raises:
            NotSupportedError: always.
        """
        raise NotSupportedError(
            f"{type(self).__name__}.half: ferro has no float16 tensors (they hold float32, "
            "float64, int64 or bool); use .float() (float32) or .double() (float64)"
        )

    def bfloat16(self) -> Module:
        """Not supported: ferro has no bfloat16 tensors.

        Raises:
            NotSupportedError: always.
        """
        raise NotSupportedError(
            f"{type(self).__name__}.bfloat16: ferro has no bfloat16 tensors (they hold float32, "
            "float64, int64 or bool); use .float() (float32) or .double() (float64)"
        )

    def cpu(self) -> Module:
        """Move every parameter and buffer to the CPU."""
        return self.to("cpu")

    def cuda(self, device=None) -> Module:
        """Move every parameter and buffer to CUDA device ``device`` (an index, default 0, or a
        device such as ``"cuda:1"``)."""
        if device is None:
            return self.to("cuda")
        return self.to(f"cuda:{device}" if isinstance(device, int) else device)

    # Calling ---------------------------------------------------------------------------------

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args, **kwargs):
        for hook, opt in self._forward_pre_hooks:
            if opt.get("with_kwargs"):
                r = hook(self, args, kwargs)
                if r is not None:
                    if not (isinstance(r, tuple) and len(r) == 2):
                        raise ArgumentTypeError(
                            "forward pre-hook with_kwargs=True must return None or a tuple "
                            f"(args, kwargs), got {type(r).__name__}"
                        )
                    args, kwargs = r
                    args = args if isinstance(args, tuple) else (args,)
            else:
                r = hook(self, args)
                if r is not None:
                    args = r if isinstance(r, tuple) else (r,)
        try:
            if self._backward_hooks or self._backward_pre_hooks:
                from ferro.nn._backward_hooks import wrap_call

                out = wrap_call(self, args, kwargs)
            else:
                out = self.forward(*args, **kwargs)
        except BaseException:
            for hook, opt in self._forward_hooks:  # always_call hooks see the failure as None
                if opt.get("always_call"):
                    try:
                        self._forward_hook(hook, opt, args, kwargs, None)
                    except Exception:  # noqa: BLE001, S110 - the forward's error is the one raised
                        pass
            raise
        for hook, opt in self._forward_hooks:
            r = self._forward_hook(hook, opt, args, kwargs, out)
            if r is not None:
                out = r
        return out

    def _forward_hook(self, hook, opt, args, kwargs, out):
        return hook(self, args, kwargs, out) if opt.get("with_kwargs") else hook(self, args, out)

    def register_forward_pre_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False):
        """``hook(module, args) -> new args | None`` runs before ``forward``; with
        ``with_kwargs=True``, ``hook(module, args, kwargs) -> (new args, new kwargs) | None``;
        ``prepend=True`` runs it before the hooks registered so far."""
        return self._forward_pre_hooks.add(hook, prepend, with_kwargs=with_kwargs)

    def register_forward_hook(
        self,
        hook,
        *,
        prepend: bool = False,
        with_kwargs: bool = False,
        always_call: bool = False,
    ):
        """``hook(module, args, output) -> new output | None`` runs after ``forward``; with
        ``with_kwargs=True``, ``hook(module, args, kwargs, output)``; ``prepend=True`` runs it
        before the hooks registered so far; ``always_call=True`` runs it (with output None)
        also when ``forward`` raises, before the error propagates."""
        return self._forward_hooks.add(
            hook, prepend, with_kwargs=with_kwargs, always_call=always_call
        )

    def register_full_backward_hook(self, hook, prepend: bool = False):
        """``hook(module, grad_input, grad_output) -> new grad_input | None`` runs once per
        backward through this module, after the gradients w.r.t. its tensor inputs are known
        (``grad_input`` entries are None for inputs that need no gradient)."""
        return self._backward_hooks.add(hook, prepend)

    def register_full_backward_pre_hook(self, hook, prepend: bool = False):
        """``hook(module, grad_output) -> new grad_output | None`` runs once per backward
        through this module, when the gradients w.r.t. its outputs are known and before those
        w.r.t. its inputs are computed from them."""
        return self._backward_pre_hooks.add(hook, prepend)

    # State ------------------------------------------------------------------------------------

    def _state_entries(self) -> Iterator[tuple[str, Module, str, TensorBase]]:
        """``(dotted key, owning module, local name, tensor)`` for what ``state_dict`` saves:
        parameters, then persistent buffers, module by module. Like PyTorch, a module or
        parameter reachable under two names appears under both."""
        for mname, mod in self.named_modules(remove_duplicate=False):
            skip = mod._non_persistent_buffers_set
            for k, p in mod._parameters.items():
                if p is not None:
                    yield (f"{mname}.{k}" if mname else k), mod, k, p
            for k, b in mod._buffers.items():
                if b is not None and k not in skip:
                    yield (f"{mname}.{k}" if mname else k), mod, k, b

    def state_dict(self, *, destination=None, prefix: str = "", keep_vars: bool = False):
        """Parameters and persistent buffers by dotted name (arrays shared, not copied).

        Args:
            destination: a mapping to fill and return (default: a new ``OrderedDict``).
            prefix: prepended to every key.
            keep_vars: keep the parameter and buffer tensors themselves instead of detached
                tensors sharing their data.
        """
        out = OrderedDict() if destination is None else destination
        for key, _, _, t in self._state_entries():
            out[prefix + key] = t if keep_vars else t.detach()
        return out

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Copy values from ``state_dict`` into this module's parameters and buffers.

        All or nothing: every key, shape, dtype and array type is checked before the first
        value is copied, so a failed load leaves every parameter and buffer as it was. Values
        may be tensors or NumPy/CuPy arrays on either device; they are copied to the target's
        device and cast to its dtype (float64 into float32 is allowed, float into an integer
        buffer is not). With ``assign=True`` the values become the parameters and buffers
        instead (sharing their memory, keeping their dtype and device; each parameter keeps its
        ``requires_grad``), as PyTorch's ``assign``.

        Returns:
            ``(missing_keys, unexpected_keys)``, a named tuple as PyTorch returns.

        Raises:
            ArgumentError: with ``strict``, keys of the module absent from ``state_dict`` or
                keys of ``state_dict`` the module does not have; the message lists all of them.
            ShapeError: a value whose shape differs from its target's (strict or not).
            DtypeError: a value whose dtype cannot be cast to its target's within its kind.
            ArgumentTypeError: ``state_dict`` is not a mapping, or a value is not an array.
            ReadOnlyError: a target parameter or buffer holds read-only memory (not checked
                with ``assign``, which writes no memory).
        """
        where = f"{type(self).__name__}.load_state_dict"
        if not isinstance(state_dict, Mapping):
            raise ArgumentTypeError(
                f"{where}: expected a mapping of names to tensors, got {type(state_dict).__name__}"
            )
        own = list(self._state_entries())
        keys = {k for k, *_ in own}
        missing = [k for k, *_ in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in keys]
        if strict and (missing or unexpected):
            raise ArgumentError(
                f"{where}: missing keys {missing}, unexpected keys {unexpected} "
                "(strict=True; pass strict=False to load only the keys that match)"
            )
        if assign:
            new = [
                (mod, name, _assigned(where, key, state_dict[key], target))
                for key, mod, name, target in own
                if key in state_dict
            ]
            for mod, name, t in new:
                setattr(mod, name, t)
            return _IncompatibleKeys(missing, unexpected)
        checked = [
            (target, _checked_value(where, key, state_dict[key], target))
            for key, _, _, target in own
            if key in state_dict
        ]
        for target, value in checked:
            target._data[...] = move(value, device_of(target._data))
            bump_version(target)  # saved copies of the old values in a live graph are stale
        return _IncompatibleKeys(missing, unexpected)

    # Display ---------------------------------------------------------------------------------

    def extra_repr(self) -> str:
        """The text inside this module's parentheses in its repr (override in a layer)."""
        return ""

    def __repr__(self) -> str:
        extra = self.extra_repr()
        lines = extra.split("\n") if extra else []
        children = [f"({name}): {_addindent(repr(mod), 2)}" for name, mod in self._modules.items()]
        head = f"{type(self).__name__}("
        if len(lines) == 1 and not children:
            return head + lines[0] + ")"
        if not lines and not children:
            return head + ")"
        return head + "\n  " + "\n  ".join(lines + children) + "\n)"


def _assigned(where: str, key: str, value, target: TensorBase) -> TensorBase:
    """The tensor that ``load_state_dict(assign=True)`` puts in place of ``target``: the
    value's own memory (its dtype converted only when ferro has no such dtype)."""
    from ferro.creation import SUPPORTED_DTYPES

    arr = _checked_value(where, key, value, target, writes=False)
    if arr.dtype not in SUPPORTED_DTYPES:
        arr = arr.astype(target.dtype)
    if isinstance(target, Parameter):
        return Parameter(arr, requires_grad=target.requires_grad)
    t = wrap(arr)
    if target.requires_grad:
        t.requires_grad_(True)
    return t
