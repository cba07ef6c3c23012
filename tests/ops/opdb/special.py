"""Op database entries for ferro/ops/special.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ferro
from opdb.core import binary, unary

_erf = np.vectorize(math.erf, otypes=[float])
_erfc = np.vectorize(math.erfc, otypes=[float])
_lgamma = np.vectorize(math.lgamma, otypes=[float])


def _mpmath(name, *head):
    """A reference from mpmath (the arbitrary-precision library that ships with SymPy), which
    has the functions NumPy lacks; its entries skip where it is not installed."""

    def ref(x):
        mpmath = pytest.importorskip("mpmath")
        f = getattr(mpmath, name)
        return np.vectorize(lambda v: float(f(*head, v)), otypes=[float])(x)

    return ref


ENTRIES = [
    unary("tan", ferro.tan, np.tan, (-1.2, 1.2)),
    unary("sinh", ferro.sinh, np.sinh),
    unary("cosh", ferro.cosh, np.cosh),
    unary("asin", ferro.asin, np.arcsin, (-0.9, 0.9)),
    unary("acos", ferro.acos, np.arccos, (-0.9, 0.9)),
    unary("atan", ferro.atan, np.arctan),
    unary("asinh", ferro.asinh, np.arcsinh),
    unary("acosh", ferro.acosh, np.arccosh, (1.2, 3.0)),
    unary("atanh", ferro.atanh, np.arctanh, (-0.9, 0.9)),
    unary("erf", ferro.erf, _erf),
    unary("erfc", ferro.erfc, _erfc),
    unary("erfinv", ferro.erfinv, _mpmath("erfinv"), (-0.95, 0.95)),
    unary("lgamma", ferro.lgamma, _lgamma, (0.2, 4.0)),
    unary("lgamma_neg", ferro.lgamma, _lgamma, (-1.9, -1.1), func="lgamma"),
    unary("digamma", ferro.digamma, _mpmath("digamma"), (0.2, 4.0)),
    unary("digamma_neg", ferro.digamma, _mpmath("digamma"), (-2.9, -2.1), func="digamma"),
    unary("polygamma", lambda x: ferro.polygamma(1, x), _mpmath("polygamma", 1), (0.2, 4.0)),
    unary(
        "polygamma_3_neg",
        lambda x: ferro.polygamma(3, x),
        _mpmath("polygamma", 3),
        (-1.9, -1.1),
        func="polygamma",
        gradcheck_kwargs={"rtol": 1e-5},
    ),
    unary("logit", ferro.logit, lambda x: np.log(x / (1 - x)), (0.1, 0.9)),
    unary(
        "logit_eps",
        lambda x: ferro.logit(x, eps=0.2),
        lambda x: np.log(np.clip(x, 0.2, 0.8) / (1 - np.clip(x, 0.2, 0.8))),
        (0.05, 0.95),
        func="logit",
        kink=lambda x: np.minimum(np.abs(x - 0.2), np.abs(x - 0.8)),
    ),
    binary("atan2", ferro.atan2, np.arctan2, (0.3, 2.0)),
    binary("hypot", ferro.hypot, np.hypot, (0.3, 2.0)),
    binary("xlogy", ferro.xlogy, lambda x, y: x * np.log(y), (0.3, 2.0)),
]
