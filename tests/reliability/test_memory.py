"""A 10,000-step training loop whose live memory must not grow (issue 11, "Tests").

An MLP from ferro.nn trained with Adam, with a tensor hook and a post-accumulate hook on its
parameters, ``ferro.checkpoint`` around its middle block, dropout, and the profiler on for
part of the run. After a warm-up the run is cut into three windows of 3,000 steps; at the end
of each, after a full collection, it reads the blocks CPython's allocator holds (every Python
object, NumPy's array objects included) and the gc-tracked objects; over the last window
tracemalloc also counts bytes, NumPy's array data included. A leak of one object per step
adds 3,000 blocks to a window; the noise (free lists filling up) is a few dozen and shrinks
from window to window. Memory is measured, never time. tracemalloc triples the cost of a
step, hence only over one window.
"""

from __future__ import annotations

import gc
import sys
import tracemalloc
from itertools import pairwise

import numpy as np

import ferro
from ferro import nn

STEPS = 10_000
WARMUP = 1_000
WINDOWS = 3
WINDOW = (STEPS - WARMUP) // 3
PROFILED = range(5_000, 5_500)  # in the second window: the third shows what it left behind
# Allowed growth per window: free lists and caches settling (measured: at most ~120 blocks,
# ~15 KB). A leak of one small object per step is 3,000 blocks and ~100 KB per window.
MAX_BLOCKS = 500
MAX_OBJECTS = 200
MAX_BYTES = 64 * 1024


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 32)
        self.mid = nn.Sequential(nn.Linear(32, 32), nn.Tanh(), nn.Dropout(0.1))
        self.out = nn.Linear(32, 3)

    def forward(self, x):
        h = ferro.relu(self.inp(x))
        h = ferro.checkpoint(self.mid, h)
        return self.out(h)


def _live():
    """(allocated blocks, gc-tracked objects, bytes traced by tracemalloc) after a full
    collection."""
    gc.collect()
    return sys.getallocatedblocks(), len(gc.get_objects()), tracemalloc.get_traced_memory()[0]


def test_training_loop_memory_does_not_grow():
    rng = np.random.default_rng(0)
    x = ferro.tensor(rng.normal(size=(16, 8)), dtype=ferro.float32)
    target = ferro.tensor(rng.integers(0, 3, 16))
    model = Net()
    opt = ferro.optim.Adam(model.parameters(), lr=1e-3)
    counts = {"tensor": 0, "post": 0}

    def clip(g):
        counts["tensor"] += 1
        return ferro.clamp(g, -1.0, 1.0)

    def after_accumulate(p):
        counts["post"] += 1

    model.inp.weight.register_hook(clip)
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(after_accumulate)

    def step():
        opt.zero_grad()
        loss = ferro.cross_entropy(model(x), target)
        loss.backward()
        opt.step()
        return loss

    marks = []
    profile = None
    for i in range(STEPS):
        if i >= WARMUP and (i - WARMUP) % WINDOW == 0:
            if i == STEPS - WINDOW:
                tracemalloc.start()
            marks.append(_live())
        if i == PROFILED.start:
            profile = ferro.profiler.profile()
            profile.__enter__()
        loss = step()
        if i == PROFILED.stop - 1:
            profile.__exit__(None, None, None)
            assert len(profile.events()) > 1000  # it recorded the profiled steps
            profile = None
    marks.append(_live())
    tracemalloc.stop()

    assert np.isfinite(loss.item())
    assert counts["tensor"] == STEPS
    assert counts["post"] == STEPS * len(list(model.parameters()))
    growth = [tuple(b - a for a, b in zip(m0, m1, strict=True)) for m0, m1 in pairwise(marks)]
    assert len(growth) == 3
    for k, (blocks, objects, _) in enumerate(growth):
        assert blocks < MAX_BLOCKS, f"window {k}: {blocks} more allocated blocks ({growth})"
        assert objects < MAX_OBJECTS, f"window {k}: {objects} more gc-tracked objects ({growth})"
    nbytes = growth[-1][2]
    assert nbytes < MAX_BYTES, f"last window: {nbytes} more bytes traced ({growth})"
