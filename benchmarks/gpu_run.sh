#!/bin/bash
# Everything a GPU machine should run for ferro, in one go and within a time budget: build in
# place, the gpu-marked tests, the GPU benchmarks (kernels, then models and layer families
# against PyTorch CUDA, then resampling), then the whole suite with what time is left. Logs go
# to $OUT (default: benchmarks/results/gpu), one file per step. Meant for a machine with an
# NVIDIA GPU whose Python already has cupy, numpy, Cython and pytest (the device machine:
# Python 3.12, cupy-cuda13x, no internet), so nothing is installed; pytest-xdist and
# pytest-timeout are used when present.
#
#     bash benchmarks/gpu_run.sh                  # from the repository root
#     BUDGET=540 bash benchmarks/gpu_run.sh       # seconds for the whole run (default 540)
set -o pipefail
OUT=${OUT:-benchmarks/results/gpu}
PY=${PYTHON:-python3}
BUDGET=${BUDGET:-540}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 FERRO_TEST_INPLACE=1 PYTHONPATH=$PWD
T0=$SECONDS

# limit CAP: seconds a step may take, at most CAP and at most what is left of the budget.
limit() {
  local left=$((BUDGET - (SECONDS - T0)))
  echo $((left < $1 ? (left > 5 ? left : 5) : $1))
}

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  $PY -c "import cupy, numpy, sys; print('python', sys.version.split()[0], 'numpy', numpy.__version__, 'cupy', cupy.__version__, 'cuda runtime', cupy.cuda.runtime.runtimeGetVersion(), 'nvrtc', cupy.cuda.nvrtc.getVersion())"
  $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())" || true
  echo "cpus $(nproc)"
} 2>&1 | tee "$OUT/gpu_env.txt"

JOBS=$(nproc)
if ! timeout "$(limit 240)" $PY setup.py -q build_ext --inplace -j "$JOBS" >"$OUT/build.log" 2>&1; then
  tail -30 "$OUT/build.log"
  exit 1
fi
echo "# built in $((SECONDS - T0)) s"

# The gpu tests run in one process (as in CI); the whole suite afterwards on several workers.
PYTEST=(-q -p no:cacheprovider -rfE --tb=short)
$PY -c "import pytest_timeout" 2>/dev/null && PYTEST+=(--timeout 120)
PARALLEL=()
$PY -c "import xdist" 2>/dev/null && PARALLEL=(-n "$((JOBS < 12 ? JOBS : 12))")

(cd tests && timeout "$(limit 220)" $PY -m pytest -m gpu "${PYTEST[@]}" --durations=10 2>&1) >"$OUT/gpu_tests.txt"
tests_rc=$?
tail -15 "$OUT/gpu_tests.txt"
echo "# gpu tests done at $((SECONDS - T0)) s (rc $tests_rc)"

timeout "$(limit 90)" $PY benchmarks/bench_gpu.py >"$OUT/bench_gpu.txt" 2>&1
timeout "$(limit 150)" $PY benchmarks/bench_gpu_models.py >"$OUT/bench_gpu_models.txt" 2>&1
timeout "$(limit 45)" $PY benchmarks/bench_resample.py --device cuda >"$OUT/bench_resample_gpu.txt" 2>&1
echo "# benchmarks done at $((SECONDS - T0)) s"

(cd tests && timeout "$(limit 600)" $PY -m pytest "${PYTEST[@]}" "${PARALLEL[@]}" 2>&1 | tail -60) >"$OUT/gpu_full_suite.txt"
echo "# full suite done at $((SECONDS - T0)) s"
for f in bench_gpu bench_gpu_models bench_resample_gpu; do
  grep -v '^BENCH' "$OUT/$f.txt" | tail -30
done
tail -8 "$OUT/gpu_full_suite.txt"
exit $tests_rc
