"""Grad mode: ``no_grad``, ``enable_grad``, ``set_grad_enabled``, ``inference_mode``.

The mode lives in the compiled engine as one ContextVar, so it is per thread (a new thread starts
with grad enabled) and per asyncio task, and the hot path reads it with one C call. Each class
works as a context manager and as a decorator (``@no_grad`` or ``@no_grad()``). On a generator
(or async generator) function the mode applies to the body each time it resumes, not to the caller
between ``next()`` calls; on an ``async def`` function it applies to the coroutine's task.
"""

from __future__ import annotations

import functools
import inspect

from ferro._C.engine import (
    GUARD_KINDS,
    ModeGuard,
    is_grad_enabled,
    is_inference_mode_enabled,
)

_NO_GRAD, _GRAD, _INFERENCE = 0, 1, 2


class _ModeContext(ModeGuard):
    """Base: enter sets the guard's mode, exit restores what was there before. Enter and exit
    are compiled (:class:`ferro._C.state.ModeGuard`): a ``with no_grad():`` block costs about
    as much as one small op, not several."""

    __slots__ = ()
    _guard_kind = GUARD_KINDS["no_grad"]

    __new__ = ModeGuard._new  # compiled; with arguments it calls _new_with_args

    @classmethod
    def _new_with_args(cls, *args, **kwargs):
        # ``@no_grad`` without parentheses: the class receives the function itself.
        if cls is not set_grad_enabled and len(args) == 1 and callable(args[0]) and not kwargs:
            return cls()(args[0])
        return ModeGuard.__new__(cls)

    def _clone(self):
        return type(self)()

    def __call__(self, func):
        if inspect.isgeneratorfunction(func):
            return _wrap_generator(self._clone, func)
        if inspect.isasyncgenfunction(func):
            return _wrap_async_generator(self._clone, func)
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def coroutine(*args, **kwargs):
                # The mode is a ContextVar and each asyncio task has its own context, so holding
                # it across awaits changes nothing for other tasks.
                with self._clone():
                    return await func(*args, **kwargs)

            return coroutine

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with self._clone():
                return func(*args, **kwargs)

        return wrapper


def _wrap_generator(mode, func):
    """Decorate a generator function: its body runs under ``mode()`` each time it resumes, and
    the caller's mode is untouched between resumptions (PyTorch's ``_wrap_generator``)."""

    @functools.wraps(func)
    def generator(*args, **kwargs):
        gen = func(*args, **kwargs)
        try:
            with mode():
                response = gen.send(None)
            while True:
                try:
                    request = yield response
                except GeneratorExit:
                    with mode():
                        gen.close()
                    raise
                except BaseException as exc:
                    with mode():
                        response = gen.throw(exc)
                else:
                    with mode():
                        response = gen.send(request)
        except StopIteration as stop:
            return stop.value

    return generator


def _wrap_async_generator(mode, func):
    """Decorate an async generator function, as :func:`_wrap_generator` does a generator."""

    @functools.wraps(func)
    async def generator(*args, **kwargs):
        agen = func(*args, **kwargs)
        try:
            with mode():
                response = await agen.asend(None)
            while True:
                try:
                    request = yield response
                except GeneratorExit:
                    with mode():
                        await agen.aclose()
                    raise
                except BaseException as exc:
                    with mode():
                        response = await agen.athrow(exc)
                else:
                    with mode():
                        response = await agen.asend(request)
        except StopAsyncIteration:
            return

    return generator


class no_grad(_ModeContext):
    """Ops inside do not record a graph; outputs do not require grad.

    Example:
        >>> x = ferro.ones(2, requires_grad=True)
        >>> with ferro.no_grad():
        ...     y = x * 2
        >>> y.requires_grad
        False
    """

    __slots__ = ()
    _guard_kind = GUARD_KINDS["no_grad"]


class enable_grad(_ModeContext):
    """Turn recording back on inside a ``no_grad`` block (no effect under inference_mode)."""

    __slots__ = ()
    _guard_kind = GUARD_KINDS["enable_grad"]


class set_grad_enabled(_ModeContext):
    """Set grad mode to ``mode``: immediately when called, restored on exit when used with ``with``.

    Example:
        >>> x = ferro.ones(2, requires_grad=True)
        >>> with ferro.set_grad_enabled(False):
        ...     y = x * 2
        >>> y.requires_grad, ferro.is_grad_enabled()
        (False, True)
    """

    __slots__ = ("mode",)

    def __init__(self, mode: bool) -> None:
        self.mode = bool(mode)
        self._set_kind(GUARD_KINDS["fixed"], _GRAD if self.mode else _NO_GRAD)
        self._push_now()

    def __enter__(self):
        return self

    def _clone(self):
        return _Scoped(_GRAD if self.mode else _NO_GRAD)

    def __call__(self, func):
        # Used as a decorator: undo the switch made at construction; apply it per call instead.
        self._pop_now()
        return super().__call__(func)


class _Scoped(_ModeContext):
    __slots__ = ("_m",)

    def __init__(self, mode: int = _GRAD) -> None:
        self._m = mode
        self._set_kind(GUARD_KINDS["fixed"], mode)

    def _clone(self):
        return _Scoped(self._m)


class inference_mode(_ModeContext):
    """Like ``no_grad``, and tensors created inside are marked as inference tensors, which may not
    take part in a recorded op later (clone them first). ``inference_mode(False)`` is a no-op."""

    __slots__ = ("mode",)

    def __init__(self, mode: bool = True) -> None:
        self.mode = bool(mode)
        if self.mode:
            self._set_kind(GUARD_KINDS["fixed"], _INFERENCE)
        else:
            self._set_kind(GUARD_KINDS["keep"])

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
