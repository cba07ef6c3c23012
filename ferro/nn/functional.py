"""The functional face of the op library (``ferro.nn.functional as F``), as in PyTorch.

Besides the ops, it holds PyTorch's functional-only helpers that are compositions of ops
(``normalize``, ``cosine_similarity``, ``pairwise_distance``): their gradients are the ops'
gradients, so they need no op of their own.
"""

import functools
import inspect
import math
import numbers

import numpy as np

from ferro.creation import arange
from ferro.errors import ArgumentError, ArgumentTypeError
from ferro.ops import *  # noqa: F403
from ferro.ops import __all__ as _all
from ferro.ops import abs as _abs
from ferro.ops import activation as _act
from ferro.ops import clamp, embedding, logsigmoid, minimum, norm, softplus, where
from ferro.ops import inplace as _inplace
from ferro.ops.dropout import alpha_dropout as _alpha_dropout
from ferro.ops.dropout import dropout as _dropout
from ferro.ops.dropout import dropout1d as _dropout1d
from ferro.ops.dropout import dropout2d as _dropout2d
from ferro.ops.dropout import dropout3d as _dropout3d
from ferro.ops.dropout import feature_alpha_dropout as _feature_alpha_dropout
from ferro.ops.elementwise import real_arg
from ferro.ops.loss import _check_reduction, _reduce


def _p_arg(p, fn: str) -> float:
    p = real_arg(p, "p", fn)
    if not p > 0:
        raise ArgumentError(f"{fn}: p must be positive (ferro has no p <= 0 norm), got {p}")
    return p


def _pnorm(x, p: float, dim, keepdim: bool):
    """The vector p-norm over ``dim``: ``norm``'s own for p in 1, 2, inf, else
    ``sum(|x|**p) ** (1/p)`` from differentiable ops."""
    if p in (1.0, 2.0, math.inf):
        return norm(x, p if p == math.inf else int(p), dim, keepdim)
    return (_abs(x) ** p).sum(dim, keepdim=keepdim) ** (1.0 / p)


def _dim_arg(dim, fn: str) -> int:
    if isinstance(dim, numbers.Integral) and not isinstance(dim, bool):
        return int(dim)
    raise ArgumentTypeError(f"{fn}: dim must be an int, got {type(dim).__name__} {dim!r}")


def normalize(input, p: float = 2.0, dim: int = 1, eps: float = 1e-12):  # noqa: A002
    """``input / max(||input||_p, eps)`` with the p-norm taken over ``dim`` (PyTorch's
    ``F.normalize``): unit vectors along ``dim``, a zero vector staying zero.

    Gradient: through the norm and the division (the norm's, 0 where it is clamped to eps).
    """
    p = _p_arg(p, "normalize")
    eps = real_arg(eps, "eps", "normalize")
    return input / clamp(_pnorm(input, p, _dim_arg(dim, "normalize"), True), min=eps)


def cosine_similarity(x1, x2, dim: int = 1, eps: float = 1e-8):
    """Cosine of the angle between ``x1`` and ``x2`` along ``dim``, after broadcasting them:
    ``sum(x1 / max(||x1||, eps) * x2 / max(||x2||, eps))``, dividing each by its norm first
    as PyTorch does (the result stays within [-1, 1]).

    Gradient: through the norms, divisions and sum; where a norm is below ``eps`` PyTorch still
    differentiates the unclamped norm, ferro the clamp (0): they differ only there.
    """
    dim = _dim_arg(dim, "cosine_similarity")
    eps = real_arg(eps, "eps", "cosine_similarity")
    shape = _broadcast_shape(x1, x2, "cosine_similarity")
    x1, x2 = x1.expand(shape), x2.expand(shape)
    u1 = x1 / clamp(norm(x1, 2, dim, True), min=eps)
    u2 = x2 / clamp(norm(x2, 2, dim, True), min=eps)
    return (u1 * u2).sum(dim)


def pairwise_distance(x1, x2, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
    """The p-norm of ``x1 - x2 + eps`` over the last dimension (PyTorch's
    ``F.pairwise_distance``; ``eps`` keeps the norm differentiable at equal inputs).

    Gradient: through the difference and the p-norm.
    """
    p = _p_arg(p, "pairwise_distance")
    eps = real_arg(eps, "eps", "pairwise_distance")
    return _pnorm(x1 - x2 + eps, p, -1, bool(keepdim))


def _bag_index(x, like, name: str):
    """``x`` (a Tensor, array or list of integers) as a 1-D-or-more integer array on the device
    of ``like``."""
    from ferro._C.tensor import TensorBase
    from ferro.backend import is_array, move
    from ferro.errors import DtypeError

    arr = x._data if isinstance(x, TensorBase) else x if is_array(x) else np.asarray(x)
    if arr.dtype.kind not in "iu" and not (arr.size == 0 and arr.dtype.kind == "f"):
        raise DtypeError(f"embedding_bag: {name} must be integer, got {arr.dtype}")
    return move(arr.astype(np.int64, copy=False), like.device)


def _embedding_options(op: str, max_norm, scale_grad_by_freq, sparse, mode=None) -> None:
    """Refuse the options of an embedding lookup that ferro lacks, and a bag ``mode`` other than
    sum, mean or max (``op`` names the caller: the function or the module)."""
    from ferro.errors import NotSupportedError

    for name, value, default in (
        ("max_norm", max_norm, None),
        ("scale_grad_by_freq", scale_grad_by_freq, False),
        ("sparse", sparse, False),
    ):
        if value != default:
            raise NotSupportedError(
                f"{op}: {name}={value!r} is not supported by ferro; renormalize or scale the "
                "weight explicitly instead"
            )
    if mode is not None and mode not in ("sum", "mean", "max"):
        raise ArgumentError(f"{op}: mode must be 'sum', 'mean' or 'max', got {mode!r}")


def embedding_bag(
    input,  # noqa: A002
    weight,
    offsets=None,
    max_norm=None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    mode: str = "mean",
    sparse: bool = False,
    per_sample_weights=None,
    include_last_offset: bool = False,
    padding_idx=None,
):
    """The sums, means or maxima (``mode``) of bags of ``weight``'s rows (PyTorch's
    ``F.embedding_bag``).

    ``input`` is 2-D (one bag per row) or 1-D with ``offsets``, the start of each bag (the first
    0, non-decreasing; with ``include_last_offset`` one more, the input's length). An
    empty bag gives zeros; entries equal to ``padding_idx`` are left out (and not counted by
    ``mean``). ``per_sample_weights`` (``input``'s shape, ``mode="sum"`` only) scales each row.
    A composition of ``embedding``, ``index_add`` and ``max`` (PyTorch fuses them), so its
    gradients are theirs: ``max`` sends a bag's gradient to its largest row per column.
    """
    from ferro._C.tensor import TensorBase
    from ferro.backend import xp_of
    from ferro.creation import as_tensor
    from ferro.errors import IndexOutOfRangeError, NotSupportedError, ShapeError

    _embedding_options("embedding_bag", max_norm, scale_grad_by_freq, sparse, mode)
    if per_sample_weights is not None and mode != "sum":
        raise NotSupportedError(
            f"embedding_bag: per_sample_weights is only supported for mode='sum' (got {mode!r})"
        )
    if not isinstance(input, TensorBase) or not isinstance(weight, TensorBase):
        raise ArgumentTypeError("embedding_bag: input and weight must be Tensors")
    if weight.ndim != 2:
        raise ShapeError(f"embedding_bag: weight must be 2-D, got shape {tuple(weight.shape)}")
    idx = _bag_index(input, weight, "input")
    xp = xp_of(idx)
    if input.ndim == 2:
        if offsets is not None:
            raise ArgumentError(
                "embedding_bag: offsets must be None when input is 2-D (each row is a bag), "
                f"got shape {tuple(input.shape)} with offsets"
            )
        bags, length = input.shape
        starts = xp.arange(bags, dtype=np.int64) * length
        idx = idx.reshape(-1)
    elif input.ndim == 1:
        if offsets is None:
            raise ArgumentError("embedding_bag: a 1-D input needs offsets (the start of each bag)")
        off = _bag_index(offsets, weight, "offsets")
        if off.ndim != 1 or (include_last_offset and off.size == 0):
            raise ShapeError(
                f"embedding_bag: offsets must be 1-D (and not empty with include_last_offset), "
                f"got shape {tuple(off.shape)}"
            )
        starts = off[:-1] if include_last_offset else off
        if include_last_offset and int(off[-1]) != idx.size:
            raise ArgumentError(
                f"embedding_bag: with include_last_offset the last offset must be the input's "
                f"length {idx.size}, got {int(off[-1])}"
            )
        if starts.size and int(starts[0]) != 0:
            raise ArgumentError(
                f"embedding_bag: offsets[0] must be 0 (the first bag starts the input), got "
                f"{int(starts[0])}"
            )
        if bool((starts[1:] < starts[:-1]).any()) or (starts.size and int(starts[-1]) > idx.size):
            raise IndexOutOfRangeError(
                f"embedding_bag: offsets must be non-decreasing and at most the input's length "
                f"{idx.size}, got {off.tolist()}"
            )
        bags = starts.size
    else:
        raise ShapeError(f"embedding_bag: input must be 1-D or 2-D, got shape {tuple(input.shape)}")
    bag = xp.searchsorted(starts, xp.arange(idx.size), side="right") - 1
    kept = xp.arange(idx.size)
    if padding_idx is not None:
        n = weight.shape[0]
        if not -n <= int(padding_idx) < n:
            raise IndexOutOfRangeError(
                f"embedding_bag: padding_idx {padding_idx} is out of range for {n} embeddings"
            )
        kept = xp.flatnonzero(idx != int(padding_idx) % n)
    rows = embedding(idx[kept], weight)
    bag = bag[kept]
    if per_sample_weights is not None:
        if tuple(per_sample_weights.shape) != tuple(input.shape):
            raise ShapeError(
                f"embedding_bag: per_sample_weights has shape "
                f"{tuple(per_sample_weights.shape)}, expected input's {tuple(input.shape)}"
            )
        rows = rows * per_sample_weights.reshape(-1)[kept].unsqueeze(1)
    counts = xp.bincount(bag, minlength=bags)
    if mode != "max":
        out = weight.new_zeros((bags, weight.shape[1])).index_add(0, bag, rows)
        if mode == "sum":
            return out
        return out / as_tensor(xp.maximum(counts, 1).astype(weight.dtype)[:, None])
    first = xp.searchsorted(bag, bag, side="left")
    longest = int(counts.max() if bags else 0) or 1  # a max over no rows raises
    table = weight.new_full((bags, longest, weight.shape[1]), -math.inf)
    table[bag, xp.arange(bag.size) - first] = rows
    return table.max(1).values.masked_fill(as_tensor(counts[:, None] == 0), 0.0)


def _broadcast_shape(a, b, fn: str) -> tuple:
    from ferro.errors import ShapeError

    try:
        return np.broadcast_shapes(tuple(a.shape), tuple(b.shape))
    except ValueError:
        raise ShapeError(
            f"{fn}: shapes {tuple(a.shape)} and {tuple(b.shape)} do not broadcast"
        ) from None


def _legacy_reduction(size_average=None, reduce=None, reduction: str = "mean") -> str:
    """PyTorch's mapping of its deprecated ``size_average``/``reduce`` flags (either given) to
    ``reduction``; ``reduction`` itself when neither is."""
    if size_average is None and reduce is None:
        return reduction
    if reduce is False:
        return "none"
    return "sum" if size_average is False else "mean"


def _reduction(size_average, reduce, reduction, fn: str) -> str:
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction, fn)
    return reduction


def _taking_legacy_reduction(loss):
    """``loss`` (an op of ``ferro.ops.loss``) that also takes PyTorch's deprecated
    ``size_average``/``reduce`` as keywords, as ``torch.nn.functional``'s losses do (the spatial
    transformer tutorial's ``F.nll_loss(output, target, size_average=False)``)."""

    @functools.wraps(loss)
    def with_legacy(*args, size_average=None, reduce=None, **kwargs):
        if size_average is not None or reduce is not None:
            kwargs["reduction"] = _legacy_reduction(size_average, reduce)
        return loss(*args, **kwargs)

    return with_legacy


# The functional losses PyTorch gives size_average/reduce (huber_loss never had them).
nll_loss = _taking_legacy_reduction(nll_loss)  # noqa: F405
cross_entropy = _taking_legacy_reduction(cross_entropy)  # noqa: F405
mse_loss = _taking_legacy_reduction(mse_loss)  # noqa: F405
l1_loss = _taking_legacy_reduction(l1_loss)  # noqa: F405
smooth_l1_loss = _taking_legacy_reduction(smooth_l1_loss)  # noqa: F405
binary_cross_entropy = _taking_legacy_reduction(binary_cross_entropy)  # noqa: F405
binary_cross_entropy_with_logits = _taking_legacy_reduction(binary_cross_entropy_with_logits)  # noqa: F405
kl_div = _taking_legacy_reduction(kl_div)  # noqa: F405


def triplet_margin_loss(
    anchor,
    positive,
    negative,
    margin: float = 1.0,
    p: float = 2.0,
    eps: float = 1e-6,
    swap: bool = False,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
):
    """``max(d(a, p) - d(a, n) + margin, 0)`` with ``d`` the :func:`pairwise_distance`
    (``swap``: ``d(a, n)`` replaced by ``min(d(a, n), d(p, n))``), as PyTorch's.

    Gradient: through the distances where the hinge is active.
    """
    reduction = _reduction(size_average, reduce, reduction, "triplet_margin_loss")
    d_ap = pairwise_distance(anchor, positive, p, eps)
    d_an = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_an = minimum(d_an, pairwise_distance(positive, negative, p, eps))
    return _reduce(clamp(d_ap - d_an + margin, min=0.0), reduction)


def margin_ranking_loss(
    input1, input2, target, margin: float = 0.0, size_average=None, reduce=None, reduction="mean"
):
    """``max(0, -target * (input1 - input2) + margin)``, target in {1, -1}.

    Gradient: through the hinge.
    """
    reduction = _reduction(size_average, reduce, reduction, "margin_ranking_loss")
    return _reduce(clamp(-target * (input1 - input2) + margin, min=0.0), reduction)


def hinge_embedding_loss(
    input,
    target,
    margin: float = 1.0,
    size_average=None,
    reduce=None,
    reduction="mean",  # noqa: A002
):
    """``input`` where ``target == 1`` plus ``max(0, margin - input)`` where ``target == -1``
    (PyTorch's formula: the first term where target != -1, the second where target != 1).

    Gradient: through the selected terms.
    """
    reduction = _reduction(size_average, reduce, reduction, "hinge_embedding_loss")
    hinge = where(target != 1, clamp(margin - input, min=0.0), 0.0)
    return _reduce(hinge + where(target != -1, input, 0.0), reduction)


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):  # noqa: A002
    """``log(1 + exp(-target * input))``, target in {1, -1}.

    Gradient: softplus's.
    """
    reduction = _reduction(size_average, reduce, reduction, "soft_margin_loss")
    return _reduce(softplus(-target * input), reduction)


def cosine_embedding_loss(
    input1, input2, target, margin: float = 0.0, size_average=None, reduce=None, reduction="mean"
):
    """``1 - cos(input1, input2)`` where ``target == 1``, ``max(0, cos - margin)`` where
    ``target == -1``; cos over the last dimension with PyTorch's 1e-12 guard.

    Gradient: through the cosine.
    """
    reduction = _reduction(size_average, reduce, reduction, "cosine_embedding_loss")
    dot = (input1 * input2).sum(-1)
    mag = ((input1 * input1).sum(-1) + 1e-12) * ((input2 * input2).sum(-1) + 1e-12)
    cos = dot / mag.sqrt()
    loss = where(target == 1, 1.0 - cos, 0.0) + where(
        target == -1, clamp(cos - margin, min=0.0), 0.0
    )
    return _reduce(loss, reduction)


def gaussian_nll_loss(
    input,
    target,
    var,
    full: bool = False,
    eps: float = 1e-6,
    reduction: str = "mean",  # noqa: A002
):
    """``0.5 * (log(var) + (input - target)**2 / var)`` (+ ``0.5 * log(2 pi)`` if ``full``),
    with ``var`` clamped to at least ``eps`` (the clamp passes the gradient through, as
    PyTorch's in-place clamp under no_grad does). ``var`` may lack the last dimension or have
    size 1 there (one variance per sample).

    Gradient: through the log and the quotient.
    """
    _check_reduction(reduction, "gaussian_nll_loss")
    if var.ndim == input.ndim - 1 and tuple(var.shape) == tuple(input.shape[:-1]):
        var = var.unsqueeze(-1)
    if (var.detach() < 0).any().item():
        raise ArgumentError("gaussian_nll_loss: var has negative entries")
    raw = var.detach()
    var = var + (clamp(raw, min=eps) - raw)
    loss = 0.5 * (var.log() + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


def poisson_nll_loss(
    input,  # noqa: A002
    target,
    log_input: bool = True,
    full: bool = False,
    size_average=None,
    eps: float = 1e-8,
    reduce=None,
    reduction: str = "mean",
):
    """Poisson negative log likelihood: ``exp(input) - target * input`` (``log_input``) or
    ``input - target * log(input + eps)``; ``full`` adds Stirling's term where target > 1.

    Gradient: through the formula, w.r.t. input and target.
    """
    reduction = _reduction(size_average, reduce, reduction, "poisson_nll_loss")
    loss = input.exp() - target * input if log_input else input - target * (input + eps).log()
    if full:
        safe = where(target > 1, target, 1.0)
        stirling = safe * safe.log() - safe + 0.5 * (2 * math.pi * safe).log()
        loss = loss + where(target > 1, stirling, 0.0)
    return _reduce(loss, reduction)


def multilabel_soft_margin_loss(
    input,
    target,
    weight=None,
    size_average=None,
    reduce=None,
    reduction="mean",  # noqa: A002
):
    """``-(target * logsigmoid(input) + (1 - target) * logsigmoid(-input))`` averaged over the
    classes (times ``weight`` per class), then reduced over the batch.

    Gradient: logsigmoid's.
    """
    reduction = _reduction(size_average, reduce, reduction, "multilabel_soft_margin_loss")
    loss = -(target * logsigmoid(input) + (1 - target) * logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss.sum(-1) / input.shape[-1], reduction)


def multi_margin_loss(
    input,  # noqa: A002
    target,
    p: int = 1,
    margin: float = 1.0,
    weight=None,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
):
    """Multi-class hinge: ``sum over i != y of max(0, margin - x[y] + x[i])**p / C`` per sample
    (times ``weight[y]``), ``p`` 1 or 2.

    Gradient: through the active hinges.
    """
    reduction = _reduction(size_average, reduce, reduction, "multi_margin_loss")
    if p not in (1, 2):
        raise ArgumentError(f"multi_margin_loss: only p == 1 and p == 2 are supported, got {p}")
    x = input if input.ndim == 2 else input.reshape(1, -1)
    y = target.reshape(-1, 1)
    hinge = clamp(margin - x.gather(1, y) + x, min=0.0) ** p
    if weight is not None:
        hinge = hinge * weight[y.reshape(-1)].reshape(-1, 1)
    other = arange(x.shape[1]).reshape(1, -1) != y
    loss = where(other, hinge, 0.0).sum(1) / x.shape[1]
    return _reduce(loss if input.ndim == 2 else loss.reshape(()), reduction)


def _inplace_form(fn):
    """``fn`` with PyTorch's trailing ``inplace`` argument (keyword or positional, after
    ``fn``'s own): ``inplace=True`` writes the result into ``input`` and returns it, recorded as
    an in-place op (Note [In-place ops] of ``ferro.ops.inplace``), else ``fn(input, ...)``."""
    n_args = len(inspect.signature(fn).parameters) - 1

    @functools.wraps(fn)
    def form(input, *args, inplace=False, **kwargs):  # noqa: A002 - PyTorch's name
        if len(args) > n_args:
            *args, inplace = args
        if inplace:
            return _inplace.apply_inplace(input, fn, f"{fn.__name__}_", *args, **kwargs)
        return fn(input, *args, **kwargs)

    form.__doc__ = (fn.__doc__ or "") + "\n\n    ``inplace=True`` writes the result into the input."
    return form


def _underscore_form(fn):
    """PyTorch's ``F.relu_``-style in-place spelling of an ``inplace`` form."""

    def form(input, *args, **kwargs):  # noqa: A002
        return fn(input, *args, inplace=True, **kwargs)

    form.__name__ = form.__qualname__ = f"{fn.__name__}_"
    form.__doc__ = f"In-place :func:`{fn.__name__}`; returns ``input``."
    return form


relu = _inplace_form(_act.relu)
relu6 = _inplace_form(_act.relu6)
leaky_relu = _inplace_form(_act.leaky_relu)
elu = _inplace_form(_act.elu)
celu = _inplace_form(_act.celu)
selu = _inplace_form(_act.selu)
silu = _inplace_form(_act.silu)
mish = _inplace_form(_act.mish)
hardtanh = _inplace_form(_act.hardtanh)
hardswish = _inplace_form(_act.hardswish)
hardsigmoid = _inplace_form(_act.hardsigmoid)
threshold = _inplace_form(_act.threshold)
rrelu = _inplace_form(_act.rrelu)
dropout = _inplace_form(_dropout)
alpha_dropout = _inplace_form(_alpha_dropout)
feature_alpha_dropout = _inplace_form(_feature_alpha_dropout)
dropout1d = _inplace_form(_dropout1d)
dropout2d = _inplace_form(_dropout2d)
dropout3d = _inplace_form(_dropout3d)
relu_ = _underscore_form(relu)
leaky_relu_ = _underscore_form(leaky_relu)
elu_ = _underscore_form(elu)
celu_ = _underscore_form(celu)
selu_ = _underscore_form(selu)
hardtanh_ = _underscore_form(hardtanh)
threshold_ = _underscore_form(threshold)
rrelu_ = _underscore_form(rrelu)

_INPLACE_FORMS = [
    "relu", "relu6", "leaky_relu", "elu", "celu", "selu", "silu", "mish", "hardtanh",
    "hardswish", "hardsigmoid", "threshold", "rrelu", "dropout", "alpha_dropout",
    "feature_alpha_dropout", "dropout1d", "dropout2d", "dropout3d", "relu_", "leaky_relu_",
    "elu_", "celu_", "selu_", "hardtanh_", "threshold_", "rrelu_",
]  # fmt: skip

__all__ = [
    *(n for n in _all if n not in _INPLACE_FORMS),
    *_INPLACE_FORMS,
    "cosine_embedding_loss",
    "cosine_similarity",
    "embedding_bag",
    "gaussian_nll_loss",
    "hinge_embedding_loss",
    "margin_ranking_loss",
    "multi_margin_loss",
    "multilabel_soft_margin_loss",
    "normalize",
    "pairwise_distance",
    "poisson_nll_loss",
    "soft_margin_loss",
    "triplet_margin_loss",
]
