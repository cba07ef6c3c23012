"""Note [ctx contract]: what an op's forward may expect of ``ctx``.

``needs_input_grad`` has one bool per positional input, recorded or not; when nothing is
recorded the op gets the shared ``UnrecordedCtx`` (no Node allocated), which drops ``save`` and
attribute writes, so no forward may read back what it stored on ctx.
"""

import ast
import inspect
import textwrap

import numpy as np
import pytest

import ferro
from ferro._C.engine import apply
from ferro._C.graph import Node, OpDef, UnrecordedCtx
from ferro.ops.registry import REGISTRY

# What a forward may read from ctx: the contract's read-only part and its methods.
_CTX_READS = {
    "xp",
    "needs_input_grad",
    "save",
    "save_for_backward",
    "mark_non_differentiable",
    "set_materialize_grads",
}


def _forwards():
    for name, op in sorted(REGISTRY.items()):
        for fn in (op.forward, op.cpu_forward, op.gpu_forward):
            if fn is not None:
                yield name, fn


def _ctx_reads(fn):
    src = textwrap.dedent(inspect.getsource(fn))
    tree = ast.parse(src)
    func = next(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.Lambda)))
    ctx_name = func.args.args[0].arg
    return {
        n.attr
        for n in ast.walk(func)
        if isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Name)
        and n.value.id == ctx_name
        and isinstance(n.ctx, ast.Load)
    }


@pytest.mark.parametrize("name,fn", list(_forwards()), ids=lambda v: getattr(v, "__qualname__", v))
def test_no_forward_reads_back_what_it_stored_on_ctx(name, fn):
    extra = _ctx_reads(fn) - _CTX_READS
    assert not extra, f"{name}: forward reads ctx.{sorted(extra)}; use a local variable"


def _probe_op(seen):
    def forward(ctx, a, b, *, k=1):
        seen.append((type(ctx), ctx.needs_input_grad))
        ctx.save(a)
        ctx.anything = 1  # dropped when unrecorded, kept on a Node
        return a * b * k

    return OpDef("ctx_probe", forward, lambda ctx, gy: (gy, gy))


def test_unrecorded_forward_gets_the_shared_ctx_with_one_false_per_input():
    seen = []
    op = _probe_op(seen)
    a = ferro.ones(2, requires_grad=True)
    b = ferro.ones(2)
    with ferro.no_grad():
        apply(op, a, b)
        apply(op, a, 2.0)
    apply(op, ferro.ones(2), b)  # nothing requires grad
    assert [s[0] for s in seen] == [UnrecordedCtx] * 3
    assert [s[1] for s in seen] == [(False, False)] * 3
    seen.clear()
    out = apply(op, a, b)
    assert seen == [(Node, (True, False))]
    assert out.grad_fn.anything == 1


def test_the_shared_ctx_drops_writes_and_is_one_object_per_arity():
    seen = []

    def forward(ctx, a, b):
        seen.append(ctx)
        ctx.scale = 3
        assert not hasattr(ctx, "scale")
        return a + b

    op = OpDef("ctx_probe_writes", forward, lambda ctx, gy: (gy, gy))
    x = ferro.ones(2)
    apply(op, x, x)
    apply(op, x, 1.0)
    assert seen[0] is seen[1]


def test_function_forward_may_read_back_its_ctx_without_grad():
    class Scale(ferro.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.k = 3.0
            return x * ctx.k

        @staticmethod
        def backward(ctx, gy):
            return gy * ctx.k

    x = ferro.ones(2, requires_grad=True)
    with ferro.no_grad():
        np.testing.assert_array_equal(Scale.apply(x).numpy(), [3, 3])
    Scale.apply(x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3, 3])
