"""The two-core threshold: NumPy's one-core ufunc against ferro's OpenMP loop at 1 and 2 threads.

Note [Two-core elementwise ops] (docs/design.md): ``cpu_kernels.binary`` runs add/sub/mul/div
on both cores from ``cpu_kernels.TWO_CORE_MIN`` elements. This script measures where that pays,
for the two passes of the update loop most tutorials write (``p -= lr * p.grad``: a fresh
``lr * g``, then an in-place subtract) and for the fused ``p.sub_(g, alpha=lr)``, at sizes around
the threshold (262,144 and 401,408 are the 512x512 and 784x512 layers of bench_mlp's MLP). It
calls ``binary`` with its threshold lowered, so every size runs the OpenMP loop whatever the
constant; the three variants of a size are interleaved, and the minimum and median of many
repeats are printed. A two-thread effect: run it on a quiet machine (it prints the load).

    python benchmarks/bench_two_core.py [--repeats 400] [--dtype float32]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import emit, header, table  # noqa: E402

SIZES = (1 << 15, 1 << 16, 1 << 17, 1 << 18, 512 * 512, 784 * 512, 1 << 19, 1 << 20)
LR = 0.01


def passes(binary, p, g, t):
    """The three passes per variant: NumPy, then the OpenMP loop (threads set by the caller)."""
    return {
        "mul": (lambda: np.multiply(g, LR), lambda: binary(2, g, LR, None, 1.0, 0)),
        "isub": (lambda: np.subtract(p, t, out=p), lambda: binary(1, p, t, p, 1.0, 0)),
        "sub_alpha": (
            lambda: np.subtract(p, np.multiply(g, LR, out=t), out=p),
            lambda: binary(1, p, g, p, LR, 0),
        ),
    }


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=400)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    args = ap.parse_args(argv)

    import ferro
    from ferro._C import cpu_kernels

    header("bench_two_core")  # no peer: PyTorch's split is not what is measured here

    load = os.getloadavg()[0]
    print(f"# load average {load:.2f}; TWO_CORE_MIN = {cpu_kernels.TWO_CORE_MIN}")
    threads = ferro.get_num_threads()
    rng = np.random.default_rng(0)
    records, rows = [], []
    for n in args.sizes:
        p = rng.standard_normal(n).astype(args.dtype)
        g = rng.standard_normal(n).astype(args.dtype)
        t = g * np.asarray(LR, p.dtype)  # lr * g: what the update subtracts
        for name, (numpy_fn, omp_fn) in passes(cpu_kernels.binary, p, g, t).items():
            times = {"numpy": [], "omp1": [], "omp2": []}
            for _ in range(5):  # warm up: first touch, the thread team
                numpy_fn(), omp_fn()
            for _ in range(args.repeats):
                for case in times:
                    ferro.set_num_threads(2 if case == "omp2" else 1)
                    fn = numpy_fn if case == "numpy" else omp_fn
                    t0 = time.perf_counter()
                    fn()
                    times[case].append(time.perf_counter() - t0)
            ferro.set_num_threads(threads)
            mins = {k: min(v) * 1e6 for k, v in times.items()}
            meds = {k: float(np.median(v)) * 1e6 for k, v in times.items()}
            records.append(
                emit(
                    "bench_two_core",
                    f"{name}_{n}",
                    size=n,
                    dtype=args.dtype,
                    load=load,
                    **{f"{k}_min_us": v for k, v in mins.items()},
                    **{f"{k}_median_us": v for k, v in meds.items()},
                )
            )
            rows.append(
                [
                    n,
                    name,
                    mins["numpy"],
                    mins["omp1"],
                    mins["omp2"],
                    meds["numpy"],
                    meds["omp2"],
                    meds["omp2"] / meds["numpy"],
                ]
            )
    table(
        rows,
        ["n", "pass", "numpy min", "1 thr min", "2 thr min", "numpy med", "2 thr med", "2thr/np"],
    )
    # The threshold to choose: the smallest size from which two threads beat NumPy in every
    # pass at the median, at that size and every larger one.
    wins = {}
    for row in rows:
        wins[row[0]] = wins.get(row[0], True) and row[-1] < 1.0
    best = None
    for n in sorted(wins, reverse=True):
        if not wins[n]:
            break
        best = n
    print(f"# two threads win from {best} elements (load {os.getloadavg()[0]:.2f} at the end)")
    return records


if __name__ == "__main__":
    main()
