"""Generate the op tables of docs/ops.md from the public functions' docstrings.

    python docs/gen_ops_table.py --write     # rewrite the tables inside docs/ops.md
    python docs/gen_ops_table.py > /tmp/tables.md

Each row takes the signature from the function and the gradient from the docstring's
``Gradient:`` line, so the reference cannot drift from the code;
``tests/docs/test_ops_doc.py`` fails when docs/ops.md differs from this output.
"""

from __future__ import annotations

import importlib
import inspect
import pathlib
import sys

FAMILIES = [
    ("Elementwise", "elementwise"),
    ("Special functions", "special"),
    ("Activations", "activation"),
    ("Reductions", "reduction"),
    ("Scans", "scan"),
    ("Shape and indexing", "shape"),
    ("Linear algebra", "linalg"),
    ("Matrix functions and decompositions (also in ferro.linalg)", "decomp"),
    ("Losses", "loss"),
    ("Convolution", "conv"),
    ("Pooling and pixel shuffle", "pooling"),
    ("Normalization", "norm"),
    ("Dropout", "dropout"),
    ("Resampling", "resampling"),
    ("Recurrent cells", "recurrent"),
    ("Attention", "attention"),
    ("Devices", "device"),
    ("In place", "inplace"),
]


def tables() -> str:
    ops = importlib.import_module("ferro.ops")
    names = sorted(ops.__all__)
    untitled = set(ops.FAMILIES) - {stem for _, stem in FAMILIES}
    if untitled:
        raise SystemExit(f"gen_ops_table: give the op families {sorted(untitled)} a title")
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


BEGIN, END = "<!-- BEGIN GENERATED TABLES -->\n", "<!-- END GENERATED TABLES -->"


def write(path: pathlib.Path) -> None:
    """Replace the generated part of ``path`` (between the BEGIN/END markers) with the tables."""
    text = path.read_text()
    start = text.index(BEGIN) + len(BEGIN)
    end = text.index(END)
    path.write_text(text[:start] + tables() + text[end:])


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write(pathlib.Path(__file__).resolve().parent / "ops.md")
    else:
        print(tables(), end="")
