"""The sequence family against PyTorch in one run (issue 15's goals), float32:

- scaled_dot_product_attention forward+backward, B=8, H=8, T=256, D=64, causal (goal <= 1.5x
  PyTorch), and ferro's peak extra memory for it (traced NumPy allocations) against the budget
  of two (T, T) float32 matrices per head;
- a GPT training step: 4 pre-norm layers, 4 heads, embedding 128, block 64, batch 32, vocab 65,
  GELU, AdamW, built from each library's nn.TransformerEncoderLayer (goal <= 1.2x PyTorch);
- then the normalization and recurrent benchmarks (bench_norm, bench_rnn), when present.

    python benchmarks/bench_seq.py [--repeats 7] [--quick]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tracemalloc

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import emit, header, measure, optional_torch, table  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def sdpa_cases(ferro, torch, B, H, T, D):
    rng = np.random.default_rng(0)
    q, k, v, g = (rng.standard_normal((B, H, T, D)).astype(np.float32) for _ in range(4))
    fq = [ferro.tensor(a, requires_grad=True) for a in (q, k, v)]
    fg = ferro.tensor(g)

    def ferro_step():
        for t in fq:
            t.grad = None
        ferro.nn.functional.scaled_dot_product_attention(*fq, is_causal=True).backward(fg)

    cases = {"ferro": ferro_step}
    if torch is not None:
        tq = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
        tg = torch.tensor(g)

        def torch_step():
            for t in tq:
                t.grad = None
            torch.nn.functional.scaled_dot_product_attention(*tq, is_causal=True).backward(tg)

        cases["torch"] = torch_step
    return cases, ferro_step


def peak_extra_bytes(step) -> int:
    """Peak NumPy memory allocated during one call of ``step`` (inputs excluded)."""
    step()
    tracemalloc.start()
    try:
        step()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def gpt(lib, vocab, block, embd, heads, layers, device="cpu"):
    nn = lib.nn

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, embd)
            self.pos = nn.Embedding(block, embd)
            layer = nn.TransformerEncoderLayer(
                embd, heads, 4 * embd, 0.0, "gelu", batch_first=True, norm_first=True
            )
            self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(embd)
            self.head = nn.Linear(embd, vocab)
            self.mask = nn.Transformer.generate_square_subsequent_mask(block, device=device)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(lib.arange(idx.shape[1], device=idx.device))
            return self.head(self.norm(self.blocks(x, mask=self.mask, is_causal=True)))

    return GPT().to(device)


def gpt_cases(ferro, torch, batch, block, embd, heads, layers, vocab=65):
    rng = np.random.default_rng(0)
    x = rng.integers(0, vocab, (batch, block))
    y = rng.integers(0, vocab, (batch, block))
    cases = {}
    libs = [("ferro", ferro)] + ([("torch", torch)] if torch is not None else [])
    for name, lib in libs:
        if name == "torch":
            torch.manual_seed(0)
        else:
            ferro.manual_seed(0)
        model = gpt(lib, vocab, block, embd, heads, layers)
        opt = lib.optim.AdamW(model.parameters(), lr=1e-3)
        xt, yt = lib.tensor(x), lib.tensor(y)
        ce = lib.nn.functional.cross_entropy

        def step(model=model, opt=opt, xt=xt, yt=yt, ce=ce):
            loss = ce(model(xt).reshape(-1, vocab), yt.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()

        cases[name] = step
    return cases


def _run_sibling(name: str) -> None:
    """Run ``benchmarks/<name>.py``'s ``main()`` with its default arguments, if it exists."""
    path = os.path.join(HERE, f"{name}.py")
    if not os.path.exists(path):
        print(f"# {name}.py: not present, skipped")
        return
    spec = importlib.util.spec_from_file_location(f"benchmarks.{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    print()
    argv, sys.argv = sys.argv, [path]  # its main() parses sys.argv
    try:
        module.main()
    finally:
        sys.argv = argv


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="smaller shapes, fewer repeats")
    ap.add_argument("--no-siblings", action="store_true", help="skip bench_norm and bench_rnn")
    args = ap.parse_args(argv)
    import ferro

    torch = optional_torch()
    if torch is not None:
        torch.set_num_threads(min(2, os.cpu_count() or 1))
    header("bench_seq")
    records, rows = [], []

    B, H, T, D = (2, 4, 128, 32) if args.quick else (8, 8, 256, 64)
    cases, ferro_step = sdpa_cases(ferro, torch, B, H, T, D)
    med = measure(cases, args.repeats, warmup=2)
    # What any implementation allocates (the output and the three input gradients) is not
    # "extra": the goal is about the scores' working memory.
    peak = peak_extra_bytes(ferro_step) - 4 * B * H * T * D * 4
    budget = 2 * B * H * T * T * 4
    ratio = med["ferro"] / med["torch"] if "torch" in med else None
    records.append(
        emit(
            "bench_seq",
            f"sdpa_causal_B{B}_H{H}_T{T}_D{D}",
            ferro_ms=med["ferro"] * 1e3,
            torch_ms=med.get("torch", float("nan")) * 1e3,
            ratio=ratio,
            ferro_peak_mib=peak / 2**20,
            budget_mib=budget / 2**20,
        )
    )
    rows.append(
        [
            "sdpa fwd+bwd causal",
            med["ferro"] * 1e3,
            med.get("torch", float("nan")) * 1e3,
            ratio if ratio is not None else "-",
            "<= 1.5",
        ]
    )
    print(
        f"# sdpa peak memory beyond output and grads: ferro {peak / 2**20:.1f} MiB; "
        f"two (T, T) float32 per head: {budget / 2**20:.1f} MiB"
    )

    if hasattr(ferro.nn, "LayerNorm"):
        batch, block, embd, heads, layers = (8, 32, 64, 4, 2) if args.quick else (32, 64, 128, 4, 4)
        cases = gpt_cases(ferro, torch, batch, block, embd, heads, layers)
        med = measure(cases, args.repeats, warmup=2)
        ratio = med["ferro"] / med["torch"] if "torch" in med else None
        records.append(
            emit(
                "bench_seq",
                f"gpt_step_L{layers}_H{heads}_E{embd}_T{block}_B{batch}",
                ferro_ms=med["ferro"] * 1e3,
                torch_ms=med.get("torch", float("nan")) * 1e3,
                ratio=ratio,
            )
        )
        rows.append(
            [
                "gpt step (AdamW)",
                med["ferro"] * 1e3,
                med.get("torch", float("nan")) * 1e3,
                ratio if ratio is not None else "-",
                "<= 1.2",
            ]
        )
    else:
        print("# gpt step: skipped (this ferro has no nn.LayerNorm)")
    table(rows, ["case", "ferro ms", "torch ms", "ferro/torch", "goal"])

    if not args.no_siblings:
        for name in ("bench_norm", "bench_rnn"):
            _run_sibling(name)
    return records


if __name__ == "__main__":
    main()
