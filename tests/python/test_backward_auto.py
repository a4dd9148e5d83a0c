"""Derived backward ops (`backward auto`, docs/autograd.md): the backward op of
an element-wise op, derived by compiler/autodiff.c.

* every operator and function the language has, against torch's autograd of
  the same formula (tests/specs/autodiff.tk, ad_maths), float64 and float32,
  on fresh random inputs, with gradcheck;
* branches (if/elif/else, conditional expressions, a bool read): the
  gradient of the branch taken and exactly 0 from the others, never NaN from
  a branch not taken (sqrt of a negative), against a float64 formula;
* ties of min and max, abs at 0 and a power 0 as torch's ops give them;
* a broadcast parameter (its gradient summed by torch), an optional one
  given and None, two float outputs and an int output, float16/bfloat16;
* random numbers: the derived dropout backward equals the hand-written one
  of examples/specs/dropout.tk bit for bit, and does not keep x alive;
* second derivatives (`backward auto 2`): a gradient penalty against torch's,
  gradgradcheck;
* examples/specs/activations.tk (GELU, its tanh form, bias + GELU, SwiGLU,
  softplus, mish) against torch.nn.functional, values and gradients;
* torch.compile and opcheck of a derived op; tkc derived prints what is derived.

Outputs are poisoned first (the poisoned_outputs fixture).
"""
import gc
import os
import subprocess
import weakref

import pytest
import torch
import torch.nn.functional as F

import torch_tk

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = os.path.join(ROOT, "tests", "specs", "autodiff.tk")
pytestmark = pytest.mark.usefixtures("poisoned_outputs")
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU"))]
tk = torch.ops.tk

torch_tk.load(SPEC)
torch_tk.load(os.path.join(ROOT, "examples", "specs", "dropout.tk"))
torch_tk.load(os.path.join(ROOT, "examples", "specs", "activations.tk"))

# examples/specs/activations.tk: (op, its torch formula, number of tensor inputs, extra arguments)
ACTIVATIONS = [
    ("gelu", lambda x: F.gelu(x), 1, ()),
    ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), 1, ()),
    ("bias_gelu", lambda x, b: F.gelu(x + b), 2, ()),
    ("swiglu", lambda a, b: F.silu(a) * b, 2, ()),
    ("softplus", lambda x: F.softplus(x, 1.5, 2.0), 1, (1.5, 2.0)),
    ("mish", lambda x: F.mish(x), 1, ()),
]


def gen(seed):
    return torch.Generator().manual_seed(seed)


def maths_ref(a, b):
    """ad_maths in torch ops."""
    s = (torch.sin(a) + torch.cos(a) * torch.tan(b) + torch.asin(b) - torch.acos(b) + torch.atan(a)
         + torch.atan2(a, b + 2.0))
    s = (s + torch.sinh(b) * torch.cosh(b) + torch.erf(a) - torch.erfc(b) + torch.log1p(b * b) + torch.expm1(b)
         + torch.log2(2.0 + b) + torch.log10(3.0 + a * a))
    s = s * 0.5
    s = (s - torch.sqrt(1.0 + a * a) / (2.0 + b) + torch.abs(a) ** 1.5 + torch.remainder(a, 0.75)
         + torch.exp(-a * a) + torch.log(1.5 + b))
    return (s + torch.tanh(a) * torch.sigmoid(b) + torch.minimum(a, b) - torch.maximum(a, 0.25 * b)
            + a * 2 ** b - a / -3.0)


def maths_inputs(shape, seed, dtype, device):
    x = torch.randn(*shape, generator=gen(seed), dtype=torch.float64) * 1.5
    u = torch.rand(*shape, generator=gen(seed + 1), dtype=torch.float64) * 1.8 - 0.9   # asin, acos: |u| < 1
    return x.to(device, dtype), u.to(device, dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_operation_against_torch(device, dtype):
    x, u = maths_inputs((3, 5, 41), 10, dtype, device)
    g = torch.randn(3, 5, 41, generator=gen(12), dtype=torch.float64).to(device, dtype)
    xr, ur = (t.double().requires_grad_() for t in (x, u))
    want = maths_ref(xr, ur)
    want_grads = torch.autograd.grad(want, (xr, ur), g.double())
    x.requires_grad_()
    u.requires_grad_()
    got = tk.ad_maths(x, u)
    got_grads = torch.autograd.grad(got, (x, u), g)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=1e-11, atol=1e-11)
    torch.testing.assert_close(got.double(), want.detach(), **tol)
    for a, e in zip(got_grads, want_grads):
        assert a.dtype == dtype and a.shape == e.shape
        torch.testing.assert_close(a.double(), e, **tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,ref,n,extra", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
def test_example_activations(device, name, ref, n, extra):
    shape = (3, 4, 67)
    xs = [torch.randn(*shape, generator=gen(90), dtype=torch.float64) * 3]
    xs.append((torch.randn(*shape[-1:], generator=gen(91), dtype=torch.float64) if name == "bias_gelu"
               else torch.randn(*shape, generator=gen(91), dtype=torch.float64)))
    xs = [t.to(device).requires_grad_() for t in xs[:n]]
    g = torch.randn(*shape, generator=gen(92), dtype=torch.float64).to(device)
    got = getattr(tk, name)(*xs, *extra)
    want = ref(*xs)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    for a, e in zip(torch.autograd.grad(got, xs, g), torch.autograd.grad(want, xs, g)):
        assert a.shape == e.shape
        torch.testing.assert_close(a, e, rtol=1e-10, atol=1e-10)


def test_every_operation_gradcheck():
    x, u = maths_inputs((2, 7), 20, torch.float64, "cpu")
    assert torch.autograd.gradcheck(tk.ad_maths, (x.requires_grad_(), u.requires_grad_()))


def branches_ref(v, m, t, flag):
    """ad_branches' value and derivative in float64, branch by branch."""
    root = torch.sqrt(v.abs())
    r = torch.where(v > t, v * v, torch.where(v < -t, 3.0 * root, torch.where(v > 0, root, torch.zeros_like(v))))
    d = torch.where(v > t, 2.0 * v, torch.where(v < -t, -1.5 / root,
                                                torch.where(v > 0, 0.5 / root, torch.zeros_like(v))))
    r = torch.where(m, r - v, r)
    d = torch.where(m, d - 1.0, d)
    sign = 1.0 if flag else -1.0
    return sign * r, sign * d


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("flag", [True, False])
def test_branches_take_the_gradient_of_the_branch_taken(device, flag):
    t = 0.5
    v = torch.randn(301, generator=gen(30), dtype=torch.float64)
    v[:6] = torch.tensor([0.0, t, -t, 1e-300, -1e-300, 0.25])   # the edges of every branch
    m = torch.rand(301, generator=gen(31)) < 0.5
    v, m = v.to(device), m.to(device)
    x = v.clone().requires_grad_()
    y, k = tk.ad_branches(x, m, t, flag)
    g = torch.randn(301, generator=gen(32), dtype=torch.float64).to(device)
    gx, = torch.autograd.grad(y, x, g)
    want_y, want_d = branches_ref(v, m, t, flag)
    torch.testing.assert_close(y, want_y, rtol=1e-12, atol=1e-12)
    assert k.dtype == torch.int32 and torch.equal(k, torch.floor(v).to(torch.int32))
    # sqrt(v) and sqrt(-v) outside their branches add 0, not NaN; at v = 0 (the else branch, sqrt's
    # derivative not taken: torch.where(v > 0, sqrt(v), 0) would give NaN) only the m branch's -1 is left
    assert torch.isfinite(gx).all()
    torch.testing.assert_close(gx, g * want_d, rtol=1e-12, atol=1e-12)
    assert gx[0] == (-g[0] if m[0] else 0.0) * (1.0 if flag else -1.0)
    assert not k.requires_grad


def test_branches_gradcheck():
    x = (torch.randn(40, generator=gen(33), dtype=torch.float64) * 2).requires_grad_()
    x.data[(x.data.abs() - 0.5).abs() < 0.05] = 1.0   # not at a kink
    m = torch.rand(40, generator=gen(34)) < 0.5
    assert torch.autograd.gradcheck(lambda a: tk.ad_branches(a, m, 0.5, True)[0], (x,))


@pytest.mark.parametrize("device", DEVICES)
def test_ties_as_torch_gives_them(device):
    """max/min at a tie split the gradient (torch.maximum's), abs at 0 has 0, ** 0.0 has 0."""
    r = torch.randn(4, 9, generator=gen(40), dtype=torch.float64)
    th = torch.randn(4, 9, generator=gen(41), dtype=torch.float64)
    ties = torch.randn(4, 9, generator=gen(42), dtype=torch.float64)
    ties[:, 0] = 0.0
    ties[:, 1] = r[:, 1]
    r, th, ties = (t.to(device).requires_grad_() for t in (r, th, ties))
    re, im = tk.ad_polar(r, th, ties)
    g_re = torch.randn(4, 9, generator=gen(43), dtype=torch.float64).to(device)
    g_im = torch.randn(4, 9, generator=gen(44), dtype=torch.float64).to(device)
    got = torch.autograd.grad((re, im), (r, th, ties), (g_re, g_im))
    zero = torch.zeros_like(ties)
    want_re = r * torch.cos(th) + torch.maximum(ties, zero) + torch.abs(ties)
    want_im = r * torch.sin(th) + torch.minimum(ties, r) + ties ** 0.0
    want = torch.autograd.grad((want_re, want_im), (r, th, ties), (g_re, g_im))
    torch.testing.assert_close(re, want_re, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(im, want_im, rtol=1e-12, atol=1e-12)
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e, rtol=1e-12, atol=1e-12)
    # only one output in the loss: the other's gradient is zeros
    gr, = torch.autograd.grad(tk.ad_polar(r, th, ties)[1].sum(), (r,))
    want_im = r * torch.sin(th) + torch.minimum(ties, r) + ties ** 0.0
    torch.testing.assert_close(gr, torch.autograd.grad(want_im.sum(), (r,))[0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("with_bias", [True, False])
def test_broadcast_and_optional_parameters(device, with_bias):
    B, N = 6, 33
    x = torch.randn(B, N, generator=gen(50), dtype=torch.float64).to(device).requires_grad_()
    scale = torch.randn(B, N, generator=gen(51), dtype=torch.float64).to(device).requires_grad_()
    bias = torch.randn(N, generator=gen(52), dtype=torch.float64).to(device).requires_grad_() if with_bias else None
    g = torch.randn(B, N, generator=gen(53), dtype=torch.float64).to(device)
    leaves = [t for t in (x, scale, bias) if t is not None]
    got = tk.ad_bias_gelu(x, scale, bias)
    want = F.gelu(x + bias if with_bias else x) * scale
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    for a, e in zip(torch.autograd.grad(got, leaves, g), torch.autograd.grad(want, leaves, g)):
        assert a.shape == e.shape   # bias: (N,), summed over the B rows by torch
        torch.testing.assert_close(a, e, rtol=1e-11, atol=1e-11)
    assert torch.autograd.gradcheck(lambda *t: tk.ad_bias_gelu(*t), (x[:3, :5], scale[:3, :5],
                                                                     None if bias is None else bias[:5]))


@pytest.mark.parametrize("device", DEVICES)
def test_second_derivatives(device):
    """`backward auto 2`: the derived backward op has a derived backward op of
    its own, so create_graph=True, gradgradcheck and a gradient penalty
    work, and match torch's second derivatives."""
    B, N = 5, 12
    x = torch.randn(B, N, generator=gen(100), dtype=torch.float64).to(device).requires_grad_()
    scale = torch.randn(B, N, generator=gen(101), dtype=torch.float64).to(device).requires_grad_()
    bias = torch.randn(N, generator=gen(102), dtype=torch.float64).to(device).requires_grad_()
    g = torch.randn(B, N, generator=gen(103), dtype=torch.float64).to(device)

    def penalty(f):   # a gradient penalty: the norm of dL/dx, differentiated again
        gx, = torch.autograd.grad(f(x, scale, bias), x, g, create_graph=True)
        return torch.autograd.grad(gx.pow(2).sum(), (x, scale, bias))

    got = penalty(tk.ad_bias_gelu)
    want = penalty(lambda a, s, b: F.gelu(a + b) * s)
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e, rtol=1e-10, atol=1e-10)
    small = (x[:2, :3].detach().requires_grad_(), scale[:2, :3].detach().requires_grad_(),
             bias[:3].detach().requires_grad_())
    assert torch.autograd.gradgradcheck(lambda *t: tk.ad_bias_gelu(*t), small)
    assert torch.autograd.gradgradcheck(lambda *t: tk.ad_bias_gelu(*t), small[:2])   # bias None
    v = (torch.randn(30, generator=gen(104), dtype=torch.float64) * 2).to(device)
    v[(v.abs() - 0.5).abs() < 0.05] = 1.0   # not at a kink
    m = (torch.rand(30, generator=gen(105)) < 0.5).to(device)
    assert torch.autograd.gradgradcheck(lambda a: tk.ad_branches(a, m, 0.5, True)[0], (v.requires_grad_(),))
    # one order only: differentiating a first-order derived op again is the clear error
    gx, = torch.autograd.grad(tk.gelu(x), x, g, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward is not supported"):
        gx.sum().backward()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(device, dtype):
    B, N = 8, 64
    x = torch.randn(B, N, generator=gen(60)).to(device, dtype).requires_grad_()
    scale = torch.randn(B, N, generator=gen(61)).to(device, dtype).requires_grad_()
    bias = torch.randn(N, generator=gen(62)).to(device, dtype).requires_grad_()
    g = torch.randn(B, N, generator=gen(63)).to(device, dtype)
    got = tk.ad_bias_gelu(x, scale, bias)
    grads = torch.autograd.grad(got, (x, scale, bias), g)
    xf, sf, bf = (t.detach().float().requires_grad_() for t in (x, scale, bias))
    want = F.gelu(xf + bf) * sf
    want_grads = torch.autograd.grad(want, (xf, sf, bf), g.float())
    assert got.dtype == dtype and all(a.dtype == dtype for a in grads)
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.float16 else dict(rtol=5e-2, atol=8e-2)
    torch.testing.assert_close(got.float(), want.detach(), **tol)
    for a, e in zip(grads, want_grads):
        torch.testing.assert_close(a.float(), e, **tol)


@pytest.mark.parametrize("device", DEVICES)
def test_dropout_derived_equals_hand_written(device):
    x = torch.randn(4, 3, 257, generator=gen(70)).to(device).requires_grad_()
    g = torch.randn(4, 3, 257, generator=gen(71)).to(device)
    y_auto = tk.ad_dropout(x, 0.3, 1234)
    y_hand = tk.dropout(x, 0.3, 1234)
    assert torch.equal(y_auto, y_hand)
    assert torch.equal(torch.autograd.grad(y_auto, x, g)[0], torch.autograd.grad(y_hand, x, g)[0])
    assert 0.2 < (y_auto == 0).float().mean().item() < 0.4


def test_float_types_follow_the_forward():
    """The derived op computes in its forward's float type (its incoming
    gradients do not count for it), so a branch goes the same way; and a
    float32 output's gradient does not round a float64 one added to it."""
    mixed = torch_tk.kernel("""
    op ad_mixed(x: float32[N], p: float) -> y: float64[N]:
        backward auto
        for i in y:
            y[i] = x[i] if p + 1.0 > 1.0 else 3.0 * x[i]
    """, file="mixed.tk")
    x = torch.randn(8, generator=gen(110), requires_grad=True)
    y = mixed(x, 1e-10)   # float32: 1 + 1e-10 == 1, so the else branch
    torch.testing.assert_close(y, 3.0 * x.detach().double())
    assert torch.equal(torch.autograd.grad(y.sum(), x)[0], torch.full_like(x, 3.0))
    two = torch_tk.kernel("""
    op ad_two(x: float64[N], grad_k: float64[N], k: int32[N]) -> (z: float64[N], y: float32[N]):
        backward auto
        for i in z:
            t = x[i] * 3.0 + grad_k[i] * float(k[i])
            z[i] = t
            y[i] = t
    """, file="two.tk")   # (grad_k: no clash, k is an int tensor)
    x = torch.randn(8, generator=gen(111), dtype=torch.float64, requires_grad=True)
    z, y = two(x, torch.zeros(8, dtype=torch.float64), torch.ones(8, dtype=torch.int32))
    gx, = torch.autograd.grad((z, y), x, (torch.full_like(z, 1e-9), torch.ones_like(y)))
    torch.testing.assert_close(gx, torch.full_like(x, 3.0 * (1.0 + 1e-9)), rtol=0, atol=1e-15)


def test_unneeded_inputs_are_not_kept():
    """The derived dropout backward reads no x (its lines are dropped), so
    the graph does not keep x alive, as with the hand-written one."""
    for op in (tk.ad_dropout, tk.dropout):
        leaf = torch.randn(64, 128, requires_grad=True)
        x = leaf * 2.0
        ref = weakref.ref(x)
        y = op(x, 0.5, 7)
        del x
        gc.collect()
        assert ref() is None, op
        y.sum().backward()
        assert leaf.grad is not None and torch.isfinite(leaf.grad).all()


def test_torch_compile_and_opcheck():
    x, u = maths_inputs((4, 16), 80, torch.float32, "cpu")

    def f(a, b):
        return (tk.ad_maths(a, b) * 2.0).sum()

    xa, ua = x.clone().requires_grad_(), u.clone().requires_grad_()
    xb, ub = x.clone().requires_grad_(), u.clone().requires_grad_()
    f(xa, ua).backward()
    torch.compile(f, fullgraph=True, backend="aot_eager")(xb, ub).backward()
    torch.testing.assert_close(xa.grad, xb.grad)
    torch.testing.assert_close(ua.grad, ub.grad)
    torch.library.opcheck(tk.ad_bias_gelu.default, (torch.randn(3, 4, requires_grad=True),
                                                    torch.randn(3, 4), torch.randn(4, requires_grad=True)))


def test_tkc_prints_the_derived_op(tkc, tmp_path):
    out = subprocess.run([tkc, "derived", SPEC], capture_output=True, text=True, check=True).stdout
    assert out.count("\nop ") + out.startswith("op ") == 7 and "op ad_dropout_backward(" in out
    assert "op ad_bias_gelu_backward_backward(" in out
    def derived(name):
        return out.split(f"op {name}(")[1].split("# derived")[0]

    assert " = x[i]" not in derived("ad_dropout_backward")   # dropout's backward reads no x
    assert " = x[i]" in derived("ad_maths_backward")
    # what it prints is a spec of its own
    (tmp_path / "derived.tk").write_text(out)
    schemas = subprocess.run([tkc, "check", str(tmp_path / "derived.tk")], capture_output=True, text=True,
                             check=True).stdout
    assert "tk::ad_bias_gelu_backward(Tensor x, Tensor scale, Tensor grad_y, Tensor? bias=None) -> " \
           "(Tensor, Tensor, Tensor)" in schemas


def test_a_file_name_with_a_newline():
    """The derived op's first line is a comment naming its forward's file: a
    newline in that name must not end it (the derived text would not parse)."""
    op = torch_tk.kernel("op ad_nl(x: float[N]) -> y: x.dtype[N]:\n    backward auto\n    for i in y:\n"
                         "        y[i] = x[i] * x[i]\n", file="two\nlines.tk")
    x = torch.randn(5, generator=gen(120), dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(torch.autograd.grad(op(x).sum(), x)[0], 2 * x.detach())


def test_errors_name_the_place():
    with pytest.raises(torch_tk.SpecError, match=r"gather\.tk:4:16: error: backward auto of 'g': x\[.*\]: it "
                                                 r"differentiates reads at the loop's index \[i\]"):
        torch_tk.kernel("op g(x: float[N]) -> y: x.dtype[N]:\n    backward auto\n    for i in y:\n"
                        "        y[i] = x[(i + 1) % N]\n", file="gather.tk")
    with pytest.raises(torch_tk.SpecError, match=r"row\.tk:5:9: error: backward auto of 'g2': a scan over part "
                                                 r"of the row"):
        torch_tk.kernel("op g2(x: float[..., N]) -> y: x.dtype[..., N]:\n    backward auto\n    for _ in y:\n"
                        "        s = 0.0\n        for i in range(1, N):\n            s += x[i]\n            y[i] = s\n",
                        file="row.tk")
    assert not hasattr(tk, "g") and not hasattr(tk, "g2")
