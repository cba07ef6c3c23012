"""``t.data`` is a Tensor (PyTorch's semantics); ferro's own code reaches the array through
``t._data``. This guard reads ferro's source for the shapes of code that treat ``.data`` as the
array (``x.data.shape``, ``x.data[...] = ...``, ``np.asarray(x.data)``-like attribute reads), so
code written before the change, or merged from a branch that predates it, fails here with the
line to fix instead of somewhere deep in a test run."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    not (ROOT / "ferro" / "_C").is_dir(), reason=f"no ferro source tree at {ROOT}"
)

# "<name>.data." or "<name>.data[": an attribute or an item of what .data returned. Not module
# paths (ferro.utils.data.X), NumPy's ctypes.data, CuPy's arr.data.ptr / .mem.
SUSPECT = re.compile(r"\b(?!utils\b)\w+\.data(\.|\[)")
ALLOWED = re.compile(r"ctypes\.data|\.data\.(ptr|mem)\b|utils\.data")
# Files whose own objects have a ``data`` field that is not a tensor's: PackedSequence.data.
OWN_DATA_FIELD = {"ferro/nn/utils/rnn.py"}


def test_ferro_code_uses_the_raw_array_accessor():
    found = []
    for path in sorted((ROOT / "ferro").rglob("*.py")):
        if path.relative_to(ROOT).as_posix() in OWN_DATA_FIELD:
            continue
        for no, line in enumerate(path.read_text().splitlines(), 1):
            if SUSPECT.search(line) and not ALLOWED.search(line):
                found.append(f"{path.relative_to(ROOT)}:{no}: {line.strip()}")
    assert not found, "use t._data for the array (t.data is a Tensor now):\n" + "\n".join(found)
