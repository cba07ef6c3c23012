"""Op database entries for ferro/ops/shape.py."""

from __future__ import annotations

import numpy as np

import ferro
from opdb.core import OpInfo, Sample, unary, uniform


def _reshape_samples(rng):
    return [
        Sample((rng.normal(size=(2, 3)),), {"shape": (3, 2)}, label="2x3->3x2"),
        Sample((rng.normal(size=(2, 3)),), {"shape": (-1,)}, label="flatten"),
        Sample((rng.normal(size=()),), {"shape": (1, 1)}, label="0-d"),
        Sample((rng.normal(size=(0, 3)),), {"shape": (3, 0)}, label="empty"),
        Sample((rng.normal(size=(3, 4)),), {"shape": (2, 6)}, noncontig=True, label="noncontig"),
    ]


def _permute_samples(rng):
    return [
        Sample((rng.normal(size=(2, 3, 4)),), {"dims": (2, 0, 1)}, label="3d"),
        Sample((rng.normal(size=(2, 3)),), {"dims": (1, 0)}, label="2d"),
        Sample((rng.normal(size=()),), {"dims": ()}, label="0-d"),
        Sample((rng.normal(size=(3, 4)),), {"dims": (1, 0)}, noncontig=True, label="noncontig"),
    ]


def _broadcast_samples(rng):
    return [
        Sample((uniform(rng, (3, 1)),), {"shape": (2, 3, 4)}, label="expand"),
        Sample((uniform(rng, ()),), {"shape": (2, 2)}, label="0-d"),
        Sample((uniform(rng, (4,)),), {"shape": (0, 4)}, label="empty"),
    ]


def _cat_samples(rng):
    return [
        Sample((uniform(rng, (2, 3)), uniform(rng, (4, 3))), {"dim": 0}, label="dim0"),
        Sample(
            (uniform(rng, (2, 3)), uniform(rng, (2, 1)), uniform(rng, (2, 2))),
            {"dim": -1},
            label="3 parts",
        ),
        Sample((uniform(rng, (2, 3)), uniform(rng, (0, 3))), {"dim": 0}, label="empty part"),
        Sample((uniform(rng, (2, 3)), None), {"dim": 1}, same=(1,), label="f(x,x)"),
    ]


def _stack_samples(rng):
    return [
        Sample((uniform(rng, (2, 3)), uniform(rng, (2, 3))), {"dim": 0}, label="dim0"),
        Sample((uniform(rng, ()), uniform(rng, ())), {"dim": 0}, label="0-d"),
        Sample((uniform(rng, (2, 3)), None), {"dim": -1}, same=(1,), label="f(x,x)"),
    ]


def _split_fn(x, size, dim):
    pieces = ferro.split(x, size, dim)
    return ferro.cat([p * float(i + 1) for i, p in enumerate(pieces)], dim)


def _split_ref(x, size, dim):
    n = x.shape[dim]
    bounds = list(range(size, n, size)) if isinstance(size, int) else list(np.cumsum(size)[:-1])
    pieces = np.split(x, bounds, axis=dim)
    return np.concatenate([p * float(i + 1) for i, p in enumerate(pieces)], axis=dim)


def _split_samples(rng):
    return [
        Sample((uniform(rng, (5, 3)),), {"size": 2, "dim": 0}, label="by size"),
        Sample((uniform(rng, (2, 6)),), {"size": [1, 3, 2], "dim": 1}, label="sections"),
    ]


def _unbind_fn(x, dim, used=None):
    # Weight each slice differently, so a slice's gradient landing elsewhere is caught.
    pieces = ferro.ops.shape.unbind(x, dim)[:used]
    return ferro.stack([p * float(i + 1) for i, p in enumerate(pieces)], dim)


def _unbind_ref(x, dim, used=None):
    pieces = [np.take(x, i, axis=dim) for i in range(x.shape[dim])][:used]
    return np.stack([p * float(i + 1) for i, p in enumerate(pieces)], axis=dim)


def _unbind_samples(rng):
    return [
        Sample((uniform(rng, (4, 3)),), {"dim": 0}, label="rows"),
        Sample((uniform(rng, (2, 3, 4)),), {"dim": -1}, label="last dim"),
        Sample((uniform(rng, (5,)),), {"dim": 0}, label="0-d slices"),
        Sample((uniform(rng, (4, 2)),), {"dim": 0, "used": 2}, label="unused slices"),
    ]


def _first_piece(x):
    return ferro.split(x, 2, 0)[0] * 3.0


_BASIC_INDEXES = [
    (1,),
    (slice(None), slice(None, None, -1)),
    (None, Ellipsis, slice(1, 3)),
    (-1, 2),
    (slice(0, 0),),
]


def _getitem_samples(rng):
    return [
        Sample((uniform(rng, (3, 4)),), {"index": idx}, label=repr(idx)) for idx in _BASIC_INDEXES
    ]


def _advanced_samples(rng):
    x = uniform(rng, (4, 3))
    return [
        Sample((x,), {"index": (np.array([0, 2, 2, 0]),)}, label="repeated rows"),
        Sample((x,), {"index": (np.array([[1, 1], [3, 0]]), np.array([0, 2]))}, label="pairs"),
        Sample((x,), {"index": (x > 0,)}, label="bool mask"),
        Sample((x,), {"index": (slice(None), np.array([2, 2, 0]))}, label="mixed"),
    ]


def _index_select_samples(rng):
    return [
        Sample((uniform(rng, (4, 3)),), {"dim": 0, "index": np.array([3, 0, 3])}, label="repeat"),
        Sample(
            (uniform(rng, (2, 5)),),
            {"dim": 1, "index": np.array([], dtype=np.int64)},
            label="empty",
        ),
    ]


def _gather_samples(rng):
    return [
        Sample(
            (uniform(rng, (3, 4)),),
            {"dim": 1, "index": np.array([[0, 0], [3, 1], [2, 2]])},
            label="dim1 repeats",
        ),
        Sample(
            (uniform(rng, (3, 4)),), {"dim": 0, "index": np.array([[2, 0, 1, 1]])}, label="dim0"
        ),
    ]


def _gather_ref(x, dim, index):
    out = np.empty(index.shape)
    for pos in np.ndindex(*index.shape):
        src = list(pos)
        src[dim] = index[pos]
        out[pos] = x[tuple(src)]
    return out


def _scatter_samples(rng):
    # Distinct targets along dim, so the result does not depend on the order of writes.
    return [
        Sample(
            (uniform(rng, (3, 4)), uniform(rng, (3, 2))),
            {"dim": 1, "index": np.array([[0, 3], [1, 2], [3, 0]])},
            label="tensor src",
        ),
        Sample(
            (uniform(rng, (3, 4)), 0.5),
            {"dim": 0, "index": np.array([[2, 0, 1, 1]])},
            label="scalar src",
        ),
    ]


def _scatter_ref(x, src, dim, index, add=False):
    out = x.copy()
    for pos in np.ndindex(*index.shape):
        dst = list(pos)
        dst[dim] = index[pos]
        v = src[pos] if hasattr(src, "shape") else src
        if add:
            out[tuple(dst)] += v
        else:
            out[tuple(dst)] = v
    return out


def _scatter_add_samples(rng):
    return [
        Sample(
            (uniform(rng, (3, 4)), uniform(rng, (3, 3))),
            {"dim": 1, "index": np.array([[0, 0, 3], [1, 2, 1], [3, 3, 3]])},
            label="repeats",
        ),
    ]


def _masked_fill_samples(rng):
    x = uniform(rng, (3, 4))
    return [
        Sample((x, x > 0.5, 0.25), label="scalar"),
        Sample((x, rng.random((4,)) > 0.5, uniform(rng, ())), label="0-d tensor value"),
    ]


def _index_put_ref(x, v, index, accumulate=False):
    out = x.copy()
    if accumulate:
        np.add.at(out, index, v)
    else:
        out[index] = v
    return out


def _index_put_samples(rng):
    x = uniform(rng, (4, 3))
    return [
        Sample((x, uniform(rng, (2, 3))), {"index": (slice(1, 3),)}, label="rows"),
        Sample((x, uniform(rng, (1,))), {"index": (slice(None, None, 2), 1)}, label="broadcast"),
        Sample((x, uniform(rng, ())), {"index": (x > 0,)}, label="bool mask, 0-d value"),
        Sample(
            (x, uniform(rng, (3, 3))),
            {"index": (np.array([0, 2, 0]),), "accumulate": True},
            label="accumulate repeats",
        ),
        Sample(
            (x, uniform(rng, (2,))),
            {"index": (np.array([3, 1]), np.array([0, 2]))},
            label="pairs",
        ),
        Sample((x, 0.5), {"index": (Ellipsis, slice(0, 1))}, label="scalar value"),
    ]


def _index_add_ref(x, src, dim, index, alpha=1):
    out = x.copy()
    np.add.at(out, (slice(None),) * dim + (index,), alpha * src)
    return out


def _index_copy_ref(x, src, dim, index):
    out = x.copy()
    out[(slice(None),) * dim + (index,)] = src
    return out


def _masked_scatter_ref(x, src, mask):
    out = x.copy()
    m = np.broadcast_to(mask, x.shape)
    out[m] = src.reshape(-1)[: int(m.sum())]
    return out


def _pad_samples(rng):
    out = []
    for mode in ("constant", "reflect", "replicate", "circular"):
        out.append(
            Sample((uniform(rng, (2, 3, 4)),), {"pad": (1, 2), "mode": mode}, label=f"{mode} 1d")
        )
        out.append(
            Sample((uniform(rng, (3, 4)),), {"pad": (2, 1, 1, 2), "mode": mode}, label=f"{mode} 2d")
        )
    # Several padded slices folding onto one element: the edge (replicate) and a whole period
    # each side (circular).
    out.append(
        Sample((uniform(rng, (2, 2)),), {"pad": (3, 2), "mode": "replicate"}, label="edge x3")
    )
    out.append(
        Sample((uniform(rng, (3, 3)),), {"pad": (3, 3), "mode": "circular"}, label="wrap x2")
    )
    return out


def _pad_ref(x, pad, mode="constant", value=0.0):
    widths = [(0, 0)] * x.ndim
    for k in range(len(pad) // 2):
        widths[x.ndim - 1 - k] = (pad[2 * k], pad[2 * k + 1])
    np_mode = {
        "constant": "constant",
        "reflect": "reflect",
        "replicate": "edge",
        "circular": "wrap",
    }
    np_mode = np_mode[mode]
    return np.pad(x, widths, mode=np_mode)


def _tile_samples(rng):
    return [
        Sample((uniform(rng, (2, 3)),), {"reps": (2, 1)}, label="rows"),
        Sample((uniform(rng, (3,)),), {"reps": (2, 2)}, label="adds a dim"),
        Sample((uniform(rng, (2, 2)),), {"reps": (0, 1)}, label="zero"),
    ]


def _flip_samples(rng):
    return [
        Sample((uniform(rng, (3, 4)),), {"dims": (0,)}, label="dim0"),
        Sample((uniform(rng, (2, 3, 4)),), {"dims": (0, 2)}, label="two dims"),
    ]


def _roll_samples(rng):
    return [
        Sample((uniform(rng, (3, 4)),), {"shifts": 1, "dims": 1}, label="one dim"),
        Sample((uniform(rng, (3, 4)),), {"shifts": (2, -1), "dims": (0, 1)}, label="two dims"),
        Sample((uniform(rng, (3, 4)),), {"shifts": 5, "dims": None}, label="flattened"),
    ]


def _embedding_samples(rng):
    return [
        Sample((uniform(rng, (5, 3)),), {"indices": np.array([[0, 4], [4, 4]])}, label="repeats"),
        # padding_idx's row is used but gets no gradient (by definition): no gradcheck here;
        # test_op_semantics.py checks that row's gradient is zero.
        Sample(
            (uniform(rng, (5, 3)),),
            {"indices": np.array([1, 2, 2]), "padding_idx": 2},
            grad=False,
            label="padding_idx",
        ),
    ]


def _embedding_ref(w, indices, padding_idx=None):
    return w[indices]


def _triangle_samples(rng):
    return [
        Sample((uniform(rng, (4, 4)),), {}, label="square"),
        Sample((uniform(rng, (3, 5)),), {"diagonal": 1}, label="above"),
        Sample((uniform(rng, (2, 4, 3)),), {"diagonal": -1}, label="batched below"),
        Sample((uniform(rng, (0, 3)),), {}, label="empty"),
        Sample((uniform(rng, (3, 4)),), {"diagonal": 2}, noncontig=True, label="noncontig"),
    ]


def _diagonal_samples(rng):
    return [
        Sample((uniform(rng, (4, 4)),), {}, label="square"),
        Sample((uniform(rng, (3, 5)),), {"offset": 1}, label="above"),
        Sample((uniform(rng, (3, 5)),), {"offset": -2}, label="below"),
        Sample((uniform(rng, (2, 3, 4)),), {"dim1": 2, "dim2": 0}, label="3d dims"),
        Sample((uniform(rng, (0, 3)),), {}, label="empty"),
        Sample((uniform(rng, (3, 4)),), {"offset": 1}, noncontig=True, label="noncontig"),
    ]


def _diag_samples(rng):
    return [
        Sample((uniform(rng, (3,)),), {}, label="1-D"),
        Sample((uniform(rng, (3,)),), {"diagonal": -1}, label="1-D below"),
        Sample((uniform(rng, (0,)),), {}, label="empty"),
        Sample((uniform(rng, (3, 4)),), {"diagonal": 1}, label="2-D above"),
        Sample((uniform(rng, (3, 4)),), {}, noncontig=True, label="noncontig"),
    ]


def _movedim_samples(rng):
    return [
        Sample((uniform(rng, (2, 3, 4)),), {"source": 0, "destination": -1}, label="one"),
        Sample((uniform(rng, (2, 3, 4)),), {"source": (0, 1), "destination": (2, 0)}, label="two"),
        Sample((uniform(rng, (0, 3)),), {"source": 1, "destination": 0}, label="empty"),
        Sample((uniform(rng, (3, 4)),), {"source": 0, "destination": 1}, noncontig=True),
    ]


def _swap_samples(rng):
    return [
        Sample((uniform(rng, (2, 3, 4)),), {"a": 0, "b": 2}, label="3d"),
        Sample((uniform(rng, (0, 3)),), {"a": 1, "b": 0}, label="empty"),
        Sample((uniform(rng, (3, 4)),), {"a": -1, "b": 0}, noncontig=True, label="noncontig"),
    ]


def _masked_select_samples(rng):
    x = uniform(rng, (3, 4))
    return [
        Sample((x, x > 0.5), label="same shape"),
        Sample((x, rng.random((4,)) > 0.5), label="broadcast mask"),
        Sample((uniform(rng, (4,)), rng.random((3, 1)) > 0.5), label="broadcast x"),
        Sample((uniform(rng, ()), np.array(True)), label="0-d"),
        Sample((uniform(rng, (0, 4)), np.zeros((0, 4), bool)), label="empty"),
    ]


def _masked_select_ref(x, mask):
    shape = np.broadcast_shapes(x.shape, mask.shape)
    return np.broadcast_to(x, shape)[np.broadcast_to(mask, shape)]


def _nonzero_samples(rng):
    def some_zeros(shape):
        return np.where(rng.random(shape) < 0.4, 0.0, uniform(rng, shape))

    return [
        Sample((some_zeros(()),), label="0-d"),
        Sample((some_zeros((0, 3)),), label="empty"),
        Sample((some_zeros((6,)),), label="1d"),
        Sample((some_zeros((3, 4)),), noncontig=True, label="noncontig"),
        Sample((some_zeros((2, 3, 4)),), label="3d"),
    ]


def _weighted_sum(outs):
    # Weight each output differently, so a gradient landing on the wrong input is caught.
    total = outs[0]
    for i, o in enumerate(outs[1:]):
        total = total + o * float(i + 2)
    return total


def _broadcast_tensors_samples(rng):
    return [
        Sample((uniform(rng, (3, 1)), uniform(rng, (4,))), label="pair"),
        Sample((uniform(rng, ()), uniform(rng, (2, 3)), uniform(rng, (1, 3))), label="three"),
        Sample((uniform(rng, (0, 1)), uniform(rng, (3,))), label="empty"),
    ]


def _meshgrid_samples(rng):
    return [
        Sample((uniform(rng, (3,)), uniform(rng, (2,))), {"indexing": "ij"}, label="ij"),
        Sample((uniform(rng, (3,)), uniform(rng, (2,))), {"indexing": "xy"}, label="xy"),
        Sample(
            (uniform(rng, (2,)), uniform(rng, ()), uniform(rng, (4,))),
            {"indexing": "xy"},
            label="three with 0-d",
        ),
        Sample((uniform(rng, (0,)), uniform(rng, (2,))), {"indexing": "ij"}, label="empty"),
    ]


def _cartesian_prod_samples(rng):
    return [
        Sample((uniform(rng, (3,)),), label="one"),
        Sample((uniform(rng, (3,)), uniform(rng, (2,))), label="two"),
        Sample((uniform(rng, (2,)), uniform(rng, (1,)), uniform(rng, (3,))), label="three"),
        Sample((uniform(rng, (0,)), uniform(rng, (2,))), label="empty"),
    ]


def _cartesian_prod_ref(*xs):
    if len(xs) == 1:
        return xs[0]
    grids = np.meshgrid(*xs, indexing="ij")
    return np.stack([g.reshape(-1) for g in grids], axis=1)


def _block_diag_ref(*blocks):
    blocks = [np.reshape(b, (1, -1)) if b.ndim < 2 else b for b in blocks]
    out = np.zeros((sum(b.shape[0] for b in blocks), sum(b.shape[1] for b in blocks)))
    r = c = 0
    for b in blocks:
        out[r : r + b.shape[0], c : c + b.shape[1]] = b
        r, c = r + b.shape[0], c + b.shape[1]
    return out


def _triangle_indices_samples(rng):
    return [
        Sample((4, 3), grad=False, label="tall"),
        Sample((3, 5, 1), grad=False, label="offset 1"),
        Sample((4, 4, -2), grad=False, label="offset -2"),
        Sample((0, 3), grad=False, label="empty"),
    ]


def _stack_like_samples(_):
    def make(rng):
        return [
            Sample((uniform(rng, (2, 3)), uniform(rng, (2, 3))), label="2-D"),
            Sample((uniform(rng, (3,)), uniform(rng, (3,))), label="1-D"),
            Sample((uniform(rng, (2, 2, 3)), uniform(rng, (2, 2, 3))), label="3-D"),
            Sample((uniform(rng, (2, 3)), None), same=(1,), label="f(x,x)"),
            Sample((uniform(rng, (3, 4)), uniform(rng, (3, 4))), noncontig=True, label="nc"),
        ]

    return make


def _listed(f):
    return lambda *xs: f(list(xs))


def _all_flat(f, join):
    """``f``'s tensor or tuple of tensors as one flat tensor (its every element checked)."""

    def call(*xs):
        out = f(*xs)
        return join(out if isinstance(out, tuple | list) else (out,))

    return call


def _unflatten_ref(x, dim, sizes):
    a = dim % x.ndim
    return x.reshape(x.shape[:a] + tuple(sizes) + x.shape[a + 1 :])


def _atleast_samples(rng):
    return [
        Sample((uniform(rng, ()),), label="0-d"),
        Sample((uniform(rng, (3,)),), label="1-D"),
        Sample((uniform(rng, (2, 3)),), label="2-D"),
        Sample((uniform(rng, ()), uniform(rng, (2,)), uniform(rng, (2, 2, 2))), label="several"),
        Sample((uniform(rng, (3, 4)),), noncontig=True, label="noncontig"),
    ]


def _ndim_samples(ndim, at_most=4):
    def make(rng):
        shapes = [s for s in [(), (4,), (2, 3), (2, 3, 2), (0, 2)] if ndim <= len(s) <= at_most]
        out = [Sample((uniform(rng, s),), label=f"shape{s}") for s in shapes]
        out.append(Sample((uniform(rng, (3, 4)),), noncontig=True, label="noncontig"))
        return out

    return make


ENTRIES = [
    OpInfo(
        "reshape",
        lambda x, shape: ferro.reshape(x, shape),
        lambda x, shape: np.reshape(x, shape),
        _reshape_samples,
    ),
    OpInfo(
        "permute",
        lambda x, dims: ferro.permute(x, dims),
        lambda x, dims: np.transpose(x, dims),
        _permute_samples,
    ),
    unary("detach", lambda x: ferro.detach(x) * 1.0, lambda x: x, grad=False),
    OpInfo(
        "broadcast_to",
        lambda x, shape: ferro.broadcast_to(x, shape),
        lambda x, shape: np.broadcast_to(x, shape),
        _broadcast_samples,
    ),
    OpInfo(
        "cat",
        lambda *xs, dim: ferro.cat(xs, dim),
        lambda *xs, dim: np.concatenate(xs, axis=dim),
        _cat_samples,
    ),
    OpInfo(
        "stack",
        lambda *xs, dim: ferro.stack(xs, dim),
        lambda *xs, dim: np.stack(xs, axis=dim),
        _stack_samples,
    ),
    OpInfo("split", _split_fn, _split_ref, _split_samples),
    OpInfo("unbind", _unbind_fn, _unbind_ref, _unbind_samples),
    OpInfo(
        "split_one_piece",
        _first_piece,
        lambda x: np.split(x, [2])[0] * 3.0,
        lambda rng: [Sample((uniform(rng, (5, 2)),), label="unused pieces")],
        func="split",
    ),
    OpInfo("getitem", lambda x, index: x[index], lambda x, index: x[index], _getitem_samples),
    OpInfo(
        "getitem_advanced",
        lambda x, index: x[index],
        lambda x, index: x[index],
        _advanced_samples,
        func="getitem",
    ),
    OpInfo(
        "narrow",
        lambda x: ferro.narrow(x, 1, 1, 2),
        lambda x: x[:, 1:3],
        lambda rng: [Sample((uniform(rng, (3, 4)),))],
    ),
    OpInfo(
        "select",
        lambda x: ferro.select(x, 0, -1),
        lambda x: x[-1],
        lambda rng: [Sample((uniform(rng, (3, 4)),))],
    ),
    OpInfo(
        "index_select",
        lambda x, dim, index: ferro.index_select(x, dim, ferro.tensor(index)),
        lambda x, dim, index: np.take(x, index, axis=dim),
        _index_select_samples,
    ),
    OpInfo(
        "gather",
        lambda x, dim, index: ferro.gather(x, dim, ferro.tensor(index)),
        _gather_ref,
        _gather_samples,
    ),
    OpInfo(
        "scatter",
        lambda x, src, dim, index: ferro.scatter(x, dim, ferro.tensor(index), src),
        lambda x, src, dim, index: _scatter_ref(x, src, dim, index),
        _scatter_samples,
    ),
    OpInfo(
        "scatter_add",
        lambda x, src, dim, index: ferro.scatter_add(x, dim, ferro.tensor(index), src),
        lambda x, src, dim, index: _scatter_ref(x, src, dim, index, add=True),
        _scatter_add_samples,
    ),
    OpInfo(
        "masked_fill", ferro.masked_fill, lambda x, m, v: np.where(m, v, x), _masked_fill_samples
    ),
    OpInfo(
        "index_put",
        lambda x, v, index, accumulate=False: ferro.index_put(x, index, v, accumulate),
        _index_put_ref,
        _index_put_samples,
    ),
    OpInfo(
        "index_add",
        lambda x, src, dim, index, alpha=1: ferro.index_add(
            x, dim, ferro.tensor(index), src, alpha=alpha
        ),
        _index_add_ref,
        lambda rng: [
            Sample(
                (uniform(rng, (3, 4)), uniform(rng, (3, 3))),
                {"dim": 1, "index": np.array([0, 3, 0]), "alpha": 2.0},
                label="repeats, alpha",
            ),
            Sample((uniform(rng, (4,)), uniform(rng, (2,))), {"dim": 0, "index": np.array([1, 2])}),
        ],
    ),
    OpInfo(
        "index_copy",
        lambda x, src, dim, index: ferro.index_copy(x, dim, ferro.tensor(index), src),
        _index_copy_ref,
        lambda rng: [
            Sample(
                (uniform(rng, (3, 4)), uniform(rng, (2, 4))),
                {"dim": 0, "index": np.array([2, 0])},
            )
        ],
    ),
    OpInfo(
        "index_fill",
        lambda x, dim, index: ferro.index_fill(x, dim, ferro.tensor(index), -1.5),
        lambda x, dim, index: _index_copy_ref(x, -1.5, dim, index),
        lambda rng: [Sample((uniform(rng, (3, 4)),), {"dim": 1, "index": np.array([1, 3])})],
    ),
    OpInfo(
        "masked_scatter",
        lambda x, src, mask: ferro.masked_scatter(x, ferro.tensor(mask), src),
        _masked_scatter_ref,
        lambda rng: [
            Sample(
                (uniform(rng, (3, 4)), uniform(rng, (4, 4))),
                {"mask": rng.random((3, 4)) > 0.5},
                label="fewer than source",
            ),
            Sample(
                (uniform(rng, (3, 4)), uniform(rng, (12,))),
                {"mask": rng.random((4,)) > 0.3},
                label="broadcast mask",
            ),
        ],
    ),
    OpInfo("pad", lambda x, pad, mode: ferro.pad(x, pad, mode), _pad_ref, _pad_samples),
    OpInfo(
        "tile",
        lambda x, reps: ferro.tile(x, reps),
        lambda x, reps: np.tile(x, reps),
        _tile_samples,
    ),
    OpInfo(
        "flip",
        lambda x, dims: ferro.flip(x, dims),
        lambda x, dims: np.flip(x, dims),
        _flip_samples,
    ),
    OpInfo(
        "roll",
        lambda x, shifts, dims: ferro.roll(x, shifts, dims),
        lambda x, shifts, dims: np.roll(x, shifts, dims),
        _roll_samples,
    ),
    OpInfo(
        "one_hot",
        lambda i: ferro.one_hot(i, 4),
        lambda i: np.eye(4, dtype=np.int64)[i],
        lambda rng: [Sample((np.array([[0, 3], [2, 2]]),), label="2d")],
        grad=False,
        same_dtype_out=False,
    ),
    OpInfo(
        "embedding",
        lambda w, indices, padding_idx=None: ferro.embedding(ferro.tensor(indices), w, padding_idx),
        _embedding_ref,
        _embedding_samples,
    ),
    OpInfo(
        "squeeze",
        lambda x: ferro.squeeze(ferro.unsqueeze(x, 1), 1) * 1.0,
        lambda x: x,
        lambda rng: [Sample((uniform(rng, (3, 4)),))],
    ),
    OpInfo(
        "flatten",
        lambda x: ferro.flatten(x, 1),
        lambda x: x.reshape(x.shape[0], -1),
        lambda rng: [Sample((uniform(rng, (2, 3, 4)),))],
    ),
    OpInfo("tril", ferro.tril, lambda x, diagonal=0: np.tril(x, diagonal), _triangle_samples),
    OpInfo("triu", ferro.triu, lambda x, diagonal=0: np.triu(x, diagonal), _triangle_samples),
    OpInfo(
        "diagonal",
        ferro.diagonal,
        lambda x, offset=0, dim1=0, dim2=1: np.diagonal(x, offset, dim1, dim2),
        _diagonal_samples,
    ),
    OpInfo("diag", ferro.diag, lambda x, diagonal=0: np.diag(x, diagonal), _diag_samples),
    OpInfo("movedim", ferro.movedim, np.moveaxis, _movedim_samples),
    OpInfo(
        "swapaxes",
        lambda x, a, b: ferro.swapaxes(x, a, b),
        lambda x, a, b: np.swapaxes(x, a, b),
        _swap_samples,
    ),
    OpInfo(
        "swapdims",
        lambda x, a, b: ferro.swapdims(x, a, b),
        lambda x, a, b: np.swapaxes(x, a, b),
        _swap_samples,
    ),
    OpInfo("masked_select", ferro.masked_select, _masked_select_ref, _masked_select_samples),
    OpInfo(
        "nonzero",
        ferro.nonzero,
        lambda x: np.argwhere(x),
        _nonzero_samples,
        grad=False,
        same_dtype_out=False,
    ),
    OpInfo(
        "nonzero_tuple",
        lambda x: ferro.stack(ferro.nonzero(x, as_tuple=True)),
        lambda x: np.stack(np.nonzero(x.reshape(-1) if x.ndim == 0 else x)),
        _nonzero_samples,
        func="nonzero",
        grad=False,
        same_dtype_out=False,
    ),
    OpInfo(
        "broadcast_tensors",
        lambda *xs: _weighted_sum(ferro.broadcast_tensors(*xs)),
        lambda *xs: _weighted_sum(np.broadcast_arrays(*xs)),
        _broadcast_tensors_samples,
    ),
    OpInfo(
        "meshgrid",
        lambda *xs, indexing: ferro.stack(ferro.meshgrid(*xs, indexing=indexing)),
        lambda *xs, indexing: np.stack(np.meshgrid(*xs, indexing=indexing)),
        _meshgrid_samples,
    ),
    OpInfo("cartesian_prod", ferro.cartesian_prod, _cartesian_prod_ref, _cartesian_prod_samples),
    OpInfo(
        "diff",
        lambda x, *pre, n=1, axis=-1: ferro.diff(x, n, axis, *pre),
        lambda x, *pre, n=1, axis=-1: np.diff(x, n, axis, **({"prepend": pre[0]} if pre else {})),
        lambda rng: [
            Sample((uniform(rng, (6,)),), label="1d"),
            Sample((uniform(rng, (3, 5)),), {"n": 2, "axis": 1}, label="n=2"),
            Sample((uniform(rng, (3, 4)), uniform(rng, (1, 4))), {"axis": 0}, label="prepend"),
            Sample((uniform(rng, (3, 2)),), {"n": 3, "axis": 1}, label="n past the length"),
            Sample((uniform(rng, (3, 4)),), {"axis": 0}, noncontig=True, label="noncontig"),
        ],
    ),
    OpInfo(
        "repeat_interleave",
        lambda x, repeats, axis=None: ferro.repeat_interleave(x, repeats, axis),
        lambda x, repeats, axis=None: np.repeat(x, repeats, axis),
        lambda rng: [
            Sample((uniform(rng, (2, 3)), 2), label="flattened"),
            Sample((uniform(rng, (2, 3)), 3), {"axis": 1}, label="int"),
            Sample((uniform(rng, (3, 2)), [2, 0, 1]), {"axis": 0}, label="per element"),
            Sample((uniform(rng, (3, 4)), 2), {"axis": -1}, noncontig=True, label="noncontig"),
        ],
    ),
    OpInfo(
        "trace",
        ferro.trace,
        np.trace,
        lambda rng: [
            Sample((uniform(rng, (3, 3)),), label="square"),
            Sample((uniform(rng, (2, 4)),), label="wide"),
            Sample((uniform(rng, (0, 2)),), label="empty"),
            Sample((uniform(rng, (4, 3)),), noncontig=True, label="noncontig"),
        ],
    ),
    OpInfo(
        "tensor_split",
        lambda x, s, dim=0: ferro.cat(
            [p.flatten() * (i + 1) for i, p in enumerate(ferro.tensor_split(x, s, dim))]
        ),
        lambda x, s, dim=0: np.concatenate(
            [p.ravel() * (i + 1) for i, p in enumerate(np.array_split(x, s, dim))]
        ),
        lambda rng: [
            Sample((uniform(rng, (7,)), 3), label="sections"),
            Sample((uniform(rng, (3, 5)), [1, 4]), {"dim": 1}, label="indices"),
            Sample((uniform(rng, (3, 5)), [4, 2, 9]), {"dim": -1}, label="unordered, past the end"),
            Sample((uniform(rng, (2, 3)), 4), label="more sections than rows"),
            Sample((uniform(rng, (4, 3)), 2), {"dim": 1}, noncontig=True, label="noncontig"),
        ],
    ),
    OpInfo(
        "take_along_dim",
        ferro.take_along_dim,
        lambda x, idx, dim=None: np.take_along_axis(
            x if dim is not None else x.ravel(), idx if dim is not None else idx.ravel(), dim or 0
        ),
        lambda rng: [
            Sample((uniform(rng, (3, 4)), rng.integers(0, 4, (3, 2))), {"dim": 1}, label="rows"),
            Sample((uniform(rng, (3, 4)), rng.integers(0, 3, (2, 1))), {"dim": 0}, label="bcast"),
            Sample((uniform(rng, (3, 1)), rng.integers(0, 3, (2, 5))), {"dim": 0}, label="bcast x"),
            Sample((uniform(rng, (2, 3)), np.array([5, 0, 5])), label="flattened"),
            Sample((uniform(rng, (4, 3)), rng.integers(0, 4, (4, 3))), {"dim": 0}, noncontig=True),
        ],
    ),
    OpInfo(
        "rot90",
        ferro.rot90,
        lambda x, k=1, dims=(0, 1): np.rot90(x, k, dims),
        lambda rng: [
            Sample((uniform(rng, (2, 3)),), label="once"),
            Sample((uniform(rng, (2, 3, 4)), 2, (2, 0)), label="twice"),
            Sample((uniform(rng, (2, 3, 4)), -1, (1, 2)), label="back"),
            Sample((uniform(rng, (2, 0)), 4), label="empty, full turn"),
            Sample((uniform(rng, (3, 4)), 3), noncontig=True, label="noncontig"),
        ],
    ),
    OpInfo(
        "block_diag",
        ferro.block_diag,
        _block_diag_ref,
        lambda rng: [
            Sample(
                (uniform(rng, (2, 3)), uniform(rng, (3,)), uniform(rng, ())), label="2-D 1-D 0-d"
            ),
            Sample((uniform(rng, (2, 2)),), label="one"),
            Sample((uniform(rng, (1, 2)), uniform(rng, (0, 3))), label="empty block"),
            Sample((uniform(rng, (3, 2)), uniform(rng, (2, 3))), noncontig=True, label="noncontig"),
        ],
    ),
    OpInfo(
        "vander",
        ferro.vander,
        lambda x, N=None, increasing=False: np.vander(x, N, increasing),
        lambda rng: [
            Sample((uniform(rng, (4,)),), label="square"),
            Sample((np.array([0.0, 1.5, -2.0]), 5, True), label="increasing, through 0"),
            Sample((uniform(rng, (3,)), 1), label="N=1"),
            Sample((uniform(rng, (0,)),), label="empty"),
        ],
    ),
    OpInfo(
        "tril_indices",
        ferro.tril_indices,
        lambda r, c, k=0: np.stack(np.tril_indices(r, k, c)),
        _triangle_indices_samples,
        grad=False,
        same_dtype_out=False,
    ),
    OpInfo(
        "triu_indices",
        ferro.triu_indices,
        lambda r, c, k=0: np.stack(np.triu_indices(r, k, c)),
        _triangle_indices_samples,
        grad=False,
        same_dtype_out=False,
    ),
    *(
        OpInfo(
            name,
            _listed(getattr(ferro, name)),
            _listed(getattr(np, name)),
            samples,
        )
        for name, samples in (
            ("hstack", _stack_like_samples(1)),
            ("vstack", _stack_like_samples(1)),
            ("dstack", _stack_like_samples(1)),
            ("column_stack", _stack_like_samples(1)),
        )
    ),
    *(
        OpInfo(
            name,
            _all_flat(getattr(ferro, name), lambda vs: ferro.cat([v.flatten() for v in vs])),
            _all_flat(getattr(np, name), lambda vs: np.concatenate([v.ravel() for v in vs])),
            _atleast_samples,
        )
        for name in ("atleast_1d", "atleast_2d", "atleast_3d")
    ),
    OpInfo(
        "take",
        ferro.take,
        lambda x, idx: np.take(x, idx),
        lambda rng: [
            Sample((uniform(rng, (3, 4)), np.array([[0, -1], [11, 5]])), label="2-D index"),
            Sample((uniform(rng, (5,)), np.array([2, 2, 0])), label="repeats"),
            Sample((uniform(rng, ()), np.array(0)), label="0-d"),
            Sample((uniform(rng, (4, 3)), np.array([1, 7])), noncontig=True, label="noncontig"),
        ],
    ),
    OpInfo(
        "unflatten",
        ferro.unflatten,
        _unflatten_ref,
        lambda rng: [
            Sample((uniform(rng, (2, 12)), 1, (3, 4)), label="split"),
            Sample((uniform(rng, (6, 2)), 0, (2, -1)), label="-1"),
            Sample((uniform(rng, (4, 6)), -1, (3, 2)), noncontig=True, label="noncontig"),
        ],
    ),
    OpInfo("fliplr", ferro.fliplr, np.fliplr, _ndim_samples(2)),
    OpInfo("flipud", ferro.flipud, np.flipud, _ndim_samples(1)),
    OpInfo("t", ferro.t, lambda x: x.T, _ndim_samples(0, at_most=2)),
    OpInfo("ravel", ferro.ravel, np.ravel, _ndim_samples(0)),
]
