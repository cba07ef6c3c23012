"""Note [Direct ops]: the engine's compiled forward and first-order backward of add, sub, mul and
tanh give the same bits as the op classes' own ``forward``/``backward`` (the reference), which
still run under saved-tensor hooks, ``create_graph`` and a staged backward."""

import numpy as np
import pytest

import ferro
from ferro._C import engine
from ferro._C.graph import OpDef
from ferro.errors import ArgumentError
from ferro.ops.registry import REGISTRY

DIRECT = ("add", "sub", "mul", "tanh")


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


def _run(name, a, b, hooks):
    ta = ferro.tensor(a, requires_grad=True)
    tb = ferro.tensor(b, requires_grad=True) if isinstance(b, np.ndarray) else b
    if name == "tanh":
        tb = None
    fn = {"add": ferro.add, "sub": ferro.sub, "mul": ferro.mul}.get(name)
    if hooks:
        # Saved values go through pack/unpack: the engine runs the class's backward.
        with ferro.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            y = ferro.tanh(ta) if name == "tanh" else fn(ta, tb)
    else:
        y = ferro.tanh(ta) if name == "tanh" else fn(ta, tb)
    gy = np.linspace(-2, 3, y.numel(), dtype=a.dtype).reshape(y.shape)
    # tanh's fused backward override (when on) runs before either path: off, to compare them.
    prev = engine.set_overrides_enabled(False)
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
    want = {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b}
    np.testing.assert_array_equal(y, want[name]() if name in want else np.tanh(a))


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
