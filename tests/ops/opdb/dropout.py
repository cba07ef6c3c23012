"""Op database entries for ferro/ops/dropout.py."""

from __future__ import annotations

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


ENTRIES = [
    OpInfo(
        "dropout",
        _dropout_fn,
        _dropout_ref,
        lambda rng: [
            Sample((uniform(rng, (4, 5)), 0.4), label="p=0.4"),
            Sample((uniform(rng, ()), 0.5), label="0-d"),
        ],
    ),
]
