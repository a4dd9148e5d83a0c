/* reads.c - the checker's annotations of an op's reads, made once after its
 * body type-checks in every variant: which reads every iteration makes
 * (tk_op.read_always, for empty inputs) and which read indices depend on a
 * tensor's values (tk_expr.data_index, gathers: checked on the CPU); and
 * whether an op reads a tensor parameter's elements at all (tk_op_param_read). */
#include <string.h>

#include "core.h"

/* ---- reads made in every iteration ------------------------------------------ */

/* Calls f(ctx, read) for every tensor read evaluating e always makes:
 * every part of e is evaluated except the arms of a conditional expression
 * and the right side of and/or. */
static void each_read_always(const tk_expr *e, void (*f)(void *, const tk_expr *), void *ctx) {
    if (!e) return;
    if (e->kind == TK_E_COND) {
        each_read_always(e->args[1], f, ctx);
        return;
    }
    if (e->kind == TK_E_BINARY && (e->op == TK_OPC_AND || e->op == TK_OPC_OR)) {
        each_read_always(e->args[0], f, ctx);
        return;
    }
    if (e->kind == TK_E_INDEX) f(ctx, e);
    for (int i = 0; i < e->nargs; i++) each_read_always(e->args[i], f, ctx);
}

/* Records read e in op->read_always when it is its tensor's first. */
static void note_read_always(void *ctx, const tk_expr *e) {
    tk_op *op = ctx;
    int idx;
    if (tk_resolve_header(op, e->name, &idx) == TK_SYM_TENSOR && op->read_always[idx].line == 0)
        op->read_always[idx] = e->loc;
}

static void mark_reads_always(tk_op *op, const tk_expr *e) { each_read_always(e, note_read_always, op); }

/* Fills op->read_always from the top-level statements of the loop body:
 * each runs in every iteration (the language has no break, continue or
 * return), so its expressions are evaluated there, except the bodies of
 * its `if` and `for` (an `if`'s condition and a `for`'s bounds are). */
void tk_find_reads_always(tk_op *op) {
    const tk_opdecl *d = op->decl;
    memset(op->read_always, 0, sizeof op->read_always);
    for (int i = 0; i < d->nbody; i++) {
        const tk_stmt *s = d->body[i];
        for (int k = 0; k < s->nindex; k++) mark_reads_always(op, s->index[k]);
        mark_reads_always(op, s->value);
        mark_reads_always(op, s->lo);
        mark_reads_always(op, s->hi);
    }
}

/* ---- data-dependent reads ------------------------------------------------
 * A read whose index depends on a tensor's values (a gather, `table[idx[i],
 * j]`) can be out of range whatever the shapes: the CPU kernel checks those
 * indices at run time (docs/spec.md, Bounds). Syntactic and conservative:
 * a local is data-dependent when any assignment to it (by name) has a value
 * that reads a tensor or a data-dependent local, or runs under a condition
 * or in a loop range that does; an inner loop's variable when its range
 * does. Int parameters are not data: a caller's offset (x[i + k]) is not
 * checked (docs/spec.md, Bounds). */
typedef struct taint {
    const char *names[TK_MAX_LOCALS];
    int n;
} taint;

static int tainted(const taint *t, const char *name) {
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->names[i], name) == 0) return 1;
    return 0;
}

/* Whether e reads a tensor or a data-dependent local. */
static int has_data(const taint *t, const tk_expr *e) {
    if (!e) return 0;
    if (e->kind == TK_E_INDEX) return 1;
    if (e->kind == TK_E_NAME && tainted(t, e->name)) return 1;
    for (int i = 0; i < e->nargs; i++)
        if (has_data(t, e->args[i])) return 1;
    return 0;
}

/* One pass of the taint over body; returns whether it added a name. ctx:
 * the block runs under a condition or in a loop whose bounds depend on
 * data, so every assignment in it does too (k = 0; for j in range(idx[n]):
 * k += 1 makes k == idx[n]; so does `if idx[n] > j: k = j + 1`). */
static int taint_block(taint *t, tk_stmt *const *body, int n, int ctx) {
    int grew = 0;
    for (int k = 0; k < n; k++) {
        const tk_stmt *s = body[k];
        int inner = ctx;   /* the context of s's blocks */
        int data = 0;
        if (s->kind == TK_S_ASSIGN) data = ctx || has_data(t, s->value);
        if (s->kind == TK_S_FOR) data = inner = ctx || has_data(t, s->lo) || has_data(t, s->hi);
        if (s->kind == TK_S_IF) inner = ctx || has_data(t, s->value);
        if (data && !tainted(t, s->name) && t->n < TK_MAX_LOCALS) {
            t->names[t->n++] = s->name;
            grew = 1;
        }
        grew |= taint_block(t, s->body, s->nbody, inner);
        grew |= taint_block(t, s->orelse, s->norelse, inner);
    }
    return grew;
}

/* Calls f(e, arg) on each expression a statement of body evaluates (its
 * value, range bounds and store indices; into nested blocks), stopping at
 * the first nonzero answer, which it returns. */
static int walk_exprs(tk_stmt *const *body, int n, int (*f)(tk_expr *e, void *arg), void *arg) {
    for (int k = 0; k < n; k++) {
        tk_stmt *s = body[k];
        int r = (s->value && f(s->value, arg)) || (s->lo && f(s->lo, arg)) || (s->hi && f(s->hi, arg));
        for (int i = 0; !r && i < s->nindex; i++) r = f(s->index[i], arg);
        if (r || walk_exprs(s->body, s->nbody, f, arg) || walk_exprs(s->orelse, s->norelse, f, arg)) return 1;
    }
    return 0;
}

typedef struct marking {
    tk_op *op;
    const taint *t;
} marking;

/* Marks the data-dependent indices of every read in e (walk_exprs: never stops). */
static int mark_data_expr(tk_expr *e, void *arg) {
    const marking *m = arg;
    if (e->kind == TK_E_INDEX) {
        e->data_index = 0;
        for (int k = 0; k < e->nargs && k < 32; k++)
            if (has_data(m->t, e->args[k])) e->data_index |= 1u << k;
        if (e->data_index) m->op->data_reads = 1;
    }
    for (int i = 0; i < e->nargs; i++) mark_data_expr(e->args[i], arg);
    return 0;
}

void tk_find_data_reads(tk_op *op) {
    taint t = {{0}, 0};
    while (taint_block(&t, op->decl->body, op->decl->nbody, 0)) {
    }
    op->data_reads = 0;
    marking m = {op, &t};
    walk_exprs(op->decl->body, op->decl->nbody, mark_data_expr, &m);
}

/* ---- shapes only ------------------------------------------------------------- */

/* Whether e reads an element of the tensor named *arg. */
static int reads_tensor(tk_expr *e, void *arg) {
    if (e->kind == TK_E_INDEX && strcmp(e->name, (const char *)arg) == 0) return 1;
    for (int i = 0; i < e->nargs; i++)
        if (reads_tensor(e->args[i], arg)) return 1;
    return 0;
}

int tk_op_param_read(const tk_op *op, int i) {
    if (!op || i < 0 || i >= op->decl->nparams || op->decl->params[i].kind != TK_P_TENSOR) return 0;
    return walk_exprs(op->decl->body, op->decl->nbody, reads_tensor, (void *)op->decl->params[i].name);
}

/* ---- read ranges the binder checks ----------------------------------------
 * Ordinary reads are not checked in the kernel: a spec whose index runs
 * past a tensor (x[i + 1] over all of N, or x: [M] read at the loop's i
 * over N) would read memory outside it. Where the range of every index is
 * exact, the binder computes it at each call and refuses the call when it
 * leaves the tensor (tk_bind). Exact means: the index is linear (+, -,
 * unary -, * by a literal) in loop variables, each at most once, and in
 * values known at the call (literals, dims, int parameters); the loop
 * variables are top-level ones (0 .. size - 1 of their dim) or those of
 * enclosing `for` loops whose bounds are known at the call; and the read is
 * made wherever those loops run (not under an `if`, not in the arms of a
 * conditional expression or the right side of and/or, not in a loop with
 * other bounds). Then the extremes of the index are reached by some
 * iteration whenever the loops are not empty: an error is never a false
 * alarm. Other reads stay unchecked (docs/spec.md, Bounds). */

typedef struct rwalk {
    tk_op *op;
    const tk_stmt *loops[8];
    int nloops;
} rwalk;

/* Whether e's value is known at a call: an int of literals, dims and int
 * parameters under + - * // % and unary -. */
static int call_known(const tk_op *op, const tk_expr *e) {
    int idx;
    if (!e || e->vtype != TK_V_INT) return 0;
    switch (e->kind) {
    case TK_E_INT: return 1;
    case TK_E_NAME:
        for (int i = 0; i < op->decl->nloop; i++)
            if (strcmp(op->decl->loop_vars[i], e->name) == 0) return 0;
        {   /* (a local or an inner loop's variable resolves to none: the checker keeps names apart) */
            tk_sym_kind k = tk_resolve_header(op, e->name, &idx);
            return k == TK_SYM_DIM || (k == TK_SYM_INT && op->decl->params[idx].kind == TK_P_INT);
        }
    case TK_E_UNARY: return e->op == TK_OPC_NEG && call_known(op, e->args[0]);
    case TK_E_BINARY:
        return (e->op == TK_OPC_ADD || e->op == TK_OPC_SUB || e->op == TK_OPC_MUL || e->op == TK_OPC_FLOORDIV ||
                e->op == TK_OPC_MOD) && call_known(op, e->args[0]) && call_known(op, e->args[1]);
    default: return 0;
    }
}

/* Bit of loop variable `name` among w's: top-level variable i is bit i, the
 * enclosing loop j bit 8 + j; -1 when name is neither. */
static int loop_bit(const rwalk *w, const char *name) {
    for (int j = w->nloops - 1; j >= 0; j--)
        if (strcmp(w->loops[j]->name, name) == 0) return 8 + j;
    const tk_opdecl *d = w->op->decl;
    for (int i = 0; i < d->nloop && i < 8; i++)
        if (!tk_owned_dim(d->loop_vars[i]) && strcmp(d->loop_vars[i], name) == 0) return i;
    return -1;
}

/* Whether e is linear in w's loop variables, each at most once (*used:
 * those seen), and known values. */
static int linear(const rwalk *w, const tk_expr *e, unsigned *used) {
    if (call_known(w->op, e)) return 1;
    if (!e || e->vtype != TK_V_INT) return 0;
    if (e->kind == TK_E_NAME) {
        int bit = loop_bit(w, e->name);
        if (bit < 0 || (*used >> bit & 1u)) return 0;
        *used |= 1u << bit;
        return 1;
    }
    if (e->kind == TK_E_UNARY) return e->op == TK_OPC_NEG && linear(w, e->args[0], used);
    if (e->kind != TK_E_BINARY) return 0;
    if (e->op == TK_OPC_ADD || e->op == TK_OPC_SUB) return linear(w, e->args[0], used) && linear(w, e->args[1], used);
    if (e->op == TK_OPC_MUL)
        return (e->args[0]->kind == TK_E_INT && linear(w, e->args[1], used)) ||
               (e->args[1]->kind == TK_E_INT && linear(w, e->args[0], used));
    return 0;
}

/* Whether index k of read e (of tensor parameter p) is in range for any
 * shapes (plan_bounds.c's interval analysis: x[i] over i in range(N) with
 * x: [N]), so that no call needs to check it. */
static int shape_proven(const tk_op *op, const tk_expr *e, const tk_param *p, int k) {
    int pb = p->ndims > 0 && p->dims[0]->kind == TK_E_ELLIPSIS;
    return tk_index_proven(op, e->args[k], p->dims[pb + k]);
}

/* Records read e when every index is linear and one is not shape-proven. */
static void record_read(rwalk *w, const tk_expr *e) {
    tk_op *op = w->op;
    int idx;
    if (e->is_out || e->data_index || tk_resolve_header(op, e->name, &idx) != TK_SYM_TENSOR) return;
    const tk_param *p = &op->decl->params[idx];
    if (e->nargs != tk_explicit_dims(p) || op->nranges == TK_MAX_READ_RANGES) return;
    int open = 0;
    for (int k = 0; k < e->nargs; k++) {
        unsigned used = 0;
        if (!linear(w, e->args[k], &used)) return;
        open |= !shape_proven(op, e, p, k);
    }
    if (!open) return;
    tk_read_range *r = &op->ranges[op->nranges++];
    r->read = e;
    r->param = idx;
    r->nloops = w->nloops;
    for (int j = 0; j < w->nloops; j++) r->loops[j] = w->loops[j];
}

static void record_read_cb(void *w, const tk_expr *e) { record_read(w, e); }

/* The reads evaluating e always makes, recorded. */
static void range_reads(rwalk *w, const tk_expr *e) { each_read_always(e, record_read_cb, w); }

static void range_block(rwalk *w, tk_stmt **body, int n) {
    for (int i = 0; i < n; i++) {
        const tk_stmt *s = body[i];
        for (int k = 0; k < s->nindex; k++) range_reads(w, s->index[k]);
        range_reads(w, s->value);   /* (an `if`'s condition; its branches may not run) */
        range_reads(w, s->lo);
        range_reads(w, s->hi);
        if (s->kind == TK_S_FOR && w->nloops < 8 && (!s->lo || call_known(w->op, s->lo)) &&
            call_known(w->op, s->hi)) {
            w->loops[w->nloops++] = s;
            range_block(w, s->body, s->nbody);
            w->nloops--;
        }
    }
}

void tk_find_read_ranges(tk_op *op) {
    rwalk w = {.op = op, .nloops = 0};
    op->nranges = 0;
    range_block(&w, op->decl->body, op->decl->nbody);
}
