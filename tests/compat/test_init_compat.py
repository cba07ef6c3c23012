"""nn.init functions used by public models (timm's trunc_normal_, RL code's orthogonal_,
calculate_gain) that were missing."""

import math

import numpy as np
import pytest

import ferro
from ferro.nn import init


def test_trunc_normal_stays_in_its_absolute_bounds_and_is_seeded():
    ferro.manual_seed(0)
    w = init.trunc_normal_(ferro.empty(200, 50), std=0.02)
    x = w.numpy()
    assert x.min() >= -2.0 and x.max() <= 2.0
    assert abs(x.std() - 0.02) < 0.002
    y = init.trunc_normal_(ferro.empty(1000), mean=0.0, std=1.0, a=-0.5, b=0.5).numpy()
    assert y.min() >= -0.5 and y.max() <= 0.5
    ferro.manual_seed(0)
    np.testing.assert_array_equal(init.trunc_normal_(ferro.empty(200, 50), std=0.02).numpy(), x)
    with pytest.raises(ValueError):
        init.trunc_normal_(ferro.empty(3), a=1.0, b=-1.0)


@pytest.mark.parametrize("shape", [(4, 6), (6, 4), (3, 2, 2, 2)])
def test_orthogonal_gives_orthonormal_rows_or_columns(shape):
    w = init.orthogonal_(ferro.empty(*shape), gain=2.0).numpy().astype(np.float64)
    m = w.reshape(shape[0], -1) / 2.0
    if m.shape[0] <= m.shape[1]:
        np.testing.assert_allclose(m @ m.T, np.eye(m.shape[0]), atol=1e-5)
    else:
        np.testing.assert_allclose(m.T @ m, np.eye(m.shape[1]), atol=1e-5)


@pytest.mark.torch
def test_calculate_gain_matches_torch():
    import torch

    for args in [
        ("linear",),
        ("conv2d",),
        ("sigmoid",),
        ("tanh",),
        ("relu",),
        ("leaky_relu",),
        ("leaky_relu", 0.2),
        ("leaky_relu", math.sqrt(5)),
        ("selu",),
    ]:
        assert init.calculate_gain(*args) == pytest.approx(torch.nn.init.calculate_gain(*args))
