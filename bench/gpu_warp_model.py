"""A model of how busy the warps and blocks of a tiled rwkv CUDA kernel are,
and of its time, for the tile orders tk could use. No GPU; a model, not a
measurement (memory latency and scheduler stalls are not in it).

Each thread computes tiles of V lanes x G batch rows (bench/gpu_static.py,
docs/gpu.md). In rwkv_forward tile i of a row sums about V*i + 1 terms a
lane, so the tiles of one row differ in work, and a warp runs as long as its
slowest thread. A tile's issue slots come from the SASS counts of its parts
(`python3 bench/gpu_static.py`, sm_90): a round of V steps, a step of the
shifted remainder, the tail, and a fixed part per tile.

A block keeps its registers (and so its place on the SM) until its last warp
ends, so a block whose warps differ in work leaves warp slots idle: "blocks
busy" is the share of the resident warps' time spent working. Two times
bound the kernel from below:
- issue-bound: every warp instruction issued, 4 schedulers an SM;
- latency-bound: each warp issues at most one instruction every `cpi`
  clocks whatever else runs (the SM holding `--slots` blocks at once), and
  blocks start on the first free slot in grid order.

    python3 bench/gpu_warp_model.py                  # the defaults: the kernel tk emits now
    python3 bench/gpu_warp_model.py --G 4 --round 1139 --step 116 --tail 732 --fixed 300 --rows 8
"""

import argparse
import heapq


def tile_work(i: int, a) -> int:
    n = i * a.V + 1     # interior steps of tile i (u < t + 1 with t = V*i)
    return n // a.V * a.round + n % a.V * a.step + a.tail + a.fixed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--B", type=int, default=32)
    ap.add_argument("--C", type=int, default=768)
    ap.add_argument("--T", type=int, default=768)
    ap.add_argument("--V", type=int, default=16, help="lanes a tile")
    # the defaults: rwkv_forward f32 as tk emits it since 2026-12-04 (16 x 2
    # lanes x rows, 4 rows a warp, 16-byte stream loads): its round from
    # bench/gpu_static.py (566 SASS instructions); step, tail and the fixed
    # part scaled from the 16 x 4 kernel's counts (116, 732, ~300)
    ap.add_argument("--G", type=int, default=2, help="batch rows a tile")
    ap.add_argument("--rows", type=int, default=4, help="rows a warp spreads over (tk: TK_ROWS, warp_rows)")
    ap.add_argument("--round", type=int, default=566, help="SASS instructions of a round of V steps")
    ap.add_argument("--step", type=int, default=60, help="... of one shifted step")
    ap.add_argument("--tail", type=int, default=370, help="... of the unrolled tail")
    ap.add_argument("--fixed", type=int, default=200, help="... of the rest of a tile (estimate)")
    ap.add_argument("--block", type=int, default=256, help="threads a block")
    ap.add_argument("--slots", type=int, default=2, help="blocks an SM holds at once (registers: 128 a thread -> 2)")
    ap.add_argument("--cpi", type=float, default=8.0, help="latency-bound: clocks between a warp's instructions")
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--ghz", type=float, default=1.98)
    a = ap.parse_args()
    ntile, nrow = a.T // a.V, (a.B // a.G) * a.C
    npair = (ntile + 1) // 2
    R = a.rows

    # each order gives a thread's tile positions, one a pass; a warp runs a
    # pass as long as its slowest thread (None: no tile that pass)
    def row_major(lin):           # 32 consecutive tiles of one row a warp
        return [lin % ntile]

    def interleaved(lin):         # `rows` rows x 32/rows positions a warp
        row = lin // R // ntile * R + lin % R
        return [None] if row >= nrow else [lin // R % ntile]

    def mirrored(lin):            # ... and each position's mirror image (tiles=2): a second pass
        row = lin // R // npair * R + lin % R
        p = lin // R % npair
        return [None, None] if row >= nrow else [p, None if ntile - 1 - p == p else ntile - 1 - p]

    flop = 2 * a.B * a.C * a.T * (a.T + 1) / 2
    print(f"rwkv_forward B={a.B} C={a.C} T={a.T}, tiles {a.V}x{a.G}, {a.sms} SMs x 4 schedulers at {a.ghz} GHz, "
          f"blocks of {a.block}, {a.slots} an SM; latency-bound at {a.cpi:g} clocks an instruction a warp")
    wpb = a.block // 32
    base = None
    for name, f, n in (("32 positions of one row", row_major, nrow * ntile),
                       (f"{R} rows x {32 // R} positions", interleaved, (nrow + R - 1) // R * R * ntile),
                       (f"{R} rows x {32 // R} positions, mirrored", mirrored, (nrow + R - 1) // R * R * npair)):
        work = busy = 0
        blocks = []               # each block's duration: its slowest warp
        bwork = bslots = 0
        cur = []
        for w0 in range(0, n, 32):
            passes = list(zip(*[f(lin) for lin in range(w0, min(w0 + 32, n))]))
            ws = [[tile_work(t, a) for t in ts if t is not None] for ts in passes]
            wsum = sum(sum(x) for x in ws)
            wmax = sum(max(x) for x in ws if x)   # the warp: the slowest thread of each pass
            work += wsum
            busy += wmax
            cur.append((wsum, wmax))
            if len(cur) == wpb or w0 + 32 >= n:
                bmax = max(m for _, m in cur)
                blocks.append(bmax)
                bwork += sum(s for s, _ in cur)
                bslots += 32 * wpb * bmax
                cur = []
        # latency-bound: blocks in grid order on the first free slot
        free = [0.0] * (a.sms * a.slots)
        heapq.heapify(free)
        end = 0.0
        for d in blocks:
            t = heapq.heappop(free) + d * a.cpi
            end = max(end, t)
            heapq.heappush(free, t)
        lat_ms = end / (a.ghz * 1e9) * 1e3
        ms = busy / (a.sms * 4 * a.ghz * 1e9) * 1e3
        base = base or lat_ms
        print(f"  a warp takes {name:36}: warps busy {100 * work / (32 * busy):3.0f}%, blocks busy "
              f"{100 * bwork / bslots:3.0f}%, {busy / 1e6:4.0f} M warp instructions, issue-bound {ms:.3f} ms, "
              f"latency-bound {lat_ms:.3f} ms ({base / lat_ms:.2f}x)")
    print(f"  FMA peak alone ({a.sms} x 128 lanes x 2 flop): {flop / (a.sms * 256 * a.ghz * 1e9) * 1e3:.3f} ms")
    l1_model(a)


def l1_model(a) -> None:
    """L1 wavefronts of a round of the tiled rwkv kernels (f32: 16 steps, 16
    lanes x 2 rows, 512 FFMA a thread) against the round's FFMA issue time.
    A warp holds 8 tile positions (16 elements = 64 bytes apart) of 4 rows
    (batch groups of one channel); L1 serves one 128-byte line a wavefront,
    one wavefront a clock; an SM issues 4 warp FFMAs a clock. A window load
    (w) touches the 8 positions of one row: 4 lines. A stream load touches 4
    rows: in rwkv_forward every position reads the same k[b, c, u] (4 lines);
    in rwkv_backward_k each position reads grad_out[b, c, t2] 16 elements on
    from the previous one (4 rows x 4 lines). Staged in shared memory (rows
    padded against bank conflicts), a request of 32 distinct 16-byte chunks
    takes 4 wavefronts. Calibration: the H200's Nsight Compute run of
    2026-12-04 (f32, ldg=4, one tile a thread)."""
    ffma_clk = 512 / 4           # a round's FFMAs, one warp instruction a clock on each of 4 schedulers
    print(f"\nL1 a round of 16 steps (a warp: 8 positions x 4 rows; {ffma_clk:.0f} clocks of FFMA issue)")
    print(f"  {'kernel, loads':54} {'requests':>8} {'wavefronts':>10}  L1 binds above  at the measured rate")
    measured = {"rwkv_forward": (0.32, 65), "rwkv_backward_k": (0.195, 92)}   # FMA share of peak, ncu L1 %
    for op, stream_lines in (("rwkv_forward", 4), ("rwkv_backward_k", 16)):
        for what, n_stream, lines in (("4-byte stream loads (as timed)", 32, stream_lines),
                                      ("16-byte stream loads (now)", 8, stream_lines),
                                      ("16-byte, stream rows in shared memory", 8, 4)):
            wf = 16 * 4 + n_stream * lines          # 16 window loads of 4 lines each
            binds = ffma_clk / wf
            at = ""
            if what.endswith("(as timed)"):
                share, l1 = measured[op]
                at = f"L1 {100 * wf / (ffma_clk / share):.0f} % busy (ncu: {l1} %)"
            print(f"  {op + ', ' + what:54} {16 + n_stream:>8} {wf:>10}  "
                  f"{'never' if binds >= 1 else f'{100 * binds:.0f} % of FMA peak':>14}  {at}")


if __name__ == "__main__":
    main()
