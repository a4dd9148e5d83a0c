"""Lane tiles for loops with fixed bounds (compiler/plan_lanes.c,
lane_fixed_loops), side by side.

The ops whose plan the change would touch (the innermost variable moves
only unit loads along their last dim inside loops whose bounds are the same
in every lane): a matmul written with its weight stored (K, N) as a user
wrote it, rotary's table gradients, the WKV weight gradients and the
quadratic WKV of examples/specs, float32 (backward ops called directly).
The dot-product matmul (weight (N, K): its plan is unchanged) and torch's
own op are the yardsticks. The libtk of each --lib (the one before the
change and the one after) runs in its own child process; the children
alternate (--rounds of each) and the table gives the median of every
child's median (ms). One thread (torch.set_num_threads(1)) unless --threads.

    PYTHONPATH=python python3 bench/fixed_loop_lanes.py --lib OLD/libtk.so --lib build/libtk.so [--rounds 3]
"""
import os

from timing import lib_main, median_ms   # bench/timing.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MATMUL = """
op bench_mm_kn(x: float[B, K], wt: x.dtype[K, N]) -> y: x.dtype[B, N]:
    for b, n in y:
        s = 0.0
        for k in range(K):
            s += x[b, k] * wt[k, n]
        y[b, n] = s

op bench_mm_nk(x: float[B, K], w: x.dtype[N, K]) -> y: x.dtype[B, N]:
    for b, n in y:
        s = 0.0
        for k in range(K):
            s += x[b, k] * w[n, k]
        y[b, n] = s
"""


def child(repeat: int, threads: int) -> dict:
    import torch
    import torch_tk
    torch.set_num_threads(threads)
    torch_tk.kernel(MATMUL, file="bench_mm.tk")
    for name in ("rotary", "wkv", "wkv_quadratic"):
        torch_tk.load(os.path.join(ROOT, "examples", "specs", f"{name}.tk"))
    tk = torch.ops.tk
    g = torch.Generator().manual_seed(0)
    out = {}
    x, w = torch.randn(256, 512, generator=g), torch.randn(512, 512, generator=g)
    wt = w.t().contiguous()
    torch.testing.assert_close(tk.bench_mm_kn(x, wt), x @ wt, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(tk.bench_mm_nk(x, w), x @ w.t(), rtol=1e-4, atol=1e-3)
    out["matmul 256x512x512, weight (K, N) tk"] = median_ms(lambda: tk.bench_mm_kn(x, wt), repeat)
    out["matmul 256x512x512, weight (N, K) tk"] = median_ms(lambda: tk.bench_mm_nk(x, w), repeat)
    out["matmul 256x512x512 torch (x @ w)"] = median_ms(lambda: x @ wt, repeat)
    q, go = torch.randn(8, 12, 256, 64, generator=g), torch.randn(8, 12, 256, 64, generator=g)
    gc, gs = tk.rotary_backward_tables(q, go)
    torch.testing.assert_close(gc, (go * q).sum((0, 1)), rtol=1e-4, atol=1e-3)
    out["rotary_backward_tables (8, 12, 256, 64) tk"] = median_ms(lambda: tk.rotary_backward_tables(q, go), repeat)
    out["rotary_backward_tables torch ((go * q).sum)"] = median_ms(lambda: (go * q).sum((0, 1)), repeat)
    B, T, C = 8, 256, 512
    wd = -torch.exp(torch.randn(C, generator=g))
    u, k, v, gy = (torch.randn(*s, generator=g) for s in ((C,), (B, T, C), (B, T, C), (B, T, C)))
    out["wkv_backward_wu (8, 256, 512) tk"] = median_ms(lambda: tk.wkv_backward_wu(wd, u, k, v, gy), repeat)
    Bq, Tq, Cq = 2, 64, 256
    kq, vq, gq = (torch.randn(Bq, Tq, Cq, generator=g) for _ in range(3))
    yq = tk.wkv_quadratic(wd[:Cq], u[:Cq], kq, vq)
    out["wkv_quadratic (2, 64, 256) tk"] = median_ms(lambda: tk.wkv_quadratic(wd[:Cq], u[:Cq], kq, vq), repeat)
    out["wkv_quadratic_backward_kv (2, 64, 256) tk"] = median_ms(
        lambda: tk.wkv_quadratic_backward_kv(wd[:Cq], u[:Cq], kq, vq, yq, gq), repeat)
    out["wkv_quadratic_backward_wu (2, 64, 256) tk"] = median_ms(
        lambda: tk.wkv_quadratic_backward_wu(wd[:Cq], u[:Cq], kq, vq, yq, gq), repeat)
    return out


def main() -> None:
    lib_main(__file__, __doc__, child, repeat=15, threads=1)


if __name__ == "__main__":
    main()
