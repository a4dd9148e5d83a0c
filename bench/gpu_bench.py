#!/usr/bin/env python3
"""GPU benchmark for the device check (ci/gpu-check.sh): tk vs the seed's torch
formulations on one GPU, kernels launched per call, NVRTC first-call latency.

    PYTHONPATH=python TK_LIBRARY=build/libtk.so python3 bench/gpu_bench.py --json out/gpu_bench.json

Cases (each checked before it is timed; times are CUDA-event medians after a warm-up):
  brick_pad     seed configuration, 48x32 float32 tile -> 4144x8224
                tk vs torch_pad (the seed's tensor algebra); must be bit-equal;
                also tk on the tile made contiguous (the seed's is a rot90 view)
                napkin: bytes written H*W*4 = 136 MB / time -> GB/s
  rwkv_forward  B=32, C=768, T=768 float32, eps=0.1
                tk vs eps + F.conv1d (TF32 off, and torch's default TF32 setting)
                napkin: B*C*T*(T+1) = 14.5 GFLOP / time -> GFLOP/s
  device copy   dst.copy_(src) of brick_pad's output size: the bandwidth
                floor (bytes read + written / time) brick_pad is held to
  rwkv backward tk's backward ops through autograd vs autograd of the F.conv1d
                formulation (TF32 off); gradients compared; each of tk's two
                backward kernels alone (where the backward's time goes)
  rwkv dtypes   tk's rwkv_forward in bfloat16 and float16 next to float32
  row loops     the example specs with row loops (examples/specs): wkv
                forward B=8, T=1024, C=768 vs a PyTorch loop over t (napkin:
                bytes of k, v and y / time, next to the device copy's
                bandwidth); softmax (4096, 1024) and (64, 32768) vs
                torch.softmax; layernorm (4096, 1024) vs F.layer_norm, also
                with weight and bias None (optional tensors); rmsnorm
                vs its torch composite; cumsum (4096, 1024) vs torch.cumsum;
                each checked against the torch result first; softmax and
                layernorm also in the cooperative form (tests/specs/
                coop_rows.tk: schedule coop=32, a warp a row, opt-in and
                untimed until this runs) next to the default (a thread a row)
  adamw step    examples/specs/optim.tk's adamw_ (one flat float32
                parameter of 16.8 M elements, updated in place: 28 bytes an
                element) vs torch.optim.AdamW fused and foreach, checked
                against torch's step first
  derived       backward ops derived by `backward auto`: forward + backward of
                examples/specs/activations.tk's bias_gelu (8192, 4096) vs
                F.gelu(x + bias), and of the derived dropout vs the one
                written by hand (bit-equal gradients) and F.dropout; of
                tests/specs/autodiff_rows.tk's layer norm (weight and bias)
                and softmax (4096, 1024), row loops derived, vs F.layer_norm
                and torch.softmax
  per call      host time per call of a tiny tk op vs torch.add of the same
                size (launch overhead), many calls, one synchronize
  first call    a fresh process's first call of each op: cold (empty kernel
                cache: emit + NVRTC + load) and warm (disk cache hit), vs a
                steady-state call
Kernels per call: CUDA kernel events of one call under torch.profiler. Peak
memory: torch's allocator peak during one call, above what was allocated.
The summary lines at the end put each figure next to the performance
issue's target. `--device cpu --small` runs the same code on the CPU at
small sizes (wall-clock timer, no profiler): the test suite checks the
script that way.
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
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import torch_tk  # noqa: E402,F401  (loads libtk)
from torch_tk import gpu  # noqa: E402
from torch_tk import reference as ref  # noqa: E402


DEVICE = "cuda"   # --device cpu: the dry run (see the docstring)


def cpu_time_ms(fn, repeat: int, warmup: int = 1):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times), times


def cuda_time_ms(fn, repeat: int, warmup: int = 3):
    """Median and all times (ms) of fn() measured with CUDA events."""
    if DEVICE != "cuda":
        return cpu_time_ms(fn, repeat)
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

    if DEVICE != "cuda":
        return [], 0
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


def peak_memory(fn):
    """Bytes torch's CUDA allocator holds at its peak during one call of fn(),
    above what was allocated before (None on the CPU)."""
    if DEVICE != "cuda":
        return None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return peak


def row(op, impl, fn, repeat, work, check, tf32=False):
    set_tf32(tf32)
    med, times = cuda_time_ms(fn, repeat)
    kernels, copies = kernels_per_call(fn)
    peak = peak_memory(fn)
    if "calls" in work:
        napkin = f"{med / work['calls'] * 1e3:.2f} us/call"
    elif "bytes" in work:
        napkin = f"{work['bytes'] / med / 1e6:.0f} GB/s"
    else:
        napkin = f"{work['flop'] / med / 1e9:.0f} TFLOP/s" if work["flop"] / med / 1e9 >= 10 else \
            f"{work['flop'] / med / 1e6:.0f} GFLOP/s"
    set_tf32(False)
    r = dict(op=op, impl=impl, median_ms=med, times_ms=times, kernels_per_call=len(kernels),
             kernel_names=sorted(set(kernels)), copies_per_call=copies, napkin=napkin, check=check,
             peak_mem_bytes=peak, **work)
    print(f"  {op:22s} {impl:24s} {med:9.3f} ms  {len(kernels):3d} kernels  {napkin:>14s}  {check}", flush=True)
    return r


SMALL = False   # --small: small sizes (the dry run)


def seed_config():
    if not SMALL:
        return ref.SEED
    from types import SimpleNamespace
    s = SimpleNamespace(TW=32, TH=48, pw=100, ph=60, stagger=10)
    s.W, s.H = s.TW + 2 * s.pw, s.TH + 2 * s.ph
    return s


def rwkv_config():
    if not SMALL:
        return ref.RWKV_SEED
    from types import SimpleNamespace
    return SimpleNamespace(B=2, C=8, T=48, eps=0.1)


def bench_brick_pad(repeat):
    s = seed_config()
    tile = ref.seed_tile(DEVICE)
    tk = lambda: torch.ops.tk.brick_pad(tile, s.pw, s.ph, s.stagger)  # noqa: E731
    seed = lambda: ref.torch_pad(tile, s.pw, s.ph, s.stagger)  # noqa: E731
    want = seed().reshape(s.H, s.W)
    equal = torch.equal(tk(), want)
    # the seed's tile is a rot90 view (strided); the same tile contiguous
    ctile = tile.contiguous()
    tkc = lambda: torch.ops.tk.brick_pad(ctile, s.pw, s.ph, s.stagger)  # noqa: E731
    equal_c = torch.equal(tkc(), want)
    work = dict(bytes=s.H * s.W * 4)
    check = "bit-equal to torch_pad" if equal else "DIFFERS from torch_pad"
    return [row("brick_pad", "tk", tk, repeat, work, check),
            row("brick_pad", "tk, contiguous tile", tkc, repeat, work,
                "bit-equal to torch_pad" if equal_c else "DIFFERS from torch_pad"),
            row("brick_pad", "torch_pad (seed)", seed, max(repeat // 4, 3), work, "reference")], equal and equal_c


def bench_copy(repeat):
    """The device-to-device copy of brick_pad's output size: the floor."""
    s = seed_config()
    src = torch.rand(s.H, s.W, device=DEVICE)
    dst = torch.empty_like(src)
    fn = lambda: dst.copy_(src)  # noqa: E731
    fn()
    ok = torch.equal(dst, src)
    return [row("device copy", "dst.copy_(src)", fn, repeat, dict(bytes=2 * s.H * s.W * 4),
                "read + written" if ok else "COPY DIFFERS")], ok


def bench_rwkv(repeat):
    r = rwkv_config()
    w, k = ref.rwkv_inputs(r.B, r.C, r.T, device=DEVICE, seed=0)
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


def bench_rwkv_backward(repeat):
    """Both gradients through autograd: tk's backward ops vs conv1d's (TF32 off)."""
    r = rwkv_config()
    w0, k0 = ref.rwkv_inputs(r.B, r.C, r.T, device=DEVICE, seed=0)
    g = torch.randn(r.B, r.C, r.T, device=DEVICE, generator=torch.Generator(DEVICE).manual_seed(1))
    w, k = w0.clone().requires_grad_(), k0.clone().requires_grad_()

    def tk():
        return torch.autograd.grad(torch.ops.tk.rwkv_forward(w, k, r.eps), (w, k), g)

    def conv():
        out = r.eps + F.conv1d(F.pad(k, (r.T - 1, 0)), w.unsqueeze(1), groups=r.C)
        return torch.autograd.grad(out, (w, k), g)

    set_tf32(False)
    wd, kd = w0.double().requires_grad_(), k0.double().requires_grad_()
    want = torch.autograd.grad(ref.rwkv_conv1d(wd, kd, r.eps), (wd, kd), g.double())
    got = tk()
    err = max(rel_err(a, b) for a, b in zip(got, want))
    err_conv = max(rel_err(a, b) for a, b in zip(conv(), want))
    work = dict(flop=2 * r.B * r.C * r.T * (r.T + 1))
    # where the backward's time goes: each of tk's two backward kernels alone
    gw = lambda: torch.ops.tk.rwkv_backward_w(k0, g)   # noqa: E731
    gk = lambda: torch.ops.tk.rwkv_backward_k(w0, g)   # noqa: E731
    err_w, err_k = rel_err(gw(), want[0]), rel_err(gk(), want[1])
    half = dict(flop=r.B * r.C * r.T * (r.T + 1))
    return [row("rwkv_backward", "tk (autograd)", tk, repeat, work, f"rel err {err:.2g} vs float64"),
            row("rwkv_backward", "tk rwkv_backward_w alone", gw, repeat, half, f"rel err {err_w:.2g}"),
            row("rwkv_backward", "tk rwkv_backward_k alone", gk, repeat, half, f"rel err {err_k:.2g}"),
            row("rwkv_backward", "F.conv1d autograd (tf32 off)", conv, repeat, work, f"rel err {err_conv:.2g}")], \
        err < 1e-4 and err_w < 1e-4 and err_k < 1e-4


def bench_rwkv_dtypes(repeat):
    """tk's rwkv_forward in the half types (float32 accumulation) next to float32."""
    r = rwkv_config()
    w, k = ref.rwkv_inputs(r.B, r.C, r.T, device=DEVICE, seed=0)
    want = ref.rwkv_conv1d(w.double(), k.double(), r.eps)
    work = dict(flop=r.B * r.C * r.T * (r.T + 1))
    rows, ok = [], True
    for dt, bound in ((torch.bfloat16, 3e-2), (torch.float16, 5e-3)):
        wd, kd = w.to(dt), k.to(dt)
        err = rel_err(torch.ops.tk.rwkv_forward(wd, kd, r.eps), want)
        ok = ok and err < bound
        rows.append(row("rwkv_forward", f"tk {str(dt)[6:]}", lambda wd=wd, kd=kd: torch.ops.tk.rwkv_forward(wd, kd, r.eps),
                        repeat, work, f"rel err {err:.2g} vs float64 of the float32 inputs"))
    return rows, ok


def row_loop_ops():
    """The example specs with row loops, loaded once (torch_tk.load)."""
    specs = os.path.join(HERE, "..", "examples", "specs")
    for name in ("wkv", "softmax", "layernorm", "cumsum"):
        torch_tk.load(os.path.join(specs, name + ".tk"))
    # the same softmax and layernorm with 'schedule coop=32' (a warp a row)
    torch_tk.load(os.path.join(HERE, "..", "tests", "specs", "coop_rows.tk"))
    return torch.ops.tk


def bench_row_loops(repeat):
    """Row-loop specs (scans, row reductions) against torch on the device."""
    tk = row_loop_ops()
    g = torch.Generator(device="cpu").manual_seed(0)
    rand = lambda *s: torch.randn(*s, generator=g).to(DEVICE)  # noqa: E731
    rows, ok = [], True
    B, T, C = (2, 64, 32) if SMALL else (8, 1024, 768)
    w, u = -torch.exp(rand(C)), rand(C)
    k, v = rand(B, T, C), rand(B, T, C)
    want = ref.wkv_loop(w, u, k, v)
    err = rel_err(tk.wkv(w, u, k, v), want.double())
    ok = ok and err < 1e-4
    work = dict(bytes=3 * B * T * C * 4)
    rows.append(row("wkv", "tk", lambda: tk.wkv(w, u, k, v), repeat, work, f"rel err {err:.2g} vs the loop"))
    rows.append(row("wkv", "torch loop over t", lambda: ref.wkv_loop(w, u, k, v), max(repeat // 10, 2), work, "reference"))
    shapes = [(64, 128), (4, 1024)] if SMALL else [(4096, 1024), (64, 32768)]
    for R, N in shapes:
        x = rand(R, N)
        err = rel_err(tk.softmax(x), torch.softmax(x.double(), -1))
        ok = ok and err < 1e-5
        work = dict(bytes=2 * R * N * 4)
        rows.append(row(f"softmax {R}x{N}", "tk", lambda: tk.softmax(x), repeat, work, f"rel err {err:.2g}"))
        err = rel_err(tk.coop_softmax(x), torch.softmax(x.double(), -1))
        ok = ok and err < 1e-5
        rows.append(row(f"softmax {R}x{N}", "tk coop=32", lambda: tk.coop_softmax(x), repeat, work,
                        f"rel err {err:.2g}; a warp a row"))
        rows.append(row(f"softmax {R}x{N}", "torch.softmax", lambda: torch.softmax(x, -1), repeat, work, "reference"))
    R, N = shapes[0]
    x, wt, bs, eps = rand(R, N), rand(N), rand(N), 1e-5
    err = rel_err(tk.layernorm(x, wt, bs, eps), F.layer_norm(x.double(), (N,), wt.double(), bs.double(), eps))
    ok = ok and err < 1e-4
    work = dict(bytes=2 * R * N * 4)
    rows.append(row("layernorm", "tk", lambda: tk.layernorm(x, wt, bs, eps), repeat, work, f"rel err {err:.2g}"))
    err = rel_err(tk.coop_layernorm(x, wt, bs, eps), F.layer_norm(x.double(), (N,), wt.double(), bs.double(), eps))
    ok = ok and err < 1e-4
    rows.append(row("layernorm", "tk coop=32", lambda: tk.coop_layernorm(x, wt, bs, eps), repeat, work,
                    f"rel err {err:.2g}; a warp a row"))
    rows.append(row("layernorm", "F.layer_norm", lambda: F.layer_norm(x, (N,), wt, bs, eps), repeat, work, "reference"))
    # weight and bias None (docs/spec.md, Optional tensors): on CUDA a row of each default is filled a call
    err = rel_err(tk.layernorm(x), F.layer_norm(x.double(), (N,)))
    ok = ok and err < 1e-4
    rows.append(row("layernorm, no weight/bias", "tk (None)", lambda: tk.layernorm(x), repeat, work,
                    f"rel err {err:.2g}; a row of each default filled a call"))
    rows.append(row("layernorm, no weight/bias", "F.layer_norm", lambda: F.layer_norm(x, (N,)), repeat, work,
                    "reference"))
    rms = lambda: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * wt  # noqa: E731
    err = rel_err(tk.rmsnorm(x, wt, eps), rms().double())
    ok = ok and err < 1e-4
    rows.append(row("rmsnorm", "tk", lambda: tk.rmsnorm(x, wt, eps), repeat, work, f"rel err {err:.2g}"))
    rows.append(row("rmsnorm", "torch composite", rms, repeat, work, "reference"))
    err = rel_err(tk.cumsum(x), torch.cumsum(x.double(), -1))
    ok = ok and err < 1e-4
    rows.append(row("cumsum", "tk", lambda: tk.cumsum(x), repeat, work, f"rel err {err:.2g}"))
    rows.append(row("cumsum", "torch.cumsum", lambda: torch.cumsum(x, -1), repeat, work, "reference"))
    return rows, ok


def bench_optim(repeat):
    """An AdamW step updating in place (examples/specs/optim.tk's adamw_: p,
    m, v written where they are) against torch.optim.AdamW, fused and foreach,
    one flat float32 parameter; checked against torch's step first."""
    torch_tk.load(os.path.join(HERE, "..", "examples", "specs", "optim.tk"))
    tk = torch.ops.tk
    n = 4096 if SMALL else 1 << 24
    g = torch.Generator(device="cpu").manual_seed(0)
    p0, grad = torch.randn(n, generator=g).to(DEVICE), torch.randn(n, generator=g).to(DEVICE)
    hyper = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)

    def torch_step(**kind):
        p = torch.nn.Parameter(p0.clone())
        p.grad = grad.clone()
        opt = torch.optim.AdamW([p], **hyper, **kind)
        return p, opt.step

    p, m, v = p0.clone(), torch.zeros_like(p0), torch.zeros_like(p0)
    step = lambda: tk.adamw_(p, grad, m, v, 1e-3, 0.9, 0.999, 1e-8, 0.01, 1)  # noqa: E731
    want, first = torch_step(foreach=False)
    first()
    step()
    err = rel_err(p, want.detach().double())
    ok = err < 1e-5
    work = dict(bytes=28 * n)
    rows = [row("adamw step", "tk adamw_", step, repeat, work, f"rel err {err:.2g} vs torch; in place")]
    for label, kind in (("torch fused", dict(fused=True)), ("torch foreach", dict(foreach=True))):
        rows.append(row("adamw step", label, torch_step(**kind)[1], repeat, work, "reference"))
    return rows, ok


def coop_copy(path, name, coop):
    """The ops of spec file `path` renamed `name`_coop<coop>... with a
    'schedule coop=<coop>' line each (before its first scratch line), loaded:
    the cooperative form (opt-in, untimed) beside the default one."""
    out, seen = [], False
    for line in open(path).read().replace(name, f"{name}_coop{coop}").splitlines():
        if line.startswith("op "):
            seen = False
        if line.startswith("    scratch ") and not seen:
            out.append(f"    schedule coop={coop}")
            seen = True
        out.append(line)
    torch_tk.kernel("\n".join(out) + "\n", file=f"{name}_coop{coop}.tk")


def bench_selective_scan(repeat):
    """Mamba's selective scan (examples/specs/selective_scan.tk), forward and
    forward + backward, against mamba_ssm's reference formulation in torch (a
    loop over t), Mamba-130M's inner width; checked against it first. Also in
    the cooperative form (schedule coop=16: 16 lanes a (batch row, channel),
    the loops over the state dealt over them; opt-in until this decides)."""
    spec = os.path.join(HERE, "..", "examples", "specs", "selective_scan.tk")
    torch_tk.load(spec)
    coop_copy(spec, "selective_scan", 16)
    tk = torch.ops.tk
    B, E, L, N = (1, 8, 32, 4) if SMALL else (2, 1536, 1024, 16)
    g = torch.Generator(device="cpu").manual_seed(0)
    rand = lambda *s: torch.randn(*s, generator=g).to(DEVICE)  # noqa: E731
    u, delta = rand(B, E, L), torch.rand(B, E, L, generator=g).to(DEVICE) * 0.1
    A, Bm, Cm, D = -torch.rand(E, N, generator=g).to(DEVICE) * 4, rand(B, N, L), rand(B, N, L), rand(E)
    args = [t.requires_grad_() for t in (u, delta, A, Bm, Cm, D)]
    gy = rand(B, E, L)
    y = tk.selective_scan(*args)[0]
    want = ref.selective_scan_loop(*args)[0]
    err = rel_err(y, want.detach().double())
    got_g = torch.autograd.grad(y, args, gy)
    want_g = torch.autograd.grad(want, args, gy)
    gerr = max(rel_err(a, b.double()) for a, b in zip(got_g, want_g))
    ok = err < 1e-4 and gerr < 1e-3
    work = dict(bytes=(4 * B * E * L + 2 * B * N * L) * 4)
    slow = max(repeat // 10, 2)

    def both(f):
        return lambda: torch.autograd.grad(f(*args)[0], args, gy)

    with torch.no_grad():
        rows = [row("selective scan", "tk", lambda: tk.selective_scan(*args), repeat, work,
                    f"rel err {err:.2g} vs the loop"),
                row("selective scan", "torch loop over t", lambda: ref.selective_scan_loop(*args), slow, work,
                    "reference (mamba_ssm's selective_scan_ref)")]
    y16 = tk.selective_scan_coop16(*args)[0]
    err16 = rel_err(y16, want.detach().double())
    gerr16 = max(rel_err(a, b.double()) for a, b in zip(torch.autograd.grad(y16, args, gy), want_g))
    ok = ok and err16 < 1e-4 and gerr16 < 1e-3
    with torch.no_grad():
        rows.append(row("selective scan", "tk coop=16", lambda: tk.selective_scan_coop16(*args), repeat, work,
                        f"rel err {err16:.2g}; 16 lanes an iteration"))
    rows += [row("selective scan fwd+bwd", "tk", both(tk.selective_scan), max(repeat // 5, 3), work,
                 f"grads rel err {gerr:.2g} vs the loop's"),
             row("selective scan fwd+bwd", "tk coop=16", both(tk.selective_scan_coop16), max(repeat // 5, 3), work,
                 f"grads rel err {gerr16:.2g}; 16 lanes an iteration"),
             row("selective scan fwd+bwd", "torch loop over t", both(ref.selective_scan_loop), slow, work,
                 "reference")]
    return rows, ok


def bench_derived(repeat):
    """Backward ops derived by `backward auto` (docs/autograd.md): forward +
    backward of examples/specs/activations.tk's bias_gelu against
    F.gelu(x + bias), and of the derived dropout (tests/specs/autodiff.tk)
    against the hand-written one (examples/specs/dropout.tk), and of the row
    loops of tests/specs/autodiff_rows.tk (layer norm, softmax) against
    torch's; checked first."""
    for spec in ("examples/specs/activations.tk", "examples/specs/dropout.tk", "tests/specs/autodiff.tk",
                 "tests/specs/autodiff_rows.tk"):
        torch_tk.load(os.path.join(HERE, "..", spec))
    tk = torch.ops.tk
    R, N = (16, 64) if SMALL else (8192, 4096)
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(R, N, generator=g).to(DEVICE).requires_grad_()
    bias = torch.randn(N, generator=g).to(DEVICE).requires_grad_()
    gy = torch.randn(R, N, generator=g).to(DEVICE)
    got = torch.autograd.grad(tk.bias_gelu(x, bias), (x, bias), gy)
    want = torch.autograd.grad(F.gelu(x + bias), (x, bias), gy)
    err = max(rel_err(a, b.double()) for a, b in zip(got, want))
    hand = torch.autograd.grad(tk.dropout(x, 0.1, 5), (x,), gy)[0]
    same = torch.equal(torch.autograd.grad(tk.ad_dropout(x, 0.1, 5), (x,), gy)[0], hand)
    # row loops: layer norm with weight and bias, softmax, (4096, 1024)
    RR, RN = (8, 100) if SMALL else (4096, 1024)
    xr = torch.randn(RR, RN, generator=g).to(DEVICE).requires_grad_()
    wr, br = (torch.randn(RN, generator=g).to(DEVICE).requires_grad_() for _ in range(2))
    gr = torch.randn(RR, RN, generator=g).to(DEVICE)
    ln = lambda: tk.ar_layernorm(xr, wr, br, 1e-5)   # noqa: E731
    ln_ref = lambda: F.layer_norm(xr, (RN,), wr, br, 1e-5)   # noqa: E731
    err_ln = max(rel_err(a, b.double()) for a, b in zip(torch.autograd.grad(ln(), (xr, wr, br), gr),
                                                         torch.autograd.grad(ln_ref(), (xr, wr, br), gr)))
    err_sm = rel_err(torch.autograd.grad(tk.ar_softmax(xr), xr, gr)[0],
                     torch.autograd.grad(torch.softmax(xr, -1), xr, gr)[0].double())
    ok = err < 1e-4 and same and err_ln < 1e-4 and err_sm < 1e-4
    work = dict(bytes=4 * R * N * 4)   # x and y forward; x, grad_y and grad_x backward (bias's sum aside)
    rwork = dict(bytes=4 * RR * RN * 5)   # x and y forward; x, grad_y and grad_x backward: the least traffic

    def fb(f, *leaves, gy=gy):
        return lambda: torch.autograd.grad(f(), leaves, gy)

    return [row("bias_gelu fwd+bwd", "tk backward auto", fb(lambda: tk.bias_gelu(x, bias), x, bias), repeat, work,
                f"grads rel err {err:.2g} vs torch's"),
            row("bias_gelu fwd+bwd", "F.gelu(x + bias)", fb(lambda: F.gelu(x + bias), x, bias), repeat, work,
                "reference"),
            row("dropout fwd+bwd", "tk backward auto", fb(lambda: tk.ad_dropout(x, 0.1, 5), x), repeat, work,
                f"grad {'bit-equal to' if same else 'DIFFERS from'} the written one's"),
            row("dropout fwd+bwd", "tk backward by hand", fb(lambda: tk.dropout(x, 0.1, 5), x), repeat, work,
                "reference"),
            row("dropout fwd+bwd", "F.dropout", fb(lambda: F.dropout(x, 0.1), x), repeat, work, "reference"),
            row(f"layernorm {RR}x{RN} fwd+bwd", "tk backward auto (row loop)", fb(ln, xr, wr, br, gy=gr), repeat,
                rwork, f"grads rel err {err_ln:.2g} vs torch's"),
            row(f"layernorm {RR}x{RN} fwd+bwd", "F.layer_norm", fb(ln_ref, xr, wr, br, gy=gr), repeat, rwork,
                "reference"),
            row(f"softmax {RR}x{RN} fwd+bwd", "tk backward auto (row loop)",
                fb(lambda: tk.ar_softmax(xr), xr, gy=gr), repeat, rwork, f"grad rel err {err_sm:.2g} vs torch's"),
            row(f"softmax {RR}x{RN} fwd+bwd", "torch.softmax", fb(lambda: torch.softmax(xr, -1), xr, gy=gr), repeat,
                rwork, "reference")], ok


def bench_call_overhead(repeat):
    """Host time per call on a tiny input (launch overhead): tk vs torch.add."""
    w, k = torch.rand(2, 4, device=DEVICE), torch.rand(1, 2, 4, device=DEVICE)
    x = torch.rand(1, 2, 4, device=DEVICE)
    n = 200 if SMALL else 2000

    def timed(fn):
        def loop():
            for _ in range(n):
                out = fn()
            if DEVICE == "cuda":
                torch.cuda.synchronize()
            return out
        return loop

    rows = []
    rwkv, add = torch.ops.tk.rwkv_forward.default, torch.ops.aten.add.Tensor   # both through the dispatcher
    for impl, fn in (("tk rwkv_forward (8 el.)", lambda: rwkv(w, k, 0.1)),
                     ("torch.add (8 el.)", lambda: add(x, x))):
        loop = timed(fn)
        med, times = cpu_time_ms(loop, max(repeat // 10, 5))   # wall clock: the host's cost
        r = dict(op="per call", impl=impl, median_ms=med, times_ms=times, kernels_per_call=len(kernels_per_call(fn)[0]),
                 kernel_names=[], copies_per_call=0, napkin=f"{med / n * 1e3:.2f} us/call", check=f"{n} calls",
                 peak_mem_bytes=None, calls=n)
        print(f"  {'per call':13s} {impl:24s} {med / n * 1e3:9.3f} us/call", flush=True)
        rows.append(r)
    return rows


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
    head = f"{'op':22s} {'impl':28s} {'median ms':>10s} {'kernels':>8s} {'napkin':>14s} {'peak MB':>8s}  check"
    lines = [head, "-" * len(head)]
    for r in rows:
        mem = "-" if r.get("peak_mem_bytes") is None else f"{r['peak_mem_bytes'] / 1e6:.0f}"
        lines.append(f"{r['op']:22s} {r['impl']:28s} {r['median_ms']:10.3f} {r['kernels_per_call']:8d} "
                     f"{r['napkin']:>14s} {mem:>8s}  {r['check']}")
    for r in latency:
        lines.append(f"{r['op']:22s} {'first call cold / warm':28s} {r['cold_first_ms']:8.1f} / "
                     f"{r['warm_first_ms']:.1f} ms (steady {r['steady_ms']:.3f} ms)")
    return "\n".join(lines)


def summary(rows) -> list:
    """Each figure next to the performance issue's GPU target."""
    def ms(op, impl):
        return next((r["median_ms"] for r in rows if r["op"] == op and r["impl"] == impl), None)

    out = []
    pad, seed, copy = ms("brick_pad", "tk"), ms("brick_pad", "torch_pad (seed)"), ms("device copy", "dst.copy_(src)")
    if pad and copy:
        s = seed_config()
        frac = (s.H * s.W * 4 / pad) / (2 * s.H * s.W * 4 / copy)
        out.append(f"brick_pad: {pad * 1e3:.1f} us (target <= 40 us), {frac:.0%} of the device copy's bandwidth "
                   f"(target >= 85%), {seed / pad:.0f}x torch_pad (target >= 300x)")
    fw, cf = ms("rwkv_forward", "tk"), ms("rwkv_forward", "F.conv1d (tf32 off)")
    if fw and cf:
        out.append(f"rwkv_forward: {fw:.3f} ms (target <= 0.30 ms), {cf / fw:.1f}x F.conv1d tf32 off (target >= 30x)")
    bw, cb = ms("rwkv_backward", "tk (autograd)"), ms("rwkv_backward", "F.conv1d autograd (tf32 off)")
    if bw and cb:
        out.append(f"rwkv backward: {bw:.3f} ms (target <= 0.70 ms), {cb / bw:.1f}x conv1d autograd (target >= 30x)")
        gw, gk = ms("rwkv_backward", "tk rwkv_backward_w alone"), ms("rwkv_backward", "tk rwkv_backward_k alone")
        if gw and gk:
            out.append(f"rwkv backward split: backward_w {gw:.3f} ms + backward_k {gk:.3f} ms "
                       f"(the rest of the autograd call: {bw - gw - gk:.3f} ms)")
    for dt in ("bfloat16", "float16"):
        t = ms("rwkv_forward", f"tk {dt}")
        if t and fw:
            out.append(f"rwkv_forward {dt}: {t:.3f} ms = {t / fw:.2f}x the float32 time (target <= 1.00x)")
    tk_call = next((r for r in rows if r["op"] == "per call" and r["impl"].startswith("tk")), None)
    add_call = next((r for r in rows if r["op"] == "per call" and r["impl"].startswith("torch.add")), None)
    if tk_call and add_call:
        a, b = tk_call["median_ms"] / tk_call["calls"] * 1e3, add_call["median_ms"] / add_call["calls"] * 1e3
        out.append(f"per call (launch overhead): tk {a:.2f} us vs torch.add {b:.2f} us = {a / b:.2f}x")
    wk, wl = ms("wkv", "tk"), ms("wkv", "torch loop over t")
    wkv_bytes = next((r["bytes"] for r in rows if r["op"] == "wkv"), 0)
    if wk and wl:
        line = f"wkv forward: {wk:.3f} ms, {wl / wk:.0f}x the torch loop over t"
        if copy:
            s = seed_config()
            frac = (wkv_bytes / wk) / (2 * s.H * s.W * 4 / copy)
            line += f", {frac:.0%} of the device copy's bandwidth (target >= 50%)"
        out.append(line)
    for op, ref_impl in (("softmax 4096x1024", "torch.softmax"), ("softmax 64x32768", "torch.softmax"),
                         ("layernorm", "F.layer_norm"), ("rmsnorm", "torch composite"), ("cumsum", "torch.cumsum")):
        a, b = ms(op, "tk"), ms(op, ref_impl)
        if a and b:
            out.append(f"{op}: tk {a:.3f} ms = {a / b:.2f}x {ref_impl}" +
                       (" (target <= 1.5x)" if op.startswith("softmax") else ""))
        c = ms(op, "tk coop=32")
        if a and c:   # the opt-in cooperative form against the default: decides whether it becomes one
            out.append(f"{op}: tk coop=32 (a warp a row) {c:.3f} ms = {c / a:.2f}x a thread a row" +
                       (f", {c / b:.2f}x {ref_impl}" if b else ""))
    for op in ("selective scan", "selective scan fwd+bwd"):
        a, b = ms(op, "tk"), ms(op, "torch loop over t")
        if a and b:   # (the backward's B and C gradients run B*N threads: where the time goes on a GPU)
            out.append(f"{op}: tk {a:.3f} ms, {b / a:.1f}x the torch loop over t (mamba_ssm's reference)")
        c = ms(op, "tk coop=16")
        if a and c:   # the opt-in cooperative form against the default: decides whether it becomes one
            out.append(f"{op}: tk coop=16 (16 lanes an iteration) {c:.3f} ms = {c / a:.2f}x a thread an iteration")
    for op, ref_impl in (("bias_gelu fwd+bwd", "F.gelu(x + bias)"), ("dropout fwd+bwd", "tk backward by hand")):
        a, b = ms(op, "tk backward auto"), ms(op, ref_impl)
        if a and b:
            out.append(f"{op}: tk backward auto {a:.3f} ms = {a / b:.2f}x {ref_impl}")
    for op, tk_impl, ref_impl in (("brick_pad", "tk", "torch_pad (seed)"),
                                  ("rwkv_forward", "tk", "F.conv1d (tf32 off)")):
        m = {r["impl"]: r.get("peak_mem_bytes") for r in rows if r["op"] == op}
        if m.get(tk_impl) is not None and m.get(ref_impl) is not None:
            out.append(f"{op} peak memory: tk {m[tk_impl] / 1e6:.0f} MB vs {ref_impl} {m[ref_impl] / 1e6:.0f} MB")
    return out


def main(argv=None) -> int:
    global DEVICE, SMALL
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON")
    ap.add_argument("--repeat", type=int, default=50, help="timed calls per case (median)")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                    help="cpu: a dry run of this script (with --small), not a benchmark")
    ap.add_argument("--small", action="store_true", help="small sizes (for the dry run)")
    args = ap.parse_args(argv)
    DEVICE, SMALL = args.device, args.small
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("gpu_bench: no CUDA GPU", file=sys.stderr)
        return 2
    if DEVICE == "cuda":
        props = torch.cuda.get_device_properties(0)
        name, sm, sms = props.name, f"sm_{props.major}{props.minor}", props.multi_processor_count
    else:
        name, sm, sms = "cpu (dry run)", "", 0
    print(f"{name}, {sm}, {sms} SMs; torch {torch.__version__}", flush=True)
    brick, brick_ok = bench_brick_pad(args.repeat)
    copy, copy_ok = bench_copy(args.repeat)
    rwkv, rwkv_ok = bench_rwkv(args.repeat)
    back, back_ok = bench_rwkv_backward(args.repeat)
    half, half_ok = bench_rwkv_dtypes(args.repeat)
    loops, loops_ok = bench_row_loops(args.repeat)
    optim, optim_ok = bench_optim(args.repeat)
    scan, scan_ok = bench_selective_scan(args.repeat)
    derived, derived_ok = bench_derived(args.repeat)
    calls = bench_call_overhead(args.repeat)
    latency = first_call_latency() if DEVICE == "cuda" else []
    rows = brick + copy + rwkv + back + half + loops + optim + scan + derived + calls
    table = format_table(rows, latency)
    lines = summary(rows)
    ok = brick_ok and copy_ok and rwkv_ok and back_ok and half_ok and loops_ok and optim_ok and scan_ok and derived_ok and \
        (DEVICE != "cuda" or all(r["kernels_per_call"] == 1 for r in brick + rwkv + half if r["impl"].startswith("tk")))
    if args.json:
        info = gpu.info() if DEVICE == "cuda" else ""
        result = dict(
            date=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            gpu=name, sm=sm, sms=sms, torch=torch.__version__, cuda=torch.version.cuda,
            nvrtc=next((line for line in info.splitlines() if line.startswith("nvrtc:")), ""),
            driver=next((line for line in info.splitlines() if line.startswith("driver:")), ""),
            repeat=args.repeat, small=SMALL, ok=ok, results=rows, first_call=latency, table=table, summary=lines)
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    print()
    print(table)
    print()
    for line in lines:
        print("[gpu] " + line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
