"""Training throughput: a full epoch of the digits MLP with Adam against PyTorch, and the fused
Adam step against the memory traffic it needs.

    python benchmarks/bench_train.py [--repeats 7] [--params 10000000]

1. One epoch (batch 32) of the digits demo's MLP (64-128-10, tanh, cross-entropy, Adam) in
   ferro and in PyTorch 2.13 CPU with the same batches, thread count and initial weights.
2. ``Adam.step()`` on a 10M-parameter model (one float32 tensor) against a single memory pass
   over param, grad and both moments, timed as ``np.copyto`` of those four arrays.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import emit, header, measure, optional_torch, table  # noqa: E402


def digits_batches(batch=32):
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(x))
    x, y = x[order], y[order]
    return [(x[i : i + batch], y[i : i + batch]) for i in range(0, len(x), batch)]


def ferro_epoch_fn(ferro, init, batches):
    nn = ferro.nn
    model = nn.Sequential(nn.Linear(64, 128), nn.Tanh(), nn.Linear(128, 10))
    model.load_state_dict({k: v for k, v in zip(model.state_dict(), init, strict=True)})
    opt = ferro.optim.Adam(model.parameters(), lr=1e-3)
    data = [(ferro.from_numpy(x), ferro.from_numpy(y)) for x, y in batches]

    def epoch():
        for xb, yb in data:
            loss = ferro.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return loss

    return epoch


def torch_epoch_fn(torch, init, batches):
    nn = torch.nn
    model = nn.Sequential(nn.Linear(64, 128), nn.Tanh(), nn.Linear(128, 10))
    with torch.no_grad():
        for p, v in zip(model.parameters(), init, strict=True):
            p.copy_(torch.from_numpy(v))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in batches]

    def epoch():
        for xb, yb in data:
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return loss

    return epoch


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--params", type=int, default=10_000_000)
    args = ap.parse_args(argv)

    import ferro

    torch = optional_torch()
    header("bench_train")
    records = []
    rng = np.random.default_rng(0)
    init = [
        rng.uniform(-0.1, 0.1, s).astype(np.float32) for s in [(128, 64), (128,), (10, 128), (10,)]
    ]
    batches = digits_batches()
    cases = {"ferro": ferro_epoch_fn(ferro, init, batches)}
    if torch is not None:
        cases["torch"] = torch_epoch_fn(torch, init, batches)
    med = measure(cases, args.repeats, warmup=1)
    t = med.get("torch")
    records.append(
        emit(
            "bench_train",
            "digits_epoch_adam",
            batches=len(batches),
            ferro_s=med["ferro"],
            torch_s=t,
            ferro_over_torch=med["ferro"] / t if t else None,
        )
    )
    rows = [
        [
            "digits epoch (Adam)",
            med["ferro"] * 1e3,
            t * 1e3 if t else "skipped",
            med["ferro"] / t if t else "-",
        ]
    ]

    n = args.params
    p = ferro.from_numpy(rng.normal(size=n).astype(np.float32)).requires_grad_()
    p.grad = ferro.from_numpy(rng.normal(size=n).astype(np.float32))
    opt = ferro.optim.Adam([p], lr=1e-3)
    opt.step()  # allocate the moments
    bufs = [np.empty(n, np.float32) for _ in range(4)]
    moments = [v for v in opt.state[p].values() if isinstance(v, np.ndarray)]
    srcs = [p._data, p.grad._data, *moments]

    def one_pass():
        for b, s in zip(bufs, srcs, strict=True):
            np.copyto(b, s)

    med = measure({"adam_step": opt.step, "memory_pass": one_pass}, args.repeats, warmup=1)
    ratio = med["adam_step"] / med["memory_pass"]
    records.append(
        emit(
            "bench_train",
            "fused_adam_step",
            params=n,
            step_s=med["adam_step"],
            memory_pass_s=med["memory_pass"],
            step_over_pass=ratio,
        )
    )
    rows.append(
        [
            f"Adam step, {n} params",
            med["adam_step"] * 1e3,
            f"pass {med['memory_pass'] * 1e3:.3g}",
            ratio,
        ]
    )
    print()
    table(rows, ["case", "ferro ms", "peer ms", "ratio"])
    return records


if __name__ == "__main__":
    main()
