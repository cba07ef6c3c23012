"""Transformer layers against PyTorch with loaded state dicts (eval mode), their parameter
names, masks and errors; the Transformer hot spots (pow's fast exponents, the embedding
backward, tanh-GELU)."""

from __future__ import annotations

import numpy as np
import pytest

import ferro
from ferro.errors import ArgumentError, ShapeError

needs_layer_norm = pytest.mark.skipif(
    not hasattr(ferro.nn, "LayerNorm"), reason="needs nn.LayerNorm (the normalization family)"
)


def _pair(torch, name, *args, **kw):
    torch.manual_seed(0)
    tm = getattr(torch.nn, name)(*args, dtype=torch.float64, **kw)
    fm = getattr(ferro.nn, name)(*args, dtype=ferro.float64, **kw)
    assert list(tm.state_dict()) == list(fm.state_dict())
    fm.load_state_dict({k: ferro.tensor(v.numpy()) for k, v in tm.state_dict().items()})
    return tm.eval(), fm.eval()


def _grads(lib, mod, arrays, call):
    ts = [lib.tensor(a, requires_grad=True) for a in arrays]
    out = call(mod, *ts)
    out.sum().backward()
    grads = [t.grad.numpy() for t in ts] + [p.grad.numpy() for _, p in mod.named_parameters()]
    return out.detach().numpy(), grads


def _check(torch, tm, fm, arrays, call_torch, call_ferro):
    t_out, t_grads = _grads(torch, tm, arrays, call_torch)
    f_out, f_grads = _grads(ferro, fm, arrays, call_ferro)
    np.testing.assert_allclose(f_out, t_out, rtol=1e-9, atol=1e-10)
    for a, b in zip(f_grads, t_grads, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)


LAYER_CASES = [
    {},
    {"norm_first": True},
    {"activation": "gelu", "batch_first": True},
    {"bias": False, "layer_norm_eps": 1e-3},
]


@needs_layer_norm
@pytest.mark.torch
@pytest.mark.parametrize("kw", LAYER_CASES, ids=[str(i) for i in range(len(LAYER_CASES))])
def test_encoder_layer_matches_torch(kw):
    torch = pytest.importorskip("torch")
    tm, fm = _pair(torch, "TransformerEncoderLayer", 8, 2, dim_feedforward=16, dropout=0.0, **kw)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5, 8) if kw.get("batch_first") else (5, 3, 8))
    mask = np.triu(np.full((5, 5), -np.inf), 1)
    pad = np.zeros((3, 5), bool)
    pad[1, -2:] = True

    def call(lib):
        return lambda m, x: m(x, src_mask=lib.tensor(mask), src_key_padding_mask=lib.tensor(pad))

    _check(torch, tm, fm, [x], call(torch), call(ferro))


@needs_layer_norm
@pytest.mark.torch
@pytest.mark.parametrize("kw", LAYER_CASES, ids=[str(i) for i in range(len(LAYER_CASES))])
def test_decoder_layer_matches_torch(kw):
    torch = pytest.importorskip("torch")
    tm, fm = _pair(torch, "TransformerDecoderLayer", 8, 2, dim_feedforward=16, dropout=0.0, **kw)
    rng = np.random.default_rng(1)
    tgt, mem = rng.standard_normal((4, 3, 8)), rng.standard_normal((6, 3, 8))
    if kw.get("batch_first"):
        tgt, mem = tgt.transpose(1, 0, 2).copy(), mem.transpose(1, 0, 2).copy()
    mask = np.triu(np.full((4, 4), -np.inf), 1)

    def call(lib):
        return lambda m, t, s: m(t, s, tgt_mask=lib.tensor(mask), tgt_is_causal=True)

    _check(torch, tm, fm, [tgt, mem], call(torch), call(ferro))


@needs_layer_norm
@pytest.mark.torch
def test_transformer_matches_torch_with_loaded_state_dict():
    torch = pytest.importorskip("torch")
    kw = {"num_encoder_layers": 2, "num_decoder_layers": 2, "dim_feedforward": 16}
    tm, fm = _pair(torch, "Transformer", 8, 2, dropout=0.0, batch_first=True, **kw)
    rng = np.random.default_rng(2)
    src, tgt = rng.standard_normal((2, 5, 8)), rng.standard_normal((2, 4, 8))

    def call(lib, cls):
        mask = cls.generate_square_subsequent_mask(4, dtype=lib.float64)
        return lambda m, s, t: m(s, t, tgt_mask=mask)

    _check(
        torch,
        tm,
        fm,
        [src, tgt],
        call(torch, torch.nn.Transformer),
        call(ferro, ferro.nn.Transformer),
    )


@needs_layer_norm
@pytest.mark.torch
def test_encoder_stack_with_final_norm_matches_torch():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    layer_t = torch.nn.TransformerEncoderLayer(8, 2, 16, 0.0, dtype=torch.float64)
    tm = torch.nn.TransformerEncoder(layer_t, 3, norm=torch.nn.LayerNorm(8, dtype=torch.float64))
    layer_f = ferro.nn.TransformerEncoderLayer(8, 2, 16, 0.0, dtype=ferro.float64)
    fm = ferro.nn.TransformerEncoder(layer_f, 3, norm=ferro.nn.LayerNorm(8, dtype=ferro.float64))
    assert list(tm.state_dict()) == list(fm.state_dict())
    fm.load_state_dict({k: ferro.tensor(v.numpy()) for k, v in tm.state_dict().items()})
    x = np.random.default_rng(3).standard_normal((5, 2, 8))
    _check(torch, tm.eval(), fm.eval(), [x], lambda m, x: m(x), lambda m, x: m(x))


def test_generate_square_subsequent_mask():
    m = ferro.nn.Transformer.generate_square_subsequent_mask(3).numpy()
    want = np.array([[0, -np.inf, -np.inf], [0, 0, -np.inf], [0, 0, 0]])
    np.testing.assert_array_equal(m, want)


@needs_layer_norm
def test_stacked_layers_are_independent_copies():
    layer = ferro.nn.TransformerEncoderLayer(8, 2, 16)
    enc = ferro.nn.TransformerEncoder(layer, 2)
    a, b = enc.layers[0].linear1.weight, enc.layers[1].linear1.weight
    assert a is not b
    np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    assert len(list(enc.parameters())) == 2 * len(list(layer.parameters()))


@needs_layer_norm
def test_callable_activation_and_bad_activation():
    layer = ferro.nn.TransformerEncoderLayer(8, 2, 16, 0.0, activation=ferro.nn.functional.silu)
    x = ferro.randn(3, 2, 8)
    assert tuple(layer(x).shape) == (3, 2, 8)
    with pytest.raises(ArgumentError, match="tanh"):
        ferro.nn.TransformerEncoderLayer(8, 2, activation="tanh")


@needs_layer_norm
def test_bad_shapes_raise_typed_errors_naming_shapes():
    model = ferro.nn.Transformer(8, 2, 1, 1, 16)
    with pytest.raises(ShapeError, match=r"\(5, 2, 8\).*\(4, 3, 8\)"):
        model(ferro.randn(5, 2, 8), ferro.randn(4, 3, 8))
    with pytest.raises(ShapeError, match="d_model"):
        model(ferro.randn(5, 2, 6), ferro.randn(4, 2, 6))
    with pytest.raises(ArgumentError, match="divisible"):
        ferro.nn.TransformerEncoderLayer(10, 3)
    layer = ferro.nn.TransformerEncoderLayer(8, 2, 16)
    with pytest.raises(ShapeError, match=r"src_mask|attn_mask"):
        layer(ferro.randn(5, 2, 8), src_mask=ferro.zeros(4, 4))


# ---------------------------------------------------------------- hot spots


@pytest.mark.parametrize("b", [2, 3, 4, 1, 0, 0.5, 1.5, -1, -2, -0.5, 2.5])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pow_fast_exponents_match_numpy_power_forward_and_backward(b, dtype):
    rng = np.random.default_rng(0)
    a = rng.uniform(0.2, 2.0, (4, 5)).astype(dtype)
    if float(b).is_integer():
        a[0] *= -1  # integer exponents of negative bases
    x = ferro.tensor(a, requires_grad=True)
    y = x**b
    g = rng.standard_normal(a.shape).astype(dtype)
    y.backward(ferro.tensor(g))
    rtol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(y.detach().numpy(), np.power(a, dtype(b)), rtol=rtol)
    want = g * b * np.power(a, dtype(b - 1)) if b != 0 else np.zeros_like(a)
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=rtol, atol=rtol)
    assert y.dtype == dtype and x.grad.dtype == dtype


def test_pow_fast_exponent_gradcheck_and_second_derivative_input_kept():
    x = ferro.tensor(np.random.default_rng(1).uniform(0.5, 2, (3, 4)), requires_grad=True)
    for b in (3, 0.5, -1, 1.5):
        assert ferro.testing.gradcheck(lambda t, b=b: t**b, (x,))
    y = x**1  # a fresh array, never the input's
    assert not np.shares_memory(y.detach().numpy(), x.detach().numpy())


@pytest.mark.parametrize("padding_idx", [None, 3])
def test_embedding_backward_sums_repeated_rows_like_add_at(padding_idx):
    rng = np.random.default_rng(2)
    V, D = 11, 5
    idx = rng.integers(0, V, (9, 13))  # 117 lookups: the sorted path; every row repeats
    w = ferro.tensor(rng.standard_normal((V, D)), requires_grad=True)
    out = ferro.nn.functional.embedding(ferro.tensor(idx), w, padding_idx=padding_idx)
    g = rng.standard_normal(out.shape)
    out.backward(ferro.tensor(g))
    want = np.zeros((V, D))
    np.add.at(want, idx, g)
    if padding_idx is not None:
        want[padding_idx] = 0
    np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-13, atol=1e-13)


def test_embedding_backward_from_sum_broadcast_gradient():
    idx = np.arange(100) % 7
    w = ferro.tensor(np.ones((8, 3)), requires_grad=True)
    ferro.nn.functional.embedding(ferro.tensor(idx), w).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy()[:, 0], np.bincount(idx, minlength=8))
