"""Backward from several threads (issue 11, item 4 and "Tests").

Separate graphs in 4 threads give exactly the serial results; 4 threads backpropagating into
one shared leaf give exactly the serial sum (float64 with integer-valued gradients, so the sum
is exact in any order and any lost update shows); grad mode is per thread; hooks run once per
backward, in the thread that called it, with that backward's gradient.
"""

from __future__ import annotations

import threading

import numpy as np

import ferro

N_THREADS = 4


def _in_threads(fn, n: int = N_THREADS) -> list:
    """Run ``fn(k)`` for k in range(n), one thread each, all released together; return the
    results in order, re-raising the first exception a thread hit."""
    start = threading.Barrier(n)
    results: list = [None] * n
    errors: list = []

    def body(k):
        try:
            start.wait(timeout=60)
            results[k] = fn(k)
        except BaseException as exc:  # re-raised below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    if errors:
        raise errors[0]
    return results


def _mlp_grads(seed: int, steps: int) -> list[np.ndarray]:
    """A small two-layer network's gradients over a few steps, on the thread's own graph."""
    rng = np.random.default_rng(seed)
    w1 = ferro.tensor(rng.normal(size=(16, 32)), requires_grad=True)
    w2 = ferro.tensor(rng.normal(size=(32, 4)), requires_grad=True)
    x = ferro.tensor(rng.normal(size=(8, 16)))
    target = ferro.tensor(rng.integers(0, 4, 8))
    for _ in range(steps):
        h = ferro.tanh(x @ w1)
        loss = ferro.cross_entropy(ferro.gelu(h) @ w2, target) + (w1 * w1).sum() * 1e-3
        loss.backward()
    return [w1.grad.numpy().copy(), w2.grad.numpy().copy()]


def test_separate_graphs_in_four_threads_match_serial_exactly():
    steps = 30
    serial = [_mlp_grads(k, steps) for k in range(N_THREADS)]
    threaded = _in_threads(lambda k: _mlp_grads(k, steps))
    for k in range(N_THREADS):
        for got, want in zip(threaded[k], serial[k], strict=True):
            np.testing.assert_array_equal(got, want)


def test_shared_leaf_from_four_threads_gets_every_update():
    """Item 4: the commit into one .grad must not lose updates (the in-place add releases the
    GIL). Each thread adds k+1 to every element, many times; integers sum exactly. A lost
    update needs two commits to overlap, so the run is repeated to make one likely."""
    size, repeats, rounds = 500_000, 40, 5
    want = repeats * sum(range(1, N_THREADS + 1))
    for _ in range(rounds):
        leaf = ferro.zeros(size, dtype=ferro.float64, requires_grad=True)

        def work(k, leaf=leaf):
            for _ in range(repeats):
                (leaf * float(k + 1)).sum().backward()

        _in_threads(work)
        got = leaf.grad.numpy()
        lost = int(np.count_nonzero(got != want))
        assert lost == 0, f"{lost} of {size} elements lost an update (values {np.unique(got)[:5]})"


def test_shared_leaf_through_a_shared_subgraph():
    """Threads backpropagate separate roots through one shared intermediate (retained) into
    one leaf: same exact-sum check, with the engine's slots on the shared node."""
    leaf = ferro.ones(50_000, dtype=ferro.float64, requires_grad=True)
    shared = leaf * 2.0
    repeats = 25

    def work(k):
        for _ in range(repeats):
            (shared * float(k + 1)).sum().backward(retain_graph=True)

    _in_threads(work)
    want = 2.0 * repeats * sum(range(1, N_THREADS + 1))
    np.testing.assert_array_equal(leaf.grad.numpy(), np.full(50_000, want))


def test_grad_mode_is_per_thread():
    """One thread inside no_grad while the others record; a new thread starts with grad on
    even when its creator is inside no_grad."""
    inside = threading.Barrier(N_THREADS)
    x = ferro.ones(3, requires_grad=True)

    def work(k):
        if k == 0:
            with ferro.no_grad():
                inside.wait(timeout=60)  # the others compute while this one is in no_grad
                y = x * 2.0
                inside.wait(timeout=60)
            return ferro.is_grad_enabled(), y.requires_grad
        inside.wait(timeout=60)
        y = x * 2.0
        inside.wait(timeout=60)
        return ferro.is_grad_enabled(), y.requires_grad

    results = _in_threads(work)
    assert results[0] == (True, False)
    assert results[1:] == [(True, True)] * (N_THREADS - 1)

    seen = []
    with ferro.no_grad():
        t = threading.Thread(target=lambda: seen.append(ferro.is_grad_enabled()))
        t.start()
        t.join(timeout=60)
    assert seen == [True]


def test_hooks_run_in_the_backward_thread_with_its_gradient():
    """Each thread's leaf carries a tensor hook (doubling the gradient) and a post-accumulate
    hook; both run once per backward, in that thread, with that thread's values."""
    repeats = 20

    def work(k):
        me = threading.get_ident()
        calls = []
        x = ferro.full((100,), float(k + 1), dtype=ferro.float64, requires_grad=True)

        def double(g):
            calls.append(("tensor", threading.get_ident(), g.numpy()[0]))
            return g * 2.0

        def after(t):
            calls.append(("post", threading.get_ident(), t.grad.numpy()[0]))

        x.register_hook(double)
        x.register_post_accumulate_grad_hook(after)
        for _ in range(repeats):
            (x * x).sum().backward()
        return me, calls, x.grad.numpy().copy()

    for k, (me, calls, grad) in enumerate(_in_threads(work)):
        v = float(k + 1)
        assert [c[0] for c in calls] == ["tensor", "post"] * repeats
        assert all(c[1] == me for c in calls), "a hook ran in another thread"
        assert [c[2] for c in calls if c[0] == "tensor"] == [2 * v] * repeats
        assert [c[2] for c in calls if c[0] == "post"] == [4 * v * (i + 1) for i in range(repeats)]
        np.testing.assert_array_equal(grad, np.full(100, 4 * v * repeats))


def test_hook_on_a_shared_leaf_sees_every_backward():
    """One hook on a leaf shared by 4 threads: called once per backward of every thread, and
    its replacement gradient is what accumulates."""
    leaf = ferro.zeros(1000, dtype=ferro.float64, requires_grad=True)
    seen = []
    lock = threading.Lock()

    def hook(g):
        with lock:
            seen.append(float(g.numpy()[0]))
        return g * 3.0

    leaf.register_hook(hook)
    repeats = 25

    def work(k):
        for _ in range(repeats):
            (leaf * float(k + 1)).sum().backward()

    _in_threads(work)
    assert sorted(seen) == sorted(float(k + 1) for k in range(N_THREADS) for _ in range(repeats))
    want = 3.0 * repeats * sum(range(1, N_THREADS + 1))
    np.testing.assert_array_equal(leaf.grad.numpy(), np.full(1000, want))
