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
import re
import subprocess

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


pytestmark = pytest.mark.usefixtures("poisoned_outputs")   # (conftest.py)


def gen(seed):
    return torch.Generator().manual_seed(seed)


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
    """grad_weight / grad_bias: sums over the rows (`+=`), in parts."""
    tk = spec("layernorm")
    x, w, b = (t.requires_grad_() for t in norm_inputs(300, 17, torch.float32, 14))
    g = torch.randn(300, 17, generator=gen(15))
    got = torch.autograd.grad(tk.layernorm(x, w, b, 1e-5), (x, w, b), g)
    want = torch.autograd.grad(F.layer_norm(x, (17,), w, b, 1e-5), (x, w, b), g)
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_norm_weight_grads_half_add_up_in_float32(dtype):
    """Half weight gradients are sums added up in float32 and rounded once:
    at 20,000 rows, within one half epsilon of the float64 sum (a half
    accumulator, `o[i] = o[i] + e`, was off by 20 % in bfloat16)."""
    tk = spec("layernorm")
    R, N = 20000, 3
    x, w, b = norm_inputs(R, N, dtype, 16)
    g = torch.randn(R, N, generator=gen(17)).to(dtype)
    gw, gb = tk.layernorm_backward_wb(x, 1e-5, g)
    gr = tk.rmsnorm_backward_w(x, 1e-6, g)
    assert gw.dtype == gb.dtype == gr.dtype == dtype
    xd, gd = x.double(), g.double()
    xhat = (xd - xd.mean(1, keepdim=True)) / torch.sqrt(xd.var(1, unbiased=False, keepdim=True) + 1e-5)
    rr = 1.0 / torch.sqrt((xd * xd).mean(1, keepdim=True) + 1e-6)
    eps = 2.0 ** -7 if dtype == torch.bfloat16 else 2.0 ** -10   # (measured at layernorm's: 2.6e-3, 3.3e-4; before, 0.15, 0.06)
    for got, want in ((gw, (gd * xhat).sum(0)), (gb, gd.sum(0)), (gr, (gd * xd * rr).sum(0))):
        assert (got.double() - want).abs().max() <= eps * want.abs().max(), (got, want)


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


# ---- vectorised row loops (docs/spec.md, "Row loops": SIMD on the CPU) ---------------
# Inner loops whose only carried state is reductions run under `omp simd` (softmax's max and sum,
# the norms' sums); exp() is then tk_vexpf. Row lengths around the vector width exercise the vector
# body and its remainders; strided rows the other body; NaN and inf the max reductions' combination.

ROW_LENGTHS = [1, 7, 8, 9, 15, 16, 17, 33, 1000]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("N", ROW_LENGTHS)
def test_vector_rows_softmax_and_norms(dtype, N):
    tk = spec("softmax")
    spec("layernorm")
    x, w, b = norm_inputs(5, N, dtype, 30 + N)
    x = x * 3
    for xv in views(x):
        close(tk.softmax(xv), torch.softmax(x.double(), -1), dtype)
        close(tk.layernorm(xv, w, b, 1e-5), F.layer_norm(x.double(), (N,), w.double(), b.double(), 1e-5), dtype)
        close(tk.rmsnorm(xv, w, 1e-6), rmsnorm_torch(x.double(), w.double(), 1e-6), dtype)


@pytest.mark.parametrize("N", [8, 9, 33, 1000])
def test_vector_rows_backward(N):
    tk = spec("softmax")
    spec("layernorm")
    x, w, b = (t.requires_grad_() for t in norm_inputs(6, N, torch.float32, 40 + N))
    g = torch.randn(6, N, generator=gen(41))
    for got_fn, want_fn, args in [(tk.softmax, lambda a: torch.softmax(a, -1), (x,)),
                                  (lambda *a: tk.layernorm(*a, 1e-5), lambda *a: F.layer_norm(a[0], (N,), *a[1:], 1e-5),
                                   (x, w, b)),
                                  (lambda *a: tk.rmsnorm(*a, 1e-6), lambda *a: rmsnorm_torch(*a, 1e-6), (x, w))]:
        got = torch.autograd.grad(got_fn(*args), args, g)
        want = torch.autograd.grad(want_fn(*args), args, g)
        for a, e in zip(got, want):
            torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)


def test_vector_rows_softmax_nan_and_inf():
    """Rows holding NaN, +inf and -inf, at a vector lane, in the remainder and first: as torch.softmax
    (a NaN anywhere makes the row NaN; -inf gives 0)."""
    tk = spec("softmax")
    for N in (9, 33):
        x = torch.randn(8, N, generator=gen(42))
        x[0, 3] = float("nan")
        x[1, 0] = float("nan")
        x[2, N - 1] = float("nan")
        x[3, 5] = float("-inf")
        x[4, :] = float("-inf")
        x[4, N - 1] = 0.0
        x[5, 2] = float("inf")
        x[6, 0] = float("inf")
        x[7, N - 1] = float("inf")
        torch.testing.assert_close(tk.softmax(x), torch.softmax(x, -1), equal_nan=True)


REDUCE = """op vrow_reduce(x: float[R, N])
        -> (y: x.dtype[R, N], mx: x.dtype[R], mn: x.dtype[R], sm: x.dtype[R], pr: x.dtype[R]):
    for r, _ in y:
        m = x[r, 0]
        n = x[r, 0]
        s = 0.0
        p = 1.0
        y[r, 0] = -x[r, 0]
        for i in range(1, N):
            m = max(m, x[r, i])
            n = min(n, x[r, i])
            s += x[r, i]
            p = p * (1.0 + x[r, i] / 64.0)
            y[r, i] = -x[r, i]
        mx[r] = m
        mn[r] = n
        sm[r] = s
        pr[r] = p
"""


def py_fold(row):
    """The loop as written, in Python: max/min keep the running value unless the new one compares
    greater/less (so a NaN first stays, a NaN later is skipped)."""
    m = n = row[0]
    s, p = 0.0, 1.0
    for v in row[1:]:
        m = max(m, v)
        n = min(n, v)
        s += v
        p = p * (1.0 + v / 64.0)
    return m, n, s, p


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("N", [2, 8, 9, 17, 33, 100])
def test_vector_rows_max_min_sum_product(dtype, N):
    """max, min, sum and product reductions in one vectorised loop, with NaN and inf placed first, inside
    a vector block and in the remainder: max and min as the sequential loop gives them, exactly."""
    torch_tk.kernel(REDUCE, file="vrow_reduce.tk")
    x = torch.randn(9, N, generator=gen(43), dtype=torch.float64)
    x[1, 0] = float("nan")
    x[2, N // 2] = float("nan")
    x[3, N - 1] = float("nan")
    x[4, 1] = float("inf")
    x[5, N - 1] = float("-inf")
    x[6, 0] = float("inf")
    x[7, 0] = float("-inf")
    x = x.to(dtype)
    y, *got = torch.ops.tk.vrow_reduce(x)
    torch.testing.assert_close(y, -x, rtol=0, atol=0, equal_nan=True)
    for r in range(9):
        m, n, s, p = py_fold([float(v) for v in x[r].double()])
        for k, want in enumerate((m, n)):   # exact, NaN where the loop keeps one
            g = float(got[k][r])
            assert (g != g and want != want) or g == want, (r, k, g, want)
        for k, want in ((2, s), (3, p)):    # reordered: close, inf and NaN where the loop has them
            torch.testing.assert_close(got[k][r].double(), torch.tensor(want, dtype=torch.float64),
                                       equal_nan=True, **TOL[dtype])


VEXP = """op vrow_exp(x: float[..., N]) -> y: x.dtype[..., N]:
    for _ in y:
        for i in range(N):
            y[i] = exp(x[i])
"""


def test_vector_rows_exp_accuracy():
    """exp() in a vectorised loop (tk_vexpf, compiler/tk_kernel.h) against float64 exp: within 1.5 ulp of
    float32 over [-104, 89], overflow to inf, underflow to 0, inf, -inf and NaN as torch.exp."""
    torch_tk.kernel(VEXP, file="vrow_exp.tk")
    x = torch.cat([torch.linspace(-104.0, 89.0, 200003, dtype=torch.float32),
                   torch.tensor([0.0, -0.0, 88.72283, 88.72284, 88.8, -87.3365, -103.2789, -103.98, -120.0,
                                 1e30, -1e30, float("inf"), float("-inf"), float("nan")])])
    got = torch.ops.tk.vrow_exp(x.reshape(1, -1)).reshape(-1)
    want = torch.exp(x.double())
    w32 = want.float()
    nan = torch.isnan(want)
    assert torch.isnan(got[nan]).all()
    inf = torch.isinf(w32) & ~nan
    big = (got[inf] == float("inf")) | (got[inf] == torch.finfo(torch.float32).max)
    assert big.all()
    normal = torch.isfinite(w32) & (w32.abs() >= torch.finfo(torch.float32).tiny)
    ulp = torch.finfo(torch.float32).eps * torch.exp2(torch.floor(torch.log2(w32[normal].double())))
    err = ((got[normal].double() - want[normal]).abs() / ulp).max().item()
    assert err <= 1.5, err
    sub = torch.isfinite(w32) & ~normal & ~nan      # subnormal results and 0: within 2^-149
    assert ((got[sub].double() - want[sub]).abs() <= 2.0 ** -149).all()
    assert got[x == float("-inf")].eq(0).all() and got[x == -120.0].eq(0).all()


@pytest.mark.parametrize("C", [1, 7, 8, 9, 31, 100, 128, 129, 200, 300])
def test_wkv_lanes_across_channels(C):
    """wkv's lanes over c (blocks of 8 to 128 adjacent channels, unit strides; fewer than 8 one at a
    time): channel counts around the block widths, batch rows not a multiple of them, transposed
    (strided: one channel at a time) inputs, against the float64 loop, forward and backward."""
    tk = spec("wkv")
    w, u, k, v = wkv_inputs(3, 37, C, torch.float32, seed=50 + C, requires_grad=True)
    want = wkv_loop(w, u, k, v)
    y = tk.wkv(w, u, k, v)
    torch.testing.assert_close(y.double(), want, rtol=1e-4, atol=1e-4)
    g = torch.randn(3, 37, C, generator=gen(51))
    got = torch.autograd.grad(y, (w, u, k, v), g)
    exp = torch.autograd.grad(want, (w, u, k, v), g.double())
    for a, e in zip(got, exp):
        torch.testing.assert_close(a.double(), e.double(), rtol=2e-3, atol=2e-3)
    kt = k.detach().transpose(0, 2).contiguous().transpose(0, 2)   # C not the contiguous dim
    torch.testing.assert_close(tk.wkv(w.detach(), u.detach(), kt, v.detach()).double(), want.detach(),
                               rtol=1e-4, atol=1e-4)


LANE_SELECT = """op lane_select(x: float[B, T, C], lo: float) -> y: x.dtype[B, T, C]:
    for b, _, c in y:
        s = 0.0
        for t in range(T):
            prev = x[b, t - 1, c] if t > 0 else lo
            d = x[b, t, c] - prev
            s = s + (d if d >= 0.0 else -0.5 * d)
            y[b, t, c] = s
"""


def test_lane_selects(tkc, tmp_path):
    """`a if c else b` in the lanes of a row loop: with arms that cannot fault (locals, arithmetic) it is
    printed as the bitwise tk_self, both arms computed (GCC branches on `c ? 1.0f : e` and then does not
    vectorise); an arm reading a tensor stays a C conditional, read only where its condition holds
    (x[b, t - 1, c] at t = 0 would read before the tensor). Against a float64 loop, around the block widths."""
    path = tmp_path / "lane_select.tk"
    path.write_text(LANE_SELECT)
    c_text = subprocess.run([tkc, "emit-c", str(path)], capture_output=True, text=True, check=True).stdout
    f32 = c_text[c_text.index("tk_lane_select__f32_body"):c_text.index("tk_lane_select__f64_body")]
    lanes = f32[f32.index("#pragma omp simd"):f32.index("lin += tk_nl;")]
    assert "tk_self((v_d_0 >= 0.0f), v_d_0, ((-0.5f) * v_d_0))" in lanes, lanes
    assert "((v_t > 0LL) ? t_x[" in lanes, lanes
    torch_tk.load(str(path))
    for C in (3, 8, 130):
        x = torch.randn(2, 33, C, generator=gen(60 + C))
        xd = x.double()
        prev = torch.cat([torch.full((2, 1, C), 0.25, dtype=torch.float64), xd[:, :-1]], 1)
        d = xd - prev
        want = torch.where(d >= 0, d, -0.5 * d).cumsum(1)
        for dtype in (torch.float32, torch.float64):
            got = torch.ops.tk.lane_select(x.to(dtype), 0.25)
            torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


PLAN_CASES = """op pl_scan(x: float[R, N]) -> y: x.dtype[R, N]:
    for r, _ in y:
        s = 0.0
        for i in range(N):
            s += x[r, i]
            y[r, i] = s
        for i in range(1, N):
            y[r, i] = y[r, i - 1] * 0.5
        for i in range(N):
            y[r, i] = y[r, i] + 1.0
        m = 0.0
        for i in range(N):
            if x[r, i] > 0.0:
                m = max(m, x[r, i])
        for i in range(N - 1):
            y[r, i + 1] = x[r, i]
"""


def test_row_loop_plans(lib_path, tmp_path):
    """What the planner vectorises (tkc plan): softmax's three loops with their max and sum, the norms' sums,
    wkv's lanes across c; not a scan (an accumulator read in the loop), a loop reading an element another
    iteration stores, an `if`, a store at i + 1; nothing when plain, and no row loop in float64 lanes."""
    tkc = os.path.join(os.path.dirname(lib_path), "tkc")

    def plan(path, *flags):
        r = subprocess.run([tkc, "plan", "--target", "cpu", *flags, path], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout

    sm = plan(os.path.join(SPECS, "softmax.tk"), "--dtype", "f32")
    assert "loop over i at line 10: vectorised along the row (omp simd); reductions: max m" in sm
    assert "loop over i at line 13: vectorised along the row (omp simd); reductions: sum s" in sm
    assert "loop over i at line 18: vectorised along the row (omp simd)\n" in sm
    assert "loop over i at line 25: vectorised along the row (omp simd); reductions: sum s" in sm
    assert "lanes:" not in sm
    assert "vectorised" not in plan(os.path.join(SPECS, "softmax.tk"), "--dtype", "f32", "--plain")
    assert "vectorised" not in plan(os.path.join(SPECS, "cumsum.tk"), "--dtype", "f32")
    wkv = plan(os.path.join(SPECS, "wkv.tk"), "--dtype", "f32")
    assert "lanes: blocks of 8 to 128 adjacent iterations along c run together" in wkv
    assert "locals held per lane: aa, bb, pp\n" in wkv   # the state; kt, e1, ... are lane-loop scalars
    assert "lanes:" not in plan(os.path.join(SPECS, "wkv.tk"), "--dtype", "f64")
    path = tmp_path / "pl_scan.tk"
    path.write_text(PLAN_CASES)
    text = plan(str(path), "--dtype", "f32")
    assert [int(n) for n in re.findall(r"loop over i at line (\d+): vectorised", text)] == [9], text


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_row_loops_spec_stats_and_decay(dtype):
    """tests/specs/row_loops.tk's row_stats (vectorised max, min, sum, exp) and row_decay (lanes across c:
    exp and a carried max) against torch, on row lengths and channel counts around the vector widths, with
    strided views (the one-at-a-time form)."""
    torch_tk.load(os.path.join(ROOT, "tests", "specs", "row_loops.tk"))
    tk = torch.ops.tk
    for N in (1, 9, 33, 300):
        x = torch.randn(3, 2, N, generator=gen(60 + N), dtype=torch.float64).to(dtype)
        want = torch.softmax(x.double(), -1) + x.double().amin(-1, keepdim=True)
        for xv in views(x):
            torch.testing.assert_close(tk.row_stats(xv).double(), want, **TOL[dtype])
    for C in (1, 31, 32, 70):
        k = torch.randn(2, 13, C, generator=gen(61 + C), dtype=torch.float64).to(dtype)
        kd = k.double()
        m = torch.full((2, C), -1e30, dtype=torch.float64)
        s = torch.zeros(2, C, dtype=torch.float64)
        want = torch.empty(2, 13, C, dtype=torch.float64)
        for t in range(13):
            nm = torch.maximum(m, kd[:, t])
            s = s * torch.exp(m - nm) + torch.exp(kd[:, t] - nm)
            m = nm
            want[:, t] = s
        for kv in views(k):
            torch.testing.assert_close(tk.row_decay(kv).double(), want, **TOL[dtype])


SCAN_SPEC = """
op rl_scan_last(a: float[B, T, C], x: a.dtype[B, T, C], h0: a.dtype[B, C])
        -> (h: a.dtype[B, T, C], hlast: a.dtype[B, C]):
    for b, _, c in h:
        s = h0[b, c]
        for t in range(T):
            s = a[b, t, c] * s + x[b, t, c]
            h[b, t, c] = s
        hlast[b, c] = s
op rl_sum_prefix(x: float[B, T]) -> (s: x.dtype[B, 1], cs: x.dtype[B, T]):
    for b, _ in s:
        acc = 0.0
        for t in range(T):
            acc += x[b, t]
            cs[b, t] = acc
        s[b, 0] = acc
"""


@pytest.mark.parametrize("T", [0, 1, 5])
def test_row_loop_outputs_that_are_empty(T):
    """A row loop with several outputs where one is empty (T = 0) and the other
    is not: the empty one has no memory, and the call still runs."""
    torch_tk.kernel(SCAN_SPEC, file="rl_scan.tk")
    tk = torch.ops.tk
    g = gen(40 + T)
    a, x = torch.rand(2, T, 5, generator=g), torch.randn(2, T, 5, generator=g)
    h0 = torch.randn(2, 5, generator=g)
    h, hlast = tk.rl_scan_last(a, x, h0)
    s, want = h0.clone(), []
    for t in range(T):
        s = a[:, t] * s + x[:, t]
        want.append(s)
    assert h.shape == (2, T, 5)
    torch.testing.assert_close(hlast, s)
    if T:
        torch.testing.assert_close(h, torch.stack(want, 1))
    total, cs = tk.rl_sum_prefix(x[:, :, 0])
    torch.testing.assert_close(total[:, 0], x[:, :, 0].sum(1))
    torch.testing.assert_close(cs, x[:, :, 0].cumsum(1))


def test_a_gather_keeps_the_row_vectorised(tkc):
    """tests/specs/row_loops.tk's row_xent (cross-entropy): the read at the
    row's target index is data-dependent and checked at run time, and the
    loops over the row still vectorise (they were all plain before); it
    matches F.cross_entropy, and a target out of range is an error naming
    the read, not a value read from outside the row."""
    path = os.path.join(ROOT, "tests", "specs", "row_loops.tk")
    torch_tk.load(path)
    plan = subprocess.run([tkc, "plan", "--target", "cpu", path], capture_output=True, text=True, check=True).stdout
    xent = plan[plan.index("plan row_xent, variant f32_i64"):]
    xent = xent[:xent.index("\nplan ")] if "\nplan " in xent else xent
    assert "the loops that make such reads run as written" in xent
    assert xent.count("vectorised along the row (omp simd)") == 2
    g = gen(31)
    for N, V in [(1, 1), (7, 5), (300, 1000)]:
        for dtype in (torch.float32, torch.float64):
            logits = torch.randn(N, V, generator=g, dtype=dtype) * 4
            target = torch.randint(0, V, (N,), generator=g)
            for x in views(logits):
                got = torch.ops.tk.row_xent(x, target)[:, 0]
                want = F.cross_entropy(x.double(), target, reduction="none")
                torch.testing.assert_close(got.double(), want, **TOL[dtype])
    # the same spec reading logits[n, target[n]] as written (no % V): a target out of range is an error
    with open(path) as f:
        text = f.read()
    text = text[text.index("op row_xent"):].replace("row_xent", "row_xent_unwrapped")
    text = text.replace("(logits[n, target[n] % V] if V > 0 else 0.0)", "logits[n, target[n]]")
    torch_tk.kernel(text, file="row_xent_unwrapped.tk")
    logits = torch.randn(4, 5, generator=g)
    good = torch.tensor([0, 1, 2, 4])
    torch.testing.assert_close(torch.ops.tk.row_xent_unwrapped(logits, good)[:, 0],
                               F.cross_entropy(logits, good, reduction="none"))
    for t in (5, -1):
        with pytest.raises(RuntimeError, match=r"read logits\[:, %d\] out of range: dim 1 \(V\) has size 5" % t):
            torch.ops.tk.row_xent_unwrapped(logits, torch.tensor([0, 1, t, 4]))
