import numpy as np

FUSED_KERNELS: frozenset[str]

def accepts(arrays: tuple) -> bool: ...
def accepts_grad(gy: object, arrays: tuple) -> bool: ...
def deform_im2col(
    x: np.ndarray,
    offset: np.ndarray,
    mask: np.ndarray | None,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
) -> np.ndarray: ...
def deform_col2im(
    x: np.ndarray,
    offset: np.ndarray,
    mask: np.ndarray | None,
    gcols: np.ndarray,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
    need_x: bool = True,
    need_offset: bool = True,
    need_mask: bool = True,
) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]: ...
def grid_sample_fwd(
    x: np.ndarray, grid: np.ndarray, mode: str, padding_mode: str, align_corners: bool
) -> np.ndarray: ...
def grid_sample_bwd(
    gy: np.ndarray,
    x: np.ndarray,
    grid: np.ndarray,
    mode: str,
    padding_mode: str,
    align_corners: bool,
    need_x: bool = True,
    need_grid: bool = True,
) -> tuple[np.ndarray | None, np.ndarray | None]: ...
