"""Parallel backward against serial backward, in one run (issue 17's goals; not tests).

    python benchmarks/bench_parallel.py [--repeats 9] [--threads 2]

Cases (backward alone is timed; each round builds the graph untimed, then runs backward):
- towers: 4 independent towers of 8 x (64x512 @ 512x512 float32 matmul + tanh), summed;
  goal: >= 1.6x faster with 2 threads than serial, BLAS at one thread per call.
- chain: 2,000 ops on 1-element tensors (no parallelism available); goal: parallel no slower
  than 1.1x serial.
- bidirectional LSTM: 2 layers, hidden 200, seq 35, batch 20; the two directions of a layer
  are independent nodes; goal: >= 1.3x.
Each case runs with BLAS limited to 1 thread per call and again at 2 threads, to show how the two
kinds of parallelism share the cores. Each setting runs in its own process started with
OPENBLAS_NUM_THREADS set: limiting OpenBLAS at run time (threadpoolctl) leaves its 2-thread pool
alive, and a second backward thread then runs its GEMMs at half speed (measured: 1.23x instead
of about 1.25x on the towers). Gradients are checked bit-identical.

Each case also traces one parallel backward (a minimal profiler: each node's thread and start and
end times) and reports how the nodes split between the threads and the overlap: the share of
the walk's time with two or more threads inside a node. Both say whether the walk feeds the
threads, independently of how loaded the machine is; the speedups do not.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import emit, header, table  # noqa: E402


def towers_graph():
    import ferro

    rng = np.random.default_rng(0)
    x = ferro.tensor(rng.normal(size=(64, 512)).astype(np.float32))
    ws = [
        [
            ferro.tensor(
                (rng.normal(size=(512, 512)) * 0.04).astype(np.float32), requires_grad=True
            )
            for _ in range(8)
        ]
        for _ in range(4)
    ]
    loss = None
    for tower in ws:
        h = x
        for w in tower:
            h = ferro.tanh(h @ w)
        s = h.sum()
        loss = s if loss is None else loss + s
    return loss, [w for tower in ws for w in tower]


def chain_graph():
    import ferro

    x = ferro.tensor([0.3], requires_grad=True)
    w = ferro.tensor([0.9], requires_grad=True)
    b = ferro.tensor([0.05], requires_grad=True)
    h = x
    for i in range(2000):
        k = i % 3
        h = h * w if k == 0 else (h + b if k == 1 else ferro.tanh(h))
    return h.sum(), [x, w, b]


def lstm_graph():
    """A bidirectional 2-layer LSTM (word-language-model size: hidden 200, seq 35, batch 20):
    each layer's forward and reverse directions are independent nodes of backward."""
    import ferro

    ferro.manual_seed(0)
    lstm = ferro.nn.LSTM(200, 200, num_layers=2, bidirectional=True)
    x = ferro.randn(35, 20, 200)
    out, _ = lstm(x)
    return out.sum(), list(lstm.parameters())


def raw_thread_ceiling(repeats: int) -> float:
    """Speedup of two plain Python threads over one on the towers' backward GEMMs, with no
    autograd at all: each of the 32 layers' two GEMMs (gy @ w.T and h.T @ gy) on that layer's own
    arrays, as backward meets them. What these cores, their shared memory bandwidth and this
    BLAS allow for the towers case: the ceiling the parallel walk is measured against."""
    rng = np.random.default_rng(0)
    ws = [rng.random((512, 512)).astype(np.float32) for _ in range(32)]
    hs = [rng.random((64, 512)).astype(np.float32) for _ in range(32)]
    gy = rng.random((64, 512)).astype(np.float32)

    def work(layers):
        for i in layers:
            gy @ ws[i].T
            hs[i].T @ gy

    serial, parallel = [], []
    for _ in range(max(repeats // 3, 1)):
        t0 = time.perf_counter()
        work(range(32))
        serial.append(time.perf_counter() - t0)
        other = threading.Thread(target=work, args=(range(0, 32, 2),))
        t0 = time.perf_counter()
        other.start()
        work(range(1, 32, 2))
        other.join()
        parallel.append(time.perf_counter() - t0)
    return statistics.median(serial) / statistics.median(parallel)


class _NodeTrace:
    """A minimal profiler for the engine (``ferro._C.engine.set_profiler``): per backward node,
    the thread it ran on and its start and end times (ns)."""

    def __init__(self):
        self.events = []

    def record_forward(self, *args):
        return -1

    def record_backward(self, name, op, forward_id, xp, grads_out, grads_in, t0, t1):
        self.events.append((threading.get_ident(), t0, t1))


def trace_split(make, threads: int) -> tuple[list[int], float]:
    """Nodes run per thread (most first) and the overlap of one traced parallel backward."""
    from ferro._C import engine

    loss, _ = make()
    trace = _NodeTrace()
    engine.set_profiler(trace)
    try:
        loss.backward(num_threads=threads)
    finally:
        engine.set_profiler(None)
    per_thread: dict[int, int] = {}
    edges = []
    for tid, t0, t1 in trace.events:
        per_thread[tid] = per_thread.get(tid, 0) + 1
        edges += [(t0, 1), (t1, -1)]
    edges.sort()
    inside = both = 0
    depth, last = 0, edges[0][0]
    for t, d in edges:
        if depth:
            inside += t - last
        if depth >= 2:
            both += t - last
        depth, last = depth + d, t
    return sorted(per_thread.values(), reverse=True), both / max(inside, 1)


def time_backward(make, threads: int, repeats: int) -> tuple[float, list[bytes]]:
    samples = []
    grads = None
    for _ in range(repeats + 1):
        loss, leaves = make()
        t0 = time.perf_counter()
        loss.backward(num_threads=threads)
        samples.append(time.perf_counter() - t0)
        grads = [leaf.grad.numpy().tobytes() for leaf in leaves]
    return statistics.median(samples[1:]), grads


def run_setting(blas: int, threads: int, repeats: int) -> list[list]:
    """The cases at one BLAS thread count (this process must have been started with it)."""
    rows = []
    if blas == 1:
        ceiling = statistics.median(raw_thread_ceiling(repeats) for _ in range(3))
        emit("bench_parallel", "raw_thread_ceiling_blas1", speedup=ceiling)
        print(f"# two plain threads on the towers' GEMMs (no autograd): {ceiling:.2f}x")
    for case, make, goal in (
        ("towers", towers_graph, ">= 1.6x"),
        ("chain", chain_graph, ">= 0.91x (no slower than 1.1x serial)"),
        ("bidirectional LSTM", lstm_graph, ">= 1.3x"),
    ):
        serial = parallel = None
        times = {1: [], threads: []}
        for _ in range(3):  # interleave serial and parallel rounds against drift
            for n in (1, threads):
                t, g = time_backward(make, n, max(repeats // 3, 1))
                times[n].append(t)
                if n == 1:
                    serial = g
                else:
                    parallel = g
        t1, tn = statistics.median(times[1]), statistics.median(times[threads])
        same = serial == parallel
        split, overlap = trace_split(make, threads)
        rows.append(
            [
                case,
                blas,
                t1 * 1e3,
                tn * 1e3,
                t1 / tn,
                same,
                "/".join(map(str, split)),
                overlap,
                goal,
            ]
        )
        emit(
            "bench_parallel",
            f"{case}_blas{blas}",
            serial_ms=t1 * 1e3,
            parallel_ms=tn * 1e3,
            speedup=t1 / tn,
            threads=threads,
            bit_identical=same,
            nodes_per_thread=split,
            overlap=overlap,
        )
    return rows


def main() -> None:
    import json
    import subprocess

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--blas", type=int, default=0, help="run one BLAS setting (internal)")
    args = ap.parse_args()
    if args.blas:
        print("ROWS " + json.dumps(run_setting(args.blas, args.threads, args.repeats)))
        return
    header("bench_parallel")
    rows = []
    for blas in (1, 2):
        env = dict(os.environ, OPENBLAS_NUM_THREADS=str(blas))
        cmd = [sys.executable, __file__, "--blas", str(blas), "--threads", str(args.threads)]
        cmd += ["--repeats", str(args.repeats)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("ROWS "):
                rows += json.loads(line[5:])
            else:
                print(line)
    table(
        rows,
        [
            "case",
            "blas thr",
            "serial ms",
            f"{args.threads} thr ms",
            "speedup",
            "bit-equal",
            "nodes/thread",
            "overlap",
            "goal",
        ],
    )


if __name__ == "__main__":
    main()
