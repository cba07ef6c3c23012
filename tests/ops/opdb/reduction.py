"""Op database entries for ferro/ops/reduction.py."""

from __future__ import annotations

import math

import numpy as np

import ferro
from opdb.core import OpInfo, Sample, uniform


def _reduction_samples(rng):
    out = []
    for shape, axis, keep in [
        ((), None, False),
        ((5,), None, False),
        ((2, 3), 0, False),
        ((2, 3), 1, True),
        ((2, 3, 4), (0, 2), False),
        ((2, 3, 4), -1, True),
        ((0, 3), 1, False),
        ((2, 3), None, True),
    ]:
        out.append(
            Sample(
                (rng.uniform(-2, 2, shape),),
                {"axis": axis, "keepdims": keep},
                label=f"{shape} axis={axis} keep={keep}",
            )
        )
    out.append(
        Sample((rng.uniform(-2, 2, (3, 4)),), {"axis": 0}, noncontig=True, label="noncontig")
    )
    return out


def _np_reduce(f):
    def ref(x, axis=None, keepdims=False):
        return f(x, axis=axis, keepdims=keepdims)

    return ref


def _var_samples(rng):
    return [
        Sample((uniform(rng, (5,)),), {"axis": None, "correction": 1}, label="all"),
        Sample((uniform(rng, (2, 3)),), {"axis": 1, "correction": 0}, label="population"),
        Sample(
            (uniform(rng, (2, 3, 4)),),
            {"axis": (0, 2), "correction": 1, "keepdims": True},
            label="axes keepdims",
        ),
        Sample((uniform(rng, (3, 4)),), {"axis": 0}, noncontig=True, label="noncontig"),
    ]


def _argmax_samples(rng):
    # Distinct values (a permutation): ties would make the index a matter of convention.
    def perm(shape):
        return rng.permutation(math.prod(shape)).reshape(shape).astype(float)

    return [
        Sample((perm((5,)),), {}, label="flat"),
        Sample((perm((2, 3)),), {"axis": None, "keepdims": True}, label="flat keepdims"),
        Sample((perm((2, 3)),), {"axis": 1}, label="axis 1"),
        Sample((perm((2, 3, 4)),), {"axis": -2, "keepdims": True}, label="axis -2 keepdims"),
        Sample((perm((3, 4)),), {"axis": 0}, noncontig=True, label="noncontig"),
    ]


def _prod_samples(rng):
    with_zero = uniform(rng, (3, 4))
    with_zero[1, 2] = 0.0
    two_zeros = uniform(rng, (2, 3))
    two_zeros[0, 0] = two_zeros[0, 2] = 0.0
    return _reduction_samples(rng)[:6] + [
        Sample((with_zero,), {"axis": 1}, label="one zero"),
        Sample((two_zeros,), {"axis": None}, label="two zeros"),
    ]


def _extreme_samples(rng):
    return [
        Sample((uniform(rng, (5,)),), {"axis": 0}, label="1d"),
        Sample((uniform(rng, (3, 4)),), {"axis": 1, "keepdims": True}, label="keepdims"),
        Sample((uniform(rng, (2, 3, 4)),), {"axis": -2}, label="3d"),
        Sample((uniform(rng, (3, 4)),), {"axis": 0}, noncontig=True, label="noncontig"),
    ]


def _amax_samples(rng):
    return [
        Sample((uniform(rng, (5,)),), {"axis": None}, label="all"),
        Sample((uniform(rng, (3, 4)),), {"axis": (0, 1), "keepdims": True}, label="tuple"),
        Sample((uniform(rng, (2, 3, 4)),), {"axis": 1}, label="3d"),
        Sample((np.array([1.0, 3.0, 3.0, 2.0]),), {"axis": None}, label="tie"),
    ]


def _near_tie(x):
    # The gradient of an extreme jumps where two values tie (within any reduced group; all pairs
    # is stricter, and simpler).
    return np.diff(np.sort(x.ravel()))


def _norm_samples(rng):
    out = []
    for p in (1, 2, math.inf):
        out.append(Sample((uniform(rng, (3, 4)),), {"p": p, "axis": 1}, label=f"p={p}"))
        out.append(Sample((uniform(rng, (5,)),), {"p": p}, label=f"p={p} all"))
    return out


def _norm_ref(x, p=2, axis=None, keepdims=False):
    return (
        np.linalg.norm(x, ord=p, axis=axis, keepdims=keepdims)
        if axis is not None
        else (np.linalg.norm(x.ravel(), ord=p))
    )


def _cumsum_samples(rng):
    return [
        Sample((uniform(rng, (5,)),), {"axis": 0}, label="1d"),
        Sample((uniform(rng, (3, 4)),), {"axis": 1}, label="rows"),
        Sample((uniform(rng, (3, 4)),), {"axis": 0}, noncontig=True, label="noncontig"),
        Sample((uniform(rng, ()),), {"axis": 0}, label="0-d"),
    ]


def _logical_samples(rng):
    # Zeros among the values, so all and any differ.
    def some_zeros(shape):
        return np.where(rng.uniform(size=shape) < 0.3, 0.0, uniform(rng, shape))

    return [
        Sample((some_zeros(()),), {}, label="0-d"),
        Sample((some_zeros((0, 3)),), {"axis": 1}, label="empty"),
        Sample((some_zeros((4, 5)),), {}, label="all"),
        Sample((some_zeros((4, 5)),), {"axis": 1, "keepdims": True}, label="axis 1 keepdims"),
        Sample((some_zeros((2, 3, 4)),), {"axis": (0, 2)}, label="tuple"),
        Sample((some_zeros((3, 4)),), {"axis": 0}, noncontig=True, label="noncontig"),
    ]


def _cumprod_samples(rng):
    one_zero = uniform(rng, (3, 4))
    one_zero[1, 2] = 0.0
    two_zeros = uniform(rng, (5,))
    two_zeros[1] = two_zeros[3] = 0.0
    return _cumsum_samples(rng) + [
        Sample((one_zero,), {"axis": 1}, label="one zero"),
        Sample((two_zeros,), {"axis": 0}, label="two zeros"),
        Sample((uniform(rng, (0, 3)),), {"axis": 1}, label="empty"),
    ]


def _sort_samples(rng):
    # Distinct values: at a tie the order (and the gradient) is a matter of convention.
    def perm(shape):
        return np.asarray(rng.permutation(math.prod(shape)).reshape(shape) / 3)

    return [
        Sample((perm(()),), {}, label="0-d"),
        Sample((perm((0, 3)),), {"axis": 0}, label="empty"),
        Sample((perm((6,)),), {}, label="1d"),
        Sample((perm((3, 4)),), {"axis": 0, "descending": True}, label="descending"),
        Sample((perm((2, 3, 4)),), {"axis": -2}, label="3d"),
        Sample((perm((3, 4)),), {"axis": 1}, noncontig=True, label="noncontig"),
    ]


def _sort_ref(x, axis=-1, descending=False):
    if np.ndim(x) == 0:
        return x
    y = np.sort(x, axis=axis)
    return np.flip(y, axis) if descending else y


def _argsort_ref(x, axis=-1, descending=False):
    if np.ndim(x) == 0:
        return np.zeros((), np.int64)
    return np.argsort(-x if descending else x, axis=axis, kind="stable")


def _topk_samples(rng):
    def perm(shape):
        return np.asarray(rng.permutation(math.prod(shape)).reshape(shape) / 3)

    return [
        Sample((perm(()),), {"k": 1}, label="0-d"),
        Sample((perm((0, 3)),), {"k": 2, "axis": 1}, label="empty"),
        Sample((perm((6,)),), {"k": 3}, label="1d"),
        Sample((perm((3, 4)),), {"k": 2, "axis": 0, "largest": False}, label="smallest"),
        Sample((perm((2, 3, 4)),), {"k": 0, "axis": -1}, label="k=0"),
        Sample((perm((3, 4)),), {"k": 4, "axis": 1}, noncontig=True, label="noncontig"),
    ]


def _topk_ref(x, k, axis=-1, largest=True):
    if np.ndim(x) == 0:
        return x
    y = np.flip(np.sort(x, axis=axis), axis) if largest else np.sort(x, axis=axis)
    return np.take(y, np.arange(k), axis=axis)


def _logsumexp_ref(x, axis=None, keepdims=False):
    return np.log(np.exp(x).sum(axis=axis, keepdims=keepdims))


def _median_samples(rng):
    # Distinct values: at a tie the index (and the gradient) is a matter of convention.
    def perm(shape):
        return np.asarray(rng.permutation(math.prod(shape)).reshape(shape) / 3)

    return [
        Sample((perm((7,)),), label="all, odd"),
        Sample((perm((2, 3)),), label="all, even: the lower median"),
        Sample((perm((3, 4)),), {"axis": 1}, label="dim"),
        Sample((perm((2, 3, 4)),), {"axis": 0, "keepdims": True}, label="dim keepdim"),
        Sample((perm((3, 4)),), {"axis": 0}, noncontig=True, label="noncontig"),
    ]


def _median_ref(x, axis=None, keepdims=False):
    if axis is None:
        return np.sort(x.ravel())[(x.size - 1) // 2]
    k = (x.shape[axis] - 1) // 2
    return np.take(np.sort(x, axis=axis), [k] if keepdims else k, axis=axis)


def _kth_samples(rng):
    return [
        Sample((rng.permutation(7) / 3.0,), {"k": 3}, label="1-D"),
        Sample((rng.permutation(12).reshape(3, 4) / 3.0,), {"k": 1, "dim": 0}, label="dim 0"),
        Sample(
            (rng.permutation(24).reshape(2, 3, 4) / 3.0,),
            {"k": 4, "dim": -1, "keepdim": True},
            label="keepdim",
        ),
        Sample((np.array(1.5),), {"k": 1}, label="0-d"),
        Sample((rng.permutation(12).reshape(4, 3) / 3.0,), {"k": 2}, noncontig=True, label="nc"),
    ]


def _kth_ref(x, k, dim=-1, keepdim=False):
    if x.ndim == 0:
        return x
    return np.take(np.sort(x, axis=dim), [k - 1] if keepdim else k - 1, axis=dim)


def _with_nans(rng, all_nan_row=False):
    x = rng.permutation(24).reshape(4, 6) / 3.0
    x[0, 1] = x[2, 3] = x[2, 0] = np.nan
    if all_nan_row:
        x[3, :] = np.nan
    return x


def _nan_samples(rng):
    # An all-NaN slice gives NaN (nansum: 0), where central differences say nothing.
    return [
        Sample((_with_nans(rng, True),), {"dim": 1}, grad=False, label="rows, one all-NaN"),
        Sample((_with_nans(rng),), {"dim": 1}, label="rows"),
        Sample((_with_nans(rng),), {"dim": 0, "keepdim": True}, label="cols keepdim"),
        Sample((_with_nans(rng)[:3],), {}, label="all"),
        Sample((np.zeros((0, 3)),), {"dim": 0}, label="empty"),
        Sample((np.array(2.5),), {}, label="0-d"),
        Sample((_with_nans(rng),), {"dim": 1}, noncontig=True, label="noncontig"),
    ]


def _nanmedian_samples(rng):
    # nanmedian of an empty dim is an error, as median's; and values distinct for the index.
    return [s for s in _nan_samples(rng) if s.label != "empty"]


def _nanmedian_ref(x, dim=None, keepdim=False):
    if dim is None:
        v = np.sort(x[~np.isnan(x)])
        return v[(v.size - 1) // 2] if v.size else np.float64("nan")
    moved = np.moveaxis(x, dim, -1)
    out = np.empty(moved.shape[:-1])
    for i in np.ndindex(out.shape):
        v = np.sort(moved[i][~np.isnan(moved[i])])
        out[i] = v[(v.size - 1) // 2] if v.size else np.nan
    return np.expand_dims(out, dim) if keepdim else out


def _nanmean_ref(x, dim=None, keepdim=False):
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(
            np.nansum(x, axis=dim, keepdims=keepdim)
            / np.sum(~np.isnan(x), axis=dim, keepdims=keepdim)
        )


def _unique_consecutive_samples(rng):
    runs = np.repeat(rng.permutation(5) / 2.0, [1, 3, 2, 1, 2])
    rows = np.repeat(rng.integers(0, 2, (3, 4)).astype(float), [2, 1, 3], axis=0)
    return [
        Sample((runs,), {}, grad=False, label="1-D"),
        Sample((rows,), {"dim": 0}, grad=False, label="rows"),
        Sample((rows,), {}, grad=False, noncontig=True, label="flattened, noncontig"),
        Sample((np.zeros(0),), {}, grad=False, label="empty"),
    ]


def _unique_consecutive_ref(x, dim=None):
    rows = x.reshape(-1, 1) if dim is None else np.moveaxis(x, dim, 0).reshape(x.shape[dim], -1)
    keep = [i for i in range(len(rows)) if i == 0 or (rows[i] != rows[i - 1]).any()]
    return x.reshape(-1)[keep] if dim is None else np.take(x, keep, axis=dim)


def _histc_samples(rng):
    return [
        Sample((rng.normal(size=50),), {"bins": 7, "min": -1, "max": 1}, grad=False, label="range"),
        Sample((rng.normal(size=(4, 5)),), {"bins": 5}, grad=False, label="data range"),
        Sample((np.zeros(0),), {"bins": 3}, grad=False, label="empty"),
    ]


def _histc_ref(x, bins=100, min=0, max=0):  # noqa: A002
    lo, hi = (x.min(), x.max()) if min == max and x.size else (min, max)
    lo, hi = (lo - 1, hi + 1) if lo == hi else (lo, hi)
    return np.histogram(x, bins=bins, range=(lo, hi))[0].astype(x.dtype)


def _stacked(f):
    """A tuple-returning op as one stacked array."""

    def call(*args, **kwargs):
        a, b = f(*args, **kwargs)
        return (ferro.stack if isinstance(a, ferro.Tensor) else np.stack)([a, b])

    return call


def _np_var_mean(x, dim=None, keepdim=False):
    return np.var(x, axis=dim, ddof=1, keepdims=keepdim), np.mean(x, axis=dim, keepdims=keepdim)


def _np_std_mean(x, dim=None, keepdim=False):
    return np.std(x, axis=dim, ddof=1, keepdims=keepdim), np.mean(x, axis=dim, keepdims=keepdim)


def _quantile_samples(rng):
    q = np.array([0.0, 0.3, 0.75, 1.0])
    return [
        Sample((uniform(rng, (7,)), 0.4), label="all, one q"),
        Sample((uniform(rng, (3, 5)), q), {"dim": 1}, grad=False, label="dim, q tensor"),
        Sample((uniform(rng, (3, 5)), 0.25), {"dim": 0, "keepdim": True}, label="keepdim"),
        Sample(
            (uniform(rng, (3, 4)), 0.6), {"dim": 1, "interpolation": "midpoint"}, label="midpoint"
        ),
        Sample((uniform(rng, (3, 4)), 0.5), {"dim": 0}, noncontig=True, label="noncontig"),
    ]


def _quantile_ref(x, q, dim=None, keepdim=False, interpolation="linear"):
    return np.quantile(x, q, axis=dim, keepdims=keepdim, method=interpolation)


ENTRIES = [
    OpInfo("sum", ferro.sum, _np_reduce(np.sum), _reduction_samples, reduction=True),
    OpInfo("mean", ferro.mean, _np_reduce(np.mean), _reduction_samples, reduction=True),
    OpInfo(
        "var",
        ferro.var,
        lambda x, axis=None, correction=1, keepdims=False: np.var(
            x, axis=axis, ddof=correction, keepdims=keepdims
        ),
        _var_samples,
    ),
    OpInfo(
        "std",
        ferro.std,
        lambda x, axis=None, correction=1, keepdims=False: np.std(
            x, axis=axis, ddof=correction, keepdims=keepdims
        ),
        _var_samples,
    ),
    OpInfo("prod", ferro.prod, _np_reduce(np.prod), _prod_samples, reduction=True),
    OpInfo(
        "max_dim",
        lambda x, axis, keepdims=False: ferro.max(x, axis, keepdims)[0],
        lambda x, axis, keepdims=False: np.max(x, axis=axis, keepdims=keepdims),
        _extreme_samples,
        func="max",
    ),
    OpInfo(
        "min_dim",
        lambda x, axis, keepdims=False: ferro.min(x, axis, keepdims)[0],
        lambda x, axis, keepdims=False: np.min(x, axis=axis, keepdims=keepdims),
        _extreme_samples,
        func="min",
    ),
    *[
        OpInfo(
            name,
            getattr(ferro, name),
            lambda x, axis=None, keepdims=False, f=f: f(x, axis=axis, keepdims=keepdims),
            _argmax_samples,
            grad=False,
            same_dtype_out=False,
        )
        for name, f in [("argmax", np.argmax), ("argmin", np.argmin)]
    ],
    OpInfo(
        "amax",
        ferro.amax,
        _np_reduce(np.max),
        _amax_samples,
        reduction=True,
        kink=_near_tie,
    ),
    OpInfo(
        "amin",
        ferro.amin,
        _np_reduce(np.min),
        _amax_samples,
        reduction=True,
        kink=_near_tie,
    ),
    OpInfo("logsumexp", ferro.logsumexp, _logsumexp_ref, _reduction_samples, reduction=True),
    OpInfo("norm", ferro.norm, _norm_ref, _norm_samples),
    OpInfo(
        "cumsum",
        ferro.cumsum,
        lambda x, axis: np.cumsum(x, axis=axis).reshape(np.shape(x) or (1,)).reshape(np.shape(x)),
        _cumsum_samples,
    ),
    *[
        OpInfo(
            name,
            getattr(ferro, name),
            lambda x, axis=None, keepdims=False, f=f: np.asarray(
                f(x, axis=axis, keepdims=keepdims)
            ),
            _logical_samples,
            grad=False,
            same_dtype_out=False,
        )
        for name, f in [("all", np.all), ("any", np.any)]
    ],
    OpInfo(
        "cumprod",
        ferro.cumprod,
        lambda x, axis: np.cumprod(x, axis=axis).reshape(np.shape(x)),
        _cumprod_samples,
    ),
    OpInfo(
        "sort",
        lambda x, axis=-1, descending=False: ferro.sort(x, axis, descending).values,
        _sort_ref,
        _sort_samples,
    ),
    OpInfo(
        "topk",
        lambda x, k, axis=-1, largest=True: ferro.topk(x, k, axis, largest).values,
        _topk_ref,
        _topk_samples,
    ),
    OpInfo(
        "argsort",
        lambda x, axis=-1, descending=False: ferro.argsort(x, axis, descending),
        _argsort_ref,
        _sort_samples,
        grad=False,
        same_dtype_out=False,
    ),
    OpInfo(
        "median",
        lambda x, axis=None, keepdims=False: (
            ferro.median(x) if axis is None else ferro.median(x, axis, keepdims).values
        ),
        _median_ref,
        _median_samples,
    ),
    OpInfo(
        "kthvalue",
        lambda x, k, dim=-1, keepdim=False: ferro.kthvalue(x, k, dim, keepdim).values,
        _kth_ref,
        _kth_samples,
    ),
    OpInfo(
        "nanmedian",
        lambda x, dim=None, keepdim=False: (
            ferro.nanmedian(x) if dim is None else ferro.nanmedian(x, dim, keepdim).values
        ),
        _nanmedian_ref,
        _nanmedian_samples,
    ),
    OpInfo(
        "nansum",
        ferro.nansum,
        lambda x, dim=None, keepdim=False: np.asarray(np.nansum(x, axis=dim, keepdims=keepdim)),
        _nan_samples,
    ),
    OpInfo("nanmean", ferro.nanmean, _nanmean_ref, _nan_samples),
    OpInfo(
        "unique_consecutive",
        ferro.unique_consecutive,
        _unique_consecutive_ref,
        _unique_consecutive_samples,
        grad=False,
    ),
    OpInfo("histc", ferro.histc, _histc_ref, _histc_samples, grad=False),
    OpInfo(
        "count_nonzero",
        ferro.count_nonzero,
        lambda x, dim=None: np.asarray(np.count_nonzero(x, axis=dim)),
        lambda rng: [
            Sample((rng.integers(0, 2, (3, 4)) * 1.0,), grad=False, label="all"),
            Sample((rng.integers(0, 2, (3, 4)) * 1.0, 1), grad=False, label="dim"),
            Sample((rng.integers(0, 2, (2, 3, 2)) * 1.0, (0, 2)), grad=False, label="dims"),
            Sample((np.zeros((0, 2)), 0), grad=False, label="empty"),
        ],
        grad=False,
        same_dtype_out=False,
    ),
    OpInfo(
        "aminmax",
        lambda x, dim=None, keepdim=False: ferro.stack(ferro.aminmax(x, dim=dim, keepdim=keepdim)),
        lambda x, dim=None, keepdim=False: np.stack(
            [x.min(axis=dim, keepdims=keepdim), x.max(axis=dim, keepdims=keepdim)]
        ),
        lambda rng: [
            Sample((rng.permutation(12).reshape(3, 4) / 3.0,), label="all"),
            Sample((rng.permutation(12).reshape(3, 4) / 3.0, 1), label="dim"),
            Sample((rng.permutation(12).reshape(3, 4) / 3.0, 0, True), label="keepdim"),
            Sample((np.array(0.5),), label="0-d"),
            Sample((rng.permutation(12).reshape(4, 3) / 3.0, 0), noncontig=True, label="nc"),
        ],
    ),
    *(
        OpInfo(
            name,
            _stacked(getattr(ferro, name)),
            _stacked(lambda x, dim=None, keepdim=False, _f=f: _f(x, dim, keepdim)),
            lambda rng: [
                Sample((uniform(rng, (3, 4)),), label="all"),
                Sample((uniform(rng, (3, 4)), 1), label="dim"),
                Sample((uniform(rng, (2, 3, 4)), (0, 2)), {"keepdim": True}, label="dims keepdim"),
                Sample((uniform(rng, (4, 3)), 0), noncontig=True, label="noncontig"),
            ],
        )
        for name, f in (("var_mean", _np_var_mean), ("std_mean", _np_std_mean))
    ),
    OpInfo(
        "quantile",
        ferro.quantile,
        _quantile_ref,
        _quantile_samples,
    ),
    OpInfo(
        "isin",
        lambda e, t, invert=False: ferro.isin(e, t, invert=invert),
        lambda e, t, invert=False: np.isin(e, t, invert=invert),
        lambda rng: [
            Sample((rng.integers(0, 5, (3, 4)) * 1.0, np.array([1.0, 3.0])), grad=False),
            Sample((np.arange(5.0), np.array([0.0, 9.0])), {"invert": True}, grad=False),
            Sample((np.zeros((0, 2)), np.array([0.0])), grad=False, label="empty"),
        ],
        grad=False,
        same_dtype_out=False,
    ),
    OpInfo(
        "bincount",
        lambda x, w=None, minlength=0: ferro.bincount(x, w, minlength),
        lambda x, w=None, minlength=0: np.bincount(x, w, minlength),
        lambda rng: [
            Sample((np.array([0, 3, 3, 1]),), grad=False, label="counts"),
            Sample((np.array([2, 0, 2]), np.array([0.5, 1.0, 2.0])), grad=False, label="weights"),
            Sample((np.zeros(0, np.int64),), {"minlength": 3}, grad=False, label="empty"),
        ],
        grad=False,
        same_dtype_out=False,
    ),
]
