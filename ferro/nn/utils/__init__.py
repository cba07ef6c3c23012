"""``ferro.nn.utils``: gradient clipping (``clip_grad``), the weight reparametrizations
(``weight_norm``, ``spectral_norm``), parameters as one vector and back, and ``rnn``, as in
PyTorch's ``torch.nn.utils``."""

from ferro.nn.utils import rnn  # noqa: F401
from ferro.nn.utils.clip_grad import *  # noqa: F403
from ferro.nn.utils.clip_grad import __all__ as _clip_all
from ferro.nn.utils.convert_parameters import parameters_to_vector, vector_to_parameters
from ferro.nn.utils.weight_norm import (
    remove_spectral_norm,
    remove_weight_norm,
    spectral_norm,
    weight_norm,
)

__all__ = [
    *_clip_all,
    "parameters_to_vector",
    "vector_to_parameters",
    "weight_norm",
    "remove_weight_norm",
    "spectral_norm",
    "remove_spectral_norm",
]
