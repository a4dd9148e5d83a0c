"""Train a tiny RWKV-style model with tk's time-mix op, on the CPU, in seconds.

The model: token embedding -> LayerNorm -> Linear (keys) -> time mix ->
Linear, residual -> LayerNorm -> MLP, residual -> vocabulary head. The time mix
is torch.ops.tk.rwkv_forward with a learned w (C, T):
    out[b, c, t] = sum_{u<=t} w[c, (T-1)-(t-u)] * k[b, c, u]
a causal depthwise convolution whose kernel is as long as the sequence; its
gradients (dL/dw summed over the batch, dL/dk) come from the backward specs in
ops/rwkv_forward.tk through tk's C++ autograd kernel.

The data, generated here: sequences of V tokens that repeat with period P
(the first P tokens random). Predicting the next token needs the token P-1
steps back, which a channel of w can learn to pick out. Only the first P-1
predictions are guesses, so the loss falls from ln(V) = 2.77 towards
(P-1)/T * ln(V) = 0.35.

    python examples/train_rwkv_tiny.py [--steps 300] [--seed 0] [--optim torch|tk]

--optim tk steps with TkAdamW, an optimizer whose update is a tk spec that
changes the parameters in place (examples/specs/optim.tk).

(run from the repository root after `make build`, or with torch_tk installed).
"""

import argparse
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

try:
    import torch_tk  # noqa: F401  (loads libtk: torch.ops.tk.*)
except ImportError:  # a checkout: use python/ next to this folder
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import torch_tk  # noqa: F401

VOCAB, PERIOD, C, T = 16, 5, 32, 32
OPTIM_SPEC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "specs", "optim.tk")


class TkAdamW(torch.optim.Optimizer):
    """torch.optim.AdamW's update as one tk op a parameter: examples/specs/
    optim.tk's adamw_ reads p, its gradient and the two moments once and
    updates p and the moments in place (float32 moments for half parameters)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        torch_tk.load(OPTIM_SPEC)
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    dtype = p.dtype if p.dtype in (torch.float32, torch.float64) else torch.float32
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, dtype=dtype, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=dtype, memory_format=torch.preserve_format)
                state["step"] += 1
                flat = (lambda t: t.view(1)) if p.dim() == 0 else (lambda t: t)   # a spec tensor has a dim
                torch.ops.tk.adamw_(flat(p), flat(p.grad), flat(state["exp_avg"]), flat(state["exp_avg_sq"]),
                                    group["lr"], beta1, beta2, group["eps"], group["weight_decay"], state["step"])
        return loss


class TimeMix(nn.Module):
    """RWKV time mixing over (B, C, T) with a learned w (C, T); w[c, T-1-lag]
    weighs the key `lag` steps back. Starts as a per-channel exponential decay."""

    def __init__(self, channels: int, length: int):
        super().__init__()
        lag = torch.arange(length - 1, -1, -1, dtype=torch.float32)          # w's index j -> lag T-1-j
        tau = torch.logspace(0, math.log10(length), channels).unsqueeze(1)  # (C, 1): 1 .. T steps
        decay = torch.exp(-lag / tau)
        self.w = nn.Parameter(decay / decay.sum(1, keepdim=True))

    def forward(self, k: torch.Tensor) -> torch.Tensor:
        return torch.ops.tk.rwkv_forward(self.w, k, 0.0)


class TinyRWKV(nn.Module):
    def __init__(self, vocab: int = VOCAB, channels: int = C, length: int = T):
        super().__init__()
        self.emb = nn.Embedding(vocab, channels)
        self.ln1 = nn.LayerNorm(channels)
        self.key = nn.Linear(channels, channels)
        self.time = TimeMix(channels, length)
        self.mix = nn.Linear(channels, channels)
        self.ln2 = nn.LayerNorm(channels)
        self.mlp = nn.Sequential(nn.Linear(channels, 2 * channels), nn.GELU(), nn.Linear(2 * channels, channels))
        self.head = nn.Linear(channels, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.emb(idx)                                   # (B, T, C)
        k = self.key(self.ln1(x)).transpose(1, 2)           # (B, C, T), a strided view
        x = x + self.mix(self.time(k).transpose(1, 2))      # (B, T, C)
        x = x + self.mlp(self.ln2(x))
        return self.head(x)                                 # (B, T, V)


def make_batch(batch: int, gen: torch.Generator, length: int = T + 1, period: int = PERIOD):
    """(inputs, targets), each (batch, T): periodic token sequences shifted by one."""
    first = torch.randint(0, VOCAB, (batch, period), generator=gen)
    seq = first.repeat(1, length // period + 1)[:, :length]
    return seq[:, :-1], seq[:, 1:]


def loss_of(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = model(inputs)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def train(steps: int = 300, seed: int = 0, batch: int = 32, lr: float = 1e-2, log_every: int = 0,
          model: nn.Module | None = None, optim: str = "torch", losses: list | None = None):
    """Trains from scratch with AdamW (optim "torch": torch.optim.AdamW; "tk":
    TkAdamW above); returns (mean loss of the first 10 steps, of the last 10),
    every step's loss appended to `losses` when given."""
    torch.manual_seed(seed)
    model = model if model is not None else TinyRWKV()
    opt = (TkAdamW if optim == "tk" else torch.optim.AdamW)(model.parameters(), lr=lr, weight_decay=1e-2)
    gen = torch.Generator().manual_seed(seed + 1)
    losses = losses if losses is not None else []
    for step in range(steps):
        inputs, targets = make_batch(batch, gen)
        loss = loss_of(model, inputs, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if log_every and (step % log_every == 0 or step == steps - 1):
            print(f"step {step:4d}  loss {loss.item():.4f}")
    n = min(10, len(losses))
    return sum(losses[:n]) / n, sum(losses[-n:]) / n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--optim", choices=("torch", "tk"), default="torch",
                    help="AdamW from torch.optim, or TkAdamW (examples/specs/optim.tk)")
    args = ap.parse_args()
    torch.set_num_threads(1)   # a model this small trains fastest on one thread
    t0 = time.perf_counter()
    first, last = train(args.steps, args.seed, log_every=50, optim=args.optim)
    print(f"loss {first:.3f} -> {last:.3f} in {args.steps} steps, {time.perf_counter() - t0:.1f} s "
          f"(floor ~{(PERIOD - 1) / T * math.log(VOCAB):.2f})")
    return 0 if last < 0.5 * first else 1


if __name__ == "__main__":
    sys.exit(main())
