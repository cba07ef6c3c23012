"""``nn.DataParallel``: PyTorch's wrapper, run on ferro's one device (ferro/nn/parallel/
data_parallel.py). Without CUDA it calls the module, as PyTorch does."""

import numpy as np
import pytest

import ferro
import ferro.nn as nn
from ferro.errors import ArgumentTypeError, NotSupportedError


def _model():
    ferro.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


def test_data_parallel_calls_the_module_and_prefixes_the_state_dict():
    model = _model()
    net = nn.DataParallel(model)
    assert net.module is model and nn.parallel.DataParallel is nn.DataParallel
    x = ferro.randn(5, 3)
    np.testing.assert_array_equal(net(x).detach().numpy(), model(x).detach().numpy())
    assert list(net.state_dict()) == [f"module.{k}" for k in model.state_dict()]
    net(x).sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    # the usual checkpoint dance: strip "module." to load into a plain model
    plain = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    plain.load_state_dict({k[len("module.") :]: v for k, v in net.state_dict().items()})
    np.testing.assert_array_equal(plain(x).detach().numpy(), model(x).detach().numpy())


def test_data_parallel_keyword_and_nested_arguments():
    class Pair(nn.Module):
        def forward(self, xs, scale=None):
            return xs[0] * scale + xs[1]

    out = nn.DataParallel(Pair(), dim=0)((ferro.ones(2), ferro.ones(2)), scale=ferro.ones(2) * 3)
    assert out.tolist() == [4.0, 4.0]


def test_data_parallel_errors():
    with pytest.raises(ArgumentTypeError, match="DataParallel: module must be a ferro.nn.Module"):
        nn.DataParallel(lambda x: x)
    if not ferro.cuda.is_available():
        # PyTorch ignores device_ids without a GPU, and so does ferro
        assert nn.DataParallel(_model(), device_ids=[0, 1]).device_ids == []
    else:
        with pytest.raises(NotSupportedError, match="one device per process"):
            nn.DataParallel(_model(), device_ids=[0, 1])


@pytest.mark.gpu
def test_data_parallel_moves_cpu_inputs_to_the_device():
    model = _model().to("cuda")
    net = nn.DataParallel(model)
    out = net(ferro.randn(5, 3))
    assert net.device_ids == [0] and out.device.type == "cuda" and out.shape == (5, 2)


@pytest.mark.torch
def test_data_parallel_matches_torch_on_the_cpu():
    torch = pytest.importorskip("torch")
    model = _model()
    theirs = torch.nn.DataParallel(
        torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    )
    theirs.load_state_dict(
        {f"module.{k}": torch.from_numpy(v.numpy().copy()) for k, v in model.state_dict().items()}
    )
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    ours = nn.DataParallel(model)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    np.testing.assert_allclose(
        ours(ferro.tensor(x)).detach().numpy(),
        theirs(torch.from_numpy(x)).detach().numpy(),
        rtol=1e-6,
    )
