"""The demo's brick-wall picture (python/torch_tk/demo.py): shrunk by
averaging blocks of pixels, not by keeping every n-th one (which aliased the
48x32 bricks into a moire pattern)."""

import math

import torch

from torch_tk.demo import brick_wall_rgb


def colours(v):
    """The seed's colour map, float in [0, 1], (H, W, 3)."""
    return torch.stack((torch.sin(math.pi * v), torch.cos(math.pi * v / 2), torch.zeros_like(v)), dim=-1)


def test_full_size_is_the_colour_map():
    v = torch.rand(5, 7, generator=torch.Generator().manual_seed(0))
    got = brick_wall_rgb(v)
    assert got.dtype == torch.uint8 and got.shape == (5, 7, 3)
    want = (colours(v) * 255).round().to(torch.uint8)
    assert torch.equal(got, want)


def test_shrunk_pixels_are_block_means():
    # 10 x 13 at 1/4: the 8 x 12 that fills whole blocks, 2 x 3 pixels
    v = torch.rand(10, 13, generator=torch.Generator().manual_seed(1))
    got = brick_wall_rgb(v, 4)
    assert got.shape == (2, 3, 3)
    full = colours(v)[:8, :12]
    want = full.reshape(2, 4, 3, 4, 3).mean(dim=(1, 3))
    assert (got.float() - want * 255).abs().max() <= 0.5 + 1e-3
    # every 4th pixel is not what it shows
    sampled = (colours(v)[::4, ::4][:2, :3] * 255).round()
    assert not torch.equal(got.float(), sampled)


def test_stripes_average_to_grey_not_to_one_stripe():
    # a pattern finer than the block: columns alternating 0 and 0.5
    v = torch.zeros(8, 8)
    v[:, 1::2] = 0.5
    got = brick_wall_rgb(v, 4).float()
    red = (math.sin(0.0) + math.sin(math.pi * 0.5)) / 2 * 255     # mean of the two stripes' red
    assert torch.allclose(got[..., 0], torch.full((2, 2), float(round(red))), atol=1)
