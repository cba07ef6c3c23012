"""Test configuration: tests import the installed, compiled ferro (run them from outside the
source tree, as .ci/run does), reset ferro's generator per test, and skip marked tests whose
requirement is missing."""

import importlib.util
import os

import numpy as np
import pytest
from hypothesis import settings

import ferro

# Hypothesis: no per-example deadline (this 2-core machine is shared; timing is not under test).
# Under CI (CI=true, as .ci/run runs) the examples are derandomized and nothing is stored, so a
# CI run is reproducible; elsewhere Hypothesis explores anew each run and remembers failures.
settings.register_profile("ci", derandomize=True, database=None, deadline=None)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pytest_configure(config):
    # The suite tests the installed, compiled package. Importing ferro from the checkout would
    # test the source tree instead (and hide a file missing from the wheel).
    # FERRO_TEST_INPLACE=1 allows an in-place build (python setup.py build_ext --inplace).
    here = os.path.dirname(os.path.abspath(ferro.__file__))
    if here.startswith(_REPO + os.sep) and os.environ.get("FERRO_TEST_INPLACE") != "1":
        raise pytest.UsageError(
            f"ferro was imported from the source tree ({here}), not from the installed package. "
            "Run the tests from outside the checkout (see README.md), or set "
            "FERRO_TEST_INPLACE=1 to test an in-place build."
        )


@pytest.fixture(autouse=True)
def _seed():
    ferro.manual_seed(0)
    yield


def pytest_collection_modifyitems(config, items):
    has_torch = importlib.util.find_spec("torch") is not None
    skip_torch = pytest.mark.skip(reason="PyTorch is not installed (optional oracle)")
    skip_gpu = pytest.mark.skip(reason="no CUDA device (gpu tests run where one exists)")
    has_gpu = ferro.cuda.is_available()
    for item in items:
        if "torch" in item.keywords and not has_torch:
            item.add_marker(skip_torch)
        if "gpu" in item.keywords and not has_gpu:
            item.add_marker(skip_gpu)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
