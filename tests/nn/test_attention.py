"""scaled_dot_product_attention beyond the op database (PyTorch oracle on both paths, long
sequences, memory, dropout, errors, differentiable_backward) and nn.MultiheadAttention."""

from __future__ import annotations

import sys
import tracemalloc
import types
from pathlib import Path

import numpy as np
import pytest

import ferro
import ferro.nn.functional as F
from ferro.errors import ArgumentError, DtypeError, ShapeError
from ferro.ops import attention

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))
from opdb import BY_NAME  # noqa: E402


def _run(fn, q, k, v, mask=None, g=None, **kw):
    """Output and gradients (q, k, v, float mask) of ``fn`` on NumPy inputs."""
    ts = [ferro.tensor(a, requires_grad=True) for a in (q, k, v)]
    m = None
    if mask is not None:
        m = ferro.tensor(mask, requires_grad=mask.dtype.kind == "f")
    out = fn(*ts, m, **kw)
    out.backward(ferro.tensor(g if g is not None else np.ones(out.shape, out.dtype)))
    grads = [t.grad.numpy() for t in ts]
    if m is not None and m.requires_grad:
        grads.append(m.grad.numpy())
    return out.detach().numpy(), grads


def _path(block):
    def fn(q, k, v, m, is_causal=False, enable_gqa=False, scale=None):
        return attention._sdpa(q, k, v, m, 0.0, is_causal, scale, enable_gqa, block)

    return fn


CASES = [
    # (q, k, v shapes, mask kind and shape, causal, gqa)
    ((2, 3, 9, 8), (2, 3, 11, 8), (2, 3, 11, 5), None, False, False),
    ((2, 3, 11, 8), (2, 3, 11, 8), (2, 3, 11, 8), None, True, False),
    ((2, 3, 9, 8), (2, 3, 11, 8), (2, 3, 11, 5), ("bool", (9, 11)), False, False),
    ((2, 3, 9, 8), (2, 3, 11, 8), (2, 3, 11, 5), ("float", (2, 1, 9, 11)), False, False),
    ((2, 4, 9, 8), (2, 2, 11, 8), (2, 2, 11, 5), ("float", (4, 9, 11)), False, True),
    ((2, 4, 11, 8), (2, 1, 11, 8), (2, 1, 11, 5), None, True, True),
]


def _case(rng, qs, ks, vs, mask):
    q, k, v = (rng.standard_normal(s) for s in (qs, ks, vs))
    m = None
    if mask is not None:
        kind, shape = mask
        m = rng.random(shape) > 0.3 if kind == "bool" else rng.standard_normal(shape)
    return q, k, v, m


@pytest.mark.torch
@pytest.mark.parametrize("block", [0, 4], ids=["dense", "blockwise"])
@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sdpa_matches_torch_values_and_grads(case, block, dtype):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    qs, ks, vs, mask, causal, gqa = case
    q, k, v, m = _case(rng, qs, ks, vs, mask)
    q, k, v = (a.astype(dtype) for a in (q, k, v))
    if m is not None and m.dtype.kind == "f":
        m = m.astype(dtype)
    g = rng.standard_normal(qs[:-1] + vs[-1:]).astype(dtype)
    out, grads = _run(_path(block), q, k, v, m, g, is_causal=causal, enable_gqa=gqa)

    tt = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    tm = None if m is None else torch.tensor(m, requires_grad=m.dtype.kind == "f")
    tout = torch.nn.functional.scaled_dot_product_attention(
        *tt, attn_mask=tm, is_causal=causal, enable_gqa=gqa
    )
    tout.backward(torch.tensor(g))
    want = [t.grad.numpy() for t in tt] + (
        [tm.grad.numpy()] if tm is not None and tm.requires_grad else []
    )
    tol = 2e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, tout.detach().numpy(), rtol=tol, atol=tol)
    assert len(grads) == len(want)
    for got, exp in zip(grads, want, strict=True):
        np.testing.assert_allclose(got, exp, rtol=10 * tol, atol=10 * tol)


@pytest.mark.parametrize("block", [0, 4], ids=["dense", "blockwise"])
@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_sdpa_chunks_and_parts_give_the_serial_results(case, block, monkeypatch):
    # One head per chunk, the chunks split over the intra-op threads (when there are two): the
    # same values and gradients as one chunk on one thread, since each head is independent.
    rng = np.random.default_rng(5)
    qs, ks, vs, mask, causal, gqa = case
    q, k, v, m = _case(rng, qs, ks, vs, mask)
    g = rng.standard_normal(qs[:-1] + vs[-1:])
    kw = {"is_causal": causal, "enable_gqa": gqa}
    monkeypatch.setattr(attention, "CHUNK_BYTES", 1 << 40)
    monkeypatch.setattr(attention, "PART_MIN_WORK", 1 << 62)
    monkeypatch.setattr(attention, "KEEP_TILES_BYTES", 0)  # and the blockwise tiles recomputed
    serial = _run(_path(block), q, k, v, m, g, **kw)
    monkeypatch.setattr(attention, "KEEP_TILES_BYTES", 1 << 24)
    chunks = []
    monkeypatch.setattr(attention, "CHUNK_BYTES", 1)
    monkeypatch.setattr(attention, "PART_MIN_WORK", 0)
    for threads in (1, 2):
        before = ferro.get_num_threads()
        ferro.set_num_threads(threads)
        try:
            chunks.append(_run(_path(block), q, k, v, m, g, **kw))
        finally:
            ferro.set_num_threads(before)
    for out, grads in chunks:
        np.testing.assert_allclose(out, serial[0], rtol=1e-12, atol=1e-12)
        for got, want in zip(grads, serial[1], strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "shapes",
    [
        ((5, 4), (7, 4), (3, 7, 2)),
        ((1, 5, 4), (2, 7, 4), (2, 1, 7, 2)),
        ((2, 5, 4),) * 2 + ((2, 5, 3),),
    ],
    ids=["v-batch", "v-broadcast", "plain"],
)
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_blockwise_matches_dense_when_value_has_the_longer_batch(shapes, causal):
    # The batch is set by value alone here: the blockwise tiles must still take its shape.
    rng = np.random.default_rng(6)
    q, k, v = (rng.standard_normal(s) for s in shapes)
    g = rng.standard_normal(
        np.broadcast_shapes(*(a.shape[:-2] for a in (q, k, v))) + (5, v.shape[-1])
    )
    dense = _run(_path(0), q, k, v, None, g, is_causal=causal)
    block = _run(_path(2), q, k, v, None, g, is_causal=causal)
    np.testing.assert_allclose(block[0], dense[0], rtol=1e-12, atol=1e-12)
    for got, want in zip(block[1], dense[1], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_sdpa_no_keys_gives_zeros_on_both_paths():
    rng = np.random.default_rng(7)
    q, k, v = rng.standard_normal((2, 5, 4)), np.zeros((2, 0, 4)), np.zeros((2, 0, 3))
    for block in (0, 2):
        out, grads = _run(_path(block), q, k, v, None, np.ones((2, 5, 3)))
        assert out.shape == (2, 5, 3) and not out.any() and not grads[0].any()


def test_sdpa_slicer_cuts_the_first_long_batch_axis(monkeypatch):
    monkeypatch.setattr(attention, "CHUNK_BYTES", 2 * 16 * 4 * 4)  # two heads' tiles a chunk
    sl = attention._Slicer(np, (1, 6), 16, 4, 8, 4, 64)
    assert sl.axis == 1 and sl.chunks == [(0, 2), (2, 4), (4, 6)]
    a, b = np.zeros((6, 16, 8)), np.zeros((1, 1, 16, 8))
    assert sl.take(a, (2, 4)).shape == (2, 16, 8) and sl.take(b, (2, 4)) is b
    assert attention._Slicer(np, (1, 1), 16, 4, 8, 4, 64).chunks == [(0, 1)]


@pytest.mark.torch
def test_sdpa_long_sequence_takes_blockwise_path_and_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    T = attention.DENSE_MAX_KEYS + 37  # several blocks, a ragged last one
    q, k, v = (rng.standard_normal((1, 2, T, 8)).astype(np.float32) for _ in range(3))
    ts = [ferro.tensor(a, requires_grad=True) for a in (q, k, v)]
    out = F.scaled_dot_product_attention(*ts, is_causal=True)
    assert out.grad_fn.block == attention.BLOCK  # the memory-efficient path ran
    out.sum().backward()
    tt = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    tout = torch.nn.functional.scaled_dot_product_attention(*tt, is_causal=True)
    tout.sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), atol=2e-5)
    for a, b in zip(ts, tt, strict=True):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), atol=1e-4)


@pytest.mark.parametrize("keep", [True, False], ids=["tiles-kept", "recomputed"])
def test_sdpa_blockwise_peak_memory_below_two_score_matrices_per_head(keep, monkeypatch):
    # Kept tiles (the causal half of one (T, T) matrix per head) stay below the goal's two
    # matrices; recomputing them from the logsumexp, below one.
    if not keep:
        monkeypatch.setattr(attention, "KEEP_TILES_BYTES", 0)
    rng = np.random.default_rng(3)
    B, H, T, D = 1, 2, 512, 16
    q, k, v = (ferro.tensor(rng.standard_normal((B, H, T, D)).astype(np.float32)) for _ in "qkv")
    for t in (q, k, v):
        t.requires_grad_(True)
    two_matrices = 2 * B * H * T * T * 4
    tracemalloc.start()
    try:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.sum().backward()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out.grad_fn is not None
    assert peak < (two_matrices if keep else two_matrices / 2), (peak, two_matrices)


def test_sdpa_blockwise_kept_tiles_give_the_recomputed_gradients_twice(monkeypatch):
    # The backward rescales the forward's kept tiles without writing them: a second backward
    # (retain_graph) gives the same gradients, and both match the recomputing path.
    rng = np.random.default_rng(8)
    q, k, v = (rng.standard_normal((2, 3, 11, 4)) for _ in range(3))
    m = rng.standard_normal((11, 11))
    g = rng.standard_normal((2, 3, 11, 4))
    monkeypatch.setattr(attention, "KEEP_TILES_BYTES", 0)
    want = _run(_path(4), q, k, v, m, g, is_causal=True)
    monkeypatch.setattr(attention, "KEEP_TILES_BYTES", 1 << 24)
    ts = [ferro.tensor(a, requires_grad=True) for a in (q, k, v, m)]
    out = _path(4)(*ts, is_causal=True)
    assert out.grad_fn.tiles is not None
    for _ in range(2):
        for t in ts:
            t.grad = None
        out.backward(ferro.tensor(g), retain_graph=True)
        np.testing.assert_allclose(out.detach().numpy(), want[0], rtol=1e-13, atol=1e-13)
        for t, w in zip(ts, want[1], strict=True):
            np.testing.assert_allclose(t.grad.numpy(), w, rtol=1e-12, atol=1e-12)


def test_sdpa_row_that_sees_no_key_gives_zero_output_and_grads():
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((3, 4)) for _ in range(3))
    mask = np.ones((3, 3), bool)
    mask[1] = False
    for block in (0, 2):
        out, grads = _run(_path(block), q, k[:3], v[:3], mask)
        assert np.all(out[1] == 0) and np.all(np.isfinite(out))
        assert np.all(grads[0][1] == 0) and all(np.all(np.isfinite(g)) for g in grads)


def test_sdpa_dropout_is_reproducible_and_scales_kept_weights():
    rng = np.random.default_rng(5)
    q, k, v = (ferro.tensor(rng.standard_normal((2, 6, 4))) for _ in range(3))
    ferro.manual_seed(7)
    a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    ferro.manual_seed(7)
    b = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    plain = F.scaled_dot_product_attention(q, k, v)
    assert not np.allclose(a.numpy(), plain.numpy())
    # With v = identity rows the output is the dropped, rescaled weights themselves.
    eye = ferro.tensor(np.broadcast_to(np.eye(6), (2, 6, 6)).copy())
    w = F.scaled_dot_product_attention(q, k, eye, dropout_p=0.5).numpy()
    p = F.scaled_dot_product_attention(q, k, eye).numpy()
    kept = w != 0
    np.testing.assert_allclose(w[kept], 2 * p[kept], rtol=1e-12)
    assert 0.3 < kept.mean() < 0.7


def test_sdpa_dropout_gradcheck_with_fixed_mask():
    rng = np.random.default_rng(6)
    q, k, v = (ferro.tensor(rng.standard_normal((2, 3, 4)), requires_grad=True) for _ in "qkv")

    def f(q, k, v):
        ferro.manual_seed(3)
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.3)

    assert ferro.testing.gradcheck(f, (q, k, v))


@pytest.mark.parametrize(
    "args, kwargs, error, words",
    [
        (((2, 3, 4), (2, 5, 3), (2, 5, 4)), {}, ShapeError, ["(2, 3, 4)", "(2, 5, 3)"]),
        (((2, 3, 4), (2, 5, 4), (2, 6, 4)), {}, ShapeError, ["(2, 5, 4)", "(2, 6, 4)"]),
        (((2, 3, 4), (3, 5, 4), (3, 5, 4)), {}, ShapeError, ["batch", "(2, 3, 4)"]),
        (((1, 3, 2, 4), (1, 2, 5, 4), (1, 2, 5, 4)), {"enable_gqa": True}, ShapeError, ["heads"]),
        (((2, 3, 4), (2, 5, 4), (2, 5, 4)), {"mask": (4, 5)}, ShapeError, ["(4, 5)", "(2, 3, 5)"]),
        (((2, 3, 4), (2, 5, 4), (2, 5, 4)), {"dropout_p": 1.5}, ArgumentError, ["dropout_p"]),
    ],
)
def test_sdpa_bad_input_raises_typed_error_naming_shapes(args, kwargs, error, words):
    ts = [ferro.zeros(*s) for s in args]
    kwargs = dict(kwargs)
    if "mask" in kwargs:
        kwargs["attn_mask"] = ferro.zeros(*kwargs.pop("mask"))
    with pytest.raises(error) as info:
        F.scaled_dot_product_attention(*ts, **kwargs)
    for w in words:
        assert w in str(info.value)


def test_sdpa_mixed_dtypes_and_int_mask_raise_dtype_error():
    q = ferro.zeros(2, 3, 4)
    with pytest.raises(DtypeError, match="float64"):
        F.scaled_dot_product_attention(q, q, q.to(ferro.float64))
    with pytest.raises(DtypeError, match="attn_mask"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=ferro.zeros(3, 3, dtype=ferro.int64))


def _fake_ctx(node):
    # What the create_graph engine hands differentiable_backward: the node's attributes, with
    # ctx.saved as ferro Tensors.
    attrs = {n: getattr(node, n) for n in ("has_mask", "has_drop", "groups", "scale", "is_causal")}
    return types.SimpleNamespace(saved=tuple(ferro.tensor(a) for a in node.saved), **attrs)


@pytest.mark.parametrize(
    "name", ["scaled_dot_product_attention", "scaled_dot_product_attention_blockwise"]
)
def test_differentiable_backward_agrees_with_backward(name):
    op = BY_NAME[name]
    rng = np.random.default_rng(0)
    for sample in op.samples(np.random.default_rng(0)):
        ts = [
            ferro.tensor(a, requires_grad=a.dtype.kind == "f") if isinstance(a, np.ndarray) else a
            for a in sample.args
        ]
        out = op.fn(*ts, **sample.kwargs)
        gy = rng.standard_normal(out.shape)
        node = out.grad_fn
        out.backward(ferro.tensor(gy), retain_graph=True)
        got = attention._differentiable_backward(_fake_ctx(node), ferro.tensor(gy))
        for t, g in zip(ts, got, strict=False):
            if g is None or not getattr(t, "requires_grad", False):
                continue
            np.testing.assert_allclose(
                g.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-12, err_msg=sample.label
            )


def test_differentiable_backward_gives_second_derivatives():
    # d/dq of <differentiable_backward's gq, w>, against central differences.
    rng = np.random.default_rng(8)
    q0, k0, v0 = (rng.standard_normal((2, 3, 4)) for _ in range(3))
    gy0 = rng.standard_normal((2, 3, 4))
    w = rng.standard_normal((2, 3, 4))

    def f(qa):
        q = ferro.tensor(qa, requires_grad=True)
        out = F.scaled_dot_product_attention(q, ferro.tensor(k0), ferro.tensor(v0), is_causal=True)
        ctx = _fake_ctx(out.grad_fn)
        ctx.saved = (q,) + ctx.saved[1:]
        gq = attention._differentiable_backward(ctx, ferro.tensor(gy0))[0]
        return (gq * ferro.tensor(w)).sum(), q

    val, q = f(q0)
    val.backward()
    eps = 1e-6
    num = np.zeros_like(q0)
    for i in np.ndindex(q0.shape):
        d = np.zeros_like(q0)
        d[i] = eps
        num[i] = (f(q0 + d)[0].item() - f(q0 - d)[0].item()) / (2 * eps)
    np.testing.assert_allclose(q.grad.numpy(), num, rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------- nn.MultiheadAttention

N_, H_, L_, S_ = 3, 2, 5, 6


def _mha_pair(torch, kw, batch_first=False):
    torch.manual_seed(0)
    tm = torch.nn.MultiheadAttention(8, H_, dtype=torch.float64, batch_first=batch_first, **kw)
    fm = ferro.nn.MultiheadAttention(8, H_, dtype=ferro.float64, batch_first=batch_first, **kw)
    assert list(tm.state_dict()) == list(fm.state_dict())
    fm.load_state_dict({k: ferro.tensor(v.numpy()) for k, v in tm.state_dict().items()})
    return tm.eval(), fm.eval()


MHA_CASES = [
    ({}, {}),
    ({}, {"self": True}),
    ({}, {"need_weights": False}),
    ({}, {"average_attn_weights": False}),
    ({}, {"batch_first": True}),
    ({}, {"unbatched": True}),
    ({"kdim": 4, "vdim": 5}, {}),
    ({"bias": False}, {"need_weights": False}),
    (
        {"add_bias_kv": True, "add_zero_attn": True},
        {"attn_mask": "bool", "key_padding_mask": "bool"},
    ),
    ({}, {"attn_mask": "float3d", "need_weights": False}),
    ({}, {"key_padding_mask": "float", "need_weights": False, "batch_first": True}),
    ({}, {"self": True, "attn_mask": "causal", "is_causal": True, "need_weights": False}),
]


@pytest.mark.torch
@pytest.mark.parametrize("kw, call", MHA_CASES, ids=[str(i) for i in range(len(MHA_CASES))])
def test_multihead_attention_matches_torch_with_loaded_state_dict(kw, call):
    torch = pytest.importorskip("torch")
    call = dict(call)
    batch_first, unbatched = call.pop("batch_first", False), call.pop("unbatched", False)
    self_attn = call.pop("self", False)
    tm, fm = _mha_pair(torch, kw, batch_first)
    rng = np.random.default_rng(0)
    S = L_ if self_attn else S_

    def shape(n, e):
        return (n, e) if unbatched else (N_, n, e) if batch_first else (n, N_, e)

    q = rng.standard_normal(shape(L_, 8))
    k = rng.standard_normal(shape(S, kw.get("kdim", 8)))
    v = rng.standard_normal(shape(S, kw.get("vdim", 8)))
    masks = {
        "bool": lambda: rng.random((L_, S)) > 0.7,
        "float3d": lambda: rng.standard_normal((N_ * H_, L_, S)),
        "causal": lambda: np.triu(np.full((L_, S), -np.inf), 1),
    }
    pads = {
        "bool": lambda: rng.random((N_, S)) > 0.7,
        "float": lambda: rng.standard_normal((N_, S)),
    }
    args = dict(call)
    if "attn_mask" in args:
        args["attn_mask"] = masks[args["attn_mask"]]()
    if "key_padding_mask" in args:
        args["key_padding_mask"] = pads[args["key_padding_mask"]]()

    def run(lib, mod):
        ts = [lib.tensor(a, requires_grad=True) for a in (q, k, v)]
        if self_attn:
            ts = [ts[0]] * 3
        a = {n: lib.tensor(x) if isinstance(x, np.ndarray) else x for n, x in args.items()}
        out, w = mod(*ts, **a)
        out.sum().backward()
        grads = [t.grad.numpy() for t in ts] + [p.grad.numpy() for _, p in mod.named_parameters()]
        return out.detach().numpy(), None if w is None else w.detach().numpy(), grads

    t_out, t_w, t_grads = run(torch, tm)
    f_out, f_w, f_grads = run(ferro, fm)
    np.testing.assert_allclose(f_out, t_out, rtol=1e-10, atol=1e-12)
    assert (f_w is None) == (t_w is None)
    if t_w is not None:
        np.testing.assert_allclose(f_w, t_w, rtol=1e-10, atol=1e-12)
    for a, b in zip(f_grads, t_grads, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11)


def test_multihead_attention_parameters_and_init_follow_pytorch():
    m = ferro.nn.MultiheadAttention(16, 4, add_bias_kv=True)
    shapes = {n: tuple(p.shape) for n, p in m.named_parameters()}
    assert shapes == {
        "in_proj_weight": (48, 16),
        "in_proj_bias": (48,),
        "bias_k": (1, 1, 16),
        "bias_v": (1, 1, 16),
        "out_proj.weight": (16, 16),
        "out_proj.bias": (16,),
    }
    assert np.all(m.in_proj_bias.detach().numpy() == 0)
    assert np.all(m.out_proj.bias.detach().numpy() == 0)
    bound = np.sqrt(6 / (16 + 48))  # xavier-uniform over the packed (3E, E) weight
    assert np.abs(m.in_proj_weight.detach().numpy()).max() <= bound
    m2 = ferro.nn.MultiheadAttention(16, 4, kdim=8, vdim=4, bias=False)
    names = [n for n, _ in m2.named_parameters()]
    assert names == ["q_proj_weight", "k_proj_weight", "v_proj_weight", "out_proj.weight"]
    assert tuple(m2.k_proj_weight.shape) == (16, 8) and tuple(m2.v_proj_weight.shape) == (16, 4)


def test_multihead_attention_dropout_only_in_training():
    m = ferro.nn.MultiheadAttention(8, 2, dropout=0.5, batch_first=True)
    x = ferro.randn(2, 4, 8)
    m.eval()
    a, _ = m(x, x, x)
    b, _ = m(x, x, x)
    np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    m.train()
    c, _ = m(x, x, x, need_weights=False)
    assert not np.allclose(a.detach().numpy(), c.detach().numpy())


@pytest.mark.parametrize(
    "build, call, error, words",
    [
        (lambda: ferro.nn.MultiheadAttention(10, 3), None, ArgumentError, ["10", "3", "divisible"]),
        (
            None,
            lambda m: m(ferro.zeros(5, 2, 6), ferro.zeros(5, 2, 6), ferro.zeros(5, 2, 6)),
            ShapeError,
            ["(5, 2, 6)", "8"],
        ),
        (
            None,
            lambda m: m(ferro.zeros(5, 2, 8), ferro.zeros(6, 3, 8), ferro.zeros(6, 3, 8)),
            ShapeError,
            ["batch", "(5, 2, 8)", "(6, 3, 8)"],
        ),
        (
            None,
            lambda m: m(ferro.zeros(5, 2, 8), ferro.zeros(6, 2, 8), ferro.zeros(7, 2, 8)),
            ShapeError,
            ["(6, 2, 8)", "(7, 2, 8)"],
        ),
        (
            None,
            lambda m: m(
                ferro.zeros(5, 2, 8),
                ferro.zeros(6, 2, 8),
                ferro.zeros(6, 2, 8),
                attn_mask=ferro.zeros(5, 5),
            ),
            ShapeError,
            ["attn_mask", "(5, 5)", "(5, 6)"],
        ),
        (
            None,
            lambda m: m(
                ferro.zeros(5, 2, 8),
                ferro.zeros(6, 2, 8),
                ferro.zeros(6, 2, 8),
                key_padding_mask=ferro.zeros(2, 5),
            ),
            ShapeError,
            ["key_padding_mask", "(2, 5)", "(2, 6)"],
        ),
        (
            None,
            lambda m: m(
                ferro.zeros(5, 2, 8), ferro.zeros(5, 2, 8), ferro.zeros(5, 2, 8), is_causal=True
            ),
            ArgumentError,
            ["is_causal", "attn_mask"],
        ),
    ],
)
def test_multihead_attention_bad_input_raises_typed_error(build, call, error, words):
    with pytest.raises(error) as info:
        m = build() if build else ferro.nn.MultiheadAttention(8, 2)
        call(m)
    for w in words:
        assert w in str(info.value)


@pytest.mark.parametrize(
    "block, kw",
    [(0, {}), (2, {"is_causal": True}), (0, {"enable_gqa": True}), (2, {"enable_gqa": True})],
)
def test_sdpa_gradgradcheck_through_the_engine(block, kw):
    rng = np.random.default_rng(9)
    kv_heads = 2 if kw.get("enable_gqa") else 4
    q = ferro.tensor(rng.standard_normal((1, 4, 3, 2)), requires_grad=True)
    k = ferro.tensor(rng.standard_normal((1, kv_heads, 4, 2)), requires_grad=True)
    v = ferro.tensor(rng.standard_normal((1, kv_heads, 4, 2)), requires_grad=True)
    causal, gqa = kw.get("is_causal", False), kw.get("enable_gqa", False)

    def f(q, k, v):
        return attention._sdpa(q, k, v, None, 0.0, causal, None, gqa, block)

    assert ferro.testing.gradgradcheck(f, (q, k, v))


def test_sdpa_gradgradcheck_with_float_and_bool_masks():
    rng = np.random.default_rng(10)
    q = ferro.tensor(rng.standard_normal((3, 2)), requires_grad=True)
    k = ferro.tensor(rng.standard_normal((4, 2)), requires_grad=True)
    m = ferro.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    assert ferro.testing.gradgradcheck(
        lambda q, k, m: F.scaled_dot_product_attention(q, k, k, attn_mask=m), (q, k, m)
    )
    keep = ferro.tensor(rng.random((3, 4)) > 0.3)
    assert ferro.testing.gradgradcheck(
        lambda q, k: F.scaled_dot_product_attention(q, k, k, attn_mask=keep), (q, k)
    )
