"""CPU row loops in parts (docs/spec.md, Row loops), side by side in one run.

The weight gradients of examples/specs/layernorm.tk (layernorm_backward_wb,
rmsnorm_backward_w: one iteration summing over rows) run whole on one
thread (TK_CPU_PARTS=1) or cut into parts (the default, at most 16); the
same gradient written with batch dims and summed by torch
(docs/autograd.md, "Gradients summed over batch dims"; unaffected by
TK_CPU_PARTS); layer norm's whole backward as one op with sums
(tests/specs/sums.tk: grad_x and the weight and bias gradients in one pass;
TK_CPU_PARTS=1 runs it on one thread) against the example's two backward
ops; layer norm / RMS norm forward + backward against PyTorch's. TK_CPU_PARTS is
read once per process, so each setting runs in its own child process; the
children alternate (--rounds of each) and the table gives the median of
every child's median. float32.

    PYTHONPATH=python TK_LIBRARY=build/libtk.so python3 bench/row_parts.py [--rounds 3] [--repeat 15]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys

from timing import median_ms   # bench/timing.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = [(4096, 1024), (16384, 64), (512, 256), (64, 128)]
# layernorm_backward_wb with the batch dims kept: autograd sums them (here: .sum(0))
BATCH_WB = """
op bench_wb_batch(x: float[..., N], eps: float, grad_y: x.dtype[..., N])
        -> (grad_weight: x.dtype[..., N], grad_bias: x.dtype[..., N]):
    for _ in grad_weight:
        mean = 0.0
        for i in range(N):
            mean += x[i]
        mean = mean / float(N)
        var = 0.0
        for i in range(N):
            d = x[i] - mean
            var += d * d
        rstd = 1.0 / sqrt(var / float(N) + eps)
        for i in range(N):
            g = grad_y[i]
            grad_weight[i] = g * (x[i] - mean) * rstd
            grad_bias[i] = g
"""
SETTINGS = [("whole (TK_CPU_PARTS=1)", "1"), ("parts (default)", "16")]


def child(repeat):
    """Times every case in this process; prints {case: ms} as JSON."""
    import torch
    import torch.nn.functional as F

    import torch_tk
    torch_tk.load(os.path.join(ROOT, "examples", "specs", "layernorm.tk"))
    torch_tk.kernel(BATCH_WB, file="bench_wb_batch.tk")
    torch_tk.load(os.path.join(ROOT, "tests", "specs", "sums.tk"))
    tk = torch.ops.tk
    gen = torch.Generator().manual_seed(0)
    out = {}
    for r, n in SHAPES:
        x, gy = torch.randn(r, n, generator=gen), torch.randn(r, n, generator=gen)
        out[f"layernorm_backward_wb {r}x{n}"] = median_ms(lambda: tk.layernorm_backward_wb(x, 1e-5, gy), repeat)
        out[f"rmsnorm_backward_w {r}x{n}"] = median_ms(lambda: tk.rmsnorm_backward_w(x, 1e-5, gy), repeat)
        out[f"layernorm wb as batch dims + sum {r}x{n}"] = median_ms(
            lambda: [t.sum(0) for t in tk.bench_wb_batch(x, 1e-5, gy)], repeat)
        w = torch.randn(n, generator=gen)
        out[f"layernorm backward: two ops {r}x{n}"] = median_ms(
            lambda: (tk.layernorm_backward_x(x, w, 1e-5, gy), tk.layernorm_backward_wb(x, 1e-5, gy)), repeat)
        out[f"layernorm backward: one op, sums {r}x{n}"] = median_ms(
            lambda: tk.sum_layernorm_backward(x, w, 1e-5, gy), repeat)
    r, n = SHAPES[0]
    x = torch.randn(r, n, generator=gen, requires_grad=True)
    w = torch.randn(n, generator=gen, requires_grad=True)
    b = torch.randn(n, generator=gen, requires_grad=True)
    gy = torch.randn(r, n, generator=gen)

    def fb(f, params):
        return lambda: torch.autograd.grad(f(), params, gy)

    def ln_tk():
        return tk.layernorm(x, w, b, 1e-5)

    def ln_torch():
        return F.layer_norm(x, (n,), w, b, 1e-5)

    def rms_tk():
        return tk.rmsnorm(x, w, 1e-5)

    def rms_torch():
        return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-5) * w

    out[f"layernorm f+b {r}x{n}: tk"] = median_ms(fb(ln_tk, (x, w, b)), repeat)
    out[f"layernorm f+b {r}x{n}: F.layer_norm"] = median_ms(fb(ln_torch, (x, w, b)), repeat)
    out[f"rmsnorm f+b {r}x{n}: tk"] = median_ms(fb(rms_tk, (x, w)), repeat)
    out[f"rmsnorm f+b {r}x{n}: composite"] = median_ms(fb(rms_torch, (x, w)), repeat)
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="child processes per setting, alternating")
    ap.add_argument("--repeat", type=int, default=15, help="timed calls per case in a child (median)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.repeat)
    runs = {name: [] for name, _ in SETTINGS}
    for _ in range(args.rounds):
        for name, parts in SETTINGS:
            env = dict(os.environ, TK_CPU_PARTS=parts)
            res = subprocess.run([sys.executable, __file__, "--child", "--repeat", str(args.repeat)], env=env,
                                 check=True, capture_output=True, text=True)
            runs[name].append(json.loads(res.stdout.strip().splitlines()[-1]))
    import torch
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; {args.rounds} children per setting x {args.repeat} calls")
    cases = list(runs[SETTINGS[0][0]][0])
    print(f"{'case':44s} " + " ".join(f"{name:>24s}" for name, _ in SETTINGS) + "   whole/parts")
    for case in cases:
        med = [statistics.median(r[case] for r in runs[name]) for name, _ in SETTINGS]
        print(f"{case:44s} " + " ".join(f"{m:21.3f} ms" for m in med) + f"   {med[0] / med[1]:8.2f}x")
    print("\nforward + backward, PyTorch's time over tk's in the same children (> 1: tk faster):")
    for op, ref in (("layernorm", "F.layer_norm"), ("rmsnorm", "composite")):
        tk_case = next(c for c in cases if c.startswith(op + " f+b") and c.endswith(": tk"))
        ref_case = tk_case[:-len("tk")] + ref
        ratios = [f"{statistics.median(r[ref_case] / r[tk_case] for r in runs[name]):.2f}x" for name, _ in SETTINGS]
        print(f"{tk_case[:-4] + ' vs ' + ref:44s} " + " ".join(f"{x:>24s}" for x in ratios))


if __name__ == "__main__":
    main()
