"""``ferro.optim``: optimizers (fused nogil update kernels where they exist) and learning-rate
schedules."""

from ferro.optim import lr_scheduler  # noqa: F401
from ferro.optim.optimizer import Optimizer
from ferro.optim.optimizers import (
    LBFGS,
    SGD,
    Adadelta,
    Adagrad,
    Adam,
    Adamax,
    AdamW,
    NAdam,
    RAdam,
    RMSprop,
)

__all__ = [
    "Optimizer",
    "SGD",
    "Adam",
    "AdamW",
    "RMSprop",
    "Adagrad",
    "Adadelta",
    "Adamax",
    "NAdam",
    "RAdam",
    "LBFGS",
    "lr_scheduler",
]
