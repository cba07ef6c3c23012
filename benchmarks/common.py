"""The benchmark protocol shared by every ``bench_*.py``: warm-up, interleaved repeats, medians,
ratios against peers measured in the same run, a table for people and a JSON line per case.

Absolute times on shared machines are noise; the ratios are the figures that matter.

Note [One thread runtime per library]: ferro's kernels and PyTorch both run OpenMP teams, and
both load GNU libgomp under one soname, so a process that imports both gets one libgomp, set up
by whichever library came first: ferro's passive waiting (Note [OpenMP wait policy] in
ferro/_C/__init__.py) or PyTorch's spinning, never each its own. Measured in one process, the
GPT step of bench_seq ran ferro at 275 ms beside PyTorch's spinning team (it runs 112 ms alone),
and PyTorch would run under ferro's setting the other way round. So where PyTorch is installed,
``optional_torch()`` first runs the same script once more in a child process (the peer's pass,
with ferro's passive setting off, PyTorch loaded first), where ``measure()`` times only
PyTorch's cases and records their medians; in this process (ferro loaded first), ``measure()``
times every other case and takes PyTorch's medians from the child, call by call. Each library
is timed as its users run it, and every ratio still comes from one run of one script.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

# Interleaved cases share 2 cores. Thread pools (ferro's OpenMP kernels, PyTorch's intra-op
# threads, OpenBLAS) busy-wait for a while after their work and sleep after that; the next case
# then either competes with spinning threads or pays for waking its own sleeping pool. Forcing one
# wait policy on everyone would favour some libraries over others. So every library keeps its
# default, and each timed call is preceded by untimed calls of the same case for at least
# ABSORB_SECONDS (libgomp's spinning lasts a few milliseconds): whatever the previous case left
# behind lands on those, and each library is timed in its own steady state.
ABSORB_SECONDS = 0.025


def thread_info() -> dict:
    """Thread settings that change the figures (printed by every script)."""
    info = {"cpu_count": os.cpu_count()}
    for var in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        if var in os.environ:
            info[var] = os.environ[var]
    torch = optional_torch(peer_pass=False)
    if torch is not None:
        info["torch_threads"] = torch.get_num_threads()
    info["ferro_openmp_wait"] = __import__("ferro")._C.openmp_wait_policy
    if os.environ.get(PEER_PASS_ENV) is None and _peer["medians"] is not None:
        info["torch_timed_in"] = "its own process"
    return info


def header(name: str) -> None:
    import numpy as np

    print(f"# {name}  python {platform.python_version()}  numpy {np.__version__}")
    print(f"# threads: {json.dumps(thread_info())}")


# Set in the peer's pass (Note [One thread runtime per library]): the file its medians go to.
PEER_PASS_ENV = "FERRO_BENCH_PEER_PASS"
_peer = {"medians": None, "calls": 0, "log": []}


def is_peer_case(name: str) -> bool:
    """PyTorch's cases: named ``torch``, ``torch_...``/``torch ...`` or ``.../torch``."""
    return name == "torch" or name.startswith(("torch_", "torch ")) or name.endswith("/torch")


def optional_torch(peer_pass: bool = True):
    """PyTorch when installed, else None (its rows are then reported as skipped).

    With ``peer_pass`` (every CPU benchmark), PyTorch's cases are timed in a child process of
    their own (Note [One thread runtime per library]); the child runs at the first call."""
    if os.environ.get(PEER_PASS_ENV) is None:
        import ferro  # noqa: F401  (first, so that libgomp is set up as ferro sets it)
    try:
        import torch
    except ImportError:
        return None
    if peer_pass and os.environ.get(PEER_PASS_ENV) is None and _peer["medians"] is None:
        _peer["medians"] = _run_peer_pass()
    return torch


def _run_peer_pass() -> list[dict]:
    fd, path = tempfile.mkstemp(suffix=".json", prefix="ferro-bench-peer-")
    os.close(fd)
    env = dict(os.environ, **{PEER_PASS_ENV: path, "FERRO_OMP_PASSIVE": "0"})
    try:
        proc = subprocess.run(
            [sys.executable, *sys.argv], env=env, capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise RuntimeError(f"the peer's pass of {sys.argv[0]} failed:\n{proc.stderr[-3000:]}")
        with open(path) as f:
            text = f.read()
        return json.loads(text) if text else []  # a pass that timed nothing writes nothing
    finally:
        os.unlink(path)


def measure(cases: dict[str, Callable[[], object]], repeats: int, warmup: int = 1) -> dict:
    """Run each case ``warmup`` times, then ``repeats`` rounds interleaving the cases.

    Returns the median seconds per call of each case. Interleaving spreads machine noise over
    every case instead of penalising whichever ran during a busy moment; the untimed call before
    each timed one keeps one library's thread pools from slowing the next case. PyTorch's cases
    are timed in the peer's pass when there is one (Note [One thread runtime per library]).
    """
    peer_out = os.environ.get(PEER_PASS_ENV)
    if peer_out is None and _peer["medians"] is None:
        return _measure(cases, repeats, warmup)
    mine = {k: f for k, f in cases.items() if is_peer_case(k) == (peer_out is not None)}
    med = _measure(mine, repeats, warmup)
    if peer_out is not None:  # the peer's pass: record, and give the other cases no time
        _peer["log"].append(med)
        with open(peer_out, "w") as f:
            json.dump(_peer["log"], f)
        return {k: med.get(k, float("nan")) for k in cases}
    call, _peer["calls"] = _peer["calls"], _peer["calls"] + 1
    peer = _peer["medians"][call] if call < len(_peer["medians"]) else {}
    if set(peer) != {k for k in cases if is_peer_case(k)}:
        raise RuntimeError(
            f"measure() call {call}: the peer's pass timed {sorted(peer)}, this pass has "
            f"{sorted(cases)}: the script must make the same calls in both passes"
        )
    return {k: med[k] if k in med else peer[k] for k in cases}


def _measure(cases: dict[str, Callable[[], object]], repeats: int, warmup: int) -> dict:
    for fn in cases.values():
        for _ in range(warmup):
            fn()
    samples: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            t_end = time.perf_counter() + ABSORB_SECONDS
            fn()  # untimed: absorbs the previous case's thread pools (see above)
            while time.perf_counter() < t_end:
                fn()
            t0 = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in samples.items()}


def emit(bench: str, case: str, **fields) -> dict:
    """Print one JSON line (``BENCH {...}``) for a case and return the record."""
    rec = {"bench": bench, "case": case, **fields}
    print("BENCH " + json.dumps(rec, sort_keys=True))
    return rec


def table(rows: list[list], headers: list[str]) -> None:
    """Print an aligned plain-text table."""
    cells = [headers] + [[_fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for j, r in enumerate(cells):
        print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))
        if j == 0:
            print("  ".join("-" * w for w in widths))


def _fmt(c) -> str:
    if isinstance(c, float):
        return f"{c:.3g}"
    return str(c)


def start(name: str):
    """What every script's main does after parsing its arguments: import ferro and PyTorch (None
    when not installed) and print the header. Returns (ferro, torch)."""
    import ferro

    torch = optional_torch()
    header(name)
    return ferro, torch


def over(a: float, b: float | None) -> float | None:
    """The ratio a / b, or None where b was not measured (a peer that is not installed)."""
    return a / b if b else None


def cell(v):
    """A table cell: v, or "-" where it was not measured."""
    return "-" if v is None else v


def expression_cases(ferro, torch, rng, n: int) -> dict:
    """(a*b + c).sum() forward and backward, gradients for a, b and c: cases "ferro" and "torch"
    (when installed) on the same n float32 values drawn from rng."""
    a_np, b_np, c_np = (rng.normal(size=n).astype("float32") for _ in range(3))
    cases = {}
    for name, lib, to in (
        ("ferro", ferro, ferro.from_numpy),
        ("torch", torch, lambda v: torch.from_numpy(v.copy())),
    ):
        if lib is None:
            continue
        a, b, c = (to(v).requires_grad_() for v in (a_np, b_np, c_np))

        def run(a=a, b=b, c=c):
            a.grad = b.grad = c.grad = None
            (a * b + c).sum().backward()

        cases[name] = run
    return cases
