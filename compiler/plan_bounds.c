/* plan_bounds.c - the planner's bounds decisions: which indices of a row
 * loop's stores are proven in range from the loop bounds, and which the
 * kernel compares to their dim's size at run time (bounds_plan).
 *
 * The proof is a small interval analysis over affine forms of the op's
 * dims (c + k0 D0 + k1 D1 + ..., every dim >= 0). A value's lower and upper
 * bound are such forms, or unknown:
 *   - an int literal c:                      [c, c]
 *   - a dim D:                               [D, D]
 *   - a top-level loop variable over dim D:  [0, D - 1]
 *   - a local (inner loop variables included): the bound every one of its
 *     bindings gives, when they all give the same one (for v in range(a, b):
 *     [lo(a), hi(b) - 1]; v = e: e's bound; v op= e: unknown)
 *   - a + b, a - b, -a, a * c and c * a (c an int literal)
 *   - anything else (int parameters, //, %, min, max, tensor reads): unknown.
 * An index i on dim `size` is proven when lo(i) >= 0 and size - 1 - hi(i)
 * >= 0 hold for every value of the dims: the affine form's constant and
 * coefficients are all >= 0. Conservative by construction: what it cannot
 * prove is checked, never assumed. Guards (`if t + 1 < T:`) are not used. */
#include <string.h>

#include "emit.h"

#define NDIM TK_MAX_INTS

typedef struct aff {
    int64_t c;
    int64_t k[NDIM];   /* coefficient of op->dims[i] */
} aff;

typedef struct bnd {
    int lo_ok, hi_ok;
    aff lo, hi;
} bnd;

static const bnd k_unknown;   /* both bounds unknown */

/* Sum a + s * b (s = +1 or -1) into *r; 0 on overflow. */
static int aff_add(aff *r, const aff *a, const aff *b, int64_t s) {
    aff t;
    if (__builtin_mul_overflow(b->c, s, &t.c) || __builtin_add_overflow(a->c, t.c, &t.c)) return 0;
    for (int i = 0; i < NDIM; i++) {
        int64_t m;
        if (__builtin_mul_overflow(b->k[i], s, &m) || __builtin_add_overflow(a->k[i], m, &t.k[i])) return 0;
    }
    *r = t;
    return 1;
}

static int aff_scale(aff *r, const aff *a, int64_t s) {
    aff t;
    if (__builtin_mul_overflow(a->c, s, &t.c)) return 0;
    for (int i = 0; i < NDIM; i++)
        if (__builtin_mul_overflow(a->k[i], s, &t.k[i])) return 0;
    *r = t;
    return 1;
}

/* Whether a >= 0 for every value of the dims (all >= 0). */
static int aff_nonneg(const aff *a) {
    if (a->c < 0) return 0;
    for (int i = 0; i < NDIM; i++)
        if (a->k[i] < 0) return 0;
    return 1;
}

static int aff_equal(const aff *a, const aff *b) { return memcmp(a, b, sizeof *a) == 0; }

typedef struct bctx {
    const tk_op *op;
    int depth;          /* bindings followed (a guard against cycles) */
} bctx;

static bnd eval(bctx *C, const tk_expr *e);

/* The bound of dim expression e when it is exact (lo == hi), in *r. */
static int exact(bctx *C, const tk_expr *e, aff *r) {
    bnd b = eval(C, e);
    if (!b.lo_ok || !b.hi_ok || !aff_equal(&b.lo, &b.hi)) return 0;
    *r = b.lo;
    return 1;
}

/* Joins binding b into *acc (first: takes it); a bound the bindings
 * disagree on becomes unknown. */
static void join(bnd *acc, int *first, bnd b) {
    if (*first) {
        *acc = b;
        *first = 0;
        return;
    }
    acc->lo_ok = acc->lo_ok && b.lo_ok && aff_equal(&acc->lo, &b.lo);
    acc->hi_ok = acc->hi_ok && b.hi_ok && aff_equal(&acc->hi, &b.hi);
}

/* Joins the bounds of every binding of local slot r in body[0..n). */
static void slot_bindings(bctx *C, tk_stmt **body, int n, int r, bnd *acc, int *first) {
    for (int i = 0; i < n; i++) {
        const tk_stmt *s = body[i];
        if (s->kind == TK_S_ASSIGN && s->ref == r)
            join(acc, first, s->op == TK_OPC_NONE ? eval(C, s->value) : k_unknown);
        if (s->kind == TK_S_FOR && s->ref == r) {
            bnd b = k_unknown;
            bnd lo = s->lo ? eval(C, s->lo) : b;
            bnd hi = eval(C, s->hi);
            const aff one = {.c = 1};
            if (!s->lo) lo.lo_ok = 1, memset(&lo.lo, 0, sizeof lo.lo);
            b.lo_ok = lo.lo_ok;
            b.lo = lo.lo;
            b.hi_ok = hi.hi_ok && aff_add(&b.hi, &hi.hi, &one, -1);
            join(acc, first, b);
        }
        if (s->kind == TK_S_IF) {
            slot_bindings(C, s->body, s->nbody, r, acc, first);
            slot_bindings(C, s->orelse, s->norelse, r, acc, first);
        }
        if (s->kind == TK_S_FOR) slot_bindings(C, s->body, s->nbody, r, acc, first);
    }
}

static bnd name_bound(bctx *C, const tk_expr *e) {
    const tk_op *op = C->op;
    const tk_opdecl *d = op->decl;
    bnd b = k_unknown;
    for (int i = 0; i < d->nloop; i++)
        if (strcmp(d->loop_vars[i], e->name) == 0) {   /* over the loop output's dim i: [0, D - 1] */
            const tk_param *o = &d->outputs[op->loop_out];
            const aff one = {.c = 1};
            aff size;
            if (!exact(C, o->dims[o->ndims - d->nloop + i], &size)) return b;
            b.lo_ok = 1;
            b.hi_ok = aff_add(&b.hi, &size, &one, -1);
            return b;
        }
    int idx;
    tk_sym_kind k = tk_resolve_header(op, e->name, &idx);
    if (k == TK_SYM_DIM) {
        if (idx < 0 || idx >= NDIM) return b;
        b.lo_ok = b.hi_ok = 1;
        b.lo.k[idx] = b.hi.k[idx] = 1;
        return b;
    }
    if (k != TK_SYM_NONE || e->ref < 0 || e->ref >= op->nlocals || C->depth > 16) return b;
    int first = 1;
    C->depth++;
    slot_bindings(C, d->body, d->nbody, e->ref, &b, &first);
    C->depth--;
    return first ? k_unknown : b;
}

static bnd eval(bctx *C, const tk_expr *e) {
    bnd r = k_unknown, a, b;
    if (!e || (e->vtype != TK_V_INT && e->vtype != TK_V_NONE)) return r;
    switch (e->kind) {
    case TK_E_INT:
        r.lo_ok = r.hi_ok = 1;
        r.lo.c = r.hi.c = e->ival;
        return r;
    case TK_E_NAME: return name_bound(C, e);
    case TK_E_UNARY:
        a = eval(C, e->args[0]);
        if (e->op == TK_OPC_POS) return a;
        if (e->op != TK_OPC_NEG) return r;
        r.lo_ok = a.hi_ok && aff_scale(&r.lo, &a.hi, -1);
        r.hi_ok = a.lo_ok && aff_scale(&r.hi, &a.lo, -1);
        return r;
    case TK_E_BINARY:
        if (e->op == TK_OPC_ADD || e->op == TK_OPC_SUB) {
            a = eval(C, e->args[0]);
            b = eval(C, e->args[1]);
            int s = e->op == TK_OPC_ADD ? 1 : -1;
            r.lo_ok = a.lo_ok && (s > 0 ? b.lo_ok : b.hi_ok) && aff_add(&r.lo, &a.lo, s > 0 ? &b.lo : &b.hi, s);
            r.hi_ok = a.hi_ok && (s > 0 ? b.hi_ok : b.lo_ok) && aff_add(&r.hi, &a.hi, s > 0 ? &b.hi : &b.lo, s);
            return r;
        }
        if (e->op == TK_OPC_MUL) {
            const tk_expr *c = e->args[0]->kind == TK_E_INT ? e->args[0] : e->args[1];
            const tk_expr *x = c == e->args[0] ? e->args[1] : e->args[0];
            if (c->kind != TK_E_INT) return r;
            a = eval(C, x);
            const aff *lo = c->ival >= 0 ? &a.lo : &a.hi, *hi = c->ival >= 0 ? &a.hi : &a.lo;
            int lok = c->ival >= 0 ? a.lo_ok : a.hi_ok, hok = c->ival >= 0 ? a.hi_ok : a.lo_ok;
            r.lo_ok = lok && aff_scale(&r.lo, lo, c->ival);
            r.hi_ok = hok && aff_scale(&r.hi, hi, c->ival);
        }
        return r;
    default: return r;
    }
}

/* Whether index e on dim `dim` (a tensor's dim expression) is in range for
 * every value of the dims and loop variables: 0 <= e <= dim - 1. (Also the
 * checker's, for reads: reads.c.) */
int tk_index_proven(const tk_op *op, const tk_expr *e, const tk_expr *dim) {
    bctx C = {op, 0};
    aff size, room;
    const aff one = {.c = 1};
    if (op->ndims > NDIM || !exact(&C, dim, &size)) return 0;
    bnd b = eval(&C, e);
    return b.lo_ok && b.hi_ok && aff_nonneg(&b.lo) && aff_add(&room, &size, &one, -1) &&
           aff_add(&room, &room, &b.hi, -1) && aff_nonneg(&room);
}

/* Records the stores of body[0..n) with their unproven indices. */
static void plan_stores(tk_plan *P, tk_stmt **body, int n) {
    const tk_opdecl *d = P->op->decl;
    for (int i = 0; i < n; i++) {
        const tk_stmt *s = body[i];
        if (s->kind == TK_S_IF) {
            plan_stores(P, s->body, s->nbody);
            plan_stores(P, s->orelse, s->norelse);
        }
        if (s->kind == TK_S_FOR) plan_stores(P, s->body, s->nbody);
        if (s->kind != TK_S_STORE || P->nbstores == TK_MAX_BSTORES) continue;
        const tk_param *o = &d->outputs[s->ref];
        int skip = o->ndims - s->nindex;   /* a leading '...' */
        unsigned check = 0;
        for (int k = 0; k < s->nindex; k++) {
            const tk_expr *x = s->index[k];
            /* a parallel loop variable: the checker proved it indexes its own
             * dim, whose size the call checks (not in a sum, which any index
             * takes: there the interval analysis decides) */
            int par = 0;
            for (int v = 0; x->kind == TK_E_NAME && v < d->nloop && !P->op->out_sum[s->ref]; v++)
                par |= !tk_owned_dim(d->loop_vars[v]) && strcmp(d->loop_vars[v], x->name) == 0;
            if (!par && !tk_index_proven(P->op, x, o->dims[skip + k])) check |= 1u << k;
        }
        P->bstore[P->nbstores] = s;
        P->bcheck[P->nbstores++] = check;
    }
}

void bounds_plan(tk_plan *P) {
    P->nbstores = 0;
    if (P->row_loop) plan_stores(P, P->op->decl->body, P->op->decl->nbody);
}

int bounds_any_check(const tk_plan *P) {
    if (!P->row_loop) return 0;
    if (P->checked) return 1;
    for (int i = 0; i < P->nbstores; i++)
        if (P->bcheck[i]) return 1;
    return 0;
}

unsigned store_checks(const tk_plan *P, const tk_stmt *s) {
    if (!P->row_loop) return 0;   /* the element-wise form stores at its loop variables */
    if (P->checked) return (1u << s->nindex) - 1;
    for (int i = 0; i < P->nbstores; i++)
        if (P->bstore[i] == s) return P->bcheck[i];
    return (1u << s->nindex) - 1;   /* past the table: every index */
}
