/* schedule.c - CUDA schedules given by the caller: TK_CUDA_TUNE.
 *
 * TK_CUDA_TUNE="lanes=8,rows=2,warp_rows=8,chunk=64" overrides the CUDA tile
 * shape the planner picks: lanes (outputs along the innermost dim a thread
 * computes: 4, 8, 16), rows (group rows a thread computes at most: 1, 2, 4,
 * 8), warp_rows (rows a warp's threads spread over: 1 to 32, a power of two),
 * chunk (bytes of the widest output a loop-free kernel's thread writes:
 * 16 to 128), split (threads that share a tile's top-level reduction
 * loop: 1 to 32, see split_plan) and ldg (bytes of one load of a stream:
 * 4, 8, 16, see stream_find; default 16) and tiles (tiles a thread takes: 1, or 2, a
 * tile and its mirror image along the row, see mirror_plan), and regs (at most
 * that many registers a thread: __maxnreg__, 32 to 248, a multiple of 8; ptxas
 * spills the rest to local memory; not given: as many as ptxas likes, at most
 * 255), and coop (threads that share each iteration of a row loop: 1, or 2
 * to 32 consecutive lanes of one warp, see plan_coop.c; untimed, so never a
 * default). Any key may be left out. It is the knob for measuring shapes
 * on a GPU (ci/gpu_tune.py); the emitted source, and so the kernel cache's
 * key, records the shape. A malformed value is an error. An op's 'schedule'
 * line (docs/spec.md) sets the same items for that op; TK_CUDA_TUNE
 * overrides them item by item. The CUDA launcher reads it once per kernel,
 * when it plans (and so sizes the grid) and emits it together: set it before
 * the process's first CUDA call of an op. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

tk_status tk_schedule_parse(const char *text, tk_schedule *s, char *err, size_t errlen) {
    if (!s) return TK_ERR_INVALID;
    memset(s, 0, sizeof *s);
    if (!text || !text[0]) return TK_OK;
    const char *p = text;
    while (*p) {
        size_t n = strcspn(p, "=,");
        int k = tk_sched_find(p, n);
        char *end = NULL;
        const char *digits = p + n + 1;
        long v = (k >= 0 && p[n] == '=' && *digits >= '0' && *digits <= '9') ? strtol(digits, &end, 10) : 0;
        if (k < 0 || !end || (*end && *end != ',') || (*end == ',' && !end[1]) || !tk_sched_valid(k, v) ||
            s->v[k]) {
            if (err && errlen)
                snprintf(err, errlen, "TK_CUDA_TUNE=\"%s\": expected key=value items separated by commas, each "
                         "key once: lanes 4..16, rows 1..8, warp_rows 1..32, chunk 16..128 (bytes), split 1..32, ldg 4..16 (bytes), tiles 1..2, coop 1..32, parts 1..65536, each a power of two, regs 32..248, a multiple of 8",
                         text);
            return TK_ERR_INVALID;
        }
        s->v[k] = (int)v;
        p = *end ? end + 1 : end;
    }
    return TK_OK;
}

tk_status tk_schedule_from_env(tk_schedule *s, char *err, size_t errlen) {
    return tk_schedule_parse(getenv("TK_CUDA_TUNE"), s, err, errlen);
}
_Static_assert(sizeof(((tk_schedule *)0)->v) == TK_SCHED_KEYS * sizeof(int), "tk_schedule holds every schedule key");
