"""One training step of an MLP 784-512-512-10 (batch 64, float32, relu, cross-entropy, plain
SGD): ferro against a hand-written NumPy forward/backward/update of the same network (the floor
for a NumPy-based library) and against PyTorch with the same thread count, in one run.

    python benchmarks/bench_mlp.py [--batch 64] [--repeats 30]

Also times the ferro step with its GEMMs on OpenBLAS's own two-thread split (``ferro_blas``:
ferro's two-core GEMM off, Note [Two-core GEMM] in ferro/_C/gemm.pyx), as a ratio to the plain
step, and the ferro step under ``ferro.autograd.detect_anomaly()`` (creation sites recorded,
every gradient checked for NaN/Inf) and under ``ferro.profiler.profile()``, as ratios to the
plain step.

All three start from the same weights and the script checks that one step gives the same
gradients before timing anything.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import emit, header, measure, optional_torch, table  # noqa: E402

SIZES = [784, 512, 512, 10]
LR = 0.01


def init(seed=0):
    rng = np.random.default_rng(seed)
    params = []
    for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:], strict=True):
        bound = 1 / np.sqrt(fan_in)
        params.append(rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32))
        params.append(rng.uniform(-bound, bound, fan_out).astype(np.float32))
    return params


def numpy_step(params, x, y):
    """Hand-written forward, backward and SGD update; returns the loss and the gradients."""
    w1, b1, w2, b2, w3, b3 = params
    h1 = x @ w1.T + b1
    a1 = np.maximum(h1, 0)
    h2 = a1 @ w2.T + b2
    a2 = np.maximum(h2, 0)
    logits = a2 @ w3.T + b3
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    p = e / e.sum(axis=1, keepdims=True)
    n = x.shape[0]
    loss = -np.log(p[np.arange(n), y]).mean()
    g = p
    g[np.arange(n), y] -= 1
    g /= n
    gw3 = g.T @ a2
    gb3 = g.sum(axis=0)
    ga2 = g @ w3
    ga2 *= h2 > 0
    gw2 = ga2.T @ a1
    gb2 = ga2.sum(axis=0)
    ga1 = ga2 @ w2
    ga1 *= h1 > 0
    gw1 = ga1.T @ x
    gb1 = ga1.sum(axis=0)
    grads = [gw1, gb1, gw2, gb2, gw3, gb3]
    for prm, grd in zip(params, grads, strict=True):
        prm -= LR * grd
    return loss, grads


def make_ferro_step(ferro, params_np, x_np, y_np):
    params = [ferro.from_numpy(p.copy()).requires_grad_() for p in params_np]
    x = ferro.from_numpy(x_np)
    y = ferro.from_numpy(y_np)

    def step():
        w1, b1, w2, b2, w3, b3 = params
        h = ferro.relu(ferro.linear(x, w1, b1))
        h = ferro.relu(ferro.linear(h, w2, b2))
        loss = ferro.cross_entropy(ferro.linear(h, w3, b3), y)
        for p in params:
            p.grad = None
        loss.backward()
        with ferro.no_grad():
            for p in params:
                p.sub_(LR * p.grad)
        return loss

    return step, params


def make_ferro_sgd_step(ferro, params_np, x_np, y_np):
    """The same step with ferro's fused ``optim.SGD`` instead of the hand-written update loop."""
    params = [ferro.from_numpy(p.copy()).requires_grad_() for p in params_np]
    x = ferro.from_numpy(x_np)
    y = ferro.from_numpy(y_np)
    opt = ferro.optim.SGD(params, lr=LR)

    def step():
        w1, b1, w2, b2, w3, b3 = params
        h = ferro.relu(ferro.linear(x, w1, b1))
        h = ferro.relu(ferro.linear(h, w2, b2))
        loss = ferro.cross_entropy(ferro.linear(h, w3, b3), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    return step, params


def make_torch_step(torch, params_np, x_np, y_np):
    params = [torch.from_numpy(p.copy()).requires_grad_() for p in params_np]
    x = torch.from_numpy(x_np)
    y = torch.from_numpy(y_np)
    F = torch.nn.functional

    def step():
        w1, b1, w2, b2, w3, b3 = params
        h = F.relu(F.linear(x, w1, b1))
        h = F.relu(F.linear(h, w2, b2))
        loss = F.cross_entropy(F.linear(h, w3, b3), y)
        for p in params:
            p.grad = None
        loss.backward()
        with torch.no_grad():
            for p in params:
                p -= LR * p.grad
        return loss

    return step, params


def check(ferro, torch, x, y):
    ref_params = init()
    _, grads = numpy_step([p.copy() for p in ref_params], x, y)
    fstep, fparams = make_ferro_step(ferro, ref_params, x, y)
    fstep()
    for p, g in zip(fparams, grads, strict=True):
        np.testing.assert_allclose(p.grad.numpy(), g, rtol=1e-3, atol=1e-5)
    if torch is not None:
        tstep, tparams = make_torch_step(torch, ref_params, x, y)
        tstep()
        for p, g in zip(tparams, grads, strict=True):
            np.testing.assert_allclose(p.grad.numpy(), g, rtol=1e-3, atol=1e-5)


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args(argv)

    import ferro

    torch = optional_torch()
    header("bench_mlp")
    rng = np.random.default_rng(1)
    x = rng.normal(size=(args.batch, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], args.batch)
    check(ferro, torch, x, y)

    np_params = init()
    fstep, _ = make_ferro_step(ferro, init(), x, y)
    cases = {"numpy": lambda: numpy_step(np_params, x, y), "ferro": fstep}
    if torch is not None:
        tstep, _ = make_torch_step(torch, init(), x, y)
        cases["torch"] = tstep
    astep, _ = make_ferro_step(ferro, init(), x, y)

    def anomaly_step():
        with ferro.autograd.detect_anomaly():
            return astep()

    cases["ferro_anomaly"] = anomaly_step
    pstep, _ = make_ferro_step(ferro, init(), x, y)

    def profiled_step():
        with ferro.profiler.profile():
            return pstep()

    cases["ferro_profiled"] = profiled_step
    bstep, _ = make_ferro_step(ferro, init(), x, y)

    def blas_split_step():
        from ferro._C import gemm

        before = gemm.set_least(1 << 62, 1 << 62)  # every product to NumPy's matmul
        try:
            return bstep()
        finally:
            gemm.set_least(*before)

    cases["ferro_blas"] = blas_split_step
    med = measure(cases, args.repeats, warmup=3, blas_cases=("numpy", "ferro_blas"))
    t = med.get("torch")
    rec = emit(
        "bench_mlp",
        f"step_batch{args.batch}",
        ferro_ms=med["ferro"] * 1e3,
        numpy_ms=med["numpy"] * 1e3,
        torch_ms=t * 1e3 if t else None,
        ferro_over_numpy=med["ferro"] / med["numpy"],
        ferro_over_torch=med["ferro"] / t if t else None,
        anomaly_ms=med["ferro_anomaly"] * 1e3,
        anomaly_over_plain=med["ferro_anomaly"] / med["ferro"],
        profiled_over_plain=med["ferro_profiled"] / med["ferro"],
        blas_split_over_plain=med["ferro_blas"] / med["ferro"],
    )
    print()
    table(
        [
            [
                args.batch,
                med["ferro"] * 1e3,
                med["numpy"] * 1e3,
                t * 1e3 if t else "skipped",
                med["ferro"] / med["numpy"],
                med["ferro"] / t if t else "-",
                med["ferro_anomaly"] / med["ferro"],
                med["ferro_profiled"] / med["ferro"],
                med["ferro_blas"] / med["ferro"],
            ]
        ],
        [
            "batch",
            "ferro ms",
            "numpy ms",
            "torch ms",
            "ferro/numpy",
            "ferro/torch",
            "anomaly/plain",
            "profiled/plain",
            "blas split/plain",
        ],
    )
    return [rec]


if __name__ == "__main__":
    main()
