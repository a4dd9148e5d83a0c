"""Output cache and huge pages: per-call times of tk ops, in fresh processes.

    PYTHONPATH=python TK_LIBRARY=build/libtk.so python3 bench/page_faults.py [--calls N]

For each setting of TK_CPU_CACHE_MB (0: no output cache, each output is
fresh memory; default: freed outputs' blocks are reused), of TK_HUGEPAGES
(default, 1) and each pause between calls (0, 0.2 s, 3 s), a new process
makes N calls of brick_pad at the seed configuration (136 MB output) and
prints every call's time. With no pause
it also times rwkv_forward (B=32, C=768, T=768, 75 MB output). A fresh
process per case: the setting is read once per process, and the first
huge-page faults of a process are the ones that differ (bench/LOG.md,
"Huge pages"). Prints one table; takes about a minute.
"""
import argparse
import os
import statistics
import subprocess
import sys

CHILD = r"""
import sys, time, torch, torch_tk
from torch_tk import reference as ref
op, calls, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
s, r = ref.SEED, ref.RWKV_SEED
tile = ref.seed_tile("cpu")
w, k = torch.randn(r.C, r.T), torch.randn(r.B, r.C, r.T)
fn = (lambda: torch.ops.tk.brick_pad(tile, s.pw, s.ph, s.stagger)) if op == "brick_pad" else \
     (lambda: torch.ops.tk.rwkv_forward(w, k, r.eps))
times = []
for _ in range(calls):
    t0 = time.perf_counter()
    out = fn()
    times.append((time.perf_counter() - t0) * 1e3)
    del out
    time.sleep(pause)
print(" ".join(f"{t:.1f}" for t in times))
"""


def run(op, calls, pause, huge, cache):
    env = dict(os.environ)
    env.pop("TK_HUGEPAGES", None)
    env.pop("TK_CPU_CACHE_MB", None)
    if huge:
        env["TK_HUGEPAGES"] = "1"
    if not cache:
        env["TK_CPU_CACHE_MB"] = "0"
    out = subprocess.run([sys.executable, "-c", CHILD, op, str(calls), str(pause)], env=env,
                         capture_output=True, text=True, check=True).stdout
    return [float(x) for x in out.split()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=8)
    args = ap.parse_args()
    cases = [("brick_pad", 0.0), ("brick_pad", 0.2), ("brick_pad", 3.0), ("rwkv_forward", 0.0)]
    print(f"{'op':13s} {'pause':>6s} {'TK_CPU_CACHE_MB':>15s} {'TK_HUGEPAGES':>12s} {'median':>8s}  every call (ms)")
    for op, pause in cases:
        for cache in (False, True):
            for huge in (False, True):
                t = run(op, args.calls, pause, huge, cache)
                print(f"{op:13s} {pause:5.1f}s {'unset' if cache else '0':>15s} {'1' if huge else 'unset':>12s} "
                      f"{statistics.median(t):8.1f}  " + " ".join(f"{x:.0f}" for x in t))
    return 0


if __name__ == "__main__":
    sys.exit(main())
