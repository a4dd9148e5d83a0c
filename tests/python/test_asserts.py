"""`assert` lines (docs/spec.md, Asserts): conditions on an op's dims and
scalar parameters, written before the loop and checked at every call.

* a failing one is a RuntimeError naming the op, the condition, its
  file:line:col, the values in it and the arguments they come from; nothing
  runs (the poisoned output is never returned);
* defaults (`int?` passed None) are evaluated before the asserts read them,
  and a condition that divides by zero says so;
* examples/specs/rotary.tk refuses an odd head dim instead of returning a
  wrong rotation; an even one still matches the torch formulation;
* under torch.compile(dynamic=True) the Meta kernel evaluates them over
  SymInt: good sizes run without recompiling, a bad one raises the message;
* `and` / `or` stop at their left side (no division by zero behind a
  guard), eagerly and in the Meta kernel; float conditions (dropout's p)
  are checked on the call's values;
* a malformed assert (a tensor, a tensor read, `**`, a maths call, a
  message, one inside the loop, an unknown name) is a SpecError at its
  file:line:col.
"""
import os

import pytest
import torch

import torch_tk

pytestmark = pytest.mark.usefixtures("poisoned_outputs")
ROOT = os.path.join(os.path.dirname(__file__), "..", "..")

HALVES = torch_tk.kernel("""
op as_halves(x: float[..., N], k: int = 2, m: int? = N // 2) -> y: x.dtype[..., N]:
    assert N % 2 == 0
    assert k > 0 and N >= k
    assert N // (m - 1) >= 1
    for i in y:
        y[i] = x[(i + m) % N]
""", file="halves.tk")


def test_passing_asserts_run_the_op():
    x = torch.randn(3, 8)
    torch.testing.assert_close(HALVES(x), torch.roll(x, -4, dims=-1), rtol=0, atol=0)
    torch.testing.assert_close(HALVES(x, 8, 3), torch.roll(x, -3, dims=-1), rtol=0, atol=0)


@pytest.mark.parametrize("args, message", [
    ((torch.randn(2, 7),), r"tk\.as_halves: assert \(N % 2\) == 0 \(halves\.tk:3:12\) failed with N = 7 "
                           r"\(from argument 'x'\)"),
    ((torch.randn(6), 0), r"tk\.as_halves: assert \(k > 0\) and \(N >= k\) \(halves\.tk:4:12\) failed with "
                          r"k = 0, N = 6 \(from arguments 'x', 'k'\)"),
    ((torch.randn(6), 7), r"failed with k = 7, N = 6"),
    ((torch.randn(6), 2, 1), r"tk\.as_halves: assert \(N // \(m - 1\)\) >= 1 \(halves\.tk:5:12\) cannot be "
                             r"evaluated: division by zero or overflow with N = 6, m = 1 \(from arguments 'x', 'm'\)"),
    # m's default N // 2 = 1 for N = 2, so the third assert divides by zero too
    ((torch.randn(2), 1), r"cannot be evaluated: division by zero or overflow with N = 2, m = 1"),
])
def test_failing_asserts_name_the_condition_and_values(args, message):
    with pytest.raises(RuntimeError, match=message):
        HALVES(*args)


def rotary_torch(q, cos, sin):
    half = q.shape[-1] // 2
    return q * cos + torch.cat((-q[..., half:], q[..., :half]), dim=-1) * sin


def test_rotary_refuses_an_odd_head_dim():
    torch_tk.load(os.path.join(ROOT, "examples", "specs", "rotary.tk"))
    tk = torch.ops.tk
    q, cos, sin = torch.randn(2, 3, 5, 8), torch.randn(5, 8), torch.randn(5, 8)
    torch.testing.assert_close(tk.rotary(q, cos, sin), rotary_torch(q, cos, sin))
    q, cos, sin = torch.randn(2, 3, 5, 7), torch.randn(5, 7), torch.randn(5, 7)
    with pytest.raises(RuntimeError, match=r"tk\.rotary: assert \(D % 2\) == 0 \(.*rotary\.tk:11:12\) failed with "
                                           r"D = 7 \(from argument 'q'\)"):
        tk.rotary(q, cos, sin)
    with pytest.raises(RuntimeError, match=r"tk\.rotary_backward_q: assert .* failed with D = 7"):
        tk.rotary_backward_q(q, cos, sin)
    with pytest.raises(RuntimeError, match=r"tk\.rotary_backward_tables: assert .* failed with D = 7"):
        tk.rotary_backward_tables(q, q)


def test_asserts_under_compile_with_dynamic_shapes():
    torch._dynamo.reset()
    f = torch.compile(lambda t: HALVES(t) * 2, dynamic=True, backend="aot_eager", fullgraph=True)
    for n in (6, 10, 12):
        x = torch.randn(2, n)
        torch.testing.assert_close(f(x), torch.roll(x, -(n // 2), dims=-1) * 2, rtol=0, atol=0)
    with pytest.raises(Exception, match=r"tk\.as_halves: assert \(N % 2\) == 0 \(halves\.tk:3:12\) failed"):
        f(torch.randn(2, 9))


SHORT = torch_tk.kernel("""
op as_groups(x: float[N], g: int, p: float = 0.5) -> y: x.dtype[N]:
    assert g == 0 or N % g == 0
    assert not (g != 0 and N // g < 2)
    assert p >= 0.0 and p / 2 < 0.5
    for i in y:
        y[i] = x[i] * p
""", file="groups.tk")


def test_and_or_stop_at_their_left_side():
    """Python's short circuit: `g == 0 or N % g == 0` never divides by zero,
    eagerly and in the Meta kernel under compile."""
    x = torch.randn(6)
    torch.testing.assert_close(SHORT(x, 0), x * 0.5)
    torch.testing.assert_close(SHORT(x, 3, 0.25), x * 0.25)
    with pytest.raises(RuntimeError, match=r"assert \(g == 0\) or \(\(N % g\) == 0\) \(groups\.tk:3:12\) failed "
                                           r"with g = 4, N = 6"):
        SHORT(x, 4)
    with pytest.raises(RuntimeError, match=r"groups\.tk:4:12\) failed with g = 6, N = 6"):
        SHORT(x, 6)
    torch._dynamo.reset()
    f = torch.compile(lambda t, g: SHORT(t, g) + 1, dynamic=True, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(f(torch.ones(8), 0), torch.full((8,), 1.5))
    torch.testing.assert_close(f(torch.ones(8), 2), torch.full((8,), 1.5))


def test_asserts_on_floats_are_checked_at_the_call():
    x = torch.randn(4)
    for p, ok in ((0.0, True), (0.99, True), (-0.01, False), (1.0, False), (float("nan"), False)):
        if ok:
            torch.testing.assert_close(SHORT(x, 2, p), x * p)
        else:
            with pytest.raises(RuntimeError, match=r"tk\.as_groups: assert \(p >= 0\) and \(\(p / 2\) < 0\.5\) "
                                                   r"\(groups\.tk:5:12\) failed with p = .* \(from argument 'p'\)"):
                SHORT(x, 2, p)
    # under compile the float assert is checked when the kernel runs
    torch._dynamo.reset()
    f = torch.compile(lambda t, p: SHORT(t, 2, p), backend="aot_eager")
    torch.testing.assert_close(f(x, 0.5), x * 0.5)
    with pytest.raises(Exception, match=r"failed with p = 1\.5"):
        f(x, 1.5)


def test_dropout_refuses_a_probability_outside_0_1():
    torch_tk.load(os.path.join(ROOT, "examples", "specs", "dropout.tk"))
    x = torch.randn(3, 8)
    assert torch.equal(torch.ops.tk.dropout(x, 1.0, 7), torch.zeros_like(x))
    for p in (-0.5, 1.5):
        with pytest.raises(RuntimeError, match=rf"tk\.dropout: assert .* failed with p = {p}"):
            torch.ops.tk.dropout(x, p, 7)


@pytest.mark.parametrize("line, where, message", [
    ("assert x > 0", "2:12", r"an assert reads dims and int, bool and float parameters; 'x' is a tensor"),
    ("assert x[0] > 0", "2:12", r"an assert reads dims and int, bool and float parameters only"),
    ("assert N ** 2 > 0", "2:14", r"an assert cannot use '\*\*'"),
    ("assert exp(p) > 0", "2:12", r"an assert may only call min, max and abs, not 'exp'"),
    ("assert N > 0, 'N'", "2:17", r"an assert takes no message"),
    ("assert M > 0", "2:12", r"unknown name 'M' in an assert"),
])
def test_malformed_asserts_are_spec_errors(line, where, message):
    text = f"op as_bad(x: float[N], p: float) -> y: x.dtype[N]:\n    {line}\n    for i in y:\n        y[i] = x[i]\n"
    with pytest.raises(torch_tk.SpecError, match=rf"a\.tk:{where}: error: {message}"):
        torch_tk.kernel(text, file="a.tk")


def test_an_assert_inside_the_loop_says_where_it_goes():
    text = "op as_bad2(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        assert N > 0\n        y[i] = x[i]\n"
    with pytest.raises(torch_tk.SpecError, match=r"a\.tk:3:9: error: 'assert' is not part of the spec language .*"
                                                 r"goes before the loop"):
        torch_tk.kernel(text, file="a.tk")
