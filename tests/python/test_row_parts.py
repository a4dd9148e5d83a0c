"""Row loops in parts (docs/spec.md, "Row loops"; compiler/plan_rows.c,
plan_parts): a one-iteration row loop whose last loop only adds into its
outputs (a weight's gradient summed over rows) runs on the CPU as several
parts, each into its own copy of the outputs, added up after.

Checked against float64 PyTorch formulations on fresh random inputs, with
outputs poisoned (an element left unwritten is NaN): layernorm's and
rmsnorm's weight gradients (examples/specs/layernorm.tk) and a column sum
with a non-zero start and a local set before the loop, at sizes of one part
to sixteen; an int64 count summed exactly; the same bits for one thread and
two, and for TK_CPU_PARTS=1 (one part) against the default within float
rounding; 64 parts; float16, bfloat16 and int8 outputs, a -0.0 kept; a bool
output set before the loop; full layer norm training
gradients against F.layer_norm. `tkc
plan` says which loops run in parts, and refuses the form where a part could
not keep its own sums: state carried from row to row, an output read back
elsewhere, a store that is not an addition (or a product), statements after
the loop, batch dims, a zeroing statement that also sets a local.
"""
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import torch_tk

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAYERNORM = os.path.join(ROOT, "examples", "specs", "layernorm.tk")

pytestmark = pytest.mark.usefixtures("poisoned_outputs")   # (conftest.py)

COLSUM = """
op parts_colsum(x: float[R, N], c: int64[R, N], start: float) -> (s: x.dtype[N], n: int64[N]):
    for _ in s:
        for i in range(N):
            s[i] = start
            n[i] = 0
        scale = 2.0
        for r in range(R):
            for i in range(N):
                s[i] = s[i] + scale * x[r, i]
                if x[r, i] > 0.0:
                    n[i] = n[i] + c[r, i]
"""

# rows: 1 part (4 x 8), 4 parts (512 x 256), 16 parts (4096 x 300), rows fewer than parts (9 x 32768)
SHAPES = [(0, 8), (1, 8), (4, 8), (512, 256), (4096, 300), (9, 32768)]
TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.float64: dict(rtol=1e-10, atol=1e-10)}


def ops():
    torch_tk.load(LAYERNORM)
    torch_tk.kernel(COLSUM, file="parts_colsum.tk")
    return torch.ops.tk


def stats(x, eps):
    m = x.mean(1, keepdim=True)
    return m, 1.0 / torch.sqrt(((x - m) ** 2).mean(1, keepdim=True) + eps)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_weight_gradients_against_float64(shape, dtype):
    tk = ops()
    g = torch.Generator().manual_seed(shape[0] * 7 + shape[1])
    x = torch.randn(shape, generator=g, dtype=dtype)
    gy = torch.randn(shape, generator=g, dtype=dtype)
    xd, gd = x.double(), gy.double()
    m, rstd = stats(xd, 1e-5)
    gw, gb = tk.layernorm_backward_wb(x, 1e-5, gy)
    torch.testing.assert_close(gw.double(), (gd * (xd - m) * rstd).sum(0), **TOL[dtype])
    torch.testing.assert_close(gb.double(), gd.sum(0), **TOL[dtype])
    rr = 1.0 / torch.sqrt((xd * xd).mean(1, keepdim=True) + 1e-5)
    torch.testing.assert_close(tk.rmsnorm_backward_w(x, 1e-5, gy).double(), (gd * xd * rr).sum(0), **TOL[dtype])


@pytest.mark.parametrize("shape", SHAPES)
def test_start_local_and_int_counts(shape):
    """Part 0 alone starts from `start`; every part sees the local set before the loop;
    int64 counts are exact; a non-contiguous input is read in place."""
    tk = ops()
    g = torch.Generator().manual_seed(shape[1])
    x = torch.randn(shape[::-1], generator=g).t()   # transposed storage
    c = torch.randint(0, 5, shape, generator=g)
    s, n = tk.parts_colsum(x, c, 1.5)
    torch.testing.assert_close(s.double(), 1.5 + 2.0 * x.double().sum(0), rtol=1e-4, atol=1e-4)
    assert torch.equal(n, (c * (x > 0)).sum(0))


def test_same_bits_for_any_thread_count():
    tk = ops()
    g = torch.Generator().manual_seed(3)
    x, gy = torch.randn(4096, 300, generator=g), torch.randn(4096, 300, generator=g)
    threads = torch.get_num_threads()
    try:
        got = []
        for t in (1, 2, 3):
            torch.set_num_threads(t)
            got.append(tk.layernorm_backward_wb(x, 1e-5, gy))
    finally:
        torch.set_num_threads(threads)
    for w, b in got[1:]:
        assert torch.equal(w, got[0][0]) and torch.equal(b, got[0][1])


def test_one_part_matches_within_rounding():
    """TK_CPU_PARTS=1 runs the loop whole on one thread: the sums in the spec's order."""
    code = ("import torch, torch_tk\n"
            f"torch_tk.load({LAYERNORM!r})\n"
            "g = torch.Generator().manual_seed(5)\n"
            "x, gy = torch.randn(4096, 300, generator=g), torch.randn(4096, 300, generator=g)\n"
            "torch.save(torch.ops.tk.layernorm_backward_wb(x, 1e-5, gy), __import__('sys').argv[1])\n")
    outs = []
    for parts in ("1", "16"):
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"tk_parts_{os.getpid()}_{parts}.pt")
        env = dict(os.environ, TK_CPU_PARTS=parts)
        subprocess.run([sys.executable, "-c", code, path], check=True, env=env)
        outs.append(torch.load(path))
        os.remove(path)
    (w1, b1), (w16, b16) = outs
    assert not torch.equal(w1, w16), "16 parts should reassociate the sums"
    torch.testing.assert_close(w16, w1, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(b16, b1, rtol=1e-4, atol=1e-4)


def test_layernorm_training_gradients():
    tk = ops()
    g = torch.Generator().manual_seed(11)
    x = torch.randn(2048, 256, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(256, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(256, generator=g, dtype=torch.float64, requires_grad=True)
    gy = torch.randn(2048, 256, generator=g, dtype=torch.float64)
    got = torch.autograd.grad(tk.layernorm(x, w, b, 1e-5), (x, w, b), gy)
    want = torch.autograd.grad(F.layer_norm(x, (256,), w, b, 1e-5), (x, w, b), gy)
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e, rtol=1e-9, atol=1e-9)


MIXED = """
op parts_mixed(x: float[R, N], c: int8[R, N]) -> (s: x.dtype[N], n: int8[N], z: x.dtype[N]):
    for _ in s:
        for i in range(N):
            s[i] = -0.0
            n[i] = 0
            z[i] = -0.0
        for r in range(2, R):
            for i in range(N):
                if x[r, i] > 0.5:
                    s[i] = s[i] + x[r, i]
                n[i] = n[i] + c[r, i]
        for r in range(R, 0):
            for i in range(N):
                z[i] = z[i] + 1.0
"""


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_half_int8_and_signed_zero(dtype):
    """float16 / bfloat16 / float32 sums (of 0s and 1s: every partial sum exact, so the parts' result is
    the whole loop's to the bit), int8 sums wrapping as the whole loop's do, a range from 2, and outputs an
    empty range or a false condition leaves at -0.0 (the parts' copies hold -0.0, which adds nothing).
    200 x 1024 inputs: 6 parts."""
    tk = torch.ops.tk
    torch_tk.kernel(MIXED, file="parts_mixed.tk")
    g = torch.Generator().manual_seed(9)
    x = torch.randint(0, 2, (200, 1024), generator=g).to(dtype)
    x[:, 0] = -1.0                                   # column 0: the condition never holds
    c = torch.randint(-128, 128, (200, 1024), generator=g, dtype=torch.int8)
    s, n, z = tk.parts_mixed(x, c)
    assert torch.equal(s[1:], x[2:, 1:].double().sum(0).to(dtype))
    assert torch.equal(n, c[2:].to(torch.int64).sum(0).to(torch.int8))   # modulo 256
    assert bool(torch.signbit(s[0])) and s[0] == 0, "column 0 adds nothing: -0.0 stays"
    assert torch.signbit(z).all() and (z == 0).all()


def test_more_parts_than_the_default():
    """TK_CPU_PARTS=64 (the most): 64 parts of a large input, against float64."""
    code = ("import sys, torch, torch_tk\n"
            f"torch_tk.load({LAYERNORM!r})\n"
            "g = torch.Generator().manual_seed(6)\n"
            "x, gy = torch.randn(8192, 1024, generator=g), torch.randn(8192, 1024, generator=g)\n"
            "xd, gd = x.double(), gy.double()\n"
            "rr = 1.0 / torch.sqrt((xd * xd).mean(1, keepdim=True) + 1e-5)\n"
            "torch.testing.assert_close(torch.ops.tk.rmsnorm_backward_w(x, 1e-5, gy).double(), (gd * xd * rr).sum(0),\n"
            "                           rtol=1e-4, atol=1e-3)\n")
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ, TK_CPU_PARTS="64"))


def plan(tkc, tmp_path, text, code="f32"):
    path = tmp_path / "p.tk"
    path.write_text(text)
    out = subprocess.run([tkc, "plan", "--target", "cpu", "--dtype", code, str(path)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_plan_says_which_loops_run_in_parts(tkc, tmp_path):
    out = subprocess.run([tkc, "plan", "--target", "cpu", "--dtype", "f32", LAYERNORM],
                         capture_output=True, text=True, check=True).stdout
    parted = {blk.split(",")[0] for blk in out.split("plan ")[1:] if "in parts:" in blk}
    assert parted == {"layernorm_backward_wb", "rmsnorm_backward_w"}
    assert "in parts: the loop over r at line" in plan(tkc, tmp_path, COLSUM, "f32_i64")
    # the CUDA plan has no parts by default (untimed on a GPU: `schedule parts=N` opts in)
    cuda = subprocess.run([tkc, "plan", "--target", "cuda", "--dtype", "f32", LAYERNORM],
                          capture_output=True, text=True, check=True).stdout
    assert "kernel: in parts" not in cuda and "schedule parts=N runs them in parts, untimed" in cuda


HEAD = "op f(x: float[R, N]) -> y: x.dtype[N]:\n    for _ in y:\n        for i in range(N):\n            y[i] = 0.0\n"
REFUSED = {
    "state carried from row to row": HEAD + "        a = 0.0\n        for r in range(R):\n"
                                            "            a += x[r, 0]\n            y[0] = y[0] + a\n",
    "an output read back elsewhere": HEAD + "        for r in range(R):\n            for i in range(N):\n"
                                           "                y[i] = y[i] + y[0] * x[r, i]\n",
    "a store that is not an addition": HEAD + "        for r in range(R):\n            for i in range(N):\n"
                                             "                y[i] = x[r, i]\n",
    "a product": HEAD + "        for r in range(R):\n            for i in range(N):\n"
                        "                y[i] = y[i] * x[r, i]\n",
    "statements after the loop": HEAD + "        for r in range(R):\n            for i in range(N):\n"
                                       "                y[i] = y[i] + x[r, i]\n        y[0] = 1.0\n",
    "zeroing that sets a local": "op f(x: float[R, N]) -> y: x.dtype[N]:\n    for _ in y:\n        t = 0.0\n"
                                 "        for i in range(N):\n            t = 1.0\n            y[i] = t\n"
                                 "        for r in range(R):\n            for i in range(N):\n"
                                 "                y[i] = y[i] + x[r, i] * t\n",
    "batch dims": "op f(x: float[..., R, N]) -> y: x.dtype[..., N]:\n    for _ in y:\n        for i in range(N):\n"
                  "            y[i] = 0.0\n        for r in range(R):\n            for i in range(N):\n"
                  "                y[i] = y[i] + x[r, i]\n",
}


@pytest.mark.parametrize("why", list(REFUSED))
def test_plan_refuses_parts(tkc, tmp_path, why):
    out = plan(tkc, tmp_path, REFUSED[why])
    assert "in parts" not in out, why


def test_bool_output_set_before_the_loop():
    """A bool output only the zeroing statements set keeps part 0's values (the other parts add False)."""
    tk = torch.ops.tk
    torch_tk.kernel("""
        op parts_flag(x: float[R, N]) -> (s: x.dtype[N], pos: bool[N]):
            for _ in s:
                for i in range(N):
                    s[i] = 0.0
                    pos[i] = x[0, i] > 0.0
                for r in range(R):
                    for i in range(N):
                        s[i] = s[i] + x[r, i]
        """, file="parts_flag.tk")
    x = torch.randn(4096, 64, generator=torch.Generator().manual_seed(2))
    s, pos = tk.parts_flag(x)
    torch.testing.assert_close(s.double(), x.double().sum(0), rtol=1e-4, atol=1e-4)
    assert torch.equal(pos, x[0] > 0)
