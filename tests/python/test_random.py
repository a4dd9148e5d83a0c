"""rand(seed, n) and randn(seed, n) in a spec (docs/spec.md, Random numbers):
Philox4x32-10 with the seed as key and (n, batch index) as counter.

* philox() below, written from the paper's description, reproduces
  Random123's published known-answer vectors; the kernels' numbers are then
  checked against it bit for bit (rand) or to rounding (randn), in float32
  and float64, with batch dims (the batch index is the flat index over them,
  so a (2, 3, N) input draws what its (6, N) view draws);
* the numbers are uniform and normal by their moments and the
  Kolmogorov-Smirnov distance of fresh draws;
* the same kernels in a row loop and as a random gather (tests/specs/random.tk);
* examples/specs/dropout.tk: the forward's mask is the backward's (autograd
  against the reference mask; gradcheck in float64), and torch.compile gives
  the eager numbers;
* a seed or counter that is not an int is an error at its file:line:col.

Seeds are fresh each run and named in every assertion message. Outputs are
poisoned first (the poisoned_outputs fixture), so an unwritten element shows.
"""

import math
import os
import random

import pytest
import torch

import torch_tk

pytestmark = pytest.mark.usefixtures("poisoned_outputs")
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU"))]
ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
M32 = 0xFFFFFFFF


def philox(seed, n, b):
    """Philox4x32-10 (Salmon et al., SC 2011): key = the 64-bit seed, counter
    = (n, b) as 64-bit words, low halves first; the four output words."""
    k0, k1 = seed & M32, (seed >> 32) & M32
    c = [n & M32, (n >> 32) & M32, b & M32, (b >> 32) & M32]
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & M32, (p0 >> 32) ^ c[3] ^ k1, p0 & M32]
        k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
    return c


def ref_rand(seed, n, b, dtype):
    w = philox(seed, n, b)
    if dtype == torch.float64:
        return ((w[0] << 32 | w[1]) >> 11) * 2.0 ** -53
    return (w[0] >> 8) * 2.0 ** -24


def ref_randn(seed, n, b, dtype):
    w = philox(seed, n, b)
    if dtype == torch.float64:
        u = (((w[0] << 32 | w[1]) >> 11) + 1) * 2.0 ** -53
        v = ((w[2] << 32 | w[3]) >> 11) * 2.0 ** -53
    else:
        u, v = ((w[0] >> 8) + 1) * 2.0 ** -24, (w[1] >> 8) * 2.0 ** -24
    return math.sqrt(-2.0 * math.log(u)) * math.cos(2.0 * math.pi * v)


def fresh_seed():
    return random.SystemRandom().randrange(-2 ** 63, 2 ** 63)


DRAW = torch_tk.kernel("""
op rnd_draw(x: float[..., N], seed: int, off: int) -> (u: x.dtype[..., N], g: x.dtype[..., N]):
    for i in u:
        u[i] = rand(seed, i + off)
        g[i] = randn(seed, i + off)
""")

torch_tk.load(os.path.join(ROOT, "tests", "specs", "random.tk"))
torch_tk.load(os.path.join(ROOT, "examples", "specs", "dropout.tk"))
TESTS = DROPOUT = torch.ops.tk


def test_reference_reproduces_random123_vectors():
    """Random123's kat_vectors for philox4x32-10: counter and key all zeros,
    and all ones."""
    assert philox(0, 0, 0) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    assert philox(-1, -1, -1) == [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_draws_are_philox(dtype, device):
    seed, off = fresh_seed(), random.randrange(-2 ** 62, 2 ** 62)
    x = torch.empty(2, 3, 37, dtype=dtype, device=device)
    u, g = DRAW(x, seed, off)
    u, g = u.cpu().reshape(6, 37), g.cpu().reshape(6, 37)
    gtol = 1e-12 if dtype == torch.float64 else 2e-5
    for b in range(6):
        for n in range(37):
            want = ref_rand(seed, n + off, b, dtype)
            assert u[b, n].item() == want, (seed, off, b, n)
            assert abs(g[b, n].item() - ref_randn(seed, n + off, b, dtype)) <= gtol * 4, (seed, off, b, n)
    # the batch index is flat over the batch dims: the (6, N) view draws the same
    u6, g6 = DRAW(x.reshape(6, 37), seed, off)
    assert torch.equal(u6.cpu(), u) and torch.equal(g6.cpu(), g)


def test_draws_are_uniform_and_normal():
    seed = fresh_seed()
    u, g = DRAW(torch.empty(8, 25000, dtype=torch.float64), seed, 0)
    u, g = u.flatten(), g.flatten()
    n = u.numel()
    assert (u >= 0).all() and (u < 1).all()
    assert abs(u.mean().item() - 0.5) < 5 * math.sqrt(1 / 12 / n), seed
    assert abs(u.var().item() - 1 / 12) < 5 * math.sqrt(1 / 180 / n), seed
    # Kolmogorov-Smirnov distance; 2.0 / sqrt(n) has p < 1e-3 under the null
    s = u.sort().values
    ecdf = torch.arange(1, n + 1, dtype=torch.float64) / n
    assert (ecdf - s).abs().max().item() < 2.0 / math.sqrt(n), seed
    assert abs(g.mean().item()) < 5 / math.sqrt(n) and abs(g.var().item() - 1) < 5 * math.sqrt(2 / n), seed
    normal = torch.distributions.Normal(0.0, 1.0)
    gs = g.sort().values
    assert (ecdf - normal.cdf(gs)).abs().max().item() < 2.0 / math.sqrt(n), seed
    # neighbouring counters and batch elements are not correlated
    u2 = u.reshape(8, 25000)
    assert abs(torch.corrcoef(torch.stack([u2[0, :-1], u2[0, 1:]]))[0, 1].item()) < 0.03, seed
    assert abs(torch.corrcoef(u2[:2])[0, 1].item()) < 0.03, seed


def test_seed_decides_the_draws():
    x = torch.empty(4, 100)
    seed = fresh_seed()
    a, _ = DRAW(x, seed, 0)
    b, _ = DRAW(x, seed, 0)
    c, _ = DRAW(x, seed ^ 1, 0)
    assert torch.equal(a, b), seed
    assert (a != c).float().mean() > 0.99, seed
    assert (a[0] != a[1]).float().mean() > 0.99, seed        # batch elements differ


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_forms_draw_the_reference(device):
    """tests/specs/random.tk: element-wise over (r, i) with batch dims, a row
    loop, and a gather at random indices."""
    seed, p = fresh_seed(), 0.3
    R, N = 5, 41
    x = torch.randn(3, R, N, dtype=torch.float64, device=device)
    y, keep = TESTS.random_noise(x, seed, p)
    y, keep, xc = y.cpu(), keep.cpu(), x.cpu()
    for b in range(3):
        for r in range(R):
            for i in range(N):
                u = ref_rand(seed, r * N + i, b, torch.float64)
                assert bool(keep[b, r, i]) == (u >= p), (seed, b, r, i)
                want = xc[b, r, i].item() * ref_randn(seed + 1, r * N + i, b, torch.float64) if u >= p else 0.0
                assert abs(y[b, r, i].item() - want) <= 1e-12 * (1 + abs(want)), (seed, b, r, i)

    y = TESTS.random_rows(x, seed).cpu()
    for b in range(3):
        for r in range(R):
            v = torch.tensor([xc[b, r, i].item() + ref_rand(seed, i, b * R + r, torch.float64) for i in range(N)],
                             dtype=torch.float64)
            torch.testing.assert_close(y[b, r], v - v.sum() / N, rtol=1e-12, atol=1e-12, msg=str(seed))

    xg = torch.randn(N, device=device)
    y = TESTS.random_gather(xg, seed).cpu()
    idx = [int(ref_rand(seed, i, 0, torch.float32) * N) % N for i in range(N)]
    assert torch.equal(y, xg.cpu()[idx]), seed


def test_dropout_matches_its_mask_forward_and_backward():
    seed, p = fresh_seed(), 0.25
    x = torch.randn(3, 4, 64, dtype=torch.float64, requires_grad=True)
    y = DROPOUT.dropout(x, p, seed)
    keep = torch.tensor([[ref_rand(seed, i, b, torch.float64) >= p for i in range(64)] for b in range(12)])
    keep = keep.reshape(3, 4, 64)
    torch.testing.assert_close(y.detach(), torch.where(keep, x.detach() / (1 - p), 0.0), rtol=1e-15, atol=0,
                               msg=str(seed))
    kept = keep.double().mean().item()
    assert abs(kept - (1 - p)) < 0.06, (seed, kept)
    g = torch.randn_like(y)
    (gx,) = torch.autograd.grad(y, x, g)
    torch.testing.assert_close(gx, torch.where(keep, g / (1 - p), 0.0), rtol=1e-15, atol=0, msg=str(seed))
    assert torch.autograd.gradcheck(lambda t: DROPOUT.dropout(t, p, seed), (x[:1, :2],))
    assert torch.equal(DROPOUT.dropout(x.detach(), 1.0, seed), torch.zeros_like(x)), seed
    assert torch.equal(DROPOUT.dropout(x.detach(), 0.0, seed), x.detach()), seed


def test_bias_dropout_add_gradients():
    seed, p = fresh_seed(), 0.1
    h = torch.randn(2, 5, 16, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(16, dtype=torch.float64, requires_grad=True)
    x = torch.randn(2, 5, 16, dtype=torch.float64, requires_grad=True)
    y = DROPOUT.bias_dropout_add(h, bias, x, p, seed)
    keep = torch.tensor([[ref_rand(seed, i, b, torch.float64) >= p for i in range(16)] for b in range(10)])
    keep = keep.reshape(2, 5, 16)
    want = x + torch.where(keep, (h + bias) / (1 - p), 0.0)
    torch.testing.assert_close(y, want, rtol=1e-14, atol=1e-14, msg=str(seed))
    g = torch.randn_like(y)
    got = torch.autograd.grad(y, (h, bias, x), g)
    expect = torch.autograd.grad(want, (h, bias, x), g)
    for a, b in zip(got, expect):
        torch.testing.assert_close(a, b, rtol=1e-14, atol=1e-14, msg=str(seed))


def test_dropout_under_compile_draws_the_eager_numbers():
    seed = fresh_seed()
    x = torch.randn(4, 33)
    f = torch.compile(lambda t, s: DROPOUT.dropout(t, 0.5, s), backend="aot_eager", fullgraph=True)
    assert torch.equal(f(x, seed), DROPOUT.dropout(x, 0.5, seed)), seed
    assert torch.equal(f(x, seed + 1), DROPOUT.dropout(x, 0.5, seed + 1)), seed


@pytest.mark.parametrize("body, where, msg", [
    ("y[i] = rand(1.5, i)", "21", r"rand\(\)'s seed must be an int, got float"),
    ("y[i] = randn(s, x[i])", "25", r"randn\(\)'s counter must be an int, got float"),
    ("y[i] = rand(s)", "16", r"rand\(\) takes 2 arguments, got 1"),
])
def test_bad_calls_are_errors_at_their_place(body, where, msg):
    text = f"op rnd_bad(x: float[N], s: int) -> y: x.dtype[N]:\n    for i in y:\n        {body}\n"
    with pytest.raises(torch_tk.SpecError, match=rf"r.tk:3:{where}: error: {msg}"):
        torch_tk.kernel(text, file="r.tk")
