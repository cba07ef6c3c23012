"""Recurrent cells: the gate nonlinearities and state update of one LSTM or GRU step, one op.

A recurrent layer computes the input projection of all its steps with one GEMM
(``linear(x, weight_ih, bias_ih)`` over the whole sequence), and per step the hidden projection
``linear(h, weight_hh, bias_hh)`` and one of these cells. The cells take the two projections
separately (as PyTorch's fused cells ``_thnn_fused_lstm_cell``/``_thnn_fused_gru_cell`` do):
GRU needs them apart (``n = tanh(x_n + r * h_n)``), and for LSTM it saves the add node.

Gate order is PyTorch's: ``i, f, g, o`` for LSTM, ``r, z, n`` for GRU.

Note [Cell activations]: forward computes the activated gates anyway; it keeps them on ``ctx``
(``ctx.acts``) so the first-order backward does not evaluate the sigmoids again. They are an
intermediate, not an input or output, so a backward running on Tensors (double backward, where
``ctx.saved`` holds Tensors) ignores them and recomputes the activations from the saved inputs,
which keeps second derivatives exact.
"""

from __future__ import annotations

from ferro._C.tensor import TensorBase
from ferro.errors import ShapeError
from ferro.ops.registry import apply, register


def _sigmoid(xp, x):
    # tanh form: one transcendental, and no overflow warning for large |x| in float32.
    return 0.5 * xp.tanh(0.5 * x) + 0.5


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
        xp = ctx.xp
        n = cx.shape[-1]
        acts = input_gates + hidden_gates  # fresh: activated in place below
        # sigmoid(x) = 0.5 tanh(x / 2) + 0.5 on i, f, o; tanh on g: one tanh pass over all.
        acts[..., : 2 * n] *= 0.5
        acts[..., 3 * n :] *= 0.5
        xp.tanh(acts, out=acts)
        acts[..., : 2 * n] *= 0.5
        acts[..., : 2 * n] += 0.5
        acts[..., 3 * n :] *= 0.5
        acts[..., 3 * n :] += 0.5
        i, f, g, o = (acts[..., k * n : (k + 1) * n] for k in range(4))
        cy = f * cx
        cy += i * g
        tc = xp.tanh(cy)
        hy = o * tc
        ctx.save(input_gates, hidden_gates, cx)
        ctx.acts = (acts, tc)  # Note [Cell activations]
        return hy, cy

    @staticmethod
    def backward(ctx, ghy, gcy):
        ig, hg, cx = ctx.saved
        xp = ctx.xp
        need_ig, need_hg, need_cx = ctx.needs_input_grad
        n = cx.shape[-1]
        if isinstance(ig, TensorBase):  # a differentiable backward: no stored intermediates
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
        k = hx.shape[-1]
        acts = input_gates + hidden_gates  # r, z pre-activations; the n block is redone below
        acts *= 0.5
        xp.tanh(acts, out=acts)
        acts *= 0.5
        acts += 0.5
        r, z = acts[..., :k], acts[..., k : 2 * k]
        n = acts[..., 2 * k :]
        xp.tanh(input_gates[..., 2 * k :] + r * hidden_gates[..., 2 * k :], out=n)
        hy = hx - n
        hy *= z
        hy += n
        ctx.save(input_gates, hidden_gates, hx)
        ctx.acts = acts  # Note [Cell activations]
        return hy

    @staticmethod
    def backward(ctx, ghy):
        ig, hg, hx = ctx.saved
        xp = ctx.xp
        need_ig, need_hg, need_hx = ctx.needs_input_grad
        k = hx.shape[-1]
        if isinstance(ig, TensorBase):
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


# The family's public functions (ferro.ops exports their union): a new op's name goes here.
__all__ = [
    "gru_cell",
    "lstm_cell",
]
