"""``ferro.optim``: optimizers with fused nogil update kernels, and learning-rate schedules."""

from ferro.optim import lr_scheduler  # noqa: F401
from ferro.optim.optimizer import Optimizer
from ferro.optim.optimizers import SGD, Adagrad, Adam, AdamW, RMSprop

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "lr_scheduler"]
