"""The variational autoencoder of pytorch/examples (vae/main.py), on scikit-learn's 8x8 digits
instead of MNIST, run as one source with only its import lines changed: ``import torch`` and
``import ferro as torch``.

The harness gives both runs the same initial weights; for the step-by-step comparison it also
gives both the same reparameterization noise (it replaces ``randn_like`` in each library by one
drawing from a shared NumPy stream: the source is untouched) and turns shuffling off, since the
two libraries' generators differ.
"""

import numpy as np
import pytest

sklearn_datasets = pytest.importorskip("sklearn.datasets")

TORCH_IMPORTS = """\
import torch
import torch.utils.data
from torch import nn, optim
from torch.nn import functional as F
"""

FERRO_IMPORTS = """\
import ferro as torch
import ferro.utils.data
from ferro import nn, optim
from ferro.nn import functional as F
"""

PROGRAM = """
class VAE(nn.Module):
    def __init__(self):
        super(VAE, self).__init__()
        self.fc1 = nn.Linear(64, 32)
        self.fc21 = nn.Linear(32, 4)
        self.fc22 = nn.Linear(32, 4)
        self.fc3 = nn.Linear(4, 32)
        self.fc4 = nn.Linear(32, 64)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 64))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 64), reduction="sum")
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return BCE + KLD


def train(epoch):
    model.train()
    train_loss = 0
    for batch_idx, (data, _) in enumerate(train_loader):
        data = data.to(device)
        optimizer.zero_grad()
        recon_batch, mu, logvar = model(data)
        loss = loss_function(recon_batch, data, mu, logvar)
        loss.backward()
        train_loss += loss.item()
        optimizer.step()
        losses.append(loss.item() / len(data))
    return train_loss / len(train_loader.dataset)


def test():
    model.eval()
    test_loss = 0
    with torch.no_grad():
        for data, _ in test_loader:
            data = data.to(device)
            recon_batch, mu, logvar = model(data)
            test_loss += loss_function(recon_batch, data, mu, logvar).item()
            sample = model.decode(torch.randn(8, 4).to(device)).cpu()
    return test_loss / len(test_loader.dataset), sample


torch.manual_seed(1)
use_accel = not NO_ACCEL and torch.accelerator.is_available()
device = torch.accelerator.current_accelerator() if use_accel else torch.device("cpu")
train_set = torch.utils.data.TensorDataset(torch.from_numpy(X_TRAIN), torch.from_numpy(Y_TRAIN))
test_set = torch.utils.data.TensorDataset(torch.from_numpy(X_TEST), torch.from_numpy(Y_TEST))
train_loader = torch.utils.data.DataLoader(train_set, batch_size=128, shuffle=SHUFFLE)
test_loader = torch.utils.data.DataLoader(test_set, batch_size=128, shuffle=False)
model = VAE().to(device)
if INIT is not None:
    model.load_state_dict({k: torch.tensor(v) for k, v in INIT.items()})
optimizer = optim.Adam(model.parameters(), lr=1e-3)
losses, epoch_losses = [], []
for epoch in range(1, EPOCHS + 1):
    epoch_losses.append(train(epoch))
    test_loss, sample = test()
state = {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}
"""

SHAPES = {
    "fc1.weight": (32, 64),
    "fc1.bias": (32,),
    "fc21.weight": (4, 32),
    "fc21.bias": (4,),
    "fc22.weight": (4, 32),
    "fc22.bias": (4,),
    "fc3.weight": (32, 4),
    "fc3.bias": (32,),
    "fc4.weight": (64, 32),
    "fc4.bias": (64,),
}


def _data():
    digits = sklearn_datasets.load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    return x[:1400], y[:1400], x[1400:], y[1400:]


def _init():
    rng = np.random.default_rng(3)
    return {
        k: (rng.uniform(-1, 1, s) / np.sqrt(s[-1] if len(s) > 1 else 32)).astype(np.float32)
        for k, s in SHAPES.items()
    }


def _run(imports, **params):
    x_tr, y_tr, x_te, y_te = _data()
    env = {
        "X_TRAIN": x_tr,
        "Y_TRAIN": y_tr,
        "X_TEST": x_te,
        "Y_TEST": y_te,
        "INIT": _init(),
        "NO_ACCEL": True,
        **params,
    }
    exec(compile(imports + PROGRAM, "vae_port", "exec"), env)
    return env


def test_the_vae_trains_on_ferro():
    env = _run(FERRO_IMPORTS, EPOCHS=3, SHUFFLE=True)
    losses = env["losses"]
    assert len(losses) == 3 * 11
    assert np.mean(losses[-5:]) < 0.95 * np.mean(losses[:3])
    assert env["epoch_losses"][-1] < env["epoch_losses"][0]
    assert env["sample"].shape == (8, 64)


def _shared_noise(monkeypatch, module, rng):
    def randn_like(t):
        return module.tensor(rng.standard_normal(tuple(t.shape)).astype(np.float32))

    monkeypatch.setattr(module, "randn_like", randn_like)


@pytest.mark.torch
def test_the_vae_matches_torch_from_the_same_weights_and_noise(monkeypatch):
    torch = pytest.importorskip("torch")
    import ferro

    _shared_noise(monkeypatch, ferro, np.random.default_rng(11))
    ours = _run(FERRO_IMPORTS, EPOCHS=1, SHUFFLE=False)
    _shared_noise(monkeypatch, torch, np.random.default_rng(11))
    theirs = _run(TORCH_IMPORTS, EPOCHS=1, SHUFFLE=False)
    np.testing.assert_allclose(ours["losses"], theirs["losses"], rtol=1e-4)
    for k, v in theirs["state"].items():
        np.testing.assert_allclose(ours["state"][k], v, rtol=1e-3, atol=1e-5)
