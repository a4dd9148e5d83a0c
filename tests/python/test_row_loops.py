"""Row loops (docs/spec.md, "Row loops"): the top-level loop names some dims
of its output and marks the others `_`; one iteration owns those and walks
them with sequential loops. The example specs of examples/specs/ (softmax,
cumsum, layernorm, rmsnorm, wkv) against PyTorch on fresh random inputs:
float32 and float64 (float16 / bfloat16 loosely), non-contiguous inputs,
empty dims, gradcheck of the backward ops in float64, and wkv against the
element-wise O(T^2) spec and a float64 loop over t. Outputs are poisoned:
with torch's deterministic mode torch.empty fills NaN (and the shim then
allocates every output with it), so an element a row loop forgets to write
fails the comparison. Checker errors (racy stores) with file:line:col.
"""
import os

import pytest
import torch
import torch.nn.functional as F

import torch_tk
from torch_tk import reference as ref

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPECS = os.path.join(ROOT, "examples", "specs")


def spec(name):
    """The ops of examples/specs/<name>.tk (registered once per process)."""
    torch_tk.load(os.path.join(SPECS, name + ".tk"))
    return torch.ops.tk


def gen(seed):
    return torch.Generator().manual_seed(seed)


@pytest.fixture(autouse=True)
def poisoned_outputs():
    """torch.empty fills NaN (floats) / the largest value (ints) meanwhile."""
    was = torch.are_deterministic_algorithms_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    yield
    torch.use_deterministic_algorithms(was)
    torch.utils.deterministic.fill_uninitialized_memory = fill


TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-12, atol=1e-12),
       torch.bfloat16: dict(rtol=2e-2, atol=2e-2), torch.float16: dict(rtol=4e-3, atol=4e-3)}
DTYPES = list(TOL)


def close(got, want, dtype):
    assert got.dtype == dtype and got.shape == want.shape
    assert not got.isnan().any(), "an element was not written (NaN poison)"
    torch.testing.assert_close(got.double(), want.double(), **TOL[dtype])


def views(x):
    """x itself, a transposed copy read through its transpose and a strided slice of a bigger tensor:
    the same values, three layouts."""
    t = x.transpose(-1, -2).contiguous().transpose(-1, -2) if x.dim() >= 2 else x
    big = torch.zeros(*x.shape[:-1], 2 * x.shape[-1] + 1, dtype=x.dtype)
    big[..., 1::2] = x
    return [x, t, big[..., 1::2]]


# ---- softmax ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 17), (2, 3, 33), (40,), (4099, 3), (3, 1)])
def test_softmax_matches_torch(dtype, shape):
    tk = spec("softmax")
    x = (torch.randn(shape, generator=gen(1), dtype=torch.float64) * 4).to(dtype)
    want = torch.softmax(x.double(), -1)
    for xv in views(x):
        close(tk.softmax(xv), want, dtype)


@pytest.mark.parametrize("shape", [(0, 7), (3, 0), (2, 0, 5)])
def test_softmax_empty(shape):
    tk = spec("softmax")
    x = torch.randn(shape)
    got = tk.softmax(x)
    assert got.shape == x.shape
    torch.testing.assert_close(got, torch.softmax(x, -1))


def test_softmax_large_values_do_not_overflow():
    tk = spec("softmax")
    x = torch.tensor([[1000.0, 999.0, -1000.0], [-1e30, -1e30, -1e30]])
    torch.testing.assert_close(tk.softmax(x), torch.softmax(x, -1))


def test_softmax_gradients():
    tk = spec("softmax")
    x = torch.randn(3, 2, 6, generator=gen(2), dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(tk.softmax, (x,))
    g = torch.randn(3, 2, 6, generator=gen(3), dtype=torch.float64)
    got = torch.autograd.grad(tk.softmax(x), x, g)[0]
    want = torch.autograd.grad(torch.softmax(x, -1), x, g)[0]
    torch.testing.assert_close(got, want)


# ---- cumsum ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 17), (2, 3, 33), (40,), (2100, 4)])
def test_cumsum_matches_torch(dtype, shape):
    tk = spec("cumsum")
    x = torch.randn(shape, generator=gen(4), dtype=torch.float64).to(dtype)
    want = torch.cumsum(x.double(), -1)
    tol = dict(TOL[dtype])
    if dtype in (torch.bfloat16, torch.float16):   # the running sum is rounded once, at each store
        tol = dict(rtol=3e-2, atol=6e-2)
    for xv in views(x):
        got = tk.cumsum(xv)
        assert not got.isnan().any()
        torch.testing.assert_close(got.double(), want, **tol)


@pytest.mark.parametrize("shape", [(0, 7), (3, 0)])
def test_cumsum_empty(shape):
    tk = spec("cumsum")
    x = torch.randn(shape)
    assert torch.equal(tk.cumsum(x), torch.cumsum(x, -1))


def test_cumsum_gradients():
    tk = spec("cumsum")
    x = torch.randn(2, 3, 7, generator=gen(5), dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(tk.cumsum, (x,))
    g = torch.randn(2, 3, 7, generator=gen(6), dtype=torch.float64)
    got = torch.autograd.grad(tk.cumsum(x), x, g)[0]
    torch.testing.assert_close(got, g.flip(-1).cumsum(-1).flip(-1))


# ---- layernorm and rmsnorm ------------------------------------------------------

def rmsnorm_torch(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def norm_inputs(R, N, dtype, seed):
    g = gen(seed)
    x = (torch.randn(R, N, generator=g, dtype=torch.float64) * 3 + 1).to(dtype)
    w = torch.randn(N, generator=g, dtype=torch.float64).to(dtype)
    b = torch.randn(N, generator=g, dtype=torch.float64).to(dtype)
    return x, w, b


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("R, N", [(7, 33), (1, 1), (2050, 5), (3, 300)])
def test_layernorm_matches_torch(dtype, R, N):
    tk = spec("layernorm")
    x, w, b = norm_inputs(R, N, dtype, 7)
    want = F.layer_norm(x.double(), (N,), w.double(), b.double(), 1e-5)
    for xv in views(x):
        close(tk.layernorm(xv, views(w)[2], b, 1e-5), want, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("R, N", [(7, 33), (1, 1), (2050, 5)])
def test_rmsnorm_matches_torch(dtype, R, N):
    tk = spec("layernorm")
    x, w, _ = norm_inputs(R, N, dtype, 8)
    want = rmsnorm_torch(x.double(), w.double(), 1e-6)
    for xv in views(x):
        close(tk.rmsnorm(xv, w, 1e-6), want, dtype)


@pytest.mark.parametrize("R, N", [(0, 5), (4, 0)])
def test_norms_empty(R, N):
    tk = spec("layernorm")
    x, w, b = norm_inputs(R, N, torch.float32, 9)
    assert tk.layernorm(x, w, b, 1e-5).shape == (R, N)
    assert tk.rmsnorm(x, w, 1e-5).shape == (R, N)


def test_layernorm_gradients():
    tk = spec("layernorm")
    x, w, b = (t.requires_grad_() for t in norm_inputs(5, 6, torch.float64, 10))
    assert torch.autograd.gradcheck(lambda *a: tk.layernorm(*a, 1e-5), (x, w, b))
    g = torch.randn(5, 6, generator=gen(11), dtype=torch.float64)
    got = torch.autograd.grad(tk.layernorm(x, w, b, 1e-5), (x, w, b), g)
    want = torch.autograd.grad(F.layer_norm(x, (6,), w, b, 1e-5), (x, w, b), g)
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e)


def test_rmsnorm_gradients():
    tk = spec("layernorm")
    x, w, _ = (t.requires_grad_() for t in norm_inputs(5, 6, torch.float64, 12))
    assert torch.autograd.gradcheck(lambda *a: tk.rmsnorm(*a, 1e-6), (x, w))
    g = torch.randn(5, 6, generator=gen(13), dtype=torch.float64)
    got = torch.autograd.grad(tk.rmsnorm(x, w, 1e-6), (x, w), g)
    want = torch.autograd.grad(rmsnorm_torch(x, w, 1e-6), (x, w), g)
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e)


def test_norm_weight_grads_float32_many_rows():
    """grad_weight / grad_bias: one iteration adds every row in, reading back its sums."""
    tk = spec("layernorm")
    x, w, b = (t.requires_grad_() for t in norm_inputs(300, 17, torch.float32, 14))
    g = torch.randn(300, 17, generator=gen(15))
    got = torch.autograd.grad(tk.layernorm(x, w, b, 1e-5), (x, w, b), g)
    want = torch.autograd.grad(F.layer_norm(x, (17,), w, b, 1e-5), (x, w, b), g)
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)


# ---- wkv ---------------------------------------------------------------------------

def wkv_loop(w, u, k, v):
    """The RWKV-4 recurrence as a float64 loop over t, vectorised over (B, C)."""
    return ref.wkv_loop(*(t.double() for t in (w, u, k, v)))


def wkv_inputs(B, T, C, dtype=torch.float64, seed=0, requires_grad=False):
    g = gen(seed)
    w = -torch.exp(torch.randn(C, generator=g, dtype=torch.float64))   # decay <= 0
    u = torch.randn(C, generator=g, dtype=torch.float64)
    k = torch.randn(B, T, C, generator=g, dtype=torch.float64) * 2
    v = torch.randn(B, T, C, generator=g, dtype=torch.float64)
    return [t.to(dtype).requires_grad_(requires_grad) for t in (w, u, k, v)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B, T, C", [(2, 9, 4), (1, 1, 1), (3, 70, 5), (2, 5, 1100)])
def test_wkv_matches_the_loop(dtype, B, T, C):
    tk = spec("wkv")
    w, u, k, v = wkv_inputs(B, T, C, dtype, seed=16)
    want = wkv_loop(w, u, k, v)
    tol = dict(TOL[dtype])
    if dtype == torch.float32:
        tol = dict(rtol=1e-4, atol=1e-4)
    got = tk.wkv(w, u, k, v)
    assert not got.isnan().any()
    torch.testing.assert_close(got.double(), want, **tol)
    kt = k.transpose(1, 2).contiguous().transpose(1, 2)   # non-contiguous, read in place
    big = torch.zeros(2 * B, T, C, dtype=dtype)
    big[::2] = v
    vs = big[::2]                                         # every other batch row of a bigger tensor
    torch.testing.assert_close(tk.wkv(w, u, kt, vs).double(), want, **tol)


def test_wkv_matches_the_quadratic_spec():
    tk = spec("wkv")
    spec("wkv_quadratic")
    inputs = wkv_inputs(2, 17, 3, torch.float32, seed=17)
    torch.testing.assert_close(tk.wkv(*inputs), tk.wkv_quadratic(*inputs), rtol=1e-5, atol=1e-5)


def test_wkv_empty_time():
    tk = spec("wkv")
    w, u, k, v = wkv_inputs(2, 0, 3, torch.float32, seed=18)
    assert tk.wkv(w, u, k, v).shape == (2, 0, 3)


def test_wkv_gradients():
    tk = spec("wkv")
    inputs = wkv_inputs(2, 6, 3, seed=19, requires_grad=True)
    assert torch.autograd.gradcheck(tk.wkv, inputs)
    g = torch.randn(2, 6, 3, generator=gen(20), dtype=torch.float64)
    got = torch.autograd.grad(tk.wkv(*inputs), inputs, g)
    want = torch.autograd.grad(wkv_loop(*inputs), inputs, g)
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e)


def test_wkv_gradients_match_the_quadratic_spec_float32():
    tk = spec("wkv")
    spec("wkv_quadratic")
    inputs = wkv_inputs(3, 40, 4, torch.float32, seed=21, requires_grad=True)
    g = torch.randn(3, 40, 4, generator=gen(22))
    got = torch.autograd.grad(tk.wkv(*inputs), inputs, g)
    want = torch.autograd.grad(tk.wkv_quadratic(*inputs), inputs, g)
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e, rtol=2e-4, atol=2e-4)


def test_wkv_long_sequence_float64():
    """T = 600: the O(T) recurrence and its reverse pass stay exact (float64) where the states decay
    and grow over many steps."""
    tk = spec("wkv")
    inputs = wkv_inputs(2, 600, 3, seed=23, requires_grad=True)
    g = torch.randn(2, 600, 3, generator=gen(24), dtype=torch.float64)
    y = tk.wkv(*inputs)
    torch.testing.assert_close(y, wkv_loop(*inputs))
    got = torch.autograd.grad(y, inputs, g)
    want = torch.autograd.grad(wkv_loop(*inputs), inputs, g)
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e)


# ---- the checker and the binder ---------------------------------------------------

RACY = """op racy_{n}(x: float32[R, N]) -> (y: float32[R, N], s: float32[R]):
    for r, _ in y:
        for i in range(N):
            {store}
"""


@pytest.mark.parametrize("n, store, where, msg", [
    (1, "y[0, i] = x[r, i]", "4:13", "store to y[0, i] does not index dim 0 with the loop variable r"),
    (2, "y[r - 1, i] = x[r, i]", "4:13", "store to y[r - 1, i] does not index dim 0 with the loop variable r"),
    (3, "s[i] = x[r, i]", "4:13", "store to s[i] does not index any dim with the loop variable r"),
    (4, "y[r, i] = y[(r + 1) % R, i]", "4:23",
     "read of y[(r + 1) % R, i] does not index dim 0 with the loop variable r"),
])
def test_racy_row_loops_are_refused(n, store, where, msg):
    text = RACY.format(n=n, store=store)
    with pytest.raises(torch_tk.SpecError) as e:
        torch_tk.kernel(text, file="racy.tk")
    assert f"racy.tk:{where}: error: {msg}" in str(e.value)


def test_row_loop_output_sizes_are_checked():
    torch_tk.kernel("""
op row_sizes(x: float[R, N], z: float[M]) -> (y: x.dtype[R, N], s: x.dtype[M]):
    for r, _ in y:
        t = 0.0
        for i in range(N):
            t += x[r, i]
            y[r, i] = t
        s[r] = t
""")
    x = torch.randn(4, 3)
    y, s = torch.ops.tk.row_sizes(x, torch.zeros(4))
    torch.testing.assert_close(y, x.cumsum(-1))
    torch.testing.assert_close(s, x.sum(-1))
    with pytest.raises(RuntimeError, match="output 's': dim 0 is 5, but the loop variable r"):
        torch.ops.tk.row_sizes(x, torch.zeros(5))


def test_loop_free_row_loop_with_a_transposed_output():
    """No `for` in the body, more iterations than a CPU chunk, and a second output whose layout is not the
    index space's: the shim must not stream it like an element-wise op."""
    torch_tk.kernel("""
op row_flat(k: float[B, T, C]) -> (y: k.dtype[B, T, C], last: k.dtype[C, B]):
    for b, _, c in y:
        y[b, 0, c] = k[b, 0, c]
        last[c, b] = k[b, 0, c] * 2.0
""")
    k = torch.randn(64, 1, 100, generator=gen(25))
    y, last = torch.ops.tk.row_flat(k)
    assert torch.equal(y, k)
    assert torch.equal(last, (k[:, 0] * 2).t())
