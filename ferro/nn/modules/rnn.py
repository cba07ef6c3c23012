"""Recurrent layers: RNN, LSTM, GRU and their single-step cells, as in PyTorch.

Parameter names, shapes, gate order and initialization are PyTorch's (``weight_ih_l0``,
``weight_hh_l0_reverse``, ``bias_ih_l1``, ``weight_hr_l0`` for an LSTM with ``proj_size``; all
uniform in ±1/sqrt(hidden_size)), so a PyTorch ``state_dict`` loads unchanged.

How a layer runs: per layer and direction, the input projection of every step is one GEMM
(``linear(x, weight_ih, bias_ih)`` over the whole sequence), and the recurrence is one node,
:func:`ferro.recurrent_layer` (Note [Recurrent layer] in ``ferro/ops/recurrent.py``): a GEMM
and PyTorch's cell per step, and one GEMM for each weight gradient over all steps. A
unidirectional module runs all its layers in one such node, a few steps apart on two cores
(Note [Recurrent stack], docs/rnn.md). The cells
(``RNNCell``, ``LSTMCell``, ``GRUCell``) use the fused single-step ops
:func:`ferro.lstm_cell` and :func:`ferro.gru_cell`.
"""

from __future__ import annotations

import math
import numbers

from ferro._C.tensor import TensorBase
from ferro.autograd import no_grad
from ferro.creation import empty, ones, zeros
from ferro.errors import ArgumentError, ArgumentTypeError, ShapeError
from ferro.nn import functional as F
from ferro.nn import init
from ferro.nn.module import Module
from ferro.nn.parameter import Parameter
from ferro.nn.utils.rnn import PackedSequence
from ferro.ops import (
    cat,
    gru_cell,
    linear,
    lstm_cell,
    recurrent_layer,
    relu,
    stack,
    tanh,
)

_CHUNKS = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _size_arg(value, name: str, cls: str, minimum: int) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise ArgumentTypeError(f"{cls}: {name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ArgumentError(f"{cls}: {name} must be at least {minimum}, got {value}")
    return int(value)


def _shape(t) -> tuple:
    return tuple(t.shape)


class RNNBase(Module):
    """What RNN, LSTM and GRU share: the parameters of every layer and direction, and the loop.

    ``mode`` is ``"RNN_TANH"``, ``"RNN_RELU"``, ``"LSTM"`` or ``"GRU"``.
    """

    def __init__(
        self,
        mode: str,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        cls = type(self).__name__
        if mode not in _CHUNKS:
            raise ArgumentError(f"{cls}: unknown mode {mode!r}, expected one of {list(_CHUNKS)}")
        self.mode = mode
        self.input_size = _size_arg(input_size, "input_size", cls, 0)
        self.hidden_size = _size_arg(hidden_size, "hidden_size", cls, 1)
        self.num_layers = _size_arg(num_layers, "num_layers", cls, 1)
        self.proj_size = _size_arg(proj_size, "proj_size", cls, 0)
        if isinstance(dropout, bool) or not isinstance(dropout, numbers.Real):
            raise ArgumentTypeError(f"{cls}: dropout must be a number, got {dropout!r}")
        if not 0 <= dropout <= 1:
            raise ArgumentError(f"{cls}: dropout must be in [0, 1], got {dropout}")
        if self.proj_size and mode != "LSTM":
            raise ArgumentError(f"{cls}: proj_size is only supported by LSTM")
        if self.proj_size >= self.hidden_size:
            raise ArgumentError(
                f"{cls}: proj_size must be smaller than hidden_size, got proj_size="
                f"{self.proj_size} and hidden_size={self.hidden_size}"
            )
        self.bias, self.batch_first = bool(bias), bool(batch_first)
        self.dropout, self.bidirectional = float(dropout), bool(bidirectional)
        directions = 2 if self.bidirectional else 1
        gate_size = _CHUNKS[mode] * self.hidden_size
        real_hidden = self.proj_size or self.hidden_size
        self._flat_weights_names = []
        for layer in range(self.num_layers):
            for direction in range(directions):
                layer_input = self.input_size if layer == 0 else real_hidden * directions
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                shapes = [
                    ("weight_ih", (gate_size, layer_input)),
                    ("weight_hh", (gate_size, real_hidden)),
                ]
                if self.bias:
                    shapes += [("bias_ih", (gate_size,)), ("bias_hh", (gate_size,))]
                if self.proj_size:
                    shapes.append(("weight_hr", (self.proj_size, self.hidden_size)))
                for name, shape in shapes:
                    setattr(self, name + suffix, Parameter(empty(*shape, dtype=dtype)))
                    self._flat_weights_names.append(name + suffix)
        self.reset_parameters()
        if device is not None:
            self.to(device)

    @property
    def _flat_weights(self) -> list:
        return [getattr(self, name) for name in self._flat_weights_names]

    @property
    def all_weights(self) -> list[list]:
        """The parameters grouped per layer and direction, in PyTorch's order."""
        per = len(self._flat_weights_names) // (self.num_layers * (2 if self.bidirectional else 1))
        flat = self._flat_weights
        return [flat[k : k + per] for k in range(0, len(flat), per)]

    def reset_parameters(self) -> None:
        """Draw every weight and bias from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            init.uniform_(p, -bound, bound)

    def flatten_parameters(self) -> None:
        """Nothing to do (PyTorch packs the weights into one buffer for cuDNN; ferro reads the
        parameters as they are). Kept so PyTorch code that calls it runs unchanged."""

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s

    # -- forward ---------------------------------------------------------------------------

    def _layer_params(self, layer: int, direction: int):
        suffix = f"_l{layer}" + ("_reverse" if direction else "")
        names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr")
        params = self._parameters
        return tuple(params.get(n + suffix) for n in names)

    def _layers(self, x, h0, c0, sizes):
        """Layer by layer, one ``recurrent_layer`` node per layer and direction."""
        lstm = self.mode == "LSTM"
        directions = 2 if self.bidirectional else 1
        h0s = h0.unbind(0)
        c0s = c0.unbind(0) if lstm else None
        h_n, c_n = [], []
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(directions):
                k = layer * directions + direction
                w_ih, w_hh, b_ih, b_hh, w_hr = self._layer_params(layer, direction)
                # Every step's input projection as one GEMM: folded to 2-D, since NumPy's
                # matmul runs a 3-D operand as one small GEMM per step.
                xg = linear(x.reshape(-1, x.shape[-1]), w_ih, b_ih)
                if sizes is None:
                    xg = xg.reshape(x.shape[0], x.shape[1], w_ih.shape[0])
                res = recurrent_layer(
                    xg,
                    h0s[k],
                    c0s[k] if lstm else None,
                    w_hh,
                    b_hh,
                    w_hr,
                    self.mode,
                    sizes,
                    direction == 1,
                )
                out, h, c = res if lstm else (*res, None)
                outputs.append(out)
                h_n.append(h)
                c_n.append(c)
            x = outputs[0] if directions == 1 else cat(outputs, -1)
            if self.dropout and self.training and layer + 1 < self.num_layers:
                x = F.dropout(x, self.dropout, True)
        return x, stack(h_n, 0), (stack(c_n, 0) if lstm else None)

    def _stack(self, x, h0, c0, sizes):
        """Unidirectional layers in one ``recurrent_layer`` node (Note [Recurrent stack]: the
        layers run a few steps apart on two cores); the dropout between layers is a mask
        drawn as ``F.dropout`` draws it, so a seed gives the same numbers as layer by layer."""
        lstm, layers = self.mode == "LSTM", self.num_layers
        masks = [None] * layers
        if self.dropout and self.training and layers > 1:
            with no_grad():
                shape = (*x.shape[:-1], self.proj_size or self.hidden_size)
                kept = ones(*shape, dtype=x.dtype, device=x.device)
                masks = [None] + [F.dropout(kept, self.dropout, True) for _ in masks[1:]]
        h0s, c0s = h0.unbind(0), (c0.unbind(0) if lstm else [None] * layers)
        upper = []
        for k in range(1, layers):
            w_ih, w_hh, b_ih, b_hh, w_hr = self._layer_params(k, 0)
            upper.append((w_ih, b_ih, masks[k], h0s[k], c0s[k], w_hh, b_hh, w_hr))
        w_ih, w_hh, b_ih, b_hh, w_hr = self._layer_params(0, 0)
        out, *states = recurrent_layer(  # layer 0's projection in the node too
            x, h0s[0], c0s[0], w_hh, b_hh, w_hr, self.mode, sizes, False, upper, (w_ih, b_ih)
        )
        per = 2 if lstm else 1
        return out, stack(states[::per], 0), (stack(states[1::per], 0) if lstm else None)

    def _check_state(self, state, expected: tuple, which: str, cls: str):
        if not isinstance(state, TensorBase):
            raise ArgumentTypeError(f"{cls}: {which} must be a tensor, got {type(state).__name__}")
        if _shape(state) != expected:
            raise ShapeError(f"{cls}: expected {which} of shape {expected}, got {_shape(state)}")

    def forward(self, input, hx=None):  # noqa: A002
        cls = type(self).__name__
        lstm = self.mode == "LSTM"
        directions = 2 if self.bidirectional else 1
        real_hidden = self.proj_size or self.hidden_size
        packed = isinstance(input, PackedSequence)
        unbatched = False
        if packed:
            x, batch_sizes, sorted_indices, unsorted_indices = input
            sizes = [int(b) for b in batch_sizes.detach().cpu().numpy()]
            batch = sizes[0] if sizes else 0
            if x.ndim != 2:
                raise ShapeError(
                    f"{cls}: packed input data must be 2-D (steps, input_size), got shape "
                    f"{_shape(x)}"
                )
        else:
            x, sizes, sorted_indices, unsorted_indices = input, None, None, None
            if not isinstance(x, TensorBase):
                raise ArgumentTypeError(
                    f"{cls}: input must be a tensor or a PackedSequence, got {type(x).__name__}"
                )
            if x.ndim not in (2, 3):
                raise ShapeError(
                    f"{cls}: input must be 2-D (L, input_size) unbatched or 3-D, got shape "
                    f"{_shape(x)}"
                )
            unbatched = x.ndim == 2
            if unbatched:
                x = x.unsqueeze(1)
            elif self.batch_first:
                x = x.transpose(0, 1)
            batch = x.shape[1]
        if x.shape[-1] != self.input_size:
            raise ShapeError(
                f"{cls}: input.size(-1) must be equal to input_size: expected "
                f"{self.input_size}, got input of shape {_shape(input.data if packed else input)}"
            )
        layers = self.num_layers * directions
        h_shape = (layers, batch, real_hidden)
        c_shape = (layers, batch, self.hidden_size)
        if hx is None:
            h0 = zeros(*h_shape, dtype=x.dtype, device=x.device)
            c0 = zeros(*c_shape, dtype=x.dtype, device=x.device) if lstm else None
        else:
            if lstm:
                if not isinstance(hx, tuple | list) or len(hx) != 2:
                    raise ArgumentTypeError(
                        f"{cls}: hx must be a tuple (h_0, c_0), got {type(hx).__name__}"
                    )
                h0, c0 = hx
            else:
                if not isinstance(hx, TensorBase):
                    raise ArgumentTypeError(f"{cls}: hx must be a tensor, got {type(hx).__name__}")
                h0, c0 = hx, None
            if unbatched:
                for which, s in (("h_0", h0), ("c_0", c0)):
                    if s is not None and (not isinstance(s, TensorBase) or s.ndim != 2):
                        raise ShapeError(
                            f"{cls}: for unbatched 2-D input, {which} must be 2-D, got shape "
                            f"{_shape(s) if isinstance(s, TensorBase) else type(s).__name__}"
                        )
                h0 = h0.unsqueeze(1)
                c0 = c0.unsqueeze(1) if lstm else None
            self._check_state(h0, h_shape, "h_0" if lstm else "hx", cls)
            if lstm:
                self._check_state(c0, c_shape, "c_0", cls)
            if sorted_indices is not None:
                h0 = h0.index_select(1, sorted_indices)
                c0 = c0.index_select(1, sorted_indices) if lstm else None
        if directions == 1:
            x, h_n, c_n = self._stack(x, h0, c0, sizes)
        else:
            x, h_n, c_n = self._layers(x, h0, c0, sizes)
        if packed:
            output = PackedSequence(x, batch_sizes, sorted_indices, unsorted_indices)
            if unsorted_indices is not None:
                h_n = h_n.index_select(1, unsorted_indices)
                c_n = c_n.index_select(1, unsorted_indices) if lstm else None
        elif unbatched:
            output = x.squeeze(1)
            h_n = h_n.squeeze(1)
            c_n = c_n.squeeze(1) if lstm else None
        else:
            output = x.transpose(0, 1) if self.batch_first else x
        return output, ((h_n, c_n) if lstm else h_n)


class RNN(RNNBase):
    """Elman RNN: ``h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)``, ``act`` tanh or
    relu (``nonlinearity``), over ``num_layers`` layers, optionally bidirectional.

    ``forward(input, hx=None)`` takes ``(L, N, input_size)`` (``(N, L, ...)`` with
    ``batch_first``, ``(L, input_size)`` unbatched, or a PackedSequence) and returns
    ``(output, h_n)`` as PyTorch does.

    Example:
        >>> rnn = ferro.nn.RNN(3, 4, num_layers=2)
        >>> out, h = rnn(ferro.randn(5, 2, 3))
        >>> out.shape, h.shape
        (ferro.Size([5, 2, 4]), ferro.Size([2, 2, 4]))
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        nonlinearity: str = "tanh",
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        device=None,
        dtype=None,
    ) -> None:
        modes = {"tanh": "RNN_TANH", "relu": "RNN_RELU"}
        if nonlinearity not in modes:
            raise ArgumentError(
                f"RNN: unknown nonlinearity {nonlinearity!r}, expected 'tanh' or 'relu'"
            )
        super().__init__(
            modes[nonlinearity],
            input_size,
            hidden_size,
            num_layers,
            bias,
            batch_first,
            dropout,
            bidirectional,
            device=device,
            dtype=dtype,
        )
        self.nonlinearity = nonlinearity  # not in the repr, as in PyTorch


class LSTM(RNNBase):
    """Long short-term memory over ``num_layers`` layers, optionally bidirectional and with a
    projection of the hidden state (``proj_size``); gates ``i, f, g, o`` as in PyTorch.

    ``forward(input, hx=None)``, ``hx = (h_0, c_0)``, returns ``(output, (h_n, c_n))``.

    Example:
        >>> lstm = ferro.nn.LSTM(3, 4, batch_first=True)
        >>> out, (h, c) = lstm(ferro.randn(2, 5, 3))
        >>> out.shape, h.shape, c.shape
        (ferro.Size([2, 5, 4]), ferro.Size([1, 2, 4]), ferro.Size([1, 2, 4]))
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(
            "LSTM",
            input_size,
            hidden_size,
            num_layers,
            bias,
            batch_first,
            dropout,
            bidirectional,
            proj_size,
            device,
            dtype,
        )


class GRU(RNNBase):
    """Gated recurrent unit over ``num_layers`` layers, optionally bidirectional; gates
    ``r, z, n`` with ``n = tanh(x_n + r * (h W_hn^T + b_hn))`` as in PyTorch.

    ``forward(input, hx=None)`` returns ``(output, h_n)``.

    Example:
        >>> gru = ferro.nn.GRU(3, 4, bidirectional=True)
        >>> out, h = gru(ferro.randn(5, 2, 3))
        >>> out.shape, h.shape
        (ferro.Size([5, 2, 8]), ferro.Size([2, 2, 4]))
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(
            "GRU",
            input_size,
            hidden_size,
            num_layers,
            bias,
            batch_first,
            dropout,
            bidirectional,
            device=device,
            dtype=dtype,
        )


class RNNCellBase(Module):
    """The parameters of a single-step cell: ``weight_ih`` ``(chunks * hidden, input)``,
    ``weight_hh`` ``(chunks * hidden, hidden)``, ``bias_ih``, ``bias_hh``."""

    def __init__(
        self, input_size: int, hidden_size: int, bias: bool, num_chunks: int, device, dtype
    ) -> None:
        super().__init__()
        cls = type(self).__name__
        self.input_size = _size_arg(input_size, "input_size", cls, 0)
        self.hidden_size = _size_arg(hidden_size, "hidden_size", cls, 1)
        self.bias = bool(bias)
        gates = num_chunks * self.hidden_size
        self.weight_ih = Parameter(empty(gates, self.input_size, dtype=dtype))
        self.weight_hh = Parameter(empty(gates, self.hidden_size, dtype=dtype))
        if self.bias:
            self.bias_ih = Parameter(empty(gates, dtype=dtype))
            self.bias_hh = Parameter(empty(gates, dtype=dtype))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()
        if device is not None:
            self.to(device)

    def reset_parameters(self) -> None:
        """Draw every weight and bias from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            init.uniform_(p, -bound, bound)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if not self.bias:
            s += ", bias=False"
        nonlinearity = getattr(self, "nonlinearity", "tanh")
        if nonlinearity != "tanh":
            s += f", nonlinearity={nonlinearity}"
        return s

    def _prepare(self, input, states):  # noqa: A002
        """``(input, states, batched)`` with a batch dimension added where the input has none;
        a None state becomes zeros. Checks every shape."""
        cls = type(self).__name__
        if not isinstance(input, TensorBase):
            raise ArgumentTypeError(f"{cls}: input must be a tensor, got {type(input).__name__}")
        if input.ndim not in (1, 2):
            raise ShapeError(f"{cls}: expected input to be 1-D or 2-D, got shape {_shape(input)}")
        if input.shape[-1] != self.input_size:
            raise ShapeError(
                f"{cls}: input has inconsistent input_size: got shape {_shape(input)}, expected "
                f"input_size {self.input_size}"
            )
        batched = input.ndim == 2
        if not batched:
            input = input.unsqueeze(0)
        batch = input.shape[0]
        out = []
        for k, s in enumerate(states):
            if s is None:
                out.append(zeros(batch, self.hidden_size, dtype=input.dtype, device=input.device))
                continue
            if not isinstance(s, TensorBase):
                raise ArgumentTypeError(
                    f"{cls}: hidden state {k} must be a tensor, got {type(s).__name__}"
                )
            if s.ndim != (2 if batched else 1):
                raise ShapeError(
                    f"{cls}: hidden state {k} of shape {_shape(s)} does not match input of "
                    f"shape {_shape(input if batched else input.squeeze(0))} (both batched or "
                    "both not)"
                )
            if not batched:
                s = s.unsqueeze(0)
            if _shape(s) != (batch, self.hidden_size):
                raise ShapeError(
                    f"{cls}: hidden state {k} has shape {_shape(s)}, expected "
                    f"{(batch, self.hidden_size)} (batch {batch}, hidden_size "
                    f"{self.hidden_size})"
                )
            out.append(s)
        return input, out, batched


class RNNCell(RNNCellBase):
    """One Elman RNN step: ``h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh)``, ``act`` tanh or
    relu. ``forward(input, hx=None)`` returns ``h'``.

    Example:
        >>> ferro.nn.RNNCell(3, 4)(ferro.randn(2, 3)).shape
        ferro.Size([2, 4])
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        nonlinearity: str = "tanh",
        device=None,
        dtype=None,
    ) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ArgumentError(
                f"RNNCell: unknown nonlinearity {nonlinearity!r}, expected 'tanh' or 'relu'"
            )
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):  # noqa: A002
        x, (h,), batched = self._prepare(input, (hx,))
        pre = linear(x, self.weight_ih, self.bias_ih) + linear(h, self.weight_hh, self.bias_hh)
        h = tanh(pre) if self.nonlinearity == "tanh" else relu(pre)
        return h if batched else h.squeeze(0)


class LSTMCell(RNNCellBase):
    """One LSTM step (gates ``i, f, g, o``). ``forward(input, hx=None)`` with
    ``hx = (h, c)`` returns ``(h', c')``.

    Example:
        >>> h, c = ferro.nn.LSTMCell(3, 4)(ferro.randn(2, 3))
        >>> h.shape, c.shape
        (ferro.Size([2, 4]), ferro.Size([2, 4]))
    """

    def __init__(
        self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None
    ) -> None:
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input, hx=None):  # noqa: A002
        if hx is not None and (not isinstance(hx, tuple | list) or len(hx) != 2):
            raise ArgumentTypeError(f"LSTMCell: hx must be a tuple (h, c), got {type(hx).__name__}")
        x, (h, c), batched = self._prepare(input, (None, None) if hx is None else tuple(hx))
        h, c = lstm_cell(
            linear(x, self.weight_ih, self.bias_ih), linear(h, self.weight_hh, self.bias_hh), c
        )
        return (h, c) if batched else (h.squeeze(0), c.squeeze(0))


class GRUCell(RNNCellBase):
    """One GRU step (gates ``r, z, n``). ``forward(input, hx=None)`` returns ``h'``.

    Example:
        >>> ferro.nn.GRUCell(3, 4)(ferro.randn(3)).shape
        ferro.Size([4])
    """

    def __init__(
        self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None
    ) -> None:
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input, hx=None):  # noqa: A002
        x, (h,), batched = self._prepare(input, (hx,))
        h = gru_cell(
            linear(x, self.weight_ih, self.bias_ih), linear(h, self.weight_hh, self.bias_hh), h
        )
        return h if batched else h.squeeze(0)


__all__ = ["GRU", "GRUCell", "LSTM", "LSTMCell", "RNN", "RNNBase", "RNNCell", "RNNCellBase"]
