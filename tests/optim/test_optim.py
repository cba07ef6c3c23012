"""Optimizers: fused kernels against the generic (reference) updates, PyTorch as an extra
oracle, state dicts, groups, schedules."""

import numpy as np
import pytest

import ferro
from ferro.errors import ArgumentError, ArgumentTypeError
from ferro.ops.fused import overrides as fused
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


def _adam_after_two_steps(extra_group_keys=None):
    a = ferro.from_numpy(np.ones((2, 3), np.float32)).requires_grad_()
    b = ferro.from_numpy(np.ones(4, np.float32)).requires_grad_()
    opt = Adam([{"params": [a], **(extra_group_keys or {})}, {"params": [b], "lr": 0.5}], lr=0.1)
    for _ in range(2):
        a.grad = ferro.ones(2, 3)
        b.grad = ferro.ones(4)
        opt.step()
    return opt, a, b


def _frozen(opt):
    """The optimizer's state and hyper-parameters, copied, for comparison after a failed load."""
    groups = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
    state = {
        id(p): {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in st.items()}
        for p, st in opt.state.items()
    }
    return groups, state


def _assert_same(opt, frozen):
    groups, state = _frozen(opt)
    assert groups == frozen[0]
    assert state.keys() == frozen[1].keys()
    for pid, st in state.items():
        assert st.keys() == frozen[1][pid].keys()
        for k, v in st.items():
            np.testing.assert_array_equal(v, frozen[1][pid][k], err_msg=k)


def test_optimizer_state_dict_is_a_deep_copy():
    opt, a, _ = _adam_after_two_steps({"tags": ["warm"]})
    sd = opt.state_dict()
    saved_avg = sd["state"][0]["exp_avg"].copy()
    a.grad = ferro.ones(2, 3)
    opt.step()
    opt.param_groups[0]["tags"].append("changed")
    np.testing.assert_array_equal(sd["state"][0]["exp_avg"], saved_avg)
    assert sd["state"][0]["step"] == 2 and sd["param_groups"][0]["tags"] == ["warm"]


def test_optimizer_load_state_dict_copies_what_it_loads():
    opt, a, b = _adam_after_two_steps({"tags": ["warm"]})
    sd = opt.state_dict()
    saved_avg = sd["state"][1]["exp_avg"].copy()
    opt2 = Adam([{"params": [a]}, {"params": [b]}])
    opt2.load_state_dict(sd)
    b.grad = ferro.ones(4)
    opt2.step()
    opt2.param_groups[0]["tags"].append("changed")
    np.testing.assert_array_equal(sd["state"][1]["exp_avg"], saved_avg)
    assert sd["param_groups"][0]["tags"] == ["warm"] and opt2.state[b]["step"] == 3


def test_optimizer_load_with_a_bad_last_state_array_changes_nothing():
    from ferro.errors import ShapeError

    opt, a, b = _adam_after_two_steps()
    sd = opt.state_dict()
    sd["param_groups"][0]["lr"] = 0.01
    sd["state"][0]["step"] = 7
    sd["state"][1]["exp_avg_sq"] = np.zeros(5, np.float32)
    before = _frozen(opt)
    with pytest.raises(ShapeError, match=r"'exp_avg_sq' of parameter 1 has shape \(5,\).*\(4,\)"):
        opt.load_state_dict(sd)
    _assert_same(opt, before)
    assert opt.param_groups[0]["lr"] == 0.1 and opt.state[a]["step"] == 2


@pytest.mark.parametrize(
    "corrupt, error, match",
    [
        (lambda sd: sd["param_groups"].pop(), "ArgumentError", "1 parameter groups, this .* 2"),
        (
            lambda sd: sd["param_groups"][1]["params"].append(9),
            "ArgumentError",
            "group 1 has 2 parameters in the state dict, 1 in this optimizer",
        ),
        (
            lambda sd: sd["param_groups"][1].update(params=[0]),
            "ArgumentError",
            "index 0 appears twice",
        ),
        (lambda sd: sd["state"].update({5: {}}), "ArgumentError", "parameter 5, which no"),
        (lambda sd: sd["state"][1].update(step=-1), "ArgumentError", "non-negative int"),
        (lambda sd: sd["state"][1].update(step=1.5), "ArgumentError", "non-negative int"),
        (lambda sd: sd["param_groups"][1].update(lr=-1.0), "ArgumentError", "group 1"),
        (
            lambda sd: sd["state"][1].update(exp_avg=np.zeros(4, complex)),
            "DtypeError",
            "'exp_avg' of parameter 1 has dtype complex128",
        ),
        (
            lambda sd: sd["state"][1].update(exp_avg=np.array(["a"] * 4)),
            "DtypeError",
            "dtype <U1",
        ),
        (lambda sd: sd["state"].update({1: [1, 2]}), "ArgumentTypeError", "must be a mapping"),
        (lambda sd: sd.pop("state"), "ArgumentTypeError", "'state' and 'param_groups'"),
        (
            lambda sd: sd["param_groups"][0].update(params=["0"]),
            "ArgumentTypeError",
            "list of int",
        ),
    ],
)
def test_optimizer_load_checks_structure_first_and_changes_nothing(corrupt, error, match):
    import ferro.errors

    opt, _, _ = _adam_after_two_steps()
    sd = opt.state_dict()
    corrupt(sd)
    before = _frozen(opt)
    with pytest.raises(getattr(ferro.errors, error), match=match):
        opt.load_state_dict(sd)
    _assert_same(opt, before)


def test_optimizer_load_casts_state_to_the_parameter_and_steps_as_ints():
    opt, a, b = _adam_after_two_steps()
    sd = opt.state_dict()
    sd["state"][0]["exp_avg"] = sd["state"][0]["exp_avg"].astype(np.float64)
    sd["state"][0]["step"] = np.array(2.0)  # PyTorch keeps steps as float tensors
    opt2 = Adam([{"params": [a]}, {"params": [b]}])
    opt2.load_state_dict(sd)
    assert opt2.state[a]["exp_avg"].dtype == np.float32
    assert type(opt2.state[a]["step"]) is int and opt2.state[a]["step"] == 2
    a.grad = ferro.ones(2, 3)
    opt2.step()
    assert opt2.state[a]["step"] == 3


def test_optimizer_state_round_trip_for_a_zero_dim_parameter():
    w = ferro.tensor(1.0, requires_grad=True)
    opt = Adam([w], lr=0.1)
    w.grad = ferro.tensor(1.0)
    opt.step()
    w2 = ferro.tensor(w.item(), requires_grad=True)
    opt2 = Adam([w2], lr=0.1)
    opt2.load_state_dict(opt.state_dict())
    assert opt2.state[w2]["exp_avg"].shape == ()  # an array, not a float
    w.grad = ferro.tensor(1.0)
    w2.grad = ferro.tensor(1.0)
    opt.step()
    opt2.step()
    assert w2.item() == w.item()
