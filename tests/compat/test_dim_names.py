"""PyTorch's argument names (``dim``, ``keepdim``, ``unbiased``, ``correction``) on reductions,
softmax and shape ops, with NumPy's ``axis``/``keepdims`` as aliases (issue 13, item 1).

The NumPy tests always run; the ones marked ``torch`` run the same calls through PyTorch as
the oracle and skip where it is not installed.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import ferro
from ferro.errors import ArgumentTypeError

RNG = np.random.default_rng(13)
A = RNG.standard_normal((3, 4, 5))
# Distinct values, so arg-extremes and max/min indices do not depend on a tie convention.
P = RNG.permutation(60).reshape(3, 4, 5).astype(np.float64)

# (name, NumPy reference taking axis/keepdims)
REDUCTIONS = [
    ("sum", np.sum),
    ("mean", np.mean),
    ("prod", np.prod),
    ("amax", np.amax),
    ("amin", np.amin),
    ("logsumexp", lambda a, axis, keepdims: np.log(np.sum(np.exp(a), axis, keepdims=keepdims))),
    ("norm", lambda a, axis, keepdims: np.sqrt(np.sum(a * a, axis, keepdims=keepdims))),
    ("var", lambda a, axis, keepdims: np.var(a, axis, ddof=1, keepdims=keepdims)),
    ("std", lambda a, axis, keepdims: np.std(a, axis, ddof=1, keepdims=keepdims)),
]


@pytest.mark.parametrize("name,ref", REDUCTIONS, ids=[r[0] for r in REDUCTIONS])
@pytest.mark.parametrize("dim", [1, (0, 2), -1])
@pytest.mark.parametrize("keep", [False, True])
def test_reduction_dim_keepdim_and_numpy_aliases_agree(name, ref, dim, keep):
    x = ferro.tensor(A)
    want = ref(A, axis=dim, keepdims=keep)
    fn = getattr(ferro, name)
    for got in (
        fn(x, dim=dim, keepdim=keep),
        fn(x, axis=dim, keepdims=keep),
        fn(x, dim=dim, keepdims=keep),
        getattr(x, name)(dim=dim, keepdim=keep),
    ):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)


@pytest.mark.parametrize(
    "call",
    [
        lambda x: ferro.sum(x, 0, axis=1),
        lambda x: x.mean(dim=0, axis=0),
        lambda x: x.sum(0, True, keepdims=True),
        lambda x: ferro.var(x, dim=0, axis=0),
        lambda x: ferro.softmax(x, 1, axis=1),
        lambda x: ferro.cat([x, x], dim=0, axis=0),
        lambda x: x.squeeze(0, axis=0),
        lambda x: x.cumsum(dim=0, axis=0),
        lambda x: x.argmax(1, axis=1),
    ],
)
def test_both_spellings_is_an_argument_type_error(call):
    x = ferro.tensor(A)
    with pytest.raises(ArgumentTypeError, match="multiple values"):
        call(x)


def test_signature_shows_pytorch_names_then_aliases():
    params = inspect.signature(ferro.sum).parameters
    assert list(params) == ["x", "dim", "keepdim", "axis", "keepdims"]
    assert params["axis"].kind is inspect.Parameter.KEYWORD_ONLY


@pytest.mark.parametrize(
    "kwargs,ddof",
    [({}, 1), ({"unbiased": False}, 0), ({"unbiased": True}, 1), ({"correction": 0}, 0)]
    + [({"correction": 2}, 2), ({"correction": 0.5}, 0.5)],
)
def test_var_std_unbiased_and_correction(kwargs, ddof):
    x = ferro.tensor(A)
    np.testing.assert_allclose(ferro.var(x, 1, **kwargs).numpy(), np.var(A, 1, ddof=ddof))
    np.testing.assert_allclose(x.std(dim=1, **kwargs).numpy(), np.std(A, 1, ddof=ddof))


def test_var_legacy_bool_overload_means_unbiased():
    x = ferro.tensor(A)
    np.testing.assert_allclose(x.var(False).numpy(), np.var(A))
    np.testing.assert_allclose(ferro.std(x, True).numpy(), np.std(A, ddof=1))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"unbiased": True, "correction": 1}, "not both"),
        ({"unbiased": 1}, "unbiased must be a bool"),
        ({"correction": "1"}, "correction must be a number"),
    ],
)
def test_var_bad_correction_arguments(kwargs, match):
    with pytest.raises(ArgumentTypeError, match=match):
        ferro.var(ferro.tensor(A), 0, **kwargs)


@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min_dim_return_a_named_tuple(name):
    x = ferro.tensor(P, requires_grad=True)
    out = getattr(x, name)(dim=1, keepdim=True)
    assert type(out).__name__ == name and isinstance(out, tuple)
    values, indices = out  # tuple unpacking keeps working
    assert out.values is values and out.indices is indices
    want_i = (np.argmax if name == "max" else np.argmin)(P, axis=1)[:, None]
    np.testing.assert_array_equal(indices.numpy(), want_i)
    np.testing.assert_array_equal(values.detach().numpy(), np.take_along_axis(P, want_i, 1))
    out.values.sum().backward()
    want_g = np.zeros_like(P)
    np.put_along_axis(want_g, want_i, 1.0, 1)
    np.testing.assert_array_equal(x.grad.numpy(), want_g)


def test_max_with_a_tensor_is_the_elementwise_maximum():
    a, b = ferro.tensor(A[0]), ferro.tensor(A[1])
    np.testing.assert_array_equal(ferro.max(a, b).numpy(), np.maximum(A[0], A[1]))
    np.testing.assert_array_equal(a.min(b).numpy(), np.minimum(A[0], A[1]))


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@pytest.mark.parametrize("dim,keep", [(None, False), (None, True), (0, False), (-1, True)])
def test_argmax_argmin(name, dim, keep):
    x = ferro.tensor(P, requires_grad=True)
    got = getattr(ferro, name)(x, dim=dim, keepdim=keep)
    want = getattr(np, name)(P, axis=dim, keepdims=keep)
    assert got.dtype == ferro.int64 and not got.requires_grad
    np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(getattr(x, name)(axis=dim, keepdims=keep).numpy(), want)


def test_argmax_rejects_a_tuple_dim():
    with pytest.raises(ArgumentTypeError, match="argmax: dim must be an int"):
        ferro.argmax(ferro.tensor(P), dim=(0, 1))


def test_cumsum_norm_softmax_take_dim():
    x = ferro.tensor(A)
    np.testing.assert_allclose(x.cumsum(dim=2).numpy(), np.cumsum(A, 2))
    np.testing.assert_allclose(ferro.cumsum(x, axis=0).numpy(), np.cumsum(A, 0))
    np.testing.assert_allclose(
        x.norm(p="fro", dim=(1, 2)).numpy(), np.sqrt((A * A).sum((1, 2))), rtol=1e-12
    )
    e = np.exp(A - A.max(1, keepdims=True))
    sm = e / e.sum(1, keepdims=True)
    np.testing.assert_allclose(ferro.softmax(x, dim=1).numpy(), sm, rtol=1e-12)
    np.testing.assert_allclose(x.softmax(axis=1).numpy(), sm, rtol=1e-12)
    np.testing.assert_allclose(ferro.log_softmax(x, dim=1).numpy(), np.log(sm), rtol=1e-12)


def test_shape_ops_take_dim_and_axis():
    x = ferro.tensor(A)
    for kw in ("dim", "axis"):
        np.testing.assert_array_equal(
            ferro.cat([x, x], **{kw: 1}).numpy(), np.concatenate([A, A], 1)
        )
        np.testing.assert_array_equal(ferro.stack([x, x], **{kw: 2}).numpy(), np.stack([A, A], 2))
        assert [t.shape for t in x.split(2, **{kw: 1})] == [(3, 2, 5), (3, 2, 5)]
        assert [t.shape for t in x.chunk(2, **{kw: 2})] == [(3, 4, 3), (3, 4, 2)]
        assert x.unsqueeze(**{kw: 1}).shape == (3, 1, 4, 5)
        assert x[:, :1].squeeze(**{kw: 1}).shape == (3, 5)
    assert x.flatten(start_dim=1).shape == (3, 20)
    assert ferro.flatten(x, start_dim=0, end_dim=1).shape == (12, 5)


# --- PyTorch as the oracle ------------------------------------------------------------------


def _torch():
    return pytest.importorskip("torch")


@pytest.mark.torch
@pytest.mark.parametrize("name", [r[0] for r in REDUCTIONS] + ["argmax", "argmin"])
@pytest.mark.parametrize("dim,keep", [(1, False), (-1, True), ((0, 2), False)])
def test_reductions_match_torch(name, dim, keep):
    torch = _torch()
    if name in ("argmax", "argmin", "prod") and isinstance(dim, tuple):
        pytest.skip("torch's argmax/argmin/prod take one dim")
    got = getattr(ferro.tensor(P), name)(dim=dim, keepdim=keep)
    want = getattr(torch.tensor(P), name)(dim=dim, keepdim=keep)
    assert got.shape == tuple(want.shape)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


@pytest.mark.torch
@pytest.mark.parametrize(
    "args,kwargs",
    [
        ((), {}),
        ((False,), {}),
        ((1,), {}),
        ((1, False), {}),
        ((1, True, True), {}),
        ((), {"dim": 0, "unbiased": False, "keepdim": True}),
        ((), {"dim": (0, 2), "correction": 0}),
        ((), {"dim": 1, "correction": 3}),
    ],
)
@pytest.mark.parametrize("name", ["var", "std"])
def test_var_std_match_torch(name, args, kwargs):
    torch = _torch()
    got = getattr(ferro.tensor(A), name)(*args, **kwargs)
    want = getattr(torch.tensor(A), name)(*args, **kwargs)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


@pytest.mark.torch
@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min_dim_match_torch(name):
    torch = _torch()
    got = getattr(ferro, name)(ferro.tensor(P), 2)
    want = getattr(torch, name)(torch.tensor(P), 2)
    assert got._fields == tuple(f for f in ("values", "indices"))
    assert hasattr(want, "values") and hasattr(want, "indices")
    np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())
    np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())


@pytest.mark.torch
def test_softmax_cumsum_norm_shape_ops_match_torch():
    torch = _torch()
    x, t = ferro.tensor(A), torch.tensor(A)
    pairs = [
        (ferro.softmax(x, dim=0), torch.softmax(t, dim=0)),
        (x.log_softmax(dim=-1), t.log_softmax(dim=-1)),
        (x.cumsum(dim=1), t.cumsum(dim=1)),
        (ferro.norm(x, dim=2, keepdim=True), torch.norm(t, dim=2, keepdim=True)),
        (x.norm(), t.norm()),
        (ferro.cat([x, x], dim=-1), torch.cat([t, t], dim=-1)),
        (ferro.stack([x, x], dim=1), torch.stack([t, t], dim=1)),
        (x.split(3, dim=2)[1], t.split(3, dim=2)[1]),
        (x.chunk(3, dim=1)[-1], t.chunk(3, dim=1)[-1]),
        (x.unsqueeze(dim=-1), t.unsqueeze(dim=-1)),
        (x[:1].squeeze(dim=0), t[:1].squeeze(dim=0)),
        (x.flatten(start_dim=1, end_dim=2), t.flatten(start_dim=1, end_dim=2)),
    ]
    for got, want in pairs:
        assert got.shape == tuple(want.shape)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
