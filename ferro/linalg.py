"""``ferro.linalg``: PyTorch's ``torch.linalg`` namespace. The functions live in
:mod:`ferro.ops.decomp` and :mod:`ferro.ops.linalg`; this module only names them as
``torch.linalg`` does. docs/linalg.md lists them, their gradients and caveats."""

from ferro.errors import LinAlgError
from ferro.ops.decomp import (
    EighResult,
    LstsqResult,
    QRResult,
    SlogdetResult,
    SVDResult,
    cholesky,
    det,
    eigh,
    eigvalsh,
    lstsq,
    matrix_norm,
    matrix_power,
    multi_dot,
    pinv,
    qr,
    slogdet,
    solve,
    svdvals,
    vecdot,
    vector_norm,
)
from ferro.ops.decomp import inverse as inv
from ferro.ops.decomp import linalg_cross as cross
from ferro.ops.decomp import linalg_diagonal as diagonal
from ferro.ops.decomp import linalg_norm as norm
from ferro.ops.decomp import linalg_svd as svd
from ferro.ops.linalg import matmul

__all__ = [
    "EighResult",
    "LinAlgError",
    "LstsqResult",
    "QRResult",
    "SVDResult",
    "SlogdetResult",
    "cholesky",
    "cross",
    "det",
    "diagonal",
    "eigh",
    "eigvalsh",
    "inv",
    "lstsq",
    "matmul",
    "matrix_norm",
    "matrix_power",
    "multi_dot",
    "norm",
    "pinv",
    "qr",
    "slogdet",
    "solve",
    "svd",
    "svdvals",
    "vecdot",
    "vector_norm",
]
