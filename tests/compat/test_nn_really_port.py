# ruff: noqa: E501  (the ported program keeps its upstream line lengths)
"""PyTorch's "What is torch.nn really?" tutorial, run as one source with only its import lines
changed, on scikit-learn's 8x8 digits upscaled and padded to 28x28 and flattened to 784 floats in
[0, 1] (the layout of its pickled MNIST) instead of the download. Each of its refactoring steps:
NumPy arrays through ``map(torch.tensor, ...)``; a logistic regression from scratch
(``torch.randn(...) / math.sqrt(784)`` then ``requires_grad_()``, a hand-written
``log_softmax`` and ``nll`` indexing ``input[range(n), target]``, updates ``weights -=
weights.grad * lr`` and ``grad.zero_()`` under ``torch.no_grad()``); ``F.cross_entropy``;
``Mnist_Logistic`` with ``nn.Parameter`` and ``model.zero_grad()``, then ``nn.Linear``;
``optim.SGD``; ``TensorDataset`` and ``DataLoader``; ``get_data``/``loss_batch``/``fit``
with ``model.train()``/``model.eval()`` and ``zip(*[...])`` of per-batch ``(loss.item(),
len(xb))``, averaged with ``np.multiply``; ``Mnist_CNN`` (``xb.view(-1, 1, 28, 28)``,
``F.avg_pool2d(xb, 4)``, ``xb.view(-1, xb.size(1))``) with momentum; a ``Lambda`` module in an
``nn.Sequential`` with ``nn.AvgPool2d(4)``; ``WrappedDataLoader`` and ``nn.AdaptiveAvgPool2d(1)``
on ``torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")``. Fewer
samples and epochs; the from-scratch weights can be given by the harness (a marked line), for
the step-by-step comparison with PyTorch.
"""

import numpy as np
import pytest

sklearn_datasets = pytest.importorskip("sklearn.datasets")

TORCH_IMPORTS = """\
import torch
import torch.nn.functional as F
from torch import nn
from torch import optim
from torch.utils.data import TensorDataset
from torch.utils.data import DataLoader
"""

FERRO_IMPORTS = """\
import ferro as torch
import ferro.nn.functional as F
from ferro import nn
from ferro import optim
from ferro.utils.data import TensorDataset
from ferro.utils.data import DataLoader
"""

PROGRAM = """
import math
import numpy as np

x_train, y_train, x_valid, y_valid = map(
    torch.tensor, (x_train, y_train, x_valid, y_valid)
)
n, c = x_train.shape
print(x_train.shape, y_train.min(), y_train.max())

# --- Neural net from scratch (no torch.nn)
weights = torch.randn(784, 10) / math.sqrt(784)
if INIT is not None:  # harness: the same start for both libraries
    weights = torch.from_numpy(INIT.copy())
weights.requires_grad_()
bias = torch.zeros(10, requires_grad=True)

def log_softmax(x):
    return x - x.exp().sum(-1).log().unsqueeze(-1)

def model(xb):
    return log_softmax(xb @ weights + bias)

bs = 64  # batch size

xb = x_train[0:bs]  # a mini-batch from x
preds = model(xb)  # predictions
print(preds[0], preds.shape)

def nll(input, target):
    return -input[range(target.shape[0]), target].mean()

loss_func = nll

yb = y_train[0:bs]
SCRATCH = [loss_func(preds, yb).item()]

def accuracy(out, yb):
    preds = torch.argmax(out, dim=1)
    return (preds == yb).float().mean()

lr = 0.5  # learning rate
epochs = EPOCHS  # how many epochs to train for

for epoch in range(epochs):
    for i in range((n - 1) // bs + 1):
        start_i = i * bs
        end_i = start_i + bs
        xb = x_train[start_i:end_i]
        yb = y_train[start_i:end_i]
        pred = model(xb)
        loss = loss_func(pred, yb)

        loss.backward()
        with torch.no_grad():
            weights -= weights.grad * lr
            bias -= bias.grad * lr
            weights.grad.zero_()
            bias.grad.zero_()
        SCRATCH.append(loss.item())

xb, yb = x_train[0:bs], y_train[0:bs]
SCRATCH_FINAL = (loss_func(model(xb), yb).item(), accuracy(model(xb), yb).item())

# --- Using torch.nn.functional
loss_func = F.cross_entropy

def model(xb):
    return xb @ weights + bias

# the same loss and accuracy as before
CROSS_ENTROPY = (loss_func(model(xb), yb).item(), accuracy(model(xb), yb).item())

# --- Refactor using nn.Module
class Mnist_Logistic(nn.Module):
    def __init__(self):
        super().__init__()
        self.weights = nn.Parameter(torch.randn(784, 10) / math.sqrt(784))
        self.bias = nn.Parameter(torch.zeros(10))

    def forward(self, xb):
        return xb @ self.weights + self.bias

model = Mnist_Logistic()
MODULE = [loss_func(model(xb), yb).item()]

def fit():
    for epoch in range(epochs):
        for i in range((n - 1) // bs + 1):
            start_i = i * bs
            end_i = start_i + bs
            xb = x_train[start_i:end_i]
            yb = y_train[start_i:end_i]
            pred = model(xb)
            loss = loss_func(pred, yb)

            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= p.grad * lr
                model.zero_grad()

fit()
MODULE.append(loss_func(model(xb), yb).item())

# --- Refactor using nn.Linear
class Mnist_Logistic(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(784, 10)

    def forward(self, xb):
        return self.lin(xb)

model = Mnist_Logistic()
LINEAR = [loss_func(model(xb), yb).item()]
fit()
LINEAR.append(loss_func(model(xb), yb).item())

# --- Refactor using torch.optim
def get_model():
    model = Mnist_Logistic()
    return model, optim.SGD(model.parameters(), lr=lr)

model, opt = get_model()
OPTIM = [loss_func(model(xb), yb).item()]

for epoch in range(epochs):
    for i in range((n - 1) // bs + 1):
        start_i = i * bs
        end_i = start_i + bs
        xb = x_train[start_i:end_i]
        yb = y_train[start_i:end_i]
        pred = model(xb)
        loss = loss_func(pred, yb)

        loss.backward()
        opt.step()
        opt.zero_grad()

OPTIM.append(loss_func(model(xb), yb).item())

# --- Refactor using Dataset and DataLoader
train_ds = TensorDataset(x_train, y_train)
train_dl = DataLoader(train_ds, batch_size=bs)

model, opt = get_model()
for epoch in range(epochs):
    for xb, yb in train_dl:
        pred = model(xb)
        loss = loss_func(pred, yb)

        loss.backward()
        opt.step()
        opt.zero_grad()

DATALOADER = loss_func(model(xb), yb).item()

# --- Add validation
valid_ds = TensorDataset(x_valid, y_valid)

def loss_batch(model, loss_func, xb, yb, opt=None):
    loss = loss_func(model(xb), yb)

    if opt is not None:
        loss.backward()
        opt.step()
        opt.zero_grad()

    return loss.item(), len(xb)

def fit(epochs, model, loss_func, opt, train_dl, valid_dl):
    for epoch in range(epochs):
        model.train()
        for xb, yb in train_dl:
            loss_batch(model, loss_func, xb, yb, opt)

        model.eval()
        with torch.no_grad():
            losses, nums = zip(
                *[loss_batch(model, loss_func, xb, yb) for xb, yb in valid_dl]
            )
        val_loss = np.sum(np.multiply(losses, nums)) / np.sum(nums)

        print(epoch, val_loss)
        VAL_LOSSES[-1].append(val_loss)

def get_data(train_ds, valid_ds, bs):
    return (
        DataLoader(train_ds, batch_size=bs, shuffle=True),
        DataLoader(valid_ds, batch_size=bs * 2),
    )

VAL_LOSSES = [[]]
train_dl, valid_dl = get_data(train_ds, valid_ds, bs)
model, opt = get_model()
fit(epochs, model, loss_func, opt, train_dl, valid_dl)

# --- Switch to CNN
class Mnist_CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, kernel_size=3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(16, 16, kernel_size=3, stride=2, padding=1)
        self.conv3 = nn.Conv2d(16, 10, kernel_size=3, stride=2, padding=1)

    def forward(self, xb):
        xb = xb.view(-1, 1, 28, 28)
        xb = F.relu(self.conv1(xb))
        xb = F.relu(self.conv2(xb))
        xb = F.relu(self.conv3(xb))
        xb = F.avg_pool2d(xb, 4)
        return xb.view(-1, xb.size(1))

lr = 0.1

VAL_LOSSES.append([])
model = Mnist_CNN()
opt = optim.SGD(model.parameters(), lr=lr, momentum=0.9)
fit(epochs, model, loss_func, opt, train_dl, valid_dl)

# --- Using nn.Sequential
class Lambda(nn.Module):
    def __init__(self, func):
        super().__init__()
        self.func = func

    def forward(self, x):
        return self.func(x)


def preprocess(x):
    return x.view(-1, 1, 28, 28)

model = nn.Sequential(
    Lambda(preprocess),
    nn.Conv2d(1, 16, kernel_size=3, stride=2, padding=1),
    nn.ReLU(),
    nn.Conv2d(16, 16, kernel_size=3, stride=2, padding=1),
    nn.ReLU(),
    nn.Conv2d(16, 10, kernel_size=3, stride=2, padding=1),
    nn.ReLU(),
    nn.AvgPool2d(4),
    Lambda(lambda x: x.view(x.size(0), -1)),
)

VAL_LOSSES.append([])
opt = optim.SGD(model.parameters(), lr=lr, momentum=0.9)
fit(epochs, model, loss_func, opt, train_dl, valid_dl)

# --- Wrapping DataLoader
def preprocess(x, y):
    return x.view(-1, 1, 28, 28), y


class WrappedDataLoader:
    def __init__(self, dl, func):
        self.dl = dl
        self.func = func

    def __len__(self):
        return len(self.dl)

    def __iter__(self):
        for b in self.dl:
            yield (self.func(*b))

train_dl, valid_dl = get_data(train_ds, valid_ds, bs)
train_dl = WrappedDataLoader(train_dl, preprocess)
valid_dl = WrappedDataLoader(valid_dl, preprocess)

model = nn.Sequential(
    nn.Conv2d(1, 16, kernel_size=3, stride=2, padding=1),
    nn.ReLU(),
    nn.Conv2d(16, 16, kernel_size=3, stride=2, padding=1),
    nn.ReLU(),
    nn.Conv2d(16, 10, kernel_size=3, stride=2, padding=1),
    nn.ReLU(),
    nn.AdaptiveAvgPool2d(1),
    Lambda(lambda x: x.view(x.size(0), -1)),
)

VAL_LOSSES.append([])
opt = optim.SGD(model.parameters(), lr=lr, momentum=0.9)
fit(epochs, model, loss_func, opt, train_dl, valid_dl)

# --- Using your GPU
dev = torch.device(
    "cuda") if torch.cuda.is_available() else torch.device("cpu")

def preprocess(x, y):
    return x.view(-1, 1, 28, 28).to(dev), y.to(dev)

train_dl, valid_dl = get_data(train_ds, valid_ds, bs)
train_dl = WrappedDataLoader(train_dl, preprocess)
valid_dl = WrappedDataLoader(valid_dl, preprocess)

model.to(dev)
opt = optim.SGD(model.parameters(), lr=lr, momentum=0.9)
VAL_LOSSES.append([])
fit(epochs, model, loss_func, opt, train_dl, valid_dl)
"""


def _data(n_train=1024, n_valid=256):
    digits = sklearn_datasets.load_digits()
    x = (digits.images / 16.0).astype(np.float32)
    x = np.pad(np.kron(x, np.ones((3, 3), np.float32)), ((0, 0), (2, 2), (2, 2)))
    x = x.reshape(len(x), 784)
    y = digits.target.astype(np.int64)
    return x[:n_train], y[:n_train], x[n_train : n_train + n_valid], y[n_train : n_train + n_valid]


def _run(imports, n_train=1024, **params):
    x_tr, y_tr, x_va, y_va = _data(n_train)
    env = {"x_train": x_tr, "y_train": y_tr, "x_valid": x_va, "y_valid": y_va, "INIT": None}
    env.update({"EPOCHS": 3, **params})
    exec(compile(imports + PROGRAM, "nn_really_port", "exec"), env)
    return env


def test_every_refactoring_step_learns():
    env = _run(FERRO_IMPORTS)
    scratch = env["SCRATCH"]
    assert len(scratch) == 1 + 3 * 16 and scratch[-1] < 0.5 * scratch[0]
    final_loss, final_acc = env["SCRATCH_FINAL"]
    # F.cross_entropy of the logits equals the hand-written nll of log_softmax
    assert env["CROSS_ENTROPY"] == pytest.approx((final_loss, final_acc), rel=1e-5)
    assert final_acc > 0.8
    for name in ("MODULE", "LINEAR", "OPTIM"):
        before, after = env[name]
        assert after < 0.5 * before, name
    assert env["DATALOADER"] < 1.0
    logistic, cnn, sequential, wrapped, gpu = env["VAL_LOSSES"]
    assert len(logistic) == 3 and logistic[-1] < 0.5
    # the CNNs (their last ReLU before the pooling) leave chance, log 10, slowly: each falls,
    # and the last step, which trains the previous model on, goes further
    for losses in (cnn, sequential, wrapped):
        assert len(losses) == 3 and losses[-1] < losses[0] < 2.31
    assert gpu[-1] < wrapped[-1] - 0.03


@pytest.mark.torch
def test_the_scratch_model_matches_torch():
    pytest.importorskip("torch")
    init = (np.random.default_rng(0).standard_normal((784, 10)) / np.sqrt(784)).astype(np.float32)
    ours = _run(FERRO_IMPORTS, n_train=256, EPOCHS=2, INIT=init)
    theirs = _run(TORCH_IMPORTS, n_train=256, EPOCHS=2, INIT=init)
    # float32 SGD at lr 0.5 from the same weights over the same batches (no shuffling)
    np.testing.assert_allclose(ours["SCRATCH"], theirs["SCRATCH"], rtol=1e-4)
    np.testing.assert_allclose(ours["SCRATCH_FINAL"], theirs["SCRATCH_FINAL"], rtol=1e-4)
    np.testing.assert_allclose(ours["CROSS_ENTROPY"], theirs["CROSS_ENTROPY"], rtol=1e-4)
