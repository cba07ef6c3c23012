import numpy as np

FUSED_KERNELS: frozenset[str]

def accepts(arrays: tuple) -> bool: ...
def accepts_grad(gy: object, arrays: tuple) -> bool: ...
def layer_norm_fwd(
    x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, eps: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]: ...
def layer_norm_bwd(
    gy: np.ndarray,
    x: np.ndarray,
    weight: np.ndarray | None,
    mean: np.ndarray,
    rstd: np.ndarray,
    params: bool,
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]: ...
def rms_norm_fwd(
    x: np.ndarray, weight: np.ndarray | None, eps: float
) -> tuple[np.ndarray, np.ndarray]: ...
def rms_norm_bwd(
    gy: np.ndarray, x: np.ndarray, weight: np.ndarray | None, rstd: np.ndarray, params: bool
) -> tuple[np.ndarray, np.ndarray | None]: ...
def group_norm_fwd(
    x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, groups: int, eps: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]: ...
def group_norm_bwd(
    gy: np.ndarray,
    x: np.ndarray,
    weight: np.ndarray | None,
    mean: np.ndarray,
    rstd: np.ndarray,
    groups: int,
    params: bool,
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]: ...
def batch_norm_fwd(
    x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, eps: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]: ...
def batch_norm_bwd(
    gy: np.ndarray, x: np.ndarray, weight: np.ndarray | None, mean: np.ndarray, rstd: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...
