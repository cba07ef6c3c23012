"""The op database: one entry per registered op drives the generic op tests.

An entry gives the ferro call, a NumPy reference, sample inputs and the input domain. The
generated tests (``test_opdb.py``) check, for every entry and sample: forward against the
reference in float32 and float64, gradcheck in float64 (central differences), that inputs are
not mutated by forward or backward, that float32 and float64 agree, and that 0-d, empty,
broadcast, non-contiguous and repeated-argument (``f(x, x)``) samples work. A guard test fails
when a registered op has no entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import ferro


@dataclass
class Sample:
    """Arguments for one call: arrays become tensors (requiring grad), other values pass as is.

    ``same`` lists argument positions that reuse the tensor of position 0 (``f(x, x)``);
    ``noncontig`` makes every array argument a non-contiguous (transposed) view.
    """

    args: tuple
    kwargs: dict = field(default_factory=dict)
    same: tuple = ()
    noncontig: bool = False
    grad: bool = True
    label: str = ""


@dataclass
class OpInfo:
    name: str
    fn: Callable
    ref: Callable
    samples: Callable[[np.random.Generator], list]
    domain: tuple = (-2.0, 2.0)
    grad: bool = True
    fwd_rtol32: float = 1e-5
    gradcheck_kwargs: dict = field(default_factory=dict)
    same_dtype_out: bool = True


def _u(rng, shape, domain):
    lo, hi = domain
    return rng.uniform(lo, hi, size=shape)


def unary_samples(domain):
    def make(rng):
        out = []
        for shape in [(), (0,), (5,), (2, 3), (2, 3, 4)]:
            out.append(Sample((_u(rng, shape, domain),), label=f"shape{shape}"))
        out.append(Sample((_u(rng, (3, 4), domain),), noncontig=True, label="noncontig"))
        return out

    return make


def binary_samples(domain, rhs_domain=None):
    rhs_domain = rhs_domain or domain

    def make(rng):
        pairs = [
            ((), ()),
            ((4,), (4,)),
            ((2, 3), (3,)),
            ((2, 1, 3), (4, 3)),
            ((3, 1), (1, 4)),
            ((), (2, 3)),
            ((0, 3), (3,)),
        ]
        out = [
            Sample((_u(rng, a, domain), _u(rng, b, rhs_domain)), label=f"{a}x{b}") for a, b in pairs
        ]
        out.append(
            Sample(
                (_u(rng, (3, 4), domain), _u(rng, (3, 4), rhs_domain)),
                noncontig=True,
                label="noncontig",
            )
        )
        out.append(Sample((_u(rng, (2, 3), domain), 1.5), label="tensor-scalar"))
        out.append(Sample((_u(rng, (2, 3), domain), None), same=(1,), label="f(x,x)"))
        return out

    return make


def reduction_samples(rng):
    out = []
    for shape, axis, keep in [
        ((), None, False),
        ((5,), None, False),
        ((2, 3), 0, False),
        ((2, 3), 1, True),
        ((2, 3, 4), (0, 2), False),
        ((2, 3, 4), -1, True),
        ((0, 3), 1, False),
        ((2, 3), None, True),
    ]:
        out.append(
            Sample(
                (rng.uniform(-2, 2, shape),),
                {"axis": axis, "keepdims": keep},
                label=f"{shape} axis={axis} keep={keep}",
            )
        )
    out.append(
        Sample((rng.uniform(-2, 2, (3, 4)),), {"axis": 0}, noncontig=True, label="noncontig")
    )
    return out


def _np_reduce(f):
    def ref(x, axis=None, keepdims=False):
        return f(x, axis=axis, keepdims=keepdims)

    return ref


def reshape_samples(rng):
    return [
        Sample((rng.normal(size=(2, 3)),), {"shape": (3, 2)}, label="2x3->3x2"),
        Sample((rng.normal(size=(2, 3)),), {"shape": (-1,)}, label="flatten"),
        Sample((rng.normal(size=()),), {"shape": (1, 1)}, label="0-d"),
        Sample((rng.normal(size=(0, 3)),), {"shape": (3, 0)}, label="empty"),
        Sample((rng.normal(size=(3, 4)),), {"shape": (2, 6)}, noncontig=True, label="noncontig"),
    ]


def permute_samples(rng):
    return [
        Sample((rng.normal(size=(2, 3, 4)),), {"dims": (2, 0, 1)}, label="3d"),
        Sample((rng.normal(size=(2, 3)),), {"dims": (1, 0)}, label="2d"),
        Sample((rng.normal(size=()),), {"dims": ()}, label="0-d"),
        Sample((rng.normal(size=(3, 4)),), {"dims": (1, 0)}, noncontig=True, label="noncontig"),
    ]


def matmul_samples(rng):
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


def _ref_pow(a, b):
    return np.power(a, b)


OPS: list[OpInfo] = [
    OpInfo("add", ferro.add, np.add, binary_samples((-2, 2))),
    OpInfo("sub", ferro.sub, np.subtract, binary_samples((-2, 2))),
    OpInfo("mul", ferro.mul, np.multiply, binary_samples((-2, 2))),
    OpInfo("div", ferro.div, np.divide, binary_samples((-2, 2), (0.5, 2.0))),
    OpInfo("neg", ferro.neg, np.negative, unary_samples((-2, 2))),
    OpInfo("clone", ferro.clone, np.copy, unary_samples((-2, 2))),
    OpInfo("pow", ferro.pow, _ref_pow, binary_samples((0.5, 2.0), (-1.5, 1.5))),
    OpInfo("exp", ferro.exp, np.exp, unary_samples((-2, 2))),
    OpInfo("log", ferro.log, np.log, unary_samples((0.3, 3.0))),
    OpInfo("tanh", ferro.tanh, np.tanh, unary_samples((-2, 2))),
    OpInfo("sum", ferro.sum, _np_reduce(np.sum), reduction_samples),
    OpInfo("mean", ferro.mean, _np_reduce(np.mean), reduction_samples),
    OpInfo(
        "reshape",
        lambda x, shape: ferro.reshape(x, shape),
        lambda x, shape: np.reshape(x, shape),
        reshape_samples,
    ),
    OpInfo(
        "permute",
        lambda x, dims: ferro.permute(x, dims),
        lambda x, dims: np.transpose(x, dims),
        permute_samples,
    ),
    OpInfo("matmul", ferro.matmul, np.matmul, matmul_samples, fwd_rtol32=1e-4),
    OpInfo(
        "cast",
        lambda x: ferro.cast(ferro.cast(x, ferro.float32), ferro.float64),
        lambda x: x.astype(np.float32).astype(np.float64),
        unary_samples((-2, 2)),
        fwd_rtol32=1e-6,
        same_dtype_out=False,
        # The float32 round trip quantizes a 1e-6 step; a linear map tolerates a large one.
        gradcheck_kwargs={"eps": 1e-2, "atol": 1e-4},
    ),
    OpInfo(
        "detach", lambda x: ferro.detach(x) * 1.0, lambda x: x, unary_samples((-2, 2)), grad=False
    ),
]

from opdb_more import MORE  # noqa: E402  (entries for the rest of the op library)

OPS.extend(MORE)
BY_NAME = {op.name: op for op in OPS}
