# ruff: noqa: E501  (the ported program keeps its upstream line lengths)
"""The PyTorch "Spatial Transformer Networks" tutorial: the localization ``Sequential`` and the
``fc_loc`` regressor initialised to the identity (``weight.data.zero_()``,
``bias.data.copy_(torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.float))``), ``stn`` with
``F.affine_grid(theta, x.size())`` and ``F.grid_sample(x, grid)`` at their default
``align_corners``, ``nn.Dropout2d``, ``F.dropout(x, training=self.training)``, ``F.nll_loss``
with the legacy ``size_average=False``, ``output.max(1, keepdim=True)[1]`` and
``pred.eq(target.view_as(pred))``, and ``convert_image_np``; run as one source with only the
import lines changed, on synthetic 28x28 digits (shifted, rotated bars).
"""

import warnings

import numpy as np
import pytest

TORCH_IMPORTS = """\
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset
"""

FERRO_IMPORTS = """\
import numpy as np
import ferro as torch
import ferro.nn as nn
import ferro.nn.functional as F
import ferro.optim as optim
from ferro.utils.data import DataLoader, TensorDataset
"""

PROGRAM = """
device = torch.device("cpu")
train_loader = DataLoader(TensorDataset(torch.from_numpy(IMAGES), torch.from_numpy(LABELS)), batch_size=8, shuffle=SHUFFLE)
test_loader = DataLoader(TensorDataset(torch.from_numpy(IMAGES), torch.from_numpy(LABELS)), batch_size=8, shuffle=False)


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

        # Spatial transformer localization-network
        self.localization = nn.Sequential(
            nn.Conv2d(1, 8, kernel_size=7),
            nn.MaxPool2d(2, stride=2),
            nn.ReLU(True),
            nn.Conv2d(8, 10, kernel_size=5),
            nn.MaxPool2d(2, stride=2),
            nn.ReLU(True)
        )

        # Regressor for the 3 * 2 affine matrix
        self.fc_loc = nn.Sequential(
            nn.Linear(10 * 3 * 3, 32),
            nn.ReLU(True),
            nn.Linear(32, 3 * 2)
        )

        # Initialize the weights/bias with identity transformation
        self.fc_loc[2].weight.data.zero_()
        self.fc_loc[2].bias.data.copy_(torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.float))

    # Spatial transformer network forward function
    def stn(self, x):
        xs = self.localization(x)
        xs = xs.view(-1, 10 * 3 * 3)
        theta = self.fc_loc(xs)
        theta = theta.view(-1, 2, 3)

        grid = F.affine_grid(theta, x.size())
        x = F.grid_sample(x, grid)

        return x

    def forward(self, x):
        # transform the input
        x = self.stn(x)

        # Perform the usual forward pass
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


model = Net().to(device)
IDENTITY = model.stn(torch.from_numpy(IMAGES[:2])).detach().numpy()
if INIT is not None:
    model.load_state_dict({k: torch.from_numpy(v) for k, v in INIT.items()})

optimizer = optim.SGD(model.parameters(), lr=0.05)
LOSSES = []


def train(epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)

        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        LOSSES.append(loss.item())


def test():
    with torch.no_grad():
        model.eval()
        test_loss = 0
        correct = 0
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)

            # sum up batch loss
            test_loss += F.nll_loss(output, target, size_average=False).item()
            # get the index of the max log-probability
            pred = output.max(1, keepdim=True)[1]
            correct += pred.eq(target.view_as(pred)).sum().item()

        test_loss /= len(test_loader.dataset)
        return test_loss, correct


def convert_image_np(inp):
    \"\"\"Convert a Tensor to numpy image.\"\"\"
    inp = inp.numpy().transpose((1, 2, 0))
    mean = np.array([0.485, 0.456, 0.406])
    std = np.array([0.229, 0.224, 0.225])
    inp = std * inp + mean
    inp = np.clip(inp, 0, 1)
    return inp


for epoch in range(1, EPOCHS + 1):
    train(epoch)
TEST_LOSS, CORRECT = test()
with torch.no_grad():
    data = next(iter(test_loader))[0].to(device)
    transformed_input_tensor = model.stn(data).cpu()
    PICTURE = convert_image_np(transformed_input_tensor[0].expand(3, 28, 28))
STATE = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
"""


def _digits(n=32, seed=0):
    # Class k: a bar at angle 18k degrees through a randomly shifted centre.
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:28, :28] - 13.5
    labels = np.arange(n) % 10
    images = np.zeros((n, 1, 28, 28), np.float32)
    for i, k in enumerate(labels):
        a = np.pi * k / 10
        cy, cx = rng.uniform(-3, 3, size=2)
        dist = np.abs(-(xx - cx) * np.sin(a) + (yy - cy) * np.cos(a))
        along = np.abs((xx - cx) * np.cos(a) + (yy - cy) * np.sin(a))
        images[i, 0] = ((dist < 1.5) & (along < 9)).astype(np.float32)
    return (images - 0.1307) / 0.3081, labels.astype(np.int64)


def _run(imports, **params):
    images, labels = _digits()
    env = {
        "IMAGES": images.astype(np.float32),
        "LABELS": labels,
        "INIT": None,
        "SHUFFLE": False,
        "EPOCHS": 1,
        **params,
    }
    with warnings.catch_warnings():
        # PyTorch warns that affine_grid/grid_sample's align_corners default changed, and that
        # size_average is deprecated: the tutorial's own lines.
        warnings.simplefilter("ignore", UserWarning)
        exec(compile(imports + PROGRAM, "spatial_transformer_port", "exec"), env)
    return env


def test_the_spatial_transformer_trains():
    env = _run(FERRO_IMPORTS, SHUFFLE=True, EPOCHS=4)
    # At the identity initialisation the transformer resamples the image onto itself.
    np.testing.assert_allclose(env["IDENTITY"], env["IMAGES"][:2], atol=1e-5)
    losses = env["LOSSES"]
    assert len(losses) == 16 and np.all(np.isfinite(losses))
    assert np.mean(losses[-4:]) < np.mean(losses[:4])
    assert 0 <= env["CORRECT"] <= 32 and np.isfinite(env["TEST_LOSS"])
    assert (
        env["PICTURE"].shape == (28, 28, 3)
        and 0 <= env["PICTURE"].min() <= env["PICTURE"].max() <= 1
    )
    # The localization net was trained: theta left the identity.
    assert np.abs(env["STATE"]["fc_loc.2.weight"]).max() > 0


def _eval_step(env, lib, init, images, labels):
    # One step in eval mode (no dropout), from the same weights: the loss and every gradient.
    model = env["Net"]()
    model.load_state_dict({k: lib.from_numpy(v) for k, v in init.items()})
    model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # PyTorch's align_corners notice
        loss = env["F"].nll_loss(model(lib.from_numpy(images)), lib.from_numpy(labels))
    loss.backward()
    return loss.item(), {n: p.grad.numpy().copy() for n, p in model.named_parameters()}


@pytest.mark.torch
def test_the_spatial_transformer_matches_torch():
    pytest.importorskip("torch")
    trained = _run(FERRO_IMPORTS, EPOCHS=2)  # theta away from the identity
    theirs_env = _run(TORCH_IMPORTS, EPOCHS=0)
    images, labels = _digits()
    images = images.astype(np.float32)
    loss, ours = _eval_step(trained, trained["torch"], trained["STATE"], images, labels)
    want, theirs = _eval_step(theirs_env, theirs_env["torch"], trained["STATE"], images, labels)
    assert loss == pytest.approx(want, rel=1e-5)
    # float32: the localization net's gradients reach it through grid_sample's grid gradient, a
    # difference of neighbouring pixels, so its small entries carry cancellation error of about
    # 1e-4 of the largest (seen with the CPU kernel, which sums in another order than PyTorch).
    for k, v in theirs.items():
        np.testing.assert_allclose(ours[k], v, rtol=1e-3, atol=1e-3 * np.abs(v).max(), err_msg=k)
    # The tutorial's test() from the same trained weights.
    again = _run(TORCH_IMPORTS, EPOCHS=0, INIT=trained["STATE"])
    ours_eval = _run(FERRO_IMPORTS, EPOCHS=0, INIT=trained["STATE"])
    assert ours_eval["TEST_LOSS"] == pytest.approx(again["TEST_LOSS"], rel=1e-5)
    assert ours_eval["CORRECT"] == again["CORRECT"]
    np.testing.assert_allclose(ours_eval["PICTURE"], again["PICTURE"], atol=1e-5)
