"""``ferro.save`` / ``ferro.load``: state dicts in NumPy's ``.npz`` format, with no pickle.

A state dict (nested dicts, lists and tuples of tensors, arrays, numbers, strings, bools and
None, such as ``Module.state_dict()`` or ``Optimizer.state_dict()``) is flattened: every array
becomes one ``.npz`` entry and the structure is a JSON document stored as a uint8 entry. Loading
uses ``allow_pickle=False``, so a file can never run code; a truncated or foreign file raises a
:class:`~ferro.errors.SerializationError`.
"""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np

from ferro._C.tensor import TensorBase, wrap
from ferro.errors import SerializationError

_FORMAT = "ferro-state-v1"
_META = "__ferro_meta__"


def _encode(obj, arrays: dict):
    if isinstance(obj, TensorBase):
        key = f"a{len(arrays)}"
        arrays[key] = np.asarray(obj.data)
        return {"tensor": key}
    if isinstance(obj, np.ndarray):
        key = f"a{len(arrays)}"
        arrays[key] = obj
        return {"array": key}
    if isinstance(obj, dict):
        return {"dict": [[_encode_key(k), _encode(v, arrays)] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        return {"list" if isinstance(obj, list) else "tuple": [_encode(v, arrays) for v in obj]}
    if isinstance(obj, (bool, int, float, str)) or obj is None:
        return {"value": obj}
    if isinstance(obj, np.generic):
        return {"value": obj.item()}
    raise TypeError(
        f"ferro.save: cannot save a {type(obj).__name__}; save state dicts of "
        "tensors, arrays, numbers, strings and containers of them"
    )


def _encode_key(k):
    if isinstance(k, (str, int)) and not isinstance(k, bool):
        return k
    raise TypeError(f"ferro.save: dict keys must be str or int, got {type(k).__name__}")


def _decode(node, arrays):
    if "tensor" in node:
        return wrap(arrays[node["tensor"]])
    if "array" in node:
        return arrays[node["array"]]
    if "dict" in node:
        return {k: _decode(v, arrays) for k, v in node["dict"]}
    if "list" in node:
        return [_decode(v, arrays) for v in node["list"]]
    if "tuple" in node:
        return tuple(_decode(v, arrays) for v in node["tuple"])
    return node["value"]


def save(obj, path) -> None:
    """Save a state dict to ``path`` (``.npz``; the name is kept as given)."""
    arrays: dict = {}
    meta = {"format": _FORMAT, "root": _encode(obj, arrays)}
    blob = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    with open(os.fspath(path), "wb") as f:
        np.savez(f, **{_META: blob}, **arrays)


def load(path):
    """Load a state dict saved by :func:`save`; tensors come back as Tensors."""
    try:
        with np.load(os.fspath(path), allow_pickle=False) as npz:
            if _META not in npz.files:
                raise SerializationError(f"ferro.load: {path} is not a file saved by ferro.save")
            meta = json.loads(npz[_META].tobytes().decode())
            if meta.get("format") != _FORMAT:
                raise SerializationError(
                    f"ferro.load: {path} has unknown format {meta.get('format')!r}"
                )
            arrays = {k: npz[k] for k in npz.files if k != _META}
    except SerializationError:
        raise
    except (
        zipfile.BadZipFile,
        ValueError,
        OSError,
        EOFError,
        KeyError,
        json.JSONDecodeError,
        UnicodeDecodeError,
    ) as exc:
        raise SerializationError(f"ferro.load: cannot read {path}: {exc}") from None
    try:
        return _decode(meta["root"], arrays)
    except (KeyError, TypeError) as exc:
        raise SerializationError(f"ferro.load: {path} is corrupt: {exc!r}") from None
