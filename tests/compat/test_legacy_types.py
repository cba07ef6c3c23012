"""PyTorch's legacy typed constructors (ferro.legacy): ``ferro.LongTensor(ids)``,
``ferro.FloatTensor(2, 3)``, ``isinstance(t, ferro.FloatTensor)``, ``t.type(ferro.DoubleTensor)``;
checked against plain expectations, and against PyTorch where it is installed."""

import numpy as np
import pytest

import ferro
from ferro.errors import ArgumentTypeError, DtypeError, NotSupportedError

_NAMES = ["FloatTensor", "DoubleTensor", "LongTensor", "BoolTensor"]


@pytest.mark.parametrize("name", _NAMES)
def test_data_is_converted_to_the_type_dtype(name):
    data = [[1, 0, 2]]
    t = getattr(ferro, name)(data)
    assert isinstance(t, ferro.Tensor) and isinstance(t, getattr(ferro, name))
    expect = np.array(data).astype(getattr(ferro, name).dtype)
    np.testing.assert_array_equal(t.numpy(), expect)
    assert t.dtype == expect.dtype and not t.requires_grad


def test_arrays_are_copied_and_converted():
    a = np.array([[2, 3, 1]], np.int32)
    ids = ferro.LongTensor(a)
    a[0, 0] = 9
    assert ids.dtype == ferro.long and ids.tolist() == [[2, 3, 1]]
    assert ferro.FloatTensor(np.arange(3.0)).dtype == ferro.float32


@pytest.mark.parametrize(
    ("args", "shape"),
    [
        ((), (0,)),
        ((2, 3), (2, 3)),
        ((0,), (0,)),
        ((np.int64(4),), (4,)),
        ((ferro.Size([2, 1]),), (2, 1)),
    ],
)
def test_sizes_give_an_uninitialized_tensor(args, shape):
    t = ferro.DoubleTensor(*args)
    assert t.shape == shape and t.dtype == ferro.float64


def test_a_tuple_is_data_not_a_size():
    # As in PyTorch: FloatTensor((2, 3)) is the data [2., 3.]; only a Size is a shape.
    assert ferro.FloatTensor((2, 3)).tolist() == [2.0, 3.0]


def test_a_tensor_of_the_same_type_gives_an_alias_without_history():
    x = ferro.ones(2, requires_grad=True)
    y = ferro.FloatTensor(x)
    assert np.shares_memory(y.numpy(), x.detach().numpy()) and not y.requires_grad
    with pytest.raises(DtypeError, match="LongTensor.*ferro.FloatTensor"):
        ferro.LongTensor(x)


def test_instance_checks_look_at_dtype_and_device():
    x = ferro.ones(2)
    assert isinstance(x, ferro.FloatTensor)
    assert not isinstance(x, (ferro.DoubleTensor, ferro.LongTensor, ferro.cuda.FloatTensor))
    assert isinstance(ferro.tensor([1]), ferro.LongTensor)
    assert not isinstance(np.ones(2, np.float32), ferro.FloatTensor)
    assert not isinstance(1.0, ferro.FloatTensor)


def test_type_converts_to_a_typed_constructor():
    x = ferro.tensor([1.5, 2.5], requires_grad=True)
    y = x.type(ferro.DoubleTensor)
    assert y.dtype == ferro.float64
    y.sum().backward()
    assert x.grad.tolist() == [1.0, 1.0]
    assert x.type(ferro.LongTensor).tolist() == [1, 2]
    assert x.type(ferro.FloatTensor) is x  # as x.to(its own dtype)


def test_types_ferro_does_not_hold_raise_not_supported():
    for cls in (ferro.IntTensor, ferro.HalfTensor, ferro.ByteTensor):
        with pytest.raises(NotSupportedError, match=cls.__name__):
            cls([1, 2])


def test_bad_arguments_raise_typed_errors():
    with pytest.raises(ArgumentTypeError, match="FloatTensor.*int, str"):
        ferro.FloatTensor(2, "a")
    with pytest.raises(ArgumentTypeError, match="FloatTensor"):
        ferro.FloatTensor("abc")
    with pytest.raises(ArgumentTypeError):
        ferro.FloatTensor(2, True)


def test_repr_and_cuda_names():
    assert repr(ferro.FloatTensor) == "<class 'ferro.FloatTensor'>"
    assert repr(ferro.cuda.LongTensor) == "<class 'ferro.cuda.LongTensor'>"
    assert ferro.cuda.LongTensor.dtype == ferro.int64 and ferro.cuda.LongTensor.is_cuda
    with pytest.raises(AttributeError):
        ferro.cuda.NoSuchTensor  # noqa: B018


@pytest.mark.torch
@pytest.mark.parametrize("name", _NAMES)
def test_against_pytorch(name):
    torch = pytest.importorskip("torch")
    for args in ([[1, 0, 2]], (2, 3), (), [np.array([1, 2], np.int32)]):
        ours, theirs = getattr(ferro, name)(*args), getattr(torch, name)(*args)
        assert tuple(ours.shape) == tuple(theirs.shape)
        assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
        if args and not isinstance(args[0], int):
            assert ours.tolist() == theirs.tolist()
    assert ferro.ones(2).type(getattr(ferro, name)).type() == "ferro." + name


def test_variable_is_a_detached_alias_with_requires_grad_as_given():
    import warnings

    from ferro.autograd import Variable

    t = ferro.ones(2)
    v = Variable(t, requires_grad=True)
    assert type(v) is ferro.Tensor and v.is_leaf and v.requires_grad
    assert isinstance(t, Variable) and isinstance(v, Variable) and not isinstance([1.0], Variable)
    v.data[0] = 5.0  # shares t's memory
    assert t[0].item() == 5.0
    w = ferro.ones(2, requires_grad=True) * 2
    u = Variable(w)
    assert not u.requires_grad and u.grad_fn is None and u is not w
    with pytest.raises(TypeError, match="Variable: data has to be a tensor, but got list"):
        Variable([1.0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Variable(t, volatile=True)
    assert any("volatile was removed" in str(c.message) for c in caught)


def test_tensor_new_is_the_legacy_constructor_of_its_type():
    # Older pytorch/examples word_language_model: weight.new(nlayers, bsz, nhid).zero_()
    weight = ferro.randn(3, 4, requires_grad=True)
    h = weight.new(2, 5, 7).zero_()
    assert h.shape == (2, 5, 7) and h.dtype == ferro.float32 and not h.requires_grad
    assert h.abs().sum().item() == 0.0
    assert weight.new().shape == (0,) and weight.new(ferro.Size([2, 1])).shape == (2, 1)
    assert weight.new([1, 2]).dtype == ferro.float32
    ids = ferro.tensor([1, 2])
    assert ids.new([3.7]).tolist() == [3] and ids.new(np.array([4, 5])).dtype == ferro.int64
    detached = weight.detach()
    assert weight.new(detached) is not detached and np.shares_memory(
        weight.new(detached).numpy(), detached.numpy()
    )
    with pytest.raises(DtypeError, match="expected a tensor of type ferro.FloatTensor"):
        weight.new(ids)
    with pytest.raises(ArgumentTypeError, match="expected sizes"):
        weight.new("ab")


@pytest.mark.torch
def test_tensor_new_matches_torch():
    torch = pytest.importorskip("torch")
    for ours, theirs in ((ferro.zeros(2), torch.zeros(2)), (ferro.tensor([1]), torch.tensor([1]))):
        for args in ((3, 2), ([1, 2],), ()):
            a, b = ours.new(*args), theirs.new(*args)
            assert (
                tuple(a.shape) == tuple(b.shape)
                and a.type().split(".")[-1] == b.type().split(".")[-1]
            )
