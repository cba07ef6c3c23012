"""How a tensor prints: PyTorch's format, so a tutorial's output reads the same on ferro.

``tensor([1.5000, 2.2500])``, not NumPy's ``[1.5 , 2.25]``: floats with ``precision`` decimals
(4), integral floats as ``3.``, scientific notation when the largest nonzero magnitude is over
1e8, the ratio of the largest to the smallest over 1000, or the smallest under 1e-4; every
element of one tensor in one width; more than ``threshold`` elements summarised with ``...``
keeping ``edgeitems`` at each end of every dimension; rows wrapped at ``linewidth``; the dtype
shown unless it is the default float dtype, int64 or bool; ``device=``, ``grad_fn=`` and
``requires_grad=True`` after it, on a new line when the line would pass ``linewidth``.
:func:`set_printoptions` takes PyTorch's arguments and profiles.
"""

from __future__ import annotations

import math

import numpy as np

from ferro.errors import ArgumentError

_PROFILES = {
    "default": {"precision": 4, "threshold": 1000, "edgeitems": 3, "linewidth": 80},
    "short": {"precision": 2, "threshold": 1000, "edgeitems": 2, "linewidth": 80},
    "full": {"precision": 4, "threshold": math.inf, "edgeitems": 3, "linewidth": 80},
}
_OPTS = {**_PROFILES["default"], "sci_mode": None}


def set_printoptions(
    precision=None, threshold=None, edgeitems=None, linewidth=None, profile=None, sci_mode=None
) -> None:
    """PyTorch's ``torch.set_printoptions``: ``profile`` ("default", "short", "full") first,
    then each option given; ``sci_mode`` True/False forces scientific notation on or off, None
    lets each tensor choose.

    Example:
        >>> ferro.set_printoptions(precision=2)
        >>> ferro.tensor([1.0 / 3])
        tensor([0.33])
        >>> ferro.set_printoptions(profile="default")
    """
    if profile is not None:
        if profile not in _PROFILES:
            raise ArgumentError(
                f"set_printoptions: profile must be one of {sorted(_PROFILES)}, got {profile!r}"
            )
        _OPTS.update(_PROFILES[profile])
    for name, value in (
        ("precision", precision),
        ("threshold", threshold),
        ("edgeitems", edgeitems),
        ("linewidth", linewidth),
    ):
        if value is not None:
            if value < 0:
                raise ArgumentError(f"set_printoptions: {name} must be >= 0, got {value}")
            _OPTS[name] = value
    _OPTS["sci_mode"] = sci_mode


def get_printoptions() -> dict:
    """The current print options, as :func:`set_printoptions` takes them."""
    return dict(_OPTS)


class _Formatter:
    """One width and one notation for every element of a tensor (PyTorch's rules)."""

    def __init__(self, values: np.ndarray):
        self.floating = values.dtype.kind == "f"
        self.int_mode, self.sci_mode, self.width = True, False, 1
        p = _OPTS["precision"]
        if not self.floating:
            self.width = max((len(str(v)) for v in values.tolist()), default=1)
            return
        finite = values[np.isfinite(values) & (values != 0)].astype(np.float64)
        if finite.size == 0:
            return
        big, small = np.abs(finite).max(), np.abs(finite).min()
        self.int_mode = bool(np.all(finite == np.ceil(finite)))
        self.sci_mode = _OPTS["sci_mode"]
        if self.sci_mode is None:
            self.sci_mode = bool(big / small > 1000.0 or big > 1.0e8 or small < 1.0e-4)
        if self.sci_mode:
            spec, extra = f".{p}e", 0
        elif self.int_mode:
            spec, extra = ".0f", 1  # the "." added to each integral float
        else:
            spec, extra = f".{p}f", 0
        self.width = max(len(format(v, spec)) + extra for v in finite.tolist())

    def format(self, value) -> str:
        if not self.floating:
            s = str(value)
        elif self.sci_mode:
            s = format(value, f".{_OPTS['precision']}e")
        elif self.int_mode:
            s = f"{value:.0f}" + ("" if math.isinf(value) or math.isnan(value) else ".")
        else:
            s = format(value, f".{_OPTS['precision']}f")
        return s.rjust(self.width)


def _summarized(a: np.ndarray, edge: int) -> np.ndarray:
    # The elements that are printed: edgeitems at each end of every dimension.
    if a.ndim == 0:
        return a.reshape(1)
    if a.shape[0] > 2 * edge:
        a = np.concatenate([a[:edge], a[-edge:]]) if edge else a[:0]
    return np.concatenate([_summarized(r, edge) for r in a]) if a.ndim > 1 and len(a) else a.ravel()


def _vector(a: np.ndarray, indent: int, summarize: bool, fmt: _Formatter) -> str:
    edge = _OPTS["edgeitems"]
    per_line = max(1, int((_OPTS["linewidth"] - indent) // (fmt.width + 2)))
    if summarize and not edge:
        data = ["..."]
    elif summarize and a.shape[0] > 2 * edge:
        data = [fmt.format(v) for v in a[:edge].tolist()] + [" ..."]
        data += [fmt.format(v) for v in a[-edge:].tolist()]
    else:
        data = [fmt.format(v) for v in a.tolist()]
    lines = [", ".join(data[i : i + per_line]) for i in range(0, len(data), per_line)]
    return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"


def _nested(a: np.ndarray, indent: int, summarize: bool, fmt: _Formatter) -> str:
    if a.ndim == 0:
        return fmt.format(a.item())
    if a.ndim == 1:
        return _vector(a, indent, summarize, fmt)
    edge = _OPTS["edgeitems"]
    if summarize and a.shape[0] > 2 * edge:
        rows = [_nested(a[i], indent + 1, summarize, fmt) for i in range(edge)] + ["..."]
        rows += [_nested(a[i], indent + 1, summarize, fmt) for i in range(len(a) - edge, len(a))]
    else:
        rows = [_nested(r, indent + 1, summarize, fmt) for r in a]
    return "[" + ("," + "\n" * (a.ndim - 1) + " " * (indent + 1)).join(rows) + "]"


def tensor_repr(data: np.ndarray, device: str | None, suffixes: list[str], default_float) -> str:
    """``tensor(...)`` for host ``data``: ``device='...'`` when given, the size and dtype that
    PyTorch shows, then ``suffixes`` (``grad_fn=<...>``, ``requires_grad=True``)."""
    prefix, indent = "tensor(", len("tensor(")
    lead = [] if device is None else [f"device='{device}'"]
    if data.size == 0:
        if data.ndim != 1:
            lead.append(f"size={tuple(data.shape)}")
        if data.dtype != default_float:
            lead.append(f"dtype=ferro.{data.dtype.name}")
        body = "[]"
    else:
        if data.dtype not in (default_float, np.int64, np.bool_):
            lead.append(f"dtype=ferro.{data.dtype.name}")
        summarize = data.size > _OPTS["threshold"]
        shown = _summarized(data, _OPTS["edgeitems"]) if summarize else data.reshape(-1)
        body = _nested(data, indent, summarize, _Formatter(shown))
    out = prefix + body
    last = len(out) - out.rfind("\n") + 1
    for s in lead + suffixes:
        if last + len(s) + 2 > _OPTS["linewidth"]:
            out += ",\n" + " " * indent + s
            last = indent + len(s)
        else:
            out += ", " + s
            last += len(s) + 2
    return out + ")"
