"""Graph overhead: per-op time of a 2,000-op chain (alternating mul, add, tanh).

For 1-element and 64-element float32 tensors, times forward alone and forward+backward for
ferro, PyTorch (when installed) and a hand-written NumPy forward+backward of the same chain with
no autograd at all (the floor for any NumPy-based autograd), all in one run, and prints the ratios.

    python benchmarks/bench_engine.py [--ops 2000] [--repeats 15] [--sizes 1 64]

The chain: ``h = x; h = h * w; h = h + b; h = tanh(h); ...`` then ``h.sum()``, with x, w, b
leaves that require grad, so backward also accumulates ~ops/3 contributions into w and b.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import emit, header, measure, optional_torch, table  # noqa: E402


def make_inputs(size: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size).astype(np.float32)
    w = rng.uniform(0.5, 1.0, size).astype(np.float32)
    b = rng.uniform(-0.1, 0.1, size).astype(np.float32)
    return x, w, b


def numpy_chain(x, w, b, n_ops: int, backward: bool):
    """Hand-written NumPy forward (and backward) of the chain: no autograd, no graph."""
    hs = [x]
    h = x
    for i in range(n_ops):
        k = i % 3
        if k == 0:
            h = h * w
        elif k == 1:
            h = h + b
        else:
            h = np.tanh(h)
        hs.append(h)
    loss = h.sum()
    if not backward:
        return loss
    gh = np.ones_like(h)
    gw = np.zeros_like(w)
    gb = np.zeros_like(b)
    for i in range(n_ops - 1, -1, -1):
        k = i % 3
        if k == 0:
            gw += gh * hs[i]
            gh = gh * w
        elif k == 1:
            gb += gh
        else:
            y = hs[i + 1]
            gh = gh * (1 - y * y)
    return gh, gw, gb


def ferro_chain(ferro, x, w, b, n_ops: int, backward: bool):
    h = x
    tanh = ferro.tanh
    for i in range(n_ops):
        k = i % 3
        if k == 0:
            h = h * w
        elif k == 1:
            h = h + b
        else:
            h = tanh(h)
    loss = h.sum()
    if backward:
        x.grad = w.grad = b.grad = None
        loss.backward()
    return loss


def torch_chain(torch, x, w, b, n_ops: int, backward: bool):
    h = x
    tanh = torch.tanh
    for i in range(n_ops):
        k = i % 3
        if k == 0:
            h = h * w
        elif k == 1:
            h = h + b
        else:
            h = tanh(h)
    loss = h.sum()
    if backward:
        x.grad = w.grad = b.grad = None
        loss.backward()
    return loss


def check_agreement(ferro, torch, size: int, n_ops: int) -> None:
    """The three implementations must compute the same gradients (else the timing is moot)."""
    x, w, b = make_inputs(size)
    gx, gw, gb = numpy_chain(x, w, b, n_ops, True)
    fx, fw, fb = (ferro.tensor(a, requires_grad=True) for a in (x, w, b))
    ferro_chain(ferro, fx, fw, fb, n_ops, True)
    for got, want in ((fx.grad, gx), (fw.grad, gw), (fb.grad, gb)):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-5)
    if torch is not None:
        tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
        torch_chain(torch, tx, tw, tb, n_ops, True)
        np.testing.assert_allclose(tw.grad.numpy(), gw, rtol=1e-4, atol=1e-5)


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 64])
    args = ap.parse_args(argv)

    import ferro

    torch = optional_torch()
    header("bench_engine")
    records = []
    rows = []
    for size in args.sizes:
        check_agreement(ferro, torch, size, min(args.ops, 300))
        x, w, b = make_inputs(size)
        fx, fw, fb = (ferro.tensor(a, requires_grad=True) for a in (x, w, b))
        cases = {
            "numpy_fwd": lambda x=x, w=w, b=b: numpy_chain(x, w, b, args.ops, False),
            "numpy_fwdbwd": lambda x=x, w=w, b=b: numpy_chain(x, w, b, args.ops, True),
            "ferro_fwd": lambda x=fx, w=fw, b=fb: ferro_chain(ferro, x, w, b, args.ops, False),
            "ferro_fwdbwd": lambda x=fx, w=fw, b=fb: ferro_chain(ferro, x, w, b, args.ops, True),
        }
        if torch is not None:
            tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
            cases["torch_fwd"] = lambda x=tx, w=tw, b=tb: torch_chain(
                torch, x, w, b, args.ops, False
            )
            cases["torch_fwdbwd"] = lambda x=tx, w=tw, b=tb: torch_chain(
                torch, x, w, b, args.ops, True
            )
        med = measure(cases, args.repeats, warmup=2)
        per_op = {k: v / args.ops * 1e6 for k, v in med.items()}
        for phase in ("fwd", "fwdbwd"):
            f = per_op[f"ferro_{phase}"]
            n = per_op[f"numpy_{phase}"]
            t = per_op.get(f"torch_{phase}")
            rec = emit(
                "bench_engine",
                f"chain_{phase}_size{size}",
                ops=args.ops,
                size=size,
                ferro_us_per_op=f,
                numpy_us_per_op=n,
                torch_us_per_op=t,
                ferro_over_numpy=f / n,
                ferro_over_torch=(f / t) if t else None,
            )
            records.append(rec)
            rows.append([size, phase, f, n, t if t else "skipped", f / n, (f / t) if t else "-"])
    print()
    table(
        rows,
        [
            "size",
            "phase",
            "ferro us/op",
            "numpy us/op",
            "torch us/op",
            "ferro/numpy",
            "ferro/torch",
        ],
    )
    return records


if __name__ == "__main__":
    main()
