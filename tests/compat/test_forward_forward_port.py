# ruff: noqa: E501  (the ported program keeps its upstream line lengths)
"""pytorch/examples' mnist_forward_forward/main.py (Hinton's forward-forward training), run with
only its imports changed, on scikit-learn's 8x8 digits instead of torchvision's MNIST:
``torch.xpu.is_available()`` and ``torch.backends.mps.is_available()`` device probes, an
``nn.Linear`` subclass passing ``bias, device, dtype`` positionally, the label overlay
``x_[range(n), y] = x.max()`` (a ``range`` and a tensor as one advanced index, a 0-d tensor as
the value), ``x.norm(2, 1, keepdim=True)``, Python's ``sum`` over a list of tensors,
``torch.tensor(list)[torch.randint(n, size=(1,))].item()``, and one Adam per layer.
"""

import numpy as np
import pytest

PROGRAM = """
def get_y_neg(y):
    y_neg = y.clone()
    for idx, y_samp in enumerate(y):
        allowed_indices = list(range(10))
        allowed_indices.remove(y_samp.item())
        y_neg[idx] = torch.tensor(allowed_indices)[
            torch.randint(len(allowed_indices), size=(1,))
        ].item()
    return y_neg.to(device)


def overlay_y_on_x(x, y, classes=10):
    x_ = x.clone()
    x_[:, :classes] *= 0.0
    x_[range(x.shape[0]), y] = x.max()
    return x_


class Net(torch.nn.Module):
    def __init__(self, dims):

        super().__init__()
        self.layers = []
        for d in range(len(dims) - 1):
            self.layers = self.layers + [Layer(dims[d], dims[d + 1]).to(device)]

    def predict(self, x):
        goodness_per_label = []
        for label in range(10):
            h = overlay_y_on_x(x, label)
            goodness = []
            for layer in self.layers:
                h = layer(h)
                goodness = goodness + [h.pow(2).mean(1)]
            goodness_per_label += [sum(goodness).unsqueeze(1)]
        goodness_per_label = torch.cat(goodness_per_label, 1)
        return goodness_per_label.argmax(1)

    def train(self, x_pos, x_neg):
        h_pos, h_neg = x_pos, x_neg
        for i, layer in enumerate(self.layers):
            h_pos, h_neg = layer.train(h_pos, h_neg)


class Layer(nn.Linear):
    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__(in_features, out_features, bias, device, dtype)
        self.relu = torch.nn.ReLU()
        self.opt = Adam(self.parameters(), lr=args.lr)
        self.threshold = args.threshold
        self.num_epochs = args.epochs

    def forward(self, x):
        x_direction = x / (x.norm(2, 1, keepdim=True) + 1e-4)
        return self.relu(torch.mm(x_direction, self.weight.T) + self.bias.unsqueeze(0))

    def train(self, x_pos, x_neg):
        for i in range(self.num_epochs):
            g_pos = self.forward(x_pos).pow(2).mean(1)
            g_neg = self.forward(x_neg).pow(2).mean(1)
            loss = torch.log1p(
                torch.exp(
                    torch.cat([-g_pos + self.threshold, g_neg - self.threshold])
                )
            ).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            losses.append(loss.item())
        return self.forward(x_pos).detach(), self.forward(x_neg).detach()


use_cuda = not args.no_cuda and torch.cuda.is_available()
use_xpu = not args.no_xpu and torch.xpu.is_available()
use_mps = not args.no_mps and torch.backends.mps.is_available()
if use_cuda:
    device = torch.device("cuda")
elif use_xpu:
    device = torch.device("xpu")
elif use_mps:
    device = torch.device("mps")
else:
    device = torch.device("cpu")

torch.manual_seed(args.seed)
net = Net([64, 200, 200])
if INIT is not None:
    for layer, (w, b) in zip(net.layers, INIT):
        layer.weight.data = torch.tensor(w)
        layer.bias.data = torch.tensor(b)
x, y = torch.tensor(X_TRAIN), torch.tensor(Y_TRAIN)
x_pos = overlay_y_on_x(x, y)
y_neg = get_y_neg(y) if Y_NEG is None else torch.tensor(Y_NEG)
x_neg = overlay_y_on_x(x, y_neg)
net.train(x_pos, x_neg)
train_error = 1.0 - net.predict(x).eq(y).float().mean().item()
test_error = 1.0 - net.predict(torch.tensor(X_TEST)).eq(torch.tensor(Y_TEST)).float().mean().item()
weights = [(layer.weight.detach().numpy().copy(), layer.bias.detach().numpy().copy()) for layer in net.layers]
"""


class Args:
    epochs, lr, threshold, seed = 150, 0.03, 2, 1
    no_cuda = no_xpu = no_mps = False


def _run(lib, init=None, y_neg=None):
    datasets = pytest.importorskip("sklearn.datasets")
    x, y = datasets.load_digits(return_X_y=True)
    x = ((x / 16.0 - 0.3) / 0.35).astype(np.float32)
    imports = f"import {lib} as torch\nimport {lib}.nn as nn\nfrom {lib}.optim import Adam\n"
    env = {"args": Args, "INIT": init, "Y_NEG": y_neg, "losses": []}
    env.update(X_TRAIN=x[:1400], Y_TRAIN=y[:1400], X_TEST=x[1400:], Y_TEST=y[1400:])
    exec(compile(imports + PROGRAM, "forward_forward_port", "exec"), env)
    return env


def test_forward_forward_learns_digits_on_ferro():
    env = _run("ferro")
    assert str(env["device"]) == "cpu"
    assert env["losses"][-1] < env["losses"][0]
    assert env["train_error"] < 0.5 and env["test_error"] < 0.5  # chance: 0.9


@pytest.mark.torch
def test_forward_forward_matches_torch_from_the_same_weights():
    pytest.importorskip("torch")
    Args.epochs = 10
    try:
        Args.epochs = 0
        start = _run("ferro")  # untrained weights, and the negative labels it drew
        init, y_neg = start["weights"], start["y_neg"].numpy()
        Args.epochs = 10
        ours = _run("ferro", init, y_neg)
        theirs = _run("torch", init, y_neg)
    finally:
        Args.epochs = 150
    np.testing.assert_allclose(ours["losses"], theirs["losses"], rtol=1e-4)
    for (w, b), (tw, tb) in zip(ours["weights"], theirs["weights"], strict=True):
        np.testing.assert_allclose(w, tw, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(b, tb, rtol=1e-4, atol=1e-5)
