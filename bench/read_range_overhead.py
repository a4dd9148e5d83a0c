"""Per-call cost of the read-range check (compiler/reads.c, runtime/bind.c):
two ops that compute the same thing on tiny tensors, one whose read the
binder range-checks at every call (x: [M] read at the loop's i over N) and
one whose read is proven for every shape (x: [N]: nothing to check), and
torch's add beside them; interleaved --rounds times, median of the rounds'
medians (µs a call), one thread.

    PYTHONPATH=python TK_LIBRARY=build/libtk.so python3 bench/read_range_overhead.py [--rounds 7]
"""
import argparse
import statistics
import time

import torch

import torch_tk

SPEC = """
op ovh_checked(x: float[M], z: x.dtype[N]) -> y: x.dtype[N]:
    for i in y:
        y[i] = x[i] + z[i]

op ovh_proven(x: float[N], z: x.dtype[N]) -> y: x.dtype[N]:
    for i in y:
        y[i] = x[i] + z[i]
"""


def per_call_us(fn, calls=20000):
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t) / calls * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch_tk.kernel(SPEC, file="ovh.tk")
    tk = torch.ops.tk
    x, z = torch.randn(8), torch.randn(8)
    cases = {"range-checked read (tk.ovh_checked)": lambda: tk.ovh_checked(x, z),
             "proven read (tk.ovh_proven)": lambda: tk.ovh_proven(x, z),
             "torch.add": lambda: torch.add(x, z)}
    for fn in cases.values():
        per_call_us(fn, 2000)   # warm-up (compiles the kernels)
    runs = {k: [] for k in cases}
    for _ in range(args.rounds):
        for k, fn in cases.items():
            runs[k].append(per_call_us(fn))
    print(f"# bench/read_range_overhead.py --rounds {args.rounds}; torch {torch.__version__}, 1 thread, "
          f"8-element float32 tensors, median of {args.rounds} rounds of 20000 calls (µs a call)")
    for k, v in runs.items():
        print(f"| {k} | {statistics.median(v):.3f} |")


if __name__ == "__main__":
    main()
