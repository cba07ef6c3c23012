"""Layers: Linear, Embedding, Dropout, Identity, Flatten, activation and loss modules, and the
containers Sequential, ModuleList, ModuleDict."""

from __future__ import annotations

import math
from collections import OrderedDict

import ferro
from ferro.errors import ArgumentError, IndexOutOfRangeError
from ferro.nn import functional as F
from ferro.nn import init
from ferro.nn.module import Module
from ferro.nn.parameter import Parameter


class Identity(Module):
    """Returns its input."""

    def forward(self, x):
        return x


class Linear(Module):
    """``y = x @ weight.T + bias`` with weight (out, in), initialized like PyTorch's
    (uniform in ±1/sqrt(in))."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, dtype=None) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(ferro.empty(out_features, in_features, dtype=dtype))
        self.bias = Parameter(ferro.empty(out_features, dtype=dtype)) if bias else None
        if not bias:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features else 0.0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}"
        )


class Embedding(Module):
    """A lookup table of ``num_embeddings`` vectors of size ``embedding_dim`` (N(0, 1) init).

    Indices must lie in ``[0, num_embeddings)``; any other raises IndexOutOfRangeError.
    """

    def __init__(
        self, num_embeddings: int, embedding_dim: int, padding_idx=None, dtype=None
    ) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None and not -num_embeddings <= padding_idx < num_embeddings:
            raise IndexOutOfRangeError(
                f"Embedding: padding_idx {padding_idx} is out of range for {num_embeddings} "
                "embeddings"
            )
        self.padding_idx = padding_idx
        self.weight = Parameter(ferro.empty(num_embeddings, embedding_dim, dtype=dtype))
        init.normal_(self.weight)
        if padding_idx is not None:
            self.weight.data[padding_idx] = 0

    def forward(self, indices):
        return F.embedding(indices, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"


class Dropout(Module):
    """Dropout with probability ``p`` in training mode; the identity in eval mode."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ArgumentError(f"Dropout: p must be in [0, 1], got {p}")
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class Flatten(Module):
    """Flattens dimensions ``start_dim..end_dim`` (default: all but the batch dimension)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return F.flatten(x, self.start_dim, self.end_dim)


def _activation(name, fn, doc, **defaults):
    def __init__(self, **kw):
        Module.__init__(self)
        for k, v in {**defaults, **kw}.items():
            setattr(self, k, v)

    def forward(self, x):
        return fn(x, **{k: getattr(self, k) for k in defaults})

    def extra_repr(self):
        return ", ".join(f"{k}={getattr(self, k)}" for k in defaults)

    return type(
        name,
        (Module,),
        {"__init__": __init__, "forward": forward, "extra_repr": extra_repr, "__doc__": doc},
    )


ReLU = _activation("ReLU", F.relu, "``relu`` as a module.")
LeakyReLU = _activation(
    "LeakyReLU", F.leaky_relu, "``leaky_relu`` as a module.", negative_slope=0.01
)
ELU = _activation("ELU", F.elu, "``elu`` as a module.", alpha=1.0)
SELU = _activation("SELU", F.selu, "``selu`` as a module.")
GELU = _activation("GELU", F.gelu, "``gelu`` as a module.", approximate="none")
SiLU = _activation("SiLU", F.silu, "``silu`` as a module.")
Mish = _activation("Mish", F.mish, "``mish`` as a module.")
Softplus = _activation(
    "Softplus", F.softplus, "``softplus`` as a module.", beta=1.0, threshold=20.0
)
Hardtanh = _activation(
    "Hardtanh", F.hardtanh, "``hardtanh`` as a module.", min_val=-1.0, max_val=1.0
)
Tanh = _activation("Tanh", F.tanh, "``tanh`` as a module.")
Sigmoid = _activation("Sigmoid", F.sigmoid, "``sigmoid`` as a module.")
Softmax = _activation("Softmax", F.softmax, "``softmax`` as a module.", axis=-1)
LogSoftmax = _activation("LogSoftmax", F.log_softmax, "``log_softmax`` as a module.", axis=-1)


class PReLU(Module):
    """``prelu`` with a learned slope (one, or one per channel), initialized to ``init``."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25) -> None:
        super().__init__()
        self.weight = Parameter(ferro.full((num_parameters,), float(init)))

    def forward(self, x):
        return F.prelu(x, self.weight)


def _loss(name, fn, doc, **defaults):
    def __init__(self, **kw):
        Module.__init__(self)
        for k, v in {**defaults, **kw}.items():
            setattr(self, k, v)

    def forward(self, input, target):  # noqa: A002
        return fn(input, target, **{k: getattr(self, k) for k in defaults})

    return type(name, (Module,), {"__init__": __init__, "forward": forward, "__doc__": doc})


MSELoss = _loss("MSELoss", F.mse_loss, "``mse_loss`` as a module.", reduction="mean")
L1Loss = _loss("L1Loss", F.l1_loss, "``l1_loss`` as a module.", reduction="mean")
SmoothL1Loss = _loss(
    "SmoothL1Loss", F.smooth_l1_loss, "``smooth_l1_loss`` as a module.", reduction="mean", beta=1.0
)
HuberLoss = _loss(
    "HuberLoss", F.huber_loss, "``huber_loss`` as a module.", reduction="mean", delta=1.0
)
NLLLoss = _loss(
    "NLLLoss",
    F.nll_loss,
    "``nll_loss`` as a module.",
    weight=None,
    ignore_index=-100,
    reduction="mean",
)
CrossEntropyLoss = _loss(
    "CrossEntropyLoss",
    F.cross_entropy,
    "``cross_entropy`` as a module.",
    weight=None,
    ignore_index=-100,
    reduction="mean",
    label_smoothing=0.0,
)
BCELoss = _loss(
    "BCELoss",
    F.binary_cross_entropy,
    "``binary_cross_entropy`` as a module.",
    weight=None,
    reduction="mean",
)
BCEWithLogitsLoss = _loss(
    "BCEWithLogitsLoss",
    F.binary_cross_entropy_with_logits,
    "``binary_cross_entropy_with_logits`` as a module.",
    weight=None,
    reduction="mean",
    pos_weight=None,
)
KLDivLoss = _loss(
    "KLDivLoss", F.kl_div, "``kl_div`` as a module.", reduction="mean", log_target=False
)


class Sequential(Module):
    """Modules applied in order: ``Sequential(a, b, c)(x) == c(b(a(x)))``."""

    def __init__(self, *modules) -> None:
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            for k, m in modules[0].items():
                self.add_module(k, m)
        else:
            for i, m in enumerate(modules):
                self.add_module(str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, i):
        mods = list(self._modules.values())
        if isinstance(i, slice):
            return Sequential(*mods[i])
        return mods[i]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module) -> Sequential:
        self.add_module(str(len(self)), module)
        return self


class ModuleList(Module):
    """A list of modules, registered."""

    def __init__(self, modules=()) -> None:
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, module) -> ModuleList:
        self.add_module(str(len(self._modules)), module)
        return self

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())


class ModuleDict(Module):
    """A dict of modules, registered."""

    def __init__(self, modules=None) -> None:
        super().__init__()
        for k, m in (modules or {}).items():
            self.add_module(k, m)

    def __getitem__(self, k):
        return self._modules[k]

    def __setitem__(self, k, m) -> None:
        self.add_module(k, m)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()
