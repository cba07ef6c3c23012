"""``ferro.autograd.Variable``: PyTorch's pre-0.4 wrapper, which old programs still write.

Since PyTorch 0.4 every tensor is a Variable: ``Variable(t)`` returns a tensor that shares
``t``'s memory, detached from ``t``'s history, with ``requires_grad`` as given (default False),
and ``isinstance(t, Variable)`` holds for every tensor. ``volatile=`` was removed and only
warns; use ``ferro.no_grad()``. The same here: no tensor is ever of this class.

Example:
    >>> from ferro.autograd import Variable
    >>> v = Variable(ferro.ones(2), requires_grad=True)
    >>> v.requires_grad, v.is_leaf, isinstance(v, Variable)
    (True, True, True)
"""

from __future__ import annotations

import warnings

from ferro._C.tensor import TensorBase
from ferro.errors import ArgumentTypeError


class _VariableMeta(type):
    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, TensorBase)


class Variable(metaclass=_VariableMeta):
    """``Variable(data, requires_grad=False, volatile=False)``: ``data.detach()`` with
    ``requires_grad`` set (module docstring)."""

    def __new__(cls, data, requires_grad: bool = False, volatile: bool = False):
        if not isinstance(data, TensorBase):
            raise ArgumentTypeError(
                f"Variable: data has to be a tensor, but got {type(data).__name__}"
            )
        if volatile:
            warnings.warn(
                "Variable: volatile was removed and now has no effect; use "
                "`with ferro.no_grad():` instead",
                UserWarning,
                stacklevel=2,
            )
        return data.detach().requires_grad_(bool(requires_grad))
