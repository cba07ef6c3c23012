"""Learning-rate schedules: StepLR, CosineAnnealingLR, LambdaLR, OneCycleLR.

Call ``scheduler.step()`` once per epoch (or per batch for OneCycleLR) after
``optimizer.step()``; each group's ``"lr"`` is set from its initial value.
"""

from __future__ import annotations

import math

from ferro.errors import ArgumentError


class LRScheduler:
    """Base: keeps each group's initial lr and the step count ``last_epoch``."""

    def __init__(self, optimizer, last_epoch: int = -1) -> None:
        self.optimizer = optimizer
        for g in optimizer.param_groups:
            g.setdefault("initial_lr", g["lr"])
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self.step()

    def get_lr(self) -> list[float]:
        raise NotImplementedError

    def step(self) -> None:
        self.last_epoch += 1
        for g, lr in zip(self.optimizer.param_groups, self.get_lr(), strict=True):
            g["lr"] = lr
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def get_last_lr(self) -> list[float]:
        """The learning rates set by the last ``step``."""
        return list(self._last_lr)

    def state_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambda")}

    def load_state_dict(self, state: dict) -> None:
        self.__dict__.update(state)


class StepLR(LRScheduler):
    """``lr = initial * gamma ** (epoch // step_size)``."""

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [b * self.gamma ** (self.last_epoch // self.step_size) for b in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """``lr = eta_min + (initial - eta_min) (1 + cos(pi t / T_max)) / 2``."""

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):  # noqa: N803
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        c = (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
        return [self.eta_min + (b - self.eta_min) * c for b in self.base_lrs]


class LambdaLR(LRScheduler):
    """``lr = initial * lr_lambda(epoch)`` (one function, or one per group)."""

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1):
        n = len(optimizer.param_groups)
        many = isinstance(lr_lambda, (list, tuple))
        self.lr_lambda = list(lr_lambda) if many else [lr_lambda] * n
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [b * f(self.last_epoch) for b, f in zip(self.base_lrs, self.lr_lambda, strict=True)]


class OneCycleLR(LRScheduler):
    """The 1cycle policy (learning rate only): warm up from ``max_lr / div_factor`` to
    ``max_lr`` over ``pct_start`` of ``total_steps``, then anneal (cosine or linear) to
    ``max_lr / (div_factor * final_div_factor)``. Step it once per batch."""

    def __init__(
        self,
        optimizer,
        max_lr,
        total_steps: int,
        pct_start: float = 0.3,
        anneal_strategy: str = "cos",
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        last_epoch: int = -1,
    ):
        n = len(optimizer.param_groups)
        self.max_lrs = list(max_lr) if isinstance(max_lr, (list, tuple)) else [max_lr] * n
        if anneal_strategy not in ("cos", "linear"):
            raise ArgumentError("OneCycleLR: anneal_strategy must be cos or linear")
        self.total_steps, self.pct_start, self.anneal = total_steps, pct_start, anneal_strategy
        self.div_factor, self.final_div_factor = div_factor, final_div_factor
        for g, m in zip(optimizer.param_groups, self.max_lrs, strict=True):
            g["initial_lr"] = m / div_factor
            g["lr"] = g["initial_lr"]
        super().__init__(optimizer, last_epoch)

    def _interp(self, start, end, pct):
        if self.anneal == "cos":
            return end + (start - end) / 2 * (1 + math.cos(math.pi * pct))
        return start + (end - start) * pct

    def get_lr(self):
        t = self.last_epoch
        if t > self.total_steps:
            raise ArgumentError(f"OneCycleLR: stepped {t} times, total_steps is {self.total_steps}")
        up = float(self.pct_start * self.total_steps) - 1
        out = []
        for m in self.max_lrs:
            lo = m / self.div_factor
            final = lo / self.final_div_factor
            if t <= up:
                out.append(self._interp(lo, m, t / up if up > 0 else 1.0))
            else:
                down = self.total_steps - 1 - up
                out.append(self._interp(m, final, (t - up) / down if down > 0 else 1.0))
        return out


__all__ = [
    "LRScheduler",
    "StepLR",
    "CosineAnnealingLR",
    "LambdaLR",
    "OneCycleLR",
]
