"""The resampling family's CUDA kernels (``ferro/cuda/kernels/resampling.cu``), through their
wrappers in ``ferro.cuda.resampling``, against the CPU kernels of the same names (which
tests/nn/test_resampling.py checks against the generic NumPy path): on a device where there is
one, and everywhere on the CPU emulation of tests/cuda/test_kernels.py."""

import sys
import types

import numpy as np
import pytest
import test_kernels as emu

import ferro
from ferro._C import resampling_kernels as cpu
from ferro.cuda import resampling as K
from ferro.errors import DtypeError, ShapeError

try:  # imported before the emulation's fixture puts a stand-in for CuPy in sys.modules
    import torch
    import torch.nn.functional as TF
except ImportError:  # the tests marked torch skip
    torch = TF = None


@pytest.fixture(params=["emu", pytest.param("cuda", marks=pytest.mark.gpu)])
def xp(request, monkeypatch):
    if request.param == "cuda":
        cp = pytest.importorskip("cupy")
        if not ferro.cuda.is_available():
            pytest.skip("no CUDA device")
        return cp
    lib = emu._emulator()
    if lib is None:
        pytest.skip("no g++ for the CPU emulation of the kernels")
    fake = types.SimpleNamespace(**vars(emu._FAKE_CUPY), asarray=np.asarray)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(
        K, "kernel", lambda name, expr: emu._EmuKernel(getattr(lib, emu._symbol(expr)))
    )
    return np


# (x shape, kernel, stride, padding, dilation, offset groups): odd sizes, groups, strides.
CASES = [
    ((2, 4, 5, 6), (3, 2), (2, 1), (1, 0), (1, 2), 2),
    ((1, 3, 4, 4), (3, 3), (1, 1), (1, 1), (1, 1), 1),
    ((1, 2, 3, 5), (1, 1), (1, 2), (0, 0), (1, 1), 2),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("with_mask", [False, True])
@pytest.mark.parametrize("case", CASES)
def test_deform_kernels_match_the_cpu_kernels(xp, dtype, with_mask, case):
    shape, kernel, stride, padding, dilation, og = case
    rng = np.random.default_rng(0)
    nb, cin, h, w = shape
    kh, kw = kernel
    ho = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (w + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    x = rng.standard_normal(shape).astype(dtype)
    off = rng.uniform(-2.5, 2.5, (nb, 2 * og * kh * kw, ho, wo)).astype(dtype)
    mask = rng.uniform(0, 1, (nb, og * kh * kw, ho, wo)).astype(dtype) if with_mask else None
    params = (kernel, stride, padding, dilation)
    d = [None if a is None else xp.asarray(a) for a in (x, off, mask)]
    cols = emu.host(K.deform_im2col(*d, *params))
    want = cpu.deform_im2col(x, off, mask, *params)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(cols, want, atol=tol)
    gcols = rng.standard_normal(want.shape).astype(dtype)
    got = K.deform_col2im(*d, xp.asarray(gcols), *params)
    for g, ref in zip(got, cpu.deform_col2im(x, off, mask, gcols, *params), strict=True):
        assert (g is None) == (ref is None)
        if ref is not None:
            np.testing.assert_allclose(emu.host(g), ref, atol=10 * tol)
    some = K.deform_col2im(*d, xp.asarray(gcols), *params, False, True, False)
    assert some[0] is None and some[2] is None
    np.testing.assert_allclose(emu.host(some[1]), emu.host(got[1]), atol=10 * tol)


def test_deform_kernel_wrappers_refuse_bad_input(xp):
    x = xp.asarray(np.zeros((1, 2, 4, 4)))
    off = xp.asarray(np.zeros((1, 18, 4, 4)))
    params = ((3, 3), (1, 1), (1, 1), (1, 1))
    with pytest.raises(DtypeError, match="one dtype"):
        K.deform_im2col(x, off.astype(np.float32), None, *params)
    with pytest.raises(ShapeError, match="does not fit"):
        K.deform_im2col(x, xp.asarray(np.zeros((1, 17, 4, 4))), None, *params)
    with pytest.raises(ShapeError, match="mask must have shape"):
        K.deform_im2col(x, off, xp.asarray(np.zeros((1, 9, 4, 3))), *params)
    with pytest.raises(ShapeError, match="gcols must be"):
        K.deform_col2im(x, off, None, xp.asarray(np.zeros((1, 18, 15))), *params)
    assert K.accepts((x, off)) and not K.accepts((x, off.astype(np.float32)))


class _Ctx:
    """A stand-in for the node the engine passes as ctx."""

    def __init__(self, xp, n_inputs):
        self.xp = xp
        self.needs_input_grad = (True,) * n_inputs
        self.saved = ()

    def save(self, *arrays):
        self.saved = arrays


@pytest.mark.parametrize("with_mask", [False, True])
def test_gpu_override_of_deform_conv2d_matches_the_generic_op(xp, with_mask):
    from ferro.ops.registry import REGISTRY

    op = REGISTRY["deform_conv2d"]
    assert op.gpu_forward is not None and op.gpu_paired
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 5, 5))
    off = rng.uniform(-1.5, 1.5, (2, 2 * 2 * 9, 3, 3))
    w = rng.standard_normal((6, 2, 3, 3))
    b = rng.standard_normal(6)
    rest = [b] + ([rng.uniform(0, 1, (2, 2 * 9, 3, 3))] if with_mask else [])
    params = {
        "geom": (2, 3, 3, 3, 3, (2, 2), (1, 1), (1, 1)),
        "groups": 2,
        "has_bias": True,
        "has_mask": with_mask,
    }
    arrays = [xp.asarray(a) for a in (x, off, w, *rest)]
    mine, ref = _Ctx(xp, len(arrays)), _Ctx(xp, len(arrays))
    got = op.gpu_forward(mine, *arrays, **params)
    want = op.forward(ref, *arrays, **params)
    np.testing.assert_allclose(emu.host(got), emu.host(want), atol=1e-12)
    for name, value in params.items():
        setattr(mine, name, value)
        setattr(ref, name, value)
    gy = xp.asarray(rng.standard_normal(tuple(want.shape)))[:, :, ::-1]  # made contiguous
    for g, r in zip(op.gpu_backward(mine, gy), op.backward(ref, gy), strict=True):
        np.testing.assert_allclose(emu.host(g), emu.host(r), atol=1e-11)


# ---- interpolate: resample_axis and the override ---------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, axis", [((3, 7, 5), 1), ((2, 3, 9), 2), ((4, 1), 0), ((6,), 0)])
def test_resample_axis_matches_a_plain_gather(xp, dtype, shape, axis):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(dtype)
    n_out, taps = 5, 3
    index = rng.integers(0, shape[axis], (taps, n_out))
    weight = rng.standard_normal((taps, n_out)).astype(dtype)
    want = 0
    for k in range(taps):
        bshape = [1] * x.ndim
        bshape[axis] = n_out
        want = want + np.take(x, index[k], axis=axis) * weight[k].reshape(bshape)
    got = K.resample_axis(xp.asarray(x), axis, xp.asarray(index), xp.asarray(weight))
    assert got.shape == want.shape and got.dtype == dtype
    tol = 1e-5 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(emu.host(got), want, rtol=tol, atol=tol)
    index[1, 2] = shape[axis]  # out of bounds: NaN, not a stray read
    got = emu.host(K.resample_axis(xp.asarray(x), axis, xp.asarray(index), xp.asarray(weight)))
    bad = np.zeros(want.shape, dtype=bool)
    bad[(slice(None),) * axis + (2,)] = True
    assert np.isnan(got[bad]).all() and np.isfinite(got[~bad]).all()


def test_resample_axis_refuses_bad_input(xp):
    x = xp.asarray(np.zeros((2, 3, 4)))
    idx = xp.asarray(np.zeros((2, 5), dtype=np.int64))
    w = xp.asarray(np.ones((2, 5)))
    with pytest.raises(DtypeError, match="one dtype"):
        K.resample_axis(x, 1, idx, w.astype(np.float32))
    with pytest.raises(DtypeError, match="int64"):
        K.resample_axis(x, 1, idx.astype(np.int32), w)
    with pytest.raises(ferro.errors.ArgumentError, match="axis 3"):
        K.resample_axis(x, 3, idx, w)
    with pytest.raises(ShapeError, match="taps"):
        K.resample_axis(x, 1, idx, w[:1])
    with pytest.raises(DtypeError, match="C-contiguous"):
        K.resample_axis(x.swapaxes(0, 2), 1, idx, w)
    assert K.resample_axis(x[:0], 1, idx, w).shape == (0, 5, 4)  # empty: no launch


# (mode, input shape, interpolate keywords): every mode, up and down, odd sizes, align_corners
# both ways, size or scale_factor.
_INTERP = [
    ("nearest", (2, 3, 7), {"scale_factor": 2.3}),
    ("nearest", (2, 3, 5, 4), {"size": (7, 3)}),
    ("nearest", (1, 2, 3, 4, 5), {"scale_factor": (2, 0.5, 1.5)}),
    ("nearest-exact", (2, 3, 7), {"size": 4}),
    ("nearest-exact", (2, 2, 5, 3), {"scale_factor": 1.7}),
    ("nearest-exact", (1, 2, 3, 4, 2), {"size": (5, 2, 3)}),
    ("area", (2, 3, 9, 5), {"size": (4, 3)}),
    ("linear", (2, 3, 5), {"scale_factor": 2.5}),
    ("linear", (2, 3, 9), {"size": 4, "align_corners": True}),
    ("bilinear", (2, 3, 5, 7), {"size": (9, 4)}),
    ("bilinear", (2, 3, 5, 7), {"scale_factor": (1.5, 0.6), "align_corners": True}),
    ("bilinear", (1, 1, 1, 3), {"size": (3, 1), "align_corners": True}),
    ("bicubic", (2, 3, 5, 6), {"scale_factor": 1.7}),
    ("bicubic", (2, 2, 7, 4), {"size": (3, 9), "align_corners": True}),
    ("trilinear", (1, 2, 3, 4, 5), {"scale_factor": 1.5}),
    ("trilinear", (2, 1, 5, 3, 4), {"size": (2, 6, 3), "align_corners": True}),
    ("bilinear", (2, 3, 300, 2), {"size": (301, 3)}),  # an axis past the generic's dense GEMM
]


def _interp_plan(mode, shape, kw):
    from ferro.ops.resampling import _interpolate_plan

    return _interpolate_plan(
        shape, kw.get("size"), kw.get("scale_factor"), mode, kw.get("align_corners"), None
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "case", _INTERP, ids=[f"{c[0]}-{len(c[1]) - 2}d-{i}" for i, c in enumerate(_INTERP)]
)
def test_interpolate_override_matches_the_generic_op(xp, dtype, case):
    from ferro.ops.registry import REGISTRY

    mode, shape, kw = case
    op = REGISTRY["interpolate"]
    assert op.gpu_forward is not None and op.gpu_paired
    rng = np.random.default_rng(4)
    x = xp.asarray(rng.standard_normal(shape).astype(dtype))
    plan = _interp_plan(mode, shape, kw)
    mine, ref = _Ctx(xp, 1), _Ctx(xp, 1)
    got = op.gpu_forward(mine, x, plan=plan)
    want = op.forward(ref, x, plan=plan)
    assert got.shape == want.shape and got.dtype == dtype
    tol = 2e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(emu.host(got), emu.host(want), rtol=tol, atol=tol)
    assert vars(mine).keys() == vars(ref).keys()  # the generic backward could follow it
    g = rng.standard_normal((*want.shape[:-1], 2 * want.shape[-1])).astype(dtype)
    gy = xp.asarray(g)[..., ::2]  # strided: made contiguous
    np.testing.assert_allclose(
        emu.host(op.gpu_backward(mine, gy)), emu.host(op.backward(ref, gy)), rtol=tol, atol=tol
    )


@pytest.mark.torch
@pytest.mark.parametrize("case", _INTERP[:-1], ids=[c[0] for c in _INTERP[:-1]])
def test_interpolate_kernels_match_torch(xp, case):
    from ferro.ops.registry import REGISTRY

    mode, shape, kw = case
    op = REGISTRY["interpolate"]
    rng = np.random.default_rng(5)
    x = rng.standard_normal(shape)
    xt = torch.tensor(x, requires_grad=True)
    yt = TF.interpolate(xt, mode=mode, **kw)
    gy = rng.standard_normal(tuple(yt.shape))
    yt.backward(torch.tensor(gy))
    ctx = _Ctx(xp, 1)
    y = op.gpu_forward(ctx, xp.asarray(x), plan=_interp_plan(mode, shape, kw))
    np.testing.assert_allclose(emu.host(y), yt.detach().numpy(), atol=1e-12)
    if mode != "nearest" or len(shape) == 4:  # PyTorch's 1-D/3-D nearest backward differs
        gx = op.gpu_backward(ctx, xp.asarray(gy))
        np.testing.assert_allclose(emu.host(gx), xt.grad.numpy(), atol=1e-12)


def test_interpolate_override_leaves_other_input_to_the_generic_op(xp):
    from ferro.ops.registry import REGISTRY

    op = REGISTRY["interpolate"]
    plan = _interp_plan("nearest", (1, 2, 3), {"size": 5})
    ints = xp.asarray(np.arange(6).reshape(1, 2, 3))
    assert op.gpu_forward(_Ctx(xp, 1), ints, plan=plan) is NotImplemented
    strided = xp.asarray(np.zeros((1, 2, 6)))[..., ::2]
    assert op.gpu_forward(_Ctx(xp, 1), strided, plan=plan) is NotImplemented


# ---- grid_sample -----------------------------------------------------------------------------

# (input shape, grid's output spatial shape): 4-D and 5-D, odd sizes, a size-1 dim.
_GRID = [((2, 3, 5, 4), (3, 6)), ((1, 2, 1, 3), (2, 2)), ((2, 2, 3, 4, 5), (2, 3, 2))]


def _grid(rng, nb, out, d, dtype):
    """Points inside and past the edges, plus exact pixel centres, edges and half-way points."""
    g = rng.uniform(-1.4, 1.4, (nb,) + out + (d,))
    flat = g.reshape(-1)
    exact = np.array([-1.0, 1.0, 0.0, -0.5, 0.5, 1.0 / 3, -1.25, 1.5])
    flat[: min(flat.size, exact.size)] = exact[: flat.size]
    return g.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("case", _GRID, ids=["2d", "2d-thin", "3d"])
def test_grid_sample_override_matches_the_generic_op(xp, dtype, align, padding_mode, mode, case):
    from ferro.ops.registry import REGISTRY

    shape, out = case
    op = REGISTRY["grid_sample"]
    assert op.gpu_forward is not None and op.gpu_paired
    rng = np.random.default_rng(len(shape) + len(padding_mode))
    x = xp.asarray(rng.standard_normal(shape).astype(dtype))
    grid = xp.asarray(_grid(rng, shape[0], out, len(shape) - 2, dtype))
    params = {"mode": mode, "padding_mode": padding_mode, "align_corners": align}
    mine, ref = _Ctx(xp, 2), _Ctx(xp, 2)
    got = op.gpu_forward(mine, x, grid, **params)
    want = op.forward(ref, x, grid, **params)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    assert got.shape == want.shape and got.dtype == dtype
    np.testing.assert_allclose(emu.host(got), emu.host(want), rtol=tol, atol=tol)
    for name, value in params.items():
        assert getattr(mine, name) == getattr(ref, name) == value
    gy = xp.asarray(rng.standard_normal(tuple(want.shape)).astype(dtype))
    for need in ((True, True), (True, False), (False, True)):
        mine.needs_input_grad = ref.needs_input_grad = need
        for g, r in zip(op.gpu_backward(mine, gy), op.backward(ref, gy), strict=True):
            assert (g is None) == (r is None)
            if r is not None:
                assert g.dtype == dtype
                np.testing.assert_allclose(emu.host(g), emu.host(r), rtol=tol, atol=10 * tol)


@pytest.mark.torch
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("case", _GRID, ids=["2d", "2d-thin", "3d"])
def test_grid_sample_kernels_match_torch(xp, mode, padding_mode, case):
    shape, out = case
    rng = np.random.default_rng(9)
    x = rng.standard_normal(shape)
    g = rng.uniform(-1.4, 1.4, (shape[0],) + out + (len(shape) - 2,))
    for align in (False, True):
        xt, gt = torch.tensor(x, requires_grad=True), torch.tensor(g, requires_grad=True)
        kw = {"mode": mode, "padding_mode": padding_mode, "align_corners": align}
        yt = TF.grid_sample(xt, gt, **kw)
        gy = rng.standard_normal(tuple(yt.shape))
        yt.backward(torch.tensor(gy))
        y = K.grid_sample_fwd(xp.asarray(x), xp.asarray(g), mode, padding_mode, align)
        np.testing.assert_allclose(emu.host(y), yt.detach().numpy(), atol=1e-12)
        gx, gg = K.grid_sample_bwd(xp.asarray(gy), xp.asarray(x), xp.asarray(g), *kw.values())
        np.testing.assert_allclose(emu.host(gx), xt.grad.numpy(), atol=1e-11)
        np.testing.assert_allclose(emu.host(gg), gt.grad.numpy(), atol=1e-10)


def test_grid_sample_kernels_take_empty_input(xp):
    x = xp.asarray(np.ones((2, 0, 3, 3)))
    grid = xp.asarray(np.full((2, 2, 2, 2), 0.25))
    assert K.grid_sample_fwd(x, grid, "bilinear", "zeros", False).shape == (2, 0, 2, 2)
    gx, gg = K.grid_sample_bwd(xp.asarray(np.ones((2, 0, 2, 2))), x, grid, "bilinear", "zeros", 0)
    assert gx.shape == (2, 0, 3, 3)
    np.testing.assert_array_equal(emu.host(gg), np.zeros((2, 2, 2, 2)))  # no channel: zero
    x = xp.asarray(np.ones((2, 1, 3, 3)))
    no_points = xp.asarray(np.zeros((2, 0, 3, 2)))
    assert K.grid_sample_fwd(x, no_points, "nearest", "zeros", True).shape == (2, 1, 0, 3)
    gy = xp.asarray(np.zeros((2, 1, 0, 3)))
    gx, gg = K.grid_sample_bwd(gy, x, no_points, "bilinear", "border", True)
    np.testing.assert_array_equal(emu.host(gx), np.zeros((2, 1, 3, 3)))
    assert gg.shape == (2, 0, 3, 2)


def test_grid_sample_kernel_wrappers_refuse_bad_input(xp):
    x = xp.asarray(np.zeros((1, 2, 4, 4)))
    grid = xp.asarray(np.zeros((1, 3, 3, 2)))
    args = ("bilinear", "zeros", False)
    with pytest.raises(DtypeError, match="one dtype"):
        K.grid_sample_fwd(x, grid.astype(np.float32), *args)
    with pytest.raises(ShapeError, match="grid"):
        K.grid_sample_fwd(x, xp.asarray(np.zeros((1, 3, 3, 3))), *args)
    with pytest.raises(ShapeError, match="4-D or 5-D"):
        K.grid_sample_fwd(x[0], grid[0], *args)
    with pytest.raises(ferro.errors.ArgumentError, match="padding_mode"):
        K.grid_sample_fwd(x, grid, "bilinear", "wrap", False)
    with pytest.raises(ferro.errors.ArgumentError, match="mode"):
        K.grid_sample_fwd(x, grid, "bicubic", "zeros", False)
    with pytest.raises(ShapeError, match="gy must be"):
        K.grid_sample_bwd(xp.asarray(np.zeros((1, 2, 3, 4))), x, grid, *args)
    with pytest.raises(DtypeError, match="C-contiguous"):
        K.grid_sample_fwd(x.swapaxes(2, 3), grid, *args)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_backward_is_the_adjoint_in_the_input(xp, mode):
    # <grid_sample(x), gy> = <x, gx>: the atomics scatter exactly the forward's weights.
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 6, 5))
    g = rng.uniform(-1.2, 1.2, (2, 40, 7, 2))  # many points per pixel: colliding atomics
    args = (mode, "zeros", False)
    y = emu.host(K.grid_sample_fwd(xp.asarray(x), xp.asarray(g), *args))
    gy = rng.standard_normal(y.shape)
    gx, _ = K.grid_sample_bwd(xp.asarray(gy), xp.asarray(x), xp.asarray(g), *args, True, False)
    assert np.isclose((y * gy).sum(), (x * emu.host(gx)).sum(), rtol=1e-12)


# ---- through the engine: the kernels bound as the CPU's override on the emulation -----------

_API = {
    "bilinear": lambda x, g: ferro.nn.functional.interpolate(
        x, size=(7, 4), mode="bilinear", align_corners=False
    ),
    "bicubic": lambda x, g: ferro.nn.functional.interpolate(
        x, scale_factor=1.5, mode="bicubic", align_corners=True
    ),
    "nearest": lambda x, g: ferro.nn.functional.interpolate(x, scale_factor=(2, 0.5)),
    "grid_sample": lambda x, g: ferro.nn.functional.grid_sample(
        x, g, padding_mode="reflection", align_corners=False
    ),
    "grid_sample_nearest": lambda x, g: ferro.nn.functional.grid_sample(
        x, g, mode="nearest", padding_mode="border", align_corners=True
    ),
}


@pytest.mark.parametrize("name", sorted(_API))
def test_overrides_through_the_engine_with_double_backward(xp, monkeypatch, name):
    """The adapters as the engine runs them (paired: the kernel's forward, then its backward),
    and under create_graph the op's differentiable backward after the kernel's forward. On the
    emulation the kernels are bound as the CPU's overrides; on a device the tensors move there."""
    from ferro.ops.registry import REGISTRY
    from ferro.ops.resampling import grid_sample_override, interpolate_override

    device = "cpu" if xp is np else "cuda"
    ops = ("interpolate", "grid_sample")
    # The CPU's own overrides (grid_sample has nogil kernels), restored below.
    saved = {op: (REGISTRY[op].cpu_forward, REGISTRY[op].cpu_backward) for op in ops}
    paired = {op: REGISTRY[op].cpu_paired for op in ops}
    if device == "cpu":
        for op, adapter in zip(ops, (interpolate_override, grid_sample_override), strict=True):
            REGISTRY[op].set_override("cpu", *adapter(K), paired=True)
    try:
        _check_through_the_engine(name, device)
    finally:
        if device == "cpu":
            for op in ops:
                REGISTRY[op].set_override("cpu", *saved[op], paired=paired[op])


def _check_through_the_engine(name, device):
    from ferro._C import engine

    rng = np.random.default_rng(11)
    x_np = rng.standard_normal((2, 3, 5, 6))
    g_np = rng.uniform(-1.2, 1.2, (2, 4, 3, 2))
    fn = _API[name]
    results = []
    for on in (True, False):
        prev = engine.set_overrides_enabled(on)
        try:
            x = ferro.tensor(x_np, device=device, requires_grad=True)
            g = ferro.tensor(g_np, device=device, requires_grad=True)
            y = fn(x, g)
            assert y.grad_fn.fused_forward == on
            w_np = np.random.default_rng(12).standard_normal(y.shape)  # the same both times
            w = ferro.tensor(w_np, device=device, requires_grad=True)
            inputs = [x, g] if name.startswith("grid") else [x]
            first = ferro.autograd.grad(y, inputs, grad_outputs=w.detach(), retain_graph=True)
            assert y.grad_fn.fused_backward == on  # paired: the kernel's backward ran
            grads = ferro.autograd.grad((y * w).sum(), inputs, create_graph=True)
            # second order: the gradients' squares differentiated through the differentiable
            # backward, w.r.t. the upstream weights and the inputs
            second = sum((gr * gr).sum() for gr in grads if gr is not None and gr.requires_grad)
            gg = ferro.autograd.grad(second, [w, *inputs], allow_unused=True)
            results.append(
                [y.detach().cpu().numpy()]
                + [t.cpu().numpy() for t in first]
                + [None if t is None else t.detach().cpu().numpy() for t in grads]
                + [None if t is None else t.cpu().numpy() for t in gg]
            )
        finally:
            engine.set_overrides_enabled(prev)
    for got, want in zip(*results, strict=True):
        if want is None:
            assert got is None
        else:
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_grid_sample_input_gradient_alerts_under_deterministic_algorithms(xp):
    # Note [Deterministic algorithms]: the input gradient adds by atomics.
    rng = np.random.default_rng(0)
    x, g = rng.standard_normal((1, 2, 4, 4)), rng.uniform(-1, 1, (1, 3, 3, 2))
    args = (xp.asarray(rng.standard_normal((1, 2, 3, 3))), xp.asarray(x), xp.asarray(g))
    args += ("bilinear", "zeros", False)
    ferro.use_deterministic_algorithms(True)
    try:
        with pytest.raises(ferro.errors.NondeterministicError, match="grid_sample backward"):
            K.grid_sample_bwd(*args)
        gx, gg = K.grid_sample_bwd(*args, False, True)  # the grid's gradient: no atomics
        assert gx is None and gg.shape == (1, 3, 3, 2)
        ferro.use_deterministic_algorithms(True, warn_only=True)
        with pytest.warns(UserWarning, match="deterministic"):
            K.grid_sample_bwd(*args)
    finally:
        ferro.use_deterministic_algorithms(False)
