"""Small strided CPU inputs are copied to contiguous memory before the kernel.

A CPU kernel has a unit-stride body (rows read with vector loads) and a
strided one. When a tensor argument's innermost stride is not 1 and it has
at most 1/8 as many elements as the op's index space, the shim runs the
kernel on a contiguous copy (shim/kernels.cpp, worth_staging): the seed's
brick_pad tile is a transposed view, and the copy makes the seed
configuration 1.6x faster (bench/LOG.md). These tests see the copy in the
profiler (aten::contiguous under the tk op), on both sides of the threshold,
and check the results and gradients against independent references with the
inputs left untouched.
"""
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from torch_tk import reference as ref


def copies_in(fn):
    """(result, number of aten::contiguous calls) of fn() under the profiler."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = fn()
    return out, sum(e.name == "aten::contiguous" for e in prof.events())


# (layout, pw, ph, staged): the output has (TH + 2ph)(TW + 2pw) elements,
# the 6x10 tile 60: staged when the output has 480 or more.
@pytest.mark.parametrize("layout, pw, ph, staged", [
    ("transposed", 20, 10, True),      # 26 x 50 = 1300 >= 480
    ("transposed", 5, 5, False),       # 16 x 20 = 320 < 480
    ("transposed", 1, 1, False),       # 8 x 12 = 96 < 480
    ("expanded", 20, 10, True),        # innermost stride 0
    ("sliced", 20, 10, True),          # innermost stride 2
    ("contiguous", 20, 10, False),     # nothing to copy
    ("batch_last", 20, 10, False),     # innermost stride 1: read in place
])
def test_brick_pad_staging(tk, layout, pw, ph, staged):
    gen = torch.Generator().manual_seed(11)
    base = torch.randn(6, 10, generator=gen)
    if layout == "transposed":
        tile = base.t().contiguous().t()
    elif layout == "expanded":
        tile = torch.randn(6, 1, generator=gen).expand(6, 10)
    elif layout == "sliced":
        tile = torch.randn(6, 20, generator=gen)[:, ::2]
    elif layout == "batch_last":
        tile = torch.randn(6, 40, generator=gen)[:, 5:15]
    else:
        tile = base
    before = (tile.clone(), tile.stride(), tile.data_ptr())
    out, copies = copies_in(lambda: tk.brick_pad(tile, pw, ph, 3))
    assert copies == (1 if staged else 0)
    assert torch.equal(out, ref.brick_pad_index(tile, pw, ph, 3))
    assert torch.equal(tile, before[0]) and tile.stride() == before[1] and tile.data_ptr() == before[2]


def test_threshold_exact(tk):
    # a 4x4 transposed tile (16 elements): an index space of exactly 128 is
    # staged, 120 (the next smaller output, 10 x 12) is not
    tile = torch.randn(4, 4).t()
    out, copies = copies_in(lambda: tk.brick_pad(tile, 4, 2, 1, 8, 16))  # 8 x 16 = 128
    assert out.shape == (8, 16) and copies == 1
    assert torch.equal(out, tk.brick_pad(tile.contiguous(), 4, 2, 1, 8, 16))
    out, copies = copies_in(lambda: tk.brick_pad(tile, 4, 2, 1, 10, 12))  # 120
    assert out.shape == (10, 12) and copies == 0
    assert torch.equal(out, tk.brick_pad(tile.contiguous(), 4, 2, 1, 10, 12))


@pytest.mark.parametrize("B, staged", [(8, True), (4, False)])
def test_rwkv_transposed_weight(tk, B, staged):
    # w (C, T) stored as (T, C): staged when B*C*T >= 8*C*T, i.e. B >= 8
    C, T = 5, 33
    gen = torch.Generator().manual_seed(B)
    w = torch.randn(T, C, dtype=torch.float64, generator=gen).t().requires_grad_()
    k = torch.randn(B, C, T, dtype=torch.float64, generator=gen, requires_grad=True)
    out, copies = copies_in(lambda: tk.rwkv_forward(w, k, 0.5))
    assert copies == (1 if staged else 0)
    w2, k2 = w.detach().clone().requires_grad_(), k.detach().clone().requires_grad_()
    want = ref.rwkv_conv1d(w2, k2, 0.5)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    g = torch.randn(B, C, T, dtype=torch.float64, generator=gen)
    out.backward(g)
    want.backward(g)
    torch.testing.assert_close(w.grad, w2.grad, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(k.grad, k2.grad, rtol=1e-10, atol=1e-10)


def test_row_loop_staging_weighs_the_outputs(tk):
    """A row loop's index space is its iterations (the selective scan's: batch
    x E), but each walks a row: the copy is weighed against its largest output
    (y, batch x E x L). B and C ([N, L] a batch row, 1/8 of y when E = 8 N)
    passed transposed are copied; u, as large as y, is read in place."""
    import os
    import torch_tk
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    torch_tk.load(os.path.join(root, "examples", "specs", "selective_scan.tk"))
    gen = torch.Generator().manual_seed(3)
    E, L, N = 32, 24, 4
    u, delta = torch.randn(2, E, L, generator=gen), torch.rand(2, E, L, generator=gen) * 0.5
    A, D = -torch.rand(E, N, generator=gen), torch.randn(E, generator=gen)
    B, C = torch.randn(2, N, L, generator=gen), torch.randn(2, N, L, generator=gen)

    def transposed(t):
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)

    want = tk.selective_scan(u, delta, A, B, C, D)
    for args, staged in (((u, delta, A, transposed(B), transposed(C), D), 2),
                         ((u, delta, A, transposed(B), C, D), 1),
                         ((transposed(u), delta, A, B, C, D), 0)):
        (y, last), copies = copies_in(lambda: tk.selective_scan(*args))
        assert copies == staged
        torch.testing.assert_close(y, want[0], rtol=1e-6, atol=1e-6)   # (the strided body sums in another order)
        torch.testing.assert_close(last, want[1], rtol=1e-6, atol=1e-6)
