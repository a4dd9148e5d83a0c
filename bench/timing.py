"""What the bench/ scripts time calls with, and run libraries side by side with."""
import json
import os
import platform
import statistics
import subprocess
import sys
import time


def median_ms(fn, repeat: int) -> float:
    """The median of repeat timed calls of fn, in ms, after 0.3 s of warm-up."""
    end = time.perf_counter() + 0.3
    while time.perf_counter() < end:
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def alternate_libs(script: str, libs: list, rounds: int, child_args: list) -> dict:
    """Runs `script --child CHILD_ARGS` once per round and libtk (TK_LIBRARY),
    the libraries alternating; each child prints one JSON object of case ->
    ms last. Returns lib -> the list of those objects, one per round."""
    runs = {lib: [] for lib in libs}
    for _ in range(rounds):
        for lib in libs:
            env = dict(os.environ, TK_LIBRARY=lib)
            r = subprocess.run([sys.executable, script, "--child", *child_args, "--lib", lib],
                               env=env, capture_output=True, text=True, check=True)
            runs[lib].append(json.loads(r.stdout.strip().splitlines()[-1]))
    return runs


def print_lib_table(runs: dict, libs: list, what: str) -> None:
    """The command line, the machine and `what`, then a markdown table of
    every case's median over the rounds, one column per libtk (ms)."""
    print(f"# {' '.join(sys.argv)}\n# {platform.node()} {os.cpu_count()} CPUs, {what}, medians of child medians (ms)")
    print("| case | " + " | ".join(libs) + " |")
    print("|---|" + "---|" * len(libs))
    for k in runs[libs[0]][0]:
        print(f"| {k} | " + " | ".join(f"{statistics.median(r[k] for r in runs[lib]):.2f}" for lib in libs) + " |")
