"""Sums (docs/spec.md, "Sums"): an output a row loop stores only with `+=`
starts at zero and takes every iteration's additions, at any index, and may
drop the loop's batch dims (a sum over them too).

tests/specs/sums.tk against float64 PyTorch formulations on fresh random
inputs, outputs poisoned (an element left unwritten is NaN): layer norm's
backward in one op (grad_x a row at a time, the weight and bias gradients
summed over every row) for 0 to 2 batch dims, an empty batch (sums of
nothing are 0); as the backward of a batch-generic layer norm, against
F.layer_norm's gradients and gradcheck; the same bits for one thread and
three; int sums at data-dependent indices (a histogram) exact. The checker's
errors for a sum read back, stored with `=` too, or in an element-wise
loop; `tkc plan` keeps lanes off ops with sums. On CUDA (a GPU only) an op
whose loop has more than one iteration and a sum is refused (its threads
would race) unless it runs in parts (schedule parts=N: threads adding into
copies), which must agree with the CPU.
"""
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import torch_tk

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUMS = os.path.join(ROOT, "tests", "specs", "sums.tk")

pytestmark = pytest.mark.usefixtures("poisoned_outputs")   # (conftest.py)

LN = """
op sum_ln(x: float[..., N], weight: x.dtype[N], bias: x.dtype[N], eps: float) -> y: x.dtype[..., N]:
    backward sum_layernorm_backward
    for _ in y:
        mean = 0.0
        for i in range(N):
            mean += x[i]
        mean = mean / float(N)
        var = 0.0
        for i in range(N):
            d = x[i] - mean
            var += d * d
        rstd = 1.0 / sqrt(var / float(N) + eps)
        for i in range(N):
            y[i] = (x[i] - mean) * rstd * weight[i] + bias[i]
"""


def ops():
    torch_tk.load(SUMS)
    torch_tk.kernel(LN, file="sum_ln.tk")
    return torch.ops.tk


SHAPES = [(4, 7, 16), (5, 16), (16,), (0, 16), (2, 0, 16), (3, 200, 300), (4096, 64)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_layernorm_backward_in_one_op(shape, dtype):
    tk = ops()
    g = torch.Generator().manual_seed(sum(shape) + 1)
    n = shape[-1]
    x = torch.randn(shape, generator=g, dtype=dtype)
    w = torch.randn(n, generator=g, dtype=dtype)
    gy = torch.randn(shape, generator=g, dtype=dtype)
    gx, gw, gb = tk.sum_layernorm_backward(x, w, 1e-5, gy)
    xd, wd, gd = x.double().requires_grad_(), w.double().requires_grad_(), gy.double()
    bd = torch.zeros(n, dtype=torch.float64, requires_grad=True)
    want = torch.autograd.grad(F.layer_norm(xd, (n,), wd, bd, 1e-5), (xd, wd, bd), gd)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-10)
    for got, ref in zip((gx, gw, gb), want):
        assert got.dtype == dtype and got.shape == ref.shape
        torch.testing.assert_close(got.double(), ref, **tol)
    if x.numel() == 0:
        assert torch.equal(gw, torch.zeros(n, dtype=dtype)) and torch.equal(gb, torch.zeros(n, dtype=dtype))


def test_as_the_backward_of_a_batch_generic_layer_norm():
    tk = ops()
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 3, 8, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(8, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(8, generator=g, dtype=torch.float64, requires_grad=True)
    gy = torch.randn(2, 3, 8, generator=g, dtype=torch.float64)
    got = torch.autograd.grad(tk.sum_ln(x, w, b, 1e-5), (x, w, b), gy)
    want = torch.autograd.grad(F.layer_norm(x, (8,), w, b, 1e-5), (x, w, b), gy)
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e, rtol=1e-10, atol=1e-10)
    assert torch.autograd.gradcheck(lambda x, w, b: tk.sum_ln(x, w, b, 1e-5), (x, w, b))


def test_same_bits_for_any_thread_count():
    tk = ops()
    g = torch.Generator().manual_seed(5)
    x, w, gy = torch.randn(4096, 256, generator=g), torch.randn(256, generator=g), torch.randn(4096, 256, generator=g)
    threads = torch.get_num_threads()
    try:
        got = []
        for t in (1, 2, 3):
            torch.set_num_threads(t)
            got.append(tk.sum_layernorm_backward(x, w, 1e-5, gy))
    finally:
        torch.set_num_threads(threads)
    for outs in got[1:]:
        for a, e in zip(outs, got[0]):
            assert torch.equal(a, e)


@pytest.mark.parametrize("dtype", [torch.int8, torch.int64])
def test_int_sums_at_data_dependent_indices(dtype):
    tk = ops()
    g = torch.Generator().manual_seed(6)
    x = torch.randint(-100, 100, (3000, 50), generator=g).to(dtype)
    hist, neg, seen = tk.sum_histogram(x, 7)
    assert torch.equal(hist, torch.bincount((x.to(torch.int64) % 7).flatten(), minlength=7))
    assert neg.dtype == torch.int32 and torch.equal(neg, (x < 0).sum(0).to(torch.int32))
    assert torch.equal(seen, torch.full((3000, 1), 50))
    hist0, _, _ = tk.sum_histogram(x, 0)
    assert hist0.shape == (0,)


def check(tmp_path, tkc, text):
    path = tmp_path / "s.tk"
    path.write_text(text)
    return subprocess.run([tkc, "check", str(path)], capture_output=True, text=True)


HEAD = "op f(x: float[..., R, N]) -> (y: x.dtype[..., R, N], s: x.dtype[N]):\n    for r, _ in y:\n"
ERRORS = {
    "read back": (HEAD + "        for i in range(N):\n            s[i] += x[r, i]\n            y[r, i] = s[i]\n",
                  "5:23: error: output 's' is a sum (every store to it is '+='): it cannot be read"),
    "= and +=": ("op f(x: float[R, N]) -> (y: x.dtype[R, N], s: x.dtype[N]):\n    for r, _ in y:\n"
                 "        for i in range(N):\n            s[i] += x[r, i]\n            s[i] = 0.0\n"
                 "            y[r, i] = 0.0\n",
                 "4:13: error: output 's' is stored with both '=' and '+='"),
    "= before +=": ("op f(x: float[R, N]) -> (y: x.dtype[R, N], s: x.dtype[N]):\n    for r, _ in y:\n"
                    "        for i in range(N):\n            s[i] = 0.0\n            s[i] += x[r, i]\n"
                    "            y[r, i] = 0.0\n",
                    "4:13: error: output 's' is stored with both '=' and '+='"),
    "element-wise": ("op f(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] += x[i]\n",
                     "3:9: error: '+=' into an output makes it a sum, which a row loop takes"),
    "-=": (HEAD + "        for i in range(N):\n            y[r, i] -= x[r, i]\n            s[i] += 1.0\n",
           "4:13: error: a store takes '=', or '+=' for a sum: to update an element, read it back "
           "(y[...] = y[...] - v)"),
    "batch dims dropped by a non-sum": ("op f(x: float[..., R, N]) -> (y: x.dtype[..., R, N], s: x.dtype[N]):\n"
                                        "    for r, _ in y:\n        for i in range(N):\n"
                                        "            y[r, i] = x[r, i]\n            s[i] = 1.0\n",
                                        "1:54: error: output 's' has no '...' and the loop output 'y' has"),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_checker_errors(tmp_path, tkc, case):
    text, want = ERRORS[case]
    out = check(tmp_path, tkc, text)
    assert out.returncode != 0 and want in out.stderr, out.stderr


def test_a_sum_over_the_batch_dims_checks(tmp_path, tkc):
    out = check(tmp_path, tkc, HEAD + "        for i in range(N):\n            s[i] += x[r, i]\n"
                                      "            y[r, i] = x[r, i]\n")
    assert out.returncode == 0, out.stderr


def test_no_lanes_across_iterations_with_a_sum(tmp_path, tkc):
    base = ("op f(x: float[T, C]) -> (y: x.dtype[T, C], s: x.dtype[T]):\n    for _, c in y:\n"
            "        a = 0.0\n        for t in range(T):\n            a += x[t, c]\n            y[t, c] = a\n")
    plans = []
    for extra in ("            s[t] = 0.0\n", "            s[t] += x[t, c]\n"):
        path = tmp_path / "l.tk"
        path.write_text(base + extra)
        out = subprocess.run([tkc, "plan", "--target", "cpu", "--dtype", "f32", str(path)],
                             capture_output=True, text=True)
        plans.append((out.returncode, out.stdout, out.stderr))
    # with '=' s[t] races (two values of c store it): refused; with '+=' it is a sum, and no lanes
    assert plans[0][0] != 0 and "two iterations could write the same element" in plans[0][2]
    assert plans[1][0] == 0 and "lanes:" not in plans[1][1], plans[1]
    assert "sums (stored with '+=', zeroed by the caller): s; the shim runs the index space in parts" in plans[1][1]


def test_a_parallel_variable_in_a_sum_index_is_checked():
    """s[b] += ... with b over B rows into s of N elements: in range while B <= N, a RuntimeError
    (the store skipped) past it, never a write outside s."""
    tk = torch.ops.tk
    torch_tk.kernel("op sum_by_row(x: float[B, N]) -> (y: x.dtype[B, N], s: x.dtype[N]):\n"
                    "    for b, _ in y:\n        for i in range(N):\n            y[b, i] = x[b, i]\n"
                    "            s[b] += x[b, i]\n", file="sum_by_row.tk")
    x = torch.arange(12.0).reshape(3, 4)
    y, s = tk.sum_by_row(x)
    assert torch.equal(s, torch.tensor([6.0, 22.0, 38.0, 0.0])) and torch.equal(y, x)
    with pytest.raises(RuntimeError, match=r"tk.sum_by_row: sum_by_row.tk:5:13: store s\[4\] out of range"):
        tk.sum_by_row(torch.arange(20.0).reshape(5, 4))


FIRST_EMPTY = """
import torch, torch_tk
torch_tk.kernel('''
op sum_first_empty(x: float[..., N]) -> (y: x.dtype[..., N], s: x.dtype[N]):
    for _ in y:
        for i in range(N):
            y[i] = x[i]
            s[i] += x[i]
''')
y, s = torch.ops.tk.sum_first_empty(torch.zeros(0, 5, dtype=torch.float64))
assert y.shape == (0, 5) and torch.equal(s, torch.zeros(5, dtype=torch.float64)), s
"""


def test_first_call_empty(tmp_path):
    """An op with a sum called first with an empty batch (its kernel not compiled yet): zeros."""
    env = dict(os.environ, TK_CACHE_DIR=str(tmp_path / "cache"))
    subprocess.run([sys.executable, "-c", FIRST_EMPTY], check=True, env=env)


def test_plus_equals_in_one_iteration_runs_in_parts(tmp_path, tkc):
    text = ("op sum_cols(x: float[R, N]) -> s: x.dtype[N]:\n    for _ in s:\n        for r in range(R):\n"
            "            for i in range(N):\n                s[i] += x[r, i]\n")
    path = tmp_path / "c.tk"
    path.write_text(text)
    out = subprocess.run([tkc, "plan", "--target", "cpu", "--dtype", "f64", str(path)], capture_output=True,
                         text=True, check=True).stdout
    assert "in parts: the loop over r at line 3" in out
    torch_tk.kernel(text, file="sum_cols.tk")
    x = torch.randn(4096, 64, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    torch.testing.assert_close(torch.ops.tk.sum_cols(x), x.sum(0), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_sums_add_up_in_float32(dtype):
    """A sum declared float16 or bfloat16 is added up in float32 and rounded
    once: 10,000 ones are 10,000 rounded (a half accumulator stops at 2,048
    in float16, 256 in bfloat16); the layer norm backward's weight gradient
    is its float64 value rounded, not a long half-precision sum; fake
    tensors (torch.compile) get the declared dtype."""
    torch_tk.kernel("""
op half_segsum(values: float[E, D], index: int[E], S: int) -> (out: values.dtype[S, D], t: values.dtype[E, 1]):
    for e, _ in t:
        t[e, 0] = values[e, 0]
        for d in range(D):
            out[index[e], d] += values[e, d]
""", file="half_segsum.tk")
    v = torch.ones(10000, 3, dtype=dtype)
    idx = torch.randint(0, 2, (10000,), generator=torch.Generator().manual_seed(4))
    out, _ = torch.ops.tk.half_segsum(v, idx, 2)
    want = torch.zeros(2, 3, dtype=torch.float64).index_add_(0, idx, v.double()).to(dtype)
    assert out.dtype == dtype and torch.equal(out, want)
    fake = torch.ops.tk.half_segsum(v.to("meta"), idx.to("meta"), 2)[0]
    assert fake.dtype == dtype and fake.shape == (2, 3)
    g = torch.Generator().manual_seed(5)
    x, gy = (torch.randn(20000, 16, generator=g, dtype=torch.float64) for _ in range(2))
    w = torch.randn(16, generator=g, dtype=torch.float64)
    _, gw, gb = ops().sum_layernorm_backward(x.to(dtype), w.to(dtype), 1e-5, gy.to(dtype))
    _, gw64, gb64 = ops().sum_layernorm_backward(x.to(dtype).double(), w.to(dtype).double(), 1e-5, gy.to(dtype).double())
    eps = torch.finfo(dtype).eps
    for a, e in ((gw, gw64), (gb, gb64)):
        assert a.dtype == dtype
        assert ((a.double() - e).abs() <= 4 * eps * e.abs() + 1e-2).all(), (a, e)


def test_cuda_plan_of_sums(tmp_path, tkc):
    """`tkc plan --target cuda` (no GPU needed): with schedule parts=N the sums
    and a one-iteration row loop run in parts, which the kernel's source
    marks for the launcher; without it the launcher refuses several
    iterations, and a parts item on an op with neither is reported unused."""
    def plan(text, tune=""):
        path = tmp_path / "p.tk"
        path.write_text(text)
        env = dict(os.environ, TK_CUDA_TUNE=tune)
        return subprocess.run([tkc, "plan", "--target", "cuda", str(path)], env=env,
                              capture_output=True, text=True, check=True).stdout
    with open(SUMS) as f:
        out = plan(f.read())
    assert "kernel: in parts (parts=1024, untimed)" in out and "thread p adding into copy p of grad_weight, grad_bias" in out
    assert "kernel: in parts (parts=64, untimed)" in out and "copy p of hist, neg;" in out
    cols = ("op c(x: float[R, N]) -> (s: x.dtype[N], t: x.dtype[R, 1]):\n    for r, _ in t:\n        t[r, 0] = 1.0\n"
            "        for i in range(N):\n            s[i] += x[r, i]\n")
    assert "the launcher refuses more than one iteration" in plan(cols)
    assert "kernel: in parts (parts=128, untimed)" in plan(cols, "parts=128")
    wb = os.path.join(ROOT, "examples", "specs", "layernorm.tk")
    text = open(wb).read()
    out = plan(text, "parts=256")
    line = text[:text.index("        for r in range(R):")].count("\n") + 1   # (layernorm_backward_wb's)
    assert f"the loop over r at line {line} cut into nparts shares" in out
    assert "parts (parts=256) not used: no output is a sum" in out   # (layernorm, rmsnorm: row-wise)
    src = subprocess.run([tkc, "emit-cuda", SUMS], capture_output=True, text=True, check=True).stdout
    kernels = src.count("__global__")
    assert kernels > 4 and src.count("/* tk: runs in parts") == kernels   # (every kernel of both ops)
    assert "t_grad_weight += tk_pt * a.pstride[1];" in src and "t_hist += tk_pt * a.pstride[0];" in src


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
def test_cuda_refuses_a_sum_over_several_iterations_without_parts():
    torch_tk.kernel("""
op sum_cols_plain(x: float[R, N]) -> (s: x.dtype[N], t: x.dtype[R, 1]):
    for r, _ in t:
        t[r, 0] = x[r, 0]
        for i in range(N):
            s[i] += x[r, i]
""", file="sum_cols_plain.tk")
    x = torch.randn(4, 16, device="cuda")
    with pytest.raises(RuntimeError, match=r"a sum \('\+='\) over 4 iterations: .*schedule parts=N"):
        torch.ops.tk.sum_cols_plain(x)
    torch.testing.assert_close(torch.ops.tk.sum_cols_plain(x[:1])[0].cpu(), x[0].cpu())   # one iteration: runs


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
def test_cuda_sums_in_parts_match_the_cpu():
    """tests/specs/sums.tk (schedule parts=1024, parts=64): threads adding into
    copies, summed by torch after; float64 against the CPU kernel, ints exact."""
    tk = ops()
    g = torch.Generator().manual_seed(11)
    for shape in [(16,), (4, 16), (3, 700, 33), (0, 16), (5000, 64)]:
        x, gy = (torch.randn(*shape, generator=g, dtype=torch.float64) for _ in range(2))
        w = torch.randn(shape[-1], generator=g, dtype=torch.float64)
        got = tk.sum_layernorm_backward(x.cuda(), w.cuda(), 1e-5, gy.cuda())
        want = tk.sum_layernorm_backward(x, w, 1e-5, gy)
        for a, e in zip(got, want):
            torch.testing.assert_close(a.cpu(), e, rtol=1e-10, atol=1e-10)
    xi = torch.randint(-50, 50, (3000, 40), generator=g)
    for a, e in zip(tk.sum_histogram(xi.cuda(), 7), tk.sum_histogram(xi, 7)):
        assert torch.equal(a.cpu(), e)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
def test_cuda_one_iteration_row_loop_in_parts():
    """A weight gradient's one-iteration row loop with schedule parts=N: the
    loop over rows cut into shares, one a thread, its stores before the loop
    by thread 0 only."""
    torch_tk.kernel("""
op sum_cols_parted(x: float[R, N]) -> (s: x.dtype[N], n: int64[N]):
    schedule parts=512
    for _ in s:
        for i in range(N):
            s[i] = 0.0
            n[i] = 0
        for r in range(R):
            for i in range(N):
                s[i] = s[i] + x[r, i]
                if x[r, i] > 0.0:
                    n[i] = n[i] + 1
""", file="sum_cols_parted.tk")
    g = torch.Generator().manual_seed(12)
    for R, N in [(1, 3), (300, 17), (20000, 64)]:
        x = torch.randn(R, N, generator=g, dtype=torch.float64)
        s, n = torch.ops.tk.sum_cols_parted(x.cuda())
        torch.testing.assert_close(s.cpu(), x.sum(0), rtol=1e-10, atol=1e-10)
        assert torch.equal(n.cpu(), (x > 0).sum(0))
