"""The base class of ferro's distributions, as PyTorch's ``torch.distributions.Distribution``.

A distribution holds its parameters as tensors (broadcast against each other, so a batch of
distributions is one object: ``batch_shape``), draws with :meth:`sample` (no gradient) or
:meth:`rsample` (reparameterized: the draw is a differentiable function of the parameters), and
scores with :meth:`log_prob`. With ``validate_args`` (PyTorch's default, switchable for all
with :meth:`Distribution.set_default_validate_args`) the parameters and the values scored are
checked, and a bad one raises :class:`~ferro.errors.ArgumentError` (a ValueError, as PyTorch's).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ferro import creation, ops
from ferro._tensor import Size, Tensor
from ferro.autograd import no_grad
from ferro.dtypes import as_dtype, get_default_dtype
from ferro.errors import ArgumentError, ArgumentTypeError, NotSupportedError


def broadcast_all(*values, names=()):
    """The values (tensors or Python numbers) as tensors of one shape: numbers take the dtype
    and device of the tensors among them (the default dtype when there are none)."""
    tensors = [v for v in values if isinstance(v, Tensor)]
    for v, name in zip(values, names or [""] * len(values), strict=True):
        if not isinstance(v, Tensor | numbers.Real) or isinstance(v, bool):
            raise ArgumentTypeError(
                f"{name or 'parameter'} must be a Tensor or a real number, got {type(v).__name__}"
            )
    like = tensors[0] if tensors else None
    dtype = like.dtype if like is not None and like.dtype.is_floating_point else None
    out = [
        v
        if isinstance(v, Tensor)
        else creation.tensor(float(v), dtype=dtype, device=None if like is None else like.device)
        for v in values
    ]
    out = [v if v.dtype.is_floating_point else v.to(get_default_dtype()) for v in out]
    return ops.broadcast_tensors(*out)


def finfo(t) -> np.finfo:
    """NumPy's float facts (``eps``, ``min``) of a tensor's dtype."""
    return np.finfo(as_dtype(t.dtype))


def clamp_probs(p):
    """Probabilities kept ``eps`` away from 0 and 1 (their logs stay finite), as PyTorch's."""
    eps = float(finfo(p).eps)
    return p.clamp(eps, 1 - eps)


class Distribution:
    """A batch of probability distributions (see the module docstring).

    Subclasses set ``has_rsample`` and define ``sample``/``rsample``, ``log_prob``,
    ``entropy``, ``mean``, ``variance`` and ``_check_sample`` (what ``validate_args`` checks
    of a value).
    """

    has_rsample = False
    _validate_default = True

    @staticmethod
    def set_default_validate_args(value: bool) -> None:
        """Whether distributions check their arguments when ``validate_args`` is not given."""
        if value not in (True, False):
            raise ArgumentTypeError(f"set_default_validate_args: expects a bool, got {value!r}")
        Distribution._validate_default = value

    def __init__(self, batch_shape=(), event_shape=(), validate_args=None):
        self._batch_shape = Size(batch_shape)
        self._event_shape = Size(event_shape)
        self._validate_args = (
            Distribution._validate_default if validate_args is None else bool(validate_args)
        )

    @property
    def batch_shape(self) -> Size:
        """The shape of the batch of distributions (the parameters' broadcast shape)."""
        return self._batch_shape

    @property
    def event_shape(self) -> Size:
        """The shape of one draw of one distribution (``()`` for a scalar distribution)."""
        return self._event_shape

    def _extended_shape(self, sample_shape=()) -> tuple:
        if isinstance(sample_shape, numbers.Integral):
            sample_shape = (sample_shape,)
        return tuple(sample_shape) + tuple(self._batch_shape) + tuple(self._event_shape)

    @property
    def stddev(self):
        """The standard deviation, ``variance.sqrt()``."""
        return self.variance.sqrt()

    def sample(self, sample_shape=()):
        """A draw of shape ``sample_shape + batch_shape + event_shape``, without gradient."""
        with no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=()):
        """A reparameterized draw: differentiable with respect to the parameters."""
        raise NotSupportedError(
            f"{type(self).__name__} has no reparameterized sampling (rsample): use sample(), "
            "and a score-function estimator for gradients"
        )

    def sample_n(self, n: int):
        """``sample((n,))``."""
        return self.sample((n,))

    def cdf(self, value):
        raise NotSupportedError(f"{type(self).__name__} has no cdf")

    def icdf(self, value):
        raise NotSupportedError(f"{type(self).__name__} has no icdf")

    def perplexity(self):
        """``exp(entropy())``."""
        return self.entropy().exp()

    def _validate_sample(self, value):
        if not self._validate_args:
            return
        if not isinstance(value, Tensor):
            raise ArgumentTypeError(
                f"{type(self).__name__}.log_prob: the value must be a Tensor, got "
                f"{type(value).__name__}"
            )
        shape = tuple(value.shape)
        want = tuple(self._batch_shape) + tuple(self._event_shape)
        try:
            np.broadcast_shapes(shape, want)
        except ValueError:
            raise ArgumentError(
                f"{type(self).__name__}.log_prob: a value of shape {shape} does not broadcast "
                f"with the batch and event shape {want}"
            ) from None
        if not bool(self._check_sample(value).all()):
            raise ArgumentError(
                f"{type(self).__name__}.log_prob: the value is outside the support "
                f"({self._support})"
            )

    def _check(self, ok: bool, what: str):
        if self._validate_args and not ok:
            raise ArgumentError(f"{type(self).__name__}: {what}")

    def __repr__(self):
        params = ", ".join(f"{k}: {tuple(getattr(self, k).shape)}" for k in self._params)
        return f"{type(self).__name__}({params})"


_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
