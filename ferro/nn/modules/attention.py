"""MultiheadAttention, with PyTorch's constructor, parameter names and forward semantics."""

from __future__ import annotations

import math

from ferro import ops
from ferro.creation import empty, zeros
from ferro.errors import ArgumentError, DtypeError, ShapeError
from ferro.nn import functional as F
from ferro.nn import init
from ferro.nn.module import Module
from ferro.nn.modules.linear import Linear
from ferro.nn.parameter import Parameter

_OP = "MultiheadAttention"


def _float_mask(mask, dtype, what):
    """A bool mask (True = not allowed, PyTorch's MultiheadAttention convention) as an additive
    float mask; a float mask as is."""
    if mask is None:
        return None
    kind = mask.dtype.kind
    if kind == "b":
        return ops.masked_fill(zeros(*mask.shape, dtype=dtype, device=mask.device), mask, -math.inf)
    if kind != "f":
        raise DtypeError(f"{_OP}: {what} must be a bool or float tensor, got {mask.dtype}")
    return mask.to(dtype) if mask.dtype != dtype else mask


class MultiheadAttention(Module):
    """Multi-head attention (PyTorch's ``nn.MultiheadAttention``):
    ``out_proj(concat_h softmax(q_h k_h^T / sqrt(d) + mask) v_h)`` with
    ``q, k, v`` the input projections of query, key, value split into ``num_heads`` heads.

    Parameters as PyTorch names them, so its ``state_dict`` loads unchanged: ``in_proj_weight``
    (3E, E) and ``in_proj_bias`` when ``kdim == vdim == embed_dim``, else ``q_proj_weight``,
    ``k_proj_weight``, ``v_proj_weight``; ``out_proj.weight``/``out_proj.bias``; ``bias_k``,
    ``bias_v`` with ``add_bias_kv``. Inputs are (L, N, E), or (N, L, E) with ``batch_first``,
    or unbatched (L, E). Masks follow PyTorch: a bool ``attn_mask`` / ``key_padding_mask`` is
    True where attention is NOT allowed; a float one is added to the scores.

    Example:
        >>> mha = ferro.nn.MultiheadAttention(8, 2, batch_first=True)
        >>> x = ferro.randn(3, 5, 8)
        >>> out, w = mha(x, x, x)
        >>> out.shape, w.shape
        (ferro.Size([3, 5, 8]), ferro.Size([3, 5, 5]))
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ArgumentError(
                f"{_OP}: embed_dim and num_heads must be positive, got {embed_dim} and {num_heads}"
            )
        if embed_dim % num_heads:
            raise ArgumentError(
                f"{_OP}: embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})"
            )
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        self.add_zero_attn = add_zero_attn
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(empty(3 * embed_dim, embed_dim, dtype=dtype))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = Parameter(empty(embed_dim, embed_dim, dtype=dtype))
            self.k_proj_weight = Parameter(empty(embed_dim, self.kdim, dtype=dtype))
            self.v_proj_weight = Parameter(empty(embed_dim, self.vdim, dtype=dtype))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(empty(3 * embed_dim, dtype=dtype))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, dtype=dtype)
        if add_bias_kv:
            self.bias_k = Parameter(empty(1, 1, embed_dim, dtype=dtype))
            self.bias_v = Parameter(empty(1, 1, embed_dim, dtype=dtype))
        else:
            self.register_parameter("bias_k", None)
            self.register_parameter("bias_v", None)
        self._reset_parameters()
        if device is not None:
            self.to(device)

    def _reset_parameters(self) -> None:
        # PyTorch's: xavier-uniform projections, zero biases, xavier-normal bias_k/bias_v (the
        # out_proj weight keeps Linear's initialization).
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
            init.xavier_normal_(self.bias_v)

    def _check(self, query, key, value, key_padding_mask, attn_mask):
        if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
            raise ShapeError(
                f"{_OP}: query, key and value must all be 3-D (batched) or 2-D (unbatched), "
                f"got query {tuple(query.shape)}, key {tuple(key.shape)}, value "
                f"{tuple(value.shape)}"
            )
        for name, t, dim in (
            ("query", query, self.embed_dim),
            ("key", key, self.kdim),
            ("value", value, self.vdim),
        ):
            if t.shape[-1] != dim:
                raise ShapeError(
                    f"{_OP}: {name} of shape {tuple(t.shape)} should have {dim} features in its "
                    "last dimension"
                )
        seq = 1 if self.batch_first else 0
        if key.shape[:-1] != value.shape[:-1]:
            raise ShapeError(
                f"{_OP}: key {tuple(key.shape)} and value {tuple(value.shape)} differ in their "
                "sequence or batch dimensions"
            )
        if query.ndim == 3:
            b = 0 if self.batch_first else 1
            if query.shape[b] != key.shape[b]:
                raise ShapeError(
                    f"{_OP}: batch mismatch: query {tuple(query.shape)} and key "
                    f"{tuple(key.shape)} (batch_first={self.batch_first})"
                )
            n, L, S = query.shape[b], query.shape[seq], key.shape[seq]
        else:
            n, L, S = None, query.shape[0], key.shape[0]
        if key_padding_mask is not None:
            want = (S,) if n is None else (n, S)
            if tuple(key_padding_mask.shape) != want:
                raise ShapeError(
                    f"{_OP}: key_padding_mask of shape {tuple(key_padding_mask.shape)} should "
                    f"be {want} (batch, source length)"
                )
        if attn_mask is not None:
            ok = [(L, S), (self.num_heads * (n or 1), L, S)]
            if tuple(attn_mask.shape) not in ok:
                raise ShapeError(
                    f"{_OP}: attn_mask of shape {tuple(attn_mask.shape)} should be {ok[0]} or "
                    f"{ok[1]} (batch * num_heads, target length, source length)"
                )

    def forward(
        self,
        query,
        key,
        value,
        key_padding_mask=None,
        need_weights: bool = True,
        attn_mask=None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ):
        """Attend from ``query`` to ``key``/``value``; returns ``(output, weights)``, weights
        None unless ``need_weights`` (averaged over heads with ``average_attn_weights``).
        ``is_causal`` is a hint that ``attn_mask`` is the causal mask, as in PyTorch."""
        self._check(query, key, value, key_padding_mask, attn_mask)
        if is_causal and attn_mask is None:
            raise ArgumentError(
                f"{_OP}: is_causal is a hint that attn_mask is the causal mask; pass attn_mask "
                "too (nn.Transformer.generate_square_subsequent_mask builds it)"
            )
        batched = query.ndim == 3
        self_attn = query is key and key is value
        if not batched:
            query, key, value = (t.unsqueeze(0) for t in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif not self.batch_first:  # the math below runs on (N, L, E)
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        n, L = query.shape[0], query.shape[1]
        H, d, E = self.num_heads, self.head_dim, self.embed_dim
        dtype = query.dtype

        q, k, v = self._project(query, key, value, self_attn)
        if self.bias_k is not None:
            k = ops.cat([k, self.bias_k.expand(n, 1, E)], dim=1)
            v = ops.cat([v, self.bias_v.expand(n, 1, E)], dim=1)
            attn_mask = _pad_last(attn_mask)
            key_padding_mask = _pad_last(key_padding_mask)
        q, k, v = (t.reshape(n, t.shape[1], H, d).transpose(1, 2) for t in (q, k, v))
        if self.add_zero_attn:
            k = ops.cat([k, zeros(n, H, 1, d, dtype=dtype, device=k.device)], dim=2)
            v = ops.cat([v, zeros(n, H, 1, d, dtype=dtype, device=v.device)], dim=2)
            attn_mask = _pad_last(attn_mask)
            key_padding_mask = _pad_last(key_padding_mask)
        S = k.shape[2]

        mask = _float_mask(attn_mask, dtype, "attn_mask")
        if mask is not None and mask.ndim == 3:
            mask = mask.reshape(n, H, L, S)
        pad = _float_mask(key_padding_mask, dtype, "key_padding_mask")
        if pad is not None:
            pad = pad.reshape(n, 1, 1, S)
            mask = pad if mask is None else mask + pad
        p = self.dropout if self.training else 0.0

        weights = None
        if need_weights:
            scores = ops.matmul(q * (1.0 / math.sqrt(d)), k.transpose(-1, -2))
            if mask is not None:
                scores = scores + mask
            w = F.softmax(scores, dim=-1)
            if p > 0.0:
                w = F.dropout(w, p)
            out = ops.matmul(w, v)
            weights = w.mean(dim=1) if average_attn_weights else w
            if not batched:
                weights = weights.squeeze(0)
        elif is_causal and key_padding_mask is None:
            # PyTorch trusts the hint: attn_mask is the causal mask, so the op makes its own.
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        out = self.out_proj(out.transpose(1, 2).reshape(n, L, E))
        if not batched:
            out = out.squeeze(0)
        elif not self.batch_first:
            out = out.transpose(0, 1)
        return out, weights

    def _project(self, query, key, value, self_attn):
        E, b = self.embed_dim, self.in_proj_bias
        if self._qkv_same_embed_dim and self_attn:
            # One GEMM for the three projections of self-attention.
            return ops.chunk(F.linear(query, self.in_proj_weight, b), 3, dim=-1)
        if self._qkv_same_embed_dim:
            w = self.in_proj_weight
            wq, wk, wv = w[:E], w[E : 2 * E], w[2 * E :]
        else:
            wq, wk, wv = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        bq = bk = bv = None
        if b is not None:
            bq, bk, bv = b[:E], b[E : 2 * E], b[2 * E :]
        return F.linear(query, wq, bq), F.linear(key, wk, bk), F.linear(value, wv, bv)


def _pad_last(mask):
    # One more (always allowed) key at the end of a mask's last dimension.
    if mask is None:
        return None
    if mask.dtype.kind == "b":
        extra = zeros(*mask.shape[:-1], 1, dtype=mask.dtype, device=mask.device)
        return ops.cat([mask, extra], dim=-1)
    return ops.pad(mask, (0, 1))


__all__ = ["MultiheadAttention"]
