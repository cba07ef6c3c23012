"""Utilities built on the autograd API: checkpointing and in-memory data loading."""

from ferro.utils import checkpoint, data  # noqa: F401
