"""Activation checkpointing: trade compute for memory, non-reentrant.

``checkpoint(fn, *args)`` runs ``fn`` with the real autograd graph, but inside saved-tensor
hooks whose ``pack`` keeps only an index (and the shape and dtype) of each array an op saves.
When backward first reads a saved array of that region, ``unpack`` recomputes ``fn`` once, with
ferro's CPU generator and every CUDA device generator set back to their states at the original
forward (so dropout masks match bit for bit) and the caller's states restored afterwards. It
hands out the recomputed arrays by index, freeing them as they are used.

Because backward never calls ``backward()`` itself, this works under ``ferro.autograd.grad``,
with inputs that do not require grad (parameters captured by ``fn`` still get gradients),
nested inside another checkpoint, and with several inputs and outputs. Outputs are the real
outputs: never copied through the host. A recomputation that saves arrays of other shapes or
dtypes, or inputs modified in place since the forward, raise a
:class:`~ferro.errors.CheckpointError`.
"""

from __future__ import annotations

import math

from ferro import random as _random
from ferro._C.tensor import TensorBase
from ferro.autograd.grad_mode import enable_grad, is_grad_enabled
from ferro.autograd.graph import saved_tensors_hooks
from ferro.errors import ArgumentError, CheckpointError


class _Frame:
    """One checkpointed call: what is needed to recompute it, and the recomputed arrays."""

    def __init__(self, fn, args, kwargs, preserve_rng_state):
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.rng_state = _rng_states() if preserve_rng_state else None
        self.versions = [a._version if isinstance(a, TensorBase) else None for a in args]
        self.meta: list = []  # (shape, dtype) of each array saved in the original forward
        self.recomputed: list | None = None
        self.handed_out = 0

    def pack(self, t):
        self.meta.append((tuple(t.shape), t.dtype))
        return len(self.meta) - 1

    def unpack(self, index):
        if self.recomputed is None:
            self._recompute()
        arr = self.recomputed[index]
        self.handed_out += 1
        if self.handed_out >= len(self.meta):
            # Every array has been used once: free them; a later backward (retain_graph)
            # recomputes again.
            self.recomputed, self.handed_out = None, 0
        return arr

    def _recompute(self):
        for k, (a, v) in enumerate(zip(self.args, self.versions, strict=True)):
            if v is not None and a._version != v:
                raise CheckpointError(
                    f"checkpoint: input {k} (shape {tuple(a.shape)}) was modified in place after "
                    f"the forward (version {v} then, {a._version} now); recomputation would differ"
                )
        inputs = [
            a.detach().requires_grad_(a.requires_grad) if isinstance(a, TensorBase) else a
            for a in self.args
        ]
        saved: list = []

        def capture(t):
            saved.append(t._data)

        caller_state = _rng_states() if self.rng_state is not None else None
        try:
            if self.rng_state is not None:
                _set_rng_states(self.rng_state)
            with enable_grad(), saved_tensors_hooks(capture, _no_unpack):
                self.fn(*inputs, **self.kwargs)
        finally:
            if caller_state is not None:
                _set_rng_states(caller_state)
        self._check(saved)
        self.recomputed = saved

    def _check(self, saved):
        if len(saved) != len(self.meta):
            raise CheckpointError(
                f"checkpoint: the recomputation saved {len(saved)} arrays, the original forward "
                f"{len(self.meta)}; fn must do the same work each time it runs"
            )
        for k, (arr, (shape, dtype)) in enumerate(zip(saved, self.meta, strict=True)):
            if tuple(arr.shape) != shape or arr.dtype != dtype:
                raise CheckpointError(
                    f"checkpoint: saved array {k} was {dtype}{shape} in the forward but "
                    f"{arr.dtype}{tuple(arr.shape)} in the recomputation"
                )


def _rng_states():
    # ferro's CPU generator and every CUDA device generator (all of them: cheap to copy, and a
    # device used only inside fn is covered too).
    from ferro import cuda

    return _random.get_rng_state(), cuda.get_all_rng_states()


def _set_rng_states(states) -> None:
    from ferro import cuda

    cpu, devices = states
    _random.set_rng_state(cpu)
    cuda.set_all_rng_states(devices)


def _no_unpack(_):
    raise CheckpointError("checkpoint: the recomputation's own graph cannot be backpropagated")


def checkpoint(
    fn, *args, use_reentrant: bool | None = None, preserve_rng_state: bool = True, **kwargs
):
    """Call ``fn(*args, **kwargs)`` without keeping its activations; recompute them in backward.

    Args:
        fn: the function to checkpoint (any ferro code; it may capture parameters).
        *args: its positional arguments (Tensors or other values).
        use_reentrant: accepted for PyTorch compatibility, where it picks between two
            implementations. ferro has one, which behaves like PyTorch's
            ``use_reentrant=False`` (saved-tensor hooks: works with ``ferro.autograd.grad``,
            with inputs that do not require grad, and with keyword arguments) for either value.
        preserve_rng_state: replay ferro's generator so random ops (dropout) match exactly.
        **kwargs: keyword arguments for ``fn``.

    Returns:
        What ``fn`` returns, with the same graph as a plain call.

    Example:
        >>> x, w = ferro.randn(4, 3, requires_grad=True), ferro.randn(3, 3, requires_grad=True)
        >>> y = ferro.utils.checkpoint.checkpoint(lambda t: (t @ w).tanh(), x)
        >>> y.sum().backward()  # recomputes (x @ w).tanh() here
        >>> x.grad.shape, w.grad.shape
        (ferro.Size([4, 3]), ferro.Size([3, 3]))
    """
    if not is_grad_enabled():
        return fn(*args, **kwargs)
    frame = _Frame(fn, args, kwargs, preserve_rng_state)
    with saved_tensors_hooks(frame.pack, frame.unpack):
        return fn(*args, **kwargs)


def checkpoint_sequential(
    functions,
    segments: int,
    input,  # noqa: A002
    use_reentrant: bool | None = None,
    preserve_rng_state: bool = True,
):
    """Run a sequence of functions (or modules) in ``segments`` chunks, checkpointing every chunk
    but the last (its activations are needed right away by backward).

    Example:
        >>> layers = [ferro.nn.Linear(3, 3) for _ in range(4)]
        >>> y = checkpoint_sequential(layers, 2, ferro.randn(5, 3, requires_grad=True))
        >>> y.shape
        ferro.Size([5, 3])
    """
    functions = list(functions)
    if not functions:
        raise ArgumentError("checkpoint_sequential: functions is empty")
    if segments < 1:
        raise ArgumentError(f"checkpoint_sequential: segments must be >= 1, got {segments}")
    size = math.ceil(len(functions) / segments)

    def run(start, end):
        def segment(x):
            for f in functions[start:end]:
                x = f(x)
            return x

        return segment

    x = input
    start = 0
    while start + size < len(functions):
        x = checkpoint(run(start, start + size), x, preserve_rng_state=preserve_rng_state)
        start += size
    return run(start, len(functions))(x)


__all__ = ["checkpoint", "checkpoint_sequential"]
