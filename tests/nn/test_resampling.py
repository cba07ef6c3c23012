"""interpolate, grid_sample, affine_grid, deform_conv2d and their modules: PyTorch as the
oracle where installed, the op database's NumPy references otherwise, bad input, the batch
chunking of deform_conv2d, and the differentiable backwards (issue 14, part 3)."""

from __future__ import annotations

import math
import os
import sys

import numpy as np
import pytest

import ferro
import ferro.nn.functional as F
from ferro.errors import ArgumentError, DtypeError, NotSupportedError, ShapeError
from ferro.ops import resampling
from ferro.ops.registry import REGISTRY
from ferro.testing import gradcheck

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ops"))

from opdb import BY_NAME  # noqa: E402
from opdb.resampling import deform_conv2d_ref  # noqa: E402

# ---- interpolate against PyTorch -----------------------------------------------------------

_MODE_DIMS = [
    ("nearest", 1),
    ("nearest", 2),
    ("nearest", 3),
    ("nearest-exact", 1),
    ("nearest-exact", 2),
    ("area", 1),
    ("area", 2),
    ("area", 3),
    ("linear", 1),
    ("bilinear", 2),
    ("bicubic", 2),
    ("trilinear", 3),
]


def _interp_cases(mode, dims, rng):
    """Sizes and scale factors: up and down, non-integer, tuples, recompute, align_corners."""
    cases = []
    factors = [2, 0.5, 1.5, 0.7, 2.3, 3, 1.0, 1 / 3, (1.25, 0.8, 2.0)[:dims]]
    for k, sf in enumerate(factors):
        kw = {"scale_factor": sf}
        if k % 3 == 1:
            kw["recompute_scale_factor"] = True
        cases.append(kw)
    for _ in range(3):
        cases.append({"size": tuple(int(v) for v in rng.integers(1, 12, dims))})
    if mode in ("linear", "bilinear", "bicubic", "trilinear"):
        cases = [{**kw, "align_corners": ac} for kw in cases for ac in (False, True)]
    return cases


def _torch_nearest_grad_differs(mode, shape, kw):
    """PyTorch's 1-D/3-D nearest forward floors ``dst / scale``, but its backward keeps the
    ``out == in`` and ``out == 2 * in`` shortcuts (identity, ``dst >> 1``) even when the scale
    factor given is not 1 or 2: its gradient is not that of its forward there. ferro's is (the
    adjoint test below checks it)."""
    if mode != "nearest" or len(shape) == 4 or "scale_factor" not in kw:
        return False
    if kw.get("recompute_scale_factor"):
        return False
    sf = kw["scale_factor"]
    sfs = (sf,) * (len(shape) - 2) if np.isscalar(sf) else sf
    for n, s in zip(shape[2:], sfs, strict=True):
        out = math.floor(n * s)
        if out in (n, 2 * n) and s != out / n:
            return True
    return False


@pytest.mark.torch
@pytest.mark.parametrize("mode,dims", _MODE_DIMS, ids=[f"{m}-{d}d" for m, d in _MODE_DIMS])
def test_interpolate_matches_torch(mode, dims):
    import torch
    import torch.nn.functional as TF

    rng = np.random.default_rng(dims)
    checked = 0
    for kw in _interp_cases(mode, dims, rng):
        for dtype in (np.float32, np.float64):
            shape = (2, 3) + tuple(int(v) for v in rng.integers(1, 9, dims))
            x = rng.standard_normal(shape).astype(dtype)
            xt = torch.tensor(x, requires_grad=True)
            try:
                yt = TF.interpolate(xt, mode=mode, **kw)
            except RuntimeError:  # an empty output: ferro must refuse it too
                with pytest.raises(ArgumentError):
                    F.interpolate(ferro.tensor(x), mode=mode, **kw)
                continue
            if yt.numel() == 0:  # area to an empty size: PyTorch has no backward for it
                assert F.interpolate(ferro.tensor(x), mode=mode, **kw).shape == tuple(yt.shape)
                continue
            gy = rng.standard_normal(tuple(yt.shape)).astype(dtype)
            yt.backward(torch.tensor(gy))
            xf = ferro.tensor(x, requires_grad=True)
            yf = F.interpolate(xf, mode=mode, **kw)
            yf.backward(ferro.tensor(gy))
            tol = 2e-5 if dtype == np.float32 else 1e-12
            assert yf.shape == tuple(yt.shape), (shape, kw)
            np.testing.assert_allclose(
                yf.detach().numpy(), yt.detach().numpy(), atol=tol, err_msg=str(kw)
            )
            if not _torch_nearest_grad_differs(mode, shape, kw):
                np.testing.assert_allclose(xf.grad.detach().numpy(), xt.grad.numpy(), atol=10 * tol)
            checked += 1
    assert checked >= 20


@pytest.mark.parametrize("mode,dims", _MODE_DIMS, ids=[f"{m}-{d}d" for m, d in _MODE_DIMS])
def test_interpolate_backward_is_the_adjoint_of_forward(mode, dims):
    # <interpolate(x), gy> = <x, ginput> for the linear map: the gradient is its transpose.
    rng = np.random.default_rng(7)
    for kw in _interp_cases(mode, dims, rng)[:8]:
        shape = (1, 2) + tuple(int(v) for v in rng.integers(3, 7, dims))
        x = ferro.tensor(rng.standard_normal(shape), requires_grad=True)
        y = F.interpolate(x, mode=mode, **kw)
        gy = rng.standard_normal(y.shape)
        y.backward(ferro.tensor(gy))
        assert np.isclose(
            (y.detach().numpy() * gy).sum(),
            (x.detach().numpy() * x.grad.detach().numpy()).sum(),
            rtol=1e-12,
        )


def test_interpolate_identity_and_known_values():
    x = ferro.arange(4.0, dtype=ferro.float64).reshape(1, 1, 2, 2)
    up = F.interpolate(x, scale_factor=2, mode="nearest")
    np.testing.assert_array_equal(
        up.detach().numpy()[0, 0], [[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, 3, 3]] + [[2, 2, 3, 3]]
    )
    lin = F.interpolate(x, size=(3, 3), mode="bilinear", align_corners=True)
    np.testing.assert_allclose(lin.detach().numpy()[0, 0], [[0, 0.5, 1], [1, 1.5, 2], [2, 2.5, 3]])
    same = F.interpolate(x, size=(2, 2), mode="bicubic")
    np.testing.assert_array_equal(same.detach().numpy(), x.detach().numpy())
    np.testing.assert_allclose(F.interpolate(x, size=1, mode="area").detach().numpy(), [[[[1.5]]]])


def test_upsample_aliases():
    x = ferro.tensor(np.random.default_rng(0).standard_normal((1, 2, 3, 4)))
    np.testing.assert_array_equal(
        F.upsample(x, scale_factor=2, mode="bilinear").detach().numpy(),
        F.interpolate(x, scale_factor=2, mode="bilinear").detach().numpy(),
    )
    np.testing.assert_array_equal(
        F.upsample_nearest(x, size=(5, 6)).detach().numpy(),
        F.interpolate(x, size=(5, 6)).detach().numpy(),
    )
    np.testing.assert_array_equal(
        F.upsample_bilinear(x, scale_factor=2).detach().numpy(),
        F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True).detach().numpy(),
    )


# ---- grid_sample and affine_grid against PyTorch -------------------------------------------


@pytest.mark.torch
@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_matches_torch(dims, mode):
    import torch
    import torch.nn.functional as TF

    rng = np.random.default_rng(dims)
    for pad in ("zeros", "border", "reflection"):
        for align in (False, True):
            for dtype in (np.float32, np.float64):
                sp = tuple(int(v) for v in rng.integers(1, 6, dims))
                osp = tuple(int(v) for v in rng.integers(1, 5, dims))
                x = rng.standard_normal((2, 3) + sp).astype(dtype)
                g = rng.uniform(-1.6, 1.6, (2,) + osp + (dims,)).astype(dtype)
                xt, gt = torch.tensor(x, requires_grad=True), torch.tensor(g, requires_grad=True)
                kw = {"mode": mode, "padding_mode": pad, "align_corners": align}
                yt = TF.grid_sample(xt, gt, **kw)
                gy = rng.standard_normal(tuple(yt.shape)).astype(dtype)
                yt.backward(torch.tensor(gy))
                xf, gf = ferro.tensor(x, requires_grad=True), ferro.tensor(g, requires_grad=True)
                yf = F.grid_sample(xf, gf, **kw)
                yf.backward(ferro.tensor(gy))
                tol = 1e-4 if dtype == np.float32 else 1e-10
                np.testing.assert_allclose(
                    yf.detach().numpy(), yt.detach().numpy(), atol=tol, err_msg=str(kw)
                )
                np.testing.assert_allclose(xf.grad.detach().numpy(), xt.grad.numpy(), atol=tol)
                np.testing.assert_allclose(gf.grad.detach().numpy(), gt.grad.numpy(), atol=tol * 10)


@pytest.mark.torch
@pytest.mark.parametrize("size", [(2, 3, 4, 5), (1, 1, 1, 3), (2, 2, 3, 4, 2)])
@pytest.mark.parametrize("align", [False, True])
def test_affine_grid_matches_torch(size, align):
    import torch
    import torch.nn.functional as TF

    rng = np.random.default_rng(0)
    d = len(size) - 2
    theta = rng.standard_normal((size[0], d, d + 1))
    tt = torch.tensor(theta, requires_grad=True)
    with pytest.warns(UserWarning) if align and 1 in size[2:] else _nothing():
        gt = TF.affine_grid(tt, size, align_corners=align)
    gy = rng.standard_normal(tuple(gt.shape))
    gt.backward(torch.tensor(gy))
    tf = ferro.tensor(theta, requires_grad=True)
    gf = F.affine_grid(tf, size, align_corners=align)
    gf.backward(ferro.tensor(gy))
    np.testing.assert_allclose(gf.detach().numpy(), gt.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(tf.grad.detach().numpy(), tt.grad.numpy(), atol=1e-12)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_identity_affine_grid_samples_the_input_back():
    x = ferro.tensor(np.random.default_rng(0).standard_normal((2, 3, 4, 5)))
    theta = ferro.tensor(np.tile(np.eye(2, 3), (2, 1, 1)))
    for align in (False, True):
        grid = F.affine_grid(theta, (2, 3, 4, 5), align_corners=align)
        np.testing.assert_allclose(
            F.grid_sample(x, grid, align_corners=align).detach().numpy(), x.detach().numpy()
        )


# ---- deform_conv2d -------------------------------------------------------------------------


def _numpy_conv2d(x, w, b, stride, padding, dilation, groups):
    n, cin, h, wd = x.shape
    cout, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    ho = (h + 2 * padding - dilation * (kh - 1) - 1) // stride + 1
    wo = (wd + 2 * padding - dilation * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, cout, ho, wo))
    per = cout // groups
    for o in range(cout):
        g = o // per
        for i in range(kh):
            for j in range(kw):
                patch = xp[
                    :,
                    g * cg : (g + 1) * cg,
                    i * dilation : i * dilation + stride * ho : stride,
                    j * dilation : j * dilation + stride * wo : stride,
                ]
                out[:, o] += np.einsum("nchw,c->nhw", patch, w[o, :, i, j])
    return out + b[None, :, None, None]


@pytest.mark.parametrize(
    "stride,padding,dilation,groups", [(1, 1, 1, 1), (2, 0, 1, 2), (1, 2, 2, 1)]
)
def test_deform_conv2d_with_zero_offset_is_conv2d(stride, padding, dilation, groups):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 7, 6))
    w = rng.standard_normal((6, 4 // groups, 3, 3))
    b = rng.standard_normal(6)
    ho = (7 + 2 * padding - dilation * 2 - 1) // stride + 1
    wo = (6 + 2 * padding - dilation * 2 - 1) // stride + 1
    offset = np.zeros((2, 18, ho, wo))
    y = F.deform_conv2d(
        ferro.tensor(x),
        ferro.tensor(offset),
        ferro.tensor(w),
        ferro.tensor(b),
        stride=stride,
        padding=padding,
        dilation=dilation,
    )
    want = _numpy_conv2d(x, w, b, stride, padding, dilation, groups)
    np.testing.assert_allclose(y.detach().numpy(), want, atol=1e-12)


@pytest.mark.torch
def test_deform_conv2d_with_zero_offset_matches_torch_conv2d_gradients():
    import torch
    import torch.nn.functional as TF

    rng = np.random.default_rng(1)
    x, w, b = (
        rng.standard_normal((2, 4, 6, 5)),
        rng.standard_normal((4, 2, 3, 3)),
        rng.standard_normal(4),
    )
    xt, wt, bt = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    yt = TF.conv2d(xt, wt, bt, padding=1, groups=2)
    gy = rng.standard_normal(tuple(yt.shape))
    yt.backward(torch.tensor(gy))
    xf, wf, bf = (ferro.tensor(a, requires_grad=True) for a in (x, w, b))
    yf = F.deform_conv2d(xf, ferro.zeros(2, 18, 6, 5, dtype=ferro.float64), wf, bf, padding=1)
    yf.backward(ferro.tensor(gy))
    np.testing.assert_allclose(yf.detach().numpy(), yt.detach().numpy(), atol=1e-12)
    for f, t in ((xf, xt), (wf, wt), (bf, bt)):
        np.testing.assert_allclose(f.grad.detach().numpy(), t.grad.numpy(), atol=1e-11)


def test_deform_conv2d_offsets_shift_the_samples():
    # An offset of exactly (+1, 0) everywhere reads the row below: a 1x1 kernel copies it.
    x = np.arange(12.0).reshape(1, 1, 3, 4)
    offset = np.zeros((1, 2, 3, 4))
    offset[:, 0] = 1.0
    y = F.deform_conv2d(
        ferro.tensor(x), ferro.tensor(offset), ferro.ones(1, 1, 1, 1, dtype=ferro.float64)
    )
    want = np.concatenate([x[:, :, 1:], np.zeros((1, 1, 1, 4))], axis=2)
    np.testing.assert_allclose(y.detach().numpy(), want)


def test_deform_conv2d_chunks_give_the_unchunked_result(monkeypatch):
    rng = np.random.default_rng(2)
    sample = BY_NAME["deform_conv2d_mask"].samples(rng)[0]
    args = [ferro.tensor(a, requires_grad=True) for a in sample.args]
    full = F.deform_conv2d(*args[:4], mask=args[4], **sample.kwargs)
    full.backward(ferro.ones_like(full))
    want = [a.grad.detach().numpy().copy() for a in args]
    monkeypatch.setattr(resampling, "_COLUMN_BUDGET", 1)  # one image per chunk
    args2 = [ferro.tensor(a, requires_grad=True) for a in sample.args]
    part = F.deform_conv2d(*args2[:4], mask=args2[4], **sample.kwargs)
    part.backward(ferro.ones_like(part))
    np.testing.assert_allclose(part.detach().numpy(), full.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(
        part.detach().numpy(),
        deform_conv2d_ref(*sample.args[:4], mask=sample.args[4], **sample.kwargs),
        atol=1e-12,
    )
    for a, g in zip(args2, want, strict=True):
        np.testing.assert_allclose(a.grad.detach().numpy(), g, atol=1e-12)


# ---- modules -------------------------------------------------------------------------------


def test_upsample_modules_forward_and_repr():
    x = ferro.tensor(np.random.default_rng(0).standard_normal((1, 2, 3, 3)))
    m = ferro.nn.Upsample(scale_factor=2, mode="bilinear")
    assert repr(m) == "Upsample(scale_factor=2.0, mode='bilinear')"
    np.testing.assert_array_equal(
        m(x).detach().numpy(), F.interpolate(x, scale_factor=2.0, mode="bilinear").detach().numpy()
    )
    assert repr(ferro.nn.Upsample(size=(4, 5))) == "Upsample(size=(4, 5), mode='nearest')"
    near = ferro.nn.UpsamplingNearest2d(scale_factor=2)
    assert repr(near) == "UpsamplingNearest2d(scale_factor=2.0, mode='nearest')"
    np.testing.assert_array_equal(
        near(x).detach().numpy(), F.interpolate(x, scale_factor=2).detach().numpy()
    )
    bil = ferro.nn.UpsamplingBilinear2d(size=5)
    assert repr(bil) == "UpsamplingBilinear2d(size=5, mode='bilinear')"
    np.testing.assert_array_equal(
        bil(x).detach().numpy(),
        F.interpolate(x, size=5, mode="bilinear", align_corners=True).detach().numpy(),
    )
    assert list(m.parameters()) == []


@pytest.mark.torch
def test_upsample_reprs_match_torch():
    import torch

    for args, kw in [
        ((), {"scale_factor": 2, "mode": "bilinear"}),
        ((), {"size": (4, 5)}),
        ((), {"scale_factor": (2, 3)}),
    ]:
        assert repr(ferro.nn.Upsample(*args, **kw)) == repr(torch.nn.Upsample(*args, **kw))
    assert repr(ferro.nn.UpsamplingBilinear2d(scale_factor=2)) == repr(
        torch.nn.UpsamplingBilinear2d(scale_factor=2)
    )
    assert repr(ferro.nn.UpsamplingNearest2d(size=3)) == repr(torch.nn.UpsamplingNearest2d(size=3))


def test_deform_conv2d_module():
    m = ferro.nn.DeformConv2d(4, 6, kernel_size=3, padding=1, groups=2, dtype=ferro.float64)
    assert (
        repr(m) == "DeformConv2d(4, 6, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), groups=2)"
    )
    assert m.weight.shape == (6, 2, 3, 3) and m.bias.shape == (6,)
    assert [name for name, _ in m.named_parameters()] == ["weight", "bias"]
    bound = 1 / math.sqrt(2 * 9)
    assert (
        np.abs(m.bias.detach().numpy()).max() <= bound
        and np.abs(m.weight.detach().numpy()).max() <= bound
    )
    assert np.abs(m.weight.detach().numpy()).max() > bound / 2  # drawn, not left empty
    rng = np.random.default_rng(0)
    x = ferro.tensor(rng.standard_normal((1, 4, 5, 5)))
    off = ferro.tensor(rng.uniform(-1, 1, (1, 18, 5, 5)))
    mask = ferro.tensor(rng.uniform(0, 1, (1, 9, 5, 5)))
    want = deform_conv2d_ref(
        x.detach().numpy(),
        off.detach().numpy(),
        m.weight.detach().numpy(),
        m.bias.detach().numpy(),
        padding=1,
        mask=mask.detach().numpy(),
    )
    np.testing.assert_allclose(m(x, off, mask).detach().numpy(), want, atol=1e-12)
    m(x, off).sum().backward()
    assert m.weight.grad.shape == m.weight.shape and m.bias.grad.shape == (6,)
    nobias = ferro.nn.DeformConv2d(2, 2, (1, 2), bias=False, dilation=2)
    assert (
        repr(nobias)
        == "DeformConv2d(2, 2, kernel_size=(1, 2), stride=(1, 1), dilation=(2, 2), bias=False)"
    )
    assert nobias.bias is None
    with pytest.raises(ArgumentError, match="groups"):
        ferro.nn.DeformConv2d(3, 4, 3, groups=2)


# ---- bad input -----------------------------------------------------------------------------


def _x(*shape):
    return ferro.zeros(*shape, dtype=ferro.float64)


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"size": 4, "scale_factor": 2}, ArgumentError, "exactly one of size and scale_factor"),
        ({}, ArgumentError, "exactly one of size and scale_factor"),
        (
            {"size": 4, "mode": "trilinear"},
            ShapeError,
            r"'trilinear' takes 5-D input .*\(1, 2, 3, 3\)",
        ),
        ({"size": 4, "mode": "linear"}, ShapeError, "'linear' takes 3-D"),
        ({"size": 4, "mode": "bogus"}, ArgumentError, "mode must be one of"),
        ({"size": 4, "align_corners": True}, ArgumentError, "align_corners can only be set"),
        ({"size": 4, "mode": "bilinear", "antialias": True}, NotSupportedError, "antialias"),
        ({"size": (4, 4, 4)}, ArgumentError, "size must be an int or 2 ints"),
        ({"scale_factor": -1.0}, ArgumentError, "scale_factor must be positive"),
        ({"scale_factor": (2, 2, 2)}, ArgumentError, "one entry per spatial dimension"),
        ({"scale_factor": 0.1}, ArgumentError, r"output sizes must be greater than 0.*\(0, 0\)"),
        ({"size": 4, "recompute_scale_factor": True}, ArgumentError, "recompute_scale_factor"),
    ],
)
def test_interpolate_bad_input(kwargs, error, match):
    with pytest.raises(error, match=match):
        F.interpolate(_x(1, 2, 3, 3), **kwargs)


def test_interpolate_bad_rank_and_dtype():
    with pytest.raises(ShapeError, match=r"interpolate: .*got shape \(2, 3\)"):
        F.interpolate(_x(2, 3), size=2)
    with pytest.raises(DtypeError, match="float"):
        F.interpolate(ferro.zeros(1, 1, 2, dtype=ferro.int64), size=3, mode="linear")
    ints = F.interpolate(ferro.arange(3).reshape(1, 1, 3), size=6)  # nearest copies any dtype
    np.testing.assert_array_equal(ints.detach().numpy()[0, 0], [0, 0, 1, 1, 2, 2])


def test_grid_sample_and_affine_grid_bad_input():
    with pytest.raises(
        ShapeError, match=r"grid_sample: grid must have shape \(N, \*out, 2\).*\(1, 3, 3, 3\)"
    ):
        F.grid_sample(_x(1, 2, 4, 4), _x(1, 3, 3, 3))
    with pytest.raises(ShapeError, match="N = 2"):
        F.grid_sample(_x(2, 2, 4, 4), _x(1, 3, 3, 2))
    with pytest.raises(ShapeError, match="4-D or 5-D"):
        F.grid_sample(_x(2, 4, 4), _x(2, 3, 2))
    with pytest.raises(ArgumentError, match="padding_mode"):
        F.grid_sample(_x(1, 2, 4, 4), _x(1, 3, 3, 2), padding_mode="circular")
    with pytest.raises(NotSupportedError, match="bicubic"):
        F.grid_sample(_x(1, 2, 4, 4), _x(1, 3, 3, 2), mode="bicubic")
    with pytest.raises(ShapeError, match=r"affine_grid: theta must have shape \(2, 2, 3\)"):
        F.affine_grid(_x(2, 3, 4), (2, 1, 4, 4))
    with pytest.raises(ShapeError, match="size must be"):
        F.affine_grid(_x(2, 2, 3), (2, 1, 4))


def test_deform_conv2d_bad_input():
    x, w = _x(1, 4, 5, 5), _x(6, 2, 3, 3)
    with pytest.raises(
        ShapeError,
        match=r"offset must have shape \(1, 2\*offset_groups\*9, 3, 3\).*got \(1, 17, 3, 3\)",
    ):
        F.deform_conv2d(x, _x(1, 17, 3, 3), w)
    with pytest.raises(ShapeError, match="offset must have shape"):
        F.deform_conv2d(x, _x(1, 18, 4, 3), w)
    with pytest.raises(ShapeError, match="not divisible by the 3 offset groups"):
        F.deform_conv2d(x, _x(1, 54, 3, 3), w)
    with pytest.raises(ShapeError, match=r"mask must have shape \(1, 9, 3, 3\)"):
        F.deform_conv2d(x, _x(1, 18, 3, 3), w, mask=_x(1, 18, 3, 3))
    with pytest.raises(ShapeError, match=r"bias must have shape \(6,\)"):
        F.deform_conv2d(x, _x(1, 18, 3, 3), w, _x(5))
    with pytest.raises(ShapeError, match="not a multiple of weight's 3"):
        F.deform_conv2d(x, _x(1, 18, 3, 3), _x(6, 3, 3, 3))
    with pytest.raises(ShapeError, match="larger than the padded input"):
        F.deform_conv2d(_x(1, 4, 2, 2), _x(1, 18, 1, 1), w)
    with pytest.raises(ShapeError, match="must be 4-D"):
        F.deform_conv2d(_x(4, 5, 5), _x(1, 18, 3, 3), w)
    with pytest.raises(ArgumentError, match="stride"):
        F.deform_conv2d(x, _x(1, 18, 3, 3), w, stride=0)


# ---- differentiable backward ---------------------------------------------------------------


class _Ctx:
    """What the create_graph engine hands ``differentiable_backward``: ``saved`` as Tensors, the
    rest of the recorded node as it is."""

    def __init__(self, node, saved):
        self._node, self.saved = node, tuple(saved)

    def __getattr__(self, name):
        return getattr(self._node, name)


_DIFFERENTIABLE = {
    "interpolate": (resampling._interpolate_differentiable_backward, ()),
    "grid_sample": (resampling._grid_sample_differentiable_backward, (0, 1)),
    "deform_conv2d": (resampling._deform_conv2d_differentiable_backward, None),
    "deform_conv2d_mask": (resampling._deform_conv2d_differentiable_backward, None),
}


def _recorded(name, sample):
    args = [
        ferro.tensor(a, requires_grad=True) if isinstance(a, np.ndarray) else a for a in sample.args
    ]
    out = BY_NAME[name].fn(*args, **sample.kwargs)
    tensors = [a for a in args if isinstance(a, ferro.Tensor)]
    return out, tensors


@pytest.mark.parametrize("name", sorted(_DIFFERENTIABLE))
def test_differentiable_backward_agrees_with_backward(name):
    fn, _ = _DIFFERENTIABLE[name]
    registered = getattr(REGISTRY[BY_NAME[name].func], "differentiable_backward", fn)
    assert registered is fn
    rng = np.random.default_rng(3)
    for sample in BY_NAME[name].samples(rng):
        out, tensors = _recorded(name, sample)
        gy = rng.standard_normal(out.shape)
        node = out.grad_fn
        saved = [ferro.tensor(a) for a in node.saved]
        got = fn(_Ctx(node, saved), ferro.tensor(gy))
        got = got if isinstance(got, tuple) else (got,)
        out.backward(ferro.tensor(gy))
        for t, g in zip(tensors, got, strict=True):
            if g is None:
                assert not t.grad.detach().numpy().any(), sample.label
                continue
            assert isinstance(g, ferro.Tensor)
            np.testing.assert_allclose(
                g.detach().numpy(), t.grad.detach().numpy(), atol=1e-12, err_msg=sample.label
            )


@pytest.mark.parametrize("name", ["interpolate", "grid_sample", "deform_conv2d"])
def test_differentiable_backward_has_the_right_derivatives(name):
    # Second order: differentiate <differentiable_backward(gy; inputs), r> by gradcheck, which
    # compares the graph it records with central differences of the same function.
    fn, _ = _DIFFERENTIABLE[name]
    rng = np.random.default_rng(4)
    samples = BY_NAME[name].samples(rng)
    sample = samples[{"interpolate": 1, "grid_sample": 0, "deform_conv2d": 2}[name]]
    out, tensors = _recorded(name, sample)
    node = out.grad_fn
    gy0 = rng.standard_normal(out.shape)
    weights = [rng.standard_normal(t.shape) for t in tensors]

    def second(gy, *inputs):
        grads = fn(_Ctx(node, inputs), gy)
        grads = grads if isinstance(grads, tuple) else (grads,)
        total = 0
        for g, r in zip(grads, weights, strict=True):
            if g is not None:
                total = total + (g * r).sum()
        return total

    inputs = tuple(ferro.tensor(a.detach().numpy(), requires_grad=True) for a in tensors)
    assert gradcheck(second, (ferro.tensor(gy0, requires_grad=True), *inputs))


# ---- CPU kernels ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("with_mask", [False, True])
def test_deform_kernels_match_the_generic_sampling(dtype, with_mask):
    from ferro._C import resampling_kernels as rk

    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 4, 5, 6)).astype(dtype)
    kernel, stride, padding, dilation = (3, 2), (2, 1), (1, 0), (1, 2)
    ho, wo = 3, 4
    offset = rng.uniform(-2.5, 2.5, (2, 2 * 2 * 6, ho, wo)).astype(dtype)
    mask = rng.uniform(0, 1, (2, 2 * 6, ho, wo)).astype(dtype) if with_mask else None
    geom = (2, 3, 2, ho, wo, stride, padding, dilation)
    cols = rk.deform_im2col(x, offset, mask, kernel, stride, padding, dilation)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(cols, resampling._deform_im2col(np, x, offset, mask, geom), atol=tol)
    gcols = rng.standard_normal(cols.shape).astype(dtype)
    got = rk.deform_col2im(x, offset, mask, gcols, kernel, stride, padding, dilation)
    want = resampling._deform_col2im(np, x, offset, mask, gcols, geom, (True, True, True))
    for g, w in zip(got, want, strict=True):
        if w is None:
            assert g is None
        else:
            assert g.dtype == dtype
            np.testing.assert_allclose(g, w, atol=10 * tol)
    none = rk.deform_col2im(
        x, offset, mask, gcols, kernel, stride, padding, dilation, False, False, False
    )
    assert none == (None, None, None)


def test_deform_kernels_refuse_what_they_cannot_read():
    from ferro._C import resampling_kernels as rk
    from ferro.errors import ArgumentTypeError

    x = np.zeros((1, 2, 4, 4))
    off = np.zeros((1, 18, 4, 4))
    args = ((3, 3), (1, 1), (1, 1), (1, 1))
    with pytest.raises(ArgumentTypeError, match="x must be a numpy.ndarray"):
        rk.deform_im2col(x.tolist(), off, None, *args)
    with pytest.raises(DtypeError, match="one dtype"):
        rk.deform_im2col(x, off.astype(np.float32), None, *args)
    with pytest.raises(DtypeError, match="native byte order"):
        rk.deform_im2col(x, off.astype(">f8"), None, *args)
    with pytest.raises(ShapeError, match="C-contiguous"):
        rk.deform_im2col(np.asfortranarray(x), off, None, *args)
    with pytest.raises(ShapeError, match=r"offset of shape \(1, 17, 4, 4\)"):
        rk.deform_im2col(x, np.zeros((1, 17, 4, 4)), None, *args)
    with pytest.raises(ShapeError, match=r"gcols must have shape \(1, 18, 16\)"):
        rk.deform_col2im(x, off, None, np.zeros((1, 18, 15)), *args)
    with pytest.raises(ShapeError, match=r"mask must have shape \(1, 9, 4, 4\)"):
        rk.deform_im2col(x, off, np.zeros((1, 9, 4, 3)), *args)
    assert not rk.accepts((x, off.astype(np.float32))) and rk.accepts((x, off))
    assert not rk.accepts_grad(x.T, (x,))


def test_deform_conv2d_runs_the_cpu_kernels_where_they_take_the_arrays():
    rng = np.random.default_rng(6)
    sample = BY_NAME["deform_conv2d_mask"].samples(rng)[0]
    args = [ferro.tensor(a, requires_grad=True) for a in sample.args]
    y = F.deform_conv2d(*args[:4], mask=args[4], **sample.kwargs)
    y.sum().backward()  # a stride-0 upstream gradient: made contiguous for the kernel
    assert y.grad_fn.fused_forward and y.grad_fn.fused_backward
    np.testing.assert_allclose(
        y.detach().numpy(),
        deform_conv2d_ref(*sample.args[:4], mask=sample.args[4], **sample.kwargs),
        atol=1e-12,
    )
    t = [ferro.from_numpy(np.asfortranarray(a)).requires_grad_() for a in sample.args]
    assert not F.deform_conv2d(*t[:4], mask=t[4], **sample.kwargs).grad_fn.fused_forward


# (input shape, grid's output spatial shape): 4-D and 5-D, odd sizes, a size-1 dim.
_GRID_CASES = [((2, 3, 5, 4), (3, 6)), ((1, 2, 1, 3), (2, 2)), ((2, 2, 3, 4, 5), (2, 3, 2))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("case", _GRID_CASES, ids=["2d", "2d-thin", "3d"])
def test_grid_sample_cpu_kernels_match_the_generic_op(dtype, align, padding_mode, mode, case):
    from ferro._C import resampling_kernels as rk
    from ferro.ops.registry import REGISTRY

    shape, out = case
    rng = np.random.default_rng(len(shape) + len(padding_mode))
    x = rng.standard_normal(shape).astype(dtype)
    g = rng.uniform(-1.4, 1.4, (shape[0],) + out + (len(shape) - 2,))
    # Exact pixel centres, edges and half-way points too (ties of nearest, corners on the edge).
    exact = [-1.0, 1.0, 0.0, -0.5, 0.5, 1.0 / 3, -1.25, 1.5]
    g.reshape(-1)[: len(exact)] = exact[: g.size]
    g = g.astype(dtype)

    class Ctx:
        xp, needs_input_grad = np, (True, True)

        def save(self, *arrays):
            self.saved = arrays

    ctx = Ctx()
    want = REGISTRY["grid_sample"].forward(
        ctx, x, g, mode=mode, padding_mode=padding_mode, align_corners=align
    )
    got = rk.grid_sample_fwd(x, g, mode, padding_mode, align)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    assert got.dtype == dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    gy = rng.standard_normal(want.shape).astype(dtype)
    wgx, wgg = REGISTRY["grid_sample"].backward(ctx, gy)
    for need_x, need_grid in ((True, True), (True, False), (False, True)):
        gx, gg = rk.grid_sample_bwd(gy, x, g, mode, padding_mode, align, need_x, need_grid)
        for a, w, need in ((gx, wgx, need_x), (gg, wgg, need_grid)):
            assert (a is None) == (not need)
            if need:
                assert a.dtype == dtype
                np.testing.assert_allclose(a, w, rtol=tol, atol=10 * tol)


def test_grid_sample_runs_the_cpu_kernels_where_they_take_the_arrays():
    rng = np.random.default_rng(8)
    x_np, g_np = rng.standard_normal((2, 3, 4, 5)), rng.uniform(-1.2, 1.2, (2, 3, 3, 2))
    x, g = ferro.tensor(x_np, requires_grad=True), ferro.tensor(g_np, requires_grad=True)
    y = F.grid_sample(x, g, padding_mode="reflection", align_corners=False)
    y.sum().backward()  # a stride-0 upstream gradient: made contiguous for the kernel
    assert y.grad_fn.fused_forward and y.grad_fn.fused_backward
    xf = ferro.from_numpy(np.asfortranarray(x_np)).requires_grad_()
    gf = ferro.from_numpy(np.asfortranarray(g_np)).requires_grad_()
    yf = F.grid_sample(xf, gf, padding_mode="reflection", align_corners=False)
    assert not yf.grad_fn.fused_forward
    yf.sum().backward()
    np.testing.assert_allclose(yf.detach().numpy(), y.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(xf.grad.numpy(), x.grad.numpy(), atol=1e-12)
    np.testing.assert_allclose(gf.grad.numpy(), g.grad.numpy(), atol=1e-12)


def test_grid_sample_cpu_kernels_take_empty_input_and_refuse_bad_input():
    from ferro._C import resampling_kernels as rk
    from ferro.errors import ArgumentError

    x, grid = np.ones((2, 0, 3, 3)), np.full((2, 2, 2, 2), 0.25)
    assert rk.grid_sample_fwd(x, grid, "bilinear", "zeros", False).shape == (2, 0, 2, 2)
    gx, gg = rk.grid_sample_bwd(np.ones((2, 0, 2, 2)), x, grid, "bilinear", "zeros", False)
    assert gx.shape == (2, 0, 3, 3)
    np.testing.assert_array_equal(gg, np.zeros((2, 2, 2, 2)))  # no channel: zero
    x, no_points = np.ones((2, 1, 3, 3)), np.zeros((2, 0, 3, 2))
    assert rk.grid_sample_fwd(x, no_points, "nearest", "zeros", True).shape == (2, 1, 0, 3)
    gx, gg = rk.grid_sample_bwd(np.zeros((2, 1, 0, 3)), x, no_points, "bilinear", "border", True)
    np.testing.assert_array_equal(gx, np.zeros((2, 1, 3, 3)))
    assert gg.shape == (2, 0, 3, 2)
    x, grid = np.zeros((1, 2, 4, 4)), np.zeros((1, 3, 3, 2))
    args = ("bilinear", "zeros", False)
    with pytest.raises(DtypeError, match="one dtype"):
        rk.grid_sample_fwd(x, grid.astype(np.float32), *args)
    with pytest.raises(DtypeError, match="native byte order"):
        rk.grid_sample_fwd(x, grid.astype(">f8"), *args)
    with pytest.raises(ShapeError, match="C-contiguous"):
        rk.grid_sample_fwd(x.swapaxes(2, 3), grid, *args)
    with pytest.raises(ShapeError, match="grid"):
        rk.grid_sample_fwd(x, np.zeros((1, 3, 3, 3)), *args)
    with pytest.raises(ShapeError, match="4-D or 5-D"):
        rk.grid_sample_fwd(x[0], grid[0], *args)
    with pytest.raises(ArgumentError, match="padding_mode"):
        rk.grid_sample_fwd(x, grid, "bilinear", "wrap", False)
    with pytest.raises(ArgumentError, match="mode"):
        rk.grid_sample_fwd(x, grid, "bicubic", "zeros", False)
    with pytest.raises(ShapeError, match=r"gy must have shape \(1, 2, 3, 3\)"):
        rk.grid_sample_bwd(np.zeros((1, 2, 3, 4)), x, grid, *args)


@pytest.mark.parametrize(
    "name,index",
    [("interpolate", 15), ("grid_sample", 0), ("deform_conv2d", 2), ("affine_grid", 2)],
)
def test_second_derivatives_through_the_engine(name, index):
    # create_graph=True runs differentiable_backward: gradgradcheck against central differences.
    from ferro.testing import gradgradcheck

    sample = BY_NAME[name].samples(np.random.default_rng(0))[index]
    args = [
        ferro.tensor(a, requires_grad=True) if isinstance(a, np.ndarray) else a for a in sample.args
    ]
    pos = [k for k, a in enumerate(args) if isinstance(a, ferro.Tensor)]

    def fn(*tensors):
        call = list(args)
        for k, t in zip(pos, tensors, strict=True):
            call[k] = t
        return BY_NAME[name].fn(*call, **sample.kwargs)

    assert gradgradcheck(fn, tuple(args[k] for k in pos))


def test_deform_conv2d_with_zero_offset_equals_ferro_conv2d_and_its_gradients():
    rng = np.random.default_rng(8)
    x, w, b = (
        rng.standard_normal((2, 4, 6, 5)),
        rng.standard_normal((6, 2, 3, 3)),
        rng.standard_normal(6),
    )
    ins = [ferro.tensor(a, requires_grad=True) for a in (x, w, b)]
    ref = [ferro.tensor(a, requires_grad=True) for a in (x, w, b)]
    offset = ferro.zeros(2, 18, 3, 3, dtype=ferro.float64)
    y = F.deform_conv2d(ins[0], offset, ins[1], ins[2], stride=2, padding=1)
    want = F.conv2d(ref[0], ref[1], ref[2], stride=2, padding=1, groups=2)
    np.testing.assert_allclose(y.detach().numpy(), want.detach().numpy(), atol=1e-12)
    gy = ferro.tensor(rng.standard_normal(y.shape))
    y.backward(gy)
    want.backward(gy)
    for a, r in zip(ins, ref, strict=True):
        np.testing.assert_allclose(a.grad.numpy(), r.grad.numpy(), atol=1e-11)


@pytest.mark.torch
@pytest.mark.parametrize(
    "shape,kw",
    [
        ((1, 2, 300), {"size": 701, "mode": "linear", "align_corners": False}),
        ((1, 1, 260, 3), {"size": (600, 5), "mode": "bicubic", "align_corners": True}),
        ((1, 2, 1000), {"size": 300, "mode": "area"}),
        ((1, 1, 400, 2), {"scale_factor": (2.3, 1.0), "mode": "nearest"}),
        ((1, 1, 2, 2, 350), {"scale_factor": 1.7, "mode": "trilinear"}),
    ],
)
def test_large_axes_resample_by_taps_as_torch_does(shape, kw):
    import torch
    import torch.nn.functional as TF

    rng = np.random.default_rng(9)
    x = rng.standard_normal(shape)
    xt = torch.tensor(x, requires_grad=True)
    yt = TF.interpolate(xt, **kw)
    gy = rng.standard_normal(tuple(yt.shape))
    yt.backward(torch.tensor(gy))
    xf = ferro.tensor(x, requires_grad=True)
    yf = F.interpolate(xf, **kw)
    assert any(s[2] * s[3] > resampling._DENSE_MAX for s in yf.grad_fn.plan)
    yf.backward(ferro.tensor(gy))
    np.testing.assert_allclose(yf.detach().numpy(), yt.detach().numpy(), atol=1e-12)
    if kw["mode"] != "nearest":  # PyTorch's float64 nearest backward rounds its indices in
        # float32, unlike its forward (69 / 2.3): ferro's is the forward's transpose
        np.testing.assert_allclose(xf.grad.numpy(), xt.grad.numpy(), atol=1e-11)
    assert np.isclose((yf.detach().numpy() * gy).sum(), (x * xf.grad.numpy()).sum())
    # the differentiable backward takes the same taps (index_add)
    node = yf.grad_fn
    g = resampling._interpolate_differentiable_backward(node, ferro.tensor(gy))
    np.testing.assert_allclose(g.detach().numpy(), xf.grad.numpy(), atol=1e-11)
