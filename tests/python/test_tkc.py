"""tkc gen-builtin --parts: the kernels split into files a parallel build
compiles side by side, with the tables in the main file."""
import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPECS = [os.path.join(ROOT, "ops", f) for f in sorted(os.listdir(os.path.join(ROOT, "ops")))]
SPECS += [os.path.join(ROOT, "tests", "specs", f) for f in sorted(os.listdir(os.path.join(ROOT, "tests", "specs")))]

# a kernel entry point: defined (with a body) at the start of a line
DEFINED = re.compile(r"^(?:TK_CPU_CLONES )?void (tk_\w+)\(const tk_kargs \*a, tk_i64 begin, tk_i64 end\) \{", re.M)


def gen(tkc, out, *flags):
    return subprocess.run([tkc, "gen-builtin", *flags, "-o", str(out), *SPECS],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("plain", [False, True])
def test_parts_hold_every_kernel_once(tkc, tmp_path, plain):
    flags = ["--plain"] if plain else []
    whole = tmp_path / "whole.c"
    assert gen(tkc, whole, *flags).returncode == 0
    main = tmp_path / "split.c"
    r = gen(tkc, main, *flags, "--parts", "3")
    assert r.returncode == 0, r.stderr
    parts = [tmp_path / f"split.part{k}.c" for k in range(3)]
    assert all(p.exists() for p in parts)
    assert not (tmp_path / "split.part3.c").exists()

    # the same kernels (some defined twice, in #if / #else), each in exactly
    # one part, none in the main file
    expected = DEFINED.findall(whole.read_text())
    assert len(set(expected)) > 20
    per_part = [DEFINED.findall(p.read_text()) for p in parts]
    assert all(per_part), "a part without kernels"
    assert sorted(k for ks in per_part for k in ks) == sorted(expected)
    for i in range(3):
        for j in range(i):
            assert not set(per_part[i]) & set(per_part[j]), (i, j)
    text = main.read_text()
    assert DEFINED.findall(text) == []
    # ... declared there, and the kernel table is the single file's
    for k in set(expected):
        assert f"void {k}(const tk_kargs *a, tk_i64 begin, tk_i64 end);" in text, k
    table = lambda s: s[s.index("const tk_builtin_spec"):]
    assert table(text) == table(whole.read_text())

    # balanced by size: no part more than twice another
    sizes = [p.stat().st_size for p in parts]
    assert max(sizes) < 2 * min(sizes), sizes


@pytest.mark.parametrize("flags", [["--parts", "0"], ["--parts", "65"], ["--parts", "two"], ["--parts"],
                                   ["--cuda-emu", "--parts", "2"]])
def test_parts_usage_errors(tkc, tmp_path, flags):
    r = gen(tkc, tmp_path / "x.c", *flags)
    assert r.returncode == 2 and "usage: tkc" in r.stderr, (r.returncode, r.stderr)
    assert not list(tmp_path.iterdir())


def test_parts_unwritable(tkc, tmp_path):
    (tmp_path / "x.part1.c").mkdir()      # a folder where part 1 should go
    r = gen(tkc, tmp_path / "x.c", "--parts", "2")
    assert r.returncode == 2 and "cannot write" in r.stderr and "x.part1.c" in r.stderr, r.stderr
    assert not (tmp_path / "x.c").exists()
