"""ferro.autograd.Function: user-defined ops."""

import numpy as np
import pytest

import ferro
from ferro.autograd import Function
from ferro.errors import GradientError, GraphError
from ferro.testing import gradcheck


class Cube(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x * x

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved_tensors
        return gy * 3.0 * x * x


class ScaleShift(Function):
    """Non-tensor arguments, two outputs, needs_input_grad."""

    @staticmethod
    def forward(ctx, x, scale, shift):
        ctx.scale = scale
        ctx.seen_needs = ctx.needs_input_grad
        return x * scale, x + shift

    @staticmethod
    def backward(ctx, g1, g2):
        return g1 * ctx.scale + g2, None, None


def test_custom_function_gradient_matches_numeric():
    x = ferro.randn(4, dtype=ferro.float64, requires_grad=True)
    assert gradcheck(Cube.apply, (x,))
    y = Cube.apply(x)
    assert y.grad_fn.name() == "CubeBackward"


def test_non_tensor_args_multiple_outputs_and_needs_input_grad():
    x = ferro.tensor([1.0, 2.0], requires_grad=True)
    a, b = ScaleShift.apply(x, 3.0, 1.0)
    assert a.grad_fn.seen_needs == (True, False, False)
    (a.sum() + b.sum()).backward()
    assert x.grad.tolist() == [4.0, 4.0]


def test_one_output_used_gets_materialized_zeros_or_none():
    seen = []

    class Two(Function):
        @staticmethod
        def forward(ctx, x, materialize):
            ctx.set_materialize_grads(materialize)
            return x * 2.0, x * 3.0

        @staticmethod
        def backward(ctx, g1, g2):
            seen.append(g2 if g2 is None else g2.tolist())
            return g1 * 2.0, None

    for materialize in (True, False):
        x = ferro.ones(2, requires_grad=True)
        a, _ = Two.apply(x, materialize)
        a.sum().backward()
        assert x.grad.tolist() == [2.0, 2.0]
    assert seen == [[0.0, 0.0], None]


def test_mark_non_differentiable():
    class ArgmaxAndValue(Function):
        @staticmethod
        def forward(ctx, x):
            mask = (x == x.max()).to(ferro.float32)
            ctx.mark_non_differentiable(mask)
            ctx.save_for_backward(mask)
            return x.max(), mask

        @staticmethod
        def backward(ctx, gv, gm):
            (mask,) = ctx.saved_tensors
            return gv * mask

    x = ferro.tensor([1.0, 3.0, 2.0], requires_grad=True)
    v, mask = ArgmaxAndValue.apply(x)
    assert not mask.requires_grad and v.requires_grad
    v.backward()
    assert x.grad.tolist() == [0.0, 1.0, 0.0]


def test_wrong_gradient_count_shape_dtype_name_the_function():
    class BadCount(Function):
        @staticmethod
        def forward(ctx, x, y):
            return x + y

        @staticmethod
        def backward(ctx, g):
            return g

    class BadShape(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2.0

        @staticmethod
        def backward(ctx, g):
            return g[:1]

    class BadDtype(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2.0

        @staticmethod
        def backward(ctx, g):
            return g.double()

    x = ferro.ones(3, requires_grad=True)
    with pytest.raises(GradientError, match="BadCountBackward returned 1 gradients; expected 2"):
        BadCount.apply(x, x).sum().backward()
    with pytest.raises(GradientError, match=r"BadShapeBackward.*\(1,\).*\(3,\)"):
        BadShape.apply(x).sum().backward()
    with pytest.raises(GradientError, match="BadDtypeBackward.*float64"):
        BadDtype.apply(x).sum().backward()
    assert x.grad is None


def test_function_backward_may_return_extra_none_gradients():
    # PyTorch accepts gradients past the inputs when they are None (the conv/batch-norm fusion
    # tutorial's backward returns seven for two inputs); an extra one that is not None is an
    # error, once and twice differentiable.
    class Extra(Function):
        @staticmethod
        def forward(ctx, x, scale=2.0):
            ctx.scale = scale
            return x * scale

        @staticmethod
        def backward(ctx, g):
            return g * ctx.scale, None, None

    class ExtraNotNone(Extra):
        @staticmethod
        def backward(ctx, g):
            return g * ctx.scale, g

    x = ferro.ones(3, requires_grad=True)
    Extra.apply(x).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]
    (g,) = ferro.autograd.grad(Extra.apply(x, 3.0).sum(), x, create_graph=True)
    assert g.tolist() == [3.0, 3.0, 3.0]
    with pytest.raises(GradientError, match="NoneBackward returned 2 gradients; expected 1"):
        ExtraNotNone.apply(x).sum().backward()
    with pytest.raises(GradientError, match="returned 2 gradients; expected 1"):
        ferro.autograd.grad(ExtraNotNone.apply(x).sum(), x, create_graph=True)


def test_saved_tensor_modified_in_place_is_detected():
    x = ferro.tensor([1.0, 2.0], requires_grad=True)
    h = x * 1.0
    y = Cube.apply(h)
    h.add_(1.0)
    with pytest.raises(GraphError, match="CubeBackward.*version"):
        y.sum().backward()


def test_forward_returning_non_tensor_raises():
    class Bad(Function):
        @staticmethod
        def forward(ctx, x):
            return 3

    with pytest.raises(TypeError, match="Bad.forward must return Tensors"):
        Bad.apply(ferro.ones(1, requires_grad=True))
    assert np.isfinite(0.0)
