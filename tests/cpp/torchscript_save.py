"""The Python half of the TorchScript round trip (CTest: torchscript_save,
then torchscript_load). Scripts tk_models.BothOps (both tk ops), saves it, and
saves what C++ must reproduce: the input, the incoming gradient, the output
and every gradient, as attributes of a scripted container module (what
torch::jit::load reads back without Python).

Usage: python tests/cpp/torchscript_save.py OUT_DIR
Writes OUT_DIR/module.pt and OUT_DIR/expected.pt.
"""

import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))   # tk_models
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))  # torch_tk, if not installed

import torch_tk  # noqa: E402,F401  (loads libtk)
from tk_models import BothOps, example_input, forward_backward  # noqa: E402


class Expected(torch.nn.Module):
    """Tensors as attributes: saved by torch.jit.save, read by Module::attr in C++."""

    def __init__(self, tensors):
        super().__init__()
        for name, t in tensors.items():
            setattr(self, name, t)

    def forward(self) -> int:
        return 0


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    model = BothOps(C=8, T=16)
    x = example_input(B=3, C=8, T=16, seed=11)
    grad_y = torch.randn(3, 8, 16, generator=torch.Generator().manual_seed(12))
    y, grads = forward_backward(model, x, grad_y)
    scripted = torch.jit.script(model)
    scripted.save(os.path.join(out_dir, "module.pt"))
    tensors = {"x": x, "grad_y": grad_y, "y": y}
    tensors.update({"grad_" + name.replace(".", "_"): g for name, g in grads.items()})
    torch.jit.script(Expected(tensors)).save(os.path.join(out_dir, "expected.pt"))
    print(f"wrote {out_dir}/module.pt and expected.pt ({', '.join(sorted(tensors))})")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
