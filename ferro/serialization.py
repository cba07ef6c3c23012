"""``ferro.save`` / ``ferro.load``: state dicts in NumPy's ``.npz`` format, with no pickle.

A state dict (nested dicts, lists and tuples of tensors, arrays, numbers, strings, bools and
None, such as ``Module.state_dict()`` or ``Optimizer.state_dict()``) is flattened: every array
becomes one ``.npz`` entry and the structure is a JSON document stored as a uint8 entry.

``load`` treats the file as hostile and reads only what ``save`` writes (see "File format and
trust model" in docs/quickstart.md): a zip of uncompressed members named ``__ferro_meta__.npy``
and ``a<N>.npy``, each a plain ``.npy`` of a numeric or bool dtype whose header matches its size,
every member referenced once by a JSON structure of bounded depth. It never unpickles, never
decompresses, and reads no more bytes than the file holds. Anything else raises
:class:`~ferro.errors.SerializationError` before any object is returned.
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import struct
import zipfile

import numpy as np

from ferro._C.tensor import TensorBase, wrap
from ferro.backend import is_array, move
from ferro.dtypes import SUPPORTED_DTYPES
from ferro.errors import ArgumentError, ArgumentTypeError, DtypeError, SerializationError

_FORMAT = "ferro-state-v1"
_META = "__ferro_meta__"
_ARRAY_NAME = re.compile(r"a(0|[1-9][0-9]{0,8})")
# Containers nested deeper than this are refused by save and load: a state dict is a few levels
# deep, and the limit keeps the structure walk and JSON parsing far from Python's recursion limit.
_MAX_DEPTH = 64
# The JSON structure of a state dict with a million entries is a few tens of MiB.
_MAX_META_BYTES = 64 * 2**20
# numpy.lib.format writes headers of about 128 bytes; its own reader refuses more than 10,000.
_MAX_HEADER_BYTES = 10_000
_NPY_MAGIC = b"\x93NUMPY"
_CHUNK = 2**24
# Plain numeric and bool dtypes with a fixed, platform-independent layout (no longdouble).
_ALLOWED_ITEMSIZES = {"b": (1,), "i": (1, 2, 4, 8), "u": (1, 2, 4, 8), "f": (2, 4, 8), "c": (8, 16)}


def _storable(dtype: np.dtype) -> bool:
    return (
        dtype.fields is None
        and dtype.subdtype is None
        and dtype.itemsize in _ALLOWED_ITEMSIZES.get(dtype.kind, ())
    )


# Saving ----------------------------------------------------------------------------------------


def _encode(obj, arrays: dict, depth: int):
    if depth > _MAX_DEPTH:
        raise ArgumentError(
            f"ferro.save: containers nested deeper than {_MAX_DEPTH} levels (or a container "
            "that contains itself) cannot be saved"
        )
    if isinstance(obj, TensorBase):
        return {"tensor": _add_array(move(obj._data, "cpu"), arrays)}
    if is_array(obj):
        return {"array": _add_array(move(obj, "cpu"), arrays)}
    if isinstance(obj, dict):
        return {"dict": [[_encode_key(k), _encode(v, arrays, depth + 1)] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        kind = "list" if isinstance(obj, list) else "tuple"
        return {kind: [_encode(v, arrays, depth + 1) for v in obj]}
    if isinstance(obj, (bool, int, float, str)) or obj is None:
        return {"value": obj}
    what = _object_kind(obj)
    if what is not None:
        raise ArgumentTypeError(
            f"ferro.save: cannot save a {what} object ({type(obj).__name__}); ferro files hold "
            f"no code, so save its state_dict() instead and load it into a new {what} with "
            "load_state_dict(ferro.load(f)) (see docs/pytorch.md#saving-and-loading)"
        )
    if isinstance(obj, np.generic) and _storable(obj.dtype):
        return {"value": obj.item()}
    raise ArgumentTypeError(
        f"ferro.save: cannot save a {type(obj).__name__}; save state dicts of "
        "tensors, arrays, numbers, strings and containers of them"
    )


def _object_kind(obj):
    """``"Module"`` or ``"Optimizer"`` (what has a state_dict) for such an object, else None."""
    from ferro.nn.module import Module
    from ferro.optim.optimizer import Optimizer

    if isinstance(obj, Module):
        return "Module"
    if isinstance(obj, Optimizer):
        return "Optimizer"
    if callable(getattr(obj, "state_dict", None)):
        return type(obj).__name__
    return None


def _add_array(a: np.ndarray, arrays: dict) -> str:
    if not _storable(a.dtype):
        raise DtypeError(
            f"ferro.save: cannot save an array of dtype {a.dtype}; ferro files hold bool, "
            "integer, float (16/32/64-bit) and complex (64/128-bit) arrays"
        )
    key = f"a{len(arrays)}"
    arrays[key] = a
    return key


def _encode_key(k):
    if isinstance(k, (str, int)) and not isinstance(k, bool):
        return k
    raise ArgumentTypeError(f"ferro.save: dict keys must be str or int, got {type(k).__name__}")


def save(obj, f, **kwargs) -> None:
    """Save a state dict (or any nesting of dicts, lists and tuples of tensors, arrays,
    numbers, strings, bools and None: a checkpoint with the epoch, the model's and the
    optimizer's state dicts) to ``f``: a path (``.npz``; the name is kept as given) or a binary
    file object opened for writing. PyTorch's keyword arguments (``pickle_protocol``, ...) are
    accepted and ignored: ferro never pickles.

    Members are stored uncompressed, so the file is as large as the arrays it holds.

    Raises:
        ArgumentTypeError: ``obj`` holds something other than tensors, arrays, numbers,
            strings, None and dicts, lists and tuples of them (or a dict key that is not a
            str or int).
        DtypeError: an array of a dtype that :func:`load` would refuse (object, strings,
            structured, longdouble, ...).
        ArgumentError: containers nested deeper than 64 levels.
        ArgumentTypeError: a Module or Optimizer object: save its ``state_dict()``.
    """
    arrays: dict = {}
    meta = {"format": _FORMAT, "root": _encode(obj, arrays, 0)}
    blob = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    if hasattr(f, "write"):
        np.savez(f, **{_META: blob}, **arrays)
        return
    with open(os.fspath(f), "wb") as out:
        np.savez(out, **{_META: blob}, **arrays)


# Loading ---------------------------------------------------------------------------------------


def _refuse(path, why: str):
    name = os.fspath(path) if isinstance(path, (str, os.PathLike)) else str(path)
    return SerializationError(f"ferro.load: {name} {why}")


def _sniff(path, head: bytes) -> None:
    """Name what a file that is not a zip archive is, rather than 'bad zip'."""
    if head.startswith(_NPY_MAGIC):
        raise _refuse(path, "is a plain .npy array, not a file saved by ferro.save")
    if head[:1] == b"\x80" or head[:1] in (b"(", b"]", b"}"):
        raise _refuse(path, "looks like a pickle; ferro.load never unpickles")
    if not head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        raise _refuse(path, f"is not a zip archive (it starts with {head[:8]!r})")


def _check_members(path, zf: zipfile.ZipFile, file_size: int) -> list:
    """Check the central directory against the file before reading any member."""
    infos = zf.infolist()
    names = [i.filename for i in infos]
    if len(set(names)) != len(names):
        raise _refuse(path, "has two members with the same name")
    foreign = [
        n
        for n in names
        if not (n == f"{_META}.npy" or (n.endswith(".npy") and _ARRAY_NAME.fullmatch(n[:-4])))
    ]
    if foreign:
        shown = ", ".join(repr(n) for n in foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise _refuse(path, f"is not a file saved by ferro.save (foreign members {shown})")
    if f"{_META}.npy" not in names:
        raise _refuse(path, "is not a file saved by ferro.save (it has no __ferro_meta__ member)")
    total = 0
    for info in infos:
        if info.flag_bits & 0x1:
            raise _refuse(path, f"member {info.filename!r} is encrypted")
        if info.compress_type != zipfile.ZIP_STORED:
            raise _refuse(
                path,
                f"member {info.filename!r} is compressed (method {info.compress_type}); "
                "ferro.save stores members uncompressed and ferro.load never decompresses",
            )
        if info.file_size != info.compress_size:
            raise _refuse(
                path,
                f"member {info.filename!r} declares {info.file_size} bytes but stores "
                f"{info.compress_size}",
            )
        if info.header_offset + info.compress_size > file_size:
            raise _refuse(
                path,
                f"member {info.filename!r} declares {info.file_size} bytes at offset "
                f"{info.header_offset}, past the end of the {file_size}-byte file",
            )
        total += info.file_size
    if total > file_size:
        raise _refuse(path, f"declares {total} bytes of members in a file of {file_size} bytes")
    return infos


def _read_exact(path, f, n: int, what: str) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise _refuse(path, f"is truncated: {what} needs {n} bytes, got {len(data)}")
    return data


def _read_npy_header(path, f, info) -> tuple:
    """``(shape, fortran_order, dtype, count)`` of a member, checked against the member's
    declared size, with ``f`` left at the data."""
    name = info.filename
    head = _read_exact(path, f, 8, f"the .npy header of {name!r}")
    if head[:6] != _NPY_MAGIC:
        raise _refuse(path, f"member {name!r} is not a .npy array")
    version = (head[6], head[7])
    if version not in ((1, 0), (2, 0)):
        raise _refuse(path, f"member {name!r} has unsupported .npy version {version}")
    fmt = "<H" if version == (1, 0) else "<I"
    (hlen,) = struct.unpack(fmt, _read_exact(path, f, struct.calcsize(fmt), name))
    if hlen > _MAX_HEADER_BYTES:
        raise _refuse(path, f"member {name!r} has a {hlen}-byte .npy header")
    text = _read_exact(path, f, hlen, f"the .npy header of {name!r}").decode("latin1")
    try:
        header = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise _refuse(path, f"member {name!r} has an unreadable .npy header") from None
    if not isinstance(header, dict) or set(header) != {"descr", "fortran_order", "shape"}:
        raise _refuse(path, f"member {name!r} has an unreadable .npy header")
    shape, fortran, descr = header["shape"], header["fortran_order"], header["descr"]
    if not (
        isinstance(shape, tuple)
        and all(type(d) is int and d >= 0 for d in shape)
        and len(shape) <= 64  # NumPy's limit on dimensions
        and type(fortran) is bool
        and isinstance(descr, str)
    ):
        raise _refuse(path, f"member {name!r} has an invalid .npy header {text.strip()!r}")
    try:
        dtype = np.dtype(descr)
    except (TypeError, ValueError):
        raise _refuse(path, f"member {name!r} has an unknown dtype {descr!r}") from None
    if not _storable(dtype):
        raise _refuse(
            path,
            f"member {name!r} has dtype {descr!r}; ferro files hold only plain bool, integer, "
            "float and complex arrays",
        )
    count = 1
    for d in shape:
        count *= d
    data_bytes = info.file_size - (len(head) + struct.calcsize(fmt) + hlen)
    if count * dtype.itemsize != data_bytes:
        raise _refuse(
            path,
            f"member {name!r} declares shape {shape} of {dtype} ({count * dtype.itemsize} "
            f"bytes) but holds {data_bytes} bytes of data",
        )
    return shape, fortran, dtype, count


def _read_member(path, zf: zipfile.ZipFile, info, dtypes=None) -> np.ndarray:
    """A fresh, writeable, native-order array with the member's data; ``dtypes``, when given,
    are the only ones accepted."""
    with zf.open(info) as f:
        shape, fortran, dtype, count = _read_npy_header(path, f, info)
        native = dtype.newbyteorder("=")
        if dtypes is not None and native not in dtypes:
            raise _refuse(
                path, f"holds a tensor of dtype {native}; ferro tensors hold {_names(dtypes)}"
            )
        flat = np.empty(count, dtype=dtype)
        raw = flat.view(np.uint8)
        pos = 0
        while pos < raw.size:
            # zipfile stops at the declared size and checks the CRC when it gets there.
            chunk = f.read(min(_CHUNK, raw.size - pos))
            if not chunk:
                raise _refuse(path, f"is truncated inside member {info.filename!r}")
            raw[pos : pos + len(chunk)] = np.frombuffer(chunk, np.uint8)
            pos += len(chunk)
    if dtype.kind == "b" and raw.size and raw.max() > 1:
        raise _refuse(path, f"member {info.filename!r} is a bool array holding other values")
    if not dtype.isnative:
        flat.byteswap(inplace=True)
        flat = flat.view(native)
    return flat.reshape(shape, order="F" if fortran else "C")


def _names(dtypes) -> str:
    return ", ".join(str(d) for d in dtypes)


def _check_structure(path, root, members: set) -> set:
    """Walk the JSON structure (no recursion): node types, depth, and that it references every
    array member exactly once. Returns the members that hold tensors."""
    seen: set = set()
    tensors: set = set()
    stack = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > _MAX_DEPTH:
            raise _refuse(path, f"nests containers deeper than {_MAX_DEPTH} levels")
        if not isinstance(node, dict) or len(node) != 1:
            raise _refuse(path, f"has a malformed structure entry {str(node)[:80]!r}")
        ((kind, body),) = node.items()
        if kind in ("tensor", "array"):
            if not isinstance(body, str) or body not in members:
                raise _refuse(path, f"references a missing array {str(body)[:40]!r}")
            if body in seen:
                raise _refuse(path, f"references array {body!r} twice")
            seen.add(body)
            if kind == "tensor":
                tensors.add(body)
        elif kind == "dict":
            if not isinstance(body, list):
                raise _refuse(path, "has a malformed dict entry")
            keys = set()
            for pair in body:
                if not (isinstance(pair, list) and len(pair) == 2):
                    raise _refuse(path, "has a malformed dict entry")
                key = pair[0]
                if not isinstance(key, (str, int)) or isinstance(key, bool) or key in keys:
                    raise _refuse(path, f"has a bad or repeated dict key {str(key)[:40]!r}")
                keys.add(key)
                stack.append((pair[1], depth + 1))
        elif kind in ("list", "tuple"):
            if not isinstance(body, list):
                raise _refuse(path, f"has a malformed {kind} entry")
            stack.extend((v, depth + 1) for v in body)
        elif kind == "value":
            if not (body is None or isinstance(body, (bool, int, float, str))):
                raise _refuse(path, f"has a malformed value entry {str(body)[:80]!r}")
        else:
            raise _refuse(path, f"has an unknown structure entry {kind[:40]!r}")
    unused = members - seen
    if unused:
        raise _refuse(path, f"holds arrays the structure does not use ({sorted(unused)[:5]})")
    return tensors


def _decode(node, arrays):
    # Depth is bounded by _check_structure, so recursion here stays shallow.
    ((kind, body),) = node.items()
    if kind == "tensor":
        return wrap(arrays[body])
    if kind == "array":
        return arrays[body]
    if kind == "dict":
        return {k: _decode(v, arrays) for k, v in body}
    if kind == "list":
        return [_decode(v, arrays) for v in body]
    if kind == "tuple":
        return tuple(_decode(v, arrays) for v in body)
    return body


def _read(path, f) -> object:
    start = f.tell()
    f.seek(0, os.SEEK_END)
    file_size = f.tell() - start
    f.seek(start)
    head = f.read(8)
    f.seek(start)
    if start:
        f = io.BytesIO(f.read())  # zipfile reads offsets from the start of the stream
    _sniff(path, head)
    try:
        zf = zipfile.ZipFile(f)
    except zipfile.BadZipFile as exc:
        # A zip's directory is at its end, so this is what a cut-off file looks like.
        raise _refuse(path, f"is truncated or damaged (no readable zip directory: {exc})") from None
    with zf:
        return _read_archive(path, zf, file_size)


def _read_archive(path, zf: zipfile.ZipFile, file_size: int) -> object:
    infos = {i.filename: i for i in _check_members(path, zf, file_size)}
    meta_info = infos.pop(f"{_META}.npy")
    if meta_info.file_size > _MAX_META_BYTES:
        raise _refuse(path, f"has a {meta_info.file_size}-byte structure entry")
    blob = _read_member(path, zf, meta_info)
    if blob.dtype != np.uint8 or blob.ndim != 1:
        raise _refuse(path, f"has a structure entry of dtype {blob.dtype}, shape {blob.shape}")
    try:
        meta = json.loads(blob.tobytes().decode("utf-8"))
    except (ValueError, RecursionError):
        raise _refuse(path, "has a structure entry that is not valid JSON") from None
    if not isinstance(meta, dict) or set(meta) != {"format", "root"}:
        raise _refuse(path, "is not a file saved by ferro.save (unexpected structure entry)")
    if meta["format"] != _FORMAT:
        raise _refuse(path, f"has unknown format {str(meta['format'])[:40]!r}")
    members = {name[:-4] for name in infos}
    tensors = _check_structure(path, meta["root"], members)
    arrays = {}
    for name, info in infos.items():
        key = name[:-4]
        arrays[key] = _read_member(path, zf, info, SUPPORTED_DTYPES if key in tensors else None)
    return _decode(meta["root"], arrays)


def load(f, map_location=None, weights_only=None, **kwargs):
    """Load what :func:`save` wrote from ``f`` (a path or a binary file object opened for
    reading); tensors come back as Tensors. ``map_location`` (a device, or a str) places the
    tensors; ``weights_only`` and PyTorch's other keyword arguments are accepted: ferro files
    are always data only.

    The file is treated as untrusted: nothing in it is executed and nothing is returned unless
    all of it checks out. Arrays come back writeable, in native byte order, sharing memory with
    nothing.

    Raises:
        SerializationError: the file is not one :func:`save` writes (a plain ``.npy``, a
            pickle, a foreign or compressed zip, a truncated file, a member whose declared size
            does not match its data, a dtype other than bool/integer/float/complex, a
            malformed or too deeply nested structure, ...).
    """
    if (
        map_location is not None
        and not isinstance(map_location, dict)
        and not callable(map_location)
    ):
        from ferro.backend import parse_device

        device = parse_device(map_location)
        return _walk_tensors(load(f), lambda t: wrap(move(t._data, device)))
    if hasattr(f, "read"):
        if not (hasattr(f, "seek") and f.seekable()):
            f = io.BytesIO(f.read())
        return _load_from(getattr(f, "name", "the file object"), f)
    # A missing or unreadable path raises the usual OSError (FileNotFoundError, ...) from open.
    with open(os.fspath(f), "rb") as stream:
        return _load_from(f, stream)


def _walk_tensors(obj, fn):
    if isinstance(obj, TensorBase):
        return fn(obj)
    if isinstance(obj, dict):
        return {k: _walk_tensors(v, fn) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_walk_tensors(v, fn) for v in obj)
    return obj


def _load_from(path, f):
    try:
        return _read(path, f)
    except SerializationError:
        raise
    # What zipfile raises on a damaged file, and what crafted zip records can make it raise
    # (struct.error, NotImplementedError, RuntimeError, OSError on a seek past the end).
    except (
        OSError,
        EOFError,
        ValueError,
        struct.error,
        NotImplementedError,
        RuntimeError,
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
    ) as exc:
        raise _refuse(path, f"cannot be read: {type(exc).__name__}: {exc}") from None
