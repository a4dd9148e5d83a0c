"""The bad-input matrix, generated from every built-in op's spec
(torch_tk.specinfo reads the parameters from the C core), so a new op in
ops/ gets every case without a line here: wrong dtypes, wrong ranks,
mismatched dims, mixed devices, zero-size dims, negative sizes and sizes
that overflow int64 or the allocator, out-of-range scalars, aliasing,
inputs that require grad where no backward exists, and NaN/Inf.

Each case ends in a result or in a RuntimeError whose message names the op
and the argument; never a crash. Every input lives inside a guard buffer
(a larger tensor whose untouched margins are checked), and no input, guard
or margin may change: an op writes only its own fresh outputs.
The C half (what torch cannot express: negative sizes, unknown dtypes...)
is tests/c/test_bad_args.c.
"""
from __future__ import annotations

import math
import re

import pytest
import torch

from spec_calls import OPS, Call, as_tuple, default_dtype, on_meta, tensor_params, tk_op, valid_call
from torch_tk import specinfo
from torch_tk.reference import brick_pad_index, rwkv_loop

INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)


# ---- expectations ----------------------------------------------------------------


def expect_error(call: Call, names, *, also=()):
    """The call raises a RuntimeError that starts with the op's name and
    names one of the arguments `names`; inputs are unchanged."""
    op = call.info.name
    with pytest.raises(RuntimeError) as e:
        call.run()
    msg = str(e.value)
    assert re.match(rf"(tk\.{op}\b|tk::{op}\b)", msg) or f"tk::{op}()" in msg, msg
    assert any(f"'{n}'" in msg for n in names), f"no argument of {names} in: {msg}"
    for word in also:
        assert word in msg, msg
    assert call.inputs_unchanged()
    return msg


MAX_RUN_BYTES = 2**30       # outputs larger than this are not run on the CPU
NEVER_FITS = 2**48          # more bytes than a 47-bit address space holds


def expect_result_or_error(call: Call, names, max_run_bytes=MAX_RUN_BYTES):
    """A result or an error naming the op and one of `names`, decided by the
    Meta kernel first: where it refuses, the CPU kernel must refuse too;
    where its outputs can never be allocated, the CPU kernel must say so;
    where they are at most max_run_bytes, the CPU result must have their
    shapes and dtypes. Inputs are unchanged either way. Returns the result
    or None."""
    op = call.info.name
    try:
        want = as_tuple(on_meta(call).run())
    except RuntimeError:
        expect_error(call, names)
        return None
    nbytes = sum(w.numel() * w.element_size() for w in want)
    if nbytes >= NEVER_FITS:
        expect_error(call, names + list(call.info.outputs), also=["cannot be allocated"])
        return None
    if nbytes > max_run_bytes:
        return None
    out = call.run()
    for o, w in zip(as_tuple(out), want):
        assert o.shape == w.shape and o.dtype == w.dtype, (o.shape, w.shape)
    assert call.inputs_unchanged()
    return out


# ---- the matrix ------------------------------------------------------------------
# Each case is (op, description, function(call) -> None); ids read like
# "rwkv_forward-wrong_dtype-k".

CASES = []


def case(kind):
    def register(fn):
        for name, info in OPS.items():
            for sub, arg in fn(info) or []:
                CASES.append(pytest.param(name, sub, id=f"{name}-{kind}-{arg}"))
        return fn
    return register


def run_case(name, sub):
    sub(valid_call(OPS[name]))


@pytest.mark.parametrize("name", list(OPS))
def test_valid_call(name):
    """The matrix's base call works, writes fresh outputs only, and leaves
    its inputs alone; no output shares memory with an input."""
    c = valid_call(OPS[name])
    out = c.run()
    assert c.inputs_unchanged()
    outs = as_tuple(out)
    assert len(outs) == len(OPS[name].outputs)
    for o in outs:
        for g in c.guards:
            assert not o.untyped_storage().data_ptr() == g.buffer.untyped_storage().data_ptr()


@case("wrong_dtype")
def _wrong_dtype(info):
    for p in tensor_params(info):
        root = info.params[p.dtype_group]
        if root.name == p.name:
            bad = [d for d in specinfo.DTYPES if d not in p.dtypes][:1] + [torch.complex64]
        else:
            bad = [d for d in specinfo.DTYPES if d != default_dtype(info, p)][:2]
        for dt in bad:
            def sub(c, p=p, dt=dt):
                c.dtypes[p.name] = dt
                expect_error(c, [p.name], also=["dtype"])
            yield sub, f"{p.name}-{str(dt).replace('torch.', '')}"


@case("wrong_rank")
def _wrong_rank(info):
    for p in tensor_params(info):
        nexp = p.explicit_dims

        def fewer(c, p=p, nexp=nexp):
            full = c.shape_of(p)
            c.shapes[p.name] = full[len(full) - nexp + 1:] if nexp > 0 else ()
            expect_error(c, [q.name for q in tensor_params(info)])
        if nexp > 0:
            yield fewer, f"{p.name}-fewer"

        def scalar(c, p=p):
            c.shapes[p.name] = ()
            expect_error(c, [q.name for q in tensor_params(info)])
        if nexp > 0:
            yield scalar, f"{p.name}-0d"

        def more(c, p=p):
            c.shapes[p.name] = (1,) + c.shape_of(p)
            if p.has_batch:   # one more batch dim, of size 1: it broadcasts with other '...' inputs
                expect_result_or_error(c, [p.name])
            else:
                expect_error(c, [p.name])
        yield more, f"{p.name}-more"

        def too_many(c, p=p):
            c.shapes[p.name] = (1,) * 9
            expect_error(c, [q.name for q in tensor_params(info)])
        yield too_many, f"{p.name}-9d"


@case("mismatched_dim")
def _mismatched_dim(info):
    uses = {}
    for p in tensor_params(info):
        for d in p.dims:
            if d != "...":
                uses.setdefault(d, []).append(p.name)
    for p in tensor_params(info):
        explicit = [d for d in p.dims if d != "..."]
        for axis, d in enumerate(explicit):
            shared = isinstance(d, int) or len(uses[d]) > 1 or explicit.count(d) > 1
            if not shared:
                continue

            def sub(c, p=p, axis=axis):
                shape = list(c.shape_of(p))
                shape[len(shape) - len(explicit) + axis] += 1
                c.shapes[p.name] = shape
                expect_error(c, uses.get(d, [p.name]) if isinstance(d, str) else [p.name])
            yield sub, f"{p.name}-{d}"


@case("mixed_devices")
def _mixed_devices(info):
    params = tensor_params(info)
    if len(params) < 2:
        return
    names = [q.name for q in params]
    for p in params:
        for dev in ["meta"] + (["cuda"] if torch.cuda.is_available() else []):
            def sub(c, p=p, dev=dev):
                c.devices[p.name] = dev
                expect_error(c, names, also=[dev, "cpu"])
            yield sub, f"{p.name}-{dev}"


@case("zero_size")
def _zero_size(info):
    """A zero dim: a result of the shape the Meta kernel gives (empty; or
    not, when no iteration reads the empty inputs: rwkv_backward_w with no
    batch rows), or (when every iteration would read an empty input) an
    error naming an argument with no elements."""
    names = sorted({d for p in tensor_params(info) for d in p.dims if isinstance(d, str) and d != "..."})
    variants = [(n, {n: 0}, (2,)) for n in names]
    if any(p.has_batch for p in tensor_params(info)):
        variants.append(("batch", {}, (0,)))
        variants.append(("batch2", {}, (3, 0)))
    for label, zero, batch in variants:
        def sub(c, zero=zero, batch=batch):
            c.sizes.update(zero)
            c.batch = batch
            try:
                want = as_tuple(on_meta(c).run())
            except RuntimeError:
                expect_error(c, [p.name for p in tensor_params(c.info)], also=["no elements"])
                return
            out = as_tuple(c.run())
            for o, w in zip(out, want):
                assert o.shape == w.shape and o.dtype == w.dtype and o.device.type == "cpu"
            assert c.inputs_unchanged()
        yield sub, label


HOSTILE_INTS = [-1, -(2**40), 2**40, 2**62, INT64_MAX, INT64_MIN]


@case("int_scalar")
def _int_scalar(info):
    """Out-of-range and negative int scalars: a result or an error naming
    the argument (a negative or overflowing output dim, a default that
    cannot be computed); Python ints beyond int64 are torch's error."""
    for p in info.params:
        if p.kind != "int":
            continue
        for v in HOSTILE_INTS:
            def sub(c, p=p, v=v):
                c.scalars[p.name] = v
                expect_result_or_error(c, [p.name])
            yield sub, f"{p.name}={v}"

        def beyond(c, p=p):
            c.scalars[p.name] = 2**64
            with pytest.raises(RuntimeError, match=rf"{p.name}|int64|overflow"):
                c.run()
        yield beyond, f"{p.name}=2**64"


@case("float_scalar")
def _float_scalar(info):
    """Float scalars are IEEE doubles: NaN, Inf and extremes go through."""
    for p in info.params:
        if p.kind != "float":
            continue
        for v in [math.nan, math.inf, -math.inf, 1e308, -5e-324]:
            def sub(c, p=p, v=v):
                c.scalars[p.name] = v
                out = c.run()
                assert c.inputs_unchanged() and all(o.numel() > 0 for o in as_tuple(out))
            yield sub, f"{p.name}={v}"


@case("huge_sizes")
def _huge_sizes(info):
    """Inputs of up to 2**62 elements without storage (expanded views): the
    output's element count overflows int64 (the binder's error) or its bytes
    can never be allocated (the allocator's, naming the op and the output);
    outputs that fit are checked on Meta only (their reductions would run
    for hours)."""
    params = tensor_params(info)
    names = [p.name for p in params] + [p.name for p in info.params if p.kind == "int"]
    dims = sorted({d for p in params for d in p.dims if isinstance(d, str) and d != "..."})
    for big in (2**12, 2**16, 2**20, 2**31):
        def sub(c, big=big):
            for d in dims:
                c.sizes[d] = big
            c.batch = (big,)
            for p in params:
                shape = c.shape_of(p)
                if math.prod(shape) >= 2**62:   # beyond what torch can describe
                    shape = tuple(min(s, 2**14) for s in shape)
                    c.shapes[p.name] = shape
                c.tensors[p.name] = torch.zeros((), dtype=c.dtypes[p.name]).expand(shape)
            expect_result_or_error(c, names, max_run_bytes=0)   # reductions over 2**12+ terms: no run
        yield sub, f"{big}"


@case("requires_grad")
def _requires_grad(info):
    """An op without backward ops refuses float inputs that require grad
    (naming the argument); under no_grad the same call runs."""
    if info.backward:
        return
    for p in tensor_params(info):
        if not any(d.is_floating_point for d in p.dtypes):
            continue

        def sub(c, p=p):
            args = c.args()
            i = [q.name for q in info.params].index(p.name)
            args[i] = args[i].clone().requires_grad_(True)
            with pytest.raises(RuntimeError, match=rf"^tk\.{info.name}: argument '{p.name}' requires grad"):
                tk_op(info.name)(*args)
            with torch.no_grad():
                tk_op(info.name)(*args)
        yield sub, p.name


@case("none_tensor")
def _none_tensor(info):
    """None for a tensor argument (Python passes it as an undefined tensor):
    an error naming the op and the argument, on the CPU and on Meta. With no
    other tensor argument torch finds no kernel to call, and says so naming
    the op (a NotImplementedError, which is a RuntimeError)."""
    for p in tensor_params(info):
        def sub(c, p=p):
            i = [q.name for q in info.params].index(p.name)
            alone = len(tensor_params(info)) == 1
            want = rf"tk::{info.name}\b" if alone else rf"^tk\.{info.name}: argument '{p.name}': expected a tensor, got None"
            for call in (c, on_meta(c)):
                args = call.args()
                args[i] = None
                with pytest.raises(RuntimeError, match=want):
                    tk_op(info.name)(*args)
        yield sub, p.name


@pytest.mark.parametrize("name, sub", CASES)
def test_bad_input(name, sub):
    run_case(name, sub)


def test_matrix_covers_every_op():
    """Every registered tk op is in the matrix (a spec added to ops/ is)."""
    registered = {n.split("::")[1].split(".")[0] for n in torch._C._dispatch_get_all_op_names()
                  if n.startswith("tk::")}
    assert set(OPS) <= registered
    covered = {c.values[0] for c in CASES}
    assert covered == set(OPS)


def test_no_op_accepts_out_or_aliases():
    """No built-in tk op has an out= overload or writes into an argument
    (schemas without alias annotations): nothing to alias, so the outputs
    are always fresh tensors. (An op with a 'mut' parameter writes exactly
    that one: test_inplace.py.)"""
    for name in OPS:
        packet = getattr(torch.ops.tk, name)
        assert packet.overloads() == ["default"], name
        schema = packet.default._schema
        for a in schema.arguments:
            assert a.alias_info is None or not a.alias_info.is_write, (name, a.name)
        assert not schema.is_mutable


# ---- NaN and Inf -------------------------------------------------------------------


def with_specials(shape, dtype, seed=0):
    """Values in [-2, 2] with NaN, +Inf, -Inf and -0.0 sprinkled in."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(shape, generator=g, dtype=torch.float64) * 4 - 2
    flat = x.view(-1)
    for i, v in enumerate([math.nan, math.inf, -math.inf, -0.0]):
        flat[(i * 7 + 3) % flat.numel()] = v
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_ieee_brick_pad(dtype):
    """brick_pad copies bits: NaN payloads, Infs and -0.0 arrive unchanged."""
    tile = with_specials((5, 7), dtype)
    bits = {torch.float16: torch.int16, torch.bfloat16: torch.int16,
            torch.float32: torch.int32, torch.float64: torch.int64}[dtype]
    nan_payload = torch.tensor([0x7FC1 if bits == torch.int16 else 0x7FC00123], dtype=bits)
    tile.view(bits).view(-1)[0] = nan_payload.to(bits)[0]
    out = torch.ops.tk.brick_pad(tile, 3, 2, 4)
    want = brick_pad_index(tile, 3, 2, 4)
    assert torch.equal(out.view(bits), want.view(bits))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_ieee_rwkv_forward(dtype):
    """NaN and Inf propagate through the sums as IEEE says: the NaN/Inf
    pattern of each output equals the float64 reference's."""
    w = with_specials((3, 6), dtype, seed=1)
    k = with_specials((2, 3, 6), dtype, seed=2)
    for eps in (0.5, math.inf, math.nan):
        out = torch.ops.tk.rwkv_forward(w, k, eps)
        want = rwkv_loop(w.double(), k.double(), eps)
        assert torch.equal(out.isnan(), want.isnan())
        assert torch.equal(out.isposinf(), want.isposinf()) and torch.equal(out.isneginf(), want.isneginf())
        finite = want.isfinite()
        tol = 1e-5 if dtype in (torch.float32, torch.float64) else 5e-2
        torch.testing.assert_close(out.double()[finite], want[finite], rtol=tol, atol=tol)


def rwkv_autograd_ref(w, k, eps):
    """rwkv_forward by the formula with torch ops (differentiable), summing
    only the terms the spec sums: out[..., t] = eps + sum_u w[c, T-1-t+u] k[..., u]."""
    T = w.shape[1]
    return torch.stack([eps + (w[:, T - 1 - t:] * k[:, :, :t + 1]).sum(-1) for t in range(T)], -1)


@pytest.mark.parametrize("name", ["brick_pad", "rwkv_forward"])
def test_ieee_backward(name):
    """The backward ops propagate a NaN/Inf incoming gradient like autograd
    through a float64 reference does (the NaN/Inf pattern of a sum does not
    depend on its order)."""
    if name == "brick_pad":
        tile = torch.rand(5, 7, dtype=torch.float64, requires_grad=True)
        ref = brick_pad_index(tile, 3, 2, 4)
        g = with_specials(ref.shape, torch.float64, seed=3)
        want = torch.autograd.grad(ref, tile, g)
        t2 = tile.detach().requires_grad_(True)
        got = torch.autograd.grad(torch.ops.tk.brick_pad(t2, 3, 2, 4), t2, g)
    else:
        w = torch.rand(3, 6, dtype=torch.float64, requires_grad=True)
        k = torch.rand(2, 3, 6, dtype=torch.float64, requires_grad=True)
        ref = rwkv_autograd_ref(w, k, 0.1)
        g = with_specials(ref.shape, torch.float64, seed=4)
        want = torch.autograd.grad(ref, (w, k), g)
        w2, k2 = w.detach().requires_grad_(True), k.detach().requires_grad_(True)
        got = torch.autograd.grad(torch.ops.tk.rwkv_forward(w2, k2, 0.1), (w2, k2), g)
    for a, b in zip(got, want):
        assert torch.equal(a.isnan(), b.isnan())
        assert torch.equal(a.isposinf(), b.isposinf()) and torch.equal(a.isneginf(), b.isneginf())
        finite = b.isfinite()
        torch.testing.assert_close(a[finite], b[finite])


# An output too large to allocate fails before the shim stages (copies to
# contiguous memory) an input: a stride-0 expanded w of 2**32 elements has 4
# bytes of storage but its copy 16 GiB. Under an address-space limit the
# error must be the output's, with no copy tried first. Under ASan (pytest_asan
# preloads libasan) an address-space limit would stop ASan's own shadow mapping,
# so the same 6 GiB cap is ASan's max_allocation_size_mb instead: a larger
# allocation returns null (allocator_may_return_null=1) and torch raises.
HUGE_CHILD = r"""
import resource, sys
if sys.argv[1] == "rlimit":
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
import torch
import torch_tk  # noqa: F401
big = 1 << 16
w = torch.zeros(()).expand(big, big)
k = torch.zeros(()).expand(big, big, big)
try:
    torch.ops.tk.rwkv_forward(w, k, 0.1)
except RuntimeError as e:
    print(str(e).splitlines()[0])
"""


def test_huge_output_fails_before_staging_inputs():
    import os
    import subprocess
    import sys
    env = dict(os.environ)
    under_asan = "libasan" in env.get("LD_PRELOAD", "")
    if under_asan:
        opts = [o for o in env.get("ASAN_OPTIONS", "").split(":") if o]
        env["ASAN_OPTIONS"] = ":".join(opts + ["allocator_may_return_null=1", "max_allocation_size_mb=6144"])
    p = subprocess.run([sys.executable, "-c", HUGE_CHILD, "asan" if under_asan else "rlimit"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.startswith("tk.rwkv_forward: output 'out' of shape [65536, 65536, 65536]"), p.stdout
