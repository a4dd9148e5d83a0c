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


def test_dynamic_shapes_do_not_recompile():
    frames = []

    def backend(gm, example_inputs):
        frames.append(gm)
        return torch._dynamo.backends.common.aot_autograd(fw_compiler=lambda g, _: g, bw_compiler=lambda g, _: g)(
            gm, example_inputs)

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
