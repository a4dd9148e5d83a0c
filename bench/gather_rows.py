"""A gather in a row loop (docs/spec.md, Bounds: reads of a gather), side by side.

Cross-entropy as a user writes it (`loss = lse - logits[n, target[n]]`,
the read at the target index checked at run time) against
F.cross_entropy(reduction='none'), float32, forward only. The libtk of each
--lib (say the one before a change and the one after) runs in its own child
process; the children alternate (--rounds of each) and the table gives the
median of every child's median (ms).

    PYTHONPATH=python python3 bench/gather_rows.py --lib OLD/libtk.so --lib build/libtk.so [--rounds 3]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys

from timing import median_ms   # bench/timing.py

SHAPES = [(4096, 1000), (512, 32000), (65536, 32)]
XENT = """
op bench_xent(logits: float[N, V], target: int64[N]) -> loss: logits.dtype[N, 1]:
    for n, _ in loss:
        m = -1e38
        for j in range(V):
            m = max(m, logits[n, j])
        s = 0.0
        for j in range(V):
            s += exp(logits[n, j] - m)
        loss[n, 0] = m + log(s) - logits[n, target[n]]
"""


def child(repeat: int) -> dict:
    import torch
    import torch.nn.functional as F
    import torch_tk
    torch_tk.kernel(XENT, file="bench_xent.tk")
    out = {}
    g = torch.Generator().manual_seed(0)
    for N, V in SHAPES:
        x = torch.randn(N, V, generator=g)
        t = torch.randint(0, V, (N,), generator=g)
        got = torch.ops.tk.bench_xent(x, t)[:, 0]
        torch.testing.assert_close(got, F.cross_entropy(x, t, reduction="none"), rtol=1e-4, atol=1e-4)
        out[f"{N}x{V} tk"] = median_ms(lambda: torch.ops.tk.bench_xent(x, t), repeat)
        out[f"{N}x{V} torch"] = median_ms(lambda: F.cross_entropy(x, t, reduction="none"), repeat)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", action="append", required=True, help="a libtk.so (give two or more)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.repeat)))
        return
    runs = {lib: [] for lib in args.lib}
    for _ in range(args.rounds):
        for lib in args.lib:
            env = dict(os.environ, TK_LIBRARY=lib)
            r = subprocess.run([sys.executable, __file__, "--child", "--repeat", str(args.repeat), "--lib", lib],
                               env=env, capture_output=True, text=True, check=True)
            runs[lib].append(json.loads(r.stdout.strip().splitlines()[-1]))
    print(f"# {' '.join(sys.argv)}\n# {platform.node()} {os.cpu_count()} CPUs, {args.rounds} rounds x "
          f"{args.repeat} calls, medians of child medians (ms)")
    keys = list(runs[args.lib[0]][0])
    print("| case | " + " | ".join(args.lib) + " |")
    print("|---|" + "---|" * len(args.lib))
    for k in keys:
        print(f"| {k} | " + " | ".join(f"{statistics.median(r[k] for r in runs[lib]):.2f}" for lib in args.lib) + " |")


if __name__ == "__main__":
    main()
