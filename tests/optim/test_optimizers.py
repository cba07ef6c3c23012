"""Adadelta, Adamax, NAdam, RAdam and LBFGS, and SGD's PyTorch keywords: NumPy references of
the published update rules, PyTorch as an extra oracle, state dicts, groups, refusals."""

import numpy as np
import pytest

import ferro
from ferro.errors import (
    ArgumentError,
    ArgumentTypeError,
    NotSupportedError,
    ReadOnlyError,
    ShapeError,
)
from ferro.ops.fused import overrides as _fused
from ferro.optim import LBFGS, SGD, Adadelta, Adamax, NAdam, RAdam

STEPS = 12  # RAdam switches from its SGD phase to the rectified one at step 6


def _ref_adadelta(p, grads, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0, maximize=False):
    v, u = np.zeros_like(p), np.zeros_like(p)
    for g in grads:
        g = (-g if maximize else g) + weight_decay * p
        v = rho * v + (1 - rho) * g**2
        dx = np.sqrt(u + eps) / np.sqrt(v + eps) * g
        u = rho * u + (1 - rho) * dx**2
        p = p - lr * dx
    return p


def _ref_adamax(p, grads, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, maximize=False):
    b1, b2 = betas
    m, u = np.zeros_like(p), np.zeros_like(p)
    for t, g in enumerate(grads, 1):
        g = (-g if maximize else g) + weight_decay * p
        m = b1 * m + (1 - b1) * g
        u = np.maximum(b2 * u, np.abs(g) + eps)
        p = p - lr / (1 - b1**t) * m / u
    return p


def _ref_nadam(
    p,
    grads,
    lr=2e-3,
    betas=(0.9, 0.999),
    eps=1e-8,
    weight_decay=0.0,
    momentum_decay=4e-3,
    decoupled_weight_decay=False,
    maximize=False,
):
    b1, b2 = betas
    m, v = np.zeros_like(p), np.zeros_like(p)

    def mu(t):
        return b1 * (1 - 0.5 * 0.96 ** (t * momentum_decay))

    for t, g in enumerate(grads, 1):
        g = -g if maximize else g
        if decoupled_weight_decay:
            p = p * (1 - lr * weight_decay)
        else:
            g = g + weight_decay * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g**2
        prod_t = np.prod([mu(i) for i in range(1, t + 1)])
        m_hat = mu(t + 1) * m / (1 - prod_t * mu(t + 1)) + (1 - mu(t)) * g / (1 - prod_t)
        p = p - lr * m_hat / (np.sqrt(v / (1 - b2**t)) + eps)
    return p


def _ref_radam(
    p,
    grads,
    lr=1e-3,
    betas=(0.9, 0.999),
    eps=1e-8,
    weight_decay=0.0,
    decoupled_weight_decay=False,
    maximize=False,
):
    b1, b2 = betas
    m, v = np.zeros_like(p), np.zeros_like(p)
    rho_inf = 2 / (1 - b2) - 1
    for t, g in enumerate(grads, 1):
        g = -g if maximize else g
        if decoupled_weight_decay:
            p = p * (1 - lr * weight_decay)
        else:
            g = g + weight_decay * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g**2
        m_hat = m / (1 - b1**t)
        rho_t = rho_inf - 2 * t * b2**t / (1 - b2**t)
        if rho_t > 5:
            l_t = np.sqrt(1 - b2**t) / (np.sqrt(v) + eps)
            r_t = np.sqrt(
                (rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)
            )
            p = p - lr * m_hat * l_t * r_t
        else:
            p = p - lr * m_hat
    return p


def _ref_sgd(p, grads, lr, momentum=0.0, weight_decay=0.0, nesterov=False, maximize=False):
    buf = None
    for g in grads:
        d = (-g if maximize else g) + weight_decay * p
        if momentum:
            buf = d if buf is None else momentum * buf + d
            d = d + momentum * buf if nesterov else buf
        p = p - lr * d
    return p


CONFIGS = [
    (Adadelta, _ref_adadelta, {}),
    (Adadelta, _ref_adadelta, dict(lr=0.5, rho=0.8, weight_decay=0.1, maximize=True)),
    (Adamax, _ref_adamax, {}),
    (Adamax, _ref_adamax, dict(lr=0.01, betas=(0.3, 0.9), weight_decay=0.1, maximize=True)),
    (NAdam, _ref_nadam, {}),
    (NAdam, _ref_nadam, dict(lr=0.01, weight_decay=0.1, momentum_decay=0.01)),
    (NAdam, _ref_nadam, dict(weight_decay=0.1, decoupled_weight_decay=True, maximize=True)),
    (RAdam, _ref_radam, {}),
    (RAdam, _ref_radam, dict(lr=0.01, weight_decay=0.1, betas=(0.8, 0.99))),
    (RAdam, _ref_radam, dict(weight_decay=0.1, decoupled_weight_decay=True, maximize=True)),
    (SGD, _ref_sgd, dict(lr=0.1, momentum=0.9, weight_decay=0.1, maximize=True)),
    (SGD, _ref_sgd, dict(lr=0.1, momentum=0.5, nesterov=True, maximize=True, foreach=True)),
    (SGD, _ref_sgd, dict(lr=0.1, maximize=True, fused=True)),
]
IDS = [f"{c.__name__}-{','.join(kw) or 'defaults'}" for c, _, kw in CONFIGS]


def _problem(dtype=np.float64, shape=(3, 4), steps=STEPS):
    rng = np.random.default_rng(0)
    w0 = rng.normal(size=shape).astype(dtype)
    return w0, [rng.normal(size=shape).astype(dtype) for _ in range(steps)]


def _run(cls, kw, w0, grads):
    p = ferro.tensor(w0, requires_grad=True)
    opt = cls([p], **kw)
    for g in grads:
        p.grad = ferro.tensor(g)
        opt.step()
    return p.detach().numpy(), opt


@pytest.mark.parametrize("cls, ref, kw", CONFIGS, ids=IDS)
@pytest.mark.parametrize("overrides", [True, False], ids=["fused", "generic"])
def test_update_matches_numpy_reference(cls, ref, kw, overrides):
    w0, grads = _problem()
    with _fused(overrides):
        got, _ = _run(cls, kw, w0, grads)
    expect = ref(w0, grads, **{k: v for k, v in kw.items() if k not in ("foreach", "fused")})
    np.testing.assert_allclose(got, expect, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("cls, ref, kw", CONFIGS, ids=IDS)
def test_float32_parameters_keep_their_dtype(cls, ref, kw):
    w0, grads = _problem(np.float32)
    got, opt = _run(cls, kw, w0, grads)
    assert got.dtype == np.float32
    assert all(
        v.dtype == np.float32
        for v in opt.state[opt.param_groups[0]["params"][0]].values()
        if isinstance(v, np.ndarray)
    )
    expect = ref(
        w0.astype(np.float64),
        [g.astype(np.float64) for g in grads],
        **{k: v for k, v in kw.items() if k not in ("foreach", "fused")},
    )
    np.testing.assert_allclose(got, expect, rtol=1e-4, atol=1e-5)


@pytest.fixture
def torch64():
    torch = pytest.importorskip("torch")
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # PyTorch keeps step counts and NAdam's mu product in it
    yield torch
    torch.set_default_dtype(prev)


@pytest.mark.torch
@pytest.mark.parametrize("cls, ref, kw", CONFIGS, ids=IDS)
def test_update_matches_pytorch(torch64, cls, ref, kw):
    torch = torch64
    w0, grads = _problem()
    got, opt = _run(cls, kw, w0, grads)
    p = torch.tensor(w0, requires_grad=True)
    topt = getattr(torch.optim, cls.__name__)([p], **kw)
    for g in grads:
        p.grad = torch.tensor(g)
        topt.step()
    np.testing.assert_allclose(got, p.detach().numpy(), rtol=1e-10, atol=1e-12)
    # the same state entries and hyper-parameters
    tstate = topt.state_dict()
    fstate = opt.state_dict()
    assert {i: set(st) for i, st in fstate["state"].items() if st} == {
        i: set(st) for i, st in tstate["state"].items()
    }
    assert set(fstate["param_groups"][0]) == set(tstate["param_groups"][0])


NEW = [c for c in CONFIGS if c[0] is not SGD]


@pytest.mark.parametrize(
    "cls, ref, kw", NEW, ids=[i for i, c in zip(IDS, CONFIGS, strict=True) if c[0] is not SGD]
)
def test_state_dict_resume_matches_uninterrupted(cls, ref, kw):
    w0, grads = _problem()
    straight, _ = _run(cls, kw, w0, grads)
    half, opt = _run(cls, kw, w0, grads[:5])
    p = ferro.tensor(half, requires_grad=True)
    resumed = cls([p], lr=123.0)  # every hyper-parameter comes back from the state dict
    resumed.load_state_dict(opt.state_dict())
    for g in grads[5:]:
        p.grad = ferro.tensor(g)
        resumed.step()
    np.testing.assert_array_equal(p.detach().numpy(), straight)


@pytest.mark.parametrize("cls", [Adadelta, Adamax, NAdam, RAdam, SGD])
def test_add_param_group_fills_defaults_and_steps_the_new_group(cls):
    w0, grads = _problem()
    a = ferro.tensor(w0, requires_grad=True)
    b = ferro.tensor(w0, requires_grad=True)
    opt = cls([a], lr=0.01)
    opt.add_param_group({"params": [b], "lr": 0.05})
    assert opt.param_groups[1]["weight_decay"] == opt.defaults["weight_decay"]
    for g in grads:
        a.grad, b.grad = ferro.tensor(g), ferro.tensor(g)
        opt.step()
    alone, _ = _run(cls, dict(lr=0.05), w0, grads)
    np.testing.assert_array_equal(b.detach().numpy(), alone)
    with pytest.raises(ArgumentError, match="two groups"):
        opt.add_param_group({"params": [a]})


@pytest.mark.parametrize("cls", [Adadelta, Adamax, NAdam, RAdam, SGD])
def test_read_only_parameter_refused_before_any_update(cls):
    a = ferro.tensor([1.0, 2.0], dtype=ferro.float64, requires_grad=True)
    frozen = np.array([3.0, 4.0])
    frozen.flags.writeable = False
    b = ferro.from_numpy(frozen).requires_grad_()
    opt = cls([a, b], lr=0.1)
    a.grad, b.grad = ferro.ones(2, dtype=ferro.float64), ferro.ones(2, dtype=ferro.float64)
    with pytest.raises(ReadOnlyError, match=rf"{cls.__name__}.step: parameter 1 .*read-only"):
        opt.step()
    assert a.tolist() == [1.0, 2.0] and opt.state == {}


@pytest.mark.parametrize(
    "make, error, match",
    [
        (
            lambda p: Adadelta(p, rho=1.5),
            ArgumentError,
            r"invalid rho 1.5; expected a value in \[0.0, 1.0\]",
        ),
        (lambda p: Adamax(p, betas=(1.0, 0.9)), ArgumentError, r"invalid betas\[0\] 1.0"),
        (lambda p: NAdam(p, momentum_decay=-1.0), ArgumentError, "invalid momentum_decay"),
        (lambda p: RAdam(p, eps=-1.0), ArgumentError, "invalid eps"),
        (lambda p: NAdam(p, lr=-1.0), ArgumentError, "invalid learning rate"),
        (lambda p: RAdam(p, differentiable=True), NotSupportedError, "differentiable=True"),
        (lambda p: Adadelta(p, capturable=True), NotSupportedError, "capturable=True"),
        (lambda p: SGD(p, lr=0.1, differentiable=True), NotSupportedError, "differentiable"),
        (lambda p: LBFGS(p, line_search_fn="armijo"), ArgumentError, "strong_wolfe"),
        (lambda p: LBFGS(p, history_size=0), ArgumentError, "history_size"),
    ],
)
def test_invalid_hyper_parameters_are_refused(make, error, match):
    with pytest.raises(error, match=match):
        make([ferro.ones(2, requires_grad=True)])


def test_loading_invalid_hyper_parameters_changes_nothing():
    w0, grads = _problem()
    _, opt = _run(Adamax, {}, w0, grads[:2])
    sd = opt.state_dict()
    sd["param_groups"][0]["betas"] = (0.9, 1.5)
    with pytest.raises(ArgumentError, match=r"betas\[1\]"):
        opt.load_state_dict(sd)
    assert opt.param_groups[0]["betas"] == (0.9, 0.999)


# LBFGS ---------------------------------------------------------------------------------------


def _quadratic(n=6, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(n, n))
    a = q @ q.T + n * np.eye(n)
    b = rng.normal(size=n)
    return a, b, np.linalg.solve(a, b)


def _lbfgs_on_quadratic(a, b, steps=1, **kw):
    x = ferro.zeros(len(b), dtype=ferro.float64, requires_grad=True)
    at, bt = ferro.tensor(a), ferro.tensor(b)
    opt = LBFGS([x], **kw)
    calls = []

    def closure():
        opt.zero_grad()
        loss = 0.5 * (x * (at @ x)).sum() - (bt * x).sum()
        loss.backward()
        calls.append(1)
        return loss

    for _ in range(steps):
        opt.step(closure)
    return x.detach().numpy(), opt, len(calls)


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_lbfgs_solves_a_quadratic(line_search_fn):
    a, b, solution = _quadratic()
    x, opt, calls = _lbfgs_on_quadratic(
        a,
        b,
        line_search_fn=line_search_fn,
        max_iter=50,
        tolerance_grad=1e-12,
        tolerance_change=1e-14,
    )
    np.testing.assert_allclose(x, solution, atol=1e-7)
    state = opt.state[opt.param_groups[0]["params"][0]]
    assert state["func_evals"] == calls and 1 < state["n_iter"] <= 50


def test_lbfgs_respects_max_iter_max_eval_and_tolerances():
    a, b, _ = _quadratic()
    _, opt, calls = _lbfgs_on_quadratic(a, b, max_iter=3, max_eval=10)
    # the last iteration's loss is not evaluated without a line search
    assert opt.state[opt.param_groups[0]["params"][0]]["n_iter"] == 3 and calls == 3
    _, opt, calls = _lbfgs_on_quadratic(a, b, max_iter=3)  # max_eval = 3 stops it first
    assert opt.state[opt.param_groups[0]["params"][0]]["n_iter"] == 2 and calls == 3
    _, _, calls = _lbfgs_on_quadratic(a, b, line_search_fn="strong_wolfe", max_iter=50, max_eval=4)
    assert calls <= 5  # the first evaluation plus at most max_eval - 1 in the line search
    x, _, calls = _lbfgs_on_quadratic(np.eye(2), np.zeros(2) + 1e-9)
    assert calls == 1 and x.tolist() == [0.0, 0.0]  # the gradient is already below tolerance_grad


def test_lbfgs_state_dict_resume_matches_uninterrupted():
    a, b, _ = _quadratic(8)
    straight, _, _ = _lbfgs_on_quadratic(a, b, steps=2, max_iter=3, history_size=2)
    half, opt, _ = _lbfgs_on_quadratic(a, b, steps=1, max_iter=3, history_size=2)
    sd = opt.state_dict()
    x = ferro.tensor(half, requires_grad=True)
    at, bt = ferro.tensor(a), ferro.tensor(b)
    resumed = LBFGS([x], max_iter=99)
    resumed.load_state_dict(sd)
    assert resumed.param_groups[0]["max_iter"] == 3

    def closure():
        resumed.zero_grad()
        loss = 0.5 * (x * (at @ x)).sum() - (bt * x).sum()
        loss.backward()
        return loss

    resumed.step(closure)
    np.testing.assert_array_equal(x.detach().numpy(), straight)
    sd["state"][0]["d"] = np.zeros(3)
    before = dict(resumed.state[x])
    with pytest.raises(ShapeError, match=r"'d' has shape \(3,\), expected \(8,\)"):
        resumed.load_state_dict(sd)
    assert resumed.state[x].keys() == before.keys() and resumed.state[x]["d"] is before["d"]


def test_lbfgs_refusals():
    frozen = np.zeros(2)
    frozen.flags.writeable = False
    p = ferro.from_numpy(frozen).requires_grad_()
    opt = LBFGS([ferro.zeros(1, requires_grad=True), p])
    calls = []
    with pytest.raises(ReadOnlyError, match="LBFGS.step: parameter 1"):
        opt.step(lambda: calls.append(1))
    assert calls == []
    with pytest.raises(ArgumentTypeError, match="needs a closure"):
        opt.step(None)
    with pytest.raises(ArgumentError, match="one group"):
        opt.add_param_group({"params": [ferro.zeros(1, requires_grad=True)]})


def _rosenbrock_run(lib, steps=3, **kw):
    w = lib.tensor(np.array([-1.5, 2.0]), requires_grad=True)
    b = lib.tensor(np.array([0.5]), requires_grad=True)
    opt = lib.optim.LBFGS([w, b], **kw)

    def closure():
        opt.zero_grad()
        loss = (1 - w[0]) ** 2 + 100 * (w[1] - w[0] ** 2) ** 2 + ((b - 0.3) ** 2).sum()
        loss.backward()
        return loss

    losses = [float(opt.step(closure).detach()) for _ in range(steps)]
    state = opt.state[opt.param_groups[0]["params"][0]]
    params = np.concatenate([w.detach().numpy(), b.detach().numpy()])
    return params, losses, state["func_evals"], state["n_iter"]


@pytest.mark.torch
@pytest.mark.parametrize(
    "kw",
    [
        {},
        dict(line_search_fn="strong_wolfe"),
        dict(lr=0.1, history_size=3, max_iter=7),
        dict(line_search_fn="strong_wolfe", history_size=2, max_iter=10, max_eval=12),
        dict(lr=0.5, tolerance_change=1e-3),
    ],
    ids=["fixed", "wolfe", "short-history", "wolfe-max-eval", "tolerance"],
)
def test_lbfgs_matches_pytorch(torch64, kw):
    got = _rosenbrock_run(ferro, **kw)
    expect = _rosenbrock_run(torch64, **kw)
    np.testing.assert_allclose(got[0], expect[0], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(got[1], expect[1], rtol=1e-9)
    assert got[2:] == expect[2:]  # the same evaluations and iterations


@pytest.mark.parametrize(
    "make",
    [
        lambda ps: ferro.optim.SGD(ps, lr=0.1, momentum=0.9),
        lambda ps: ferro.optim.Adam(ps, lr=0.1),
        lambda ps: ferro.optim.AdamW(ps, lr=0.1, amsgrad=True),
        lambda ps: ferro.optim.RMSprop(ps, lr=0.1),
        lambda ps: ferro.optim.Adagrad(ps, lr=0.1),
        lambda ps: ferro.optim.Adadelta(ps),
        lambda ps: ferro.optim.Adamax(ps),
        lambda ps: ferro.optim.NAdam(ps),
        lambda ps: ferro.optim.RAdam(ps),
    ],
)
def test_frozen_leaves_are_accepted_and_left_alone(make):
    # The autograd tutorial freezes a model's body (requires_grad = False) and still hands
    # model.parameters() to SGD, as PyTorch allows; unfreezing later makes them train.
    model = ferro.nn.Sequential(ferro.nn.Linear(3, 4), ferro.nn.Linear(4, 2))
    for p in model[0].parameters():
        p.requires_grad = False
    frozen = [p.detach().clone() for p in model[0].parameters()]
    head = model[1].weight.detach().clone()
    opt = make(model.parameters())
    model(ferro.ones(5, 3)).sum().backward()
    opt.step()
    assert all(ferro.equal(p, q) for p, q in zip(model[0].parameters(), frozen, strict=True))
    assert not ferro.equal(model[1].weight, head)
    model[0].weight.requires_grad_(True)
    opt.zero_grad()
    model(ferro.ones(5, 3)).sum().backward()
    opt.step()
    assert not ferro.equal(model[0].weight, frozen[0])
    with pytest.raises(ArgumentError, match="can only optimize leaf tensors, got a non-leaf"):
        make([model[1].weight * 2])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("overrides", [True, False])
def test_sgd_without_decay_leaves_an_infinite_parameter_infinite(dtype, overrides):
    # PyTorch adds weight_decay * p only where weight_decay != 0; 0 * inf would be NaN
    p = ferro.from_numpy(np.array([np.inf, -np.inf, 1.0], dtype)).requires_grad_()
    p.grad = ferro.from_numpy(np.array([1.0, 2.0, 1.0], dtype))
    with _fused(overrides):
        SGD([p], lr=0.5).step()
    np.testing.assert_array_equal(p.detach().numpy(), np.array([np.inf, -np.inf, 0.5], dtype))
