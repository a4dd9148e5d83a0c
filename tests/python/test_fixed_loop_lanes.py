"""Lane tiles for loops with fixed bounds (compiler/plan_lanes.c,
lane_fixed_loops): a matmul written with its weight stored (K, N) runs its
k loop as vector FMAs over 16 lanes of n times 8 rows of b that share each
weight load (bench/fixed_loop_lanes.py: 54 -> 1.8 ms at 256x512x512),
while ops whose loops carry other state keep unroll-and-jam. Results are
checked against torch on fresh random inputs (odd sizes: partial tiles and
partial groups; strided views), outputs poisoned first."""
import os
import subprocess

import pytest
import torch

import torch_tk

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = os.path.join(ROOT, "tests", "specs", "fixed_loops.tk")
OPS = torch_tk.load(SPEC)
pytestmark = pytest.mark.usefixtures("poisoned_outputs")
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-4), torch.float64: dict(rtol=1e-12, atol=1e-12),
       torch.float16: dict(rtol=2e-3, atol=2e-2), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-1)}


def gen(seed):
    return torch.Generator().manual_seed(seed)


def plan(tkc, dtype):
    r = subprocess.run([tkc, "plan", "--dtype", dtype, SPEC], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_plan_runs_the_fixed_loops_across_the_lanes(tkc):
    for dtype, lanes in (("f32", 16), ("f64", 8)):
        text = plan(tkc, dtype)
        mm, rest = text.split("plan contract2")
        c2, pos = rest.split("plan mm_pos_kn")
        for block in (mm, c2, pos):
            assert f"lane tile: {lanes} lanes along n (omp simd loops) x 8 rows along b" in block
            assert "locals held per lane: s\n" in block   # (mm_pos_kn's t: a scalar in its lane block)
    # wkv_quadratic carries its state between lane blocks: no lane tile (slower), but lanes
    # across iterations as a row loop's (plan_rows.c, plan_across; 10.2 -> 0.8 ms)
    r = subprocess.run([tkc, "plan", "--dtype", "f32", os.path.join(ROOT, "examples", "specs", "wkv_quadratic.tk")],
                       capture_output=True, text=True, timeout=120)
    text = r.stdout.split("plan wkv_quadratic_backward")[0]
    assert "lane tile:" not in text and "unroll and jam" not in text
    assert "printed as a row loop (one element an index)" in text


ACROSS = ("no lane tiles or copies: printed as a row loop (one element an index)\n    lanes: blocks of 8 to 128 "
          "adjacent iterations along {v} run together")


def test_a_local_carried_between_lane_blocks_runs_as_lanes_across(tkc, tmp_path):
    """t is set in the k loop's body and read in a loop nested in it: two
    lane blocks. Such bodies ran slower as tiles (wkv_backward_wu), and
    faster as a row loop's lanes across iterations than in jammed copies
    (8.8 -> 2.2 ms). A read that moves with n other than as a unit-stride
    load (w[n, k]: a gather across the lanes) keeps the copies, which
    vectorise the k loop (a dot-product matmul: 2.3 ms, 59 as lanes)."""
    spec = tmp_path / "carried.tk"
    spec.write_text("op carried(x: float[B, K], wt: x.dtype[K, N]) -> y: x.dtype[B, N]:\n    for b, n in y:\n"
                    "        s = 0.0\n        for k in range(K):\n            t = wt[k, n]\n"
                    "            for j in range(2):\n                s += x[b, k] * t\n        y[b, n] = s\n"
                    "op dot(x: float[B, K], w: x.dtype[N, K]) -> y: x.dtype[B, N]:\n    for b, n in y:\n"
                    "        s = 0.0\n        for k in range(K):\n            s += x[b, k] * w[n, k]\n"
                    "        y[b, n] = s\n")
    r = subprocess.run([tkc, "plan", "--dtype", "f32", str(spec)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    carried, dot = r.stdout.split("plan dot")
    assert "lane tile:" not in carried and ACROSS.format(v="n") in carried and "locals held per lane: s, t\n" in carried
    assert "4 copies of the body along n (unroll and jam)" in dot
    r = subprocess.run([tkc, "plan", "--dtype", "f64", str(spec)], capture_output=True, text=True, timeout=120)
    assert "unroll and jam" in r.stdout.split("plan dot")[0]   # float64 keeps the copies (plan_lanes_across)


@pytest.mark.parametrize("device", [
    "cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU"))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("B, K, N", [(1, 1, 1), (3, 7, 5), (9, 33, 47), (17, 64, 100), (8, 16, 16), (13, 5, 257)])
def test_matmul_weight_kn_matches_torch(dtype, B, K, N, device):
    g = gen(B * 1000 + K * 10 + N)
    x, wt, bias = (torch.randn(*s, generator=g, dtype=torch.float64).to(device) for s in ((B, K), (K, N), (N,)))
    want = x @ wt + bias
    got = torch.ops.tk.mm_kn(x.to(dtype), wt.to(dtype), bias.to(dtype))
    torch.testing.assert_close(got.double(), (x.to(dtype).double() @ wt.to(dtype).double()
                                              + bias.to(dtype).double()), **TOL[dtype])
    if dtype == torch.float64:
        torch.testing.assert_close(got, want, **TOL[dtype])


def test_matmul_strided_views():
    g = gen(5)
    x = torch.randn(40, 23, generator=g).t()[:, ::2]          # (23, 20), strides (1, 46)
    wt = torch.randn(50, 20, generator=g).t()[:, 3:40]        # (20, 37), strides (1, 20)
    bias = torch.randn(74, generator=g)[::2]
    torch.testing.assert_close(torch.ops.tk.mm_kn(x, wt, bias), x @ wt + bias, **TOL[torch.float32])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_two_nested_loops_match_torch(dtype):
    g = gen(6)
    x, w = torch.randn(11, 3, 5, generator=g, dtype=dtype), torch.randn(3, 5, 70, generator=g, dtype=dtype)
    want = torch.einsum("bij,ijn->bn", x, w) * 0.5
    torch.testing.assert_close(torch.ops.tk.contract2(x, w, 0.5), want, **TOL[dtype])


def test_empty_and_zero_k():
    x, wt, bias = torch.randn(4, 0), torch.randn(0, 9), torch.randn(9)
    torch.testing.assert_close(torch.ops.tk.mm_kn(x, wt, bias), bias.expand(4, 9))
    assert torch.ops.tk.mm_kn(torch.randn(0, 3), torch.randn(3, 9), bias).shape == (0, 9)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_temporary_and_if_match_torch(dtype):
    g = gen(7)
    x, wt = torch.randn(19, 37, generator=g, dtype=dtype), torch.randn(37, 45, generator=g, dtype=dtype)
    want = (x[:, :, None] * wt[None]).clamp(min=0).sum(1)
    torch.testing.assert_close(torch.ops.tk.mm_pos_kn(x, wt), want, **TOL[dtype])


def across_reference(w, k):
    """tests/specs/fixed_loops.tk's across_recur in float64 (torch ops over
    the channel dim, the loops as written)."""
    kd, a = k.double(), torch.exp(-w.double().abs())
    s = torch.zeros(k.shape[:-3] + k.shape[-1:], dtype=torch.float64)
    m = torch.full_like(s, -1e30)
    for b in range(k.shape[-3]):
        p = torch.zeros_like(s)
        for t in range(k.shape[-2]):
            p = p * a + kd[..., b, t, :]
            m = torch.maximum(m, p)
        s = s + p
    return s, m


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("batch, B, T, C", [((), 1, 1, 1), ((2,), 3, 5, 37), ((2, 3), 2, 4, 130), ((), 4, 9, 8),
                                            ((1,), 0, 3, 20)])
def test_carried_state_as_lanes_across_matches_torch(tkc, dtype, batch, B, T, C):
    """across_recur runs as lanes across adjacent channels (blocks of 8 to
    128, the rest one at a time; float64 in jammed copies): every output
    element against a float64 reference, outputs poisoned first (B = 0:
    nothing accumulates, m stays -1e30: -inf in float16)."""
    code = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16"}[dtype]
    text = plan(tkc, code).split("plan across_recur")[1]
    assert (ACROSS.format(v="c") in text) == (dtype != torch.float64), text
    g = gen(B * 100 + T * 10 + C)
    w, k = torch.randn(C, generator=g).to(dtype), torch.randn(*batch, B, T, C, generator=g).to(dtype)
    got_s, got_m = torch.ops.tk.across_recur(w, k)
    want_s, want_m = across_reference(w, k)
    tol = TOL[dtype] if dtype != torch.float32 else dict(rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(got_s.double(), want_s, **tol)
    torch.testing.assert_close(got_m.double(), want_m.to(dtype).double(), **tol)


def test_carried_state_strided_and_broadcast_inputs():
    """Lanes load with unit strides only: a channel dim with another stride
    (k transposed) runs one element at a time, as does a tail; w broadcast
    from one element (stride 0)."""
    g = gen(11)
    k = torch.randn(2, 40, 3, 6, generator=g).permute(0, 2, 3, 1)   # (2, 3, 6, 40), channel stride 18
    w = torch.randn(1, generator=g).expand(40)
    got_s, got_m = torch.ops.tk.across_recur(w, k)
    want_s, want_m = across_reference(w, k)
    torch.testing.assert_close(got_s.double(), want_s, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(got_m.double(), want_m, rtol=1e-5, atol=1e-4)
    kc = k.contiguous()
    torch.testing.assert_close(torch.ops.tk.across_recur(w, kc)[0], got_s, rtol=1e-6, atol=1e-6)
