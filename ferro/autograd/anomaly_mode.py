"""Anomaly detection: find the op whose backward produced NaN or Inf, and where it was created.

While it is on, every recorded op stores the file, line and function of the user code that
created it (in the compiled core: a frame walk, no traceback), and every gradient a node's
backward returns is checked for NaN/Inf (``check_nan``). An :class:`~ferro.errors.AnomalyError`
names the node and its creation site; any other error raised in backward gets the site as a
note. The cost is small enough to leave on (``benchmarks/bench_mlp.py --anomaly``).
"""

from __future__ import annotations

from ferro._C.engine import is_anomaly_enabled, set_anomaly


class detect_anomaly:
    """Context manager (and decorator) that turns anomaly detection on inside it.

    Example:
        >>> x = ferro.tensor([0.0, 1.0], requires_grad=True)
        >>> with ferro.autograd.detect_anomaly():
        ...     (x * x.log()).sum().backward()  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ferro.errors.AnomalyError: ...
    """

    def __init__(self, check_nan: bool = True) -> None:
        self.check_nan = bool(check_nan)
        self._prev: list = []

    def __enter__(self):
        self._prev.append(set_anomaly(True, self.check_nan))
        return self

    def __exit__(self, *exc) -> None:
        set_anomaly(*self._prev.pop())

    def __call__(self, func):
        import functools

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with detect_anomaly(self.check_nan):
                return func(*args, **kwargs)

        return wrapper


class set_detect_anomaly:
    """Turn anomaly detection on or off now; restores the previous setting on exit when used
    with ``with``."""

    def __init__(self, mode: bool, check_nan: bool = True) -> None:
        self._prev = set_anomaly(bool(mode), bool(check_nan))

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        set_anomaly(*self._prev)


__all__ = ["detect_anomaly", "set_detect_anomaly", "is_anomaly_enabled"]
