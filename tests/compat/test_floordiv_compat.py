"""``a // b`` on tensors (PyTorch's floor_divide), common in index arithmetic such as
``pos // 2``; it raised TypeError."""

import numpy as np
import pytest

import ferro


def test_floordiv_floors_and_keeps_integers_integral():
    a = ferro.tensor([7, -7, 2**24 + 1])
    out = a // 2
    assert out.dtype == ferro.int64
    assert out.tolist() == [3, -4, 2**23]
    assert (a // 1).tolist() == [7, -7, 2**24 + 1]
    assert (7 // ferro.tensor([2, -2])).tolist() == [3, -4]
    f = ferro.tensor([7.5, -7.5]) // 2
    assert f.dtype == ferro.float32 and f.tolist() == [3.0, -4.0]


@pytest.mark.torch
def test_floordiv_matches_torch():
    import torch

    x = np.array([7, -7, 0, 5, -1], np.int64)
    y = np.array([2, 2, 3, -2, 4], np.int64)
    xf = np.array([7.5, -7.5, 0.25, -0.25, 3.0], np.float32)
    for lib_a, lib_b in [(torch, ferro)]:
        cases = [
            (lambda T: T.tensor(x) // T.tensor(y)),
            (lambda T: T.tensor(x) // 3),
            (lambda T: 9 // T.tensor(y)),
            (lambda T: T.tensor(xf) // 0.5),
            (lambda T: T.tensor(x) // 2.0),
            (lambda T: T.tensor(xf) // T.tensor(y)),
        ]
        for case in cases:
            theirs, ours = case(lib_a), case(lib_b)
            assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
            np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
