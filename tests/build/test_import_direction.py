"""Dependencies point one way (docs/design.md, "Layers"; issue 12, section 3).

Reads every import statement in ferro's source tree (``ast`` for Python, the import lines of
Cython files) and checks the layering:

- ``ferro/_C`` imports nothing of ferro above it but ``ferro.errors``;
- ``ferro/backend.py`` and ``ferro/dtypes.py`` (asked by everything above the core) import only
  the core, the errors and each other;
- ``ferro/ops`` imports neither ``ferro.cuda`` (overrides are registered from the composition
  root) nor ``ferro.creation`` nor ``ferro.nn``;
- below the composition root (``ferro/__init__.py``) nothing imports the top-level package for
  its re-exports (``import ferro``, ``from ferro import zeros``); importing a submodule
  (``from ferro import backend``) is fine;
- nothing imports CuPy at module level (``import ferro`` must work without it).
"""

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PKG = ROOT / "ferro"

pytestmark = pytest.mark.skipif(
    not (PKG / "__init__.py").exists(), reason="needs the source tree (run from a checkout)"
)

# Imports the rules below allow for now, each waiting on a change another branch makes.
PENDING: set[tuple[str, str]] = set()  # (file, import) exceptions waiting on a change: none

# Cython import lines: "from ferro.x cimport y", "from ferro.x import y", "cimport ferro.x".
_CY_IMPORT = re.compile(r"^(\s*)(?:from\s+([\w.]+)\s+c?import\b|c?import\s+([\w.]+))", re.M)


def _submodules() -> set:
    names = {p.stem for p in PKG.glob("*.py") if p.stem != "__init__"}
    return names | {p.name for p in PKG.iterdir() if (p / "__init__.py").exists()}


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(path: pathlib.Path, module: str | None, level: int) -> str:
    if not level:
        return module or ""
    base = _module_name(path).split(".")
    if path.name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _python_imports(path: pathlib.Path):
    """(module, names or None, at module level, statement) for every import in a Python file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []

    def visit(node, top):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend((a.name, None, top, f"import {a.name}") for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                module = _resolve(path, child.module, child.level)
                names = [a.name for a in child.names]
                found.append((module, names, top, f"from {module} import {', '.join(names)}"))
            # Function bodies run on call, not at import; class bodies run at import.
            visit(child, top and not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef))

    visit(tree, True)
    return found


def _cython_imports(path: pathlib.Path):
    """(module, None, at module level, line) for every import line of a .pyx/.pxd file."""
    out = []
    for m in _CY_IMPORT.finditer(path.read_text()):
        out.append((m.group(2) or m.group(3), None, m.group(1) == "", m.group(0).strip()))
    return out


def _imports():
    """{relative path: [(module, names, at module level, statement), ...]} for ferro's sources."""
    table = {}
    for path in sorted(PKG.rglob("*")):
        if path.suffix == ".py":
            table[path.relative_to(ROOT).as_posix()] = _python_imports(path)
        elif path.suffix in (".pyx", ".pxd"):
            table[path.relative_to(ROOT).as_posix()] = _cython_imports(path)
    return table


def _violations(rule) -> list:
    bad = []
    for rel, imports in _imports().items():
        for module, names, top, statement in imports:
            why = rule(rel, module, names, top)
            if why and (rel, statement) not in PENDING:
                bad.append(f"{rel}: {statement} ({why})")
    return bad


def _within(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_the_scanner_sees_imports_of_every_kind():
    # Guards the test itself: a scanner that found nothing would pass every rule below.
    table = _imports()
    backend = {(m, t) for m, _, t, _ in table["ferro/backend.py"]}
    assert ("ferro.errors", True) in backend  # from-imports at module level
    assert ("cupy", False) in backend and ("cupy", True) not in backend  # inside functions
    engine = {(m, t) for m, _, t, _ in table["ferro/_C/engine.pyx"]}
    assert ("ferro._C.graph", True) in engine  # Cython cimports
    relative = _resolve(PKG / "ops" / "loss.py", "registry", 1)
    assert relative == "ferro.ops.registry"  # relative imports resolve to absolute names
    assert len(table) > 40


def test_the_core_imports_nothing_above_it():
    def rule(rel, module, names, top):
        if rel.startswith("ferro/_C/") and _within(module, "ferro"):
            if not _within(module, "ferro._C", "ferro.errors"):
                return "_C may import only ferro._C and ferro.errors"
        return None

    assert _violations(rule) == []


def test_backend_and_dtypes_sit_right_above_the_core():
    allowed = ("ferro._C", "ferro.errors", "ferro.backend", "ferro.dtypes")

    def rule(rel, module, names, top):
        if rel in ("ferro/backend.py", "ferro/dtypes.py") and _within(module, "ferro"):
            if not _within(module, *allowed):
                return "the backend layer imports only the core and the errors"
        return None

    assert _violations(rule) == []


def test_ops_import_neither_cuda_nor_creation_nor_nn():
    def rule(rel, module, names, top):
        if not rel.startswith("ferro/ops/"):
            return None
        targets = {module} | {f"{module}.{n}" for n in names or () if module == "ferro"}
        if any(_within(t, "ferro.cuda", "ferro.creation", "ferro.nn") for t in targets):
            return "ops must not depend on cuda, creation or nn"
        return None

    assert _violations(rule) == []


def test_nothing_below_the_root_uses_the_top_level_package():
    submodules = _submodules()

    def rule(rel, module, names, top):
        if rel == "ferro/__init__.py" or rel.startswith("ferro/examples/"):
            return None  # the composition root; examples are user code
        if module == "ferro" and names is None:
            return "import ferro: the whole package, from below its root"
        if module == "ferro" and any(n not in submodules for n in names):
            return f"from ferro import {names}: a re-export, not a submodule"
        return None

    assert _violations(rule) == []


def test_nothing_imports_cupy_at_module_level():
    def rule(rel, module, names, top):
        if top and _within(module, "cupy", "cupyx", "cupy_backends"):
            return "CuPy at import time: import ferro must work without it"
        return None

    assert _violations(rule) == []


def test_pending_exceptions_are_still_needed():
    # An exception whose import is gone must be deleted from PENDING, not kept as a loophole.
    table = _imports()
    for rel, statement in PENDING:
        assert any(s == statement for _, _, _, s in table.get(rel, ())), (rel, statement)
