"""Derived backward ops of row loops (`backward auto`, docs/autograd.md, Row
loops) side by side with the written ones and torch, in one run.

Forward + backward (torch.autograd.grad) of: layer norm (gradients of x,
weight and bias), RMS norm (x, weight) and softmax (x), each as
examples/specs/layernorm.tk and softmax.tk write it (their backward ops
written by hand), the same forward with `backward auto`, and torch's own
(F.layer_norm, F.rms_norm, torch.softmax). The cases interleave, --rounds
times, and the table gives each case's median of its round medians.
float32, CPU.

    PYTHONPATH=python TK_LIBRARY=build/libtk.so python3 bench/backward_auto_rows.py [--rounds 5] [--repeat 15]
"""
import os

import torch
import torch.nn.functional as F

import torch_tk
from timing import interleaved_args, print_interleaved   # bench/timing.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = [(4096, 1024), (256, 128)]
AUTO = """
op bra_layernorm(x: float[R, N], weight: x.dtype[N]? = 1, bias: x.dtype[N]? = 0, eps: float = 1e-5)
        -> y: x.dtype[R, N]:
    backward auto
    for r, _ in y:
        mean = 0.0
        for i in range(N):
            mean += x[r, i]
        mean = mean / float(N)
        var = 0.0
        for i in range(N):
            d = x[r, i] - mean
            var += d * d
        rstd = 1.0 / sqrt(var / float(N) + eps)
        for i in range(N):
            y[r, i] = (x[r, i] - mean) * rstd * weight[i] + bias[i]

op bra_rmsnorm(x: float[R, N], weight: x.dtype[N]? = 1, eps: float = 1e-6) -> y: x.dtype[R, N]:
    backward auto
    for r, _ in y:
        ms = 0.0
        for i in range(N):
            ms += x[r, i] * x[r, i]
        rr = 1.0 / sqrt(ms / float(N) + eps)
        for i in range(N):
            y[r, i] = x[r, i] * rr * weight[i]

op bra_softmax(x: float[..., N]) -> y: x.dtype[..., N]:
    backward auto
    for _ in y:
        m = -inf
        for i in range(N):
            m = max(m, x[i])
        s = 0.0
        for i in range(N):
            s += exp(x[i] - m)
        r = 1.0 / s
        for i in range(N):
            y[i] = exp(x[i] - m) * r
"""


def cases(R, N):
    """(name, fn) of every case at (R, N): each a forward and its backward."""
    tk = torch.ops.tk
    gen = torch.Generator().manual_seed(R * N)
    x = torch.randn(R, N, generator=gen).requires_grad_()
    w = torch.randn(N, generator=gen).requires_grad_()
    b = torch.randn(N, generator=gen).requires_grad_()
    g = torch.randn(R, N, generator=gen)

    def fb(fn, *leaves):
        return lambda: torch.autograd.grad(fn(), leaves, g)

    return [
        ("layernorm (x, w, b): tk, backward auto", fb(lambda: tk.bra_layernorm(x, w, b, 1e-5), x, w, b)),
        ("layernorm (x, w, b): tk, backward by hand", fb(lambda: tk.layernorm(x, w, b, 1e-5), x, w, b)),
        ("layernorm (x, w, b): F.layer_norm", fb(lambda: F.layer_norm(x, (N,), w, b, 1e-5), x, w, b)),
        ("rmsnorm (x, w): tk, backward auto", fb(lambda: tk.bra_rmsnorm(x, w, 1e-6), x, w)),
        ("rmsnorm (x, w): tk, backward by hand", fb(lambda: tk.rmsnorm(x, w, 1e-6), x, w)),
        ("rmsnorm (x, w): F.rms_norm", fb(lambda: F.rms_norm(x, (N,), w, 1e-6), x, w)),
        ("softmax (x): tk, backward auto", fb(lambda: tk.bra_softmax(x), x)),
        ("softmax (x): tk, backward by hand", fb(lambda: tk.softmax(x), x)),
        ("softmax (x): torch.softmax", fb(lambda: torch.softmax(x, -1), x)),
    ]


def main():
    args = interleaved_args(__doc__)
    torch_tk.kernel(AUTO, file="bench/backward_auto_rows.py")
    for spec in ("examples/specs/layernorm.tk", "examples/specs/softmax.tk"):
        torch_tk.load(os.path.join(ROOT, spec))
    print_interleaved(__file__, args, "float32, forward + backward", SHAPES, cases)


if __name__ == "__main__":
    main()
