"""Recurrent layers, cells and nn.utils.rnn: against PyTorch (the oracle, when installed) for
every option that changes the math, and against plain NumPy cell equations without it."""

from __future__ import annotations

import itertools
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import ferro
from ferro import nn
from ferro.errors import ArgumentError, ArgumentTypeError, ShapeError
from ferro.nn.utils import rnn as rnn_utils
from ferro.ops.recurrent import GruCell, LstmCell
from ferro.ops.registry import REGISTRY
from ferro.testing import gradcheck


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _np(t):
    return t.detach().cpu().numpy()


def _torch_state(module):
    return {k: v.detach().numpy() for k, v in module.state_dict().items()}


# -- without PyTorch: the NumPy equations --------------------------------------------------


def test_lstm_matches_numpy_equations():
    ferro.manual_seed(0)
    lstm = nn.LSTM(3, 4, dtype=ferro.float64)
    x = np.random.default_rng(0).normal(size=(5, 2, 3))
    out, (h, c) = lstm(ferro.tensor(x))
    w_ih, w_hh, b_ih, b_hh = (_np(p) for p in lstm.parameters())
    hs, cs = np.zeros((2, 4)), np.zeros((2, 4))
    want = []
    for t in range(5):
        i, f, g, o = np.split(x[t] @ w_ih.T + b_ih + hs @ w_hh.T + b_hh, 4, axis=-1)
        cs = _sigmoid(f) * cs + _sigmoid(i) * np.tanh(g)
        hs = _sigmoid(o) * np.tanh(cs)
        want.append(hs)
    np.testing.assert_allclose(_np(out), np.stack(want), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_np(h)[0], hs, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_np(c)[0], cs, rtol=1e-12, atol=1e-12)


def test_gru_matches_numpy_equations():
    ferro.manual_seed(1)
    gru = nn.GRU(3, 4, dtype=ferro.float64)
    x = np.random.default_rng(1).normal(size=(4, 2, 3))
    out, h = gru(ferro.tensor(x))
    w_ih, w_hh, b_ih, b_hh = (_np(p) for p in gru.parameters())
    hs = np.zeros((2, 4))
    for t in range(4):
        xr, xz, xn = np.split(x[t] @ w_ih.T + b_ih, 3, axis=-1)
        hr, hz, hn = np.split(hs @ w_hh.T + b_hh, 3, axis=-1)
        r, z = _sigmoid(xr + hr), _sigmoid(xz + hz)
        n = np.tanh(xn + r * hn)
        hs = (1 - z) * n + z * hs
    np.testing.assert_allclose(_np(out)[-1], hs, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_np(h)[0], hs, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", ["RNN", "LSTM", "GRU"])
def test_layer_gradients_match_numeric(mode):
    ferro.manual_seed(2)
    kw = {"proj_size": 2} if mode == "LSTM" else {}
    layer = getattr(nn, mode)(2, 3, num_layers=2, bidirectional=True, dtype=ferro.float64, **kw)
    rng = np.random.default_rng(2)
    x = ferro.tensor(rng.normal(size=(3, 2, 2)), requires_grad=True)
    h0 = ferro.tensor(rng.normal(size=(4, 2, 2 if mode == "LSTM" else 3)), requires_grad=True)
    c0 = ferro.tensor(rng.normal(size=(4, 2, 3)), requires_grad=True)
    if mode == "LSTM":
        assert gradcheck(lambda x, h, c: ferro.cat([layer(x, (h, c))[1][1], h], -1), (x, h0, c0))
    assert gradcheck(lambda x: layer(x)[0], (x,))
    assert gradcheck(lambda h: layer(x, (h, c0) if mode == "LSTM" else h)[0], (h0,))


def test_parameter_names_shapes_and_init():
    lstm = nn.LSTM(3, 5, num_layers=2, bidirectional=True, proj_size=2)
    shapes = {k: tuple(v.shape) for k, v in lstm.state_dict().items()}
    assert shapes["weight_ih_l0"] == (20, 3)
    assert shapes["weight_hh_l0"] == (20, 2)
    assert shapes["weight_hr_l0"] == (2, 5)
    assert shapes["weight_ih_l1_reverse"] == (20, 4)
    assert list(shapes)[:5] == [
        "weight_ih_l0",
        "weight_hh_l0",
        "bias_ih_l0",
        "bias_hh_l0",
        "weight_hr_l0",
    ]
    bound = 1 / np.sqrt(5)
    for p in lstm.parameters():
        assert np.abs(_np(p)).max() <= bound
    assert "bias_ih_l0" not in nn.GRU(2, 3, bias=False).state_dict()
    assert repr(nn.RNNCell(2, 3, nonlinearity="relu")) == "RNNCell(2, 3, nonlinearity=relu)"


def test_bad_input_raises_typed_errors_naming_shapes():
    lstm = nn.LSTM(3, 4, num_layers=2)
    with pytest.raises(ShapeError, match=r"input_size: expected 3.*\(5, 2, 6\)"):
        lstm(ferro.zeros(5, 2, 6))
    with pytest.raises(ShapeError, match=r"h_0 of shape \(2, 2, 4\), got \(2, 2, 5\)"):
        lstm(ferro.zeros(5, 2, 3), (ferro.zeros(2, 2, 5), ferro.zeros(2, 2, 4)))
    with pytest.raises(ShapeError, match=r"c_0 of shape \(2, 2, 4\), got \(2, 3, 4\)"):
        lstm(ferro.zeros(5, 2, 3), (ferro.zeros(2, 2, 4), ferro.zeros(2, 3, 4)))
    with pytest.raises(ArgumentTypeError, match="tuple"):
        lstm(ferro.zeros(5, 2, 3), ferro.zeros(2, 2, 4))
    with pytest.raises(ShapeError, match=r"hx of shape \(1, 2, 4\), got \(1, 3, 4\)"):
        nn.GRU(3, 4)(ferro.zeros(5, 2, 3), ferro.zeros(1, 3, 4))
    with pytest.raises(ShapeError, match="2-D"):
        nn.GRU(3, 4)(ferro.zeros(5, 3), ferro.zeros(1, 3, 4))
    with pytest.raises(ShapeError, match=r"unbatched or 3-D, got shape \(5,\)"):
        nn.RNN(3, 4)(ferro.zeros(5))
    with pytest.raises(ShapeError, match=r"1-D or 2-D, got shape \(1, 2, 3\)"):
        nn.RNNCell(3, 4)(ferro.zeros(1, 2, 3))
    with pytest.raises(ShapeError, match=r"input_size.*\(2, 5\)"):
        nn.LSTMCell(3, 4)(ferro.zeros(2, 5))
    with pytest.raises(ShapeError, match=r"\(3, 4\), expected \(2, 4\)"):
        nn.GRUCell(3, 4)(ferro.zeros(2, 3), ferro.zeros(3, 4))
    with pytest.raises(ShapeError, match=r"lstm_cell.*\(2, 8\).*\(2, 3\)"):
        ferro.lstm_cell(ferro.zeros(2, 8), ferro.zeros(2, 8), ferro.zeros(2, 3))
    with pytest.raises(ArgumentError, match="proj_size"):
        nn.LSTM(3, 4, proj_size=4)
    with pytest.raises(ArgumentError, match="dropout"):
        nn.GRU(3, 4, dropout=1.5)
    with pytest.raises(ArgumentError, match="nonlinearity"):
        nn.RNN(3, 4, nonlinearity="sigmoid")


@pytest.mark.parametrize("mode", ["RNN", "LSTM", "GRU"])
def test_empty_sequence_returns_the_initial_state(mode):
    layer = getattr(nn, mode)(3, 4, num_layers=2, dtype=ferro.float64)
    h0 = ferro.randn(2, 2, 4, dtype=ferro.float64)
    hx = (h0, ferro.randn(2, 2, 4, dtype=ferro.float64)) if mode == "LSTM" else h0
    layer.flatten_parameters()  # PyTorch code calls it; nothing to do in ferro
    out, state = layer(ferro.zeros(0, 2, 3, dtype=ferro.float64), hx)
    assert out.shape == (0, 2, 4)
    got = state[0] if mode == "LSTM" else state
    np.testing.assert_array_equal(_np(got), _np(h0))


def test_dropout_between_layers_only_in_training():
    ferro.manual_seed(3)
    gru = nn.GRU(3, 4, num_layers=2, dropout=0.5)
    x = ferro.randn(5, 2, 3)
    ferro.manual_seed(7)
    a, _ = gru(x)
    ferro.manual_seed(7)
    b, _ = gru(x)
    np.testing.assert_array_equal(_np(a), _np(b))  # the mask comes from ferro's generator
    gru.eval()
    c, _ = gru(x)
    assert not np.allclose(_np(a), _np(c))
    single = nn.GRU(3, 4, dropout=0.5)  # nothing between layers: no dropout at all
    np.testing.assert_array_equal(_np(single(x)[0]), _np(single.eval()(x)[0]))


# Note [Cell activations]: a backward on Tensors (what the double-backward engine runs) must
# ignore the stored activations and give the same values; its own gradient must be exact.
_NAMESPACE = types.SimpleNamespace(
    tanh=ferro.tanh, concatenate=lambda xs, axis: ferro.cat(list(xs), axis)
)


@pytest.mark.parametrize("op", [LstmCell, GruCell], ids=["lstm_cell", "gru_cell"])
def test_backward_on_tensors_matches_backward_and_differentiates(op):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))
    from opdb import BY_NAME

    entry = BY_NAME["lstm_cell" if op is LstmCell else "gru_cell"]
    for sample in entry.samples(np.random.default_rng(0)):
        if sample.same or sample.noncontig:
            continue
        ig, hg, st = (ferro.tensor(a) for a in sample.args)
        outs = ferro.lstm_cell(ig, hg, st) if op is LstmCell else (ferro.gru_cell(ig, hg, st),)
        rng = np.random.default_rng(1)
        gys = [rng.normal(size=o.shape) for o in outs]
        for o in (ig, hg, st):
            o.requires_grad_(True)
        outs = ferro.lstm_cell(ig, hg, st) if op is LstmCell else (ferro.gru_cell(ig, hg, st),)
        node = outs[0].grad_fn
        want = op.backward(node, *gys)

        def on_tensors(ig, hg, st, *gy):
            ctx = types.SimpleNamespace(
                saved=(ig, hg, st), xp=_NAMESPACE, needs_input_grad=(True, True, True)
            )
            return ferro.cat([g.reshape(-1) for g in op.backward(ctx, *gy)], 0)

        args = [ferro.tensor(a, requires_grad=True) for a in (*sample.args, *gys)]
        got = on_tensors(*args)
        np.testing.assert_allclose(
            _np(got), np.concatenate([np.ravel(g) for g in want]), rtol=1e-12, atol=1e-12
        )
        if got.shape[0]:
            assert gradcheck(on_tensors, tuple(args))


def _op_call(name, tensors, kwargs):
    """The op's outputs and its positional inputs for an opdb sample of recurrent_layer or
    recurrent_layer_stacked (whose dropout masks ride in the sample's kwargs)."""
    if name == "recurrent_layer":
        return ferro.recurrent_layer(*tensors, **kwargs), tensors
    from opdb.recurrent import _stacked_groups

    masks = [None if m is None else ferro.tensor(m) for m in kwargs["masks"]]
    weights = tuple(tensors[-2:]) if kwargs.get("project") else None  # layer 0's, last
    tensors = tensors[:-2] if weights else tensors
    upper = _stacked_groups(tensors, masks)
    outs = ferro.recurrent_layer(
        *tensors[:6], kwargs["mode"], kwargs["batch_sizes"], upper=upper, input_weights=weights
    )
    return outs, [*tensors[:6], *(a for g in upper for a in g), *(weights or ())]


@pytest.mark.parametrize("name", ["recurrent_layer", "recurrent_layer_stacked"])
def test_layer_differentiable_backward_matches_backward(name):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))
    from opdb import BY_NAME

    rng = np.random.default_rng(0)
    op = REGISTRY["recurrent_layer"]
    for sample in BY_NAME[name].samples(np.random.default_rng(0)):
        tensors = [None if a is None else ferro.tensor(a, requires_grad=True) for a in sample.args]
        outs, inputs = _op_call(name, tensors, sample.kwargs)
        gys = [rng.normal(size=o.shape) for o in outs]
        node = outs[0].grad_fn
        want = op.backward(node, *gys)
        ctx = types.SimpleNamespace(
            saved=tuple(inputs),
            needs_input_grad=tuple(t is not None and t.requires_grad for t in inputs),
            mode=sample.kwargs["mode"],
            sizes=node.sizes,
            reverse=sample.kwargs.get("reverse"),
            project=node.project,
        )
        got = op.differentiable_backward(ctx, *(ferro.tensor(g) for g in gys))
        for k, (w, g) in enumerate(zip(want, got, strict=True)):
            assert (w is None) == (g is None), (sample.label, k)
            if w is not None:
                np.testing.assert_allclose(_np(g), w, rtol=1e-10, atol=1e-12, err_msg=sample.label)


# -- PyTorch as the oracle -----------------------------------------------------------------

_MODES = ["RNN_TANH", "RNN_RELU", "LSTM", "LSTM_PROJ", "GRU"]


def _pair(mode, input_size, hidden, **kw):
    import torch

    if mode.startswith("RNN"):
        kw["nonlinearity"] = "tanh" if mode == "RNN_TANH" else "relu"
        name = "RNN"
    elif mode == "LSTM_PROJ":
        kw["proj_size"] = 2
        name = "LSTM"
    else:
        name = mode
    tm = getattr(torch.nn, name)(input_size, hidden, **kw).double()
    fm = getattr(nn, name)(input_size, hidden, dtype=ferro.float64, **kw)
    result = fm.load_state_dict(_torch_state(tm))
    assert not result.missing_keys and not result.unexpected_keys
    assert repr(fm) == repr(tm)
    return fm, tm


def _compare(f_outs, t_outs, fm, tm, f_inputs, t_inputs, rtol=1e-9):
    """Values of every output, then the gradients of a weighted sum of them w.r.t. the inputs
    and every parameter."""
    import torch

    rng = np.random.default_rng(5)
    f_loss, t_loss = 0, 0
    for fo, to in zip(f_outs, t_outs, strict=True):
        np.testing.assert_allclose(_np(fo), to.detach().numpy(), rtol=rtol, atol=1e-10)
        w = rng.normal(size=tuple(to.shape))
        f_loss = f_loss + (fo * ferro.tensor(w)).sum()
        t_loss = t_loss + (to * torch.tensor(w)).sum()
    f_loss.backward()
    t_loss.backward()
    for fi, ti in zip(f_inputs, t_inputs, strict=True):
        np.testing.assert_allclose(_np(fi.grad), ti.grad.numpy(), rtol=rtol, atol=1e-10)
    for (name, fp), tp in zip(fm.named_parameters(), tm.parameters(), strict=True):
        np.testing.assert_allclose(
            _np(fp.grad), tp.grad.numpy(), rtol=rtol, atol=1e-10, err_msg=name
        )


def _tensors(rng, shape):
    import torch

    a = rng.normal(size=shape)
    return ferro.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)


@pytest.mark.torch
@pytest.mark.parametrize(
    "mode,layers,bidirectional,batch_first,bias,initial",
    list(itertools.product(_MODES, [1, 2], [False, True], [False, True], [True, False], [0, 1])),
)
def test_layers_match_torch(mode, layers, bidirectional, batch_first, bias, initial):
    fm, tm = _pair(
        mode,
        3,
        4,
        num_layers=layers,
        bidirectional=bidirectional,
        batch_first=batch_first,
        bias=bias,
    )
    rng = np.random.default_rng(0)
    fx, tx = _tensors(rng, (2, 5, 3) if batch_first else (5, 2, 3))
    f_in, t_in = [fx], [tx]
    f_args, t_args = [fx], [tx]
    states = layers * (2 if bidirectional else 1)
    if initial:
        fh, th = _tensors(rng, (states, 2, 2 if mode == "LSTM_PROJ" else 4))
        if mode.startswith("LSTM"):
            fc, tc = _tensors(rng, (states, 2, 4))
            f_args.append((fh, fc))
            t_args.append((th, tc))
            f_in += [fh, fc]
            t_in += [th, tc]
        else:
            f_args.append(fh)
            t_args.append(th)
            f_in.append(fh)
            t_in.append(th)
    fo, fs = fm(*f_args)
    to, ts = tm(*t_args)
    f_outs = [fo, *(fs if isinstance(fs, tuple) else (fs,))]
    t_outs = [to, *(ts if isinstance(ts, tuple) else (ts,))]
    _compare(f_outs, t_outs, fm, tm, f_in, t_in)


@pytest.mark.torch
@pytest.mark.parametrize("mode", _MODES)
def test_unbatched_input_matches_torch(mode):
    fm, tm = _pair(mode, 3, 4, num_layers=2, bidirectional=True)
    rng = np.random.default_rng(1)
    fx, tx = _tensors(rng, (5, 3))
    fh, th = _tensors(rng, (4, 2 if mode == "LSTM_PROJ" else 4))
    if mode.startswith("LSTM"):
        fc, tc = _tensors(rng, (4, 4))
        fo, (f1, f2) = fm(fx, (fh, fc))
        to, (t1, t2) = tm(tx, (th, tc))
        _compare([fo, f1, f2], [to, t1, t2], fm, tm, [fx, fh, fc], [tx, th, tc])
    else:
        fo, f1 = fm(fx, fh)
        to, t1 = tm(tx, th)
        _compare([fo, f1], [to, t1], fm, tm, [fx, fh], [tx, th])


@pytest.mark.torch
@pytest.mark.parametrize("mode", ["GRU", "LSTM"])
def test_full_dropout_between_layers_matches_torch(mode):
    # p = 1 zeroes the second layer's input: deterministic, so torch can be the oracle.
    fm, tm = _pair(mode, 3, 4, num_layers=2, dropout=1.0)
    rng = np.random.default_rng(2)
    fx, tx = _tensors(rng, (5, 2, 3))
    fo, _ = fm(fx)
    to, _ = tm(tx)
    _compare([fo], [to], fm, tm, [fx], [tx])


@pytest.mark.torch
@pytest.mark.parametrize("mode", ["RNN_TANH", "LSTM", "GRU"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("batched", [True, False])
def test_cells_match_torch(mode, bias, batched):
    import torch

    name = {"RNN_TANH": "RNNCell", "LSTM": "LSTMCell", "GRU": "GRUCell"}[mode]
    tm = getattr(torch.nn, name)(3, 4, bias=bias).double()
    fm = getattr(nn, name)(3, 4, bias=bias, dtype=ferro.float64)
    fm.load_state_dict(_torch_state(tm))
    assert repr(fm) == repr(tm)
    rng = np.random.default_rng(3)
    lead = (2,) if batched else ()
    fx, tx = _tensors(rng, (*lead, 3))
    fh, th = _tensors(rng, (*lead, 4))
    if mode == "LSTM":
        fc, tc = _tensors(rng, (*lead, 4))
        f_out, t_out = fm(fx, (fh, fc)), tm(tx, (th, tc))
        _compare(list(f_out), list(t_out), fm, tm, [fx, fh, fc], [tx, th, tc])
    else:
        _compare([fm(fx, fh)], [tm(tx, th)], fm, tm, [fx, fh], [tx, th])
    np.testing.assert_allclose(
        _np(fm(fx)[0] if mode == "LSTM" else fm(fx)),
        (tm(tx)[0] if mode == "LSTM" else tm(tx)).detach().numpy(),
        rtol=1e-12,
    )


# -- nn.utils.rnn --------------------------------------------------------------------------


@pytest.mark.torch
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_pad_sequence_matches_torch(batch_first, padding_side):
    import torch

    rng = np.random.default_rng(4)
    seqs = [rng.normal(size=(n, 2)) for n in (3, 5, 1)]
    got = rnn_utils.pad_sequence([ferro.tensor(s) for s in seqs], batch_first, -1.0, padding_side)
    want = torch.nn.utils.rnn.pad_sequence(
        [torch.tensor(s) for s in seqs], batch_first, -1.0, padding_side
    )
    np.testing.assert_array_equal(_np(got), want.numpy())


@pytest.mark.torch
@pytest.mark.parametrize("enforce_sorted", [True, False])
@pytest.mark.parametrize("batch_first", [False, True])
def test_pack_and_pad_round_trip_matches_torch(enforce_sorted, batch_first):
    import torch

    lengths = [5, 3, 3, 1] if enforce_sorted else [3, 5, 1, 3]
    rng = np.random.default_rng(5)
    shape = (4, 5, 2) if batch_first else (5, 4, 2)
    fx, tx = _tensors(rng, shape)
    fp = rnn_utils.pack_padded_sequence(fx, lengths, batch_first, enforce_sorted)
    tp = torch.nn.utils.rnn.pack_padded_sequence(tx, lengths, batch_first, enforce_sorted)
    np.testing.assert_array_equal(_np(fp.data), tp.data.detach().numpy())
    np.testing.assert_array_equal(_np(fp.batch_sizes), tp.batch_sizes.numpy())
    indices = [(fp.sorted_indices, tp.sorted_indices), (fp.unsorted_indices, tp.unsorted_indices)]
    for a, b in indices:
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_array_equal(_np(a), b.numpy())
    fy, fl = rnn_utils.pad_packed_sequence(fp, batch_first, 9.0, total_length=6)
    ty, tl = torch.nn.utils.rnn.pad_packed_sequence(tp, batch_first, 9.0, total_length=6)
    np.testing.assert_array_equal(_np(fy), ty.detach().numpy())
    np.testing.assert_array_equal(_np(fl), tl.numpy())
    w = rng.normal(size=tuple(ty.shape))
    (fy * ferro.tensor(w)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(_np(fx.grad), tx.grad.numpy())
    seqs = rnn_utils.unpack_sequence(fp)
    assert [s.shape[0] for s in seqs] == lengths
    packed = rnn_utils.pack_sequence(seqs, enforce_sorted=enforce_sorted)
    np.testing.assert_array_equal(_np(packed.data), _np(fp.data))


@pytest.mark.torch
@pytest.mark.parametrize("mode", _MODES)
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("initial", [False, True])
def test_layers_honour_packed_lengths_like_torch(mode, bidirectional, initial):
    import torch

    fm, tm = _pair(mode, 3, 4, num_layers=2, bidirectional=bidirectional)
    lengths = [3, 5, 1, 3]
    rng = np.random.default_rng(6)
    fx, tx = _tensors(rng, (5, 4, 3))
    fp = rnn_utils.pack_padded_sequence(fx, lengths, enforce_sorted=False)
    tp = torch.nn.utils.rnn.pack_padded_sequence(tx, lengths, enforce_sorted=False)
    f_in, t_in, f_args, t_args = [fx], [tx], [fp], [tp]
    states = 2 * (2 if bidirectional else 1)
    if initial:
        fh, th = _tensors(rng, (states, 4, 2 if mode == "LSTM_PROJ" else 4))
        f_in.append(fh)
        t_in.append(th)
        if mode.startswith("LSTM"):
            fc, tc = _tensors(rng, (states, 4, 4))
            f_in.append(fc)
            t_in.append(tc)
            f_args.append((fh, fc))
            t_args.append((th, tc))
        else:
            f_args.append(fh)
            t_args.append(th)
    fo, fs = fm(*f_args)
    to, ts = tm(*t_args)
    assert isinstance(fo, rnn_utils.PackedSequence)
    fy, _ = rnn_utils.pad_packed_sequence(fo)
    ty, _ = torch.nn.utils.rnn.pad_packed_sequence(to)
    f_outs = [fy, *(fs if isinstance(fs, tuple) else (fs,))]
    t_outs = [ty, *(ts if isinstance(ts, tuple) else (ts,))]
    _compare(f_outs, t_outs, fm, tm, f_in, t_in)


# -- the CPU cell-gradient kernels -----------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows,hidden", [(3, 4), (1, 1), (0, 2), (5, 37)])
def test_cpu_cell_kernels_match_generic_cells(dtype, rows, hidden):
    from ferro._C import recurrent_kernels as K
    from ferro.ops.recurrent import GenericCells

    rng = np.random.default_rng(0)
    generic = GenericCells(np)

    def arr(*shape):
        return rng.uniform(-1, 1, size=shape).astype(dtype)

    tol = 1e-6 if dtype == np.float32 else 1e-14
    gh, gc, c_prev, tc, acts = (
        arr(rows, hidden),
        arr(rows, hidden),
        arr(rows, hidden),
        arr(rows, hidden),
        arr(rows, 4 * hidden),
    )
    got_g, want_g = np.empty((rows, 4 * hidden), dtype), np.empty((rows, 4 * hidden), dtype)
    got = K.lstm_bwd(gh, gc, acts, c_prev, tc, got_g)
    want = generic.lstm_bwd(gh, gc, acts, c_prev, tc, want_g)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    np.testing.assert_allclose(got_g, want_g, rtol=tol, atol=tol)
    acts3, hg_n, h_prev = arr(rows, 3 * hidden), arr(rows, hidden), arr(rows, hidden)
    outs = [np.empty((rows, 3 * hidden), dtype) for _ in range(4)]
    got = K.gru_bwd(gh, acts3, hg_n, h_prev, outs[0], outs[1])
    want = generic.gru_bwd(gh, acts3, hg_n, h_prev, outs[2], outs[3])
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    for a, b in ((outs[0], outs[2]), (outs[1], outs[3])):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows,hidden", [(3, 4), (1, 1), (0, 2), (5, 37)])
def test_cpu_cell_forward_kernels_match_generic_cells(dtype, rows, hidden):
    # The fused gate forward against the reference; its tanh is formulas.cuh's (float32:
    # within 2 ulp; float64: within 1 ulp). Large pre-activations
    # reach their clamps.
    from ferro._C import recurrent_kernels as K
    from ferro.ops.recurrent import GenericCells

    rng = np.random.default_rng(rows + hidden)
    generic = GenericCells(np)

    def arr(*shape, scale=3.0):
        return (rng.normal(size=shape) * scale).astype(dtype)

    tol = dict(rtol=2e-6, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-14, atol=1e-15)
    x, hproj, c = arr(rows, 4 * hidden), arr(rows, 4 * hidden, scale=6.0), arr(rows, hidden)
    if x.size:
        x[0, 0], hproj[-1, -1], x[-1, 1] = 40.0, -40.0, np.nan  # NaN must stay NaN
    outs = {}
    for name, cells in (("kernel", K), ("generic", generic)):
        acts, tc = hproj.copy(), np.empty((rows, hidden), dtype)
        h, c_new = cells.lstm_fwd(x, acts, c, tc)
        outs[name] = (h, c_new, acts, tc)
    for a, b in zip(outs["kernel"], outs["generic"], strict=True):
        assert a.dtype == dtype
        np.testing.assert_allclose(a, b, **tol)
    x3, hg, h = arr(rows, 3 * hidden), arr(rows, 3 * hidden), arr(rows, hidden)
    for name, cells in (("kernel", K), ("generic", generic)):
        acts, hg_n = np.empty((rows, 3 * hidden), dtype), np.empty((rows, hidden), dtype)
        outs[name] = (cells.gru_fwd(x3, hg, h, acts, hg_n), acts, hg_n)
    for a, b in zip(outs["kernel"], outs["generic"], strict=True):
        np.testing.assert_allclose(a, b, **tol)


def test_cpu_cell_forward_kernels_refuse_bad_arrays():
    from ferro._C import recurrent_kernels as K
    from ferro.errors import ArgumentError, ReadOnlyError

    z, g = np.zeros((2, 3)), np.zeros((2, 12))
    K.lstm_fwd(g, g.copy(), z, z.copy())
    with pytest.raises(ShapeError, match=r"tc has shape \(2, 2\), expected \(2, 3\)"):
        K.lstm_fwd(g, g.copy(), z, np.zeros((2, 2)))
    with pytest.raises(ArgumentError, match="acts overlaps x"):
        K.lstm_fwd(g, g, z, z.copy())  # restrict pointers: the loop would read what it wrote
    ro = g.copy()
    ro.flags.writeable = False
    with pytest.raises(ReadOnlyError, match="acts"):
        K.lstm_fwd(g, ro, z, z.copy())
    g9 = np.zeros((2, 9))
    with pytest.raises(ShapeError, match="C-contiguous"):
        K.gru_fwd(np.zeros((9, 2)).T, g9, z, g9.copy(), z.copy())
    with pytest.raises(ArgumentError, match="hg_n overlaps h"):
        K.gru_fwd(g9, g9.copy(), z, np.zeros((2, 9)), z)


def test_cpu_cell_kernels_refuse_bad_arrays():
    from ferro._C import recurrent_kernels as K
    from ferro.errors import ArgumentError, DtypeError, ReadOnlyError

    z = np.zeros((2, 3))
    ok = (z, z, np.zeros((2, 12)), z, z, np.zeros((2, 12)))
    K.lstm_bwd(*ok)
    with pytest.raises(ShapeError, match=r"acts has shape \(2, 8\), expected \(2, 12\)"):
        K.lstm_bwd(z, z, np.zeros((2, 8)), z, z, np.zeros((2, 12)))
    with pytest.raises(DtypeError, match="gc is float32"):
        K.lstm_bwd(z, z.astype(np.float32), *ok[2:])
    with pytest.raises(ShapeError, match="C-contiguous"):
        K.lstm_bwd(z, np.zeros((3, 2)).T, *ok[2:])
    with pytest.raises(DtypeError):
        K.lstm_bwd(z, z.astype(">f8"), *ok[2:])
    ro = np.zeros((2, 12))
    ro.flags.writeable = False
    with pytest.raises(ReadOnlyError, match="g_gates"):
        K.lstm_bwd(*ok[:5], ro)
    with pytest.raises(ArgumentTypeError):
        K.gru_bwd(z, [[0.0]], z, z, z, z)
    # restrict pointers in the backward loops too: a written array may share no memory
    g12 = np.zeros((2, 12))
    with pytest.raises(ArgumentError, match="g_gates overlaps acts"):
        K.lstm_bwd(z, z, g12, z, z, g12)
    g9 = np.zeros((2, 9))
    with pytest.raises(ArgumentError, match="g_in overlaps g_hid"):
        K.gru_bwd(z, np.zeros((2, 9)), z, z, g9, g9)
    assert K.accepts(ok) and not K.accepts((z, z.astype(np.float32)))
    assert not K.accepts((np.zeros((3, 2)).T,)) and not K.accepts(())


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_layer_runs_the_kernels_and_matches_generic(mode):
    from ferro.ops.fused import overrides

    rng = np.random.default_rng(1)
    grads = {}
    for enabled in (True, False):
        ferro.manual_seed(0)
        layer = getattr(nn, mode)(3, 4, num_layers=2, bidirectional=True)
        x = ferro.tensor(rng.normal(size=(5, 2, 3)).astype(np.float32), requires_grad=True)
        with overrides(enabled):
            out, _ = layer(x)
            out.sum().backward()
        nodes, stack = {}, [out.grad_fn]
        while stack:  # the graph's recurrent_layer nodes: two layers, two directions
            node = stack.pop()
            if node.op.name == "recurrent_layer":
                nodes[id(node)] = node
            stack.extend(t for t, _ in node.next_functions if hasattr(t, "op"))
        assert len(nodes) == 4
        assert all(n.fused_forward == enabled == n.fused_backward for n in nodes.values())
        grads[enabled] = [_np(x.grad)] + [_np(p.grad) for p in layer.parameters()]
        rng = np.random.default_rng(1)
    for a, b in zip(grads[True], grads[False], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# -- second derivatives (the create_graph engine) --------------------------------------------


@pytest.mark.parametrize("op", ["lstm_cell", "gru_cell"])
def test_cells_second_derivatives_match_numeric(op):
    from ferro.testing import gradgradcheck

    rng = np.random.default_rng(3)
    chunks = 4 if op == "lstm_cell" else 3
    args = tuple(
        ferro.tensor(rng.uniform(-1, 1, size=s), requires_grad=True)
        for s in ((2, chunks * 2), (2, chunks * 2), (2, 2))
    )
    fn = getattr(ferro, op)
    assert gradgradcheck(fn, args)


@pytest.mark.parametrize("label", ["LSTM-proj-packed", "GRU-packed-reverse", "RNN_TANH-packed"])
def test_layer_second_derivatives_match_numeric(label):
    from ferro.testing import gradgradcheck

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))
    from opdb import BY_NAME

    (sample,) = [
        s for s in BY_NAME["recurrent_layer"].samples(np.random.default_rng(0)) if s.label == label
    ]
    tensors = tuple(None if a is None else ferro.tensor(a, requires_grad=True) for a in sample.args)
    live = [k for k, t in enumerate(tensors) if t is not None]

    def fn(*ts):
        args = list(tensors)
        for k, t in zip(live, ts, strict=True):
            args[k] = t
        return ferro.recurrent_layer(*args, **sample.kwargs)

    assert gradgradcheck(fn, tuple(tensors[k] for k in live))


# -- stacked layers as a wavefront (Note [Recurrent stack]) ------------------------------------


def _run_stack(module, x, leaf, threads):
    from ferro import _intraop

    before = _intraop.num_threads()
    _intraop.set_num_threads(threads)
    try:
        for p in module.parameters():
            p.grad = None
        leaf.grad = None
        ferro.manual_seed(5)  # the dropout masks
        out, state = module(x)
        data = out.data if isinstance(out, rnn_utils.PackedSequence) else out
        states = state if isinstance(state, tuple) else (state,)
        (data.sum() + sum((s * s).sum() for s in states)).backward()
        got = [_np(data), *(_np(s) for s in states), _np(leaf.grad)]
        return got + [_np(p.grad) for p in module.parameters()]
    finally:
        _intraop.set_num_threads(before)


@pytest.mark.parametrize(
    "mode,layers,kw,packed",
    [
        ("LSTM", 2, {}, False),
        ("LSTM", 3, {"proj_size": 2, "dropout": 0.3}, True),
        ("GRU", 3, {"dropout": 0.5, "bias": False}, True),
        ("GRU", 2, {"batch_first": True}, False),
        ("RNN", 2, {"nonlinearity": "relu"}, False),
        ("RNN", 4, {"dropout": 0.2}, True),
    ],
)
def test_stack_on_two_threads_equals_one_thread_and_the_layers(
    monkeypatch, mode, layers, kw, packed
):
    from ferro import _intraop
    from ferro.ops import recurrent

    if _intraop._BLAS is None:
        pytest.skip("the BLAS's threads cannot be controlled here: no split to test")
    monkeypatch.setattr(recurrent, "_SPLIT_WORK", 0)  # split these small layers too
    split, run = [], _intraop.run
    monkeypatch.setattr(_intraop, "run", lambda fn, n: split.append(n) or run(fn, n))
    rng = np.random.default_rng(7)
    ferro.manual_seed(0)
    module = getattr(nn, mode)(3, 5, num_layers=layers, **kw).double()
    if packed:
        seqs = [ferro.tensor(rng.normal(size=(n, 3))) for n in (9, 4, 7, 1)]
        x = rnn_utils.pack_sequence(seqs, enforce_sorted=False)
        x.data.requires_grad_(True)
        leaf = x.data
    else:
        shape = (4, 9, 3) if kw.get("batch_first") else (9, 4, 3)
        x = leaf = ferro.tensor(rng.normal(size=shape), requires_grad=True)
    one = _run_stack(module, x, leaf, 1)
    two = _run_stack(module, x, leaf, 2)
    assert split == [1, 1, 2, 2]  # forward and backward, in series and then split
    # Serially an upper layer's input projection is one GEMM, on two threads one per block
    # of steps: OpenBLAS may round a row differently (by an ulp) with other rows around it.
    for a, b in zip(one, two, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)
    # The layer-by-layer path (one recurrent_layer node per layer) gives the same numbers.
    module._stack = module._layers
    by_layer = _run_stack(module, x, leaf, 2)
    for a, b in zip(one, by_layer, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("fail_layer", [0, 1, 2])
@pytest.mark.parametrize("backward", [False, True])
def test_stack_failure_in_one_layer_raises_without_hanging(monkeypatch, fail_layer, backward):
    from ferro import _intraop
    from ferro.ops import recurrent

    name = "layer_backward" if backward else "layer_forward"
    real = getattr(recurrent, name)

    def failing(ctx, cells, *args, **kwargs):
        if kwargs["wave"].layer == fail_layer:
            raise MemoryError(f"layer {fail_layer} failed")
        return real(ctx, cells, *args, **kwargs)

    monkeypatch.setattr(recurrent, name, failing)
    monkeypatch.setattr(recurrent, "_SPLIT_WORK", 0)
    before = _intraop.num_threads()
    _intraop.set_num_threads(2)
    try:
        lstm = nn.LSTM(3, 4, num_layers=3)
        x = ferro.randn(9, 2, 3, requires_grad=True)
        with pytest.raises(MemoryError, match=f"layer {fail_layer} failed"):
            lstm(x)[0].sum().backward()
        monkeypatch.setattr(recurrent, name, real)  # and the pool still works afterwards
        lstm(x)[0].sum().backward()
    finally:
        _intraop.set_num_threads(before)


def test_stack_runs_the_kernels_and_second_derivatives_match_numeric():
    from ferro.testing import gradgradcheck

    lstm = nn.LSTM(3, 4, num_layers=2)
    out, _ = lstm(ferro.randn(5, 2, 3, requires_grad=True))
    out.sum().backward()
    node = out.grad_fn
    assert node.op.name == "recurrent_layer" and node.fused_forward and node.fused_backward

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))
    from opdb import BY_NAME

    (sample,) = [
        s
        for s in BY_NAME["recurrent_layer_stacked"].samples(np.random.default_rng(0))
        if s.label == "GRU-2-packed-dropout"
    ]
    tensors = [None if a is None else ferro.tensor(a, requires_grad=True) for a in sample.args]
    live = [k for k, t in enumerate(tensors) if t is not None]

    def fn(*ts):
        args = list(tensors)
        for k, t in zip(live, ts, strict=True):
            args[k] = t
        return _op_call("recurrent_layer_stacked", args, sample.kwargs)[0]

    assert gradgradcheck(fn, tuple(tensors[k] for k in live))


def test_stack_bad_input_raises_typed_errors_naming_shapes():
    z = ferro.zeros
    layer0 = (z(3, 2, 8), z(2, 2), z(2, 2), z(8, 2), None, None)
    upper = (z(8, 2), None, None, z(2, 2), z(2, 2), z(8, 2), None, None)
    out, *states = ferro.recurrent_layer(*layer0, "LSTM", upper=[upper])
    assert out.shape == (3, 2, 2) and len(states) == 4
    bad = (z(8, 3), *upper[1:])
    with pytest.raises(ShapeError, match=r"layer 1's shapes.*weight_ih \(8, 3\)"):
        ferro.recurrent_layer(*layer0, "LSTM", upper=[bad])
    with pytest.raises(ShapeError, match=r"layer 1's shapes.*mask \(3, 2, 5\)"):
        ferro.recurrent_layer(*layer0, "LSTM", upper=[(*upper[:2], z(3, 2, 5), *upper[3:])])
    with pytest.raises(ArgumentError, match="not reversed"):
        ferro.recurrent_layer(*layer0, "LSTM", reverse=True, upper=[upper])
    with pytest.raises(ArgumentError, match="8 arrays"):
        ferro.recurrent_layer(*layer0, "LSTM", upper=[upper[:7]])


# -- the compiled step loop (Note [Compiled step loop]) ---------------------------------------


def _loop_calls(monkeypatch):
    from ferro._C import recurrent_kernels as K

    calls = []
    for name in ("layer_fwd", "layer_bwd"):
        real = getattr(K, name)
        monkeypatch.setattr(
            K, name, lambda *a, real=real, name=name: calls.append(name) or real(*a)
        )
    return calls


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "mode,layers,kw,packed,split",
    [
        ("LSTM", 2, {}, False, False),
        ("LSTM", 2, {"proj_size": 3, "bidirectional": True}, True, False),
        ("LSTM", 3, {"proj_size": 2, "dropout": 0.3}, True, True),
        ("GRU", 2, {"bidirectional": True, "bias": False}, True, False),
        ("GRU", 3, {"dropout": 0.5}, False, True),
        ("LSTM", 1, {"bias": False}, False, False),
    ],
)
def test_compiled_step_loop_equals_the_python_loop(
    monkeypatch, dtype, mode, layers, kw, packed, split
):
    """Same GEMMs in the same order, the same cell kernels: bit-identical outputs, states and
    gradients, forward and reversed, packed (steps of one row: gemv) or not, with proj_size,
    dropout, and on two threads (the wavefront, a block at a time)."""
    from ferro import _intraop
    from ferro._C import recurrent_kernels as K
    from ferro.ops import recurrent

    if not K.have_blas():
        pytest.skip("no CBLAS found in NumPy's BLAS: the Python loop is the only path")
    if split and _intraop._BLAS is None:
        pytest.skip("the BLAS's threads cannot be controlled here: no split to test")
    monkeypatch.setattr(recurrent, "_SPLIT_WORK", 0 if split else float("inf"))
    calls = _loop_calls(monkeypatch)
    rng = np.random.default_rng(3)
    ferro.manual_seed(0)
    module = getattr(nn, mode)(3, 5, num_layers=layers, **kw).to(dtype)
    if packed:
        seqs = [ferro.tensor(rng.normal(size=(n, 3)).astype(dtype)) for n in (9, 4, 7, 1)]
        x = rnn_utils.pack_sequence(seqs, enforce_sorted=False)
        x.data.requires_grad_(True)
        leaf = x.data
    else:
        x = leaf = ferro.tensor(rng.normal(size=(9, 4, 3)).astype(dtype), requires_grad=True)
    got = {}
    for compiled in (True, False):
        monkeypatch.setattr(recurrent, "_C_LOOP", compiled)
        del calls[:]
        got[compiled] = _run_stack(module, x, leaf, 2 if split else 1)
        directions = 2 if kw.get("bidirectional") else 1
        want = layers * directions if compiled else 0
        # one call per layer and direction, or per block of steps on two threads
        fwd, bwd = calls.count("layer_fwd"), calls.count("layer_bwd")
        assert fwd == bwd == (want * 3 if split and compiled else want), calls
    for a, b in zip(got[True], got[False], strict=True):
        np.testing.assert_array_equal(a, b)


def test_compiled_step_loop_falls_back_without_a_blas(monkeypatch):
    from ferro._C import recurrent_kernels as K
    from ferro.ops import recurrent

    calls = _loop_calls(monkeypatch)
    monkeypatch.setattr(K, "have_blas", lambda: False)
    lstm = nn.LSTM(3, 4, num_layers=2)
    x = ferro.randn(5, 2, 3, requires_grad=True)
    lstm(x)[0].sum().backward()
    assert calls == [] and x.grad is not None
    # and sizes the BLAS calls do not cover (a hidden size of one) run the Python loop too
    monkeypatch.undo()
    calls = _loop_calls(monkeypatch)
    nn.GRU(3, 1)(x)[0].sum().backward()
    assert calls == [] and recurrent._C_LOOP


def _loop_arrays(dtype=np.float64, rows=6, batch=3, hout=4, hidden=4, proj=False):
    z = lambda *s: np.zeros(s, dtype=dtype)  # noqa: E731
    g = 4 * hidden
    fwd = dict(
        x=z(rows, g), h=z(batch, hout), c=z(batch, hidden), w_t=z(hout, g), b_hh=None,
        w_hr=z(hout, hidden) if proj else None, out=z(rows, hout), h_prev=z(rows, hout),
        acts=z(rows, g), c_prev=z(rows, hidden), tc=z(rows, hidden),
        cell_h=z(rows, hidden) if proj else None, hgn=None,
    )  # fmt: skip
    table = (np.array([0, 3], dtype=np.intp), np.array([3, 3], dtype=np.intp))
    return fwd, table


def test_compiled_step_loop_refuses_bad_arrays():
    from ferro._C import recurrent_kernels as K
    from ferro.errors import DtypeError, ReadOnlyError

    if not K.have_blas():
        pytest.skip("no CBLAS found in NumPy's BLAS")
    fwd, table = _loop_arrays()

    def call(table=table, first=0, count=2, d=1, **over):
        a = {**fwd, **over}
        return K.layer_fwd(False, *a.values(), *table, first, count, d)

    call()  # the good arrays run
    with pytest.raises(ShapeError, match=r"acts has shape \(6, 12\), expected \(6, 16\)"):
        call(acts=np.zeros((6, 12)))
    with pytest.raises(DtypeError, match="tc is float32"):
        call(tc=np.zeros((6, 4), dtype=np.float32))
    with pytest.raises(ShapeError, match="C-contiguous"):
        call(h_prev=np.zeros((4, 6)).T)
    ro = np.zeros((6, 4))
    ro.flags.writeable = False
    with pytest.raises(ReadOnlyError, match="out is read-only"):
        call(out=ro)
    with pytest.raises(ArgumentError, match="out overlaps h_prev"):
        shared = np.zeros((6, 4))
        call(out=shared, h_prev=shared)
    with pytest.raises(ArgumentTypeError):
        call(c=[[0.0]])
    # the step table: every step's rows inside the batch and the sequence, the range inside it
    with pytest.raises(ShapeError, match="outside the batch"):
        call(table=(table[0], np.array([3, 4], dtype=np.intp)))
    with pytest.raises(ShapeError, match="outside the batch"):
        call(table=(np.array([0, 4], dtype=np.intp), table[1]))
    with pytest.raises(ArgumentError, match="not in range"):
        call(first=1, count=2)
    with pytest.raises(ArgumentError, match="not in range"):
        call(d=2)
    with pytest.raises(ArgumentError, match="intp"):
        call(table=(table[0].astype(np.int32), table[1]))
    with pytest.raises(ShapeError, match="missing"):
        call(c=None)
    small, t1 = _loop_arrays(hout=1, hidden=1)
    with pytest.raises(ArgumentError, match="do not cover"):
        K.layer_fwd(False, *small.values(), *t1, 0, 2, 1)
    # the backward's checks are the same helpers; one of each kind
    z = np.zeros
    bwd = dict(
        gout=z((6, 4)), gh=z((3, 4)), gc=z((3, 4)), w_hh=z((16, 4)), w_hr=None,
        h_prev=z((6, 4)), acts=z((6, 16)), c_prev=z((6, 4)), tc=z((6, 4)), hgn=None,
        g_in=z((6, 16)), g_hid=None, g_hr=None,
    )  # fmt: skip
    K.layer_bwd(False, *bwd.values(), *table, 1, 2, -1)
    with pytest.raises(ArgumentError, match="g_in overlaps acts"):
        K.layer_bwd(False, *{**bwd, "g_in": bwd["acts"]}.values(), *table, 1, 2, -1)
    with pytest.raises(ShapeError, match=r"gc has shape \(3, 5\)"):
        K.layer_bwd(False, *{**bwd, "gc": z((3, 5))}.values(), *table, 1, 2, -1)


def test_compiled_step_loop_takes_the_int_width_from_the_library(monkeypatch):
    from ferro import _intraop
    from ferro.ops import recurrent

    lib = _intraop.blas_library()
    if lib is None or not hasattr(lib, "scipy_cblas_sgemm64_"):
        pytest.skip("NumPy's BLAS here is not scipy-openblas64")
    got = []
    backend = types.SimpleNamespace(set_blas=lambda *a: got.append(a))
    real = {f: getattr(lib, f"scipy_cblas_{f}64_") for f in ("sgemm", "dgemm", "sgemv", "dgemv")}
    # unsuffixed names from an ILP64 build: the config says so, and the ints are 64-bit
    fake = types.SimpleNamespace(**{f"cblas_{f}": fn for f, fn in real.items()})
    fake.openblas_get_config = lib.scipy_openblas_get_config64_
    monkeypatch.setattr(_intraop, "blas_library", lambda: fake)
    assert recurrent._find_blas(backend) and got[-1][-1] is True
    del fake.openblas_get_config  # no config: the names decide (no 64_ suffix: 32-bit)
    assert recurrent._find_blas(backend) and got[-1][-1] is False
    del fake.cblas_dgemv  # an incomplete set is no set
    assert not recurrent._find_blas(backend) and len(got) == 2
    monkeypatch.setattr(_intraop, "blas_library", lambda: None)
    assert not recurrent._find_blas(backend)


# -- the hidden-unit split of a LSTM's steps (Note [Hidden-unit split]) -------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "layers,kw,packed",
    [
        (2, {}, False),
        (3, {"dropout": 0.3}, True),
        (1, {"bias": False, "batch_first": True}, False),
        (2, {"proj_size": 3}, True),  # steps in one chunk, the big GEMMs in two
    ],
)
def test_lstm_unit_split_is_independent_of_the_threads(monkeypatch, dtype, layers, kw, packed):
    """The same bits on one, two and three threads (the chunks are fixed by the sizes), the
    step loops run in two chunks on up to two threads, and the layers unsplit agree to
    rounding (a chunk's GEMM may round differently from the whole one)."""
    from ferro import _intraop
    from ferro._C import recurrent_kernels as K
    from ferro.ops import recurrent

    if not K.have_blas() or _intraop._BLAS is None:
        pytest.skip("no CBLAS, or the BLAS's threads cannot be controlled here")
    seen, real = [], K.layer_fwd
    monkeypatch.setattr(K, "layer_fwd", lambda *a: seen.append(a[-2:]) or real(*a))
    rng = np.random.default_rng(3)
    ferro.manual_seed(0)
    module = nn.LSTM(3, 7, num_layers=layers, **kw).to(dtype)
    if packed:
        seqs = [ferro.tensor(rng.normal(size=(n, 3)).astype(dtype)) for n in (9, 4, 7, 1)]
        x = rnn_utils.pack_sequence(seqs, enforce_sorted=False)
        x.data.requires_grad_(True)
        leaf = x.data
    else:
        shape = (4, 9, 3) if kw.get("batch_first") else (9, 4, 3)
        x = leaf = ferro.tensor(rng.normal(size=shape).astype(dtype), requires_grad=True)
    whole = _run_stack(module, x, leaf, 2)
    assert all(chunks == 1 for chunks, _ in seen)  # these small layers do not split
    monkeypatch.setattr(recurrent, "_UNIT_SPLIT_WORK", 0)  # split them
    got = {}
    for threads in (1, 2, 3):
        del seen[:]
        got[threads] = _run_stack(module, x, leaf, threads)
        want = (1, 1) if "proj_size" in kw else (2, min(threads, 2))
        assert seen and all(s == want for s in seen), seen
    for threads in (2, 3):
        for a, b in zip(got[1], got[threads], strict=True):
            np.testing.assert_array_equal(a, b)
    tol = dict(rtol=2e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-14)
    for a, b in zip(got[1], whole, strict=True):
        np.testing.assert_allclose(a, b, **tol)


def test_lstm_unit_split_loop_direct_calls_and_refusals():
    """layer_fwd/layer_bwd with more threads than chunks (a thread with no chunk still meets
    every barrier) equal the one-thread call; more than one chunk only for a LSTM without
    weight_hr, and at most one chunk a hidden unit."""
    from ferro._C import recurrent_kernels as K
    from ferro.ops import recurrent

    if not K.have_blas():
        pytest.skip("no CBLAS found in NumPy's BLAS")
    rng = np.random.default_rng(0)
    fwd, table = _loop_arrays(rows=6, batch=3, hout=4, hidden=4)
    for name in ("x", "h", "c", "w_t"):
        fwd[name] = rng.normal(size=fwd[name].shape)
    results = []
    for threads in (1, 3):
        a = {k: None if v is None else v.copy() for k, v in fwd.items()}
        a["w_t"] = np.ascontiguousarray(fwd["w_t"][:, recurrent._unit_order(4, 2)])
        K.layer_fwd(False, *a.values(), *table, 0, 2, 1, 2, threads)
        results.append(a)
    for k in ("out", "h", "c", "acts", "tc", "c_prev", "h_prev"):
        np.testing.assert_array_equal(results[0][k], results[1][k])
    bwd = dict(
        gout=rng.normal(size=(6, 4)), gh=rng.normal(size=(3, 4)), gc=rng.normal(size=(3, 4)),
        w_hh=rng.normal(size=(16, 4)), w_hr=None, h_prev=results[0]["h_prev"],
        acts=results[0]["acts"], c_prev=results[0]["c_prev"], tc=results[0]["tc"], hgn=None,
        g_in=np.zeros((6, 16)), g_hid=None, g_hr=None,
    )  # fmt: skip
    back = []
    for threads in (1, 3):
        b = {k: None if v is None else v.copy() for k, v in bwd.items()}
        K.layer_bwd(False, *b.values(), *table, 1, 2, -1, 2, threads)
        back.append(b)
    for k in ("gh", "gc", "g_in"):
        np.testing.assert_array_equal(back[0][k], back[1][k])
    with pytest.raises(ArgumentError, match="chunks"):
        K.layer_fwd(False, *fwd.values(), *table, 0, 2, 1, 5, 1)  # more chunks than units
    with pytest.raises(ArgumentError, match="chunks"):
        K.layer_fwd(False, *fwd.values(), *table, 0, 2, 1, 2, 0)  # no thread
    proj, t2 = _loop_arrays(hout=3, hidden=4, proj=True)
    with pytest.raises(ArgumentError, match="weight_hr"):
        K.layer_fwd(False, *proj.values(), *t2, 0, 2, 1, 2, 2)


def test_recurrent_layer_input_weights_project_in_the_node():
    """input_weights: layer 0's projection in the node equals linear + recurrent_layer, and
    bad shapes are typed errors naming them."""
    rng = np.random.default_rng(1)
    t = lambda *s: ferro.tensor(rng.normal(size=s), requires_grad=True)  # noqa: E731
    x, w_ih, b_ih, h0, c0, w_hh, b_hh = t(5, 2, 3), t(8, 3), t(8), t(2, 2), t(2, 2), t(8, 2), t(8)
    got = ferro.recurrent_layer(x, h0, c0, w_hh, b_hh, None, "LSTM", input_weights=(w_ih, b_ih))
    xg = ferro.nn.functional.linear(x.reshape(-1, 3), w_ih, b_ih).reshape(5, 2, 8)
    want = ferro.recurrent_layer(xg, h0, c0, w_hh, b_hh, None, "LSTM")
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(_np(a), _np(b), rtol=1e-13)
    gs = ferro.autograd.grad(sum(o.sum() for o in got), [x, w_ih, b_ih, w_hh])
    ws = ferro.autograd.grad(sum(o.sum() for o in want), [x, w_ih, b_ih, w_hh])
    for a, b in zip(gs, ws, strict=True):
        np.testing.assert_allclose(_np(a), _np(b), rtol=1e-12)
    with pytest.raises(ShapeError, match=r"layer 0's shapes.*weight_ih \(8, 4\)"):
        ferro.recurrent_layer(x, h0, c0, w_hh, b_hh, None, "LSTM", input_weights=(t(8, 4), b_ih))
    with pytest.raises(ArgumentError, match="input_weights"):
        ferro.recurrent_layer(x, h0, c0, w_hh, b_hh, None, "LSTM", input_weights=(w_ih,))
