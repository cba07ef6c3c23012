"""Note [Direct ops]: the engine's compiled forward and first-order backward of add, sub, mul,
tanh, relu, matmul and the whole-tensor sum and mean give the same bits as the op classes' own
``forward``/``backward`` (the reference), which still run under saved-tensor hooks,
``create_graph`` and a staged backward."""

import numpy as np
import pytest

import ferro
from ferro._C import engine
from ferro._C.graph import OpDef
from ferro.errors import ArgumentError
from ferro.ops.registry import REGISTRY

DIRECT = ("add", "sub", "mul", "tanh", "relu")
UNARY = {"tanh": ferro.tanh, "relu": ferro.relu}


def _inputs(case, dtype):
    rng = np.random.default_rng(7)
    a = rng.uniform(-1, 1, (3, 4)).astype(dtype)
    if case == "same":
        b = rng.uniform(-1, 1, (3, 4)).astype(dtype)
    elif case == "broadcast":
        b = rng.uniform(-1, 1, (4,)).astype(dtype)
    elif case == "strided":
        a = rng.uniform(-1, 1, (4, 3)).astype(dtype).T  # not C-contiguous
        b = rng.uniform(-1, 1, (3, 4)).astype(dtype)
    elif case == "zero_d":
        a = np.asarray(a[0, 0])
        b = np.asarray(rng.uniform(-1, 1), dtype=dtype)
    else:  # a Python scalar
        b = 0.75
    return a, b


def _run(name, a, b, hooks, overrides=False):
    ta = ferro.tensor(a, requires_grad=True)
    tb = ferro.tensor(b, requires_grad=True) if isinstance(b, np.ndarray) else b
    if name in UNARY:
        tb = None
    fn = {"add": ferro.add, "sub": ferro.sub, "mul": ferro.mul, **UNARY}[name]
    args = (ta,) if name in UNARY else (ta, tb)
    if hooks:
        # Saved values go through pack/unpack: the engine runs the class's backward.
        with ferro.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            y = fn(*args)
    else:
        y = fn(*args)
    gy = np.linspace(-2, 3, y.numel(), dtype=a.dtype).reshape(y.shape)
    # tanh's and relu's fused backward override runs before either path unless it is off;
    # with it on, the engine calls its kernel itself (no hooks) or through it (hooks).
    prev = engine.set_overrides_enabled(overrides)
    try:
        y.backward(ferro.tensor(gy))
    finally:
        engine.set_overrides_enabled(prev)
    grads = [ta.grad.numpy()]
    if isinstance(tb, ferro.Tensor):
        grads.append(tb.grad.numpy())
    return y.detach().numpy(), grads


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", ["same", "broadcast", "strided", "scalar", "zero_d"])
@pytest.mark.parametrize("name", DIRECT)
def test_direct_path_is_bit_identical_to_the_class_path(name, case, dtype):
    assert REGISTRY[name].direct
    a, b = _inputs(case, dtype)
    y, grads = _run(name, a, b, hooks=False)
    y_ref, grads_ref = _run(name, a, b, hooks=True)
    np.testing.assert_array_equal(y, y_ref)
    assert y.dtype == y_ref.dtype
    for g, r in zip(grads, grads_ref, strict=True):
        np.testing.assert_array_equal(g, r)
        assert g.dtype == r.dtype
    # And against the expressions written out in NumPy.
    want = {
        "add": lambda: a + b,
        "sub": lambda: a - b,
        "mul": lambda: a * b,
        "tanh": lambda: np.tanh(a),
        "relu": lambda: np.maximum(a, 0),
    }
    np.testing.assert_array_equal(y, want[name]())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", ["same", "strided", "zero_d"])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_direct_kernel_backward_is_the_fused_override(name, case, dtype):
    # Overrides on: the engine's call of the kernel against the override's own call of it.
    a, _ = _inputs(case, dtype)
    y, grads = _run(name, a, None, hooks=False, overrides=True)
    y_ref, grads_ref = _run(name, a, None, hooks=True, overrides=True)
    np.testing.assert_array_equal(y, y_ref)
    np.testing.assert_array_equal(grads[0], grads_ref[0])
    assert grads[0].dtype == grads_ref[0].dtype


class _Ctx:
    """A stand-in ctx, to call an op class's forward and backward directly (the reference)."""

    xp = np
    needs_input_grad = (True, True)

    def save(self, *arrays):
        self.saved = arrays


@pytest.mark.filterwarnings("ignore:Mean of empty slice")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(3, 4), (5,), (), (0, 3), (4, 3, 2)])
@pytest.mark.parametrize("name", ["sum", "mean", "matmul"])
def test_direct_reductions_and_matmul_are_bit_identical(name, shape, dtype):
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, shape).astype(dtype)
    w = rng.uniform(-1, 1, shape[-1:] + (2,)).astype(dtype)
    if name == "matmul" and len(shape) < 2:
        pytest.skip("matmul of a matrix only")
    tx, tw = ferro.tensor(x, requires_grad=True), ferro.tensor(w, requires_grad=True)
    cls = REGISTRY[name]
    assert cls.direct
    params = {} if name == "matmul" else {"axes": None, "keepdims": False}
    args = (x, w) if name == "matmul" else (x,)
    ctx = _Ctx()
    with np.errstate(all="ignore"):  # the mean of nothing
        y = tx @ tw if name == "matmul" else getattr(tx, name)()
        y_ref = np.asarray(cls.forward(ctx, *args, **params))
        gy = np.linspace(-2, 3, y.numel(), dtype=dtype).reshape(y.shape)
        y.backward(ferro.tensor(gy))
        g_ref = cls.backward(ctx, gy)
    g_ref = g_ref if name == "matmul" else (g_ref,)
    np.testing.assert_array_equal(y.detach().numpy(), y_ref)
    assert y.dtype == y_ref.dtype
    for t, r in zip((tx, tw), g_ref, strict=False):
        np.testing.assert_array_equal(t.grad.numpy(), r)
        assert t.grad.dtype == r.dtype


def test_direct_sum_and_mean_keep_what_their_class_reads():
    # create_graph runs the class's backward on a node the direct forward made
    x = ferro.tensor([[0.5, -1.0], [2.0, 3.0]], dtype=ferro.float64, requires_grad=True)
    (g,) = ferro.autograd.grad((x * x).sum() + (x * x).mean(), x, create_graph=True)
    np.testing.assert_array_equal(g.detach().numpy(), 2 * x.detach().numpy() * (1 + 1 / 4))
    (gg,) = ferro.autograd.grad(g.sum(), x)
    np.testing.assert_array_equal(gg.numpy(), np.full((2, 2), 2.5))
    # and the compiled functions keep the slow path's arguments and errors
    assert ferro.sum(x, 0).shape == (2,) and x.mean(dim=1, keepdim=True).shape == (2, 1)
    with pytest.raises(ferro.errors.DtypeError):
        ferro.tensor([1, 2]).mean()
    with pytest.raises(ferro.errors.ShapeError):
        ferro.ones(2, 3) @ ferro.ones(2, 3)


def test_direct_mul_saves_only_what_backward_reads():
    a = ferro.tensor([1.0, 2.0], requires_grad=True)
    c = ferro.tensor([3.0, 4.0])  # needs no gradient: mul must not keep a for gb
    y = a * c
    assert y.grad_fn.saved_info[0] is None and y.grad_fn.saved_info[1] is not None


def test_direct_ops_under_create_graph_give_second_derivatives():
    x = ferro.tensor([0.3, -0.7], dtype=ferro.float64, requires_grad=True)
    y = ferro.tanh(x * x + x - 0.5)
    (g,) = ferro.autograd.grad(y.sum(), x, create_graph=True)
    (gg,) = ferro.autograd.grad(g.sum(), x)
    xv = x.detach().numpy()
    u = xv * xv + xv - 0.5
    t = np.tanh(u)
    want = (1 - t * t) * 2 - 2 * t * (1 - t * t) * (2 * xv + 1) ** 2
    np.testing.assert_allclose(gg.numpy(), want, rtol=1e-12)


def test_direct_backward_refuses_a_second_backward():
    x = ferro.tensor([0.5], requires_grad=True)
    y = ferro.tanh(x * 2.0)
    y.backward()
    with pytest.raises(ferro.errors.GraphError, match="second time"):
        y.backward()


def test_direct_flag_is_checked():
    with pytest.raises(ArgumentError, match="direct must be one of"):
        OpDef("probe", lambda ctx, x: x, lambda ctx, gy: gy, direct="pow")
    assert OpDef("probe", lambda ctx, x: x, lambda ctx, gy: gy).direct == 0
