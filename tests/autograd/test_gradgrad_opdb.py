"""Generated from the op database: every differentiable op is twice differentiable.

For every entry and sample (float64), ``gradgradcheck`` compares the derivatives of the op's
create_graph backward with central differences, with respect to the inputs and to the output
gradients. An op that deliberately is not twice differentiable is listed in
``NOT_TWICE_DIFFERENTIABLE`` with the reason; its create_graph backward must raise an error
naming the op. New op families merged later are picked up by the same test.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import ferro
from ferro.errors import NotSupportedError
from ferro.testing import gradgradcheck

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))  # the op database
from opdb import OPS  # noqa: E402

# Op database entry name -> why it is not twice differentiable.
NOT_TWICE_DIFFERENTIABLE: dict[str, str] = {}

# Samples drawn at a point where the first derivative jumps: central differences of the
# gradient measure the jump there, not a second derivative.
AT_A_KINK = {
    ("amax", "tie"): "tied maxima share the gradient: it jumps when a tie breaks",
}

CASES = [(op, i) for op in OPS if op.grad for i in range(len(op.samples(np.random.default_rng(0))))]


def _ids(case):
    op, i = case
    return f"{op.name}-{op.samples(np.random.default_rng(0))[i].label or i}"


def _build(sample):
    tensors = []
    for k, a in enumerate(sample.args):
        if k in sample.same:
            tensors.append(tensors[0])
            continue
        if isinstance(a, np.ndarray):
            is_float = a.dtype.kind == "f"
            arr = a.astype(np.float64) if is_float else a.copy()
            if sample.noncontig and arr.ndim >= 2:
                arr = np.ascontiguousarray(arr.T).T
            t = ferro.from_numpy(arr)
            if sample.grad and is_float:
                t.requires_grad_(True)
            tensors.append(t)
        else:
            tensors.append(a)
    return tensors


def _fn_uniq(op, sample, tensors):
    positions = [k for k, t in enumerate(tensors) if isinstance(t, ferro.Tensor)]
    positions = [k for k in positions if tensors[k].requires_grad and k not in sample.same]

    def fn(*ts):
        args = list(tensors)
        for k, t in zip(positions, ts, strict=True):
            args[k] = t
        for k in sample.same:
            args[k] = args[0]
        return op.fn(*args, **sample.kwargs)

    return fn, tuple(tensors[k] for k in positions)


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_op_is_twice_differentiable(case):
    op, i = case
    sample = op.samples(np.random.default_rng(0))[i]
    if not sample.grad:
        pytest.skip("sample is not differentiable")
    if (op.name, sample.label) in AT_A_KINK:
        pytest.skip(AT_A_KINK[(op.name, sample.label)])
    tensors = _build(sample)
    fn, inputs = _fn_uniq(op, sample, tensors)
    if not inputs:
        pytest.skip("no input requires grad")
    if op.name in NOT_TWICE_DIFFERENTIABLE:
        out = fn(*inputs)
        outs = out if isinstance(out, tuple) else (out,)
        outs = [o for o in outs if o.requires_grad]
        with pytest.raises(NotSupportedError, match="not twice differentiable"):
            gs = ferro.autograd.grad(
                outs,
                inputs,
                [ferro.ones_like(o) for o in outs],
                create_graph=True,
                allow_unused=True,
            )
            ferro.autograd.grad([g.sum() for g in gs if g is not None], inputs, allow_unused=True)
        return
    kwargs = dict(op.gradcheck_kwargs)
    assert gradgradcheck(fn, inputs, **kwargs)
