"""Convolution: functional ops against PyTorch, the layers (names, init, reprs, state_dict,
padding modes), bad input, and the differentiable backward (issue 14)."""

from __future__ import annotations

import itertools
import math
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import ferro
from ferro import nn
from ferro.errors import ArgumentError, DtypeError, ShapeError
from ferro.nn import functional as F
from ferro.ops import conv as conv_ops

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))
from opdb import BY_NAME  # noqa: E402

# --- PyTorch oracle: forward and the three gradients on random configurations -----------------


def _random_config(rng, nd, transposed):
    groups = int(rng.choice([1, 1, 2, 3]))
    cin = groups * int(rng.integers(1, 3))
    cout = groups * int(rng.integers(1, 3))
    kernel = tuple(int(k) for k in rng.integers(1, 4, size=nd))
    stride = tuple(int(s) for s in rng.integers(1, 3, size=nd))
    dilation = tuple(int(d) for d in rng.integers(1, 3, size=nd))
    padding = tuple(
        int(rng.integers(0, (k - 1) * d + 1)) for k, d in zip(kernel, dilation, strict=True)
    )
    size = tuple(int(s) for s in rng.integers(4, 8 if nd < 3 else 6, size=nd))
    kw = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    if transposed:
        padding = tuple(
            min(p, (k - 1) * d // 2) for p, k, d in zip(padding, kernel, dilation, strict=True)
        )
        kw["padding"] = padding
        kw["output_padding"] = tuple(
            int(rng.integers(0, max(s, d))) for s, d in zip(stride, dilation, strict=True)
        )
        wshape = (cin, cout // groups, *kernel)
    else:
        wshape = (cout, cin // groups, *kernel)
    return (int(rng.integers(1, 4)), cin, *size), wshape, cout, kw


@pytest.mark.torch
@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "conv_transpose"])
@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("seed", range(6))
def test_forward_and_gradients_match_pytorch(nd, transposed, seed):
    import torch

    rng = np.random.default_rng(100 * nd + 10 * transposed + seed)
    xshape, wshape, cout, kw = _random_config(rng, nd, transposed)
    x, w, b = rng.normal(size=xshape), rng.normal(size=wshape), rng.normal(size=cout)
    name = f"conv_transpose{nd}d" if transposed else f"conv{nd}d"
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    fx, fw, fb = (ferro.tensor(a, requires_grad=True) for a in (x, w, b))
    ty = getattr(torch.nn.functional, name)(tx, tw, tb, **kw)
    fy = getattr(F, name)(fx, fw, fb, **kw)
    np.testing.assert_allclose(fy.data, ty.detach().numpy(), rtol=1e-10, atol=1e-10)
    g = rng.normal(size=tuple(ty.shape))
    ty.backward(torch.tensor(g))
    fy.backward(ferro.tensor(g))
    for f, t in ((fx, tx), (fw, tw), (fb, tb)):
        np.testing.assert_allclose(f.grad.data, t.grad.numpy(), rtol=1e-10, atol=1e-10)


@pytest.mark.torch
@pytest.mark.parametrize("padding", ["same", "valid"])
def test_string_padding_matches_pytorch(padding):
    import torch

    rng = np.random.default_rng(3)
    x, w = rng.normal(size=(2, 3, 7, 6)), rng.normal(size=(4, 3, 4, 3))
    want = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), padding=padding, dilation=2)
    got = F.conv2d(ferro.tensor(x), ferro.tensor(w), padding=padding, dilation=2)
    np.testing.assert_allclose(got.data, want.numpy(), rtol=1e-10, atol=1e-10)


@pytest.mark.torch
def test_float32_and_large_batch_chunks_match_pytorch(monkeypatch):
    import torch

    # A workspace of a few columns forces many batch chunks through every path.
    monkeypatch.setattr(conv_ops, "WORKSPACE_BYTES", 4096)
    rng = np.random.default_rng(4)
    x = rng.normal(size=(9, 4, 10, 9)).astype(np.float32)
    w = rng.normal(size=(6, 2, 3, 3)).astype(np.float32)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    fx, fw = ferro.tensor(x, requires_grad=True), ferro.tensor(w, requires_grad=True)
    ty = torch.nn.functional.conv2d(tx, tw, stride=2, padding=1, groups=2)
    fy = F.conv2d(fx, fw, stride=2, padding=1, groups=2)
    assert fy.dtype == np.float32
    np.testing.assert_allclose(fy.data, ty.detach().numpy(), rtol=1e-4, atol=1e-4)
    ty.sum().backward()
    fy.sum().backward()
    np.testing.assert_allclose(fx.grad.data, tx.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(fw.grad.data, tw.grad.numpy(), rtol=1e-4, atol=1e-3)


@pytest.mark.torch
@pytest.mark.parametrize(
    "kw",
    [
        {"kernel_size": 2},
        {"kernel_size": (3, 2), "dilation": (2, 1), "padding": 1, "stride": (2, 3)},
    ],
)
def test_unfold_and_fold_match_pytorch(kw):
    import torch

    rng = np.random.default_rng(5)
    x = rng.normal(size=(2, 3, 7, 8))
    tx, fx = torch.tensor(x, requires_grad=True), ferro.tensor(x, requires_grad=True)
    tc, fc = torch.nn.functional.unfold(tx, **kw), F.unfold(fx, **kw)
    np.testing.assert_allclose(fc.data, tc.detach().numpy())
    tf = torch.nn.functional.fold(tc, (7, 8), **kw)
    ff = F.fold(fc, (7, 8), **kw)
    np.testing.assert_allclose(ff.data, tf.detach().numpy(), rtol=1e-12)
    g = rng.normal(size=x.shape)
    tf.backward(torch.tensor(g))
    ff.backward(ferro.tensor(g))
    np.testing.assert_allclose(fx.grad.data, tx.grad.numpy(), rtol=1e-12)


# --- layers -----------------------------------------------------------------------------------

LAYERS = [
    ("Conv1d", (3, 4, 3), {}, (2, 3, 9)),
    ("Conv1d", (4, 4, 3), {"groups": 4, "padding": "same", "padding_mode": "circular"}, (2, 4, 7)),
    ("Conv2d", (3, 16, 3), {}, (2, 3, 8, 8)),
    ("Conv2d", (4, 6, (3, 2)), {"stride": 2, "padding": 1, "bias": False}, (1, 4, 7, 6)),
    ("Conv2d", (2, 4, 3), {"padding": (1, 2), "padding_mode": "reflect"}, (2, 2, 6, 7)),
    ("Conv2d", (2, 4, 3), {"padding": 1, "padding_mode": "replicate", "dilation": 2}, (2, 2, 6, 7)),
    ("Conv2d", (2, 2, 3), {"padding": (2, 1), "padding_mode": "circular"}, (1, 2, 5, 6)),
    ("Conv3d", (2, 3, 2), {"padding": "valid"}, (1, 2, 4, 4, 3)),
    ("ConvTranspose1d", (3, 2, 3), {"stride": 2, "output_padding": 1}, (2, 3, 5)),
    ("ConvTranspose2d", (4, 6, 3), {"stride": 2, "padding": 1, "groups": 2}, (2, 4, 4, 5)),
    ("ConvTranspose3d", (2, 2, 2), {"dilation": 2, "bias": False}, (1, 2, 3, 3, 2)),
]


@pytest.mark.torch
@pytest.mark.parametrize("case", LAYERS, ids=[f"{c[0]}-{i}" for i, c in enumerate(LAYERS)])
def test_layer_loads_a_pytorch_state_dict_and_matches_its_output(case):
    import torch

    name, args, kw, xshape = case
    t = getattr(torch.nn, name)(*args, **kw).double()
    f = getattr(nn, name)(*args, **kw, dtype=ferro.float64)
    assert repr(f) == repr(t)
    assert [(n, tuple(p.shape)) for n, p in f.named_parameters()] == [
        (n, tuple(p.shape)) for n, p in t.named_parameters()
    ]
    f.load_state_dict({k: ferro.tensor(v.numpy()) for k, v in t.state_dict().items()})
    x = np.random.default_rng(6).normal(size=xshape)
    tx, fx = torch.tensor(x, requires_grad=True), ferro.tensor(x, requires_grad=True)
    ty, fy = t(tx), f(fx)
    np.testing.assert_allclose(fy.data, ty.detach().numpy(), rtol=1e-10, atol=1e-10)
    ty.sum().backward()
    fy.sum().backward()
    np.testing.assert_allclose(fx.grad.data, tx.grad.numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(f.weight.grad.data, t.weight.grad.numpy(), rtol=1e-9, atol=1e-9)


@pytest.mark.torch
def test_conv_transpose_output_size_matches_pytorch():
    import torch

    t = torch.nn.ConvTranspose2d(3, 2, 3, stride=3, padding=1).double()
    f = nn.ConvTranspose2d(3, 2, 3, stride=3, padding=1, dtype=ferro.float64)
    f.load_state_dict({k: ferro.tensor(v.numpy()) for k, v in t.state_dict().items()})
    x = np.random.default_rng(7).normal(size=(1, 3, 4, 4))
    for size in [(10, 10), (11, 12), (1, 2, 12, 10)]:
        want = t(torch.tensor(x), output_size=size).detach().numpy()
        np.testing.assert_allclose(f(ferro.tensor(x), output_size=size).data, want, atol=1e-12)
    with pytest.raises(ShapeError, match="output_size"):
        f(ferro.tensor(x), output_size=(13, 10))


def test_reprs_follow_pytorch():
    assert repr(nn.Conv2d(3, 16, kernel_size=3)) == (
        "Conv2d(3, 16, kernel_size=(3, 3), stride=(1, 1))"
    )
    assert repr(nn.ConvTranspose1d(2, 4, 3, stride=2, output_padding=1, bias=False)) == (
        "ConvTranspose1d(2, 4, kernel_size=(3,), stride=(2,), output_padding=(1,), bias=False)"
    )
    assert repr(nn.Conv1d(4, 4, 3, padding="same", groups=4, padding_mode="reflect")) == (
        "Conv1d(4, 4, kernel_size=(3,), stride=(1,), padding=same, groups=4, padding_mode=reflect)"
    )
    assert repr(nn.Unfold(2, padding=1)) == "Unfold(kernel_size=2, dilation=1, padding=1, stride=1)"
    assert repr(nn.Fold((4, 5), 2)) == (
        "Fold(output_size=(4, 5), kernel_size=2, dilation=1, padding=0, stride=1)"
    )


@pytest.mark.parametrize("cls", [nn.Conv2d, nn.ConvTranspose2d])
def test_default_init_is_kaiming_uniform_with_bias_within_one_over_sqrt_fan_in(cls):
    ferro.manual_seed(0)
    m = cls(8, 16, 3, groups=2)
    fan_in = m.weight.shape[1] * 9
    bound = 1 / math.sqrt(fan_in)  # kaiming_uniform(a=sqrt(5)): sqrt(6 / (6 fan_in))
    w, b = m.weight.data, m.bias.data
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    assert np.abs(b).max() <= bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.1 * bound


def test_circular_padding_mode_wraps_around():
    m = nn.Conv2d(1, 1, 3, padding=(1, 2), padding_mode="circular", bias=False)
    m.weight.data[...] = np.arange(9.0).reshape(1, 1, 3, 3)
    x = np.random.default_rng(8).normal(size=(1, 1, 4, 5)).astype(np.float32)
    wrapped = np.pad(x, [(0, 0), (0, 0), (1, 1), (2, 2)], mode="wrap")
    want = F.conv2d(ferro.tensor(wrapped), m.weight.detach())
    np.testing.assert_allclose(m(ferro.tensor(x)).data, want.data, rtol=1e-6)


def test_unfold_and_fold_layers_run_the_functions():
    x = ferro.tensor(np.random.default_rng(9).normal(size=(2, 3, 6, 5)))
    cols = nn.Unfold(kernel_size=(2, 3), stride=(2, 1))(x)
    np.testing.assert_array_equal(cols.data, F.unfold(x, (2, 3), stride=(2, 1)).data)
    back = nn.Fold((6, 5), kernel_size=(2, 3), stride=(2, 1))(cols)
    np.testing.assert_array_equal(back.data, F.fold(cols, (6, 5), (2, 3), stride=(2, 1)).data)


# --- bad input: typed errors naming the op and the shapes ------------------------------------


def _t(*shape, dtype=np.float64):
    return ferro.tensor(np.ones(shape, dtype=dtype))


@pytest.mark.parametrize(
    "call, err, words",
    [
        (lambda: F.conv2d(_t(3, 8, 8, 1, 1), _t(4, 3, 3, 3)), ShapeError, ["conv2d", "(3, 8, 8"]),
        (lambda: F.conv2d(_t(1, 3, 8, 8), _t(4, 3, 3)), ShapeError, ["conv2d", "(4, 3, 3)"]),
        (lambda: F.conv2d(_t(1, 3, 8, 8), _t(4, 1, 3, 3), groups=2), ShapeError, ["groups=2"]),
        (lambda: F.conv2d(_t(1, 4, 8, 8), _t(3, 2, 3, 3), groups=2), ShapeError, ["divisible"]),
        (lambda: F.conv2d(_t(1, 3, 8, 8), _t(4, 2, 3, 3)), ShapeError, ["(4, 2, 3, 3)", "3"]),
        (lambda: F.conv2d(_t(1, 3, 2, 8), _t(4, 3, 3, 3)), ShapeError, ["conv2d", "(1, 3, 2, 8)"]),
        (lambda: F.conv1d(_t(1, 3, 4), _t(2, 3, 3), dilation=2), ShapeError, ["spans 5"]),
        (lambda: F.conv2d(_t(1, 3, 8, 8), _t(4, 3, 3, 3), _t(3)), ShapeError, ["bias", "(3,)"]),
        (lambda: F.conv2d(_t(1, 3, 8, 8), _t(4, 3, 3, 3), stride=0), ArgumentError, ["stride"]),
        (lambda: F.conv2d(_t(1, 3, 8, 8), _t(4, 3, 3, 3), padding=-1), ArgumentError, ["padding"]),
        (
            lambda: F.conv2d(_t(1, 3, 8, 8), _t(4, 3, 3, 3), stride=2, padding="same"),
            ArgumentError,
            ["strided"],
        ),
        (
            lambda: F.conv2d(_t(1, 3, 8, 8), _t(4, 3, 3, 3, dtype=np.float32)),
            DtypeError,
            ["float64", "float32"],
        ),
        (
            lambda: F.conv_transpose2d(_t(1, 3, 1, 1), _t(3, 2, 1, 1), padding=1),
            ShapeError,
            ["conv_transpose2d", "output size -1"],
        ),
        (
            lambda: F.conv_transpose1d(_t(1, 3, 4), _t(3, 2, 3), stride=2, output_padding=2),
            ArgumentError,
            ["output_padding"],
        ),
        (lambda: F.conv_transpose2d(_t(1, 4, 5, 5), _t(3, 2, 3, 3)), ShapeError, ["4 channels"]),
        (lambda: F.unfold(_t(2, 3), 2), ShapeError, ["unfold", "(2, 3)"]),
        (lambda: F.unfold(_t(1, 1, 2, 2), 3), ShapeError, ["unfold", "no block"]),
        (lambda: F.fold(_t(1, 8, 5), (4, 4), 2), ShapeError, ["fold", "(1, 8, 5)"]),
        (lambda: nn.Conv2d(3, 4, 3, groups=2), ArgumentError, ["in_channels 3"]),
        (lambda: nn.Conv2d(4, 4, 3, padding_mode="mirror"), ArgumentError, ["padding_mode"]),
        (
            lambda: nn.ConvTranspose2d(4, 4, 3, padding_mode="reflect"),
            ArgumentError,
            ["zeros"],
        ),
    ],
)
def test_bad_input_raises_a_typed_error_naming_op_and_shapes(call, err, words):
    with pytest.raises(err) as info:
        call()
    for w in words:
        assert w in str(info.value)


# --- the differentiable backward agrees with backward ----------------------------------------

DOUBLE = {
    "conv": conv_ops.Conv.differentiable_backward,
    "conv_transpose": conv_ops.ConvTranspose.differentiable_backward,
    "unfold": conv_ops._unfold_differentiable_backward,
    "fold": conv_ops._fold_differentiable_backward,
}


def _samples(name):
    # Unbatched samples end in a reshape node; the batched ones test the same code.
    return [
        (name, i)
        for i, s in enumerate(BY_NAME[name].samples(np.random.default_rng(0)))
        if s.grad and "unbatched" not in s.label
    ]


@pytest.mark.parametrize("name, i", [c for name in DOUBLE for c in _samples(name)])
def test_differentiable_backward_matches_backward(name, i):
    """On the op database samples: the gradients computed from ferro ops (for create_graph)
    equal those of the array backward."""
    op = BY_NAME[name]
    sample = op.samples(np.random.default_rng(0))[i]
    args = [
        ferro.tensor(a, requires_grad=True) if isinstance(a, np.ndarray) else a for a in sample.args
    ]
    y = op.fn(*args, **sample.kwargs)
    node = y.grad_fn
    gy = np.random.default_rng(1).normal(size=y.shape)
    want = ferro.ops.registry.REGISTRY[name].backward(node, gy)
    want = want if isinstance(want, tuple) else (want,)
    attrs = ("geom", "in_size", "kernel", "size", "out")
    ctx = types.SimpleNamespace(
        saved=tuple(None if a is None else ferro.tensor(a) for a in node.saved),
        needs_input_grad=node.needs_input_grad,
        **{k: getattr(node, k) for k in attrs if hasattr(node, k)},
    )
    got = DOUBLE[name](ctx, ferro.tensor(gy))
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert (g is None) == (w is None)
        if w is not None:
            assert g.shape == w.shape
            np.testing.assert_allclose(g.data, w, rtol=1e-10, atol=1e-10)


# --- the CPU depthwise kernels (ferro/_C/conv_kernels.pyx) ------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "mult, stride, pad, dilation",
    [(1, (1, 1), 1, (1, 1)), (2, (2, 1), 2, (1, 2)), (3, (2, 3), 0, (2, 1))],
)
def test_depthwise_kernels_match_the_generic_code(dtype, mult, stride, pad, dilation):
    from ferro._C import conv_kernels as K

    rng = np.random.default_rng(10)
    x = rng.normal(size=(2, 3, 9, 8)).astype(dtype)
    w = rng.normal(size=(3 * mult, 1, 3, 2)).astype(dtype)
    pads = ((pad, pad), (pad, pad))
    out = tuple(
        (x.shape[2 + i] + 2 * pad - dilation[i] * (w.shape[2 + i] - 1) - 1) // stride[i] + 1
        for i in range(2)
    )
    geom = (stride, pads, dilation, 3)
    want = conv_ops._conv_forward(np, x, w, *geom, out)
    y = K.depthwise2d_fwd(x, w, stride, pads, dilation, out)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(y, want, **tol)
    gy = rng.normal(size=y.shape).astype(dtype)
    gx, gw = K.depthwise2d_bwd(gy, x, w, stride, pads, dilation, True, True)
    np.testing.assert_allclose(gx, conv_ops._conv_input_grad(np, gy, w, *geom, (9, 8)), **tol)
    np.testing.assert_allclose(gw, conv_ops._conv_weight_grad(np, x, gy, *geom, (3, 2)), **tol)
    assert K.depthwise2d_bwd(gy, x, w, stride, pads, dilation, False, True)[0] is None


def test_depthwise_kernels_refuse_what_they_cannot_read():
    from ferro._C import conv_kernels as K

    x, w = np.ones((1, 2, 5, 5)), np.ones((2, 1, 3, 3))
    args = ((1, 1), ((0, 0), (0, 0)), (1, 1), (3, 3))
    assert K.accepts((x, w)) and not K.accepts((x.T, w)) and not K.accepts((x, w.astype("f4")))
    with pytest.raises(ArgumentError, match="C-contiguous"):
        K.depthwise2d_fwd(np.asfortranarray(x), w, *args)
    with pytest.raises(ArgumentError, match="dtype"):
        K.depthwise2d_fwd(x, w.astype(np.float32), *args)
    with pytest.raises(ShapeError, match="depthwise"):
        K.depthwise2d_fwd(x, np.ones((2, 2, 3, 3)), *args)
    with pytest.raises(ArgumentError, match="geometry"):
        K.depthwise2d_fwd(x, w, (1, 1), ((0, 0), (0, 0)), (1, 1), (4, 3))


# --- the CPU column kernels (im2col / col2im of the GEMM path) --------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_column_kernels_match_the_strided_views(dtype, nd):
    from ferro._C import conv_kernels as K

    rng = np.random.default_rng(11)
    done = 0
    while done < 12:
        size = tuple(int(v) for v in rng.integers(1, 7, nd))
        kernel = tuple(int(v) for v in rng.integers(1, 4, nd))
        stride = tuple(int(v) for v in rng.integers(1, 3, nd))
        dilation = tuple(int(v) for v in rng.integers(1, 3, nd))
        pads = tuple((int(rng.integers(0, 3)), int(rng.integers(0, 3))) for _ in range(nd))
        out = tuple(
            (size[i] + sum(pads[i]) - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1
            for i in range(nd)
        )
        if min(out) < 1:
            continue
        done += 1
        x = rng.normal(size=(2, 3, *size)).astype(dtype)
        padded = conv_ops._padded(np, x, pads)
        want = conv_ops._columns(np, padded, kernel, stride, dilation, out)
        col = np.full_like(want, np.nan)
        assert K.im2col(x, stride, pads, dilation, col) is col
        np.testing.assert_array_equal(col, want)
        g = rng.normal(size=want.shape).astype(dtype)
        gx = np.full_like(x, np.nan)
        assert K.col2im(g, stride, pads, dilation, gx) is gx
        # the adjoint: <im2col(x), g> == <x, col2im(g)>
        tol = 1e-4 if dtype == np.float32 else 1e-10
        np.testing.assert_allclose((want * g).sum(), (x * gx).sum(), rtol=tol, atol=tol)
        perm = (1 + nd, 0, *range(1, 1 + nd), *range(2 + nd, 2 + 2 * nd))
        ref = conv_ops._col2im(np, g.transpose(perm), size, stride, pads, dilation)
        np.testing.assert_allclose(gx, ref, rtol=tol, atol=tol)


# Geometries of the flat loops (conv_kernels.h: stride 1 along the last two dims, the last dim's
# output as long as its input): small maps, padding larger than the map, dilation, a kernel
# larger than the map, more output rows than input rows, a 3-d stride and dilation along the
# depth, and maps past FERRO_COLS_FLAT (the row loops). (size, kernel, stride, pads, dilation)
FLAT_GEOMETRIES = [
    ((5,), (3,), (1,), ((1, 1),), (1,)),
    ((2,), (5,), (1,), ((3, 1),), (1,)),
    ((1,), (2,), (1,), ((0, 3),), (3,)),
    ((4, 4), (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1)),
    ((4, 4), (5, 5), (1, 1), ((2, 2), (2, 2)), (1, 1)),
    ((3, 3), (3, 3), (1, 1), ((2, 2), (2, 2)), (2, 2)),
    ((2, 3), (5, 7), (1, 1), ((3, 1), (4, 2)), (1, 1)),
    ((1, 1), (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1)),
    ((3, 4), (2, 3), (1, 1), ((2, 2), (1, 1)), (1, 1)),
    ((5, 3, 3), (3, 3, 3), (2, 1, 1), ((1, 1), (1, 1), (1, 1)), (1, 1, 1)),
    ((6, 2, 4), (2, 3, 3), (1, 1, 1), ((0, 2), (1, 1), (2, 2)), (3, 1, 2)),
    ((33, 33), (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("geometry", FLAT_GEOMETRIES, ids=lambda g: f"{g[0]}k{g[1]}s{g[2]}")
def test_column_kernels_flat_planes_match_the_strided_views_bit_for_bit(dtype, batch, geometry):
    # Every sample's and channel's plane (the first and last ones read past the array's ends
    # unless checked: im2col's first plane, col2im's at batch 1 by a dilated kernel); col2im's
    # sums in the kernel offsets' order, as NumPy's scatter adds them.
    from ferro._C import conv_kernels as K

    size, kernel, stride, pads, dilation = geometry
    nd = len(size)
    out = tuple(
        (size[i] + sum(pads[i]) - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1
        for i in range(nd)
    )
    assert out[-1] == size[-1]
    rng = np.random.default_rng(5)
    x = rng.normal(size=(batch, 4, *size)).astype(dtype)
    want = conv_ops._columns(np, conv_ops._padded(np, x, pads), kernel, stride, dilation, out)
    col = np.full_like(want, np.nan)
    np.testing.assert_array_equal(K.im2col(x, stride, pads, dilation, col), want)
    g = rng.normal(size=want.shape).astype(dtype)
    gx = K.col2im(g, stride, pads, dilation, np.full_like(x, np.nan))
    perm = (1 + nd, 0, *range(1, 1 + nd), *range(2 + nd, 2 + 2 * nd))
    ref = conv_ops._col2im(np, g.transpose(perm), size, stride, pads, dilation)
    np.testing.assert_array_equal(gx, ref)


def test_column_kernels_refuse_what_they_cannot_read_or_write():
    from ferro._C import conv_kernels as K

    x = np.ones((2, 3, 5, 5))
    col = np.empty((3, 3, 3, 2, 3, 3))
    geom = ((1, 1), ((0, 0), (0, 0)), (1, 1))
    with pytest.raises(ArgumentError, match="C-contiguous"):
        K.im2col(np.asfortranarray(x), *geom, col)
    with pytest.raises(ArgumentError, match="dtype"):
        K.im2col(x, *geom, col.astype(np.float32))
    col.flags.writeable = False
    with pytest.raises(ArgumentError, match="read-only"):
        K.im2col(x, *geom, col)
    with pytest.raises(ShapeError, match="do not fit"):
        K.im2col(x, *geom, np.empty((2, 3, 3, 2, 3, 3)))
    with pytest.raises(ShapeError, match="spatial dims"):
        K.col2im(np.empty((3, 3, 2, 3)), *geom, x)
    with pytest.raises(ArgumentError, match="positive"):
        K.im2col(x, (0, 1), ((0, 0), (0, 0)), (1, 1), np.empty((3, 3, 3, 2, 3, 3)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "shape, pads", [((3, 16, 8, 8), ((1, 1), (1, 1))), ((2, 17, 7, 9), ((2, 0), (1, 2)))]
)
def test_winograd_forward_and_weight_grad_match_the_im2col_gemm(dtype, shape, pads, monkeypatch):
    from ferro._C import conv_kernels as K

    rng = np.random.default_rng(12)
    x = rng.normal(size=shape).astype(dtype)
    w = (rng.normal(size=(20, shape[1], 3, 3)) / np.sqrt(9 * shape[1])).astype(dtype)
    out = tuple(shape[2 + i] + sum(pads[i]) - 2 for i in range(2))
    geom = ((1, 1), pads, (1, 1), 1)
    c, o = shape[1], w.shape[0]
    assert conv_ops._winograd(K, (3, 3), c, o, (8, 8), (1, 1), (1, 1), 1)
    assert not conv_ops._winograd(K, (3, 3), c, o, (8, 8), (2, 1), (1, 1), 1)
    assert not conv_ops._winograd(K, (3, 3), 8, o, (8, 8), (1, 1), (1, 1), 1)
    assert not conv_ops._winograd(K, (3, 3), c, o, (8, 4), (1, 1), (1, 1), 1)
    assert not conv_ops._winograd(K, (3, 3, 3), c, o, (8, 8, 8), (1, 1, 2), (1, 1, 1), 1)
    assert not conv_ops._winograd(K, (3, 3, 3), c, o, (8, 8, 8), (1, 1, 1), (2, 1, 1), 1)
    assert not conv_ops._winograd(K, (3, 3, 3), c, o, (8, 8, 8), (1, 1, 1), (1, 1, 1), 2)
    assert not conv_ops._winograd(K, (4,), c, o, (8,), (1,), (1,), 1)
    assert conv_ops._winograd(K, (5,), c, o, (8,), (1,), (1,), 1)
    monkeypatch.setattr(conv_ops, "WINOGRAD_MIN_SIZE", 1)  # the small shapes below too
    want = conv_ops._conv_forward(np, x, w, *geom, out)
    got = conv_ops._conv_forward(np, x, w, *geom, out, K)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got, want, **tol)
    gy = rng.normal(size=want.shape).astype(dtype)
    want = conv_ops._conv_weight_grad(np, x, gy, *geom, (3, 3))
    got = conv_ops._conv_weight_grad(np, x, gy, *geom, (3, 3), K)
    assert got.flags.c_contiguous
    np.testing.assert_allclose(got, want, **tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "shape, pads",
    [((2, 16, 6, 7, 5), ((1, 1),) * 3), ((3, 17, 5, 6, 8), ((2, 0), (1, 2), (0, 1)))],
)
@pytest.mark.parametrize("blocks", [1, 8 << 20])
def test_winograd_3d_matches_the_im2col_gemm(dtype, shape, pads, blocks, monkeypatch):
    # Forward, input gradient (the flipped convolution of gy, also Winograd) and weight
    # gradient, odd sizes (cropped tiles) and uneven padding included: F(2x2x2, 3x3x3) a depth
    # tile a block (blocks=1), and the channels-last F(4x4x4, 3x3x3), whose float32 rounding is
    # within ~1e-5 of each result's scale (the transforms spread values by up to 8x a dim).
    from ferro._C import conv_kernels as K

    rng = np.random.default_rng(14)
    x = rng.normal(size=shape).astype(dtype)
    w = (rng.normal(size=(20, shape[1], 3, 3, 3)) / np.sqrt(27 * shape[1])).astype(dtype)
    out = tuple(shape[2 + i] + sum(pads[i]) - 2 for i in range(3))
    geom = ((1, 1, 1), pads, (1, 1, 1), 1)
    assert conv_ops._winograd(K, (3, 3, 3), shape[1], 20, (8, 8, 8), (1, 1, 1), (1, 1, 1), 1)
    monkeypatch.setattr(conv_ops, "WINOGRAD_MIN_SIZE", 1)
    monkeypatch.setattr(conv_ops, "WINOGRAD_BLOCK_BYTES", blocks)  # 1: a depth tile a block
    assert (conv_ops._channels_last(K, x, 20, 3, out) is not None) == (blocks > 1)
    eps = 1e-12 if dtype == np.float64 else 1e-5 if blocks > 1 else 1e-6

    def close(got, want):  # within eps of the result's scale (sums over many terms)
        np.testing.assert_allclose(got, want, rtol=eps, atol=eps * np.abs(want).max())

    want = conv_ops._conv_forward(np, x, w, *geom, out)
    close(conv_ops._conv_forward(np, x, w, *geom, out, K), want)
    gy = rng.normal(size=want.shape).astype(dtype)
    want = conv_ops._conv_weight_grad(np, x, gy, *geom, (3, 3, 3))
    got = conv_ops._conv_weight_grad(np, x, gy, *geom, (3, 3, 3), K)
    assert got.flags.c_contiguous
    close(got, want)
    want = conv_ops._conv_input_grad(np, gy, w, *geom, shape[2:])
    close(conv_ops._conv_input_grad(np, gy, w, *geom, shape[2:], K), want)
    # Both gradients from one pass: the input gradient as the forward's adjoint.
    assert conv_ops._winograd_adjoint(K, x, w, gy, (1, 1, 1), (1, 1, 1), 1)
    gx, gw = conv_ops._winograd_weight_grad(np, K, x, gy, pads, w)
    close(gx, want)
    close(gw, conv_ops._conv_weight_grad(np, x, gy, *geom, (3, 3, 3)))


@pytest.mark.parametrize("kernel, stride", [((4, 4), (2, 2)), ((3, 3), (2, 2)), ((3, 5), (2, 3))])
def test_space_to_depth_weight_is_its_definition_and_its_adjoint(kernel, stride):
    # [o, (c, r0, r1), j0, j1] = w[o, c, s0 j0 + r0, s1 j1 + r1], zero past the kernel; the
    # adjoint gathers each kernel offset back (the gathers of _phase_gather).
    rng = np.random.default_rng(5)
    w = rng.normal(size=(3, 2) + kernel)
    z = conv_ops._space_to_depth_weight(np, w, stride)
    (s0, s1), want = stride, np.zeros((3, 2) + stride + (2, 2))
    for r0, r1, j0, j1 in itertools.product(range(s0), range(s1), range(2), range(2)):
        if s0 * j0 + r0 < kernel[0] and s1 * j1 + r1 < kernel[1]:
            want[:, :, r0, r1, j0, j1] = w[:, :, s0 * j0 + r0, s1 * j1 + r1]
    np.testing.assert_array_equal(z, want.reshape(z.shape))
    g = rng.normal(size=z.shape)
    gw = conv_ops._depth_to_space_weight(np, g, stride, kernel)
    assert gw.flags.c_contiguous and gw.shape == w.shape
    np.testing.assert_allclose(np.vdot(gw, w), np.vdot(g, z), rtol=1e-13)  # <A*g, w> = <g, Aw>


@pytest.mark.parametrize(
    "fn, shape, k, blocks",
    [
        ("conv3d", (3, 16, 8, 9, 10), 3, 1),  # a depth tile a block
        ("conv3d", (2, 16, 9, 8, 8), 3, 1 << 21),
        ("conv2d", (3, 16, 9, 11), 3, 1 << 21),
        ("conv1d", (3, 16, 21), 5, 1 << 21),
    ],
)
def test_kept_winograd_transforms_give_the_recomputed_bits(fn, shape, k, blocks, monkeypatch):
    # Note [Kept transforms]: the forward's input transform (and in 3-d its U), kept for the
    # backward, and the bias added and summed by the parts: the same bits as computing them
    # again; gradients equal to the serial bias pass's to rounding; a retained graph's second
    # backward (the cache popped) equal to its first; every gradient subset.
    from ferro._C import conv_kernels as K

    monkeypatch.setattr(conv_ops, "WINOGRAD_BLOCK_BYTES", blocks)
    nd, o = len(shape) - 2, 24
    out = tuple(shape[2:])
    assert conv_ops._winograd(K, (k,) * nd, shape[1], o, out, (1,) * nd, (1,) * nd, 1)
    rng = np.random.default_rng(16)
    x = rng.normal(size=shape)
    w = rng.normal(size=(o, shape[1]) + (k,) * nd) / np.sqrt(shape[1] * k**nd)
    b, gy = rng.normal(size=o), rng.normal(size=(shape[0], o) + out)

    def grads(need, keep):
        monkeypatch.setattr(conv_ops, "KEEP_BYTES", keep)
        ts = [ferro.tensor(a, requires_grad=n) for a, n in zip((x, w, b), need, strict=True)]
        y = getattr(F, fn)(*ts, padding=k // 2)
        y.backward(ferro.tensor(gy), retain_graph=True)
        first = [t.grad.numpy().copy() if t.grad is not None else None for t in ts]
        for t in ts:
            t.grad = None
        y.backward(ferro.tensor(gy))
        for a, t in zip(first, ts, strict=True):
            assert a is None and t.grad is None or np.array_equal(a, t.grad.numpy())
        return y.detach().numpy(), first

    for need in itertools.product((True, False), repeat=3):
        if not any(need):
            continue
        y0, g0 = grads(need, 0)
        y1, g1 = grads(need, 16 << 20)
        assert np.array_equal(y0, y1)
        for a, c, n in zip(g0, g1, need, strict=True):
            assert n or a is None and c is None
            if n:
                np.testing.assert_allclose(c, a, rtol=1e-12, atol=1e-12)
        if need[1]:
            assert np.array_equal(g0[1], g1[1]) and (not need[0] or np.array_equal(g0[0], g1[0]))
        if need[2]:  # the parts' bias sum against one pass over gy
            np.testing.assert_allclose(g1[2], gy.sum(axis=(0, *range(2, 2 + nd))), rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "shape, pads, depth",
    [
        ((2, 3, 6, 7, 5), ((1, 1),) * 3, None),
        ((2, 2, 5, 6, 9), ((0, 2), (2, 0), (1, 1)), None),
        ((3, 2, 9, 3, 4), ((1, 1), (0, 0), (1, 0)), (2, 4)),  # a block of depth tiles
        ((1, 1, 4, 4, 4), ((2, 2),) * 3, (0, 1)),  # windows mostly padding
    ],
)
def test_winograd_input_grad_is_the_adjoint_of_the_input_transform(dtype, shape, pads, depth):
    # <in(x), g> = <x, in_grad(g)> for random x and g, and in_grad adds into gx.
    from ferro._C import conv_kernels as K

    rng = np.random.default_rng(16)
    x = rng.normal(size=shape)
    tiles = [(s + lo + hi - 1) // 2 for s, (lo, hi) in zip(shape[2:], pads, strict=True)]
    t0, t1 = depth or (0, tiles[0])
    v = K.winograd_input(
        x.astype(dtype),
        pads,
        np.empty((64, shape[1], (t1 - t0) * shape[0] * tiles[1] * tiles[2]), dtype),
        depth,
    )
    g = rng.normal(size=v.shape)
    base = rng.normal(size=shape)
    gx = K.winograd_input_grad(g.astype(dtype), pads, base.astype(dtype), depth)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    lhs, rhs = (v * g).sum(), ((gx - base.astype(dtype)) * x).sum()
    assert abs(lhs - rhs) <= tol * np.abs(v * g).sum()
    with pytest.raises(ShapeError, match="expected"):  # 3-d only
        K.winograd_input_grad(np.empty((16, 2, 4)), ((1, 1),) * 2, np.zeros((1, 2, 3, 3)))
    with pytest.raises(ArgumentError, match="read-only"):
        gx.flags.writeable = False
        K.winograd_input_grad(g.astype(dtype), pads, gx, depth)


@pytest.mark.parametrize(
    "shape, kernel, stride, pads",
    [
        ((4, 16, 40, 36), (3, 3), (1, 1), ((1, 1), (1, 1))),  # Winograd, its 2-d transforms
        ((2, 16, 12, 14, 16), (3, 3, 3), (1, 1, 1), ((1, 1), (0, 2), (1, 0))),  # 3-d Winograd
        ((6, 16, 2048), (5,), (1,), ((2, 2),)),  # 1-d Winograd
        ((6, 16, 2048), (4,), (1,), ((2, 1),)),  # im2col / col2im, 1-d
        ((4, 24, 33, 30), (4, 4), (2, 2), ((1, 1), (1, 1))),  # strided, col2im in gx
    ],
)
def test_kernels_split_over_threads_agree_with_the_generic_code(shape, kernel, stride, pads):
    # Shapes past the kernels' OpenMP threshold (PARALLEL_MIN elements): each thread takes
    # whole channels and its own scratch rows, so the results must not change.
    from ferro._C import conv_kernels as K

    rng = np.random.default_rng(15)
    nd = len(kernel)
    x = rng.normal(size=shape)
    w = rng.normal(size=(20, shape[1], *kernel)) / np.sqrt(np.prod(kernel) * shape[1])
    dil = (1,) * nd
    out = tuple((shape[2 + i] + sum(pads[i]) - kernel[i]) // stride[i] + 1 for i in range(nd))
    geom = (stride, pads, dil, 1)
    tol = dict(rtol=1e-10, atol=1e-10)
    want = conv_ops._conv_forward(np, x, w, *geom, out)
    np.testing.assert_allclose(conv_ops._conv_forward(np, x, w, *geom, out, K), want, **tol)
    gy = rng.normal(size=want.shape)
    want = conv_ops._conv_weight_grad(np, x, gy, *geom, kernel)
    got = conv_ops._conv_weight_grad(np, x, gy, *geom, kernel, K)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10 * np.abs(want).max())
    want = conv_ops._conv_input_grad(np, gy, w, *geom, shape[2:])
    np.testing.assert_allclose(
        conv_ops._conv_input_grad(np, gy, w, *geom, shape[2:], K), want, **tol
    )


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("cols", ["kernels", "views"])
def test_subpixel_input_grad_matches_the_col2im_path(nd, cols, monkeypatch):
    # A strided convolution's input gradient (a strided transposed convolution's forward) by
    # one GEMM over the phases: random strides, kernels (multiples of the stride or not),
    # paddings and sizes, against the col2im path, with the nogil column kernels and with the
    # strided views.
    from ferro._C import conv_kernels as K

    kernels = K if cols == "kernels" else None
    rng = np.random.default_rng(16 + nd)
    taken = 0
    for _ in range(25):
        stride = tuple(int(v) for v in rng.integers(1, 4, nd))
        kernel = tuple(int(v) for v in rng.integers(1, 6, nd))
        pads = tuple((int(rng.integers(0, k)),) * 2 for k in kernel)
        size = tuple(int(v) for v in rng.integers(max(kernel), 9, nd))
        out = tuple((size[i] + 2 * pads[i][0] - kernel[i]) // stride[i] + 1 for i in range(nd))
        w = rng.normal(size=(3, 2, *kernel))
        gy = rng.normal(size=(2, 3, *out))
        geom = (stride, pads, (1,) * nd, 1)
        monkeypatch.setattr(conv_ops, "SUBPIXEL_MAX_WASTE", 0.0)
        want = conv_ops._conv_input_grad(np, gy, w, *geom, size, kernels)
        monkeypatch.setattr(conv_ops, "SUBPIXEL_MAX_WASTE", float("inf"))
        taken += conv_ops._subpixel_phases(stride, pads, (1,) * nd, 1, kernel, size) is not None
        got = conv_ops._conv_input_grad(np, gy, w, *geom, size, kernels)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert taken >= 10


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "shape, k, pads",
    [
        ((3, 16, 37), 5, ((2, 2),)),
        ((2, 17, 30), 5, ((4, 0),)),
        ((2, 20, 11), 3, ((1, 1),)),
        ((4, 16, 64), 3, ((0, 2),)),
    ],
)
def test_winograd_1d_matches_the_im2col_gemm(dtype, shape, k, pads, monkeypatch):
    # F(4, k): forward, weight gradient and input gradient (the flipped convolution of gy,
    # also Winograd), lengths not a multiple of the tile and uneven padding included.
    from ferro._C import conv_kernels as K

    rng = np.random.default_rng(17)
    x = rng.normal(size=shape).astype(dtype)
    w = (rng.normal(size=(24, shape[1], k)) / np.sqrt(k * shape[1])).astype(dtype)
    out = (shape[2] + sum(pads[0]) - k + 1,)
    geom = ((1,), pads, (1,), 1)
    assert conv_ops._winograd(K, (k,), shape[1], 24, out, (1,), (1,), 1)
    monkeypatch.setattr(conv_ops, "WINOGRAD_MIN_SIZE", 1)
    # float32: the transforms' points spread values up to 5.25x, so a few more ulps of the
    # products' scale than im2col's
    tol = 2e-5 if dtype == np.float32 else 1e-12
    want = conv_ops._conv_forward(np, x, w, *geom, out)
    got = conv_ops._conv_forward(np, x, w, *geom, out, K)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())
    gy = rng.normal(size=want.shape).astype(dtype)
    want = conv_ops._conv_weight_grad(np, x, gy, *geom, (k,))
    got = conv_ops._conv_weight_grad(np, x, gy, *geom, (k,), K)
    assert got.flags.c_contiguous and got.dtype == dtype
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())
    want = conv_ops._conv_input_grad(np, gy, w, *geom, shape[2:])
    got = conv_ops._conv_input_grad(np, gy, w, *geom, shape[2:], K)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_strided_winograd_convolutions_match_the_im2col_gemm(dtype, monkeypatch):
    # Strided 2-d convolutions whose kernel spans at most two strides, by space-to-depth and
    # F(4x4, 2x2) (forward, weight gradient alone and with the forward, input gradient by the
    # adjoint): random strides, kernels, uneven paddings, sizes.
    from ferro._C import conv_kernels as K

    monkeypatch.setattr(conv_ops, "WINOGRAD_MIN_SIZE", 1)
    monkeypatch.setattr(conv_ops, "WINOGRAD_MIN_CHANNELS", 1)
    monkeypatch.setattr(conv_ops, "SUBPIXEL_WINOGRAD_MIN_SIZE", 1)
    monkeypatch.setattr(conv_ops, "SUBPIXEL_MAX_WASTE", float("inf"))
    rng = np.random.default_rng(21)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    taken = 0
    for _ in range(30):
        stride = tuple(int(v) for v in rng.integers(2, 4, 2))
        kernel = tuple(int(rng.integers(s + 1, 2 * s + 1)) for s in stride)
        pads = tuple((int(rng.integers(0, k)), int(rng.integers(0, k))) for k in kernel)
        size = tuple(int(v) for v in rng.integers(max(kernel), 14, 2))
        out = tuple((size[j] + sum(pads[j]) - kernel[j]) // stride[j] + 1 for j in range(2))
        x = rng.normal(size=(2, 3, *size)).astype(dtype)
        w = rng.normal(size=(5, 3, *kernel)).astype(dtype)
        geom = (stride, pads, (1, 1), 1)
        taken += conv_ops._subpixel_winograd(K, kernel, 3, 5, stride, (1, 1), 1, out)
        assert not conv_ops._winograd(K, (2, 2), 15, 5, out, (1, 1), (1, 1), 1)  # im2col
        want = conv_ops._conv_forward(np, x, w, *geom, out)
        scale = np.abs(want).max()
        np.testing.assert_allclose(
            conv_ops._conv_forward(np, x, w, *geom, out, K), want, rtol=tol, atol=tol * scale
        )
        gy = rng.normal(size=want.shape).astype(dtype)
        y, gw = conv_ops._conv_forward(np, x, w, *geom, out, K, gy)
        np.testing.assert_allclose(y, want, rtol=tol, atol=tol * scale)
        want = conv_ops._conv_weight_grad(np, x, gy, *geom, kernel)
        scale = np.abs(want).max()
        for got in (gw, conv_ops._conv_weight_grad(np, x, gy, *geom, kernel, K)):
            assert got.flags.c_contiguous and got.dtype == dtype
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)
        monkeypatch.setattr(conv_ops, "SUBPIXEL_MAX_WASTE", 0.0)
        want = conv_ops._conv_input_grad(np, gy, w, *geom, size)
        monkeypatch.setattr(conv_ops, "SUBPIXEL_MAX_WASTE", float("inf"))
        got = conv_ops._conv_input_grad(np, gy, w, *geom, size, K)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())
    assert taken == 30


@pytest.mark.parametrize(
    "shape, lo, tiles",
    [((2, 3, 9, 11), (1, 2), (3, 3)), ((3, 2, 19, 27), (1, 2), (5, 7))],  # 18 tiles; 64 + 41
)
def test_winograd_2d_kernels_are_the_transforms_they_say(shape, lo, tiles):
    from ferro._C import conv_kernels as K

    at, _, bt = conv_ops._winograd1d_matrices(2)
    rng = np.random.default_rng(22)
    x = rng.normal(size=shape)
    (n, c, h, w), (th, tw) = shape, tiles
    v = K.winograd2d_gather(x, bt, 4, lo, tiles, np.empty((25, c, n * th * tw)))
    xp = np.zeros((n, c, 4 * th + 1, 4 * tw + 1))
    rows, cols = min(h, 4 * th + 1 - lo[0]), min(w, 4 * tw + 1 - lo[1])
    xp[:, :, lo[0] : lo[0] + rows, lo[1] : lo[1] + cols] = x[:, :, :rows, :cols]
    want = np.empty((5, 5, c, n, th, tw))
    for i, j in itertools.product(range(th), range(tw)):
        d = xp[:, :, 4 * i : 4 * i + 5, 4 * j : 4 * j + 5]
        want[..., i, j] = np.einsum("pa,qb,ncab->pqcn", bt, bt, d)
    np.testing.assert_allclose(v, want.reshape(25, c, -1), rtol=1e-12, atol=1e-12)
    m = rng.normal(size=(25, c, n * th * tw))
    oh, ow = 4 * th - 2, 4 * tw - 1  # cropped
    y = K.winograd2d_scatter(m, at, 4, (0, 0), tiles, np.empty((n, c, oh, ow)))
    full = np.einsum("ia,jb,abcnyt->ncyitj", at, at, m.reshape(5, 5, c, n, th, tw))
    np.testing.assert_allclose(y, full.reshape(n, c, 4 * th, 4 * tw)[:, :, :oh, :ow], rtol=1e-12)
    # the adjoint of the gather: <gather(x), m> == <x, scatter(m, add)>
    gx = K.winograd2d_scatter(m, bt.T, 4, lo, tiles, np.zeros(x.shape), add=True)
    np.testing.assert_allclose((v * m).sum(), (x * gx).sum(), rtol=1e-12)
    if shape != (2, 3, 9, 11):
        return
    with pytest.raises(ShapeError, match="winograd2d_gather"):
        K.winograd2d_gather(x, bt, 4, lo, (3, 2), np.empty((25, 3, 18)))
    with pytest.raises(ShapeError, match="winograd2d_scatter"):
        K.winograd2d_scatter(m, at, 4, (0, 0), (3, 3), np.empty((2, 3, 10)))
    with pytest.raises(ArgumentError, match="dtype"):
        K.winograd2d_gather(x, bt, 4, lo, tiles, np.empty((25, 3, 18), dtype=np.float32))
    y.flags.writeable = False
    with pytest.raises(ArgumentError, match="read-only"):
        K.winograd2d_scatter(m, at, 4, (0, 0), tiles, y)


def test_weight_transform_gemms_stay_below_openblas_threading():
    # conv._one_thread_gemm: a @ b in blocks whose m n k stays below OpenBLAS's split, so the
    # Winograd weight transforms run on the calling thread wherever they are called.
    calls = []

    def matmul(a, b, out):
        calls.append(a.shape[0] * a.shape[1] * b.shape[1])
        return np.matmul(a, b, out=out)

    xp = types.SimpleNamespace(empty=np.empty, matmul=matmul)
    rng = np.random.default_rng(5)
    for m, k, n in [(25, 4, 8192), (8192, 25, 4), (64, 27, 512), (3, 2, 5), (1, 1, 1)]:
        a, b = rng.normal(size=(m, k)), rng.normal(size=(k, n))
        calls.clear()
        np.testing.assert_allclose(conv_ops._one_thread_gemm(xp, a, b), a @ b, atol=1e-12)
        assert calls and max(calls) < conv_ops.gemm.BLAS_THREADED
        assert len(calls) == -(-m * n * k // max(calls))  # no more blocks than needed
    w = rng.normal(size=(6, 5, 3, 3))  # both layouts of the transform, and its adjoint
    u = conv_ops._winograd_weights(np, w, 16)
    np.testing.assert_allclose(conv_ops._winograd_weights(np, w, 16, True), u.transpose(0, 2, 1))
    gm = conv_ops._winograd_weight_matrix(3, 2, 16)
    np.testing.assert_allclose(u, np.einsum("pk,ock->poc", gm, w.reshape(6, 5, 9)), atol=1e-12)
    gu = rng.normal(size=u.shape)
    want = np.einsum("poc,pk->ock", gu, gm).reshape(w.shape)
    np.testing.assert_allclose(conv_ops._winograd_weights_adjoint(np, gu, 3, 2), want, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_swap_last2_is_the_transposed_copy(dtype):
    # conv_kernels.swap_last2 (the im2col weight gradient's transpose): 32 x 32 blocks split
    # over the team, shapes off the block size, batched, empty, and its argument checks.
    from ferro._C import conv_kernels as K

    rng = np.random.default_rng(31)
    for shape in [(1, 1), (5, 7), (33, 65), (3, 64, 96), (2, 4608, 70), (0, 3), (2, 0, 5)]:
        x = rng.normal(size=shape).astype(dtype)
        got = K.swap_last2(x)
        assert got.flags.c_contiguous and got.dtype == dtype and got is not x
        np.testing.assert_array_equal(got, np.swapaxes(x, -1, -2))
    with pytest.raises(ShapeError, match="swap_last2"):
        K.swap_last2(np.ones(3, dtype))
    with pytest.raises(ArgumentError, match="swap_last2"):
        K.swap_last2(np.ones((4, 6), dtype)[:, ::2])
    with pytest.raises(ArgumentError, match="swap_last2"):
        K.swap_last2(np.ones((4, 6), np.float16))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_space_to_depth_kernels_match_the_strided_copies(dtype):
    # ferro._C.conv_kernels.space_to_depth2d/depth_to_space2d against _SpaceToDepth's and the
    # sub-pixel input gradient's NumPy phase copies: strides 1-3, paddings up to past a stride,
    # z larger and smaller than x needs, every element written (the outputs start as NaN).
    from ferro._C import conv_kernels as K

    rng = np.random.default_rng(23)
    for _ in range(40):
        stride = tuple(int(v) for v in rng.integers(1, 4, 2))
        size = tuple(int(v) for v in rng.integers(1, 40, 2))  # past a vector of 16
        pads = tuple((int(rng.integers(0, 2 * s + 1)), 0) for s in stride)
        zsize = tuple(
            int(-(-(n + lo) // s) + rng.integers(-1, 3))
            for n, (lo, _), s in zip(size, pads, stride, strict=True)
        )
        zsize = tuple(max(1, v) for v in zsize)
        lo = tuple(p for p, _ in pads)
        x = rng.normal(size=(2, 3, *size)).astype(dtype)
        want = conv_ops._SpaceToDepth(np, x, stride, pads, tuple(v - 1 for v in zsize))[0:2]
        z = np.full((2, 3, *stride, *zsize), np.nan, dtype)
        assert K.space_to_depth2d(x, stride, lo, z) is z
        np.testing.assert_array_equal(z.reshape(want.shape), want)
        gz = rng.normal(size=z.shape).astype(dtype)
        want = np.zeros_like(x)
        for r in itertools.product(*(range(s) for s in stride)):
            src, dst = conv_ops._phase_slices(r, stride, pads, size, zsize)
            want[(slice(None), slice(None), *src)] = gz[(slice(None), slice(None), *r, *dst)]
        gx = np.full_like(x, np.nan)
        assert K.depth_to_space2d(gz, stride, lo, gx) is gx
        np.testing.assert_array_equal(gx, want)
    x, z = np.ones((1, 2, 4, 4), dtype), np.empty((1, 2, 2, 2, 3, 3), dtype)
    with pytest.raises(ShapeError, match="space_to_depth2d"):
        K.space_to_depth2d(x, (2, 3), (1, 1), z)
    with pytest.raises(ArgumentError, match="space_to_depth2d"):
        K.space_to_depth2d(x, (2, 2), (-1, 1), z)
    with pytest.raises(ArgumentError, match="C-contiguous"):
        K.space_to_depth2d(x[..., ::2], (2, 2), (1, 1), z)
    with pytest.raises(ArgumentError, match="dtype"):
        K.depth_to_space2d(z, (2, 2), (1, 1), x.astype(np.float16))
    x.flags.writeable = False
    with pytest.raises(ArgumentError, match="read-only"):
        K.depth_to_space2d(z, (2, 2), (1, 1), x)


def test_winograd_1d_matrices_compute_the_correlation():
    for k in conv_ops.WINOGRAD_1D_KERNELS:
        at, g, bt = conv_ops._winograd1d_matrices(k)
        rng = np.random.default_rng(k)
        d, w = rng.normal(size=k + 3), rng.normal(size=k)
        want = [w @ d[i : i + k] for i in range(4)]
        np.testing.assert_allclose(at @ ((g @ w) * (bt @ d)), want, rtol=1e-12, atol=1e-12)


def test_winograd_1d_kernels_refuse_what_they_cannot_hold():
    from ferro._C import conv_kernels as K

    at, _, bt = conv_ops._winograd1d_matrices(3)
    x = np.zeros((2, 3, 10))
    with pytest.raises(ShapeError, match="winograd1d_gather"):
        K.winograd1d_gather(x, bt, 4, 1, np.empty((6, 3, 7)))
    with pytest.raises(ShapeError, match="winograd1d_gather"):
        K.winograd1d_gather(x, bt, 0, 1, np.empty((6, 3, 6)))
    with pytest.raises(ShapeError, match="winograd1d_scatter"):
        K.winograd1d_scatter(np.empty((6, 3, 4)), at, x)
    x.flags.writeable = False
    with pytest.raises(ArgumentError, match="read-only"):
        K.winograd1d_scatter(np.empty((6, 3, 6)), at, x)
    with pytest.raises(ArgumentError, match="dtype"):
        K.winograd1d_gather(x, bt, 4, 1, np.empty((6, 3, 6), dtype=np.float32))


def test_winograd_3d_kernels_refuse_what_they_cannot_hold():
    from ferro._C import conv_kernels as K

    x = np.zeros((1, 2, 4, 4, 4))
    with pytest.raises(ShapeError, match="expected"):
        K.winograd_input(x, ((1, 1),) * 3, np.empty((16, 2, 8)))
    with pytest.raises(ShapeError, match="does not hold"):
        K.winograd_output(np.empty((64, 2, 7)), np.empty((1, 2, 4, 4, 4)))
    with pytest.raises(ShapeError, match="expected"):
        K.winograd_output_grad(np.empty((1, 2, 4, 4, 4)), np.empty((64, 3, 8)))
    with pytest.raises(ShapeError, match="non-negative"):
        K.winograd_input(x, ((1, 1), (1, -1), (1, 1)), np.empty((64, 2, 8)))
    for depth in ((0, 3), (1, 1), (-1, 1)):  # 2 depth tiles
        with pytest.raises(ArgumentError, match="depth tiles"):
            K.winograd_input(x, ((1, 1),) * 3, np.empty((64, 2, 8)), depth)
    with pytest.raises(ShapeError, match="does not hold"):  # one depth tile holds 4 tiles
        K.winograd_input(x, ((1, 1),) * 3, np.empty((64, 2, 8)), (1, 2))
    assert K.winograd_input(x, ((1, 1),) * 3, np.empty((64, 2, 8))).shape == (64, 2, 8)


def _windows_reference(a, mat, m, lo, tl):
    # winograd3d_gather's definition, in float64: mat along (depth, height, width) of every
    # window of the zero-padded channels-last a, products ordered (height, width, depth).
    p, q = mat.shape
    pad = [(0, 0)] + [(lo[i], max(0, m * tl[i] + q)) for i in range(3)] + [(0, 0)]
    ap = np.pad(a.astype(np.float64), pad)
    win = np.lib.stride_tricks.sliding_window_view(ap, (q, q, q), axis=(1, 2, 3))
    win = win[:, : m * tl[0] : m, : m * tl[1] : m, : m * tl[2] : m]  # n tz ty tx c a b e
    v = np.einsum("ka,ib,je,nzyxcabe->ijknzyxc", mat, mat, mat, win)
    return v.reshape(p**3, -1, a.shape[-1])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "shape, lo", [((2, 16, 16, 16, 5), (1, 1, 1)), ((1, 7, 9, 5, 3), (1, 2, 0))]
)
def test_winograd_3d_channels_last_kernels_are_their_definition(dtype, shape, lo):
    # The gather against its definition (input windows by Bᵀ, gy's by A); the scatter as its
    # adjoint (<gather(x), m> = <x, scatter_add(m)>) and as the output transform (Aᵀ, cropped);
    # blocks of 4 tiles with a partial last one (5 x 3 x 2 tiles), odd channel counts.
    from ferro._C import conv_kernels as K

    at, _, bt = conv_ops._winograd1d_matrices(3)
    rng = np.random.default_rng(16)
    out = tuple(s + 2 * p - 2 for s, p in zip(shape[1:4], lo, strict=True))
    tl = tuple(-(-s // 4) for s in out)
    x = rng.normal(size=shape).astype(dtype)
    v = np.empty((216, shape[0] * math.prod(tl), shape[4]), dtype)
    tol = dict(rtol=1e-5, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-11)
    np.testing.assert_allclose(
        K.winograd3d_gather(x, bt, 4, lo, tl, v), _windows_reference(x, bt, 4, lo, tl), **tol
    )
    gy = rng.normal(size=(shape[0],) + out + (shape[4],)).astype(dtype)
    want = _windows_reference(gy, at.T, 4, (0, 0, 0), tl)
    np.testing.assert_allclose(K.winograd3d_gather(gy, at.T, 4, (0, 0, 0), tl, v), want, **tol)
    m = rng.normal(size=v.shape)
    gx = np.ones(shape)  # added into
    K.winograd3d_scatter(m, bt.T, 4, lo, tl, gx, add=True)
    v64 = K.winograd3d_gather(x.astype(np.float64), bt, 4, lo, tl, np.empty(m.shape))
    assert abs((v64 * m).sum() - (x * (gx - 1)).sum()) < 1e-9 * np.abs(v64 * m).sum()
    y = np.full(gy.shape, np.nan)  # every output written
    K.winograd3d_scatter(m, at, 4, (0, 0, 0), tl, y)
    g = rng.normal(size=y.shape)
    mg = K.winograd3d_gather(g, at.T, 4, (0, 0, 0), tl, np.empty(m.shape))
    assert abs((y * g).sum() - (m * mg).sum()) < 1e-9 * np.abs(m * mg).sum()


def test_a_3d_backward_takes_its_own_scheme_when_the_forwards_differs(monkeypatch):
    # The forward keeps U (and x's transform) for the backward; if the scheme changes between
    # them (WINOGRAD_BLOCK_BYTES: channels-last F(4x4x4) forward, F(2x2x2) by depth blocks
    # backward), the backward computes its own rather than read the other's.
    rng = np.random.default_rng(17)
    x = ferro.tensor(rng.normal(size=(2, 16, 8, 8, 8)), requires_grad=True)
    w = ferro.tensor(rng.normal(size=(16, 16, 3, 3, 3)) / 12, requires_grad=True)
    y = F.conv3d(x, w, padding=1)
    monkeypatch.setattr(conv_ops, "WINOGRAD_BLOCK_BYTES", 1)
    y.backward(ferro.ones_like(y))
    gx, gw = x.grad.numpy(), w.grad.numpy()
    x.grad = w.grad = None
    monkeypatch.setattr(conv_ops, "WINOGRAD_MIN_CHANNELS", 10**6)  # the im2col GEMM
    F.conv3d(x, w, padding=1).backward(ferro.ones_like(y))
    np.testing.assert_allclose(gx, x.grad.numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(gw, w.grad.numpy(), rtol=1e-10, atol=1e-10)


def test_winograd_3d_channels_last_kernels_refuse_what_they_cannot_hold():
    from ferro._C import conv_kernels as K

    at, _, bt = conv_ops._winograd1d_matrices(3)
    x, v = np.zeros((1, 4, 4, 4, 2)), np.empty((216, 1, 2))
    with pytest.raises(ShapeError, match="winograd3d_gather"):
        K.winograd3d_gather(x, bt, 4, (1, 1, 1), (1, 1, 2), v)  # v holds 1 tile, not 2
    with pytest.raises(ShapeError, match="winograd3d_scatter"):
        K.winograd3d_scatter(
            v, bt, 4, (1, 1, 1), (1, 1, 1), np.zeros((1, 4, 4, 4, 1))
        )  # C 1, not 2
    with pytest.raises(ShapeError, match="winograd3d_gather"):
        K.winograd3d_gather(x, np.zeros((6, 7)), 4, (1, 1, 1), (1, 1, 1), v)  # Q > 6
    with pytest.raises(ShapeError, match="winograd3d_gather"):
        K.winograd3d_gather(x, bt, 0, (1, 1, 1), (1, 1, 1), v)
    with pytest.raises(ArgumentError, match="C-contiguous"):
        K.winograd3d_gather(x[..., ::2], bt, 4, (1, 1, 1), (1, 1, 1), v[..., :1])
    with pytest.raises(ArgumentError, match="dtype"):
        K.winograd3d_scatter(v.astype(np.float32), at, 4, (0, 0, 0), (1, 1, 1), x)
    x.flags.writeable = False
    with pytest.raises(ArgumentError, match="read-only"):
        K.winograd3d_scatter(v, at, 4, (0, 0, 0), (1, 1, 1), x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_winograd_3d_kernels_by_depth_blocks_give_the_whole_transforms(dtype):
    # A block of depth tiles (t0, t1) gives the whole transform's tiles of those depth tiles,
    # the same bits, and the output writes exactly the block's output planes (7 planes: the
    # last tile cropped).
    from ferro._C import conv_kernels as K

    rng = np.random.default_rng(15)
    x = rng.normal(size=(2, 3, 6, 5, 7)).astype(dtype)
    pads = ((2, 1), (1, 1), (0, 1))  # output (7, 5, 6): 4 x 3 x 3 tiles a sample
    whole = K.winograd_input(x, pads, np.empty((64, 3, 4 * 2 * 9), dtype))
    gy = rng.normal(size=(2, 3, 7, 5, 6)).astype(dtype)
    dm = K.winograd_output_grad(gy, np.empty_like(whole))
    y = K.winograd_output(whole, np.zeros((2, 3, 7, 5, 6), dtype))
    for t0, t1 in ((0, 1), (1, 3), (3, 4)):
        cut = slice(t0 * 18, t1 * 18)
        v = K.winograd_input(x, pads, np.empty((64, 3, (t1 - t0) * 18), dtype), (t0, t1))
        np.testing.assert_array_equal(v, whole[:, :, cut])
        g = K.winograd_output_grad(gy, np.empty_like(v), (t0, t1))
        np.testing.assert_array_equal(g, dm[:, :, cut])
        yb = np.full_like(y, np.nan)
        K.winograd_output(np.ascontiguousarray(whole[:, :, cut]), yb, (t0, t1))
        planes = slice(2 * t0, min(2 * t1, 7))
        np.testing.assert_array_equal(yb[:, :, planes], y[:, :, planes])
        assert np.isnan(np.delete(yb, np.arange(7)[planes], axis=2)).all()


@pytest.mark.torch
def test_winograd_conv2d_and_its_gradients_match_pytorch_in_float32():
    import torch

    rng = np.random.default_rng(13)
    x = rng.normal(size=(4, 32, 12, 11)).astype(np.float32)
    w = (rng.normal(size=(32, 32, 3, 3)) / np.sqrt(288)).astype(np.float32)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    fx, fw = ferro.tensor(x, requires_grad=True), ferro.tensor(w, requires_grad=True)
    ty = torch.nn.functional.conv2d(tx, tw, padding=1)
    fy = F.conv2d(fx, fw, padding=1)
    np.testing.assert_allclose(fy.data, ty.detach().numpy(), rtol=1e-4, atol=1e-5)
    g = rng.normal(size=fy.shape).astype(np.float32)
    ty.backward(torch.tensor(g))
    fy.backward(ferro.tensor(g))
    np.testing.assert_allclose(fx.grad.data, tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(fw.grad.data, tw.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.torch
@pytest.mark.parametrize("transposed", [True, False])
def test_strided_winograd_and_its_gradients_match_pytorch_in_float32(transposed):
    # conv_transpose2d k=4, s=2 (the benchmark's, smaller) and conv2d k=4, s=2 through the ops'
    # CPU overrides, which take space-to-depth and Winograd F(4x4, 2x2) on these shapes.
    import torch

    from ferro._C import conv_kernels as K

    rng = np.random.default_rng(14)
    x = rng.normal(size=(2, 32, 16, 16) if transposed else (2, 16, 32, 32)).astype(np.float32)
    w = (rng.normal(size=(32, 16, 4, 4)) / np.sqrt(16 * 16)).astype(np.float32)
    assert conv_ops._subpixel_winograd(K, (4, 4), 16, 32, (2, 2), (1, 1), 1, (16, 16))
    name = "conv_transpose2d" if transposed else "conv2d"
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    fx, fw = ferro.tensor(x, requires_grad=True), ferro.tensor(w, requires_grad=True)
    ty = getattr(torch.nn.functional, name)(tx, tw, stride=2, padding=1)
    fy = getattr(F, name)(fx, fw, stride=2, padding=1)
    np.testing.assert_allclose(fy.data, ty.detach().numpy(), rtol=1e-4, atol=1e-4)
    g = rng.normal(size=fy.shape).astype(np.float32)
    ty.backward(torch.tensor(g))
    fy.backward(ferro.tensor(g))
    np.testing.assert_allclose(fx.grad.data, tx.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(fw.grad.data, tw.grad.numpy(), rtol=1e-4, atol=2e-4)


def test_winograd_kernels_refuse_what_they_cannot_hold():
    from ferro._C import conv_kernels as K

    x = np.ones((2, 3, 6, 6))
    v = np.empty((16, 3, 2 * 9))
    assert K.winograd_input(x, ((1, 1), (1, 1)), v) is v  # 3x3 tiles of 2x2 outputs each
    with pytest.raises(ShapeError, match="does not hold"):
        K.winograd_input(x, ((0, 0), (0, 0)), v)
    with pytest.raises(ShapeError, match="expected"):
        K.winograd_input(x, ((0, 0), (0, 0)), np.empty((9, 3, 8)))
    with pytest.raises(ArgumentError, match="dtype"):
        K.winograd_input(x, ((0, 0), (0, 0)), v.astype(np.float32)[:, :, :8])
    with pytest.raises(ShapeError, match="does not hold"):
        K.winograd_output(np.empty((16, 3, 7)), np.empty((2, 3, 4, 4)))
    with pytest.raises(ShapeError, match="does not hold"):
        K.winograd_output_grad(np.empty((2, 3, 4, 4)), np.empty((16, 3, 7)))
    with pytest.raises(ShapeError, match="expected"):
        K.winograd_output_grad(np.empty((2, 3, 4, 4)), np.empty((16, 2, 8)))
    y = np.empty((2, 3, 4, 4))
    y.flags.writeable = False
    with pytest.raises(ArgumentError, match="read-only"):
        K.winograd_output(np.empty((16, 3, 8)), y)
