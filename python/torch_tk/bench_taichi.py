"""The seed's two Taichi kernels, written from the formulas, as bench cases
next to tk (see bench.py). A module of its own: Taichi reads the kernels'
type annotations, which bench.py's `from __future__ import annotations`
would turn into strings. Importing it imports taichi."""

import taichi as ti
import torch

from . import reference as ref

_arch = None


def _init(device: str) -> None:
    global _arch
    arch = ti.cuda if device == "cuda" else ti.cpu
    if _arch is not arch:
        ti.init(arch=arch, default_fp=ti.f32, offline_cache=True, log_level=ti.ERROR)
        _arch = arch


def cases(device: str, seed, rwkv, rel_err):
    """brick_pad (seed's configuration `seed`) and rwkv_forward (`rwkv`): tk
    vs Taichi, checked against each other."""
    _init(device)
    H, W, TH, TW, pw, ph, sx = seed.H, seed.W, seed.TH, seed.TW, seed.pw, seed.ph, seed.stagger

    @ti.kernel
    def ti_pad(out: ti.types.ndarray(), tile: ti.types.ndarray()):
        for row, col in ti.ndrange(H, W):
            x1 = col - pw
            y1 = H - 1 - row + ph
            v = ti.floor(y1 / TH, ti.i32)
            u = ti.floor((x1 - v * sx) / TW, ti.i32)
            x2 = x1 - u * TW - v * sx
            y2 = y1 - v * TH
            out[row, col] = tile[TH - 1 - y2, x2]

    B, C, T = rwkv.B, rwkv.C, rwkv.T

    @ti.kernel
    def ti_rwkv(out: ti.types.ndarray(), w: ti.types.ndarray(), k: ti.types.ndarray(), eps: ti.f32):
        for b, c, t in ti.ndrange(B, C, T):
            acc = eps
            for u in range(t + 1):
                acc += w[c, T - 1 - t + u] * k[b, c, u]
            out[b, c, t] = acc

    tile = torch.rand(TH, TW, device=device) if (TH, TW) != (ref.SEED.TH, ref.SEED.TW) else ref.seed_tile(device)
    tile = tile.contiguous()   # Taichi takes contiguous tensors only (the seed tile is a rot90 view)
    wall = torch.empty(H, W, device=device)
    w, k = ref.rwkv_inputs(B, C, T, dtype=torch.float32, device=device, seed=0)
    out = torch.empty(B, C, T, device=device)

    def pad_tk():
        return torch.ops.tk.brick_pad(tile, pw, ph, sx)

    def pad_ti():
        ti_pad(wall, tile)
        ti.sync()
        return wall

    def rwkv_tk():
        return torch.ops.tk.rwkv_forward(w, k, rwkv.eps)

    def rwkv_ti():
        ti_rwkv(out, w, k, rwkv.eps)
        ti.sync()
        return out

    def max_err(got, want):
        return 0.0 if torch.equal(got, want) else (got - want).abs().max().item()

    return [dict(op="brick_pad", shape="seed config (Taichi)", work={"bytes_written": H * W * 4},
                 impls=[("tk", pad_tk), ("taichi", pad_ti)], check=max_err, error="max abs error",
                 inputs=dict(tile=tile)),
            dict(op="rwkv_forward", shape=f"B={B} C={C} T={T} f32 (Taichi)", work={"flop": B * C * T * (T + 1)},
                 impls=[("tk", rwkv_tk), ("taichi", rwkv_ti)], check=rel_err, error="max rel error",
                 inputs=dict(w=w, k=k))]
