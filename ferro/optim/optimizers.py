"""SGD, Adam, AdamW, RMSprop, Adagrad, Adadelta, Adamax, NAdam, RAdam and LBFGS with PyTorch's
update rules."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from ferro._C.engine import bump_version
from ferro._C.tensor import TensorBase
from ferro.autograd.grad_mode import enable_grad
from ferro.backend import is_array as _is_array
from ferro.errors import (
    ArgumentError,
    ArgumentTypeError,
    DtypeError,
    NotSupportedError,
    ReadOnlyError,
    ShapeError,
)
from ferro.ops.device import device_of, move
from ferro.optim.optimizer import Optimizer, _read_only


def _refuse_differentiable(name: str, differentiable: bool, capturable: bool = False) -> None:
    """PyTorch's ``differentiable`` (autograd through the step) and ``capturable`` (CUDA
    graphs) have no ferro equivalent: refused, rather than silently ignored."""
    for flag, value in (("differentiable", differentiable), ("capturable", capturable)):
        if value:
            raise NotSupportedError(
                f"{name}: {flag}=True is not supported by ferro; its steps update the "
                "parameters' arrays in place, outside autograd"
            )


def _decayed_grad(p, g, group, decoupled: bool = False):
    """The gradient an update uses: negated under ``maximize``, plus ``weight_decay * p`` (L2),
    or with ``decoupled`` the parameter shrunk in place by ``lr * weight_decay`` instead."""
    if group.get("maximize"):
        g = -g
    wd = group["weight_decay"]
    if wd and decoupled:
        p *= 1 - group["lr"] * wd
    elif wd:
        g = g + wd * p
    return g


class SGD(Optimizer):
    """Stochastic gradient descent with momentum, dampening, Nesterov and weight decay.

    Update: ``d = g + wd p`` (``g`` negated first with ``maximize``); with momentum,
    ``buf = momentum buf + (1 - dampening) d`` (``d`` on the first step) and
    ``d = d + momentum buf`` (Nesterov) or ``buf``; ``p -= lr d``.

    ``foreach`` and ``fused`` are accepted for PyTorch's signature and change nothing: ferro
    always runs its fused kernel where the layout allows. ``differentiable=True`` raises
    NotSupportedError.
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
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        differentiable: bool = False,
        fused: bool | None = None,
    ) -> None:
        _refuse_differentiable("SGD", differentiable)
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
                maximize=maximize,
                foreach=foreach,
                differentiable=differentiable,
                fused=fused,
            ),
        )

    def _update_fused(self, kernel, p, g, state, group):
        if group["maximize"]:
            g = -g
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
        d = _decayed_grad(p, g, group)
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
    ``p -= lr / (1-b1^t) * m / (sqrt(v) / sqrt(1-b2^t) + eps)`` (``g`` negated first with
    ``maximize``); with ``amsgrad`` the running maximum of ``v`` takes its place there.
    ``foreach`` and ``fused`` are accepted for PyTorch's signature and change nothing;
    ``differentiable`` or ``capturable`` raise NotSupportedError.
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
        amsgrad: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
    ) -> None:
        name = type(self).__name__
        _refuse_differentiable(name, differentiable, capturable)
        b1, b2 = betas
        if not (0 <= b1 < 1 and 0 <= b2 < 1):
            raise ArgumentError(f"{name}: betas must be in [0, 1), got {betas}")
        defaults = dict(lr=lr, betas=(b1, b2), eps=eps, weight_decay=weight_decay)
        defaults.update(amsgrad=amsgrad, maximize=maximize, foreach=foreach, fused=fused)
        super().__init__(params, defaults)

    def _begin_step(self, p, state, group):
        if "step" not in state:
            state["step"] = 0
            state["exp_avg"] = np.zeros_like(p)
            state["exp_avg_sq"] = np.zeros_like(p)
        if group.get("amsgrad") and "max_exp_avg_sq" not in state:
            state["max_exp_avg_sq"] = np.zeros_like(p)
        state["step"] += 1

    def _update_fused(self, kernel, p, g, state, group):
        if group.get("amsgrad"):  # the kernel keeps no running maximum
            return self._update_generic(p, g, state, group)
        if group.get("maximize"):
            g = -g
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
        t, lr = state["step"], group["lr"]
        g = _decayed_grad(p, g, group, self.decoupled)
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m *= b1
        m += (1 - b1) * g
        v *= b2
        v += (1 - b2) * g * g
        if group.get("amsgrad"):
            v = np.maximum(state["max_exp_avg_sq"], v, out=state["max_exp_avg_sq"])
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
        amsgrad: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
    ) -> None:
        # The keywords spelled out: nanoGPT looks for "fused" in inspect.signature(AdamW).
        super().__init__(
            params,
            lr,
            betas,
            eps,
            weight_decay,
            amsgrad,
            foreach=foreach,
            maximize=maximize,
            capturable=capturable,
            differentiable=differentiable,
            fused=fused,
        )


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


def _lerp_(a, b, weight: float) -> None:
    """``a += weight * (b - a)`` in place, by PyTorch's ``lerp_`` formulas (exact at either
    end, so the moving averages match it to the last bit)."""
    if weight < 0.5:
        a += weight * (b - a)
    else:
        a[...] = b - (b - a) * (1 - weight)


def _check_values(name: str, group: dict, **ranges) -> None:
    """Refuse hyper-parameters outside their ranges, as PyTorch's constructors do:
    ``ranges`` maps a key to ``(low, high, high_included)``."""
    for key, (low, high, closed) in ranges.items():
        values = group[key] if key == "betas" else (group[key],)
        for i, v in enumerate(values):
            if not (low <= v and (v <= high if closed else v < high)):
                what = f"betas[{i}]" if key == "betas" else key
                bound = f"[{low}, {high}{']' if closed else ')'}"
                raise ArgumentError(f"{name}: invalid {what} {v!r}; expected a value in {bound}")


_INF = math.inf


class Adadelta(Optimizer):
    """Adadelta (Zeiler, 2012), as PyTorch's.

    Update (``g`` negated first with ``maximize``, then ``g += wd p``):
    ``v = rho v + (1 - rho) g^2``, ``delta = sqrt(u + eps) / sqrt(v + eps) * g``,
    ``u = rho u + (1 - rho) delta^2``, ``p -= lr delta``.

    Example:
        >>> w = ferro.ones(2, requires_grad=True); w.grad = ferro.ones(2)
        >>> ferro.optim.Adadelta([w]).step(); w
        tensor([0.9968, 0.9968], requires_grad=True)
    """

    def __init__(
        self,
        params,
        lr: float = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        foreach: bool | None = None,
        *,
        capturable: bool = False,
        maximize: bool = False,
        differentiable: bool = False,
    ) -> None:
        _refuse_differentiable("Adadelta", differentiable, capturable)
        super().__init__(
            params,
            dict(
                lr=lr,
                rho=rho,
                eps=eps,
                weight_decay=weight_decay,
                maximize=maximize,
                capturable=capturable,
                foreach=foreach,
                differentiable=differentiable,
            ),
        )

    def _check(self, group):
        super()._check(group)
        _check_values(
            "Adadelta",
            group,
            rho=(0.0, 1.0, True),
            eps=(0.0, _INF, True),
            weight_decay=(0.0, _INF, True),
        )

    def _begin_step(self, p, state, group):
        if "step" not in state:
            state["step"] = 0
            state["square_avg"] = np.zeros_like(p)
            state["acc_delta"] = np.zeros_like(p)
        state["step"] += 1

    def _update_generic(self, p, g, state, group):
        g = _decayed_grad(p, g, group)
        rho, eps = group["rho"], group["eps"]
        v, u = state["square_avg"], state["acc_delta"]
        v *= rho
        v += (1 - rho) * g * g
        delta = np.sqrt(u + eps) / np.sqrt(v + eps) * g
        u *= rho
        u += (1 - rho) * delta * delta
        p -= group["lr"] * delta


class Adamax(Optimizer):
    """Adamax, Adam's infinity-norm variant, as PyTorch's.

    Update (``g`` negated first with ``maximize``, then ``g += wd p``):
    ``m = b1 m + (1 - b1) g``, ``u = max(b2 u, |g| + eps)``, ``p -= lr / (1 - b1^t) * m / u``.
    """

    def __init__(
        self,
        params,
        lr: float = 2e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        foreach: bool | None = None,
        *,
        maximize: bool = False,
        differentiable: bool = False,
        capturable: bool = False,
    ) -> None:
        _refuse_differentiable("Adamax", differentiable, capturable)
        super().__init__(
            params,
            dict(
                lr=lr,
                betas=tuple(betas),
                eps=eps,
                weight_decay=weight_decay,
                foreach=foreach,
                maximize=maximize,
                differentiable=differentiable,
                capturable=capturable,
            ),
        )

    def _check(self, group):
        super()._check(group)
        _check_values(
            "Adamax",
            group,
            betas=(0.0, 1.0, False),
            eps=(0.0, _INF, True),
            weight_decay=(0.0, _INF, True),
        )

    def _begin_step(self, p, state, group):
        if "step" not in state:
            state["step"] = 0
            state["exp_avg"] = np.zeros_like(p)
            state["exp_inf"] = np.zeros_like(p)
        state["step"] += 1

    def _update_generic(self, p, g, state, group):
        g = _decayed_grad(p, g, group)
        b1, b2 = group["betas"]
        m, u = state["exp_avg"], state["exp_inf"]
        _lerp_(m, g, 1 - b1)
        u *= b2
        np.maximum(u, np.abs(g) + group["eps"], out=u)
        p -= (group["lr"] / (1 - b1 ** state["step"])) * (m / u)


class NAdam(Optimizer):
    """Adam with Nesterov momentum (Dozat, 2016), as PyTorch's, with its momentum decay
    schedule ``mu_t = b1 (1 - 0.96^(t momentum_decay) / 2)``; ``decoupled_weight_decay=True``
    decays the parameter as AdamW does (PyTorch's NAdamW).

    Update: ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g^2``,
    ``d = sqrt(v / (1 - b2^t)) + eps``,
    ``p -= lr (1 - mu_t) / (1 - prod mu) g / d + lr mu_{t+1} / (1 - prod mu mu_{t+1}) m / d``.
    """

    def __init__(
        self,
        params,
        lr: float = 2e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum_decay: float = 4e-3,
        decoupled_weight_decay: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
    ) -> None:
        _refuse_differentiable("NAdam", differentiable, capturable)
        super().__init__(
            params,
            dict(
                lr=lr,
                betas=tuple(betas),
                eps=eps,
                weight_decay=weight_decay,
                momentum_decay=momentum_decay,
                decoupled_weight_decay=decoupled_weight_decay,
                maximize=maximize,
                foreach=foreach,
                capturable=capturable,
                differentiable=differentiable,
            ),
        )

    def _check(self, group):
        super()._check(group)
        _check_values(
            "NAdam",
            group,
            betas=(0.0, 1.0, False),
            eps=(0.0, _INF, True),
            weight_decay=(0.0, _INF, True),
            momentum_decay=(0.0, _INF, True),
        )

    def _begin_step(self, p, state, group):
        if "step" not in state:
            state["step"] = 0
            state["mu_product"] = 1.0
            state["exp_avg"] = np.zeros_like(p)
            state["exp_avg_sq"] = np.zeros_like(p)
        state["step"] += 1

    def _update_generic(self, p, g, state, group):
        g = _decayed_grad(p, g, group, group["decoupled_weight_decay"])
        lr = group["lr"]
        b1, b2 = group["betas"]
        t, decay = state["step"], group["momentum_decay"]
        mu = b1 * (1.0 - 0.5 * 0.96 ** (t * decay))
        mu_next = b1 * (1.0 - 0.5 * 0.96 ** ((t + 1) * decay))
        state["mu_product"] *= mu
        mu_product = state["mu_product"]
        m, v = state["exp_avg"], state["exp_avg_sq"]
        _lerp_(m, g, 1 - b1)
        v *= b2
        v += (1 - b2) * g * g
        denom = np.sqrt(v / (1 - b2**t)) + group["eps"]
        p += (-lr * (1.0 - mu) / (1.0 - mu_product)) * (g / denom)
        p += (-lr * mu_next / (1.0 - mu_product * mu_next)) * (m / denom)


class RAdam(Optimizer):
    """Rectified Adam (Liu et al., 2019), as PyTorch's; ``decoupled_weight_decay=True`` decays
    the parameter as AdamW does.

    Update: Adam's moments; with ``rho_inf = 2 / (1 - b2) - 1`` and
    ``rho_t = rho_inf - 2 t b2^t / (1 - b2^t)``, while ``rho_t <= 5`` the step is
    ``p -= lr m / (1 - b1^t)`` (momentum SGD); after, Adam's step scaled by the rectification
    ``sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t))``.
    """

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        decoupled_weight_decay: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
    ) -> None:
        _refuse_differentiable("RAdam", differentiable, capturable)
        super().__init__(
            params,
            dict(
                lr=lr,
                betas=tuple(betas),
                eps=eps,
                weight_decay=weight_decay,
                maximize=maximize,
                foreach=foreach,
                capturable=capturable,
                decoupled_weight_decay=decoupled_weight_decay,
                differentiable=differentiable,
            ),
        )

    def _check(self, group):
        super()._check(group)
        _check_values(
            "RAdam",
            group,
            betas=(0.0, 1.0, False),
            eps=(0.0, _INF, True),
            weight_decay=(0.0, _INF, True),
        )

    def _begin_step(self, p, state, group):
        if "step" not in state:
            state["step"] = 0
            state["exp_avg"] = np.zeros_like(p)
            state["exp_avg_sq"] = np.zeros_like(p)
        state["step"] += 1

    def _update_generic(self, p, g, state, group):
        g = _decayed_grad(p, g, group, group["decoupled_weight_decay"])
        lr = group["lr"]
        b1, b2 = group["betas"]
        t = state["step"]
        m, v = state["exp_avg"], state["exp_avg_sq"]
        _lerp_(m, g, 1 - b1)
        v *= b2
        v += (1 - b2) * g * g
        bc2 = 1 - b2**t
        m_hat = m / (1 - b1**t)
        rho_inf = 2 / (1 - b2) - 1
        rho_t = rho_inf - 2 * t * (b2**t) / bc2
        if rho_t > 5.0:
            rect = (
                (rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)
            ) ** 0.5
            p -= m_hat * lr * (bc2**0.5 / (np.sqrt(v) + group["eps"])) * rect
        else:
            p -= m_hat * lr


def _cubic_interpolate(x1, f1, g1, x2, f2, g2, bounds=None) -> float:
    """The minimizer of the cubic through two points with their values and slopes, clamped to
    ``bounds`` (the midpoint when the cubic has none); PyTorch's, from minFunc's polyinterp."""
    lo, hi = bounds if bounds is not None else (min(x1, x2), max(x1, x2))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1**2 - g1 * g2
    if d2_square < 0:
        return (lo + hi) / 2.0
    d2 = math.sqrt(d2_square)
    if x1 <= x2:
        min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else:
        min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
    return min(max(min_pos, lo), hi)


def _dot(a, b) -> float:
    return float((a * b).sum())


def _strong_wolfe(obj_func, x, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9, max_ls=25):
    """A line search along ``d`` for a step ``t`` satisfying the strong Wolfe conditions
    (bracketing, then zooming by cubic interpolation), step for step as PyTorch's
    ``_strong_wolfe`` (from minFunc's lswolfe). Returns ``(f, g, t, evaluations)``."""
    d_norm = float(abs(d).max())
    f_new, g_new = obj_func(x, t, d)
    evals = 1
    gtd_new = _dot(g_new, d)
    t_prev, f_prev, g_prev, gtd_prev = 0.0, f, g, gtd
    done = False
    ls_iter = 0
    while ls_iter < max_ls:
        if f_new > (f + c1 * t * gtd) or (ls_iter > 1 and f_new >= f_prev):
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new], [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bracket_f, bracket_g = [t], [f_new], [g_new]
            done = True
            break
        if gtd_new >= 0:
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new], [gtd_prev, gtd_new]
            break
        # extrapolate: the cubic's minimizer, at least 1% and at most 10x further
        min_step = t + 0.01 * (t - t_prev)
        max_step = t * 10
        tmp = t
        t = _cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, (min_step, max_step))
        t_prev, f_prev, g_prev, gtd_prev = tmp, f_new, g_new, gtd_new
        f_new, g_new = obj_func(x, t, d)
        evals += 1
        gtd_new = _dot(g_new, d)
        ls_iter += 1
    if ls_iter == max_ls:
        bracket, bracket_f, bracket_g = [0.0, t], [f, f_new], [g, g_new]

    # zoom: shrink the bracket until a point satisfies the conditions
    insuf_progress = False
    low, high = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(
            bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1]
        )
        # a trial too close to an end of the bracket moves 10% of its width inside, when the
        # last trial was already too close or this one is at (or past) the end
        eps = 0.1 * (max(bracket) - min(bracket))
        if min(max(bracket) - t, t - min(bracket)) < eps:
            if insuf_progress or t >= max(bracket) or t <= min(bracket):
                if abs(t - max(bracket)) < abs(t - min(bracket)):
                    t = max(bracket) - eps
                else:
                    t = min(bracket) + eps
                insuf_progress = False
            else:
                insuf_progress = True
        else:
            insuf_progress = False
        f_new, g_new = obj_func(x, t, d)
        evals += 1
        gtd_new = _dot(g_new, d)
        ls_iter += 1
        if f_new > (f + c1 * t * gtd) or f_new >= bracket_f[low]:
            bracket[high], bracket_f[high] = t, f_new
            bracket_g[high], bracket_gtd[high] = g_new, gtd_new
            low, high = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high] - bracket[low]) >= 0:
                bracket[high], bracket_f[high] = bracket[low], bracket_f[low]
                bracket_g[high], bracket_gtd[high] = bracket_g[low], bracket_gtd[low]
            bracket[low], bracket_f[low] = t, f_new
            bracket_g[low], bracket_gtd[low] = g_new, gtd_new
    return bracket_f[low], bracket_g[low], bracket[low], evals


class LBFGS(Optimizer):
    """Limited-memory BFGS, as PyTorch's (itself after minFunc): each ``step(closure)`` runs up
    to ``max_iter`` iterations, re-evaluating the loss through ``closure`` (which must zero the
    gradients, compute the loss, call ``backward`` and return it).

    Args:
        params: the parameters (one group only: LBFGS works on their concatenation).
        lr: the step length (the first iteration scales it by ``min(1, 1 / sum|g|)``).
        max_iter: iterations per ``step``.
        max_eval: loss evaluations per ``step`` (default ``max_iter * 5 // 4``).
        tolerance_grad: stop when ``max|g| <= tolerance_grad``.
        tolerance_change: stop when the step or the loss changes less than this.
        history_size: how many past updates approximate the inverse Hessian.
        line_search_fn: None (fixed step ``lr``) or ``"strong_wolfe"``.

    The state (history, direction, step count) lives under the first parameter, as in
    PyTorch, and round-trips through ``state_dict``/``load_state_dict``.

    Example:
        >>> w = ferro.zeros(2, requires_grad=True)
        >>> opt = ferro.optim.LBFGS([w], line_search_fn="strong_wolfe")
        >>> def closure():
        ...     opt.zero_grad()
        ...     loss = ((w - ferro.tensor([1.0, -2.0])) ** 2).sum()
        ...     loss.backward()
        ...     return loss
        >>> _ = opt.step(closure); [round(v, 4) for v in w.tolist()]
        [1.0, -2.0]
    """

    def __init__(
        self,
        params,
        lr: float = 1,
        max_iter: int = 20,
        max_eval: int | None = None,
        tolerance_grad: float = 1e-7,
        tolerance_change: float = 1e-9,
        history_size: int = 100,
        line_search_fn: str | None = None,
    ) -> None:
        if line_search_fn not in (None, "strong_wolfe"):
            raise ArgumentError(
                f"LBFGS: line_search_fn must be None or 'strong_wolfe', got {line_search_fn!r}"
            )
        super().__init__(
            params,
            dict(
                lr=lr,
                max_iter=max_iter,
                max_eval=max_iter * 5 // 4 if max_eval is None else max_eval,
                tolerance_grad=tolerance_grad,
                tolerance_change=tolerance_change,
                history_size=history_size,
                line_search_fn=line_search_fn,
            ),
        )
        self._params = self.param_groups[0]["params"]

    def add_param_group(self, group: dict) -> None:
        """LBFGS takes one parameter group: a second raises ArgumentError (PyTorch's LBFGS
        cannot step with two either)."""
        if self.param_groups:
            raise ArgumentError(
                "LBFGS: does not support parameter groups (per-parameter options); put every "
                "parameter in one group"
            )
        super().add_param_group(group)

    def _check(self, group):
        super()._check(group)
        for key in ("max_iter", "max_eval", "history_size"):
            v = group[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ArgumentError(f"LBFGS: {key} must be a positive int, got {v!r}")

    def _numel(self) -> int:
        return sum(int(p._data.size) for p in self._params)

    def _gather_flat_grad(self):
        xp = np if isinstance(self._params[0]._data, np.ndarray) else _cupy()
        views = []
        for i, p in enumerate(self._params):
            if p.grad is None:
                views.append(xp.zeros(p._data.size, p.dtype))
                continue
            g = p.grad._data
            if g.shape != p._data.shape:
                raise ShapeError(
                    f"LBFGS.step: parameter {i} (shape {tuple(p._data.shape)}) has a gradient "
                    f"of shape {tuple(g.shape)}"
                )
            views.append(g.reshape(-1))
        return xp.concatenate(views)

    def _add_grad(self, step: float, direction) -> None:
        offset = 0
        for p in self._params:
            n = int(p._data.size)
            data = p._data
            data += step * direction[offset : offset + n].reshape(data.shape)
            bump_version(p)  # saved copies of p in a live graph are now stale
            offset += n

    def _set_params(self, arrays) -> None:
        for p, a in zip(self._params, arrays, strict=True):
            p._data[...] = a
            bump_version(p)

    def _refuse_read_only(self) -> None:
        for i, p in enumerate(self._params):
            if _read_only(p._data):
                raise ReadOnlyError(
                    f"LBFGS.step: parameter {i} ({p.dtype}, shape {tuple(p._data.shape)}) is "
                    "read-only (a read-only memory map or np.frombuffer data, for example), and "
                    "the step writes it in place; make the parameter from a writeable copy"
                )

    def step(self, closure):
        """Run up to ``max_iter`` L-BFGS iterations; returns the loss ``closure`` returned first.

        Raises:
            ArgumentTypeError: ``closure`` is not callable.
            ReadOnlyError: a parameter holds read-only memory (checked before the closure runs).
        """
        if not callable(closure):
            raise ArgumentTypeError(
                "LBFGS.step: needs a closure that zeroes the gradients, computes the loss, "
                f"calls backward and returns the loss; got {type(closure).__name__}"
            )
        self._refuse_read_only()

        def evaluate() -> float:
            with enable_grad():
                return closure()

        group = self.param_groups[0]
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        history_size = group["history_size"]
        state = self.state.setdefault(self._params[0], {})
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)

        orig_loss = evaluate()
        loss = float(orig_loss)
        current_evals = 1
        state["func_evals"] += 1
        flat_grad = self._gather_flat_grad()
        if float(abs(flat_grad).max()) <= tolerance_grad:
            return orig_loss

        d, t = state.get("d"), state.get("t")
        old_dirs, old_stps, ro = state.get("old_dirs"), state.get("old_stps"), state.get("ro")
        h_diag = state.get("H_diag")
        prev_flat_grad, prev_loss = state.get("prev_flat_grad"), state.get("prev_loss")

        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1

            # the direction: steepest descent first, then the two-loop recursion over the
            # history (a pair is kept only when its curvature y.s is positive)
            if state["n_iter"] == 1:
                d = -flat_grad
                old_dirs, old_stps, ro = [], [], []
                h_diag = 1.0
            else:
                y = flat_grad - prev_flat_grad
                s = d * t
                ys = _dot(y, s)
                if ys > 1e-10:
                    if len(old_dirs) == history_size:
                        old_dirs.pop(0)
                        old_stps.pop(0)
                        ro.pop(0)
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(1.0 / ys)
                    h_diag = ys / _dot(y, y)
                num_old = len(old_dirs)
                al = state.setdefault("al", [None] * history_size)
                q = -flat_grad
                for i in range(num_old - 1, -1, -1):
                    al[i] = _dot(old_stps[i], q) * ro[i]
                    q -= al[i] * old_dirs[i]
                d = r = q * h_diag
                for i in range(num_old):
                    be_i = _dot(old_dirs[i], r) * ro[i]
                    r += (al[i] - be_i) * old_stps[i]

            prev_flat_grad = flat_grad.copy()
            prev_loss = loss

            # the step length
            if state["n_iter"] == 1:
                t = min(1.0, 1.0 / float(abs(flat_grad).sum())) * lr
            else:
                t = lr
            gtd = _dot(flat_grad, d)
            if gtd > -tolerance_change:  # not a descent direction any more
                break

            ls_func_evals = 0
            if group["line_search_fn"] == "strong_wolfe":
                x_init = [p._data.copy() for p in self._params]

                def obj_func(x, step, direction):
                    self._add_grad(step, direction)
                    value = float(evaluate())
                    grad = self._gather_flat_grad()
                    self._set_params(x)
                    return value, grad

                loss, flat_grad, t, ls_func_evals = _strong_wolfe(
                    obj_func, x_init, t, d, loss, flat_grad, gtd, max_ls=max_eval - current_evals
                )
                self._add_grad(t, d)
                opt_cond = float(abs(flat_grad).max()) <= tolerance_grad
            else:
                self._add_grad(t, d)
                opt_cond = False
                if n_iter != max_iter:
                    # the last iteration's loss is not needed: its evaluation is skipped
                    loss = float(evaluate())
                    flat_grad = self._gather_flat_grad()
                    opt_cond = float(abs(flat_grad).max()) <= tolerance_grad
                    ls_func_evals = 1
            current_evals += ls_func_evals
            state["func_evals"] += ls_func_evals

            if n_iter == max_iter or current_evals >= max_eval or opt_cond:
                break
            if float(abs(d * t).max()) <= tolerance_change:
                break
            if abs(loss - prev_loss) < tolerance_change:
                break

        state.update(
            d=d,
            t=t,
            old_dirs=old_dirs,
            old_stps=old_stps,
            ro=ro,
            H_diag=h_diag,
            prev_flat_grad=prev_flat_grad,
            prev_loss=prev_loss,
        )
        return orig_loss

    def load_state_dict(self, state_dict) -> None:
        """As :meth:`Optimizer.load_state_dict`; the flat vectors LBFGS keeps (``d``,
        ``prev_flat_grad``: one entry per element of all parameters together) are checked
        against the total size instead of the first parameter's shape."""
        flat = {}
        saved = state_dict.get("state") if isinstance(state_dict, Mapping) else None
        if isinstance(saved, Mapping):
            saved = {i: dict(e) if isinstance(e, Mapping) else e for i, e in saved.items()}
            for i, entry in saved.items():
                for key in ("d", "prev_flat_grad"):
                    if isinstance(entry, dict) and entry.get(key) is not None:
                        flat[(i, key)] = self._flat_state(key, entry.pop(key))
            state_dict = {**state_dict, "state": saved}
        super().load_state_dict(state_dict)
        for (i, key), value in flat.items():
            self.state[self._params[i]][key] = value

    def _flat_state(self, key: str, value):
        where = "LBFGS.load_state_dict"
        first = self._params[0]
        if isinstance(value, TensorBase):
            value = value._data
        if not _is_array(value):
            raise ArgumentTypeError(f"{where}: state {key!r} must be an array, got {value!r}")
        if tuple(value.shape) != (self._numel(),):
            raise ShapeError(
                f"{where}: state {key!r} has shape {tuple(value.shape)}, expected "
                f"({self._numel()},) (all parameters' elements)"
            )
        if value.dtype.kind != "f":
            raise DtypeError(f"{where}: state {key!r} has dtype {value.dtype}, expected floats")
        moved = move(value, device_of(first._data))
        return moved.astype(first.dtype, copy=moved is value)


def _cupy():
    import cupy

    return cupy
