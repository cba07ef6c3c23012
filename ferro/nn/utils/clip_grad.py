"""Gradient clipping."""

from __future__ import annotations

import math

import numpy as np

from ferro.errors import GradientError


def _grads(parameters):
    from ferro._C.tensor import TensorBase

    if isinstance(parameters, TensorBase):
        parameters = [parameters]
    return [p.grad for p in parameters if p.grad is not None]


def clip_grad_norm_(
    parameters,
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
):
    """Scale the gradients in place so that their joint ``norm_type`` norm is at most
    ``max_norm``; returns the norm before clipping as a 0-d tensor of the gradients' dtype and
    device, as PyTorch does (``clip_grad_norm_(...).item()`` in training loops).
    ``foreach`` is accepted for PyTorch's signature and changes nothing."""
    from ferro.creation import tensor

    grads = _grads(parameters)
    if not grads:
        return tensor(0.0)
    if math.isinf(norm_type):
        total = max(float(np.abs(g._data).max()) if g._data.size else 0.0 for g in grads)
    else:
        total = sum(float((np.abs(g._data) ** norm_type).sum()) for g in grads) ** (1 / norm_type)
    if error_if_nonfinite and not math.isfinite(total):
        raise GradientError(f"clip_grad_norm_: the total norm of the gradients is {total}")
    scale = max_norm / (total + 1e-6)
    if scale < 1:
        for g in grads:
            data = g._data
            data *= scale
    return tensor(total, dtype=grads[0].dtype, device=grads[0].device)


def clip_grad_value_(parameters, clip_value: float) -> None:
    """Clip every gradient element to ``[-clip_value, clip_value]`` in place."""
    for g in _grads(parameters):
        np.clip(g._data, -clip_value, clip_value, out=g._data)


__all__ = [
    "clip_grad_norm_",
    "clip_grad_value_",
]
