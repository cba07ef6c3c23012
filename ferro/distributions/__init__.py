"""Probability distributions with sampling, reparameterized sampling and log-densities, under
the names of PyTorch's ``torch.distributions`` (Normal, Bernoulli, Categorical, Uniform, Beta
and their ``kl_divergence``)."""

from ferro.distributions.bernoulli import Bernoulli
from ferro.distributions.beta import Beta
from ferro.distributions.categorical import Categorical
from ferro.distributions.distribution import Distribution
from ferro.distributions.kl import kl_divergence, register_kl
from ferro.distributions.normal import Normal
from ferro.distributions.uniform import Uniform

__all__ = [
    "Bernoulli",
    "Beta",
    "Categorical",
    "Distribution",
    "Normal",
    "Uniform",
    "kl_divergence",
    "register_kl",
]
