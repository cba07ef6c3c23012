"""Optimizers as PyTorch programs construct and resume them: Adam/AdamW with PyTorch's keyword
arguments (``amsgrad``, ``maximize``, ``foreach``, ``fused``), and training resumed in ferro from
a PyTorch checkpoint's model and optimizer ``state_dict`` (PyTorch keeps ``step`` as a 0-d float
tensor and its moments as tensors)."""

import numpy as np
import pytest

import ferro
from ferro.errors import NotSupportedError

torch = pytest.importorskip("torch")

X = np.random.default_rng(0).standard_normal((8, 4))


def _pair(dtype="float64"):
    torch.manual_seed(0)
    tm = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    fm = ferro.nn.Sequential(ferro.nn.Linear(4, 3), ferro.nn.Tanh(), ferro.nn.Linear(3, 2))
    tm, fm = tm.to(getattr(torch, dtype)), fm.to(getattr(ferro, dtype))
    fm.load_state_dict(tm.state_dict())
    return tm, fm


def _step(lib, model, opt, i, dtype="float64"):
    # A large input every fourth step between small ones: the gradients' second moments jump
    # and decay, so AMSGrad's running maximum differs much from the current moment.
    x = lib.from_numpy((X * (5.0 if i % 4 == 0 else 0.3)).astype(dtype))
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    opt.step()


def _params(model):
    return [p.detach().numpy().copy() for p in model.parameters()]


@pytest.mark.parametrize("name", ["Adam", "AdamW"])
@pytest.mark.parametrize(
    "kw",
    [
        {"amsgrad": True},
        {"maximize": True},
        {"amsgrad": True, "maximize": True, "weight_decay": 0.1},
        {"foreach": False, "fused": None},
    ],
    ids=lambda kw: ",".join(kw),
)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_adam_keyword_arguments_match_pytorch(name, kw, dtype):
    tm, fm = _pair(dtype)
    # beta2 = 0.5: the second moment follows the gradients within a few steps, so it falls
    # after each large one and AMSGrad's maximum matters.
    topt = getattr(torch.optim, name)(tm.parameters(), lr=0.05, betas=(0.9, 0.5), **kw)
    fopt = getattr(ferro.optim, name)(fm.parameters(), lr=0.05, betas=(0.9, 0.5), **kw)
    for i in range(8):
        _step(torch, tm, topt, i, dtype)
        _step(ferro, fm, fopt, i, dtype)
    # float32: Adam divides by sqrt(v), so an entry with a small gradient carries its rounding
    # into an lr-scaled step; 1e-4 after 8 steps at lr 0.05.
    tol = {"float64": 1e-12, "float32": 1e-4}[dtype]
    for a, b in zip(_params(fm), _params(tm), strict=True):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
    assert fopt.param_groups[0]["amsgrad"] == kw.get("amsgrad", False)
    assert ("max_exp_avg_sq" in fopt.state[fm[0].weight]) == kw.get("amsgrad", False)


def test_amsgrad_changes_the_trajectory():
    # Guards the comparison above: with these inputs AMSGrad's maximum is not the moment.
    runs = []
    for amsgrad in (False, True):
        _, fm = _pair()
        opt = ferro.optim.Adam(fm.parameters(), lr=0.05, betas=(0.9, 0.5), amsgrad=amsgrad)
        for i in range(8):
            _step(ferro, fm, opt, i)
        runs.append(_params(fm))
    assert max(np.abs(a - b).max() for a, b in zip(*runs, strict=True)) > 1e-2


@pytest.mark.parametrize("flag", ["differentiable", "capturable"])
def test_adam_refuses_flags_it_cannot_honour(flag):
    with pytest.raises(NotSupportedError, match=flag):
        ferro.optim.AdamW(ferro.nn.Linear(2, 2).parameters(), **{flag: True})


OPTIMIZERS = [
    ("SGD", {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-3}),
    ("Adam", {"lr": 0.01, "amsgrad": True}),
    ("AdamW", {"lr": 0.01, "weight_decay": 0.1}),
    ("RMSprop", {"lr": 0.01, "momentum": 0.5, "centered": True}),
    ("Adagrad", {"lr": 0.1}),
    ("Adadelta", {"lr": 1.0}),
]


@pytest.mark.parametrize(("name", "kw"), OPTIMIZERS, ids=[n for n, _ in OPTIMIZERS])
def test_training_resumes_in_ferro_from_a_pytorch_checkpoint(name, kw):
    tm, _ = _pair()
    topt = getattr(torch.optim, name)(tm.parameters(), **kw)
    for i in range(3):
        _step(torch, tm, topt, i)
    checkpoint = {"model": tm.state_dict(), "optimizer": topt.state_dict()}
    fm = ferro.nn.Sequential(ferro.nn.Linear(4, 3), ferro.nn.Tanh(), ferro.nn.Linear(3, 2))
    fm = fm.double()
    fopt = getattr(ferro.optim, name)(fm.parameters(), **kw)
    fm.load_state_dict(checkpoint["model"])
    fopt.load_state_dict(checkpoint["optimizer"])
    state = fopt.state[fm[0].weight]
    assert "step" not in state or state["step"] == 3  # PyTorch's tensor(3.) as an int
    for i in range(3, 6):
        _step(torch, tm, topt, i)
        _step(ferro, fm, fopt, i)
    for a, b in zip(_params(fm), _params(tm), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_nanogpt_finds_fused_in_adamws_signature():
    import inspect

    # nanoGPT's configure_optimizers: fused=True on CUDA when the signature has it.
    assert "fused" in inspect.signature(ferro.optim.AdamW).parameters
    model = ferro.nn.Linear(2, 2)
    assert ferro.optim.AdamW(model.parameters(), lr=1e-3, fused=True).param_groups[0]["fused"]
