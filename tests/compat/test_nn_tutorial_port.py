"""PyTorch's "Learning PyTorch with Examples" nn + optim program (polynomial fit with
nn.Sequential, MSELoss and RMSprop), run with only the import changed. It needs type promotion
(`x.unsqueeze(-1).pow(p)`: float32 ** int64) and nn.Flatten(0, 1)."""

import math

import numpy as np
import pytest


def _program(torch, steps, init=None):
    x = torch.linspace(-math.pi, math.pi, 2000)
    y = torch.sin(x)
    p = torch.tensor([1, 2, 3])
    xx = x.unsqueeze(-1).pow(p)
    model = torch.nn.Sequential(torch.nn.Linear(3, 1), torch.nn.Flatten(0, 1))
    if init is not None:
        model.load_state_dict({k: torch.tensor(v) for k, v in init.items()})
    loss_fn = torch.nn.MSELoss(reduction="sum")
    optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(steps):
        loss = loss_fn(model(xx), y)
        losses.append(loss.item())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return losses, {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


INIT = {
    "0.weight": np.array([[0.1, -0.2, 0.05]], np.float32),
    "0.bias": np.array([0.3], np.float32),
}


def test_the_tutorial_runs_on_ferro_and_fits():
    import ferro

    losses, state = _program(ferro, 300, INIT)
    assert losses[-1] < losses[0] / 10
    assert state["0.weight"].dtype == np.float32


@pytest.mark.torch
def test_the_tutorial_matches_torch_from_the_same_weights():
    import torch

    import ferro

    ours, ours_state = _program(ferro, 200, INIT)
    theirs, their_state = _program(torch, 200, INIT)
    np.testing.assert_allclose(ours, theirs, rtol=2e-4)
    for k in ours_state:
        np.testing.assert_allclose(ours_state[k], their_state[k], rtol=2e-4, atol=1e-5)
