"""Skewed lane blocks (docs/spec.md, "Skewed blocks") on ragged ranges.

The CPU kernel's single-row tiles run 8 lane blocks of 16 outputs whose
loads are skewed: block r takes u = i + 16 r, where it reads the window
block 0 reads at u = i. rwkv's ranges (range(t + 1)) start and end in
order, so its walk splits at the blocks' bounds; this op's ranges move
irregularly with t at both ends, so the blocks' ranges are out of order
and the walk falls back to testing each block at the ends, and the masked
tails differ between blocks. Long rows (T >= 128) with few batch rows take
those tiles; B = 13 also runs an 8-row group first. Reference: a float64
loop over t; the output is poisoned with NaN first.
"""

import pytest
import torch

import torch_tk

SPEC = """
op ragged_conv(w: float[C, T], k: w.dtype[B, C, T]) -> out: k.dtype[B, C, T]:
    for b, c, t in out:
        s = 0.25
        for u in range(max(0, t - 200 + (t * 7) % 11), t + 1 - t % 3):
            s += w[c, (T - 1) - (t - u)] * k[b, c, u]
        out[b, c, t] = s
"""


@pytest.fixture(scope="module")
def ragged_conv():
    return torch_tk.kernel(SPEC, file="test_skewed_tiles.py")


def reference(w, k):
    B, C, T = k.shape
    out = torch.full((B, C, T), 0.25, dtype=torch.float64)
    wd, kd = w.double(), k.double()
    for t in range(T):
        for u in range(max(0, t - 200 + (t * 7) % 11), t + 1 - t % 3):
            out[:, :, t] += wd[:, T - 1 - t + u] * kd[:, :, u]
    return out


@pytest.mark.parametrize("B, T", [(1, 300), (5, 290), (13, 257)])
@pytest.mark.parametrize("dtype, bound", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
@pytest.mark.parametrize("threads", [1, 2])
def test_ragged_ranges(ragged_conv, B, T, dtype, bound, threads):
    gen = torch.Generator().manual_seed(B * 1000 + T)
    w = (torch.rand(3, T, generator=gen, dtype=torch.float64) - 0.5).to(dtype)
    k = torch.rand(B, 3, T, generator=gen, dtype=torch.float64).to(dtype)
    ref = reference(w, k)
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        block = torch.full((B * 3 * T,), float("nan"), dtype=dtype)
        del block
        out = ragged_conv(w, k)
    finally:
        torch.set_num_threads(old)
    assert out.shape == (B, 3, T) and out.dtype == dtype
    err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
    assert err < bound, err
