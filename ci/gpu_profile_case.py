"""The workload ci/gpu-check.sh hands to Nsight Compute (ncu): one call of each
tk CUDA kernel the performance targets name, at the seed sizes, so the report
says where each kernel's time goes (speed of light, occupancy, launch shape,
warp stalls, memory traffic). Run under ncu with --kernel-name regex:^tk_ (torch's
own kernels, which make the inputs, are not profiled).

    ncu --clock-control none --kernel-name regex:^tk_ python3 ci/gpu_profile_case.py
"""

import sys

import torch

import torch_tk  # noqa: F401  (loads libtk)
from torch_tk import reference as ref


def main() -> int:
    s, r = ref.SEED, ref.RWKV_SEED
    tile = ref.seed_tile("cuda")
    w, k = ref.rwkv_inputs(r.B, r.C, r.T, device="cuda", seed=0)
    g = torch.randn(r.B, r.C, r.T, device="cuda")
    calls = [
        ("brick_pad f32", lambda: torch.ops.tk.brick_pad(tile, s.pw, s.ph, s.stagger)),
        ("rwkv_forward f32", lambda: torch.ops.tk.rwkv_forward(w, k, r.eps)),
        ("rwkv_forward bf16", lambda: torch.ops.tk.rwkv_forward(w.bfloat16(), k.bfloat16(), r.eps)),
        ("rwkv_backward_w f32", lambda: torch.ops.tk.rwkv_backward_w(k, g)),
        ("rwkv_backward_k f32", lambda: torch.ops.tk.rwkv_backward_k(w, g)),
    ]
    for name, fn in calls:
        fn()
        torch.cuda.synchronize()
        print("profiled", name, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
