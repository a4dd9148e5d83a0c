/* emit_tile.c - prints the statements of a lane tile (range loops per lane,
 * shared loops, masked ranges) and the GPU split reductions' sums. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>

#include "emit.h"

/* GPU: V - 1 steps of loop s from `from`, unrolled, lane j running the
 * body where `cond` (of tk_j and the step tk_m: constants once unrolled)
 * holds. */
static void triangle(emitter *E, const tk_stmt *s, const char *from, const char *cond) {
    line(E, "#pragma unroll");
    line(E, "for (int tk_m = 0; tk_m < %d; ++tk_m) {", E->lanes - 1);
    E->indent++;
    line(E, "const tk_i64 v_%s = %s + tk_m;", s->name, from);
    lane_open(E, 1);
    int flat = 1;
    for (int i = 0; i < s->nbody; i++) flat &= s->body[i]->kind == TK_S_ASSIGN;
    if (flat) {
        E->mask = cond;
        lane_stmts(E, s->body, s->nbody);
        E->mask = NULL;
    } else {
        line(E, "if (%s) {", cond);
        E->indent++;
        lane_stmts(E, s->body, s->nbody);
        E->indent--;
        line(E, "}");
    }
    lane_close(E);
    E->indent--;
    line(E, "}");
}

/* GPU: the per-lane offsets, then the masked head, the unmasked common
 * range and the masked tail; without a common range the head is all of
 * [tk_mn, tk_mx) (one masked copy of the body less than the CPU form). */
static void gpu_masked_ranges(emitter *E, const tk_stmt *s, int nb) {
    int V = E->lanes;
    for (int g = 0; g < nb; g++) line(E, "int tk_lr%d[%d], tk_hr%d[%d];", g, V, g, V);
    lane_open(E, 0);
    for (int g = 0; g < nb; g++) {
        line(E, "tk_lr%d[tk_j] = (int)(tk_mini(tk_maxi(tk_lo%d[tk_j], tk_mn), tk_mx) - tk_mn);", g, g);
        line(E, "tk_hr%d[tk_j] = (int)(tk_mini(tk_maxi(tk_hi%d[tk_j], tk_mn), tk_mx) - tk_mn);", g, g);
    }
    lane_close(E);
    /* triangles: lane j's range starting at tk_mn + j (head) or ending at
     * tk_H + j (tail), around a common range, make a head or tail of V - 1
     * steps in which lane j runs from step j on (head) or until step j
     * (tail): unrolled, whether a lane runs is known when compiling, so no
     * step tests or selects per lane (rwkv: u < t + 1, range(t, T)) */
    line(E, "int tk_sh = tk_L < tk_H, tk_st = tk_L < tk_H;");
    lane_open(E, 0);
    for (int g = 0; g < nb; g++) {
        line(E, "tk_sh &= tk_lo%d[tk_j] == tk_mn + tk_j;", g);
        line(E, "tk_st &= tk_hi%d[tk_j] == tk_H + tk_j;", g);
    }
    lane_close(E);
    line(E, "if (!(tk_L < tk_H)) tk_L = tk_H = tk_mx;");
    line(E, "if (tk_sh) {");
    E->indent++;
    triangle(E, s, "tk_mn", "tk_j <= tk_m");
    E->indent--;
    line(E, "} else {");
    E->indent++;
    lane_range(E, s, "tk_mn", "tk_L", 1, nb);
    E->indent--;
    line(E, "}");
    lane_range(E, s, "tk_L", "tk_H", 0, nb);
    line(E, "if (tk_st) {");
    E->indent++;
    triangle(E, s, "tk_H", "tk_j > tk_m");
    E->indent--;
    line(E, "} else {");
    E->indent++;
    lane_range(E, s, "tk_H", "tk_mx", 1, nb);
    E->indent--;
    line(E, "}");
}

/* A loop whose bounds differ between lanes: each lane's range [lo, hi) is
 * computed, their common part runs unmasked, the rest masked; lanes whose
 * ranges barely overlap (or lie far apart) run one after the other. */
static void tile_lane_for(emitter *E, const tk_stmt *s) {
    int N = E->ngroup * E->nblocks, V = E->lanes;
    int nb = group_invariant(E, s->lo) && group_invariant(E, s->hi) ? E->nblocks : N;   /* bound sets */
    line(E, "{");
    E->indent++;
    for (int g = 0; g < nb; g++) line(E, "tk_i64 tk_lo%d[%d], tk_hi%d[%d];", g, V, g, V);
    lane_open(E, 1);
    for (int g = 0; g < nb; g++) {
        set_copy(E, g);
        begin_line(E);
        tk_buf_printf(E->b, "tk_lo%d[tk_j] = ", g);
        if (s->lo) expr(E, s->lo, TK_V_INT);
        else tk_buf_puts(E->b, "0");
        tk_buf_printf(E->b, ";\n");
        begin_line(E);
        tk_buf_printf(E->b, "tk_hi%d[tk_j] = ", g);
        expr(E, s->hi, TK_V_INT);
        tk_buf_printf(E->b, ";\n");
    }
    lane_close(E);
    line(E, "tk_i64 tk_L = tk_lo0[0], tk_H = tk_hi0[0], tk_mn = INT64_MAX, tk_mx = INT64_MIN;");
    if (!E->tg->gpu) line(E, "double tk_work = 0;");   /* the lane-by-lane test (CPU) */
    lane_head(E, 0);
    line(E, "for (int tk_j = 0; tk_j < %d; ++tk_j) {", V);
    E->indent++;
    for (int g = 0; g < nb; g++) {
        line(E, "tk_L = tk_maxi(tk_L, tk_lo%d[tk_j]), tk_H = tk_mini(tk_H, tk_hi%d[tk_j]);", g, g);
        line(E, "if (tk_lo%d[tk_j] < tk_hi%d[tk_j]) {", g, g);
        E->indent++;
        line(E, "tk_mn = tk_mini(tk_mn, tk_lo%d[tk_j]), tk_mx = tk_maxi(tk_mx, tk_hi%d[tk_j]);", g, g);
        if (!E->tg->gpu) line(E, "tk_work += (double)tk_hi%d[tk_j] - (double)tk_lo%d[tk_j];", g, g);
        E->indent--;
        line(E, "}");
    }
    E->indent--;
    line(E, "}");
    /* lanes whose ranges barely overlap run one by one (CPU; on the GPU
     * the masked form always: less code for NVRTC, and a thread's lanes
     * are neighbours) */
    if (E->tg->gpu) {
        line(E, "if (tk_mn < tk_mx) {");
        E->indent++;
        gpu_masked_ranges(E, s, nb);
        E->indent--;
        line(E, "}");
        E->indent--;
        line(E, "}");
        return;
    }
    line(E, "if (tk_mn < tk_mx && (((double)tk_mx - (double)tk_mn) * %d > 2.0 * tk_work + %d || "
            "(double)tk_mx - (double)tk_mn > 1e9)) {", V * nb, 4 * V * nb);
    E->indent++;
    lane_open(E, 0);
    for (int c = 0; c < N; c++) {
        int k = bound_set(E, c, nb);
        set_copy(E, c);
        line(E, "for (tk_i64 v_%s = tk_lo%d[tk_j]; v_%s < tk_hi%d[tk_j]; ++v_%s) {", s->name, k, s->name, k, s->name);
        E->indent++;
        block(E, s->body, s->nbody);
        E->indent--;
        line(E, "}");
    }
    lane_close(E);
    E->indent--;
    line(E, "} else if (tk_mn < tk_mx) {");
    E->indent++;
    const char *mi = E->ftype == TK_V_F64 ? "long long" : "int";   /* lane offsets as wide as the lanes */
    for (int g = 0; g < nb; g++) line(E, "%s tk_lr%d[%d], tk_hr%d[%d];", mi, g, V, g, V);
    lane_open(E, 1);
    for (int g = 0; g < nb; g++) {
        /* empty lanes get an empty offset range */
        line(E, "tk_lr%d[tk_j] = (%s)(tk_mini(tk_maxi(tk_lo%d[tk_j], tk_mn), tk_mx) - tk_mn);", g, mi, g);
        line(E, "tk_hr%d[tk_j] = (%s)(tk_mini(tk_maxi(tk_hi%d[tk_j], tk_mn), tk_mx) - tk_mn);", g, mi, g);
    }
    lane_close(E);
    if (E->wide && vx_loop_planned(E, s)) {
        vx_loop(E, s, nb);   /* the wide body has unit strides: no omp simd form */
    } else {
        line(E, "{");
        E->indent++;
        line(E, "if (tk_L < tk_H) {");
        E->indent++;
        lane_range(E, s, "tk_mn", "tk_L", 1, nb);
        lane_range(E, s, "tk_L", "tk_H", 0, nb);
        lane_range(E, s, "tk_H", "tk_mx", 1, nb);
        E->indent--;
        line(E, "} else {");
        E->indent++;
        lane_range(E, s, "tk_mn", "tk_mx", 1, nb);
        E->indent--;
        line(E, "}");
        E->indent--;
        line(E, "}");
    }
    E->indent--;
    line(E, "}");
    E->indent--;
    line(E, "}");
}

/* A loop with the same bounds in every lane and copy. */
static void tile_shared_for(emitter *E, const tk_stmt *s) {
    set_copy(E, 0);
    line(E, "{");
    E->indent++;
    begin_line(E);
    tk_buf_printf(E->b, "const tk_i64 r_%s_lo = ", s->name);
    if (s->lo) expr(E, s->lo, TK_V_INT);
    else tk_buf_puts(E->b, "0");
    tk_buf_printf(E->b, ", r_%s_end = ", s->name);
    expr(E, s->hi, TK_V_INT);
    tk_buf_puts(E->b, ";\n");
    if (s == E->split_loop)   /* thread tk_sub of the tile's S (split_plan) */
        line(E, "for (tk_i64 v_%s = r_%s_lo + tk_sub; v_%s < r_%s_end; v_%s += %d) {", s->name, s->name, s->name,
             s->name, s->name, E->split);
    else
        line(E, "for (tk_i64 v_%s = r_%s_lo; v_%s < r_%s_end; ++v_%s) {", s->name, s->name, s->name, s->name, s->name);
    E->indent++;
    E->shared[E->nshared++] = s->name;
    tile_block(E, s->body, s->nbody);
    E->nshared--;
    E->indent--;
    line(E, "}");
    E->indent--;
    line(E, "}");
}

void tile_block(emitter *E, tk_stmt **body, int n) {
    int i = 0;
    while (i < n) {
        if (body[i]->kind != TK_S_FOR) {
            int k = i;
            while (k < n && body[k]->kind != TK_S_FOR) k++;
            lane_open(E, 1);
            lane_stmts(E, body + i, k - i);
            lane_close(E);
            i = k;
            continue;
        }
        const tk_stmt *s = body[i++];
        if (lane_invariant(E, s->lo) && lane_invariant(E, s->hi)) tile_shared_for(E, s);
        else tile_lane_for(E, s);
    }
}

/* Every accumulator of the split loop, each copy and lane: set to 0, or
 * (shuffle) added its partner's value at lane distance tk_o. */
static void split_accs(emitter *E, int shuffle) {
    lane_open(E, 0);
    for (int r = 0; r < E->op->nlocals; r++) {
        if (!E->split_acc[r]) continue;
        for (int c = 0; c < E->ngroup * E->nblocks; c++) {
            set_copy(E, c);
            begin_line(E);
            local_name(E, E->op->locals[r].name, r);
            if (shuffle) {
                tk_buf_puts(E->b, " += __shfl_xor_sync(tk_smask, ");
                local_name(E, E->op->locals[r].name, r);
                tk_buf_puts(E->b, ", tk_o);\n");
            } else {
                tk_buf_puts(E->b, " = 0;\n");
            }
        }
    }
    lane_close(E);
}

/* The body with its top-level loop dealt out over the tile's S threads. */
static void split_body(emitter *E) {
    const tk_opdecl *d = E->op->decl;
    int k = 0;
    while (d->body[k] != E->split_loop) k++;
    tile_block(E, d->body, k);
    line(E, "if (tk_sub != 0) {   /* thread 0 carries the sums so far */");
    E->indent++;
    split_accs(E, 0);
    E->indent--;
    line(E, "}");
    tile_block(E, d->body + k, 1);
    line(E, "{   /* the S partial sums, added pairwise by warp shuffles */");
    E->indent++;
    if (E->split == 32) line(E, "const unsigned tk_smask = 0xffffffffu;");
    else line(E, "const unsigned tk_smask = 0x%xu << (threadIdx.x & %d);", (1u << E->split) - 1, 32 - E->split);
    line(E, "#pragma unroll");
    line(E, "for (int tk_o = 1; tk_o < %d; tk_o *= 2) {", E->split);
    E->indent++;
    split_accs(E, 1);
    E->indent--;
    line(E, "}");
    E->indent--;
    line(E, "}");
    if (k + 1 < d->nbody) {
        line(E, "if (tk_sub == 0) {");
        E->indent++;
        tile_block(E, d->body + k + 1, d->nbody - k - 1);
        E->indent--;
        line(E, "}");
    }
}

/* One tile: the per-lane locals of every copy, then the body. */
void tile(emitter *E) {
    line(E, "{");
    E->indent++;
    for (int r = 0; r < E->op->nlocals; r++) {
        if (!E->arr[r]) continue;
        for (int c = 0; c < E->ngroup * E->nblocks; c++)
            line(E, "%s v_%s_%d[%d];", k_vctype[E->op->locals[r].type], E->op->locals[r].name, c, E->lanes);
    }
    if (E->split_loop) split_body(E);
    else tile_block(E, E->op->decl->body, E->op->decl->nbody);
    set_copy(E, 0);
    E->copy = -1;
    E->indent--;
    line(E, "}");
}
