"""Gradients of the tk ops: the backward specs (ops/*.tk) wired by the C++
Autograd kernel (shim/autograd.cpp).

- gradcheck in float64 on small shapes, with batch dims and non-contiguous inputs;
- rwkv_forward against autograd of the F.conv1d formulation at B=4, C=64, T=128;
- brick_pad against autograd of an independent torch gather (reference.brick_pad_index);
- float16 / bfloat16 forward and backward against float64, with stated bounds;
- torch.autocast (promotion of tied dtypes, nothing cast down), errors,
  determinism, only the needed backward ops run.
Every test runs on the CPU and, when torch.cuda.is_available(), on CUDA.
"""

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

import torch_tk
from torch_tk.reference import brick_pad_index, rwkv_conv1d, rwkv_inputs

tk = torch.ops.tk

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")),
]

# Bounds on max|err| / max|ref| for half inputs, against float64 computed from
# the same rounded inputs and the same rounded incoming gradient. tk
# accumulates in float32, so the error is the final rounding to the half type:
# half an ulp of the largest value, 2**-11 = 4.9e-4 (float16) and 2**-8 =
# 3.9e-3 (bfloat16), plus float32 summation (<= T * 2**-24 ~ 3e-5 at T = 512).
# The bounds leave ~4x margin. Accumulating in the half type instead would
# miss them by far at T = 512 (errors ~ T * ulp).
HALF_BOUND = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def rel_err(got, ref):
    ref = ref.to(torch.float64)
    return ((got.to(torch.float64) - ref).abs().max() / ref.abs().max()).item()


def leaf(t):
    """t as a leaf that requires grad, keeping its strides."""
    return t.detach().requires_grad_(True)


def noncontig(shape, dtype, device, seed):
    """A non-contiguous tensor of shape: every other element of a wider one, transposed."""
    gen = torch.Generator().manual_seed(seed)
    wide = torch.rand(*shape[:-2], shape[-1], 2 * shape[-2], generator=gen, dtype=torch.float64)
    t = wide[..., ::2].transpose(-1, -2).to(device=device, dtype=dtype)
    assert t.shape == tuple(shape) and (not t.is_contiguous() or min(shape) == 1)
    return t


# ---- gradcheck (float64) ------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("B, C, T", [(1, 1, 1), (2, 3, 5), (3, 2, 8)])
@pytest.mark.parametrize("layout", ["contiguous", "noncontiguous"])
def test_gradcheck_rwkv(device, B, C, T, layout):
    if layout == "contiguous":
        w, k = rwkv_inputs(B, C, T, dtype=torch.float64, device=device, seed=B + C + T)
    else:
        w, k = noncontig((C, T), torch.float64, device, 1), noncontig((B, C, T), torch.float64, device, 2)
    w, k = leaf(w - 0.5), leaf(k)
    assert gradcheck(lambda w, k: tk.rwkv_forward(w, k, 0.25), (w, k))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "shape, pw, ph, stagger, height, width",
    [
        ((3, 4), 5, 3, 2, None, None),          # plain
        ((2, 3, 4), 5, 3, -7, None, None),      # batch dim, negative stagger
        ((2, 1, 3, 2), -1, 4, 3, 9, 5),         # two batch dims, negative pw, explicit size
        ((2, 3), 0, 0, 1, 1, 1),                # a single output pixel
    ],
)
@pytest.mark.parametrize("layout", ["contiguous", "noncontiguous"])
def test_gradcheck_brick_pad(device, shape, pw, ph, stagger, height, width, layout):
    if layout == "contiguous":
        tile = torch.rand(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(3)).to(device)
    else:
        tile = noncontig(shape, torch.float64, device, 3)
    tile = leaf(tile)
    assert gradcheck(lambda t: tk.brick_pad(t, pw, ph, stagger, height, width), (tile,))


# ---- against autograd of independent formulations --------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype, bound", [(torch.float64, 1e-12), (torch.float32, 2e-5)])
def test_rwkv_grads_match_conv1d(device, dtype, bound):
    B, C, T = 4, 64, 128
    w, k = rwkv_inputs(B, C, T, dtype=dtype, device=device, seed=7)
    grad = torch.randn(B, C, T, dtype=dtype, generator=torch.Generator().manual_seed(8)).to(device)
    w1, k1 = leaf(w), leaf(k)
    tk.rwkv_forward(w1, k1, 0.1).backward(grad)
    # the reference in float64, from the same inputs
    w2, k2 = leaf(w.double()), leaf(k.double())
    rwkv_conv1d(w2, k2, 0.1).backward(grad.double())
    assert w1.grad.dtype == dtype and k1.grad.dtype == dtype
    assert rel_err(w1.grad, w2.grad) < bound
    assert rel_err(k1.grad, k2.grad) < bound


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "shape, pw, ph, stagger, height, width",
    [
        ((48, 32), 300, 200, 10, None, None),   # the seed's tile and stagger, a smaller image
        ((2, 5, 7), 11, 6, -4, None, None),
        ((3, 4, 6), -2, 9, 13, 21, 3),
    ],
)
def test_brick_pad_grad_matches_gather(device, shape, pw, ph, stagger, height, width):
    gen = torch.Generator().manual_seed(5)
    tile = torch.rand(shape, dtype=torch.float64, generator=gen).to(device)
    t1, t2 = leaf(tile), leaf(tile)
    out = tk.brick_pad(t1, pw, ph, stagger, height, width)
    grad = torch.randn(out.shape, dtype=torch.float64, generator=gen).to(device)
    out.backward(grad)
    brick_pad_index(t2, pw, ph, stagger, height, width).backward(grad)
    torch.testing.assert_close(t1.grad, t2.grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
def test_brick_pad_grad_counts_readers(device):
    """With dL/dout = 1, dL/dtile[i, j] is the number of output pixels showing tile[i, j]."""
    tile = leaf(torch.rand(5, 7, dtype=torch.float64, device=device))
    out = tk.brick_pad(tile, 9, 4, 3)
    out.sum().backward()
    assert tile.grad.sum().item() == out.numel()
    assert tile.grad.min().item() >= 1


# ---- half precision --------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rwkv_half_forward_backward_vs_float64(device, dtype):
    B, C, T = 2, 4, 512
    w, k = rwkv_inputs(B, C, T, dtype=dtype, device=device, seed=9)
    w = w / T  # outputs of order 1
    grad = torch.rand(B, C, T, generator=torch.Generator().manual_seed(10)).to(device=device, dtype=dtype)
    w1, k1 = leaf(w), leaf(k)
    out = tk.rwkv_forward(w1, k1, 0.1)
    out.backward(grad)
    w2, k2 = leaf(w.double()), leaf(k.double())
    ref = rwkv_conv1d(w2, k2, 0.1)
    ref.backward(grad.double())
    assert out.dtype == dtype and w1.grad.dtype == dtype and k1.grad.dtype == dtype
    bound = HALF_BOUND[dtype]
    assert rel_err(out, ref) < bound
    assert rel_err(w1.grad, w2.grad) < bound
    assert rel_err(k1.grad, k2.grad) < bound


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_brick_pad_half_backward_vs_float64(device, dtype):
    tile = torch.rand(2, 6, 5, generator=torch.Generator().manual_seed(11)).to(device=device, dtype=dtype)
    t1, t2 = leaf(tile), leaf(tile.double())
    out = tk.brick_pad(t1, 40, 30, 3)   # each tile pixel is read ~ 90 times
    grad = torch.rand(out.shape, generator=torch.Generator().manual_seed(12)).to(device=device, dtype=dtype)
    out.backward(grad)
    brick_pad_index(t2, 40, 30, 3).backward(grad.double())
    assert torch.equal(out.double(), brick_pad_index(tile.double(), 40, 30, 3))  # a copy: exact
    assert t1.grad.dtype == dtype
    assert rel_err(t1.grad, t2.grad) < HALF_BOUND[dtype]


# ---- autocast ------------------------------------------------------------------------------

AUTOCAST = [("cpu", torch.bfloat16),
            pytest.param("cuda", torch.float16,
                         marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU"))]


@pytest.mark.parametrize("device, low", AUTOCAST)
def test_autocast_promotes_tied_dtypes(device, low):
    """A float32 parameter and a low-precision activation meet: computed in float32."""
    w, k = rwkv_inputs(2, 3, 6, device=device, seed=13)
    w1, k1 = leaf(w), leaf(k.to(low))
    with torch.autocast(device, dtype=low):
        out = tk.rwkv_forward(w1, k1, 0.1)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, tk.rwkv_forward(w, k.to(low).float(), 0.1))
    out.sum().backward()
    assert w1.grad.dtype == torch.float32 and k1.grad.dtype == low
    with pytest.raises(RuntimeError, match="dtype"):    # the same call without autocast
        tk.rwkv_forward(w, k.to(low), 0.1)


@pytest.mark.parametrize("device, low", AUTOCAST)
def test_autocast_casts_nothing_down(device, low):
    w, k = rwkv_inputs(2, 3, 6, device=device, seed=14)
    tile = torch.rand(3, 4, device=device)
    with torch.autocast(device, dtype=low):
        assert tk.rwkv_forward(w, k, 0.1).dtype == torch.float32
        assert tk.rwkv_forward(w.to(low), k.to(low), 0.1).dtype == low
        assert tk.brick_pad(tile, 2, 1, 3).dtype == torch.float32
        assert tk.brick_pad(tile.to(torch.int32), 2, 1, 3).dtype == torch.int32


@pytest.mark.parametrize("device, low", AUTOCAST)
def test_autocast_training_step(device, low):
    """Linear (autocast: low precision) -> rwkv with a float32 w: trains under autocast."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(6, 6).to(device)
    w = torch.nn.Parameter(torch.rand(6, 8, device=device) / 8)
    x = torch.randn(3, 8, 6, device=device)
    with torch.autocast(device, dtype=low):
        k = lin(x).transpose(1, 2)                # (B, C, T) in low precision
        assert k.dtype == low
        loss = tk.rwkv_forward(w, k, 0.0).square().mean()
    loss.backward()
    assert w.grad is not None and torch.isfinite(w.grad).all() and w.grad.abs().sum() > 0
    assert lin.weight.grad is not None and lin.weight.grad.dtype == torch.float32


# ---- behaviour ---------------------------------------------------------------------------


def test_grad_fn_is_the_cpp_node():
    w, k = rwkv_inputs(1, 2, 3, seed=15)
    out = tk.rwkv_forward(leaf(w), k, 0.1)
    assert out.requires_grad and out.grad_fn.name() == "TkRwkvForwardBackward"
    assert not tk.rwkv_forward(w, k, 0.1).requires_grad
    with torch.no_grad():
        assert not tk.rwkv_forward(leaf(w), k, 0.1).requires_grad


def test_only_needed_backward_ops_run():
    w, k = rwkv_inputs(2, 3, 6, seed=16)

    def backward_ops(w, k):
        out = tk.rwkv_forward(w, k, 0.1)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            out.sum().backward()
        return {e.key for e in prof.key_averages() if e.key.startswith("tk::")}

    assert backward_ops(leaf(w), k) == {"tk::rwkv_backward_w"}
    assert backward_ops(w, leaf(k)) == {"tk::rwkv_backward_k"}
    assert backward_ops(leaf(w), leaf(k)) == {"tk::rwkv_backward_w", "tk::rwkv_backward_k"}


def test_outputs_without_grad_are_not_differentiable():
    """An output no backward op takes grad_<output> of (a state saved for the
    backward) does not require grad: a gradient cannot be sent into it and
    dropped unseen. The other output's gradient is right, compiled too."""
    torch_tk.kernel("""
op scan_state(x: float[..., T]) -> (y: x.dtype[..., T], h: x.dtype[..., T]):
    backward scan_state_backward
    for _ in y:
        s = 0.0
        for t in range(T):
            s = 0.5 * s + x[t]
            h[t] = s
            y[t] = 2.0 * s

op scan_state_backward(h: float[..., T], grad_y: h.dtype[..., T]) -> grad_x: h.dtype[..., T]:
    for _ in grad_x:
        g = 0.0
        for j in range(T):
            t = T - 1 - j
            g = 0.5 * g + 2.0 * grad_y[t] + 0.0 * h[t]
            grad_x[t] = g
""", file="scan_state.tk")
    x = torch.randn(3, 7, dtype=torch.float64, requires_grad=True)
    y, h = torch.ops.tk.scan_state(x)
    assert y.requires_grad and not h.requires_grad and h.grad_fn is None
    with pytest.raises(RuntimeError, match="does not require grad"):
        h.sum().backward()
    def ref(x):   # y[t] = 2 * sum_u 0.5^(t-u) x[u]
        s, out = torch.zeros(3, dtype=torch.float64), []
        for t in range(7):
            s = 0.5 * s + x[:, t]
            out.append(2.0 * s)
        return torch.stack(out, 1)
    torch.testing.assert_close(y, ref(x))
    torch.autograd.gradcheck(lambda x: torch.ops.tk.scan_state(x)[0], (x,))
    (g,) = torch.autograd.grad((y * y).sum() + h.sum(), x)   # h: a constant
    (want,) = torch.autograd.grad((ref(x) ** 2).sum(), x)
    torch.testing.assert_close(g, want)
    compiled = torch.compile(lambda x: torch.ops.tk.scan_state(x), fullgraph=True, backend="aot_eager")
    yc, hc = compiled(x)
    assert yc.requires_grad and not hc.requires_grad
    torch.testing.assert_close(torch.autograd.grad(yc.sum(), x)[0], torch.autograd.grad(ref(x).sum(), x)[0])


@pytest.mark.parametrize("device", DEVICES)
def test_backward_is_deterministic(device):
    w, k = rwkv_inputs(3, 16, 64, device=device, seed=17)
    tile = torch.rand(2, 6, 5, device=device)
    grads = []
    for _ in range(3):
        w1, k1, t1 = leaf(w), leaf(k), leaf(tile)
        (tk.rwkv_forward(w1, k1, 0.1).sum() + tk.brick_pad(t1, 30, 20, 7).square().sum()).backward()
        grads.append((w1.grad, k1.grad, t1.grad))
    for g in grads[1:]:
        assert all(torch.equal(a, b) for a, b in zip(grads[0], g))


def test_eps_and_ints_get_no_gradient():
    """eps is a float scalar and pw/ph/stagger are ints: not tensors, so no gradient;
    the gradient of the tensor inputs does not depend on eps."""
    w, k = rwkv_inputs(2, 3, 6, seed=18)
    grads = []
    for eps in (0.0, 5.0):
        w1 = leaf(w)
        tk.rwkv_forward(w1, k, eps).square().sum().backward()
        grads.append(w1.grad)
    assert not torch.equal(grads[0], grads[1])   # through out, d(out^2) depends on eps ...
    w1 = leaf(w)
    tk.rwkv_forward(w1, k, 123.0).sum().backward()
    w2 = leaf(w)
    tk.rwkv_forward(w2, k, -7.0).sum().backward()
    assert torch.equal(w1.grad, w2.grad)          # ... but d(out)/dw does not


def test_int_tile_has_no_gradient_but_runs_under_grad_mode():
    tile = torch.arange(12, dtype=torch.int32).reshape(3, 4)
    out = tk.brick_pad(tile, 2, 1, 3)
    assert out.dtype == torch.int32 and not out.requires_grad


def test_backward_op_refuses_grad():
    w, k = rwkv_inputs(2, 3, 6, seed=19)
    with pytest.raises(RuntimeError, match=r"tk.rwkv_backward_k: argument 'w' requires grad but "
                                           r"tk.rwkv_backward_k has no backward"):
        tk.rwkv_backward_k(leaf(w), k)
    with torch.no_grad():
        assert tk.rwkv_backward_k(leaf(w), k).shape == k.shape


def test_double_backward_is_a_clear_error():
    """The seed ops' backward ops have no backward: gradients computed with
    create_graph=True are right, and differentiating them raises (as torch's
    @once_differentiable does), not gradients missing a term."""
    w, k = rwkv_inputs(2, 3, 6, seed=20)
    w1, k1 = leaf(w), leaf(k)
    out = tk.rwkv_forward(w1, k1, 0.1)
    gw, gk = torch.autograd.grad(out.square().sum(), (w1, k1), create_graph=True)
    ref = torch.autograd.grad(rwkv_conv1d(w1, k1, 0.1).square().sum(), (w1, k1))
    torch.testing.assert_close(gw, ref[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gk, ref[1], rtol=1e-5, atol=1e-5)
    assert gw.requires_grad and gk.requires_grad
    with pytest.raises(RuntimeError, match=r"tk.rwkv_forward: double backward is not supported: its backward op "
                                           r"tk.rwkv_backward_[wk] has no backward"):
        torch.autograd.grad(gw.sum() + gk.sum(), (w1, k1))


def test_torch_func_grad_vjp_jacrev():
    """torch.func.grad / vjp / jacrev differentiate with grad mode on (each level
    records its backward). Through the seed ops, whose backward ops have no
    backward, one level gives the gradients; differentiating them again, by a
    nested transform or by plain autograd around one, raises the clear error at
    that outer level instead of returning gradients that miss a term (zeros)."""
    w, k = rwkv_inputs(2, 3, 6, seed=26)

    def loss(w, k):
        return tk.rwkv_forward(w, k, 0.1).square().sum()

    def ref_loss(w, k):
        return rwkv_conv1d(w, k, 0.1).square().sum()

    got = torch.func.grad(loss, argnums=(0, 1))(w, k)
    ref = torch.func.grad(ref_loss, argnums=(0, 1))(w, k)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    out, vjp_fn = torch.func.vjp(lambda w, k: tk.rwkv_forward(w, k, 0.1), w, k)
    v = torch.randn(out.shape, generator=torch.Generator().manual_seed(27), dtype=out.dtype)
    _, ref_vjp = torch.func.vjp(lambda w, k: rwkv_conv1d(w, k, 0.1), w, k)
    for a, b in zip(vjp_fn(v), ref_vjp(v)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    jac = torch.func.jacrev(lambda k: tk.rwkv_forward(w, k, 0.1))(k)   # vmaps the backward
    torch.testing.assert_close(jac, torch.func.jacrev(lambda k: rwkv_conv1d(w, k, 0.1))(k), rtol=1e-5, atol=1e-5)

    double = r"tk.rwkv_forward: double backward is not supported: its backward op tk.rwkv_backward_[wk] has no backward"
    with pytest.raises(RuntimeError, match=double):   # grad_w depends on k: its derivative is not zero
        torch.func.grad(lambda k: torch.func.grad(loss)(w, k).square().sum())(k)
    k1 = leaf(k)
    gw = torch.func.grad(loss)(w, k1)                  # plain autograd tracks k1 around the transform
    torch.testing.assert_close(gw, ref[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match=double):
        gw.sum().backward()


def test_torch_func_through_backward_ops_with_backward():
    """Backward ops with a backward line of their own (ag_cube below): torch.func
    goes one level deeper than those lines, and no further."""
    import torch_tk

    cube = torch_tk.kernel(CUBE_SPEC, file="ag_cube.tk")
    gen = torch.Generator().manual_seed(28)
    x = torch.randn(4, 5, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(torch.func.grad(lambda x: cube(x).square().sum())(x), 6 * x ** 5)
    out, vjp_fn = torch.func.vjp(cube, x)
    v = torch.randn(4, 5, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(vjp_fn(v)[0], 3 * x * x * v)
    jac = torch.func.jacrev(cube)(x[0])
    torch.testing.assert_close(jac, torch.diag(3 * x[0] ** 2))
    second = torch.func.grad(lambda x: torch.func.grad(lambda x: cube(x).sum())(x).sum())(x)
    torch.testing.assert_close(second, 6 * x)
    # a third level reaches ag_cube_backward2, which has no backward
    with pytest.raises(RuntimeError, match=r"tk.ag_cube_backward: double backward is not supported: its backward "
                                           r"op tk.ag_cube_backward2 has no backward"):
        torch.func.grad(lambda x: torch.func.grad(lambda x: torch.func.grad(lambda x: cube(x).sum())(x).sum())(x)
                        .sum())(x)


# a backward op with a 'backward' line of its own: double backward works
CUBE_SPEC = """
op ag_cube(x: float[..., N]) -> y: x.dtype[..., N]:
    backward ag_cube_backward
    for i in y:
        y[i] = x[i] * x[i] * x[i]
op ag_cube_backward(x: float[..., N], grad_y: x.dtype[..., N]) -> grad_x: x.dtype[..., N]:
    backward ag_cube_backward2
    for i in grad_x:
        grad_x[i] = 3.0 * x[i] * x[i] * grad_y[i]
op ag_cube_backward2(x: float[..., N], grad_y: x.dtype[..., N], grad_grad_x: x.dtype[..., N])
        -> (grad_x: x.dtype[..., N], grad_grad_y: x.dtype[..., N]):
    for i in grad_x:
        grad_x[i] = 6.0 * x[i] * grad_y[i] * grad_grad_x[i]
        grad_grad_y[i] = 3.0 * x[i] * x[i] * grad_grad_x[i]
"""


def test_double_backward_through_backward_ops_with_backward():
    import torch_tk

    cube = torch_tk.kernel(CUBE_SPEC, file="ag_cube.tk")
    gen = torch.Generator().manual_seed(25)
    x = torch.randn(3, 7, generator=gen, dtype=torch.float64, requires_grad=True)
    assert gradgradcheck(cube, (x,))
    # the same second derivative as torch's own x**3, with an incoming gradient that requires grad
    g = torch.randn(3, 7, generator=gen, dtype=torch.float64, requires_grad=True)
    got = torch.autograd.grad(cube(x), x, g, create_graph=True)[0]
    ref = torch.autograd.grad(x ** 3, x, g, create_graph=True)[0]
    torch.testing.assert_close(got, ref)
    v = torch.randn(3, 7, generator=gen, dtype=torch.float64)
    got2 = torch.autograd.grad(got, (x, g), v, retain_graph=True)
    ref2 = torch.autograd.grad(ref, (x, g), v)
    for a, b in zip(got2, ref2):
        torch.testing.assert_close(a, b)
    # the third derivative would need ag_cube_backward2's backward: a clear error
    third = torch.autograd.grad(got, x, v, create_graph=True)[0]
    with pytest.raises(RuntimeError, match=r"tk.ag_cube_backward: double backward is not supported: its backward "
                                           r"op tk.ag_cube_backward2 has no backward"):
        torch.autograd.grad(third.sum(), x)


def test_forward_mode_ad_is_a_clear_error():
    import torch.autograd.forward_ad as fwAD

    w, k = rwkv_inputs(2, 3, 6, seed=21)
    with fwAD.dual_level():
        dual = fwAD.make_dual(w, torch.ones_like(w))
        with pytest.raises(RuntimeError, match=r"forward-mode AD is not supported \(its backward ops give "):
            tk.rwkv_forward(dual, k, 0.1)
    plain = torch_tk.kernel("op ag_no_bw(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n")
    x = torch.randn(5, dtype=torch.float64)
    with fwAD.dual_level():
        dual = fwAD.make_dual(x, torch.ones_like(x))
        with pytest.raises(RuntimeError, match=r"tk.ag_no_bw: forward-mode AD is not supported \(and tk.ag_no_bw "
                                               r"has no backward ops, so no reverse mode either\)"):
            plain(dual)


def test_backward_twice_needs_retain_graph():
    w, k = rwkv_inputs(2, 3, 6, seed=22)
    out = tk.rwkv_forward(leaf(w), k, 0.1).sum()
    out.backward(retain_graph=True)
    out.backward()   # the saved tensors are still there
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        out.backward()


def test_saved_tensor_modified_in_place_is_detected():
    w, k = rwkv_inputs(2, 3, 6, seed=23)
    w1 = leaf(w)
    k1 = k.clone()
    out = tk.rwkv_forward(w1, k1, 0.1)
    k1.add_(1)   # k is saved for dL/dw
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_undefined_output_grad_is_zero():
    """autograd.grad through a graph where tk's output is unused by the loss."""
    w, k = rwkv_inputs(2, 3, 6, seed=24)
    w1 = leaf(w)
    out = tk.rwkv_forward(w1, k, 0.1)
    (g,) = torch.autograd.grad(out.sum() * 0 + w1.sum(), w1)
    torch.testing.assert_close(g, torch.ones_like(w))


def test_each_saved_tensor_is_unpacked_once():
    """layernorm's two backward ops both take x and weight: each saved tensor
    is unpacked once a backward (saved-tensor hooks see as many unpacks as
    packs), so checkpoint(use_reentrant=False), which allows one unpack,
    gives F.layer_norm's gradients (before: CheckpointError)."""
    import os
    from torch.utils.checkpoint import checkpoint
    import torch_tk

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ln = torch_tk.load(os.path.join(root, "examples", "specs", "layernorm.tk"))
    gen = torch.Generator().manual_seed(61)
    x = torch.randn(6, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    w = torch.randn(8, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.randn(8, generator=gen, dtype=torch.float64, requires_grad=True)
    counts = {"pack": 0, "unpack": 0}

    def pack(t):
        counts["pack"] += 1
        return t

    def unpack(t):
        counts["unpack"] += 1
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        y = ln(x, w, b, 1e-5)
    torch.autograd.grad(y.square().sum(), (x, w, b))
    assert counts["pack"] == counts["unpack"] > 0, counts
    ref = torch.autograd.grad(torch.nn.functional.layer_norm(x, (8,), w, b, 1e-5).square().sum(), (x, w, b))
    for reentrant in (False, True):
        for t in (x, w, b):
            t.grad = None
        checkpoint(lambda x, w, b: ln(x, w, b, 1e-5), x, w, b, use_reentrant=reentrant).square().sum().backward()
        for t, r in zip((x, w, b), ref):
            torch.testing.assert_close(t.grad, r)


def test_a_tensor_the_backward_takes_for_its_shape_is_not_kept():
    """brick_pad_backward reads tile's shape only (tk_op_param_read): the node
    saves a stride-0 stand-in, so the tile's memory is freed after the
    forward, and changing it in place before the backward is fine (as with
    F.pad), with the same gradient."""
    import gc
    import weakref

    gen = torch.Generator().manual_seed(62)
    leaf_tile = torch.randn(4, 3, generator=gen, requires_grad=True)
    tile = leaf_tile * 2.0          # mul by a number saves no tensor
    out = tk.brick_pad(tile, 2, 1, 1)
    g = torch.randn(out.shape, generator=gen)
    tile.add_(1.0)                  # before: "modified by an inplace operation"
    (out * g).sum().backward()
    leaf2 = leaf_tile.detach().requires_grad_()
    want, = torch.autograd.grad((brick_pad_index(leaf2 * 2.0, 2, 1, 1) * g).sum(), leaf2)
    torch.testing.assert_close(leaf_tile.grad, want)
    tile = leaf_tile * 2.0
    out = tk.brick_pad(tile, 2, 1, 1)
    ref = weakref.ref(tile)
    del tile
    gc.collect()
    assert ref() is None, "the node kept the tile"


def test_a_parameter_without_a_gradient_is_not_differentiable():
    """A float parameter no backward op computes the gradient of (a constant
    table) needs no backward: the op is differentiable in the others, and an
    input there that requires grad is an error at the call, not a gradient
    silently missing."""
    op = torch_tk.kernel("""
op ag_scaled(x: float[N], table: x.dtype[N]) -> y: x.dtype[N]:
    backward ag_scaled_backward
    for i in y:
        y[i] = x[i] * table[i]
op ag_scaled_backward(table: float[N], grad_y: table.dtype[N]) -> grad_x: table.dtype[N]:
    for i in grad_x:
        grad_x[i] = grad_y[i] * table[i]
""")
    x = torch.randn(7, dtype=torch.float64, requires_grad=True)
    table = torch.randn(7, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda a: op(a, table), (x,))
    (gx,) = torch.autograd.grad(op(x, table).sum(), x)
    torch.testing.assert_close(gx, table)
    with pytest.raises(RuntimeError, match=r"tk.ag_scaled: argument 'table' requires grad but no backward op of "
                                           r"tk.ag_scaled computes grad_table \(pass it detached"):
        op(x, table.clone().requires_grad_())
    with torch.no_grad():
        op(x, table.clone().requires_grad_())   # (no graph: nothing to refuse)
    compiled = torch.compile(lambda a, t: op(a, t).sum(), fullgraph=True, backend="aot_eager")
    (gc,) = torch.autograd.grad(compiled(x, table), x)
    torch.testing.assert_close(gc, table)
    with pytest.raises(Exception, match=r"argument 'table' requires grad but no backward op of tk.ag_scaled"):
        compiled(x, table.clone().requires_grad_())
