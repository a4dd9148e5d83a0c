"""tk's cache of freed large CPU outputs (shim/output_cache.cpp).

An output of 16 MiB or more on the CPU takes its memory from the blocks of
freed tk outputs when one fits, sparing the page faults of fresh memory
(for rwkv_forward at B = 32 a quarter of the call, for brick_pad at the
seed configuration two thirds). Only outputs the op writes in full take
part (an output its spec stores under a condition only comes from
torch.empty), and none while torch fills uninitialised memory
(torch.use_deterministic_algorithms with
torch.utils.deterministic.fill_uninitialized_memory). The capacity is
TK_CPU_CACHE_MB (read at the first large CPU output or call of these
functions; 0 turns the cache off), by default 1 GiB or an eighth of the
memory (physical, or the cgroup's limit), whichever is smaller. A fork child
does not use its parent's cache. A memory-bound op (no `for` in its body,
no function but min, max, abs and the like) whose outputs all reuse blocks
and take a sixth of the last-level cache or more, at least 16 MiB
(TK_CPU_STREAM_MB sets that size in MiB) writes them with streaming stores (x86-64;
TK_CPU_STREAM=0 turns that off): brick_pad into 130 MiB 8.0 -> 4.3 ms.
"""
from __future__ import annotations

import ctypes

from . import _capi


def _lib() -> ctypes.CDLL:
    return _capi.lib()


def cpu_cache_info() -> dict:
    """The cache's state: bytes and blocks held, hits and misses so far
    (outputs of cacheable size that reused a block, or did not), capacity,
    and the calls so far whose outputs were written with streaming stores
    (a memory-bound op into reused blocks: shim/kernels.cpp)."""
    out = (ctypes.c_int64 * 6)()
    _lib().tk_shim_cpu_cache_info(out)
    return dict(zip(("bytes", "blocks", "hits", "misses", "capacity", "streamed"), out))


def empty_cache() -> None:
    """Returns every cached block to torch's CPU allocator (and so, for
    large blocks, to the operating system)."""
    _lib().tk_shim_cpu_cache_empty()
