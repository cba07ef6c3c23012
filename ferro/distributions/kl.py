"""``kl_divergence(p, q)``: the Kullback-Leibler divergence between two distributions, by the
rule registered for their pair of types (:func:`register_kl`), as PyTorch's."""

from __future__ import annotations

from ferro import ops
from ferro.distributions.bernoulli import Bernoulli
from ferro.distributions.beta import Beta, log_beta
from ferro.distributions.categorical import Categorical
from ferro.distributions.normal import Normal
from ferro.distributions.uniform import Uniform
from ferro.errors import NotSupportedError
from ferro.nn import functional as F

_KL = {}


def register_kl(type_p, type_q):
    """Decorator: ``fn(p, q)`` computes ``KL(p || q)`` for ``p`` of ``type_p`` and ``q`` of
    ``type_q`` (the most specific registered pair of base classes is used)."""

    def deco(fn):
        _KL[type_p, type_q] = fn
        return fn

    return deco


def kl_divergence(p, q):
    """``KL(p || q) = E_p[log p(x) - log q(x)]``, per distribution of the batch.

    Raises:
        NotSupportedError: no rule is registered for the pair of types.
    """
    for tp in type(p).__mro__:
        for tq in type(q).__mro__:
            if (tp, tq) in _KL:
                return _KL[tp, tq](p, q)
    raise NotSupportedError(
        f"kl_divergence: no rule for {type(p).__name__} and {type(q).__name__} (register one "
        "with ferro.distributions.register_kl)"
    )


def _inf_where(cond, t):
    return ops.where(cond, t * 0 + float("inf"), t)


@register_kl(Normal, Normal)
def _kl_normal_normal(p, q):
    var_ratio = (p.scale / q.scale) ** 2
    t1 = ((p.loc - q.loc) / q.scale) ** 2
    return 0.5 * (var_ratio + t1 - 1 - var_ratio.log())


@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli_bernoulli(p, q):
    t1 = p.probs * (F.softplus(-q.logits) - F.softplus(-p.logits))
    t1 = ops.where(p.probs == 0, t1 * 0, _inf_where(q.probs == 0, t1))
    t2 = (1 - p.probs) * (F.softplus(q.logits) - F.softplus(p.logits))
    t2 = ops.where(p.probs == 1, t2 * 0, _inf_where(q.probs == 1, t2))
    return t1 + t2


@register_kl(Categorical, Categorical)
def _kl_categorical_categorical(p, q):
    t = p.probs * (p.logits - q.logits)
    t = ops.where(p.probs == 0, t * 0, _inf_where(q.probs == 0, t))
    return t.sum(-1)


@register_kl(Uniform, Uniform)
def _kl_uniform_uniform(p, q):
    result = ((q.high - q.low) / (p.high - p.low)).log()
    return _inf_where((q.low > p.low) | (q.high < p.high), result)


@register_kl(Beta, Beta)
def _kl_beta_beta(p, q):
    pa, pb, qa, qb = p.concentration1, p.concentration0, q.concentration1, q.concentration0
    return (
        log_beta(qa, qb)
        - log_beta(pa, pb)
        + (pa - qa) * ops.digamma(pa)
        + (pb - qb) * ops.digamma(pb)
        + (qa - pa + qb - pb) * ops.digamma(pa + pb)
    )
