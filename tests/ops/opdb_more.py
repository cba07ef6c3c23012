"""Op database entries for the op library beyond the core (appended to ``opdb.OPS``).

References are written independently of the ops' implementations: straight NumPy, loops where
the formula is easier to trust that way.
"""

from __future__ import annotations

import math

import numpy as np
from opdb import OpInfo, Sample, binary_samples, reduction_samples, unary_samples

import ferro

_erf = np.vectorize(math.erf, otypes=[float])


def _u(rng, shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, size=shape)


def _softmax_ref(x, axis=-1, log=False):
    z = x - x.max(axis=axis, keepdims=True)
    lse = np.log(np.exp(z).sum(axis=axis, keepdims=True))
    return z - lse if log else np.exp(z - lse)


def axis_samples(rng):
    return [
        Sample((_u(rng, (5,)),), {"axis": -1}, label="1d"),
        Sample((_u(rng, (2, 3)),), {"axis": -1}, label="rows"),
        Sample((_u(rng, (2, 3, 4)),), {"axis": 1}, label="middle axis"),
        Sample((_u(rng, (3, 4)),), {"axis": -1}, noncontig=True, label="noncontig"),
        Sample((_u(rng, (0, 3)),), {"axis": -1}, label="empty"),
    ]


def clamp_samples(rng):
    x = _u(rng, (3, 4))
    lo = _u(rng, (3, 4), -1.5, -0.2)
    hi = _u(rng, (4,), 0.2, 1.5)
    return [
        Sample((x, -0.5, 0.5), label="scalars"),
        Sample((x, None, 0.3), label="max only"),
        Sample((x, lo, hi), label="tensor bounds"),
        Sample((_u(rng, ()), -0.5, 0.5), label="0-d"),
    ]


def _clamp_ref(x, lo, hi):
    y = x
    if lo is not None:
        y = np.maximum(y, lo)
    if hi is not None:
        y = np.minimum(y, hi)
    return y


def where_samples(rng):
    c = rng.random((3, 4)) > 0.5
    return [
        Sample((c, _u(rng, (3, 4)), _u(rng, (4,))), label="broadcast"),
        Sample((c, _u(rng, (3, 4)), 0.5), label="scalar b"),
        Sample((np.array(True), _u(rng, ()), _u(rng, ())), label="0-d"),
    ]


def var_samples(rng):
    return [
        Sample((_u(rng, (5,)),), {"axis": None, "correction": 1}, label="all"),
        Sample((_u(rng, (2, 3)),), {"axis": 1, "correction": 0}, label="population"),
        Sample(
            (_u(rng, (2, 3, 4)),),
            {"axis": (0, 2), "correction": 1, "keepdims": True},
            label="axes keepdims",
        ),
        Sample((_u(rng, (3, 4)),), {"axis": 0}, noncontig=True, label="noncontig"),
    ]


def prod_samples(rng):
    with_zero = _u(rng, (3, 4))
    with_zero[1, 2] = 0.0
    two_zeros = _u(rng, (2, 3))
    two_zeros[0, 0] = two_zeros[0, 2] = 0.0
    return reduction_samples(rng)[:6] + [
        Sample((with_zero,), {"axis": 1}, label="one zero"),
        Sample((two_zeros,), {"axis": None}, label="two zeros"),
    ]


def extreme_samples(rng):
    return [
        Sample((_u(rng, (5,)),), {"axis": 0}, label="1d"),
        Sample((_u(rng, (3, 4)),), {"axis": 1, "keepdims": True}, label="keepdims"),
        Sample((_u(rng, (2, 3, 4)),), {"axis": -2}, label="3d"),
        Sample((_u(rng, (3, 4)),), {"axis": 0}, noncontig=True, label="noncontig"),
    ]


def amax_samples(rng):
    return [
        Sample((_u(rng, (5,)),), {"axis": None}, label="all"),
        Sample((_u(rng, (3, 4)),), {"axis": (0, 1), "keepdims": True}, label="tuple"),
        Sample((_u(rng, (2, 3, 4)),), {"axis": 1}, label="3d"),
        Sample((np.array([1.0, 3.0, 3.0, 2.0]),), {"axis": None}, label="tie"),
    ]


def norm_samples(rng):
    out = []
    for p in (1, 2, math.inf):
        out.append(Sample((_u(rng, (3, 4)),), {"p": p, "axis": 1}, label=f"p={p}"))
        out.append(Sample((_u(rng, (5,)),), {"p": p}, label=f"p={p} all"))
    return out


def _norm_ref(x, p=2, axis=None, keepdims=False):
    return (
        np.linalg.norm(x, ord=p, axis=axis, keepdims=keepdims)
        if axis is not None
        else (np.linalg.norm(x.ravel(), ord=p))
    )


def cumsum_samples(rng):
    return [
        Sample((_u(rng, (5,)),), {"axis": 0}, label="1d"),
        Sample((_u(rng, (3, 4)),), {"axis": 1}, label="rows"),
        Sample((_u(rng, (3, 4)),), {"axis": 0}, noncontig=True, label="noncontig"),
        Sample((_u(rng, ()),), {"axis": 0}, label="0-d"),
    ]


def broadcast_samples(rng):
    return [
        Sample((_u(rng, (3, 1)),), {"shape": (2, 3, 4)}, label="expand"),
        Sample((_u(rng, ()),), {"shape": (2, 2)}, label="0-d"),
        Sample((_u(rng, (4,)),), {"shape": (0, 4)}, label="empty"),
    ]


def cat_samples(rng):
    return [
        Sample((_u(rng, (2, 3)), _u(rng, (4, 3))), {"dim": 0}, label="dim0"),
        Sample((_u(rng, (2, 3)), _u(rng, (2, 1)), _u(rng, (2, 2))), {"dim": -1}, label="3 parts"),
        Sample((_u(rng, (2, 3)), _u(rng, (0, 3))), {"dim": 0}, label="empty part"),
        Sample((_u(rng, (2, 3)), None), {"dim": 1}, same=(1,), label="f(x,x)"),
    ]


def stack_samples(rng):
    return [
        Sample((_u(rng, (2, 3)), _u(rng, (2, 3))), {"dim": 0}, label="dim0"),
        Sample((_u(rng, ()), _u(rng, ())), {"dim": 0}, label="0-d"),
        Sample((_u(rng, (2, 3)), None), {"dim": -1}, same=(1,), label="f(x,x)"),
    ]


def _split_fn(x, size, dim):
    pieces = ferro.split(x, size, dim)
    return ferro.cat([p * float(i + 1) for i, p in enumerate(pieces)], dim)


def _split_ref(x, size, dim):
    n = x.shape[dim]
    bounds = list(range(size, n, size)) if isinstance(size, int) else list(np.cumsum(size)[:-1])
    pieces = np.split(x, bounds, axis=dim)
    return np.concatenate([p * float(i + 1) for i, p in enumerate(pieces)], axis=dim)


def split_samples(rng):
    return [
        Sample((_u(rng, (5, 3)),), {"size": 2, "dim": 0}, label="by size"),
        Sample((_u(rng, (2, 6)),), {"size": [1, 3, 2], "dim": 1}, label="sections"),
    ]


def _unbind_fn(x, dim, used=None):
    # Weight each slice differently, so a slice's gradient landing elsewhere is caught.
    pieces = ferro.ops.shape.unbind(x, dim)[:used]
    return ferro.stack([p * float(i + 1) for i, p in enumerate(pieces)], dim)


def _unbind_ref(x, dim, used=None):
    pieces = [np.take(x, i, axis=dim) for i in range(x.shape[dim])][:used]
    return np.stack([p * float(i + 1) for i, p in enumerate(pieces)], axis=dim)


def unbind_samples(rng):
    return [
        Sample((_u(rng, (4, 3)),), {"dim": 0}, label="rows"),
        Sample((_u(rng, (2, 3, 4)),), {"dim": -1}, label="last dim"),
        Sample((_u(rng, (5,)),), {"dim": 0}, label="0-d slices"),
        Sample((_u(rng, (4, 2)),), {"dim": 0, "used": 2}, label="unused slices"),
    ]


def _first_piece(x):
    return ferro.split(x, 2, 0)[0] * 3.0


BASIC_INDEXES = [
    (1,),
    (slice(None), slice(None, None, -1)),
    (None, Ellipsis, slice(1, 3)),
    (-1, 2),
    (slice(0, 0),),
]


def getitem_samples(rng):
    return [Sample((_u(rng, (3, 4)),), {"index": idx}, label=repr(idx)) for idx in BASIC_INDEXES]


def advanced_samples(rng):
    x = _u(rng, (4, 3))
    return [
        Sample((x,), {"index": (np.array([0, 2, 2, 0]),)}, label="repeated rows"),
        Sample((x,), {"index": (np.array([[1, 1], [3, 0]]), np.array([0, 2]))}, label="pairs"),
        Sample((x,), {"index": (x > 0,)}, label="bool mask"),
        Sample((x,), {"index": (slice(None), np.array([2, 2, 0]))}, label="mixed"),
    ]


def index_select_samples(rng):
    return [
        Sample((_u(rng, (4, 3)),), {"dim": 0, "index": np.array([3, 0, 3])}, label="repeat"),
        Sample(
            (_u(rng, (2, 5)),), {"dim": 1, "index": np.array([], dtype=np.int64)}, label="empty"
        ),
    ]


def gather_samples(rng):
    return [
        Sample(
            (_u(rng, (3, 4)),),
            {"dim": 1, "index": np.array([[0, 0], [3, 1], [2, 2]])},
            label="dim1 repeats",
        ),
        Sample((_u(rng, (3, 4)),), {"dim": 0, "index": np.array([[2, 0, 1, 1]])}, label="dim0"),
    ]


def _gather_ref(x, dim, index):
    out = np.empty(index.shape)
    for pos in np.ndindex(*index.shape):
        src = list(pos)
        src[dim] = index[pos]
        out[pos] = x[tuple(src)]
    return out


def scatter_samples(rng):
    # Distinct targets along dim, so the result does not depend on the order of writes.
    return [
        Sample(
            (_u(rng, (3, 4)), _u(rng, (3, 2))),
            {"dim": 1, "index": np.array([[0, 3], [1, 2], [3, 0]])},
            label="tensor src",
        ),
        Sample(
            (_u(rng, (3, 4)), 0.5),
            {"dim": 0, "index": np.array([[2, 0, 1, 1]])},
            label="scalar src",
        ),
    ]


def _scatter_ref(x, src, dim, index, add=False):
    out = x.copy()
    for pos in np.ndindex(*index.shape):
        dst = list(pos)
        dst[dim] = index[pos]
        v = src[pos] if hasattr(src, "shape") else src
        if add:
            out[tuple(dst)] += v
        else:
            out[tuple(dst)] = v
    return out


def scatter_add_samples(rng):
    return [
        Sample(
            (_u(rng, (3, 4)), _u(rng, (3, 3))),
            {"dim": 1, "index": np.array([[0, 0, 3], [1, 2, 1], [3, 3, 3]])},
            label="repeats",
        ),
    ]


def masked_fill_samples(rng):
    x = _u(rng, (3, 4))
    return [
        Sample((x, x > 0.5, 0.25), label="scalar"),
        Sample((x, rng.random((4,)) > 0.5, _u(rng, ())), label="0-d tensor value"),
    ]


def pad_samples(rng):
    out = []
    for mode in ("constant", "reflect", "replicate"):
        out.append(Sample((_u(rng, (2, 3, 4)),), {"pad": (1, 2), "mode": mode}, label=f"{mode} 1d"))
        out.append(
            Sample((_u(rng, (3, 4)),), {"pad": (2, 1, 1, 2), "mode": mode}, label=f"{mode} 2d")
        )
    return out


def _pad_ref(x, pad, mode="constant", value=0.0):
    widths = [(0, 0)] * x.ndim
    for k in range(len(pad) // 2):
        widths[x.ndim - 1 - k] = (pad[2 * k], pad[2 * k + 1])
    np_mode = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}[mode]
    return np.pad(x, widths, mode=np_mode)


def tile_samples(rng):
    return [
        Sample((_u(rng, (2, 3)),), {"reps": (2, 1)}, label="rows"),
        Sample((_u(rng, (3,)),), {"reps": (2, 2)}, label="adds a dim"),
        Sample((_u(rng, (2, 2)),), {"reps": (0, 1)}, label="zero"),
    ]


def flip_samples(rng):
    return [
        Sample((_u(rng, (3, 4)),), {"dims": (0,)}, label="dim0"),
        Sample((_u(rng, (2, 3, 4)),), {"dims": (0, 2)}, label="two dims"),
    ]


def roll_samples(rng):
    return [
        Sample((_u(rng, (3, 4)),), {"shifts": 1, "dims": 1}, label="one dim"),
        Sample((_u(rng, (3, 4)),), {"shifts": (2, -1), "dims": (0, 1)}, label="two dims"),
        Sample((_u(rng, (3, 4)),), {"shifts": 5, "dims": None}, label="flattened"),
    ]


def embedding_samples(rng):
    return [
        Sample((_u(rng, (5, 3)),), {"indices": np.array([[0, 4], [4, 4]])}, label="repeats"),
        # padding_idx's row is used but gets no gradient (by definition): no gradcheck here;
        # test_op_semantics.py checks that row's gradient is zero.
        Sample(
            (_u(rng, (5, 3)),),
            {"indices": np.array([1, 2, 2]), "padding_idx": 2},
            grad=False,
            label="padding_idx",
        ),
    ]


def _embedding_ref(w, indices, padding_idx=None):
    return w[indices]


def linear_samples(rng):
    return [
        Sample((_u(rng, (4, 3)), _u(rng, (5, 3)), _u(rng, (5,))), label="bias"),
        Sample((_u(rng, (2, 4, 3)), _u(rng, (5, 3)), None), label="batched no bias"),
        Sample((_u(rng, (3,)), _u(rng, (2, 3)), _u(rng, (2,))), label="1-D input"),
    ]


def _linear_ref(x, w, b):
    y = x @ w.T
    return y + b if b is not None else y


def einsum_samples(rng):
    return [
        Sample((_u(rng, (2, 3)), _u(rng, (3, 4))), {"spec": "ij,jk->ik"}, label="matmul"),
        Sample((_u(rng, (2, 3)),), {"spec": "ij->i"}, label="row sum"),
        Sample((_u(rng, (3,)), _u(rng, (3,))), {"spec": "i,i->"}, label="dot"),
        Sample((_u(rng, (2, 2, 3)), _u(rng, (2, 3, 2))), {"spec": "bij,bjk->bik"}, label="bmm"),
        Sample((_u(rng, (2, 3)), _u(rng, (4,))), {"spec": "ij,k->ijk"}, label="outer-ish"),
        Sample((_u(rng, (2, 3)), _u(rng, (3, 4))), {"spec": "ij,jk->i"}, label="sum out"),
    ]


def _ce_ref(x, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    c = x.shape[1]
    rows = np.moveaxis(x, 1, -1).reshape(-1, c)
    t = target.reshape(-1)
    w = np.ones(c) if weight is None else weight
    logp = _softmax_ref(rows, axis=1, log=True)
    losses, denom = [], 0.0
    for i in range(rows.shape[0]):
        if t[i] == ignore_index:
            losses.append(0.0)
            continue
        nll = -w[t[i]] * logp[i, t[i]]
        smooth = -(w * logp[i]).sum() / c
        losses.append((1 - label_smoothing) * nll + label_smoothing * smooth)
        denom += w[t[i]]
    losses = np.array(losses)
    if reduction == "none":
        return losses.reshape(target.shape)
    return losses.sum() / denom if reduction == "mean" else losses.sum()


def ce_samples(rng):
    return [
        Sample((_u(rng, (4, 5)), np.array([0, 4, 2, 2])), label="plain"),
        Sample(
            (_u(rng, (4, 5)), np.array([0, -100, 2, 1])),
            {"weight": rng.uniform(0.5, 2.0, 5), "label_smoothing": 0.1},
            label="weight ignore smoothing",
        ),
        Sample(
            (_u(rng, (2, 3, 2, 2)), rng.integers(0, 3, (2, 2, 2))),
            {"reduction": "none"},
            label="spatial none",
        ),
        Sample((_u(rng, (3, 4)), np.array([1, 1, 3])), {"reduction": "sum"}, label="sum"),
        Sample((_u(rng, (3, 4)), np.array([1, 0, 3])), noncontig=True, label="noncontig"),
    ]


def ce_prob_samples(rng):
    p = rng.uniform(0.1, 1.0, (3, 4))
    p /= p.sum(axis=1, keepdims=True)
    return [
        Sample((_u(rng, (3, 4)), p), {"label_smoothing": 0.2}, label="probs"),
    ]


def _ce_prob_ref(x, target, label_smoothing=0.0, reduction="mean"):
    c = x.shape[1]
    q = target * (1 - label_smoothing) + label_smoothing / c
    return -(q * _softmax_ref(x, axis=1, log=True)).sum() / x.shape[0]


def _nll_ref(logp, target, weight=None, ignore_index=-100, reduction="mean"):
    w = np.ones(logp.shape[1]) if weight is None else weight
    losses = np.array(
        [0.0 if t == ignore_index else -w[t] * logp[i, t] for i, t in enumerate(target)]
    )
    denom = sum(w[t] for t in target if t != ignore_index)
    if reduction == "none":
        return losses
    return losses.sum() / denom if reduction == "mean" else losses.sum()


def nll_samples(rng):
    return [
        Sample((_u(rng, (4, 3)), np.array([0, 2, 2, 1])), label="plain"),
        Sample(
            (_u(rng, (4, 3)), np.array([0, -100, 2, 1])),
            {"weight": rng.uniform(0.5, 2, 3)},
            label="weight ignore",
        ),
    ]


def pair_samples(lo=-2.0, hi=2.0):
    def make(rng):
        return [
            Sample((_u(rng, (3, 4), lo, hi), _u(rng, (3, 4), lo, hi)), label="mean"),
            Sample(
                (_u(rng, (5,), lo, hi), _u(rng, (5,), lo, hi)), {"reduction": "sum"}, label="sum"
            ),
            Sample(
                (_u(rng, (2, 3), lo, hi), _u(rng, (2, 3), lo, hi)),
                {"reduction": "none"},
                label="none",
            ),
        ]

    return make


def _reduce_ref(v, reduction="mean"):
    return v.mean() if reduction == "mean" else (v.sum() if reduction == "sum" else v)


def _smooth_l1_ref(a, b, reduction="mean", beta=1.0):
    d = np.abs(a - b)
    return _reduce_ref(np.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta), reduction)


def _bce_ref(p, t, reduction="mean"):
    return _reduce_ref(-(t * np.log(p) + (1 - t) * np.log(1 - p)), reduction)


def _bce_logits_ref(x, t, reduction="mean", pos_weight=None):
    s = 1 / (1 + np.exp(-x))
    pw = 1.0 if pos_weight is None else pos_weight
    return _reduce_ref(-(pw * t * np.log(s) + (1 - t) * np.log(1 - s)), reduction)


def bce_logits_samples(rng):
    return pair_samples()(rng) + [
        Sample(
            (_u(rng, (3, 4)), rng.uniform(0, 1, (3, 4))),
            {"pos_weight": rng.uniform(0.5, 2, 4)},
            label="pos_weight",
        ),
    ]


def kl_samples(rng):
    p = rng.uniform(0.1, 1.0, (3, 4))
    p /= p.sum(axis=1, keepdims=True)
    logq = np.log(rng.uniform(0.1, 1.0, (3, 4)))
    return [
        Sample((logq, p), {"reduction": "batchmean"}, label="batchmean"),
        Sample((logq, np.log(p)), {"reduction": "sum", "log_target": True}, label="log_target"),
    ]


def _kl_ref(x, t, reduction="mean", log_target=False):
    v = np.exp(t) * (t - x) if log_target else t * (np.log(t) - x)
    if reduction == "batchmean":
        return v.sum() / x.shape[0]
    return _reduce_ref(v, reduction)


def _dropout_fn(x, p):
    ferro.manual_seed(3)
    return ferro.dropout(x, p)


def _dropout_ref(x, p):
    bits = np.random.Generator(np.random.PCG64(3)).integers(0, 2**32, x.shape, dtype="uint32")
    keep = bits >= int(p * 2**32)
    return x * keep / (1 - p)


def _act(name, fn, ref, domain=(-2.0, 2.0), **kw):
    return OpInfo(name, fn, ref, unary_samples(domain), **kw)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _softplus_ref(x, beta=1.0, threshold=20.0):
    return np.where(beta * x > threshold, x, np.log1p(np.exp(beta * x)) / beta)


MORE = [
    _act("abs", ferro.abs, np.abs),
    OpInfo("clamp", ferro.clamp, _clamp_ref, clamp_samples),
    _act("expm1", ferro.expm1, np.expm1),
    _act("log1p", ferro.log1p, np.log1p, (-0.5, 2.0)),
    _act("sqrt", ferro.sqrt, np.sqrt, (0.3, 3.0)),
    _act("rsqrt", ferro.rsqrt, lambda x: 1 / np.sqrt(x), (0.3, 3.0)),
    _act("sin", ferro.sin, np.sin),
    _act("cos", ferro.cos, np.cos),
    _act("sigmoid", ferro.sigmoid, _sigmoid),
    OpInfo("maximum", ferro.maximum, np.maximum, binary_samples((-2, 2))),
    OpInfo("minimum", ferro.minimum, np.minimum, binary_samples((-2, 2))),
    OpInfo("where", ferro.where, np.where, where_samples),
    *[
        OpInfo(n, getattr(ferro, n), f, binary_samples((-2, 2)), grad=False, same_dtype_out=False)
        for n, f in [
            ("eq", np.equal),
            ("ne", np.not_equal),
            ("lt", np.less),
            ("le", np.less_equal),
            ("gt", np.greater),
            ("ge", np.greater_equal),
        ]
    ],
    _act("sign", ferro.sign, np.sign, grad=False),
    _act("relu", ferro.relu, lambda x: np.maximum(x, 0)),
    _act("leaky_relu", lambda x: ferro.leaky_relu(x, 0.1), lambda x: np.where(x > 0, x, 0.1 * x)),
    _act("elu", lambda x: ferro.elu(x, 0.7), lambda x: np.where(x > 0, x, 0.7 * np.expm1(x))),
    _act(
        "selu",
        ferro.selu,
        lambda x: 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * np.expm1(x)),
    ),
    _act("gelu", ferro.gelu, lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2)))),
    _act(
        "gelu_tanh",
        lambda x: ferro.gelu(x, "tanh"),
        lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))),
    ),
    _act("silu", ferro.silu, lambda x: x * _sigmoid(x)),
    _act("mish", ferro.mish, lambda x: x * np.tanh(np.log1p(np.exp(x)))),
    _act("softplus", ferro.softplus, _softplus_ref),
    _act(
        "softplus_beta", lambda x: ferro.softplus(x, 2.0, 1.0), lambda x: _softplus_ref(x, 2.0, 1.0)
    ),
    _act("hardtanh", ferro.hardtanh, lambda x: np.clip(x, -1, 1)),
    OpInfo("softmax", ferro.softmax, _softmax_ref, axis_samples),
    OpInfo(
        "log_softmax", ferro.log_softmax, lambda x, axis: _softmax_ref(x, axis, True), axis_samples
    ),
    OpInfo(
        "prelu",
        ferro.prelu,
        lambda x, w: np.where(
            x > 0, x, (w.reshape((1, -1) + (1,) * (x.ndim - 2)) if x.ndim >= 2 else w) * x
        ),
        lambda rng: [
            Sample((_u(rng, (2, 3, 4)), _u(rng, (3,), 0.1, 0.5)), label="channels"),
            Sample((_u(rng, (5,)), _u(rng, (1,), 0.1, 0.5)), label="shared"),
        ],
    ),
    OpInfo(
        "var",
        ferro.var,
        lambda x, axis=None, correction=1, keepdims=False: np.var(
            x, axis=axis, ddof=correction, keepdims=keepdims
        ),
        var_samples,
    ),
    OpInfo(
        "std",
        ferro.std,
        lambda x, axis=None, correction=1, keepdims=False: np.std(
            x, axis=axis, ddof=correction, keepdims=keepdims
        ),
        var_samples,
    ),
    OpInfo(
        "prod",
        ferro.prod,
        lambda x, axis=None, keepdims=False: np.prod(x, axis=axis, keepdims=keepdims),
        prod_samples,
    ),
    OpInfo(
        "max_dim",
        lambda x, axis, keepdims=False: ferro.max(x, axis, keepdims)[0],
        lambda x, axis, keepdims=False: np.max(x, axis=axis, keepdims=keepdims),
        extreme_samples,
    ),
    OpInfo(
        "min_dim",
        lambda x, axis, keepdims=False: ferro.min(x, axis, keepdims)[0],
        lambda x, axis, keepdims=False: np.min(x, axis=axis, keepdims=keepdims),
        extreme_samples,
    ),
    OpInfo(
        "amax",
        ferro.amax,
        lambda x, axis=None, keepdims=False: np.max(x, axis=axis, keepdims=keepdims),
        amax_samples,
    ),
    OpInfo(
        "amin",
        ferro.amin,
        lambda x, axis=None, keepdims=False: np.min(x, axis=axis, keepdims=keepdims),
        amax_samples,
    ),
    OpInfo(
        "logsumexp",
        ferro.logsumexp,
        lambda x, axis=None, keepdims=False: np.log(np.exp(x).sum(axis=axis, keepdims=keepdims)),
        reduction_samples,
    ),
    OpInfo("norm", ferro.norm, _norm_ref, norm_samples),
    OpInfo(
        "cumsum",
        ferro.cumsum,
        lambda x, axis: np.cumsum(x, axis=axis).reshape(np.shape(x) or (1,)).reshape(np.shape(x)),
        cumsum_samples,
    ),
    OpInfo(
        "broadcast_to",
        lambda x, shape: ferro.broadcast_to(x, shape),
        lambda x, shape: np.broadcast_to(x, shape),
        broadcast_samples,
    ),
    OpInfo(
        "cat",
        lambda *xs, dim: ferro.cat(xs, dim),
        lambda *xs, dim: np.concatenate(xs, axis=dim),
        cat_samples,
    ),
    OpInfo(
        "stack",
        lambda *xs, dim: ferro.stack(xs, dim),
        lambda *xs, dim: np.stack(xs, axis=dim),
        stack_samples,
    ),
    OpInfo("split", _split_fn, _split_ref, split_samples),
    OpInfo("unbind", _unbind_fn, _unbind_ref, unbind_samples),
    OpInfo(
        "split_one_piece",
        _first_piece,
        lambda x: np.split(x, [2])[0] * 3.0,
        lambda rng: [Sample((_u(rng, (5, 2)),), label="unused pieces")],
    ),
    OpInfo("getitem", lambda x, index: x[index], lambda x, index: x[index], getitem_samples),
    OpInfo(
        "getitem_advanced", lambda x, index: x[index], lambda x, index: x[index], advanced_samples
    ),
    OpInfo(
        "narrow",
        lambda x: ferro.narrow(x, 1, 1, 2),
        lambda x: x[:, 1:3],
        lambda rng: [Sample((_u(rng, (3, 4)),))],
    ),
    OpInfo(
        "select",
        lambda x: ferro.select(x, 0, -1),
        lambda x: x[-1],
        lambda rng: [Sample((_u(rng, (3, 4)),))],
    ),
    OpInfo(
        "index_select",
        lambda x, dim, index: ferro.index_select(x, dim, ferro.tensor(index)),
        lambda x, dim, index: np.take(x, index, axis=dim),
        index_select_samples,
    ),
    OpInfo(
        "gather",
        lambda x, dim, index: ferro.gather(x, dim, ferro.tensor(index)),
        _gather_ref,
        gather_samples,
    ),
    OpInfo(
        "scatter",
        lambda x, src, dim, index: ferro.scatter(x, dim, ferro.tensor(index), src),
        lambda x, src, dim, index: _scatter_ref(x, src, dim, index),
        scatter_samples,
    ),
    OpInfo(
        "scatter_add",
        lambda x, src, dim, index: ferro.scatter_add(x, dim, ferro.tensor(index), src),
        lambda x, src, dim, index: _scatter_ref(x, src, dim, index, add=True),
        scatter_add_samples,
    ),
    OpInfo(
        "masked_fill", ferro.masked_fill, lambda x, m, v: np.where(m, v, x), masked_fill_samples
    ),
    OpInfo("pad", lambda x, pad, mode: ferro.pad(x, pad, mode), _pad_ref, pad_samples),
    OpInfo(
        "tile", lambda x, reps: ferro.tile(x, reps), lambda x, reps: np.tile(x, reps), tile_samples
    ),
    OpInfo(
        "flip", lambda x, dims: ferro.flip(x, dims), lambda x, dims: np.flip(x, dims), flip_samples
    ),
    OpInfo(
        "roll",
        lambda x, shifts, dims: ferro.roll(x, shifts, dims),
        lambda x, shifts, dims: np.roll(x, shifts, dims),
        roll_samples,
    ),
    OpInfo(
        "one_hot",
        lambda i: ferro.one_hot(i, 4),
        lambda i: np.eye(4, dtype=np.int64)[i],
        lambda rng: [Sample((np.array([[0, 3], [2, 2]]),), label="2d")],
        grad=False,
        same_dtype_out=False,
    ),
    OpInfo(
        "embedding",
        lambda w, indices, padding_idx=None: ferro.embedding(ferro.tensor(indices), w, padding_idx),
        _embedding_ref,
        embedding_samples,
    ),
    OpInfo(
        "squeeze",
        lambda x: ferro.squeeze(ferro.unsqueeze(x, 1), 1) * 1.0,
        lambda x: x,
        lambda rng: [Sample((_u(rng, (3, 4)),))],
    ),
    OpInfo(
        "flatten",
        lambda x: ferro.flatten(x, 1),
        lambda x: x.reshape(x.shape[0], -1),
        lambda rng: [Sample((_u(rng, (2, 3, 4)),))],
    ),
    OpInfo("linear", ferro.linear, _linear_ref, linear_samples, fwd_rtol32=1e-4),
    OpInfo("outer", ferro.outer, np.outer, lambda rng: [Sample((_u(rng, (3,)), _u(rng, (4,))))]),
    OpInfo(
        "einsum",
        lambda *ops, spec: ferro.einsum(spec, *ops),
        lambda *ops, spec: np.einsum(spec, *ops),
        einsum_samples,
        fwd_rtol32=1e-4,
    ),
    OpInfo(
        "cross_entropy",
        lambda x, t, **kw: ferro.cross_entropy(x, ferro.tensor(t), **kw),
        _ce_ref,
        ce_samples,
        fwd_rtol32=1e-4,
    ),
    OpInfo(
        "cross_entropy_probs", ferro.cross_entropy, _ce_prob_ref, ce_prob_samples, fwd_rtol32=1e-4
    ),
    OpInfo(
        "nll_loss",
        lambda x, t, **kw: ferro.nll_loss(x, ferro.tensor(t), **kw),
        _nll_ref,
        nll_samples,
    ),
    OpInfo(
        "mse_loss",
        ferro.mse_loss,
        lambda a, b, reduction="mean": _reduce_ref((a - b) ** 2, reduction),
        pair_samples(),
    ),
    OpInfo(
        "l1_loss",
        ferro.l1_loss,
        lambda a, b, reduction="mean": _reduce_ref(np.abs(a - b), reduction),
        pair_samples(),
    ),
    OpInfo("smooth_l1_loss", ferro.smooth_l1_loss, _smooth_l1_ref, pair_samples()),
    OpInfo(
        "huber_loss",
        ferro.huber_loss,
        lambda a, b, reduction="mean": _smooth_l1_ref(a, b, reduction),
        pair_samples(),
    ),
    OpInfo("binary_cross_entropy", ferro.binary_cross_entropy, _bce_ref, pair_samples(0.05, 0.95)),
    OpInfo(
        "binary_cross_entropy_with_logits",
        ferro.binary_cross_entropy_with_logits,
        _bce_logits_ref,
        bce_logits_samples,
    ),
    OpInfo("kl_div", ferro.kl_div, _kl_ref, kl_samples),
    # The op itself (the public to_device returns x unchanged when it is on the device already).
    OpInfo(
        "to_device",
        lambda x: ferro.ops.apply(ferro.ops.device.ToDevice, x, device="cpu") * 1.0,
        lambda x: x,
        unary_samples((-2, 2)),
    ),
    OpInfo(
        "dropout",
        _dropout_fn,
        _dropout_ref,
        lambda rng: [
            Sample((_u(rng, (4, 5)), 0.4), label="p=0.4"),
            Sample((_u(rng, ()), 0.5), label="0-d"),
        ],
    ),
]
