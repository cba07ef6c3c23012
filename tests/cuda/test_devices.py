"""Devices: the CPU-side contract everywhere, the CUDA side where a device exists (gpu)."""

import numpy as np
import pytest

import ferro
from ferro.errors import DeviceError
from ferro.utils.checkpoint import checkpoint


def test_cpu_tensors_report_their_device_and_move_to_themselves():
    x = ferro.ones(2, requires_grad=True)
    assert x.device == "cpu" and x.to("cpu") is x and x.cpu() is x
    y = x.to("cpu", dtype=ferro.float64)
    assert y.dtype == np.float64 and y.device == "cpu"
    assert ferro.zeros(2, device="cpu").device == "cpu"


def test_bad_device_names_and_missing_cuda_raise_device_errors():
    with pytest.raises(DeviceError, match="unknown device"):
        ferro.ones(2).to("tpu")
    if not ferro.cuda.is_available():
        with pytest.raises(DeviceError, match="CUDA is not available"):
            ferro.ones(2).cuda()
        with pytest.raises(DeviceError, match="CUDA is not available"):
            ferro.zeros(2, device="cuda")
        assert ferro.cuda.device_count() == 0
        ferro.cuda.synchronize()  # a no-op without a device


def test_import_ferro_does_not_import_cupy():
    import subprocess
    import sys

    code = "import ferro, sys; ferro.ones(1).exp(); print('cupy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_checkpoint_saves_and_restores_the_device_generators():
    ferro.cuda.set_rng_state((11, 5), 0)
    w = ferro.randn(3, 3, requires_grad=True)

    def fn(t):
        ferro.cuda.set_rng_state((99, 99), 0)  # as a GPU dropout would advance it
        return (t @ w).tanh()

    y = checkpoint(fn, ferro.randn(2, 3))
    ferro.cuda.set_rng_state((42, 7), 0)
    y.sum().backward()
    # The recomputation saw the state from the original forward and restored the caller's.
    assert ferro.cuda.get_rng_state(0) == (42, 7)


gpu = pytest.mark.gpu


@gpu
def test_to_cuda_and_back_is_differentiable():
    x = ferro.randn(3, requires_grad=True)
    y = (x.cuda() * 2.0).sum()
    assert y.device == "cuda:0"
    y.backward()
    assert x.grad.device == "cpu" and x.grad.tolist() == [2.0, 2.0, 2.0]


@gpu
def test_mixing_devices_names_both():
    with pytest.raises(DeviceError, match="cpu.*cuda:0|cuda:0.*cpu"):
        ferro.ones(2) + ferro.ones(2, device="cuda")


@gpu
def test_every_op_runs_on_cupy_like_on_numpy():
    x = ferro.randn(4, 5, dtype=ferro.float64)
    for fn in (
        ferro.tanh,
        ferro.relu,
        ferro.gelu,
        ferro.softmax,
        ferro.log_softmax,
        lambda t: ferro.cross_entropy(
            t,
            ferro.tensor([0, 1, 2, 3]).cuda() if t.device != "cpu" else ferro.tensor([0, 1, 2, 3]),
        ),
    ):
        a = fn(x.requires_grad_())
        b = fn(x.detach().cuda().requires_grad_())
        np.testing.assert_allclose(b.cpu().detach().numpy(), a.detach().numpy(), rtol=1e-10)


@gpu
def test_gpu_dropout_is_replayed_by_checkpoint():
    w = ferro.randn(8, 8, device="cuda", requires_grad=True)
    x = ferro.randn(4, 8, device="cuda")

    def layer(t):
        return ferro.dropout((t @ w).tanh(), 0.5)

    ferro.cuda.manual_seed_all(3)
    checkpoint(layer, x).sum().backward()
    g = w.grad.cpu().numpy().copy()
    w.grad = None
    ferro.cuda.manual_seed_all(3)
    layer(x).sum().backward()
    assert np.array_equal(g, w.grad.cpu().numpy())
