"""Identity and Linear."""

from __future__ import annotations

import math

from ferro.creation import empty
from ferro.nn import functional as F
from ferro.nn import init
from ferro.nn.module import Module
from ferro.nn.parameter import Parameter


class Identity(Module):
    """Returns its input (any constructor arguments are ignored, as in PyTorch)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__()

    def forward(self, x):
        return x


class Linear(Module):
    """``y = x @ weight.T + bias`` with weight (out, in), initialized like PyTorch's: weight
    and bias uniform in ±1/sqrt(in_features).

    Example:
        >>> ferro.nn.Linear(3, 2, dtype=ferro.float64).weight.dtype
        ferro.float64
    """

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None
    ) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(empty(out_features, in_features, dtype=dtype))
        if bias:
            self.bias = Parameter(empty(out_features, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()
        if device is not None:
            self.to(device)

    def reset_parameters(self) -> None:
        """Draw the weight and bias again (PyTorch's Linear initialization)."""
        if self.in_features == 0:  # nothing to draw, and the bound would divide by zero
            return
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features)
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}"
        )


__all__ = ["Identity", "Linear"]
