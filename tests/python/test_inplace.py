"""In-place parameters (docs/spec.md, In-place parameters): `p: mut float[N]`
makes an op update its argument p (schema `Tensor(a!) p`) instead of
returning a new tensor.

* examples/specs/optim.tk's adamw_ against torch.optim.AdamW itself over
  several steps (float32, float64, batch dims, a strided view whose other
  elements must stay as they were), against a float64 loop for bfloat16
  parameters with float32 state; lion_ against a float64 loop; ema_ against
  torch's lerp_;
* row loops that update rows in place (a scan, a softmax) against torch;
* an op that updates one tensor and returns another;
* torch.compile (an optimizer step over a model's parameters, fullgraph;
  an update of an intermediate), torch.export (a buffer's update), opcheck,
  TorchScript, inference mode, autocast;
* what must be refused: an expanded (stride-0) argument, an argument that
  shares memory with another, a tensor that requires grad with grad mode on,
  and a backward that saved a tensor the op then changed (version counter).

Inputs are fresh random tensors, their seed in every assertion message.
Returned outputs are poisoned first (the poisoned_outputs fixture).
"""

import math
import os
import random
import subprocess

import pytest
import torch

import torch_tk

pytestmark = pytest.mark.usefixtures("poisoned_outputs")
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU"))]
ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
OPTIM = torch_tk.load(os.path.join(ROOT, "examples", "specs", "optim.tk"))
tk = torch.ops.tk

ROWS = torch_tk.kernel("""
op ipt_cumsum(x: mut float[..., N]):
    for _ in x:
        s = 0.0
        for i in range(N):
            s += x[i]
            x[i] = s

op ipt_copy(x: float[..., N]) -> y: x.dtype[..., N]:
    for i in y:
        y[i] = x[i]

op ipt_accumulate(w: mut float32|float64[N], x: w.dtype[R, N], scale: float):
    for _ in w:
        for r in range(R):
            for i in range(N):
                w[i] = w[i] + scale * x[r, i]

op ipt_softmax(x: mut float[..., N]):
    for _ in x:
        m = x[0]
        for i in range(N):
            m = max(m, x[i])
        s = 0.0
        for i in range(N):
            e = exp(x[i] - m)
            x[i] = e
            s += e
        r = 1.0 / s
        for i in range(N):
            x[i] = x[i] * r

op ipt_scale_and_sum(x: mut float[..., N], a: float) -> s: x.dtype[...]:
    for _ in x:
        t = 0.0
        for i in range(N):
            v = x[i] * a
            x[i] = v
            t += v
        s[] = t
""", file="test_inplace.py")


def fresh_seed():
    return random.randrange(2 ** 62)


def gen(seed):
    return torch.Generator().manual_seed(seed)


def adamw_reference(ps, grads_per_step, lr, betas, eps, wd):
    """torch.optim.AdamW's own single-tensor update on copies of ps."""
    params = [torch.nn.Parameter(p.detach().clone()) for p in ps]
    opt = torch.optim.AdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=wd, foreach=False)
    for grads in grads_per_step:
        for p, g in zip(params, grads):
            p.grad = g.clone()
        opt.step()
    return [p.detach() for p in params], [(opt.state[p]["exp_avg"], opt.state[p]["exp_avg_sq"]) for p in params]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(1000,), (3, 5, 77)])
def test_adamw_matches_torch_optim(device, dtype, shape):
    seed = fresh_seed()
    g0 = gen(seed)
    p = torch.randn(shape, generator=g0, dtype=dtype)
    grads = [[torch.randn(shape, generator=g0, dtype=dtype)] for _ in range(4)]
    lr, betas, eps, wd = 1e-2, (0.9, 0.99), 1e-8, 0.05
    want, state = adamw_reference([p], grads, lr, betas, eps, wd)
    pt = p.to(device, copy=True)
    m = torch.zeros(shape, dtype=dtype, device=device)
    v = torch.zeros(shape, dtype=dtype, device=device)
    with torch.no_grad():
        for step, (g,) in enumerate(grads, 1):
            assert tk.adamw_(pt, g.to(device), m, v, lr, *betas, eps, wd, step) is None
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(pt.cpu(), want[0], **tol, msg=lambda s: f"seed {seed}: {s}")
    torch.testing.assert_close(m.cpu(), state[0][0], **tol, msg=lambda s: f"seed {seed}: exp_avg {s}")
    torch.testing.assert_close(v.cpu(), state[0][1], **tol, msg=lambda s: f"seed {seed}: exp_avg_sq {s}")


def test_adamw_on_a_strided_view_leaves_the_other_elements():
    seed = fresh_seed()
    g0 = gen(seed)
    big = torch.randn(64, 130, generator=g0)
    before = big.clone()
    p = big[:, 1::2]                      # every other column: stride (130, 2)
    g = torch.randn(64, 65, generator=g0).t().contiguous().t()   # column-major
    m, v = torch.zeros(64, 65), torch.zeros(64, 65)
    want, _ = adamw_reference([p], [[g]], 1e-2, (0.9, 0.999), 1e-8, 0.01)
    with torch.no_grad():
        tk.adamw_(p, g, m, v, 1e-2, 0.9, 0.999, 1e-8, 0.01, 1)
    assert torch.equal(big[:, 0::2], before[:, 0::2]), f"seed {seed}: elements outside the view changed"
    torch.testing.assert_close(p, want[0], rtol=1e-5, atol=1e-6, msg=lambda s: f"seed {seed}: {s}")


@pytest.mark.parametrize("device", DEVICES)
def test_adamw_bfloat16_params_float32_state(device):
    seed = fresh_seed()
    g0 = gen(seed)
    p32 = torch.randn(4096, generator=g0)
    p = p32.to(torch.bfloat16)
    grads = [torch.randn(4096, generator=g0).to(torch.bfloat16) for _ in range(3)]
    lr, b1, b2, eps, wd = 1e-2, 0.9, 0.999, 1e-8, 0.1
    # the float64 loop, rounding p to bfloat16 after each step as the kernel stores it
    pr, mr, vr = p.double(), torch.zeros(4096, dtype=torch.float64), torch.zeros(4096, dtype=torch.float64)
    for step, g in enumerate(grads, 1):
        gd = g.double()
        mr = mr + (gd - mr) * (1 - b1)
        vr = vr * b2 + gd * gd * (1 - b2)
        denom = vr.sqrt() / math.sqrt(1 - b2 ** step) + eps
        pr = (pr * (1 - lr * wd) - lr / (1 - b1 ** step) * mr / denom).to(torch.bfloat16).double()
    pt = p.to(device, copy=True)
    m = torch.zeros(4096, device=device)
    v = torch.zeros(4096, device=device)
    with torch.no_grad():
        for step, g in enumerate(grads, 1):
            tk.adamw_(pt, g.to(device), m, v, lr, b1, b2, eps, wd, step)
    assert pt.dtype == torch.bfloat16 and m.dtype == torch.float32
    torch.testing.assert_close(m.cpu().double(), mr, rtol=1e-5, atol=1e-7, msg=lambda s: f"seed {seed}: {s}")
    # one bfloat16 step of rounding apart at most
    torch.testing.assert_close(pt.cpu().double(), pr, rtol=2 ** -7, atol=1e-6, msg=lambda s: f"seed {seed}: {s}")


@pytest.mark.parametrize("device", DEVICES)
def test_lion_and_ema(device):
    seed = fresh_seed()
    g0 = gen(seed)
    p = torch.randn(7, 300, generator=g0, dtype=torch.float64)
    g = torch.randn(7, 300, generator=g0, dtype=torch.float64)
    g[0, :10] = 0.0                       # c == 0 for a zero momentum and gradient: sign 0
    m = torch.randn(7, 300, generator=g0, dtype=torch.float64)
    m[0, :10] = 0.0
    lr, b1, b2, wd = 1e-3, 0.9, 0.99, 0.1
    c = b1 * m + (1 - b1) * g
    want_p = p * (1 - lr * wd) - lr * torch.sign(c)
    want_m = b2 * m + (1 - b2) * g
    pt, mt = p.to(device, copy=True), m.to(device, copy=True)
    tk.lion_(pt, g.to(device), mt, lr, b1, b2, wd)
    torch.testing.assert_close(pt.cpu(), want_p, rtol=1e-14, atol=1e-15, msg=lambda s: f"seed {seed}: {s}")
    torch.testing.assert_close(mt.cpu(), want_m, rtol=1e-14, atol=1e-15, msg=lambda s: f"seed {seed}: {s}")
    e = torch.randn(5, 33, generator=g0).to(device)
    w = torch.randn(5, 33, generator=g0).to(device)
    want_e = e.clone().lerp_(w, 1 - 0.999)
    tk.ema_(e, w, 0.999)
    torch.testing.assert_close(e, want_e, rtol=1e-6, atol=1e-7, msg=lambda s: f"seed {seed}: {s}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_row_loops_update_rows_in_place(device, dtype):
    seed = fresh_seed()
    x = torch.randn(3, 4, 129, generator=gen(seed)).to(dtype)
    tol = dict(rtol=2e-3, atol=2e-3) if dtype == torch.float16 else dict(rtol=1e-5, atol=1e-5)
    y = x.to(device, copy=True)
    tk.ipt_cumsum(y)
    torch.testing.assert_close(y.cpu().double(), x.double().cumsum(-1), **tol, msg=lambda s: f"seed {seed}: {s}")
    z = x.to(device, copy=True).transpose(0, 1)   # a strided batch
    tk.ipt_softmax(z)
    torch.testing.assert_close(z.cpu().double(), x.transpose(0, 1).double().softmax(-1), **tol,
                               msg=lambda s: f"seed {seed}: {s}")


def test_an_op_that_updates_one_tensor_and_returns_another():
    seed = fresh_seed()
    x = torch.randn(6, 50, generator=gen(seed))
    y = x.clone()
    s = tk.ipt_scale_and_sum(y, 0.5)
    assert s.shape == (6,) and s.data_ptr() != y.data_ptr()
    torch.testing.assert_close(y, x * 0.5, msg=lambda m: f"seed {seed}: {m}")
    torch.testing.assert_close(s, (x * 0.5).sum(-1), msg=lambda m: f"seed {seed}: {m}")


def test_compiled_training_step_matches_eager():
    """A training loop whose optimizer step (tk.adamw_ over every parameter,
    the step count symbolic) is one compiled graph that mutates its inputs."""
    seed = fresh_seed()
    torch.manual_seed(seed)
    model = torch.nn.Linear(32, 16)
    data, target = torch.randn(8, 32), torch.randn(8, 16)

    def opt_step(params, grads, state, k):
        for p, g, (mm, vv) in zip(params, grads, state):
            tk.adamw_(p, g, mm, vv, 1e-2, 0.9, 0.999, 1e-8, 0.01, k)

    def run(step_fn):
        m = torch.nn.Linear(32, 16)
        m.load_state_dict(model.state_dict())
        params = list(m.parameters())
        state = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
        losses = []
        for k in range(1, 4):
            loss = torch.nn.functional.mse_loss(m(data), target)
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                step_fn(params, grads, state, k)
            losses.append(loss.detach())
        return losses, [p.detach().clone() for p in params] + [t for mv in state for t in mv]

    le, pe = run(opt_step)
    lc, pc = run(torch.compile(opt_step, fullgraph=True))
    for a, b in zip(le + pe, lc + pc):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=lambda s: f"seed {seed}: {s}")


def test_compiled_update_of_an_intermediate():
    seed = fresh_seed()
    x = torch.randn(3, 50, generator=gen(seed))

    def f(x):
        y = x * 2
        tk.ipt_softmax(y)
        return y + 1

    torch.testing.assert_close(torch.compile(f, fullgraph=True)(x), (x * 2).softmax(-1) + 1,
                               msg=lambda s: f"seed {seed}: {s}")


def test_export_records_the_buffer_update():
    """torch.export of a module that updates a buffer (an EMA) and an
    intermediate in place: functionalised (run_decompositions), the buffer
    update is a graph output, and running the exported module applies it."""
    class Ema(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("avg", torch.zeros(10))

        def forward(self, x):
            y = x * 2
            tk.ipt_softmax(y)
            tk.ema_(self.avg, y[0], 0.9)
            return y + 1

    seed = fresh_seed()
    x = torch.randn(4, 10, generator=gen(seed))
    ep = torch.export.export(Ema(), (x,)).run_decompositions()
    assert list(ep.graph_signature.buffers_to_mutate.values()) == ["avg"]
    mod = ep.module()
    out = mod(x)
    want = (x * 2).softmax(-1)
    torch.testing.assert_close(out, want + 1, msg=lambda s: f"seed {seed}: {s}")
    torch.testing.assert_close(mod.avg, 0.1 * want[0], msg=lambda s: f"seed {seed}: {s}")


def test_schema_marks_exactly_the_mut_parameters():
    schema = tk.adamw_.default._schema
    written = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    assert written == ["p", "m", "v"] and schema.is_mutable and len(schema.returns) == 0
    schema = tk.ipt_scale_and_sum.default._schema
    assert [a.name for a in schema.arguments if a.alias_info is not None] == ["x"] and len(schema.returns) == 1


def test_tkc_plan_says_what_is_updated_in_place(tkc):
    out = subprocess.run([tkc, "plan", os.path.join(ROOT, "examples", "specs", "optim.tk")],
                         capture_output=True, text=True, check=True).stdout
    assert "plan adamw_, variant f32_f32 (5 of 8), target cpu\n  in place ('mut'): p, m, v, loaded and stored " \
           "through one pointer each into the caller's tensor\n" in out, out[:600]
    assert "plan ema_, variant f32 (3 of 4), target cpu\n  in place ('mut'): e," in out, out


def test_opcheck():
    seed = fresh_seed()
    g0 = gen(seed)
    args = (torch.randn(2, 40, generator=g0), torch.randn(2, 40, generator=g0), torch.zeros(2, 40),
            torch.zeros(2, 40), 1e-3, 0.9, 0.999, 1e-8, 0.01, 2)
    torch.library.opcheck(tk.adamw_.default, args)
    torch.library.opcheck(tk.ipt_scale_and_sum.default, (torch.randn(3, 20, generator=g0), 2.0))


def test_torchscript_and_inference_mode():
    @torch.jit.script
    def scripted(e: torch.Tensor, p: torch.Tensor):
        torch.ops.tk.ema_(e, p, 0.5)
        return e

    e, p = torch.zeros(10), torch.ones(10)
    assert torch.equal(scripted(e, p), torch.full((10,), 0.5))
    with torch.inference_mode():
        a, b = torch.zeros(10), torch.ones(10)
        tk.ema_(a, b, 0.75)
    assert torch.equal(a, torch.full((10,), 0.25))


def test_update_of_a_reused_output_block():
    """A large output of a tk op comes from the CPU output cache, where a
    loop-free op's outputs may be written by streaming stores through a
    small buffer; an op that reads what it updates must not take that path."""
    seed = fresh_seed()
    x = torch.randn(1 << 21, generator=gen(seed))
    for _ in range(2):                    # the second round's outputs reuse the first's blocks
        e, p = tk.ipt_copy(x), tk.ipt_copy(x * 3)
    tk.ema_(e, p, 0.5)
    torch.testing.assert_close(e, x * 2, msg=lambda s: f"seed {seed}: {s}")


def test_autocast_does_not_cast_a_mut_argument():
    p, m, v = torch.randn(64), torch.zeros(64), torch.zeros(64)
    before = p.clone()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match=r"tk\.adamw_: argument 'g'"):
            tk.adamw_(p, torch.randn(64, dtype=torch.bfloat16), m, v, 1e-3, 0.9, 0.999, 1e-8, 0.0, 1)
        tk.adamw_(p, torch.ones(64), m, v, 1e-3, 0.9, 0.999, 1e-8, 0.0, 1)   # same dtypes: runs in place
    assert not torch.equal(p, before)


def test_rows_added_in_parts_into_a_mut_tensor():
    """One iteration adding rows into w: on the CPU its loop over r runs in
    parts (16 here), part 0's share into a copy that starts from w."""
    seed = fresh_seed()
    g0 = gen(seed)
    x = torch.randn(1024, 1024, generator=g0, dtype=torch.float64)
    w0 = torch.randn(1024, generator=g0, dtype=torch.float64)
    w = w0.clone()
    tk.ipt_accumulate(w, x, 0.5)
    torch.testing.assert_close(w, w0 + 0.5 * x.sum(0), rtol=1e-12, atol=1e-11, msg=lambda s: f"seed {seed}: {s}")


def test_inference_mode_bumps_versions_and_inference_tensors_stay_inside():
    a = torch.ones(3, requires_grad=True)
    b = torch.zeros(3)
    out = (a * b).sum()                   # saves b
    with torch.inference_mode():
        tk.ema_(b, torch.ones(3), 0.5)    # a normal tensor updated in inference mode: its version moves
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.backward()
    with torch.inference_mode():
        t = torch.zeros(3)
    with pytest.raises(RuntimeError, match=r"tk\.ema_: argument 'e' is an inference tensor, which cannot be "
                                           r"updated in place outside torch\.inference_mode\(\)"):
        tk.ema_(t, torch.ones(3), 0.5)


def test_vmap_refuses_an_op_that_writes_an_argument():
    with pytest.raises(RuntimeError, match=r"Batching rule not implemented for tk::ema_"):
        torch.func.vmap(lambda e, p: (tk.ema_(e, p, 0.5), e)[1])(torch.zeros(4, 3), torch.ones(4, 3))


def test_refused_arguments():
    p, m, v = torch.randn(100), torch.zeros(100), torch.zeros(100)
    with pytest.raises(RuntimeError, match=r"tk\.ema_: argument 'e' is updated in place but some of its "
                                           r"elements share memory"):
        tk.ema_(torch.zeros(1, 100).expand(4, 100), torch.randn(4, 100), 0.9)
    with pytest.raises(RuntimeError, match=r"tk\.adamw_: argument 'p' is updated in place and shares memory "
                                           r"with argument 'g'"):
        tk.adamw_(p, p, m, v, 1e-3, 0.9, 0.999, 1e-8, 0.0, 1)
    with pytest.raises(RuntimeError, match=r"tk\.adamw_: argument 'm' is updated in place and shares memory "
                                           r"with argument 'v'"):
        tk.adamw_(p, torch.randn(100), m, m, 1e-3, 0.9, 0.999, 1e-8, 0.0, 1)
    with pytest.raises(RuntimeError, match=r"tk\.adamw_: argument 'p' is updated in place and shares memory "
                                           r"with argument 'g'"):
        big = torch.randn(101)
        tk.adamw_(big[:100], big[1:], m, v, 1e-3, 0.9, 0.999, 1e-8, 0.0, 1)
    with pytest.raises(RuntimeError, match=r"tk\.adamw_: assert step >= 1 .*failed with step = 0"):
        tk.adamw_(p, torch.randn(100), m, v, 1e-3, 0.9, 0.999, 1e-8, 0.0, 0)
    assert torch.equal(m, torch.zeros(100)), "a refused call changed a tensor"


def test_autograd_is_refused_and_saved_tensors_are_guarded():
    w = torch.randn(50, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"tk\.ema_: argument 'e' requires grad, and tk\.ema_ updates "
                                           r"tensors in place"):
        tk.ema_(w, torch.randn(50), 0.9)
    with torch.no_grad():
        tk.ema_(w, torch.zeros(50), 0.5)  # an optimizer-style update of a leaf
    x = torch.randn(50, requires_grad=True)
    e = torch.randn(50)
    loss = (x * e).sum()                  # saves e for the backward
    version = e._version
    tk.ema_(e, torch.zeros(50), 0.5)
    assert e._version > version
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()
