"""ferro.use_deterministic_algorithms (Note [Deterministic algorithms] in ferro/backend.py)."""

import types

import numpy as np
import pytest

import ferro
from ferro import backend
from ferro.errors import ArgumentTypeError, NondeterministicError


@pytest.fixture
def deterministic():
    yield
    ferro.use_deterministic_algorithms(False)


def test_the_switch_and_its_queries(deterministic):
    assert not ferro.are_deterministic_algorithms_enabled()
    ferro.use_deterministic_algorithms(True)
    assert ferro.are_deterministic_algorithms_enabled()
    assert not ferro.is_deterministic_algorithms_warn_only_enabled()
    ferro.use_deterministic_algorithms(True, warn_only=True)
    assert ferro.is_deterministic_algorithms_warn_only_enabled()
    with pytest.raises(ArgumentTypeError, match="use_deterministic_algorithms"):
        ferro.use_deterministic_algorithms("yes")


def test_cpu_ops_run_unchanged_under_it(deterministic):
    # The CPU scatter-adds (indexing, embedding, scatter_add backward) are deterministic.
    ferro.use_deterministic_algorithms(True)
    x = ferro.arange(6.0, requires_grad=True)
    idx = ferro.tensor([0, 2, 2, 5])
    (x[idx].sum() + ferro.nn.functional.embedding(idx, x.reshape(6, 1)).sum()).backward()
    assert x.grad.tolist() == [2.0, 0.0, 4.0, 0.0, 0.0, 2.0]
    z = ferro.zeros(6).scatter_add(0, idx, ferro.ones(4))
    assert z.tolist() == [1.0, 0.0, 2.0, 0.0, 0.0, 1.0]


def test_a_device_scatter_add_raises_or_warns(deterministic):
    # add_at is the one scatter-add; any array module but NumPy's (CuPy) adds by atomics.
    device_xp = types.SimpleNamespace(add=np.add)
    out = np.zeros(3)
    backend.add_at(device_xp, out, np.array([0, 0]), np.ones(2), "gather backward")
    assert out.tolist() == [2.0, 0.0, 0.0]  # off: runs
    ferro.use_deterministic_algorithms(True)
    with pytest.raises(NondeterministicError, match="gather backward does not have a determ"):
        backend.add_at(device_xp, out, np.array([1]), np.ones(1), "gather backward")
    assert out.tolist() == [2.0, 0.0, 0.0]  # untouched
    assert isinstance(NondeterministicError("x"), RuntimeError)
    ferro.use_deterministic_algorithms(True, warn_only=True)
    with pytest.warns(UserWarning, match="gather backward"):
        backend.add_at(device_xp, out, np.array([1]), np.ones(1), "gather backward")
    assert out.tolist() == [2.0, 1.0, 0.0]
