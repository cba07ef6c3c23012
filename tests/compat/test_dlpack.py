"""DLPack interchange (issue 13, item 12): ``ferro.from_dlpack``, ``Tensor.__dlpack__`` and
``ferro.utils.dlpack``. Memory sharing is checked by writing through one side and reading the
other: with NumPy always, with PyTorch (marked ``torch``) when it is installed, with CuPy on a GPU.
"""

import numpy as np
import pytest

import ferro
from ferro.errors import (
    ArgumentTypeError,
    DeviceError,
    DtypeError,
    GraphError,
    ReadOnlyError,
)
from ferro.utils import dlpack


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


# NumPy: always.


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.bool_])
def test_from_dlpack_numpy_shares_memory_both_ways(dtype):
    a = np.zeros((2, 3), dtype)
    t = ferro.from_dlpack(a)
    assert isinstance(t, ferro.Tensor)
    assert t.dtype == a.dtype and t.shape == (2, 3) and not t.requires_grad
    a[1, 2] = 1
    assert t.tolist()[1][2] == 1
    t._data[0, 0] = 1
    assert a[0, 0] == 1


def test_from_dlpack_keeps_strides_of_a_view():
    a = np.arange(6.0).reshape(2, 3)
    t = ferro.from_dlpack(a.T)
    np.testing.assert_array_equal(t.numpy(), a.T)
    a[0, 1] = -1.0
    assert t.tolist()[1][0] == -1.0


def test_from_dlpack_copy_true_does_not_share():
    a = np.zeros(3, np.float32)
    t = ferro.from_dlpack(a, copy=True)
    a[0] = 5.0
    assert t.tolist() == [0.0, 0.0, 0.0]


def test_numpy_from_dlpack_of_a_tensor_shares_memory():
    t = ferro.zeros(4)
    a = np.from_dlpack(t)
    a[2] = 3.0
    assert t.tolist() == [0.0, 0.0, 3.0, 0.0]
    t.add_(1.0)
    np.testing.assert_array_equal(a, [1.0, 1.0, 4.0, 1.0])


def test_exported_memory_outlives_the_tensor():
    t = ferro.arange(5.0)
    a = np.from_dlpack(t)
    del t
    np.testing.assert_array_equal(a, [0.0, 1.0, 2.0, 3.0, 4.0])


def test_dlpack_device_is_the_cpu():
    assert ferro.zeros(1).__dlpack_device__() == (1, 0)


def test_tensor_that_requires_grad_is_not_exported():
    w = ferro.ones(2, requires_grad=True)
    with pytest.raises(GraphError, match="detach"):
        np.from_dlpack(w)
    a = np.from_dlpack(w.detach())
    a[0] = 7.0
    assert w.tolist() == [7.0, 1.0] and w.grad is None and w.requires_grad


def test_read_only_tensor_exports_read_only_or_refuses_a_legacy_capsule():
    ro = np.arange(3.0)
    ro.flags.writeable = False
    t = ferro.from_numpy(ro)
    a = np.from_dlpack(t)  # NumPy asks for DLPack 1.0, which marks the memory read-only
    assert not a.flags.writeable and a.tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(ReadOnlyError, match="read-only"):
        dlpack.to_dlpack(t)
    assert ferro.from_dlpack(ro)._data.flags.writeable is False


def test_from_dlpack_rejects_what_it_cannot_hold():
    with pytest.raises(DtypeError, match="int32"):
        ferro.from_dlpack(np.zeros(2, np.int32))
    with pytest.raises(ArgumentTypeError, match="got list"):
        ferro.from_dlpack([1.0, 2.0])


class _Producer:
    """A DLPack producer on a device ferro does not hold (device type 4: OpenCL)."""

    def __dlpack__(self, **kwargs):
        return np.zeros(1).__dlpack__()

    def __dlpack_device__(self):
        return (4, 0)


def test_from_dlpack_rejects_an_unsupported_device():
    with pytest.raises(DeviceError, match="device type 4"):
        ferro.from_dlpack(_Producer())


def test_utils_dlpack_capsule_round_trip_shares_memory():
    t = ferro.zeros(3)
    back = dlpack.from_dlpack(dlpack.to_dlpack(t))
    back._data[1] = 2.0
    assert t.tolist() == [0.0, 2.0, 0.0]
    capsule = dlpack.to_dlpack(t)
    dlpack.from_dlpack(capsule)
    with pytest.raises(ArgumentTypeError, match="consumed once"):
        dlpack.from_dlpack(capsule)  # the first import took ownership
    with pytest.raises(ArgumentTypeError, match="Tensor"):
        dlpack.to_dlpack(np.zeros(2))


# PyTorch as the other side.


@pytest.mark.torch
def test_torch_from_dlpack_of_a_tensor_shares_memory(torch):
    t = ferro.zeros(2, 2, dtype=ferro.float64)
    x = torch.from_dlpack(t)
    assert x.dtype == torch.float64 and tuple(x.shape) == (2, 2)
    x[0, 1] = 4.0
    assert t.tolist() == [[0.0, 4.0], [0.0, 0.0]]
    t.mul_(2.0)
    assert x.tolist() == [[0.0, 8.0], [0.0, 0.0]]


@pytest.mark.torch
def test_ferro_from_dlpack_of_torch_shares_memory(torch):
    x = torch.zeros(3, dtype=torch.int64)
    t = ferro.from_dlpack(x)
    assert t.dtype == ferro.int64
    x[0] = 9
    assert t.tolist() == [9, 0, 0]
    t._data[2] = -1
    assert x.tolist() == [9, 0, -1]


@pytest.mark.torch
def test_capsules_cross_with_torch_utils_dlpack(torch):
    x = torch.ones(2)
    t = dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(x))
    y = torch.utils.dlpack.from_dlpack(dlpack.to_dlpack(t))
    y[1] = 5.0
    assert x.tolist() == [1.0, 5.0] and t.tolist() == [1.0, 5.0]


@pytest.mark.torch
def test_imported_torch_memory_outlives_the_torch_tensor(torch):
    x = torch.arange(3.0)
    t = dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(x))
    del x
    t.add_(1.0)  # a legacy capsule imports writeable, as torch.utils.dlpack.from_dlpack does
    assert t.tolist() == [1.0, 2.0, 3.0]


@pytest.mark.torch
def test_requires_grad_is_refused_as_torch_refuses(torch):
    with pytest.raises(BufferError):
        torch.ones(1, requires_grad=True).__dlpack__()
    with pytest.raises(GraphError):
        torch.from_dlpack(ferro.ones(1, requires_grad=True))


# CuPy on CUDA.


@pytest.mark.gpu
def test_cuda_round_trip_shares_memory():
    cupy = pytest.importorskip("cupy")
    c = cupy.zeros(3, cupy.float32)
    t = ferro.from_dlpack(c)
    assert t.device == "cuda:0" and t.__dlpack_device__() == (2, 0)
    c[0] = 2.0
    assert t.tolist() == [2.0, 0.0, 0.0]
    back = cupy.from_dlpack(t)
    back[1] = 3.0
    assert c.tolist() == [2.0, 3.0, 0.0]
