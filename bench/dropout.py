"""Dropout with rand(seed, n) (examples/specs/dropout.tk) against torch, side
by side in one process, CPU.

Cases, float32, shape (B, T, C): dropout forward; forward + backward
(autograd, a gradient of ones); the fused bias-dropout-add of a transformer
block's residual branch, forward and forward + backward, against torch's
x + F.dropout(h + bias). Each case alternates tk and torch --rounds times
(median of each round's median) and prints the ratio, and the bytes each
forward keeps for the backward (tk: none, the mask is redrawn from the
seed; torch: the saved mask).

    PYTHONPATH=python python3 bench/dropout.py [--shape 16 512 1024] [--rounds 3] [--repeat 9]
"""
import argparse
import os
import platform
import statistics

import torch
import torch.nn.functional as F

import torch_tk
from timing import median_ms   # bench/timing.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def saved_bytes(fn) -> int:
    """Bytes of the tensors autograd saves for fn()'s backward (inputs that
    require grad excluded: both sides keep those)."""
    seen = []

    def pack(t):
        seen.append(t)
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(t.numel() * t.element_size() for t in seen if not t.requires_grad)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", type=int, nargs=3, default=[16, 512, 1024])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--p", type=float, default=0.1)
    args = ap.parse_args()
    torch_tk.load(os.path.join(ROOT, "examples", "specs", "dropout.tk"))
    tk = torch.ops.tk
    g = torch.Generator().manual_seed(0)
    B, T, C = args.shape
    p = args.p
    x = torch.randn(B, T, C, generator=g, requires_grad=True)
    h = torch.randn(B, T, C, generator=g, requires_grad=True)
    bias = torch.randn(C, generator=g, requires_grad=True)
    ones = torch.ones(B, T, C)
    seed = 12345
    y = tk.dropout(x, p, seed)
    kept = (y != 0).float().mean().item()
    assert abs(kept - (1 - p)) < 0.01, kept

    def backward(f):
        return lambda: f().backward(ones)

    cases = {
        "dropout forward": (lambda: tk.dropout(x.detach(), p, seed), lambda: F.dropout(x.detach(), p, True)),
        "dropout forward + backward": (backward(lambda: tk.dropout(x, p, seed)), backward(lambda: F.dropout(x, p, True))),
        "bias_dropout_add forward": (lambda: tk.bias_dropout_add(h.detach(), bias.detach(), x.detach(), p, seed),
                                     lambda: x.detach() + F.dropout(h.detach() + bias.detach(), p, True)),
        "bias_dropout_add forward + backward": (backward(lambda: tk.bias_dropout_add(h, bias, x, p, seed)),
                                                backward(lambda: x + F.dropout(h + bias, p, True))),
    }
    saved = {"dropout": (saved_bytes(lambda: tk.dropout(x, p, seed)), saved_bytes(lambda: F.dropout(x, p, True))),
             "bias_dropout_add": (saved_bytes(lambda: tk.bias_dropout_add(h, bias, x, p, seed)),
                                  saved_bytes(lambda: x + F.dropout(h + bias, p, True)))}
    print(f"# PYTHONPATH=python python3 bench/dropout.py --shape {B} {T} {C} --rounds {args.rounds} "
          f"--repeat {args.repeat} --p {p}")
    print(f"# {platform.node()} {os.cpu_count()} CPUs, torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"float32 ({B}, {T}, {C}), medians of {args.rounds} rounds of {args.repeat} calls (ms)")
    print("| case | tk | torch | torch / tk |")
    print("|---|---|---|---|")
    for name, (a, b) in cases.items():
        ta, tb = [], []
        for _ in range(args.rounds):
            ta.append(median_ms(a, args.repeat))
            tb.append(median_ms(b, args.repeat))
        ma, mb = statistics.median(ta), statistics.median(tb)
        print(f"| {name} | {ma:.2f} | {mb:.2f} | {mb / ma:.2f} |")
    for name, (a, b) in saved.items():
        print(f"# {name}: saved for the backward (MiB) tk {a / 2**20:.1f}, torch {b / 2**20:.1f}")


if __name__ == "__main__":
    main()
