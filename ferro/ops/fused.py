"""Fused overrides: one table names each op's fused kernels, one adapter applies them.

Note [Fused overrides] (docs/design.md). An op's generic ``forward``/``backward`` is written once
against ``xp`` and stays the reference. Where a chain of array temporaries is measurably slower
than one pass (``benchmarks/bench_ops.py``), :data:`OVERRIDES` names the fused kernel that
replaces it and the saved arrays that kernel reads. Each backend implements the kernels under
the same names and signatures: ``ferro._C.cpu_kernels`` (nogil loops) and ``ferro.cuda.ops``
(CUDA kernels), both over the per-element formulas of ``ferro/cuda/kernels/formulas.cuh``. The
composition root (``ferro/__init__.py``) calls :func:`install` once per backend, so ``ops``
never imports ``cuda``.

The adapter asks the backend's ``accepts``/``accepts_grad`` (array flags only: dtype, native byte
order, alignment, layout, shape) before it calls a kernel, and returns ``NotImplemented`` where
the answer is no; the engine then runs the generic code. Nothing on that path raises or formats
a message. A fused forward leaves ``ctx`` as the generic forward does, so after it either
backward may run; an entry with its own ``adapter`` is *paired* instead (its forward keeps state
only its backward reads), and the engine runs that backward exactly when that forward's kernel
ran, unless the entry says ``paired=False`` (recurrent_layer's forward leaves ``ctx`` as the
generic one does). ``ferro._C.engine.set_overrides_enabled(False)`` switches every override
off, the optimizers' fused updates (:func:`kernel_for`) and the engine's GPU accumulation
included.

Where NumPy already runs a SIMD single pass (the forwards of ``tanh``, ``sigmoid``, ``relu``,
``softmax``) the CPU keeps the generic forward and only the backward, a chain of temporaries,
is fused; gelu is fused both ways (NumPy has no vectorized erf, and tanh-gelu is a chain of
seven passes; the CPU kernels' exp and tanh are ``formulas.cuh``'s, vectorized as NumPy's are).
Backward kernels take an upstream gradient that is one value broadcast with stride 0, which is
what ``.sum()`` and ``.mean()`` hand back.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from ferro._C.engine import overrides_enabled, set_overrides_enabled
from ferro.errors import ArgumentError
from ferro.ops.conv import Fold, Unfold, columns_override
from ferro.ops.norm import (
    batch_norm_override,
    group_norm_override,
    layer_norm_override,
    rms_norm_override,
)
from ferro.ops.pooling import (
    AdaptiveAvgPool,
    AdaptiveMaxPool,
    adaptive_pool_override,
    avg_pool_override,
)
from ferro.ops.recurrent import recurrent_layer_override
from ferro.ops.registry import REGISTRY
from ferro.ops.resampling import grid_sample_override, interpolate_override


@dataclass(frozen=True)
class Fused:
    """One op's fused kernels and what they read.

    Attributes:
        backward: kernel name; ``gx = kernel(gy, *ctx.saved[:saved], *params)``.
        forward: kernel name; ``y = kernel(x, *params)`` (the keyword parameters named in
            ``params``). It then saves ``x`` or ``y`` (``saves``) and stores each keyword
            parameter on ``ctx`` under its name, as the generic forward does.
        saved: how many saved arrays, from slot 0, the backward kernel reads.
        params: ``ctx`` attributes the backward kernel takes after the arrays (and the
            forward kernel after ``x``).
        only: ``(name, value)`` pairs the kernels need of the keyword parameters (forward) and
            of the ``ctx`` attributes the forward stored under those names (backward).
        rows: the kernels work along the last axis: the op's ``axis`` must be ``ndim - 1``.
        saves: what the generic forward saves, ``"x"`` or ``"y"``.
        adapter: ``adapter(backend) -> (forward, backward)`` replaces the generic adapter.
        paired: the adapter's forward keeps state the generic backward cannot read, so the
            engine runs its backward exactly when its forward ran. False for an adapter whose
            forward leaves ``ctx`` as the generic one does (either backward may follow it).
    """

    backward: str | None = None
    forward: str | None = None
    saved: int = 1
    params: tuple[str, ...] = ()
    only: tuple[tuple[str, Any], ...] = ()
    rows: bool = False
    saves: str = "y"
    adapter: Any = None
    paired: bool = True

    @property
    def kernels(self) -> tuple[str, ...]:
        """The kernel names this entry uses."""
        return tuple(k for k in (self.forward, self.backward) if k is not None)


def _cross_entropy(backend):
    """The paired override of cross_entropy: the forward keeps each row's logsumexp instead of
    the log-probabilities, and the backward writes the gradient from the logits in one pass.
    Class indices only: weights and label smoothing take the generic path."""
    fwd_kernel, bwd_kernel, accepts = (
        backend.cross_entropy_fwd,
        backend.cross_entropy_bwd,
        backend.accepts,
    )

    def forward(ctx, logits, *, target, weight, ignore_index, smoothing, reduction):
        if weight is not None or smoothing or logits.ndim != 2 or not accepts((logits,)):
            return NotImplemented
        per_row, lse = fwd_kernel(logits, target, ignore_index)
        ctx.save(logits)
        ctx.target, ctx.ignore, ctx.lse, ctx.reduction = target, ignore_index, lse, reduction
        ctx.smoothing = smoothing  # 0: what the entry's `only` names
        if reduction == "mean":
            # Rows not ignored, counted where the arrays live: nothing waits for a device.
            ctx.denom = denom = (target != ignore_index).sum().astype(logits.dtype)
            return per_row.sum() / denom
        ctx.denom = ctx.xp.ones((), dtype=logits.dtype)
        return per_row if reduction == "none" else per_row.sum()

    def backward(ctx, gy):
        (logits,) = ctx.saved
        return bwd_kernel(logits, ctx.target, ctx.lse, gy, ctx.denom, ctx.ignore)

    return forward, backward


def _column_kernels(backend):
    # The backend itself where it has the GEMM path's column kernels (the CPU), else None.
    return backend if {"im2col", "col2im"} <= backend.FUSED_KERNELS else None


def _conv_backward_with(backend):
    # The GEMM path's backward with the column kernels when they take gy and the saved arrays
    # (a saved-tensor hook may have changed their layout), else the generic one.
    from ferro.ops.conv import conv_backward

    def backward(transposed, ctx, gy):
        saved = tuple(a for a in ctx.saved if a is not None)
        return conv_backward(
            transposed, backend if backend.accepts((gy, *saved)) else None, ctx, gy
        )

    return backward


def _conv(backend):
    """The paired override of conv: a depthwise 2-d convolution (one input channel per group,
    symmetric padding) runs direct loops forward and backward instead of a sum of strided
    slices; every other convolution, on a backend with column kernels (the CPU), runs the
    op's GEMM path with them (im2col and col2im as nogil loops that pad on the fly, in place of
    a padded copy and strided NumPy copies and adds). The forwards leave ``ctx`` as the generic
    one does (the depthwise loops save both arrays); ``gy`` in another layout is made
    contiguous first."""
    fwd_kernel, bwd_kernel = backend.depthwise2d_fwd, backend.depthwise2d_bwd
    accepts, cols = backend.accepts, _column_kernels(backend)
    _conv_backward = _conv_backward_with(backend)
    from ferro.ops.conv import conv_forward, is_depthwise2d

    def forward(ctx, x, w, b, *, stride, pads, dilation, groups, size):
        if not accepts((x, w) if b is None else (x, w, b)):
            return NotImplemented
        if not is_depthwise2d(x, w, pads, groups):
            if cols is None:
                return NotImplemented
            return conv_forward(False, cols, ctx, x, w, b, stride, pads, dilation, groups, size)
        y = fwd_kernel(x, w, stride, pads, dilation, size)
        ctx.save(x, w)
        ctx.geom = (stride, pads, dilation, groups)
        ctx.in_size, ctx.kernel, ctx.depthwise2d = x.shape[2:], w.shape[2:], True
        ctx.columns = None  # (the GEMM path's kept columns: none here)
        if b is not None:
            y += b.reshape(1, -1, 1, 1)
        return y

    def backward(ctx, gy):
        gy = ctx.xp.ascontiguousarray(gy)
        if not ctx.depthwise2d:
            return _conv_backward(False, ctx, gy)
        x, w = ctx.saved
        need_x, need_w, need_b = ctx.needs_input_grad
        stride, pads, dilation, _ = ctx.geom
        gx, gw = bwd_kernel(gy, x, w, stride, pads, dilation, need_x, need_w)
        return gx, gw, gy.sum(axis=(0, 2, 3)) if need_b else None

    return forward, backward


def _conv_transpose(backend):
    """The paired override of conv_transpose: the op's GEMM path with the backend's column
    kernels (see :func:`_conv`)."""
    accepts, cols = backend.accepts, backend
    _conv_backward = _conv_backward_with(backend)
    from ferro.ops.conv import conv_forward

    def forward(ctx, x, w, b, *, stride, pads, dilation, groups, size):
        if not accepts((x, w) if b is None else (x, w, b)):
            return NotImplemented
        return conv_forward(True, cols, ctx, x, w, b, stride, pads, dilation, groups, size)

    def backward(ctx, gy):
        return _conv_backward(True, ctx, ctx.xp.ascontiguousarray(gy))

    return forward, backward


def _max_pool(backend):
    """The paired override of max_pool: values and indices in one pass over the windows, and
    the backward's scatter through the indices. The forward leaves ``ctx`` as the generic one
    does (its double backward reads the same state)."""
    fwd_kernel, bwd_kernel, accepts = backend.max_pool_fwd, backend.max_pool_bwd, backend.accepts

    def forward(ctx, x, *, kernel_size, stride, padding, dilation, out_size):
        if not accepts((x,)):
            return NotImplemented
        y, idx = fwd_kernel(x, kernel_size, stride, padding, dilation, out_size)
        ctx.save(idx)
        # unique=False: the generic backward, if it ever ran here, adds instead of assigning.
        ctx.shape, ctx.nd, ctx.unique = x.shape, len(kernel_size), False
        ctx.geometry = (kernel_size, stride, padding, dilation)
        return y, idx

    def backward(ctx, gy, gi):
        (idx,) = ctx.saved
        return bwd_kernel(ctx.xp.ascontiguousarray(gy), idx, ctx.shape, *ctx.geometry)

    return forward, backward


def _deform_conv2d(backend):
    """The paired override of deform_conv2d: the kernels sample the column matrix and run its
    transpose in place of index arrays the size of the columns; the batch chunks and the GEMMs
    are the op's own (``_deform_forward``/``_deform_backward`` with these column builders). The
    forward leaves ``ctx`` as the generic one does, so the backward never refuses: an upstream
    gradient in another layout is made contiguous, and saved arrays a saved-tensor hook
    changed the layout of go to the generic backward."""
    from ferro.ops.resampling import _deform_backward, _deform_forward

    im2col_kernel, col2im_kernel = backend.deform_im2col, backend.deform_col2im
    accepts = backend.accepts

    def im2col(x, offset, mask, geom):
        return im2col_kernel(x, offset, mask, geom[1:3], *geom[5:])

    def col2im(x, offset, mask, gcols, geom, need):
        return col2im_kernel(x, offset, mask, gcols, geom[1:3], *geom[5:], *need)

    def forward(ctx, x, offset, weight, *rest, **params):
        if not accepts((x, offset, weight, *rest)):
            return NotImplemented
        return _deform_forward(ctx, im2col, x, offset, weight, rest, **params)

    def backward(ctx, gy):
        saved = tuple(ctx.saved)
        gy = ctx.xp.ascontiguousarray(gy, dtype=saved[0].dtype)
        if accepts((gy, *saved)):
            return _deform_backward(ctx, im2col, col2im, gy)
        return REGISTRY["deform_conv2d"].backward(ctx, gy)

    return forward, backward


# The one table: op (registry name) -> its fused kernels. An entry applies on a backend that
# implements all of its kernels (cpu: no softmax/log_softmax forward, whose generic NumPy
# forward is a SIMD pass, no cross-entropy, which measured 0.5-0.97x, see docs/design.md; and
# no batch-major column kernels for unfold/fold, nor average or adaptive pooling kernels, whose
# CPU path is NumPy's strided views, see docs/gpu.md).
OVERRIDES: dict[str, Fused] = {
    "tanh": Fused(backward="tanh_bwd"),
    "sigmoid": Fused(backward="sigmoid_bwd"),
    "relu": Fused(backward="relu_bwd"),
    "leaky_relu": Fused(backward="leaky_relu_bwd", saves="x", params=("slope",)),
    "gelu": Fused(forward="gelu_fwd", backward="gelu_bwd", saves="x", params=("approximate",)),
    "silu": Fused(backward="silu_bwd", saved=2, saves="x"),
    "softmax": Fused(forward="softmax_fwd", backward="softmax_bwd", rows=True),
    "log_softmax": Fused(forward="log_softmax_fwd", backward="log_softmax_bwd", rows=True),
    "cross_entropy": Fused(  # only: and no weight (the adapter checks both)
        "cross_entropy_bwd", "cross_entropy_fwd", only=(("smoothing", 0.0),), adapter=_cross_entropy
    ),
    "conv": Fused(forward="depthwise2d_fwd", backward="depthwise2d_bwd", adapter=_conv),
    "conv_transpose": Fused(forward="im2col", backward="col2im", adapter=_conv_transpose),
    "unfold": Fused(forward="unfold_cols", backward="fold_cols", adapter=columns_override(Unfold)),
    "fold": Fused(forward="unfold_cols", backward="fold_cols", adapter=columns_override(Fold)),
    "max_pool": Fused(forward="max_pool_fwd", backward="max_pool_bwd", adapter=_max_pool),
    "avg_pool": Fused(forward="avg_pool_fwd", backward="avg_pool_bwd", adapter=avg_pool_override),
    "adaptive_avg_pool": Fused(
        forward="adaptive_avg_pool_fwd",
        backward="adaptive_avg_pool_bwd",
        adapter=adaptive_pool_override(AdaptiveAvgPool),
    ),
    "adaptive_max_pool": Fused(
        forward="adaptive_max_pool_fwd",
        backward="adaptive_max_pool_bwd",
        adapter=adaptive_pool_override(AdaptiveMaxPool),
    ),
    "layer_norm": Fused(
        forward="layer_norm_fwd", backward="layer_norm_bwd", adapter=layer_norm_override
    ),
    "rms_norm": Fused(forward="rms_norm_fwd", backward="rms_norm_bwd", adapter=rms_norm_override),
    "group_norm": Fused(
        forward="group_norm_fwd", backward="group_norm_bwd", adapter=group_norm_override
    ),
    "instance_norm": Fused(
        forward="group_norm_fwd", backward="group_norm_bwd", adapter=group_norm_override
    ),
    "batch_norm": Fused(
        forward="batch_norm_fwd",
        backward="batch_norm_bwd",
        only=(("training", True),),
        adapter=batch_norm_override,
    ),
    "recurrent_layer": Fused(
        forward="lstm_fwd", backward="lstm_bwd", adapter=recurrent_layer_override, paired=False
    ),
    "deform_conv2d": Fused(
        forward="deform_im2col", backward="deform_col2im", adapter=_deform_conv2d
    ),
    "interpolate": Fused(
        forward="resample_axis", backward="resample_axis", adapter=interpolate_override
    ),
    "grid_sample": Fused(
        forward="grid_sample_fwd", backward="grid_sample_bwd", adapter=grid_sample_override
    ),
}


def _holds(get, entry: Fused, ndim: int) -> bool:
    # The entry's conditions on the op's parameters (``get(name)``) for an array of ``ndim``.
    for name, value in entry.only:
        if get(name) != value:
            return False
    return not entry.rows or (ndim >= 1 and get("axis") == ndim - 1)


def _bind_forward(entry: Fused, kernel, accepts):
    keep_input = entry.saves == "x"
    names = entry.params

    def forward(ctx, x, **params):
        if not accepts((x,)) or not _holds(params.get, entry, x.ndim):
            return NotImplemented
        y = kernel(x, *[params[p] for p in names]) if names else kernel(x)
        ctx.save(x if keep_input else y)
        for name, value in params.items():
            setattr(ctx, name, value)
        return y

    return forward


def _bind_backward(entry: Fused, kernel, accepts_grad):
    k = entry.saved
    if not (entry.params or entry.only or entry.rows):
        # The common case (tanh, sigmoid, relu, silu) is kept lean: it runs once per node.
        def backward(ctx, gy):
            arrays = ctx.saved
            if len(arrays) != k:
                arrays = arrays[:k]
            if accepts_grad(gy, arrays):
                return kernel(gy, *arrays)
            return NotImplemented

        backward.kernel = kernel  # what the engine calls itself for a direct op (tanh, relu)
        return backward

    params = entry.params

    def backward_with_params(ctx, gy):
        arrays = ctx.saved[:k]
        if not accepts_grad(gy, arrays) or not _holds(
            lambda name: getattr(ctx, name, None), entry, arrays[0].ndim
        ):
            return NotImplemented
        return kernel(gy, *arrays, *[getattr(ctx, p) for p in params])

    return backward_with_params


def bind(entry: Fused, backend) -> tuple:
    """``(forward, backward)`` overrides of ``entry`` on ``backend`` (None where the backend
    lacks a kernel; both None for a paired entry unless the backend has both)."""
    have = backend.FUSED_KERNELS
    if entry.adapter is not None:
        if all(k in have for k in entry.kernels):
            return entry.adapter(backend)
        return None, None
    forward = backward = None
    if entry.forward in have:
        forward = _bind_forward(entry, getattr(backend, entry.forward), backend.accepts)
    if entry.backward in have:
        backward = _bind_backward(entry, getattr(backend, entry.backward), backend.accepts_grad)
    return forward, backward


# device ("cpu", "cuda") -> its backend modules, as installed.
_BACKENDS: dict[str, tuple] = {}


def _provider(backends: tuple, kernels: tuple):
    # The first backend module that implements every one of ``kernels``, or None.
    for backend in backends:
        if all(k in backend.FUSED_KERNELS for k in kernels):
            return backend
    return None


def install(device: str, *backends) -> None:
    """Register the kernels of ``backends`` as the ``device`` overrides of every op in the table.

    Each backend is a module with ``FUSED_KERNELS`` (the names it implements), ``accepts``,
    ``accepts_grad`` and the kernels: ``ferro._C.cpu_kernels`` and the per-family kernel
    modules of ``ferro._C`` for ``"cpu"``, ``ferro.cuda.ops`` and its siblings for ``"cuda"``.
    An entry binds to the first module that implements all of its kernels (an op family keeps
    its kernels, and the predicates they need, in one module of its own). Called by
    ``ferro/__init__.py``, once per device.
    """
    if device not in ("cpu", "cuda"):
        raise ArgumentError(f"install: device must be 'cpu' or 'cuda', got {device!r}")
    _BACKENDS[device] = backends
    for name, entry in OVERRIDES.items():
        forward = backward = None
        if entry.adapter is not None:
            backend = _provider(backends, entry.kernels)
            if backend is not None:
                forward, backward = bind(entry, backend)
        else:
            fb = _provider(backends, (entry.forward,)) if entry.forward else None
            bb = _provider(backends, (entry.backward,)) if entry.backward else None
            if fb is not None:
                forward = bind(entry, fb)[0]
            if bb is not None:
                backward = bind(entry, bb)[1]
        REGISTRY[name].set_override(
            device,
            forward,
            backward,
            paired=entry.adapter is not None and entry.paired and forward is not None,
        )


def kernel_for(name: str, arrays: tuple):
    """The fused kernel ``name`` of the backend ``arrays`` live on, if it takes them, else None.

    Through this the optimizers' fused updates follow the same switch and the same accept
    predicate as the ops' overrides: None while overrides are off, where no backend module
    implements the kernel, or where its ``accepts(arrays)`` says no (the caller runs its generic
    update then).
    """
    if not overrides_enabled():
        return None
    backend = _provider(
        _BACKENDS.get("cpu" if type(arrays[0]) is np.ndarray else "cuda", ()), (name,)
    )
    if backend is None or not backend.accepts(arrays):
        return None
    return getattr(backend, name)


@contextlib.contextmanager
def overrides(enabled: bool):
    """Fused overrides (ops and optimizer steps) on or off inside the block, restored after: the
    parity tests and the benchmarks compare the two paths with it."""
    prev = set_overrides_enabled(enabled)
    try:
        yield
    finally:
        set_overrides_enabled(prev)


__all__ = ["Fused", "OVERRIDES", "bind", "install", "kernel_for", "overrides"]
