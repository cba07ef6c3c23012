"""Memory-layout fuzzing over the op database, shared by test_fuzz_ops.py and its worker process.

A case names an op database entry (tests/ops/opdb/), one of its samples, a dtype and a memory
layout for each array argument, and optionally new shapes for the elementwise families.
:func:`check_case` builds the arguments in those layouts and checks, against the same values
in contiguous native arrays:

- forward matches the op's NumPy reference (and keeps the dtype, native byte order included);
- every gradient equals the one computed from the contiguous layout, with its input's shape and
  dtype;
- ``gradcheck`` (float64) when the case asks for it;
- no input array was written to.

Building a tensor from read-only or non-native-byte-order data may be refused with a
:class:`~ferro.errors.FerroError` (the issue allows "refuse or convert"); such a case is
reported as refused, not failed. Anything else raised is a failure.

Run as a script it is the worker that test_fuzz_ops.py starts in a subprocess, so a segfault
cannot take pytest down with it (see :func:`main` for its commands). It prints ``CASE <json>``
(flushed) before running each case, so when a case kills the process the parent names the last
case printed; ``python fuzz_support.py case '<json>'`` runs that one case again.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import sys
import tempfile

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ops"))

from opdb import BY_NAME, OPS  # noqa: E402

import ferro  # noqa: E402
from ferro.errors import FerroError  # noqa: E402
from ferro.testing import gradcheck, tolerances  # noqa: E402

# Layouts whose data every op must take as is. The others are "stride tricks" or unusual
# memory, which a kernel that trusts its input's flags could read or write out of bounds.
SAFE_LAYOUTS = ("contiguous", "transposed")
CRASH_PRONE_LAYOUTS = ("negative", "strided", "broadcast", "readonly", "mmap", "byteswapped")
LAYOUTS = SAFE_LAYOUTS + CRASH_PRONE_LAYOUTS
# Memory nobody may write: an in-place op or an optimizer step must refuse it (or copy first).
READ_ONLY_MEMORY = ("broadcast", "readonly", "mmap")
# Data ferro may refuse at the boundary with a typed error (the issue: "refuse or copy
# read-only data", "convert non-native order or refuse"); the fuzz then uses a copy.
REFUSABLE = (*READ_ONLY_MEMORY, "byteswapped")

SAMPLES = {op.name: op.samples(np.random.default_rng(0)) for op in OPS}


class Refused(Exception):
    """Building a tensor from a refusable layout raised a FerroError: an allowed outcome."""


def make_layout(a: np.ndarray, layout: str) -> np.ndarray:
    """``a``'s values (``broadcast``: the first row's, repeated) in the given memory layout."""
    if layout == "contiguous" or (a.ndim == 0 and layout not in REFUSABLE):
        return a.copy(order="C")
    if layout == "transposed":
        return np.ascontiguousarray(a.T).T  # Fortran order: a transposed view
    if layout == "negative":
        return np.flip(np.flip(a).copy())  # negative strides along every axis
    if layout == "strided":
        # Every other element of a larger buffer; the gaps hold NaN (0 for ints), so a kernel
        # that reads the buffer as contiguous gives a visibly wrong answer.
        buf = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), dtype=a.dtype)
        if a.dtype.kind == "f":
            buf[...] = np.nan
        view = buf[..., ::2]
        view[...] = a
        return view
    if layout == "broadcast":
        axes = [k for k, n in enumerate(a.shape) if n > 1]
        if not axes:
            return a.copy(order="C")
        return np.broadcast_to(np.take(a, [0], axis=axes[0]), a.shape)  # stride 0, read-only
    if layout == "readonly" or (layout == "mmap" and a.size == 0):  # no mmap of 0 bytes
        out = a.copy()
        out.flags.writeable = False
        return out
    if layout == "mmap":
        # A plain ndarray over a read-only file mapping: a write there is a segfault, not a
        # NumPy error, which is what the kernels' accept checks must prevent.
        path = os.path.join(_scratch_dir(), f"{next(_counter)}.npy")
        np.save(path, a)
        return np.asarray(np.load(path, mmap_mode="r"))
    if layout == "byteswapped":
        return a.astype(a.dtype.newbyteorder())
    raise AssertionError(f"unknown layout {layout!r}")


_counter = itertools.count()
_scratch = []


def _scratch_dir() -> str:
    """A temporary directory for the memory-mapped files, removed when the process exits."""
    if not _scratch:
        _scratch.append(tempfile.TemporaryDirectory(prefix="ferro-fuzz-"))
    return _scratch[0].name


def _native(view: np.ndarray) -> np.ndarray:
    return view.astype(view.dtype.newbyteorder("="), order="C", copy=True)


def _tensor(view: np.ndarray, layout: str, requires_grad: bool):
    """A tensor over ``view``, as a user would make it: ``from_numpy`` (no copy), and for data it
    refuses, ``ferro.tensor`` (a copy). A FerroError from both is an allowed refusal only for
    the refusable layouts."""
    try:
        t = ferro.from_numpy(view)
    except FerroError as exc:
        if layout not in REFUSABLE:
            raise
        try:
            t = ferro.tensor(view)
        except FerroError:
            raise Refused(f"{layout}: {type(exc).__name__}: {exc}") from None
    return t.requires_grad_(True) if requires_grad else t


def _backward(out, leaves, seed: int):
    """Gradients of ``<out, gy>`` for a fixed random ``gy``; None where out needs no grad."""
    if not out.requires_grad:
        return None
    gy = np.random.default_rng(seed).uniform(-1, 1, out.shape).astype(out.dtype)
    out.backward(ferro.from_numpy(gy))
    return [None if t.grad is None else t.grad for t in leaves]


def _build(case, sample, dtype):
    """Per argument position: (layout view or scalar, native contiguous values)."""
    rng = np.random.default_rng(case["seed"])
    shapes = case.get("shapes")
    views, values = [], []
    for k, a in enumerate(sample.args):
        if k in sample.same:
            views.append(views[0])
            values.append(values[0])
        elif isinstance(a, np.ndarray):
            base = a.astype(dtype) if a.dtype.kind == "f" else a.copy()
            if shapes is not None:
                # New shape, values drawn from the sample's own: they stay in the op's domain.
                base = rng.choice(base.ravel(), size=tuple(shapes[k]))
            view = make_layout(base, case["layouts"][k])
            views.append(view)
            values.append(_native(view))
        else:
            views.append(a)
            values.append(a)
    return views, values


def check_case(case: dict) -> str:
    """Run one case; returns "pass" or "refused: ..."; raises AssertionError on a failure."""
    op = BY_NAME[case["op"]]
    sample = SAMPLES[op.name][case["sample"]]
    dtype = np.dtype(case["dtype"])
    views, values = _build(case, sample, dtype)
    saved = [v.copy() if isinstance(v, np.ndarray) else None for v in views]
    kwargs = sample.kwargs

    def tensors_from(arrays, layouts):
        ts = []
        for k, a in enumerate(arrays):
            if k in sample.same:
                ts.append(ts[0])
            elif isinstance(a, np.ndarray):
                grad = sample.grad and a.dtype.kind == "f"
                ts.append(_tensor(a, layouts[k], grad))
            else:
                ts.append(a)
        return ts

    try:
        tensors = tensors_from(views, case["layouts"])
    except Refused as exc:
        return f"refused: {exc}"
    leaves = [t for k, t in enumerate(tensors) if k not in sample.same and _needs_grad(t)]

    out = op.fn(*tensors, **kwargs)
    want = op.ref(*values, **kwargs)
    rtol = op.fwd_rtol32 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=rtol, atol=rtol, err_msg="forward")
    assert out.shape == np.shape(want), f"forward shape {out.shape}, expected {np.shape(want)}"
    if op.same_dtype_out:
        assert out.dtype == dtype, f"forward dtype {out.dtype}, expected native {dtype}"

    grads = _backward(out, leaves, case["seed"])
    if grads is not None:
        ref_tensors = tensors_from(values, ["contiguous"] * len(values))
        ref_leaves = [
            t for k, t in enumerate(ref_tensors) if k not in sample.same and _needs_grad(t)
        ]
        ref_grads = _backward(op.fn(*ref_tensors, **kwargs), ref_leaves, case["seed"])
        tol = tolerances(dtype)
        for i, (g, r, x) in enumerate(zip(grads, ref_grads, leaves, strict=True)):
            assert (g is None) == (r is None), f"input {i}: gradient {g} against {r}"
            if g is None:
                continue
            assert g.shape == x.shape, f"input {i}: gradient shape {g.shape}, expected {x.shape}"
            assert g.dtype == dtype, f"input {i}: gradient dtype {g.dtype}, expected {dtype}"
            np.testing.assert_allclose(
                g.numpy(), r.numpy(), **tol, err_msg=f"gradient of input {i}, layout vs contiguous"
            )

    if case.get("gradcheck") and dtype == np.float64 and op.grad and sample.grad and leaves:
        fresh = tensors_from(views, case["layouts"])
        assert gradcheck(lambda *ts: op.fn(*ts, **kwargs), tuple(fresh), **op.gradcheck_kwargs)

    for k, (v, s) in enumerate(zip(views, saved, strict=True)):
        if s is not None:
            np.testing.assert_array_equal(v, s, err_msg=f"argument {k} was written to")
    return "pass"


def _needs_grad(t) -> bool:
    return isinstance(t, ferro.Tensor) and t.requires_grad


# Ops whose samples come from opdb's unary_samples/binary_samples take any (broadcastable)
# shapes, so their shapes can be fuzzed too; the rest keep their samples' shapes.
def _family(op) -> str:
    return op.samples.__qualname__.split(".")[0]


SHAPE_OPS = sorted(
    op.name for op in OPS if _family(op) in ("unary_samples", "binary_samples") and op.grad
)


def _shape_sample(name: str) -> int:
    """The sample whose arguments are all arrays (no scalars, no repeats) with the most values:
    the pool that fuzzed shapes draw their values from."""
    candidates = [
        (sum(a.size for a in s.args), i)
        for i, s in enumerate(SAMPLES[name])
        if not s.same and all(isinstance(a, np.ndarray) and a.size for a in s.args)
    ]
    return max(candidates)[1]


@st.composite
def cases(draw, layouts=LAYOUTS):
    """Any op database entry and sample, a dtype, a layout per argument."""
    name = draw(st.sampled_from(sorted(BY_NAME)))
    i = draw(st.integers(0, len(SAMPLES[name]) - 1))
    nargs = len(SAMPLES[name][i].args)
    return {
        "op": name,
        "sample": i,
        "dtype": draw(st.sampled_from(["float32", "float64"])),
        "layouts": draw(st.lists(st.sampled_from(layouts), min_size=nargs, max_size=nargs)),
        "seed": draw(st.integers(0, 2**16)),
    }


@st.composite
def shape_cases(draw, layouts=LAYOUTS):
    """An elementwise op on new (mutually broadcastable) shapes; gradcheck in float64."""
    name = draw(st.sampled_from(SHAPE_OPS))
    i = _shape_sample(name)
    nargs = len(SAMPLES[name][i].args)
    shapes = draw(
        mutually_broadcastable_shapes(num_shapes=nargs, min_dims=0, max_dims=3, max_side=4)
    )
    dtype = draw(st.sampled_from(["float32", "float64"]))
    return {
        "op": name,
        "sample": i,
        "dtype": dtype,
        "layouts": draw(st.lists(st.sampled_from(layouts), min_size=nargs, max_size=nargs)),
        "seed": draw(st.integers(0, 2**16)),
        "shapes": [list(s) for s in shapes.input_shapes],
        "gradcheck": dtype == "float64",
    }


def fuzz_settings(max_examples: int):
    """Reproducible in CI: derandomized, no example database, no deadline on a busy machine."""
    return settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


# Everything that writes into a tensor's memory: the in-place ops and the optimizer steps.
WRITERS = {
    "add_": lambda t: t.add_(0.5),
    "sub_": lambda t: t.sub_(0.25),
    "mul_": lambda t: t.mul_(1.5),
    "div_": lambda t: t.div_(2.0),
    "clamp_": lambda t: t.clamp_(0.8, 1.6),
    "fill_": lambda t: t.fill_(3.0),
    "zero_": lambda t: t.zero_(),
}
OPTIMIZERS = {
    "sgd": lambda ps: ferro.optim.SGD(ps, lr=0.1, weight_decay=0.01),
    "sgd_nesterov": lambda ps: ferro.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
    "adam": lambda ps: ferro.optim.Adam(ps, lr=0.1),
    "adamw": lambda ps: ferro.optim.AdamW(ps, lr=0.1, weight_decay=0.1),
    "rmsprop": lambda ps: ferro.optim.RMSprop(ps, lr=0.1, momentum=0.5, centered=True),
    "adagrad": lambda ps: ferro.optim.Adagrad(ps, lr=0.1),
}


def _write(name: str, t, grad) -> None:
    if name in WRITERS:
        WRITERS[name](t)
        return
    t.requires_grad_(True)
    t.grad = grad
    opt = OPTIMIZERS[name]([t])
    opt.step()
    opt.step()  # the second step reads and writes the state the first one made


def check_write_case(case: dict) -> str:
    """An in-place op, or two optimizer steps, on a tensor over a layout. The result equals the
    contiguous layout's and shows in the array the tensor shares (``from_numpy`` does not copy).
    Memory that is not writeable is never written: the write is refused with a FerroError (and
    changes nothing), or the data was copied at the boundary."""
    layout, dtype = case["layout"], np.dtype(case["dtype"])
    rng = np.random.default_rng(case["seed"])
    view = make_layout(rng.uniform(0.5, 2.0, (3, 4)).astype(dtype), layout)
    saved = view.copy()
    # The gradient shares the layout, but must have the parameter's dtype: native order.
    glayout = "contiguous" if layout == "byteswapped" else layout
    gview = make_layout(rng.uniform(-1.0, 1.0, (3, 4)).astype(dtype), glayout)

    ref = ferro.from_numpy(_native(view))
    _write(case["write"], ref, ferro.from_numpy(_native(gview)))
    want = ref.detach().numpy()

    try:
        t = _tensor(view, layout, False)
    except Refused as exc:
        return f"refused: {exc}"
    try:
        grad = _tensor(gview, glayout, False)
    except Refused:
        grad = ferro.from_numpy(_native(gview))
    shared = np.shares_memory(t._data, view)
    before = t.detach().numpy().copy()
    try:
        _write(case["write"], t, grad)
    except FerroError as exc:
        assert layout in READ_ONLY_MEMORY, f"{case['write']} refused writeable memory: {exc!r}"
        np.testing.assert_array_equal(view, saved, err_msg="a refused write changed the array")
        np.testing.assert_array_equal(t.detach().numpy(), before, err_msg="refused, yet changed")
        return f"refused: {type(exc).__name__}: {exc}"
    if layout in READ_ONLY_MEMORY:
        np.testing.assert_array_equal(view, saved, err_msg="wrote into read-only memory")
    got = t.detach().numpy()
    assert t.dtype == dtype, f"dtype {t.dtype} after {case['write']}, expected native {dtype}"
    np.testing.assert_allclose(got, want, **tolerances(dtype), err_msg="layout vs contiguous")
    if shared and layout not in READ_ONLY_MEMORY:
        np.testing.assert_array_equal(view, got, err_msg="the shared array misses the write")
    return "pass"


def sweep_cases(layout: str) -> list[dict]:
    """Every entry and sample of the op database, in float32 and float64, in one layout."""
    return [
        {
            "op": name,
            "sample": i,
            "dtype": dtype,
            "layouts": [layout] * len(sample.args),
            "seed": i,
        }
        for name, samples in sorted(SAMPLES.items())
        for i, sample in enumerate(samples)
        for dtype in ("float32", "float64")
    ]


def write_cases(layout: str) -> list[dict]:
    """Every in-place op and optimizer, in float32 and float64, on one layout."""
    return [
        {"write": name, "layout": layout, "dtype": dtype, "seed": k}
        for k, name in enumerate([*WRITERS, *OPTIMIZERS])
        for dtype in ("float32", "float64")
    ]


def _announce(case: dict) -> None:
    print("CASE " + json.dumps(case), flush=True)


def _run_all(cases_, check) -> int:
    """Run every case, printing each before it runs and each failure after: the failure count."""
    failures = 0
    for case in cases_:
        _announce(case)
        try:
            result = check(case)
        except Exception as exc:  # the worker reports every failure, then exits non-zero
            failures += 1
            msg = " ".join(f"{type(exc).__name__}: {exc}".split())
            print(f"FAIL {json.dumps(case)} {msg[:800]}", flush=True)
        else:
            print(result.split(":")[0].upper(), flush=True)
    return failures


def _fuzz(strategy, max_examples: int) -> None:
    @fuzz_settings(max_examples)
    @given(case=strategy)
    def run(case):
        _announce(case)
        check_case(case)

    run()


def main(argv: list[str]) -> int:
    """``sweep LAYOUT``, ``writes LAYOUT``, ``fuzz N``, ``shapes N``, ``case JSON`` (one case,
    as a failure or a crash report printed it) or ``selftest-crash``."""
    command, arg = argv[0], argv[1] if len(argv) > 1 else ""
    failures = 0
    if command == "case":
        case = json.loads(arg)
        failures = _run_all([case], check_write_case if "write" in case else check_case)
    elif command == "sweep":
        failures = _run_all(sweep_cases(arg), check_case)
    elif command == "writes":
        failures = _run_all(write_cases(arg), check_write_case)
    elif command == "fuzz":
        _fuzz(cases(), int(arg))
    elif command == "shapes":
        _fuzz(shape_cases(), int(arg))
    elif command == "selftest-crash":
        # Checks the parent's crash report: die by a signal right after announcing a case.
        _announce({"op": "selftest", "sample": 0})
        os.kill(os.getpid(), signal.SIGSEGV)
    else:
        raise SystemExit(f"unknown command {command!r}")
    print(f"DONE {failures} failures", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    import faulthandler

    faulthandler.enable()
    sys.exit(main(sys.argv[1:]))
