"""Operators from spec text at run time: torch_tk.kernel and torch_tk.load.

    import torch, torch_tk
    scale = torch_tk.kernel('''
    op scale(x: float[..., N], a: float) -> y: x.dtype[..., N]:
        for i in y:
            y[i] = a * x[i]
    ''')
    scale(torch.ones(3), 2.0)            # torch.ops.tk.scale: a real PyTorch operator

The spec is parsed and checked, and every op in it is registered as
torch.ops.tk.<name> with CPU, CUDA (NVRTC), Meta and Autograd kernels: it works
from Python, inside torch.compile(fullgraph=True) and in torch.jit.script. An
op's CPU kernel for a dtype is compiled by the system C compiler on its first
CPU call with that dtype (a cached shared object per op and dtype).
docs/runtime.md has the details (cache, environment variables, errors).
"""
from __future__ import annotations

import ctypes
import os
import textwrap

import torch

from . import _capi
from ._forksafe import ForkSafeLock

__all__ = ["SpecError", "kernel", "load", "runtime_kernels"]

_OUT_SIZE = 1 << 16
_names_by_text: dict[str, list[str]] = {}
_lock = ForkSafeLock()   # a fork child gets it unlocked (torch_tk._forksafe)


class SpecError(ValueError):
    """A malformed run-time spec (a ValueError: the spec text is a bad value).

    str(error) is the compiler's "file:line:col: error: message", then the
    offending line and a caret under the column. The parts are attributes:
    file, line, col (1-based; 0 when the message has no location), message.
    """

    def __init__(self, text: str, file: str, line: int, col: int, message: str):
        super().__init__(text)
        self.file, self.line, self.col, self.message = file, line, col, message


def _spec_error(file: str, line: int, col: int, message: str, text: str, source: str) -> SpecError:
    """The SpecError for the core's error (its fields) about `source`: its
    text, then the line it is on and a caret under its column."""
    lines = source.encode("utf-8").split(b"\n")
    if not 1 <= line <= len(lines):
        return SpecError(text, file, line, col, message)
    raw = lines[line - 1].rstrip(b"\r")
    if line == 1:
        raw = raw.removeprefix(b"\xef\xbb\xbf")   # a byte order mark: the core's columns start after it
    shown = raw.decode("utf-8", "replace")
    before = raw[: max(col - 1, 0)].decode("utf-8", "replace")  # columns count bytes
    caret = "".join(c if c == "\t" else " " for c in before) + "^"
    return SpecError(f"{text}\n{shown}\n{caret}", file, line, col, message)


def _register_spec(text: str, file: str, checked: bool | None = None) -> list[str]:
    """Registers every op of the spec; their names in spec order. checked:
    checked kernels (None: as TK_CHECKED says, which libtk reads)."""
    key = file + "\0" + text + "\0" + repr(checked)
    names = _names_by_text.get(key)
    if names is not None:
        return names
    if "\0" in text:   # the core reads a C string: it would end there, silently
        raw = text.encode("utf-8")
        at = raw.index(b"\0")
        line, col = raw.count(b"\n", 0, at) + 1, at - (raw.rfind(b"\n", 0, at) + 1) + 1
        message = "invalid character '\\x00'"
        raise _spec_error(file, line, col, message, f"{file}:{line}:{col}: error: {message}", text)
    out = ctypes.create_string_buffer(_OUT_SIZE)
    err = _capi.Error()
    # ctypes releases the GIL: other threads run (and register) meanwhile
    flag = -1 if checked is None else int(bool(checked))
    status = _capi.lib().tk_shim_register(file.encode("utf-8"), text.encode("utf-8"), flag, out, _OUT_SIZE,
                                          ctypes.byref(err))
    if status in (_capi.ERR_SYNTAX, _capi.ERR_CHECK):
        _, efile, line, col, message, etext = err.decoded()
        raise _spec_error(efile or file, line, col, message, etext, text)
    if status != _capi.OK:
        raise RuntimeError(err.decoded()[5])
    result = out.value.decode("utf-8", "replace")
    names = result.split()
    if not names:
        raise SpecError(f"{file}:1:1: error: the spec defines no op", file, 1, 1, "the spec defines no op")
    from . import batching, compile_cache, specinfo
    batching.register(specinfo.text_ops(file, text).values())   # vmap rules (torch_tk.batching)
    compile_cache.note_spec(file, text)   # torch.compile's disk caches see the spec (torch_tk.compile_cache)
    with _lock:
        _names_by_text[key] = names
    return names


# dynamo does not trace a registration (ctypes calls into libtk): it runs
# eagerly, a graph break (an error under fullgraph=True), without dynamo's
# warnings about the builtins it meets on the way
@torch.compiler.disable
def kernel(spec: str, file: str = "<string>", checked: bool | None = None) -> torch._ops.OpOverloadPacket:
    """Registers every op of the spec text as torch.ops.tk.<name> and returns
    the first one (the op a file defines first; the others, e.g. its backward
    ops, are on torch.ops.tk too).

    The text's common leading indentation is removed first (textwrap.dedent),
    so a spec may be indented like the code around it; error columns count
    in the dedented text, which the message shows.

    Registering the same text again returns the same op and does nothing
    else. A name already registered from a different spec, or a built-in
    op's name, raises RuntimeError. A malformed spec raises SpecError
    (file:line:col, the line and a caret); a missing C compiler raises
    RuntimeError.

    Registration compiles nothing (it checks that the C compiler runs): an
    op's CPU kernel for a dtype is compiled on its first CPU call with that
    dtype, which raises RuntimeError naming the op if the compile fails.

    checked=True compiles checked kernels (docs/spec.md, Bounds): every
    tensor index is compared to its dim's size, and an out-of-range access
    raises RuntimeError naming the op, file:line:col, the tensor, the dim
    and the index. None (the default) follows the environment: TK_CHECKED=1.
    An op's mode is fixed at its first registration.
    """
    if not isinstance(spec, str):
        raise TypeError(f"torch_tk.kernel: the spec must be a str, got {type(spec).__name__}")
    names = _register_spec(textwrap.dedent(spec), file, checked)
    return getattr(torch.ops.tk, names[0])


@torch.compiler.disable
def load(path: str | os.PathLike, checked: bool | None = None) -> torch._ops.OpOverloadPacket:
    """torch_tk.kernel of a spec file: errors name the file as given.
    Spec text rather than a path raises TypeError pointing to
    torch_tk.kernel (a str with a line break is never taken for a path)."""
    if isinstance(path, str) and "\n" in path:
        raise TypeError("torch_tk.load takes a spec file's path; this str holds line breaks: "
                        "register spec text with torch_tk.kernel(text)")
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:   # a SpecError at the byte, as the compiler's errors are
        line = raw.count(b"\n", 0, e.start) + 1
        col = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        message = f"the file is not UTF-8 text (byte 0x{raw[e.start]:02x})"
        where = f"{os.fspath(path)}:{line}:{col}: error: {message}"
        raise _spec_error(os.fspath(path), line, col, message, where, raw.decode("utf-8", "replace")) from None
    names = _register_spec(text, os.fspath(path), checked)
    return getattr(torch.ops.tk, names[0])


def runtime_kernels() -> dict[str, dict[str, int]]:
    """The CPU kernels of the ops registered at run time in this process:
    {op name: {variant: loads}}, variant being the dtype code of a kernel
    ("f32", "f64", "f16_i64"...), loads how many times its kernel was
    compiled or loaded from the disk cache (0 until the op's first CPU call
    with those dtypes, then 1). Ops in registration order."""
    fn = _capi.lib().tk_shim_runtime_kernels
    size = 1 << 12
    while True:
        out = ctypes.create_string_buffer(size)
        need = fn(out, size)
        if need < size:
            break
        size = need + 1   # ops registered meanwhile may need more: try again
    kernels: dict[str, dict[str, int]] = {}
    for line in out.value.decode("utf-8").splitlines():
        name, variant, loads = line.split()
        kernels.setdefault(name, {})[variant] = int(loads)
    return kernels
