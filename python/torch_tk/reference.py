"""Independent PyTorch references for the tk ops, written from the formulas.

Used by the tests, the demo and the bench. Nothing here calls torch.ops.tk.

brick_pad (semantics: docs/seed_ops.md, section 1)
    seed_tile()         the seed's (48, 32) float32 gradient tile
    SEED                the seed configuration (TW, TH, pw, ph, stagger, H, W)
    torch_pad(...)      the seed's tensor-algebra formulation: coordinate grid,
                        flips, floor of float division, stack, mat-vec with the
                        tile's strides, index_select -> flat (..., H*W)
    brick_pad_index(...) exact integer formulation (floor_divide, gather) -> (..., H, W)

rwkv_forward (semantics: docs/seed_ops.md, section 2)
    out[b, c, t] = eps + sum_{u=0..t} w[c, (T-1)-(t-u)] * k[b, c, u]
    rwkv_loop(...)      float64 Python loops (tiny sizes only)
    rwkv_conv1d(...)    eps + conv1d(k zero-padded on the left by T-1, w, groups=C)
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn.functional as F

__all__ = [
    "SEED",
    "seed_tile",
    "brick_pad_shape",
    "torch_pad",
    "brick_pad_index",
    "rwkv_loop",
    "rwkv_conv1d",
    "RWKV_SEED",
    "rwkv_inputs",
]

# The seed configuration (ailzhang/blog_code tile/utils.py).
SEED = SimpleNamespace(TW=32, TH=48, pw=4096, ph=2048, stagger=10)
SEED.W = SEED.TW + 2 * SEED.pw  # 8224
SEED.H = SEED.TH + 2 * SEED.ph  # 4144

# The seed's RWKV benchmark sizes.
RWKV_SEED = SimpleNamespace(B=32, C=768, T=768, eps=0.1)


def seed_tile(device="cpu") -> torch.Tensor:
    """The seed's tile, float32 (TH, TW) = (48, 32), values in [0, 1).

    arange(TW*TH) laid out as (TW, TH), turned a quarter clockwise
    (rot90 k=-1 over dims (0, 1)) to (TH, TW), divided by TH*TW.
    """
    tw, th = SEED.TW, SEED.TH
    grid = torch.arange(tw * th, dtype=torch.float32, device=device).reshape(tw, th)
    return torch.rot90(grid, k=-1, dims=(0, 1)) / (th * tw)


def brick_pad_shape(th: int, tw: int, pw: int, ph: int, height=None, width=None):
    """(H, W) of brick_pad's output: defaults TH + 2*ph and TW + 2*pw."""
    h = th + 2 * ph if height is None else height
    w = tw + 2 * pw if width is None else width
    return h, w


def _batched(tile: torch.Tensor):
    """tile (..., TH, TW) -> (batch shape, (N, TH, TW) view or copy)."""
    if tile.dim() < 2:
        raise ValueError("tile must have at least 2 dims (..., TH, TW)")
    batch = tuple(tile.shape[:-2])
    return batch, tile.reshape(-1, tile.shape[-2], tile.shape[-1])


def torch_pad(tile, pw, ph, stagger, height=None, width=None) -> torch.Tensor:
    """brick_pad as the seed's tensor algebra; returns flat (..., H*W).

    Like the seed: an int64 (H, W, 2) grid of (row, col), turned into plane
    coordinates (y1, x1), flipped to (x1, y1); the brick indices v and u are
    floors of *float32* divisions (the seed divides int64 tensors by Python
    ints, which gives torch's default float dtype); the in-brick coordinates
    come from stacked (u, u), (v, v) times the shift vectors; flipped back to
    (tile row, tile col) and dotted with the tile's strides (a float mat-vec)
    to get flat indices for index_select.

    Exactness: float32 floor(a / b) equals integer floor division whenever
    |a| < 2**24 (the rounding error of a / b is then below 1/b, the distance
    to the next integer). The seed configuration has |a| < 6200. For huge
    coordinates use brick_pad_index.
    """
    batch, tiles = _batched(tile)
    th, tw = tiles.shape[-2], tiles.shape[-1]
    h, w = brick_pad_shape(th, tw, pw, ph, height, width)
    dev = tile.device
    shift_x = torch.tensor([tw, 0], dtype=torch.int64, device=dev)
    shift_y = torch.tensor([stagger, th], dtype=torch.int64, device=dev)

    # (H, W, 2) int64 grid: [..., 0] = row, [..., 1] = col.
    rows, cols = torch.meshgrid(
        torch.arange(h, dtype=torch.int64, device=dev),
        torch.arange(w, dtype=torch.int64, device=dev),
        indexing="ij",
    )
    grid = torch.stack((rows, cols), dim=2)

    # Pixel -> plane coordinates, y pointing up: (y1, x1), then flip to (x1, y1).
    plane = torch.empty_like(grid)
    plane[:, :, 0] = (h - 1 + ph) - grid[:, :, 0]
    plane[:, :, 1] = grid[:, :, 1] - pw
    xy = torch.flip(plane, (2,))

    # Brick indices: floor of float division, as the seed does.
    v = torch.floor(xy[:, :, 1] / th).to(torch.int32)
    u = torch.floor((xy[:, :, 0] - v * shift_y[0]) / tw).to(torch.int32)
    uu = torch.stack((u, u), dim=2)
    vv = torch.stack((v, v), dim=2)
    in_brick = xy - uu * shift_x - vv * shift_y  # (x2, y2), inside the tile

    # Plane -> tile pixel: row counts down from the top; flip to (row, col).
    in_brick[:, :, 1] = (th - 1) - in_brick[:, :, 1]
    table = torch.flip(in_brick, (2,)).reshape(-1, 2).to(torch.float32)

    flat = tiles.contiguous().reshape(tiles.shape[0], th * tw)  # strides (TW, 1)
    strides = torch.tensor([float(tw), 1.0], dtype=torch.float32, device=dev)
    inds = table.mv(strides).to(torch.int64)  # (H*W,)
    gathered = torch.index_select(flat, 1, inds)  # (N, H*W)
    return gathered.reshape(*batch, h * w)


def brick_pad_index(tile, pw, ph, stagger, height=None, width=None) -> torch.Tensor:
    """brick_pad in exact int64 arithmetic; returns (..., H, W).

    Per output pixel (row, col):
        x1 = col - pw;  y1 = H - 1 - row + ph
        v = y1 // TH;   u = (x1 - v*stagger) // TW       (floor division)
        out = tile[TH - 1 - (y1 - v*TH), x1 - u*TW - v*stagger]
    Reads the tile in place (any strides, any dtype, any batch dims).
    """
    th, tw = tile.shape[-2], tile.shape[-1]
    if th == 0 or tw == 0:
        raise ValueError("tile must have TH > 0 and TW > 0")
    h, w = brick_pad_shape(th, tw, pw, ph, height, width)
    if h < 0 or w < 0:
        raise ValueError(f"negative output size ({h}, {w})")
    dev = tile.device
    row = torch.arange(h, dtype=torch.int64, device=dev).reshape(h, 1)
    col = torch.arange(w, dtype=torch.int64, device=dev).reshape(1, w)
    x1 = col - pw  # (1, W)
    y1 = (h - 1 + ph) - row  # (H, 1)
    v = torch.floor_divide(y1, th)  # (H, 1)
    u = torch.floor_divide(x1 - v * stagger, tw)  # (H, W)
    tile_row = ((th - 1) - (y1 - v * th)).expand(h, w)
    tile_col = x1 - u * tw - v * stagger
    return tile[..., tile_row, tile_col]


def rwkv_loop(w, k, eps) -> torch.Tensor:
    """rwkv_forward by the formula, Python loops in float64; returns float64 (B, C, T)."""
    C, T = w.shape
    B = k.shape[0]
    wl = w.to(torch.float64).tolist()
    kl = k.to(torch.float64).tolist()
    out = torch.empty(B, C, T, dtype=torch.float64)
    for b in range(B):
        for c in range(C):
            for t in range(T):
                s = float(eps)
                for u in range(t + 1):
                    s += wl[c][(T - 1) - (t - u)] * kl[b][c][u]
                out[b, c, t] = s
    return out


def rwkv_conv1d(w, k, eps) -> torch.Tensor:
    """rwkv_forward as PyTorch's one-liner: eps + causal depthwise conv1d.

    w (C, T), k (B, C, T) -> (B, C, T) in k's dtype. conv1d is a
    cross-correlation: out[t] = sum_j w[j] * kpad[t + j] with kpad[i] =
    k[i - (T-1)], i.e. j = (T-1) - t + u.
    """
    C, T = w.shape
    return eps + F.conv1d(F.pad(k, (T - 1, 0)), w.unsqueeze(1), groups=C)


def rwkv_inputs(B, C, T, dtype=torch.float32, device="cpu", seed=0):
    """The seed's inputs: w = rand(C, T), k = rand(B, C, T) (seeded)."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.rand(C, T, generator=gen, dtype=torch.float32).to(device=device, dtype=dtype)
    k = torch.rand(B, C, T, generator=gen, dtype=torch.float32).to(device=device, dtype=dtype)
    return w, k


def wkv_loop(w, u, k, v) -> torch.Tensor:
    """RWKV-4's WKV (examples/specs/wkv.tk) as a PyTorch loop over t on (B, C)
    slices, in the numerically stable form: the state (aa, bb) is kept
    scaled by e^-pp. Follows the inputs' dtype and device (autograd too)."""
    B, T, C = k.shape
    aa = torch.zeros(B, C, dtype=k.dtype, device=k.device)
    bb = torch.zeros_like(aa)
    pp = torch.full((B, C), -1e38, dtype=k.dtype, device=k.device)
    ys = []
    for t in range(T):
        kk, vv = k[:, t], v[:, t]
        ww = u + kk
        p = torch.maximum(pp, ww)
        e1, e2 = torch.exp(pp - p), torch.exp(ww - p)
        ys.append((e1 * aa + e2 * vv) / (e1 * bb + e2))
        ww = w + pp
        p = torch.maximum(ww, kk)
        e1, e2 = torch.exp(ww - p), torch.exp(kk - p)
        aa, bb, pp = e1 * aa + e2 * vv, e1 * bb + e2, p
    return torch.stack(ys, 1) if ys else torch.empty(B, 0, C, dtype=k.dtype, device=k.device)


def selective_scan_loop(u, delta, A, B, C, D):
    """Mamba's selective scan (examples/specs/selective_scan.tk) as mamba_ssm's
    selective_scan_ref computes it: u, delta [..., E, L], A [E, N], B, C
    [..., N, L], D [E]; a loop over t on [..., E, N] states. Returns y and
    the last state. Follows the inputs' dtype and device (autograd too)."""
    dA = torch.exp(torch.einsum("...el,en->...eln", delta, A))
    dBu = torch.einsum("...el,...nl,...el->...eln", delta, B, u)
    x = torch.zeros(dA.shape[:-2] + A.shape[-1:], dtype=u.dtype, device=u.device)
    ys = []
    for t in range(u.shape[-1]):
        x = dA[..., t, :] * x + dBu[..., t, :]
        ys.append(torch.einsum("...en,...n->...e", x, C[..., :, t]))
    y = torch.stack(ys, -1) if ys else torch.zeros_like(u)
    return y + u * D[:, None], x
