"""The GPU path's parts that need no GPU: `python -m torch_tk info` and
`precompile` (NVRTC only), TK_DEBUG, the CUDA dispatch key, the errors when
NVRTC is missing. GPU execution itself is tests/python/test_cuda.py.

Each command runs in a fresh process with its own TK_CACHE_DIR.
"""

import ctypes
import os
import re
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_tk(lib_path, cache_dir, *args, **env_extra):
    env = dict(os.environ)
    env.update(PYTHONPATH=os.path.join(ROOT, "python"), TK_LIBRARY=lib_path, TK_CACHE_DIR=str(cache_dir))
    env.pop("TK_DEBUG", None)
    env.update(env_extra)
    return subprocess.run([sys.executable, "-m", "torch_tk", *args], env=env, capture_output=True,
                          text=True, timeout=300)


def nvrtc_version(lib_path, tmp_path):
    """(major, minor) of the NVRTC libtk loads, from `torch_tk info`."""
    r = run_tk(lib_path, tmp_path, "info")
    m = re.search(r"\(NVRTC (\d+)\.(\d+)\)", r.stdout)
    assert m, r.stdout
    return int(m.group(1)), int(m.group(2))


def cached_files(cache_dir):
    return sorted(f for f in os.listdir(cache_dir) if f.endswith(".tkbin")) if os.path.isdir(cache_dir) else []


@pytest.mark.parametrize("op", ["brick_pad", "rwkv_forward"])
def test_every_op_has_a_cuda_kernel(op):
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"tk::{op}", "CUDA")


def test_info_precompile_debug_and_damaged_entries(lib_path, tmp_path):
    """One cache folder through its life (each step a fresh process), with
    brick_pad_backward's kernels (small: a cache entry lives alike for any)."""
    r = run_tk(lib_path, tmp_path, "info")
    assert r.returncode == 0, r.stderr
    assert f"libtk: {lib_path}" in r.stdout
    assert "nvrtc: " in r.stdout and "(NVRTC 1" in r.stdout, r.stdout  # test_nvrtc requires NVRTC too
    assert "driver: " in r.stdout
    assert f"cache: {tmp_path}" in r.stdout
    assert "cached kernels: none" in r.stdout or "cached kernels: 0," in r.stdout

    r = run_tk(lib_path, tmp_path, "precompile", "--arch", "sm_90", "--arch", "8.0", "--op", "brick_pad_backward")
    assert r.returncode == 0, r.stderr
    assert "[########################]   8/8" in r.stderr
    assert "8 compiled, 0 already cached, 0 failed" in r.stderr
    assert len(cached_files(tmp_path)) == 8  # 4 dtypes x 2 archs
    assert "---- tk_brick_pad_backward" not in r.stderr  # TK_DEBUG unset: quiet

    r = run_tk(lib_path, tmp_path, "precompile", "--arch", "sm_90", "--op", "brick_pad_backward")
    assert r.returncode == 0 and "0 compiled, 4 already cached, 0 failed" in r.stderr, r.stderr

    sm90 = [n for n in cached_files(tmp_path) if b" sm_90" in (tmp_path / n).read_bytes()[96:160]]
    sm80 = [n for n in cached_files(tmp_path) if n not in sm90]
    assert len(sm90) == len(sm80) == 4
    for i, name in enumerate(sm90 + sm80[:1]):
        path = tmp_path / name
        data = bytearray(path.read_bytes())
        if i % 2:
            data[-100] ^= 0x40  # corrupted
        else:
            del data[-10:]  # truncated
        path.write_bytes(bytes(data))
    r = run_tk(lib_path, tmp_path, "precompile", "--arch", "sm_90", "--op", "brick_pad_backward", TK_DEBUG="1")
    assert r.returncode == 0 and "4 compiled, 0 already cached" in r.stderr, r.stderr
    assert "rejected: " in r.stderr  # TK_DEBUG says why a file was not used
    assert "---- tk_brick_pad_backward__f32.cu ----" in r.stderr
    assert 'extern "C" __global__ void tk_brick_pad_backward__f32(const tk_kargs a)' in r.stderr
    assert "options: --std=c++17 -default-device -arch=sm_90" in r.stderr

    r = run_tk(lib_path, tmp_path, "info")
    assert "cached kernels: 8" in r.stdout and "tk_brick_pad_backward__f32 sm_90" in r.stdout, r.stdout
    assert r.stdout.count("(damaged)") == 1, r.stdout  # the truncated sm_80 file, not recompiled


def test_missing_nvrtc_is_a_clear_error(lib_path, tmp_path):
    r = run_tk(lib_path, tmp_path, "precompile", "--arch", "sm_90", "--op", "brick_pad",
               TK_NVRTC_PATH="/nonexistent/libnvrtc.so.13")
    assert r.returncode == 1
    assert "tk.brick_pad: cannot compile for sm_90: libnvrtc.so not found (TK_NVRTC_PATH=/nonexistent" in r.stderr


@pytest.mark.parametrize("text, sm", [("sm_90", 90), ("compute_80", 80), ("86", 86), ("9.0", 90), ("10.0", 100)])
def test_parse_arch(text, sm):
    from torch_tk.gpu import parse_arch

    assert parse_arch(text) == sm


@pytest.mark.parametrize("text", ["foo", "sm_", "9.x", "sm_90a"])
def test_parse_arch_rejects(text):
    from torch_tk.gpu import parse_arch

    with pytest.raises(ValueError, match="not a CUDA arch"):
        parse_arch(text)


def test_gpu_bench_dry_run_on_cpu(lib_path, tmp_path):
    """bench/gpu_bench.py (the device check's benchmark) runs end to end on the
    CPU at small sizes: every case is built, checked, timed and summarised
    against its target, so a lent GPU's few minutes are not lost to a script
    error. (The figures themselves mean nothing here.)"""
    import json

    env = dict(os.environ)
    env.update(PYTHONPATH=os.path.join(ROOT, "python"), TK_LIBRARY=lib_path, TK_CACHE_DIR=str(tmp_path))
    out = tmp_path / "gpu_bench.json"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu_bench.py"), "--device", "cpu", "--small",
                        "--repeat", "3", "--json", str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(out.read_text())
    assert res["ok"] and res["small"]
    cases = {(row["op"], row["impl"]) for row in res["results"]}
    for case in [("brick_pad", "tk"), ("brick_pad", "torch_pad (seed)"), ("device copy", "dst.copy_(src)"),
                 ("rwkv_forward", "tk"), ("rwkv_forward", "F.conv1d (tf32 off)"), ("rwkv_backward", "tk (autograd)"),
                 ("rwkv_backward", "F.conv1d autograd (tf32 off)"), ("rwkv_backward", "tk rwkv_backward_w alone"),
                 ("rwkv_backward", "tk rwkv_backward_k alone"), ("rwkv_forward", "tk bfloat16"),
                 ("rwkv_forward", "tk float16"), ("per call", "tk rwkv_forward (8 el.)"),
                 ("softmax 64x128", "tk"), ("softmax 64x128", "tk coop=32"), ("layernorm", "tk coop=32"),
                 ("layernorm, no weight/bias", "tk (None)"),
                 ("adamw step", "tk adamw_"), ("selective scan", "tk"), ("selective scan fwd+bwd", "tk"),
                 ("selective scan fwd+bwd", "torch loop over t"), ("bias_gelu fwd+bwd", "tk backward auto"),
                 ("dropout fwd+bwd", "tk backward auto"), ("dropout fwd+bwd", "tk backward by hand")]:
        assert case in cases, case
    assert all(row["median_ms"] > 0 for row in res["results"])
    summary = "\n".join(res["summary"])
    for target in ("<= 40 us", ">= 85%", ">= 300x", "<= 0.30 ms", "<= 0.70 ms", "bfloat16", "float16", "per call",
                   "layernorm: tk coop=32 (a warp a row)", "selective scan fwd+bwd: tk",
                   "bias_gelu fwd+bwd: tk backward auto", "dropout fwd+bwd: tk backward auto"):
        assert target in summary, target
    assert "bit-equal to torch_pad" in r.stdout


def test_gpu_static_report_shows_the_tiles(lib_path, tmp_path):
    """bench/gpu_static.py compiles the CUDA kernels with NVRTC (no GPU) and
    reads their hot loops. The tiled rwkv kernels must feed several FMAs from
    each global load (the plain, one-element-a-thread kernels: two loads per
    FMA), with no spills; brick_pad compiles without spills, as chunks."""
    tkc = os.path.join(os.path.dirname(lib_path), "tkc")
    if not os.path.exists(tkc):
        pytest.fail(f"no tkc next to {lib_path}: build the project first")
    out = tmp_path / "static.json"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu_static.py"), "--tkc", tkc, "--plain",
                        "--json", str(out), os.path.join(ROOT, "ops", "rwkv_forward.tk"),
                        os.path.join(ROOT, "ops", "brick_pad.tk")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    import json
    report = json.loads(out.read_text())
    assert report["nvdisasm"], "nvdisasm not found: make setup installs nvidia-cuda-nvdisasm"
    rows = {k["kernel"]: k for k in report["kernels"]}
    for op in ("rwkv_forward", "rwkv_backward_k", "rwkv_backward_w"):
        tiled, plain = rows[f"tk_{op}__f32"], rows[f"tk_{op}__f32 (plain)"]
        h, p = tiled["hot_loop"], plain["hot_loop"]
        assert h["fma"] >= 4 * h["ld.global"], (op, h)
        assert p["fma"] <= p["ld.global"], (op, p)
        assert tiled["spill_st"] == 0 and tiled["spill_ld"] == 0 and h.get("local", 0) == 0, (op, tiled)
        # in SASS (nvdisasm, installed by make setup): the sliding window's
        # rounds leave FFMA >= 70% of the hot loop's instructions (shifting
        # the window's registers every step: 52%); the plain kernel, ~10%
        s, sp = tiled["sass_hot_loop"], plain["sass_hot_loop"]
        assert s and s["fma_share"] >= 0.70 and s["fma"] >= 128, (op, s)
        assert sp and sp["fma_share"] < 0.3, (op, sp)
    # the rounds load their streams (k[b, c, u], grad_out[b, c, t2]) 16 bytes
    # at a time: 8 of the forward's and backward_k's 24 loads a round of 16
    # steps (48, all of 4 bytes, before)
    for op in ("rwkv_forward", "rwkv_backward_k", "rwkv_backward_w"):
        s = rows[f"tk_{op}__f32"]["sass_hot_loop"]
        assert s["ldg128"] >= 4 and s["ldg"] <= 32, (op, s)
    # rwkv_backward_w's schedule line splits its batch sum over 8 threads a
    # tile: a butterfly of warp shuffles (3 steps x 16 lanes, in each copy of
    # the loop); the other kernels have none
    assert rows["tk_rwkv_backward_w__f32"]["sass_shfl"] >= 2 * 3 * 16, rows["tk_rwkv_backward_w__f32"]
    assert not rows["tk_rwkv_forward__f32"]["sass_shfl"] and not rows["tk_rwkv_backward_k__f32"]["sass_shfl"]
    assert not rows["tk_rwkv_backward_w__f32 (plain)"]["sass_shfl"]
    for op in ("rwkv_forward", "rwkv_backward_k", "rwkv_backward_w"):
        assert rows[f"tk_{op}__f32"]["sass_hot_loop"]["local"] == 0, op
    assert rows["tk_brick_pad__f32"]["regs"] > 0 and rows["tk_brick_pad__f32"].get("spill_st", 0) == 0
    # brick_pad runs as chunks of 8 float32: one block of straight-line code
    # per chunk, 8 loads, two 16-byte stores, no 64-bit division, and few
    # instructions an element (one element a thread took ~200)
    c = rows["tk_brick_pad__f32"]["chunk"]
    assert c and c["elements"] == 8 and c["st.v4"] == 2 and c["ld.global"] == 8, c
    assert c.get("div64", 0) == 0 and c["per_element"] <= 16, c
    assert rows["tk_brick_pad__f32 (plain)"]["chunk"] is None
    # the whole iteration in SASS, loop and index work included, in both
    # copies that gather stores (unit strides; the seed's strided tile):
    # 351 instructions a chunk (44 an element) before the chunk's
    # positions were stepped instead of divided, the spelled-out remainder
    # x2 became the stepped one and // TH, // TW multiplies; 184 (23) after
    paths = c.get("sass_path")
    assert paths and len(paths) == 2 and all(p <= 8 * 26 for p in paths), c
    assert "GPU chunks" in r.stdout
    assert "tk_rwkv_forward__f32" in r.stdout


def test_scratch_specs_compile_for_the_gpu(lib_path, tmp_path):
    """The ops with scratch tensors (the selective scan and its backward ops,
    tests/specs/scratch.tk) compile with NVRTC for the GPU (no GPU needed),
    every kernel without spills; test_variants runs the same CUDA sources on
    the CPU, and tests/python/test_selective_scan.py runs them on a GPU."""
    tkc = os.path.join(os.path.dirname(lib_path), "tkc")
    if not os.path.exists(tkc):
        pytest.fail(f"no tkc next to {lib_path}: build the project first")
    out = tmp_path / "static.json"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu_static.py"), "--tkc", tkc, "--only", "f32",
                        "--json", str(out), os.path.join(ROOT, "examples", "specs", "selective_scan.tk"),
                        os.path.join(ROOT, "tests", "specs", "scratch.tk")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    import json
    rows = {k["kernel"]: k for k in json.loads(out.read_text())["kernels"]}
    for op in ("selective_scan", "selective_scan_backward_ue", "selective_scan_backward_bc", "scratch_softmax",
               "scratch_state", "scratch_flat"):
        k = rows[f"tk_{op}__f32"]
        assert k["regs"] > 0 and k.get("spill_st", 0) == 0 and k.get("spill_ld", 0) == 0, k


def test_gpu_static_register_cap(lib_path, tmp_path):
    """TK_CUDA_TUNE=regs=128 (schedule regs=128) emits __maxnreg__(128): ptxas
    keeps rwkv_forward f32 at 128 registers a thread (16 warps an SM in
    blocks of 256, against 12 at its uncapped 166-168), spilling outside its
    hot loop only."""
    tkc = os.path.join(os.path.dirname(lib_path), "tkc")
    if not os.path.exists(tkc):
        pytest.fail(f"no tkc next to {lib_path}: build the project first")
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        import gpu_static
        major, minor = ctypes.c_int(), ctypes.c_int()
        gpu_static.Nvrtc(gpu_static.find_nvrtc()).lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    finally:
        sys.path.pop(0)
    if (major.value, minor.value) < (12, 4):
        pytest.skip(f"__maxnreg__ needs NVRTC 12.4 or later; bench/gpu_static.py found {major.value}.{minor.value}")
    out = tmp_path / "static.json"
    env = dict(os.environ, TK_CUDA_TUNE="regs=128")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu_static.py"), "--tkc", tkc,
                        "--json", str(out), os.path.join(ROOT, "ops", "rwkv_forward.tk")],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr
    import json
    rows = {k["kernel"]: k for k in json.loads(out.read_text())["kernels"]}
    for op in ("rwkv_forward", "rwkv_backward_k", "rwkv_backward_w"):
        assert rows[f"tk_{op}__f32"]["regs"] <= 128, rows[f"tk_{op}__f32"]
    fwd = rows["tk_rwkv_forward__f32"]
    assert fwd["sass_hot_loop"]["local"] == 0 and fwd["sass_hot_loop"]["fma_share"] >= 0.85, fwd


def test_cuda_tune_shapes_and_errors(lib_path, tmp_path):
    """TK_CUDA_TUNE (compiler/schedule.c) changes the CUDA tile shape the
    emitter writes, NVRTC compiles the result, and a malformed value is an
    error naming the variable, from tkc and from the library."""
    tkc = os.path.join(os.path.dirname(lib_path), "tkc")
    if not os.path.exists(tkc):
        pytest.fail(f"no tkc next to {lib_path}: build the project first")
    spec = os.path.join(ROOT, "ops", "rwkv_forward.tk")

    def emit(tune):
        env = dict(os.environ)
        env.pop("TK_CUDA_TUNE", None)
        if tune is not None:
            env["TK_CUDA_TUNE"] = tune
        return subprocess.run([tkc, "emit-cuda", spec], env=env, capture_output=True, text=True, timeout=120)

    plain = emit(None)
    assert plain.returncode == 0, plain.stderr
    # the default: 16 lanes x 2 batch rows a tile, 4 rows a warp, and a
    # thread takes tile position p and its mirror image n - 1 - p (the loops'
    # bounds move with t, so a tile's work does: mirror_plan)
    assert "tk_ntile = (n_t + 15) / 16;" in plain.stdout and "tk_ngroup = (n_b + 1) / 2;" in plain.stdout
    assert "lin / 4 / tk_npair * 4 + lin % 4;" in plain.stdout and "TK_CUDA_TUNE" not in plain.stdout
    assert plain.stdout.count("tk_ntile - 1 - tk_pp") == 24   # 3 ops x 4 dtypes x 2 copies (unit strides, any)
    one = emit("tiles=1")
    assert one.returncode == 0 and "tk_npair" not in one.stdout and "tiles=1" in one.stdout, one.stderr
    assert "lin / 4 / tk_ntile * 4 + lin % 4;" in one.stdout
    assert "__maxnreg__" not in plain.stdout   # registers: as many as ptxas likes, unless regs= caps them
    capped = emit("regs=128")
    assert capped.returncode == 0 and capped.stdout.count("__global__ void __maxnreg__(128) tk_rwkv_") == 12
    tuned = emit("lanes=8,rows=4,warp_rows=2")
    assert tuned.returncode == 0, tuned.stderr
    assert "TK_CUDA_TUNE: lanes=8 rows=4 warp_rows=2 chunk=0" in tuned.stdout
    assert "tk_ntile = (n_t + 7) / 8;" in tuned.stdout and "tk_ngroup = (n_b + 3) / 4;" in tuned.stdout
    assert "lin / 2 / tk_npair * 2 + lin % 2;" in tuned.stdout
    assert "(n_t + 15) / 16" not in tuned.stdout
    assert emit("").stdout == plain.stdout   # empty: the defaults
    # streams (k[b, c, u] in rounds): 16-byte loads by default, 8 or 4 with ldg
    assert "__ldg((const tk_v16 *)&t_k[" in plain.stdout and "tk_pk" in plain.stdout
    ldg8, ldg4 = emit("ldg=8"), emit("ldg=4")
    assert "__ldg((const tk_v8 *)&t_k[" in ldg8.stdout and "tk_v16 *)&t_k" not in ldg8.stdout
    f32 = ldg4.stdout[ldg4.stdout.index("tk_rwkv_forward__f32("):ldg4.stdout.index("tk_rwkv_forward__f64(")]
    assert "tk_pk" not in f32 and "__ldg((const tk_u32 *)&t_k[" in ldg4.stdout   # f32 one by one; bf16 in pairs
    for bad in ("lanes=3", "lanes=32", "rows=0", "lanes=", "lanes", "foo=1", "rows=2,", "lanes=16x",
                "chunk=256", "warp_rows=64", "lanes=8;rows=2", "split=64", "ldg=2", "ldg=32", "tiles=0", "tiles=3", "regs=100", "regs=256",
                "regs=0"):
        r = emit(bad)
        assert r.returncode != 0 and "TK_CUDA_TUNE" in r.stderr, (bad, r.stderr)

    # an op's schedule line sets the shape; TK_CUDA_TUNE overrides it item by item
    sched = tmp_path / "sched.tk"
    sched.write_text("op f(w: float[C, T], k: w.dtype[B, C, T]) -> out: k.dtype[B, C, T]:\n"
                     "    schedule lanes=8, warp_rows=16\n"
                     "    for b, c, t in out:\n"
                     "        s = 0.0\n"
                     "        for u in range(t + 1):\n"
                     "            s += w[c, T - 1 - t + u] * k[b, c, u]\n"
                     "        out[b, c, t] = s\n")
    spec = str(sched)
    r = emit(None)
    assert r.returncode == 0, r.stderr
    assert "tk_ntile = (n_t + 7) / 8;" in r.stdout and "lin / 16 / tk_npair" in r.stdout
    assert "tk_ngroup = (n_b + 1) / 2;" in r.stdout   # rows: the default
    r = emit("warp_rows=2,rows=4")
    assert r.returncode == 0, r.stderr
    assert "tk_ntile = (n_t + 7) / 8;" in r.stdout and "lin / 2 / tk_npair" in r.stdout
    assert "tk_ngroup = (n_b + 3) / 4;" in r.stdout

    # through the library: a tuned shape compiles with NVRTC (a new cache
    # entry: the source differs), a malformed one fails with the message
    r = run_tk(lib_path, tmp_path, "precompile", "--arch", "sm_90", "--op", "rwkv_forward",
               TK_CUDA_TUNE="lanes=8,rows=1,warp_rows=32")
    assert r.returncode == 0 and "4 compiled, 0 already cached, 0 failed" in r.stderr, r.stderr
    r = run_tk(lib_path, tmp_path, "precompile", "--arch", "sm_90", "--op", "rwkv_forward")
    assert r.returncode == 0 and "4 compiled, 0 already cached, 0 failed" in r.stderr, r.stderr
    # 4- and 8-byte streams, splits, one tile a thread, a register cap (__maxnreg__: NVRTC 12.4 or later)
    capped = "ldg=4,split=2,regs=128" if nvrtc_version(lib_path, tmp_path) >= (12, 4) else "ldg=4,split=2"
    for tune in (capped, "ldg=8,split=32,tiles=1"):
        r = run_tk(lib_path, tmp_path, "precompile", "--arch", "sm_80", "--op", "rwkv_backward_w", TK_CUDA_TUNE=tune)
        assert r.returncode == 0 and "4 compiled, 0 already cached, 0 failed" in r.stderr, (tune, r.stderr)
    r = run_tk(lib_path, tmp_path, "precompile", "--arch", "sm_90", "--op", "brick_pad", TK_CUDA_TUNE="chunk=7")
    assert r.returncode != 0 and "TK_CUDA_TUNE" in r.stderr, r.stderr


def test_gpu_tune_dry_run_on_cpu(lib_path, tmp_path):
    """ci/gpu_tune.py on the CPU at small sizes (TK_TUNE_DEVICE=cpu, where
    the CUDA shapes change nothing): every case is checked against float64
    and reported, so a script error cannot waste a lent GPU."""
    out = tmp_path / "tune.json"
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), TK_LIBRARY=lib_path,
               TK_CACHE_DIR=str(tmp_path / "cache"), TK_TUNE_DEVICE="cpu")
    env.pop("TK_CUDA_TUNE", None)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "ci", "gpu_tune.py"), "--quick", "--small", "--repeat", "2",
                        "--json", str(out)], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    import json
    report = json.loads(out.read_text())
    assert report["complete"]
    kernels = {(x["kernel"], x["tune"]) for x in report["results"] if x["ok"]}
    for k in ("rwkv_forward f32", "rwkv_forward bf16", "rwkv_backward_w f32", "rwkv_backward_k f32"):
        assert (k, "default") in kernels and (k, "lanes=16,rows=4,warp_rows=8") in kernels, (k, kernels)
    assert ("brick_pad f32", "chunk=16") in kernels
    for k in ("softmax f32 64x100", "softmax f32 4x1000", "layernorm f32 64x100"):   # row loops: coop vs a thread a row
        assert (k, "default") in kernels and (k, "coop=32") in kernels, (k, kernels)
    for k in ("layernorm_backward_wb f32 64x100", "sum_layernorm_backward f32 64x100"):   # sums: parts vs one thread
        assert (k, "default") in kernels and (k, "parts=256") in kernels, (k, kernels)
    assert "[tune] rwkv_forward f32:" in r.stdout


def test_warp_model_mirrored_tiles_balance_blocks():
    """bench/gpu_warp_model.py (no GPU): with one tile a thread, a block's
    warps hold tiles from both ends of a row and idle; mirrored tiles (the
    emitter's tiles=2: a pass over positions p, then one over their mirror
    images) even out a block's warps, not the threads of a warp, and lower
    the latency-bound time. Its L1 table: 16-byte stream loads halve a
    round's wavefronts or better."""
    def model(*args):
        r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu_warp_model.py"), *args],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        rows = {}
        for line in r.stdout.splitlines():
            m = re.search(r"a warp takes (.*?)\s*: warps busy\s+(\d+)%, blocks busy\s+(\d+)%.*"
                          r"latency-bound ([\d.]+) ms", line)
            if m:
                rows[m.group(1)] = (int(m.group(2)), int(m.group(3)), float(m.group(4)))
        return rows["4 rows x 8 positions"], rows["4 rows x 8 positions, mirrored"], r.stdout

    one, mirrored, out = model()                         # B = 32, C = T = 768: 48 tiles a row
    assert one[1] < 60 and mirrored[1] >= 85, (one, mirrored)        # blocks busy
    assert abs(one[0] - mirrored[0]) <= 2, (one, mirrored)           # warps busy: the same
    assert mirrored[2] < 0.75 * one[2], (one, mirrored)              # latency-bound time
    one, mirrored, _ = model("--T", "400")               # 25 tiles a row: the middle one once
    assert mirrored[1] > one[1] + 5 and mirrored[2] < one[2], (one, mirrored)
    wf = {m.group(1): int(m.group(2)) for m in re.finditer(r"(rwkv_\w+, [^\n]*?)\s+\d+\s+(\d+)\s", out)}
    assert wf["rwkv_backward_k, 16-byte stream loads (now)"] * 3 == wf["rwkv_backward_k, 4-byte stream loads (as timed)"]
    assert wf["rwkv_forward, 16-byte stream loads (now)"] * 2 == wf["rwkv_forward, 4-byte stream loads (as timed)"]


def test_check_tune_parses_as_the_library_does():
    """torch_tk.gpu.check_tune: TK_CUDA_TUNE's syntax checked without a GPU
    or NVRTC (ci/gpu_tune.py's dry run parses every shape with it)."""
    from torch_tk.gpu import check_tune
    for good in ("", "lanes=8,rows=2,warp_rows=16", "chunk=128", "regs=64,coop=8,parts=16"):
        check_tune(good)
    for bad in ("lanes=3", "foo=1", "rows=2,", "regs=100", "lanes=8;rows=2"):
        with pytest.raises(ValueError, match=re.escape(f'TK_CUDA_TUNE="{bad}": expected key=value items')):
            check_tune(bad)
    with pytest.raises(TypeError, match="check_tune: the value must be a str, got int"):
        check_tune(8)
