"""The categorical distribution."""

from __future__ import annotations

import math

from ferro import creation, ops
from ferro._tensor import Tensor
from ferro.autograd import no_grad
from ferro.distributions.bernoulli import probs_or_logits
from ferro.distributions.distribution import Distribution, clamp_probs, finfo
from ferro.dtypes import get_default_dtype
from ferro.errors import ArgumentTypeError, ShapeError


class Categorical(Distribution):
    """Categorical distributions over ``0 .. K-1`` along the last dimension of ``probs``
    (non-negative, normalized here) or ``logits`` (unnormalized log-probabilities), as
    PyTorch's ``Categorical``: ``batch_shape`` is the rest of the shape. Draws are int64; there
    is no ``rsample``.
    """

    _params = ("probs",)

    def __init__(self, probs=None, logits=None, validate_args=None):
        probs_or_logits("Categorical", probs, logits)
        given = probs if probs is not None else logits
        if not isinstance(given, Tensor):
            raise ArgumentTypeError(
                f"Categorical: probs or logits must be a Tensor, got {type(given).__name__}"
            )
        if given.ndim < 1:
            raise ShapeError("Categorical: probs or logits needs at least one dimension")
        if not given.dtype.is_floating_point:
            given = given.to(get_default_dtype())
        super().__init__(given.shape[:-1], (), validate_args)
        if probs is not None:
            self._check(bool((given >= 0).all()), "probs must be non-negative")
            self.probs = given / given.sum(-1, keepdim=True)
            self.logits = clamp_probs(self.probs).log()
        else:
            self._check(bool((given == given).all()), "logits must not be NaN")
            self.logits = given - given.logsumexp(-1, keepdim=True)
            self.probs = self.logits.softmax(-1)
        self._num_events = given.shape[-1]
        self._support = f"the integers 0 .. {self._num_events - 1}"

    @property
    def param_shape(self):
        return self.probs.shape

    @property
    def mean(self):
        return creation.full(self._extended_shape(), math.nan, dtype=self.probs.dtype)

    @property
    def variance(self):
        return self.mean

    @property
    def mode(self):
        return self.probs.argmax(-1)

    def sample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        n = math.prod(shape[: len(shape) - len(self._batch_shape)])
        with no_grad():
            rows = self.probs.reshape(-1, self._num_events)
            draws = creation.multinomial(rows, n, replacement=True)  # (rows, n)
            return draws.T.reshape(shape)

    def _check_sample(self, value):
        return (value >= 0) & (value < self._num_events) & (value == value.floor())

    def log_prob(self, value):
        """The log-probability of the category ``value`` (an integer tensor; broadcast against
        ``batch_shape``)."""
        self._validate_sample(value)
        index = value.long().unsqueeze(-1)
        index, log_pmf = ops.broadcast_tensors(index, self.logits)
        return log_pmf.gather(-1, index[..., :1]).squeeze(-1)

    def entropy(self):
        """``-sum(p log p)`` over the categories (0 log 0 = 0)."""
        return -(self.probs * self.logits.clamp(min=float(finfo(self.logits).min))).sum(-1)

    def enumerate_support(self, expand: bool = True):
        """The categories ``0 .. K-1`` along a new leading dim (expanded to the batch)."""
        values = creation.arange(self._num_events).reshape((-1,) + (1,) * len(self._batch_shape))
        return values.expand((-1, *self._batch_shape)) if expand else values
