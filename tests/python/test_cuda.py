"""torch.ops.tk.* on CUDA tensors (load-time NVRTC, the kernel cache, torch's
current stream, CUDA graphs). Skipped when torch.cuda.is_available() is False;
ci/gpu-check.sh runs it on a GPU machine. The CPU-side parts of the GPU path
(NVRTC compiles, the cache, the no-driver errors) are tested without a GPU by
tests/c/test_nvrtc.c and tests/python/test_gpu_tools.py.

Comparisons: brick_pad bit for bit (torch.equal) against the exact integer
reference and the seed's torch_pad; rwkv_forward as max|err| / max|ref|
against float64 references, with TF32 off.
"""

import os
import subprocess
import sys
import threading

import pytest
import torch

from torch_tk.reference import SEED, brick_pad_index, rwkv_conv1d, rwkv_inputs, seed_tile, torch_pad

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ALL_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
              torch.float16, torch.bfloat16, torch.float32, torch.float64]
FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
# Bounds on max|err| / max|ref| (see test_rwkv.py): output rounding for the
# half types, float32 summation of up to T terms for float32.
REL_BOUND = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
TWO_GPUS = torch.cuda.is_available() and torch.cuda.device_count() >= 2


@pytest.fixture(autouse=True)
def no_tf32():
    """Full float32 in every reference conv1d / matmul."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def rel_err(got, ref):
    ref = ref.to(torch.float64)
    return ((got.to(torch.float64) - ref).abs().max() / ref.abs().max()).item()


def values(shape, dtype, seed, device="cuda"):
    """Distinct-as-possible values of dtype (so a mis-indexed read shows)."""
    gen = torch.Generator().manual_seed(seed)
    n = 1
    for d in shape:
        n *= d
    perm = torch.randperm(max(n, 1), generator=gen)[:n].reshape(shape)
    if dtype == torch.bool:
        v = (perm % 2).bool()
    elif dtype.is_floating_point:
        v = (perm.to(torch.float64) / 8 - 3.0).to(dtype)
    else:
        v = (perm - 100).to(dtype)
    return v.to(device)


def poisoned_brick_pad(tile, *args):
    """brick_pad after handing the allocator a block of 0xA5 of the output's size."""
    n = torch.ops.tk.brick_pad(tile.to("meta"), *args).numel() * tile.element_size()
    if n:
        block = torch.full((n,), 0xA5, dtype=torch.uint8, device=tile.device)
        del block
    return torch.ops.tk.brick_pad(tile, *args)


def run_python(code, **env_extra):
    """Runs code in a fresh interpreter that loads the libtk under test."""
    env = dict(os.environ)
    env.update(PYTHONPATH=os.path.join(ROOT, "python"))
    import torch_tk
    env["TK_LIBRARY"] = torch_tk.library_path()
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)


# ---- brick_pad ----------------------------------------------------------------


def test_brick_pad_seed_configuration_bit_equal_to_torch_pad():
    tile = seed_tile("cuda")
    out = poisoned_brick_pad(tile, SEED.pw, SEED.ph, SEED.stagger)
    assert out.device == tile.device and out.shape == (SEED.H, SEED.W) and out.dtype == torch.float32
    expected = torch_pad(tile, SEED.pw, SEED.ph, SEED.stagger).reshape(SEED.H, SEED.W)
    assert torch.equal(out, expected)
    assert torch.equal(out.cpu(), torch.ops.tk.brick_pad(tile.cpu(), SEED.pw, SEED.ph, SEED.stagger))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced", "expanded"])
def test_brick_pad_dtypes_and_layouts(dtype, layout):
    batch, th, tw = (2, 3), 7, 5
    if layout == "contiguous":
        tile = values((*batch, th, tw), dtype, 1)
    elif layout == "transposed":
        tile = values((*batch, tw, th), dtype, 2).transpose(-1, -2)
    elif layout == "sliced":
        tile = values((*batch, 2 * th + 1, 3 * tw + 2), dtype, 3)[..., 1::2, 2::3]
    else:
        tile = values((th, tw), dtype, 4).expand(*batch, th, tw)
    assert tile.shape == (*batch, th, tw)
    for args in [(9, 4, -3), (0, 0, 0), (13, 2, 7, 11, None), (3, 5, 40, None, 17)]:
        out = poisoned_brick_pad(tile, *args)
        expected = brick_pad_index(tile.cpu(), *args)
        assert out.dtype == dtype and out.is_contiguous() and out.device == tile.device
        assert torch.equal(out.cpu(), expected), f"{args}: first mismatch at {(out.cpu() != expected).nonzero()[:1]}"


def test_brick_pad_empty_output_launches_nothing():
    tile = values((4, 4), torch.float32, 5)
    out = torch.ops.tk.brick_pad(tile, 1, 1, 1, 0, 9)
    assert out.shape == (0, 9) and out.device == tile.device


def test_brick_pad_more_than_2_to_the_31_elements():
    """64-bit index arithmetic: a uint8 output of 2**31 + 2**16 elements,
    checked at sampled positions (including the last ones) against the formula."""
    th, tw, s = 48, 32, 10
    h, w = 32769, 65536  # h * w = 2**31 + 2**16
    free, _ = torch.cuda.mem_get_info()
    if free < 3 * h * w:
        pytest.skip("needs about 6.5 GB of free GPU memory")
    tile = values((th, tw), torch.uint8, 6)
    out = torch.ops.tk.brick_pad(tile, 7, 3, s, h, w)
    assert out.shape == (h, w)
    gen = torch.Generator().manual_seed(0)
    rows = torch.cat([torch.randint(0, h, (2000,), generator=gen), torch.tensor([h - 1] * 3 + [h // 2])])
    cols = torch.cat([torch.randint(0, w, (2000,), generator=gen), torch.tensor([w - 1, w - 2, 0, 0])])
    t = tile.cpu()
    got = out[rows.cuda(), cols.cuda()].cpu()
    for i, (r, c) in enumerate(zip(rows.tolist(), cols.tolist())):
        x1, y1 = c - 7, h - 1 - r + 3
        v = y1 // th
        u = (x1 - v * s) // tw
        assert got[i] == t[th - 1 - (y1 - v * th), x1 - u * tw - v * s], (r, c)
    del out


# ---- rwkv_forward -------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: str(d)[6:])
def test_rwkv_against_conv1d(dtype):
    w, k = rwkv_inputs(4, 64, 128, dtype=dtype, device="cuda", seed=7)
    out = torch.ops.tk.rwkv_forward(w, k, 0.1)
    assert out.shape == (4, 64, 128) and out.dtype == dtype and out.device == k.device
    ref = rwkv_conv1d(w.double(), k.double(), 0.1)
    err = rel_err(out, ref)
    assert err < REL_BOUND[dtype], f"{dtype}: {err:.3g}"
    # the GPU and CPU kernels agree to the same bound
    assert rel_err(out, torch.ops.tk.rwkv_forward(w.cpu(), k.cpu(), 0.1).double().cuda()) < REL_BOUND[dtype]


def test_rwkv_seed_size_against_float32_conv1d_tf32_off():
    """B=32, C=768, T=768: the seed's benchmark size and its one-liner."""
    w, k = rwkv_inputs(32, 768, 768, device="cuda", seed=0)
    out = torch.ops.tk.rwkv_forward(w, k, 0.1)
    assert rel_err(out, rwkv_conv1d(w, k, 0.1)) < 1e-4      # both float32, sums of up to 768 terms
    assert rel_err(out, rwkv_conv1d(w.double(), k.double(), 0.1)) < 1e-4


@pytest.mark.parametrize("layout", ["transposed", "sliced", "batch_expanded"])
def test_rwkv_noncontiguous(layout):
    w, k = rwkv_inputs(3, 8, 24, device="cuda", seed=3)
    if layout == "transposed":
        w2, k2 = w.t().contiguous().t(), k.permute(2, 0, 1).contiguous().permute(1, 2, 0)
    elif layout == "sliced":
        wb = torch.zeros(16, 73, device="cuda")
        kb = torch.zeros(3, 11, 48, device="cuda")
        wb[::2, 1::3] = w
        kb[:, 3:, ::2] = k
        w2, k2 = wb[::2, 1::3], kb[:, 3:, ::2]
    else:
        w2, k2 = w, k[:1].expand_as(k)
        k = k2.contiguous()
    assert not (w2.is_contiguous() and k2.is_contiguous())
    got = torch.ops.tk.rwkv_forward(w2, k2, 0.25)
    torch.testing.assert_close(got, torch.ops.tk.rwkv_forward(w, k, 0.25))
    assert rel_err(got, rwkv_conv1d(w.double(), k.double(), 0.25)) < 1e-5


# ---- streams, graphs, devices, threads ------------------------------------------


def test_one_kernel_per_call():
    tile = seed_tile("cuda")
    w, k = rwkv_inputs(2, 8, 16, device="cuda")
    torch.ops.tk.brick_pad(tile, 5, 5, 3)
    torch.ops.tk.rwkv_forward(w, k, 0.1)  # warm: compiled and loaded
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.ops.tk.brick_pad(tile, 5, 5, 3)
        torch.ops.tk.rwkv_forward(w, k, 0.1)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    kernels = [n for n in names if not n.startswith(("Memcpy", "Memset"))]
    assert sorted(kernels) == ["tk_brick_pad__f32", "tk_rwkv_forward__f32"], names


def test_runs_on_the_current_stream():
    """The op must follow work queued before it on a side stream: if it ran
    on another stream it would read the tile before the copy lands."""
    src = values((48, 32), torch.float32, 8)
    tile = torch.zeros_like(src)
    torch.ops.tk.brick_pad(tile, 50, 50, 3)  # warm
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # ~25 ms of GPU time ahead of the copy
        tile.copy_(src)
        out = torch.ops.tk.brick_pad(tile, 50, 50, 3)
    side.synchronize()
    assert torch.equal(out.cpu(), brick_pad_index(src.cpu(), 50, 50, 3))


def test_cuda_graph_capture_and_replay():
    static_tile = values((48, 32), torch.float32, 9)
    w, k = rwkv_inputs(2, 16, 32, device="cuda", seed=9)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture, on a side stream
        torch.ops.tk.brick_pad(static_tile, 20, 10, 7)
        torch.ops.tk.rwkv_forward(w, k, 0.1)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = torch.ops.tk.brick_pad(static_tile, 20, 10, 7)
        out2 = torch.ops.tk.rwkv_forward(w, k, 0.1)
    for seed in (10, 11):
        new = values((48, 32), torch.float32, seed)
        static_tile.copy_(new)
        k.copy_(torch.rand_like(k))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out.cpu(), brick_pad_index(new.cpu(), 20, 10, 7))
        assert rel_err(out2, rwkv_conv1d(w.double(), k.double(), 0.1)) < 1e-5


def test_opcheck():
    tile = values((2, 6, 5), torch.float32, 12)
    torch.library.opcheck(torch.ops.tk.brick_pad.default, (tile, 3, 2, 1))
    w, k = rwkv_inputs(2, 4, 8, device="cuda")
    torch.library.opcheck(torch.ops.tk.rwkv_forward.default, (w, k, 0.1))


@pytest.mark.skipif(not TWO_GPUS, reason="needs 2 GPUs")
def test_second_gpu():
    for dev in ("cuda:1", "cuda:0", "cuda:1"):  # a module per device, in either order
        tile = values((2, 7, 5), torch.int32, 13, device=dev)
        out = torch.ops.tk.brick_pad(tile, 9, 4, -3)
        assert out.device == torch.device(dev)
        assert torch.equal(out.cpu(), brick_pad_index(tile.cpu(), 9, 4, -3))
        w, k = rwkv_inputs(2, 8, 16, device=dev)
        out = torch.ops.tk.rwkv_forward(w, k, 0.1)
        assert out.device == torch.device(dev)
        assert rel_err(out, rwkv_conv1d(w.double(), k.double(), 0.1)) < 1e-5
    # the current device is not the tensors' device
    with torch.cuda.device(0):
        tile = values((3, 3), torch.float32, 14, device="cuda:1")
        assert torch.equal(torch.ops.tk.brick_pad(tile, 2, 2, 1).cpu(), brick_pad_index(tile.cpu(), 2, 2, 1))


def test_mixed_devices_is_an_error():
    w, k = rwkv_inputs(2, 4, 8)
    with pytest.raises(RuntimeError, match=r"tk\.rwkv_forward: argument 'k'"):
        torch.ops.tk.rwkv_forward(w.cuda(), k, 0.1)


THREADS_SCRIPT = r"""
import os, threading, torch, torch_tk
from torch_tk.reference import brick_pad_index, rwkv_conv1d, rwkv_inputs
N = 8
start = threading.Barrier(N)
tiles = [torch.randn(2, 7, 5, device="cuda") for _ in range(N)]
w, k = rwkv_inputs(2, 8, 16, dtype=torch.float64, device="cuda")
errors = []
def work(i):
    try:
        start.wait()
        out = torch.ops.tk.brick_pad(tiles[i], 9, 4, -3)  # every thread's first call at once
        out2 = torch.ops.tk.rwkv_forward(w, k, 0.1)
        torch.cuda.synchronize()
        assert torch.equal(out.cpu(), brick_pad_index(tiles[i].cpu(), 9, 4, -3))
        assert (out2 - rwkv_conv1d(w, k, 0.1)).abs().max().item() < 1e-12
    except Exception as e:
        errors.append(repr(e))
threads = [threading.Thread(target=work, args=(i,)) for i in range(N)]
for t in threads: t.start()
for t in threads: t.join()
assert not errors, errors
print(sorted(os.listdir(os.environ["TK_CACHE_DIR"])))
"""


def test_concurrent_first_calls_compile_once(tmp_path):
    r = run_python(THREADS_SCRIPT, TK_CACHE_DIR=str(tmp_path), TK_DEBUG="1")
    assert r.returncode == 0, r.stderr[-4000:]
    assert r.stderr.count("tk: compiling tk_brick_pad__f32 sm_") == 1, r.stderr[-4000:]
    assert r.stderr.count("tk: compiling tk_rwkv_forward__f64 sm_") == 1
    assert len(os.listdir(tmp_path)) == 2


CALL_SCRIPT = r"""
import torch, torch_tk
tile = torch.randn(7, 5, device="cuda")
print(torch.ops.tk.brick_pad(tile, 3, 2, 1).sum().item())
"""


def test_second_process_loads_from_the_disk_cache(tmp_path):
    r = run_python(CALL_SCRIPT, TK_CACHE_DIR=str(tmp_path), TK_DEBUG="1")
    assert r.returncode == 0 and "tk: compiling tk_brick_pad__f32" in r.stderr, r.stderr[-4000:]
    assert "---- tk_brick_pad__f32.cu ----" in r.stderr and "-arch=" in r.stderr
    r = run_python(CALL_SCRIPT, TK_CACHE_DIR=str(tmp_path), TK_DEBUG="1")
    assert r.returncode == 0, r.stderr[-4000:]
    assert "tk: compiling" not in r.stderr and "from the disk cache" in r.stderr


def test_missing_nvrtc_on_a_cuda_tensor_is_a_clear_error(tmp_path):
    r = run_python(CALL_SCRIPT, TK_CACHE_DIR=str(tmp_path), TK_NVRTC_PATH="/nonexistent/libnvrtc.so.13")
    assert r.returncode != 0
    assert "tk.brick_pad: cannot run on cuda:0: libnvrtc.so not found (TK_NVRTC_PATH=/nonexistent" in r.stderr


def test_unwritable_cache_folder_still_runs(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = run_python(CALL_SCRIPT, TK_CACHE_DIR=str(blocker / "tk"))
    assert r.returncode == 0, r.stderr[-4000:]
    assert "kernel disk cache off for this process" in r.stderr
