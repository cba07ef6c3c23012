"""PyTorch's functional activations and vector helpers (issue 13, item 7): ``F.hardswish``,
``hardsigmoid``, ``logsigmoid``, ``softsign``, ``tanhshrink``, ``glu``, ``softplus(beta,
threshold)``, ``normalize``, ``cosine_similarity``, ``pairwise_distance``, ``one_hot`` and their
modules.

The registered ops' forward and gradcheck live in the op database; here are the compositions
(checked against NumPy and by gradcheck), the edge cases and errors, the modules, and (marked
``torch``) the same calls through PyTorch as the oracle, values and gradients.
"""

from __future__ import annotations

import numpy as np
import pytest

import ferro
import ferro.nn as nn
import ferro.nn.functional as F
from ferro.errors import ArgumentError, ArgumentTypeError, ShapeError
from ferro.testing import gradcheck

RNG = np.random.default_rng(7)
A = RNG.standard_normal((3, 4))
B = RNG.standard_normal((4,))


def _t(a, grad=False):
    return ferro.tensor(a, dtype=ferro.float64, requires_grad=grad)


def _pnorm_ref(x, p, axis, keepdims=False):
    if p == np.inf:
        return np.abs(x).max(axis=axis, keepdims=keepdims)
    return (np.abs(x) ** p).sum(axis=axis, keepdims=keepdims) ** (1 / p)


@pytest.mark.parametrize("p,dim", [(2.0, 1), (1, -1), (3.0, 0), (float("inf"), 1)])
def test_normalize_matches_numpy_and_gradchecks(p, dim):
    want = A / np.maximum(_pnorm_ref(A, p, dim, True), 1e-12)
    np.testing.assert_allclose(F.normalize(_t(A), p=p, dim=dim).numpy(), want, rtol=1e-12)
    assert gradcheck(lambda x: F.normalize(x, p, dim), (_t(A, True),))


def test_normalize_keeps_a_zero_vector_zero():
    x = _t(np.array([[0.0, 0.0], [3.0, 4.0]]), True)
    y = F.normalize(x, dim=1)
    np.testing.assert_allclose(y.detach().numpy(), [[0.0, 0.0], [0.6, 0.8]], rtol=1e-15)
    y.sum().backward()
    assert np.isfinite(x.grad.numpy()).all()


def test_cosine_similarity_broadcasts_and_gradchecks():
    want = (A @ B) / (np.linalg.norm(A, axis=1) * np.linalg.norm(B))
    got = F.cosine_similarity(_t(A), _t(B), dim=-1)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    assert gradcheck(lambda a, b: F.cosine_similarity(a, b, -1), (_t(A, True), _t(B, True)))


def test_cosine_similarity_of_parallel_vectors_is_one_and_zero_vector_is_zero():
    x = _t(np.array([[1.0, 2.0], [0.0, 0.0]]))
    got = F.cosine_similarity(x, _t(np.array([[2.0, 4.0], [1.0, 1.0]])))
    np.testing.assert_allclose(got.numpy(), [1.0, 0.0], atol=1e-15)


@pytest.mark.parametrize("p", [1, 2.0, 3.5, float("inf")])
@pytest.mark.parametrize("keepdim", [False, True])
def test_pairwise_distance_matches_numpy_and_gradchecks(p, keepdim):
    want = _pnorm_ref(A - B + 1e-6, p, -1, keepdim)
    got = F.pairwise_distance(_t(A), _t(B), p=p, keepdim=keepdim)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    assert gradcheck(lambda a, b: F.pairwise_distance(a, b, p), (_t(A, True), _t(B, True)))


def test_pairwise_distance_of_equal_inputs_has_a_finite_gradient():
    x = _t(A, True)
    F.pairwise_distance(x, _t(A)).sum().backward()
    assert np.isfinite(x.grad.numpy()).all()


def test_logsigmoid_does_not_overflow():
    got = F.logsigmoid(_t(np.array([-1000.0, 0.0, 1000.0]))).numpy()
    np.testing.assert_allclose(got, [-1000.0, -np.log(2.0), 0.0], rtol=1e-15, atol=0)


def test_hardswish_gradient_at_the_kinks_follows_pytorch():
    # PyTorch takes the outer pieces' slopes at the kinks: 0 at x = -3, 1 at x = 3.
    x = _t(np.array([-4.0, -3.0, 0.0, 3.0, 4.0]), True)
    F.hardswish(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 0.0, 0.5, 1.0, 1.0])
    x = _t(np.array([-3.0, 0.0, 3.0]), True)
    F.hardsigmoid(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 1 / 6, 0.0])


def test_glu_halves_along_dim_and_axis_alias():
    x = _t(np.arange(8.0).reshape(4, 2) / 4)
    want = x.numpy()[:2] / (1 + np.exp(-x.numpy()[2:]))
    np.testing.assert_allclose(F.glu(x, 0).numpy(), want, rtol=1e-14)
    np.testing.assert_allclose(F.glu(x, axis=0).numpy(), want, rtol=1e-14)


@pytest.mark.parametrize(
    "call,err,words",
    [
        (lambda: F.glu(_t(np.ones((2, 3)))), ShapeError, "glu: dim -1 must have an even size"),
        (lambda: F.glu(_t(np.array(1.0))), ShapeError, "glu: needs at least 1 dimension"),
        (lambda: F.normalize(_t(A), p=0), ArgumentError, "normalize: p must be positive"),
        (lambda: F.normalize(_t(A), dim=1.5), ArgumentTypeError, "normalize: dim must be an int"),
        (lambda: F.normalize(_t(A), eps="x"), ArgumentTypeError, "normalize: eps must be a real"),
        (lambda: F.pairwise_distance(_t(A), _t(A), p=-1), ArgumentError, "pairwise_distance: p"),
        (
            lambda: F.cosine_similarity(_t(A), _t(np.ones(3))),
            ShapeError,
            "cosine_similarity: shapes (3, 4) and (3,) do not broadcast",
        ),
    ],
)
def test_bad_arguments_raise_the_contract_errors(call, err, words):
    with pytest.raises(err, match=words.replace("(", r"\(").replace(")", r"\)")):
        call()


def test_one_hot_exists_in_functional():
    got = F.one_hot(ferro.tensor([0, 2, 1]), 3)
    np.testing.assert_array_equal(got.numpy(), np.eye(3, dtype=np.int64)[[0, 2, 1]])


MODULES = [
    (nn.Hardswish(), F.hardswish, "Hardswish()"),
    (nn.Hardsigmoid(inplace=True), F.hardsigmoid, "Hardsigmoid(inplace=True)"),
    (nn.LogSigmoid(), F.logsigmoid, "LogSigmoid()"),
    (nn.Softsign(), F.softsign, "Softsign()"),
    (nn.Tanhshrink(), F.tanhshrink, "Tanhshrink()"),
    (nn.GLU(0), lambda x: F.glu(x, 0), "GLU(dim=0)"),
]


@pytest.mark.parametrize("module,fn,text", MODULES, ids=[m[2] for m in MODULES])
def test_activation_modules_apply_their_function(module, fn, text):
    x = _t(RNG.standard_normal((4, 6)))
    want = fn(x).numpy()  # first: an inplace=True module overwrites x
    np.testing.assert_array_equal(module(x).numpy(), want)
    assert repr(module) == text


def test_two_input_modules_take_pytorch_constructor_arguments():
    cos = nn.CosineSimilarity(dim=0, eps=1e-3)
    want = F.cosine_similarity(_t(A.T), _t(A.T), 0, 1e-3).numpy()
    np.testing.assert_array_equal(cos(_t(A.T), _t(A.T)).numpy(), want)
    dist = nn.PairwiseDistance(p=1, eps=0.0, keepdim=True)
    assert dist.norm == 1 and dist.eps == 0.0 and dist.keepdim is True
    np.testing.assert_allclose(dist(_t(A), _t(B)).numpy(), np.abs(A - B).sum(-1, keepdims=True))


# --- PyTorch as the oracle ---------------------------------------------------------------------

UNARY = [
    ("hardswish", {}),
    ("hardsigmoid", {}),
    ("logsigmoid", {}),
    ("softsign", {}),
    ("tanhshrink", {}),
    ("softplus", {}),
    ("softplus", {"beta": 2.0, "threshold": 1.0}),
    ("glu", {"dim": 0}),
    ("glu", {"dim": -1}),
    ("normalize", {"p": 3.0, "dim": 0, "eps": 1e-3}),
]


def _torch_pair(fn_name, kwargs, arrays, grad_rtol=1e-10):
    import torch
    import torch.nn.functional as TF

    xs = [_t(a, True) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    y = getattr(F, fn_name)(*xs, **kwargs)
    ty = getattr(TF, fn_name)(*ts, **kwargs)
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-14)
    w = RNG.standard_normal(tuple(ty.shape))
    (y * _t(w)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    for x, t in zip(xs, ts, strict=True):
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=grad_rtol, atol=1e-14)


@pytest.mark.torch
@pytest.mark.parametrize("name,kwargs", UNARY, ids=[f"{n}{k}" for n, k in UNARY])
def test_unary_functions_match_torch(name, kwargs):
    # Values over [-5, 5] cross hardswish's/hardsigmoid's kinks at +-3 and softplus's threshold.
    x = RNG.uniform(-5, 5, (4, 6))
    x[0, :3] = [-3.0, 3.0, 0.5]
    # PyTorch's hardsigmoid backward multiplies by the float32 constant 1.0f / 6.0f, even in
    # float64 (3e-8 off); ferro's is the float64 1/6.
    _torch_pair(name, kwargs, [x], grad_rtol=1e-7 if name == "hardsigmoid" else 1e-10)


@pytest.mark.torch
@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("cosine_similarity", {"dim": -1}),
        ("cosine_similarity", {"dim": 1, "eps": 1e-3}),
        ("pairwise_distance", {}),
        ("pairwise_distance", {"p": 1.0, "keepdim": True}),
        ("pairwise_distance", {"p": 3.5, "eps": 1e-3}),
        ("pairwise_distance", {"p": float("inf")}),
    ],
)
def test_binary_functions_match_torch(name, kwargs):
    _torch_pair(name, kwargs, [RNG.standard_normal((3, 4)), RNG.standard_normal((4,))])


@pytest.mark.torch
def test_module_constructors_match_torch():
    import torch

    x = RNG.standard_normal((2, 6))
    for name, args in [
        ("Hardswish", ()),
        ("Hardsigmoid", ()),
        ("LogSigmoid", ()),
        ("Softsign", ()),
        ("Tanhshrink", ()),
        ("GLU", (1,)),
        ("Softplus", (2.0, 1.0)),
    ]:
        got = getattr(nn, name)(*args)(_t(x)).numpy()
        want = getattr(torch.nn, name)(*args)(torch.tensor(x)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14, err_msg=name)
    y = RNG.standard_normal((2, 6))
    for name, args in [("CosineSimilarity", (1, 1e-3)), ("PairwiseDistance", (1.0, 1e-3, True))]:
        got = getattr(nn, name)(*args)(_t(x), _t(y)).numpy()
        want = getattr(torch.nn, name)(*args)(torch.tensor(x), torch.tensor(y)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=name)
