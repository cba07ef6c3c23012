"""Training steps and the layer families on a GPU, against PyTorch CUDA on the same device
(issue 19's "MLP and GPT training steps against PyTorch on the same device", and the GPU paths
of issues 14 and 15), float32:

- an MLP 784-512-512-10 step with SGD, at batch 64 (host-bound: per-op overhead) and 4096;
- the GPT step of bench_seq (4 pre-norm layers, 4 heads, embedding 128, block 64, batch 32,
  AdamW);
- forward+backward of conv2d (N=32, 64->64, 32x32, 3x3, pad 1), conv_transpose2d (N=16,
  64->32, 16x16 -> 32x32, stride 2), max_pool2d 2x2, batch_norm2d (N=32, C=64, 32x32),
  layer_norm (8192, 768), an LSTM (2 layers, hidden 200, seq 35, batch 20) and causal
  scaled_dot_product_attention (B=8, H=8, T=256, D=64).

Each call ends with a device synchronization, so the figures are wall times of whole steps
(host overhead and kernels together), medians of interleaved repeats (benchmarks/common.py).
Before timing, each family case checks ferro's gradients on the device against ferro on the
CPU (float32, relative error printed), so a wrong kernel cannot produce a fast figure.

    python benchmarks/bench_gpu_models.py [--repeats 15] [--device cuda|cpu]

``--device cpu`` runs the same cases on the CPU (how the script itself is tested without a GPU).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.bench_seq import gpt  # noqa: E402
from benchmarks.common import (  # noqa: E402
    PEER_PASS_ENV,
    emit,
    header,
    measure,
    optional_torch,
    table,
)


def _sync(lib, device):
    if device == "cuda":
        lib.cuda.synchronize()


def _timed(lib, device, fn):
    def run():
        fn()
        _sync(lib, device)

    return run


def family_inputs():
    """name -> (input shapes, function of (lib, F, *tensors) returning the output to backprop)."""
    return {
        "conv2d": (
            [(32, 64, 32, 32), (64, 64, 3, 3), (64,)],
            lambda lib, F, x, w, b: F.conv2d(x, w, b, padding=1),
        ),
        "conv_transpose2d": (
            [(16, 64, 16, 16), (64, 32, 4, 4), (32,)],
            lambda lib, F, x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1),
        ),
        "max_pool2d": ([(32, 64, 32, 32)], lambda lib, F, x: F.max_pool2d(x, 2)),
        "batch_norm2d": (
            [(32, 64, 32, 32), (64,), (64,)],
            lambda lib, F, x, w, b: F.batch_norm(x, None, None, w, b, training=True),
        ),
        "layer_norm": (
            [(8192, 768), (768,), (768,)],
            lambda lib, F, x, w, b: F.layer_norm(x, (768,), w, b),
        ),
        "sdpa_causal": (
            [(8, 8, 256, 64)] * 3,
            lambda lib, F, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        ),
    }


def lstm_case(lib, device, seed=0):
    lib.manual_seed(seed)
    lstm = lib.nn.LSTM(200, 200, num_layers=2).to(device)
    x = lib.tensor(
        np.random.default_rng(seed).standard_normal((35, 20, 200)).astype(np.float32),
        device=device,
        requires_grad=True,
    )

    def step():
        lstm.zero_grad()
        x.grad = None
        out, _ = lstm(x)
        out.sum().backward()

    return step, lambda: [x.grad] + [p.grad for p in lstm.parameters()]


def mlp_case(lib, device, batch, seed=0):
    rng = np.random.default_rng(seed)
    lib.manual_seed(seed)
    nn = lib.nn
    model = nn.Sequential(
        nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
    ).to(device)
    opt = lib.optim.SGD(model.parameters(), lr=0.01)
    x = lib.tensor(rng.standard_normal((batch, 784)).astype(np.float32), device=device)
    y = lib.tensor(rng.integers(0, 10, batch), device=device)

    def step():
        opt.zero_grad()
        lib.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return step


def gpt_case(lib, device, seed=0, batch=32, block=64, embd=128, heads=4, layers=4, vocab=65):
    rng = np.random.default_rng(seed)
    lib.manual_seed(seed)
    model = gpt(lib, vocab, block, embd, heads, layers, device=device)
    opt = lib.optim.AdamW(model.parameters(), lr=1e-3)
    x = lib.tensor(rng.integers(0, vocab, (batch, block)), device=device)
    y = lib.tensor(rng.integers(0, vocab, (batch, block)), device=device)
    ce = lib.nn.functional.cross_entropy

    def step():
        loss = ce(model(x).reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


def family_case(lib, name, device, seed=0):
    shapes, fn = family_inputs()[name]
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    ts = [lib.tensor(a, device=device, requires_grad=True) for a in arrays]
    F = lib.nn.functional
    out_shape = fn(lib, F, *[lib.tensor(a) for a in arrays]).shape
    g = lib.tensor(rng.standard_normal(tuple(out_shape)).astype(np.float32), device=device)

    def step():
        for t in ts:
            t.grad = None
        fn(lib, F, *ts).backward(g)

    return step, lambda: [t.grad for t in ts]


def _host(t):
    return t.cpu().numpy() if hasattr(t, "cpu") else np.asarray(t)


def check_against_cpu(ferro, make, device):
    """Largest relative error (Frobenius) of the device's gradients against ferro on the CPU
    (None in the peer's pass, which times PyTorch only)."""
    if os.environ.get(PEER_PASS_ENV) is not None:
        return None
    worst = 0.0
    results = []
    for dev in ("cpu", device):
        step, grads = make(dev)
        step()
        _sync(ferro, dev)
        results.append([_host(g) for g in grads()])
    for a, b in zip(*results, strict=True):
        worst = max(worst, float(np.linalg.norm(b - a) / max(np.linalg.norm(a), 1e-30)))
    return worst


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = ap.parse_args(argv)
    import ferro

    device = args.device
    if device == "cuda" and not ferro.cuda.is_available():
        header("bench_gpu_models")
        print("skipped: no CUDA device (CuPy missing or no driver)")
        return []
    torch = optional_torch()
    if torch is not None and device == "cuda" and not torch.cuda.is_available():
        torch = None  # a CPU-only PyTorch has no peer figures to give here
    header("bench_gpu_models")
    libs = [("ferro", ferro)] + ([("torch", torch)] if torch is not None else [])
    records, rows = [], []

    def run(case, makers, check=None):
        cases = {name: _timed(lib, device, makers(lib)) for name, lib in libs}
        med = measure(cases, args.repeats, warmup=3)
        ratio = med["ferro"] / med["torch"] if "torch" in med else None
        fields = {"ferro_ms": med["ferro"] * 1e3, "torch_ms": med.get("torch", float("nan")) * 1e3}
        if check is not None:
            fields["grad_rel_err_vs_cpu"] = check
        records.append(emit("bench_gpu_models", f"{case}_{device}", ratio=ratio, **fields))
        rows.append(
            [case, fields["ferro_ms"], fields["torch_ms"], "-" if ratio is None else ratio, check]
        )

    for batch in (64, 4096):
        run(f"mlp_sgd_b{batch}", lambda lib, b=batch: mlp_case(lib, device, b))
    run("gpt_step_adamw", lambda lib: gpt_case(lib, device))
    err = check_against_cpu(ferro, lambda d: lstm_case(ferro, d), device)
    run("lstm_2x200", lambda lib: lstm_case(lib, device)[0], err)
    for name in family_inputs():
        err = check_against_cpu(ferro, lambda d, n=name: family_case(ferro, n, d), device)
        run(name, lambda lib, n=name: family_case(lib, n, device)[0], err)
    table(rows, ["case", "ferro ms", "torch ms", "ferro/torch", "grad err vs cpu"])
    return records


if __name__ == "__main__":
    main()
