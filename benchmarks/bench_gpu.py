"""GPU benchmarks (need CuPy and a CUDA device; without one the script says so and exits 0).

    python benchmarks/bench_gpu.py [--n 67108864] [--rows 8192] [--cols 32000] [--repeats 20]

Kernel times are GPU times from CUDA events (``cupyx.profiler.benchmark``); the per-op
overhead case is wall time, since small ops are bound by the host.

1. Bandwidth: each fused elementwise backward kernel and the accumulation kernel on ``n``
   float32 elements, as a fraction of a device-to-device copy's bandwidth (bytes read plus
   written per second). Goal: 0.8 or more.
2. Softmax and log-softmax forward+backward, and cross-entropy forward+backward, on
   (rows, cols) float32 logits through ferro's API: overrides on (ferro's kernels) against
   overrides off (the generic CuPy path; goal: 2x faster) and PyTorch CUDA when installed
   (goal: no slower).
3. Sum-to-shape (the engine's broadcast reduction) against ``cupy.sum``.
4. Per-op overhead: a chain of small elementwise ops, forward+backward, per op, against
   PyTorch CUDA eager (goal: below it).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import emit, header, optional_torch, table  # noqa: E402


def gpu_time(fn, repeats: int) -> float:
    """Median GPU seconds per call (CUDA events around each call)."""
    from cupyx.profiler import benchmark

    res = benchmark(fn, n_repeat=repeats, n_warmup=3)
    import numpy as np

    return float(np.median(res.gpu_times[0]))


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=64 * 2**20)
    ap.add_argument("--rows", type=int, default=8192)
    ap.add_argument("--cols", type=int, default=32000)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--chain", type=int, default=200, help="ops in the overhead chain")
    args = ap.parse_args(argv)

    import ferro

    header("bench_gpu")
    if not ferro.cuda.is_available():
        print("skipped: no CUDA device (CuPy missing or no driver)")
        return []
    import cupy as cp

    from ferro._C import engine
    from ferro.cuda import ops

    dev = cp.cuda.Device()
    print(f"device: {cp.cuda.runtime.getDeviceProperties(dev.id)['name'].decode()}")
    torch = optional_torch(peer_pass=False)  # device timings: one process
    if torch is not None and not torch.cuda.is_available():
        torch = None
    records, rows = [], []

    # 1. Bandwidth against a device-to-device copy.
    n = args.n
    a = cp.random.standard_normal(n, dtype=cp.float32)
    b = cp.random.standard_normal(n, dtype=cp.float32)
    dst = cp.empty_like(a)
    copy = gpu_time(lambda: cp.copyto(dst, a), args.repeats)  # 2 passes: read, write
    cases = {"accumulate": (lambda: ops.accumulate(dst, b), 3)}  # read 2, write 1
    for name in ("relu", "sigmoid", "tanh", "gelu"):
        kern = getattr(ops, f"{name}_bwd")
        cases[name] = ((lambda kern=kern: kern(a, b)), 3)
    cases["leaky_relu"] = ((lambda: ops.leaky_relu_bwd(a, b, 0.1)), 3)
    cases["silu"] = ((lambda: ops.silu_bwd(a, b, b)), 4)  # reads gy, x and sigmoid(x)
    for k, (fn, passes) in cases.items():
        t = gpu_time(fn, args.repeats)
        frac = (copy / 2 * passes) / t
        records.append(
            emit(
                "bench_gpu",
                f"bandwidth_{k}",
                n=n,
                seconds=t,
                copy_seconds=copy,
                fraction_of_copy_bandwidth=frac,
            )
        )
        rows.append([f"{k} backward" if k != "accumulate" else k, t * 1e3, f"{frac:.2f} of copy"])

    # 2. Softmax / log-softmax / cross-entropy, forward+backward through the API.
    x = cp.random.standard_normal((args.rows, args.cols), dtype=cp.float32)
    g = cp.random.standard_normal((args.rows, args.cols), dtype=cp.float32)
    tgt = cp.random.randint(0, args.cols, args.rows).astype(cp.int64)
    xt = ferro.tensor(x, requires_grad=True)
    gt, tt = ferro.tensor(g), ferro.tensor(tgt)

    def ferro_case(kind):
        def run():
            xt.grad = None
            if kind == "ce":
                ferro.cross_entropy(xt, tt).backward()
            else:
                fn = ferro.softmax if kind == "softmax" else ferro.log_softmax
                fn(xt, axis=-1).backward(gt)

        return run

    def with_overrides(fn, on):
        def run():
            prev = engine.set_overrides_enabled(on)
            try:
                fn()
            finally:
                engine.set_overrides_enabled(prev)

        return run

    if torch is not None:
        tx = torch.as_tensor(x, device="cuda").requires_grad_()
        tg, ttg = torch.as_tensor(g, device="cuda"), torch.as_tensor(tgt, device="cuda")

        def torch_case(kind):
            def run():
                tx.grad = None
                if kind == "ce":
                    torch.nn.functional.cross_entropy(tx, ttg).backward()
                else:
                    fn = torch.softmax if kind == "softmax" else torch.log_softmax
                    fn(tx, -1).backward(tg)

            return run

    for kind in ("softmax", "log_softmax", "ce"):
        fused = gpu_time(with_overrides(ferro_case(kind), True), args.repeats)
        generic = gpu_time(with_overrides(ferro_case(kind), False), args.repeats)
        tor = gpu_time(torch_case(kind), args.repeats) if torch is not None else None
        records.append(
            emit(
                "bench_gpu",
                f"{kind}_rows",
                rows=args.rows,
                cols=args.cols,
                fused_s=fused,
                generic_s=generic,
                torch_s=tor,
                generic_over_fused=generic / fused,
                fused_over_torch=fused / tor if tor else None,
            )
        )
        rows.append(
            [
                f"{kind} fwd+bwd",
                fused * 1e3,
                f"{generic / fused:.2f}x faster than generic"
                + (f", {fused / tor:.2f}x torch" if tor else ""),
            ]
        )

    # 3. Sum-to-shape.
    for big, small, axes in (
        ((8192, 4096), (4096,), 0),
        ((4096, 8192), (4096, 1), 1),
        ((n,), (), 0),
    ):
        src = cp.random.standard_normal(big, dtype=cp.float32)
        mine = gpu_time(lambda src=src, small=small: ops.sum_to_shape(src, small), args.repeats)
        ref = gpu_time(lambda src=src, axes=axes: src.sum(axis=axes), args.repeats)
        records.append(
            emit(
                "bench_gpu",
                "sum_to_shape",
                src=list(big),
                shape=list(small),
                seconds=mine,
                cupy_sum_seconds=ref,
                cupy_over_ferro=ref / mine,
            )
        )
        rows.append([f"sum_to_shape {big}->{small}", mine * 1e3, f"{ref / mine:.2f}x cupy.sum"])

    # 4. Per-op overhead on small tensors (wall time; the host is the bottleneck).
    def chain_ferro():
        v = ferro.tensor(cp.ones(16, dtype=cp.float32), requires_grad=True)
        h = v
        for _ in range(args.chain):
            h = h * 1.0001
        h.sum().backward()
        cp.cuda.Device().synchronize()

    def wall(fn):
        fn()
        best = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            fn()
            best.append(time.perf_counter() - t0)
        best.sort()
        return best[len(best) // 2]

    per_op = wall(chain_ferro) / args.chain
    tor = None
    if torch is not None:

        def chain_torch():
            v = torch.ones(16, device="cuda", requires_grad=True)
            h = v
            for _ in range(args.chain):
                h = h * 1.0001
            h.sum().backward()
            torch.cuda.synchronize()

        tor = wall(chain_torch) / args.chain
    records.append(
        emit(
            "bench_gpu",
            "per_op_overhead",
            chain=args.chain,
            ferro_s=per_op,
            torch_s=tor,
            ferro_over_torch=per_op / tor if tor else None,
        )
    )
    rows.append(
        [
            "mul fwd+bwd per op, 16 elements",
            per_op * 1e3,
            f"{per_op / tor:.2f}x torch" if tor else "no torch",
        ]
    )

    print()
    table(rows, ["case", "ms", "ratio"])
    return records


if __name__ == "__main__":
    main()
