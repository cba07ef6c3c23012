"""``parameters_to_vector`` and ``vector_to_parameters``, as in ``torch.nn.utils``."""

from __future__ import annotations

from ferro.errors import ArgumentTypeError, DeviceError, ShapeError


def _tensors(parameters, who):
    from ferro._C.tensor import TensorBase

    params = [parameters] if isinstance(parameters, TensorBase) else list(parameters)
    devices = {p.device for p in params}
    if len(devices) > 1:
        raise DeviceError(
            f"{who}: the parameters are on several devices: {sorted(map(str, devices))}"
        )
    return params


def parameters_to_vector(parameters):
    """The parameters flattened and concatenated into one 1-d tensor (differentiable)."""
    from ferro.ops import cat

    params = _tensors(parameters, "parameters_to_vector")
    return cat([p.reshape(-1) for p in params])


def vector_to_parameters(vec, parameters) -> None:
    """Copy the consecutive slices of the 1-d ``vec`` into the parameters' data, in order."""
    from ferro._C.tensor import TensorBase

    if not isinstance(vec, TensorBase):
        raise ArgumentTypeError(
            f"vector_to_parameters: expected vec to be a Tensor, got {type(vec).__name__}"
        )
    params = _tensors(parameters, "vector_to_parameters")
    total = sum(p.numel() for p in params)
    if vec.ndim != 1 or vec.numel() != total:
        raise ShapeError(
            f"vector_to_parameters: vec must be 1-d with {total} elements (the parameters' "
            f"total), got shape {tuple(vec.shape)}"
        )
    start = 0
    for p in params:
        n = p.numel()
        p.data = vec[start : start + n].detach().reshape(p.shape).clone()
        start += n


__all__ = ["parameters_to_vector", "vector_to_parameters"]
