"""Learning-rate schedules: closed-form references, PyTorch's exact sequences (momentum too),
state-dict resumes, and refusals."""

import math
import warnings

import numpy as np
import pytest

import ferro
from ferro.errors import ArgumentError, ArgumentTypeError
from ferro.optim import SGD, Adagrad, Adam
from ferro.optim import lr_scheduler as S

STEPS = 40


def _opt(lib, kind="SGD"):
    """Two parameter groups (lr 0.1 and 0.3), with momentum so OneCycleLR can cycle it."""
    a = lib.ones(1, requires_grad=True)
    b = lib.ones(1, requires_grad=True)
    groups = [{"params": [a]}, {"params": [b], "lr": 0.3}]
    if kind == "SGD":
        return lib.optim.SGD(groups, lr=0.1, momentum=0.9)
    return getattr(lib.optim, kind)(groups, lr=0.1)


def _trace(lib, make, steps=STEPS, metrics=None, kind="SGD"):
    """Per step: each group's lr and momentum (or beta1), and get_last_lr()."""
    opt = _opt(lib, kind)
    sched = make(lib.optim.lr_scheduler, opt)
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's "step order" warnings: no gradients here
        for i in range(steps):
            momenta = [
                g["momentum"] if "momentum" in g else g["betas"][0] for g in opt.param_groups
            ]
            out.append([g["lr"] for g in opt.param_groups] + momenta + list(sched.get_last_lr()))
            opt.step()
            sched.step() if metrics is None else sched.step(metrics[i])
    return out


SCHEDULES = {
    "ExponentialLR": lambda m, o: m.ExponentialLR(o, 0.93),
    "MultiStepLR": lambda m, o: m.MultiStepLR(o, [3, 7, 7, 20], 0.3),
    "StepLR": lambda m, o: m.StepLR(o, 3, 0.7),
    "LinearLR": lambda m, o: m.LinearLR(o, 0.1, 0.9, 13),
    "LinearLR-defaults": lambda m, o: m.LinearLR(o),
    "ConstantLR": lambda m, o: m.ConstantLR(o, 0.3, 4),
    "PolynomialLR": lambda m, o: m.PolynomialLR(o, 17, 1.7),
    "CosineAnnealingLR": lambda m, o: m.CosineAnnealingLR(o, 7, 0.01),
    "CosineAnnealingWarmRestarts": lambda m, o: m.CosineAnnealingWarmRestarts(o, 3, 2, 0.001),
    "CosineAnnealingWarmRestarts-T_mult1": lambda m, o: m.CosineAnnealingWarmRestarts(o, 5),
    "LambdaLR": lambda m, o: m.LambdaLR(o, [lambda e: 0.95**e + 0.1, lambda e: 1 / (e + 1)]),
    "MultiplicativeLR": lambda m, o: m.MultiplicativeLR(o, lambda e: 0.97),
    "OneCycleLR": lambda m, o: m.OneCycleLR(o, [1.0, 2.0], total_steps=45),
    "OneCycleLR-three-phase": lambda m, o: m.OneCycleLR(
        o, 1.0, epochs=5, steps_per_epoch=9, three_phase=True, anneal_strategy="linear"
    ),
    "SequentialLR": lambda m, o: m.SequentialLR(
        o,
        [m.LinearLR(o, 0.1, total_iters=5), m.CosineAnnealingLR(o, 10), m.ExponentialLR(o, 0.9)],
        milestones=[5, 15],
    ),
    "ChainedScheduler": lambda m, o: m.ChainedScheduler(
        [m.ExponentialLR(o, 0.9), m.MultiStepLR(o, [4, 9])]
    ),
}

# metrics that improve, stall, improve a little (under and over the threshold), then get worse
METRICS = [5.0, 4.0, 4.0, 3.9999, 3.0, 3.0, 3.0, 3.0, 2.99, 2.0] + [2.5] * 15 + [1.0] * 5
PLATEAUS = [
    {},
    dict(patience=2, factor=0.5),
    dict(mode="max", patience=2, factor=0.5),
    dict(threshold_mode="abs", threshold=0.05, patience=1, cooldown=2, min_lr=[0.01, 0.05]),
    dict(mode="max", threshold_mode="abs", patience=0, min_lr=0.02, eps=1e-3),
    dict(patience=3, cooldown=3, threshold=0.01),
]


def _lrs(trace, group=0):
    return [row[group] for row in trace]


def test_closed_forms():
    t = np.arange(STEPS)
    np.testing.assert_allclose(_lrs(_trace(ferro, SCHEDULES["ExponentialLR"])), 0.1 * 0.93**t)
    expect = 0.1 * 0.3 ** np.searchsorted([3, 7, 7, 20], t, side="right")
    np.testing.assert_allclose(_lrs(_trace(ferro, SCHEDULES["MultiStepLR"])), expect)
    expect = 0.3 * (0.1 + (0.9 - 0.1) * np.minimum(t, 13) / 13)
    np.testing.assert_allclose(_lrs(_trace(ferro, SCHEDULES["LinearLR"]), 1), expect)
    expect = 0.1 * (1 - np.minimum(t, 17) / 17) ** 1.7
    np.testing.assert_allclose(_lrs(_trace(ferro, SCHEDULES["PolynomialLR"])), expect, atol=1e-15)
    # SGDR with T_0=3, T_mult=2: periods 3, 6, 12, 24 starting at epochs 0, 3, 9, 21
    starts, periods = np.array([0, 3, 9, 21]), np.array([3, 6, 12, 24])
    k = np.searchsorted(starts, t, side="right") - 1
    cos = 0.001 + (0.1 - 0.001) * (1 + np.cos(np.pi * (t - starts[k]) / periods[k])) / 2
    trace = _trace(ferro, SCHEDULES["CosineAnnealingWarmRestarts"])
    np.testing.assert_allclose(_lrs(trace), cos, rtol=1e-12)
    # warm-up 5 epochs, cosine over 10, then exponential
    trace = _lrs(_trace(ferro, SCHEDULES["SequentialLR"]))
    warm = 0.1 * (0.1 + 0.9 * t[:5] / 5)
    cosine = 0.1 * (1 + np.cos(np.pi * (t[5:15] - 5) / 10)) / 2
    np.testing.assert_allclose(trace[:15], np.concatenate([warm, cosine]), atol=1e-15)
    np.testing.assert_allclose(trace[15:], 0.1 * 0.9 ** (t[15:] - 15), rtol=1e-12)


def test_reduce_on_plateau_by_hand():
    trace = _lrs(
        _trace(ferro, lambda m, o: m.ReduceLROnPlateau(o, patience=2, factor=0.5), 30, METRICS)
    )
    # 4.0 again and 3.9999 are not better than 4 * (1 - 1e-4): 2 bad epochs, within patience;
    # after 3.0, three more 3.0s exceed it: halved after epoch 7. 2.99 < 3 * (1 - 1e-4) and 2.0
    # are improvements; then each third 2.5 halves again (epochs 12, 15, 18, 21, 24); 1.0 is
    # a new best, and three more 1.0s halve after epoch 28.
    expect = [0.1] * 8 + [0.05] * 5 + [0.025] * 3 + [0.0125] * 3 + [0.00625] * 3
    expect += [0.003125] * 3 + [0.0015625] * 4 + [0.00078125]
    assert trace == pytest.approx(expect, rel=1e-12)


@pytest.mark.torch
@pytest.mark.parametrize("name", list(SCHEDULES))
def test_sequence_matches_pytorch_exactly(name):
    import torch

    assert _trace(ferro, SCHEDULES[name]) == _trace(torch, SCHEDULES[name])


@pytest.mark.torch
@pytest.mark.parametrize("kw", PLATEAUS, ids=[",".join(k) or "defaults" for k in PLATEAUS])
def test_reduce_on_plateau_matches_pytorch_exactly(kw):
    import torch

    def make(m, o):
        return m.ReduceLROnPlateau(o, **kw)

    assert _trace(ferro, make, 30, METRICS) == _trace(torch, make, 30, METRICS)


@pytest.mark.torch
def test_one_cycle_cycles_adams_beta1_like_pytorch():
    import torch

    make = SCHEDULES["OneCycleLR"]
    assert _trace(ferro, make, 45, kind="Adam") == _trace(torch, make, 45, kind="Adam")


RESUMABLE = {**SCHEDULES, "ReduceLROnPlateau": lambda m, o: m.ReduceLROnPlateau(o, **PLATEAUS[3])}


@pytest.mark.parametrize("name", list(RESUMABLE))
def test_state_dict_resume_matches_uninterrupted(name):
    make = RESUMABLE[name]
    metrics = METRICS if name == "ReduceLROnPlateau" else None

    def run(opt, sched, steps):
        lrs = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for i in steps:
                lrs.append([g["lr"] for g in opt.param_groups] + sched.get_last_lr())
                opt.step()
                sched.step() if metrics is None else sched.step(metrics[i])
        return lrs

    opt = _opt(ferro)
    sched = make(S, opt)
    straight = run(opt, sched, range(30))
    opt = _opt(ferro)
    sched = make(S, opt)
    first = run(opt, sched, range(12))
    opt_state, sched_state = opt.state_dict(), sched.state_dict()
    opt2 = _opt(ferro)
    sched2 = make(S, opt2)  # built fresh, as a script that resumes does
    opt2.load_state_dict(opt_state)
    sched2.load_state_dict(sched_state)
    assert first + run(opt2, sched2, range(12, 30)) == straight


def test_step_with_an_epoch_uses_the_closed_form_and_warns():
    opt = _opt(ferro)
    sched = S.StepLR(opt, 3, 0.5)
    with pytest.warns(UserWarning, match="deprecated"):
        sched.step(7)
    assert sched.get_last_lr() == [0.1 * 0.5**2, 0.3 * 0.5**2] and sched.last_epoch == 7
    sched = S.CosineAnnealingWarmRestarts(_opt(ferro), T_0=4)
    sched.step(5.5)  # fractional epochs, one restart in
    assert sched.get_last_lr()[0] == pytest.approx(0.05 * (1 + math.cos(math.pi * 1.5 / 4)))


def test_get_last_lr_is_a_copy():
    sched = S.ExponentialLR(_opt(ferro), 0.5)
    sched.get_last_lr().append(1.0)
    assert sched.get_last_lr() == [0.1, 0.3]


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda o: S.LinearLR(o, start_factor=0.0), ArgumentError, "start_factor"),
        (lambda o: S.ConstantLR(o, factor=2.0), ArgumentError, "factor"),
        (lambda o: S.OneCycleLR(o, 1.0), ArgumentError, "total_steps"),
        (lambda o: S.OneCycleLR(o, 1.0, 10, pct_start=2.0), ArgumentError, "pct_start"),
        (lambda o: S.OneCycleLR(o, [1.0], 10), ArgumentError, "expected 2 values"),
        (lambda o: S.CosineAnnealingWarmRestarts(o, T_0=0), ArgumentError, "T_0"),
        (lambda o: S.CosineAnnealingWarmRestarts(o, 2, T_mult=0), ArgumentError, "T_mult"),
        (lambda o: S.ReduceLROnPlateau(o, factor=1.0), ArgumentError, "factor"),
        (lambda o: S.ReduceLROnPlateau(o, mode="up"), ArgumentError, "mode"),
        (lambda o: S.ReduceLROnPlateau(o, threshold_mode="x"), ArgumentError, "threshold_mode"),
        (lambda o: S.LambdaLR(o, [lambda e: 1.0]), ArgumentError, "expected 2 values"),
        (lambda o: S.LambdaLR(o, 3), ArgumentTypeError, "callable"),
        (lambda o: S.StepLR(o, 3, last_epoch=4), ArgumentError, "no 'initial_lr'"),
        (lambda o: S.ExponentialLR([o], 0.5), ArgumentTypeError, "Optimizer"),
        (
            lambda o: S.SequentialLR(o, [S.ExponentialLR(o, 0.5)], milestones=[3]),
            ArgumentError,
            "one milestone fewer",
        ),
        (
            lambda o: S.SequentialLR(o, [S.ReduceLROnPlateau(o)], milestones=[]),
            ArgumentError,
            "ReduceLROnPlateau",
        ),
        (
            lambda o: S.ChainedScheduler([S.ExponentialLR(_opt(ferro), 0.5)], o),
            ArgumentError,
            "another optimizer",
        ),
    ],
)
def test_refusals(make, error, match):
    with pytest.raises(error, match=match):
        make(_opt(ferro))


def test_one_cycle_momentum_needs_an_optimizer_with_momentum():
    p = ferro.ones(1, requires_grad=True)
    with pytest.raises(ArgumentError, match="cycle_momentum"):
        S.OneCycleLR(Adagrad([p]), 1.0, 10)
    S.OneCycleLR(Adagrad([p]), 1.0, 10, cycle_momentum=False)
    opt = Adam([ferro.ones(1, requires_grad=True)])
    S.OneCycleLR(opt, 1.0, 10)
    assert opt.param_groups[0]["betas"] == (0.95, 0.999)
    opt = SGD([ferro.ones(1, requires_grad=True)], lr=0.1)
    with pytest.raises(ArgumentError, match="stepped 11 times"):
        sched = S.OneCycleLR(opt, 1.0, 10)
        for _ in range(11):
            sched.step()
