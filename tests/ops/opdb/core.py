"""What an op database entry is, and the sample makers and references shared by the families.

This module imports nothing from the family modules (they import from it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


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
    """One op database entry.

    Attributes:
        name: the registered op's name (its ``REGISTRY`` key), or a variant's name
            (``gelu_tanh``); unique over the database.
        fn: the ferro call, ``fn(*tensors, **kwargs)``.
        ref: the NumPy reference, called with the same arguments as arrays.
        samples: ``rng -> list[Sample]``, the inputs of the generated tests.
        func: the public ``ferro.ops`` function under test when it is not ``name``
            (``max_dim`` tests ``max``); its module is the family the entry belongs to.
        grad: whether the op is differentiable (gradcheck and backward tests run).
        fwd_rtol32: forward tolerance in float32 (float64 uses 1e-12).
        gradcheck_kwargs: extra arguments for ``gradcheck`` (``eps``, ``atol``, ``rtol``).
        same_dtype_out: whether the output has the inputs' float dtype.
        elementwise: ``fn(*arrays)`` takes one array per ``domain`` interval, of any
            mutually broadcastable shapes, and works elementwise: the property tests draw
            shapes and values for it.
        reduction: ``fn(x, axis=..., keepdims=...)`` reduces like ``ref`` over any axis (None,
            an int or a tuple) of any non-empty shape: the property tests draw them.
        domain: one ``(lo, hi)`` interval per array argument, where the inputs are drawn.
        kink: ``kink(*arrays)``, the distance from the inputs to the nearest point where the op
            is not differentiable (a ReLU's 0, a tie of ``maximum``); the property tests keep
            their draws away from such points, where central differences are meaningless.
        device_mask: on a GPU the op draws its mask from the device's own generator (dropout's
            kernel), so the CuPy test checks that the output is the input masked and scaled by
            ``1 / (1 - p)``, with the same mask in the gradient, instead of equal values.
    """

    name: str
    fn: Callable
    ref: Callable
    samples: Callable[[np.random.Generator], list]
    func: str = ""
    grad: bool = True
    fwd_rtol32: float = 1e-5
    gradcheck_kwargs: dict = field(default_factory=dict)
    same_dtype_out: bool = True
    elementwise: bool = False
    reduction: bool = False
    domain: tuple = ((-2.0, 2.0),)
    kink: Callable | None = None
    device_mask: bool = False

    def __post_init__(self):
        self.func = self.func or self.name


def uniform(rng, shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, size=shape)


def unary_samples(domain):
    def make(rng):
        out = []
        for shape in [(), (0,), (5,), (2, 3), (2, 3, 4)]:
            out.append(Sample((uniform(rng, shape, *domain),), label=f"shape{shape}"))
        out.append(Sample((uniform(rng, (3, 4), *domain),), noncontig=True, label="noncontig"))
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
            Sample((uniform(rng, a, *domain), uniform(rng, b, *rhs_domain)), label=f"{a}x{b}")
            for a, b in pairs
        ]
        out.append(
            Sample(
                (uniform(rng, (3, 4), *domain), uniform(rng, (3, 4), *rhs_domain)),
                noncontig=True,
                label="noncontig",
            )
        )
        out.append(Sample((uniform(rng, (2, 3), *domain), 1.5), label="tensor-scalar"))
        out.append(Sample((uniform(rng, (2, 3), *domain), None), same=(1,), label="f(x,x)"))
        return out

    return make


def unary(name, fn, ref, domain=(-2.0, 2.0), **kw):
    """An elementwise op of one tensor, sampled over ``domain``."""
    return OpInfo(name, fn, ref, unary_samples(domain), elementwise=True, domain=(domain,), **kw)


def binary(name, fn, ref, domain=(-2.0, 2.0), rhs_domain=None, **kw):
    """An elementwise op of two broadcast tensors, its right operand over ``rhs_domain``."""
    rhs_domain = rhs_domain or domain
    return OpInfo(
        name,
        fn,
        ref,
        binary_samples(domain, rhs_domain),
        elementwise=True,
        domain=(domain, rhs_domain),
        **kw,
    )


def sigmoid_ref(x):
    return 1 / (1 + np.exp(-x))


def softmax_ref(x, axis=-1, log=False):
    z = x - x.max(axis=axis, keepdims=True)
    lse = np.log(np.exp(z).sum(axis=axis, keepdims=True))
    return z - lse if log else np.exp(z - lse)
