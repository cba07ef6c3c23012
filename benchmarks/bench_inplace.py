"""Issue 16's goals in one run, each against its peers: in-place updates, the MLP step with a
hand-written update loop, and the bandwidth of ``(a*b + c).sum()`` forward+backward.

    python benchmarks/bench_inplace.py [--sizes 1000 100000 10000000] [--repeats 15]

1. ``t.sub_(g)`` and ``t.mul_(s)`` on float32 tensors of each size (each timed call runs the
   op 100,000 / n times, at least once), bare and inside a ``with no_grad():`` block of their
   own, against NumPy's in-place ufuncs (``np.subtract(a, g, out=a)``) and PyTorch's in-place
   ops (goal: within 1.15x of NumPy at 100K and 10M elements, 2.5x at 1K, block included). At
   10M the time of one array depends on whether the kernel backed it with huge pages (2.5-10 ms
   for the same subtract on this machine): compare several runs.
2. One step of the MLP 784-512-512-10 (batch 64) of ``bench_mlp``: the hand-written update loop
   (``with no_grad(): for p in params: p.sub_(lr * p.grad)``) and ferro's ``optim.SGD``, against
   the hand-written NumPy step and PyTorch's (goal: <= 1.0x PyTorch, <= 1.15x NumPy).
3. ``(a*b + c).sum()`` forward+backward on 10M float32 elements (``--n``): the minimum traffic
   (3 reads + 3 writes of n floats) over the time, against the copy bandwidth measured in the
   same run with 2 threads each copying half of an n-float array (goal: >= 50%, <= 0.5x
   PyTorch).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import bench_mlp  # noqa: E402
from benchmarks.common import cell, emit, expression_cases, measure, over, start, table  # noqa: E402


def batched(fn, reps: int):
    """``fn`` run ``reps`` times per call: one timed call of a 1K-element op is mostly timer."""
    if reps == 1:
        return fn

    def run():
        for _ in range(reps):
            fn()

    return run


def inplace_cases(ferro, torch, n: int, reps: int) -> dict:
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, n).astype(np.float32)
    g = rng.uniform(-1e-3, 1e-3, n).astype(np.float32)
    t, tg = ferro.from_numpy(a.copy()), ferro.from_numpy(g.copy())
    no_grad = ferro.no_grad

    def ferro_sub_block():
        with no_grad():
            t.sub_(tg)

    def ferro_mul_block():
        with no_grad():
            t.mul_(1.0)

    cases = {
        "numpy_sub": lambda: np.subtract(a, g, out=a),
        "ferro_sub": lambda: t.sub_(tg),
        "ferro_sub_block": ferro_sub_block,
        "numpy_mul": lambda: np.multiply(a, 1.0, out=a),
        "ferro_mul": lambda: t.mul_(1.0),
        "ferro_mul_block": ferro_mul_block,
    }
    if torch is not None:
        tt, ttg = torch.from_numpy(a.copy()), torch.from_numpy(g.copy())

        def torch_sub_block():
            with torch.no_grad():
                tt.sub_(ttg)

        cases["torch_sub"] = lambda: tt.sub_(ttg)
        cases["torch_sub_block"] = torch_sub_block
        cases["torch_mul"] = lambda: tt.mul_(1.0)
    return {k: batched(fn, reps) for k, fn in cases.items()}


def copy_bandwidth_case(n: int):
    """2 threads, each copying half of an n-float32 array (NumPy releases the GIL in copies)."""
    src = np.ones(n, np.float32)
    dst = np.empty_like(src)
    half = n // 2
    parts = [(dst[:half], src[:half]), (dst[half:], src[half:])]

    def copy():
        threads = [threading.Thread(target=np.copyto, args=p) for p in parts]
        for th in threads:
            th.start()
        for th in threads:
            th.join()

    return copy


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000, 100_000, 10_000_000])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args(argv)

    ferro, torch = start("bench_inplace")
    records = []

    # 1. In-place updates.
    rows = []
    for n in args.sizes:
        reps = max(1, 100_000 // n)
        med = measure(inplace_cases(ferro, torch, n, reps), args.repeats * (5 if n < 10**6 else 1))
        med = {k: v / reps for k, v in med.items()}
        for op in ("sub", "mul"):
            f, b, ref = med[f"ferro_{op}"], med[f"ferro_{op}_block"], med[f"numpy_{op}"]
            t = med.get(f"torch_{op}")
            tb = med.get(f"torch_{op}_block")
            rec = emit(
                "bench_inplace",
                f"{op}__n{n}",
                n=n,
                ferro_us=f * 1e6,
                ferro_block_us=b * 1e6,
                numpy_us=ref * 1e6,
                torch_us=t * 1e6 if t else None,
                ferro_over_numpy=f / ref,
                block_over_numpy=b / ref,
                ferro_over_torch=over(f, t),
                block_over_torch_block=over(b, tb),
            )
            records.append(rec)
            rows.append([f"{op}_", n, f * 1e6, b * 1e6, ref * 1e6, f / ref, b / ref])
    print()
    table(rows, ["op", "n", "ferro us", "in no_grad us", "numpy us", "/numpy", "block/numpy"])

    # 2. The MLP step with the hand-written update loop and with optim.SGD.
    rng = np.random.default_rng(1)
    x = rng.normal(size=(args.batch, bench_mlp.SIZES[0])).astype(np.float32)
    y = rng.integers(0, bench_mlp.SIZES[-1], args.batch)
    bench_mlp.check(ferro, torch, x, y)
    np_params = bench_mlp.init()
    cases = {
        "numpy": lambda: bench_mlp.numpy_step(np_params, x, y),
        "ferro_loop": bench_mlp.make_ferro_step(ferro, bench_mlp.init(), x, y)[0],
        "ferro_sgd": bench_mlp.make_ferro_sgd_step(ferro, bench_mlp.init(), x, y)[0],
    }
    if torch is not None:
        cases["torch"] = bench_mlp.make_torch_step(torch, bench_mlp.init(), x, y)[0]
    med = measure(cases, args.repeats * 2, warmup=3)
    t = med.get("torch")
    rows = []
    for k in ("ferro_loop", "ferro_sgd"):
        records.append(
            emit(
                "bench_inplace",
                f"mlp_step_{k}_batch{args.batch}",
                ferro_ms=med[k] * 1e3,
                numpy_ms=med["numpy"] * 1e3,
                torch_ms=t * 1e3 if t else None,
                ferro_over_numpy=med[k] / med["numpy"],
                ferro_over_torch=over(med[k], t),
            )
        )
        rows.append([k, med[k] * 1e3, med[k] / med["numpy"], cell(over(med[k], t))])
    print()
    table(rows, ["MLP step", "ms", "/numpy", "/torch"])

    # 3. Bandwidth of (a*b + c).sum() forward+backward against the 2-thread copy.
    n = args.n
    cases = {"copy": copy_bandwidth_case(n), **expression_cases(ferro, torch, rng, n)}
    med = measure(cases, args.repeats, warmup=1)
    copy_gbs = 2 * 4 * n / med["copy"] / 1e9
    ferro_gbs = 6 * 4 * n / med["ferro"] / 1e9
    t = med.get("torch")
    records.append(
        emit(
            "bench_inplace",
            "a*b+c_sum_bandwidth",
            n=n,
            ferro_ms=med["ferro"] * 1e3,
            torch_ms=t * 1e3 if t else None,
            copy_gbs=copy_gbs,
            ferro_min_traffic_gbs=ferro_gbs,
            fraction_of_copy=ferro_gbs / copy_gbs,
            ferro_over_torch=over(med["ferro"], t),
        )
    )
    print()
    table(
        [
            [
                n,
                med["ferro"] * 1e3,
                ferro_gbs,
                copy_gbs,
                ferro_gbs / copy_gbs,
                cell(over(med["ferro"], t)),
            ]
        ],
        ["(a*b+c).sum() n", "ferro ms", "ferro GB/s", "copy GB/s", "fraction", "/torch"],
    )
    return records


if __name__ == "__main__":
    main()
