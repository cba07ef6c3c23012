"""Train a small character-level language model on a generated text (no download).

    python -P -m ferro.examples.charlm [--model transformer|lstm] [--steps 400] [--plot PNG]

(``-P``: from a checkout of ferro, keep its unbuilt source tree off ``sys.path``.)

The text comes from a small random grammar (nursery-rhyme sentences over a few dozen words),
so it has structure a model can learn at every scale: spelling inside words, which words follow
which, punctuation. The default model is a GPT-style Transformer built from ``ferro.nn``
(token and position ``Embedding``, pre-norm ``TransformerEncoderLayer`` blocks run with a
causal mask, a final ``LayerNorm`` and a ``Linear`` head); ``--model lstm`` trains an
``nn.LSTM`` instead. Shows a tqdm progress bar, prints the unigram entropy of the text next to
the final loss (both in nats per character: a model that learned nothing but the letter
frequencies scores the entropy), saves a matplotlib plot of the loss and prints a sampled
text. Runs in well under two minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

import ferro

_SUBJECTS = ["the cat", "the dog", "a little bird", "the old man", "my sister", "the moon"]
_VERBS = ["sees", "likes", "follows", "sings to", "waits for", "dreams of"]
_OBJECTS = ["the river", "a red ball", "the green hill", "her friend", "the night", "the sun"]
_ENDINGS = [".", ".", "!", " again.", " every day.", " in the rain."]


def make_text(n_chars: int = 60_000, seed: int = 0) -> str:
    """Sentences from the grammar ``subject verb object ending``, one per line."""
    rng = np.random.default_rng(seed)
    lines, size = [], 0
    while size < n_chars:
        parts = [rng.choice(w) for w in (_SUBJECTS, _VERBS, _OBJECTS)]
        line = " ".join(str(p) for p in parts) + str(rng.choice(_ENDINGS))
        if rng.random() < 0.3:  # now and then the line continues
            line += " and " + str(rng.choice(_SUBJECTS)) + " " + str(rng.choice(_VERBS)) + "."
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines) + "\n"


def unigram_entropy(ids: np.ndarray, vocab: int) -> float:
    """The entropy of the character frequencies, in nats: the loss of a model that knows only
    how often each character occurs."""
    p = np.bincount(ids, minlength=vocab) / len(ids)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


class TransformerLM(ferro.nn.Module):
    """A GPT-style decoder: token + position embeddings, pre-norm causal self-attention
    blocks, a final LayerNorm and a linear head."""

    def __init__(self, vocab: int, block: int, embd: int = 64, heads: int = 4, layers: int = 2):
        super().__init__()
        nn = ferro.nn
        self.block = block
        self.tok = nn.Embedding(vocab, embd)
        self.pos = nn.Embedding(block, embd)
        layer = nn.TransformerEncoderLayer(
            embd, heads, 4 * embd, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, layers)
        self.norm = nn.LayerNorm(embd)
        self.head = nn.Linear(embd, vocab)

    def forward(self, idx):
        t = idx.shape[1]
        pos = ferro.arange(t)
        x = self.tok(idx) + self.pos(pos)
        mask = ferro.nn.Transformer.generate_square_subsequent_mask(t)
        x = self.blocks(x, mask=mask, is_causal=True)
        return self.head(self.norm(x))


class LSTMLM(ferro.nn.Module):
    """Embedding -> LSTM -> linear head."""

    def __init__(self, vocab: int, block: int, embd: int = 64, hidden: int = 256):
        super().__init__()
        nn = ferro.nn
        self.block = block
        self.tok = nn.Embedding(vocab, embd)
        self.lstm = nn.LSTM(embd, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, idx):
        return self.head(self.lstm(self.tok(idx))[0])


def build_model(kind: str, vocab: int, block: int):
    if kind == "lstm":
        if not hasattr(ferro.nn, "LSTM"):
            sys.exit("--model lstm needs ferro.nn.LSTM, which this build of ferro lacks")
        return LSTMLM(vocab, block)
    return TransformerLM(vocab, block)


def sample(model, stoi: dict, itos: list, length: int = 200, temperature: float = 0.8) -> str:
    """Generate ``length`` characters after a newline, one at a time."""
    rng = np.random.default_rng(0)
    ids = [stoi["\n"]]
    model.eval()
    with ferro.no_grad():
        for _ in range(length):
            ctx = ferro.tensor(np.array([ids[-model.block :]]))
            logits = model(ctx)[0, -1].numpy().astype(np.float64) / temperature
            p = np.exp(logits - logits.max())
            ids.append(int(rng.choice(len(p), p=p / p.sum())))
    model.train()
    return "".join(itos[i] for i in ids[1:])


def train(
    kind: str = "transformer",
    steps: int = 400,
    batch_size: int = 32,
    block: int = 32,
    lr: float = 3e-3,
    seed: int = 0,
    progress: bool = True,
) -> dict:
    """Train on random windows of the text with AdamW; returns the history and the model."""
    from tqdm import tqdm

    ferro.manual_seed(seed)
    text = make_text(seed=seed)
    itos = sorted(set(text))
    stoi = {c: i for i, c in enumerate(itos)}
    data = np.array([stoi[c] for c in text], dtype=np.int64)
    model = build_model(kind, len(itos), block)
    opt = ferro.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    rng = np.random.default_rng(seed)
    history = {"loss": [], "entropy": unigram_entropy(data, len(itos))}
    bar = tqdm(range(steps), disable=not progress, unit="step", desc=kind)
    for step in bar:
        starts = rng.integers(0, len(data) - block - 1, batch_size)
        window = data[starts[:, None] + np.arange(block + 1)]
        x, y = ferro.tensor(window[:, :-1]), ferro.tensor(window[:, 1:])
        logits = model(x)
        loss = ferro.nn.functional.cross_entropy(logits.reshape(-1, len(itos)), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        # cosine decay to a tenth of the rate
        for group in opt.param_groups:
            group["lr"] = lr * (0.55 + 0.45 * math.cos(math.pi * (step + 1) / steps))
        history["loss"].append(loss.item())
        if step % 10 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
    history.update(model=model, stoi=stoi, itos=itos)
    return history


def smoothed(values, k: int = 20) -> float:
    return float(np.mean(values[-k:]))


def plot(history: dict, path: str) -> None:
    """Save the loss curve (and the unigram entropy for reference) to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(history["loss"], label="training loss")
    ax.axhline(history["entropy"], color="gray", linestyle="--", label="unigram entropy")
    ax.set(xlabel="step", ylabel="nats / character", title="character-level language model")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description="Train a character-level language model with ferro.")
    ap.add_argument("--model", choices=["transformer", "lstm"], default="transformer")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--block", type=int, default=32, help="characters of context")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plot", default="charlm_training.png", help="where to save the curve")
    ap.add_argument("--sample", type=int, default=300, help="characters to generate at the end")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    history = train(
        args.model,
        args.steps,
        args.batch_size,
        args.block,
        args.lr,
        args.seed,
        progress=not args.quiet,
    )
    plot(history, args.plot)
    final = smoothed(history["loss"])
    print(
        f"unigram entropy of the text: {history['entropy']:.3f} nats/char; final loss "
        f"(mean of the last 20 steps): {final:.3f} nats/char "
        f"({time.perf_counter() - t0:.1f} s; curve in {args.plot})"
    )
    if args.sample:
        print("sampled text:")
        print(sample(history["model"], history["stoi"], history["itos"], args.sample))
    history["final"] = final
    return history


if __name__ == "__main__":
    main()
