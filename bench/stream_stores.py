"""When streaming stores pay: plain, streamed and default CPU output stores side by side.

A memory-bound op whose outputs are blocks reused from tk's output cache may
write them with streaming stores (shim/kernels.cpp, plan_stream). Each case
runs in three child processes per round, alternating: `plain`
(TK_CPU_STREAM=0), `streamed` (TK_CPU_STREAM_MB=0: every call that can
stream does) and `default` (the rule as shipped: memory-bound ops whose
outputs take a sixth of the last-level cache or more). Cases: brick_pad
into outputs of 17 to 259 MiB (a tiny input), a scale (y = a * x: reads
what it writes) at 16 to 256 MiB of output, and a GELU (erf: compute-bound,
not memory-bound, so never streamed, not even in `streamed`: the rule before
this one streamed it, bench/LOG.md has what that cost) at 64 MiB. float32, one call's median over
--repeat calls, the table the median of the rounds.

    PYTHONPATH=python TK_LIBRARY=build/libtk.so python3 bench/stream_stores.py [--rounds 3] [--repeat 11]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys

from timing import alternate_runs, median_ms   # bench/timing.py

CONFIGS = {"plain": {"TK_CPU_STREAM": "0"}, "streamed": {"TK_CPU_STREAM_MB": "0"}, "default": {}}
OPS = """
op ss_scale(x: float[..., N], a: float) -> y: x.dtype[..., N]:
    for i in y:
        y[i] = a * x[i]
op ss_gelu(x: float[..., N]) -> y: x.dtype[..., N]:
    for i in y:
        y[i] = 0.5 * x[i] * (1.0 + erf(x[i] * 0.7071067811865476))
"""


def child(repeat: int) -> None:
    """Times every case in this process's configuration; prints case -> ms as JSON."""
    import torch
    import torch_tk

    torch_tk.kernel(OPS)
    tk = torch.ops.tk
    out = {}
    tile = torch.rand(48, 32)
    for pw, ph in [(1024, 1024), (2048, 2048), (3072, 2048), (4096, 2048), (4096, 4096)]:
        mib = (48 + 2 * ph) * (32 + 2 * pw) * 4 / 2**20
        out[f"brick_pad -> {mib:.0f} MiB"] = median_ms(lambda: tk.brick_pad(tile, pw, ph, 17), repeat)
    for n in [4, 16, 32, 64]:
        x = torch.randn(n, 1024, 1024)
        out[f"scale {4 * n} MiB -> {4 * n} MiB"] = median_ms(lambda: tk.ss_scale(x, 2.0), repeat)
    x = torch.randn(16, 1024, 1024)
    out["gelu 64 MiB -> 64 MiB"] = median_ms(lambda: tk.ss_gelu(x), repeat)
    print(json.dumps(out))


def l3_mib() -> str:
    """The last-level cache's size as getconf reports it ("?" if it does not)."""
    r = subprocess.run(["getconf", "LEVEL3_CACHE_SIZE"], capture_output=True, text=True)
    return f"{int(r.stdout) >> 20} MiB" if r.returncode == 0 and r.stdout.strip().isdigit() else "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=11)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a.repeat)
    for k in ("TK_CPU_STREAM", "TK_CPU_STREAM_MB"):   # the children's settings are CONFIGS'
        os.environ.pop(k, None)
    runs = alternate_runs(os.path.abspath(__file__), {name: (env, []) for name, env in CONFIGS.items()}, a.rounds,
                          ["--repeat", str(a.repeat)])
    print(f"# {' '.join(sys.argv)}\n# {platform.node()} {os.cpu_count()} CPUs, float32, "
          f"L3 {l3_mib()} (getconf), medians of {a.rounds} rounds (ms)")
    print("| case | " + " | ".join(CONFIGS) + " |")
    print("|---|" + "---:|" * len(CONFIGS))
    for case in runs["plain"][0]:
        print(f"| {case} | " + " | ".join(f"{statistics.median(r[case] for r in runs[n]):.2f}" for n in CONFIGS)
              + " |")


if __name__ == "__main__":
    main()
