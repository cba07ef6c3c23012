"""Turning a list of samples into a batch: ``default_collate`` and ``default_convert``, with
PyTorch's rules.

``default_collate`` keeps the structure of a sample and stacks its leaves along a new first
dimension: tensors are stacked; NumPy arrays and NumPy scalars become tensors of their dtype
(by ``ferro.tensor``'s rules, so int32 data gives int64); Python floats give a float64 tensor,
ints int64 and bools bool; strings and bytes stay a list; a mapping, namedtuple, tuple or list
is collated field by field (a tuple gives a list, as in PyTorch).

Example:
    >>> default_collate([(1.0, {"y": 2}), (3.0, {"y": 4})])
    [tensor([1., 3.], dtype=ferro.float64), {'y': tensor([2, 4])}]
"""

from __future__ import annotations

import collections.abc
import copy

import numpy as np

from ferro._C.tensor import TensorBase
from ferro.errors import ArgumentTypeError, ShapeError

# NumPy dtype kinds that hold no numbers: object, strings, bytes, records.
_NOT_NUMBERS = "OUSV"

_WHAT = "tensors, numpy arrays, numbers, dicts or lists"


def _as_tensor(arr):
    """A tensor of NumPy data, sharing memory when ferro holds its dtype as it is."""
    from ferro.creation import SUPPORTED_DTYPES, from_numpy, tensor

    if arr.dtype in SUPPORTED_DTYPES and arr.flags.c_contiguous:
        return from_numpy(arr)
    return tensor(arr)


def _is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(x, "_fields")


def _mapping(elem, values: dict):
    """A mapping of ``elem``'s type holding ``values`` (a plain dict if that type cannot)."""
    if isinstance(elem, collections.abc.MutableMapping):
        clone = copy.copy(elem)
        clone.update(values)
        return clone
    try:
        return type(elem)(values)
    except TypeError:
        return dict(values)


def default_collate(batch):
    """Stack a list of samples into a batch, keeping their structure, by PyTorch's rules.

    Tensors are stacked, NumPy data becomes tensors of its dtype, Python floats float64, ints
    int64; mappings, namedtuples and sequences are collated field by field (a tuple gives a
    list); strings stay a list. See the module docstring and docs/data.md.

    Raises:
        ArgumentTypeError: a sample holds something that cannot be batched (None, an object,
            a string array).
        ShapeError: sequences of different lengths, or tensors or arrays of different shapes.
    """
    from ferro.creation import tensor
    from ferro.ops import stack

    elem = batch[0]
    if isinstance(elem, TensorBase):
        shapes = {tuple(t.shape) for t in batch}
        if len(shapes) > 1:
            raise ShapeError(f"default_collate: tensors of different shapes {sorted(shapes)}")
        return stack(list(batch))
    if isinstance(elem, np.ndarray | np.generic) and elem.dtype.kind not in _NOT_NUMBERS:
        if any(np.shape(a) != np.shape(elem) for a in batch):
            shapes = sorted({np.shape(a) for a in batch})
            raise ShapeError(f"default_collate: arrays of different shapes {shapes}")
        return _as_tensor(np.stack([np.asarray(a) for a in batch]))
    if isinstance(elem, float):
        return tensor(batch, dtype="float64")
    if isinstance(elem, int):
        return tensor(batch)
    if isinstance(elem, str | bytes):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        return _mapping(elem, {k: default_collate([d[k] for d in batch]) for k in elem})
    if _is_namedtuple(elem):
        return type(elem)(*(default_collate(list(field)) for field in zip(*batch, strict=True)))
    if isinstance(elem, collections.abc.Sequence):
        if len({len(s) for s in batch}) != 1:
            raise ShapeError(
                "default_collate: each element in list of batch should be of equal size, got "
                f"lengths {[len(s) for s in batch]}"
            )
        fields = [default_collate(list(f)) for f in zip(*batch, strict=True)]
        if isinstance(elem, tuple):
            return fields
        try:
            return type(elem)(fields)
        except TypeError:
            return fields
    what = elem.dtype if isinstance(elem, np.ndarray | np.generic) else type(elem).__name__
    raise ArgumentTypeError(f"default_collate: batch must contain {_WHAT}; found {what}")


def default_convert(data):
    """Turn NumPy arrays and scalars in a sample into tensors, keeping everything else (the
    ``collate_fn`` of a ``DataLoader`` with ``batch_size=None``).

    Example:
        >>> default_convert({"x": np.arange(3), "id": 7})
        {'x': tensor([0, 1, 2]), 'id': 7}
    """
    if isinstance(data, TensorBase):
        return data
    if isinstance(data, np.ndarray | np.generic):
        if data.dtype.kind in _NOT_NUMBERS:
            return data
        return _as_tensor(np.asarray(data))
    if isinstance(data, str | bytes):
        return data
    if isinstance(data, collections.abc.Mapping):
        return _mapping(data, {k: default_convert(v) for k, v in data.items()})
    if _is_namedtuple(data):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence):
        converted = [default_convert(d) for d in data]
        try:
            return type(data)(converted)
        except TypeError:
            return converted
    return data


__all__ = ["default_collate", "default_convert"]
