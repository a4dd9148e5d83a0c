"""brick_pad outputs with more than 2**31 elements (uint8 keeps each to a
few GB) are right at sampled positions: the index arithmetic of the
generated kernels and of the shim is 64-bit where it must be (flat index,
row * width, batch offsets, a single row longer than 2**31).

Slow and memory-hungry (up to ~2.2 GB per case, one at a time): opt in with
TK_SLOW_TESTS=1 (`make test` sets it). On CUDA (the GPU check) the same
cases run on the device when one is present.
"""
import os

import pytest
import torch

pytestmark = pytest.mark.skipif(os.environ.get("TK_SLOW_TESTS") != "1",
                                reason="large-tensor tests are opt-in: TK_SLOW_TESTS=1")

SAMPLES = 20000

# (batch, TH, TW, pw, ph, stagger, height, width): each output > 2**31 elements
CASES = {
    "one-plane": ((), 48, 32, 32768, 16384, 10, None, None),        # 32816 x 65568
    "batched": ((2,), 48, 32, 16384, 16384, 7, None, None),         # 2 x 32816 x 32800
    "long-row": ((), 3, 5, 1, 1, -3, 1, 2**31 + 77),                # 1 x (2**31 + 77)
}

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def expected_at(tile, flat, shape, pw, ph, stagger):
    """tile values at flat positions of the (..., H, W) output, from the
    index formula in int64 torch arithmetic (floor division as in Python)."""
    H, W = shape[-2], shape[-1]
    TH, TW = tile.shape[-2], tile.shape[-1]
    col = flat % W
    row = (flat // W) % H
    b = flat // (H * W)
    x1 = col - pw
    y1 = H - 1 - row + ph
    v = torch.div(y1, TH, rounding_mode="floor")
    u = torch.div(x1 - v * stagger, TW, rounding_mode="floor")
    x2 = x1 - u * TW - v * stagger
    y2 = y1 - v * TH
    planes = tile.reshape(-1, TH, TW)
    return planes[b, TH - 1 - y2, x2]


def sample_positions(numel, gen):
    """Random positions plus the corners and both sides of 2**31 and 2**32."""
    fixed = [0, 1, numel - 1, numel - 2]
    for edge in (2**31, 2**32):
        fixed += [e for e in (edge - 1, edge, edge + 1) if 0 <= e < numel]
    rand = torch.randint(0, numel, (SAMPLES,), generator=gen, dtype=torch.int64)
    return torch.cat([torch.tensor(fixed, dtype=torch.int64), rand])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(CASES))
def test_brick_pad_beyond_int32(name, device):
    batch, TH, TW, pw, ph, stagger, height, width = CASES[name]
    gen = torch.Generator().manual_seed(0)
    tile = torch.randint(0, 256, (*batch, TH, TW), generator=gen, dtype=torch.uint8)
    out = torch.ops.tk.brick_pad(tile.to(device), pw, ph, stagger, height, width)
    H = height if height is not None else TH + 2 * ph
    W = width if width is not None else TW + 2 * pw
    assert out.shape == (*batch, H, W) and out.dtype == torch.uint8
    assert out.numel() > 2**31
    flat = sample_positions(out.numel(), gen)
    got = out.view(-1)[flat.to(device)].cpu()
    want = expected_at(tile, flat, out.shape, pw, ph, stagger)
    bad = (got != want).nonzero()
    assert bad.numel() == 0, f"{bad.numel()} of {flat.numel()} samples differ, first at flat index {flat[bad[0]].item()}"
    del out
