"""Grad mode: ``no_grad``, ``enable_grad``, ``set_grad_enabled``, ``inference_mode``.

The mode lives in the compiled engine as one ContextVar, so it is per thread (a new thread starts
with grad enabled) and per asyncio task, and the hot path reads it with one C call. Each class
works as a context manager and as a decorator (``@no_grad`` or ``@no_grad()``).
"""

from __future__ import annotations

import functools

from ferro._C.engine import (
    _get_mode,
    _reset_mode,
    _set_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
)

_NO_GRAD, _GRAD, _INFERENCE = 0, 1, 2


class _ModeContext:
    """Base: enter sets ``self._mode()``, exit restores what was there before."""

    def __new__(cls, *args, **kwargs):
        # ``@no_grad`` without parentheses: the class receives the function itself.
        if cls is not set_grad_enabled and len(args) == 1 and callable(args[0]) and not kwargs:
            return cls()(args[0])
        return super().__new__(cls)

    def __init__(self) -> None:
        self._tokens: list = []

    def _mode(self) -> int:
        raise NotImplementedError

    def __enter__(self):
        self._tokens.append(_set_mode(self._mode()))
        return self

    def __exit__(self, *exc) -> None:
        _reset_mode(self._tokens.pop())

    def _clone(self):
        return type(self)()

    def __call__(self, func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with self._clone():
                return func(*args, **kwargs)

        return wrapper


class no_grad(_ModeContext):
    """Ops inside do not record a graph; outputs do not require grad.

    Example:
        >>> with ferro.no_grad():
        ...     y = x * 2          # y.requires_grad is False
    """

    def _mode(self) -> int:
        return _INFERENCE if _get_mode() == _INFERENCE else _NO_GRAD


class enable_grad(_ModeContext):
    """Turn recording back on inside a ``no_grad`` block (no effect under inference_mode)."""

    def _mode(self) -> int:
        return _INFERENCE if _get_mode() == _INFERENCE else _GRAD


class set_grad_enabled(_ModeContext):
    """Set grad mode to ``mode``: immediately when called, restored on exit when used with ``with``.

    Example:
        >>> with ferro.set_grad_enabled(False):
        ...     y = x * 2
    """

    def __init__(self, mode: bool) -> None:
        super().__init__()
        self.mode = bool(mode)
        self._tokens.append(_set_mode(self._mode()))

    def _mode(self) -> int:
        return _GRAD if self.mode else _NO_GRAD

    def __enter__(self):
        return self

    def _clone(self):
        return _Scoped(self._mode())

    def __call__(self, func):
        # Used as a decorator: undo the switch made at construction; apply it per call instead.
        if self._tokens:
            _reset_mode(self._tokens.pop())
        return super().__call__(func)


class _Scoped(_ModeContext):
    def __init__(self, mode: int = _GRAD) -> None:
        super().__init__()
        self._m = mode

    def _mode(self) -> int:
        return self._m

    def _clone(self):
        return _Scoped(self._m)


class inference_mode(_ModeContext):
    """Like ``no_grad``, and tensors created inside are marked as inference tensors, which may not
    take part in a recorded op later (clone them first). ``inference_mode(False)`` is a no-op."""

    def __init__(self, mode: bool = True) -> None:
        super().__init__()
        self.mode = bool(mode)

    def _mode(self) -> int:
        return _INFERENCE if self.mode else _get_mode()

    def _clone(self):
        return inference_mode(self.mode)


__all__ = [
    "no_grad",
    "enable_grad",
    "set_grad_enabled",
    "inference_mode",
    "is_grad_enabled",
    "is_inference_mode_enabled",
]
