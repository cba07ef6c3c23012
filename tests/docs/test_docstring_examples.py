"""Every ``>>>`` example in ferro's docstrings runs and prints what it shows (docs/api.md is
made from these docstrings), so the reference cannot drift from the code. The modules that need
MPI or CuPy (ferro.distributed, ferro.cuda) and the demos are left out; their docs are checked
by their own tests."""

import doctest
import importlib
import pkgutil

import numpy as np
import pytest

import ferro
from ferro.ops.registry import REGISTRY

_SKIP = ("ferro.examples", "ferro.distributed", "ferro.cuda", "ferro._C")


def _modules():
    names = ["ferro"]
    for m in pkgutil.walk_packages(ferro.__path__, "ferro."):
        if not m.name.startswith(_SKIP):
            names.append(m.name)
    return names


def _tests():
    finder = doctest.DocTestFinder()
    out = []
    for name in _modules():
        for t in finder.find(importlib.import_module(name)):
            if t.examples:
                out.append(t)
    return out


TESTS = _tests()


def test_there_are_examples():
    assert len(TESTS) > 100 and sum(len(t.examples) for t in TESTS) > 190


@pytest.mark.parametrize("test", TESTS, ids=lambda t: t.name)
def test_docstring_example(test, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    test.globs.update({"ferro": ferro, "np": np, "nn": ferro.nn, "F": ferro.nn.functional})
    registered = dict(REGISTRY)
    ferro.manual_seed(0)
    out = []
    runner = doctest.DocTestRunner(
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False
    )
    try:
        result = runner.run(test, out=out.append, clear_globs=False)
    finally:
        REGISTRY.clear()
        REGISTRY.update(registered)
        ferro.set_default_dtype(ferro.float32)
        ferro.set_printoptions(profile="default")
    assert result.failed == 0, "".join(out)
