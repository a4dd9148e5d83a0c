/* plan_run.c - the planner's run plan for untiled loops along the
 * innermost dim (CPU bodies and CUDA chunks): statements hoisted out of the
 * run, floor divisions stepped incrementally, and segments of constant
 * quotient. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit.h"

/* Whether e has the same value for every element of a run of the innermost
 * loop variable: it reads neither that variable nor a local outside
 * uniform[]. */
static int is_uniform(const emitter *E, const tk_expr *e, const unsigned char *uniform) {
    const tk_opdecl *d = E->op->decl;
    if (e->kind == TK_E_NAME) {
        if (strcmp(e->name, d->loop_vars[d->nloop - 1]) == 0) return 0;
        for (int i = 0; i < d->nloop; i++)
            if (strcmp(e->name, d->loop_vars[i]) == 0) return 1;
        int idx;
        if (tk_resolve_header(E->op, e->name, &idx) != TK_SYM_NONE) return 1;
        return uniform[e->ref];
    }
    for (int i = 0; i < e->nargs; i++)
        if (!is_uniform(E, e->args[i], uniform)) return 0;
    return 1;
}

static void count_assigns(tk_stmt **body, int n, int *count) {
    for (int i = 0; i < n; i++) {
        const tk_stmt *s = body[i];
        if (s->kind == TK_S_ASSIGN) count[s->ref]++;
        count_assigns(s->body, s->nbody, count);
        count_assigns(s->orelse, s->norelse, count);
    }
}

/* Collects int floor divisions and modulos with a uniform divisor and a
 * varying numerator: along a run the numerator usually grows by one. */
static void find_memo_sites(emitter *E, const tk_expr *e, const unsigned char *uniform) {
    if (!e) return;
    if (e->kind == TK_E_BINARY && (e->op == TK_OPC_FLOORDIV || e->op == TK_OPC_MOD) &&
        e->args[0]->vtype == TK_V_INT && e->args[1]->vtype == TK_V_INT &&
        is_uniform(E, e->args[1], uniform) && !is_uniform(E, e->args[0], uniform) &&
        E->nmemo < (int)(sizeof E->memo / sizeof E->memo[0]))
        E->memo[E->nmemo++] = e;
    for (int i = 0; i < e->nargs; i++) find_memo_sites(E, e->args[i], uniform);
}

/* The coefficient of the innermost loop variable t in int expression e when
 * e = coef * t + (uniform); 0 if e is not of that form. Memo sites count
 * as uniform (constant within a segment). */
static int affine(const emitter *E, const tk_expr *e, const unsigned char *uniform, int64_t *coef) {
    const tk_opdecl *d = E->op->decl;
    int64_t a, b;
    if (e->vtype != TK_V_INT) return 0;
    for (int i = 0; i < E->nmemo; i++)
        if (E->memo[i] == e) {
            if (e->op == TK_OPC_MOD) return affine(E, e->args[0], uniform, coef);
            *coef = 0;
            return 1;
        }
    if (is_uniform(E, e, uniform)) {
        *coef = 0;
        return 1;
    }
    switch (e->kind) {
    case TK_E_NAME:
        if (strcmp(e->name, d->loop_vars[d->nloop - 1]) == 0) {
            *coef = 1;
            return 1;
        }
        return E->def[e->ref] && affine(E, E->def[e->ref]->value, uniform, coef);
    case TK_E_UNARY:
        if (e->op != TK_OPC_NEG || !affine(E, e->args[0], uniform, &a)) return 0;
        *coef = -a;
        return 1;
    case TK_E_BINARY:
        if (e->op != TK_OPC_ADD && e->op != TK_OPC_SUB && e->op != TK_OPC_MUL) return 0;
        if (!affine(E, e->args[0], uniform, &a) || !affine(E, e->args[1], uniform, &b)) return 0;
        if (e->op == TK_OPC_MUL) {      /* only a literal factor keeps a known coefficient */
            const tk_expr *lit = a == 0 ? e->args[0] : e->args[1];
            if (a != 0 && b != 0) return 0;
            if (a == 0 && b == 0) { *coef = 0; return 1; }
            if (lit->kind != TK_E_INT) return 0;
            *coef = (a ? a : b) * lit->ival;
            return 1;
        }
        *coef = e->op == TK_OPC_ADD ? a + b : a - b;
        return 1;
    default:
        return 0;
    }
}

/* Whether e (a site's numerator) can be evaluated at a segment start: only
 * t, uniform values and top-level single-assignment locals, no other site. */
static int inlinable(const emitter *E, const tk_expr *e, const unsigned char *uniform) {
    for (int i = 0; i < E->nmemo; i++)
        if (E->memo[i] == e) return 0;
    if (e->kind == TK_E_NAME && !is_uniform(E, e, uniform)) {
        const tk_opdecl *d = E->op->decl;
        if (strcmp(e->name, d->loop_vars[d->nloop - 1]) == 0) return 1;
        return E->def[e->ref] && inlinable(E, E->def[e->ref]->value, uniform);
    }
    for (int i = 0; i < e->nargs; i++)
        if (!inlinable(E, e->args[i], uniform)) return 0;
    return 1;
}

/* Segments apply when every memo site sits in a top-level statement, has a
 * numerator growing by exactly 1 per element and can be evaluated ahead. */
static int plan_segments(emitter *E, const unsigned char *uniform) {
    if (E->nmemo == 0) return 0;
    for (int i = 0; i < E->nmemo; i++) {
        int64_t c;
        if (!affine(E, E->memo[i]->args[0], uniform, &c) || c != 1) return 0;
        if (!inlinable(E, E->memo[i]->args[0], uniform)) return 0;
    }
    return 1;
}

/* Plans one run of the innermost loop: top-level single-assignment locals
 * with uniform values are computed once per run (hoisted), and floor
 * divisions of top-level statements by uniform divisors are memoised. */
void plan_run(emitter *E) {
    const tk_opdecl *d = E->op->decl;
    unsigned char uniform[TK_MAX_LOCALS] = {0};
    int count[TK_MAX_LOCALS] = {0};
    memset(E->hoisted, 0, sizeof E->hoisted);
    memset(E->hoisted_local, 0, sizeof E->hoisted_local);
    memset(E->def, 0, sizeof E->def);
    E->nmemo = 0;
    E->segmented = 0;
    if ((E->tg->gpu && !E->chunk) || E->plain || d->nloop == 0 || E->ncopies > 1 ||
        d->nbody > (int)sizeof E->hoisted)
        return;
    count_assigns(d->body, d->nbody, count);
    for (int i = 0; i < d->nbody; i++) {
        const tk_stmt *s = d->body[i];
        if (s->kind != TK_S_ASSIGN || !s->declares || count[s->ref] != 1) continue;
        E->def[s->ref] = s;
        if (is_uniform(E, s->value, uniform)) {
            E->hoisted[i] = 1;
            E->hoisted_local[s->ref] = 1;
            uniform[s->ref] = 1;
        }
    }
    for (int i = 0; i < d->nbody; i++) {
        const tk_stmt *s = d->body[i];
        if (!E->hoisted[i] && (s->kind == TK_S_ASSIGN || s->kind == TK_S_STORE)) find_memo_sites(E, s->value, uniform);
    }
    E->segmented = plan_segments(E, uniform);
}
