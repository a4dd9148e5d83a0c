"""Explicit-vector functions (compiler/emit_vec.c) print a lane tile's
copies once, as loops over the group rows and lane blocks (TK_UNROLL) with
the per-copy values in arrays, instead of writing the text out per copy.
Every spec's vector functions carry no per-copy names; rwkv's are a
fraction of the lines they were; and the C compilers still unroll the
loops whole and keep the accumulators in registers in the hot loop."""
import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPECS = [os.path.join(ROOT, d, f) for d in ("ops", "tests/specs", "examples/specs")
         for f in sorted(os.listdir(os.path.join(ROOT, d))) if f.endswith(".tk")]
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")
# one outlined vector loop: from its #if guard to its #endif
VECTOR_FN = re.compile(r"^#if TK_VX[HW]?\n#pragma GCC diagnostic push\n.*?^#endif\n", re.M | re.S)
FN_NAME = re.compile(r"TK_NOINLINE void (tk_\w+_v[xy]\d+)\(")


def emit(tkc, *args):
    r = subprocess.run([tkc, "emit-c", *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def vector_functions(text):
    return VECTOR_FN.findall(text)


@pytest.mark.parametrize("cpu", ["avx2", "avx512"])
def test_vector_functions_are_loops_not_copies(tkc, cpu):
    """Every spec (and the fuzz corpus) compiled for an AVX2 / AVX-512 CPU:
    no per-copy accumulators (x_<local>_<n>) or copied loads in the vector
    functions; their copies are TK_UNROLL loops over tk_g / tk_r."""
    specs = SPECS + [os.path.join(CORPUS, f) for f in sorted(os.listdir(CORPUS))]
    seen = 0
    for spec in specs:
        r = subprocess.run([tkc, "emit-c", "--cpu", cpu, spec], capture_output=True, text=True, timeout=120)
        if r.returncode != 0:   # corpus entries that are not valid specs
            assert not spec.endswith(".tk"), r.stderr
            continue
        for fn in vector_functions(r.stdout):
            seen += 1
            _, body = fn.split("{\n", 1)
            assert not re.search(r"\bx_\w+_\d+\b", body), (spec, fn[:400])
            assert not re.search(r"tk_ld\d+ = tk_ld\d+", body), spec
            assert "TK_UNROLL for (int tk_" in body, (spec, fn[:400])
            for var in ("tk_g", "tk_r"):   # the copy indices exist only inside their loops
                if var + "]" in body or var + " *" in body:
                    assert f"TK_UNROLL for (int {var} = 0;" in body, (spec, var)
    assert seen >= 10, seen   # rwkv, transforms, empty_inputs and corpus entries have them


def test_rwkv_vector_code_is_a_fraction_of_the_copies(tkc):
    """ops/rwkv_forward.tk, float32, one CPU: the vector functions (3 ops,
    7 functions for AVX2, 9 for AVX-512) were 4,429 and 6,394 lines as
    copies; as loops they are 1,140 and 1,473
    (bench/results/2026-12-06-cpu-vector-loops.txt)."""
    spec = os.path.join(ROOT, "ops", "rwkv_forward.tk")
    for cpu, limit in (("avx2", 1300), ("avx512", 1700)):
        fns = vector_functions(emit(tkc, "--dtype", "f32", "--cpu", cpu, spec))
        assert len(fns) == (7 if cpu == "avx2" else 9), len(fns)
        lines = sum(f.count("\n") for f in fns)
        assert lines <= limit, (cpu, lines)


def forward_only(tmp_path):
    """The forward op of ops/rwkv_forward.tk alone (no backward ops)."""
    text = open(os.path.join(ROOT, "ops", "rwkv_forward.tk"), encoding="utf-8").read()
    first = text.split("\n\n# dL/dw")[0]
    spec = tmp_path / "fwd.tk"
    spec.write_text("\n".join(line for line in first.splitlines() if "backward" not in line) + "\n")
    return spec


def hot_block(asm):
    """The straight-line run of a function's assembly (from a label to the
    first jump) with the most FMAs: the innermost loop of the tile."""
    blocks, cur = [], []
    for line in asm.splitlines():
        if re.match(r"^\.?L\w+:", line):
            blocks.append(cur)
            cur = []
        elif line.startswith("\t") and not line.startswith("\t."):
            cur.append(line)
    blocks.append(cur)
    best = []
    for b in blocks:
        run = []
        for ins in b:
            run.append(ins)
            if ins.strip().startswith("j"):
                break
        if sum("vfmadd" in i for i in run) > sum("vfmadd" in i for i in best):
            best = run
    return best


COMPILERS = ["cc", "clang"]


@pytest.mark.parametrize("compiler", COMPILERS)
def test_accumulators_stay_in_registers(tkc, tmp_path, compiler):
    """The vector functions of rwkv_forward (float32, AVX2), compiled alone
    with the run-time flags for x86-64-v3: in each function's hot loop, one
    FMA per copy (at least) and no stack access: the compiler unrolled the
    loops over the copies and kept the arrays of accumulators, row pointers
    and loads in registers."""
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} is not installed (make setup installs clang)")
    if os.uname().machine != "x86_64":
        pytest.skip("x86-64 assembly")
    text = emit(tkc, "--dtype", "f32", "--cpu", "avx2", str(forward_only(tmp_path)))
    fns = vector_functions(text)
    assert len(fns) == 3, len(fns)
    src = tmp_path / "vec.c"
    # the functions alone, external (static ones nothing calls would be dropped)
    src.write_text('#include "tk_kernel.h"\n' + "".join(f.replace("static TK_MID_TARGET", "TK_MID_TARGET") for f in fns))
    r = subprocess.run([compiler, "-O3", "-fwrapv", "-fopenmp-simd", "-ffp-contract=fast", "-fno-math-errno", "-std=c11",
                        "-march=x86-64-v3", "-DTK_NO_CLONES", "-fPIC", "-I", os.path.join(ROOT, "compiler"),
                        "-S", "-o", str(tmp_path / "vec.s"), str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    asm = (tmp_path / "vec.s").read_text()
    for fn in fns:
        name = FN_NAME.search(fn).group(1)
        copies = len(re.findall(r"float \*restrict v_s_\d+", fn.split(") {\n", 1)[0])) // 2   # declared twice
        m = re.search(r"\n" + name + r":[^\n]*\n(.*?)\.size\s+" + name, asm, re.S)
        assert m, name
        hot = hot_block(m.group(1))
        fmas = sum("vfmadd" in i for i in hot)
        stack = [i for i in hot if "(%rsp)" in i or "(%rbp)" in i]
        assert fmas >= copies >= 3, (name, fmas, copies)
        assert not stack, (name, "\n".join(hot))
