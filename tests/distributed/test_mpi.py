"""Real multi-process tests: ``mpiexec -n 2`` and ``-n 3`` (uneven splits) run every case of
``mpi_cases.py`` once per world size; each case is reported as its own test here.

They need the ``[mpi]`` extra (mpi4py and the mpich wheel, which ships ``mpiexec``); without it
they skip and say so. Every run is bounded: a hang fails the test instead of the suite.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ferro.distributed import is_available
from ferro.distributed.run import find_mpiexec

HERE = Path(__file__).parent
SCRIPT = HERE / "mpi_cases.py"


def _case_names() -> list[str]:
    tree = ast.parse(SCRIPT.read_text())
    return [
        f.name
        for f in tree.body
        if isinstance(f, ast.FunctionDef)
        and any(getattr(d, "id", None) == "case" for d in f.decorator_list)
    ]


CASES = _case_names()
pytestmark = pytest.mark.skipif(
    not (is_available() and find_mpiexec()),
    reason="the [mpi] extra (mpi4py + mpich) is not installed",
)


def _run(n: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    proc = subprocess.run(
        [find_mpiexec(), "-n", str(n), sys.executable, str(SCRIPT)],
        cwd=HERE,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            res = json.loads(line)
            results[res["case"]] = res
    if not results:
        pytest.fail(
            f"mpiexec -n {n} reported nothing (rc {proc.returncode}):\n{proc.stderr[-3000:]}"
        )
    return results


@pytest.fixture(scope="module")
def runs():
    cache = {}

    def get(n):
        if n not in cache:
            cache[n] = _run(n)
        return cache[n]

    return get


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("name", CASES)
def test_case(runs, n, name):
    res = runs(n).get(name)
    assert res is not None, f"case {name} did not report under mpiexec -n {n}"
    assert res["ok"], "\n".join(f"rank {r}:\n{e}" for r, e in res["error"].items())


def test_digits_demo_distributed(tmp_path):
    """The README's data-parallel demo, short: two ranks train, rank 0 alone prints and plots."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    plot = tmp_path / "curves.png"
    cmd = [find_mpiexec(), "-n", "2", sys.executable, "-P", "-m", "ferro.examples.digits"]
    args = ["--distributed", "--quiet", "--epochs", "4", "--plot", str(plot)]
    proc = subprocess.run(
        cmd + args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("test accuracy")]
    assert len(lines) == 1, proc.stdout  # rank 0 only
    assert "on 2 ranks" in lines[0] and float(lines[0].split()[2]) > 0.9
    assert plot.exists()
