"""Loss modules, generated from the loss functions with PyTorch's constructors."""

from __future__ import annotations

from ferro._C.tensor import TensorBase
from ferro.nn import functional as F
from ferro.nn.module import Module
from ferro.nn.modules._bind import _bind

_LEGACY = ("size_average", "reduce")


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
            values["reduction"] = F._legacy_reduction(values["size_average"], values["reduce"])
        for k in keys:
            v = values[k]
            if k in ("weight", "pos_weight") and (v is None or isinstance(v, TensorBase)):
                self.register_buffer(k, v)
            else:
                setattr(self, k, v)

    def forward(self, *inputs):
        return fn(*inputs, **{k: getattr(self, k) for k in keys})

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


TripletMarginLoss = _loss(
    "TripletMarginLoss",
    F.triplet_margin_loss,
    "``triplet_margin_loss`` as a module: ``forward(anchor, positive, negative)``.",
    [("margin", 1.0), ("p", 2.0), ("eps", 1e-6), ("swap", False), *_REDUCE],
)
MarginRankingLoss = _loss(
    "MarginRankingLoss",
    F.margin_ranking_loss,
    "``margin_ranking_loss`` as a module: ``forward(input1, input2, target)``.",
    [("margin", 0.0), *_REDUCE],
)
HingeEmbeddingLoss = _loss(
    "HingeEmbeddingLoss",
    F.hinge_embedding_loss,
    "``hinge_embedding_loss`` as a module.",
    [("margin", 1.0), *_REDUCE],
)
SoftMarginLoss = _loss(
    "SoftMarginLoss", F.soft_margin_loss, "``soft_margin_loss`` as a module.", _REDUCE
)
CosineEmbeddingLoss = _loss(
    "CosineEmbeddingLoss",
    F.cosine_embedding_loss,
    "``cosine_embedding_loss`` as a module: ``forward(input1, input2, target)``.",
    [("margin", 0.0), *_REDUCE],
)
GaussianNLLLoss = _loss(
    "GaussianNLLLoss",
    F.gaussian_nll_loss,
    "``gaussian_nll_loss`` as a module: ``forward(input, target, var)``.",
    [("full", False), ("eps", 1e-6), ("reduction", "mean")],
)
PoissonNLLLoss = _loss(
    "PoissonNLLLoss",
    F.poisson_nll_loss,
    "``poisson_nll_loss`` as a module.",
    [
        ("log_input", True),
        ("full", False),
        ("size_average", None),
        ("eps", 1e-8),
        ("reduce", None),
        ("reduction", "mean"),
    ],
)
MultiLabelSoftMarginLoss = _loss(
    "MultiLabelSoftMarginLoss",
    F.multilabel_soft_margin_loss,
    "``multilabel_soft_margin_loss`` as a module.",
    [("weight", None), *_REDUCE],
)
MultiMarginLoss = _loss(
    "MultiMarginLoss",
    F.multi_margin_loss,
    "``multi_margin_loss`` as a module.",
    [("p", 1), ("margin", 1.0), ("weight", None), *_REDUCE],
)


__all__ = [
    "TripletMarginLoss",
    "MarginRankingLoss",
    "HingeEmbeddingLoss",
    "SoftMarginLoss",
    "CosineEmbeddingLoss",
    "GaussianNLLLoss",
    "PoissonNLLLoss",
    "MultiLabelSoftMarginLoss",
    "MultiMarginLoss",
    "MSELoss",
    "L1Loss",
    "SmoothL1Loss",
    "HuberLoss",
    "NLLLoss",
    "CrossEntropyLoss",
    "BCELoss",
    "BCEWithLogitsLoss",
    "KLDivLoss",
]
