"""Constructor-argument binding shared by the generated module classes (activations, losses)."""

from __future__ import annotations

from ferro.errors import (
    ArgumentTypeError,
)


def _bind(cls_name: str, names: tuple, defaults: tuple, args: tuple, kwargs: dict) -> dict:
    """The constructor arguments by name, positional ones in PyTorch's order (a call that does
    not fit is an ArgumentTypeError, Python's TypeError for a bad call)."""
    if len(args) > len(names):
        raise ArgumentTypeError(
            f"{cls_name}() takes at most {len(names)} arguments ({', '.join(names)}), "
            f"got {len(args)}"
        )
    values = dict(zip(names, defaults, strict=True))
    for k, v in zip(names, args, strict=False):
        values[k] = v
    for k, v in kwargs.items():
        if k not in values:
            raise ArgumentTypeError(f"{cls_name}() got an unexpected keyword argument {k!r}")
        if names.index(k) < len(args):
            raise ArgumentTypeError(f"{cls_name}() got multiple values for argument {k!r}")
        values[k] = v
    return values
