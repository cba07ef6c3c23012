"""The differentiable array namespace that op backwards run on under ``create_graph``.

Note [Double backward] (docs/design.md). An op's ``backward(ctx, *grads)`` is written once
against ``ctx.xp`` (NumPy or CuPy). Under ``create_graph=True`` the engine runs that same source
with ``ctx.xp`` bound to :func:`namespace` of the backend, and with the gradients and the saved
arrays as :class:`DArray`: a NumPy-flavoured array (NumPy's operators, methods and function
names, ``axis=``/``keepdims=``) over a ferro Tensor, whose every operation is a recorded ferro
op. So the backward records a graph, which is differentiable again, to any order.

* Operations that only read values (comparisons, ``isfinite``, ``argsort``, ...) return plain
  backend arrays: they carry no gradient, as in PyTorch.
* In-place writes are rebound, not written: ``g[idx] = v``, ``g *= y``, ``xp.add.at(g, idx, v)``,
  ``xp.put_along_axis`` and ``out=`` replace the DArray's tensor with a recorded op's output
  (:data:`INDEX_PUT`, :data:`SCATTER_ADD`), so the usual NumPy idioms of a backward need no change.
  A view written through does not write its base (no op here relies on that).
* A NumPy function this namespace does not know runs on the plain arrays when no argument needs
  a gradient; otherwise it raises :class:`NotTwiceDifferentiable` naming the function, which the
  engine re-raises naming the op.
"""

from __future__ import annotations

import math

import numpy as _np

from ferro._C.engine import apply
from ferro._C.graph import OpDef
from ferro._C.tensor import TensorBase, wrap
from ferro.errors import NotSupportedError


class NotTwiceDifferentiable(NotSupportedError):
    """A backward used an array function with no differentiable version under create_graph."""


def _ops():
    # Imported late: ferro.ops imports ferro.autograd (through ferro._tensor).
    from ferro.ops import elementwise, linalg, reduction, shape

    return elementwise, linalg, reduction, shape


def _op_fn(op):
    """The ferro function of a unary or binary op of :data:`_UNARY`/:data:`_BINARY`."""
    from ferro.ops import elementwise, special

    return getattr(elementwise, op, None) or getattr(special, op)


class DArray:
    """A NumPy-like array over a ferro Tensor; every operation on it is recorded.

    ``.tensor`` is the Tensor. ``shape``, ``dtype``, ``ndim``, ``size`` are those of its data.
    """

    __slots__ = ("tensor",)
    __array_ufunc__ = None  # NumPy arrays defer their operators to ours
    __array_priority__ = 1000

    def __init__(self, tensor):
        self.tensor = tensor

    # Reading values: never differentiable.

    @property
    def shape(self):
        return self.tensor._data.shape

    @property
    def dtype(self):
        return self.tensor._data.dtype

    @property
    def ndim(self):
        return self.tensor._data.ndim

    @property
    def size(self):
        return self.tensor._data.size

    def __len__(self):
        return len(self.tensor._data)

    def __bool__(self):
        return bool(self.tensor._data)

    def __float__(self):
        return float(self.tensor._data)

    def item(self):
        return self.tensor._data.item()

    def __array__(self, dtype=None, copy=None):
        raise NotTwiceDifferentiable(
            "a differentiable array was converted to a plain array (np.asarray, or a write into "
            "a plain array), which would drop its graph"
        )

    def __repr__(self):
        return f"DArray({self.tensor!r})"

    # Operators.

    def __add__(self, o):
        return _bin("add", self, o)

    def __radd__(self, o):
        return _bin("add", o, self)

    def __sub__(self, o):
        return _bin("sub", self, o)

    def __rsub__(self, o):
        return _bin("sub", o, self)

    def __mul__(self, o):
        return _bin("mul", self, o)

    def __rmul__(self, o):
        return _bin("mul", o, self)

    def __truediv__(self, o):
        return _bin("div", self, o)

    def __rtruediv__(self, o):
        return _bin("div", o, self)

    def __pow__(self, o):
        return _bin("pow", self, o)

    def __rpow__(self, o):
        return _bin("pow", o, self)

    def __matmul__(self, o):
        return DArray(_ops()[1].matmul(_t(self), _t(o)))

    def __rmatmul__(self, o):
        return DArray(_ops()[1].matmul(_t(o), _t(self)))

    def __neg__(self):
        return DArray(_ops()[0].neg(self.tensor))

    def __pos__(self):
        return self

    def __abs__(self):
        return DArray(_ops()[0].abs(self.tensor))

    def __iadd__(self, o):
        self.tensor = _bin("add", self, o).tensor
        return self

    def __isub__(self, o):
        self.tensor = _bin("sub", self, o).tensor
        return self

    def __imul__(self, o):
        self.tensor = _bin("mul", self, o).tensor
        return self

    def __itruediv__(self, o):
        self.tensor = _bin("div", self, o).tensor
        return self

    def __eq__(self, o):
        return self.tensor._data == _data(o)

    def __ne__(self, o):
        return self.tensor._data != _data(o)

    def __lt__(self, o):
        return self.tensor._data < _data(o)

    def __le__(self, o):
        return self.tensor._data <= _data(o)

    def __gt__(self, o):
        return self.tensor._data > _data(o)

    def __ge__(self, o):
        return self.tensor._data >= _data(o)

    __hash__ = None

    # Indexing.

    def __getitem__(self, index):
        return DArray(_ops()[3].getitem(self.tensor, _data(index)))

    def __setitem__(self, index, value):
        self.tensor = apply(INDEX_PUT, self.tensor, _t_or_scalar(value), index=_data(index))

    # NumPy's methods.

    @property
    def T(self):  # noqa: N802 - NumPy's name
        return self.transpose()

    def transpose(self, *axes):
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        if not axes:
            axes = tuple(range(self.ndim - 1, -1, -1))
        return DArray(_ops()[3].permute(self.tensor, *axes))

    def swapaxes(self, a, b):
        return DArray(_ops()[3].swapaxes(self.tensor, a, b))

    def reshape(self, *shape, order="C"):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return DArray(_ops()[3].reshape(self.tensor, *shape))

    def ravel(self):
        return self.reshape(-1)

    flatten = ravel

    def squeeze(self, axis=None):
        return DArray(_ops()[3].squeeze(self.tensor, axis))

    def astype(self, dtype, copy=True):
        if self.dtype == dtype:
            return DArray(_ops()[0].clone(self.tensor)) if copy else self
        return DArray(_ops()[0].cast(self.tensor, dtype))

    def copy(self):
        return DArray(_ops()[0].clone(self.tensor))

    def sum(self, axis=None, keepdims=False, dtype=None):
        return _reduce("sum", self, axis, keepdims, dtype)

    def mean(self, axis=None, keepdims=False, dtype=None):
        return _reduce("mean", self, axis, keepdims, dtype)

    def max(self, axis=None, keepdims=False):
        return _reduce("amax", self, axis, keepdims, None)

    def min(self, axis=None, keepdims=False):
        return _reduce("amin", self, axis, keepdims, None)

    def prod(self, axis=None, keepdims=False):
        return _reduce("prod", self, axis, keepdims, None)

    def all(self, *args, **kwargs):
        return self.tensor._data.all(*args, **kwargs)

    def any(self, *args, **kwargs):
        return self.tensor._data.any(*args, **kwargs)


def _data(x):
    """Values only: a DArray's data (nested in tuples/lists too); anything else as is."""
    if isinstance(x, DArray):
        return x.tensor._data
    if isinstance(x, tuple):
        return tuple(_data(v) for v in x)
    return x


def _t(x):
    """A ferro op argument: a DArray's tensor, a plain array as a constant tensor."""
    if isinstance(x, DArray):
        return x.tensor
    if isinstance(x, TensorBase):
        return x
    if isinstance(x, _np.generic):
        return wrap(_np.asarray(x))  # a 0-d comparison's NumPy scalar
    return wrap(x) if hasattr(x, "dtype") and hasattr(x, "shape") else x


def _t_or_scalar(x):
    if isinstance(x, (int, float, bool)):
        return x
    return _t(x)


def _bin(name, a, b):
    return DArray(_op_fn(name)(_t_or_scalar(a), _t_or_scalar(b)))


def _axes(axis):
    return tuple(axis) if isinstance(axis, list) else axis


def _reduce(name, a, axis, keepdims, dtype):
    red = _ops()[2]
    t = a.tensor if isinstance(a, DArray) else _t(a)
    out = DArray(getattr(red, name)(t, axis=_axes(axis), keepdims=bool(keepdims)))
    if dtype is not None and out.dtype != dtype:
        out = out.astype(dtype)
    return out


def _any_darray(values) -> bool:
    for v in values:
        if isinstance(v, DArray):
            return True
        if isinstance(v, (tuple, list)) and _any_darray(v):
            return True
    return False


def _needs_grad(values) -> bool:
    for v in values:
        if isinstance(v, DArray) and v.tensor.requires_grad:
            return True
        if isinstance(v, (tuple, list)) and _needs_grad(v):
            return True
    return False


def _result(out, res):
    """Honour ``out=``: a DArray ``out`` is rebound to the result."""
    if out is None:
        return res
    if not isinstance(out, DArray):
        raise NotTwiceDifferentiable("out= must be a differentiable array under create_graph")
    out.tensor = _t(res) if not isinstance(res, DArray) else res.tensor
    return out


# ---------------------------------------------------------------------------------------------
# Recorded writes: what ``g[idx] = v`` and ``add.at`` become. Each is an op whose backward is
# written against xp like any other, so it is differentiable again through this namespace.
# ---------------------------------------------------------------------------------------------


class _IndexPut:
    """``out = base.copy(); out[index] = value``."""

    @staticmethod
    def forward(ctx, base, value, *, index):
        out = base.copy()
        out[index] = value
        ctx.index = index
        return out

    @staticmethod
    def backward(ctx, gy):
        need_base, need_value = ctx.needs_input_grad
        gbase = gvalue = None
        if need_base:
            gbase = gy.copy()
            gbase[ctx.index] = 0
        if need_value:
            gvalue = gy[ctx.index]
        return gbase, gvalue


class _ScatterAdd:
    """``out = base.copy(); xp.add.at(out, index, value)`` (repeated indices add up)."""

    @staticmethod
    def forward(ctx, base, value, *, index):
        out = base.copy()
        ctx.xp.add.at(out, index, value)
        ctx.index = index
        return out

    @staticmethod
    def backward(ctx, gy):
        need_base, need_value = ctx.needs_input_grad
        return (gy if need_base else None), (gy[ctx.index] if need_value else None)


INDEX_PUT = OpDef("index_put", _IndexPut.forward, _IndexPut.backward, broadcasts=True)
SCATTER_ADD = OpDef("scatter_add_at", _ScatterAdd.forward, _ScatterAdd.backward, broadcasts=True)


# ---------------------------------------------------------------------------------------------
# The namespace
# ---------------------------------------------------------------------------------------------


class _AddUfunc:
    """``xp.add``: a function with ``.at`` (the scatter-add of the gathering ops' backwards)."""

    def __init__(self, ns):
        self._ns = ns

    def __call__(self, a, b, out=None):
        return self._ns._ufunc2("add", a, b, out)

    def at(self, a, index, b):
        if not isinstance(a, DArray):
            if _needs_grad((b,)):
                raise NotTwiceDifferentiable("add.at into a plain array")
            return self._ns._backend.add.at(a, _data(index), _data(b))
        a.tensor = apply(SCATTER_ADD, a.tensor, _t_or_scalar(b), index=_data(index))
        return None


# Unary ufuncs: name -> the ferro op in elementwise (same semantics).
_UNARY = {
    "exp": "exp",
    "log": "log",
    "tanh": "tanh",
    "sin": "sin",
    "cos": "cos",
    "sqrt": "sqrt",
    "abs": "abs",
    "absolute": "abs",
    "negative": "neg",
    "expm1": "expm1",
    "log1p": "log1p",
    "square": "square",
    "reciprocal": "reciprocal",
    "log2": "log2",
    "log10": "log10",
    "exp2": "exp2",
    "sinh": "sinh",
    "cosh": "cosh",
    "tan": "tan",
    "arcsin": "asin",
    "arccos": "acos",
    "arctan": "atan",
    "arcsinh": "asinh",
    "arccosh": "acosh",
    "arctanh": "atanh",
    "erf": "erf",
    "erfc": "erfc",
}
_BINARY = {
    "subtract": "sub",
    "multiply": "mul",
    "divide": "div",
    "true_divide": "div",
    "power": "pow",
    "maximum": "maximum",
    "minimum": "minimum",
    "logaddexp": "logaddexp",
    "fmod": "fmod",
    "remainder": "remainder",
    "arctan2": "atan2",
    "hypot": "hypot",
}
# Functions whose derivative is zero wherever it exists (or whose results are not floating):
# on differentiable arrays they run on the values and return constants.
_VALUES_ONLY = frozenset(
    "sign floor ceil trunc round rint isfinite isnan isinf argsort argmax argmin argwhere "
    "nonzero any all count_nonzero logical_and logical_or logical_not equal not_equal less "
    "less_equal greater greater_equal shape ndim size result_type broadcast_shapes unique "
    "searchsorted".split()
)
_CREATION = frozenset("zeros ones empty full".split())
_CREATION_LIKE = frozenset("zeros_like ones_like empty_like full_like".split())


class Namespace:
    """NumPy's names over differentiable arrays (see the module docstring)."""

    def __init__(self, backend):
        self._backend = backend
        self.__name__ = "ferro.autograd.xp"
        self.add = _AddUfunc(self)
        self.newaxis = None
        self.ogrid = backend.ogrid
        self.pi = math.pi
        self.inf = math.inf
        self.nan = math.nan

    def __repr__(self):
        return f"<differentiable namespace over {self._backend.__name__}>"

    def __getattr__(self, name):
        backend = object.__getattribute__(self, "_backend")
        attr = getattr(backend, name)
        if not callable(attr) or isinstance(attr, type):
            return attr  # dtypes, constants
        if name in _UNARY:
            op = _UNARY[name]
            return lambda x, out=None: self._unary(op, x, out)
        if name in _BINARY:
            op = _BINARY[name]
            return lambda a, b, out=None: self._ufunc2(op, a, b, out)
        if name in _CREATION:
            return lambda *args, **kwargs: self._const(attr(*args, **kwargs))
        if name in _CREATION_LIKE:
            return lambda a, *args, **kwargs: self._const(attr(_data(a), *args, **kwargs))

        def fallback(*args, **kwargs):
            if _needs_grad(args) or _needs_grad(tuple(kwargs.values())):
                if name not in _VALUES_ONLY:
                    raise NotTwiceDifferentiable(
                        f"xp.{name} has no differentiable version in ferro's create_graph namespace"
                    )
            return attr(*[_data(a) for a in args], **{k: _data(v) for k, v in kwargs.items()})

        return fallback

    # helpers

    def _const(self, arr):
        return (
            DArray(wrap(arr))
            if getattr(arr, "dtype", None) is not None and (arr.dtype.kind == "f")
            else arr
        )

    def _unary(self, op, x, out=None):
        if not isinstance(x, DArray):
            return _result(out, getattr(self._backend, _np_name(op))(x))
        return _result(out, DArray(_op_fn(op)(x.tensor)))

    def _ufunc2(self, op, a, b, out=None):
        if not (isinstance(a, DArray) or isinstance(b, DArray)):
            res = getattr(self._backend, _np_name(op))(a, b)
            return _result(out, res) if out is not None else res
        return _result(out, _bin(op, a, b))

    # NumPy functions with differentiable versions.

    def asarray(self, a, dtype=None):
        if isinstance(a, DArray):
            return a if dtype is None else a.astype(dtype, copy=False)
        return self._backend.asarray(a, dtype=dtype)

    def ascontiguousarray(self, a):
        return a if isinstance(a, DArray) else self._backend.ascontiguousarray(a)

    def where(self, cond, a, b):
        if not (isinstance(a, DArray) or isinstance(b, DArray)):
            return self._backend.where(_data(cond), a, b)
        ew = _ops()[0]
        return DArray(ew.where(_data(cond), _t_or_scalar(a), _t_or_scalar(b)))

    def matmul(self, a, b):
        return DArray(_ops()[1].matmul(_t(a), _t(b)))

    def einsum(self, spec, *operands):
        if not _any_darray(operands):
            return self._backend.einsum(spec, *operands)
        return DArray(_ops()[1].einsum(spec, *[_t(o) for o in operands]))

    def sum(self, a, axis=None, keepdims=False, dtype=None):
        return _reduce("sum", a, axis, keepdims, dtype)

    def mean(self, a, axis=None, keepdims=False):
        return _reduce("mean", a, axis, keepdims, None)

    def max(self, a, axis=None, keepdims=False):
        return _reduce("amax", a, axis, keepdims, None)

    amax = max

    def prod(self, a, axis=None, keepdims=False):
        return _reduce("prod", a, axis, keepdims, None)

    def cumsum(self, a, axis=None):
        if not isinstance(a, DArray):
            return self._backend.cumsum(a, axis=axis)
        red = _ops()[2]
        if axis is None:
            return DArray(red.cumsum(a.reshape(-1).tensor, 0))
        return DArray(red.cumsum(a.tensor, axis))

    def cumprod(self, a, axis=None):
        if not isinstance(a, DArray):
            return self._backend.cumprod(a, axis=axis)
        red = _ops()[2]
        if axis is None:
            return DArray(red.cumprod(a.reshape(-1).tensor, 0))
        return DArray(red.cumprod(a.tensor, axis))

    def reshape(self, a, shape):
        return a.reshape(shape) if isinstance(a, DArray) else self._backend.reshape(a, shape)

    def transpose(self, a, axes=None):
        if not isinstance(a, DArray):
            return self._backend.transpose(a, axes)
        return a.transpose() if axes is None else a.transpose(tuple(axes))

    def swapaxes(self, a, x, y):
        return a.swapaxes(x, y) if isinstance(a, DArray) else self._backend.swapaxes(a, x, y)

    def moveaxis(self, a, source, destination):
        if not isinstance(a, DArray):
            return self._backend.moveaxis(a, source, destination)
        return DArray(_ops()[3].movedim(a.tensor, source, destination))

    def expand_dims(self, a, axis):
        if not isinstance(a, DArray):
            return self._backend.expand_dims(a, axis)
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        ndim = a.ndim + len(axes)
        t = a.tensor
        for ax in sorted(x % ndim for x in axes):
            t = _ops()[3].unsqueeze(t, ax)
        return DArray(t)

    def squeeze(self, a, axis=None):
        return a.squeeze(axis) if isinstance(a, DArray) else self._backend.squeeze(a, axis)

    def broadcast_to(self, a, shape):
        if not isinstance(a, DArray):
            return self._backend.broadcast_to(a, shape)
        shape = tuple(shape)
        if a.shape == shape:
            return a
        return DArray(_ops()[3].broadcast_to(a.tensor, shape))

    def concatenate(self, arrays, axis=0):
        arrays = list(arrays)
        if not _any_darray(arrays):
            return self._backend.concatenate(arrays, axis=axis)
        sh = _ops()[3]
        if axis is None:
            return DArray(sh.cat([sh.reshape(_t(a), -1) for a in arrays], 0))
        return DArray(sh.cat([_t(a) for a in arrays], axis))

    def stack(self, arrays, axis=0):
        arrays = list(arrays)
        if not _any_darray(arrays):
            return self._backend.stack(arrays, axis=axis)
        return DArray(_ops()[3].stack([_t(a) for a in arrays], axis))

    def split(self, a, indices_or_sections, axis=0):
        if not isinstance(a, DArray):
            return self._backend.split(a, indices_or_sections, axis=axis)
        n = a.shape[axis]
        if isinstance(indices_or_sections, int):
            sizes = [n // indices_or_sections] * indices_or_sections
        else:
            bounds = [0] + [min(int(b), n) for b in indices_or_sections] + [n]
            sizes = [max(hi - lo, 0) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]
        return [DArray(p) for p in _ops()[3].split(a.tensor, sizes, axis)]

    def flip(self, a, axis=None):
        if not isinstance(a, DArray):
            return self._backend.flip(a, axis)
        dims = tuple(range(a.ndim)) if axis is None else axis
        dims = (dims,) if isinstance(dims, int) else tuple(dims)
        return DArray(_ops()[3].flip(a.tensor, *dims))

    def roll(self, a, shift, axis=None):
        if not isinstance(a, DArray):
            return self._backend.roll(a, shift, axis)
        return DArray(_ops()[3].roll(a.tensor, shift, axis))

    def tile(self, a, reps):
        if not isinstance(a, DArray):
            return self._backend.tile(a, reps)
        reps = (reps,) if isinstance(reps, int) else tuple(reps)
        return DArray(_ops()[3].tile(a.tensor, *reps))

    def tril(self, a, k=0):
        if not isinstance(a, DArray):
            return self._backend.tril(a, k)
        return DArray(_ops()[3].tril(a.tensor, k))

    def triu(self, a, k=0):
        if not isinstance(a, DArray):
            return self._backend.triu(a, k)
        return DArray(_ops()[3].triu(a.tensor, k))

    def diagonal(self, a, offset=0, axis1=0, axis2=1):
        if not isinstance(a, DArray):
            return self._backend.diagonal(a, offset, axis1, axis2)
        return DArray(_ops()[3].diagonal(a.tensor, offset, axis1, axis2))

    def clip(self, a, lo, hi):
        if not isinstance(a, DArray):
            return self._backend.clip(a, lo, hi)
        return DArray(_ops()[0].clamp(a.tensor, lo, hi))

    def take_along_axis(self, a, index, axis):
        if not isinstance(a, DArray):
            return self._backend.take_along_axis(a, _data(index), axis)
        from ferro.ops.shape import _grid

        return a[_grid(self._backend, _data(index), axis % a.ndim)]

    def put_along_axis(self, a, index, values, axis):
        if not isinstance(a, DArray):
            if _needs_grad((values,)):
                raise NotTwiceDifferentiable("put_along_axis into a plain array")
            return self._backend.put_along_axis(a, _data(index), _data(values), axis)
        from ferro.ops.shape import _grid

        a[_grid(self._backend, _data(index), axis % a.ndim)] = values
        return None

    # NumPy has no erf/erfc: these two are methods, not found through the backend.
    def erf(self, x):
        return self._special("erf", x)

    def erfc(self, x):
        return self._special("erfc", x)

    def polygamma(self, n, x):
        if isinstance(x, DArray):
            return DArray(_op_fn("polygamma")(n, x.tensor))
        from ferro.ops import special

        return special._polygamma_array(self._backend, n, x)

    def _special(self, name, x):
        if isinstance(x, DArray):
            return DArray(_op_fn(name)(x.tensor))
        from ferro.ops import special

        return getattr(special, f"_{name}_array")(self._backend, x)


def _np_name(op):
    return {
        "sub": "subtract",
        "mul": "multiply",
        "div": "divide",
        "pow": "power",
        "neg": "negative",
        "asin": "arcsin",
        "acos": "arccos",
        "atan": "arctan",
        "asinh": "arcsinh",
        "acosh": "arccosh",
        "atanh": "arctanh",
        "atan2": "arctan2",
    }.get(op, op)


_NAMESPACES: dict = {}


def namespace(backend) -> Namespace:
    """The differentiable namespace over ``backend`` (numpy or cupy), one per backend."""
    ns = _NAMESPACES.get(backend)
    if ns is None:
        ns = _NAMESPACES[backend] = Namespace(backend)
    return ns


__all__ = ["DArray", "Namespace", "NotTwiceDifferentiable", "namespace"]
