"""The maths a spec may call beyond exp/log/sqrt/tanh/sigmoid (sin, cos, tan,
asin, acos, atan, atan2, sinh, cosh, erf, erfc, log1p, expm1, log2, log10;
and exp, tanh and sigmoid, which the CPU computes in float32 with branch-free
forms of its own, as it does erf),
and the literal `inf` (docs/spec.md, *Types and arithmetic*), each against
torch's own function on fresh random inputs, in the op's float type:

* every function in an element-wise op (the vectorised CPU path) and in a
  row loop (a different printer path), float32, float64 and half inputs;
* `-inf` starts a max that an all -inf row leaves at -inf (torch.amax), and
  a masked softmax whose masked entries are -inf gives exactly 0 there;
* `inf` cannot name a parameter, dim or local, and the error says why.

Outputs are poisoned first (the poisoned_outputs fixture: NaN / the largest
value in memory torch hands out), so an unwritten element shows.
"""

import math

import pytest
import torch

import torch_tk

pytestmark = pytest.mark.usefixtures("poisoned_outputs")
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU"))]

UNARY = {   # spec name: (torch function, input range)
    "sin": (torch.sin, (-6.0, 6.0)), "cos": (torch.cos, (-6.0, 6.0)), "tan": (torch.tan, (-1.4, 1.4)),
    "asin": (torch.asin, (-0.99, 0.99)), "acos": (torch.acos, (-0.99, 0.99)), "atan": (torch.atan, (-9.0, 9.0)),
    "sinh": (torch.sinh, (-4.0, 4.0)), "cosh": (torch.cosh, (-4.0, 4.0)), "erf": (torch.erf, (-3.0, 3.0)),
    "erfc": (torch.erfc, (-3.0, 3.0)), "log1p": (torch.log1p, (-0.9, 9.0)), "expm1": (torch.expm1, (-4.0, 4.0)),
    "log2": (torch.log2, (0.01, 9.0)), "log10": (torch.log10, (0.01, 9.0)),
    # built in before these; on the CPU float32 exp, tanh, erf and sigmoid are
    # tk_kernel.h's branch-free forms (a vectorised loop), so cover them too
    "exp": (torch.exp, (-87.0, 88.0)), "tanh": (torch.tanh, (-10.0, 10.0)), "sigmoid": (torch.sigmoid, (-90.0, 30.0)),
}

ELEMENTWISE = torch_tk.kernel("\n".join(
    f"op mf_{name}(x: float[..., N]) -> y: x.dtype[..., N]:\n    for i in y:\n        y[i] = {name}(x[i])\n"
    for name in UNARY))

ROWWISE = torch_tk.kernel("\n".join(
    f"op mf_row_{name}(x: float[..., N]) -> y: x.dtype[..., N]:\n    for _ in y:\n"
    f"        for i in range(N):\n            y[i] = {name}(x[i])\n"
    for name in UNARY))

ATAN2 = torch_tk.kernel("""
op mf_atan2(a: float[N], b: a.dtype[N], k: int[N]) -> (y: a.dtype[N], z: a.dtype[N]):
    for i in y:
        y[i] = atan2(a[i], b[i])
        z[i] = atan2(k[i], 3)          # int arguments: the op's float type
""")

TOL = {torch.float32: dict(rtol=2e-6, atol=2e-6), torch.float64: dict(rtol=1e-13, atol=1e-13),
       torch.bfloat16: dict(rtol=1.6e-2, atol=1e-5)}


def gen(seed):
    return torch.Generator().manual_seed(seed)


def draw(lo, hi, shape, dtype, seed):
    x = torch.rand(shape, generator=gen(seed), dtype=torch.float64) * (hi - lo) + lo
    return x.to(dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("form", ["elementwise", "row"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_function_matches_torch(name, dtype, form, device):
    fn, (lo, hi) = UNARY[name]
    x = draw(lo, hi, (3, 67), dtype, seed=sum(map(ord, name))).to(device)
    op = getattr(torch.ops.tk, f"mf_{name}" if form == "elementwise" else f"mf_row_{name}")
    want = fn(x.double()).to(dtype)   # bfloat16 computes in float32 and rounds once: as the float64 value rounded
    torch.testing.assert_close(op(x), want, **TOL[dtype])


def test_function_non_contiguous():
    x = draw(-3, 3, (40, 9), torch.float32, seed=5).t()
    torch.testing.assert_close(torch.ops.tk.mf_erf(x), torch.erf(x), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_atan2_matches_torch(dtype):
    a, b = draw(-5, 5, (301,), dtype, seed=1), draw(-5, 5, (301,), dtype, seed=2)
    k = torch.randint(-9, 9, (301,), generator=gen(3))
    y, z = ATAN2(a, b, k)
    torch.testing.assert_close(y, torch.atan2(a, b), **TOL[dtype])
    torch.testing.assert_close(z, torch.atan2(k.to(dtype), torch.tensor(3.0, dtype=dtype)), **TOL[dtype])


# ---- inf --------------------------------------------------------------------------

ROWMAX = torch_tk.kernel("""
op mf_rowmax(x: float[..., N]) -> m: x.dtype[..., 1]:
    for _ in m:
        best = -inf
        for i in range(N):
            best = max(best, x[i])
        m[0] = best
""")

MASKED_SOFTMAX = torch_tk.kernel("""
op mf_masked_softmax(x: float[..., N], keep: bool[..., N]) -> y: x.dtype[..., N]:
    for _ in y:
        m = -inf
        for i in range(N):
            m = max(m, x[i] if keep[i] else -inf)
        s = 0.0
        for i in range(N):
            s += exp(x[i] - m) if keep[i] else 0.0
        for i in range(N):
            y[i] = exp(x[i] - m) / s if keep[i] else 0.0
""")

CLAMP_INF = torch_tk.kernel("""
op mf_clamp_inf(x: float[N]) -> (y: x.dtype[N], big: bool[N]):
    for i in y:
        y[i] = min(x[i], inf)
        big[i] = x[i] == inf
""")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_max_from_minus_inf(dtype, device):
    x = torch.randn(5, 33, generator=gen(7)).to(dtype)
    x[2] = -torch.inf      # a row of -inf: the max stays -inf (a -1e38 start would give -1e38)
    x[3, 4] = torch.inf
    x = x.to(device)
    got = ROWMAX(x)
    assert torch.equal(got, x.amax(dim=-1, keepdim=True))
    assert got[2, 0].item() == -torch.inf and got[3, 0].item() == torch.inf


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_masked_softmax_with_minus_inf(dtype):
    x = torch.randn(6, 50, generator=gen(8), dtype=dtype) * 30
    keep = torch.rand(6, 50, generator=gen(9)) < 0.6
    got = MASKED_SOFTMAX(x, keep)
    want = torch.softmax(x.masked_fill(~keep, -torch.inf), dim=-1)
    torch.testing.assert_close(got, want, rtol=1e-5 if dtype == torch.float32 else 1e-12, atol=1e-7)
    assert torch.equal(got[~keep], torch.zeros_like(got[~keep]))


def test_inf_compares_and_clamps():
    x = torch.tensor([1.0, torch.inf, -torch.inf, 3e38, torch.nan])
    y, big = CLAMP_INF(x)
    assert torch.equal(y[:4], x[:4]) and big.tolist() == [False, True, False, False, False]


@pytest.mark.parametrize("text, message", [
    ("op mf_bad1(x: float[N], inf: float) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n",
     ":1:25: error: 'inf' is the built-in constant infinity and cannot name a parameter"),
    ("op mf_bad2(x: float[inf]) -> y: x.dtype[1]:\n    for i in y:\n        y[i] = 0.0\n",
     ":1:21: error: 'inf' is the built-in constant infinity and cannot name a dim"),
    ("op mf_bad3(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        inf = 2.0\n        y[i] = x[i]\n",
     ":3:9: error: 'inf' is the built-in constant infinity and cannot name a variable"),
    ("op mf_bad4(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = inf[i]\n",
     ":3:16: error: unknown tensor 'inf'"),
    ("op mf_bad5(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = sin(x[i], 2.0)\n",
     ":3:16: error: sin() takes 1 argument, got 2"),
    ("op mf_bad6(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = atan2(x[i])\n",
     ":3:16: error: atan2() takes 2 arguments, got 1"),
])
def test_bad_uses(text, message):
    with pytest.raises(torch_tk.SpecError) as e:
        torch_tk.kernel(text, file="m.tk")
    assert message in str(e.value)


def test_infinite_float_default_is_an_error():
    text = "op mf_bad7(x: float[N], cap: float = inf) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = min(x[i], cap)\n"
    with pytest.raises(torch_tk.SpecError, match=r"m.tk:1:38: error: the default of float 'cap' cannot be infinite"):
        torch_tk.kernel(text, file="m.tk")


def test_math_names_stay_free_for_parameters():
    """Specs written before sin/cos were built in name their tables so
    (examples/specs/rotary.tk); a call is NAME '(' and does not clash."""
    op = torch_tk.kernel("""
op mf_tables(x: float[N], cos: x.dtype[N], sin: x.dtype[N], erf: float) -> y: x.dtype[N]:
    for i in y:
        y[i] = x[i] * cos[i] + sin[i] + erf + cos(x[i])
""")
    x, c, s = (torch.randn(19, generator=gen(k), dtype=torch.float64) for k in (11, 12, 13))
    torch.testing.assert_close(op(x, c, s, 0.5), x * c + s + 0.5 + torch.cos(x), rtol=1e-14, atol=1e-14)


# ---- float // and % as Python ------------------------------------------------------

FLOORDIV = torch_tk.kernel("""
op mf_floordiv(a: float[N], b: a.dtype[N]) -> (q: a.dtype[N], r: a.dtype[N]):
    for i in q:
        q[i] = a[i] // b[i]
        r[i] = a[i] % b[i]
""")

EDGES = [(-1e-300, 1e300), (7.0, -math.inf), (-7.0, math.inf), (7.0, math.inf), (-7.5, 2.0), (7.5, -2.0),
         (1.0, 0.1), (-1.0, 0.1), (0.0, -3.0), (-0.0, 3.0), (5.0, 5.0), (-5.0, 5.0), (5.0, -5.0), (1e308, 1e-308),
         (3.0, 0.5)]


def test_float_floordiv_is_pythons():
    a = torch.tensor([x for x, _ in EDGES], dtype=torch.float64)
    b = torch.tensor([y for _, y in EDGES], dtype=torch.float64)
    q, r = FLOORDIV(a, b)
    for i, (x, y) in enumerate(EDGES):   # Python's float // and %, sign of zero included
        assert math.copysign(1, q[i].item()) == math.copysign(1, x // y) and (q[i].item() == x // y), (x, y, q[i])
        assert math.copysign(1, r[i].item()) == math.copysign(1, x % y) and r[i].item() == x % y, (x, y, r[i])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_float_floordiv_matches_torch(dtype, device):
    g = gen(21)
    a = torch.randn(4000, generator=g, dtype=torch.float64).mul(100).to(dtype)
    b = torch.randn(4000, generator=g, dtype=torch.float64).mul(3).to(dtype)
    b[::97] = 0.0    # (torch: +-inf or NaN, as tk)
    a, b = a.to(device), b.to(device)
    q, r = FLOORDIV(a, b)
    torch.testing.assert_close(q, torch.floor_divide(a, b), rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(r[b != 0], torch.remainder(a, b)[b != 0], rtol=0, atol=0)
