"""float32 matrix products: ferro's own kernel (Note [Own SGEMM] in docs/design.md) against the
BLAS NumPy loaded (OpenBLAS in NumPy's wheels) and PyTorch's ``mm`` (MKL in its CPU wheels).

    python benchmarks/bench_gemm.py [--repeats 15]

Each shape is timed three ways in one run: ``ferro`` is ``ferro._C.gemm.matmul`` as the engine
calls it (its thresholds decide: own kernel, in two parts on the helper thread where the product
is large enough, or NumPy's matmul), ``numpy`` is ``np.matmul`` with its BLAS's own threading,
``torch`` is ``torch.mm`` in the peer's process; all write into a preallocated output. The
shapes are the eight products of bench_mlp's MLP step (784-512-512-10, batch 64) in the layouts
its forward and backward use (``op(B)`` a transposed weight in the forward, ``op(A)`` a
transposed gradient for the weight gradients), then squares. Prints which path ferro took.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import emit, header, measure, optional_torch, table  # noqa: E402

# (name, m, k, n, A given transposed, B given transposed): C (m, n) = op(A) op(B)
MLP = [
    ("fwd x@W1.T", 64, 784, 512, False, True),
    ("fwd h@W2.T", 64, 512, 512, False, True),
    ("fwd h@W3.T", 64, 512, 10, False, True),
    ("dW3 g.T@h", 10, 64, 512, True, False),
    ("dh g@W3", 64, 10, 512, False, False),
    ("dW2 g.T@h", 512, 64, 512, True, False),
    ("dh g@W2", 64, 512, 512, False, False),
    ("dW1 g.T@x", 512, 64, 784, True, False),
]
MLP_NAMES = {row[0] for row in MLP}
SQUARES = [(f"square {s}", s, s, s, False, False) for s in (64, 128, 256, 512, 1024)]


def operands(rng, m, k, n, ta, tb):
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    return (a.T if ta else a), (b.T if tb else b)


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--quick", action="store_true", help="the MLP's products only")
    args = ap.parse_args(argv)

    from ferro._C import gemm

    torch = optional_torch()
    header("bench_gemm")
    print(f"# own kernel usable: {gemm.own_usable()}; (on, least, split) = {gemm.set_own(True)}")
    rng = np.random.default_rng(0)
    records, rows = [], []
    mlp_total = {"ferro": 0.0, "numpy": 0.0, "torch": 0.0}
    for name, m, k, n, ta, tb in MLP + ([] if args.quick else SQUARES):
        a, b = operands(rng, m, k, n, ta, tb)
        out = np.empty((m, n), np.float32)
        path = "numpy" if gemm.matmul(a, b, out) is NotImplemented else "own"
        if path == "own":
            ferro_case = lambda a=a, b=b, out=out: gemm.matmul(a, b, out)  # noqa: E731
        else:
            ferro_case = lambda a=a, b=b, out=out: np.matmul(a, b, out=out)  # noqa: E731
        cases = {
            "ferro": ferro_case,
            "numpy": lambda a=a, b=b, out=out: np.matmul(a, b, out=out),
        }
        if torch is not None:
            ta_, tb_, to = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(out)
            cases["torch"] = lambda ta_=ta_, tb_=tb_, to=to: torch.mm(ta_, tb_, out=to)
        blas = ("numpy",) if path == "own" else ("numpy", "ferro")
        med = measure(cases, args.repeats, warmup=3, blas_cases=blas)
        t = med.get("torch")
        if name in MLP_NAMES:
            for key in mlp_total:
                mlp_total[key] += med.get(key) or float("nan")
        gflops = 2 * m * n * k / med["ferro"] / 1e9
        records.append(
            emit(
                "bench_gemm",
                name.replace(" ", "_"),
                m=m,
                n=n,
                k=k,
                path=path,
                ferro_us=med["ferro"] * 1e6,
                numpy_us=med["numpy"] * 1e6,
                torch_us=t * 1e6 if t else None,
                ferro_over_numpy=med["ferro"] / med["numpy"],
                ferro_over_torch=med["ferro"] / t if t else None,
            )
        )
        rows.append(
            [
                name,
                f"{m}x{k}x{n}",
                path,
                med["ferro"] * 1e6,
                med["numpy"] * 1e6,
                t * 1e6 if t else "skipped",
                med["ferro"] / med["numpy"],
                med["ferro"] / t if t else "-",
                gflops,
            ]
        )
    table(
        rows,
        [
            "product",
            "m x k x n",
            "path",
            "ferro us",
            "numpy us",
            "torch us",
            "/numpy",
            "/torch",
            "GFLOP/s",
        ],
    )
    tt = mlp_total["torch"]
    records.append(
        emit(
            "bench_gemm",
            "mlp_products",
            ferro_us=mlp_total["ferro"] * 1e6,
            numpy_us=mlp_total["numpy"] * 1e6,
            torch_us=tt * 1e6 if torch is not None else None,
            ferro_over_numpy=mlp_total["ferro"] / mlp_total["numpy"],
            ferro_over_torch=mlp_total["ferro"] / tt if torch is not None else None,
        )
    )
    print(
        f"# the MLP step's eight products: ferro {mlp_total['ferro'] * 1e6:.0f} us, NumPy "
        f"{mlp_total['numpy'] * 1e6:.0f} us"
        + (f", PyTorch {tt * 1e6:.0f} us" if torch is not None else "")
    )
    return records


if __name__ == "__main__":
    main()
