"""Optimizer steps that update in place (examples/specs/optim.tk) against
torch.optim, side by side in one process, CPU.

Cases, float32 parameters with float32 state: one step of AdamW over
(a) one flat parameter of --numel elements and (b) a model-like list of
parameters (a transformer's: --layers blocks of d x 4d, 4d x d, d x 3d,
d x d weights with their biases and norms, d = --dim). tk runs adamw_ once
per parameter; torch runs torch.optim.AdamW(foreach=False), (foreach=True)
and (fused=True) on copies of the same parameters and gradients. Each case
alternates tk and torch --rounds times (median of each round's median) and
prints ms per step and torch / tk. The bytes each step must move: p, g, m, v
read and p, m, v written, 28 bytes a float32 element. Then Lion (lion_
against the lion-pytorch update in torch ops: 20 bytes an element) and an
EMA of weights (ema_ against torch's lerp_: 12 bytes) on the flat parameter.

    PYTHONPATH=python python3 bench/optim.py [--numel 16777216] [--dim 512] [--layers 8] [--rounds 3] [--repeat 9]
"""
import argparse
import os
import platform
import statistics

import torch

import torch_tk
from timing import median_ms   # bench/timing.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LR, BETAS, EPS, WD = 1e-3, (0.9, 0.999), 1e-8, 0.01


def model_shapes(d: int, layers: int) -> list:
    shapes = []
    for _ in range(layers):
        shapes += [(3 * d, d), (3 * d,), (d, d), (d,), (4 * d, d), (4 * d,), (d, 4 * d), (d,), (d,), (d,), (d,), (d,)]
    return shapes


def tk_stepper(params, grads):
    state = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
    count = [0]

    @torch.no_grad()
    def step():
        count[0] += 1
        for p, g, (m, v) in zip(params, grads, state):
            torch.ops.tk.adamw_(p, g, m, v, LR, BETAS[0], BETAS[1], EPS, WD, count[0])
    return step


def torch_stepper(params, grads, **kind):
    ps = [torch.nn.Parameter(p.detach().clone()) for p in params]
    for p, g in zip(ps, grads):
        p.grad = g.clone()
    opt = torch.optim.AdamW(ps, lr=LR, betas=BETAS, eps=EPS, weight_decay=WD, **kind)
    return opt.step


def lion_rows(numel: int, rounds: int, repeat: int) -> list:
    """Lion and an EMA of weights on one flat parameter: tk's ops against
    the torch code they replace (the lion-pytorch update; torch.lerp_)."""
    gen = torch.Generator().manual_seed(1)
    p, g, m = (torch.randn(numel, generator=gen) for _ in range(3))
    lr, b1, b2, wd = 1e-4, 0.9, 0.99, 0.1
    tp, tm, e, te = p.clone(), m.clone(), p.clone(), p.clone()

    @torch.no_grad()
    def torch_lion():
        tp.mul_(1 - lr * wd)
        update = tm.clone().mul_(b1).add_(g, alpha=1 - b1).sign_()
        tp.add_(update, alpha=-lr)
        tm.mul_(b2).add_(g, alpha=1 - b2)

    cases = {"lion": (lambda: torch.ops.tk.lion_(p, g, m, lr, b1, b2, wd), torch_lion, 20),
             "ema": (lambda: torch.ops.tk.ema_(e, g, 0.999), lambda: te.lerp_(g, 1 - 0.999), 12)}
    out = []
    for name, (tk_fn, torch_fn, nbytes) in cases.items():
        times = {"tk": [], "torch": []}
        for _ in range(rounds):
            times["tk"].append(median_ms(tk_fn, repeat))
            times["torch"].append(median_ms(torch_fn, repeat))
        a, b = statistics.median(times["tk"]), statistics.median(times["torch"])
        out.append(f"| {name} | {numel} | {a:.2f} | {b:.2f} ({b / a:.1f}x) | {nbytes * numel / (a * 1e-3) / 1e9:.1f} |")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--numel", type=int, default=1 << 24)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    torch_tk.load(os.path.join(ROOT, "examples", "specs", "optim.tk"))
    print(f"# {' '.join(['bench/optim.py'] + [a for a in os.sys.argv[1:]])}")
    print(f"# {platform.node()} {os.cpu_count()} CPUs, torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"float32, medians over {args.rounds} rounds of {args.repeat} steps (ms per step)")
    cases = {"flat": [(args.numel,)], "model": model_shapes(args.dim, args.layers)}
    kinds = {"torch foreach=False": dict(foreach=False), "torch foreach=True": dict(foreach=True),
             "torch fused=True": dict(fused=True)}
    print("| case | params | elements | tk adamw_ | " + " | ".join(kinds) + " | tk GB/s |")
    print("|---|---|---|---|" + "---|" * len(kinds) + "---|")
    for name, shapes in cases.items():
        gen = torch.Generator().manual_seed(0)
        params = [torch.randn(s, generator=gen) for s in shapes]
        grads = [torch.randn(s, generator=gen) for s in shapes]
        steppers = {"tk": tk_stepper([p.clone() for p in params], grads)}
        steppers.update({k: torch_stepper(params, grads, **kw) for k, kw in kinds.items()})
        times = {k: [] for k in steppers}
        for _ in range(args.rounds):
            for k, fn in steppers.items():
                times[k].append(median_ms(fn, args.repeat))
        med = {k: statistics.median(v) for k, v in times.items()}
        numel = sum(p.numel() for p in params)
        gbs = 28 * numel / (med["tk"] * 1e-3) / 1e9
        print(f"| {name} | {len(params)} | {numel} | {med['tk']:.2f} | "
              + " | ".join(f"{med[k]:.2f} ({med[k] / med['tk']:.1f}x)" for k in kinds) + f" | {gbs:.1f} |")
    print("\n| step | elements | tk | torch | tk GB/s |\n|---|---|---|---|---|")
    for line in lion_rows(args.numel, args.rounds, args.repeat):
        print(line)


if __name__ == "__main__":
    main()
