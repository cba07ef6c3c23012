"""Each compiled module's ``.pyi`` stub lists every public name the module has and names nothing
the module lacks, so type checkers and editors see the compiled API as it is. The stubs ship
with the package, so this checks the installed copy."""

import ast
import importlib
import importlib.machinery
import pathlib
import types

import pytest

import ferro._C

C_DIR = pathlib.Path(ferro._C.__file__).parent


def _compiled_modules():
    # "engine.cpython-311-x86_64-linux-gnu.so" also ends with the bare ".so": keep the stem.
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    return sorted({p.name.split(".", 1)[0] for p in C_DIR.iterdir() if p.name.endswith(suffixes)})


MODULES = _compiled_modules()


def public_names(mod):
    """The names a user of ``mod`` reaches: its ``__all__`` when it declares one, else every name
    without a leading underscore except modules and what it imported from outside ``ferro._C``
    (the error classes, NumPy): those have their own stubs."""
    if hasattr(mod, "__all__"):
        return set(mod.__all__)
    names = set()
    for name, obj in vars(mod).items():
        if name.startswith("_") or isinstance(obj, types.ModuleType):
            continue
        if callable(obj) and not obj.__module__.startswith("ferro._C."):
            continue
        names.add(name)
    return names


def stub_names(source):
    """The names a stub defines: functions, classes, annotated or assigned names, and explicit
    re-exports (``from m import x as x``, PEP 484). A plain import is the stub's own helper."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update(a.asname for a in node.names if a.asname and a.asname == a.name)
    return names


def test_the_compiled_modules_are_found():
    assert {"state", "tensor", "graph", "accumulate", "engine", "cpu_kernels"} <= set(MODULES)
    assert all("." not in name for name in MODULES), MODULES


def test_public_names_leave_out_imports():
    from ferro._C import state

    names = public_names(state)
    assert {"is_grad_enabled", "set_overrides_enabled", "Flags"} <= names
    assert not names & {"ArgumentError", "contextvars", "_set_mode"}


def test_stub_names_count_defs_and_reexports_only():
    source = (
        "from typing import Any\n"
        "from ferro._C.graph import OpDef as OpDef\n"
        "from ferro._C.graph import Node as N\n"
        "__all__: list[str]\n"
        "X = 1\n"
        "class C: ...\n"
        "def f(a: Any) -> None: ...\n"
    )
    assert stub_names(source) == {"OpDef", "__all__", "X", "C", "f"}


@pytest.mark.parametrize("name", MODULES)
def test_stub_lists_every_public_name(name):
    stub = C_DIR / f"{name}.pyi"
    assert stub.exists(), f"ferro/_C/{name} has no stub {stub.name}"
    mod = importlib.import_module(f"ferro._C.{name}")
    missing = public_names(mod) - stub_names(stub.read_text())
    assert not missing, f"{stub.name} does not list {sorted(missing)}"


@pytest.mark.parametrize("name", MODULES)
def test_stub_names_nothing_the_module_lacks(name):
    mod = importlib.import_module(f"ferro._C.{name}")
    stale = {n for n in stub_names((C_DIR / f"{name}.pyi").read_text()) if not hasattr(mod, n)}
    assert not stale, f"{name}.pyi lists {sorted(stale)}, which ferro._C.{name} does not have"
