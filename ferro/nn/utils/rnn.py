"""Variable-length sequences for the recurrent layers, as in PyTorch's ``torch.nn.utils.rnn``.

A :class:`PackedSequence` stores a batch of sequences time-major without padding: ``data`` holds
the rows of step 0 of every sequence, then those of step 1 of every sequence still running, and
so on; ``batch_sizes[t]`` is how many sequences are still running at step ``t``. The sequences are
sorted by decreasing length (``sorted_indices`` says from which original batch position each
came, ``unsorted_indices`` undoes it). The recurrent layers take one and honour the lengths: each
sequence's final state is its state at its own last step.

Every function here is built from differentiable ops (``index_select``, ``cat``, ``stack``), so
gradients flow through packing and unpacking.
"""

from __future__ import annotations

import numbers
from typing import NamedTuple

import numpy as np

from ferro._C.tensor import TensorBase
from ferro.errors import ArgumentError, ArgumentTypeError, ShapeError


def _tensor(values, device=None):
    from ferro.creation import tensor

    return tensor(np.asarray(values, dtype=np.int64), device=device)


def _int_list(values, fn: str, what: str) -> list[int]:
    if isinstance(values, TensorBase):
        arr = np.asarray(values.detach().cpu().numpy())
    else:
        arr = np.asarray(values)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise ArgumentTypeError(f"{fn}: {what} must be a 1-D sequence of ints, got {values!r}")
    return [int(v) for v in arr]


class PackedSequence(NamedTuple):
    """A packed batch of variable-length sequences (see the module docstring).

    Attributes:
        data: ``(sum of lengths, *)``, time-major, sorted by decreasing length.
        batch_sizes: int64 tensor (on the CPU), the number of sequences running at each step.
        sorted_indices: int64 tensor or None; ``data``'s batch position ``j`` is the original
            batch position ``sorted_indices[j]``.
        unsorted_indices: int64 tensor or None, the inverse permutation.
    """

    data: TensorBase
    batch_sizes: TensorBase
    sorted_indices: TensorBase | None = None
    unsorted_indices: TensorBase | None = None

    def to(self, *args, **kwargs) -> PackedSequence:
        """The same sequence with ``data`` (and the index tensors, for a device) converted as
        ``Tensor.to`` converts; ``batch_sizes`` stays on the CPU, as in PyTorch."""
        data = self.data.to(*args, **kwargs)
        if data is self.data:
            return self
        device = data.device

        def move(t):
            return None if t is None else t.to(device)

        return PackedSequence(
            data, self.batch_sizes, move(self.sorted_indices), move(self.unsorted_indices)
        )

    def cpu(self) -> PackedSequence:
        return self.to("cpu")

    def cuda(self) -> PackedSequence:
        return self.to("cuda")

    def double(self) -> PackedSequence:
        return self.to(np.float64)

    def float(self) -> PackedSequence:
        return self.to(np.float32)

    @property
    def is_cuda(self) -> bool:
        return str(self.data.device).startswith("cuda")


def invert_permutation(permutation):
    """The inverse of an int64 permutation tensor (None stays None)."""
    if permutation is None:
        return None
    perm = _int_list(permutation, "invert_permutation", "permutation")
    inv = np.empty(len(perm), dtype=np.int64)
    inv[perm] = np.arange(len(perm))
    return _tensor(inv, permutation.device)


def pack_padded_sequence(input, lengths, batch_first: bool = False, enforce_sorted: bool = True):  # noqa: A002
    """Pack a padded batch ``(T, B, *)`` (``(B, T, *)`` if ``batch_first``) whose sequence
    ``b`` is ``lengths[b]`` long.

    With ``enforce_sorted`` the lengths must be in decreasing order; otherwise the batch is
    sorted here and the permutation kept in the result.

    Gradient: the padded input's gradient is the packed gradient put back at each sequence's
    valid steps (zeros at the padding).
    """
    lens = _int_list(lengths, "pack_padded_sequence", "lengths")
    if input.ndim < 2:
        raise ShapeError(
            f"pack_padded_sequence: input must have at least 2 dimensions (T, B, *), got shape "
            f"{tuple(input.shape)}"
        )
    if batch_first:
        input = input.transpose(0, 1)
    steps, batch = input.shape[0], input.shape[1]
    if len(lens) != batch:
        raise ShapeError(
            f"pack_padded_sequence: {len(lens)} lengths for a batch of {batch} (input shape "
            f"{tuple(input.shape)}, batch_first={batch_first})"
        )
    if batch and min(lens) <= 0:
        raise ArgumentError(
            f"pack_padded_sequence: every length must be positive, got lengths {lens}"
        )
    if batch and max(lens) > steps:
        raise ShapeError(
            f"pack_padded_sequence: a length of {max(lens)} exceeds the {steps} steps of the "
            f"input (shape {tuple(input.shape)}, batch_first={batch_first})"
        )
    sorted_indices = None
    if enforce_sorted:
        if any(a < b for a, b in zip(lens, lens[1:], strict=False)):
            raise ArgumentError(
                f"pack_padded_sequence: lengths {lens} are not in decreasing order; sort the "
                "batch or pass enforce_sorted=False"
            )
        order = np.arange(batch)
    else:
        order = np.argsort(-np.asarray(lens, dtype=np.int64), kind="stable")
        sorted_indices = _tensor(order, input.device)
    sorted_lens = np.asarray(lens, dtype=np.int64)[order]
    max_len = int(sorted_lens[0]) if batch else 0
    batch_sizes = np.array([(sorted_lens > t).sum() for t in range(max_len)], dtype=np.int64)
    # Row (t, j) of the packed data is row t * B + order[j] of the flattened padded input.
    rows = np.concatenate([t * batch + order[:b] for t, b in enumerate(batch_sizes)])
    flat = input.reshape(steps * batch, *input.shape[2:])
    data = flat.index_select(0, _tensor(rows, input.device))
    return PackedSequence(
        data, _tensor(batch_sizes), sorted_indices, invert_permutation(sorted_indices)
    )


def pad_packed_sequence(
    sequence: PackedSequence,
    batch_first: bool = False,
    padding_value: float = 0.0,
    total_length: int | None = None,
):
    """Undo :func:`pack_padded_sequence`: ``(padded, lengths)`` with the batch in its original
    order, ``padded`` of shape ``(T, B, *)`` (``(B, T, *)`` if ``batch_first``), ``T`` the
    longest length or ``total_length``, padding filled with ``padding_value``; ``lengths`` an
    int64 tensor.

    Gradient: each valid step's gradient goes back to its packed row; padding gets none.
    """
    from ferro.creation import full
    from ferro.ops import cat

    if not isinstance(sequence, PackedSequence):
        raise ArgumentTypeError(
            f"pad_packed_sequence: expected a PackedSequence, got {type(sequence).__name__}"
        )
    data = sequence.data
    sizes = _int_list(sequence.batch_sizes, "pad_packed_sequence", "batch_sizes")
    steps = len(sizes)
    batch = sizes[0] if sizes else 0
    if total_length is not None:
        if not isinstance(total_length, numbers.Integral) or total_length < steps:
            raise ArgumentError(
                f"pad_packed_sequence: total_length must be an int of at least the longest "
                f"length {steps}, got {total_length!r}"
            )
        steps = int(total_length)
    # Position t * B + j of the padded result takes packed row offset[t] + j, or the padding
    # row (index n, appended) where sequence j has ended.
    n = data.shape[0]
    src = np.full((steps, batch), n, dtype=np.int64)
    offset = 0
    for t, b in enumerate(sizes):
        src[t, :b] = offset + np.arange(b)
        offset += b
    pad = full((1, *data.shape[1:]), padding_value, dtype=data.dtype, device=data.device)
    padded = cat([data, pad], 0).index_select(0, _tensor(src.ravel(), data.device))
    padded = padded.reshape(steps, batch, *data.shape[1:])
    lengths = (np.asarray(sizes)[None, :] > np.arange(batch)[:, None]).sum(axis=1)
    if sequence.unsorted_indices is not None:
        padded = padded.index_select(1, sequence.unsorted_indices)
        lengths = lengths[_int_list(sequence.unsorted_indices, "pad_packed_sequence", "index")]
    if batch_first:
        padded = padded.transpose(0, 1)
    return padded, _tensor(lengths)


def pad_sequence(
    sequences,
    batch_first: bool = False,
    padding_value: float = 0.0,
    padding_side: str = "right",
):
    """Stack sequences of shapes ``(L_i, *)`` into ``(max L, B, *)`` (``(B, max L, *)`` if
    ``batch_first``), each padded with ``padding_value`` on ``padding_side`` (``"right"`` or
    ``"left"``).

    Gradient: each sequence receives the gradient of its own rows; padding gets none.
    """
    from ferro.creation import full
    from ferro.ops import cat, stack

    if padding_side not in ("right", "left"):
        raise ArgumentError(
            f"pad_sequence: padding_side must be 'right' or 'left', got {padding_side!r}"
        )
    if isinstance(sequences, TensorBase):
        sequences = list(sequences.unbind(0))
    sequences = list(sequences)
    if not sequences:
        raise ArgumentError("pad_sequence: received an empty list of sequences")
    trailing = tuple(sequences[0].shape[1:])
    for k, s in enumerate(sequences):
        if s.ndim == 0 or tuple(s.shape[1:]) != trailing:
            raise ShapeError(
                f"pad_sequence: sequence {k} has shape {tuple(s.shape)}; every sequence must be "
                f"(L, *{trailing}) like sequence 0"
            )
    longest = max(s.shape[0] for s in sequences)
    padded = []
    for s in sequences:
        missing = longest - s.shape[0]
        if missing:
            fill = full((missing, *trailing), padding_value, dtype=s.dtype, device=s.device)
            s = cat([s, fill] if padding_side == "right" else [fill, s], 0)
        padded.append(s)
    return stack(padded, 1 if not batch_first else 0)


def unpad_sequence(padded_sequences, lengths, batch_first: bool = False) -> list:
    """The list of sequences ``padded[:lengths[b], b]`` of a padded batch (the inverse of
    :func:`pad_sequence`).

    Gradient: each sequence's gradient goes back to its rows.
    """
    lens = _int_list(lengths, "unpad_sequence", "lengths")
    if not batch_first:
        padded_sequences = padded_sequences.transpose(0, 1)
    if len(lens) != padded_sequences.shape[0]:
        raise ShapeError(
            f"unpad_sequence: {len(lens)} lengths for a batch of {padded_sequences.shape[0]}"
        )
    return [padded_sequences[b, :n] for b, n in enumerate(lens)]


def pack_sequence(sequences, enforce_sorted: bool = True) -> PackedSequence:
    """Pack a list of sequences ``(L_i, *)`` (``pad_sequence`` then ``pack_padded_sequence``).

    Gradient: each sequence receives the gradient of its packed rows.
    """
    sequences = list(sequences)
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences: PackedSequence) -> list:
    """The list of sequences a :class:`PackedSequence` holds, in the original batch order.

    Gradient: each sequence's gradient goes back to its packed rows.
    """
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)


__all__ = [
    "PackedSequence",
    "invert_permutation",
    "pack_padded_sequence",
    "pack_sequence",
    "pad_packed_sequence",
    "pad_sequence",
    "unpack_sequence",
    "unpad_sequence",
]
