"""Op database entries for ferro/ops/linalg.py."""

from __future__ import annotations

import numpy as np

import ferro
from opdb.core import OpInfo, Sample, uniform


def _matmul_samples(rng):
    shapes = [
        ((3,), (3,)),
        ((2, 3), (3,)),
        ((3,), (3, 4)),
        ((2, 3), (3, 4)),
        ((5, 2, 3), (3, 4)),
        ((2, 3), (5, 3, 4)),
        ((5, 1, 2, 3), (4, 3, 2)),
        ((0, 3), (3, 2)),
        ((2, 0), (0, 3)),
    ]
    out = [Sample((rng.normal(size=a), rng.normal(size=b)), label=f"{a}@{b}") for a, b in shapes]
    out.append(
        Sample(
            (rng.normal(size=(3, 4)), rng.normal(size=(4, 3))), noncontig=True, label="noncontig"
        )
    )
    out.append(Sample((rng.normal(size=(3, 3)), None), same=(1,), label="f(x,x)"))
    return out


def _linear_samples(rng):
    return [
        Sample((uniform(rng, (4, 3)), uniform(rng, (5, 3)), uniform(rng, (5,))), label="bias"),
        Sample((uniform(rng, (2, 4, 3)), uniform(rng, (5, 3)), None), label="batched no bias"),
        Sample((uniform(rng, (3,)), uniform(rng, (2, 3)), uniform(rng, (2,))), label="1-D input"),
    ]


def _linear_ref(x, w, b):
    y = x @ w.T
    return y + b if b is not None else y


def _einsum_samples(rng):
    return [
        Sample((uniform(rng, (2, 3)), uniform(rng, (3, 4))), {"spec": "ij,jk->ik"}, label="matmul"),
        Sample((uniform(rng, (2, 3)),), {"spec": "ij->i"}, label="row sum"),
        Sample((uniform(rng, (3,)), uniform(rng, (3,))), {"spec": "i,i->"}, label="dot"),
        Sample(
            (uniform(rng, (2, 2, 3)), uniform(rng, (2, 3, 2))),
            {"spec": "bij,bjk->bik"},
            label="bmm",
        ),
        Sample(
            (uniform(rng, (2, 3)), uniform(rng, (4,))), {"spec": "ij,k->ijk"}, label="outer-ish"
        ),
        Sample((uniform(rng, (2, 3)), uniform(rng, (3, 4))), {"spec": "ij,jk->i"}, label="sum out"),
    ]


ENTRIES = [
    OpInfo("matmul", ferro.matmul, np.matmul, _matmul_samples, fwd_rtol32=1e-4),
    OpInfo("linear", ferro.linear, _linear_ref, _linear_samples, fwd_rtol32=1e-4),
    OpInfo(
        "outer",
        ferro.outer,
        np.outer,
        lambda rng: [Sample((uniform(rng, (3,)), uniform(rng, (4,))))],
    ),
    OpInfo(
        "einsum",
        lambda *ops, spec: ferro.einsum(spec, *ops),
        lambda *ops, spec: np.einsum(spec, *ops),
        _einsum_samples,
        fwd_rtol32=1e-4,
    ),
]
