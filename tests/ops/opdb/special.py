"""Op database entries for ferro/ops/special.py."""

from __future__ import annotations

import math

import numpy as np

import ferro
from opdb.core import binary, unary

_erf = np.vectorize(math.erf, otypes=[float])
_erfc = np.vectorize(math.erfc, otypes=[float])

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
