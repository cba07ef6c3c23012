"""Large-array op throughput: fused ops against the memory floor, and a small expression
against PyTorch.

    python benchmarks/bench_ops.py [--n 10000000] [--repeats 7]

1. Forward+backward of each fused op on ``n`` float32 elements, against the minimum memory
   traffic it needs: the forward reads x and writes y, the backward reads gy and the saved array
   and writes gx (5 passes of n floats; cross-entropy: logits in, gradient out, plus the forward
   read: 3 passes). The floor is timed as plain NumPy copies of the same bytes in the same run
   (one ``src.copy()`` moves 2 passes). Like the ops' outputs, a copy allocates its result,
   which for large arrays costs page faults; the floor without allocation (``np.copyto`` into
   a preallocated buffer) is printed too. Also shown: the generic NumPy path (overrides off)
   and PyTorch.
2. ``(a*b + c).sum()`` forward+backward with gradients for a, b and c, against PyTorch.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import emit, header, measure, optional_torch, table  # noqa: E402


def _ferro_case(ferro, fn, x_np, gy_np):
    x = ferro.from_numpy(x_np).requires_grad_()
    gy = ferro.from_numpy(gy_np)

    def run():
        x.grad = None
        fn(x).backward(gy)

    return run


def _ce_case(ferro, logits_np, target_np):
    x = ferro.from_numpy(logits_np).requires_grad_()
    t = ferro.from_numpy(target_np)

    def run():
        x.grad = None
        ferro.cross_entropy(x, t).backward()

    return run


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--classes", type=int, default=1000)
    args = ap.parse_args(argv)

    import ferro
    from ferro._C import engine

    torch = optional_torch()
    header("bench_ops")
    n = args.n
    rng = np.random.default_rng(0)
    x_np = rng.normal(size=n).astype(np.float32)
    gy_np = rng.normal(size=n).astype(np.float32)
    src = rng.normal(size=n).astype(np.float32)
    dst = np.empty(n, np.float32)
    copies = measure(
        {"copy": lambda: src.copy(), "copyto": lambda: np.copyto(dst, src)}, args.repeats, warmup=2
    )
    copy_t = copies["copy"]
    print(
        f"# memory floor: src.copy() {copy_t * 1e3:.2f} ms, np.copyto (no allocation) "
        f"{copies['copyto'] * 1e3:.2f} ms for {n} float32"
    )

    ops = {
        "tanh": (ferro.tanh, "tanh"),
        "sigmoid": (ferro.sigmoid, "sigmoid"),
        "relu": (ferro.relu, "relu"),
        "gelu": (ferro.gelu, "gelu"),
        "gelu_tanh": (lambda t: ferro.gelu(t, "tanh"), None),
        "silu": (ferro.silu, "silu"),
        "softmax": (
            lambda t: ferro.softmax(t.reshape(-1, args.classes), -1).reshape(-1),
            "softmax",
        ),
        "log_softmax": (
            lambda t: ferro.log_softmax(t.reshape(-1, args.classes), -1).reshape(-1),
            "log_softmax",
        ),
    }
    rows, records = [], []
    for name, (fn, tname) in ops.items():
        cases = {"fused": _ferro_case(ferro, fn, x_np, gy_np)}
        if torch is not None and tname is not None:
            tx = torch.from_numpy(x_np.copy()).requires_grad_()
            tgy = torch.from_numpy(gy_np)
            tfn = {
                "tanh": torch.tanh,
                "sigmoid": torch.sigmoid,
                "relu": torch.relu,
                "gelu": torch.nn.functional.gelu,
                "silu": torch.nn.functional.silu,
                "softmax": lambda t: torch.softmax(t.reshape(-1, args.classes), -1).reshape(-1),
                "log_softmax": lambda t: torch.log_softmax(t.reshape(-1, args.classes), -1).reshape(
                    -1
                ),
            }[tname]

            def trun(tx=tx, tgy=tgy, tfn=tfn):
                tx.grad = None
                tfn(tx).backward(tgy)

            cases["torch"] = trun
        med = measure(cases, args.repeats, warmup=1)
        prev = engine.set_overrides_enabled(False)
        try:
            med["generic"] = measure(
                {"generic": _ferro_case(ferro, fn, x_np, gy_np)},
                max(3, args.repeats // 2),
                warmup=1,
            )["generic"]
        finally:
            engine.set_overrides_enabled(prev)
        floor = 2.5 * copy_t
        rec = emit(
            "bench_ops",
            f"fused_{name}",
            n=n,
            fused_s=med["fused"],
            generic_s=med["generic"],
            torch_s=med.get("torch"),
            memory_floor_s=floor,
            fused_over_floor=med["fused"] / floor,
            fused_over_torch=med["fused"] / med["torch"] if "torch" in med else None,
        )
        records.append(rec)
        rows.append(
            [
                name,
                med["fused"] * 1e3,
                med["generic"] * 1e3,
                med["torch"] * 1e3 if "torch" in med else "skipped",
                floor * 1e3,
                med["fused"] / floor,
                med["generic"] / med["fused"],
            ]
        )

    # Cross-entropy: (n / classes, classes) logits.
    m = n // args.classes
    logits = rng.normal(size=(m, args.classes)).astype(np.float32)
    target = rng.integers(0, args.classes, m)
    cases = {"fused": _ce_case(ferro, logits, target)}
    if torch is not None:
        tl = torch.from_numpy(logits.copy()).requires_grad_()
        tt = torch.from_numpy(target)

        def tce():
            tl.grad = None
            torch.nn.functional.cross_entropy(tl, tt).backward()

        cases["torch"] = tce
    med = measure(cases, args.repeats, warmup=1)
    prev = engine.set_overrides_enabled(False)
    try:
        med["generic"] = measure({"g": _ce_case(ferro, logits, target)}, 3, warmup=1)["g"]
    finally:
        engine.set_overrides_enabled(prev)
    floor = 1.5 * copy_t * (m * args.classes) / n
    records.append(
        emit(
            "bench_ops",
            "fused_cross_entropy",
            n=m * args.classes,
            fused_s=med["fused"],
            generic_s=med["generic"],
            torch_s=med.get("torch"),
            memory_floor_s=floor,
            fused_over_floor=med["fused"] / floor,
            fused_over_torch=med["fused"] / med["torch"] if "torch" in med else None,
        )
    )
    rows.append(
        [
            "cross_entropy",
            med["fused"] * 1e3,
            med["generic"] * 1e3,
            med["torch"] * 1e3 if "torch" in med else "skipped",
            floor * 1e3,
            med["fused"] / floor,
            med["generic"] / med["fused"],
        ]
    )
    print()
    table(
        rows,
        [
            "op (fwd+bwd)",
            "fused ms",
            "generic ms",
            "torch ms",
            "floor ms",
            "fused/floor",
            "generic/fused",
        ],
    )

    # (a*b + c).sum() with gradients for a, b, c.
    a_np, b_np, c_np = (rng.normal(size=n).astype(np.float32) for _ in range(3))
    fa, fb, fc = (ferro.from_numpy(v).requires_grad_() for v in (a_np, b_np, c_np))

    def ferro_expr():
        fa.grad = fb.grad = fc.grad = None
        (fa * fb + fc).sum().backward()

    cases = {"ferro": ferro_expr}
    if torch is not None:
        ta, tb, tc = (torch.from_numpy(v.copy()).requires_grad_() for v in (a_np, b_np, c_np))

        def torch_expr():
            ta.grad = tb.grad = tc.grad = None
            (ta * tb + tc).sum().backward()

        cases["torch"] = torch_expr
    med = measure(cases, args.repeats, warmup=1)
    ratio = med["ferro"] / med["torch"] if "torch" in med else None
    records.append(
        emit(
            "bench_ops",
            "a*b+c_sum",
            n=n,
            ferro_s=med["ferro"],
            torch_s=med.get("torch"),
            ferro_over_torch=ratio,
        )
    )
    print()
    table(
        [
            [
                "(a*b + c).sum()",
                med["ferro"] * 1e3,
                med["torch"] * 1e3 if "torch" in med else "skipped",
                ratio if ratio else "-",
            ]
        ],
        ["expression (fwd+bwd)", "ferro ms", "torch ms", "ferro/torch"],
    )
    return records


if __name__ == "__main__":
    main()
