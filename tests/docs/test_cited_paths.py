"""Every repository path that a docstring, a comment or a page of docs/ cites exists, so a moved or
renamed file cannot leave the documentation pointing at nothing. Reads the source tree, so it
skips where the tests run without one beside them."""

import ast
import io
import pathlib
import re
import tokenize

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    not (ROOT / "pyproject.toml").is_file() or not (ROOT / "ferro" / "_C").is_dir(),
    reason=f"no ferro source tree at {ROOT}: the cited-path check reads the repository",
)

# A cited path starts at a top-level folder of the repository and is not part of a longer path
# (a temporary directory, a URL). Placeholders such as results/<name>.json are not citations.
CITATION = re.compile(r"(?<![\w./-])((?:ferro|tests|benchmarks|docs)/[\w.*/<>{}-]+)")


def citations(text):
    """The repository paths ``text`` cites: those with a file suffix or a trailing slash (so
    "ferro/NumPy", a ratio, is not one), without a trailing full stop or #anchor."""
    found = set()
    for raw in CITATION.findall(text):
        path = raw.split("#", 1)[0].rstrip(".")
        if any(c in path for c in "<>{}"):
            continue
        if path.endswith("/") or "." in path.rsplit("/", 1)[-1]:
            found.add(path)
    return found


def python_prose(source):
    """The docstrings and comments of a Python file: the prose where a path is a citation (a
    string literal may be test data)."""
    tree = ast.parse(source)
    parts = [
        ast.get_docstring(node, clean=False) or ""
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
    ]
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    parts += [tok.string for tok in tokens if tok.type == tokenize.COMMENT]
    return "\n".join(parts)


def _sources():
    """(file, prose) for every file that can cite a path. Cython, C and CUDA files are read
    whole: ast cannot parse them, and a path in their code is a citation too."""
    py = [ROOT / "setup.py", *ROOT.glob("docs/*.py")]
    for top in ("ferro", "tests", "benchmarks"):
        py += (ROOT / top).rglob("*.py")
    for path in sorted(py):
        yield path, python_prose(path.read_text())
    for pattern in ("*.pyx", "*.pxd", "*.pyi", "*.h", "*.cu", "*.cuh"):
        for path in sorted((ROOT / "ferro").rglob(pattern)):
            yield path, path.read_text()
    for path in [ROOT / "README.md", ROOT / ".ci" / "run", *sorted(ROOT.glob("docs/*.md"))]:
        yield path, path.read_text()


def _exists(path):
    if "*" in path:
        return any(ROOT.glob(path))
    return (ROOT / path).exists()


def test_citations_are_recognised():
    text = (
        "see docs/design.md#note-grad-ownership and tests/build/, run benchmarks/bench_ops.py. "
        "Not /tmp/clone/tests/x.py, ferro/NumPy, benchmarks/results/<name>.json or ferro/_C"
    )
    assert citations(text) == {"docs/design.md", "tests/build/", "benchmarks/bench_ops.py"}


def test_python_prose_is_docstrings_and_comments_only():
    source = '"""Module, cites docs/a.md."""\nx = "tests/b.py"  # cites tests/c.py\n'
    assert citations(python_prose(source)) == {"docs/a.md", "tests/c.py"}


def test_every_cited_repository_path_exists():
    missing = {}
    n = 0
    for source, text in _sources():
        for path in citations(text):
            n += 1
            if not _exists(path):
                missing.setdefault(path, []).append(str(source.relative_to(ROOT)))
    assert n > 50, f"only {n} citations found: the scan is broken"
    assert not missing, "cited but not in the repository: " + "; ".join(
        f"{p} (in {', '.join(sorted(s))})" for p, s in sorted(missing.items())
    )
