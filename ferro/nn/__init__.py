"""``ferro.nn``: modules, parameters, initializers and the functional API."""

from ferro.nn import functional, init, modules, parallel, utils  # noqa: F401
from ferro.nn.module import Module
from ferro.nn.modules import *  # noqa: F403
from ferro.nn.parallel import DataParallel
from ferro.nn.parameter import Parameter

__all__ = [
    "Module",
    "Parameter",
    "DataParallel",
    *modules.__all__,
    "functional",
    "init",
    "parallel",
    "utils",
]
