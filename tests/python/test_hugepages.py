"""Large CPU outputs are advised to use transparent huge pages (Linux).

The shim calls madvise(MADV_HUGEPAGE) on the 2 MiB-aligned interior of
every CPU output of 8 MiB or more before the kernel first writes it
(shim/kernels.cpp, advise_huge_pages); TK_HUGEPAGES=0 turns that off. The
kernel's first touch then faults one 2 MiB page at a time instead of 512
small ones (bench/README.md, "Huge pages"). These tests read the advice
back from /proc/self/smaps (the VMA's `hg` flag) and check the outputs
written into such memory against the index formula.
"""
import os
import subprocess
import sys

import pytest
import torch

HUGE = 2 << 20
THP_DIR = "/sys/kernel/mm/transparent_hugepage"

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not os.path.isdir(THP_DIR) or not os.path.exists("/proc/self/smaps"),
    reason="transparent huge pages are a Linux feature: no /sys/kernel/mm/transparent_hugepage or /proc/self/smaps")


def vm_flags(addr: int, pid: str = "self") -> set:
    """The VmFlags of the mapping of this process that contains addr."""
    inside = False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= addr < hi
            elif inside and head == "VmFlags:":
                return set(line.split()[1:])
    raise AssertionError(f"no mapping contains {addr:#x}")


def interior(t: torch.Tensor) -> int:
    """The first 2 MiB-aligned address inside t's data."""
    return (t.data_ptr() + HUGE - 1) // HUGE * HUGE


def brick_expected(tile, H, W, pw, ph, stagger):
    """The seed's brick-wall index formula, in int64 torch arithmetic."""
    TH, TW = tile.shape
    row = torch.arange(H).unsqueeze(1)
    col = torch.arange(W).unsqueeze(0)
    x1 = col - pw
    y1 = H - 1 - row + ph
    v = torch.div(y1, TH, rounding_mode="floor")
    u = torch.div(x1 - v * stagger, TW, rounding_mode="floor")
    x2 = x1 - u * TW - v * stagger
    y2 = y1 - v * TH
    return tile[TH - 1 - y2, x2]


def test_large_output_is_advised_and_right(tk):
    tile = torch.randn(48, 32)
    out = tk.brick_pad(tile, 1024, 512, 7)  # (1072, 2080) float32 + pad: 8.9 MB
    assert out.numel() * 4 >= 8 << 20
    assert "hg" in vm_flags(interior(out)), "the output's interior was not advised MADV_HUGEPAGE"
    H, W = out.shape
    assert torch.equal(out, brick_expected(tile, H, W, 1024, 512, 7))


def test_large_rwkv_output_is_advised_and_right(tk):
    B, C, T = 32, 96, 768  # float64 output: 18.9 MB
    w = torch.randn(C, T, dtype=torch.float64)
    k = torch.randn(B, C, T, dtype=torch.float64)
    out = tk.rwkv_forward(w, k, 0.25)
    assert "hg" in vm_flags(interior(out))
    import torch.nn.functional as F
    want = 0.25 + F.conv1d(F.pad(k, (T - 1, 0)), w.unsqueeze(1), groups=C)
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-10)


CHILD = """
import sys, torch, torch_tk
pw, ph = int(sys.argv[1]), int(sys.argv[2])
out = torch.ops.tk.brick_pad(torch.randn(48, 32), pw, ph, 7)
huge = 2 << 20
lo = (out.data_ptr() + huge - 1) // huge * huge
assert lo + huge <= out.data_ptr() + out.numel() * 4, "no whole 2 MiB page inside the output"
print(lo, out.numel() * 4, flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("pw, ph, env, advised", [
    (1024, 512, None, True),    # 8.9 MB: advised
    (1024, 512, "0", False),    # 8.9 MB, TK_HUGEPAGES=0: not advised
    (1024, 512, "1", True),
    (700, 500, None, False),    # 6.1 MB: below the 8 MiB threshold
])
def test_advice_in_a_fresh_process(pw, ph, env, advised):
    """A fresh process (no earlier advice on its heap): whether the output's
    first whole huge page lies in an advised mapping."""
    env_vars = dict(os.environ)
    env_vars.pop("TK_HUGEPAGES", None)
    if env is not None:
        env_vars["TK_HUGEPAGES"] = env
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(pw), str(ph)], env=env_vars,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        addr, nbytes = (int(x) for x in p.stdout.readline().split())
        assert (nbytes >= 8 << 20) == (pw == 1024)
        assert ("hg" in vm_flags(addr, str(p.pid))) == advised
    finally:
        p.communicate("")
    assert p.returncode == 0
