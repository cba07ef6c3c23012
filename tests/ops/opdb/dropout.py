"""Op database entries for ferro/ops/dropout.py."""

from __future__ import annotations

import warnings

import numpy as np

import ferro
from opdb.core import OpInfo, Sample, uniform


def _dropout_fn(x, p):
    ferro.manual_seed(3)
    return ferro.dropout(x, p)


def _dropout_ref(x, p):
    bits = np.random.Generator(np.random.PCG64(3)).integers(0, 2**32, x.shape, dtype="uint32")
    keep = bits >= int(p * 2**32)
    return x * keep / (1 - p)


def _keep(shape, p):
    bits = np.random.Generator(np.random.PCG64(3)).integers(0, 2**32, shape, dtype="uint32")
    return bits >= int(p * 2**32)


def _channel_fn(name):
    def fn(x, p):
        ferro.manual_seed(3)
        return getattr(ferro, name)(x, p)

    return fn


def _dropout2d_fn(x, p):
    with warnings.catch_warnings():  # its 2-D and 3-D samples warn, as in PyTorch
        warnings.filterwarnings("ignore", "dropout2d: a [23]-D input is read as")
        return _channel_fn("dropout2d")(x, p)


def _channel_ref(spatial):
    def ref(x, p):
        shape = x.shape[: x.ndim - spatial] + (1,) * spatial
        return x * _keep(shape, p) / (1 - p)

    return ref


def _alpha_fn(x, p):
    ferro.manual_seed(3)
    return ferro.alpha_dropout(x, p, training=True)


def _alpha_ref(x, p):
    alpha = -1.7580993408473766
    a = ((1 - p) * (1 + p * alpha**2)) ** -0.5
    keep = _keep(x.shape, p)
    return a * np.where(keep, x, alpha) - a * alpha * p


def _channel_samples(spatial):
    def make(rng):
        return [
            Sample((uniform(rng, (3, 4) + (2,) * spatial), 0.5), label="batched"),
            Sample((uniform(rng, (4,) + (3,) * spatial), 0.3), label="unbatched"),
        ]

    return make


ENTRIES = [
    OpInfo(
        "dropout",
        _dropout_fn,
        _dropout_ref,
        lambda rng: [
            Sample((uniform(rng, (4, 5)), 0.4), label="p=0.4"),
            Sample((uniform(rng, ()), 0.5), label="0-d"),
        ],
        device_mask=True,
    ),
    OpInfo("dropout1d", _channel_fn("dropout1d"), _channel_ref(1), _channel_samples(1)),
    OpInfo(
        "dropout2d",
        _dropout2d_fn,
        lambda x, p: _channel_ref(x.ndim - 2)(x, p),  # PyTorch: (N, C, ...) at every rank
        lambda rng: [
            Sample((uniform(rng, (3, 4, 2, 2)), 0.5), label="batched"),
            Sample((uniform(rng, (4, 3, 3)), 0.3), label="3-D as (N, C, L)"),
            Sample((uniform(rng, (5, 6)), 0.4), label="2-D as (N, C)"),
        ],
    ),
    OpInfo("dropout3d", _channel_fn("dropout3d"), _channel_ref(3), _channel_samples(3)),
    OpInfo(
        "alpha_dropout",
        _alpha_fn,
        _alpha_ref,
        lambda rng: [Sample((uniform(rng, (4, 5)), 0.3), label="p=0.3")],
    ),
]
