"""Train an MLP on scikit-learn's bundled digits data set (8x8 images, 10 classes; no download).

    python -m ferro.examples.digits [--epochs 30] [--batch-size 32] [--lr 0.1] [--plot digits.png]

Shows a tqdm progress bar per epoch, prints the test accuracy, and saves a matplotlib plot of the
loss and accuracy curves. Runs in a few seconds on 2 cores.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import ferro


def load_digits_split(seed: int = 0, test_fraction: float = 0.2):
    """Digits as float32 features in [0, 1] and int labels, split into train and test."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:  # pragma: no cover - depends on the extra being installed
        sys.exit("this example needs scikit-learn: pip install 'ferro[examples]'")
    data = load_digits()
    x = (data.data / 16.0).astype(np.float32)
    y = data.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(len(x) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def init_params(sizes: list[int]) -> list[ferro.Tensor]:
    """Weights with Glorot-uniform scale and zero biases, drawn from ferro's generator."""
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        bound = float(np.sqrt(6.0 / (fan_in + fan_out)))
        w = (ferro.rand(fan_in, fan_out) * (2 * bound) - bound).detach().requires_grad_()
        b = ferro.zeros(fan_out, requires_grad=True)
        params += [w, b]
    return params


def forward(params: list[ferro.Tensor], x: ferro.Tensor) -> ferro.Tensor:
    h = x
    n_layers = len(params) // 2
    for i in range(n_layers):
        h = h @ params[2 * i] + params[2 * i + 1]
        if i < n_layers - 1:
            h = ferro.tanh(h)
    return h


def cross_entropy(logits: ferro.Tensor, onehot: ferro.Tensor) -> ferro.Tensor:
    """Mean softmax cross-entropy. Shifting by the (constant) row max keeps exp() finite and
    leaves the gradient unchanged."""
    shift = ferro.from_numpy(logits.detach().numpy().max(axis=1, keepdims=True))
    z = logits - shift
    log_probs = z - ferro.log(ferro.exp(z).sum(axis=1, keepdims=True))
    return -(onehot * log_probs).sum() / logits.shape[0]


def accuracy(params, x: np.ndarray, y: np.ndarray) -> float:
    with ferro.no_grad():
        logits = forward(params, ferro.from_numpy(x))
    return float((logits.numpy().argmax(axis=1) == y).mean())


def train(
    epochs: int = 30,
    batch_size: int = 32,
    lr: float = 0.1,
    hidden: int = 128,
    seed: int = 0,
    progress: bool = True,
) -> dict:
    """Train with minibatch SGD and momentum; returns the per-epoch history."""
    from tqdm import tqdm

    ferro.manual_seed(seed)
    x_tr, y_tr, x_te, y_te = load_digits_split(seed)
    onehot_tr = np.eye(10, dtype=np.float32)[y_tr]
    params = init_params([64, hidden, 10])
    velocity = [np.zeros_like(p.data) for p in params]
    history = {"loss": [], "train_acc": [], "test_acc": []}
    gen = ferro.random.default_generator()
    for epoch in range(epochs):
        order = gen.permutation(len(x_tr))
        total, batches = 0.0, range(0, len(order), batch_size)
        bar = tqdm(
            batches,
            desc=f"epoch {epoch + 1:2d}/{epochs}",
            leave=False,
            disable=not progress,
            unit="batch",
        )
        for start in bar:
            idx = order[start : start + batch_size]
            xb = ferro.from_numpy(x_tr[idx])
            yb = ferro.from_numpy(onehot_tr[idx])
            loss = cross_entropy(forward(params, xb), yb)
            for p in params:
                p.grad = None
            loss.backward()
            with ferro.no_grad():
                for p, v in zip(params, velocity, strict=True):
                    v *= 0.9
                    v += p.grad.data
                    p.data -= lr * v
            total += loss.item() * len(idx)
            bar.set_postfix(loss=f"{loss.item():.3f}")
        history["loss"].append(total / len(x_tr))
        history["train_acc"].append(accuracy(params, x_tr, y_tr))
        history["test_acc"].append(accuracy(params, x_te, y_te))
        if progress:
            tqdm.write(
                f"epoch {epoch + 1:2d}: loss {history['loss'][-1]:.4f}  "
                f"train acc {history['train_acc'][-1]:.3f}  "
                f"test acc {history['test_acc'][-1]:.3f}"
            )
    return history


def plot(history: dict, path: str) -> None:
    """Save loss and accuracy curves to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = range(1, len(history["loss"]) + 1)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.5))
    ax1.plot(epochs, history["loss"])
    ax1.set(title="training loss", xlabel="epoch", ylabel="cross-entropy")
    ax2.plot(epochs, history["train_acc"], label="train")
    ax2.plot(epochs, history["test_acc"], label="test")
    ax2.set(title="accuracy", xlabel="epoch", ylim=(0.8, 1.0))
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> float:
    ap = argparse.ArgumentParser(description="Train an MLP on the digits data set with ferro.")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plot", default="digits_training.png", help="where to save the curves")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    history = train(
        args.epochs, args.batch_size, args.lr, args.hidden, args.seed, progress=not args.quiet
    )
    plot(history, args.plot)
    acc = history["test_acc"][-1]
    print(f"test accuracy: {acc:.4f}  ({time.perf_counter() - t0:.1f} s; curves in {args.plot})")
    return acc


if __name__ == "__main__":
    main()
