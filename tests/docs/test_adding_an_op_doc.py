"""docs/development.md's worked example ("Adding an op") is what the code really is: every ```py
block of that section (code quoted from the repository, not run) appears line for line in a file
the section cites, and the steps it names are the ones the op needed."""

import pathlib
import re

import pytest

import ferro
import ferro.ops
from ferro.ops import elementwise
from ferro.ops.registry import REGISTRY

ROOT = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    not (ROOT / "pyproject.toml").is_file() or not (ROOT / "ferro" / "ops").is_dir(),
    reason=f"no ferro source tree at {ROOT}: the worked example is checked against the source",
)

QUOTED = re.compile(r"^( *)```py\n(.*?)^\1```", re.S | re.M)
CITED = re.compile(r"`((?:ferro|tests)/[\w/]+\.py)`")


def _section(text, title):
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _occurs_in(block_lines, source_lines):
    """Whether ``block_lines`` equal consecutive lines of ``source_lines``, up to one uniform
    indentation (a quoted list item is shown without the indentation of its list)."""
    first = block_lines[0]
    for i, line in enumerate(source_lines):
        shift = len(line) - len(first)
        if shift < 0 or line[shift:] != first or line[:shift].strip():
            continue
        window = source_lines[i : i + len(block_lines)]
        if len(window) == len(block_lines) and all(
            (s[shift:] == b and not s[:shift].strip()) if b else not s.strip()
            for s, b in zip(window, block_lines, strict=True)
        ):
            return True
    return False


def _quoted_blocks(section):
    blocks = []
    for indent, body in QUOTED.findall(section):
        # A block inside a list item is indented with the item: remove that.
        blocks.append([ln[len(indent) :] for ln in body.splitlines()])
    return blocks


def test_every_quoted_block_of_the_worked_example_is_in_a_cited_file():
    section = _section((ROOT / "docs/development.md").read_text(), "Adding an op")
    cited = sorted(set(CITED.findall(section)))
    assert "ferro/ops/elementwise.py" in cited and "tests/ops/opdb/elementwise.py" in cited
    sources = {path: (ROOT / path).read_text().splitlines() for path in cited}
    blocks = _quoted_blocks(section)
    assert len(blocks) >= 3, "the worked example quotes the op, its __all__ and its entry"
    for lines in blocks:
        assert any(_occurs_in(lines, src) for src in sources.values()), (
            "docs/development.md, 'Adding an op': this block is not in any of "
            f"{cited}:\n" + "\n".join(lines)
        )


def test_occurs_in_rejects_a_block_that_differs_from_the_source():
    source = ["ENTRIES = [", '    unary("log", f),', '    binary("logaddexp", g),', "]"]
    assert _occurs_in(['unary("log", f),', 'binary("logaddexp", g),'], source)
    assert not _occurs_in(['unary("log", f),', 'binary("logaddexp", h),'], source)
    assert not _occurs_in(['binary("logaddexp", g),', 'unary("log", f),'], source)


def test_the_worked_example_op_is_registered_and_exported_with_no_other_edit():
    # The op's entry is quoted above; tests/ops/test_opdb.py fails for an op without one.
    assert REGISTRY["logaddexp"] is elementwise.Logaddexp
    assert "logaddexp" in elementwise.__all__
    assert ferro.logaddexp is ferro.ops.logaddexp is elementwise.logaddexp
    assert "logaddexp" in ferro.__all__ and "logaddexp" in ferro.nn.functional.__all__
