"""Learning-rate schedules, as PyTorch's ``torch.optim.lr_scheduler`` (same formulas, evaluated
in the same order, so the learning rates are the same floats).

Call ``scheduler.step()`` once per epoch (per batch for OneCycleLR and
CosineAnnealingWarmRestarts stepped with fractional epochs) after ``optimizer.step()``;
``ReduceLROnPlateau.step(metric)`` takes the monitored value. Like PyTorch's, most schedules
are *chainable*: each step multiplies the group's current ``"lr"``, so several schedulers can
drive one optimizer; ``step(epoch)`` (deprecated in PyTorch) uses the closed form instead.
Every scheduler has ``get_last_lr()``, ``state_dict()`` and ``load_state_dict()`` (restore the
optimizer's state dict too: the groups' ``"lr"`` live there).
"""

from __future__ import annotations

import math
import types
import warnings
from bisect import bisect_right
from collections import Counter

from ferro.errors import ArgumentError, ArgumentTypeError
from ferro.optim.optimizer import Optimizer

_EPOCH_DEPRECATED = (
    "passing an epoch to scheduler.step() is deprecated in PyTorch: the closed form is used "
    "instead of the chainable one, where there is one; call scheduler.step() without it"
)


def _check_optimizer(name: str, optimizer) -> None:
    if not isinstance(optimizer, Optimizer):
        raise ArgumentTypeError(
            f"{name}: expected a ferro.optim.Optimizer, got {type(optimizer).__name__}"
        )


def _per_group(name: str, optimizer, value) -> list:
    """One value per parameter group: ``value`` repeated, or a list of the right length."""
    n = len(optimizer.param_groups)
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ArgumentError(
                f"{name}: expected {n} values (one per parameter group), got {value}"
            )
        return list(value)
    return [value] * n


def _lrs(optimizer) -> list:
    return [g["lr"] for g in optimizer.param_groups]


class LRScheduler:
    """Base class: keeps each group's initial lr (``base_lrs``) and the step count
    ``last_epoch``; subclasses define ``get_lr`` (and optionally ``_get_closed_form_lr``).

    Args:
        optimizer: the optimizer whose groups' ``"lr"`` it sets.
        last_epoch: -1 to start; a later epoch only when resuming, which needs the groups'
            ``"initial_lr"`` (from the optimizer's loaded state dict).
    """

    _is_initial = False

    def __init__(self, optimizer, last_epoch: int = -1) -> None:
        name = type(self).__name__
        _check_optimizer(name, optimizer)
        self.optimizer = optimizer
        if last_epoch == -1:
            for g in optimizer.param_groups:
                g.setdefault("initial_lr", g["lr"])
        else:
            for i, g in enumerate(optimizer.param_groups):
                if "initial_lr" not in g:
                    raise ArgumentError(
                        f"{name}: param_groups[{i}] has no 'initial_lr', which resuming with "
                        f"last_epoch={last_epoch} needs; load the optimizer's state dict first, "
                        "or start with last_epoch=-1"
                    )
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._initial_step()

    def _initial_step(self) -> None:
        """Set the learning rates for epoch 0 (``last_epoch + 1``)."""
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_lr(self) -> list[float]:
        """The learning rates for ``last_epoch`` (called by :meth:`step`)."""
        raise NotImplementedError

    def step(self, epoch: int | None = None) -> None:
        """Advance one epoch (or jump to ``epoch``, deprecated) and set every group's lr."""
        self._step_count += 1
        if epoch is not None:
            warnings.warn(_EPOCH_DEPRECATED, UserWarning, stacklevel=2)
        self._update_lr(epoch)

    def _update_lr(self, epoch: int | None = None) -> None:
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            self.last_epoch = epoch
            closed = getattr(self, "_get_closed_form_lr", None)
            values = closed() if closed is not None else self.get_lr()
        for g, lr in zip(self.optimizer.param_groups, values, strict=True):
            g["lr"] = lr
        self._last_lr = _lrs(self.optimizer)

    def get_last_lr(self) -> list[float]:
        """The learning rates set by the last ``step``."""
        return list(self._last_lr)

    def state_dict(self) -> dict:
        """Every attribute but the optimizer."""
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore a :meth:`state_dict`."""
        self.__dict__.update(state_dict)


class _LambdaState:
    """State dicts of the schedulers that hold functions: a plain function is not saved (it
    stays the one given at construction); a callable object's ``__dict__`` is, as PyTorch does."""

    def state_dict(self) -> dict:
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}
        state["lr_lambdas"] = [
            None if isinstance(fn, types.FunctionType) else dict(fn.__dict__)
            for fn in self.lr_lambdas
        ]
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        state = dict(state_dict)
        lambdas = state.pop("lr_lambdas")
        self.__dict__.update(state)
        for fn, saved in zip(self.lr_lambdas, lambdas, strict=True):
            if saved is not None:
                fn.__dict__.update(saved)


def _lambdas(name: str, optimizer, lr_lambda) -> list:
    fns = _per_group(name, optimizer, lr_lambda)
    for fn in fns:
        if not callable(fn):
            raise ArgumentTypeError(f"{name}: lr_lambda must be callable, got {type(fn).__name__}")
    return fns


class LambdaLR(_LambdaState, LRScheduler):
    """``lr = initial_lr * lr_lambda(epoch)`` (one function, or one per group)."""

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1) -> None:
        self.lr_lambdas = _lambdas("LambdaLR", optimizer, lr_lambda)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [b * f(self.last_epoch) for f, b in zip(self.lr_lambdas, self.base_lrs, strict=True)]


class MultiplicativeLR(_LambdaState, LRScheduler):
    """``lr *= lr_lambda(epoch)`` at each step after the first."""

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1) -> None:
        self.lr_lambdas = _lambdas("MultiplicativeLR", optimizer, lr_lambda)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self._is_initial:
            return _lrs(self.optimizer)
        return [
            g["lr"] * f(self.last_epoch)
            for f, g in zip(self.lr_lambdas, self.optimizer.param_groups, strict=True)
        ]


class StepLR(LRScheduler):
    """``lr = initial_lr * gamma ** (epoch // step_size)``."""

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return _lrs(self.optimizer)
        return [g["lr"] * self.gamma for g in self.optimizer.param_groups]

    def _get_closed_form_lr(self):
        return [b * self.gamma ** (self.last_epoch // self.step_size) for b in self.base_lrs]


class MultiStepLR(LRScheduler):
    """``lr = initial_lr * gamma ** (number of milestones reached)`` (a milestone listed twice
    counts twice)."""

    def __init__(self, optimizer, milestones, gamma: float = 0.1, last_epoch: int = -1):
        self.milestones = Counter(milestones)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch not in self.milestones:
            return _lrs(self.optimizer)
        k = self.milestones[self.last_epoch]
        return [g["lr"] * self.gamma**k for g in self.optimizer.param_groups]

    def _get_closed_form_lr(self):
        milestones = sorted(self.milestones.elements())
        k = bisect_right(milestones, self.last_epoch)
        return [b * self.gamma**k for b in self.base_lrs]


class ConstantLR(LRScheduler):
    """``lr = initial_lr * factor`` for the first ``total_iters`` epochs, then ``initial_lr``."""

    def __init__(
        self, optimizer, factor: float = 1.0 / 3, total_iters: int = 5, last_epoch: int = -1
    ):
        if not 0 <= factor <= 1.0:
            raise ArgumentError(f"ConstantLR: factor must be in [0, 1], got {factor}")
        self.factor, self.total_iters = factor, total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0:
            return [g["lr"] * self.factor for g in self.optimizer.param_groups]
        if self.last_epoch != self.total_iters:
            return _lrs(self.optimizer)
        return [g["lr"] * (1.0 / self.factor) for g in self.optimizer.param_groups]

    def _get_closed_form_lr(self):
        done = self.last_epoch >= self.total_iters
        return [b * (self.factor + done * (1 - self.factor)) for b in self.base_lrs]


class LinearLR(LRScheduler):
    """The factor on ``initial_lr`` goes linearly from ``start_factor`` to ``end_factor`` over
    ``total_iters`` epochs, then stays (a warm-up, usually)."""

    def __init__(
        self,
        optimizer,
        start_factor: float = 1.0 / 3,
        end_factor: float = 1.0,
        total_iters: int = 5,
        last_epoch: int = -1,
    ):
        if not 0 < start_factor <= 1.0:
            raise ArgumentError(f"LinearLR: start_factor must be in (0, 1], got {start_factor}")
        if not 0 <= end_factor <= 1.0:
            raise ArgumentError(f"LinearLR: end_factor must be in [0, 1], got {end_factor}")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0:
            return [g["lr"] * self.start_factor for g in self.optimizer.param_groups]
        if self._is_initial or self.last_epoch > self.total_iters:
            return _lrs(self.optimizer)
        span = self.end_factor - self.start_factor
        ratio = 1.0 + span / (self.total_iters * self.start_factor + (self.last_epoch - 1) * span)
        return [g["lr"] * ratio for g in self.optimizer.param_groups]

    def _get_closed_form_lr(self):
        span = self.end_factor - self.start_factor
        done = min(self.total_iters, self.last_epoch)
        return [b * (self.start_factor + span * done / self.total_iters) for b in self.base_lrs]


class ExponentialLR(LRScheduler):
    """``lr = initial_lr * gamma ** epoch``."""

    def __init__(self, optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self._is_initial:
            return _lrs(self.optimizer)
        return [g["lr"] * self.gamma for g in self.optimizer.param_groups]

    def _get_closed_form_lr(self):
        return [b * self.gamma**self.last_epoch for b in self.base_lrs]


class PolynomialLR(LRScheduler):
    """``lr = initial_lr * (1 - min(epoch, total_iters) / total_iters) ** power``."""

    def __init__(self, optimizer, total_iters: int = 5, power: float = 1.0, last_epoch: int = -1):
        self.total_iters, self.power = total_iters, power
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self._is_initial or self.last_epoch > self.total_iters:
            return _lrs(self.optimizer)
        n, e = self.total_iters, self.last_epoch
        decay = ((1.0 - e / n) / (1.0 - (e - 1) / n)) ** self.power
        return [g["lr"] * decay for g in self.optimizer.param_groups]

    def _get_closed_form_lr(self):
        left = 1.0 - min(self.total_iters, self.last_epoch) / self.total_iters
        return [b * left**self.power for b in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """``lr = eta_min + (initial_lr - eta_min) (1 + cos(pi epoch / T_max)) / 2``, computed
    recursively as PyTorch does (so it continues past ``T_max`` as a cosine wave)."""

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):  # noqa: N803
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        e, period, lo = self.last_epoch, self.T_max, self.eta_min
        groups = self.optimizer.param_groups
        if self._is_initial:
            return _lrs(self.optimizer)
        if self._step_count == 1 and e > 0:  # resumed: no previous lr to continue from
            return [lo + (b - lo) * (1 + math.cos(e * math.pi / period)) / 2 for b in self.base_lrs]
        if (e - 1 - period) % (2 * period) == 0:  # at the bottom, where the ratio is 0 / 0
            return [
                g["lr"] + (b - lo) * (1 - math.cos(math.pi / period)) / 2
                for b, g in zip(self.base_lrs, groups, strict=True)
            ]
        ratio = (1 + math.cos(math.pi * e / period)) / (1 + math.cos(math.pi * (e - 1) / period))
        return [ratio * (g["lr"] - lo) + lo for g in groups]

    def _get_closed_form_lr(self):
        c = (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
        return [self.eta_min + (b - self.eta_min) * c for b in self.base_lrs]


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine annealing from ``initial_lr`` to ``eta_min`` over ``T_i`` epochs, restarting at
    ``initial_lr`` each time; the period starts at ``T_0`` and is multiplied by ``T_mult`` at
    each restart (SGDR). ``step(epoch)`` accepts fractional epochs (``epoch + i / iters``)."""

    def __init__(
        self,
        optimizer,
        T_0: int,  # noqa: N803
        T_mult: int = 1,  # noqa: N803
        eta_min: float = 0.0,
        last_epoch: int = -1,
    ):
        name = "CosineAnnealingWarmRestarts"
        if isinstance(T_0, bool) or not isinstance(T_0, int) or T_0 <= 0:
            raise ArgumentError(f"{name}: T_0 must be a positive int, got {T_0!r}")
        if isinstance(T_mult, bool) or not isinstance(T_mult, int) or T_mult < 1:
            raise ArgumentError(f"{name}: T_mult must be an int >= 1, got {T_mult!r}")
        if isinstance(eta_min, bool) or not isinstance(eta_min, (float, int)):
            raise ArgumentTypeError(f"{name}: eta_min must be a number, got {eta_min!r}")
        self.T_0, self.T_i, self.T_mult, self.eta_min = T_0, T_0, T_mult, eta_min
        self.T_cur = last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        c = 1 + math.cos(math.pi * self.T_cur / self.T_i)
        return [self.eta_min + (b - self.eta_min) * c / 2 for b in self.base_lrs]

    def step(self, epoch: float | None = None) -> None:
        """Advance one epoch, or go to ``epoch`` (fractional allowed)."""
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur += 1
            if self.T_cur >= self.T_i:
                self.T_cur %= self.T_i
                self.T_i *= self.T_mult
        else:
            if epoch < 0:
                raise ArgumentError(
                    f"CosineAnnealingWarmRestarts.step: epoch must be >= 0, got {epoch}"
                )
            if epoch >= self.T_0:
                if self.T_mult == 1:
                    self.T_cur = epoch % self.T_0
                else:
                    n = int(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1, self.T_mult))
                    self.T_cur = epoch - self.T_0 * (self.T_mult**n - 1) / (self.T_mult - 1)
                    self.T_i = self.T_0 * self.T_mult**n
            else:
                self.T_i = self.T_0
                self.T_cur = epoch
        self.last_epoch = math.floor(epoch)
        for g, lr in zip(self.optimizer.param_groups, self.get_lr(), strict=True):
            g["lr"] = lr
        self._last_lr = _lrs(self.optimizer)


class OneCycleLR(LRScheduler):
    """The 1cycle policy: warm up from ``max_lr / div_factor`` to ``max_lr`` over ``pct_start``
    of ``total_steps`` (or ``epochs * steps_per_epoch``), then anneal (cosine or linear) to
    ``max_lr / (div_factor * final_div_factor)``; ``three_phase`` comes back down to the start
    before the final anneal. With ``cycle_momentum`` the momentum (or Adam's beta1) moves
    inversely between ``max_momentum`` and ``base_momentum``. Step it once per batch."""

    def __init__(
        self,
        optimizer,
        max_lr,
        total_steps: int | None = None,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        pct_start: float = 0.3,
        anneal_strategy: str = "cos",
        cycle_momentum: bool = True,
        base_momentum=0.85,
        max_momentum=0.95,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        three_phase: bool = False,
        last_epoch: int = -1,
    ):
        name = "OneCycleLR"
        _check_optimizer(name, optimizer)
        self.optimizer = optimizer
        if total_steps is not None:
            if (
                isinstance(total_steps, bool)
                or not isinstance(total_steps, int)
                or total_steps <= 0
            ):
                raise ArgumentError(
                    f"{name}: total_steps must be a positive int, got {total_steps}"
                )
            self.total_steps = total_steps
        elif epochs is not None and steps_per_epoch is not None:
            for what, v in (("epochs", epochs), ("steps_per_epoch", steps_per_epoch)):
                if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                    raise ArgumentError(f"{name}: {what} must be a positive int, got {v}")
            self.total_steps = epochs * steps_per_epoch
        else:
            raise ArgumentError(f"{name}: give total_steps, or epochs and steps_per_epoch")
        if not isinstance(pct_start, float) or not 0 <= pct_start <= 1:
            raise ArgumentError(f"{name}: pct_start must be a float in [0, 1], got {pct_start!r}")
        if anneal_strategy not in ("cos", "linear"):
            raise ArgumentError(
                f"{name}: anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}"
            )
        self.anneal_strategy = anneal_strategy
        up = float(pct_start * self.total_steps) - 1
        # (last step, lr from, lr to, momentum from, momentum to): group keys
        if three_phase:
            down = float(2 * pct_start * self.total_steps) - 2
            self._phases = [
                (up, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                (down, "max_lr", "initial_lr", "base_momentum", "max_momentum"),
                (self.total_steps - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum"),
            ]
        else:
            self._phases = [
                (up, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                (self.total_steps - 1, "max_lr", "min_lr", "base_momentum", "max_momentum"),
            ]
        max_lrs = _per_group(f"{name}: max_lr", optimizer, max_lr)
        if last_epoch == -1:
            for g, m in zip(optimizer.param_groups, max_lrs, strict=True):
                g["initial_lr"] = m / div_factor
                g["max_lr"] = m
                g["min_lr"] = g["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ArgumentError(
                    f"{name}: cycle_momentum needs an optimizer with momentum or betas, got "
                    f"{type(optimizer).__name__} (pass cycle_momentum=False)"
                )
            self.use_beta1 = "betas" in optimizer.defaults
            highs = _per_group(f"{name}: max_momentum", optimizer, max_momentum)
            lows = _per_group(f"{name}: base_momentum", optimizer, base_momentum)
            if last_epoch == -1:
                for hi, lo, g in zip(highs, lows, optimizer.param_groups, strict=True):
                    self._set_momentum(g, hi)
                    g["max_momentum"], g["base_momentum"] = hi, lo
        super().__init__(optimizer, last_epoch)

    def _set_momentum(self, group: dict, value: float) -> None:
        if self.use_beta1:
            group["betas"] = (value, *group["betas"][1:])
        else:
            group["momentum"] = value

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self):
        t = self.last_epoch
        if t > self.total_steps:
            raise ArgumentError(
                f"OneCycleLR: stepped {t} times, but total_steps is {self.total_steps}"
            )
        lrs = []
        for g in self.optimizer.param_groups:
            start = 0.0
            for i, (end, lr0, lr1, m0, m1) in enumerate(self._phases):
                if t <= end or i == len(self._phases) - 1:
                    pct = (t - start) / (end - start)
                    lrs.append(self._anneal(g[lr0], g[lr1], pct))
                    if self.cycle_momentum:
                        self._set_momentum(g, self._anneal(g[m0], g[m1], pct))
                    break
                start = end
        return lrs


class _Composite(LRScheduler):
    """A scheduler made of others: its state dict holds theirs."""

    def state_dict(self) -> dict:
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        state = dict(state_dict)
        schedulers = state.pop("_schedulers")
        self.__dict__.update(state)
        for s, saved in zip(self._schedulers, schedulers, strict=True):
            s.load_state_dict(saved)


def _check_parts(name: str, optimizer, schedulers) -> None:
    if len(schedulers) < 1:
        raise ArgumentError(f"{name}: expects at least one scheduler")
    for i, s in enumerate(schedulers):
        if isinstance(s, ReduceLROnPlateau):
            raise ArgumentError(
                f"{name}: ReduceLROnPlateau (scheduler {i}) cannot be combined: its step needs "
                "the metric"
            )
        if getattr(s, "optimizer", None) is not optimizer:
            raise ArgumentError(
                f"{name}: scheduler {i} ({type(s).__name__}) drives another optimizer"
            )


class SequentialLR(_Composite):
    """Runs ``schedulers`` one after another, switching at the epochs in ``milestones`` (each
    new scheduler starts from its own epoch 0). A linear warm-up then a cosine decay:
    ``SequentialLR(opt, [LinearLR(opt, ...), CosineAnnealingLR(opt, ...)], milestones=[5])``."""

    def __init__(self, optimizer, schedulers, milestones, last_epoch: int = -1):
        name = "SequentialLR"
        _check_optimizer(name, optimizer)
        _check_parts(name, optimizer, schedulers)
        if len(milestones) != len(schedulers) - 1:
            raise ArgumentError(
                f"{name}: expects one milestone fewer than schedulers, got {len(schedulers)} "
                f"schedulers and {len(milestones)} milestones"
            )
        self._schedulers = list(schedulers)
        self._milestones = list(milestones)
        self.last_epoch = last_epoch + 1
        self.optimizer = optimizer
        # undo the steps the schedulers took when they were built, then start the first one
        for g in optimizer.param_groups:
            g["lr"] = g["initial_lr"]
        self._undo(self)
        idx = bisect_right(self._milestones, 0)
        self._schedulers[idx]._initial_step()
        self._last_lr = self._schedulers[idx].get_last_lr()

    def _undo(self, sched) -> None:
        if hasattr(sched, "_schedulers"):
            for s in sched._schedulers:
                self._undo(s)
        elif hasattr(sched, "last_epoch"):
            sched.last_epoch -= 1

    def step(self) -> None:
        """Advance one epoch in the scheduler whose turn it is (a new one starts at epoch 0)."""
        self.last_epoch += 1
        idx = bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            scheduler._update_lr(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()


class ChainedScheduler(_Composite):
    """Steps every scheduler in ``schedulers`` at each step (their factors multiply)."""

    def __init__(self, schedulers, optimizer=None):
        if len(schedulers) < 1:
            raise ArgumentError("ChainedScheduler: expects at least one scheduler")
        optimizer = optimizer or schedulers[0].optimizer
        _check_parts("ChainedScheduler", optimizer, schedulers)
        self._schedulers = list(schedulers)
        self.optimizer = optimizer
        self._last_lr = _lrs(optimizer)

    def step(self) -> None:
        """Step every scheduler, in order."""
        for s in self._schedulers:
            s.step()
        self._last_lr = _lrs(self.optimizer)


class ReduceLROnPlateau(LRScheduler):
    """Multiply the lr by ``factor`` when the metric passed to ``step(metric)`` has not
    improved for more than ``patience`` epochs, then wait ``cooldown`` epochs.

    Args:
        mode: ``"min"`` (lower is better) or ``"max"``.
        factor: the multiplier (< 1).
        patience: epochs without improvement tolerated.
        threshold: the least improvement that counts: relative (``best * (1 -+ threshold)``)
            with ``threshold_mode="rel"``, absolute (``best -+ threshold``) with ``"abs"``.
        cooldown: epochs after a reduction during which bad epochs are not counted.
        min_lr: a floor (one, or one per group).
        eps: a reduction smaller than this is skipped.
    """

    def __init__(
        self,
        optimizer,
        mode: str = "min",
        factor: float = 0.1,
        patience: int = 10,
        threshold: float = 1e-4,
        threshold_mode: str = "rel",
        cooldown: int = 0,
        min_lr=0,
        eps: float = 1e-8,
    ):
        name = "ReduceLROnPlateau"
        if factor >= 1.0:
            raise ArgumentError(f"{name}: factor must be < 1, got {factor}")
        _check_optimizer(name, optimizer)
        self.factor = factor
        self.optimizer = optimizer
        if isinstance(min_lr, (list, tuple)):
            self.default_min_lr = None
            self.min_lrs = _per_group(f"{name}: min_lr", optimizer, min_lr)
        else:
            self.default_min_lr = min_lr
            self.min_lrs = [min_lr] * len(optimizer.param_groups)
        self.patience, self.cooldown, self.eps = patience, cooldown, eps
        self.last_epoch = 0
        self._last_lr = _lrs(optimizer)
        self._init_is_better(mode, threshold, threshold_mode)
        self._reset()

    def _reset(self) -> None:
        self.best = self.mode_worse
        self.cooldown_counter = 0
        self.num_bad_epochs = 0

    def step(self, metrics, epoch: int | None = None) -> None:
        """Record one epoch's ``metrics`` (a number or a one-element tensor)."""
        current = float(metrics)
        if epoch is None:
            epoch = self.last_epoch + 1
        else:
            warnings.warn(_EPOCH_DEPRECATED, UserWarning, stacklevel=2)
        self.last_epoch = epoch
        if self._is_better(current, self.best):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0  # bad epochs in cooldown do not count
        if self.num_bad_epochs > self.patience:
            self._reduce_lr()
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = _lrs(self.optimizer)

    def _reduce_lr(self) -> None:
        groups = self.optimizer.param_groups
        if len(groups) != len(self.min_lrs):
            if self.default_min_lr is None:
                raise ArgumentError(
                    f"ReduceLROnPlateau: the optimizer has {len(groups)} parameter groups, "
                    f"min_lr has {len(self.min_lrs)} values; set min_lrs to one per group"
                )
            self.min_lrs = [self.default_min_lr] * len(groups)
        for g, floor in zip(groups, self.min_lrs, strict=True):
            old = float(g["lr"])
            new = max(old * self.factor, floor)
            if old - new > self.eps:
                g["lr"] = new

    @property
    def in_cooldown(self) -> bool:
        return self.cooldown_counter > 0

    def _is_better(self, a: float, best: float) -> bool:
        if self.mode == "min" and self.threshold_mode == "rel":
            return a < best * (1.0 - self.threshold)
        if self.mode == "min":
            return a < best - self.threshold
        if self.threshold_mode == "rel":
            return a > best * (self.threshold + 1.0)
        return a > best + self.threshold

    def _init_is_better(self, mode: str, threshold: float, threshold_mode: str) -> None:
        if mode not in ("min", "max"):
            raise ArgumentError(f"ReduceLROnPlateau: mode must be 'min' or 'max', got {mode!r}")
        if threshold_mode not in ("rel", "abs"):
            raise ArgumentError(
                f"ReduceLROnPlateau: threshold_mode must be 'rel' or 'abs', got {threshold_mode!r}"
            )
        self.mode_worse = math.inf if mode == "min" else -math.inf
        self.mode, self.threshold, self.threshold_mode = mode, threshold, threshold_mode

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)
        self._init_is_better(self.mode, self.threshold, self.threshold_mode)


__all__ = [
    "LRScheduler",
    "LambdaLR",
    "MultiplicativeLR",
    "StepLR",
    "MultiStepLR",
    "ConstantLR",
    "LinearLR",
    "ExponentialLR",
    "PolynomialLR",
    "CosineAnnealingLR",
    "CosineAnnealingWarmRestarts",
    "OneCycleLR",
    "SequentialLR",
    "ChainedScheduler",
    "ReduceLROnPlateau",
]
