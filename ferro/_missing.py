"""Errors that help a PyTorch user: the PyTorch names ferro does not have, each with what to do
instead (issue 13, item 13).

``Tensor.__getattr__`` and ``ferro.__getattr__`` (the module's, PEP 562) run only when normal
lookup has failed, so these tables cost nothing on any working path. Only names that exist in
PyTorch are listed; any other unknown name is the plain AttributeError. Each message points at
the section of docs/pytorch.md that explains the difference.
"""

from __future__ import annotations

from ferro.errors import MissingFeatureError

_DOC = "docs/pytorch.md"

_SPARSE = "ferro has dense tensors only (no sparse layouts)"
_STORAGE = (
    "ferro tensors wrap a NumPy or CuPy array, not a storage; the raw array is t.numpy(), "
    "numpy.asarray(t) or numpy.from_dlpack(t)"
)
_NAMED = "ferro has no named tensors; index dimensions by number"
_QUANT = "ferro has no quantized tensors"
_COMPLEX = "ferro tensors hold float32, float64, int64 and bool, not complex numbers"
_DTYPE = "ferro tensors hold float32, float64, int64 and bool; use t.float() or t.double()"

# Tensor attribute -> (why, the ferro way or "", section of docs/pytorch.md).
TENSOR = {
    "to_sparse": (_SPARSE, "", "what-is-missing"),
    "to_sparse_csr": (_SPARSE, "", "what-is-missing"),
    "to_sparse_coo": (_SPARSE, "", "what-is-missing"),
    "coalesce": (_SPARSE, "", "what-is-missing"),
    "is_coalesced": (_SPARSE, "", "what-is-missing"),
    "sparse_dim": (_SPARSE, "", "what-is-missing"),
    "storage": (_STORAGE, "", "tensors-and-data"),
    "untyped_storage": (_STORAGE, "", "tensors-and-data"),
    "set_": (_STORAGE, "assign t.data = other instead", "tensors-and-data"),
    "resize_": (_STORAGE, "make a new tensor (ferro.empty(shape))", "tensors-and-data"),
    "names": (_NAMED, "", "what-is-missing"),
    "refine_names": (_NAMED, "", "what-is-missing"),
    "rename": (_NAMED, "", "what-is-missing"),
    "align_to": (_NAMED, "", "what-is-missing"),
    "q_scale": (_QUANT, "", "what-is-missing"),
    "dequantize": (_QUANT, "", "what-is-missing"),
    "int_repr": (_QUANT, "", "what-is-missing"),
    "real": (_COMPLEX, "", "what-is-missing"),
    "imag": (_COMPLEX, "", "what-is-missing"),
    "conj": (_COMPLEX, "", "what-is-missing"),
    "angle": (_COMPLEX, "", "what-is-missing"),
    "bfloat16": (_DTYPE, "", "dtypes"),
    "cfloat": (_DTYPE, "", "dtypes"),
    "cdouble": (_DTYPE, "", "dtypes"),
    "apply_": (
        "ferro has no per-element Python callbacks",
        "use ferro ops, or numpy on t.detach().numpy()",
        "what-is-missing",
    ),
    "map_": (
        "ferro has no per-element Python callbacks",
        "use ferro ops, or numpy on t.detach().numpy()",
        "what-is-missing",
    ),
    "record_stream": ("ferro manages CUDA streams through CuPy", "", "devices"),
}

# ferro.<name> -> (why, the ferro way or "", section of docs/pytorch.md).
MODULE = {
    "jit": (
        "ferro has no TorchScript (no tracing or scripting compiler)",
        "run the module eagerly; save its state_dict() with ferro.save",
        "what-is-missing",
    ),
    "compile": (
        "ferro has no graph compiler",
        "drop the torch.compile call: ferro runs eagerly, with a compiled autograd core",
        "what-is-missing",
    ),
    "fx": ("ferro has no FX graph capture", "", "what-is-missing"),
    "onnx": ("ferro has no ONNX export", "", "what-is-missing"),
    "export": ("ferro has no torch.export", "", "what-is-missing"),
    "sparse": (_SPARSE, "", "what-is-missing"),
    "sparse_coo_tensor": (_SPARSE, "", "what-is-missing"),
    "sparse_csr_tensor": (_SPARSE, "", "what-is-missing"),
    "quantization": (_QUANT, "", "what-is-missing"),
    "ao": (_QUANT, "", "what-is-missing"),
    "amp": (
        "ferro has no automatic mixed precision (no float16 arithmetic)",
        "train in float32",
        "dtypes",
    ),
    "autocast": (
        "ferro has no automatic mixed precision (no float16 arithmetic)",
        "train in float32",
        "dtypes",
    ),
    "bfloat16": (_DTYPE, "", "dtypes"),
    "complex64": (_COMPLEX, "", "dtypes"),
    "complex128": (_COMPLEX, "", "dtypes"),
    "cfloat": (_COMPLEX, "", "dtypes"),
    "cdouble": (_COMPLEX, "", "dtypes"),
    "view_as_complex": (_COMPLEX, "", "dtypes"),
    "fft": ("ferro has no FFT ops", "", "what-is-missing"),
    "special": ("ferro has no torch.special namespace", "", "what-is-missing"),
    "hub": ("ferro has no model hub (nothing is downloaded)", "", "what-is-missing"),
    "vmap": (
        "ferro has no vmap",
        "batch the computation along a leading dimension",
        "what-is-missing",
    ),
    "func": (
        "ferro has no torch.func",
        "use ferro.autograd.functional (jacobian, hessian, vjp, jvp, hvp)",
        "what-is-missing",
    ),
}


_NO_DEVICE = ("ferro runs on the CPU (NumPy) and NVIDIA GPUs (CuPy) only", "", "devices")

# nn.Module method -> (why, the ferro way or "", section of docs/pytorch.md).
NN_MODULE = {
    "compile": (
        "ferro has no compiler (torch.compile)",
        "call the module as it is",
        "what-is-missing",
    ),
    "xpu": _NO_DEVICE,
    "ipu": _NO_DEVICE,
    "mtia": _NO_DEVICE,
}


def _message(owner: str, name: str, entry) -> str:
    why, instead, section = entry
    text = f"ferro has no {owner}{name!r}: {why}"
    if instead:
        text += f"; {instead}"
    return f"{text} (see {_DOC}#{section})"


def tensor_attribute(name: str):
    """Raise the error for a missing Tensor attribute ``name`` (AttributeError either way)."""
    entry = TENSOR.get(name)
    if entry is None:
        raise AttributeError(f"'Tensor' object has no attribute {name!r}")
    raise MissingFeatureError(_message("Tensor.", name, entry))


class AbsentDevice:
    """``ferro.xpu`` and ``ferro.mps``: device families ferro does not run on. Programs probe
    them (pytorch/examples check ``torch.xpu.is_available()`` before choosing a device), so
    ``is_available()`` is False and ``device_count()`` 0; anything else is the
    MissingFeatureError of the device."""

    def __init__(self, name: str) -> None:
        self._name = name

    def is_available(self) -> bool:
        return False

    def device_count(self) -> int:
        return 0

    def __getattr__(self, attr: str):
        raise MissingFeatureError(_message(f"{self._name}.", attr, _NO_DEVICE))

    def __repr__(self) -> str:
        return f"<ferro.{self._name}: not available in ferro>"


DEVICES = {"xpu": AbsentDevice("xpu"), "mps": AbsentDevice("mps")}


def nn_module_attribute(owner: str, name: str):
    """Raise the error for a missing attribute ``name`` of a Module of class ``owner``."""
    entry = NN_MODULE.get(name)
    if entry is None:
        raise AttributeError(f"{owner} has no attribute {name!r}")
    raise MissingFeatureError(_message("Module.", name, entry))


def module_attribute(name: str):
    """``ferro.xpu``/``ferro.mps`` (:class:`AbsentDevice`), or raise the error for a missing
    ``ferro.<name>`` (AttributeError either way)."""
    if name in DEVICES:
        return DEVICES[name]
    entry = MODULE.get(name)
    if entry is None:
        raise AttributeError(f"module 'ferro' has no attribute {name!r}")
    raise MissingFeatureError(_message("", name, entry))
