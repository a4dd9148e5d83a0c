"""A gather in a row loop (docs/spec.md, Bounds: reads of a gather), side by side.

Cross-entropy as a user writes it (`loss = lse - logits[n, target[n]]`,
the read at the target index checked at run time) against
F.cross_entropy(reduction='none'), float32, forward only. The libtk of each
--lib (say the one before a change and the one after) runs in its own child
process; the children alternate (--rounds of each) and the table gives the
median of every child's median (ms).

    PYTHONPATH=python python3 bench/gather_rows.py --lib OLD/libtk.so --lib build/libtk.so [--rounds 3]
"""

from timing import lib_main, median_ms   # bench/timing.py

SHAPES = [(4096, 1000), (512, 32000), (65536, 32)]
XENT = """
op bench_xent(logits: float[N, V], target: int64[N]) -> loss: logits.dtype[N, 1]:
    for n, _ in loss:
        m = -1e38
        for j in range(V):
            m = max(m, logits[n, j])
        s = 0.0
        for j in range(V):
            s += exp(logits[n, j] - m)
        loss[n, 0] = m + log(s) - logits[n, target[n]]
"""


def child(repeat: int) -> dict:
    import torch
    import torch.nn.functional as F
    import torch_tk
    torch_tk.kernel(XENT, file="bench_xent.tk")
    out = {}
    g = torch.Generator().manual_seed(0)
    for N, V in SHAPES:
        x = torch.randn(N, V, generator=g)
        t = torch.randint(0, V, (N,), generator=g)
        got = torch.ops.tk.bench_xent(x, t)[:, 0]
        torch.testing.assert_close(got, F.cross_entropy(x, t, reduction="none"), rtol=1e-4, atol=1e-4)
        out[f"{N}x{V} tk"] = median_ms(lambda: torch.ops.tk.bench_xent(x, t), repeat)
        out[f"{N}x{V} torch"] = median_ms(lambda: F.cross_entropy(x, t, reduction="none"), repeat)
    return out


def main() -> None:
    lib_main(__file__, __doc__, child, repeat=15)


if __name__ == "__main__":
    main()
