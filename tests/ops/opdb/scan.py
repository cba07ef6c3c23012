"""Op database entries for ferro/ops/scan.py."""

from __future__ import annotations

import numpy as np

import ferro
from opdb.core import OpInfo, Sample, uniform


def _scan_samples(rng):
    # Distinct values for cummax/cummin: at a tie the gradient's place is a convention.
    def perm(shape):
        return rng.permutation(int(np.prod(shape))).reshape(shape) / 3.0 - 2

    return [
        Sample((perm((7,)),), {"dim": 0}, label="1-D"),
        Sample((perm((3, 5)),), {"dim": 1}, label="rows"),
        Sample((perm((2, 3, 4)),), {"dim": -3}, label="first of 3"),
        Sample((np.array(0.7),), {"dim": 0}, label="0-d"),
        Sample((np.zeros((0, 3)),), {"dim": 0}, label="empty"),
        Sample((perm((4, 3)),), {"dim": 0}, noncontig=True, label="noncontig"),
    ]


def _logcumsumexp_samples(rng):
    far = uniform(rng, (2, 6)) * 40  # exp of these under- and overflows: the scan must not
    return [*_scan_samples(rng), Sample((far,), {"dim": 1}, label="far apart")]


def _accumulate(ufunc):
    def ref(x, dim):
        return x if x.ndim == 0 else ufunc.accumulate(x, axis=dim)

    return ref


ENTRIES = [
    OpInfo(
        "cummax",
        lambda x, dim: ferro.cummax(x, dim).values,
        _accumulate(np.maximum),
        _scan_samples,
    ),
    OpInfo(
        "cummin",
        lambda x, dim: ferro.cummin(x, dim).values,
        _accumulate(np.minimum),
        _scan_samples,
    ),
    OpInfo(
        "logcumsumexp",
        ferro.logcumsumexp,
        _accumulate(np.logaddexp),
        _logcumsumexp_samples,
        fwd_rtol32=1e-5,
    ),
]
