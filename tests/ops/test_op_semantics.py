"""Op behaviour beyond the generic database: conventions, in-place ops and version counters,
dropout, and clear errors on bad input that leave state untouched."""

import types

import numpy as np
import pytest

import ferro
from ferro.errors import DtypeError, GraphError, IndexOutOfRangeError, ShapeError
from ferro.ops.registry import REGISTRY


def test_max_with_axis_returns_values_and_int64_indices():
    x = ferro.tensor([[1.0, 5.0, 5.0], [2.0, 0.0, 1.0]], requires_grad=True)
    values, idx = ferro.max(x, axis=1)
    assert idx.dtype == np.int64 and not idx.requires_grad
    assert idx.tolist() == [1, 0]
    values.sum().backward()
    # Ties: the gradient goes to the element the indices name (the first maximal one).
    assert x.grad.tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]


def test_full_max_and_amax_split_ties_evenly():
    x = ferro.tensor([1.0, 3.0, 3.0], requires_grad=True)
    ferro.max(x).backward()
    assert x.grad.tolist() == [0.0, 0.5, 0.5]


def test_maximum_splits_ties():
    a = ferro.tensor([1.0, 2.0], requires_grad=True)
    b = ferro.tensor([1.0, 3.0], requires_grad=True)
    ferro.maximum(a, b).sum().backward()
    assert a.grad.tolist() == [0.5, 0.0] and b.grad.tolist() == [0.5, 1.0]


def test_logaddexp_is_finite_and_exact_where_exp_overflows_or_underflows():
    # exp(±1000) is inf/0 in float64: log(exp(a) + exp(b)) would give inf and -inf here.
    a = ferro.tensor([1000.0, -1000.0, 0.0], dtype=ferro.float64, requires_grad=True)
    b = ferro.tensor([1000.0, -1001.0, -40.0], dtype=ferro.float64, requires_grad=True)
    y = ferro.logaddexp(a, b)
    e1, e40 = np.exp(-1.0), np.exp(-40.0)
    np.testing.assert_allclose(
        y.detach().numpy(), [1000 + np.log(2), -1000 + np.log1p(e1), np.log1p(e40)], rtol=1e-15
    )
    y.sum().backward()
    # ga = exp(a - y) = 1 / (1 + exp(b - a)): the softmax weight of a in (a, b).
    np.testing.assert_allclose(a.grad.numpy(), [0.5, 1 / (1 + e1), 1 / (1 + e40)], rtol=1e-14)
    np.testing.assert_allclose(b.grad.numpy(), [0.5, e1 / (1 + e1), e40 / (1 + e40)], rtol=1e-14)


def test_getitem_repeated_integer_indices_accumulate():
    x = ferro.tensor([1.0, 2.0, 3.0], requires_grad=True)
    x[ferro.tensor([0, 0, 2, 0])].sum().backward()
    assert x.grad.tolist() == [3.0, 0.0, 1.0]


def test_getitem_negative_step_and_bool_mask():
    x = ferro.tensor([[1.0, -2.0], [3.0, -4.0]], requires_grad=True)
    y = x[::-1, ::-1]
    assert y.tolist() == [[-4.0, 3.0], [-2.0, 1.0]]
    (x[x > 0] * 2.0).sum().backward()
    assert x.grad.tolist() == [[2.0, 0.0], [2.0, 0.0]]


def test_embedding_padding_row_gets_no_gradient():
    w = ferro.randn(4, 2, requires_grad=True)
    ferro.embedding(ferro.tensor([1, 3, 3]), w, padding_idx=3).sum().backward()
    assert w.grad.tolist()[3] == [0.0, 0.0] and w.grad.tolist()[1] == [1.0, 1.0]


def test_split_unused_pieces_get_zero_gradient():
    x = ferro.ones(5, requires_grad=True)
    a, b, c = ferro.split(x, 2)
    b.sum().backward()
    assert x.grad.tolist() == [0.0, 0.0, 1.0, 1.0, 0.0]


def test_dropout_is_reproducible_and_scaled():
    x = ferro.ones(1000, requires_grad=True)
    ferro.manual_seed(7)
    y1 = ferro.dropout(x, 0.3)
    ferro.manual_seed(7)
    y2 = ferro.dropout(x, 0.3)
    assert np.array_equal(y1.detach().numpy(), y2.detach().numpy())
    vals = np.unique(y1.detach().numpy())
    assert len(vals) == 2 and vals[0] == 0 and np.isclose(vals[1], 1 / 0.7)
    assert 0.2 < (y1.detach().numpy() == 0).mean() < 0.4
    y1.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), y1.detach().numpy())
    assert ferro.dropout(x, 0.3, training=False) is x


def test_dropout_mask_does_not_depend_on_dtype():
    ferro.manual_seed(1)
    a = ferro.dropout(ferro.ones(50), 0.5).numpy() != 0
    ferro.manual_seed(1)
    b = ferro.dropout(ferro.ones(50, dtype=ferro.float64), 0.5).numpy() != 0
    assert np.array_equal(a, b)


# In-place ops and version counters.


def test_inplace_ops_write_memory_and_bump_version():
    t = ferro.zeros(3)
    data = t._data
    t.add_(2).mul_(3)
    t -= 1
    t /= 5
    assert t._data is data and t.tolist() == [1.0, 1.0, 1.0] and t._version == 4
    t.zero_()
    assert t.tolist() == [0.0, 0.0, 0.0]
    t.fill_(2.5).clamp_(max=1.0)
    assert t.tolist() == [1.0, 1.0, 1.0]


def test_inplace_on_leaf_requiring_grad_raises_unless_no_grad():
    w = ferro.ones(2, requires_grad=True)
    with pytest.raises(GraphError, match="leaf"):
        w.add_(1)
    assert w.tolist() == [1.0, 1.0] and w._version == 0
    with ferro.no_grad():
        w -= 0.5
    assert w.tolist() == [0.5, 0.5] and w.is_leaf and w.requires_grad


def test_inplace_on_non_leaf_is_differentiable():
    x = ferro.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2.0
    h.mul_(3.0)
    h += 1.0
    assert not h.is_leaf
    h.sum().backward()
    assert x.grad.tolist() == [6.0, 6.0]


def test_modifying_a_saved_tensor_is_detected_and_named():
    x = ferro.tensor([1.0, 2.0], requires_grad=True)
    y = x.tanh()
    z = y * 1.0
    y.add_(1.0)  # TanhBackward saved y
    with pytest.raises(GraphError, match=r"TanhBackward.*shape \(2,\).*version 0 when saved, 1"):
        z.sum().backward()
    assert x.grad is None


def test_modifying_a_saved_leaf_under_no_grad_is_detected():
    w = ferro.tensor([1.0, 2.0], requires_grad=True)
    x = ferro.tensor([3.0, 4.0], requires_grad=True)
    loss = (w * x).sum()
    with ferro.no_grad():
        w.mul_(2.0)
    with pytest.raises(GraphError, match="MulBackward"):
        loss.backward()


def test_inplace_through_a_view_makes_the_base_history_stale():
    x = ferro.tensor([1.0, 2.0, 3.0], requires_grad=True)
    h = x * 2.0
    v = h[0:2]
    v.mul_(3.0)
    with pytest.raises(GraphError, match="stale"):
        h.sum()


def test_views_share_the_version_counter():
    t = ferro.zeros(4)
    v = t.reshape(2, 2)
    v.add_(1)
    assert t._version == 1 and t.tolist() == [1.0, 1.0, 1.0, 1.0]


# Bad input: typed errors naming the op and the shapes/dtypes.


@pytest.mark.parametrize(
    "call, err, match",
    [
        (lambda: ferro.ones(2, 3) + ferro.ones(4), ShapeError, r"add.*\(2, 3\).*\(4,\)"),
        (lambda: ferro.ones(2, 3) @ ferro.ones(2, 3), ShapeError, r"matmul.*\(2, 3\)"),
        (lambda: ferro.sum(ferro.ones(2, 3), axis=2), IndexOutOfRangeError, "sum: axis 2"),
        (lambda: ferro.softmax(ferro.ones(2), axis=3), IndexOutOfRangeError, "softmax"),
        (lambda: ferro.ones(3)[ferro.tensor([5])], IndexOutOfRangeError, "getitem"),
        (
            lambda: ferro.index_select(ferro.ones(3), 0, ferro.tensor([3])),
            IndexOutOfRangeError,
            "index_select: index 3 is out of range",
        ),
        (
            lambda: ferro.gather(ferro.ones(2, 2), 1, ferro.tensor([[0, 2]])),
            IndexOutOfRangeError,
            "gather",
        ),
        (
            lambda: ferro.cross_entropy(ferro.ones(2, 3), ferro.tensor([0, 3])),
            IndexOutOfRangeError,
            r"cross_entropy: target classes must lie in \[0, 3\)",
        ),
        (
            lambda: ferro.cross_entropy(ferro.ones(2, 3), ferro.tensor([0])),
            ShapeError,
            r"cross_entropy.*\(2,\)",
        ),
        (lambda: ferro.tensor([1, 2], requires_grad=True), DtypeError, "floating"),
        (lambda: ferro.cat([ferro.ones(2, 3), ferro.ones(2, 2)], 0), ShapeError, "cat"),
        (lambda: ferro.reshape(ferro.ones(6), 4, 2), ShapeError, r"reshape.*\(6,\).*\(4, 2\)"),
        (lambda: ferro.pad(ferro.ones(2), (3, 0), mode="reflect"), ShapeError, "reflect"),
        (lambda: ferro.where(ferro.ones(2), ferro.ones(2), ferro.ones(2)), DtypeError, "bool"),
        (lambda: ferro.linear(ferro.ones(2, 3), ferro.ones(4, 2)), ShapeError, "linear"),
        (lambda: ferro.einsum("ii->i", ferro.ones(2, 2)), ValueError, "diagonal"),
    ],
)
def test_bad_input_raises_typed_error(call, err, match):
    with pytest.raises(err, match=match):
        call()


def test_bad_input_leaves_grads_untouched():
    w = ferro.ones(3, requires_grad=True)
    (w * 2).sum().backward()
    before = w.grad.tolist()
    with pytest.raises(ShapeError):
        (w * ferro.ones(4)).sum().backward()
    assert w.grad.tolist() == before and w._version == 0


def test_stack_backward_hands_out_views_of_the_gradient():
    """A copy per input (np.take) costs O(len(gy)) each, which made stack's backward quadratic
    in the number of inputs; a view costs O(1), and the engine copies it only where it must."""
    ctx = types.SimpleNamespace(xp=np, axis=1)
    gy = np.arange(12.0).reshape(3, 4)
    grads = REGISTRY["stack"].backward(ctx, gy)
    assert len(grads) == 4 and all(np.shares_memory(g, gy) for g in grads)
    np.testing.assert_array_equal(grads[2], gy[:, 2])
    x = [ferro.tensor(float(i), requires_grad=True) for i in range(3)]
    (ferro.stack(x) * ferro.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert [t.grad.item() for t in x] == [1.0, 2.0, 3.0]
