"""The last part of ci/gpu-check.sh: reads the steps ("name|status|seconds"
lines on stdin) and the logs in OUT/logs, writes OUT/gpu_check.json, prints
the short table (steps, the bench's figures against their targets, a digest
of the Nsight Compute profile), exits 1 unless every step passed (or its tool
is unavailable).

    printf '%s\\n' "${STEPS[@]}" | python3 ci/gpu_check_summary.py OUT TOTAL_SECONDS
"""

import json
import os
import re
import sys


def read(out, name):
    for path in (os.path.join(out, "logs", name), os.path.join(out, name)):
        try:
            with open(path) as f:
                return f.read()
        except OSError:
            pass
    return ""


def load_json(out, name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


NCU_METRICS = ("Duration", "SM Frequency", "Compute (SM) Throughput", "Memory Throughput", "DRAM Throughput",
               "Registers Per Thread", "Block Size", "Grid Size", "Theoretical Occupancy", "Achieved Occupancy",
               "Issue Slots Busy", "Executed Ipc Active")


def ncu_digest(text):
    """{kernel: {metric: "value unit"}} from `ncu --page details` text."""
    kernels, cur = {}, None
    for line in text.splitlines():
        head = re.match(r"^\s{0,4}(tk_\w+)\s*\(", line)
        if head:
            cur = kernels.setdefault(head.group(1), {})
            continue
        m = re.match(r"^\s+(.+?)\s{2,}(?:(\S+)\s+)?([\d,.]+)\s*$", line)   # the unit may be blank
        if cur is not None and m and m.group(1) in NCU_METRICS and m.group(1) not in cur:
            cur[m.group(1)] = f"{m.group(3)} {m.group(2) or ''}".strip()
    return kernels


def last(pattern, text):
    found = re.findall(pattern, text, re.M)
    return found[-1] if found else ""


def main(argv) -> int:
    out, total = argv[1], int(argv[2])
    steps = []
    for line in sys.stdin.read().splitlines():
        if line.strip():
            name, status, secs = line.split("|")
            steps.append(dict(step=name, status=status, seconds=int(secs)))
    ok = bool(steps) and all(s["status"] == "pass" or s["status"].startswith("unavailable") for s in steps)
    notes = dict(
        pytest=last(r"^=* ?(\d+ (?:passed|failed).*?)(?: in [\d.]+s.*)?=*$", read(out, "pytest.log")),
        bench=last(r"^gpu_bench: .*", read(out, "bench.log")),
        build=last(r"^libtk .* runs here.*", read(out, "build.log")),
        ops=last(r"^wrote .*json", read(out, "ops.log")),
        tune=last(r"^\[tune\] rwkv_forward f32.*", read(out, "tune.log"))[:60],
        sanitizer=last(r"ERROR SUMMARY: .*", read(out, "sanitizer.log")),
    )
    bench, ops = load_json(out, "gpu_bench.json"), load_json(out, "bench_ops.json")
    profile = ncu_digest(read(out, "ncu.txt"))
    machine, info = read(out, "machine.txt"), read(out, "info.txt")
    summary = dict(ok=ok, total_seconds=total, steps=steps, notes=notes, machine=machine, info=info, bench=bench,
                   ops_summary=ops.get("summary") if ops else None, ncu=profile)
    with open(os.path.join(out, "gpu_check.json"), "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")

    print()
    print("=" * 30, "tk GPU check", "=" * 30)
    print(machine.strip())
    for line in info.splitlines():
        if line.startswith(("nvrtc:", "driver:", "  cuda:", "cached kernels:")):
            print(line)
    print()
    print(f"{'step':10s} {'status':36s} {'s':>4s}  notes")
    for s in steps:
        print(f"{s['step']:10s} {s['status']:36s} {s['seconds']:4d}  {notes.get(s['step'], '')}")
    if bench:
        print()
        print(bench["table"])
        print()
        for line in bench.get("summary", []):
            print("[gpu] " + line)
    tune = load_json(out, "gpu_tune.json")
    if tune:
        print()
        for line in tune.get("summary", []):
            print("[tune] " + line)
    if ops:
        print()
        for line in ops.get("summary", []):
            print("[ops] " + line)
    for name, metrics in profile.items():
        print(f"[ncu] {name}: " + ", ".join(f"{k} {v}" for k, v in metrics.items()))
    print()
    print(f"total {total} s: {'PASS' if ok else 'FAIL'}; files in {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
