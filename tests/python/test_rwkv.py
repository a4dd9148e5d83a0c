"""torch.ops.tk.rwkv_forward against independent references (torch_tk.reference).

out[b, c, t] = eps + sum_{u=0..t} w[c, (T-1)-(t-u)] * k[b, c, u]; w (C, T), k (B, C, T).
Errors are measured as max |tk - ref| / max |ref| (relative to the output's scale).
"""

import pytest
import torch

from torch_tk.reference import rwkv_conv1d, rwkv_inputs, rwkv_loop

FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]

# Bounds on max|err| / max|ref| against a float64 reference computed from the
# same (already rounded) inputs. tk accumulates in float32 (float64 for
# float64), so for the half types the error is dominated by rounding the
# output to the half type: at most half an ulp, 2**-11 = 4.9e-4 (float16) and
# 2**-8 = 3.9e-3 (bfloat16) of the largest output; float32 accumulation of
# T = 128 terms adds at most 127 * 2**-24 = 7.6e-6. The bounds leave ~4x margin.
# float32: recursive summation of T = 128 positive terms, <= 127 * 2**-24.
REL_BOUND = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def rel_err(got, ref):
    ref = ref.to(torch.float64)
    return ((got.to(torch.float64) - ref).abs().max() / ref.abs().max()).item()


@pytest.mark.parametrize("B, C, T", [(1, 1, 1), (1, 1, 2), (2, 3, 5), (3, 2, 17), (1, 4, 33)])
@pytest.mark.parametrize("eps", [0.1, -2.5, 0.0])
@pytest.mark.parametrize("dtype, rtol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_against_python_loop(B, C, T, eps, dtype, rtol):
    w, k = rwkv_inputs(B, C, T, dtype=dtype, seed=B * 100 + C * 10 + T)
    w = w - 0.5  # mixed signs
    out = torch.ops.tk.rwkv_forward(w, k, eps)
    assert out.shape == (B, C, T) and out.dtype == dtype
    ref = rwkv_loop(w, k, eps)
    torch.testing.assert_close(out.to(torch.float64), ref, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_against_conv1d(dtype):
    """B=4, C=64, T=128; reference: float64 conv1d of the same inputs."""
    w, k = rwkv_inputs(4, 64, 128, dtype=dtype, seed=7)
    out = torch.ops.tk.rwkv_forward(w, k, 0.1)
    assert out.shape == (4, 64, 128) and out.dtype == dtype
    ref = rwkv_conv1d(w.to(torch.float64), k.to(torch.float64), 0.1)
    err = rel_err(out, ref)
    assert err < REL_BOUND[dtype], f"{dtype}: relative error {err:.3g} >= {REL_BOUND[dtype]:.3g}"


def test_float32_against_float32_conv1d():
    """The seed's one-liner, all in float32, agrees to float32 accuracy."""
    w, k = rwkv_inputs(4, 64, 128, seed=8)
    err = rel_err(torch.ops.tk.rwkv_forward(w, k, 0.1), rwkv_conv1d(w, k, 0.1))
    assert err < 1e-5


def nan_poisoned(fn, *args, numel, dtype):
    """fn(*args) after freeing a NaN-filled block of the output's size, which
    the allocator tends to hand back as the output: unwritten elements show."""
    block = torch.full((numel,), float("nan"), dtype=dtype)
    del block
    return fn(*args)


# The CPU kernels of rwkv_forward and rwkv_backward_k walk whole rows of 8
# batch rows at once (one w vector feeds 8 rows' FMAs), then of 4 (B % 8 >= 4),
# then single rows; along t, tiles of 48 outputs (96 for 4-row groups; 128,
# then 48, for single rows, whose lane blocks skew their loads) and the row
# ends one element at a time. rwkv_backward_w (no group) runs 128-wide skewed
# tiles. These batch sizes and lengths take each walk, alone and one after
# another; both thread counts split the index space at different places.
@pytest.mark.parametrize("B", [1, 3, 4, 5, 8, 12, 13, 15])
@pytest.mark.parametrize("T", [40, 100, 197, 300])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_batch_row_groups(B, T, threads, dtype):
    C, eps = 5, 0.3
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        w, k = rwkv_inputs(B, C, T, dtype=dtype, seed=1000 + B * 7 + T)
        w = w - 0.5
        out = nan_poisoned(torch.ops.tk.rwkv_forward, w, k, eps, numel=B * C * T, dtype=w.dtype)
        ref = rwkv_conv1d(w.double(), k.double(), eps)
        assert rel_err(out, ref) < REL_BOUND[dtype]
        # backward: grad_k groups batch rows the same way (grad_w sums them)
        g = (torch.rand(B, C, T, generator=torch.Generator().manual_seed(B + T)) - 0.5).to(dtype)
        wl, kl = w.clone().requires_grad_(), k.clone().requires_grad_()
        torch.ops.tk.rwkv_forward(wl, kl, eps).backward(g)
        wd, kd = w.double().requires_grad_(), k.double().requires_grad_()
        rwkv_conv1d(wd, kd, eps).backward(g.double())
        assert rel_err(kl.grad, kd.grad) < REL_BOUND[dtype]
        assert rel_err(wl.grad, wd.grad) < REL_BOUND[dtype]
    finally:
        torch.set_num_threads(old)


# The same walks on the narrower CPU bodies, in a child process (TK_CPU_NARROW
# is read once per process): "1" the 256-bit explicit-vector body AVX2 CPUs
# run (4-row groups of 3 lane blocks, 64-wide skewed single-row tiles),
# "baseline" the narrow (omp simd) one. Forward and both gradients against float64
# conv1d, outputs poisoned with NaN.
NARROW_CHILD = r"""
import sys
import torch
import torch_tk  # noqa: F401
sys.path.insert(0, sys.argv[1])
from test_rwkv import REL_BOUND, nan_poisoned, rel_err
from torch_tk.reference import rwkv_conv1d, rwkv_inputs
n = 0
for threads in (1, 2):
    torch.set_num_threads(threads)
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        for B in (1, 3, 4, 5, 8, 13):
            for T in (40, 197, 300):
                C, eps = 3, 0.3
                w, k = rwkv_inputs(B, C, T, dtype=dtype, seed=2000 + B * 7 + T)
                w = w - 0.5
                out = nan_poisoned(torch.ops.tk.rwkv_forward, w, k, eps, numel=B * C * T, dtype=w.dtype)
                ref = rwkv_conv1d(w.double(), k.double(), eps)
                g = (torch.rand(B, C, T, generator=torch.Generator().manual_seed(B + T)) - 0.5).to(dtype)
                wl, kl = w.clone().requires_grad_(), k.clone().requires_grad_()
                torch.ops.tk.rwkv_forward(wl, kl, eps).backward(g)
                wd, kd = w.double().requires_grad_(), k.double().requires_grad_()
                rwkv_conv1d(wd, kd, eps).backward(g.double())
                errs = (rel_err(out, ref), rel_err(kl.grad, kd.grad), rel_err(wl.grad, wd.grad))
                assert max(errs) < REL_BOUND[dtype], (threads, dtype, B, T, errs)
                n += 1
print(n)
"""


@pytest.mark.parametrize("level", ["1", "baseline"])
def test_narrower_bodies(level):
    import os
    import subprocess
    import sys
    env = dict(os.environ, TK_CPU_NARROW=level)
    p = subprocess.run([sys.executable, "-c", NARROW_CHILD, os.path.dirname(os.path.abspath(__file__))],
                       env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.split() == ["144"]


def noncontiguous(w, k, layout):
    """The same values as (w, k), laid out in memory according to layout."""
    if layout == "transposed":  # w stored (T, C), k stored (T, B, C)
        return w.t().contiguous().t(), k.permute(2, 0, 1).contiguous().permute(1, 2, 0)
    if layout == "sliced":  # every other element of larger buffers, storage offset
        wb = torch.zeros(w.shape[0] * 2, w.shape[1] * 3 + 1, dtype=w.dtype)
        kb = torch.zeros(k.shape[0], k.shape[1] + 3, k.shape[2] * 2, dtype=k.dtype)
        wb[::2, 1::3] = w
        kb[:, 3:, ::2] = k
        return wb[::2, 1::3], kb[:, 3:, ::2]
    if layout == "batch_expanded":  # k's batch dim with stride 0
        return w, k[:1].expand_as(k)
    raise ValueError(layout)


@pytest.mark.parametrize("layout", ["transposed", "sliced", "batch_expanded"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_noncontiguous_inputs(layout, dtype):
    w, k = rwkv_inputs(3, 8, 24, dtype=dtype, seed=3)
    w2, k2 = noncontiguous(w, k, layout)
    if layout == "batch_expanded":
        k = k2.contiguous()
    assert torch.equal(w2, w) and torch.equal(k2, k)
    assert not (w2.is_contiguous() and k2.is_contiguous())
    got = torch.ops.tk.rwkv_forward(w2, k2, 0.25)
    expected = torch.ops.tk.rwkv_forward(w, k, 0.25)
    torch.testing.assert_close(got, expected)  # torch's default tolerance for dtype
    assert rel_err(got, rwkv_conv1d(w.double(), k.double(), 0.25)) < REL_BOUND[dtype]


def test_does_not_modify_inputs():
    w, k = rwkv_inputs(2, 3, 9, seed=4)
    w0, k0 = w.clone(), k.clone()
    torch.ops.tk.rwkv_forward(w, k, 0.1)
    assert torch.equal(w, w0) and torch.equal(k, k0)


def test_empty_batch():
    w, k = rwkv_inputs(1, 3, 5)
    out = torch.ops.tk.rwkv_forward(w, k[:0], 0.1)
    assert out.shape == (0, 3, 5) and out.dtype == torch.float32


def test_integer_eps_is_accepted():
    w, k = rwkv_inputs(2, 3, 4, dtype=torch.float64)
    torch.testing.assert_close(torch.ops.tk.rwkv_forward(w, k, 2), rwkv_loop(w, k, 2.0))


f32 = torch.float32


@pytest.mark.parametrize(
    "w_shape, w_dtype, k_shape, k_dtype, bad_arg",
    [
        ((4, 8), f32, (2, 5, 8), f32, "k"),  # C mismatch
        ((4, 8), f32, (2, 4, 9), f32, "k"),  # T mismatch
        ((8,), f32, (2, 4, 8), f32, "w"),  # w rank 1
        ((4, 1, 8), f32, (2, 4, 8), f32, "w"),  # w rank 3 (the article's (C, 1, T))
        ((4, 8), f32, (4, 8), f32, "k"),  # k rank 2
        ((4, 8), f32, (1, 2, 4, 8), f32, "k"),  # k rank 4
        ((4, 8), torch.int32, (2, 4, 8), torch.int32, "w"),  # int dtype
        ((4, 8), torch.int64, (2, 4, 8), torch.int64, "w"),
        ((4, 8), torch.bool, (2, 4, 8), torch.bool, "w"),
        ((4, 8), torch.complex64, (2, 4, 8), torch.complex64, "w"),
        ((4, 8), f32, (2, 4, 8), torch.float64, "k"),  # k's dtype must be w's
        ((4, 8), torch.float16, (2, 4, 8), torch.bfloat16, "k"),
    ],
)
def test_bad_arguments(w_shape, w_dtype, k_shape, k_dtype, bad_arg):
    w = torch.ones(w_shape, dtype=w_dtype)
    k = torch.ones(k_shape, dtype=k_dtype)
    with pytest.raises(RuntimeError, match=rf"^tk\.rwkv_forward: argument '{bad_arg}'"):
        torch.ops.tk.rwkv_forward(w, k, 0.1)
