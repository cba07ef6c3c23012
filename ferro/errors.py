"""ferro's one exception hierarchy.

Every error ferro raises on purpose is a :class:`FerroError`. Each subclass also derives from the
builtin a Python user would expect, so ``except ValueError`` keeps working:

- :class:`ShapeError` (``ValueError``): shapes that do not fit the op.
- :class:`DtypeError` (``TypeError``): dtypes that do not fit or mix.
- :class:`DeviceError` (``TypeError``): arrays on different devices in one op.
- :class:`GraphError` (``RuntimeError``): misuse of the autograd graph (freed graph, non-scalar
  root without a gradient, a tensor that does not require grad, ...).
- :class:`GradientError` (``GraphError``): an op's or a hook's backward returned the wrong number,
  shape or dtype of gradients.
- :class:`AnomalyError` (``GraphError``): NaN/Inf in a gradient under anomaly detection.
- :class:`CheckpointError` (``GraphError``): a checkpoint's recomputation did not match.
- :class:`SerializationError` (``ValueError``): ``ferro.load`` of a file that is not a valid ferro
  state file (nothing is executed, nothing partially loaded).
- :class:`GradcheckError` (``AssertionError``, and ``RuntimeError`` as PyTorch's): ``gradcheck``
  found a wrong gradient.
- :class:`ArgumentError` (``ValueError``): an argument's value is not allowed (a negative size,
  an unknown mode string, a size that overflows, ...).
- :class:`ArgumentTypeError` (``TypeError``): an argument of a type the function does not take
  (a ragged list, an object array, ``None`` where a tensor is needed, ...).
- :class:`IndexOutOfRangeError` (``IndexError``): an index outside the dimension it indexes.
  Python's iteration protocol and ``except IndexError`` rely on the builtin base.
- :class:`ReadOnlyError` (``ValueError``): an in-place write (an in-place op, an optimizer step,
  a fused kernel) into memory that is not writeable, such as a read-only memory map.
- :class:`NotSupportedError` (``NotImplementedError``): a feature ferro deliberately does not
  provide (float16 on the CPU, ...), named as such rather than failing later.
- :class:`DistributedError` (``RuntimeError``): ``ferro.distributed`` misuse (no process group,
  a rank outside the group, mismatched collective arguments) or a failed transfer.
- :class:`DistributedTimeoutError` (``DistributedError``, ``TimeoutError``): a collective or a
  point-to-point transfer did not complete within the process group's timeout; the message names
  the collective and the ranks that did not arrive.
- :class:`MissingFeatureError` (``NotSupportedError`` and ``AttributeError``): a PyTorch name
  ferro does not have; the message says what to do instead.
- :class:`NondeterministicError` (``RuntimeError``): an op with no deterministic implementation
  on its device (a CUDA scatter-add by atomics) ran under
  ``ferro.use_deterministic_algorithms(True)``.
- :class:`ProcessException` (``RuntimeError``): a process of ``ferro.multiprocessing.spawn``
  failed: :class:`ProcessRaisedException` (it raised; the message holds its traceback) or
  :class:`ProcessExitedException` (it exited with a nonzero code or was killed by a signal).

Messages name the op, what was expected and what was received.
"""


class FerroError(Exception):
    """Base class of every error ferro raises on purpose."""


class ShapeError(FerroError, ValueError):
    """Shapes that do not fit the op."""


class DtypeError(FerroError, TypeError):
    """Dtypes that do not fit the op, or that mix where they must not."""


class DeviceError(FerroError, TypeError):
    """Arrays on different devices (or backends) in one op."""


class GraphError(FerroError, RuntimeError):
    """Misuse of the autograd graph."""


class GradientError(GraphError):
    """A backward function or hook returned the wrong number, shape or dtype of gradients."""


class AnomalyError(GraphError):
    """Anomaly detection found NaN or Inf in a gradient; names the node and where it was made."""


class CheckpointError(GraphError):
    """Checkpoint recomputation saved tensors that differ from the original forward's."""


class SerializationError(FerroError, ValueError):
    """``ferro.load`` got a file that is not a readable ferro state file."""


class GradcheckError(FerroError, AssertionError, RuntimeError):
    """``ferro.testing.gradcheck`` found analytical and numerical gradients that disagree."""


class ArgumentError(FerroError, ValueError):
    """An argument's value is not allowed."""


class ArgumentTypeError(FerroError, TypeError):
    """An argument of a type the function does not take."""


class IndexOutOfRangeError(FerroError, IndexError):
    """An index outside the dimension it indexes."""


class ReadOnlyError(FerroError, ValueError):
    """An in-place write into memory that is not writeable."""


class NotSupportedError(FerroError, NotImplementedError):
    """A feature ferro deliberately does not provide."""


class DistributedError(FerroError, RuntimeError):
    """Misuse of ``ferro.distributed`` or a failed transfer between ranks."""


class DistributedTimeoutError(DistributedError, TimeoutError):
    """A collective or transfer that did not complete within the process group's timeout."""


class LinAlgError(ArgumentError):
    """A matrix that a linalg op cannot take: singular (inv, solve), not positive-definite
    (cholesky), or LAPACK did not converge (PyTorch's ``torch.linalg.LinAlgError``)."""


class MissingFeatureError(NotSupportedError, AttributeError):
    """A PyTorch name ferro does not have (``t.to_sparse``, ``ferro.jit``); the message names
    the ferro way, if there is one. An AttributeError too, so ``hasattr`` stays False."""


class NondeterministicError(FerroError, RuntimeError):
    """An op without a deterministic implementation on its device ran while
    ``ferro.use_deterministic_algorithms(True)`` was set."""


class ProcessException(FerroError, RuntimeError):
    """A process that ``ferro.multiprocessing.spawn`` started failed; ``error_index`` is its
    index, ``pid`` its process id."""

    def __init__(self, msg: str, error_index: int, error_pid: int) -> None:
        super().__init__(msg)
        self.msg, self.error_index, self.pid = msg, error_index, error_pid

    def __reduce__(self):
        return type(self), (self.msg, self.error_index, self.pid)


class ProcessRaisedException(ProcessException):
    """A spawned process raised; the message is its traceback."""


class ProcessExitedException(ProcessException):
    """A spawned process exited with a nonzero code (``exit_code``) or by a signal
    (``signal_name``)."""

    def __init__(self, msg, error_index, error_pid, exit_code, signal_name=None) -> None:
        super().__init__(msg, error_index, error_pid)
        self.exit_code, self.signal_name = exit_code, signal_name

    def __reduce__(self):
        return type(self), (self.msg, self.error_index, self.pid, self.exit_code, self.signal_name)


__all__ = [
    "FerroError",
    "ShapeError",
    "DtypeError",
    "DeviceError",
    "GraphError",
    "GradientError",
    "AnomalyError",
    "CheckpointError",
    "SerializationError",
    "GradcheckError",
    "ArgumentError",
    "ArgumentTypeError",
    "IndexOutOfRangeError",
    "ReadOnlyError",
    "NotSupportedError",
    "DistributedError",
    "DistributedTimeoutError",
    "LinAlgError",
    "MissingFeatureError",
    "NondeterministicError",
    "ProcessException",
    "ProcessRaisedException",
    "ProcessExitedException",
]
