"""The functional face of the op library (``ferro.nn.functional as F``), as in PyTorch."""

from ferro.ops import *  # noqa: F403
from ferro.ops import __all__ as _all

__all__ = list(_all)
