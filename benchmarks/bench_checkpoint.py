"""Checkpointing: peak memory against time for a deep chain.

    python benchmarks/bench_checkpoint.py [--layers 200] [--rows 256] [--width 1024]

A ``layers``-deep chain ``h = tanh(h @ W_i)`` on (rows, width) float32 activations; x requires
grad, the weights do not (so the figures are about activations, not weight gradients). Each
case runs forward+backward in a fresh process (peak memory of one process is not reusable) and
reports the tracemalloc peak above the memory held before the forward (inputs and weights), and
the wall time: no checkpointing, and ``checkpoint_sequential`` with about sqrt(layers) segments.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import emit, header, table  # noqa: E402

CHILD = r"""
import json, sys, time, tracemalloc
import numpy as np
import ferro
layers, rows, width, segments, repeats = (int(a) for a in sys.argv[1:6])
rng = np.random.default_rng(0)
ws = [ferro.from_numpy((rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32))
      for _ in range(layers)]
fns = [(lambda t, w=w: ferro.tanh(t @ w)) for w in ws]
x = ferro.from_numpy(rng.standard_normal((rows, width)).astype(np.float32)).requires_grad_()

def run():
    x.grad = None
    if segments:
        y = ferro.checkpoint_sequential(fns, segments, x)
    else:
        y = x
        for f in fns:
            y = f(y)
    y.sum().backward()

run()  # warm-up
times = []
for _ in range(repeats):
    t0 = time.perf_counter(); run(); times.append(time.perf_counter() - t0)
tracemalloc.start()
base = tracemalloc.get_traced_memory()[0]
run()
peak = tracemalloc.get_traced_memory()[1] - base
print(json.dumps({"seconds": sorted(times)[len(times) // 2], "peak_bytes": peak,
                  "grad_norm": float(np.linalg.norm(x.grad.numpy()))}))
"""


def run_case(layers, rows, width, segments, repeats):
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            str(layers),
            str(rows),
            str(width),
            str(segments),
            str(repeats),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=200)
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--segments",
        type=int,
        nargs="*",
        default=None,
        help="segment counts to try (default: about sqrt(layers))",
    )
    args = ap.parse_args(argv)
    header("bench_checkpoint")
    seg_list = args.segments or [round(math.sqrt(args.layers))]
    plain = run_case(args.layers, args.rows, args.width, 0, args.repeats)
    rows = [["none", plain["peak_bytes"] / 2**20, plain["seconds"], 1.0, 1.0]]
    records = []
    for segments in seg_list:
        ckpt = run_case(args.layers, args.rows, args.width, segments, args.repeats)
        assert math.isclose(plain["grad_norm"], ckpt["grad_norm"], rel_tol=1e-4), (plain, ckpt)
        mem_ratio = ckpt["peak_bytes"] / plain["peak_bytes"]
        time_ratio = ckpt["seconds"] / plain["seconds"]
        records.append(
            emit(
                "bench_checkpoint",
                f"chain{args.layers}_seg{segments}",
                layers=args.layers,
                segments=segments,
                plain_peak_mb=plain["peak_bytes"] / 2**20,
                ckpt_peak_mb=ckpt["peak_bytes"] / 2**20,
                plain_s=plain["seconds"],
                ckpt_s=ckpt["seconds"],
                memory_ratio=mem_ratio,
                time_ratio=time_ratio,
            )
        )
        rows.append(
            [
                f"{segments} segments",
                ckpt["peak_bytes"] / 2**20,
                ckpt["seconds"],
                mem_ratio,
                time_ratio,
            ]
        )
    print()
    table(rows, ["checkpointing", "peak MiB", "seconds", "memory ratio", "time ratio"])
    return records


if __name__ == "__main__":
    main()
