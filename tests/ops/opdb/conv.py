"""Op database entries for ferro/ops/conv.py, with plain NumPy loop references.

The references loop over output positions (convolution, unfold) or input positions
(transposed convolution, fold) and kernel offsets, one dot product at a time: nothing of the
im2col/col2im machinery under test.
"""

from __future__ import annotations

import itertools

import numpy as np

import ferro
from opdb.core import OpInfo, Sample


def _tup(v, nd):
    return (v,) * nd if isinstance(v, int) else tuple(v)


def _same_pads(kernel, dilation):
    total = [d * (k - 1) for d, k in zip(dilation, kernel, strict=True)]
    return [(t // 2, t - t // 2) for t in total]


def conv_ref(x, w, b, stride=1, padding=0, dilation=1, groups=1):
    """Direct convolution: y[n, o, l] = sum over (c, k) of x_pad[n, c, l*s + k*d] w[o, c, k]."""
    nd = w.ndim - 2
    unbatched = x.ndim == nd + 1
    if unbatched:
        x = x[None]
    stride, dilation = _tup(stride, nd), _tup(dilation, nd)
    kernel = w.shape[2:]
    if padding == "valid":
        pads = [(0, 0)] * nd
    elif padding == "same":
        pads = _same_pads(kernel, dilation)
    else:
        pads = [(p, p) for p in _tup(padding, nd)]
    xpad = np.pad(x, [(0, 0), (0, 0), *pads])
    n, c = x.shape[:2]
    o, cg = w.shape[:2]
    og = o // groups
    out = [
        (xpad.shape[2 + i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1 for i in range(nd)
    ]
    y = np.zeros((n, o, *out), dtype=x.dtype)
    for pos in itertools.product(*map(range, out)):
        for k in itertools.product(*map(range, kernel)):
            idx = tuple(pos[i] * stride[i] + k[i] * dilation[i] for i in range(nd))
            for g in range(groups):
                xs = xpad[(slice(None), slice(g * cg, (g + 1) * cg), *idx)]  # (n, cg)
                ws = w[(slice(g * og, (g + 1) * og), slice(None), *k)]  # (og, cg)
                y[(slice(None), slice(g * og, (g + 1) * og), *pos)] += xs @ ws.T
    if b is not None:
        y += b.reshape((1, -1) + (1,) * nd)
    return y[0] if unbatched else y


def conv_transpose_ref(x, w, b, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """Direct transposed convolution: each input element scatters x[n, c, l] w[c, o, k] to
    output position l*s + k*d - padding."""
    nd = w.ndim - 2
    unbatched = x.ndim == nd + 1
    if unbatched:
        x = x[None]
    stride, dilation = _tup(stride, nd), _tup(dilation, nd)
    padding, output_padding = _tup(padding, nd), _tup(output_padding, nd)
    kernel = w.shape[2:]
    n, c = x.shape[:2]
    cg, og = c // groups, w.shape[1]
    size = x.shape[2:]
    out = [
        (size[i] - 1) * stride[i]
        - 2 * padding[i]
        + dilation[i] * (kernel[i] - 1)
        + output_padding[i]
        + 1
        for i in range(nd)
    ]
    full = np.zeros((n, og * groups, *[o + 2 * p for o, p in zip(out, padding, strict=True)]))
    for pos in itertools.product(*map(range, size)):
        for k in itertools.product(*map(range, kernel)):
            idx = tuple(pos[i] * stride[i] + k[i] * dilation[i] for i in range(nd))
            for g in range(groups):
                xs = x[(slice(None), slice(g * cg, (g + 1) * cg), *pos)]  # (n, cg)
                ws = w[(slice(g * cg, (g + 1) * cg), slice(None), *k)]  # (cg, og)
                full[(slice(None), slice(g * og, (g + 1) * og), *idx)] += xs @ ws
    crop = tuple(slice(p, p + o) for p, o in zip(padding, out, strict=True))
    y = full[(slice(None), slice(None), *crop)].astype(x.dtype)
    if b is not None:
        y += b.reshape((1, -1) + (1,) * nd)
    return y[0] if unbatched else y


def _fold_geom(kernel_size, dilation, padding, stride):
    return (_tup(kernel_size, 2), _tup(dilation, 2), _tup(padding, 2), _tup(stride, 2))


def unfold_ref(x, kernel_size, dilation=1, padding=0, stride=1):
    unbatched = x.ndim == 3
    if unbatched:
        x = x[None]
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = _fold_geom(kernel_size, dilation, padding, stride)
    xpad = np.pad(x, [(0, 0), (0, 0), (ph, ph), (pw, pw)])
    n, c, hp, wp = xpad.shape
    oh, ow = (hp - dh * (kh - 1) - 1) // sh + 1, (wp - dw * (kw - 1) - 1) // sw + 1
    y = np.zeros((n, c * kh * kw, oh * ow), dtype=x.dtype)
    for ch, i, j, a, bb in itertools.product(range(c), range(kh), range(kw), range(oh), range(ow)):
        y[:, (ch * kh + i) * kw + j, a * ow + bb] = xpad[:, ch, a * sh + i * dh, bb * sw + j * dw]
    return y[0] if unbatched else y


def fold_ref(x, output_size, kernel_size, dilation=1, padding=0, stride=1):
    unbatched = x.ndim == 2
    if unbatched:
        x = x[None]
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = _fold_geom(kernel_size, dilation, padding, stride)
    h, wd = _tup(output_size, 2)
    n = x.shape[0]
    c = x.shape[1] // (kh * kw)
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    y = np.zeros((n, c, h + 2 * ph, wd + 2 * pw), dtype=x.dtype)
    for ch, i, j, a, bb in itertools.product(range(c), range(kh), range(kw), range(oh), range(ow)):
        y[:, ch, a * sh + i * dh, bb * sw + j * dw] += x[:, (ch * kh + i) * kw + j, a * ow + bb]
    y = y[:, :, ph : ph + h, pw : pw + wd]
    return y[0] if unbatched else y


def conv_fn(x, w, b, **kw):
    return getattr(ferro, f"conv{w.ndim - 2}d")(x, w, b, **kw)


def conv_transpose_fn(x, w, b, **kw):
    return getattr(ferro, f"conv_transpose{w.ndim - 2}d")(x, w, b, **kw)


def _n(rng, *shape):
    return rng.normal(size=shape)


def conv_samples(rng):
    """(input shape, (C_out, kernel), bias, kwargs, label) covering the corners."""
    cases = [
        ((2, 3, 7), (4, 3), True, {}, "1d"),
        ((1, 1, 6), (1, 2), False, {"stride": 2}, "1d batch1 channel1 stride"),
        ((2, 4, 9), (6, 3), True, {"padding": 2, "dilation": 2, "groups": 2}, "1d dil groups"),
        ((3, 5), (4, 3), True, {"padding": 1}, "1d unbatched"),
        ((2, 3, 6, 5), (4, 3), True, {"padding": 1}, "2d pad"),
        ((2, 2, 7, 6), (3, (3, 2)), True, {"stride": (2, 1), "padding": (1, 0)}, "2d rect"),
        ((1, 2, 8, 7), (2, 3), False, {"dilation": (2, 3), "padding": 2}, "2d dilation"),
        ((2, 4, 5, 5), (4, 3), True, {"groups": 4, "padding": 1}, "2d depthwise"),
        ((2, 3, 6, 6), (6, 3), True, {"groups": 3, "stride": 2}, "2d depthwise x2"),
        ((2, 4, 5, 6), (6, 1), True, {"groups": 2}, "2d 1x1 grouped"),
        # 1x1, unpadded: one GEMM per sample (conv.py's _pointwise; strided: on the points
        # read), any dims.
        ((2, 4, 5, 6), (3, 1), True, {"stride": 2}, "2d 1x1 strided"),
        ((2, 3, 5, 4, 7), (2, 1), True, {"stride": (2, 1, 3)}, "3d 1x1 strided"),
        ((1, 2, 6), (3, 1), False, {"stride": 4}, "1d 1x1 strided"),
        ((2, 4, 5, 6), (3, 1), True, {}, "2d 1x1"),
        ((2, 3, 2, 3, 2), (2, 1), False, {"dilation": 2}, "3d 1x1 dilated"),
        ((4, 7), (3, 1), True, {"padding": "same"}, "1d 1x1 same unbatched"),
        ((0, 3, 4, 4), (2, 1), True, {}, "2d 1x1 empty batch"),
        # C_out >= n * L: one chunk, each GEMM split by rows (conv.py, Note [Weight-bound
        # convolutions]; the input gradient through col2im).
        ((2, 3, 2, 2), (8, 3), True, {"padding": 1}, "2d weight-bound"),
        ((2, 3, 3, 3), (8, 3), False, {"padding": 1, "stride": 2}, "2d weight-bound strided"),
        # C_out <= C_in / 4, stride 1, a large kernel: the forward from the output side (col2im
        # of the weight's transpose times x) and the weight gradient from gy's columns
        # (conv.py's _output_side).
        ((2, 8, 6, 5), (2, 3), True, {"padding": 1}, "2d output-side"),
        ((1, 8, 7, 6), (2, (3, 4)), False, {"padding": "same", "dilation": (2, 1)}, "2d out-side"),
        ((2, 12, 11), (3, 9), True, {"padding": 4}, "1d output-side"),
        ((1, 4, 4, 3, 4), (1, 3), True, {"padding": (1, 0, 2)}, "3d output-side"),
        ((2, 3, 6, 5), (2, 4), True, {"padding": "same"}, "2d same even kernel"),
        ((2, 3, 6, 5), (2, 3), True, {"padding": "same", "dilation": 2}, "2d same dil"),
        ((2, 3, 4, 4), (2, 4), True, {"padding": "valid"}, "2d valid"),
        ((0, 3, 5, 5), (2, 3), True, {}, "2d empty batch"),
        ((1, 2, 4, 4, 5), (3, 3), True, {"padding": 1, "stride": (1, 2, 1)}, "3d"),
        ((2, 2, 4, 5, 4), (2, (2, 1, 3)), False, {"groups": 2, "dilation": (1, 2, 1)}, "3d dw"),
        # 3x3 stride 1, 16 channels, outputs >= 8x8: Winograd F(2x2, 3x3) on the CPU (odd
        # sizes: cropped tiles), forward and both gradients.
        ((1, 16, 9, 8), (16, 3), True, {"padding": 1}, "2d winograd odd"),
        ((1, 16, 10, 11), (18, 3), False, {}, "2d winograd valid"),
        # 3-d Winograd (channels-last F(4x4x4, 3x3x3)): outputs >= 8 in every dim, odd depth.
        ((1, 16, 9, 8, 8), (16, 3), True, {"padding": 1}, "3d winograd odd"),
    ]
    out = []
    for shape, (o, k), bias, kw, label in cases:
        nd = len(shape) - 2 if len(shape) > 2 and not label.endswith("unbatched") else 1
        c = shape[1] if not label.endswith("unbatched") else shape[0]
        kernel = _tup(k, nd)
        x, w = _n(rng, *shape), _n(rng, o, c // kw.get("groups", 1), *kernel)
        if "winograd" in label:
            # Outputs and weight gradients of order 1 (the override parity test compares
            # float32 with an absolute 2e-6, and Winograd sums in another order than im2col).
            w /= np.sqrt(w[0].size)
            x /= 8 if nd == 2 else 64  # 3-d: 8x the outputs summed per weight gradient
        out.append(Sample((x, w, _n(rng, o) if bias else None), dict(kw), label=label))
    out.append(
        Sample(
            (_n(rng, 2, 3, 5, 6), _n(rng, 4, 3, 3, 2), _n(rng, 4)),
            {"padding": 1},
            noncontig=True,
            label="noncontig",
        )
    )
    out.append(
        Sample(
            (_n(rng, 2, 3, 5, 6), _n(rng, 4, 3, 1, 1), _n(rng, 4)),
            {},
            noncontig=True,
            label="1x1 noncontig",
        )
    )
    return out


def conv_transpose_samples(rng):
    cases = [
        ((2, 3, 5), (3, 4, 3), True, {}, "1d"),
        ((1, 1, 4), (1, 1, 2), False, {"stride": 2}, "1d batch1 channel1 stride"),
        ((2, 4, 5), (4, 3, 3), True, {"stride": 2, "padding": 1, "output_padding": 1}, "1d opad"),
        ((2, 4, 5), (4, 2, 3), True, {"groups": 2, "dilation": 2, "padding": 1}, "1d dil groups"),
        ((3, 4), (3, 2, 3), True, {"stride": 2}, "1d unbatched"),
        ((2, 3, 4, 3), (3, 2, 3, 3), True, {"stride": 2, "padding": 1}, "2d stride pad"),
        (
            (2, 2, 3, 4),
            (2, 3, 2, 3),
            True,
            {"stride": (2, 3), "output_padding": (1, 2), "dilation": (1, 2)},
            "2d rect opad",
        ),
        ((2, 4, 4, 4), (4, 1, 3, 3), True, {"groups": 4, "padding": 1}, "2d depthwise"),
        ((2, 2, 3, 3), (2, 3, 3, 3), True, {"groups": 2, "stride": 2}, "2d depthwise x3"),
        ((2, 4, 3, 4), (4, 3, 1, 1), True, {}, "2d 1x1"),
        ((1, 2, 2, 3, 2), (2, 2, 2, 3, 2), True, {"stride": (2, 1, 2), "padding": (0, 1, 0)}, "3d"),
        ((0, 2, 3, 3), (2, 2, 2, 2), True, {}, "2d empty batch"),
        ((2, 8, 2, 2), (8, 3, 3, 3), True, {"padding": 1}, "2d weight-bound"),
        ((2, 8, 2, 2), (8, 3, 4, 4), False, {"stride": 2, "padding": 1}, "2d weight-bound x2"),
        ((1, 16, 8, 9), (16, 16, 3, 3), True, {"padding": 1}, "2d winograd"),
    ]
    out = []
    for shape, wshape, bias, kw, label in cases:
        o = wshape[1] * kw.get("groups", 1)
        x, w = _n(rng, *shape), _n(rng, *wshape)
        if "winograd" in label:  # as for conv_samples
            w /= np.sqrt(w[0].size)
            x /= 8
        out.append(
            Sample(
                (x, w, _n(rng, o) if bias else None),
                dict(kw),
                label=label,
            )
        )
    out.append(
        Sample(
            (_n(rng, 2, 3, 4, 5), _n(rng, 3, 2, 3, 2), None),
            {"stride": 2},
            noncontig=True,
            label="noncontig",
        )
    )
    return out


def unfold_samples(rng):
    return [
        Sample((_n(rng, 2, 3, 5, 6),), {"kernel_size": 2}, label="k2"),
        Sample(
            (_n(rng, 1, 2, 7, 6),),
            {"kernel_size": (3, 2), "dilation": (2, 1), "padding": 1, "stride": (2, 3)},
            label="all args",
        ),
        Sample((_n(rng, 2, 4, 4),), {"kernel_size": 3, "padding": 1}, label="unbatched"),
        Sample((_n(rng, 2, 3, 5, 4),), {"kernel_size": 2, "stride": 2}, noncontig=True),
    ]


def fold_samples(rng):
    return [
        Sample((_n(rng, 2, 12, 20),), {"output_size": (5, 6), "kernel_size": 2}, label="k2"),
        Sample(
            (_n(rng, 1, 12, 9),),
            {
                "output_size": (7, 6),
                "kernel_size": (3, 2),
                "dilation": (2, 1),
                "padding": 1,
                "stride": (2, 3),
            },
            label="all args",
        ),
        Sample(
            (_n(rng, 18, 16),),
            {"output_size": 4, "kernel_size": 3, "padding": 1},
            label="unbatched",
        ),
        Sample(
            (_n(rng, 2, 8, 4),),
            {"output_size": (5, 4), "kernel_size": 2, "stride": 2},
            noncontig=True,
            label="noncontig",
        ),
    ]


ENTRIES = [
    OpInfo("conv", conv_fn, conv_ref, conv_samples, func="conv2d", fwd_rtol32=1e-4),
    OpInfo(
        "conv_transpose",
        conv_transpose_fn,
        conv_transpose_ref,
        conv_transpose_samples,
        func="conv_transpose2d",
        fwd_rtol32=1e-4,
    ),
    OpInfo("unfold", ferro.unfold, unfold_ref, unfold_samples),
    OpInfo("fold", ferro.fold, fold_ref, fold_samples),
]
