"""Parallel backward (Note [Parallel backward]): bit-identical to serial for any thread count
and timing, the caller's context in every node, atomic on failure, hooks in their order."""

import random
import threading
import time

import numpy as np
import pytest

import ferro
from ferro.autograd.graph import saved_tensors_hooks
from ferro.errors import GraphError

THREADS = [1, 2, 4, 8]


def _towers(seed, n_towers=4, depth=4, width=24, jitter=None):
    """Independent towers sharing one input and one leaf used everywhere (fan-in of many
    contributions, whose summation order is what determinism is about), plus a split node
    with several outputs."""
    rng = np.random.default_rng(seed)
    x = ferro.tensor(rng.normal(size=(8, width)), requires_grad=True)
    shared = ferro.tensor(rng.normal(size=(width,)), requires_grad=True)
    ws = [
        [
            ferro.tensor(rng.normal(size=(width, width)) * 0.3, requires_grad=True)
            for _ in range(depth)
        ]
        for _ in range(n_towers)
    ]
    outs = []
    for tower in ws:
        h = x
        for w in tower:
            h = ferro.tanh(h @ w + shared)
            if jitter is not None:
                h.grad_fn.register_hook(jitter)
        parts = ferro.split(h, 8, 1)
        outs.append(sum((p * (k + 1.0)).sum() for k, p in enumerate(parts)))
    loss = outs[0]
    for o in outs[1:]:
        loss = loss + o
    leaves = [x, shared, *[w for tower in ws for w in tower]]
    return loss, leaves


def _grads(num_threads, seed=0, jitter=None):
    loss, leaves = _towers(seed, jitter=jitter)
    loss.backward(num_threads=num_threads)
    return [leaf.grad.numpy().tobytes() for leaf in leaves]


def _jitter(seed):
    rnd = random.Random(seed)
    lock = threading.Lock()

    def hook(grad_inputs, grad_outputs):
        with lock:
            delay = rnd.random() * 0.002
        time.sleep(delay)

    return hook


@pytest.mark.parametrize("num_threads", THREADS)
def test_gradients_are_bit_identical_to_serial_under_random_timing(num_threads):
    serial = _grads(1)
    for rep in range(4):
        assert _grads(num_threads, jitter=_jitter(rep)) == serial


def test_grad_with_inputs_is_bit_identical_in_parallel():
    loss, leaves = _towers(1)
    want = ferro.autograd.grad(loss, leaves[:3], retain_graph=True)
    for n in THREADS[1:]:
        got = ferro.autograd.grad(loss, leaves[:3], retain_graph=True, num_threads=n)
        assert [g.numpy().tobytes() for g in got] == [g.numpy().tobytes() for g in want]


def test_parallel_context_manager_and_default_switch():
    assert ferro.autograd.get_num_threads() == 1
    with ferro.autograd.parallel(3):
        assert ferro.autograd.get_num_threads() == 3
        serial = None
        loss, leaves = _towers(2)
        loss.backward()
        got = [leaf.grad.numpy().tobytes() for leaf in leaves]
    assert ferro.autograd.get_num_threads() == 1
    prev = ferro.autograd.set_num_threads(2)
    try:
        assert prev == 1 and ferro.autograd.get_num_threads() == 2
    finally:
        ferro.autograd.set_num_threads(prev)
    loss, leaves = _towers(2)
    loss.backward()
    serial = [leaf.grad.numpy().tobytes() for leaf in leaves]
    assert got == serial
    with pytest.raises(ferro.errors.ArgumentError):
        ferro.autograd.set_num_threads(0)


def test_each_node_sees_the_callers_grad_mode_and_saved_tensor_hooks():
    seen = []

    def hook(grad_inputs, grad_outputs):
        seen.append((threading.get_ident(), ferro.is_grad_enabled()))

    unpacked = []

    def pack(t):
        return t

    def unpack(t):
        unpacked.append(threading.get_ident())
        return t

    serial_modes = None
    for n in (1, 4):
        seen.clear()
        with saved_tensors_hooks(pack, unpack):
            loss, _ = _towers(3, jitter=hook)
        loss.backward(num_threads=n)
        modes = sorted(m for _, m in seen)
        serial_modes = serial_modes or modes
        assert modes == serial_modes
        assert unpacked  # unpack hooks ran inside the nodes, wherever they ran


def test_profiler_events_carry_the_worker_thread_and_link_to_forward():
    loss, _ = _towers(4)
    with ferro.profiler.profile() as prof:
        loss2, _ = _towers(4)
        loss2.backward(num_threads=4)
    back = [e for e in prof.events() if e.kind == "backward"]
    assert back and all(e.forward_id >= 0 for e in back)
    assert all(e.thread for e in back)


def test_an_exception_in_a_worker_leaves_every_grad_as_it_was_and_does_not_hang():
    loss, leaves = _towers(5)
    loss.backward(retain_graph=True)
    before = [leaf.grad.numpy().copy() for leaf in leaves]
    boom_node = loss.grad_fn.next_functions[0][0]

    def boom(grad_inputs, grad_outputs):
        raise ValueError("boom")

    h = boom_node.register_hook(boom)
    for n in (2, 8):
        with pytest.raises(ValueError, match="boom") as info:
            loss.backward(retain_graph=True, num_threads=n)
        assert any("raised while running" in note for note in info.value.__notes__)
        for leaf, b in zip(leaves, before, strict=True):
            np.testing.assert_array_equal(leaf.grad.numpy(), b)
    h.remove()
    loss.backward(num_threads=2)
    for leaf, b in zip(leaves, before, strict=True):
        np.testing.assert_array_equal(leaf.grad.numpy(), 2 * b)


def test_keyboard_interrupt_in_a_node_propagates_atomically():
    loss, leaves = _towers(6)

    def interrupt(grad_inputs, grad_outputs):
        raise KeyboardInterrupt

    loss.grad_fn.register_hook(interrupt)
    with pytest.raises(KeyboardInterrupt):
        loss.backward(num_threads=4)
    assert all(leaf.grad is None for leaf in leaves)


def test_post_accumulate_hooks_run_in_serial_order():
    def order(n):
        loss, leaves = _towers(7, jitter=_jitter(n))
        seen = []
        for k, leaf in enumerate(leaves):
            leaf.register_post_accumulate_grad_hook(lambda t, k=k: seen.append(k))
        loss.backward(num_threads=n)
        return seen

    assert order(4) == order(1)


def test_the_worker_pool_is_persistent():
    _grads(4)
    before = {t.name for t in threading.enumerate() if t.name.startswith("ferro-backward")}
    for _ in range(3):
        _grads(4)
    after = {t.name for t in threading.enumerate() if t.name.startswith("ferro-backward")}
    assert before == after and len(after) >= 3


def test_second_backward_through_a_freed_graph_still_raises():
    loss, _ = _towers(8)
    loss.backward(num_threads=2)
    with pytest.raises(GraphError):
        loss.backward(num_threads=2)


def test_checkpointed_towers_recompute_inside_workers_and_match_serial():
    # Checkpoint recomputes a block's forward when backward first unpacks its saved arrays:
    # inside the worker that runs the node, under the caller's context (saved-tensor hooks).
    def grads(n):
        rng = np.random.default_rng(11)
        x = ferro.tensor(rng.normal(size=(6, 12)), requires_grad=True)
        ws = [ferro.tensor(rng.normal(size=(12, 12)) * 0.3, requires_grad=True) for _ in range(4)]

        def block(h, w):
            return ferro.tanh(h @ w) * 2.0

        loss = sum(ferro.checkpoint(block, x, w).sum() for w in ws)
        loss.backward(num_threads=n)
        return [t.grad.numpy().tobytes() for t in [x, *ws]]

    serial = grads(1)
    for n in (2, 4):
        assert grads(n) == serial


def test_a_thread_carries_on_its_own_branch_while_the_other_is_busy():
    # Whichever thread starts a branch first blocks there until the OTHER branch is three nodes
    # deep: the other thread must run that branch's nodes one after another on its own, each
    # child made ready by the thread that finished its parent. (When only the caller delivered
    # gradients, a worker's branch stalled behind a busy caller.)
    deep = {"a": threading.Event(), "b": threading.Event()}
    first = []
    lock = threading.Lock()

    def head(name):
        def hook(grad_inputs, grad_outputs):
            with lock:
                wait = not first
                first.append(name)
            if wait:
                other = "b" if name == "a" else "a"
                assert deep[other].wait(10), f"branch {other} did not advance"

        return hook

    def third(name):
        return lambda grad_inputs, grad_outputs: deep[name].set()

    x = ferro.tensor(np.linspace(-1, 1, 6), requires_grad=True)
    loss = None
    for name in ("a", "b"):
        h = x * 1.0
        nodes = []
        for _ in range(4):
            h = ferro.tanh(h)
            nodes.append(h.grad_fn)
        s = h.sum()
        s.grad_fn.register_hook(head(name))
        nodes[2].register_hook(third(name))  # the branch's third node (sum, tanh, tanh)
        loss = s if loss is None else loss + s
    loss.backward(num_threads=2)
    assert len(first) == 2
    serial = x.grad.numpy().copy()
    x.grad = None
    first.clear()
    loss2 = sum(ferro.tanh(ferro.tanh(ferro.tanh(ferro.tanh(x * 1.0)))).sum() for _ in range(2))
    loss2.backward()
    np.testing.assert_array_equal(x.grad.numpy(), serial)


def _split_branches(dtype):
    """Branches whose nodes split on two cores (Note [Intra-op split]: a LSTM's hidden units,
    a convolution's batch chunks, attention's heads) beside plain GEMMs with long sums, whose
    bits OpenBLAS does not keep at one thread and two."""
    rng = np.random.default_rng(0)

    def leaf(*shape):
        return ferro.tensor(rng.normal(size=shape).astype(dtype) * 0.3, requires_grad=True)

    ferro.manual_seed(0)
    lstm = ferro.nn.LSTM(200, 200, num_layers=2).to(dtype)  # the word-LM size: 35 x 20 steps
    conv, q, k, v = leaf(16, 8, 3, 3), leaf(2, 4, 128, 32), leaf(2, 4, 128, 32), leaf(2, 4, 128, 32)
    x, w1, w2 = leaf(35, 20, 200), leaf(200, 500), leaf(500, 200)
    img, wide, pointwise = leaf(8, 8, 20, 20), leaf(4, 512, 6, 6), leaf(32, 512, 1, 1)
    deep, heavy = leaf(4, 64, 2, 2), leaf(512, 64, 3, 3)  # Note [Weight-bound convolutions]
    out, _ = lstm(x)
    att = ferro.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    flat = x.reshape(-1, 200)
    losses = [
        out.sum(),
        ferro.nn.functional.conv2d(img, conv, padding=1).square().sum(),
        ferro.nn.functional.conv2d(wide, pointwise).square().sum(),  # Note [Pointwise products]
        ferro.nn.functional.conv2d(deep, heavy, padding=1).square().sum(),
        att.square().sum(),
        ((flat @ w1).tanh() @ w2).square().sum(),
        ((flat @ w1.detach()).relu() @ w2.detach() * flat).sum(),
    ]
    loss = losses[0]
    for term in losses[1:]:
        loss = loss + term
    return loss, [x, img, conv, wide, pointwise, deep, heavy, q, k, v, w1, w2, *lstm.parameters()]


def test_splitting_nodes_keep_parallel_backward_bit_identical(monkeypatch):
    # Note [Nodes that run alone]: a split holds OpenBLAS's process-wide thread count at one;
    # beside another walk thread's GEMMs that changed their bits, and a split answering "one
    # part, no hold" in the walk changed its own. At two threads (BLAS, OpenMP, splits) the
    # parallel walk must equal the serial one bit for bit.
    from ferro import _intraop
    from ferro.ops import recurrent

    monkeypatch.setattr(recurrent, "_UNIT_SPLIT_WORK", 1 << 20)  # on: the LSTM's steps split
    before = _intraop.num_threads()
    _intraop.set_num_threads(2)
    try:
        results = []
        for n in (1, 2, 1, 2):
            loss, leaves = _split_branches(np.float32)
            loss.backward(num_threads=n)
            results.append([leaf.grad.numpy().tobytes() for leaf in leaves])
    finally:
        _intraop.set_num_threads(before)
    assert results[0] == results[2]  # serial is reproducible
    for got in results[1::2]:
        assert [i for i, (a, b) in enumerate(zip(got, results[0], strict=True)) if a != b] == []


def test_a_node_that_runs_alone_overlaps_no_other_node():
    # Note [Nodes that run alone]: a node with ctx._alone waits until the other threads' nodes
    # end, and none starts beside it; the other nodes still run side by side.
    from ferro._C import gemm

    spans, lock = [], threading.Lock()

    class Slow(ferro.autograd.Function):
        @staticmethod
        def forward(ctx, x, alone):
            ctx._alone = alone
            return x * 2.0

        @staticmethod
        def backward(ctx, gy):
            start = time.perf_counter()
            flag = gemm.walk.on  # the flag: off in the node that runs alone, on beside others
            time.sleep(0.01)
            with lock:
                spans.append((ctx._alone, flag, start, time.perf_counter()))
            return gy * 2.0, None

    x = ferro.ones(4, requires_grad=True)
    towers = [x]
    for k in range(4):
        h = x
        for depth in range(3):
            h = Slow.apply(h, k == 1 and depth == 1)
        towers.append(h)
    sum(t.sum() for t in towers).backward(num_threads=2)
    assert x.grad.tolist() == [1.0 + 4 * 8.0] * 4
    alone = [s for s in spans if s[0]]
    others = [s for s in spans if not s[0]]
    assert len(alone) == 1 and len(others) == 11 and alone[0][1] is False
    a, b = alone[0][2:]
    assert all(end <= a or start >= b for _, _, start, end in others)
    assert any(  # the walk did go parallel around it
        s[2] < t[3] and t[2] < s[3] for i, s in enumerate(others) for t in others[i + 1 :]
    )


def test_numpys_threaded_blas_runs_alone_beside_products_that_hold_the_count():
    # Note [Nodes that run alone]: the two-core GEMM, where it is on, holds OpenBLAS at one
    # thread in walk threads too, so a node whose backward runs NumPy's threaded BLAS itself
    # (stacked matmul from OpenBLAS's threshold, the decompositions) runs alone; the bits stay
    # the serial walk's.
    from ferro._C import gemm

    before = gemm.set_least(1 << 18, 1 << 21)  # the products on
    try:
        _alone_beside_held_products(gemm)
    finally:
        gemm.set_least(*before)


def _alone_beside_held_products(gemm):
    rng = np.random.default_rng(5)
    q = ferro.tensor(rng.normal(size=(3, 64, 64)).astype(np.float32), requires_grad=True)
    k = ferro.tensor(rng.normal(size=(3, 64, 64)).astype(np.float32), requires_grad=True)
    a = ferro.tensor(rng.normal(size=(24, 24)) + 24 * np.eye(24), requires_grad=True)
    w = ferro.tensor(rng.normal(size=(512, 512)).astype(np.float32), requires_grad=True)
    x = ferro.tensor(rng.normal(size=(64, 512)).astype(np.float32), requires_grad=True)
    small = q[:, :8, :8] @ k[:, :8, :8]  # 512 multiply-adds a matrix: NumPy's one thread
    big = q @ k.transpose(1, 2)  # 64^3 = OpenBLAS's threshold
    assert getattr(big.grad_fn, "_alone", False) and not getattr(small.grad_fn, "_alone", False)
    assert ferro.linalg.inv(a).grad_fn._alone
    assert 64 * 512 * 512 >= gemm.BLAS_THREADED

    def grads(n):
        for t in (q, k, a, w, x):
            t.grad = None
        towers = [
            (q @ k.transpose(1, 2)).tanh().sum(),
            ferro.linalg.inv(a).sum().float(),
            ferro.tanh(x @ w).sum(),
            ferro.tanh(ferro.tanh(x @ w) @ w).sum(),
        ]
        sum(towers).backward(num_threads=n)
        return [t.grad.numpy().tobytes() for t in (q, k, a, w, x)]

    serial = grads(1)
    for _ in range(3):
        assert grads(2) == serial
