#!/usr/bin/env bash
# ci/gpu-prebuild.sh - prepares what ci/gpu-check.sh carries to the lent GPU
# machine, so its short lease is not spent building: libtk and tkc built here
# against the torch the device runs (its wheel, unpacked only for its headers
# and libraries: libtk links libtorch, libtorch_cpu and c10, none of torch's
# CUDA libraries), in build-dev/, and Taichi's wheels for the device's Python
# in .whl/ (the side-by-side bench's Taichi rows). gpu-check.sh checks that the
# carried libtk loads and runs there, and builds it there otherwise.
#   bash ci/gpu-prebuild.sh [TORCH_VERSION [PYTHON_VERSION]]   (default 2.11.0 3.12)
# then, with the device tool: carry build-dev/libtk.so, build-dev/tkc,
# build-dev/torch_version.txt and .whl; run `bash ci/gpu-check.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH=${1:-2.11.0}
PYV=${2:-3.12}
CP=cp${PYV/./}
DL=${TK_PREBUILD_DIR:-/tmp/tk-prebuild}
PLAT=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64)
get() {   # get DIR NAME==VERSION: a binary wheel for the device's Python
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYV" --implementation cp \
    "${PLAT[@]}" -d "$1" "$2"
}
mkdir -p "$DL/wheel" .whl
EXCLUDE=$(git rev-parse --git-path info/exclude)   # .git may be a file (worktrees)
mkdir -p "$(dirname "$EXCLUDE")"
grep -qx '/.whl/' "$EXCLUDE" 2>/dev/null || echo '/.whl/' >> "$EXCLUDE"
get "$DL/wheel" "torch==$TORCH"
whl=$(ls "$DL"/wheel/torch-"$TORCH"-"$CP"-*.whl | head -1)
TDIR=$DL/torch-$TORCH-$CP      # one unpacked torch per version
if [ ! -f "$TDIR/torch/share/cmake/Torch/TorchConfig.cmake" ]; then
  rm -rf "$TDIR"; mkdir -p "$TDIR"
  (cd "$TDIR" && unzip -q "$whl" 'torch/lib/*' 'torch/include/*' 'torch/share/*' 'torch/version.py')
fi
NVRTC=$(python3 -c 'import glob, site
c = [f for p in site.getsitepackages() for f in sorted(glob.glob(p + "/nvidia/*/lib/libnvrtc.so*"))]
print(c[0] if c else "")')
cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DTK_WERROR=OFF -DTK_BUILD_TESTS=OFF \
  -DTorch_DIR="$TDIR/torch/share/cmake/Torch" -DCUDA_TOOLKIT_ROOT_DIR=/usr/local/cuda \
  -DCUDAToolkit_ROOT=/usr/local/cuda ${NVRTC:+"-DCUDA_nvrtc_LIBRARY=$NVRTC"} >/dev/null
cmake --build build-dev --target tk tkc
strip --strip-unneeded build-dev/libtk.so
sed -n "s/^__version__ = '\(.*\)'/\1/p" "$TDIR/torch/version.py" > build-dev/torch_version.txt
rm -f .whl/*.whl
get .whl dill==0.3.9
# Taichi's wheel is 56 MB and the device tool carries 64 MiB in all: it goes
# without its C API library, GUI assets and examples (the Python module uses
# none of them; 35 MB left)
get "$DL" taichi==1.7.4
ti=$(ls "$DL"/taichi-1.7.4-"$CP"-*.whl | head -1)
rm -rf "$DL/ti" && mkdir -p "$DL/ti"
(cd "$DL/ti" && unzip -q "$ti" && rm -rf taichi/_lib/c_api taichi-*.data taichi/assets taichi/examples &&
 zip -q -r -9 "$OLDPWD/.whl/$(basename "$ti")" .)
du -cb build-dev/libtk.so build-dev/tkc .whl/*.whl | tail -1
echo "carry: build-dev/libtk.so build-dev/tkc build-dev/torch_version.txt .whl (libtk built against torch $(cat build-dev/torch_version.txt))"
