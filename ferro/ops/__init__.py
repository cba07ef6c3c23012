"""Differentiable ops, one module per family, all registered in :mod:`ferro.ops.registry`."""

from ferro.ops.elementwise import add, cast, div, exp, log, mul, neg, pow, sub, tanh
from ferro.ops.linalg import matmul
from ferro.ops.reduction import mean, sum
from ferro.ops.registry import REGISTRY, apply, register
from ferro.ops.shape import detach, permute, reshape, transpose

__all__ = [
    "REGISTRY",
    "apply",
    "register",
    "add",
    "sub",
    "mul",
    "div",
    "neg",
    "pow",
    "exp",
    "log",
    "tanh",
    "cast",
    "sum",
    "mean",
    "matmul",
    "detach",
    "reshape",
    "permute",
    "transpose",
]
