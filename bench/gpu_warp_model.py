"""A model of how busy the warps of a tiled rwkv CUDA kernel are, and of its
issue-bound time, for the tile orders tk could use. No GPU; a model, not a
measurement (memory latency and scheduler stalls are not in it).

Each thread computes tiles of V lanes x G batch rows (bench/gpu_static.py,
docs/gpu.md). In rwkv_forward tile i of a row sums about V*i + 1 terms a
lane, so the tiles of one row differ in work, and a warp runs as long as its
slowest thread. A tile's issue slots come from the SASS counts of its parts
(`python3 bench/gpu_static.py`, sm_90): a round of V steps, a step of the
shifted remainder, the tail, and a fixed part per tile.

    python3 bench/gpu_warp_model.py [--round 1139 --step 116 --tail 732 --fixed 300]
"""

import argparse


def tile_work(i: int, a) -> int:
    n = i * a.V + 1     # interior steps of tile i (u < t + 1 with t = V*i)
    return n // a.V * a.round + n % a.V * a.step + a.tail + a.fixed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--B", type=int, default=32)
    ap.add_argument("--C", type=int, default=768)
    ap.add_argument("--T", type=int, default=768)
    ap.add_argument("--V", type=int, default=16, help="lanes a tile")
    # the defaults and SASS counts below are the 16 x 4 kernel tk generated
    # before 2026-12-04 (now 16 x 2 lanes x rows, 4 rows a warp: measured on an
    # H200, docs/gpu.md; pass its counts from bench/gpu_static.py to model it)
    ap.add_argument("--G", type=int, default=4, help="batch rows a tile")
    ap.add_argument("--rows", type=int, default=8, help="rows a warp spreads over (tk: TK_ROWS)")
    ap.add_argument("--round", type=int, default=1139, help="SASS instructions of a round of V steps")
    ap.add_argument("--step", type=int, default=116, help="... of one shifted step")
    ap.add_argument("--tail", type=int, default=732, help="... of the unrolled tail")
    ap.add_argument("--fixed", type=int, default=300, help="... of the rest of a tile (estimate)")
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--ghz", type=float, default=1.98)
    a = ap.parse_args()
    ntile, nrow = a.T // a.V, (a.B // a.G) * a.C
    R = a.rows

    def row_major(lin):           # 32 consecutive tiles of one row a warp
        return lin % ntile

    def interleaved(lin):         # `rows` rows x 32/rows positions a warp
        row = lin // R // ntile * R + lin % R
        return None if row >= nrow else lin // R % ntile

    flop = 2 * a.B * a.C * a.T * (a.T + 1) / 2
    print(f"rwkv_forward B={a.B} C={a.C} T={a.T}, tiles {a.V}x{a.G}, {a.sms} SMs x 4 schedulers at {a.ghz} GHz")
    for name, f, n in (("32 positions of one row", row_major, nrow * ntile),
                       (f"{R} rows x {32 // R} positions", interleaved, (nrow + R - 1) // R * R * ntile)):
        work = busy = 0
        for w0 in range(0, n, 32):
            ws = [tile_work(t, a) for t in map(f, range(w0, min(w0 + 32, n))) if t is not None]
            if ws:
                work += sum(ws)
                busy += max(ws)
        ms = busy / (a.sms * 4 * a.ghz * 1e9) * 1e3
        print(f"  a warp takes {name:26}: warps busy {100 * work / (32 * busy):3.0f}%, "
              f"{busy / 1e6:5.0f} M warp instructions, issue-bound {ms:.3f} ms")
    print(f"  FMA peak alone ({a.sms} x 128 lanes x 2 flop): {flop / (a.sms * 256 * a.ghz * 1e9) * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
