"""Devices and dtypes against PyTorch as the oracle (issue 13, item 2).

Each test runs the same calls through ferro and torch and compares what comes out (names,
flags, which calls raise, identity of no-op conversions, gradients). The NumPy/plain-reference
versions are in tests/engine/test_devices_dtypes.py. One deliberate difference is checked there,
not here: a ferro device compares equal to the string naming it, a torch device does not.
"""

import numpy as np
import pytest

import ferro

pytestmark = pytest.mark.torch

torch = pytest.importorskip("torch")


def _name(dtype) -> str:
    return str(dtype).removeprefix("torch.").removeprefix("ferro.")


_SPECS = [
    ("cpu",),
    ("cpu:0",),
    ("cpu", 0),
    ("cuda",),
    ("cuda:0",),
    ("cuda", 1),
    ("cuda:7",),
    ("tpu",),
    ("cuda:x",),
    ("cuda:-1",),
    ("cuda", -1),
    ("cuda:0", 1),
    ("CUDA",),
    ("cuda:0 ",),
    (1.5,),
    (None,),
]


def _outcome(make, args):
    try:
        d = make(*args)
    except Exception:  # the oracle's error types differ from ferro's typed errors
        return "raises"
    return (d.type, d.index, str(d), repr(d).removeprefix("torch."))


@pytest.mark.parametrize("args", _SPECS, ids=str)
def test_device_specs_parse_and_fail_as_in_pytorch(args):
    assert _outcome(ferro.device, args) == _outcome(torch.device, args)


def test_device_equality_and_hashing_as_in_pytorch():
    pairs = [("cuda", "cuda:0"), ("cpu", "cpu:0"), ("cuda:1", "cuda:1"), ("cpu", "cpu")]
    for a, b in pairs:
        assert (ferro.device(a) == ferro.device(b)) == (torch.device(a) == torch.device(b))
        if torch.device(a) == torch.device(b):
            assert hash(ferro.device(a)) == hash(ferro.device(b))
    assert ferro.zeros(1).device.index == torch.zeros(1).device.index  # None for the CPU


_DTYPES = ["float32", "float64", "int64", "bool", "float16", "int32", "int16", "int8", "uint8"]
_ALIASES = ["float", "double", "long", "int", "half", "short", "bool"]


@pytest.mark.parametrize("name", _DTYPES + _ALIASES)
def test_dtype_objects_and_aliases_match_pytorch(name):
    ours, theirs = getattr(ferro, name), getattr(torch, name)
    assert _name(repr(ours)) == _name(repr(theirs))
    for attr in ("is_floating_point", "is_complex", "is_signed", "itemsize"):
        assert getattr(ours, attr) == getattr(theirs, attr), attr


@pytest.mark.parametrize("spec", [float, int, bool])
def test_python_types_as_dtypes_match_pytorch(spec):
    assert _name(ferro.zeros(1, dtype=spec).dtype) == _name(torch.zeros(1, dtype=spec).dtype)


def test_default_dtype_follows_pytorch():
    assert _name(ferro.get_default_dtype()) == _name(torch.get_default_dtype())
    makers = [
        lambda m: m.tensor([1.0]),
        lambda m: m.tensor([1]),
        lambda m: m.tensor(np.ones(1, np.float32)),
        lambda m: m.zeros(2),
        lambda m: m.arange(3.0),
        lambda m: m.arange(3),
        lambda m: m.full((1,), 1.5),
        lambda m: m.full((1,), 2),
        lambda m: m.rand(1),
    ]
    try:
        for lib in (ferro, torch):
            lib.set_default_dtype(lib.float64)
        for make in makers:
            assert _name(make(ferro).dtype) == _name(make(torch).dtype)
    finally:
        for lib in (ferro, torch):
            lib.set_default_dtype(lib.float32)
    for lib in (ferro, torch):
        with pytest.raises(TypeError):
            lib.set_default_dtype(lib.int64)


_TO_CALLS = [
    ("to(float64)", lambda m, x, o: x.to(m.float64)),
    ("to(float32)", lambda m, x, o: x.to(m.float32)),
    ("to(int64)", lambda m, x, o: x.to(m.int64)),
    ("to('cpu')", lambda m, x, o: x.to("cpu")),
    ("to(device)", lambda m, x, o: x.to(m.device("cpu"))),
    ("to('cpu', float64)", lambda m, x, o: x.to("cpu", m.float64)),
    ("to(device=, dtype=)", lambda m, x, o: x.to(device="cpu", dtype=m.float64)),
    ("to(other)", lambda m, x, o: x.to(o)),
    ("to(float32, copy=True)", lambda m, x, o: x.to(m.float32, copy=True)),
    ("to(float64, non_blocking=True)", lambda m, x, o: x.to(m.float64, non_blocking=True)),
    ("type(float64)", lambda m, x, o: x.type(m.float64)),
    ("float()", lambda m, x, o: x.float()),
    ("double()", lambda m, x, o: x.double()),
    ("long()", lambda m, x, o: x.long()),
    ("bool()", lambda m, x, o: x.bool()),
    ("cpu()", lambda m, x, o: x.cpu()),
]


@pytest.mark.parametrize("call", [c for _, c in _TO_CALLS], ids=[n for n, _ in _TO_CALLS])
def test_conversions_match_pytorch(call):
    values = [1.7, -0.2, 0.0]
    results = []
    for lib in (ferro, torch):
        x = lib.tensor(values, requires_grad=True)
        other = lib.zeros(1, dtype=lib.float64)
        out = call(lib, x, other)
        results.append(
            (
                _name(out.dtype),
                out is x,
                out.requires_grad,
                out.grad_fn is not None,
                out.detach().tolist(),
                out.type().removeprefix("torch.").removeprefix("ferro."),
            )
        )
        if out.dtype.is_floating_point and out.requires_grad:
            out.sum().backward()
            results.append((_name(x.grad.dtype), x.grad.tolist()))
    ours, theirs = results[: len(results) // 2], results[len(results) // 2 :]
    assert ours == theirs  # the same float32 values convert exactly in both


def test_module_to_matches_pytorch():
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = []
    for lib in (ferro, torch):
        m = lib.nn.Linear(3, 2)
        m.load_state_dict({"weight": lib.tensor(w), "bias": lib.zeros(2)})
        m(lib.ones(1, 3)).sum().backward()
        m.to(lib.float64)
        out.append((_name(m.weight.dtype), _name(m.weight.grad.dtype), m.weight.grad.tolist()))
        with pytest.raises(TypeError):
            m.to(lib.int64)
    assert out[0] == out[1]


def test_accelerator_answers_as_pytorch_on_a_cpu_machine():
    if ferro.accelerator.is_available() or torch.accelerator.is_available():
        pytest.skip("compares the answers of a machine without an accelerator")
    assert ferro.accelerator.device_count() == torch.accelerator.device_count() == 0
    assert ferro.accelerator.current_accelerator(check_available=True) is None
    assert torch.accelerator.current_accelerator(check_available=True) is None
    for lib in (ferro, torch):
        with pytest.raises(RuntimeError if lib is torch else ferro.errors.DeviceError):
            lib.accelerator.current_device_index()
