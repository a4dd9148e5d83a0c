/* emit_cpu.c - prints the CPU kernel: unroll-and-jam of the body copies,
 * the run along the innermost dim as planned (hoisted statements,
 * incremental divisions, segments), the index-space loop, and the entry
 * that picks a body per instruction set and stride. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>

#include "emit.h"

/* Unroll-and-jam of a top-level loop across the body copies: each copy j
 * runs [lo_j, hi_j); the part common to all copies runs as one loop whose
 * body holds every copy (loads of copy-invariant values are shared and the
 * accumulators are independent), the rest per copy before and after it. */
/* Whether e has the same value in every unroll copy: it reads neither the
 * loop variable the copies offset (gdim: the innermost one, or a row
 * loop's jammed one) nor a local other than a shared loop variable. */
static int copy_invariant(const emitter *E, const tk_expr *e) {
    if (!e) return 1;
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
        if (!copy_invariant(E, e->args[i])) return 0;
    return 1;
}

static void jammed_for(emitter *E, const tk_stmt *s);
static void jam_block(emitter *E, tk_stmt **body, int n);

/* for (v = lo; v < hi; ++v) with every copy's statements inside, its
 * loops jammed in turn; v is shared by the copies (on E->shared). */
static void jammed_range(emitter *E, const tk_stmt *s, const char *lo, const char *hi) {
    line(E, "for (tk_i64 v_%s = %s; v_%s < %s; ++v_%s) {", s->name, lo, s->name, hi, s->name);
    E->indent++;
    jam_block(E, s->body, s->nbody);
    E->indent--;
    line(E, "}");
}

/* Statements of a jammed region: loops are jammed, the rest copied. */
static void jam_block(emitter *E, tk_stmt **body, int n) {
    for (int i = 0; i < n; i++) {
        if (body[i]->kind == TK_S_FOR) {
            jammed_for(E, body[i]);
            continue;
        }
        for (int c = 0; c < E->ncopies; c++) {
            E->copy = c;
            block(E, &body[i], 1);
        }
    }
}

/* A loop whose bounds are the same in every copy runs once for all of
 * them, with the copies' statements (and jammed inner loops) inside. */
static void shared_for(emitter *E, const tk_stmt *s) {
    int refs[16];
    E->copy = 0;
    line(E, "{");
    E->indent++;
    begin_line(E);
    tk_buf_printf(E->b, "const tk_i64 r_%s_lo = ", s->name);
    if (s->lo) expr(E, s->lo, TK_V_INT);
    else tk_buf_puts(E->b, "0");
    tk_buf_printf(E->b, ", r_%s_end = ", s->name);
    expr(E, s->hi, TK_V_INT);
    tk_buf_puts(E->b, ";\n");
    char lo[96], hi[96];
    snprintf(lo, sizeof lo, "r_%s_lo", s->name);
    snprintf(hi, sizeof hi, "r_%s_end", s->name);
    E->shared[E->nshared++] = s->name;
    if (E->plan->rows.jam ? row_vec_find(E->plan, s) != NULL : reduction_vars(E, s, refs, 16) > 0)
        range_loop(E, s, lo, hi, 0, E->ncopies);   /* (a row loop's: vectorised along the row as planned) */
    else
        jammed_range(E, s, lo, hi);
    E->nshared--;
    E->indent--;
    line(E, "}");
}

static void jammed_for(emitter *E, const tk_stmt *s) {
    int U = E->ncopies;
    if (copy_invariant(E, s->lo) && copy_invariant(E, s->hi) && E->nshared < 8) {
        shared_for(E, s);
        return;
    }
    line(E, "{");
    E->indent++;
    for (int c = 0; c < U; c++) {
        E->copy = c;
        begin_line(E);
        tk_buf_printf(E->b, "const tk_i64 lo_%d = ", c);
        if (s->lo) expr(E, s->lo, TK_V_INT);
        else tk_buf_puts(E->b, "0");
        tk_buf_printf(E->b, ", hi_%d = ", c);
        expr(E, s->hi, TK_V_INT);
        tk_buf_puts(E->b, ";\n");
    }
    E->copy = 0;
    begin_line(E);
    tk_buf_puts(E->b, "tk_i64 lo = lo_0, hi = hi_0;\n");
    for (int c = 1; c < U; c++) line(E, "lo = tk_maxi(lo, lo_%d), hi = tk_mini(hi, hi_%d);", c, c);
    line(E, "if (lo <= hi) {");
    E->indent++;
    char a[32], b[32];
    for (int c = 0; c < U; c++) {
        snprintf(a, sizeof a, "lo_%d", c);
        range_loop(E, s, a, "lo", c, c + 1);
    }
    if (E->plan->rows.jam && !row_vec_find(E->plan, s) && E->nshared < 8) {
        /* a row loop's: the common range's loops jammed too (attention's
         * dot products and row updates share the loads of k's and v's rows) */
        E->shared[E->nshared++] = s->name;
        jammed_range(E, s, "lo", "hi");
        E->nshared--;
    } else {
        range_loop(E, s, "lo", "hi", 0, U);
    }
    for (int c = 0; c < U; c++) {
        snprintf(b, sizeof b, "hi_%d", c);
        range_loop(E, s, "hi", b, c, c + 1);
    }
    E->indent--;
    line(E, "} else {");
    E->indent++;
    for (int c = 0; c < U; c++) {
        snprintf(a, sizeof a, "lo_%d", c);
        snprintf(b, sizeof b, "hi_%d", c);
        range_loop(E, s, a, b, c, c + 1);
    }
    E->indent--;
    line(E, "}");
    E->indent--;
    line(E, "}");
    E->copy = 0;
}

/* The body unrolled ncopies times along the innermost loop variable. */
static void jammed_body(emitter *E) {
    jam_block(E, E->op->decl->body, E->op->decl->nbody);
    E->copy = -1;
}

/* ---- CPU plan: loop-invariant statements and incremental divisions ------- */

/* The top-level statements, those in (hoisted == 1) or out of the run loop.
 * Only the first sizeof E->hoisted statements can be hoisted (plan_run
 * hoists none in a longer body). */
void run_block(emitter *E, int hoisted) {
    const tk_opdecl *d = E->op->decl;
    for (int i = 0; i < d->nbody; i++) {
        int h = i < (int)sizeof E->hoisted && E->hoisted[i];
        if (h == hoisted) block(E, &d->body[i], 1);
    }
}

/* Whether body has a loop, at any depth (CPU segments, GPU chunks). */
int has_for(tk_stmt **body, int n) {
    for (int i = 0; i < n; i++)
        if (body[i]->kind == TK_S_FOR || has_for(body[i]->body, body[i]->nbody) ||
            has_for(body[i]->orelse, body[i]->norelse))
            return 1;
    return 0;
}

/* Splits the run into segments in which every memo site's quotient is
 * constant (its numerator grows by one per element and the divisor is
 * positive), so the segment loop has no division and vectorises. Quotients
 * and remainders are divided once per run and stepped per segment. The
 * plain loop after it finishes the run when a divisor is not positive or a
 * numerator would overflow within the run (two's complement wraps there). */
static void segments(emitter *E) {
    const char *v = E->op->decl->loop_vars[E->op->decl->nloop - 1];
    for (int i = 0; i < E->nmemo; i++) {
        const tk_expr *e = E->memo[i];
        begin_line(E);
        tk_buf_printf(E->b, "const tk_i64 tk_d%d = ", i);
        expr(E, e->args[1], TK_V_INT);
        tk_buf_printf(E->b, ";\n");
        E->inline_locals = 1;
        begin_line(E);
        tk_buf_printf(E->b, "const tk_i64 tk_n%d = ", i);
        expr(E, e->args[0], TK_V_INT);
        tk_buf_printf(E->b, ";\n");
        E->inline_locals = 0;
        line(E, "tk_i64 tk_q%d = tk_floordiv(tk_n%d, tk_d%d), tk_r%d = tk_mod(tk_n%d, tk_d%d);", i, i, i, i, i, i);
    }
    begin_line(E);
    tk_buf_puts(E->b, "if (");
    /* (a numerator that would pass INT64_MAX in the run wraps: the plain loop) */
    for (int i = 0; i < E->nmemo; i++)
        tk_buf_printf(E->b, "%stk_d%d > 0 && tk_n%d <= 0x7fffffffffffffffLL - (stop - lin)", i ? " && " : "", i, i);
    tk_buf_puts(E->b, ") {\n");
    E->indent++;
    line(E, "while (lin < stop) {");
    E->indent++;
    line(E, "tk_i64 seg = stop - lin;");
    for (int i = 0; i < E->nmemo; i++) line(E, "seg = tk_mini(seg, tk_d%d - tk_r%d);", i, i);
    if (has_for(E->op->decl->body, E->op->decl->nbody)) {
        line(E, "const tk_i64 seg_end = lin + seg, tk_c0 = v_%s;", v);
        line(E, "(void)tk_c0;");
        line(E, "for (; lin < seg_end; ++lin, ++v_%s) {", v);
        E->indent++;
        E->in_segment = 1;
        run_block(E, 0);
        E->in_segment = 0;
        E->indent--;
        line(E, "}");
    } else {
        /* A straight-line body (brick_pad's copy): a canonical `omp simd`
         * loop. Elements are independent (outputs are written at the loop
         * index only), and without the pragma GCC guards the vector loop
         * with alias checks and a remainder cascade that cost brick_pad's
         * 32-element segments a third of their time. */
        line(E, "const tk_i64 tk_c0 = v_%s;", v);
        line(E, "#pragma omp simd");
        line(E, "for (tk_i64 tk_i = 0; tk_i < seg; ++tk_i) {");
        E->indent++;
        E->in_segment = E->seg_iv = 1;   /* v is tk_c0 + tk_i here (GCC: 20% faster than v as the counter) */
        run_block(E, 0);
        E->in_segment = E->seg_iv = 0;
        E->indent--;
        line(E, "}");
        line(E, "v_%s += seg, lin += seg;", v);
    }
    for (int i = 0; i < E->nmemo; i++) {
        line(E, "tk_r%d += seg;", i);
        line(E, "if (tk_r%d == tk_d%d) tk_r%d = 0, ++tk_q%d;", i, i, i, i);
    }
    E->indent--;
    line(E, "}");
    E->indent--;
    line(E, "}");
}

/* CPU lane tiles over E->ngroup whole rows of the group dim at once (the
 * rows of one run of the innermost dim, then the next G - 1): tiles of
 * step elements, then the row ends one element (times G) at a time. */
static void group_rows(emitter *E, int step) {
    const tk_opdecl *d = E->op->decl;
    const char *v = d->loop_vars[d->nloop - 1], *gv = d->loop_vars[E->gdim];
    int G = E->ngroup;
    line(E, "if (v_%s == 0 && v_%s <= n_%s - %d && (end - lin) / %d >= n_%s) {", v, gv, gv, G, G, v);
    E->indent++;
    line(E, "for (; v_%s <= n_%s - %d; v_%s += %d)", v, v, step, v, step);
    E->indent++;
    tile(E);
    E->indent--;
    line(E, "for (; v_%s < n_%s; ++v_%s) {", v, v, v);
    E->indent++;
    for (int g = 0; g < G; g++) {
        E->copy = E->gcopy = g;
        E->rcopy = 0;
        line(E, "{");
        E->indent++;
        block(E, d->body, d->nbody);
        E->indent--;
        line(E, "}");
    }
    E->copy = -1;
    E->gcopy = 0;
    E->indent--;
    line(E, "}");
    line(E, "lin += %d * n_%s;", G, v);
    line(E, "continue;");
    E->indent--;
    line(E, "}");
}

/* The incoming value of extreme accumulator `name` set aside before a
 * vectorised loop: tk_in_<name>, of a jammed copy tk_in_<name>_<copy>. */
static void saved_name(emitter *E, const char *name) {
    if (E->copy >= 0) tk_buf_printf(E->b, "tk_in_%s_%d", name, E->copy);
    else tk_buf_printf(E->b, "tk_in_%s", name);
}

/* CPU row loops: before an inner loop the plan vectorises (plan_rows.c),
 * the incoming values of its max and min accumulators set aside and the
 * accumulators set to their identity (so that the lanes' partial results
 * never hold a NaN and their combination is exact), then `#pragma omp
 * simd` with its reductions, those of jammed copies [c0, c1) (c0 == -1:
 * none) each its own; exp() prints as tk_vexpf inside. Returns 0,
 * printing nothing, for a loop that runs as written. */
int row_vec_open(emitter *E, const tk_stmt *loop, int c0, int c1) {
    static const char *const clause[] = {"+", "*", "max", "min"}, kinds[] = "+*Mm";
    const tk_row_vec *v = row_vec_find(E->plan, loop);
    if (!v) return 0;
    int saved = E->copy, cn = c0 < 0 ? c0 + 1 : c1;
    for (int c = c0; c < cn; c++)
        for (int j = 0; j < v->nred; j++) {
            if (v->red_op[j] != 'M' && v->red_op[j] != 'm') continue;
            const tk_local *l = &E->op->locals[v->red[j]];
            int mx = v->red_op[j] == 'M';
            E->copy = c;
            begin_line(E);
            tk_buf_printf(E->b, "const %s ", k_vctype[l->type]);
            saved_name(E, l->name);
            tk_buf_puts(E->b, " = ");
            local_name(E, l->name, v->red[j]);
            tk_buf_puts(E->b, ";\n");
            begin_line(E);
            local_name(E, l->name, v->red[j]);
            tk_buf_printf(E->b, " = %s;\n",
                          l->type == TK_V_INT ? (mx ? "INT64_MIN" : "INT64_MAX") : mx ? "-INFINITY" : "INFINITY");
        }
    begin_line(E);
    tk_buf_puts(E->b, "#pragma omp simd");
    for (int k = 0; k < 4; k++) {
        int n = 0;
        for (int c = c0; c < cn; c++)
            for (int j = 0; j < v->nred; j++) {
                if (v->red_op[j] != kinds[k]) continue;
                if (!n++) tk_buf_printf(E->b, " reduction(%s:", clause[k]);
                else tk_buf_puts(E->b, ", ");
                E->copy = c;
                local_name(E, E->op->locals[v->red[j]].name, v->red[j]);
            }
        if (n) tk_buf_puts(E->b, ")");
    }
    tk_buf_puts(E->b, "\n");
    E->copy = saved;
    E->vexp = 1;
    return 1;
}

/* After it: each max (min) accumulator is the max (min) of its incoming
 * value and the loop's, in the order the loop as written would take. */
void row_vec_close(emitter *E, const tk_stmt *loop, int c0, int c1) {
    static const char *const sfx[] = {"", "i", "i", "f", "d"};     /* ORDER tk_vtype */
    const tk_row_vec *v = row_vec_find(E->plan, loop);
    E->vexp = 0;
    int saved = E->copy, cn = c0 < 0 ? c0 + 1 : c1;
    for (int c = c0; c < cn; c++)
        for (int j = 0; v && j < v->nred; j++) {
            if (v->red_op[j] != 'M' && v->red_op[j] != 'm') continue;
            const tk_local *l = &E->op->locals[v->red[j]];
            E->copy = c;
            begin_line(E);
            local_name(E, l->name, v->red[j]);
            tk_buf_printf(E->b, " = tk_%s%s(", v->red_op[j] == 'M' ? "max" : "min", sfx[l->type]);
            saved_name(E, l->name);
            tk_buf_puts(E->b, ", ");
            local_name(E, l->name, v->red[j]);
            tk_buf_puts(E->b, ");\n");
        }
    E->copy = saved;
}

/* The end of a row loop's group of iterations (jammed copies, lanes
 * across): lin steps past the group's `step` iterations and the index
 * loop goes on; after the group's `if`, the body of one iteration for an
 * index no group starts at, and the index loop's close. */
static void group_end(emitter *E, const char *step) {
    line(E, "lin += %s;", step);
    line(E, "continue;");
    E->indent--;
    line(E, "}");
    block(E, E->op->decl->body, E->op->decl->nbody);
    line(E, "++lin;");
    E->indent--;
    line(E, "}");
}

/* CPU, a row loop jammed (plan_rows.c, plan_jam): J adjacent iterations
 * of the jammed variable (the innermost parallel one) in one row of it
 * and in the thread's range run as unroll-and-jam copies, their loops
 * shared where the bounds agree (one loop over every copy's statements,
 * vectorised along the row as planned) and cut into a common range and
 * per-copy ends where they move with the variable (attention's keys up to
 * t); the rest one iteration at a time. */
static void jammed_rows(emitter *E) {
    const tk_opdecl *d = E->op->decl;
    const tk_row_plan *R = &E->plan->rows;
    const char *v = d->loop_vars[R->jam_var];
    line(E, "for (tk_i64 lin = begin; lin < end;) {");
    E->indent++;
    decompose(E, 0);
    line(E, "if (end - lin >= %d && n_%s - v_%s >= %d) {", R->jam, v, v, R->jam);
    E->indent++;
    int gdim = E->gdim;
    E->gdim = R->jam_var;
    E->ncopies = R->jam;
    jam_block(E, d->body, d->nbody);
    E->copy = -1;
    E->ncopies = 1;
    E->gdim = gdim;
    char step[32];
    snprintf(step, sizeof step, "%d", R->jam);
    group_end(E, step);
}

/* CPU, a row loop: one iteration (a row, or a (b, c) pair) per index,
 * decomposed each time; the body walks the dims it owns. The element-wise
 * form planned across (plan_rows.c, plan_across) prints as one with lanes:
 * an element an iteration. */
static void cpu_row_loop(emitter *E) {
    const tk_row_plan *R = &E->plan->rows;
    if (R->jam) {
        jammed_rows(E);
        return;
    }
    if (!R->lanes) {
        line(E, "for (tk_i64 lin = begin; lin < end; ++lin) {");
        E->indent++;
        decompose(E, 0);
        if (R->parts) {
            line(E, "const tk_i64 tk_np = a->nparts > 1 ? a->nparts : 1, tk_pt = a->nparts > 1 ? a->part : 0;");
            parted_body(E);
        } else {
            block(E, E->op->decl->body, E->op->decl->nbody);
        }
        E->indent--;
        line(E, "}");
        return;
    }
    /* lanes across iterations (plan_rows.c, plan_lanes_across): a block of
     * tk_nl adjacent values of the innermost variable in one row of it (up
     * to V: what is left of the row and of the range), unit strides */
    const tk_opdecl *d = E->op->decl;
    const char *v = d->loop_vars[d->nloop - 1];
    int V = R->lanes;
    char cond[64];
    snprintf(cond, sizeof cond, "tk_nl >= %d", R->lanes_min);
    line(E, "for (tk_i64 lin = begin; lin < end;) {");
    E->indent++;
    decompose(E, 0);
    line(E, "const int tk_nl = (int)tk_mini(tk_mini(%d, n_%s - v_%s), end - lin);", V, v, v);
    unit_stride_test(E, cond);
    tk_buf_puts(E->b, " {\n");
    E->indent++;
    E->lanes = V;
    E->lane_n = "tk_nl";
    E->ngroup = E->nblocks = 1;
    E->gdim = d->nloop - 1;
    memcpy(E->arr, R->arr, sizeof E->arr);
    E->vexp = E->ftype == TK_V_F32;
    tile(E);
    E->vexp = 0;
    E->lanes = 0;
    E->lane_n = NULL;
    memset(E->arr, 0, sizeof E->arr);
    group_end(E, "tk_nl");
}

/* CPU: decompose once per run of the innermost dim, then walk it; bodies
 * with a top-level loop walk it ncopies elements at a time (unroll-and-jam). */
static void cpu_loop(emitter *E) {
    const tk_opdecl *d = E->op->decl;
    if (E->plan->row_loop || E->plan->across) {   /* (across: the element-wise form as lanes) */
        cpu_row_loop(E);
        return;
    }
    line(E, "for (tk_i64 lin = begin; lin < end;) {");
    E->indent++;
    decompose(E, 1);
    if (d->nloop > 0) {
        const char *v = d->loop_vars[d->nloop - 1];
        run_block(E, 1);
        if (!E->segmented)
            for (int i = 0; i < E->nmemo; i++) line(E, "tk_divmemo tk_dm%d = {0, 0, 0, 0, 0};", i);
        line(E, "const tk_i64 stop = end - lin < n_%s - v_%s ? end : lin + (n_%s - v_%s);", v, v, v, v);
        if (E->segmented) segments(E);
        if (E->lanes) {
            int G = E->ngroup, R = E->nblocks, step = E->lanes * E->nblocks;
            /* whole rows of G group rows, then of G / 2 (a batch of 4, or
             * the 4 rows a batch of 12 leaves: each w vector still feeds
             * 4 rows' FMAs), then single rows */
            for (int g = G; g > 1; g = g / 2 >= 4 ? g / 2 : 1) {
                E->ngroup = g;
                E->nblocks = lane_blocks(E, g);
                group_rows(E, E->lanes * E->nblocks);
            }
            E->ngroup = 1;
            /* single rows: with a group dim, tiles of as many lane blocks as
             * one row takes (their loads skew, see vx_skewed), then of the
             * group's R for what is left of the row */
            int R1 = lane_blocks(E, 1);
            if (G > 1 && R1 > R) {
                E->nblocks = R1;
                line(E, "for (; lin + %d <= stop; lin += %d, v_%s += %d)", E->lanes * R1, E->lanes * R1, v,
                     E->lanes * R1);
                E->indent++;
                tile(E);
                E->indent--;
            }
            E->nblocks = R;
            line(E, "for (; lin + %d <= stop; lin += %d, v_%s += %d)", step, step, v, step);
            E->indent++;
            tile(E);
            E->indent--;
            E->ngroup = G;
        } else if (E->ncopies > 1) {
            line(E, "for (; lin + %d <= stop; lin += %d, v_%s += %d) {", E->ncopies, E->ncopies, v, E->ncopies);
            E->indent++;
            jammed_body(E);
            E->indent--;
            line(E, "}");
        }
        line(E, "for (; lin < stop; ++lin, ++v_%s) {", v);
    } else {
        line(E, "for (const tk_i64 stop = lin + 1; lin < stop; ++lin) {");
    }
    E->indent++;
    run_block(E, 0);
    E->indent--;
    line(E, "}");
    E->indent--;
    line(E, "}");
}

static void stride_param(emitter *E, const tk_param *p, int slot, int arg) {
    (void)slot;
    (void)arg;
    tk_buf_printf(E->b, ", tk_i64 s_%s_%d", p->name, tk_explicit_dims(p) - 1);
}

static void stride_load(emitter *E, const tk_param *p, int slot, int arg) {
    (void)arg;
    line(E, "const tk_i64 s_%s_%d = a->t[%d].stride[a->t[%d].ndim - 1];", p->name, tk_explicit_dims(p) - 1,
         slot, slot);
}

void stride_cond(emitter *E, const tk_param *p, int slot, int arg) {
    (void)slot;
    (void)arg;
    tk_buf_printf(E->b, "%ss_%s_%d == 1", E->nconds++ ? " && " : "", p->name, tk_explicit_dims(p) - 1);
}

/* Prints `if (s_x_N == 1 && ...)` over the strided tensors' innermost
 * strides and then the condition extra (no newline); returns 0, printing
 * nothing, when there is none. */
int unit_stride_test(emitter *E, const char *extra) {
    size_t mark = E->b->len;
    begin_line(E);
    tk_buf_puts(E->b, "if (");
    size_t cond = E->b->len;
    E->nconds = 0;
    each_strided(E, stride_cond, 0);
    if (extra && extra[0]) tk_buf_printf(E->b, "%s%s", E->b->len == cond ? "" : " && ", extra);
    if (E->b->len == cond) {
        E->b->len = mark;
        E->b->p[mark] = 0;
        return 0;
    }
    tk_buf_puts(E->b, ")");
    return 1;
}

static void stride_arg(emitter *E, const tk_param *p, int slot, int unit) {
    (void)slot;
    if (unit) tk_buf_puts(E->b, ", 1");
    else tk_buf_printf(E->b, ", s_%s_%d", p->name, tk_explicit_dims(p) - 1);
}

/* One force-inlined body taking the innermost strides (wide: the plan for
 * 512-bit (1) or 256-bit (2) vectors, with explicit-vector loops and
 * several lane blocks). */
static void cpu_body(emitter *E, const char *suffix, int wide) {
    const char *name = E->op->kernel_names[E->variant];
    tk_buf_printf(E->b, "TK_BODY void %s%s%s(const tk_kargs *a, tk_i64 begin, tk_i64 end", name,
                  E->plain ? "_plain" : "", suffix);
    each_strided(E, stride_param, 0);
    tk_buf_puts(E->b, ") {\n");
    E->indent = 1;
    E->wide = wide;
    prologue(E);
    plan_apply(E, &E->plan->body[wide]);
    cpu_loop(E);
    E->indent = 0;
    tk_buf_puts(E->b, "}\n");
}

/* Calls body `suffix`: with literal unit strides when they are 1 (so the
 * innermost accesses vectorise), else with the strides; `strided` names
 * the body for the second case. */
static void stride_dispatch(emitter *E, const char *suffix, const char *strided) {
    const char *name = E->op->kernel_names[E->variant], *sfx = E->plain ? "_plain" : "";
    each_strided(E, stride_load, 0);
    if (!unit_stride_test(E, NULL)) {       /* no strided tensor: one call */
        line(E, "%s%s%s(a, begin, end);", name, sfx, suffix);
    } else {
        tk_buf_puts(E->b, "\n");
        E->indent++;
        begin_line(E);
        tk_buf_printf(E->b, "%s%s%s(a, begin, end", name, sfx, suffix);
        each_strided(E, stride_arg, 1);
        tk_buf_puts(E->b, ");\n");
        E->indent--;
        line(E, "else");
        E->indent++;
        begin_line(E);
        tk_buf_printf(E->b, "%s%s%s(a, begin, end", name, sfx, strided);
        each_strided(E, stride_arg, 0);
        tk_buf_puts(E->b, ");\n");
        E->indent--;
    }
}

/* A call of body `suffix` with unit (literal 1) or variable strides. */
static void body_call(emitter *E, const char *suffix, int unit) {
    begin_line(E);
    tk_buf_printf(E->b, "%s%s%s(a, begin, end", E->op->kernel_names[E->variant], E->plain ? "_plain" : "", suffix);
    each_strided(E, stride_arg, unit);
    tk_buf_puts(E->b, ");\n");
}

static void buf_move(tk_buf *to, tk_buf *from) {
    if (from->oom) to->oom = 1;
    else if (from->p) tk_buf_puts(to, from->p);
    free(from->p);
    memset(from, 0, sizeof *from);
}

/* `#if guard`: if (cond) the body of suffix sfx with unit strides, and
 * return. */
static void guarded_call(emitter *E, const char *guard, const char *cond, const char *sfx) {
    line(E, "#if %s", guard);
    line(E, "if (%s) {", cond);
    E->indent++;
    body_call(E, sfx, 1);
    line(E, "return;");
    E->indent--;
    line(E, "}");
    line(E, "#endif");
}

/* The entry without the run-time choice (TK_NO_CLONES, or no target
 * clones): the wide body where the compiler targets AVX-512 (kw), the mid
 * one where it targets AVX2 (km), for unit strides; else the narrow body. */
static void static_entry(emitter *E, int kw, int km) {
    const char *name = E->op->kernel_names[E->variant];
    line(E, "void %s%s;", name, E->tg->params);
    line(E, "void %s%s {", name, E->tg->params);
    E->indent = 1;
    each_strided(E, stride_load, 0);
    line(E, kw && km ? "#if defined(TK_WIDE_STATIC) || TK_VXH" : kw ? "#if defined(TK_WIDE_STATIC)" : "#if TK_VXH");
    int test = unit_stride_test(E, NULL);
    if (test) tk_buf_puts(E->b, " {\n");
    else line(E, "{");
    E->indent++;
    if (kw) guarded_call(E, "defined(TK_WIDE_STATIC)", "tk_env_narrow() == 0", "_wbody");
    if (km) guarded_call(E, "TK_VXH", "tk_env_narrow() < 2", "_mbody");
    E->indent--;
    line(E, "}");
    line(E, "#endif");
    body_call(E, "_body", 0);
    E->indent = 0;
    line(E, "}");
}

/* The CPU kernel: force-inlined bodies and an entry that picks one. The
 * narrow body (16-lane tiles in omp simd loops) is compiled per instruction
 * set (GCC target_clones); where its tiles have explicit-vector loops, a
 * wide body (512-bit vectors, several lane blocks, the loops outlined)
 * serves AVX-512 CPUs and a mid one (256-bit vectors, its own tile plan:
 * fewer accumulators for the 16 AVX2 registers) x86-64-v3 CPUs, both for
 * unit strides; the narrow body then serves the rest (baseline x86-64) and
 * strided calls. A kernel compiled for one CPU (plan->cpu) carries only the
 * bodies that CPU runs (plan->kept), and no run-time choice. */
static void cpu_kernel_entry(emitter *E);
void cpu_kernel(emitter *E) {
    cpu_kernel_entry(E);
    /* the mark of a kernel that runs its row loop in parts (kargs.part):
     * runtime/cc.c looks it up beside the kernel */
    if (E->plan->rows.parts && !E->plain) {
        const char *name = E->op->kernel_names[E->variant];
        tk_buf_printf(E->b, "extern const int %s_parts;\nconst int %s_parts = 1;\n", name, name);
    }
}

static void cpu_kernel_entry(emitter *E) {
    const char *name = E->op->kernel_names[E->variant];
    const char *sfx = E->plain ? "_plain" : "", *clones = E->plain ? "" : "TK_CPU_CLONES ";
    emitter init = *E;
    tk_buf *out = E->b, wpre = {0}, wbody = {0}, mpre = {0}, mbody = {0}, nbody = {0};
    int kw = E->plan->kept[TK_BODY_WIDE], km = E->plan->kept[TK_BODY_MID], any = E->plan->cpu == TK_CPU_ANY;
    if (kw) {
        E->pre = &wpre;
        E->b = &wbody;
        cpu_body(E, "_wbody", TK_BODY_WIDE);
        *E = init;
    }
    if (km) {
        E->pre = &mpre;
        E->b = &mbody;
        cpu_body(E, "_mbody", TK_BODY_MID);
    }
    *E = init;
    E->pre = out;
    E->b = &nbody;
    cpu_body(E, "_body", TK_BODY_NARROW);
    E->b = out;
    if (kw) {   /* GNU C vectors: only where TK_VXW (TK_VXH) */
        tk_buf_puts(out, "#if TK_VXW\n");
        buf_move(out, &wpre);
        buf_move(out, &wbody);
        tk_buf_puts(out, "#endif\n");
    }
    if (km) {
        tk_buf_puts(out, "#if TK_VXH\n");
        buf_move(out, &mpre);
        buf_move(out, &mbody);
        tk_buf_puts(out, "#endif\n");
    }
    free(wpre.p);
    free(wbody.p);
    free(mpre.p);
    free(mbody.p);
    buf_move(out, &nbody);
    E->indent = 0;
    if (!kw && !km) {
        tk_buf_printf(E->b, "%svoid %s%s%s;\n", clones, name, sfx, E->tg->params);
        tk_buf_printf(E->b, "%svoid %s%s%s {\n", clones, name, sfx, E->tg->params);
        E->indent = 1;
        stride_dispatch(E, "_body", "_body");
        E->indent = 0;
        tk_buf_puts(E->b, "}\n");
        return;
    }
    /* the explicit-vector bodies take unit strides only; the narrow body,
     * with the strides as variables (no unit-stride copy of it: AVX2 and
     * AVX-512 CPUs run the others then), strided calls and CPUs without
     * AVX2 */
    if (!any) {   /* one CPU: no run-time choice (TK_NO_CLONES) */
        static_entry(E, kw, km);
        return;
    }
    line(E, "#if TK_WIDE_DISPATCH");
    line(E, "static TK_WIDE_TARGET void %s_wide%s {", name, E->tg->params);
    E->indent = 1;
    body_call(E, "_wbody", 1);
    E->indent = 0;
    line(E, "}");
    line(E, "static TK_MID_TARGET void %s_mid%s {", name, E->tg->params);
    E->indent = 1;
    body_call(E, "_mbody", 1);
    E->indent = 0;
    line(E, "}");
    line(E, "static TK_NARROW_CLONES void %s_narrow%s {", name, E->tg->params);
    E->indent = 1;
    each_strided(E, stride_load, 0);
    body_call(E, "_body", 0);
    E->indent = 0;
    line(E, "}");
    line(E, "void %s%s;", name, E->tg->params);
    line(E, "void %s%s {", name, E->tg->params);
    E->indent = 1;
    each_strided(E, stride_load, 0);
    int test = unit_stride_test(E, NULL);
    if (test) tk_buf_puts(E->b, " {\n");
    else line(E, "{");
    E->indent++;
    line(E, "if (tk_cpu_wide()) {");
    line(E, "    %s_wide(a, begin, end);", name);
    line(E, "    return;");
    line(E, "}");
    line(E, "if (tk_cpu_mid()) {");
    line(E, "    %s_mid(a, begin, end);", name);
    line(E, "    return;");
    line(E, "}");
    E->indent--;
    line(E, "}");
    line(E, "%s_narrow(a, begin, end);", name);
    E->indent = 0;
    line(E, "}");
    line(E, "#else");
    static_entry(E, 1, 1);
    line(E, "#endif");
}
