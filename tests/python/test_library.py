"""libtk as a torch library: loading, schemas, Meta and CUDA kernels."""

import subprocess
import sys

import pytest
import torch

from torch_tk.reference import brick_pad_index, rwkv_conv1d, rwkv_inputs

# A fresh interpreter that loads libtk with plain torch (no torch_tk) and
# checks both ops against inline loops written from the formulas.
FRESH_PROCESS_SCRIPT = r"""
import sys
import torch

torch.ops.load_library(sys.argv[1])
assert "torch_tk" not in sys.modules

tile = torch.arange(12, dtype=torch.float32).reshape(3, 4)  # TH=3, TW=4
TH, TW, pw, ph, s = 3, 4, 3, 2, 5
H, W = TH + 2 * ph, TW + 2 * pw
out = torch.ops.tk.brick_pad(tile, pw, ph, s)
assert out.shape == (H, W), out.shape
for row in range(H):
    for col in range(W):
        x1, y1 = col - pw, H - 1 - row + ph
        v = y1 // TH
        u = (x1 - v * s) // TW
        want = tile[TH - 1 - (y1 - v * TH), x1 - u * TW - v * s]
        assert out[row, col] == want, (row, col, out[row, col], want)

B, C, T, eps = 2, 3, 6, 0.5
w = torch.linspace(-1, 1, C * T, dtype=torch.float64).reshape(C, T)
k = torch.linspace(0, 2, B * C * T, dtype=torch.float64).reshape(B, C, T)
out = torch.ops.tk.rwkv_forward(w, k, eps)
for b in range(B):
    for c in range(C):
        for t in range(T):
            want = eps + sum(float(w[c, T - 1 - t + u] * k[b, c, u]) for u in range(t + 1))
            assert abs(float(out[b, c, t]) - want) < 1e-12, (b, c, t)
print("fresh process OK")
"""


def test_loads_in_fresh_process_without_torch_tk(lib_path):
    proc = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS_SCRIPT, lib_path],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "fresh process OK" in proc.stdout


def test_library_path_is_the_loaded_library(lib_path):
    import os

    assert os.path.isfile(lib_path)
    assert hasattr(torch.ops.tk, "brick_pad") and hasattr(torch.ops.tk, "rwkv_forward")


@pytest.mark.parametrize(
    "op, schema",
    [
        ("brick_pad",
         "tk::brick_pad(Tensor tile, SymInt pw, SymInt ph, SymInt stagger, SymInt? height=None, SymInt? width=None) "
         "-> Tensor"),
        ("rwkv_forward", "tk::rwkv_forward(Tensor w, Tensor k, float eps) -> Tensor"),
    ],
)
def test_schema(op, schema):
    assert str(getattr(torch.ops.tk, op).default._schema) == schema


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int64, torch.float16, torch.float32])
@pytest.mark.parametrize(
    "tile_shape, pw, ph, stagger, height, width, out_shape",
    [
        ((48, 32), 4096, 2048, 10, None, None, (4144, 8224)),
        ((3, 5, 7), 2, 1, 3, None, None, (3, 7, 11)),
        ((2, 3, 5, 7), -1, 4, -9, None, None, (2, 3, 13, 5)),
        ((5, 7), 2, 1, 3, 100, None, (100, 11)),
        ((5, 7), 2, 1, 3, None, 64, (7, 64)),
        ((4, 5, 7), 10**9, -(10**9), 3, 6, 8, (4, 6, 8)),
    ],
)
def test_brick_pad_meta(dtype, tile_shape, pw, ph, stagger, height, width, out_shape):
    tile = torch.empty(tile_shape, dtype=dtype, device="meta")
    out = torch.ops.tk.brick_pad(tile, pw, ph, stagger, height, width)
    assert out.device.type == "meta"
    assert out.dtype == dtype
    assert tuple(out.shape) == out_shape


def test_brick_pad_meta_negative_size_is_an_error():
    with pytest.raises(RuntimeError, match=r"tk\.brick_pad"):
        torch.ops.tk.brick_pad(torch.empty(5, 7, device="meta"), 2, -4, 3)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("B, C, T", [(32, 768, 768), (1, 1, 1), (0, 4, 8)])
def test_rwkv_forward_meta(dtype, B, C, T):
    w = torch.empty(C, T, dtype=dtype, device="meta")
    k = torch.empty(B, C, T, dtype=dtype, device="meta")
    out = torch.ops.tk.rwkv_forward(w, k, 0.1)
    assert out.device.type == "meta"
    assert out.dtype == dtype
    assert tuple(out.shape) == (B, C, T)


def test_rwkv_forward_meta_checks_arguments():
    w = torch.empty(4, 8, device="meta")
    k = torch.empty(2, 5, 8, device="meta")
    with pytest.raises(RuntimeError, match=r"^tk\.rwkv_forward: argument 'k'"):
        torch.ops.tk.rwkv_forward(w, k, 0.1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
def test_cuda_matches_references():
    dev = torch.device("cuda")
    tile = torch.randn(2, 5, 7, device=dev).transpose(-1, -2)  # non-contiguous (2, 7, 5)
    out = torch.ops.tk.brick_pad(tile, 9, 4, -3)
    assert out.device == tile.device
    assert torch.equal(out.cpu(), brick_pad_index(tile.cpu(), 9, 4, -3))

    w, k = rwkv_inputs(4, 64, 128, device=dev, seed=5)
    out = torch.ops.tk.rwkv_forward(w, k, 0.1)
    assert out.device == k.device
    ref = rwkv_conv1d(w.cpu().double(), k.cpu().double(), 0.1)
    assert ((out.cpu().double() - ref).abs().max() / ref.abs().max()).item() < 1e-5
