"""Indices, targets and masks: an index changed in place between forward and backward gives a
GraphError or the right gradient, never a silently wrong one (Note [Index operands] in
ferro/ops/shape.py); an index out of range is an IndexOutOfRangeError (an IndexError), for
tensors, ops and the iteration protocol."""

import numpy as np
import pytest

import ferro
from ferro.errors import ArgumentTypeError, GraphError, IndexOutOfRangeError


def _x():
    return ferro.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)


# Each case: (forward(x, index) -> loss, a fresh index, the gradient of x for that index).
# The tests run forward, shift the index in place (so it selects other elements), then run
# backward: it must raise GraphError (the index is a saved operand) since the saved index no
# longer matches the one the forward used.
TENSOR_INDEX_CASES = {
    "getitem int": (
        lambda x, i: (x[i] * ferro.tensor([[1.0], [2.0]])).sum(),
        lambda: ferro.tensor([0, 0]),
        [[3.0, 3.0, 3.0], [0.0, 0.0, 0.0]],
    ),
    "getitem mixed": (
        lambda x, i: x[:, i].sum(),
        lambda: ferro.tensor([0, 0]),
        [[2.0, 0.0, 0.0], [2.0, 0.0, 0.0]],
    ),
    "index_select": (
        lambda x, i: ferro.index_select(x, 1, i).sum(),
        lambda: ferro.tensor([0, 0]),
        [[2.0, 0.0, 0.0], [2.0, 0.0, 0.0]],
    ),
    "gather": (
        lambda x, i: ferro.gather(x, 1, i).sum(),
        lambda: ferro.tensor([[0], [0]]),
        [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]],
    ),
    "scatter": (
        lambda x, i: ferro.scatter(x, 1, i, 0.0).sum(),
        lambda: ferro.tensor([[0], [0]]),
        [[0.0, 1.0, 1.0], [0.0, 1.0, 1.0]],
    ),
    "scatter src": (
        lambda x, i: (ferro.scatter(ferro.zeros(2, 3), 1, i, x) * ferro.arange(3.0)).sum(),
        lambda: ferro.tensor([[1], [1]]),
        [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]],
    ),
    "scatter_add": (
        lambda x, i: (ferro.scatter_add(ferro.zeros(2, 3), 1, i, x) * ferro.arange(3.0)).sum(),
        lambda: ferro.tensor([[1, 1, 1], [1, 1, 1]]),
        [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]],
    ),
    "embedding": (
        lambda x, i: ferro.embedding(i, x).sum(),
        lambda: ferro.tensor([0, 0, 0]),
        [[3.0, 3.0, 3.0], [0.0, 0.0, 0.0]],
    ),
}


@pytest.mark.parametrize("case", sorted(TENSOR_INDEX_CASES))
def test_tensor_index_changed_in_place_after_forward_raises(case):
    forward, make_index, want = TENSOR_INDEX_CASES[case]
    x = _x()
    forward(x, make_index()).backward()
    np.testing.assert_array_equal(x.grad.numpy(), want)

    x = _x()
    index = make_index()
    loss = forward(x, index)
    index.add_(1)
    with pytest.raises(GraphError, match="modified in place"):
        loss.backward()
    assert x.grad is None


def test_embedding_module_index_changed_in_place_raises():
    emb = ferro.nn.Embedding(3, 2)
    i = ferro.tensor([0, 1])
    loss = emb(i).sum()
    i.add_(1)
    with pytest.raises(GraphError, match="modified in place"):
        loss.backward()
    assert emb.weight.grad is None


def test_bool_mask_changed_in_place_after_forward_raises():
    x = _x()
    mask = ferro.tensor([[True, False, True], [False, False, True]])
    loss = x[mask].sum()
    mask.mul_(ferro.tensor([False, True, True]))
    with pytest.raises(GraphError, match="modified in place"):
        loss.backward()


@pytest.mark.parametrize("op", ["masked_fill", "where"])
def test_mask_tensor_changed_in_place_after_forward_raises(op):
    x = _x()
    mask = ferro.tensor([[True, False, True], [False, False, True]])
    if op == "masked_fill":
        loss = ferro.masked_fill(x, mask, 0.0).sum()
    else:
        loss = ferro.where(mask, ferro.zeros(2, 3), x).sum()
    mask.mul_(ferro.tensor([False, True, True]))
    with pytest.raises(GraphError, match="modified in place"):
        loss.backward()


# A NumPy array (or a list) given as an index is the user's: ferro cannot see it change, so the
# op copies it at forward and backward uses the index the forward used.
ARRAY_INDEX_CASES = {
    "getitem": (lambda x, i: x[i].sum(), np.array([0, 0]), [[2.0] * 3, [0.0] * 3]),
    "getitem mixed": (lambda x, i: x[:, i].sum(), np.array([0]), [[1, 0, 0], [1, 0, 0]]),
    "getitem mask": (
        lambda x, m: x[m].sum(),
        np.array([[True, False, False], [False, False, False]]),
        [[1, 0, 0], [0, 0, 0]],
    ),
    "index_select": (
        lambda x, i: ferro.index_select(x, 0, i).sum(),
        np.array([0]),
        [[1.0] * 3, [0.0] * 3],
    ),
    "gather": (lambda x, i: ferro.gather(x, 1, i).sum(), np.array([[0], [0]]), [[1, 0, 0]] * 2),
    "scatter": (
        lambda x, i: ferro.scatter(x, 1, i, 0.0).sum(),
        np.array([[0], [0]]),
        [[0, 1, 1]] * 2,
    ),
    "embedding": (lambda x, i: ferro.embedding(i, x).sum(), np.array([0, 0]), [[2] * 3, [0] * 3]),
    "masked_fill": (
        lambda x, m: ferro.masked_fill(x, m, 0.0).sum(),
        np.array([[True, False, False], [False, False, False]]),
        [[0, 1, 1], [1, 1, 1]],
    ),
}


@pytest.mark.parametrize("case", sorted(ARRAY_INDEX_CASES))
def test_array_index_changed_after_forward_keeps_the_forward_index(case):
    forward, index, want = ARRAY_INDEX_CASES[case]
    x = _x()
    loss = forward(x, index)
    index[...] = np.logical_not(index) if index.dtype == bool else index + 1
    loss.backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.asarray(want, dtype=np.float32))


def test_slice_bounds_given_as_tensors_are_read_at_forward():
    x = _x()
    stop = ferro.tensor(1)
    loss = x[0, :stop].sum()
    stop.add_(1)
    loss.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[1, 0, 0], [0, 0, 0]])


@pytest.mark.parametrize("overrides_on", [True, False], ids=["fused", "generic"])
@pytest.mark.parametrize("loss_fn", ["cross_entropy", "nll_loss"])
def test_class_targets_and_weights_changed_after_forward_keep_the_forward_values(
    loss_fn, overrides_on
):
    """The loss ops keep the target (and class weights) for backward, so they copy them."""
    from ferro._C import engine

    fn = getattr(ferro, loss_fn)
    logits = np.array([[0.5, -1.0, 2.0], [1.0, 0.0, -0.5]], np.float32)

    def grad(target, weight, change):
        x = ferro.tensor(logits, requires_grad=True)
        loss = fn(x, target, weight=weight)
        change()
        loss.backward()
        return x.grad.numpy()

    prev = engine.set_overrides_enabled(overrides_on)
    try:
        want = grad(ferro.tensor([2, 0]), ferro.tensor([1.0, 2.0, 3.0]), lambda: None)
        target, weight = ferro.tensor([2, 0]), ferro.tensor([1.0, 2.0, 3.0])
        got = grad(target, weight, lambda: (target.sub_(1), weight.mul_(0.0)))
        np.testing.assert_allclose(got, want, rtol=1e-6)
        target, weight = np.array([2, 0]), np.array([1.0, 2.0, 3.0], np.float32)
        got = grad(target, weight, lambda: (target.fill(1), weight.fill(0.0)))
        np.testing.assert_allclose(got, want, rtol=1e-6)
    finally:
        engine.set_overrides_enabled(prev)


# Item 6: embeddings take indices in [0, num_embeddings), as PyTorch.


@pytest.mark.parametrize("bad", [[-1], [3], [0, 5]])
def test_embedding_index_out_of_range_raises_index_error(bad):
    emb = ferro.nn.Embedding(3, 2)
    with pytest.raises(IndexOutOfRangeError, match="embedding: index"):
        emb(ferro.tensor(bad))
    with pytest.raises(IndexError):
        ferro.embedding(ferro.tensor(bad), ferro.ones(3, 2, requires_grad=True))


def test_embedding_padding_idx_out_of_range_raises():
    with pytest.raises(IndexOutOfRangeError, match="padding_idx 3"):
        ferro.nn.Embedding(3, 2, padding_idx=3)
    with pytest.raises(IndexOutOfRangeError, match="padding_idx -4"):
        ferro.embedding(ferro.tensor([0]), ferro.ones(3, 2), padding_idx=-4)


# Item 7: out of range is an IndexError.

OUT_OF_RANGE = {
    "x[5]": lambda x: x[5],
    "x[:, 9]": lambda x: x[:, 9],
    "x[tensor]": lambda x: x[ferro.tensor([0, 7])],
    "x[-8]": lambda x: x[-8],
    "too many indices": lambda x: x[0, 0, 0],
    "select": lambda x: ferro.select(x, 1, 3),
    "select dim": lambda x: ferro.select(x, 2, 0),
    "narrow start": lambda x: ferro.narrow(x, 1, 4, 0),
    "narrow length": lambda x: ferro.narrow(x, 1, 2, 2),
    "split dim": lambda x: ferro.split(x, 1, dim=2),
    "chunk dim": lambda x: ferro.chunk(x, 2, dim=-3),
    "transpose dim": lambda x: ferro.transpose(x, 0, 2),
    "unsqueeze dim": lambda x: ferro.unsqueeze(x, 4),
    "index_select": lambda x: ferro.index_select(x, 1, ferro.tensor([3])),
    "index_select negative": lambda x: ferro.index_select(x, 1, ferro.tensor([-4])),
    "gather": lambda x: ferro.gather(x, 1, ferro.tensor([[3], [0]])),
    "scatter": lambda x: ferro.scatter(x, 1, ferro.tensor([[3], [0]]), 1.0),
    "scatter_add": lambda x: ferro.scatter_add(x, 0, ferro.tensor([[2, 0, 0]]), x[:1]),
    "one_hot": lambda x: ferro.one_hot(ferro.tensor([0, 3]), 3),
    "cross_entropy target": lambda x: ferro.cross_entropy(x, ferro.tensor([0, 3])),
    "nll_loss target": lambda x: ferro.nll_loss(x, ferro.tensor([-1, 0])),
}


@pytest.mark.parametrize("case", sorted(OUT_OF_RANGE))
def test_index_out_of_range_raises_index_error(case):
    x = _x()
    with pytest.raises(IndexOutOfRangeError) as info:
        OUT_OF_RANGE[case](x)
    assert isinstance(info.value, IndexError)
    assert x.grad is None and x._version == 0


def test_iteration_yields_rows_and_stops():
    x = _x()
    rows = list(x)
    assert [r.tolist() for r in rows] == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    assert [v.item() for v in ferro.tensor([7, 8, 9])] == [7, 8, 9]
    assert list(ferro.zeros(0, 2)) == []
    (rows[0] * 2 + rows[1]).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[2.0] * 3, [1.0] * 3])


def test_zip_and_unpacking_stop_at_the_length():
    a, b = ferro.tensor([1.0, 2.0])
    assert (a.item(), b.item()) == (1.0, 2.0)
    assert [(p.item(), q) for p, q in zip(ferro.tensor([3.0, 4.0]), "xyz", strict=False)] == [
        (3.0, "x"),
        (4.0, "y"),
    ]


def test_iterating_a_0d_tensor_is_a_type_error():
    with pytest.raises(ArgumentTypeError, match="iteration over a 0-d tensor"):
        iter(ferro.tensor(1.0))
    with pytest.raises(TypeError):
        list(ferro.tensor(1.0))
