"""Tensors made from user data: bad data and sizes raise a typed error naming what was wrong
(never a wrapped-around, empty or mis-typed tensor); what PyTorch converts is converted."""

import numpy as np
import pytest

import ferro
from ferro.errors import ArgumentError, ArgumentTypeError, DtypeError

BAD = {
    "None": (lambda: ferro.tensor(None), ArgumentTypeError, "None"),
    "None in a list": (lambda: ferro.tensor([1.0, None]), ArgumentTypeError, "None"),
    "ragged list": (lambda: ferro.tensor([[1.0], [1.0, 2.0]]), ArgumentTypeError, "inhomogeneous"),
    "strings": (lambda: ferro.tensor(["a", "b"]), ArgumentTypeError, "not numbers"),
    "a dict": (lambda: ferro.tensor({"a": 1}), ArgumentTypeError, "dict"),
    "string array": (lambda: ferro.tensor(np.array(["a"])), ArgumentTypeError, "<U1"),
    "object array": (
        lambda: ferro.tensor(np.array([1, "a"], dtype=object)),
        ArgumentTypeError,
        "object",
    ),
    "from_numpy objects": (
        lambda: ferro.from_numpy(np.array([1.0], dtype=object)),
        ArgumentTypeError,
        "not numbers",
    ),
    "from_numpy int32": (lambda: ferro.from_numpy(np.ones(2, np.int32)), DtypeError, "int32"),
    "complex": (lambda: ferro.tensor([1 + 2j]), DtypeError, "complex"),
    "long double": (lambda: ferro.tensor(np.ones(2, np.longdouble)), DtypeError, "long double"),
    "uint64 above int64": (
        lambda: ferro.tensor(np.array([2**64 - 1], np.uint64)),
        ArgumentError,
        "18446744073709551615 does not fit int64",
    ),
    "int 2**63": (lambda: ferro.tensor([2**63]), ArgumentError, "does not fit int64"),
    "int 2**70": (lambda: ferro.tensor([1, 2**70]), ArgumentError, "does not fit int64"),
    "int below int64": (lambda: ferro.tensor([-(2**63) - 1]), ArgumentError, "does not fit"),
    "nan to int64": (
        lambda: ferro.tensor([float("nan")], dtype=ferro.int64),
        ArgumentError,
        "nan cannot be converted to int64",
    ),
    "1e30 to int64": (lambda: ferro.tensor([1e30], dtype="long"), ArgumentError, "int64"),
    "unknown dtype": (lambda: ferro.tensor([1.0], dtype="float7"), DtypeError, "float7"),
    "dtype None in cast": (lambda: ferro.cast(ferro.ones(1), None), DtypeError, "None"),
    "from_numpy big-endian": (
        lambda: ferro.from_numpy(np.ones(2, ">f4")),
        DtypeError,
        "byte order different from the native byte order",
    ),
    "from_numpy a list": (lambda: ferro.from_numpy([1.0]), ArgumentTypeError, "numpy.ndarray"),
    "negative size": (lambda: ferro.zeros(2, -1), ArgumentError, "non-negative"),
    "float size": (lambda: ferro.ones(2.0), ArgumentTypeError, "sizes must be ints"),
    "bool size": (lambda: ferro.empty(True), ArgumentTypeError, "sizes must be ints"),
    "overflowing size": (lambda: ferro.zeros(2**62, 2**62), ArgumentError, "larger than"),
    "overflowing rand": (lambda: ferro.rand(2**61, 16), ArgumentError, "larger than"),
    "full 2**63": (lambda: ferro.full((2,), 2**63), ArgumentError, "does not fit int64"),
    "full None": (lambda: ferro.full((2,), None), ArgumentTypeError, "fill value"),
    "full_like text": (lambda: ferro.full_like(ferro.ones(2), "x"), ArgumentTypeError, "fill"),
    "zeros_like a list": (lambda: ferro.zeros_like([1.0]), ArgumentTypeError, "Tensor"),
    "arange 2**63": (lambda: ferro.arange(0, 2**63), ArgumentError, "fit int64"),
    "arange too long": (lambda: ferro.arange(0, 2**62), ArgumentError, "more than an array"),
    "arange tiny step": (lambda: ferro.arange(0.0, 1e300, 1e-300), ArgumentError, "more than"),
    "arange wrong sign": (lambda: ferro.arange(5, 0), ArgumentError, "does not lead"),
    "arange inf": (lambda: ferro.arange(0, float("inf")), ArgumentError, "finite"),
    "arange step 0": (lambda: ferro.arange(0, 1, 0), ArgumentError, "nonzero"),
    "arange None": (lambda: ferro.arange(None), ArgumentTypeError, "real number"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_data_or_size_raises_a_typed_error(case):
    call, err, match = BAD[case]
    with pytest.raises(err, match=match):
        call()


def test_non_native_byte_order_is_converted_by_tensor():
    big = np.array([0.84, -2.0], ">f4")
    t = ferro.tensor(big)
    assert t.dtype == np.float32 and t._data.dtype.isnative
    np.testing.assert_array_equal(t.numpy(), [np.float32(0.84), -2.0])
    # The fused kernels read native order: gelu(0.84) is 0.672, not a value of the byte-swapped
    # bits (1.6e-19 when the big-endian array reached them).
    np.testing.assert_allclose(ferro.gelu(t).numpy()[0], 0.6720, rtol=1e-3)
    assert ferro.tensor(np.array([7], ">i4")).tolist() == [7]
    assert ferro.tensor([1.0], dtype=">f8").dtype == np.float64


def test_conversions_that_pytorch_makes():
    assert ferro.tensor([True, 1.5]).tolist() == [1.0, 1.5]
    assert ferro.tensor([True, 2]).dtype == np.int64
    assert ferro.tensor(np.ones(2, np.float16)).dtype == np.float32
    assert ferro.tensor(np.array([2**63 - 1], np.uint64)).tolist() == [2**63 - 1]
    x = ferro.tensor([1.0, 2.0], requires_grad=True)
    assert ferro.tensor([x[0], x[1]]).tolist() == [1.0, 2.0]
    copy = ferro.tensor(x)
    copy._data[0] = 5.0
    assert x.tolist() == [1.0, 2.0] and not copy.requires_grad


def test_sizes_accept_integer_scalars_and_one_element_tensors():
    assert ferro.zeros(np.int64(2), ferro.tensor(3)).shape == (2, 3)
    assert ferro.full([2], 7).tolist() == [7, 7]
    assert ferro.zeros(0, 2**40).shape == (0, 2**40)


def test_arange_exact_at_the_int64_edges_and_with_negative_steps():
    assert ferro.arange(2**63 - 3, 2**63 - 1).tolist() == [2**63 - 3, 2**63 - 2]
    assert ferro.arange(5, 0, -2).tolist() == [5, 3, 1]
    assert ferro.arange(3, 3).shape == (0,)
    assert ferro.arange(0.0, 1.0, 0.25).tolist() == [0.0, 0.25, 0.5, 0.75]


def test_from_numpy_shares_memory_of_a_memmap_and_of_a_read_only_array(tmp_path):
    path = tmp_path / "w.npy"
    np.save(path, np.arange(4.0))
    mm = np.load(path, mmap_mode="r")
    t = ferro.from_numpy(mm)
    assert type(t._data) is np.ndarray and np.shares_memory(t._data, mm)
    assert not t._data.flags.writeable and t.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert (t * 2).tolist() == [0.0, 2.0, 4.0, 6.0]
    ro = np.frombuffer(np.arange(3.0).tobytes())
    assert ferro.from_numpy(ro).sum().item() == 3.0
