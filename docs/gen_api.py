"""Generate docs/api.md: every public name of ferro's public modules with its first docstring
line, from the code itself.

    python docs/gen_api.py > docs/api.md

``tests/docs/test_ops_doc.py`` fails when docs/api.md differs from this output.
"""

from __future__ import annotations

import importlib
import inspect

MODULES = [
    ("ferro", "tensors, creation, devices, dtypes, grad mode, save/load, checkpoint (ops: ops.md)"),
    ("ferro.accelerator", "device-neutral accelerator queries, as PyTorch 2.6+ has them"),
    ("ferro.backend", "which array module and which device an array is on (one place)"),
    ("ferro.autograd", "backward, grad, Function, grad mode, anomaly detection"),
    ("ferro.linalg", "torch.linalg: inverses, solves, decompositions, norms (linalg.md)"),
    ("ferro.autograd.graph", "saved-tensor hooks"),
    ("ferro.nn", "modules and layers"),
    ("ferro.nn.init", "initializers"),
    ("ferro.nn.utils", "gradient clipping"),
    ("ferro.nn.parallel", "DistributedDataParallel"),
    ("ferro.distributed", "process groups and collectives over MPI"),
    ("ferro.optim", "optimizers"),
    ("ferro.optim.lr_scheduler", "learning-rate schedules"),
    ("ferro.utils.checkpoint", "checkpointing"),
    ("ferro.utils.data", "data loading"),
    ("ferro.random", "generators and seeding"),
    ("ferro.testing", "gradient checking"),
    ("ferro.profiler", "profiling"),
    ("ferro.cuda", "CUDA devices and generators (CuPy backend)"),
    ("ferro.viz", "graph export"),
    ("ferro.errors", "the exception hierarchy"),
]


def _summary(name, obj) -> str:
    import numpy as np

    import ferro

    if isinstance(obj, ferro.dtype):
        held = "" if obj in ferro.dtypes.SUPPORTED_DTYPES else " (not held: NotSupportedError)"
        return f"the {obj} dtype{held}"
    if isinstance(obj, np.dtype):
        return f"the {obj} dtype"
    doc = (inspect.getdoc(obj) or "").strip()
    # Cython embeds the signature as the first docstring line; the summary follows it.
    if doc.startswith(name + "("):
        doc = doc.split("\n", 1)[1].strip() if "\n" in doc else ""
    return doc.split("\n\n")[0].replace("\n", " ").replace("|", "\\|")


def api() -> str:
    ops = set(importlib.import_module("ferro.ops").__all__)
    out = [
        "# API reference",
        "",
        "Generated from the docstrings by `docs/gen_api.py`. The op functions (`ferro.add`,",
        "`ferro.relu`, ...) are listed with their gradients in [ops.md](ops.md).",
        "",
    ]
    for modname, what in MODULES:
        mod = importlib.import_module(modname)
        names = getattr(mod, "__all__", None) or [n for n in vars(mod) if not n.startswith("_")]
        rows = []
        for n in sorted(names):
            if modname == "ferro" and n in ops:
                continue
            obj = getattr(mod, n, None)
            if obj is None or inspect.ismodule(obj):
                continue
            if modname == "ferro.optim.lr_scheduler" and not inspect.isclass(obj):
                continue
            rows.append(f"| `{modname}.{n}` | {_summary(n, obj)} |")
        out += [f"## `{modname}`: {what}", "", "| name | summary |", "|---|---|", *rows, ""]
    return "\n".join(out)


if __name__ == "__main__":
    print(api(), end="")
