"""Language details (issue 27, item 6), each against torch:

* a float parameter may have a default: `eps: float = 1e-5` (schema `float
  eps=1e-05`) and `eps: float? = 1e-5` (schema `float? eps=1e-05`, None
  meaning the default), so callers may leave it out, in eager mode,
  TorchScript and torch.compile; a non-literal default is an error at
  file:line:col;
* a zero-size input is an error only where every iteration would read it:
  a mean over empty rows is NaN as torch.mean gives, a sum over an empty
  batch 0, and an op whose output is empty runs nothing;
* an error that is the same whatever the dtypes does not end in "(in the f16
  variant)"; one that depends on them still names the variant.

Outputs are compared with torch's on fresh random inputs, the CPU output
cache's memory poisoned first (poison_cache). An empty tensor's data
pointer is NULL: a kernel that read one would crash the test.
"""

import math
import re
import os

import pytest
import torch

import torch_tk

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def gen(seed):
    return torch.Generator().manual_seed(seed)


# ---- float defaults ---------------------------------------------------------------

SCALE = torch_tk.kernel("""
op ld_scale(x: float[N], eps: float = 1e-5, a: float? = 2) -> y: x.dtype[N]:
    for i in y:
        y[i] = x[i] * a + eps
""")

NEG = torch_tk.kernel("""
op ld_neg(x: float[N], b: float? = -0.25, c: float = -3) -> y: x.dtype[N]:
    for i in y:
        y[i] = x[i] + b + c
""")


def test_float_default_schema():
    schema = str(torch.ops.tk.ld_scale.default._schema)   # (torch prints 1e-05 as 1.0000000000000001e-05)
    assert schema == str(torch._C.parse_schema("tk::ld_scale(Tensor x, float eps=1e-05, float? a=2.0) -> Tensor"))
    args = torch.ops.tk.ld_scale.default._schema.arguments
    assert args[1].default_value == 1e-5 and args[2].default_value == 2.0
    neg = torch.ops.tk.ld_neg.default._schema.arguments
    assert neg[1].default_value == -0.25 and neg[2].default_value == -3.0


def test_float_default_values():
    x = torch.randn(37, generator=gen(1))
    torch.testing.assert_close(SCALE(x), x * 2.0 + 1e-5, rtol=0, atol=1e-6)
    torch.testing.assert_close(SCALE(x, 0.5), x * 2.0 + 0.5, rtol=0, atol=1e-6)
    torch.testing.assert_close(SCALE(x, 0.5, 3.0), x * 3.0 + 0.5, rtol=0, atol=1e-6)
    torch.testing.assert_close(SCALE(x, a=-1.0), -x + 1e-5, rtol=0, atol=1e-6)
    torch.testing.assert_close(SCALE(x, eps=0.0, a=None), x * 2.0, rtol=0, atol=0)   # None: the default
    x64 = x.double()
    torch.testing.assert_close(NEG(x64), x64 - 3.25, rtol=0, atol=0)
    torch.testing.assert_close(NEG(x64, None, 1), x64 + 0.75, rtol=0, atol=0)


def test_float_default_none_not_allowed_without_question_mark():
    with pytest.raises(RuntimeError):
        SCALE(torch.randn(3), None)


def test_float_default_torchscript_and_compile():
    @torch.jit.script
    def scripted(x: torch.Tensor) -> torch.Tensor:
        return torch.ops.tk.ld_scale(x) + torch.ops.tk.ld_scale(x, 1.0, None)

    def f(x):
        return torch.ops.tk.ld_scale(x) * torch.ops.tk.ld_scale(x, a=0.5)

    x = torch.randn(19, generator=gen(2))
    torch.testing.assert_close(scripted(x), (x * 2 + 1e-5) + (x * 2 + 1.0), rtol=1e-6, atol=1e-6)
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(x), f(x), rtol=0, atol=0)


def test_float_default_opcheck():
    torch.library.opcheck(torch.ops.tk.ld_scale.default, (torch.randn(5, generator=gen(3)),))
    torch.library.opcheck(torch.ops.tk.ld_scale.default, (torch.randn(5, generator=gen(4)), 0.5, None))


BAD_DEFAULTS = [
    ("op bd_a(x: float[N], eps: float = 1.0 / 3) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:39: error: the default of float 'eps' must be a number such as 1e-5 or -0.5, not an expression"),
    ("op bd_b(x: float[N], eps: float? = N) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:36: error: the default of float 'eps' must be a number such as 1e-5 or -0.5, not an expression"),
    ("op bd_c(x: float[N], eps: float = True) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:35: error: the default of float 'eps' must be a number such as 1e-5 or -0.5, not an expression"),
    ("op bd_d(x: float[N], eps: float?) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:22: error: optional float 'eps' needs a default, which None then means: 'eps: float? = 1e-5'"),
    ("op bd_e(x: float[N], n: int = 1.5) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:31: error: the default of int 'n' must be an integer such as 3 or -1 (use 'n: int? = expr' for one "
     "computed from dims)"),
    ("op bd_f(x: float[N], f: bool? = True) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:22: error: a bool parameter cannot be optional (only 'int?', 'float?' and tensors)"),
]


@pytest.mark.parametrize("text, message", BAD_DEFAULTS, ids=[f"bad_default{i}" for i in range(len(BAD_DEFAULTS))])
def test_bad_defaults(text, message):
    with pytest.raises(torch_tk.SpecError) as info:
        torch_tk.kernel(text, file="bad.tk")
    assert str(info.value).splitlines()[0] == message


def test_backward_default_must_agree():
    """None passed for an optional float reaches the forward and backward
    ops: both must mean the same value by it."""
    text = """
op ld_fw(x: float[N], eps: float? = 1e-5) -> y: x.dtype[N]:
    backward ld_fw_bw
    for i in y:
        y[i] = x[i] * eps

op ld_fw_bw(grad_y: float[N], eps: float? = 1e-6) -> grad_x: grad_y.dtype[N]:
    for i in grad_x:
        grad_x[i] = grad_y[i] * eps
"""
    with pytest.raises(torch_tk.SpecError, match="defaults to 1e-06 but 'eps' of 'ld_fw' to 1e-05"):
        torch_tk.kernel(text, file="bad.tk")


def test_optional_float_gradient():
    torch_tk.kernel("""
op ld_fw2(x: float[N], eps: float? = 0.5) -> y: x.dtype[N]:
    backward ld_fw2_bw
    for i in y:
        y[i] = x[i] * x[i] * eps

op ld_fw2_bw(x: float[N], grad_y: x.dtype[N], eps: float? = 0.5) -> grad_x: x.dtype[N]:
    for i in grad_x:
        grad_x[i] = 2.0 * x[i] * grad_y[i] * eps
""")
    x = torch.randn(11, dtype=torch.float64, generator=gen(5), requires_grad=True)
    for args in [(), (None,), (0.25,)]:
        torch.autograd.gradcheck(lambda t, a=args: torch.ops.tk.ld_fw2(t, *a), (x,))
    y = torch.ops.tk.ld_fw2(x, None)
    y.sum().backward()
    torch.testing.assert_close(x.grad, x.detach(), rtol=0, atol=0)


# ---- zero-size inputs --------------------------------------------------------------

MEAN = torch_tk.kernel("""
op ld_mean(x: float[R, N]) -> y: x.dtype[R]:
    for r in y:
        s = 0.0
        for j in range(N):
            s += x[r, j]
        y[r] = s / N
""")

# a column sum: the loop over rows runs on lanes of adjacent columns (CPU SIMD)
COLSUM = torch_tk.kernel("""
op ld_colsum(x: float[R, C], w: x.dtype[C]) -> y: x.dtype[C]:
    for c in y:
        s = 0.0
        for r in range(R):
            s += x[r, c] * w[c]
        y[c] = s
""")

# reads guarded by a condition, and inside a conditional expression
GUARDED = torch_tk.kernel("""
op ld_guarded(x: float[R, N], z: x.dtype[R]) -> y: x.dtype[R]:
    for r in y:
        v = z[r]
        if N > 0:
            v += x[r, N - 1]
        y[r] = v + (x[r, 0] if N > 1 else 0.0)
""")

# the body reads x in every iteration: an empty x cannot serve a non-empty y
FIRST = torch_tk.kernel("""
op ld_first(x: float[R, N], z: x.dtype[R]) -> y: x.dtype[R]:
    for r in y:
        y[r] = x[r, 0] + z[r]
""")


def poison_cache(value):
    """Fills blocks of the CPU output cache with `value` by making outputs
    of the sizes the tests below use and dropping them: an output that the
    kernel leaves unwritten then shows it (best effort: torch.empty may
    give other memory, so every element is also checked against torch)."""
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        for n in (1, 5, 7, 13, 16, 17, 64, 100):
            torch.ops.tk.ld_scale(torch.zeros(n, dtype=dtype), value, 1.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 7, 64])
def test_mean_of_empty_rows_is_nan(dtype, rows):
    poison_cache(1234.0)
    x = torch.empty(rows, 0, dtype=dtype)
    y = MEAN(x)
    want = torch.mean(x, dim=1)
    assert y.shape == want.shape == (rows,) and y.dtype == dtype
    assert torch.isnan(y).all() and torch.isnan(want).all()
    torch.testing.assert_close(y, want, equal_nan=True)


@pytest.mark.parametrize("shape", [(5, 3), (1, 1), (16, 40), (3, 129)])
def test_mean_matches_torch(shape):
    x = torch.randn(*shape, generator=gen(shape[0] * 1000 + shape[1]))
    torch.testing.assert_close(MEAN(x), torch.mean(x, dim=1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(MEAN(x.t().contiguous().t()), torch.mean(x, dim=1), rtol=1e-5, atol=1e-6)


def test_empty_rows_non_contiguous():
    x = torch.empty(0, 9).t()         # (9, 0), strides (1, 9)
    torch.testing.assert_close(MEAN(x), torch.mean(x, dim=1), equal_nan=True)


@pytest.mark.parametrize("cols", [1, 5, 16, 17, 100])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sum_over_no_rows_is_zero(cols, dtype):
    poison_cache(float("nan"))
    x = torch.empty(0, cols, dtype=dtype)
    w = torch.randn(cols, dtype=dtype, generator=gen(cols))
    y = COLSUM(x, w)
    torch.testing.assert_close(y, (x * w).sum(dim=0), rtol=0, atol=0)
    assert (y == 0).all()
    x = torch.randn(6, cols, dtype=dtype, generator=gen(cols + 1))
    torch.testing.assert_close(COLSUM(x, w), (x * w).sum(dim=0), rtol=1e-5, atol=1e-5)


def test_empty_output_runs_nothing():
    for x in [torch.empty(0, 5), torch.empty(0, 0)]:
        y = MEAN(x)
        assert y.shape == (0,)
    y = COLSUM(torch.empty(4, 0), torch.empty(0))
    assert y.shape == (0,)
    y = FIRST(torch.empty(0, 0), torch.empty(0))   # empty x, but nothing runs
    assert y.shape == (0,)


def test_guarded_reads_of_an_empty_input():
    poison_cache(float("nan"))
    z = torch.randn(13, generator=gen(6))
    torch.testing.assert_close(GUARDED(torch.empty(13, 0), z), z, rtol=0, atol=0)
    x = torch.randn(13, 1, generator=gen(7))
    torch.testing.assert_close(GUARDED(x, z), z + x[:, 0], rtol=0, atol=0)
    x = torch.randn(13, 4, generator=gen(8))
    torch.testing.assert_close(GUARDED(x, z), z + x[:, 3] + x[:, 0], rtol=0, atol=0)


def test_read_in_every_iteration_of_an_empty_input_is_an_error():
    with pytest.raises(RuntimeError) as info:
        FIRST(torch.empty(3, 0), torch.zeros(3))
    assert str(info.value).splitlines()[0] == (
        "tk.ld_first: argument 'x' has no elements (dim 1 is 0) but the output is not empty, and every "
        "element reads it (<string>:4:16)")
    x = torch.randn(3, 2, generator=gen(9))
    z = torch.randn(3, generator=gen(10))
    torch.testing.assert_close(FIRST(x, z), x[:, 0] + z, rtol=0, atol=0)


def test_empty_batch_gradient_is_zero():
    """rwkv_backward_w sums over the batch: with no batch rows its gradient
    is 0 (the inputs it reads are empty, the output (C, T) is not), as the
    torch formulation gives."""
    C, T = 3, 5
    k = torch.empty(0, C, T)
    g = torch.empty(0, C, T)
    gw = torch.ops.tk.rwkv_backward_w(k, g)
    assert gw.shape == (C, T) and (gw == 0).all()
    w = torch.randn(C, T, generator=gen(11), requires_grad=True)
    kk = torch.empty(0, C, T, requires_grad=True)
    out = torch.ops.tk.rwkv_forward(w, kk, 0.1)
    assert out.shape == (0, C, T)
    out.sum().backward()
    assert w.grad is not None and (w.grad == 0).all() and w.grad.shape == (C, T)


def test_empty_image_brick_pad_backward():
    """brick_pad_backward with an empty grad_out: no pixel reads the tile, so
    its gradient is 0 (the loops' ranges are empty)."""
    tile = torch.randn(4, 3, generator=gen(12))
    for shape in [(0, 9), (9, 0), (0, 0)]:
        g = torch.empty(*shape)
        gt = torch.ops.tk.brick_pad_backward(tile, g, 2, 1, 1)
        assert gt.shape == (4, 3) and (gt == 0).all()


# ---- variant suffixes ---------------------------------------------------------------

VARIANT_ERRORS = [
    # the same in every variant: no suffix
    ("op ve_a(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i] + z\n",
     "bad.tk:3:23: error: unknown name 'z'"),
    ("op ve_b(x: float[N], k: int[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[0] = x[i]\n",
     "bad.tk:3:9: error: an output can only be written at the loop index: y[i]"),
    ("op ve_c(x: any[N]) -> y: float32[N]:\n    for i in y:\n        y[i] = gamma(x[i])\n",
     "bad.tk:3:16: error: unknown function 'gamma'"),
    # only some dtypes fail: the first failing variant is named
    ("op ve_d(x: int32|float32[N]) -> y: float32[N]:\n    for i in y:\n        n = x[i]\n"
     "        n = 0.5\n        y[i] = n\n",
     "bad.tk:4:9: error: 'n' is an int (from its first assignment, line 3); a float value needs int(...) here, or make 'n' a float from the start ('n = 0.0') (in the i32 variant)"),
    ("op ve_e(x: float32|int64[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i] * 0.5\n",
     "bad.tk:3:21: error: output 'y' (int64) is an int; converting a float32 needs int(...) (in the i64 variant)"),
    # every variant fails, with messages that name their dtypes: named too
    ("op ve_f(x: float[N]) -> y: int32[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:3:16: error: output 'y' (int32) is an int; converting a float32 needs int(...) (in the f16 variant)"),
    # every variant fails with one message: no variant named
    ("op ve_g(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        n = 1\n        n = x[i]\n        y[i] = n\n",
     "bad.tk:4:9: error: 'n' is an int (from its first assignment, line 3); a float value needs int(...) here, or make 'n' a float from the start ('n = 0.0')"),
]


@pytest.mark.parametrize("text, message", VARIANT_ERRORS, ids=[f"variant_error{i}" for i in range(len(VARIANT_ERRORS))])
def test_variant_suffix_only_when_the_dtype_matters(text, message):
    with pytest.raises(torch_tk.SpecError) as info:
        torch_tk.kernel(text, file="bad.tk")
    assert str(info.value).splitlines()[0] == message



ZERO_DIMS = os.path.join(ROOT, "tests", "specs", "zero_dims.tk")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_tensors_without_dims_read_as_x_brackets(dtype):
    """A 0-d tensor (s: x.dtype[]) and an index of any batch shape
    (idx: int64[...]) read as s[] and idx[]: each iteration reads the
    element of its batch index; in a row loop too."""
    torch_tk.load(ZERO_DIMS)
    g = torch.Generator().manual_seed(50)
    x = torch.randn(3, 4, 7, generator=g).to(dtype)
    s = torch.tensor(1.5, dtype=dtype)
    idx = torch.randint(-5, 9, (3, 4), generator=g)
    want = (x.double() * s.double() + idx[..., None].double())
    for xs, ids, w in ((x, idx, want), (x.transpose(0, 1), idx.t(), want.transpose(0, 1))):
        got = torch.ops.tk.zero_dim_scale(xs, s, ids)
        torch.testing.assert_close(got.double(), w, rtol=1e-2 if dtype == torch.bfloat16 else 1e-6, atol=1e-2)
    assert torch.ops.tk.zero_dim_scale(x[0, 0], s, idx[0, 0]).shape == (7,)
    with pytest.raises(RuntimeError, match=r"tk\.zero_dim_scale: argument 's': expected 0 dims"):
        torch.ops.tk.zero_dim_scale(x, s.reshape(1), idx)
    if dtype != torch.bfloat16:
        t = torch.tensor(0.25, dtype=dtype)
        got = torch.ops.tk.zero_dim_floor(x, t)
        torch.testing.assert_close(got, x - torch.maximum(x.amax(-1, keepdim=True), t))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_output_without_dims_stored_as_out_brackets(dtype):
    """An output with no explicit dims (lse: x.dtype[...]) is stored as lse[]:
    one value per batch element, a row's logsumexp beside the row's log
    softmax, for 0 to 2 batch dims, strided and empty inputs; compiled too.
    Two iterations storing one such element are refused (the race rule)."""
    torch_tk.load(ZERO_DIMS)
    g = torch.Generator().manual_seed(51)
    for shape in [(7,), (3, 7), (2, 3, 7), (0, 7), (4, 1)]:
        x = torch.randn(*shape, generator=g, dtype=dtype) * 3
        for xs in (x, x.transpose(0, -1).contiguous().transpose(0, -1)):
            lse, y = torch.ops.tk.zero_dim_lse(xs)
            assert lse.shape == xs.shape[:-1] and lse.dtype == dtype
            torch.testing.assert_close(lse, torch.logsumexp(xs, -1))
            torch.testing.assert_close(y, torch.log_softmax(xs, -1))
    f = torch.compile(lambda x: torch.ops.tk.zero_dim_lse(x)[0], fullgraph=True)
    x = torch.randn(5, 9, generator=g, dtype=dtype)
    torch.testing.assert_close(f(x), torch.logsumexp(x, -1))
    with pytest.raises(torch_tk.SpecError, match=r"store to out\[\] does not index any dim with the loop variable r"):
        torch_tk.kernel("op ld_race(x: float[..., R, N]) -> (out: x.dtype[...], y: x.dtype[..., R, N]):\n"
                        "    for r, _ in y:\n        y[r, 0] = 1.0\n        out[] = x[r, 0]\n", file="race.tk")


def test_unindexed_tensor_says_how_to_index_it():
    with pytest.raises(torch_tk.SpecError, match=r"tensor 's' must be indexed: s\[\] \(it has no dims after"):
        torch_tk.kernel("op ld_noidx(x: float[N], s: x.dtype[]) -> y: x.dtype[N]:\n    for i in y:\n"
                        "        y[i] = x[i] * s\n", file="bad.tk")


def test_outputs_of_different_shapes_in_the_element_wise_form():
    """Checked at the call (the shapes are only known then): the message
    gives both shapes and the way out."""
    op = torch_tk.kernel("""
op ld_halves(x: float[N]) -> (y: x.dtype[N], z: x.dtype[N // 2]):
    for i in y:
        y[i] = x[i]
        z[i] = x[i]
""")
    with pytest.raises(RuntimeError, match=re.escape(
            "tk.ld_halves: output 'z' has shape [4], the loop output 'y' [8]: in the element-wise form every "
            "output has the loop output's shape")):
        op(torch.zeros(8))
    with pytest.raises(RuntimeError, match=re.escape("output 'z' has shape [0], the loop output 'y' [1]")):
        op(torch.zeros(1))


@pytest.mark.parametrize("device", [
    "cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU"))])
@pytest.mark.parametrize("N", [3, 5, 7, 100, 1000])
def test_modulo_of_a_wrapping_index_is_pythons_of_the_wrapped_value(N, device):
    """`(i + k) % N` with i + k past INT64_MAX: two's complement wraps (spec.md)
    and % is then Python's of the wrapped value. The segments that step a
    remainder along the run must not cross the wrap (a user's k = 2**63 - 1
    gave [1, 2, 0] at N = 3, against [1, 1, 2])."""
    op = torch_tk.kernel("""
op ld_wrapmod(x: float32[N], k: int) -> (y: x.dtype[N], z: x.dtype[N]):
    for i in y:
        y[i] = x[(i + k) % N]
        z[i] = x[(i - k) % N]
""")
    x = torch.arange(float(N), device=device)   # (CUDA: the chunks step remainders too)
    wrap = lambda v: ((v + 2**63) % 2**64) - 2**63   # noqa: E731
    for k in (2**63 - 1, 2**63 - 2, 2**63 - N // 2, -2**63, -2**63 + 1, 5):
        y, z = op(x, k)
        assert y.tolist() == [float(wrap(i + k) % N) for i in range(N)], k
        assert z.tolist() == [float(wrap(i - k) % N) for i in range(N)], k


def test_a_body_longer_than_the_run_plan():
    """More than 256 top-level statements (the run plan's per-statement
    flags hold 256; past them nothing is hoisted): the emitter read the
    flags past their array (found by fuzz_smoke under UBSan), which could
    move a statement out of the run loop or drop it. Here uniform locals sit
    on both sides of statement 256."""
    body = ["        a = x[i]"]
    for k in range(300):
        if k % 50 == 49:
            body.append(f"        c{k} = s * {k}.0")
            body.append(f"        a = a * 0.5 + c{k}")
        else:
            body.append(f"        a = a * 0.5 + x[i] * {k % 7}.0")
    op = torch_tk.kernel("op ld_long(x: float64[N], s: float) -> y: x.dtype[N]:\n    for i in y:\n"
                         + "\n".join(body) + "\n        y[i] = a\n")
    x = torch.randn(300, dtype=torch.float64, generator=gen(7))
    s = 0.375
    want = x.clone()
    for k in range(300):
        want = want * 0.5 + (s * k if k % 50 == 49 else x * (k % 7))
    poison_cache(float("nan"))
    torch.testing.assert_close(op(x, s), want, rtol=1e-12, atol=1e-12)
