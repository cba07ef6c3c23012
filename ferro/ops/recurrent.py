"""Recurrent ops: the fused LSTM and GRU cells (one step, one op) and a whole recurrent layer
in one direction (one op, Note [Recurrent layer]).

The cells (:func:`lstm_cell`, :func:`gru_cell`) take the input projection
(``x @ weight_ih.T + bias_ih``) and the hidden projection (``h @ weight_hh.T + bias_hh``)
separately, as PyTorch's fused cells ``_thnn_fused_lstm_cell``/``_thnn_fused_gru_cell`` do: GRU
needs them apart (``n = tanh(x_n + r * h_n)``), and for LSTM it saves the add node. They serve
``nn.LSTMCell``/``nn.GRUCell`` and :func:`reference_layer`, the per-step chain that
:func:`recurrent_layer` computes in one node and differentiates through for double backward.

Gate order is PyTorch's: ``i, f, g, o`` for LSTM, ``r, z, n`` for GRU.

Note [Cell activations]: forward computes the activated gates anyway; it keeps them on ``ctx``
(``ctx.acts``) so the first-order backward does not evaluate the sigmoids again. They are an
intermediate, not an input or output, so a backward running under ``create_graph`` (``ctx.xp`` the
differentiable namespace, ``ctx.saved`` arrays with history) ignores them and recomputes the
activations from the saved inputs, which keeps second derivatives exact.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
import types

from ferro import _intraop
from ferro.errors import ArgumentError, ShapeError
from ferro.ops.registry import apply, register


def _raw(xp) -> bool:
    # NumPy or CuPy: a first-order backward on raw arrays. Under create_graph ``ctx.xp`` is the
    # differentiable namespace (ferro.autograd.xp) and the saved arrays carry history.
    return getattr(xp, "__name__", "") in ("numpy", "cupy")


def _sigmoid(xp, x):
    # tanh form: one transcendental, and no overflow warning for large |x| in float32.
    return 0.5 * xp.tanh(0.5 * x) + 0.5


def _rows(a):
    return a.reshape(math.prod(a.shape[:-1]), a.shape[-1])  # (..., k) as (rows, k)


def _lstm_acts(xp, ig, hg):
    """The activated gates ``(i, f, g, o)`` from the two projections (differentiable math)."""
    gates = ig + hg
    n = gates.shape[-1] // 4
    i = _sigmoid(xp, gates[..., :n])
    f = _sigmoid(xp, gates[..., n : 2 * n])
    g = xp.tanh(gates[..., 2 * n : 3 * n])
    o = _sigmoid(xp, gates[..., 3 * n :])
    return i, f, g, o


@register("lstm_cell")
class LstmCell:
    @staticmethod
    def forward(ctx, input_gates, hidden_gates, cx):
        xp, x, c = ctx.xp, _rows(input_gates), _rows(cx)
        acts = xp.array(_rows(hidden_gates))  # activated in place
        tc = xp.empty(c.shape, dtype=acts.dtype)
        hy, cy = GenericCells(xp).lstm_fwd(x, acts, c, tc)
        ctx.save(input_gates, hidden_gates, cx)
        ctx.acts = (acts.reshape(input_gates.shape), tc.reshape(cx.shape))  # [Cell activations]
        return hy.reshape(cx.shape), cy.reshape(cx.shape)

    @staticmethod
    def backward(ctx, ghy, gcy):
        ig, hg, cx = ctx.saved
        xp = ctx.xp
        need_ig, need_hg, need_cx = ctx.needs_input_grad
        n = cx.shape[-1]
        if not _raw(xp):  # a differentiable backward (create_graph): no stored intermediates
            i, f, g, o = _lstm_acts(xp, ig, hg)
            tc = xp.tanh(f * cx + i * g)
        else:
            acts, tc = ctx.acts
            i, f, g, o = (acts[..., k * n : (k + 1) * n] for k in range(4))
        gc = gcy + ghy * o * (1 - tc * tc)
        gcx = gc * f if need_cx else None
        gates = None
        if need_ig or need_hg:
            gates = xp.concatenate(
                [
                    gc * g * i * (1 - i),
                    gc * cx * f * (1 - f),
                    gc * i * (1 - g * g),
                    ghy * tc * o * (1 - o),
                ],
                axis=-1,
            )
        return (gates if need_ig else None), (gates if need_hg else None), gcx


def _check_cell(name: str, input_gates, hidden_gates, state, chunks: int) -> None:
    shapes = (tuple(input_gates.shape), tuple(hidden_gates.shape), tuple(state.shape))
    ig, hg, st = shapes
    if (
        ig != hg
        or len(st) == 0
        or ig[:-1] != st[:-1]
        or ig[-1] != chunks * st[-1]
        or input_gates.ndim == 0
    ):
        what = "cx" if name == "lstm_cell" else "hx"
        raise ShapeError(
            f"{name}: input_gates {ig} and hidden_gates {hg} must both be (..., {chunks} * "
            f"hidden) for {what} of shape {st} (..., hidden)"
        )


def lstm_cell(input_gates, hidden_gates, cx):
    """One LSTM step from its gate pre-activations: ``(hy, cy)``.

    ``gates = input_gates + hidden_gates`` holds the blocks ``i, f, g, o`` (PyTorch's order) of
    width ``hidden`` each, ``input_gates`` usually ``x @ weight_ih.T + bias_ih`` and
    ``hidden_gates`` ``h @ weight_hh.T + bias_hh``; then ``cy = sigmoid(f) * cx +
    sigmoid(i) * tanh(g)`` and ``hy = sigmoid(o) * tanh(cy)``. Shapes: gates ``(..., 4 * hidden)``,
    ``cx`` ``(..., hidden)``.

    Gradient: gc = gcy + ghy * o * (1 - tanh(cy)^2), gcx = gc * f, and the gate gradients
    (gc g i(1-i), gc cx f(1-f), gc i (1-g^2), ghy tanh(cy) o(1-o)) for both gate inputs.

    Example:
        >>> h, c = ferro.lstm_cell(ferro.zeros(2, 8), ferro.zeros(2, 8), ferro.ones(2, 2))
        >>> c.tolist()
        [[0.5, 0.5], [0.5, 0.5]]
    """
    _check_cell("lstm_cell", input_gates, hidden_gates, cx, 4)
    return apply(LstmCell, input_gates, hidden_gates, cx)


def _gru_acts(xp, ig, hg):
    """The activated gates ``(r, z, n)`` from the two projections (differentiable math)."""
    k = ig.shape[-1] // 3
    r = _sigmoid(xp, ig[..., :k] + hg[..., :k])
    z = _sigmoid(xp, ig[..., k : 2 * k] + hg[..., k : 2 * k])
    n = xp.tanh(ig[..., 2 * k :] + r * hg[..., 2 * k :])
    return r, z, n


@register("gru_cell")
class GruCell:
    @staticmethod
    def forward(ctx, input_gates, hidden_gates, hx):
        xp = ctx.xp
        x, hg, h = (_rows(a) for a in (input_gates, hidden_gates, hx))
        acts, hg_n = xp.empty(x.shape, dtype=x.dtype), xp.empty(h.shape, dtype=x.dtype)
        hy = GenericCells(xp).gru_fwd(x, hg, h, acts, hg_n)
        ctx.save(input_gates, hidden_gates, hx)
        ctx.acts = acts.reshape(input_gates.shape)  # Note [Cell activations]
        return hy.reshape(hx.shape)

    @staticmethod
    def backward(ctx, ghy):
        ig, hg, hx = ctx.saved
        xp = ctx.xp
        need_ig, need_hg, need_hx = ctx.needs_input_grad
        k = hx.shape[-1]
        if not _raw(xp):
            r, z, n = _gru_acts(xp, ig, hg)
        else:
            acts = ctx.acts
            r, z, n = acts[..., :k], acts[..., k : 2 * k], acts[..., 2 * k :]
        ghx = ghy * z if need_hx else None
        gn = ghy * (1 - z) * (1 - n * n)
        gr = gn * hg[..., 2 * k :] * r * (1 - r)
        gz = ghy * (hx - n) * z * (1 - z)
        gig = xp.concatenate([gr, gz, gn], axis=-1) if need_ig else None
        ghg = xp.concatenate([gr, gz, gn * r], axis=-1) if need_hg else None
        return gig, ghg, ghx


def gru_cell(input_gates, hidden_gates, hx):
    """One GRU step from its two gate projections: ``hy``.

    ``input_gates`` (``x @ weight_ih.T + bias_ih``) and ``hidden_gates`` (``h @ weight_hh.T +
    bias_hh``) hold the blocks ``r, z, n`` (PyTorch's order) of width ``hidden`` each; then
    ``r = sigmoid(x_r + h_r)``, ``z = sigmoid(x_z + h_z)``, ``n = tanh(x_n + r * h_n)`` and
    ``hy = (1 - z) * n + z * hx``. Shapes: gates ``(..., 3 * hidden)``, ``hx`` ``(..., hidden)``.

    Gradient: ghx = ghy * z; gn = ghy (1 - z)(1 - n^2) for x_n (times r for h_n);
    gr = gn h_n r(1-r); gz = ghy (hx - n) z(1-z), for both gate inputs.

    Example:
        >>> ferro.gru_cell(ferro.zeros(1, 3), ferro.zeros(1, 3), ferro.ones(1, 1)).tolist()
        [[0.5]]
    """
    _check_cell("gru_cell", input_gates, hidden_gates, hx, 3)
    return apply(GruCell, input_gates, hidden_gates, hx)


# -- whole layers ------------------------------------------------------------------------------

# Gate blocks per hidden unit, by mode.
_CHUNKS = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _layout(sizes, steps: int, batch: int):
    """``(offsets, sizes)``: where each step's rows start in the ``(N, G)`` view of the
    projections, and how many rows it has (all ``batch`` for a padded input)."""
    if sizes is None:
        sizes = (batch,) * steps
    offsets, at = [], 0
    for b in sizes:
        offsets.append(at)
        at += b
    return offsets, list(sizes)


def reference_layer(
    input_gates, h0, c0, weight_hh, bias_hh, weight_hr, mode, sizes, reverse, *up, project=False
):
    """:func:`recurrent_layer` (``up``: the upper layers' inputs, flat, then layer 0's
    ``weight_ih, bias_ih`` with ``project``) as a chain of per-step ops (``linear`` + the fused
    cell), which its ``differentiable_backward`` and the tests differentiate; the outputs in the
    op's order."""
    from ferro.ops.linalg import linear

    outs, gates = [], input_gates
    if project:  # input_gates is layer 0's input
        *up, w_ih, b_ih = up
        gates = linear(gates.reshape(-1, gates.shape[-1]), w_ih, b_ih)
        gates = gates.reshape(*input_gates.shape[:-1], w_ih.shape[0])
    for w_ih, b_ih, mask, *layer in _groups((None, h0, c0, weight_hh, bias_hh, weight_hr, *up)):
        if w_ih is not None:
            x = out if mask is None else out * mask  # noqa: F821 - the layer below's
            gates = linear(x.reshape(-1, x.shape[-1]), w_ih, b_ih).reshape(*x.shape[:-1], -1)
        out, h, c = _reference_one(gates, *layer, mode, sizes, reverse)
        outs += [h] if c is None else [h, c]
    return (out, *outs)


def _reference_one(input_gates, h0, c0, weight_hh, bias_hh, weight_hr, mode, batch_sizes, reverse):
    from ferro.ops.activation import relu
    from ferro.ops.elementwise import tanh
    from ferro.ops.linalg import linear
    from ferro.ops.shape import cat, stack

    packed, lstm = batch_sizes is not None, mode == "LSTM"
    steps = input_gates.split(list(batch_sizes), 0) if packed else input_gates.unbind(0)
    outs, h, c = [None] * len(steps), h0, c0
    # Step t updates its batch's rows; the other rows keep their state: the final one of a
    # sequence that has ended (forward in time), the initial one of one yet to start.
    for t in reversed(range(len(steps))) if reverse else range(len(steps)):
        x, b, rows = steps[t], steps[t].shape[0], h.shape[0]
        hb = h if b == rows else h[:b]
        hg = linear(hb, weight_hh, bias_hh)
        if lstm:
            hb, cb = lstm_cell(x, hg, c if b == rows else c[:b])
            hb = linear(hb, weight_hr) if weight_hr is not None else hb
            c = cb if b == rows else cat([cb, c[b:]], 0)
        elif mode == "GRU":
            hb = gru_cell(x, hg, hb)
        else:
            hb = tanh(x + hg) if mode == "RNN_TANH" else relu(x + hg)
        outs[t] = hb
        h = hb if b == rows else cat([hb, h[b:]], 0)
    return (cat if packed else stack)(outs, 0), h, c


def _layer_backward_ops(ctx, *grads):
    """RecurrentLayer's gradients from public ops (Tensors in, Tensors out), for double
    backward: differentiate :func:`reference_layer` recomputed from the saved inputs."""
    from ferro.autograd import enable_grad, grad

    inputs = list(ctx.saved)
    wanted = [k for k, t in enumerate(inputs) if t is not None and ctx.needs_input_grad[k]]
    for k in wanted:
        if not inputs[k].requires_grad:
            inputs[k] = inputs[k].detach().requires_grad_(True)
    with enable_grad():
        outs = reference_layer(
            *inputs[:6], ctx.mode, ctx.sizes, ctx.reverse, *inputs[6:], project=ctx.project
        )
    pairs = [(o, g) for o, g in zip(outs, grads, strict=False) if o is not None]
    got = grad(
        [o for o, _ in pairs],
        [inputs[k] for k in wanted],
        [g for _, g in pairs],
        allow_unused=True,
        create_graph=True,
    )
    result = [None] * len(inputs)
    for k, g in zip(wanted, got, strict=True):
        result[k] = g
    return tuple(result)


class GenericCells:
    """The per-step LSTM and GRU cell math against ``xp``, writing the arrays the backward reads
    into the layer's buffers. A backend's fused kernels (``ferro._C.recurrent_kernels``,
    bound by the ``recurrent_layer`` entry of ``OVERRIDES``) have the same names and
    signatures; every array they get is C-contiguous."""

    def __init__(self, xp):
        self.xp = xp
        self._lstm_consts = None

    def lstm_fwd(self, x, acts, c, tc):
        """``(h, c_new)`` of one step from the input projection ``x`` (both biases in it) and
        ``acts``, which holds ``h @ weight_hh.T`` and is overwritten with the activated gates;
        writes ``tanh(c_new)`` into ``tc``."""
        xp = self.xp
        hidden = c.shape[1]
        # sigmoid(x) = tanh(x / 2) / 2 + 1/2 on i, f, o and tanh on g: one tanh pass over all,
        # between a multiply by ``half`` (1/2 on i, f, o, 1 on g) and an add of ``shift``.
        consts = self._lstm_consts  # read once: a stack's layers may share this object
        if consts is None or consts[0].shape[0] != 4 * hidden or consts[0].dtype != acts.dtype:
            half = xp.full((4 * hidden,), 0.5, dtype=acts.dtype)
            half[2 * hidden : 3 * hidden] = 1
            consts = self._lstm_consts = (half, 1 - half)
        half, shift = consts
        acts += x
        acts *= half
        xp.tanh(acts, out=acts)
        acts *= half
        acts += shift
        i, f = acts[:, :hidden], acts[:, hidden : 2 * hidden]
        g, o = acts[:, 2 * hidden : 3 * hidden], acts[:, 3 * hidden :]
        c_new = f * c
        c_new += i * g
        xp.tanh(c_new, out=tc)
        return o * tc, c_new

    def lstm_bwd(self, gh, gc, acts, c_prev, tc, g_gates):
        """The gradient for the previous cell state; writes the gate gradients."""
        hidden = gh.shape[1]
        i, f = acts[:, :hidden], acts[:, hidden : 2 * hidden]
        g, o = acts[:, 2 * hidden : 3 * hidden], acts[:, 3 * hidden :]
        gc = gc + gh * o * (1 - tc * tc)
        g_gates[:, :hidden] = gc * g * i * (1 - i)
        g_gates[:, hidden : 2 * hidden] = gc * c_prev * f * (1 - f)
        g_gates[:, 2 * hidden : 3 * hidden] = gc * i * (1 - g * g)
        g_gates[:, 3 * hidden :] = gh * tc * o * (1 - o)
        return gc * f

    def gru_fwd(self, x, hg, h, acts, hg_n):
        """The new hidden state of one step from the input projection ``x`` (with
        ``bias_ih``) and the hidden one ``hg`` (with ``bias_hh``); writes ``r, z, n`` into
        ``acts`` and ``hg``'s n block (what the backward reads) into ``hg_n``."""
        xp = self.xp
        hidden = h.shape[1]
        k2 = 2 * hidden
        hg_n[...] = hg[:, k2:]
        rz = acts[:, :k2]
        xp.add(x[:, :k2], hg[:, :k2], out=rz)
        rz *= 0.5
        xp.tanh(rz, out=rz)
        rz *= 0.5
        rz += 0.5
        r, z, n = acts[:, :hidden], acts[:, hidden:k2], acts[:, k2:]
        xp.tanh(x[:, k2:] + r * hg_n, out=n)
        h_new = h - n
        h_new *= z
        h_new += n
        return h_new

    def gru_bwd(self, gh, acts, hg_n, h_prev, g_in, g_hid):
        """``gh * z``, the direct part of the previous state's gradient; writes the gradients of
        the input and hidden gate projections."""
        hidden = gh.shape[1]
        k2 = 2 * hidden
        r, z, n = acts[:, :hidden], acts[:, hidden:k2], acts[:, k2:]
        gn = gh * (1 - z) * (1 - n * n)
        g_in[:, :hidden] = gn * hg_n * r * (1 - r)
        g_in[:, hidden:k2] = gh * (h_prev - n) * z * (1 - z)
        g_in[:, k2:] = gn
        g_hid[:, :k2] = g_in[:, :k2]
        g_hid[:, k2:] = gn * r
        return gh * z


def layer_forward(ctx, cells, xg, h0, c0, w_hh, b_hh, w_hr, *, mode, sizes, reverse, wave):
    """One layer's forward with the cell math of ``cells`` (:class:`GenericCells` or a
    backend's kernels); ``wave`` (:class:`_Wave`) may fill ``xg`` a block of steps at a time."""
    xp = ctx.xp
    lstm, gru = mode == "LSTM", mode == "GRU"
    batch, hout = h0.shape
    gates = w_hh.shape[0]
    hidden = gates // _CHUNKS[mode]
    steps = len(sizes) if sizes is not None else xg.shape[0]
    offsets, bs = _layout(sizes, steps, batch)
    x2 = xg.reshape(-1, gates)
    n, dt = x2.shape[0], xg.dtype
    w_t = xp.ascontiguousarray(w_hh.T)  # h @ w_t: OpenBLAS is 2x faster than h @ w_hh.T
    out = wave.out = xp.empty((n, hout), dtype=dt)
    h_prev = xp.empty((n, hout), dtype=dt)
    acts = xp.empty((n, gates), dtype=dt)
    c_prev = tc_all = cell_h = hg_n = None
    if lstm:
        c_prev = xp.empty((n, hidden), dtype=dt)
        tc_all = xp.empty((n, hidden), dtype=dt)
        if w_hr is not None:
            cell_h = xp.empty((n, hidden), dtype=dt)
    if gru:
        hg_n = xp.empty((n, hidden), dtype=dt)
    # Step t updates its batch's rows of the states; the other rows keep theirs: the final
    # state of a sequence that has ended (forward in time), the initial one of one yet to start.
    h, c = xp.array(h0), (xp.array(c0) if lstm else None)
    loop = _step_loop(cells, mode, batch, hout, hidden)
    if loop is not None:  # Note [Compiled step loop]
        xb = xp.empty_like(x2) if lstm and b_hh is not None else x2  # x + b_hh, once a row
        b2 = None if b_hh is None or not gru else xp.ascontiguousarray(b_hh).reshape(1, -1)
        w_p = None if w_hr is None else xp.ascontiguousarray(w_hr)
        table = [xp.asarray(a, dtype=xp.intp) for a in (offsets, bs)]
        chunks = wave.front.chunks if lstm and w_hr is None else 1  # Note [Hidden-unit split]
        if chunks > 1:
            w_t = xp.ascontiguousarray(w_hh[list(_unit_order(hidden, chunks))].T)
        for first, count, d in _blocks(wave.front.block, steps, reverse):
            wave.before(first)
            if xb is not x2:
                lo, hi = _span(offsets, bs, first, count, d)
                xp.add(x2[lo:hi], b_hh, out=xb[lo:hi])
            loop.layer_fwd(
                gru, xb, h, c, w_t, b2, w_p, out,
                h_prev, acts, c_prev, tc_all, cell_h, hg_n, *table, first, count, d, chunks,
                _intraop.parts(chunks),
            )  # fmt: skip
            wave.after(first + (count - 1) * d)
    for t in () if loop is not None else range(steps - 1, -1, -1) if reverse else range(steps):
        s, b = offsets[t], bs[t]
        wave.before(t)
        hb, a, x = h[:b], acts[s : s + b], x2[s : s + b]
        h_prev[s : s + b] = hb
        if gru:
            hg = hb @ w_t
            if b_hh is not None:
                hg += b_hh
            hb = cells.gru_fwd(x, hg, hb, a, hg_n[s : s + b])
        else:
            xp.matmul(hb, w_t, out=a)  # the hidden projection, in place
            # bias_hh is outside the nonlinearity here (GRU's n block has it inside r * (...))
            x = x if b_hh is None else x + b_hh
            if lstm:
                c_prev[s : s + b] = c[:b]
                hb, c[:b] = cells.lstm_fwd(x, a, c[:b], tc_all[s : s + b])
                if w_hr is not None:
                    cell_h[s : s + b] = hb
                    hb = hb @ w_hr.T
            else:
                a += x
                hb = xp.tanh(a, out=a) if mode == "RNN_TANH" else xp.maximum(a, 0, out=a)
        out[s : s + b] = h[:b] = hb
        wave.after(t)
    ctx.saved = (xg, h0, c0, w_hh, b_hh, w_hr)  # ctx: one layer's namespace (stack_forward)
    ctx.mode, ctx.sizes, ctx.reverse = mode, sizes, reverse
    ctx.fast = (h_prev, acts, c_prev, tc_all, cell_h, hg_n)  # Note [Cell activations]
    out = out if sizes is not None else out.reshape(steps, batch, hout)
    return (out, h, c) if lstm else (out, h)


def layer_backward(ctx, cells, gout, gh_n, gc_n=None, *, wave):
    """One layer's backward with the cell math of ``cells``; ``wave`` may fill ``gout`` a block
    at a time, walking back."""
    xg, h0, c0, w_hh, b_hh, w_hr = ctx.saved
    h_prev, acts, c_prev, tc_all, cell_h, hg_n = ctx.fast
    xp = ctx.xp
    mode, sizes, reverse = ctx.mode, ctx.sizes, ctx.reverse
    lstm, gru = mode == "LSTM", mode == "GRU"
    batch, hout = h0.shape
    gates = w_hh.shape[0]
    steps = len(sizes) if sizes is not None else xg.shape[0]
    offsets, bs = _layout(sizes, steps, batch)
    n, dt = acts.shape[0], acts.dtype
    g_out = gout.reshape(n, hout)
    g_in = wave.out = xp.empty((n, gates), dtype=dt)  # d/d input_gates
    g_hid = xp.empty((n, gates), dtype=dt) if gru else g_in  # d/d hidden_gates
    g_hr = xp.empty((n, hout), dtype=dt) if cell_h is not None else None
    # As in the forward, the rows of the sequences a step does not have keep their gradients.
    gh, gc = xp.array(gh_n, dtype=dt), (xp.array(gc_n, dtype=dt) if lstm else None)
    loop = _step_loop(cells, mode, batch, hout, gates // _CHUNKS[mode])
    if loop is not None:  # Note [Compiled step loop]
        go, w, w_p = (None if a is None else xp.ascontiguousarray(a) for a in (g_out, w_hh, w_hr))
        table = [xp.asarray(a, dtype=xp.intp) for a in (offsets, bs)]
        chunks = wave.front.chunks if lstm and w_hr is None else 1  # Note [Hidden-unit split]
        for first, count, d in _blocks(wave.front.block, steps, not reverse):
            wave.before(first)
            loop.layer_bwd(
                gru, go, gh, gc, w, w_p, h_prev, acts, c_prev, tc_all, hg_n, g_in,
                g_hid if gru else None, g_hr, *table, first, count, d, chunks,
                _intraop.parts(chunks),
            )  # fmt: skip
            wave.after(first + (count - 1) * d)
    for t in () if loop is not None else range(steps) if reverse else range(steps - 1, -1, -1):
        s, b = offsets[t], bs[t]
        wave.before(t)
        ghb = gh[:b] + g_out[s : s + b]
        a, gi = acts[s : s + b], g_in[s : s + b]
        if lstm:
            if g_hr is not None:
                g_hr[s : s + b] = ghb
                ghb = ghb @ w_hr
            gc[:b] = cells.lstm_bwd(ghb, gc[:b], a, c_prev[s : s + b], tc_all[s : s + b], gi)
            gh[:b] = gi @ w_hh
        elif gru:
            gg = g_hid[s : s + b]
            gh[:b] = cells.gru_bwd(ghb, a, hg_n[s : s + b], h_prev[s : s + b], gi, gg)
            gh[:b] += gg @ w_hh
        else:
            xp.multiply(ghb, 1 - a * a if mode == "RNN_TANH" else a > 0, out=gi)
            gh[:b] = gi @ w_hh
        wave.after(t)
    need = ctx.needs_input_grad
    # every step's weight gradient: one GEMM
    g_w = _mm(xp, g_hid.T, h_prev, wave.front.chunks) if need[3] else None
    g_b = g_hid.sum(axis=0) if b_hh is not None and need[4] else None
    g_whr = g_hr.T @ cell_h if g_hr is not None and need[5] else None
    g_x = g_in.reshape(xg.shape) if need[0] else None
    return g_x, gh if need[1] else None, gc if lstm and need[2] else None, g_w, g_b, g_whr


# Note [Compiled step loop]: a backend with ``layer_fwd``/``layer_bwd`` (ferro._C.
# recurrent_kernels) runs a LSTM or GRU layer's steps in one nogil call per block (the whole
# sequence serially): each step's GEMMs through the CBLAS of NumPy's own OpenBLAS (found with
# ctypes, _find_blas), called as NumPy's matmul calls it for the same operands, and the cell
# kernels, with no Python per step. LSTM's ``bias_hh`` is added to the input projection once a
# row (the same float adds as per step). The results equal the Python loop's bit for bit
# (tests/nn/test_rnn.py). Where no CBLAS symbol is found, or with ``_C_LOOP = False``, the
# Python loop below runs.
_C_LOOP = True


def _find_blas(backend) -> bool:
    """Give ``backend`` (``set_blas``) the CBLAS gemm and gemv of the OpenBLAS NumPy uses, if
    it has them (``ferro._intraop.cblas``)."""
    found = _intraop.cblas("sgemm", "dgemm", "sgemv", "dgemv")
    if found is not None:
        backend.set_blas(*found[0], found[1])
    return found is not None


def _step_loop(cells, mode, batch, hout, hidden):
    """``cells`` if its compiled step loop serves this layer, else None (the Python loop)."""
    ok = _C_LOOP and mode in ("LSTM", "GRU") and min(batch, hout - 1, hidden - 1) > 0
    return cells if ok and hasattr(cells, "layer_fwd") and cells.have_blas() else None


def _blocks(block, steps, down):
    """``(first, count, direction)`` of each block of ``block`` steps, walking up or down."""
    starts = range(0, steps, max(block, 1))
    if not down:
        return [(t, min(block, steps - t), 1) for t in starts]
    return [(min(t + block, steps) - 1, min(block, steps - t), -1) for t in reversed(starts)]


def _span(offsets, bs, first, count, d):
    lo, hi = sorted((first, first + (count - 1) * d))
    return offsets[lo], offsets[hi] + bs[hi]


def _groups(inputs):
    """Each layer's ``(w_ih, b_ih, mask, h0, c0, w_hh, b_hh, w_hr)`` from RecurrentLayer's
    inputs: item k of layer l is input ``8 * l - 2 + k`` (layer 0 has no first three)."""
    return [(None, None, None, *inputs[1:6])] + [
        inputs[k : k + 8] for k in range(6, len(inputs), 8)
    ]


# Note [Hidden-unit split]: on two cores a LSTM layer's steps split by hidden units inside the
# compiled step loop (recurrent_kernels.h): thread c computes the gate columns of ITS units, a
# (B, H_out) @ (H_out, 4 H / 2) GEMM against a copy of weight_hh.T with those columns together
# (_unit_order), and the cell of those units, then waits at one barrier a step (the next step's
# GEMM reads all of h); backward, the gate gradients of its units, a barrier, and the columns of
# its units of gates_grad @ weight_hh. The big GEMMs of the pass (the upper layers' input
# projections, the gradients through weight_ih, the weight gradients) run in row blocks on the
# same number of threads (_mm). OpenBLAS runs one thread a call throughout (its worker never
# wakes, so never spins on the second core: docs/rnn.md). The chunks are fixed by the sizes
# (_UNIT_CHUNKS from _UNIT_SPLIT_WORK multiply-adds a step), not by the thread count, so one
# thread runs the same GEMMs one after another and the results do not depend on the threads; a
# chunk's GEMM may round differently from the whole one (OpenBLAS takes other kernels for other
# widths), so split and unsplit layers agree to rounding.
_UNIT_CHUNKS = 2
# Off (inf) by default; 1 << 20 (multiply-adds a step: the word-LM LSTM has 3.2 million) turns
# it on. Alone it gains ~4% (session 11, separate processes at real-time priority, min of 25:
# 20.8-21.3 ms split against 21.7-22.2 unsplit), but in a training step whose other GEMMs run
# on OpenBLAS's two threads (the word-LM model: embedding, this LSTM, a 10000-word decoder,
# cross-entropy, SGD) it loses: 126-140 ms a step against 112-113 (nice -10; 130 against 104
# at real-time priority). After such a GEMM OpenBLAS's worker spins ~80 ms on a core, and the
# split's two threads, a barrier a step, share the other one; with OPENBLAS_THREAD_TIMEOUT=4
# the split won there (102.8 against 105.9 ms). A split holds OpenBLAS's process-wide count at
# one thread, whose bits differ from two threads' for some products, so in a parallel
# backward walk the node runs alone (ctx._alone, Note [Nodes that run alone] in
# ferro/_intraop.py): serial and parallel walks stay bit-equal with it on.
_UNIT_SPLIT_WORK = float("inf")


@functools.lru_cache(maxsize=16)
def _unit_order(hidden, chunks):
    """The gate columns (blocks i, f, g, o of ``hidden``) in chunk order: each chunk's units'
    four blocks together, as recurrent_kernels.h's ferro_unit bounds them."""
    bounds = [hidden * c // chunks for c in range(chunks + 1)]
    return tuple(k * hidden + u for c in range(chunks) for k in range(4)
                 for u in range(bounds[c], bounds[c + 1]))  # fmt: skip


def _mm(xp, a, b, chunks, out=None):
    """``a @ b`` (into ``out``) in ``chunks`` blocks of rows, on up to as many threads."""
    if chunks == 1:
        return xp.matmul(a, b, out=out)
    out = xp.empty((a.shape[0], b.shape[1]), dtype=a.dtype) if out is None else out
    rows = [a.shape[0] * c // chunks for c in range(chunks + 1)]
    n = _intraop.parts(chunks)

    def part(p):
        for c in range(p, chunks, n):
            xp.matmul(a[rows[c] : rows[c + 1]], b, out=out[rows[c] : rows[c + 1]])

    _intraop.run(part, n)
    return out


def _bias_grad(mode, g_in, g_bias_hh):
    """bias_ih's gradient, g_in's row sum: a LSTM's bias_hh's, copied (leaves share no array)."""
    return g_bias_hh.copy() if mode == "LSTM" and g_bias_hh is not None else g_in.sum(axis=0)


def _held(front):  # OpenBLAS at one thread for a split pass (Note [Hidden-unit split])
    return _intraop.one_blas_thread() if front.threads > 1 else contextlib.nullcontext()


_BLOCK = 4  # steps per block of a stack's wavefront (Note [Recurrent stack])
# Multiply-adds of a step's GEMM from which the layers run as a two-thread wavefront: off (inf).
# On the quiet 2-core machine it made the word-LM LSTM step slower, 33 ms against 22 in series
# (session 8). The cause (session 9, docs/rnn.md): OpenBLAS's worker, which a split holds
# idle, spins on a core; shut down inside the split it gains (21.3 against 22.1 ms, min), but
# that is not safe beside another thread's GEMM. Kept, tested, and measured by bench_rnn's
# "wavefront" case; 1 << 18 turns it on.
_SPLIT_WORK = float("inf")


class _Front:
    """One pass's handoffs, an event per (layer, block): a layer sets its block's event once
    done with it, the layer that reads it waits. A failing layer sets every event, and every
    waiter then raises its error, so no thread waits forever and the first error is raised."""

    def __init__(self, xp, groups, sizes, steps, mode):
        layers, batch = len(groups), groups[0][3].shape[0]
        offsets, bs = _layout(sizes, steps, batch)
        # Split where a step's GEMM (batch * w_hh.size multiply-adds) outweighs a handoff;
        # serially one block: an upper layer's input projection is one GEMM, as layer by layer.
        split = xp.__name__ == "numpy" and batch * groups[0][5].size >= _SPLIT_WORK
        self.parts = _intraop.parts(layers) if split else 1
        self.steps, self.block = steps, _BLOCK if self.parts > 1 else max(steps, 1)
        # Note [Hidden-unit split]: a LSTM's steps in chunks of hidden units, its GEMMs in
        # blocks of rows, on up to as many threads, OpenBLAS at one thread meanwhile.
        big = xp.__name__ == "numpy" and batch * groups[0][5].size >= _UNIT_SPLIT_WORK
        self.chunks = _UNIT_CHUNKS if big and mode == "LSTM" else 1
        self.threads = _intraop.parts(self.chunks) if self.chunks > 1 else 1
        self.bounds = [offsets[j] for j in range(0, steps, self.block)] + [sum(bs)]
        blocks = len(self.bounds) - 1
        self.events = [[threading.Event() for _ in range(blocks)] for _ in range(layers)]
        self.error = None

    def wait(self, layer, j):
        self.events[layer][j].wait()
        if self.error is not None:
            raise self.error

    def run(self, fn):
        try:
            fn()
        except BaseException as exc:
            self.error = self.error or exc
            [e.set() for events in self.events for e in events]
            raise


class _Wave:
    """One layer's ``wave`` in a pass (:func:`layer_forward`, :func:`layer_backward`): before
    the first step of a block (walking the pass's way) it waits for layer ``source``'s block
    and ``fill(rows)`` writes the block's input rows; after the block's last step
    ``publish(rows)`` (if any) writes the rows another layer reads and it sets the block's
    event. ``out`` is what the layer publishes (its output, or its gate gradients)."""

    def __init__(self, front, layer, source=None, fill=None, backward=False):
        self.front, self.layer, self.source = front, layer, source
        self.fill, self.backward, self.publish = fill, backward, None

    def _starts(self, t):
        if self.backward:
            return t == self.front.steps - 1 or (t + 1) % self.front.block == 0
        return t % self.front.block == 0

    def before(self, t):
        if self.source is not None and self._starts(t):
            self.front.wait(self.source, j := t // self.front.block)
            if self.fill is not None:
                self.fill(j, slice(self.front.bounds[j], self.front.bounds[j + 1]))

    def after(self, t):
        k = self.front.block
        if t % k == 0 if self.backward else (self._starts(t + 1) or t + 1 == self.front.steps):
            if self.publish is not None:
                j = t // k
                self.publish(j, slice(self.front.bounds[j], self.front.bounds[j + 1]))
            self.front.events[self.layer][t // k].set()


def _split(front, work, layers, backward):
    """``work(l)`` for every layer: in order, or in contiguous groups on two threads (Note
    [Intra-op split]) that follow each other a block behind. Part 0 takes the group the others
    wait on (the bottom forward, the top backward), so a part that runs late on the caller's
    thread never waits for a later one."""
    n = front.parts
    groups = [range(p * layers // n, (p + 1) * layers // n) for p in range(n)]
    if backward:
        groups = [reversed(g) for g in reversed(groups)]
    _intraop.run(lambda p: [front.run(lambda lay=lay: work(lay)) for lay in groups[p]], n)


def stack_forward(ctx, cells, *inputs, mode, sizes, reverse, project=False):
    """RecurrentLayer's forward with the cell math of ``cells`` (:class:`GenericCells` or a
    backend's kernels): each layer's :func:`layer_forward`, an upper layer a block behind;
    with ``project`` layer 0's input projection first (its weights the last two inputs)."""
    xp, xg = ctx.xp, inputs[0]
    groups = _groups(inputs[:-2] if project else inputs)
    steps = len(sizes) if sizes is not None else xg.shape[0]
    front = _Front(xp, groups, sizes, steps, mode)
    if project:
        w_ih, b_ih = inputs[-2:]
        with _held(front):
            xg = _mm(xp, xg.reshape(-1, xg.shape[-1]), w_ih.T, front.chunks)
        if b_ih is not None:
            xg += b_ih
        xg = xg.reshape(*inputs[0].shape[:-1], w_ih.shape[0])
    layers, dt = len(groups), xg.dtype
    subs = [types.SimpleNamespace(xp=xp) for _ in groups]
    xgs = [xg] + [xp.empty((*xg.shape[:-1], g[5].shape[0]), dtype=dt) for g in groups[1:]]
    layer_in = [None] * layers  # an upper layer's input: the output below (times the mask)
    waves, results = [_Wave(front, 0)], [None] * layers

    def filler(layer):  # (out_below * mask) @ w_ih.T + b_ih, a block of rows at a time
        w_ih, b_ih, mask = groups[layer][:3]
        below, x2, w_t = waves[layer - 1], xgs[layer].reshape(-1, w_ih.shape[0]), w_ih.T
        if mask is not None:
            mask = mask.reshape(x2.shape[0], -1)
            layer_in[layer] = xp.empty(mask.shape, dtype=dt)

        def fill(rows):
            x = below.out[rows]
            if mask is not None:
                x = xp.multiply(x, mask[rows], out=layer_in[layer][rows])
            _mm(xp, x, w_t, front.chunks, out=x2[rows])
            if b_ih is not None:
                x2[rows] += b_ih

        return fill

    for layer in range(1, layers):  # even blocks projected by the layer below, odd ones by
        waves.append(_Wave(front, layer, layer - 1))  # the layer above: a balanced load
        fill = filler(layer)
        waves[layer - 1].publish = lambda j, rows, fill=fill: j % 2 or fill(rows)
        waves[layer].fill = lambda j, rows, fill=fill: j % 2 and fill(rows)

    def work(layer):
        h0, c0, w_hh, b_hh, w_hr = groups[layer][3:]
        results[layer] = layer_forward(
            subs[layer], cells, xgs[layer], h0, c0, w_hh, b_hh, w_hr,
            mode=mode, sizes=sizes, reverse=reverse, wave=waves[layer],
        )  # fmt: skip

    with _held(front):
        _split(front, work, layers, backward=False)
    layer_in[1:] = [waves[k].out if a is None else a for k, a in enumerate(layer_in[1:])]
    ctx.save(*inputs)
    ctx.mode, ctx.sizes, ctx.reverse, ctx.project = mode, sizes, reverse, project
    ctx.layers = (subs, layer_in)  # Note [Cell activations]
    # A backward that splits holds OpenBLAS's count: alone in a parallel walk (ferro._intraop).
    ctx._alone = front.chunks > 1 or front.parts > 1
    return (results[-1][0], *(a for r in results for a in r[1:]))


def stack_backward(ctx, cells, gout, *g_states):
    """RecurrentLayer's backward with the cell math of ``cells``: each layer's
    :func:`layer_backward`, the one below a block behind on its output's gradient
    (``gates_grad @ w_ih`` of the layer above, times the mask)."""
    xp, inputs, need, project = ctx.xp, ctx.saved, ctx.needs_input_grad, ctx.project
    groups = _groups(inputs[:-2] if project else inputs)
    subs, layer_in = ctx.layers
    layers, per = len(groups), 2 if ctx.mode == "LSTM" else 1
    steps = len(ctx.sizes) if ctx.sizes is not None else inputs[0].shape[0]
    front = _Front(xp, groups, ctx.sizes, steps, ctx.mode)
    n = subs[0].fast[0].shape[0]
    gouts = [xp.empty((n, g[3].shape[1]), dtype=gout.dtype) for g in groups[1:]] + [gout]
    waves = [_Wave(front, layer, backward=True) for layer in range(layers)]
    grads = [None] * len(inputs)

    def filler(layer):  # (gates_grad_above @ w_ih_above) * mask_above
        w_ih, _, mask = groups[layer + 1][:3]
        above, g = waves[layer + 1], gouts[layer]
        mask = None if mask is None else mask.reshape(n, -1)

        def fill(rows):
            _mm(xp, above.out[rows], w_ih, front.chunks, out=g[rows])
            if mask is not None:
                g[rows] *= mask[rows]

        return fill

    for layer in range(layers - 1):
        fill = filler(layer)
        waves[layer].source, waves[layer].fill = layer + 1, lambda j, rows, fill=fill: fill(rows)

    def work(layer):
        k = 8 * layer - 2  # where the layer's inputs start (_groups)
        subs[layer].needs_input_grad = (layer > 0 or need[0] or project, *need[k + 3 : k + 8])
        states = g_states[per * layer : per * layer + per]
        got = layer_backward(subs[layer], cells, gouts[layer], *states, wave=waves[layer])
        grads[k + 3 : k + 8] = got[1:]
        if layer == 0:
            grads[0] = got[0]
        else:  # the input weights: one GEMM over all steps
            g_in = waves[layer].out
            grads[k] = _mm(xp, g_in.T, layer_in[layer], front.chunks) if need[k] else None
            grads[k + 1] = _bias_grad(ctx.mode, g_in, grads[k + 6]) if need[k + 1] else None

    with _held(front):
        _split(front, work, layers, backward=True)
        if project:  # layer 0's input projection
            x, (w_ih, b_ih), g_in = inputs[0], inputs[-2:], waves[0].out
            grads[0] = _mm(xp, g_in, w_ih, front.chunks).reshape(x.shape) if need[0] else None
            grads[-2] = _mm(xp, g_in.T, x.reshape(n, -1), front.chunks) if need[-2] else None
            grads[-1] = (
                _bias_grad(ctx.mode, g_in, grads[4]) if b_ih is not None and need[-1] else None
            )
    return tuple(grads)


@register("recurrent_layer")
class RecurrentLayer:
    """Note [Recurrent layer]: a whole layer and direction in one node. Per step the forward
    does one GEMM (``h @ weight_hh.T``) and the cell; the backward walks the steps back with
    one GEMM each (``gates_grad @ weight_hh``) and writes every step's gate gradient into one
    ``(N, G)`` array, so the weight gradients are ONE GEMM over all steps
    (``gates_grad.T @ h_prev``) instead of one small GEMM per step (measured 6x slower per
    FLOP at batch 20 with OpenBLAS) plus an accumulation each. The per-step arrays the
    backward reads (previous states, activations) are kept on ``ctx`` (Note [Cell
    activations]); ``differentiable_backward`` differentiates :func:`reference_layer`.
    Note [Recurrent stack] (docs/rnn.md): unidirectional stacked layers are one node too,
    the layers a block of steps apart on two cores (:func:`_split`)."""

    @staticmethod
    def forward(ctx, *inputs, mode, sizes, reverse, project=False):
        cells = GenericCells(ctx.xp)
        return stack_forward(
            ctx, cells, *inputs, mode=mode, sizes=sizes, reverse=reverse, project=project
        )

    @staticmethod
    def backward(ctx, *grads):
        return stack_backward(ctx, GenericCells(ctx.xp), *grads)

    differentiable_backward = staticmethod(_layer_backward_ops)


def recurrent_layer(
    input_gates,
    h0,
    c0,
    weight_hh,
    bias_hh,
    weight_hr,
    mode: str,
    batch_sizes=None,
    reverse: bool = False,
    upper=(),
    input_weights=None,
):
    """One recurrent layer in one direction over a whole sequence, from its input projections:
    ``(output, h_n, c_n)`` for ``mode="LSTM"``, ``(output, h_n)`` for ``"GRU"``,
    ``"RNN_TANH"``, ``"RNN_RELU"``.

    ``input_gates`` is ``x @ weight_ih.T + bias_ih`` for every step, ``(T, B, G)``, or ``(N, G)``
    for a packed sequence with ``batch_sizes`` (a list of ints, nonincreasing); ``h0`` ``(B,
    H_out)``, ``c0`` ``(B, H)`` (LSTM, else None); ``weight_hh`` ``(G, H_out)``; ``bias_hh``
    ``(G,)`` or None; ``weight_hr`` ``(H_out, H)`` for an LSTM with a projection, else None.
    ``reverse`` runs from the last step to the first. Each step is PyTorch's cell (gate order
    ``i, f, g, o`` / ``r, z, n``); with ``batch_sizes`` each sequence's final state is the one at
    its own last step.

    ``upper`` stacks more layers (not with ``reverse``), each ``(weight_ih, bias_ih, mask, h0,
    c0, weight_hh, bias_hh, weight_hr)``: its input gates are ``(output_below * mask) @
    weight_ih.T + bias_ih`` (``mask``, say dropout's, and ``bias_ih`` may be None; the mask is
    not differentiated); ``output`` is then the top layer's, followed by every layer's states
    (``h_n, c_n`` or ``h_n``). With two threads (``ferro._intraop``) the layers run a few
    steps apart. ``input_weights``: layer 0's ``(weight_ih, bias_ih)`` (``bias_ih`` may be
    None), and ``input_gates`` is then layer 0's input, ``(T, B, I)`` or ``(N, I)``, projected
    in the node (which then holds every GEMM of the layers: Note [Hidden-unit split]).

    Gradient: back through the steps, each step's as in ``lstm_cell``/``gru_cell``; the weight
    gradients are one GEMM over all steps (gweight_hh = sum_t ggates_t^T h_{t-1}); below an
    upper layer, goutput = (ggates @ weight_ih) * mask.

    Example:
        >>> out, h = ferro.recurrent_layer(
        ...     ferro.zeros(3, 1, 2), ferro.zeros(1, 2), None, ferro.zeros(2, 2), None, None,
        ...     "RNN_TANH")
        >>> out.shape, h.shape
        (ferro.Size([3, 1, 2]), ferro.Size([1, 2]))
    """
    if mode not in _CHUNKS:
        raise ArgumentError(f"recurrent_layer: mode must be one of {sorted(_CHUNKS)}, got {mode!r}")
    upper = [tuple(g) for g in upper]
    sizes = None if batch_sizes is None else tuple(int(b) for b in batch_sizes)
    if sizes is not None and (min(sizes, default=1) <= 0 or list(sizes) != sorted(sizes)[::-1]):
        raise ArgumentError(
            f"recurrent_layer: batch_sizes must be positive, nonincreasing: {sizes}"
        )
    if any(len(g) != 8 for g in upper) or (upper and reverse):
        raise ArgumentError("recurrent_layer: each upper layer is 8 arrays, and not reversed")
    flat = (input_gates, h0, c0, weight_hh, bias_hh, weight_hr, *(a for g in upper for a in g))
    project = input_weights is not None
    if project and (not isinstance(input_weights, (tuple, list)) or len(input_weights) != 2):
        raise ArgumentError("recurrent_layer: input_weights is (weight_ih, bias_ih)")
    lstm, chunks = mode == "LSTM", _CHUNKS[mode]
    shape = lambda a: None if a is None else tuple(a.shape)  # noqa: E731
    rows = (sum(sizes),) if sizes is not None else tuple(input_gates.shape[:-1])[:2]
    below = input_gates.shape[-1] if project and input_gates.ndim else None
    for layer, (w_ih, b_ih, mask, h, c, w_hh, b_hh, w_hr) in enumerate(_groups(flat)):
        if layer == 0 and project:
            w_ih, b_ih = input_weights
        g, hout = shape(w_hh) if w_hh is not None and w_hh.ndim == 2 else (0, 0)
        hidden, batch = g // chunks, rows[-1] if sizes is None else (sizes or (0,))[0]
        ok = g % chunks == 0 and shape(h) == (batch, hout) and shape(b_hh) in (None, (g,))
        ok = ok and shape(c) == ((batch, hidden) if lstm else None)
        want_hr = (hout, hidden) if lstm else None  # no projection: H_out == H
        ok = ok and (shape(w_hr) == want_hr if w_hr is not None else not lstm or hout == hidden)
        if layer == 0:
            want = (*rows, below if project else g)
            ok = ok and shape(input_gates) == want and len(rows) == (1 if sizes else 2)
        if layer or project:
            ok = ok and shape(w_ih) == (g, below) and shape(b_ih) in (None, (g,))
            ok = ok and shape(mask) in (None, (*rows, below))
        if not ok:
            names = "weight_ih bias_ih mask h0 c0 weight_hh bias_hh weight_hr".split()
            got = zip(names, (w_ih, b_ih, mask, h, c, w_hh, b_hh, w_hr), strict=True)
            raise ShapeError(
                f"recurrent_layer ({mode}): layer {layer}'s shapes do not fit: input_gates "
                f"{shape(input_gates)}, {', '.join(f'{k} {shape(a)}' for k, a in got)} (expected "
                f"input_gates (T, B, G) or (sum(batch_sizes), G), h0 (B, H_out), c0 (B, H) for "
                f"LSTM, weight_hh (G, H_out) with G = {chunks} * H, bias_hh (G,), weight_hr "
                "(H_out, H); above layer 0 weight_ih (G, H_out below), bias_ih (G,), mask "
                "(T, B, H_out below))"
            )
        below = hout
    flat += tuple(input_weights) if project else ()
    return apply(
        RecurrentLayer, *flat, mode=mode, sizes=sizes, reverse=bool(reverse), project=project
    )


def recurrent_layer_override(backend):
    """recurrent_layer's overrides: :func:`stack_forward` and :func:`stack_backward` with the
    backend's fused LSTM/GRU cell kernels (``lstm_fwd``, ``gru_fwd``, ``lstm_bwd``,
    ``gru_bwd``) in place of :class:`GenericCells`. The forward leaves ``ctx`` as the generic
    one does, so the entry is not paired: either backward may follow either forward. The plain
    RNN modes stay generic (one tanh or max a step)."""
    accepts = backend.accepts
    have = backend.FUSED_KERNELS
    if hasattr(backend, "set_blas") and not backend.have_blas():
        _find_blas(backend)  # Note [Compiled step loop]
    fwd_modes = {m for m in ("LSTM", "GRU") if f"{m.lower()}_fwd" in have}
    bwd_modes = {m for m in ("LSTM", "GRU") if f"{m.lower()}_bwd" in have}

    def usable(arrays, project):  # a projected input need not be contiguous: only GEMMs read it
        first = arrays[0].dtype == arrays[1].dtype if project else True
        return first and accepts(tuple(a for a in arrays[project:] if a is not None))

    def forward(ctx, *arrays, mode, sizes, reverse, project=False):
        if mode not in fwd_modes or not usable(arrays, project):
            return NotImplemented
        return stack_forward(
            ctx, backend, *arrays, mode=mode, sizes=sizes, reverse=reverse, project=project
        )

    def backward(ctx, *grads):
        if ctx.mode not in bwd_modes or not usable(ctx.saved, ctx.project):
            return NotImplemented
        return stack_backward(ctx, backend, *grads)

    return forward, backward


# The family's public functions (ferro.ops exports their union): a new op's name goes here.
__all__ = [
    "gru_cell",
    "lstm_cell",
    "recurrent_layer",
]
