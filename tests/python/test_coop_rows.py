"""Cooperative CUDA rows (schedule coop=S, compiler/plan_coop.c) as the
compiler plans and prints them, without a GPU: which loops are dealt over the
lanes, which reductions the shuffles combine, why the form is refused where a
loop carries state, and that it is opt-in (the default CUDA source of every
row loop is the thread-a-row form; an op without a row loop ignores the
item). Its results are checked under emulation by test_variants
(tests/specs/coop_rows.tk) and on a GPU by test_row_loops_cuda.py."""
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COOP = os.path.join(ROOT, "tests", "specs", "coop_rows.tk")
EX = os.path.join(ROOT, "examples", "specs")


def run(tkc, *args, tune=None):
    env = {k: v for k, v in os.environ.items() if k != "TK_CUDA_TUNE"}
    if tune is not None:
        env["TK_CUDA_TUNE"] = tune
    return subprocess.run([tkc, *args], capture_output=True, text=True, timeout=120, env=env)


def plan(tkc, spec, tune=None):
    r = run(tkc, "plan", "--target", "cuda", "--dtype", "f32", spec, tune=tune)
    assert r.returncode == 0, r.stderr
    return {block.split(",")[0]: block for block in ("\n" + r.stdout).split("\nplan ")[1:]}


def line_of(path, text):
    with open(path) as f:
        return next(i + 1 for i, l in enumerate(f) if text in l)


def test_softmax_and_layernorm_deal_their_loops(tkc):
    p = plan(tkc, COOP)
    sm = p["coop_softmax"]
    assert "schedule: coop=32 (spec)" in sm
    assert "kernel: 32 lanes of one warp share an iteration" in sm
    first = line_of(COOP, "for i in range(1, N):")
    assert f"loop over i (line {first}): dealt over the lanes" in sm and "m (max)" in sm
    assert "s (sum)" in sm and sm.count("dealt over the lanes") == 3
    assert "__syncwarp" in sm                      # the third pass reads y back
    ln = p["coop_layernorm"]
    assert ln.count("dealt over the lanes") == 3 and "mean (sum)" in ln and "var (sum)" in ln
    assert "__syncwarp" not in ln                  # no output read back: no barrier
    st = p["coop_stats"]
    assert "kernel: 4 lanes of one warp" in st
    assert "lo_v (min)" in st and "n (sum)" in st and "t (sum)" in st
    assert "stores by lane 0" in st


def test_a_scan_is_refused_and_says_why(tkc):
    sc = plan(tkc, COOP)["coop_scan"]
    assert "cooperative rows (coop=32) not used: the loop over i at line" in sc
    assert "it carries s from one iteration to the next" in sc
    assert "kernel: one iteration a thread" in sc
    for name in ("cumsum", "wkv"):
        text = "\n".join(plan(tkc, os.path.join(EX, name + ".tk"), tune="coop=32").values())
        assert "not used" in text and "lanes of one warp" not in text, name


def test_opt_in_only(tkc):
    """Without the item the row loops print as before (no shuffles, a thread
    an iteration); TK_CUDA_TUNE=coop=32 turns the form on for them."""
    spec = os.path.join(EX, "softmax.tk")
    default = run(tkc, "emit-cuda", spec)
    assert default.returncode == 0, default.stderr
    assert "__shfl" not in default.stdout and "tk_sub" not in default.stdout
    assert "cooperative" not in "\n".join(plan(tkc, spec).values())
    tuned = run(tkc, "emit-cuda", spec, tune="coop=32")
    assert tuned.returncode == 0, tuned.stderr
    assert "__shfl_xor_sync(tk_cmask" in tuned.stdout and "__syncwarp(tk_cmask)" in tuned.stdout
    assert "for (tk_i64 v_i = r_i_lo + tk_sub; v_i < r_i_end; v_i += 32)" in tuned.stdout
    assert "coop=32" in tuned.stdout.splitlines()[2]   # the TK_CUDA_TUNE line: the cache key differs
    # layernorm_backward_wb: one iteration; its loops over i inside the loop over r are dealt
    wb = plan(tkc, os.path.join(EX, "layernorm.tk"), tune="coop=16")["layernorm_backward_wb"]
    assert "kernel: 16 lanes" in wb and wb.count("dealt over the lanes") == 3


def test_ops_without_row_loops_ignore_it(tkc):
    spec = os.path.join(ROOT, "ops", "rwkv_forward.tk")
    a, b = run(tkc, "emit-cuda", spec), run(tkc, "emit-cuda", spec, tune="coop=32")
    assert a.returncode == 0 and b.returncode == 0
    strip = lambda s: [l for l in s.splitlines() if not l.startswith("/* TK_CUDA_TUNE")]  # noqa: E731
    assert strip(a.stdout) == strip(b.stdout)
    assert "coop: for row loops only; not used here" in "\n".join(plan(tkc, spec, tune="coop=32").values())


@pytest.mark.parametrize("tune", ["coop=3", "coop=64", "coop=0"])
def test_bad_values(tkc, tune):
    r = run(tkc, "emit-cuda", os.path.join(EX, "softmax.tk"), tune=tune)
    assert r.returncode != 0 and "coop 1..32" in r.stderr


def test_bad_schedule_line(tkc, tmp_path):
    spec = tmp_path / "bad.tk"
    spec.write_text("op f(x: float[N]) -> y: x.dtype[N]:\n    schedule coop=48\n    for _ in y:\n"
                    "        for i in range(N):\n            y[i] = x[i]\n")
    r = run(tkc, "check", str(spec))
    assert r.returncode != 0
    assert "bad.tk:2:19: error: schedule coop=48: expected a power of two from 1 to 32" in r.stderr
