"""The compiled kernels and the optimizers write only into memory they may write, and read only
arrays laid out as their loops assume (issue 11, items 2 and 3).

Each kernel in ``ferro._C.cpu_kernels`` is called directly with one argument spoiled at a time
(read-only, non-native byte order, misaligned, strided, wrong dtype, wrong shape, not an array):
it must raise the typed error that says so and leave every array as it was. The optimizers must
refuse a step on read-only memory before they change anything; the crash that started this (a
read-only memory map) runs in a subprocess, so a segfault fails the test instead of killing it.
"""

import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ferro
from ferro._C import cpu_kernels as K
from ferro._C.tensor import wrap
from ferro.errors import (
    ArgumentError,
    ArgumentTypeError,
    DtypeError,
    ReadOnlyError,
    ShapeError,
)
from ferro.ops.fused import overrides
from ferro.optim import SGD, Adagrad, Adam, AdamW, RMSprop

F32 = np.float32


# --- spoiled copies of an array: same values, another memory layout --------------------------


def read_only(a):
    out = a.copy()
    out.setflags(write=False)
    return out


def non_native(a):
    return a.astype(a.dtype.newbyteorder())


def misaligned(a):
    raw = np.zeros(a.nbytes + 1, np.uint8)[1:]
    out = raw.view(a.dtype).reshape(a.shape)
    out[...] = a
    assert not out.flags.aligned
    return out


def strided(a):
    out = np.zeros(a.shape + (2,), a.dtype)[..., 0]
    out[...] = a
    return out


def int64(a):
    return a.astype(np.int64)


def transposed_shape(a):
    return np.ascontiguousarray(a.reshape(a.shape[::-1]))


def as_list(a):
    return a.tolist()


# How each spoiled array must be refused. A read-only array is refused only where the kernel
# writes; where it only reads, the kernel must accept it (checked below).
SPOILERS = {
    "non_native": (non_native, DtypeError),
    "misaligned": (misaligned, ArgumentError),
    "strided": (strided, ArgumentError),
    "int64": (int64, DtypeError),
    "other_shape": (transposed_shape, ShapeError),
    "list": (as_list, ArgumentTypeError),
}


def _state(n, rng):
    return [rng.uniform(0.1, 1.0, (3, 4)).astype(F32) for _ in range(n)]


# name: (number of arrays, positions the kernel writes, call taking those arrays)
KERNELS = {
    "tanh_bwd": (2, (), lambda a: K.tanh_bwd(*a)),
    "sigmoid_bwd": (2, (), lambda a: K.sigmoid_bwd(*a)),
    "relu_bwd": (2, (), lambda a: K.relu_bwd(*a)),
    "leaky_relu_bwd": (2, (), lambda a: K.leaky_relu_bwd(*a, 0.1)),
    "gelu_bwd": (2, (), lambda a: K.gelu_bwd(*a)),
    "silu_bwd": (3, (), lambda a: K.silu_bwd(*a)),
    "gelu_fwd": (1, (), lambda a: K.gelu_fwd(*a)),
    "softmax_bwd": (2, (), lambda a: K.softmax_bwd(*a)),
    "all_finite": (1, (), lambda a: K.all_finite(*a)),
    "sgd_update": (3, (0, 2), lambda a: K.sgd_update(*a, 0.1, 0.9, 0.0, 0.01, False, False)),
    "adam_update": (
        4,
        (0, 2, 3),
        lambda a: K.adam_update(*a, 0.1, 0.9, 0.99, 1e-8, 0.01, True, 0.1, 0.01),
    ),
    "rmsprop_update": (
        5,
        (0, 2, 3, 4),
        lambda a: K.rmsprop_update(*a, 0.01, 0.99, 1e-8, 0.01, 0.9, True),
    ),
    "adagrad_update": (3, (0, 2), lambda a: K.adagrad_update(*a, 0.1, 1e-10, 0.01)),
}


def _snapshot(arrays):
    return [a.tobytes() if isinstance(a, np.ndarray) else a for a in arrays]


def _cases():
    for name, (n, writes, _) in KERNELS.items():
        for pos in range(n):
            for spoil in SPOILERS:
                if spoil == "other_shape" and n == 1:
                    continue  # one array has no other array to disagree with
                yield pytest.param(name, pos, spoil, id=f"{name}-arg{pos}-{spoil}")
            if pos in writes:
                yield pytest.param(name, pos, "read_only", id=f"{name}-arg{pos}-read_only")


@pytest.mark.parametrize("name, pos, spoil", list(_cases()))
def test_kernel_refuses_a_spoiled_array_and_writes_nothing(name, pos, spoil):
    n, _, call = KERNELS[name]
    arrays = _state(n, np.random.default_rng(pos))
    if spoil == "read_only":
        make, error = read_only, ReadOnlyError
    else:
        make, error = SPOILERS[spoil]
    arrays[pos] = make(arrays[pos])
    before = _snapshot(arrays)
    with pytest.raises(error, match=name.split("(")[0]):
        call(arrays)
    assert _snapshot(arrays) == before


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kernel_accepts_read_only_inputs_it_only_reads(name):
    n, writes, call = KERNELS[name]
    arrays = _state(n, np.random.default_rng(0))
    want_arrays = [a.copy() for a in arrays]
    want = call(want_arrays)
    for pos in range(n):
        if pos not in writes:
            arrays[pos] = read_only(arrays[pos])
    got = call(arrays)
    for a, b in zip(
        [got] if not isinstance(got, tuple) else got,
        [want] if not isinstance(want, tuple) else want,
        strict=True,
    ):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(arrays, want_arrays, strict=True):  # in-place updates agree too
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dst_spoil", [non_native, misaligned, strided], ids=lambda f: f.__name__)
@pytest.mark.parametrize(
    "src_spoil", [non_native, misaligned, strided, read_only], ids=lambda f: f.__name__
)
def test_add_inplace_adds_any_layout_through_numpy(dst_spoil, src_spoil):
    # Only what the loop cannot index goes to NumPy; the sum is the same either way.
    rng = np.random.default_rng(0)
    dst = dst_spoil(rng.normal(size=(3, 4)).astype(F32))
    src = src_spoil(rng.normal(size=(3, 4)).astype(F32))
    want = dst + src
    K.add_inplace(dst, src)
    np.testing.assert_array_equal(dst, want)


@pytest.mark.parametrize(
    "dst, src, error",
    [
        (read_only(np.ones(3)), np.ones(3), ReadOnlyError),
        (np.ones(3, np.int64), np.ones(3, np.int64), DtypeError),
        (np.ones(3), np.ones(3, F32), DtypeError),
        (np.ones((2, 3)), np.ones((3, 2)), ShapeError),
        (np.ones(3), [1.0, 1.0, 1.0], ArgumentTypeError),
        (None, np.ones(3), ArgumentTypeError),
    ],
    ids=["read_only", "int64", "mixed", "other_shape", "list", "none"],
)
def test_add_inplace_refuses_and_writes_nothing(dst, src, error):
    before = _snapshot([dst])
    with pytest.raises(error, match="add_inplace"):
        K.add_inplace(dst, src)
    assert _snapshot([dst]) == before


def test_leaf_receiving_several_transposed_gradients():
    # The engine owns the out-of-place sum of two F-ordered gradients and adds the third into it
    # in place; add_inplace used to refuse that destination, failing the whole backward.
    x = ferro.randn(3, 4, requires_grad=True)
    w = ferro.randn(4, 3)
    ((x.T * w).sum() + (x.T * w).sum() + (x.T * w).sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), 3 * w.numpy().T, rtol=1e-6)


def test_add_inplace_with_a_source_overlapping_the_destination():
    # The loop would read elements it already wrote; NumPy's add buffers the overlap.
    buf = np.arange(8, dtype=F32)
    dst, src = buf[2:], buf[:6]
    want = dst + src
    K.add_inplace(dst, src)
    np.testing.assert_array_equal(dst, want)


@pytest.mark.parametrize("spoil", [non_native, misaligned])
def test_sum_to_shape_refuses_what_its_loop_cannot_read(spoil):
    src = spoil(np.arange(6, dtype=F32).reshape(2, 3))
    with pytest.raises((DtypeError, ArgumentError), match="sum_to_shape"):
        K.sum_to_shape(src, (3,))


def test_sum_to_shape_reads_any_strides():
    src = np.arange(24, dtype=F32).reshape(4, 6)[::-2, ::3]
    np.testing.assert_array_equal(K.sum_to_shape(src, (1, 2)), src.sum(0, keepdims=True))


def test_kernels_refuse_non_native_order_instead_of_reading_it_as_native():
    x = np.array([0.84, -1.5, np.inf], dtype=">f4")
    with pytest.raises(DtypeError, match="byte order"):
        K.gelu_fwd(x)
    with pytest.raises(DtypeError, match="byte order"):
        K.all_finite(x)  # its exponent-bit test would miss the Inf
    with pytest.raises(DtypeError, match="byte order"):
        K.tanh_bwd(x, np.ones(3, F32))
    assert not K.accepts((x,)) and not K.supports(x)
    assert not K.accepts_grad(x, (np.ones(3, F32),))


def test_backward_kernels_refuse_a_gradient_they_cannot_read_and_take_a_broadcast_one():
    y = np.full((3, 4), 0.5, F32)
    for gy, error in [
        (np.ones((4, 3), F32).T, ArgumentError),  # strided, and not one value
        (np.broadcast_to(np.arange(4, dtype=F32), (3, 4)), ArgumentError),
        (np.ones((3, 4), F32).astype(">f4"), DtypeError),
        (misaligned(np.ones((3, 4), F32)), ArgumentError),
        (np.ones((3, 4)), DtypeError),
        (np.ones((4, 3), F32), ShapeError),
        (np.ones((3, 4), F32).tolist(), ArgumentTypeError),
    ]:
        with pytest.raises(error, match="tanh_bwd: gy"):
            K.tanh_bwd(gy, y)
    one = np.broadcast_to(np.asarray(2.0, F32), (3, 4))  # .sum()'s gradient: read, not refused
    np.testing.assert_array_equal(K.tanh_bwd(one, y), np.full((3, 4), 2.0 * 0.75, F32))


# --- gelu over big-endian data, through the public op ---------------------------------------


def _gelu(v):
    return v * 0.5 * (1 + math.erf(v / math.sqrt(2)))


@pytest.mark.parametrize("make", [ferro.tensor, wrap], ids=["tensor", "wrap"])
def test_gelu_of_big_endian_data_is_right(make):
    # The fused kernel used to read ">f4" bytes as little-endian: gelu(0.84) gave 1.6e-19.
    # ``wrap`` is the internal path that keeps the array as it is, whatever creation does.
    values = [0.84, -1.3, 2.0]
    y = ferro.gelu(make(np.array(values, dtype=">f4")))
    np.testing.assert_allclose(y.numpy(), [_gelu(v) for v in values], rtol=1e-6)


# --- optimizers -----------------------------------------------------------------------------

CONFIGS = [
    (SGD, dict(lr=0.1)),
    (SGD, dict(lr=0.1, momentum=0.9)),
    (Adam, dict(lr=0.01)),
    (AdamW, dict(lr=0.01)),
    (RMSprop, dict(lr=0.01, momentum=0.9, centered=True)),
    (Adagrad, dict(lr=0.1)),
]
IDS = [f"{c.__name__}-{'momentum' if kw.get('momentum') else 'plain'}" for c, kw in CONFIGS]


def _frombuffer_param(values):
    # np.frombuffer over bytes is read-only memory the fused kernels used to write anyway.
    raw = np.asarray(values, F32).tobytes()
    return ferro.from_numpy(np.frombuffer(raw, dtype=F32)).requires_grad_(), raw


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "generic"])
@pytest.mark.parametrize("cls, kw", CONFIGS, ids=IDS)
def test_step_on_read_only_parameter_raises_and_changes_nothing(cls, kw, fused):
    a = ferro.from_numpy(np.ones(4, F32)).requires_grad_()
    b, raw = _frombuffer_param([1.0, 2.0, 3.0])
    a_data, b_data = a._data, b._data
    opt = cls([a, b], **kw)
    a.grad = ferro.from_numpy(np.full(4, 0.5, F32))
    with overrides(fused):
        opt.step()  # b has no gradient yet: only a moves
        a_after_one = a._data.copy()
        state_after_one = {k: np.copy(v) for k, v in opt.state[a].items()}
        b.grad = ferro.from_numpy(np.ones(3, F32))
        with pytest.raises(ReadOnlyError, match=rf"{cls.__name__}\.step: parameter 1 .*\(3,\)"):
            opt.step()
    # Checked before anything moved: a, its state and its step count are as after one step.
    np.testing.assert_array_equal(a._data, a_after_one)
    assert opt.state[a].keys() == state_after_one.keys()
    for k, v in opt.state[a].items():
        np.testing.assert_array_equal(v, state_after_one[k])
    assert b not in opt.state
    assert np.frombuffer(raw, F32).tolist() == [1.0, 2.0, 3.0] == b._data.tolist()
    assert a._data is a_data and b._data is b_data  # updated in place, never rebound


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "generic"])
@pytest.mark.parametrize("cls, kw", CONFIGS[1:], ids=IDS[1:])
def test_step_with_read_only_state_raises_and_changes_nothing(cls, kw, fused):
    p = ferro.from_numpy(np.ones(4, F32)).requires_grad_()
    opt = cls([p], **kw)
    p.grad = ferro.from_numpy(np.full(4, 0.5, F32))
    with overrides(fused):
        opt.step()
        key = next(k for k, v in opt.state[p].items() if isinstance(v, np.ndarray))
        opt.state[p][key] = read_only(opt.state[p][key])
        before = p._data.copy(), {k: np.copy(v) for k, v in opt.state[p].items()}
        with pytest.raises(ReadOnlyError, match=f"parameter 0 .*{key}"):
            opt.step()
    np.testing.assert_array_equal(p._data, before[0])
    for k, v in opt.state[p].items():
        np.testing.assert_array_equal(v, before[1][k])


def test_step_refuses_a_gradient_of_another_shape_before_changing_anything():
    a = ferro.ones(2, requires_grad=True)
    b = ferro.ones(3, requires_grad=True)
    opt = Adam([a, b], lr=0.1)
    a.grad = ferro.ones(2)
    b.grad = ferro.ones(3)
    b.data = np.ones((3, 1), F32)  # allowed, as in PyTorch; b.grad no longer fits
    with pytest.raises(ShapeError, match=r"Adam\.step: parameter 1 .*\(3,\)"):
        opt.step()
    assert a.tolist() == [1.0, 1.0] and opt.state == {}


def test_zero_grad_in_place_refuses_a_read_only_gradient_before_clearing_any():
    a = ferro.ones(2, requires_grad=True)
    b = ferro.ones(2, requires_grad=True)
    a.grad = ferro.ones(2)
    b.grad = ferro.from_numpy(read_only(np.ones(2, F32)))
    opt = SGD([a, b], lr=0.1)
    with pytest.raises(ReadOnlyError, match="zero_grad: the gradient of parameter 1"):
        opt.zero_grad(set_to_none=False)
    assert a.grad.tolist() == [1.0, 1.0]
    opt.zero_grad()
    assert a.grad is None and b.grad is None


_MMAP_SCRIPT = textwrap.dedent(
    """
    import os, sys, tempfile
    import numpy as np
    import ferro
    from ferro._C import engine
    from ferro.errors import ReadOnlyError

    path = os.path.join(tempfile.mkdtemp(), "w.npy")
    np.save(path, np.ones((3, 4), np.float32))
    for fused in (True, False):
        engine.set_overrides_enabled(fused)
        for opt_name in ("SGD", "Adam"):
            # np.asarray(memmap) is a plain ndarray over the read-only mapping (what the engine
            # and the kernels see); the memmap itself is what from_numpy is handed.
            for arr in (np.asarray(np.load(path, mmap_mode="r")), np.load(path, mmap_mode="r")):
                p = ferro.from_numpy(arr).requires_grad_()
                if type(arr) is np.ndarray:
                    (p * 2.0).sum().backward()
                else:
                    p.grad = ferro.ones(3, 4)
                opt = getattr(ferro.optim, opt_name)([p], lr=0.1)
                try:
                    opt.step()
                except ReadOnlyError as e:
                    assert "parameter 0" in str(e) and "(3, 4)" in str(e), e
                else:
                    sys.exit("the step wrote into a read-only memory map")
                assert (np.load(path) == 1).all() and not opt.state
    print("refused")
    """
)


def test_optimizer_step_on_a_read_only_memory_map_raises_instead_of_crashing(tmp_path):
    # Used to die with SIGSEGV: the fused SGD kernel wrote into the read-only mapping.
    proc = subprocess.run(
        [sys.executable, "-c", _MMAP_SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}:\n{proc.stderr}"
    assert proc.returncode == 0 and proc.stdout.strip() == "refused", proc.stderr
