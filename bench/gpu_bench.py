#!/usr/bin/env python3
"""GPU benchmark for the device check (ci/gpu-check.sh): tk vs the seed's torch
formulations on one GPU, kernels launched per call, NVRTC first-call latency.

    PYTHONPATH=python TK_LIBRARY=build/libtk.so python3 bench/gpu_bench.py --json out/gpu_bench.json

Cases (each checked before it is timed; times are CUDA-event medians after a warm-up):
  brick_pad     seed configuration, 48x32 float32 tile -> 4144x8224
                tk vs torch_pad (the seed's tensor algebra); must be bit-equal
                napkin: bytes written H*W*4 = 136 MB / time -> GB/s
  rwkv_forward  B=32, C=768, T=768 float32, eps=0.1
                tk vs eps + F.conv1d (TF32 off, and torch's default TF32 setting)
                napkin: B*C*T*(T+1) = 14.5 GFLOP / time -> GFLOP/s
  first call    a fresh process's first call of each op: cold (empty kernel
                cache: emit + NVRTC + load) and warm (disk cache hit), vs a
                steady-state call
Kernels per call: CUDA kernel events of one call under torch.profiler.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import torch_tk  # noqa: E402,F401  (loads libtk)
from torch_tk import gpu  # noqa: E402
from torch_tk import reference as ref  # noqa: E402


def cuda_time_ms(fn, repeat: int, warmup: int = 3):
    """Median and all times (ms) of fn() measured with CUDA events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeat)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    times = [s.elapsed_time(e) for s, e in events]
    return statistics.median(times), times


def kernels_per_call(fn):
    """(kernel names, memcpy/memset count) of one call of fn(), already warm."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    copies = [n for n in names if n.startswith(("Memcpy", "Memset"))]
    return [n for n in names if n not in copies], len(copies)


def rel_err(got, want) -> float:
    want = want.to(torch.float64)
    return ((got.to(torch.float64) - want).abs().max() / want.abs().max()).item()


def set_tf32(on: bool):
    torch.backends.cudnn.allow_tf32 = on
    torch.backends.cuda.matmul.allow_tf32 = on


def row(op, impl, fn, repeat, work, check, tf32=False):
    set_tf32(tf32)
    med, times = cuda_time_ms(fn, repeat)
    kernels, copies = kernels_per_call(fn)
    if "bytes" in work:
        napkin = f"{work['bytes'] / med / 1e6:.0f} GB/s"
    else:
        napkin = f"{work['flop'] / med / 1e9:.0f} TFLOP/s" if work["flop"] / med / 1e9 >= 10 else \
            f"{work['flop'] / med / 1e6:.0f} GFLOP/s"
    set_tf32(False)
    r = dict(op=op, impl=impl, median_ms=med, times_ms=times, kernels_per_call=len(kernels),
             kernel_names=sorted(set(kernels)), copies_per_call=copies, napkin=napkin, check=check, **work)
    print(f"  {op:13s} {impl:24s} {med:9.3f} ms  {len(kernels):3d} kernels  {napkin:>14s}  {check}", flush=True)
    return r


def bench_brick_pad(repeat):
    s = ref.SEED
    tile = ref.seed_tile("cuda")
    tk = lambda: torch.ops.tk.brick_pad(tile, s.pw, s.ph, s.stagger)  # noqa: E731
    seed = lambda: ref.torch_pad(tile, s.pw, s.ph, s.stagger)  # noqa: E731
    equal = torch.equal(tk(), seed().reshape(s.H, s.W))
    work = dict(bytes=s.H * s.W * 4)
    check = "bit-equal to torch_pad" if equal else "DIFFERS from torch_pad"
    return [row("brick_pad", "tk", tk, repeat, work, check),
            row("brick_pad", "torch_pad (seed)", seed, max(repeat // 4, 3), work, "reference")], equal


def bench_rwkv(repeat):
    r = ref.RWKV_SEED
    w, k = ref.rwkv_inputs(r.B, r.C, r.T, device="cuda", seed=0)
    tk = lambda: torch.ops.tk.rwkv_forward(w, k, r.eps)  # noqa: E731
    conv = lambda: r.eps + F.conv1d(F.pad(k, (r.T - 1, 0)), w.unsqueeze(1), groups=r.C)  # noqa: E731
    set_tf32(False)
    want = ref.rwkv_conv1d(w.double(), k.double(), r.eps)
    err_tk, err_conv = rel_err(tk(), want), rel_err(conv(), want)
    set_tf32(True)
    err_tf32 = rel_err(conv(), want)
    set_tf32(False)
    work = dict(flop=r.B * r.C * r.T * (r.T + 1))
    ok = err_tk < 1e-4
    return [row("rwkv_forward", "tk", tk, repeat, work, f"rel err {err_tk:.2g} vs float64"),
            row("rwkv_forward", "F.conv1d (tf32 off)", conv, repeat, work, f"rel err {err_conv:.2g}"),
            row("rwkv_forward", "F.conv1d (tf32 on)", conv, repeat, work, f"rel err {err_tf32:.2g}", tf32=True)], ok


FIRST_CALL = r"""
import json, time, torch
import torch_tk
from torch_tk import reference as ref
tile = ref.seed_tile("cuda")
w, k = ref.rwkv_inputs(2, 16, 64, device="cuda")
torch.cuda.synchronize()
out = {}
for name, fn in [("brick_pad", lambda: torch.ops.tk.brick_pad(tile, 30, 20, 10)),
                 ("rwkv_forward", lambda: torch.ops.tk.rwkv_forward(w, k, 0.1))]:
    times = []
    for _ in range(3):
        t = time.perf_counter(); fn(); torch.cuda.synchronize(); times.append((time.perf_counter() - t) * 1e3)
    out[name] = dict(first_ms=times[0], steady_ms=min(times[1:]))
print("RESULT " + json.dumps(out))
"""


def first_call_latency():
    """First-call times of both ops in fresh processes: cold cache, then warm."""
    env = dict(os.environ)
    env.pop("TK_DEBUG", None)
    python_dir = os.path.join(HERE, "..", "python")
    env["PYTHONPATH"] = python_dir + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("TK_LIBRARY", torch_tk.library_path())
    result = {}
    with tempfile.TemporaryDirectory() as cache:
        env["TK_CACHE_DIR"] = cache
        for kind in ("cold", "warm"):
            p = subprocess.run([sys.executable, "-c", FIRST_CALL], env=env, capture_output=True, text=True,
                               timeout=300)
            line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
            if p.returncode != 0 or not line:
                raise RuntimeError(f"first-call probe failed:\n{p.stderr[-3000:]}")
            result[kind] = json.loads(line[0][7:])
    rows = []
    for op in ("brick_pad", "rwkv_forward"):
        r = dict(op=op, cold_first_ms=result["cold"][op]["first_ms"], warm_first_ms=result["warm"][op]["first_ms"],
                 steady_ms=result["warm"][op]["steady_ms"])
        rows.append(r)
        print(f"  {op:13s} first call: cold (NVRTC) {r['cold_first_ms']:8.1f} ms   warm (disk cache) "
              f"{r['warm_first_ms']:7.1f} ms   steady {r['steady_ms']:6.3f} ms", flush=True)
    return rows


def format_table(rows, latency) -> str:
    head = f"{'op':13s} {'impl':24s} {'median ms':>10s} {'kernels':>8s} {'napkin':>14s}  check"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['op']:13s} {r['impl']:24s} {r['median_ms']:10.3f} {r['kernels_per_call']:8d} "
                     f"{r['napkin']:>14s}  {r['check']}")
    for r in latency:
        lines.append(f"{r['op']:13s} {'first call cold / warm':24s} {r['cold_first_ms']:8.1f} / "
                     f"{r['warm_first_ms']:.1f} ms (steady {r['steady_ms']:.3f} ms)")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON")
    ap.add_argument("--repeat", type=int, default=50, help="timed calls per case (median)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_bench: no CUDA GPU", file=sys.stderr)
        return 2
    props = torch.cuda.get_device_properties(0)
    print(f"{props.name}, sm_{props.major}{props.minor}, {props.multi_processor_count} SMs; "
          f"torch {torch.__version__}", flush=True)
    brick, brick_ok = bench_brick_pad(args.repeat)
    rwkv, rwkv_ok = bench_rwkv(args.repeat)
    latency = first_call_latency()
    table = format_table(brick + rwkv, latency)
    ok = brick_ok and rwkv_ok and all(r["kernels_per_call"] == 1 for r in brick + rwkv if r["impl"] == "tk")
    if args.json:
        info = gpu.info()
        result = dict(
            date=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            gpu=props.name, sm=f"sm_{props.major}{props.minor}", sms=props.multi_processor_count,
            torch=torch.__version__, cuda=torch.version.cuda,
            nvrtc=next((line for line in info.splitlines() if line.startswith("nvrtc:")), ""),
            driver=next((line for line in info.splitlines() if line.startswith("driver:")), ""),
            repeat=args.repeat, ok=ok, results=brick + rwkv, first_call=latency, table=table)
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    print()
    print(table)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
