/* emit_coop.c - the CUDA kernel of a row loop in its cooperative form
 * (plan_coop.c: schedule coop=S): S consecutive lanes of one warp share
 * each iteration, the plan's dealt loops spread over them, their
 * reductions combined by warp shuffles, the rest on every lane. */
#include <stdio.h>
#include <string.h>

#include "emit.h"

/* The plan's record of loop s when it is dealt over the lanes, else NULL. */
static const tk_coop_loop *dealt(const emitter *E, const tk_stmt *s) {
    for (int k = 0; k < E->plan->ncoop; k++)
        if (E->plan->coop_loops[k].loop == s) return &E->plan->coop_loops[k];
    return NULL;
}

/* Where the body reads outputs back: the lanes meet before and after a store. */
static void sync(emitter *E) {
    if (E->plan->coop_sync) line(E, "__syncwarp(tk_cmask);");
}

/* const r_<v>_end (and r_<v>_lo) of loop s, evaluated once (on every lane). */
static void bounds(emitter *E, const tk_stmt *s) {
    begin_line(E);
    tk_buf_printf(E->b, "const tk_i64 r_%s_end = ", s->name);
    expr(E, s->hi, TK_V_INT);
    tk_buf_puts(E->b, ";\n");
    if (!s->lo) return;
    begin_line(E);
    tk_buf_printf(E->b, "const tk_i64 r_%s_lo = ", s->name);
    expr(E, s->lo, TK_V_INT);
    tk_buf_puts(E->b, ";\n");
}

/* A line per reduction of cl of kind `which` (0: every kind): a sum prints
 * fmt (its two %s: the local's name), a max or min its shuffle step; with
 * broadcast, a float max or min takes lane 0's value instead. */
static void each_acc(emitter *E, const tk_coop_loop *cl, int which, const char *fmt, int broadcast) {
    static const char *const sfx[] = {"", "i", "i", "f", "d"};   /* ORDER tk_vtype */
    for (int r = 0; r < E->op->nlocals; r++) {
        int k = cl->acc[r];
        if (!k || (which && k != which)) continue;
        const tk_local *l = &E->op->locals[r];
        if (broadcast) {   /* lane 0's bits: max(-0, +0) and NaNs depend on the order */
            if (k != TK_COOP_SUM && l->type != TK_V_INT)
                line(E, "v_%s = __shfl_sync(tk_cmask, v_%s, 0, %d);", l->name, l->name, E->plan->coop);
            continue;
        }
        if (k == TK_COOP_SUM) line(E, fmt, l->name, l->name);
        else line(E, "v_%s = tk_%s%s(v_%s, __shfl_xor_sync(tk_cmask, v_%s, tk_o));", l->name,
                  k == TK_COOP_MAX ? "max" : "min", sfx[l->type], l->name, l->name);
    }
}

/* Loop s dealt over the lanes: lane tk_sub runs lo + tk_sub, lo + tk_sub + S,
 * ...; lane 0 carries the sums so far, the others start at 0 (a max or min
 * starts from the value so far on every lane); then the butterfly. */
static void dealt_loop(emitter *E, const tk_stmt *s, const tk_coop_loop *cl) {
    const int S = E->plan->coop;
    int nsum = 0, nred = 0;
    for (int r = 0; r < E->op->nlocals; r++) nsum += cl->acc[r] == TK_COOP_SUM, nred += cl->acc[r] != 0;
    line(E, "{");
    E->indent++;
    bounds(E, s);
    if (cl->stores) sync(E);
    if (nsum) {
        line(E, "if (tk_sub != 0) {");
        E->indent++;
        each_acc(E, cl, TK_COOP_SUM, "v_%s = 0;", 0);
        E->indent--;
        line(E, "}");
    }
    char lo[96] = "tk_sub";
    if (s->lo) snprintf(lo, sizeof lo, "r_%s_lo + tk_sub", s->name);
    line(E, "for (tk_i64 v_%s = %s; v_%s < r_%s_end; v_%s += %d) {", s->name, lo, s->name, s->name, s->name, S);
    E->indent++;
    block(E, s->body, s->nbody);
    E->indent--;
    line(E, "}");
    if (nred) {
        line(E, "#pragma unroll");
        line(E, "for (int tk_o = 1; tk_o < %d; tk_o *= 2) {   /* the lanes' partial results, pairwise */", S);
        E->indent++;
        each_acc(E, cl, 0, "v_%s += __shfl_xor_sync(tk_cmask, v_%s, tk_o);", 0);
        E->indent--;
        line(E, "}");
        each_acc(E, cl, 0, NULL, 1);
    }
    if (cl->stores) sync(E);
    E->indent--;
    line(E, "}");
}

static void coop_block(emitter *E, tk_stmt **body, int n);

/* A loop that is not dealt: every lane runs it (its inner loops may be). */
static void shared_loop(emitter *E, const tk_stmt *s) {
    line(E, "{");
    E->indent++;
    bounds(E, s);
    char lo[96] = "0";
    if (s->lo) snprintf(lo, sizeof lo, "r_%s_lo", s->name);
    line(E, "for (tk_i64 v_%s = %s; v_%s < r_%s_end; ++v_%s) {", s->name, lo, s->name, s->name, s->name);
    E->indent++;
    coop_block(E, s->body, s->nbody);
    E->indent--;
    line(E, "}");
    E->indent--;
    line(E, "}");
}

/* Statements outside the dealt loops: on every lane, stores by lane 0. */
static void coop_block(emitter *E, tk_stmt **body, int n) {
    for (int i = 0; i < n; i++) {
        const tk_stmt *s = body[i];
        const tk_coop_loop *cl;
        switch (s->kind) {
        case TK_S_FOR:
            if ((cl = dealt(E, s)) != NULL) dealt_loop(E, s, cl);
            else shared_loop(E, s);
            break;
        case TK_S_IF:
            begin_line(E);
            tk_buf_puts(E->b, "if (");
            expr(E, s->value, TK_V_BOOL);
            tk_buf_puts(E->b, ") {\n");
            E->indent++;
            coop_block(E, s->body, s->nbody);
            E->indent--;
            if (s->norelse) {
                line(E, "} else {");
                E->indent++;
                coop_block(E, s->orelse, s->norelse);
                E->indent--;
            }
            line(E, "}");
            break;
        case TK_S_STORE:
            sync(E);
            line(E, "if (tk_sub == 0) {");
            E->indent++;
            block(E, &body[i], 1);
            E->indent--;
            line(E, "}");
            sync(E);
            break;
        default:
            block(E, &body[i], 1);
            break;
        }
    }
}

/* The grid-stride loop over S lanes an iteration: numel * S threads (the
 * launcher's grid: per_thread is -S); the S lanes of an iteration are
 * consecutive and start at a multiple of S (blocks and the grid's step are
 * multiples of 32), so they run the loop the same number of times. */
void gpu_coop_loop(emitter *E) {
    const tk_opdecl *d = E->op->decl;
    const int S = E->plan->coop;
    int sh = 0;
    while ((1 << sh) < S) sh++;
    line(E, "const tk_i64 end = %snumel * %d;", E->tg->args, S);
    line(E, "const tk_i64 step = (tk_i64)gridDim.x * blockDim.x;");
    if (S == 32) line(E, "const unsigned tk_cmask = 0xffffffffu;   /* the lanes sharing an iteration */");
    else line(E, "const unsigned tk_cmask = 0x%xu << (threadIdx.x & %d);   /* the lanes sharing an iteration */",
              (1u << S) - 1, 32 - S);
    line(E, "(void)tk_cmask;");
    line(E, "for (tk_i64 tk_cl = (tk_i64)blockIdx.x * blockDim.x + threadIdx.x; tk_cl < end; tk_cl += step) {");
    E->indent++;
    line(E, "const tk_i64 lin = tk_cl >> %d;   /* the iteration */", sh);
    line(E, "const int tk_sub = (int)(tk_cl & %d);   /* this lane's place among its %d */", S - 1, S);
    decompose(E, 0);
    coop_block(E, d->body, d->nbody);
    E->indent--;
    line(E, "}");
}
