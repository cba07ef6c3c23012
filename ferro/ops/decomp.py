"""Matrix functions and decompositions (PyTorch's ``torch.linalg`` and the old top-level names):
inv, det, slogdet, solve, cholesky, qr, eigh, svd as registered ops, and the norms, powers and
pseudo-inverse composed of them. Batched over leading dims ``(..., M, N)``; NumPy on the CPU and
CuPy on the GPU through the same ``xp.linalg`` functions (those both have).

Each op's gradient is written once, as a function of a small namespace (:class:`_Arrays` over
``xp`` for the first-order backward, :data:`_TENSORS` over ferro ops for
``differentiable_backward``), so the same formula runs on arrays and, under ``create_graph``, on
Tensors (Note [Double backward]). The formulas are PyTorch's (FunctionsManual.cpp); docs/linalg.md
lists them with their caveats (repeated eigenvalues or singular values, singular matrices).
"""

from __future__ import annotations

import math
import numbers
from collections import namedtuple

import numpy as np

from ferro._C.tensor import TensorBase, wrap
from ferro.backend import xp_of
from ferro.errors import (
    ArgumentError,
    ArgumentTypeError,
    DtypeError,
    LinAlgError,
    NotSupportedError,
    ShapeError,
)
from ferro.ops import elementwise as _el
from ferro.ops import reduction as _red
from ferro.ops import shape as _sh
from ferro.ops.linalg import cross as _cross
from ferro.ops.linalg import matmul
from ferro.ops.registry import apply, register


class _Arrays:
    """The gradient formulas' namespace on NumPy or CuPy arrays."""

    def __init__(self, xp):
        self.xp = xp

    def inv(self, a):
        return _lapack("inv (in a backward)", self.xp.linalg.inv, a)

    def solve(self, a, b):
        return _lapack("solve (in a backward)", self.xp.linalg.solve, a, b)

    def adj_t(self, a, d):
        """The transposed adjugate ``det(A) A⁻ᵀ``; through the SVD where A is singular (there
        ``det(U) det(Vh) U diag(prod of the other singular values) Vh``, PyTorch's way)."""
        xp = self.xp
        try:
            return d[..., None, None] * self.mT(self.xp.linalg.inv(a))
        except np.linalg.LinAlgError:
            u, s, vh = xp.linalg.svd(a)
            others = xp.where(xp.eye(s.shape[-1], dtype=bool), 1, s[..., None, :]).prod(-1)
            sign = xp.linalg.det(u) * xp.linalg.det(vh)
            return sign[..., None, None] * (u * others[..., None, :]) @ vh

    def mT(self, a):  # noqa: N802 - PyTorch's name
        return self.xp.swapaxes(a, -1, -2)

    def tril(self, a, k=0):
        return self.xp.tril(a, k)

    def diagonal(self, a):
        return self.xp.diagonal(a, 0, -2, -1)

    def cat(self, parts):
        return self.xp.concatenate(parts, axis=-1)

    def eye(self, n, like):
        return self.xp.eye(n, dtype=like.dtype)


class _Tensors:
    """The same namespace over ferro ops on Tensors: the formulas become differentiable."""

    def inv(self, a):
        return inverse(a)

    def solve(self, a, b):
        return apply(Solve, a, b)

    def adj_t(self, a, d):  # at a singular matrix inverse raises LinAlgError
        return d[..., None, None] * inverse(a).mT

    def mT(self, a):  # noqa: N802
        return a.mT

    def tril(self, a, k=0):
        return _sh.tril(a, k)

    def diagonal(self, a):
        return _sh.diagonal(a, 0, -2, -1)

    def cat(self, parts):
        return _sh.cat(parts, -1)

    def eye(self, n, like):
        return wrap(xp_of(like._data).eye(n, dtype=like._data.dtype))


_TENSORS = _Tensors()


def _zeros_if_none(g, like):
    return like * 0 if g is None else g


def _vec(v):
    """``v`` (..., n) as a row, to scale a matrix's columns: ``v[..., None, :]``."""
    return v[..., None, :]


def _diag(ns, v):
    return v[..., :, None] * ns.eye(v.shape[-1], v)


def _off_diag_inverse(ns, e):
    """1/e off the diagonal, 0 on it (``e`` is a difference matrix with zeros there)."""
    eye = ns.eye(e.shape[-1], e)
    return (1 - eye) / (e + eye)


def _matrix(op, a):
    if not isinstance(a, TensorBase):
        raise ArgumentTypeError(f"linalg.{op}: A must be a Tensor, got {type(a).__name__}")
    if a._data.dtype.kind != "f":
        raise DtypeError(f"linalg.{op}: A must be float32 or float64, got {a.dtype}")
    if a.ndim < 2:
        raise ShapeError(f"linalg.{op}: A must have at least 2 dimensions, got {tuple(a.shape)}")


def _square(op, a):
    _matrix(op, a)
    if a.shape[-1] != a.shape[-2]:
        raise ShapeError(
            f"linalg.{op}: A must be batches of square matrices, got shape {tuple(a.shape)}"
        )


def _lapack(op, fn, a, *args, what="singular"):
    """Run ``fn``; LAPACK's failure becomes a LinAlgError naming the op and shape."""
    try:
        return fn(a, *args)
    except np.linalg.LinAlgError as e:
        raise LinAlgError(
            f"linalg.{op}: the input of shape {tuple(a.shape)} is {what} ({e})"
        ) from None


def _twice(grad):
    """An op class's backward pair from one formula ``grad(ns, ctx, *grads)``."""
    return (
        staticmethod(lambda ctx, *g: grad(_Arrays(ctx.xp), ctx, *g)),
        staticmethod(lambda ctx, *g: grad(_TENSORS, ctx, *g)),
    )


def _inv_grad(ns, ctx, gy):
    (y,) = ctx.saved
    yt = ns.mT(y)
    return -(yt @ gy @ yt)


@register("inv")
class Inv:
    @staticmethod
    def forward(ctx, a):
        ctx._alone = True  # Note [Nodes that run alone]: LAPACK on OpenBLAS's threads
        y = _lapack("inv", ctx.xp.linalg.inv, a)
        ctx.save(y)
        return y

    backward, differentiable_backward = _twice(_inv_grad)


def inverse(A):  # noqa: N803 - PyTorch's argument name
    """The inverse of each square matrix of ``A`` (..., n, n) (``linalg.inv``); a singular
    matrix raises :class:`~ferro.errors.LinAlgError` (on CuPy it gives inf/nan, unchecked).

    Gradient: gA = -A⁻ᵀ gy A⁻ᵀ.
    """
    _square("inv", A)
    return apply(Inv, A)


def _det_grad(ns, ctx, gd):
    a, d = ctx.saved
    return gd[..., None, None] * ns.adj_t(a, d)


@register("det")
class Det:
    @staticmethod
    def forward(ctx, a):
        ctx._alone = True
        d = ctx.xp.linalg.det(a)
        ctx.save(a, d)
        return d

    backward, differentiable_backward = _twice(_det_grad)


def det(A):  # noqa: N803
    """The determinant of each square matrix of ``A`` (..., n, n).

    Gradient: gA = gy adj(A)ᵀ (= gy det(A) A⁻ᵀ; through the SVD at a singular matrix, as
    PyTorch; the second derivative there raises LinAlgError).
    """
    _square("det", A)
    return apply(Det, A)


SlogdetResult = namedtuple("SlogdetResult", ["sign", "logabsdet"])


def _slogdet_grad(ns, ctx, gsign, glog):
    (a,) = ctx.saved
    return glog[..., None, None] * ns.mT(ns.inv(a))


@register("slogdet")
class Slogdet:
    @staticmethod
    def forward(ctx, a):
        ctx._alone = True
        sign, log = ctx.xp.linalg.slogdet(a)
        ctx.save(a)
        return sign, log

    backward, differentiable_backward = _twice(_slogdet_grad)


def slogdet(A):  # noqa: N803
    """``(sign, logabsdet)`` of each square matrix's determinant, a named tuple as PyTorch's;
    ``sign`` carries no gradient.

    Gradient: gA = glogabsdet A⁻ᵀ.
    """
    _square("slogdet", A)
    sign, log = apply(Slogdet, A)
    return SlogdetResult(sign.detach(), log)


def logdet(A):  # noqa: N803
    """``log(det(A))``: nan where the determinant is negative, -inf where it is 0 (PyTorch).

    Gradient: as ``slogdet``'s logabsdet.
    """
    sign, log = slogdet(A)
    return log + _el.log(sign)


def _solve_grad(ns, ctx, gx):
    a, x = ctx.saved
    gb = ns.solve(ns.mT(a), gx)
    return -(gb @ ns.mT(x)), gb


@register("solve")
class Solve:
    @staticmethod
    def forward(ctx, a, b):
        ctx._alone = True
        x = _lapack("solve", ctx.xp.linalg.solve, a, b)
        ctx.save(a, x)
        return x

    backward, differentiable_backward = _twice(_solve_grad)


def solve(A, B, *, left=True):  # noqa: N803
    """The solution X of ``A X = B`` (``left=False``: ``X A = B``), as ``linalg.solve``. ``B``
    is a batch of vectors when it is 1-D or has the shape ``A.shape[:-1]`` (PyTorch's rule),
    else of matrices; batch dims broadcast.

    Gradient: gB = A⁻ᵀ gX (a solve), gA = -gB Xᵀ.
    """
    _square("solve", A)
    if not left:
        return solve(A.mT, B.mT).mT
    if not isinstance(B, TensorBase) or B.ndim < 1:
        raise ShapeError(f"linalg.solve: B must be a Tensor of at least 1 dimension, got {B!r}")
    vector = B.ndim == 1 or tuple(B.shape) == tuple(A.shape[:-1])
    b = _sh.unsqueeze(B, -1) if vector else B
    if b.shape[-2] != A.shape[-1]:
        raise ShapeError(
            f"linalg.solve: A of shape {tuple(A.shape)} and B of shape {tuple(B.shape)} do not fit"
        )
    try:
        batch = np.broadcast_shapes(tuple(A.shape[:-2]), tuple(b.shape[:-2]))
    except ValueError:
        raise ShapeError(
            f"linalg.solve: the batch dims of A {tuple(A.shape)} and B {tuple(B.shape)} differ"
        ) from None
    a = _sh.broadcast_to(A, batch + tuple(A.shape[-2:]))
    b = _sh.broadcast_to(b, batch + tuple(b.shape[-2:]))
    x = apply(Solve, a, b)
    return _sh.squeeze(x, -1) if vector else x


def _cholesky_grad(ns, ctx, gl):
    (low,) = ctx.saved
    p = ns.mT(low) @ ns.tril(gl)
    p = ns.tril(p) - 0.5 * _diag(ns, ns.diagonal(p))
    linv = ns.inv(low)
    ga = ns.mT(linv) @ p @ linv
    return 0.5 * (ga + ns.mT(ga))


@register("cholesky")
class Cholesky:
    @staticmethod
    def forward(ctx, a):
        ctx._alone = True
        low = _lapack("cholesky", ctx.xp.linalg.cholesky, a, what="not positive-definite")
        ctx.save(low)
        return low

    backward, differentiable_backward = _twice(_cholesky_grad)


def cholesky(A, upper=False):  # noqa: N803
    """The Cholesky factor L (``L Lᵀ = A``, lower) of each symmetric positive-definite matrix,
    or ``Lᵀ`` with ``upper=True``; only the lower triangle of ``A`` is read. Not positive-definite
    raises :class:`~ferro.errors.LinAlgError` (NumPy; CuPy returns nan).

    Gradient: gA = sym(L⁻ᵀ Φ(Lᵀ gL) L⁻¹), Φ the lower triangle with its diagonal halved.
    """
    _square("cholesky", A)
    low = apply(Cholesky, A)
    return low.mT if upper else low


QRResult = namedtuple("QRResult", ["Q", "R"])


def _qr_square_grad(ns, q, r, gq, gr):
    m = r @ ns.mT(gr) - ns.mT(gq) @ q
    b = gq + q @ (ns.tril(m) + ns.mT(ns.tril(m, -1)))
    return ns.mT(ns.solve(r, ns.mT(b)))


def _qr_grad(ns, ctx, gq, gr):
    q, r = ctx.saved
    if ctx.mode == "r":
        raise NotSupportedError("linalg.qr: no gradient with mode='r' (Q is not computed)")
    m, n = q.shape[-2], r.shape[-1]
    if ctx.mode == "complete" and m > n:
        raise NotSupportedError(
            f"linalg.qr: no gradient with mode='complete' for tall matrices ({m} > {n}), as PyTorch"
        )
    gq, gr = _zeros_if_none(gq, q), _zeros_if_none(gr, r)
    if m >= n:
        return _qr_square_grad(ns, q, r, gq, gr)
    u, v = r[..., :, :m], r[..., :, m:]
    gu, gv = gr[..., :, :m], gr[..., :, m:]
    gx = _qr_square_grad(ns, q, u, gq + (q @ v) @ ns.mT(gv), gu)
    return ns.cat([gx, q @ gv])


@register("qr")
class QR:
    @staticmethod
    def forward(ctx, a, *, mode):
        ctx._alone = True
        ctx.mode = mode
        if mode == "r":
            r = ctx.xp.linalg.qr(a, mode="r")
            q = ctx.xp.zeros((0,), a.dtype)
        else:
            q, r = ctx.xp.linalg.qr(a, mode=mode)
        ctx.save(q, r)
        return q, r

    backward, differentiable_backward = _twice(_qr_grad)


def qr(A, mode="reduced"):  # noqa: N803
    """``(Q, R)`` with ``A = Q R``, Q orthonormal columns, R upper triangular (``linalg.qr``);
    ``mode`` is 'reduced' (k = min(m, n) columns), 'complete' (Q square) or 'r' (Q empty).

    Gradient: PyTorch's (Q, R both): gA = [gQ + Q copyltu(M)] R⁻ᵀ with M = R gRᵀ - gQᵀ Q, m ≥ n,
    and the split for m < n; none for mode='r' or 'complete' with m > n.
    """
    _matrix("qr", A)
    if mode not in ("reduced", "complete", "r"):
        raise ArgumentError(f"linalg.qr: mode must be 'reduced', 'complete' or 'r', got {mode!r}")
    return QRResult(*apply(QR, A, mode=mode))


EighResult = namedtuple("EighResult", ["eigenvalues", "eigenvectors"])


def _eigh_grad(ns, ctx, gw, gv):
    w, v = ctx.saved
    inner = 0 if gw is None else _diag(ns, gw)
    if gv is not None:
        f = _off_diag_inverse(ns, _vec(w) - w[..., :, None])
        inner = inner + f * (ns.mT(v) @ gv)
    return v @ inner @ ns.mT(v)


@register("eigh")
class Eigh:
    @staticmethod
    def forward(ctx, a, *, uplo):
        ctx._alone = True
        w, v = _lapack("eigh", ctx.xp.linalg.eigh, a, uplo, what="not convergent")
        ctx.save(w, v)
        return w, v

    backward, differentiable_backward = _twice(_eigh_grad)


def eigh(A, UPLO="L"):  # noqa: N803
    """Eigenvalues (ascending) and orthonormal eigenvectors of each symmetric matrix, reading
    the lower (``UPLO='L'``) or upper triangle, as ``linalg.eigh``.

    Gradient: gA = V (diag(gw) + F ∘ (Vᵀ gV)) Vᵀ, F_ij = 1/(w_j - w_i) off the diagonal
    (PyTorch's): unbounded where eigenvalues repeat, and it assumes a loss that does not depend
    on the eigenvectors' signs.
    """
    _square("eigh", A)
    if UPLO not in ("L", "U"):
        raise ArgumentError(f"linalg.eigh: UPLO must be 'L' or 'U', got {UPLO!r}")
    return EighResult(*apply(Eigh, A, uplo=UPLO))


def eigvalsh(A, UPLO="L"):  # noqa: N803
    """The eigenvalues (ascending) of each symmetric matrix.

    Gradient: gA = V diag(gw) Vᵀ.
    """
    return eigh(A, UPLO).eigenvalues


SVDResult = namedtuple("SVDResult", ["U", "S", "Vh"])
OldSVDResult = namedtuple("OldSVDResult", ["U", "S", "V"])  # torch.svd's


def _svd_grad(ns, ctx, gu, gs, gvh):
    u, s, vh = ctx.saved
    k = s.shape[-1]
    m, n = u.shape[-2], vh.shape[-1]
    u, vh = u[..., :, :k], vh[..., :k, :]
    gu = None if gu is None else gu[..., :, :k]
    gvh = None if gvh is None else gvh[..., :k, :]
    f = _off_diag_inverse(ns, _vec(s * s) - (s * s)[..., :, None])
    inner = f * 0 if gs is None else _diag(ns, gs)
    ga = 0
    if gu is not None:
        uhgu = ns.mT(u) @ gu
        inner = inner + f * (uhgu - ns.mT(uhgu)) * _vec(s)
        if m > k:
            ga = ((gu - u @ uhgu) / _vec(s)) @ vh
    if gvh is not None:
        vhgv = vh @ ns.mT(gvh)
        inner = inner + s[..., :, None] * (f * (vhgv - ns.mT(vhgv)))
        if n > k:
            ga = ga + (u / _vec(s)) @ (gvh - (gvh @ ns.mT(vh)) @ vh)
    return u @ inner @ vh + ga


@register("svd")
class SVD:
    @staticmethod
    def forward(ctx, a, *, full_matrices):
        ctx._alone = True
        u, s, vh = _lapack("svd", ctx.xp.linalg.svd, a, full_matrices, what="not convergent")
        ctx.save(u, s, vh)
        return u, s, vh

    backward, differentiable_backward = _twice(_svd_grad)


def linalg_svd(A, full_matrices=True):  # noqa: N803
    """``(U, S, Vh)`` with ``A = U diag(S) Vh``, S descending, as ``linalg.svd``.

    Gradient: PyTorch's (U, S and Vh; with ``full_matrices=True`` the first min(m, n) columns
    of U and rows of Vh carry it): unbounded where singular values repeat or vanish, and it
    assumes a loss that does not depend on the singular vectors' signs.
    """
    _matrix("svd", A)
    return SVDResult(*apply(SVD, A, full_matrices=bool(full_matrices)))


def svd(input, some=True, compute_uv=True):  # noqa: A002 - PyTorch's names
    """``(U, S, V)`` in PyTorch's old ``torch.svd`` convention: V, not Vh; ``some=True`` the
    reduced factors; ``compute_uv=False`` zero-filled U (m, m) and V (n, n), as PyTorch.

    Gradient: as ``linalg.svd``.
    """
    u, s, vh = linalg_svd(input, full_matrices=not (some and compute_uv))
    if not compute_uv:
        return OldSVDResult(_el.mul(u.detach(), 0), s, _el.mul(vh.detach().mT, 0))
    return OldSVDResult(u, s, vh.mT)


def svdvals(A):  # noqa: N803
    """The singular values, descending (``linalg.svdvals``).

    Gradient: gA = U diag(gS) Vh.
    """
    return linalg_svd(A, full_matrices=False).S


def pinv(A, *, atol=None, rtol=None, hermitian=False):  # noqa: N803
    """The Moore-Penrose pseudo-inverse from the SVD, singular values below
    ``max(atol, rtol * max(S))`` dropped (rtol defaults to ``eps * max(m, n)``, PyTorch's).

    ``hermitian`` is accepted; the SVD serves either way.

    Gradient: through the SVD (a composite); unbounded where a kept singular value repeats.
    """
    u, s, vh = linalg_svd(A, full_matrices=False)
    sd = s._data
    xp = xp_of(sd)
    if rtol is None:
        rtol = 0.0 if atol else np.finfo(sd.dtype).eps * max(A.shape[-2:])
    top = sd[..., :1] if sd.shape[-1] else sd
    keep = sd > xp.maximum(atol or 0.0, rtol * top)
    sinv = _el.where(wrap(keep), 1 / _el.where(wrap(keep), s, 1.0), 0.0)
    return matmul(vh.mT * sinv[..., None, :], u.mT)


LstsqResult = namedtuple("LstsqResult", ["solution", "residuals", "rank", "singular_values"])


def lstsq(A, B, rcond=None, *, driver=None):  # noqa: N803
    """The least-squares solution X of ``A X ≈ B`` (minimum norm where A is rank-deficient),
    as ``linalg.lstsq`` with the SVD driver 'gelsd' whatever ``driver`` names: ``(solution,
    residuals, rank, singular_values)``, residuals the squared column norms of ``A X - B`` when
    m > n and every matrix has full rank (else empty). ``B`` is (..., m, k); batch dims
    broadcast.

    Gradient: through ``pinv(A) @ B`` (PyTorch's): for A and B; rank and singular values carry
    none.
    """
    _matrix("lstsq", A)
    if not isinstance(B, TensorBase) or B.ndim < 2 or B.shape[-2] != A.shape[-2]:
        raise ShapeError(
            f"linalg.lstsq: B must be (..., m, k) with m = {A.shape[-2]} rows as A "
            f"{tuple(A.shape)}, got {tuple(getattr(B, 'shape', ()))}"
        )
    m, n = A.shape[-2:]
    sd = svdvals(A.detach())._data
    xp = xp_of(sd)
    if rcond is None:
        rcond = np.finfo(sd.dtype).eps * max(m, n)
    rank = (sd > rcond * (sd[..., :1] if n and m else sd)).sum(-1)
    x = matmul(pinv(A, rtol=rcond), B)
    residuals = wrap(xp.zeros(0, sd.dtype))
    if m > n and bool((rank == n).all()):
        residuals = _red.sum((matmul(A, x) - B) ** 2, -2)
    return LstsqResult(x, residuals, wrap(rank.astype(xp.int64)), wrap(sd))


def pinverse(input, rcond=1e-15):  # noqa: A002
    """``linalg.pinv`` with PyTorch's old ``rcond`` (relative cut-off).

    Gradient: through the SVD.
    """
    return pinv(input, rtol=rcond)


def matrix_power(A, n):  # noqa: N803
    """``A`` to the integer power ``n`` by repeated squaring; negative ``n`` inverts first, 0
    gives the identity.

    Gradient: through the products (and the inverse).
    """
    _square("matrix_power", A)
    if not isinstance(n, numbers.Integral) or isinstance(n, bool):
        raise ArgumentError(f"linalg.matrix_power: n must be an int, got {n!r}")
    if n == 0:
        eye = xp_of(A._data).eye(A.shape[-1], dtype=A._data.dtype)
        return _sh.broadcast_to(wrap(eye), tuple(A.shape)) + A.detach() * 0
    base, result = (inverse(A) if n < 0 else A), None
    n = abs(n)
    while n:
        if n & 1:
            result = base if result is None else matmul(result, base)
        n >>= 1
        if n:
            base = matmul(base, base)
    return result


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):  # noqa: A002
    """The vector ``ord``-norm over ``dim`` (all elements when None): inf and -inf give
    max/min |x|, 0 the count of non-zeros, any other p ``sum(|x|^p)^(1/p)``.

    Gradient: as ``norm``'s for 1, 2 and inf (0 where the norm is 0); elementwise otherwise.
    """
    if dtype is not None:
        x = x.to(dtype)
    if x._data.dtype.kind != "f":
        raise DtypeError(f"linalg.vector_norm: x must be a float tensor, got {x.dtype}")
    ord = float(ord)  # noqa: A001
    if ord in (1.0, 2.0, math.inf):
        return _red.norm(x, int(ord) if ord < 3 else ord, dim, keepdim)
    a = _el.abs(x)
    if ord == -math.inf:
        return _red.amin(a, dim, keepdim)
    if ord == 0:
        return _red.sum((a != 0).to(x.dtype), dim, keepdim)
    return _red.sum(a**ord, dim, keepdim) ** (1.0 / ord)


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None):  # noqa: N803, A002
    """The matrix norm over the two dims ``dim``: 'fro', 'nuc' (sum of singular values), 2 and
    -2 (largest, smallest singular value), 1 and -1 (max/min column abs-sum), inf and -inf
    (max/min row abs-sum), as ``linalg.matrix_norm``.

    Gradient: through abs-sums, max/min or the SVD.
    """
    if dtype is not None:
        A = A.to(dtype)  # noqa: N806
    _matrix("matrix_norm", A)
    if len(dim) != 2:
        raise ArgumentError(f"linalg.matrix_norm: dim must be a pair, got {dim!r}")
    d0, d1 = (d % A.ndim for d in dim)
    if d0 == d1:
        raise ArgumentError(f"linalg.matrix_norm: dim names one dimension twice: {dim!r}")
    if ord == "fro":
        return vector_norm(A, 2, (d0, d1), keepdim)
    a = _sh.movedim(A, (d0, d1), (-2, -1))
    if ord in ("nuc", 2, -2):
        s = svdvals(a)
        out = _red.sum(s, -1) if ord == "nuc" else (_red.amax if ord == 2 else _red.amin)(s, -1)
    elif ord in (1, -1, math.inf, -math.inf):
        sums = _red.sum(_el.abs(a), -2 if abs(ord) == 1 else -1)
        out = (_red.amax if ord > 0 else _red.amin)(sums, -1)
    else:
        raise ArgumentError(f"linalg.matrix_norm: unsupported ord {ord!r}")
    if keepdim:
        for d in sorted((d0, d1)):
            out = _sh.unsqueeze(out, d)
    return out


def linalg_norm(A, ord=None, dim=None, keepdim=False, *, dtype=None):  # noqa: N803, A002
    """``linalg.norm``: a matrix norm when ``dim`` is a pair (or None on a 2-D input with an
    ``ord``), else a vector norm (the 2-norm of all elements when ``ord`` and ``dim`` are None).

    Gradient: as the norm it dispatches to.
    """
    if isinstance(dim, int):
        dim = (dim,)
    if dim is not None and len(dim) == 2 or (dim is None and ord is not None and A.ndim == 2):
        return matrix_norm(A, "fro" if ord is None else ord, dim or (-2, -1), keepdim, dtype=dtype)
    if dim is None and ord is not None and A.ndim != 1:
        raise ShapeError(f"linalg.norm: ord={ord!r} with dim=None needs a 1-D or 2-D input")
    return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)


def linalg_cross(input, other, *, dim=-1):  # noqa: A002
    """``linalg.cross``: ``cross`` with dim -1 by default."""
    return _cross(input, other, dim)


def vecdot(x, y, *, dim=-1):
    """The dot products of the vectors along ``dim`` (broadcast), as ``linalg.vecdot``.

    Gradient: gx = gy y, gy = gy x.
    """
    return _red.sum(_el.mul(x, y), dim)


def multi_dot(tensors):
    """The product of the chain of matrices (the first may be 1-D, a row, the last 1-D, a
    column), left to right.

    Gradient: through the matmuls.
    """
    if len(tensors) < 2:
        raise ArgumentError(f"linalg.multi_dot: needs at least 2 tensors, got {len(tensors)}")
    out = tensors[0]
    for t in tensors[1:]:
        out = matmul(out, t)
    return out


def linalg_diagonal(A, *, offset=0, dim1=-2, dim2=-1):  # noqa: N803
    """``linalg.diagonal``: the diagonals over the last two dims by default."""
    return _sh.diagonal(A, offset, dim1, dim2)


__all__ = [
    "cholesky",
    "det",
    "inverse",
    "logdet",
    "matrix_power",
    "pinverse",
    "qr",
    "slogdet",
    "svd",
]
