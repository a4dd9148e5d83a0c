"""Static report of tk's CUDA kernels, for machines without a GPU.

Every kernel of the given specs is compiled by NVRTC for a real architecture
(sm_90 by default) with ptxas's resource report (registers, spill bytes), and
to PTX, in which the hot loop of each kernel is found: the innermost loop
(a backward branch with no other loop inside) with the most floating-point
FMAs. Its instruction mix says what bounds the kernel before any GPU runs it:
loads per FMA (an H100/H200 SM issues 4 warp-FMAs per clock and about one
warp-load), local-memory traffic (spills, or per-lane arrays that did not
become registers) and the other instructions (addresses, masks, loop).

    python3 bench/gpu_static.py [--arch sm_90] [--tkc build/tkc] [--json F] SPEC...

The PTX is the compiler's input; what the GPU runs is the SASS ptxas makes
of it. With nvdisasm (pip install nvidia-cuda-nvdisasm, or $TK_NVDISASM) the
cubin is disassembled too and the same hot loop is read in SASS: there the
FFMA share of the loop's instructions bounds the fraction of the FP32 FMA
peak the kernel can reach, since each SM sub-partition issues one warp
instruction per clock and has 32 FP32 lanes (any other instruction in the
loop takes an FMA's issue slot).

Needs NVRTC (nvidia-cuda-nvrtc, or $TK_NVRTC_PATH) and a built tkc; no GPU,
no driver. The same numbers for the same source, so a change to the code
generator shows up as a change in this table.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import heapq
import json
import os
import re
import shutil
import site
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def find_nvrtc() -> str:
    env = os.environ.get("TK_NVRTC_PATH")
    cands: List[str] = []
    if env:
        cands += [env] if os.path.isfile(env) else sorted(glob.glob(os.path.join(env, "libnvrtc.so*")), reverse=True)
    else:
        dirs = site.getsitepackages() + [site.getusersitepackages()]
        for d in dirs:
            for sub in ("nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"):
                cands += sorted(glob.glob(os.path.join(d, sub, "libnvrtc.so*")), reverse=True)
        cands += ["/usr/local/cuda/lib64/libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"]
    for c in cands:
        try:
            ctypes.CDLL(c)
            return c
        except OSError:
            continue
    raise SystemExit("gpu_static: NVRTC not found (pip install nvidia-cuda-nvrtc, or set TK_NVRTC_PATH)")


def innermost(loops: List[tuple]) -> List[tuple]:
    """The loops (first, last instruction index) with no other loop inside."""
    return [(a, b) for (a, b) in loops if not any(a <= c and d <= b and (c, d) != (a, b) for (c, d) in loops)]


def find_nvdisasm() -> Optional[str]:
    """nvdisasm from $TK_NVDISASM, the nvidia-cuda-nvdisasm wheel, the CUDA
    toolkit or PATH; None when there is none."""
    env = os.environ.get("TK_NVDISASM")
    if env:
        return env if os.access(env, os.X_OK) else None
    cands: List[str] = []
    for d in site.getsitepackages() + [site.getusersitepackages()]:
        cands += [os.path.join(d, "nvidia", sub, "bin", "nvdisasm") for sub in ("cu13", "cuda_nvdisasm")]
    cands += [os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvdisasm")]
    for c in cands:
        if os.access(c, os.X_OK):
            return c
    return shutil.which("nvdisasm")


def split_sass(text: str) -> Dict[str, List[tuple]]:
    """nvdisasm's listing per function: [(kind, text)], kind "label" or "ins"."""
    out: Dict[str, List[tuple]] = {}
    cur = None
    for line in text.splitlines():
        m = re.match(r"\s*\.section\s+\.text\.(\w+),", line)
        if m:
            cur = out.setdefault(m.group(1), [])
            continue
        if cur is None:
            continue
        m = re.match(r"^\s*(\.L_x_\d+):", line)
        if m:
            cur.append(("label", m.group(1)))
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", line)
        if m:
            cur.append(("ins", m.group(1)))
    return out


def sass_op(ins: str) -> str:
    return re.sub(r"^@!?U?P\w+\s+", "", ins).split()[0]


def sass_listing(fn: List[tuple]) -> tuple:
    """A function's instructions, and the index each label points at."""
    ins: List[str] = []
    labels: Dict[str, int] = {}
    for kind, t in fn:
        if kind == "label":
            labels[t] = len(ins)
        else:
            ins.append(t)
    return ins, labels


def sass_loops(ins: List[str], labels: Dict[str, int], branch: "re.Pattern") -> List[tuple]:
    """(head, back edge) of every backward branch that branch matches."""
    loops = []
    for i, t in enumerate(ins):
        m = branch.search(t)
        if m and m.group(1) in labels and labels[m.group(1)] <= i:
            loops.append((labels[m.group(1)], i))
    return loops


def sass_hot_loop(fn: List[tuple]) -> Optional[dict]:
    """The innermost SASS loop (a backward BRA with no other loop inside)
    with the most FFMA/DFMA: its instruction count, FMAs, global loads
    (LDG), local memory accesses (LDL/STL: spills) and the FMA share of
    the loop."""
    ins, labels = sass_listing(fn)
    inner = innermost(sass_loops(ins, labels, re.compile(r"BRA\s+`?\(?(\.L_x_\d+)")))
    best = None
    for a, b in inner:
        ops = [sass_op(t) for t in ins[a:b + 1]]
        fma = sum(1 for o in ops if o.startswith("FFMA") or o.startswith("DFMA"))
        if not fma:
            continue
        r = dict(total=len(ops), fma=fma, ldg=sum(1 for o in ops if o.startswith("LDG")),
                 ldg128=sum(1 for o in ops if o.startswith("LDG.E.128")),
                 local=sum(1 for o in ops if o.startswith("LDL") or o.startswith("STL")),
                 fma_share=round(fma / len(ops), 3))
        if best is None or (fma, -len(ops)) > (best["fma"], -best["total"]):
            best = r
    return best


SASS_CALL_COST = 100   # a CALL: the 64-bit division subroutine is about that long


def sass_chunk_path(fn: List[tuple]) -> List[dict]:
    """GPU chunks: for each block of 16-byte stores (one per copy of the
    grid-stride loop that gathers them), the fewest SASS instructions one
    iteration of the innermost loop around it executes on a path through
    the stores: loop head -> stores -> back edge, a CALL counting
    SASS_CALL_COST. With TK_STATIC_POSITIVE_DIVISORS (main() compiles with
    it) the branches for a zero or negative divisor are gone, so the
    cheapest path is the one a full chunk takes: the instructions a chunk
    of K elements issues, besides the thread's set-up before the loop."""
    ins: List[str] = []
    labels: Dict[str, int] = {}
    bb: List[int] = []      # basic block of each instruction
    cur = 0
    for kind, t in fn:
        if kind == "label":
            labels[t] = len(ins)
            cur += 1
        else:
            ins.append(t)
            bb.append(cur)
            if "BRA" in t or "EXIT" in t:
                cur += 1
    branch = re.compile(r"BRA\s+(?:\S+,\s*)?`?\(?(\.L_x_\d+)")

    def succ(i: int) -> List[int]:
        t = ins[i]
        op = sass_op(t)
        cond = t.startswith("@")
        if op == "EXIT" or op.startswith("RET"):
            return [i + 1] if cond else []
        m = branch.search(t)
        if m and m.group(1) in labels:
            return [labels[m.group(1)]] + ([i + 1] if cond else [])
        return [i + 1]

    def dist(a: int, b: int, lo: int, hi: int) -> Optional[int]:
        best = {a: 0}
        pq = [(0, a)]
        while pq:
            d, i = heapq.heappop(pq)
            if i == b:
                return d
            if d > best.get(i, 1 << 60):
                continue
            c = 1 + (SASS_CALL_COST if sass_op(ins[i]).startswith("CALL") else 0)
            for j in succ(i):
                if lo <= j <= hi and d + c < best.get(j, 1 << 60):
                    best[j] = d + c
                    heapq.heappush(pq, (d + c, j))
        return None

    loops = sass_loops(ins, labels, branch)
    blocks: List[List[int]] = []
    for i, t in enumerate(ins):
        if sass_op(t).startswith("STG") and ".128" in t:
            if blocks and bb[i] == bb[blocks[-1][-1]]:   # one chunk's stores: one basic block
                blocks[-1].append(i)
            else:
                blocks.append([i])
    out = []
    for blk in blocks:
        around = [(a, b) for a, b in loops if a <= blk[0] and blk[-1] <= b]
        if not around:
            continue
        a, b = min(around, key=lambda x: x[1] - x[0])
        d1, d2 = dist(a, blk[0], a, b), dist(blk[-1], b, a, b)
        if d1 is not None and d2 is not None:
            out.append(dict(stores=len(blk), path=d1 + d2 + 1))
    return out


class Nvrtc:
    def __init__(self, path: str):
        self.lib = ctypes.CDLL(path)
        self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p

    def _check(self, r: int, what: str, log: str = "") -> None:
        if r != 0:
            raise RuntimeError(f"{what}: {self.lib.nvrtcGetErrorString(r).decode()}\n{log}")

    def compile(self, src: str, name: str, opts: List[str], want: str) -> tuple:
        """Returns (output bytes, log); want is "cubin" or "ptx"."""
        prog = ctypes.c_void_p()
        self._check(self.lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), name.encode(), 0, None, None),
                    "nvrtcCreateProgram")
        try:
            arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
            r = self.lib.nvrtcCompileProgram(prog, len(opts), arr)
            n = ctypes.c_size_t()
            self.lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
            buf = ctypes.create_string_buffer(n.value)
            self.lib.nvrtcGetProgramLog(prog, buf)
            log = buf.value.decode(errors="replace")
            self._check(r, f"compiling {name}", log)
            get_size = getattr(self.lib, "nvrtcGet%sSize" % ("CUBIN" if want == "cubin" else "PTX"))
            get = getattr(self.lib, "nvrtcGet%s" % ("CUBIN" if want == "cubin" else "PTX"))
            get_size(prog, ctypes.byref(n))
            out = ctypes.create_string_buffer(n.value)
            get(prog, out)
            return out.raw, log
        finally:
            self.lib.nvrtcDestroyProgram(ctypes.byref(prog))


def ptxas_report(log: str) -> Dict[str, dict]:
    """Per function: registers, spill stores/loads (bytes), stack frame."""
    res: Dict[str, dict] = {}
    cur = None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line) or re.search(r"Function properties for (\w+)", line)
        if m:
            cur = m.group(1)
            res.setdefault(cur, {})
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            res[cur].update(stack=int(m.group(1)), spill_st=int(m.group(2)), spill_ld=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            res[cur]["regs"] = int(m.group(1))
    return res


def classify(ins: str) -> str:
    op = ins.split()[0]
    if op.startswith("@"):
        op = ins.split()[1]
    if re.match(r"(fma|mad)\.rn\.f(32|64)", op):
        return "fma"
    if re.match(r"(div|rem)\.[su]64", op):
        return "div64"     # one PTX instruction, a long subroutine in SASS
    if op.startswith("ld.global") or op.startswith("ld.param"):
        return "ld.global"
    if op.startswith("ld.shared"):
        return "ld.shared"
    if op.startswith("ld.local") or op.startswith("st.local"):
        return "local"
    if op.startswith("st.global"):
        return "st.global"
    return "other"


def hot_loop(ptx_fn: str) -> Optional[dict]:
    """The innermost loop with the most FMAs in one function's PTX (without
    FMAs: the longest innermost loop, e.g. an element-wise grid-stride loop)."""
    lines = [l.strip() for l in ptx_fn.splitlines()]
    labels = {}
    body: List[str] = []    # instructions and labels in order
    for l in lines:
        if not l or l.startswith("//") or l.startswith("."):
            continue
        body.append(l)
    for i, l in enumerate(body):
        if re.match(r"^\$L__\w+:$", l):
            labels[l[:-1]] = i
    loops = []
    for i, l in enumerate(body):
        m = re.search(r"bra(\.uni)?\s+(\$L__\w+);", l)
        if m and m.group(2) in labels and labels[m.group(2)] < i:
            loops.append((labels[m.group(2)], i))
    inner = innermost(loops)
    best = None
    for a, b in inner:
        mix: Dict[str, int] = {}
        n = 0
        for l in body[a:b + 1]:
            if l.endswith(":") or l in ("{", "}"):
                continue
            k = classify(l)
            mix[k] = mix.get(k, 0) + 1
            n += 1
        mix["total"] = n
        key = (mix.get("fma", 0), -n if mix.get("fma", 0) else n)
        if best is None or key > best[0]:
            best = (key, mix)
    return best[1] if best else None


ELEM_BYTES = {"b8": 1, "u8": 1, "i8": 1, "i16": 2, "f16": 2, "bf16": 2, "i32": 4, "f32": 4, "i64": 8, "f64": 8}


def chunk_block(ptx_fn: str, kernel: str) -> Optional[dict]:
    """GPU chunks (element-wise kernels without loops): the straight-line
    block that computes one full chunk of K elements and ends in its 16-byte
    streaming stores (st.global.cs.v4), its instruction mix and instructions
    per element. None when the kernel has no such stores."""
    body = [l.strip() for l in ptx_fn.splitlines()]
    body = [l for l in body if l and not l.startswith("//") and not l.startswith(".") and l not in ("{", "}")]
    first = next((i for i, l in enumerate(body) if l.startswith("st.global.cs.v4")), None)
    if first is None:
        return None
    last, i = first, first + 1    # the last vector store before the block ends
    while i < len(body) and not body[i].endswith(":") and not re.match(r"(@%p\d+ )?bra", body[i]):
        if body[i].startswith("st.global.cs.v4"):
            last = i
        i += 1
    start = first
    while start > 0 and not body[start - 1].endswith(":"):
        start -= 1
    mix: Dict[str, int] = {}
    for l in body[start:last + 1]:
        k = classify(l)
        mix[k] = mix.get(k, 0) + 1
    mix["total"] = last + 1 - start
    mix["st.v4"] = sum(1 for l in body[first:last + 1] if l.startswith("st.global.cs.v4"))
    esize = ELEM_BYTES.get(kernel.rsplit("__", 1)[-1].split("_")[0])
    if esize:   # K: 32 bytes of the widest output, at most 16 elements (emit.c, chunk_plan)
        mix["elements"] = min(16, 32 // esize)
        mix["per_element"] = round(mix["total"] / mix["elements"], 1)
    return mix


def split_ptx(ptx: str) -> Dict[str, str]:
    out = {}
    for m in re.finditer(r"\.visible \.entry (\w+)\((.*?)\n\}\n", ptx, re.S):
        out[m.group(1)] = m.group(0)
    return out


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("specs", nargs="*", default=sorted(glob.glob(os.path.join(ROOT, "ops", "*.tk"))))
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--tkc", default=os.path.join(ROOT, "build", "tkc"))
    ap.add_argument("--only", default="f32", help="variant suffix to report (f32, f16, bf16, f64, all)")
    ap.add_argument("--plain", action="store_true", help="the plain kernels (one element a thread) too, for comparison")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    nv = Nvrtc(find_nvrtc())
    nvdisasm = find_nvdisasm()
    inc = "-I" + os.path.join(ROOT, "compiler")
    rows = []
    jobs = [(spec, False) for spec in a.specs] + ([(spec, True) for spec in a.specs] if a.plain else [])
    for spec, plain in jobs:
        cmd = [a.tkc, "emit-cuda"] + (["--plain"] if plain else []) + [spec]
        src = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        if a.only != "all":   # only the kernels reported: a quarter of the compile time
            blocks = re.split(r"\n(?=/\* \w+: )", src)
            src = "\n".join([blocks[0]] + [b for b in blocks[1:] if re.search(r"void (?:__maxnreg__\(\d+\) )?\w+__%s\b" % a.only, b)])
        name = os.path.basename(spec) + ".cu"
        cubin, log = nv.compile(src, name, [f"--gpu-architecture={a.arch}", inc, "--ptxas-options=-v",
                                            "-std=c++17"], "cubin")
        paths: Dict[str, List[dict]] = {}
        if nvdisasm and re.search(r"__stcs", src):   # chunk kernels: their path with positive divisors
            pcubin, _ = nv.compile(src, name, [f"--gpu-architecture={a.arch}", inc, "-std=c++17",
                                               "-DTK_STATIC_POSITIVE_DIVISORS"], "cubin")
            with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
                f.write(pcubin)
                f.flush()
                psass = split_sass(subprocess.run([nvdisasm, "-c", f.name], check=True, capture_output=True,
                                                  text=True).stdout)
            paths = {k: sass_chunk_path(v) for k, v in psass.items()}
        res = ptxas_report(log)
        sass: Dict[str, List[tuple]] = {}
        if nvdisasm:
            with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
                f.write(cubin)
                f.flush()
                sass = split_sass(subprocess.run([nvdisasm, "-c", f.name], check=True, capture_output=True,
                                                 text=True).stdout)
        ptx, _ = nv.compile(src, name, ["--gpu-architecture=compute_" + a.arch.split("_")[1], inc, "-std=c++17"],
                            "ptx")
        fns = split_ptx(ptx.rstrip(b"\0").decode())
        for fn in sorted(fns):
            if a.only != "all" and not fn.endswith("__" + a.only) and ("__" + a.only + "_") not in fn:
                continue
            r = dict(kernel=fn + (" (plain)" if plain else ""), **res.get(fn, {}))
            r["hot_loop"] = hot_loop(fns[fn])
            r["sass_hot_loop"] = sass_hot_loop(sass[fn]) if fn in sass else None
            # warp shuffles anywhere in the kernel (split reductions' butterflies)
            r["sass_shfl"] = sum(1 for k, t in sass[fn] if k == "ins" and sass_op(t).startswith("SHFL")) \
                if fn in sass else None
            r["chunk"] = chunk_block(fns[fn], fn)
            if r["chunk"] and paths.get(fn):
                r["chunk"]["sass_path"] = [p["path"] for p in paths[fn]]
            rows.append(r)
    print(f"NVRTC, {a.arch}; hot loop = the innermost loop with the most FMAs, else the longest "
          "(PTX instructions; div64: 64-bit divisions and remainders)")
    print(f"{'kernel':42} {'regs':>4} {'spill':>6}  hot loop: {'fma':>4} {'ld.g':>4} {'local':>5} {'div64':>5} "
          f"{'other':>5}  fma/ld")
    for r in rows:
        h = r["hot_loop"] or {}
        ld = h.get("ld.global", 0)
        ratio = f"{h.get('fma', 0) / ld:.1f}" if ld else ("-" if not h else "inf")
        print(f"{r['kernel']:42} {r.get('regs', '?'):>4} {r.get('spill_st', 0) + r.get('spill_ld', 0):>6}"
              f"  {'':10}{h.get('fma', 0):>4} {ld:>4} {h.get('local', 0):>5} {h.get('div64', 0):>5} "
              f"{h.get('other', 0):>5}  {ratio:>6}")
    if nvdisasm:
        print(f"\nSASS ({nvdisasm}): the hot loop as the GPU runs it; fma% = FFMA/DFMA share of its instructions, "
              "the most of the FMA peak it can issue")
        print(f"{'kernel':42} {'instr':>5} {'fma':>4} {'ldg':>4}  fma%  shfl (whole kernel: split reductions)")
        for r in rows:
            h = r.get("sass_hot_loop")
            if h:
                print(f"{r['kernel']:42} {h['total']:>5} {h['fma']:>4} {h['ldg']:>4}  {100 * h['fma_share']:>4.0f}"
                      f"  {r.get('sass_shfl') or '-':>4}")
    else:
        print("\n(no nvdisasm: pip install nvidia-cuda-nvdisasm for the SASS hot loops)")
    chunks = [r for r in rows if r.get("chunk")]
    if chunks:
        print("\nGPU chunks: the straight-line block computing one chunk of K elements, ending in its 16-byte stores")
        print("(PTX); SASS a chunk: the instructions one full chunk issues, loop included, in each copy of the "
              "loop that gathers stores (unit strides; strided input)")
        print(f"{'kernel':42} {'K':>3} {'instr':>5} {'ld.g':>4} {'st.v4':>5} {'div64':>5}  instr/element"
              f"  SASS a chunk (/element)")
        for r in chunks:
            c = r["chunk"]
            k = c.get("elements")
            sp = "  ".join(f"{p} ({p / k:.1f})" if k else str(p) for p in c.get("sass_path", []))
            print(f"{r['kernel']:42} {c.get('elements', '?'):>3} {c['total']:>5} {c.get('ld.global', 0):>4} "
                  f"{c['st.v4']:>5} {c.get('div64', 0):>5}  {c.get('per_element', '?'):>13}  {sp}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(arch=a.arch, nvdisasm=nvdisasm, kernels=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
