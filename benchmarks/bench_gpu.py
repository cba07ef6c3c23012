"""GPU benchmarks (need CuPy and a CUDA device; without one the script says so and exits 0).

    python benchmarks/bench_gpu.py [--n 67108864] [--rows 8192] [--cols 32000] [--repeats 10]

1. Each fused elementwise backward kernel and the accumulation kernel on ``n`` float32
   elements, against a device-to-device copy of the same bytes (bandwidth fraction).
2. Softmax and log-softmax forward+backward and fused cross-entropy on (rows, cols) float32
   logits: ferro's kernels against the generic CuPy expressions, and against PyTorch CUDA when
   installed.
Every timing synchronizes the device before stopping the clock. (Per-op overhead on small GPU
tensors against PyTorch CUDA waits for the engine to call the kernels; see docs/gpu.md.)
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import emit, header, measure, optional_torch, table  # noqa: E402


def synced(fn, cp):
    def run():
        fn()
        cp.cuda.Device().synchronize()

    return run


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=64 * 2**20)
    ap.add_argument("--rows", type=int, default=8192)
    ap.add_argument("--cols", type=int, default=32000)
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args(argv)

    import ferro

    header("bench_gpu")
    if not ferro.cuda.is_available():
        print("skipped: no CUDA device (CuPy missing or no driver)")
        return []
    import cupy as cp

    from ferro.cuda import ops

    records, rows = [], []
    n = args.n
    a = cp.random.standard_normal(n, dtype=cp.float32)
    b = cp.random.standard_normal(n, dtype=cp.float32)
    dst = cp.empty_like(a)
    copy = measure({"copy": synced(lambda: cp.copyto(dst, a), cp)}, args.repeats)["copy"]
    cases = {"accumulate": (lambda: ops.accumulate(dst, b), 3)}  # read 2n, write n
    for name in ("relu", "leaky_relu", "sigmoid", "tanh", "gelu", "silu"):
        cases[name] = ((lambda name=name: ops.activation_backward(name, a, b, 0.1)), 3)
    med = measure({k: synced(f, cp) for k, (f, _) in cases.items()}, args.repeats)
    for k, (_, passes) in cases.items():
        frac = (copy * passes / 2) / med[k]  # a copy moves 2 passes
        records.append(
            emit(
                "bench_gpu",
                f"bandwidth_{k}",
                n=n,
                seconds=med[k],
                copy_seconds=copy,
                fraction_of_copy_bandwidth=frac,
            )
        )
        rows.append([k, med[k] * 1e3, frac])

    x = cp.random.standard_normal((args.rows, args.cols), dtype=cp.float32)
    g = cp.random.standard_normal((args.rows, args.cols), dtype=cp.float32)
    t = cp.random.randint(0, args.cols, args.rows).astype(cp.int64)

    def generic_softmax():
        z = x - x.max(axis=1, keepdims=True)
        y = cp.exp(z)
        y /= y.sum(axis=1, keepdims=True)
        return y * (g - (g * y).sum(axis=1, keepdims=True))

    def fused_softmax():
        y = ops.softmax_forward(x, False)
        return ops.softmax_backward(g, y, False)

    cases = {
        "softmax_fused": fused_softmax,
        "softmax_generic": generic_softmax,
        "ce_fused": lambda: ops.cross_entropy(x, t, scale=1 / args.rows),
    }
    torch = optional_torch()
    if torch is not None and torch.cuda.is_available():
        tx = torch.as_tensor(x, device="cuda").requires_grad_()
        tt = torch.as_tensor(t, device="cuda")

        def torch_ce():
            tx.grad = None
            torch.nn.functional.cross_entropy(tx, tt).backward()

        cases["ce_torch"] = torch_ce
    med = measure({k: synced(f, cp) for k, f in cases.items()}, args.repeats)
    records.append(
        emit(
            "bench_gpu",
            "softmax_rows",
            rows=args.rows,
            cols=args.cols,
            fused_s=med["softmax_fused"],
            generic_s=med["softmax_generic"],
            generic_over_fused=med["softmax_generic"] / med["softmax_fused"],
        )
    )
    records.append(
        emit(
            "bench_gpu",
            "cross_entropy_rows",
            fused_s=med["ce_fused"],
            torch_s=med.get("ce_torch"),
            fused_over_torch=med["ce_fused"] / med["ce_torch"] if "ce_torch" in med else None,
        )
    )
    rows.append(
        [
            "softmax fused vs generic",
            med["softmax_fused"] * 1e3,
            med["softmax_generic"] / med["softmax_fused"],
        ]
    )
    print()
    table(rows, ["case", "ms", "fraction of copy bandwidth / speedup"])
    return records


if __name__ == "__main__":
    main()
