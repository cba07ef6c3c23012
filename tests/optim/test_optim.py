"""Optimizers: fused kernels against the generic (reference) updates, PyTorch as an extra
oracle, state dicts, groups, schedules."""

import contextlib

import numpy as np
import pytest

import ferro
from ferro._C import engine
from ferro.errors import ArgumentError, ArgumentTypeError
from ferro.optim import SGD, Adagrad, Adam, AdamW, RMSprop
from ferro.optim.lr_scheduler import CosineAnnealingLR, LambdaLR, OneCycleLR, StepLR

CONFIGS = [
    (SGD, dict(lr=0.1)),
    (SGD, dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
    (SGD, dict(lr=0.1, momentum=0.9, dampening=0.1)),
    (SGD, dict(lr=0.1, momentum=0.9, nesterov=True)),
    (Adam, dict(lr=0.01)),
    (Adam, dict(lr=0.01, weight_decay=0.1, betas=(0.8, 0.99))),
    (AdamW, dict(lr=0.01, weight_decay=0.1)),
    (RMSprop, dict(lr=0.01)),
    (RMSprop, dict(lr=0.01, momentum=0.9, centered=True, weight_decay=0.01)),
    (Adagrad, dict(lr=0.1, lr_decay=0.01, weight_decay=0.01, initial_accumulator_value=0.1)),
]
IDS = [f"{c.__name__}-{','.join(k for k in kw if k != 'lr') or 'plain'}" for c, kw in CONFIGS]


@contextlib.contextmanager
def fused(enabled):
    prev = engine.set_overrides_enabled(enabled)
    try:
        yield
    finally:
        engine.set_overrides_enabled(prev)


def _run(cls, kw, dtype, steps=5, shape=(3, 4)):
    rng = np.random.default_rng(0)
    p = ferro.from_numpy(rng.normal(size=shape).astype(dtype)).requires_grad_()
    opt = cls([p], **kw)
    for _ in range(steps):
        p.grad = ferro.from_numpy(rng.normal(size=shape).astype(dtype))
        opt.step()
    return p.detach().numpy().copy(), opt


@pytest.mark.parametrize("cls, kw", CONFIGS, ids=IDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_update_matches_generic(cls, kw, dtype):
    with fused(True):
        a, _ = _run(cls, kw, dtype)
    with fused(False):
        b, _ = _run(cls, kw, dtype)
    tol = 1e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


@pytest.mark.parametrize("cls, kw", CONFIGS, ids=IDS)
def test_large_parameter_takes_the_parallel_path(cls, kw):
    with fused(True):
        a, _ = _run(cls, kw, np.float32, steps=2, shape=(1 << 20) + 7)
    with fused(False):
        b, _ = _run(cls, kw, np.float32, steps=2, shape=(1 << 20) + 7)
    # The kernels compute in double and round once; the float32 reference rounds every step,
    # which centered RMSprop's sqrt(s - g_avg^2) amplifies in a few of a million elements.
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.torch
@pytest.mark.parametrize("cls, kw", CONFIGS, ids=IDS)
def test_matches_pytorch(cls, kw):
    import torch

    a, _ = _run(cls, kw, np.float64)
    rng = np.random.default_rng(0)
    p = torch.tensor(rng.normal(size=(3, 4)), requires_grad=True)
    opt = getattr(torch.optim, cls.__name__)([p], **kw)
    for _ in range(5):
        p.grad = torch.tensor(rng.normal(size=(3, 4)))
        opt.step()
    np.testing.assert_allclose(a, p.detach().numpy(), rtol=1e-10, atol=1e-12)


def test_state_dict_resume_matches_uninterrupted_training():
    rng = np.random.default_rng(1)
    grads = [rng.normal(size=4).astype(np.float32) for _ in range(6)]

    def train(split):
        p = ferro.from_numpy(np.ones(4, np.float32)).requires_grad_()
        opt = Adam([p], lr=0.1)
        for i, g in enumerate(grads):
            if i == split:
                state = opt.state_dict()
                p2 = ferro.from_numpy(p.detach().numpy().copy()).requires_grad_()
                opt = Adam([p2], lr=0.5)
                opt.load_state_dict(state)
                p = p2
            p.grad = ferro.from_numpy(g)
            opt.step()
        return p.detach().numpy()

    np.testing.assert_array_equal(train(split=None), train(split=3))


def test_param_groups_zero_grad_and_errors():
    a = ferro.ones(2, requires_grad=True)
    b = ferro.ones(2, requires_grad=True)
    opt = SGD([{"params": [a]}, {"params": [b], "lr": 1.0}], lr=0.1)
    a.grad = ferro.ones(2)
    b.grad = ferro.ones(2)
    opt.step()
    assert a.tolist() == pytest.approx([0.9, 0.9]) and b.tolist() == [0.0, 0.0]
    opt.zero_grad()
    assert a.grad is None and b.grad is None
    with pytest.raises(ArgumentError, match="leaf"):
        SGD([a * 2], lr=0.1)
    with pytest.raises(ArgumentTypeError, match="tensors"):
        SGD([a, a.detach().numpy()], lr=0.1)
    with pytest.raises(ArgumentError, match="learning rate"):
        SGD([a], lr=-1)
    with pytest.raises(ArgumentError, match="two groups"):
        SGD([{"params": [a]}, {"params": [a]}], lr=0.1)
    with pytest.raises(ArgumentError, match="empty"):
        SGD([], lr=0.1)
    with pytest.raises(ArgumentError, match="nesterov"):
        SGD([a], lr=0.1, nesterov=True)
    with pytest.raises(ArgumentError, match="betas"):
        Adam([a], betas=(0.9, 1.0))


def test_step_bumps_version_so_stale_graphs_are_caught():
    w = ferro.ones(2, requires_grad=True)
    loss = (w * ferro.tensor([1.0, 2.0]) * w).sum()
    w.grad = ferro.ones(2)
    SGD([w], lr=0.1).step()
    with pytest.raises(ferro.errors.GraphError, match="version"):
        loss.backward()


def _lrs(sched_factory, steps, lr=1.0):
    p = ferro.ones(1, requires_grad=True)
    opt = SGD([p], lr=lr)
    sched = sched_factory(opt)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_schedulers_follow_their_formulas():
    assert _lrs(lambda o: StepLR(o, 2, gamma=0.5), 5) == [1.0, 1.0, 0.5, 0.5, 0.25]
    cos = _lrs(lambda o: CosineAnnealingLR(o, T_max=4, eta_min=0.1), 5)
    np.testing.assert_allclose(cos, [0.1 + 0.9 * (1 + np.cos(np.pi * t / 4)) / 2 for t in range(5)])
    assert _lrs(lambda o: LambdaLR(o, lambda e: 1 / (e + 1)), 3) == [1.0, 0.5, 1 / 3]
    one = _lrs(lambda o: OneCycleLR(o, max_lr=1.0, total_steps=10), 10)
    assert one[0] == pytest.approx(1 / 25) and max(one) == pytest.approx(1.0)
    assert one[-1] < one[0] and np.argmax(one) == 2


@pytest.mark.torch
def test_schedulers_match_pytorch():
    import torch

    def torch_lrs(factory, steps):
        p = torch.ones(1, requires_grad=True)
        opt = torch.optim.SGD([p], lr=1.0)
        sched = factory(opt)
        out = []
        for _ in range(steps):
            out.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        return out

    np.testing.assert_allclose(
        _lrs(lambda o: OneCycleLR(o, max_lr=1.0, total_steps=20), 20),
        torch_lrs(
            lambda o: torch.optim.lr_scheduler.OneCycleLR(
                o, max_lr=1.0, total_steps=20, cycle_momentum=False
            ),
            20,
        ),
        rtol=1e-10,
    )
    np.testing.assert_allclose(
        _lrs(lambda o: CosineAnnealingLR(o, T_max=7), 7),
        torch_lrs(lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=7), 7),
        rtol=1e-10,
    )
