/* plan_windows.c - the GPU tile's sliding windows and 16-byte streams:
 * for every lane loop whose bounds differ between lanes (printed by
 * tile_lane_for, its unmasked range by gpu_window_range in emit_cuda.c),
 * which of its reads slide with the lanes and which advance one element a
 * step. Decided once, here, for the plan (tk_body_plan.wloop); the printer
 * looks its loop up (window_find) and prints. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit.h"

/* ---- GPU sliding windows -------------------------------------------------------
 * In the unmasked range of a lane loop over u, a read whose index is
 * a*t + b*u + (lane-invariant terms) along one dim (t: the lanes' variable)
 * with b = -a or b = a, and lane-invariant elsewhere, gives lane j at u + 1
 * the element lane j - 1 (or j + 1) read at u. Such a read is loaded once per
 * lane at the start of the range, then each step shifts the registers by
 * one lane and loads the one new element: one load per step instead of one
 * per lane (rwkv: the w row). Only reads every lane makes at every u qualify
 * (unconditional statements, not under `if`, a conditional expression or
 * the right side of and/or), so no load leaves the spec's own reads. */

/* Whether every name of e other than t and u is the same in every lane. */
static int win_rest_ok(const emitter *E, const tk_expr *e, const char *t, const char *u) {
    if (!e) return 1;
    if (e->kind == TK_E_NAME) return !strcmp(e->name, t) || !strcmp(e->name, u) || lane_invariant(E, e);
    for (int i = 0; i < e->nargs; i++)
        if (!win_rest_ok(E, e->args[i], t, u)) return 0;
    return 1;
}

/* Whether tensor read e slides with the lanes along loop variable u; *shift as in win_shift. */
static int win_read(const emitter *E, const tk_expr *e, const char *u, int *shift) {
    const tk_opdecl *d = E->op->decl;
    const char *t = d->loop_vars[d->nloop - 1];
    tk_dtype dt = tk_variant_dtype(E->op, E->variant, e->ref);
    if (dt != TK_F16 && dt != TK_BF16 && dt != TK_F32 && dt != TK_F64) return 0;
    /* (lane-invariant names are group-invariant too: lane_invariant rejects the group variable) */
    int k = -1;
    for (int i = 0; i < e->nargs; i++) {
        if (!expr_uses(e->args[i], t) && !expr_uses(e->args[i], u)) {
            if (!lane_invariant(E, e->args[i])) return 0;
            continue;
        }
        if (k >= 0) return 0;
        k = i;
    }
    int64_t a, b;
    if (k < 0 || !lane_coef(e->args[k], t, &a) || !lane_coef(e->args[k], u, &b) || a == 0) return 0;
    if (!win_rest_ok(E, e->args[k], t, u)) return 0;
    if (b == -a) *shift = -1;
    else if (b == a) *shift = 1;
    else return 0;
    return 1;
}

static void win_find(emitter *E, const tk_expr *e, const char *u) {
    if (!e || e->kind == TK_E_COND) return;
    if (e->kind == TK_E_BINARY && (e->op == TK_OPC_AND || e->op == TK_OPC_OR)) {
        win_find(E, e->args[0], u);
        return;
    }
    int shift;
    if (e->kind == TK_E_INDEX && win_read(E, e, u, &shift)) {
        for (int i = 0; i < E->nwin; i++)
            if (tk_expr_equal(E->win[i], e)) return;
        if (E->nwin < 8) {
            E->win_shift[E->nwin] = shift;
            E->win[E->nwin++] = e;
        }
        return;
    }
    for (int i = 0; i < e->nargs; i++) win_find(E, e->args[i], u);
}

/* ---- GPU streams ------------------------------------------------------------------
 * In a round of V steps (gpu_window_range) a read that is the same in every
 * lane and whose last index grows by one a step (rwkv_forward: k[b, c, u],
 * one per group row; rwkv_backward_k: grad_out[b, c, t2]) reads V
 * consecutive elements of one row: in the unit-stride copy they are loaded
 * 16 bytes at a time (__ldg of a tk_v16: ld.global.nc.v4, 4 float32 or 8
 * bfloat16 a load instead of one) into registers tk_sv<i>[V], from which
 * step tk_p takes its element. The rounds need every such read's first
 * address 16-byte aligned: a tile first runs single steps (shifted, as the
 * last ones) until they all are, at most 16 / element bytes - 1 of them;
 * when no start aligns them all (rows of odd lengths), the rounds load
 * element by element as before. A warp's load then asks L1 for its rows
 * once every 4 steps instead of every step (the H200's L1 was 65-92 %
 * busy with these kernels' loads, docs/gpu.md). Only reads that every step
 * of the spec evaluates (top-level assignments of the loop body, outside
 * conditional expressions) qualify, so no load leaves the spec's own reads. */

/* Names a stream's index may use: lane-invariant ones, the group variable,
 * and (allow_u) the loop variable u. */
static int stream_names_ok(const emitter *E, const tk_expr *e, const char *u, int allow_u) {
    if (!e) return 1;
    if (e->kind == TK_E_NAME) {
        const tk_opdecl *d = E->op->decl;
        if (!strcmp(e->name, u)) return allow_u;
        if (E->ngroup > 1 && !strcmp(e->name, d->loop_vars[E->gdim])) return 1;
        return lane_invariant(E, e);
    }
    for (int i = 0; i < e->nargs; i++)
        if (!stream_names_ok(E, e->args[i], u, allow_u)) return 0;
    return 1;
}

static void stream_find(emitter *E, const tk_expr *e, const char *u) {
    if (!e || e->kind == TK_E_COND) return;
    if (e->kind == TK_E_BINARY && (e->op == TK_OPC_AND || e->op == TK_OPC_OR)) {
        stream_find(E, e->args[0], u);
        return;
    }
    if (e->kind == TK_E_INDEX && e->nargs > 0) {
        const tk_opdecl *d = E->op->decl;
        const char *t = d->loop_vars[d->nloop - 1];
        tk_dtype dt = tk_variant_dtype(E->op, E->variant, e->ref);
        int size = (int)tk_dtype_size(dt), ok = dt == TK_F16 || dt == TK_BF16 || dt == TK_F32 || dt == TK_F64;
        int bytes = E->tune_ldg ? E->tune_ldg : 16, W = bytes / size;
        ok = ok && W >= 2;
        int64_t b;
        const tk_expr *last = e->args[e->nargs - 1];
        for (int i = 0; ok && i < e->nargs - 1; i++) ok = !expr_uses(e->args[i], u) && stream_names_ok(E, e->args[i], u, 0);
        ok = ok && !expr_uses(last, t) && stream_names_ok(E, last, u, 1) && lane_coef(last, u, &b) && b == 1;
        ok = ok && E->lanes % W == 0 && (E->strm_w == 0 || E->strm_w == W);
        for (int i = 0; ok && i < E->nwin; i++) ok = E->win[i] != e && !tk_expr_equal(E->win[i], e);
        if (ok) {
            int gi = group_invariant(E, e);
            for (int c = 0; c < (gi ? 1 : E->ngroup); c++) {
                int dup = 0;
                for (int i = 0; i < E->nstrm; i++) dup |= tk_expr_equal(E->strm[i], e) && E->strm_copy[i] == (gi ? -1 : c);
                if (dup || E->nstrm == 8) continue;
                E->strm_copy[E->nstrm] = gi ? -1 : c;
                E->strm[E->nstrm++] = e;
                E->strm_w = W;
            }
            return;
        }
    }
    for (int i = 0; i < e->nargs; i++) stream_find(E, e->args[i], u);
}

/* The windows and streams of lane loop s, in the tile state of E (its
 * lanes, group and the shared loops around s). */
static void loop_windows(emitter *E, const tk_stmt *s, tk_window_plan *w) {
    memset(w, 0, sizeof *w);
    w->loop = s;
    E->nwin = E->nstrm = E->strm_w = 0;
    for (int i = 0; i < s->nbody; i++)
        if (s->body[i]->kind == TK_S_ASSIGN) win_find(E, s->body[i]->value, s->name);
    if (E->nwin == 0) return;
    for (int i = 0; i < s->nbody; i++)
        if (s->body[i]->kind == TK_S_ASSIGN) stream_find(E, s->body[i]->value, s->name);
    w->nwin = E->nwin;
    memcpy(w->win, E->win, sizeof w->win);
    memcpy(w->win_shift, E->win_shift, sizeof w->win_shift);
    w->nstrm = E->nstrm;
    w->strm_w = E->strm_w;
    memcpy(w->strm, E->strm, sizeof w->strm);
    memcpy(w->strm_copy, E->strm_copy, sizeof w->strm_copy);
    E->nwin = E->nstrm = E->strm_w = 0;
}

/* The tile's walk (tile_block in emit_tile.c): loops with the same bounds
 * in every lane are shared and walked into; the others are lane loops,
 * planned. Returns 0 when the plan has no room left. */
static int windows_walk(emitter *E, tk_stmt **body, int n, tk_body_plan *b) {
    for (int i = 0; i < n; i++) {
        const tk_stmt *s = body[i];
        if (s->kind != TK_S_FOR) continue;
        if (lane_invariant(E, s->lo) && lane_invariant(E, s->hi)) {
            E->shared[E->nshared++] = s->name;
            int ok = windows_walk(E, s->body, s->nbody, b);
            E->nshared--;
            if (!ok) return 0;
            continue;
        }
        if (b->nwloop == TK_MAX_WLOOPS) return 0;
        loop_windows(E, s, &b->wloop[b->nwloop]);
        if (b->wloop[b->nwloop].nwin) b->nwloop++;
    }
    return 1;
}

void window_plan(emitter *E, tk_body_plan *b) {
    b->nwloop = 0;
    if (!E->lanes) return;
    E->nshared = 0;
    windows_walk(E, E->op->decl->body, E->op->decl->nbody, b);
}

const tk_window_plan *window_find(const tk_plan *P, const tk_stmt *loop) {
    const tk_body_plan *b = &P->body[0];
    for (int i = 0; i < b->nwloop; i++)
        if (b->wloop[i].loop == loop) return &b->wloop[i];
    return NULL;
}
