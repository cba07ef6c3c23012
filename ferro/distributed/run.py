"""Launch a data-parallel job on this machine: ``python -m ferro.distributed.run -n 2 train.py
[args...]`` runs ``mpiexec -n 2 <this python> train.py [args...]``.

It finds ``mpiexec`` next to the running interpreter (where the ``mpich`` wheel installs it in
a virtual environment) or on ``PATH``. Each rank gets ``OMP_NUM_THREADS`` and
``OPENBLAS_NUM_THREADS`` of ``cores // n`` (at least 1) unless they are set, so ranks do not
oversubscribe the cores. On a cluster, call ``mpiexec`` yourself with a hostfile
(docs/distributed.md).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys


def find_mpiexec() -> str | None:
    """``mpiexec`` beside the running Python, else on PATH, else None."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.access(here, os.X_OK):
        return here
    return shutil.which("mpiexec")


def command(nproc: int, argv: list[str], module: bool = False) -> list[str]:
    """The mpiexec command line that runs ``argv`` (a script and its arguments) on ``nproc``
    ranks."""
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise SystemExit(
            "ferro.distributed.run: mpiexec not found; pip install 'ferro[mpi]' (the mpich "
            "wheel ships it)"
        )
    target = ["-m", *argv] if module else argv
    return [mpiexec, "-n", str(nproc), sys.executable, *target]


def main(args: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m ferro.distributed.run", description=__doc__.splitlines()[0]
    )
    ap.add_argument("-n", "--nproc-per-node", "--nproc_per_node", type=int, default=2)
    ap.add_argument("-m", "--module", action="store_true", help="run the target as a module")
    ap.add_argument("target", nargs=argparse.REMAINDER, help="script (or module) and its args")
    ns = ap.parse_args(args)
    if ns.nproc_per_node < 1 or not ns.target:
        ap.error("need -n >= 1 and a script to run")
    env = dict(os.environ)
    threads = str(max(1, (os.cpu_count() or 1) // ns.nproc_per_node))
    env.setdefault("OMP_NUM_THREADS", threads)
    env.setdefault("OPENBLAS_NUM_THREADS", threads)
    return subprocess.call(command(ns.nproc_per_node, ns.target, ns.module), env=env)


if __name__ == "__main__":
    sys.exit(main())
