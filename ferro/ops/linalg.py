"""Linear algebra: ``matmul`` with NumPy semantics (1-D, 2-D, batched, broadcast batch dims)."""

from __future__ import annotations

from ferro.errors import ShapeError
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
