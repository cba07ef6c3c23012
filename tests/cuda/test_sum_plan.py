"""The host side of the GPU sum-to-shape kernel, without a GPU: the coalescing plan, the launch
shape, and the kernel's index arithmetic replayed in NumPy against the generic reduction."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferro._C.engine import sum_to_shape_generic
from ferro.cuda.ops import MAX_DIMS, plan_sum_to_shape, sum_launch


def _offset(j, lens, red_mask, want_red):
    """ferro_offset from sum_to_shape.cu, vectorized over an index array ``j``."""
    off = np.zeros_like(j)
    stride = 1
    for k in range(len(lens) - 1, -1, -1):
        if bool(red_mask >> k & 1) == want_red:
            off += (j % lens[k]) * stride
            j = j // lens[k]
        stride *= lens[k]
    return off


def _replay(src, shape):
    """What the kernel computes: out[j] = sum_r src.flat[offset(j, kept) + offset(r, summed)]."""
    lens, red_mask, n_out, n_red = plan_sum_to_shape(src.shape, shape)
    j = np.arange(n_out)[:, None]
    r = np.arange(n_red)[None, :]
    if bin(red_mask).count("1") == 1:  # the kernel's division-free path
        k_red = red_mask.bit_length() - 1
        red_stride = int(np.prod(lens[k_red + 1 :], dtype=np.int64))
        idx = _offset(j, lens, red_mask, False) + r * red_stride
    else:
        idx = _offset(j, lens, red_mask, False) + _offset(r, lens, red_mask, True)
    return src.reshape(-1)[idx].sum(axis=1).reshape(shape)


@st.composite
def _broadcast_pair(draw):
    small = draw(st.lists(st.integers(1, 4), min_size=0, max_size=5))
    big = [draw(st.sampled_from([s, s] if s != 1 else [1, 3])) for s in small]
    lead = draw(st.lists(st.integers(1, 3), max_size=2))
    return tuple(lead + big), tuple(small)


@settings(max_examples=200, deadline=None)
@given(_broadcast_pair())
def test_kernel_index_arithmetic_matches_the_generic_sum(pair):
    big, small = pair
    src = np.random.default_rng(len(big)).normal(size=big)
    plan = plan_sum_to_shape(big, small)
    assert plan is not None
    lens, red_mask, n_out, n_red = plan
    assert n_out * n_red == src.size and n_out == int(np.prod(small, dtype=np.int64))
    assert all(n > 1 for n in lens)
    # Coalesced: no two neighbours of one kind.
    kinds = [red_mask >> k & 1 for k in range(len(lens))]
    assert all(a != b for a, b in zip(kinds, kinds[1:], strict=False))
    # Sums in another order: equal to rounding (atol for sums that cancel to about zero).
    np.testing.assert_allclose(
        _replay(src, small), sum_to_shape_generic(src, small), rtol=1e-12, atol=1e-12
    )


@pytest.mark.parametrize(
    "big, small, lens, mask",
    [
        ((64, 512), (512,), (64, 512), 0b01),  # bias over a batch: summed dim outside
        ((512, 64), (512, 1), (512, 64), 0b10),  # summed inner dim
        ((8, 1, 3), (1, 3), (8, 3), 0b01),  # length-1 dims drop out
        ((2, 3, 4), (), (24,), 0b1),  # everything summed, merged into one dim
        ((2, 3, 4), (2, 3, 4), (24,), 0),  # nothing summed
        ((5, 6, 7), (5, 1, 7), (5, 6, 7), 0b010),
    ],
)
def test_plan_examples(big, small, lens, mask):
    got = plan_sum_to_shape(big, small)
    assert got[:2] == (lens, mask)


def test_plan_refuses_what_does_not_broadcast_and_gives_up_past_max_dims():
    with pytest.raises(ValueError, match=r"\(2, 3\) to \(4,\)"):
        plan_sum_to_shape((2, 3), (4,))
    with pytest.raises(ValueError):
        plan_sum_to_shape((3,), (2, 3))
    alternating = tuple([2, 3] * (MAX_DIMS // 2 + 1))
    target = tuple([2, 1] * (MAX_DIMS // 2 + 1))
    assert plan_sum_to_shape(alternating, target) is None


@pytest.mark.parametrize(
    "lens, mask",
    [((64, 512), 0b01), ((512, 64), 0b10), ((2**26,), 0b1), ((7,), 0), ((3, 5, 7), 0b101)],
)
@pytest.mark.parametrize("sms", [1, 132])
def test_launch_shapes(lens, mask, sms):
    n_out = int(np.prod([n for k, n in enumerate(lens) if not mask >> k & 1]))
    n_red = int(np.prod([n for k, n in enumerate(lens) if mask >> k & 1]))
    (gx, gy), (bx, by) = sum_launch(lens, mask, n_out, n_red, sms)
    assert bx * by == 256 and bx & (bx - 1) == 0  # the kernel's tree needs powers of two
    assert gx * bx >= n_out and (gx - 1) * bx < n_out
    assert 1 <= gy <= 1024
    if mask >> (len(lens) - 1) & 1:
        assert bx == 1  # a summed inner dim: the block's threads share one output
    if n_out == 1 and n_red >= 2**20:
        assert gy > 1  # a full reduction is split across blocks
