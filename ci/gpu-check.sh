#!/usr/bin/env bash
# ci/gpu-check.sh - the device check: tk's GPU path on a machine with an NVIDIA
# GPU (the lent H200: torch 2.11 + CUDA 13, Python 3.12, CMake, no internet;
# nothing is installed). Steps, each with a time limit, all within 5 minutes:
#   build      CMake (+ Ninja when present) against the machine's torch: libtk,
#              tkc, test_nvrtc (the CPU-only test programs are left out for time)
#   ctest      test_nvrtc: NVRTC compiles of every op x variant, cache, launcher
#   pytest     the CUDA tests of tests/python (ids matching cuda or gpu): all of
#              test_cuda.py (seed brick_pad bit-equal to torch_pad, rwkv vs
#              F.conv1d with TF32 off, dtypes, non-contiguous, CUDA graphs,
#              threads, cuda:1 when present) and the cuda parametrisations of
#              the other files (autograd, opcheck, compile...); the CPU suite is CI's
#   bench      bench/gpu_bench.py: brick_pad vs torch_pad and vs a device copy,
#              rwkv forward and backward vs F.conv1d (TF32 off), bfloat16 and
#              float16 vs float32, per-call launch overhead vs torch.add, peak
#              memory, kernels per call (profiler), NVRTC cold / warm first-call
#              latency; its last lines put each figure next to its target
#   static     bench/gpu_static.py: registers, spills and hot-loop instruction
#              mix of every kernel (NVRTC), next to the timings
#   sanitizer  compute-sanitizer memcheck on ci/gpu_small_case.py, where it works
# The summary table is printed last. Files in $OUT (default out/gpu-check):
#   gpu_check.json (steps, times, versions, bench), gpu_bench.json, info.txt and
#   build.log, ctest.log, pytest.log, bench.log, static.log, sanitizer.log, gpu_static.json
# Usage: bash ci/gpu-check.sh        Exit status 0 when every step passed
# (a sanitizer that cannot run on this machine counts as passed, and says so).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/out/gpu-check}
PY=${PYTHON:-python3}
BUILD=${BUILD:-$ROOT/build-gpu}
BUDGET=${BUDGET:-290}          # seconds for everything; a step gets what is left
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$ROOT/python TK_LIBRARY=$BUILD/libtk.so
export TK_CACHE_DIR=${TK_CACHE_DIR:-$(mktemp -d /tmp/tk-cache.XXXXXX)}   # start with a cold cache
unset TK_DEBUG TK_NVRTC_PATH
T0=$(date +%s)
STEPS=()   # "name|status|seconds"; a status other than pass / unavailable fails the check

# run_step NAME LIMIT LOG CMD...: runs CMD with at most LIMIT seconds (less if
# the budget is nearly spent), output to $OUT/LOG; shows its tail.
run_step() {
  local name=$1 limit=$2 log=$3
  shift 3
  local left=$((BUDGET - ($(date +%s) - T0)))
  if [ "$left" -lt 15 ]; then
    STEPS+=("$name|skipped (out of time)|0")
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (limit ${limit}s)"
  local t=$(date +%s)
  timeout -k 5 "$limit" "$@" >"$OUT/$log" 2>&1
  local rc=$? status=pass
  tail -n 12 "$OUT/$log" | sed 's/^/   /'
  [ $rc -ne 0 ] && status="FAIL (exit $rc)"
  [ $rc -eq 124 ] && status="TIMEOUT"
  STEPS+=("$name|$status|$(($(date +%s) - t))")
  echo "== $name: $status"
  return $rc
}

# ---- what is here ---------------------------------------------------------------
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -4
  $PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
"available", torch.cuda.is_available(), "devices", torch.cuda.device_count())'
  command -v ninja cmake nvcc compute-sanitizer 2>/dev/null
} 2>&1 | tee "$OUT/machine.txt"
if ! $PY -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
  echo "gpu-check: torch sees no CUDA GPU; the CUDA tests would all be skipped" >&2
  STEPS+=("gpu|FAIL (torch sees no CUDA GPU)|0")
fi

# ---- build ----------------------------------------------------------------------
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
# tk needs no CUDA, but the CMake config of a CUDA build of torch insists on
# finding the toolkit, NVRTC included: point it at /usr/local/cuda and, if the
# toolkit has no NVRTC, at the one from torch's nvidia wheels.
HINTS=()
if [ -d /usr/local/cuda ]; then
  HINTS+=(-DCUDA_TOOLKIT_ROOT_DIR=/usr/local/cuda -DCUDAToolkit_ROOT=/usr/local/cuda)
fi
if ! ls /usr/local/cuda/lib64/libnvrtc.so* >/dev/null 2>&1; then
  NVRTC_LIB=$($PY -c 'import glob, site
c = [f for p in site.getsitepackages() for f in sorted(glob.glob(p + "/nvidia/*/lib/libnvrtc.so*"))]
print(c[0] if c else "")')
  [ -n "$NVRTC_LIB" ] && HINTS+=(-DCUDA_nvrtc_LIBRARY="$NVRTC_LIB")
fi
run_step build 170 build.log bash -c "
  cmake -S . -B '$BUILD' ${GEN[*]} ${HINTS[*]+${HINTS[*]}} -DCMAKE_BUILD_TYPE=Release -DTK_WERROR=OFF \
        -DPython_EXECUTABLE=\$(command -v $PY) &&
  cmake --build '$BUILD' -j\$(nproc) --target tk tkc test_nvrtc tk_fake_cuda"

if [ -f "$BUILD/libtk.so" ]; then
  # ---- tests ----------------------------------------------------------------------
  run_step ctest 90 ctest.log ctest --test-dir "$BUILD" --output-on-failure -R '^test_nvrtc$'
  XDIST=()
  $PY -c 'import xdist' 2>/dev/null && XDIST=(-n 8)
  # the CUDA tests of every file (test ids naming cuda or gpu); CI runs the CPU suite
  run_step pytest 120 pytest.log $PY -m pytest -q -rs -p no:cacheprovider ${XDIST[@]+"${XDIST[@]}"} \
    -k "cuda or gpu" tests/python

  # ---- benchmarks -----------------------------------------------------------------
  run_step bench 90 bench.log $PY bench/gpu_bench.py --json "$OUT/gpu_bench.json"
  run_step static 60 static.log $PY bench/gpu_static.py --tkc "$BUILD/tkc" --plain --json "$OUT/gpu_static.json"

  # ---- compute-sanitizer ----------------------------------------------------------
  CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
  if [ -n "$CS" ]; then
    # memory errors in kernels only: torch's own probing API calls are not errors here
    run_step sanitizer 90 sanitizer.log "$CS" --tool memcheck --error-exitcode 3 --report-api-errors no \
      $PY ci/gpu_small_case.py
    if grep -qiE "unrecognized|unknown option|invalid (value|option)" "$OUT/sanitizer.log"; then  # older tool
      unset 'STEPS[${#STEPS[@]}-1]'
      run_step sanitizer 90 sanitizer.log "$CS" --tool memcheck --error-exitcode 3 $PY ci/gpu_small_case.py
    fi
    if grep -q "Device not supported" "$OUT/sanitizer.log"; then    # e.g. under gVisor
      unset 'STEPS[${#STEPS[@]}-1]'
      STEPS+=("sanitizer|unavailable here (Device not supported)|0")
    fi
  else
    STEPS+=("sanitizer|unavailable (no compute-sanitizer)|0")
  fi
  $PY -m torch_tk info >"$OUT/info.txt" 2>&1
fi

# ---- summary ----------------------------------------------------------------------
TOTAL=$(($(date +%s) - T0))
printf '%s\n' "${STEPS[@]}" | $PY ci/gpu_check_summary.py "$OUT" "$TOTAL"
