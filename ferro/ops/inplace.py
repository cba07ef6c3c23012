"""In-place ops: ``add_``, ``sub_``, ``mul_``, ``div_``, ``clamp_``, ``fill_``, ``zero_``, the
indexed writes (``x[idx] = v``, ``index_put_``, ``index_add_``, ``masked_fill_``, ``scatter_``,
``copy_``, ...), the random fills (``uniform_``, ``normal_``) and the augmented operators
(``+=`` ...).

Note [In-place ops]. With nothing to record (grad mode off, or neither the tensor nor the
value requires grad), ``add_``, ``sub_``, ``mul_``, ``div_``, ``clamp_`` and ``fill_`` run
the ufunc straight into the tensor's memory (``np.subtract(t, g, out=t)``) and bump the version
counter: no temporary, no copy, no node. For the four arithmetic ones the checks and the call are
compiled (:func:`ferro._C.graph.inplace_direct`): at 1K elements Python-level checks cost more
than the ufunc itself. Otherwise each computes the out-of-place result with
the differentiable op, then :func:`ferro._C.engine.commit_inplace` writes it into the tensor's
memory, bumps the version
counter shared with its views, and moves the tensor's history to the new node. Backward then
refuses any node that saved the old contents (the versions differ) instead of computing a wrong
gradient. A leaf that requires grad, or a view of one, cannot be modified in place while grad
mode is on. The result is converted to the tensor's dtype by PyTorch's rule (``_commit``: a float
result never goes into an integer tensor). With nothing to record (grad mode off, or neither the
tensor nor the value requires grad), ``x[idx] = v`` and ``copy_`` write straight into memory and
bump the version.
"""

from __future__ import annotations

import numpy as np

from ferro._C.engine import bump_version, inplace_direct, is_grad_enabled
from ferro._C.engine import commit_inplace as _commit_inplace
from ferro._C.tensor import TensorBase, wrap
from ferro.backend import move, xp_of
from ferro.dtypes import fill_value
from ferro.errors import ArgumentError, DtypeError, GraphError, ReadOnlyError
from ferro.ops import elementwise as ew
from ferro.ops import shape as sh
from ferro.random import numpy_generator


def commit_inplace(t, out, op):
    """:func:`ferro._C.engine.commit_inplace`, refusing first (as PyTorch does) a view of a leaf
    that requires grad: writing through it would change the leaf behind autograd's back."""
    fn = t.grad_fn
    if fn is not None and fn.op.view and is_grad_enabled():
        while fn is not None and not isinstance(fn, TensorBase) and fn.op.view:
            fn = fn.next_functions[0][0]
        if isinstance(fn, TensorBase) and fn.requires_grad:
            raise GraphError(
                f"{op}: a view of a leaf tensor that requires grad cannot be modified in place "
                "(it would change the leaf); wrap the update in ferro.no_grad() or work on a clone"
            )
    return _commit_inplace(t, out, op)


def _alpha(other, alpha):
    return other if alpha == 1 else ew.mul(other, alpha)


def add_(t, other, *, alpha=1):
    """``t += alpha * other`` in place; returns ``t``."""
    done = inplace_direct(t, other, 0, alpha)
    return done if done is not None else _commit(t, ew.add(t, _alpha(other, alpha)), "add_")


def sub_(t, other, *, alpha=1):
    """``t -= alpha * other`` in place; returns ``t``."""
    done = inplace_direct(t, other, 1, alpha)
    return done if done is not None else _commit(t, ew.sub(t, _alpha(other, alpha)), "sub_")


def mul_(t, other):
    """``t *= other`` in place; returns ``t``."""
    done = inplace_direct(t, other, 2)
    return done if done is not None else _commit(t, ew.mul(t, other), "mul_")


def div_(t, other):
    """``t /= other`` in place; returns ``t``."""
    if t._data.dtype.kind == "f":
        done = inplace_direct(t, other, 3)
        if done is not None:
            return done
    return _commit(t, ew.div(t, other), "div_")


def clamp_(t, min=None, max=None):  # noqa: A002 - PyTorch's argument names
    """Clamp ``t`` to ``[min, max]`` in place; returns ``t``."""
    data = t._data
    if (
        not (t.requires_grad and is_grad_enabled())
        and (type(data) is not np.ndarray or data.flags.writeable)
        and data.dtype.kind == "f"
        and all(v is None or type(v) in (int, float) for v in (min, max))
        and (min is not None or max is not None)
        and not (min is not None and max is not None and min > max)
    ):
        xp = xp_of(data)
        if min is not None:
            xp.maximum(data, min, out=data)
        if max is not None:
            xp.minimum(data, max, out=data)
        bump_version(t)
        return t
    return _commit(t, ew.clamp(t, min, max), "clamp_")


def fill_(t, value):
    """Set every element of ``t`` to ``value`` (cast to ``t``'s dtype); returns ``t``.

    The values are made directly, not as ``t * 0 + value``: that gives NaN where ``t`` holds
    Inf or NaN.
    """
    data = t._data
    value, dt = fill_value(value, data.dtype, "fill_")
    if (
        not (t.requires_grad and is_grad_enabled())
        and (type(data) is not np.ndarray or data.flags.writeable)
        and dt == data.dtype
    ):
        data.fill(value)  # nothing to record: straight into memory
        bump_version(t)
        return t
    filled = wrap(xp_of(data).full(data.shape, value, dtype=dt))
    if t.grad_fn is not None and is_grad_enabled():
        # A non-leaf keeps a history: the new values depend on nothing, so the gradient that
        # flows back through t is zero (PyTorch's FillBackward). where(False, t, filled) records
        # exactly that without computing t * 0 (NaN where t is Inf).
        filled = ew.where(wrap(xp_of(data).zeros(data.shape, dtype=bool)), t, filled)
    return commit_inplace(t, filled, "fill_")


def zero_(t):
    """Set every element of ``t`` to zero; returns ``t``."""
    return fill_(t, 0)


_KIND_ORDER = "biuf"


def _commit(t, out, op):
    """Commit ``out`` into ``t`` (see the module docstring), converting it to ``t``'s dtype by
    PyTorch's rule for in-place ops: the result's dtype must be castable to ``t``'s (a float
    result cannot go into an integer tensor, nor a number into a bool one); float64 into
    float32 (the same kind) is converted."""
    have, want = out._data.dtype, t._data.dtype
    if have != want:
        rank = _KIND_ORDER.index
        if (
            have.kind in _KIND_ORDER
            and want.kind in _KIND_ORDER
            and rank(have.kind) > rank(want.kind)
        ):
            raise DtypeError(
                f"{op}: the result type {have} cannot be cast to the dtype {want} of the tensor "
                "modified in place (PyTorch's rule); convert the tensor first "
                "(t = t.to(...)) or use the out-of-place op"
            )
        out = ew.cast(out, want)
    return commit_inplace(t, out, op)


def _scalar_as(t, value, op):
    """A number converted to ``t``'s dtype (as PyTorch casts a fill value); anything else as is."""
    if isinstance(value, (int, float)):
        return fill_value(value, t._data.dtype, op)[0]
    return value


def _recording(t, value=None) -> bool:
    """Whether an indexed write into ``t`` must be recorded (else it writes in place at once)."""
    if not is_grad_enabled():
        return False
    return t.requires_grad or (isinstance(value, TensorBase) and value.requires_grad)


def _write(t, index, value, op):
    """``t[index] = value`` straight into memory (nothing to record): bump the version."""
    data = t._data
    if isinstance(value, TensorBase):
        value = value._data
    if type(data) is np.ndarray and not data.flags.writeable:
        raise ReadOnlyError(
            f"{op}: the tensor modified in place (shape {tuple(data.shape)}, dtype {data.dtype}) "
            "wraps read-only memory; copy it first (t.clone()) or make the array writeable"
        )
    if hasattr(value, "shape") and type(value) is not type(data):
        value = move(value, t.device)
    data[index] = value
    bump_version(t)
    return t


def setitem(t, index, value):
    """``t[index] = value``: write ``value`` (broadcast) at ``index`` in place, for every index
    kind ``t[...]`` takes. Differentiable through ``value`` and through ``t`` (the overwritten
    part gets zero gradient); a leaf that requires grad refuses it in grad mode.

    Gradient: gt = gy with the written positions zeroed; gvalue = gy at ``index``.
    """
    if not _recording(t, value):
        items, _ = sh._index_items(index, t, "setitem")
        if isinstance(value, TensorBase) and value._data.dtype != t._data.dtype:
            value = value._data.astype(t._data.dtype)
        try:
            return _write(t, items, value, "setitem")
        except IndexError as exc:
            raise sh.IndexOutOfRangeError(
                f"setitem: the index is invalid for a tensor of shape {tuple(t.shape)}: {exc}"
            ) from None
    if isinstance(value, TensorBase) and _is_view_at(value._data, t._data, index):
        # t[index] op= v: the view's in-place op already wrote these elements (see
        # TensorBase._accept_view_write); the write recorded below replaces exactly them.
        t._accept_view_write()
    commit_inplace(t, sh.index_put(t, index, value), "setitem")


def _address(arr):
    iface = getattr(arr, "__array_interface__", None) or arr.__cuda_array_interface__
    return iface["data"][0], tuple(arr.shape), tuple(arr.strides)


def _is_view_at(value, data, index) -> bool:
    """Whether the array ``value`` is the basic-index view ``data[index]`` (same memory)."""
    if type(value) is not type(data) or value.base is None:
        return False
    items = index if isinstance(index, tuple) else (index,)
    if not all(i is None or i is Ellipsis or type(i) in (int, slice) for i in items):
        return False
    try:
        return _address(value) == _address(data[index])
    except (IndexError, TypeError):
        return False


def index_put_(t, indices, values, accumulate: bool = False):
    """In-place :func:`ferro.index_put`; returns ``t``."""
    return commit_inplace(t, sh.index_put(t, indices, values, accumulate), "index_put_")


def index_add_(t, dim: int, index, source, *, alpha=1):
    """In-place :func:`ferro.index_add`; returns ``t``."""
    return _commit(t, sh.index_add(t, dim, index, source, alpha=alpha), "index_add_")


def index_copy_(t, dim: int, index, source):
    """In-place :func:`ferro.index_copy`; returns ``t``."""
    return commit_inplace(t, sh.index_copy(t, dim, index, source), "index_copy_")


def index_fill_(t, dim: int, index, value):
    """In-place :func:`ferro.index_fill`; returns ``t``."""
    value = _scalar_as(t, value, "index_fill_")
    return commit_inplace(t, sh.index_fill(t, dim, index, value), "index_fill_")


def masked_fill_(t, mask, value):
    """In-place :func:`ferro.masked_fill`; returns ``t``."""
    value = _scalar_as(t, value, "masked_fill_")
    return _commit(t, sh.masked_fill(t, mask, value), "masked_fill_")


def masked_scatter_(t, mask, source):
    """In-place :func:`ferro.masked_scatter`; returns ``t``."""
    return commit_inplace(t, sh.masked_scatter(t, mask, source), "masked_scatter_")


def scatter_(t, dim: int, index, src):
    """In-place :func:`ferro.scatter`; returns ``t``."""
    return commit_inplace(t, sh.scatter(t, dim, index, src), "scatter_")


def scatter_add_(t, dim: int, index, src):
    """In-place :func:`ferro.scatter_add`; returns ``t``."""
    return _commit(t, sh.scatter_add(t, dim, index, src), "scatter_add_")


def copy_(t, src, non_blocking: bool = False):
    """Copy ``src`` (broadcast, converted to ``t``'s dtype and device) into ``t``; returns ``t``.
    ``non_blocking`` is accepted and ignored (copies are synchronous).

    Gradient: gt = 0; gsrc = gy summed over the broadcast dims.
    """
    if not isinstance(src, TensorBase):
        src = wrap(move(np.asarray(src, dtype=t._data.dtype), t.device))
    elif src.device != t.device:
        src = src.to(t.device)
    if not _recording(t, src):
        return _write(t, Ellipsis, src._data.astype(t._data.dtype, copy=False), "copy_")
    return commit_inplace(t, sh.index_put(t, Ellipsis, src), "copy_")


def apply_inplace(t, fn, name, *args, **kwargs):
    """``t = fn(t, *args, **kwargs)`` in place (``F.relu(x, inplace=True)``); returns ``t``."""
    # The op may save its input for backward; recorded, it must not be t's memory, which
    # the commit overwrites (backward would then refuse the stale saved value).
    x = ew.clone(t) if _recording(t) else t
    return _commit(t, fn(x, *args, **kwargs), name)


def _unary_(fn, name):
    def op_(t, *args, **kwargs):
        return apply_inplace(t, fn, name, *args, **kwargs)

    op_.__name__ = op_.__qualname__ = name
    op_.__doc__ = f"In-place :func:`ferro.{name[:-1]}`; returns ``t``."
    return op_


abs_ = _unary_(ew.abs, "abs_")
ceil_ = _unary_(ew.ceil, "ceil_")
clamp_max_ = _unary_(ew.clamp_max, "clamp_max_")
clamp_min_ = _unary_(ew.clamp_min, "clamp_min_")
cos_ = _unary_(ew.cos, "cos_")
exp_ = _unary_(ew.exp, "exp_")
floor_ = _unary_(ew.floor, "floor_")
log_ = _unary_(ew.log, "log_")
neg_ = _unary_(ew.neg, "neg_")
pow_ = _unary_(ew.pow, "pow_")
reciprocal_ = _unary_(ew.reciprocal, "reciprocal_")
round_ = _unary_(ew.round, "round_")
sigmoid_ = _unary_(ew.sigmoid, "sigmoid_")
sign_ = _unary_(ew.sign, "sign_")
sin_ = _unary_(ew.sin, "sin_")
sqrt_ = _unary_(ew.sqrt, "sqrt_")
square_ = _unary_(ew.square, "square_")
tanh_ = _unary_(ew.tanh, "tanh_")
trunc_ = _unary_(ew.trunc, "trunc_")


def relu_(t):
    """In-place :func:`ferro.relu`; returns ``t``."""
    from ferro.ops.activation import relu

    return apply_inplace(t, relu, "relu_")


def bernoulli_(t, p=0.5, *, generator=None):
    """Fill ``t`` with 0s and 1s, 1 with probability ``p`` (a number, or a tensor that
    broadcasts to ``t``); returns ``t``."""
    if isinstance(p, TensorBase):
        probs = np.broadcast_to(move(p._data, "cpu"), tuple(t.shape))
    else:
        probs = float(ew.real_arg(p, "p", "bernoulli_"))
    if not (np.all(probs >= 0) and np.all(probs <= 1)):
        raise ArgumentError("bernoulli_: probabilities must be in [0, 1]")
    draws = numpy_generator(generator, "bernoulli_").random(tuple(t.shape)) < probs
    return _random_fill(t, draws, "bernoulli_")


def _random_fill(t, values, op):
    data = t._data
    if data.dtype.kind != "f":
        raise DtypeError(f"{op}: expects a floating point tensor, got dtype {data.dtype}")
    values = wrap(move(values.astype(data.dtype, copy=False), t.device))
    if t.grad_fn is not None and is_grad_enabled():
        values = ew.where(wrap(xp_of(data).zeros(data.shape, dtype=bool)), t, values)
    return commit_inplace(t, values, op)


def uniform_(t, from_: float = 0.0, to: float = 1.0, *, generator=None):
    """Fill ``t`` with values drawn from U(from_, to) (``generator``: ferro's by default)."""
    draw = numpy_generator(generator, "uniform_").uniform(from_, to, tuple(t.shape))
    return _random_fill(t, np.asarray(draw), "uniform_")


def normal_(t, mean: float = 0.0, std: float = 1.0, *, generator=None):
    """Fill ``t`` with values drawn from N(mean, std**2) (``generator``: ferro's by default)."""
    draw = numpy_generator(generator, "normal_").normal(mean, std, tuple(t.shape))
    return _random_fill(t, np.asarray(draw), "normal_")


# The family's public functions (ferro.ops exports their union): a new op's name goes here.
# setitem, copy_, uniform_ and normal_ are Tensor methods only, as in PyTorch.
__all__ = [
    "abs_",
    "add_",
    "ceil_",
    "clamp_max_",
    "clamp_min_",
    "cos_",
    "exp_",
    "floor_",
    "log_",
    "neg_",
    "pow_",
    "reciprocal_",
    "relu_",
    "round_",
    "sigmoid_",
    "sign_",
    "sin_",
    "sqrt_",
    "square_",
    "tanh_",
    "trunc_",
    "clamp_",
    "div_",
    "fill_",
    "index_add_",
    "index_copy_",
    "index_fill_",
    "index_put_",
    "masked_fill_",
    "masked_scatter_",
    "mul_",
    "scatter_",
    "scatter_add_",
    "sub_",
    "zero_",
]
