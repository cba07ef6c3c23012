"""nn.utils.weight_norm / spectral_norm (and their remove_*), parameters_to_vector /
vector_to_parameters: PyTorch's names, state-dict keys and numbers."""

import numpy as np
import pytest

import ferro
from ferro.errors import ArgumentError, ShapeError
from ferro.nn.utils import (
    parameters_to_vector,
    remove_spectral_norm,
    remove_weight_norm,
    spectral_norm,
    vector_to_parameters,
    weight_norm,
)


def _pair(torch, make, rng):
    ours, theirs = make(ferro), make(torch)
    for k, v in theirs.state_dict().items():
        theirs.state_dict()[k].copy_(torch.tensor(rng.standard_normal(v.shape)))
    ours.load_state_dict({k: ferro.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    return ours, theirs


def _grads(m):
    return {n: p.grad.numpy() for n, p in m.named_parameters()}


@pytest.mark.parametrize("dim", [0, 1, None, -1])
def test_weight_norm_matches_torch(dim):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    ours, theirs = _pair(torch, lambda lib: lib.nn.Conv1d(3, 4, 2), rng)
    ours, theirs = weight_norm(ours, dim=dim), torch.nn.utils.weight_norm(theirs, dim=dim)
    assert sorted(ours.state_dict()) == sorted(theirs.state_dict())
    for k, v in theirs.state_dict().items():
        np.testing.assert_allclose(ours.state_dict()[k].numpy(), v.numpy(), rtol=1e-6)
    x = rng.standard_normal((2, 3, 5)).astype(np.float32)
    (ours(ferro.tensor(x)) ** 2).sum().backward()
    (theirs(torch.tensor(x)) ** 2).sum().backward()
    for k, g in _grads(theirs).items():
        np.testing.assert_allclose(_grads(ours)[k], g, rtol=1e-4, atol=1e-5)
    remove_weight_norm(ours)
    torch.nn.utils.remove_weight_norm(theirs)
    assert sorted(n for n, _ in ours.named_parameters()) == ["bias", "weight"]
    np.testing.assert_allclose(
        ours.weight.detach().numpy(), theirs.weight.detach().numpy(), rtol=1e-6
    )


@pytest.mark.parametrize("kind", ["linear", "conv_transpose"])
def test_spectral_norm_matches_torch_in_training_and_eval(kind):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    if kind == "linear":
        make, shape = (lambda lib: lib.nn.Linear(5, 3)), (4, 5)
    else:
        make, shape = (lambda lib: lib.nn.ConvTranspose2d(3, 2, 3)), (2, 3, 4, 4)
    ours, theirs = _pair(torch, make, rng)
    ours = spectral_norm(ours, n_power_iterations=2)
    theirs = torch.nn.utils.spectral_norm(theirs, n_power_iterations=2)
    assert sorted(ours.state_dict()) == sorted(theirs.state_dict())
    for k in ("weight_u", "weight_v"):  # the same start (the draws differ between libraries)
        ours.state_dict()[k].copy_(ferro.tensor(theirs.state_dict()[k].numpy()))
    for mode in ("train", "eval"):
        getattr(ours, mode)(), getattr(theirs, mode)()
        x = rng.standard_normal(shape).astype(np.float32)
        y, yt = ours(ferro.tensor(x)), theirs(torch.tensor(x))
        np.testing.assert_allclose(y.detach().numpy(), yt.detach().numpy(), rtol=1e-4, atol=1e-5)
        ours.zero_grad(), theirs.zero_grad()
        (y**2).sum().backward()
        (yt**2).sum().backward()
        for k, g in _grads(theirs).items():
            np.testing.assert_allclose(_grads(ours)[k], g, rtol=1e-3, atol=1e-5)
        for k in ("weight_u", "weight_v"):
            np.testing.assert_allclose(
                ours.state_dict()[k].numpy(), theirs.state_dict()[k].numpy(), rtol=1e-5
            )
    remove_spectral_norm(ours)
    torch.nn.utils.remove_spectral_norm(theirs)
    assert sorted(ours.state_dict()) == sorted(theirs.state_dict())
    np.testing.assert_allclose(
        ours.weight.detach().numpy(), theirs.weight.detach().numpy(), rtol=1e-4, atol=1e-6
    )


def test_reparametrization_misuse_is_refused():
    m = weight_norm(ferro.nn.Linear(2, 2))
    with pytest.raises(ArgumentError, match="already has a weight_norm"):
        weight_norm(m)
    with pytest.raises(ArgumentError, match="no such reparametrization"):
        remove_spectral_norm(m)
    with pytest.raises(ArgumentError, match="n_power_iterations"):
        spectral_norm(ferro.nn.Linear(2, 2), n_power_iterations=-1)


def test_parameters_as_one_vector_and_back():
    net = ferro.nn.Sequential(ferro.nn.Linear(3, 2), ferro.nn.Linear(2, 1))
    vec = parameters_to_vector(net.parameters())
    assert vec.shape == (11,)
    (vec * vec).sum().backward()
    assert net[0].weight.grad.shape == (2, 3)
    vector_to_parameters(ferro.arange(11.0), net.parameters())
    assert net[0].weight.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert net[1].bias.tolist() == [10.0]
    with pytest.raises(ShapeError, match="11 elements"):
        vector_to_parameters(ferro.ones(3), net.parameters())
