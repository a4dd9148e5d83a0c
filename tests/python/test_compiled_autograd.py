"""Compiled autograd (torch._dynamo.compiled_autograd) through tk's backward
node (shim/autograd.cpp: compiled_args, apply_with_saved).

The forward runs eagerly, so the tk node is in the autograd graph that
compiled autograd traces; its backward ops must land in the traced graph
(the node is traceable: it only calls tk ops, which have Meta kernels),
the gradients must equal eager autograd's, and a cached graph must take
the scalar arguments and the needed gradients of each call, not of the
first. CPU only: the node's code is the same for CUDA tensors.
"""

import pytest
import torch
from torch._dynamo import compiled_autograd

import torch_tk
from torch_tk.reference import rwkv_inputs

tk = torch.ops.tk

pytestmark = pytest.mark.skipif(
    torch.__version__ < (2, 13), reason="compiled autograd through tk's node needs torch >= 2.13 (docs/autograd.md)"
)

# two float outputs and an int one: a loss that uses one float output leaves
# the other's gradient undefined (filled with zeros), the int one has none
TWO_OUT_SPEC = """
op ca_two_out(x: float[N], a: float) -> (y: x.dtype[N], z: x.dtype[N], n: int64[N]):
    backward ca_two_out_backward
    for i in y:
        y[i] = x[i] * a
        z[i] = x[i] * x[i]
        n[i] = i
op ca_two_out_backward(x: float[N], a: float, grad_y: x.dtype[N], grad_z: x.dtype[N]) -> grad_x: x.dtype[N]:
    for i in grad_x:
        grad_x[i] = grad_y[i] * a + 2.0 * x[i] * grad_z[i]
"""


class Recorder:
    """A torch.compile backend for the compiled autograd graph: AOTAutograd
    traces it into aten and tk ops, and the code of each graph is kept."""

    def __init__(self):
        from torch._dynamo.backends.common import aot_autograd

        self.graphs = []
        self.backend = aot_autograd(fw_compiler=self.keep)

    def keep(self, gm, example_inputs):
        self.graphs.append(gm.code)
        return gm

    def __call__(self, gm, example_inputs):
        return self.backend(gm, example_inputs)


def leaf(t):
    return t.detach().requires_grad_(True)


def eager_grads(fn, inputs):
    inputs = [leaf(t) for t in inputs]
    fn(*inputs).backward()
    return [t.grad for t in inputs]


def compiled_grads(fn, inputs, backend, wanted=None):
    """Eager forward, backward through compiled autograd; grads of the inputs
    selected by wanted (all by default; the others do not require grad)."""
    wanted = wanted or [True] * len(inputs)
    inputs = [leaf(t) if w else t for t, w in zip(inputs, wanted)]
    loss = fn(*inputs)
    with compiled_autograd._enable(torch.compile(backend=backend, fullgraph=True)):
        loss.backward()
    return [t.grad for t in inputs]


def rwkv_loss(eps):
    return lambda w, k: (tk.rwkv_forward(w, k, eps) ** 2).sum()


def test_rwkv_backward_ops_are_in_the_graph():
    torch._dynamo.reset()
    rec = Recorder()
    w, k = rwkv_inputs(2, 8, 33, seed=31)
    got = compiled_grads(rwkv_loss(0.1), [w, k], rec)
    ref = eager_grads(rwkv_loss(0.1), [w, k])
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)
    assert len(rec.graphs) == 1
    code = rec.graphs[0]
    assert "torch.ops.tk.rwkv_backward_w" in code and "torch.ops.tk.rwkv_backward_k" in code, code


def test_cached_graph_takes_each_calls_scalars():
    """eps changes d(out^2)/dw; the second and third backward reuse the graph."""
    torch._dynamo.reset()
    rec = Recorder()
    w, k = rwkv_inputs(2, 4, 16, seed=32)
    for eps in (0.1, 3.0, -2.5):
        got = compiled_grads(rwkv_loss(eps), [w, k], rec)
        ref = eager_grads(rwkv_loss(eps), [w, k])
        for g, r in zip(got, ref):
            torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)
    assert len(rec.graphs) == 1   # one compile, three calls


def test_only_the_needed_backward_op_runs():
    torch._dynamo.reset()
    w, k = rwkv_inputs(2, 4, 16, seed=33)
    for wanted, op, other in [([False, True], "rwkv_backward_k", "rwkv_backward_w"),
                              ([True, False], "rwkv_backward_w", "rwkv_backward_k")]:
        rec = Recorder()
        got = compiled_grads(rwkv_loss(0.5), [w, k], rec, wanted)
        ref = eager_grads(rwkv_loss(0.5), [w, k])
        for g, r, want in zip(got, ref, wanted):
            if want:
                torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)
            else:
                assert g is None
        assert len(rec.graphs) == 1
        assert f"torch.ops.tk.{op}" in rec.graphs[0] and f"torch.ops.tk.{other}" not in rec.graphs[0]


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_brick_pad_and_rwkv_in_one_graph(backend):
    torch._dynamo.reset()
    w, k = rwkv_inputs(2, 8, 24, seed=34)
    tile = torch.rand(2, 6, 5, generator=torch.Generator().manual_seed(35))

    def loss(w, k, tile):
        return tk.rwkv_forward(w, k, 0.2).square().sum() + tk.brick_pad(tile, 30, 20, 7).square().sum()

    got = compiled_grads(loss, [w, k, tile], backend)
    ref = eager_grads(loss, [w, k, tile])
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)


def test_undefined_output_grad_and_int_output():
    torch._dynamo.reset()
    op = torch_tk.kernel(TWO_OUT_SPEC, file="ca_two_out.tk")
    x = torch.randn(37, generator=torch.Generator().manual_seed(36))
    for use in ("y", "z", "both"):
        def loss(x):
            y, z, n = op(x, 1.5)
            assert n.dtype == torch.int64 and not n.requires_grad
            return {"y": y.sum(), "z": (z * 3).sum(), "both": (y * z).sum()}[use]

        (got,) = compiled_grads(loss, [x], "eager")
        (ref,) = eager_grads(loss, [x])
        torch.testing.assert_close(got, ref, rtol=1e-6, atol=1e-6)
        expect = {"y": torch.full_like(x, 1.5), "z": 6 * x, "both": 3 * 1.5 * x * x}[use]
        torch.testing.assert_close(got, expect, rtol=1e-6, atol=1e-6)


def test_undefined_output_grad_takes_each_calls_shape():
    """The zeros for an unused output's gradient have that call's shape, also
    once compiled autograd has made the sizes dynamic (a cached graph)."""
    torch._dynamo.reset()
    op = torch_tk.kernel(TWO_OUT_SPEC, file="ca_two_out.tk")
    gen = torch.Generator().manual_seed(37)
    for n in (8, 12, 16, 21):
        x = torch.randn(n, generator=gen)
        (got,) = compiled_grads(lambda x: op(x, 2.5)[0].sum(), [x], "eager")
        torch.testing.assert_close(got, torch.full((n,), 2.5))
        (got,) = compiled_grads(lambda x: op(x, 2.5)[1].sum(), [x], "eager")
        torch.testing.assert_close(got, 2 * x)
