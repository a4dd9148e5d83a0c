/* autodiff_rows.c - 'backward auto' of a row loop (docs/autograd.md,
 * Row loops): `for r, _ in y` whose body is row-level statements on locals
 * (the row's statistics; reads and stores at the row's index) and inner
 * loops `for i in range(lo, hi)` that read tensors and store outputs at the
 * row's index with i on the owned dim, and change the row's locals as sums
 * (`s += e`, `s -= e`, `s = s + e`) or extremes (`m = max(m, e)`, min).
 * The element-wise form with such inner loops is the same with a virtual
 * owned dim after the loop's (ad.virt): the dim its inner loops read along.
 * An inner loop that changes a row's local otherwise (`s = s * a + x`), or
 * reads it as it runs, is a scan: autodiff_scan.c derives it.
 *
 * The derived op's iteration owns the same row and runs, in order:
 *  1. the forward's row-level statements as a tape (autodiff.c), each inner
 *     loop that sums or takes an extreme replayed without its stores (an FWD
 *     block; a loop that only sums into one local also sums that sum's
 *     derivatives by the row's values it reads, loopinfo.jac), and a pass
 *     counting each extreme's ties (with the next FWD block when it can);
 *  2. the reverse pass of the row's tape: at each inner loop's end (in
 *     reverse), a SCALARS block (none for a jac loop), the loop again with
 *     its own reverse pass, adding into the adjoints of the row's values it
 *     reads (its terms' share of the statistics' gradients); a sum passes
 *     its adjoint to its terms and to its value before the loop, an extreme
 *     to the values equal to it, split evenly;
 *  3. one GRADS loop over the owned dim: every inner loop's body again at
 *     each i (under `lo <= i < hi` when its range is not the whole dim), its
 *     reverse pass (the row's adjoints now complete), and each float tensor
 *     parameter's gradient stored once, at [row, i].
 * Nothing is kept between passes but the row's scalars: the backward reads
 * the inputs again, as the element-wise form's does. */
#include <stdlib.h>
#include <string.h>

#include "autodiff.h"

/* ---- blocks: the tapes of one inner loop's body ---------------------------- */

/* b: a block of row s, in mode, replaying loop li. */
void ad_block_init(ad *s, ad *b, int mode, int li) {
    memset(b, 0, sizeof *b);
    b->op = s->op;
    b->d = s->d;
    b->mem = s->mem;
    b->err = s->err;
    b->row = s;
    b->mode = mode;
    b->owned = s->owned;
    b->cur_loop = li;
    b->pre = ad_fmt(s, "%sb%d_", s->pre, s->nblocks++);
    b->inner = ad_fmt(s, "%si", s->pre);
    b->inner_src = li >= 0 ? s->loops[li].st->name : NULL;
    for (int i = 0; i < TK_MAX_TENSORS * 4; i++) b->read_val[i] = -1;
    for (int i = 0; i < TK_MAX_TENSORS; i++) b->out_val[i] = -1;
    b->rowref = tk_arena_alloc(s->mem, sizeof *b->rowref * (size_t)(s->nvals + 1));
    if (!b->rowref) {
        ad_oom(b);
        return;
    }
    for (int k = 0; k < s->nvals; k++) b->rowref[k] = -1;
    ad_block_index(s, b, b->inner);
}

void ad_block_index(ad *s, ad *b, const char *inner) {
    b->inner = inner;
    const char *ix = "";
    for (int j = 0; j < s->d->nloop + s->virt; j++)
        ix = ad_fmt(s, "%s%s%s", ix, j ? ", " : "", j == s->owned ? inner : s->d->loop_vars[j]);
    b->index = ix;
}

int ad_loop_full(const tk_stmt *st, const tk_expr *D) {
    const tk_expr *hi = st->hi;
    return D && (!st->lo || (st->lo->kind == TK_E_INT && st->lo->ival == 0)) && hi->kind == D->kind &&
           ((hi->kind == TK_E_NAME && strcmp(hi->name, D->name) == 0) || (hi->kind == TK_E_INT && hi->ival == D->ival));
}

/* Block b's live lines, each after a newline and indented as a loop's
 * body; NULL when no line is live. */
const char *ad_block_body(ad *b) {
    char *live = tk_arena_alloc(b->mem, (size_t)b->nlines + 1);
    if (!live) {
        ad_oom(b);
        return NULL;
    }
    ad_mark_live(b, live);
    const char *t = "";
    for (int i = 0; i < b->nlines; i++)
        if (live[i]) t = ad_fmt(b, "%s\n            %s", t, b->lines[i].text);
    return t[0] && !b->failed ? t : NULL;
}

/* Block b as one line of its row: "for <inner> in <range>:" and its body. */
static const char *block_text(ad *b, const char *range) {
    const char *t = ad_block_body(b);
    return t ? ad_fmt(b, "for %s in %s:%s", b->inner, range, t) : NULL;
}

/* Emits the row's pending pass (the ties of an extreme, counted) as a loop
 * of its own; with body (of a pass over range: the next loop's), as one loop. */
static void flush_pending(ad *s, const char *range, const char *body) {
    if (s->pending && (!body || strcmp(range, s->pending_range) != 0)) {
        ad_emit(s, -1, ad_fmt(s, "for %si in %s:%s", s->pre, s->pending_range, s->pending));
        s->pending = NULL;
    }
    if (body) {
        ad_emit(s, -1, ad_fmt(s, "for %si in %s:%s%s", s->pre, range, s->pending ? s->pending : "", body));
        s->pending = NULL;
    }
}

const char *ad_loop_range(ad *s, const loopinfo *L) {
    return ad_fmt(s, "range(%s, %s)", L->lo, L->hi);
}

int ad_row_name(ad *b, const char *name) {
    ad *s = b->row;
    const loopinfo *L = &s->loops[b->cur_loop];
    int i = L->nlocal - 1;
    while (i >= 0 && strcmp(L->locals[i].name, name) != 0) i--;
    if (i < 0) return -1;
    int rk = L->locals[i].val, a;
    if (L->scan && (a = ad_find_acc(L, name)) >= 0) rk = L->after[a];   /* the running value (AD_FWD) */
    if (b->rowref[rk] >= 0) return b->rowref[rk];
    atom always = {-1, NULL, 0};
    int k = ad_new_val(b, V_ROWREF, s->vals[rk].is_float, always, NULL);
    if (k < 0) return -1;
    b->vals[k].name = s->vals[rk].name;
    b->vals[k].row_val = rk;
    b->rowref[rk] = k;
    return k;
}

/* The accumulator of loop L that local name is, -1 if none. */
int ad_find_acc(const loopinfo *L, const char *name) {
    for (int a = 0; a < L->naccs; a++)
        if (strcmp(L->accs[a].name, name) == 0) return a;
    return -1;
}

/* The term of accumulator statement st: e of `s op= e`, `s = s + e`, `m = max(m, e)`. */
static const tk_expr *acc_term(const tk_stmt *st) {
    const tk_expr *v = st->value;
    if (st->op != TK_OPC_NONE) return v;
    if (v->kind == TK_E_BINARY) return v->args[1];
    return v->args[0]->kind == TK_E_NAME && strcmp(v->args[0]->name, st->name) == 0 ? v->args[1] : v->args[0];
}

void ad_row_acc(ad *b, const tk_stmt *st, atom g) {
    ad *s = b->row;
    const loopinfo *L = &s->loops[b->cur_loop];
    int a = ad_find_acc(L, st->name);
    if (a < 0) {   /* (ad_row_for checked every assignment) */
        ad_fail(b, st->loc, "'%s' is assigned in an inner loop", st->name);
        return;
    }
    if (L->scan) {
        ad_scan_assign(b, st, g, a);
        return;
    }
    int sign = st->op == TK_OPC_SUB ? -1 : 1;
    atom term = ad_flatten(b, acc_term(st), g);
    if (b->failed) return;
    const char *m = s->vals[L->after[a]].name;
    if (b->mode == AD_FWD && L->accs[a].kind == ACC_SUM) {
        if (!b->counting) ad_emit(b, -1, ad_fmt(b, "%s %s= %s", m, sign < 0 ? "-" : "+", term.text));
        if (!b->jacobian) return;   /* (a jacobian block keeps the term: its reverse pass starts there) */
    } else if (b->mode == AD_FWD) {
        if (b->counting)   /* (the count exists from the counting pass on) */
            ad_emit(b, -1, ad_fmt(b, "%s += 1.0 if %s == %s else 0.0", s->vals[L->accs[a].count].name,
                                  term.text, m));
        else
            ad_emit(b, -1, ad_fmt(b, "%s = %s(%s, %s)", m, L->accs[a].kind == ACC_MAX ? "max" : "min", m, term.text));
        return;
    }
    if (!ad_grow(b, (void **)&b->accs, b->naccs, &b->capaccs, sizeof *b->accs)) return;
    b->accs[b->naccs].e = term;
    b->accs[b->naccs].loop = b->cur_loop;
    b->accs[b->naccs].a = a;
    b->accs[b->naccs].sign = sign;
    b->accs[b->naccs].g = g;
    b->naccs++;
}

/* What value x (its text) of accumulator a of loop L gets of the adjoint D
 * of the accumulator's value after the loop: D (a sum), or, for max and
 * min, D split evenly among the values equal to the result (torch.amax's
 * rule), NULL when D is (no adjoint). */
static const char *acc_share(ad *s, const loopinfo *L, int a, const char *x, int sign) {
    const val *after = &s->vals[L->after[a]];
    if (!after->adj) return NULL;
    if (L->accs[a].kind == ACC_SUM) return sign < 0 ? ad_fmt(s, "(-%s)", after->adj) : after->adj;
    return ad_fmt(s, "(%s / %s if %s == %s else 0.0)", after->adj, s->vals[L->accs[a].count].name, x, after->name);
}

const char *ad_row_acc_term(ad *b, int i) {
    const loopinfo *L = &b->row->loops[b->accs[i].loop];
    return acc_share(b->row, L, b->accs[i].a, b->accs[i].e.text, b->accs[i].sign);
}

void ad_row_contrib(ad *b, val *target, atom g, int negate, const char *expr) {
    if (b->mode != AD_SCALARS && b->mode != AD_SCAN && !b->jacobian)
        return;   /* the gradients' loop: the row's adjoints are complete */
    ad *s = b->row;
    int rk = target->row_val;
    val *rv = &s->vals[rk];
    if (!rv->is_float) return;
    const char *term = !g.text ? expr : negate ? ad_fmt(b, "0.0 if %s else %s", g.text, expr)
                                               : ad_fmt(b, "%s if %s else 0.0", expr, g.text);
    if (b->jacobian) {   /* d sum / d row value, summed over the loop into a value of the row */
        loopinfo *L = &s->loops[b->cur_loop];
        if (!target->jac) {
            atom always = {-1, NULL, 0};
            int k = ad_new_val(s, V_TEMP, 1, always, NULL);
            if (k < 0 || !ad_grow(s, (void **)&L->jacs, L->njac, &L->capjac, sizeof *L->jacs)) return;
            L->jacs[L->njac].of = rk;
            L->jacs[L->njac++].sum = k;
            target->jac = 1 + k;
            ad_emit(s, 2 * k, ad_fmt(s, "%s = 0.0", s->vals[k].name));
        }
        ad_emit(b, -1, ad_fmt(b, "%s += %s", s->vals[target->jac - 1].name, term));
        return;
    }
    if (!rv->adj) {   /* declared at the row's level, before this block's line */
        rv->adj = ad_fmt(s, "%sd%d", s->pre, rk);
        rv->adj_key = 2 * rk + 1;
        ad_emit(s, rv->adj_key, ad_fmt(s, "%s = 0.0", rv->adj));
    }
    ad_emit(b, -1, ad_fmt(b, "%s += %s", rv->adj, term));
}

/* ---- the row's inner loops ------------------------------------------------- */

/* What accumulator statement st is (ACC_*), -1 if none: `s += e`, `s -= e`,
 * `s = s + e`, `m = max(m, e)` or `m = max(e, m)`, min alike. */
int ad_acc_kind(const tk_stmt *st) {
    const tk_expr *v = st->value;
    if (st->op == TK_OPC_ADD || st->op == TK_OPC_SUB) return ACC_SUM;
    if (st->op != TK_OPC_NONE || !v) return -1;
    if (v->kind == TK_E_BINARY && v->op == TK_OPC_ADD && v->args[0]->kind == TK_E_NAME &&
        strcmp(v->args[0]->name, st->name) == 0)
        return ACC_SUM;
    if (v->kind != TK_E_CALL || v->nargs != 2 || (strcmp(v->name, "max") != 0 && strcmp(v->name, "min") != 0))
        return -1;
    for (int i = 0; i < 2; i++)
        if (v->args[i]->kind == TK_E_NAME && strcmp(v->args[i]->name, st->name) == 0)
            return v->name[1] == 'a' ? ACC_MAX : ACC_MIN;
    return -1;
}

/* Whether expression e reads local name. */
static int reads_name(const tk_expr *e, const char *name) {
    if (!e) return 0;
    if (e->kind == TK_E_NAME && strcmp(e->name, name) == 0) return 1;
    for (int i = 0; i < e->nargs; i++)
        if (reads_name(e->args[i], name)) return 1;
    return 0;
}

/* Where statements body[0..n) (top: the loop's own level) read local name
 * other than as the running sum of an accumulator statement of it: that
 * statement, else NULL. */
const tk_stmt *ad_reads_running(tk_stmt *const *body, int n, const char *name, int top) {
    for (int i = 0; i < n; i++) {
        const tk_stmt *st = body[i];
        const tk_expr *v = st->value;
        if (top && st->kind == TK_S_ASSIGN && strcmp(st->name, name) == 0 && ad_acc_kind(st) >= 0)
            v = acc_term(st);   /* s = s + e, m = max(m, e): e */
        if (reads_name(v, name)) return st;
        for (int j = 0; j < st->nindex; j++)
            if (reads_name(st->index[j], name)) return st;
        if (ad_reads_running(st->body, st->nbody, name, 0) || ad_reads_running(st->orelse, st->norelse, name, 0))
            return st;
    }
    return NULL;
}

/* Records loop L's accumulators: the row's locals its body assigns, each
 * only at the loop's own level as a sum or an extreme (ad_acc_kind) and read
 * nowhere else in it (any other assignment makes the loop a scan,
 * ad_scan_find); an error for a local both summed and an extreme. */
static void find_accs(ad *s, loopinfo *L, tk_stmt *const *body, int n) {
    for (int i = 0; i < n && !s->failed; i++) {
        const tk_stmt *st = body[i];
        if (st->kind != TK_S_ASSIGN || ad_find_local(s, st->name) < 0) continue;
        int kind = ad_acc_kind(st);
        int have = ad_find_acc(L, st->name);
        if (have >= 0 && L->accs[have].kind != kind) {   /* (one of the two is the sum) */
            int extreme = L->accs[have].kind == ACC_SUM ? kind : L->accs[have].kind;
            ad_fail(s, st->loc, "'%s' is both summed and a %s in the inner loop: write the backward ops of this op",
                    st->name, extreme == ACC_MAX ? "max" : "min");
            return;
        }
        if (have >= 0) continue;
        if (!ad_grow(s, (void **)&L->accs, L->naccs, &L->capaccs, sizeof *L->accs)) return;
        memset(&L->accs[L->naccs], 0, sizeof L->accs[L->naccs]);
        L->accs[L->naccs].name = st->name;
        L->accs[L->naccs].kind = kind;
        L->accs[L->naccs].count = -1;
        L->naccs++;
    }
}

/* Marks in stored[] (per output: the loop that stores it, -1) the outputs
 * body[0..n) of loop li stores; an output two inner loops store is an error. */
static void find_stores(ad *s, int *stored, tk_stmt *const *body, int n, int li) {
    for (int i = 0; i < n && !s->failed; i++) {
        const tk_stmt *st = body[i];
        find_stores(s, stored, st->body, st->nbody, li);
        find_stores(s, stored, st->orelse, st->norelse, li);
        if (st->kind != TK_S_STORE || st->ref < 0 || st->ref >= TK_MAX_TENSORS) continue;
        if (s->out_val[st->ref] >= 0)
            ad_fail(s, st->loc, "'%s' is stored both in an inner loop and outside: it differentiates an output "
                    "stored in one inner loop or at the row's level; write the backward ops of this op",
                    s->d->outputs[st->ref].name);
        else if (stored[st->ref] >= 0 && stored[st->ref] != li)
            ad_fail(s, st->loc, "'%s' is stored in two inner loops (the second reads or overwrites the first's "
                    "values): it differentiates an output stored in one inner loop; write the backward ops of "
                    "this op", s->d->outputs[st->ref].name);
        stored[st->ref] = li;
    }
}

/* The loop output's owned dim (the expression; virt: the dim the inner
 * loops read along, NULL until a read names it). */
const tk_expr *ad_owned_dim(const ad *s) {
    if (s->virt) return s->vdim;
    const tk_param *lo = &s->d->outputs[s->op->loop_out];
    int batch = lo->ndims > 0 && lo->dims[0]->kind == TK_E_ELLIPSIS;
    return lo->dims[batch + s->owned];
}

void ad_row_for(ad *s, const tk_stmt *st, atom g) {
    if (g.text) {
        ad_fail(s, st->loc, "an inner loop under an 'if': it differentiates inner loops at the row's own level; "
                "write the backward ops of this op");
        return;
    }
    if (!ad_grow(s, (void **)&s->loops, s->nloops, &s->caploops, sizeof *s->loops)) return;
    int li = s->nloops++;
    loopinfo *L = &s->loops[li];
    memset(L, 0, sizeof *L);
    L->st = st;
    L->lo = st->lo ? ad_flatten(s, st->lo, g).text : "0";
    L->hi = ad_flatten(s, st->hi, g).text;
    L->nlocal = s->nlocal;
    L->locals = tk_arena_alloc(s->mem, sizeof *L->locals * (size_t)(s->nlocal + 1));
    if (!L->locals) {
        ad_oom(s);
        return;
    }
    if (s->nlocal) memcpy(L->locals, s->locals, sizeof *L->locals * (size_t)s->nlocal);
    if (li > 0 && s->loops[0].scan) {
        ad_fail(s, st->loc, "an inner loop after a scan: it differentiates a scan that is the row's only inner "
                "loop; write the backward ops of this op");
        return;
    }
    if (!ad_scan_find(s, li) && !s->failed) find_accs(s, L, st->body, st->nbody);
    find_stores(s, s->store_loop, st->body, st->nbody, li);
    if (s->failed) return;
    L->after = tk_arena_alloc(s->mem, sizeof *L->after * (size_t)(L->naccs + 1));
    if (!L->after) {
        ad_oom(s);
        return;
    }
    atom always = {-1, NULL, 0};
    for (int a = 0; a < L->naccs; a++) {   /* the sums start from the local's value before the loop */
        int before = s->locals[ad_find_local(s, L->accs[a].name)].val;
        int k = ad_new_val(s, V_LOOP, s->vals[before].is_float, always, L->accs[a].name);
        if (k < 0) return;
        s->vals[k].loop = li;
        s->vals[k].acc = a;
        s->vals[k].prev = before;
        L->after[a] = k;
        ad_emit(s, 2 * k, ad_fmt(s, "%s = %s", s->vals[k].name, s->vals[before].name));
    }
    int stores = 0;
    for (int o = 0; o < TK_MAX_TENSORS; o++) stores |= s->store_loop[o] == li;
    L->jac = !stores && L->naccs == 1 && L->accs[0].kind == ACC_SUM;
    if (L->scan) {
        ad_scan_forward(s, li);
    } else if (L->naccs) {   /* the forward's sums, without its stores */
        ad b;
        ad_block_init(s, &b, AD_FWD, li);
        b.jacobian = L->jac;
        if (!b.failed) ad_walk(&b, st->body, st->nbody, always);
        for (int i = 0; i < b.naccs && !b.failed; i++)   /* d sum: each term's derivatives */
            ad_contrib(&b, b.accs[i].e, b.accs[i].g, 0, b.accs[i].sign < 0 ? "(-1.0)" : "1.0");
        if (L->jac && !b.failed) ad_reverse_values(&b);
        const char *t = b.failed ? NULL : ad_block_body(&b);
        if (t) flush_pending(s, ad_loop_range(s, L), t);   /* (with the last loop's count, over the same range) */
    }
    int extremes = 0;
    for (int a = 0; a < L->naccs; a++) {   /* max, min: how many values equal the result (ties share it) */
        if (L->accs[a].kind != ACC_MAX && L->accs[a].kind != ACC_MIN) continue;
        int c = ad_new_val(s, V_TEMP, 1, always, NULL);
        if (c < 0) return;
        L->accs[a].count = c;
        int before = s->vals[L->after[a]].prev;
        ad_emit(s, 2 * c, ad_fmt(s, "%s = 1.0 if %s == %s else 0.0", s->vals[c].name, s->vals[before].name,
                                 s->vals[L->after[a]].name));
        extremes = 1;
    }
    if (extremes) {   /* a pass of its own, or with the next loop's forward pass */
        ad b;
        ad_block_init(s, &b, AD_FWD, li);
        b.counting = 1;
        if (!b.failed) ad_walk(&b, st->body, st->nbody, always);
        const char *t = b.failed ? NULL : ad_block_body(&b);
        flush_pending(s, "", NULL);
        s->pending = t;
        s->pending_range = ad_loop_range(s, L);
    }
    for (int a = 0; a < L->naccs; a++) ad_set_local(s, L->accs[a].name, L->after[a]);
    int end = ad_new_val(s, V_LOOP, 0, always, NULL);
    if (end < 0) return;
    s->vals[end].loop = li;
    s->vals[end].acc = -1;
}

/* Loop li's share of the adjoints of the row's values it reads: its body
 * again, its reverse pass from its stores' incoming gradients and its sums'
 * adjoints, each adjoint of a row's value a sum over the loop. */
static void scalars_block(ad *s, int li) {
    ad b;
    ad_block_init(s, &b, AD_SCALARS, li);
    atom always = {-1, NULL, 0};
    if (!b.failed) ad_walk(&b, s->loops[li].st->body, s->loops[li].st->nbody, always);
    if (!b.failed) ad_reverse_values(&b);
    const char *t = b.failed ? NULL : block_text(&b, ad_loop_range(s, &s->loops[li]));
    if (t) ad_emit(s, -1, t);
}

/* The gradients: one loop over the owned dim, every inner loop's body and
 * reverse pass at each i (guarded by its range), then the stores. */
static void grads_block(ad *s) {
    ad b;
    ad_block_init(s, &b, AD_GRADS, -1);
    atom always = {-1, NULL, 0};
    const tk_expr *D = ad_owned_dim(s);
    if (!D) {
        ad_fail(s, s->d->loop_loc, "its inner loops read no tensor: there is no dim along the row to "
                "differentiate; write the backward ops of this op");
        return;
    }
    for (int li = 0; li < s->nloops && !b.failed; li++) {
        loopinfo *L = &s->loops[li];
        L->full = ad_loop_full(L->st, D);
        b.cur_loop = li;
        b.inner_src = L->st->name;
        b.nlocal = 0;   /* each loop's own locals */
        atom g = always;
        if (!L->full) {
            int k = ad_new_val(&b, V_TEMP, 0, always, NULL);
            if (k < 0) return;
            ad_emit(&b, 2 * k, strcmp(L->lo, "0") == 0
                                   ? ad_fmt(&b, "%s = %s < %s", b.vals[k].name, b.inner, L->hi)
                                   : ad_fmt(&b, "%s = %s >= %s and %s < %s", b.vals[k].name, b.inner, L->lo,
                                            b.inner, L->hi));
            g = ad_val_atom(&b, k);
        }
        ad_walk(&b, L->st->body, L->st->nbody, g);
    }
    if (b.failed) return;
    ad_reverse_values(&b);
    ad_store_grads(&b);
    int any = 0;
    for (int p = 0; p < s->d->nparams; p++) {
        s->block_read[p] = b.read_val[p] >= 0;
        any |= s->block_read[p];
        if (s->block_read[p] && s->read_val[p] >= 0) {
            ad_fail(s, s->d->params[p].loc, "'%s' is read both in an inner loop and at the row's level: write the "
                    "backward ops of this op", s->d->params[p].name);
            return;
        }
    }
    if (!any) {
        ad_fail(s, s->d->loop_loc, "its inner loops read no float tensor: there is nothing along the row to "
                "differentiate; write the backward ops of this op");
        return;
    }
    const char *t = block_text(&b, ad_fmt(s, "range(%s)", ad_expr_str(s, D)));
    if (t) ad_emit(s, -1, t);
}

void ad_rows(ad *s) {
    atom always = {-1, NULL, 0};
    for (int i = 0; i < TK_MAX_TENSORS; i++) s->out_val[i] = s->store_loop[i] = -1;   /* stores: the row's, loops' */
    ad_walk(s, s->d->body, s->d->nbody, always);
    flush_pending(s, "", NULL);
    for (int o = 0; o < s->d->nreturns && !s->failed; o++) {   /* the incoming gradients of the row's stores */
        int k = s->out_val[o];
        if (k < 0) continue;
        s->vals[k].adj = ad_fmt(s, "%sd%d", s->pre, k);
        s->vals[k].adj_key = 2 * k + 1;
        ad_emit(s, 2 * k + 1, ad_fmt(s, "%s = float(grad_%s[%s])", s->vals[k].adj, s->d->outputs[o].name,
                                     ad_index(s, &s->d->outputs[o])));
    }
    for (int k = s->nvals - 1; k >= 0 && !s->failed; k--) {
        const val *v = &s->vals[k];
        if (v->kind == V_LOOP && s->loops[v->loop].scan) {   /* its reverse pass; the initial values' adjoints */
            const acc *A = v->acc >= 0 ? &s->loops[v->loop].accs[v->acc] : NULL;
            if (!A) ad_scan_reverse(s, v->loop);
            else if (A->carrier) ad_contrib(s, ad_val_atom(s, v->prev), always, 0, A->carrier);
        } else if (v->kind == V_LOOP && v->acc < 0 && s->loops[v->loop].jac) {   /* its sum's derivatives, summed */
            const loopinfo *L = &s->loops[v->loop];
            const char *D = s->vals[L->after[0]].adj;
            for (int j = 0; j < L->njac && D; j++)
                ad_contrib(s, ad_val_atom(s, L->jacs[j].of), always, 0,
                           ad_fmt(s, "(%s * %s)", D, s->vals[L->jacs[j].sum].name));
        } else if (v->kind == V_LOOP && v->acc < 0) {
            scalars_block(s, v->loop);
        }
        else if (v->kind == V_LOOP && v->adj) {   /* the value before the loop: its share */
            const char *t = acc_share(s, &s->loops[v->loop], v->acc, s->vals[v->prev].name, 1);
            if (t) ad_contrib(s, ad_val_atom(s, v->prev), always, 0, t);
        } else if (v->adj) {
            ad_partials(s, k);
        }
    }
    if (!s->failed && !(s->nloops && s->loops[0].scan)) grads_block(s);   /* (a scan's reverse pass stores them) */
    const char *row = "";   /* the gradients of what the row reads outside its inner loops */
    for (int j = 0; j < s->d->nloop; j++)
        if (j != s->owned) row = ad_fmt(s, "%s%s%s", row, row[0] ? ", " : "", s->d->loop_vars[j]);
    for (int p = 0; p < s->d->nparams && !s->failed; p++)
        if (s->read_val[p] >= 0) {
            const char *adj = s->vals[s->read_val[p]].adj;
            ad_emit(s, -1, ad_fmt(s, "grad_%s[%s] = %s", s->d->params[p].name, row, adj ? adj : "0.0"));
        }
}
