"""Data-parallel training over MPI: scaling and overlap (issue 18's goals; not tests).

    python benchmarks/bench_distributed.py [--steps 12] [--ranks 2] [--bucket-cap-mb 25 8]
                                           [--timeline] [--cpu-clock] [--bucket-view]

The MLP 784-2048-2048-10, float32, batch 256 per rank, SGD, one BLAS thread per rank. Each
setting runs as its own ``mpiexec`` job (this script re-launches itself with ``--worker``):

- throughput: samples/s with N ranks (DDP) against 1 rank (the plain model, no DDP) (goal
  >= 1.7x with 2 ranks on 2 cores);
- overlap: a DDP step (bucketed all-reduces started during backward) against the same step
  with the reduction done after backward (``no_sync`` backward, then DDP's own bucket copies
  and all-reduces, started only then: ``DistributedDataParallel._reduce_after_backward``), and
  that reduction alone; hidden fraction = (after - overlap) / reduction (goal >= 0.5). The
  three steps are interleaved (one of each per round), so machine load hits them alike;
- the same with a simulated slower link: one link of 1 GB/s that carries one all-reduce at a
  time (an all-reduce finishes no earlier than ``bytes / bandwidth`` after the link became free
  for it). The delay costs no CPU: what backward can hide of it shows what the overlap buys.

With PyTorch's bucketing, 25 MB buckets (the default) would put this model's layer-2 and
layer-1 weights (16 MiB and 6 MiB) in one bucket, complete only when backward ends; DDP ends a
bucket of 1 MB or more at a module boundary, so the layer-2 weight has its own bucket with 25
and 8 MB alike, started as soon as its gradient is in (before layer 2's input-gradient GEMM,
Note [Early gradients]). Each link is measured with both (``--bucket-cap-mb``). The table also
gives each rank's CPU time of the reduction alone and the core time a rank leaves idle in a
step without reduction (wall - CPU time): a CPU-driven reduction can hide at most that; and
the time a rank waits (step time less CPU time: on the link or on its peer) with the reduction
after backward against the DDP step, which is what the overlap can remove apart from the
reduction's own CPU work.
``--bucket-view`` runs DDP with ``gradient_as_bucket_view=True``.
``--timeline`` prints, for one more overlapped step of rank 0, when each gradient came in and
each bucket started and completed against the backward's start and end, and where the CPU time
a DDP step adds goes (copies into the buckets, all-reduce starts, progress thread, final wait).
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


class _Clock:
    """The clock of the steps and of the simulated link: wall time, or with ``--cpu-clock`` the
    rank's CPU time (every thread) plus the link's simulated waits. The CPU clock is what a
    rank on a core of its own would see: on a loaded machine wall times also count the time
    other processes held the core, which stretches backward but not the simulated link and so
    inflates what it seems to hide. (Waiting for a peer rank spins in MPI and counts as CPU.)"""

    def __init__(self, cpu: bool):
        self.cpu, self.slept = cpu, 0.0

    def now(self) -> float:
        return time.process_time() + self.slept if self.cpu else time.perf_counter()

    def sleep(self, seconds: float) -> None:
        if self.cpu:
            self.slept += seconds
        else:
            time.sleep(seconds)


CLOCK = _Clock(False)


def _slow_link(bandwidth: float) -> None:
    """One simulated link of ``bandwidth`` bytes/s: every all-reduce completes no earlier than
    its bytes / bandwidth after the link is free of the all-reduces started before it (and no
    earlier than the real transfer, which proceeds meanwhile). The added wait is a sleep in the
    thread that waits, so it costs no CPU."""
    from ferro.distributed import collectives as C

    original = C.all_reduce
    link = {"free_at": 0.0}

    def all_reduce(tensor, op=C.ReduceOp.SUM, group=None, async_op=False):
        work = original(tensor, op, group, async_op=True)
        now = CLOCK.now()
        ready_at = max(now, link["free_at"]) + tensor._data.nbytes / bandwidth
        link["free_at"] = ready_at
        base_done, base_wait = work.is_completed, work.wait

        def is_completed():
            return base_done() and CLOCK.now() >= ready_at  # base_done() progresses

        def wait(timeout=None):
            base_wait(timeout)
            left = ready_at - CLOCK.now()
            if left > 0:
                CLOCK.sleep(left)
            return True

        work.is_completed, work.wait = is_completed, wait
        if async_op:
            return work
        work.wait()
        return None

    C.all_reduce = all_reduce


def worker(
    steps: int, link: float, cap: float, timeline: bool, cpu_clock: bool, view: bool
) -> None:
    import numpy as np

    import ferro
    import ferro.distributed as dist
    from ferro import nn
    from ferro.nn.parallel import DistributedDataParallel as DDP

    CLOCK.cpu = cpu_clock
    if link:
        _slow_link(link)
    dist.init_process_group("mpi")
    r, n = dist.get_rank(), dist.get_world_size()
    ferro.manual_seed(0)
    layers = []
    for a, b in zip(SIZES[:-1], SIZES[1:], strict=True):
        layers += [nn.Linear(a, b), nn.ReLU()]
    model = nn.Sequential(*layers[:-1])
    ddp = DDP(model, bucket_cap_mb=cap, gradient_as_bucket_view=view) if n > 1 else model
    opt = ferro.optim.SGD(model.parameters(), lr=0.01)
    rng = np.random.default_rng(r)
    x = ferro.tensor(rng.standard_normal((BATCH, SIZES[0]), dtype=np.float32))
    y = ferro.tensor(rng.integers(0, SIZES[-1], BATCH))
    marks = {}

    def step_overlap():
        opt.zero_grad()
        loss = ferro.nn.functional.cross_entropy(ddp(x), y)
        marks["backward"] = time.perf_counter()
        loss.backward()
        marks["returned"] = time.perf_counter()
        opt.step()

    def step_after():
        opt.zero_grad()
        with ddp.no_sync():
            ferro.nn.functional.cross_entropy(ddp(x), y).backward()
        ddp._reduce_after_backward()
        opt.step()

    def step_local():
        opt.zero_grad()
        with ddp.no_sync():
            ferro.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()

    cases = {"overlap": step_overlap}
    if n > 1:
        cases["after"] = step_after
        cases["reduce"] = ddp._reduce_after_backward  # the gradients of the last step
        cases["local"] = step_local  # no reduction: the step's own CPU time against its wall time
    out = {k: [] for k in cases}
    cpu = {k: [] for k in cases}
    for fn in cases.values():  # warm-up
        fn()
    for _ in range(steps):
        for name, fn in cases.items():  # interleaved: the machine's load hits each case alike
            dist.barrier()
            t0, c0 = CLOCK.now(), time.process_time()
            fn()
            out[name].append(CLOCK.now() - t0)
            cpu[name].append(time.process_time() - c0)  # every thread of this rank
    times = {k: statistics.median(v) for k, v in out.items()}
    times["min"] = {k: min(v) for k, v in out.items()}  # the least disturbed step of each
    times["cpu"] = {k: statistics.median(v) for k, v in cpu.items()}
    if timeline and n > 1:
        object.__setattr__(ddp, "_timeline", [])
        dist.barrier()
        step_overlap()
        t0 = marks["backward"]
        events = [("backward starts", -1, t0)] + ddp._timeline
        events.append(("backward returned", -1, marks["returned"]))
        times["timeline"] = [(e, i, round((t - t0) * 1e3, 2)) for e, i, t in events]
        times["buckets"] = [
            (len(b.params), round(b.size * b.dtype.itemsize / 2**20, 2)) for b in ddp._buckets
        ]
        times["cpu_parts"] = _cpu_parts(ddp, step_overlap, step_local, steps, dist.barrier)
    if r == 0:
        print("RESULT " + json.dumps({"ranks": n, **times}), flush=True)
    dist.destroy_process_group()


def _cpu_parts(ddp, step_overlap, step_local, steps: int, barrier) -> dict:
    """Where the CPU time a DDP step adds to a step without reduction goes (ms, medians over
    ``steps`` overlapped steps): the main thread's copies into the buckets, all-reduce starts
    and final wait with hand-over, and the progress thread (MPI moving and summing the data).
    On cores that BLAS keeps busy, this is the part of the reduction no overlap can hide."""
    import threading

    cls = type(ddp)
    parts = {"copies into buckets": "_copy_in", "all-reduce starts": "_launch"}
    parts["final wait, hand-over"] = "_finalize"
    acc = dict.fromkeys(parts, 0.0)
    originals = {name: getattr(cls, name) for name in parts.values()}

    def timed(label, fn):
        def wrapper(self, *args):
            c0 = time.thread_time()
            try:
                return fn(self, *args)
            finally:
                acc[label] += time.thread_time() - c0

        return wrapper

    for label, name in parts.items():
        setattr(cls, name, timed(label, originals[name]))
    try:
        rows = {k: [] for k in [*parts, "progress thread", "DDP step", "local step"]}
        for _ in range(steps):
            progress = [t for t in threading.enumerate() if t.name == "ferro-ddp-progress"]
            clock = time.pthread_getcpuclockid(progress[0].ident) if progress else None
            for k in acc:
                acc[k] = 0.0
            barrier()
            c0, p0 = time.process_time(), time.clock_gettime(clock) if clock else 0.0
            step_overlap()
            rows["DDP step"].append(time.process_time() - c0)
            rows["progress thread"].append((time.clock_gettime(clock) if clock else 0.0) - p0)
            for k, v in acc.items():
                rows[k].append(v)
            barrier()
            c0 = time.process_time()
            step_local()
            rows["local step"].append(time.process_time() - c0)
    finally:
        for name, fn in originals.items():
            setattr(cls, name, fn)
    return {k: round(statistics.median(v) * 1e3, 2) for k, v in rows.items()}


def launch(
    n: int,
    steps: int,
    link: float,
    cap: float = 25.0,
    timeline: bool = False,
    cpu: bool = False,
    view: bool = False,
) -> dict:
    from ferro.distributed.run import command

    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    args = [os.path.abspath(__file__), "--worker", "--steps", str(steps), "--link", str(link)]
    args += ["--bucket-cap-mb", str(cap)] + (["--timeline"] if timeline else [])
    args += ["--cpu-clock"] if cpu else []
    args += ["--bucket-view"] if view else []
    out = subprocess.run(command(n, args), env=env, capture_output=True, text=True, check=True)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(out.stdout + out.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--bucket-cap-mb", type=float, nargs="+", default=[25.0, 8.0])
    ap.add_argument("--timeline", action="store_true")
    ap.add_argument(
        "--cpu-clock",
        action="store_true",
        help="time steps by each rank's CPU time plus the simulated link's waits (a loaded "
        "machine's wall times count other processes' time)",
    )
    ap.add_argument(
        "--bucket-view", action="store_true", help="DDP with gradient_as_bucket_view=True"
    )
    ap.add_argument("--link", type=float, default=0.0, help=argparse.SUPPRESS)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(
            args.steps,
            args.link,
            args.bucket_cap_mb[0],
            args.timeline,
            args.cpu_clock,
            args.bucket_view,
        )
        return
    header("bench_distributed")
    if args.cpu_clock:
        print("# clock: each rank's CPU time plus the simulated link's waits (--cpu-clock)")
    if args.bucket_view:
        print("# DDP(gradient_as_bucket_view=True) (--bucket-view)")
    one = launch(1, args.steps, 0.0, cpu=args.cpu_clock)
    rows = []
    settings = [
        (link_label, link, cap)
        for link_label, link in (("shared memory", 0.0), ("1 GB/s link (simulated)", 1e9))
        for cap in args.bucket_cap_mb
    ]
    for link_label, link, cap in settings:
        label = f"{link_label}, {cap:g} MB buckets"
        many = launch(
            args.ranks, args.steps, link, cap, args.timeline, args.cpu_clock, args.bucket_view
        )
        if args.timeline:
            print(f"# {label}: buckets (parameters, MiB) {many['buckets']}")
            for event, bucket, ms in many["timeline"]:
                print(f"#   {ms:8.2f} ms  {event}" + (f" bucket {bucket}" if bucket >= 0 else ""))
            print(f"# {label}: CPU ms of a rank (medians) {many['cpu_parts']}")
        speedup = args.ranks * one["overlap"] / many["overlap"]
        hidden = (many["after"] - many["overlap"]) / many["reduce"]
        # The same from each case's least disturbed step (a loaded machine stretches medians).
        low = many["min"]
        hidden_min = (low["after"] - low["overlap"]) / low["reduce"]
        # What a CPU-driven reduction could hide at most: the core time a rank leaves idle in
        # a step without reduction, against the CPU time the reduction itself takes.
        idle = max(many["local"] - many["cpu"]["local"], 0.0)
        # The time a rank waits (step time less its CPU time: on the link, or on its peer) in the
        # DDP step against the step with the reduction after backward: how much of the waiting
        # the overlap removes, apart from the reduction's CPU work, which only a free core hides.
        waits = {k: max(many[k] - many["cpu"][k], 0.0) for k in ("overlap", "after")}
        wait_hidden = 1 - waits["overlap"] / waits["after"] if waits["after"] > 1e-4 else 0.0
        rows.append(
            [
                label,
                f"{one['overlap'] * 1e3:.1f}",
                f"{many['overlap'] * 1e3:.1f}",
                f"{many['after'] * 1e3:.1f}",
                f"{many['reduce'] * 1e3:.1f}",
                f"{speedup:.2f}x",
                f"{hidden:.2f}",
                f"{hidden_min:.2f}",
                f"{waits['after'] * 1e3:.1f} -> {waits['overlap'] * 1e3:.1f}",
                f"{many['cpu']['reduce'] * 1e3:.1f}",
                f"{idle * 1e3:.1f}",
            ]
        )
        emit(
            "bench_distributed",
            label,
            ranks=args.ranks,
            bucket_cap_mb=cap,
            bucket_view=args.bucket_view,
            step_1rank_s=one["overlap"],
            step_overlap_s=many["overlap"],
            step_after_s=many["after"],
            reduce_s=many["reduce"],
            throughput_x=speedup,
            hidden_fraction=hidden,
            hidden_fraction_min=hidden_min,
            min_s=many["min"],
            cpu_s=many["cpu"],
            step_local_s=many["local"],
            idle_s=idle,
            wait_s=waits,
            wait_hidden=wait_hidden,
        )
    table(
        rows,
        [
            "link, buckets",
            "1 rank ms",
            f"{args.ranks} ranks ms",
            "reduce after ms",
            "reduce alone ms",
            "throughput",
            "hidden",
            "hidden (min)",
            "wait after -> DDP ms",
            "reduce CPU ms",
            "idle ms",
        ],
    )
    print("goals: throughput >= 1.7x with 2 ranks; hidden >= 0.5")


if __name__ == "__main__":
    main()
