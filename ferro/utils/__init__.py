"""Utilities built on the autograd API: checkpointing."""

from ferro.utils import checkpoint  # noqa: F401
