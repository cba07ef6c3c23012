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
import numbers

import numpy as np

from ferro import _missing, _printing
from ferro import autograd as _autograd
from ferro import backend as _backend
from ferro import creation as _creation
from ferro import dtypes as _dtypes
from ferro._C import engine as _engine
from ferro._C.graph import inplace_method as _inplace_method
from ferro._C.tensor import TensorBase, set_tensor_type
from ferro.errors import (
    ArgumentTypeError,
    DeviceError,
    DtypeError,
    GraphError,
    IndexOutOfRangeError,
    ReadOnlyError,
    ShapeError,
)
from ferro.ops import activation as _act
from ferro.ops import decomp as _dec
from ferro.ops import device as _dev
from ferro.ops import elementwise as _ew
from ferro.ops import inplace as _ip
from ferro.ops import linalg as _la
from ferro.ops import reduction as _red
from ferro.ops import scan as _scan
from ferro.ops import shape as _sh
from ferro.ops import special as _sp


def _floordiv(a, b):
    # PyTorch's ``a // b`` (floor_divide): floor of the true quotient; integer when both are
    # integers (computed in float64, exact below 2**53), no gradient. Composed from public ops.
    def integral(v):
        if isinstance(v, Tensor):
            return not v.dtype.is_floating_point and v.dtype != _dtypes.bool_
        return isinstance(v, int) and not isinstance(v, bool)

    if integral(a) and integral(b):
        a64 = a.to(_dtypes.float64) if isinstance(a, Tensor) else float(a)
        b64 = b.to(_dtypes.float64) if isinstance(b, Tensor) else float(b)
        return _ew.floor(_ew.div(a64, b64)).to(_dtypes.int64)
    return _ew.floor(_ew.div(a, b))


def _rfloordiv(self, other):
    return _floordiv(other, self)


def _rpow(self, other):
    return _ew.pow(other, self)


def _rmatmul(self, other):
    return _la.matmul(other, self)


class Size(tuple):
    """The shape of a tensor, as ``torch.Size``: a tuple of ints (it compares equal to plain
    tuples) with PyTorch's ``numel()``, its repr, and slices that stay a Size. ``str`` is the
    plain tuple's, so messages that format a shape (``f"got {x.shape}"``) read ``(2, 3)``.

    Example:
        >>> s = ferro.zeros(2, 3).shape
        >>> s == (2, 3), s.numel(), isinstance(s, tuple), s[1:]
        (True, 6, True, ferro.Size([3]))
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return f"ferro.Size({list(self)})"

    __str__ = tuple.__repr__

    def __getitem__(self, index):
        item = tuple.__getitem__(self, index)
        return Size(item) if isinstance(index, slice) else item

    def numel(self) -> int:
        """The number of elements of a tensor of this shape."""
        n = 1
        for d in self:
            n *= d
        return n


def _comparable(other) -> bool:
    """What ``==``/``!=`` compare elementwise: tensors, numbers, arrays and sequences. Anything
    else (None, a string, pytest.approx) gets NotImplemented, as in PyTorch, so Python asks the
    other object (pytest.approx compares the value) or falls back to identity."""
    return isinstance(
        other, (TensorBase, numbers.Number, np.ndarray, np.generic, list, tuple)
    ) or hasattr(other, "__cuda_array_interface__")


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

    def __init__(self, *args, device=None) -> None:
        """PyTorch's legacy constructor: ``Tensor(data)`` copies a (nested) sequence or an array
        into a tensor of the default dtype (float32); ``Tensor(*sizes)`` makes a zero-filled one
        of that shape (PyTorch leaves it uninitialized); ``Tensor()`` is empty, of shape (0,).

        ``ferro.tensor(data)`` is the usual way: it keeps the data's dtype and takes ``dtype=``
        and ``requires_grad=``. The engine makes its tensors without calling ``__init__``, so
        this runs only for ``ferro.Tensor(...)``.

        Raises:
            ArgumentTypeError: a Tensor argument (PyTorch would alias it: use ``t.detach()``
                to share its memory or ``t.clone()`` to copy it), a scalar, other arguments
                with sizes, or a call on a tensor that already holds data.

        Example:
            >>> ferro.Tensor([1, 2]), ferro.Tensor(2, 3).shape
            (tensor([1., 2.]), ferro.Size([2, 3]))
        """
        # Reached on a fresh object only, whose data is still None; refusing a second call
        # keeps t.__init__(...) from swapping an existing tensor's data behind its graph.
        if self._data is not None:
            raise ArgumentTypeError("Tensor.__init__: this tensor already holds data")
        if args and all(isinstance(a, int) and not isinstance(a, bool) for a in args):
            made = _creation.zeros(*args, device=device)
        elif len(args) > 1:
            raise ArgumentTypeError(
                "Tensor(...): expected sizes (Tensor(2, 3)) or one sequence of data "
                f"(Tensor([1.0, 2.0])), got arguments of types {[type(a).__name__ for a in args]}"
            )
        elif args and isinstance(args[0], TensorBase):
            raise ArgumentTypeError(
                "Tensor(tensor): ferro does not alias a tensor through its constructor; use "
                "t.detach() to share its memory or t.clone() to copy it"
            )
        elif args and not isinstance(args[0], (list, tuple)) and not _backend.is_array(args[0]):
            raise ArgumentTypeError(
                f"Tensor(data): data must be a sequence or an array, got "
                f"{type(args[0]).__name__}; ferro.tensor(value) makes a 0-d tensor"
            )
        else:
            data = args[0] if args else []
            made = _creation.tensor(data, dtype=_dtypes.default_float(), device=device)
        self.data = made._data

    # Arithmetic. The forward functions take (a, b), so they serve directly as methods.
    # The four arithmetic operators are compiled (engine.arith): no Python frame on the way to
    # the engine for floating tensors, the wrappers below otherwise.
    __add__ = __radd__ = _engine.arith(_ew.Add, _ew.add)
    __sub__ = _engine.arith(_ew.Sub, _ew.sub)
    __rsub__ = _engine.arith(_ew.Sub, _ew.sub, reverse=True)
    __mul__ = __rmul__ = _engine.arith(_ew.Mul, _ew.mul)
    __truediv__ = _engine.arith(_ew.Div, _ew.div)
    __rtruediv__ = _engine.arith(_ew.Div, _ew.div, reverse=True)
    __floordiv__ = _floordiv
    __rfloordiv__ = _rfloordiv
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
    def __eq__(self, other):
        return _ew.eq(self, other) if _comparable(other) else NotImplemented

    def __ne__(self, other):
        return _ew.ne(self, other) if _comparable(other) else NotImplemented

    __lt__ = _ew.lt
    __le__ = _ew.le
    __gt__ = _ew.gt
    __ge__ = _ew.ge
    __hash__ = object.__hash__
    # Bool and integer tensors: & | ^ ~ are bitwise (logical on bool), as in PyTorch.
    __and__ = __rand__ = _ew.bitwise_and
    __or__ = __ror__ = _ew.bitwise_or
    __xor__ = __rxor__ = _ew.bitwise_xor
    __invert__ = _ew.bitwise_not
    logical_and, logical_or, logical_xor = _ew.logical_and, _ew.logical_or, _ew.logical_xor
    logical_not = _ew.logical_not
    bitwise_and, bitwise_or, bitwise_xor = _ew.bitwise_and, _ew.bitwise_or, _ew.bitwise_xor
    bitwise_not = _ew.bitwise_not
    absolute, negative, positive = _ew.abs, _ew.neg, __pos__
    multiply, subtract, true_divide = _ew.mul, _ew.sub, _ew.div
    greater, greater_equal, less, less_equal = _ew.gt, _ew.ge, _ew.lt, _ew.le
    not_equal = _ew.ne

    # In place: x += y writes into x's memory (see ferro.ops.inplace).
    __iadd__ = _inplace_method(0, _ip.add_)  # compiled: inplace_direct, else ferro.ops.inplace's
    __isub__ = _inplace_method(1, _ip.sub_)
    __imul__ = _inplace_method(2, _ip.mul_)
    __itruediv__ = _ip.div_

    add_ = __iadd__  # (self, other, *, alpha=1): PyTorch's alpha=
    sub_ = __isub__
    mul_ = __imul__
    div_ = _ip.div_
    clamp_ = _ip.clamp_
    fill_ = _ip.fill_
    zero_ = _ip.zero_
    __setitem__ = _ip.setitem
    __ipow__ = _ip.pow_
    abs_ = _ip.abs_
    ceil_ = _ip.ceil_
    clamp_max_ = _ip.clamp_max_
    clamp_min_ = _ip.clamp_min_
    cos_ = _ip.cos_
    exp_ = _ip.exp_
    floor_ = _ip.floor_
    log_ = _ip.log_
    neg_ = _ip.neg_
    pow_ = _ip.pow_
    reciprocal_ = _ip.reciprocal_
    relu_ = _ip.relu_
    round_ = _ip.round_
    sigmoid_ = _ip.sigmoid_
    sign_ = _ip.sign_
    sin_ = _ip.sin_
    sqrt_ = _ip.sqrt_
    square_ = _ip.square_
    tanh_ = _ip.tanh_
    trunc_ = _ip.trunc_
    bernoulli_ = _ip.bernoulli_
    index_put_ = _ip.index_put_
    index_add_ = _ip.index_add_
    index_copy_ = _ip.index_copy_
    index_fill_ = _ip.index_fill_
    masked_fill_ = _ip.masked_fill_
    masked_scatter_ = _ip.masked_scatter_
    scatter_ = _ip.scatter_
    scatter_add_ = _ip.scatter_add_
    copy_ = _ip.copy_
    uniform_ = _ip.uniform_
    normal_ = _ip.normal_

    def __getattr__(self, name):
        # Only after normal lookup failed: a PyTorch name ferro lacks gets an error that says
        # what to do instead (ferro/_missing.py); any other name the usual AttributeError.
        _missing.tensor_attribute(name)

    def __iter__(self):
        # One unbind op for all rows (as PyTorch): backward stacks the rows' gradients once,
        # where a getitem per row would scatter each into zeros of the whole tensor.
        if self.ndim == 0:
            raise ArgumentTypeError("iteration over a 0-d tensor")
        return iter(_sh.unbind(self, 0))

    # Methods that mirror the functions in ferro.ops.

    def add(self, other, *, alpha=1):
        """``self + alpha * other`` (PyTorch's ``alpha=``)."""
        return _ew.add(self, other, alpha=alpha)

    def sub(self, other, *, alpha=1):
        """``self - alpha * other`` (PyTorch's ``alpha=``)."""
        return _ew.sub(self, other, alpha=alpha)

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
    square = _ew.square
    reciprocal = _ew.reciprocal
    log2 = _ew.log2
    log10 = _ew.log10
    exp2 = _ew.exp2
    floor = _ew.floor
    ceil = _ew.ceil
    round = _ew.round
    trunc = _ew.trunc
    frac = _ew.frac
    fmod = _ew.fmod
    remainder = _ew.remainder
    lerp = _ew.lerp
    addcmul = _ew.addcmul
    addcdiv = _ew.addcdiv
    clamp_min = _ew.clamp_min
    clamp_max = _ew.clamp_max
    isnan = _ew.isnan
    isclose = _ew.isclose
    allclose = _ew.allclose
    equal = _ew.equal
    isinf = _ew.isinf
    isfinite = _ew.isfinite
    nan_to_num = _ew.nan_to_num
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
    argmax = _red.argmax
    argmin = _red.argmin
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
    masked_scatter = _sh.masked_scatter
    index_put = _sh.index_put
    index_add = _sh.index_add
    index_copy = _sh.index_copy
    index_fill = _sh.index_fill
    repeat = _sh.repeat
    tile = _sh.tile
    flip = _sh.flip
    roll = _sh.roll
    split = _sh.split
    unbind = _sh.unbind
    chunk = _sh.chunk
    all = _red.all
    any = _red.any
    cumprod = _red.cumprod
    sort = _red.sort
    topk = _red.topk
    median = _red.median
    tan, sinh, cosh = _sp.tan, _sp.sinh, _sp.cosh
    asin, acos, atan, asinh, acosh, atanh = (
        _sp.asin,
        _sp.acos,
        _sp.atan,
        _sp.asinh,
        _sp.acosh,
        _sp.atanh,
    )
    arcsin, arccos, arctan, arcsinh, arccosh, arctanh = asin, acos, atan, asinh, acosh, atanh
    atan2 = arctan2 = _sp.atan2
    erf, erfc, logit, hypot, xlogy = _sp.erf, _sp.erfc, _sp.logit, _sp.hypot, _sp.xlogy
    deg2rad, rad2deg = _sp.deg2rad, _sp.rad2deg
    diff = _sh.diff
    repeat_interleave = _sh.repeat_interleave
    unfold = _sh.unfold_windows
    dot = _la.dot
    outer = _la.outer
    logaddexp = _ew.logaddexp
    prelu = _act.prelu
    argsort = _red.argsort
    tril = _sh.tril
    triu = _sh.triu
    diagonal = _sh.diagonal
    diag = _sh.diag
    movedim = _sh.movedim
    swapaxes = _sh.swapaxes
    swapdims = _sh.swapdims
    masked_select = _sh.masked_select
    addmm = _la.addmm
    addmv = _la.addmv
    baddbmm = _la.baddbmm
    cross = _la.cross
    unique = _red.unique
    bucketize = _red.bucketize
    nansum, nanmean, nanmedian, kthvalue = _red.nansum, _red.nanmean, _red.nanmedian, _red.kthvalue
    histc, unique_consecutive = _red.histc, _red.unique_consecutive
    cummax, cummin, logcumsumexp = _scan.cummax, _scan.cummin, _scan.logcumsumexp
    trace, tensor_split, take_along_dim, rot90 = (
        _sh.trace,
        _sh.tensor_split,
        _sh.take_along_dim,
        _sh.rot90,
    )
    addr, addbmm = _la.addr, _la.addbmm
    ravel, unflatten, take, moveaxis = _sh.ravel, _sh.unflatten, _sh.take, _sh.moveaxis
    fliplr, flipud = _sh.fliplr, _sh.flipud
    divide, inner, kron = _ew.divide, _la.inner, _la.kron
    count_nonzero, aminmax, quantile = _red.count_nonzero, _red.aminmax, _red.quantile
    bincount, isin = _red.bincount, _red.isin
    erfinv, lgamma, digamma = _sp.erfinv, _sp.lgamma, _sp.digamma
    inverse, det, logdet, slogdet, matrix_power = (
        _dec.inverse,
        _dec.det,
        _dec.logdet,
        _dec.slogdet,
        _dec.matrix_power,
    )
    cholesky, qr, svd, pinverse = _dec.cholesky, _dec.qr, _dec.svd, _dec.pinverse

    def polygamma(self, n: int) -> Tensor:
        """:func:`ferro.polygamma` of order ``n`` of this tensor (PyTorch's ``t.polygamma(n)``)."""
        return _sp.polygamma(n, self)

    def multinomial(self, num_samples: int, replacement: bool = False, *, generator=None):
        """:func:`ferro.multinomial` of this tensor's weights."""
        return _creation.multinomial(self, num_samples, replacement, generator=generator)

    def bernoulli(self, p=None, *, generator=None):
        """:func:`ferro.bernoulli` with this tensor's probabilities."""
        return _creation.bernoulli(self, p, generator=generator)

    nonzero = _sh.nonzero

    def clone(self) -> Tensor:
        """A copy with its own memory; gradients flow back to this tensor."""
        return _ew.clone(self)

    @property
    def T(self) -> Tensor:
        """All dimensions reversed."""
        return _sh.permute(self, tuple(range(self.ndim - 1, -1, -1)))

    @property
    def mT(self) -> Tensor:
        """The last two dimensions swapped (batched matrix transpose)."""
        return _sh.transpose(self, -2, -1)

    t = _sh.t

    def _reshape_in_place(self, view, op: str):
        # PyTorch's in-place shape methods: self takes the shape of ``view``, a view of its own
        # memory. A tensor with history would need its node's output to change shape, which
        # ferro's graph does not do: those are refused, naming the out-of-place form.
        if self.grad_fn is not None:
            raise GraphError(
                f"{op}: ferro cannot change the shape of a tensor with history (grad_fn) in "
                f"place; use t = t.{op[:-1]}(...) instead"
            )
        if self.requires_grad and _engine.is_grad_enabled():
            raise GraphError(
                f"{op}: a leaf tensor that requires grad cannot be modified in place; wrap it "
                "in ferro.no_grad()"
            )
        self.data = view
        return self

    def share_memory_(self) -> Tensor:
        """Move this CPU tensor's data into shared memory (no-op if it is there) and return it:
        processes this tensor is then sent to (multiprocessing arguments, queues, pipes) or
        forked into see and make the same changes (Note [Shared-memory tensors] in
        ferro/_shared.py). Views taken before keep the old memory."""
        from ferro import _shared

        if not isinstance(self._data, np.ndarray):
            raise DeviceError(
                f"share_memory_: only CPU tensors can be moved into shared memory, got one on "
                f"{self.device}"
            )
        self.data = _shared.share(self._data)
        return self

    def is_shared(self) -> bool:
        """Whether the data is in shared memory (after :meth:`share_memory_`)."""
        from ferro import _shared

        return isinstance(self._data, np.ndarray) and _shared.block_of(self._data) is not None

    def unsqueeze_(self, dim: int) -> Tensor:
        """``unsqueeze`` in place (a tensor without history; returns ``self``)."""
        return self._reshape_in_place(_sh.unsqueeze(self.detach(), dim), "unsqueeze_")

    def squeeze_(self, dim=None) -> Tensor:
        """``squeeze`` in place (a tensor without history; returns ``self``)."""
        return self._reshape_in_place(_sh.squeeze(self.detach(), dim), "squeeze_")

    def t_(self) -> Tensor:
        """``t`` in place (a tensor without history; returns ``self``)."""
        return self._reshape_in_place(_sh.t(self.detach()), "t_")

    def transpose_(self, dim0: int, dim1: int) -> Tensor:
        """``transpose`` in place (a tensor without history; returns ``self``)."""
        return self._reshape_in_place(_sh.transpose(self.detach(), dim0, dim1), "transpose_")

    def mm(self, mat2) -> Tensor:
        """The matrix product of two 2-D tensors (``ferro.mm``)."""
        return _la.mm(self, mat2)

    def bmm(self, mat2) -> Tensor:
        """Batched matrix product (``ferro.bmm``)."""
        return _la.bmm(self, mat2)

    def mv(self, vec) -> Tensor:
        """The product of a 2-D matrix and a 1-D vector (``ferro.mv``)."""
        return _la.mv(self, vec)

    def contiguous(self) -> Tensor:
        """This tensor if its data is C-contiguous, else a C-contiguous copy (with history)."""
        return self if self.is_contiguous() else _ew.clone(self)

    def is_contiguous(self) -> bool:
        """True if the data is laid out in row-major (C) order without gaps."""
        return bool(self._data.flags.c_contiguous)

    def view_as(self, other) -> Tensor:
        """``self.view(other.shape)``."""
        return _sh.reshape(self, _other(other, "view_as").shape)

    def reshape_as(self, other) -> Tensor:
        """``self.reshape(other.shape)``."""
        return _sh.reshape(self, _other(other, "reshape_as").shape)

    def expand_as(self, other) -> Tensor:
        """``self.expand(other.shape)``."""
        return _sh.expand(self, _other(other, "expand_as").shape)

    @property
    def shape(self) -> Size:
        """The shape, as a :class:`ferro.Size` (a tuple)."""
        return Size(self._meta.shape)

    @property
    def mH(self) -> Tensor:
        """The last two dimensions swapped (the conjugate is the tensor itself: ferro is real)."""
        return _sh.transpose(self, -2, -1)

    @property
    def H(self) -> Tensor:
        """The transpose of a matrix (the conjugate is the tensor itself: ferro is real)."""
        return self.t() if self.ndim == 2 else self.T

    @property
    def is_sparse(self) -> bool:
        """Always False: ferro's tensors are dense."""
        return False

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self._meta.dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Bytes of the elements (``numel() * itemsize``)."""
        return self._data.nbytes

    def element_size(self) -> int:
        """Bytes per element."""
        return self._meta.dtype.itemsize

    def stride(self, dim=None):
        """The step between elements of each dimension, in elements (not bytes, as PyTorch)."""
        steps = tuple(s // self._data.dtype.itemsize for s in self._data.strides)
        return steps if dim is None else steps[dim]

    def data_ptr(self) -> int:
        """The address of the first element."""
        data = self._data
        if _backend.is_device_array(data):
            return data.data.ptr
        return data.ctypes.data

    def is_floating_point(self) -> bool:
        """True for float32 and float64 tensors."""
        return self._meta.dtype.kind == "f"

    def is_complex(self) -> bool:
        """Always False: ferro's tensors hold real numbers."""
        return False

    def get_device(self) -> int:
        """The CUDA device index, or -1 on the CPU (PyTorch's convention)."""
        return self.device.index if self.is_cuda else -1

    def ndimension(self) -> int:
        """Number of dimensions (``dim()``)."""
        return self._meta.ndim

    def type_as(self, other) -> Tensor:
        """This tensor converted to ``other``'s dtype."""
        return self.to(_other(other, "type_as")._data.dtype)

    def to_dense(self) -> Tensor:
        """The tensor itself: ferro's tensors are dense."""
        return self

    def is_pinned(self) -> bool:
        """Always False: ferro does not page-lock host memory."""
        return False

    def pin_memory(self) -> Tensor:
        """The tensor itself: ferro does not page-lock host memory (copies to a GPU are
        synchronous either way), as ``DataLoader(pin_memory=True)`` accepts and ignores it."""
        return self

    def nelement(self) -> int:
        """Number of elements (``numel()``)."""
        return self._meta.size

    def size(self, dim=None):
        """The shape, or the length of dimension ``dim`` (negative counts from the end).

        Raises:
            IndexOutOfRangeError: ``dim`` outside ``[-ndim, ndim)``.
        """
        shape = self._meta.shape
        if dim is None:
            return Size(shape)
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise ArgumentTypeError(f"size: dim must be an int, got {type(dim).__name__}")
        if not -len(shape) <= dim < len(shape):
            raise IndexOutOfRangeError(
                f"size: dimension {dim} is out of range for a tensor of {len(shape)} "
                f"dimensions (expected [{-len(shape)}, {len(shape)}))"
            )
        return shape[dim]

    # PyTorch's new_* factories: this tensor's dtype and device unless given.
    def new_tensor(self, data, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
        """A copy of ``data`` as a tensor of this tensor's dtype and device unless given."""
        dtype, device = self._new_args(dtype, device)
        return _creation.tensor(data, dtype=dtype, device=device, requires_grad=requires_grad)

    def new_zeros(
        self, *sizes, size=None, dtype=None, device=None, requires_grad: bool = False
    ) -> Tensor:
        """Zeros of ``size``, with this tensor's dtype and device unless given."""
        dtype, device = self._new_args(dtype, device)
        return _creation.zeros(
            *sizes, size=size, dtype=dtype, device=device, requires_grad=requires_grad
        )

    def new_ones(
        self, *sizes, size=None, dtype=None, device=None, requires_grad: bool = False
    ) -> Tensor:
        """Ones of ``size``, with this tensor's dtype and device unless given."""
        dtype, device = self._new_args(dtype, device)
        return _creation.ones(
            *sizes, size=size, dtype=dtype, device=device, requires_grad=requires_grad
        )

    def new_empty(
        self, *sizes, size=None, dtype=None, device=None, requires_grad: bool = False
    ) -> Tensor:
        """An uninitialized tensor of ``size``, with this tensor's dtype and device unless
        given."""
        dtype, device = self._new_args(dtype, device)
        return _creation.empty(
            *sizes, size=size, dtype=dtype, device=device, requires_grad=requires_grad
        )

    def new_full(
        self, size, fill_value, dtype=None, device=None, requires_grad: bool = False
    ) -> Tensor:
        """``fill_value`` in a tensor of ``size``, with this tensor's dtype and device unless
        given (PyTorch does not infer the dtype from the value here, unlike ``full``)."""
        dtype, device = self._new_args(dtype, device)
        return _creation.full(
            size, fill_value, dtype=dtype, device=device, requires_grad=requires_grad
        )

    def new(self, *args) -> Tensor:
        """PyTorch's legacy ``t.new(...)``: the legacy constructor of ``t``'s type (ferro.legacy)
        on ``t``'s device. ``t.new()`` is empty, ``t.new(2, 3)`` or ``t.new(size)``
        uninitialized, ``t.new(data)`` a copy of a sequence or array in ``t``'s dtype, and
        ``t.new(u)`` of a tensor of the same type shares it. Older programs write
        ``weight.new(n, b, h).zero_()``; new code uses ``new_zeros``/``new_tensor``.
        """
        from ferro import legacy  # ferro.legacy imports this module

        types = legacy.CUDA_TYPES if self.is_cuda else legacy.CPU_TYPES
        name = _TYPE_NAMES.get(self._data.dtype.name, self._data.dtype.name) + "Tensor"
        return types[name](*args, device=_backend.device_of(self._data))

    def _new_args(self, dtype, device):
        data = self._data
        return (
            data.dtype if dtype is None else dtype,
            _backend.device_of(data) if device is None else device,
        )

    # Devices and dtypes (ferro/backend.py, ferro/dtypes.py).
    @property
    def dtype(self) -> _dtypes.dtype:
        """The element type: ``ferro.float32``, ``ferro.float64``, ``ferro.int64`` or
        ``ferro.bool`` (each equal to its NumPy dtype too: ``t.dtype == np.float32``)."""
        dt = self._meta.dtype
        return _FROM_NUMPY.get(dt, dt)  # dtypes.of_numpy, inlined

    @property
    def device(self) -> _backend.device:
        """The :class:`ferro.device` the data is on: ``cpu`` or ``cuda:N`` (equal to those
        strings: ``t.device == "cpu"``)."""
        return _backend.device_of(self._data)

    @property
    def is_cuda(self) -> bool:
        """True if the data is on a CUDA device."""
        return _backend.is_device_array(self._data)

    @property
    def is_cpu(self) -> bool:
        """True if the data is on the CPU."""
        return not _backend.is_device_array(self._data)

    def to(self, *args, **kwargs) -> Tensor:
        """This tensor on another device and/or of another dtype, as PyTorch's ``Tensor.to``:
        ``to(dtype)``, ``to(device)``, ``to(device, dtype)``, ``to(other)`` (``other``'s
        device and dtype), ``to(device=..., dtype=..., non_blocking=False, copy=False)``.

        Returns the tensor itself when nothing changes (unless ``copy=True``). Differentiable:
        gradients move back and convert back; a conversion to int64 or bool gives a tensor
        without history. ``non_blocking`` is accepted and ignored (copies are synchronous).

        Raises:
            NotSupportedError: a dtype ferro does not hold (``ferro.half``, ``ferro.int32``).
            DeviceError: an unknown device, or CUDA when it is not available.
            ArgumentTypeError: arguments of no ``to`` form.

        Example:
            >>> x = ferro.ones(2, requires_grad=True)
            >>> x.to(ferro.float64).dtype, x.to("cpu") is x
            (ferro.float64, True)
        """
        device, dtype, copy = parse_to_args("Tensor.to", args, kwargs)
        out = self
        if device is not None:
            out = _dev.to_device(out, device)
        if dtype is not None:
            out = _ew.cast(out, dtype)
        if copy and out is self:
            out = self.clone()
        return out

    def type(self, dtype=None, non_blocking: bool = False):
        """With no argument, the tensor type's name as PyTorch spells it
        (``"ferro.FloatTensor"``, ``"ferro.cuda.LongTensor"``); with a dtype, such a name or a
        typed constructor (``ferro.DoubleTensor``, ferro.legacy), ``self.to(dtype)``.
        ``non_blocking`` is accepted and ignored, as in :meth:`to`.

        Example:
            >>> ferro.ones(2).type(), ferro.ones(2).type(ferro.float64).dtype
            ('ferro.FloatTensor', ferro.float64)
        """
        if dtype is None:
            where = "ferro.cuda." if self.is_cuda else "ferro."
            return where + _TYPE_NAMES.get(self._data.dtype.name, self._data.dtype.name) + "Tensor"
        if isinstance(dtype, str) and dtype.endswith("Tensor"):
            return self.to(*_parse_type_name(dtype))
        if isinstance(dtype, type) and hasattr(dtype, "is_cuda"):  # ferro.FloatTensor & co.
            return self.to("cuda" if dtype.is_cuda else "cpu", dtype.dtype)
        return self.to(dtype)

    def cpu(self) -> Tensor:
        """This tensor on the CPU (itself if it is there already)."""
        return self.to("cpu")

    def cuda(self, device=None) -> Tensor:
        """This tensor on a CUDA device: ``device`` is an index, a string or a
        :class:`ferro.device`; None means the current device (itself if it is on one)."""
        if device is None:
            return self.to("cuda")
        if isinstance(device, int) and not isinstance(device, bool):
            return self.to(_backend.device("cuda", device))
        target = _backend.parse_device(device)
        if target.type != "cuda":
            raise DeviceError(f"Tensor.cuda: expected a CUDA device, got {target}")
        return self.to(target)

    def float(self) -> Tensor:
        """Convert to float32 (differentiable)."""
        return _ew.cast(self, _dtypes.float32)

    def double(self) -> Tensor:
        """Convert to float64 (differentiable)."""
        return _ew.cast(self, _dtypes.float64)

    def where(self, condition, other) -> Tensor:
        """``ferro.where(condition, self, other)`` (PyTorch's ``Tensor.where``)."""
        return _ew.where(condition, self, other)

    def long(self) -> Tensor:
        """Convert to int64 (the result has no history)."""
        return _ew.cast(self, _dtypes.int64)

    def bool(self) -> Tensor:
        """Convert to bool (the result has no history)."""
        return _ew.cast(self, _dtypes.bool_)

    def int(self) -> Tensor:
        """PyTorch's int32 conversion; ferro holds integers as int64, so this raises
        NotSupportedError naming ``.long()``."""
        return _ew.cast(self, _dtypes.as_dtype(_dtypes.int32, where="Tensor.int"))

    def half(self) -> Tensor:
        """PyTorch's float16 conversion; ferro has no float16 tensors, so this raises
        NotSupportedError."""
        return _ew.cast(self, _dtypes.as_dtype(_dtypes.float16, where="Tensor.half"))

    # Autograd.
    def backward(
        self,
        gradient=None,
        retain_graph=None,
        create_graph: bool = False,
        inputs=None,
        num_threads=None,
    ) -> None:
        """Accumulate the gradient of this tensor into the ``.grad`` of the leaves.

        Args:
            gradient: the gradient of this tensor; may be omitted for a 1-element tensor.
            retain_graph: keep saved arrays so the graph can be walked again (default:
                ``create_graph``).
            create_graph: record the backward, so ``.grad`` has history (double backward).
            inputs: accumulate only into these tensors.
            num_threads: threads for this backward (None: ``ferro.autograd.parallel`` or
                ``set_num_threads``; see docs/autograd.md).
        """
        if gradient is retain_graph is inputs is num_threads is None and not create_graph:
            # what autograd.backward calls for these arguments, without its Python frames
            _engine.run_backward((self,), (None,), False, None, True, False, 0)
            return
        _autograd.backward(
            (self,),
            None if gradient is None else (gradient,),
            retain_graph,
            create_graph,
            inputs,
            num_threads,
        )

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
        if _backend.is_device_array(self._data):
            raise DeviceError(f"numpy(): the tensor is on {self.device}; call .cpu() first")
        return self._data

    def __array__(self, dtype=None, copy=None):
        data = _backend.move(self._data, "cpu")
        if copy:
            return np.array(data, dtype=dtype, copy=True)
        return data if dtype is None else data.astype(dtype, copy=False)

    def __dlpack__(self, stream=None, *, max_version=None, dl_device=None, copy=None):
        """Export the data as a DLPack capsule, for ``np.from_dlpack(t)``, ``torch.from_dlpack(t)``.

        The consumer shares the tensor's memory (writes through either side are seen by the
        other) and keeps it alive. The arguments are the DLPack protocol's, passed on to the
        array that holds the data (NumPy's on the CPU, CuPy's on CUDA, where ``stream`` is the
        consumer's stream). A read-only tensor is exported read-only to consumers of DLPack 1.0
        or later (``max_version``) and refused to older ones, which cannot mark it.

        Raises:
            GraphError: the tensor requires grad (PyTorch raises BufferError there); export
                ``t.detach()``, which shares the same memory.
            ReadOnlyError: the tensor's memory is read-only and the consumer asked for a
                legacy (pre-1.0) capsule, which has no read-only flag.
        """
        if self.requires_grad:
            raise GraphError(
                "__dlpack__: the tensor requires grad, and DLPack carries no autograd history; "
                "export tensor.detach() instead, which shares the same memory"
            )
        kwargs = {"stream": stream, "max_version": max_version, "dl_device": dl_device}
        kwargs["copy"] = copy
        # Only what the consumer set: an older producer (CuPy < 13) takes ``stream`` alone.
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        try:
            return self._data.__dlpack__(**kwargs)
        except BufferError as err:
            if getattr(self._data.flags, "writeable", True):
                raise
            raise ReadOnlyError(
                "__dlpack__: the tensor's memory is read-only and the consumer asked for a "
                "legacy DLPack capsule, which cannot mark it read-only; a consumer of DLPack "
                "1.0 (NumPy >= 2.1) imports it read-only; or export a copy "
                "(tensor.clone())"
            ) from err

    def __dlpack_device__(self) -> tuple:
        """The DLPack ``(device_type, device_id)`` of the data: ``(1, 0)`` on the CPU, ``(2, i)``
        on CUDA device ``i``."""
        return self._data.__dlpack_device__()

    def item(self):
        """The value of a 1-element tensor as a Python number."""
        if self._data.size != 1:
            raise ShapeError(
                f"item(): the tensor has {self._data.size} elements (shape {self.shape})"
            )
        return self._data.item()

    def tolist(self):
        """The data as (nested) Python lists."""
        return np.asarray(self).tolist()

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        # range(t), lst[t], slice bounds: integer (or bool) one-element tensors only, as PyTorch.
        if self._data.size != 1 or self.dtype.kind not in "iub":
            raise ArgumentTypeError(
                "only integer tensors of a single element can be converted to an index; got a "
                f"{self.dtype} tensor of shape {tuple(self.shape)}"
            )
        return int(self._data.item())

    def __format__(self, spec: str) -> str:
        # f"{loss:.4f}": a one-element tensor formats as its value; no spec gives the repr.
        if not spec:
            return repr(self)
        if self._data.size != 1:
            raise ArgumentTypeError(
                f"format: a format spec ({spec!r}) applies to one-element tensors only; got "
                f"shape {tuple(self.shape)}"
            )
        return format(self.item(), spec)

    def __reduce_ex__(self, protocol):
        # pickle and copy.copy: the data, dtype and requires_grad, as PyTorch pickles a tensor.
        # A non-leaf comes back as a leaf without history; .grad and hooks are not pickled.
        data = self._data
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
        out = _rebuild(type(self), copy.deepcopy(self._data, memo), self.requires_grad)
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
        if self._data.size != 1:
            raise ShapeError(
                f"bool(): the truth value of a tensor with {self._data.size} elements is ambiguous"
            )
        return bool(self.item())

    def __repr__(self) -> str:
        # PyTorch's format (ferro._printing): tensor([1.5000, 2.2500], grad_fn=<MulBackward>)
        suffixes = []
        if self.grad_fn is not None:
            suffixes.append(f"grad_fn=<{self.grad_fn.name()}>")
        elif self.requires_grad:
            suffixes.append("requires_grad=True")
        device = str(self.device) if self.is_cuda else None
        return _printing.tensor_repr(np.asarray(self), device, suffixes, _dtypes.default_float())


_FROM_NUMPY = _dtypes.FROM_NUMPY


def parse_to_args(where: str, args: tuple, kwargs: dict, copy_allowed: bool = True):
    """PyTorch's ``to`` arguments as ``(device | None, numpy dtype | None, copy)``.

    The forms: ``(dtype)``, ``(device)``, ``(device, dtype)``, ``(tensor)`` (its device and
    dtype), each optionally followed by ``non_blocking`` and ``copy``, and the same as
    keywords. A string is a dtype when it names one (``"float64"``), else a device.
    """
    kwargs = dict(kwargs)
    given = {"device": kwargs.pop("device", None), "dtype": kwargs.pop("dtype", None)}
    flags = [kwargs.pop("non_blocking", False), kwargs.pop("copy", False)]
    if kwargs:
        raise ArgumentTypeError(f"{where}: unexpected keyword argument(s) {sorted(kwargs)}")
    rest = list(args)
    found = {}
    if rest and not isinstance(rest[0], bool):
        first = rest.pop(0)
        if isinstance(first, TensorBase):
            found = {"device": _backend.device_of(first._data), "dtype": first._data.dtype}
        elif _dtypes.is_dtype_like(first):
            found = {"dtype": first}
        else:
            found = {"device": first}
            if rest and not isinstance(rest[0], bool):
                found["dtype"] = rest.pop(0)
    twice = [k for k in found if given[k] is not None]
    if twice or len(rest) > 2 or not all(isinstance(f, bool) for f in rest):
        raise ArgumentTypeError(
            f"{where}: expected (dtype), (device, dtype), (tensor) or keywords, each "
            f"optionally followed by non_blocking and copy; got positional arguments of types "
            f"{[type(a).__name__ for a in args]} and keywords "
            f"{sorted(k for k, v in given.items() if v is not None)}"
        )
    given.update(found)
    flags[: len(rest)] = rest
    if flags[1] and not copy_allowed:
        raise ArgumentTypeError(f"{where}: copy= is not an argument here")
    device, dtype = given["device"], given["dtype"]
    device = None if device is None else _backend.parse_device(device)
    dtype = None if dtype is None else _dtypes.as_dtype(dtype, where=where)
    return device, dtype, bool(flags[1])


# The dtype names in PyTorch's tensor type names (Tensor.type(), the typed constructors of
# ferro.legacy).
_TYPE_NAMES = {
    "float32": "Float",
    "float64": "Double",
    "int64": "Long",
    "bool": "Bool",
    "int32": "Int",
    "float16": "Half",
    "uint8": "Byte",
}
_TYPE_DTYPES = {v: k for k, v in _TYPE_NAMES.items()}


def _parse_type_name(name: str) -> tuple:
    """``"ferro.cuda.FloatTensor"`` (or ``"torch...."``) -> ``(device, dtype name)``."""
    parts = name.split(".")
    kind = parts[-1][: -len("Tensor")]
    if (
        parts[0] not in ("ferro", "torch")
        or parts[1:-1] not in ([], ["cuda"])
        or kind not in _TYPE_DTYPES
    ):
        raise DtypeError(
            f"Tensor.type: {name!r} is not a tensor type name such as 'ferro.FloatTensor' or "
            "'ferro.cuda.DoubleTensor'"
        )
    return ("cuda" if parts[1:-1] else "cpu", _TYPE_DTYPES[kind])


def _other(other, op: str):
    if not isinstance(other, TensorBase):
        raise ArgumentTypeError(f"{op}: expected a Tensor, got {type(other).__name__}")
    return other


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
    return _walk(obj, lambda t: t._data)


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
