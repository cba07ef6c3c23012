"""PyTorch's creation functions and Tensor construction/view methods (issue 13, items 4 and 7),
checked against NumPy references. The torch-oracle versions are in
tests/compat/test_creation_compat.py."""

import math

import numpy as np
import pytest

import ferro
from ferro.errors import (
    ArgumentError,
    ArgumentTypeError,
    DtypeError,
    IndexOutOfRangeError,
    ShapeError,
)

# linspace / logspace / eye


@pytest.mark.parametrize(
    "start,end,steps", [(0, 1, 5), (-math.pi, math.pi, 2000), (5, -5, 11), (2.5, 2.5, 3)]
)
def test_linspace_matches_numpy_and_hits_both_ends_exactly(start, end, steps):
    out = ferro.linspace(start, end, steps)
    assert out.dtype == ferro.float32 and out.shape == (steps,)
    ref = np.linspace(start, end, steps)
    np.testing.assert_allclose(out.numpy(), ref, rtol=0, atol=4e-7 * max(abs(start), abs(end)))
    assert out.numpy()[0] == np.float32(start) and out.numpy()[-1] == np.float32(end)


def test_linspace_dtype_device_requires_grad_and_edge_counts():
    x = ferro.linspace(0, 1, 3, dtype=ferro.float64, device="cpu", requires_grad=True)
    assert x.dtype == ferro.float64 and x.requires_grad and x.is_leaf
    assert x.tolist() == [0.0, 0.5, 1.0]
    assert ferro.linspace(0, 1, 0).shape == (0,)
    assert ferro.linspace(3, 1, 1).tolist() == [3.0]
    # Integer dtypes truncate the bounds first, then the values (PyTorch's rule).
    assert ferro.linspace(-3.7, 10.2, 5, dtype=ferro.int64).tolist() == [-3, 0, 3, 6, 10]


@pytest.mark.parametrize(
    "args,error",
    [
        (("0", 1, 3), ArgumentTypeError),
        ((0, math.inf, 3), ArgumentError),
        ((0, 1, -1), ArgumentError),
        ((0, 1, 2.0), ArgumentTypeError),
    ],
)
def test_linspace_bad_arguments_raise_typed_errors(args, error):
    with pytest.raises(error, match="linspace"):
        ferro.linspace(*args)


def test_logspace_is_base_to_the_linspace():
    np.testing.assert_allclose(ferro.logspace(0, 3, 4).numpy(), [1, 10, 100, 1000], rtol=1e-7)
    out = ferro.logspace(-1, 1, 5, base=2.0, dtype=ferro.float64)
    np.testing.assert_array_equal(out.numpy(), 2.0 ** np.linspace(-1, 1, 5))


def test_eye_square_rectangular_and_dtypes():
    np.testing.assert_array_equal(ferro.eye(3).numpy(), np.eye(3, dtype=np.float32))
    np.testing.assert_array_equal(ferro.eye(2, 4, dtype=ferro.int64).numpy(), np.eye(2, 4))
    assert ferro.eye(2, dtype=ferro.int64).dtype == ferro.int64
    with pytest.raises(ArgumentError, match="eye"):
        ferro.eye(-1)


# random creation


def test_randint_forms_bounds_dtype_and_generator():
    x = ferro.randint(3, 7, (1000,))
    assert x.dtype == ferro.int64 and x.shape == (1000,)
    assert set(x.tolist()) == {3, 4, 5, 6}
    assert set(ferro.randint(2, (50,)).tolist()) == {0, 1}  # randint(high, size)
    assert set(ferro.randint(high=2, size=(50,)).tolist()) == {0, 1}
    f = ferro.randint(0, 4, (3, 2), dtype=ferro.float32)
    assert f.dtype == ferro.float32 and np.all(f.numpy() == np.floor(f.numpy()))
    a = ferro.randint(0, 100, (8,), generator=ferro.Generator().manual_seed(5))
    b = ferro.randint(0, 100, (8,), generator=ferro.Generator().manual_seed(5))
    assert a.tolist() == b.tolist()


@pytest.mark.parametrize(
    "args,kwargs,error",
    [
        ((5, 5, (2,)), {}, ArgumentError),
        ((5,), {}, ArgumentTypeError),
        ((0.5, 2, (2,)), {}, ArgumentTypeError),
        ((0, 2, (2,)), {"dtype": ferro.bool}, DtypeError),
        ((0, 2**63 + 1, (2,)), {}, ArgumentError),
    ],
)
def test_randint_bad_arguments_raise_typed_errors(args, kwargs, error):
    with pytest.raises(error, match="randint"):
        ferro.randint(*args, **kwargs)


def test_randperm_is_a_permutation_and_follows_the_generator():
    p = ferro.randperm(50)
    assert p.dtype == ferro.int64 and sorted(p.tolist()) == list(range(50))
    g1, g2 = ferro.Generator().manual_seed(1), ferro.Generator().manual_seed(1)
    assert ferro.randperm(20, generator=g1).tolist() == ferro.randperm(20, generator=g2).tolist()
    assert ferro.randperm(0).shape == (0,)
    assert ferro.randperm(4, dtype=ferro.float64).dtype == ferro.float64


def test_like_functions_take_shape_dtype_device_of_their_tensor():
    t = ferro.zeros(3, 4, dtype=ferro.float64)
    for fn in (ferro.rand_like, ferro.randn_like, ferro.empty_like):
        out = fn(t)
        assert out.shape == (3, 4) and out.dtype == ferro.float64 and out.device == "cpu"
        assert fn(t, dtype=ferro.float32).dtype == ferro.float32
    u = ferro.rand_like(t).numpy()
    assert u.min() >= 0.0 and u.max() < 1.0
    r = ferro.randint_like(t, 10)
    assert r.dtype == ferro.float64 and set(r.numpy().ravel()) <= set(range(10))
    assert set(ferro.randint_like(ferro.zeros(40, dtype=ferro.int64), 5, 7).tolist()) == {5, 6}
    g = ferro.Generator().manual_seed(3)
    a = ferro.randn_like(t, generator=g).numpy()
    b = ferro.randn_like(t, generator=ferro.Generator().manual_seed(3)).numpy()
    np.testing.assert_array_equal(a, b)
    assert ferro.rand_like(t, requires_grad=True).requires_grad
    with pytest.raises(ArgumentTypeError, match="rand_like"):
        ferro.rand_like(np.zeros(3))


# as_tensor and ferro.Tensor(...)


def test_as_tensor_shares_memory_when_it_can_and_copies_otherwise():
    a = np.zeros(3, np.float32)
    t = ferro.as_tensor(a)
    a[0] = 5.0
    assert t.tolist() == [5.0, 0.0, 0.0]
    c = ferro.as_tensor(a, dtype=ferro.float64)
    a[1] = 7.0
    assert c.dtype == ferro.float64 and c.tolist() == [5.0, 0.0, 0.0]
    assert ferro.as_tensor([1, 2]).dtype == ferro.int64
    x = ferro.ones(2)
    assert ferro.as_tensor(x) is x
    assert ferro.as_tensor(x, dtype=ferro.float64).dtype == ferro.float64


def test_tensor_constructor_like_torch_tensor():
    assert ferro.Tensor([1, 2]).dtype == ferro.float32
    assert ferro.Tensor([[1, 2], [3, 4]]).tolist() == [[1.0, 2.0], [3.0, 4.0]]
    z = ferro.Tensor(2, 3)
    assert z.shape == (2, 3) and z.dtype == ferro.float32 and z.tolist() == [[0.0] * 3] * 2
    assert ferro.Tensor().shape == (0,)
    assert ferro.Tensor((2, 3)).tolist() == [2.0, 3.0]  # a tuple is data, as in PyTorch
    assert ferro.Tensor(np.arange(3)).dtype == ferro.float32
    t = ferro.Tensor([1.0], device="cpu")
    assert type(t) is ferro.Tensor and t.is_leaf and not t.requires_grad
    t.requires_grad_()
    (t * 2).sum().backward()  # a working leaf, not an object without data
    assert t.grad.tolist() == [2.0]
    with pytest.raises(ArgumentTypeError, match="sizes"):
        ferro.Tensor(2, [3])


def test_tensor_constructor_follows_the_default_dtype():
    ferro.set_default_dtype(ferro.float64)
    try:
        assert ferro.Tensor([1, 2]).dtype == ferro.float64
    finally:
        ferro.set_default_dtype(ferro.float32)


# Tensor methods


def test_new_factories_take_dtype_and_device_from_the_tensor():
    x = ferro.ones(2, dtype=ferro.float64)
    assert x.new_zeros(2, 3).dtype == ferro.float64 and x.new_zeros((2, 3)).shape == (2, 3)
    assert x.new_ones(2).tolist() == [1.0, 1.0]
    assert x.new_empty(4).shape == (4,)
    f = x.new_full((2,), 3)
    assert f.dtype == ferro.float64 and f.tolist() == [3.0, 3.0]
    n = x.new_tensor([1, 2])
    assert n.dtype == ferro.float64 and n.tolist() == [1.0, 2.0]
    assert x.new_zeros(2, dtype=ferro.int64).dtype == ferro.int64
    assert x.new_ones(2, requires_grad=True).requires_grad
    assert ferro.ones(1, dtype=ferro.int64).new_tensor([1.5]).tolist() == [1]


def test_contiguous_is_identity_on_contiguous_data_and_copies_a_view():
    x = ferro.arange(6.0).reshape(2, 3).requires_grad_()
    assert x.is_contiguous() and x.contiguous() is x
    y = x.T
    assert not y.is_contiguous()
    c = y.contiguous()
    assert c.is_contiguous() and c.tolist() == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
    (c * ferro.tensor([[1.0, 2.0]] * 3)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]])


def test_as_methods_take_the_other_tensors_shape():
    x = ferro.arange(6.0)
    other = ferro.zeros(2, 3)
    assert x.view_as(other).shape == (2, 3) and x.reshape_as(other).shape == (2, 3)
    e = ferro.tensor([[1.0], [2.0]]).expand_as(other)
    assert e.tolist() == [[1.0] * 3, [2.0] * 3]
    with pytest.raises(ArgumentTypeError, match="view_as"):
        x.view_as((2, 3))


def test_t_transposes_matrices_and_keeps_vectors():
    m = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(ferro.tensor(m).t().numpy(), m.T)
    assert ferro.tensor([1.0, 2.0]).t().tolist() == [1.0, 2.0]
    assert ferro.tensor(3.0).t().item() == 3.0
    with pytest.raises(ShapeError, match="t\\(\\)"):
        ferro.zeros(2, 2, 2).t()


def test_mm_bmm_mv_match_numpy_and_refuse_other_ranks(rng):
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((3, 4))
    np.testing.assert_allclose(ferro.tensor(a).mm(ferro.tensor(b)).numpy(), a @ b, rtol=1e-6)
    v = rng.standard_normal(3)
    np.testing.assert_allclose(ferro.tensor(a).mv(ferro.tensor(v)).numpy(), a @ v, rtol=1e-6)
    p, q = rng.standard_normal((5, 2, 3)), rng.standard_normal((5, 3, 4))
    np.testing.assert_allclose(ferro.tensor(p).bmm(ferro.tensor(q)).numpy(), p @ q, rtol=1e-6)
    with pytest.raises(ShapeError, match="mm"):
        ferro.tensor(a).mm(ferro.tensor(v))
    with pytest.raises(ShapeError, match="batch sizes"):
        ferro.tensor(p).bmm(ferro.tensor(q[:1]))  # matmul would broadcast this
    with pytest.raises(ShapeError, match="mv"):
        ferro.tensor(a).mv(ferro.tensor(a.T))
    with pytest.raises(ArgumentTypeError, match="mm"):
        ferro.tensor(a).mm(b)


def test_mm_is_differentiable():
    a = ferro.tensor([[1.0, 2.0]], requires_grad=True)
    b = ferro.tensor([[3.0], [4.0]], requires_grad=True)
    a.mm(b).sum().backward()
    assert a.grad.tolist() == [[3.0, 4.0]] and b.grad.tolist() == [[1.0], [2.0]]


def test_size_numel_nelement_item_tolist():
    x = ferro.zeros(2, 3)
    assert x.size() == (2, 3) and x.size(1) == 3 and x.size(-2) == 2
    assert x.numel() == x.nelement() == 6
    assert ferro.tensor([2.5]).item() == 2.5 and x.tolist() == [[0.0] * 3] * 2
    with pytest.raises(IndexOutOfRangeError, match="size"):
        x.size(2)
    with pytest.raises(ArgumentTypeError, match="size"):
        x.size("0")


def test_size_as_a_keyword_and_given_twice():
    assert ferro.empty(size=(4, 6)).shape == (4, 6) and ferro.randn(size=[2]).shape == (2,)
    assert ferro.ones(2).new_zeros(size=(3,)).dtype == ferro.float32
    with pytest.raises(ArgumentTypeError, match=r"zeros: the sizes are given twice"):
        ferro.zeros(2, size=(3,))
