"""SGD, Adam, AdamW, RMSprop and Adagrad with PyTorch's update rules."""

from __future__ import annotations

import math

import numpy as np

from ferro.errors import ArgumentError
from ferro.optim.optimizer import Optimizer


class SGD(Optimizer):
    """Stochastic gradient descent with momentum, dampening, Nesterov and weight decay.

    Update: ``d = g + wd p``; with momentum, ``buf = momentum buf + (1 - dampening) d`` (``d`` on
    the first step) and ``d = d + momentum buf`` (Nesterov) or ``buf``; ``p -= lr d``.
    """

    kernel = "sgd_update"

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ) -> None:
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ArgumentError(
                f"SGD: nesterov needs momentum > 0 and dampening == 0, got momentum={momentum}, "
                f"dampening={dampening}"
            )
        super().__init__(
            params,
            dict(
                lr=lr,
                momentum=momentum,
                dampening=dampening,
                weight_decay=weight_decay,
                nesterov=nesterov,
            ),
        )

    def _update_fused(self, kernel, p, g, state, group):
        first = "momentum_buffer" not in state
        if group["momentum"] != 0 and first:
            state["momentum_buffer"] = np.empty_like(p)
        buf = state.get("momentum_buffer", p)
        kernel(
            p,
            g,
            buf,
            group["lr"],
            group["momentum"],
            group["dampening"],
            group["weight_decay"],
            group["nesterov"],
            first,
        )

    def _update_generic(self, p, g, state, group):
        d = g + group["weight_decay"] * p if group["weight_decay"] else g
        m = group["momentum"]
        if m != 0:
            if "momentum_buffer" not in state:
                buf = state["momentum_buffer"] = d.copy()
            else:
                buf = state["momentum_buffer"]
                buf *= m
                buf += (1 - group["dampening"]) * d
            d = d + m * buf if group["nesterov"] else buf
        p -= group["lr"] * d


class Adam(Optimizer):
    """Adam; with ``weight_decay`` added to the gradient (L2), as PyTorch's Adam does.

    Update: ``m = b1 m + (1-b1) g``, ``v = b2 v + (1-b2) g^2``,
    ``p -= lr / (1-b1^t) * m / (sqrt(v) / sqrt(1-b2^t) + eps)``.
    """

    kernel = "adam_update"

    decoupled = False

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        b1, b2 = betas
        if not (0 <= b1 < 1 and 0 <= b2 < 1):
            raise ArgumentError(f"{type(self).__name__}: betas must be in [0, 1), got {betas}")
        super().__init__(params, dict(lr=lr, betas=(b1, b2), eps=eps, weight_decay=weight_decay))

    def _begin_step(self, p, state, group):
        if "step" not in state:
            state["step"] = 0
            state["exp_avg"] = np.zeros_like(p)
            state["exp_avg_sq"] = np.zeros_like(p)
        state["step"] += 1

    def _update_fused(self, kernel, p, g, state, group):
        b1, b2 = group["betas"]
        t = state["step"]
        kernel(
            p,
            g,
            state["exp_avg"],
            state["exp_avg_sq"],
            group["lr"],
            b1,
            b2,
            group["eps"],
            group["weight_decay"],
            self.decoupled,
            1 - b1**t,
            1 - b2**t,
        )

    def _update_generic(self, p, g, state, group):
        b1, b2 = group["betas"]
        t, lr, wd = state["step"], group["lr"], group["weight_decay"]
        if self.decoupled:
            p *= 1 - lr * wd
        elif wd:
            g = g + wd * p
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m *= b1
        m += (1 - b1) * g
        v *= b2
        v += (1 - b2) * g * g
        denom = np.sqrt(v) / math.sqrt(1 - b2**t) + group["eps"]
        p -= (lr / (1 - b1**t)) * m / denom


class AdamW(Adam):
    """Adam with decoupled weight decay: ``p *= 1 - lr wd`` before the Adam step."""

    decoupled = True

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        super().__init__(params, lr, betas, eps, weight_decay)


class RMSprop(Optimizer):
    """RMSprop (optionally centered, with momentum).

    Update: ``s = alpha s + (1-alpha) g^2``; ``avg = sqrt(s - gavg^2) + eps`` (centered) or
    ``sqrt(s) + eps``; ``p -= lr g / avg`` (or through a momentum buffer).
    """

    kernel = "rmsprop_update"

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
    ) -> None:
        super().__init__(
            params,
            dict(
                lr=lr,
                alpha=alpha,
                eps=eps,
                weight_decay=weight_decay,
                momentum=momentum,
                centered=centered,
            ),
        )

    def _begin_step(self, p, state, group):
        if "square_avg" not in state:
            state["step"] = 0
            state["square_avg"] = np.zeros_like(p)
            if group["momentum"] > 0:
                state["momentum_buffer"] = np.zeros_like(p)
            if group["centered"]:
                state["grad_avg"] = np.zeros_like(p)
        state["step"] += 1

    def _update_fused(self, kernel, p, g, state, group):
        kernel(
            p,
            g,
            state["square_avg"],
            state.get("momentum_buffer", p),
            state.get("grad_avg", p),
            group["lr"],
            group["alpha"],
            group["eps"],
            group["weight_decay"],
            group["momentum"],
            group["centered"],
        )

    def _update_generic(self, p, g, state, group):
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p
        a = group["alpha"]
        sq = state["square_avg"]
        sq *= a
        sq += (1 - a) * g * g
        if group["centered"]:
            ga = state["grad_avg"]
            ga *= a
            ga += (1 - a) * g
            avg = np.sqrt(sq - ga * ga) + group["eps"]
        else:
            avg = np.sqrt(sq) + group["eps"]
        if group["momentum"] > 0:
            buf = state["momentum_buffer"]
            buf *= group["momentum"]
            buf += g / avg
            p -= group["lr"] * buf
        else:
            p -= group["lr"] * g / avg


class Adagrad(Optimizer):
    """Adagrad: ``sum += g^2``; ``p -= lr / (1 + (t-1) lr_decay) * g / (sqrt(sum) + eps)``."""

    kernel = "adagrad_update"

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
    ) -> None:
        super().__init__(
            params,
            dict(
                lr=lr,
                lr_decay=lr_decay,
                weight_decay=weight_decay,
                initial_accumulator_value=initial_accumulator_value,
                eps=eps,
            ),
        )

    def _begin_step(self, p, state, group):
        if "sum" not in state:
            state["step"] = 0
            state["sum"] = np.full_like(p, group["initial_accumulator_value"])
        state["step"] += 1

    def _clr(self, state, group):
        return group["lr"] / (1 + (state["step"] - 1) * group["lr_decay"])

    def _update_fused(self, kernel, p, g, state, group):
        kernel(p, g, state["sum"], self._clr(state, group), group["eps"], group["weight_decay"])

    def _update_generic(self, p, g, state, group):
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p
        s = state["sum"]
        s += g * g
        p -= self._clr(state, group) * g / (np.sqrt(s) + group["eps"])
