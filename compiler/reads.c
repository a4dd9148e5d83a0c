/* reads.c - the checker's annotations of an op's reads, made once after its
 * body type-checks in every variant: which reads every iteration makes
 * (tk_op.read_always, for empty inputs) and which read indices depend on a
 * tensor's values (tk_expr.data_index, gathers: checked on the CPU); and
 * whether an op reads a tensor parameter's elements at all (tk_op_param_read). */
#include <string.h>

#include "core.h"

/* ---- reads made in every iteration ------------------------------------------ */

/* Records in op->read_always the first read of each tensor that evaluating
 * e always makes: every part of e is evaluated except the arms of a
 * conditional expression and the right side of and/or. */
static void mark_reads_always(tk_op *op, const tk_expr *e) {
    int idx;
    if (!e) return;
    if (e->kind == TK_E_COND) {
        mark_reads_always(op, e->args[1]);
        return;
    }
    if (e->kind == TK_E_BINARY && (e->op == TK_OPC_AND || e->op == TK_OPC_OR)) {
        mark_reads_always(op, e->args[0]);
        return;
    }
    if (e->kind == TK_E_INDEX && tk_resolve_header(op, e->name, &idx) == TK_SYM_TENSOR &&
        op->read_always[idx].line == 0)
        op->read_always[idx] = e->loc;
    for (int i = 0; i < e->nargs; i++) mark_reads_always(op, e->args[i]);
}

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
