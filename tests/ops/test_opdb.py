"""Generic op tests generated from the op database (tests/ops/opdb/), and its guard tests."""

from __future__ import annotations

import pkgutil
from collections import Counter

import numpy as np
import opdb
import pytest
from opdb import BY_FAMILY, BY_NAME, OPS, WITHOUT_ENTRIES

import ferro
from ferro.ops import FAMILIES
from ferro.ops.registry import REGISTRY
from ferro.testing import gradcheck

CASES = [(op, i) for op in OPS for i in range(len(op.samples(np.random.default_rng(0))))]


def _ids(case):
    op, i = case
    return f"{op.name}-{op.samples(np.random.default_rng(0))[i].label or i}"


def _build(sample, dtype, requires_grad=True):
    """Tensors (and the NumPy arrays they wrap) for one sample."""
    tensors, arrays = [], []
    for k, a in enumerate(sample.args):
        if k in sample.same:
            tensors.append(tensors[0])
            arrays.append(arrays[0])
            continue
        if isinstance(a, np.ndarray):
            is_float = a.dtype.kind == "f"
            arr = a.astype(dtype) if is_float else a.copy()
            if sample.noncontig and arr.ndim >= 2:
                arr = np.ascontiguousarray(arr.T).T  # same values, Fortran order: non-contiguous
                assert not arr.flags.c_contiguous
            t = ferro.from_numpy(arr)
            if requires_grad and sample.grad and is_float:
                t.requires_grad_(True)
            tensors.append(t)
            arrays.append(arr)
        else:
            tensors.append(a)
            arrays.append(a)
    return tensors, arrays


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_forward_matches_reference(case, dtype):
    op, i = case
    sample = op.samples(np.random.default_rng(0))[i]
    tensors, arrays = _build(sample, dtype)
    out = op.fn(*tensors, **sample.kwargs)
    want = op.ref(*arrays, **sample.kwargs)
    rtol = op.fwd_rtol32 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out._data, want, rtol=rtol, atol=rtol)
    assert out.shape == np.shape(want)
    if op.same_dtype_out:
        assert out.dtype == np.dtype(dtype)


@pytest.mark.parametrize("case", [c for c in CASES if c[0].grad], ids=_ids)
def test_grad_matches_numeric(case):
    op, i = case
    sample = op.samples(np.random.default_rng(0))[i]
    if not sample.grad:
        pytest.skip("sample is not differentiable")
    tensors, _ = _build(sample, np.float64)
    diff = [t for t in tensors if isinstance(t, ferro.Tensor)]
    positions = [k for k, t in enumerate(tensors) if isinstance(t, ferro.Tensor)]

    # Repeated arguments: gradcheck the shared tensor once.
    uniq = [t for k, t in zip(positions, diff, strict=True) if k not in sample.same]
    uniq_pos = [k for k in positions if k not in sample.same]

    def fn_uniq(*ts):
        args = list(tensors)
        for k, t in zip(uniq_pos, ts, strict=True):
            args[k] = t
        for k in sample.same:
            args[k] = args[0]
        return op.fn(*args, **sample.kwargs)

    assert gradcheck(fn_uniq, tuple(uniq), **op.gradcheck_kwargs)


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_inputs_not_mutated(case):
    op, i = case
    sample = op.samples(np.random.default_rng(0))[i]
    tensors, arrays = _build(sample, np.float64)
    before = [a.copy() if isinstance(a, np.ndarray) else a for a in arrays]
    out = op.fn(*tensors, **sample.kwargs)
    if out.requires_grad:
        g = np.full(out.shape, 0.5)
        out.backward(ferro.from_numpy(g))
        np.testing.assert_array_equal(g, np.full(out.shape, 0.5))
    for a, b in zip(arrays, before, strict=True):
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("case", [c for c in CASES if c[0].grad], ids=_ids)
def test_float32_and_float64_agree(case):
    op, i = case
    sample = op.samples(np.random.default_rng(0))[i]
    if not sample.grad:
        pytest.skip("sample is not differentiable")
    grads = {}
    for dtype in (np.float32, np.float64):
        tensors, _ = _build(sample, dtype)
        out = op.fn(*tensors, **sample.kwargs)
        out.backward(ferro.ones_like(out))
        grads[dtype] = [
            t.grad._data for t in tensors if isinstance(t, ferro.Tensor) and t.grad is not None
        ]
        for t in tensors:
            if isinstance(t, ferro.Tensor) and t.grad is not None:
                assert t.grad.dtype == np.dtype(dtype)
    for g32, g64 in zip(grads[np.float32], grads[np.float64], strict=True):
        np.testing.assert_allclose(g32, g64, rtol=1e-4, atol=1e-4)


def _registering_family(name):
    """The family whose module registers op ``name`` (defines its forward)."""
    return REGISTRY[name].forward.__module__.removeprefix("ferro.ops.")


def test_every_registered_op_has_an_entry():
    missing = [
        f"{name} (in tests/ops/opdb/{_registering_family(name)}.py)"
        for name in sorted(set(REGISTRY) - set(BY_NAME))
    ]
    assert not missing, f"ops without an op database entry: {', '.join(missing)}"


def test_each_entry_sits_in_the_family_that_defines_its_function():
    misplaced = []
    for family, entries in BY_FAMILY.items():
        for op in entries:
            func = getattr(ferro.ops, op.func, None)
            if func is None:
                misplaced.append(f"{op.name} (in {family}.py: ferro.ops has no {op.func!r})")
                continue
            defined_in = func.__module__.removeprefix("ferro.ops.")
            registered_in = _registering_family(op.name) if op.name in REGISTRY else defined_in
            if family != defined_in or family != registered_in:
                misplaced.append(f"{op.name} (in {family}.py, belongs in {defined_in}.py)")
    assert not misplaced, f"op database entries in the wrong family module: {misplaced}"


def test_entry_names_are_unique():
    repeated = sorted(name for name, n in Counter(op.name for op in OPS).items() if n > 1)
    assert not repeated, f"op database entries that share a name: {repeated}"


def test_the_database_modules_are_the_op_families():
    modules = {m.name for m in pkgutil.iter_modules(opdb.__path__)} - {"core"}
    assert modules == set(BY_FAMILY)
    assert set(BY_FAMILY) | set(WITHOUT_ENTRIES) == set(FAMILIES)


def test_a_family_without_a_database_module_fails_loudly():
    with pytest.raises(ModuleNotFoundError) as info:
        opdb._entries("no_such_family")
    assert "tests/ops/opdb/no_such_family.py" in "".join(info.value.__notes__)


def test_the_property_tests_cover_at_least_the_ops_they_once_listed_by_hand():
    elementwise = {op.name for op in OPS if op.elementwise}
    reductions = {op.name for op in OPS if op.reduction}
    assert {"add", "sub", "mul", "div", "maximum", "pow"} <= elementwise
    assert {"sum", "mean", "amax", "logsumexp"} <= reductions


def test_an_elementwise_entry_has_one_domain_interval_per_argument():
    for op in OPS:
        if op.elementwise:
            (first, *_) = op.samples(np.random.default_rng(0))
            assert len(first.args) == len(op.domain), op.name
        assert all(lo < hi for lo, hi in op.domain), op.name


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_cupy_backend_matches_numpy(case):
    """The op database once more on CuPy arrays (where a device exists): same values, same
    gradients as the NumPy backend."""
    op, i = case
    sample = op.samples(np.random.default_rng(0))[i]
    results = []
    for device in ("cpu", "cuda"):
        tensors, _ = _build(sample, np.float64)
        moved = [
            t.detach().to(device).requires_grad_(t.requires_grad)
            if isinstance(t, ferro.Tensor)
            else t
            for t in tensors
        ]
        for k in sample.same:
            moved[k] = moved[0]
        out = op.fn(*moved, **sample.kwargs)
        grads = []
        if out.requires_grad:
            out.backward(ferro.ones_like(out))
            grads = [
                t.grad.cpu().numpy()
                for t in moved
                if isinstance(t, ferro.Tensor) and t.grad is not None
            ]
        results.append((out.detach().cpu().numpy(), grads))
    if op.device_mask:  # the device's generator draws another mask: check its use instead
        x, p = tensors[0].detach().numpy(), sample.args[1]
        kept = results[1][0] != 0
        np.testing.assert_allclose(results[1][0], np.where(kept, x / (1 - p), 0), rtol=1e-12)
        np.testing.assert_array_equal(results[1][1][0], np.where(kept, 1 / (1 - p), 0))
        return
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-9, atol=1e-12)
    for g_gpu, g_cpu in zip(results[1][1], results[0][1], strict=True):
        np.testing.assert_allclose(g_gpu, g_cpu, rtol=1e-9, atol=1e-12)
