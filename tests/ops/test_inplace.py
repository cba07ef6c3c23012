"""In-place ops write the values they promise, whatever the tensor held before."""

import numpy as np
import pytest

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


# --- Note [In-place ops]: with nothing to record, the ufunc runs straight into the memory -----


@pytest.mark.parametrize(
    "op, args",
    [
        ("add_", (0.5,)),
        ("sub_", (2,)),
        ("mul_", (3.0,)),
        ("div_", (4.0,)),
        ("add_", ("row",)),
        ("sub_", ("full",)),
        ("mul_", ("full",)),
        ("div_", ("row",)),
        ("clamp_", (-0.2, 0.3)),
        ("fill_", (1.5,)),
    ],
)
@pytest.mark.parametrize("grad_mode", [False, True])
def test_direct_inplace_writes_memory_and_matches_the_recorded_path(op, args, grad_mode):
    rng = np.random.default_rng(0)
    base = rng.uniform(0.5, 2.0, (3, 4)).astype(np.float32)
    operands = {"row": rng.uniform(0.5, 2.0, 4).astype(np.float32), "full": base[::-1].copy()}
    real = [ferro.from_numpy(operands[a]) if isinstance(a, str) else a for a in args]
    t = ferro.from_numpy(base.copy())
    buf, version = t._data, t._version
    with ferro.set_grad_enabled(grad_mode):
        out = getattr(t, op)(*real)
    assert out is t and t._data is buf and t.grad_fn is None
    assert t._version == version + 1
    # The recorded path (a tensor that requires grad, under grad mode) gives the same values.
    ref = ferro.from_numpy(base.copy()) * 1.0
    ref.requires_grad_(False)
    leaf = ferro.zeros(3, 4, requires_grad=True)
    ref = ref + leaf * 0
    getattr(ref, op)(*real)
    np.testing.assert_array_equal(t.numpy(), ref.detach().numpy())


def test_direct_inplace_update_of_a_parameter_under_no_grad():
    p = ferro.ones(5, requires_grad=True)
    (p * 2).sum().backward()
    with ferro.no_grad():
        p -= 0.1 * p.grad
        p.add_(p.grad, alpha=-0.5)
    np.testing.assert_allclose(p.detach().numpy(), np.full(5, 1 - 0.2 - 1.0), rtol=1e-6)
    assert p.is_leaf and p.requires_grad


def test_direct_inplace_leaves_errors_and_promotion_to_the_recorded_path():
    ro = np.ones(3, dtype=np.float32)
    ro.flags.writeable = False
    with pytest.raises(ferro.errors.ReadOnlyError):
        ferro.from_numpy(ro).add_(1.0)
    i = ferro.tensor([1, 2, 3])
    with pytest.raises(ferro.errors.DtypeError):
        i.add_(0.5)
    t = ferro.zeros(3)
    t.add_(ferro.tensor([1.0, 2.0, 3.0], dtype=ferro.float64))  # float64 into float32: converted
    assert t.dtype == ferro.float32 and t.tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(ferro.errors.ShapeError):
        ferro.zeros(3).add_(ferro.zeros(2, 3))


def test_direct_inplace_alpha_broadcast_and_non_contiguous_match_numpy():
    rng = np.random.default_rng(1)
    base = rng.normal(size=(4, 6)).astype(np.float32)
    col = rng.normal(size=(4, 1)).astype(np.float32)
    t = ferro.from_numpy(base.copy())
    view = t[:, ::2]  # non-contiguous: the ufunc writes through the strides
    with ferro.no_grad():
        view.add_(ferro.from_numpy(col), alpha=-0.5)
        t.mul_(2)
    want = base.copy()
    want[:, ::2] += np.float32(-0.5) * col
    want *= 2
    np.testing.assert_array_equal(t.numpy(), want)
    assert t._version == view._version == 2
    with pytest.raises(ferro.errors.ArgumentError):
        ferro._C.engine.inplace_direct(t, 1.0, 7)
