"""PyTorch's argument names with NumPy's as aliases, handled in one place.

PyTorch spells a reduction's axis ``dim`` and its flag ``keepdim``; NumPy (and ferro before
issue 13) spells them ``axis`` and ``keepdims``. An op is written with PyTorch's names and
decorated with :func:`aliases`, which renames NumPy's spellings on the way in, so
``x.sum(dim=1, keepdim=True)`` and ``x.sum(axis=1, keepdims=True)`` both work.
"""

from __future__ import annotations

import functools
import inspect

from ferro.errors import ArgumentTypeError

#: The aliases every decorated op accepts: NumPy's spelling -> PyTorch's.
NUMPY_NAMES = {"axis": "dim", "keepdims": "keepdim"}


def aliases(fn=None, /, **extra):
    """Decorate an op so that NumPy's argument names (and ``extra`` ones) reach its PyTorch
    names: ``axis`` -> ``dim``, ``keepdims`` -> ``keepdim``.

    Only aliases whose target the op has apply. Giving both spellings, by keyword or with the
    target passed positionally, raises :class:`~ferro.errors.ArgumentTypeError`, as Python
    does for "got multiple values for argument".
    """
    if fn is None:
        return functools.partial(aliases, **extra)
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    table = {}
    for alias, name in {**NUMPY_NAMES, **extra}.items():
        if name not in sig.parameters:
            continue
        p = sig.parameters[name]
        # How many positional arguments reach ``name``; None: it is keyword-only.
        position = params.index(p) if p.kind is p.POSITIONAL_OR_KEYWORD else None
        table[alias] = (name, position)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if kwargs:
            for alias in table.keys() & kwargs.keys():
                name, position = table[alias]
                if name in kwargs or (position is not None and len(args) > position):
                    raise ArgumentTypeError(
                        f"{fn.__name__}() got multiple values for argument {name!r} "
                        f"({alias!r} is an alias of {name!r}; pass one of them)"
                    )
                kwargs[name] = kwargs.pop(alias)
        return fn(*args, **kwargs)

    # The signature the docs and help() show: PyTorch's names, then the aliases keyword-only.
    shown = [
        inspect.Parameter(alias, inspect.Parameter.KEYWORD_ONLY, default=None) for alias in table
    ]
    last = [p for p in params if p.kind is p.VAR_KEYWORD]
    rest = [p for p in params if p.kind is not p.VAR_KEYWORD]
    wrapper.__signature__ = sig.replace(parameters=rest + shown + last)
    return wrapper


__all__ = ["aliases", "NUMPY_NAMES"]
