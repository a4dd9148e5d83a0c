/* plan_lanes.c - the planner's lane tiles: whether a body fits tiles of V
 * consecutive elements of the innermost dim times G rows of a group dim,
 * which locals are held per lane, how many lane blocks and accumulators,
 * and the lane analyses the printers share (invariance, coefficients). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit.h"

/* ---- CPU lane tiles ----------------------------------------------------------
 * A tile is V consecutive elements of the innermost dim (the lanes) times G
 * rows of the group dim. Every statement runs inside `#pragma omp simd` loops
 * over the lane index tk_j, so the vector lanes are the elements of the
 * innermost dim, each summing in the order the spec says (no reassociation);
 * the G copies of a statement share the loads that do not depend on the group
 * dim (for rwkv: one w vector feeds the FMAs of G batch rows). Locals live in
 * per-lane arrays; an inner loop whose bounds differ between lanes runs its
 * common range unmasked and the rest with a per-lane condition. */

/* Whether statements hold no loop. */
static int lane_simple(tk_stmt **body, int n) {
    for (int i = 0; i < n; i++) {
        if (body[i]->kind == TK_S_FOR) return 0;
        if (body[i]->kind == TK_S_IF &&
            !(lane_simple(body[i]->body, body[i]->nbody) && lane_simple(body[i]->orelse, body[i]->norelse)))
            return 0;
    }
    return 1;
}

/* Whether e has the same value in every lane and copy of a tile. */
int lane_invariant(const emitter *E, const tk_expr *e) {
    if (!e) return 1;
    if (e->kind == TK_E_NAME) {
        const tk_opdecl *d = E->op->decl;
        int idx;
        if (strcmp(e->name, d->loop_vars[d->nloop - 1]) == 0) return 0;
        if (E->ngroup > 1 && strcmp(e->name, d->loop_vars[E->gdim]) == 0) return 0;
        for (int i = 0; i < d->nloop; i++)
            if (strcmp(e->name, d->loop_vars[i]) == 0) return 1;
        if (tk_resolve_header(E->op, e->name, &idx) != TK_SYM_NONE) return 1;
        for (int i = 0; i < E->nshared; i++)
            if (strcmp(E->shared[i], e->name) == 0) return 1;
        return 0;
    }
    for (int i = 0; i < e->nargs; i++)
        if (!lane_invariant(E, e->args[i])) return 0;
    return 1;
}

/* How often e names `name`. */
int expr_count(const tk_expr *e, const char *name) {
    if (!e) return 0;
    int n = e->kind == TK_E_NAME && strcmp(e->name, name) == 0;
    for (int i = 0; i < e->nargs; i++) n += expr_count(e->args[i], name);
    return n;
}

/* Occurrences of local name (read or assigned) in statements. */
int stmt_count(tk_stmt **body, int nb, const char *name) {
    int n = 0;
    for (int i = 0; i < nb; i++) {
        const tk_stmt *s = body[i];
        n += s->kind == TK_S_ASSIGN && strcmp(s->name, name) == 0;
        n += expr_count(s->value, name) + expr_count(s->lo, name) + expr_count(s->hi, name);
        n += stmt_count(s->body, s->nbody, name) + stmt_count(s->orelse, s->norelse, name);
    }
    return n;
}

/* Assigned locals of statements, marked in out[]. */
void assigned_locals(tk_stmt **body, int n, unsigned char *out) {
    for (int i = 0; i < n; i++) {
        if (body[i]->kind == TK_S_ASSIGN) out[body[i]->ref] = 1;
        assigned_locals(body[i]->body, body[i]->nbody, out);
        assigned_locals(body[i]->orelse, body[i]->norelse, out);
    }
}

/* Whether statements read a tensor with no index naming the group variable
 * (shared by the copies), and one that names it. */
static void group_reads(const tk_expr *e, const char *g, int *shared, int *own) {
    if (!e) return;
    if (e->kind == TK_E_INDEX) {
        int uses = 0;
        for (int i = 0; i < e->nargs; i++) uses |= expr_uses(e->args[i], g);
        *(uses ? own : shared) = 1;
    }
    for (int i = 0; i < e->nargs; i++) group_reads(e->args[i], g, shared, own);
}

static void group_reads_stmts(tk_stmt **body, int n, const char *g, int *shared, int *own) {
    for (int i = 0; i < n; i++) {
        group_reads(body[i]->value, g, shared, own);
        group_reads_stmts(body[i]->body, body[i]->nbody, g, shared, own);
        group_reads_stmts(body[i]->orelse, body[i]->norelse, g, shared, own);
    }
}

/* The coefficient of loop variable v in int expression e, when e is
 * coef * v + (terms without v) built from + - and literal factors;
 * returns 0 when it is not of that form. */
int lane_coef(const tk_expr *e, const char *v, int64_t *coef) {
    int64_t a, b;
    switch (e->kind) {
    case TK_E_INT: *coef = 0; return 1;
    case TK_E_NAME: *coef = strcmp(e->name, v) == 0; return 1;
    case TK_E_UNARY:
        if (e->op != TK_OPC_NEG || !lane_coef(e->args[0], v, &a)) return 0;
        *coef = -a;
        return 1;
    case TK_E_BINARY:
        if (e->op == TK_OPC_ADD || e->op == TK_OPC_SUB) {
            if (!lane_coef(e->args[0], v, &a) || !lane_coef(e->args[1], v, &b)) return 0;
            *coef = e->op == TK_OPC_ADD ? a + b : a - b;
            return 1;
        }
        if (e->op == TK_OPC_MUL && e->args[0]->kind == TK_E_INT && lane_coef(e->args[1], v, &b)) {
            *coef = e->args[0]->ival * b;
            return 1;
        }
        if (e->op == TK_OPC_MUL && e->args[1]->kind == TK_E_INT && lane_coef(e->args[0], v, &a)) {
            *coef = e->args[1]->ival * a;
            return 1;
        }
        return 0;
    default:
        return !expr_uses(e, v) ? (*coef = 0, 1) : 0;
    }
}

/* Sum over the tensor reads of e of the direction (+1, -1) in which their
 * innermost index moves with the lanes. */
static int lane_dir(const tk_expr *e, const char *v) {
    if (!e) return 0;
    int n = 0;
    int64_t c;
    if (e->kind == TK_E_INDEX && e->nargs > 0 && lane_coef(e->args[e->nargs - 1], v, &c))
        n += c < 0 ? -1 : c > 0;
    for (int i = 0; i < e->nargs; i++) n += lane_dir(e->args[i], v);
    return n;
}

static int lane_dir_stmts(tk_stmt **body, int nb, const char *v) {
    int n = 0;
    for (int i = 0; i < nb; i++) {
        n += lane_dir(body[i]->value, v);
        n += lane_dir_stmts(body[i]->body, body[i]->nbody, v) + lane_dir_stmts(body[i]->orelse, body[i]->norelse, v);
    }
    return n;
}

typedef struct lane_info {
    tk_stmt *loops[32];     /* loops whose bounds differ between lanes */
    int nloops;
    tk_stmt *fixed[32];     /* top-level loops with the same bounds in every lane */
    int nfixed;             /* (counted past 32: then not planned as a tile) */
    const char *outer[32][8];   /* the shared loops around each */
    int nouter[32];
} lane_info;

/* Whether statements fit a tile: at each level, loops with lane-invariant
 * bounds hold tile statements, other loops only loop-free statements. */
static int lane_walk(emitter *E, tk_stmt **body, int n, lane_info *li) {
    for (int i = 0; i < n; i++) {
        tk_stmt *s = body[i];
        if (s->kind == TK_S_IF && !lane_simple(&s, 1)) return 0;
        if (s->kind != TK_S_FOR) continue;
        if (lane_invariant(E, s->lo) && lane_invariant(E, s->hi)) {
            if (E->nshared == 8) return 0;
            if (E->nshared == 0 && li->nfixed++ < 32) li->fixed[li->nfixed - 1] = s;
            E->shared[E->nshared++] = s->name;
            int ok = lane_walk(E, s->body, s->nbody, li);
            E->nshared--;
            if (!ok) return 0;
        } else {
            if (!lane_simple(s->body, s->nbody) || li->nloops == 32) return 0;
            for (int k = 0; k < E->nshared; k++) li->outer[li->nloops][k] = E->shared[k];
            li->nouter[li->nloops] = E->nshared;
            li->loops[li->nloops++] = s;
        }
    }
    return 1;
}

/* Counts e's tensor reads that use lane variable v: in their last index
 * alone, with coefficient +-1 (a vector load: *unit), or otherwise (a
 * gather across the lanes: *other). */
static void lane_loads(const tk_expr *e, const char *v, int *unit, int *other) {
    if (!e) return;
    if (e->kind == TK_E_INDEX && expr_uses(e, v)) {
        int64_t c;
        int last = e->nargs - 1, ok = last >= 0 && lane_coef(e->args[last], v, &c) && (c == 1 || c == -1);
        for (int i = 0; i < last; i++) ok = ok && !expr_uses(e->args[i], v);
        *(ok ? unit : other) += 1;
    }
    for (int i = 0; i < e->nargs; i++) lane_loads(e->args[i], v, unit, other);
}

/* lane_loads over statements body[0..n), their bounds and nested blocks. */
void lane_loads_stmts(tk_stmt **body, int n, const char *v, int *unit, int *other) {
    for (int i = 0; i < n; i++) {
        lane_loads(body[i]->value, v, unit, other);
        lane_loads(body[i]->lo, v, unit, other);
        lane_loads(body[i]->hi, v, unit, other);
        lane_loads_stmts(body[i]->body, body[i]->nbody, v, unit, other);
        lane_loads_stmts(body[i]->orelse, body[i]->norelse, v, unit, other);
    }
}

/* CPU: whether the top-level loops with fixed bounds (the k loop of
 * y[b, n] = sum_k x[b, k] * w[k, n]) are better run across the lanes than
 * unrolled and jammed: every read in them that moves with the innermost
 * variable is a unit-stride load along its last dim, and one does. Then a
 * lane tile turns the loop into vector FMAs, a group row's broadcast of
 * x[b, k] feeding one vector; jammed copies would read w[k, n..n+3] a
 * scalar at a time (a user's matmul: 108 ms against 7.5 ms for w[n, k]). */
static int lane_fixed_loops(const emitter *E, const lane_info *li) {
    const tk_opdecl *d = E->op->decl;
    int unit = 0, other = 0;
    if (E->tg->gpu || li->nfixed == 0 || li->nfixed > 32) return 0;
    for (int k = 0; k < li->nfixed; k++)
        lane_loads_stmts(li->fixed[k]->body, li->fixed[k]->nbody, d->loop_vars[d->nloop - 1], &unit, &other);
    return unit > 0 && other == 0;
}

/* Whether one run of loop-free statements (one lane block of tile_block)
 * in body, or in a loop's body within it, holds all `total` occurrences of
 * local name: then it can live in a lane block's scalar, else a per-lane
 * array carries it between blocks. */
static int in_one_run(tk_stmt **body, int n, const char *name, int total) {
    int i = 0;
    while (i < n) {
        if (body[i]->kind == TK_S_FOR) {
            if (in_one_run(body[i]->body, body[i]->nbody, name, total)) return 1;
            i++;
            continue;
        }
        int k = i;
        while (k < n && body[k]->kind != TK_S_FOR) k++;
        if (stmt_count(body + i, k - i, name) == total) return 1;
        i = k;
    }
    return 0;
}

/* Whether statements read a vector that group rows share and the loops
 * move: a tensor read using lane variable v, not group variable g, and the
 * variable of a loop among them or around (the wt[k, n] of a matmul;
 * loops[0..nl) are the enclosing loop variables). */
static int shared_moving_load(const tk_expr *e, const char *v, const char *g, const char **loops, int nl) {
    if (!e) return 0;
    if (e->kind == TK_E_INDEX && expr_uses(e, v) && !expr_uses(e, g))
        for (int i = 0; i < nl; i++)
            if (expr_uses(e, loops[i])) return 1;
    for (int i = 0; i < e->nargs; i++)
        if (shared_moving_load(e->args[i], v, g, loops, nl)) return 1;
    return 0;
}

/* shared_moving_load over statements body[0..n) and their nested blocks,
 * each loop's variable joining loops[] (room for 8) inside it. */
static int shared_moving_stmts(tk_stmt **body, int n, const char *v, const char *g, const char **loops, int nl) {
    for (int i = 0; i < n; i++) {
        const tk_stmt *s = body[i];
        int inner = s->kind == TK_S_FOR && nl < 8;
        if (inner) loops[nl] = s->name;
        if (shared_moving_load(s->value, v, g, loops, nl) ||
            shared_moving_stmts(s->body, s->nbody, v, g, loops, nl + inner) ||
            shared_moving_stmts(s->orelse, s->norelse, v, g, loops, nl))
            return 1;
    }
    return 0;
}

/* R for a tile of G group rows: with explicit vectors, about 24
 * accumulator vectors of the 32 AVX-512 registers (12 of the 16 AVX2 ones),
 * each broadcast of a group row feeding R of them. */
int vx_loop_planned(const emitter *E, const tk_stmt *s) {
    for (int i = 0; i < E->nvx_loop; i++)
        if (E->vx_loop[i] == s) return 1;
    return 0;
}

int lane_blocks(const emitter *E, int G) {
    if (!E->vx) return 1;
    int r = (E->wide == 2 ? 12 : 24) / (E->nacc * G);
    return r < 1 ? 1 : r > 8 ? 8 : r;
}

/* Decides the tile: V lanes, the group dim and G, the locals held per lane.
 * Returns 0 when the body does not fit (then unroll-and-jam applies). */
int lane_plan(emitter *E) {
    const tk_opdecl *d = E->op->decl;
    lane_info li;
    memset(&li, 0, sizeof li);
    if (E->plain || d->nloop == 0 || !has_top_level_for(d)) return 0;
    E->ngroup = 1;
    if (!lane_walk(E, d->body, d->nbody, &li)) return 0;
    int fixed = li.nloops == 0;   /* no loop's bounds vary: the fixed loops, if they gain */
    if (fixed && !lane_fixed_loops(E, &li)) return 0;
    if (fixed) {
        li.nloops = li.nfixed;
        for (int k = 0; k < li.nfixed; k++) li.loops[k] = li.fixed[k];
    }
    /* locals: per lane, except temporaries that live inside one lane loop */
    memset(E->arr, 0, sizeof E->arr);
    for (int r = 0; r < E->op->nlocals; r++) E->arr[r] = !E->op->locals[r].is_loop;
    unsigned char acc[TK_MAX_LOCALS] = {0};
    int carried = 0;   /* a local only a fixed loop uses, carried between its lane blocks */
    for (int k = 0; k < li.nloops; k++) {
        unsigned char in[TK_MAX_LOCALS] = {0};
        assigned_locals(li.loops[k]->body, li.loops[k]->nbody, in);
        for (int r = 0; r < E->op->nlocals; r++) {
            if (!in[r] || E->op->locals[r].is_loop) continue;
            const char *nm = E->op->locals[r].name;
            int total = stmt_count(d->body, d->nbody, nm);
            if (total != stmt_count(li.loops[k]->body, li.loops[k]->nbody, nm)) acc[r] = 1;
            else if (!fixed || in_one_run(li.loops[k]->body, li.loops[k]->nbody, nm, total)) E->arr[r] = 0;
            else carried = 1;
        }
    }
    int nacc = 0;
    for (int r = 0; r < E->op->nlocals; r++) nacc += acc[r];
    if (nacc == 0) nacc = 1;
    /* the group dim: an outer loop variable some lane-loop read ignores and
     * another one reads */
    E->gdim = d->nloop - 1;
    for (int v = 0; v < d->nloop - 1 && E->gdim == d->nloop - 1; v++) {
        int shared = 0, own = 0;
        for (int k = 0; k < li.nloops; k++)
            group_reads_stmts(li.loops[k]->body, li.loops[k]->nbody, d->loop_vars[v], &shared, &own);
        if (shared && own) E->gdim = v;
    }
    /* CPU: one 512-bit vector. GPU: the lanes are registers of one thread
     * (thread coarsening), 16 outputs along the innermost dim (float64: 8)
     * times 2 group rows: a lane-invariant load feeds 16 FMAs, a
     * group-invariant one 2. Measured on an H200 (ci/gpu_tune.py, 15 shapes,
     * bench/results/2026-12-04-gpu-h200-tune.json): 4 rows took 255
     * registers (f32), one block of 8 warps an SM, and rwkv_forward ran in
     * 0.913 ms; 2 rows, 128 registers, 0.784 ms (with 4 warp rows, see
     * gpu_tiles_head: 0.687); 1 row or 8 lanes were slower (1.1-2.0 ms). */
    int vec = E->tg->gpu ? (E->ftype == TK_V_F64 ? 8 : 16) : E->ftype == TK_V_F64 ? 8 : 16;
    int gmax = E->tg->gpu ? 2 : 8;
    if (E->tg->gpu && E->tune_lanes) vec = E->tune_lanes;
    if (E->tg->gpu && E->tune_rows) gmax = E->tune_rows;
    if (E->wide == 2) {   /* one 256-bit vector; 4 group rows x 3 lane blocks */
        vec /= 2;
        gmax = 4;
    }
    /* the narrow body where it runs as AVX2 code: compiled for an AVX2 CPU
     * alone (a run-time spec), or beside vector bodies (then it is compiled
     * for x86-64-v3 and baseline only, TK_NARROW_CLONES). A lane tile is 2
     * ymm registers, so 4 rows keep 8 of the 16 in use. The rwkv copy (f32,
     * B=8 C=768 T=768, k strided, 2 threads): 8 rows 69 ms and a 5.5 s first
     * call; 4 rows 47 ms and 3.8 s; 2 rows 53-65 ms, 6 rows 64 ms
     * (bench/results/2026-12-05-cpu-compile-time-3.txt). Kernels whose
     * narrow body is also compiled for AVX-512 (target clones without
     * vector bodies; -march=native there) keep 8: 8 zmm registers. */
    if (!E->tg->gpu && E->wide == 0 &&
        (E->plan->cpu == TK_CPU_AVX2 || (E->plan->cpu == TK_CPU_ANY && E->plan->wide)))
        gmax = 4;
    if (E->gdim != d->nloop - 1) {
        E->ngroup = nacc >= gmax ? 1 : gmax / nacc;
        /* group copies vary the group variable: the bounds must still fit */
        li.nloops = li.nfixed = 0;
        if (E->ngroup == 1 || !lane_walk(E, d->body, d->nbody, &li)) {
            E->ngroup = 1;
            E->gdim = d->nloop - 1;
        }
        if (fixed) {
            li.nloops = li.nfixed;
            for (int k = 0; k < li.nfixed; k++) li.loops[k] = li.fixed[k];
        }
    }
    /* fixed loops gain when group rows share a vector load the loops move
     * and no local of theirs is carried from one of their lane blocks to
     * another (matmul 256x512x512: 54 -> 1.8 ms); else the
     * jammed copies keep their state in registers and lane arrays lose
     * (wkv_backward_wu 11.9 -> 21.3 ms, rotary_backward_tables 2.5 -> 3.2,
     * wkv_quadratic 5.3 -> 6.0; bench/fixed_loop_lanes.py) */
    const char *around[8];
    int shares = 0;
    for (int k = 0; fixed && E->ngroup > 1 && k < li.nloops; k++)
        shares = shares || shared_moving_stmts(&li.loops[k], 1, d->loop_vars[d->nloop - 1],
                                               d->loop_vars[E->gdim], around, 0);
    if (fixed && (!shares || carried)) {
        E->ngroup = 1;
        E->gdim = d->nloop - 1;
        memset(E->arr, 0, sizeof E->arr);
        return 0;
    }
    /* one vector of lanes (the accumulators stay in registers); lanes run
     * backwards when the reads in lane loops mostly do, so that they load
     * ascending memory */
    E->lanes = vec;
    /* copies: about 8 independent accumulator vectors (two FMA pipes of
     * 4 cycles), a group row's broadcast feeding R lane blocks */
    int dir = 0;
    for (int k = 0; k < li.nloops; k++)
        dir += lane_dir_stmts(li.loops[k]->body, li.loops[k]->nbody, d->loop_vars[d->nloop - 1]);
    E->lane_rev = dir < 0 && !E->tg->gpu;
    /* R lane blocks when every lane loop runs on explicit vectors (which
     * stay in registers; the omp simd form's arrays do not): about 24
     * accumulator vectors of the 32 AVX-512 registers, each broadcast of a
     * group row feeding R of them */
    E->nblocks = 1;
    int vx = E->wide && !fixed, any = 0;   /* (explicit vectors: for loops whose bounds vary) */
    E->nvx_loop = 0;
    for (int k = 0; vx && k < li.nloops; k++) {
        for (int i = 0; i < li.nouter[k]; i++) E->shared[i] = li.outer[k][i];
        E->nshared = li.nouter[k];
        int ok = vx_loop_ok(E, li.loops[k]);
        vx = vx && ok;
        any = any || ok;
        if (ok) E->vx_loop[E->nvx_loop++] = li.loops[k];
        E->nshared = 0;
    }
    E->nacc = nacc;
    E->vx = vx;
    E->vx_any = any;
    E->nblocks = lane_blocks(E, E->ngroup);
    return 1;
}
