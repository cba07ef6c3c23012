"""The continuous uniform distribution."""

from __future__ import annotations

import math

from ferro import creation, ops
from ferro.distributions.distribution import Distribution, broadcast_all


class Uniform(Distribution):
    """Uniform distributions on ``[low, high)`` (tensors or numbers, broadcast), as PyTorch's
    ``Uniform``; ``log_prob`` is ``-inf`` outside (without validation).
    """

    has_rsample = True
    _params = ("low", "high")
    _support = "[low, high)"

    def __init__(self, low, high, validate_args=None):
        self.low, self.high = broadcast_all(low, high, names=("low", "high"))
        super().__init__(self.low.shape, (), validate_args)
        self._check(bool((self.low < self.high).all()), "low must be below high")

    @property
    def mean(self):
        return (self.low + self.high) / 2

    @property
    def stddev(self):
        return (self.high - self.low) / 12**0.5

    @property
    def variance(self):
        return (self.high - self.low) ** 2 / 12

    def rsample(self, sample_shape=()):
        """``low + u * (high - low)`` with ``u`` uniform in [0, 1): differentiable in both."""
        u = creation.rand(
            self._extended_shape(sample_shape), dtype=self.low.dtype, device=self.low.device
        )
        return self.low + u * (self.high - self.low)

    def _check_sample(self, value):
        return (self.low <= value) & (value < self.high)

    def log_prob(self, value):
        """``-log(high - low)`` inside, ``-inf`` outside."""
        self._validate_sample(value)
        return ops.where(self._check_sample(value), -(self.high - self.low).log(), -math.inf)

    def cdf(self, value):
        self._validate_sample(value)
        return ((value - self.low) / (self.high - self.low)).clamp(0, 1)

    def icdf(self, value):
        return self.low + value * (self.high - self.low)

    def entropy(self):
        return (self.high - self.low).log()
