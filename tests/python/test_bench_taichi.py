"""The bench's Taichi cases (python/torch_tk/bench_taichi.py): the seed's two
kernels re-written for Taichi agree with tk and with the independent
references, on small sizes. Needs Taichi (`pip install taichi`); without it
the bench leaves the Taichi rows out, and this test says so and skips."""

from types import SimpleNamespace

import pytest
import torch

from torch_tk import bench, reference as ref

ti = pytest.importorskip("taichi", reason="Taichi is not installed (pip install taichi): no Taichi rows to check")


def test_taichi_cases_agree_with_tk_and_references():
    from torch_tk import bench_taichi

    seed = SimpleNamespace(TW=5, TH=7, pw=9, ph=6, stagger=3)
    seed.W, seed.H = seed.TW + 2 * seed.pw, seed.TH + 2 * seed.ph
    rwkv = SimpleNamespace(B=2, C=3, T=37, eps=0.25)
    pad, conv = bench_taichi.cases("cpu", seed, rwkv, bench.rel_err)

    impls = dict(pad["impls"])
    got_tk, got_ti = impls["tk"]().clone(), impls["taichi"]().clone()
    assert got_ti.shape == (seed.H, seed.W)
    want = ref.torch_pad(pad["inputs"]["tile"], seed.pw, seed.ph, seed.stagger).reshape(seed.H, seed.W)
    assert torch.equal(got_ti, want)
    assert torch.equal(got_tk, want)
    assert pad["check"](got_tk, got_ti) == 0.0

    impls = dict(conv["impls"])
    out_ti = impls["taichi"]().clone()   # first: tk's output is fresh each call, Taichi's buffer is reused
    out_tk = impls["tk"]()
    w, k = conv["inputs"]["w"], conv["inputs"]["k"]
    want = ref.rwkv_loop(w.double(), k.double(), rwkv.eps)
    assert bench.rel_err(out_ti, want) < 1e-5
    assert bench.rel_err(out_tk, want) < 1e-5
    assert conv["check"](out_tk, out_ti) < 1e-5
