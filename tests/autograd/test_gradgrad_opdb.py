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

# Ops whose double backward is known to be wrong, each with the reason; the test runs and is
# expected to fail until it is fixed. Empty: keep it so.
KNOWN_WRONG: dict[str, str] = {}

# gradgradcheck costs a create_graph backward per element of the inputs and output gradients:
# every op is checked on its smallest sample, and on the others up to this many elements.
MAX_ELEMENTS = 40


def _size(sample) -> int:
    return sum(a.size for a in sample.args if isinstance(a, np.ndarray))


def _cases():
    cases = []
    for op in OPS:
        if not op.grad:
            continue
        samples = op.samples(np.random.default_rng(0))
        smallest = min(range(len(samples)), key=lambda i: _size(samples[i]))
        cases += [
            (op, i)
            for i in range(len(samples))
            if i == smallest or _size(samples[i]) <= MAX_ELEMENTS
        ]
    return cases


CASES = _cases()


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


def _marks(case, first_order=False):
    reason = KNOWN_WRONG.get(case[0].name)
    if reason is None or (first_order and "TypeError" not in reason):
        return []
    return [pytest.mark.xfail(reason=reason, strict=False)]


@pytest.mark.parametrize("case", [pytest.param(c, marks=_marks(c), id=_ids(c)) for c in CASES])
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


@pytest.mark.parametrize(
    "case", [pytest.param(c, marks=_marks(c, True), id=_ids(c)) for c in CASES]
)
def test_create_graph_gradients_equal_first_order_ones(case):
    # The same backward source (or an op's differentiable_backward) gives the same first
    # derivatives under create_graph as the first-order path (fused overrides included).
    op, i = case
    sample = op.samples(np.random.default_rng(0))[i]
    if not sample.grad or op.name in NOT_TWICE_DIFFERENTIABLE:
        pytest.skip("sample is not twice differentiable")
    tensors = _build(sample)
    fn, inputs = _fn_uniq(op, sample, tensors)
    if not inputs:
        pytest.skip("no input requires grad")
    out = fn(*inputs)
    outs = [o for o in (out if isinstance(out, tuple) else (out,)) if o.requires_grad]
    rng = np.random.default_rng(1)
    seeds = [ferro.from_numpy(rng.standard_normal(o.shape)) for o in outs]
    first = ferro.autograd.grad(outs, inputs, seeds, retain_graph=True, allow_unused=True)
    again = ferro.autograd.grad(outs, inputs, seeds, create_graph=True, allow_unused=True)
    for a, b in zip(first, again, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_allclose(b._data, a._data, rtol=1e-10, atol=1e-12)


# The recurrent cells and grid_sample on batched samples, which the op database's samples above
# MAX_ELEMENTS leave out: their create_graph backward recomputes the gates (the cells) and the
# sampling weights (grid_sample) from the saved inputs.
def test_recurrent_cells_and_layers_are_twice_differentiable_on_batches():
    from ferro.ops.recurrent import gru_cell, lstm_cell

    rng = np.random.default_rng(0)
    t = lambda *shape: ferro.tensor(rng.standard_normal(shape), requires_grad=True)  # noqa: E731
    assert gradgradcheck(lambda a, b, c: sum(lstm_cell(a, b, c)), (t(3, 8), t(3, 8), t(3, 2)))
    assert gradgradcheck(lambda a, b, c: gru_cell(a, b, c), (t(3, 6), t(3, 6), t(3, 2)))
    for cls in (ferro.nn.LSTM, ferro.nn.GRU):
        ferro.manual_seed(0)
        layer = cls(2, 2, bidirectional=True).double()
        assert gradgradcheck(lambda x, layer=layer: layer(x)[0], (t(2, 1, 2),))


def test_grid_sample_is_twice_differentiable_on_a_batch():
    rng = np.random.default_rng(1)
    x = ferro.tensor(rng.standard_normal((2, 1, 3, 3)), requires_grad=True)
    grid = ferro.tensor(rng.uniform(-0.9, 0.9, (2, 2, 2, 2)), requires_grad=True)
    fn = ferro.nn.functional.grid_sample
    assert gradgradcheck(lambda a, b: fn(a, b, align_corners=False), (x, grid))
