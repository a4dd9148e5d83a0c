"""Cold and warm first CPU calls of run-time specs (issue 26): how long a
script waits between torch_tk.kernel and the first result.

Each case runs in a fresh Python process (torch and torch_tk imported before
the clock starts) with TK_CACHE_DIR set to a temporary folder:

  rwkv cold    a copy of ops/rwkv_forward.tk with its three ops renamed
               (my_rwkv_*), empty cache: registration + the first float32
               call (B=2, C=8, T=16) of the forward op
  prefix cold  a six-line prefix sum (`for u in range(i + 1)`), empty cache
  ... warm     the same again in a new process, the cache now filled

Times: `register` is torch_tk.kernel, `first call` the first op call after
it, `total` both (the figure the targets are about), all wall-clock;
`cc cpu` the CPU time (user + sys) of the programs the child ran meanwhile
(the C compiler, `cc --version`), `tk cpu` the child's own (all threads):
on a loaded machine the wall-clock times grow with the load average
(printed), the CPU times much less. The child runs with
TK_DEBUG=1, whose report on stderr gives the emitted C of every compile:
`files` is how many C files were compiled, `C lines` their line count. With
--cc-time every compiled file is compiled again, alone, with the same
command, to tell the compiler's share from tk's.

--speed then times the rwkv copy itself in a new process (its kernel from
the cache): float32, B=8 C=768 T=768, median of 7 calls, contiguous (the
vector body on AVX2 / AVX-512 CPUs) and with k strided (every other element
along t: the narrow body); and contiguous with B=3, whose rows are not in
groups of 4: the vector functions of single rows (skewed lane blocks).

    PYTHONPATH=python TK_LIBRARY=build/libtk.so python3 bench/compile_time.py [--cc-time] [--speed]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PREFIX_SPEC = """\
op my_prefix(x: float[N]) -> y: x.dtype[N]:
    for i in y:
        s = 0.0
        for u in range(i + 1):
            s += x[u]
        y[i] = s
"""

# The child: registers the spec, calls the op once, checks the result
# against torch, prints the times as JSON on its last stdout line.
CHILD = r"""
import json, resource, sys, time
import torch, torch_tk
case, text = sys.argv[1], sys.stdin.read()
g = torch.Generator().manual_seed(0)
if case == "rwkv":
    B, C, T = 2, 8, 16
    w, k = torch.randn(C, T, generator=g), torch.randn(B, C, T, generator=g)
    args = (w, k, 0.25)
    want = 0.25 + torch.nn.functional.conv1d(torch.nn.functional.pad(k.double(), (T - 1, 0)),
                                             w.double().unsqueeze(1), groups=C)
else:
    x = torch.randn(1000, generator=g)
    args = (x,)
    want = torch.cumsum(x.double(), 0)
def cpu(who):
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime
c0, s0 = cpu(resource.RUSAGE_CHILDREN), cpu(resource.RUSAGE_SELF)
t0 = time.perf_counter()
op = torch_tk.kernel(text)
t1 = time.perf_counter()
got = op(*args)
t2 = time.perf_counter()
c1, s1 = cpu(resource.RUSAGE_CHILDREN), cpu(resource.RUSAGE_SELF)
err = ((got.double() - want).abs().max() / want.abs().max()).item()
assert err < 1e-4, f"{case}: relative error {err}"
print(json.dumps({"register": t1 - t0, "first_call": t2 - t1, "total": t2 - t0, "child_cpu": c1 - c0, "self_cpu": s1 - s0,
                  "rel_err": err}))
"""

# The --speed child: the rwkv copy's calls, contiguous and k strided.
SPEED_CHILD = r"""
import json, sys, time
import torch, torch_tk
op = torch_tk.kernel(sys.stdin.read())
g = torch.Generator().manual_seed(0)
B, C, T = 8, 768, 768
w, k = torch.randn(C, T, generator=g), torch.randn(B, C, T, generator=g)
ks = torch.empty(B, C, 2 * T)[..., ::2]
ks.copy_(k)
want = op(w, k, 0.25)
assert torch.allclose(op(w, ks, 0.25), want, rtol=1e-4, atol=1e-3)
def median_ms(*args):
    op(*args)
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        op(*args)
        times.append(time.perf_counter() - t0)
    return sorted(times)[3] * 1e3
k3 = torch.randn(3, C, T, generator=g)
print(json.dumps({"contiguous_ms": median_ms(w, k, 0.25), "k_strided_ms": median_ms(w, ks, 0.25),
                  "b3_contiguous_ms": median_ms(w, k3, 0.25)}))
"""


def rwkv_copy() -> str:
    """ops/rwkv_forward.tk with its ops renamed rwkv_* -> my_rwkv_*."""
    with open(os.path.join(ROOT, "ops", "rwkv_forward.tk"), encoding="utf-8") as f:
        return re.sub(r"\brwkv_", "my_rwkv_", f.read())


def compiles(stderr: str) -> list[tuple[list[str], str]]:
    """The (command, source) of every compile in a TK_DEBUG=1 report."""
    found = []
    for m in re.finditer(r"tk: compiling the CPU kernels of .*?: (.*)\n---- (\w+)\.c ----\n(.*?)---- end of \2\.c ----",
                         stderr, re.S):
        found.append((m.group(1).split(" "), m.group(3)))
    return found


def cc_time(command: list[str], source: str) -> tuple[float, float]:
    """Seconds (wall, CPU) the compiler takes on source alone, with the
    command tk ran (its output and input paths replaced by a scratch
    folder's)."""
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.c")
        with open(src, "w", encoding="utf-8") as f:
            f.write(source)
        lib = os.environ.get("TK_LIBRARY", os.path.join(ROOT, "build", "libtk.so"))
        header = os.path.join(os.path.dirname(os.path.abspath(lib)), "..", "compiler", "tk_kernel.h")
        shutil.copy(header if os.path.exists(header) else os.path.join(ROOT, "compiler", "tk_kernel.h"),
                    os.path.join(d, "tk_kernel.h"))
        cmd = list(command)
        cmd[cmd.index("-o") + 1] = os.path.join(d, "k.so")
        cmd = [src if a.endswith(".c") else a for a in cmd]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode})")
        return wall, usage.ru_utime + usage.ru_stime


def run_case(case: str, text: str, cache: str, with_cc_time: bool) -> dict:
    env = dict(os.environ, TK_CACHE_DIR=cache, TK_DEBUG="1")
    r = subprocess.run([sys.executable, "-c", CHILD, case], input=text, capture_output=True, text=True, env=env,
                       timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"{case} failed:\n{r.stderr[-4000:]}")
    result = json.loads(r.stdout.strip().splitlines()[-1])
    done = compiles(r.stderr)
    result["files"] = len(done)
    result["c_lines"] = [src.count("\n") for _, src in done]
    if with_cc_time:
        result["cc_s"] = [cc_time(cmd, src) for cmd, src in done]
    return result


def torch_threads() -> int:
    """The threads a torch op uses here (the children's setting)."""
    r = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"], capture_output=True,
                       text=True, check=True)
    return int(r.stdout.strip())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cc-time", action="store_true", help="time the compiler alone on each compiled file")
    ap.add_argument("--speed", action="store_true", help="time the rwkv copy's calls too (B=8 C=768 T=768)")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    results = {}
    print(f"load average at start: {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)")
    for case, text in (("rwkv", rwkv_copy()), ("prefix", PREFIX_SPEC)):
        with tempfile.TemporaryDirectory(prefix="tk-compile-time-") as cache:
            results[case + " cold"] = run_case(case, text, cache, args.cc_time)
            results[case + " warm"] = run_case(case, text, cache, False)
            if case == "rwkv" and args.speed:
                r = subprocess.run([sys.executable, "-c", SPEED_CHILD], input=text, capture_output=True, text=True,
                                   env=dict(os.environ, TK_CACHE_DIR=cache), timeout=1800)
                if r.returncode != 0:
                    raise SystemExit(f"rwkv speed failed:\n{r.stderr[-4000:]}")
                speed = json.loads(r.stdout.strip().splitlines()[-1])
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    print(f"{'case':<12} {'register s':>10} {'first call s':>12} {'total s':>9} {'cc cpu s':>8} {'tk cpu s':>8} {'files':>5}  "
          f"C lines{' (cc alone: wall s, cpu s)' if args.cc_time else ''}")
    for name, r in results.items():
        lines = ", ".join(f"{n}" + (f" ({w:.2f}, {c:.2f})" if "cc_s" in r else "")
                          for n, (w, c) in zip(r["c_lines"], r.get("cc_s", [(0, 0)] * len(r["c_lines"]))))
        print(f"{name:<12} {r['register']:>10.3f} {r['first_call']:>12.3f} {r['total']:>9.3f} {r['child_cpu']:>8.2f} {r['self_cpu']:>8.3f} "
              f"{r['files']:>5}  {lines}")
    if args.speed:
        print(f"rwkv copy, f32 B=8 C=768 T=768, median of 7 ({torch_threads()} threads): "
              f"contiguous {speed['contiguous_ms']:.1f} ms, k strided {speed['k_strided_ms']:.1f} ms; "
              f"B=3 contiguous {speed['b3_contiguous_ms']:.1f} ms")
        results["rwkv speed"] = speed
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
