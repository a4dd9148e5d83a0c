"""Read ranges checked at each call (compiler/reads.c, runtime/bind.c): a
read whose indices are linear in loop variables that run over whole ranges
known at the call, made wherever those loops run, is compared to its
tensor's dims before the kernel runs, and a read that would fall outside
refuses the call with a RuntimeError naming the op, the read's place, the
tensor and the dim (before: memory past the tensor was read, or the
process crashed). Reads the analysis cannot bound exactly (under an `if`,
in a conditional's arms, through a local, in a loop with other bounds)
stay unchecked, so a valid spec never gets a false alarm."""
import pytest
import torch

import torch_tk

pytestmark = pytest.mark.usefixtures("poisoned_outputs")

SPEC = """
op rr_other_dim(x: float[M], z: x.dtype[N]) -> y: x.dtype[N]:
    for i in y:
        y[i] = x[i] + z[i]

op rr_next(x: float[N]) -> y: x.dtype[N]:
    for i in y:
        y[i] = x[i + 1] - x[i]

op rr_offset(x: float[M], k: int) -> y: x.dtype[M]:
    for i in y:
        y[i] = x[i + k]

op rr_guarded(x: float[M], k: int) -> (y: x.dtype[M], g: x.dtype[M]):
    for i in y:
        y[i] = x[i + k] if i + k < M and i + k >= 0 else 0.0
        g[i] = 0.0
        if i + k < M and i + k >= 0:
            g[i] = x[i + k]

op rr_window(x: float[M], n: int, w: int) -> y: x.dtype[n]:
    for i in y:
        s = 0.0
        for j in range(w):
            s += x[2 * i + j]
        y[i] = s

op rr_rows(x: float[B, T]) -> y: x.dtype[B, T]:
    for b, _ in y:
        for t in range(T):
            y[b, t] = x[b, T - 1 - t] + x[b, t + 1]
"""
torch_tk.kernel(SPEC, file="rr.tk")
tk = torch.ops.tk


def test_a_read_over_another_dim():
    x, z = torch.randn(5), torch.randn(3)
    torch.testing.assert_close(tk.rr_other_dim(x, z), x[:3] + z)   # M >= N: every read inside x
    with pytest.raises(RuntimeError, match=r"^tk\.rr_other_dim: read x\[i\] \(rr\.tk:4:16\) would reach index 4 of "
                                           r"dim 0 of 'x', whose size is 3: outside the tensor \(index 0 runs over "
                                           r"0\.\.4 for these arguments\)$"):
        tk.rr_other_dim(torch.randn(3), torch.randn(5))
    with pytest.raises(RuntimeError, match=r"would reach index 999999 of dim 0 of 'x'"):   # (was a segfault)
        tk.rr_other_dim(torch.randn(3), torch.zeros(10**6))
    assert tk.rr_other_dim(torch.randn(3), torch.randn(0)).shape == (0,)   # nothing runs, nothing read


def test_one_past_the_end():
    with pytest.raises(RuntimeError, match=r"read x\[i \+ 1\] \(rr\.tk:8:16\) would reach index 4 of dim 0 of 'x', "
                                           r"whose size is 4"):
        tk.rr_next(torch.arange(4.0))
    assert tk.rr_next(torch.randn(0)).shape == (0,)


def test_an_int_parameter_offset():
    x = torch.randn(7)
    torch.testing.assert_close(tk.rr_offset(x, 0), x)
    for k in (1, 3):
        with pytest.raises(RuntimeError, match=rf"read x\[i \+ k\] \(rr\.tk:12:16\) would reach index {6 + k} of dim 0 "
                                               rf"of 'x', whose size is 7: outside the tensor \(index 0 runs over "
                                               rf"{k}\.\.{6 + k}"):
            tk.rr_offset(x, k)


def test_a_negative_offset():
    with pytest.raises(RuntimeError, match=r"would reach index -2 of dim 0 of 'x', whose size is 5: outside the "
                                           r"tensor \(index 0 runs over -2\.\.2"):
        tk.rr_offset(torch.randn(5), -2)


def test_guarded_reads_are_left_to_the_spec():
    """A read in a conditional's arm or under an `if` may be guarded: never
    refused (the guard keeps it inside here), values as torch's."""
    x = torch.randn(6)
    for k in (-3, 0, 2, 9):
        y, g = tk.rr_guarded(x, k)
        want = torch.tensor([x[i + k].item() if 0 <= i + k < 6 else 0.0 for i in range(6)])
        torch.testing.assert_close(y, want)
        torch.testing.assert_close(g, want)


def test_an_inner_loop_with_bounds_known_at_the_call():
    x = torch.randn(10)
    # y[i] = x[2i] + ... + x[2i + w - 1]: the last read is x[2(n - 1) + w - 1]
    torch.testing.assert_close(tk.rr_window(x, 4, 3), torch.stack([x[2 * i:2 * i + 3].sum() for i in range(4)]))
    with pytest.raises(RuntimeError, match=r"read x\[\(2 \* i\) \+ j\] \(rr\.tk:25:18\) would reach index 10 of dim 0 "
                                           r"of 'x', whose size is 10: outside the tensor \(index 0 runs over 0\.\.10"):
        tk.rr_window(x, 4, 5)
    # an empty inner loop reads nothing: no refusal, and the sums are 0
    torch.testing.assert_close(tk.rr_window(x, 20, 0), torch.zeros(20))


def test_row_loops():
    with pytest.raises(RuntimeError, match=r"read x\[b, t \+ 1\] \(rr\.tk:31:41\) would reach index 3 of dim 1 of "
                                           r"'x', whose size is 3"):
        tk.rr_rows(torch.randn(2, 3))


def test_the_plan_names_the_checked_reads(tkc, tmp_path):
    import subprocess
    path = tmp_path / "rr.tk"
    path.write_text(SPEC)
    r = subprocess.run([tkc, "plan", "--dtype", "f32", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    first, rest = r.stdout.split("plan rr_next")
    assert ("reads range-checked at each call (their indices against the tensors' dims, before the kernel runs): "
            "x[i] at 4:16\n") in first
    assert "x[i + 1] at 8:16\n" in rest.split("plan rr_offset")[0]
    # guarded reads, and reads proven from the shapes (x[b, T - 1 - t]), are not checked at the call
    guarded = rest.split("plan rr_guarded")[1].split("plan rr_window")[0]
    assert "range-checked" not in guarded
    assert "range-checked at each call (their indices against the tensors' dims, before the kernel runs): " \
           "x[b, t + 1] at 31:41\n" in rest.split("plan rr_rows")[1]
