"""A char-level MLP language model in the style of karpathy's makemore (a names Dataset, a
DataLoader over a RandomSampler, nn.Embedding + MLP + cross_entropy, AdamW, sampling with
multinomial), run as one source with only its import lines changed: ``import torch`` and
``import ferro as torch``. The names are generated, so nothing is downloaded.

The harness gives both runs the same initial weights (a ``state_dict`` built from NumPy). With a
full batch drawn without replacement the loss does not depend on the sampler's order, so the two
libraries' losses can be compared step by step although their generators differ.
"""

import numpy as np
import pytest

TORCH_IMPORTS = """\
import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset, RandomSampler
"""

FERRO_IMPORTS = """\
import ferro as torch
import ferro.nn as nn
from ferro.nn import functional as F
from ferro.utils.data import DataLoader, Dataset, RandomSampler
"""

PROGRAM = """
class CharDataset(Dataset):
    def __init__(self, words, block_size):
        chars = sorted(set("".join(words)))
        self.stoi = {ch: i + 1 for i, ch in enumerate(chars)}
        self.stoi["."] = 0
        self.itos = {i: s for s, i in self.stoi.items()}
        xs, ys = [], []
        for w in words:
            context = [0] * block_size
            for ch in w + ".":
                ix = self.stoi[ch]
                xs.append(context)
                ys.append(ix)
                context = context[1:] + [ix]
        self.X = torch.tensor(xs)
        self.Y = torch.tensor(ys)

    def get_vocab_size(self):
        return len(self.stoi)

    def __len__(self):
        return len(self.Y)

    def __getitem__(self, idx):
        return self.X[idx], self.Y[idx]


class MLP(nn.Module):
    def __init__(self, vocab_size, block_size, n_embd, n_hidden):
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(block_size * n_embd, n_hidden),
            nn.Tanh(),
            nn.Linear(n_hidden, vocab_size),
        )

    def forward(self, idx, targets=None):
        emb = self.wte(idx)
        x = emb.view(emb.size(0), -1)
        logits = self.mlp(x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits, targets, ignore_index=-1)
        return logits, loss


@torch.no_grad()
def generate(model, dataset, num, generator):
    names = []
    for _ in range(num):
        context = [0] * model.block_size
        out = []
        while len(out) < 20:
            logits, _ = model(torch.tensor([context]))
            probs = F.softmax(logits, dim=-1)
            ix = torch.multinomial(probs, num_samples=1, generator=generator).item()
            if ix == 0:
                break
            context = context[1:] + [ix]
            out.append(dataset.itos[ix])
        names.append("".join(out))
    return names


@torch.no_grad()
def evaluate(model, dataset):
    model.eval()
    X, Y = dataset[:]
    _, loss = model(X, Y)
    model.train()
    return loss.item()


torch.manual_seed(SEED)
dataset = CharDataset(WORDS, BLOCK_SIZE)
model = MLP(dataset.get_vocab_size(), BLOCK_SIZE, N_EMBD, N_HIDDEN)
if INIT is not None:
    model.load_state_dict({k: torch.tensor(v) for k, v in INIT.items()})
g = torch.Generator().manual_seed(SEED)
sampler = RandomSampler(dataset, replacement=REPLACEMENT, num_samples=BATCH * STEPS, generator=g)
loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler, drop_last=True)
optimizer = torch.optim.AdamW(
    model.parameters(), lr=LR, weight_decay=0.01, betas=(0.9, 0.99), eps=1e-8
)
losses = []
for X, Y in loader:
    logits, loss = model(X, Y)
    model.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
final_loss = evaluate(model, dataset)
samples = generate(model, dataset, 5, g)
state = {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}
"""

SYLLABLES = ["an", "na", "el", "la", "mi", "ra", "jo", "ka", "ri", "sa", "th", "em", "ly", "o"]


def _words(n=120):
    rng = np.random.default_rng(7)
    return ["".join(rng.choice(SYLLABLES, size=rng.integers(1, 4))) for _ in range(n)]


BLOCK_SIZE, N_EMBD, N_HIDDEN = 3, 8, 32


def _init(words):
    vocab = len(set("".join(words))) + 1
    rng = np.random.default_rng(0)

    def w(*shape, scale):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    return {
        "wte.weight": w(vocab, N_EMBD, scale=1.0),
        "mlp.0.weight": w(N_HIDDEN, BLOCK_SIZE * N_EMBD, scale=0.2),
        "mlp.0.bias": w(N_HIDDEN, scale=0.1),
        "mlp.2.weight": w(vocab, N_HIDDEN, scale=0.2),
        "mlp.2.bias": w(vocab, scale=0.1),
    }


def _run(imports, **params):
    words = _words()
    env = {
        "WORDS": words,
        "BLOCK_SIZE": BLOCK_SIZE,
        "N_EMBD": N_EMBD,
        "N_HIDDEN": N_HIDDEN,
        "SEED": 1337,
        "LR": 5e-3,
        "INIT": _init(words),
        **params,
    }
    exec(compile(imports + PROGRAM, "makemore_port", "exec"), env)
    return env


def _dataset_size():
    return sum(len(w) + 1 for w in _words())


def test_makemore_runs_on_ferro_with_minibatches_and_learns():
    env = _run(FERRO_IMPORTS, BATCH=32, STEPS=150, REPLACEMENT=True)
    losses = env["losses"]
    assert len(losses) == 150
    assert np.mean(losses[-20:]) < np.mean(losses[:5]) - 0.5
    assert env["final_loss"] < losses[0]
    names = env["samples"]
    assert len(names) == 5 and all(set(n) <= set("".join(SYLLABLES)) for n in names)


@pytest.mark.torch
def test_makemore_matches_torch_from_the_same_weights():
    pytest.importorskip("torch")
    params = {"BATCH": _dataset_size(), "STEPS": 8, "REPLACEMENT": False}
    ours = _run(FERRO_IMPORTS, **params)
    theirs = _run(TORCH_IMPORTS, **params)
    np.testing.assert_allclose(ours["losses"], theirs["losses"], rtol=1e-4)
    np.testing.assert_allclose(ours["final_loss"], theirs["final_loss"], rtol=1e-4)
    for k, v in theirs["state"].items():
        np.testing.assert_allclose(ours["state"][k], v, rtol=1e-3, atol=1e-5)
