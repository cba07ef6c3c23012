"""``nn.DataParallel``: PyTorch's single-process data parallelism, on ferro's one device.

PyTorch's ``DataParallel`` splits each batch over several GPUs from one process and runs the
replicas in threads. Many public programs wrap their model in it unconditionally (and PyTorch,
without a GPU, just calls the module), so ferro keeps the wrapper and its ``module.`` state-dict
prefix, and runs the module on one device: for several GPUs use
:class:`~ferro.nn.parallel.DistributedDataParallel`, one process per GPU, which PyTorch also
recommends over ``DataParallel``.
"""

from __future__ import annotations

from ferro._C.tensor import TensorBase
from ferro.backend import cuda_device_count, device
from ferro.errors import ArgumentTypeError, NotSupportedError
from ferro.nn.module import Module


def _to(obj, device):
    # Tensors inside tuples (named too), lists and dicts move; anything else passes as is.
    if isinstance(obj, TensorBase):
        return obj.to(device)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_to(o, device) for o in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to(o, device) for o in obj)
    if isinstance(obj, dict):
        return {k: _to(v, device) for k, v in obj.items()}
    return obj


def _index(d) -> int:
    if isinstance(d, int):
        return d
    return device(d).index or 0


class DataParallel(Module):
    """Wrap ``module`` as PyTorch's ``nn.DataParallel(module, device_ids, output_device, dim)``.

    Without a CUDA device (whatever ``device_ids`` says, as in PyTorch) ``forward`` calls the
    module. With one, it moves the Tensor arguments (also inside tuples, lists and dicts) to
    ``device_ids[0]`` (default: device 0), calls the module, whose parameters must be there
    (``model.to("cuda")``, as PyTorch requires), and moves the outputs to ``output_device``
    (default: the same device). More than one device id raises NotSupportedError: ferro runs one
    device per process. ``dim`` (the dimension PyTorch splits the batch along) is kept.

    ``state_dict()`` keys start with ``module.``, as in PyTorch.

    Example:
        >>> net = ferro.nn.DataParallel(ferro.nn.Linear(3, 2))
        >>> net(ferro.ones(4, 3)).shape, list(net.state_dict())
        (ferro.Size([4, 2]), ['module.weight', 'module.bias'])
    """

    def __init__(self, module: Module, device_ids=None, output_device=None, dim: int = 0):
        super().__init__()
        if not isinstance(module, Module):
            raise ArgumentTypeError(
                f"DataParallel: module must be a ferro.nn.Module, got {type(module).__name__}"
            )
        self.module = module
        self.dim = int(dim)
        if cuda_device_count() == 0:
            self.device_ids, self.output_device = [], None
            return
        ids = [0] if device_ids is None else [_index(d) for d in device_ids]
        if len(ids) > 1:
            raise NotSupportedError(
                f"DataParallel over devices {ids}: ferro runs one device per process; use "
                "nn.parallel.DistributedDataParallel with one process per GPU"
            )
        self.device_ids = ids
        self.output_device = None if output_device is None else _index(output_device)

    def forward(self, *inputs, **kwargs):
        if not self.device_ids:
            return self.module(*inputs, **kwargs)
        device = f"cuda:{self.device_ids[0]}"
        out = self.module(*_to(inputs, device), **_to(kwargs, device))
        if self.output_device is None or self.output_device == self.device_ids[0]:
            return out
        return _to(out, f"cuda:{self.output_device}")
