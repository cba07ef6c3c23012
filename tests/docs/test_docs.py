"""Every ```python block in README.md and docs/*.md runs (the blocks of one file share a
namespace, in order), so the documentation cannot drift from the code."""

import pathlib
import re

import pytest

from ferro.ops.registry import REGISTRY

ROOT = pathlib.Path(__file__).resolve().parents[2]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def test_docs_exist():
    assert (ROOT / "README.md").exists() and len(FILES) > 3


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_code_blocks_run(path, capsys):
    blocks = BLOCK.findall(path.read_text())
    namespace = {"__name__": f"doc_{path.stem}"}
    registered = dict(REGISTRY)  # examples may register demo ops; do not leak them
    try:
        for i, code in enumerate(blocks):
            try:
                exec(compile(code, f"{path.name}[block {i}]", "exec"), namespace)
            except Exception as exc:  # pragma: no cover - the failure message is the point
                pytest.fail(f"{path.name} block {i} failed: {exc!r}\n{code}")
    finally:
        REGISTRY.clear()
        REGISTRY.update(registered)
