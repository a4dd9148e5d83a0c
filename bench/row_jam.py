"""Jammed rows (compiler/plan_rows.c, plan_jam), side by side.

The row loops the change touches: causal attention written as a row loop
with an online softmax (tests/specs/jammed_rows.tk's jam_attention: queries
along t, the keys' and values' rows shared by 4 jammed queries), a matrix
product a row at a time (jam_rows_mm) and Mamba's selective scan forward
(examples/specs/selective_scan.tk: B's and C's columns shared by 4
channels), float32, with torch's own op beside each (F.scaled_dot_product_
attention, x @ w.t(); the selective scan has none). The libtk of each
--lib (before the change and after) runs in its own child process; the
children alternate (--rounds of each) and the table gives the median of
every child's median (ms). One thread unless --threads.

    PYTHONPATH=python python3 bench/row_jam.py --lib OLD/libtk.so --lib build/libtk.so [--rounds 3]
"""
import os

from timing import lib_main, median_ms   # bench/timing.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child(repeat: int, threads: int) -> dict:
    import torch
    import torch.nn.functional as F
    import torch_tk
    torch.set_num_threads(threads)
    torch_tk.load(os.path.join(ROOT, "tests", "specs", "jammed_rows.tk"))
    torch_tk.load(os.path.join(ROOT, "examples", "specs", "selective_scan.tk"))
    tk = torch.ops.tk
    g = torch.Generator().manual_seed(0)
    out = {}
    for bh, t, d in ((8, 512, 64), (4, 1024, 128)):
        q, k, v = (torch.randn(bh, t, d, generator=g) for _ in range(3))
        scale = d ** -0.5
        want = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        torch.testing.assert_close(tk.jam_attention(q, k, v, scale * d), want, rtol=1e-4, atol=1e-4)
        out[f"causal attention ({bh}, {t}, {d}) tk"] = median_ms(lambda: tk.jam_attention(q, k, v, scale * d), repeat)
        out[f"causal attention ({bh}, {t}, {d}) torch sdpa"] = median_ms(
            lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale), repeat)
    x, w = torch.randn(256, 512, generator=g), torch.randn(512, 512, generator=g)
    torch.testing.assert_close(tk.jam_rows_mm(x, w), x @ w.t(), rtol=1e-4, atol=1e-3)
    out["rows matmul 256x512x512 tk"] = median_ms(lambda: tk.jam_rows_mm(x, w), repeat)
    out["rows matmul 256x512x512 torch (x @ w.t())"] = median_ms(lambda: x @ w.t(), repeat)
    b, e, l, n = 2, 768, 256, 16
    u, delta = torch.randn(b, e, l, generator=g), torch.rand(b, e, l, generator=g) * 0.1
    A = -torch.rand(e, n, generator=g) * 4
    B, C, D = torch.randn(b, n, l, generator=g), torch.randn(b, n, l, generator=g), torch.randn(e, generator=g)
    out["selective_scan forward (2, 768, 256, 16) tk"] = median_ms(lambda: tk.selective_scan(u, delta, A, B, C, D),
                                                                  repeat)
    return out


def main() -> None:
    lib_main(__file__, __doc__, child, repeat=9, threads=1)


if __name__ == "__main__":
    main()
