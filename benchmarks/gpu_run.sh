#!/bin/bash
# Everything a GPU machine should run for ferro, in one go (build, the gpu-marked tests, the GPU
# benchmark), writing logs to $OUT (default: benchmarks/results). Meant for a machine with an
# NVIDIA GPU whose Python already has cupy, numpy, Cython and pytest (for example the device
# machine: Python 3.12, cupy-cuda13x, no internet), hence --no-build-isolation and --no-deps.
#
#     bash benchmarks/gpu_run.sh            # from the repository root
set -o pipefail
OUT=${OUT:-benchmarks/results}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  $PY -c "import cupy, sys; print('python', sys.version.split()[0], 'cupy', cupy.__version__, 'cuda runtime', cupy.cuda.runtime.runtimeGetVersion())"
} 2>&1 | tee "$OUT/gpu_env.txt"
# Installed for the tests (they import the installed package); built in place for the benchmark
# (benchmarks import ferro from the checkout, as on a developer's machine).
$PY -m pip install -q --no-build-isolation --no-deps . 2>&1 | tail -5 || exit 1
$PY setup.py -q build_ext --inplace -j 8 > /tmp/ferro_build.log 2>&1 || { tail -20 /tmp/ferro_build.log; exit 1; }
(cd tests && $PY -m pytest -m gpu -q -p no:cacheprovider 2>&1) | tee "$OUT/gpu_tests.txt"
tests_rc=$?
(cd tests && $PY -m pytest -q -p no:cacheprovider 2>&1 | tail -3) | tee "$OUT/gpu_full_suite.txt"
$PY benchmarks/bench_gpu.py 2>&1 | tee "$OUT/bench_gpu.txt"
$PY benchmarks/bench_resample.py --device cuda 2>&1 | tee "$OUT/bench_resample_gpu.txt"
exit $tests_rc
