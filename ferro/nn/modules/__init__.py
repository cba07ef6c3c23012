"""Layers, one module per family as in PyTorch's ``torch.nn.modules``; ``ferro.nn`` exports the
union of their ``__all__``.

Layers with parameters take ``device=`` and ``dtype=``: parameters are created in ``dtype``,
initialized from ferro's CPU generator (so one seed gives the same weights on every device),
then moved to ``device``. Modules follow PyTorch's signatures, parameter names and reprs, so a
PyTorch ``state_dict`` loads into the same ferro module.
"""

from importlib import import_module as _import_module

from ferro.nn.modules.activation import *  # noqa: F403
from ferro.nn.modules.attention import *  # noqa: F403
from ferro.nn.modules.container import *  # noqa: F403
from ferro.nn.modules.conv import *  # noqa: F403
from ferro.nn.modules.deform_conv import *  # noqa: F403
from ferro.nn.modules.distance import *  # noqa: F403
from ferro.nn.modules.dropout import *  # noqa: F403
from ferro.nn.modules.flatten import *  # noqa: F403
from ferro.nn.modules.fold import *  # noqa: F403
from ferro.nn.modules.linear import *  # noqa: F403
from ferro.nn.modules.loss import *  # noqa: F403
from ferro.nn.modules.normalization import *  # noqa: F403
from ferro.nn.modules.padding import *  # noqa: F403
from ferro.nn.modules.pixelshuffle import *  # noqa: F403
from ferro.nn.modules.pooling import *  # noqa: F403
from ferro.nn.modules.rnn import *  # noqa: F403
from ferro.nn.modules.sparse import *  # noqa: F403
from ferro.nn.modules.transformer import *  # noqa: F403
from ferro.nn.modules.upsampling import *  # noqa: F403

# The families of layers; a new family is a module here and a line in this tuple.
FAMILIES = (
    "container",
    "linear",
    "sparse",
    "dropout",
    "flatten",
    "activation",
    "distance",
    "loss",
    "conv",
    "fold",
    "pooling",
    "padding",
    "pixelshuffle",
    "upsampling",
    "deform_conv",
    "normalization",
    "rnn",
    "attention",
    "transformer",
)
__all__ = [name for fam in FAMILIES for name in _import_module(f"ferro.nn.modules.{fam}").__all__]
