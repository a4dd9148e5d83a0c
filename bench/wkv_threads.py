"""tk.wkv (examples/specs/wkv.tk) alone on 1 and 2 threads: median and best of 9
calls at B=8, T=1024, C=768 float32, twice in turn. Give the repository root
whose examples/specs/wkv.tk to load (so that an older clone's build can be
timed the same way):

    PYTHONPATH=python TK_LIBRARY=build/libtk.so python3 bench/wkv_threads.py .
"""
import os
import sys
import time

import torch
import torch_tk


def main(root: str) -> None:
    torch_tk.load(os.path.join(root, "examples", "specs", "wkv.tk"))
    g = torch.Generator().manual_seed(0)
    B, T, C = 8, 1024, 768
    w, u = -torch.exp(torch.randn(C, generator=g)), torch.randn(C, generator=g)
    k, v = torch.randn(B, T, C, generator=g), torch.randn(B, T, C, generator=g)
    for threads in (1, 2, 1, 2):
        torch.set_num_threads(threads)
        torch.ops.tk.wkv(w, u, k, v)   # compiles on the first call
        times = []
        for _ in range(9):
            t0 = time.perf_counter()
            torch.ops.tk.wkv(w, u, k, v)
            times.append(time.perf_counter() - t0)
        times.sort()
        print(f"{root} threads {threads} median {times[4] * 1e3:.1f} ms min {times[0] * 1e3:.1f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
