"""The built-in rwkv kernels' narrow body side by side (issue 26): the body
that strided calls take on AVX2 / AVX-512 CPUs, and every call on CPUs
without AVX2. Times tk.rwkv_forward and its autograd backward (forward
included) at the bench's shape (B=32 C=768 T=768 float32), median of
--repeat calls, in three ways: contiguous (the vector bodies), contiguous
with TK_CPU_NARROW=baseline (the narrow body), and k strided (every other
element along t: the narrow body). Each way runs in a child process per
library given, alternated, so two builds compare in one run:

    PYTHONPATH=python python3 bench/narrow_rows.py --lib A.so --lib B.so [--rounds 2] [--ways narrow,strided]
        [--batch 4] [--min]

--batch sets B (default 32); --min reports the fastest of the --repeat
calls instead of the median (on a noisy machine the less disturbed figure).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, sys, time, torch, torch_tk
way, repeat, B, pick = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
g = torch.Generator().manual_seed(0)
C, T = 768, 768
w, k = torch.randn(C, T, generator=g), torch.randn(B, C, T, generator=g)
if way == "strided":
    ks = torch.empty(B, C, 2 * T)[..., ::2]
    ks.copy_(k)
    k = ks
def median_ms(f):
    f()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
    return (min(ts) if pick == "min" else sorted(ts)[repeat // 2]) * 1e3
fwd = median_ms(lambda: torch.ops.tk.rwkv_forward(w, k, 0.1))
wg, kg = w.clone().requires_grad_(), k.clone().requires_grad_()
gy = torch.randn(B, C, T, generator=g)
def both():
    wg.grad = kg.grad = None
    torch.ops.tk.rwkv_forward(wg, kg, 0.1).backward(gy)
print(json.dumps({"forward_ms": fwd, "fwd_bwd_ms": median_ms(both)}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", action="append", required=True, help="a libtk.so (give two to compare)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2, help="alternations of the libraries")
    ap.add_argument("--ways", default="contiguous,narrow,strided", help="which of the three ways to time")
    ap.add_argument("--batch", type=int, default=32, help="B (C = T = 768)")
    ap.add_argument("--min", action="store_true", help="the fastest call instead of the median")
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs); B={args.batch} C=768 T=768, "
          f"{'fastest' if args.min else 'median'} of {args.repeat} calls")
    rows = []
    for rnd in range(args.rounds):
        for way in args.ways.split(","):
            for lib in args.lib:
                env = dict(os.environ, TK_LIBRARY=lib)
                if way == "narrow":
                    env["TK_CPU_NARROW"] = "baseline"
                r = subprocess.run([sys.executable, "-c", CHILD, "strided" if way == "strided" else "contiguous",
                                    str(args.repeat), str(args.batch), "min" if args.min else "median"],
                                   capture_output=True, text=True, env=env, timeout=1800)
                if r.returncode != 0:
                    raise SystemExit(r.stderr[-4000:])
                got = json.loads(r.stdout.strip().splitlines()[-1])
                rows.append((rnd, way, lib, got))
                print(f"round {rnd + 1} {way:<10} {lib:<48} forward {got['forward_ms']:8.1f} ms   "
                      f"forward+backward {got['fwd_bwd_ms']:8.1f} ms", flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
