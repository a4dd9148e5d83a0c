"""The C functions of libtk that Python calls through ctypes, with their
signatures, in one place (the C declarations are in compiler/tk.h and in the
shim's extern "C" functions: shim/registry.cpp, shim/runtime.cpp,
shim/output_cache.cpp, shim/cuda.cpp).

    from . import _capi
    _capi.lib().tk_shim_register(...)

lib() is the loaded libtk (torch_tk._lib.load()) with every signature below
set; bind(cdll) sets them on another handle of a libtk (the loader uses it
before the library counts as loaded).
"""
from __future__ import annotations

import ctypes
import functools

# tk_status (compiler/tk.h)
OK, ERR_SYNTAX, ERR_CHECK, ERR_ARG, ERR_NOMEM, ERR_NOTFOUND, ERR_INVALID, ERR_COMPILE, ERR_BOUNDS = range(9)


class Error(ctypes.Structure):
    """tk_error (compiler/tk.h): the core's one error type."""

    _fields_ = [
        ("status", ctypes.c_int),
        ("line", ctypes.c_int),
        ("col", ctypes.c_int),
        ("file", ctypes.c_char * 256),
        ("message", ctypes.c_char * 1024),
        ("text", ctypes.c_char * 1536),
    ]

    def decoded(self) -> tuple[int, str, int, int, str, str]:
        """(status, file, line, col, message, text), the texts as str."""
        def s(raw: bytes) -> str:
            return raw.decode("utf-8", "replace")
        return self.status, s(self.file), self.line, self.col, s(self.message), s(self.text)


class BuiltinSpec(ctypes.Structure):
    """tk_builtin_spec: one ops/*.tk file compiled into libtk."""

    _fields_ = [("file", ctypes.c_char_p), ("text", ctypes.c_char_p)]


_P, _I, _C, _Z = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t
_I64P = ctypes.POINTER(ctypes.c_int64)

# name: (restype, argtypes)
SIGNATURES = {
    # the core (compiler/tk.h), for torch_tk.specinfo
    "tk_ctx_new": (_P, []),
    "tk_ctx_free": (None, [_P]),
    "tk_ctx_error": (_C, [_P]),
    "tk_ctx_last_error": (ctypes.POINTER(Error), [_P]),
    "tk_load_spec": (_I, [_P, _C, _C, _Z]),
    "tk_ctx_link": (_I, [_P]),
    "tk_op_count": (_I, [_P]),
    "tk_op_at": (_P, [_P, _I]),
    "tk_op_name": (_C, [_P]),
    "tk_op_file": (_C, [_P]),
    "tk_op_schema": (_C, [_P]),
    "tk_op_nbackward": (_I, [_P]),
    "tk_op_random": (_I, [_P]),
    "tk_op_backward_at": (_C, [_P, _I]),
    "tk_op_nparams": (_I, [_P]),
    "tk_op_param_kind": (_I, [_P, _I]),
    "tk_op_param_name": (_C, [_P, _I]),
    "tk_op_param_optional": (_I, [_P, _I]),
    "tk_op_param_dtypes": (ctypes.c_uint, [_P, _I]),
    "tk_op_param_dtype_group": (_I, [_P, _I]),
    "tk_op_shape_ndims": (_I, [_P, _I, _I]),
    "tk_op_param_dim": (_I, [_P, _I, _I, ctypes.POINTER(_C), _I64P]),
    "tk_op_shape_has_batch": (_I, [_P, _I, _I]),
    "tk_op_noutputs": (_I, [_P]),
    "tk_op_nreturns": (_I, [_P]),
    "tk_op_param_mut": (_I, [_P, _I]),
    "tk_op_output_name": (_C, [_P, _I]),
    "tk_schedule_parse": (_I, [_C, _P, _C, _Z]),
    # the shim: loading (shim/registry.cpp) and run-time specs (shim/runtime.cpp)
    "tk_shim_load_error": (_C, []),
    "tk_shim_register": (_I, [_C, _C, _I, _C, _Z, ctypes.POINTER(Error)]),
    "tk_shim_runtime_kernels": (_Z, [_C, _Z]),
    "tk_shim_cc_cache_dir": (_C, []),
    # the CPU output cache (shim/output_cache.cpp)
    "tk_shim_cpu_cache_info": (None, [_I64P]),
    "tk_shim_cpu_cache_empty": (None, []),
    # CUDA (shim/cuda.cpp)
    "tk_shim_cuda_info": (_C, []),
    "tk_shim_cuda_nkernels": (_I, []),
    "tk_shim_cuda_kernel_name": (_C, [_I]),
    "tk_shim_cuda_precompile": (_I, [_I, _I, ctypes.POINTER(_I), _C, _Z]),
    "tk_shim_cuda_cache_dir": (_C, []),
}


def bind(cdll: ctypes.CDLL) -> ctypes.CDLL:
    """Sets every signature above that cdll exports; returns cdll."""
    for name, (res, args) in SIGNATURES.items():
        fn = getattr(cdll, name, None)
        if fn is not None:
            fn.restype, fn.argtypes = res, args
    return cdll


@functools.lru_cache(maxsize=None)
def lib() -> ctypes.CDLL:
    """The loaded libtk, its signatures set (loads it on first use)."""
    from . import _lib  # (torch_tk._lib uses bind() while loading)

    return bind(ctypes.CDLL(_lib.load()))  # already loaded by torch: the same handle
