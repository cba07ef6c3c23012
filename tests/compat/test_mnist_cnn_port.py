"""The MNIST CNN of pytorch/examples (mnist/main.py: ``Net``, ``train``, ``test``, Adadelta with
StepLR), on scikit-learn's 8x8 digits upscaled and padded to 28x28 instead of MNIST, run as one
source with only its import lines changed: ``import torch`` and ``import ferro as torch``.

The harness gives both runs the same initial weights; for the step-by-step comparison it sets
both dropout probabilities to 0 (the two libraries' generators differ, so the masks could not
match) and turns shuffling off.
"""

import numpy as np
import pytest

sklearn_datasets = pytest.importorskip("sklearn.datasets")

TORCH_IMPORTS = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
import torch.utils.data
"""

FERRO_IMPORTS = """\
import ferro as torch
import ferro.nn as nn
import ferro.nn.functional as F
import ferro.optim as optim
from ferro.optim.lr_scheduler import StepLR
import ferro.utils.data
"""

PROGRAM = """
class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


def train(args, model, device, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())


def test(model, device, test_loader):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction='sum').item()  # sum up batch loss
            pred = output.argmax(dim=1, keepdim=True)  # get the index of the max log-probability
            correct += pred.eq(target.view_as(pred)).sum().item()
    test_loss /= len(test_loader.dataset)
    return test_loss, correct


torch.manual_seed(1)
device = torch.device("cpu")
train_set = torch.utils.data.TensorDataset(torch.from_numpy(X_TRAIN), torch.from_numpy(Y_TRAIN))
test_set = torch.utils.data.TensorDataset(torch.from_numpy(X_TEST), torch.from_numpy(Y_TEST))
train_loader = torch.utils.data.DataLoader(train_set, batch_size=16, shuffle=SHUFFLE)
test_loader = torch.utils.data.DataLoader(test_set, batch_size=32)
model = Net().to(device)
if INIT is not None:
    model.load_state_dict({k: torch.tensor(v) for k, v in INIT.items()})
if NO_DROPOUT:
    model.dropout1.p = model.dropout2.p = 0.0
optimizer = optim.Adadelta(model.parameters(), lr=1.0)
scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
losses, results, lrs = [], [], []
for epoch in range(1, EPOCHS + 1):
    train(None, model, device, train_loader, optimizer, epoch)
    results.append(test(model, device, test_loader))
    scheduler.step()
    lrs.append(optimizer.param_groups[0]["lr"])
state = {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}
"""

# The model alone (the FGSM tutorial loads this program's trained Net).
NET = PROGRAM[: PROGRAM.index("\ndef train(")]


def _data(n_train=48, n_test=32):
    digits = sklearn_datasets.load_digits()
    x = (digits.images / 16.0).astype(np.float32)
    x = np.pad(np.kron(x, np.ones((3, 3), np.float32)), ((0, 0), (2, 2), (2, 2)))[:, None]
    x = (x - 0.1307) / 0.3081
    y = digits.target.astype(np.int64)
    return x[:n_train], y[:n_train], x[n_train : n_train + n_test], y[n_train : n_train + n_test]


def _init():
    import ferro

    ferro.manual_seed(0)
    env = _run(FERRO_IMPORTS, EPOCHS=0, SHUFFLE=False, INIT=None, NO_DROPOUT=True)
    return env["state"]


def _run(imports, **params):
    x_tr, y_tr, x_te, y_te = _data()
    env = {"X_TRAIN": x_tr, "Y_TRAIN": y_tr, "X_TEST": x_te, "Y_TEST": y_te, **params}
    exec(compile(imports + PROGRAM, "mnist_cnn_port", "exec"), env)
    return env


def test_the_mnist_cnn_trains_on_ferro():
    env = _run(FERRO_IMPORTS, EPOCHS=2, SHUFFLE=True, INIT=None, NO_DROPOUT=False)
    losses = env["losses"]
    assert len(losses) == 2 * 3
    assert np.all(np.isfinite(losses))
    assert np.mean(losses[-2:]) < losses[0]
    assert env["lrs"] == pytest.approx([0.7, 0.49])
    test_loss, correct = env["results"][-1]
    assert np.isfinite(test_loss) and 0 <= correct <= 32
    assert env["state"]["conv1.weight"].shape == (32, 1, 3, 3)


@pytest.mark.torch
def test_the_mnist_cnn_matches_torch_from_the_same_weights():
    pytest.importorskip("torch")
    init = _init()
    ours = _run(FERRO_IMPORTS, EPOCHS=2, SHUFFLE=False, INIT=init, NO_DROPOUT=True)
    theirs = _run(TORCH_IMPORTS, EPOCHS=2, SHUFFLE=False, INIT=init, NO_DROPOUT=True)
    np.testing.assert_allclose(ours["losses"], theirs["losses"], rtol=1e-3, atol=1e-5)
    for (our_loss, our_correct), (their_loss, their_correct) in zip(
        ours["results"], theirs["results"], strict=True
    ):
        assert our_correct == their_correct
        assert our_loss == pytest.approx(their_loss, rel=1e-3)
    assert ours["lrs"] == pytest.approx(theirs["lrs"])
    for k, v in theirs["state"].items():
        np.testing.assert_allclose(ours["state"][k], v, rtol=1e-2, atol=1e-4)
