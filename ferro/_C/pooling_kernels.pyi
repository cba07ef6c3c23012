import numpy as np

def supports(arr: object) -> bool: ...
def accepts(arrays: tuple) -> bool: ...
def accepts_grad(gy: object, arrays: tuple) -> bool: ...

FUSED_KERNELS: frozenset[str]

def max_pool_fwd(
    x: np.ndarray,
    kernel_size: tuple[int, ...],
    stride: tuple[int, ...],
    padding: tuple[int, ...],
    dilation: tuple[int, ...],
    out_size: tuple[int, ...],
) -> tuple[np.ndarray, np.ndarray]: ...
def max_pool_bwd(
    gy: np.ndarray, indices: np.ndarray, shape: tuple[int, ...], nd: int
) -> np.ndarray: ...
