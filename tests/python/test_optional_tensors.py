"""Optional tensors (docs/spec.md, Optional tensors): `bias: x.dtype[N]? = 0`
takes a tensor or None, and None reads as a tensor of its dims holding the
default (schema `Tensor? bias=None`).

* layernorm / rmsnorm of examples/specs against F.layer_norm and a float64
  formula, for every combination of weight and bias given or None, with
  gradients (None gets none; the others match torch's autograd) and gradcheck;
* a spec with every kind of optional tensor (batch dims that broadcast, no
  dims, a dtype of its own, bool and int64 ones) against torch, each given
  or None, on fresh random inputs;
* torch.compile (dynamic shapes: the symbolic Meta kernel), TorchScript,
  torch.export (save and load), opcheck, compiled autograd and vmap with None;
* what is not allowed is a load error at file:line:col (two here, the rest
  in tests/c/test_check.c), and None where a tensor is needed an error
  naming the op and the argument.

Outputs are poisoned first (the poisoned_outputs fixture).
"""
import itertools
import os

import pytest
import torch
import torch.nn.functional as F

import torch_tk

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.usefixtures("poisoned_outputs")
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU"))]
tk = torch.ops.tk

torch_tk.load(os.path.join(ROOT, "examples", "specs", "layernorm.tk"))
torch_tk.kernel("""
op opt_mix(x: float[..., N], scale: x.dtype[..., N]? = 2, s: float32[]? = 0.5, mask: bool[N]? = True,
           shift: int64[N]? = -3) -> y: x.dtype[..., N]:
    for i in y:
        v = x[i] * scale[i] * s[] + float(shift[i])
        y[i] = v if mask[i] else -1.0
""", file="test_optional_tensors.py")


def gen(seed):
    return torch.Generator().manual_seed(seed)


def some(*shape, seed, dtype=torch.float64):
    return torch.randn(*shape, generator=gen(seed), dtype=dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("given", list(itertools.product((False, True), repeat=2)), ids=str)
def test_layernorm_with_weight_and_bias_or_none(device, dtype, given):
    R, N = 7, 37
    x = some(R, N, seed=1, dtype=dtype).to(device)
    w = some(N, seed=2, dtype=dtype).to(device) if given[0] else None
    b = some(N, seed=3, dtype=dtype).to(device) if given[1] else None
    want = F.layer_norm(x.double(), (N,), None if w is None else w.double(), None if b is None else b.double(), 1e-5)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    for got in (tk.layernorm(x, w, b), tk.layernorm(x, weight=w, bias=b, eps=1e-5), tk.layernorm(x, w, b, 1e-5)):
        assert got.dtype == dtype and not got.isnan().any()
        torch.testing.assert_close(got.double(), want, **tol)
    if not given[0]:   # (a weight of ones is what None reads as)
        torch.testing.assert_close(tk.layernorm(x, None, b), tk.layernorm(x, torch.ones_like(x[0]), b), rtol=0, atol=0)


@pytest.mark.parametrize("given", list(itertools.product((False, True), repeat=2)), ids=str)
def test_layernorm_gradients_with_none(given):
    R, N = 5, 19
    x = some(R, N, seed=4).requires_grad_()
    w = some(N, seed=5).requires_grad_() if given[0] else None
    b = some(N, seed=6).requires_grad_() if given[1] else None
    g = some(R, N, seed=7)
    leaves = [t for t in (x, w, b) if t is not None]
    got = torch.autograd.grad(tk.layernorm(x, w, b), leaves, g)
    want = torch.autograd.grad(F.layer_norm(x, (N,), w, b, 1e-5), leaves, g)
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e, rtol=1e-10, atol=1e-10)
    assert torch.autograd.gradcheck(lambda *t: tk.layernorm(*t), (x, w, b))


def test_rmsnorm_without_weight():
    x = some(6, 33, seed=8).requires_grad_()
    want = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(tk.rmsnorm(x), want, rtol=1e-12, atol=1e-12)
    g = some(6, 33, seed=9)
    torch.testing.assert_close(torch.autograd.grad(tk.rmsnorm(x), x, g)[0], torch.autograd.grad(want, x, g)[0],
                               rtol=1e-10, atol=1e-10)


def test_only_the_given_ones_get_gradients():
    """weight None, bias given: layernorm_backward_wb runs for bias and its
    grad_weight is dropped; weight given and bias None: the same the other way."""
    x = some(4, 8, seed=10).requires_grad_()
    b = some(8, seed=11).requires_grad_()
    tk.layernorm(x, None, b).sum().backward()
    assert x.grad is not None and b.grad is not None
    torch.testing.assert_close(b.grad, torch.full_like(b, 4.0))


def mix_reference(x, scale, s, mask, shift):
    scale = 2.0 if scale is None else scale.double()
    s = 0.5 if s is None else s.double()
    shift = -3.0 if shift is None else shift.double()
    v = x.double() * scale * s + shift
    return torch.where(torch.ones(x.shape[-1], dtype=torch.bool) if mask is None else mask.cpu(), v.cpu(), -1.0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("batch", [(), (3,), (2, 3)], ids=str)
def test_every_kind_of_optional_tensor(device, dtype, batch):
    N = 11
    x = some(*batch, N, seed=12, dtype=dtype).to(device)
    scale = some(*batch[1:], N, seed=13, dtype=dtype).to(device)   # (fewer batch dims: it broadcasts)
    s = torch.tensor(1.75, dtype=torch.float32, device=device)
    mask = (torch.rand(N, generator=gen(14)) > 0.3).to(device)
    shift = torch.randint(-5, 5, (N,), generator=gen(15)).to(device)
    for given in itertools.product((False, True), repeat=4):
        args = [t if g else None for t, g in zip((scale, s, mask, shift), given)]
        got = tk.opt_mix(x, *args)
        assert got.shape == x.shape and got.dtype == dtype and not got.isnan().any(), given
        want = mix_reference(x, *args)
        torch.testing.assert_close(got.double().cpu(), want, rtol=1e-6, atol=1e-6, msg=str(given))


def test_an_empty_call_with_none():
    """Nothing to compute: no row of the default is made (one of 10^12
    elements would not fit in memory)."""
    x = torch.empty(0, 5)
    assert tk.layernorm(x).shape == (0, 5)
    assert tk.opt_mix(torch.empty(3, 0)).shape == (3, 0)
    assert tk.layernorm(torch.empty(0, 10**12)).shape == (0, 10**12)


def test_compile_script_and_opcheck_with_none():
    x, b = some(6, 10, seed=16), some(10, seed=17)
    want = F.layer_norm(x, (10,), None, b, 1e-5)
    f = torch.compile(lambda x, b: tk.layernorm(x, None, b), fullgraph=True, dynamic=True)
    torch.testing.assert_close(f(x, b), want)
    x2, b2 = some(9, 13, seed=18), some(13, seed=19)
    torch.testing.assert_close(f(x2, b2), F.layer_norm(x2, (13,), None, b2, 1e-5))

    @torch.jit.script
    def scripted(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.ops.tk.layernorm(x, None, b)

    torch.testing.assert_close(scripted(x, b), want)
    for args in ((x, None, b, 1e-5), (x, None, None, 1e-5), (x.requires_grad_(), b, None, 1e-5)):
        torch.library.opcheck(tk.layernorm.default, args)
    torch.library.opcheck(tk.opt_mix.default, (some(2, 3, 4, seed=20), None, None, torch.ones(4, dtype=torch.bool)))


@pytest.mark.skipif(torch.__version__ < (2, 13), reason="compiled autograd through tk's node needs torch >= 2.13")
def test_compiled_autograd_with_none():
    """The node packs None for the weight (shim/autograd.cpp, apply_with_saved):
    the traced backward passes it on, and gives x and bias eager's gradients."""
    from torch._dynamo import compiled_autograd

    torch._dynamo.reset()
    x0, b0, g = some(5, 12, seed=23), some(12, seed=24), some(5, 12, seed=25)
    grads = []
    for compiled in (False, True):
        x, b = x0.clone().requires_grad_(), b0.clone().requires_grad_()
        loss = (tk.layernorm(x, None, b) * g).sum()
        if compiled:
            with compiled_autograd._enable(torch.compile(backend="aot_eager", fullgraph=True)):
                loss.backward()
        else:
            loss.backward()
        grads.append((x.grad, b.grad))
    for a, e in zip(*grads):
        torch.testing.assert_close(a, e, rtol=1e-12, atol=1e-12)


def test_export_with_none():
    """torch.export keeps the call with None in the graph; the program runs
    with a dynamic row count, survives save/load, and matches eager."""
    import io

    class Norm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bias = torch.nn.Parameter(some(16, seed=26))

        def forward(self, x):
            return tk.layernorm(x, None, self.bias)

    model = Norm()
    ep = torch.export.export(model, (some(4, 16, seed=27),), dynamic_shapes={"x": {0: torch.export.Dim("R", min=1)}})
    assert "torch.ops.tk.layernorm.default" in ep.graph_module.code
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    buf.seek(0)
    loaded = torch.export.load(buf)
    x = some(9, 16, seed=28)
    with torch.no_grad():
        torch.testing.assert_close(loaded.module()(x), model(x), rtol=0, atol=0)


def test_vmap_with_none():
    x = some(4, 3, 8, seed=21)
    got = torch.func.vmap(lambda t: tk.opt_mix(t))(x)
    torch.testing.assert_close(got, x * 2.0 * 0.5 - 3.0)
    got = torch.func.vmap(lambda t: tk.layernorm(t, None, None))(x)
    torch.testing.assert_close(got, F.layer_norm(x, (8,)))


def test_none_where_a_tensor_is_needed():
    with pytest.raises(RuntimeError, match=r"tk.layernorm_backward_x: argument 'grad_y': expected a tensor, got None"):
        tk.layernorm_backward_x(some(2, 3, seed=22), None)


BAD = [   # (the rest, with their exact messages: tests/c/test_check.c)
    ('op f(x: float[N], b: x.dtype[N]? ) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n',
     "bad.tk:1:19: error: optional tensor 'b' needs a default, the value its elements read as when it is None: "
     "'b: x.dtype[N]? = 0'"),
    ('op f(x: float[N], b: x.dtype[M]? = 0) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n',
     "bad.tk:1:30: error: dim 'M' is named only by optional tensor 'b': when it is None nothing gives M (name it "
     "in a tensor that is not optional)"),
]


@pytest.mark.parametrize("i", range(len(BAD)))
def test_what_is_not_allowed(i):
    text, error = BAD[i]
    with pytest.raises(torch_tk.SpecError) as e:
        torch_tk.kernel(text, file="bad.tk")
    assert error in str(e.value)
