"""Op database entries for ferro/ops/activation.py."""

from __future__ import annotations

import math

import numpy as np

import ferro
from opdb.core import OpInfo, Sample, sigmoid_ref, softmax_ref, unary, uniform

_erf = np.vectorize(math.erf, otypes=[float])


def _axis_samples(rng):
    return [
        Sample((uniform(rng, (5,)),), {"axis": -1}, label="1d"),
        Sample((uniform(rng, (2, 3)),), {"axis": -1}, label="rows"),
        Sample((uniform(rng, (2, 3, 4)),), {"axis": 1}, label="middle axis"),
        Sample((uniform(rng, (3, 4)),), {"axis": -1}, noncontig=True, label="noncontig"),
        Sample((uniform(rng, (0, 3)),), {"axis": -1}, label="empty"),
    ]


def _softplus_ref(x, beta=1.0, threshold=20.0):
    return np.where(beta * x > threshold, x, np.log1p(np.exp(beta * x)) / beta)


def _glu_ref(x, dim=-1):
    a, b = np.split(x, 2, axis=dim)
    return a * sigmoid_ref(b)


def _glu_samples(rng):
    return [
        Sample((uniform(rng, (4,)),), label="1d"),
        Sample((uniform(rng, (2, 6)),), label="rows"),
        Sample((uniform(rng, (4, 3)),), {"dim": 0}, label="dim 0"),
        Sample((uniform(rng, (2, 4, 3)),), {"dim": 1}, label="middle dim"),
        Sample((uniform(rng, (3, 4)),), noncontig=True, label="noncontig"),
        Sample((uniform(rng, (0, 4)),), label="empty"),
    ]


def _prelu_ref(x, w):
    return np.where(x > 0, x, (w.reshape((1, -1) + (1,) * (x.ndim - 2)) if x.ndim >= 2 else w) * x)


def _prelu_samples(rng):
    return [
        Sample((uniform(rng, (2, 3, 4)), uniform(rng, (3,), 0.1, 0.5)), label="channels"),
        Sample((uniform(rng, (5,)), uniform(rng, (1,), 0.1, 0.5)), label="shared"),
    ]


ENTRIES = [
    unary("relu", ferro.relu, lambda x: np.maximum(x, 0), kink=np.abs),
    unary(
        "leaky_relu",
        lambda x: ferro.leaky_relu(x, 0.1),
        lambda x: np.where(x > 0, x, 0.1 * x),
        kink=np.abs,
    ),
    unary(
        "elu",
        lambda x: ferro.elu(x, 0.7),
        lambda x: np.where(x > 0, x, 0.7 * np.expm1(x)),
        kink=np.abs,
    ),
    unary(
        "selu",
        ferro.selu,
        lambda x: 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * np.expm1(x)),
        kink=np.abs,
    ),
    unary("gelu", ferro.gelu, lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2)))),
    unary(
        "gelu_tanh",
        lambda x: ferro.gelu(x, "tanh"),
        lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))),
        func="gelu",
    ),
    unary("silu", ferro.silu, lambda x: x * sigmoid_ref(x)),
    unary("mish", ferro.mish, lambda x: x * np.tanh(np.log1p(np.exp(x)))),
    unary("softplus", ferro.softplus, _softplus_ref),
    unary(
        "softplus_beta",
        lambda x: ferro.softplus(x, 2.0, 1.0),
        lambda x: _softplus_ref(x, 2.0, 1.0),
        func="softplus",
        # beta * x > threshold switches to the identity at x = 0.5: a jump.
        kink=lambda x: np.abs(x - 0.5),
    ),
    unary(
        "hardswish",
        ferro.hardswish,
        lambda x: x * np.clip(x + 3, 0, 6) / 6,
        domain=(-5.0, 5.0),
        kink=lambda x: np.abs(np.abs(x) - 3),
    ),
    unary(
        "hardsigmoid",
        ferro.hardsigmoid,
        lambda x: np.clip(x + 3, 0, 6) / 6,
        domain=(-5.0, 5.0),
        kink=lambda x: np.abs(np.abs(x) - 3),
    ),
    unary("logsigmoid", ferro.logsigmoid, lambda x: np.log(sigmoid_ref(x)), domain=(-5.0, 5.0)),
    unary("softsign", ferro.softsign, lambda x: x / (1 + np.abs(x))),
    unary("tanhshrink", ferro.tanhshrink, lambda x: x - np.tanh(x)),
    OpInfo("glu", ferro.glu, _glu_ref, _glu_samples),
    unary(
        "hardtanh",
        ferro.hardtanh,
        lambda x: np.clip(x, -1, 1),
        kink=lambda x: np.abs(np.abs(x) - 1),
    ),
    OpInfo("softmax", ferro.softmax, softmax_ref, _axis_samples),
    OpInfo(
        "log_softmax", ferro.log_softmax, lambda x, axis: softmax_ref(x, axis, True), _axis_samples
    ),
    OpInfo("prelu", ferro.prelu, _prelu_ref, _prelu_samples),
    # Compositions of registered ops (PyTorch's relu6/celu/threshold/shrinks/softmin/rrelu).
    unary(
        "relu6",
        ferro.ops.relu6,
        lambda x: np.clip(x, 0, 6),
        domain=(-2.0, 8.0),
        kink=lambda x: np.minimum(np.abs(x), np.abs(x - 6)),
    ),
    unary(
        "celu",
        lambda x: ferro.ops.celu(x, 0.7),
        lambda x: np.where(x > 0, x, 0.7 * np.expm1(x / 0.7)),
        kink=np.abs,
    ),
    unary(
        "threshold",
        lambda x: ferro.ops.threshold(x, 0.5, -3.0),
        lambda x: np.where(x > 0.5, x, -3.0),
        kink=lambda x: np.abs(x - 0.5),
    ),
    unary(
        "hardshrink",
        lambda x: ferro.ops.hardshrink(x, 0.5),
        lambda x: np.where(np.abs(x) > 0.5, x, 0.0),
        kink=lambda x: np.abs(np.abs(x) - 0.5),
    ),
    unary(
        "softshrink",
        lambda x: ferro.ops.softshrink(x, 0.5),
        lambda x: np.sign(x) * np.maximum(np.abs(x) - 0.5, 0.0),
        kink=lambda x: np.abs(np.abs(x) - 0.5),
    ),
    unary(
        "rrelu",
        lambda x: ferro.ops.rrelu(x, 0.1, 0.3),
        lambda x: np.where(x >= 0, x, 0.2 * x),
        kink=np.abs,
    ),
    OpInfo(
        "softmin",
        lambda x, axis=-1: ferro.ops.softmin(x, axis),
        lambda x, axis=-1: np.exp(-x) / np.exp(-x).sum(axis=axis, keepdims=True),
        lambda rng: [
            Sample((uniform(rng, (5,)),), label="1d"),
            Sample((uniform(rng, (2, 3, 4)),), {"axis": 1}, label="3d"),
            Sample((uniform(rng, (3, 4)),), {"axis": 0}, noncontig=True, label="noncontig"),
        ],
    ),
]
