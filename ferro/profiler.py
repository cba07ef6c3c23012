"""``ferro.profiler.profile``: where the time of a step goes, op by op, forward and backward.

Recording lives in the compiled engine behind one flag: with no profiler active each op pays a
single pointer check. Inside ``profile()`` every op's forward call and every node's backward
call is timed (monotonic clock, nanoseconds) and recorded with its op name, input shapes,
dtype, device and the bytes of the arrays it produced; a backward event carries the id of the
forward event that created its node.

Example:
    >>> with ferro.profiler.profile() as prof:
    ...     loss = model(x).sum()
    ...     loss.backward()
    >>> print(prof.table(sort_by="total", row_limit=10))
    >>> prof.export_chrome_trace("trace.json")   # open in ui.perfetto.dev or chrome://tracing
"""

from __future__ import annotations

import functools
import json
import os
import threading
from dataclasses import dataclass, field

from ferro._C import engine as _engine


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
            if type(a).__module__.split(".")[0] == "cupy":
                device = f"cuda:{a.device.id}"
    return shapes, dtype, device


def _nbytes(out) -> int:
    outs = out if isinstance(out, tuple) else (out,)
    return int(sum(getattr(o, "nbytes", 0) for o in outs if o is not None))


class _Recorder:
    """What the engine calls while a profile is active."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._lock = threading.Lock()

    def _append(self, ev: Event) -> int:
        with self._lock:
            ev.id = len(self.events)
            self.events.append(ev)
            return ev.id

    def record_forward(self, op, call, out, t0, t1, recorded):
        shapes, dtype, device = _meta(call[1:])
        return self._append(
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
                forward_id,
                True,
                threading.get_ident(),
            )
        )


class profile:
    """Context manager (and decorator) recording every op and node while active.

    Profiles nest: the innermost records, and each restores the previous one on exit.
    """

    def __init__(self) -> None:
        self._recorder: _Recorder | None = None
        self._prev = None
        self.start_ns = self.end_ns = 0

    def __enter__(self) -> profile:
        self._recorder = _Recorder()
        self.start_ns = _engine.now_ns()
        self._prev = _engine.set_profiler(self._recorder)
        return self

    def __exit__(self, *exc) -> None:
        _engine.set_profiler(self._prev)
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
            raise ValueError(f"table: sort_by must be one of {sorted(keys)}, got {sort_by!r}")
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
