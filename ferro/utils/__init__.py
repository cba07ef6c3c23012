"""Utilities built on the autograd API: checkpointing, in-memory data loading and DLPack."""

from ferro.utils import checkpoint, data, dlpack  # noqa: F401
