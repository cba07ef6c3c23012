"""``gradcheck``: compare autograd's gradients with central differences in float64.

For a function ``fn(*inputs) -> Tensor | tuple[Tensor, ...]`` it builds the full Jacobian twice:
analytically (one ``autograd.grad`` per output element, on one retained graph, done twice to
catch backwards that are not re-entrant) and numerically (central differences on copies of the
inputs, so the caller's tensors are never touched). Every analytical gradient must also have its
input's shape and dtype.
"""

from __future__ import annotations

import numpy as np

from ferro._C.tensor import TensorBase, wrap
from ferro.errors import ArgumentError, ArgumentTypeError, DtypeError, GradcheckError

# Per-dtype default tolerances for comparing results of the same math.
_TOLERANCES = {
    np.dtype(np.float64): {"rtol": 1e-7, "atol": 1e-10},
    np.dtype(np.float32): {"rtol": 1e-4, "atol": 1e-5},
}


def tolerances(dtype) -> dict:
    """``{"rtol": ..., "atol": ...}`` suited to comparing results computed in ``dtype``."""
    return dict(_TOLERANCES[np.dtype(dtype)])


def _outputs(res) -> tuple:
    if isinstance(res, TensorBase):
        return (res,)
    if isinstance(res, (tuple, list)) and all(isinstance(r, TensorBase) for r in res):
        return tuple(res)
    raise ArgumentTypeError(
        f"gradcheck: fn must return a Tensor or a tuple of Tensors, got {type(res)}"
    )


def _float_outputs(outs) -> list:
    return [o for o in outs if o.requires_grad and o.dtype.kind == "f"]


def _copy_inputs(inputs) -> list:
    copies = []
    for x in inputs:
        if isinstance(x, TensorBase):
            c = wrap(np.array(x._data, copy=True, order="C"))
            if x.requires_grad:
                c.requires_grad_(True)
            copies.append(c)
        else:
            copies.append(x)
    return copies


def numerical_jacobian(fn, inputs, eps: float = 1e-6) -> list:
    """Central-difference Jacobians ``d out_k / d inputs[i]`` for inputs that require grad.

    Returns, per differentiable input, an array of shape ``(sum of output sizes, input size)``.
    The inputs are copied first; the caller's arrays are never modified.
    """
    xs = _copy_inputs(inputs)
    from ferro.autograd.grad_mode import no_grad

    def flat_out():
        with no_grad():
            outs = _outputs(fn(*xs))
        return np.concatenate([np.asarray(o._data, dtype=np.float64).ravel() for o in outs])

    jacs = []
    for x in xs:
        if not (isinstance(x, TensorBase) and x.requires_grad):
            continue
        data = x._data
        flat = data.reshape(-1)
        n_out = flat_out().size
        jac = np.zeros((n_out, flat.size))
        for j in range(flat.size):
            orig = flat[j]
            flat[j] = orig + eps
            plus = flat_out()
            flat[j] = orig - eps
            minus = flat_out()
            flat[j] = orig
            jac[:, j] = (plus - minus) / (2 * eps)
        jacs.append(jac)
    return jacs


def _analytical_jacobian(fn, inputs) -> list:
    from ferro.autograd import grad

    diff_inputs = [x for x in inputs if isinstance(x, TensorBase) and x.requires_grad]
    outs = _float_outputs(_outputs(fn(*inputs)))
    sizes = [o.numel() for o in outs]
    total = sum(sizes)
    jacs = [np.zeros((total, x.numel())) for x in diff_inputs]
    row = 0
    for k in range(len(outs)):
        for j in range(sizes[k]):
            seeds = []
            for m, other in enumerate(outs):
                s = np.zeros(other.shape, dtype=other.dtype)
                if m == k:
                    s.reshape(-1)[j] = 1
                seeds.append(wrap(s))
            gs = grad(outs, diff_inputs, seeds, retain_graph=True, allow_unused=True)
            for i, (g, x) in enumerate(zip(gs, diff_inputs, strict=True)):
                if g is None:
                    continue
                if g.shape != x.shape:
                    raise GradcheckError(
                        f"gradcheck: gradient for input {i} has shape {g.shape}, expected {x.shape}"
                    )
                if g.dtype != x.dtype:
                    raise GradcheckError(
                        f"gradcheck: gradient for input {i} has dtype {g.dtype}, expected {x.dtype}"
                    )
                jacs[i][row] = np.asarray(g._data, dtype=np.float64).ravel()
            row += 1
    return jacs


def gradcheck(
    fn,
    inputs,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
) -> bool:
    """Check ``fn``'s gradients against central differences.

    Args:
        fn: a function of ``inputs`` returning a Tensor or a tuple of Tensors.
        inputs: a tuple of arguments; the Tensors that require grad must be float64.
        eps: the finite-difference step.
        atol, rtol: the tolerance of ``|analytical - numerical| <= atol + rtol * |numerical|``.
        raise_exception: raise :class:`~ferro.errors.GradcheckError` on failure, else return False.

    Returns:
        True when every gradient matches.

    Example:
        >>> x = ferro.randn(3, dtype=ferro.float64, requires_grad=True)
        >>> ferro.testing.gradcheck(lambda t: (t * t).sum(), (x,))
        True
    """
    if isinstance(inputs, TensorBase):
        inputs = (inputs,)
    inputs = tuple(inputs)
    diff = [x for x in inputs if isinstance(x, TensorBase) and x.requires_grad]
    if not diff:
        raise ArgumentError("gradcheck: no input requires grad")
    for i, x in enumerate(diff):
        if x.dtype != np.float64:
            raise DtypeError(
                f"gradcheck: input {i} is {x.dtype}; central differences need float64 inputs"
            )
    try:
        analytical = _analytical_jacobian(fn, inputs)
        again = _analytical_jacobian(fn, inputs)
        for i, (a, b) in enumerate(zip(analytical, again, strict=True)):
            if not np.allclose(a, b, rtol=1e-12, atol=1e-12, equal_nan=True):
                raise GradcheckError(
                    f"gradcheck: backward is not re-entrant: two backward passes gave different "
                    f"gradients for input {i} (max difference {np.nanmax(np.abs(a - b)):.3g})"
                )
        numerical = numerical_jacobian(fn, inputs, eps)
        for i, (a, n) in enumerate(zip(analytical, numerical, strict=True)):
            bad = ~np.isclose(a, n, rtol=rtol, atol=atol, equal_nan=True)
            if bad.any():
                r, c = np.argwhere(bad)[0]
                raise GradcheckError(
                    f"gradcheck: Jacobian mismatch for input {i} (shape {diff[i].shape}): at "
                    f"output element {r}, input element {c}: analytical {a[r, c]:.8g}, "
                    f"numerical {n[r, c]:.8g}; {int(bad.sum())} of {bad.size} entries differ "
                    f"(max abs difference {np.nanmax(np.abs(a - n)):.3g})"
                )
    except GradcheckError:
        if raise_exception:
            raise
        return False
    return True


def gradgradcheck(
    fn,
    inputs,
    grad_outputs=None,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
    seed: int = 0,
) -> bool:
    """Check ``fn``'s second derivatives: :func:`gradcheck` of its backward.

    The backward, ``(inputs, grad_outputs) -> autograd.grad(fn(inputs), inputs, grad_outputs,
    create_graph=True)``, is itself checked against central differences, with respect to the
    inputs and to the output gradients (PyTorch's ``gradgradcheck``).

    Args:
        fn: a function of ``inputs`` returning a Tensor or a tuple of Tensors.
        inputs: a tuple of arguments; the Tensors that require grad must be float64.
        grad_outputs: gradients of ``fn``'s floating outputs that require grad (Tensors); None
            draws them from a normal distribution (``seed``). They require grad here.
        eps, atol, rtol, raise_exception: as for :func:`gradcheck`.
        seed: the seed of the drawn ``grad_outputs``.

    Returns:
        True when every second derivative matches.

    Example:
        >>> x = ferro.randn(3, dtype=ferro.float64, requires_grad=True)
        >>> ferro.testing.gradgradcheck(lambda t: (t * t * t).sum(), (x,))
        True
    """
    from ferro.autograd import grad
    from ferro.autograd.grad_mode import enable_grad

    if isinstance(inputs, TensorBase):
        inputs = (inputs,)
    inputs = tuple(inputs)
    n = len(inputs)
    outs = _float_outputs(_outputs(fn(*inputs)))
    if grad_outputs is None:
        rng = np.random.default_rng(seed)
        grad_outputs = tuple(
            wrap(rng.standard_normal(o.shape).astype(o.dtype)).requires_grad_(True) for o in outs
        )
    else:
        grad_outputs = (
            (grad_outputs,) if isinstance(grad_outputs, TensorBase) else tuple(grad_outputs)
        )
        if len(grad_outputs) != len(outs):
            raise ArgumentError(
                f"gradgradcheck: got {len(grad_outputs)} grad_outputs for {len(outs)} outputs "
                "that require grad"
            )

    def first_derivative(*args):
        ins, gos = args[:n], args[n:]
        with enable_grad():
            outs = _float_outputs(_outputs(fn(*ins)))
            diff = [x for x in ins if isinstance(x, TensorBase) and x.requires_grad]
            gs = grad(outs, diff, list(gos), create_graph=True, allow_unused=True)
            # A gradient that depends on nothing differentiable (a constant, or None for an
            # unused input) still has a numerical derivative to compare with zero: anchor it.
            anchor = None
            for v in list(diff) + list(gos):
                if isinstance(v, TensorBase) and v.requires_grad:
                    term = (v * 0).sum()
                    anchor = term if anchor is None else anchor + term
            res = []
            for g, x in zip(gs, diff, strict=True):
                if g is None:
                    g = wrap(np.zeros(x.shape, dtype=x.dtype))
                if not g.requires_grad:
                    g = g + anchor
                res.append(g)
        return tuple(res)

    return gradcheck(
        first_derivative,
        inputs + tuple(grad_outputs),
        eps=eps,
        atol=atol,
        rtol=rtol,
        raise_exception=raise_exception,
    )


__all__ = [
    "gradgradcheck",
    "gradcheck",
    "numerical_jacobian",
    "tolerances",
]
