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
        Sample(
            (uniform(rng, (2, 2, 3)), uniform(rng, (3, 2))),
            {"spec": "...ij,jk->...ik"},
            label="ellipsis",
        ),
        Sample((uniform(rng, (2, 3)), uniform(rng, (3, 4))), {"spec": "ij,jk"}, label="implicit"),
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
    OpInfo(
        "addmm",
        lambda i, a, b: ferro.addmm(i, a, b, beta=0.5, alpha=2.0),
        lambda i, a, b: 0.5 * i + 2.0 * (a @ b),
        lambda rng: [
            Sample((uniform(rng, (2, 4)), uniform(rng, (2, 3)), uniform(rng, (3, 4)))),
            Sample((uniform(rng, (4,)), uniform(rng, (2, 3)), uniform(rng, (3, 4))), label="bcast"),
        ],
    ),
    OpInfo(
        "addmv",
        lambda i, a, v: ferro.addmv(i, a, v, alpha=-1.5),
        lambda i, a, v: i - 1.5 * (a @ v),
        lambda rng: [Sample((uniform(rng, (2,)), uniform(rng, (2, 3)), uniform(rng, (3,))))],
    ),
    OpInfo(
        "baddbmm",
        lambda i, a, b: ferro.baddbmm(i, a, b, beta=2.0),
        lambda i, a, b: 2.0 * i + a @ b,
        lambda rng: [
            Sample((uniform(rng, (2, 2, 4)), uniform(rng, (2, 2, 3)), uniform(rng, (2, 3, 4))))
        ],
    ),
    OpInfo(
        "addbmm",
        lambda i, a, b: ferro.addbmm(i, a, b, beta=0.5, alpha=-2.0),
        lambda i, a, b: 0.5 * i - 2.0 * (a @ b).sum(0),
        lambda rng: [
            Sample((uniform(rng, (2, 4)), uniform(rng, (3, 2, 5)), uniform(rng, (3, 5, 4)))),
            Sample(
                (uniform(rng, (4,)), uniform(rng, (2, 2, 3)), uniform(rng, (2, 3, 4))),
                label="bcast",
            ),
            Sample(
                (uniform(rng, (2, 4)), uniform(rng, (0, 2, 3)), uniform(rng, (0, 3, 4))),
                label="empty batch",
            ),
        ],
    ),
    OpInfo(
        "addr",
        lambda i, a, b: ferro.addr(i, a, b, beta=2.0, alpha=0.5),
        lambda i, a, b: 2.0 * i + 0.5 * np.outer(a, b),
        lambda rng: [
            Sample((uniform(rng, (3, 4)), uniform(rng, (3,)), uniform(rng, (4,)))),
            Sample((uniform(rng, ()), uniform(rng, (2,)), uniform(rng, (5,))), label="0-d input"),
            Sample(
                (uniform(rng, (4, 3)), uniform(rng, (4,)), uniform(rng, (3,))),
                noncontig=True,
                label="noncontig",
            ),
        ],
    ),
    OpInfo(
        "tensordot",
        ferro.tensordot,
        lambda a, b, dims=2: np.tensordot(a, b, dims),
        lambda rng: [
            Sample((uniform(rng, (2, 3, 4)), uniform(rng, (3, 4, 5))), label="last two"),
            Sample((uniform(rng, (2, 3)), uniform(rng, (4, 5)), 0), label="outer"),
            Sample(
                (uniform(rng, (2, 3, 4)), uniform(rng, (4, 3)), ([1, 2], [1, 0])), label="pairs"
            ),
            Sample((uniform(rng, (3, 4)), uniform(rng, (4, 3)), 1), noncontig=True, label="nc"),
        ],
    ),
    OpInfo(
        "inner",
        ferro.inner,
        np.inner,
        lambda rng: [
            Sample((uniform(rng, (2, 3)), uniform(rng, (4, 3))), label="matrices"),
            Sample((uniform(rng, (3,)), uniform(rng, (3,))), label="vectors"),
            Sample((uniform(rng, ()), uniform(rng, (2, 3))), label="0-d"),
            Sample((uniform(rng, (3, 3)), None), same=(1,), label="f(x,x)"),
        ],
    ),
    OpInfo(
        "kron",
        ferro.kron,
        np.kron,
        lambda rng: [
            Sample((uniform(rng, (2, 3)), uniform(rng, (3, 1)))),
            Sample((uniform(rng, (3,)), uniform(rng, (2, 2))), label="1-D with 2-D"),
            Sample((uniform(rng, ()), uniform(rng, (2,))), label="0-d"),
            Sample((uniform(rng, (2, 2)), None), same=(1,), label="f(x,x)"),
            Sample((uniform(rng, (3, 2)), uniform(rng, (2, 2))), noncontig=True, label="nc"),
        ],
    ),
    OpInfo(
        "cross",
        lambda a, b, dim=None: ferro.cross(a, b, dim),
        lambda a, b, dim=None: np.cross(a, b, axis=0 if dim is None else dim),
        lambda rng: [
            Sample((uniform(rng, (3, 4)), uniform(rng, (3, 4))), label="first dim of size 3"),
            Sample((uniform(rng, (2, 3)), uniform(rng, (3,))), {"dim": -1}, label="broadcast"),
        ],
    ),
    OpInfo(
        "cdist",
        lambda a, b, p=2.0: ferro.cdist(a, b, p),
        lambda a, b, p=2.0: (
            (np.abs(a[..., :, None, :] - b[..., None, :, :]) ** p).sum(-1) ** (1 / p)
        ),
        lambda rng: [
            Sample((uniform(rng, (4, 3)), uniform(rng, (5, 3))), label="p=2"),
            Sample((uniform(rng, (2, 3, 2)), uniform(rng, (2, 4, 2))), {"p": 1.0}, label="p=1"),
            Sample((uniform(rng, (3, 2)), uniform(rng, (2, 2))), {"p": 3.0}, label="p=3"),
        ],
        fwd_rtol32=1e-4,
    ),
]
