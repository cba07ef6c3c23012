"""The profiler: complete, linked records; a valid trace; nothing left behind when off."""

import json
import threading

import pytest

import ferro
from ferro._C import engine
from ferro.errors import ArgumentError
from ferro.profiler import profile


def _step():
    w = ferro.randn(3, 4, requires_grad=True)
    x = ferro.randn(2, 3)
    h = (x @ w).tanh()  # matmul, tanh
    loss = (h * 2.0).sum()  # mul, sum
    loss.backward()
    return w


def test_every_op_and_node_is_recorded_and_backward_links_to_forward():
    with profile() as prof:
        _step()
    ev = prof.events()
    fwd = [e for e in ev if e.kind == "forward"]
    bwd = [e for e in ev if e.kind == "backward"]
    assert [e.op for e in fwd] == ["matmul", "tanh", "mul", "sum"]
    assert sorted(e.name for e in bwd) == sorted(
        ["MatmulBackward", "TanhBackward", "MulBackward", "SumBackward"]
    )
    by_id = {e.id: e for e in fwd}
    for b in bwd:
        f = by_id[b.forward_id]
        assert f.op == b.op and f.recorded
        assert f.start_ns + f.duration_ns <= b.start_ns  # backward after its forward
        assert b.duration_ns > 0
    mm = next(e for e in fwd if e.op == "matmul")
    assert mm.shapes == [(2, 3), (3, 4)] and mm.dtype == "float32" and mm.out_bytes == 2 * 4 * 4
    assert [e.name for e in bwd][0] == "SumBackward"  # the walk starts at the root


def test_table_groups_by_op_and_sorts():
    with profile() as prof:
        for _ in range(3):
            _step()
    text = prof.table(sort_by="calls", row_limit=2)
    lines = text.splitlines()
    assert lines[0].split()[:2] == ["op", "calls"]
    assert len(lines) == 2 + 2 + 1  # header, rule, 2 rows, footer
    assert " 3 " in lines[2]
    with pytest.raises(ArgumentError, match="sort_by must be one of .* got 'bogus'"):
        prof.table(sort_by="bogus")


def test_chrome_trace_is_valid_json_with_two_tracks(tmp_path):
    with profile() as prof:
        _step()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(path)
    data = json.loads(path.read_text())
    events = data["traceEvents"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {"forward", "backward"}
    spans = [e for e in events if e["ph"] == "X"]
    assert spans and all({"name", "ts", "dur", "pid", "tid", "cat"} <= set(e) for e in spans)
    assert {e["tid"] for e in spans} == {1, 2}


def test_profiler_off_removes_every_hook_and_nests():
    assert engine.get_profiler() is None
    with profile() as outer:
        with profile() as inner:
            _step()
        n_outer = len(outer.events())
        _step()  # the outer profile records again once the inner one exits
        assert len(outer.events()) == n_outer + 8
    assert n_outer == 0
    assert engine.get_profiler() is None
    n = len(inner.events())
    _step()
    assert len(inner.events()) == n and n == 8


def test_backward_of_a_forward_recorded_elsewhere_links_to_nothing():
    # The node's forward is in the outer profile; the inner one must not read that id as one of
    # its own events.
    with profile() as outer:
        w = ferro.randn(3, 4, requires_grad=True)
        loss = (ferro.randn(2, 3) @ w).tanh().sum()
        with profile() as inner:
            ferro.ones(2) * 2  # an inner forward event with id 0
            loss.backward()
    backward = [e for e in inner.events() if e.kind == "backward"]
    assert len(backward) == 3 and all(e.forward_id == -1 for e in backward)
    assert [e.op for e in outer.events()] == ["matmul", "tanh", "sum"]


def _profile_in_threads(exit_order):
    """Threads A and B each profile 5 steps at the same time; they exit in ``exit_order``."""
    profiles, errors = {}, []
    entered = threading.Barrier(2, timeout=60)
    done = threading.Barrier(2, timeout=60)
    exits = {name: threading.Event() for name in "AB"}

    def worker(name):
        try:
            with profile() as prof:
                profiles[name] = (prof, threading.get_ident())
                entered.wait()
                for _ in range(5):
                    _step()
                done.wait()
                assert exits[name].wait(timeout=60)
        except Exception as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            if name == exit_order[0]:
                exits[exit_order[1]].set()

    threads = {name: threading.Thread(target=worker, args=(name,)) for name in "AB"}
    for t in threads.values():
        t.start()
    exits[exit_order[0]].set()
    for t in threads.values():
        t.join(timeout=60)
    assert not errors
    return profiles


@pytest.mark.parametrize("exit_order", ["AB", "BA"])
def test_profiles_in_two_threads_keep_their_own_events_and_leave_nothing_installed(exit_order):
    assert engine.get_profiler() is None
    profiles = _profile_in_threads(exit_order)
    assert engine.get_profiler() is None
    for prof, ident in profiles.values():
        events = prof.events()
        assert {e.thread for e in events} == {ident}
        forward = [e for e in events if e.kind == "forward"]
        backward = [e for e in events if e.kind == "backward"]
        assert [e.op for e in forward] == ["matmul", "tanh", "mul", "sum"] * 5
        assert len(backward) == 20
        for b in backward:
            assert events[b.forward_id].op == b.op and events[b.forward_id].kind == "forward"


def test_a_thread_without_a_profile_is_not_recorded():
    with profile() as prof:
        t = threading.Thread(target=_step)
        t.start()
        t.join()
    assert prof.events() == []


def test_decorator_form():
    calls = []

    @profile()
    def run():
        calls.append(engine.get_profiler() is not None)
        _step()

    run()
    assert calls == [True] and engine.get_profiler() is None
