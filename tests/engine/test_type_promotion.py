"""Note [Type promotion]: tensors of different dtypes in one op follow PyTorch's result type,
and each input's gradient comes back in the input's own dtype."""

import numpy as np
import pytest

import ferro

F32, F64, I64, B = ferro.float32, ferro.float64, ferro.int64, ferro.bool


def _t(dtype, shape=(3,)):
    if np.dtype(dtype) == np.bool_:
        return ferro.tensor(np.ones(shape, dtype=bool))
    return ferro.tensor(np.arange(1, 1 + int(np.prod(shape))).reshape(shape), dtype=dtype)


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ((F32, (3,)), (F64, (3,)), F64),  # within a category: the widest
        ((I64, (3,)), (F32, (3,)), F32),  # a higher category wins
        ((B, (3,)), (I64, (3,)), I64),
        ((F32, (3,)), (F64, ()), F32),  # a 0-d tensor does not widen a dimensioned one
        ((I64, (3,)), (F64, ()), F64),  # ... unless its category is higher
        ((F64, ()), (F32, ()), F64),  # only 0-d tensors: the widest
    ],
)
def test_result_type_follows_pytorch(a, b, expected):
    x, y = _t(*a), _t(*b)
    assert (x + y).dtype == expected
    assert (y * x).dtype == expected


def test_gradients_come_back_in_each_inputs_dtype():
    a = ferro.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = ferro.tensor([0.5, 0.25, 2.0], dtype=ferro.float64, requires_grad=True)
    (a * b).sum().backward()
    assert a.grad.dtype == np.float32 and b.grad.dtype == np.float64
    np.testing.assert_allclose(a.grad.numpy(), [0.5, 0.25, 2.0])
    np.testing.assert_allclose(b.grad.numpy(), [1.0, 2.0, 3.0])


def test_float_tensor_to_the_power_of_an_int_tensor():
    # The PyTorch tutorial's x.unsqueeze(-1).pow(p): float32 ** int64 -> float32.
    x = ferro.linspace(-1.0, 1.0, 5, requires_grad=True)
    p = ferro.tensor([1, 2, 3])
    y = x.unsqueeze(-1).pow(p)
    assert y.dtype == np.float32 and y.shape == (5, 3)
    y.sum().backward()
    xs = np.linspace(-1, 1, 5)
    np.testing.assert_allclose(x.grad.numpy(), 1 + 2 * xs + 3 * xs**2, rtol=1e-6)


@pytest.mark.torch
def test_matches_torch_result_type():
    import torch

    for a, b in [((F32, (3,)), (F64, (3,))), ((I64, (3,)), (F32, (3,))), ((F32, (3,)), (F64, ()))]:
        x, y = _t(*a), _t(*b)
        tx, ty = torch.from_numpy(x.numpy().copy()), torch.from_numpy(y.numpy().copy())
        assert str((x + y).dtype) == str(torch.result_type(tx, ty)).replace("torch.", "")
