"""Op database entries for ferro/ops/decomp.py (matrix functions and decompositions).

Decompositions are checked through functions that do not depend on their arbitrary choices:
eigenvectors and singular vectors multiplied by their first entry (sign-free), and inputs made
symmetric (eigh) or symmetric positive-definite (cholesky) inside the function, as PyTorch's
OpInfos do, so that central differences stay in the op's domain."""

from __future__ import annotations

import numpy as np

import ferro
from opdb.core import OpInfo, Sample


def _well_conditioned(rng, shape):
    """Values in (-1, 1): with :func:`_shifted` every matrix is invertible, also after the fuzz
    tests' broadcast layout repeats its first row (1 rᵀ + 3 I has eigenvalues 3 and 3 + sum r)."""
    return rng.uniform(-1, 1, size=shape)


def _shifted(f):
    """``f`` of ``A + 3 I``: the op on a well-conditioned matrix (the gradient is A's)."""

    def g(a, *rest):
        n = a.shape[-1]
        if isinstance(a, ferro.Tensor):
            return f(a + 3 * ferro.eye(n, dtype=a.dtype, device=a.device), *rest)
        return f(a + 3 * np.eye(n, dtype=a.dtype), *rest)

    return g


def _square_samples(rng):
    return [
        Sample((_well_conditioned(rng, (3, 3)),), label="3x3"),
        Sample((_well_conditioned(rng, (2, 3, 3)),), label="batched"),
        Sample((_well_conditioned(rng, (1, 1)),), label="1x1"),
        Sample((_well_conditioned(rng, (2, 2)),), noncontig=True, label="noncontig"),
    ]


def _rect_samples(rng):
    return [
        Sample((rng.normal(size=(3, 3)),), label="square"),
        Sample((rng.normal(size=(4, 2)),), label="tall"),
        Sample((rng.normal(size=(2, 2, 3)),), label="wide batched"),
        Sample((rng.normal(size=(3, 2)),), noncontig=True, label="noncontig"),
    ]


def _sym(a):
    return a + a.mT if isinstance(a, ferro.Tensor) else a + np.swapaxes(a, -1, -2)


def _spd(a):
    n = a.shape[-1]
    mt = a.mT if isinstance(a, ferro.Tensor) else np.swapaxes(a, -1, -2)
    if isinstance(a, ferro.Tensor):
        return a @ mt + n * ferro.eye(n, dtype=a.dtype, device=a.device)
    return a @ mt + n * np.eye(n)


def _joined(*outs):
    """The outputs of a decomposition as one flat tensor (or array): the database checks one."""
    if isinstance(outs[0], ferro.Tensor):
        return ferro.cat([o.reshape(-1) for o in outs])
    return np.concatenate([np.reshape(o, -1) for o in outs])


def _signless_cols(v):
    return v * v[..., :1, :]


def _signless_rows(v):
    return v * v[..., :, :1]


def _svd_fn(a, full_matrices=False):
    u, s, vh = ferro.linalg.svd(a, full_matrices=full_matrices)
    k = s.shape[-1]
    return _joined(_signless_cols(u[..., :, :k]), s, _signless_rows(vh[..., :k, :]))


def _svd_ref(a, full_matrices=False):
    u, s, vh = np.linalg.svd(a, full_matrices=full_matrices)
    k = s.shape[-1]
    return _joined(_signless_cols(u[..., :, :k]), s, _signless_rows(vh[..., :k, :]))


def _eigh_fn(a, UPLO="L"):  # noqa: N803
    w, v = ferro.linalg.eigh(_sym(a), UPLO)
    return _joined(w, _signless_cols(v))


def _eigh_ref(a, UPLO="L"):  # noqa: N803
    w, v = np.linalg.eigh(_sym(a), UPLO)
    return _joined(w, _signless_cols(v))


def _solve_samples(rng):
    return [
        Sample((_well_conditioned(rng, (3, 3)), rng.normal(size=(3, 2))), label="matrix B"),
        Sample((_well_conditioned(rng, (3, 3)), rng.normal(size=(3,))), label="vector B"),
        Sample(
            (_well_conditioned(rng, (2, 3, 3)), rng.normal(size=(3, 1))), label="broadcast batch"
        ),
        Sample((_well_conditioned(rng, (2, 2)), rng.normal(size=(2, 2))), noncontig=True),
    ]


def _batched_solve_ref(a, b):
    vector = b.ndim == 1 or b.shape == a.shape[:-1]
    x = np.linalg.solve(a, b[..., None] if vector else b)
    return x[..., 0] if vector else x


ENTRIES = [
    OpInfo(
        "inv",
        _shifted(ferro.linalg.inv),
        _shifted(np.linalg.inv),
        _square_samples,
        func="inverse",
        fwd_rtol32=1e-4,
    ),
    OpInfo("det", _shifted(ferro.det), _shifted(np.linalg.det), _square_samples, fwd_rtol32=1e-4),
    OpInfo(
        "slogdet",
        _shifted(lambda a: _joined(*ferro.slogdet(a))),
        _shifted(lambda a: _joined(*np.linalg.slogdet(a))),
        _square_samples,
        fwd_rtol32=1e-4,
    ),
    OpInfo(
        "solve",
        _shifted(ferro.linalg.solve),
        _shifted(_batched_solve_ref),
        _solve_samples,
        fwd_rtol32=1e-4,
    ),
    OpInfo(
        "cholesky",
        lambda a: ferro.linalg.cholesky(_spd(a)),
        lambda a: np.linalg.cholesky(_spd(a)),
        _square_samples,
        fwd_rtol32=1e-4,
    ),
    OpInfo(
        "qr",
        lambda a: _joined(*ferro.linalg.qr(a)),
        lambda a: _joined(*np.linalg.qr(a)),
        _rect_samples,
        fwd_rtol32=1e-4,
    ),
    OpInfo("eigh", _eigh_fn, _eigh_ref, _square_samples, func="eigh", fwd_rtol32=1e-3),
    OpInfo("svd", _svd_fn, _svd_ref, _rect_samples, func="linalg_svd", fwd_rtol32=1e-3),
]
