"""Derived backward ops (`backward auto`, docs/autograd.md) side by side in one run.

Forward + backward (torch.autograd.grad) of: SiLU and GELU with their
backward derived, the same ops with the backward written by hand (SiLU's is
the README's former example), and F.silu / F.gelu; dropout derived (tests/specs/autodiff.tk) and written
(examples/specs/dropout.tk) and F.dropout; examples/specs/activations.tk's
gelu, bias_gelu and swiglu against their torch formulas. The cases
interleave, --rounds times, and the table gives each case's median of its
round medians. float32, CPU.

    PYTHONPATH=python TK_LIBRARY=build/libtk.so python3 bench/backward_auto.py [--rounds 5] [--repeat 15]
"""
import os

import torch
import torch.nn.functional as F

import torch_tk
from timing import interleaved_args, print_interleaved   # bench/timing.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = [(4096, 1024), (64, 128)]
SILU = """
op bsilu_auto(x: float[..., N]) -> y: x.dtype[..., N]:
    backward auto
    for i in y:
        y[i] = x[i] * sigmoid(x[i])
op bsilu_hand(x: float[..., N]) -> y: x.dtype[..., N]:
    backward bsilu_hand_grad
    for i in y:
        y[i] = x[i] * sigmoid(x[i])
op bsilu_hand_grad(x: float[..., N], grad_y: x.dtype[..., N]) -> grad_x: x.dtype[..., N]:
    for i in grad_x:
        grad_x[i] = grad_y[i] * sigmoid(x[i]) * (1.0 + x[i] * (1.0 - sigmoid(x[i])))
op bgelu_hand(x: float[..., N]) -> y: x.dtype[..., N]:
    backward bgelu_hand_grad
    for i in y:
        v = x[i]
        y[i] = 0.5 * v * (1.0 + erf(v * 0.7071067811865476))
op bgelu_hand_grad(x: float[..., N], grad_y: x.dtype[..., N]) -> grad_x: x.dtype[..., N]:
    for i in grad_x:
        v = x[i]
        grad_x[i] = grad_y[i] * (0.5 * (1.0 + erf(v * 0.7071067811865476)) + v * 0.3989422804014327 * exp(-0.5 * v * v))
"""


def cases(R, N):
    """(name, fn) of every case at (R, N): each a forward and its backward."""
    tk = torch.ops.tk
    gen = torch.Generator().manual_seed(R * N)
    x = torch.randn(R, N, generator=gen).requires_grad_()
    b = torch.randn(R, N, generator=gen).requires_grad_()
    bias = torch.randn(N, generator=gen).requires_grad_()
    g = torch.randn(R, N, generator=gen)

    def fb(fn, *leaves):
        return lambda: torch.autograd.grad(fn(), leaves, g)

    return [
        ("silu: tk, backward auto", fb(lambda: tk.bsilu_auto(x), x)),
        ("silu: tk, backward by hand", fb(lambda: tk.bsilu_hand(x), x)),
        ("silu: F.silu", fb(lambda: F.silu(x), x)),
        ("dropout p=0.1: tk, backward auto", fb(lambda: tk.ad_dropout(x, 0.1, 5), x)),
        ("dropout p=0.1: tk, backward by hand", fb(lambda: tk.dropout(x, 0.1, 5), x)),
        ("dropout p=0.1: F.dropout", fb(lambda: F.dropout(x, 0.1), x)),
        ("gelu: tk, backward auto", fb(lambda: tk.gelu(x), x)),
        ("gelu: tk, backward by hand", fb(lambda: tk.bgelu_hand(x), x)),
        ("gelu: F.gelu", fb(lambda: F.gelu(x), x)),
        ("bias_gelu (grad x, bias): tk, backward auto", fb(lambda: tk.bias_gelu(x, bias), x, bias)),
        ("bias_gelu (grad x, bias): F.gelu(x + bias)", fb(lambda: F.gelu(x + bias), x, bias)),
        ("swiglu (grad a, b): tk, backward auto", fb(lambda: tk.swiglu(x, b), x, b)),
        ("swiglu (grad a, b): F.silu(a) * b", fb(lambda: F.silu(x) * b, x, b)),
    ]


def main():
    args = interleaved_args(__doc__)
    torch_tk.kernel(SILU, file="bench/backward_auto.py")
    for spec in ("tests/specs/autodiff.tk", "examples/specs/dropout.tk", "examples/specs/activations.tk"):
        torch_tk.load(os.path.join(ROOT, spec))
    print_interleaved(__file__, args, "float32, forward + backward", SHAPES, cases)


if __name__ == "__main__":
    main()
