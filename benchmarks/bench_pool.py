"""Pooling forward+backward (float32, N=32, C=64, 32x32 by default): ferro with its kernels, ferro's
generic NumPy path (overrides off) and PyTorch, in one run.

    python benchmarks/bench_pool.py [--n 32] [--c 64] [--size 32] [--repeats 20]

Cases: max_pool2d 2x2 (the issue's goal: <= 1.2x PyTorch), max_pool2d 3x3 stride 2 pad 1 (a
ResNet stem), avg_pool2d 2x2, adaptive_avg_pool2d to 1x1 (the issue's goal) and to 5x5 (uneven
windows). Each step: forward, backward with an explicit random upstream gradient. The script
checks that the three agree before timing.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import emit, header, measure, optional_torch, table  # noqa: E402

CASES = {
    "max_pool2d_2x2": ("max_pool2d", (2,), {}),
    "max_pool2d_3x3_s2_p1": ("max_pool2d", (3, 2, 1), {}),
    "avg_pool2d_2x2": ("avg_pool2d", (2,), {}),
    "adaptive_avg_pool2d_1x1": ("adaptive_avg_pool2d", (1,), {}),
    "adaptive_avg_pool2d_5x5": ("adaptive_avg_pool2d", (5,), {}),
}


def make_step(lib, fn, x_np, gy_np, args, kwargs):
    x = lib.from_numpy(x_np.copy()).requires_grad_()
    gy = lib.from_numpy(gy_np)
    f = getattr(lib.nn.functional, fn)

    def step():
        x.grad = None
        y = f(x, *args, **kwargs)
        y.backward(gy)
        return y, x.grad

    return step


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--c", type=int, default=64)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--cases", nargs="*", default=list(CASES))
    args = ap.parse_args(argv)

    import ferro
    from ferro.ops.fused import overrides

    torch = optional_torch()
    header("bench_pool")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.n, args.c, args.size, args.size)).astype(np.float32)
    records, rows = [], []
    for case in args.cases:
        fn, fargs, fkw = CASES[case]
        with ferro.no_grad():
            out_shape = getattr(ferro.nn.functional, fn)(ferro.from_numpy(x), *fargs).shape
        gy = rng.standard_normal(out_shape).astype(np.float32)
        fstep = make_step(ferro, fn, x, gy, fargs, fkw)
        gstep = make_step(ferro, fn, x, gy, fargs, fkw)

        def generic(_g=gstep):
            with overrides(False):
                return _g()

        steps = {"ferro": fstep, "generic": generic}
        if torch is not None:
            steps["torch"] = make_step(torch, fn, x, gy, fargs, fkw)
        results = {k: [t.detach().numpy() for t in s()] for k, s in steps.items()}
        for k, (y, gx) in results.items():
            np.testing.assert_allclose(y, results["generic"][0], rtol=1e-5, atol=1e-6, err_msg=k)
            np.testing.assert_allclose(gx, results["generic"][1], rtol=1e-5, atol=1e-6, err_msg=k)
        med = measure(steps, args.repeats, warmup=2)
        t = med.get("torch")
        records.append(
            emit(
                "bench_pool",
                case,
                shape=list(x.shape),
                ferro_ms=med["ferro"] * 1e3,
                generic_ms=med["generic"] * 1e3,
                torch_ms=t * 1e3 if t else None,
                ferro_over_torch=med["ferro"] / t if t else None,
                generic_over_torch=med["generic"] / t if t else None,
                ferro_over_generic=med["ferro"] / med["generic"],
            )
        )
        rows.append(
            [
                case,
                med["ferro"] * 1e3,
                med["generic"] * 1e3,
                t * 1e3 if t else "skipped",
                med["ferro"] / t if t else "-",
                med["generic"] / t if t else "-",
            ]
        )
    print()
    table(
        rows,
        ["case (fwd+bwd)", "ferro ms", "generic ms", "torch ms", "ferro/torch", "generic/torch"],
    )
    return records


if __name__ == "__main__":
    main()
