"""Activation modules (generated from their functions), Softmax/LogSoftmax and PReLU."""

from __future__ import annotations

import warnings

from ferro.creation import full
from ferro.nn import functional as F
from ferro.nn.module import Module
from ferro.nn.modules._bind import _bind
from ferro.nn.parameter import Parameter


def _activation(name: str, fn, doc: str, params=(), inplace: bool = False):
    """A module class for ``fn(x, *params)`` with PyTorch's constructor (``params`` in order,
    then ``inplace`` where PyTorch has it: the result is then written into the input) and its
    repr (``inplace=True`` shown only when set)."""
    names = tuple(k for k, _ in params) + (("inplace",) if inplace else ())
    defaults = tuple(v for _, v in params) + ((False,) if inplace else ())

    def __init__(self, *args, **kwargs):
        Module.__init__(self)
        for k, v in _bind(name, names, defaults, args, kwargs).items():
            setattr(self, k, v)

    def forward(self, x):
        args = (getattr(self, k) for k, _ in params)
        return fn(x, *args, inplace=True) if inplace and self.inplace else fn(x, *args)

    def extra_repr(self):
        parts = [f"{k}={getattr(self, k)!r}" for k, _ in params]
        if inplace and self.inplace:
            parts.append("inplace=True")
        return ", ".join(parts)

    return type(
        name,
        (Module,),
        {"__init__": __init__, "forward": forward, "extra_repr": extra_repr, "__doc__": doc},
    )


ReLU = _activation("ReLU", F.relu, "``relu`` as a module.", inplace=True)
LeakyReLU = _activation(
    "LeakyReLU",
    F.leaky_relu,
    "``leaky_relu`` as a module.",
    [("negative_slope", 0.01)],
    inplace=True,
)
ELU = _activation("ELU", F.elu, "``elu`` as a module.", [("alpha", 1.0)], inplace=True)
SELU = _activation("SELU", F.selu, "``selu`` as a module.", inplace=True)
GELU = _activation("GELU", F.gelu, "``gelu`` as a module.", [("approximate", "none")])
SiLU = _activation("SiLU", F.silu, "``silu`` as a module.", inplace=True)
Mish = _activation("Mish", F.mish, "``mish`` as a module.", inplace=True)
Softplus = _activation(
    "Softplus", F.softplus, "``softplus`` as a module.", [("beta", 1.0), ("threshold", 20.0)]
)
Hardtanh = _activation(
    "Hardtanh",
    F.hardtanh,
    "``hardtanh`` as a module.",
    [("min_val", -1.0), ("max_val", 1.0)],
    inplace=True,
)
Tanh = _activation("Tanh", F.tanh, "``tanh`` as a module.")
Sigmoid = _activation("Sigmoid", F.sigmoid, "``sigmoid`` as a module.")
Hardswish = _activation("Hardswish", F.hardswish, "``hardswish`` as a module.", inplace=True)
Hardsigmoid = _activation(
    "Hardsigmoid", F.hardsigmoid, "``hardsigmoid`` as a module.", inplace=True
)
ReLU6 = _activation("ReLU6", F.relu6, "``relu6`` as a module.", inplace=True)
CELU = _activation("CELU", F.celu, "``celu`` as a module.", [("alpha", 1.0)], inplace=True)
Threshold = _activation(
    "Threshold",
    F.threshold,
    "``threshold`` as a module.",
    [("threshold", None), ("value", None)],
    inplace=True,
)
Hardshrink = _activation(
    "Hardshrink", F.hardshrink, "``hardshrink`` as a module.", [("lambd", 0.5)]
)
Softshrink = _activation(
    "Softshrink", F.softshrink, "``softshrink`` as a module.", [("lambd", 0.5)]
)
LogSigmoid = _activation("LogSigmoid", F.logsigmoid, "``logsigmoid`` as a module.")
Softsign = _activation("Softsign", F.softsign, "``softsign`` as a module.")
Tanhshrink = _activation("Tanhshrink", F.tanhshrink, "``tanhshrink`` as a module.")
GLU = _activation("GLU", F.glu, "``glu`` along ``dim`` as a module.", [("dim", -1)])


def _softmax_dim(name: str, ndim: int) -> int:
    """PyTorch's implicit softmax dimension (``dim=None``): 0 for 0-, 1- and 3-D inputs, else 1;
    deprecated there, so it warns here too."""
    warnings.warn(
        f"{name}: implicit dimension choice (dim=None) is deprecated in PyTorch; pass dim",
        UserWarning,
        stacklevel=3,
    )
    return 0 if ndim in (0, 1, 3) else 1


class Softmax(Module):
    """``softmax`` along ``dim`` as a module (``axis=`` is an alias of ``dim``)."""

    def __init__(self, dim: int | None = None, *, axis: int | None = None) -> None:
        super().__init__()
        self.dim = dim if axis is None else axis

    def forward(self, x):
        dim = _softmax_dim(type(self).__name__, x.ndim) if self.dim is None else self.dim
        return F.softmax(x, dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    """``log_softmax`` along ``dim`` as a module (``axis=`` is an alias of ``dim``)."""

    def forward(self, x):
        dim = _softmax_dim(type(self).__name__, x.ndim) if self.dim is None else self.dim
        return F.log_softmax(x, dim)


class Softmin(Softmax):
    """``softmin`` along ``dim`` as a module (``axis=`` is an alias of ``dim``)."""

    def forward(self, x):
        dim = _softmax_dim(type(self).__name__, x.ndim) if self.dim is None else self.dim
        return F.softmin(x, dim)


class RReLU(Module):
    """``rrelu`` as a module: random negative slopes in ``[lower, upper]`` in training, their
    mean in eval."""

    def __init__(self, lower: float = 1.0 / 8, upper: float = 1.0 / 3, inplace: bool = False):
        super().__init__()
        self.lower, self.upper, self.inplace = lower, upper, inplace

    def forward(self, x):
        return F.rrelu(x, self.lower, self.upper, self.training, inplace=self.inplace)

    def extra_repr(self) -> str:
        return f"lower={self.lower}, upper={self.upper}" + (
            ", inplace=True" if self.inplace else ""
        )


class PReLU(Module):
    """``prelu`` with a learned slope (one, or one per channel), initialized to ``init``."""

    def __init__(
        self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None
    ) -> None:
        super().__init__()
        self.num_parameters, self.init = num_parameters, init
        self.weight = Parameter(full((num_parameters,), float(init), dtype=dtype))
        if device is not None:
            self.to(device)

    def reset_parameters(self) -> None:
        """Set every slope back to ``init``."""
        self.weight._data[...] = self.init

    def forward(self, x):
        return F.prelu(x, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


__all__ = [
    "ELU",
    "SELU",
    "GELU",
    "GLU",
    "ReLU",
    "LeakyReLU",
    "SiLU",
    "Mish",
    "Softplus",
    "Hardtanh",
    "Tanh",
    "Sigmoid",
    "Hardswish",
    "Hardsigmoid",
    "LogSigmoid",
    "Softsign",
    "Tanhshrink",
    "Softmax",
    "LogSoftmax",
    "PReLU",
    "ReLU6",
    "CELU",
    "Threshold",
    "Hardshrink",
    "Softshrink",
    "Softmin",
    "RReLU",
]
