"""Resampling ops, forward+backward in float32, against PyTorch in the same run.

    python benchmarks/bench_resample.py [--repeats 7] [--scale 1.0] [--device cpu|cuda]

Cases (input gradient, plus the grid's, offset's and weight's where they exist):
- ``interpolate`` nearest, bilinear (up and down), bicubic and trilinear upsampling, and a
  large image (its axes resampled by taps instead of dense matrices);
- ``grid_sample`` bilinear with zero padding, gradients for the input and the grid;
- ``deform_conv2d`` (no PyTorch peer: torchvision has no CPU build here) against PyTorch's
  ``conv2d`` of the same shapes, the cost of the same convolution without the deformation.

``ferro/torch`` is ferro's median time over PyTorch's; ``generic/fused`` is the kernels' win
over the generic path (overrides off) where the op has an override. ``--scale`` shrinks
or grows the batch. ``--device cuda`` runs every case on the GPU (CuPy arrays, PyTorch CUDA),
synchronizing after each call, where ``interpolate`` and ``grid_sample`` have kernels too. On a
loaded machine OpenBLAS's spinning threads can dominate the GEMMs
(``OPENBLAS_NUM_THREADS=1`` shows the kernels' own figures).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import emit, header, measure, optional_torch, table  # noqa: E402
from ferro.ops.fused import overrides  # noqa: E402


def _cases(scale):
    n = max(1, round(16 * scale))
    return [
        ("nearest 2x", (n, 64, 32, 32), {"scale_factor": 2, "mode": "nearest"}),
        (
            "bilinear 2x",
            (n, 64, 32, 32),
            {"scale_factor": 2, "mode": "bilinear", "align_corners": False},
        ),
        (
            "bilinear 0.5x",
            (n, 64, 64, 64),
            {"scale_factor": 0.5, "mode": "bilinear", "align_corners": False},
        ),
        (
            "bilinear 2x, 512^2 (taps)",
            (max(1, n // 8), 3, 512, 512),
            {"scale_factor": 2, "mode": "bilinear", "align_corners": False},
        ),
        (
            "bicubic 2x",
            (max(1, n // 2), 32, 32, 32),
            {"scale_factor": 2, "mode": "bicubic", "align_corners": False},
        ),
        (
            "trilinear 2x",
            (max(1, n // 8), 16, 16, 16, 16),
            {"scale_factor": 2, "mode": "trilinear", "align_corners": False},
        ),
    ]


_DEVICE = "cpu"  # set by main


def _f(ferro, a, grad=False):
    t = ferro.from_numpy(a).to(_DEVICE)
    return t.requires_grad_() if grad else t


def _t(torch, a, grad=False):
    t = torch.from_numpy(a).to(_DEVICE)
    return t.requires_grad_() if grad else t


def _synced(ferro, torch, cases):
    """The cases, each followed by a device synchronization on the GPU (wall times then
    include the kernels), and a ``generic`` case (overrides off) where the GPU has kernels."""
    if _DEVICE == "cpu":
        return cases
    out = {}
    for name, fn in cases.items():
        wait = torch.cuda.synchronize if name == "torch" else ferro.cuda.synchronize

        def run(fn=fn, wait=wait):
            fn()
            wait()

        out[name] = run
    if "generic" not in out:

        def generic(run=out["ferro"]):
            with overrides(False):
                run()

        out["generic"] = generic
    return out


def _interp(ferro, torch, shape, kw, rng):
    x_np = rng.standard_normal(shape).astype(np.float32)
    x = _f(ferro, x_np, True)
    out_shape = ferro.nn.functional.interpolate(x.detach(), **kw).shape
    gy_np = rng.standard_normal(out_shape).astype(np.float32)
    gy = _f(ferro, gy_np)

    def run_ferro():
        x.grad = None
        ferro.nn.functional.interpolate(x, **kw).backward(gy)

    cases = {"ferro": run_ferro}
    if torch is not None:
        xt = _t(torch, x_np, True)
        gyt = _t(torch, gy_np)

        def run_torch():
            xt.grad = None
            torch.nn.functional.interpolate(xt, **kw).backward(gyt)

        cases["torch"] = run_torch
    return _synced(ferro, torch, cases)


def _grid(ferro, torch, n, rng):
    x_np = rng.standard_normal((n, 32, 32, 32)).astype(np.float32)
    g_np = rng.uniform(-1.1, 1.1, (n, 32, 32, 2)).astype(np.float32)
    gy_np = rng.standard_normal((n, 32, 32, 32)).astype(np.float32)
    x, g = _f(ferro, x_np, True), _f(ferro, g_np, True)
    gy = _f(ferro, gy_np)

    def run_ferro():
        x.grad = g.grad = None
        ferro.nn.functional.grid_sample(x, g, align_corners=False).backward(gy)

    def run_generic():
        with overrides(False):
            run_ferro()

    cases = {"ferro": run_ferro, "generic": run_generic}
    if torch is not None:
        xt, gt = _t(torch, x_np, True), _t(torch, g_np, True)
        gyt = _t(torch, gy_np)

        def run_torch():
            xt.grad = gt.grad = None
            torch.nn.functional.grid_sample(xt, gt, align_corners=False).backward(gyt)

        cases["torch"] = run_torch
    return _synced(ferro, torch, cases)


def _deform(ferro, torch, n, rng):
    x_np = rng.standard_normal((n, 32, 32, 32)).astype(np.float32)
    w_np = (rng.standard_normal((32, 32, 3, 3)) * 0.1).astype(np.float32)
    off_np = rng.uniform(-1, 1, (n, 18, 32, 32)).astype(np.float32)
    gy_np = rng.standard_normal((n, 32, 32, 32)).astype(np.float32)
    x, w, off = (_f(ferro, a, True) for a in (x_np, w_np, off_np))
    gy = _f(ferro, gy_np)

    def run_ferro():
        x.grad = w.grad = off.grad = None
        ferro.nn.functional.deform_conv2d(x, off, w, padding=1).backward(gy)

    def run_generic():
        with overrides(False):
            run_ferro()

    cases = {"ferro": run_ferro, "generic": run_generic}
    if torch is not None:
        xt, wt = _t(torch, x_np, True), _t(torch, w_np, True)
        gyt = _t(torch, gy_np)

        def run_torch():
            xt.grad = wt.grad = None
            torch.nn.functional.conv2d(xt, wt, padding=1).backward(gyt)

        cases["torch"] = run_torch
    return _synced(ferro, torch, cases)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args(argv)

    import ferro

    global _DEVICE
    _DEVICE = args.device
    if _DEVICE == "cuda" and not ferro.cuda.is_available():
        header("bench_resample")
        print("skipped: no CUDA device (CuPy missing or no driver)")
        return
    torch = optional_torch()
    header("bench_resample")
    if _DEVICE == "cuda" and torch is not None and not torch.cuda.is_available():
        torch = None
    rng = np.random.default_rng(0)
    n = max(1, round(16 * args.scale))
    runs = [
        (name, _interp(ferro, torch, shape, kw, rng), str(shape))
        for name, shape, kw in _cases(args.scale)
    ]
    runs.append(("grid_sample bilinear", _grid(ferro, torch, n, rng), f"({n}, 32, 32, 32)"))
    runs.append(
        (
            "deform_conv2d 3x3 (torch: conv2d)",
            _deform(ferro, torch, max(1, n // 2), rng),
            f"({max(1, n // 2)}, 32, 32, 32)",
        )
    )
    rows = []
    for name, cases, shape in runs:
        t = measure(cases, args.repeats)
        ratio = t["ferro"] / t["torch"] if "torch" in t else None
        generic = t["generic"] / t["ferro"] if "generic" in t else None
        nan = float("nan")
        rows.append(
            [name, shape, t["ferro"] * 1e3, t.get("torch", nan) * 1e3, ratio, generic or "-"]
        )
        emit(
            "resample",
            name,
            device=_DEVICE,
            shape=shape,
            ferro_ms=t["ferro"] * 1e3,
            torch_ms=t.get("torch", None) and t["torch"] * 1e3,
            ferro_over_torch=ratio,
            generic_over_fused=generic,
        )
    table(rows, ["case", "input", "ferro ms", "torch ms", "ferro/torch", "generic/fused"])


if __name__ == "__main__":
    main()
