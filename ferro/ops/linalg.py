"""Linear algebra: ``matmul`` with NumPy semantics (1-D, 2-D, batched, broadcast batch dims)."""

from __future__ import annotations

import math

import numpy as np

from ferro import _intraop
from ferro._C import gemm
from ferro._C.engine import compiled
from ferro._C.tensor import TensorBase
from ferro.errors import ArgumentError, ArgumentTypeError, ShapeError
from ferro.ops.elementwise import add, mul
from ferro.ops.registry import apply, register
from ferro.ops.shape import broadcast_to


def find_blas() -> bool:
    """Give ferro._C.gemm (Note [Two-core GEMM]) the CBLAS sgemm/dgemm and the thread-count
    functions of the OpenBLAS NumPy uses, where they are found (at import; tests unset them and
    call it again). Returns whether gemm has them."""
    found, threads = _intraop.cblas("sgemm", "dgemm"), _intraop.blas_threads()
    if threads is not None:  # the thread count alone still serves _intraop's holds
        gemm.set_blas(*(found or ((0, 0), False))[0], (found or (0, False))[1], *threads)
    return gemm.have_blas()


find_blas()


def _mm(a, b):
    """``a @ b`` of matrices: ferro's two-core GEMM where it applies (Note [Two-core GEMM] in
    ferro/_C/gemm.pyx; NumPy arrays of enough work), else the array module's ``@``."""
    y = gemm.matmul(a, b)
    return a @ b if y is NotImplemented else y


def _rows(a):
    """``a`` as a matrix of its last dimension's rows (a view when ``a``'s layout allows)."""
    return a if a.ndim == 2 else a.reshape(-1, a.shape[-1])


@register("matmul", broadcasts=True, early=1, direct="matmul")
class Matmul:
    @staticmethod
    def forward(ctx, a, b):
        ctx.save(a, b)
        if a.ndim > 2 and b.ndim == 2:  # one GEMM over the folded rows (see Linear)
            return _mm(_rows(a), b).reshape(a.shape[:-1] + (b.shape[1],))
        if a.ndim == 2 and b.ndim == 2:
            return _mm(a, b)
        # NumPy's stacked products, on OpenBLAS's threads from this much work a matrix: in a
        # parallel walk the node runs alone (Note [Nodes that run alone] in ferro/_intraop.py)
        m, n = a.shape[-2] if a.ndim > 1 else 1, b.shape[-1] if b.ndim > 1 else 1
        ctx._alone = m * a.shape[-1] * n >= gemm.BLAS_THREADED
        return a @ b

    @staticmethod
    def backward(ctx, gy):
        a, b = ctx.saved
        need_a, need_b = ctx.needs_input_grad
        if a.ndim == 2 and b.ndim == 2:  # the common case: .T, no swapaxes Python layers
            return (_mm(gy, b.T) if need_a else None), (_mm(a.T, gy) if need_b else None)
        xp = ctx.xp
        if a.ndim > 2 and b.ndim == 2:
            ga = _mm(_rows(gy), b.T).reshape(a.shape) if need_a else None
            gb = _mm(_rows(a).T, _rows(gy)) if need_b else None
            return ga, gb
        # Treat 1-D operands as matrices (a row, b a column), as matmul itself does.
        a2 = a[None, :] if a.ndim == 1 else a
        b2 = b[:, None] if b.ndim == 1 else b
        if a.ndim == 1 and b.ndim == 1:
            g2 = gy.reshape(1, 1)
        elif a.ndim == 1:
            g2 = xp.expand_dims(gy, -2)
        elif b.ndim == 1:
            g2 = xp.expand_dims(gy, -1)
        else:
            g2 = gy
        ga = gb = None
        if need_a:
            ga = g2 @ xp.swapaxes(b2, -1, -2)
            if a.ndim == 1:
                ga = ga[..., 0, :]
        if need_b:
            gb = xp.swapaxes(a2, -1, -2) @ g2
            if b.ndim == 1:
                gb = gb[..., :, 0]
        return ga, gb


def matmul(a, b):
    """Matrix product with NumPy's ``@`` semantics; batch dimensions broadcast.

    Gradient: ga = gy @ b^T, gb = a^T @ gy (summed over broadcast batch dimensions).
    """
    # The arrays' plain tuples: Tensor.shape is a Python property building a Size whose
    # __getitem__ is another Python frame (four of them per call on a small-tensor step).
    sa, sb = getattr(a, "_data", a).shape, getattr(b, "_data", b).shape
    if len(sa) == 0 or len(sb) == 0:
        raise ShapeError(f"matmul: both arguments need at least 1 dimension, got {sa} and {sb}")
    ka = sa[-1]
    kb = sb[-2] if len(sb) >= 2 else sb[0]
    if ka != kb:
        raise ShapeError(f"matmul: shapes {sa} and {sb} do not align ({ka} != {kb})")
    return apply(Matmul, a, b)


matmul = compiled(Matmul, matmul)  # compiled for two matrices (Note [Direct ops])


@register("linear", broadcasts=False, early=1)
class Linear:
    @staticmethod
    def forward(ctx, x, w, b):
        need_x, need_w, _ = ctx.needs_input_grad
        ctx.save(x if need_w else None, w if need_x else None)
        # Batch dimensions are folded into the rows: one GEMM, where x @ w.T on a 3-D x runs
        # one small GEMM per leading index (2-3x slower on a Transformer's (B, T, C)).
        y = _mm(_rows(x), w.T)
        if b is not None:
            y += b
        return y.reshape(x.shape[:-1] + (w.shape[0],))

    @staticmethod
    def backward(ctx, gy):
        x, w = ctx.saved
        need_x, need_w, need_b = ctx.needs_input_grad
        gx = _mm(_rows(gy), w).reshape(gy.shape[:-1] + (w.shape[1],)) if need_x else None
        gw = gb = None
        if need_w:
            g2 = gy.reshape(-1, gy.shape[-1])
            gw = _mm(g2.T, x.reshape(-1, x.shape[-1]))
        if need_b:
            gb = gy.reshape(-1, gy.shape[-1]).sum(axis=0)
        return gx, gw, gb


def linear(x, weight, bias=None):
    """``x @ weight.T + bias`` in one op; x is (..., in), weight (out, in), bias (out,).

    Gradient: gx = gy @ weight, gweight = gyᵀ x (batch dims folded), gbias = sum of gy.
    """
    if weight.ndim != 2 or x.ndim < 1 or x.shape[-1] != weight.shape[1]:
        raise ShapeError(f"linear: input {x.shape} does not fit weight {weight.shape} (out, in)")
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ShapeError(f"linear: bias of shape {bias.shape}, expected ({weight.shape[0]},)")
    return apply(Linear, x, weight, bias)


@register("outer")
class Outer:
    @staticmethod
    def forward(ctx, a, b):
        ctx.save(a, b)
        return ctx.xp.outer(a, b)

    @staticmethod
    def backward(ctx, gy):
        a, b = ctx.saved
        return gy @ b, gy.T @ a


def outer(a, b):
    """Outer product of two 1-D tensors.

    Gradient: ga = gy @ b, gb = gyᵀ @ a.
    """
    if a.ndim != 1 or b.ndim != 1:
        raise ShapeError(f"outer: needs 1-D tensors, got {a.shape} and {b.shape}")
    return apply(Outer, a, b)


def dot(a, b):
    """Inner product of two 1-D tensors of one length.

    Gradient: ga = gy * b, gb = gy * a.
    """
    if a.ndim != 1 or b.ndim != 1 or a.shape != b.shape:
        raise ShapeError(f"dot: needs two 1-D tensors of one length, got {a.shape} and {b.shape}")
    return matmul(a, b)


def _parse_einsum(subscripts: str, n: int):
    if not isinstance(subscripts, str):
        raise ArgumentTypeError(
            f"einsum: subscripts must be a str, got {type(subscripts).__name__} {subscripts!r}"
        )
    s = subscripts.replace(" ", "")
    if s.count("->") != 1 or "." in s:
        raise ArgumentError(f"einsum: {subscripts!r}: expected one '->' and no '.' outside '...'")
    lhs, out = s.split("->")
    ins = lhs.split(",")
    if len(ins) != n:
        raise ArgumentError(f"einsum: {subscripts!r} names {len(ins)} operands, got {n}")
    for sub in ins + [out]:
        if not sub.isalpha() and sub:
            raise ArgumentError(f"einsum: {subscripts!r}: subscripts must be letters, got {sub!r}")
    for sub in ins:
        if len(set(sub)) != len(sub):
            raise ArgumentError(
                f"einsum: {subscripts!r}: a repeated letter in one operand ({sub!r}, a diagonal) "
                "is not supported"
            )
    if len(set(out)) != len(out):
        raise ArgumentError(f"einsum: {subscripts!r}: a letter repeats in the output {out!r}")
    if not set(out) <= set("".join(ins)):
        raise ArgumentError(f"einsum: {subscripts!r}: output letters must appear in the inputs")
    return ins, out


@register("einsum")
class Einsum:
    @staticmethod
    def forward(ctx, *ops, subscripts, parsed):
        ctx.save(*ops)
        ctx.parsed = parsed
        return ctx.xp.einsum(subscripts, *ops)

    @staticmethod
    def backward(ctx, gy):
        xp = ctx.xp
        ops = ctx.saved
        ins, out = ctx.parsed
        grads = []
        for i, need in enumerate(ctx.needs_input_grad):
            if not need:
                grads.append(None)
                continue
            others = [(s, o) for j, (s, o) in enumerate(zip(ins, ops, strict=True)) if j != i]
            avail = set(out).union(*[set(s) for s, _ in others])
            present = "".join(c for c in ins[i] if c in avail)
            spec = ",".join([out] + [s for s, _ in others]) + "->" + present
            g = xp.einsum(spec, gy, *[o for _, o in others])
            # Letters only this operand has were summed out: broadcast the gradient over them.
            full_shape = ops[i].shape
            shape_present = [1] * len(ins[i])
            k = 0
            for pos, c in enumerate(ins[i]):
                if c in avail:
                    shape_present[pos] = g.shape[k]
                    k += 1
            g = g.reshape(shape_present)
            # A letter of size 1 here and larger in another operand was broadcast: sum back.
            spread = tuple(
                pos
                for pos, (n, m) in enumerate(zip(full_shape, shape_present, strict=True))
                if n == 1 != m
            )
            if spread:
                g = g.sum(axis=spread, keepdims=True)
            g = xp.broadcast_to(g, full_shape)
            grads.append(g)
        return tuple(grads)


def _explicit_einsum(subscripts, operands) -> str:
    """``subscripts`` with each ``...`` spelled out in unused letters and the output made
    explicit (implicit mode: the broadcast dims, then the letters used once, sorted)."""
    if not isinstance(subscripts, str):
        return subscripts
    s = subscripts.replace(" ", "")
    lhs, arrow, out = s.partition("->")
    ins = lhs.split(",")
    if len(ins) != len(operands):
        return s  # _parse_einsum reports the mismatch
    free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in s]
    n_ell = 0
    for sub, op in zip(ins, operands, strict=True):
        if "..." in sub:
            n_ell = max(n_ell, getattr(op, "ndim", 0) - (len(sub) - 3))
    if n_ell > len(free):
        raise ArgumentError(f"einsum: {subscripts!r}: too many broadcast dimensions")
    ell = "".join(free[:n_ell])
    spelled = []
    for sub, op in zip(ins, operands, strict=True):
        if "..." in sub:
            k = getattr(op, "ndim", 0) - (len(sub) - 3)
            sub = sub.replace("...", ell[n_ell - k :] if k > 0 else "")
        spelled.append(sub)
    if not arrow:
        letters = "".join(spelled)
        once = sorted(c for c in set(letters) if letters.count(c) == 1 and c not in ell)
        out = ell + "".join(once)
    else:
        out = out.replace("...", ell)
    return ",".join(spelled) + "->" + out


def einsum(subscripts: str, *operands):
    """Einstein summation (``"ij,jk->ik"``), with ``...`` for broadcast leading dimensions and
    the implicit output (``"ij,jk"``) as in PyTorch; no diagonals (a letter repeated in one
    operand). A letter may have size 1 in some operands and one other size in the rest
    (broadcast, as in NumPy and PyTorch). The operands may also be given as one list.

    Gradient: each operand's gradient is the einsum of gy with the other operands, broadcast over
    the letters only that operand has (summed over the letters it broadcast).
    """
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    subscripts = _explicit_einsum(subscripts, operands)
    parsed = _parse_einsum(subscripts, len(operands))
    sizes: dict = {}
    for sub, op in zip(parsed[0], operands, strict=True):
        if len(sub) != op.ndim:
            raise ShapeError(f"einsum: operand {sub!r} has {op.ndim} dims, shape {op.shape}")
        for letter, n in zip(sub, op.shape, strict=True):
            sizes.setdefault(letter, set()).add(n)
    for letter, found in sizes.items():
        if len(found - {1}) > 1:
            raise ShapeError(
                f"einsum: {subscripts!r}: letter {letter!r} has sizes {sorted(found)} in "
                "different operands (they must agree, or be 1)"
            )
    return apply(Einsum, *operands, subscripts=subscripts, parsed=parsed)


def _scaled(t, c):
    return t if c == 1 else mul(t, c)


def _check_dims(op, **tensors):
    for name, (t, ndim) in tensors.items():
        if not isinstance(t, TensorBase):
            raise ArgumentTypeError(f"{op}: {name} must be a Tensor, got {type(t).__name__}")
        if t.ndim != ndim:
            raise ShapeError(
                f"{op}: {name} must have {ndim} dimension(s), got shape {tuple(t.shape)}"
            )


def mm(input, mat2):  # noqa: A002 - PyTorch's argument names
    """The matrix product of two 2-D tensors (``matmul`` without broadcasting).

    Gradient: ginput = gy @ mat2.T, gmat2 = input.T @ gy.
    """
    _check_dims("mm", input=(input, 2), mat2=(mat2, 2))
    return matmul(input, mat2)


def spmm(input, mat2):  # noqa: A002
    """``mm`` under PyTorch's sparse-times-dense name (ferro's tensors are dense).
    Gradient: mm's, ginput = gy @ mat2.T, gmat2 = input.T @ gy."""
    return mm(input, mat2)


def bmm(input, mat2):  # noqa: A002
    """Batched matrix product ``(b, n, m) @ (b, m, p) -> (b, n, p)``, the same batch size on
    both sides (``bmm`` does not broadcast; ``matmul`` does).

    Gradient: ginput = gy @ mat2ᵀ, gmat2 = inputᵀ @ gy, per batch entry.
    """
    _check_dims("bmm", input=(input, 3), mat2=(mat2, 3))
    if input.shape[0] != mat2.shape[0]:
        raise ShapeError(
            f"bmm: the batch sizes differ: shapes {tuple(input.shape)} and {tuple(mat2.shape)} "
            "(bmm does not broadcast; matmul does)"
        )
    return matmul(input, mat2)


def mv(input, vec):  # noqa: A002
    """The product of a 2-D matrix and a 1-D vector.

    Gradient: ginput = outer(gy, vec), gvec = inputᵀ @ gy.
    """
    _check_dims("mv", input=(input, 2), vec=(vec, 1))
    return matmul(input, vec)


def addmm(input, mat1, mat2, *, beta=1, alpha=1):  # noqa: A002 - PyTorch's argument names
    """``beta * input + alpha * (mat1 @ mat2)`` for 2-D ``mat1`` and ``mat2`` (``input``
    broadcasts), as PyTorch's ``addmm``.

    Gradient: ginput = beta * gy; gmat1 = alpha * gy @ mat2.T; gmat2 = alpha * mat1.T @ gy.
    """
    _check_dims("addmm", mat1=(mat1, 2), mat2=(mat2, 2))
    return add(_scaled(input, beta), _scaled(matmul(mat1, mat2), alpha))


def addmv(input, mat, vec, *, beta=1, alpha=1):  # noqa: A002
    """``beta * input + alpha * (mat @ vec)`` for a 2-D ``mat`` and a 1-D ``vec``.

    Gradient: ginput = beta * gy; gmat = alpha * outer(gy, vec); gvec = alpha * mat.T @ gy.
    """
    _check_dims("addmv", mat=(mat, 2), vec=(vec, 1))
    return add(_scaled(input, beta), _scaled(matmul(mat, vec), alpha))


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):  # noqa: A002
    """``beta * input + alpha * (batch1 @ batch2)`` for 3-D batches of the same size.

    Gradient: ginput = beta * gy; gbatch1 = alpha * gy @ batch2^T; gbatch2 = alpha *
    batch1^T @ gy (per batch).
    """
    _check_dims("baddbmm", batch1=(batch1, 3), batch2=(batch2, 3))
    if batch1.shape[0] != batch2.shape[0]:
        raise ShapeError(
            f"baddbmm: the batch sizes differ: shapes {tuple(batch1.shape)} and "
            f"{tuple(batch2.shape)}"
        )
    return add(_scaled(input, beta), _scaled(matmul(batch1, batch2), alpha))


def cross(input, other, dim=None):  # noqa: A002
    """The cross product of 3-vectors along ``dim`` (the first dimension of size 3 when None,
    as PyTorch's ``torch.cross``; ``linalg.cross`` uses -1); the operands broadcast.

    Gradient: ginput = other x gy; gother = gy x input.
    """
    from ferro.ops.shape import select, stack

    for name, t in (("input", input), ("other", other)):
        if not isinstance(t, TensorBase):
            raise ArgumentTypeError(f"cross: {name} must be a Tensor, got {type(t).__name__}")
    try:
        shape = np.broadcast_shapes(tuple(input.shape), tuple(other.shape))
    except ValueError:
        raise ShapeError(
            f"cross: shapes {tuple(input.shape)} and {tuple(other.shape)} do not broadcast"
        ) from None
    if dim is None:
        dim = next((d for d, n in enumerate(shape) if n == 3), None)
        if dim is None:
            raise ShapeError(f"cross: no dimension of size 3 in the shape {shape}")
    if not -len(shape) <= dim < len(shape) or shape[dim] != 3:
        raise ShapeError(f"cross: dimension {dim} of the shape {shape} must have size 3")
    dim = dim % len(shape)
    a = broadcast_to(input, shape)
    b = broadcast_to(other, shape)
    a0, a1, a2 = (select(a, dim, i) for i in range(3))
    b0, b1, b2 = (select(b, dim, i) for i in range(3))
    parts = [a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0]
    return stack(parts, dim)


def cdist(x1, x2, p: float = 2.0, compute_mode=None):
    """The p-norm distances between each row of ``x1`` ``(..., P, M)`` and each row of ``x2``
    ``(..., R, M)``: shape ``(..., P, R)``, as PyTorch's ``cdist`` (batch dims broadcast).
    ``compute_mode`` is accepted; ferro computes the differences directly.

    Gradient: through the differences, as ``norm``'s (0 where a distance is 0).
    """
    from ferro.ops.elementwise import abs as _abs
    from ferro.ops.elementwise import real_arg
    from ferro.ops.reduction import norm
    from ferro.ops.reduction import sum as _sum
    from ferro.ops.shape import unsqueeze

    p = real_arg(p, "p", "cdist")
    if not p > 0:
        raise ArgumentError(f"cdist: p must be positive (ferro has no p = 0 distance), got {p}")
    for name, t in (("x1", x1), ("x2", x2)):
        if not isinstance(t, TensorBase):
            raise ArgumentTypeError(f"cdist: {name} must be a Tensor, got {type(t).__name__}")
        if t.ndim < 2:
            raise ShapeError(f"cdist: {name} must have at least 2 dimensions, got {t.shape}")
    if x1.shape[-1] != x2.shape[-1]:
        raise ShapeError(
            f"cdist: x1 {tuple(x1.shape)} and x2 {tuple(x2.shape)} differ in the last dimension"
        )
    diff = unsqueeze(x1, -2) - unsqueeze(x2, -3)
    if p in (1.0, 2.0, math.inf):
        return norm(diff, p if p == math.inf else int(p), -1)
    return _sum(_abs(diff) ** p, -1) ** (1.0 / p)


# The family's public functions (ferro.ops exports their union): a new op's name goes here.
def addbmm(input, batch1, batch2, *, beta=1, alpha=1):  # noqa: A002
    """``beta * input + alpha * sum over b of batch1[b] @ batch2[b]`` (3-D batches of the same
    size; ``input`` broadcasts to the 2-D result), as PyTorch's ``addbmm``.

    Gradient: ginput = beta * gy; gbatch1[b] = alpha * gy @ batch2[b]^T; gbatch2[b] = alpha *
    batch1[b]^T @ gy.
    """
    _check_dims("addbmm", batch1=(batch1, 3), batch2=(batch2, 3))
    if batch1.shape[0] != batch2.shape[0]:
        raise ShapeError(
            f"addbmm: the batch sizes differ: shapes {tuple(batch1.shape)} and "
            f"{tuple(batch2.shape)}"
        )
    return add(_scaled(input, beta), _scaled(matmul(batch1, batch2).sum(0), alpha))


def addr(input, vec1, vec2, *, beta=1, alpha=1):  # noqa: A002
    """``beta * input + alpha * outer(vec1, vec2)`` for 1-D ``vec1`` and ``vec2`` (``input``
    broadcasts), as PyTorch's ``addr``.

    Gradient: ginput = beta * gy; gvec1 = alpha * gy @ vec2; gvec2 = alpha * gy^T @ vec1.
    """
    _check_dims("addr", vec1=(vec1, 1), vec2=(vec2, 1))
    return add(_scaled(input, beta), _scaled(outer(vec1, vec2), alpha))


def tensordot(a, b, dims=2):
    """Sums of products over dims of ``a`` and ``b``: the last ``dims`` of ``a`` with the first
    ``dims`` of ``b`` (an int), or the dims listed in a pair ``(dims_a, dims_b)``; the rest of
    ``a``'s dims, then ``b``'s, make the result.

    Gradient: through the permute, reshape and matmul it is made of.
    """
    from ferro.ops.shape import permute, reshape

    if isinstance(dims, int):
        if dims < 0 or dims > min(a.ndim, b.ndim):
            raise ArgumentError(f"tensordot: dims={dims} for tensors of {a.ndim} and {b.ndim} dims")
        da, db = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        if len(dims) != 2:
            raise ArgumentError(f"tensordot: dims must be an int or a pair of lists, got {dims!r}")
        da, db = ([d] if isinstance(d, int) else list(d) for d in dims)
        da, db = [d % a.ndim for d in da], [d % b.ndim for d in db]
    if len(da) != len(db) or any(a.shape[i] != b.shape[j] for i, j in zip(da, db, strict=True)):
        raise ShapeError(
            f"tensordot: dims {da} of {tuple(a.shape)} and {db} of {tuple(b.shape)} do not match"
        )
    ra, rb = [d for d in range(a.ndim) if d not in da], [d for d in range(b.ndim) if d not in db]
    k = math.prod(a.shape[d] for d in da)
    left = reshape(permute(a, (*ra, *da)), (-1, k))
    right = reshape(permute(b, (*db, *rb)), (k, -1))
    return reshape(matmul(left, right), (*(a.shape[d] for d in ra), *(b.shape[d] for d in rb)))


def inner(input, other):  # noqa: A002
    """The sums of products over the last dims of ``input`` and ``other`` (a 0-d operand
    multiplies), as PyTorch's ``inner``.

    Gradient: through tensordot.
    """
    if input.ndim == 0 or other.ndim == 0:
        return mul(input, other)
    return tensordot(input, other, ([-1], [-1]))


def kron(input, other):  # noqa: A002
    """The Kronecker product: blocks ``input[i] * other`` (the shorter shape padded with
    leading 1s).

    Gradient: through the broadcast product it is made of.
    """
    from ferro.ops.shape import reshape

    n = max(input.ndim, other.ndim)
    sa = (1,) * (n - input.ndim) + tuple(input.shape)
    sb = (1,) * (n - other.ndim) + tuple(other.shape)
    x = reshape(input, tuple(v for s in sa for v in (s, 1)))
    y = reshape(other, tuple(v for s in sb for v in (1, s)))
    return reshape(mul(x, y), tuple(p * q for p, q in zip(sa, sb, strict=True)))


__all__ = [
    "inner",
    "kron",
    "tensordot",
    "addbmm",
    "addmm",
    "addr",
    "addmv",
    "baddbmm",
    "cdist",
    "cross",
    "dot",
    "einsum",
    "bmm",
    "linear",
    "matmul",
    "mm",
    "spmm",
    "mv",
    "outer",
]
