"""Generate the op tables of docs/ops.md from the public functions' docstrings.

    python docs/gen_ops_table.py > /tmp/tables.md

Each row takes the signature from the function and the gradient from the docstring's
``Gradient:`` line, so the reference cannot drift from the code;
``tests/docs/test_ops_doc.py`` fails when docs/ops.md differs from this output.
"""

from __future__ import annotations

import importlib
import inspect

FAMILIES = [
    ("Elementwise", "elementwise"),
    ("Activations", "activation"),
    ("Reductions", "reduction"),
    ("Shape and indexing", "shape"),
    ("Linear algebra", "linalg"),
    ("Losses", "loss"),
    ("Dropout", "dropout"),
    ("Devices", "device"),
    ("In place", "inplace"),
]


def tables() -> str:
    ops = importlib.import_module("ferro.ops")
    names = sorted(set(ops.__all__) - {"REGISTRY", "apply", "register"})
    lines = []
    for title, stem in FAMILIES:
        modname = f"ferro.ops.{stem}"
        lines += [f"### {title}", "", "| op | signature | gradient |", "|---|---|---|"]
        for n in names:
            f = getattr(ops, n)
            if getattr(f, "__module__", None) != modname:
                continue
            doc = inspect.getdoc(f) or ""
            grad = next(
                (
                    ln[len("Gradient:") :].strip()
                    for ln in doc.splitlines()
                    if ln.startswith("Gradient:")
                ),
                "",
            )
            if stem == "inplace":
                grad = "that of the out-of-place op"
            elif not grad:
                grad = "not differentiable"
            sig = str(inspect.signature(f)).replace("|", "\\|")
            lines.append(f"| `{n}` | `{n}{sig}` | {grad.replace('|', chr(92) + '|')} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(tables(), end="")
