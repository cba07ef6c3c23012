# ruff: noqa: E501  (the ported program keeps its upstream line lengths)
"""PyTorch's "Neural Transfer Using PyTorch" tutorial (neural style transfer), run as one source
with only its import lines changed: ``torch.set_default_device``; ``ContentLoss`` and
``StyleLoss`` modules that keep a ``detach()``ed target and store ``self.loss`` from
``F.mse_loss``; ``gram_matrix`` (``input.size()`` unpacked, ``view``, ``torch.mm`` with ``.t()``,
``div``); ``Normalization`` built with ``torch.tensor(mean).view(-1, 1, 1)`` of a tensor;
``get_style_model_and_losses`` walking ``cnn.children()`` with ``isinstance`` checks, replacing
in-place ReLUs, ``add_module`` into an ``nn.Sequential`` that is run while it is built, and
trimmed by slicing (``model[:(i + 1)]``) after a reverse scan with ``len(model)`` and
``model[i]``; ``run_style_transfer`` optimizing the input image itself with
``optim.LBFGS([input_img])`` and a closure that clamps it in place under ``torch.no_grad()``,
after ``input_img.requires_grad_(True)``, ``model.eval()`` and ``model.requires_grad_(False)``.

Differences: the pretrained VGG-19 ``features`` are replaced by a small Sequential of the same
layer kinds (five convolutions, in-place ReLUs, max pools) whose weights the harness gives both
libraries; the images are generated 24x24 arrays instead of PIL files; a few LBFGS steps.
"""

import numpy as np
import pytest

TORCH_IMPORTS = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
"""

FERRO_IMPORTS = """\
import ferro as torch
import ferro.nn as nn
import ferro.nn.functional as F
import ferro.optim as optim
"""

# torchvision's make_layers in miniature: Conv2d(3x3, padding 1) + ReLU(inplace=True) blocks
# with max pools, its weights from WEIGHTS (a harness line, not the tutorial's).
FEATURES = """
def make_features():
    layers, in_ch = [], 3
    for v in [8, 8, "M", 16, 16, "M", 16]:
        if v == "M":
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
        else:
            layers += [nn.Conv2d(in_ch, v, kernel_size=3, padding=1), nn.ReLU(inplace=True)]
            in_ch = v
    features = nn.Sequential(*layers)
    features.load_state_dict({k: torch.from_numpy(v) for k, v in WEIGHTS.items()})
    return features
"""
PROGRAM = """
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.set_default_device(device)

imsize = 512 if torch.cuda.is_available() else IMSIZE  # use small size if no GPU


def image_loader(array):
    # stands in for PIL + transforms.ToTensor(): (H, W, 3) floats in [0, 1] to a contiguous
    # (3, H, W) (a permuted one would make PyTorch's clone and convolutions channels-last, and
    # gram_matrix's view fail there)
    image = torch.from_numpy(array.transpose(2, 0, 1).copy())
    # fake batch dimension required to fit network's input dimensions
    image = image.unsqueeze(0)
    return image.to(device, torch.float)


style_img = image_loader(STYLE)
content_img = image_loader(CONTENT)

assert style_img.size() == content_img.size(), \\
    "we need to import style and content images of the same size"


class ContentLoss(nn.Module):

    def __init__(self, target,):
        super(ContentLoss, self).__init__()
        # we 'detach' the target content from the tree used
        # to dynamically compute the gradient: this is a stated value,
        # not a variable.
        self.target = target.detach()

    def forward(self, input):
        self.loss = F.mse_loss(input, self.target)
        return input


def gram_matrix(input):
    a, b, c, d = input.size()  # a=batch size(=1)
    # b=number of feature maps
    # (c,d)=dimensions of a f. map (N=c*d)

    features = input.view(a * b, c * d)  # resize F_XL into \\hat F_XL

    G = torch.mm(features, features.t())  # compute the gram product

    # we 'normalize' the values of the gram matrix
    # by dividing by the number of element in each feature maps.
    return G.div(a * b * c * d)


class StyleLoss(nn.Module):

    def __init__(self, target_feature):
        super(StyleLoss, self).__init__()
        self.target = gram_matrix(target_feature).detach()

    def forward(self, input):
        G = gram_matrix(input)
        self.loss = F.mse_loss(G, self.target)
        return input


cnn = make_features().eval()  # vgg19(weights=VGG19_Weights.DEFAULT).features.eval()

cnn_normalization_mean = torch.tensor([0.485, 0.456, 0.406])
cnn_normalization_std = torch.tensor([0.229, 0.224, 0.225])


# create a module to normalize input image so we can easily put it in a
# ``nn.Sequential``
class Normalization(nn.Module):
    def __init__(self, mean, std):
        super(Normalization, self).__init__()
        # .view the mean and std to make them [C x 1 x 1] so that they can
        # directly work with image Tensor of shape [B x C x H x W].
        # B is batch size. C is number of channels. H is height and W is width.
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)

    def forward(self, img):
        # normalize ``img``
        return (img - self.mean) / self.std


# desired depth layers to compute style/content losses :
content_layers_default = ['conv_4']
style_layers_default = ['conv_1', 'conv_2', 'conv_3', 'conv_4', 'conv_5']

def get_style_model_and_losses(cnn, normalization_mean, normalization_std,
                               style_img, content_img,
                               content_layers=content_layers_default,
                               style_layers=style_layers_default):
    # normalization module
    normalization = Normalization(normalization_mean, normalization_std)

    # just in order to have an iterable access to or list of content/style
    # losses
    content_losses = []
    style_losses = []

    # assuming that ``cnn`` is a ``nn.Sequential``, so we make a new ``nn.Sequential``
    # to put in modules that are supposed to be activated sequentially
    model = nn.Sequential(normalization)

    i = 0  # increment every time we see a conv
    for layer in cnn.children():
        if isinstance(layer, nn.Conv2d):
            i += 1
            name = 'conv_{}'.format(i)
        elif isinstance(layer, nn.ReLU):
            name = 'relu_{}'.format(i)
            # The in-place version doesn't play very nicely with the ``ContentLoss``
            # and ``StyleLoss`` we insert below. So we replace with out-of-place
            # ones here.
            layer = nn.ReLU(inplace=False)
        elif isinstance(layer, nn.MaxPool2d):
            name = 'pool_{}'.format(i)
        elif isinstance(layer, nn.BatchNorm2d):
            name = 'bn_{}'.format(i)
        else:
            raise RuntimeError('Unrecognized layer: {}'.format(layer.__class__.__name__))

        model.add_module(name, layer)

        if name in content_layers:
            # add content loss:
            target = model(content_img).detach()
            content_loss = ContentLoss(target)
            model.add_module("content_loss_{}".format(i), content_loss)
            content_losses.append(content_loss)

        if name in style_layers:
            # add style loss:
            target_feature = model(style_img).detach()
            style_loss = StyleLoss(target_feature)
            model.add_module("style_loss_{}".format(i), style_loss)
            style_losses.append(style_loss)

    # now we trim off the layers after the last content and style losses
    for i in range(len(model) - 1, -1, -1):
        if isinstance(model[i], ContentLoss) or isinstance(model[i], StyleLoss):
            break

    model = model[:(i + 1)]

    return model, style_losses, content_losses


input_img = content_img.clone()
# if you want to use white noise by using the following code:
#
# .. code-block:: python
#
#    input_img = torch.randn(content_img.data.size())


def get_input_optimizer(input_img):
    # this line to show that input is a parameter that requires a gradient
    optimizer = optim.LBFGS([input_img])
    return optimizer


def run_style_transfer(cnn, normalization_mean, normalization_std,
                       content_img, style_img, input_img, num_steps=300,
                       style_weight=1000000, content_weight=1):
    # Run the style transfer.
    print('Building the style transfer model..')
    model, style_losses, content_losses = get_style_model_and_losses(cnn,
        normalization_mean, normalization_std, style_img, content_img)

    # We want to optimize the input and not the model parameters so we
    # update all the requires_grad fields accordingly
    input_img.requires_grad_(True)
    # We also put the model in evaluation mode, so that specific layers
    # such as dropout or batch normalization layers behave correctly.
    model.eval()
    model.requires_grad_(False)

    optimizer = get_input_optimizer(input_img)

    print('Optimizing..')
    run = [0]
    while run[0] <= num_steps:

        def closure():
            # correct the values of updated input image
            with torch.no_grad():
                input_img.clamp_(0, 1)

            optimizer.zero_grad()
            model(input_img)
            style_score = 0
            content_score = 0

            for sl in style_losses:
                style_score += sl.loss
            for cl in content_losses:
                content_score += cl.loss

            style_score *= style_weight
            content_score *= content_weight

            loss = style_score + content_score
            loss.backward()

            run[0] += 1
            SCORES.append((style_score.item(), content_score.item()))
            if run[0] % 50 == 0:
                print("run {}:".format(run))
                print('Style Loss : {:4f} Content Loss: {:4f}'.format(
                    style_score.item(), content_score.item()))
                print()

            return style_score + content_score

        optimizer.step(closure)

    # a last correction...
    with torch.no_grad():
        input_img.clamp_(0, 1)

    return input_img, model


SCORES = []
output, MODEL = run_style_transfer(cnn, cnn_normalization_mean, cnn_normalization_std,
                            content_img, style_img, input_img, num_steps=STEPS)
OUTPUT = output.detach().cpu().squeeze(0).numpy()
"""


def _weights(seed=0):
    rng = np.random.default_rng(seed)
    shapes, in_ch, idx = {}, 3, 0
    for v in [8, 8, "M", 16, 16, "M", 16]:
        if v == "M":
            idx += 1
            continue
        shapes[f"{idx}.weight"] = (v, in_ch, 3, 3)
        shapes[f"{idx}.bias"] = (v,)
        in_ch, idx = v, idx + 2
    return {
        k: (rng.normal(0, 1, s) * np.sqrt(2 / np.prod(s[1:]))).astype(np.float32)
        for k, s in shapes.items()
    }


def _images(size=24):
    y, x = np.mgrid[0:size, 0:size] / size
    style = np.stack([np.sin(12 * x) ** 2, np.cos(9 * y) ** 2, (np.sin(7 * (x + y)) + 1) / 2], -1)
    content = np.stack([x, y, np.exp(-((x - 0.5) ** 2 + (y - 0.5) ** 2) * 8)], -1)
    return style.astype(np.float32), content.astype(np.float32)


def _run(imports, steps=3):
    style, content = _images()
    env = {"STYLE": style, "CONTENT": content, "WEIGHTS": _weights(), "IMSIZE": 24, "STEPS": steps}
    try:
        exec(compile(imports + FEATURES + PROGRAM, "neural_style_port", "exec"), env)
    finally:
        # the program calls torch.set_default_device(device); in PyTorch that installs a
        # function mode that would stay for the tests after this one
        env["torch"].set_default_device(None)
    return env


def test_style_transfer_optimizes_the_input_image():
    env = _run(FERRO_IMPORTS)
    scores = np.array(env["SCORES"])
    total = scores.sum(1)
    assert len(scores) > 4 and np.all(np.isfinite(scores))
    assert total[-1] < 0.5 * total[0]  # the style loss falls (the content loss starts at 0)
    out = env["OUTPUT"]
    assert out.shape == (3, 24, 24) and out.min() >= 0 and out.max() <= 1
    # the model was cut after its last loss module (style_loss_5) and nothing in it trains
    names = [n for n, _ in env["MODEL"].named_children()]
    assert names[-1] == "style_loss_5" and names[0] == "0" and "pool_4" in names
    assert not any(p.requires_grad for p in env["MODEL"].parameters())
    assert names.index("content_loss_4") == names.index("conv_4") + 1


@pytest.mark.torch
def test_style_transfer_matches_torch():
    pytest.importorskip("torch")
    ours, theirs = _run(FERRO_IMPORTS), _run(TORCH_IMPORTS)
    assert len(ours["SCORES"]) == len(theirs["SCORES"])
    np.testing.assert_allclose(ours["SCORES"], theirs["SCORES"], rtol=2e-3, atol=1e-6)
    np.testing.assert_allclose(ours["OUTPUT"], theirs["OUTPUT"], rtol=1e-3, atol=1e-4)
