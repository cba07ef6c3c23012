"""``ferro.profiler.profile``: where the time of a step goes, op by op, forward and backward.

Recording lives in the compiled engine behind one flag: with no profiler active each op pays a
single pointer check. Inside ``profile()`` every op's forward call and every node's backward
call is timed (monotonic clock, nanoseconds) and recorded with its op name, input shapes,
dtype, device and the bytes of the arrays it produced; a backward event carries the id of the
forward event that created its node. A profile records the thread (or asyncio task) that entered
it, so profiles in several threads neither lose nor swap events.

Example:
    >>> model, x = ferro.nn.Linear(4, 2), ferro.randn(8, 4)
    >>> with ferro.profiler.profile() as prof:
    ...     loss = model(x).sum()
    ...     loss.backward()
    >>> print(prof.table(sort_by="total", row_limit=10))  # doctest: +ELLIPSIS
    op ...
    >>> prof.export_chrome_trace("trace.json")  # doctest: +SKIP
    >>> # then open trace.json in ui.perfetto.dev or chrome://tracing
"""

from __future__ import annotations

import contextvars
import functools
import itertools
import json
import os
import threading
from dataclasses import dataclass, field

from ferro._C import engine as _engine
from ferro.backend import device_of
from ferro.errors import ArgumentError


@dataclass
class Event:
    """One recorded call. ``kind`` is ``"forward"`` or ``"backward"``; ``forward_id`` (backward
    events) is the ``id`` of the forward event that created the node."""

    kind: str
    name: str
    op: str
    id: int
    start_ns: int
    duration_ns: int
    shapes: list = field(default_factory=list)
    dtype: str = ""
    device: str = "cpu"
    out_bytes: int = 0
    forward_id: int = -1
    recorded: bool = False
    thread: int = 0


def _meta(arrays):
    shapes, dtype, device = [], "", "cpu"
    for a in arrays:
        if hasattr(a, "shape") and hasattr(a, "dtype"):
            shapes.append(tuple(a.shape))
            dtype = dtype or str(a.dtype)
            if device == "cpu":
                device = str(device_of(a))
    return shapes, dtype, device


def _nbytes(out) -> int:
    outs = out if isinstance(out, tuple) else (out,)
    return int(sum(getattr(o, "nbytes", 0) for o in outs if o is not None))


class _Recorder:
    """One profile's events. Forward events get an engine-wide id (what the engine stores in the
    node); a backward event's ``forward_id`` is translated to this recorder's own event id, or -1
    when its node's forward was recorded by another profile or by none."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._local: dict[int, int] = {}
        # A copied context (an asyncio task, a worker thread) shares this recorder.
        self._lock = threading.Lock()

    def _append(self, ev: Event) -> int:
        with self._lock:
            ev.id = len(self.events)
            self.events.append(ev)
            return ev.id

    def record_forward(self, op, call, out, t0, t1, recorded):
        shapes, dtype, device = _meta(call[1:])
        local = self._append(
            Event(
                "forward",
                op,
                op,
                -1,
                t0,
                t1 - t0,
                shapes,
                dtype,
                device,
                _nbytes(out),
                -1,
                bool(recorded),
                threading.get_ident(),
            )
        )
        engine_id = next(_engine_ids)
        self._local[engine_id] = local
        return engine_id

    def record_backward(self, name, op, forward_id, xp, grads_out, grads_in, t0, t1):
        shapes, dtype, device = _meta(grads_out)
        self._append(
            Event(
                "backward",
                name,
                op,
                -1,
                t0,
                t1 - t0,
                shapes,
                dtype,
                device,
                _nbytes(tuple(grads_in)),
                self._local.get(forward_id, -1),
                True,
                threading.get_ident(),
            )
        )


# The engine holds one process-wide recorder. While any profile is active (in any thread) that is
# _DISPATCH, which hands each event to the innermost profile of the thread or asyncio task the
# event happens in: profiles in two threads neither lose nor swap events, and they may exit in any
# order. _ACTIVE is that per-context stack of profiles; the count of active profiles decides when
# the dispatcher is installed and removed.
_ACTIVE: contextvars.ContextVar[tuple] = contextvars.ContextVar("ferro_profiles", default=())
_engine_ids = itertools.count()
_install_lock = threading.Lock()
_n_active = 0
_outside = None  # what the engine held before the first profile was entered


class _Dispatch:
    def record_forward(self, op, call, out, t0, t1, recorded):
        active = _ACTIVE.get()
        if not active:
            return -1
        return active[-1].record_forward(op, call, out, t0, t1, recorded)

    def record_backward(self, name, op, forward_id, xp, grads_out, grads_in, t0, t1):
        active = _ACTIVE.get()
        if active:
            active[-1].record_backward(name, op, forward_id, xp, grads_out, grads_in, t0, t1)


_DISPATCH = _Dispatch()


def _acquire() -> None:
    global _n_active, _outside
    with _install_lock:
        if _n_active == 0:
            _outside = _engine.set_profiler(_DISPATCH)
        _n_active += 1


def _release() -> None:
    global _n_active, _outside
    with _install_lock:
        _n_active -= 1
        if _n_active == 0:
            _engine.set_profiler(_outside)
            _outside = None


class profile:
    """Context manager (and decorator) recording every op and node while active.

    It records the thread (or asyncio task) that entered it. Profiles nest: the innermost
    records. Profiles in different threads are independent: each records its own thread's
    events, and they may exit in any order. Exit a profile in the thread that entered it.
    """

    def __init__(self) -> None:
        self._recorder: _Recorder | None = None
        self._entered = False
        self.start_ns = self.end_ns = 0

    def __enter__(self) -> profile:
        self._recorder = _Recorder()
        self.start_ns = _engine.now_ns()
        _acquire()
        self._entered = True
        _ACTIVE.set(_ACTIVE.get() + (self._recorder,))
        return self

    def __exit__(self, *exc) -> None:
        if not self._entered:
            return
        self._entered = False
        _ACTIVE.set(tuple(r for r in _ACTIVE.get() if r is not self._recorder))
        _release()
        self.end_ns = _engine.now_ns()

    def __call__(self, func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with profile():
                return func(*args, **kwargs)

        return wrapper

    def events(self) -> list[Event]:
        """Every recorded event, in the order they started."""
        return list(self._recorder.events) if self._recorder else []

    def table(self, sort_by: str = "total", row_limit: int = 20) -> str:
        """A table grouped by op: calls, forward and backward time, total, mean per call and
        share of the profiled wall time. ``sort_by``: total, forward, backward, calls, mean."""
        groups: dict[str, dict] = {}
        for ev in self.events():
            g = groups.setdefault(ev.op, {"calls": 0, "forward": 0, "backward": 0, "bytes": 0})
            g[ev.kind] += ev.duration_ns
            g["calls"] += ev.kind == "forward"
            g["bytes"] += ev.out_bytes
        wall = (
            max(self.end_ns - self.start_ns, 1)
            if self.end_ns
            else max(_engine.now_ns() - self.start_ns, 1)
        )
        rows = []
        for op, g in groups.items():
            total = g["forward"] + g["backward"]
            calls = max(g["calls"], 1)
            rows.append(
                (op, g["calls"], g["forward"], g["backward"], total, total / calls, g["bytes"])
            )
        keys = {"total": 4, "forward": 2, "backward": 3, "calls": 1, "mean": 5}
        if sort_by not in keys:
            raise ArgumentError(
                f"profile.table: sort_by must be one of {sorted(keys)}, got {sort_by!r}"
            )
        rows.sort(key=lambda r: r[keys[sort_by]], reverse=True)
        head = (
            f"{'op':<18}{'calls':>7}{'forward ms':>12}{'backward ms':>13}{'total ms':>10}"
            f"{'mean us':>10}{'% wall':>8}{'MB out':>9}"
        )
        lines = [head, "-" * len(head)]
        for op, calls, f, b, t, mean, nbytes in rows[:row_limit]:
            lines.append(
                f"{op:<18}{calls:>7}{f / 1e6:>12.3f}{b / 1e6:>13.3f}{t / 1e6:>10.3f}"
                f"{mean / 1e3:>10.1f}{100 * t / wall:>8.1f}{nbytes / 2**20:>9.2f}"
            )
        lines.append(f"(profiled wall time {wall / 1e6:.3f} ms; {len(rows)} ops)")
        return "\n".join(lines)

    def export_chrome_trace(self, path) -> None:
        """Write a Chrome/Perfetto trace (JSON): forward and backward as separate tracks."""
        t0 = self.start_ns
        pid = os.getpid()
        trace = [
            {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "ferro"}},
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": 1, "args": {"name": "forward"}},
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": 2, "args": {"name": "backward"}},
        ]
        for ev in self.events():
            trace.append(
                {
                    "name": ev.name,
                    "cat": ev.kind,
                    "ph": "X",
                    "pid": pid,
                    "tid": 1 if ev.kind == "forward" else 2,
                    "ts": (ev.start_ns - t0) / 1e3,
                    "dur": ev.duration_ns / 1e3,
                    "args": {
                        "id": ev.id,
                        "forward_id": ev.forward_id,
                        "shapes": ev.shapes,
                        "dtype": ev.dtype,
                        "device": ev.device,
                        "out_bytes": ev.out_bytes,
                    },
                }
            )
        with open(os.fspath(path), "w") as f:
            json.dump({"traceEvents": trace, "displayTimeUnit": "ms"}, f)


__all__ = ["profile", "Event"]
