"""The beta distribution."""

from __future__ import annotations

import numpy as np

from ferro import creation, ops
from ferro import random as _random
from ferro.autograd import no_grad
from ferro.backend import move
from ferro.distributions.distribution import Distribution, broadcast_all, finfo


def log_beta(a, b):
    """``log B(a, b) = lgamma(a) + lgamma(b) - lgamma(a + b)``."""
    return ops.lgamma(a) + ops.lgamma(b) - ops.lgamma(a + b)


class Beta(Distribution):
    """Beta distributions on [0, 1] of shapes ``concentration1`` (alpha) and
    ``concentration0`` (beta), tensors or numbers, broadcast, as PyTorch's ``Beta``. Draws come
    from NumPy's generator (``ferro.manual_seed`` seeds them); ferro has no reparameterized
    ``rsample`` for it (PyTorch's differentiates through its gamma sampler).
    """

    _params = ("concentration1", "concentration0")
    _support = "[0, 1]"

    def __init__(self, concentration1, concentration0, validate_args=None):
        self.concentration1, self.concentration0 = broadcast_all(
            concentration1, concentration0, names=("concentration1", "concentration0")
        )
        super().__init__(self.concentration1.shape, (), validate_args)
        self._check(
            bool(((self.concentration1 > 0) & (self.concentration0 > 0)).all()),
            "the concentrations must be positive",
        )

    @property
    def mean(self):
        return self.concentration1 / (self.concentration1 + self.concentration0)

    @property
    def variance(self):
        total = self.concentration1 + self.concentration0
        return self.concentration1 * self.concentration0 / (total * total * (total + 1))

    def sample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        a, b = (
            np.asarray(move(t.detach()._data, "cpu"))
            for t in (self.concentration1, self.concentration0)
        )
        draws = _random.numpy_generator(None, "Beta.sample").beta(a, b, size=shape)
        # As PyTorch: a draw of exactly 0 or 1 (tiny concentrations) is kept inside (0, 1).
        tiny = float(finfo(self.concentration1).tiny)
        draws = np.clip(draws, tiny, 1 - float(finfo(self.concentration1).eps))
        with no_grad():
            return creation.tensor(
                draws, dtype=self.concentration1.dtype, device=self.concentration1.device
            )

    def _check_sample(self, value):
        return (value >= 0) & (value <= 1)

    def log_prob(self, value):
        """``(a - 1) log(value) + (b - 1) log(1 - value) - log B(a, b)``."""
        self._validate_sample(value)
        a, b = self.concentration1, self.concentration0
        return ops.xlogy(a - 1, value) + ops.xlogy(b - 1, 1 - value) - log_beta(a, b)

    def entropy(self):
        a, b = self.concentration1, self.concentration0
        return (
            log_beta(a, b)
            - (a - 1) * ops.digamma(a)
            - (b - 1) * ops.digamma(b)
            + (a + b - 2) * ops.digamma(a + b)
        )
