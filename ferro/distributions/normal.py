"""The normal (Gaussian) distribution."""

from __future__ import annotations

import math

from ferro import creation, ops
from ferro.distributions.distribution import _LOG_SQRT_2PI, Distribution, broadcast_all


class Normal(Distribution):
    """Normal distributions of mean ``loc`` and standard deviation ``scale`` (tensors or
    numbers, broadcast), as PyTorch's ``Normal``.

    Example:
        >>> d = Normal(ferro.zeros(3), 1.0)
        >>> d.rsample((2,)).shape
        ferro.Size([2, 3])
    """

    has_rsample = True
    _params = ("loc", "scale")
    _support = "the real numbers"

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = broadcast_all(loc, scale, names=("loc", "scale"))
        super().__init__(self.loc.shape, (), validate_args)
        self._check(bool((self.scale > 0).all()), "scale must be positive")

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def stddev(self):
        return self.scale

    @property
    def variance(self):
        return self.scale * self.scale

    def rsample(self, sample_shape=()):
        """``loc + scale * eps`` with standard normal ``eps``: differentiable in both."""
        eps = creation.randn(
            self._extended_shape(sample_shape), dtype=self.loc.dtype, device=self.loc.device
        )
        return self.loc + eps * self.scale

    def _check_sample(self, value):
        return ~value.isnan()

    def log_prob(self, value):
        """``-(value - loc)**2 / (2 scale**2) - log(scale) - log(sqrt(2 pi))``."""
        self._validate_sample(value)
        return -((value - self.loc) ** 2) / (2 * self.variance) - self.scale.log() - _LOG_SQRT_2PI

    def cdf(self, value):
        self._validate_sample(value)
        return 0.5 * (1 + ops.erf((value - self.loc) / (self.scale * math.sqrt(2))))

    def icdf(self, value):
        """The quantile function: ``loc + scale * sqrt(2) * erfinv(2 value - 1)``."""
        return self.loc + self.scale * math.sqrt(2) * ops.erfinv(2 * value - 1)

    def entropy(self):
        return 0.5 + _LOG_SQRT_2PI + self.scale.log()
