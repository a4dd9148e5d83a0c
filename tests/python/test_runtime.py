"""Run-time specs: torch_tk.kernel / torch_tk.load (docs/runtime.md).

The three worked examples of examples/specs/ against their torch formulations
(CPU; CUDA when there is a GPU), their gradients (gradcheck, float64),
torch.compile(fullgraph=True) and torch.jit.script with a run-time op, the
re-registration rules, malformed specs with their exact messages, four
threads registering at once, CPU kernels compiled per (op, dtype) on the
first call that needs one (not at registration; once under concurrent first
calls), and the C compiler's errors and disk cache (in fresh processes).
Compiled kernels are cached (~/.cache/tk/cpu or $TK_CACHE_DIR/cpu), so a
second run compiles nothing.
"""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

import torch_tk

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPECS = os.path.join(ROOT, "examples", "specs")
DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")),
]


def spec(name):
    """The op of examples/specs/<name>.tk (registered once per process)."""
    return torch_tk.load(os.path.join(SPECS, name + ".tk"))


def gen(seed):
    return torch.Generator().manual_seed(seed)


# ---- torch formulations of the worked examples ----------------------------------

def rotary_torch(q, cos, sin):
    """q * cos + rotate_half(q) * sin, as Hugging Face's Llama writes it."""
    half = q.shape[-1] // 2
    rotated = torch.cat((-q[..., half:], q[..., :half]), dim=-1)
    return q * cos + rotated * sin


def rotary_tables(T, D, dtype=torch.float64, base=10000.0):
    inv_freq = 1.0 / base ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def reflect_brick_pad_torch(tile, pw, ph, stagger, height=None, width=None):
    """The index arithmetic of examples/specs/reflect_brick_pad.tk in torch ops."""
    TH, TW = tile.shape[-2:]
    H = TH + 2 * ph if height is None else height
    W = TW + 2 * pw if width is None else width
    y = torch.arange(H) - ph
    v = torch.div(y, TH, rounding_mode="floor")
    y2 = y - v * TH
    i = torch.where(v % 2 == 0, y2, TH - 1 - y2)                     # (H,)
    x = torch.arange(W)[None, :] - pw - v[:, None] * stagger
    u = torch.div(x, TW, rounding_mode="floor")
    x2 = x - u * TW
    j = torch.where(u % 2 == 0, x2, TW - 1 - x2)                     # (H, W)
    return tile[..., i[:, None], j]


def wkv_loop(w, u, k, v):
    """The RWKV-4 recurrence as a Python loop over t (float64), vectorised over
    (B, C): the reference the spec was written from (docs/tutorial.md)."""
    w, u, k, v = (t.double() for t in (w, u, k, v))
    B, T, C = k.shape
    aa = torch.zeros(B, C, dtype=torch.float64)
    bb = torch.zeros(B, C, dtype=torch.float64)
    pp = torch.full((B, C), -1e38, dtype=torch.float64)
    y = torch.empty(B, T, C, dtype=torch.float64)
    for t in range(T):
        kk, vv = k[:, t], v[:, t]
        ww = u + kk
        p = torch.maximum(pp, ww)
        e1, e2 = torch.exp(pp - p), torch.exp(ww - p)
        y[:, t] = (e1 * aa + e2 * vv) / (e1 * bb + e2)
        ww = w + pp
        p = torch.maximum(ww, kk)
        e1, e2 = torch.exp(ww - p), torch.exp(kk - p)
        aa, bb, pp = e1 * aa + e2 * vv, e1 * bb + e2, p
    return y


def wkv_inputs(B=2, T=6, C=3, dtype=torch.float64, seed=0, requires_grad=False):
    g = gen(seed)
    w = -torch.exp(torch.randn(C, generator=g, dtype=torch.float64))   # decay <= 0
    u = torch.randn(C, generator=g, dtype=torch.float64)
    k = torch.randn(B, T, C, generator=g, dtype=torch.float64)
    v = torch.randn(B, T, C, generator=g, dtype=torch.float64)
    return [t.to(dtype).requires_grad_(requires_grad) for t in (w, u, k, v)]


# ---- the worked examples ----------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rotary_matches_torch(device, dtype):
    rotary = spec("rotary")
    q = torch.randn(2, 3, 5, 8, generator=gen(1), dtype=dtype).to(device)
    cos, sin = (t.to(device) for t in rotary_tables(5, 8, dtype))
    torch.testing.assert_close(rotary(q, cos, sin), rotary_torch(q, cos, sin))
    qt = q.transpose(1, 2).contiguous().transpose(1, 2)   # non-contiguous: read in place
    torch.testing.assert_close(rotary(qt, cos, sin), rotary_torch(qt, cos, sin))


def test_rotary_gradients():
    rotary = spec("rotary")
    q = torch.randn(2, 2, 3, 4, generator=gen(2), dtype=torch.float64, requires_grad=True)
    cos, sin = (t.requires_grad_() for t in rotary_tables(3, 4))
    assert torch.autograd.gradcheck(rotary, (q, cos, sin))
    grads = torch.autograd.grad(rotary(q, cos, sin).sum(), (q, cos, sin))
    want = torch.autograd.grad(rotary_torch(q, cos, sin).sum(), (q, cos, sin))
    for got, ref in zip(grads, want):
        torch.testing.assert_close(got, ref)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8])
@pytest.mark.parametrize(
    "shape, pw, ph, stagger, hw",
    [((4, 5), 3, 2, 0, None), ((3, 4), 9, 7, 2, None), ((2, 3, 4), 5, 6, -3, None),
     ((3, 5), -1, 0, 1, (7, 9)), ((1, 1), 2, 2, 5, None)],
)
def test_reflect_brick_pad_matches_torch(device, dtype, shape, pw, ph, stagger, hw):
    op = spec("reflect_brick_pad")
    tile = torch.randint(0, 100, shape, generator=gen(3)).to(dtype).to(device)
    height, width = hw if hw else (None, None)
    out = op(tile, pw, ph, stagger, height, width)
    assert torch.equal(out, reflect_brick_pad_torch(tile, pw, ph, stagger, height, width))


def test_reflect_brick_pad_is_numpys_symmetric_pad():
    op = spec("reflect_brick_pad")
    tile = torch.arange(20.0).reshape(4, 5)
    for pw, ph in [(0, 0), (1, 2), (5, 4), (3, 1)]:
        want = np.pad(tile.numpy(), ((ph, ph), (pw, pw)), mode="symmetric")
        assert np.array_equal(op(tile, pw, ph, 0).numpy(), want), (pw, ph)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_wkv_matches_the_recurrence(device, dtype, tol):
    wkv = spec("wkv")
    w, u, k, v = wkv_inputs(B=2, T=9, C=4, dtype=dtype, seed=4)
    k = k * 8   # large exponents: the stable recurrence must not overflow
    got = wkv(*(t.to(device) for t in (w, u, k, v))).cpu()
    want = wkv_loop(w, u, k, v)
    assert got.dtype == dtype
    assert ((got.double() - want).abs().max() / want.abs().max()).item() < tol


def test_wkv_gradients():
    wkv = spec("wkv")
    inputs = wkv_inputs(B=2, T=5, C=3, seed=5, requires_grad=True)
    assert torch.autograd.gradcheck(wkv, inputs)
    grads = torch.autograd.grad((wkv(*inputs) * torch.linspace(-1, 1, 30).reshape(2, 5, 3)).sum(), inputs)
    want = torch.autograd.grad((wkv_loop(*inputs) * torch.linspace(-1, 1, 30).reshape(2, 5, 3)).sum(), inputs)
    for got, ref in zip(grads, want):
        torch.testing.assert_close(got, ref)


def test_meta_shapes():
    rotary, pad = spec("rotary"), spec("reflect_brick_pad")
    q = torch.empty(2, 3, 5, 8, device="meta")
    assert rotary(q, torch.empty(5, 8, device="meta"), torch.empty(5, 8, device="meta")).shape == (2, 3, 5, 8)
    assert pad(torch.empty(6, 3, 4, device="meta", dtype=torch.int16), 2, 1, 3).shape == (6, 5, 8)


# ---- torch.compile, TorchScript, opcheck -------------------------------------------

SQUARE_SPEC = """
op rt_square(x: float[..., N]) -> y: x.dtype[..., N]:
    backward rt_square_backward
    for i in y:
        y[i] = x[i] * x[i]
op rt_square_backward(x: float[..., N], grad_y: x.dtype[..., N]) -> grad_x: x.dtype[..., N]:
    for i in grad_x:
        grad_x[i] = 2.0 * x[i] * grad_y[i]
"""


def test_torch_compile_fullgraph():
    torch._dynamo.reset()
    square, rotary = torch_tk.kernel(SQUARE_SPEC), spec("rotary")
    cos, sin = rotary_tables(4, 6, torch.float32)

    def f(x):
        return square(rotary(torch.tanh(x), cos, sin)).sum(dim=-1)

    x = torch.randn(2, 3, 4, 6, generator=gen(6), requires_grad=True)
    compiled = torch.compile(f, fullgraph=True)  # raises on a graph break
    y1, y2 = f(x), compiled(x)
    torch.testing.assert_close(y2, y1)
    (g1,) = torch.autograd.grad(y1.sum(), x)
    (g2,) = torch.autograd.grad(y2.sum(), x)
    torch.testing.assert_close(g2, g1)
    torch._dynamo.reset()


def test_registration_inside_torch_compile():
    """torch_tk.kernel inside a compiled function runs eagerly (a graph break, no dynamo warnings);
    under fullgraph=True it is an error that names the disabled function."""
    import warnings
    torch._dynamo.reset()
    text = "op rt_inc_c(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i] + 1.0\n"

    def f(x):
        return torch_tk.kernel(text)(x) * 2

    x = torch.randn(5, generator=gen(8))
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # dynamo's "does not know how to trace" warnings fail the test
        out = torch.compile(f)(x)
    torch.testing.assert_close(out, (x + 1) * 2)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="disable"):
        torch.compile(f, fullgraph=True)(x)
    torch._dynamo.reset()


def test_torch_jit_script():
    torch_tk.kernel(SQUARE_SPEC)

    @torch.jit.script
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.ops.tk.rt_square(x) + 1.0

    x = torch.randn(3, 4, generator=gen(7))
    torch.testing.assert_close(f(x), x * x + 1)
    assert "tk::rt_square" in str(f.graph)


def test_opcheck():
    square = torch_tk.kernel(SQUARE_SPEC)
    x = torch.randn(3, 5, generator=gen(8), requires_grad=True)
    torch.library.opcheck(square.default, (x,))


def readme_example():
    """The Python block of the README's "Your own op, from a training script"."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    section = text.split("### Your own op, from a training script", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_readme_training_script():
    """The README's example runs as written: seven lines make the op and its
    derived gradient, and the training loop using it lowers the loss."""
    code = readme_example()
    assert code.index("model = ") == len("".join(code.splitlines(keepends=True)[:7]))   # seven lines
    assert "backward auto" in code
    scope = {}
    torch.manual_seed(0)
    exec(compile(code, "README.md", "exec"), scope)
    torch.manual_seed(0)
    untrained = torch.nn.Linear(8, 8)   # the README's model before its loop
    x = torch.randn(256, 8)
    with torch.no_grad():
        loss = [(scope["swish"](m(x)) - x.sin()).pow(2).mean().item() for m in (untrained, scope["model"])]
    assert loss[1] < 0.5 * loss[0], loss
    h = torch.randn(4, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(torch.ops.tk.swish, (h,))


# ---- registration rules --------------------------------------------------------------

def test_same_spec_again_is_a_no_op():
    a = torch_tk.kernel(SQUARE_SPEC)
    b = torch_tk.kernel(SQUARE_SPEC, file="another_name.tk")   # same text: same op
    assert a is torch.ops.tk.rt_square and b is torch.ops.tk.rt_square
    path = os.path.join(SPECS, "rotary.tk")
    assert torch_tk.load(path) is torch_tk.load(path) is torch.ops.tk.rotary


def test_indented_spec_text():
    def make():
        return torch_tk.kernel("""
            op rt_indented(x: float[N]) -> y: x.dtype[N]:
                for i in y:
                    y[i] = x[i] + 2.0
        """)

    assert torch.equal(make()(torch.zeros(2)), torch.full((2,), 2.0))
    with pytest.raises(torch_tk.SpecError) as info:
        torch_tk.kernel("""
            op rt_indented_bad(x: float[N]) -> y: x.dtype[N]:
                for i in y:
                    y[i] = x[i] + z
        """)
    assert str(info.value).splitlines() == ["<string>:4:23: error: unknown name 'z'",
                                            "        y[i] = x[i] + z", "                      ^"]


def test_different_spec_same_name_is_an_error():
    torch_tk.kernel(SQUARE_SPEC)
    other = SQUARE_SPEC.replace("x[i] * x[i]", "x[i] * x[i] * 1.0")
    with pytest.raises(RuntimeError, match=r"^tk\.rt_square is already registered from a different spec "
                                           r"\(<string>\); an op cannot be redefined in a running process: "
                                           r"give it a new name, or restart the process$"):
        torch_tk.kernel(other)
    x = torch.randn(4)
    torch.testing.assert_close(torch.ops.tk.rt_square(x), x * x)   # the first one stays


def test_a_derived_op_name_taken_says_backward_auto_derives_it():
    """'backward auto' of rt_clash derives rt_clash_backward: a name a spec
    registered before. The error says where the name comes from."""
    torch_tk.kernel("op rt_clash_backward(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n")
    with pytest.raises(RuntimeError, match=r"^tk\.rt_clash_backward is already registered from a different spec "
                                           r".*\('backward auto' of rt_clash derives an op of that name: rename "
                                           r"rt_clash\)$"):
        torch_tk.kernel("op rt_clash(x: float[N]) -> y: x.dtype[N]:\n    backward auto\n    for i in y:\n"
                        "        y[i] = x[i] * x[i]\n")
    assert not hasattr(torch.ops.tk, "rt_clash")


def test_edited_comments_and_blank_lines_are_the_same_spec():
    first = torch_tk.kernel(SQUARE_SPEC)
    edited = "# squares, edited in a notebook\n\n" + SQUARE_SPEC.replace("\n", "   # a note\n", 2) + "\n\n"
    assert edited != SQUARE_SPEC and torch_tk.kernel(edited) is first
    # indentation is syntax: a body indented deeper is another text (it parses, and means the same here,
    # but only comments, trailing spaces and blank lines are ignored)
    indented = SQUARE_SPEC.replace("        grad_x[i] =", "            grad_x[i] =")
    assert indented != SQUARE_SPEC
    with pytest.raises(RuntimeError, match=r"tk\.rt_square is already registered from a different spec"):
        torch_tk.kernel(indented)


@pytest.mark.parametrize("name", ["brick_pad", "rwkv_backward_k"])
def test_builtin_op_cannot_be_replaced(name):
    text = f"op {name}(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n"
    with pytest.raises(RuntimeError, match=rf"^tk\.{name} is a built-in op \(ops/\w+\.tk\) and cannot be "
                                           r"replaced: give your op another name$"):
        torch_tk.kernel(text)


def test_name_defined_by_another_library_is_refused():
    """tk::<name> defined with torch.library (not by a tk spec): registering a
    spec of that name is refused before anything is registered, so the spec
    under another name works."""
    lib = torch.library.Library("tk", "FRAGMENT")
    lib.define("rt_taken(Tensor x) -> Tensor")
    text = "op rt_taken(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i] + 1.0\n"
    with pytest.raises(RuntimeError, match=r"^tk::rt_taken is already defined in torch by another library \(not by "
                                           r"a tk spec\): give your op another name$"):
        torch_tk.kernel(text)
    op = torch_tk.kernel(text.replace("rt_taken", "rt_taken2"))
    torch.testing.assert_close(op(torch.zeros(3)), torch.ones(3))


def test_refused_spec_leaves_its_names_free():
    """A spec refused by the checker (here: a parameter without a default after
    one with a default, which torch's schemas do not take) registers none of
    its ops, so the corrected text registers under the same names."""
    bad = ("op rt_free(x: float[N], eps: float = 0.5) -> y: x.dtype[N]:\n    backward rt_free_bw\n"
           "    for i in y:\n        y[i] = x[i] * eps\n"
           "op rt_free_bw(eps: float = 0.5, grad_y: float[N]) -> grad_x: grad_y.dtype[N]:\n"
           "    for i in grad_x:\n        grad_x[i] = grad_y[i] * eps\n")
    with pytest.raises(torch_tk.SpecError, match=r"parameter 'grad_y' has no default but follows 'eps'"):
        torch_tk.kernel(bad, file="free.tk")
    assert not hasattr(torch.ops.tk, "rt_free") and not hasattr(torch.ops.tk, "rt_free_bw")
    good = bad.replace("rt_free_bw(eps: float = 0.5, grad_y: float[N])", "rt_free_bw(grad_y: float[N], eps: float = 0.5)")
    op = torch_tk.kernel(good, file="free.tk")
    x = torch.randn(4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(op, (x,))


def test_backward_in_an_earlier_spec():
    torch_tk.kernel("op rt_twice_backward(grad_y: float[N]) -> grad_x: grad_y.dtype[N]:\n"
                    "    for i in grad_x:\n        grad_x[i] = 2.0 * grad_y[i]\n")
    twice = torch_tk.kernel("op rt_twice(x: float[N]) -> y: x.dtype[N]:\n    backward rt_twice_backward\n"
                            "    for i in y:\n        y[i] = 2.0 * x[i]\n")
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(twice, (x,))


def test_backward_reads_an_int_output():
    # the forward's int output (the indices it gathered from) feeds its
    # backward op: it has no gradient history, and is saved all the same
    gather = torch_tk.kernel("""
        op rt_rev_gather(x: float[..., N]) -> (y: x.dtype[..., N], idx: int64[..., N]):
            backward rt_rev_gather_backward
            for i in y:
                j = N - 1 - (i * 3) % N
                y[i] = x[j]
                idx[i] = j
        op rt_rev_gather_backward(idx: int64[..., N], grad_y: float[..., N]) -> grad_x: grad_y.dtype[..., N]:
            for i in grad_x:
                s = 0.0
                for m in range(N):
                    if idx[m] == i:
                        s += grad_y[m]
                grad_x[i] = s
        """)
    x = torch.randn(3, 7, dtype=torch.float64, requires_grad=True)
    y, idx = gather(x)
    assert not idx.requires_grad and idx.grad_fn is None
    j = (torch.arange(7) * 3) % 7
    j = 6 - j
    assert torch.equal(idx, j.expand(3, 7)) and torch.equal(y, x[:, j])
    g = torch.randn(3, 7, dtype=torch.float64)
    y.backward(g)
    expected = torch.zeros(3, 7, dtype=torch.float64).index_add_(1, j, g)
    assert torch.equal(x.grad, expected)
    assert torch.autograd.gradcheck(lambda t: gather(t)[0], (torch.randn(2, 5, dtype=torch.float64,
                                                                         requires_grad=True),))
    # the saved int output is checked like any saved tensor
    y, idx = gather(x)
    idx.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


# ---- malformed specs: the message, the line and the caret -----------------------------

ID = "op {n}(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n"
MALFORMED = [
    ("op bad_a(x: float[N]) -> y: x.dtype[N]\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:39: error: expected ':' after the output list, found NEWLINE\n"
     "op bad_a(x: float[N]) -> y: x.dtype[N]\n"
     "                                      ^"),
    (ID.format(n="bad_b") + "        y[i] = x[i] +\n",
     "bad.tk:3:22: error: expected an expression, found NEWLINE\n"
     "        y[i] = x[i] +\n"
     "                     ^"),
    (ID.format(n="bad_c") + "\ty[i] = x[i]\n",
     "bad.tk:3:1: error: tab in indentation (indent with spaces)\n"
     "\ty[i] = x[i]\n"
     "^"),
    ("op bad_d(x: float[N]) -> y: x.dtype[M]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:37: error: unknown name 'M' in an output dim\n"
     "op bad_d(x: float[N]) -> y: x.dtype[M]:\n"
     "                                    ^"),
    ("op bad_e(x: floaty[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:13: error: expected a dtype (any, float, int, bool, uint8, int8, int16, int32, int64, float16, "
     "bfloat16, float32, float64) or 'x.dtype', found 'floaty'\n"
     "op bad_e(x: floaty[N]) -> y: x.dtype[N]:\n"
     "            ^"),
    (ID.format(n="bad_f") + "        y[0] = x[i]\n",
     "bad.tk:3:9: error: an output can only be written at the loop index: y[i]\n"
     "        y[0] = x[i]\n"
     "        ^"),
    (ID.format(n="bad_g") + "        n = 1\n        n = x[i]\n        y[i] = n\n",
     "bad.tk:4:9: error: 'n' is an int (from its first assignment, line 3); a float value needs int(...) here, or make 'n' a float from the start ('n = 0.0')\n"
     "        n = x[i]\n"
     "        ^"),
    (ID.format(n="bad_h") + "        y[i] = x[i, i]\n",
     "bad.tk:3:16: error: 'x' takes 1 indices (one per explicit dim), got 2\n"
     "        y[i] = x[i, i]\n"
     "               ^"),
    ("op bad_i(x: float[N]) -> y: x.dtype[N]:\n    backward bad_i_grad\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:2:14: error: backward op 'bad_i_grad' of 'bad_i': no such op (is its spec file loaded?)\n"
     "    backward bad_i_grad\n"
     "             ^"),
    (ID.format(n="bad_j") + "        x[i] = 1.0\n",
     "bad.tk:3:9: error: input 'x' is read-only (declare it 'x: mut ...' to update it in place)\n"
     "        x[i] = 1.0\n"
     "        ^"),
    (ID.format(n="bad_k") + "        y[i] = gamma(x[i])\n",
     "bad.tk:3:16: error: unknown function 'gamma'\n"
     "        y[i] = gamma(x[i])\n"
     "               ^"),
    ("op bad_l(x: float[N], x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:23: error: 'x' is declared twice (first at line 1)\n"
     "op bad_l(x: float[N], x: float[N]) -> y: x.dtype[N]:\n"
     "                      ^"),
    ("op bad_m(x: float[N]) -> y: x.dtype[N]:\n    for i, j in y:\n        y[i] = x[i]\n",
     "bad.tk:2:17: error: 'y' has 1 explicit dims, so the loop needs 1 variables, not 2\n"
     "    for i, j in y:\n"
     "                ^"),
    (ID.format(n="bad_n") + "        y[i] = x[i]  # café\n        z = é\n",
     "bad.tk:4:13: error: non-ASCII character 'é': names, numbers and operators are ASCII\n"
     "        z = é\n"
     "            ^"),
    ("# a comment and nothing else\n", "bad.tk:1:1: error: the spec defines no op"),
    ("\ufeffop bad_q(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i] +\n",
     "bad.tk:3:22: error: expected an expression, found NEWLINE\n"
     "        y[i] = x[i] +\n"
     "                     ^"),
    ("\ufeffop bad_r(x: float[N]) -> y: x.dtype[N] for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:40: error: expected ':' after the output list, found 'for'\n"
     "op bad_r(x: float[N]) -> y: x.dtype[N] for i in y:\n"
     "                                       ^"),
    ("\ufeff" + ID.format(n="bad_p") + "        y[i] = x[i] + σ\n",   # (a byte order mark is skipped)
     "bad.tk:3:23: error: non-ASCII character 'σ': names, numbers and operators are ASCII\n"
     "        y[i] = x[i] + σ\n"
     "                      ^"),
    # an output named grad_<output>: its derived backward op read it as y's gradient (a wrong gradient)
    ("op bad_gy(x: float[N]) -> (y: x.dtype[N], grad_y: x.dtype[N]):\n    backward auto\n    for i in y:\n"
     "        y[i] = x[i] * x[i]\n        grad_y[i] = 3.0 * x[i]\n",
     "bad.tk:1:43: error: output 'grad_y' of 'bad_gy' has the name its backward ops give the incoming gradient of "
     "output 'y': rename it\n"
     "op bad_gy(x: float[N]) -> (y: x.dtype[N], grad_y: x.dtype[N]):\n"
     "                                          ^"),
    # the core reads C strings: without the check it compiled "y[i] = x[i]"
    (ID.format(n="bad_o") + "        y[i] = x[i]\x00 * 100.0\n",
     "bad.tk:3:20: error: invalid character '\\x00'\n"
     "        y[i] = x[i]\x00 * 100.0\n"
     "                   ^"),
]


@pytest.mark.parametrize("text, message", MALFORMED, ids=[f"malformed{i}" for i in range(len(MALFORMED))])
def test_malformed_spec(text, message):
    with pytest.raises(torch_tk.SpecError) as info:
        torch_tk.kernel(text, file="bad.tk")
    assert str(info.value) == message
    assert isinstance(info.value, ValueError)
    err = info.value
    assert err.file == "bad.tk"
    # the attributes are the core's error fields, and its text is made of them
    first = str(err).splitlines()[0]
    assert first == (f"{err.file}:{err.line}:{err.col}: error: {err.message}" if err.line
                     else f"{err.file}: error: {err.message}")
    name = text.split("(")[0].removeprefix("op ")
    assert not hasattr(torch.ops.tk, name)   # nothing registered


def test_spec_error_from_a_file(tmp_path):
    path = tmp_path / "broken.tk"
    path.write_text("op broken(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i] * q\n")
    with pytest.raises(torch_tk.SpecError) as info:
        torch_tk.load(path)
    err = info.value
    assert (err.file, err.line, err.col) == (str(path), 3, 23)
    assert str(err).splitlines() == [f"{path}:3:23: error: unknown name 'q'",
                                     "        y[i] = x[i] * q", "                      ^"]


def test_a_file_that_is_not_utf8_is_a_spec_error(tmp_path):
    """A Latin-1 byte in a spec file: a SpecError at its line and column
    (was a bare UnicodeDecodeError)."""
    path = tmp_path / "latin.tk"
    path.write_bytes(b"op lat1(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]  # caf\xe9\n")
    with pytest.raises(torch_tk.SpecError) as info:
        torch_tk.load(path)
    err = info.value
    assert (err.file, err.line, err.col) == (str(path), 3, 27)
    assert str(err).splitlines()[0] == f"{path}:3:27: error: the file is not UTF-8 text (byte 0xe9)"
    assert not hasattr(torch.ops.tk, "lat1")


def test_load_given_spec_text_points_to_kernel():
    """torch_tk.load takes a path: spec text passed to it (a str with line
    breaks) raises a TypeError naming torch_tk.kernel, not an OSError about
    a file name."""
    text = "op load_text(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n"
    with pytest.raises(TypeError, match=r"torch_tk\.load takes a spec file's path.*torch_tk\.kernel\(text\)"):
        torch_tk.load(text)
    assert not hasattr(torch.ops.tk, "load_text")


def test_spec_error_fields_not_parsed_from_text():
    """A file name that looks like a place, and a message that holds one: the
    fields still say where the error is (they are not read back from the text)."""
    text = ("op rt_fields(x: float[N]) -> y: x.dtype[N]:\n    backward rt_fields_bw\n    for i in y:\n"
            "        y[i] = x[i]\n")
    with pytest.raises(torch_tk.SpecError) as info:
        torch_tk.kernel(text, file="odd:7:9: error: name.tk")
    err = info.value
    assert (err.file, err.line, err.col) == ("odd:7:9: error: name.tk", 2, 14)   # a backward that does not link
    assert "rt_fields_bw" in err.message and not err.message.startswith("odd")
    assert str(err).splitlines()[0] == f"odd:7:9: error: name.tk:2:14: error: {err.message}"
    assert not hasattr(torch.ops.tk, "rt_fields")


# ---- threads -------------------------------------------------------------------------

def test_four_threads_register_at_once():
    """Two threads register one spec, two others two more, while built-in ops
    run: every thread gets a working op, the shared one is registered once."""
    shared = "op rt_conc_shared(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i] + 1.0\n"
    texts = [shared, shared] + [
        f"op rt_conc_{n}(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i] * {n}.0\n"
        for n in (2, 3)]
    wants = [lambda x: x + 1, lambda x: x + 1, lambda x: x * 2, lambda x: x * 3]
    barrier = threading.Barrier(5)
    results, errors, stop = [None] * 4, [], threading.Event()

    def register(i):
        try:
            barrier.wait()
            op = torch_tk.kernel(texts[i])
            x = torch.randn(100, generator=gen(i))
            results[i] = (op, torch.allclose(op(x), wants[i](x)))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def run_builtin():
        barrier.wait()
        tile = torch.rand(5, 6, generator=gen(9))
        want = torch.ops.tk.brick_pad(tile, 3, 2, 1)
        while not stop.is_set():
            assert torch.equal(torch.ops.tk.brick_pad(tile, 3, 2, 1), want)

    threads = [threading.Thread(target=register, args=(i,)) for i in range(4)]
    runner = threading.Thread(target=run_builtin)
    for t in threads + [runner]:
        t.start()
    for t in threads:
        t.join(timeout=300)
    stop.set()
    runner.join(timeout=60)
    assert not errors, errors
    assert all(ok for _, ok in results), results
    assert results[0][0] is results[1][0] is torch.ops.tk.rt_conc_shared


# ---- the C compiler, in fresh processes -------------------------------------------------

def run_python(code, tmp_path, **env):
    full = dict(os.environ, TK_CACHE_DIR=str(tmp_path / "cache"), **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=full)


CACHE_SCRIPT = """
import torch, torch_tk
op = torch_tk.kernel('op rt_cached(x: float[N]) -> y: x.dtype[N]:\\n    for i in y:\\n        y[i] = x[i] - 1.0\\n')
assert torch.equal(op(torch.ones(3)), torch.zeros(3))
print("ok")
"""


def test_kernels_are_cached_on_disk(tmp_path):
    first = run_python(CACHE_SCRIPT, tmp_path, TK_DEBUG="1")
    assert first.returncode == 0, first.stderr
    assert "tk: compiling the CPU kernels of rt_cached (f32):" in first.stderr
    entries = sorted(os.listdir(tmp_path / "cache" / "cpu"))
    assert len(entries) == 1 and entries[0].endswith(".so") and len(entries[0]) == 64 + 3, entries
    second = run_python(CACHE_SCRIPT, tmp_path, TK_DEBUG="1")
    assert second.returncode == 0, second.stderr
    assert "tk: CPU kernels of rt_cached (f32): from the cache" in second.stderr
    assert "compiling" not in second.stderr


def test_no_c_compiler(tmp_path):
    code = ("import torch, torch_tk\ntry:\n    torch_tk.kernel('op rt_nocc(x: float[N]) -> y: x.dtype[N]:\\n"
            "    for i in y:\\n        y[i] = x[i]\\n')\nexcept RuntimeError as e:\n    print(e)\n"
            "print(hasattr(torch.ops.tk, 'rt_nocc'))\n")
    r = run_python(code, tmp_path, TK_CC="/nonexistent/bin/cc")
    assert r.returncode == 0, r.stderr
    assert r.stdout == ("tk: no C compiler: '/nonexistent/bin/cc' could not be run (No such file or directory). "
                        "Run-time specs need one for their CPU kernels: install gcc or clang, or set TK_CC to a "
                        "C compiler\nFalse\n")


def test_compile_error_shows_the_compiler_output(tmp_path):
    # registration compiles nothing: the first CPU call fails, naming the op
    # and the dtype, and so does the next one (nothing half-made is kept);
    # the Meta kernel needs no CPU kernel
    code = ("import torch, torch_tk\nop = torch_tk.kernel('op rt_ccfail(x: float[N]) -> y: x.dtype[N]:\\n"
            "    for i in y:\\n        y[i] = x[i]\\n')\nprint('registered')\n"
            "print(op(torch.ones(2, device='meta')).shape)\n"
            "for _ in range(2):\n    try:\n        op(torch.ones(2))\n    except RuntimeError as e:\n"
            "        print(str(e).splitlines()[0])\n        print('tk_missing.h' in str(e).split('\\n', 1)[1])\n"
            "print(torch_tk.runtime_kernels()['rt_ccfail']['f32'])\n")
    r = run_python(code, tmp_path, TK_CC="cc -include /nonexistent/tk_missing.h")
    assert r.returncode == 0, r.stderr
    failed = ("tk: compiling the CPU kernels of rt_ccfail (f32) failed (cc -include /nonexistent/tk_missing.h, "
              "exit status 1; TK_DEBUG=1 prints the source):\nTrue\n")
    assert r.stdout == "registered\ntorch.Size([2])\n" + failed + failed + "0\n"


def test_shape_division_by_zero_under_compile():
    # eager and the symbolic Meta kernel both name the op (the symbolic one
    # raised a bare ZeroDivisionError from the SymInt division)
    pool = torch_tk.kernel("""
        op rt_pool(x: float[..., N], k: int) -> y: x.dtype[..., (N + k - 1) // k]:
            for j in y:
                s = 0.0
                for m in range(k):
                    if j * k + m < N:
                        s += x[j * k + m]
                y[j] = s
        """)
    x = torch.randn(2, 7)
    torch.testing.assert_close(pool(x, 3), torch.nn.functional.pad(x, (0, 2)).view(2, 3, 3).sum(-1))
    with pytest.raises(RuntimeError, match=r"tk\.rt_pool: .*division by zero"):
        pool(x, 0)
    torch._dynamo.reset()
    compiled = torch.compile(lambda t, k: pool(t, k), backend="aot_eager", fullgraph=True, dynamic=True)
    torch.testing.assert_close(compiled(x, 3), pool(x, 3))
    with pytest.raises(RuntimeError, match=r"tk\.rt_pool: a shape expression divides by zero"):
        compiled(x, 0)
    torch._dynamo.reset()


def test_batch_dims_broadcast_or_show_both_shapes():
    add = torch_tk.kernel("""
        op rt_batch_add(x: float[..., N], y: x.dtype[..., N]) -> z: x.dtype[..., N]:
            for i in z:
                z[i] = x[i] + y[i]
        """)
    x, y = torch.randn(2, 3, 4), torch.randn(3, 4)
    torch.testing.assert_close(add(x, x), 2 * x)
    torch.testing.assert_close(add(x, y), x + y)               # batch dims broadcast, as torch's do
    torch.testing.assert_close(add(y, x), x + y)
    b = torch.randn(4)                                         # no batch dims at all
    torch.testing.assert_close(add(x, b), x + b)
    with pytest.raises(RuntimeError, match=r"^tk\.rt_batch_add: argument 'y': its batch dims \(\.\.\.\) are \[2\], "
                                           r"which do not broadcast with those of 'x', \[2, 3\] \(2 against 3, as "
                                           r"torch broadcasts: equal, or one of them 1\)$"):
        add(x, torch.randn(2, 4))


def test_reused_local_names():
    # tests/specs/transforms.tk's reused_names against torch: a temporary
    # reused in two loops and in three branches of an if (the tiled C did
    # not compile), locals named u_lo and u_end (the plain kernel read the
    # loop's bounds for them: wrong results in every variant)
    path = os.path.join(os.path.dirname(__file__), "..", "specs", "transforms.tk")
    text = open(path).read()
    start = text.index("op reused_names(")
    op = torch_tk.kernel(text[start:].replace("op reused_names(", "op rt_reused_names("))
    for dtype in (torch.float32, torch.float64):
        for B, T, k in ((2, 37, 1), (3, 20, -2), (1, 1, 0)):
            x = torch.randn(B, T, dtype=torch.float64)
            ref = torch.empty(B, T, dtype=torch.float64)
            for t in range(T):
                lo = max(0, t - 3)
                s = 2.0 * x[:, lo:t + 1].sum(1) + 3.0 * x[:, t:].sum(1) + (1.0 if k > 0 else 2.5 if k < 0 else 3.5)
                s = s + x[:, [(u + 5) % T for u in range(1, t + 1)]].sum(1)
                ref[:, t] = s
            got = op(x.to(dtype), k)
            torch.testing.assert_close(got.double(), ref, rtol=1e-5 if dtype == torch.float32 else 1e-12,
                                       atol=1e-4 if dtype == torch.float32 else 1e-12)


def test_abs_in_a_shape_does_not_guard_on_the_sign():
    # the symbolic Meta kernel takes abs(k) as max(k, -k): a sign change of k
    # under torch.compile(dynamic=True) does not recompile
    pad = torch_tk.kernel("""
        op rt_abs_pad(x: float[N], k: int) -> y: x.dtype[N + abs(k)]:
            for i in y:
                y[i] = x[i % N]
        """)
    frames = []

    def backend(gm, example_inputs):
        frames.append(gm)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(lambda t, k: pad(t, k) * 2, backend=backend, fullgraph=True, dynamic=True)
    x = torch.randn(5)
    for k in (3, -2, 4, -6):
        ref = x[torch.arange(5 + abs(k)) % 5] * 2
        torch.testing.assert_close(compiled(x, k), ref, rtol=0, atol=0)
    assert len(frames) == 1, f"recompiled {len(frames) - 1} times"
    torch._dynamo.reset()


# ---- CPU kernels compiled per (op, dtype) on first use -----------------------------------

PREFIX_SPEC = """
op rt_lazy_prefix{n}(x: float[..., N]) -> y: x.dtype[..., N]:
    backward rt_lazy_prefix{n}_backward
    for i in y:
        s = 0.0
        for u in range(i + 1):
            s += x[u]
        y[i] = s
op rt_lazy_prefix{n}_backward(grad_y: float[..., N]) -> grad_x: grad_y.dtype[..., N]:
    for i in grad_x:
        s = 0.0
        for u in range(i, N):
            s += grad_y[u]
        grad_x[i] = s
"""


def prefix_op(n):
    """A fresh prefix-sum op (name suffix n) with its backward op, both
    registered and not yet called."""
    op = torch_tk.kernel(PREFIX_SPEC.format(n=n))
    kernels = torch_tk.runtime_kernels()
    for name in (f"rt_lazy_prefix{n}", f"rt_lazy_prefix{n}_backward"):
        assert kernels[name] == {"f16": 0, "bf16": 0, "f32": 0, "f64": 0}, kernels[name]
    return op


def loads(name):
    """{variant: loads} of the CPU kernels of run-time op `name`, the variants
    never loaded left out."""
    return {v: n for v, n in torch_tk.runtime_kernels()[name].items() if n}


def test_float32_then_float64_each_compile_once():
    op = prefix_op(1)
    assert op(torch.ones(3, 0)).shape == (3, 0)                  # nothing to run: nothing compiled
    assert op(torch.ones(2, 5, device="meta")).shape == (2, 5)   # the Meta kernel needs none
    assert loads("rt_lazy_prefix1") == {}
    for dtype, want_loads in ((torch.float32, {"f32": 1}), (torch.float64, {"f32": 1, "f64": 1})):
        for seed in (1, 2):   # the second call of a dtype compiles nothing
            x = torch.randn(3, 37, dtype=dtype, generator=gen(seed))
            y = op(x)
            assert y.dtype == dtype
            torch.testing.assert_close(y, torch.cumsum(x.double(), -1).to(dtype))
            assert loads("rt_lazy_prefix1") == want_loads
    assert loads("rt_lazy_prefix1_backward") == {}   # never called


def test_concurrent_first_calls_compile_once():
    op = prefix_op(2)
    nthreads = 6
    barrier = threading.Barrier(nthreads)
    inputs = [torch.randn(4, 29, generator=gen(10 + i)) for i in range(nthreads)]
    results, errors = [None] * nthreads, []

    def call(i):
        try:
            barrier.wait()
            results[i] = op(inputs[i])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(nthreads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    for x, y in zip(inputs, results):
        torch.testing.assert_close(y, torch.cumsum(x.double(), -1).float())
    assert loads("rt_lazy_prefix2") == {"f32": 1}


def test_backward_op_compiles_on_backward():
    op = prefix_op(3)
    x = torch.randn(2, 23, dtype=torch.float64, generator=gen(4), requires_grad=True)
    y = op(x)
    assert loads("rt_lazy_prefix3") == {"f64": 1} and loads("rt_lazy_prefix3_backward") == {}
    g = torch.randn(2, 23, dtype=torch.float64, generator=gen(5))
    y.backward(g)
    assert loads("rt_lazy_prefix3_backward") == {"f64": 1}
    # d/dx_u sum_i g_i y_i = sum_{i >= u} g_i: a reversed cumulative sum
    torch.testing.assert_close(x.grad, g.flip(-1).cumsum(-1).flip(-1))
    torch.testing.assert_close(y, torch.cumsum(x.detach(), -1))


LAZY_SCRIPT = r"""
import os, torch, torch_tk
cpu = os.path.join(os.environ["TK_CACHE_DIR"], "cpu")
def entries():
    return len([f for f in os.listdir(cpu) if f.endswith(".so")]) if os.path.isdir(cpu) else 0
op = torch_tk.kernel('''
op rt_lazy_axpy(x: float[N], y: x.dtype[N], a: float) -> out: x.dtype[N]:
    backward rt_lazy_axpy_backward
    for i in out:
        out[i] = a * x[i] + y[i]
op rt_lazy_axpy_backward(grad_out: float[N], a: float) -> (grad_x: grad_out.dtype[N], grad_y: grad_out.dtype[N]):
    for i in grad_x:
        grad_x[i] = a * grad_out[i]
        grad_y[i] = grad_out[i]
''')
print(entries())
g = torch.Generator().manual_seed(0)
for dtype in (torch.float32, torch.float32, torch.float64):
    x, y = torch.randn(50, dtype=dtype, generator=g), torch.randn(50, dtype=dtype, generator=g)
    assert torch.allclose(op(x, y, 0.5), 0.5 * x + y)
    print(entries())
print(sorted((op, sorted(v.items())) for op, v in torch_tk.runtime_kernels().items()))
"""


def test_registration_compiles_nothing(tmp_path):
    """A two-op spec: no file in the cache after registration, one per
    (op, dtype) called afterwards; a new process finds them there."""
    r = run_python(LAZY_SCRIPT, tmp_path)
    assert r.returncode == 0, r.stderr
    last = str([("rt_lazy_axpy", [("bf16", 0), ("f16", 0), ("f32", 1), ("f64", 1)]),
                ("rt_lazy_axpy_backward", [("bf16", 0), ("f16", 0), ("f32", 0), ("f64", 0)])])
    assert r.stdout.splitlines() == ["0", "1", "1", "2", last]
    again = run_python(LAZY_SCRIPT, tmp_path, TK_DEBUG="1")
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == ["2", "2", "2", "2", last]
    assert "compiling" not in again.stderr
    assert again.stderr.count("from the cache") == 2, again.stderr


def test_a_kernel_that_does_not_load_names_the_op(tmp_path):
    # a "compiler" that writes a file which is no shared object: the call
    # says which op and dtype, and what dlopen said
    fake = tmp_path / "fake-cc"
    fake.write_text('#!/bin/sh\nif [ "$1" = "--version" ]; then echo "fake cc 1.0"; exit 0; fi\n'
                    'while [ $# -gt 0 ]; do if [ "$1" = "-o" ]; then echo junk > "$2"; fi; shift; done\n')
    fake.chmod(0o755)
    code = ("import torch, torch_tk\nop = torch_tk.kernel('op rt_badso(x: float[N]) -> y: x.dtype[N]:\\n"
            "    for i in y:\\n        y[i] = x[i]\\n')\ntry:\n    op(torch.ones(2, dtype=torch.float64))\n"
            "except RuntimeError as e:\n    print(e)\n")
    r = run_python(code, tmp_path, TK_CC=str(fake))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("tk.rt_badso (f64): tk: cannot load the compiled kernels "), r.stdout
    assert str(tmp_path / "cache" / "cpu") in r.stdout and ".so: " in r.stdout, r.stdout
