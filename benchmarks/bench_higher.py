"""Higher-order gradients (issue 20): a Hessian-vector product of an MLP 784-512-512-10 (batch
64, float32, tanh, cross-entropy) against one gradient of the same loss and against
``torch.autograd.functional.hvp``; and a WGAN-GP critic step (critic MLP 784-512-512-1,
gradient penalty through ``create_graph``, SGD update) against PyTorch. In one run.

    python benchmarks/bench_higher.py [--batch 64] [--repeats 20]

Goals (issue 20): hvp <= 3x one gradient, hvp <= 1.2x torch's hvp, penalty step <= 1.2x torch.
The script checks that ferro's and PyTorch's hvp and penalty gradients agree before timing.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import emit, header, measure, optional_torch, table  # noqa: E402

SIZES = [784, 512, 512, 10]
CRITIC = [784, 512, 512, 1]
LAMBDA = 10.0
LR = 1e-3


def init(sizes, seed=0):
    rng = np.random.default_rng(seed)
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        bound = 1 / np.sqrt(fan_in)
        params.append(rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32))
        params.append(rng.uniform(-bound, bound, fan_out).astype(np.float32))
    return params


def mlp(lib, params, x):
    """The same network in ferro and in torch (both have linear and tanh)."""
    n = len(params) // 2
    h = x
    for i in range(n):
        h = lib.nn.functional.linear(h, params[2 * i], params[2 * i + 1])
        if i < n - 1:
            h = lib.tanh(h)
    return h


def ferro_cases(ferro, x_np, y_np, v_np):
    from ferro.autograd import functional as F

    params = tuple(ferro.from_numpy(p) for p in init(SIZES))
    x, y = ferro.from_numpy(x_np), ferro.from_numpy(y_np)
    v = tuple(ferro.from_numpy(a) for a in v_np)

    def loss(*ps):
        return ferro.nn.functional.cross_entropy(mlp(ferro, ps, x), y)

    leaves = tuple(p.detach().requires_grad_(True) for p in params)

    def gradient():
        return ferro.autograd.grad(loss(*leaves), leaves)

    def hvp():
        return F.hvp(loss, params, v)[1]

    return gradient, hvp


def torch_hvp_case(torch, x_np, y_np, v_np):
    params = tuple(torch.from_numpy(p) for p in init(SIZES))
    x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)
    v = tuple(torch.from_numpy(a) for a in v_np)

    def loss(*ps):
        return torch.nn.functional.cross_entropy(mlp(torch, ps, x), y)

    def hvp():
        return torch.autograd.functional.hvp(loss, params, v)[1]

    return hvp


def make_gp_step(lib, real_np, fake_np, eps_np):
    """One critic step: Wasserstein loss + LAMBDA * gradient penalty, then SGD."""
    is_torch = lib.__name__ == "torch"
    params = [lib.from_numpy(p.copy()).requires_grad_(True) for p in init(CRITIC, seed=1)]
    real, fake, eps = (lib.from_numpy(a) for a in (real_np, fake_np, eps_np))
    no_grad = lib.no_grad

    def step():
        xh = (eps * real + (1 - eps) * fake).requires_grad_(True)
        (g,) = lib.autograd.grad(mlp(lib, params, xh).sum(), xh, create_graph=True)
        gp = ((g.pow(2).sum(dim=1).sqrt() - 1) ** 2).mean()
        loss = mlp(lib, params, fake).mean() - mlp(lib, params, real).mean() + LAMBDA * gp
        for p in params:
            p.grad = None
        loss.backward()
        with no_grad():
            for p in params:
                if is_torch:
                    p -= LR * p.grad
                else:
                    p.sub_(LR * p.grad)
        return loss

    return step, params


def check(ferro, torch, x, y, v, real, fake, eps):
    _, f_hvp = ferro_cases(ferro, x, y, v)
    t_hvp = torch_hvp_case(torch, x, y, v)
    for a, b in zip(f_hvp(), t_hvp(), strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=2e-2, atol=2e-4)
    fstep, fparams = make_gp_step(ferro, real, fake, eps)
    tstep, tparams = make_gp_step(torch, real, fake, eps)
    fstep()
    tstep()
    for a, b in zip(fparams, tparams, strict=True):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-3, atol=1e-5)


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args(argv)

    import ferro

    torch = optional_torch()
    header("bench_higher")
    rng = np.random.default_rng(1)
    x = rng.normal(size=(args.batch, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], args.batch)
    v = [rng.normal(size=p.shape).astype(np.float32) for p in init(SIZES)]
    real = rng.normal(size=(args.batch, CRITIC[0])).astype(np.float32)
    fake = rng.normal(size=(args.batch, CRITIC[0])).astype(np.float32)
    eps = rng.uniform(size=(args.batch, 1)).astype(np.float32)
    if torch is not None:
        check(ferro, torch, x, y, v, real, fake, eps)

    gradient, hvp = ferro_cases(ferro, x, y, v)
    gp_step, _ = make_gp_step(ferro, real, fake, eps)
    cases = {"ferro_grad": gradient, "ferro_hvp": hvp, "ferro_gp": gp_step}
    if torch is not None:
        cases["torch_hvp"] = torch_hvp_case(torch, x, y, v)
        cases["torch_gp"], _ = make_gp_step(torch, real, fake, eps)
    med = measure(cases, args.repeats, warmup=2)
    th, tg = med.get("torch_hvp"), med.get("torch_gp")
    recs = [
        emit(
            "bench_higher",
            f"hvp_mlp_batch{args.batch}",
            ferro_grad_ms=med["ferro_grad"] * 1e3,
            ferro_hvp_ms=med["ferro_hvp"] * 1e3,
            torch_hvp_ms=th * 1e3 if th else None,
            hvp_over_grad=med["ferro_hvp"] / med["ferro_grad"],
            hvp_over_torch=med["ferro_hvp"] / th if th else None,
        ),
        emit(
            "bench_higher",
            f"gradient_penalty_step_batch{args.batch}",
            ferro_ms=med["ferro_gp"] * 1e3,
            torch_ms=tg * 1e3 if tg else None,
            ferro_over_torch=med["ferro_gp"] / tg if tg else None,
        ),
    ]
    print()
    table(
        [
            ["hvp / one gradient (goal <= 3)", med["ferro_hvp"] / med["ferro_grad"]],
            ["hvp / torch hvp (goal <= 1.2)", med["ferro_hvp"] / th if th else "skipped"],
            ["penalty step / torch (goal <= 1.2)", med["ferro_gp"] / tg if tg else "skipped"],
            ["ferro gradient ms", med["ferro_grad"] * 1e3],
            ["ferro hvp ms", med["ferro_hvp"] * 1e3],
            ["ferro penalty step ms", med["ferro_gp"] * 1e3],
        ],
        ["figure", "value"],
    )
    return recs


if __name__ == "__main__":
    main()
