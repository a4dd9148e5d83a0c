"""A small CUDA workload for compute-sanitizer (ci/gpu-check.sh): every tk op
on small tensors of every dtype, batched, non-contiguous and empty, each
result compared with the same op on the CPU. Exit 0 when all agree.

    compute-sanitizer --tool memcheck python3 ci/gpu_small_case.py
"""

import sys

import torch

import torch_tk  # noqa: F401  (loads libtk)
from torch_tk.reference import rwkv_inputs

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64]


def main() -> int:
    bad = []
    gen = torch.Generator().manual_seed(0)
    for dtype in DTYPES:
        base = (torch.randn(2, 5, 11, 7, generator=gen) * 50)
        tile = (base > 0) if dtype == torch.bool else base.to(dtype)
        for t in (tile, tile.transpose(-1, -2), tile[:, 1::2, ::3], tile[:1, 0].expand(3, 11, 7)):
            for args in [(9, 4, -3), (2, 3, 40, 5, 0), (6, 1, 3, None, 13)]:
                got = torch.ops.tk.brick_pad(t.cuda(), *args).cpu()
                if not torch.equal(got, torch.ops.tk.brick_pad(t, *args)):
                    bad.append(f"brick_pad {dtype} {tuple(t.shape)} {args}")
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        w, k = rwkv_inputs(3, 4, 37, dtype=dtype, seed=1)
        for kk in (k, k.transpose(0, 1).contiguous().transpose(0, 1), k[:0]):
            got = torch.ops.tk.rwkv_forward(w.cuda(), kk.cuda(), 0.1).cpu().double()
            want = torch.ops.tk.rwkv_forward(w, kk, 0.1).double()
            if got.numel() and ((got - want).abs().max() / want.abs().max()).item() > 1e-2:
                bad.append(f"rwkv_forward {dtype} {tuple(kk.shape)}")
    torch.cuda.synchronize()
    for b in bad:
        print("MISMATCH", b)
    print(f"gpu_small_case: {'OK' if not bad else f'{len(bad)} mismatches'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
