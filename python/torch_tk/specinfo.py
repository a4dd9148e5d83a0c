"""What each built-in op's spec declares, read from the C core in libtk
(ctypes): parameter kinds, allowed dtypes, declared dims, outputs, backward
ops. Tests generate their inputs from it (tests/python/test_bad_inputs.py),
so a new spec in ops/ gets them without a line of test code.

    >>> info = torch_tk.specinfo.spec_info("rwkv_forward")
    >>> [(p.name, p.kind, p.dims) for p in info.params]
    [('w', 'tensor', ('C', 'T')), ('k', 'tensor', ('B', 'C', 'T')), ('eps', 'float', ())]
"""
from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

import torch

from . import _capi

# ORDER DTYPE (compiler/tk.h)
DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64)
KINDS = ("tensor", "int", "float", "bool")  # tk_param_kind
DIM_BATCH, DIM_NAME, DIM_FIXED = 0, 1, 2    # tk_op_param_dim


@dataclass(frozen=True)
class Param:
    name: str
    kind: str                       # "tensor", "int", "float" or "bool"
    optional: bool = False          # 'int?', 'float?' or an optional tensor ('x.dtype[N]? = 0'): may be None
    dtypes: tuple = ()              # allowed torch dtypes (tensors)
    dtype_group: int = -1           # the parameter whose dtype this one shares (itself if a class)
    dims: tuple = ()                # per declared dim: "...", a dim name, or an int
    mut: bool = False               # declared 'mut': the op updates it in place

    @property
    def explicit_dims(self) -> int:
        return sum(1 for d in self.dims if d != "...")

    @property
    def has_batch(self) -> bool:
        return bool(self.dims) and self.dims[0] == "..."


@dataclass(frozen=True)
class OpInfo:
    name: str
    file: str
    schema: str
    params: tuple
    outputs: tuple                  # the names of the outputs it returns (not the 'mut' parameters)
    backward: tuple                 # names of the ops that compute its gradients
    output_batch: tuple = ()        # per output: whether its shape starts with '...'
    random: bool = False            # the body draws rand() or randn()

    def param(self, name: str) -> Param:
        return next(p for p in self.params if p.name == name)


def _param(lib, op, i) -> Param:
    name = lib.tk_op_param_name(op, i).decode()
    kind = KINDS[lib.tk_op_param_kind(op, i)]
    if kind != "tensor":
        return Param(name, kind, optional=bool(lib.tk_op_param_optional(op, i)))
    mask = lib.tk_op_param_dtypes(op, i)
    dims = []
    for j in range(lib.tk_op_shape_ndims(op, 0, i)):  # TK_SHAPE_INPUT
        dname, value = ctypes.c_char_p(), ctypes.c_int64()
        k = lib.tk_op_param_dim(op, i, j, ctypes.byref(dname), ctypes.byref(value))
        dims.append("..." if k == DIM_BATCH else dname.value.decode() if k == DIM_NAME else value.value)
    return Param(name, kind, optional=bool(lib.tk_op_param_optional(op, i)),
                 dtypes=tuple(d for t, d in enumerate(DTYPES) if mask >> t & 1),
                 dtype_group=lib.tk_op_param_dtype_group(op, i), dims=tuple(dims),
                 mut=bool(lib.tk_op_param_mut(op, i)))


def _op_info(lib, op) -> OpInfo:
    return OpInfo(
        name=lib.tk_op_name(op).decode(),
        file=lib.tk_op_file(op).decode(),
        schema=lib.tk_op_schema(op).decode(),
        params=tuple(_param(lib, op, i) for i in range(lib.tk_op_nparams(op))),
        outputs=tuple(lib.tk_op_output_name(op, o).decode() for o in range(lib.tk_op_nreturns(op))),
        backward=tuple(lib.tk_op_backward_at(op, b).decode() for b in range(lib.tk_op_nbackward(op))),
        output_batch=tuple(bool(lib.tk_op_shape_has_batch(op, 1, o))   # TK_SHAPE_OUTPUT
                           for o in range(lib.tk_op_nreturns(op))),
        random=bool(lib.tk_op_random(op)),
    )


def _ops_of(specs, link: bool) -> dict:
    """{name: OpInfo} of every op in specs ((file, text) pairs, bytes), in
    spec order; link: check the backward links across them (tk_ctx_link)."""
    lib = _capi.lib()
    ctx = lib.tk_ctx_new()
    try:
        for file, text in specs:
            if lib.tk_load_spec(ctx, file, text, len(text)) != 0:
                raise RuntimeError(lib.tk_ctx_error(ctx).decode())
        if link and lib.tk_ctx_link(ctx) != 0:
            raise RuntimeError(lib.tk_ctx_error(ctx).decode())
        infos = (_op_info(lib, lib.tk_op_at(ctx, k)) for k in range(lib.tk_op_count(ctx)))
        return {info.name: info for info in infos}
    finally:
        lib.tk_ctx_free(ctx)


@functools.lru_cache(maxsize=None)
def builtin_ops() -> dict:
    """{name: OpInfo} for every op compiled into libtk (ops/*.tk), in spec order."""
    lib = _capi.lib()
    nspecs = ctypes.c_int.in_dll(lib, "tk_builtin_nspecs").value
    specs = (_capi.BuiltinSpec * nspecs).in_dll(lib, "tk_builtin_specs")
    return _ops_of([(s.file, s.text) for s in specs], link=True)


def text_ops(file: str, text: str) -> dict:
    """{name: OpInfo} of the ops of one spec text (a run-time spec, already
    registered, so it parses and checks); its backward links are not checked
    here (a backward op may be in another spec)."""
    return _ops_of([(file.encode("utf-8"), text.encode("utf-8"))], link=False)


def spec_info(name: str) -> OpInfo:
    """What the spec of built-in op `name` declares; KeyError if there is none."""
    ops = builtin_ops()
    if name not in ops:
        raise KeyError(f"torch_tk: no built-in op {name!r} (have: {', '.join(ops)})")
    return ops[name]
