"""torch.ops.tk.brick_pad against independent references (torch_tk.reference).

Every comparison is torch.equal (bit for bit, every element), so an output
element the op failed to write shows up: before each call the test frees a
block of the output's size filled with a poison byte, which the allocator
tends to hand straight back as the op's output.
"""

import random

import pytest
import torch

from torch_tk.reference import SEED, brick_pad_index, brick_pad_shape, seed_tile, torch_pad

ALL_DTYPES = [
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.bfloat16, torch.float32, torch.float64,
]
LAYOUTS = ["contiguous", "transposed", "sliced", "expanded", "batch_last"]


def poison_allocator(nbytes: int) -> None:
    """Allocate and free nbytes of 0xA5 so a fresh output likely starts as poison."""
    if nbytes > 0:
        block = torch.full((nbytes,), 0xA5, dtype=torch.uint8)
        del block


def call_poisoned(tile, pw, ph, stagger, height=None, width=None):
    """torch.ops.tk.brick_pad after poisoning the allocator with the output's size."""
    h, w = brick_pad_shape(tile.shape[-2], tile.shape[-1], pw, ph, height, width)
    numel = max(h, 0) * max(w, 0)
    for d in tile.shape[:-2]:
        numel *= d
    poison_allocator(numel * tile.element_size())
    return torch.ops.tk.brick_pad(tile, pw, ph, stagger, height, width)


def make_values(shape, dtype, gen):
    """Distinct-as-possible values of dtype, so a mis-indexed read shows."""
    n = 1
    for d in shape:
        n *= d
    perm = torch.randperm(max(n, 1), generator=gen)[:n].reshape(shape)
    if dtype == torch.bool:
        return (perm % 2).bool()
    if dtype.is_floating_point:
        return (perm.to(torch.float64) / 8 - 3.0).to(dtype)  # exact in bf16 for small n
    return (perm - 100).to(dtype)  # wraps for uint8 / int8: still deterministic


def make_tile(batch, th, tw, dtype, layout, gen):
    """A (*batch, TH, TW) tile of dtype whose memory layout is `layout`."""
    if layout == "contiguous":
        tile = make_values((*batch, th, tw), dtype, gen)
    elif layout == "transposed":  # TW, TH swapped in memory
        tile = make_values((*batch, tw, th), dtype, gen).transpose(-1, -2)
    elif layout == "sliced":  # every other row, every third column, offset storage
        big = make_values((*batch, 2 * th + 1, 3 * tw + 2), dtype, gen)
        tile = big[..., 1::2, 2::3]
    elif layout == "expanded":  # batch dims with stride 0
        tile = make_values((th, tw), dtype, gen).expand(*batch, th, tw)
    elif layout == "batch_last":  # batch dims innermost in memory
        base = make_values((th, tw, *batch), dtype, gen)
        tile = base.permute(*range(2, 2 + len(batch)), 0, 1)
    else:
        raise ValueError(layout)
    assert tuple(tile.shape) == (*batch, th, tw)
    return tile


def random_configs(n_valid=64, n_error=8, seed=20261202):
    """Seeded random small configurations: (id, dict) for valid and erroring calls."""
    rng = random.Random(seed)
    valid, errors = [], []
    i = 0
    while len(valid) < n_valid or len(errors) < n_error:
        i += 1
        th, tw = rng.randint(1, 9), rng.randint(1, 9)
        pw, ph = rng.randint(-5, 20), rng.randint(-5, 20)
        # stagger in -40..40; a quarter of the cases beyond +-TW on purpose
        stagger = rng.randint(-40, 40) if rng.random() < 0.75 else rng.choice([-1, 1]) * rng.randint(tw + 1, 40)
        height = rng.randint(0, 30) if rng.random() < 0.25 else None
        width = rng.randint(0, 30) if rng.random() < 0.25 else None
        batch = tuple(rng.randint(1, 3) for _ in range(rng.choice([0, 0, 1, 2])))
        layout = rng.choice(LAYOUTS if batch else LAYOUTS[:3])
        cfg = dict(th=th, tw=tw, pw=pw, ph=ph, stagger=stagger, height=height, width=width,
                   batch=batch, layout=layout, seed=i)
        h, w = brick_pad_shape(th, tw, pw, ph, height, width)
        if h < 0 or w < 0:
            if len(errors) < n_error:
                cfg["dtype"] = ALL_DTYPES[len(errors) % len(ALL_DTYPES)]
                errors.append(cfg)
        elif len(valid) < n_valid:
            cfg["dtype"] = ALL_DTYPES[len(valid) % len(ALL_DTYPES)]  # every dtype >= 6 times
            valid.append(cfg)
    return valid, errors


VALID, ERRORS = random_configs()


def cfg_id(cfg):
    b = "x".join(map(str, cfg["batch"])) or "-"
    return (f"{str(cfg['dtype'])[6:]}-T{cfg['th']}x{cfg['tw']}-p{cfg['pw']},{cfg['ph']}-s{cfg['stagger']}"
            f"-hw{cfg['height']},{cfg['width']}-b{b}-{cfg['layout']}")


def test_seed_configuration_bit_equal_to_torch_pad():
    """The seed's brick wall: tk equals the seed's torch_pad bit for bit."""
    tile = seed_tile()
    assert tile.shape == (SEED.TH, SEED.TW)
    out = call_poisoned(tile, SEED.pw, SEED.ph, SEED.stagger)
    assert out.shape == (SEED.H, SEED.W) == (4144, 8224)
    assert out.dtype == torch.float32
    expected = torch_pad(tile, SEED.pw, SEED.ph, SEED.stagger).reshape(SEED.H, SEED.W)
    assert torch.equal(out, expected)


@pytest.mark.parametrize("cfg", VALID, ids=[cfg_id(c) for c in VALID])
def test_random_small_configuration(cfg):
    gen = torch.Generator().manual_seed(cfg["seed"])
    tile = make_tile(cfg["batch"], cfg["th"], cfg["tw"], cfg["dtype"], cfg["layout"], gen)
    args = (cfg["pw"], cfg["ph"], cfg["stagger"], cfg["height"], cfg["width"])
    out = call_poisoned(tile, *args)
    expected = brick_pad_index(tile, *args)
    assert out.dtype == tile.dtype
    assert out.shape == expected.shape
    assert out.is_contiguous()
    assert torch.equal(out, expected), f"first mismatch at {(out != expected).nonzero()[:1].tolist()}"


def test_random_configurations_cover_every_dtype_and_layout():
    assert {c["dtype"] for c in VALID} == set(ALL_DTYPES)
    assert {c["layout"] for c in VALID} == set(LAYOUTS)
    assert any(abs(c["stagger"]) > c["tw"] for c in VALID)
    assert any(c["height"] is not None for c in VALID) and any(c["width"] is not None for c in VALID)
    assert {len(c["batch"]) for c in VALID} == {0, 1, 2}


@pytest.mark.parametrize("cfg", ERRORS, ids=[cfg_id(c) for c in ERRORS])
def test_random_negative_output_size_is_an_error(cfg):
    gen = torch.Generator().manual_seed(cfg["seed"])
    tile = make_tile(cfg["batch"], cfg["th"], cfg["tw"], cfg["dtype"], cfg["layout"], gen)
    with pytest.raises(RuntimeError, match=r"tk\.brick_pad"):
        torch.ops.tk.brick_pad(tile, cfg["pw"], cfg["ph"], cfg["stagger"], cfg["height"], cfg["width"])


@pytest.mark.parametrize(
    "pw, ph, stagger",
    [
        (2**31 + 5, -(2**33) - 3, -(2**20) - 7),  # beyond int32: catches 32-bit index maths
        (-(10**12), 10**12 + 1, 123_457),
        (7, 3, 2**40 + 1),
        (-(2**35), -(2**35), -(2**24)),
    ],
)
@pytest.mark.parametrize("th, tw", [(3, 5), (8, 1), (1, 7)])
def test_large_arguments(th, tw, pw, ph, stagger):
    """Large or negative pw, ph, stagger are valid with an explicit small height/width."""
    tile = make_values((th, tw), torch.float32, torch.Generator().manual_seed(th * 10 + tw))
    out = call_poisoned(tile, pw, ph, stagger, 11, 13)
    assert torch.equal(out, brick_pad_index(tile, pw, ph, stagger, 11, 13))


@pytest.mark.parametrize("height, width", [(0, 5), (5, 0), (0, 0)])
def test_zero_size_output(height, width):
    tile = torch.ones(2, 3, 4)
    out = torch.ops.tk.brick_pad(tile, 1, 1, 1, height, width)
    assert out.shape == (2, height, width)


def test_zero_size_batch():
    out = torch.ops.tk.brick_pad(torch.ones(0, 3, 4, dtype=torch.int16), 2, 1, 1)
    assert out.shape == (0, 5, 8) and out.dtype == torch.int16


@pytest.mark.parametrize("by_keyword", ["height", "width"])
def test_height_or_width_alone_by_keyword(by_keyword):
    tile = make_values((4, 6), torch.float64, torch.Generator().manual_seed(1))
    out = torch.ops.tk.brick_pad(tile, 3, 2, 5, **{by_keyword: 9})
    expected = brick_pad_index(tile, 3, 2, 5, **{by_keyword: 9})
    assert torch.equal(out, expected)


def test_does_not_modify_tile():
    tile = make_values((5, 7), torch.float32, torch.Generator().manual_seed(2))
    before = tile.clone()
    torch.ops.tk.brick_pad(tile, 4, 4, 3)
    assert torch.equal(tile, before)


@pytest.mark.parametrize("shape", [(0, 4), (4, 0), (0, 0), (2, 0, 4), (3, 4, 0)])
def test_empty_tile_dim_is_an_error(shape):
    """TH == 0 or TW == 0: no brick to repeat."""
    with pytest.raises(RuntimeError, match=r"tk\.brick_pad"):
        torch.ops.tk.brick_pad(torch.ones(shape), 2, 2, 1)


@pytest.mark.parametrize(
    "shape, pw, ph, height, width",
    [
        ((4, 6), 1, -3, None, None),  # H = 4 - 6
        ((4, 6), -4, 1, None, None),  # W = 6 - 8
        ((4, 6), 1, 1, -1, None),
        ((4, 6), 1, 1, None, -7),
    ],
)
def test_negative_output_size_is_an_error(shape, pw, ph, height, width):
    with pytest.raises(RuntimeError, match=r"tk\.brick_pad"):
        torch.ops.tk.brick_pad(torch.ones(shape), pw, ph, 1, height, width)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_unsupported_dtype_is_an_error(dtype):
    with pytest.raises(RuntimeError, match=r"^tk\.brick_pad: argument 'tile'"):
        torch.ops.tk.brick_pad(torch.ones(4, 6, dtype=dtype), 1, 1, 1)


@pytest.mark.parametrize("shape", [(6,), ()])
def test_rank_below_two_is_an_error(shape):
    with pytest.raises(RuntimeError, match=r"^tk\.brick_pad: argument 'tile'"):
        torch.ops.tk.brick_pad(torch.ones(shape), 1, 1, 1)
