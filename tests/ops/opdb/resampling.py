"""Op database entries for ferro/ops/resampling.py, with plain NumPy references.

The references follow PyTorch's (and torchvision's) definitions point by point, in loops over
output elements: they share no code with the ops.
"""

from __future__ import annotations

import math

import numpy as np

import ferro
from opdb.core import OpInfo, Sample, uniform

# ---- interpolate ---------------------------------------------------------------------------


def _interp_weights(mode, n_in, n_out, align, scale):
    """(n_out, n_in): output o as a weighted sum of inputs, one output at a time."""
    w = np.zeros((n_out, n_in))
    ratio = 1.0 / scale if scale else n_in / n_out
    for o in range(n_out):
        if mode in ("nearest", "nearest-exact"):
            at = o + 0.5 if mode == "nearest-exact" else o
            w[o, min(int(np.floor(np.float32(at) * np.float32(ratio))), n_in - 1)] = 1
            continue
        if mode == "area":
            lo, hi = (o * n_in) // n_out, -((-(o + 1) * n_in) // n_out)
            w[o, lo:hi] = 1 / (hi - lo)
            continue
        if align:
            src = o * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        else:
            src = (o + 0.5) * ratio - 0.5
        if mode == "bicubic":
            i = math.floor(src)
            t = src - i
            a = -0.75
            taps = [t + 1, t, 1 - t, 2 - t]
            for k, d in enumerate(taps):
                if d <= 1:
                    c = (a + 2) * d**3 - (a + 3) * d**2 + 1
                else:
                    c = a * d**3 - 5 * a * d**2 + 8 * a * d - 4 * a
                w[o, min(max(i - 1 + k, 0), n_in - 1)] += c
            continue
        src = max(src, 0.0)
        i = min(math.floor(src), n_in - 1)
        t = min(src - i, 1.0)
        w[o, i] += 1 - t
        w[o, min(i + 1, n_in - 1)] += t
    return w


def _interp_ref(
    x, size=None, scale_factor=None, mode="nearest", align_corners=None, recompute_scale_factor=None
):
    dims = x.ndim - 2
    if size is not None:
        out = (size,) * dims if isinstance(size, int) else tuple(size)
        scales = (None,) * dims
    else:
        sf = (scale_factor,) * dims if np.isscalar(scale_factor) else tuple(scale_factor)
        out = tuple(math.floor(n * s) for n, s in zip(x.shape[2:], sf, strict=True))
        scales = (None,) * dims if recompute_scale_factor else sf
    y = x.astype(np.float64)
    for d in range(dims):
        w = _interp_weights(mode, x.shape[2 + d], out[d], bool(align_corners), scales[d])
        if mode == "nearest" and dims == 2 and out[d] in (x.shape[2 + d], 2 * x.shape[2 + d]):
            w = np.eye(x.shape[2 + d]).repeat(out[d] // x.shape[2 + d], axis=0)
        y = np.moveaxis(np.tensordot(w, np.moveaxis(y, 2 + d, 0), axes=1), 0, 2 + d)
    return y.astype(x.dtype)


def _interp_samples(rng):
    s = []
    for mode, dims in [
        ("nearest", 1),
        ("nearest", 2),
        ("nearest", 3),
        ("nearest-exact", 2),
        ("area", 2),
        ("area", 3),
        ("linear", 1),
        ("bilinear", 2),
        ("bicubic", 2),
        ("trilinear", 3),
    ]:
        shape = (2, 2) + (5, 4, 3)[:dims] if dims < 3 else (1, 2, 3, 4, 2)
        align = {} if mode in ("nearest", "nearest-exact", "area") else {"align_corners": False}
        s.append(
            Sample((uniform(rng, shape),), {"scale_factor": 2, "mode": mode, **align}, label=mode)
        )
        size = (7, 3, 5)[:dims]
        s.append(Sample((uniform(rng, shape),), {"size": size, "mode": mode}, label=f"{mode} size"))
        if align:
            s.append(
                Sample(
                    (uniform(rng, shape),),
                    {"scale_factor": 1.5, "mode": mode, "align_corners": True},
                    label=f"{mode} align_corners",
                )
            )
    s.append(
        Sample(
            (uniform(rng, (1, 3, 6, 5)),),
            {"scale_factor": (0.5, 1.7), "mode": "bilinear", "recompute_scale_factor": True},
            label="downsample recompute",
        )
    )
    s.append(
        Sample(
            (uniform(rng, (2, 1, 4, 3)),),
            {"scale_factor": 0.6, "mode": "bicubic"},
            noncontig=True,
            label="noncontig",
        )
    )
    return s


# ---- grid_sample, affine_grid --------------------------------------------------------------


def _unnormalize(g, n, align):
    return (g + 1) / 2 * (n - 1) if align else ((g + 1) * n - 1) / 2


def _reflect(c, lo2, hi2):
    if lo2 == hi2:
        return 0.0
    lo, span = lo2 / 2, (hi2 - lo2) / 2
    c = abs(c - lo)
    flips, extra = math.floor(c / span), math.fmod(c, span)
    return extra + lo if flips % 2 == 0 else span - extra + lo


def _source(g, n, align, padding):
    c = _unnormalize(g, n, align)
    if padding == "reflection":
        c = _reflect(c, 0, 2 * (n - 1)) if align else _reflect(c, -1, 2 * n - 1)
    if padding in ("border", "reflection"):
        c = min(max(c, 0.0), n - 1.0)
    return c


def _grid_sample_ref(x, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    n, c = x.shape[:2]
    sizes = x.shape[2:]
    d = len(sizes)
    out = np.zeros((n, c) + grid.shape[1:-1])
    for b in range(n):
        for pos in np.ndindex(*grid.shape[1:-1]):
            # grid[..., 0] is the last spatial axis
            src = [
                _source(grid[(b, *pos, d - 1 - k)], sizes[k], bool(align_corners), padding_mode)
                for k in range(d)
            ]
            if mode == "nearest":
                idx = [int(np.rint(v)) for v in src]
                if all(0 <= i < s for i, s in zip(idx, sizes, strict=True)):
                    out[(b, slice(None), *pos)] = x[(b, slice(None), *idx)]
                continue
            lo = [math.floor(v) for v in src]
            for bits in np.ndindex(*(2,) * d):
                idx = [i + bit for i, bit in zip(lo, bits, strict=True)]
                if not all(0 <= i < s for i, s in zip(idx, sizes, strict=True)):
                    continue
                w = 1.0
                for v, i in zip(src, idx, strict=True):
                    w *= 1 - abs(v - i)
                out[(b, slice(None), *pos)] += w * x[(b, slice(None), *idx)]
    return out.astype(x.dtype)


def _grid_for(rng, n, out, sizes, align):
    """A grid whose pixel positions keep off the integers and half-integers, where bilinear
    sampling, rounding, clipping and reflection have kinks (central differences there are
    meaningless); some fall outside the input."""
    comps = []
    for m in reversed(sizes):  # grid[..., 0] addresses the last spatial axis
        whole = rng.integers(-2, m + 1, size=(n, *out))
        frac = rng.uniform(0.1, 0.4, size=(n, *out)) + 0.5 * rng.integers(0, 2, size=(n, *out))
        c = whole + frac
        comps.append(2 * c / (m - 1) - 1 if align else (2 * c + 1) / m - 1)
    return np.stack(comps, axis=-1)


def _grid_samples(rng):
    s = []
    for mode in ("bilinear", "nearest"):
        for pad in ("zeros", "border", "reflection"):
            for align in (False, True):
                s.append(
                    Sample(
                        (uniform(rng, (2, 2, 4, 5)), _grid_for(rng, 2, (3, 3), (4, 5), align)),
                        {"mode": mode, "padding_mode": pad, "align_corners": align},
                        label=f"{mode} {pad} align={align}",
                    )
                )
    s.append(
        Sample(
            (uniform(rng, (1, 2, 3, 4, 3)), _grid_for(rng, 1, (2, 3, 3), (3, 4, 3), False)),
            {"align_corners": False, "padding_mode": "border"},
            label="5-D",
        )
    )
    s.append(
        Sample(
            (uniform(rng, (2, 3, 3, 4)), _grid_for(rng, 2, (2, 2), (3, 4), True)),
            {"align_corners": True},
            noncontig=True,
            label="noncontig",
        )
    )
    return s


def _affine_grid_ref(theta, size, align_corners=None):
    n, d = theta.shape[0], theta.shape[1]
    sizes = size[2:]
    out = np.zeros((n, *sizes, d))
    for pos in np.ndindex(*sizes):
        base = []
        for k in reversed(range(d)):  # x first
            m = sizes[k]
            v = -1 + 2 * pos[k] / (m - 1) if m > 1 else 0.0
            base.append(v if align_corners else v * (m - 1) / m)
        out[(slice(None), *pos)] = theta @ np.array(base + [1.0])
    return out.astype(theta.dtype)


def _affine_samples(rng):
    return [
        Sample((uniform(rng, (2, 2, 3)), (2, 3, 4, 5)), {"align_corners": False}, label="2-D"),
        Sample((uniform(rng, (1, 2, 3)), (1, 1, 3, 1)), {"align_corners": True}, label="2-D ac"),
        Sample((uniform(rng, (2, 3, 4)), (2, 1, 2, 3, 4)), {"align_corners": True}, label="3-D"),
    ]


# ---- deform_conv2d -------------------------------------------------------------------------


def _bilinear_zero(img, y, x):
    """torchvision's bilinear read of a (H, W) image: zero outside."""
    h, w = img.shape
    if y <= -1 or y >= h or x <= -1 or x >= w:
        return 0.0
    y0, x0 = math.floor(y), math.floor(x)
    val = 0.0
    for yy, wy in ((y0, 1 - (y - y0)), (y0 + 1, y - y0)):
        for xx, wx in ((x0, 1 - (x - x0)), (x0 + 1, x - x0)):
            if 0 <= yy < h and 0 <= xx < w:
                val += wy * wx * img[yy, xx]
    return val


def deform_conv2d_ref(x, offset, weight, bias=None, stride=1, padding=0, dilation=1, mask=None):
    sh, sw = (stride, stride) if isinstance(stride, int) else stride
    ph, pw = (padding, padding) if isinstance(padding, int) else padding
    dh, dw = (dilation, dilation) if isinstance(dilation, int) else dilation
    n, cin, _, _ = x.shape
    cout, cin_g, kh, kw = weight.shape
    groups = cin // cin_g
    ho, wo = offset.shape[2:]
    og = offset.shape[1] // (2 * kh * kw)
    cols = np.zeros((n, cin, kh, kw, ho, wo))
    for b in range(n):
        for c in range(cin):
            g = c // (cin // og)
            for i in range(kh):
                for j in range(kw):
                    k = i * kw + j
                    for oy in range(ho):
                        for ox in range(wo):
                            dy = offset[b, g * 2 * kh * kw + 2 * k, oy, ox]
                            dx = offset[b, g * 2 * kh * kw + 2 * k + 1, oy, ox]
                            v = _bilinear_zero(
                                x[b, c], oy * sh - ph + i * dh + dy, ox * sw - pw + j * dw + dx
                            )
                            if mask is not None:
                                v *= mask[b, g * kh * kw + k, oy, ox]
                            cols[b, c, i, j, oy, ox] = v
    out = np.zeros((n, cout, ho, wo))
    per = cout // groups
    for gi in range(groups):
        w = weight[gi * per : (gi + 1) * per]
        c = cols[:, gi * cin_g : (gi + 1) * cin_g]
        out[:, gi * per : (gi + 1) * per] = np.einsum("ocij,ncijyx->noyx", w, c)
    if bias is not None:
        out += bias[None, :, None, None]
    return out.astype(x.dtype)


def _offsets(rng, shape, scale=1.5):
    """Offsets whose sampling positions stay away from the integers (bilinear kinks)."""
    off = rng.uniform(-scale, scale, size=shape)
    frac = off % 1
    return np.where(np.abs(frac - 0.5) < 0.4, off, off + 0.2)


def _deform_samples(rng):
    return [
        Sample(
            (uniform(rng, (2, 2, 4, 4)), _offsets(rng, (2, 18, 4, 4)), uniform(rng, (3, 2, 3, 3))),
            {"padding": 1},
            label="v1",
        ),
        Sample(
            (
                uniform(rng, (1, 4, 5, 4)),
                _offsets(rng, (1, 2 * 2 * 4, 3, 1)),
                uniform(rng, (4, 2, 2, 2)),
                uniform(rng, (4,)),
            ),
            {"stride": 2, "padding": (1, 0), "dilation": (1, 2)},
            label="groups offset_groups bias stride dilation",
        ),
        Sample(
            (
                uniform(rng, (2, 2, 4, 3)),
                _offsets(rng, (2, 2 * 4, 3, 2)),
                uniform(rng, (2, 2, 2, 2)),
            ),
            {"mask": None},
            label="2x2",
        ),
        Sample(
            (uniform(rng, (1, 3, 3, 3)), _offsets(rng, (1, 8, 2, 2)), uniform(rng, (2, 3, 2, 2))),
            noncontig=True,
            label="noncontig",
        ),
    ]


def _deform_mask_call(x, offset, weight, bias, mask, **kw):
    return ferro.nn.functional.deform_conv2d(x, offset, weight, bias, mask=mask, **kw)


def _deform_mask_ref(x, offset, weight, bias, mask, **kw):
    return deform_conv2d_ref(x, offset, weight, bias, mask=mask, **kw)


def _deform_mask_samples(rng):
    return [
        Sample(
            (
                uniform(rng, (2, 2, 4, 4)),
                _offsets(rng, (2, 2 * 2 * 9, 2, 2)),
                uniform(rng, (2, 1, 3, 3)),
                uniform(rng, (2,)),
                rng.uniform(0.2, 1.0, (2, 2 * 9, 2, 2)),
            ),
            {"padding": 0, "dilation": 1},
            label="v2 mask",
        )
    ]


ENTRIES = [
    OpInfo("interpolate", ferro.nn.functional.interpolate, _interp_ref, _interp_samples),
    OpInfo(
        "grid_sample",
        ferro.nn.functional.grid_sample,
        _grid_sample_ref,
        _grid_samples,
        fwd_rtol32=1e-4,
    ),
    OpInfo(
        "affine_grid",
        ferro.nn.functional.affine_grid,
        _affine_grid_ref,
        _affine_samples,
    ),
    OpInfo(
        "deform_conv2d",
        ferro.nn.functional.deform_conv2d,
        deform_conv2d_ref,
        _deform_samples,
        fwd_rtol32=1e-4,
    ),
    OpInfo(
        "deform_conv2d_mask",
        _deform_mask_call,
        _deform_mask_ref,
        _deform_mask_samples,
        func="deform_conv2d",
        fwd_rtol32=1e-4,
    ),
]
