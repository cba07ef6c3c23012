"""Shape and indexing ops: views (reshape, permute, getitem, split, ...), joins (cat, stack) and
the ops that take an index (gather, scatter, index_select, embedding, ...).

Note [Index operands]: an op that keeps an index for its backward (``x[i]``, gather, scatter,
index_select, embedding, masked_fill) takes the index as a positional operand and saves it with
``ctx.save``. The engine records the version of every saved array that is an operand's data, so a
Tensor index modified in place between forward and backward raises GraphError, as any saved input
does, at no cost on the forward. An index the engine cannot see change (a NumPy or CuPy array the
user holds) is copied at forward; a list becomes a new array anyway.
"""

from __future__ import annotations

import numbers
import operator

import numpy as np

from ferro._C.tensor import TensorBase
from ferro.backend import add_at, device_of, is_array, move, xp_of
from ferro.errors import (
    ArgumentError,
    ArgumentTypeError,
    DtypeError,
    IndexOutOfRangeError,
    NotSupportedError,
    ShapeError,
)
from ferro.ops._args import aliases
from ferro.ops.registry import apply, register


def _size_args(shape) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    for s in shape:
        if not isinstance(s, numbers.Integral) or isinstance(s, bool):
            raise ArgumentTypeError(f"reshape: sizes must be ints, got {shape!r}")
    return tuple(int(s) for s in shape)


def _axis(a, ndim, op):
    if not isinstance(a, numbers.Integral) or isinstance(a, bool):
        raise ArgumentTypeError(f"{op}: dims must be ints, got {a!r}")
    if not -ndim <= a < max(ndim, 1):
        raise IndexOutOfRangeError(
            f"{op}: dim {a} is out of range for a tensor of {ndim} dimensions "
            f"(expected a dim in [{-ndim}, {max(ndim, 1) - 1}])"
        )
    return int(a) % ndim if ndim else 0


def _int(value, op, what):
    """``value`` as a Python int (ints, NumPy integers, one-element integer tensors), or raise."""
    if isinstance(value, bool):
        raise ArgumentTypeError(f"{op}: {what} must be an int, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise ArgumentTypeError(
            f"{op}: {what} must be an int, got {type(value).__name__}"
        ) from None


def _tensor_list(tensors, op):
    tensors = list(tensors)
    if not tensors:
        raise ArgumentError(f"{op}: expected a non-empty sequence of tensors, got an empty one")
    return tensors


def _unstack(xp, y, axis):
    """The slices of ``y`` along ``axis``, as views (one basic index each: no copies)."""
    moved = xp.moveaxis(y, axis, 0)
    # moved[i, ...] keeps a 0-d slice an array (moved[i] would give a NumPy scalar).
    return tuple([moved[i, ...] for i in range(moved.shape[0])])


def _scatter_add_into_zeros(xp, shape, where, gy, op):
    """Zeros of ``shape`` with ``gy`` added at ``where``: the backward of every gathering op
    ``op`` (``add.at`` adds repeated indices up, where assignment would keep only the last)."""
    gx = xp.zeros(shape, dtype=gy.dtype)
    add_at(xp, gx, where, gy, f"{op} backward")
    return gx


def _on_device_of(arr, like):
    """``arr`` on the device of the array ``like`` (``arr`` itself when it is there already)."""
    if type(arr) is np.ndarray and type(like) is np.ndarray:
        return arr
    device = device_of(like)
    return arr if device_of(arr) == device else move(arr, device)


def _index_operand(index, like, op, kinds="iu"):
    """An index argument as the positional operand of an indexing op (Note [Index operands]).

    Returns ``(operand, array)``: the operand to pass to ``apply`` (a Tensor, whose version the
    engine records when the op saves it, or an array nobody else holds) and its array, on the
    device of ``like`` and of a dtype kind in ``kinds``.
    """
    like = like._data if isinstance(like, TensorBase) else like
    if isinstance(index, TensorBase):
        arr = _on_device_of(index._data, like)
        operand = index if arr is index._data else arr
    elif is_array(index):
        arr = _on_device_of(index, like)
        operand = arr = index.copy() if arr is index else arr
    elif isinstance(index, (list, tuple, range, numbers.Integral)) and not isinstance(index, bool):
        arr = np.asarray(index)
        if arr.size == 0 and arr.dtype.kind == "f":
            arr = arr.astype(np.int64)  # [] is an empty index, not a float array
        operand = arr = _on_device_of(arr, like)
    else:
        raise ArgumentTypeError(
            f"{op}: the index must be a Tensor, an array, a range or a list of ints, got "
            f"{type(index).__name__}"
        )
    if arr.dtype.kind not in kinds:
        what = "integer or bool" if "b" in kinds else "integer"
        raise DtypeError(f"{op}: the index must be {what}, got dtype {arr.dtype}")
    return operand, arr


def _check_range(arr, size, op, negative=True):
    """Raise IndexOutOfRangeError unless every value of ``arr`` indexes a dimension of ``size``
    (in ``[-size, size)``, or ``[0, size)`` when ``negative`` is False)."""
    if not arr.size:
        return
    lo, hi = int(arr.min()), int(arr.max())
    low = -size if negative else 0
    if lo < low or hi >= size:
        bad = lo if lo < low else hi
        raise IndexOutOfRangeError(
            f"{op}: index {bad} is out of range for a dimension of size {size} (expected "
            f"indices in [{low}, {size}); got values in [{lo}, {hi}])"
        )


def _grid(xp, index, axis):
    # Index tuple addressing x at (i0, ..., index[i], ...) for every position of ``index``.
    grids = list(xp.ogrid[tuple(slice(0, s) for s in index.shape)]) if index.ndim else []
    grids[axis] = index
    return tuple(grids)


def _gather_index(x, index, a, op):
    operand, idx = _index_operand(index, x, op)
    _check_range(idx, x.shape[a], op)
    if idx.ndim != x.ndim or any(
        i > s for d, (i, s) in enumerate(zip(idx.shape, x.shape, strict=True)) if d != a
    ):
        raise ShapeError(f"{op}: index of shape {idx.shape} does not fit input of shape {x.shape}")
    return operand, idx


@register("reshape", view=True)
class Reshape:
    @staticmethod
    def forward(ctx, x, *, shape):
        ctx.in_shape = x.shape
        return x.reshape(shape)

    @staticmethod
    def backward(ctx, gy):
        return gy.reshape(ctx.in_shape)


def reshape(x, *shape):
    """Return ``x`` with a new shape (one size may be -1); ``reshape(x, 2, 3)`` or ``(2, 3)``.

    Gradient: gx = gy reshaped to x's shape.
    """
    shape = _size_args(shape)
    n_infer = sum(1 for s in shape if s == -1)
    known = 1
    for s in shape:
        if s != -1:
            if s < 0:
                raise ShapeError(f"reshape: invalid size {s} in {shape}")
            known *= s
    size = x.numel()
    if (
        n_infer > 1
        or (n_infer == 0 and known != size)
        or (n_infer == 1 and (known == 0 or size % known != 0))
    ):
        raise ShapeError(f"reshape: cannot reshape a tensor of shape {x.shape} into {shape}")
    return apply(Reshape, x, shape=shape)


@register("permute", view=True)
class Permute:
    @staticmethod
    def forward(ctx, x, *, axes):
        ctx.axes = axes
        return x.transpose(axes)

    @staticmethod
    def backward(ctx, gy):
        inv = [0] * len(ctx.axes)
        for i, a in enumerate(ctx.axes):
            inv[a] = i
        return gy.transpose(inv)


def permute(x, *dims):
    """Reorder the dimensions of ``x``: ``permute(x, 2, 0, 1)``.

    Gradient: gx = gy permuted by the inverse permutation.
    """
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    axes = tuple(_axis(d, x.ndim, "permute") for d in dims)
    if sorted(axes) != list(range(x.ndim)):
        raise ShapeError(f"permute: {dims} is not a permutation of the {x.ndim} dims of {x.shape}")
    return apply(Permute, x, axes=axes)


def transpose(x, dim0: int, dim1: int):
    """Swap dimensions ``dim0`` and ``dim1``.

    Gradient: gx = gy with the same two dimensions swapped back.
    """
    axes = list(range(x.ndim))
    a, b = _axis(dim0, x.ndim, "transpose"), _axis(dim1, x.ndim, "transpose")
    axes[a], axes[b] = axes[b], axes[a]
    return apply(Permute, x, axes=tuple(axes))


@register("detach", differentiable=False, view=True)
class Detach:
    @staticmethod
    def forward(ctx, x):
        return x


def detach(x):
    """A tensor sharing ``x``'s data (and version counter) that is not part of any graph
    (not differentiable: no gradient flows through it)."""
    return apply(Detach, x)


def flatten(x, start_dim: int = 0, end_dim: int = -1):
    """Merge dimensions ``start_dim..end_dim`` into one (a view when possible).

    Gradient: gx = gy reshaped back.
    """
    if x.ndim == 0:
        return reshape(x, 1)
    s, e = _axis(start_dim, x.ndim, "flatten"), _axis(end_dim, x.ndim, "flatten")
    if s > e:
        raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    shape = x.shape
    return reshape(x, shape[:s] + (-1 if 0 not in shape[s : e + 1] else 0,) + shape[e + 1 :])


@aliases
def squeeze(x, dim=None):
    """Remove dimensions of size 1 (all of them, or ``dim`` if it has size 1).

    Gradient: gx = gy reshaped back.
    """
    if dim is None:
        return reshape(x, tuple(s for s in x.shape if s != 1))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    axes = {_axis(d, x.ndim, "squeeze") for d in dims}
    return reshape(x, tuple(s for i, s in enumerate(x.shape) if not (i in axes and s == 1)))


@aliases
def unsqueeze(x, dim: int):
    """Insert a dimension of size 1 at ``dim`` (``-1`` appends).

    Gradient: gx = gy reshaped back.
    """
    d = _axis(dim, x.ndim + 1, "unsqueeze")
    return reshape(x, x.shape[:d] + (1,) + x.shape[d:])


@register("broadcast_to", view=True)
class BroadcastTo:
    @staticmethod
    def forward(ctx, x, *, shape):
        ctx.in_shape = x.shape
        return ctx.xp.broadcast_to(x, shape)

    @staticmethod
    def backward(ctx, gy):
        from ferro._C.engine import sum_to_shape

        return sum_to_shape(gy, ctx.in_shape)

    @staticmethod
    def differentiable_backward(ctx, gy):
        # Note [Double backward]: the same sum to shape, with recorded ops.
        from ferro.ops.reduction import sum as sum_

        shape = tuple(ctx.in_shape)
        lead = gy.ndim - len(shape)
        axes = tuple(range(lead)) + tuple(
            lead + i for i, n in enumerate(shape) if n == 1 and gy.shape[lead + i] != 1
        )
        g = sum_(gy, axis=axes, keepdims=True) if axes else gy
        return reshape(g, shape)


def broadcast_to(x, *shape):
    """Broadcast ``x`` to ``shape`` without copying (a read-only view).

    Gradient: gx = gy summed over the broadcast dimensions.
    """
    shape = _size_args(shape)
    lead = len(shape) - x.ndim
    if lead < 0 or any(s != t and s != 1 for s, t in zip(x.shape, shape[lead:], strict=True)):
        raise ShapeError(f"broadcast_to: cannot broadcast shape {x.shape} to {shape}")
    return apply(BroadcastTo, x, shape=shape)


def expand(x, *sizes):
    """PyTorch's ``expand``: like :func:`broadcast_to`, where -1 keeps a dimension's size.

    Gradient: gx = gy summed over the expanded dimensions.
    """
    sizes = _size_args(sizes)
    lead = len(sizes) - x.ndim
    if lead < 0:
        raise ShapeError(f"expand: {sizes} has fewer dimensions than the tensor's {x.shape}")
    shape = tuple(x.shape[i - lead] if s == -1 and i >= lead else s for i, s in enumerate(sizes))
    return broadcast_to(x, shape)


@register("cat")
class Cat:
    @staticmethod
    def forward(ctx, *xs, axis):
        ctx.axis = axis
        ctx.sizes = [x.shape[axis] for x in xs]
        return ctx.xp.concatenate(xs, axis=axis)

    @staticmethod
    def backward(ctx, gy):
        bounds = []
        acc = 0
        for s in ctx.sizes[:-1]:
            acc += s
            bounds.append(acc)
        return tuple(ctx.xp.split(gy, bounds, axis=ctx.axis))


@aliases
def cat(tensors, dim: int = 0):
    """Concatenate tensors along an existing dimension.

    Gradient: each input receives its slice of gy.
    """
    tensors = _tensor_list(tensors, "cat")
    nd = tensors[0].ndim
    a = _axis(dim, nd, "cat")
    for t in tensors[1:]:
        if t.ndim != nd or any(
            s != u for i, (s, u) in enumerate(zip(t.shape, tensors[0].shape, strict=True)) if i != a
        ):
            raise ShapeError(
                f"cat: shapes {[tuple(t.shape) for t in tensors]} differ outside dim {dim}"
            )
    return apply(Cat, *tensors, axis=a)


@register("stack")
class Stack:
    @staticmethod
    def forward(ctx, *xs, axis):
        ctx.axis = axis
        return ctx.xp.stack(xs, axis=axis)

    @staticmethod
    def backward(ctx, gy):
        # Views of gy, not a gathered copy per input: the engine copies a view only where it
        # must keep it (Note [Grad ownership]), so backward costs O(total size) for any count.
        return _unstack(ctx.xp, gy, ctx.axis)


@aliases
def stack(tensors, dim: int = 0):
    """Stack same-shape tensors along a new dimension ``dim``.

    Gradient: each input receives its slice of gy.
    """
    tensors = _tensor_list(tensors, "stack")
    shapes = {tuple(t.shape) for t in tensors}
    if len(shapes) != 1:
        raise ShapeError(f"stack: all tensors need one shape, got {sorted(shapes)}")
    return apply(Stack, *tensors, axis=_axis(dim, tensors[0].ndim + 1, "stack"))


@register("unbind", view=True)
class Unbind:
    @staticmethod
    def forward(ctx, x, *, axis):
        ctx.axis = axis
        return _unstack(ctx.xp, x, axis)

    @staticmethod
    def backward(ctx, *gys):
        return ctx.xp.stack(gys, axis=ctx.axis)


def unbind(x, dim: int = 0):
    """The slices of ``x`` along ``dim``, as a tuple of views without that dimension (what
    iterating over a tensor yields).

    Gradient: gx = the slices' gradients stacked (zeros for unused slices).
    """
    a = _axis(dim, x.ndim, "unbind")
    if x.shape[a] == 0:
        return ()
    return apply(Unbind, x, axis=a)


@register("split", view=True)
class Split:
    @staticmethod
    def forward(ctx, x, *, bounds, axis):
        ctx.axis = axis
        return tuple(ctx.xp.split(x, bounds, axis=axis))

    @staticmethod
    def backward(ctx, *gys):
        return ctx.xp.concatenate(gys, axis=ctx.axis)


@aliases
def split(x, split_size_or_sections, dim: int = 0):
    """Split into pieces of ``split_size`` (the last may be smaller) or of the given sizes.

    Gradient: gx = the pieces' gradients concatenated (zeros for unused pieces).
    """
    a = _axis(dim, x.ndim, "split")
    n = x.shape[a]
    if isinstance(split_size_or_sections, numbers.Integral):
        step = _int(split_size_or_sections, "split", "split_size")
        if step <= 0:
            raise ArgumentError(f"split: split_size must be positive, got {step}")
        bounds = list(range(step, n, step))
    else:
        sizes = [_int(s, "split", "a section size") for s in split_size_or_sections]
        if any(s < 0 for s in sizes):
            raise ArgumentError(f"split: section sizes must be non-negative, got {sizes}")
        if sum(sizes) != n:
            raise ShapeError(f"split: sizes {sizes} do not add up to dim {dim} of size {n}")
        bounds, acc = [], 0
        for s in sizes[:-1]:
            acc += s
            bounds.append(acc)
    return apply(Split, x, bounds=tuple(bounds), axis=a)


@aliases
def chunk(x, chunks: int, dim: int = 0):
    """Split into ``chunks`` pieces of equal size (the last may be smaller), as PyTorch does.

    Gradient: gx = the pieces' gradients concatenated.
    """
    chunks = _int(chunks, "chunk", "chunks")
    if chunks <= 0:
        raise ArgumentError(f"chunk: chunks must be positive, got {chunks}")
    n = x.shape[_axis(dim, x.ndim, "chunk")]
    step = max(-(-n // chunks), 1)
    return split(x, step, dim)


def _bound(v, op="getitem"):
    return v if v is None or type(v) is int else _int(v, op, "a slice bound")


def _index_items(index, like, op="getitem"):
    """The items of ``x[index]`` as operands; say whether it needs advanced indexing.

    Ints and slice bounds become Python ints (a one-element tensor read now, not in backward).
    """
    items = index if isinstance(index, tuple) else (index,)
    out, advanced = [], False
    for it in items:
        if it is None or it is Ellipsis or type(it) is int:
            pass
        elif type(it) is slice:
            it = slice(_bound(it.start, op), _bound(it.stop, op), _bound(it.step, op))
        elif isinstance(it, (TensorBase, list, range)) or is_array(it):
            it = _index_operand(it, like, op, kinds="iub")[0]
            advanced = True
        elif isinstance(it, numbers.Integral):  # NumPy integers, bools
            it = it if isinstance(it, bool) else int(it)
        else:
            raise ArgumentTypeError(
                f"{op}: unsupported index {it!r}; use ints, slices, None, Ellipsis, or "
                "integer or bool tensors"
            )
        out.append(it)
    return tuple(out), advanced


@register("getitem", view=True)
class Getitem:
    @staticmethod
    def forward(ctx, x, *, index):
        ctx.shape, ctx.index = x.shape, index
        return x[index]

    @staticmethod
    def backward(ctx, gy):
        gx = ctx.xp.zeros(ctx.shape, dtype=gy.dtype)
        gx[ctx.index] = gy
        return gx


@register("getitem_advanced", same_dtype=False)
class GetitemAdvanced:
    @staticmethod
    def forward(ctx, x, *index):
        ctx.shape = x.shape
        # The whole index is saved (ints and slices stay as they are): the engine then records
        # the versions of the index tensors among the operands.
        ctx.save(*index)
        return x[index]

    @staticmethod
    def backward(ctx, gy):
        index = ctx.saved
        return (_scatter_add_into_zeros(ctx.xp, ctx.shape, index, gy, "getitem"),) + (None,) * len(
            index
        )


def getitem(x, index):
    """``x[index]`` with ints, slices (negative steps too), None, Ellipsis, bool masks and
    integer arrays, as NumPy indexes.

    Gradient: gx = zeros with gy scattered back (repeated indices add up).
    """
    items, advanced = _index_items(index, x)
    try:
        if advanced:
            return apply(GetitemAdvanced, x, *items)
        return apply(Getitem, x, index=items)
    except IndexError as exc:
        raise IndexOutOfRangeError(
            f"getitem: the index is invalid for a tensor of shape {tuple(x.shape)}: {exc}"
        ) from None


def _index_put_backward_ops(ctx, gy):
    """IndexPut's backward with ferro ops (Tensors in and out), for double backward."""
    index = ctx.saved
    need_x, need_value = ctx.needs_input_grad[:2]
    gx = gvalue = None
    if need_x:
        gx = gy if ctx.accumulate else index_put(gy, index, 0.0)
    if need_value:
        gvalue = getitem(gy, index)
    return (gx, gvalue) + (None,) * len(index)


@register("index_put", broadcasts=True, same_dtype=False)
class IndexPut:
    @staticmethod
    def forward(ctx, x, value, *index, accumulate):
        out = x.copy()
        if accumulate:
            add_at(ctx.xp, out, index, value, "index_put_ (accumulate=True)")
        else:
            out[index] = value
        # The whole index is saved (ints and slices as they are), as getitem_advanced does.
        ctx.save(*index)
        ctx.accumulate = accumulate
        return out

    @staticmethod
    def backward(ctx, gy):
        index = ctx.saved
        need_x, need_value = ctx.needs_input_grad[:2]
        gx = gvalue = None
        if need_x:
            gx = gy
            if not ctx.accumulate:
                gx = gy.copy()
                gx[index] = 0
        if need_value:
            # The engine sums it back to the value's shape (the value broadcasts).
            gvalue = gy[index]
        return (gx, gvalue) + (None,) * len(index)

    differentiable_backward = staticmethod(_index_put_backward_ops)


def index_put(x, indices, values, accumulate: bool = False):
    """A copy of ``x`` with ``values`` written at ``x[indices]`` (``values`` broadcasts to the
    indexed shape); with ``accumulate=True`` they are added instead (repeated indices add up).
    ``indices`` is one index or a tuple of them, of any kind ``x[...]`` takes (ints, slices,
    None, Ellipsis, integer or bool tensors). ``x[indices] = values`` is its in-place form.

    Gradient: gx = gy with the written positions zeroed (gy itself when accumulating);
    gvalues = gy at ``indices``, summed over the broadcast dims. Repeated indices without
    ``accumulate``: one write wins, as in PyTorch (unspecified which).

    Example:
        >>> ferro.index_put(ferro.zeros(3), (ferro.tensor([0, 2]),), ferro.tensor(1.0))
        tensor([1., 0., 1.])
    """
    if not isinstance(x, TensorBase):
        raise ArgumentTypeError(f"index_put: expected a Tensor, got {type(x).__name__}")
    items, _ = _index_items(indices, x, "index_put")
    dt = x._data.dtype
    if isinstance(values, TensorBase):
        if values._data.dtype != dt:
            from ferro.ops.elementwise import cast

            values = cast(values, dt)
    elif is_array(values) or isinstance(values, (list, tuple)):
        if not is_array(values):
            values = np.asarray(values, dtype=dt)
        values = _on_device_of(values.astype(dt, copy=False), x._data)
    elif not isinstance(values, numbers.Number):
        raise ArgumentTypeError(
            f"index_put: values must be a Tensor, an array or a number, got {type(values).__name__}"
        )
    try:
        return apply(IndexPut, x, values, *items, accumulate=bool(accumulate))
    except IndexError as exc:
        raise IndexOutOfRangeError(
            f"index_put: the index is invalid for a tensor of shape {tuple(x.shape)}: {exc}"
        ) from None
    except ValueError as exc:
        if "broadcast" not in str(exc):
            raise
        raise ShapeError(
            f"index_put: values of shape {tuple(getattr(values, 'shape', ()))} do not broadcast "
            f"to the indexed part of a tensor of shape {tuple(x.shape)}: {exc}"
        ) from None


def _dim_index(x, dim, index, op):
    """``(slice(None),) * dim + (index,)``: the index of ``x``'s entries ``index`` along ``dim``,
    checked (1-D integer, in range)."""
    a = _axis(dim, x.ndim, op)
    operand, idx = _index_operand(index, x, op)
    if idx.ndim > 1:
        raise ShapeError(f"{op}: index must be 0-D or 1-D, got shape {tuple(idx.shape)}")
    _check_range(idx, x.shape[a] if x.ndim else 1, op)
    return (slice(None),) * a + (operand,), a, idx


def _dim_source(x, a, idx, source, op):
    want = tuple(x.shape[:a]) + tuple(idx.shape) + tuple(x.shape[a + 1 :])
    if not isinstance(source, TensorBase):
        raise ArgumentTypeError(f"{op}: source must be a Tensor, got {type(source).__name__}")
    if tuple(source.shape) != want:
        raise ShapeError(
            f"{op}: source of shape {tuple(source.shape)} does not fit a tensor of shape "
            f"{tuple(x.shape)} indexed by {idx.size} entries along dim {a} (expected {want})"
        )


def index_add(x, dim: int, index, source, *, alpha=1):
    """A copy of ``x`` with ``alpha * source`` added at entries ``index`` along ``dim``
    (repeated indices add up), as PyTorch's ``index_add``.

    Gradient: gx = gy; gsource = alpha * gy at ``index``.
    """
    where, a, idx = _dim_index(x, dim, index, "index_add")
    _dim_source(x, a, idx, source, "index_add")
    if alpha != 1:
        source = source * alpha
    return index_put(x, where, source, accumulate=True)


def index_copy(x, dim: int, index, source):
    """A copy of ``x`` with entries ``index`` along ``dim`` replaced by ``source``.

    Gradient: gx = gy with the copied entries zeroed; gsource = gy at ``index``.
    """
    where, a, idx = _dim_index(x, dim, index, "index_copy")
    _dim_source(x, a, idx, source, "index_copy")
    return index_put(x, where, source)


def index_fill(x, dim: int, index, value):
    """A copy of ``x`` with entries ``index`` along ``dim`` set to ``value`` (a number or a 0-d
    tensor).

    Gradient: gx = gy with the filled entries zeroed; gvalue = sum of gy there.
    """
    where, _, _ = _dim_index(x, dim, index, "index_fill")
    if getattr(value, "ndim", 0) != 0:
        raise ShapeError(f"index_fill: value must be a number or a 0-d tensor, got {value.shape}")
    return index_put(x, where, value)


def masked_scatter(x, mask, source):
    """A copy of ``x`` whose elements where the bool ``mask`` (broadcast to ``x``) is true are
    the first elements of ``source``, in row-major order.

    Gradient: gx = gy where mask is false; gsource = gy at the masked positions, in order
    (zero for the source elements not used).
    """
    if getattr(getattr(mask, "dtype", None), "kind", None) != "b":
        raise DtypeError(
            f"masked_scatter: mask must be a bool tensor, got {getattr(mask, 'dtype', None)}"
        )
    if not isinstance(source, TensorBase):
        raise ArgumentTypeError(
            f"masked_scatter: source must be a Tensor, got {type(source).__name__}"
        )
    _, arr = _index_operand(mask, x, "masked_scatter", kinds="b")
    try:
        arr = xp_of(arr).broadcast_to(arr, x.shape)
    except ValueError:
        raise ShapeError(
            f"masked_scatter: mask of shape {tuple(mask.shape)} does not broadcast to the "
            f"tensor's shape {tuple(x.shape)}"
        ) from None
    n = int(arr.sum())
    if n > source.numel():
        raise ShapeError(
            f"masked_scatter: the mask selects {n} elements but source has only "
            f"{source.numel()} (shape {tuple(source.shape)})"
        )
    flat = reshape(source, -1)
    if n != source.numel():
        flat = getitem(flat, slice(0, n))
    return index_put(x, (arr.copy(),), flat)


def narrow(x, dim: int, start: int, length: int):
    """The slice ``start:start+length`` of dimension ``dim`` (a view).

    Gradient: gx = gy placed in that slice, zeros elsewhere.
    """
    a = _axis(dim, x.ndim, "narrow")
    n = x.shape[a]
    start, length = _int(start, "narrow", "start"), _int(length, "narrow", "length")
    if not -n <= start <= n:
        raise IndexOutOfRangeError(
            f"narrow: start {start} is out of range for dim {dim} of size {n} "
            f"(expected a start in [{-n}, {n}])"
        )
    if start < 0:
        start += n
    if length < 0:
        raise ArgumentError(f"narrow: length must be non-negative, got {length}")
    if start + length > n:
        raise IndexOutOfRangeError(
            f"narrow: start {start} + length {length} exceeds dim {dim} of size {n}"
        )
    return getitem(x, (slice(None),) * a + (slice(start, start + length),))


def select(x, dim: int, index: int):
    """The sub-tensor at ``index`` of dimension ``dim`` (removes that dimension).

    Gradient: gx = gy placed at that index, zeros elsewhere.
    """
    a = _axis(dim, x.ndim, "select")
    n = x.shape[a]
    index = _int(index, "select", "index")
    if not -n <= index < n:
        raise IndexOutOfRangeError(
            f"select: index {index} is out of range for dim {dim} of size {n} "
            f"(expected an index in [{-n}, {n}))"
        )
    return getitem(x, (slice(None),) * a + (index,))


@register("index_select", same_dtype=False)
class IndexSelect:
    @staticmethod
    def forward(ctx, x, index, *, axis):
        ctx.shape, ctx.axis = x.shape, axis
        ctx.save(index)
        return ctx.xp.take(x, index, axis=axis)

    @staticmethod
    def backward(ctx, gy):
        (index,) = ctx.saved
        where = (slice(None),) * ctx.axis + (index,)
        return _scatter_add_into_zeros(ctx.xp, ctx.shape, where, gy, "index_select"), None


def index_select(x, dim: int, index):
    """Entries of dimension ``dim`` at the 1-D integer ``index``.

    Gradient: gx = gy added back at ``index`` (repeated indices add up).
    """
    a = _axis(dim, x.ndim, "index_select")
    operand, idx = _index_operand(index, x, "index_select")
    if idx.ndim != 1:
        raise ShapeError(f"index_select: index must be 1-D, got shape {idx.shape}")
    _check_range(idx, x.shape[a], "index_select")
    return apply(IndexSelect, x, operand, axis=a)


@register("gather", same_dtype=False)
class Gather:
    @staticmethod
    def forward(ctx, x, index, *, axis):
        ctx.shape, ctx.axis = x.shape, axis
        ctx.save(index)
        return ctx.xp.take_along_axis(x, index, axis=axis)

    @staticmethod
    def backward(ctx, gy):
        (index,) = ctx.saved
        where = _grid(ctx.xp, index, ctx.axis)
        return _scatter_add_into_zeros(ctx.xp, ctx.shape, where, gy, "gather"), None


def gather(x, dim: int, index):
    """``out[i][j] = x[i][index[i][j]]`` along ``dim`` (PyTorch's gather).

    Gradient: gx = gy added back at ``index`` along ``dim``.
    """
    a = _axis(dim, x.ndim, "gather")
    operand, idx = _gather_index(x, index, a, "gather")
    if any(i != s for d, (i, s) in enumerate(zip(idx.shape, x.shape, strict=True)) if d != a):
        # take_along_axis needs matching sizes off ``dim``: narrow x to the index's extent.
        x = getitem(
            x, tuple(slice(0, i) if d != a else slice(None) for d, i in enumerate(idx.shape))
        )
    return apply(Gather, x, operand, axis=a)


@register("scatter", broadcasts=False, same_dtype=False)
class Scatter:
    @staticmethod
    def forward(ctx, x, src, index, *, axis, add):
        xp = ctx.xp
        out = x.copy()
        grid = _grid(xp, index, axis)
        if not hasattr(src, "shape"):
            src = xp.full(index.shape, src, dtype=x.dtype)
        if add:
            add_at(xp, out, grid, src, "scatter_add")
        else:
            out[grid] = src
        ctx.save(index)
        ctx.axis, ctx.add = axis, add
        return out

    @staticmethod
    def backward(ctx, gy):
        (index,) = ctx.saved
        grid = _grid(ctx.xp, index, ctx.axis)
        need_x, need_src, _ = ctx.needs_input_grad
        gx = gsrc = None
        if need_x:
            gx = gy.copy() if not ctx.add else gy
            if not ctx.add:
                gx[grid] = 0
        if need_src:
            gsrc = gy[grid]
        return gx, gsrc, None


def _scatter(x, dim, index, src, add, op):
    a = _axis(dim, x.ndim, op)
    operand, idx = _gather_index(x, index, a, op)
    if isinstance(src, TensorBase) or is_array(src):
        if src.dtype != x.dtype:
            raise DtypeError(
                f"{op}: src has dtype {src.dtype}, the input {x.dtype}; convert one with .to(dtype)"
            )
        if src.ndim != idx.ndim or any(i > s for i, s in zip(idx.shape, src.shape, strict=True)):
            raise ShapeError(f"{op}: src of shape {src.shape} is smaller than index {idx.shape}")
        if tuple(src.shape) != tuple(idx.shape):
            src = getitem(src, tuple(slice(0, i) for i in idx.shape))
    elif not isinstance(src, numbers.Number):
        raise ArgumentTypeError(f"{op}: src must be a Tensor or a number, got {type(src).__name__}")
    return apply(Scatter, x, src, operand, axis=a, add=add)


def scatter(x, dim: int, index, src):
    """A copy of ``x`` with ``out[i][index[i][j]] = src[i][j]`` along ``dim``; ``src`` may be a
    scalar. Repeated indices: one of the writes wins (as in PyTorch, unspecified which).

    Gradient: gx = gy with the written positions zeroed; gsrc = gy gathered at ``index``.
    """
    return _scatter(x, dim, index, src, False, "scatter")


def scatter_add(x, dim: int, index, src):
    """A copy of ``x`` with ``src`` added at ``index`` along ``dim`` (repeats add up).

    Gradient: gx = gy; gsrc = gy gathered at ``index``.
    """
    return _scatter(x, dim, index, src, True, "scatter_add")


@register("masked_fill", broadcasts=True, same_dtype=False)
class MaskedFill:
    @staticmethod
    def forward(ctx, x, mask, value):
        ctx.save(mask)
        return ctx.xp.where(mask, value, x)

    @staticmethod
    def backward(ctx, gy):
        (mask,) = ctx.saved
        xp = ctx.xp
        need_x, _, need_v = ctx.needs_input_grad
        gx = xp.where(mask, 0, gy) if need_x else None
        gv = xp.where(mask, gy, 0).sum() if need_v else None
        return gx, None, gv


def masked_fill(x, mask, value):
    """``x`` with ``value`` (a scalar or a 0-d tensor) where the bool ``mask`` is true.

    Gradient: gx = gy where mask is false; gvalue = sum of gy where mask is true.
    """
    if getattr(getattr(mask, "dtype", None), "kind", None) != "b":
        raise DtypeError(
            f"masked_fill: mask must be a bool tensor, got {getattr(mask, 'dtype', None)}"
        )
    if getattr(value, "ndim", 0) != 0:
        raise ShapeError(f"masked_fill: value must be a scalar or 0-d tensor, got {value.shape}")
    mask = _index_operand(mask, x, "masked_fill", kinds="b")[0]
    return apply(MaskedFill, x, mask, value)


def _pad_source_index(xp, n, lo, hi, mode):
    i = xp.arange(-lo, n + hi)
    if mode == "circular":
        return i % n
    if mode == "replicate":
        return xp.clip(i, 0, n - 1)
    # reflect (without repeating the edge), as numpy's "reflect" and PyTorch's do
    period = 2 * (n - 1)
    i = xp.abs(i) % period if period else xp.zeros_like(i)
    return xp.where(i >= n, period - i, i)


_NUMPY_PAD_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


@register("pad")
class Pad:
    @staticmethod
    def forward(ctx, x, *, widths, mode, value):
        xp = ctx.xp
        ctx.widths, ctx.mode, ctx.shape = widths, mode, x.shape
        if mode == "constant":
            return xp.pad(x, widths, mode="constant", constant_values=value)
        return xp.pad(x, widths, mode=_NUMPY_PAD_MODES[mode])

    @staticmethod
    def backward(ctx, gy):
        g = gy
        for d, (lo, hi) in enumerate(ctx.widths):
            if lo == 0 and hi == 0:
                continue
            n = ctx.shape[d]
            if ctx.mode == "constant":
                g = g[(slice(None),) * d + (slice(lo, lo + n),)]
                continue
            # The central part, then each padded slice added onto the one it copies (a few
            # slice adds: NumPy's add.at over the whole array took 4 ms a call on the style
            # transfer example's 64x64 maps, a third of its step).
            src, at = _pad_source_index(np, n, lo, hi, ctx.mode), (slice(None),) * d
            folded = g[at + (slice(lo, lo + n),)].copy()
            for j in (*range(lo), *range(lo + n, lo + n + hi)):
                folded[at + (int(src[j]),)] += g[at + (j,)]
            g = folded
        return g


def pad(x, pad, mode: str = "constant", value: float = 0.0):
    """Pad with PyTorch's convention: ``pad = (last_lo, last_hi, second_last_lo, ...)``.

    Modes: ``constant`` (``value``), ``reflect`` (no edge repeat), ``replicate`` (edge),
    ``circular`` (wrap around; at most one period on each side).

    Gradient: gx = gy's central part, plus the padded positions folded back onto the elements
    they copy (reflect, replicate, circular).
    """
    pad = tuple(_int(p, "pad", "a padding size") for p in pad)
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise ShapeError(f"pad: {pad} must hold (lo, hi) pairs for at most {x.ndim} dimensions")
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise ArgumentError(
            f"pad: mode must be constant, reflect, replicate or circular, got {mode!r}"
        )
    if any(p < 0 for p in pad):
        raise NotSupportedError(f"pad: negative padding (cropping) is not supported, got {pad}")
    widths = [(0, 0)] * x.ndim
    for k in range(len(pad) // 2):
        d = x.ndim - 1 - k
        widths[d] = (pad[2 * k], pad[2 * k + 1])
        if mode == "reflect" and max(widths[d]) >= x.shape[d]:
            raise ShapeError(
                f"pad: reflect padding {widths[d]} needs to be smaller than dim {d} of size "
                f"{x.shape[d]}"
            )
        if mode == "circular" and max(widths[d]) > x.shape[d]:
            raise ShapeError(
                f"pad: circular padding {widths[d]} wraps around more than once: it must be at "
                f"most the size {x.shape[d]} of dim {d}"
            )
        if mode == "replicate" and x.shape[d] == 0:
            raise ShapeError(f"pad: cannot replicate-pad empty dim {d}")
    return apply(Pad, x, widths=tuple(widths), mode=mode, value=value)


@register("tile")
class Tile:
    @staticmethod
    def forward(ctx, x, *, reps):
        ctx.shape, ctx.reps = x.shape, reps
        return ctx.xp.tile(x, reps)

    @staticmethod
    def backward(ctx, gy):
        reps, shape = ctx.reps, ctx.shape
        lead = len(reps) - len(shape)
        full = (1,) * lead + tuple(shape)
        inter = []
        for r, s in zip(reps, full, strict=True):
            inter += [r, s]
        g = gy.reshape(inter).sum(axis=tuple(range(0, 2 * len(reps), 2)))
        return g.reshape(shape)


def tile(x, *reps):
    """Repeat the whole tensor ``reps`` times along each dimension (NumPy's tile).

    Gradient: gx = the sum of gy over the copies.
    """
    reps = _size_args(reps)
    if any(r < 0 for r in reps):
        raise ArgumentError(f"tile: repetitions must be non-negative, got {reps}")
    reps = (1,) * (x.ndim - len(reps)) + reps
    return apply(Tile, x, reps=reps)


def repeat(x, *sizes):
    """PyTorch's ``repeat``: :func:`tile` with at least as many sizes as dimensions.

    Gradient: gx = the sum of gy over the copies.
    """
    sizes = _size_args(sizes)
    if len(sizes) < x.ndim:
        raise ShapeError(f"repeat: {len(sizes)} sizes for a tensor of {x.ndim} dimensions")
    return tile(x, sizes)


def _dims_arg(dims) -> tuple:
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        return tuple(dims[0])
    return tuple(dims)


@register("flip", view=True)
class Flip:
    @staticmethod
    def forward(ctx, x, *, axes):
        ctx.axes = axes
        return ctx.xp.flip(x, axes)

    @staticmethod
    def backward(ctx, gy):
        return ctx.xp.flip(gy, ctx.axes)


def flip(x, *dims):
    """Reverse the order of elements along ``dims``.

    Gradient: gx = gy flipped back.
    """
    dims = _dims_arg(dims)
    return apply(Flip, x, axes=tuple(_axis(d, x.ndim, "flip") for d in dims))


@register("roll")
class Roll:
    @staticmethod
    def forward(ctx, x, *, shifts, axes):
        ctx.shifts, ctx.axes = shifts, axes
        return ctx.xp.roll(x, shifts, axes)

    @staticmethod
    def backward(ctx, gy):
        neg = tuple(-s for s in ctx.shifts) if ctx.axes is not None else -ctx.shifts
        return ctx.xp.roll(gy, neg, ctx.axes)


def roll(x, shifts, dims=None):
    """Rotate elements by ``shifts`` along ``dims`` (flattened when ``dims`` is None).

    Gradient: gx = gy rolled back.
    """
    if dims is None:
        if not isinstance(shifts, int):
            raise ArgumentError(f"roll: without dims, shifts must be one int, got {shifts!r}")
        return apply(Roll, x, shifts=shifts, axes=None)
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shifts) != len(dims):
        raise ArgumentError(f"roll: {len(shifts)} shifts for {len(dims)} dims")
    return apply(Roll, x, shifts=shifts, axes=tuple(_axis(d, x.ndim, "roll") for d in dims))


@register("one_hot", differentiable=False)
class OneHot:
    @staticmethod
    def forward(ctx, idx, *, num_classes):
        xp = ctx.xp
        out = xp.zeros(idx.shape + (num_classes,), dtype=xp.int64)
        xp.put_along_axis(out, idx[..., None], 1, axis=-1)
        return out


def one_hot(indices, num_classes: int = -1):
    """int64 one-hot encoding of integer ``indices`` (not differentiable)."""
    if not isinstance(indices, TensorBase):
        raise ArgumentTypeError(
            f"one_hot: indices must be an integer Tensor, got {type(indices).__name__}"
        )
    if indices.dtype.kind not in "iu":
        raise DtypeError(f"one_hot: indices must be integer, got {indices.dtype}")
    data = indices._data
    num_classes = _int(num_classes, "one_hot", "num_classes")
    if num_classes < 0:
        num_classes = int(data.max()) + 1 if data.size else 0
    _check_range(data, num_classes, "one_hot", negative=False)
    return apply(OneHot, indices, num_classes=num_classes)


@register("embedding", same_dtype=False)
class Embedding:
    @staticmethod
    def forward(ctx, weight, indices, *, padding_idx):
        ctx.padding_idx, ctx.shape = padding_idx, weight.shape
        ctx.save(indices)
        return weight[indices]

    @staticmethod
    def backward(ctx, gy):
        (indices,) = ctx.saved
        gw = _embedding_grad(ctx.xp, ctx.shape, indices, gy)
        if ctx.padding_idx is not None:
            gw[ctx.padding_idx] = 0
        return gw, None


def _embedding_grad(xp, shape, indices, gy):
    """The rows of ``gy`` summed into zeros of ``shape`` at ``indices`` (repeats add up).

    NumPy's ``add.at`` goes element by element (44% of a char-MLP step); here the indices are
    sorted once and each run of equal indices summed by ``add.reduceat``: 2-7x faster from
    2,000 lookups up. CuPy's ``add.at`` is an atomic-add kernel and stays.
    """
    if xp.__name__ != "numpy" or indices.size < 64:
        return _scatter_add_into_zeros(xp, shape, indices, gy, "embedding")
    flat = indices.reshape(-1)
    rows = gy.reshape(flat.size, shape[1])
    order = xp.argsort(flat, kind="stable")
    ordered = flat[order]
    starts = xp.flatnonzero(xp.concatenate(([True], ordered[1:] != ordered[:-1])))
    gw = xp.zeros(shape, dtype=gy.dtype)
    gw[ordered[starts]] = xp.add.reduceat(rows[order], starts, axis=0)
    return gw


def embedding(indices, weight, padding_idx=None):
    """Rows of ``weight`` (num_embeddings, dim) at integer ``indices`` in
    ``[0, num_embeddings)`` (a negative index is an error, as in PyTorch).

    Gradient: gweight = gy added into the selected rows (repeats add up); the ``padding_idx``
    row gets none.
    """
    if weight.ndim != 2:
        raise ShapeError(f"embedding: weight must be 2-D, got shape {weight.shape}")
    n = weight.shape[0]
    operand, idx = _index_operand(indices, weight, "embedding")
    _check_range(idx, n, "embedding", negative=False)
    if padding_idx is not None:
        padding_idx = _int(padding_idx, "embedding", "padding_idx")
        if not -n <= padding_idx < n:
            raise IndexOutOfRangeError(
                f"embedding: padding_idx {padding_idx} is out of range for {n} embeddings"
            )
        padding_idx %= n
    return apply(Embedding, weight, operand, padding_idx=padding_idx)


def _matrix(x, op):
    if x.ndim < 2:
        raise ShapeError(f"{op}: expects a tensor of at least 2 dimensions, got shape {x.shape}")


@register("tril")
class Tril:
    @staticmethod
    def forward(ctx, x, *, k, lower):
        ctx.k, ctx.lower = k, lower
        return ctx.xp.tril(x, k) if lower else ctx.xp.triu(x, k)

    @staticmethod
    def backward(ctx, gy):
        return ctx.xp.tril(gy, ctx.k) if ctx.lower else ctx.xp.triu(gy, ctx.k)


def tril(x, diagonal: int = 0):
    """The lower triangle of the last two dims: elements above diagonal ``diagonal`` (0: the
    main one, > 0 above it) are set to 0.

    Gradient: gx = tril(gy, diagonal).
    """
    _matrix(x, "tril")
    return apply(Tril, x, k=_int(diagonal, "tril", "diagonal"), lower=True)


def triu(x, diagonal: int = 0):
    """The upper triangle of the last two dims: elements below diagonal ``diagonal`` are set
    to 0.

    Gradient: gx = triu(gy, diagonal).
    """
    _matrix(x, "triu")
    return apply(Tril, x, k=_int(diagonal, "triu", "diagonal"), lower=False)


def _diagonal_index(xp, n, offset):
    # Row and column of the ``n`` elements of diagonal ``offset``.
    i = xp.arange(n)
    return i + max(-offset, 0), i + max(offset, 0)


@register("diagonal")
class Diagonal:
    @staticmethod
    def forward(ctx, x, *, offset, dim1, dim2):
        ctx.shape, ctx.offset, ctx.dims = x.shape, offset, (dim1, dim2)
        return ctx.xp.diagonal(x, offset, dim1, dim2).copy()

    @staticmethod
    def backward(ctx, gy):
        xp = ctx.xp
        d1, d2 = ctx.dims
        moved = xp.zeros(ctx.shape, dtype=gy.dtype)
        moved = xp.moveaxis(moved, (d1, d2), (-2, -1))
        rows, cols = _diagonal_index(xp, gy.shape[-1], ctx.offset)
        moved[..., rows, cols] = gy
        return xp.ascontiguousarray(xp.moveaxis(moved, (-2, -1), (d1, d2)))


def diagonal(x, offset: int = 0, dim1: int = 0, dim2: int = 1):
    """The diagonal ``offset`` of the planes spanned by ``dim1`` and ``dim2``, as a new last
    dim (a copy; PyTorch returns a view).

    Gradient: gx = gy written on that diagonal, 0 elsewhere.
    """
    _matrix(x, "diagonal")
    d1, d2 = _axis(dim1, x.ndim, "diagonal"), _axis(dim2, x.ndim, "diagonal")
    if d1 == d2:
        raise ArgumentError(f"diagonal: dim1 and dim2 must differ, got {dim1} and {dim2}")
    return apply(Diagonal, x, offset=_int(offset, "diagonal", "offset"), dim1=d1, dim2=d2)


@register("diag")
class DiagEmbed:
    @staticmethod
    def forward(ctx, x, *, k):
        ctx.k = k
        return ctx.xp.diag(x, k)

    @staticmethod
    def backward(ctx, gy):
        return ctx.xp.diagonal(gy, ctx.k).copy()


def diag(x, diagonal: int = 0):
    """A 1-D ``x``: the square matrix with ``x`` on diagonal ``diagonal``; a 2-D ``x``: its
    diagonal ``diagonal`` (see :func:`~ferro.ops.diagonal`).

    Gradient: 1-D: gx = the diagonal of gy; 2-D: gx = gy on the diagonal, 0 elsewhere.
    """
    k = _int(diagonal, "diag", "diagonal")
    if x.ndim == 1:
        return apply(DiagEmbed, x, k=k)
    if x.ndim == 2:
        return globals()["diagonal"](x, k)
    raise ShapeError(f"diag: expects a 1-D or 2-D tensor, got shape {x.shape}")


def _dim_list(dims, ndim, op):
    dims = (dims,) if isinstance(dims, numbers.Integral) else tuple(dims)
    return tuple(_axis(d, ndim, op) for d in dims)


def movedim(x, source, destination):
    """``x`` with dims ``source`` (an int or a tuple) moved to ``destination``, the others in
    their order (a view).

    Gradient: gx = gy with the dims moved back.
    """
    src = _dim_list(source, x.ndim, "movedim")
    dst = _dim_list(destination, x.ndim, "movedim")
    if len(src) != len(dst):
        raise ArgumentError(f"movedim: {len(src)} source dims for {len(dst)} destination dims")
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ArgumentError(f"movedim: repeated dim in {source!r} or {destination!r}")
    rest = iter(d for d in range(x.ndim) if d not in src)
    where = dict(zip(dst, src, strict=True))
    return permute(x, tuple(where[i] if i in where else next(rest) for i in range(x.ndim)))


def swapaxes(x, axis0: int, axis1: int):
    """``x`` with dims ``axis0`` and ``axis1`` swapped (a view; :func:`transpose`).

    Gradient: gx = gy with the dims swapped back.
    """
    return transpose(x, axis0, axis1)


def swapdims(x, dim0: int, dim1: int):
    """``x`` with dims ``dim0`` and ``dim1`` swapped (a view; :func:`transpose`).

    Gradient: gx = gy with the dims swapped back.
    """
    return transpose(x, dim0, dim1)


@register("masked_select", broadcasts=True, same_dtype=False)
class MaskedSelect:
    @staticmethod
    def forward(ctx, x, mask):
        xp = ctx.xp
        shape = xp.broadcast_shapes(x.shape, mask.shape)
        mask = xp.broadcast_to(mask, shape)
        ctx.save(mask)
        return xp.broadcast_to(x, shape)[mask]

    @staticmethod
    def backward(ctx, gy):
        (mask,) = ctx.saved
        gx = ctx.xp.zeros(mask.shape, dtype=gy.dtype)
        gx[mask] = gy
        return gx, None


def masked_select(x, mask):
    """The elements of ``x`` where the bool ``mask`` (broadcast with ``x``) is true, as a 1-D
    tensor in row-major order.

    Gradient: gx = gy at the selected elements, 0 elsewhere (summed over broadcast dims).
    """
    if getattr(getattr(mask, "dtype", None), "kind", None) != "b":
        raise DtypeError(
            f"masked_select: mask must be a bool tensor, got {getattr(mask, 'dtype', None)}"
        )
    try:
        np.broadcast_shapes(tuple(x.shape), tuple(mask.shape))
    except ValueError:
        raise ShapeError(
            f"masked_select: mask of shape {tuple(mask.shape)} does not broadcast with the "
            f"tensor's shape {tuple(x.shape)}"
        ) from None
    mask = _index_operand(mask, x, "masked_select", kinds="b")[0]
    return apply(MaskedSelect, x, mask)


@register("nonzero", differentiable=False, same_dtype=False)
class Nonzero:
    @staticmethod
    def forward(ctx, x):
        return ctx.xp.argwhere(x).astype(ctx.xp.int64)


def nonzero(x, *, as_tuple: bool = False):
    """The int64 indices of the nonzero elements of ``x``: a (count, ndim) tensor, or with
    ``as_tuple`` one 1-D tensor per dim; not differentiable."""
    idx = apply(Nonzero, x)
    if not as_tuple:
        return idx
    if x.ndim == 0:
        return (apply(Nonzero, reshape(x, 1))[:, 0],)
    return tuple(idx[:, d] for d in range(x.ndim))


def broadcast_tensors(*tensors):
    """The tensors broadcast to their common shape (read-only views), as a tuple.

    Gradient: each gx = its gy summed over the broadcast dims.
    """
    tensors = _tensor_list(tensors, "broadcast_tensors")
    try:
        shape = np.broadcast_shapes(*(tuple(t.shape) for t in tensors))
    except ValueError:
        raise ShapeError(
            "broadcast_tensors: shapes "
            f"{', '.join(str(tuple(t.shape)) for t in tensors)} do not broadcast"
        ) from None
    return tuple(broadcast_to(t, shape) for t in tensors)


def meshgrid(*tensors, indexing: str = "ij"):
    """Coordinate grids of 1-D (or 0-d) tensors: output i varies along dim i (``indexing="ij"``,
    PyTorch's default), or with ``"xy"`` the first two dims swapped, as NumPy's default.

    Gradient: each gx = its grid's gy summed over the other dims.
    """
    if len(tensors) == 1 and isinstance(tensors[0], list | tuple):
        tensors = tensors[0]
    tensors = _tensor_list(tensors, "meshgrid")
    if indexing not in ("ij", "xy"):
        raise ArgumentError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    for t in tensors:
        if t.ndim > 1:
            raise ShapeError(f"meshgrid: expects 0-d or 1-D tensors, got shape {tuple(t.shape)}")
    n = len(tensors)
    order = list(range(n))
    if indexing == "xy" and n > 1:
        order[0], order[1] = 1, 0
    shape = [0] * n
    for i, t in enumerate(tensors):
        shape[order[i]] = t.numel()
    out = []
    for i, t in enumerate(tensors):
        one = [1] * n
        one[order[i]] = -1
        out.append(broadcast_to(reshape(t, tuple(one)), tuple(shape)))
    return tuple(out)


def cartesian_prod(*tensors):
    """The Cartesian product of 1-D tensors: a (count, len(tensors)) tensor of all
    combinations, the last tensor varying fastest (one tensor: itself).

    Gradient: each gx = the sum of gy over the rows its elements appear in.
    """
    tensors = _tensor_list(tensors, "cartesian_prod")
    for t in tensors:
        if t.ndim != 1:
            raise ShapeError(f"cartesian_prod: expects 1-D tensors, got shape {tuple(t.shape)}")
    if len(tensors) == 1:
        return tensors[0]
    return stack([reshape(g, -1) for g in meshgrid(*tensors, indexing="ij")], 1)


def diff(x, n: int = 1, dim: int = -1, prepend=None, append=None):
    """The ``n``-th forward difference along ``dim``: ``x[1:] - x[:-1]`` applied ``n`` times,
    after concatenating ``prepend`` and ``append`` (tensors) along ``dim``.

    Gradient: through the slices and subtractions.
    """
    n = _int(n, "diff", "n")
    if n < 0:
        raise ArgumentError(f"diff: n must be non-negative, got {n}")
    if x.ndim == 0:
        raise ShapeError("diff: expects a tensor of at least one dimension, got a 0-d tensor")
    a = _axis(dim, x.ndim, "diff")
    parts = [t for t in (prepend, x, append) if t is not None]
    if len(parts) > 1:
        x = cat(parts, a)
    for _ in range(n):
        length = x.shape[a] - 1
        if length <= 0:
            return narrow(x, a, 0, 0)
        x = narrow(x, a, 1, length) - narrow(x, a, 0, length)
    return x


def repeat_interleave(x, repeats=None, dim=None, *, output_size=None):
    """Repeat each element ``repeats`` times along ``dim`` (of the flattened tensor when
    ``dim`` is None); ``repeats`` is an int or a 1-D integer tensor with one count per element.
    ``repeat_interleave(counts)`` alone gives ``arange(len(counts))`` repeated by ``counts``.

    Gradient: gx = the sum of gy over each element's copies.
    """
    if repeats is None:
        from ferro._C.tensor import wrap

        counts = _index_operand(x, x, "repeat_interleave")[1]
        if counts.ndim != 1:
            raise ShapeError(f"repeat_interleave: counts must be 1-D, got shape {counts.shape}")
        xp = xp_of(counts)
        return wrap(xp.repeat(xp.arange(counts.shape[0]), counts))
    if dim is None:
        x, a = reshape(x, -1), 0
    else:
        a = _axis(dim, x.ndim, "repeat_interleave")
    size = x.shape[a]
    if isinstance(repeats, numbers.Integral) and not isinstance(repeats, bool):
        r = int(repeats)
        if r < 0:
            raise ArgumentError(f"repeat_interleave: repeats must be non-negative, got {r}")
        y = unsqueeze(x, a + 1)
        shape = list(y.shape)
        shape[a + 1] = r
        shape = tuple(shape)
        out = list(x.shape)
        out[a] = size * r
        return reshape(expand(y, shape), tuple(out))
    counts = repeats._data if isinstance(repeats, TensorBase) else repeats
    counts = np.asarray(counts.get() if hasattr(counts, "get") else counts)
    if counts.ndim == 0:
        return repeat_interleave(x, int(counts), a if dim is not None else None)
    if counts.dtype.kind not in "iu" or counts.shape != (size,) or (counts < 0).any():
        raise ShapeError(
            f"repeat_interleave: repeats must be non-negative integers, one per element of "
            f"dimension {a} (size {size}), got {counts.dtype} shape {counts.shape}"
        )
    return index_select(x, a, np.repeat(np.arange(size), counts))


def unfold_windows(x, dimension: int, size: int, step: int):
    """PyTorch's ``Tensor.unfold``: every window of ``size`` elements along ``dimension``,
    ``step`` apart; that dimension becomes the number of windows and a last dimension of
    ``size`` is added. A copy (PyTorch's is a view): writing into it does not change ``x``.

    Gradient: gx = the sum of gy over the windows each element is in.
    """
    a = _axis(dimension, max(x.ndim, 1), "unfold")
    size, step = _int(size, "unfold", "size"), _int(step, "unfold", "step")
    length = x.shape[a] if x.ndim else 1
    if size < 0 or size > length or step <= 0:
        raise ShapeError(
            f"unfold: need 0 <= size <= {length} (dimension {a}'s size) and step > 0, "
            f"got size {size}, step {step}"
        )
    if x.ndim == 0:
        return reshape(x, (1,))
    starts = np.arange(0, length - size + 1, step)
    index = (starts[:, None] + np.arange(size)).reshape(-1)
    y = index_select(x, a, index)
    shape = list(x.shape)
    shape[a : a + 1] = [len(starts), size]
    return movedim(reshape(y, tuple(shape)), a + 1, -1)


# The family's public functions (ferro.ops exports their union): a new op's name goes here.
def trace(input):  # noqa: A002 - PyTorch's argument names
    """The sum of the main diagonal of a 2-D tensor.

    Gradient: gx = gy on the diagonal, 0 elsewhere.
    """
    if not isinstance(input, TensorBase) or input.ndim != 2:
        raise ShapeError(
            f"trace: expects a 2-D tensor, got shape {tuple(getattr(input, 'shape', ()))}"
        )
    return diagonal(input).sum()


def tensor_split(input, indices_or_sections, dim: int = 0):  # noqa: A002
    """Views of ``input`` split along ``dim``, as PyTorch's ``tensor_split``: an int ``n``
    gives ``n`` parts, the first ``size % n`` one longer; a list of indices splits before
    each (indices past the end give empty parts). A tensor argument is read as an int (0-d)
    or as the list (1-D).

    Gradient: each part's gy goes back to its slice.
    """
    a = _axis(dim, input.ndim, "tensor_split")
    if isinstance(indices_or_sections, TensorBase):
        data = indices_or_sections._data
        if data.dtype.kind not in "iu" or data.ndim > 1:
            raise ArgumentTypeError(
                "tensor_split: a tensor indices_or_sections must be a 0-d or 1-D integer tensor"
            )
        indices_or_sections = data.item() if data.ndim == 0 else [int(v) for v in data.tolist()]
    size = input.shape[a]
    if isinstance(indices_or_sections, numbers.Integral):
        n = _int(indices_or_sections, "tensor_split", "sections")
        if n <= 0:
            raise ArgumentError(f"tensor_split: sections must be positive, got {n}")
        q, r = divmod(size, n)
        bounds = [i * q + min(i, r) for i in range(n + 1)]
    else:
        cuts = [_int(v, "tensor_split", "indices") for v in indices_or_sections]
        bounds = [0, *(min(max(c if c >= 0 else c + size, 0), size) for c in cuts), size]
    head = (slice(None),) * a
    return tuple(
        getitem(input, (*head, slice(lo, max(lo, hi))))
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)
    )


def take_along_dim(input, indices, dim=None):  # noqa: A002
    """``input`` gathered at ``indices`` along ``dim``, the two broadcast against each other
    in the other dims (PyTorch's ``take_along_dim``); ``dim=None`` takes from the flattened
    tensor at the flattened indices.

    Gradient: gx = gy added back at ``indices``.
    """
    if not isinstance(indices, TensorBase):
        from ferro._C.tensor import wrap
        from ferro.ops.registry import array_of

        indices = wrap(array_of(indices))
    if dim is None:
        return gather(reshape(input, -1), 0, reshape(indices, -1))
    a = _axis(dim, input.ndim, "take_along_dim")
    if getattr(indices, "ndim", None) != input.ndim:
        raise ShapeError(
            f"take_along_dim: input {tuple(input.shape)} and indices "
            f"{tuple(getattr(indices, 'shape', ()))} must have the same number of dimensions"
        )
    try:
        shape = np.broadcast_shapes(
            tuple(1 if d == a else s for d, s in enumerate(input.shape)),
            tuple(1 if d == a else s for d, s in enumerate(indices.shape)),
        )
    except ValueError:
        raise ShapeError(
            f"take_along_dim: input {tuple(input.shape)} and indices {tuple(indices.shape)} "
            f"do not broadcast outside dim {dim}"
        ) from None
    sizes = [input.shape[a] if d == a else s for d, s in enumerate(shape)]
    x = broadcast_to(input, tuple(sizes))
    sizes[a] = indices.shape[a]
    return gather(x, a, broadcast_to(indices, tuple(sizes)))


def rot90(input, k: int = 1, dims=(0, 1)):  # noqa: A002
    """Rotate by 90 degrees ``k`` times in the plane of ``dims``, from the first towards the
    second (PyTorch's and NumPy's direction).

    Gradient: gx = gy rotated back.
    """
    k = _int(k, "rot90", "k") % 4
    if len(dims) != 2:
        raise ArgumentError(f"rot90: dims must name two dimensions, got {dims!r}")
    d0, d1 = (_axis(d, input.ndim, "rot90") for d in dims)
    if d0 == d1:
        raise ArgumentError(f"rot90: dims must differ, got {dims!r}")
    if k == 0:
        return flip(input, ())
    if k == 2:
        return flip(input, (d0, d1))
    return transpose(flip(input, (d1 if k == 1 else d0,)), d0, d1)


def block_diag(*tensors):
    """The tensors (0-d, 1-D as one row, or 2-D) as the blocks of a block-diagonal matrix,
    zeros elsewhere.

    Gradient: each gx = its block of gy.
    """
    tensors = _tensor_list(tensors, "block_diag")
    for t in tensors:
        if t.ndim > 2:
            raise ShapeError(f"block_diag: expects tensors of at most 2 dims, got {tuple(t.shape)}")
    tensors = [t if t.ndim == 2 else reshape(t, 1, -1) for t in tensors]
    width = sum(t.shape[1] for t in tensors)
    rows, left = [], 0
    for t in tensors:
        rows.append(pad(t, (left, width - left - t.shape[1])))
        left += t.shape[1]
    return cat(rows, 0)


def vander(x, N=None, increasing: bool = False):  # noqa: N803 - PyTorch's argument name
    """The Vandermonde matrix of a 1-D ``x``: columns ``x**(N-1), ..., x, 1`` (``increasing``:
    the other way round), ``N`` defaulting to ``len(x)``.

    Gradient: through the running product of the powers (exact at 0).
    """
    if x.ndim != 1:
        raise ShapeError(f"vander: expects a 1-D tensor, got shape {tuple(x.shape)}")
    n = x.shape[0] if N is None else _int(N, "vander", "N")
    if n < 0:
        raise ArgumentError(f"vander: N must be non-negative, got {n}")
    from ferro.ops.reduction import cumprod

    col = reshape(x, -1, 1)
    parts = [col * 0 + 1] + [col] * (n - 1) if n else []
    powers = cumprod(cat(parts, 1), 1) if n else narrow(col, 1, 0, 0)
    return powers if increasing else flip(powers, (1,))


def _triangle_indices(row, col, offset, dtype, device, lower, op):
    from ferro._C.tensor import wrap
    from ferro.backend import default_device_or_none, parse_device
    from ferro.dtypes import as_dtype

    row, col, offset = (_int(v, op, n) for v, n in ((row, "row"), (col, "col"), (offset, "offset")))
    if row < 0 or col < 0:
        raise ArgumentError(f"{op}: row and col must be non-negative, got {row} and {col}")
    mask = np.tri(row, col, offset, dtype=bool) if lower else ~np.tri(row, col, offset - 1, bool)
    arr = np.stack(np.nonzero(mask)).astype(np.int64 if dtype is None else as_dtype(dtype))
    target = default_device_or_none() if device is None else parse_device(device)
    return wrap(arr if target is None else move(arr, target))


def tril_indices(row: int, col: int, offset: int = 0, *, dtype=None, device=None):
    """The (2, count) row and column indices of the lower triangle of a ``row x col`` matrix
    (the diagonal ``offset`` and below), in row-major order, int64 unless ``dtype`` (an index
    tensor: not differentiable).
    """
    return _triangle_indices(row, col, offset, dtype, device, True, "tril_indices")


def triu_indices(row: int, col: int, offset: int = 0, *, dtype=None, device=None):
    """The (2, count) indices of the upper triangle (the diagonal ``offset`` and above), as
    :func:`tril_indices`; not differentiable.
    """
    return _triangle_indices(row, col, offset, dtype, device, False, "triu_indices")


concat = concatenate = cat
moveaxis = movedim


def t(input):  # noqa: A002 - PyTorch's argument names
    """The transpose of a matrix; a 0-D or 1-D tensor is returned as it is (PyTorch's ``t``).

    Gradient: gx = gy transposed back.
    """
    if input.ndim > 2:
        raise ShapeError(
            f"t(): expects a tensor with at most 2 dimensions, got shape {tuple(input.shape)}; use "
            "transpose(dim0, dim1) or .mT"
        )
    return permute(input, tuple(range(input.ndim - 1, -1, -1)))


def ravel(input):  # noqa: A002
    """``input`` flattened to 1-D.

    Gradient: gx = gy reshaped back.
    """
    return reshape(input, -1)


def unflatten(input, dim: int, sizes):  # noqa: A002
    """Dim ``dim`` of ``input`` split into ``sizes`` (one entry may be -1).

    Gradient: gx = gy reshaped back.
    """
    a = _axis(dim, input.ndim, "unflatten")
    sizes = tuple(_int(s, "unflatten", "sizes") for s in sizes)
    return reshape(input, (*input.shape[:a], *sizes, *input.shape[a + 1 :]))


def take(input, index):  # noqa: A002
    """The elements of the flattened ``input`` at ``index`` (negative from the end), in
    ``index``'s shape.

    Gradient: gx = gy added back at ``index``.
    """
    return reshape(take_along_dim(input, index), tuple(index.shape))


def fliplr(input):  # noqa: A002
    """``input`` reversed along dim 1 (at least 2-D).

    Gradient: gx = gy flipped back.
    """
    if input.ndim < 2:
        raise ShapeError(f"fliplr: expects at least 2 dims, got shape {tuple(input.shape)}")
    return flip(input, (1,))


def flipud(input):  # noqa: A002
    """``input`` reversed along dim 0 (at least 1-D).

    Gradient: gx = gy flipped back.
    """
    if input.ndim < 1:
        raise ShapeError("flipud: expects at least 1 dim, got a 0-d tensor")
    return flip(input, (0,))


def _atleast(tensors, n, op, where):
    if len(tensors) == 1 and isinstance(tensors[0], list | tuple):
        tensors = tuple(tensors[0])
    out = []
    for x in _tensor_list(tensors, op):
        shape = tuple(x.shape)
        while len(shape) < n:
            shape = where(shape)
        out.append(x if shape == tuple(x.shape) else reshape(x, shape))
    return out[0] if len(out) == 1 else tuple(out)


def atleast_1d(*tensors):
    """Each tensor with at least 1 dim (a 0-d one becomes shape ``(1,)``); one tensor, or a
    tuple of them.

    Gradient: gx = gy reshaped back.
    """
    return _atleast(tensors, 1, "atleast_1d", lambda s: (1,))


def atleast_2d(*tensors):
    """Each tensor with at least 2 dims: ``(n,)`` becomes ``(1, n)``.

    Gradient: gx = gy reshaped back.
    """
    return _atleast(tensors, 2, "atleast_2d", lambda s: (1, *s))


def atleast_3d(*tensors):
    """Each tensor with at least 3 dims: ``(n,)`` becomes ``(1, n, 1)``, ``(m, n)``
    ``(m, n, 1)``.

    Gradient: gx = gy reshaped back.
    """
    return _atleast(tensors, 3, "atleast_3d", lambda s: (1, *s, 1) if len(s) == 1 else (*s, 1))


def hstack(tensors):
    """The tensors side by side: along dim 1, or dim 0 when they are 1-D (0-d ones count as
    1-D).

    Gradient: each input receives its slice of gy.
    """
    tensors = atleast_1d(*_tensor_list(tensors, "hstack"))
    tensors = tensors if isinstance(tensors, tuple) else (tensors,)
    return cat(tensors, 0 if tensors[0].ndim == 1 else 1)


def vstack(tensors):
    """The tensors on top of each other along dim 0, 1-D ones as rows.

    Gradient: each input receives its slice of gy.
    """
    tensors = atleast_2d(*_tensor_list(tensors, "vstack"))
    return cat(tensors if isinstance(tensors, tuple) else (tensors,), 0)


row_stack = vstack


def dstack(tensors):
    """The tensors stacked along dim 2 (after :func:`atleast_3d`).

    Gradient: each input receives its slice of gy.
    """
    tensors = atleast_3d(*_tensor_list(tensors, "dstack"))
    return cat(tensors if isinstance(tensors, tuple) else (tensors,), 2)


def column_stack(tensors):
    """The tensors as columns: 0-d and 1-D ones become ``(n, 1)``, then along dim 1.

    Gradient: each input receives its slice of gy.
    """
    tensors = _tensor_list(tensors, "column_stack")
    return cat([reshape(x, -1, 1) if x.ndim < 2 else x for x in tensors], 1)


__all__ = [
    "atleast_1d",
    "atleast_2d",
    "atleast_3d",
    "column_stack",
    "concat",
    "concatenate",
    "dstack",
    "fliplr",
    "flipud",
    "hstack",
    "moveaxis",
    "ravel",
    "row_stack",
    "t",
    "take",
    "unflatten",
    "vstack",
    "block_diag",
    "rot90",
    "take_along_dim",
    "tensor_split",
    "trace",
    "tril_indices",
    "triu_indices",
    "vander",
    "diff",
    "repeat_interleave",
    "broadcast_tensors",
    "broadcast_to",
    "cartesian_prod",
    "cat",
    "chunk",
    "detach",
    "diag",
    "diagonal",
    "embedding",
    "expand",
    "flatten",
    "flip",
    "gather",
    "getitem",
    "index_add",
    "index_copy",
    "index_fill",
    "index_put",
    "index_select",
    "masked_fill",
    "masked_scatter",
    "masked_select",
    "meshgrid",
    "movedim",
    "narrow",
    "nonzero",
    "one_hot",
    "pad",
    "permute",
    "repeat",
    "reshape",
    "roll",
    "scatter",
    "scatter_add",
    "select",
    "split",
    "squeeze",
    "stack",
    "swapaxes",
    "swapdims",
    "tile",
    "transpose",
    "tril",
    "triu",
    "unbind",
    "unsqueeze",
]
