"""Mamba's selective scan (examples/specs/selective_scan.tk) and the scratch
tensors it keeps its state in: values and gradients against a float64 loop
written as mamba_ssm's `selective_scan_ref` computes it (torch's autograd
differentiates the reference), on fresh random inputs with outputs and
scratch poisoned (NaN) so an element nothing writes, or a scratch element
read before it is written, shows; batch dims (B and C shared by a batch
broadcast), strided inputs, torch.compile, opcheck; what a scratch tensor is
to the schema, `tkc plan` and an in-place op; CUDA against the CPU where a
GPU exists.
"""
import os
import subprocess

import pytest
import torch

import torch_tk
from torch_tk import reference as ref

pytestmark = pytest.mark.usefixtures("poisoned_outputs")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = os.path.join(ROOT, "examples", "specs", "selective_scan.tk")
torch_tk.load(SPEC)
tk = torch.ops.tk


def reference(u, delta, A, B, C, D):
    """y and the last state, as mamba_ssm's selective_scan_ref: a loop over t."""
    return ref.selective_scan_loop(u, delta, A, B, C, D)


def inputs(batch, E, L, N, dtype, seed, bc_batch=None):
    """u, delta, A, B, C, D as Mamba passes them: delta > 0 (after softplus), A < 0."""
    g = torch.Generator().manual_seed(seed)
    bc = batch if bc_batch is None else bc_batch

    def r(*s):
        return torch.randn(*s, generator=g, dtype=torch.float64)

    u, delta = r(*batch, E, L), torch.rand(*batch, E, L, generator=g, dtype=torch.float64) * 0.5
    A = -torch.rand(E, N, generator=g, dtype=torch.float64) * 3
    return [t.to(dtype) for t in (u, delta, A, r(*bc, N, L), r(*bc, N, L), r(E))]


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-5), (torch.float64, 1e-12), (torch.bfloat16, 3e-2)])
@pytest.mark.parametrize("batch,E,L,N", [((), 5, 37, 4), ((2,), 8, 64, 16), ((2, 3), 3, 9, 1), ((1,), 2, 1, 3),
                                         ((2,), 3, 0, 4), ((2,), 3, 5, 0), ((0,), 3, 5, 2)])
def test_forward(dtype, tol, batch, E, L, N):
    args = inputs(batch, E, L, N, dtype, seed=E * L + N)
    y, last = tk.selective_scan(*args)
    want_y, want_last = reference(*[a.double() for a in args])
    assert y.dtype == dtype and y.shape == (*batch, E, L) and last.shape == (*batch, E, N)
    assert not y.isnan().any() and not last.isnan().any()
    # (the state is float32, or float64 in a float64 call: 'scratch h: float')
    for got, want in ((y, want_y), (last, want_last)):
        scale = want.abs().max().item() if want.numel() else 1.0
        torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol * max(1.0, scale))


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 5e-5), (torch.float64, 1e-11)])
@pytest.mark.parametrize("batch,bc_batch", [((), None), ((2,), None), ((2, 3), ()), ((2, 3), (3,))])
def test_gradients(dtype, tol, batch, bc_batch):
    args = [a.requires_grad_() for a in inputs(batch, 6, 29, 5, dtype, seed=len(batch), bc_batch=bc_batch)]
    ref_args = [a.detach().double().requires_grad_() for a in args]
    y, last = tk.selective_scan(*args)
    want_y, want_last = reference(*ref_args)
    g = torch.randn(y.shape, dtype=torch.float64)
    got = torch.autograd.grad((y.double() * g).sum(), args)
    want = torch.autograd.grad((want_y * g).sum(), ref_args)
    for name, a, gg, w in zip("u delta A B C D".split(), args, got, want):
        assert gg.shape == a.shape and gg.dtype == a.dtype, name
        assert not gg.isnan().any(), name
        torch.testing.assert_close(gg.double(), w, rtol=tol, atol=tol * w.abs().max().item(), msg=name)
    assert not last.requires_grad   # a state returned, not differentiated (no grad_last_state)


def test_gradcheck():
    """float64 throughout (the scratch tensors are 'float': float64 here)."""
    args = [a.requires_grad_() for a in inputs((2,), 3, 7, 2, torch.float64, seed=9)]
    assert torch.autograd.gradcheck(lambda *a: tk.selective_scan(*a)[0], args)


def test_bfloat16_keeps_a_float32_state():
    """A bfloat16 call's state is float32 ('float' scratch): against the
    reference run in float32 on the same bfloat16 inputs, y and the last
    state are off by 2.4e-3 and 2.6e-3 of their largest value (bfloat16's
    rounding of the results); with the state kept in bfloat16 (`scratch h:
    u.dtype`, tried) by 4.5e-3 and 7.8e-3."""
    args = inputs((2,), 4, 200, 8, torch.bfloat16, seed=13)
    y, last = tk.selective_scan(*args)
    want_y, want_last = reference(*[a.float() for a in args])
    for got, want in ((y, want_y), (last, want_last)):
        assert got.dtype == torch.bfloat16
        assert (got.float() - want).abs().max() <= 4e-3 * want.abs().max()


def test_strided_inputs():
    """u and delta as transposed views ([..., L, E] memory), B and C sliced."""
    u, delta, A, B, C, D = inputs((2,), 7, 19, 4, torch.float32, seed=5)
    ut, dt = u.transpose(-1, -2).contiguous().transpose(-1, -2), delta.transpose(-1, -2).contiguous().transpose(-1, -2)
    Bw = torch.cat([B, B], -1)[..., ::2]
    assert not ut.is_contiguous() and not Bw.is_contiguous()
    y, last = tk.selective_scan(ut, dt, A, Bw, C, D)
    want_y, want_last = reference(*[a.double() for a in (u, delta, A, Bw, C, D)])
    torch.testing.assert_close(y.double(), want_y, rtol=2e-5, atol=2e-5 * want_y.abs().max().item())
    torch.testing.assert_close(last.double(), want_last, rtol=2e-5, atol=2e-5)


def test_compile_and_opcheck():
    args = inputs((2,), 4, 16, 3, torch.float32, seed=11)

    def f(u, delta, A, B, C, D):
        y, last = tk.selective_scan(u, delta, A, B, C, D)
        return (y * 2).sum() + last.sum()

    eager = [a.clone().requires_grad_() for a in args]
    comp = [a.clone().requires_grad_() for a in args]
    f(*eager).backward()
    out = torch.compile(f, fullgraph=True)(*comp)
    out.backward()
    torch.testing.assert_close(out, f(*[a.detach() for a in args]))
    for a, b in zip(eager, comp):
        torch.testing.assert_close(a.grad, b.grad)
    torch.library.opcheck(tk.selective_scan.default, args)
    torch.library.opcheck(tk.selective_scan_backward_ue.default, (*args[:5], torch.randn(2, 4, 16), args[5]))
    torch.library.opcheck(tk.selective_scan.default, (*args[:5], None))


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 5e-5), (torch.float64, 1e-11)])
def test_without_d(dtype, tol):
    """D=None (mamba_ssm's default): no skip term, and no gradient for it."""
    args = [a.requires_grad_() for a in inputs((2,), 5, 23, 4, dtype, seed=71)[:5]]
    ref_args = [a.detach().double().requires_grad_() for a in args]
    zero_d = torch.zeros(5, dtype=torch.float64)
    for call in (lambda: tk.selective_scan(*args), lambda: tk.selective_scan(*args, None),
                 lambda: tk.selective_scan(*args, D=None)):
        y, last = call()
        want_y, want_last = reference(*ref_args, zero_d)
        torch.testing.assert_close(y.double(), want_y.detach(), rtol=tol, atol=tol * max(1.0, want_y.abs().max().item()))
        torch.testing.assert_close(last.double(), want_last.detach(), rtol=tol, atol=tol)
        g = torch.randn(y.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(72))
        got = torch.autograd.grad((y.double() * g).sum(), args)
        want = torch.autograd.grad((want_y * g).sum(), ref_args)
        for a, b in zip(got, want):
            torch.testing.assert_close(a.double(), b, rtol=tol * 10, atol=tol * 10 * max(1.0, b.abs().max().item()))


def test_vmap_and_func_grad():
    """vmap over a batch of u (the batch rule gives it another batch dim),
    torch.func.grad of a loss: against the reference per sample."""
    u, delta, A, B, C, D = inputs((2,), 3, 6, 4, torch.float32, seed=21)
    us = torch.randn(5, *u.shape)
    y = torch.vmap(lambda uu: tk.selective_scan(uu, delta, A, B, C, D)[0])(us)
    want = torch.stack([reference(uu, delta, A, B, C, D)[0] for uu in us])
    torch.testing.assert_close(y, want, rtol=2e-5, atol=2e-5)
    g = torch.func.grad(lambda uu: tk.selective_scan(uu, delta, A, B, C, D)[0].square().sum())(u)
    g_want = torch.func.grad(lambda uu: reference(uu, delta, A, B, C, D)[0].square().sum())(u)
    torch.testing.assert_close(g, g_want, rtol=1e-4, atol=1e-4)


def test_scratch_is_not_returned(tkc):
    assert len(tk.selective_scan.default._schema.returns) == 2
    assert len(tk.selective_scan_backward_ue.default._schema.returns) == 4
    plan = subprocess.run([tkc, "plan", "--dtype", "f32", SPEC], check=True, capture_output=True, text=True).stdout
    assert "  scratch: h, allocated for each call (uninitialised) and not returned\n" in plan
    assert "  scratch: dh, gu, gd, da, allocated for each call (uninitialised) and not returned\n" in plan


def test_scratch_in_an_in_place_op():
    """An op that reverses its argument in place through a scratch row: the
    'mut' argument is the one after the scratch tensor among the outputs."""
    rev = torch_tk.kernel("""
        op scratch_reverse_(p: mut float[..., N]):
            scratch t: p.dtype[..., N]
            for _ in p:
                for i in range(N):
                    t[i] = p[i]
                for i in range(N):
                    p[i] = t[N - 1 - i]
        """)
    x = torch.randn(3, 10)
    want = x.flip(-1)
    v = x._version
    rev(x)
    assert torch.equal(x, want)
    assert x._version > v


def test_an_empty_call_with_scratch_runs_nothing():
    """Returned outputs all empty: nothing runs, however large the scratch
    (x, read in every iteration, may then be empty)."""
    f = torch_tk.kernel("""
        op scratch_only(x: float32[R, N], w: float32[M]) -> y: float32[R, N]:
            scratch t: float32[R, M]
            for r, _ in y:
                for j in range(M):
                    t[r, j] = w[j]
                s = x[r, 0]
                for i in range(N):
                    y[r, i] = s + t[r, 0]
        """)
    assert f(torch.randn(3, 0), torch.randn(4)).shape == (3, 0)
    torch.testing.assert_close(f(torch.ones(2, 3), torch.full((4,), 2.0)), torch.full((2, 3), 3.0))


def test_a_scratch_size_error_names_the_scratch_tensor():
    f = torch_tk.kernel("""
        op scratch_minus(x: float32[N]) -> y: float32[N]:
            scratch t: float32[N - 2]
            for _ in y:
                for i in range(N - 2):
                    t[i] = x[i]
                for i in range(N):
                    y[i] = x[i]
        """)
    with pytest.raises(RuntimeError, match=r"^tk\.scratch_minus: scratch tensor 't': dim 0 would be -1; it must be "
                                           r">= 0 \(from argument 'x'\)"):
        f(torch.randn(1))
    torch.testing.assert_close(f(torch.ones(3)), torch.ones(3))


def test_errors():
    u, delta, A, B, C, D = inputs((2,), 4, 8, 3, torch.float32, seed=1)
    with pytest.raises(RuntimeError, match=r"^tk\.selective_scan: .*'B'"):
        tk.selective_scan(u, delta, A, B[..., :2, :], C, D)
    with pytest.raises(RuntimeError, match=r"^tk\.selective_scan: .*'D'"):
        tk.selective_scan(u, delta, A, B, C, D[:3])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_matches_cpu(dtype):
    args = [a.requires_grad_() for a in inputs((2,), 64, 128, 16, dtype, seed=3)]
    cuda = [a.detach().cuda().requires_grad_() for a in args]
    y, last = tk.selective_scan(*args)
    yc, lastc = tk.selective_scan(*cuda)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(yc.cpu(), y, **tol)
    torch.testing.assert_close(lastc.cpu(), last, **tol)
    g = torch.randn(y.shape, dtype=dtype)
    got = torch.autograd.grad((yc * g.cuda()).sum(), cuda)
    want = torch.autograd.grad((y * g).sum(), args)
    for a, b in zip(got, want):
        torch.testing.assert_close(a.cpu().double(), b.double(), rtol=1e-3, atol=1e-3 * b.abs().max().item())
