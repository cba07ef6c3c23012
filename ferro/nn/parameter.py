"""``Parameter``: a leaf tensor that a ``Module`` registers as learnable."""

from __future__ import annotations

import numpy as np

from ferro._C.tensor import TensorBase
from ferro._tensor import Tensor
from ferro.dtypes import default_float


class Parameter(Tensor):
    """A tensor that requires grad and is registered by the ``Module`` it is assigned to.

    Example:
        >>> w = ferro.nn.Parameter(ferro.zeros(3))
        >>> w.requires_grad
        True
    """

    __slots__ = ()

    def __new__(cls, data=None, requires_grad: bool = True):
        if data is None:
            arr = np.empty(0, default_float())
        elif isinstance(data, TensorBase):
            arr = data._data
        else:
            arr = np.asarray(data)
        p = Tensor.__new__(cls)
        p.data = arr
        if requires_grad:
            p.requires_grad_(True)
        return p

    def __init__(self, data=None, requires_grad: bool = True) -> None:
        pass

    def __repr__(self) -> str:
        return "Parameter containing:\n" + Tensor.__repr__(self)
