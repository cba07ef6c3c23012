"""Recurrent layers, forward + backward: ferro's LSTM and GRU against PyTorch's in the same run,
at the size of PyTorch's word-language-model example (2 layers, hidden 200, input 200,
sequence 35, batch 20, float32). Issue 15's goal: <= 1.3x PyTorch for both.

    python benchmarks/bench_rnn.py [--repeats 15] [--seq 35] [--batch 20] [--hidden 200]

ferro runs with its fused overrides on (the cell kernels, where a backend has them), on for the
backward only, and off (the generic cell ops written against NumPy), so the table shows what
the forward and backward kernels buy; with the steps in a Python loop instead of one compiled
call per layer (Note [Compiled step loop] in ferro/ops/recurrent.py); and with the two layers a
few steps apart on two cores (Note [Recurrent stack] in docs/rnn.md), which is off by default;
and with a LSTM's steps split by hidden units over two threads (Note [Hidden-unit split] in
ferro/ops/recurrent.py: off by default, as it loses beside other two-thread GEMMs).
The script checks that ferro and PyTorch give the same output and input gradient from the same
weights before timing anything.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import emit, header, measure, optional_torch, table  # noqa: E402


def _ferro_step(ferro, layer, x):
    def step():
        for p in layer.parameters():
            p.grad = None
        x.grad = None
        out, _ = layer(x)
        out.sum().backward()

    return step


def _ferro_step_generic_forward(ferro, layer, x):
    # The forward with the overrides off, the backward with them on (the layer's entry is not
    # paired: a fused backward may follow a generic forward): what the cell kernels' forward
    # half buys, against the same run's "ferro".
    from ferro.ops.fused import overrides

    def step():
        for p in layer.parameters():
            p.grad = None
        x.grad = None
        with overrides(False):
            out, _ = layer(x)
        out.sum().backward()

    return step


def _torch_step(layer, x):
    def step():
        layer.zero_grad(set_to_none=True)
        x.grad = None
        out, _ = layer(x)
        out.sum().backward()

    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--seq", type=int, default=35)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--hidden", type=int, default=200)
    ap.add_argument("--layers", type=int, default=2)
    args = ap.parse_args()

    import ferro
    from ferro.ops import recurrent
    from ferro.ops.fused import overrides

    torch = optional_torch()
    header("bench_rnn")
    rng = np.random.default_rng(0)
    x_np = rng.normal(size=(args.seq, args.batch, args.hidden)).astype(np.float32)
    rows = []
    for mode in ("LSTM", "GRU"):
        ferro.manual_seed(0)
        layer = getattr(ferro.nn, mode)(args.hidden, args.hidden, num_layers=args.layers)
        x = ferro.from_numpy(x_np.copy()).requires_grad_()
        step = _ferro_step(ferro, layer, x)

        def generic(step=step):
            with overrides(False):
                step()

        def switched(name, value, step=step):  # step() with recurrent.<name> = value
            def run():
                before = getattr(recurrent, name)
                setattr(recurrent, name, value)
                try:
                    step()
                finally:
                    setattr(recurrent, name, before)

            return run

        cases = {
            "ferro": step,
            # the steps split by hidden units, off by default (Note [Hidden-unit split])
            "ferro (steps split)": switched("_UNIT_SPLIT_WORK", 1 << 20),
            # the two-thread wavefront (off by default: Note [Recurrent stack])
            "ferro (wavefront on 2 threads)": switched("_SPLIT_WORK", 1 << 18),
            # the steps in Python, not in one compiled call (Note [Compiled step loop])
            "ferro (Python step loop)": switched("_C_LOOP", False),
            "ferro (backward kernels)": _ferro_step_generic_forward(ferro, layer, x),
            "ferro (no kernels)": generic,
        }
        if torch is not None:
            tl = getattr(torch.nn, mode)(args.hidden, args.hidden, num_layers=args.layers)
            layer.load_state_dict({k: v.detach().numpy() for k, v in tl.state_dict().items()})
            tx = torch.tensor(x_np, requires_grad=True)
            cases["torch"] = _torch_step(tl, tx)
            # Same weights, same input: same output and input gradient (float32 tolerance).
            cases["ferro"]()
            cases["torch"]()
            np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=2e-3, atol=2e-4)
        times = measure(cases, args.repeats)
        base = times.get("torch")
        for name, sec in times.items():
            ratio = sec / base if base else float("nan")
            rows.append([mode, name, sec * 1e3, ratio])
            emit("bench_rnn", f"{mode}/{name}", ms=sec * 1e3, vs_torch=ratio)
    table(rows, ["layer", "impl", "ms", "x torch"])


if __name__ == "__main__":
    main()
