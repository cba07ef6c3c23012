"""Moving tensors between devices: ``to_device`` (differentiable: the gradient moves back)."""

from __future__ import annotations

from ferro.errors import DeviceError
from ferro.ops.registry import apply, register


def parse_device(device) -> tuple[str, int]:
    """``"cpu"``, ``"cuda"``, ``"cuda:1"`` -> (kind, index)."""
    text = str(device)
    if text == "cpu":
        return "cpu", 0
    if text == "cuda" or text.startswith("cuda:"):
        index = int(text.split(":")[1]) if ":" in text else 0
        return "cuda", index
    raise DeviceError(f"unknown device {device!r}; use 'cpu', 'cuda' or 'cuda:N'")


def device_of(arr) -> str:
    """The device name of an array: ``"cpu"`` or ``"cuda:N"``."""
    if type(arr).__module__.split(".")[0] == "cupy":
        return f"cuda:{arr.device.id}"
    return "cpu"


def move(arr, device: str):
    """``arr`` on ``device`` (the same array when it is already there)."""
    kind, index = parse_device(device)
    if device_of(arr) == (f"cuda:{index}" if kind == "cuda" else "cpu"):
        return arr
    if kind == "cpu":
        return arr.get()
    from ferro import cuda

    if not cuda.is_available():
        raise DeviceError(
            f"cannot move a tensor to {device}: CUDA is not available "
            "(install ferro[cuda12] or ferro[cuda13] on a machine with a GPU)"
        )
    if index >= cuda.device_count():
        raise DeviceError(
            f"cannot move a tensor to {device}: only {cuda.device_count()} CUDA device(s)"
        )
    import cupy

    with cupy.cuda.Device(index):
        return cupy.asarray(arr)


@register("to_device", same_dtype=False)
class ToDevice:
    @staticmethod
    def forward(ctx, x, *, device):
        ctx.source = device_of(x)
        return move(x, device)

    @staticmethod
    def backward(ctx, gy):
        return move(gy, ctx.source)


def to_device(x, device):
    """``x`` on ``device`` (``x`` itself when it is already there).

    Gradient: gx = gy moved back to x's device.
    """
    kind, index = parse_device(device)
    target = f"cuda:{index}" if kind == "cuda" else "cpu"
    if device_of(x.data) == target:
        return x
    return apply(ToDevice, x, device=target)


__all__ = ["to_device"]
