"""Convolution forward+backward (input, weight and bias gradients), float32: ferro against
PyTorch CPU (oneDNN) with its default threads, and against a hand-written NumPy im2col+matmul
floor, in one run (issue 14's goals).

    python benchmarks/bench_conv.py [--repeats 10] [--cases conv2d depthwise ...] [--no-memory]

Every case first checks that ferro's output and gradients match PyTorch's. The memory section
runs conv2d forward+backward once in a fresh process per library and reports the peak
workspace: tracemalloc's peak for ferro (NumPy's allocations are traced), and the peak RSS
growth for both.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import emit, header, measure, optional_torch, table  # noqa: E402

# name -> (function, input shape, weight shape, keyword arguments). ``transposed`` cases take
# the weight (in, out/groups, *kernel).
CONV_CASES = {
    "conv2d": ("conv2d", (32, 64, 32, 32), (64, 64, 3, 3), {"padding": 1}),
    "depthwise": ("conv2d", (32, 128, 32, 32), (128, 1, 3, 3), {"padding": 1, "groups": 128}),
    "conv2d_1x1": ("conv2d", (32, 256, 16, 16), (64, 256, 1, 1), {}),
    "conv1d": ("conv1d", (32, 128, 256), (128, 128, 5), {"padding": 2}),
    "conv3d": ("conv3d", (4, 16, 16, 16, 16), (32, 16, 3, 3, 3), {"padding": 1}),
    "conv_transpose2d": (
        "conv_transpose2d",
        (16, 64, 16, 16),
        (64, 32, 4, 4),
        {"stride": 2, "padding": 1},
    ),
}

# Cases that need the pooling family (issue 14, the "pool" slice): they run once
# ferro.nn.functional has max_pool2d / adaptive_avg_pool2d, and report "skipped" before.
POOL_CASES = {
    "max_pool2d": ("max_pool2d", (32, 64, 32, 32), {"kernel_size": 2}),
    "adaptive_avg_pool2d": ("adaptive_avg_pool2d", (32, 64, 32, 32), {"output_size": 1}),
}
# The digits demo's CNN (Conv2d-ReLU-MaxPool x2, Linear) on 8x8 images, one SGD step, batch 64.
CNN_CASE = "cnn_step"


def _grad_inputs(rng, xshape, wshape, cout):
    x = rng.normal(size=xshape).astype(np.float32)
    w = (rng.normal(size=wshape) / np.sqrt(np.prod(wshape[1:]))).astype(np.float32)
    b = rng.normal(size=cout).astype(np.float32)
    return x, w, b


def _out_channels(fn, wshape, kw):
    return wshape[1] * kw.get("groups", 1) if "transpose" in fn else wshape[0]


def make_lib_step(lib, F, fn, x, w, b, kw):
    """Forward + backward of one convolution in ferro or PyTorch (same API)."""
    conv = getattr(F, fn)
    tx = lib.from_numpy(x.copy()).requires_grad_()
    tw = lib.from_numpy(w.copy()).requires_grad_()
    tb = lib.from_numpy(b.copy()).requires_grad_()

    def step():
        for t in (tx, tw, tb):
            t.grad = None
        y = conv(tx, tw, tb, **kw)
        y.backward(lib.ones_like(y))
        return y

    return step, (tx, tw, tb)


def numpy_conv2d_step(x, w, b, padding):
    """The floor: a plain NumPy conv2d forward and backward by im2col + matmul (stride 1,
    groups 1), written as one would by hand. Returns y, gx, gw, gb for gy = 1."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    p = padding
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    oh, ow = h + 2 * p - kh + 1, wd + 2 * p - kw + 1
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))  # n c oh ow kh kw
    col = win.transpose(1, 4, 5, 0, 2, 3).reshape(c * kh * kw, n * oh * ow)
    w2 = w.reshape(o, -1)
    y = (w2 @ col).reshape(o, n, oh, ow).transpose(1, 0, 2, 3) + b.reshape(1, o, 1, 1)
    gy = np.ones_like(y).transpose(1, 0, 2, 3).reshape(o, -1)
    gw = (gy @ col.T).reshape(w.shape)
    gb = gy.sum(axis=1)
    gcol = (w2.T @ gy).reshape(c, kh, kw, n, oh, ow)
    gxp = np.zeros_like(xp)
    for i in range(kh):
        for j in range(kw):
            gxp[:, :, i : i + oh, j : j + ow] += gcol[:, i, j].transpose(1, 0, 2, 3)
    return y, gxp[:, :, p : p + h, p : p + wd], gw, gb


def _check(ferro_step, ferro_ts, torch_step, torch_ts, rtol=2e-3):
    fy, ty = ferro_step(), torch_step()
    scale = float(np.abs(ty.detach().numpy()).max()) or 1.0
    np.testing.assert_allclose(
        fy.detach().numpy(), ty.detach().numpy(), rtol=rtol, atol=rtol * scale
    )
    for f, t in zip(ferro_ts, torch_ts, strict=True):
        g = t.grad.numpy()
        gscale = float(np.abs(g).max()) or 1.0
        np.testing.assert_allclose(f.grad.numpy(), g, rtol=rtol, atol=rtol * gscale)


def bench_conv_case(name, ferro, torch, repeats):
    fn, xshape, wshape, kw = CONV_CASES[name]
    rng = np.random.default_rng(0)
    x, w, b = _grad_inputs(rng, xshape, wshape, _out_channels(fn, wshape, kw))
    fstep, fts = make_lib_step(ferro, ferro.nn.functional, fn, x, w, b, kw)
    cases = {"ferro": fstep}
    if torch is not None:
        tstep, tts = make_lib_step(torch, torch.nn.functional, fn, x, w, b, kw)
        _check(fstep, fts, tstep, tts)
        cases["torch"] = tstep
    floor = fn == "conv2d" and kw.get("groups", 1) == 1
    if floor:
        _, gx, gw, _ = numpy_conv2d_step(x, w, b, kw.get("padding", 0))
        fstep()
        np.testing.assert_allclose(fts[0].grad.numpy(), gx, rtol=2e-3, atol=2e-3)
        np.testing.assert_allclose(fts[1].grad.numpy(), gw, rtol=2e-3, atol=2e-2)
        cases["numpy"] = lambda: numpy_conv2d_step(x, w, b, kw.get("padding", 0))
    with ferro.no_grad():
        conv = getattr(ferro.nn.functional, fn)
        fx, fw, fb = (ferro.from_numpy(a) for a in (x, w, b))
        cases["ferro_fwd"] = lambda: conv(fx, fw, fb, **kw)
    med = measure(cases, repeats, warmup=1, blas_cases=("numpy",))
    t, f, npf = med.get("torch"), med["ferro"], med.get("numpy")
    return emit(
        "bench_conv",
        name,
        input=list(xshape),
        weight=list(wshape),
        kwargs=kw,
        ferro_ms=f * 1e3,
        ferro_fwd_ms=med["ferro_fwd"] * 1e3,
        torch_ms=t * 1e3 if t else None,
        numpy_ms=npf * 1e3 if npf else None,
        ferro_over_torch=f / t if t else None,
        ferro_over_numpy=f / npf if npf else None,
    )


def bench_pool_case(name, ferro, torch, repeats):
    fn, xshape, kw = POOL_CASES[name]
    if not hasattr(ferro.nn.functional, fn):
        return emit("bench_conv", name, skipped=f"ferro.nn.functional has no {fn} yet")
    x = np.random.default_rng(0).normal(size=xshape).astype(np.float32)

    def make(lib, F):
        t = lib.from_numpy(x.copy()).requires_grad_()

        def step():
            t.grad = None
            y = getattr(F, fn)(t, **kw)
            y.backward(lib.ones_like(y))
            return y

        return step

    cases = {"ferro": make(ferro, ferro.nn.functional)}
    if torch is not None:
        cases["torch"] = make(torch, torch.nn.functional)
    med = measure(cases, repeats, warmup=1)
    t = med.get("torch")
    return emit(
        "bench_conv",
        name,
        input=list(xshape),
        kwargs=kw,
        ferro_ms=med["ferro"] * 1e3,
        torch_ms=t * 1e3 if t else None,
        ferro_over_torch=med["ferro"] / t if t else None,
    )


def _cnn(lib, nn):
    lib.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 2 * 2, 10),
    )


def bench_cnn_step(ferro, torch, repeats, batch=64):
    if not hasattr(ferro.nn, "MaxPool2d"):
        return emit("bench_conv", CNN_CASE, skipped="ferro.nn has no MaxPool2d yet")
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 16, size=(batch, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, batch)

    def make(lib, nn, F):
        model = _cnn(lib, nn)
        xt, yt = lib.from_numpy(x), lib.from_numpy(y)
        params = list(model.parameters())

        def step():
            for p in params:
                p.grad = None
            loss = F.cross_entropy(model(xt), yt)
            loss.backward()
            with lib.no_grad():
                for p in params:
                    p -= 0.01 * p.grad
            return loss

        return step

    cases = {"ferro": make(ferro, ferro.nn, ferro.nn.functional)}
    if torch is not None:
        cases["torch"] = make(torch, torch.nn, torch.nn.functional)
    med = measure(cases, repeats, warmup=2)
    t = med.get("torch")
    layers = {}
    for lib, suffix in ((ferro, ""), (torch, "/torch")):
        if lib is not None:
            layers.update(_cnn_layer_cases(lib, lib.from_numpy(x), suffix))
    per_layer = measure(layers, repeats, warmup=2)
    breakdown = {
        k: {"ferro_ms": v * 1e3, "torch_ms": per_layer.get(k + "/torch", 0) * 1e3 or None}
        for k, v in per_layer.items()
        if not k.endswith("/torch")
    }
    return emit(
        "bench_conv",
        CNN_CASE,
        batch=batch,
        ferro_ms=med["ferro"] * 1e3,
        torch_ms=t * 1e3 if t else None,
        ferro_over_torch=med["ferro"] / t if t else None,
        layers_fwd_bwd=breakdown,
    )


def _cnn_layer_cases(lib, x, suffix):
    """The CNN's convolution and pooling layers one at a time, forward+backward on the inputs
    one forward of the model gives them (where the training step's time goes): cases named
    ``"<index> <layer>" + suffix``."""
    cases, h = {}, x
    for i, layer in enumerate(_cnn(lib, lib.nn)):
        kind = type(layer).__name__
        if kind in ("Conv2d", "MaxPool2d"):
            inp = h.detach().requires_grad_(i > 0)
            g = lib.ones(tuple(layer(inp).shape))

            def fwd_bwd(_layer=layer, _inp=inp, _g=g):
                _layer(_inp).backward(_g)

            cases[f"{i} {kind}{suffix}"] = fwd_bwd
        h = layer(h)
    return cases


def _peak_rss() -> int:
    """The process's peak resident set (bytes): Linux's VmHWM, else getrusage's maximum."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _reset_peak_rss() -> int:
    """Reset the peak to the current resident set where Linux allows (``clear_refs`` 5), so
    the import's and the inputs' peaks do not hide the call's; returns the new baseline."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    return _peak_rss()


def memory_child(lib_name: str) -> None:
    """One conv2d forward+backward in this fresh process; prints the peak figures as JSON."""
    fn, xshape, wshape, kw = CONV_CASES["conv2d"]
    x, w, b = _grad_inputs(np.random.default_rng(0), xshape, wshape, wshape[0])
    if lib_name == "ferro":
        import ferro as lib

        F = lib.nn.functional
    else:
        import torch as lib

        F = lib.nn.functional
    tensors = [lib.from_numpy(a).requires_grad_() for a in (x, w, b)]
    # Import-time and first-call costs (thread pools, BLAS buffers) out of the measure: one
    # small call first.
    small = [lib.from_numpy(a[:1].copy()).requires_grad_() for a in (x,)] + tensors[1:]
    getattr(F, fn)(*small, **kw).sum().backward()
    import tracemalloc

    rss0 = _reset_peak_rss()
    tracemalloc.start()
    y = getattr(F, fn)(*tensors, **kw)
    y.backward(lib.ones_like(y))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss = _peak_rss() - rss0
    print(json.dumps({"traced_peak": peak, "rss_delta": rss}))


def bench_memory(torch) -> dict:
    out = {}
    for lib_name in ("ferro", "torch") if torch is not None else ("ferro",):
        proc = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--memory-child", lib_name],
            capture_output=True,
            text=True,
            check=True,
        )
        out[lib_name] = json.loads(proc.stdout.strip().splitlines()[-1])
    f, t = out["ferro"], out.get("torch")
    mib = 1 << 20
    return emit(
        "bench_conv",
        "conv2d_peak_memory",
        ferro_traced_mib=f["traced_peak"] / mib,
        ferro_rss_mib=f["rss_delta"] / mib,
        torch_rss_mib=t["rss_delta"] / mib if t else None,
        ferro_traced_over_torch_rss=f["traced_peak"] / t["rss_delta"]
        if t and t["rss_delta"]
        else None,
        ferro_over_torch_rss=f["rss_delta"] / t["rss_delta"] if t and t["rss_delta"] else None,
    )


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument(
        "--cases", nargs="*", default=[*CONV_CASES, *POOL_CASES, CNN_CASE], help="which cases"
    )
    ap.add_argument("--no-memory", action="store_true", help="skip the peak-memory section")
    ap.add_argument("--memory-child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.memory_child:
        memory_child(args.memory_child)
        return []

    import ferro

    torch = optional_torch()
    header("bench_conv")
    records = []
    for name in args.cases:
        if name in CONV_CASES:
            records.append(bench_conv_case(name, ferro, torch, args.repeats))
        elif name in POOL_CASES:
            records.append(bench_pool_case(name, ferro, torch, args.repeats))
        elif name == CNN_CASE:
            records.append(bench_cnn_step(ferro, torch, args.repeats))
        else:
            ap.error(f"unknown case {name!r}")
    print()
    rows = [
        [
            r["case"],
            r.get("ferro_ms", "skipped"),
            r.get("torch_ms") or "-",
            r.get("numpy_ms") or "-",
            r.get("ferro_over_torch") or "-",
            r.get("ferro_over_numpy") or "-",
        ]
        for r in records
    ]
    table(rows, ["case", "ferro ms", "torch ms", "numpy ms", "ferro/torch", "ferro/numpy"])
    if not args.no_memory:
        m = bench_memory(torch)
        records.append(m)
        print()
        table(
            [
                [
                    m["ferro_traced_mib"],
                    m["ferro_rss_mib"],
                    m["torch_rss_mib"] or "-",
                    m["ferro_over_torch_rss"] or "-",
                ]
            ],
            ["ferro traced MiB", "ferro RSS MiB", "torch RSS MiB", "ferro/torch RSS"],
        )
    return records


if __name__ == "__main__":
    main()
