"""ferro/backend.py: the one place that says which array module and device an array has.

CuPy arrays are played by a stand-in class that looks like one to the backend (a type named
``ndarray`` from module ``cupy``, with ``.device.id`` and ``.get()``), so the CuPy branches run on
machines without a GPU; the real thing runs in the gpu-marked tests.
"""

import pickle
import subprocess
import sys

import numpy as np
import pytest

import ferro
from ferro import backend
from ferro.errors import (
    ArgumentError,
    ArgumentTypeError,
    DeviceError,
    DtypeError,
    ReadOnlyError,
    ShapeError,
)


class _Device:
    def __init__(self, id):  # noqa: A002  (CuPy's name)
        self.id = id


class ndarray:  # noqa: N801  (the name CuPy's arrays have)
    """A host array dressed as a CuPy array on device ``dev``."""

    def __init__(self, host, dev=0):
        self.host = np.array(host)
        self.device = _Device(dev)
        self.shape, self.dtype = self.host.shape, self.host.dtype

    def get(self):
        return self.host.copy()

    def copy(self):
        return ndarray(self.host, self.device.id)

    def astype(self, dtype, copy=True):
        return ndarray(self.host.astype(dtype), self.device.id)


ndarray.__module__ = "cupy"


def test_numpy_arrays_are_cpu_arrays_of_numpy():
    a = np.zeros(3)
    assert backend.xp_of(a) is np and backend.device_of(a) == "cpu"
    assert backend.is_array(a) and not backend.is_device_array(a)
    assert backend.is_array(np.zeros(2).view(np.recarray))  # subclasses are NumPy arrays
    assert not backend.is_array([1.0]) and not backend.is_array(np.float32(1))
    assert backend.xp_of([1.0]) is np  # anything that is not a CuPy array: NumPy's module


def test_cupy_arrays_are_recognized_without_importing_cupy():
    a = ndarray([1.0, 2.0], dev=1)
    assert backend.is_device_array(a) and backend.is_array(a)
    d = backend.device_of(a)
    assert d == "cuda:1" and d.type == "cuda" and d.index == 1
    assert backend.device_of(ndarray([0.0], dev=1)) is d  # one object per device


def test_move_to_the_cpu_copies_device_arrays_and_keeps_host_arrays():
    host = np.arange(3.0)
    assert backend.move(host, "cpu") is host
    assert backend.move(host, ferro.device("cpu", 0)) is host
    dev = ndarray([1.0, 2.0])
    out = backend.move(dev, "cpu")
    assert type(out) is np.ndarray and out.tolist() == [1.0, 2.0]


def test_move_keeps_an_array_already_on_the_device():
    dev = ndarray([1.0], dev=2)
    assert backend.move(dev, "cuda:2") is dev
    assert backend.move(dev, "cuda") is dev  # no index: any CUDA device will do


@pytest.mark.skipif(ferro.cuda.is_available(), reason="needs a machine without CUDA")
def test_move_to_cuda_without_cuda_names_the_device():
    with pytest.raises(DeviceError, match="cannot move a tensor to cuda:1: CUDA is not available"):
        backend.move(np.zeros(2), "cuda:1")
    with pytest.raises(DeviceError, match="unknown device 'gpu'"):
        backend.move(np.zeros(2), "gpu")


def test_parse_device_accepts_strings_devices_and_checks_them():
    d = backend.parse_device("cuda:3")
    assert (d.type, d.index, str(d)) == ("cuda", 3, "cuda:3")
    assert repr(d) == "device(type='cuda', index=3)"
    assert backend.parse_device(d) is d
    cpu = backend.parse_device("cpu")
    assert (cpu.type, cpu.index, str(cpu), repr(cpu)) == ("cpu", None, "cpu", "device(type='cpu')")
    for bad, err in [
        ("tpu", DeviceError),
        ("cuda:", DeviceError),
        ("cuda:-1", DeviceError),
        ("cuda:01", DeviceError),
        ("CUDA", DeviceError),
        (" cpu", DeviceError),
        (1.5, ArgumentTypeError),
        (None, ArgumentTypeError),
        (-1, ArgumentError),
    ]:
        with pytest.raises(err):
            backend.parse_device(bad)


def test_default_device_is_the_cpu_and_can_be_set_and_reset():
    assert backend.get_default_device() == "cpu" and backend.default_device_or_none() is None
    try:
        backend.set_default_device("cuda:1")  # checked for its name only, as PyTorch does
        assert backend.get_default_device() == ferro.device("cuda", 1)
        assert backend.default_device_or_none() == "cuda:1"
        backend.set_default_device("cpu")
        assert backend.default_device_or_none() is None  # the CPU needs no move
        with pytest.raises(DeviceError):
            backend.set_default_device("tpu")
        assert backend.get_default_device() == "cpu"  # a refused setting changes nothing
    finally:
        backend.set_default_device(None)
    assert backend.get_default_device() == "cpu"


@pytest.mark.skipif(ferro.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_cuda_default_device_fails_at_the_factory_not_silently():
    ferro.set_default_device("cuda")
    try:
        with pytest.raises(DeviceError, match="CUDA is not available"):
            ferro.zeros(2)
        with pytest.raises(DeviceError, match="CUDA is not available"):
            ferro.nn.Linear(2, 2)
        # Data already on the CPU stays there; an explicit device wins.
        assert ferro.tensor(np.ones(2)).device == "cpu"
        assert ferro.zeros(2, device="cpu").device == "cpu"
        assert ferro.zeros_like(ferro.from_numpy(np.ones(2))).device == "cpu"
    finally:
        ferro.set_default_device(None)


def test_devices_pickle_to_equal_devices():
    for d in (ferro.device("cpu"), ferro.device("cuda", 2), ferro.device("cuda")):
        assert pickle.loads(pickle.dumps(d)) == d


def test_saved_tensors_on_cpu_round_trip_device_arrays():
    from ferro.autograd.graph import _from_host, _to_host

    x = ferro.ones(2) * 1
    packed = _to_host(x)
    assert packed[0] is None and packed[1] is x._data and _from_host(packed) is x._data  # no copy

    class T:
        _data = ndarray([3.0, 4.0], dev=1)

    device, host = _to_host(T())
    assert device == "cuda:1" and type(host) is np.ndarray and host.tolist() == [3.0, 4.0]


def test_profiler_reports_the_device_of_device_arrays():
    from ferro.profiler import _meta

    assert _meta([np.zeros((2, 3), np.float32)]) == ([(2, 3)], "float32", "cpu")
    assert _meta([np.zeros(1), ndarray([1.0], dev=3)])[2] == "cuda:3"


def _adam_with_state(state):
    p = ferro.zeros(2, requires_grad=True)
    opt = ferro.optim.Adam([p], lr=0.1)
    opt.state[p] = dict(state)
    return opt


def test_optimizer_state_dict_copies_device_state_on_its_device():
    avg = ndarray([1.0, 2.0])
    opt = _adam_with_state({"step": 3, "exp_avg": avg, "exp_avg_sq": np.ones(2, np.float32)})
    sd = opt.state_dict()
    saved = sd["state"][0]["exp_avg"]
    assert backend.is_device_array(saved) and saved is not avg
    avg.host[:] = 9.0  # the optimizer steps on: the state dict keeps the values it had
    assert saved.get().tolist() == [1.0, 2.0]


def test_optimizer_load_state_dict_moves_device_state_to_the_parameter_and_checks_it():
    state = {"step": 3, "exp_avg": ndarray([1.0, 2.0]), "exp_avg_sq": ndarray([3.0, 4.0])}
    sd = _adam_with_state(state).state_dict()
    target = _adam_with_state({})
    target.load_state_dict(sd)
    (loaded,) = target.state.values()
    assert type(loaded["exp_avg"]) is np.ndarray and loaded["exp_avg"].dtype == np.float32
    assert loaded["exp_avg_sq"].tolist() == [3.0, 4.0] and loaded["step"] == 3
    bad_shape = {**sd, "state": {0: {**sd["state"][0], "exp_avg": ndarray([1.0, 2.0, 3.0])}}}
    with pytest.raises(ShapeError, match="'exp_avg' of parameter 0 has shape"):
        target.load_state_dict(bad_shape)
    bad_dtype = {**sd, "state": {0: {**sd["state"][0], "exp_avg": ndarray([1j, 2j])}}}
    with pytest.raises(DtypeError, match="'exp_avg' of parameter 0 has dtype complex128"):
        target.load_state_dict(bad_dtype)
    assert loaded["exp_avg"].tolist() == [1.0, 2.0]  # refused loads changed nothing


def test_module_load_state_dict_takes_device_arrays():
    m = ferro.nn.Linear(2, 1)
    m.load_state_dict({"weight": ndarray([[1.0, 2.0]]), "bias": ndarray([3.0])})
    assert m.weight.tolist() == [[1.0, 2.0]] and m.bias.tolist() == [3.0]


def test_module_load_state_dict_refuses_read_only_targets_before_any_change():
    m = ferro.nn.Linear(2, 1)
    frozen = np.zeros((1, 2), np.float32)
    frozen.flags.writeable = False
    m.weight.data = frozen
    with pytest.raises(ReadOnlyError):
        m.load_state_dict({"weight": np.ones((1, 2)), "bias": np.ones(1)})


def test_import_ferro_imports_no_cupy_even_when_devices_are_asked_about():
    code = (
        "import sys, ferro; t = ferro.ones(2); "
        "assert t.device == 'cpu' and t.dtype == ferro.float32; "
        "assert ferro.device('cuda:1').index == 1 and ferro.get_default_device() == 'cpu'; "
        "print('cupy' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


gpu = pytest.mark.gpu


@gpu
def test_real_cupy_arrays_get_the_same_answers():
    import cupy

    a = cupy.arange(3.0)
    assert backend.is_device_array(a) and backend.xp_of(a) is cupy
    assert backend.device_of(a) == f"cuda:{a.device.id}"
    host = backend.move(a, "cpu")
    assert type(host) is np.ndarray and host.tolist() == [0.0, 1.0, 2.0]
    back = backend.move(host, "cuda:0")
    assert backend.device_of(back) == "cuda:0" and backend.move(back, "cuda") is back


@gpu
def test_losses_move_array_targets_and_weights_to_the_input_device():
    logits = ferro.randn(4, 3, dtype=ferro.float64)
    target = np.array([0, 2, 1, 2])
    weight = [1.0, 2.0, 0.5]
    ref = ferro.cross_entropy(logits, target, weight=weight)
    got = ferro.cross_entropy(logits.cuda(), target, weight=weight)
    assert got.device == "cuda:0"
    np.testing.assert_allclose(got.item(), ref.item(), rtol=1e-12)
    p, t, w = (
        ferro.rand(4, dtype=ferro.float64),
        ferro.rand(4, dtype=ferro.float64),
        [1.0, 2.0, 3.0, 4.0],
    )
    ref = ferro.binary_cross_entropy(p, t, weight=w)
    got = ferro.binary_cross_entropy(p.cuda(), t.cuda(), weight=w)
    np.testing.assert_allclose(got.item(), ref.item(), rtol=1e-12)


@gpu
def test_optimizer_state_dict_round_trips_cupy_state():
    p = ferro.randn(3, device="cuda", requires_grad=True)
    opt = ferro.optim.Adam([p], lr=0.1)
    (p * p).sum().backward()
    opt.step()
    sd = opt.state_dict()
    avg = sd["state"][0]["exp_avg"]
    assert backend.device_of(avg) == "cuda:0"
    before = avg.get().copy()
    opt.step()
    assert np.array_equal(avg.get(), before)  # a copy, not the live state
    q = ferro.randn(3, requires_grad=True)
    cpu_opt = ferro.optim.Adam([q], lr=0.1)
    cpu_opt.load_state_dict(sd)
    assert type(cpu_opt.state[q]["exp_avg"]) is np.ndarray
