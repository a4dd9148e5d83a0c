"""Derived backward ops of scans (`backward auto` on a row loop whose inner
loop carries locals from step to step: docs/autograd.md, Scans;
compiler/autodiff_scan.c), against torch's autograd of the same recurrence
written as a Python loop over torch ops, on fresh random inputs, outputs
poisoned first:

* a prefix sum (`s += x; y = s`) against torch.cumsum, float64 and float32;
* a linear recurrence read through tanh, a broadcast weight read in the scan,
  an initial state read at the row's index and the final state stored at the
  row's level (tests/specs/autodiff_scan.tk's ar_linrec);
* an exponential moving average along the middle dim of (B, T, C), its first
  step under an `if`, with a running max carried beside it (ar_ema);
* RWKV-4's WKV (examples/specs/wkv.tk's forward, three carried locals, max,
  abs and branches in the scan) derived, against the backward ops written by
  hand in that file;
* gradcheck of each (finite differences: independent of the derivation).
The comparisons with torch run on CUDA too when there is a GPU.
"""
import os
import subprocess

import pytest
import torch

import torch_tk

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.usefixtures("poisoned_outputs")
tk = torch.ops.tk
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU"))]
TOL = {torch.float64: 1e-11, torch.float32: 2e-5}

torch_tk.load(os.path.join(ROOT, "tests", "specs", "autodiff_scan.tk"))
torch_tk.kernel("""
op sc_cumsum(x: float32|float64[..., T]) -> y: x.dtype[..., T]:
    backward auto
    for _ in y:
        s = 0.0
        for t in range(T):
            s += x[t]
            y[t] = s
""", file="scan_cumsum.tk")


def rand(g, *shape, dtype=torch.float64, device="cpu"):
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(device=device, dtype=dtype)


def check_grads(got, want, inputs, grad_outs, tol):
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)
    ga = torch.autograd.grad(got, inputs, grad_outs)
    gb = torch.autograd.grad(want, inputs, grad_outs)
    for a, b in zip(ga, gb):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_prefix_sum_against_cumsum(dtype, device):
    g = torch.Generator().manual_seed(1)
    x = rand(g, 2, 3, 37, dtype=dtype, device=device).requires_grad_()
    gy = rand(g, 2, 3, 37, dtype=dtype, device=device)
    check_grads((tk.sc_cumsum(x),), (torch.cumsum(x, -1),), (x,), (gy,), TOL[dtype] * 10)
    xs = rand(g, 3, 5, device=device).requires_grad_()
    assert torch.autograd.gradcheck(tk.sc_cumsum, (xs,))


def linrec_ref(x, a, c, h0):
    h, ys = h0 * 2.0, []
    for t in range(x.shape[1]):
        h = h * torch.tanh(a[:, t]) + x[:, t]
        ys.append(torch.tanh(h) * c[t])
    return torch.stack(ys, 1), h * h


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("R, T", [(5, 1), (6, 40)])
def test_linear_recurrence(dtype, R, T, device):
    g = torch.Generator().manual_seed(R * 100 + T)
    x, a = (rand(g, R, T, dtype=dtype, device=device).requires_grad_() for _ in range(2))
    c = rand(g, T, dtype=dtype, device=device).requires_grad_()
    h0 = rand(g, R, dtype=dtype, device=device).requires_grad_()
    gy, gl = rand(g, R, T, dtype=dtype, device=device), rand(g, R, dtype=dtype, device=device)
    check_grads(tk.ar_linrec(x, a, c, h0), linrec_ref(x, a, c, h0), (x, a, c, h0), (gy, gl), TOL[dtype])
    if dtype == torch.float64:
        small = [t.detach()[:3, :4].clone().requires_grad_() for t in (x, a)]
        small += [c.detach()[:4].clone().requires_grad_(), h0.detach()[:3].clone().requires_grad_()]
        assert torch.autograd.gradcheck(tk.ar_linrec, tuple(small))


def ema_ref(x, decay):
    d = torch.sigmoid(decay)
    m, hi, ys, zs = None, torch.full_like(x[:, 0], -1e30), [], []
    for t in range(x.shape[1]):
        m = x[:, t] if t == 0 else m * d + (1.0 - d) * x[:, t]
        hi = torch.maximum(hi, m)
        ys.append(m)
        zs.append(hi * m)
    return torch.stack(ys, 1), torch.stack(zs, 1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_moving_average_over_the_middle_dim(dtype, device):
    g = torch.Generator().manual_seed(3)
    x = rand(g, 3, 17, 5, dtype=dtype, device=device).requires_grad_()
    decay = rand(g, 5, dtype=dtype, device=device).requires_grad_()
    gy, gz = (rand(g, 3, 17, 5, dtype=dtype, device=device) for _ in range(2))
    check_grads(tk.ar_ema(x, decay), ema_ref(x, decay), (x, decay), (gy, gz), TOL[dtype])
    xs = rand(g, 2, 4, 3, device=device).requires_grad_()
    ds = rand(g, 3, device=device).requires_grad_()
    assert torch.autograd.gradcheck(tk.ar_ema, (xs, ds))


WKV = open(os.path.join(ROOT, "examples", "specs", "wkv.tk")).read()


@pytest.mark.parametrize("device", DEVICES)
def test_wkv_derived_equals_the_written_backward(device):
    """examples/specs/wkv.tk's forward with `backward auto` (its state scaled
    by e^-pp: max, abs and branches in the scan) against the backward ops that
    file writes by hand, float64, and gradcheck."""
    torch_tk.load(os.path.join(ROOT, "examples", "specs", "wkv.tk"))
    forward = WKV[WKV.index("op wkv("):]
    forward = forward[:forward.index("\n\n")] + "\n"
    torch_tk.kernel(forward.replace("op wkv(", "op wkv_auto(").replace(
        "    backward wkv_backward_kv, wkv_backward_wu\n", "    backward auto\n"), file="wkv_auto.tk")
    g = torch.Generator().manual_seed(5)
    B, T, C = 2, 33, 6
    w = (-torch.exp(rand(g, C) * 0.5)).to(device).requires_grad_()
    u, k, v = (rand(g, *s, device=device).requires_grad_() for s in ((C,), (B, T, C), (B, T, C)))
    gy = rand(g, B, T, C, device=device)
    got, want = tk.wkv_auto(w, u, k, v), tk.wkv(w, u, k, v)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    for a, b in zip(torch.autograd.grad(got, (w, u, k, v), gy), torch.autograd.grad(want, (w, u, k, v), gy)):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)
    small = [t.detach().clone().requires_grad_() for t in (w, u, k[:, :5], v[:, :5])]
    assert torch.autograd.gradcheck(tk.wkv_auto, tuple(small))


def test_a_derived_scan_compiles_without_contraction(tkc):
    """Its steps run again from the states the forward pass kept: their
    branches, max and min must see the bits the forward saw (ar_ema's
    running max against the average split them when the steps' products
    were contracted differently in the two passes: test_variants)."""
    r = subprocess.run([tkc, "emit-c", os.path.join(ROOT, "tests", "specs", "autodiff_scan.tk")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    parts = r.stdout.split("/* Generated by tkc")
    derived = [p for p in parts if "(backward auto of" in p]
    forward = [p for p in parts if p and "(backward auto of" not in p]
    assert len(derived) == 2 and all('optimize("fp-contract=off")' in p for p in derived)
    assert forward and not any('optimize("fp-contract=off")' in p for p in forward)
