"""Bounds (docs/spec.md, "Bounds"): a row loop's store that the planner cannot
prove in range from the loop bounds is checked at run time, and an
out-of-range one raises RuntimeError naming the op, file:line:col, the
tensor, the dim and the index (tests/c/test_bounds.c checks that the store
is skipped: a poisoned guard zone around the output stays as it was);
proven stores carry no check (`tkc plan` says so). Checked mode
(torch_tk.kernel(..., checked=True), TK_CHECKED=1) compares every index of
every read too: it reports a read past a row that the unchecked kernel does
not, and gives the unchecked kernel's results on valid input. Twin ops (the
same body under two names) compare the two modes; the checks' cost is not
timed here. Gathers (a read indexed by a tensor's values) are checked on
the CPU without checked mode.
"""
import os
import re
import subprocess
import sys

import pytest
import torch

import torch_tk

pytestmark = pytest.mark.usefixtures("poisoned_outputs")   # (conftest.py)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def gen(seed):
    return torch.Generator().manual_seed(seed)


SHIFT = """\
# y[i + 1] = x[i]: y[N] at the last i
op {name}(x: float[..., N]) -> y: x.dtype[..., N]:
    for _ in y:
        y[0] = 0.0
        for i in range(N):
            y[i + 1] = x[i]
"""

GUARDED_SHIFT = """\
op {name}(x: float[..., N]) -> y: x.dtype[..., N]:
    for _ in y:
        y[0] = 0.0
        for i in range(N - 1):
            y[i + 1] = x[i]
"""

PEEK = """\
# x[i + 1] at the last i reads past the row
op {name}(x: float[N]) -> y: x.dtype[N]:
    for i in y:
        y[i] = x[i] + x[i + 1]
"""

PEEK_MIN = """\
# x[min(i + 1, N)] at the last i reads past the row too, through min (not a
# linear index: the call does not check its range)
op {name}(x: float[N]) -> y: x.dtype[N]:
    for i in y:
        y[i] = x[i] + x[min(i + 1, N)]
"""

STENCIL = """\
# valid everywhere: a clamped three-point stencil and a reverse scan
op {name}(x: float[B, N]) -> y: x.dtype[B, N]:
    for b, i in y:
        s = x[b, i]
        if i > 0:
            s += x[b, i - 1]
        if i + 1 < N:
            s += x[b, min(i + 1, N - 1)]
        y[b, i] = s

op {name}_scan(x: float[..., N]) -> y: x.dtype[..., N]:
    for _ in y:
        s = 0.0
        for j in range(N):
            i = N - 1 - j
            s += x[i]
            y[i] = s
"""


def ops(template, name, checked=None, file=None):
    torch_tk.kernel(template.format(name=name), file=file or name + ".tk", checked=checked)
    return torch.ops.tk


def test_row_loop_store_out_of_range_raises():
    tk = ops(SHIFT, "ck_shift")
    x = torch.randn(3, 5, generator=gen(1))
    with pytest.raises(RuntimeError) as info:
        tk.ck_shift(x)
    msg = str(info.value)
    assert "tk.ck_shift: ck_shift.tk:6:13: store y[..., 5] out of range: dim 0 (N) has size 5" in msg, msg
    assert "the store was skipped" in msg


def test_row_loop_store_in_range_runs():
    """The same store under a loop bound that keeps it in range: proven, and right."""
    tk = ops(GUARDED_SHIFT, "ck_gshift")
    x = torch.randn(4, 7, dtype=torch.float64, generator=gen(2))
    want = torch.cat([torch.zeros(4, 1, dtype=torch.float64), x[:, :-1]], 1)
    torch.testing.assert_close(tk.ck_gshift(x), want, rtol=0, atol=0)
    torch.testing.assert_close(tk.ck_gshift(x.t().contiguous().t()), want, rtol=0, atol=0)


def tkc(*args):
    path = os.path.join(os.path.dirname(os.path.abspath(torch_tk._lib.load())), "tkc")
    if not os.path.exists(path):
        pytest.skip(f"no tkc next to {torch_tk._lib.load()}")
    r = subprocess.run([path, *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_plan_shows_proven_and_checked_stores(tmp_path):
    cumsum = tkc("plan", "--dtype", "f32", os.path.join(ROOT, "examples", "specs", "cumsum.tk"))
    stores = re.findall(r"^  store .*$", cumsum, re.M)
    assert len(stores) >= 2, cumsum   # cumsum and cumsum_backward, a store each (per target)
    assert all("every index proven in range by the loop bounds, no run-time check" in s for s in stores)
    bad = tmp_path / "shift.tk"
    bad.write_text(SHIFT.format(name="shift"))
    plan = tkc("plan", "--dtype", "f32", "--target", "cpu", str(bad))
    assert "store y at 4:9: checked at run time on dim 0 (N)" in plan, plan
    assert "store y at 6:13: checked at run time on dim 0 (N)" in plan, plan
    good = tmp_path / "gshift.tk"
    good.write_text(GUARDED_SHIFT.format(name="gshift"))
    plan = tkc("plan", "--dtype", "f32", "--target", "cpu", str(good))
    assert "store y at 5:13: every index proven in range by the loop bounds, no run-time check" in plan, plan
    assert "tk_ck(" not in tkc("emit-c", os.path.join(ROOT, "examples", "specs", "cumsum.tk"))
    assert "tk_ck(" in tkc("emit-c", str(bad))


def test_checked_catches_a_read_the_unchecked_kernel_misses():
    unchecked = ops(PEEK_MIN, "ck_peek_off", checked=False).ck_peek_off
    checked = ops(PEEK_MIN, "ck_peek_on", checked=True, file="peek.tk").ck_peek_on
    big = torch.randn(9, generator=gen(3))
    x = big[:8]                          # x[8] exists in memory: the unchecked read is quietly wrong
    got = unchecked(x)
    torch.testing.assert_close(got[:7], x[:7] + x[1:8])
    assert got[7] == x[7] + big[8]       # read past the end of x, unreported
    with pytest.raises(RuntimeError) as info:
        checked(x)
    msg = str(info.value)
    assert "tk.ck_peek_on: peek.tk:5:23: read x[8] out of range: dim 0 (N) has size 8" in msg, msg


def test_a_linear_read_past_the_end_is_refused_at_the_call_unchecked():
    """x[i + 1]: its range is checked at the call (tests/python/test_read_ranges.py);
    a checked op's kernel reports the element instead."""
    unchecked = ops(PEEK, "ck_peek_lin", checked=False).ck_peek_lin
    x = torch.randn(9, generator=gen(3))[:8]
    with pytest.raises(RuntimeError, match=r"^tk\.ck_peek_lin: read x\[i \+ 1\] \(ck_peek_lin\.tk:4:23\) would "
                                           r"reach index 8 of dim 0 of 'x', whose size is 8"):
        unchecked(x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_checked_and_unchecked_agree_on_valid_input(dtype):
    tk = ops(STENCIL, "ck_st_off", checked=False)
    ops(STENCIL, "ck_st_on", checked=True)
    x = torch.randn(5, 37, generator=gen(4), dtype=torch.float64).to(dtype)
    for xv in (x, x.t().contiguous().t(), torch.cat([x, x], 1)[:, ::2]):
        want = xv.double().clone()
        want[:, 1:] += xv.double()[:, :-1]
        want[:, :-1] += xv.double()[:, 1:]
        a, b = tk.ck_st_off(xv), tk.ck_st_on(xv)
        assert torch.equal(a, b)
        torch.testing.assert_close(a.double(), want, rtol=1e-2 if dtype == torch.float16 else 1e-6, atol=1e-2)
        a, b = tk.ck_st_off_scan(xv), tk.ck_st_on_scan(xv)
        assert torch.equal(a, b)
        torch.testing.assert_close(a.double(), xv.double().flip(-1).cumsum(-1).flip(-1),
                                   rtol=1e-2 if dtype == torch.float16 else 1e-5, atol=1e-2)


def test_checked_mode_is_fixed_at_registration():
    ops(PEEK, "ck_peek_fix", checked=False)
    with pytest.raises(RuntimeError, match="already registered unchecked"):
        ops(PEEK, "ck_peek_fix", checked=True)


def test_environment_turns_checked_mode_on():
    script = (
        "import torch, torch_tk\n"
        f"op = torch_tk.kernel({PEEK.format(name='ck_env')!r}, file='env.tk')\n"
        "x = torch.randn(9)[:8]\n"
        "try:\n"
        "    op(x)\n"
        "except RuntimeError as e:\n"
        "    print('raised:', e)\n"
        "else:\n"
        "    print('no error')\n")
    env = dict(os.environ, TK_CHECKED="1")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "raised: tk.ck_env: env.tk:4:23: read x[8] out of range: dim 0 (N) has size 8" in r.stdout, r.stdout


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_reports_like_the_cpu():
    """On CUDA the kernel fills a device-side record that the launcher reads after the launch."""
    tk = ops(SHIFT, "ck_shift_cu", file="shift_cu.tk")
    ops(PEEK, "ck_peek_cu", checked=True, file="peek_cu.tk")
    x = torch.randn(3, 5, generator=gen(5)).cuda()
    with pytest.raises(RuntimeError, match=r"tk.ck_shift_cu: shift_cu.tk:6:13: store y\[\.\.\., 5\] out of range: "
                                           r"dim 0 \(N\) has size 5"):
        tk.ck_shift_cu(x)
    big = torch.randn(9, generator=gen(6)).cuda()
    with pytest.raises(RuntimeError, match=r"tk.ck_peek_cu: peek_cu.tk:4:23: read x\[8\] out of range"):
        tk.ck_peek_cu(big[:8])


# gathers: an index read from a tensor can be anything (docs/spec.md, Bounds)
EMBED = """
op {name}(idx: int64[N], table: float[V, D]) -> out: table.dtype[N, D]:
    for n, d in out:
        k = idx[n]
        out[n, d] = table[k, d]
"""
ROW_GATHER = """
op {name}(idx: int64[..., K], x: float[..., N]) -> y: x.dtype[..., 1]:
    for _ in y:
        s = 0.0
        for j in range(K):
            s += x[idx[j]]
        y[0] = s
"""


@pytest.mark.parametrize("bad", [-1, 4, 1 << 40, -(1 << 62)])
def test_gather_index_out_of_range_is_an_error(bad):
    """An index that comes from a tensor is compared to its dim's size on the
    CPU without checked mode: out of range is a RuntimeError naming the op,
    file:line:col, the tensor and the dim (before: a quiet read of other
    memory, or a crash for a far index)."""
    tk = ops(EMBED, "ck_embed", file="embed.tk")
    table = torch.arange(12.0).reshape(4, 3)
    with pytest.raises(RuntimeError, match=rf"^tk\.ck_embed: embed\.tk:5:21: read table\[{bad}, :\] out of range: "
                                           r"dim 0 \(V\) has size 4"):
        tk.ck_embed(torch.tensor([0, bad, 2]), table)
    ops(ROW_GATHER, "ck_row_gather", file="rowg.tk")
    with pytest.raises(RuntimeError, match=rf"^tk\.ck_row_gather: rowg\.tk:6:18: read x\[\.\.\., {bad}\] out of range"):
        tk.ck_row_gather(torch.tensor([[0, bad]]), torch.randn(1, 4))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_gathers_in_range_match_torch(dtype):
    tk = ops(EMBED, "ck_embed", file="embed.tk")
    g = gen(60)
    table = torch.randn(50, 17, generator=g).to(dtype)
    idx = torch.randint(0, 50, (300,), generator=g)
    torch.testing.assert_close(tk.ck_embed(idx, table), torch.nn.functional.embedding(idx, table), rtol=0, atol=0)
    torch.testing.assert_close(tk.ck_embed(idx, table.t().contiguous().t()), table[idx], rtol=0, atol=0)
    if dtype != torch.bfloat16:
        ops(ROW_GATHER, "ck_row_gather", file="rowg.tk")
        x = torch.randn(6, 9, generator=g, dtype=dtype)
        idx2 = torch.randint(0, 9, (6, 4), generator=g)
        torch.testing.assert_close(tk.ck_row_gather(idx2, x), torch.gather(x, 1, idx2).sum(1, keepdim=True))


def test_plan_names_the_gather_checks(tmp_path):
    spec = tmp_path / "embed.tk"
    spec.write_text(EMBED.format(name="embed"))
    plan = tkc("plan", "--dtype", "i64_f32", "--target", "cpu", str(spec))
    assert "gathers: read indices that depend on a tensor's values are compared" in plan, plan
    assert "gathers:" not in tkc("plan", "--dtype", "f32", "--target", "cpu",
                                 os.path.join(ROOT, "examples", "specs", "softmax.tk"))
    code = tkc("emit-c", "--dtype", "i64_f32", str(spec))
    assert code.count("tk_ck(") == 1, code   # the table's dim 0 only: d is the loop variable


# an index that depends on data through control flow, not a value
CONTROL_GATHERS = [
    """
op {name}(idx: int64[N], table: float[V, D]) -> out: table.dtype[N, D]:
    for n, d in out:
        k = 0
        for j in range(idx[n]):
            k += 1
        out[n, d] = table[k, d]
""",
    """
op {name}(idx: int64[N], table: float[V, D]) -> out: table.dtype[N, D]:
    for n, d in out:
        k = 0
        for j in range(V + 1000):
            if idx[n] > j:
                k = j + 1
        out[n, d] = table[k, d]
""",
]


@pytest.mark.parametrize("which", [0, 1])
def test_gather_through_control_flow_is_checked(which):
    """A local assigned in a loop whose range, or under a condition that,
    depends on a tensor's values is data-dependent too (a reviewer's
    finding: such an index read far past the table, or crashed)."""
    name = f"ck_ctl{which}"
    tk = ops(CONTROL_GATHERS[which], name, file=name + ".tk")
    table = torch.arange(12.0).reshape(4, 3)
    torch.testing.assert_close(getattr(tk, name)(torch.tensor([1, 3]), table), table[[1, 3]])
    with pytest.raises(RuntimeError, match=rf"^tk\.{name}: {name}\.tk:\d+:\d+: read table\[\d+, :\] out of range"):
        getattr(tk, name)(torch.tensor([0, 900]), table)
