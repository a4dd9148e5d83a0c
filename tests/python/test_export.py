"""Export paths of a module using both tk ops (tk_models.BothOps):
torch.export (the tk ops stay visible in the graph; the program runs, with a
dynamic batch dim, matches eager, survives save/load and run_decompositions,
and its gradients match eager) and TorchScript from Python (script, save,
load, forward and backward). The C++ side of TorchScript is
tests/cpp/torchscript_load.cpp.
"""

import io

import pytest
import torch
from torch.export import Dim, export

from tk_models import BothOps, example_input, forward_backward

TK_TARGETS = {torch.ops.tk.rwkv_forward.default, torch.ops.tk.brick_pad.default}


def tk_nodes(gm):
    return {n.target for n in gm.graph.nodes if n.op == "call_function" and n.target in TK_TARGETS}


@pytest.fixture(scope="module")
def exported():
    model = BothOps()
    ep = export(model, (example_input(),), dynamic_shapes={"x": {0: Dim("B", min=1, max=1024)}})
    return model, ep


def test_export_graph_shows_tk_ops(exported):
    _, ep = exported
    assert tk_nodes(ep.graph_module) == TK_TARGETS
    assert "torch.ops.tk.rwkv_forward.default" in ep.graph_module.code


@pytest.mark.parametrize("B", [4, 1, 7])
def test_exported_program_matches_eager(exported, B):
    model, ep = exported
    x = example_input(B=B, seed=B)
    with torch.no_grad():
        torch.testing.assert_close(ep.module()(x), model(x), rtol=0, atol=0)


def test_exported_program_gradients_match_eager(exported):
    model, ep = exported
    x = example_input(B=3, seed=3)
    grad = torch.randn(3, 8, 16, generator=torch.Generator().manual_seed(4))
    y1, g1 = forward_backward(model, x, grad)
    y2, g2 = forward_backward(ep.module(), x, grad)
    torch.testing.assert_close(y2, y1)
    assert g1.keys() == g2.keys()
    for name in g1:
        torch.testing.assert_close(g2[name], g1[name], msg=lambda m: f"{name}: {m}")


def test_save_load_and_decompositions(exported):
    model, ep = exported
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    buf.seek(0)
    loaded = torch.export.load(buf)
    decomposed = loaded.run_decompositions()
    assert tk_nodes(decomposed.graph_module) == TK_TARGETS   # custom ops are not decomposed
    x = example_input(B=2, seed=5)
    with torch.no_grad():
        torch.testing.assert_close(decomposed.module()(x), model(x), rtol=0, atol=0)


def test_torchscript_from_python():
    model = BothOps()
    scripted = torch.jit.script(model)
    assert "tk::rwkv_forward" in str(scripted.graph) and "tk::brick_pad" in str(scripted.graph)
    buf = io.BytesIO()
    torch.jit.save(scripted, buf)
    buf.seek(0)
    loaded = torch.jit.load(buf)
    x = example_input(B=2, seed=6)
    grad = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(7))
    y1, g1 = forward_backward(model, x, grad)
    y2, g2 = forward_backward(loaded, x, grad)
    torch.testing.assert_close(y2, y1, rtol=0, atol=0)
    for name in g1:
        torch.testing.assert_close(g2[name], g1[name], rtol=0, atol=0, msg=lambda m: f"{name}: {m}")
