"""Calls of tk ops built from their specs (torch_tk.specinfo): valid
arguments for any op, each input tensor the middle of a guard buffer whose
every byte is checked after the call. Used by test_bad_inputs.py (which
varies them) and test_concurrency.py."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from torch_tk import specinfo

OPS = specinfo.builtin_ops()
GUARD = 64              # guard elements on each side of every input


def tk_op(name):
    return getattr(torch.ops.tk, name).default


# ---- building calls from a spec ------------------------------------------------


def pattern(n: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """n deterministic, mostly distinct values of dtype."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if dtype.is_floating_point:
        return (torch.randn(n, generator=g, dtype=torch.float64) * 3).to(dtype)
    return torch.randint(-100, 100, (n,), generator=g).to(dtype)


@dataclass
class Guarded:
    """An input tensor that is the middle of a guard buffer, and a copy of
    the whole buffer to compare with after the call."""
    tensor: torch.Tensor
    buffer: torch.Tensor | None = None
    snapshot: torch.Tensor | None = None

    @classmethod
    def make(cls, shape, dtype, seed, device="cpu"):
        n = math.prod(shape)
        if device != "cpu":
            return cls(torch.zeros(shape, dtype=dtype, device=device))
        buf = pattern(n + 2 * GUARD, dtype, seed)
        t = buf[GUARD:GUARD + n].view(shape)
        return cls(t, buf, buf.clone())

    def unchanged(self) -> bool:
        if self.buffer is None:
            return True
        return bool(torch.equal(self.buffer.view(torch.uint8), self.snapshot.view(torch.uint8)))


@dataclass
class Call:
    """One call of an op: its arguments by parameter, built from the spec."""
    info: specinfo.OpInfo
    sizes: dict                      # symbolic dim name -> size
    batch: tuple = (2,)              # the '...' dims
    dtypes: dict = field(default_factory=dict)     # param -> dtype
    scalars: dict = field(default_factory=dict)    # param -> value
    shapes: dict = field(default_factory=dict)     # param -> explicit shape (overrides)
    devices: dict = field(default_factory=dict)    # param -> device
    tensors: dict = field(default_factory=dict)    # param -> a tensor to pass as is
    guards: list = field(default_factory=list)

    def shape_of(self, p: specinfo.Param) -> tuple:
        if p.name in self.shapes:
            return tuple(self.shapes[p.name])
        out = []
        for d in p.dims:
            out += list(self.batch) if d == "..." else [self.sizes[d] if isinstance(d, str) else d]
        return tuple(out)

    def args(self) -> list:
        self.guards = []
        out = []
        for i, p in enumerate(self.info.params):
            if p.name in self.tensors:
                out.append(self.tensors[p.name])
            elif p.kind == "tensor":
                g = Guarded.make(self.shape_of(p), self.dtypes[p.name], seed=i,
                                 device=self.devices.get(p.name, "cpu"))
                self.guards.append(g)
                out.append(g.tensor)
            else:
                out.append(self.scalars[p.name])
        return out

    def run(self):
        return tk_op(self.info.name)(*self.args())

    def inputs_unchanged(self) -> bool:
        return all(g.unchanged() for g in self.guards)


def default_dtype(info, p) -> torch.dtype:
    root = info.params[p.dtype_group]
    return torch.float32 if torch.float32 in root.dtypes else root.dtypes[0]


def valid_call(info: specinfo.OpInfo, first_size: int = 2, batch: tuple = (2,)) -> Call:
    """A call the op accepts: sizes first_size, first_size + 1... per
    symbolic dim, the given batch dims for '...', float32 where allowed,
    ints 1, floats 0.5, None for int?."""
    sizes = {}
    for p in info.params:
        for d in p.dims:
            if isinstance(d, str) and d != "..." and d not in sizes:
                sizes[d] = first_size + len(sizes)
    c = Call(info, sizes, batch)
    for p in info.params:
        if p.kind == "tensor":
            c.dtypes[p.name] = default_dtype(info, p)
        elif p.kind == "int":
            c.scalars[p.name] = None if p.optional else 1
        elif p.kind == "float":
            c.scalars[p.name] = 0.5
        else:
            c.scalars[p.name] = True
    return c


def tensor_params(info):
    return [p for p in info.params if p.kind == "tensor"]


def on_meta(call: Call) -> Call:
    """The same call with every input on the meta device (no data)."""
    return Call(call.info, dict(call.sizes), call.batch, dict(call.dtypes), dict(call.scalars),
                dict(call.shapes), devices={p.name: "meta" for p in tensor_params(call.info)},
                tensors={n: t.to("meta") for n, t in call.tensors.items()})


def as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)
