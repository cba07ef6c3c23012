"""Tensors in NumPy calls, Python's number protocols, pickle and deepcopy.

NumPy calls that ferro has an op for dispatch to it (a Tensor with history); any other NumPy
call on a tensor that requires grad raises ArgumentTypeError instead of silently dropping the
graph; tensors that do not require grad keep working with NumPy.
"""

import copy
import pickle

import numpy as np
import pytest

import ferro
from ferro.errors import ArgumentTypeError, GraphError


def _leaf(values=(0.5, -1.0, 2.0)):
    return ferro.tensor(list(values), requires_grad=True)


# (numpy call, the equivalent ferro expression) on x = [0.5, -1, 2] requiring grad.
DISPATCHED = {
    "exp": (lambda x: np.exp(x), lambda x: ferro.exp(x)),
    "add scalar": (lambda x: np.add(x, 1.0), lambda x: x + 1.0),
    "ndarray * t": (
        lambda x: np.array([1.0, 2.0, 3.0], np.float32) * x,
        lambda x: x * ferro.tensor([1.0, 2.0, 3.0]),
    ),
    "power": (lambda x: np.power(x, 2.0), lambda x: x * x),
    "maximum": (lambda x: np.maximum(x, 0.0), lambda x: ferro.relu(x)),
    "sum axis": (lambda x: np.sum(x.reshape(3, 1), axis=0), lambda x: x.sum().reshape(1)),
    "mean": (lambda x: np.mean(x), lambda x: x.mean()),
    "max": (lambda x: np.max(x), lambda x: ferro.amax(x)),
    "std": (lambda x: np.std(x, ddof=1), lambda x: ferro.std(x)),
    "concatenate": (lambda x: np.concatenate([x, x]), lambda x: ferro.cat([x, x])),
    "stack": (lambda x: np.stack([x, x], axis=1), lambda x: ferro.stack([x, x], 1)),
    "reshape": (lambda x: np.reshape(x, (3, 1)), lambda x: x.reshape(3, 1)),
    "transpose": (lambda x: np.transpose(x.reshape(1, 3)), lambda x: x.reshape(3, 1)),
    "where": (
        lambda x: np.where(np.array([True, False, True]), x, 0.0),
        lambda x: x * ferro.tensor([1.0, 0.0, 1.0]),
    ),
    "dot": (lambda x: np.dot(x, x), lambda x: (x * x).sum()),
    "einsum": (lambda x: np.einsum("i,i->", x, x), lambda x: (x * x).sum()),
    "cumsum": (lambda x: np.cumsum(x), lambda x: ferro.cumsum(x, 0)),
}


@pytest.mark.parametrize("case", sorted(DISPATCHED))
def test_numpy_call_on_a_tensor_requiring_grad_keeps_the_graph(case):
    np_call, ferro_call = DISPATCHED[case]
    x = _leaf()
    y = np_call(x)
    assert isinstance(y, ferro.Tensor) and y.requires_grad and y.grad_fn is not None
    ref = _leaf()
    want = ferro_call(ref)
    np.testing.assert_allclose(y.detach().numpy(), want.detach().numpy(), rtol=1e-6)
    weights = ferro.tensor(np.linspace(1.0, 2.0, y.numel()).reshape(y.shape).astype(np.float32))
    (y * weights).sum().backward()
    (want * weights).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), ref.grad.numpy(), rtol=1e-6)


REFUSED = {
    "ufunc without a ferro op": lambda x: np.arctan(x),
    "ufunc with dtype=": lambda x: np.exp(x, dtype=np.float64),
    "ufunc with out=": lambda x: np.add(x, 1.0, out=np.empty(3, np.float32)),
    "ufunc method": lambda x: np.add.reduce(x),
    "function without a ferro op": lambda x: np.sort(x),
    "function with dtype=": lambda x: np.sum(x, dtype=np.float64),
    "ndarray += t": lambda x: np.zeros(3, np.float32).__iadd__(x),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_numpy_call_that_would_drop_the_graph_raises(case):
    x = _leaf()
    with pytest.raises(ArgumentTypeError, match="numpy.*requires grad") as info:
        REFUSED[case](x)
    assert isinstance(info.value, TypeError)
    assert x.grad is None


def test_tensors_without_grad_keep_working_with_numpy():
    t = ferro.tensor([0.5, -1.0, 2.0])
    data = np.array([0.5, -1.0, 2.0], np.float32)
    np.testing.assert_allclose(np.exp(t).numpy(), np.exp(data))
    arctan = np.arctan(t)
    assert type(arctan) is np.ndarray
    np.testing.assert_allclose(arctan, np.arctan(data))
    assert np.allclose(t, data) and np.array_equal(np.sort(t), np.sort(data))
    assert float(np.sum(t, dtype=np.float64)) == 1.5
    acc = np.zeros(3, np.float32)
    acc += t
    np.testing.assert_array_equal(acc, data)
    assert np.asarray(t) is t._data
    grad_leaf = _leaf()
    assert np.shape(grad_leaf) == (3,) and np.ndim(grad_leaf) == 1 and np.size(grad_leaf) == 3


def test_numpy_out_into_a_tensor_raises():
    t = ferro.zeros(3)
    with pytest.raises(ArgumentTypeError, match="out="):
        np.add(np.ones(3, np.float32), 1.0, out=t)
    assert t.tolist() == [0.0, 0.0, 0.0] and t._version == 0


# Python's number protocols.


def test_format_one_element_tensors_like_their_value():
    loss = (_leaf() * 2).sum()
    assert f"{loss:.4f}" == "3.0000"
    assert f"{ferro.tensor([0.25]):.1%}" == "25.0%"
    assert f"{ferro.tensor(7):>3d}" == "  7"
    t = ferro.tensor([1.0, 2.0])
    assert f"{t}" == repr(t) == str(t)
    with pytest.raises(ArgumentTypeError, match="one-element"):
        f"{t:.2f}"


def test_int_float_and_index_of_one_element_tensors():
    assert int(ferro.tensor([3.7])) == 3 and float((_leaf() * 2).sum()) == 3.0
    assert range(ferro.tensor(3)) == range(3)
    assert [10, 20, 30][ferro.tensor([1])] == 20
    assert "abcd"[ferro.tensor(1) : ferro.tensor(3)] == "bc"
    for bad in (ferro.tensor(2.0), ferro.tensor([1, 2])):
        with pytest.raises(ArgumentTypeError, match="single element"):
            range(bad)


def test_tensor_constructor_refuses_what_would_leave_it_without_data_or_alias_a_tensor():
    # ferro.Tensor(list) / Tensor(*sizes) work as in PyTorch (see
    # tests/engine/test_factories_and_views.py); these calls would give a tensor without data,
    # or one aliasing another behind its graph.
    with pytest.raises(ArgumentTypeError, match=r"ferro\.tensor\(value\)"):
        ferro.Tensor(2.5)
    with pytest.raises(ArgumentTypeError, match=r"t\.detach\(\)"):
        ferro.Tensor(ferro.ones(2))
    t = ferro.Tensor([1.0, 2.0])
    with pytest.raises(ArgumentTypeError, match="already holds data"):
        t.__init__([3.0])
    assert t.tolist() == [1.0, 2.0]


# pickle and deepcopy, as PyTorch.


def test_pickle_keeps_data_dtype_and_requires_grad_not_grad_or_history():
    x = ferro.tensor([1.0, 2.0], dtype=ferro.float64, requires_grad=True)
    (x * x).sum().backward()
    y = pickle.loads(pickle.dumps(x))
    assert type(y) is ferro.Tensor and y.dtype == np.float64 and y.requires_grad
    assert y.tolist() == [1.0, 2.0] and y.grad is None and y.is_leaf
    n = pickle.loads(pickle.dumps(x * 3))
    assert n.is_leaf and n.grad_fn is None and n.requires_grad and n.tolist() == [3.0, 6.0]
    i = pickle.loads(pickle.dumps(ferro.tensor([[1, 2]])))
    assert i.dtype == np.int64 and i.tolist() == [[1, 2]] and not i.requires_grad
    (n * n).sum().backward()
    assert n.grad.tolist() == [6.0, 12.0]


def test_pickle_of_a_parameter_and_of_a_memmap_backed_tensor(tmp_path):
    p = pickle.loads(pickle.dumps(ferro.nn.Parameter(ferro.ones(2), requires_grad=False)))
    assert type(p) is ferro.nn.Parameter and not p.requires_grad and p.tolist() == [1.0, 1.0]
    path = tmp_path / "a.npy"
    np.save(path, np.arange(3.0))
    t = ferro.from_numpy(np.load(path, mmap_mode="r"))
    back = pickle.loads(pickle.dumps(t))
    assert type(back._data) is np.ndarray and back.tolist() == [0.0, 1.0, 2.0]


def test_deepcopy_copies_a_leaf_with_its_grad_and_refuses_a_non_leaf():
    x = _leaf()
    (x * 2).sum().backward()
    y = copy.deepcopy(x)
    assert y.requires_grad and y.is_leaf and y.grad.tolist() == [2.0, 2.0, 2.0]
    y._data[0] = 9.0
    y.grad._data[0] = 9.0
    assert x.tolist()[0] == 0.5 and x.grad.tolist()[0] == 2.0
    with pytest.raises(GraphError, match="deepcopy: only leaf tensors"):
        copy.deepcopy(x * 2)


def test_deepcopy_of_a_module_gives_independent_parameters():
    net = ferro.nn.Linear(3, 2)
    twin = copy.deepcopy(net)
    assert type(twin.weight) is ferro.nn.Parameter and twin.weight.requires_grad
    np.testing.assert_array_equal(twin.weight.detach().numpy(), net.weight.detach().numpy())
    twin.weight._data[...] = 0.0
    assert np.abs(net.weight.detach().numpy()).sum() > 0
