"""Run every benchmark with the shared protocol and write the report.

    python benchmarks/run_all.py [--quick]

Runs each ``bench_*.py`` in its own process (memory cases start one more fresh process per
case), writes ``benchmarks/results/<name>.txt`` (the raw output) and ``<name>.json`` (its
``BENCH`` records), then ``benchmarks/results/REPORT.md`` with the ratio tables and three
matplotlib plots: per-op overhead against PyTorch and NumPy, MLP step time against batch size,
and peak memory against checkpoint segments. PyTorch is an optional peer: without it, its
columns are empty. ``--quick`` uses smaller sizes and fewer repeats (under 3 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")

# name -> (full arguments, quick arguments); a list of argument lists runs the script several
# times and merges the records.
PLAN = {
    "bench_engine": (["--repeats", "15"], ["--repeats", "5", "--ops", "600"]),
    "bench_mlp": (
        [["--batch", str(b), "--repeats", "40"] for b in (16, 64, 256)],
        [["--batch", str(b), "--repeats", "8"] for b in (16, 64)],
    ),
    "bench_inplace": (
        ["--repeats", "15"],
        ["--repeats", "3", "--sizes", "1000", "100000", "--n", "1000000"],
    ),
    "bench_train": (["--repeats", "7"], ["--repeats", "3", "--params", "2000000"]),
    "bench_ops": (["--repeats", "7"], ["--repeats", "3", "--n", "1000000", "--classes", "100"]),
    "bench_parallel": (["--repeats", "30"], ["--repeats", "6"]),
    "bench_checkpoint": (
        ["--segments", "4", "14", "50"],
        ["--layers", "40", "--width", "256", "--repeats", "1", "--segments", "2", "6", "20"],
    ),
    "bench_conv": (["--repeats", "7"], ["--repeats", "2", "--no-memory"]),
    "bench_pool": (["--repeats", "15"], ["--repeats", "3"]),
    "bench_resample": (["--repeats", "7"], ["--repeats", "2", "--scale", "0.5"]),
    # bench_seq also runs bench_norm and bench_rnn (issue 15's figures in one run).
    "bench_seq": (["--repeats", "7"], ["--repeats", "2", "--quick"]),
    # 30 rounds, 24 steps: hvp/gradient and the hidden fraction are ratios of differences
    # that 10 rounds / 12 steps left 0.1 apart between runs of the same code (docs/benchmarks.md)
    "bench_higher": (["--repeats", "30"], ["--repeats", "3"]),
    "bench_distributed": (["--steps", "24"], ["--steps", "4"]),
    # ferro's own float32 GEMM against NumPy's BLAS and PyTorch's (Note [Own SGEMM])
    "bench_gemm": (["--repeats", "15"], ["--repeats", "3", "--quick"]),
    # where cpu_kernels.TWO_CORE_MIN should be (Note [Two-core elementwise ops])
    "bench_two_core": (["--repeats", "400"], ["--repeats", "60"]),
}


def run(name: str, arglists: list) -> tuple[str, list]:
    out, records = [], []
    for args in arglists:
        proc = subprocess.run(
            [sys.executable, os.path.join(HERE, f"{name}.py"), *args],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{name} {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
        out.append(proc.stdout)
        records += [
            json.loads(line[6:]) for line in proc.stdout.splitlines() if line.startswith("BENCH ")
        ]
    return "\n".join(out), records


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    return "-" if v is None else str(v)


def _table(records: list) -> str:
    keys = [k for k in records[0] if k not in ("bench",)]
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for r in records:
        lines.append("| " + " | ".join(_fmt(r.get(k)) for k in keys) + " |")
    return "\n".join(lines)


def plots(results: dict) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    eng = results.get("bench_engine", [])
    if eng:
        fig, ax = plt.subplots(figsize=(7, 3.5))
        labels = [r["case"].replace("chain_", "") for r in eng]
        xs = range(len(eng))
        for k, (key, lab) in enumerate(
            [
                ("ferro_us_per_op", "ferro"),
                ("numpy_us_per_op", "NumPy (no autograd)"),
                ("torch_us_per_op", "PyTorch eager"),
            ]
        ):
            vals = [r.get(key) or 0 for r in eng]
            ax.bar([x + 0.27 * (k - 1) for x in xs], vals, width=0.27, label=lab)
        ax.set_xticks(list(xs), labels)
        ax.set(ylabel="µs per op", title="graph overhead (2,000-op chain)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(RESULTS, "per_op_overhead.png"), dpi=90)
        plt.close(fig)
        made.append("per_op_overhead.png")
    mlp = results.get("bench_mlp", [])
    if mlp:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        batches = [int(r["case"].split("batch")[1]) for r in mlp]
        for key, lab in [
            ("ferro_ms", "ferro"),
            ("numpy_ms", "NumPy (hand-written)"),
            ("torch_ms", "PyTorch"),
        ]:
            if all(r.get(key) for r in mlp):
                ax.plot(batches, [r[key] for r in mlp], marker="o", label=lab)
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="batch size",
            ylabel="ms per step",
            title="MLP 784-512-512-10 training step",
        )
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(RESULTS, "mlp_step_vs_batch.png"), dpi=90)
        plt.close(fig)
        made.append("mlp_step_vs_batch.png")
    ck = results.get("bench_checkpoint", [])
    if ck:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        segs = [r["segments"] for r in ck]
        ax.plot(
            [0] + segs,
            [ck[0]["plain_peak_mb"]] + [r["ckpt_peak_mb"] for r in ck],
            marker="o",
            label="peak MiB",
        )
        for r in ck:
            ax.annotate(
                f"{r['time_ratio']:.2f}x time",
                (r["segments"], r["ckpt_peak_mb"]),
                textcoords="offset points",
                xytext=(4, 6),
                fontsize=8,
            )
        ax.set(
            xlabel="checkpoint segments (0: none)",
            ylabel="peak MiB",
            title=f"{ck[0]['layers']}-layer chain: memory against segments",
        )
        fig.tight_layout()
        fig.savefig(os.path.join(RESULTS, "checkpoint_memory.png"), dpi=90)
        plt.close(fig)
        made.append("checkpoint_memory.png")
    return made


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", nargs="*", default=None, help="run only these benchmarks")
    args = ap.parse_args(argv)
    os.makedirs(RESULTS, exist_ok=True)
    results, t_start = {}, time.time()
    for name, (full, quick) in PLAN.items():
        if args.only and name not in args.only:
            continue
        plan = quick if args.quick else full
        arglists = plan if plan and isinstance(plan[0], list) else [plan]
        t0 = time.time()
        text, records = run(name, arglists)
        results[name] = records
        with open(os.path.join(RESULTS, f"{name}.txt"), "w") as f:
            f.write(text)
        with open(os.path.join(RESULTS, f"{name}.json"), "w") as f:
            json.dump(records, f, indent=1)
        print(f"{name}: {len(records)} records in {time.time() - t0:.0f} s", flush=True)
    # Benchmarks left out by --only keep their last figures in the report (their JSON is read
    # back), so a partial run updates the report instead of truncating it.
    for name in PLAN:
        kept = os.path.join(RESULTS, f"{name}.json")
        if name not in results and os.path.exists(kept):
            with open(kept) as f:
                results[name] = json.load(f)
    results = {name: results[name] for name in PLAN if name in results}
    made = plots(results)
    lines = [
        "# Benchmark report",
        "",
        f"Generated by `python benchmarks/run_all.py{' --quick' if args.quick else ''}` in "
        f"{time.time() - t_start:.0f} s. Protocol and goals: docs/benchmarks.md.",
        "",
    ]
    for name, records in results.items():
        if records:
            lines += [f"## {name}", "", _table(records), ""]
    for png in made:
        lines += [f"![{png}]({png})", ""]
    with open(os.path.join(RESULTS, "REPORT.md"), "w") as f:
        f.write("\n".join(lines))
    print(f"report: {os.path.join(RESULTS, 'REPORT.md')}")


if __name__ == "__main__":
    main()
