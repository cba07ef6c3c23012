"""Note [Two-core elementwise ops]: from TWO_CORE_MIN elements add, sub, mul, div (and their
in-place forms, mul's gradients, the sum of all elements, row means, copies of views) run as
OpenMP loops. Their results
must be NumPy's bit for bit, and everything they do not take must still go to NumPy."""

import os
import subprocess
import sys

import numpy as np
import pytest

import ferro
from ferro._C import cpu_kernels as K
from ferro.errors import ReadOnlyError

N = K.TWO_CORE_MIN + 37  # above the threshold, not a multiple of the chunk
UFUNCS = (np.add, np.subtract, np.multiply, np.true_divide)


def _data(dtype, n=N, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=n).astype(dtype)
    b = rng.normal(size=n).astype(dtype)
    a[::11] = 0.0
    b[::7] = 0.0  # x / 0 and 0 / 0
    a[5], b[6], a[8] = np.inf, -np.inf, np.nan
    a[9] = np.finfo(dtype).max  # overflow in + and *
    b[9] = 4.0
    return a, b


def _same_bits(x, y):
    assert x.dtype == y.dtype and x.shape == y.shape
    assert np.array_equal(x.view(f"u{x.itemsize}"), y.view(f"u{y.itemsize}"))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", range(4))
def test_binary_is_numpy_bit_for_bit(dtype, op):
    a, b = _data(dtype)
    f = UFUNCS[op]
    with np.errstate(all="ignore"):
        _same_bits(K.binary(op, a, b, None, 1.0), f(a, b))
        for number in (0.1, 3, -2.5e-3, float("inf")):
            _same_bits(K.binary(op, a, number, None, 1.0), f(a, number))
        # one value broadcast with stride 0 (the gradient of .sum()), on either side
        g = np.broadcast_to(dtype(1.5), a.shape)
        _same_bits(K.binary(op, a, g, None, 1.0), f(a, g))
        got = K.binary(op, g, b, None, 1.0)
        if op in (0, 2):  # commutative: taken with the operands swapped
            _same_bits(got, f(g, b))
        else:
            assert got is NotImplemented


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", [0, 1])
def test_binary_alpha_is_numpys_two_ufuncs(dtype, op):
    a, b = _data(dtype)
    want = UFUNCS[op](a, b * 0.37)
    _same_bits(K.binary(op, a, b, None, 0.37), want)
    out = a.copy()
    _same_bits(K.binary(op, out, b, out, 0.37), want)  # in place
    assert K.binary(2, a, b, None, 0.37) is NotImplemented  # alpha only scales add and sub
    assert K.binary(op, a, 2.0, None, 0.37) is NotImplemented  # a number is scaled by the caller


def test_binary_refuses_what_numpy_must_run():
    a, b = _data(np.float32)
    small = np.ones(K.TWO_CORE_MIN - 1, np.float32)
    refused = [
        (0, small, small, None),  # below the threshold
        (0, a, b.astype(np.float64), None),  # mixed dtypes
        (0, a.astype(np.float16), b.astype(np.float16), None),
        (0, a.astype(a.dtype.newbyteorder()), b, None),
        (0, a[::-1], b, None),  # strided
        (0, a, b[:-1], None),  # other shape
        (0, a.reshape(1, -1), b[:1], None),  # broadcasting other than one value
        (0, a, np.float32(2.0), None),  # NumPy scalars promote by NumPy's rules
        (0, a, np.array(2.0, np.float32), None),  # a 0-d array
        (0, a, 1e300, None),  # a number beyond float32's range
        (0, a, 1 << 60, None),  # an int not exact in double
        (0, a, True, None),
        (4, a, b, None),  # not an op
        (0, np.ones(N, np.int64), np.ones(N, np.int64), None),
        (0, np.empty((0, N), np.float32), np.empty((0, N), np.float32), None),
    ]
    for op, x, y, out in refused:
        assert K.binary(op, x, y, out, 1.0) is NotImplemented


def test_binary_out_checks_and_overlap():
    a, b = _data(np.float32)
    for out in (
        np.empty(N, np.float64),  # another dtype
        np.zeros(4 * N + 1, np.uint8)[1:].view(np.float32),  # misaligned
        np.empty(2 * N, np.float32)[::2],  # strided
        np.empty(N + 1, np.float32),  # another shape
        [0.0] * 3,
    ):
        assert K.binary(0, a, b, out, 1.0) is NotImplemented
    ro = np.zeros(N, np.float32)
    ro.setflags(write=False)
    assert K.binary(0, a, b, ro, 1.0) is NotImplemented
    assert not ro.any()
    # out overlapping an input other than exactly: NumPy's buffered path, not the loop
    base = np.arange(N + 1, dtype=np.float32)
    assert K.binary(1, base[1:], b, base[:-1], 1.0) is NotImplemented
    assert K.binary(1, b, base[:-1], base[1:], 1.0) is NotImplemented
    g = np.broadcast_to(base[3:4], (N,))  # one value that out would overwrite
    assert K.binary(1, base[:-1], g, base[:-1], 1.0) is NotImplemented
    # exactly in place, either operand
    x = a.copy()
    _same_bits(K.binary(1, x, b, x, 1.0), a - b)
    y = b.copy()
    _same_bits(K.binary(1, a, y, y, 1.0), a - b)
    z = a.copy()
    _same_bits(K.binary(1, z, z, z, 1.0), a - a)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_ops_through_ferro_match_numpy(dtype):
    a_np, b_np = _data(dtype)
    a_np[[5, 8, 9]] = 1.0
    b_np[::7] = 1.0
    a = ferro.from_numpy(a_np.copy()).requires_grad_()
    b = ferro.from_numpy(b_np.copy()).requires_grad_()
    c = ferro.from_numpy(b_np[::-1].copy()).requires_grad_()
    y = a * b + c
    _same_bits(y.detach().numpy(), a_np * b_np + b_np[::-1])
    _same_bits((a - b).detach().numpy(), a_np - b_np)
    _same_bits((a / b).detach().numpy(), a_np / b_np)
    _same_bits((2.5 * a).detach().numpy(), 2.5 * a_np)
    y.sum().backward()
    _same_bits(a.grad.numpy(), np.broadcast_to(dtype(1), b_np.shape) * b_np)
    _same_bits(b.grad.numpy(), a_np * dtype(1))
    _same_bits(c.grad.numpy(), np.ones_like(b_np))
    a.grad = b.grad = None
    (a / b).mean().backward()  # the reference classes (Div) take the same path
    g = np.broadcast_to(dtype(1) / dtype(a_np.size), a_np.shape)
    _same_bits(a.grad.numpy(), g / b_np)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_inplace_ops_match_numpy(dtype):
    p_np, g_np = _data(dtype)
    p_np[[5, 8, 9]] = 1.0
    p, g = ferro.from_numpy(p_np.copy()), ferro.from_numpy(g_np.copy())
    want = p_np.copy()
    with ferro.no_grad():
        p.sub_(g, alpha=0.01)
        want -= g_np * 0.01
        _same_bits(p.numpy(), want)
        p.add_(g)
        want += g_np
        p *= 1.5
        want *= 1.5
        p.add_(3.0, alpha=2)
        want += 3.0 * 2
        p.div_(g.abs() + 1)
        want /= np.abs(g_np) + 1
    _same_bits(p.numpy(), want)
    # an operand overlapping the tensor, reversed: NumPy's copy-first path
    q_np = np.arange(N, dtype=dtype)
    q = ferro.from_numpy(q_np.copy())
    with ferro.no_grad():
        q.sub_(q[::-1])
    _same_bits(q.numpy(), q_np - q_np[::-1])
    r = ferro.from_numpy(q_np.copy())
    with ferro.no_grad():
        r.sub_(r)
    assert not r.numpy().any()


def test_inplace_on_read_only_memory_still_refused():
    arr = np.ones(N, np.float32)
    arr.setflags(write=False)
    t = ferro.from_numpy(arr)
    with ferro.no_grad(), pytest.raises(ReadOnlyError):
        t.sub_(ferro.ones(N))
    assert (arr == 1).all()


def test_sum_all_is_as_accurate_as_numpy():
    rng = np.random.default_rng(3)
    for dtype in (np.float32, np.float64):
        x = (rng.normal(size=N) + 1e3 * (rng.random(N) > 0.999)).astype(dtype)
        exact = np.sum(x.astype(np.longdouble))
        got, ref = K.sum_all(x), np.add.reduce(x)
        assert got.shape == () and got.dtype == dtype
        eps = np.finfo(dtype).eps
        assert abs(float(got) - float(exact)) <= max(
            abs(float(ref) - float(exact)), 2 * eps * abs(float(exact))
        )
        assert float(ferro.from_numpy(x).sum()) == float(got)
    assert K.sum_all(x[::2]) is NotImplemented
    assert K.sum_all(x[: K.TWO_CORE_MIN - 1]) is NotImplemented
    assert K.sum_all(x.astype(np.int64)) is NotImplemented


def _same_output_on_1_to_3_threads(code):
    outs = set()
    for threads in ("1", "2", "3"):
        env = dict(os.environ, OMP_NUM_THREADS=threads)
        run = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        outs.add(run.stdout)
    assert len(outs) == 1


def test_sum_all_does_not_depend_on_the_thread_count():
    code = (
        "import numpy as np, ferro; from ferro._C import cpu_kernels as K;"
        f"x = np.random.default_rng(5).normal(size={3 * N}).astype(np.float32);"
        "print(K.sum_all(x).tobytes().hex(), K.sum_all(x.astype(np.float64)).tobytes().hex())"
    )
    _same_output_on_1_to_3_threads(code)


def _views(dtype):
    """Views of every kind a gradient arrives as: broadcast (one value, one row, one column),
    transposed, strided, reversed, with size-1 dims, and plain."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(16, 8, 96, 96)).astype(dtype)  # 1.2M elements
    yield x
    yield np.broadcast_to(dtype(2.5), (1200, 1000))
    yield np.broadcast_to(x[:, :, :1], x.shape)
    yield np.broadcast_to(x[:1, :1, :, :1], (16, 8, 96, 96))
    yield x.transpose(0, 3, 1, 2)
    yield x[:, ::2, :, ::-1].repeat(2, axis=0)[..., None, :]
    yield x[::-1, :, 1:-1]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_materialize_copies_any_view_bit_for_bit(dtype):
    for v in _views(dtype):
        got = K.materialize(v)
        assert got.flags.c_contiguous and got.flags.writeable and got.shape == v.shape
        _same_bits(got, np.ascontiguousarray(v))
        assert not np.shares_memory(got, v)
    x = np.zeros(N, dtype)
    for refused in (x[: K.TWO_CORE_MIN - 1], x.astype(np.float16), x.astype(">f8"), [0.0]):
        assert K.materialize(refused) is NotImplemented
    raw = np.zeros(N * 8 + 1, np.uint8)[1:].view(np.float64)
    assert K.materialize(raw) is NotImplemented  # misaligned


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_sums_are_accurate_means(dtype):
    rng = np.random.default_rng(6)
    x = (rng.normal(size=(2048, 600)) + 1e3 * (rng.random((2048, 600)) > 0.999)).astype(dtype)
    got = K.row_sums(x, 1 / 600)
    exact = x.astype(np.longdouble).sum(axis=1) / 600
    ref = x.mean(axis=1)
    eps = np.finfo(dtype).eps
    err, ref_err = np.abs(got - exact), np.abs(ref.astype(np.longdouble) - exact)
    assert got.dtype == dtype and got.shape == (2048,)
    assert (err <= np.maximum(ref_err, 2 * eps * np.abs(exact) + eps)).all()
    for refused in (x[:, ::2], x[:100], x.ravel(), x.astype(np.float16)):
        assert K.row_sums(refused, 1.0) is NotImplemented


def test_row_sums_and_materialize_do_not_depend_on_the_thread_count():
    code = (
        "import numpy as np, ferro; from ferro._C import cpu_kernels as K;"
        "x = np.random.default_rng(5).normal(size=(3000, 700)).astype(np.float32);"
        "print(K.row_sums(x, 0.25).tobytes().hex()[:4000],"
        " K.materialize(x.T).tobytes().hex()[-4000:])"
    )
    _same_output_on_1_to_3_threads(code)


def test_a_large_broadcast_gradient_becomes_an_array_of_its_own():
    # Note [Two-core elementwise ops]: the gradient of a sum, a view of one value, becomes the
    # leaf's .grad through cpu_kernels.materialize (a fresh C-contiguous array).
    x = ferro.zeros(N, requires_grad=True)
    x.sum().backward()
    g = x.grad.numpy()
    assert g.flags.c_contiguous and g.flags.writeable and (g == 1).all()
    g[0] = 5.0  # its own memory
    y = ferro.zeros(N, requires_grad=True)
    y.sum().backward()
    assert float(y.grad[0]) == 1.0


@pytest.fixture
def streaming():
    # Note [Streaming stores]: every output the caller marks as a leaf's gradient streamed
    prev = K.set_stream_min(1)
    yield
    K.set_stream_min(prev)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_streamed_outputs_are_the_same_bits(dtype, streaming):
    a, b = _data(dtype)
    g = np.broadcast_to(dtype(1.5), a.shape)
    with np.errstate(all="ignore"):
        for op in range(4):
            _same_bits(K.binary(op, a, b, None, 1.0, stream=True), UFUNCS[op](a, b))
            _same_bits(K.binary(op, a, 0.1, None, 1.0, stream=True), UFUNCS[op](a, 0.1))
        _same_bits(K.binary(2, g, b, None, 1.0, stream=True), g * b)
        _same_bits(K.binary(1, a, b, None, 0.5, stream=True), a - 0.5 * b)
    for v in _views(dtype):
        _same_bits(K.materialize(v, True), np.ascontiguousarray(v))
    # a size that is no multiple of a vector, a piece or a chunk: the unaligned tail
    n = K.TWO_CORE_MIN + 1027
    x = np.arange(n, dtype=dtype)
    _same_bits(K.binary(0, x, 1.0, None, 1.0, stream=True), x + 1.0)
    _same_bits(K.materialize(x[::-1], True), x[::-1].copy())


def test_streamed_leaf_gradients_are_the_same_bits(streaming):
    # (a*b + c).sum(): a's and b's gradients (mul's, for leaves) and c's (a broadcast view made
    # the leaf's .grad) are streamed; the same bits as with streaming off
    rng = np.random.default_rng(9)
    vals = [rng.normal(size=N).astype(np.float32) for _ in range(3)]

    def grads():
        a, b, c = (ferro.from_numpy(v.copy()).requires_grad_() for v in vals)
        (a * b + c).sum().backward()
        return [t.grad.numpy().copy() for t in (a, b, c)]

    on = grads()
    K.set_stream_min(0)
    off = grads()
    for x, y in zip(on, off, strict=True):
        _same_bits(x, y)
    _same_bits(on[0], vals[1])
    assert (on[2] == 1).all()


def test_stream_min_comes_from_the_environment():
    code = "from ferro._C import cpu_kernels as K; print(K.set_stream_min(0))"
    env = dict(os.environ, FERRO_STREAM_MIN="12345")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["12345"], out.stderr
