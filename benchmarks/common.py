"""The benchmark protocol shared by every ``bench_*.py``: warm-up, interleaved repeats, medians,
ratios against peers measured in the same run, a table for people and a JSON line per case.

Absolute times on shared machines are noise; the ratios are the figures that matter.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
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
    try:
        import torch

        info["torch_threads"] = torch.get_num_threads()
    except ImportError:
        pass
    return info


def header(name: str) -> None:
    import numpy as np

    print(f"# {name}  python {platform.python_version()}  numpy {np.__version__}")
    print(f"# threads: {json.dumps(thread_info())}")


def optional_torch():
    """PyTorch when installed, else None (its rows are then reported as skipped)."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def measure(cases: dict[str, Callable[[], object]], repeats: int, warmup: int = 1) -> dict:
    """Run each case ``warmup`` times, then ``repeats`` rounds interleaving the cases.

    Returns the median seconds per call of each case. Interleaving spreads machine noise over
    every case instead of penalising whichever ran during a busy moment; the untimed call before
    each timed one keeps one library's thread pools from slowing the next case.
    """
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
