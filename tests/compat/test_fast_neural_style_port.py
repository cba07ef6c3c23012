# ruff: noqa: E501  (the ported program keeps its upstream line lengths)
"""pytorch/examples fast_neural_style: transformer_net.py's ``TransformerNet`` (``ConvLayer`` of
``ReflectionPad2d`` + ``Conv2d``, ``InstanceNorm2d(affine=True)``, five ``ResidualBlock``s,
``UpsampleConvLayer`` with ``F.interpolate(mode='nearest', scale_factor=2)``), utils.py's
``gram_matrix`` (``view``/``transpose``/``bmm``) and ``normalize_batch`` (``new_tensor``,
in-place ``div_`` on a non-leaf), vgg.py's ``Vgg16`` slices filled by ``add_module`` from a
``features`` ``Sequential`` and frozen with ``requires_grad = False``, returning a
``namedtuple``, and neural_style.py's ``train`` loop (style grams over ``zip``, ``MSELoss``,
``style.repeat``) and ``stylize`` (``re`` filtering of the state dict, ``torch.no_grad``), run as
one source with only its import lines changed. Differences: the VGG-16 ``features`` are
torchvision's ``make_layers`` at an eighth of its widths with random weights (no pretrained
download), images are synthetic 32x32, and the train loader is a ``TensorDataset``.
"""

import numpy as np
import pytest

TORCH_IMPORTS = """\
import re
from collections import namedtuple
import torch
from torch.optim import Adam
from torch.utils.data import DataLoader, TensorDataset
"""

FERRO_IMPORTS = """\
import re
from collections import namedtuple
import ferro as torch
from ferro.optim import Adam
from ferro.utils.data import DataLoader, TensorDataset
"""

PROGRAM = '''
class TransformerNet(torch.nn.Module):
    def __init__(self):
        super(TransformerNet, self).__init__()
        # Initial convolution layers
        self.conv1 = ConvLayer(3, 32, kernel_size=9, stride=1)
        self.in1 = torch.nn.InstanceNorm2d(32, affine=True)
        self.conv2 = ConvLayer(32, 64, kernel_size=3, stride=2)
        self.in2 = torch.nn.InstanceNorm2d(64, affine=True)
        self.conv3 = ConvLayer(64, 128, kernel_size=3, stride=2)
        self.in3 = torch.nn.InstanceNorm2d(128, affine=True)
        # Residual layers
        self.res1 = ResidualBlock(128)
        self.res2 = ResidualBlock(128)
        self.res3 = ResidualBlock(128)
        self.res4 = ResidualBlock(128)
        self.res5 = ResidualBlock(128)
        # Upsampling Layers
        self.deconv1 = UpsampleConvLayer(128, 64, kernel_size=3, stride=1, upsample=2)
        self.in4 = torch.nn.InstanceNorm2d(64, affine=True)
        self.deconv2 = UpsampleConvLayer(64, 32, kernel_size=3, stride=1, upsample=2)
        self.in5 = torch.nn.InstanceNorm2d(32, affine=True)
        self.deconv3 = ConvLayer(32, 3, kernel_size=9, stride=1)
        # Non-linearities
        self.relu = torch.nn.ReLU()

    def forward(self, X):
        y = self.relu(self.in1(self.conv1(X)))
        y = self.relu(self.in2(self.conv2(y)))
        y = self.relu(self.in3(self.conv3(y)))
        y = self.res1(y)
        y = self.res2(y)
        y = self.res3(y)
        y = self.res4(y)
        y = self.res5(y)
        y = self.relu(self.in4(self.deconv1(y)))
        y = self.relu(self.in5(self.deconv2(y)))
        y = self.deconv3(y)
        return y


class ConvLayer(torch.nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride):
        super(ConvLayer, self).__init__()
        reflection_padding = kernel_size // 2
        self.reflection_pad = torch.nn.ReflectionPad2d(reflection_padding)
        self.conv2d = torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        out = self.reflection_pad(x)
        out = self.conv2d(out)
        return out


class ResidualBlock(torch.nn.Module):
    """ResidualBlock
    introduced in: https://arxiv.org/abs/1512.03385
    recommended architecture: http://torch.ch/blog/2016/02/04/resnets.html
    """

    def __init__(self, channels):
        super(ResidualBlock, self).__init__()
        self.conv1 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in1 = torch.nn.InstanceNorm2d(channels, affine=True)
        self.conv2 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in2 = torch.nn.InstanceNorm2d(channels, affine=True)
        self.relu = torch.nn.ReLU()

    def forward(self, x):
        residual = x
        out = self.relu(self.in1(self.conv1(x)))
        out = self.in2(self.conv2(out))
        out = out + residual
        return out


class UpsampleConvLayer(torch.nn.Module):
    """UpsampleConvLayer
    Upsamples the input and then does a convolution. This method gives better results
    compared to ConvTranspose2d.
    ref: http://distill.pub/2016/deconv-checkerboard/
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride, upsample=None):
        super(UpsampleConvLayer, self).__init__()
        self.upsample = upsample
        reflection_padding = kernel_size // 2
        self.reflection_pad = torch.nn.ReflectionPad2d(reflection_padding)
        self.conv2d = torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        x_in = x
        if self.upsample:
            x_in = torch.nn.functional.interpolate(x_in, mode='nearest', scale_factor=self.upsample)
        out = self.reflection_pad(x_in)
        out = self.conv2d(out)
        return out


def gram_matrix(y):
    (b, ch, h, w) = y.size()
    features = y.view(b, ch, w * h)
    features_t = features.transpose(1, 2)
    gram = features.bmm(features_t) / (ch * h * w)
    return gram


def normalize_batch(batch):
    # normalize using imagenet mean and std
    mean = batch.new_tensor([0.485, 0.456, 0.406]).view(-1, 1, 1)
    std = batch.new_tensor([0.229, 0.224, 0.225]).view(-1, 1, 1)
    batch = batch.div_(255.0)
    return (batch - mean) / std


def make_layers(cfg, batch_norm=False):
    # torchvision/models/vgg.py
    layers = []
    in_channels = 3
    for v in cfg:
        if v == "M":
            layers += [torch.nn.MaxPool2d(kernel_size=2, stride=2)]
        else:
            conv2d = torch.nn.Conv2d(in_channels, v, kernel_size=3, padding=1)
            if batch_norm:
                layers += [conv2d, torch.nn.BatchNorm2d(v), torch.nn.ReLU(inplace=True)]
            else:
                layers += [conv2d, torch.nn.ReLU(inplace=True)]
            in_channels = v
    return torch.nn.Sequential(*layers)


class Vgg16(torch.nn.Module):
    def __init__(self, requires_grad=False):
        super(Vgg16, self).__init__()
        vgg_pretrained_features = make_layers([8, 8, "M", 16, 16, "M", 32, 32, 32, "M", 64, 64, 64, "M", 64, 64, 64, "M"])
        self.slice1 = torch.nn.Sequential()
        self.slice2 = torch.nn.Sequential()
        self.slice3 = torch.nn.Sequential()
        self.slice4 = torch.nn.Sequential()
        for x in range(4):
            self.slice1.add_module(str(x), vgg_pretrained_features[x])
        for x in range(4, 9):
            self.slice2.add_module(str(x), vgg_pretrained_features[x])
        for x in range(9, 16):
            self.slice3.add_module(str(x), vgg_pretrained_features[x])
        for x in range(16, 23):
            self.slice4.add_module(str(x), vgg_pretrained_features[x])
        if not requires_grad:
            for param in self.parameters():
                param.requires_grad = False

    def forward(self, X):
        h = self.slice1(X)
        h_relu1_2 = h
        h = self.slice2(h)
        h_relu2_2 = h
        h = self.slice3(h)
        h_relu3_3 = h
        h = self.slice4(h)
        h_relu4_3 = h
        vgg_outputs = namedtuple("VggOutputs", ['relu1_2', 'relu2_2', 'relu3_3', 'relu4_3'])
        out = vgg_outputs(h_relu1_2, h_relu2_2, h_relu3_3, h_relu4_3)
        return out


def train(args):
    device = torch.device("cpu")
    torch.manual_seed(args.seed)
    train_loader = DataLoader(TensorDataset(torch.from_numpy(CONTENT), torch.zeros(len(CONTENT))), batch_size=args.batch_size)

    transformer = TransformerNet().to(device)
    if INIT is not None:
        transformer.load_state_dict({k: torch.from_numpy(v) for k, v in INIT.items()})
    optimizer = Adam(transformer.parameters(), args.lr)
    mse_loss = torch.nn.MSELoss()

    vgg = Vgg16(requires_grad=False).to(device)
    if VGG is not None:
        vgg.load_state_dict({k: torch.from_numpy(v) for k, v in VGG.items()})
    style = torch.from_numpy(STYLE).mul(255)
    style = style.repeat(args.batch_size, 1, 1, 1).to(device)

    features_style = vgg(normalize_batch(style))
    gram_style = [gram_matrix(y) for y in features_style]

    for e in range(args.epochs):
        transformer.train()
        agg_content_loss = 0.
        agg_style_loss = 0.
        count = 0
        for batch_id, (x, _) in enumerate(train_loader):
            n_batch = len(x)
            count += n_batch
            optimizer.zero_grad()

            x = x.to(device)
            y = transformer(x)

            y = normalize_batch(y)
            x = normalize_batch(x)

            features_y = vgg(y)
            features_x = vgg(x)

            content_loss = args.content_weight * mse_loss(features_y.relu2_2, features_x.relu2_2)

            style_loss = 0.
            for ft_y, gm_s in zip(features_y, gram_style):
                gm_y = gram_matrix(ft_y)
                style_loss += mse_loss(gm_y, gm_s[:n_batch, :, :])
            style_loss *= args.style_weight

            total_loss = content_loss + style_loss
            total_loss.backward()
            optimizer.step()

            agg_content_loss += content_loss.item()
            agg_style_loss += style_loss.item()
            LOSSES.append((content_loss.item(), style_loss.item()))

    # save model
    transformer.eval().cpu()
    torch.save(transformer.state_dict(), args.save_model_path)
    return transformer, vgg


def stylize(args):
    device = torch.device("cpu")
    content_image = torch.from_numpy(CONTENT[0]).mul(255)
    content_image = content_image.unsqueeze(0).to(device)
    with torch.no_grad():
        style_model = TransformerNet()
        state_dict = torch.load(args.model)
        # remove saved deprecated running_* keys in InstanceNorm from the checkpoint
        for k in list(state_dict.keys()):
            if re.search(r'in\\d+\\.running_(mean|var)$', k):
                del state_dict[k]
        style_model.load_state_dict(state_dict)
        style_model.to(device)
        style_model.eval()
        output = style_model(content_image).cpu()
    img = output[0].clone().clamp(0, 255).numpy()
    img = img.transpose(1, 2, 0).astype("uint8")
    return img


class Args:
    seed = 42
    batch_size = 2
    lr = 1e-3
    epochs = EPOCHS
    content_weight = 1e5
    style_weight = 1e10
    save_model_path = MODEL_PATH
    model = MODEL_PATH


LOSSES = []
transformer, vgg = train(Args())
stylized = stylize(Args())
state = {k: v.detach().numpy().copy() for k, v in transformer.state_dict().items()}
vgg_state = {k: v.detach().numpy().copy() for k, v in vgg.state_dict().items()}
'''


def _images(n, seed):
    # Smooth colour gradients with stripes, in [0, 255] as ToTensor + mul(255) gives.
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:32, :32] / 31.0
    out = np.empty((n, 3, 32, 32), np.float32)
    for k in range(n):
        a, b, f = rng.uniform(0.2, 1.0, size=3)
        out[k, 0] = a * yy
        out[k, 1] = b * xx
        out[k, 2] = 0.5 + 0.5 * np.sin(f * 20 * (xx + yy))
    return out * 255


def _run(imports, path, **params):
    env = {
        "CONTENT": _images(4, 0),
        "STYLE": _images(1, 1)[0] / 255,
        "INIT": None,
        "VGG": None,
        "EPOCHS": 1,
        "MODEL_PATH": str(path),
        **params,
    }
    exec(compile(imports + PROGRAM, "fast_neural_style_port", "exec"), env)
    return env


def test_the_style_transfer_trains_and_stylizes(tmp_path):
    env = _run(FERRO_IMPORTS, tmp_path / "model.pth", EPOCHS=2)
    losses = np.array(env["LOSSES"])
    assert losses.shape == (4, 2) and np.all(np.isfinite(losses)) and np.all(losses > 0)
    assert losses[-1].sum() < losses[0].sum()
    img = env["stylized"]
    assert img.shape == (32, 32, 3) and img.dtype == np.uint8
    # The frozen VGG stayed as it was and took no gradient; InstanceNorm keeps no running stats.
    assert all(not p.requires_grad and p.grad is None for p in env["vgg"].parameters())
    assert "in1.weight" in env["state"] and not any("running" in k for k in env["state"])
    assert sum(v.size for v in env["state"].values()) == 1679235  # the upstream net's size


@pytest.mark.torch
def test_the_style_transfer_matches_torch(tmp_path):
    pytest.importorskip("torch")
    init = _run(FERRO_IMPORTS, tmp_path / "init.pth", EPOCHS=0)
    params = {"EPOCHS": 1, "INIT": init["state"], "VGG": init["vgg_state"]}
    ours = _run(FERRO_IMPORTS, tmp_path / "ours.pth", **params)
    theirs = _run(TORCH_IMPORTS, tmp_path / "theirs.pth", **params)
    np.testing.assert_allclose(ours["LOSSES"], theirs["LOSSES"], rtol=2e-3)
    diff = np.abs(ours["stylized"].astype(int) - theirs["stylized"].astype(int))
    assert diff.max() <= 1  # uint8 rounding of the same picture


def _first_gradients(env, lib, init):
    # One training step's loss and gradients in float64, from the same weights and images.
    as64 = {k: lib.from_numpy(v.astype(np.float64)) for k, v in init["state"].items()}
    transformer = env["TransformerNet"]().double()
    transformer.load_state_dict(as64)
    vgg = env["Vgg16"]().double()
    vgg.load_state_dict(
        {k: lib.from_numpy(v.astype(np.float64)) for k, v in init["vgg_state"].items()}
    )
    gram, norm, mse = env["gram_matrix"], env["normalize_batch"], lib.nn.MSELoss()
    x = lib.from_numpy(_images(2, 0).astype(np.float64))
    style = lib.from_numpy(_images(1, 1).astype(np.float64)).repeat(2, 1, 1, 1)
    gram_style = [gram(y) for y in vgg(norm(style))]
    features_y, features_x = vgg(norm(transformer(x))), vgg(norm(x))
    loss = 1e5 * mse(features_y.relu2_2, features_x.relu2_2)
    for ft_y, gm_s in zip(features_y, gram_style, strict=True):
        loss = loss + 1e10 * mse(gram(ft_y), gm_s)
    loss.backward()
    return loss.item(), {k: p.grad.numpy().copy() for k, p in transformer.named_parameters()}


@pytest.mark.torch
def test_the_style_transfer_gradients_match_torch_in_float64(tmp_path):
    pytest.importorskip("torch")
    init = _run(FERRO_IMPORTS, tmp_path / "init.pth", EPOCHS=0)
    theirs_env = _run(TORCH_IMPORTS, tmp_path / "t.pth", EPOCHS=0)
    loss, ours = _first_gradients(init, init["torch"], init)
    want_loss, theirs = _first_gradients(theirs_env, theirs_env["torch"], init)
    assert loss == pytest.approx(want_loss, rel=1e-12)
    for k, v in theirs.items():
        # Every conv bias under an InstanceNorm, and each residual block's in2.bias (a constant
        # the later norms subtract), has a zero true gradient: both are rounding noise there.
        if (
            k.endswith("conv2d.bias")
            and k != "deconv3.conv2d.bias"
            or (k.startswith("res") and k.endswith("in2.bias"))
        ):
            assert np.abs(ours[k]).max() < 1e-9 * np.abs(ours["conv1.conv2d.weight"]).max()
        else:
            np.testing.assert_allclose(
                ours[k], v, rtol=1e-7, atol=1e-9 * np.abs(v).max(), err_msg=k
            )
