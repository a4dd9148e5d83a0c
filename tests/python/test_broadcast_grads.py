"""Gradients with batch dims their parameter lacks (docs/autograd.md,
"Gradients summed over batch dims").

A backward op may return `grad_weight: x.dtype[..., N]` for a parameter
`weight: x.dtype[N]`; torch's autograd engine sums it to the parameter's
shape, as it does for every broadcast operand. Checked against float64
autograd of an independent torch formulation (x * rsqrt(mean(x^2) + eps) * w,
x * w), on fresh random inputs: eager gradients for 0 to 2 batch dims and an
empty batch, a 2-d weight, gradcheck, torch.compile (aot_eager, static and
dynamic shapes), torch.func.grad and vmap(grad); the backward op's own output
keeps the batch dims; a gradient that cannot be summed to its parameter's
shape is torch's RuntimeError naming both shapes; `...` inputs broadcast
(batch dims that do not broadcast are a call error).
"""

import pytest
import torch
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd
from torch.autograd import gradcheck

import torch_tk

tk = torch.ops.tk

BG_SPEC = """
op bg_rms(x: float[..., N], weight: x.dtype[N], eps: float) -> y: x.dtype[..., N]:
    backward bg_rms_backward_x, bg_rms_backward_w
    for _ in y:
        ms = 0.0
        for i in range(N):
            ms += x[i] * x[i]
        rr = 1.0 / sqrt(ms / float(N) + eps)
        for i in range(N):
            y[i] = x[i] * rr * weight[i]

op bg_rms_backward_x(x: float[..., N], weight: x.dtype[N], eps: float, grad_y: x.dtype[..., N])
        -> grad_x: x.dtype[..., N]:
    for _ in grad_x:
        ms = 0.0
        a = 0.0
        for i in range(N):
            ms += x[i] * x[i]
            a += grad_y[i] * weight[i] * x[i]
        rr = 1.0 / sqrt(ms / float(N) + eps)
        a = a / float(N) * rr * rr * rr
        for i in range(N):
            grad_x[i] = rr * grad_y[i] * weight[i] - x[i] * a

# the batch dims stay: autograd sums them to weight's [N]
op bg_rms_backward_w(x: float[..., N], eps: float, grad_y: x.dtype[..., N]) -> grad_weight: x.dtype[..., N]:
    for _ in grad_weight:
        ms = 0.0
        for i in range(N):
            ms += x[i] * x[i]
        rr = 1.0 / sqrt(ms / float(N) + eps)
        for i in range(N):
            grad_weight[i] = grad_y[i] * x[i] * rr

# a 2-d weight: the gradient [..., K, N] is summed over the dims before K
op bg_mul2(x: float[..., K, N], w: x.dtype[K, N]) -> y: x.dtype[..., K, N]:
    backward bg_mul2_backward_x, bg_mul2_backward_w
    for k, n in y:
        y[k, n] = x[k, n] * w[k, n]
op bg_mul2_backward_x(w: float[K, N], grad_y: w.dtype[..., K, N]) -> grad_x: w.dtype[..., K, N]:
    for k, n in grad_x:
        grad_x[k, n] = grad_y[k, n] * w[k, n]
op bg_mul2_backward_w(x: float[..., K, N], grad_y: x.dtype[..., K, N]) -> grad_w: x.dtype[..., K, N]:
    for k, n in grad_w:
        grad_w[k, n] = grad_y[k, n] * x[k, n]

# the link check passes (grad_w [..., N] may stand for w [M]), but at a call
# with M != N (and not 1) the gradient cannot be summed to w's shape
op bg_bad(x: float[..., N], w: x.dtype[M]) -> y: x.dtype[..., N]:
    backward bg_bad_backward_x, bg_bad_backward_w
    for i in y:
        y[i] = x[i] * w[0]
op bg_bad_backward_x(w: float[M], grad_y: w.dtype[..., N]) -> grad_x: w.dtype[..., N]:
    for i in grad_x:
        grad_x[i] = grad_y[i] * w[0]
op bg_bad_backward_w(x: float[..., N], grad_y: x.dtype[..., N]) -> grad_w: x.dtype[..., N]:
    for i in grad_w:
        grad_w[i] = grad_y[i] * x[i]

op bg_add(x: float[..., N], b: x.dtype[..., N]) -> y: x.dtype[..., N]:
    for i in y:
        y[i] = x[i] + b[i]
"""

EPS = 1e-5


@pytest.fixture(scope="module")
def ops():
    torch_tk.kernel(BG_SPEC, file="bg.tk")
    return tk


def gen(seed):
    return torch.Generator().manual_seed(seed)


def rms_ref(x, w, eps):
    """RMS norm in torch ops (rsqrt of the mean square): the reference."""
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps) * w


def ref_grads(f, args, g):
    """Gradients of sum(f(*args) * g) w.r.t. every tensor in args, in float64."""
    leaves = [a.detach().to(torch.float64).requires_grad_(True) for a in args]
    return torch.autograd.grad(f(*leaves), leaves, g.to(torch.float64))


def inputs(shape, dtype, seed):
    g = gen(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    w = (torch.rand(shape[-1], generator=g, dtype=torch.float64) + 0.5).to(dtype)
    grad = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    return x, w, grad


# ---- eager -------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(4, 7, 16), (5, 16), (16,), (0, 16)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_eager_grads_vs_float64(ops, shape, dtype):
    x, w, g = inputs(shape, dtype, seed=sum(shape) + dtype.itemsize)
    x.requires_grad_(True)
    w.requires_grad_(True)
    y = ops.bg_rms(x, w, EPS)
    gx, gw = torch.autograd.grad(y, (x, w), g)
    rx, rw = ref_grads(lambda x, w: rms_ref(x, w, EPS), (x, w), g)
    assert gx.shape == x.shape and gw.shape == w.shape == (16,)
    assert gx.dtype == gw.dtype == dtype
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gx, rx.to(dtype), **tol)
    torch.testing.assert_close(gw, rw.to(dtype), **tol)
    if shape[0] == 0:   # nothing to sum: zeros, not garbage
        assert torch.equal(gw, torch.zeros(16, dtype=dtype))


def test_backward_op_keeps_the_batch_dims(ops):
    """The backward op's own output is batch-shaped; the engine's sum of it is the weight's gradient."""
    x, w, g = inputs((3, 5, 8), torch.float64, seed=1)
    per_row = ops.bg_rms_backward_w(x, EPS, g)
    assert per_row.shape == (3, 5, 8)
    rr = torch.rsqrt(x.square().mean(-1, keepdim=True) + EPS)
    torch.testing.assert_close(per_row, g * x * rr)
    w.requires_grad_(True)
    (gw,) = torch.autograd.grad(ops.bg_rms(x, w, EPS), w, g)
    torch.testing.assert_close(gw, per_row.sum((0, 1)))


@pytest.mark.parametrize("shape", [(3, 4, 6), (2, 3, 4, 6), (4, 6)])
def test_two_dim_weight(ops, shape):
    g0 = gen(len(shape))
    x = torch.randn(shape, generator=g0, dtype=torch.float64, requires_grad=True)
    w = torch.randn(shape[-2:], generator=g0, dtype=torch.float64, requires_grad=True)
    g = torch.randn(shape, generator=g0, dtype=torch.float64)
    got = torch.autograd.grad(ops.bg_mul2(x, w), (x, w), g)
    ref = ref_grads(lambda x, w: x * w, (x, w), g)
    assert got[1].shape == w.shape
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("shape", [(3, 4, 5), (4, 5), (5,)])
def test_gradcheck(ops, shape):
    g0 = gen(10 + len(shape))
    x = torch.randn(shape, generator=g0, dtype=torch.float64, requires_grad=True)
    w = (torch.rand(shape[-1], generator=g0, dtype=torch.float64) + 0.5).requires_grad_(True)
    assert gradcheck(lambda x, w: ops.bg_rms(x, w, 0.1), (x, w))


# ---- torch.compile, torch.func ------------------------------------------------------------


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_aot_eager(ops, dynamic):
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, w: ops.bg_rms(x, w, EPS), backend="aot_eager", fullgraph=True,
                             dynamic=dynamic)
    for i, shape in enumerate([(4, 7, 16), (5, 16), (6, 16)]):
        x, w, g = inputs(shape, torch.float32, seed=20 + i)
        x.requires_grad_(True)
        w.requires_grad_(True)
        gx, gw = torch.autograd.grad(compiled(x, w), (x, w), g)
        rx, rw = ref_grads(lambda x, w: rms_ref(x, w, EPS), (x, w), g)
        assert gw.shape == (16,)
        torch.testing.assert_close(gx, rx.float(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(gw, rw.float(), rtol=1e-5, atol=1e-5)


def test_compiled_backward_graph_sums(ops):
    """AOTAutograd traces the engine's reduction: the backward graph holds the backward op and a sum."""
    torch._dynamo.reset()
    graphs = []

    def keep(g, _):
        graphs.append(g)
        return make_boxed_func(g)

    backend = aot_autograd(fw_compiler=lambda g, _: make_boxed_func(g), bw_compiler=keep)
    x, w, g = inputs((4, 7, 16), torch.float32, seed=30)
    x.requires_grad_(True)
    w.requires_grad_(True)
    compiled = torch.compile(lambda x, w: ops.bg_rms(x, w, EPS), backend=backend, fullgraph=True)
    gw = torch.autograd.grad(compiled(x, w), w, g)[0]
    torch.testing.assert_close(gw, ref_grads(lambda x, w: rms_ref(x, w, EPS), (x, w), g)[1].float(),
                               rtol=1e-5, atol=1e-5)
    targets = {str(n.target) for n in graphs[-1].graph.nodes if n.op == "call_function"}
    assert "tk.bg_rms_backward_w.default" in targets
    assert any(t.startswith("aten.sum") for t in targets), targets


def test_torch_func_grad_and_vmap_grad(ops):
    x, w, t = inputs((4, 7, 16), torch.float64, seed=40)

    def loss(w, x, t, norm):
        return (norm(x, w, EPS) - t).square().sum()

    tk_norm = ops.bg_rms
    gw = torch.func.grad(loss)(w, x, t, tk_norm)
    assert gw.shape == (16,)
    torch.testing.assert_close(gw, torch.func.grad(loss)(w, x, t, rms_ref))
    gw2, gx = torch.func.grad(loss, argnums=(0, 1))(w, x, t, tk_norm)
    rw, rx = torch.func.grad(loss, argnums=(0, 1))(w, x, t, rms_ref)
    torch.testing.assert_close(gw2, rw)
    torch.testing.assert_close(gx, rx)
    # per-sample weight gradients: one [16] gradient per sample of x's first dim
    per = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0, 0, None))(w, x, t, tk_norm)
    ref = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0, 0, None))(w, x, t, rms_ref)
    assert per.shape == (4, 16)
    torch.testing.assert_close(per, ref)


# ---- errors -------------------------------------------------------------------------------


def test_gradient_that_cannot_be_summed_is_an_error(ops):
    """grad_w [4, 8] for w [3]: torch's engine refuses it, naming both shapes."""
    x = torch.randn(4, 8, generator=gen(50), requires_grad=True)
    w = torch.randn(3, generator=gen(51), requires_grad=True)
    y = ops.bg_bad(x, w)
    with pytest.raises(RuntimeError, match=r"returned an invalid gradient at index 1 - got \[4, 8\] but expected "
                                           r"shape compatible with \[3\]"):
        torch.autograd.grad(y.sum(), (x, w))


def test_batch_inputs_broadcast(ops):
    """`...` inputs broadcast as torch's operands do: b [N] beside x [4, N]
    reads b for every row (test_batch_broadcast.py has their gradients);
    [3, N] beside [4, N] is a call error naming both."""
    x, b = torch.randn(4, 8, generator=gen(60)), torch.randn(8, generator=gen(61))
    torch.testing.assert_close(ops.bg_add(x, b), x + b)
    with pytest.raises(RuntimeError, match=r"tk.bg_add: argument 'b': its batch dims \(\.\.\.\) are \[3\], which "
                                           r"do not broadcast with those of 'x', \[4\]"):
        ops.bg_add(x, torch.randn(3, 8))
