"""Higher-order gradients (issue 20): create_graph, grad mode during backward, .grad history,
Function under create_graph, and the uses: Hessians, third derivatives, gradient penalties,
MAML-style inner steps."""

from __future__ import annotations

import gc
import warnings

import numpy as np
import pytest

import ferro
from ferro.autograd import Function
from ferro.autograd.function import once_differentiable
from ferro.errors import GraphError, NotSupportedError
from ferro.testing import gradgradcheck


def _t(a, requires_grad=True):
    return ferro.from_numpy(np.asarray(a, dtype=np.float64).copy()).requires_grad_(requires_grad)


# ---------------------------------------------------------------------------------------------
# create_graph itself
# ---------------------------------------------------------------------------------------------


def test_create_graph_grads_have_history_and_differentiate_again_to_third_order():
    x = _t([0.3, -1.2, 2.0])
    (g1,) = ferro.autograd.grad(x.tanh().sum(), x, create_graph=True)
    (g2,) = ferro.autograd.grad(g1.sum(), x, create_graph=True)
    (g3,) = ferro.autograd.grad(g2.sum(), x)
    assert g1.requires_grad and g1.grad_fn is not None
    t = np.tanh(x._data)
    np.testing.assert_allclose(g1._data, 1 - t * t, rtol=1e-12)
    np.testing.assert_allclose(g2._data, -2 * t * (1 - t * t), rtol=1e-12)
    np.testing.assert_allclose(g3._data, (1 - t * t) * (6 * t * t - 2), rtol=1e-12)


def test_plain_grad_has_no_history_and_frees_the_graph():
    x = _t([1.0, 2.0])
    y = (x * x).sum()
    (g,) = ferro.autograd.grad(y, x)
    assert not g.requires_grad
    with pytest.raises(GraphError, match="second time"):
        ferro.autograd.grad(y, x)


def test_retain_graph_defaults_to_create_graph():
    x = _t([1.0, 2.0])
    y = (x * x * x).sum()
    ferro.autograd.grad(y, x, create_graph=True)
    (g,) = ferro.autograd.grad(y, x)  # the graph was retained
    np.testing.assert_allclose(g._data, 3 * x._data**2)


def test_grad_mode_during_backward_equals_create_graph():
    seen = []
    x = _t([1.0])
    y = x * 2
    y.register_hook(lambda g: seen.append(ferro.is_grad_enabled()))
    y.grad_fn.register_prehook(lambda gs: seen.append(ferro.is_grad_enabled()))
    y.sum().backward(retain_graph=True)
    ferro.autograd.grad(y.sum(), x, create_graph=True)
    assert seen == [False, False, True, True]
    assert ferro.is_grad_enabled()


def test_grad_outputs_that_require_grad_join_the_graph():
    x = _t([1.0, 2.0])
    v = _t([3.0, 5.0])
    (g,) = ferro.autograd.grad(x * x, x, v, create_graph=True)  # 2 x v
    (gv,) = ferro.autograd.grad(g.sum(), v)
    np.testing.assert_allclose(gv._data, 2 * x._data)


def test_backward_create_graph_accumulates_grad_with_history_and_warns():
    x = _t([1.0, 2.0])
    with pytest.warns(UserWarning, match="reference cycle"):
        (x * x * x).sum().backward(create_graph=True)
    assert x.grad.requires_grad
    np.testing.assert_allclose(x.grad._data, 3 * x._data**2)
    # A second create_graph backward adds out of place: .grad keeps both terms' history.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (x * x).sum().backward(create_graph=True)
    np.testing.assert_allclose(x.grad._data, 3 * x._data**2 + 2 * x._data)
    (h,) = ferro.autograd.grad(x.grad.sum(), x)
    np.testing.assert_allclose(h._data, 6 * x._data + 2)
    x.grad = None


def test_not_twice_differentiable_error_names_the_op():
    from ferro.autograd._xp import DArray, namespace

    xp = namespace(np)
    a = DArray(_t([1.0, 2.0]))
    with pytest.raises(NotSupportedError, match="xp.cbrt"):
        xp.cbrt(a)


def test_double_backward_through_broadcasting_and_promotion():
    x = _t(np.arange(6.0).reshape(2, 3) / 7)
    b = ferro.from_numpy(np.array([0.5, 1.5, 2.5], dtype=np.float32)).requires_grad_(True)
    assert gradgradcheck(lambda x: (x * x * 2.0).sum(axis=0), (x,))
    y = (x * b).sum()  # float32 b promoted to float64
    gx, gb = ferro.autograd.grad(y, (x, b), create_graph=True)
    assert gb.dtype == np.float32
    (h,) = ferro.autograd.grad((gx * gx).sum(), b)
    np.testing.assert_allclose(h._data, 2 * 2 * b._data, rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# Function under create_graph
# ---------------------------------------------------------------------------------------------


class Cube(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)
        return x * x * x

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved_tensors
        return gy * 3.0 * x * x

    @staticmethod
    def jvp(ctx, tx):
        (x,) = ctx.saved_for_forward
        return 3.0 * x * x * tx


def test_function_backward_written_with_ferro_ops_is_differentiable():
    x = _t([1.0, -2.0, 0.5])
    assert gradgradcheck(Cube.apply, (x,))
    (g,) = ferro.autograd.grad(Cube.apply(x).sum(), x, create_graph=True)
    (h,) = ferro.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(h._data, 6 * x._data)


def test_function_jvp_with_save_for_forward():
    x = _t([1.0, 2.0])
    out, tangent = Cube.apply_jvp((x,), (_t([1.0, 0.5], False),))
    np.testing.assert_allclose(out._data, x._data**3)
    np.testing.assert_allclose(tangent._data, 3 * x._data**2 * [1.0, 0.5])


def test_once_differentiable_raises_when_differentiated_twice():
    class Square(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        @once_differentiable
        def backward(ctx, gy):
            assert not ferro.is_grad_enabled()
            (x,) = ctx.saved_tensors
            return gy * 2 * x

    x = _t([1.0, 2.0])
    v = _t([1.0, 1.0])
    (g,) = ferro.autograd.grad(Square.apply(x), x, v, create_graph=True)
    np.testing.assert_allclose(g._data, 2 * x._data)
    with pytest.raises(GraphError, match="once_differentiable"):
        ferro.autograd.grad(g.sum(), v)


def test_mark_dirty_gives_the_input_the_output_history():
    class DoubleInPlace(Function):
        @staticmethod
        def forward(ctx, x):
            x._data[...] *= 2
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, gy):
            return gy * 2

    a = _t([1.0, 2.0])
    b = a * 1
    version = b._version
    c = DoubleInPlace.apply(b)
    assert c is b and b.grad_fn.name() == "DoubleInPlaceBackward"
    assert b._version == version + 1
    c.sum().backward()
    np.testing.assert_allclose(a.grad._data, [2.0, 2.0])
    with pytest.raises(GraphError, match="leaf"):
        DoubleInPlace.apply(_t([1.0]))


# ---------------------------------------------------------------------------------------------
# Uses: Hessians, gradient penalty, MAML
# ---------------------------------------------------------------------------------------------


def _mlp(params, x):
    w1, b1, w2, b2 = params
    return (ferro.tanh(x @ w1 + b1) @ w2 + b2).sum()


def _numeric_hessian(f, theta, eps=1e-5):
    n = theta.size
    h = np.zeros((n, n))
    for i in range(n):
        e = np.zeros(n)
        e[i] = eps
        h[:, i] = (f(theta + e) - f(theta - e)) / (2 * eps)
    return (h + h.T) / 2


def test_hessian_of_small_network_matches_finite_differences():
    rng = np.random.default_rng(0)
    x = _t(rng.standard_normal((4, 3)), False)
    shapes = [(3, 4), (4,), (4, 2), (2,)]
    sizes = [int(np.prod(s)) for s in shapes]
    theta0 = rng.standard_normal(sum(sizes)) * 0.5

    def unflatten(flat):
        out, k = [], 0
        for s, n in zip(shapes, sizes, strict=True):
            out.append(flat[k : k + n].reshape(s))
            k += n
        return out

    def loss(flat_t):
        return _mlp(unflatten(flat_t), x)

    def grad_np(theta):
        t = _t(theta)
        (g,) = ferro.autograd.grad(loss(t), t)
        return g._data

    h = ferro.autograd.functional.hessian(loss, _t(theta0))
    np.testing.assert_allclose(h._data, _numeric_hessian(grad_np, theta0), rtol=1e-6, atol=1e-8)


def test_wgan_gp_gradient_penalty_step():
    rng = np.random.default_rng(1)
    critic = ferro.nn.Sequential(ferro.nn.Linear(3, 8), ferro.nn.Tanh(), ferro.nn.Linear(8, 1))
    critic = critic.double()
    real = _t(rng.standard_normal((5, 3)), False)
    fake = _t(rng.standard_normal((5, 3)), False)
    eps = _t(rng.uniform(size=(5, 1)), False)

    def penalty(params_data=None):
        xh = (eps * real + (1 - eps) * fake).detach().requires_grad_(True)
        (g,) = ferro.autograd.grad(critic(xh).sum(), xh, create_graph=True)
        return ((g.pow(2).sum(dim=1).sqrt() - 1) ** 2).mean()

    gp = penalty()
    gp.backward()
    w = critic[0].weight
    analytic = w.grad._data.copy()
    # Finite differences of the penalty in one weight.
    num = np.zeros(3)
    for j in range(3):
        old = w._data[0, j]
        w._data[0, j] = old + 1e-6
        plus = float(penalty()._data)
        w._data[0, j] = old - 1e-6
        minus = float(penalty()._data)
        w._data[0, j] = old
        num[j] = (plus - minus) / 2e-6
    np.testing.assert_allclose(analytic[0], num, rtol=1e-5, atol=1e-8)


def test_maml_inner_step_differentiates_through_the_update():
    rng = np.random.default_rng(2)
    w = _t(rng.standard_normal((3, 1)))
    xs, ys = _t(rng.standard_normal((4, 3)), False), _t(rng.standard_normal((4, 1)), False)
    xq, yq = _t(rng.standard_normal((4, 3)), False), _t(rng.standard_normal((4, 1)), False)
    lr = 0.1

    def outer(w):
        inner = ((xs @ w - ys) ** 2).mean()
        (g,) = ferro.autograd.grad(inner, w, create_graph=True)
        w2 = w - lr * g
        return ((xq @ w2 - yq) ** 2).mean()

    (meta,) = ferro.autograd.grad(outer(w), w)
    # Closed form: inner grad = 2/n xs^T (xs w - ys); w2 = (I - 2 lr/n xs^T xs) w + ...
    n = 4
    a = np.eye(3) - 2 * lr / n * xs._data.T @ xs._data
    w2 = a @ w._data + 2 * lr / n * xs._data.T @ ys._data
    want = a.T @ (2 / n * xq._data.T @ (xq._data @ w2 - yq._data))
    np.testing.assert_allclose(meta._data, want, rtol=1e-10)


# ---------------------------------------------------------------------------------------------
# No leaks
# ---------------------------------------------------------------------------------------------


def test_create_graph_cycles_through_grad_are_collected():
    import weakref

    x = _t(np.ones(3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = (x * x * x).sum()
        y.backward(create_graph=True)
    ref = weakref.ref(x.grad.grad_fn)
    del y
    x.grad = None
    gc.collect()
    assert ref() is None


def test_gradient_penalty_loop_does_not_grow_memory():
    # Live objects (tensors, nodes, arrays, dicts...) after a full collection, before and after
    # 2,000 steps: each step leaves a .grad -> graph -> parameter cycle behind until .grad is
    # reset, which the collector must free.
    rng = np.random.default_rng(3)
    w = _t(rng.standard_normal((4, 4)) * 0.3)
    data = _t(rng.standard_normal((2, 4)), False)

    def step():
        x = data.detach().requires_grad_(True)
        (g,) = ferro.autograd.grad(ferro.tanh(x @ w).sum(), x, create_graph=True)
        loss = ((g * g).sum() - 1) ** 2
        loss.backward(create_graph=True)
        w.grad = None

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(50):
            step()
        gc.collect()
        before = len(gc.get_objects())
        for _ in range(2000):
            step()
        gc.collect()
        grown = len(gc.get_objects()) - before
    assert grown < 50, f"{grown} more live objects after 2,000 steps"


# ---------------------------------------------------------------------------------------------
# Hooks, checkpoint, anomaly, saved-tensor hooks, profiler under create_graph
# ---------------------------------------------------------------------------------------------


def test_tensor_hook_under_create_graph_sees_a_tensor_with_history_and_may_replace_it():
    x = _t([1.0, 2.0])
    y = x * x
    got = []

    def hook(g):
        got.append(g.requires_grad)
        return g * 3

    y.register_hook(hook)
    (g,) = ferro.autograd.grad(y.sum(), x, create_graph=True)
    assert got == [False]  # the seed of ones has no history; the replacement records
    np.testing.assert_allclose(g._data, 6 * x._data)
    (h,) = ferro.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(h._data, [6.0, 6.0])


def test_checkpointed_segment_can_be_double_differentiated():
    from ferro.utils.checkpoint import checkpoint

    x = _t([0.2, -0.7, 1.1])

    def seg(t):
        return ferro.tanh(t) * t

    (g,) = ferro.autograd.grad(checkpoint(seg, x).sum(), x, create_graph=True)
    (h,) = ferro.autograd.grad(g.sum(), x)
    (g0,) = ferro.autograd.grad(seg(x).sum(), x, create_graph=True)
    (h0,) = ferro.autograd.grad(g0.sum(), x)
    np.testing.assert_allclose(g._data, g0._data, rtol=1e-12)
    np.testing.assert_allclose(h._data, h0._data, rtol=1e-12)


def test_saved_tensor_hooks_wrap_saves_under_create_graph():
    packed = []
    x = _t([1.0, 2.0])
    with ferro.autograd.graph.saved_tensors_hooks(lambda t: packed.append(1) or t, lambda t: t):
        y = (x * x * x).sum()
        (g,) = ferro.autograd.grad(y, x, create_graph=True)
    assert packed
    (h,) = ferro.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(h._data, 6 * x._data)


def test_anomaly_mode_checks_create_graph_backward():
    x = _t([0.0, 1.0])
    with ferro.autograd.detect_anomaly():
        with pytest.raises(ferro.errors.AnomalyError, match="SqrtBackward returned Inf"):
            ferro.autograd.grad(x.sqrt().sum(), x, create_graph=True)
        y = _t([1.0, 4.0])
        (g,) = ferro.autograd.grad(y.sqrt().sum(), y, create_graph=True)
        (h,) = ferro.autograd.grad(g.sum(), y)
    np.testing.assert_allclose(h._data, -0.25 * y._data**-1.5)


def test_profiler_records_create_graph_backward():
    from ferro.profiler import profile

    x = _t([1.0, 2.0])
    with profile() as prof:
        (g,) = ferro.autograd.grad(x.tanh().sum(), x, create_graph=True)
    names = [e.name for e in prof.events()]
    assert "TanhBackward" in names


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_float32_hvp_through_the_fused_cross_entropy_stays_float32(reduction):
    # The fused forward (class indices, no weight or smoothing) keeps a bool validity mask;
    # its differentiable backward once multiplied by it as a weight and gave float64 gradients
    # (GradientError in bench_higher's Hessian-vector product).
    from ferro.autograd import functional as F

    rng = np.random.default_rng(0)
    x32 = rng.normal(size=(6, 5)).astype(np.float32)
    w32, v32 = (rng.normal(size=(5, 4)).astype(np.float32) for _ in range(2))
    y = ferro.tensor(np.array([0, 3, 1, -100, 2, 3]))

    def hvp(dtype):
        x = ferro.tensor(x32.astype(dtype))

        def loss(w):
            out = ferro.nn.functional.cross_entropy(x @ w, y, reduction=reduction)
            return out.sum() if reduction == "none" else out

        return F.hvp(loss, ferro.tensor(w32.astype(dtype)), ferro.tensor(v32.astype(dtype)))[1]

    got, want = hvp(np.float32), hvp(np.float64)
    assert got.dtype == ferro.float32
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-5)
