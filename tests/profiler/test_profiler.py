"""The profiler: complete, linked records; a valid trace; nothing left behind when off."""

import json

import pytest

import ferro
from ferro._C import engine
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
    with pytest.raises(ValueError):
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
        assert engine.get_profiler() is outer._recorder
    assert engine.get_profiler() is None
    n = len(inner.events())
    _step()
    assert len(inner.events()) == n and n > 0


def test_decorator_form():
    calls = []

    @profile()
    def run():
        calls.append(engine.get_profiler() is not None)
        _step()

    run()
    assert calls == [True] and engine.get_profiler() is None
