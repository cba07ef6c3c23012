import numpy as np

def supports(arr: object) -> bool: ...
def add_inplace(dst: np.ndarray, src: np.ndarray) -> int: ...
def sum_to_shape(src: np.ndarray, shape: tuple[int, ...]) -> np.ndarray: ...
def accepts(arrays: tuple) -> bool: ...
def accepts_grad(gy: object, arrays: tuple) -> bool: ...
def all_finite(x: np.ndarray) -> bool: ...

TWO_CORE_MIN: int

def binary(
    op: int, a: object, b: object, out: np.ndarray | None, alpha: float, least: int = ...
) -> object: ...
def sum_all(x: object) -> object: ...

FUSED_KERNELS: frozenset[str]

def tanh_bwd(gy: np.ndarray, y: np.ndarray) -> np.ndarray: ...
def sigmoid_bwd(gy: np.ndarray, y: np.ndarray) -> np.ndarray: ...
def relu_bwd(gy: np.ndarray, y: np.ndarray) -> np.ndarray: ...
def leaky_relu_bwd(gy: np.ndarray, x: np.ndarray, slope: float) -> np.ndarray: ...
def gelu_bwd(gy: np.ndarray, x: np.ndarray, approximate: str = "none") -> np.ndarray: ...
def silu_bwd(gy: np.ndarray, x: np.ndarray, s: np.ndarray) -> np.ndarray: ...
def gelu_fwd(x: np.ndarray, approximate: str = "none") -> np.ndarray: ...
def softmax_bwd(gy: np.ndarray, y: np.ndarray) -> np.ndarray: ...
def cross_entropy_fwd(
    logits: np.ndarray, target: np.ndarray, ignore_index: int = -100
) -> tuple[np.ndarray, np.ndarray]: ...
def cross_entropy_bwd(
    logits: np.ndarray,
    target: np.ndarray,
    lse: np.ndarray,
    gy: np.ndarray,
    denom: object,
    ignore_index: int = -100,
) -> np.ndarray: ...
def sgd_update(
    p: np.ndarray,
    g: np.ndarray,
    buf: np.ndarray,
    lr: float,
    momentum: float,
    dampening: float,
    weight_decay: float,
    nesterov: bool,
    first: bool,
) -> None: ...
def adam_update(
    p: np.ndarray,
    g: np.ndarray,
    m: np.ndarray,
    v: np.ndarray,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    decoupled: bool,
    bias_correction1: float,
    bias_correction2: float,
) -> None: ...
def rmsprop_update(
    p: np.ndarray,
    g: np.ndarray,
    sq: np.ndarray,
    buf: np.ndarray,
    gavg: np.ndarray,
    lr: float,
    alpha: float,
    eps: float,
    weight_decay: float,
    momentum: float,
    centered: bool,
) -> None: ...
def adagrad_update(
    p: np.ndarray, g: np.ndarray, acc: np.ndarray, clr: float, eps: float, weight_decay: float
) -> None: ...
