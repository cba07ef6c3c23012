"""DistributedDataParallel: each rank runs the model on its share of the batch; gradients are
averaged over the ranks during backward, in buckets whose all-reduces overlap the rest of it.

Note [DDP buckets] (docs/distributed.md, "How gradients are reduced"):

- At construction, rank 0's parameters and buffers are broadcast, and the parameters that
  require grad are cut into buckets of about ``bucket_cap_mb`` megabytes, in reverse
  registration order (the order backward usually produces their gradients), one dtype and one
  device per bucket; the first bucket holds at most 1 MB, and a bucket of 1 MB or more ends
  where the next parameter belongs to another module (whose gradients come a layer later).
  Every rank builds the same buckets from the same module.
- Each parameter has a tensor hook, which the backward walk runs as soon as the parameter's
  gradient of this backward is complete. It writes (``.grad`` + gradient) / world size into
  the parameter's slot of its bucket's flat buffer (one pass: the average's division is fused
  into the copy) and, once a bucket is complete, starts its non-blocking all-reduce; the walk
  goes on computing the earlier layers' gradients meanwhile. A Linear's or a convolution's
  weight and bias get there before the layer's input gradient is computed (Note [Early
  gradients]).
  Post-accumulate-grad hooks could not do this: ferro writes every ``.grad`` and runs those
  hooks only after the whole walk (Note [Atomic backward] in docs/design.md), so a reduction
  started from them cannot overlap anything. Buckets start in index order on every rank (a
  ready bucket waits for its predecessors), because MPI needs every rank to start collectives
  in the same order.
- MPI moves a non-blocking collective's data only inside MPI calls, and backward spends its
  time in long BLAS calls that make none: without help a bucket started early would still be
  transferred in the final wait. A progress thread (one per process, Note [DDP progress])
  tests the started buckets, sleeping between tests so it takes neither a core from BLAS nor
  the GIL for long.
- The post-accumulate-grad hook of the last parameter (every ``.grad`` is written by then)
  takes back the buckets the thread has not seen complete, waits for them, and hands each
  ``.grad`` its slot of the reduced bucket as its memory (the ``.grad`` tensor stays the same
  object; no copy back), so ``backward()`` returns with averaged gradients everywhere. The
  next backward fills another buffer: the bucket keeps those it handed out and reuses one once
  no array holds it any more (after ``zero_grad``, or once the next step's gradients replaced
  it), so a step touches no freshly allocated memory; an array a user kept is never written.
- A ``.grad`` that exists when its gradient comes in (``no_sync`` accumulation, or
  ``zero_grad(set_to_none=False)``) is added into the bucket slot by the hook and then set
  aside (``.grad`` is None until the hand-over gives the same tensor back, holding the
  average): otherwise the engine would add the gradient into ``.grad`` after the walk, a pass
  over every gradient whose result the hand-over replaces (2-2.5 ms of CPU per step for the
  benchmark's MLP). A backward that raises leaves them set aside; the next forward, which
  reports the unreduced iteration, gives them back unchanged.
- With ``gradient_as_bucket_view=True`` a parameter's ``.grad`` is its slot of the bucket
  (one buffer per bucket, kept across steps). The hooks are those above: a slot ``.grad`` is
  added into in place and set aside, so the engine's write after the walk cannot touch the
  bucket while MPI reduces it, and the buckets overlap backward as without the option. (A
  backward that raises then leaves those ``.grad`` modified: they are the bucket.)
- ``find_unused_parameters=True`` walks the graph from the forward's outputs and counts the
  parameters it does not reach as ready (zero gradient) so their buckets are not waited for
  forever; without it, a parameter that gets no gradient leaves its bucket incomplete, which
  the next forward reports as an error naming the parameters (PyTorch's behaviour).
- Inside ``no_sync()`` hooks do nothing: gradients accumulate locally, and the first backward
  after it reduces the accumulated sums.
"""

from __future__ import annotations

import contextlib
import functools
import queue
import sys
import threading
import time

import numpy as np

from ferro._C.tensor import TensorBase, wrap
from ferro.autograd.grad_mode import is_grad_enabled
from ferro.backend import xp_of
from ferro.distributed import collectives as C
from ferro.errors import ArgumentError, DistributedError
from ferro.nn.module import Module


class _Bucket:
    __slots__ = (
        "params",
        "offsets",
        "size",
        "dtype",
        "xp",
        "flat",
        "spares",
        "ready",
        "work",
        "done",
    )

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
        self.spares = []  # buffers handed to the gradients of earlier steps (Note [DDP buckets])
        self.ready = 0
        self.work = None
        self.done = threading.Event()  # set by the progress thread


# The first bucket's cap (PyTorch's), and the size from which a bucket ends where the next
# parameter belongs to another module (Note [DDP buckets]).
FIRST_BUCKET_MB = 1.0
# The progress thread's pause between polls while backward still runs: short enough that MPI
# moves a bucket well within a layer's backward, long enough that the thread costs the BLAS
# thread next to it almost nothing (Note [DDP progress]).
POLL_S = 2e-4


class _Backward:
    """One backward's shared state between the hooks and the progress thread."""

    __slots__ = ("urgent", "error", "timeline")

    def __init__(self, timeline):
        self.urgent = threading.Event()  # backward is over: the main thread waits from now on
        self.error = None  # an exception raised in the progress thread
        self.timeline = timeline


class _Progress:
    """Note [DDP progress]: one daemon thread per process drives the all-reduces DDP started,
    in order, while backward runs. MPI (MPICH's shared-memory and network devices alike) moves
    a non-blocking collective's data only inside MPI calls, and mpi4py's blocking Wait spins
    inside MPI with the GIL released, which would take a core from the BLAS thread for the
    whole transfer. So the thread tests the request and sleeps ``POLL_S`` between tests (a wait
    on ``urgent``, which ends at once when backward has finished: the main thread's hand-over
    does not wait out a sleep). Once backward has finished it hands the remaining buckets back
    to the main thread, which waits on them itself (Work.wait: back-to-back tests, the group's
    timeout): a Python thread polling then would hold the GIL the main thread needs to wake
    up. A request is only ever tested by one thread at a time: the main thread touches a
    bucket's work only after the thread set the bucket's ``done``. The thread only tests
    (``Work._progress``); the main thread completes each Work, so the finishing steps (a CuPy
    staging copy back, on the main thread's device and stream) never run on the progress
    thread."""

    def __init__(self):
        self.queue = queue.SimpleQueue()
        threading.Thread(target=self._run, name="ferro-ddp-progress", daemon=True).start()

    def _run(self) -> None:
        while True:
            index, bucket, state = self.queue.get()
            try:
                work = bucket.work
                while not state.urgent.is_set():
                    if work._progress():
                        if state.timeline is not None:
                            state.timeline.append(("transferred", index, time.perf_counter()))
                        break
                    state.urgent.wait(POLL_S)  # a sleep that ends when backward does
            except BaseException as exc:  # reported by the main thread
                state.error = exc
            finally:
                bucket.done.set()


_progress: _Progress | None = None


def _progress_thread() -> _Progress | None:
    """The process's progress thread, started on first use; None where MPI was not initialised
    with MPI_THREAD_MULTIPLE (the main thread then drives the transfers in the final wait)."""
    global _progress
    if _progress is None:
        MPI = C._mpi()
        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            return None
        _progress = _Progress()
    return _progress


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
        gradient_as_bucket_view: ``.grad`` of each parameter is a view into its bucket's
            buffer, one per bucket kept across steps (without it a bucket hands its buffer to
            the gradients and may fill another while a user holds those); a backward that
            raises leaves such gradients modified.
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
        object.__setattr__(self, "_set_aside", {})  # (bucket, slot) -> a .grad set aside
        object.__setattr__(self, "_state", None)
        # A list to record (event, bucket, perf_counter) of each synchronised backward into:
        # "gradient <name> in", "start" (bucket complete and copied, all-reduce started),
        # "transferred" (the progress thread saw MPI complete it during backward), "walk
        # done..." (.grad written: the wait begins), "waited" (completed in that wait), "end"
        # (averages written back); benchmarks/bench_distributed.py --timeline prints them.
        object.__setattr__(self, "_timeline", None)
        object.__setattr__(self, "_uncommitted", 0)
        object.__setattr__(self, "_lock", threading.RLock())
        handles = []
        for _, p in params:
            handles.append(p.register_hook(functools.partial(self._grad_hook, p)))
            handles.append(p.register_post_accumulate_grad_hook(self._hook))
        object.__setattr__(self, "_handles", handles)

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
        # and their reduction starts while backward is still early. A bucket of 1 MB or more
        # also ends where the next parameter belongs to another module: that one's gradient
        # comes a layer's backward later, and waiting for it would hold back the transfer of
        # the gradients already in (Note [DDP buckets]).
        cap = min(FIRST_BUCKET_MB, self.bucket_cap_mb) * 2**20
        buckets, current, size = [], [], 0
        for p in reversed(params):
            if current and (
                size + _bytes(p) > cap
                or (
                    size >= FIRST_BUCKET_MB * 2**20 and self._module(p) != self._module(current[-1])
                )
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

    def _module(self, p) -> str:
        return self._names[id(p)].rpartition(".")[0]

    # -- forward ---------------------------------------------------------------------------------

    def forward(self, *inputs, **kwargs):
        if self._expect_reduction:
            self._restore_set_aside()  # the gradients as they were before that backward
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
        if self._require_sync and is_grad_enabled() and self._buckets and self._pg.size() > 1:
            # (on one rank the local gradients are the average: nothing to reduce)
            self._prepare_for_backward(out)
        return out

    def _prepare_for_backward(self, out) -> None:
        object.__setattr__(self, "_launched", 0)
        object.__setattr__(self, "_uncommitted", 0)
        for b in self._buckets:
            b.ready, b.work = 0, None
            b.done.clear()
        object.__setattr__(self, "_ready_marks", {})
        object.__setattr__(self, "_set_aside", {})
        object.__setattr__(self, "_state", _Backward(self._timeline))
        object.__setattr__(self, "_expect_reduction", True)
        if self.find_unused_parameters and out is not None:
            used = _reached_leaves(out)
            for p_id, (i, k) in self._where.items():
                if p_id not in used:
                    self._copy_in(i, k, None)

    # -- backward --------------------------------------------------------------------------------

    def _grad_hook(self, p, grad) -> None:
        """Tensor hook: ``p``'s gradient of this backward is complete (the walk goes on). Its
        bucket slot gets (``.grad`` + grad) / world size now, and a complete bucket starts."""
        if not (self._require_sync and self._expect_reduction):
            return
        i, k = self._where[id(p)]
        with self._lock:  # the parallel walk may run leaf hooks on several threads
            if (i, k) in self._ready_marks:
                return
            object.__setattr__(self, "_uncommitted", self._uncommitted + 1)
            self._copy_in(i, k, grad._data)

    def _hook(self, p) -> None:
        """Post-accumulate-grad hook: ``p.grad`` has been written (after the whole walk). The
        last one waits for the reductions and writes the averages."""
        if not (self._require_sync and self._expect_reduction):
            return
        with self._lock:
            object.__setattr__(self, "_uncommitted", self._uncommitted - 1)
            if self._launched == len(self._buckets) and self._uncommitted <= 0:
                self._finalize()

    def _copy_in(self, i: int, k: int, grad) -> None:
        """Write parameter ``k`` of bucket ``i`` into the bucket, divided by the world size (the
        average's division fused into the copy: one pass), and start every consecutive complete
        bucket, in index order (the same order on every rank). ``grad`` is the gradient of this
        backward when called before ``.grad`` is written (to be added to ``.grad``), None
        otherwise."""
        self._ready_marks[(i, k)] = True
        b, state = self._buckets[i], self._state
        p = b.params[k]
        if state.timeline is not None:
            state.timeline.append((f"gradient {self._names[id(p)]} in", i, time.perf_counter()))
        xp, scale = b.xp, 1.0 / self._pg.size()
        if b.flat is None:
            b.flat = _free_buffer(b)
        view = b.flat[b.offsets[k] : b.offsets[k] + p._data.size]
        old = None if p.grad is None else p.grad._data
        if old is not None and _shares(old, view.reshape(old.shape)):
            old = view  # gradient_as_bucket_view: .grad already is the slot
        if grad is None:
            if old is None:
                view[...] = 0
            elif old is view:
                view *= scale
            else:
                xp.multiply(old.reshape(-1), scale, out=view)
        elif old is None:
            xp.multiply(grad.reshape(-1), scale, out=view)
        else:
            xp.add(old.reshape(-1), grad.reshape(-1), out=view)
            view *= scale
            # The engine would add this backward's gradient into .grad after the walk, a pass
            # over the gradients whose result _finalize replaces: set .grad aside until then,
            # so that the engine stores the gradient as it is (Note [DDP buckets]).
            self._set_aside[(i, k)] = p.grad
            p.grad = None
        b.ready += 1
        while self._launched < len(self._buckets):
            nb = self._buckets[self._launched]
            if nb.ready < len(nb.params):
                break
            self._launch(self._launched)
            object.__setattr__(self, "_launched", self._launched + 1)

    def _launch(self, i: int) -> None:
        b, state = self._buckets[i], self._state
        if state.timeline is not None:
            state.timeline.append(("start", i, time.perf_counter()))
        b.work = C.all_reduce(_tensor(b.flat), C.ReduceOp.SUM, self._pg, async_op=True)
        progress = _progress_thread()
        if progress is not None:
            progress.queue.put((i, b, state))

    def _finalize(self) -> None:
        state = self._state
        state.urgent.set()
        if state.timeline is not None:
            state.timeline.append(
                ("walk done, .grad written: the wait begins", -1, time.perf_counter())
            )
        threaded = _progress_thread() is not None
        for i, b in enumerate(self._buckets):
            if threaded:
                b.done.wait()  # the thread has let go of the request
                if state.error is not None:
                    raise state.error
            if not b.work.is_completed():
                b.work.wait()
                if state.timeline is not None:
                    state.timeline.append(("waited", i, time.perf_counter()))
            b.work = None
            for k, (p, off) in enumerate(zip(b.params, b.offsets, strict=True)):
                view = b.flat[off : off + p._data.size].reshape(p._data.shape)
                aside = self._set_aside.pop((i, k), None)
                if aside is not None:
                    p.grad = aside  # the same .grad tensor as before backward
                if self.gradient_as_bucket_view:
                    if p.grad is None or not _shares(p.grad._data, view):
                        p.grad = _tensor(view)
                elif p.grad is None:
                    p.grad = _tensor(view)
                else:
                    p.grad.data = view  # the same .grad tensor, holding the bucket's memory
            if not self.gradient_as_bucket_view:
                # The bucket's memory is the gradients now (no copy back, one pass over them
                # less); the next backward fills another buffer: one of the bucket's earlier
                # ones that no gradient holds any more, or a new one (_free_buffer).
                if b.xp is np:
                    b.spares = [b.spares[k] for k in range(len(b.spares)) if _unheld(b.spares, k)]
                    b.spares.append(b.flat)
                b.flat = None
        if state.timeline is not None:
            state.timeline.append(("end", -1, time.perf_counter()))
        object.__setattr__(self, "_expect_reduction", False)

    def _restore_set_aside(self) -> None:
        """Give back the ``.grad`` tensors set aside by a backward that did not finish its
        reduction (it raised, or a parameter got no gradient), as they were before it."""
        for (i, k), g in self._set_aside.items():
            self._buckets[i].params[k].grad = g
        self._set_aside.clear()

    def _reduce_after_backward(self) -> None:
        """Benchmark baseline (benchmarks/bench_distributed.py): after a backward under
        ``no_sync()``, reduce every bucket with the same copies and collectives as a
        synchronised backward, but started only now, so nothing overlaps backward."""
        self._prepare_for_backward(None)
        with self._lock:
            for i, b in enumerate(self._buckets):
                for k in range(len(b.params)):
                    self._copy_in(i, k, None)
            self._finalize()

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


def _unheld(buffers: list, k: int) -> bool:
    # Whether only ``buffers`` holds NumPy array ``buffers[k]``: every view of it (a gradient,
    # an array a user kept) holds its base, and so counts here. (2: the list and the argument.)
    return sys.getrefcount(buffers[k]) == 2


def _free_buffer(b: _Bucket):
    """A flat buffer for bucket ``b``: one it handed to the gradients of an earlier step that
    nothing holds any more (``zero_grad`` dropped those gradients, or the next step's replaced
    them), else a new one. A new 22 MiB allocation per step (the benchmark's MLP) can come back
    from the kernel as fresh pages to fault in and zero: the reduction after a ``zero_grad``
    backward took 41 ms of CPU that way against 9 ms reusing a buffer (NumPy only: CuPy's
    memory pool already reuses device memory)."""
    if b.xp is np:
        for k in range(len(b.spares)):
            if _unheld(b.spares, k):
                return b.spares.pop(k)
    return b.xp.empty(b.size, dtype=b.dtype)


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
