"""docs/ops.md's tables are what docs/gen_ops_table.py generates from the docstrings, and every
public op states its gradient (or that it has none)."""

import importlib.util
import inspect
import pathlib

import ferro.ops

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_ops_table", ROOT / "docs/gen_ops_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_ops_doc_tables_are_up_to_date():
    text = (ROOT / "docs/ops.md").read_text()
    start = text.index("<!-- BEGIN GENERATED TABLES -->\n") + len(
        "<!-- BEGIN GENERATED TABLES -->\n"
    )
    end = text.index("<!-- END GENERATED TABLES -->")
    assert text[start:end] == _generator().tables(), (
        "docs/ops.md is out of date: regenerate with python docs/gen_ops_table.py"
    )


def test_every_public_op_documents_its_gradient():
    missing = []
    for name in set(ferro.ops.__all__) - {"REGISTRY", "apply", "register"}:
        doc = inspect.getdoc(getattr(ferro.ops, name)) or ""
        if "Gradient:" not in doc and "not differentiable" not in doc and not name.endswith("_"):
            missing.append(name)
    assert not missing, f"ops without a gradient line in their docstring: {sorted(missing)}"


def test_api_reference_is_up_to_date():
    spec = importlib.util.spec_from_file_location("gen_api", ROOT / "docs/gen_api.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert (ROOT / "docs/api.md").read_text() == mod.api(), (
        "docs/api.md is out of date: regenerate with python docs/gen_api.py > docs/api.md"
    )
