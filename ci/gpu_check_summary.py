"""The last part of ci/gpu-check.sh: reads the steps ("name|status|seconds"
lines on stdin) and the logs in OUT, writes OUT/gpu_check.json, prints the
short table, exits 1 unless every step passed (or its tool is unavailable).

    printf '%s\\n' "${STEPS[@]}" | python3 ci/gpu_check_summary.py OUT TOTAL_SECONDS
"""

import json
import os
import re
import sys


def read(out, name):
    try:
        with open(os.path.join(out, name)) as f:
            return f.read()
    except OSError:
        return ""


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
        ctest=last(r"^\d+% tests passed.*", read(out, "ctest.log")),
        pytest=last(r"^=* ?(\d+ (?:passed|failed).*?)(?: in [\d.]+s.*)?=*$", read(out, "pytest.log")),
        bench=last(r"^gpu_bench: .*", read(out, "bench.log")),
        sanitizer=last(r"ERROR SUMMARY: .*", read(out, "sanitizer.log")),
    )
    try:
        with open(os.path.join(out, "gpu_bench.json")) as f:
            bench = json.load(f)
    except (OSError, ValueError):
        bench = None
    machine, info = read(out, "machine.txt"), read(out, "info.txt")
    summary = dict(ok=ok, total_seconds=total, steps=steps, notes=notes, machine=machine, info=info, bench=bench)
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
    print(f"total {total} s: {'PASS' if ok else 'FAIL'}; files in {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
