"""Side-by-side benchmark of the tk ops against the seed's PyTorch formulations.

    python -m torch_tk bench [--json PATH] [--repeat N] [--device cpu|cuda|all]
    (or: python bench/bench_ops.py ...)

One process, one run, every case validated against its reference before it
is timed (llm.c style), then median wall time over N runs after a warm-up:
  brick_pad     seed configuration (48x32 tile -> 4144x8224 float32)
                tk vs torch_pad (the seed's tensor algebra)
                napkin maths: bytes written (H*W*4 = 136 MB) / time -> GB/s
  rwkv_forward  B=32, C=768, T=768 float32, eps=0.1
                tk vs eps + F.conv1d (the seed's one-liner)
                napkin maths: B*C*T*(T+1) = 14.5 GFLOP / time -> GFLOP/s
Peak memory: extra bytes held during one call (CUDA: torch's allocator peak;
CPU: growth of the process's peak RSS, Linux only, else null).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import sys
import time

import torch

from . import reference as ref


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_median(fn, device: str, repeat: int, warmup: int = 1):
    """(median seconds, all times, result of the warm-up call) of fn() on device."""
    result = None
    for _ in range(max(warmup, 1)):
        result = fn()
        sync(device)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times, result


def _rss_kb(field: str):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def peak_memory(fn, device: str):
    """Extra bytes at peak during one call of fn(), or None if not measurable."""
    if device == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM (peak RSS) to the current RSS
        base = _rss_kb("VmRSS")
        fn()
        return (_rss_kb("VmHWM") - base) * 1024
    except (OSError, TypeError):
        return None


def rel_err(got, want) -> float:
    """max |got - want| / max |want|, in float64."""
    want = want.to(torch.float64)
    return ((got.to(torch.float64) - want).abs().max() / want.abs().max()).item()


def brick_pad_cases(device: str):
    """(op, shape text, work, [(impl, fn)], checker) for brick_pad at the seed config."""
    s = ref.SEED
    tile = ref.seed_tile(device)

    def tk():
        return torch.ops.tk.brick_pad(tile, s.pw, s.ph, s.stagger)

    def seed():
        return ref.torch_pad(tile, s.pw, s.ph, s.stagger).reshape(s.H, s.W)

    def max_err(got, want):  # bit equality expected: report max |diff|, 0 when equal
        return 0.0 if torch.equal(got, want) else (got - want).abs().max().item()

    work = {"bytes_written": s.H * s.W * 4}
    return dict(op="brick_pad", shape=f"tile {s.TH}x{s.TW} -> {s.H}x{s.W} f32", work=work,
                impls=[("tk", tk), ("torch_pad", seed)], check=max_err, error="max abs error")


def rwkv_cases(device: str, dtype=torch.float32):
    r = ref.RWKV_SEED
    w, k = ref.rwkv_inputs(r.B, r.C, r.T, dtype=dtype, device=device, seed=0)

    def tk():
        return torch.ops.tk.rwkv_forward(w, k, r.eps)

    def conv1d():
        return ref.rwkv_conv1d(w, k, r.eps)

    work = {"flop": r.B * r.C * r.T * (r.T + 1)}  # T(T+1)/2 FMAs per (b, c), 2 flop each
    return dict(op="rwkv_forward", shape=f"B={r.B} C={r.C} T={r.T} {str(dtype)[6:]}", work=work,
                impls=[("tk", tk), ("F.conv1d", conv1d)], check=rel_err, error="max rel error")


def napkin(work: dict, seconds: float) -> str:
    if "bytes_written" in work:
        return f"{work['bytes_written'] / seconds / 1e9:.2f} GB/s"
    return f"{work['flop'] / seconds / 1e9:.2f} GFLOP/s"


def run_case(case: dict, device: str, repeat: int, log=print):
    """Times every implementation of case; the first is checked against the last."""
    rows, outputs = [], {}
    for impl, fn in case["impls"]:
        med, times, out = time_median(fn, device, repeat)
        outputs[impl] = out
        rows.append(dict(op=case["op"], impl=impl, device=device, shape=case["shape"],
                         median_ms=med * 1e3, min_ms=min(times) * 1e3, times_ms=[t * 1e3 for t in times],
                         napkin=napkin(case["work"], med), peak_mem_bytes=peak_memory(fn, device),
                         **case["work"]))
        log(f"  {case['op']:13s} {impl:10s} {device:5s} {med * 1e3:10.2f} ms  {rows[-1]['napkin']}")
    ref_name = case["impls"][-1][0]
    ref_ms = rows[-1]["median_ms"]
    for row in rows:
        row["speedup_vs_" + ref_name] = ref_ms / row["median_ms"]
        row[case["error"].replace(" ", "_")] = case["check"](outputs[row["impl"]], outputs[ref_name])
    return rows


def format_table(rows) -> str:
    head = f"{'op':13s} {'impl':10s} {'device':6s} {'median ms':>10s} {'vs ref':>8s} {'napkin':>16s} {'peak MB':>9s}  error"
    lines = [head, "-" * len(head)]
    for r in rows:
        speed = next(v for k, v in r.items() if k.startswith("speedup_vs_"))
        err_key = "max_abs_error" if "max_abs_error" in r else "max_rel_error"
        mem = "-" if r["peak_mem_bytes"] is None else f"{r['peak_mem_bytes'] / 1e6:.0f}"
        lines.append(f"{r['op']:13s} {r['impl']:10s} {r['device']:6s} {r['median_ms']:10.2f} "
                     f"{speed:7.2f}x {r['napkin']:>16s} {mem:>9s}  {err_key} {r[err_key]:.3g}")
    return "\n".join(lines)


def machine_info() -> dict:
    info = dict(platform=platform.platform(), processor=platform.processor() or platform.machine(),
                cpu_count=os.cpu_count(), torch_threads=torch.get_num_threads(),
                python=platform.python_version(), torch=torch.__version__)
    if hasattr(os, "getloadavg"):  # other work on the machine skews CPU timings
        info["load_average_1m_at_start"] = round(os.getloadavg()[0], 2)
    if torch.cuda.is_available():
        info["cuda_device"] = torch.cuda.get_device_name()
        info["cuda"] = torch.version.cuda
    return info


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m torch_tk bench", description=__doc__.splitlines()[0])
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON to PATH")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per case (median), after one warm-up")
    ap.add_argument("--note", default="", help="free text stored in the JSON (e.g. which commit was built)")
    ap.add_argument("--device", choices=["cpu", "cuda", "all"], default="all",
                    help="'all' = cpu, plus cuda when available (default)")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(argv)

    import torch_tk  # noqa: F401  (loads libtk)

    devices = ["cpu"] if args.device == "cpu" else ["cuda"] if args.device == "cuda" else \
        ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    machine = machine_info()
    rows = []
    for device in devices:
        for make in (brick_pad_cases, rwkv_cases):
            rows += run_case(make(device), device, args.repeat)
    print()
    print(format_table(rows))

    if args.json:
        result = dict(
            date=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            command=shlex.join(["python", "-m", "torch_tk", "bench", *argv]),
            machine=machine,
            torch=torch.__version__,
            library=torch_tk.library_path(),
            repeat=args.repeat,
            note=args.note,
            load_average_1m_at_end=round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
            results=rows,
        )
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
        print(f"\nwrote {args.json}")
    return 0
