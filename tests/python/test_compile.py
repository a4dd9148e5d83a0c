"""torch.compile(fullgraph=True) of a small model using both tk ops (tk_models.BothOps):
no graph break (fullgraph raises on one), the same outputs and gradients as
eager. Inductor on the CPU (what users get by default), and dynamic shapes
(symbolic Meta kernels) with the aot_eager backend, where a new batch size
must not recompile.
"""

import pytest
import torch
import torch._dynamo

from tk_models import BothOps, example_input, forward_backward

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")),
]


def assert_same(eager, compiled, rtol=1e-5, atol=1e-6):
    (y1, g1), (y2, g2) = eager, compiled
    g2 = {name.removeprefix("_orig_mod."): g for name, g in g2.items()}   # compiled module's names
    torch.testing.assert_close(y2, y1, rtol=rtol, atol=atol)
    assert g1.keys() == g2.keys()
    for name in g1:
        torch.testing.assert_close(g2[name], g1[name], rtol=rtol, atol=atol, msg=lambda m: f"{name}: {m}")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("device", DEVICES)
def test_inductor_fullgraph_matches_eager(device):
    model = BothOps().to(device)
    x = example_input().to(device)
    grad = torch.randn(4, 8, 16, generator=torch.Generator().manual_seed(2)).to(device)
    eager = forward_backward(model, x, grad)
    compiled = torch.compile(model, fullgraph=True)
    assert_same(eager, forward_backward(compiled, x, grad))


def counting_aot_backend(frames):
    """aot_eager-like backend (forward and backward graphs) that appends each graph dynamo compiles to frames."""
    def backend(gm, example_inputs):
        frames.append(gm)
        return torch._dynamo.backends.common.aot_autograd(fw_compiler=lambda g, _: g, bw_compiler=lambda g, _: g)(
            gm, example_inputs)
    return backend


def test_dynamic_shapes_do_not_recompile():
    frames = []
    backend = counting_aot_backend(frames)
    model = BothOps()
    compiled = torch.compile(model, backend=backend, fullgraph=True, dynamic=True)
    for B in (2, 3, 5):
        x = example_input(B=B, seed=B)
        grad = torch.randn(B, 8, 16, generator=torch.Generator().manual_seed(B))
        assert_same(forward_backward(model, x, grad), forward_backward(compiled, x, grad))
    assert len(frames) == 1, f"recompiled {len(frames) - 1} times"


def test_graph_holds_the_tk_ops():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch.compile(BothOps(), backend=backend, fullgraph=True)(example_input())
    targets = {str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"}
    assert {"tk.rwkv_forward", "tk.brick_pad"} <= targets


def test_int_arguments_stay_symbolic():
    # int parameters are SymInt in the schemas: one graph for every pad
    # width, as F.pad gets (with `int` each value was a guard and a
    # recompile, and fullgraph failed at the recompile limit)
    frames = []
    backend = counting_aot_backend(frames)

    def pad(x, p):
        return torch.ops.tk.brick_pad(x, p, p + 1, 2) * 2

    compiled = torch.compile(pad, backend=backend, fullgraph=True, dynamic=True)
    for p in range(1, 7):
        x = torch.randn(3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(p))
        xs = [x.clone().requires_grad_(), x.clone().requires_grad_()]
        ys = [pad(xs[0], p), compiled(xs[1], p)]
        torch.testing.assert_close(ys[1], ys[0], rtol=0, atol=0)
        g = torch.randn(ys[0].shape, dtype=torch.float64)
        for x_, y_ in zip(xs, ys):
            y_.backward(g)
        torch.testing.assert_close(xs[1].grad, xs[0].grad, rtol=0, atol=0)
    assert len(frames) == 1, f"recompiled {len(frames) - 1} times"


def test_int_argument_from_item():
    # a data-dependent int (an unbacked SymInt) reaches the symbolic Meta kernel
    def pad(x, t):
        return torch.ops.tk.brick_pad(x, t.item(), 0, 1)

    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        compiled = torch.compile(pad, backend="aot_eager", fullgraph=True)
        x = torch.randn(3, 4)
        for v in (2, 3):
            torch.testing.assert_close(compiled(x, torch.tensor(v)), pad(x, torch.tensor(v)), rtol=0, atol=0)
