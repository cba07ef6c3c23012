"""Op database entries for ferro/ops/loss.py."""

from __future__ import annotations

import numpy as np

import ferro
from opdb.core import OpInfo, Sample, softmax_ref, uniform


def _ce_ref(x, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    c = x.shape[1]
    rows = np.moveaxis(x, 1, -1).reshape(-1, c)
    t = target.reshape(-1)
    w = np.ones(c) if weight is None else weight
    logp = softmax_ref(rows, axis=1, log=True)
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


def _ce_samples(rng):
    return [
        Sample((uniform(rng, (4, 5)), np.array([0, 4, 2, 2])), label="plain"),
        Sample(
            (uniform(rng, (4, 5)), np.array([0, -100, 2, 1])),
            {"weight": rng.uniform(0.5, 2.0, 5), "label_smoothing": 0.1},
            label="weight ignore smoothing",
        ),
        Sample(
            (uniform(rng, (2, 3, 2, 2)), rng.integers(0, 3, (2, 2, 2))),
            {"reduction": "none"},
            label="spatial none",
        ),
        Sample((uniform(rng, (3, 4)), np.array([1, 1, 3])), {"reduction": "sum"}, label="sum"),
        Sample((uniform(rng, (3, 4)), np.array([1, 0, 3])), noncontig=True, label="noncontig"),
    ]


def _ce_prob_samples(rng):
    p = rng.uniform(0.1, 1.0, (3, 4))
    p /= p.sum(axis=1, keepdims=True)
    return [
        Sample((uniform(rng, (3, 4)), p), {"label_smoothing": 0.2}, label="probs"),
    ]


def _ce_prob_ref(x, target, label_smoothing=0.0, reduction="mean"):
    c = x.shape[1]
    q = target * (1 - label_smoothing) + label_smoothing / c
    return -(q * softmax_ref(x, axis=1, log=True)).sum() / x.shape[0]


def _nll_ref(logp, target, weight=None, ignore_index=-100, reduction="mean"):
    w = np.ones(logp.shape[1]) if weight is None else weight
    losses = np.array(
        [0.0 if t == ignore_index else -w[t] * logp[i, t] for i, t in enumerate(target)]
    )
    denom = sum(w[t] for t in target if t != ignore_index)
    if reduction == "none":
        return losses
    return losses.sum() / denom if reduction == "mean" else losses.sum()


def _nll_samples(rng):
    return [
        Sample((uniform(rng, (4, 3)), np.array([0, 2, 2, 1])), label="plain"),
        Sample(
            (uniform(rng, (4, 3)), np.array([0, -100, 2, 1])),
            {"weight": rng.uniform(0.5, 2, 3)},
            label="weight ignore",
        ),
    ]


def _pair_samples(lo=-2.0, hi=2.0):
    def make(rng):
        return [
            Sample((uniform(rng, (3, 4), lo, hi), uniform(rng, (3, 4), lo, hi)), label="mean"),
            Sample(
                (uniform(rng, (5,), lo, hi), uniform(rng, (5,), lo, hi)),
                {"reduction": "sum"},
                label="sum",
            ),
            Sample(
                (uniform(rng, (2, 3), lo, hi), uniform(rng, (2, 3), lo, hi)),
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


def _bce_logits_samples(rng):
    return _pair_samples()(rng) + [
        Sample(
            (uniform(rng, (3, 4)), rng.uniform(0, 1, (3, 4))),
            {"pos_weight": rng.uniform(0.5, 2, 4)},
            label="pos_weight",
        ),
    ]


def _kl_samples(rng):
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


ENTRIES = [
    OpInfo(
        "cross_entropy",
        lambda x, t, **kw: ferro.cross_entropy(x, ferro.tensor(t), **kw),
        _ce_ref,
        _ce_samples,
        fwd_rtol32=1e-4,
    ),
    OpInfo(
        "cross_entropy_probs",
        ferro.cross_entropy,
        _ce_prob_ref,
        _ce_prob_samples,
        func="cross_entropy",
        fwd_rtol32=1e-4,
    ),
    OpInfo(
        "nll_loss",
        lambda x, t, **kw: ferro.nll_loss(x, ferro.tensor(t), **kw),
        _nll_ref,
        _nll_samples,
    ),
    OpInfo(
        "mse_loss",
        ferro.mse_loss,
        lambda a, b, reduction="mean": _reduce_ref((a - b) ** 2, reduction),
        _pair_samples(),
    ),
    OpInfo(
        "l1_loss",
        ferro.l1_loss,
        lambda a, b, reduction="mean": _reduce_ref(np.abs(a - b), reduction),
        _pair_samples(),
    ),
    OpInfo("smooth_l1_loss", ferro.smooth_l1_loss, _smooth_l1_ref, _pair_samples()),
    OpInfo(
        "huber_loss",
        ferro.huber_loss,
        lambda a, b, reduction="mean": _smooth_l1_ref(a, b, reduction),
        _pair_samples(),
    ),
    OpInfo("binary_cross_entropy", ferro.binary_cross_entropy, _bce_ref, _pair_samples(0.05, 0.95)),
    OpInfo(
        "binary_cross_entropy_with_logits",
        ferro.binary_cross_entropy_with_logits,
        _bce_logits_ref,
        _bce_logits_samples,
    ),
    OpInfo("kl_div", ferro.kl_div, _kl_ref, _kl_samples),
]
