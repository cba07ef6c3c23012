"""DistributedDataParallel: each rank runs the model on its share of the batch; gradients are
averaged over the ranks during backward, in buckets whose all-reduces overlap the rest of it.

Note [DDP buckets] (docs/distributed.md, "How gradients are reduced"):

- At construction, rank 0's parameters and buffers are broadcast, and the parameters that
  require grad are cut into buckets of about ``bucket_cap_mb`` megabytes, in reverse
  registration order (the order backward usually produces their gradients), one dtype and one
  device per bucket. Every rank builds the same buckets from the same module.
- Each parameter has a post-accumulate-grad hook. When the last gradient of a bucket has been
  accumulated, the bucket's gradients are copied into one flat buffer and its non-blocking
  all-reduce starts; backward goes on computing the next layers' gradients meanwhile. Buckets
  start in index order on every rank (a ready bucket waits for its predecessors), because MPI
  needs every rank to start collectives in the same order. Each hook also tests the pending
  requests, which lets MPI progress without a progress thread.
- When the last bucket has started, the hook waits for all of them, divides by the world
  size and writes the averages back into ``.grad``, so ``backward()`` returns with averaged
  gradients everywhere.
- ``find_unused_parameters=True`` walks the graph from the forward's outputs and counts the
  parameters it does not reach as ready (zero gradient) so their buckets are not waited for
  forever; without it, a parameter that gets no gradient leaves its bucket incomplete, which
  the next forward reports as an error naming the parameters (PyTorch's behaviour).
- Inside ``no_sync()`` hooks do nothing: gradients accumulate locally, and the first backward
  after it reduces the accumulated sums.
"""

from __future__ import annotations

import contextlib

import numpy as np

from ferro._C.tensor import TensorBase, wrap
from ferro.autograd.grad_mode import is_grad_enabled
from ferro.backend import xp_of
from ferro.distributed import collectives as C
from ferro.errors import ArgumentError, DistributedError
from ferro.nn.module import Module


class _Bucket:
    __slots__ = ("params", "offsets", "size", "dtype", "xp", "flat", "ready", "work")

    def __init__(self, params: list):
        self.params = params
        first = params[0]._data
        self.dtype, self.xp = first.dtype, xp_of(first)
        self.offsets, n = [], 0
        for p in params:
            self.offsets.append(n)
            n += p._data.size
        self.size = n
        self.flat = None
        self.ready = 0
        self.work = None


FIRST_BUCKET_MB = 1.0


def _bytes(p) -> int:
    return p._data.size * p._data.dtype.itemsize


class DistributedDataParallel(Module):
    """Data parallelism over ``ferro.distributed``: wrap a module on every rank; each rank feeds
    it its part of the batch; ``backward`` leaves every parameter's ``.grad`` averaged over the
    ranks, so an optimizer step keeps the replicas identical.

    Args:
        module: the model (identical architecture on every rank; rank 0's values win).
        device_ids, output_device, dim: accepted for PyTorch compatibility; one process drives
            one device in ferro, the device of the module's parameters.
        broadcast_buffers: broadcast rank 0's buffers (batch-norm statistics) at every forward.
        process_group: the group to average over (the default group when None).
        bucket_cap_mb: bucket size in megabytes (25, as PyTorch).
        find_unused_parameters: walk the graph after each forward to find parameters that will
            get no gradient (costs a graph walk per iteration).
        gradient_as_bucket_view: after the reduction, ``.grad`` of each parameter is a view
            into its bucket's buffer instead of a copy (saves one copy and the memory of the
            gradients; the next backward accumulates into the bucket).
        static_graph: accepted for PyTorch compatibility (no effect).

    ``state_dict()`` keys carry the ``module.`` prefix, as in PyTorch; save
    ``ddp.module.state_dict()`` to get the plain module's keys.
    """

    def __init__(
        self,
        module: Module,
        device_ids=None,
        output_device=None,
        dim: int = 0,
        broadcast_buffers: bool = True,
        process_group=None,
        bucket_cap_mb: float | None = None,
        find_unused_parameters: bool = False,
        check_reduction: bool = False,
        gradient_as_bucket_view: bool = False,
        static_graph: bool = False,
    ):
        super().__init__()
        if not isinstance(module, Module):
            raise ArgumentError(
                f"DistributedDataParallel: module must be a ferro.nn.Module, got "
                f"{type(module).__name__}"
            )
        self.module = module
        group = C._group(process_group)
        object.__setattr__(self, "_pg", group)
        self.broadcast_buffers = bool(broadcast_buffers)
        self.find_unused_parameters = bool(find_unused_parameters)
        self.gradient_as_bucket_view = bool(gradient_as_bucket_view)
        self.bucket_cap_mb = 25.0 if bucket_cap_mb is None else float(bucket_cap_mb)
        if self.bucket_cap_mb <= 0:
            raise ArgumentError(
                f"DistributedDataParallel: bucket_cap_mb must be positive, got {bucket_cap_mb}"
            )
        params, seen = [], set()
        for name, p in module.named_parameters():
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                params.append((name, p))
        object.__setattr__(self, "_names", {id(p): n for n, p in params})
        self._sync_module_states()
        object.__setattr__(self, "_buckets", self._make_buckets([p for _, p in params]))
        where = {}
        for i, b in enumerate(self._buckets):
            for k, p in enumerate(b.params):
                where[id(p)] = (i, k)
        object.__setattr__(self, "_where", where)
        object.__setattr__(self, "_require_sync", True)
        object.__setattr__(self, "_launched", 0)
        object.__setattr__(self, "_expect_reduction", False)
        object.__setattr__(self, "_ready_marks", {})
        object.__setattr__(
            self, "_handles", [p.register_post_accumulate_grad_hook(self._hook) for _, p in params]
        )

    # -- construction ---------------------------------------------------------------------------

    def _sync_module_states(self) -> None:
        """Rank 0's parameters and buffers on every rank."""
        if self._pg.size() == 1:
            return
        src = self._pg.global_rank(0)
        works = [C.broadcast(t, src, self._pg, async_op=True) for t in self._states()]
        for w in works:
            w.wait()

    def _states(self):
        from ferro.autograd.grad_mode import no_grad

        with no_grad():
            out = [p.detach() for p in self.module.parameters()]
        # detach() shares memory with the parameter: the broadcast writes the parameter.
        return out + [b for b in self.module.buffers() if b is not None]

    def _make_buckets(self, params: list) -> list:
        # The first bucket is small (1 MB, as PyTorch's): the last layers' gradients come first
        # and their reduction starts while backward is still early.
        cap = min(FIRST_BUCKET_MB, self.bucket_cap_mb) * 2**20
        buckets, current, size = [], [], 0
        for p in reversed(params):
            if current and (
                size + _bytes(p) > cap
                or p._data.dtype != current[0]._data.dtype
                or xp_of(p._data) is not xp_of(current[0]._data)
            ):
                buckets.append(_Bucket(current))
                current, size = [], 0
                cap = self.bucket_cap_mb * 2**20
            current.append(p)
            size += _bytes(p)
        if current:
            buckets.append(_Bucket(current))
        return buckets

    # -- forward ---------------------------------------------------------------------------------

    def forward(self, *inputs, **kwargs):
        if self._expect_reduction:
            missing = [
                self._names[id(p)]
                for i, b in enumerate(self._buckets)
                for k, p in enumerate(b.params)
                if (i, k) not in self._ready_marks
            ]
            raise DistributedError(
                "DistributedDataParallel: the previous iteration's gradients were not all "
                f"reduced: parameters {missing} got no gradient. Pass "
                "find_unused_parameters=True if some parameters are not used in every forward "
                "(or make every output take part in the loss)"
            )
        if self.broadcast_buffers and self._pg.size() > 1:
            src = self._pg.global_rank(0)
            for w in [
                C.broadcast(b, src, self._pg, async_op=True)
                for b in self.module.buffers()
                if b is not None
            ]:
                w.wait()
        out = self.module(*inputs, **kwargs)
        if self._require_sync and is_grad_enabled() and self._buckets:
            self._prepare_for_backward(out)
        return out

    def _prepare_for_backward(self, out) -> None:
        object.__setattr__(self, "_launched", 0)
        for b in self._buckets:
            b.ready, b.work = 0, None
        object.__setattr__(self, "_ready_marks", {})
        object.__setattr__(self, "_expect_reduction", True)
        if self.find_unused_parameters:
            used = _reached_leaves(out)
            for p_id, (i, k) in self._where.items():
                if p_id not in used:
                    self._mark(i, k)

    # -- backward --------------------------------------------------------------------------------

    def _hook(self, p) -> None:
        if not (self._require_sync and self._expect_reduction):
            return
        i, k = self._where[id(p)]
        self._mark(i, k)

    def _mark(self, i: int, k: int) -> None:
        marks = self._ready_marks
        if (i, k) in marks:
            return
        marks[(i, k)] = True
        b = self._buckets[i]
        b.ready += 1
        # Start every consecutive complete bucket, in index order (the same order on every rank).
        while self._launched < len(self._buckets):
            nb = self._buckets[self._launched]
            if nb.ready < len(nb.params):
                break
            self._launch(nb)
            object.__setattr__(self, "_launched", self._launched + 1)
        pending = [b.work for b in self._buckets[: self._launched] if b.work is not None]
        for w in pending:
            w.is_completed()  # progress
        if self._launched == len(self._buckets):
            self._finalize()

    def _launch(self, b: _Bucket) -> None:
        xp = b.xp
        if b.flat is None or not self.gradient_as_bucket_view:
            b.flat = xp.zeros(b.size, dtype=b.dtype) if b.flat is None else b.flat
        flat = b.flat
        for p, off in zip(b.params, b.offsets, strict=True):
            n = p._data.size
            g = p.grad
            view = flat[off : off + n]
            if g is None:
                view[...] = 0
            elif not (self.gradient_as_bucket_view and _shares(g._data, view)):
                view[...] = g._data.reshape(-1)
        b.work = C.all_reduce(_tensor(flat), C.ReduceOp.SUM, self._pg, async_op=True)

    def _finalize(self) -> None:
        n = self._pg.size()
        for b in self._buckets:
            b.work.wait()
            b.work = None
            b.flat /= n
            for p, off in zip(b.params, b.offsets, strict=True):
                view = b.flat[off : off + p._data.size].reshape(p._data.shape)
                if self.gradient_as_bucket_view:
                    if p.grad is None or not _shares(p.grad._data, view):
                        p.grad = _tensor(view)
                elif p.grad is None:
                    p.grad = _tensor(view.copy())
                else:
                    p.grad._data[...] = view
        object.__setattr__(self, "_expect_reduction", False)

    # -- API -------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def no_sync(self):
        """Inside the block, backward accumulates gradients locally without reducing them; the
        first backward after it reduces the accumulated sums."""
        prev = self._require_sync
        object.__setattr__(self, "_require_sync", False)
        try:
            yield
        finally:
            object.__setattr__(self, "_require_sync", prev)

    @property
    def process_group(self):
        return self._pg

    def extra_repr(self) -> str:
        return f"world_size={self._pg.size()}, buckets={len(self._buckets)}"


def _shares(a, b) -> bool:
    # Whether two arrays are the same memory (the gradient already is its bucket view).
    if a is b:
        return True
    if type(a) is not type(b) or a.shape != b.shape:
        return False
    if a.strides != b.strides:
        return False
    if type(a) is np.ndarray:
        return a.ctypes.data == b.ctypes.data
    return a.data.ptr == b.data.ptr


def _tensor(array):
    # The array (NumPy or CuPy) as a tensor sharing its memory.
    return wrap(array)


def _reached_leaves(out) -> set:
    """ids of the leaf tensors the graph behind ``out`` (tensors, nested in tuples/lists/dicts)
    reaches."""
    roots, stack = [], [out]
    while stack:
        o = stack.pop()
        if isinstance(o, TensorBase):
            roots.append(o)
        elif isinstance(o, (list, tuple)):
            stack.extend(o)
        elif isinstance(o, dict):
            stack.extend(o.values())
    reached, seen = set(), set()
    stack = []
    for t in roots:
        if t.grad_fn is not None:
            stack.append(t.grad_fn)
        elif t.requires_grad:
            reached.add(id(t))
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        for target, _ in node.next_functions:
            if target is None:
                continue
            if isinstance(target, TensorBase):
                reached.add(id(target))
            else:
                stack.append(target)
    return reached


__all__ = ["DistributedDataParallel"]
