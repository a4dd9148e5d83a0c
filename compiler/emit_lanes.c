/* emit_lanes.c - prints CPU and GPU lane tiles: a tile's copies (group
 * rows, lane blocks), the loops over its lanes and their ranges. The tile
 * itself is planned in plan_lanes.c. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>

#include "emit.h"

/* Selects copy c of a tile: group row c / R, lane block c % R. */
void set_copy(emitter *E, int c) {
    E->copy = c;
    E->gcopy = c / E->nblocks;
    E->rcopy = c % E->nblocks;
}

/* The bound set of copy c: one per lane block when bounds ignore the
 * group row, else one per copy. */
int bound_set(const emitter *E, int c, int nb) { return nb == E->nblocks ? c % E->nblocks : c; }

/* The head of a loop over the lanes: on the GPU always unrolled, so that
 * per-lane arrays become registers. */
void lane_head(emitter *E, int simd) {
    if (E->tg->gpu) line(E, "#pragma unroll");
    else if (simd) line(E, "#pragma omp simd");
}

void lane_open(emitter *E, int simd) {
    lane_head(E, simd);
    if (E->lane_n) line(E, "for (int tk_j = 0; tk_j < %s; ++tk_j) {", E->lane_n);
    else line(E, "for (int tk_j = 0; tk_j < %d; ++tk_j) {", E->lanes);
    E->indent++;
    E->in_lane = 1;
}

void lane_close(emitter *E) {
    E->in_lane = 0;
    E->indent--;
    line(E, "}");
}

/* Statements for every copy, statement by statement (copies share loads). */
void lane_stmts(emitter *E, tk_stmt **body, int n) {
    for (int i = 0; i < n; i++)
        for (int c = 0; c < E->ngroup * E->nblocks; c++) {
            set_copy(E, c);
            block(E, &body[i], 1);
        }
}

/* u over [lo, hi) with the lane loop inside; masked: lanes outside their
 * own range skip the body (tested on 32-bit offsets from tk_mn, so that the
 * test vectorises along with float lanes). */

void lane_range(emitter *E, const tk_stmt *s, const char *lo, const char *hi, int masked, int nb) {
    if (!masked && E->tg->gpu && gpu_window_range(E, s, lo, hi)) return;
    line(E, "for (tk_i64 v_%s = %s; v_%s < %s; ++v_%s) {", s->name, lo, s->name, hi, s->name);
    E->indent++;
    if (masked)
        line(E, "const %s tk_ur = (%s)(v_%s - tk_mn);", E->ftype == TK_V_F64 ? "long long" : "int",
             E->ftype == TK_V_F64 ? "long long" : "int", s->name);
    lane_open(E, 1);
    int flat = 1;
    for (int i = 0; i < s->nbody; i++) flat &= s->body[i]->kind == TK_S_ASSIGN;
    if (!masked) {
        lane_stmts(E, s->body, s->nbody);
    } else if (flat) {
        /* assignments only: each selects its new value by the mask (no
         * masked stores, which would keep the loop from vectorising) */
        char cond[64];
        E->mask = cond;
        for (int i = 0; i < s->nbody; i++)
            for (int c = 0; c < E->ngroup * E->nblocks; c++) {
                int k = bound_set(E, c, nb);
                snprintf(cond, sizeof cond, "tk_lr%d[tk_j] <= tk_ur && tk_ur < tk_hr%d[tk_j]", k, k);
                set_copy(E, c);
                block(E, &s->body[i], 1);
            }
        E->mask = NULL;
    } else {
        for (int c = 0; c < E->ngroup * E->nblocks; c++) {
            int k = bound_set(E, c, nb);
            line(E, "if (tk_lr%d[tk_j] <= tk_ur && tk_ur < tk_hr%d[tk_j]) {", k, k);
            E->indent++;
            set_copy(E, c);
            block(E, s->body, s->nbody);
            E->indent--;
            line(E, "}");
        }
    }
    lane_close(E);
    E->indent--;
    line(E, "}");
}

/* Whether e reads neither the group variable nor a local (its value is the
 * same in every copy of a lane). */
int group_invariant(const emitter *E, const tk_expr *e) {
    if (!e) return 1;
    if (E->ngroup == 1) return 1;
    if (e->kind == TK_E_NAME) {
        const tk_opdecl *d = E->op->decl;
        int idx;
        if (strcmp(e->name, d->loop_vars[E->gdim]) == 0) return 0;
        for (int i = 0; i < d->nloop; i++)
            if (strcmp(e->name, d->loop_vars[i]) == 0) return 1;
        if (tk_resolve_header(E->op, e->name, &idx) != TK_SYM_NONE) return 1;
        for (int i = 0; i < E->nshared; i++)
            if (strcmp(E->shared[i], e->name) == 0) return 1;
        return 0;
    }
    for (int i = 0; i < e->nargs; i++)
        if (!group_invariant(E, e->args[i])) return 0;
    return 1;
}
