"""ferro: a define-by-run reverse-mode autograd with a Cython-compiled core.

NumPy on the CPU, CuPy on NVIDIA GPUs, an API that feels like PyTorch's.

Example:
    >>> import ferro
    >>> x = ferro.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> y = (x * x).sum()
    >>> y.backward()
    >>> x.grad
    tensor([2., 4., 6.])
"""

import os as _os
import re as _re
import warnings as _warnings

from ferro import (  # noqa: F401  (submodules)
    _C,  # noqa: F401  (raises a friendly error when the core is not built)
    accelerator,
    autograd,
    backend,
    backends,
    cuda,
    distributed,  # noqa: E402,F401  (no MPI import until a process group is made)
    distributions,
    errors,
    linalg,
    nn,
    optim,
    profiler,
    random,
    testing,
    utils,
    viz,
)
from ferro._C import allocator as _allocator
from ferro._C import conv_kernels as _conv_kernels
from ferro._C import cpu_kernels as _cpu_kernels
from ferro._C import engine as _engine
from ferro._C import norm_kernels as _norm_kernels
from ferro._C import pooling_kernels as _pooling_kernels
from ferro._C import recurrent_kernels as _recurrent_kernels
from ferro._C import resampling_kernels as _resampling_kernels
from ferro._C import state as _state
from ferro._intraop import get_num_threads, set_num_threads
from ferro._missing import module_attribute as __getattr__  # noqa: F401  (PEP 562 hints)
from ferro._printing import get_printoptions, set_printoptions
from ferro._tensor import Size, Tensor
from ferro.autograd import (
    enable_grad,
    grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)
from ferro.backend import (
    are_deterministic_algorithms_enabled,
    device,
    get_default_device,
    is_deterministic_algorithms_warn_only_enabled,
    set_default_device,
    use_deterministic_algorithms,
)
from ferro.backends import get_float32_matmul_precision, set_float32_matmul_precision
from ferro.creation import (
    arange,
    as_tensor,
    bernoulli,
    empty,
    empty_like,
    eye,
    from_dlpack,
    from_numpy,
    full,
    full_like,
    linspace,
    logspace,
    multinomial,
    normal,
    ones,
    ones_like,
    rand,
    rand_like,
    randint,
    randint_like,
    randn,
    randn_like,
    randperm,
    tensor,
    zeros,
    zeros_like,
)
from ferro.cuda import conv as _cuda_conv
from ferro.cuda import norm as _cuda_norm
from ferro.cuda import ops as _cuda_kernels
from ferro.cuda import pooling as _cuda_pooling
from ferro.cuda import recurrent as _cuda_recurrent
from ferro.cuda import resampling as _cuda_resampling
from ferro.dtypes import (
    bool_,
    dtype,
    float16,
    float32,
    float64,
    get_default_dtype,
    int8,
    int16,
    int32,
    int64,
    set_default_dtype,
    uint8,
)
from ferro.legacy import (
    BoolTensor,
    ByteTensor,
    DoubleTensor,
    FloatTensor,
    HalfTensor,
    IntTensor,
    LongTensor,
)
from ferro.ops import *  # noqa: F403  (every public op)
from ferro.ops import __all__ as _ops_all
from ferro.ops import fused as _fused
from ferro.random import (
    Generator,
    default_generator,
    get_rng_state,
    initial_seed,
    manual_seed,
    seed,
    set_rng_state,
)
from ferro.serialization import load, save
from ferro.utils.checkpoint import checkpoint, checkpoint_sequential

# The composition root: each backend's fused kernels become the overrides of the ops that
# ferro.ops.fused lists (so ops never import cuda), and the GPU kernels become the engine's
# accumulation and sum-to-shape on CuPy arrays. Neither imports CuPy: that waits for a kernel.
_fused.install(
    "cpu",
    _cpu_kernels,
    _conv_kernels,
    _norm_kernels,
    _pooling_kernels,
    _recurrent_kernels,
    _resampling_kernels,
)
_fused.install(
    "cuda", _cuda_kernels, _cuda_conv, _cuda_norm, _cuda_pooling, _cuda_recurrent, _cuda_resampling
)
_engine.set_gpu_backend(
    _cuda_kernels.owns, _cuda_kernels.accepts, _cuda_kernels.accumulate, _cuda_kernels.sum_to_shape
)
backend.register_dropout_mask(_cuda_kernels.dropout_mask)
# Note [Caching allocator] (ferro/_C/allocator.pyx): large NumPy buffers are reused, not
# page-faulted in again; FERRO_CACHING_ALLOCATOR=0 keeps NumPy's own allocator.
if _os.environ.get("FERRO_CACHING_ALLOCATOR", "1") != "0":
    _allocator.install()

__version__ = "0.1.0"

# PyTorch's dtype aliases (ferro.float is float32, ferro.int is int32, ...). Kept out of
# Note [Floating-point warnings]: PyTorch gives inf and nan silently (log(0) is -inf, 0/0 is
# nan); NumPy's ufuncs warn ("divide by zero encountered in log"), so a PyTorch program whose
# causal mask is ``log(tril(ones))`` printed a RuntimeWarning from inside ferro at every step.
# The warnings NumPy raises while ferro's own code runs its ufuncs are ignored, by two filters:
# one on the module they are attributed to (ferro's Python code), and one whose message
# pattern matches only while this thread is inside an op of the compiled engine
# (``ferro._C.state.in_op()``: ``a * b`` on tensors calls NumPy from compiled code, so its
# warning is attributed to the caller's line, whatever module that is). A user's own NumPy
# calls warn as before. Entering np.errstate per op instead cost each op about 0.3 us (session
# 19: a context variable set and reset around every op; 1-element ``x * y`` 0.40 -> 0.69 us);
# the depth counter costs nothing measurable. Anomaly mode (ferro.autograd.detect_anomaly) is
# the way to find where a nan or inf came from.
_FP_WARNING = r"(divide by zero|invalid value|overflow|underflow) encountered in"
_warnings.filterwarnings(
    "ignore", message=_FP_WARNING, category=RuntimeWarning, module=r"ferro(\.|$)"
)


class _InsideOp:
    """A warnings filter's message pattern (the filter calls its ``match``): NumPy's
    floating-point warnings while this thread is inside a ferro op."""

    __slots__ = ()
    _text = _re.compile(_FP_WARNING)

    def match(self, text):
        return _state.in_op() and self._text.match(text)


# Inserted as a plain pattern (filterwarnings takes strings only), then given the dynamic one in
# its place; the filter machinery calls the pattern's match() for each warning it checks.
_warnings.filterwarnings("ignore", message=_FP_WARNING, category=RuntimeWarning)
_warnings.filters[0] = ("ignore", _InsideOp(), RuntimeWarning, None, 0)

# __all__, so that ``from ferro import *`` does not shadow Python's float, int and bool.
bool = bool_
float = float32
double = float64
half = float16
long = int64
int = int32
short = int16

__all__ = [
    "Size",
    "Tensor",
    "tensor",
    "as_tensor",
    "from_numpy",
    "get_float32_matmul_precision",
    "get_num_threads",
    "set_num_threads",
    "use_deterministic_algorithms",
    "are_deterministic_algorithms_enabled",
    "is_deterministic_algorithms_warn_only_enabled",
    "set_float32_matmul_precision",
    "from_dlpack",
    "zeros",
    "ones",
    "empty",
    "full",
    "zeros_like",
    "ones_like",
    "full_like",
    "empty_like",
    "arange",
    "linspace",
    "logspace",
    "eye",
    "rand",
    "randn",
    "randint",
    "randperm",
    "rand_like",
    "randn_like",
    "randint_like",
    "bernoulli",
    "multinomial",
    "normal",
    "Generator",
    "default_generator",
    "manual_seed",
    "seed",
    "initial_seed",
    "get_rng_state",
    "set_rng_state",
    "dtype",
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "bool_",
    "double",
    "half",
    "long",
    "short",
    "get_default_dtype",
    "set_default_dtype",
    "device",
    "get_default_device",
    "set_default_device",
    "no_grad",
    "enable_grad",
    "set_grad_enabled",
    "inference_mode",
    "is_grad_enabled",
    "is_inference_mode_enabled",
    "grad",
    "checkpoint",
    "checkpoint_sequential",
    "save",
    "load",
    "set_printoptions",
    "get_printoptions",
    "FloatTensor",
    "DoubleTensor",
    "LongTensor",
    "BoolTensor",
    "IntTensor",
    "HalfTensor",
    "ByteTensor",
    *_ops_all,
]
