"""Fused CPU overrides against the generic path they replace, and a small expression against
PyTorch.

    python benchmarks/bench_ops.py [--n 10000000] [--small 64] [--repeats 7]

1. Every op with a CPU override (taken from the registry: a new override needs a case here),
   forward+backward on ``n`` float32 elements with overrides on ("fused") and off ("generic"),
   interleaved in one run, with three upstream gradients: an explicit contiguous ``gy``, and the
   stride-0 broadcast that ``.sum()`` and ``.mean()`` hand back. ``generic/fused`` above 1 is the
   override's win; an override that does not win has no place in the table of
   ``ferro.ops.fused``. The memory floor (the bytes the op must move: x in, y out, gy and the
   saved array in, gx out: 5 passes, timed as ``src.copy()`` of 2 passes) and PyTorch are shown
   for the explicit ``gy``.
2. The same ops on ``--small`` elements with ``.sum()`` upstream: the per-call cost, where a
   kernel call competes with a few NumPy calls rather than with memory.
3. The README example, ``ferro.tanh(x @ w).sum().backward()`` with x (3,) and w (3, 2),
   overrides on against off (issue 12's done-when: on is at least as fast).
4. ``(a*b + c).sum()`` forward+backward with gradients for a, b and c, against PyTorch.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import emit, expression_cases, measure, over, start, table  # noqa: E402


def _calls(ferro, classes):
    """Op name -> ``fn(t)`` calling it on a flat tensor (rows of ``classes`` for softmax)."""
    return {
        "tanh": ferro.tanh,
        "sigmoid": ferro.sigmoid,
        "relu": ferro.relu,
        "leaky_relu": lambda t: ferro.leaky_relu(t, 0.1),
        "gelu": ferro.gelu,
        "silu": ferro.silu,
        "softmax": lambda t: ferro.softmax(t.reshape(-1, classes), -1).reshape(-1),
    }


# The op families' overrides, measured (overrides on and off) by their family's benchmark.
FAMILY_BENCHES = {
    "conv": "bench_conv",
    "conv_transpose": "bench_conv",
    "deform_conv2d": "bench_conv",
    "max_pool": "bench_pool",
    "batch_norm": "bench_norm",
    "group_norm": "bench_norm",
    "instance_norm": "bench_norm",
    "layer_norm": "bench_norm",
    "rms_norm": "bench_norm",
    "recurrent_layer": "bench_rnn",
    "grid_sample": "bench_resample",
    # cross_entropy's override is timed inside the training steps that end in it (bench_mlp,
    # bench_conv's cnn_step, bench_seq's GPT step): its scalar output has no elementwise case.
    "cross_entropy": "bench_mlp",
}


def _switched(engine, on, fn):
    """``fn`` run with overrides ``on`` (the switch is process-wide, so each call sets it)."""

    def run():
        prev = engine.set_overrides_enabled(on)
        try:
            fn()
        finally:
            engine.set_overrides_enabled(prev)

    return run


def _case(ferro, fn, x_np, upstream, gy_np=None):
    x = ferro.from_numpy(x_np).requires_grad_()
    gy = ferro.from_numpy(gy_np) if gy_np is not None else None

    def run():
        x.grad = None
        y = fn(x)
        if upstream == "sum":
            y.sum().backward()
        elif upstream == "mean":
            y.mean().backward()
        else:
            y.backward(gy)

    return run


def _torch_fn(torch, name, classes):
    return {
        "tanh": torch.tanh,
        "sigmoid": torch.sigmoid,
        "relu": torch.relu,
        "leaky_relu": lambda t: torch.nn.functional.leaky_relu(t, 0.1),
        "gelu": torch.nn.functional.gelu,
        "silu": torch.nn.functional.silu,
        "softmax": lambda t: torch.softmax(t.reshape(-1, classes), -1).reshape(-1),
    }[name]


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--small", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--classes", type=int, default=1000)
    args = ap.parse_args(argv)

    ferro, torch = start("bench_ops")
    from ferro._C import engine
    from ferro.ops.registry import REGISTRY

    calls = _calls(ferro, args.classes)
    overridden = sorted(
        n
        for n, op in REGISTRY.items()
        if (op.cpu_forward or op.cpu_backward) and n not in FAMILY_BENCHES
    )
    missing = set(overridden) - set(calls)
    if missing:
        raise SystemExit(f"bench_ops: no case for the CPU overrides of {sorted(missing)}")
    rng = np.random.default_rng(0)
    records = []

    # 1. Large arrays.
    n = args.n
    x_np = rng.normal(size=n).astype(np.float32)
    gy_np = rng.normal(size=n).astype(np.float32)
    src = rng.normal(size=n).astype(np.float32)
    copy_t = measure({"copy": lambda: src.copy()}, args.repeats, warmup=2)["copy"]
    floor = 2.5 * copy_t
    print(f"# memory floor (5 passes of {n} float32, as src.copy() x 2.5): {floor * 1e3:.2f} ms")
    rows = []
    for name in overridden:
        fn = calls[name]
        for upstream in ("gy", "sum", "mean"):
            run = _case(ferro, fn, x_np, upstream, gy_np)
            cases = {
                "fused": _switched(engine, True, run),
                "generic": _switched(engine, False, run),
            }
            if torch is not None and upstream == "gy":
                tx = torch.from_numpy(x_np.copy()).requires_grad_()
                tgy, tfn = torch.from_numpy(gy_np), _torch_fn(torch, name, args.classes)

                def trun(tx=tx, tgy=tgy, tfn=tfn):
                    tx.grad = None
                    tfn(tx).backward(tgy)

                cases["torch"] = trun
            med = measure(cases, args.repeats, warmup=1)
            ratio = med["generic"] / med["fused"]
            records.append(
                emit(
                    "bench_ops",
                    f"fused_{name}_{upstream}",
                    n=n,
                    fused_s=med["fused"],
                    generic_s=med["generic"],
                    torch_s=med.get("torch"),
                    memory_floor_s=floor,
                    generic_over_fused=ratio,
                )
            )
            rows.append(
                [
                    name,
                    upstream,
                    med["fused"] * 1e3,
                    med["generic"] * 1e3,
                    med["torch"] * 1e3 if "torch" in med else "-",
                    med["fused"] / floor,
                    ratio,
                ]
            )
    print()
    table(
        rows,
        ["op (fwd+bwd)", "upstream", "fused ms", "generic ms", "torch ms", "fused/floor", "win"],
    )

    # 2. Small arrays, .sum() upstream: the per-call cost.
    m = args.small
    xs = rng.normal(size=m).astype(np.float32)
    rows = []
    small_classes = max(1, min(args.classes, m // 4))
    for name in overridden:
        fn = _calls(ferro, small_classes)[name]
        run = _case(ferro, fn, xs, "sum")
        cases = {"fused": _switched(engine, True, run), "generic": _switched(engine, False, run)}
        med = measure(cases, max(args.repeats, 101), warmup=20)
        ratio = med["generic"] / med["fused"]
        records.append(
            emit(
                "bench_ops",
                f"small_{name}_sum",
                n=m,
                fused_s=med["fused"],
                generic_s=med["generic"],
                generic_over_fused=ratio,
            )
        )
        rows.append([name, m, med["fused"] * 1e6, med["generic"] * 1e6, ratio])
    print()
    table(rows, ["op + .sum() (fwd+bwd)", "n", "fused us", "generic us", "win"])

    # 3. The README example.
    x = ferro.tensor([1.0, 2.0, 3.0], requires_grad=True)
    w = ferro.randn(3, 2, requires_grad=True)

    def readme():
        x.grad = w.grad = None
        ferro.tanh(x @ w).sum().backward()

    cases = {"on": _switched(engine, True, readme), "off": _switched(engine, False, readme)}
    med = measure(cases, max(args.repeats, 301), warmup=50)
    records.append(
        emit(
            "bench_ops",
            "readme_example",
            on_s=med["on"],
            off_s=med["off"],
            on_over_off=med["on"] / med["off"],
        )
    )
    print()
    table(
        [["tanh(x @ w).sum()", med["on"] * 1e6, med["off"] * 1e6, med["on"] / med["off"]]],
        ["README example (fwd+bwd)", "on us", "off us", "on/off"],
    )

    # 4. (a*b + c).sum() with gradients for a, b, c.
    med = measure(expression_cases(ferro, torch, rng, n), args.repeats, warmup=1)
    ratio = over(med["ferro"], med.get("torch"))
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
