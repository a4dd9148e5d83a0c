"""tk's cache of freed large CPU outputs (shim/output_cache.cpp): a reused
block must never show the previous output's values, the capacity and the
off switch must hold, and fork, threads and resize_ must keep working."""
import gc
import os
import platform
import subprocess
import sys
import textwrap
import threading

import pytest
import torch

import torch_tk
from torch_tk import reference as ref

MB = 1 << 20
C, T = 128, 64             # an output of B * 32 KiB (float32): B = 512 is 16 MiB, the smallest cached size
BIG = 640                  # 20 MiB


def rwkv_ref(w, k, eps):
    return ref.rwkv_conv1d(w.double(), k.double(), eps)


def check_rwkv(out, w, k, eps):
    """No element unwritten (the blocks are poisoned with NaN); 40 random batch
    rows against float64 conv1d (all of them took seconds, more under ASan)."""
    assert not out.isnan().any(), "an element of the output was never written"
    rows = torch.randperm(k.shape[0])[:40]
    torch.testing.assert_close(out[rows].double(), rwkv_ref(w, k[rows], eps), rtol=1e-5, atol=1e-5)


@pytest.fixture(autouse=True)
def empty_cache(request):
    # the tests that run in this process (they take `tk`); the others set their own TK_CPU_CACHE_MB
    if "tk" in request.fixturenames and torch_tk.cpu_cache_info()["capacity"] < 60 * MB:
        pytest.skip("TK_CPU_CACHE_MB is below the 60 MiB these tests cache (0: the cache is off)")
    gc.collect()   # large outputs of earlier tests must not reach the cache mid-test
    torch_tk.empty_cache()
    yield
    torch_tk.empty_cache()


def test_reused_block_shows_nothing_of_the_previous_output(tk):
    w = torch.rand(C, T)
    for dtype in (torch.float32, torch.bfloat16):
        k = torch.rand(BIG * (2 if dtype == torch.bfloat16 else 1), C, T).to(dtype)
        first = tk.rwkv_forward(w.to(dtype), k, 0.25)
        ptr = first.data_ptr()
        first.fill_(float("nan"))          # poison the block it gives back
        del first
        info = torch_tk.cpu_cache_info()
        assert info["blocks"] == 1 and info["bytes"] >= k.numel() * k.element_size()
        second = tk.rwkv_forward(w.to(dtype), k, 0.25)
        assert second.data_ptr() == ptr, "the freed output's block was not reused"
        assert torch_tk.cpu_cache_info()["hits"] >= 1
        if dtype == torch.float32:
            check_rwkv(second, w, k, 0.25)
        else:
            assert not second.isnan().any()
            rows = torch.randperm(k.shape[0])[:40]
            torch.testing.assert_close(second[rows].double(), rwkv_ref(w.to(dtype).float(), k[rows].float(), 0.25),
                                       rtol=2e-2, atol=2e-2)
        del second
        torch_tk.empty_cache()


def test_brick_pad_reuses_a_poisoned_block_bit_exactly(tk):
    tile = torch.rand(48, 32)
    args = (tile, 40, 20, 10)
    want = ref.torch_pad(tile, 40, 20, 10, height=2048, width=2560).view(2048, 2560)   # 20 MiB
    first = tk.brick_pad(*args, height=2048, width=2560)
    ptr = first.data_ptr()
    first.fill_(float("nan"))
    del first
    second = tk.brick_pad(*args, height=2048, width=2560)
    assert second.data_ptr() == ptr
    assert torch.equal(second, want)


def test_a_block_goes_to_an_output_of_another_op_and_shape(tk):
    w, k = torch.rand(C, T), torch.rand(BIG, C, T)
    out = tk.rwkv_forward(w, k, 0.0)
    ptr = out.data_ptr()
    del out
    # 2048 x 2560 float32 is the same 20 MiB; a different op, rank and shape
    tile = torch.rand(48, 32)
    pad = tk.brick_pad(tile, 40, 20, 10, height=2048, width=2560)
    assert pad.data_ptr() == ptr
    assert torch.equal(pad, ref.torch_pad(tile, 40, 20, 10, height=2048, width=2560).view(2048, 2560))


def test_lazy_clone_of_a_cached_output(tk):
    out = tk.rwkv_forward(torch.rand(C, T), torch.rand(BIG, C, T), 0.0)
    want = out.clone()
    lazy = torch._lazy_clone(out)           # copy-on-write: needs a simple data pointer
    out.fill_(1.0)                          # the write copies; the clone keeps the values
    assert torch.equal(lazy, want)
    del out, lazy


def test_outputs_a_spec_may_leave_unwritten_do_not_use_the_cache(tk):
    some = torch_tk.kernel("""
        op cache_some(x: float32[N]) -> y: float32[N]:
            for i in y:
                if x[i] > 0.5:
                    y[i] = 2.0 * x[i]
    """)
    x = torch.rand(BIG * C * T)             # 20 MiB
    out = tk.rwkv_forward(torch.rand(C, T), torch.rand(BIG, C, T), 0.0)
    ptr = out.data_ptr()
    out.fill_(float("nan"))
    del out
    before = torch_tk.cpu_cache_info()
    y = some(x)
    assert y.data_ptr() != ptr, "an output with unwritten elements took a cached block"
    after = torch_tk.cpu_cache_info()
    assert after["hits"] == before["hits"] and after["misses"] == before["misses"] and after["blocks"] == 1
    sel = x > 0.5
    assert torch.equal(y[sel], 2.0 * x[sel])


def test_no_cached_block_while_torch_fills_uninitialized_memory(tk):
    w, k = torch.rand(C, T), torch.rand(BIG, C, T)
    out = tk.rwkv_forward(w, k, 0.0)
    ptr = out.data_ptr()
    del out
    old_fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        out = tk.rwkv_forward(w, k, 0.0)
    finally:
        torch.use_deterministic_algorithms(False)
        torch.utils.deterministic.fill_uninitialized_memory = old_fill
    assert out.data_ptr() != ptr
    check_rwkv(out, w, k, 0.0)


def test_small_outputs_do_not_use_the_cache(tk):
    before = torch_tk.cpu_cache_info()
    out = tk.rwkv_forward(torch.rand(C, T), torch.rand(128, C, T), 0.0)   # 4 MiB
    del out
    after = torch_tk.cpu_cache_info()
    assert after["blocks"] == 0 and after["misses"] == before["misses"] and after["hits"] == before["hits"]


def test_blocks_that_waste_too_much_are_not_given(tk):
    w = torch.rand(C, T)
    out = tk.rwkv_forward(w, torch.rand(1024, C, T), 0.0)   # 32 MiB
    ptr = out.data_ptr()
    del out
    small = tk.rwkv_forward(w, torch.rand(BIG, C, T), 0.0)   # 20 MiB: would waste 12
    assert small.data_ptr() != ptr
    assert torch_tk.cpu_cache_info()["blocks"] == 1


def test_empty_cache_returns_every_block(tk):
    w = torch.rand(C, T)
    outs = [tk.rwkv_forward(w, torch.rand(BIG, C, T), 0.0) for _ in range(3)]
    del outs
    assert torch_tk.cpu_cache_info()["blocks"] == 3
    torch_tk.empty_cache()
    info = torch_tk.cpu_cache_info()
    assert info["blocks"] == 0 and info["bytes"] == 0


def test_resize_of_a_cached_output_keeps_its_values(tk):
    w, k = torch.rand(C, T), torch.rand(BIG, C, T)
    out = tk.rwkv_forward(w, k, 0.5)
    want = out.clone()
    out.resize_(BIG + 64, C, T)        # a new block from the cache's allocator, the values copied
    assert torch.equal(out[:BIG], want)
    del out


def test_threads_allocate_and_free_concurrently(tk):
    w = torch.rand(C, T)
    k = torch.rand(BIG, C, T)
    want = tk.rwkv_forward(w, k, 0.1)
    check_rwkv(want, w, k, 0.1)
    errors = []

    def work():
        try:
            for _ in range(4):
                out = tk.rwkv_forward(w, k, 0.1)
                if not torch.allclose(out, want, rtol=1e-5, atol=1e-5):
                    errors.append("wrong result")
                out.fill_(float("nan"))
                del out
        except Exception as e:  # pragma: no cover - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert torch_tk.cpu_cache_info()["hits"] > 0


CHILD = textwrap.dedent("""
    import os, sys
    import torch, torch_tk
    C, T = 128, 64
    w = torch.rand(C, T)
    mode = sys.argv[1]
    info = torch_tk.cpu_cache_info()
    print("capacity", info["capacity"])
    outs = [torch.ops.tk.rwkv_forward(w, torch.rand(640, C, T), 0.0) for _ in range(3)]
    ptrs = [o.data_ptr() for o in outs]
    del outs
    info = torch_tk.cpu_cache_info()
    print("cached", info["blocks"], info["bytes"])
    hits = info["hits"]
    again = [torch.ops.tk.rwkv_forward(w, torch.rand(640, C, T), 0.0) for _ in range(3)]
    # counted by the cache, not by address: a fresh block may land where an
    # evicted one was
    print("reused", torch_tk.cpu_cache_info()["hits"] - hits)
    print("first", int(again[0].data_ptr() == ptrs[1]))
""")


def run_child(env_value):
    env = dict(os.environ)
    env.pop("TK_CPU_CACHE_MB", None)
    if env_value is not None:
        env["TK_CPU_CACHE_MB"] = env_value
    p = subprocess.run([sys.executable, "-c", CHILD, "x"], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    return dict((line.split()[0], line.split()[1:]) for line in p.stdout.splitlines())


def test_capacity_evicts_the_least_recently_freed():
    got = run_child("45")      # room for two 20 MiB blocks
    assert got["capacity"] == [str(45 * MB)]
    assert got["cached"] == ["2", str(2 * 20 * MB)]
    # `del outs` frees the list's items last to first: ptrs[2], ptrs[1], then
    # ptrs[0], which evicts ptrs[2]; the next output takes the least recently
    # freed of the equal blocks kept, ptrs[1]
    assert got["reused"][0] == "2" and got["first"] == ["1"]


def test_zero_turns_the_cache_off():
    got = run_child("0")
    assert got["capacity"] == ["0"]
    assert got["cached"] == ["0", "0"]


def test_default_capacity_is_at_most_1_gib():
    got = run_child(None)
    cap = int(got["capacity"][0])
    assert 0 < cap <= 1 << 30
    assert got["cached"] == ["3", str(3 * 20 * MB)] and got["reused"][0] == "3"


FORK_CHILD = textwrap.dedent("""
    import os
    import torch, torch_tk
    from torch_tk import reference as ref
    torch.set_num_threads(1)   # GNU OpenMP's pool does not survive fork
    C, T = 128, 64
    w, k = torch.rand(C, T), torch.rand(640, C, T)
    out = torch.ops.tk.rwkv_forward(w, k, 0.0)
    del out                                  # the parent now holds a cached block
    assert torch_tk.cpu_cache_info()["blocks"] == 1
    pid = os.fork()
    if pid == 0:
        try:
            a = torch.ops.tk.rwkv_forward(w, k, 0.0)
            a.fill_(float("nan"))
            del a
            b = torch.ops.tk.rwkv_forward(w, k, 0.0)
            ok = torch.allclose(b.double(), ref.rwkv_conv1d(w.double(), k.double(), 0.0), rtol=1e-5, atol=1e-5)
            # the child neither takes nor gives blocks: it reports an empty cache
            info = torch_tk.cpu_cache_info()
            ok = ok and info["blocks"] == 0 and info["hits"] == 0 and info["capacity"] > 0
            os._exit(0 if ok else 3)
        except BaseException:
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    print("child", os.waitstatus_to_exitcode(status))
    out = torch.ops.tk.rwkv_forward(w, k, 0.0)
    print("parent hits", torch_tk.cpu_cache_info()["hits"])
""")


def test_fork_child_does_not_use_the_parents_cache():
    p = subprocess.run([sys.executable, "-c", FORK_CHILD], capture_output=True, text=True, timeout=120,
                       env={**{k: v for k, v in os.environ.items() if k != "TK_CPU_CACHE_MB"},
                            "OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stderr[-2000:]
    assert "child 0" in p.stdout, p.stdout + p.stderr[-2000:]
    assert "parent hits 1" in p.stdout, p.stdout


# ---- streaming stores: a memory-bound op writing into reused blocks -------------

# x86-64 only (SSE2), and on unless TK_CPU_STREAM=0
CAN_STREAM = platform.machine().lower() in ("x86_64", "amd64")
# (conftest.py sets TK_CPU_STREAM_MB=0: outputs of any size stream)
streams = pytest.mark.skipif(not CAN_STREAM or os.environ.get("TK_CPU_STREAM") == "0" or
                             os.environ.get("TK_CPU_STREAM_MB") != "0",
                             reason="no streaming stores of every size here: not x86-64, TK_CPU_STREAM=0, "
                                    "or TK_CPU_STREAM_MB set to other than 0")

def brick_pad_twice(tk, tile, h, w):
    """brick_pad into a fresh block (plain stores), then, with that block
    poisoned and freed, into the same block again (streamed)."""
    first = tk.brick_pad(tile, 40, 20, 10, height=h, width=w)
    ptr = first.data_ptr()
    first.fill_(float("nan") if first.is_floating_point() else 255)   # the tiles below stay under 200
    del first
    before = torch_tk.cpu_cache_info()["streamed"]
    second = tk.brick_pad(tile, 40, 20, 10, height=h, width=w)
    assert second.data_ptr() == ptr
    return second, torch_tk.cpu_cache_info()["streamed"] - before


@streams
@pytest.mark.parametrize("h, w, threads", [
    (2048, 2560, 2),       # every chunk starts and ends on a 64-byte boundary
    (2047, 2561, 3),       # odd rows, odd size, three chunks: unaligned chunk ends
    (1111, 4099, 1),       # one chunk, unaligned end
])
def test_streamed_brick_pad_is_exact(tk, h, w, threads):
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        tile = torch.rand(48, 32)
        out, streamed = brick_pad_twice(tk, tile, h, w)
    finally:
        torch.set_num_threads(old)
    assert streamed == 1, "the second call did not stream"
    assert torch.equal(out, ref.brick_pad_index(tile, 40, 20, 10, height=h, width=w))


@streams
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64, torch.uint8])
def test_streamed_brick_pad_other_element_sizes(tk, dtype):
    tile = (torch.rand(48, 32) * 200).to(dtype)
    h, w = 3001, {torch.bfloat16: 4099, torch.float64: 1901, torch.uint8: 8198}[dtype]   # 24-46 MB
    out, streamed = brick_pad_twice(tk, tile, h, w)
    assert streamed == 1
    assert torch.equal(out, ref.brick_pad_index(tile, 40, 20, 10, height=h, width=w))


def test_not_streamed_when_an_output_is_not_in_a_reused_block(tk):
    three = torch_tk.kernel("""
        op stream_three(x: float32[..., R, N], s: float) -> (y: float32[..., R, N], z: int64[..., R, N], m: bool[..., R, N]):
            for r, n in y:
                v = x[r, n] * s + r
                y[r, n] = v
                z[r, n] = n * 3 - r
                m[r, n] = v > 0.5
    """)
    x = torch.rand(4, 1100, 1000)           # y 17.6 MB, z 35 MB: cached; m 4.4 MB: torch's allocator
    r = torch.arange(1100).view(-1, 1)
    n = torch.arange(1000).view(1, -1)
    want_y = x * 1.5 + r
    want = (want_y, (n * 3 - r).expand_as(x), want_y > 0.5)
    first = three(x, 1.5)
    del first
    before = torch_tk.cpu_cache_info()
    second = three(x, 1.5)
    after = torch_tk.cpu_cache_info()
    assert after["hits"] == before["hits"] + 2 and after["streamed"] == before["streamed"]
    # the kernel may fuse the multiply-add (one rounding): the floats to a few ulps
    torch.testing.assert_close(second[0], want[0], rtol=1e-6, atol=0)
    assert torch.equal(second[1], want[1])
    assert torch.equal(second[2], want[2]) or (second[2] != want[2]).sum() < 10   # v > 0.5 at a rounding tie


@streams
def test_streamed_runtime_op_with_several_outputs(tk):
    two = torch_tk.kernel("""
        op stream_pair(x: float32[..., N], s: float) -> (y: float32[..., N], z: int64[..., N]):
            for n in y:
                y[n] = x[n] * s + 1.0
                z[n] = n * 3 - 7
    """)
    x = torch.rand(3, 1_600_003)             # y 19.2 MB, z 38.4 MB: both cached (57.6 MB < 60 MiB)
    first = two(x, 1.5)
    for o in first:
        o.fill_(-1 if o.is_floating_point() else -(2 ** 40))   # values neither output has
    del first, o
    before = torch_tk.cpu_cache_info()["streamed"]
    y, z = two(x, 1.5)
    assert torch_tk.cpu_cache_info()["streamed"] == before + 1
    torch.testing.assert_close(y, x * 1.5 + 1.0, rtol=1e-6, atol=0)
    assert not y.isnan().any() and (y >= 1.0).all()
    assert torch.equal(z, (torch.arange(x.shape[-1]) * 3 - 7).expand_as(x))


@streams
def test_streamed_one_and_eight_byte_outputs(tk):
    if torch_tk.cpu_cache_info()["capacity"] < 160 * MB:
        pytest.skip("needs 160 MiB of cache capacity")
    wide = torch_tk.kernel("""
        op stream_wide(x: float32[N]) -> (y: float64[N], m: bool[N]):
            for n in y:
                y[n] = x[n] * 2.0
                m[n] = x[n] > 0.5
    """)
    x = torch.rand(17_000_003)              # y 136 MB, m 17 MB: both cached; pieces of 1024, on 64
    first = wide(x)
    first[0].fill_(float("nan"))
    first[1].copy_(x <= 0.5)                # every bool the opposite of the answer
    del first
    before = torch_tk.cpu_cache_info()["streamed"]
    y, m = wide(x)
    assert torch_tk.cpu_cache_info()["streamed"] == before + 1
    assert torch.equal(y, x.double() * 2.0)   # exact; a misplaced element shows another x
    assert torch.equal(m, x > 0.5)


def test_ops_with_loops_are_not_streamed(tk):
    w, k = torch.rand(C, T), torch.rand(BIG, C, T)
    out = tk.rwkv_forward(w, k, 0.0)
    del out
    before = torch_tk.cpu_cache_info()
    out = tk.rwkv_forward(w, k, 0.0)
    after = torch_tk.cpu_cache_info()
    assert after["hits"] == before["hits"] + 1 and after["streamed"] == before["streamed"]


STREAM_CHILD = textwrap.dedent("""
    import torch, torch_tk
    tile = torch.rand(48, 32)
    for _ in range(3):
        out = torch.ops.tk.brick_pad(tile, 40, 20, 10, height=2048, width=2560)
        del out
    info = torch_tk.cpu_cache_info()
    print(info["hits"], info["streamed"])
""")


def test_stream_switch():
    for value, streamed in (("0", "0"), ("1", "2" if CAN_STREAM else "0")):
        env = {k: v for k, v in os.environ.items() if k != "TK_CPU_CACHE_MB"}
        env["TK_CPU_STREAM"] = value
        env["TK_CPU_STREAM_MB"] = "0"
        p = subprocess.run([sys.executable, "-c", STREAM_CHILD], capture_output=True, text=True, timeout=120,
                           env=env)
        assert p.returncode == 0, p.stderr[-2000:]
        assert p.stdout.split() == ["2", streamed], (value, p.stdout)


def default_stream_mib():
    """The rule's default size in MiB as shim/kernels.cpp computes it from
    sysconf (a sixth of the last-level cache, at least 16, 64 when unknown),
    read through getconf; None without getconf."""
    for name in ("LEVEL3_CACHE_SIZE", "LEVEL2_CACHE_SIZE"):
        try:
            r = subprocess.run(["getconf", name], capture_output=True, text=True)
        except OSError:
            return None
        if r.returncode == 0 and r.stdout.strip().isdigit() and int(r.stdout) > 0:
            return max(16.0, int(r.stdout) // 6 / MB)
    return 64.0


RULE_CHILD = textwrap.dedent('''
    import sys, torch, torch_tk
    torch_tk.kernel("""
    op rule_scale(x: float32[..., N]) -> y: float32[..., N]:
        for i in y:
            y[i] = 2.0 * x[i]
    op rule_erf(x: float32[..., N]) -> y: float32[..., N]:
        for i in y:
            y[i] = erf(x[i])
    """)
    tk, tile = torch.ops.tk, torch.rand(48, 32)
    def streamed(f):
        f()   # a fresh block; the second call reuses it
        before = torch_tk.cpu_cache_info()["streamed"]
        out = f()
        return torch_tk.cpu_cache_info()["streamed"] - before
    rows = [int(a) for a in sys.argv[1:]]   # brick_pad outputs of rows x 4096 float32
    print(*[streamed(lambda: tk.brick_pad(tile, 40, 20, 10, height=h, width=4096)) for h in rows],
          streamed(lambda: tk.rule_scale(torch.ones(rows[-1], 4096))),
          streamed(lambda: tk.rule_erf(torch.ones(rows[-1], 4096))))
''')


def stream_rule_child(rows, extra):
    """RULE_CHILD's output words for brick_pad outputs of `rows` x 4096
    float32 and the scale and erf ops at the last, in a child whose
    environment is this one's without TK_CPU_STREAM and TK_CPU_STREAM_MB,
    with `extra` (and a cache that holds the outputs)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TK_CPU_STREAM", "TK_CPU_STREAM_MB")}
    env["TK_CPU_CACHE_MB"] = str(max(rows) // 64 * 2 + 64)
    p = subprocess.run([sys.executable, "-c", RULE_CHILD, *map(str, rows)], capture_output=True, text=True,
                       timeout=300, env=dict(env, **extra))
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout.split()


@pytest.mark.skipif(not CAN_STREAM, reason="no streaming stores here: not x86-64")
def test_stream_rule():
    """Only memory-bound ops stream (an erf per element does not, even with
    TK_CPU_STREAM_MB=0), and only outputs of TK_CPU_STREAM_MB MiB or more."""
    rows = [24 * 64 - 8, 24 * 64 + 8]   # brick_pad outputs just below and above 24 MiB (16 KiB a row)
    assert stream_rule_child(rows, {"TK_CPU_STREAM_MB": "24"}) == "0 1 1 0".split()
    assert stream_rule_child(rows, {"TK_CPU_STREAM_MB": "0"}) == "1 1 1 0".split()
    assert stream_rule_child(rows, {"TK_CPU_STREAM_MB": "25"}) == "0 0 0 0".split()


@pytest.mark.skipif(not CAN_STREAM, reason="no streaming stores here: not x86-64")
def test_stream_rule_default_size():
    """TK_CPU_STREAM_MB unset or unreadable: outputs of a sixth of the
    last-level cache (as sysconf reports it) or more stream, smaller ones
    do not."""
    mib = default_stream_mib()
    if mib is None:
        pytest.skip("no getconf here to read the last-level cache's size with")
    rows = [int(mib * 64) - 8, int(mib * 64) + 8]
    if os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") < 8 * rows[1] * 16384:
        pytest.skip(f"too little memory for outputs of the default size ({mib:.0f} MiB)")
    for extra in ({}, {"TK_CPU_STREAM_MB": "x"}):   # unreadable: the default
        # (where the default is 16 MiB, the first output is below what the cache keeps: never streamed)
        assert stream_rule_child(rows, extra) == "0 1 1 0".split(), (extra, mib)
