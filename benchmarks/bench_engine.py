"""Graph overhead: per-op time of a 2,000-op chain (alternating mul, add, tanh).

For 1-element and 64-element float32 tensors, times forward alone and forward+backward for
ferro, PyTorch (when installed) and a hand-written NumPy forward+backward of the same chain with
no autograd at all (the floor for any NumPy-based autograd), all in one run, and prints the ratios.
Two floors: ``numpy`` computes every gradient ferro does (x, w and b); ``minimal`` is issue 16's
*minimal* NumPy program, whose forward is the three NumPy calls per step and whose backward is
only ``g = g * (1 - y * y) * w`` per step (the gradient of x alone, nothing for the add).
Also times one step of micrograd's MLP 2-16-16-1 (100 points, max-margin loss with L2
regularisation, SGD update by hand under ``no_grad``) against its minimal NumPy floor.

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

from benchmarks.common import cell, emit, measure, over, start, table  # noqa: E402


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


def minimal_chain(x, w, b, n_ops: int, backward: bool):
    """Issue 16's minimal floor: the forward's NumPy calls, and for backward only the gradient
    of x (``g * (1 - y * y)`` for tanh, ``g * w`` for the mul, nothing for the add)."""
    ys = []
    h = x
    for i in range(n_ops):
        k = i % 3
        if k == 0:
            h = h * w
        elif k == 1:
            h = h + b
        else:
            h = np.tanh(h)
            ys.append(h)
    loss = h.sum()
    if not backward:
        return loss
    g = np.ones_like(h)
    for i in range(n_ops - 1, -1, -1):
        k = i % 3
        if k == 0:
            g = g * w
        elif k == 2:
            y = ys.pop()
            g = g * (1 - y * y)
    return g


def autograd_chain(lib, x, w, b, n_ops: int, backward: bool):
    """The chain in ferro or PyTorch (same API) on leaves x, w, b."""
    h = x
    tanh = lib.tanh
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


MLP_SIZES = (2, 16, 16, 1)


def mlp_data(seed: int = 0):
    """Micrograd's demo: 100 points of two classes (labels -1, 1) and an MLP 2-16-16-1."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(100, 2)).astype(np.float32)
    y = np.where(x[:, 0] * x[:, 1] > 0, 1.0, -1.0).astype(np.float32)[:, None]
    params = []
    for n_in, n_out in zip(MLP_SIZES[:-1], MLP_SIZES[1:], strict=True):
        params.append(rng.uniform(-1, 1, (n_in, n_out)).astype(np.float32))
        params.append(np.zeros(n_out, np.float32))
    return x, y, params


def numpy_mlp_step(x, y, params, lr=0.05, alpha=1e-4):
    """The minimal hand-written step: forward, max-margin loss + L2, backward, SGD update."""
    w1, b1, w2, b2, w3, b3 = params
    z1 = x @ w1 + b1
    a1 = np.maximum(z1, 0)
    z2 = a1 @ w2 + b2
    a2 = np.maximum(z2, 0)
    s = a2 @ w3 + b3
    margin = 1 - y * s
    loss = np.maximum(margin, 0).mean() + alpha * sum((p * p).sum() for p in params)
    gs = np.where(margin > 0, -y, 0) / margin.size
    ga2 = (gs @ w3.T) * (z2 > 0)
    ga1 = (ga2 @ w2.T) * (z1 > 0)
    grads = [x.T @ ga1, ga1.sum(0), a1.T @ ga2, ga2.sum(0), a2.T @ gs, gs.sum(0)]
    for p, g in zip(params, grads, strict=True):
        p -= lr * (g + 2 * alpha * p)
    return loss


def make_mlp_step(lib, x, y, params, lr=0.05, alpha=1e-4):
    """The same step in ferro or PyTorch (same API): autograd and the hand-written update."""
    params = [lib.tensor(p, requires_grad=True) for p in params]
    x, y = lib.tensor(x), lib.tensor(y)
    relu = lib.relu

    def step():
        w1, b1, w2, b2, w3, b3 = params
        s = relu(relu(x @ w1 + b1) @ w2 + b2) @ w3 + b3
        loss = relu(1 - y * s).mean() + alpha * sum((p * p).sum() for p in params)
        for p in params:
            p.grad = None
        loss.backward()
        with lib.no_grad():
            for p in params:
                p.sub_(p.grad, alpha=lr)
        return loss

    return step, params


def check_agreement(ferro, torch, size: int, n_ops: int) -> None:
    """The implementations must compute the same gradients (else the timing is moot)."""
    x, w, b = make_inputs(size)
    gx, gw, gb = numpy_chain(x, w, b, n_ops, True)
    np.testing.assert_allclose(minimal_chain(x, w, b, n_ops, True), gx, rtol=1e-4, atol=1e-6)
    fx, fw, fb = (ferro.tensor(a, requires_grad=True) for a in (x, w, b))
    autograd_chain(ferro, fx, fw, fb, n_ops, True)
    for got, want in ((fx.grad, gx), (fw.grad, gw), (fb.grad, gb)):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-5)
    if torch is not None:
        tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
        autograd_chain(torch, tx, tw, tb, n_ops, True)
        np.testing.assert_allclose(tw.grad.numpy(), gw, rtol=1e-4, atol=1e-5)


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 64])
    args = ap.parse_args(argv)

    ferro, torch = start("bench_engine")
    records = []
    rows = []
    for size in args.sizes:
        check_agreement(ferro, torch, size, min(args.ops, 300))
        x, w, b = make_inputs(size)
        fx, fw, fb = (ferro.tensor(a, requires_grad=True) for a in (x, w, b))
        cases = {
            "numpy_fwd": lambda x=x, w=w, b=b: numpy_chain(x, w, b, args.ops, False),
            "numpy_fwdbwd": lambda x=x, w=w, b=b: numpy_chain(x, w, b, args.ops, True),
            "minimal_fwd": lambda x=x, w=w, b=b: minimal_chain(x, w, b, args.ops, False),
            "minimal_fwdbwd": lambda x=x, w=w, b=b: minimal_chain(x, w, b, args.ops, True),
            "ferro_fwd": lambda x=fx, w=fw, b=fb: autograd_chain(ferro, x, w, b, args.ops, False),
            "ferro_fwdbwd": lambda x=fx, w=fw, b=fb: autograd_chain(ferro, x, w, b, args.ops, True),
        }
        if torch is not None:
            tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
            cases["torch_fwd"] = lambda x=tx, w=tw, b=tb: autograd_chain(
                torch, x, w, b, args.ops, False
            )
            cases["torch_fwdbwd"] = lambda x=tx, w=tw, b=tb: autograd_chain(
                torch, x, w, b, args.ops, True
            )
        med = measure(cases, args.repeats, warmup=2)
        per_op = {k: v / args.ops * 1e6 for k, v in med.items()}
        for phase in ("fwd", "fwdbwd"):
            f = per_op[f"ferro_{phase}"]
            n = per_op[f"numpy_{phase}"]
            m = per_op[f"minimal_{phase}"]
            t = per_op.get(f"torch_{phase}")
            rec = emit(
                "bench_engine",
                f"chain_{phase}_size{size}",
                ops=args.ops,
                size=size,
                ferro_us_per_op=f,
                numpy_us_per_op=n,
                minimal_us_per_op=m,
                torch_us_per_op=t,
                ferro_over_numpy=f / n,
                ferro_over_minimal=f / m,
                ferro_over_torch=over(f, t),
            )
            records.append(rec)
            rows.append(
                [size, phase, f, n, m, t if t else "skipped", f / n, f / m, cell(over(f, t))]
            )
    print()
    table(
        rows,
        [
            "size",
            "phase",
            "ferro us/op",
            "numpy us/op",
            "minimal us/op",
            "torch us/op",
            "ferro/numpy",
            "ferro/minimal",
            "ferro/torch",
        ],
    )

    # Micrograd's MLP step (2-16-16-1, 100 points) against its minimal NumPy floor.
    x, y, params = mlp_data()
    ref = [p.copy() for p in params]
    want = numpy_mlp_step(x, y, ref)
    fstep, fparams = make_mlp_step(ferro, x, y, params)
    np.testing.assert_allclose(float(fstep()), want, rtol=1e-5)
    for p, r in zip(fparams, ref, strict=True):
        np.testing.assert_allclose(p.detach().numpy(), r, rtol=1e-4, atol=1e-6)
    np_params = [p.copy() for p in params]
    cases = {"minimal": lambda: numpy_mlp_step(x, y, np_params), "ferro": fstep}
    if torch is not None:
        cases["torch"] = make_mlp_step(torch, x, y, params)[0]
    med = measure(cases, args.repeats * 4, warmup=5)
    t = med.get("torch")
    records.append(
        emit(
            "bench_engine",
            "micrograd_mlp_step",
            ferro_us=med["ferro"] * 1e6,
            minimal_us=med["minimal"] * 1e6,
            torch_us=t * 1e6 if t else None,
            ferro_over_minimal=med["ferro"] / med["minimal"],
            ferro_over_torch=over(med["ferro"], t),
        )
    )
    print()
    table(
        [
            [
                med["ferro"] * 1e6,
                med["minimal"] * 1e6,
                t * 1e6 if t else "skipped",
                med["ferro"] / med["minimal"],
                cell(over(med["ferro"], t)),
            ]
        ],
        ["MLP 2-16-16-1 step us", "minimal us", "torch us", "ferro/minimal", "ferro/torch"],
    )
    return records


if __name__ == "__main__":
    main()
