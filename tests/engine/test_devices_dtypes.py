"""Devices and dtypes as objects (issue 13, item 2), against NumPy and plain references.

The same behaviour is checked against PyTorch in tests/compat/test_torch_devices_dtypes.py.
"""

import copy
import pickle

import numpy as np
import pytest

import ferro
from ferro.errors import (
    ArgumentError,
    ArgumentTypeError,
    DeviceError,
    DtypeError,
    NotSupportedError,
)


@pytest.fixture
def default_float64():
    ferro.set_default_dtype(ferro.float64)
    yield
    ferro.set_default_dtype(ferro.float32)


# Devices ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, type_, index, text",
    [
        (("cpu",), "cpu", None, "cpu"),
        (("cpu:0",), "cpu", 0, "cpu:0"),
        (("cpu", 0), "cpu", 0, "cpu:0"),
        (("cuda",), "cuda", None, "cuda"),
        (("cuda:0",), "cuda", 0, "cuda:0"),
        (("cuda", 1), "cuda", 1, "cuda:1"),
        (("cuda:12",), "cuda", 12, "cuda:12"),
    ],
)
def test_device_parses_type_and_index(args, type_, index, text):
    d = ferro.device(*args)
    assert (d.type, d.index, str(d)) == (type_, index, text)
    assert ferro.device(d) is d
    with pytest.raises(AttributeError):
        d.index = 3  # immutable, as a dict key must be


@pytest.mark.parametrize(
    "args, error",
    [
        (("tpu",), DeviceError),
        (("mps",), DeviceError),
        (("cuda:x",), DeviceError),
        (("cuda:-1",), DeviceError),
        (("cuda:0 ",), DeviceError),
        (("cuda", -1), ArgumentError),
        (("cuda:0", 1), ArgumentError),
        (("cuda", 1.0), ArgumentTypeError),
        (("cuda", True), ArgumentTypeError),
        ((1.5,), ArgumentTypeError),
        ((None,), ArgumentTypeError),
        ((ferro.device("cpu"), 0), ArgumentError),
    ],
)
def test_device_refuses_malformed_specs(args, error):
    with pytest.raises(error):
        ferro.device(*args)


def test_an_int_device_needs_an_accelerator():
    if ferro.accelerator.is_available():
        assert ferro.device(0) == "cuda:0"
    else:
        with pytest.raises(DeviceError, match="no accelerator is available"):
            ferro.device(0)


def test_devices_compare_with_devices_and_the_strings_that_name_them():
    cpu, cuda, cuda0 = ferro.device("cpu"), ferro.device("cuda"), ferro.device("cuda:0")
    assert cpu == "cpu" and "cpu" == cpu and cpu == ferro.device("cpu")
    assert cuda0 == "cuda:0" and cuda0 != "cuda" and cuda0 != cuda and cuda == "cuda"
    assert cpu != "cpu:0" and cpu != "nonsense" and cpu != 0 and cpu is not None
    table = {cpu: "host", cuda0: "gpu"}
    assert table["cpu"] == "host" and table[ferro.device("cuda", 0)] == "gpu"
    assert len({cpu, ferro.device("cpu"), "cpu"}) == 1  # equal values hash alike


def test_tensor_device_is_a_device_object():
    t = ferro.zeros(2)
    assert isinstance(t.device, ferro.device) and t.device == "cpu" and t.device.index is None
    assert t.is_cpu and not t.is_cuda
    assert f"{t.device}" == "cpu" and repr(t.device) == "device(type='cpu')"


def test_device_arguments_take_strings_and_device_objects_everywhere():
    cpu = ferro.device("cpu")
    assert ferro.zeros(2, device=cpu).device == "cpu"
    assert ferro.tensor([1.0], device=cpu).device == "cpu"
    assert ferro.arange(3, device=cpu).device == "cpu"
    assert ferro.rand(2, device=cpu).device == "cpu" and ferro.randn(2, device="cpu").is_cpu
    assert ferro.full((2,), 1.0, device=cpu).device == "cpu"
    assert ferro.zeros_like(ferro.ones(2), device=cpu).device == "cpu"
    x = ferro.ones(2, requires_grad=True)
    assert x.to(cpu) is x and x.to("cpu:0") is x and x.cpu() is x
    m = ferro.nn.Linear(2, 2)
    assert m.to(cpu) is m and m.weight.device == "cpu"


@pytest.mark.skipif(ferro.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_requests_without_cuda_are_device_errors():
    x = ferro.ones(2)
    for call in (
        lambda: x.cuda(),
        lambda: x.cuda(1),
        lambda: x.to(ferro.device("cuda", 0)),
        lambda: ferro.zeros(2, device=ferro.device("cuda")),
        lambda: ferro.nn.Linear(2, 2).to("cuda"),
    ):
        with pytest.raises(DeviceError, match="CUDA is not available"):
            call()
    with pytest.raises(DeviceError, match="expected a CUDA device"):
        x.cuda("cpu")


# Dtypes ----------------------------------------------------------------------------------------

_HELD = [
    (ferro.float32, np.float32, "float32"),
    (ferro.float64, np.float64, "float64"),
    (ferro.int64, np.int64, "int64"),
    (ferro.bool, np.bool_, "bool"),
]
_NOT_HELD = [
    (ferro.float16, np.float16, "float16"),
    (ferro.int32, np.int32, "int32"),
    (ferro.int16, np.int16, "int16"),
    (ferro.int8, np.int8, "int8"),
    (ferro.uint8, np.uint8, "uint8"),
]


@pytest.mark.parametrize("d, np_type, name", _HELD + _NOT_HELD)
def test_dtype_objects_are_their_numpy_dtypes_too(d, np_type, name):
    ref = np.dtype(np_type)
    assert isinstance(d, ferro.dtype) and repr(d) == f"ferro.{name}" and str(d) == ref.name
    assert d == ref and ref == d and d == np_type and np_type == d and hash(d) == hash(ref)
    assert np.dtype(d) == ref and np.zeros(2, dtype=d).dtype == ref
    assert np.ones(2).astype(d).dtype == ref and {ref: 1}[d] == 1
    assert (d.is_floating_point, d.is_signed, d.is_complex) == (
        ref.kind == "f",
        ref.kind in "if",
        False,
    )
    assert d.itemsize == ref.itemsize and d.kind == ref.kind  # NumPy's attributes read through
    assert d != None and d != "cpu" and d != ferro.device("cpu")  # noqa: E711
    assert pickle.loads(pickle.dumps(d)) is d and copy.deepcopy(d) is d
    with pytest.raises(AttributeError):
        d.kind = "i"  # shared by every tensor: immutable


def test_pytorch_aliases_name_the_same_objects():
    assert ferro.float is ferro.float32 and ferro.double is ferro.float64
    assert ferro.long is ferro.int64 and ferro.int is ferro.int32 and ferro.half is ferro.float16
    assert ferro.short is ferro.int16 and ferro.bool is ferro.bool_
    # Kept out of __all__: "from ferro import *" must not shadow Python's float, int and bool.
    assert not {"float", "int", "bool"} & set(ferro.__all__)


def test_dtype_objects_cannot_be_made_by_hand():
    with pytest.raises(NotSupportedError):
        ferro.dtype("float32")


@pytest.mark.parametrize("d, np_type, name", _HELD)
def test_tensor_dtype_is_the_dtype_object(d, np_type, name):
    t = ferro.zeros(2, dtype=d)
    assert t.dtype is d and t.dtype == np_type and t._data.dtype == np.dtype(np_type)


@pytest.mark.parametrize("d, np_type, name", _NOT_HELD)
def test_dtypes_ferro_lacks_raise_not_supported_where_used(d, np_type, name):
    for call in (
        lambda: ferro.zeros(2, dtype=d),
        lambda: ferro.tensor([1], dtype=d),
        lambda: ferro.ones(2).to(d),
        lambda: ferro.ones(2).type(d),
        lambda: ferro.zeros(2, dtype=np_type),
        lambda: ferro.set_default_dtype(d),
    ):
        with pytest.raises(NotSupportedError, match=f"ferro.{name} is not supported"):
            call()
    with pytest.raises(NotSupportedError, match=r"use \.long\(\)|\.long\(\)"):
        ferro.ones(2).int()
    with pytest.raises(NotSupportedError, match="float16"):
        ferro.ones(2).half()


@pytest.mark.parametrize(
    "spec, expected",
    [
        (float, np.float64),  # Python's float is double, as in PyTorch
        (int, np.int64),
        (bool, np.bool_),
        ("float", np.float32),  # PyTorch's alias names
        ("double", np.float64),
        ("long", np.int64),
        ("float64", np.float64),
        ("f8", np.float64),  # NumPy's codes
        (">f4", np.float32),  # native order
        (np.float32, np.float32),
        (np.dtype("int64"), np.int64),
    ],
)
def test_dtype_arguments_read_like_pytorch_and_numpy(spec, expected):
    assert ferro.zeros(1, dtype=spec)._data.dtype == np.dtype(expected)
    assert ferro.ones(1).to(spec)._data.dtype == np.dtype(expected)


@pytest.mark.parametrize("spec", ["floaty", None, [1], "U3", object])
def test_non_dtypes_are_dtype_errors(spec):
    with pytest.raises(DtypeError):
        ferro.zeros(1, dtype=spec) if spec is not None else ferro.ones(1).float().to(dtype=[])


def test_complex_dtypes_are_not_supported():
    with pytest.raises(NotSupportedError, match="no complex tensors"):
        ferro.zeros(1, dtype=np.complex64)


# Default dtype ---------------------------------------------------------------------------------


def test_default_dtype_is_float32():
    assert ferro.get_default_dtype() is ferro.float32


def test_default_dtype_applies_to_python_floats_and_factories(default_float64):
    assert ferro.get_default_dtype() is ferro.float64
    assert ferro.tensor([1.0]).dtype is ferro.float64
    assert ferro.tensor(np.float16(1)).dtype is ferro.float64  # float16 data: the default
    assert ferro.tensor(np.ones(1, np.float32)).dtype is ferro.float32  # arrays keep theirs
    assert ferro.tensor([1]).dtype is ferro.int64
    for t in (
        ferro.zeros(2),
        ferro.ones(2),
        ferro.empty(2),
        ferro.rand(2),
        ferro.randn(2),
        ferro.arange(0.0, 1.0, 0.5),
        ferro.full((2,), 1.5),
        ferro.nn.Linear(2, 2).weight,
        ferro.nn.Parameter(),
    ):
        assert t.dtype is ferro.float64
    assert ferro.arange(3).dtype is ferro.int64 and ferro.full((1,), 2).dtype is ferro.int64
    assert repr(ferro.tensor([1.0])) == "tensor([1.])"  # the default dtype is not shown
    assert repr(ferro.tensor([1.0], dtype=ferro.float32)) == "tensor([1.], dtype=ferro.float32)"


def test_only_floating_dtypes_can_be_the_default():
    with pytest.raises(DtypeError, match="only floating dtypes"):
        ferro.set_default_dtype(ferro.int64)
    with pytest.raises(DtypeError):
        ferro.set_default_dtype("nonsense")
    assert ferro.get_default_dtype() is ferro.float32


# Tensor.to and the conversion methods ----------------------------------------------------------


def test_to_takes_every_pytorch_form():
    x = ferro.tensor([1.5, -2.0], requires_grad=True)
    y64 = ferro.zeros(1, dtype=ferro.float64)
    for out in (
        x.to(ferro.float64),
        x.to("cpu", ferro.float64),
        x.to(ferro.device("cpu"), ferro.float64, False, False),
        x.to(device="cpu", dtype=ferro.float64),
        x.to("cpu", dtype=ferro.float64),
        x.to(y64),
        x.to(ferro.float64, non_blocking=True),
        x.type(ferro.float64),
        x.type("ferro.DoubleTensor"),
        x.type("torch.DoubleTensor"),
        x.double(),
    ):
        assert out.dtype is ferro.float64 and out.tolist() == [1.5, -2.0]
        assert out.grad_fn is not None  # float -> float is differentiable


def test_to_returns_the_tensor_itself_unless_something_changes_or_copy_is_asked():
    x = ferro.tensor([1.0, 2.0], requires_grad=True)
    assert x.to(ferro.float32) is x and x.to(x) is x and x.to("cpu") is x and x.float() is x
    assert x.to() is x and x.to(None) is x and x.type(ferro.float) is x
    c = x.to(ferro.float32, copy=True)
    assert c is not x and c.tolist() == x.tolist() and c.grad_fn is not None
    c._data[0] = 7.0
    assert x.tolist() == [1.0, 2.0]  # a copy, not a view
    assert x.to("cpu", ferro.float32, False, True) is not x


def test_integer_and_bool_conversions_leave_the_graph():
    x = ferro.tensor([1.7, -0.2, 0.0], requires_grad=True)
    for out, ref in (
        (x.long(), np.array([1.7, -0.2, 0.0]).astype(np.int64)),
        (x.to(ferro.long), np.array([1.7, -0.2, 0.0]).astype(np.int64)),
        (x.bool(), np.array([1.7, -0.2, 0.0]).astype(bool)),
    ):
        assert not out.requires_grad and out.grad_fn is None
        assert out.tolist() == ref.tolist()


def test_gradients_convert_back_through_to():
    x = ferro.tensor([1.0, 2.0], requires_grad=True)
    (x.to(ferro.float64) * ferro.tensor([3.0, 4.0], dtype=ferro.float64)).sum().backward()
    assert x.grad.dtype is ferro.float32 and x.grad.tolist() == [3.0, 4.0]


def test_type_names_the_tensor_type_as_pytorch_does():
    assert ferro.ones(1).type() == "ferro.FloatTensor"
    assert ferro.ones(1, dtype=ferro.double).type() == "ferro.DoubleTensor"
    assert ferro.tensor([1]).type() == "ferro.LongTensor"
    assert ferro.tensor([True]).type() == "ferro.BoolTensor"
    with pytest.raises(DtypeError, match="not a tensor type name"):
        ferro.ones(1).type("ferro.ComplexTensor")


@pytest.mark.parametrize(
    "call",
    [
        lambda x: x.to(1.5),
        lambda x: x.to(ferro.float64, "cpu"),
        lambda x: x.to("cpu", ferro.float64, False, False, True),
        lambda x: x.to(ferro.float64, dtype=ferro.float32),
        lambda x: x.to(x, device="cpu"),
        lambda x: x.to(ferro.float64, colour="red"),
    ],
)
def test_to_refuses_arguments_of_no_form(call):
    x = ferro.ones(2)
    with pytest.raises((ArgumentTypeError, DeviceError)):
        call(x)


# Module.to -------------------------------------------------------------------------------------


def test_module_to_converts_floating_tensors_and_keeps_gradients():
    m = ferro.nn.Linear(3, 2)
    m.register_buffer("count", ferro.tensor([4]))
    (m(ferro.ones(1, 3)).sum()).backward()
    w_grad = m.weight.grad.tolist()
    weight = m.weight
    assert m.to(ferro.float64) is m
    assert m.weight is weight  # the same Parameter objects, converted in place
    assert m.weight.dtype is ferro.float64 and m.bias.dtype is ferro.float64
    assert m.weight.grad.dtype is ferro.float64 and m.weight.grad.tolist() == w_grad
    assert m.count.dtype is ferro.int64  # integer buffers keep their dtype
    before = m.weight._data
    m.to("cpu", ferro.float64)
    assert m.weight._data is before  # nothing to change: nothing touched
    m.to(ferro.zeros(1, dtype=ferro.float32))
    assert m.weight.dtype is ferro.float32 and m.weight.grad.dtype is ferro.float32


def test_module_to_refuses_integer_dtypes_and_copy():
    m = ferro.nn.Linear(2, 2)
    with pytest.raises(DtypeError, match="only floating dtypes"):
        m.to(ferro.int64)
    with pytest.raises(ArgumentTypeError, match="copy"):
        m.to(ferro.float64, copy=True)
    assert m.weight.dtype is ferro.float32


# The accelerator API ---------------------------------------------------------------------------


def test_accelerator_api_answers_on_this_machine():
    acc = ferro.accelerator
    assert acc.is_available() == ferro.cuda.is_available()
    assert acc.device_count() == ferro.cuda.device_count()
    current = acc.current_accelerator()
    assert current is None or (current == "cuda" and current.index is None)
    if not acc.is_available():
        assert acc.current_accelerator(check_available=True) is None
        assert acc.device_count() == 0
        with pytest.raises(DeviceError, match="no accelerator is available"):
            acc.current_device_index()
        with pytest.raises(DeviceError, match="no accelerator is available"):
            acc.set_device_index(0)
        acc.synchronize()  # a no-op without one
    # The PyTorch idiom picks a device either way.
    device = acc.current_accelerator(check_available=True) or ferro.device("cpu")
    assert ferro.ones(2).to(device).device.type == device.type


@pytest.mark.gpu
def test_accelerator_api_with_a_device():
    acc = ferro.accelerator
    assert acc.current_accelerator(check_available=True) == "cuda"
    assert acc.current_device_index() == 0
    acc.set_device_index("cuda:0")
    acc.synchronize(0)
    x = ferro.ones(2).to(acc.current_accelerator())
    assert x.device == "cuda:0" and x.is_cuda and x.type() == "ferro.cuda.FloatTensor"
