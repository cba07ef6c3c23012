"""The "Learning PyTorch with Examples" polynomial fit (autograd tensors) run on ferro with only
its import changed (issue 13).

``PROGRAM`` is the tutorial's code as published, ``import torch`` included. The tests run it
with ``import ferro as torch`` (fewer iterations) and compare the fit with a float64 NumPy
reference of the same gradient descent, and with torch running the same text from the same
start values when torch is installed.
"""

import re

import numpy as np
import pytest

import ferro

PROGRAM = """\
import torch
import math

dtype = torch.float
device = torch.device("cpu")
x = torch.linspace(-math.pi, math.pi, 2000, device=device, dtype=dtype)
y = torch.sin(x)
a = torch.randn((), device=device, dtype=dtype, requires_grad=True)
b = torch.randn((), device=device, dtype=dtype, requires_grad=True)
c = torch.randn((), device=device, dtype=dtype, requires_grad=True)
d = torch.randn((), device=device, dtype=dtype, requires_grad=True)
learning_rate = 1e-6
for t in range(2000):
    y_pred = a + b * x + c * x ** 2 + d * x ** 3
    loss = (y_pred - y).pow(2).sum()
    if t % 100 == 99:
        print(t, loss.item())
    loss.backward()
    with torch.no_grad():
        a -= learning_rate * a.grad
        b -= learning_rate * b.grad
        c -= learning_rate * c.grad
        d -= learning_rate * d.grad
        a.grad = None
        b.grad = None
        c.grad = None
        d.grad = None
print(f'Result: y = {a.item()} + {b.item()} x + {c.item()} x^2 + {d.item()} x^3')
"""

STEPS = 400
STARTS = (0.3, -0.8, 1.1, 0.2)  # a, b, c, d: far enough from the fit that the loss falls a lot


def _source(import_line: str) -> str:
    text = PROGRAM.replace("for t in range(2000):", f"for t in range({STEPS}):")
    return text.replace("import torch\n", import_line + "\n", 1)


class _FixedStarts:
    """The library, except that ``randn`` returns the next of ``STARTS``: the same program then
    starts from the same values on ferro and on torch (their generators differ)."""

    def __init__(self, lib):
        self._lib, self._starts = lib, iter(STARTS)

    def randn(self, size, device=None, dtype=None, requires_grad=False):
        value = next(self._starts)
        return self._lib.tensor(value, device=device, dtype=dtype, requires_grad=requires_grad)

    def __getattr__(self, name):
        return getattr(self._lib, name)


def _run(source, namespace, capsys):
    exec(compile(source, "poly.py", "exec"), namespace)
    out = capsys.readouterr().out
    losses = [float(v) for v in re.findall(r"^\d+ (\S+)$", out, re.M)]
    coefs = [
        float(v) for v in re.search(r"y = (\S+) \+ (\S+) x \+ (\S+) x\^2 \+ (\S+)", out).groups()
    ]
    return losses, np.array(coefs)


def _numpy_reference():
    """The same gradient descent in float64 NumPy, with the gradients written out."""
    x = np.linspace(-np.pi, np.pi, 2000)
    y = np.sin(x)
    p = np.array(STARTS, dtype=np.float64)
    powers = np.stack([np.ones_like(x), x, x**2, x**3])
    for _ in range(STEPS):
        residual = p @ powers - y
        p -= 1e-6 * (2.0 * powers @ residual)
    return p


def test_program_runs_with_only_the_import_changed_and_its_loss_falls(capsys):
    ferro.manual_seed(0)
    losses, coefs = _run(_source("import ferro as torch"), {}, capsys)
    assert len(losses) == STEPS // 100 and np.all(np.isfinite(coefs))
    assert all(later < earlier for earlier, later in zip(losses, losses[1:], strict=False))


def test_fit_from_the_same_start_matches_a_numpy_reference(capsys):
    losses, coefs = _run(_source(""), {"torch": _FixedStarts(ferro)}, capsys)
    np.testing.assert_allclose(coefs, _numpy_reference(), rtol=1e-3, atol=1e-5)
    assert losses[-1] < losses[0] / 2


@pytest.mark.torch
def test_fit_from_the_same_start_matches_torch(capsys):
    torch = pytest.importorskip("torch")
    ferro_losses, ferro_coefs = _run(_source(""), {"torch": _FixedStarts(ferro)}, capsys)
    torch_losses, torch_coefs = _run(_source(""), {"torch": _FixedStarts(torch)}, capsys)
    np.testing.assert_allclose(ferro_losses, torch_losses, rtol=1e-5)
    np.testing.assert_allclose(ferro_coefs, torch_coefs, rtol=1e-5, atol=1e-7)
