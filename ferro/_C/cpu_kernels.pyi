import numpy as np

def supports(arr: object) -> bool: ...
def add_inplace(dst: np.ndarray, src: np.ndarray) -> int: ...
def sum_to_shape(src: np.ndarray, shape: tuple[int, ...]) -> np.ndarray: ...
def same_layout(arrays: tuple) -> bool: ...
def activation_backward(name: str, gy: np.ndarray, saved: np.ndarray) -> np.ndarray: ...
def silu_backward(gy: np.ndarray, x: np.ndarray, s: np.ndarray) -> np.ndarray: ...
def gelu_forward(x: np.ndarray) -> np.ndarray: ...
def all_finite(x: np.ndarray) -> bool: ...
def softmax_backward(gy: np.ndarray, y: np.ndarray) -> np.ndarray: ...
def cross_entropy_forward(
    x: np.ndarray, target: np.ndarray, weight: np.ndarray | None, ignore: int, eps: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...
def cross_entropy_backward(
    x: np.ndarray,
    target: np.ndarray,
    weight: np.ndarray | None,
    ignore: int,
    eps: float,
    lse: np.ndarray,
    wy: np.ndarray,
    scale: np.ndarray,
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
