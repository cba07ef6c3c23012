"""``torch.utils.dlpack`` for ferro: exchange tensors with other array libraries as DLPack capsules.

Prefer the protocol form, which needs no capsule: ``ferro.from_dlpack(x)`` for any object with
``__dlpack__`` (NumPy, PyTorch, CuPy, JAX) and ``np.from_dlpack(t)`` / ``torch.from_dlpack(t)``
for a ferro tensor ``t``. The capsule form is for code written against ``torch.utils.dlpack``.
"""

from __future__ import annotations

from ferro.creation import from_dlpack
from ferro.errors import ArgumentTypeError

__all__ = ["from_dlpack", "to_dlpack"]


def to_dlpack(tensor):
    """A legacy DLPack capsule (``"dltensor"``) sharing ``tensor``'s memory.

    The capsule is consumed once, by ``from_dlpack`` here or in another library
    (``torch.utils.dlpack.from_dlpack``, ``cupy.from_dlpack``); NumPy takes only objects.

    Raises:
        ArgumentTypeError: ``tensor`` is not a ferro Tensor.
        GraphError: the tensor requires grad; export ``tensor.detach()``.
        ReadOnlyError: the tensor's memory is read-only, which a legacy capsule cannot mark.
    """
    from ferro._tensor import Tensor

    if not isinstance(tensor, Tensor):
        raise ArgumentTypeError(f"to_dlpack: expected a ferro Tensor, got {type(tensor).__name__}")
    return tensor.__dlpack__()
