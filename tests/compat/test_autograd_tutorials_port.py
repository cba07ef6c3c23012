# ruff: noqa: E501  (the ported programs keep their upstream line lengths)
"""PyTorch's autograd tutorials, run as one source each with only the import lines changed:

* "A Gentle Introduction to ``torch.autograd``" (the 60-minute blitz): a ``resnet18`` (the
  torchvision source of test_resnet_port.py, random weights) on ``torch.rand(1, 3, 64, 64)``,
  ``(prediction - labels).sum().backward()``, SGD with momentum; ``Q = 3*a**3 - b**2`` with
  ``Q.backward(gradient=external_grad)`` and ``9*a**2 == a.grad``; ``requires_grad`` of sums;
  freezing every parameter (``param.requires_grad = False``), a new ``model.fc`` and SGD over
  all parameters, frozen ones included (ferro's optimizers refused a leaf that does not
  require grad: a gap found by this port); only the new head changes.
* "Automatic Differentiation with ``torch.autograd``" (the basics): ``torch.matmul(x, w)+b``,
  ``binary_cross_entropy_with_logits``, ``z.grad_fn``/``loss.grad_fn``, ``torch.no_grad()`` and
  ``detach()``, and the Jacobian-product section: ``torch.eye(4, 5, requires_grad=True)``,
  ``(inp+1).pow(2).t()``, ``out.backward(torch.ones_like(out), retain_graph=True)`` twice
  (accumulating) and after ``inp.grad.zero_()``.
* "Adversarial Example Generation" (FGSM): the MNIST ``Net`` loaded with ``torch.load(...,
  map_location=device, weights_only=True)``, ``data.requires_grad = True``, ``output.max(1,
  keepdim=True)[1]``, ``.item()`` comparisons, ``model.zero_grad()``, ``data.grad.data``,
  ``denorm`` (``torch.tensor(list).to(device)``, ``std.view(1, -1, 1, 1)``), ``fgsm_attack``
  (``sign()``, ``torch.clamp``), ``perturbed_data.squeeze().detach().cpu().numpy()``, the
  accuracy over ``len(test_loader)``. The pretrained weights are trained here (a few epochs on
  scikit-learn's 8x8 digits upscaled to 28x28, as test_mnist_cnn_port.py) and saved with
  ``torch.save``; torchvision's ``transforms.Normalize`` on a tensor is a two-line stand-in.
"""

import functools

import numpy as np
import pytest
import test_mnist_cnn_port as mnist
import test_resnet_port as resnet

sklearn_datasets = pytest.importorskip("sklearn.datasets")

BLITZ = """
model = resnet18(weights=None)
data = torch.rand(1, 3, 64, 64)
labels = torch.rand(1, 1000)

prediction = model(data)  # forward pass
loss = (prediction - labels).sum()
loss.backward()  # backward pass

optim = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
before = model.conv1.weight.detach().clone()
optim.step()  # gradient descent
CONV1_MOVED = not torch.equal(before, model.conv1.weight)

a = torch.tensor([2., 3.], requires_grad=True)
b = torch.tensor([6., 4.], requires_grad=True)
Q = 3*a**3 - b**2
external_grad = torch.tensor([1., 1.])
Q.backward(gradient=external_grad)
# Check if collected gradients are correct
CHECKS = [(9*a**2 == a.grad).tolist(), (-2*b == b.grad).tolist()]

x = torch.rand(5, 5)
y = torch.rand(5, 5)
z = torch.rand((5, 5), requires_grad=True)

a = x + y
print(f"Does `a` require gradients?: {a.requires_grad}")
b = x + z
print(f"Does `b` require gradients?: {b.requires_grad}")
REQUIRES = (a.requires_grad, b.requires_grad)

from torch import nn, optim

model = resnet18(weights=None)

# Freeze all the parameters in the network
for param in model.parameters():
    param.requires_grad = False

model.fc = nn.Linear(512, 10)

# Optimize only the classifier
optimizer = optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
frozen = {k: v.clone() for k, v in model.state_dict().items()}
F.cross_entropy(model(torch.rand(2, 3, 64, 64)), torch.tensor([1, 7])).backward()
optimizer.step()
CHANGED = sorted(k for k, v in model.named_parameters() if not torch.equal(v, frozen[k]))
"""

BASICS = """
x = torch.ones(5)  # input tensor
y = torch.zeros(3)  # expected output
w = torch.randn(5, 3, requires_grad=True)
b = torch.randn(3, requires_grad=True)
if INIT is not None:  # harness: the same start for both libraries
    w, b = (torch.from_numpy(v).requires_grad_() for v in INIT)
z = torch.matmul(x, w)+b
loss = torch.nn.functional.binary_cross_entropy_with_logits(z, y)

print(f"Gradient function for z = {z.grad_fn}")
print(f"Gradient function for loss = {loss.grad_fn}")
GRAD_FNS = (z.grad_fn is not None, loss.grad_fn is not None)

loss.backward()
print(w.grad)
print(b.grad)
GRADS = (w.grad.numpy().copy(), b.grad.numpy().copy())

z = torch.matmul(x, w)+b
print(z.requires_grad)

with torch.no_grad():
    z = torch.matmul(x, w)+b
print(z.requires_grad)

z = torch.matmul(x, w)+b
z_det = z.detach()
print(z_det.requires_grad)
NO_GRAD = z.requires_grad, z_det.requires_grad

inp = torch.eye(4, 5, requires_grad=True)
out = (inp+1).pow(2).t()
out.backward(torch.ones_like(out), retain_graph=True)
print(f"First call\\n{inp.grad}")
JACOBIAN = [inp.grad.numpy().copy()]
out.backward(torch.ones_like(out), retain_graph=True)
print(f"\\nSecond call\\n{inp.grad}")
JACOBIAN.append(inp.grad.numpy().copy())
inp.grad.zero_()
out.backward(torch.ones_like(out), retain_graph=True)
print(f"\\nCall after zeroing gradients\\n{inp.grad}")
JACOBIAN.append(inp.grad.numpy().copy())
"""

FGSM = (
    """
epsilons = [0, .05, .1, .2, .3]
pretrained_model = PRETRAINED_PATH
use_cuda = True
torch.manual_seed(42)

"""
    + mnist.NET
    + """
# MNIST Test dataset and dataloader declaration
test_loader = torch.utils.data.DataLoader(TEST_SET, batch_size=1, shuffle=False)

device = torch.device("cuda" if use_cuda and torch.cuda.is_available() else "cpu")

# Initialize the network
model = Net().to(device)

# Load the pretrained model
model.load_state_dict(torch.load(pretrained_model, map_location=device, weights_only=True))

# Set the model in evaluation mode. In this case this is for the Dropout layers
model.eval()

# FGSM attack code
def fgsm_attack(image, epsilon, data_grad):
    # Collect the element-wise sign of the data gradient
    sign_data_grad = data_grad.sign()
    # Create the perturbed image by adjusting each pixel of the input image
    perturbed_image = image + epsilon*sign_data_grad
    # Adding clipping to maintain [0,1] range
    perturbed_image = torch.clamp(perturbed_image, 0, 1)
    # Return the perturbed image
    return perturbed_image

# restores the tensors to their original scale
def denorm(batch, mean=[0.1307], std=[0.3081]):
    if isinstance(mean, list):
        mean = torch.tensor(mean).to(device)
    if isinstance(std, list):
        std = torch.tensor(std).to(device)

    return batch * std.view(1, -1, 1, 1) + mean.view(1, -1, 1, 1)

def test( model, device, test_loader, epsilon ):

    # Accuracy counter
    correct = 0
    adv_examples = []

    # Loop over all examples in test set
    for data, target in test_loader:

        # Send the data and label to the device
        data, target = data.to(device), target.to(device)

        # Set requires_grad attribute of tensor. Important for Attack
        data.requires_grad = True

        # Forward pass the data through the model
        output = model(data)
        init_pred = output.max(1, keepdim=True)[1] # get the index of the max log-probability

        # If the initial prediction is wrong, don't bother attacking, just move on
        if init_pred.item() != target.item():
            continue

        # Calculate the loss
        loss = F.nll_loss(output, target)

        # Zero all existing gradients
        model.zero_grad()

        # Calculate gradients of model in backward pass
        loss.backward()

        # Collect ``datagrad``
        data_grad = data.grad.data

        # Restore the data to its original scale
        data_denorm = denorm(data)

        # Call FGSM Attack
        perturbed_data = fgsm_attack(data_denorm, epsilon, data_grad)

        # Reapply normalization
        perturbed_data_normalized = transforms.Normalize((0.1307,), (0.3081,))(perturbed_data)

        # Re-classify the perturbed image
        output = model(perturbed_data_normalized)

        # Check for success
        final_pred = output.max(1, keepdim=True)[1] # get the index of the max log-probability
        if final_pred.item() == target.item():
            correct += 1
            # Special case for saving 0 epsilon examples
            if epsilon == 0 and len(adv_examples) < 5:
                adv_ex = perturbed_data.squeeze().detach().cpu().numpy()
                adv_examples.append( (init_pred.item(), final_pred.item(), adv_ex) )
        else:
            # Save some adv examples for visualization later
            if len(adv_examples) < 5:
                adv_ex = perturbed_data.squeeze().detach().cpu().numpy()
                adv_examples.append( (init_pred.item(), final_pred.item(), adv_ex) )

    # Calculate final accuracy for this epsilon
    final_acc = correct/float(len(test_loader))
    print(f"Epsilon: {epsilon}\\tTest Accuracy = {correct} / {len(test_loader)} = {final_acc}")

    # Return the accuracy and an adversarial example
    return final_acc, adv_examples

accuracies = []
examples = []

# Run test for each epsilon
for eps in epsilons:
    acc, ex = test(model, device, test_loader, eps)
    accuracies.append(acc)
    examples.append(ex)
"""
)


class transforms:
    """torchvision's ``Normalize`` applied to a tensor (the FGSM tutorial's one use)."""

    class Normalize:
        def __init__(self, mean, std):
            self.mean, self.std = mean[0], std[0]

        def __call__(self, t):
            return (t - self.mean) / self.std


def _digits():
    digits = sklearn_datasets.load_digits()
    x = (digits.images / 16.0).astype(np.float32)
    x = np.pad(np.kron(x, np.ones((3, 3), np.float32)), ((0, 0), (2, 2), (2, 2)))[:, None]
    return (x - 0.1307) / 0.3081, digits.target.astype(np.int64)


@functools.cache
def _pretrained():
    """The tutorial's Net trained on ferro for a few epochs (NumPy arrays; cached)."""
    import ferro
    import ferro.nn.functional as F

    env = {}
    source = resnet.FERRO_IMPORTS + FGSM[: FGSM.index("# MNIST Test")]
    env = {"PRETRAINED_PATH": None}
    exec(compile(source, "fgsm", "exec"), env)
    x, y = _digits()
    ferro.manual_seed(0)
    model = env["Net"]()
    opt = ferro.optim.Adadelta(model.parameters(), lr=1.0)
    for _ in range(3):
        for i in range(0, 384, 64):
            opt.zero_grad()
            F.nll_loss(model(ferro.tensor(x[i : i + 64])), ferro.tensor(y[i : i + 64])).backward()
            opt.step()
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def _run(imports, source, **params):
    env = {"INIT": None, "transforms": transforms, **params}
    if "import ferro" in imports:  # the blitz imports nn and optim a second time, from torch
        source = source.replace("from torch import", "from ferro import")
    exec(compile(imports + resnet.RESNET + source, "autograd_tutorials_port", "exec"), env)
    return env


def _fgsm(imports, lib, weights, tmp_path):
    path = str(tmp_path / f"lenet_mnist_model_{lib.__name__}.pth")
    lib.save({k: lib.from_numpy(v) for k, v in weights.items()}, path)
    x, y = _digits()
    data = lib.utils.data.TensorDataset(lib.from_numpy(x[1500:1540]), lib.from_numpy(y[1500:1540]))
    return _run(imports, FGSM, PRETRAINED_PATH=path, TEST_SET=data)


def test_the_blitz_autograd_tutorial():
    env = _run(resnet.FERRO_IMPORTS, BLITZ)
    assert env["CONV1_MOVED"] and env["CHECKS"] == [[True, True], [True, True]]
    assert env["REQUIRES"] == (False, True)
    assert env["CHANGED"] == ["fc.bias", "fc.weight"]  # the frozen body's parameters stay


def test_the_autograd_basics_tutorial():
    env = _run(resnet.FERRO_IMPORTS, BASICS)
    assert env["GRAD_FNS"] == (True, True) and env["NO_GRAD"] == (True, False)
    inp = np.eye(4, 5)
    first, second, after_zero = env["JACOBIAN"]
    np.testing.assert_array_equal(first, 2 * (inp + 1))
    np.testing.assert_array_equal(second, 4 * (inp + 1))
    np.testing.assert_array_equal(after_zero, first)


def test_fgsm_lowers_the_accuracy_as_epsilon_grows(tmp_path):
    import ferro

    env = _fgsm(resnet.FERRO_IMPORTS, ferro, _pretrained(), tmp_path)
    acc = env["accuracies"]
    assert acc[0] >= 0.8 and acc[-1] < 0.5 * acc[0]
    assert np.all(np.diff(acc) <= 0)
    init_pred, final_pred, adv = env["examples"][-1][0]
    assert adv.shape == (28, 28) and adv.min() >= 0 and adv.max() <= 1 and init_pred != final_pred


@pytest.mark.torch
def test_the_autograd_tutorials_match_torch(tmp_path):
    torch = pytest.importorskip("torch")
    import ferro

    init = [
        v.astype(np.float32) for v in (np.random.default_rng(0).standard_normal((5, 3)), np.ones(3))
    ]
    ours, theirs = (
        _run(imp, BASICS, INIT=init) for imp in (resnet.FERRO_IMPORTS, resnet.TORCH_IMPORTS)
    )
    for a, b in zip(ours["GRADS"], theirs["GRADS"], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    np.testing.assert_array_equal(ours["JACOBIAN"], theirs["JACOBIAN"])
    blitz = _run(resnet.TORCH_IMPORTS, BLITZ)
    assert blitz["CHECKS"] == [[True, True], [True, True]] and blitz["CHANGED"] == [
        "fc.bias",
        "fc.weight",
    ]
    weights = _pretrained()
    ours = _fgsm(resnet.FERRO_IMPORTS, ferro, weights, tmp_path)
    theirs = _fgsm(resnet.TORCH_IMPORTS, torch, weights, tmp_path)
    np.testing.assert_allclose(ours["accuracies"], theirs["accuracies"], atol=1 / 40 + 1e-9)
