"""Where a run-time spec's CPU compile spends its time (issue 26): takes the
C that tk compiles at the first float32 call of the rwkv copy that
bench/compile_time.py registers (from the TK_DEBUG=1 report), and compiles
it with tk's own command, whole and in pieces: each piece is the file's
first lines, prototypes of the other functions and the functions named,
made non-static so GCC keeps them (an always-inline body goes with the
wrapper that inlines it; the 512-bit pieces only on AVX-512 CPUs, as
TK_VXW). Prints the CPU time (user + sys) of each compile;
extra compiler flags (e.g. -fno-version-loops-for-strides) go after --.

    PYTHONPATH=python TK_LIBRARY=build/libtk.so python3 bench/compile_pieces.py [-- FLAG ...]
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compile_time  # noqa: E402  (the child script, the spec and the report parser)

DEF = re.compile(r"^(?:static )?(?:TK_\w+ )*void (\w+)\(.*\) \{$")


def emitted() -> tuple[list[str], str]:
    """(command, source) of the one compile of the rwkv copy's first call."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TK_CACHE_DIR=cache, TK_DEBUG="1")
        r = subprocess.run([sys.executable, "-c", compile_time.CHILD, "rwkv"], input=compile_time.rwkv_copy(),
                           capture_output=True, text=True, env=env, check=True)
    (found,) = compile_time.compiles(r.stderr)
    return found


def functions(lines: list[str]) -> list[tuple[str, int, int]]:
    """(name, first line, last line) of each top-level function definition."""
    out = []
    for i, text in enumerate(lines):
        m = DEF.match(text)
        if m:
            j = i + 1
            while lines[j] != "}":
                j += 1
            out.append((m.group(1), i, j))
    return out


def piece(lines: list[str], defs: list[tuple[str, int, int]], names: set[str]) -> str:
    """The file's first 4 lines, prototypes of the functions not in names,
    and those in names (none of them static)."""
    out = lines[:4]
    for name, i, _ in defs:
        if name not in names:
            out.append(re.sub(r"^static ", "", lines[i])[:-2] + ";")
    for name, i, j in defs:
        if name in names:
            out += [re.sub(r"^static ", "", lines[i])] + lines[i + 1:j + 1]
    return "\n".join(out) + "\n"


def cpu_seconds(command: list[str], text: str, folder: str, extra: list[str]) -> float:
    """CPU seconds (user + sys) of compiling text with command (+ extra)."""
    src = os.path.join(folder, "k.c")
    with open(src, "w", encoding="utf-8") as f:
        f.write(text)
    cmd = list(command)
    cmd[cmd.index("-o") + 1] = os.path.join(folder, "k.so")
    cmd = [src if a.endswith(".c") else a for a in cmd] + extra
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed")
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    extra = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else []
    command, source = emitted()
    lines = source.split("\n")
    defs = functions(lines)
    names = [n for n, _, _ in defs]
    # the 512-bit pieces only where they are compiled (TK_VXW: AVX-512 CPUs)
    wide = "avx512f" in open("/proc/cpuinfo", encoding="utf-8").read()
    groups = [(n, {n}) for n in names if re.search(r"_vy\d+$", n) or (wide and re.search(r"_vx\d+$", n))]
    for body, wrapper in (("_wbody", "_wide"), ("_mbody", "_mid"), ("_body", "_narrow")):
        got = {n for n in names if n.endswith(body) or n.endswith(wrapper)}
        if body == "_wbody" and not wide:
            continue
        if got:
            groups.append((f"{body[1:]} + {wrapper[1:]}", got))
    print(f"{' '.join(command[:command.index('-o')])} {' '.join(extra)}")
    with tempfile.TemporaryDirectory() as d:
        lib = os.environ.get("TK_LIBRARY", os.path.join(compile_time.ROOT, "build", "libtk.so"))
        header = os.path.join(os.path.dirname(os.path.abspath(lib)), "..", "compiler", "tk_kernel.h")
        shutil.copy(header, os.path.join(d, "tk_kernel.h"))
        print(f"{'whole file':<36} {len(lines):>5} lines {cpu_seconds(command, source, d, extra):6.2f} s")
        print(f"{'header only':<36} {4:>5} lines {cpu_seconds(command, chr(10).join(lines[:4]) + chr(10), d, extra):6.2f} s")
        for label, group in groups:
            n = sum(j - i + 1 for name, i, j in defs if name in group)
            print(f"{label:<36} {n:>5} lines {cpu_seconds(command, piece(lines, defs, group), d, extra):6.2f} s")


if __name__ == "__main__":
    main()
