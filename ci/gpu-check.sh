#!/usr/bin/env bash
# ci/gpu-check.sh - the device check: tk's GPU path on a machine with an NVIDIA
# GPU (the lent H200: torch 2.11 + CUDA 13, Python 3.12, CMake, no internet;
# nothing is installed). Steps, each with a time limit, within $BUDGET seconds;
# a step that would start with under 15 s left is skipped and says so:
#   build      libtk and tkc against the machine's torch. When $PREBUILT
#              (default build-dev/, carried along) holds a libtk.so built
#              elsewhere against the same torch version and it loads and runs
#              here, it is used instead (ci/gpu-prebuild.sh makes it: device
#              time is short, a build there takes ~2 min)
#   bench      bench/gpu_bench.py: brick_pad vs torch_pad and vs a device copy,
#              rwkv forward and backward vs F.conv1d (TF32 off), bfloat16 and
#              float16 vs float32, per-call launch overhead vs torch.add, peak
#              memory, kernels per call (profiler), NVRTC cold / warm first-call
#              latency, the row-loop examples (wkv vs a loop over t, softmax
#              at (4096, 1024) and (64, 32768), layernorm (also with weight
#              and bias None: optional tensors), rmsnorm, cumsum vs
#              torch; softmax and layernorm also with schedule coop=32, a warp
#              a row, opt-in until this measures it against a thread a row);
#              an AdamW step updating in place (examples/specs/optim.tk) vs
#              torch's fused and foreach AdamW; its last lines put each figure
#              next to its target
#   pytest     the CUDA tests of tests/python (ids matching cuda or gpu, but
#              not test_gpu_tools, which needs no GPU): all of test_cuda.py
#              (seed brick_pad bit-equal to torch_pad, rwkv vs F.conv1d with
#              TF32 off, dtypes, non-contiguous, CUDA graphs, threads, cuda:1
#              when present), test_row_loops_cuda.py (the row-loop examples
#              against torch on the device) and the cuda parametrisations of
#              the other files (autograd, opcheck, compile...); the CPU suite
#              is CI's
#   ops        python -m torch_tk bench --device cuda: the side-by-side bench,
#              Taichi's kernels included when taichi imports (wheels carried
#              in .whl/ are installed to a temporary folder first)
#   ncu        Nsight Compute on ci/gpu_profile_case.py: each tk kernel's
#              speed of light, occupancy, launch shape, warp stalls, memory
#   sanitizer  compute-sanitizer memcheck on ci/gpu_small_case.py, where it works
#   tune       with GPU_TUNE=1 only (first, after the build): ci/gpu_tune.py,
#              every CUDA tile shape of TK_CUDA_TUNE checked and timed (~2 min);
#              GPU_TUNE=quick: the default and nine others, split, ldg,
#              tiles=1 and regs=128 among them, and softmax / layernorm with
#              coop=32 (a warp a row) next to a thread a row (~2 min, at most
#              180 s)
# test_nvrtc and bench/gpu_static.py need no GPU: CI and this machine run them.
# The summary table is printed last. Files in $OUT (default out/gpu-check),
# at most 8 (the device tool brings 8 back): gpu_check.json (steps, times,
# versions, bench), gpu_bench.json, bench_ops.json, bench_ops.png, gpu_tune.json,
# tk-profile.ncu-rep, logs.tar.gz (machine.txt, info.txt, every step's log,
# ncu.txt: the profile as text)
# Usage: [BUDGET=s] [OUT=dir] bash ci/gpu-check.sh   Exit status 0 when every
# step passed (a tool this machine lacks counts as passed, and says so).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/out/gpu-check}
LOGS=$OUT/logs
PY=${PYTHON:-python3}
BUILD=${BUILD:-$ROOT/build-gpu}
PREBUILT=${PREBUILT:-$ROOT/build-dev}
BUDGET=${BUDGET:-300}          # seconds for everything; a step gets what is left
mkdir -p "$OUT" "$LOGS"
rm -f "$OUT"/gpu_check.json "$OUT"/gpu_bench.json "$OUT"/bench_ops.json "$OUT"/bench_ops.png \
      "$OUT"/gpu_tune.json "$OUT"/tk-profile.ncu-rep "$OUT"/logs.tar.gz   # nothing from an earlier run
export PYTHONUNBUFFERED=1 PYTHONPATH=$ROOT/python
# a fresh kernel cache (the bench measures its own cold start in another one)
export TK_CACHE_DIR=${TK_CACHE_DIR:-$(mktemp -d /tmp/tk-cache.XXXXXX)}
unset TK_DEBUG TK_NVRTC_PATH
T0=$(date +%s)
STEPS=()   # "name|status|seconds"; a status other than pass / unavailable fails the check

# run_step NAME LIMIT LOG CMD...: runs CMD with at most LIMIT seconds (less if
# the budget is nearly spent), output to $LOGS/LOG; shows its tail.
run_step() {
  local name=$1 limit=$2 log=$3
  shift 3
  local left=$((BUDGET - ($(date +%s) - T0)))
  if [ "$left" -lt 15 ]; then
    STEPS+=("$name|skipped (out of time)|0")
    echo "== $name: skipped (out of time)"
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (limit ${limit}s)"
  local t=$(date +%s)
  timeout -k 5 "$limit" "$@" >"$LOGS/$log" 2>&1
  local rc=$? status=pass
  tail -n 14 "$LOGS/$log" | cut -c1-200 | sed 's/^/   /'
  [ $rc -ne 0 ] && status="FAIL (exit $rc)"
  [ $rc -eq 124 ] && status="TIMEOUT"
  STEPS+=("$name|$status|$(($(date +%s) - t))")
  echo "== $name: $status"
  return $rc
}

# ---- what is here ---------------------------------------------------------------
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
    --format=csv,noheader 2>&1 | head -4
  $PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
"available", torch.cuda.is_available(), "devices", torch.cuda.device_count())'
  nproc
  command -v ninja cmake nvcc ncu compute-sanitizer 2>/dev/null
} 2>&1 | tee "$LOGS/machine.txt"
if ! $PY -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
  echo "gpu-check: torch sees no CUDA GPU; the CUDA tests would all be skipped" >&2
  STEPS+=("gpu|FAIL (torch sees no CUDA GPU)|0")
fi

# ---- build (or a carried build of the same torch) --------------------------------
# loads LIB into this torch and runs both ops on the CPU and, when there is
# one, the GPU: the check that a library built elsewhere fits this torch
lib_runs() {
  TK_LIBRARY=$1 timeout -k 5 90 $PY -c '
import torch, torch_tk
devs = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
for d in devs:
    t = torch.rand(4, 3, device=d)
    assert torch.ops.tk.brick_pad(t, 2, 1, 1).shape == (6, 7)
    w, k = torch.rand(3, 5, device=d), torch.rand(2, 3, 5, device=d)
    assert torch.ops.tk.rwkv_forward(w, k, 0.1).shape == (2, 3, 5)
print("libtk", torch_tk.library_path(), "runs here (torch", torch.__version__ + ")")'
}
if [ -f "$PREBUILT/libtk.so" ] && [ -x "$PREBUILT/tkc" ] && lib_runs "$PREBUILT/libtk.so" >"$LOGS/build.log" 2>&1; then
  BUILD=$PREBUILT
  cat "$LOGS/build.log"
  STEPS+=("build|pass|0")
  echo "== build: carried $PREBUILT (built against $(cat "$PREBUILT/torch_version.txt" 2>/dev/null || echo '?'))"
else
  [ -f "$PREBUILT/libtk.so" ] && { echo "== carried $PREBUILT/libtk.so does not run here:"; tail -n 5 "$LOGS/build.log"; }
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
          -DTK_BUILD_TESTS=OFF -DPython_EXECUTABLE=\$(command -v $PY) &&
    cmake --build '$BUILD' -j\$(nproc) --target tk tkc"
fi
export TK_LIBRARY=$BUILD/libtk.so

case "${GPU_TUNE:-0}" in
  1) [ -f "$BUILD/libtk.so" ] && run_step tune 200 tune.log $PY ci/gpu_tune.py --json "$OUT/gpu_tune.json" ;;
  quick) [ -f "$BUILD/libtk.so" ] && run_step tune 180 tune.log $PY ci/gpu_tune.py --quick --json "$OUT/gpu_tune.json" ;;
esac
if [ -f "$BUILD/libtk.so" ]; then
  # ---- benchmarks first: the figures the lease is for -------------------------------
  run_step bench 100 bench.log $PY bench/gpu_bench.py --json "$OUT/gpu_bench.json"

  # ---- tests ----------------------------------------------------------------------
  XDIST=()
  $PY -c 'import xdist' 2>/dev/null && XDIST=(-n 8)
  # the CUDA tests of every file (test ids naming cuda or gpu); CI runs the CPU suite
  run_step pytest 150 pytest.log $PY -m pytest -q -rs -p no:cacheprovider ${XDIST[@]+"${XDIST[@]}"} \
    -k "(cuda or gpu) and not test_gpu_tools" tests/python

  # ---- the side-by-side bench, with Taichi when its wheels came along ----------------
  if ls .whl/*.whl >/dev/null 2>&1; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      >"$LOGS/wheels.log" 2>&1 && export PYTHONPATH=$PYTHONPATH:/tmp/site
  fi
  $PY -c 'import taichi; print("taichi", taichi.__version__)' >>"$LOGS/wheels.log" 2>&1 ||
    echo "== taichi does not import here: the ops bench runs without it"
  run_step ops 90 ops.log $PY -m torch_tk bench --device cuda --repeat 20 \
    --json "$OUT/bench_ops.json" --png "$OUT/bench_ops.png"

  # ---- Nsight Compute: where each kernel's time goes ------------------------------
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || true)
  if [ -n "$NCU" ]; then
    run_step ncu 90 ncu.log "$NCU" --clock-control none --target-processes all --kernel-name regex:^tk_ \
      --section SpeedOfLight --section LaunchStats --section Occupancy --section ComputeWorkloadAnalysis \
      --section MemoryWorkloadAnalysis --section WarpStateStats --section InstructionStats \
      --export "$OUT/tk-profile" --force-overwrite $PY ci/gpu_profile_case.py &&
      "$NCU" --import "$OUT/tk-profile.ncu-rep" --page details >"$LOGS/ncu.txt" 2>&1
    if grep -q "ERR_NVGPUCTRPERM" "$LOGS/ncu.log"; then    # no access to the counters here
      unset 'STEPS[${#STEPS[@]}-1]'
      STEPS+=("ncu|unavailable here (ERR_NVGPUCTRPERM)|0")
    fi
  else
    STEPS+=("ncu|unavailable (no ncu)|0")
  fi

  # ---- compute-sanitizer ----------------------------------------------------------
  CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
  if [ -n "$CS" ]; then
    # memory errors in kernels only: torch's own probing API calls are not errors here
    run_step sanitizer 90 sanitizer.log "$CS" --tool memcheck --error-exitcode 3 --report-api-errors no \
      $PY ci/gpu_small_case.py
    if grep -qiE "unrecognized|unknown option|invalid (value|option)" "$LOGS/sanitizer.log"; then  # older tool
      unset 'STEPS[${#STEPS[@]}-1]'
      run_step sanitizer 90 sanitizer.log "$CS" --tool memcheck --error-exitcode 3 $PY ci/gpu_small_case.py
    fi
    if grep -q "Device not supported" "$LOGS/sanitizer.log"; then    # e.g. under gVisor
      unset 'STEPS[${#STEPS[@]}-1]'
      STEPS+=("sanitizer|unavailable here (Device not supported)|0")
    fi
  else
    STEPS+=("sanitizer|unavailable (no compute-sanitizer)|0")
  fi
  $PY -m torch_tk info >"$LOGS/info.txt" 2>&1
fi

# ---- summary ----------------------------------------------------------------------
TOTAL=$(($(date +%s) - T0))
printf '%s\n' "${STEPS[@]}" | $PY ci/gpu_check_summary.py "$OUT" "$TOTAL"
RC=$?
tar -C "$OUT" -czf "$OUT/logs.tar.gz" logs && rm -rf "$LOGS"
exit $RC
