"""The Bernoulli distribution."""

from __future__ import annotations

from ferro import creation, ops
from ferro.autograd import no_grad
from ferro.distributions.distribution import Distribution, broadcast_all, clamp_probs
from ferro.errors import ArgumentError
from ferro.nn import functional as F


def probs_or_logits(cls, probs, logits):
    if (probs is None) == (logits is None):
        raise ArgumentError(f"{cls}: give exactly one of probs and logits")


class Bernoulli(Distribution):
    """Bernoulli distributions: 1 with probability ``probs`` (or ``sigmoid(logits)``), else 0,
    as PyTorch's ``Bernoulli``. Draws are floats; there is no ``rsample`` (a draw is not a
    differentiable function of the parameters).
    """

    _params = ("probs",)
    _support = "{0, 1}"

    def __init__(self, probs=None, logits=None, validate_args=None):
        probs_or_logits("Bernoulli", probs, logits)
        if probs is not None:
            (self.probs,) = broadcast_all(probs, names=("probs",))
            self.logits = ops.logit(clamp_probs(self.probs))
        else:
            (self.logits,) = broadcast_all(logits, names=("logits",))
            self.probs = self.logits.sigmoid()
        super().__init__(self.probs.shape, (), validate_args)
        if probs is not None:
            self._check(bool(((self.probs >= 0) & (self.probs <= 1)).all()), "probs not in [0, 1]")

    @property
    def mean(self):
        return self.probs

    @property
    def mode(self):
        return (self.probs > 0.5).to(self.probs.dtype)

    @property
    def variance(self):
        return self.probs * (1 - self.probs)

    def sample(self, sample_shape=()):
        with no_grad():
            return creation.bernoulli(self.probs.expand(self._extended_shape(sample_shape)))

    def _check_sample(self, value):
        return (value == 0) | (value == 1)

    def log_prob(self, value):
        """``value * log(p) + (1 - value) * log(1 - p)``, from the logits (no log of 0)."""
        self._validate_sample(value)
        logits, value = ops.broadcast_tensors(self.logits, value.to(self.logits.dtype))
        return -F.binary_cross_entropy_with_logits(logits, value, reduction="none")

    def entropy(self):
        return F.binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none")
