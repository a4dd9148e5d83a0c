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
  memset        torch.empty + fill_ of the brick_pad output's size: the
                bandwidth floor brick_pad is compared with (both allocate);
                on the CPU also fill_ into a tensor kept between calls
                ("fill_ mapped"): plain stores, no page faults (tk's reused
                output blocks have none either, and brick_pad streams into
                them, so it can go past this);
                with TK_HUGEPAGES=1 also into huge pages ("fill_ THP"), as
                tk's large CPU outputs then are
  rwkv backward the same sizes: tk's backward specs (through autograd) vs
                autograd of the F.conv1d formulation; gradients compared
  rwkv B=4      rwkv_forward at B=4 (C, T as above) vs F.conv1d: fewer batch
                rows than the CPU kernel's 8-row groups
  rwkv loop     B=1, C=2, T=16: tk vs the Python reference loop (tiny only)
  call overhead a tiny rwkv_forward vs torch.add of the same size through the
                dispatcher (torch.ops.aten.add.Tensor), median of many calls
  Taichi        the seed's two kernels re-written from the formulas, when
                `import taichi` works (skipped cleanly otherwise)
With --row-loops, the row-loop examples of examples/specs/ instead (compiled
at run time with torch_tk.load), float32:
  wkv           --wkv B,T,C (default 8,1024,768): tk's O(T) row loop vs a
                PyTorch loop over t on (B, C) slices; forward, and
                forward + backward (tk's backward row loops vs the loop's
                autograd)
  softmax       (4096, 1024) vs torch.softmax; forward, and forward + backward
  layernorm     (4096, 1024) vs F.layer_norm; rmsnorm vs the composite
                x * rsqrt(mean(x^2) + eps) * weight; forward + backward too
  cumsum        (4096, 1024) vs torch.cumsum
Peak memory: extra bytes held during one call (CUDA: torch's allocator peak;
CPU: growth of the process's peak RSS, Linux only, else null; measured after
torch_tk.empty_cache(), so a tk output shows in full).
Timings are of repeated calls: tk's CPU outputs of 16 MiB or more reuse the
blocks of freed outputs (torch_tk.cpu_cache_info(); TK_CPU_CACHE_MB=0 turns
that off, and the JSON's machine.env records it).
With --png PATH, a bar chart of every case's speed-up over its reference.
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
from .memory import empty_cache


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_median(fn, device: str, repeat: int, warmup_s: float = 1.0, max_warmup: int = 20):
    """(median seconds, all times, result of the first call) of fn() on device,
    timed after warming up: at least one call, and calls until warmup_s have
    passed (at most max_warmup). One call is not always enough: a process's
    first huge-page faults can be much slower than later ones (on a VM whose
    host takes back free memory, bench/LOG.md "Huge pages")."""
    result = fn()
    sync(device)
    start, calls = time.perf_counter(), 1
    while time.perf_counter() - start < warmup_s and calls < max_warmup:
        fn()
        sync(device)
        calls += 1
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
    if device == "cpu":   # a cached output block would hide the output itself
        empty_cache()
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


def rwkv_small_batch_cases(device: str, dtype=torch.float32):
    """rwkv_forward at B=4 (the seed's C and T): too few batch rows for the
    CPU kernel's 8-row groups, so it runs 4-row groups."""
    r = ref.RWKV_SEED
    B = 4
    w, k = ref.rwkv_inputs(B, r.C, r.T, dtype=dtype, device=device, seed=1)

    def tk():
        return torch.ops.tk.rwkv_forward(w, k, r.eps)

    def conv1d():
        return ref.rwkv_conv1d(w, k, r.eps)

    work = {"flop": B * r.C * r.T * (r.T + 1)}
    return dict(op="rwkv_fwd_B4", shape=f"B={B} C={r.C} T={r.T} {str(dtype)[6:]}", work=work,
                impls=[("tk", tk), ("F.conv1d", conv1d)], check=rel_err, error="max rel error")


def can_advise_huge_pages() -> bool:
    import mmap
    return sys.platform.startswith("linux") and hasattr(mmap, "MADV_HUGEPAGE")


def advise_huge_pages(t: torch.Tensor) -> None:
    """What tk's shim does to a large CPU output (shim/kernels.cpp): madvise
    MADV_HUGEPAGE on its 2 MiB-aligned interior (Linux; advice only: with
    THP `never` it changes nothing)."""
    import ctypes
    import mmap
    huge = 2 << 20
    lo = (t.data_ptr() + huge - 1) // huge * huge
    hi = (t.data_ptr() + t.numel() * t.element_size()) // huge * huge
    if hi > lo:
        libc = ctypes.CDLL(None)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        libc.madvise(lo, hi - lo, mmap.MADV_HUGEPAGE)


def memset_cases(device: str):
    """The floor for brick_pad: allocate and fill a tensor of the output's size;
    on the CPU also fill one that stays allocated (`fill_ mapped`): plain
    stores into mapped memory, which brick_pad's streaming stores into its
    reused output blocks can beat.
    With TK_HUGEPAGES=1 (tk advises huge pages for its large CPU outputs),
    also into huge pages (`fill_ THP`): the floor for that mode."""
    s = ref.SEED

    def fill():
        return torch.empty(s.H, s.W, device=device).fill_(0.5)

    def fill_huge():
        t = torch.empty(s.H, s.W, device=device)
        advise_huge_pages(t)
        return t.fill_(0.5)

    impls = [("torch.fill_", fill)]
    if device == "cpu":
        # tk's CPU outputs of 16 MiB or more reuse the memory of freed ones
        # (shim/output_cache.cpp): from the second call on, brick_pad writes
        # into memory that is already mapped
        kept = torch.empty(s.H, s.W)
        impls.insert(0, ("fill_ mapped", lambda: kept.fill_(0.5)))
    if device == "cpu" and os.environ.get("TK_HUGEPAGES") == "1" and can_advise_huge_pages():
        impls.insert(0, ("fill_ THP", fill_huge))
    work = {"bytes_written": s.H * s.W * 4}
    return dict(op="memset", shape=f"{s.H}x{s.W} f32 (empty + fill_)", work=work,
                impls=impls, check=lambda a, b: 0.0, error="max abs error")


def rwkv_backward_cases(device: str, dtype=torch.float32):
    """dL/dw and dL/dk: tk's backward kernels vs autograd of the conv1d form."""
    r = ref.RWKV_SEED
    w, k = ref.rwkv_inputs(r.B, r.C, r.T, dtype=dtype, device=device, seed=0)
    g = torch.rand(r.B, r.C, r.T, dtype=dtype, device=device)
    wt, kt = w.clone().requires_grad_(), k.clone().requires_grad_()
    wc, kc = w.clone().requires_grad_(), k.clone().requires_grad_()
    out_tk = torch.ops.tk.rwkv_forward(wt, kt, r.eps)
    out_conv = ref.rwkv_conv1d(wc, kc, r.eps)

    def tk():
        return torch.cat([x.flatten() for x in torch.autograd.grad(out_tk, (wt, kt), g, retain_graph=True)])

    def conv1d():
        return torch.cat([x.flatten() for x in torch.autograd.grad(out_conv, (wc, kc), g, retain_graph=True)])

    work = {"flop": 2 * r.B * r.C * r.T * (r.T + 1)}  # two triangular sums of B*C*T(T+1)/2 FMAs
    return dict(op="rwkv_backward", shape=f"B={r.B} C={r.C} T={r.T} {str(dtype)[6:]}", work=work,
                impls=[("tk", tk), ("F.conv1d", conv1d)], check=rel_err, error="max rel error")


def rwkv_loop_cases(device: str):
    """Tiny sizes only: the Python reference loop is ~1e6 times slower."""
    B, C, T = 1, 2, 16
    w, k = ref.rwkv_inputs(B, C, T, dtype=torch.float64, device=device, seed=1)

    def tk():
        return torch.ops.tk.rwkv_forward(w, k, 0.1)

    def loop():
        return ref.rwkv_loop(w.cpu(), k.cpu(), 0.1).to(device)

    work = {"flop": B * C * T * (T + 1)}
    return dict(op="rwkv_tiny", shape=f"B={B} C={C} T={T} f64", work=work,
                impls=[("tk", tk), ("python loop", loop)], check=rel_err, error="max rel error")


def call_overhead_cases(device: str):
    """Per-call cost on a tiny input: a tk op vs a native op of the same size."""
    w, k = torch.rand(2, 4, device=device), torch.rand(1, 2, 4, device=device)
    x = torch.rand(1, 2, 4, device=device)
    add = torch.ops.aten.add.Tensor
    rwkv = torch.ops.tk.rwkv_forward.default
    n = 2000

    def tk():
        for _ in range(n):
            out = rwkv(w, k, 0.1)
        return out

    def native():
        for _ in range(n):
            out = add(x, x)
        return out

    return dict(op="call_overhead", shape=f"8 elements, {n} calls per run", work={"calls": n},
                impls=[("tk", tk), ("aten.add", native)], check=lambda a, b: 0.0, error="max abs error")


def taichi_cases(device: str):
    """The seed's Taichi kernels (written from the formulas), if Taichi imports."""
    try:
        from . import bench_taichi   # imports taichi
    except Exception:  # not installed (or broken): the bench goes on without it
        return []
    return bench_taichi.cases(device, ref.SEED, ref.RWKV_SEED, rel_err)


def _load_example(name: str) -> None:
    import torch_tk
    here = os.path.dirname(os.path.abspath(__file__))
    for root in (os.path.join(here, "..", "..", "examples", "specs"), os.path.join(os.getcwd(), "examples", "specs")):
        path = os.path.join(root, name + ".tk")
        if os.path.exists(path):
            torch_tk.load(path)
            return
    raise FileNotFoundError(f"examples/specs/{name}.tk (run from the repository root)")


def _grads_fn(fn, inputs, g):
    """Forward and backward of fn(*inputs) with incoming gradient g: the gradients, flattened."""
    def run():
        xs = [x.detach().requires_grad_() for x in inputs]
        out = fn(*xs)
        return torch.cat([out.detach().flatten()] + [d.flatten() for d in torch.autograd.grad(out, xs, g)])
    return run


def row_loop_cases(device: str, wkv_shape=(8, 1024, 768)):
    """The row-loop examples (examples/specs: wkv, softmax, layernorm, rmsnorm, cumsum) vs PyTorch."""
    for name in ("wkv", "softmax", "layernorm", "cumsum"):
        _load_example(name)
    tk = torch.ops.tk
    gen = torch.Generator().manual_seed(0)
    B, T, C = wkv_shape
    w = (-torch.exp(torch.randn(C, generator=gen))).to(device)
    u = torch.randn(C, generator=gen).to(device)
    k = torch.randn(B, T, C, generator=gen).to(device)
    v = torch.randn(B, T, C, generator=gen).to(device)
    gy = torch.randn(B, T, C, generator=gen).to(device)
    R, N = 4096, 1024
    x = torch.randn(R, N, generator=gen).to(device)
    gx = torch.randn(R, N, generator=gen).to(device)
    wt = torch.randn(N, generator=gen).to(device)
    bt = torch.randn(N, generator=gen).to(device)
    eps = 1e-5

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    wshape = f"B={B} T={T} C={C} f32"
    xshape = f"({R}, {N}) f32"
    ew = {"bytes_written": B * T * C * 4}
    ex = {"bytes_written": R * N * 4}
    return [
        dict(op="wkv", shape=wshape, work=ew, check=rel_err, error="max rel error",
             impls=[("tk", lambda: tk.wkv(w, u, k, v)), ("torch loop", lambda: ref.wkv_loop(w, u, k, v))]),
        dict(op="wkv fwd+bwd", shape=wshape, work=ew, check=rel_err, error="max rel error",
             impls=[("tk", _grads_fn(tk.wkv, (w, u, k, v), gy)),
                    ("torch loop", _grads_fn(ref.wkv_loop, (w, u, k, v), gy))]),
        dict(op="softmax", shape=xshape, work=ex, check=rel_err, error="max rel error",
             impls=[("tk", lambda: tk.softmax(x)), ("torch", lambda: torch.softmax(x, -1))]),
        dict(op="softmax f+b", shape=xshape, work=ex, check=rel_err, error="max rel error",
             impls=[("tk", _grads_fn(tk.softmax, (x,), gx)),
                    ("torch", _grads_fn(lambda a: torch.softmax(a, -1), (x,), gx))]),
        dict(op="layernorm", shape=xshape, work=ex, check=rel_err, error="max rel error",
             impls=[("tk", lambda: tk.layernorm(x, wt, bt, eps)),
                    ("F.layer_norm", lambda: torch.nn.functional.layer_norm(x, (N,), wt, bt, eps))]),
        dict(op="layernorm f+b", shape=xshape, work=ex, check=rel_err, error="max rel error",
             impls=[("tk", _grads_fn(lambda a, b_, c: tk.layernorm(a, b_, c, eps), (x, wt, bt), gx)),
                    ("F.layer_norm", _grads_fn(lambda a, b_, c: torch.nn.functional.layer_norm(a, (N,), b_, c, eps),
                                               (x, wt, bt), gx))]),
        dict(op="rmsnorm", shape=xshape, work=ex, check=rel_err, error="max rel error",
             impls=[("tk", lambda: tk.rmsnorm(x, wt, eps)), ("composite", lambda: rms(x, wt))]),
        dict(op="rmsnorm f+b", shape=xshape, work=ex, check=rel_err, error="max rel error",
             impls=[("tk", _grads_fn(lambda a, b_: tk.rmsnorm(a, b_, eps), (x, wt), gx)),
                    ("composite", _grads_fn(rms, (x, wt), gx))]),
        dict(op="cumsum", shape=xshape, work=ex, check=rel_err, error="max rel error",
             impls=[("tk", lambda: tk.cumsum(x)), ("torch", lambda: torch.cumsum(x, -1))]),
    ]


def napkin(work: dict, seconds: float) -> str:
    if "calls" in work:
        return f"{seconds / work['calls'] * 1e6:.2f} us/call"
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


def summarize(rows) -> list:
    """The ratios the performance targets are stated in, one line each."""
    def med(op, impl, device):
        return next((r["median_ms"] for r in rows if r["op"] == op and r["impl"] == impl
                     and r["device"] == device and "Taichi" not in r["shape"]), None)
    lines = []
    for device in sorted({r["device"] for r in rows}):
        pad, fill = med("brick_pad", "tk", device), med("memset", "torch.fill_", device)
        if pad and fill:
            lines.append(f"[{device}] brick_pad bandwidth = {fill / pad * 100:.0f}% of empty+fill_ (target >= 70%)")
        mapped = med("memset", "fill_ mapped", device)
        if pad and mapped:
            lines.append(f"[{device}] brick_pad bandwidth = {mapped / pad * 100:.0f}% of fill_ into mapped memory "
                         "(plain stores; tk streams into its reused output blocks)")
        huge = med("memset", "fill_ THP", device)
        if pad and huge:
            lines.append(f"[{device}] brick_pad bandwidth = {huge / pad * 100:.0f}% of empty+fill_ into huge pages "
                         "(TK_HUGEPAGES=1: tk advises huge pages for its large CPU outputs)")
        for op in ("rwkv_forward", "rwkv_backward"):
            tk, conv = med(op, "tk", device), med(op, "F.conv1d", device)
            if tk and conv:
                lines.append(f"[{device}] {op}: {conv / tk:.1f}x F.conv1d (target >= 5x on CPU)")
        tk, conv = med("rwkv_fwd_B4", "tk", device), med("rwkv_fwd_B4", "F.conv1d", device)
        if tk and conv:
            lines.append(f"[{device}] rwkv_forward at B=4: {conv / tk:.1f}x F.conv1d (no target)")
        tk, add = med("call_overhead", "tk", device), med("call_overhead", "aten.add", device)
        if tk and add:
            lines.append(f"[{device}] per-call: tk {tk / 2:.2f} us vs aten.add {add / 2:.2f} us = "
                         f"{tk / add:.2f}x (target <= 1.5x)")
    return lines


def plot(rows, path: str) -> None:
    """A horizontal bar chart (log scale) of each row's speed-up over its
    case's reference, drawn with Pillow (no plotting library needed)."""
    import math
    from PIL import Image, ImageDraw

    items = []
    for r in rows:
        speed = next(v for k, v in r.items() if k.startswith("speedup_vs_"))
        ref_name = next(k for k in r if k.startswith("speedup_vs_"))[len("speedup_vs_"):]
        if r["impl"] != ref_name:
            items.append((f"{r['op']} [{r['device']}] {r['impl']} vs {ref_name}", speed))
    width, bar, left = 900, 26, 360
    img = Image.new("RGB", (width, 40 + bar * max(len(items), 1)), "white")
    d = ImageDraw.Draw(img)
    d.text((10, 10), "speed-up over the reference (log scale; 1x at the grey line)", fill="black")
    top = max([abs(math.log10(max(v, 1e-9))) for _, v in items] + [1.0])
    scale = (width - left - 80) / (2 * top)
    mid = left + (width - left - 80) / 2
    d.line([(mid, 30), (mid, img.height)], fill=(160, 160, 160))
    for i, (label, v) in enumerate(items):
        y = 35 + i * bar
        x = mid + math.log10(max(v, 1e-9)) * scale
        d.rectangle([min(mid, x), y, max(mid, x), y + bar - 8], fill=(46, 125, 50) if v >= 1 else (198, 40, 40))
        d.text((10, y + 2), label, fill="black")
        d.text((max(mid, x) + 6, y + 2), f"{v:.3g}x", fill="black")
    img.save(path)


def machine_info() -> dict:
    info = dict(platform=platform.platform(), processor=platform.processor() or platform.machine(),
                cpu_count=os.cpu_count(), torch_threads=torch.get_num_threads(),
                python=platform.python_version(), torch=torch.__version__)
    env = {k: os.environ[k] for k in ("TK_HUGEPAGES", "THP_MEM_ALLOC_ENABLE", "TK_CPU_NARROW", "ATEN_CPU_CAPABILITY",
                                    "ONEDNN_MAX_CPU_ISA", "TK_CPU_CACHE_MB", "TK_CPU_STREAM", "TK_CPU_STREAM_MB") if k in os.environ}
    if env:  # settings that change CPU timings
        info["env"] = env
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
    ap.add_argument("--png", metavar="PATH", help="write a bar chart of the speed-ups to PATH")
    ap.add_argument("--quick", action="store_true", help="only the seed cases (no backward, tiny, Taichi)")
    ap.add_argument("--row-loops", action="store_true",
                    help="only the row-loop examples (wkv, softmax, layernorm, rmsnorm, cumsum)")
    ap.add_argument("--wkv", default="8,1024,768", metavar="B,T,C", help="wkv's shape for --row-loops")
    ap.add_argument("--device", choices=["cpu", "cuda", "all"], default="all",
                    help="'all' = cpu, plus cuda when available (default)")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(argv)

    import torch_tk  # noqa: F401  (loads libtk)

    devices = ["cpu"] if args.device == "cpu" else ["cuda"] if args.device == "cuda" else \
        ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    machine = machine_info()
    rows = []
    makers = [brick_pad_cases, memset_cases, rwkv_cases]
    if args.row_loops:
        shape = tuple(int(n) for n in args.wkv.split(","))
        makers = [lambda device: row_loop_cases(device, shape)]
    elif not args.quick:
        makers += [rwkv_backward_cases, rwkv_small_batch_cases, rwkv_loop_cases, call_overhead_cases,
                   taichi_cases]
    for device in devices:
        for make in makers:
            cases = make(device)
            for case in cases if isinstance(cases, list) else [cases]:
                rows += run_case(case, device, args.repeat)
    print()
    print(format_table(rows))
    summary = summarize(rows)
    for line in summary:
        print(line)
    if args.png:
        plot(rows, args.png)
        print(f"wrote {args.png}")

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
            summary=summary,
        )
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
        print(f"\nwrote {args.json}")
    return 0
