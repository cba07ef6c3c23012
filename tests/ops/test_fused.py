"""Fused CPU overrides against the generic ops they replace, generated from the registry.

Every op with a CPU override (``REGISTRY``, as ``ferro.ops.fused`` installed it) is run on every
op-database sample whose graph reaches it (``opdb.py``, ``opdb_more.py``), with overrides on and
off, in float32 and float64, with the inputs in odd layouts (transposed, negative strides, a
stride-0 broadcast, non-native byte order) and the upstream gradient contiguous, strided, or the
stride-0 broadcast that ``.sum()`` and ``.mean()`` hand back. Values and gradients must agree,
and where the kernels take the arrays the engine must record that they ran.
"""

from __future__ import annotations

import numpy as np
import pytest
from opdb import OPS

import ferro
from ferro._C import cpu_kernels
from ferro._C.tensor import wrap
from ferro.ops.fused import OVERRIDES, Fused, bind, overrides
from ferro.ops.registry import REGISTRY

OVERRIDDEN = sorted(n for n, op in REGISTRY.items() if op.cpu_forward or op.cpu_backward)


# --- the inputs: one op-database sample, its float arrays in a chosen layout ------------------


def _layout(a: np.ndarray, layout: str) -> np.ndarray:
    """Same values as ``a`` (the broadcast one: its first value everywhere), another layout."""
    if a.size == 0 or a.ndim == 0:
        layout = "contiguous"  # nothing to lay out otherwise
    if layout == "transposed":
        return a.copy(order="F")
    if layout == "negative strides":
        return np.flip(np.flip(a).copy())
    if layout == "broadcast":
        return np.broadcast_to(a.reshape(-1)[:1].reshape((1,) * a.ndim), a.shape)
    if layout == "non-native":
        return a.astype(a.dtype.newbyteorder())
    return a.copy(order="C")


def _inputs(sample, dtype, layout, requires_grad=True):
    """The call's arguments: float arrays as tensors in ``layout``, everything else as is."""
    args = []
    for k, a in enumerate(sample.args):
        if k in sample.same:
            args.append(args[0])
        elif isinstance(a, np.ndarray) and a.dtype.kind == "f":
            # wrap keeps the array exactly as laid out (creation would make it native).
            t = wrap(_layout(a.astype(dtype), layout))
            args.append(t.requires_grad_() if requires_grad and sample.grad else t)
        else:
            args.append(a)
    return args


def _ops_in_graph(out) -> set:
    """Registry names of the ops recorded in ``out``'s graph."""
    seen, stack, names = set(), [out.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or not hasattr(node, "op") or id(node) in seen:
            continue
        seen.add(id(node))
        names.add(node.op.name)
        stack.extend(t for t, _ in node.next_functions)
    return names


def _nodes(out, names):
    """The graph's nodes of the ops in ``names``."""
    seen, stack, found = set(), [out.grad_fn], []
    while stack:
        node = stack.pop()
        if node is None or not hasattr(node, "op") or id(node) in seen:
            continue
        seen.add(id(node))
        if node.op.name in names:
            found.append(node)
        stack.extend(t for t, _ in node.next_functions)
    return found


def _cases():
    # Each op-database sample whose (generic, float64) graph runs an overridden op.
    for info in OPS:
        if not info.grad:
            continue
        for i, sample in enumerate(info.samples(np.random.default_rng(0))):
            if not sample.grad:
                continue
            with overrides(False):
                out = info.fn(*_inputs(sample, np.float64, "contiguous"), **sample.kwargs)
            reached = _ops_in_graph(out) & set(OVERRIDDEN) if out.requires_grad else set()
            if reached:
                yield pytest.param(info, i, reached, id=f"{info.name}-{sample.label or i}")


CASES = list(_cases())


def test_every_override_is_reached_by_the_op_database():
    reached = set().union(*(c.values[2] for c in CASES))
    assert reached == set(OVERRIDDEN), f"no op-database sample runs {set(OVERRIDDEN) - reached}"


# --- parity ----------------------------------------------------------------------------------

LAYOUTS = ["contiguous", "transposed", "negative strides", "broadcast"]
GRADS = ["contiguous", "sum", "mean", "strided"]


def _run(info, sample, dtype, layout, grad):
    """Forward and backward once; returns (output, input gradients, nodes of overridden ops)."""
    args = _inputs(sample, dtype, layout)
    out = info.fn(*args, **sample.kwargs)
    # retain_graph: the test reads what each node saved afterwards.
    if grad == "mean" and out._data.size == 0:
        grad = "sum"  # the mean of nothing is NaN, with a warning
    if grad == "sum":
        out.sum().backward(retain_graph=True)
    elif grad == "mean":
        out.mean().backward(retain_graph=True)
    else:
        g = np.asarray(np.random.default_rng(3).normal(size=out.shape), dtype)
        if grad == "strided" and g.ndim:
            g = np.flip(np.flip(g).copy())  # negative strides: no kernel reads them as they are
        out.backward(wrap(g), retain_graph=True)
    grads = [a.grad.numpy() for a in args if isinstance(a, ferro.Tensor) and a.requires_grad]
    return out.detach().numpy(), grads, _nodes(out, OVERRIDDEN)


def _kernels_hold(node) -> bool:
    # The table's conditions on the op's parameters (softmax's last axis, batch_norm's training),
    # and saved arrays that are arrays: NumPy makes a 0-d result a scalar, which tanh, sigmoid
    # and relu save as it is (the generic backward runs then).
    entry = OVERRIDES[node.op.name]
    if not all(type(a) is np.ndarray for a in node.saved):
        return False
    ndim = len(node.output_shapes[0])
    if any(getattr(node, k, None) != v for k, v in entry.only):
        return False
    return not entry.rows or (ndim >= 1 and node.axis == ndim - 1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("info, i, reached", CASES)
def test_override_matches_generic_on_every_layout(info, i, reached, dtype):
    sample = info.samples(np.random.default_rng(0))[i]
    tol = dict(rtol=2e-5, atol=2e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    if dtype == np.float32 and "3d winograd" in sample.label:
        # F(4x4x4, 3x3x3) rounds within ~1e-5 of the result's scale (here ~2), a constant
        # gradient (the "sum" one) the worst case; random ones within ~4e-6 (docs/conv.md)
        tol["atol"] = 3e-5
    for layout in LAYOUTS:
        if layout == "transposed" and not any(
            isinstance(a, np.ndarray) and a.ndim >= 2 for a in sample.args
        ):
            continue
        for grad in GRADS:
            with overrides(False):
                y0, g0, _ = _run(info, sample, dtype, layout, grad)
            with overrides(True):
                y1, g1, nodes = _run(info, sample, dtype, layout, grad)
            where = f"{layout} inputs, {grad} gradient"
            np.testing.assert_allclose(y1, y0, **tol, err_msg=where)
            for a, b in zip(g1, g0, strict=True):
                assert a.dtype == b.dtype == dtype
                np.testing.assert_allclose(a, b, **tol, err_msg=where)
            if layout == "contiguous" and grad != "strided":
                # The kernels take these arrays: the engine must have run them, and said so.
                for node in nodes:
                    if not _kernels_hold(node):
                        continue
                    op = node.op
                    assert node.fused_backward == (op.cpu_backward is not None), (node, where)
                    assert node.fused_forward == (op.cpu_forward is not None), (node, where)


@pytest.mark.parametrize("info, i, reached", CASES)
def test_override_forward_matches_generic_on_non_native_input(info, i, reached):
    # Non-native byte order: no kernel may read it as native (gelu(0.84) came out 1.6e-19).
    sample = info.samples(np.random.default_rng(0))[i]
    outs = []
    for enabled in (False, True):
        with overrides(enabled), ferro.no_grad():
            args = _inputs(sample, np.float64, "non-native", requires_grad=False)
            outs.append(info.fn(*args, **sample.kwargs).numpy())
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-12, atol=1e-12)


# --- the mechanism ---------------------------------------------------------------------------


def test_fused_forward_then_generic_backward_and_the_reverse():
    # A fused forward leaves ctx as the generic forward does: either backward can follow it.
    x0 = np.random.default_rng(0).normal(size=(4, 6))
    grads = []
    for fwd_on, bwd_on in [(True, False), (False, True), (True, True), (False, False)]:
        x = ferro.from_numpy(x0.copy()).requires_grad_()
        with overrides(fwd_on):
            y = ferro.gelu(x)
        assert y.grad_fn.fused_forward == fwd_on
        with overrides(bwd_on):
            y.sum().backward()
        assert y.grad_fn.fused_backward == bwd_on
        grads.append(x.grad.numpy())
    for g in grads[1:]:
        np.testing.assert_allclose(g, grads[0], rtol=1e-12)


def test_a_refused_forward_is_not_recorded_as_fused():
    # The kernel takes C-contiguous arrays: a transposed input runs the generic forward, and the
    # node says so (it used to be marked fused before the override chose to fall back).
    x = ferro.from_numpy(np.asfortranarray(np.ones((3, 4)))).requires_grad_()
    y = ferro.gelu(x)
    assert not y.grad_fn.fused_forward
    y.sum().backward()
    assert not y.grad_fn.fused_backward  # gelu saved the transposed x
    assert ferro.gelu(ferro.ones(3, 4, requires_grad=True)).grad_fn.fused_forward


def test_readme_example_runs_the_kernel_on_the_sum_gradient():
    # After .sum() the gradient reaching tanh is one value broadcast with stride 0: the kernel
    # reads it as it is (it used to refuse it and run the generic chain).
    x = ferro.tensor([1.0, 2.0, 3.0], requires_grad=True)
    w = ferro.randn(3, 2, requires_grad=True)
    h = ferro.tanh(x @ w)
    h.sum().backward()
    assert h.grad_fn.fused_backward
    xs, ws = x.detach().numpy(), w.detach().numpy()
    y = np.tanh(xs @ ws)
    np.testing.assert_allclose(x.grad.numpy(), ws @ (1 - y * y), rtol=1e-6)


def test_overrides_switched_off_run_nothing_fused():
    with overrides(False):
        y = ferro.gelu(ferro.ones(5, requires_grad=True))
        y.sum().backward()
    assert not y.grad_fn.fused_forward and not y.grad_fn.fused_backward


def test_paired_override_runs_its_backward_exactly_when_its_forward_ran():
    # A paired forward leaves state only its own backward reads; the engine pairs them even when
    # the switch changes in between, and never pairs a generic forward with the fused backward.
    calls = []

    def forward(ctx, x):
        if x.shape[0] > 2:
            return NotImplemented
        ctx.twice = x * 2  # state the generic backward does not know
        calls.append("fwd")
        return x * 3

    def backward(ctx, gy):
        calls.append("bwd")
        return gy * ctx.twice * 1.5  # = 3 gy for x == 1

    from ferro._C.engine import apply
    from ferro._C.graph import OpDef

    op = OpDef("triple_probe", lambda ctx, x: x * 3, lambda ctx, gy: gy * 3)
    op.set_override("cpu", forward, backward, paired=True)
    for n, fused in [(2, True), (3, False)]:
        calls.clear()
        x = ferro.ones(n, requires_grad=True)
        y = apply(op, x)
        with overrides(False):
            y.sum().backward()
        assert y.grad_fn.fused_forward == fused == y.grad_fn.fused_backward
        assert calls == (["fwd", "bwd"] if fused else [])
        np.testing.assert_array_equal(x.grad.numpy(), np.full(n, 3.0, np.float32))


def test_every_table_kernel_is_implemented_with_one_meaning():
    from ferro.ops.fused import _BACKENDS

    # A device's backend is every module installed for it (cpu_kernels plus the families').
    names = {k for e in OVERRIDES.values() for k in e.kernels}
    cpu, cuda = ({k for m in _BACKENDS[d] for k in m.FUSED_KERNELS} for d in ("cpu", "cuda"))
    assert names <= cpu | cuda, names - (cpu | cuda)
    for backend in _BACKENDS["cpu"] + _BACKENDS["cuda"]:
        for name in backend.FUSED_KERNELS:
            assert callable(getattr(backend, name)), name
    # The CPU leaves out only what measured slower than NumPy (docs/design.md), the GPU's
    # window kernels, whose work the CPU does with strided views, and the resampling kernel
    # that exists for the GPU only so far (docs/gpu.md).
    assert names - cpu == {
        "softmax_fwd",
        "log_softmax_fwd",
        "log_softmax_bwd",
        "unfold_cols",
        "fold_cols",
        "avg_pool_fwd",
        "avg_pool_bwd",
        "adaptive_avg_pool_fwd",
        "adaptive_avg_pool_bwd",
        "adaptive_max_pool_fwd",
        "adaptive_max_pool_bwd",
    } | {"resample_axis"}


def test_bind_skips_what_a_backend_lacks():
    class Backend:
        FUSED_KERNELS = frozenset({"tanh_bwd"})
        accepts = staticmethod(cpu_kernels.accepts)
        accepts_grad = staticmethod(cpu_kernels.accepts_grad)
        tanh_bwd = staticmethod(cpu_kernels.tanh_bwd)

    fwd, bwd = bind(Fused(forward="gelu_fwd", backward="tanh_bwd"), Backend)
    assert fwd is None and bwd is not None
    assert bind(OVERRIDES["cross_entropy"], Backend) == (None, None)  # paired: both or none


def test_optimizer_fused_update_follows_the_switch():
    from ferro.ops.fused import kernel_for

    p = np.ones(4, np.float32)
    g = np.ones(4, np.float32)
    assert kernel_for("adam_update", (p, g)) is cpu_kernels.adam_update
    assert kernel_for("adam_update", (p, g.astype(np.float64))) is None  # accepts says no
    assert kernel_for("no_such_kernel", (p, g)) is None
    with overrides(False):
        assert kernel_for("adam_update", (p, g)) is None
