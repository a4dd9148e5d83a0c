"""Random row loops through `backward auto` (compiler/autodiff_rows.c),
checked by torch.autograd.gradcheck: finite differences of the forward op,
a reference independent of the derivation.

Each op is drawn from what docs/autograd.md says the derivation takes: a row
loop `for r, _ in y` over x (R, N), a weight w (N) read broadcast and c (R)
read at the row's level; row-level locals; inner loops over the whole row or
part of it that sum (`s += e`, `s -= e`, `s = s + e`) or take an extreme
(`m = max(m, e)`, min), sometimes two locals in one loop, a temporary, a
conditional expression; one inner loop storing y[r, i] and a row-level store
z[r]. The values stay bounded (tanh, sin, divisions by 1 + e * e) so finite
differences are accurate, and random inputs make ties improbable.

CI runs a few fixed seeds; more from the command line:
    PYTHONPATH=python TK_LIBRARY=build/libtk.so python tests/python/test_backward_auto_fuzz.py --count 200
which prints each failing op's text.
"""
import argparse
import random
import subprocess
import sys

import pytest
import torch

import torch_tk

R, N = 3, 6


class Gen:
    """One random op's text."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.locals = []
        self.ntemp = 0

    def const(self):
        return f"{self.rng.choice([0.5, 1.5, -0.75, 2.0, 0.25])}"

    def row(self, depth=2):
        """A row-level float expression: constants, c[r], the row's locals."""
        rng = self.rng
        leaves = ["c[r]", self.const()] + self.locals
        if depth == 0 or rng.random() < 0.3:
            return rng.choice(leaves)
        a, b = self.row(depth - 1), self.row(depth - 1)
        return rng.choice([f"({a} + {b})", f"({a} * {b})", f"({a} - {b})", f"tanh({a})", f"sin({a})",
                           f"({a} / (1.0 + {b} * {b}))", f"({a} if {b} > 0.0 else {self.row(0)})"])

    def elem(self, depth=2):
        """An expression at i: x[r, i], w[i], row locals, constants."""
        rng = self.rng
        leaves = ["x[r, i]", "x[r, i]", "w[i]", self.const()] + self.locals
        if depth == 0 or rng.random() < 0.25:
            return rng.choice(leaves)
        a, b = self.elem(depth - 1), self.elem(depth - 1)
        return rng.choice([f"({a} + {b})", f"({a} * {b})", f"({a} - {b})", f"tanh({a})", f"sin({a})",
                           f"cos({a})", f"exp(tanh({a}))", f"({a} / (1.0 + {b} * {b}))"])

    def reads_x(self, e):
        return "x[r, i]" in e or "w[i]" in e

    def elem_reading(self):
        e = self.elem()
        while not self.reads_x(e):
            e = self.elem()
        return e

    def loop(self, lines, store=None):
        """An inner loop: one or two accumulators, maybe a temporary, maybe the store of y."""
        rng = self.rng
        rng_text = rng.choice(["range(N)", "range(N)", "range(1, N)", "range(N - 2)", "range(2, N)"])
        if store:
            rng_text = "range(N)"
        accs = []
        for _ in range(rng.choice([1, 1, 2]) if not store else rng.choice([0, 1])):
            k = len(self.locals) + len(accs)
            kind = rng.choice(["+=", "-=", "plus", "max", "min"])
            name = f"m{k}" if kind in ("max", "min") else f"s{k}"
            init = self.row(1) if kind in ("+=", "-=", "plus") else rng.choice(["-10.0", "10.0", self.row(1)])
            if kind == "max":
                init = "-10.0" if rng.random() < 0.7 else init
            if kind == "min":
                init = "10.0" if rng.random() < 0.7 else init
            lines.append(f"        {name} = {init}")
            accs.append((name, kind))
        body = []
        temp = None
        if rng.random() < 0.4:
            temp = f"t{self.ntemp}"
            self.ntemp += 1
            body.append(f"            {temp} = {self.elem_reading()}")
        for name, kind in accs:
            e = self.elem_reading()
            if temp and rng.random() < 0.6:
                e = f"({e} * {temp})"
            body.append({"+=": f"            {name} += {e}", "-=": f"            {name} -= {e}",
                         "plus": f"            {name} = {name} + {e}", "max": f"            {name} = max({name}, {e})",
                         "min": f"            {name} = min({name}, {e})"}[kind])
        if store:
            e = self.elem_reading()
            if temp and rng.random() < 0.6:
                e = f"({e} + {temp})"
            body.append(f"            y[r, i] = {e}")
        if not body:
            body.append(f"            y[r, i] = {self.elem_reading()}")
        lines.append(f"        for i in {rng_text}:")
        lines.extend(body)
        self.locals.extend(name for name, _ in accs)

    def scan_op(self, name):
        """A scan: one inner loop over the whole row carrying one or two
        locals by any (bounded) update, maybe under an `if`, read as they run."""
        rng = self.rng
        lines = [f"op {name}(x: float64[R, N], w: float64[N], c: float64[R]) -> (y: float64[R, N], z: float64[R]):",
                 "    backward auto",
                 "    for r, _ in y:"]
        if rng.random() < 0.5:
            lines.append(f"        a{len(self.locals)} = {self.row()}")
            self.locals.append(f"a{len(self.locals)}")
        carried = [f"h{k}" for k in range(rng.choice([1, 1, 2]))]
        for h in carried:
            lines.append(f"        {h} = {self.row(1)}")
        self.locals.extend(carried)
        lines.append("        for i in range(N):")
        if rng.random() < 0.4:
            lines.append(f"            t0 = {self.elem_reading()}")
        for h in carried:
            e = self.elem_reading()
            update = rng.choice([f"{h} * 0.5 + {e}", f"tanh({h} * {e} + {self.elem()})", f"{h} + {e}",
                                 f"max({h}, {e})", f"{h} * tanh({e}) + {self.elem()}"])
            if rng.random() < 0.3:
                lines += [f"            if {self.elem_reading()} > 0.0:", f"                {h} = {update}",
                          "            else:", f"                {h} = {h} - {self.elem_reading()} * 0.25"]
            else:
                lines.append(f"            {h} = {update}")
        lines.append(f"            y[r, i] = {self.elem_reading()}")
        lines.append(f"        z[r] = {self.row()}")
        return "\n".join(lines) + "\n"

    def op(self, name):
        rng = self.rng
        if rng.random() < 0.3:
            return self.scan_op(name)
        lines = [f"op {name}(x: float64[R, N], w: float64[N], c: float64[R]) -> (y: float64[R, N], z: float64[R]):",
                 "    backward auto",
                 "    for r, _ in y:"]
        nloops = rng.choice([1, 2, 2, 3])
        store_at = rng.randrange(nloops + 1)
        for k in range(nloops + 1):
            if rng.random() < 0.4:
                a = f"a{len(self.locals)}"
                lines.append(f"        {a} = {self.row()}")
                self.locals.append(a)
            if k == store_at:
                self.loop(lines, store=True)
            elif k < nloops:
                self.loop(lines)
        lines.append(f"        z[r] = {self.row()}")
        return "\n".join(lines) + "\n"


def check(seed):
    """Draws op `fz<seed>`, compiles it and gradchecks it; returns its text."""
    name = f"fz{seed}"
    text = Gen(seed).op(name)
    op = torch_tk.kernel(text, file=f"fuzz{seed}.tk")
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(R, N, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(N, generator=g, dtype=torch.float64, requires_grad=True)
    c = torch.randn(R, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(op, (x, w, c)), text
    return text


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6, 7, 8, 1017])
def test_random_row_loops_gradcheck(seed):
    """1017: a max over a computed term (x / (1 + x * x) + (x + 0.25)) lost
    its gradient when GCC contracted x * x + 1 into an FMA in the max's pass
    and not in the gradients' (whose statements sit under the range's
    guard): the recomputed term no longer equalled the max. Derived ops now
    compile without contraction (test below)."""
    check(seed)


def test_derived_ops_compile_without_contraction(tkc, tmp_path):
    """A derived op with a max or min (ties: values computed in two passes
    compared) turns FMA contraction off in its C (tk_kernel.h's helpers
    included, so they still inline) and multiplies by __fmul_rn / __dmul_rn
    in its CUDA (here float64: __dmul_rn); the forward op keeps both, and so
    does a derived op without an extreme."""
    spec = tmp_path / "contract.tk"
    spec.write_text(Gen(1017).op("fz_contract"))
    for cmd, mark in (("emit-c", 'optimize("fp-contract=off")'), ("emit-cuda", "__dmul_rn(")):
        r = subprocess.run([tkc, cmd, str(spec)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        forward, derived = r.stdout.split("(backward auto of fz_contract)")
        assert mark not in forward and mark in derived, cmd
        if cmd == "emit-c":
            assert derived.index(mark) < derived.index('#include "tk_kernel.h"') < derived.index("pop_options")
    plain = tmp_path / "plain.tk"   # sums only: no tie to find
    plain.write_text("op fz_plain(x: float64[R, N], w: float64[N]) -> y: float64[R, N]:\n    backward auto\n"
                     "    for r, _ in y:\n        s = 0.0\n        for i in range(N):\n"
                     "            s += x[r, i] * x[r, i] + 1.0\n        for i in range(N):\n"
                     "            y[r, i] = x[r, i] * w[i] + s\n")
    for cmd, mark in (("emit-c", 'optimize("fp-contract=off")'), ("emit-cuda", "__dmul_rn(")):
        r = subprocess.run([tkc, cmd, str(plain)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert "(backward auto of fz_plain)" in r.stdout and mark not in r.stdout, cmd


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--start", type=int, default=1000)
    args = ap.parse_args()
    failed = 0
    for seed in range(args.start, args.start + args.count):
        try:
            check(seed)
        except Exception as e:   # noqa: BLE001 - a report of every failure
            failed += 1
            print(f"--- seed {seed}: {type(e).__name__}: {str(e)[:2000]}\n{Gen(seed).op(f'fz{seed}')}", flush=True)
    print(f"{args.count - failed} of {args.count} passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
