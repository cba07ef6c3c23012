"""``Optimizer``: parameter groups, per-parameter state, ``zero_grad`` and state dicts.

Each optimizer implements one update twice: ``_update_fused`` (a nogil kernel from
``ferro._C.cpu_kernels``, one pass over param, grad and state, for arrays that pass
``cpu_kernels.same_layout``) and ``_update_generic`` (in-place array expressions: the
reference, and the path for CuPy, other layouts or byte orders).
``ferro._C.engine.set_overrides_enabled(False)`` forces the generic one. Both write into the
parameter's own memory, so ``step`` first checks that every parameter and state array it will
write is writeable (docs/design.md, "Kernel accept checks").
"""

from __future__ import annotations

import numpy as np

from ferro._C import cpu_kernels
from ferro._C.engine import bump_version, overrides_enabled
from ferro._C.tensor import TensorBase
from ferro.autograd.grad_mode import no_grad
from ferro.errors import (
    ArgumentError,
    ArgumentTypeError,
    DtypeError,
    NotSupportedError,
    ReadOnlyError,
    ShapeError,
)


def _read_only(arr) -> bool:
    # CuPy arrays have no writeable flag: device memory is always writeable.
    return isinstance(arr, np.ndarray) and not arr.flags.writeable


class Optimizer:
    """Base class. ``params`` is an iterable of tensors or of dicts (parameter groups) with a
    ``"params"`` key and per-group hyperparameters."""

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
            if not p.requires_grad or not p.is_leaf:
                raise ArgumentError(
                    f"{type(self).__name__}: can only optimize leaf tensors that require grad, "
                    f"got a {'non-leaf' if not p.is_leaf else 'leaf'} tensor of shape "
                    f"{tuple(p.shape)} with requires_grad={p.requires_grad}"
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
                if p.grad is not None and _read_only(p.grad.data):
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
                    p.grad.data[...] = 0

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
                self._begin_step(p.data, state, group)
                g = p.grad.data
                arrays = (p.data, g) + tuple(v for v in state.values() if isinstance(v, np.ndarray))
                if overrides_enabled() and cpu_kernels.same_layout(arrays):
                    self._update_fused(p.data, g, state, group)
                else:
                    self._update_generic(p.data, g, state, group)
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
                data, g = p.data, grad.data
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
        data, g = p.data, p.grad.data
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

    def _update_fused(self, p, g, state, group):
        raise NotSupportedError(f"{type(self).__name__} does not implement _update_fused")

    def _update_generic(self, p, g, state, group):
        raise NotSupportedError(f"{type(self).__name__} does not implement _update_generic")

    def state_dict(self) -> dict:
        """``{"state": {index: {...}}, "param_groups": [...]}``, parameters by index."""
        index = {}
        groups = []
        for g in self.param_groups:
            ids = []
            for p in g["params"]:
                index.setdefault(id(p), len(index))
                ids.append(index[id(p)])
            groups.append({**{k: v for k, v in g.items() if k != "params"}, "params": ids})
        state = {}
        for g in self.param_groups:
            for p in g["params"]:
                if p in self.state:
                    state[index[id(p)]] = {
                        k: (v.copy() if isinstance(v, np.ndarray) else v)
                        for k, v in self.state[p].items()
                    }
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore a ``state_dict()`` taken from an optimizer over the same parameters."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups) or any(
            len(a["params"]) != len(b["params"])
            for a, b in zip(groups, self.param_groups, strict=True)
        ):
            raise ValueError("load_state_dict: the parameter groups do not match this optimizer")
        by_index = {}
        for saved, own in zip(groups, self.param_groups, strict=True):
            for i, p in zip(saved["params"], own["params"], strict=True):
                by_index[int(i)] = p
            for k, v in saved.items():
                if k != "params":
                    own[k] = v
        self.state = {}
        for i, st in state_dict["state"].items():
            p = by_index[int(i)]
            self.state[p] = {}
            for k, v in st.items():
                if isinstance(v, TensorBase):
                    v = v.data
                if isinstance(v, np.ndarray) and v.ndim > 0:
                    if v.shape != p.shape:
                        from ferro.errors import ShapeError

                        raise ShapeError(
                            f"load_state_dict: state {k!r} of parameter {i} has "
                            f"shape {v.shape}, the parameter {p.shape}"
                        )
                    v = v.astype(p.dtype, copy=True)
                elif isinstance(v, np.ndarray):
                    v = v.item()
                self.state[p][k] = v

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, g in enumerate(self.param_groups):
            hp = ", ".join(f"{k}={v}" for k, v in g.items() if k != "params")
            lines.append(f"  group {i}: {len(g['params'])} params, {hp}")
        return "\n".join(lines) + "\n)"
