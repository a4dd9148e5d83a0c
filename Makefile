# tk: `make test` and `make demo` work on a fresh machine (they run setup).
#   make setup   install what the build and tests need (quick when done)
#   make build   configure + build into build/ (Ninja, Release)
#   make test    setup, build, run every test through ctest, then test-asan
#                and test-fuzz (docs/reliability.md)
#   make test-asan  ASan + UBSan build in build-asan/: C tests, fuzz corpus
#                replay, Python tests under LD_PRELOAD=libasan
#   make test-fuzz  libFuzzer build (clang) in build-fuzz/: fuzz_smoke (~30 s)
#   make demo    setup, build, run `python -m torch_tk demo`
#   make golden  regenerate the golden files under tests/golden
#   make clean   remove build/
PYTHON ?= python3
BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
# The large-tensor tests (tests/python/test_large.py, ~2.2 GB each) run in CI.
export TK_SLOW_TESTS ?= 1
JOBS ?= 2
TORCH_VERSION ?= 2.13.0
PIP = $(PYTHON) -m pip install -q --disable-pip-version-check --root-user-action=ignore

PY_MODULES = pytest numpy PIL expecttest scikit_build_core ninja
# clang: libFuzzer for tests/fuzz (Debian's clang ships it)
APT_PACKAGES = libbenchmark-dev libgtest-dev clang

.PHONY: setup build test test-asan test-fuzz demo golden clean

setup:
	@$(PYTHON) -c 'import torch' 2>/dev/null || $(PIP) torch==$(TORCH_VERSION)
	@missing=$$($(PYTHON) -c 'import importlib.util as u; m={"PIL":"pillow","scikit_build_core":"scikit-build-core"}; print(" ".join(m.get(n, n) for n in "$(PY_MODULES)".split() if u.find_spec(n) is None))'); \
	if [ -n "$$missing" ]; then echo "setup: pip install $$missing"; $(PIP) $$missing; fi
	@# NVRTC is a run-time dependency only; test_nvrtc compiles every op with it.
	@$(PYTHON) -c 'import glob, site, sys; d = site.getsitepackages() + [site.getusersitepackages()]; sys.exit(not any(glob.glob(p + "/nvidia/*/lib/libnvrtc.so*") for p in d))' 2>/dev/null || \
	  ldconfig -p 2>/dev/null | grep -q 'libnvrtc\.so' || \
	  { echo "setup: pip install nvidia-cuda-nvrtc==13.*"; $(PIP) 'nvidia-cuda-nvrtc==13.*'; }
	@# nvdisasm (5 MB): bench/gpu_static.py reads the kernels' SASS; test_gpu_tools checks it.
	@$(PYTHON) -c 'import glob, site, sys; d = site.getsitepackages() + [site.getusersitepackages()]; sys.exit(not any(glob.glob(p + "/nvidia/*/bin/nvdisasm") for p in d))' 2>/dev/null || \
	  command -v nvdisasm >/dev/null || \
	  { echo "setup: pip install nvidia-cuda-nvdisasm==13.*"; $(PIP) 'nvidia-cuda-nvdisasm==13.*'; }
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "setup: apt-get install$$missing"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null 2>&1 || \
	    { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; }; \
	  else echo "setup: not root, skipping apt packages:$$missing"; fi; \
	fi

build:
	@if [ ! -f $(BUILD)/build.ninja ]; then \
	  cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE=$$(command -v $(PYTHON)); \
	fi
	cmake --build $(BUILD) -j$(JOBS)

test: setup build
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS)
	$(MAKE) --no-print-directory test-asan test-fuzz

# Debug -O1 with -fsanitize=address,undefined: the core, the shim, the
# built-in kernels and the C tests; pytest_asan loads that libtk into Python.
test-asan: setup
	@if [ ! -f $(ASAN_BUILD)/build.ninja ]; then \
	  cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTK_SANITIZE=ON -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON \
	    -DCMAKE_C_FLAGS_DEBUG="-g -O1" -DCMAKE_CXX_FLAGS_DEBUG="-g -O1" \
	    -DPython_EXECUTABLE=$$(command -v $(PYTHON)); \
	fi
	cmake --build $(ASAN_BUILD) -j$(JOBS)
	ctest --test-dir $(ASAN_BUILD) --output-on-failure -j$(JOBS)

# libFuzzer over the front end and both emitters, two processes for 30 s.
test-fuzz: setup
	@if ! command -v clang >/dev/null; then echo "test-fuzz: clang not found (make setup installs it as root): skipped"; exit 0; fi; \
	if [ ! -f $(FUZZ_BUILD)/build.ninja ]; then \
	  CC=clang cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTK_FUZZ=ON \
	    -DTK_BUILD_TORCH=OFF -DTK_WERROR=OFF -DPython_EXECUTABLE=$$(command -v $(PYTHON)) >/dev/null; \
	fi; \
	cmake --build $(FUZZ_BUILD) -j$(JOBS) --target fuzz_spec fuzz_replay && \
	ctest --test-dir $(FUZZ_BUILD) --output-on-failure -R '^fuzz_'

demo: setup build
	PYTHONPATH=python TK_LIBRARY=$(BUILD)/libtk.so $(PYTHON) -m torch_tk demo

golden: build
	$(PYTHON) tests/update_golden.py

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
