"""Run code in a child Python, so that a segfault fails one test instead of the whole run.

The child inherits the environment (the installed ferro, or ``PYTHONPATH`` with
``FERRO_TEST_INPLACE=1``) and runs with ``faulthandler`` on, so a crash leaves the Python
stack on its stderr.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys


def run(args: list[str], timeout: float = 300, tmpdir=None) -> subprocess.CompletedProcess:
    """``python -X faulthandler ARGS`` in a child process; its output captured as text. With
    ``tmpdir``, the child's temporary files go there (``TMPDIR``), so a child killed before it
    could clean up leaves nothing behind once the caller removes ``tmpdir``."""
    env = None if tmpdir is None else {**os.environ, "TMPDIR": os.fspath(tmpdir)}
    return subprocess.run(
        [sys.executable, "-X", "faulthandler", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def last_case(stdout: str) -> str | None:
    """The last ``CASE <json>`` line a worker printed: the case running when it stopped."""
    cases = [line[len("CASE ") :] for line in stdout.splitlines() if line.startswith("CASE ")]
    return cases[-1] if cases else None


def death_report(proc: subprocess.CompletedProcess) -> str | None:
    """A message naming the signal and the case running when the child was killed by a signal
    (a segfault, an abort), or None when it exited on its own."""
    if proc.returncode >= 0:
        return None
    try:
        name = signal.Signals(-proc.returncode).name
    except ValueError:
        name = f"signal {-proc.returncode}"
    return (
        f"the child process died by {name} while running:\n  {last_case(proc.stdout)}\n"
        f"its stderr ends with:\n{proc.stderr[-4000:]}"
    )


def run_code(code: str, timeout: float = 120) -> dict:
    """Run ``code`` in a child Python that must exit cleanly; returns the JSON object the code
    printed on its last stdout line. A crash or a non-zero exit fails with the child's output."""
    proc = run(["-c", code], timeout=timeout)
    report = death_report(proc)
    if report is not None:
        raise AssertionError(report)
    if proc.returncode != 0:
        raise AssertionError(f"the child exited with {proc.returncode}:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
