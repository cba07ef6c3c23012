"""Op database entries for ferro/ops/recurrent.py: the fused LSTM and GRU cells.

The references are the cell equations written plainly in NumPy (PyTorch's gate order); a cell
with two outputs is checked through ``cat((hy, cy), -1)``, and once through ``hy`` alone (the
unused ``cy`` gets a zero gradient).
"""

from __future__ import annotations

import numpy as np

import ferro
from opdb.core import OpInfo, Sample, sigmoid_ref, uniform


def _lstm_ref(ig, hg, cx):
    i, f, g, o = np.split(ig + hg, 4, axis=-1)
    cy = sigmoid_ref(f) * cx + sigmoid_ref(i) * np.tanh(g)
    hy = sigmoid_ref(o) * np.tanh(cy)
    return hy, cy


def _gru_ref(ig, hg, hx):
    xr, xz, xn = np.split(ig, 3, axis=-1)
    hr, hz, hn = np.split(hg, 3, axis=-1)
    r = sigmoid_ref(xr + hr)
    z = sigmoid_ref(xz + hz)
    n = np.tanh(xn + r * hn)
    return (1 - z) * n + z * hx


def _cell_samples(chunks):
    def make(rng):
        out = []
        for batch, hidden in [((2,), 3), ((), 2), ((2, 2), 2), ((0,), 3)]:
            gates = (*batch, chunks * hidden)
            out.append(
                Sample(
                    (uniform(rng, gates), uniform(rng, gates), uniform(rng, (*batch, hidden))),
                    label=f"batch{batch}-hidden{hidden}",
                )
            )
        g, s = (4, chunks * 3), (4, 3)
        out.append(
            Sample((uniform(rng, g), uniform(rng, g), uniform(rng, s)), noncontig=True, label="nc")
        )
        out.append(Sample((uniform(rng, g), None, uniform(rng, s)), same=(1,), label="f(x,x,c)"))
        # Saturated gates: the tanh-form sigmoid must stay finite and exact out there.
        out.append(
            Sample(
                (uniform(rng, g, -30, 30), uniform(rng, g, -1, 1), uniform(rng, s)),
                label="saturated",
            )
        )
        return out

    return make


ENTRIES = [
    OpInfo(
        "lstm_cell",
        lambda ig, hg, cx: ferro.cat(ferro.lstm_cell(ig, hg, cx), -1),
        lambda ig, hg, cx: np.concatenate(_lstm_ref(ig, hg, cx), -1),
        _cell_samples(4),
    ),
    OpInfo(
        "lstm_cell_hy",
        lambda ig, hg, cx: ferro.lstm_cell(ig, hg, cx)[0],
        lambda ig, hg, cx: _lstm_ref(ig, hg, cx)[0],
        _cell_samples(4),
        func="lstm_cell",
    ),
    OpInfo("gru_cell", ferro.gru_cell, _gru_ref, _cell_samples(3)),
]


def _layer_ref(xg, h0, c0, w_hh, b_hh, w_hr, mode, batch_sizes=None, reverse=False):
    """Each sequence on its own, step by step: rows of sequence j sit at ``offset[t] + j``."""
    padded = batch_sizes is None
    steps, batch = (xg.shape[0], xg.shape[1]) if padded else (len(batch_sizes), h0.shape[0])
    sizes = [batch] * steps if padded else list(batch_sizes)
    x2 = xg.reshape(-1, xg.shape[-1])
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(int)
    out = np.zeros((x2.shape[0], h0.shape[1]))
    h_n, c_n = np.zeros_like(h0), None if c0 is None else np.zeros_like(c0)
    bias = 0 if b_hh is None else b_hh
    for j in range(batch):
        ts = [t for t in range(steps) if sizes[t] > j]
        h, c = h0[j], None if c0 is None else c0[j]
        for t in reversed(ts) if reverse else ts:
            x, hg = x2[offsets[t] + j], h @ w_hh.T + bias
            if mode == "LSTM":
                h, c = _lstm_ref(x, hg, c)
                h = h if w_hr is None else h @ w_hr.T
            elif mode == "GRU":
                h = _gru_ref(x, hg, h)
            else:
                h = np.tanh(x + hg) if mode == "RNN_TANH" else np.maximum(x + hg, 0)
            out[offsets[t] + j] = h
        h_n[j] = h
        if c0 is not None:
            c_n[j] = c
    parts = [out.reshape(-1), h_n.reshape(-1)] + ([] if c0 is None else [c_n.reshape(-1)])
    return np.concatenate(parts)


def _layer_fn(*args, **kwargs):
    return ferro.cat([o.reshape(-1) for o in ferro.recurrent_layer(*args, **kwargs)], 0)


def _layer_samples(rng):
    out = []
    hidden, steps, batch = 2, 3, 3
    for mode, proj, bias, sizes, reverse in [
        ("LSTM", False, True, None, False),
        ("LSTM", True, False, None, True),
        ("LSTM", True, True, [3, 2, 2, 1], False),
        ("LSTM", False, True, [3, 2, 2, 1], True),
        ("GRU", False, True, None, False),
        ("GRU", False, True, [3, 3, 1], True),
        ("GRU", False, False, [3, 1], False),
        ("RNN_TANH", False, True, [3, 2, 1], False),
        ("RNN_RELU", False, True, None, True),
    ]:
        chunks = {"LSTM": 4, "GRU": 3}.get(mode, 1)
        gates, hout = chunks * hidden, 1 if proj else hidden
        rows = (sum(sizes),) if sizes else (steps, batch)
        args = (
            uniform(rng, (*rows, gates)),
            uniform(rng, (batch, hout)),
            uniform(rng, (batch, hidden)) if mode == "LSTM" else None,
            uniform(rng, (gates, hout)),
            uniform(rng, (gates,)) if bias else None,
            uniform(rng, (hout, hidden)) if proj else None,
        )
        kwargs = {"mode": mode, "batch_sizes": sizes, "reverse": reverse}
        label = f"{mode}{'-proj' if proj else ''}{'-packed' if sizes else ''}"
        out.append(Sample(args, kwargs, label=label + ("-reverse" if reverse else "")))
    out.append(Sample(out[0].args, out[0].kwargs, noncontig=True, label="LSTM-noncontig"))
    return out


ENTRIES.append(
    OpInfo(
        "recurrent_layer",
        _layer_fn,
        _layer_ref,
        _layer_samples,
        # relu's kink: the samples' pre-activations stay away from 0 at this seed.
        fwd_rtol32=2e-5,
    )
)


def _stacked_groups(args, masks):
    """The layers' ``(w_ih, b_ih, mask, h0, c0, w_hh, b_hh, w_hr)`` from a stacked sample's
    flat arguments (7 per upper layer; the masks ride in the kwargs, not differentiated)."""
    upper = [args[k : k + 7] for k in range(6, len(args), 7)]
    return [(*u[:2], m, *u[2:]) for u, m in zip(upper, masks[1:], strict=True)]


def _stacked_ref(
    xg, h0, c0, w_hh, b_hh, w_hr, *upper, mode, batch_sizes=None, masks=(), project=False
):
    """Layer by layer with ``_layer_ref``: an upper layer's input gates are
    ``(out_below * mask) @ weight_ih.T + bias_ih``; with ``project`` layer 0's too (its
    weights the last two arguments, ``xg`` its input)."""
    if project:
        *upper, w0, b0 = upper
        xg = (xg.reshape(-1, xg.shape[-1]) @ w0.T + (0 if b0 is None else b0)).reshape(
            *xg.shape[:-1], -1
        )
    rows = xg.reshape(-1, xg.shape[-1]).shape[0]
    layers = [(None, None, None, h0, c0, w_hh, b_hh, w_hr)]
    layers += _stacked_groups((xg, h0, c0, w_hh, b_hh, w_hr, *upper), masks)
    gates, parts = xg, []
    for w_ih, b_ih, mask, h, c, w, b, wr in layers:
        if w_ih is not None:
            x = out if mask is None else out * mask.reshape(out.shape)  # noqa: F821
            gates = (x @ w_ih.T + (0 if b_ih is None else b_ih)).reshape(*xg.shape[:-1], -1)
        flat = _layer_ref(gates, h, c, w, b, wr, mode, batch_sizes)
        out = flat[: rows * h.shape[1]].reshape(rows, -1)
        parts.append(flat[rows * h.shape[1] :])  # h_n and c_n
    return np.concatenate([out.reshape(-1), *parts])


def _stacked_fn(*args, mode, batch_sizes=None, masks=(), project=False):
    masks = [
        None if m is None else ferro.tensor(m, dtype=args[0].dtype, device=args[0].device)
        for m in masks
    ]
    weights = args[-2:] if project else None
    args = args[:-2] if project else args
    upper = _stacked_groups(args, masks)
    outs = ferro.recurrent_layer(*args[:6], mode, batch_sizes, upper=upper, input_weights=weights)
    return ferro.cat([o.reshape(-1) for o in outs], 0)


def _stacked_samples(rng):
    out = []
    hidden, steps, batch = 2, 3, 3
    for mode, layers, proj, bias, sizes, dropout in [
        ("LSTM", 2, False, True, None, False),
        ("LSTM", 2, True, True, None, True),
        ("LSTM", 3, True, False, [3, 2, 2, 1], True),
        ("GRU", 2, False, True, [3, 3, 1], True),
        ("GRU", 3, False, False, None, False),
        ("RNN_TANH", 2, False, True, [3, 2, 1], False),
        ("RNN_RELU", 4, False, True, None, True),
    ]:
        chunks = {"LSTM": 4, "GRU": 3}.get(mode, 1)
        gates, hout = chunks * hidden, 1 if proj else hidden
        rows = (sum(sizes),) if sizes else (steps, batch)
        args, masks = [uniform(rng, (*rows, gates))], [None]
        for layer in range(layers):
            if layer:
                args += [uniform(rng, (gates, hout)), uniform(rng, (gates,)) if bias else None]
                masks.append((rng.random((*rows, hout)) > 0.3) / 0.7 if dropout else None)
            args += [
                uniform(rng, (batch, hout)),
                uniform(rng, (batch, hidden)) if mode == "LSTM" else None,
                uniform(rng, (gates, hout)),
                uniform(rng, (gates,)) if bias else None,
                uniform(rng, (hout, hidden)) if proj else None,
            ]
        kwargs = {"mode": mode, "batch_sizes": sizes, "masks": masks}
        label = f"{mode}-{layers}{'-proj' if proj else ''}{'-packed' if sizes else ''}"
        out.append(Sample(tuple(args), kwargs, label=label + ("-dropout" if dropout else "")))
    out.append(Sample(out[0].args, out[0].kwargs, noncontig=True, label="LSTM-noncontig"))
    # layer 0's projection in the node (input_weights): its input (rows, 3) and weights last
    for k, bias in ((0, True), (3, False)):
        args, kwargs, features = list(out[k].args), dict(out[k].kwargs), 3
        gates = args[0].shape[-1]
        args[0] = uniform(rng, (*args[0].shape[:-1], features))
        args += [uniform(rng, (gates, features)), uniform(rng, (gates,)) if bias else None]
        kwargs["project"] = True
        out.append(Sample(tuple(args), kwargs, label=out[k].label + "-project"))
    return out


ENTRIES.append(
    OpInfo(
        "recurrent_layer_stacked",
        _stacked_fn,
        _stacked_ref,
        _stacked_samples,
        func="recurrent_layer",
        fwd_rtol32=2e-5,
    )
)
