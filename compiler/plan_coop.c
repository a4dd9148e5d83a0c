/* plan_coop.c - the planner's cooperative rows (CUDA): with 'schedule
 * coop=S' (or TK_CUDA_TUNE=coop=S), S consecutive lanes of one warp share
 * each iteration of a row loop instead of one thread running it alone.
 *
 * The form (printed by emit_coop.c):
 * - a loop of the body whose iterations are independent (below) is dealt
 *   over the lanes: lane l runs i = lo + l, lo + l + S, ...; consecutive
 *   lanes read and write consecutive elements of a row along the
 *   contiguous dim (coalesced), where one thread a row walked its own row;
 * - its reductions, locals it only updates as `s += e` (a sum) or
 *   `m = max(m, e)` / `m = min(m, e)`, are combined after it by a butterfly
 *   of warp shuffles (__shfl_xor_sync), so that every lane holds the result
 *   (a max or min then takes lane 0's bits: max(-0, +0) and NaNs depend on
 *   the order); the sum is reassociated: S partial sums, each in the spec's
 *   order, added pairwise;
 * - every other statement runs on every lane, redundantly: its values are
 *   the same in every lane; a store outside the dealt loops is made by
 *   lane 0 alone; loops that are not dealt run on every lane, their inner
 *   loops may be dealt;
 * - where the body reads outputs back, __syncwarp separates the lanes'
 *   stores from other lanes' reads and stores of the same elements.
 * A loop's iterations are independent when every local it writes is a
 * reduction of it, its own loop variables, or private to an iteration
 * (assigned before it is read in each, and read nowhere after the loop
 * except where another loop assigns it afresh), every store it makes has an
 * index that moves with its variable (a*i + terms that are the same in
 * every iteration, a != 0: no two iterations write one element), and every
 * output it both stores and reads it reads at the element it stores.
 * A loop that is not dealt may store (lane 0 does) and carry state from one
 * iteration to the next when some loop inside it is dealt (the selective
 * scan's walk over t, whose loops over the state's components are dealt);
 * where an output is stored both inside dealt loops and by lane 0,
 * __syncwarp orders the stores too. The form is refused, the plan saying
 * why, when a loop that stores has no dealt loop inside it (a scan's
 * running sum: cumsum, wkv's recurrence: the lanes would only repeat one
 * another), or when no loop is dealt. It is opt-in because no GPU has
 * timed it yet. */
#include <stdio.h>
#include <string.h>

#include "emit.h"

static int body_touches(tk_stmt **body, int n, const char *x);

/* Whether s reads or writes local x anywhere in it. */
static int stmt_touches(const tk_stmt *s, const char *x) {
    if ((s->kind == TK_S_ASSIGN || s->kind == TK_S_FOR) && strcmp(s->name, x) == 0) return 1;
    if (expr_uses(s->value, x) || expr_uses(s->lo, x) || expr_uses(s->hi, x)) return 1;
    for (int j = 0; j < s->nindex; j++)
        if (expr_uses(s->index[j], x)) return 1;
    return body_touches(s->body, s->nbody, x) || body_touches(s->orelse, s->norelse, x);
}

static int body_touches(tk_stmt **body, int n, const char *x) {
    for (int i = 0; i < n; i++)
        if (stmt_touches(body[i], x)) return 1;
    return 0;
}

/* Whether L is s or nested in it. */
static int contains(const tk_stmt *s, const tk_stmt *L) {
    if (s == L) return 1;
    for (int i = 0; i < s->nbody; i++)
        if (contains(s->body[i], L)) return 1;
    for (int i = 0; i < s->norelse; i++)
        if (contains(s->orelse[i], L)) return 1;
    return 0;
}

/* Whether local x is private to each iteration of loop M: M's variable, or
 * first touched by a plain assignment that does not read it, or only
 * inside a nested loop in which it is private; untouched counts too. */
static int private_in(const tk_stmt *M, const char *x) {
    if (strcmp(M->name, x) == 0) return 1;
    for (int k = 0; k < M->nbody; k++) {
        const tk_stmt *s = M->body[k];
        if (!stmt_touches(s, x)) continue;
        if (s->kind == TK_S_FOR && strcmp(s->name, x) == 0 && !expr_uses(s->lo, x) && !expr_uses(s->hi, x))
            continue;   /* a loop over x binds it afresh, for that loop alone */
        if (s->kind == TK_S_ASSIGN && s->op == TK_OPC_NONE && strcmp(s->name, x) == 0 && !expr_uses(s->value, x))
            return 1;
        if (s->kind == TK_S_FOR && !expr_uses(s->lo, x) && !expr_uses(s->hi, x) && private_in(s, x)) {
            for (int j = k + 1; j < M->nbody; j++)
                if (stmt_touches(M->body[j], x)) return 0;
            return 1;
        }
        return 0;
    }
    return 1;
}

/* Whether every touch of local x in body outside loop L lies in a loop
 * (not around L) in which x is private: the lanes' values of x in L are
 * never read elsewhere. */
static int outside_ok(tk_stmt **body, int n, const tk_stmt *L, const char *x) {
    for (int i = 0; i < n; i++) {
        const tk_stmt *s = body[i];
        if (s == L) continue;
        if (s->kind == TK_S_FOR) {
            if (expr_uses(s->lo, x) || expr_uses(s->hi, x)) return 0;
            int around = contains(s, L);
            if (!around && private_in(s, x)) continue;
            if (strcmp(s->name, x) == 0 || !outside_ok(s->body, s->nbody, L, x)) return 0;
        } else if (s->kind == TK_S_IF) {
            if (expr_uses(s->value, x) || !outside_ok(s->body, s->nbody, L, x) ||
                !outside_ok(s->orelse, s->norelse, L, x))
                return 0;
        } else if (stmt_touches(s, x)) {
            return 0;
        }
    }
    return 1;
}

/* How often statements read local x (store indices included). */
static int body_uses(tk_stmt **body, int n, const char *x) {
    int c = 0;
    for (int i = 0; i < n; i++) {
        const tk_stmt *s = body[i];
        c += expr_count(s->value, x) + expr_count(s->lo, x) + expr_count(s->hi, x);
        for (int j = 0; j < s->nindex; j++) c += expr_count(s->index[j], x);
        c += body_uses(s->body, s->nbody, x) + body_uses(s->orelse, s->norelse, x);
    }
    return c;
}

/* The reduction an assignment to x is (TK_COOP_*), 0 if none. */
static int update_kind(const tk_stmt *s, const char *x) {
    if (s->declares) return 0;
    if (s->op == TK_OPC_ADD) return expr_uses(s->value, x) ? 0 : TK_COOP_SUM;
    const tk_expr *v = s->value;
    if (s->op != TK_OPC_NONE || v->kind != TK_E_CALL || v->nargs != 2) return 0;
    int kind = strcmp(v->name, "max") == 0 ? TK_COOP_MAX : strcmp(v->name, "min") == 0 ? TK_COOP_MIN : 0;
    for (int k = 0; k < 2 && kind; k++) {
        const tk_expr *self = v->args[k], *other = v->args[1 - k];
        if (self->kind == TK_E_NAME && strcmp(self->name, x) == 0 && !expr_uses(other, x)) return kind;
    }
    return 0;
}

/* Scans body for the writes of x: *kind the reduction they all are (-1:
 * not all the same one), *n their count; a loop over x spoils it. */
static void updates(tk_stmt **body, int n, const char *x, int *kind, int *count) {
    for (int i = 0; i < n; i++) {
        const tk_stmt *s = body[i];
        if (s->kind == TK_S_FOR && strcmp(s->name, x) == 0) *kind = -1;
        if (s->kind == TK_S_ASSIGN && strcmp(s->name, x) == 0) {
            int k = update_kind(s, x);
            if (k == 0 || (*kind && *kind != k)) *kind = -1;
            else if (*kind == 0) *kind = k;
            (*count)++;
        }
        updates(s->body, s->nbody, x, kind, count);
        updates(s->orelse, s->norelse, x, kind, count);
    }
}

/* The reduction local x is of loop L (TK_COOP_*), 0 if it is not one. */
static int reduction_of(const tk_op *op, const tk_stmt *L, int slot) {
    const char *x = op->locals[slot].name;
    tk_vtype t = op->locals[slot].type;
    if (t != TK_V_F32 && t != TK_V_F64 && t != TK_V_INT) return 0;
    int kind = 0, n = 0;
    updates(L->body, L->nbody, x, &kind, &n);
    if (kind <= 0) return 0;
    return body_uses(L->body, L->nbody, x) == (kind == TK_COOP_SUM ? 0 : n) ? kind : 0;
}

/* The locals L's body writes (assignments and loop variables), by slot. */
static void written(tk_stmt **body, int n, unsigned char *w) {
    for (int i = 0; i < n; i++) {
        const tk_stmt *s = body[i];
        if (s->kind == TK_S_ASSIGN || s->kind == TK_S_FOR) w[s->ref] = 1;
        written(s->body, s->nbody, w);
        written(s->orelse, s->norelse, w);
    }
}

/* Whether e reads no local that L writes (other than L's variable). */
static int uniform_in(const tk_op *op, const tk_expr *e, const tk_stmt *L, const unsigned char *w) {
    if (!e) return 1;
    if (e->kind == TK_E_NAME && strcmp(e->name, L->name) != 0)
        for (int r = 0; r < op->nlocals; r++)
            if (w[r] && strcmp(op->locals[r].name, e->name) == 0) return 0;
    for (int i = 0; i < e->nargs; i++)
        if (!uniform_in(op, e->args[i], L, w)) return 0;
    return 1;
}

typedef struct coop_scan {
    const tk_op *op;
    const tk_stmt *loop;            /* the loop being judged */
    const unsigned char *w;         /* the locals it writes */
    const tk_stmt *store[64];       /* its stores */
    int nstore;
    const tk_expr *read[64];        /* its reads of outputs */
    int nread;
    int full;                       /* more than 64 of either */
} coop_scan;

static void reads_of_outputs(coop_scan *cs, const tk_expr *e) {
    if (!e) return;
    if (e->kind == TK_E_INDEX && e->is_out) {
        if (cs->nread == 64) cs->full = 1;
        else cs->read[cs->nread++] = e;
    }
    for (int i = 0; i < e->nargs; i++) reads_of_outputs(cs, e->args[i]);
}

static void accesses(coop_scan *cs, tk_stmt **body, int n) {
    for (int i = 0; i < n; i++) {
        const tk_stmt *s = body[i];
        reads_of_outputs(cs, s->value);
        reads_of_outputs(cs, s->lo);
        reads_of_outputs(cs, s->hi);
        for (int j = 0; j < s->nindex; j++) reads_of_outputs(cs, s->index[j]);
        if (s->kind == TK_S_STORE) {
            if (cs->nstore == 64) cs->full = 1;
            else cs->store[cs->nstore++] = s;
        }
        accesses(cs, s->body, s->nbody);
        accesses(cs, s->orelse, s->norelse);
    }
}

/* Whether store s writes a different element in every iteration of the loop. */
static int store_moves(const coop_scan *cs, const tk_stmt *s) {
    for (int k = 0; k < s->nindex; k++) {
        int64_t a;
        if (lane_coef(s->index[k], cs->loop->name, &a) && a != 0 && uniform_in(cs->op, s->index[k], cs->loop, cs->w))
            return 1;
    }
    return 0;
}

static int same_index(tk_expr *const *a, int na, tk_expr *const *b, int nb) {
    if (na != nb) return 0;
    for (int k = 0; k < na; k++)
        if (!tk_expr_equal(a[k], b[k])) return 0;
    return 1;
}

/* Whether the iterations of loop L are independent (see the top); fills
 * *cl (its reductions, whether it stores) or says why not in why. */
static int dealable(const tk_op *op, const tk_stmt *L, tk_coop_loop *cl, char *why, size_t n) {
    unsigned char w[TK_MAX_LOCALS];
    memset(w, 0, sizeof w);
    memset(cl, 0, sizeof *cl);
    written(L->body, L->nbody, w);
    if (w[L->ref]) {
        snprintf(why, n, "it assigns its variable %s", L->name);
        return 0;
    }
    for (int r = 0; r < op->nlocals; r++) {
        const char *x = op->locals[r].name;
        if (!w[r] || strcmp(x, L->name) == 0) continue;
        int kind = reduction_of(op, L, r);
        if (kind) {
            cl->acc[r] = (unsigned char)kind;
            continue;
        }
        if (!private_in(L, x)) {
            snprintf(why, n, "it carries %s from one iteration to the next (not a sum s += e, nor m = max(m, e) or min)", x);
            return 0;
        }
        if (!outside_ok(op->decl->body, op->decl->nbody, L, x)) {
            snprintf(why, n, "%s, set in each iteration, is read after it", x);
            return 0;
        }
    }
    coop_scan cs;
    memset(&cs, 0, sizeof cs);
    cs.op = op;
    cs.loop = L;
    cs.w = w;
    accesses(&cs, L->body, L->nbody);
    if (cs.full) {
        snprintf(why, n, "it has more than 64 stores or reads of outputs");
        return 0;
    }
    for (int i = 0; i < cs.nstore; i++) {
        const tk_stmt *s = cs.store[i];
        if (!store_moves(&cs, s)) {
            snprintf(why, n, "its store to %s at line %d does not move with %s (a*%s + the same terms in every "
                     "iteration)", s->name, s->loc.line, L->name, L->name);
            return 0;
        }
        for (int j = 0; j < cs.nread; j++) {
            const tk_expr *e = cs.read[j];
            if (e->ref == s->ref && !same_index(e->args, e->nargs, s->index, s->nindex)) {
                snprintf(why, n, "it reads %s at line %d at another element than it stores at line %d", s->name,
                         e->loc.line, s->loc.line);
                return 0;
            }
        }
    }
    cl->loop = L;
    cl->stores = cs.nstore > 0;
    return 1;
}

/* The first store in body, at any depth; NULL if none. */
static const tk_stmt *first_store(tk_stmt *const *body, int n) {
    for (int i = 0; i < n; i++) {
        const tk_stmt *s = body[i], *f;
        if (s->kind == TK_S_STORE) return s;
        if ((f = first_store(s->body, s->nbody)) != NULL || (f = first_store(s->orelse, s->norelse)) != NULL)
            return f;
    }
    return NULL;
}

/* Whether loop s is one the plan deals over the lanes. */
static int is_dealt(const tk_plan *P, const tk_stmt *s) {
    for (int k = 0; k < P->ncoop; k++)
        if (P->coop_loops[k].loop == s) return 1;
    return 0;
}

/* The names body stores, into names[*count] (at most 64: *full set beyond),
 * those inside dealt loops (inside) or those outside them. */
static void stored_names(const tk_plan *P, tk_stmt *const *body, int n, int inside, int in_dealt,
                         const char **names, int *count, int *full) {
    for (int i = 0; i < n; i++) {
        const tk_stmt *s = body[i];
        if (s->kind == TK_S_STORE && in_dealt == inside) {
            if (*count == 64) *full = 1;
            else names[(*count)++] = s->name;
        }
        int d = in_dealt || (s->kind == TK_S_FOR && is_dealt(P, s));
        stored_names(P, s->body, s->nbody, inside, d, names, count, full);
        stored_names(P, s->orelse, s->norelse, inside, d, names, count, full);
    }
}

/* 1 when some output is stored both inside a dealt loop (by any lane) and
 * outside one (by lane 0): __syncwarp orders those stores as the spec
 * orders them, even where nothing reads them back. */
static int mixed_stores(const tk_plan *P) {
    const tk_opdecl *d = P->op->decl;
    const char *in[64], *out[64];
    int nin = 0, nout = 0, full = 0;
    stored_names(P, d->body, d->nbody, 1, 0, in, &nin, &full);
    stored_names(P, d->body, d->nbody, 0, 0, out, &nout, &full);
    if (full) return 1;
    for (int i = 0; i < nin; i++)
        for (int j = 0; j < nout; j++)
            if (strcmp(in[i], out[j]) == 0) return 1;
    return 0;
}

typedef struct coop_walk_state {
    tk_plan *P;
    int fail;
    char first_why[256];            /* why the first loop found was not dealt */
} coop_walk_state;

/* Deals the loops of body that can be dealt; those that cannot run on every
 * lane, and the loops inside them are walked. */
static void coop_walk(coop_walk_state *st, tk_stmt **body, int n) {
    tk_plan *P = st->P;
    const tk_op *op = P->op;
    for (int i = 0; i < n && !st->fail; i++) {
        const tk_stmt *s = body[i];
        if (s->kind == TK_S_FOR) {
            tk_coop_loop cl;
            char why[200];
            if (dealable(op, s, &cl, why, sizeof why)) {
                if (P->ncoop == TK_COOP_LOOPS) {
                    snprintf(P->coop_why, sizeof P->coop_why, "more than %d loops to deal over the lanes",
                             TK_COOP_LOOPS);
                    st->fail = 1;
                    return;
                }
                P->coop_loops[P->ncoop++] = cl;
                continue;
            }
            if (!st->first_why[0]) snprintf(st->first_why, sizeof st->first_why, "the loop over %s at line %d: %s",
                                            s->name, s->loc.line, why);
            const int dealt_before = P->ncoop;
            coop_walk(st, s->body, s->nbody);
            const tk_stmt *store = first_store(s->body, s->nbody);
            if (!st->fail && store && P->ncoop == dealt_before) {   /* the lanes would only repeat one another */
                snprintf(P->coop_why, sizeof P->coop_why,
                         "the loop over %s at line %d stores %s (line %d) but its lanes cannot share it: %s; "
                         "and no loop inside it can be dealt", s->name, s->loc.line, store->name, store->loc.line,
                         why);
                st->fail = 1;
            }
        } else if (s->kind == TK_S_IF) {
            coop_walk(st, s->body, s->nbody);
            coop_walk(st, s->orelse, s->norelse);
        }
    }
}

static int reads_back(tk_stmt **body, int n) {
    for (int i = 0; i < n; i++) {
        const tk_stmt *s = body[i];
        coop_scan cs;
        cs.nread = cs.nstore = cs.full = 0;
        reads_of_outputs(&cs, s->value);
        reads_of_outputs(&cs, s->lo);
        reads_of_outputs(&cs, s->hi);
        for (int j = 0; j < s->nindex; j++) reads_of_outputs(&cs, s->index[j]);
        if (cs.nread || cs.full || reads_back(s->body, s->nbody) || reads_back(s->orelse, s->norelse)) return 1;
    }
    return 0;
}

int coop_plan(tk_plan *P) {
    const tk_opdecl *d = P->op->decl;
    const int S = P->sched[TK_SCHED_COOP];
    P->coop = P->ncoop = 0;
    P->coop_why[0] = 0;
    if (!P->row_loop || P->target != TK_TARGET_CUDA || S < 2) return 0;
    coop_walk_state st;
    memset(&st, 0, sizeof st);
    st.P = P;
    coop_walk(&st, d->body, d->nbody);
    if (!st.fail && P->ncoop == 0) {
        snprintf(P->coop_why, sizeof P->coop_why, "no loop of the body has independent iterations%s%s",
                 st.first_why[0] ? "; " : "", st.first_why);
        st.fail = 1;
    }
    if (st.fail) {
        P->ncoop = 0;
        return 0;
    }
    P->coop = S;
    P->coop_sync = reads_back(d->body, d->nbody) || mixed_stores(P);
    return 1;
}
