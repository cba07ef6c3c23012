"""Normalization forward+backward (float32): ferro with its fused kernels, ferro's generic NumPy
path (overrides off), PyTorch with the same thread count, and a memory-traffic floor, in one run.

    python benchmarks/bench_norm.py [--repeats 15] [--quick]

Cases (issue 15's goals: layer_norm <= 1.2x PyTorch and <= 1.5x the floor; batch_norm2d <=
1.2x PyTorch): layer_norm on (64*128, 768), batch_norm2d training on (32, 64, 32, 32),
group_norm (32 groups) on the same, rms_norm on (64*128, 768). Each step is the forward and the
backward with an explicit upstream gradient, with weight and bias requiring grad.

The floor is a measured ``np.copyto`` of as many bytes as the op must move at least: it reads
x and writes y forward, reads gy and x and writes gx backward (five arrays of x's size; the
parameters, their gradients and the saved mean and rstd are under 0.2% of those bytes), so a
copy of 2.5 x-sized arrays (read once, written once). Both sides read data that was written
once before, as the op's x and gy were, and write warm memory: the floor a buffer it reuses,
ferro fresh outputs that the caching allocator (Note [Caching allocator]) serves from blocks
freed by the previous step, without first-touch page faults. The copy's source must be written:
an ``np.empty`` source of this size is fresh mmap'ed memory that was never touched, whose reads
all hit the kernel's one zero page, so such a copy reads nothing from memory. Until session 11
the floor did that (2.7-2.8 ms on the development machine, against 4.2-4.8 ms for the same copy
of written data in the same process: docs/normalization.md, Performance). np.copyto is glibc's
memmove, which on this size writes with plain stores (its non-temporal threshold, 3/4 of the
shared cache it detects, is 240 MiB here: ``ld.so --list-diagnostics``), as the kernels do.

The floor is one thread's copy; the kernels split rows over ferro's threads. ``floor2`` is the
same copy cut in two halves run on two threads (``ferro._intraop``), the traffic floor of a
2-thread kernel: ``x floor2`` says how far the kernels are from what both cores can move,
``x floor`` is the goal's ratio. Both the kernels and the copy store plainly, so each reads its
output lines before writing them (read for ownership): 175 MB moved by layer_norm's step, 189 MB
by the copy. Streaming stores, which skip that read, did not pay in the kernels (twice tried:
docs/normalization.md, Performance).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ferro  # noqa: E402
from benchmarks.common import emit, header, measure, optional_torch, table  # noqa: E402
from ferro import _intraop  # noqa: E402
from ferro.ops.fused import overrides  # noqa: E402


def _cases(quick: bool):
    m = 1024 if quick else 64 * 128
    n = 8 if quick else 32
    return {
        "layer_norm": ((m, 768), (768,), "layer_norm"),
        "batch_norm2d": ((n, 64, 32, 32), (64,), "batch_norm"),
        "group_norm": ((n, 64, 32, 32), (64,), "group_norm"),
        "rms_norm": ((m, 768), (768,), "rms_norm"),
    }


def _ferro_step(kind, x, w, b, gy):
    def step():
        if kind == "layer_norm":
            y = ferro.layer_norm(x, (x.shape[-1],), w, b)
        elif kind == "batch_norm":
            y = ferro.batch_norm(x, None, None, w, b, training=True)
        elif kind == "group_norm":
            y = ferro.group_norm(x, 32, w, b)
        else:
            y = ferro.rms_norm(x, (x.shape[-1],), w)
        y.backward(gy)
        x.grad = w.grad = b.grad = None

    return step


def _torch_step(torch, kind, x, w, b, gy):
    F = torch.nn.functional

    def step():
        if kind == "layer_norm":
            y = F.layer_norm(x, (x.shape[-1],), w, b)
        elif kind == "batch_norm":
            y = F.batch_norm(x, None, None, w, b, training=True)
        elif kind == "group_norm":
            y = F.group_norm(x, 32, w, b)
        else:
            y = F.rms_norm(x, (x.shape[-1],), w)
        y.backward(gy)
        x.grad = w.grad = b.grad = None

    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--quick", action="store_true", help="small shapes (a smoke run)")
    args = ap.parse_args()
    header("bench_norm")
    torch = optional_torch()
    rows = []
    for name, (shape, pshape, kind) in _cases(args.quick).items():
        rng = np.random.default_rng(0)
        xa = rng.standard_normal(shape).astype(np.float32)
        wa = rng.uniform(0.5, 1.5, pshape).astype(np.float32)
        ba = rng.standard_normal(pshape).astype(np.float32)
        ga = rng.standard_normal(shape).astype(np.float32)
        x, w, b = (ferro.tensor(a, requires_grad=True) for a in (xa, wa, ba))
        gy = ferro.tensor(ga)
        fused = _ferro_step(kind, x, w, b, gy)

        def generic(fused=fused):
            with overrides(False):
                fused()

        src = rng.standard_normal(int(2.5 * xa.size)).astype(np.float32)  # written: see above
        dst = np.ones_like(src)
        halves = [(dst[: src.size // 2], src[: src.size // 2])]
        halves.append((dst[src.size // 2 :], src[src.size // 2 :]))
        cases = {
            "ferro": fused,
            "generic": generic,
            "floor": lambda dst=dst, src=src: np.copyto(dst, src),
            "floor2": lambda h=halves: _intraop.run(lambda i: np.copyto(*h[i]), _intraop.parts(2)),
        }
        if torch is not None:
            tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (xa, wa, ba))
            cases["torch"] = _torch_step(torch, kind, tx, tw, tb, torch.tensor(ga))
        t = measure(cases, args.repeats)
        vs_torch = t["ferro"] / t["torch"] if "torch" in t else float("nan")
        rows.append(
            [
                name,
                str(shape),
                t["ferro"] * 1e3,
                t["generic"] * 1e3,
                t.get("torch", float("nan")) * 1e3,
                vs_torch,
                t["ferro"] / t["floor"],
                t["ferro"] / t["floor2"],
                t["generic"] / t["ferro"],
            ]
        )
        emit(
            "norm",
            name,
            shape=list(shape),
            ferro_ms=t["ferro"] * 1e3,
            generic_ms=t["generic"] * 1e3,
            torch_ms=t.get("torch", float("nan")) * 1e3,
            floor_ms=t["floor"] * 1e3,
            floor2_ms=t["floor2"] * 1e3,
            ratio_torch=vs_torch,
            ratio_floor=t["ferro"] / t["floor"],
            ratio_floor2=t["ferro"] / t["floor2"],
        )
    table(
        rows,
        [
            "case",
            "shape",
            "ferro ms",
            "generic ms",
            "torch ms",
            "x torch",
            "x floor",
            "x floor2",
            "gain",
        ],
    )


if __name__ == "__main__":
    main()
