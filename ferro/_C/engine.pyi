from collections.abc import Callable
from typing import Any

from ferro._C.accumulate import set_gpu_backend as set_gpu_backend
from ferro._C.accumulate import sum_to_shape as sum_to_shape
from ferro._C.accumulate import sum_to_shape_generic as sum_to_shape_generic
from ferro._C.graph import OpDef
from ferro._C.graph import RemovableHandle as RemovableHandle
from ferro._C.graph import bump_version as bump_version
from ferro._C.graph import inplace_direct as inplace_direct
from ferro._C.graph import register_node_hook as register_node_hook
from ferro._C.graph import register_node_prehook as register_node_prehook
from ferro._C.graph import (
    register_post_accumulate_grad_hook as register_post_accumulate_grad_hook,
)
from ferro._C.graph import register_tensor_hook as register_tensor_hook
from ferro._C.graph import retain_grad as retain_grad
from ferro._C.graph import retains_grad as retains_grad
from ferro._C.state import GUARD_KINDS as GUARD_KINDS
from ferro._C.state import ModeGuard as ModeGuard
from ferro._C.state import _get_mode as _get_mode
from ferro._C.state import _pop_saved_hooks as _pop_saved_hooks
from ferro._C.state import _pop_threads as _pop_threads
from ferro._C.state import _push_saved_hooks as _push_saved_hooks
from ferro._C.state import _push_threads as _push_threads
from ferro._C.state import _reset_mode as _reset_mode
from ferro._C.state import _set_mode as _set_mode
from ferro._C.state import get_num_threads as get_num_threads
from ferro._C.state import get_profiler as get_profiler
from ferro._C.state import is_anomaly_enabled as is_anomaly_enabled
from ferro._C.state import is_grad_enabled as is_grad_enabled
from ferro._C.state import is_inference_mode_enabled as is_inference_mode_enabled
from ferro._C.state import now_ns as now_ns
from ferro._C.state import overrides_enabled as overrides_enabled
from ferro._C.state import reset_stats as reset_stats
from ferro._C.state import set_anomaly as set_anomaly
from ferro._C.state import set_num_threads as set_num_threads
from ferro._C.state import set_overrides_enabled as set_overrides_enabled
from ferro._C.state import set_profiler as set_profiler
from ferro._C.state import stats as stats
from ferro._C.tensor import TensorBase

__all__: list[str]

def apply(op: OpDef, *args: Any, **params: Any) -> Any: ...
def arith(op: OpDef, slow: Callable[..., Any], reverse: bool = ...) -> Callable[..., Any]: ...
def compiled(op: OpDef, slow: Callable[..., Any]) -> Callable[..., Any]: ...
def run_backward(
    roots: tuple[TensorBase, ...],
    root_grads: tuple[Any, ...],
    retain_graph: bool = ...,
    inputs: tuple[TensorBase, ...] | None = ...,
    accumulate: bool = ...,
    allow_unused: bool = ...,
    num_threads: int = ...,
) -> tuple[Any, ...] | None: ...
def commit_inplace(t: TensorBase, out: TensorBase, op_name: str) -> TensorBase: ...
