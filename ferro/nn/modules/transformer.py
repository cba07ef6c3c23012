"""Transformer layers with PyTorch's constructors, parameter names and forward semantics:
TransformerEncoderLayer, TransformerDecoderLayer, TransformerEncoder, TransformerDecoder,
Transformer."""

from __future__ import annotations

import copy
import math

from ferro.creation import full
from ferro.errors import ArgumentError, ArgumentTypeError, ShapeError
from ferro.nn import functional as F
from ferro.nn import init
from ferro.nn.module import Module
from ferro.nn.modules.attention import MultiheadAttention
from ferro.nn.modules.container import ModuleList
from ferro.nn.modules.dropout import Dropout
from ferro.nn.modules.linear import Linear


def _layer_norm(d_model, eps, bias, dtype):
    # LayerNorm lives in the normalization family; looked up when a layer is built.
    from ferro import nn

    return nn.LayerNorm(d_model, eps=eps, bias=bias, dtype=dtype)


def _activation(activation, op):
    if isinstance(activation, str):
        if activation == "relu":
            return F.relu
        if activation == "gelu":
            return F.gelu
        raise ArgumentError(f"{op}: activation should be 'relu' or 'gelu', got {activation!r}")
    if callable(activation):
        return activation
    raise ArgumentTypeError(
        f"{op}: activation must be 'relu', 'gelu' or a callable, got {type(activation).__name__}"
    )


def _check_d_model(x, d_model, op, name):
    if x.ndim not in (2, 3) or x.shape[-1] != d_model:
        raise ShapeError(
            f"{op}: {name} of shape {tuple(x.shape)} should be (seq, batch, {d_model}), "
            f"(batch, seq, {d_model}) with batch_first, or unbatched (seq, {d_model})"
        )


def generate_square_subsequent_mask(sz: int, device=None, dtype=None):
    """The (sz, sz) causal float mask: 0 on and below the diagonal, -inf above."""
    from ferro.ops import triu

    return triu(full((sz, sz), -math.inf, dtype=dtype, device=device), diagonal=1)


class TransformerEncoderLayer(Module):
    """Self-attention and a feed-forward block, each with a residual connection and LayerNorm
    (after it, or before with ``norm_first``), as PyTorch's ``nn.TransformerEncoderLayer``."""

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation="relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        self.self_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, dtype=dtype
        )
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
        self.norm_first = norm_first
        self.norm1 = _layer_norm(d_model, layer_norm_eps, bias, dtype)
        self.norm2 = _layer_norm(d_model, layer_norm_eps, bias, dtype)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.activation = _activation(activation, type(self).__name__)
        self.d_model = d_model
        if device is not None:
            self.to(device)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal: bool = False):
        _check_d_model(src, self.d_model, type(self).__name__, "src")
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(
            x,
            x,
            x,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            need_weights=False,
            is_causal=is_causal,
        )[0]
        return self.dropout1(x)

    def _ff_block(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerDecoderLayer(Module):
    """Self-attention, attention over the encoder's output (``memory``) and a feed-forward
    block, each with a residual connection and LayerNorm, as PyTorch's
    ``nn.TransformerDecoderLayer``."""

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation="relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        kw = {"dropout": dropout, "bias": bias, "batch_first": batch_first, "dtype": dtype}
        self.self_attn = MultiheadAttention(d_model, nhead, **kw)
        self.multihead_attn = MultiheadAttention(d_model, nhead, **kw)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
        self.norm_first = norm_first
        self.norm1 = _layer_norm(d_model, layer_norm_eps, bias, dtype)
        self.norm2 = _layer_norm(d_model, layer_norm_eps, bias, dtype)
        self.norm3 = _layer_norm(d_model, layer_norm_eps, bias, dtype)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        self.activation = _activation(activation, type(self).__name__)
        self.d_model = d_model
        if device is not None:
            self.to(device)

    def forward(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
    ):
        op = type(self).__name__
        _check_d_model(tgt, self.d_model, op, "tgt")
        _check_d_model(memory, self.d_model, op, "memory")
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(
                self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal
            )
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
            x = self.norm2(
                x
                + self._mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal)
            )
            x = self.norm3(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(
            x,
            x,
            x,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            is_causal=is_causal,
            need_weights=False,
        )[0]
        return self.dropout1(x)

    def _mha_block(self, x, mem, attn_mask, key_padding_mask, is_causal):
        x = self.multihead_attn(
            x,
            mem,
            mem,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            is_causal=is_causal,
            need_weights=False,
        )[0]
        return self.dropout2(x)

    def _ff_block(self, x):
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))


def _clones(module, n):
    return ModuleList([copy.deepcopy(module) for _ in range(n)])


class TransformerEncoder(Module):
    """``num_layers`` copies of ``encoder_layer`` in sequence, then ``norm`` if given."""

    def __init__(
        self,
        encoder_layer,
        num_layers: int,
        norm=None,
        enable_nested_tensor: bool = True,
        mask_check: bool = True,
    ) -> None:
        super().__init__()
        self.layers = _clones(encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal: bool | None = None):
        x = src
        causal = bool(is_causal)
        for layer in self.layers:
            x = layer(x, src_mask=mask, is_causal=causal, src_key_padding_mask=src_key_padding_mask)
        return self.norm(x) if self.norm is not None else x


class TransformerDecoder(Module):
    """``num_layers`` copies of ``decoder_layer`` in sequence, then ``norm`` if given."""

    def __init__(self, decoder_layer, num_layers: int, norm=None) -> None:
        super().__init__()
        self.layers = _clones(decoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
    ):
        x = tgt
        for layer in self.layers:
            x = layer(
                x,
                memory,
                tgt_mask=tgt_mask,
                memory_mask=memory_mask,
                tgt_key_padding_mask=tgt_key_padding_mask,
                memory_key_padding_mask=memory_key_padding_mask,
                tgt_is_causal=bool(tgt_is_causal),
                memory_is_causal=memory_is_causal,
            )
        return self.norm(x) if self.norm is not None else x


class Transformer(Module):
    """An encoder-decoder Transformer, as PyTorch's ``nn.Transformer``: ``encoder`` and
    ``decoder`` stacks (each ending in a LayerNorm), parameters with more than one dimension
    drawn xavier-uniform.

    Example:
        >>> model = ferro.nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1,
        ...                              num_decoder_layers=1, dim_feedforward=16)
        >>> src, tgt = ferro.randn(5, 3, 8), ferro.randn(4, 3, 8)
        >>> model(src, tgt).shape
        ferro.Size([4, 3, 8])
    """

    def __init__(
        self,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation="relu",
        custom_encoder=None,
        custom_decoder=None,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        kw = {
            "dim_feedforward": dim_feedforward,
            "dropout": dropout,
            "activation": activation,
            "layer_norm_eps": layer_norm_eps,
            "batch_first": batch_first,
            "norm_first": norm_first,
            "bias": bias,
            "dtype": dtype,
        }
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            layer = TransformerEncoderLayer(d_model, nhead, **kw)
            norm = _layer_norm(d_model, layer_norm_eps, bias, dtype)
            self.encoder = TransformerEncoder(layer, num_encoder_layers, norm)
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            layer = TransformerDecoderLayer(d_model, nhead, **kw)
            norm = _layer_norm(d_model, layer_norm_eps, bias, dtype)
            self.decoder = TransformerDecoder(layer, num_decoder_layers, norm)
        self._reset_parameters()
        self.d_model = d_model
        self.nhead = nhead
        self.batch_first = batch_first
        if device is not None:
            self.to(device)

    def _reset_parameters(self) -> None:
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)

    def forward(
        self,
        src,
        tgt,
        src_mask=None,
        tgt_mask=None,
        memory_mask=None,
        src_key_padding_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        src_is_causal: bool | None = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
    ):
        b = 0 if self.batch_first else 1
        if src.ndim == 3 and tgt.ndim == 3 and src.shape[b] != tgt.shape[b]:
            raise ShapeError(
                f"Transformer: the batch number of src {tuple(src.shape)} and tgt "
                f"{tuple(tgt.shape)} must be equal (batch_first={self.batch_first})"
            )
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise ShapeError(
                f"Transformer: the feature number of src {tuple(src.shape)} and tgt "
                f"{tuple(tgt.shape)} must be equal to d_model ({self.d_model})"
            )
        memory = self.encoder(
            src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal
        )
        return self.decoder(
            tgt,
            memory,
            tgt_mask=tgt_mask,
            memory_mask=memory_mask,
            tgt_key_padding_mask=tgt_key_padding_mask,
            memory_key_padding_mask=memory_key_padding_mask,
            tgt_is_causal=tgt_is_causal,
            memory_is_causal=memory_is_causal,
        )

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None):
        """The (sz, sz) causal float mask: 0 on and below the diagonal, -inf above."""
        return generate_square_subsequent_mask(sz, device=device, dtype=dtype)


__all__ = [
    "Transformer",
    "TransformerDecoder",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerEncoderLayer",
]
