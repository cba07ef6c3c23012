"""Pooling, padding and pixel-shuffle layers and functions: PyTorch as an oracle (values, indices,
gradients, reprs), the errors bad input gets, and the differentiable backwards (double backward)
against the fast ones."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import pytest

import ferro
import ferro.nn as nn
import ferro.nn.functional as F
from ferro.errors import (
    ArgumentError,
    DtypeError,
    IndexOutOfRangeError,
    ShapeError,
)
from ferro.ops import pooling
from ferro.ops.registry import REGISTRY
from ferro.testing import gradcheck

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))
from opdb import BY_FAMILY  # noqa: E402
from opdb.pooling import max_pool_ref  # noqa: E402


def _torch():
    return pytest.importorskip("torch")


def _pair(fname, shape, *args, rng, **kw):
    """ferro's and PyTorch's results and input gradients of one functional call."""
    torch = _torch()
    tf = torch.nn.functional
    x = rng.standard_normal(shape)
    xt = torch.tensor(x, requires_grad=True)
    xf = ferro.tensor(x, requires_grad=True)
    yt = getattr(tf, fname)(xt, *args, **kw)
    yf = getattr(F, fname)(xf, *args, **kw)
    idx = None
    if isinstance(yt, tuple):
        np.testing.assert_array_equal(yf[1].numpy(), yt[1].numpy())
        assert yf[1].dtype == np.int64
        idx = yf[1]
        yt, yf = yt[0], yf[0]
    assert tuple(yf.shape) == tuple(yt.shape)
    np.testing.assert_allclose(yf.detach().numpy(), yt.detach().numpy(), rtol=1e-12, atol=1e-12)
    g = rng.standard_normal(tuple(yt.shape))
    yt.backward(torch.tensor(g))
    yf.backward(ferro.tensor(g))
    np.testing.assert_allclose(xf.grad.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-12)
    return idx


SHAPES = {1: (2, 3, 9), 2: (2, 2, 7, 6), 3: (1, 2, 5, 6, 4)}
WINDOWS = [  # kernel, stride, padding, dilation, ceil_mode
    (2, None, 0, 1, False),
    (3, 2, 1, 1, True),
    (3, 1, 1, 2, False),
    (2, 3, 1, 1, True),
    (3, 2, 0, 2, True),
]


@pytest.mark.torch
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_max_pool_matches_torch_values_indices_and_grads(nd):
    rng = np.random.default_rng(nd)
    for k, s, p, d, ceil in WINDOWS:
        _pair(f"max_pool{nd}d", SHAPES[nd], k, s, p, d, ceil, True, rng=rng)
    _pair(f"max_pool{nd}d", SHAPES[nd][1:], 2, 1, 1, rng=rng)  # unbatched


@pytest.mark.torch
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_avg_pool_matches_torch(nd):
    rng = np.random.default_rng(nd)
    for (k, s, p, _, ceil), cip in itertools.product(WINDOWS, (True, False)):
        _pair(f"avg_pool{nd}d", SHAPES[nd], k, s, p, ceil, cip, rng=rng)
        if nd > 1:
            _pair(f"avg_pool{nd}d", SHAPES[nd], k, s, p, ceil, cip, 3, rng=rng)
    _pair(f"avg_pool{nd}d", SHAPES[nd][1:], 2, 1, 1, rng=rng)


@pytest.mark.torch
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_adaptive_pools_match_torch(nd):
    rng = np.random.default_rng(nd)
    for size in (1, 2, 3, 4, 5, 7):
        _pair(f"adaptive_avg_pool{nd}d", SHAPES[nd], size, rng=rng)
        _pair(f"adaptive_max_pool{nd}d", SHAPES[nd], size, True, rng=rng)
    if nd > 1:
        sizes = (None,) + (3,) * (nd - 1)
        _pair(f"adaptive_avg_pool{nd}d", SHAPES[nd][1:], sizes, rng=rng)
        _pair(f"adaptive_max_pool{nd}d", SHAPES[nd][1:], sizes, True, rng=rng)


@pytest.mark.torch
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_max_unpool_and_lp_pool_match_torch(nd):
    torch = _torch()
    tf = torch.nn.functional
    rng = np.random.default_rng(nd)
    x = rng.standard_normal(SHAPES[nd])
    for k, s, p in [(2, None, 0), (3, 2, 1), (3, 3, 1)]:
        y, i = getattr(tf, f"max_pool{nd}d")(torch.tensor(x), k, s, p, return_indices=True)
        want = getattr(tf, f"max_unpool{nd}d")(y, i, k, s, p, output_size=SHAPES[nd][2:])
        yf = ferro.tensor(y.numpy(), requires_grad=True)
        got = getattr(F, f"max_unpool{nd}d")(yf, ferro.tensor(i.numpy()), k, s, p, SHAPES[nd])
        np.testing.assert_array_equal(got.detach().numpy(), want.numpy())
    for norm, (k, s, ceil) in itertools.product((1, 2, 3.5), [(2, None, False), (3, 2, True)]):
        xa = np.abs(x) + 0.1
        want = getattr(tf, f"lp_pool{nd}d")(torch.tensor(xa), norm, k, s, ceil)
        got = getattr(F, f"lp_pool{nd}d")(ferro.tensor(xa), norm, k, s, ceil)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


@pytest.mark.torch
def test_pixel_shuffle_and_pads_match_torch():
    torch = _torch()
    tf = torch.nn.functional
    rng = np.random.default_rng(0)
    for r in (1, 2, 3):
        x = rng.standard_normal((2, 2 * r * r, 3, 4))
        want = tf.pixel_shuffle(torch.tensor(x), r).numpy()
        np.testing.assert_array_equal(F.pixel_shuffle(ferro.tensor(x), r).numpy(), want)
        x = rng.standard_normal((2, 3, 2 * r, 3 * r))
        want = tf.pixel_unshuffle(torch.tensor(x), r).numpy()
        np.testing.assert_array_equal(F.pixel_unshuffle(ferro.tensor(x), r).numpy(), want)
    for nd, name in itertools.product((1, 2, 3), ("Reflection", "Replication", "Circular")):
        shape = (2, 3) + (5, 4, 3)[:nd]
        pad = (2, 1, 0, 2, 1, 1)[: 2 * nd]
        x = rng.standard_normal(shape)
        got = getattr(nn, f"{name}Pad{nd}d")(pad)(ferro.tensor(x)).numpy()
        want = getattr(torch.nn, f"{name}Pad{nd}d")(pad)(torch.tensor(x)).numpy()
        np.testing.assert_array_equal(got, want)
        got = getattr(nn, f"ConstantPad{nd}d")(pad, 2.5)(ferro.tensor(x)).numpy()
        want = getattr(torch.nn, f"ConstantPad{nd}d")(pad, 2.5)(torch.tensor(x)).numpy()
        np.testing.assert_array_equal(got, want)


def _module_pairs(torch_nn):
    """(ferro module, PyTorch module) built with the same arguments."""
    specs = [
        ("MaxPool1d", (3,), {}),
        ("MaxPool2d", (2,), {"stride": 1, "padding": 1, "ceil_mode": True}),
        ("MaxPool3d", ((2, 1, 2),), {"return_indices": True}),
        ("AvgPool1d", (3,), {}),
        ("AvgPool2d", (2,), {"ceil_mode": True, "divisor_override": 3}),
        ("AvgPool3d", (2, 1), {"count_include_pad": False}),
        ("AdaptiveAvgPool1d", (3,), {}),
        ("AdaptiveAvgPool2d", ((None, 3),), {}),
        ("AdaptiveAvgPool3d", (2,), {}),
        ("AdaptiveMaxPool1d", (3,), {}),
        ("AdaptiveMaxPool2d", (2, True), {}),
        ("AdaptiveMaxPool3d", (2,), {}),
        ("MaxUnpool1d", (2,), {}),
        ("MaxUnpool2d", (2,), {}),
        ("MaxUnpool3d", (2, 1), {}),
        ("LPPool1d", (2, 3), {}),
        ("LPPool2d", (2, 3, 2), {}),
        ("LPPool3d", (1.5, 2), {"ceil_mode": True}),
        ("PixelShuffle", (2,), {}),
        ("PixelUnshuffle", (3,), {}),
        ("Unflatten", (1, (2, 3)), {}),
        ("Flatten", (), {}),
    ]
    for nd in (1, 2, 3):
        specs += [
            (f"ZeroPad{nd}d", ((1, 2) * nd,), {}),
            (f"ConstantPad{nd}d", (2, 3.5), {}),
            (f"ReflectionPad{nd}d", (1,), {}),
            (f"ReplicationPad{nd}d", (2,), {}),
            (f"CircularPad{nd}d", ((1, 0) * nd,), {}),
        ]
    return [
        (getattr(nn, name)(*args, **kw), getattr(torch_nn, name)(*args, **kw))
        for name, args, kw in specs
    ]


@pytest.mark.torch
def test_module_reprs_and_attributes_match_torch():
    torch = _torch()
    for mine, theirs in _module_pairs(torch.nn):
        assert repr(mine) == repr(theirs)
        public = {
            k: v for k, v in vars(theirs).items() if not k.startswith("_") and k != "training"
        }
        for k, v in public.items():
            assert getattr(mine, k) == v, (type(mine).__name__, k)


def test_module_reprs():
    assert repr(nn.MaxPool2d(2)) == (
        "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)"
    )
    assert repr(nn.AvgPool1d(3)) == "AvgPool1d(kernel_size=(3,), stride=(3,), padding=(0,))"
    assert repr(nn.AdaptiveAvgPool2d((None, 3))) == "AdaptiveAvgPool2d(output_size=(None, 3))"
    assert repr(nn.MaxUnpool2d(2)) == (
        "MaxUnpool2d(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0))"
    )
    assert (
        repr(nn.LPPool2d(2, 3))
        == "LPPool2d(norm_type=2, kernel_size=3, stride=None, ceil_mode=False)"
    )
    assert repr(nn.ZeroPad2d((1, 2, 3, 4))) == "ZeroPad2d((1, 2, 3, 4))"
    assert repr(nn.ConstantPad1d(2, 3.5)) == "ConstantPad1d(padding=(2, 2), value=3.5)"
    assert repr(nn.CircularPad3d(1)) == "CircularPad3d((1, 1, 1, 1, 1, 1))"
    assert repr(nn.PixelShuffle(2)) == "PixelShuffle(upscale_factor=2)"
    assert repr(nn.Unflatten(1, (2, 3))) == "Unflatten(dim=1, unflattened_size=(2, 3))"


def test_modules_call_their_functions():
    rng = np.random.default_rng(0)
    x = ferro.tensor(rng.uniform(0.1, 1.0, (2, 3, 8, 6)))  # positive: unpooling's zeros lose
    y, idx = nn.MaxPool2d(2, return_indices=True)(x)
    np.testing.assert_array_equal(y.numpy(), F.max_pool2d(x, 2).numpy())
    back = nn.MaxUnpool2d(2)(y, idx, output_size=x.shape)
    np.testing.assert_array_equal(F.max_pool2d(back, 2).numpy(), y.numpy())
    np.testing.assert_allclose(
        nn.AvgPool2d(3, 2, 1, count_include_pad=False)(x).numpy(),
        F.avg_pool2d(x, 3, 2, 1, count_include_pad=False).numpy(),
    )
    np.testing.assert_allclose(
        nn.AdaptiveAvgPool2d(1)(x).numpy(), x.numpy().mean(axis=(2, 3), keepdims=True)
    )
    z = nn.PixelUnshuffle(2)(nn.PixelShuffle(2)(ferro.tensor(rng.standard_normal((1, 8, 3, 3)))))
    assert z.shape == (1, 8, 3, 3)
    assert nn.Unflatten(-1, (2, -1))(x).shape == (2, 3, 8, 2, 3)
    assert nn.Sequential(nn.Flatten(), nn.Unflatten(1, (3, 8, 6)))(x).shape == x.shape


def test_max_pool_indices_match_the_loop_reference():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 7, 9))
    for k, s, p, d, ceil in WINDOWS:
        y, idx = F.max_pool2d(ferro.tensor(x), k, s, p, d, ceil, return_indices=True)
        want_y, want_idx = max_pool_ref(x, 2, k, s, p, d, ceil)
        np.testing.assert_array_equal(idx.numpy(), want_idx)
        np.testing.assert_array_equal(y.numpy(), want_y)


def test_max_pool_propagates_nan_and_pools_integers():
    x = np.arange(16.0).reshape(1, 1, 4, 4)
    x[0, 0, 1, 0] = np.nan
    y = F.max_pool2d(ferro.tensor(x), 2).numpy()
    assert np.isnan(y[0, 0, 0, 0]) and y[0, 0, 1, 1] == 15
    yi = F.max_pool2d(ferro.tensor(np.arange(16).reshape(1, 4, 4)), 2, padding=1)
    np.testing.assert_array_equal(yi.numpy(), [[[0, 2, 3], [8, 10, 11], [12, 14, 15]]])


def test_circular_and_padding_modules_gradcheck():
    rng = np.random.default_rng(2)
    for m, shape in [
        (nn.CircularPad2d((1, 2, 2, 0)), (1, 2, 3, 4)),
        (nn.CircularPad1d(3), (2, 3)),
        (nn.ReflectionPad3d(1), (1, 1, 3, 2, 3)),
        (nn.ReplicationPad1d((0, 2)), (1, 2, 3)),
    ]:
        x = ferro.tensor(rng.standard_normal(shape), requires_grad=True)
        assert gradcheck(m, (x,))


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda x: F.max_pool2d(x[0, 0], 2), ShapeError, ["max_pool2d", "(7, 6)"]),
        (lambda x: F.avg_pool1d(x, 2), ShapeError, ["avg_pool1d", "(2, 3, 7, 6)"]),
        (lambda x: F.max_pool2d(x, 3, padding=2), ArgumentError, ["half of kernel_size"]),
        (lambda x: F.max_pool2d(x, 8), ShapeError, ["too small", "(2, 3, 7, 6)"]),
        (lambda x: F.max_pool2d(x, 3, dilation=4), ShapeError, ["too small"]),
        (lambda x: F.avg_pool2d(x, 2, stride=0), ArgumentError, ["stride", "positive"]),
        (lambda x: F.max_pool2d(x, (2, 2, 2)), ArgumentError, ["kernel_size", "2 ints"]),
        (lambda x: F.avg_pool2d(x, 2, divisor_override=0), ArgumentError, ["divisor"]),
        (lambda x: F.adaptive_avg_pool2d(x, 0), ArgumentError, ["output_size", "positive"]),
        (lambda x: F.adaptive_max_pool3d(x[0, 0], 2), ShapeError, ["adaptive_max_pool3d"]),
        (lambda x: F.pixel_shuffle(x, 2), ShapeError, ["pixel_shuffle", "divisible", "3"]),
        (lambda x: F.pixel_unshuffle(x, 2), ShapeError, ["pixel_unshuffle", "7"]),
        (lambda x: F.pixel_shuffle(x, 0), ArgumentError, ["upscale_factor"]),
        (lambda x: F.avg_pool2d(x.long(), 2), DtypeError, ["avg_pool2d", "int64"]),
        (lambda x: F.max_pool2d(ferro.zeros(2, 0, 4, 4), 2), ShapeError, ["non-zero"]),
        (lambda x: F.pad(x, (6, 0), mode="reflect"), ShapeError, ["reflect"]),
        (lambda x: F.pad(x, (7, 0), mode="circular"), ShapeError, ["circular", "more than once"]),
        (lambda x: nn.ReflectionPad2d(1)(x[0, 0]), ShapeError, ["ReflectionPad2d"]),
        (lambda x: nn.Unflatten(1, (2, 2))(x), ShapeError, ["Unflatten", "(2, 2)"]),
        (
            lambda x: F.max_unpool2d(x, ferro.zeros(2, 3, 7, 6, dtype=ferro.int64) + 200, 2),
            IndexOutOfRangeError,
            ["max_unpool2d", "200"],
        ),
        (
            lambda x: F.max_unpool2d(x, ferro.zeros(2, 3, 7, 5, dtype=ferro.int64), 2),
            ShapeError,
            ["indices", "(2, 3, 7, 5)"],
        ),
        (
            lambda x: F.max_unpool2d(
                x, ferro.zeros(2, 3, 7, 6, dtype=ferro.int64), 2, None, 0, (30, 12)
            ),
            ShapeError,
            ["output_size"],
        ),
    ],
)
def test_bad_input_raises_typed_errors_naming_the_op(call, error, words):
    x = ferro.tensor(np.random.default_rng(0).standard_normal((2, 3, 7, 6)), requires_grad=True)
    with pytest.raises(error) as info:
        call(x)
    for w in words:
        assert w in str(info.value)


# The differentiable backwards (double backward): same values as the fast backward on every
# op-database sample of every registered pooling op.
DIFFERENTIABLE = {
    "max_pool": pooling._max_differentiable_backward,
    "adaptive_max_pool": pooling._max_differentiable_backward,
    "avg_pool": pooling._avg_differentiable_backward,
    "adaptive_avg_pool": pooling._adaptive_avg_differentiable_backward,
    "max_unpool": pooling._unpool_differentiable_backward,
}
CASES = [
    (op, i) for op in BY_FAMILY["pooling"] for i in range(len(op.samples(np.random.default_rng(0))))
]


def test_every_scattering_op_has_a_differentiable_backward():
    registered = {name for name, d in REGISTRY.items() if d.forward.__module__ == pooling.__name__}
    assert registered == set(DIFFERENTIABLE)
    for name, fn in DIFFERENTIABLE.items():
        assert REGISTRY[name].differentiable_backward is fn, name  # what the engine calls


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].name}-{c[1]}")
def test_differentiable_backward_matches_backward(case):
    op, i = case
    sample = op.samples(np.random.default_rng(0))[i]
    args = [
        ferro.tensor(a, requires_grad=a.dtype.kind == "f") if isinstance(a, np.ndarray) else a
        for a in sample.args
    ]
    out = op.fn(*args, **sample.kwargs)
    node = out.grad_fn
    name = next(
        (n for n in DIFFERENTIABLE if node.name() == REGISTRY[n].display + "Backward"), None
    )
    if name is None:
        pytest.skip(f"{op.name} is a composition of other ops ({node.name()})")
    gy = np.random.default_rng(1).standard_normal(out.shape)
    (x,) = [a for a in args if isinstance(a, ferro.Tensor) and a.requires_grad]
    out.backward(ferro.tensor(gy), retain_graph=True)
    grads = DIFFERENTIABLE[name](node, ferro.tensor(gy, requires_grad=True))
    gx = grads[0] if isinstance(grads, tuple) else grads
    assert isinstance(gx, ferro.Tensor) and gx.requires_grad
    np.testing.assert_allclose(gx.detach().numpy(), x.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_differentiable_backward_is_differentiable_in_gy():
    # The backward is linear in gy: d<backward(gy), v>/dgy = forward-direction map of v.
    rng = np.random.default_rng(3)
    x = ferro.tensor(rng.standard_normal((1, 2, 5, 6)), requires_grad=True)
    for call in (
        lambda t: F.max_pool2d(t, 3, 2, 1, ceil_mode=True),
        lambda t: F.avg_pool2d(t, 3, 2, 1, ceil_mode=True, count_include_pad=False),
        lambda t: F.adaptive_avg_pool2d(t, (3, 4)),
    ):
        out = call(x)
        name = next(n for n in DIFFERENTIABLE if out.grad_fn.name().startswith(REGISTRY[n].display))
        gy = ferro.tensor(rng.standard_normal(out.shape), requires_grad=True)
        assert gradcheck(lambda g, _n=out.grad_fn, _name=name: DIFFERENTIABLE[_name](_n, g), (gy,))


# The CPU kernels (ferro._C.pooling_kernels): tests/ops/test_fused.py checks them against the
# generic path on every op-database sample and layout; here, that they run and refuse bad arrays.


def test_max_pool_kernels_run_and_match_the_generic_path():
    from ferro.ops.fused import overrides

    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    x[0, 0, 0, :3] = np.nan
    x[1, 1, :, :] = -np.inf
    gy = rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
    results = []
    for on in (True, False):
        with overrides(on):
            t = ferro.tensor(x, requires_grad=True)
            y, idx = F.max_pool2d(t, 3, 2, 1, ceil_mode=True, return_indices=True)
            y.backward(ferro.tensor(gy))
            assert y.grad_fn.fused_forward == on and y.grad_fn.fused_backward == on
            results.append((y.detach().numpy(), idx.numpy(), t.grad.numpy()))
    (y1, i1, g1), (y0, i0, g0) = results
    np.testing.assert_array_equal(y1, y0)
    np.testing.assert_array_equal(i1, i0)
    np.testing.assert_array_equal(g1, g0)
    # An all -inf plane: each window names its first element inside the input, as PyTorch.
    np.testing.assert_array_equal(i1[1, 1, 0], [0, 1, 3, 5, 7])


@pytest.mark.parametrize(
    "shape, args",
    [
        ((3, 4, 8, 8), (2,)),  # 2x2, stride 2
        ((2, 3, 7, 9), (2,)),  # ... on odd sizes (the last row and column dropped)
        ((3, 5, 6, 6), (2,)),  # ... outputs not a multiple of the short-row loop's vector
        ((2, 3, 7, 21), (2,)),  # ... rows of 8 outputs or more (the row loop)
        ((4, 64, 64, 65), (2,)),  # ... planes split over threads (2^20 elements on)
        ((2, 3, 7, 9), (2, 2, 0, 1, True)),  # ceil_mode: a last window cut short
        ((2, 3, 8, 8), ((1, 2), (1, 2))),
        ((2, 3, 9, 9), (3, 2, 1, 2)),  # dilation with padding: ranges clipped both ends
        ((2, 3, 11, 10), (3, 3, 1)),  # a stride the row loop takes at run time (not 1 or 2)
        ((2, 3, 16, 40), (3, 2, 1)),  # rows longer than a vector, float32 and float64 alike
        ((2, 3, 16, 40), (3, 1, 1)),
    ],
)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_max_pool_kernel_windows_ties_nan_and_inf_match_the_generic_path(shape, args, dtype):
    from ferro.ops.fused import overrides

    rng = np.random.default_rng(5)
    x = rng.integers(0, 3, shape).astype(dtype)  # many ties: the first maximum wins
    x[0, 0, 1, 1:3] = np.nan
    x[0, 1, 2, 2] = np.nan
    x[1, 0] = -np.inf
    x[1, 1, ::2] = -np.inf
    x[rng.random(shape) < 0.05] = np.nan  # NaNs at every place in a window, some two in one
    results = []
    for on in (True, False):
        with overrides(on):
            t = ferro.tensor(x, requires_grad=True)
            y, idx = F.max_pool2d(t, *args, return_indices=True)
            gy = np.random.default_rng(6).standard_normal(y.shape).astype(dtype)
            y.backward(ferro.tensor(gy))
            assert y.grad_fn.fused_forward == on
            results.append((y.detach().numpy(), idx.numpy(), t.grad.numpy()))
    (y1, i1, g1), (y0, i0, g0) = results
    np.testing.assert_array_equal(y1, y0)
    np.testing.assert_array_equal(i1, i0)
    # Overlapping windows add their gradients in another order than the generic path's.
    tol = 1e-6 if dtype == np.float32 else 1e-15
    np.testing.assert_allclose(g1, g0, rtol=tol, atol=tol)


def test_max_pool_kernel_window_with_no_element_inside_is_minus_inf_as_the_generic_path():
    # Dilation 2 over a width of 1 with padding 1: every window's two columns fall outside the
    # input. PyTorch 2.13 gives -inf and indices 1, 3, 5, 7 here; the kernel gave 0 and -1.
    from ferro.ops.fused import overrides

    x = np.full((1, 1, 2, 7, 1), -5.0, np.float32)
    args = ((4, 1, 2), (1, 2, 1), (1, 0, 1), (1, 1, 2))
    results = []
    for on in (True, False):
        with overrides(on):
            t = ferro.tensor(x, requires_grad=True)
            y, idx = F.max_pool3d(t, *args, return_indices=True)
            assert y.grad_fn.fused_forward == on
            y.sum().backward()
            results.append((y.detach().numpy(), idx.numpy(), t.grad.numpy()))
    for a, b in zip(*results, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(results[0][0].ravel(), [-np.inf] * 4)
    np.testing.assert_array_equal(results[0][1].ravel(), [1, 3, 5, 7])


def test_max_pool_kernels_refuse_bad_arrays():
    from ferro._C import pooling_kernels as K

    x = np.zeros((2, 4, 4), np.float32)
    with pytest.raises(ArgumentError, match="C-contiguous"):
        K.max_pool_fwd(x.transpose(0, 2, 1), (2,), (2,), (0,), (1,), (2,))
    with pytest.raises(DtypeError, match="float32 or float64"):
        K.max_pool_fwd(x.astype(np.int64), (2,), (2,), (0,), (1,), (2,))
    with pytest.raises(ArgumentError, match="stride must have 2"):
        K.max_pool_fwd(x, (2, 2), (2,), (0,), (1,), (2,))
    gy = np.ones((2, 4, 2), np.float32)
    geometry = ((2,), (2,), (0,), (1,))
    with pytest.raises(IndexOutOfRangeError):
        K.max_pool_bwd(gy, np.full((2, 4, 2), 4, np.int64), (2, 4, 4), *geometry)
    with pytest.raises(DtypeError, match="int64"):
        K.max_pool_bwd(gy, np.zeros((2, 4, 2), np.int32), (2, 4, 4), *geometry)
    with pytest.raises(ShapeError):
        K.max_pool_bwd(gy, np.zeros((2, 4, 2), np.int64), (2, 5, 4), *geometry)
    y, idx = K.max_pool_fwd(np.arange(8.0).reshape(1, 8), (3,), (2,), (1,), (1,), (4,))
    np.testing.assert_array_equal(y, [[1, 3, 5, 7]])
    np.testing.assert_array_equal(idx, [[1, 3, 5, 7]])
    g = K.max_pool_bwd(np.ones((1, 4)), np.array([[1, 1, 5, 7]]), (1, 8), (3,), (2,), (1,), (1,))
    np.testing.assert_array_equal(g, [[0, 2, 0, 0, 0, 1, 0, 1]])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_large_global_average_pool_takes_the_two_core_row_means(dtype):
    # From TWO_CORE_MIN elements the global pool is cpu_kernels.row_sums (Note [Two-core
    # elementwise ops]): the mean of each plane, accumulated in double; its gradient is 1/L.
    from ferro._C import cpu_kernels

    rng = np.random.default_rng(2)
    x = rng.normal(size=(16, 64, 33, 32)).astype(dtype) + 3
    t = ferro.tensor(x, requires_grad=True)
    y = F.adaptive_avg_pool2d(t, 1)
    want = x.astype(np.longdouble).mean(axis=(2, 3), keepdims=True)
    assert y.shape == (16, 64, 1, 1) and y.dtype == t.dtype
    np.testing.assert_allclose(y.detach().numpy(), want.astype(dtype), rtol=4 * np.finfo(dtype).eps)
    got = cpu_kernels.row_sums(x.reshape(16 * 64, -1), 1 / (33 * 32)).reshape(y.shape)
    np.testing.assert_array_equal(y.detach().numpy(), got)
    g = rng.normal(size=y.shape).astype(dtype)
    y.backward(ferro.tensor(g))
    np.testing.assert_allclose(t.grad.numpy(), np.broadcast_to(g / (33 * 32), x.shape), rtol=1e-6)
