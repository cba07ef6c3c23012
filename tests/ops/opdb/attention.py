"""Op database entries for ferro/ops/attention.py."""

from __future__ import annotations

import numpy as np

import ferro
from ferro.ops import attention
from opdb.core import OpInfo, Sample, uniform


def sdpa_ref(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """Attention written plainly: every weight materialised, key/value heads repeated for GQA,
    a row that sees no key giving 0 (as PyTorch)."""
    L, S = q.shape[-2], k.shape[-2]
    if enable_gqa and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        k = np.repeat(k, q.shape[-3] // k.shape[-3], axis=-3)
        v = np.repeat(v, q.shape[-3] // v.shape[-3], axis=-3)
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ np.swapaxes(k, -1, -2) * scale
    keep = np.ones((L, S), bool)
    if is_causal:
        keep = np.tril(keep)
    if attn_mask is not None and attn_mask.dtype == bool:
        keep = keep & attn_mask
    elif attn_mask is not None:
        s = s + attn_mask
    s = np.where(keep, s, -np.inf)
    seen = np.isfinite(s).any(axis=-1, keepdims=True)
    m = np.where(seen, s.max(axis=-1, keepdims=True, initial=-np.inf), 0)
    e = np.exp(s - m)
    p = e / np.where(seen, e.sum(axis=-1, keepdims=True), 1)
    return p @ v


def _sdpa(q, k, v, attn_mask=None, **kw):
    return ferro.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask, **kw)


def _blockwise(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    # The memory-efficient path on small shapes: blocks of 2 keys (3 keys: a ragged last block).
    block = 3 if k.shape[-2] % 2 == 0 else 2
    return attention._sdpa(q, k, v, attn_mask, 0.0, is_causal, scale, enable_gqa, block)


def _samples(rng):
    def qkv(qs, ks, vs):
        return uniform(rng, qs), uniform(rng, ks), uniform(rng, vs)

    none_seen = rng.random((4, 5)) > 0.4
    none_seen[1] = False  # a query that sees no key
    return [
        Sample(qkv((2, 4, 3), (2, 5, 3), (2, 5, 2)), label="plain"),
        Sample(qkv((4, 3), (5, 3), (5, 2)), {"is_causal": True}, label="causal 2d"),
        Sample(qkv((2, 5, 3), (2, 4, 3), (2, 4, 3)), {"is_causal": True}, label="causal L>S"),
        Sample(qkv((2, 4, 3), (2, 5, 3), (2, 5, 2)), {"scale": 0.7}, label="scale"),
        Sample(qkv((1, 2, 4, 3), (2, 1, 5, 3), (2, 1, 5, 2)), label="broadcast batch"),
        Sample(
            qkv((2, 4, 3), (2, 5, 3), (2, 5, 2)) + (rng.random((4, 5)) > 0.3,),
            label="bool mask",
        ),
        Sample(qkv((2, 4, 3), (2, 5, 3), (2, 5, 2)) + (none_seen,), label="row sees nothing"),
        Sample(
            qkv((2, 4, 3), (2, 5, 3), (2, 5, 2)) + (uniform(rng, (2, 1, 5)),),
            label="float mask",
        ),
        Sample(
            qkv((2, 4, 3), (2, 5, 3), (2, 5, 2)) + (uniform(rng, (4, 5)),),
            {"is_causal": True},
            label="float mask + causal",
        ),
        Sample(
            qkv((1, 4, 3, 2), (1, 2, 5, 2), (1, 2, 5, 3)) + (uniform(rng, (4, 3, 5)),),
            {"enable_gqa": True},
            label="gqa + float mask",
        ),
        Sample(
            qkv((4, 3, 2), (2, 5, 2), (2, 5, 3)) + (rng.random((1, 3, 5)) > 0.3,),
            {"enable_gqa": True, "is_causal": True},
            label="gqa + bool mask + causal",
        ),
        Sample(qkv((2, 4, 3), (2, 5, 3), (2, 5, 2)), noncontig=True, label="noncontig"),
        Sample(qkv((2, 0, 3), (2, 5, 3), (2, 5, 2)), label="no queries"),
    ]


ENTRIES = [
    OpInfo(
        "scaled_dot_product_attention",
        _sdpa,
        sdpa_ref,
        _samples,
        fwd_rtol32=1e-4,
    ),
    OpInfo(
        "scaled_dot_product_attention_blockwise",
        _blockwise,
        sdpa_ref,
        _samples,
        func="scaled_dot_product_attention",
        fwd_rtol32=1e-4,
    ),
]
