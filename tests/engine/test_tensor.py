"""Tensor construction, dtypes, conversion, leaf rules, the generator."""

import numpy as np
import pytest

import ferro
from ferro.errors import DtypeError, GraphError, NotSupportedError, ShapeError


def test_default_dtypes_follow_pytorch():
    assert ferro.tensor([1.0, 2.0]).dtype == np.float32
    assert ferro.tensor([1, 2]).dtype == np.int64
    assert ferro.tensor([True]).dtype == np.bool_
    assert ferro.tensor(np.ones(2, np.float64)).dtype == np.float64
    assert ferro.tensor(np.ones(2, np.int32)).dtype == np.int64
    assert ferro.full((2,), 7).dtype == np.int64
    assert ferro.arange(3).dtype == np.int64 and ferro.arange(0.0, 1.0, 0.5).dtype == np.float32


def test_tensor_copies_and_from_numpy_shares_memory():
    a = np.zeros(3, np.float32)
    t = ferro.tensor(a)
    f = ferro.from_numpy(a)
    a[0] = 5
    assert t.numpy()[0] == 0 and f.numpy()[0] == 5


def test_0d_tensor_keeps_its_shape():
    t = ferro.tensor(3.0)
    assert t.shape == () and t.ndim == 0 and t.item() == 3.0
    y = (t * 2).exp()
    assert y.shape == () and isinstance(y._data, np.ndarray)


def test_unsupported_dtypes_raise():
    # Data of a dtype ferro lacks is a DtypeError; asking for such a dtype names the missing
    # feature (NotSupportedError, as ferro.errors documents for float16).
    with pytest.raises(DtypeError, match="float16"):
        ferro.from_numpy(np.ones(2, np.float16))
    with pytest.raises(NotSupportedError, match="complex"):
        ferro.zeros(2, dtype=np.complex64)


def test_only_float_tensors_can_require_grad():
    with pytest.raises(DtypeError, match="floating"):
        ferro.tensor([1, 2], requires_grad=True)


def test_non_leaf_requires_grad_cannot_be_switched_off():
    x = ferro.ones(2, requires_grad=True)
    y = x * 2
    assert not y.is_leaf and x.is_leaf
    with pytest.raises(GraphError, match="leaf"):
        y.requires_grad = False


def test_numpy_refuses_tensor_requiring_grad():
    x = ferro.ones(2, requires_grad=True)
    with pytest.raises(GraphError, match="detach"):
        x.numpy()
    assert x.detach().numpy().shape == (2,)


def test_detach_shares_data_and_leaves_graph():
    x = ferro.ones(2, requires_grad=True)
    d = (x * 2).detach()
    assert not d.requires_grad and d.grad_fn is None


def test_item_size_numel_len_repr():
    t = ferro.zeros(2, 3)
    assert t.size() == (2, 3) and t.size(1) == 3 and t.numel() == 6 and len(t) == 2
    with pytest.raises(ShapeError):
        t.item()
    assert repr(ferro.tensor([1.0, 2.0], requires_grad=True)) == (
        "tensor([1., 2.], requires_grad=True)"
    )
    assert "grad_fn=<MulBackward>" in repr(ferro.ones(1, requires_grad=True) * 2)
    assert "dtype=ferro.float64" in repr(ferro.zeros(1, dtype=ferro.float64))


def test_array_protocol_and_bool():
    t = ferro.tensor([1.0, 2.0])
    assert np.asarray(t).tolist() == [1.0, 2.0]
    assert bool(ferro.tensor([1.0])) and float(ferro.tensor(2.0)) == 2.0
    with pytest.raises(ShapeError):
        bool(t)


def test_grad_setter_checks_shape_and_dtype():
    x = ferro.ones(2, requires_grad=True)
    with pytest.raises(ShapeError):
        x.grad = ferro.ones(3)
    with pytest.raises(DtypeError):
        x.grad = ferro.ones(2, dtype=ferro.float64)
    x.grad = ferro.ones(2)
    x.grad = None


def test_factories_shapes_and_requires_grad():
    assert ferro.zeros((2, 3)).shape == (2, 3)
    assert ferro.ones(2, 3, requires_grad=True).requires_grad
    assert ferro.zeros_like(ferro.ones(4, dtype=ferro.float64)).dtype == np.float64
    assert ferro.ones_like(ferro.ones(2, 2)).numpy().sum() == 4
    assert ferro.full((2, 2), 1.5).numpy().tolist() == [[1.5, 1.5], [1.5, 1.5]]
    assert ferro.rand(3, 4).shape == (3, 4) and ferro.randn(5).dtype == np.float32
    with pytest.raises(ValueError):
        ferro.zeros(-1)


def test_manual_seed_reproduces_and_rng_state_round_trips():
    ferro.manual_seed(42)
    a = ferro.randn(4).numpy().copy()
    ferro.manual_seed(42)
    np.testing.assert_array_equal(ferro.randn(4).numpy(), a)
    state = ferro.get_rng_state()
    b = ferro.rand(3).numpy().copy()
    ferro.set_rng_state(state)
    np.testing.assert_array_equal(ferro.rand(3).numpy(), b)
    with pytest.raises(TypeError):
        ferro.set_rng_state({"bad": 1})


def test_operators_and_reflected_operators():
    x = ferro.tensor([1.0, 2.0], requires_grad=True)
    y = (2 - x) + (1 / x) + x**2 + 2**x + (-x) + x @ x
    expected = (
        (2 - np.array([1.0, 2.0]))
        + 1 / np.array([1.0, 2.0])
        + np.array([1.0, 4.0])
        + 2 ** np.array([1.0, 2.0])
        - np.array([1.0, 2.0])
        + 5.0
    )
    np.testing.assert_allclose(y.detach().numpy(), expected, rtol=1e-6)
    y.sum().backward()
    xs = np.array([1.0, 2.0])
    want = -1 - 1 / xs**2 + 2 * xs + np.log(2) * 2**xs - 1 + 2 * 2 * xs
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-5)


def test_ndarray_operand_defers_to_tensor():
    x = ferro.tensor([1.0, 2.0], requires_grad=True)
    y = np.array([3.0, 4.0], np.float32) * x
    assert isinstance(y, ferro.Tensor) and y.requires_grad


def test_to_float_double_cast_gradients():
    x = ferro.tensor([1.0, 2.0], requires_grad=True)
    y = x.double() * 3.0
    assert y.dtype == np.float64
    y.sum().backward()
    assert x.grad.dtype == np.float32
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])
