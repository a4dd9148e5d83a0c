"""Run-time specs compile for the running CPU alone (tk.h, TK_EMIT_CPU_*):
the C carries only the bodies that CPU runs, the narrow body's tiles are
sized for its registers, and the kernels give the reference's values on
contiguous and strided tensors, also when the compiler targets less than
the CPU has."""
import os
import re
import subprocess
import sys

import pytest
import torch

import torch_tk

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPECS = [os.path.join(ROOT, d, f) for d in ("ops", "tests/specs", "examples/specs")
         for f in sorted(os.listdir(os.path.join(ROOT, d))) if f.endswith(".tk")]
BODY = re.compile(r"^TK_BODY void tk_\w+?(_wbody|_mbody|_body)\(", re.M)

pytestmark = pytest.mark.usefixtures("poisoned_outputs")


def emit(tkc, *args):
    r = subprocess.run([tkc, "emit-c", *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def cpu_flags():
    """This CPU's feature flags (/proc/cpuinfo), read independently of tk."""
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def running_cpu():
    flags = cpu_flags()
    if "avx512f" in flags:
        return "avx512"
    return "avx2" if {"avx2", "fma"} <= flags else "base"


@pytest.mark.parametrize("cpu", ["base", "avx2", "avx512"])
def test_only_the_bodies_that_cpu_runs(tkc, cpu):
    """Every spec: with --cpu, the wide body only for AVX-512, the mid one
    only for AVX2, each where the kernel has one at all; no run-time choice."""
    for spec in SPECS:
        every = emit(tkc, spec)
        one = emit(tkc, "--cpu", cpu, spec)
        has = set(BODY.findall(every))
        kept = set(BODY.findall(one))
        want = {"_body"} & has | ({"_wbody"} & has if cpu == "avx512" else set()) | \
            ({"_mbody"} & has if cpu == "avx2" else set())
        assert kept == want, (spec, cpu, kept, has)
        assert "TK_WIDE_DISPATCH" not in one and "tk_cpu_wide()" not in one, spec
        if has == {"_body"} and cpu != "avx2":   # no vector bodies (nor AVX2 tiles): as for every CPU
            assert one == every, spec


def test_one_cpu_files_are_smaller(tkc):
    """ops/rwkv_forward.tk, float32: the file for one CPU leaves out the
    other CPUs' bodies: the AVX2 and AVX-512 files each add their vector
    body to the narrow one, and together hold no more than the file for
    every CPU (bench/results/2026-12-06-cpu-vector-loops.txt has the
    counts)."""
    spec = os.path.join(ROOT, "ops", "rwkv_forward.tk")
    every = emit(tkc, "--dtype", "f32", spec).count("\n")
    lines = {cpu: emit(tkc, "--dtype", "f32", "--cpu", cpu, spec).count("\n") for cpu in ("base", "avx2", "avx512")}
    assert lines["base"] < lines["avx2"] < every / 2, (lines, every)
    assert lines["avx2"] < lines["avx512"] < every, (lines, every)
    assert lines["avx2"] + lines["avx512"] - lines["base"] <= every, (lines, every)


def test_narrow_tiles_for_avx2_registers(tkc):
    """The narrow body of rwkv_forward, which runs as AVX2 or older code
    (beside vector bodies, or for an AVX2 CPU): 4 rows (a row's 16 lanes are
    2 ymm registers); compiled for an AVX-512 CPU, 8."""
    spec = os.path.join(ROOT, "ops", "rwkv_forward.tk")

    def narrow(*args):
        r = subprocess.run([tkc, "plan", "--dtype", "f32", *args, spec], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        first = r.stdout.split("plan rwkv_backward_w")[0]
        return first, first.split("body narrow")[1].splitlines()[1]

    text, line = narrow()
    assert "x 4 rows along b" in line, line
    text, line = narrow("--cpu", "avx2")
    assert "x 4 rows along b" in line, line
    assert "compiled for the running CPU alone (AVX2 and FMA" in text
    assert "body mid" in text and "body wide" not in text
    text, line = narrow("--cpu", "avx512")
    assert "x 8 rows along b" in line and "body wide" in text and "body mid" not in text


def test_narrow_rows_follow_the_code_it_runs_as(tkc):
    """Every spec's CPU plans: the narrow body of a kernel with vector bodies
    (x86-64-v3 and baseline clones only) takes at most 4 group rows; one
    without them (also an x86-64-v4 clone) up to 8, as before."""
    seen = set()
    for spec in SPECS:
        r = subprocess.run([tkc, "plan", spec], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        for plan in r.stdout.split("\nplan "):
            if "body narrow" not in plan:
                continue
            m = re.search(r"x (\d+) rows along", plan.split("body narrow")[1].splitlines()[1])
            if not m:
                continue
            vector = "no explicit-vector bodies" not in plan
            rows = int(m.group(1))
            assert rows <= (4 if vector else 8), (spec, plan[:200])
            seen.add((vector, rows))
    assert (True, 4) in seen and (False, 8) in seen, seen


def test_usage_errors(tkc):
    spec = os.path.join(ROOT, "ops", "rwkv_forward.tk")
    for args in (["--cpu", "sse9"], ["--cpu"]):
        r = subprocess.run([tkc, "emit-c", *args, spec], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "usage" in r.stderr, r
    r = subprocess.run([tkc, "emit-c", "--dtype", "i8", spec], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "has no variant i8" in r.stderr, r


def rwkv_reference(w, k, eps):
    B, C, T = k.shape
    pad = torch.nn.functional.pad(k.double(), (T - 1, 0))
    return eps + torch.nn.functional.conv1d(pad, w.double().unsqueeze(1), groups=C)


RWKV_COPY = open(os.path.join(ROOT, "ops", "rwkv_forward.tk"), encoding="utf-8").read().replace("rwkv_", "onecpu_rwkv_")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_runtime_rwkv_copy_contiguous_and_strided(dtype):
    """A run-time copy of rwkv_forward (compiled for this CPU): contiguous
    calls (the vector body on AVX2 / AVX-512) and strided ones (the narrow
    body with this CPU's rows), against the float64 convolution, for sizes
    around the tiles (B not a multiple of 4 or 8, T not of 16)."""
    op = torch_tk.kernel(RWKV_COPY)
    g = torch.Generator().manual_seed(7)
    for B, C, T in ((1, 3, 5), (5, 4, 37), (9, 6, 50), (8, 2, 64)):
        w = torch.randn(C, T, dtype=dtype, generator=g)
        k = torch.randn(B, C, T, dtype=dtype, generator=g)
        ks = torch.randn(B, C, 2 * T, dtype=dtype, generator=g)[..., ::2]
        ks.copy_(k)
        want = rwkv_reference(w, k, 0.5)
        tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(op(w, k, 0.5).double(), want, **tol)
        torch.testing.assert_close(op(w, ks, 0.5).double(), want, **tol)
        wt = torch.randn(T, C, dtype=dtype, generator=g).t()   # w strided along t
        wt.copy_(w)
        torch.testing.assert_close(op(wt, k, 0.5).double(), want, **tol)


CHILD = r"""
import sys, torch, torch_tk
sys.path.insert(0, sys.argv[1])
from test_one_cpu import RWKV_COPY, rwkv_reference
op = torch_tk.kernel(RWKV_COPY)
g = torch.Generator().manual_seed(3)
w, k = torch.randn(6, 40, generator=g), torch.randn(5, 6, 40, generator=g)
ks = torch.randn(5, 6, 80, generator=g)[..., ::2]
ks.copy_(k)
want = rwkv_reference(w, k, 0.25)
torch.testing.assert_close(op(w, k, 0.25).double(), want, rtol=1e-4, atol=1e-4)
torch.testing.assert_close(op(w, ks, 0.25).double(), want, rtol=1e-4, atol=1e-4)
print("ok")
"""


def test_compiler_targeting_less_than_the_cpu(tmp_path):
    """tk prints the bodies of the CPU it runs on; a compiler that targets
    less (here x86-64-v2, no AVX2) leaves the vector body out through the
    guards (TK_VXH, TK_VXW) and the narrow one serves every call."""
    if running_cpu() == "base" or os.uname().machine != "x86_64":
        pytest.skip("needs an x86-64 CPU with AVX2 (then there is a vector body to leave out)")
    wrapper = tmp_path / "cc-v2"
    wrapper.write_text('#!/bin/sh\nfor a in "$@"; do shift; [ "$a" = "-march=native" ] && a=-march=x86-64-v2; '
                       'set -- "$@" "$a"; done\nexec cc "$@"\n')
    wrapper.chmod(0o755)
    env = dict(os.environ, TK_CACHE_DIR=str(tmp_path / "cache"), TK_CC=str(wrapper), TK_DEBUG="1")
    r = subprocess.run([sys.executable, "-c", CHILD, os.path.dirname(os.path.abspath(__file__))],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-4000:]
    assert r.stdout.strip() == "ok"
    assert "-march=native" in r.stderr   # tk's command: the wrapper changed it
    vec = "_vx0" if running_cpu() == "avx512" else "_vy0"
    assert vec + "(" in r.stderr   # the vector loops were printed ...
    (so,) = [p for p in (tmp_path / "cache" / "cpu").iterdir() if p.suffix == ".so"]
    assert vec.encode() not in so.read_bytes()   # ... and left out by the compiler
    # compiled for this CPU (this process's kernel, in its cache): there
    op = torch_tk.kernel(RWKV_COPY)
    op(torch.randn(2, 8), torch.randn(1, 2, 8), 0.25)
    from torch_tk import _capi
    cache = _capi.lib().tk_shim_cc_cache_dir().decode()
    native = [p for p in os.listdir(cache) if p.endswith(".so")]
    native = [open(os.path.join(cache, p), "rb").read() for p in native]
    native = [b for b in native if b"tk_onecpu_rwkv_forward__f32" in b]
    assert native and all(vec.encode() in b for b in native)
