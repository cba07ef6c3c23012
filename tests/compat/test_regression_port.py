# ruff: noqa: E501  (the ported program keeps its upstream line lengths)
"""pytorch/examples regression/main.py (fitting a degree-4 polynomial with one ``Linear``), run as
one source with only its import lines changed: ``torch.randn(POLY_DEGREE, 1) * 5`` targets,
``make_features`` (``unsqueeze`` and ``torch.cat`` of powers), ``x.mm(W_target) +
b_target.item()``, ``poly_desc`` formatting the elements of ``fc.weight.view(-1)`` and
``b[0]`` with ``'{:+.2f}'`` (``Tensor.__format__`` of 0-d tensors, one that requires grad),
``fc.zero_grad()``, ``F.smooth_l1_loss``, the manual update ``param.data.add_(-0.1 *
param.grad)`` and the loop over ``itertools.count(1)`` until the loss is below 1e-3.
"""

import re

import pytest

TORCH_IMPORTS = """\
from __future__ import print_function
from itertools import count

import torch
import torch.nn.functional as F
"""

FERRO_IMPORTS = """\
from __future__ import print_function
from itertools import count

import ferro as torch
import ferro.nn.functional as F
"""

PROGRAM = """
POLY_DEGREE = 4
torch.manual_seed(SEED)
W_target = torch.randn(POLY_DEGREE, 1) * 5
b_target = torch.randn(1) * 5


def make_features(x):
    \"\"\"Builds features i.e. a matrix with columns [x, x^2, x^3, x^4].\"\"\"
    x = x.unsqueeze(1)
    return torch.cat([x ** i for i in range(1, POLY_DEGREE+1)], 1)


def f(x):
    \"\"\"Approximated function.\"\"\"
    return x.mm(W_target) + b_target.item()


def poly_desc(W, b):
    \"\"\"Creates a string description of a polynomial.\"\"\"
    result = 'y = '
    for i, w in enumerate(W):
        result += '{:+.2f} x^{} '.format(w, i + 1)
    result += '{:+.2f}'.format(b[0])
    return result


def get_batch(batch_size=32):
    \"\"\"Builds a batch i.e. (x, f(x)) pair.\"\"\"
    random = torch.randn(batch_size)
    x = make_features(random)
    y = f(x)
    return x, y


# Define model
fc = torch.nn.Linear(W_target.size(0), 1)

for batch_idx in count(1):
    # Get data
    batch_x, batch_y = get_batch()

    # Reset gradients
    fc.zero_grad()

    # Forward pass
    output = F.smooth_l1_loss(fc(batch_x), batch_y)
    loss = output.item()

    # Backward pass
    output.backward()

    # Apply gradients
    for param in fc.parameters():
        param.data.add_(-0.1 * param.grad)

    # Stop criterion
    if loss < 1e-3:
        break

print('Loss: {:.6f} after {} batches'.format(loss, batch_idx))
print('==> Learned function:\\t' + poly_desc(fc.weight.view(-1), fc.bias))
print('==> Actual function:\\t' + poly_desc(W_target.view(-1), b_target))
LEARNED = poly_desc(fc.weight.view(-1), fc.bias)
ACTUAL = poly_desc(W_target.view(-1), b_target)
"""


def _run(imports, seed=1):
    env = {"SEED": seed}
    exec(compile(imports + PROGRAM, "regression_port", "exec"), env)
    return env


def _coefficients(desc):
    return [float(c) for c in re.findall(r"[+-]\d+\.\d\d", desc)]


def _check(env):
    assert env["loss"] < 1e-3 and env["batch_idx"] < 2000
    learned, actual = _coefficients(env["LEARNED"]), _coefficients(env["ACTUAL"])
    assert len(learned) == len(actual) == 5
    assert learned == pytest.approx(actual, abs=0.1)


def test_the_polynomial_regression_converges():
    _check(_run(FERRO_IMPORTS))


@pytest.mark.torch
def test_the_polynomial_regression_converges_on_torch_too():
    pytest.importorskip("torch")
    # their generator draws other targets and batches: the same program, checked the same way
    _check(_run(TORCH_IMPORTS))
