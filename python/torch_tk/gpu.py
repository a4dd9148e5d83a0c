"""GPU tools: what the CUDA path finds, and filling its kernel cache ahead of time.

    python -m torch_tk info
    python -m torch_tk precompile --arch sm_80 --arch sm_90 [--op brick_pad]

Neither needs a GPU; precompile needs NVRTC only (pip install nvidia-cuda-nvrtc,
or the one a CUDA build of torch brings). Both call libtk's C entry points
(shim/cuda.cpp) through ctypes. The cache is the one ops use at run time:
$TK_CACHE_DIR, else $XDG_CACHE_HOME/tk, else ~/.cache/tk. A kernel is keyed by
its source, the NVRTC version, the arch and the options, so precompile on the
machine (or image) that will run the ops, with the same NVRTC.
"""

from __future__ import annotations

import argparse
import ctypes
import re
import sys
import time

import torch

from . import _capi
from ._lib import load

__all__ = ["info", "kernels", "parse_arch", "check_tune", "precompile", "main_info", "main_precompile"]


def _lib() -> ctypes.CDLL:
    return _capi.lib()


def info() -> str:
    """NVRTC, driver and devices, cache folder and cached kernels (text)."""
    lines = [f"torch {torch.__version__} (CUDA {torch.version.cuda or 'none'}), "
             f"torch.cuda.is_available(): {torch.cuda.is_available()}",
             f"libtk: {load()}"]
    report = _lib().tk_shim_cuda_info().decode("utf-8", "replace").splitlines()
    entries = sorted(line for line in report if line.startswith("  tk_"))  # the cache listing
    it = iter(entries)
    report = [next(it) if line.startswith("  tk_") else line for line in report]
    return "\n".join(lines + report) + "\n"


def kernels() -> list[str]:
    """Names of every kernel of the built-in ops: tk_<op>__<dtypes>."""
    lib = _lib()
    return [lib.tk_shim_cuda_kernel_name(i).decode() for i in range(lib.tk_shim_cuda_nkernels())]


def parse_arch(text: str) -> int:
    """'sm_90', 'compute_90', '90' or '9.0' -> 90."""
    m = re.fullmatch(r"(?:sm_|compute_)?(\d+)|(\d+)\.(\d)", text.strip())
    if not m:
        raise ValueError(f"not a CUDA arch: '{text}' (expected e.g. sm_90 or 9.0)")
    return int(m.group(1)) if m.group(1) else int(m.group(2)) * 10 + int(m.group(3))


def check_tune(text: str) -> None:
    """Raises ValueError with the library's message when text is not a valid
    TK_CUDA_TUNE value ("lanes=8,rows=2"; docs/gpu.md); "" is the defaults.
    Parsing needs neither a GPU nor NVRTC. A non-str raises TypeError."""
    if not isinstance(text, str):
        raise TypeError(f"torch_tk.gpu.check_tune: the value must be a str, got {type(text).__name__}")
    sched = ctypes.create_string_buffer(64)   # tk_schedule: int v[10] (compiler/tk.h)
    err = ctypes.create_string_buffer(1024)
    if _lib().tk_schedule_parse(text.encode(), sched, err, len(err)) != _capi.OK:
        raise ValueError(err.value.decode("utf-8", "replace"))


def _bar(done: int, total: int, width: int = 24) -> str:
    filled = width * done // max(total, 1)
    return "[" + "#" * filled + "-" * (width - filled) + f"] {done:3d}/{total}"


def precompile(archs, ops=None, out=sys.stderr):
    """Compiles every kernel of the built-in ops (or of `ops`) for each arch
    (sm numbers) into the disk cache, drawing a progress bar on `out`.
    Returns (compiled, already cached, [error messages])."""
    lib = _lib()
    names = kernels()
    chosen = [i for i, n in enumerate(names)
              if ops is None or any(n.startswith(f"tk_{op}__") for op in ops)]
    jobs = [(i, sm) for sm in archs for i in chosen]
    tty = hasattr(out, "isatty") and out.isatty()
    compiled, cached, errors = 0, 0, []
    msg = ctypes.create_string_buffer(16384)
    for step, (i, sm) in enumerate(jobs, 1):
        hit = ctypes.c_int(0)
        t0 = time.perf_counter()
        rc = lib.tk_shim_cuda_precompile(i, sm, ctypes.byref(hit), msg, len(msg))
        took = time.perf_counter() - t0
        if rc != 0:
            errors.append(msg.value.decode("utf-8", "replace"))
            what = "FAILED"
        elif hit.value:
            cached += 1
            what = "cached"
        else:
            compiled += 1
            what = f"compiled in {took:.2f} s"
        line = f"{_bar(step, len(jobs))}  {names[i]} sm_{sm}: {what}"
        if tty:
            out.write("\r\033[K" + line + ("\n" if step == len(jobs) else ""))
        else:
            out.write(line + "\n")
        out.flush()
    return compiled, cached, errors


def main_info(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m torch_tk info",
                                 description="Report the NVRTC and CUDA driver tk finds, its cache folder "
                                             "and the kernels cached there.")
    ap.parse_args(argv)
    print(info(), end="")
    return 0


def main_precompile(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m torch_tk precompile",
                                 description="Fill tk's kernel cache ahead of time (no GPU needed).")
    ap.add_argument("--arch", action="append", required=True, metavar="ARCH",
                    help="target GPU arch, e.g. sm_90 or 9.0; repeat for several")
    ap.add_argument("--op", action="append", metavar="NAME", help="only this op (repeatable); default: all")
    args = ap.parse_args(argv)
    try:
        archs = sorted({parse_arch(a) for a in args.arch})
    except ValueError as e:
        ap.error(str(e))
    known = {n[3:n.index("__")] for n in kernels()}
    unknown = sorted(set(args.op or ()) - known)
    if unknown:
        ap.error(f"unknown op(s) {', '.join(unknown)}; built-in: {', '.join(sorted(known))}")
    cache = _lib().tk_shim_cuda_cache_dir().decode()
    print(f"precompiling for {', '.join(f'sm_{a}' for a in archs)} into {cache or '(no cache folder)'}",
          file=sys.stderr)
    compiled, cached, errors = precompile(archs, args.op)
    for e in errors:
        print(e, file=sys.stderr)
    print(f"{compiled} compiled, {cached} already cached, {len(errors)} failed", file=sys.stderr)
    return 1 if errors else 0
