"""Op database entries for ferro/ops/pooling.py, with plain NumPy loop references (one window at a
time, PyTorch's rules spelled out: output sizes, ceil_mode, divisors, adaptive bounds).

Gradcheck samples draw distinct uniform values, so no window holds a tie within gradcheck's
step; max-pool samples include windows that start in the padding (ceil_mode), dilation, odd
sizes, batch 1 and channel 1.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

import ferro.nn.functional as F
from opdb.core import OpInfo, Sample, uniform


def _tup(v, nd):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * nd


def _out_len(n, k, s, p, d, ceil_mode):
    span = n + 2 * p - d * (k - 1) - 1
    out = (math.ceil(span / s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def _planes(x, nd):
    """Iterate over (plane index tuple) of the leading dimensions."""
    return itertools.product(*(range(n) for n in x.shape[:-nd]))


def max_pool_ref(x, nd, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """Values and flat per-plane indices of the first maximum of every window."""
    k = _tup(kernel_size, nd)
    s = _tup(stride if stride is not None else kernel_size, nd)
    p, d = _tup(padding, nd), _tup(dilation, nd)
    spatial = x.shape[-nd:]
    out = tuple(_out_len(*a, ceil_mode) for a in zip(spatial, k, s, p, d, strict=True))
    y = np.zeros(x.shape[:-nd] + out, dtype=x.dtype)
    idx = np.zeros(y.shape, dtype=np.int64)
    for lead in _planes(x, nd):
        for o in itertools.product(*(range(m) for m in out)):
            best, arg = -np.inf, -1
            for j in itertools.product(*(range(ki) for ki in k)):
                pos = [o[i] * s[i] - p[i] + j[i] * d[i] for i in range(nd)]
                if all(0 <= q < n for q, n in zip(pos, spatial, strict=True)):
                    v = x[lead + tuple(pos)]
                    if v > best:
                        best, arg = v, int(np.ravel_multi_index(pos, spatial))
            y[lead + o], idx[lead + o] = best, arg
    return y, idx


def avg_pool_ref(
    x,
    nd,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
):
    k = _tup(kernel_size, nd)
    s = _tup(stride if stride is not None else kernel_size, nd)
    p = _tup(padding, nd)
    spatial = x.shape[-nd:]
    out = tuple(
        _out_len(n, ki, si, pi, 1, ceil_mode)
        for n, ki, si, pi in zip(spatial, k, s, p, strict=True)
    )
    y = np.zeros(x.shape[:-nd] + out, dtype=x.dtype)
    for lead in _planes(x, nd):
        for o in itertools.product(*(range(m) for m in out)):
            start = [o[i] * s[i] - p[i] for i in range(nd)]
            end = [min(start[i] + k[i], spatial[i] + p[i]) for i in range(nd)]
            pool = math.prod(e - b for b, e in zip(start, end, strict=True))
            lo = [max(b, 0) for b in start]
            hi = [min(e, n) for e, n in zip(end, spatial, strict=True)]
            total = 0.0
            for pos in itertools.product(*(range(a, b) for a, b in zip(lo, hi, strict=True))):
                total += x[lead + pos]
            if divisor_override is not None:
                div = divisor_override
            elif count_include_pad:
                div = pool
            else:
                div = math.prod(b - a for a, b in zip(lo, hi, strict=True))
            y[lead + o] = total / div
    return y


def _adaptive_windows(spatial, out):
    return [
        [(o * n // m, -(-(o + 1) * n // m)) for o in range(m)]
        for n, m in zip(spatial, out, strict=True)
    ]


def adaptive_pool_ref(x, nd, output_size, reduce):
    out = _tup(output_size, nd)
    out = tuple(n if m is None else m for n, m in zip(x.shape[-nd:], out, strict=True))
    windows = _adaptive_windows(x.shape[-nd:], out)
    y = np.zeros(x.shape[:-nd] + out, dtype=x.dtype)
    for lead in _planes(x, nd):
        for o in itertools.product(*(range(m) for m in out)):
            box = tuple(slice(*windows[i][o[i]]) for i in range(nd))
            y[lead + o] = reduce(x[lead + box])
    return y


def max_unpool_ref(x, indices, nd, kernel_size, stride=None, padding=0, output_size=None):
    k = _tup(kernel_size, nd)
    s = _tup(stride if stride is not None else kernel_size, nd)
    p = _tup(padding, nd)
    if output_size is None:
        output_size = tuple(
            (n - 1) * si - 2 * pi + ki for n, si, pi, ki in zip(x.shape[-nd:], s, p, k, strict=True)
        )
    y = np.zeros(x.shape[:-nd] + tuple(output_size[-nd:]), dtype=x.dtype)
    for lead in _planes(x, nd):
        plane = y[lead].reshape(-1)
        for o in itertools.product(*(range(m) for m in x.shape[-nd:])):
            plane[indices[lead + o]] = x[lead + o]
    return y


def lp_pool_ref(x, nd, norm_type, kernel_size, stride=None, ceil_mode=False):
    """PyTorch's definition: the window average of x**p (partial ceil_mode windows divide by the
    elements they hold) times the kernel volume, to the power 1/p."""
    k = _tup(kernel_size, nd)
    avg = avg_pool_ref(x**norm_type, nd, kernel_size, stride, 0, ceil_mode)
    return (avg * math.prod(k)) ** (1.0 / norm_type)


def pixel_shuffle_ref(x, r):
    *lead, c, h, w = x.shape
    y = np.zeros((*lead, c // (r * r), h * r, w * r), dtype=x.dtype)
    for ci, hi, wi, i, j in itertools.product(
        range(c // (r * r)), range(h), range(w), range(r), range(r)
    ):
        y[..., ci, hi * r + i, wi * r + j] = x[..., ci * r * r + i * r + j, hi, wi]
    return y


def pixel_unshuffle_ref(x, r):
    *lead, c, h, w = x.shape
    y = np.zeros((*lead, c * r * r, h // r, w // r), dtype=x.dtype)
    for ci, hi, wi, i, j in itertools.product(
        range(c), range(h // r), range(w // r), range(r), range(r)
    ):
        y[..., ci * r * r + i * r + j, hi, wi] = x[..., ci, hi * r + i, wi * r + j]
    return y


# ---------------------------------------------------------------------------------------------
# Samples: (input shape, kwargs) per dimensionality.

MAX_CASES = {
    1: [
        ((2, 3, 9), dict(kernel_size=3)),
        ((1, 1, 8), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
        ((2, 2, 10), dict(kernel_size=2, stride=1, dilation=3)),
        ((3, 7), dict(kernel_size=4, stride=3, padding=2, ceil_mode=True)),
    ],
    2: [
        ((2, 3, 6, 6), dict(kernel_size=2)),
        ((1, 2, 7, 5), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
        ((2, 1, 7, 8), dict(kernel_size=(3, 2), stride=(2, 1), dilation=(2, 1))),
        ((2, 5, 5), dict(kernel_size=3, stride=1, padding=1)),
        ((1, 1, 5, 7), dict(kernel_size=2, stride=2, ceil_mode=True)),
    ],
    3: [
        ((1, 2, 4, 5, 4), dict(kernel_size=2)),
        ((2, 1, 5, 4, 5), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
        ((1, 2, 5, 5, 6), dict(kernel_size=(2, 3, 2), stride=(1, 2, 2), dilation=(2, 1, 2))),
    ],
}

AVG_CASES = {
    1: [
        ((2, 3, 9), dict(kernel_size=3)),
        ((1, 1, 8), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
        ((2, 2, 8), dict(kernel_size=4, stride=3, padding=2, count_include_pad=False)),
        ((3, 7), dict(kernel_size=2, stride=1)),
    ],
    2: [
        ((2, 3, 6, 6), dict(kernel_size=2)),
        ((1, 2, 7, 5), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
        (
            (2, 1, 7, 6),
            dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
        ),
        ((2, 5, 5), dict(kernel_size=(3, 2), stride=(1, 2), padding=(1, 0), divisor_override=5)),
    ],
    3: [
        ((1, 2, 4, 5, 4), dict(kernel_size=2)),
        ((2, 1, 5, 4, 5), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
        ((1, 1, 5, 5, 6), dict(kernel_size=(2, 3, 2), stride=1, count_include_pad=False)),
    ],
}

ADAPTIVE_CASES = {
    1: [((2, 3, 9), 4), ((1, 1, 8), 4), ((3, 7), 7), ((2, 2, 5), 8)],
    2: [((2, 3, 7, 6), (3, 4)), ((1, 2, 8, 8), 2), ((3, 5, 5), (None, 2)), ((1, 1, 4, 5), 1)],
    3: [((1, 2, 5, 4, 6), (2, 3, 4)), ((2, 1, 4, 4, 4), 2)],
}

UNPOOL_CASES = {
    1: [((2, 3, 8), dict(kernel_size=2)), ((1, 2, 9), dict(kernel_size=3, stride=3, padding=1))],
    2: [
        ((2, 3, 6, 6), dict(kernel_size=2)),
        ((1, 2, 7, 5), dict(kernel_size=2, output_size=(7, 5))),
        ((3, 6, 4), dict(kernel_size=(3, 2), stride=(3, 2), padding=(1, 0))),
    ],
    3: [((1, 2, 4, 4, 6), dict(kernel_size=2))],
}

LP_CASES = {
    1: [
        ((2, 3, 9), dict(norm_type=2, kernel_size=3)),
        ((1, 2, 8), dict(norm_type=3, kernel_size=3, stride=2, ceil_mode=True)),
    ],
    2: [
        ((2, 2, 6, 6), dict(norm_type=2, kernel_size=2)),
        ((1, 3, 7, 5), dict(norm_type=1.5, kernel_size=(3, 2), stride=(2, 1), ceil_mode=True)),
    ],
    3: [((1, 2, 4, 4, 5), dict(norm_type=2, kernel_size=2, stride=(1, 2, 2)))],
}


def _label(shape, kw):
    return f"{'x'.join(map(str, shape))}-" + ",".join(f"{k}={v}" for k, v in kw.items())


def _samples(cases, lo=-2.0, hi=2.0):
    def make(rng):
        out = [
            Sample((uniform(rng, shape, lo, hi),), dict(kw), label=_label(shape, kw))
            for shape, kw in cases
        ]
        shape, kw = cases[0]
        out.append(
            Sample((uniform(rng, shape, lo, hi),), dict(kw), noncontig=True, label="noncontig")
        )
        return out

    return make


def _unpool_samples(nd):
    def make(rng):
        out = []
        for shape, kw in UNPOOL_CASES[nd]:
            k = _tup(kw["kernel_size"], nd)
            st, p = _tup(kw.get("stride", k), nd), _tup(kw.get("padding", 0), nd)
            size = kw.get("output_size") or tuple(
                (n - 1) * a - 2 * b + c for n, a, b, c in zip(shape[-nd:], st, p, k, strict=True)
            )
            big = uniform(rng, shape[:-nd] + tuple(size))
            pool_kw = {k: v for k, v in kw.items() if k != "output_size"}
            _, idx = max_pool_ref(big, nd, **pool_kw)
            out.append(Sample((uniform(rng, idx.shape), idx), dict(kw), label=_label(shape, kw)))
        return out

    return make


def _variant(name, nd, registered):
    return registered if nd == 2 else f"{name}{nd}d"


def _entries():
    entries = []
    for nd in (1, 2, 3):
        fn = getattr(F, f"max_pool{nd}d")
        entries.append(
            OpInfo(
                _variant("max_pool", nd, "max_pool"),
                lambda x, _fn=fn, **kw: _fn(x, **kw),
                lambda x, _nd=nd, **kw: max_pool_ref(x, _nd, **kw)[0],
                _samples(MAX_CASES[nd]),
                func=f"max_pool{nd}d",
            )
        )
        fn = getattr(F, f"avg_pool{nd}d")
        entries.append(
            OpInfo(
                _variant("avg_pool", nd, "avg_pool"),
                lambda x, _fn=fn, **kw: _fn(x, **kw),
                lambda x, _nd=nd, **kw: avg_pool_ref(x, _nd, **kw),
                _samples(AVG_CASES[nd]),
                func=f"avg_pool{nd}d",
            )
        )
        for kind, reduce in (("avg", np.mean), ("max", np.max)):
            fn = getattr(F, f"adaptive_{kind}_pool{nd}d")
            cases = [(shape, dict(output_size=size)) for shape, size in ADAPTIVE_CASES[nd]]
            entries.append(
                OpInfo(
                    _variant(f"adaptive_{kind}_pool", nd, f"adaptive_{kind}_pool"),
                    lambda x, _fn=fn, **kw: _fn(x, **kw),
                    lambda x, _nd=nd, _r=reduce, **kw: adaptive_pool_ref(
                        x, _nd, kw["output_size"], _r
                    ),
                    _samples(cases),
                    func=f"adaptive_{kind}_pool{nd}d",
                )
            )
        fn = getattr(F, f"max_unpool{nd}d")
        entries.append(
            OpInfo(
                _variant("max_unpool", nd, "max_unpool"),
                lambda x, i, _fn=fn, **kw: _fn(x, i, **kw),
                lambda x, i, _nd=nd, **kw: max_unpool_ref(x, i, _nd, **kw),
                _unpool_samples(nd),
                func=f"max_unpool{nd}d",
            )
        )
        fn = getattr(F, f"lp_pool{nd}d")
        entries.append(
            OpInfo(
                f"lp_pool{nd}d",
                lambda x, _fn=fn, **kw: _fn(x, **kw),
                lambda x, _nd=nd, **kw: lp_pool_ref(x, _nd, **kw),
                # Positive inputs: x ** p is real for a fractional p, and away from |x| = 0.
                _samples(LP_CASES[nd], 0.5, 2.0),
                fwd_rtol32=1e-4,
            )
        )
    entries.append(
        OpInfo(
            "pixel_shuffle",
            F.pixel_shuffle,
            pixel_shuffle_ref,
            lambda rng: [
                Sample((uniform(rng, (2, 8, 3, 2)), 2), label="r=2"),
                Sample((uniform(rng, (9, 2, 3)), 3), label="unbatched-r=3"),
                Sample((uniform(rng, (2, 1, 4, 2, 3)), 2), label="two-lead-dims"),
                Sample((uniform(rng, (1, 3, 2, 2)), 1), label="r=1"),
                Sample((uniform(rng, (2, 4, 3, 3)), 2), noncontig=True, label="noncontig"),
            ],
        )
    )
    entries.append(
        OpInfo(
            "pixel_unshuffle",
            F.pixel_unshuffle,
            pixel_unshuffle_ref,
            lambda rng: [
                Sample((uniform(rng, (2, 2, 6, 4)), 2), label="r=2"),
                Sample((uniform(rng, (1, 6, 3)), 3), label="unbatched-r=3"),
                Sample((uniform(rng, (2, 1, 2, 4, 6)), 2), label="two-lead-dims"),
                Sample((uniform(rng, (2, 2, 4, 4)), 2), noncontig=True, label="noncontig"),
            ],
        )
    )
    return entries


ENTRIES = _entries()
