"""The benchmark protocol's peer pass (benchmarks/common.py, Note [Peer pass in lockstep]):
PyTorch's cases are timed in a child process whose rounds take turns with the main pass's.
Needs the repository's benchmarks/ and PyTorch; skips where either is missing."""

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    not (ROOT / "benchmarks" / "common.py").is_file(),
    reason=f"no benchmarks/ at {ROOT}: the protocol is the repository's",
)

# The repository goes last on the probes' path: benchmarks/ is found there, and ferro where the
# suite found it (CI installs ferro and runs from outside the source tree, which has no build).
SCRIPT = """
import json, os, sys, time
sys.path.append({root!r})
from benchmarks import common

torch = common.optional_torch()
log = {log!r}


def case(name):
    def fn():
        with open(log, "a") as f:
            f.write(json.dumps([name, os.getpid(), time.monotonic()]) + "\\n")
    return fn


common.ABSORB_SECONDS = common.HANDOVER_SECONDS = 0.001
first = common.measure({{"ferro": case("ferro"), "torch": case("torch")}}, 4, warmup=1)
alone = common.measure({{"numpy": case("numpy")}}, 2)
second = common.measure({{"torch x": case("torch x"), "ferro x": case("ferro x")}}, 3)
if os.environ.get(common.PEER_PASS_ENV) is None:
    print(json.dumps([first, alone, second]))
"""


def test_peer_pass_times_the_peer_in_its_own_process_taking_turns(tmp_path):
    pytest.importorskip("torch")
    log = tmp_path / "calls.jsonl"
    script = tmp_path / "bench_probe.py"
    script.write_text(SCRIPT.format(root=str(ROOT), log=str(log)))
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=True
    )
    first, alone, second = json.loads(out.stdout.strip().splitlines()[-1])
    for med in (first, alone, second):
        assert all(v > 0 for v in med.values()), med
    assert set(first) == {"ferro", "torch"} and set(second) == {"torch x", "ferro x"}
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    pids = {name: {pid for n, pid, _ in calls if n == name} for name, _, _ in calls}
    assert len(pids["ferro"]) == 1 and len(pids["torch"]) == 1
    assert pids["ferro"] != pids["torch"] and pids["numpy"] == pids["ferro"]
    assert pids["torch x"] == pids["torch"] and pids["ferro x"] == pids["ferro"]
    # In time order, each call's rounds take turns: ferro's warmup, PyTorch's warmup and round
    # 0, ferro's round 0, PyTorch's round 1, ... (runs of calls, one library at a time), and
    # no call of the next measure() comes before the last round of this one.
    calls.sort(key=lambda c: c[2])
    runs = []
    for name, _, _ in calls:
        if not runs or runs[-1] != name:
            runs.append(name)
    assert runs == ["ferro", "torch"] * 4 + ["ferro", "numpy"] + ["ferro x", "torch x"] * 3 + [
        "ferro x"
    ]


def test_a_peer_pass_that_fails_names_its_error(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "bench_broken.py"
    script.write_text(
        f"import os, sys\nsys.path.append({str(ROOT)!r})\nfrom benchmarks import common\n"
        "common.optional_torch()\n"
        "if os.environ.get(common.PEER_PASS_ENV):\n    raise ValueError('peer broke here')\n"
        "common.measure({'ferro': lambda: None, 'torch': lambda: None}, 2)\n"
    )
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode != 0
    assert "peer's pass" in proc.stderr and "peer broke here" in proc.stderr
