"""``ferro.nn.utils``: gradient clipping (``clip_grad``), as in PyTorch's ``torch.nn.utils``."""

from ferro.nn.utils import rnn  # noqa: F401
from ferro.nn.utils.clip_grad import *  # noqa: F403
from ferro.nn.utils.clip_grad import __all__ as _clip_all

__all__ = [*_clip_all]
