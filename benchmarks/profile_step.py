"""Profile one training step of the MLP (784-512-512-10, batch 64) op by op.

    python benchmarks/profile_step.py [--steps 5] [--trace out.json] [--sort total]

Prints ``ferro.profiler``'s table (forward and backward time per op, share of the step) and
optionally writes a Chrome/Perfetto trace with forward and backward as separate tracks.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.bench_mlp import SIZES, init, make_ferro_step  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--trace", default=None, help="write a Chrome/Perfetto trace here")
    ap.add_argument("--sort", default="total")
    args = ap.parse_args(argv)

    import ferro

    rng = np.random.default_rng(1)
    x = rng.normal(size=(args.batch, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], args.batch)
    step, _ = make_ferro_step(ferro, init(), x, y)
    for _ in range(3):
        step()  # warm up BLAS and the allocator outside the profile
    with ferro.profiler.profile() as prof:
        for _ in range(args.steps):
            step()
    print(f"# {args.steps} steps of the MLP {'-'.join(map(str, SIZES))}, batch {args.batch}")
    print(prof.table(sort_by=args.sort))
    if args.trace:
        prof.export_chrome_trace(args.trace)
        print(f"trace written to {args.trace} (open it in ui.perfetto.dev or chrome://tracing)")


if __name__ == "__main__":
    main()
