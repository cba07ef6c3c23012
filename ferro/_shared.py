"""Shared-memory CPU tensors: ``Tensor.share_memory_()``, ``Tensor.is_shared()`` and
``Module.share_memory()``, for Hogwild-style training in several processes (pytorch/examples
mnist_hogwild).

Note [Shared-memory tensors]. ``share_memory_`` copies a CPU tensor's data into a *block*: a
memory file (``memfd_create``; an unlinked temporary file where there is none) mapped shared,
and gives the tensor an array over it. A tensor whose data lies in a block is pickled by
multiprocessing's ``ForkingPickler`` (Process arguments under spawn and forkserver, queues,
pipes) as the block's file descriptor (``multiprocessing.reduction.DupFd``, as PyTorch's
"file_descriptor" strategy does) plus the array's offset, shape, strides and dtype; the receiving
process maps the same file, so writes on either side (an optimizer's in-place steps) are seen by
the other. Under fork a child inherits the mapping itself. Any other pickling (``pickle.dumps``,
``copy``, ``ferro.save``) copies the values, as before.

What differs from PyTorch: sharing replaces the tensor's array, so views taken *before*
``share_memory_`` keep the old memory (PyTorch moves the storage under all its views); take
views after sharing. CUDA tensors are refused (DeviceError): CuPy arrays are not shared this
way. Gradients made later by backward are private to each process, as in PyTorch.
"""

from __future__ import annotations

import mmap
import os
import pickle
import tempfile
import weakref

import numpy as np

_registered = False


class _Block(mmap.mmap):
    """A shared mapping of a memory file; ``fd`` stays open (closed with the block) so the block
    can be sent to another process."""


def _new_block(nbytes: int, fd: int | None = None) -> _Block:
    if fd is None:
        if hasattr(os, "memfd_create"):
            fd = os.memfd_create("ferro-shared", os.MFD_CLOEXEC)
        else:
            with tempfile.TemporaryFile() as f:  # unlinked: gone when the last fd closes
                fd = os.dup(f.fileno())
        try:
            os.ftruncate(fd, nbytes)
        except OSError:
            os.close(fd)
            raise
    block = _Block(fd, nbytes)
    block.fd = fd
    block.address = np.frombuffer(block, np.uint8).ctypes.data
    weakref.finalize(block, os.close, fd)
    return block


def block_of(arr):
    """The block holding the NumPy array ``arr``'s memory, or None."""
    while isinstance(arr, np.ndarray):
        arr = arr.base
    return arr if isinstance(arr, _Block) else None


def share(arr: np.ndarray) -> np.ndarray:
    """``arr`` if its memory is in a block, else a copy of it in a new block."""
    if block_of(arr) is not None:
        return arr
    _register()
    out = np.ndarray(arr.shape, arr.dtype, buffer=_new_block(max(arr.nbytes, 1)))
    out[...] = arr
    return out


def _reduce(t):
    data = t._data
    block = block_of(data) if isinstance(data, np.ndarray) else None
    if block is None:
        return t.__reduce_ex__(pickle.HIGHEST_PROTOCOL)
    from multiprocessing.reduction import DupFd

    offset = data.__array_interface__["data"][0] - block.address
    layout = (offset, data.shape, data.strides, data.dtype.str)
    return _rebuild_shared, (type(t), DupFd(block.fd), len(block), layout, t.requires_grad)


def _rebuild_shared(cls, dup_fd, nbytes, layout, requires_grad):
    from ferro._tensor import _rebuild

    _register()
    offset, shape, strides, dtype = layout
    block = _new_block(nbytes, dup_fd.detach())
    data = np.ndarray(shape, dtype, buffer=block, offset=offset, strides=strides)
    return _rebuild(cls, data, requires_grad)


def _register() -> None:
    # ForkingPickler dispatches on the exact type: Tensor and Parameter (other subclasses pickle
    # by value).
    global _registered
    if not _registered:
        from multiprocessing.reduction import ForkingPickler

        from ferro._tensor import Tensor
        from ferro.nn.parameter import Parameter

        for cls in (Tensor, Parameter):
            ForkingPickler.register(cls, _reduce)
        _registered = True
