"""torch.compile's caches on disk and the specs behind tk's operators.

torch.compile keeps compiled graphs on disk (the FX graph cache, the
AOTAutograd cache, under TORCHINDUCTOR_CACHE_DIR) and finds them again by a
key made from the graph. A node that calls torch.ops.tk.<name> enters that
key by the name alone: torch cannot see that the spec behind the name
changed. After an edit of a spec (its parameters reordered, a backward op's
signature changed, an output's shape), the next process would reuse a graph
traced for the old spec, calling its ops with the old arguments: an error
at best, wrong gradients at worst.

So tk adds a digest of what its operators are to torch.compiler.config.
cache_key_tag, the tag torch puts into every one of those keys: libtk
itself (its size and time: a rebuild may change the built-in ops) and the
text of every spec registered at run time, in order. A process that
registers the same specs from the same libtk finds its graphs again; any
change compiles afresh. A tag of the user's own (TORCH_COMPILE_CACHE_KEY_TAG)
stays in front of tk's part.
"""
from __future__ import annotations

import hashlib
import os

import torch

from ._forksafe import ForkSafeLock

__all__ = ["note_library", "note_spec", "digest"]

_hash = hashlib.sha256(b"tk")
_ours = ""                 # the part of the tag tk set last
_lock = ForkSafeLock()   # a fork child gets it unlocked (torch_tk._forksafe)


def digest() -> str:
    """The digest tk's part of the tag holds now."""
    return _hash.hexdigest()[:16]


def _retag() -> None:
    global _ours
    tag = torch.compiler.config.cache_key_tag
    user = tag[:-len(_ours)] if _ours and tag.endswith(_ours) else tag
    _ours = ("|" if user else "") + "tk-" + digest()
    torch.compiler.config.cache_key_tag = user + _ours


def note_library(path: str) -> None:
    """Folds libtk at path (its size and modification time) into the tag."""
    st = os.stat(path)
    with _lock:
        _hash.update(f"lib\0{os.path.abspath(path)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
        _retag()


def note_spec(file: str, text: str) -> None:
    """Folds a spec registered at run time into the tag."""
    with _lock:
        _hash.update(f"spec\0{file}\0{len(text)}\0".encode() + text.encode("utf-8", "surrogatepass"))
        _retag()
