"""TK_HUGEPAGES=1: large CPU outputs are advised to use transparent huge pages.

With TK_HUGEPAGES=1 the shim calls madvise(MADV_HUGEPAGE) on the 2 MiB-aligned
interior of every CPU output of 8 MiB or more before the kernel first writes
it (shim/kernels.cpp, advise_huge_pages); by default it does not (why:
bench/LOG.md, "Huge pages"). Each case runs in a fresh process (the
variable is read once per process), which reports where its output's first
whole huge page lies; the test reads that mapping's flags from
/proc/<pid>/smaps (`hg`: MADV_HUGEPAGE) and the child checks its outputs
against the index formula and F.conv1d.
"""
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not os.path.isdir("/sys/kernel/mm/transparent_hugepage"),
    reason="transparent huge pages are a Linux feature: no /sys/kernel/mm/transparent_hugepage here")


def vm_flags(addr: int, pid: int) -> set:
    """The VmFlags of the mapping of process pid that contains addr."""
    inside = False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= addr < hi
            elif inside and head == "VmFlags:":
                return set(line.split()[1:])
    raise AssertionError(f"no mapping of {pid} contains {addr:#x}")


CHILD = r"""
import sys, torch, torch_tk
from torch_tk import reference as ref
op, size = sys.argv[1], int(sys.argv[2])
huge = 2 << 20
if op == "brick_pad":   # the seed's index formula, in int64 torch arithmetic
    tile = torch.randn(48, 32)
    out = torch.ops.tk.brick_pad(tile, size, size // 2, 7)
    ok = torch.equal(out, ref.brick_pad_index(tile, size, size // 2, 7))
else:                    # rwkv_forward, float64, against F.conv1d (first and last batch rows:
    w, k = torch.randn(96, 768, dtype=torch.float64), torch.randn(size, 96, 768, dtype=torch.float64)
    out = torch.ops.tk.rwkv_forward(w, k, 0.25)   # the float64 conv1d of all 32 took 8 s)
    rows = [0, size - 1]
    ok = torch.allclose(out[rows], ref.rwkv_conv1d(w, k[rows], 0.25), rtol=1e-10, atol=1e-10)
lo = (out.data_ptr() + huge - 1) // huge * huge
assert lo + huge <= out.data_ptr() + out.numel() * out.element_size(), "no whole 2 MiB page inside"
print(lo, out.numel() * out.element_size(), int(ok), flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("op, size, env, advised", [
    ("brick_pad", 1024, None, False),   # 8.9 MB, default: not advised
    ("brick_pad", 1024, "0", False),
    ("brick_pad", 1024, "1", True),     # 8.9 MB: advised
    ("brick_pad", 700, "1", False),     # 6.1 MB: below the 8 MiB threshold
    ("rwkv_forward", 32, "1", True),    # 18.9 MB float64
    ("rwkv_forward", 32, None, False),
])
def test_advice(op, size, env, advised):
    env_vars = dict(os.environ)
    env_vars.pop("TK_HUGEPAGES", None)
    if env is not None:
        env_vars["TK_HUGEPAGES"] = env
    p = subprocess.Popen([sys.executable, "-c", CHILD, op, str(size)], env=env_vars,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        addr, nbytes, ok = (int(x) for x in p.stdout.readline().split())
        assert ok == 1, f"{op}: the output differs from the reference"
        assert (nbytes >= 8 << 20) == (size != 700)
        assert ("hg" in vm_flags(addr, p.pid)) == advised
    finally:
        p.communicate("")
    assert p.returncode == 0
