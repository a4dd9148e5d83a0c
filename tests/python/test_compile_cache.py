"""torch.compile's caches on disk and a spec that changed (torch_tk.compile_cache).

torch keys a compiled graph on disk by its nodes, and a node calling
torch.ops.tk.<name> by the name alone. Before tk folded its specs into
torch.compiler.config.cache_key_tag, a process that compiled a graph with a
backward op taking (x, w, grad_y), and then one whose spec takes (grad_y, w,
x) under the same name, reused the first graph: its gradient of w came out
[0, 2, 12, 36, 80] instead of [0, 4, 18, 48, 100], silently. Two
processes here share a fresh inductor cache folder; the second must give
eager autograd's gradients, and a user's own tag stays in front of tk's.
"""
import os
import subprocess
import sys

import torch

import torch_tk

SCRIPT = r'''
import sys, torch, torch_tk
bw = {"1": "x: float[N], w: x.dtype[N], grad_y: x.dtype[N]",
      "2": "grad_y: float[N], w: grad_y.dtype[N], x: grad_y.dtype[N]"}[sys.argv[1]]
torch_tk.kernel(f"""
op cc_f(x: float[N], w: x.dtype[N]) -> y: x.dtype[N]:
    backward cc_f_bw
    for i in y:
        y[i] = x[i] * x[i] * w[i]
op cc_f_bw({bw}) -> (grad_x: x.dtype[N], grad_w: x.dtype[N]):
    for i in grad_x:
        grad_x[i] = 2.0 * x[i] * w[i] * grad_y[i]
        grad_w[i] = x[i] * x[i] * grad_y[i]
""", file="cc.tk")
x = torch.arange(1.0, 6.0, dtype=torch.float64).requires_grad_()
w = torch.full((5,), 3.0, dtype=torch.float64).requires_grad_()
f = torch.compile(lambda x, w: (torch.ops.tk.cc_f(x, w) * torch.arange(5.0, dtype=torch.float64)).sum(),
                  fullgraph=True)
f(x, w).backward()
print(x.grad.tolist(), w.grad.tolist())
print(torch.compiler.config.cache_key_tag)
'''


def test_a_changed_spec_is_not_served_a_stale_graph(tmp_path):
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"), TORCH_COMPILE_CACHE_KEY_TAG="mine")
    outs = [subprocess.run([sys.executable, "-c", SCRIPT, v], env=env, capture_output=True, text=True, check=True)
            .stdout.splitlines() for v in ("1", "2")]
    want = "[0.0, 12.0, 36.0, 72.0, 120.0] [0.0, 4.0, 18.0, 48.0, 100.0]"   # d/dx, d/dw of sum(x^2 w i)
    assert outs[0][0] == want and outs[1][0] == want, outs
    tags = [o[1] for o in outs]
    assert all(t.startswith("mine|tk-") for t in tags) and tags[0] != tags[1], tags


def test_each_registration_changes_the_tag():
    before = torch.compiler.config.cache_key_tag
    torch_tk.kernel("op cc_g(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n", file="cc_g.tk")
    after = torch.compiler.config.cache_key_tag
    assert "tk-" in before and after != before and after.endswith("tk-" + torch_tk.compile_cache.digest())


def test_a_registration_does_not_recompile_what_is_compiled():
    """The tag is part of the keys on disk, not of dynamo's guards: a spec
    registered between two calls of a compiled function recompiles nothing."""
    torch._dynamo.reset()
    f = torch.compile(lambda x: torch.ops.tk.brick_pad(x, 2, 1, 1) * 2, fullgraph=True)
    x = torch.randn(3, 4)
    f(x)
    before = torch.compiler.config.cache_key_tag
    torch_tk.kernel("op cc_h(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n", file="cc_h.tk")
    assert torch.compiler.config.cache_key_tag != before
    with torch._dynamo.config.patch(error_on_recompile=True):
        torch.testing.assert_close(f(x), torch.ops.tk.brick_pad(x, 2, 1, 1) * 2)
