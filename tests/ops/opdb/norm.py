"""Op database entries of the normalization family (ferro/ops/norm.py), with plain NumPy
references: each statistic straight from ``mean`` and ``var`` over the normalized axes."""

from __future__ import annotations

import numpy as np

import ferro
from opdb.core import OpInfo, Sample, uniform


def _channel_shape(x):
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)


def _affine_ref(y, w, b, shape):
    if w is not None:
        y = y * w.reshape(shape)
    if b is not None:
        y = y + b.reshape(shape)
    return y


# batch_norm: running statistics are buffers, not differentiable inputs, so the samples pass
# them as keyword arrays and the ferro call wraps them in fresh tensors.
def _bn_ref(x, w, b, training=True, running=None, eps=1e-5):
    axes = (0,) + tuple(range(2, x.ndim))
    if training:
        mean, var = x.mean(axis=axes, keepdims=True), x.var(axis=axes, keepdims=True)
    else:
        mean, var = (r.reshape(_channel_shape(x)) for r in running)
    return _affine_ref((x - mean) / np.sqrt(var + eps), w, b, _channel_shape(x))


def _bn_call(x, w, b, training=True, running=None, eps=1e-5):
    rm, rv = (
        (None, None)
        if running is None
        else (ferro.tensor(r.copy(), device=x.device) for r in running)
    )
    return ferro.batch_norm(x, rm, rv, w, b, training=training, eps=eps)


def _bn_samples(rng):
    def arr(*shape):
        return uniform(rng, shape)

    running = (arr(3), rng.uniform(0.5, 2.0, 3))
    return [
        Sample((arr(4, 3), arr(3), arr(3)), label="(N,C)"),
        Sample((arr(2, 3, 5), arr(3), arr(3)), label="(N,C,L)"),
        Sample((arr(2, 3, 2, 3), arr(3), arr(3)), kwargs={"eps": 1e-3}, label="(N,C,H,W)"),
        Sample((arr(2, 3, 2, 2, 2), None, None), label="5d-no-affine"),
        Sample((arr(2, 3, 4), arr(3), None), label="weight-only"),
        Sample((arr(3, 3, 4), arr(3), arr(3)), noncontig=True, label="noncontig"),
        Sample(
            (arr(2, 3, 4), arr(3), arr(3)),
            kwargs={"training": False, "running": running},
            label="eval",
        ),
        Sample(
            (arr(2, 3), None, None),
            kwargs={"training": False, "running": running},
            label="eval-no-affine",
        ),
    ]


def _ln_ref(x, normalized_shape, w=None, b=None, eps=1e-5):
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    mean, var = x.mean(axis=axes, keepdims=True), x.var(axis=axes, keepdims=True)
    return _affine_ref((x - mean) / np.sqrt(var + eps), w, b, normalized_shape)


def _ln_samples(rng):
    def arr(*shape):
        return uniform(rng, shape)

    return [
        Sample((arr(3, 5), (5,), arr(5), arr(5)), label="(M,D)"),
        Sample((arr(2, 3, 4), (3, 4), arr(3, 4), arr(3, 4)), label="rank-2-shape"),
        Sample((arr(6), (6,), None, None), label="1d-no-affine"),
        Sample((arr(2, 2, 5), (5,), arr(5), None), kwargs={"eps": 1e-2}, label="no-bias"),
        Sample((arr(0, 4), (4,), arr(4), arr(4)), label="empty"),
        Sample((arr(4, 5), (4, 5), arr(4, 5), arr(4, 5)), noncontig=True, label="noncontig"),
    ]


def _gn_ref(x, num_groups, w=None, b=None, eps=1e-5):
    n = x.shape[0]
    xg = x.reshape(n, num_groups, -1)
    mean, var = xg.mean(axis=2, keepdims=True), xg.var(axis=2, keepdims=True)
    y = ((xg - mean) / np.sqrt(var + eps)).reshape(x.shape)
    return _affine_ref(y, w, b, _channel_shape(x))


def _gn_samples(rng):
    def arr(*shape):
        return uniform(rng, shape)

    return [
        Sample((arr(2, 6, 3), 3, arr(6), arr(6)), label="(N,C,L)"),
        Sample((arr(2, 4, 2, 3), 1, arr(4), arr(4)), label="one-group"),
        Sample((arr(3, 4), 4, None, None), label="(N,C)-group-per-channel"),
        Sample((arr(3, 4), 2, arr(4), arr(4)), label="(N,C)-affine"),
        Sample((arr(2, 4, 3, 2), 2, arr(4), arr(4)), noncontig=True, label="noncontig"),
    ]


def _in_ref(x, w=None, b=None, eps=1e-5):
    axes = tuple(range(2, x.ndim))
    mean, var = x.mean(axis=axes, keepdims=True), x.var(axis=axes, keepdims=True)
    return _affine_ref((x - mean) / np.sqrt(var + eps), w, b, _channel_shape(x))


def _in_samples(rng):
    def arr(*shape):
        return uniform(rng, shape)

    return [
        Sample((arr(2, 3, 5), arr(3), arr(3)), label="(N,C,L)"),
        Sample((arr(2, 3, 2, 3), None, None), label="(N,C,H,W)-no-affine"),
        Sample((arr(3, 2, 4), arr(2), arr(2)), noncontig=True, label="noncontig"),
    ]


def _rms_ref(x, normalized_shape, w=None, eps=None):
    eps = np.finfo(x.dtype).eps if eps is None else eps
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    y = x / np.sqrt(np.mean(x * x, axis=axes, keepdims=True) + eps)
    return y if w is None else y * w


def _rms_samples(rng):
    def arr(*shape):
        return uniform(rng, shape)

    return [
        Sample((arr(3, 5), (5,), arr(5)), label="(M,D)"),
        Sample((arr(2, 3, 4), (3, 4), arr(3, 4)), kwargs={"eps": 1e-3}, label="rank-2-shape"),
        Sample((arr(2, 4), (4,), None), kwargs={"eps": 1e-6}, label="no-weight"),
        Sample((arr(0, 4), (4,), arr(4)), label="empty"),
        Sample((arr(4, 5), (4, 5), arr(4, 5)), noncontig=True, label="noncontig"),
    ]


def _lrn_ref(x, size, alpha=1e-4, beta=0.75, k=1.0):
    c = x.shape[1]
    s = np.zeros_like(x)
    for i in range(c):
        lo, hi = max(0, i - size // 2), min(c, i + (size - 1) // 2 + 1)
        s[:, i] = (x[:, lo:hi] ** 2).sum(axis=1)
    return x / (k + alpha / size * s) ** beta


def _lrn_samples(rng):
    def arr(*shape):
        return uniform(rng, shape)

    return [
        Sample((arr(2, 5, 3), 3), kwargs={"alpha": 0.5, "beta": 0.75, "k": 1.0}, label="3d"),
        Sample((arr(2, 6, 2, 3), 4), kwargs={"alpha": 0.3, "beta": 0.6, "k": 2.0}, label="4d"),
        Sample((arr(1, 4, 2, 2, 2), 2), kwargs={"alpha": 0.2}, label="5d-defaults"),
        Sample((arr(2, 3, 4), 5), kwargs={"alpha": 1.0, "beta": 1.5}, label="size>C"),
        Sample((arr(3, 4, 3), 3), kwargs={"alpha": 0.5}, noncontig=True, label="noncontig"),
    ]


ENTRIES = [
    OpInfo("batch_norm", _bn_call, _bn_ref, _bn_samples),
    OpInfo("group_norm", ferro.group_norm, _gn_ref, _gn_samples),
    OpInfo(
        "instance_norm",
        lambda x, w, b, **kw: ferro.instance_norm(x, weight=w, bias=b, **kw),
        _in_ref,
        _in_samples,
    ),
    OpInfo("layer_norm", ferro.layer_norm, _ln_ref, _ln_samples),
    OpInfo("local_response_norm", ferro.local_response_norm, _lrn_ref, _lrn_samples),
    OpInfo("rms_norm", ferro.rms_norm, _rms_ref, _rms_samples),
]
