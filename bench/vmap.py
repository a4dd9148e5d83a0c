"""torch.func.vmap over tk ops, side by side in one run (CPU).

Per case: the op called once on the whole batch (the floor), vmap through
tk's rule (torch_tk.batching), and a Python loop over the vmapped dim with
torch.stack (the work torch's per-index fallback does). Per-sample
gradients: vmap(grad(loss)) against a loop of torch.autograd.grad. Medians
of --repeat timed runs after warm-up; outputs are checked equal first.

    PYTHONPATH=python TK_LIBRARY=build/libtk.so python3 bench/vmap.py [--repeat 15]
"""
import argparse
import os
import platform

import torch
from torch.func import grad, vmap

import torch_tk
from timing import median_ms   # bench/timing.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
tk = torch.ops.tk


def cases():
    """(name, whole-batch call, vmap call, loop call) per case."""
    gen = torch.Generator().manual_seed(0)
    tiles = torch.rand(64, 48, 32, generator=gen)

    def pad(t):
        return tk.brick_pad(t, 64, 32, 10)

    yield ("brick_pad, 64 tiles 48x32 -> 112x160", lambda: pad(tiles), lambda: vmap(pad)(tiles),
           lambda: torch.stack([pad(t) for t in tiles]))
    softmax = torch_tk.load(os.path.join(ROOT, "examples", "specs", "softmax.tk"))
    x = torch.randn(64, 32, 1024, generator=gen)
    yield ("softmax (examples/specs), 64 x (32, 1024)", lambda: softmax(x), lambda: vmap(softmax)(x),
           lambda: torch.stack([softmax(r) for r in x]))
    t = torch.randn(64, 32, 1024, generator=gen)

    def loss(xi, ti):
        return (softmax(xi) - ti).square().sum()

    def loop_grads():
        out = []
        for xi, ti in zip(x, t):
            xi = xi.detach().requires_grad_()
            out.append(torch.autograd.grad(loss(xi, ti), xi)[0])
        return torch.stack(out)

    def whole():
        xx = x.detach().requires_grad_()
        return torch.autograd.grad(loss(xx, t), xx)[0]   # the same gradients: the rows are independent

    yield ("per-sample grads of softmax loss, 64 x (32, 1024)", whole, lambda: vmap(grad(loss))(x, t), loop_grads)
    # an op whose batched tensor has no '...' (k: [B, C, T]): vmap calls it once per index
    w, ks = torch.rand(64, 64, generator=gen), torch.rand(16, 4, 64, 64, generator=gen)

    def rwkv(k):
        return tk.rwkv_forward(w, k, 0.1)

    yield ("rwkv_forward over k (per index), 16 x (4, 64, 64)", lambda: rwkv(ks.reshape(64, 64, 64)).reshape(ks.shape),
           lambda: vmap(rwkv)(ks), lambda: torch.stack([rwkv(k) for k in ks]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    print(f"# bench/vmap.py --repeat {args.repeat}; torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{platform.processor() or platform.machine()}")
    print(f"{'case':52} {'whole batch':>12} {'vmap (tk rule)':>15} {'loop + stack':>13} {'loop / vmap':>12}")
    for name, whole, vm, loop in cases():
        ref = whole()
        torch.testing.assert_close(vm(), ref)
        torch.testing.assert_close(loop(), ref)
        a, b, c = (median_ms(f, args.repeat) for f in (whole, vm, loop))
        print(f"{name:52} {a:10.3f} ms {b:12.3f} ms {c:10.3f} ms {c / b:11.1f}x")


if __name__ == "__main__":
    main()
