#!/usr/bin/env python3
"""CUDA tile shapes measured side by side (ci/gpu-check.sh's tune step): each
shape of TK_CUDA_TUNE (see compiler/schedule.c) in a fresh process, every kernel
checked against a float64 reference, then timed with CUDA events (median of
--repeat after a warm-up), at the seed sizes:

  rwkv_forward f32 / bf16, rwkv_backward_w f32, rwkv_backward_k f32
      B=32, C=768, T=768 (14.5 GFLOP each): shapes lanes x rows x warp_rows,
      split (threads a tile sharing rwkv_backward_w's batch sum), ldg
      (bytes of one load of a round's stream), tiles (1: one tile a
      thread, as measured before the mirrored default) and regs (a register
      cap: 128 keeps 16 warps an SM where the kernels take 150-180)
  brick_pad f32, seed configuration (136 MB written): chunk bytes
  softmax f32 (4096, 1024) and (64, 32768), layernorm f32 (4096, 1024), the
      row loops of examples/specs: coop (lanes of a warp sharing a row,
      opt-in and untimed until this runs) against a thread a row (default)
  layer norm's weight gradients f32 (4096, 1024): parts (threads adding into
      copies, opt-in and untimed until this runs) against one thread
      (examples/specs' layernorm_backward_wb, default), and the fused
      backward of tests/specs/sums.tk (in parts by its schedule line)

The kernels of all shapes are compiled first, in parallel processes (NVRTC
runs on the CPU), into one disk cache; the timed processes then load them.
Prints a table per kernel, fastest first, and writes JSON with --json.

    PYTHONPATH=python TK_LIBRARY=build/libtk.so python3 ci/gpu_tune.py [--json PATH] [--quick]
    TK_TUNE_DEVICE=cpu ... ci/gpu_tune.py --quick --small   (a dry run: no GPU, the shapes change
        nothing; every shape is parsed, two of each step run)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

TILES = ["", "lanes=16,rows=4,warp_rows=8", "lanes=16,rows=2,warp_rows=8", "lanes=16,rows=1", "lanes=8,rows=4",
         "lanes=8,rows=2", "lanes=8,rows=8", "lanes=4,rows=4", "lanes=16,rows=2,warp_rows=16",
         "lanes=8,rows=4,warp_rows=8", "lanes=8,rows=4,warp_rows=16", "lanes=16,rows=2,warp_rows=32",
         "lanes=8,rows=2,warp_rows=32", "lanes=16,rows=4,warp_rows=2", "lanes=8,rows=2,warp_rows=2",
         "split=1", "split=2", "split=4", "split=16", "split=32", "ldg=4", "ldg=8", "tiles=1",
         "regs=128", "regs=128,tiles=1"]
CHUNKS = ["", "chunk=16", "chunk=64", "chunk=128"]
# --quick: the default next to the shape it replaced (4 rows, 8 warp rows),
# the fastest rwkv_backward_w shape of the first sweep, and that op's batch
# sum on one thread a tile (split=1, as measured before its schedule line
# said split=8) and on 16 (split: only rwkv_backward_w's loop qualifies), and
# the rounds' streams loaded one by one (ldg=4: float32 as before 16-byte
# loads) and 8 bytes at a time, one tile a thread instead of a tile and its
# mirror image (tiles=1), the whole shape as timed on 2026-12-04, and at most
# 128 registers a thread (regs=128: 16 warps an SM instead of 12; ptxas
# spills outside the forward's hot loop, and much in rwkv_backward_w's)
QUICK_TILES = ["", "lanes=16,rows=4,warp_rows=8", "lanes=16,rows=4,warp_rows=2", "split=1", "split=16",
               "ldg=4", "ldg=8", "tiles=1", "ldg=4,tiles=1", "regs=128"]
QUICK_CHUNKS = ["", "chunk=16"]
# row loops: a thread a row (the default) against cooperative rows
ROWS = ["", "coop=32", "coop=16", "coop=8", "coop=4"]
QUICK_ROWS = ["", "coop=32"]
# sums (opt-in, untimed until this runs): layer norm's weight gradients on
# one thread (examples/specs' one-iteration row loop, the default) against
# threads adding into copies (parts=N); the fused backward of
# tests/specs/sums.tk runs in parts only (its schedule line: parts=1024)
SUMS = ["", "parts=64", "parts=256", "parts=4096"]
QUICK_SUMS = ["", "parts=256"]

WORKER = r"""
import json, os, statistics, sys, time, torch
import torch_tk
from torch_tk import reference as ref
which, repeat, compile_only = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
torch.manual_seed(0)
dev = os.environ.get("TK_TUNE_DEVICE", "cuda")   # cpu: a dry run of this script (the CUDA tune has no effect)
sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
r, s = ref.RWKV_SEED, ref.SEED
if os.environ.get("TK_TUNE_SMALL") == "1":   # --small: the dry run's sizes
    from types import SimpleNamespace
    r = SimpleNamespace(B=3, C=8, T=40, eps=0.1)
    s = SimpleNamespace(TW=32, TH=48, pw=100, ph=60, stagger=10)
    s.W, s.H = s.TW + 2 * s.pw, s.TH + 2 * s.ph
cases = []
if which == "tiles":
    w, k = ref.rwkv_inputs(r.B, r.C, r.T, device=dev, seed=0)
    g = torch.randn(r.B, r.C, r.T, device=dev)
    flop = r.B * r.C * r.T * (r.T + 1)
    if compile_only:
        w, k, g = w[:, :40].contiguous(), k[:2, :, :40].contiguous(), g[:2, :, :40].contiguous()
        want = {}
    else:
        wd, kd = w.double().requires_grad_(), k.double().requires_grad_()
        out = ref.rwkv_conv1d(wd, kd, r.eps)
        gw, gk = torch.autograd.grad(out, (wd, kd), g.double())
        want = dict(fwd=out.detach(), gw=gw, gk=gk)
    wb, kb = w.bfloat16(), k.bfloat16()
    cases = [("rwkv_forward f32", lambda: torch.ops.tk.rwkv_forward(w, k, r.eps), "fwd", 1e-4, flop),
             ("rwkv_forward bf16", lambda: torch.ops.tk.rwkv_forward(wb, kb, r.eps), "fwd", 3e-2, flop),
             ("rwkv_backward_w f32", lambda: torch.ops.tk.rwkv_backward_w(k, g), "gw", 1e-4, flop),
             ("rwkv_backward_k f32", lambda: torch.ops.tk.rwkv_backward_k(w, g), "gk", 1e-4, flop)]
elif which == "rows":
    import torch.nn.functional as F
    for name in ("softmax", "layernorm"):
        torch_tk.load(os.path.join(os.environ["TK_TUNE_ROOT"], "examples", "specs", name + ".tk"))
    small = os.environ.get("TK_TUNE_SMALL") == "1"
    (R, N), (R2, N2) = ((64, 100), (4, 1000)) if small else ((4096, 1024), (64, 32768))
    x, x2 = torch.randn(R, N, device=dev), torch.randn(R2, N2, device=dev)
    wt, bs = torch.randn(N, device=dev), torch.randn(N, device=dev)
    if compile_only:
        x, x2 = x[:2], x2[:2]
        want = {}
    else:
        want = dict(sm=torch.softmax(x.double(), -1), sm2=torch.softmax(x2.double(), -1),
                    ln=F.layer_norm(x.double(), (N,), wt.double(), bs.double(), 1e-5))
    cases = [(f"softmax f32 {R}x{N}", lambda: torch.ops.tk.softmax(x), "sm", 1e-5, 0),
             (f"softmax f32 {R2}x{N2}", lambda: torch.ops.tk.softmax(x2), "sm2", 1e-5, 0),
             (f"layernorm f32 {R}x{N}", lambda: torch.ops.tk.layernorm(x, wt, bs, 1e-5), "ln", 1e-4, 0)]
elif which == "sums":
    import torch.nn.functional as F
    root = os.environ["TK_TUNE_ROOT"]
    torch_tk.load(os.path.join(root, "examples", "specs", "layernorm.tk"))
    torch_tk.load(os.path.join(root, "tests", "specs", "sums.tk"))
    small = os.environ.get("TK_TUNE_SMALL") == "1"
    R, N = (64, 100) if small else (4096, 1024)
    x, gy, wt = torch.randn(R, N, device=dev), torch.randn(R, N, device=dev), torch.randn(N, device=dev)
    if compile_only:
        x, gy = x[:2], gy[:2]
        want = {}
    else:
        xd, wd, bd = x.double(), wt.double().requires_grad_(), torch.zeros(N, dtype=torch.float64, device=dev)
        bd.requires_grad_()
        gw, gb = torch.autograd.grad(F.layer_norm(xd, (N,), wd, bd, 1e-5), (wd, bd), gy.double())
        want = dict(wb=torch.cat((gw, gb)))

    def fused():
        o = torch.ops.tk.sum_layernorm_backward(x, wt, 1e-5, gy)
        return torch.cat((o[1], o[2]))
    cases = [(f"layernorm_backward_wb f32 {R}x{N}", lambda: torch.cat(torch.ops.tk.layernorm_backward_wb(x, 1e-5, gy)),
              "wb", 1e-4, 0),
             (f"sum_layernorm_backward f32 {R}x{N}", fused, "wb", 1e-4, 0)]
else:
    tile = ref.seed_tile(dev) if s.TH == ref.SEED.TH and s.TW == ref.SEED.TW else torch.rand(s.TH, s.TW, device=dev)
    if compile_only:
        want = {}
    else:
        want = dict(pad=ref.torch_pad(tile, s.pw, s.ph, s.stagger).reshape(s.H, s.W).double())
    cases = [("brick_pad f32", lambda: torch.ops.tk.brick_pad(tile, s.pw, s.ph, s.stagger), "pad", 0.0, 0)]
rows = []
for name, fn, key, bound, flop in cases:
    if compile_only:
        fn(); sync(); continue
    out = fn()
    shape, dtype = out.shape, out.dtype
    del out
    poison = torch.full(shape, float("nan"), dtype=dtype, device=dev)   # the block the next output reuses
    del poison
    got = fn().double()
    ref_ = want[key]
    err = ((got - ref_).abs().max() / ref_.abs().max()).item()
    ok = bool(torch.isfinite(got).all()) and err <= bound
    for _ in range(3):
        fn()
    if dev == "cuda":
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeat)]
        sync()
        for a, b in ev:
            a.record(); fn(); b.record()
        sync()
        ms = statistics.median(a.elapsed_time(b) for a, b in ev)
    else:
        ts = []
        for _ in range(repeat):
            t = time.perf_counter(); fn(); ts.append((time.perf_counter() - t) * 1e3)
        ms = statistics.median(ts)
    rows.append(dict(kernel=name, ms=ms, rel_err=err, ok=ok, flop=flop,
                     bytes=(s.H * s.W * 4 if which == "pads" else 0)))
print("RESULT " + json.dumps(rows))
"""


def run(which: str, tune: str, repeat: int, compile_only: bool, env: dict):
    e = dict(env, TK_CUDA_TUNE=tune, TK_TUNE_ROOT=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = subprocess.run([sys.executable, "-c", WORKER, which, str(repeat), "1" if compile_only else "0"],
                       env=e, capture_output=True, text=True, timeout=240)
    if p.returncode != 0:
        return None, p.stderr[-1500:]
    line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
    return (json.loads(line[0][7:]) if line else []), ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="the default shape and a few others only")
    ap.add_argument("--small", action="store_true",
                    help="small sizes; with TK_TUNE_DEVICE=cpu, the dry run the test suite makes")
    args = ap.parse_args(argv)
    plan = [("tiles", t) for t in (QUICK_TILES if args.quick else TILES)] + \
        [("pads", c) for c in (QUICK_CHUNKS if args.quick else CHUNKS)] + \
        [("rows", c) for c in (QUICK_ROWS if args.quick else ROWS)] + \
        [("sums", c) for c in (QUICK_SUMS if args.quick else SUMS)]
    env = dict(os.environ)
    env.setdefault("TK_CACHE_DIR", tempfile.mkdtemp(prefix="tk-tune-"))
    if args.small:
        env["TK_TUNE_SMALL"] = "1"
    gpu = env.get("TK_TUNE_DEVICE", "cuda") == "cuda"
    if not gpu:
        # a dry run: every shape parsed by the library (a malformed one
        # would fail each process on the GPU), the first two of each step
        # run (the default and another: on the CPU the shape changes nothing)
        from torch_tk.gpu import check_tune
        for _, tune in plan:
            check_tune(tune)
        plan = [p for k, p in enumerate(plan) if [q[0] for q in plan[:k]].count(p[0]) < 2]
    with ThreadPoolExecutor(max_workers=min(len(plan), os.cpu_count() or 4) if gpu else 1) as ex:
        for (which, tune), (res, err) in zip(plan, ex.map(lambda p: run(p[0], p[1], 1, True, env),
                                                          plan if gpu else [])):
            if res is None:
                print(f"compile {which} [{tune or 'default'}] FAILED:\n{err}", flush=True)
    results, failed = [], 0

    def dump(lines, done):
        if args.json:   # after every shape: a step stopped at its time limit keeps what it measured
            with open(args.json, "w") as f:
                json.dump(dict(results=results, summary=lines, repeat=args.repeat, complete=done), f, indent=2)
                f.write("\n")

    for which, tune in plan:
        res, err = run(which, tune, args.repeat, False, env)
        if res is None:
            failed += 1
            print(f"{which} [{tune or 'default'}] FAILED:\n{err}", flush=True)
            continue
        for r in res:
            r["tune"] = tune or "default"
            results.append(r)
            print(f"  {r['kernel']:20s} {r['tune']:30s} {r['ms']:8.3f} ms  rel err {r['rel_err']:.2g}"
                  f"{'' if r['ok'] else '  WRONG'}", flush=True)
        dump([], False)
    lines = []
    for kernel in dict.fromkeys(r["kernel"] for r in results):
        rows = sorted((r for r in results if r["kernel"] == kernel), key=lambda r: r["ms"])
        base = next((r["ms"] for r in rows if r["tune"] == "default"), None)
        lines.append(f"{kernel}: " + ", ".join(
            f"{r['tune']} {r['ms']:.3f}" + ("" if r["ok"] else " WRONG") for r in rows[:5]) +
            (f"  (default {base:.3f} ms)" if base else ""))
    print()
    for line in lines:
        print("[tune] " + line)
    dump(lines, True)
    wrong = [r for r in results if not r["ok"]]
    return 1 if failed or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
