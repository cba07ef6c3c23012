"""Normalization ops and layers (issue 15): values and every gradient against PyTorch, running
statistics over several steps, state_dicts, train/eval, errors, the double-backward path
(``differentiable_backward``) and float32 accuracy. The op database (tests/ops/opdb/norm.py)
covers forward against NumPy references, gradcheck and layouts."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import pytest

import ferro
from ferro._C import norm_kernels
from ferro._C.tensor import wrap
from ferro.errors import ArgumentError, ArgumentTypeError, DtypeError, ShapeError
from ferro.ops.fused import overrides
from ferro.ops.registry import REGISTRY

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))
from opdb import BY_FAMILY  # noqa: E402

NORM_OPS = BY_FAMILY["norm"]
TOL = {np.float32: 2e-5, np.float64: 1e-11}


def _pair(a, rg=True):
    """A ferro tensor and a torch tensor of the same values (None stays None)."""
    import torch

    if a is None:
        return None, None
    return ferro.tensor(a, requires_grad=rg), torch.tensor(a, requires_grad=rg)


def _check_against_torch(f_out, t_out, f_ins, t_ins, dtype, rng):
    """Values, then every input's gradient under one random upstream gradient."""
    import torch

    tol = TOL[dtype]
    np.testing.assert_allclose(f_out.detach().numpy(), t_out.detach().numpy(), rtol=tol, atol=tol)
    g = rng.standard_normal(t_out.shape).astype(dtype)
    f_out.backward(ferro.tensor(g))
    t_out.backward(torch.tensor(g))
    for f, t in zip(f_ins, t_ins, strict=True):
        if f is not None:
            np.testing.assert_allclose(f.grad.numpy(), t.grad.numpy(), rtol=tol * 10, atol=tol * 10)


# (name, ferro call, torch call, input shapes: x first, then weight-like args or None)
def _cases():
    import torch.nn.functional as tF

    return [
        (
            "layer_norm",
            lambda x, w, b: ferro.layer_norm(x, (4, 5), w, b, 1e-4),
            lambda x, w, b: tF.layer_norm(x, (4, 5), w, b, 1e-4),
            [(3, 2, 4, 5), (4, 5), (4, 5)],
        ),
        (
            "layer_norm-no-affine",
            lambda x: ferro.layer_norm(x, 7),
            lambda x: tF.layer_norm(x, (7,)),
            [(6, 7)],
        ),
        (
            "layer_norm-no-bias",
            lambda x, w: ferro.layer_norm(x, (7,), w),
            lambda x, w: tF.layer_norm(x, (7,), w),
            [(2, 3, 7), (7,)],
        ),
        (
            "group_norm",
            lambda x, w, b: ferro.group_norm(x, 2, w, b),
            lambda x, w, b: tF.group_norm(x, 2, w, b),
            [(3, 6, 4, 3), (6,), (6,)],
        ),
        (
            "instance_norm",
            lambda x, w, b: ferro.instance_norm(x, weight=w, bias=b, eps=1e-3),
            lambda x, w, b: tF.instance_norm(x, weight=w, bias=b, eps=1e-3),
            [(2, 3, 5, 4), (3,), (3,)],
        ),
        (
            "batch_norm-train",
            lambda x, w, b: ferro.batch_norm(x, None, None, w, b, True),
            lambda x, w, b: tF.batch_norm(x, None, None, w, b, True),
            [(4, 3, 5), (3,), (3,)],
        ),
        (
            "rms_norm",
            lambda x, w: ferro.rms_norm(x, (3, 8), w),
            lambda x, w: tF.rms_norm(x, (3, 8), w),
            [(5, 3, 8), (3, 8)],
        ),
        (
            "rms_norm-eps",
            lambda x: ferro.rms_norm(x, 8, eps=1e-2),
            lambda x: tF.rms_norm(x, (8,), eps=1e-2),
            [(5, 8)],
        ),
        (
            "local_response_norm",
            lambda x: ferro.local_response_norm(x, 3, 0.2, 0.75, 1.5),
            lambda x: tF.local_response_norm(x, 3, 0.2, 0.75, 1.5),
            [(2, 7, 3, 3)],
        ),
        (
            "local_response_norm-even",
            lambda x: ferro.local_response_norm(x, 4),
            lambda x: tF.local_response_norm(x, 4),
            [(2, 5, 6)],
        ),
    ]


CASE_IDS = [
    "layer_norm",
    "layer_norm-no-affine",
    "layer_norm-no-bias",
    "group_norm",
    "instance_norm",
    "batch_norm-train",
    "rms_norm",
    "rms_norm-eps",
    "local_response_norm",
    "local_response_norm-even",
]


@pytest.mark.torch
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("which", CASE_IDS)
def test_values_and_gradients_match_pytorch(which, dtype):
    name, f_call, t_call, shapes = next(c for c in _cases() if c[0] == which)
    rng = np.random.default_rng(1)
    arrays = [rng.uniform(-2, 2, s).astype(dtype) for s in shapes]
    pairs = [_pair(a) for a in arrays]
    f_ins, t_ins = [p[0] for p in pairs], [p[1] for p in pairs]
    _check_against_torch(f_call(*f_ins), t_call(*t_ins), f_ins, t_ins, dtype, rng)


@pytest.mark.torch
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_norm_eval_and_running_statistics_match_pytorch(dtype):
    import torch
    import torch.nn.functional as tF

    rng = np.random.default_rng(2)
    rm, rv = rng.standard_normal(4).astype(dtype), rng.uniform(0.5, 2, 4).astype(dtype)
    f_rm, f_rv = ferro.tensor(rm), ferro.tensor(rv)
    t_rm, t_rv = torch.tensor(rm), torch.tensor(rv)
    for step in range(4):
        x = rng.uniform(-3, 3, (5, 4, 3)).astype(dtype) + step
        ferro.batch_norm(ferro.tensor(x), f_rm, f_rv, training=True, momentum=0.3)
        tF.batch_norm(torch.tensor(x), t_rm, t_rv, training=True, momentum=0.3)
    np.testing.assert_allclose(f_rm.numpy(), t_rm.numpy(), rtol=TOL[dtype])
    np.testing.assert_allclose(f_rv.numpy(), t_rv.numpy(), rtol=TOL[dtype])
    x, w, b = (rng.uniform(-2, 2, s).astype(dtype) for s in ((5, 4, 3), (4,), (4,)))
    (fx, tx), (fw, tw), (fb, tb) = _pair(x), _pair(w), _pair(b)
    f_out = ferro.batch_norm(fx, f_rm, f_rv, fw, fb, training=False)
    t_out = tF.batch_norm(tx, t_rm, t_rv, tw, tb, training=False)
    _check_against_torch(f_out, t_out, [fx, fw, fb], [tx, tw, tb], dtype, rng)
    np.testing.assert_allclose(f_rm.numpy(), t_rm.numpy(), rtol=TOL[dtype])  # eval: unchanged


@pytest.mark.torch
def test_instance_norm_running_statistics_match_pytorch():
    import torch
    import torch.nn.functional as tF

    rng = np.random.default_rng(3)
    f_rm, f_rv = ferro.zeros(3, dtype=ferro.float64), ferro.ones(3, dtype=ferro.float64)
    t_rm, t_rv = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    for _ in range(3):
        x = rng.uniform(-2, 2, (4, 3, 6)) * rng.uniform(0.5, 3, (4, 3, 1))
        ferro.instance_norm(ferro.tensor(x), f_rm, f_rv, momentum=0.2)
        tF.instance_norm(torch.tensor(x), t_rm, t_rv, momentum=0.2)
    np.testing.assert_allclose(f_rm.numpy(), t_rm.numpy(), rtol=1e-12)
    np.testing.assert_allclose(f_rv.numpy(), t_rv.numpy(), rtol=1e-12)
    x = rng.uniform(-2, 2, (2, 3, 5))
    f = ferro.instance_norm(ferro.tensor(x), f_rm, f_rv, use_input_stats=False)
    t = tF.instance_norm(torch.tensor(x), t_rm, t_rv, use_input_stats=False)
    np.testing.assert_allclose(f.numpy(), t.numpy(), rtol=1e-12)


def test_running_statistics_are_updated_in_place_with_unbiased_variance():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 2, 3))
    rm, rv = ferro.zeros(2, dtype=ferro.float64), ferro.ones(2, dtype=ferro.float64)
    data, version = rm._data, rm._version
    ferro.batch_norm(ferro.tensor(x), rm, rv, training=True, momentum=0.25)
    assert rm._data is data and rm._version > version
    np.testing.assert_allclose(rm.numpy(), 0.25 * x.mean(axis=(0, 2)), rtol=1e-12)
    np.testing.assert_allclose(rv.numpy(), 0.75 + 0.25 * x.var(axis=(0, 2), ddof=1), rtol=1e-12)


# Modules -------------------------------------------------------------------------------------

MODULES = [
    ("BatchNorm1d", (3,), {}, (6, 3)),
    ("BatchNorm1d", (3,), {"momentum": None, "affine": False}, (4, 3, 5)),
    ("BatchNorm2d", (4,), {}, (3, 4, 3, 2)),
    ("BatchNorm2d", (4,), {"track_running_stats": False, "bias": False}, (3, 4, 3, 2)),
    ("BatchNorm3d", (2,), {"momentum": 0.3}, (2, 2, 3, 2, 2)),
    ("InstanceNorm1d", (3,), {"affine": True, "track_running_stats": True}, (2, 3, 5)),
    ("InstanceNorm2d", (3,), {}, (3, 4, 4)),
    ("InstanceNorm3d", (2,), {"affine": True}, (2, 2, 3, 2, 2)),
    ("LayerNorm", ((3, 4),), {}, (2, 5, 3, 4)),
    ("LayerNorm", (4,), {"bias": False, "eps": 1e-3}, (5, 4)),
    ("LayerNorm", (4,), {"elementwise_affine": False}, (5, 4)),
    ("GroupNorm", (2, 6), {}, (3, 6, 4)),
    ("GroupNorm", (3, 6), {"affine": False}, (3, 6, 2, 2)),
    ("RMSNorm", (8,), {}, (3, 8)),
    ("RMSNorm", ((2, 4),), {"eps": 1e-3, "elementwise_affine": False}, (3, 2, 4)),
    ("LocalResponseNorm", (3,), {"alpha": 0.1}, (2, 5, 3, 3)),
]
MODULE_IDS = [f"{m[0]}-{i}" for i, m in enumerate(MODULES)]


@pytest.mark.torch
@pytest.mark.parametrize("spec", MODULES, ids=MODULE_IDS)
def test_module_loads_a_torch_state_dict_and_matches_in_train_and_eval(spec):
    import torch

    cls, args, kw, shape = spec
    rng = np.random.default_rng(5)
    t_mod = getattr(torch.nn, cls)(*args, **kw).double()
    f_mod = getattr(ferro.nn, cls)(*args, **kw).double()
    assert repr(f_mod) == repr(t_mod)
    with torch.no_grad():
        for p in t_mod.parameters():
            p.copy_(torch.tensor(rng.uniform(0.5, 1.5, tuple(p.shape))))
        for b in t_mod.buffers():
            if b.dtype.is_floating_point:
                b.copy_(torch.tensor(rng.uniform(0.5, 1.5, tuple(b.shape))))
            else:
                b.fill_(2)
    state = {k: v.numpy() for k, v in t_mod.state_dict().items()}
    assert list(f_mod.state_dict()) == list(state)
    f_mod.load_state_dict(state)
    for step in range(3):
        x = rng.uniform(-2, 2, shape) + step
        f_out, t_out = f_mod(ferro.tensor(x)), t_mod(torch.tensor(x))
        np.testing.assert_allclose(
            f_out.detach().numpy(), t_out.detach().numpy(), rtol=1e-10, atol=1e-12
        )
    for k, v in t_mod.state_dict().items():
        np.testing.assert_allclose(f_mod.state_dict()[k].numpy(), v.numpy(), rtol=1e-12)
    f_mod.eval()
    t_mod.eval()
    x = rng.uniform(-2, 2, shape)
    f_out, t_out = f_mod(ferro.tensor(x)), t_mod(torch.tensor(x))
    np.testing.assert_allclose(
        f_out.detach().numpy(), t_out.detach().numpy(), rtol=1e-10, atol=1e-12
    )


def test_batch_norm_momentum_none_is_the_cumulative_average():
    rng = np.random.default_rng(6)
    bn = ferro.nn.BatchNorm1d(2, momentum=None, dtype=ferro.float64)
    batches = [rng.standard_normal((5, 2)) * (k + 1) for k in range(4)]
    for x in batches:
        bn(ferro.tensor(x))
    assert bn.num_batches_tracked.item() == 4 and bn.num_batches_tracked.dtype == np.int64
    np.testing.assert_allclose(bn.running_mean.numpy(), np.mean([x.mean(0) for x in batches], 0))
    want_var = np.mean([x.var(0, ddof=1) for x in batches], 0)
    np.testing.assert_allclose(bn.running_var.numpy(), want_var)


def test_batch_norm_eval_uses_running_statistics_and_leaves_them():
    bn = ferro.nn.BatchNorm2d(3, dtype=ferro.float64)
    bn.running_mean.copy_(ferro.tensor([1.0, 2.0, 3.0]))
    bn.running_var.copy_(ferro.tensor([4.0, 1.0, 0.25]))
    bn.eval()
    x = ferro.ones(2, 3, 2, 2, dtype=ferro.float64, requires_grad=True)
    y = bn(x)
    want = (1 - np.array([1.0, 2.0, 3.0])) / np.sqrt(np.array([4.0, 1.0, 0.25]) + 1e-5)
    np.testing.assert_allclose(y.detach().numpy()[0, :, 0, 0], want)
    y.sum().backward()
    np.testing.assert_allclose(
        x.grad.numpy()[0, :, 0, 0], 1 / np.sqrt(np.array([4.0, 1.0, 0.25]) + 1e-5)
    )
    assert bn.num_batches_tracked.item() == 0
    np.testing.assert_array_equal(bn.running_mean.numpy(), [1.0, 2.0, 3.0])


def test_modules_train_their_parameters():
    layer = ferro.nn.LayerNorm(4)
    opt = ferro.optim.SGD(layer.parameters(), lr=0.1)
    x = ferro.randn(8, 4)
    (layer(x) * ferro.arange(4.0)).sum().backward()
    opt.step()
    assert not np.allclose(layer.weight.detach().numpy(), 1.0)
    assert not np.allclose(layer.bias.detach().numpy(), 0.0)


# Errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: ferro.layer_norm(ferro.randn(2, 5), (4,)), ShapeError, ["(2, 5)", "(4,)"]),
        (
            lambda: ferro.layer_norm(ferro.randn(2, 4), 4, ferro.ones(5)),
            ShapeError,
            ["weight", "(5,)", "(4,)"],
        ),
        (
            lambda: ferro.group_norm(ferro.randn(2, 6, 3), 4),
            ShapeError,
            ["num_groups=4", "(2, 6, 3)"],
        ),
        (
            lambda: ferro.batch_norm(ferro.randn(1, 3), None, None, training=True),
            ShapeError,
            ["Expected more than 1 value per channel when training", "(1, 3)"],
        ),
        (
            lambda: ferro.batch_norm(ferro.randn(4, 3), None, None),
            ArgumentError,
            ["running_mean"],
        ),
        (
            lambda: ferro.batch_norm(ferro.randn(4, 3), ferro.zeros(2), ferro.ones(2)),
            ShapeError,
            ["running_mean", "(2,)", "(4, 3)"],
        ),
        (
            lambda: ferro.instance_norm(ferro.randn(2, 3, 1)),
            ShapeError,
            ["spatial", "(2, 3, 1)"],
        ),
        (lambda: ferro.rms_norm(ferro.randn(3, 4), (3,)), ShapeError, ["(3, 4)", "(3,)"]),
        (lambda: ferro.layer_norm(ferro.randn(3, 4), 4, eps="x"), ArgumentTypeError, ["eps"]),
        (
            lambda: ferro.group_norm(ferro.tensor([[1, 2], [3, 4]]), 1),
            DtypeError,
            ["floating-point", "int64"],
        ),
        (lambda: ferro.local_response_norm(ferro.randn(3, 4), 2), ShapeError, ["(3, 4)"]),
        (lambda: ferro.local_response_norm(ferro.randn(2, 3, 4), 0), ArgumentError, ["size"]),
        (lambda: ferro.nn.BatchNorm2d(3)(ferro.randn(2, 3, 4)), ShapeError, ["4D", "3D"]),
        (lambda: ferro.nn.BatchNorm1d(3)(ferro.randn(2, 4)), ShapeError, ["3 channels", "(2, 4)"]),
        (lambda: ferro.nn.GroupNorm(4, 6), ShapeError, ["num_groups=4", "num_channels=6"]),
        (
            lambda: ferro.nn.InstanceNorm1d(3, affine=True)(ferro.randn(2, 4, 5)),
            ShapeError,
            ["num_features (3)", "4"],
        ),
    ],
)
def test_bad_input_raises_a_typed_error_naming_the_shapes(call, error, words):
    with pytest.raises(error) as info:
        call()
    for w in words:
        assert w in str(info.value)


def test_a_failed_training_forward_leaves_the_module_as_it_was():
    bn = ferro.nn.BatchNorm1d(3)
    with pytest.raises(ShapeError, match="more than 1 value per channel"):
        bn(ferro.randn(1, 3))
    assert bn.num_batches_tracked.item() == 0
    np.testing.assert_array_equal(bn.running_mean.numpy(), 0.0)


# Double backward -----------------------------------------------------------------------------


def _run(op, sample, dtype=np.float64):
    """Forward of one opdb sample with every float array requiring grad: (output, inputs)."""
    args = [
        ferro.tensor(a.astype(dtype), requires_grad=True)
        if isinstance(a, np.ndarray) and a.dtype.kind == "f"
        else a
        for a in sample.args
    ]
    return op.fn(*args, **sample.kwargs), args


def _tensor_ctx(node):
    """The ctx that the create_graph engine hands ``differentiable_backward``: the node's
    attributes, its saved arrays as Tensors."""
    saved = tuple(None if s is None else wrap(s) for s in node.saved)
    return types.SimpleNamespace(
        **vars(node), saved=saved, needs_input_grad=node.needs_input_grad, xp=ferro
    )


CASES = [(op, i) for op in NORM_OPS for i, _ in enumerate(op.samples(np.random.default_rng(0)))]


@pytest.mark.parametrize("case", CASES, ids=[f"{op.name}-{i}" for op, i in CASES])
def test_differentiable_backward_agrees_with_backward(case):
    op, i = case
    sample = op.samples(np.random.default_rng(0))[i]
    out, _ = _run(op, sample)
    node = out.grad_fn
    gy = np.random.default_rng(1).standard_normal(out.shape)
    assert node.op is REGISTRY[op.name]
    want = node.op.backward(node, gy)
    got = _differentiable_backward(node)(_tensor_ctx(node), ferro.tensor(gy))
    for w, g in zip(want, got, strict=True):
        assert (w is None) == (g is None)
        if w is not None:
            np.testing.assert_allclose(g.numpy(), w, rtol=1e-10, atol=1e-12)


def _differentiable_backward(node):
    """The op's ``differentiable_backward``, as the create_graph engine finds it."""
    assert node.op.differentiable_backward is not None, node.op.name
    return node.op.differentiable_backward


@pytest.mark.torch
@pytest.mark.parametrize("which", CASE_IDS)
def test_second_derivatives_match_pytorch(which):
    """``create_graph=True`` through the op (the engine runs ``differentiable_backward``), then
    ``sum(gx * v)`` differentiated once more, against PyTorch's double backward: the recomputed
    statistics carry their own derivatives."""
    import torch

    name, f_call, t_call, shapes = next(c for c in _cases() if c[0] == which)
    rng = np.random.default_rng(7)
    arrays = [rng.uniform(-2, 2, s) for s in shapes]
    f_ins = [ferro.tensor(a, requires_grad=True) for a in arrays]
    t_ins = [torch.tensor(a, requires_grad=True) for a in arrays]
    gy = rng.standard_normal(f_call(*f_ins).shape)
    v = rng.standard_normal(shapes[0])
    (gx,) = ferro.autograd.grad(f_call(*f_ins), f_ins[0], ferro.tensor(gy), create_graph=True)
    f_second = ferro.autograd.grad((gx * ferro.tensor(v)).sum(), f_ins, allow_unused=True)

    (t_gx,) = torch.autograd.grad(t_call(*t_ins), t_ins[0], torch.tensor(gy), create_graph=True)
    t_second = torch.autograd.grad((t_gx * torch.tensor(v)).sum(), t_ins, allow_unused=True)
    for x, f, t in zip(arrays, f_second, t_second, strict=True):
        got = np.zeros(x.shape) if f is None else f.numpy()
        want = np.zeros(x.shape) if t is None else t.numpy()
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-10)


# Numerics ------------------------------------------------------------------------------------


@pytest.mark.parametrize("fused", [False, True])
def test_float32_statistics_are_accurate_far_from_zero(fused):
    """Rows with a large mean and a small spread: a one-pass E[x^2] - E[x]^2 in float32 loses
    every digit here; two passes (or float64 accumulation in the kernels) keep them."""
    rng = np.random.default_rng(8)
    x = (1000 + rng.standard_normal((16, 512))).astype(np.float32)
    want = (x - x.astype(np.float64).mean(1, keepdims=True)) / x.astype(np.float64).std(
        1, keepdims=True
    )
    with overrides(fused):
        y = ferro.layer_norm(ferro.tensor(x), 512, eps=0.0)
        yb = ferro.batch_norm(ferro.tensor(x[None]), None, None, training=True, eps=0.0)
    np.testing.assert_allclose(y.numpy(), want, atol=2e-3)
    np.testing.assert_allclose(yb.numpy()[0], want, atol=2e-3)


# The CPU kernels -----------------------------------------------------------------------------


def test_the_kernels_run_for_contiguous_float_input_and_match_the_generic_path():
    rng = np.random.default_rng(9)
    calls = {
        "layer_norm": lambda x, w, b: ferro.layer_norm(x, 6, w, b),
        "rms_norm": lambda x, w, b: ferro.rms_norm(x, 6, w),
        "group_norm": lambda x, w, b: ferro.group_norm(x.reshape(4, 6, 1), 3, w, b),
        "batch_norm": lambda x, w, b: ferro.batch_norm(x, None, None, w, b, True),
    }
    for name, call in calls.items():
        results = []
        arrays = [rng.standard_normal(s).astype(np.float32) for s in ((4, 6), (6,), (6,))]
        for on in (True, False):
            x, w, b = (ferro.tensor(a, requires_grad=True) for a in arrays)
            with overrides(on):
                y = call(x, w, b)
                (y * y).sum().backward()
            assert y.grad_fn.fused_forward == on and y.grad_fn.fused_backward == on, name
            results.append(
                [y.detach().numpy()] + [t.grad.numpy() for t in (x, w) if t.grad is not None]
            )
        for a, g in zip(*results, strict=True):
            np.testing.assert_allclose(a, g, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(300, 700), (40, 2000), (3, 5000), (70, 16)])
@pytest.mark.parametrize("affine", [False, True])
def test_layer_and_rms_norm_kernels_match_the_generic_path_on_large_rows(dtype, shape, affine):
    """Row blocks of 256 values with a tail, rows split across threads in up to 16 blocks whose
    weight gradients are added in order, and the serial path, against the generic NumPy path."""
    rng = np.random.default_rng(11)
    arrays = [
        rng.standard_normal(shape).astype(dtype) + 3,
        rng.uniform(0.5, 1.5, shape[1:]).astype(dtype),
        rng.standard_normal(shape[1:]).astype(dtype),
        rng.standard_normal(shape).astype(dtype),
    ]
    tol = dict(rtol=2e-4, atol=2e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
    for name in ("layer_norm", "rms_norm"):
        results = []
        for on in (True, False):
            x, w, b = (ferro.tensor(a, requires_grad=True) for a in arrays[:3])
            w, b = (w, b) if affine else (None, None)
            with overrides(on):
                if name == "layer_norm":
                    y = ferro.layer_norm(x, shape[1:], w, b)
                else:
                    y = ferro.rms_norm(x, shape[1:], w)
                y.backward(ferro.tensor(arrays[3]))
            assert y.grad_fn.fused_forward == on and y.grad_fn.fused_backward == on, name
            grads = [t.grad.numpy() for t in (x, w, b) if t is not None and t.grad is not None]
            results.append([y.detach().numpy(), *grads])
        for a, g in zip(*results, strict=True):
            np.testing.assert_allclose(a, g, **tol, err_msg=name)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, groups", [((16, 8, 600), 4), ((40, 6, 300), 6), ((2, 6, 5), 3)])
def test_group_norm_kernel_matches_the_generic_path(dtype, shape, groups):
    """Rows of channels with their own weights; rows in blocks across threads (the large cases),
    instance norm's one channel per group, and the serial path."""
    rng = np.random.default_rng(13)
    arrays = [
        rng.standard_normal(shape).astype(dtype) + 1,
        rng.uniform(0.5, 1.5, shape[1]).astype(dtype),
        rng.standard_normal(shape[1]).astype(dtype),
        rng.standard_normal(shape).astype(dtype),
    ]
    tol = dict(rtol=2e-4, atol=2e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
    results = []
    for on in (True, False):
        x, w, b = (ferro.tensor(a, requires_grad=True) for a in arrays[:3])
        with overrides(on):
            y = ferro.group_norm(x, groups, w, b)
            y.backward(ferro.tensor(arrays[3]))
        assert y.grad_fn.fused_forward == on and y.grad_fn.fused_backward == on
        results.append([y.detach().numpy(), x.grad.numpy(), w.grad.numpy(), b.grad.numpy()])
    for a, g in zip(*results, strict=True):
        np.testing.assert_allclose(a, g, **tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(8, 16, 1000), (3, 5, 7)])
@pytest.mark.parametrize("affine", [False, True])
def test_batch_norm_kernel_matches_the_generic_path(dtype, shape, affine):
    """Channels split across threads (the large case) and the serial path."""
    rng = np.random.default_rng(12)
    arrays = [
        rng.standard_normal(shape).astype(dtype) - 2,
        rng.uniform(0.5, 1.5, shape[1]).astype(dtype),
        rng.standard_normal(shape[1]).astype(dtype),
        rng.standard_normal(shape).astype(dtype),
    ]
    tol = dict(rtol=2e-4, atol=2e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
    results = []
    for on in (True, False):
        x, w, b = (ferro.tensor(a, requires_grad=True) for a in arrays[:3])
        w, b = (w, b) if affine else (None, None)
        with overrides(on):
            y = ferro.batch_norm(x, None, None, w, b, training=True)
            y.backward(ferro.tensor(arrays[3]))
        assert y.grad_fn.fused_forward == on and y.grad_fn.fused_backward == on
        grads = [t.grad.numpy() for t in (x, w, b) if t is not None]
        results.append([y.detach().numpy(), *grads])
    for a, g in zip(*results, strict=True):
        np.testing.assert_allclose(a, g, **tol)


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda: norm_kernels.layer_norm_fwd(np.ones((2, 3)).T, None, None, 1e-5), ArgumentError),
        (lambda: norm_kernels.layer_norm_fwd(np.ones((2, 3)), np.ones(4), None, 1e-5), ShapeError),
        (lambda: norm_kernels.layer_norm_fwd(np.ones((2, 3), "i8"), None, None, 1e-5), DtypeError),
        (lambda: norm_kernels.layer_norm_fwd([[1.0, 2.0]], None, None, 1e-5), ShapeError),
        (
            lambda: norm_kernels.rms_norm_fwd(np.ones((2, 3)), np.ones(3, np.float32), 1e-5),
            DtypeError,
        ),
        (lambda: norm_kernels.group_norm_fwd(np.ones((2, 6, 2)), None, None, 4, 1e-5), ShapeError),
        (
            lambda: norm_kernels.batch_norm_bwd(
                np.ones((2, 3, 4)), np.ones((2, 3, 4)), None, np.ones((1, 3, 1)), np.ones(3)
            ),
            ShapeError,
        ),
        (
            lambda: norm_kernels.layer_norm_fwd(np.ones((2, 3), ">f8"), None, None, 1e-5),
            DtypeError,
        ),
    ],
)
def test_the_kernels_refuse_arrays_they_cannot_read(call, error):
    with pytest.raises(error):
        call()
