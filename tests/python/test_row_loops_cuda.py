"""Row loops on the GPU (the device check runs these: ci/gpu-check.sh's pytest
step takes the tests whose ids name cuda): the example specs of
examples/specs/ (softmax, cumsum, layernorm, rmsnorm, wkv) on CUDA tensors
against PyTorch on the same device, outputs poisoned (NaN) so an element a
thread forgets shows, and the backward ops through autograd against the
CPU's; and the cooperative form (tests/specs/coop_rows.tk: schedule
coop=32 / coop=4, lanes of a warp sharing a row) against PyTorch and against
the default form, rows shorter than a warp, not multiples of 32, and empty.
Skipped where there is no CUDA GPU.
"""
import os

import pytest
import torch
import torch.nn.functional as F

import torch_tk

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPECS = os.path.join(ROOT, "examples", "specs")
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-12, atol=1e-12),
       torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}


def ops():
    for name in ("softmax", "cumsum", "layernorm", "wkv"):
        torch_tk.load(os.path.join(SPECS, name + ".tk"))
    return torch.ops.tk


@pytest.fixture(autouse=True)
def poisoned_outputs():
    """torch.empty fills NaN meanwhile (the shim allocates outputs with it)."""
    was = torch.are_deterministic_algorithms_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    yield
    torch.use_deterministic_algorithms(was)
    torch.utils.deterministic.fill_uninitialized_memory = fill


def close(got, want, dtype):
    assert got.device.type == "cuda" and got.dtype == dtype and got.shape == want.shape
    assert not got.isnan().any(), "an element was not written (NaN poison)"
    torch.testing.assert_close(got.double(), want.double(), **TOL[dtype])


@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize("shape", [(4096, 1024), (64, 32768), (3, 5, 33), (1, 1)])
def test_softmax_cumsum_norms_cuda(dtype, shape):
    tk = ops()
    g = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(shape, generator=g, dtype=torch.float64).to("cuda", dtype)
    close(tk.softmax(x), torch.softmax(x.double(), -1), dtype)
    ctol = dict(rtol=1e-4, atol=1e-4 * shape[-1] ** 0.5) if dtype == torch.float32 else None
    got, want = tk.cumsum(x), torch.cumsum(x.double(), -1)
    if ctol:
        assert not got.isnan().any()
        torch.testing.assert_close(got.double(), want, **ctol)
    else:
        close(got, want, dtype)
    if x.dim() == 2:
        R, N = shape
        w = torch.randn(N, generator=g, dtype=torch.float64).to("cuda", dtype)
        b = torch.randn(N, generator=g, dtype=torch.float64).to("cuda", dtype)
        close(tk.layernorm(x, w, b, 1e-5), F.layer_norm(x.double(), (N,), w.double(), b.double(), 1e-5), dtype)
        xd, wd = x.double(), w.double()
        close(tk.rmsnorm(x, w, 1e-5), xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-5) * wd, dtype)


def test_row_loop_gradients_cuda_match_cpu():
    tk = ops()
    g = torch.Generator().manual_seed(7)
    x = torch.randn(33, 70, generator=g, dtype=torch.float64)
    w, b = torch.randn(70, generator=g, dtype=torch.float64), torch.randn(70, generator=g, dtype=torch.float64)
    grads = {}
    for dev in ("cpu", "cuda"):
        xs, ws, bs = (t.to(dev).requires_grad_(True) for t in (x, w, b))
        loss = (tk.softmax(xs) * xs.cos()).sum() + (tk.cumsum(xs) ** 2).mean() + \
            (tk.layernorm(xs, ws, bs, 1e-5) ** 2).sum() + (tk.rmsnorm(xs, ws, 1e-5) * xs).sum()
        loss.backward()
        grads[dev] = [t.grad.cpu() for t in (xs, ws, bs)]
    for a, c in zip(grads["cpu"], grads["cuda"]):
        torch.testing.assert_close(c, a, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("B, T, C", [(8, 1024, 768), (2, 9, 1100), (1, 1, 1)])
def test_wkv_cuda_matches_cpu(B, T, C):
    tk = ops()
    g = torch.Generator().manual_seed(B + T + C)
    w = -torch.exp(torch.randn(C, generator=g, dtype=torch.float64))
    u, k, v = (torch.randn(*s, generator=g, dtype=torch.float64) for s in ((C,), (B, T, C), (B, T, C)))
    want = tk.wkv(w, u, k, v)   # the CPU kernel in float64, checked against a loop over t in test_row_loops
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-4)):
        got = tk.wkv(*(t.to("cuda", dtype) for t in (w, u, k, v)))
        assert not got.isnan().any()
        torch.testing.assert_close(got.double().cpu(), want, rtol=tol, atol=tol)
    small = [t.clone().requires_grad_(True) for t in (w, u, k[:, :64], v[:, :64])]
    tk.wkv(*small).pow(2).sum().backward()
    gpu = [t.detach().to("cuda").requires_grad_(True) for t in small]
    tk.wkv(*gpu).pow(2).sum().backward()
    for a, c in zip(small, gpu):
        torch.testing.assert_close(c.grad.cpu(), a.grad, rtol=1e-9, atol=1e-9)


def coop_ops():
    ops()
    torch_tk.load(os.path.join(ROOT, "tests", "specs", "coop_rows.tk"))
    return torch.ops.tk


@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize("shape", [(4096, 1024), (64, 32768), (7, 1), (5, 31), (3, 33), (2, 100), (4, 0), (0, 8)])
def test_coop_rows_cuda(dtype, shape):
    """softmax and layernorm with a warp a row (schedule coop=32) against torch
    and against the same spec with a thread a row (examples/specs)."""
    tk = coop_ops()
    g = torch.Generator().manual_seed(sum(shape) + 1)
    x = torch.randn(shape, generator=g, dtype=torch.float64).to("cuda", dtype)
    got = tk.coop_softmax(x)
    close(got, torch.softmax(x.double(), -1), dtype)
    torch.testing.assert_close(got.double(), tk.softmax(x).double(), **TOL[dtype])
    R, N = shape
    w = torch.randn(N, generator=g, dtype=torch.float64).to("cuda", dtype)
    b = torch.randn(N, generator=g, dtype=torch.float64).to("cuda", dtype)
    got = tk.coop_layernorm(x, w, b, 1e-5)
    if N > 0:
        close(got, F.layer_norm(x.double(), (N,), w.double(), b.double(), 1e-5), dtype)
    torch.testing.assert_close(got.double(), tk.layernorm(x, w, b, 1e-5).double(), **TOL[dtype], equal_nan=True)


@pytest.mark.parametrize("shape", [(9, 1), (6, 3), (5, 37), (3, 130), (2, 0)])
@pytest.mark.parametrize("k", [0, 1, 5])
def test_coop_stats_and_refused_scan_cuda(shape, k):
    """Groups of 4 lanes a row (coop=4): a min, an int count and a sum in one
    loop, stores by lane 0, a reversed store; and a scan whose form is
    refused (it runs a thread a row)."""
    tk = coop_ops()
    g = torch.Generator().manual_seed(sum(shape) + k)
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    y, lo, cnt = tk.coop_stats(x.cuda(), k)
    lo_want = torch.minimum(x.min(-1).values if x.shape[-1] else torch.full(x.shape[:1], 1e30, dtype=x.dtype),
                            torch.tensor(1e30, dtype=x.dtype))
    t = (x * x).sum(-1)
    acc = x * sum(j + 1 for j in range(k % 3 + 1))
    want = (acc + (t - lo_want)[:, None]).flip(-1)
    torch.testing.assert_close(y.cpu(), want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lo.cpu(), lo_want, rtol=0, atol=0)
    assert torch.equal(cnt.cpu(), (x > 0).sum(-1))
    torch.testing.assert_close(tk.coop_scan(x.cuda()).cpu(), torch.cumsum(x, -1), rtol=1e-12, atol=1e-12)
