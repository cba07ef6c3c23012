"""``Optimizer``: parameter groups, per-parameter state, ``zero_grad`` and state dicts.

Each optimizer implements one update twice: ``_update_fused`` (the backend's fused kernel named
by :attr:`Optimizer.kernel`, one pass over param, grad and state) and ``_update_generic``
(in-place array expressions: the reference, and the path for other layouts, byte orders or
backends without the kernel). The choice goes through the ops' override mechanism
(``ferro.ops.fused.kernel_for``): the same switch, ``set_overrides_enabled``, and the same
accept predicate. Both write into the parameter's own memory, so ``step`` first checks that every
parameter and state array it will write is writeable (docs/design.md, "Kernel accept checks").
"""

from __future__ import annotations

import numpy as np

from ferro._C.engine import bump_version
from ferro._C.tensor import TensorBase
from ferro.autograd.grad_mode import no_grad
from ferro.backend import device_of, is_array, move
from ferro.errors import (
    ArgumentError,
    ArgumentTypeError,
    DtypeError,
    NotSupportedError,
    ReadOnlyError,
    ShapeError,
)
from ferro.ops.fused import kernel_for


def _read_only(arr) -> bool:
    # CuPy arrays have no writeable flag: device memory is always writeable.
    return isinstance(arr, np.ndarray) and not arr.flags.writeable


class Optimizer:
    """Base class. ``params`` is an iterable of tensors or of dicts (parameter groups) with a
    ``"params"`` key and per-group hyperparameters."""

    #: Name of the fused update kernel (``ferro.ops.fused.kernel_for``); None: generic only.
    kernel: str | None = None

    def __init__(self, params, defaults: dict) -> None:
        self.defaults = dict(defaults)
        self.param_groups: list[dict] = []
        self.state: dict = {}
        params = list(params)
        if not params:
            raise ArgumentError(f"{type(self).__name__}: got an empty parameter list")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        for g in groups:
            self.add_param_group(g)

    def add_param_group(self, group: dict) -> None:
        """Add a group of parameters with its own hyperparameters (defaults fill the rest)."""
        params = group["params"]
        params = [params] if isinstance(params, TensorBase) else list(params)
        for p in params:
            if not isinstance(p, TensorBase):
                raise ArgumentTypeError(
                    f"{type(self).__name__}: parameters must be tensors, got {type(p).__name__}"
                )
            # A leaf that does not require grad is accepted, as in PyTorch: it gets no
            # gradient, and a step leaves it (the autograd tutorial freezes a model's body and
            # still hands every parameter to SGD); requires_grad may also be turned on later.
            if not p.is_leaf:
                raise ArgumentError(
                    f"{type(self).__name__}: can only optimize leaf tensors, got a non-leaf "
                    f"tensor of shape {tuple(p.shape)}"
                )
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in params):
            raise ArgumentError(f"{type(self).__name__}: a parameter appears in two groups")
        full = {**self.defaults, **{k: v for k, v in group.items() if k != "params"}}
        full["params"] = params
        self._check(full)
        self.param_groups.append(full)

    def _check(self, group: dict) -> None:
        if group.get("lr", 0.0) < 0:
            raise ArgumentError(
                f"{type(self).__name__}: invalid learning rate {group['lr']}; expected lr >= 0"
            )

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients (to None, or to zeros in place: then a read-only gradient, checked
        before any is cleared, raises ``ReadOnlyError``)."""
        params = [p for g in self.param_groups for p in g["params"]]
        if not set_to_none:
            for i, p in enumerate(params):
                if p.grad is not None and _read_only(p.grad._data):
                    raise ReadOnlyError(
                        f"{type(self).__name__}.zero_grad: the gradient of parameter {i} (shape "
                        f"{tuple(p.shape)}) is read-only and cannot be zeroed in place; use "
                        "zero_grad(set_to_none=True)"
                    )
        for p in params:
            if p.grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    p.grad._data[...] = 0

    def step(self, closure=None):
        """Update every parameter that has a gradient; ``closure`` re-evaluates the loss.

        All parameters are checked before any is changed (:meth:`_to_update`), so a step that
        raises leaves every parameter, every state and every step count as it was.
        """
        loss = None
        if closure is not None:
            from ferro.autograd.grad_mode import enable_grad

            with enable_grad():
                loss = closure()
        with no_grad():
            for p, group in self._to_update():
                state = self.state.setdefault(p, {})
                self._begin_step(p._data, state, group)
                g = p.grad._data
                arrays = (p._data, g) + tuple(v for v in state.values() if is_array(v))
                kernel = kernel_for(self.kernel, arrays) if self.kernel else None
                if kernel is not None:
                    self._update_fused(kernel, p._data, g, state, group)
                else:
                    self._update_generic(p._data, g, state, group)
                bump_version(p)  # saved copies of p in a live graph are now stale
        return loss

    def _to_update(self) -> list:
        """The ``(parameter, group)`` pairs this step updates, once each is known to be safe:
        the gradient matches the parameter's shape and dtype, and the parameter and every state
        array the update writes in place are writeable (a read-only memory map would fault,
        ``np.frombuffer`` data would be silently changed)."""
        todo = []
        state = self.state
        for group in self.param_groups:
            for p in group["params"]:
                grad = p.grad
                if grad is None:
                    continue
                data, g = p._data, grad._data
                if g.shape != data.shape or g.dtype != data.dtype or _read_only(data):
                    raise self._refusal(p)
                if p in state:
                    for v in state[p].values():
                        if _read_only(v):
                            raise self._refusal(p)
                todo.append((p, group))
        return todo

    def _refusal(self, p) -> Exception:
        """The error for a parameter ``_to_update`` refused, naming it by its index (as in
        :meth:`state_dict`), shape and dtype."""
        index = [id(q) for g in self.param_groups for q in g["params"]].index(id(p))
        data, g = p._data, p.grad._data
        where = (
            f"{type(self).__name__}.step: parameter {index} ({data.dtype}, "
            f"shape {tuple(data.shape)})"
        )
        if g.shape != data.shape:
            return ShapeError(f"{where} has a gradient of shape {tuple(g.shape)}")
        if g.dtype != data.dtype:
            return DtypeError(f"{where} has a gradient of dtype {g.dtype}")
        if _read_only(data):
            return ReadOnlyError(
                f"{where} is read-only (a read-only memory map or np.frombuffer data, for "
                "example), and the step writes it in place; make the parameter from a "
                "writeable copy (array.copy())"
            )
        key = next(k for k, v in self.state[p].items() if _read_only(v))
        return ReadOnlyError(f"{where}: its state {key!r} is read-only, and the step writes it")

    def _begin_step(self, p, state, group):
        """Create the parameter's state on its first step and advance its step count, once
        per step whichever update runs (so the layout check sees the state arrays too)."""

    def _update_fused(self, kernel, p, g, state, group):
        raise NotSupportedError(f"{type(self).__name__} does not implement _update_fused")

    def _update_generic(self, p, g, state, group):
        raise NotSupportedError(f"{type(self).__name__} does not implement _update_generic")

    def state_dict(self) -> dict:
        """``{"state": {index: {...}}, "param_groups": [...]}``, parameters by index.

        A deep copy: state arrays (NumPy or CuPy, copied on their own device) and
        hyper-parameters do not change when the optimizer steps on.
        """
        import copy

        index = {}
        groups: list = []
        for g in self.param_groups:
            ids = []
            for p in g["params"]:
                index.setdefault(id(p), len(index))
                ids.append(index[id(p)])
            groups.append({**_copy_hyper(g), "params": ids})
        state = {}
        for g in self.param_groups:
            for p in g["params"]:
                if p in self.state:
                    state[index[id(p)]] = {
                        k: (v.copy() if is_array(v) else copy.deepcopy(v))
                        for k, v in self.state[p].items()
                    }
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict) -> None:
        """Restore a ``state_dict()`` taken from an optimizer over parameters of the same shapes.

        All or nothing: the group structure (number of groups, parameters per group), every
        state entry and every state array's shape and dtype are checked first; a load that
        fails leaves the optimizer's state and hyper-parameters as they were. State arrays are
        copied to their parameter's device and dtype; ``"step"`` becomes an int.

        Raises:
            ArgumentTypeError: ``state_dict`` (or a part of it) is not the mapping or list
                ``state_dict()`` returns.
            ArgumentError: the groups or parameter indices do not match this optimizer, or a
                loaded group's hyper-parameters are invalid.
            ShapeError: a state array whose shape differs from its parameter's.
            DtypeError: a state array that is not a bool, integer or float array castable to
                its parameter's dtype.
        """
        from collections.abc import Mapping

        from ferro.errors import ArgumentError, ArgumentTypeError

        where = f"{type(self).__name__}.load_state_dict"
        if not (isinstance(state_dict, Mapping) and {"state", "param_groups"} <= set(state_dict)):
            raise ArgumentTypeError(
                f"{where}: expected a mapping with 'state' and 'param_groups' (what state_dict() "
                f"returns), got {type(state_dict).__name__}"
            )
        saved_groups, saved_state = state_dict["param_groups"], state_dict["state"]
        if not isinstance(saved_groups, (list, tuple)) or not isinstance(saved_state, Mapping):
            raise ArgumentTypeError(
                f"{where}: 'param_groups' must be a list and 'state' a mapping, got "
                f"{type(saved_groups).__name__} and {type(saved_state).__name__}"
            )
        if len(saved_groups) != len(self.param_groups):
            raise ArgumentError(
                f"{where}: the state dict has {len(saved_groups)} parameter groups, this "
                f"optimizer {len(self.param_groups)}"
            )
        by_index = {}
        new_groups = []
        for gi, (saved, own) in enumerate(zip(saved_groups, self.param_groups, strict=True)):
            ids = saved.get("params") if isinstance(saved, Mapping) else None
            if not isinstance(ids, (list, tuple)) or not all(
                type(i) is int
                for i in ids  # bool is not an index
            ):
                raise ArgumentTypeError(
                    f"{where}: parameter group {gi} must be a mapping with a list of int "
                    f"indices under 'params'"
                )
            if len(ids) != len(own["params"]):
                raise ArgumentError(
                    f"{where}: parameter group {gi} has {len(ids)} parameters in the state "
                    f"dict, {len(own['params'])} in this optimizer"
                )
            for i, p in zip(ids, own["params"], strict=True):
                if i in by_index:
                    raise ArgumentError(f"{where}: parameter index {i} appears twice")
                by_index[i] = p
            group = {k: v for k, v in own.items() if k != "params"}
            group.update(_copy_hyper(saved))
            group["params"] = own["params"]
            try:
                self._check(group)
            except ValueError as exc:
                raise ArgumentError(f"{where}: parameter group {gi}: {exc}") from None
            new_groups.append(group)
        new_state = {}
        for i, entry in saved_state.items():
            if type(i) is not int or i not in by_index:
                raise ArgumentError(
                    f"{where}: the state dict has state for parameter {i!r}, which no "
                    "parameter group lists"
                )
            if not isinstance(entry, Mapping):
                raise ArgumentTypeError(
                    f"{where}: the state of parameter {i} must be a mapping, got "
                    f"{type(entry).__name__}"
                )
            p = by_index[i]
            new_state[p] = {k: _state_value(where, i, k, v, p) for k, v in entry.items()}
        # Everything is checked and copied: commit. The group dicts are updated in place, so a
        # scheduler holding them sees the loaded values.
        for own, group in zip(self.param_groups, new_groups, strict=True):
            own.clear()
            own.update(group)
        self.state = new_state

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, g in enumerate(self.param_groups):
            hp = ", ".join(f"{k}={v}" for k, v in g.items() if k != "params")
            lines.append(f"  group {i}: {len(g['params'])} params, {hp}")
        return "\n".join(lines) + "\n)"


def _copy_hyper(group) -> dict:
    """A deep copy of a saved parameter group's hyper-parameters (everything but ``params``)."""
    import copy

    return copy.deepcopy({k: v for k, v in group.items() if k != "params"})


def _state_value(where: str, i: int, key, v, p):
    """One loaded state value, checked against parameter ``p`` and copied: arrays onto ``p``'s
    device and dtype, ``"step"`` as an int, anything else deep-copied."""
    import copy

    if isinstance(v, TensorBase):
        v = v._data
    elif not is_array(v) and hasattr(v, "__array__") and hasattr(v, "shape"):
        # Another library's CPU tensor (a PyTorch optimizer's state_dict: its "step" is a 0-d
        # float tensor, its moments tensors), read through NumPy's array protocol.
        v = np.asarray(v)
    if key == "step":
        scalar = isinstance(v, np.generic) or (is_array(v) and v.shape == ())
        step = v.item() if scalar else v
        if isinstance(step, float) and step.is_integer():  # PyTorch saves steps as floats
            step = int(step)
        if type(step) is not int or step < 0:
            raise ArgumentError(
                f"{where}: 'step' of parameter {i} must be a non-negative int, got {v!r}"
            )
        return step
    if not is_array(v):
        return copy.deepcopy(v)
    if tuple(v.shape) != tuple(p.shape):
        raise ShapeError(
            f"{where}: state {key!r} of parameter {i} has shape {tuple(v.shape)}, the "
            f"parameter {tuple(p.shape)}"
        )
    target = p._data.dtype
    if v.dtype.kind not in "biuf" or not np.can_cast(v.dtype, target, "same_kind"):
        raise DtypeError(
            f"{where}: state {key!r} of parameter {i} has dtype {v.dtype}, which does not "
            f"cast to the parameter's {target}"
        )
    moved = move(v, device_of(p._data))
    return moved.astype(target, copy=moved is v)
