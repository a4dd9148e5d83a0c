"""Batch dims (`...`) broadcast across a call's inputs as torch broadcasts
operands (docs/spec.md, Parameters and shapes): aligned from the innermost,
each pair of sizes equal or one of them 1, a missing dim standing for 1.
The kernels read a broadcast input in place (stride 0), nothing copied.

* values against torch's own broadcasting, on fresh random inputs, for
  batch shapes that differ in rank, in size-1 dims and both, strided and
  empty ones, float32 and float64, CPU (and CUDA where there is one);
* gradients: the backward op returns full-batch gradients and torch's
  engine sums them to each input's shape, checked against torch's autograd
  of x * a + b, and by gradcheck;
* torch.compile with dynamic shapes (the symbolic Meta kernel broadcasts
  too) and opcheck;
* what cannot broadcast is a call error naming both inputs' batch dims, and
  a 'mut' input must have the whole batch shape itself.

Outputs are poisoned first (the poisoned_outputs fixture).
"""

import random

import pytest
import torch
from torch.autograd import gradcheck

import torch_tk

pytestmark = pytest.mark.usefixtures("poisoned_outputs")
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU"))]
tk = torch.ops.tk

torch_tk.kernel("""
op bb_fma(x: float[..., N], a: x.dtype[..., N], b: x.dtype[..., N]) -> y: x.dtype[..., N]:
    backward bb_fma_backward
    for i in y:
        y[i] = x[i] * a[i] + b[i]

op bb_fma_backward(x: float[..., N], a: x.dtype[..., N], grad_y: x.dtype[..., N])
        -> (grad_x: x.dtype[..., N], grad_a: x.dtype[..., N], grad_b: x.dtype[..., N]):
    for i in grad_x:
        g = grad_y[i]
        grad_x[i] = g * a[i]
        grad_a[i] = g * x[i]
        grad_b[i] = g

op bb_rowsum(x: float[..., N], w: x.dtype[..., N]) -> (y: x.dtype[..., N], s: x.dtype[...]):
    for _ in y:
        t = 0.0
        for i in range(N):
            v = x[i] * w[i]
            y[i] = v
            t += v
        s[] = t

op bb_axpy_(p: mut float[..., N], g: p.dtype[..., N], lr: float):
    for i in p:
        p[i] = p[i] - lr * g[i]
""", file="test_batch_broadcast.py")

SHAPES = [  # batch dims of x, a, b (N appended)
    ((2, 3), (3,), ()),
    ((2, 1), (1, 4), (2, 4)),
    ((5,), (2, 1, 5), (1,)),
    ((), (), (3, 2)),
    ((0, 3), (3,), (1, 1)),
    ((1,), (1,), (1,)),
]


def fresh_seed():
    return random.randrange(2 ** 62)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_values_and_gradients_match_torch_broadcasting(device, dtype, shapes):
    seed = fresh_seed()
    g = torch.Generator().manual_seed(seed)
    n = 7
    x, a, b = (torch.randn(*s, n, generator=g, dtype=dtype).to(device).requires_grad_() for s in shapes)
    y = tk.bb_fma(x, a, b)
    want = x * a + b
    assert y.shape == want.shape, (seed, y.shape, want.shape)
    torch.testing.assert_close(y, want, msg=lambda m: f"seed {seed}: {m}")
    gy = torch.randn(want.shape, generator=g, dtype=dtype).to(device)
    got = torch.autograd.grad(y, (x, a, b), gy)
    ref = torch.autograd.grad(want, (x, a, b), gy)
    for t, r, name in zip(got, ref, "xab"):
        assert t.shape == r.shape, (seed, name, t.shape, r.shape)
        torch.testing.assert_close(t, r, msg=lambda m: f"seed {seed}: grad_{name}: {m}")


@pytest.mark.parametrize("device", DEVICES)
def test_row_loop_and_strided_broadcast(device):
    seed = fresh_seed()
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 3, 33, generator=g).to(device).transpose(0, 1)   # (3, 4, 33), strided batch
    w = torch.randn(4, 1, generator=g).to(device).expand(4, 33)         # (4, 33) read with stride 0 along N too
    y, s = tk.bb_rowsum(x, w)
    torch.testing.assert_close(y, x * w, msg=lambda m: f"seed {seed}: {m}")
    torch.testing.assert_close(s, (x * w).sum(-1), msg=lambda m: f"seed {seed}: {m}")


def test_gradcheck():
    g = torch.Generator().manual_seed(fresh_seed())
    x = torch.randn(2, 1, 3, generator=g, dtype=torch.float64, requires_grad=True)
    a = torch.randn(4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, generator=g, dtype=torch.float64, requires_grad=True)
    assert gradcheck(tk.bb_fma, (x, a, b))


def test_compile_dynamic_and_opcheck():
    f = torch.compile(lambda x, a, b: tk.bb_fma(x, a, b) * 2, fullgraph=True, dynamic=True)
    for bx, ba in (((2, 3), (3,)), ((5, 4), (1, 4)), ((6,), (2, 6))):
        x, a, b = torch.randn(*bx, 8), torch.randn(*ba, 8), torch.randn(8)
        torch.testing.assert_close(f(x, a, b), (x * a + b) * 2)
    torch.library.opcheck(tk.bb_fma.default, (torch.randn(2, 3, 5), torch.randn(3, 5), torch.randn(1, 1, 5)))
    torch.library.opcheck(tk.bb_rowsum.default, (torch.randn(2, 3, 5), torch.randn(3, 5)))


def test_what_cannot_broadcast():
    with pytest.raises(RuntimeError, match=r"^tk\.bb_fma: argument 'a': its batch dims \(\.\.\.\) are \[3\], which do "
                                           r"not broadcast with those of 'x', \[2, 4\] \(3 against 4, as torch "
                                           r"broadcasts: equal, or one of them 1\)$"):
        tk.bb_fma(torch.randn(2, 4, 5), torch.randn(3, 5), torch.randn(5))
    with pytest.raises(RuntimeError, match=r"do not broadcast with the other inputs'"):   # the symbolic Meta kernel
        torch.compile(lambda x, a: tk.bb_fma(x, a, a), fullgraph=True, dynamic=True)(
            torch.randn(2, 4, 5), torch.randn(3, 5))
    p = torch.zeros(3, 5)
    tk.bb_axpy_(p, torch.ones(5), 0.5)                       # g broadcast: fine
    assert torch.equal(p, torch.full((3, 5), -0.5))
    with pytest.raises(RuntimeError, match=r"^tk\.bb_axpy_: argument 'p' is updated in place \('mut'\), so its batch "
                                           r"dims \(\.\.\.\) must be the call's, \[2, 3\], not \[3\]$"):
        tk.bb_axpy_(p, torch.ones(2, 3, 5), 0.5)
    assert torch.equal(p, torch.full((3, 5), -0.5))
