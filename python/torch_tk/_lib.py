"""Finding and loading libtk.so, the library that registers torch.ops.tk.

Search order:
  1. the file named by the environment variable TK_LIBRARY;
  2. torch_tk/lib/libtk.so inside this package (an installed wheel);
  3. <repo>/build/libtk.so next to this package's source tree (a dev checkout
     built with `make build`).
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

import torch

from ._forksafe import ForkSafeLock

_LIB_NAME = "libtk.so"
_lock = ForkSafeLock()   # a fork child gets it unlocked (torch_tk._forksafe)
_loaded_path: str | None = None

_HOW_TO_BUILD = (
    "Build it from the repository root with `make build` (writes build/libtk.so), "
    "install the package with `pip install --no-build-isolation .`, "
    "or point TK_LIBRARY at a built libtk.so."
)


def candidates() -> list[Path]:
    """The places searched for libtk.so, in order."""
    env = os.environ.get("TK_LIBRARY")
    if env:
        return [Path(env)]
    package = Path(__file__).resolve().parent
    return [package / "lib" / _LIB_NAME, package.parent.parent / "build" / _LIB_NAME]


def find() -> Path:
    """The first libtk.so found; ImportError naming every place tried if none."""
    tried = candidates()
    for path in tried:
        if path.is_file():
            return path.resolve()
    if os.environ.get("TK_LIBRARY"):
        raise ImportError(f"torch_tk: TK_LIBRARY={tried[0]} does not exist. {_HOW_TO_BUILD}")
    places = ", ".join(str(p) for p in tried)
    raise ImportError(f"torch_tk: {_LIB_NAME} not found (looked in {places}). {_HOW_TO_BUILD}")


def _load_error(path: Path) -> str:
    """Why the loaded library registered no ops ("" if it did)."""
    from . import _capi

    lib = _capi.bind(ctypes.CDLL(str(path)))  # already loaded: the same handle
    return (lib.tk_shim_load_error() or b"").decode("utf-8", "replace")


def _other_registration() -> str:
    """What already registered tk:: operators in this process, "" if nothing."""
    try:
        names = torch._C._dispatch_get_all_op_names()
    except AttributeError:  # private API: skip the check if it is gone
        return ""
    if not any(n.startswith("tk::") for n in names):
        return ""
    libs = [p for p in torch.ops.loaded_libraries if "tk" in Path(p).name]
    return ", ".join(libs) if libs else "another library"


def load() -> str:
    """Loads libtk.so once into this process (torch.ops.load_library) and
    returns its path. Safe to call again and from several threads."""
    global _loaded_path
    with _lock:
        if _loaded_path is not None:
            return _loaded_path
        path = find()
        if str(path) in torch.ops.loaded_libraries:
            _loaded_path = str(path)
            return _loaded_path
        other = _other_registration()
        if other:
            raise ImportError(
                f"torch_tk: torch.ops.tk is already registered by {other}; "
                f"not loading {path} as well (one libtk per process)"
            )
        try:
            torch.ops.load_library(str(path))
        except OSError as e:
            raise ImportError(
                f"torch_tk: loading {path} failed: {e}. It may have been built against "
                f"another torch than {torch.__version__}; rebuild it. {_HOW_TO_BUILD}"
            ) from e
        error = _load_error(path)
        if error:
            raise ImportError(f"torch_tk: {path}: {error}")
        _loaded_path = str(path)
        return _loaded_path


def library_path() -> str:
    """Path of the loaded libtk.so (loads it if needed)."""
    return load()
