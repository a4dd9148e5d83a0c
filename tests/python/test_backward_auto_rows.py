"""Derived backward ops of row loops (`backward auto` on `for r, _ in y`,
docs/autograd.md, Row loops; compiler/autodiff_rows.c), on the ops of
tests/specs/autodiff_rows.tk, against torch's autograd of the same formula
on fresh random inputs, outputs poisoned first:

* layer norm (weight and bias given, or None) against F.layer_norm, float64
  and float32; gradcheck, and (a float64 copy with `backward auto 2`)
  gradgradcheck with the bias requiring grad, which the derived op never
  reads, and a gradient penalty against torch's;
* softmax over any batch against torch.softmax, float64 and float32, a row
  of ties; gradcheck and gradgradcheck;
* a row's max and min (ties share the gradient as torch.amax's), sums over
  part of the row (from 1, up to an int parameter), `s = s + e` and
  `s -= e`, a branch, two outputs stored in different loops, a tensor read
  and an output stored at the row's level: against torch, with ties made on
  purpose, and gradcheck;
* the element-wise form with inner loops (a row reduced to one value):
  logsumexp, a row dot product over batch dims with a broadcast weight;
* a parameter an op never reads has gradient zero, not an error.

The comparisons with torch run on CUDA too when there is a GPU (ci/gpu-check.sh
runs the ids naming cuda), with rows of 1,000 elements there as well.
"""
import os

import pytest
import torch
import torch.nn.functional as F

import torch_tk

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.usefixtures("poisoned_outputs")
tk = torch.ops.tk

torch_tk.load(os.path.join(ROOT, "tests", "specs", "autodiff_rows.tk"))


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU"))]


def gen(seed):
    return torch.Generator().manual_seed(seed)


def grads(out, inputs, grad_out):
    """The gradients of sum(out * grad_out) (outs and grad_outs: tuples) w.r.t. inputs."""
    return torch.autograd.grad(out, inputs, grad_out, allow_unused=True)


def rand(g, *shape, dtype, device):
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(device=device, dtype=dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("R, N", [(6, 37), (33, 1000)])
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 2e-5)])
@pytest.mark.parametrize("affine", [True, False])
def test_layernorm_against_torch(dtype, tol, affine, R, N, device):
    g = gen(1)
    x = rand(g, R, N, dtype=dtype, device=device).requires_grad_()
    w = rand(g, N, dtype=dtype, device=device).requires_grad_() if affine else None
    b = rand(g, N, dtype=dtype, device=device).requires_grad_() if affine else None
    gy = rand(g, R, N, dtype=dtype, device=device)
    inputs = (x, w, b) if affine else (x,)
    y = tk.ar_layernorm(x, w, b, 1e-5)
    want = F.layer_norm(x, (N,), w, b, 1e-5)
    torch.testing.assert_close(y, want, rtol=tol, atol=tol)
    for got, ref in zip(grads(y, inputs, gy), grads(want, inputs, gy)):
        torch.testing.assert_close(got, ref, rtol=tol, atol=tol)


LAYERNORM2 = open(os.path.join(ROOT, "tests", "specs", "autodiff_rows.tk")).read().split("# softmax")[0]
LAYERNORM2 = LAYERNORM2.replace("ar_layernorm(x: float32|float64", "ar_layernorm2(x: float64").replace(
    "backward auto\n", "backward auto 2\n")


def test_layernorm_gradcheck_and_second_derivatives():
    g = gen(2)
    x = torch.randn(3, 7, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(7, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(7, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w, b: tk.ar_layernorm(x, w, b, 1e-5), (x, w, b))
    torch_tk.kernel(LAYERNORM2, file="autodiff_rows.tk")
    f = lambda x, w, b: tk.ar_layernorm2(x, w, b, 1e-5)
    # the bias requires grad, and ar_layernorm_backward never reads it: its gradient is zero, not an error
    assert torch.autograd.gradgradcheck(f, (x, w, b))
    # a gradient penalty against torch's
    gy = torch.randn(3, 7, generator=g, dtype=torch.float64)
    def penalty(fn):
        (gx,) = torch.autograd.grad(fn(x, w, b), x, gy, create_graph=True)
        return torch.autograd.grad((gx * gx).sum(), (x, w))
    ref = lambda x, w, b: F.layer_norm(x, (7,), w, b, 1e-5)
    for got, want in zip(penalty(f), penalty(ref)):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("N", [41, 1000])
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-6)])
def test_softmax_against_torch(dtype, tol, N, device):
    g = gen(3)
    x = 3 * rand(g, 2, 5, N, dtype=dtype, device=device)
    x[1, 2] = 0.5   # a row of ties: every element the max
    x.requires_grad_()
    gy = rand(g, 2, 5, N, dtype=dtype, device=device)
    y = tk.ar_softmax(x)
    want = torch.softmax(x, -1)
    torch.testing.assert_close(y, want, rtol=tol, atol=tol)
    torch.testing.assert_close(grads(y, x, gy)[0], grads(want, x, gy)[0], rtol=tol, atol=tol)
    xs = rand(g, 3, 6, dtype=torch.float64, device=device).requires_grad_()
    assert torch.autograd.gradcheck(tk.ar_softmax, (xs,))
    assert torch.autograd.gradgradcheck(tk.ar_softmax, (xs,))   # backward auto 2


def parts_ref(x, c, k):
    """ar_parts in torch ops (amax/amin: ties share the gradient evenly)."""
    N = x.shape[1]
    hi = torch.maximum(x.amax(1, keepdim=True), torch.tensor(-float("inf"), dtype=x.dtype))
    lo = torch.minimum(x.amin(1, keepdim=True), torch.zeros((), dtype=x.dtype))
    a = (x * x).sum(1, keepdim=True)
    b = c[:, None] * c[:, None] - torch.sin(x[:, 1:min(k, N)]).sum(1, keepdim=True)
    y = torch.where(x > 0, (x - hi) * a + b, torch.cos(x) * b - lo)
    q = torch.sin(a * x / N).sum(1, keepdim=True)
    return y, torch.tanh(x * a), (a * b + q)[:, 0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k", [0, 5, 100])
def test_max_min_ranges_and_three_outputs(k, device):
    g = gen(10 + k)
    x = rand(g, 5, 9, dtype=torch.float64, device=device)
    x[1, 3] = x[1, 6] = x[1].max() + 0.5   # two maxima: the gradient splits between them
    x[2, :4] = x[2].min() - 0.25             # four minima
    x[3, 2] = 0.0                            # min's initial 0.0 ties with x[3, 2] when the row is positive
    x[3] = x[3].abs()
    x.requires_grad_()
    c = rand(g, 5, dtype=torch.float64, device=device).requires_grad_()
    gs = [rand(g, 5, 9, dtype=torch.float64, device=device) for _ in range(2)] + [rand(g, 5, dtype=torch.float64,
                                                                                        device=device)]
    got, want = tk.ar_parts(x, c, k), parts_ref(x, c, k)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    for a, b in zip(grads(got, (x, c), gs), grads(want, (x, c), gs)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    xs = rand(g, 3, 8, dtype=torch.float64, device=device).requires_grad_()
    cs = rand(g, 3, dtype=torch.float64, device=device).requires_grad_()
    assert torch.autograd.gradcheck(lambda x, c: tk.ar_parts(x, c, k), (xs, cs))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 2e-5)])
def test_row_reductions_in_the_element_wise_form(dtype, tol, device):
    """`for r in y` with inner loops over x's last dim: logsumexp with a
    value read at the row's index (ties of the max included), and a row dot
    product over batch dims with a broadcast weight, against torch."""
    g = gen(20)
    x = rand(g, 6, 13, dtype=torch.float64, device=device)
    x[2, 4] = x[2, 9] = x[2].max() + 1.0
    x = x.to(dtype).requires_grad_()
    b = rand(g, 6, dtype=dtype, device=device).requires_grad_()
    gy = rand(g, 6, dtype=dtype, device=device)
    y, want = tk.ar_lse(x, b), torch.logsumexp(x, 1) + b * b
    torch.testing.assert_close(y, want, rtol=tol, atol=tol)
    for a, r in zip(grads(y, (x, b), gy), grads(want, (x, b), gy)):
        torch.testing.assert_close(a, r, rtol=tol, atol=tol)
    x3 = rand(g, 2, 3, 5, 7, dtype=dtype, device=device).requires_grad_()
    w = rand(g, 7, dtype=dtype, device=device).requires_grad_()
    g3 = rand(g, 2, 3, 5, dtype=dtype, device=device)
    y, want = tk.ar_rowdot(x3, w), torch.tanh(x3 @ w)
    torch.testing.assert_close(y, want, rtol=tol, atol=tol)
    for a, r in zip(grads(y, (x3, w), g3), grads(want, (x3, w), g3)):
        torch.testing.assert_close(a, r, rtol=tol, atol=tol)
    if dtype == torch.float64:
        assert torch.autograd.gradcheck(tk.ar_lse, (x.detach()[:3, :5].clone().requires_grad_(),
                                                    b.detach()[:3].clone().requires_grad_()))


def test_a_parameter_the_op_never_reads_has_gradient_zero():
    """An input the op's body never reads (here a written op's; the derived
    ops' biases alike) has gradient zero: requiring grad there is no error."""
    op = torch_tk.kernel("""
op ar_unread(x: float[N], like: x.dtype[N]) -> y: x.dtype[N]:
    backward ar_unread_backward
    for i in y:
        y[i] = x[i] * 3.0
op ar_unread_backward(grad_y: float[N]) -> grad_x: grad_y.dtype[N]:
    for i in grad_x:
        grad_x[i] = grad_y[i] * 3.0
""")
    x = torch.randn(4, dtype=torch.float64, requires_grad=True)
    like = torch.randn(4, dtype=torch.float64, requires_grad=True)
    op(x, like).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((4,), 3.0, dtype=torch.float64))
    assert like.grad is None   # autograd's zero


def test_opcheck_and_torch_compile():
    """The derived row op behind torch.library.opcheck (schema, fake tensor,
    autograd registration) and a compiled training step's gradients."""
    g = gen(4)
    x = torch.randn(3, 5, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, generator=g, dtype=torch.float64, requires_grad=True)
    torch.library.opcheck(tk.ar_layernorm.default, (x, w, None, 1e-5))
    loss = lambda x, w: tk.ar_layernorm(x, w, None, 1e-5).sin().sum()
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    for got, want in zip(torch.autograd.grad(compiled(x, w), (x, w)), torch.autograd.grad(loss(x, w), (x, w))):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
