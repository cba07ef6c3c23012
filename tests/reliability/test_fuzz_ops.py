"""Fuzzing the op database over shapes, dtypes and memory layouts (issue 11, "Tests").

Every layout other than contiguous and transposed (negative strides, strided views, stride-0
broadcast views, read-only arrays, read-only memory maps, non-native byte order) runs in a
worker process (fuzz_support.py), as does the sweep of the whole database: a segfault there
fails the test with the op and the input that caused it, printed by the worker just before it
ran. Hypothesis is derandomized and keeps no example database, so CI runs the same cases every
time. The checks themselves are in fuzz_support.check_case / check_write_case.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from fuzz_support import (
    LAYOUTS,
    SAFE_LAYOUTS,
    check_case,
    fuzz_settings,
    make_layout,
    shape_cases,
)
from hypothesis import given
from isolate import death_report, run

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz_support.py")


@pytest.fixture
def run_worker(tmp_path):
    """Runs the worker (its memory-mapped files under tmp_path) and returns its output; fails
    naming the case that crashed it, or listing the failing cases."""

    def go(*args: str) -> str:
        proc = run([WORKER, *args], tmpdir=tmp_path)
        report = death_report(proc)
        if report is not None:
            pytest.fail(report)
        if proc.returncode != 0:
            failures = [line for line in proc.stdout.splitlines() if line.startswith("FAIL ")]
            pytest.fail(
                f"{len(failures)} failing cases:\n"
                + "\n".join(failures[:30])
                + f"\nthe worker's stderr ends with:\n{proc.stderr[-6000:]}"
            )
        return proc.stdout

    return go


# The whole database in one layout at a time, so that a failing test id names the layout (and
# with it the issue item: byteswapped is item 3, read-only memory item 2).
@pytest.mark.parametrize("layout", LAYOUTS)
def test_op_database_sweep(layout, run_worker):
    out = run_worker("sweep", layout)
    assert out.count("\nPASS") + out.count("\nREFUSED") > 100  # the sweep ran the database


@pytest.mark.parametrize("layout", LAYOUTS)
def test_in_place_ops_and_optimizer_steps(layout, run_worker):
    out = run_worker("writes", layout)
    assert "DONE 0 failures" in out


def test_mixed_layouts_across_the_database(run_worker):
    """Each argument in its own layout, any entry, sample and dtype (Hypothesis)."""
    assert "DONE" in run_worker("fuzz", "600")


def test_elementwise_shapes_in_every_layout(run_worker):
    """Mutually broadcastable shapes for the elementwise ops, each argument in any layout,
    with gradcheck in float64 (Hypothesis)."""
    assert "DONE" in run_worker("shapes", "300")


@fuzz_settings(150)
@given(case=shape_cases(SAFE_LAYOUTS))
def test_elementwise_shapes_and_dtypes_in_process(case):
    """The layouts every kernel must take, in this process: shapes, dtypes, gradcheck."""
    assert check_case(case) == "pass"


def test_worker_crash_names_the_case_that_was_running():
    proc = run([WORKER, "selftest-crash"])
    report = death_report(proc)
    assert report is not None and "SIGSEGV" in report
    assert json.dumps({"op": "selftest", "sample": 0}) in report


def test_check_case_catches_a_wrong_forward(monkeypatch):
    """The checker is not vacuous: an op whose reference disagrees fails it."""
    from opdb import BY_NAME

    op = BY_NAME["exp"]
    monkeypatch.setattr(op, "ref", lambda x: np.exp(x) * 1.001)
    case = {"op": "exp", "sample": 3, "dtype": "float64", "layouts": ["strided"], "seed": 0}
    with pytest.raises(AssertionError, match="forward"):
        check_case(case)


def test_check_case_catches_an_op_that_writes_its_input(monkeypatch):
    from opdb import BY_NAME

    op = BY_NAME["neg"]
    neg = op.fn

    def neg_and_scribble(x):
        y = neg(x)
        x._data[...] = 0.0
        return y

    monkeypatch.setattr(op, "fn", neg_and_scribble)
    monkeypatch.setattr(op, "ref", lambda x: -x)
    case = {"op": "neg", "sample": 3, "dtype": "float64", "layouts": ["negative"], "seed": 0}
    with pytest.raises(AssertionError, match="written to"):
        check_case(case)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_layouts_are_what_they_claim(layout):
    """Each layout keeps the values (broadcast: the first row's) and really is that layout, so
    that the fuzz cannot quietly test contiguous arrays only."""
    a = np.arange(12.0).reshape(3, 4)
    v = make_layout(a, layout)
    want = np.broadcast_to(a[:1], a.shape) if layout == "broadcast" else a
    np.testing.assert_array_equal(v, want)
    flags = v.flags
    expected = {
        "contiguous": flags.c_contiguous and flags.writeable,
        "transposed": flags.f_contiguous and not flags.c_contiguous,
        "negative": all(s < 0 for s in v.strides),
        "strided": v.strides[-1] == 2 * v.itemsize,
        "broadcast": 0 in v.strides and not flags.writeable,
        "readonly": flags.c_contiguous and not flags.writeable,
        "mmap": type(v) is np.ndarray and isinstance(v.base, np.memmap) and not flags.writeable,
        "byteswapped": not v.dtype.isnative,
    }[layout]
    assert expected, f"{layout}: strides {v.strides}, flags {flags}"
