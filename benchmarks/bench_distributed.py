"""Data-parallel training over MPI: scaling and overlap (issue 18's goals; not tests).

    python benchmarks/bench_distributed.py [--steps 12] [--ranks 2]

The MLP 784-2048-2048-10, float32, batch 256 per rank, SGD, one BLAS thread per rank. Each
setting runs as its own ``mpiexec`` job (this script re-launches itself with ``--worker``):

- throughput: samples/s with N ranks against 1 rank (goal >= 1.7x with 2 ranks on 2 cores);
- overlap: a DDP step (bucketed all-reduces started during backward) against the same step
  with the whole reduction done after backward (``no_sync`` backward, then one all-reduce per
  bucket, waited), and the reduction alone; hidden fraction = (after - overlap) / reduction
  (goal >= 0.5);
- the same with a simulated slower link: each all-reduce completes no earlier than
  ``bytes / link_bandwidth`` after it started (a bandwidth-limited network, 1 GB/s), which
  backward can hide and a reduction after backward cannot.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import emit, header, table  # noqa: E402

BATCH = 256
SIZES = (784, 2048, 2048, 10)


def _slow_link(bandwidth: float) -> None:
    """Make every Work complete no earlier than bytes / bandwidth after it started."""
    from ferro.distributed import collectives as C

    original = C.all_reduce

    def all_reduce(tensor, op=C.ReduceOp.SUM, group=None, async_op=False):
        work = original(tensor, op, group, async_op=True)
        ready_at = time.perf_counter() + tensor._data.nbytes / bandwidth
        base_done = work.is_completed

        def is_completed():
            return base_done() and time.perf_counter() >= ready_at

        def wait(timeout=None):
            while not is_completed():
                time.sleep(5e-5)
            return True

        work.is_completed, work.wait = is_completed, wait
        if async_op:
            return work
        work.wait()
        return None

    C.all_reduce = all_reduce


def worker(steps: int, link: float) -> None:
    import numpy as np

    import ferro
    import ferro.distributed as dist
    from ferro import nn
    from ferro.distributed import collectives as C
    from ferro.nn.parallel import DistributedDataParallel as DDP

    if link:
        _slow_link(link)
    dist.init_process_group("mpi")
    r, n = dist.get_rank(), dist.get_world_size()
    ferro.manual_seed(0)
    layers = []
    for a, b in zip(SIZES[:-1], SIZES[1:], strict=True):
        layers += [nn.Linear(a, b), nn.ReLU()]
    model = nn.Sequential(*layers[:-1])
    ddp = DDP(model)
    opt = ferro.optim.SGD(model.parameters(), lr=0.01)
    rng = np.random.default_rng(r)
    x = ferro.tensor(rng.standard_normal((BATCH, SIZES[0]), dtype=np.float32))
    y = ferro.tensor(rng.integers(0, SIZES[-1], BATCH))

    def step_overlap():
        opt.zero_grad()
        ferro.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()

    def step_after():
        opt.zero_grad()
        with ddp.no_sync():
            ferro.nn.functional.cross_entropy(ddp(x), y).backward()
        reduce_all()
        opt.step()

    def reduce_all():
        works = []
        for b in ddp._buckets:  # the same buckets DDP uses, reduced after backward
            flat = ferro.cat([p.grad.reshape(-1) for p in b.params])
            works.append(C.all_reduce(flat, async_op=True))
        for w in works:
            w.wait()

    def time_it(fn):
        fn()
        dist.barrier()
        out = []
        for _ in range(steps):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
        dist.barrier()
        return statistics.median(out)

    times = {"overlap": time_it(step_overlap)}
    if n > 1:
        times["after"] = time_it(step_after)
        times["reduce"] = time_it(reduce_all)
    if r == 0:
        print("RESULT " + json.dumps({"ranks": n, **times}), flush=True)
    dist.destroy_process_group()


def launch(n: int, steps: int, link: float) -> dict:
    from ferro.distributed.run import command

    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    args = [os.path.abspath(__file__), "--worker", "--steps", str(steps), "--link", str(link)]
    out = subprocess.run(command(n, args), env=env, capture_output=True, text=True, check=True)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(out.stdout + out.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--link", type=float, default=0.0, help=argparse.SUPPRESS)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.steps, args.link)
        return
    header("bench_distributed")
    one = launch(1, args.steps, 0.0)
    rows = []
    for label, link in (("shared memory", 0.0), ("1 GB/s link (simulated)", 1e9)):
        many = launch(args.ranks, args.steps, link)
        speedup = args.ranks * one["overlap"] / many["overlap"]
        hidden = (many["after"] - many["overlap"]) / many["reduce"]
        rows.append(
            [
                label,
                f"{one['overlap'] * 1e3:.1f}",
                f"{many['overlap'] * 1e3:.1f}",
                f"{many['after'] * 1e3:.1f}",
                f"{many['reduce'] * 1e3:.1f}",
                f"{speedup:.2f}x",
                f"{hidden:.2f}",
            ]
        )
        emit(
            "bench_distributed",
            label,
            ranks=args.ranks,
            step_1rank_s=one["overlap"],
            step_overlap_s=many["overlap"],
            step_after_s=many["after"],
            reduce_s=many["reduce"],
            throughput_x=speedup,
            hidden_fraction=hidden,
        )
    table(
        rows,
        [
            "link",
            "1 rank ms",
            f"{args.ranks} ranks ms",
            "reduce after ms",
            "reduce alone ms",
            "throughput",
            "hidden",
        ],
    )
    print("goals: throughput >= 1.7x with 2 ranks; hidden >= 0.5")


if __name__ == "__main__":
    main()
