"""The backward walk: ordering, pruning, retain_graph, roots, grad(), and its errors."""

import sys

import numpy as np
import pytest

import ferro
from ferro._C.engine import apply
from ferro._C.graph import OpDef
from ferro.errors import DtypeError, GradientError, GraphError, ShapeError


def test_chain_of_100k_ops_backpropagates_without_recursion():
    x = ferro.tensor([1.0], requires_grad=True)
    h = x
    for _ in range(100_000):
        h = h + 1.0
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)  # a recursive walk would fail immediately
    try:
        h.sum().backward()
    finally:
        sys.setrecursionlimit(limit)
    assert x.grad.item() == 1.0


def test_diamond_gives_4():
    a = ferro.tensor(1.5, requires_grad=True)
    b = a + a
    c = b + b
    c.backward()
    assert a.grad.item() == 4.0


def test_grad_accumulates_across_backward_calls():
    x = ferro.tensor([1.0, 2.0], requires_grad=True)
    (x * 3.0).sum().backward()
    (x * 3.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [6.0, 6.0])


def test_non_scalar_backward_without_gradient_raises():
    x = ferro.ones(2, 3, requires_grad=True)
    with pytest.raises(GraphError, match=r"shape \(2, 3\)"):
        (x * 2).backward()
    assert x.grad is None


def test_backward_with_explicit_gradient():
    x = ferro.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * x
    y.backward(ferro.tensor([1.0, 0.0, 2.0]))
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 0.0, 12.0])


def test_gradient_of_wrong_shape_raises_and_names_shapes():
    x = ferro.ones(3, requires_grad=True)
    with pytest.raises(ShapeError, match=r"\(2,\).*\(3,\)"):
        (x * 2).backward(ferro.ones(2))


def test_gradient_of_wrong_dtype_raises():
    x = ferro.ones(3, requires_grad=True)
    with pytest.raises(DtypeError, match="float64"):
        (x * 2).backward(ferro.ones(3, dtype=ferro.float64))


def test_backward_on_tensor_not_requiring_grad_raises():
    x = ferro.ones(3)
    with pytest.raises(GraphError, match="does not require grad"):
        x.sum().backward()


def test_freed_graph_raises_and_names_retain_graph():
    x = ferro.tensor([1.0, 2.0], requires_grad=True)
    y = (x.tanh() * x).sum()
    y.backward()
    with pytest.raises(GraphError, match="retain_graph=True"):
        y.backward()


def test_retain_graph_allows_a_second_backward():
    x = ferro.tensor([1.0, 2.0], requires_grad=True)
    y = (x.tanh() * x).sum()
    y.backward(retain_graph=True)
    g1 = x.grad.numpy().copy()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * g1)


def test_saved_arrays_are_released_after_backward():
    x = ferro.tensor([1.0, 2.0], requires_grad=True)
    y = x.exp()
    node = y.grad_fn
    assert len(node.saved) == 1
    y.sum().backward()
    with pytest.raises(GraphError):
        _ = node.saved


def test_leaf_root_accumulates_its_own_grad():
    x = ferro.tensor(2.0, requires_grad=True)
    x.backward()
    assert x.grad.item() == 1.0


def test_multiple_roots():
    x = ferro.tensor([1.0, 2.0], requires_grad=True)
    ferro.autograd.backward([(x * 2).sum(), (x * x).sum()])
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 6.0])


def test_root_that_depends_on_another_root():
    x = ferro.tensor(3.0, requires_grad=True)
    y = x * x
    z = y * 2.0
    ferro.autograd.backward([y, z])
    assert x.grad.item() == pytest.approx(6.0 + 12.0)


def test_grad_returns_gradients_and_leaves_dot_grad_alone():
    x = ferro.tensor([1.0, 2.0], requires_grad=True)
    w = ferro.tensor([3.0, 4.0], requires_grad=True)
    (gx,) = ferro.autograd.grad((x * w).sum(), x)
    np.testing.assert_array_equal(gx.numpy(), [3.0, 4.0])
    assert x.grad is None and w.grad is None


def test_grad_with_respect_to_a_non_leaf():
    x = ferro.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3.0
    y = (h * h).sum()
    (gh,) = ferro.autograd.grad(y, h)
    np.testing.assert_array_equal(gh.numpy(), [6.0, 12.0])


def test_grad_unused_input_raises_unless_allowed():
    x = ferro.tensor([1.0], requires_grad=True)
    unused = ferro.tensor([1.0], requires_grad=True)
    y = (x * 2).sum()
    with pytest.raises(GraphError, match="allow_unused"):
        ferro.autograd.grad(y, [x, unused], retain_graph=True)
    gx, gu = ferro.autograd.grad(y, [x, unused], allow_unused=True)
    assert gu is None and gx.item() == 2.0


def _counting_op(name, calls):
    def forward(ctx, x):
        return x * 1.0

    def backward(ctx, gy):
        calls.append(name)
        return gy

    return OpDef(name, forward, backward)


def test_only_nodes_leading_to_requested_inputs_run():
    calls = []
    a = ferro.tensor([1.0], requires_grad=True)
    b = ferro.tensor([2.0], requires_grad=True)
    left = apply(_counting_op("left", calls), a)
    right = apply(_counting_op("right", calls), b)
    y = (left + right).sum()
    ferro.autograd.grad(y, [a])
    assert calls == ["left"]


def test_backward_inputs_accumulates_only_into_those():
    a = ferro.tensor([1.0], requires_grad=True)
    b = ferro.tensor([2.0], requires_grad=True)
    (a * b).sum().backward(inputs=[a])
    assert a.grad.item() == 2.0 and b.grad is None


def test_op_backward_returning_wrong_count_raises_named_error():
    bad = OpDef("bad_count", lambda ctx, x, y: x + y, lambda ctx, gy: (gy,))
    x = ferro.ones(2, requires_grad=True)
    with pytest.raises(GradientError, match=r"BadCountBackward returned 1 gradients; expected 2"):
        apply(bad, x, x).sum().backward()
    assert x.grad is None


def test_op_backward_returning_wrong_shape_raises_named_error():
    bad = OpDef("bad_shape", lambda ctx, x: x * 2, lambda ctx, gy: gy[:1])
    x = ferro.ones(3, requires_grad=True)
    with pytest.raises(GradientError, match=r"BadShapeBackward.*\(1,\).*expected shape \(3,\)"):
        apply(bad, x).sum().backward()


def test_op_backward_returning_wrong_dtype_raises_named_error():
    bad = OpDef("bad_dtype", lambda ctx, x: x * 2, lambda ctx, gy: gy.astype(np.float64))
    x = ferro.ones(3, requires_grad=True)
    with pytest.raises(GradientError, match=r"BadDtypeBackward.*float64.*expected float32"):
        apply(bad, x).sum().backward()


def test_error_inside_backward_leaves_grads_and_graph_untouched():
    state = {"fail": True}

    def backward(ctx, gy):
        if state["fail"]:
            raise ValueError("boom")
        return gy * 2

    flaky = OpDef("flaky", lambda ctx, x: x * 2, backward)
    x = ferro.tensor([1.0, 2.0], requires_grad=True)
    w = ferro.tensor([1.0, 1.0], requires_grad=True)
    x.grad = ferro.tensor([10.0, 10.0])
    # w's gradient is complete before the failing node runs; it must not be written either.
    y = (apply(flaky, x) + (w * 3.0).exp()).sum()
    with pytest.raises(ValueError, match="boom"):
        y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [10.0, 10.0])
    assert w.grad is None
    state["fail"] = False
    y.backward()  # the graph was not freed by the failed walk
    np.testing.assert_array_equal(x.grad.numpy(), [12.0, 12.0])


def test_multi_output_op_with_one_output_used():
    def forward(ctx, x):
        return x * 2, x * 3

    def backward(ctx, g0, g1):
        return g0 * 2 + g1 * 3

    two = OpDef("two", forward, backward)
    x = ferro.tensor([1.0], requires_grad=True)
    a, b = apply(two, x)
    b.sum().backward()
    assert x.grad.item() == 3.0


def test_integer_outputs_do_not_require_grad():
    argmax = OpDef("argmax_test", lambda ctx, x: x.argmax(), differentiable=False)
    x = ferro.tensor([1.0, 3.0], requires_grad=True)
    i = apply(argmax, x)
    assert not i.requires_grad and i.grad_fn is None


def test_broadcast_shape_mismatch_raises():
    with pytest.raises(ValueError):
        ferro.ones(2, 3) + ferro.ones(4)


def test_numpy_scalar_does_not_promote_float32():
    x = ferro.ones(2, requires_grad=True)
    y = x * np.float64(2.0)
    assert y.dtype == np.float32
    y.sum().backward()
    assert x.grad.dtype == np.float32


def test_next_functions_and_name():
    x = ferro.tensor([1.0], requires_grad=True)
    y = (x * 2.0).exp()
    assert y.grad_fn.name() == "ExpBackward"
    ((mul_node, nr),) = y.grad_fn.next_functions
    assert mul_node.name() == "MulBackward" and nr == 0
    assert mul_node.next_functions[0][0] is x
