# ruff: noqa: E501  (the ported programs keep their upstream line lengths)
"""Two PyTorch tutorials on custom ``autograd.Function``s, run as one source with only the import
lines changed:

* "Double Backward with Custom Functions": ``Square`` (saves an input), ``Exp`` (saves an
  output), ``Sinh`` (returns its intermediates as extra outputs so that the backward is
  differentiable), ``SinhBad`` (keeps them on ``ctx``: its gradient has no graph and
  ``gradgradcheck`` must fail) and ``Cube``/``CubeBackward`` (a backward that is itself a Function),
  each checked with ``torch.autograd.gradcheck``/``gradgradcheck`` (gaps found by this port:
  ferro had them only as ``ferro.testing.gradcheck``).
* "Fusing Convolution and Batch Norm using Custom Function": ``Conv2D`` whose backward is
  ``F.conv2d`` of transposes and ``F.conv_transpose2d`` under ``@once_differentiable``,
  ``BatchNorm`` with a hand-derived backward of in-place updates, ``FusedConvBN2DFunction``
  whose ``backward`` returns seven gradients for two inputs (the extra ones ``None``, which
  PyTorch accepts: a gap found by this port), gradchecked with ``fast_mode=False``; then the
  ``FusedConvBN`` module (``torch.empty(*shape, device=None, dtype=None)``,
  ``kaiming_uniform_``) trained in the MNIST ``Net`` with Adadelta and ``StepLR`` against the
  unfused ``Conv2d`` + ``BatchNorm2d(affine=False, track_running_stats=False)`` version, test
  under ``torch.inference_mode()``.

Differences: the gradchecked tensors are smaller, MNIST is replaced by generated 12x12 images (a bright quadrant, four classes) in a
``TensorDataset``, so ``fc1`` takes ``64 * 4 * 4`` features; the dropout probability is a
parameter (0 for the comparison with PyTorch, whose generator differs); the CUDA peak-memory
calls run only when CUDA is available, as the tutorial's loaders' CUDA options do.
"""

import numpy as np
import pytest

TORCH_IMPORTS = """\
import torch
from torch.autograd.function import once_differentiable
import torch.nn.functional as F
import torch.nn as nn
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import TensorDataset
"""

FERRO_IMPORTS = """\
import ferro as torch
from ferro.autograd.function import once_differentiable
import ferro.nn.functional as F
import ferro.nn as nn
import ferro.optim as optim
from ferro.optim.lr_scheduler import StepLR
from ferro.utils.data import TensorDataset
"""

DOUBLE_BACKWARD = """
CHECKS = {}


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        # Because we are saving one of the inputs use `save_for_backward`
        ctx.save_for_backward(x)
        return x**2

    @staticmethod
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        return grad_out * 2 * x

x = torch.rand(3, 3, requires_grad=True, dtype=torch.double)
CHECKS['square'] = (torch.autograd.gradcheck(Square.apply, x), torch.autograd.gradgradcheck(Square.apply, x))


class Exp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        result = torch.exp(x)
        ctx.save_for_backward(result)
        return result

    @staticmethod
    def backward(ctx, grad_out):
        result, = ctx.saved_tensors
        return result * grad_out

x = torch.tensor(1., requires_grad=True, dtype=torch.double).clone()
CHECKS['exp'] = (torch.autograd.gradcheck(Exp.apply, x), torch.autograd.gradgradcheck(Exp.apply, x))


class Sinh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        expx = torch.exp(x)
        expnegx = torch.exp(-x)
        ctx.save_for_backward(expx, expnegx)
        # the intermediates are outputs too, so that the backward graph reaches them
        return (expx - expnegx) / 2, expx, expnegx

    @staticmethod
    def backward(ctx, grad_out, _grad_out_exp, _grad_out_negexp):
        expx, expnegx = ctx.saved_tensors
        grad_input = grad_out * (expx + expnegx) / 2
        grad_input += _grad_out_exp * expx
        grad_input -= _grad_out_negexp * expnegx
        return grad_input

def sinh(x):
    return Sinh.apply(x)[0]

x = torch.rand(3, 3, requires_grad=True, dtype=torch.double)
CHECKS['sinh'] = (torch.autograd.gradcheck(sinh, x), torch.autograd.gradgradcheck(sinh, x))


class SinhBad(torch.autograd.Function):
    # what NOT to do: intermediates kept on ctx
    @staticmethod
    def forward(ctx, x):
        expx = torch.exp(x)
        expnegx = torch.exp(-x)
        ctx.expx = expx
        ctx.expnegx = expnegx
        return (expx - expnegx) / 2

    @staticmethod
    def backward(ctx, grad_out):
        expx = ctx.expx
        expnegx = ctx.expnegx
        grad_input = grad_out * (expx + expnegx) / 2
        return grad_input

out = SinhBad.apply(x)
grad_x, = torch.autograd.grad(out.sum(), x, create_graph=True)
CHECKS['sinh_bad_graph'] = (grad_x.requires_grad, grad_x.grad_fn)
CHECKS['sinh_bad'] = (torch.autograd.gradcheck(SinhBad.apply, x), torch.autograd.gradgradcheck(SinhBad.apply, x, raise_exception=False))
try:
    torch.autograd.gradgradcheck(SinhBad.apply, x)
except RuntimeError as e:
    CHECKS['sinh_bad_error'] = type(e).__name__


def cube_forward(x):
    return x**3

def cube_backward(grad_out, x):
    return grad_out * 3 * x**2

def cube_backward_backward(grad_out, sav_grad_out, x):
    return grad_out * sav_grad_out * 6 * x

def cube_backward_backward_grad_out(grad_out, x):
    return grad_out * 3 * x**2

class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return cube_forward(x)

    @staticmethod
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        return CubeBackward.apply(grad_out, x)

class CubeBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, grad_out, x):
        ctx.save_for_backward(x, grad_out)
        return cube_backward(grad_out, x)

    @staticmethod
    def backward(ctx, grad_out):
        x, sav_grad_out = ctx.saved_tensors
        dx = cube_backward_backward(grad_out, sav_grad_out, x)
        dgrad_out = cube_backward_backward_grad_out(grad_out, x)
        return dgrad_out, dx

x = torch.tensor(2., requires_grad=True, dtype=torch.double)
CHECKS['cube'] = (torch.autograd.gradcheck(Cube.apply, x), torch.autograd.gradgradcheck(Cube.apply, x))
grad_x, = torch.autograd.grad(Cube.apply(x), x, create_graph=True)
grad_grad_x, = torch.autograd.grad(grad_x, x)
CHECKS['cube_values'] = (grad_x.item(), grad_grad_x.item())
"""

CONV_BN = """
def convolution_backward(grad_out, X, weight):
    grad_input = F.conv2d(X.transpose(0, 1), grad_out.transpose(0, 1)).transpose(0, 1)
    grad_X = F.conv_transpose2d(grad_out, weight)
    return grad_X, grad_input

class Conv2D(torch.autograd.Function):
    @staticmethod
    def forward(ctx, X, weight):
        ctx.save_for_backward(X, weight)
        return F.conv2d(X, weight)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        X, weight = ctx.saved_tensors
        return convolution_backward(grad_out, X, weight)

weight = torch.rand(2, 3, 3, 3, requires_grad=True, dtype=torch.double)
X = torch.rand(2, 3, 5, 5, requires_grad=True, dtype=torch.double)
GRADCHECKS = [torch.autograd.gradcheck(Conv2D.apply, (X, weight))]

def unsqueeze_all(t):
    # unsqueeze the dimensions reduced over
    return t[None, :, None, None]

def batch_norm_backward(grad_out, X, sum, sqrt_var, N, eps):
    tmp = -((X - unsqueeze_all(sum) / N) * grad_out).sum(dim=(0, 2, 3))
    d_denom = tmp / (sqrt_var + eps)**2  # d_denom = -num / denom**2
    d_var = d_denom / (2 * sqrt_var)  # denom = torch.sqrt(var) + eps
    d_mean_dx = grad_out / unsqueeze_all(sqrt_var + eps)
    d_mean_dx = unsqueeze_all(-d_mean_dx.sum(dim=(0, 2, 3)) / N)
    grad_input = X * unsqueeze_all(d_var * N)
    grad_input += unsqueeze_all(-d_var * sum)
    grad_input *= 2 / ((N - 1) * N)
    grad_input += d_mean_dx
    grad_input *= unsqueeze_all(sqrt_var + eps)
    grad_input += grad_out
    grad_input /= unsqueeze_all(sqrt_var + eps)  # sqrt_var + eps > 0!
    return grad_input

class BatchNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, X, eps=1e-3):
        sum = X.sum(dim=(0, 2, 3))
        var = X.var(unbiased=True, dim=(0, 2, 3))
        N = X.numel() / X.size(1)
        sqrt_var = torch.sqrt(var)
        ctx.save_for_backward(X)
        ctx.eps = eps
        ctx.sum = sum
        ctx.N = N
        ctx.sqrt_var = sqrt_var
        mean = sum / N
        denom = sqrt_var + eps
        return (X - unsqueeze_all(mean)) / unsqueeze_all(denom)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        X, = ctx.saved_tensors
        return batch_norm_backward(grad_out, X, ctx.sum, ctx.sqrt_var, ctx.N, ctx.eps)

a = torch.rand(1, 2, 3, 4, requires_grad=True, dtype=torch.double)
GRADCHECKS.append(torch.autograd.gradcheck(BatchNorm.apply, (a,), fast_mode=False))

class FusedConvBN2DFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, X, conv_weight, eps=1e-3):
        assert X.ndim == 4  # N, C, H, W
        # only the convolution's inputs are saved
        ctx.save_for_backward(X, conv_weight)
        X = F.conv2d(X, conv_weight)
        sum = X.sum(dim=(0, 2, 3))
        var = X.var(unbiased=True, dim=(0, 2, 3))
        N = X.numel() / X.size(1)
        sqrt_var = torch.sqrt(var)
        ctx.eps = eps
        ctx.sum = sum
        ctx.N = N
        ctx.sqrt_var = sqrt_var
        mean = sum / N
        denom = sqrt_var + eps
        out = X - unsqueeze_all(mean)
        out /= unsqueeze_all(denom)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        X, conv_weight, = ctx.saved_tensors
        # recompute the convolution for batch norm's backward
        X_conv_out = F.conv2d(X, conv_weight)
        grad_out = batch_norm_backward(grad_out, X_conv_out, ctx.sum, ctx.sqrt_var,
                                       ctx.N, ctx.eps)
        grad_X, grad_input = convolution_backward(grad_out, X, conv_weight)
        return grad_X, grad_input, None, None, None, None, None

import math

class FusedConvBN(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, exp_avg_factor=0.1,
                 eps=1e-3, device=None, dtype=None):
        super(FusedConvBN, self).__init__()
        factory_kwargs = {'device': device, 'dtype': dtype}
        weight_shape = (out_channels, in_channels, kernel_size, kernel_size)
        self.conv_weight = nn.Parameter(torch.empty(*weight_shape, **factory_kwargs))
        num_features = out_channels
        self.num_features = num_features
        self.eps = eps
        self.reset_parameters()

    def forward(self, X):
        return FusedConvBN2DFunction.apply(X, self.conv_weight, self.eps)

    def reset_parameters(self) -> None:
        nn.init.kaiming_uniform_(self.conv_weight, a=math.sqrt(5))

weight = torch.rand(3, 2, 3, 3, requires_grad=True, dtype=torch.double)
X = torch.rand(2, 2, 4, 4, requires_grad=True, dtype=torch.double)
GRADCHECKS.append(torch.autograd.gradcheck(FusedConvBN2DFunction.apply, (X, weight)))


class Net(nn.Module):
    def __init__(self, fused=True):
        super(Net, self).__init__()
        self.fused = fused
        if fused:
            self.convbn1 = FusedConvBN(1, 32, 3)
            self.convbn2 = FusedConvBN(32, 64, 3)
        else:
            self.conv1 = nn.Conv2d(1, 32, 3, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(32, affine=False, track_running_stats=False)
            self.conv2 = nn.Conv2d(32, 64, 3, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(64, affine=False, track_running_stats=False)
        self.fc1 = nn.Linear(64 * 4 * 4, 128)
        self.dropout = nn.Dropout(DROPOUT)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        if self.fused:
            x = self.convbn1(x)
        else:
            x = self.conv1(x)
            x = self.bn1(x)
        x = F.relu(x)
        if self.fused:
            x = self.convbn2(x)
        else:
            x = self.conv2(x)
            x = self.bn2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = F.relu(x)
        x = x.flatten(1)
        x = self.fc1(x)
        x = self.dropout(x)
        x = F.relu(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output

def train(model, device, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        LOSSES[-1].append(loss.item())
        if batch_idx % 2 == 0:
            print('Train Epoch: {} [{}/{} ({:.0f}%)]\\tLoss: {:.6f}'.format(
                epoch, batch_idx * len(data), len(train_loader.dataset),
                100. * batch_idx / len(train_loader), loss.item()))

def test(model, device, test_loader):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.inference_mode():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction='sum').item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    test_loss /= len(test_loader.dataset)
    TESTS[-1].append((test_loss, correct))

use_cuda = torch.cuda.is_available()
device = torch.device("cuda" if use_cuda else "cpu")
train_kwargs = {'batch_size': 32}
test_kwargs = {'batch_size': 64}

dataset1 = TensorDataset(torch.from_numpy(IMAGES[:64]), torch.from_numpy(LABELS[:64]))
dataset2 = TensorDataset(torch.from_numpy(IMAGES[64:]), torch.from_numpy(LABELS[64:]))
train_loader = torch.utils.data.DataLoader(dataset1, **train_kwargs)
test_loader = torch.utils.data.DataLoader(dataset2, **test_kwargs)

LOSSES, TESTS, STATES = [], [], []
for fused in (True, False):
    torch.manual_seed(123456)
    if use_cuda:
        torch.cuda.reset_peak_memory_stats()

    model = Net(fused=fused).to(device)
    if INIT is not None:
        model.load_state_dict({k: torch.from_numpy(INIT[k.replace('convbn', 'conv').replace('conv_weight', 'weight')]) for k in model.state_dict()})
    STATES.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
    optimizer = optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
    LOSSES.append([])
    TESTS.append([])

    for epoch in range(EPOCHS):
        train(model, device, train_loader, optimizer, epoch)
        test(model, device, test_loader)
        scheduler.step()
"""


def _images(n=96, seed=0):
    """12x12 images with one bright quadrant; the label is the quadrant."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 4, n)
    images = rng.normal(0.0, 0.3, (n, 1, 12, 12)).astype(np.float32)
    for img, lab in zip(images, labels, strict=True):
        r, c = divmod(int(lab), 2)
        img[0, 6 * r : 6 * r + 6, 6 * c : 6 * c + 6] += 1.0
    return images, labels.astype(np.int64)


def _run(imports, source, **params):
    env = dict(params)
    exec(compile(imports + source, "custom_function_port", "exec"), env)
    return env


def _conv_bn(imports, **params):
    images, labels = _images()
    return _run(imports, CONV_BN, IMAGES=images, LABELS=labels, **params)


def test_the_double_backward_tutorial_functions_pass_their_checks():
    checks = _run(FERRO_IMPORTS, DOUBLE_BACKWARD)["CHECKS"]
    for name in ("square", "exp", "sinh", "cube"):
        assert checks[name] == (True, True), name
    # SinhBad's gradient does not depend on x in the graph: first order right, second wrong.
    assert checks["sinh_bad_graph"] == (False, None)
    assert checks["sinh_bad"] == (True, False)
    assert checks["sinh_bad_error"] == "GradcheckError"
    assert checks["cube_values"] == (12.0, 12.0)  # 3 x^2 and 6 x at x = 2


def test_the_fused_conv_bn_function_passes_gradcheck_and_trains():
    env = _conv_bn(FERRO_IMPORTS, DROPOUT=0.5, EPOCHS=3, INIT=None)
    assert env["GRADCHECKS"] == [True, True, True]
    # manual_seed(123456) before each Net: the fused and unfused nets start from the same weights
    fused, unfused = env["STATES"]
    for k, v in unfused.items():
        np.testing.assert_array_equal(
            fused[k.replace("conv", "convbn").replace("weight", "conv_weight", k[:4] == "conv")],
            v,
        )
    for losses, tests in zip(env["LOSSES"], env["TESTS"], strict=True):
        assert len(losses) == 6 and np.all(np.isfinite(losses))
        assert losses[-1] < 0.5 * losses[0]
        assert tests[-1][1] >= 28  # of 32 test images


@pytest.mark.torch
def test_the_custom_functions_match_torch():
    pytest.importorskip("torch")
    assert _run(TORCH_IMPORTS, DOUBLE_BACKWARD)["CHECKS"]["sinh_bad"] == (True, False)
    # STATES holds each net's weights before training: the unfused net's start both (the fused
    # net starts from the same, test above).
    ours = _conv_bn(FERRO_IMPORTS, DROPOUT=0.0, EPOCHS=2, INIT=None)
    theirs = _conv_bn(TORCH_IMPORTS, DROPOUT=0.0, EPOCHS=2, INIT=ours["STATES"][1])
    assert theirs["GRADCHECKS"] == [True, True, True]
    np.testing.assert_allclose(ours["LOSSES"], theirs["LOSSES"], rtol=2e-4, atol=1e-5)
    for a, b in zip(ours["TESTS"], theirs["TESTS"], strict=True):
        np.testing.assert_allclose([t[0] for t in a], [t[0] for t in b], rtol=2e-4)
