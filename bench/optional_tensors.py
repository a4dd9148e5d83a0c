"""Optional tensors passed as None (docs/spec.md, Optional tensors), side by side in one run.

examples/specs/layernorm.tk's layernorm and rmsnorm with weight and bias
None (each reads one row of its default, stride 0 over the rows) against the
same calls with tensors of ones and zeros, and F.layer_norm /
the composite RMS norm with None; forward only, and forward + backward of x
(and of the given tensors). The cases interleave, --rounds times, and the
table gives each case's median of its round medians. float32, CPU.

    PYTHONPATH=python TK_LIBRARY=build/libtk.so python3 bench/optional_tensors.py [--rounds 5] [--repeat 15]
"""
import os

import torch
import torch.nn.functional as F

import torch_tk
from timing import interleaved_args, print_interleaved   # bench/timing.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = [(4096, 1024), (16384, 64), (64, 128)]


def cases(R, N):
    """(name, fn) of every case at (R, N)."""
    tk = torch.ops.tk
    gen = torch.Generator().manual_seed(R * N)
    x = torch.randn(R, N, generator=gen)
    xg = x.clone().requires_grad_()
    g = torch.randn(R, N, generator=gen)
    ones, zeros = torch.ones(N), torch.zeros(N)
    onesg, zerosg = ones.clone().requires_grad_(), zeros.clone().requires_grad_()

    def rms(x, w=None):
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        return y if w is None else y * w

    def fb(fn, *leaves):
        return lambda: torch.autograd.grad(fn(), leaves, g)

    return [
        ("layernorm: tk, None", lambda: tk.layernorm(x)),
        ("layernorm: tk, ones/zeros", lambda: tk.layernorm(x, ones, zeros)),
        ("layernorm: F.layer_norm, None", lambda: F.layer_norm(x, (N,))),
        ("rmsnorm: tk, None", lambda: tk.rmsnorm(x)),
        ("rmsnorm: tk, ones", lambda: tk.rmsnorm(x, ones)),
        ("rmsnorm: composite, None", lambda: rms(x)),
        ("layernorm f+b: tk, None (grad x)", fb(lambda: tk.layernorm(xg), xg)),
        ("layernorm f+b: tk, ones/zeros (grad x, w, b)", fb(lambda: tk.layernorm(xg, onesg, zerosg), xg, onesg, zerosg)),
        ("layernorm f+b: F.layer_norm, None (grad x)", fb(lambda: F.layer_norm(xg, (N,)), xg)),
    ]


def main():
    args = interleaved_args(__doc__)
    torch_tk.load(os.path.join(ROOT, "examples", "specs", "layernorm.tk"))
    print_interleaved(__file__, args, "float32", SHAPES, cases)


if __name__ == "__main__":
    main()
