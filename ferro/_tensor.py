"""The user-facing :class:`Tensor`: Python operators and methods over the compiled core.

The autograd fields (data, grad, grad_fn, requires_grad, version) live in the Cython base class
:class:`ferro._C.tensor.TensorBase`; this subclass adds no instance state (``__slots__ = ()``)
and only forwards to ops, so an op output is created by the engine directly as a ``Tensor``.
"""

from __future__ import annotations

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
    # Make ``ndarray * Tensor`` defer to Tensor's reflected operators.
    __array_priority__ = 1000

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


set_tensor_type(Tensor)
