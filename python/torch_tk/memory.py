"""tk's cache of freed large CPU outputs (shim/output_cache.cpp).

An output of 16 MiB or more on the CPU takes its memory from the blocks of
freed tk outputs when one fits, sparing the page faults of fresh memory
(for rwkv_forward at B = 32 a quarter of the call, for brick_pad at the
seed configuration two thirds). The capacity is TK_CPU_CACHE_MB (read when
the library loads; 0 turns the cache off), by default 1 GiB or an eighth of
the physical memory, whichever is smaller.
"""
from __future__ import annotations

import ctypes

from ._lib import load


def _lib() -> ctypes.CDLL:
    return ctypes.CDLL(load())  # already loaded: the same handle


def cpu_cache_info() -> dict:
    """The cache's state: bytes and blocks held, hits and misses so far
    (outputs of cacheable size that reused a block, or did not), capacity."""
    out = (ctypes.c_int64 * 5)()
    _lib().tk_shim_cpu_cache_info(out)
    return dict(zip(("bytes", "blocks", "hits", "misses", "capacity"), out))


def empty_cache() -> None:
    """Returns every cached block to torch's CPU allocator (and so, for
    large blocks, to the operating system)."""
    _lib().tk_shim_cpu_cache_empty()
