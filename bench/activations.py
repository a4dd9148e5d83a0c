"""Float32 activations on the CPU (exp, tanh, erf, sigmoid as tk_kernel.h's
branch-free forms, compiler/emit_expr.c cpu_vmaths), side by side.

GELU with tanh and with erf, SiLU, exp and a layer of tanh, element-wise
over a float32 (16, 1024, 1024) tensor, written in a spec as a user would,
against torch's own functions. The libtk of each --lib (the one before the
change and the one after) runs in its own child process; the children
alternate (--rounds of each) and the table gives the median of every
child's median (ms); the torch cases run in every child.

    PYTHONPATH=python python3 bench/activations.py --lib OLD/libtk.so --lib build/libtk.so [--rounds 3]
"""
from timing import lib_main, median_ms   # bench/timing.py

SPEC = """
op act_gelu_tanh(x: float[..., N]) -> y: x.dtype[..., N]:
    for i in y:
        v = x[i]
        y[i] = 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)))

op act_gelu_erf(x: float[..., N]) -> y: x.dtype[..., N]:
    for i in y:
        y[i] = 0.5 * x[i] * (1.0 + erf(x[i] * 0.7071067811865476))

op act_silu(x: float[..., N]) -> y: x.dtype[..., N]:
    for i in y:
        y[i] = x[i] * sigmoid(x[i])

op act_exp(x: float[..., N]) -> y: x.dtype[..., N]:
    for i in y:
        y[i] = exp(x[i])

op act_tanh(x: float[..., N]) -> y: x.dtype[..., N]:
    for i in y:
        y[i] = tanh(x[i])
"""


def child(repeat: int, threads: int) -> dict:
    import torch
    import torch.nn.functional as F
    import torch_tk
    torch.set_num_threads(threads)
    torch_tk.kernel(SPEC, file="bench_act.tk")
    tk = torch.ops.tk
    x = torch.randn(16, 1024, 1024, generator=torch.Generator().manual_seed(0)) * 3
    cases = [("gelu (tanh)", tk.act_gelu_tanh, lambda t: F.gelu(t, approximate="tanh")),
             ("gelu (erf)", tk.act_gelu_erf, F.gelu), ("silu", tk.act_silu, F.silu),
             ("exp", tk.act_exp, torch.exp), ("tanh", tk.act_tanh, torch.tanh)]
    out = {}
    for name, mine, ref in cases:
        torch.testing.assert_close(mine(x), ref(x), rtol=2e-6, atol=2e-6)
        out[f"{name} tk"] = median_ms(lambda: mine(x), repeat)
        out[f"{name} torch"] = median_ms(lambda: ref(x), repeat)
    return out


def main() -> None:
    lib_main(__file__, __doc__, child, "float32 (16, 1024, 1024), ", repeat=9, threads=2)


if __name__ == "__main__":
    main()
