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
