"""Differentiable ops, one module per family, all registered in :mod:`ferro.ops.registry`."""

from importlib import import_module as _import_module

from ferro.ops.activation import *  # noqa: F403
from ferro.ops.attention import *  # noqa: F403
from ferro.ops.conv import *  # noqa: F403
from ferro.ops.decomp import *  # noqa: F403
from ferro.ops.device import *  # noqa: F403
from ferro.ops.dropout import *  # noqa: F403
from ferro.ops.elementwise import *  # noqa: F403
from ferro.ops.inplace import *  # noqa: F403
from ferro.ops.linalg import *  # noqa: F403
from ferro.ops.loss import *  # noqa: F403
from ferro.ops.norm import *  # noqa: F403
from ferro.ops.pooling import *  # noqa: F403
from ferro.ops.recurrent import *  # noqa: F403
from ferro.ops.reduction import *  # noqa: F403
from ferro.ops.resampling import *  # noqa: F403
from ferro.ops.scan import *  # noqa: F403
from ferro.ops.shape import *  # noqa: F403
from ferro.ops.special import *  # noqa: F403

# The op families. Each lists its public functions in its own __all__; ferro.ops exports their
# union. The op machinery (ferro.ops.registry: REGISTRY, register, apply) is not part of it.
FAMILIES = (
    "activation",
    "attention",
    "conv",
    "decomp",
    "device",
    "dropout",
    "elementwise",
    "inplace",
    "linalg",
    "loss",
    "norm",
    "pooling",
    "recurrent",
    "reduction",
    "resampling",
    "scan",
    "shape",
    "special",
)
# ferro.linalg's ops that have no top-level PyTorch name: attributes of ferro.ops (the op
# database finds an op's function here), not in its __all__ (nor at ferro's top level).
from ferro.ops.decomp import eigh, linalg_svd, solve  # noqa: E402,F401

__all__ = [name for fam in FAMILIES for name in _import_module(f"ferro.ops.{fam}").__all__]
