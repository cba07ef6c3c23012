"""Shape ops: reshape/view, transpose/permute. Their outputs are views of their inputs."""

from __future__ import annotations

import numbers

from ferro.errors import ShapeError
from ferro.ops.registry import apply, array_of, register


@register("reshape", view=True)
class Reshape:
    @staticmethod
    def forward(ctx, x, *, shape):
        ctx.in_shape = x.shape
        return x.reshape(shape)

    @staticmethod
    def backward(ctx, gy):
        return gy.reshape(ctx.in_shape)


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


def _size_args(shape) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    for s in shape:
        if not isinstance(s, numbers.Integral) or isinstance(s, bool):
            raise TypeError(f"reshape: sizes must be ints, got {shape!r}")
    return tuple(int(s) for s in shape)


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


def _axis(a, ndim, op):
    if not isinstance(a, numbers.Integral) or isinstance(a, bool):
        raise TypeError(f"{op}: dims must be ints, got {a!r}")
    if not -ndim <= a < max(ndim, 1):
        raise ShapeError(f"{op}: dim {a} is out of range for a tensor of {ndim} dimensions")
    return int(a) % ndim if ndim else 0


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


def _dims_arg(dims) -> tuple:
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        return tuple(dims[0])
    return tuple(dims)


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


def squeeze(x, dim=None):
    """Remove dimensions of size 1 (all of them, or ``dim`` if it has size 1).

    Gradient: gx = gy reshaped back.
    """
    if dim is None:
        return reshape(x, tuple(s for s in x.shape if s != 1))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    axes = {_axis(d, x.ndim, "squeeze") for d in dims}
    return reshape(x, tuple(s for i, s in enumerate(x.shape) if not (i in axes and s == 1)))


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


def _tensor_list(tensors, op):
    tensors = list(tensors)
    if not tensors:
        raise ValueError(f"{op}: expected a non-empty sequence of tensors")
    return tensors


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
        xp = ctx.xp
        return tuple(xp.take(gy, i, axis=ctx.axis) for i in range(gy.shape[ctx.axis]))


def stack(tensors, dim: int = 0):
    """Stack same-shape tensors along a new dimension ``dim``.

    Gradient: each input receives its slice of gy.
    """
    tensors = _tensor_list(tensors, "stack")
    shapes = {tuple(t.shape) for t in tensors}
    if len(shapes) != 1:
        raise ShapeError(f"stack: all tensors need one shape, got {sorted(shapes)}")
    return apply(Stack, *tensors, axis=_axis(dim, tensors[0].ndim + 1, "stack"))


@register("split", view=True)
class Split:
    @staticmethod
    def forward(ctx, x, *, bounds, axis):
        ctx.axis = axis
        return tuple(ctx.xp.split(x, bounds, axis=axis))

    @staticmethod
    def backward(ctx, *gys):
        return ctx.xp.concatenate(gys, axis=ctx.axis)


def split(x, split_size_or_sections, dim: int = 0):
    """Split into pieces of ``split_size`` (the last may be smaller) or of the given sizes.

    Gradient: gx = the pieces' gradients concatenated (zeros for unused pieces).
    """
    a = _axis(dim, x.ndim, "split")
    n = x.shape[a]
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        if step <= 0:
            raise ValueError(f"split: split_size must be positive, got {step}")
        bounds = list(range(step, n, step))
    else:
        sizes = list(split_size_or_sections)
        if sum(sizes) != n or any(s < 0 for s in sizes):
            raise ShapeError(f"split: sizes {sizes} do not add up to dim {dim} of size {n}")
        bounds, acc = [], 0
        for s in sizes[:-1]:
            acc += s
            bounds.append(acc)
    return apply(Split, x, bounds=tuple(bounds), axis=a)


def chunk(x, chunks: int, dim: int = 0):
    """Split into ``chunks`` pieces of equal size (the last may be smaller), as PyTorch does.

    Gradient: gx = the pieces' gradients concatenated.
    """
    if chunks <= 0:
        raise ValueError(f"chunk: chunks must be positive, got {chunks}")
    n = x.shape[_axis(dim, x.ndim, "chunk")]
    step = max(-(-n // chunks), 1)
    return split(x, step, dim)


def _scatter_add_into_zeros(xp, shape, where, gy):
    """Zeros of ``shape`` with ``gy`` added at ``where``: the backward of every gathering op
    (``add.at`` adds repeated indices up, where assignment would keep only the last)."""
    gx = xp.zeros(shape, dtype=gy.dtype)
    xp.add.at(gx, where, gy)
    return gx


def _index_arrays(index):
    """Unwrap tensors inside an index; say whether it needs advanced indexing."""
    from ferro._C.tensor import TensorBase

    items = index if isinstance(index, tuple) else (index,)
    out, advanced = [], False
    for it in items:
        if isinstance(it, TensorBase):
            it = it.data
        if isinstance(it, list):
            import numpy as np

            it = np.asarray(it)
        if hasattr(it, "dtype") and hasattr(it, "shape"):
            advanced = True
            if it.dtype.kind not in "iub":
                from ferro.errors import DtypeError

                raise DtypeError(f"getitem: index arrays must be integer or bool, got {it.dtype}")
        elif not (it is None or it is Ellipsis or isinstance(it, (int, slice))):
            raise TypeError(f"getitem: unsupported index {it!r}")
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


@register("getitem_advanced")
class GetitemAdvanced:
    @staticmethod
    def forward(ctx, x, *, index):
        ctx.shape, ctx.index = x.shape, index
        return x[index]

    @staticmethod
    def backward(ctx, gy):
        return _scatter_add_into_zeros(ctx.xp, ctx.shape, ctx.index, gy)


def getitem(x, index):
    """``x[index]`` with ints, slices (negative steps too), None, Ellipsis, bool masks and
    integer arrays, as NumPy indexes.

    Gradient: gx = zeros with gy scattered back (repeated indices add up).
    """
    idx, advanced = _index_arrays(index)
    try:
        if advanced:
            return apply(GetitemAdvanced, x, index=idx)
        return apply(Getitem, x, index=idx)
    except IndexError as exc:
        raise ShapeError(
            f"getitem: index {index!r} is invalid for shape {x.shape}: {exc}"
        ) from None


def narrow(x, dim: int, start: int, length: int):
    """The slice ``start:start+length`` of dimension ``dim`` (a view).

    Gradient: gx = gy placed in that slice, zeros elsewhere.
    """
    a = _axis(dim, x.ndim, "narrow")
    n = x.shape[a]
    if start < 0:
        start += n
    if not (0 <= start <= n and 0 <= length and start + length <= n):
        raise ShapeError(f"narrow: start {start} length {length} out of range for size {n}")
    return getitem(x, (slice(None),) * a + (slice(start, start + length),))


def select(x, dim: int, index: int):
    """The sub-tensor at ``index`` of dimension ``dim`` (removes that dimension).

    Gradient: gx = gy placed at that index, zeros elsewhere.
    """
    a = _axis(dim, x.ndim, "select")
    n = x.shape[a]
    if not -n <= index < n:
        raise ShapeError(f"select: index {index} out of range for dim {dim} of size {n}")
    return getitem(x, (slice(None),) * a + (index,))


def _check_index(index, size, op):
    arr = array_of(index)
    if arr.dtype.kind not in "iu":
        from ferro.errors import DtypeError

        raise DtypeError(f"{op}: index must be an integer tensor, got {arr.dtype}")
    if arr.size and (arr.max() >= size or arr.min() < -size):
        raise ShapeError(
            f"{op}: index out of range: values in [{int(arr.min())}, {int(arr.max())}] for a "
            f"dimension of size {size}"
        )
    return arr


@register("index_select")
class IndexSelect:
    @staticmethod
    def forward(ctx, x, *, index, axis):
        ctx.shape, ctx.index, ctx.axis = x.shape, index, axis
        return ctx.xp.take(x, index, axis=axis)

    @staticmethod
    def backward(ctx, gy):
        where = (slice(None),) * ctx.axis + (ctx.index,)
        return _scatter_add_into_zeros(ctx.xp, ctx.shape, where, gy)


def index_select(x, dim: int, index):
    """Entries of dimension ``dim`` at the 1-D integer ``index``.

    Gradient: gx = gy added back at ``index`` (repeated indices add up).
    """
    a = _axis(dim, x.ndim, "index_select")
    idx = _check_index(index, x.shape[a], "index_select")
    if idx.ndim != 1:
        raise ShapeError(f"index_select: index must be 1-D, got shape {idx.shape}")
    return apply(IndexSelect, x, index=idx, axis=a)


def _grid(xp, index, axis):
    # Index tuple addressing x at (i0, ..., index[i], ...) for every position of ``index``.
    grids = list(xp.ogrid[tuple(slice(0, s) for s in index.shape)]) if index.ndim else []
    grids[axis] = index
    return tuple(grids)


@register("gather")
class Gather:
    @staticmethod
    def forward(ctx, x, *, index, axis):
        ctx.shape, ctx.index, ctx.axis = x.shape, index, axis
        return ctx.xp.take_along_axis(x, index, axis=axis)

    @staticmethod
    def backward(ctx, gy):
        return _scatter_add_into_zeros(ctx.xp, ctx.shape, _grid(ctx.xp, ctx.index, ctx.axis), gy)


def _check_gather_index(x, index, a, op):
    idx = _check_index(index, x.shape[a], op)
    if idx.ndim != x.ndim or any(
        i > s for d, (i, s) in enumerate(zip(idx.shape, x.shape, strict=True)) if d != a
    ):
        raise ShapeError(f"{op}: index of shape {idx.shape} does not fit input of shape {x.shape}")
    return idx


def gather(x, dim: int, index):
    """``out[i][j] = x[i][index[i][j]]`` along ``dim`` (PyTorch's gather).

    Gradient: gx = gy added back at ``index`` along ``dim``.
    """
    a = _axis(dim, x.ndim, "gather")
    idx = _check_gather_index(x, index, a, "gather")
    if any(i != s for d, (i, s) in enumerate(zip(idx.shape, x.shape, strict=True)) if d != a):
        # take_along_axis needs matching sizes off ``dim``: narrow x to the index's extent.
        x = getitem(
            x, tuple(slice(0, i) if d != a else slice(None) for d, i in enumerate(idx.shape))
        )
    return apply(Gather, x, index=idx, axis=a)


@register("scatter", broadcasts=False)
class Scatter:
    @staticmethod
    def forward(ctx, x, src, *, index, axis, add):
        xp = ctx.xp
        out = x.copy()
        grid = _grid(xp, index, axis)
        if not hasattr(src, "shape"):
            src = xp.full(index.shape, src, dtype=x.dtype)
        if add:
            xp.add.at(out, grid, src)
        else:
            out[grid] = src
        ctx.grid, ctx.add = grid, add
        return out

    @staticmethod
    def backward(ctx, gy):
        need_x, need_src = ctx.needs_input_grad
        gx = gsrc = None
        if need_x:
            gx = gy.copy() if not ctx.add else gy
            if not ctx.add:
                gx[ctx.grid] = 0
        if need_src:
            gsrc = gy[ctx.grid]
        return gx, gsrc


def _scatter(x, dim, index, src, add, op):
    from ferro._C.tensor import TensorBase

    a = _axis(dim, x.ndim, op)
    idx = _check_gather_index(x, index, a, op)
    if isinstance(src, TensorBase):
        if src.ndim != idx.ndim or any(i > s for i, s in zip(idx.shape, src.shape, strict=True)):
            raise ShapeError(f"{op}: src of shape {src.shape} is smaller than index {idx.shape}")
        if tuple(src.shape) != tuple(idx.shape):
            src = getitem(src, tuple(slice(0, i) for i in idx.shape))
    return apply(Scatter, x, src, index=idx, axis=a, add=add)


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
        from ferro.errors import DtypeError

        raise DtypeError(
            f"masked_fill: mask must be a bool tensor, got {getattr(mask, 'dtype', None)}"
        )
    if getattr(value, "ndim", 0) != 0:
        raise ShapeError(f"masked_fill: value must be a scalar or 0-d tensor, got {value.shape}")
    return apply(MaskedFill, x, mask, value)


def _pad_source_index(xp, n, lo, hi, mode):
    i = xp.arange(-lo, n + hi)
    if mode == "replicate":
        return xp.clip(i, 0, n - 1)
    # reflect (without repeating the edge), as numpy's "reflect" and PyTorch's do
    period = 2 * (n - 1)
    i = xp.abs(i) % period if period else xp.zeros_like(i)
    return xp.where(i >= n, period - i, i)


@register("pad")
class Pad:
    @staticmethod
    def forward(ctx, x, *, widths, mode, value):
        xp = ctx.xp
        ctx.widths, ctx.mode, ctx.shape = widths, mode, x.shape
        if mode == "constant":
            return xp.pad(x, widths, mode="constant", constant_values=value)
        return xp.pad(x, widths, mode="edge" if mode == "replicate" else "reflect")

    @staticmethod
    def backward(ctx, gy):
        xp = ctx.xp
        g = gy
        for d, (lo, hi) in enumerate(ctx.widths):
            if lo == 0 and hi == 0:
                continue
            n = ctx.shape[d]
            if ctx.mode == "constant":
                g = g[(slice(None),) * d + (slice(lo, lo + n),)]
                continue
            src = _pad_source_index(xp, n, lo, hi, ctx.mode)
            shape = g.shape[:d] + (n,) + g.shape[d + 1 :]
            folded = xp.zeros(shape, dtype=g.dtype)
            xp.add.at(folded, (slice(None),) * d + (src,), g)
            g = folded
        return g


def pad(x, pad, mode: str = "constant", value: float = 0.0):
    """Pad with PyTorch's convention: ``pad = (last_lo, last_hi, second_last_lo, ...)``.

    Modes: ``constant`` (``value``), ``reflect`` (no edge repeat), ``replicate`` (edge).

    Gradient: gx = gy's central part, plus the padded positions folded back onto the elements
    they copy (reflect, replicate).
    """
    pad = tuple(int(p) for p in pad)
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise ShapeError(f"pad: {pad} must hold (lo, hi) pairs for at most {x.ndim} dimensions")
    if mode not in ("constant", "reflect", "replicate"):
        raise ValueError(f"pad: mode must be constant, reflect or replicate, got {mode!r}")
    if any(p < 0 for p in pad):
        raise ValueError(f"pad: negative padding {pad} is not supported")
    widths = [(0, 0)] * x.ndim
    for k in range(len(pad) // 2):
        d = x.ndim - 1 - k
        widths[d] = (pad[2 * k], pad[2 * k + 1])
        if mode == "reflect" and max(widths[d]) >= x.shape[d]:
            raise ShapeError(
                f"pad: reflect padding {widths[d]} needs to be smaller than dim {d} of size "
                f"{x.shape[d]}"
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
        raise ValueError(f"tile: repetitions must be non-negative, got {reps}")
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
            raise ValueError("roll: without dims, shifts must be one int")
        return apply(Roll, x, shifts=shifts, axes=None)
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shifts) != len(dims):
        raise ValueError(f"roll: {len(shifts)} shifts for {len(dims)} dims")
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
    if indices.dtype.kind not in "iu":
        from ferro.errors import DtypeError

        raise DtypeError(f"one_hot: indices must be integer, got {indices.dtype}")
    data = indices.data
    if num_classes < 0:
        num_classes = int(data.max()) + 1 if data.size else 0
    if data.size and (data.min() < 0 or data.max() >= num_classes):
        raise ShapeError(
            f"one_hot: indices in [{int(data.min())}, {int(data.max())}] do not fit "
            f"num_classes={num_classes}"
        )
    return apply(OneHot, indices, num_classes=int(num_classes))


@register("embedding")
class Embedding:
    @staticmethod
    def forward(ctx, weight, *, indices, padding_idx):
        ctx.indices, ctx.padding_idx, ctx.shape = indices, padding_idx, weight.shape
        return weight[indices]

    @staticmethod
    def backward(ctx, gy):
        gw = _scatter_add_into_zeros(ctx.xp, ctx.shape, ctx.indices, gy)
        if ctx.padding_idx is not None:
            gw[ctx.padding_idx] = 0
        return gw


def embedding(indices, weight, padding_idx=None):
    """Rows of ``weight`` (num_embeddings, dim) at integer ``indices``.

    Gradient: gweight = gy added into the selected rows (repeats add up); the ``padding_idx``
    row gets none.
    """
    if weight.ndim != 2:
        raise ShapeError(f"embedding: weight must be 2-D, got shape {weight.shape}")
    idx = _check_index(indices, weight.shape[0], "embedding")
    if padding_idx is not None:
        padding_idx = int(padding_idx) % weight.shape[0]
    return apply(Embedding, weight, indices=idx, padding_idx=padding_idx)
