/* autodiff_scan.c - 'backward auto' of a scan (docs/autograd.md, Scans): a
 * row loop's inner loop over the whole owned dim that carries row locals
 * from one step to the next by any expression and may read them as they
 * run: `s += x[r, t]; y[r, t] = s` (a prefix sum), `h = h * a[r, t] + x[r, t]`
 * (a linear recurrence), WKV's state. The scan is the row's only inner loop;
 * row-level statements may come before it (the initial values) and after it
 * (reading the final ones).
 *
 * The derived op's iteration owns the same row and runs:
 *  1. the row's tape (autodiff_rows.c) and the scan again without its
 *     stores, each carried local's value as a step starts kept in a scratch
 *     of the loop's shape (one a carried local: `scratch ads0: float[R, T]`);
 *  2. the row's reverse pass down to the scan, then the scan backwards, step
 *     t = T - 1 down to 0: it reads the values its carried locals started
 *     with, replays its body (a tape), and runs the body's reverse pass from
 *     its stores' incoming gradients and the carried locals' adjoints after
 *     the step (a local each, the carrier, which the step leaves holding the
 *     adjoint of the value it started with); the step stores the gradients
 *     of the tensors it reads at its index and adds into the adjoints of the
 *     row's values it reads;
 *  3. the carriers, now the adjoints of the initial values, into the rest of
 *     the row's reverse pass.
 * Memory: the scratch (the loop's output's size, once a carried local);
 * time: two passes over the row and the row's statements. */
#include <string.h>

#include "autodiff.h"

/* Whether body[0..n) (top: the loop's own level) assigns a row's local other
 * than as a sum or an extreme at the loop's level that nothing else reads:
 * what makes loop L a scan. */
static int needs_scan(ad *s, const loopinfo *L, tk_stmt *const *body, int n, int top) {
    for (int i = 0; i < n; i++) {
        const tk_stmt *st = body[i];
        if (st->kind == TK_S_IF &&
            (needs_scan(s, L, st->body, st->nbody, 0) || needs_scan(s, L, st->orelse, st->norelse, 0)))
            return 1;
        if (st->kind != TK_S_ASSIGN || ad_find_local(s, st->name) < 0) continue;
        if (!top || ad_acc_kind(st) < 0 || ad_reads_running(L->st->body, L->st->nbody, st->name, 1)) return 1;
    }
    return 0;
}

/* Records as loop L's accumulators (ACC_SCAN) every row's local body[0..n)
 * assigns; an error for one that is not a float. */
static void find_carried(ad *s, loopinfo *L, tk_stmt *const *body, int n) {
    for (int i = 0; i < n && !s->failed; i++) {
        const tk_stmt *st = body[i];
        if (st->kind == TK_S_IF) {
            find_carried(s, L, st->body, st->nbody);
            find_carried(s, L, st->orelse, st->norelse);
        }
        if (st->kind != TK_S_ASSIGN || ad_find_local(s, st->name) < 0 || ad_find_acc(L, st->name) >= 0) continue;
        if (!ad_is_float_type(s->op->locals[st->ref].type)) {
            ad_fail(s, st->loc, "'%s' is not a float and the scan carries it from step to step: it differentiates "
                    "scans that carry floats; write the backward ops of this op", st->name);
            return;
        }
        if (!ad_grow(s, (void **)&L->accs, L->naccs, &L->capaccs, sizeof *L->accs)) return;
        memset(&L->accs[L->naccs], 0, sizeof L->accs[L->naccs]);
        L->accs[L->naccs].name = st->name;
        L->accs[L->naccs].kind = ACC_SCAN;
        L->accs[L->naccs].count = -1;
        L->naccs++;
    }
}

int ad_scan_find(ad *s, int li) {
    loopinfo *L = &s->loops[li];
    const tk_stmt *st = L->st;
    if (!needs_scan(s, L, st->body, st->nbody, 1)) return 0;
    const tk_expr *D = ad_owned_dim(s);
    int full = !s->virt && ad_loop_full(st, D);
    if (s->virt)
        ad_fail(s, st->loc, "a scan in the element-wise form: it differentiates scans in row loops (`for r, _ in "
                "y`, the loop owning the dim the scan walks); write the backward ops of this op");
    else if (li > 0)
        ad_fail(s, st->loc, "a scan after another inner loop: it differentiates a scan that is the row's only inner "
                "loop; write the backward ops of this op");
    else if (!full)
        ad_fail(s, st->loc, "a scan over part of the row: it differentiates scans over the whole owned dim "
                "(`range(%s)`); write the backward ops of this op", D ? ad_expr_str(s, D) : "?");
    if (s->failed) return 0;
    find_carried(s, L, st->body, st->nbody);
    L->scan = 1;
    L->full = 1;
    for (int a = 0; a < L->naccs && !s->failed; a++) {
        L->accs[a].scratch = ad_fmt(s, "%ss%d", s->pre, s->nscratch);
        L->accs[a].carrier = ad_fmt(s, "%sa%d", s->pre, s->nscratch);
        if (!ad_grow(s, (void **)&s->scratch, s->nscratch, &s->capscratch, sizeof *s->scratch)) return 0;
        s->scratch[s->nscratch++] = L->accs[a].scratch;
    }
    return !s->failed;
}

void ad_scan_forward(ad *s, int li) {
    const loopinfo *L = &s->loops[li];
    ad b;
    ad_block_init(s, &b, AD_FWD, li);
    for (int a = 0; a < L->naccs && !b.failed; a++)   /* the value each step starts with */
        ad_emit(&b, -1, ad_fmt(&b, "%s[%s] = %s", L->accs[a].scratch, b.index, s->vals[L->after[a]].name));
    atom always = {-1, NULL, 0};
    if (!b.failed) ad_walk(&b, L->st->body, L->st->nbody, always);
    const char *t = b.failed ? NULL : ad_block_body(&b);
    if (t) ad_emit(s, -1, ad_fmt(s, "for %si in %s:%s", s->pre, ad_loop_range(s, L), t));
}

void ad_scan_assign(ad *b, const tk_stmt *st, atom g, int a) {
    const ad *s = b->row;
    const char *run = s->vals[s->loops[b->cur_loop].after[a]].name;   /* (reads of it: ROWREFs to it) */
    atom r = ad_flatten(b, st->value, g);
    if (b->failed) return;
    const char *v = st->op == TK_OPC_NONE ? r.text : ad_fmt(b, "%s %s %s", run, tk_opc_text(st->op), r.text);
    ad_emit(b, -1, g.text ? ad_fmt(b, "%s = %s if %s else %s", run, v, g.text, run) : ad_fmt(b, "%s = %s", run, v));
}

/* Block b's gradients, stored at the step's index; an error for a tensor the
 * row also reads outside the scan. */
static void store_grads(ad *s, ad *b) {
    ad_store_grads(b);
    for (int p = 0; p < s->d->nparams && !s->failed; p++) {
        s->block_read[p] = b->read_val[p] >= 0;
        if (s->block_read[p] && s->read_val[p] >= 0)
            ad_fail(s, s->d->params[p].loc, "'%s' is read both in the scan and at the row's level: write the "
                    "backward ops of this op", s->d->params[p].name);
    }
}

void ad_scan_reverse(ad *s, int li) {
    const loopinfo *L = &s->loops[li];
    const char *D = ad_expr_str(s, ad_owned_dim(s));
    for (int a = 0; a < L->naccs; a++) {   /* the adjoints of the final values */
        const val *after = &s->vals[L->after[a]];
        ad_emit(s, -1, ad_fmt(s, "%s = %s", L->accs[a].carrier, after->adj ? after->adj : "0.0"));
    }
    ad b;
    ad_block_init(s, &b, AD_SCAN, li);
    if (b.failed) return;
    ad_block_index(s, &b, ad_fmt(s, "%st", s->pre));   /* the step, t = D - 1 - j: a local (the loop's is j) */
    ad_emit(&b, -1, ad_fmt(&b, "%s = %s - 1 - %sj", b.inner, D, s->pre));
    atom always = {-1, NULL, 0};
    int start[64];
    for (int a = 0; a < L->naccs && a < 64 && !b.failed; a++) {   /* the values the step starts with */
        int k = ad_new_val(&b, V_TEMP, 1, always, NULL);
        if (k < 0) return;
        ad_emit(&b, 2 * k, ad_fmt(&b, "%s = %s[%s]", b.vals[k].name, L->accs[a].scratch, b.index));
        ad_set_local(&b, L->accs[a].name, k);
        start[a] = k;
    }
    if (L->naccs > 64) ad_fail(s, L->st->loc, "the scan carries more than 64 locals");
    if (!b.failed) ad_walk(&b, L->st->body, L->st->nbody, always);
    for (int a = 0; a < L->naccs && !b.failed; a++) {   /* the step's last values: the carriers' adjoints */
        int k = b.locals[ad_find_local(&b, L->accs[a].name)].val;
        b.vals[k].adj = L->accs[a].carrier;
        b.vals[k].adj_key = -1;
    }
    if (!b.failed) ad_reverse_values(&b);
    for (int a = 0; a < L->naccs && !b.failed; a++) {   /* ... left holding the adjoints of the step's start */
        const char *d = b.vals[start[a]].adj;
        if (!d || strcmp(d, L->accs[a].carrier) != 0)
            ad_emit(&b, -1, ad_fmt(&b, "%s = %s", L->accs[a].carrier, d ? d : "0.0"));
    }
    if (!b.failed) store_grads(s, &b);
    const char *t = b.failed ? NULL : ad_block_body(&b);
    if (t) ad_emit(s, -1, ad_fmt(s, "for %sj in range(%s):%s", s->pre, D, t));
}
