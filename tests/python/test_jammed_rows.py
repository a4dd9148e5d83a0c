"""Jammed rows (compiler/plan_rows.c, plan_jam): a CPU row loop whose
nested loops read inputs that do not move with the innermost parallel
variable runs 4 adjacent iterations as unroll-and-jam copies sharing those
loads (attention's keys and values; bench/row_jam.py). Checked against
torch in float64 on fresh random inputs: sizes that leave groups of fewer
than 4 at a row's end, rows shorter than 4, strided views; outputs poisoned
first. tests/c/test_variants.c compares the same ops with their plain
kernels at random chunkings of the index space."""
import os
import subprocess

import pytest
import torch
import torch.nn.functional as F

import torch_tk

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = os.path.join(ROOT, "tests", "specs", "jammed_rows.tk")
torch_tk.load(SPEC)
pytestmark = pytest.mark.usefixtures("poisoned_outputs")
TOL = {torch.float32: dict(rtol=1e-5, atol=2e-5), torch.float64: dict(rtol=1e-12, atol=1e-12)}
JAMMED = "body: 4 adjacent iterations along {v} as unroll-and-jam copies"


def gen(seed):
    return torch.Generator().manual_seed(seed)


def plan_text(tkc, path, dtype="f32"):
    r = subprocess.run([tkc, "plan", "--dtype", dtype, path], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_plan_jams_rows_that_share_nested_reads(tkc):
    for dtype in ("f32", "f64"):
        text = plan_text(tkc, SPEC, dtype)
        attention, rest = text.split("plan jam_window")
        window, mm = rest.split("plan jam_rows_mm")
        assert JAMMED.format(v="t") in attention and JAMMED.format(v="t") in window
        assert JAMMED.format(v="b") in mm
        assert "loop over kk at line 61: vectorised along the row (omp simd); reductions: sum s" in mm
    # a row loop without loops nested in loops (layer norm: weight[i] is read along the row) runs as written
    text = plan_text(tkc, os.path.join(ROOT, "examples", "specs", "layernorm.tk"))
    assert "unroll-and-jam" not in text
    assert "body: one iteration an index of at::parallel_for's range" in text.split("plan layernorm_backward_x")[0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("B,T,D", [(2, 37, 16), (1, 3, 5), (3, 8, 64), (1, 1, 7)])
def test_attention_matches_sdpa(dtype, B, T, D):
    g = gen(B * 1000 + T * 10 + D)
    q, k, v = (torch.randn(B, T, D, generator=g, dtype=torch.float64) for _ in range(3))
    scale = D ** -0.5
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    got = torch.ops.tk.jam_attention(q.to(dtype), k.to(dtype), v.to(dtype), scale * D)
    torch.testing.assert_close(got.double(), want, **TOL[dtype])


def test_attention_strided_views():
    """Transposed views (the strided body) give what contiguous copies give."""
    g = gen(7)
    q, k, v = (torch.randn(19, 2, 24, generator=g).transpose(0, 1) for _ in range(3))   # (2, 19, 24), strided
    assert not q.is_contiguous()
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True, scale=0.3)
    torch.testing.assert_close(torch.ops.tk.jam_attention(q, k, v, 0.3 * 24).double(), want, **TOL[torch.float32])


def window_reference(x, w):
    """jam_window as torch ops on float64, one t at a time."""
    B, T, D = x.shape
    y = torch.empty_like(x)
    peak = torch.empty(B, T, dtype=x.dtype)
    for t in range(T):
        lo = max(0, t - (w % 5 + 1))
        pk = x[:, lo:t + 1, :].amax((1, 2))
        acc = torch.zeros(B, D, dtype=x.dtype)
        for j in range(t % 3 + 1):
            acc = acc + x[:, j % T, :] * float(j + 1)
        if t % 2 == 0:
            acc = acc - pk[:, None]
        y[:, t] = acc
        peak[:, t] = pk
    return y, peak


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("B,T,D,w", [(2, 23, 9, 3), (1, 2, 4, 0), (3, 12, 17, 11), (1, 5, 1, 4)])
def test_window_matches_torch(dtype, B, T, D, w):
    x = torch.randn(B, T, D, generator=gen(T * 31 + D + w), dtype=torch.float64)
    y, peak = torch.ops.tk.jam_window(x.to(dtype), w)
    want_y, want_peak = window_reference(x.to(dtype).double(), w)
    torch.testing.assert_close(y.double(), want_y, **TOL[dtype])
    torch.testing.assert_close(peak.double(), want_peak, rtol=0, atol=0)   # a max: exact


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("B,K,N", [(13, 33, 7), (4, 64, 16), (3, 5, 2), (1, 8, 3)])
def test_rows_matmul_matches_torch(dtype, B, K, N):
    g = gen(B * K * N)
    x, w = torch.randn(B, K, generator=g, dtype=dtype), torch.randn(N, K, generator=g, dtype=dtype)
    torch.testing.assert_close(torch.ops.tk.jam_rows_mm(x, w).double(), x.double() @ w.double().t(),
                               **TOL[dtype])
    xt = torch.randn(K, B, generator=g, dtype=dtype).t()   # strided rows
    torch.testing.assert_close(torch.ops.tk.jam_rows_mm(xt, w).double(), xt.double() @ w.double().t(),
                               **TOL[dtype])


def test_any_thread_count():
    """A thread's range may end inside a group of 4 (its rows then run one
    at a time): one thread and several give torch's values alike."""
    g = gen(3)
    q, k, v = (torch.randn(3, 29, 32, generator=g, dtype=torch.float64) for _ in range(3))
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.2)
    threads = torch.get_num_threads()
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            got = torch.ops.tk.jam_attention(q.float(), k.float(), v.float(), 0.2 * 32)
            torch.testing.assert_close(got.double(), want, **TOL[torch.float32])
    finally:
        torch.set_num_threads(threads)
