"""The autograd API over the compiled engine: ``backward``, ``grad`` and grad mode."""

from __future__ import annotations

from collections.abc import Sequence

from ferro._C import engine as _engine
from ferro._C.tensor import TensorBase, wrap
from ferro.autograd import functional, graph  # noqa: F401  (ferro.autograd.functional, .graph)
from ferro.autograd._higher import run_backward_graph
from ferro.autograd.anomaly_mode import detect_anomaly, is_anomaly_enabled, set_detect_anomaly
from ferro.autograd.function import Function
from ferro.autograd.grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)
from ferro.autograd.parallel import get_num_threads, parallel, set_num_threads
from ferro.autograd.variable import Variable
from ferro.errors import ArgumentError, ArgumentTypeError


def _as_tuple(x, what: str) -> tuple:
    if x is None:
        return ()
    if isinstance(x, TensorBase):
        return (x,)
    if isinstance(x, Sequence):
        return tuple(x)
    raise ArgumentTypeError(
        f"{what}: expected a Tensor or a sequence of Tensors, got {type(x).__name__}"
    )


def _grad_arrays(grads, n: int, what: str) -> tuple:
    if grads is None:
        return (None,) * n
    grads = _as_tuple(grads, what) if not isinstance(grads, TensorBase) else (grads,)
    if len(grads) != n:
        raise ArgumentError(f"{what}: got {len(grads)} gradients for {n} tensors")
    return tuple(
        None if g is None else (g._data if isinstance(g, TensorBase) else g) for g in grads
    )


def _grad_tensors(grads, n: int, what: str) -> tuple:
    # create_graph: gradients stay Tensors (one that requires grad joins the recorded graph).
    if grads is None:
        return (None,) * n
    grads = _as_tuple(grads, what) if not isinstance(grads, TensorBase) else (grads,)
    if len(grads) != n:
        raise ArgumentError(f"{what}: got {len(grads)} gradients for {n} tensors")
    return tuple(g if g is None or isinstance(g, TensorBase) else wrap(g) for g in grads)


def backward(
    tensors,
    grad_tensors=None,
    retain_graph=None,
    create_graph: bool = False,
    inputs=None,
    num_threads=None,
) -> None:
    """Accumulate the gradients of ``tensors`` into the ``.grad`` of the leaves (or ``inputs``).

    Args:
        tensors: a Tensor or a sequence of Tensors to differentiate.
        grad_tensors: their gradients (None for an implicit 1 on a 1-element tensor).
        retain_graph: keep the saved arrays so the graph can be walked again (default:
            ``create_graph``).
        create_graph: record the backward itself, so the gradients written to ``.grad`` have
            history and can be differentiated again (Note [Double backward]).
        inputs: accumulate only into these tensors (leaves or not).
        num_threads: threads for this backward (None: ``parallel``/``set_num_threads``).

    Example:
        >>> x = ferro.tensor([1.0, 2.0], requires_grad=True)
        >>> ferro.autograd.backward([(x * x).sum()])
        >>> x.grad
        tensor([2., 4.])
    """
    roots = _as_tuple(tensors, "backward")
    ins = None if inputs is None else _as_tuple(inputs, "backward inputs")
    if ins is not None and not ins:
        raise ArgumentError("backward: inputs= must not be empty")
    retain = create_graph if retain_graph is None else retain_graph
    threads = _threads(num_threads)
    if create_graph:
        grads = _grad_tensors(grad_tensors, len(roots), "backward")
        run_backward_graph(roots, grads, bool(retain), ins, True, False)
        return
    grads = _grad_arrays(grad_tensors, len(roots), "backward")
    _engine.run_backward(roots, grads, bool(retain), ins, True, False, threads)


def grad(
    outputs,
    inputs,
    grad_outputs=None,
    retain_graph=None,
    create_graph: bool = False,
    allow_unused: bool = False,
    num_threads=None,
):
    """Return the gradients of ``outputs`` with respect to ``inputs``; ``.grad`` is left alone.

    Only the nodes that lead to ``inputs`` run.

    Args:
        outputs: a Tensor or a sequence of Tensors.
        inputs: the Tensors to differentiate with respect to.
        grad_outputs: gradients of ``outputs`` (None for an implicit 1 on 1-element outputs).
        retain_graph: keep the graph for another walk (default: ``create_graph``).
        create_graph: record the backward itself: the returned gradients have history and can
            be differentiated again, to any order (Note [Double backward]).
        allow_unused: return None for an input the outputs do not depend on, instead of raising.
        num_threads: threads for this walk (None: ``parallel``/``set_num_threads``).

    Returns:
        A tuple of Tensors (or None), one per input.

    Example:
        >>> x = ferro.tensor(3.0, requires_grad=True)
        >>> ferro.autograd.grad(x * x, x)
        (tensor(6.),)
    """
    outs = _as_tuple(outputs, "grad outputs")
    ins = _as_tuple(inputs, "grad inputs")
    if not ins:
        raise ArgumentError("grad: inputs must not be empty")
    retain = create_graph if retain_graph is None else retain_graph
    threads = _threads(num_threads)
    if create_graph:
        grads = _grad_tensors(grad_outputs, len(outs), "grad")
        return run_backward_graph(outs, grads, bool(retain), ins, False, bool(allow_unused))
    grads = _grad_arrays(grad_outputs, len(outs), "grad")
    res = _engine.run_backward(outs, grads, bool(retain), ins, False, bool(allow_unused), threads)
    return tuple(None if g is None else wrap(g) for g in res)


def gradcheck(
    func, inputs, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True, fast_mode=False
) -> bool:
    """PyTorch's ``torch.autograd.gradcheck``: :func:`ferro.testing.gradcheck` under its names.

    ``inputs`` is a Tensor or a tuple; the ones that require grad must be float64 (PyTorch only
    warns). ``fast_mode`` is accepted and changes nothing: ferro always compares the full
    Jacobians (PyTorch's slow mode), a check that implies the fast mode's projection of them.
    A mismatch raises :class:`~ferro.errors.GradcheckError` (a RuntimeError, as PyTorch's, and an
    AssertionError), or returns False when ``raise_exception`` is False.

    Example:
        >>> x = ferro.randn(3, dtype=ferro.float64, requires_grad=True)
        >>> ferro.autograd.gradcheck(lambda t: t.exp(), x)
        True
    """
    from ferro.testing.gradcheck import gradcheck as check

    return check(func, inputs, eps=eps, atol=atol, rtol=rtol, raise_exception=raise_exception)


def gradgradcheck(
    func,
    inputs,
    grad_outputs=None,
    *,
    eps=1e-6,
    atol=1e-5,
    rtol=1e-3,
    raise_exception=True,
    fast_mode=False,
) -> bool:
    """PyTorch's ``torch.autograd.gradgradcheck``: :func:`ferro.testing.gradgradcheck`.

    The second derivatives of ``func`` (its ``create_graph`` backward checked against central
    differences, with respect to the inputs and to ``grad_outputs``, drawn when None), with
    :func:`gradcheck`'s arguments and errors.

    Example:
        >>> x = ferro.randn(3, dtype=ferro.float64, requires_grad=True)
        >>> ferro.autograd.gradgradcheck(lambda t: t * t * t, x)
        True
    """
    from ferro.testing.gradcheck import gradgradcheck as check

    return check(
        func, inputs, grad_outputs, eps=eps, atol=atol, rtol=rtol, raise_exception=raise_exception
    )


def _threads(num_threads) -> int:
    if num_threads is None:
        return 0
    if int(num_threads) < 1:
        raise ArgumentError(f"backward: num_threads must be >= 1, got {num_threads}")
    return int(num_threads)


__all__ = [
    "backward",
    "parallel",
    "set_num_threads",
    "get_num_threads",
    "grad",
    "Function",
    "functional",
    "gradcheck",
    "gradgradcheck",
    "graph",
    "detect_anomaly",
    "set_detect_anomaly",
    "is_anomaly_enabled",
    "no_grad",
    "enable_grad",
    "set_grad_enabled",
    "inference_mode",
    "is_grad_enabled",
    "is_inference_mode_enabled",
    "Variable",
]
