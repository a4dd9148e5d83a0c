"""Locks that a fork child gets unlocked.

A DataLoader worker made by fork starts with the forking thread alone: a
lock that another thread of the parent held at that moment would stay held
in the child, and the child's first use of it would wait for ever (a worker
that registers a spec while the parent registers one in a thread). So every
module-level lock of torch_tk is a ForkSafeLock, which a fork child replaces
with a fresh one. Each guards a few statements whose state stays usable if
a thread stops between them (a dict entry, a set member, a hash and the tag
made from it, which the next update remakes). The C side's locks have their
own fork guard (shim/runtime.cpp).
"""
from __future__ import annotations

import os
import threading
import weakref

__all__ = ["ForkSafeLock"]


class ForkSafeLock:
    """A threading.Lock for `with` blocks, unlocked in a fork child."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        ref = weakref.ref(self)   # the hook must not keep the lock alive

        def renew() -> None:
            lock = ref()
            if lock is not None:
                lock._lock = threading.Lock()

        os.register_at_fork(after_in_child=renew)

    def __enter__(self) -> "ForkSafeLock":
        self._lock.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self._lock.release()

    def locked(self) -> bool:
        """Whether a thread holds it now."""
        return self._lock.locked()
