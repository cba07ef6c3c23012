# ruff: noqa: E501  (the ported program keeps its upstream line lengths)
"""pytorch/examples super_resolution (model.py, main.py, super_resolve.py): the ESPCN ``Net``
(``Conv2d`` with tuple kernel/stride/padding arguments, ``nn.PixelShuffle(upscale_factor)``),
initialized as model.py's older revisions do with the deprecated ``init.orthogonal(w,
init.calculate_gain('relu'))``; main.py's Adam + ``MSELoss`` loop with the PSNR ``10 *
log10(1 / mse.item())`` under ``torch.no_grad`` and a checkpoint per epoch; super_resolve.py's
``.view(1, -1, h, w)`` of one image, ``out[0].detach().numpy()`` scaled by 255 and clipped. Run
as one source with only its import lines changed, on generated smooth images (the BSDS300 crops
and torchvision's transforms are replaced by NumPy: the input is the target averaged over
``upscale_factor`` squares).

One line differs from upstream: the checkpoint saves ``model.state_dict()``, since ``torch.save
(model, path)`` pickles the module's class, which ferro's files never hold (docs/pytorch.md,
"Saving and loading"); super_resolve.py accordingly rebuilds ``Net`` and loads the state dict.
For the comparison with PyTorch, both start from the same weights and shuffling is off.
"""

import warnings

import numpy as np
import pytest

TORCH_IMPORTS = """\
import os
from math import log10
import numpy as np
import torch
import torch.nn as nn
import torch.nn.init as init
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset
"""

FERRO_IMPORTS = """\
import os
from math import log10
import numpy as np
import ferro as torch
import ferro.nn as nn
import ferro.nn.init as init
import ferro.optim as optim
from ferro.utils.data import DataLoader, TensorDataset
"""

PROGRAM = """
class Net(nn.Module):
    def __init__(self, upscale_factor):
        super(Net, self).__init__()

        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, 64, (5, 5), (1, 1), (2, 2))
        self.conv2 = nn.Conv2d(64, 64, (3, 3), (1, 1), (1, 1))
        self.conv3 = nn.Conv2d(64, 32, (3, 3), (1, 1), (1, 1))
        self.conv4 = nn.Conv2d(32, upscale_factor ** 2, (3, 3), (1, 1), (1, 1))
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)

        self._initialize_weights()

    def forward(self, x):
        x = self.relu(self.conv1(x))
        x = self.relu(self.conv2(x))
        x = self.relu(self.conv3(x))
        x = self.pixel_shuffle(self.conv4(x))
        return x

    def _initialize_weights(self):
        init.orthogonal(self.conv1.weight, init.calculate_gain('relu'))
        init.orthogonal(self.conv2.weight, init.calculate_gain('relu'))
        init.orthogonal(self.conv3.weight, init.calculate_gain('relu'))
        init.orthogonal(self.conv4.weight)


torch.manual_seed(123)
device = torch.device('cpu')
train_set = TensorDataset(torch.from_numpy(LR_TRAIN), torch.from_numpy(HR_TRAIN))
test_set = TensorDataset(torch.from_numpy(LR_TEST), torch.from_numpy(HR_TEST))
training_data_loader = DataLoader(dataset=train_set, num_workers=0, batch_size=8, shuffle=SHUFFLE)
testing_data_loader = DataLoader(dataset=test_set, num_workers=0, batch_size=4, shuffle=False)

model = Net(upscale_factor=UPSCALE).to(device)
if INIT is not None:
    model.load_state_dict({k: torch.from_numpy(v) for k, v in INIT.items()})
criterion = nn.MSELoss()

optimizer = optim.Adam(model.parameters(), lr=0.01)
LOSSES, PSNRS = [], []


def train(epoch):
    epoch_loss = 0
    for iteration, batch in enumerate(training_data_loader, 1):
        input, target = batch[0].to(device), batch[1].to(device)

        optimizer.zero_grad()
        loss = criterion(model(input), target)
        epoch_loss += loss.item()
        loss.backward()
        optimizer.step()
        LOSSES.append(loss.item())

        print("===> Epoch[{}]({}/{}): Loss: {:.4f}".format(epoch, iteration, len(training_data_loader), loss.item()))

    print("===> Epoch {} Complete: Avg. Loss: {:.4f}".format(epoch, epoch_loss / len(training_data_loader)))


def test():
    avg_psnr = 0
    with torch.no_grad():
        for batch in testing_data_loader:
            input, target = batch[0].to(device), batch[1].to(device)

            prediction = model(input)
            mse = criterion(prediction, target)
            psnr = 10 * log10(1 / mse.item())
            avg_psnr += psnr
    PSNRS.append(avg_psnr / len(testing_data_loader))
    print("===> Avg. PSNR: {:.4f} dB".format(avg_psnr / len(testing_data_loader)))


def checkpoint(epoch):
    model_out_path = os.path.join(TMP, "model_epoch_{}.pth".format(epoch))
    torch.save(model.state_dict(), model_out_path)
    print("Checkpoint saved to {}".format(model_out_path))

test()
for epoch in range(1, EPOCHS + 1):
    train(epoch)
    test()
    checkpoint(epoch)

# super_resolve.py
y = LR_TEST[0, 0]
model = Net(upscale_factor=UPSCALE)
model.load_state_dict(torch.load(os.path.join(TMP, "model_epoch_{}.pth".format(EPOCHS))))
input = torch.from_numpy(y).view(1, -1, y.shape[1], y.shape[0])
model = model.to(device)
input = input.to(device)

out = model(input)
out = out.cpu()
out_img_y = out[0].detach().numpy()
out_img_y *= 255.0
out_img_y = out_img_y.clip(0, 255)
OUT_IMG = out_img_y
STATE = {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}
"""

UPSCALE = 2


def _images(n, seed, size=12):
    """``n`` smooth 1-channel images in [0, 1] (sums of a few Gaussian blobs) and their
    ``UPSCALE``-times smaller averages."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    hr = np.zeros((n, 1, size, size))
    for i in range(n):
        for _ in range(3):
            cy, cx, w = rng.random(), rng.random(), 0.1 + 0.2 * rng.random()
            hr[i, 0] += rng.random() * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * w * w))
    hr = np.clip(hr, 0, 1).astype(np.float32)
    lr = hr.reshape(n, 1, size // UPSCALE, UPSCALE, size // UPSCALE, UPSCALE).mean((3, 5))
    return lr, hr


def _init():
    rng = np.random.default_rng(9)
    shapes = {
        "conv1": (64, 1, 5, 5),
        "conv2": (64, 64, 3, 3),
        "conv3": (32, 64, 3, 3),
        "conv4": (UPSCALE**2, 32, 3, 3),
    }
    out = {}
    for name, shape in shapes.items():
        fan_in = int(np.prod(shape[1:]))
        out[f"{name}.weight"] = (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(
            np.float32
        )
        out[f"{name}.bias"] = np.zeros(shape[0], np.float32)
    return out


def _run(imports, tmp_path, init=None, shuffle=True, epochs=6):
    lr_train, hr_train = _images(24, 0)
    lr_test, hr_test = _images(8, 1)
    tmp_path.mkdir(exist_ok=True)
    env = {
        "LR_TRAIN": lr_train,
        "HR_TRAIN": hr_train,
        "LR_TEST": lr_test,
        "HR_TEST": hr_test,
        "UPSCALE": UPSCALE,
        "INIT": init,
        "SHUFFLE": shuffle,
        "EPOCHS": epochs,
        "TMP": str(tmp_path),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # init.orthogonal's deprecation
        exec(compile(imports + PROGRAM, "super_resolution_port", "exec"), env)
    return env


def test_the_super_resolution_net_learns_to_upscale(tmp_path):
    env = _run(FERRO_IMPORTS, tmp_path)
    assert len(env["LOSSES"]) == 6 * 3
    assert np.mean(env["LOSSES"][-3:]) < 0.4 * env["LOSSES"][0]
    assert env["PSNRS"][-1] > env["PSNRS"][0] + 3.0
    assert env["OUT_IMG"].shape == (1, 12, 12)
    assert env["OUT_IMG"].min() >= 0 and env["OUT_IMG"].max() <= 255
    # Net's _initialize_weights: the deprecated spelling warns, and conv3's rows (its output
    # channels, flattened) are orthogonal with norm calculate_gain('relu') = sqrt(2)
    with pytest.warns(FutureWarning, match="`nn.init.orthogonal` is now deprecated"):
        net = env["Net"](upscale_factor=2)
    rows = net.conv3.weight.detach().numpy().reshape(32, -1)
    np.testing.assert_allclose(rows @ rows.T, 2.0 * np.eye(32), atol=1e-4)


@pytest.mark.torch
def test_the_super_resolution_example_matches_torch(tmp_path):
    pytest.importorskip("torch")
    ours = _run(FERRO_IMPORTS, tmp_path / "ferro", init=_init(), shuffle=False, epochs=1)
    theirs = _run(TORCH_IMPORTS, tmp_path / "torch", init=_init(), shuffle=False, epochs=1)
    np.testing.assert_allclose(ours["LOSSES"], theirs["LOSSES"], rtol=2e-3, atol=1e-5)
    np.testing.assert_allclose(ours["PSNRS"], theirs["PSNRS"], rtol=1e-3)
    np.testing.assert_allclose(ours["OUT_IMG"], theirs["OUT_IMG"], rtol=1e-2, atol=0.1)
    for k, v in theirs["STATE"].items():
        np.testing.assert_allclose(ours["STATE"][k], v, rtol=1e-2, atol=1e-4)
