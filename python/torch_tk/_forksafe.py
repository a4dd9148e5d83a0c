"""Locks that a fork child gets unlocked.

A DataLoader worker made by fork starts with the forking thread alone: a
lock that another thread of the parent held at that moment would stay held
in the child, and the child's first use of it would wait for ever (a worker
that registers a spec while the parent registers one in a thread). So every
module-level lock of torch_tk is a ForkSafeLock, which a fork child replaces
with a fresh one unless the forking thread itself holds it (that thread
goes on in the child and releases it). The child finds what the lock guards
as the other thread left it: each block either does work that is safe to
redo (loading libtk finds it loaded; a vmap rule registered again replaces
itself) or records its result last (a spec's names, the ops that have a
vmap rule), so at worst the child redoes the step that was cut. The C
side's locks have their own fork guard (shim/runtime.cpp).
"""
from __future__ import annotations

import os
import threading
import weakref

__all__ = ["ForkSafeLock"]


class ForkSafeLock:
    """A threading.Lock for `with` blocks, unlocked in a fork child unless the
    forking thread holds it. Not reentrant."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: int | None = None   # the holder's threading.get_ident()
        ref = weakref.ref(self)   # the hook must not keep the lock alive

        def renew() -> None:
            lock = ref()
            if lock is not None and lock._owner != threading.get_ident():
                lock._lock, lock._owner = threading.Lock(), None

        os.register_at_fork(after_in_child=renew)

    def __enter__(self) -> "ForkSafeLock":
        self._lock.acquire()
        self._owner = threading.get_ident()
        return self

    def __exit__(self, *exc) -> None:
        self._owner = None
        self._lock.release()

    def locked(self) -> bool:
        """Whether a thread holds it now."""
        return self._lock.locked()
