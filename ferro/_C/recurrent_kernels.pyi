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
