"""``ferro.backends``: PyTorch's backend switches, so programs that set them run unchanged.

ferro's CPU math is NumPy's (and its BLAS), its GPU math CuPy's; none of these switches
changes a result in ferro. They are plain attributes that keep what a program sets (PyTorch
scripts set ``torch.backends.cudnn.benchmark = True`` or ``...matmul.allow_tf32 = True`` at the
top; nanoGPT's train.py does both), and ``mps.is_available()`` says False.
"""

from __future__ import annotations

from types import SimpleNamespace

#: ``torch.backends.cuda``: TF32 matmul and reduced-precision reductions (no effect in ferro).
cuda = SimpleNamespace(
    matmul=SimpleNamespace(
        allow_tf32=False,
        allow_fp16_reduced_precision_reduction=True,
        allow_bf16_reduced_precision_reduction=True,
    ),
    is_built=lambda: False,
)
#: ``torch.backends.cudnn``: ferro does not use cuDNN; the flags are kept, not used.
cudnn = SimpleNamespace(
    enabled=True, benchmark=False, deterministic=False, allow_tf32=True, is_available=lambda: False
)
#: ``torch.backends.mps``: no Metal backend in ferro.
mps = SimpleNamespace(is_available=lambda: False, is_built=lambda: False)

__all__ = ["cuda", "cudnn", "mps"]

_precision = "highest"


def set_float32_matmul_precision(precision: str) -> None:
    """PyTorch's TF32/bf16 matmul switch (``"highest"``, ``"high"``, ``"medium"``): kept for
    :func:`get_float32_matmul_precision`; ferro's float32 matmuls are always full precision."""
    global _precision
    from ferro.errors import ArgumentError

    if precision not in ("highest", "high", "medium"):
        raise ArgumentError(
            "set_float32_matmul_precision: precision must be 'highest', 'high' or 'medium', "
            f"got {precision!r}"
        )
    _precision = precision


def get_float32_matmul_precision() -> str:
    """What :func:`set_float32_matmul_precision` last set (``"highest"`` at start)."""
    return _precision


__all__ += ["get_float32_matmul_precision", "set_float32_matmul_precision"]
