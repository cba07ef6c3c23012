"""Linear algebra: ``matmul`` with NumPy semantics (1-D, 2-D, batched, broadcast batch dims)."""

from __future__ import annotations

from ferro.errors import ArgumentError, ArgumentTypeError, ShapeError
from ferro.ops.registry import apply, register


@register("matmul", broadcasts=True)
class Matmul:
    @staticmethod
    def forward(ctx, a, b):
        ctx.save(a, b)
        return a @ b

    @staticmethod
    def backward(ctx, gy):
        a, b = ctx.saved
        xp = ctx.xp
        need_a, need_b = ctx.needs_input_grad
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
    sa, sb = a.shape, b.shape
    if len(sa) == 0 or len(sb) == 0:
        raise ShapeError(f"matmul: both arguments need at least 1 dimension, got {sa} and {sb}")
    ka = sa[-1]
    kb = sb[-2] if len(sb) >= 2 else sb[0]
    if ka != kb:
        raise ShapeError(f"matmul: shapes {sa} and {sb} do not align ({ka} != {kb})")
    return apply(Matmul, a, b)


@register("linear", broadcasts=False)
class Linear:
    @staticmethod
    def forward(ctx, x, w, b):
        need_x, need_w, _ = ctx.needs_input_grad
        ctx.save(x if need_w else None, w if need_x else None)
        y = x @ w.T
        if b is not None:
            y += b
        return y

    @staticmethod
    def backward(ctx, gy):
        x, w = ctx.saved
        need_x, need_w, need_b = ctx.needs_input_grad
        gx = gy @ w if need_x else None
        gw = gb = None
        if need_w:
            g2 = gy.reshape(-1, gy.shape[-1])
            gw = g2.T @ x.reshape(-1, x.shape[-1])
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
    if "->" not in s or "." in s:
        raise ArgumentError(
            f"einsum: {subscripts!r}: ferro needs an explicit '->' output and no ellipsis"
        )
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


def einsum(subscripts: str, *operands):
    """Einstein summation with an explicit output (``"ij,jk->ik"``); no ellipsis or diagonals.
    A letter may have size 1 in some operands and one other size in the rest (broadcast, as in
    NumPy and PyTorch).

    Gradient: each operand's gradient is the einsum of gy with the other operands, broadcast over
    the letters only that operand has (summed over the letters it broadcast).
    """
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


# The family's public functions (ferro.ops exports their union): a new op's name goes here.
__all__ = [
    "dot",
    "einsum",
    "linear",
    "matmul",
    "outer",
]
