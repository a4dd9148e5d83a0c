"""torch.func.vmap rules for tk ops (torch.library.register_vmap).

A spec's leading `...` dims are batch dims its kernel already runs over in
parallel (docs/spec.md), and they broadcast across its inputs, so vmap needs
no loop for them: the vmapped dim of each batched `...` tensor moves to the
front as one more batch dim, in front of size-1 dims that bring its batch
dims to the most any `...` input has per sample (R), so that the vmapped
dims line up; the unbatched `...` tensors are passed as they are (they
broadcast, read in place), and the op runs once; its outputs, which all
start with `...`, carry the vmapped dim first. Tensors without `...` (w in layernorm(x: [..., N],
w: [N])) are passed as they are when unbatched. When one of them is
batched, or the op is not batchable (batchable() below), or one more dim
would pass tk's 8, the op runs once per vmapped index and the results are
stacked, as torch's own fallback would, without its warning that asks
users to file an issue with PyTorch; so does a batched `...` tensor whose
samples have fewer dims than the spec declares (each call then raises the
op's own error).

An op whose spec draws rand() or randn() follows vmap's `randomness`:
'error' (vmap's default) raises, as torch's random ops do; 'different'
runs the op once for the batch, each sample a batch element of its own
(docs/spec.md: the draws depend on it), and raises where it cannot;
'same' runs it once per sample, each drawing what a call outside vmap
draws.

Every op gets its rule when it is registered: the built-in ones when
torch_tk is imported, a run-time spec's by torch_tk.kernel / torch_tk.load.
"""
from __future__ import annotations

import torch

from ._forksafe import ForkSafeLock
from .specinfo import OpInfo

__all__ = ["register", "batchable"]

_done: set = set()
_MAX_DIMS = 8   # TK_MAX_DIMS: one more dim in front past it takes the per-index path
_lock = ForkSafeLock()   # a fork child gets it unlocked (torch_tk._forksafe)


def batchable(info: OpInfo) -> bool:
    """Whether info's op can run once for a whole vmap: some tensor parameter
    has `...` dims and every output has them."""
    return any(p.has_batch for p in info.params) and bool(info.output_batch) and all(info.output_batch)


def _rule(info: OpInfo, op):
    """The vmap rule of info's op (register_vmap's signature)."""
    fused = batchable(info)
    batch_params = tuple(p.kind == "tensor" and p.has_batch for p in info.params)
    single = len(info.outputs) == 1

    def rule(vinfo, in_dims, *args):
        n = vinfo.batch_size
        randomness = getattr(vinfo, "randomness", "error")
        if info.random and randomness == "error":
            raise RuntimeError(f"tk.{info.name}: vmap: called a random operation (its spec draws rand or randn) "
                               "in randomness='error' mode: pass randomness='same' or 'different' to vmap, or "
                               "call it outside vmap")
        # per sample: each '...' tensor's batch rank, and the most of them
        ranks = {i: args[i].dim() - (d is not None) - info.params[i].explicit_dims
                 for i, d in enumerate(in_dims) if batch_params[i] and args[i] is not None}
        most = max(ranks.values(), default=0)
        # a sample with fewer dims than the spec declares: per index, so the op's own error is raised
        # (folding the vmapped dim into its explicit dims would compute something else); 'same'
        # randomness: per index too, each sample drawing what one call draws
        if (not fused or any(d is not None and not batch_params[i] for i, d in enumerate(in_dims))
                or any(r < 0 for r in ranks.values()) or (info.random and randomness == "same")
                or any(most + 1 + info.params[i].explicit_dims > _MAX_DIMS for i in ranks)):
            if info.random and randomness == "different":
                raise RuntimeError(f"tk.{info.name}: vmap(randomness='different') of a random op needs one call "
                                   "for the whole batch (every batched tensor with '...' dims, every output too): "
                                   "one call per sample would draw the same numbers for every sample")
            return _loop(op, n, in_dims, args, single)
        moved = list(args)
        for i, d in enumerate(in_dims):
            if batch_params[i] and d is not None:
                t = args[i].movedim(d, 0)
                moved[i] = t.reshape(n, *([1] * (most - ranks[i])), *t.shape[1:])
        out = op(*moved)
        return out, (0 if single else (0,) * len(info.outputs))

    return rule


def _loop(op, n: int, in_dims, args, single: bool):
    """op once per vmapped index, the results stacked on dim 0 (n = 0: empty
    results, shaped by a call on meta tensors, which checks the arguments)."""
    if n == 0:
        def meta(a, d):
            if d is None:
                return a.to("meta") if isinstance(a, torch.Tensor) else a
            return torch.empty(a.shape[:d] + a.shape[d + 1:], dtype=a.dtype, device="meta")

        device = next(a.device for a, d in zip(args, in_dims) if d is not None)
        shapes = op(*(meta(a, d) for a, d in zip(args, in_dims)))
        empty = [torch.empty((0,) + o.shape, dtype=o.dtype, device=device) for o in
                 ((shapes,) if single else shapes)]
        return (empty[0], 0) if single else (tuple(empty), (0,) * len(empty))
    calls = [op(*(a.select(d, j) if d is not None else a for a, d in zip(args, in_dims))) for j in range(n)]
    if single:
        return torch.stack(calls), 0
    return tuple(torch.stack(parts) for parts in zip(*calls)), (0,) * len(calls[0])


def register(infos) -> None:
    """Registers the vmap rule of every op among infos (OpInfos of ops already
    on torch.ops.tk); an op that has one is skipped."""
    with _lock:
        for info in infos:
            if info.name in _done or any(p.mut for p in info.params):   # (in place: torch's own vmap path)
                continue
            op = getattr(torch.ops.tk, info.name).default
            torch.library.register_vmap("tk::" + info.name, _rule(info, op))
            _done.add(info.name)
