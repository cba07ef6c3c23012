"""In-place ops write the values they promise, whatever the tensor held before."""

import numpy as np

import ferro


def test_fill_and_zero_replace_inf_and_nan():
    # fill_ used to compute t * 0 + value, which is NaN wherever t is Inf or NaN.
    t = ferro.tensor([np.inf, -np.inf, np.nan, 1.0])
    assert t.fill_(2.5).tolist() == [2.5] * 4
    t = ferro.tensor([np.inf, np.nan])
    assert t.zero_().tolist() == [0.0, 0.0]


def test_fill_casts_to_the_tensor_dtype_and_keeps_its_memory():
    arr = np.array([1, 2, 3])
    t = ferro.from_numpy(arr)
    t.fill_(7.9)
    assert t.dtype == np.int64 and t.tolist() == [7, 7, 7]
    assert arr.tolist() == [7, 7, 7]  # written in place, not rebound


def test_fill_on_a_non_leaf_records_a_zero_gradient_like_pytorch():
    # PyTorch: y = x * 2; y.fill_(5) gives y a FillBackward, and x.grad is zeros. ferro kept
    # y's old history, which the in-place write made stale (GraphError at the next op).
    x = ferro.tensor([float("inf"), 1.0, 2.0], requires_grad=True)
    y = x * 2
    y.fill_(5.0)
    (y * 3).sum().backward()
    np.testing.assert_array_equal(y.detach().numpy(), [5, 5, 5])
    np.testing.assert_array_equal(x.grad.numpy(), [0, 0, 0])
