"""Floating-point exceptions inside ferro's ops give inf/nan without a NumPy RuntimeWarning, as
in PyTorch (Note [Floating-point warnings] in ferro/__init__.py); NumPy calls of the user's own
still warn. Run as a user's program in a child process: pytest restores the warning filters
that a module sets while it is collected, so the filter ``import ferro`` installs is not in
force inside a test function."""

import subprocess
import sys

PROGRAM = """
import numpy as np
import ferro

x = ferro.tensor([0.0, 1.0, -1.0], requires_grad=True)
y = x.log() + x / 0 + (1 / x) + x.sqrt() + (x * 1000).exp() + x ** -1
y.sum().backward()
assert np.isnan(y.detach().numpy()).any() and np.isinf(x.grad.numpy()).any()
# pytorch/examples word_language_model's TransformerModel: log(tril(ones)) as a float mask.
mask = ferro.log(ferro.tril(ferro.ones(3, 3)))
assert mask[0, 1].item() == float("-inf") and mask[1, 0].item() == 0.0
# The compiled engine's own ops (operators on tensors, in-place ops) call NumPy from compiled
# code, so NumPy attributes their warnings to this line: filtered by the op depth.
inf = ferro.tensor([1.0, float("inf")], requires_grad=True)
assert np.isnan((inf - inf).detach().numpy()[1]) and np.isnan((inf * 0).detach().numpy()[1])
z = ferro.tensor([float("inf"), 1.0])
with ferro.no_grad():
    z -= z
    z.mul_(ferro.tensor([0.0, 1e38])).mul_(1e38)
assert np.isnan(z.numpy()[0])
print("ferro done", flush=True)
np.log(np.zeros(1))  # the user's own NumPy call
"""


def test_ops_give_inf_and_nan_silently_and_numpy_still_warns():
    proc = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=120, check=True
    )
    assert proc.stdout == "ferro done\n"
    assert proc.stderr.count("RuntimeWarning") == 1, proc.stderr
    assert "divide by zero encountered in log" in proc.stderr and "<string>" in proc.stderr
