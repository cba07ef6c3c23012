"""Layers: Linear, Embedding, Dropout, Identity, Flatten, activation and loss modules, and the
containers Sequential, ModuleList, ModuleDict, with PyTorch's signatures and reprs.

Layers with parameters take ``device=`` and ``dtype=``: parameters are created in ``dtype``,
initialized from ferro's CPU generator (so one seed gives the same weights on every device),
then moved to ``device``.
"""

from __future__ import annotations

import math
import operator
import warnings
from collections import OrderedDict
from collections.abc import Mapping

from ferro._C.tensor import TensorBase
from ferro.creation import empty, full
from ferro.errors import (
    ArgumentError,
    ArgumentTypeError,
    IndexOutOfRangeError,
    NotSupportedError,
    ShapeError,
)
from ferro.nn import functional as F
from ferro.nn import init
from ferro.nn.module import Module, _addindent
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
        dtype('float64')
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


class Embedding(Module):
    """A lookup table of ``num_embeddings`` vectors of size ``embedding_dim`` (N(0, 1) init; the
    ``padding_idx`` row zero and never updated).

    Indices must lie in ``[0, num_embeddings)``; any other raises IndexOutOfRangeError.
    ``max_norm``, ``scale_grad_by_freq`` and ``sparse`` are not supported (NotSupportedError).
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
        _weight=None,
        _freeze: bool = False,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        for name, value, default in (
            ("max_norm", max_norm, None),
            ("scale_grad_by_freq", scale_grad_by_freq, False),
            ("sparse", sparse, False),
        ):
            if value != default:
                raise NotSupportedError(
                    f"Embedding: {name}={value!r} is not supported by ferro; renormalize or "
                    "scale the weight explicitly instead"
                )
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise IndexOutOfRangeError(
                    f"Embedding: padding_idx {padding_idx} is out of range for {num_embeddings} "
                    "embeddings"
                )
            padding_idx %= num_embeddings
        self.padding_idx = padding_idx
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        if _weight is None:
            self.weight = Parameter(
                empty(num_embeddings, embedding_dim, dtype=dtype), requires_grad=not _freeze
            )
            self.reset_parameters()
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise ShapeError(
                    f"Embedding: _weight has shape {tuple(_weight.shape)}, expected "
                    f"{(num_embeddings, embedding_dim)}"
                )
            self.weight = Parameter(_weight, requires_grad=not _freeze)
        if device is not None:
            self.to(device)

    @classmethod
    def from_pretrained(
        cls,
        embeddings,
        freeze: bool = True,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
    ) -> Embedding:
        """An Embedding whose weight is ``embeddings`` (2-D, shared), frozen unless
        ``freeze=False``."""
        if embeddings.ndim != 2:
            raise ShapeError(
                f"Embedding.from_pretrained: embeddings must be 2-D, got shape "
                f"{tuple(embeddings.shape)}"
            )
        rows, cols = embeddings.shape
        return cls(
            rows,
            cols,
            padding_idx,
            max_norm,
            norm_type,
            scale_grad_by_freq,
            sparse,
            _weight=embeddings,
            _freeze=freeze,
        )

    def reset_parameters(self) -> None:
        """Draw the weight again from N(0, 1), with the padding row zero."""
        init.normal_(self.weight)
        if self.padding_idx is not None:
            self.weight.data[self.padding_idx] = 0

    def forward(self, indices):
        return F.embedding(indices, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        return s


class Dropout(Module):
    """Dropout with probability ``p`` in training mode; the identity in eval mode.

    ``inplace=True`` is accepted (PyTorch's signature) but ferro computes out of place: the
    result is the same, the input is not overwritten.
    """

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ArgumentError(f"Dropout: p must be in [0, 1], got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, x):
        return F.dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Flatten(Module):
    """Flattens dimensions ``start_dim..end_dim`` (default: all but the batch dimension)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return F.flatten(x, self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


def _bind(cls_name: str, names: tuple, defaults: tuple, args: tuple, kwargs: dict) -> dict:
    """The constructor arguments by name, positional ones in PyTorch's order (a call that does
    not fit is an ArgumentTypeError, Python's TypeError for a bad call)."""
    if len(args) > len(names):
        raise ArgumentTypeError(
            f"{cls_name}() takes at most {len(names)} arguments ({', '.join(names)}), "
            f"got {len(args)}"
        )
    values = dict(zip(names, defaults, strict=True))
    for k, v in zip(names, args, strict=False):
        values[k] = v
    for k, v in kwargs.items():
        if k not in values:
            raise ArgumentTypeError(f"{cls_name}() got an unexpected keyword argument {k!r}")
        if names.index(k) < len(args):
            raise ArgumentTypeError(f"{cls_name}() got multiple values for argument {k!r}")
        values[k] = v
    return values


def _activation(name: str, fn, doc: str, params=(), inplace: bool = False):
    """A module class for ``fn(x, *params)`` with PyTorch's constructor (``params`` in order,
    then ``inplace`` where PyTorch has it) and its repr (``inplace=True`` shown only when set).
    ``inplace`` is accepted but ferro computes out of place (the same values)."""
    names = tuple(k for k, _ in params) + (("inplace",) if inplace else ())
    defaults = tuple(v for _, v in params) + ((False,) if inplace else ())

    def __init__(self, *args, **kwargs):
        Module.__init__(self)
        for k, v in _bind(name, names, defaults, args, kwargs).items():
            setattr(self, k, v)

    def forward(self, x):
        return fn(x, *(getattr(self, k) for k, _ in params))

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
LogSigmoid = _activation("LogSigmoid", F.logsigmoid, "``logsigmoid`` as a module.")
Softsign = _activation("Softsign", F.softsign, "``softsign`` as a module.")
Tanhshrink = _activation("Tanhshrink", F.tanhshrink, "``tanhshrink`` as a module.")
GLU = _activation("GLU", F.glu, "``glu`` along ``dim`` as a module.", [("dim", -1)])


class CosineSimilarity(Module):
    """``cosine_similarity(x1, x2, dim, eps)`` as a module (PyTorch shows no arguments in its
    repr, and neither does ferro)."""

    def __init__(self, dim: int = 1, eps: float = 1e-8) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1, x2):
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    """``pairwise_distance(x1, x2, p, eps, keepdim)`` as a module."""

    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> None:
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1, x2):
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


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
        self.weight.data[...] = self.init

    def forward(self, x):
        return F.prelu(x, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


_LEGACY = ("size_average", "reduce")


def _legacy_reduction(size_average, reduce) -> str:
    """PyTorch's mapping of its deprecated ``size_average``/``reduce`` flags to ``reduction``."""
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    if size_average and reduce:
        return "mean"
    return "sum" if reduce else "none"


def _loss(name: str, fn, doc: str, params):
    """A module class for ``fn(input, target, **params)`` with PyTorch's constructor:
    ``params`` in its positional order, including the deprecated ``size_average``/``reduce``
    (which set ``reduction`` as PyTorch maps them). Tensor ``weight``/``pos_weight`` arguments
    are buffers (moved by ``.to``, saved by ``state_dict``), as in PyTorch."""
    names = tuple(k for k, _ in params)
    defaults = tuple(v for _, v in params)
    keys = [k for k in names if k not in _LEGACY]

    def __init__(self, *args, **kwargs):
        Module.__init__(self)
        values = _bind(name, names, defaults, args, kwargs)
        if values.get("size_average") is not None or values.get("reduce") is not None:
            values["reduction"] = _legacy_reduction(values["size_average"], values["reduce"])
        for k in keys:
            v = values[k]
            if k in ("weight", "pos_weight") and (v is None or isinstance(v, TensorBase)):
                self.register_buffer(k, v)
            else:
                setattr(self, k, v)

    def forward(self, input, target):  # noqa: A002
        return fn(input, target, **{k: getattr(self, k) for k in keys})

    return type(name, (Module,), {"__init__": __init__, "forward": forward, "__doc__": doc})


_REDUCE = [("size_average", None), ("reduce", None), ("reduction", "mean")]

MSELoss = _loss("MSELoss", F.mse_loss, "``mse_loss`` as a module.", _REDUCE)
L1Loss = _loss("L1Loss", F.l1_loss, "``l1_loss`` as a module.", _REDUCE)
SmoothL1Loss = _loss(
    "SmoothL1Loss", F.smooth_l1_loss, "``smooth_l1_loss`` as a module.", [*_REDUCE, ("beta", 1.0)]
)
HuberLoss = _loss(
    "HuberLoss",
    F.huber_loss,
    "``huber_loss`` as a module.",
    [("reduction", "mean"), ("delta", 1.0)],
)
NLLLoss = _loss(
    "NLLLoss",
    F.nll_loss,
    "``nll_loss`` as a module.",
    [
        ("weight", None),
        ("size_average", None),
        ("ignore_index", -100),
        ("reduce", None),
        ("reduction", "mean"),
    ],
)
CrossEntropyLoss = _loss(
    "CrossEntropyLoss",
    F.cross_entropy,
    "``cross_entropy`` as a module.",
    [
        ("weight", None),
        ("size_average", None),
        ("ignore_index", -100),
        ("reduce", None),
        ("reduction", "mean"),
        ("label_smoothing", 0.0),
    ],
)
BCELoss = _loss(
    "BCELoss",
    F.binary_cross_entropy,
    "``binary_cross_entropy`` as a module.",
    [("weight", None), *_REDUCE],
)
BCEWithLogitsLoss = _loss(
    "BCEWithLogitsLoss",
    F.binary_cross_entropy_with_logits,
    "``binary_cross_entropy_with_logits`` as a module.",
    [("weight", None), *_REDUCE, ("pos_weight", None)],
)
KLDivLoss = _loss(
    "KLDivLoss",
    F.kl_div,
    "``kl_div`` as a module.",
    [*_REDUCE, ("log_target", False)],
)


def _index(cls_name: str, idx, size: int) -> int:
    """``idx`` as a non-negative position in a container of ``size`` modules."""
    idx = operator.index(idx)
    if not -size <= idx < size:
        raise IndexOutOfRangeError(f"{cls_name}: index {idx} is out of range for {size} modules")
    return idx % size


class Sequential(Module):
    """Modules applied in order: ``Sequential(a, b, c)(x) == c(b(a(x)))``; named ``"0"``,
    ``"1"``... or by the keys of one ``OrderedDict`` argument."""

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

    def _key(self, i) -> str:
        return list(self._modules)[_index(type(self).__name__, i, len(self))]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return type(self)(OrderedDict(list(self._modules.items())[i]))
        return self._modules[self._key(i)]

    def __setitem__(self, i, module) -> None:
        setattr(self, self._key(i), module)

    def __delitem__(self, i) -> None:
        keys = list(self._modules)[i] if isinstance(i, slice) else [self._key(i)]
        for k in keys:
            del self._modules[k]
        # PyTorch renumbers, so that append keeps working
        self._modules = OrderedDict((str(j), m) for j, m in enumerate(self._modules.values()))

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __add__(self, other: Sequential) -> Sequential:
        return Sequential(*self, *other)

    def append(self, module) -> Sequential:
        """Add ``module`` at the end; returns ``self``."""
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules) -> Sequential:
        """Append every module of ``modules``; returns ``self``."""
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module) -> Sequential:
        """Insert ``module`` before position ``index``; returns ``self``."""
        mods = list(self._modules.values())
        if not -len(mods) <= index <= len(mods):
            raise IndexOutOfRangeError(
                f"Sequential.insert: index {index} is out of range for {len(mods)} modules"
            )
        mods.insert(index, module)
        self._modules = OrderedDict()
        for j, m in enumerate(mods):
            self.add_module(str(j), m)
        return self

    def pop(self, i):
        """Remove and return the module at ``i``."""
        m = self[i]
        del self[i]
        return m


class ModuleList(Module):
    """A list of modules, registered as ``"0"``, ``"1"``..."""

    def __init__(self, modules=None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return type(self)(list(self._modules.values())[i])
        return self._modules[str(_index(type(self).__name__, i, len(self)))]

    def __setitem__(self, i, module) -> None:
        setattr(self, str(_index(type(self).__name__, i, len(self))), module)

    def __delitem__(self, i) -> None:
        mods = list(self._modules.values())
        del mods[i if isinstance(i, slice) else _index(type(self).__name__, i, len(self))]
        self._modules = OrderedDict((str(j), m) for j, m in enumerate(mods))

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __iadd__(self, modules) -> ModuleList:
        return self.extend(modules)

    def __add__(self, other) -> ModuleList:
        return ModuleList([*self, *other])

    def append(self, module) -> ModuleList:
        """Add ``module`` at the end; returns ``self``."""
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules) -> ModuleList:
        """Append every module of ``modules``; returns ``self``."""
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module) -> None:
        """Insert ``module`` before position ``index``."""
        mods = list(self._modules.values())
        mods.insert(index, module)
        self._modules = OrderedDict()
        for j, m in enumerate(mods):
            self.add_module(str(j), m)

    def pop(self, i=-1):
        """Remove and return the module at ``i``."""
        m = self[i]
        del self[i]
        return m

    def __repr__(self) -> str:
        """PyTorch's compressed form: a run of modules with the same repr is printed once, as
        ``(2-4): 3 x Linear(...)``."""
        reprs = [repr(m) for m in self]
        if not reprs:
            return type(self).__name__ + "()"
        runs = []  # [first index, last index, repr]
        for i, r in enumerate(reprs):
            if runs and runs[-1][2] == r:
                runs[-1][1] = i
            else:
                runs.append([i, i, r])
        lines = [
            _addindent(f"({a}): {r}" if a == b else f"({a}-{b}): {b - a + 1} x {r}", 2)
            for a, b, r in runs
        ]
        return type(self).__name__ + "(\n  " + "\n  ".join(lines) + "\n)"


class ModuleDict(Module):
    """A dict of modules, registered under their keys (insertion order)."""

    def __init__(self, modules=None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, k):
        return self._modules[k]

    def __setitem__(self, k, m) -> None:
        self.add_module(k, m)

    def __delitem__(self, k) -> None:
        del self._modules[k]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, k) -> bool:
        return k in self._modules

    def clear(self) -> None:
        """Remove every module."""
        self._modules.clear()

    def pop(self, k):
        """Remove and return the module under ``k``."""
        return self._modules.pop(k)

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()

    def update(self, modules) -> None:
        """Add the modules of a mapping, or of an iterable of ``(key, module)`` pairs."""
        pairs = modules.items() if isinstance(modules, Mapping) else modules
        for k, m in pairs:
            self[k] = m
