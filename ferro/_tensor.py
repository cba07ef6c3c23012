"""The user-facing :class:`Tensor`: Python operators and methods over the compiled core.

The autograd fields (data, grad, grad_fn, requires_grad, version) live in the Cython base class
:class:`ferro._C.tensor.TensorBase`; this subclass adds no instance state (``__slots__ = ()``)
and only forwards to ops, so an op output is created by the engine directly as a ``Tensor``.

NumPy interop: a NumPy ufunc or function called on tensors (``np.exp(t)``, ``np.add(t, 1)``,
``np.sum(t, axis=0)``, ``np.concatenate([t, t])``, ``ndarray * t``) runs the ferro op of the same
meaning when ferro has one (``_UFUNCS``, ``_FUNCTIONS``) and returns a Tensor, with history when
an input requires grad. Any other NumPy call sees the tensors' data and returns what NumPy returns
(arrays), except that it raises ArgumentTypeError when a tensor requires grad: its result would
silently leave the graph (PyTorch raises there too). ``np.asarray(t)`` and ``t.numpy()`` are
explicit conversions (``numpy()`` refuses a tensor that requires grad; ``np.asarray`` returns the
data, as ``t.detach().numpy()`` would).
"""

from __future__ import annotations

import copy

import numpy as np

from ferro import autograd as _autograd
from ferro._C import engine as _engine
from ferro._C.tensor import TensorBase, set_tensor_type
from ferro.errors import ArgumentTypeError, GraphError, ShapeError
from ferro.ops import activation as _act
from ferro.ops import elementwise as _ew
from ferro.ops import inplace as _ip
from ferro.ops import linalg as _la
from ferro.ops import reduction as _red
from ferro.ops import shape as _sh


def _rsub(self, other):
    return _ew.sub(other, self)


def _rdiv(self, other):
    return _ew.div(other, self)


def _rpow(self, other):
    return _ew.pow(other, self)


def _rmatmul(self, other):
    return _la.matmul(other, self)


class Tensor(TensorBase):
    """A multi-dimensional array with reverse-mode autograd.

    Create one with :func:`ferro.tensor`, :func:`ferro.from_numpy` or a factory such as
    :func:`ferro.zeros`. Operators follow NumPy broadcasting; ``.backward()`` fills the ``.grad``
    of the leaves that require grad.

    Example:
        >>> x = ferro.tensor([1.0, 2.0, 3.0], requires_grad=True)
        >>> (x * x).sum().backward()
        >>> x.grad
        tensor([2., 4., 6.])
    """

    __slots__ = ()

    def __init__(self, *args, **kwargs) -> None:
        # The engine makes tensors without calling __init__; only ``ferro.Tensor(...)`` gets here.
        raise ArgumentTypeError(
            "Tensor(...) cannot be called directly: create tensors with ferro.tensor(data), "
            "ferro.from_numpy(array) or a factory such as ferro.zeros(2, 3)"
        )

    # Arithmetic. The forward functions take (a, b), so they serve directly as methods.
    __add__ = _ew.add
    __radd__ = _ew.add
    __sub__ = _ew.sub
    __rsub__ = _rsub
    __mul__ = _ew.mul
    __rmul__ = _ew.mul
    __truediv__ = _ew.div
    __rtruediv__ = _rdiv
    __pow__ = _ew.pow
    __rpow__ = _rpow
    __matmul__ = _la.matmul
    __rmatmul__ = _rmatmul
    __neg__ = _ew.neg

    def __pos__(self):
        return self

    __abs__ = _ew.abs
    __getitem__ = _sh.getitem
    # Comparisons return bool tensors; hashing stays by identity (tensors are dict keys).
    __eq__ = _ew.eq
    __ne__ = _ew.ne
    __lt__ = _ew.lt
    __le__ = _ew.le
    __gt__ = _ew.gt
    __ge__ = _ew.ge
    __hash__ = object.__hash__

    # In place: x += y writes into x's memory (see ferro.ops.inplace).
    __iadd__ = _ip.add_
    __isub__ = _ip.sub_
    __imul__ = _ip.mul_
    __itruediv__ = _ip.div_
    add_ = _ip.add_
    sub_ = _ip.sub_
    mul_ = _ip.mul_
    div_ = _ip.div_
    clamp_ = _ip.clamp_
    fill_ = _ip.fill_
    zero_ = _ip.zero_

    def __iter__(self):
        # One unbind op for all rows (as PyTorch): backward stacks the rows' gradients once,
        # where a getitem per row would scatter each into zeros of the whole tensor.
        if self.ndim == 0:
            raise ArgumentTypeError("iteration over a 0-d tensor")
        return iter(_sh.unbind(self, 0))

    # Methods that mirror the functions in ferro.ops.
    add = _ew.add
    sub = _ew.sub
    mul = _ew.mul
    div = _ew.div
    pow = _ew.pow
    neg = _ew.neg
    exp = _ew.exp
    log = _ew.log
    tanh = _ew.tanh
    abs = _ew.abs
    clamp = _ew.clamp
    clip = _ew.clamp
    expm1 = _ew.expm1
    log1p = _ew.log1p
    sqrt = _ew.sqrt
    rsqrt = _ew.rsqrt
    sin = _ew.sin
    cos = _ew.cos
    sigmoid = _ew.sigmoid
    sign = _ew.sign
    maximum = _ew.maximum
    minimum = _ew.minimum
    eq = _ew.eq
    ne = _ew.ne
    lt = _ew.lt
    le = _ew.le
    gt = _ew.gt
    ge = _ew.ge
    relu = _act.relu
    softmax = _act.softmax
    log_softmax = _act.log_softmax
    matmul = _la.matmul
    sum = _red.sum
    mean = _red.mean
    var = _red.var
    std = _red.std
    prod = _red.prod
    max = _red.max
    min = _red.min
    amax = _red.amax
    amin = _red.amin
    logsumexp = _red.logsumexp
    norm = _red.norm
    cumsum = _red.cumsum
    reshape = _sh.reshape
    view = _sh.reshape
    permute = _sh.permute
    transpose = _sh.transpose
    flatten = _sh.flatten
    squeeze = _sh.squeeze
    unsqueeze = _sh.unsqueeze
    expand = _sh.expand
    broadcast_to = _sh.broadcast_to
    narrow = _sh.narrow
    select = _sh.select
    index_select = _sh.index_select
    gather = _sh.gather
    scatter = _sh.scatter
    scatter_add = _sh.scatter_add
    masked_fill = _sh.masked_fill
    repeat = _sh.repeat
    tile = _sh.tile
    flip = _sh.flip
    roll = _sh.roll
    split = _sh.split
    unbind = _sh.unbind
    chunk = _sh.chunk

    def clone(self) -> Tensor:
        """A copy with its own memory; gradients flow back to this tensor."""
        return _ew.mul(self, 1)

    def long(self) -> Tensor:
        """Convert to int64 (not differentiable)."""
        return _ew.cast(self.detach(), np.int64)

    def bool(self) -> Tensor:
        """Convert to bool (not differentiable)."""
        return _ew.cast(self.detach(), np.bool_)

    @property
    def T(self) -> Tensor:
        """All dimensions reversed."""
        return _sh.permute(self, tuple(range(self.ndim - 1, -1, -1)))

    @property
    def mT(self) -> Tensor:
        """The last two dimensions swapped (batched matrix transpose)."""
        return _sh.transpose(self, -2, -1)

    def to(self, target=None, dtype=None) -> Tensor:
        """Move to a device (``"cpu"``, ``"cuda"``, ``"cuda:1"``) and/or convert to a dtype;
        differentiable (gradients move back and convert back). ``t.to(ferro.float64)`` works
        too."""
        from ferro.creation import _ALIASES
        from ferro.ops.device import to_device

        out = self
        if target is not None:
            if isinstance(target, str) and target not in _ALIASES:
                out = to_device(out, target)
            else:
                dtype = target
        if dtype is not None:
            out = _ew.cast(out, dtype)
        return out

    @property
    def device(self) -> str:
        """``"cpu"`` or ``"cuda:N"``."""
        from ferro.ops.device import device_of

        return device_of(self.data)

    def cpu(self) -> Tensor:
        """This tensor on the CPU (itself if it is there already)."""
        return self.to("cpu")

    def cuda(self, device: int = 0) -> Tensor:
        """This tensor on CUDA device ``device``."""
        return self.to(f"cuda:{device}")

    def float(self) -> Tensor:
        """Convert to float32."""
        return _ew.cast(self, np.float32)

    def double(self) -> Tensor:
        """Convert to float64."""
        return _ew.cast(self, np.float64)

    # Autograd.
    def backward(self, gradient=None, retain_graph: bool = False, inputs=None) -> None:
        """Accumulate the gradient of this tensor into the ``.grad`` of the leaves.

        Args:
            gradient: the gradient of this tensor; may be omitted for a 1-element tensor.
            retain_graph: keep saved arrays so the graph can be walked again.
            inputs: accumulate only into these tensors.
        """
        _autograd.backward((self,), None if gradient is None else (gradient,), retain_graph, inputs)

    def detach(self) -> Tensor:
        """A tensor that shares this one's data but is not part of any graph."""
        return _sh.detach(self)

    def register_hook(self, hook):
        """Run ``hook(grad) -> Tensor | None`` once on this tensor's summed gradient.

        Returns a handle whose ``remove()`` unregisters the hook.
        """
        return _engine.register_tensor_hook(self, hook)

    def register_post_accumulate_grad_hook(self, hook):
        """Run ``hook(tensor)`` after this leaf's ``.grad`` is updated by a backward."""
        return _engine.register_post_accumulate_grad_hook(self, hook)

    def retain_grad(self) -> None:
        """Keep this non-leaf tensor's gradient in ``.grad`` after backward."""
        _engine.retain_grad(self)

    @property
    def retains_grad(self) -> bool:
        """True if :meth:`retain_grad` was called on this non-leaf tensor."""
        return _engine.retains_grad(self)

    # Conversion.
    def numpy(self) -> np.ndarray:
        """The data as a NumPy array sharing memory with the tensor (CPU tensors only)."""
        if self.requires_grad:
            raise GraphError(
                "numpy(): the tensor requires grad; call tensor.detach().numpy() instead"
            )
        if type(self.data) is not np.ndarray:
            from ferro.errors import DeviceError

            raise DeviceError(f"numpy(): the tensor is on {self.device}; call .cpu() first")
        return self.data

    def __array__(self, dtype=None, copy=None):
        data = self.data
        if type(data) is not np.ndarray:
            data = data.get()
        if copy:
            return np.array(data, dtype=dtype, copy=True)
        return data if dtype is None else data.astype(dtype, copy=False)

    def item(self):
        """The value of a 1-element tensor as a Python number."""
        if self.data.size != 1:
            raise ShapeError(
                f"item(): the tensor has {self.data.size} elements (shape {self.shape})"
            )
        return self.data.item()

    def tolist(self):
        """The data as (nested) Python lists."""
        return np.asarray(self).tolist()

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        # range(t), lst[t], slice bounds: integer (or bool) one-element tensors only, as PyTorch.
        if self.data.size != 1 or self.dtype.kind not in "iub":
            raise ArgumentTypeError(
                "only integer tensors of a single element can be converted to an index; got a "
                f"{self.dtype} tensor of shape {tuple(self.shape)}"
            )
        return int(self.data.item())

    def __format__(self, spec: str) -> str:
        # f"{loss:.4f}": a one-element tensor formats as its value; no spec gives the repr.
        if not spec:
            return repr(self)
        if self.data.size != 1:
            raise ArgumentTypeError(
                f"format: a format spec ({spec!r}) applies to one-element tensors only; got "
                f"shape {tuple(self.shape)}"
            )
        return format(self.item(), spec)

    def __reduce_ex__(self, protocol):
        # pickle and copy.copy: the data, dtype and requires_grad, as PyTorch pickles a tensor.
        # A non-leaf comes back as a leaf without history; .grad and hooks are not pickled.
        data = self.data
        if type(data) is not np.ndarray and isinstance(data, np.ndarray):
            data = np.asarray(data)  # a memmap (or other subclass) pickles as a plain array
        return (_rebuild, (type(self), data, self.requires_grad))

    def __deepcopy__(self, memo):
        if self.grad_fn is not None:
            raise GraphError(
                "deepcopy: only leaf tensors (made by the user, not by a recorded op) can be "
                f"deep-copied; got a tensor with grad_fn=<{self.grad_fn.name()}>. Deep-copy "
                "t.detach() for its values"
            )
        out = _rebuild(type(self), copy.deepcopy(self.data, memo), self.requires_grad)
        memo[id(self)] = out
        if self.grad is not None:
            out.grad = copy.deepcopy(self.grad, memo)
        return out

    # NumPy interop (see the module docstring).
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        fn = _UFUNCS.get(ufunc) if method == "__call__" and not kwargs else None
        if fn is not None:
            return fn(*inputs)
        name = f"numpy.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")
        return _on_data(name, getattr(ufunc, method), inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        adapter = _FUNCTIONS.get(func)
        if adapter is not None:
            out = adapter(*args, **kwargs)
            if out is not NotImplemented:
                return out
        name = f"numpy.{func.__name__}"
        if func in _METADATA_FUNCTIONS:
            return func(*_unwrap(args), **_unwrap(kwargs))
        return _on_data(name, func, args, kwargs)

    def __bool__(self) -> bool:
        if self.data.size != 1:
            raise ShapeError(
                f"bool(): the truth value of a tensor with {self.data.size} elements is ambiguous"
            )
        return bool(self.item())

    def __repr__(self) -> str:
        data = np.asarray(self)
        body = np.array2string(data, separator=", ", prefix="tensor(", threshold=1000)
        extras = []
        if data.dtype not in (np.float32, np.int64, np.bool_) or data.size == 0:
            extras.append(f"dtype={data.dtype}")
        if self.grad_fn is not None:
            extras.append(f"grad_fn=<{self.grad_fn.name()}>")
        elif self.requires_grad:
            extras.append("requires_grad=True")
        return "tensor(" + body + "".join(", " + e for e in extras) + ")"


def _rebuild(cls, data, requires_grad):
    """Unpickle (or copy) a tensor: a leaf of type ``cls`` holding ``data``."""
    t = TensorBase.__new__(cls)
    t.data = data
    if requires_grad:
        t.requires_grad_(True)
    return t


def _walk(obj, leaf):
    """``obj`` with ``leaf`` applied to every tensor inside its tuples, lists and dicts."""
    if isinstance(obj, TensorBase):
        return leaf(obj)
    if isinstance(obj, (tuple, list)):
        return type(obj)(_walk(o, leaf) for o in obj)
    if isinstance(obj, dict):
        return {k: _walk(v, leaf) for k, v in obj.items()}
    return obj


def _unwrap(obj):
    return _walk(obj, lambda t: t.data)


def _on_data(name, call, args, kwargs):
    """Run a NumPy call ferro has no op for on the tensors' data, unless that would drop a graph
    (a tensor requires grad) or write into a tensor behind autograd's back (``out=``)."""
    found = []
    _walk((args, kwargs), found.append)
    if any(t.requires_grad for t in found):
        raise ArgumentTypeError(
            f"{name}: ferro has no differentiable version of this call, and running it on the "
            "data of a tensor that requires grad would drop the graph. Use the ferro op, or "
            "pass t.detach() to get a NumPy result without gradient"
        )
    outs = []
    _walk(kwargs.get("out"), outs.append)
    if outs:
        raise ArgumentTypeError(
            f"{name}: out= cannot be a ferro Tensor (NumPy would write into it without "
            "autograd's version counter seeing it); use an in-place method such as t.add_()"
        )
    return call(*_unwrap(args), **_unwrap(kwargs))


# NumPy ufunc -> the ferro op, for ``__call__`` without keyword arguments (out=, dtype=, ...).
_UFUNCS = {
    np.add: _ew.add,
    np.subtract: _ew.sub,
    np.multiply: _ew.mul,
    np.true_divide: _ew.div,
    np.power: _ew.pow,
    np.negative: _ew.neg,
    np.absolute: _ew.abs,
    np.exp: _ew.exp,
    np.expm1: _ew.expm1,
    np.log: _ew.log,
    np.log1p: _ew.log1p,
    np.sqrt: _ew.sqrt,
    np.sin: _ew.sin,
    np.cos: _ew.cos,
    np.tanh: _ew.tanh,
    np.sign: _ew.sign,
    np.maximum: _ew.maximum,
    np.minimum: _ew.minimum,
    np.matmul: _la.matmul,
    np.equal: _ew.eq,
    np.not_equal: _ew.ne,
    np.less: _ew.lt,
    np.less_equal: _ew.le,
    np.greater: _ew.gt,
    np.greater_equal: _ew.ge,
}


def _plain(**given) -> bool:
    """True when every NumPy-only argument (dtype=, out=, ...) was left at its default."""
    return all(v is None for v in given.values())


def _np_reduction(op):
    def adapter(a, axis=None, dtype=None, out=None, keepdims=False, **rest):
        if not _plain(dtype=dtype, out=out) or rest:
            return NotImplemented
        return op(a, axis=axis, keepdims=bool(keepdims))

    return adapter


def _np_moment(op):
    def adapter(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **rest):
        if not _plain(dtype=dtype, out=out) or rest:
            return NotImplemented
        return op(a, axis=axis, correction=ddof, keepdims=bool(keepdims))

    return adapter


def _np_extreme(op):
    def adapter(a, axis=None, out=None, keepdims=False, **rest):
        if out is not None or rest:
            return NotImplemented
        return op(a, axis=axis, keepdims=bool(keepdims))

    return adapter


def _np_join(op):
    def adapter(arrays, axis=0, out=None, **rest):
        if out is not None or rest:
            return NotImplemented
        if axis is None:
            return op([_sh.reshape(a, -1) for a in arrays], 0)
        return op(arrays, axis)

    return adapter


def _np_cumsum(a, axis=None, dtype=None, out=None):
    if not _plain(dtype=dtype, out=out):
        return NotImplemented
    return _red.cumsum(_sh.reshape(a, -1), 0) if axis is None else _red.cumsum(a, axis)


def _np_reshape(a, shape=None, order="C", **rest):
    if order != "C" or shape is None or rest:
        return NotImplemented
    return _sh.reshape(a, shape)


def _np_transpose(a, axes=None):
    return _sh.permute(a, tuple(range(a.ndim - 1, -1, -1)) if axes is None else axes)


def _np_flip(m, axis=None):
    return _sh.flip(m, tuple(range(m.ndim)) if axis is None else axis)


def _np_where(condition, *xy):
    return _ew.where(condition, *xy) if len(xy) == 2 else NotImplemented


def _np_dot(a, b, out=None):
    # np.dot is matmul for 1-D and 2-D operands only.
    if out is not None or not all(getattr(v, "ndim", 0) in (1, 2) for v in (a, b)):
        return NotImplemented
    return _la.matmul(a, b)


def _np_einsum(subscripts, *operands, out=None, **rest):
    if out is not None or rest or not isinstance(subscripts, str):
        return NotImplemented
    return _la.einsum(subscripts, *operands)


# NumPy function -> an adapter taking NumPy's arguments; it returns NotImplemented for arguments
# the ferro op has no equivalent of, and the call then runs on the data (_on_data).
_FUNCTIONS = {
    np.sum: _np_reduction(_red.sum),
    np.mean: _np_reduction(_red.mean),
    np.prod: _np_reduction(_red.prod),
    np.max: _np_extreme(_red.amax),
    np.amax: _np_extreme(_red.amax),
    np.min: _np_extreme(_red.amin),
    np.amin: _np_extreme(_red.amin),
    np.var: _np_moment(_red.var),
    np.std: _np_moment(_red.std),
    np.cumsum: _np_cumsum,
    np.concatenate: _np_join(_sh.cat),
    np.stack: _np_join(_sh.stack),
    np.reshape: _np_reshape,
    np.transpose: _np_transpose,
    np.squeeze: lambda a, axis=None: _sh.squeeze(a, axis),
    np.expand_dims: lambda a, axis: _sh.unsqueeze(a, axis),
    np.flip: _np_flip,
    np.roll: lambda a, shift, axis=None: _sh.roll(a, shift, axis),
    np.tile: lambda A, reps: _sh.tile(A, reps),
    np.where: _np_where,
    np.dot: _np_dot,
    np.einsum: _np_einsum,
}

# Functions that read only shapes and dtypes: they work on any tensor.
_METADATA_FUNCTIONS = frozenset([np.shape, np.ndim, np.size, np.result_type])


set_tensor_type(Tensor)
