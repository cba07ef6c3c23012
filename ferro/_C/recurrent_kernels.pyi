import numpy as np

FUSED_KERNELS: frozenset[str]

def accepts(arrays: tuple) -> bool: ...
def accepts_grad(gy: object, arrays: tuple) -> bool: ...
def lstm_fwd(
    x: np.ndarray, acts: np.ndarray, c: np.ndarray, tc: np.ndarray
) -> tuple[np.ndarray, np.ndarray]: ...
def gru_fwd(
    x: np.ndarray, hg: np.ndarray, h: np.ndarray, acts: np.ndarray, hg_n: np.ndarray
) -> np.ndarray: ...
def lstm_bwd(
    gh: np.ndarray,
    gc: np.ndarray,
    acts: np.ndarray,
    c_prev: np.ndarray,
    tc: np.ndarray,
    g_gates: np.ndarray,
) -> np.ndarray: ...
def gru_bwd(
    gh: np.ndarray,
    acts: np.ndarray,
    hg_n: np.ndarray,
    h_prev: np.ndarray,
    g_in: np.ndarray,
    g_hid: np.ndarray,
) -> np.ndarray: ...
def set_blas(sgemm: int, dgemm: int, sgemv: int, dgemv: int, wide: bool) -> None: ...
def have_blas() -> bool: ...
def layer_fwd(
    gru: bool,
    x: np.ndarray,
    h: np.ndarray,
    c: np.ndarray | None,
    w_t: np.ndarray,
    b_hh: np.ndarray | None,
    w_hr: np.ndarray | None,
    out: np.ndarray,
    h_prev: np.ndarray,
    acts: np.ndarray,
    c_prev: np.ndarray | None,
    tc: np.ndarray | None,
    cell_h: np.ndarray | None,
    hgn: np.ndarray | None,
    offsets: np.ndarray,
    sizes: np.ndarray,
    first: int,
    count: int,
    direction: int,
) -> None: ...
def layer_bwd(
    gru: bool,
    gout: np.ndarray,
    gh: np.ndarray,
    gc: np.ndarray | None,
    w_hh: np.ndarray,
    w_hr: np.ndarray | None,
    h_prev: np.ndarray,
    acts: np.ndarray,
    c_prev: np.ndarray | None,
    tc: np.ndarray | None,
    hgn: np.ndarray | None,
    g_in: np.ndarray,
    g_hid: np.ndarray | None,
    g_hr: np.ndarray | None,
    offsets: np.ndarray,
    sizes: np.ndarray,
    first: int,
    count: int,
    direction: int,
) -> None: ...
