#!/usr/bin/env python3
"""Regenerate the golden generated sources in tests/golden/.

For every ops/X.tk:  tkc emit-c X.tk > tests/golden/X.c
                     tkc emit-cuda X.tk > tests/golden/X.cu
                     tkc plan --target cpu X.tk; tkc plan --target cuda X.tk > tests/golden/X.plan
(TK_CUDA_TUNE unset: the specs' own schedules)
Run from anywhere after building tkc, then review the diff:
    python3 tests/update_golden.py [--tkc build/tkc]
"""

import argparse
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
TARGETS = [(["emit-c"], ".c"), (["emit-cuda"], ".cu"),   # tkc commands, golden suffix
           (["plan", "--target", "cpu"], ".plan"), (["plan", "--target", "cuda"], ".plan")]


def emit(tkc: pathlib.Path, command: list, spec: pathlib.Path) -> str:
    """tkc's output for one spec; raises with tkc's message on failure."""
    env = {k: v for k, v in os.environ.items() if k != "TK_CUDA_TUNE"}
    proc = subprocess.run([str(tkc), *command, str(spec.relative_to(ROOT))],
                          cwd=ROOT, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{tkc} {command} {spec.name} failed ({proc.returncode}):\n{proc.stderr}")
    return proc.stdout


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tkc", default="build/tkc", help="path of tkc (relative to the repository root)")
    args = ap.parse_args(argv)
    tkc = (ROOT / args.tkc).resolve()
    if not tkc.is_file():
        print(f"update_golden: no tkc at {tkc}; build first (cmake --build build)", file=sys.stderr)
        return 1
    golden = ROOT / "tests" / "golden"
    golden.mkdir(parents=True, exist_ok=True)
    specs = sorted((ROOT / "ops").glob("*.tk"))
    for spec in specs:
        texts = {}
        for command, suffix in TARGETS:   # the plans: CPU then CUDA, one file
            texts[suffix] = texts.get(suffix, "") + emit(tkc, command, spec)
        for suffix, text in texts.items():
            path = golden / (spec.stem + suffix)
            changed = not path.exists() or path.read_text() != text
            path.write_text(text)
            print(f"{'updated' if changed else 'same   '} {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
