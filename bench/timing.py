"""What the bench/ scripts time calls with, and run libraries side by side with."""
import argparse
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


def alternate_runs(script: str, configs: dict, rounds: int, child_args: list) -> dict:
    """Runs `script --child CHILD_ARGS EXTRA_ARGS` once per round and
    configuration (name -> (environment variables over this process's,
    extra arguments)), the configurations alternating; each child prints one
    JSON object of case -> ms last. Returns name -> the list of those
    objects, one per round."""
    runs = {name: [] for name in configs}
    for _ in range(rounds):
        for name, (env, extra) in configs.items():
            r = subprocess.run([sys.executable, script, "--child", *child_args, *extra],
                               env=dict(os.environ, **env), capture_output=True, text=True, check=True)
            runs[name].append(json.loads(r.stdout.strip().splitlines()[-1]))
    return runs


def alternate_libs(script: str, libs: list, rounds: int, child_args: list) -> dict:
    """alternate_runs with one configuration a libtk: TK_LIBRARY=lib and
    `--lib lib`. Returns lib -> the list of the children's objects."""
    return alternate_runs(script, {lib: ({"TK_LIBRARY": lib}, ["--lib", lib]) for lib in libs}, rounds, child_args)


def print_lib_table(runs: dict, libs: list, what: str) -> None:
    """The command line, the machine and `what`, then a markdown table of
    every case's median over the rounds, one column per libtk (ms)."""
    print(f"# {' '.join(sys.argv)}\n# {platform.node()} {os.cpu_count()} CPUs, {what}, medians of child medians (ms)")
    print("| case | " + " | ".join(libs) + " |")
    print("|---|" + "---|" * len(libs))
    for k in runs[libs[0]][0]:
        print(f"| {k} | " + " | ".join(f"{statistics.median(r[k] for r in runs[lib]):.2f}" for lib in libs) + " |")


def lib_main(script: str, doc: str, child, what: str = "", repeat: int = 15, threads=None) -> None:
    """The command line of a script that times child(repeat[, threads]) once
    per libtk: --lib (two or more), --rounds, --repeat, and --threads when
    threads is its default; a child prints its JSON, the parent the table of
    print_lib_table, described by the threads, `what` and the counts."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--lib", action="append", required=True, help="a libtk.so (give two or more)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=repeat)
    if threads is not None:
        ap.add_argument("--threads", type=int, default=threads)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    extra = [] if threads is None else [args.threads]
    if args.child:
        print(json.dumps(child(args.repeat, *extra)))
        return
    child_args = ["--repeat", str(args.repeat)] + ([] if threads is None else ["--threads", str(args.threads)])
    runs = alternate_libs(script, args.lib, args.rounds, child_args)
    head = "" if threads is None else f"{args.threads} thread(s), "
    print_lib_table(runs, args.lib, f"{head}{what}{args.rounds} rounds x {args.repeat} calls")


def interleaved_args(doc: str) -> argparse.Namespace:
    """--rounds (5) and --repeat (15) of a script that times cases interleaved."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=15)
    return ap.parse_args()


def print_interleaved(script: str, args: argparse.Namespace, what: str, shapes, cases) -> None:
    """The command and machine lines, then per shape (R, N) (any tuple) a
    markdown table of every case of cases(*shape) (a list of (name, fn)) with the median of
    its round medians: each of args.rounds rounds times every case once, in
    order (median_ms of args.repeat calls), so the machine's drift reaches
    all cases alike."""
    import torch

    print(f"command: PYTHONPATH=python TK_LIBRARY=... python3 bench/{os.path.basename(script)} "
          f"--rounds {args.rounds} --repeat {args.repeat}")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; {what}, ms (median of {args.rounds} round medians)")
    for shape in shapes:   # (R, N), or any tuple cases takes
        cs = cases(*shape)
        runs = {name: [] for name, _ in cs}
        for _ in range(args.rounds):
            for name, fn in cs:
                runs[name].append(median_ms(fn, args.repeat))
        print(f"\n| {tuple(shape)} | ms |\n|---|---:|")
        for name, _ in cs:
            print(f"| {name} | {statistics.median(runs[name]):.4f} |")
        sys.stdout.flush()
