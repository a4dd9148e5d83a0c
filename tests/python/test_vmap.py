"""torch.func.vmap over tk ops (torch_tk.batching, docs/autograd.md "vmap").

An op whose tensors carry `...` batch dims runs once for a whole vmap: the
vmapped dim becomes one more batch dim. Checked here against the same op
called per vmapped index (and against torch's own formulations), on fresh
random inputs, with the vmapped dim in front, inside and nested; tensors
without `...` batched (the per-index loop); unbatched `...` tensors beside
batched ones, and batch ranks that differ per sample (broadcast); several outputs; batch size 0; per-sample gradients
(vmap(grad)); jacrev; torch.compile; errors. The number of kernel calls is
read from the profiler (torch's fallback would call the op once per index).
"""

import os
import warnings

import pytest
import torch
from torch.func import grad, jacrev, vmap

import torch_tk
from torch_tk.reference import rwkv_conv1d, rwkv_inputs

tk = torch.ops.tk
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

VM_SPEC = """
op vm_scale_rows(x: float[..., N], w: x.dtype[N], b: float) -> y: x.dtype[..., N]:
    for i in y:
        y[i] = x[i] * w[i] + b
op vm_add(x: float[..., N], y: x.dtype[..., N]) -> z: x.dtype[..., N]:
    for i in z:
        z[i] = x[i] + y[i]
op vm_minmax(x: float[..., N]) -> (lo: x.dtype[..., 1], hi: x.dtype[..., 1]):
    for _ in lo:
        a = x[0]
        c = x[0]
        for i in range(1, N):
            a = min(a, x[i])
            c = max(c, x[i])
        lo[0] = a
        hi[0] = c
op vm_mul(x: float[..., N], a: x.dtype[..., N]) -> y: x.dtype[..., N]:
    backward vm_mul_backward
    for i in y:
        y[i] = x[i] * a[i]
op vm_mul_backward(x: float[..., N], a: x.dtype[..., N], grad_y: x.dtype[..., N])
        -> (grad_x: x.dtype[..., N], grad_a: x.dtype[..., N]):
    for i in grad_x:
        grad_x[i] = grad_y[i] * a[i]
        grad_a[i] = grad_y[i] * x[i]
op vm_outer(u: float[M], v: u.dtype[N]) -> (p: u.dtype[M, N], s: u.dtype[M, N]):
    for i, j in p:
        p[i, j] = u[i] * v[j]
        s[i, j] = u[i] + v[j]
"""


@pytest.fixture(scope="module")
def ops():
    torch_tk.kernel(VM_SPEC, file="vm.tk")
    return tk


def gen(seed):
    return torch.Generator().manual_seed(seed)


def calls(fn, name):
    """fn's result and how many times the profiler saw tk::<name> run."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out = fn()
    return out, sum(e.count for e in prof.key_averages() if e.key == "tk::" + name)


def test_brick_pad_is_one_call():
    tiles = torch.rand(9, 12, 8, generator=gen(1))
    out, n = calls(lambda: vmap(lambda t: tk.brick_pad(t, 5, 3, 2))(tiles), "brick_pad")
    assert torch.equal(out, torch.stack([tk.brick_pad(t, 5, 3, 2) for t in tiles]))
    assert n <= 2, f"{n} calls of tk::brick_pad for one vmap of 9 (the per-index fallback would make 10)"
    # the vmapped dim last (a strided view), an explicit size, and tiles with batch dims of their own
    tiles = torch.rand(4, 12, 8, 6, generator=gen(2))
    got = vmap(lambda t: tk.brick_pad(t, 5, 3, 2, height=20, width=30), in_dims=3, out_dims=1)(tiles)
    ref = torch.stack([tk.brick_pad(tiles[..., i], 5, 3, 2, height=20, width=30) for i in range(6)], dim=1)
    assert torch.equal(got, ref)
    # nested: two vmapped dims
    tiles = torch.randint(0, 100, (3, 5, 12, 8), generator=gen(3), dtype=torch.int32)
    got = vmap(vmap(lambda t: tk.brick_pad(t, 5, 3, 2)))(tiles)
    assert torch.equal(got, torch.stack([torch.stack([tk.brick_pad(t, 5, 3, 2) for t in row]) for row in tiles]))
    # batch size 0
    assert vmap(lambda t: tk.brick_pad(t, 5, 3, 2))(tiles[0, :0]).shape == (0, 18, 18)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
def test_vmap_cuda():
    """The rule on CUDA tensors: brick_pad in one call, per-sample gradients
    of the softmax example, rwkv_forward per index; against the CPU."""
    tiles = torch.rand(7, 12, 8, generator=gen(30))
    got = vmap(lambda t: tk.brick_pad(t, 5, 3, 2), in_dims=2)(tiles.cuda().transpose(0, 2).contiguous())
    ref = vmap(lambda t: tk.brick_pad(t, 5, 3, 2), in_dims=2)(tiles.transpose(0, 2).contiguous())
    assert torch.equal(got.cpu(), ref)
    softmax = torch_tk.load(os.path.join(ROOT, "examples", "specs", "softmax.tk"))
    x = torch.randn(6, 4, 33, generator=gen(31), dtype=torch.float64)
    t = torch.randn(6, 4, 33, generator=gen(32), dtype=torch.float64)
    per_sample = vmap(grad(lambda xi, ti: (softmax(xi) - ti).square().sum()))
    torch.testing.assert_close(per_sample(x.cuda(), t.cuda()).cpu(), per_sample(x, t))
    w, k = rwkv_inputs(2, 3, 6, seed=33)
    ks = torch.stack([k, 2 * k])
    f = vmap(lambda k, w: tk.rwkv_forward(w, k, 0.1), in_dims=(0, None))
    torch.testing.assert_close(f(ks.cuda(), w.cuda()).cpu(), f(ks, w), rtol=1e-5, atol=1e-5)


def test_batch_dims_and_plain_dims(ops):
    x = torch.randn(6, 3, 7, generator=gen(4), dtype=torch.float64)
    w = torch.randn(7, generator=gen(5), dtype=torch.float64)
    # x batched, w shared: one call
    out, n = calls(lambda: vmap(ops.vm_scale_rows, in_dims=(0, None, None))(x, w, 0.5), "vm_scale_rows")
    torch.testing.assert_close(out, x * w + 0.5)
    assert n <= 2
    # the vmapped dim inside x
    got = vmap(ops.vm_scale_rows, in_dims=(1, None, None), out_dims=1)(x, w, 0.5)
    torch.testing.assert_close(got, (x * w + 0.5))
    # w batched (a tensor without '...'): once per index
    ws = torch.randn(5, 7, generator=gen(6), dtype=torch.float64)
    out, n = calls(lambda: vmap(ops.vm_scale_rows, in_dims=(None, 0, None))(x, ws, -1.0), "vm_scale_rows")
    torch.testing.assert_close(out, x[None] * ws[:, None, None, :] - 1.0)
    assert n >= 5
    # both batched
    xs = torch.randn(5, 3, 7, generator=gen(7), dtype=torch.float64)
    got = vmap(ops.vm_scale_rows, in_dims=(0, 0, None))(xs, ws, 2.0)
    torch.testing.assert_close(got, xs * ws[:, None, :] + 2.0)


def test_unbatched_batch_param_broadcasts(ops):
    x = torch.randn(5, 2, 4, generator=gen(8))
    y = torch.randn(2, 4, generator=gen(9))
    out, n = calls(lambda: vmap(ops.vm_add, in_dims=(0, None))(x, y), "vm_add")
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)
    assert n <= 2
    got = vmap(ops.vm_add, in_dims=(None, 1))(y, x.transpose(0, 1))
    torch.testing.assert_close(got, x + y, rtol=0, atol=0)
    # per-index shapes that do not match are the op's error, as without vmap
    with pytest.raises(RuntimeError, match=r"tk\.vm_add"):
        vmap(ops.vm_add, in_dims=(0, None))(x, torch.randn(3, 4))


def test_batch_ranks_that_differ_per_sample(ops):
    """`...` inputs broadcast: per sample x may have batch dims a lacks. The
    vmapped dims must line up in front, not against x's own batch dim."""
    x = torch.tensor([[1.0, 1.0], [10.0, 10.0]])           # unbatched: per sample (2,) x N
    a = torch.tensor([[1.0, 1.0], [2.0, 2.0]])             # vmapped: per sample N only
    out, n = calls(lambda: vmap(lambda t: ops.vm_mul(x, t))(a), "vm_mul")
    torch.testing.assert_close(out, torch.stack([x * t for t in a]), rtol=0, atol=0)
    assert n <= 2
    xs, bs = torch.randn(4, 2, 3, 5, generator=gen(40)), torch.randn(5, 4, generator=gen(41))
    torch.testing.assert_close(vmap(ops.vm_mul, in_dims=(0, 1))(xs, bs), xs * bs.t()[:, None, None, :])
    # per-sample gradients of a shared weight with fewer batch dims than the samples
    w, data = torch.randn(5, generator=gen(42)), torch.randn(4, 3, 5, generator=gen(43))
    per_sample = vmap(grad(lambda w, d: ops.vm_mul(d, w).square().sum()), in_dims=(None, 0))(w, data)
    torch.testing.assert_close(per_sample, (2 * w * data * data).sum(1))


def test_several_outputs(ops):
    x = torch.randn(4, 3, 9, generator=gen(10), dtype=torch.float64)
    (lo, hi), n = calls(lambda: vmap(ops.vm_minmax, in_dims=1)(x), "vm_minmax")
    torch.testing.assert_close(lo, x.amin(-1, keepdim=True).transpose(0, 1), rtol=0, atol=0)
    torch.testing.assert_close(hi, x.amax(-1, keepdim=True).transpose(0, 1), rtol=0, atol=0)
    assert n <= 2
    # an op without '...': once per index, both outputs stacked
    u = torch.randn(6, 3, generator=gen(11), dtype=torch.float64)
    v = torch.randn(4, generator=gen(12), dtype=torch.float64)
    p, s = vmap(ops.vm_outer, in_dims=(0, None))(u, v)
    torch.testing.assert_close(p, u[:, :, None] * v)
    torch.testing.assert_close(s, u[:, :, None] + v)


def test_op_without_batch_dims_needs_no_torch_fallback():
    """rwkv_forward's k has no '...': vmap calls it per index, and without
    torch's warning (which asks to file an issue with PyTorch)."""
    w, k = rwkv_inputs(2, 3, 6, seed=13)
    ks = torch.stack([k, 2 * k, k.flip(-1)])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        got = vmap(lambda k: tk.rwkv_forward(w, k, 0.1))(ks)
    torch.testing.assert_close(got, torch.stack([rwkv_conv1d(w, kk, 0.1) for kk in ks]), rtol=1e-5, atol=1e-5)
    assert not [m for m in seen if "batching rule" in str(m.message)]
    # batch size 0: empty, shaped like the op's result (from its Meta kernel)
    empty = vmap(lambda k: tk.rwkv_forward(w, k, 0.1))(ks[:0])
    assert empty.shape == (0, *k.shape) and empty.dtype == k.dtype


def test_per_sample_gradients():
    """vmap(grad(f)): one gradient per sample, as a loop of torch.autograd
    would give. The softmax example (its backward op vmapped in one call) and
    rwkv_forward (per index)."""
    softmax = torch_tk.load(os.path.join(ROOT, "examples", "specs", "softmax.tk"))
    x = torch.randn(8, 16, generator=gen(14), dtype=torch.float64)
    t = torch.randn(8, 16, generator=gen(15), dtype=torch.float64)

    def loss(f):
        return lambda xi, ti: (f(xi) - ti).square().sum()

    got = vmap(grad(loss(softmax)))(x, t)
    ref = torch.stack([torch.autograd.grad(loss(lambda a: torch.softmax(a, -1))(xi.requires_grad_(), ti), xi)[0]
                       for xi, ti in zip(x.clone(), t)])
    torch.testing.assert_close(got, ref)
    # jacrev vmaps the backward op over the rows of an identity
    jac = jacrev(softmax)(x[0])
    torch.testing.assert_close(jac, jacrev(lambda a: torch.softmax(a, -1))(x[0]))

    w, k = rwkv_inputs(2, 3, 6, dtype=torch.float64, seed=16)
    ks = torch.randn(4, 2, 3, 6, generator=gen(17), dtype=torch.float64)
    got = vmap(grad(lambda w, k: tk.rwkv_forward(w, k, 0.1).square().sum()), in_dims=(None, 0))(w, ks)
    ref = []
    for kk in ks:
        w1 = w.clone().requires_grad_()
        rwkv_conv1d(w1, kk, 0.1).square().sum().backward()
        ref.append(w1.grad)
    torch.testing.assert_close(got, torch.stack(ref), rtol=1e-5, atol=1e-5)


def test_vmap_under_torch_compile(ops):
    x = torch.randn(5, 3, 7, generator=gen(18))
    w = torch.randn(7, generator=gen(19))
    fn = torch.compile(vmap(ops.vm_scale_rows, in_dims=(0, None, None)), fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(fn(x, w, 1.5), x * w + 1.5)


def test_bad_arguments_under_vmap(ops):
    x = torch.randn(5, 3, 7, generator=gen(20))
    with pytest.raises(RuntimeError, match=r"tk\.vm_scale_rows.*'w'"):
        vmap(ops.vm_scale_rows, in_dims=(0, None, None))(x, torch.randn(6), 0.0)
    with pytest.raises(RuntimeError, match=r"tk\.vm_scale_rows.*'w'"):
        vmap(ops.vm_scale_rows, in_dims=(None, 0, None))(x[0], torch.randn(5, 6), 0.0)


def test_eight_dims_per_sample_take_the_per_index_path(ops):
    """One more dim in front of an 8-dim tensor would pass tk's limit: vmap
    calls the op per index instead."""
    x = torch.randn(3, *(1,) * 6, 2, 5, generator=gen(21), dtype=torch.float64)   # 9 dims: 8 a sample
    w = torch.randn(5, generator=gen(22), dtype=torch.float64)
    torch.testing.assert_close(vmap(ops.vm_scale_rows, in_dims=(0, None, None))(x, w, 1.0), x * w + 1.0)


def test_samples_with_too_few_dims_raise_the_ops_error(ops):
    """A batched `...` tensor whose samples have fewer dims than the spec
    declares raises what the call per sample raises (folding the vmapped dim
    into the op's own dims computed brick_pad of the whole batch, silently)."""
    x = torch.arange(12.).reshape(3, 4)
    with pytest.raises(RuntimeError, match=r"tk\.brick_pad: argument 'tile': expected at least 2 dims"):
        vmap(lambda t: tk.brick_pad(t, 2, 1, 1))(x)
    with pytest.raises(RuntimeError, match=r"tk\.vm_scale_rows: argument 'x': expected at least 1 dims"):
        vmap(ops.vm_scale_rows, in_dims=(0, None, None))(torch.randn(4), torch.randn(1), 0.0)
    # one dim a sample is enough for x[..., N]: one call, as before
    x2 = torch.randn(5, 6, generator=gen(30))
    w = torch.randn(6, generator=gen(31))
    out, n = calls(lambda: vmap(ops.vm_scale_rows, in_dims=(0, None, None))(x2, w, 0.5), "vm_scale_rows")
    torch.testing.assert_close(out, x2 * w + 0.5)
    assert n <= 2   # (the profiler sees the batched call and the kernel call)


def test_random_ops_follow_vmap_randomness():
    """An op that draws rand() (examples/specs/dropout.tk): vmap's default
    randomness='error' raises as torch's random ops do; 'same' gives every
    sample the draws of one call outside vmap; 'different' one call for the
    batch, each sample its own draws."""
    torch_tk.load(os.path.join(ROOT, "examples", "specs", "dropout.tk"))
    x = torch.ones(4, 64)
    one = tk.dropout(x[0], 0.5, 123)
    with pytest.raises(RuntimeError, match=r"tk\.dropout: vmap: called a random operation .* randomness='error'"):
        vmap(lambda t: tk.dropout(t, 0.5, 123))(x)
    same = vmap(lambda t: tk.dropout(t, 0.5, 123), randomness="same")(x)
    assert all(torch.equal(same[i], one) for i in range(4))
    diff, n = calls(lambda: vmap(lambda t: tk.dropout(t, 0.5, 123), randomness="different")(x), "dropout")
    assert n <= 2   # (the profiler sees the batched call and the kernel call)
    torch.testing.assert_close(diff, tk.dropout(x, 0.5, 123))   # the batch elements' draws
    assert not torch.equal(diff[0], diff[1])
    # a batched tensor without '...' would need a call per sample: each would draw alike, so it raises
    with pytest.raises(RuntimeError, match=r"randomness='different'\) of a random op needs one call"):
        vmap(lambda t: tk.dropout(t, 0.5, 123), randomness="different")(torch.ones(4))
