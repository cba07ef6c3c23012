"""ferro.distributions: moments, log-densities, entropies and KL divergences against closed
forms written here (and PyTorch's torch.distributions as an oracle when installed), sampling
frequencies, reparameterized gradients, and validate_args."""

import math

import numpy as np
import pytest

import ferro
import ferro.distributions as D
from ferro.errors import ArgumentError, ArgumentTypeError, NotSupportedError
from ferro.testing import gradcheck


def _t(a):
    return ferro.tensor(np.asarray(a, dtype=np.float64))


RNG = np.random.default_rng(0)
LOC, SCALE = RNG.normal(size=3), RNG.uniform(0.5, 2, size=(2, 3))
VALUES = RNG.normal(size=(4, 2, 3))


def test_normal_matches_its_closed_forms():
    d = D.Normal(_t(LOC), _t(SCALE))
    assert d.batch_shape == (2, 3) and d.event_shape == () and d.has_rsample
    want = -((VALUES - LOC) ** 2) / (2 * SCALE**2) - np.log(SCALE) - 0.5 * math.log(2 * math.pi)
    np.testing.assert_allclose(d.log_prob(_t(VALUES)).numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(d.entropy().numpy(), 0.5 * np.log(2 * math.pi * math.e * SCALE**2))
    np.testing.assert_allclose(d.variance.numpy(), SCALE**2)
    assert d.mean.shape == (2, 3) and d.stddev.allclose(_t(SCALE))
    q = np.array([0.1, 0.5, 0.975])
    np.testing.assert_allclose(
        D.Normal(0.0, 1.0).icdf(_t(q)).numpy(), [-1.2815515655446004, 0, 1.959963984540054]
    )
    np.testing.assert_allclose(D.Normal(1.0, 2.0).cdf(_t([1.0])).numpy(), [0.5])


def test_normal_samples_have_its_moments_and_rsample_is_differentiable():
    ferro.manual_seed(0)
    s = D.Normal(_t([1.0, -2.0]), _t([0.5, 3.0])).sample((20000,))
    assert s.shape == (20000, 2) and not s.requires_grad
    np.testing.assert_allclose(s.numpy().mean(0), [1.0, -2.0], atol=0.06)
    np.testing.assert_allclose(s.numpy().std(0), [0.5, 3.0], rtol=0.03)
    loc, scale = _t([0.3, -1.0]).requires_grad_(), _t([1.5, 0.5]).requires_grad_()
    x = D.Normal(loc, scale).rsample((3,))
    x.sum().backward()
    np.testing.assert_allclose(loc.grad.numpy(), [3.0, 3.0])  # d(loc + eps*scale)/dloc
    eps = (x.detach() - loc.detach()) / scale.detach()
    np.testing.assert_allclose(scale.grad.numpy(), eps.sum(0).numpy(), rtol=1e-12)


def test_log_prob_and_entropy_are_differentiable_in_the_parameters():
    v = _t(VALUES[0])
    assert gradcheck(
        lambda m, s: D.Normal(m, s).log_prob(v),
        (_t(LOC).requires_grad_(), _t(SCALE).requires_grad_()),
    )
    logits = _t(RNG.normal(size=(2, 4))).requires_grad_()
    k = ferro.tensor([[0, 3], [2, 2]])
    assert gradcheck(lambda z: D.Categorical(logits=z).log_prob(k), (logits,))
    assert gradcheck(lambda z: D.Categorical(logits=z).entropy(), (logits,))
    assert gradcheck(lambda z: D.Bernoulli(logits=z).entropy(), (logits,))
    lo, hi = _t([0.0, -1.0]).requires_grad_(), _t([1.0, 2.0]).requires_grad_()

    def draw(a, b):
        ferro.manual_seed(0)  # the same noise at every evaluation
        return D.Uniform(a, b).rsample((2,))

    assert gradcheck(draw, (lo, hi))


def test_bernoulli_from_probs_and_from_logits():
    p = np.array([0.0, 0.2, 0.7, 1.0])
    b = D.Bernoulli(probs=_t(p))
    x = _t([0.0, 1.0, 1.0, 1.0])
    with np.errstate(divide="ignore"):
        want = np.where(x.numpy() == 1, np.log(p), np.log1p(-p))
    np.testing.assert_allclose(b.log_prob(x).numpy(), want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(b.variance.numpy(), p * (1 - p))
    z = RNG.normal(size=5)
    bl = D.Bernoulli(logits=_t(z))
    np.testing.assert_allclose(bl.probs.numpy(), 1 / (1 + np.exp(-z)))
    ent = -(bl.probs * bl.probs.log() + (1 - bl.probs) * (1 - bl.probs).log())
    np.testing.assert_allclose(bl.entropy().numpy(), ent.numpy(), rtol=1e-12)
    ferro.manual_seed(1)
    draws = D.Bernoulli(0.3).sample((20000,))
    assert draws.dtype == ferro.float32 and abs(draws.numpy().mean() - 0.3) < 0.015
    with pytest.raises(NotSupportedError):
        bl.rsample()


def test_categorical_normalizes_and_samples_its_frequencies():
    w = np.array([[1.0, 0.0, 3.0], [2.0, 2.0, 4.0]])
    c = D.Categorical(probs=_t(w))
    p = w / w.sum(-1, keepdims=True)
    assert c.batch_shape == (2,) and c.probs.allclose(_t(p))
    k = ferro.tensor([[0, 2], [1, 0]])  # broadcast against batch (2,)
    with np.errstate(divide="ignore"):
        want = np.log(p)[[0, 1], k.numpy()]
    np.testing.assert_allclose(
        c.log_prob(k).numpy(), np.maximum(want, math.log(np.finfo(np.float64).eps))
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.nansum(p * np.log(p), -1)
    np.testing.assert_allclose(c.entropy().numpy(), ent, rtol=1e-12)
    ferro.manual_seed(2)
    s = c.sample((30000,))
    assert s.shape == (30000, 2) and s.dtype == ferro.int64
    for row in range(2):
        freq = np.bincount(s.numpy()[:, row], minlength=3) / 30000
        np.testing.assert_allclose(freq, p[row], atol=0.015)
    lc = D.Categorical(logits=_t(np.log(w[1])))
    assert lc.probs.allclose(_t(p[1])) and lc.sample().shape == () and lc.mode.item() == 2
    assert c.enumerate_support().shape == (3, 2) and bool(c.mean.isnan().all())


def test_uniform_moments_support_and_entropy():
    u = D.Uniform(_t([0.0, -1.0]), _t([2.0, 3.0]))
    np.testing.assert_allclose(u.mean.numpy(), [1.0, 1.0])
    np.testing.assert_allclose(u.variance.numpy(), [4 / 12, 16 / 12])
    np.testing.assert_allclose(u.log_prob(_t([0.5, 0.0])).numpy(), -np.log([2.0, 4.0]))
    np.testing.assert_allclose(u.entropy().numpy(), np.log([2.0, 4.0]))
    outside = D.Uniform(0.0, 1.0, validate_args=False).log_prob(_t([-1.0, 1.0]))
    assert outside.tolist() == [-math.inf, -math.inf]
    ferro.manual_seed(3)
    s = u.sample((10000,)).numpy()
    assert (s >= [0.0, -1.0]).all() and (s < [2.0, 3.0]).all()
    np.testing.assert_allclose(u.icdf(u.cdf(_t([1.5, 2.0]))).numpy(), [1.5, 2.0])


def test_beta_matches_its_closed_forms_and_samples_its_moments():

    a, b = np.array([0.5, 2.0, 3.0]), np.array([1.5, 2.0, 0.7])
    d = D.Beta(_t(a), _t(b))
    v = np.array([0.2, 0.5, 0.9])
    lbeta = np.array(
        [math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y) for x, y in zip(a, b, strict=True)]
    )
    want = (a - 1) * np.log(v) + (b - 1) * np.log1p(-v) - lbeta
    np.testing.assert_allclose(d.log_prob(_t(v)).numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(d.mean.numpy(), a / (a + b))
    np.testing.assert_allclose(d.variance.numpy(), a * b / ((a + b) ** 2 * (a + b + 1)))
    # Beta(1, 1) is Uniform(0, 1): entropy 0, KL to itself 0.
    assert abs(D.Beta(1.0, 1.0).entropy().item()) < 1e-6
    assert abs(D.kl_divergence(d, D.Beta(_t(a), _t(b))).numpy()).max() < 1e-12
    ferro.manual_seed(4)
    s = D.Beta(2.0, 5.0).sample((20000,)).numpy()
    assert ((s > 0) & (s < 1)).all() and abs(s.mean() - 2 / 7) < 0.01
    conc = _t(a).requires_grad_()
    assert gradcheck(lambda c: D.Beta(c, _t(b)).log_prob(_t(v)), (conc,))
    assert gradcheck(lambda c: D.Beta(c, _t(b)).entropy(), (conc,))
    with pytest.raises(ArgumentError):
        D.Beta(0.0, 1.0)
    with pytest.raises(ArgumentError):
        d.log_prob(_t([0.5, 1.5, 0.5]))


def test_kl_divergence_closed_forms():
    p, q = D.Normal(_t([0.0]), _t([1.0])), D.Normal(_t([1.0]), _t([2.0]))
    want = math.log(2) + (1 + 1) / 8 - 0.5
    np.testing.assert_allclose(D.kl_divergence(p, q).numpy(), [want], rtol=1e-12)
    a, b = np.array([0.2, 0.5, 0.0]), np.array([0.6, 0.5, 0.3])
    kl_b = D.kl_divergence(D.Bernoulli(_t(a)), D.Bernoulli(_t(b))).numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        want_b = np.nan_to_num(a * np.log(a / b)) + (1 - a) * np.log((1 - a) / (1 - b))
    np.testing.assert_allclose(kl_b, want_b, rtol=1e-6, atol=1e-7)
    pc, qc = np.array([0.5, 0.5, 0.0]), np.array([0.25, 0.25, 0.5])
    kl_c = D.kl_divergence(D.Categorical(_t(pc)), D.Categorical(_t(qc)))
    np.testing.assert_allclose(kl_c.numpy(), math.log(2), rtol=1e-12)
    assert D.kl_divergence(D.Categorical(_t(qc)), D.Categorical(_t(pc))).item() == math.inf
    kl_u = D.kl_divergence(D.Uniform(0.0, 1.0), D.Uniform(-1.0, 3.0))
    assert kl_u.item() == pytest.approx(math.log(4))
    assert D.kl_divergence(D.Uniform(-1.0, 3.0), D.Uniform(0.0, 1.0)).item() == math.inf
    with pytest.raises(NotSupportedError):
        D.kl_divergence(p, D.Uniform(0.0, 1.0))


def test_validate_args_checks_parameters_and_values():
    with pytest.raises(ArgumentError):
        D.Normal(0.0, -1.0)
    with pytest.raises(ArgumentError):
        D.Uniform(1.0, 1.0)
    with pytest.raises(ArgumentError):
        D.Bernoulli(probs=_t([1.5]))
    with pytest.raises(ArgumentError):
        D.Categorical(probs=_t([-0.1, 1.0]))
    with pytest.raises(ArgumentError):
        D.Bernoulli(probs=0.5, logits=0.0)
    with pytest.raises(ArgumentTypeError):
        D.Normal("0", 1.0)
    with pytest.raises(ArgumentError):
        D.Bernoulli(0.5).log_prob(_t([0.5]))
    with pytest.raises(ArgumentError):
        D.Categorical(_t([0.5, 0.5])).log_prob(ferro.tensor([2]))
    with pytest.raises(ArgumentError):
        D.Normal(_t([0.0, 1.0]), 1.0).log_prob(_t([0.0, 1.0, 2.0]))
    assert D.Normal(0.0, -1.0, validate_args=False).scale.item() == -1.0
    D.Distribution.set_default_validate_args(False)
    try:
        assert D.Bernoulli(0.5).log_prob(_t([0.5])).shape == (1,)
    finally:
        D.Distribution.set_default_validate_args(True)


@pytest.mark.torch
def test_against_torch_distributions():
    import torch
    import torch.distributions as TD

    t = torch.tensor
    cases = [
        (D.Normal(_t(LOC), _t(SCALE)), TD.Normal(t(LOC), t(SCALE)), VALUES),
        (D.Uniform(_t(LOC - 1), _t(LOC + 2)), TD.Uniform(t(LOC - 1), t(LOC + 2)), LOC + 0.5),
        (D.Bernoulli(_t([0.1, 0.9])), TD.Bernoulli(t(np.array([0.1, 0.9]))), np.array([1.0, 0.0])),
        (
            D.Categorical(logits=_t(SCALE)),
            TD.Categorical(logits=t(SCALE)),
            np.array([[0, 2], [1, 1]]),
        ),
    ]
    for ours, theirs, v in cases:
        value = ferro.tensor(v) if v.dtype.kind == "i" else _t(v)
        np.testing.assert_allclose(
            ours.log_prob(value).numpy(), theirs.log_prob(t(v)).numpy(), rtol=1e-10
        )
        np.testing.assert_allclose(ours.entropy().numpy(), theirs.entropy().numpy(), rtol=1e-10)
        assert ours.batch_shape == tuple(theirs.batch_shape)
        assert ours.sample((5,)).shape == tuple(theirs.sample((5,)).shape)
    for (p, tp, _), (q, tq, _) in zip(cases, cases[1:] + cases[:1], strict=True):
        if type(p) is type(q):
            np.testing.assert_allclose(D.kl_divergence(p, q).numpy(), TD.kl_divergence(tp, tq))
    beta_a, beta_b = RNG.uniform(0.3, 4, (2, 3)), RNG.uniform(0.3, 4, 3)
    ours, theirs = D.Beta(_t(beta_a), _t(beta_b)), TD.Beta(t(beta_a), t(beta_b))
    x = RNG.uniform(0.01, 0.99, (4, 2, 3))
    np.testing.assert_allclose(ours.log_prob(_t(x)).numpy(), theirs.log_prob(t(x)), rtol=1e-12)
    np.testing.assert_allclose(ours.entropy().numpy(), theirs.entropy(), rtol=1e-12)
    flipped = (D.Beta(_t(beta_b), _t(beta_a[0])), TD.Beta(t(beta_b), t(beta_a[0])))
    np.testing.assert_allclose(
        D.kl_divergence(ours, flipped[0]).numpy(), TD.kl_divergence(theirs, flipped[1]), rtol=1e-12
    )
    other = D.Normal(_t(LOC[::-1].copy()), _t(SCALE * 2))
    theirs = TD.kl_divergence(
        TD.Normal(t(LOC), t(SCALE)), TD.Normal(t(LOC[::-1].copy()), t(SCALE * 2))
    )
    np.testing.assert_allclose(
        D.kl_divergence(cases[0][0], other).numpy(), theirs.numpy(), rtol=1e-12
    )
