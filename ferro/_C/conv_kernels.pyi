import numpy as np

FUSED_KERNELS: frozenset[str]

def accepts(arrays: tuple) -> bool: ...
def accepts_grad(gy: object, arrays: tuple) -> bool: ...
def depthwise2d_fwd(
    x: np.ndarray,
    w: np.ndarray,
    stride: tuple[int, int],
    pads: tuple[tuple[int, int], tuple[int, int]],
    dilation: tuple[int, int],
    out: tuple[int, int],
) -> np.ndarray: ...
def depthwise2d_bwd(
    gy: np.ndarray,
    x: np.ndarray,
    w: np.ndarray,
    stride: tuple[int, int],
    pads: tuple[tuple[int, int], tuple[int, int]],
    dilation: tuple[int, int],
    need_x: bool,
    need_w: bool,
) -> tuple[np.ndarray | None, np.ndarray | None]: ...
def im2col(
    x: np.ndarray,
    stride: tuple[int, ...],
    pads: tuple[tuple[int, int], ...],
    dilation: tuple[int, ...],
    col: np.ndarray,
) -> np.ndarray: ...
def col2im(
    col: np.ndarray,
    stride: tuple[int, ...],
    pads: tuple[tuple[int, int], ...],
    dilation: tuple[int, ...],
    gx: np.ndarray,
) -> np.ndarray: ...
def winograd_input(
    x: np.ndarray,
    pads: tuple[tuple[int, int], ...],
    v: np.ndarray,
    depth: tuple[int, int] | None = None,
) -> np.ndarray: ...
def winograd_input_grad(
    v: np.ndarray,
    pads: tuple[tuple[int, int], ...],
    gx: np.ndarray,
    depth: tuple[int, int] | None = None,
) -> np.ndarray: ...
def winograd_output(
    m: np.ndarray, y: np.ndarray, depth: tuple[int, int] | None = None
) -> np.ndarray: ...
def winograd_output_grad(
    gy: np.ndarray, dm: np.ndarray, depth: tuple[int, int] | None = None
) -> np.ndarray: ...
def winograd1d_gather(
    x: np.ndarray, mat: np.ndarray, m: int, lo: int, v: np.ndarray
) -> np.ndarray: ...
def winograd1d_scatter(m: np.ndarray, mat: np.ndarray, y: np.ndarray) -> np.ndarray: ...
def winograd2d_gather(
    x: np.ndarray,
    mat: np.ndarray,
    m: int,
    lo: tuple[int, int],
    tiles: tuple[int, int],
    v: np.ndarray,
) -> np.ndarray: ...
def winograd2d_scatter(
    m_: np.ndarray,
    mat: np.ndarray,
    m: int,
    lo: tuple[int, int],
    tiles: tuple[int, int],
    y: np.ndarray,
    add: bool = False,
) -> np.ndarray: ...
def winograd3d_gather(
    x: np.ndarray,
    mat: np.ndarray,
    m: int,
    lo: tuple[int, int, int],
    tiles: tuple[int, int, int],
    v: np.ndarray,
) -> np.ndarray: ...
def winograd3d_scatter(
    m_: np.ndarray,
    mat: np.ndarray,
    m: int,
    lo: tuple[int, int, int],
    tiles: tuple[int, int, int],
    y: np.ndarray,
    add: bool = False,
) -> np.ndarray: ...
def space_to_depth2d(
    x: np.ndarray, stride: tuple[int, int], lo: tuple[int, int], z: np.ndarray
) -> np.ndarray: ...
def depth_to_space2d(
    z: np.ndarray, stride: tuple[int, int], lo: tuple[int, int], x: np.ndarray
) -> np.ndarray: ...
def swap_last2(x: np.ndarray) -> np.ndarray: ...
