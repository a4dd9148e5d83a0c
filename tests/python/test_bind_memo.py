"""Calls that bind alike reuse a remembered bind (shim/kernels.cpp, rebind).

The shim keeps, per thread, the last few binds with their arguments; a call
whose arguments have the same kinds, values, dtypes, sizes, strides and
devices copies the bound call and points it at the new data instead of
running tk_bind again (1.4x -> 1.2-1.3x aten.add per call, bench/LOG.md).
These tests change one thing at a time between calls (data only, a scalar,
strides, dtype, shape, more shapes than remembered, threads) and check
every result against an independent reference, so a stale bind (old data,
old scalar, old strides) shows as a wrong value or shape.
"""
import threading

import pytest
import torch

from torch_tk import reference as ref


def check_rwkv(out, w, k, eps):
    assert out.dtype == k.dtype and out.shape == k.shape
    tol = 1e-12 if k.dtype == torch.float64 else 1e-4
    torch.testing.assert_close(out.double(), ref.rwkv_conv1d(w.double(), k.double(), eps), rtol=tol, atol=tol)


def test_same_shapes_new_data(tk):
    gen = torch.Generator().manual_seed(1)
    outs = []
    for _ in range(6):
        w = torch.randn(3, 16, dtype=torch.float64, generator=gen)
        k = torch.randn(2, 3, 16, dtype=torch.float64, generator=gen)
        out = tk.rwkv_forward(w, k, 0.5)
        check_rwkv(out, w, k, 0.5)
        outs.append(out)
    assert len({o.data_ptr() for o in outs}) == len(outs)  # each call its own output


def test_scalars_change(tk):
    w = torch.randn(3, 16, dtype=torch.float64)
    k = torch.randn(2, 3, 16, dtype=torch.float64)
    for eps in (0.5, 0.25, -0.0, 0.0, 1e300, 0.25):
        check_rwkv(tk.rwkv_forward(w, k, eps), w, k, eps)
    tile = torch.randn(4, 5)
    a = tk.brick_pad(tile, 3, 2, 1)
    b = tk.brick_pad(tile, 3, 2, 2)       # stagger only
    c = tk.brick_pad(tile, 3, 2, 1, 7)    # an explicit height where None was
    assert a.shape == b.shape == (8, 11) and c.shape == (7, 11)
    assert not torch.equal(a, b)
    assert torch.equal(a, tk.brick_pad(tile.clone(), 3, 2, 1))
    assert torch.equal(c, a[1:])  # the rows counted from the bottom: height 7 drops the top row


def test_strides_and_dtype_change(tk):
    C, T = 4, 12
    w = torch.randn(C, T, dtype=torch.float64)
    k = torch.randn(2, C, T, dtype=torch.float64)
    wt = w.t().contiguous().t()        # same values, strides (1, C)
    kt = k.permute(2, 0, 1).contiguous().permute(1, 2, 0)
    for ww, kk in [(w, k), (wt, k), (w, kt), (wt, kt), (w, k), (w.float(), k.float()), (w, k)]:
        check_rwkv(tk.rwkv_forward(ww, kk, 0.125), ww, kk, 0.125)


def test_more_shapes_than_remembered(tk):
    gen = torch.Generator().manual_seed(3)
    shapes = [(1, 2, 5), (2, 2, 5), (1, 3, 5), (1, 2, 6), (3, 1, 7), (2, 3, 9)]
    for rnd in range(3):
        for B, C, T in shapes if rnd % 2 == 0 else reversed(shapes):
            w = torch.randn(C, T, dtype=torch.float64, generator=gen)
            k = torch.randn(B, C, T, dtype=torch.float64, generator=gen)
            check_rwkv(tk.rwkv_forward(w, k, 0.5), w, k, 0.5)


def test_errors_after_remembered_binds(tk):
    w = torch.randn(3, 8)
    k = torch.randn(2, 3, 8)
    tk.rwkv_forward(w, k, 0.1)
    tk.rwkv_forward(w, k, 0.1)
    with pytest.raises(RuntimeError, match=r"tk.rwkv_forward: argument 'k': dim 1 \(C\) is 4 but w gives C = 3"):
        tk.rwkv_forward(w, torch.randn(2, 4, 8), 0.1)
    with pytest.raises(RuntimeError, match="tk.rwkv_forward: argument 'k': dtype float64 must match"):
        tk.rwkv_forward(w, k.double(), 0.1)
    check_rwkv(tk.rwkv_forward(w, k, 0.1), w, k, 0.1)


def test_threads_with_their_own_shapes(tk):
    errors = []

    def work(seed):
        try:
            gen = torch.Generator().manual_seed(seed)
            C, T = 2 + seed, 8 + seed
            for i in range(40):
                B = 1 + i % 3
                w = torch.randn(C, T, dtype=torch.float64, generator=gen)
                k = torch.randn(B, C, T, dtype=torch.float64, generator=gen)
                check_rwkv(tk.rwkv_forward(w, k, 0.5), w, k, 0.5)
        except Exception as e:  # reported below, with the thread's seed
            errors.append((seed, e))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
