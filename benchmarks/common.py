"""The benchmark protocol shared by every ``bench_*.py``: warm-up, interleaved repeats, medians,
ratios against peers measured in the same run, a table for people and a JSON line per case.

Absolute times on shared machines are noise; the ratios are the figures that matter.

Note [One thread runtime per library]: ferro's kernels and PyTorch both run OpenMP teams, and
both load GNU libgomp under one soname, so a process that imports both gets one libgomp, set up
by whichever library came first: ferro's passive waiting (Note [OpenMP wait policy] in
ferro/_C/__init__.py) or PyTorch's spinning, never each its own. Measured in one process, the
GPT step of bench_seq ran ferro at 275 ms beside PyTorch's spinning team (it runs 112 ms alone),
and PyTorch would run under ferro's setting the other way round. So where PyTorch is installed,
``optional_torch()`` starts the same script once more in a child process (the peer's pass,
with ferro's process-wide settings off: FERRO_OFF), where ``measure()`` times only
PyTorch's cases; in this process (ferro loaded first), ``measure()`` times every other case.
Each library is timed as its users run it, and every ratio still comes from one run of one
script.

Note [Peer pass in lockstep]: the two passes take turns, round by round, within each
``measure()`` call: the child times one round of PyTorch's cases while this process waits on
a pipe, then this process times one round of its own, and so on; the child sends its medians at
the end of the call. Run one after the other (the child's whole script first, as before), the
two libraries' timings of one case were a minute apart, and this machine's neighbours change
its speed over minutes: the digits CNN's step measured 0.68, 1.01 and 1.53x PyTorch in three
runs of the same code, each library's own median swinging 1.2-1.8 ms. Every ``measure()`` call
is a meeting point, also one without PyTorch cases: the child announces it has reached the call
and blocks until the main pass says "next", so the child's own script (inputs, checks) never
runs while the main pass times. A waiting process holds no core; the threads it leaves
spinning are absorbed by the next round's first untimed calls (HANDOVER_SECONDS).
"""

from __future__ import annotations

import atexit
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
# The first case of a round that follows the other pass's round (Note [Peer pass in lockstep]),
# and a case that follows one on NumPy's matmul (``measure``'s ``blas_cases``), absorb this long:
# OpenBLAS's worker threads, which NumPy's matmul wakes, spin for about 0.1 s after their last
# GEMM (Note [Two-core GEMM] in ferro/_C/gemm.pyx). With 25 ms PyTorch's digits-CNN step ran
# at 7.2 ms beside the spinning, 1.2 ms alone; and ferro's MLP step with its two-core GEMM on
# (whose products wake no OpenBLAS worker), 2.9 ms after the NumPy case against 2.1 after
# 0.25 s of its own.
HANDOVER_SECONDS = 0.15


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
    if os.environ.get(PEER_PASS_ENV) is None and _peer["proc"] is not None:
        info["torch_timed_in"] = "its own process, in lockstep"
    return info


def header(name: str) -> None:
    import numpy as np

    print(f"# {name}  python {platform.python_version()}  numpy {np.__version__}")
    print(f"# threads: {json.dumps(thread_info())}")


# Set in the peer's pass (Note [One thread runtime per library]): "<read fd>,<write fd>", its
# ends of the two pipes to the main pass (Note [Peer pass in lockstep]).
PEER_PASS_ENV = "FERRO_BENCH_PEER_PASS"
_peer: dict = {"proc": None, "calls": 0, "send": None, "recv": None, "err": None}


def is_peer_case(name: str) -> bool:
    """PyTorch's cases: named ``torch``, ``torch_...``/``torch ...`` or ``.../torch``."""
    return name == "torch" or name.startswith(("torch_", "torch ")) or name.endswith("/torch")


def optional_torch(peer_pass: bool = True):
    """PyTorch when installed, else None (its rows are then reported as skipped).

    With ``peer_pass`` (every CPU benchmark), PyTorch's cases are timed in a child process of
    their own (Note [One thread runtime per library]), started at the first call."""
    in_peer = os.environ.get(PEER_PASS_ENV) is not None
    if not in_peer:
        import ferro  # noqa: F401  (first, so that libgomp is set up as ferro sets it)
    try:
        import torch
    except ImportError:
        return None
    if in_peer and _peer["send"] is None:
        read_fd, write_fd = (int(f) for f in os.environ[PEER_PASS_ENV].split(","))
        _peer["recv"], _peer["send"] = os.fdopen(read_fd, "r"), os.fdopen(write_fd, "w")
    elif peer_pass and not in_peer and _peer["proc"] is None:
        _start_peer_pass()
    return torch


# ferro's process-wide settings, each made when ferro is imported, all off in the peer's pass
# (the scripts import ferro there too): libgomp's wait policy (Note [OpenMP wait policy]), glibc
# malloc's mmap and trim thresholds and NumPy's caching allocator (Note [Caching allocator]).
# Until session 12 the peer's pass kept the last two (PyTorch's allocations went through
# ferro's malloc thresholds). In bench_conv, three alternate runs each way showed no difference
# beyond this machine's noise; the point is that PyTorch runs as its users run it.
FERRO_OFF = {"FERRO_OMP_PASSIVE": "0", "FERRO_MALLOC_TUNING": "0", "FERRO_CACHING_ALLOCATOR": "0"}


def _start_peer_pass() -> None:
    to_child, from_parent = os.pipe()[::-1]  # (write end, read end)
    from_child, to_parent = os.pipe()
    err = tempfile.TemporaryFile()
    env = dict(os.environ, **{PEER_PASS_ENV: f"{from_parent},{to_parent}"}, **FERRO_OFF)
    proc = subprocess.Popen(
        [sys.executable, *sys.argv],
        env=env,
        pass_fds=(from_parent, to_parent),
        stdout=subprocess.DEVNULL,
        stderr=err,
    )
    os.close(from_parent)
    os.close(to_parent)
    _peer.update(proc=proc, send=os.fdopen(to_child, "w"), recv=os.fdopen(from_child), err=err)
    atexit.register(_finish_peer_pass)


def _finish_peer_pass() -> None:
    """At exit: the child's pipe closed (a child still in the script leaves at its next call)
    and the child waited for."""
    proc, _peer["proc"] = _peer["proc"], None
    if proc is not None:
        _peer["send"].close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def _send(message: dict) -> None:
    _peer["send"].write(json.dumps(message) + "\n")
    _peer["send"].flush()


def _recv() -> dict:
    line = _peer["recv"].readline()
    if not line:
        if os.environ.get(PEER_PASS_ENV) is not None:  # the main pass is gone: so are we
            os._exit(0)
        _peer["err"].seek(0)
        tail = _peer["err"].read().decode(errors="replace")[-3000:]
        raise RuntimeError(f"the peer's pass of {sys.argv[0]} stopped:\n{tail}")
    return json.loads(line)


def measure(
    cases: dict[str, Callable[[], object]], repeats: int, warmup: int = 1, blas_cases=()
) -> dict:
    """Run each case ``warmup`` times, then ``repeats`` rounds interleaving the cases.

    Returns the median seconds per call of each case. Interleaving spreads machine noise over
    every case instead of penalising whichever ran during a busy moment; the untimed calls
    before each timed one keep one library's thread pools from slowing the next case. PyTorch's
    cases are timed in the peer's pass when there is one, its rounds taking turns with these
    (Note [Peer pass in lockstep]).
    """
    if _peer["send"] is None:
        return _measure(cases, repeats, warmup, blas_cases)
    in_peer = os.environ.get(PEER_PASS_ENV) is not None
    mine = {k: f for k, f in cases.items() if is_peer_case(k) == in_peer}
    theirs = sorted(k for k in cases if is_peer_case(k) != in_peer)
    call, _peer["calls"] = _peer["calls"], _peer["calls"] + 1
    rounds = _rounds(mine, repeats, warmup, bool(mine) and bool(theirs), blas_cases)
    if in_peer:  # arrive, then run the rounds the main pass asks for until it says "next"
        _send({"call": call, "cases": sorted(mine), "repeats": repeats})
        med = {}
        while "next" not in (order := _recv()):
            if order["round"] == 0:
                next(rounds)  # the warmup
            r = next(rounds)
            if r == repeats - 1:
                med = next(rounds)
            _send({"done": r, "medians": med})
        return {k: med.get(k, float("nan")) for k in cases}
    arrival = _recv()  # the peer's pass has reached this call and waits
    if arrival != {"call": call, "cases": theirs, "repeats": repeats}:
        raise RuntimeError(
            f"measure() call {call}: the peer's pass has {arrival}, this pass has cases "
            f"{sorted(cases)} and {repeats} repeats: the script must make the same calls in "
            "both passes"
        )
    next(rounds)  # the warmup
    reply = {}
    for r in range(repeats):
        if theirs:
            _send({"round": r})
            reply = _recv()
        next(rounds)
    med = next(rounds)
    _send({"next": True})
    return {k: med[k] if k in med else reply["medians"][k] for k in cases}


def _rounds(cases, repeats: int, warmup: int, turns=False, blas_cases=()):
    """A generator: the warmup at the first ``next``, which gives None; each later ``next``
    times one round (yields the round number), the last gives the medians. ``turns``: the
    rounds take turns with the other pass's, so each round's first case absorbs for
    HANDOVER_SECONDS; so does each case that follows one of ``blas_cases`` (cases on NumPy's
    matmul)."""
    for fn in cases.values():
        for _ in range(warmup):
            fn()
    samples: dict[str, list[float]] = {k: [] for k in cases}
    yield None
    names = list(cases)
    for r in range(repeats):
        for i, (name, fn) in enumerate(cases.items()):
            # after the other pass's round, or after a case on NumPy's matmul (it wakes
            # OpenBLAS's worker, which then spins for ~0.1 s)
            long = turns and i == 0 or names[i - 1] in blas_cases
            t_end = time.perf_counter() + (HANDOVER_SECONDS if long else ABSORB_SECONDS)
            fn()  # untimed: absorbs the previous case's thread pools (see above)
            while time.perf_counter() < t_end:
                fn()
            t0 = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - t0)
        yield r
    yield {k: statistics.median(v) for k, v in samples.items()}


def _measure(cases, repeats: int, warmup: int, blas_cases=()) -> dict:
    rounds = _rounds(cases, repeats, warmup, blas_cases=blas_cases)
    for _ in range(repeats + 1):
        next(rounds)
    return next(rounds)


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
