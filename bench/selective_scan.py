"""Mamba's selective scan (examples/specs/selective_scan.tk) against mamba_ssm's
reference formulation in torch (selective_scan_ref: a loop over t, autograd
for the backward; torch_tk.reference.selective_scan_loop), side by side in
one process, CPU, float32.

For each shape (batch, E channels, L steps, N state) it times the forward
and forward + backward (gradients of u, delta, A, B, C and D) of both,
alternating tk and torch --rounds times (median of each round's median of
--repeat calls for tk, of one call for torch, whose backward takes seconds),
and prints ms per call and torch / tk.

    PYTHONPATH=python python3 bench/selective_scan.py [--rounds 3] [--repeat 5]
"""
import argparse
import os
import platform
import statistics

import torch

import torch_tk
from timing import median_ms   # bench/timing.py
from torch_tk import reference as ref

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = [(2, 768, 256, 16), (1, 1536, 512, 16), (8, 128, 128, 16)]


def inputs(b, e, l, n):
    g = torch.Generator().manual_seed(0)
    u, delta = torch.randn(b, e, l, generator=g), torch.rand(b, e, l, generator=g) * 0.1
    A = -torch.rand(e, n, generator=g) * 4
    B, C, D = torch.randn(b, n, l, generator=g), torch.randn(b, n, l, generator=g), torch.randn(e, generator=g)
    return [t.requires_grad_() for t in (u, delta, A, B, C, D)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    torch_tk.load(os.path.join(ROOT, "examples", "specs", "selective_scan.tk"))
    tk = torch.ops.tk.selective_scan
    print(f"# {' '.join(['bench/selective_scan.py'] + os.sys.argv[1:])}")
    print(f"# {platform.node()} {os.cpu_count()} CPUs, torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"float32, medians over {args.rounds} rounds of {args.repeat} calls (torch: 1) (ms per call)")
    print("| batch x E x L x N | tk fwd | torch fwd | tk fwd+bwd | torch fwd+bwd | max rel err y / grads |")
    print("|---|---|---|---|---|---|")
    for shape in SHAPES:
        a = inputs(*shape)
        gy = torch.randn(shape[0], shape[1], shape[2])
        y, yr = tk(*a)[0], ref.selective_scan_loop(*a)[0]
        err = ((y - yr).abs().max() / yr.abs().max()).item()
        gt, gr = torch.autograd.grad(y, a, gy), torch.autograd.grad(yr, a, gy)
        gerr = max(((p - q).abs().max() / q.abs().max()).item() for p, q in zip(gt, gr))

        def fwd(f):
            def run():
                with torch.no_grad():
                    f(*a)
            return run

        def both(f):
            return lambda: torch.autograd.grad(f(*a)[0], a, gy)

        cases = {"tk fwd": fwd(tk), "torch fwd": fwd(ref.selective_scan_loop),
                 "tk both": both(tk), "torch both": both(ref.selective_scan_loop)}
        times = {k: [] for k in cases}
        for _ in range(args.rounds):
            for k, fn in cases.items():
                times[k].append(median_ms(fn, args.repeat if k.startswith("tk") else 1))
        m = {k: statistics.median(v) for k, v in times.items()}
        print(f"| {' x '.join(map(str, shape))} | {m['tk fwd']:.1f} | {m['torch fwd']:.1f} "
              f"({m['torch fwd'] / m['tk fwd']:.0f}x) | {m['tk both']:.1f} | {m['torch both']:.1f} "
              f"({m['torch both'] / m['tk both']:.0f}x) | {err:.1e} / {gerr:.1e} |", flush=True)


if __name__ == "__main__":
    main()
