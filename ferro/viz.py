"""Graph export: the backward graph of a tensor as Graphviz DOT text.

``to_dot(t)`` needs nothing beyond ferro; ``to_graphviz(t)`` returns a ``graphviz.Source``
(render it with ``.render(...)``) when the ``graphviz`` package is installed.
"""

from __future__ import annotations

from ferro._C.tensor import TensorBase
from ferro.errors import ArgumentTypeError


def _shape(s) -> str:
    return "(" + ", ".join(str(d) for d in s) + ")"


def to_dot(tensor, name: str = "backward") -> str:
    """DOT text of the graph that backward from ``tensor`` would walk: one box per node (its
    name, output shapes and saved arrays), one ellipse per leaf that accumulates a gradient."""
    if not isinstance(tensor, TensorBase):
        raise ArgumentTypeError(f"to_dot: expected a Tensor, got {type(tensor).__name__}")
    lines = [f"digraph {name} {{", '  rankdir="BT";', '  node [fontname="monospace"];']
    ids: dict[int, str] = {}
    stack = []

    def ident(obj) -> str:
        key = id(obj)
        if key not in ids:
            ids[key] = f"n{len(ids)}"
            if isinstance(obj, TensorBase):
                lines.append(f'  {ids[key]} [shape=ellipse, label="leaf {_shape(obj.shape)}"];')
            else:
                saved = []
                for s in obj.saved_info:
                    if s is None:
                        continue
                    saved.append(s if isinstance(s, str) else f"{s[1]}{_shape(s[0])}")
                outs = ", ".join(_shape(s) for s in obj.output_shapes)
                label = obj.name() + "\\nout: " + outs
                if saved:
                    label += "\\nsaved: " + ", ".join(saved)
                lines.append(f'  {ids[key]} [shape=box, label="{label}"];')
                stack.append(obj)
        return ids[key]

    root = tensor.grad_fn if tensor.grad_fn is not None else tensor
    if tensor.grad_fn is None and not tensor.requires_grad:
        lines.append("}")
        return "\n".join(lines)
    ident(root)
    seen = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        for target, nr in node.next_functions:
            if target is None:
                continue
            label = f' [label="{nr}"]' if not isinstance(target, TensorBase) and nr else ""
            lines.append(f"  {ident(target)} -> {ids[id(node)]}{label};")
    lines.append("}")
    return "\n".join(lines)


def to_graphviz(tensor):
    """A ``graphviz.Source`` of :func:`to_dot` (needs the ``graphviz`` package)."""
    try:
        import graphviz
    except ImportError as exc:
        raise ImportError("to_graphviz needs the graphviz package: pip install graphviz") from exc
    return graphviz.Source(to_dot(tensor))


__all__ = ["to_dot", "to_graphviz"]
