"""Note [Early gradients]: an op that declares ``early`` inputs (linear, matmul: the weight) runs
its backward in two passes when a leaf's tensor hook can use the first pass's gradients, and the
walk finishes those leaves between the passes. Gradients and hook order stay exactly those of
the single pass."""

import numpy as np
import pytest

import ferro
from ferro import nn
from ferro._C.engine import apply, now_ns
from ferro._C.graph import OpDef
from ferro.autograd.graph import saved_tensors_hooks
from ferro.errors import ArgumentError
from ferro.profiler import profile


def _logging_matmul(log):
    def forward(ctx, a, b):
        ctx.save(a, b)
        return a @ b

    def backward(ctx, gy):
        a, b = ctx.saved
        need_a, need_b = ctx.needs_input_grad
        log.append(("backward", need_a, need_b))
        return (gy @ b.T if need_a else None, a.T @ gy if need_b else None)

    return OpDef("logging_matmul", forward, backward, early=1)


def test_weight_hook_runs_between_the_two_passes():
    log = []
    op = _logging_matmul(log)
    a = ferro.randn(3, 4, requires_grad=True)
    w = ferro.randn(4, 2, requires_grad=True)
    w.register_hook(lambda g: log.append("hook w"))
    a.register_hook(lambda g: log.append("hook a"))
    apply(op, a * 2.0, w).sum().backward()
    assert log == [("backward", False, True), "hook w", ("backward", True, False), "hook a"]


@pytest.mark.parametrize(
    "case", ["no hook", "post-hook", "saved hooks", "weight used twice", "no input grad"]
)
def test_not_staged_when_nothing_gains_or_an_order_could_change(case):
    log = []
    op = _logging_matmul(log)
    a = ferro.randn(3, 4, requires_grad=case != "no input grad")
    w = ferro.randn(4, 2, requires_grad=True)
    if case != "no hook":
        w.register_hook(lambda g: None)
    if case == "saved hooks":  # unpack runs once per backward call (checkpoint counts them)
        with saved_tensors_hooks(lambda t: t, lambda t: t):
            y = apply(op, a * 2.0, w)
    else:
        y = apply(op, a * 2.0, w)
    if case == "post-hook":  # it may replace any gradient: it needs them all at once
        y.grad_fn.register_hook(lambda gi, go: None)
    if case == "weight used twice":  # complete only after the node that runs last
        y = y + apply(op, a * 3.0, w)
    y.sum().backward()
    if case == "weight used twice":
        staged = [("backward", False, True), ("backward", True, False)]
        assert log == [("backward", True, True), *staged]
        return
    assert all(entry[1] == a.requires_grad and entry[2] for entry in log), log


def test_early_must_be_an_input_index():
    with pytest.raises(ArgumentError, match="early"):
        OpDef("bad", lambda ctx, x: x, lambda ctx, g: g, early=-1)


def _mlp(seed, hooked, log=None, stop_staging=False):
    ferro.manual_seed(seed)
    model = nn.Sequential(
        nn.Linear(30, 40), nn.Tanh(), nn.Linear(40, 40), nn.Tanh(), nn.Linear(40, 3)
    ).double()
    side = nn.Linear(30, 40).double()
    params = list(model.named_parameters()) + [("side." + n, p) for n, p in side.named_parameters()]
    if hooked:
        for name, p in params:
            p.register_hook(lambda g, name=name: log.append(name))
            p.register_post_accumulate_grad_hook(lambda t, name=name: log.append("post " + name))
    x = ferro.randn(17, 30, dtype=ferro.float64)
    h = model(x)
    z = side(x)
    if stop_staging:  # a node post-hook disables staging and changes nothing else
        for node in _nodes(h) + _nodes(z):
            if node.name() == "LinearBackward":
                node.register_hook(lambda gi, go: None)
    y = h.sum() + (z @ ferro.ones(40, 2, dtype=ferro.float64)).sum()
    return y, [p for _, p in params]


def _nodes(t):
    out, stack, seen = [], [t.grad_fn], set()
    while stack:
        n = stack.pop()
        if n is None or id(n) in seen or not hasattr(n, "next_functions"):
            continue
        seen.add(id(n))
        out.append(n)
        stack.extend(target for target, _ in n.next_functions)
    return out


@pytest.mark.parametrize("threads", [1, 2])
def test_linear_and_matmul_gradients_and_hook_order_unchanged(threads):
    runs = {}
    for stop in (False, True):
        log = []
        y, params = _mlp(0, True, log, stop_staging=stop)
        y.backward(num_threads=threads)
        runs[stop] = (log, [p.grad.numpy().copy() for p in params])
    y, params = _mlp(0, False)
    y.backward(num_threads=threads)
    plain = [p.grad.numpy() for p in params]
    staged, unstaged = runs[False][0], runs[True][0]
    if threads > 1:  # tensor hooks run on whichever thread finishes the leaf; commits are ordered
        staged, unstaged = (
            [e for e in staged if e[:4] == "post"],
            [e for e in unstaged if e[:4] == "post"],
        )
    assert staged == unstaged and len(staged) >= 8
    for staged, unstaged, ref in zip(runs[False][1], runs[True][1], plain, strict=True):
        assert np.array_equal(staged, unstaged) and np.array_equal(staged, ref)


def test_linear_weight_gradient_arrives_before_the_input_gradient_pass():
    ferro.manual_seed(0)
    layer = nn.Linear(64, 64)
    x = ferro.randn(32, 64, requires_grad=True)
    seen = []
    layer.weight.register_hook(lambda g: seen.append(now_ns()))
    with profile() as prof:
        layer(x * 1.0).sum().backward()
    passes = [e for e in prof.events() if e.kind == "backward" and e.op == "linear"]
    assert len(passes) == 2
    assert passes[0].start_ns + passes[0].duration_ns <= seen[0] <= passes[1].start_ns


def test_create_graph_and_anomaly_mode_with_hooked_weights():
    ferro.manual_seed(0)
    layer = nn.Linear(5, 3).double()
    layer.weight.register_hook(lambda g: g * 2.0)
    x = ferro.randn(4, 5, dtype=ferro.float64, requires_grad=True)
    with ferro.autograd.detect_anomaly():
        (gx,) = ferro.autograd.grad(layer(x).pow(2).sum(), [x], create_graph=True)
    gx.sum().backward()
    expected = ferro.autograd.grad(layer(x).pow(2).sum(), [x])[0]
    assert np.allclose(gx.detach().numpy(), expected.numpy())
    assert layer.weight.grad is not None and x.grad is not None


def _conv_net(kind, seed, hooked, log=None, stop_staging=False):
    # Two stacked convolutions whose weights (and biases) are leaves: with a tensor hook on
    # them, each conv node runs its backward in two passes (weight and bias first).
    ferro.manual_seed(seed)
    if kind == "depthwise":  # the depthwise loops of the conv override
        layers = [nn.Conv2d(4, 4, 3, padding=1, groups=4), nn.Conv2d(4, 4, 3, padding=1, groups=4)]
        x = ferro.randn(2, 4, 7, 6)
    elif kind == "winograd3d":  # 3x3x3, stride 1, enough channels: F(2x2x2, 3x3x3)
        layers = [nn.Conv3d(16, 16, 3, padding=1), nn.Conv3d(16, 16, 3, padding=1)]
        x = ferro.randn(2, 16, 4, 4, 4)
    else:  # the GEMM path (column kernels on the CPU), strided and dilated
        layers = [nn.Conv2d(3, 5, 3, stride=2, padding=1), nn.Conv2d(5, 4, 2, dilation=2)]
        x = ferro.randn(3, 3, 9, 8)
    net = nn.Sequential(layers[0], nn.Tanh(), layers[1])
    if kind != "winograd3d":
        net = net.double()
        x = x.double()
    params = list(net.named_parameters())
    if hooked:
        for name, p in params:
            p.register_hook(lambda g, name=name: log.append(name))
            p.register_post_accumulate_grad_hook(lambda t, name=name: log.append("post " + name))
    y = net(x * 1.0)
    if stop_staging:
        for node in _nodes(y):
            if node.name() == "ConvBackward":
                node.register_hook(lambda gi, go: None)
    return (y * y).sum(), [p for _, p in params]


@pytest.mark.parametrize("kind", ["gemm", "depthwise", "winograd3d"])
def test_conv_gradients_and_hook_order_unchanged(kind):
    runs = {}
    for stop in (False, True):
        log = []
        y, params = _conv_net(kind, 0, True, log, stop_staging=stop)
        with profile() as prof:
            y.backward()
        passes = [e for e in prof.events() if e.kind == "backward" and e.op == "conv"]
        # staged: two passes for the second conv (the first has no input gradient to wait for)
        assert len(passes) == (2 if stop else 3)
        runs[stop] = (log, [p.grad.numpy().copy() for p in params])
    y, params = _conv_net(kind, 0, False)
    y.backward()
    plain = [p.grad.numpy() for p in params]
    assert runs[False][0] == runs[True][0] and len(runs[False][0]) == 8
    for staged, unstaged, ref in zip(runs[False][1], runs[True][1], plain, strict=True):
        assert np.array_equal(staged, unstaged) and np.array_equal(staged, ref)


def test_conv_weight_gradient_arrives_before_the_input_gradient_pass():
    ferro.manual_seed(0)
    layer = nn.Conv2d(8, 8, 3, padding=1)
    x = ferro.randn(2, 8, 10, 10, requires_grad=True)
    seen = []
    layer.weight.register_hook(lambda g: seen.append(now_ns()))
    with profile() as prof:
        layer(x * 1.0).sum().backward()
    passes = [e for e in prof.events() if e.kind == "backward" and e.op == "conv"]
    assert len(passes) == 2
    assert passes[0].start_ns + passes[0].duration_ns <= seen[0] <= passes[1].start_ns
    assert x.grad is not None and layer.bias.grad is not None
