"""Instruction counts per step of bench_engine's cases, for callgrind (deterministic, so valid on
a loaded machine): the micrograd MLP step, its minimal NumPy floor, or the 1-element chain.

    valgrind --tool=callgrind --collect-atstart=no --toggle-collect=starmap_next \\
        python benchmarks/callgrind_step.py mlp 20

Only the steps are collected: they run inside ``itertools.starmap`` (the C function that
``--toggle-collect`` names), after warm-up steps outside it. Divide callgrind's "Collected" by
the step count for the instructions per step; ``callgrind_annotate`` lists the functions. Run it
with ``OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1`` (one thread is what callgrind measures best).
"""

from __future__ import annotations

import argparse
import collections
import itertools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.bench_engine import (  # noqa: E402
    autograd_chain,
    make_inputs,
    make_mlp_step,
    mlp_data,
    numpy_mlp_step,
)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case", choices=("mlp", "floor", "chain"))
    ap.add_argument("steps", type=int, nargs="?", default=20)
    ap.add_argument("--ops", type=int, default=300, help="ops of the chain")
    args = ap.parse_args(argv)

    import ferro

    if args.case == "chain":
        x, w, b = (ferro.tensor(a, requires_grad=True) for a in make_inputs(1))

        def step():
            autograd_chain(ferro, x, w, b, args.ops, True)

    else:
        data_x, data_y, params = mlp_data()
        if args.case == "mlp":
            step = make_mlp_step(ferro, data_x, data_y, params)[0]
        else:

            def step():
                numpy_mlp_step(data_x, data_y, params)

    for _ in range(3):
        step()
    collections.deque(itertools.starmap(step, [()] * args.steps), maxlen=0)


if __name__ == "__main__":
    main()
