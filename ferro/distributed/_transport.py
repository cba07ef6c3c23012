"""How an array travels through MPI: the one place that decides (Note [Distributed transport]).

- A C-contiguous, writeable NumPy array is handed to MPI as it is: no copy.
- Any other NumPy array (a strided view, read-only memory) goes through a contiguous staging
  copy, written back into the tensor once the transfer completes.
- A CuPy array goes to MPI directly when the MPI library says it is CUDA-aware
  (``MPIX_Query_cuda_support``, which mpi4py exposes as ``MPI.Query_cuda_support``), and
  otherwise through a host staging copy. ferro does not ship an NCCL path: on a machine without
  CUDA-aware MPI every GPU collective pays one device-to-host and one host-to-device copy.
"""

from __future__ import annotations

import numpy as np

from ferro.backend import cupy_or_none, is_device_array
from ferro.errors import DtypeError

# dtype -> MPI datatype name; the reductions of each kind MPI defines.
_MPI_TYPES = {
    np.dtype(np.float32): "FLOAT",
    np.dtype(np.float64): "DOUBLE",
    np.dtype(np.int8): "INT8_T",
    np.dtype(np.int16): "INT16_T",
    np.dtype(np.int32): "INT32_T",
    np.dtype(np.int64): "INT64_T",
    np.dtype(np.uint8): "UINT8_T",
    np.dtype(np.bool_): "C_BOOL",
}

_cuda_aware: bool | None = None


def mpi_type(MPI, dtype: np.dtype, op_name: str):
    """The MPI datatype of ``dtype``, or a DtypeError naming the collective."""
    try:
        return getattr(MPI, _MPI_TYPES[np.dtype(dtype)])
    except KeyError:
        names = ", ".join(sorted(str(d) for d in _MPI_TYPES))
        raise DtypeError(
            f"{op_name}: dtype {np.dtype(dtype)} cannot be sent ({names} can)"
        ) from None


def cuda_aware(MPI) -> bool:
    """Whether the MPI library accepts device pointers (asked once)."""
    global _cuda_aware
    if _cuda_aware is None:
        query = getattr(MPI, "Query_cuda_support", None)
        try:
            _cuda_aware = bool(query()) if query is not None else False
        except Exception:  # an MPI without the MPIX extension
            _cuda_aware = False
    return _cuda_aware


class Staged:
    """An array as MPI sees it: ``buf`` is what MPI reads or writes; ``finish()`` copies a
    received ``buf`` back into the original array when they differ."""

    __slots__ = ("array", "buf", "writes")

    def __init__(self, array, buf, writes: bool):
        self.array, self.buf, self.writes = array, buf, writes

    def finish(self) -> None:
        if self.writes and self.buf is not self.array:
            if is_device_array(self.array):
                self.array[...] = cupy_or_none().asarray(self.buf)
            else:
                np.copyto(self.array, self.buf)


def stage(MPI, array, writes: bool) -> Staged:
    """``array`` ready for MPI: itself where MPI can use it in place, else a staging copy (of
    its values when MPI reads them; uninitialised when MPI only writes it)."""
    if is_device_array(array):
        if cuda_aware(MPI) and array.flags.c_contiguous:
            return Staged(array, array, writes)
        return Staged(array, cupy_or_none().asnumpy(array), writes)
    if array.flags.c_contiguous and (array.flags.writeable or not writes):
        return Staged(array, array, writes)
    return Staged(array, np.ascontiguousarray(array), writes)


def empty_like_host(MPI, array, shape):
    """A buffer for MPI to receive into, for arrays of ``array``'s kind: on the device where
    MPI is CUDA-aware, else on the host."""
    if is_device_array(array) and cuda_aware(MPI):
        return cupy_or_none().empty(shape, dtype=array.dtype)
    return np.empty(shape, dtype=array.dtype)


def to_kind(array, like):
    """``array`` (a received host or device buffer) as an array of ``like``'s kind."""
    if is_device_array(like):
        return cupy_or_none().asarray(array)
    if is_device_array(array):
        return cupy_or_none().asnumpy(array)
    return array
