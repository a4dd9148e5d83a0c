"""Derived backward ops of scans (`backward auto`, docs/autograd.md, Scans)
side by side with written ones and torch, in one run.

Forward + backward (torch.autograd.grad) of RWKV-4's WKV (B, T, C): the
forward of examples/specs/wkv.tk with `backward auto` against that file's
backward ops written by hand; and of a prefix sum over the last dim (R, T):
derived against torch.cumsum. The cases interleave, --rounds times, and the
table gives each case's median of its round medians. float32, CPU.

    PYTHONPATH=python TK_LIBRARY=build/libtk.so python3 bench/backward_auto_scan.py [--rounds 5] [--repeat 15]
"""
import os

import torch

import torch_tk
from timing import interleaved_args, print_interleaved   # bench/timing.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = [(8, 512, 256), (2, 64, 64)]
CUMSUM = """
op bsc_cumsum(x: float[..., T]) -> y: x.dtype[..., T]:
    backward auto
    for _ in y:
        s = 0.0
        for t in range(T):
            s += x[t]
            y[t] = s
"""


def wkv_auto():
    """examples/specs/wkv.tk's forward, renamed, with `backward auto`."""
    text = open(os.path.join(ROOT, "examples", "specs", "wkv.tk")).read()
    forward = text[text.index("op wkv("):]
    forward = forward[:forward.index("\n\n")] + "\n"
    return forward.replace("op wkv(", "op bsc_wkv(").replace(
        "    backward wkv_backward_kv, wkv_backward_wu\n", "    backward auto\n")


def cases(B, T, C):
    """(name, fn) of every case at (B, T, C): each a forward and its backward."""
    tk = torch.ops.tk
    gen = torch.Generator().manual_seed(B * T * C)
    w = (-torch.exp(torch.randn(C, generator=gen) * 0.5)).requires_grad_()
    u = torch.randn(C, generator=gen).requires_grad_()
    k, v, g = (torch.randn(B, T, C, generator=gen) for _ in range(3))
    k.requires_grad_()
    v.requires_grad_()
    x = torch.randn(B * C, T, generator=gen).requires_grad_()
    gx = torch.randn(B * C, T, generator=gen)

    def fb(fn, grad, *leaves):
        return lambda: torch.autograd.grad(fn(), leaves, grad)

    return [
        ("wkv (w, u, k, v): tk, backward auto", fb(lambda: tk.bsc_wkv(w, u, k, v), g, w, u, k, v)),
        ("wkv (w, u, k, v): tk, backward by hand", fb(lambda: tk.wkv(w, u, k, v), g, w, u, k, v)),
        ("prefix sum (B*C, T): tk, backward auto", fb(lambda: tk.bsc_cumsum(x), gx, x)),
        ("prefix sum (B*C, T): torch.cumsum", fb(lambda: torch.cumsum(x, -1), gx, x)),
    ]


def main():
    args = interleaved_args(__doc__)
    torch_tk.kernel(CUMSUM + wkv_auto(), file="bench/backward_auto_scan.py")
    torch_tk.load(os.path.join(ROOT, "examples", "specs", "wkv.tk"))
    # the derived gradients equal the written ones (float64) before anything is timed
    gen = torch.Generator().manual_seed(0)
    w = (-torch.exp(torch.randn(8, generator=gen, dtype=torch.float64))).requires_grad_()
    u, k, v = (torch.randn(*s, generator=gen, dtype=torch.float64).requires_grad_() for s in ((8,), (2, 40, 8), (2, 40, 8)))
    g = torch.randn(2, 40, 8, generator=gen, dtype=torch.float64)
    for a, b in zip(torch.autograd.grad(torch.ops.tk.bsc_wkv(w, u, k, v), (w, u, k, v), g),
                    torch.autograd.grad(torch.ops.tk.wkv(w, u, k, v), (w, u, k, v), g)):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)
    print_interleaved(__file__, args, "float32, forward + backward", SHAPES, cases)


if __name__ == "__main__":
    main()
