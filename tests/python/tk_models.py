"""A small model that uses both tk ops, shared by the compile, export and
TorchScript tests (tests/python/test_compile.py, test_export.py and
tests/cpp/torchscript_save.py).

    x (B, T, C) -> k = Linear(x) as (B, C, T), a non-contiguous view
                -> y = rwkv_forward(w, k, eps)              (B, C, T)
                -> y * brick_pad(tile, 2, 1, 3, C, T)       the tile as a (C, T) mask
Every parameter gets a gradient through a tk op (w, tile) or through one
(proj, via k).
"""

import torch
from torch import nn


class BothOps(nn.Module):
    C: int
    T: int

    def __init__(self, C: int = 8, T: int = 16, TH: int = 3, TW: int = 4, seed: int = 0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.C, self.T = C, T
        self.proj = nn.Linear(C, C)
        with torch.no_grad():
            self.proj.weight.copy_(torch.randn(C, C, generator=gen) / C ** 0.5)
            self.proj.bias.copy_(torch.randn(C, generator=gen) * 0.1)
        self.w = nn.Parameter(torch.rand(C, T, generator=gen) / T)
        self.tile = nn.Parameter(torch.rand(TH, TW, generator=gen) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = self.proj(x).transpose(1, 2)                              # (B, C, T), strides (T*C, 1, C)
        y = torch.ops.tk.rwkv_forward(self.w, k, 0.1)                 # (B, C, T)
        mask = torch.ops.tk.brick_pad(self.tile, 2, 1, 3, self.C, self.T)  # (C, T)
        return y * mask


def example_input(B: int = 4, C: int = 8, T: int = 16, seed: int = 1, dtype=torch.float32) -> torch.Tensor:
    """x (B, T, C) for BothOps."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, C, generator=gen, dtype=dtype)


def forward_backward(model: nn.Module, x: torch.Tensor, grad_y: torch.Tensor):
    """y, and the gradients of sum(y * grad_y) for x and every parameter (by name)."""
    x = x.detach().clone().requires_grad_(True)
    model.zero_grad(set_to_none=True)
    y = model(x)
    (y * grad_y).sum().backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    grads["x"] = x.grad.detach().clone()
    return y.detach(), grads
