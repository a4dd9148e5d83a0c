"""torch.library.opcheck with all its default tests (test_schema,
test_autograd_registration, test_faketensor, test_aot_dispatch_dynamic) for
every tk op, backward ops included, on several samples each: batch dims,
non-contiguous inputs, several dtypes. Forward ops get inputs that require
grad, so the autograd registration and the gradients under AOTAutograd are
checked too; backward ops get plain inputs (they have no backward).
On the CPU, and on CUDA when torch.cuda.is_available().
"""

import glob
import os
import re

import pytest
import torch

tk = torch.ops.tk

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")),
]


def rand(*shape, dtype=torch.float32, device="cpu", grad=False, noncontig=False, seed=0):
    gen = torch.Generator().manual_seed(seed)
    if noncontig:  # every other element of a wider tensor, last two dims swapped
        t = torch.rand(*shape[:-2], shape[-1], 2 * shape[-2], generator=gen)[..., ::2].transpose(-1, -2)
    else:
        t = torch.rand(*shape, generator=gen)
    t = t.to(device=device, dtype=dtype)
    return t.requires_grad_(grad) if grad else t


def samples(name, device):
    """(args, id) samples of op `name`."""
    r = lambda *s, **kw: rand(*s, device=device, **kw)  # noqa: E731
    if name == "rwkv_forward":
        return [
            ((r(3, 5, grad=True), r(2, 3, 5, grad=True), 0.1), "f32"),
            ((r(4, 6, grad=True, noncontig=True), r(1, 4, 6, grad=True, noncontig=True), -1.0), "noncontig"),
            ((r(2, 7, dtype=torch.float64, grad=True), r(3, 2, 7, dtype=torch.float64), 0.0), "f64-w-only"),
            ((r(3, 4, dtype=torch.bfloat16, grad=True), r(2, 3, 4, dtype=torch.bfloat16, grad=True), 0.5), "bf16"),
        ]
    if name == "rwkv_backward_w":
        return [
            ((r(2, 3, 5), r(2, 3, 5, seed=1)), "f32"),
            ((r(1, 4, 6, noncontig=True), r(1, 4, 6, noncontig=True, seed=1)), "noncontig"),
            ((r(3, 2, 7, dtype=torch.float16), r(3, 2, 7, dtype=torch.float16, seed=1)), "f16"),
        ]
    if name == "rwkv_backward_k":
        return [
            ((r(3, 5), r(2, 3, 5, seed=1)), "f32"),
            ((r(4, 6, noncontig=True), r(2, 4, 6, noncontig=True, seed=1)), "noncontig"),
            ((r(2, 7, dtype=torch.float64), r(3, 2, 7, dtype=torch.float64, seed=1)), "f64"),
        ]
    if name == "brick_pad":
        return [
            ((r(3, 4, grad=True), 5, 3, 2), "f32"),
            ((r(2, 3, 4, grad=True), 5, 3, -7, 9, None), "batch-height"),
            ((r(2, 2, 3, 5, grad=True, noncontig=True), -1, 4, 3, None, 6), "batch2-noncontig-width"),
            ((r(3, 4, dtype=torch.float64, grad=True), 0, 0, 1, 1, 1), "f64-one-pixel"),
            ((torch.arange(12, dtype=torch.int32, device=device).reshape(3, 4), 2, 1, 3), "int32"),
        ]
    if name == "brick_pad_backward":
        return [
            ((r(3, 4), r(9, 14, seed=1), 5, 3, 2), "f32"),
            ((r(2, 3, 4), r(2, 9, 7, seed=1), 5, 3, -7), "batch"),
            ((r(2, 2, 3, 5, noncontig=True), r(2, 2, 6, 8, noncontig=True, seed=1), -1, 4, 3), "batch2-noncontig"),
            ((r(3, 4, dtype=torch.bfloat16), r(5, 6, dtype=torch.bfloat16, seed=1), 1, 1, 1), "bf16"),
        ]
    raise KeyError(name)


def tk_op_names():
    """Every operator registered in the namespace tk."""
    return sorted(n[4:] for n in torch._C._dispatch_get_all_op_names() if n.startswith("tk::"))


OPS = ["rwkv_forward", "rwkv_backward_w", "rwkv_backward_k", "brick_pad", "brick_pad_backward"]


def builtin_op_names():
    """Every op the built-in specs (ops/*.tk) define."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    names = []
    for f in sorted(glob.glob(os.path.join(root, "ops", "*.tk"))):
        with open(f, encoding="utf-8") as fh:
            names += re.findall(r"^op (\w+)", fh.read(), re.M)
    return sorted(names)


def test_every_op_has_samples():
    # the built-in ops, whatever run-time specs other test files registered in this process
    assert builtin_op_names() == sorted(OPS)
    assert set(OPS) <= set(tk_op_names())


CASES = [(name, i) for name in OPS for i in range(len(samples(name, "cpu")))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name, i", CASES, ids=[f"{n}-{samples(n, 'cpu')[i][1]}" for n, i in CASES])
def test_opcheck(device, name, i):
    args, _ = samples(name, device)[i]
    torch.library.opcheck(getattr(tk, name).default, args)
