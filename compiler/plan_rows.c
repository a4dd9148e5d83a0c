/* plan_rows.c - the CPU plan of a row loop's inner loops: which of them the
 * C compiler may vectorise along the row, and their reductions.
 *
 * A sequential `for i in range(...)` inside a row loop may run its
 * iterations in any order, several at once, when the only state one
 * iteration hands to the next is reductions: accumulators declared before
 * the loop and updated in it only as `s += e`, `s -= e`, `s *= e`,
 * `s = s + e`, `s = s * e`, `m = max(m, e)` or `m = min(m, e)`, with e not
 * reading an accumulator, and read nowhere else in the loop. Its other
 * statements must be independent per i: locals the body declares (each
 * iteration has its own), and stores to elements of the iteration's outputs
 * at an index list that holds i itself (so two iterations never write one
 * element) and reads no local the loop assigns; the loop reads an output it
 * stores only at the same index list (each i its own element). No `if` and
 * no nested `for` (an outer loop over such loops stays sequential, its
 * inner loops are planned). Such a loop is printed under `#pragma omp simd`
 * with its reductions (emit_cpu.c, row_vec_open), which reorders the
 * additions of a sum as torch's kernels do (docs/spec.md).
 *
 * Across iterations: see plan_lanes_across. In parts: see plan_parts.
 * Jammed copies of adjacent iterations: see plan_jam. */
#include <string.h>

#include "emit.h"

/* The reduction kind of accumulator update s (not a declaration), or 0
 * when s is no update of a reduction: '+' (+=, -=, s = s + e), '*' (*=,
 * s = s * e), 'M' (m = max(m, e)), 'm' (m = min(m, e)). *operand: e. */
static char update_kind(const tk_stmt *s, const tk_expr **operand) {
    const tk_expr *v = s->value;
    *operand = v;
    if (s->op == TK_OPC_ADD || s->op == TK_OPC_SUB) return '+';
    if (s->op == TK_OPC_MUL) return '*';
    if (s->op != TK_OPC_NONE || v->nargs != 2) return 0;
    const tk_expr *a = v->args[0];
    if (a->kind != TK_E_NAME || strcmp(a->name, s->name) != 0) return 0;
    *operand = v->args[1];
    if (v->kind == TK_E_BINARY && v->op == TK_OPC_ADD) return '+';
    if (v->kind == TK_E_BINARY && v->op == TK_OPC_MUL) return '*';
    if (v->kind == TK_E_CALL && strcmp(v->name, "max") == 0) return 'M';
    if (v->kind == TK_E_CALL && strcmp(v->name, "min") == 0) return 'm';
    return 0;
}

/* Whether e reads output `out` at an index list other than idx (n
 * indices); idx NULL: at all. */
static int reads_other(const tk_expr *e, int out, tk_expr *const *idx, int n) {
    if (!e) return 0;
    if (e->kind == TK_E_INDEX && e->is_out && e->ref == out) {
        if (!idx || e->nargs != n) return 1;
        for (int k = 0; k < n; k++)
            if (!tk_expr_equal(e->args[k], idx[k])) return 1;
    }
    for (int i = 0; i < e->nargs; i++)
        if (reads_other(e->args[i], out, idx, n)) return 1;
    return 0;
}

/* Whether e reads a local the loop assigns (assigned[slot]). */
static int reads_assigned(const tk_op *op, const tk_expr *e, const unsigned char *assigned) {
    for (int r = 0; r < op->nlocals; r++)
        if (assigned[r] && expr_uses(e, op->locals[r].name)) return 1;
    return 0;
}

/* Whether the stores of loop's body to each output share one index list
 * holding the loop variable itself, reading no local the loop assigns,
 * and the body reads an output it stores only there. */
static int stores_independent(const tk_op *op, const tk_stmt *loop, const unsigned char *assigned) {
    for (int out = 0; out < op->decl->noutputs; out++) {
        const tk_stmt *first = NULL;
        for (int i = 0; i < loop->nbody; i++) {
            const tk_stmt *s = loop->body[i];
            if (s->kind != TK_S_STORE || s->ref != out) continue;
            if (!first) {
                int has_i = 0;
                for (int k = 0; k < s->nindex; k++) {
                    const tk_expr *x = s->index[k];
                    if (x->kind == TK_E_NAME && strcmp(x->name, loop->name) == 0) has_i = 1;
                    else if (reads_assigned(op, x, assigned)) return 0;
                }
                if (!has_i) return 0;
                first = s;
            }
        }
        if (!first) continue;
        for (int i = 0; i < loop->nbody; i++) {
            const tk_stmt *s = loop->body[i];
            if (reads_other(s->value, out, first->index, first->nindex)) return 0;
            for (int k = 0; k < s->nindex; k++)
                if (reads_other(s->index[k], out, NULL, 0)) return 0;
            if (s->kind == TK_S_STORE && s->ref == out) {
                if (s->nindex != first->nindex) return 0;
                for (int k = 0; k < s->nindex; k++)
                    if (!tk_expr_equal(s->index[k], first->index[k])) return 0;
            }
        }
    }
    return 1;
}

/* Fills *v and returns 1 when inner loop `loop` may be vectorised (see the
 * head of this file). */
static int vec_loop(const tk_op *op, const tk_stmt *loop, tk_row_vec *v) {
    unsigned char declared[TK_MAX_LOCALS] = {0}, assigned[TK_MAX_LOCALS] = {0};
    char kind[TK_MAX_LOCALS] = {0};
    memset(v, 0, sizeof *v);
    v->loop = loop;
    assigned[loop->ref] = 1;
    for (int i = 0; i < loop->nbody; i++) {
        const tk_stmt *s = loop->body[i];
        if (s->kind == TK_S_IF || s->kind == TK_S_FOR) return 0;
        if (s->kind != TK_S_ASSIGN) continue;
        assigned[s->ref] = 1;
        if (s->declares) declared[s->ref] = 1;
        if (declared[s->ref]) continue;               /* an iteration's own local */
        const tk_expr *operand;
        char k = update_kind(s, &operand);
        tk_vtype t = op->locals[s->ref].type;
        if (!k || op->locals[s->ref].is_loop || (t != TK_V_INT && t != TK_V_F32 && t != TK_V_F64)) return 0;
        if (kind[s->ref] && kind[s->ref] != k) return 0;
        if (!kind[s->ref]) {
            if (v->nred == TK_MAX_ROW_RED) return 0;
            v->red[v->nred] = s->ref;
            v->red_op[v->nred++] = k;
        }
        kind[s->ref] = k;
    }
    /* an accumulator is read only as its own update's accumulator operand */
    for (int j = 0; j < v->nred; j++) {
        const char *name = op->locals[v->red[j]].name;
        for (int i = 0; i < loop->nbody; i++) {
            const tk_stmt *s = loop->body[i];
            const tk_expr *operand = s->value;
            if (s->kind == TK_S_ASSIGN && s->ref == v->red[j]) update_kind(s, &operand);
            if (expr_uses(operand, name)) return 0;
            for (int k = 0; k < s->nindex; k++)
                if (expr_uses(s->index[k], name)) return 0;
        }
    }
    return stores_independent(op, loop, assigned);
}

/* Whether e reads at an index the kernel checks at run time (a gather's
 * data-dependent index in a kernel that checks them). */
static int expr_checked(const tk_plan *P, const tk_expr *e) {
    if (!e) return 0;
    if (e->kind == TK_E_INDEX && P->data_checked && e->data_index) return 1;
    for (int i = 0; i < e->nargs; i++)
        if (expr_checked(P, e->args[i])) return 1;
    return 0;
}

/* Whether statement s (with what it nests) makes an access the kernel
 * checks at run time: a checked store (conditional, recording the first
 * failure) or a checked read. Such a loop runs as written. */
static int stmt_checked(const tk_plan *P, const tk_stmt *s) {
    if (s->kind == TK_S_STORE && store_checks(P, s)) return 1;
    if (expr_checked(P, s->value) || expr_checked(P, s->lo) || expr_checked(P, s->hi)) return 1;
    for (int k = 0; k < s->nindex; k++)
        if (expr_checked(P, s->index[k])) return 1;
    for (int i = 0; i < s->nbody; i++)
        if (stmt_checked(P, s->body[i])) return 1;
    for (int i = 0; i < s->norelse; i++)
        if (stmt_checked(P, s->orelse[i])) return 1;
    return 0;
}

/* Plans every inner loop of body at any depth into P->rows. */
static void plan_block(tk_plan *P, tk_stmt **body, int n) {
    for (int i = 0; i < n; i++) {
        const tk_stmt *s = body[i];
        if (s->kind == TK_S_FOR && P->rows.nvec < TK_MAX_ROW_VEC && !stmt_checked(P, s) &&
            vec_loop(P->op, s, &P->rows.vec[P->rows.nvec])) {
            P->rows.nvec++;
            continue;
        }
        plan_block(P, s->body, s->nbody);
        plan_block(P, s->orelse, s->norelse);
    }
}

/* Whether the loops of body (at any depth) have bounds that read no local
 * and not the innermost loop variable `inner` (the same in every lane), and
 * no `if` holds a loop: a lane tile prints such loops once for all its
 * lanes (emit_tile.c, tile_block). */
static int lanes_fit(const tk_op *op, tk_stmt **body, int n, const char *inner, int in_if) {
    for (int i = 0; i < n; i++) {
        const tk_stmt *s = body[i];
        if (s->kind == TK_S_FOR) {
            if (in_if || expr_uses(s->lo, inner) || expr_uses(s->hi, inner)) return 0;
            for (int r = 0; r < op->nlocals; r++)
                if (expr_uses(s->lo, op->locals[r].name) || expr_uses(s->hi, op->locals[r].name)) return 0;
        }
        if (!lanes_fit(op, s->body, s->nbody, inner, in_if || s->kind == TK_S_IF) ||
            !lanes_fit(op, s->orelse, s->norelse, inner, 1))
            return 0;
    }
    return 1;
}

/* Whether statement s (with what it nests) assigns or reads local `name`. */
static int mentions(const tk_stmt *s, const char *name) {
    if (s->kind == TK_S_ASSIGN && strcmp(s->name, name) == 0) return 1;
    if (expr_uses(s->value, name) || expr_uses(s->lo, name) || expr_uses(s->hi, name)) return 1;
    for (int k = 0; k < s->nindex; k++)
        if (expr_uses(s->index[k], name)) return 1;
    for (int i = 0; i < s->nbody; i++)
        if (mentions(s->body[i], name)) return 1;
    for (int i = 0; i < s->norelse; i++)
        if (mentions(s->orelse[i], name)) return 1;
    return 0;
}

/* The lane loops of a lane tile: each run of statements between loops of
 * a block is one loop over the lanes (emit_tile.c, tile_block). Records in
 * grp[slot] the run local `slot` appears in (0: none yet, -1: several),
 * and in own[slot] whether that run's first statement naming it declares
 * it (so a lane's value never outlives its lane loop). */
static void lane_runs(const tk_op *op, tk_stmt **body, int n, int *next, int *grp, unsigned char *own) {
    int i = 0;
    while (i < n) {
        if (body[i]->kind == TK_S_FOR) {
            lane_runs(op, body[i]->body, body[i]->nbody, next, grp, own);
            i++;
            continue;
        }
        int g = ++*next, k = i;
        while (k < n && body[k]->kind != TK_S_FOR) k++;
        for (int r = 0; r < op->nlocals; r++) {
            const char *name = op->locals[r].name;
            for (int j = i; j < k; j++) {
                if (!mentions(body[j], name)) continue;
                const tk_stmt *s = body[j];
                own[r] = s->kind == TK_S_ASSIGN && s->ref == r && s->declares && !expr_uses(s->value, name);
                grp[r] = grp[r] == 0 ? g : -1;
                break;
            }
        }
        i = k;
    }
}

/* Lanes across adjacent iterations: when the row loop's innermost
 * variable is a parallel one (`for b, _, c in y`: c, the contiguous dim of
 * the output), V iterations c .. c + V - 1 run together as the lanes of
 * omp simd loops, the sequential loops outside
 * the lane loops (the lane tile of emit_tile.c). float32 arithmetic only
 * (exp() is tk_vexpf there; float64's exp does not vectorise). */
static void plan_lanes_across(tk_plan *P) {
    const tk_opdecl *d = P->op->decl;
    if (d->nloop == 0 || tk_owned_dim(d->loop_vars[d->nloop - 1])) return;
    if (tk_variant_float_type(P->op, P->variant) == TK_F64) return;
    if (P->op->has_sum) return;   /* two lanes could add into one element of a sum */
    if (!lanes_fit(P->op, d->body, d->nbody, d->loop_vars[d->nloop - 1], 0)) return;
    /* Up to 128 lanes a block, at least 8 (one AVX2 vector): the sequential
     * loop walks t once for the whole block, so each step reads 512 bytes
     * of a row of k and v instead of 128, and a row loop's strided walk
     * (wkv: a 3 KB step over t) touches each page for 4 times the work
     * (wkv B=8 T=1024 C=768 on one thread, idle: 32 lanes 44 ms, 64 29 ms,
     * 128 26 ms, 256 26 ms; bench/results/2026-12-05-cpu-row-loops-wkv-blocks.txt).
     * The state arrays (3 x 512 B for wkv) stay in L1. */
    P->rows.lanes = 128;
    P->rows.lanes_min = 8;
    /* held per lane (an array through the tile): the locals that live
     * across lane loops (WKV's state aa, bb, pp); the rest are private
     * scalars of the one lane loop that declares and uses them (kt, e1,
     * ...), which the C compiler keeps in registers */
    int grp[TK_MAX_LOCALS] = {0}, next = 0;
    unsigned char own[TK_MAX_LOCALS] = {0};
    lane_runs(P->op, d->body, d->nbody, &next, grp, own);
    assigned_locals(d->body, d->nbody, P->rows.arr);
    for (int r = 0; r < P->op->nlocals; r++)
        if (grp[r] > 0 && own[r]) P->rows.arr[r] = 0;
}

/* Whether e (NULL: none) reads an output back. */
static int reads_output(const tk_expr *e) {
    if (!e) return 0;
    if (e->kind == TK_E_INDEX && e->is_out) return 1;
    for (int i = 0; i < e->nargs; i++)
        if (reads_output(e->args[i])) return 1;
    return 0;
}

/* Whether statement s (with what it nests) reads an output in an index,
 * bound or condition, or in a value other than an accumulation's own
 * read-back (see adds_only). */
static int stmt_reads_output(const tk_stmt *s, int skip_acc);

/* Whether store s is an accumulation `o[idx] = o[idx] + e`, e reading no
 * output. */
static int accumulates(const tk_stmt *s) {
    const tk_expr *v = s->value;
    if (s->kind != TK_S_STORE || (s->op != TK_OPC_NONE && s->op != TK_OPC_ADD) || v->kind != TK_E_BINARY ||
        v->op != TK_OPC_ADD)   /* (a sum's `o[idx] += e` is kept as this: parse.c) */
        return 0;
    const tk_expr *a = v->args[0];
    if (a->kind != TK_E_INDEX || !a->is_out || a->ref != s->ref || a->nargs != s->nindex) return 0;
    for (int k = 0; k < s->nindex; k++)
        if (!tk_expr_equal(a->args[k], s->index[k])) return 0;
    return !reads_output(v->args[1]);
}

static int block_reads_output(tk_stmt **body, int n, int skip_acc) {
    for (int i = 0; i < n; i++)
        if (stmt_reads_output(body[i], skip_acc)) return 1;
    return 0;
}

static int stmt_reads_output(const tk_stmt *s, int skip_acc) {
    if (reads_output(s->lo) || reads_output(s->hi)) return 1;
    for (int k = 0; k < s->nindex; k++)
        if (reads_output(s->index[k])) return 1;
    if (!(skip_acc && accumulates(s)) && reads_output(s->value)) return 1;
    return block_reads_output(s->body, s->nbody, skip_acc) || block_reads_output(s->orelse, s->norelse, skip_acc);
}

/* Whether every store of body (any depth) is an accumulation and every
 * assignment is to a local declared in `declared` (set here as the walk
 * meets declarations: a local first assigned inside the loop). */
static int adds_only(tk_stmt **body, int n, unsigned char *declared) {
    for (int i = 0; i < n; i++) {
        const tk_stmt *s = body[i];
        if (s->kind == TK_S_STORE && !accumulates(s)) return 0;
        if (s->kind == TK_S_ASSIGN) {
            if (s->declares) declared[s->ref] = 1;
            if (!declared[s->ref]) return 0;
        }
        if (s->kind == TK_S_FOR) declared[s->ref] = 1;
        if (!adds_only(s->body, s->nbody, declared) || !adds_only(s->orelse, s->norelse, declared)) return 0;
    }
    return 1;
}

/* Whether statement s (any depth) stores to an output, and whether it
 * assigns a local. */
static void stores_assigns(const tk_stmt *s, int *stores, int *assigns) {
    if (s->kind == TK_S_STORE) *stores = 1;
    if (s->kind == TK_S_ASSIGN) *assigns = 1;
    for (int i = 0; i < s->nbody; i++) stores_assigns(s->body[i], stores, assigns);
    for (int i = 0; i < s->norelse; i++) stores_assigns(s->orelse[i], stores, assigns);
}

/* In parts: a row loop of one iteration (every top-level variable '_', no
 * batch dims: a weight's gradient summed over rows, layernorm_backward_wb)
 * spends its time in its last statement, a loop over rows that only adds
 * into outputs. Its range may be cut into parts run on several threads,
 * each adding into its own copy of the outputs, which are then added up,
 * when
 *   - every store inside it is `o[idx] = o[idx] + e`, e reading no output,
 *     and the loop reads outputs nowhere else (each part's sums are its own);
 *   - every local it assigns is declared inside it (no state carried from
 *     one row to the next);
 *   - the statements before it read no output back, and those that store
 *     (the zeroing of the outputs) assign no local: part 0 runs them on the
 *     real outputs, the other parts skip them and start from the additive
 *     identity (-0.0; a bool output, which no addition stores, is added
 *     False).
 * The result is the sum of the parts' sums: the additions reassociate, as
 * torch's reductions do. The caller (shim/kernels.cpp) picks the number of
 * parts from the size of the inputs, never from the thread count, so a
 * call's result does not depend on the threads it gets. */
static void plan_parts(tk_plan *P) {
    const tk_opdecl *d = P->op->decl;
    if (d->nbody == 0 || d->body[d->nbody - 1]->kind != TK_S_FOR) return;
    for (int k = 0; k < d->nloop; k++)
        if (!tk_owned_dim(d->loop_vars[k])) return;
    for (int o = 0; o < d->noutputs; o++)
        if (strcmp(d->outputs[o].name, d->loop_over) == 0 && has_ell(&d->outputs[o])) return;
    const tk_stmt *loop = d->body[d->nbody - 1];
    if (d->nbody > (int)sizeof P->rows.part0) return;
    for (int i = 0; i + 1 < d->nbody; i++) {
        int stores = 0, assigns = 0;
        if (stmt_reads_output(d->body[i], 0)) return;
        stores_assigns(d->body[i], &stores, &assigns);
        if (stores && assigns) return;
        P->rows.part0[i] = (unsigned char)stores;
    }
    unsigned char declared[TK_MAX_LOCALS] = {0};
    declared[loop->ref] = 1;
    if (reads_output(loop->lo) || reads_output(loop->hi) || !adds_only(loop->body, loop->nbody, declared) ||
        block_reads_output(loop->body, loop->nbody, 1))
        return;
    P->rows.parts = loop;
}

/* CUDA, with schedule parts=N: sums, or a row loop in parts (plan_parts),
 * run as threads that each add into their own copies (plan.h, gpu_parts). */
void gpu_parts_plan(tk_plan *P) {
    memset(&P->rows, 0, sizeof P->rows);
    P->gpu_parts = 0;
    memset(P->part_copy, 0, sizeof P->part_copy);
    if (!P->row_loop || P->target != TK_TARGET_CUDA || P->sched[TK_SCHED_PARTS] < 2) return;
    plan_parts(P);
    if (!P->rows.parts && !P->op->has_sum) return;
    P->gpu_parts = P->sched[TK_SCHED_PARTS];
    for (int o = 0; o < P->op->decl->noutputs; o++)
        P->part_copy[o] = P->rows.parts != NULL || P->op->out_sum[o];
}

/* Whether e reads an input tensor at an index that names neither loop
 * variable `jv` nor a local other than a loop variable: the same element
 * for every jammed copy at once. */
static int shared_read(const tk_op *op, const tk_expr *e, const char *jv) {
    if (!e) return 0;
    if (e->kind == TK_E_INDEX && !e->is_out) {
        int moves = 0;
        for (int k = 0; k < e->nargs; k++) {
            moves |= expr_uses(e->args[k], jv);
            for (int r = 0; r < op->nlocals; r++)
                if (!op->locals[r].is_loop) moves |= expr_uses(e->args[k], op->locals[r].name);
        }
        if (!moves) return 1;
    }
    for (int i = 0; i < e->nargs; i++)
        if (shared_read(op, e->args[i], jv)) return 1;
    return 0;
}

/* Whether a loop nested depth loops deep or more in body (a loop inside a
 * loop of the row: depth 2) reads an input the jammed copies share. */
static int nested_shared_read(const tk_op *op, tk_stmt **body, int n, const char *jv, int depth) {
    for (int i = 0; i < n; i++) {
        const tk_stmt *s = body[i];
        if (depth <= 0 && s->kind != TK_S_FOR &&
            (shared_read(op, s->value, jv) || shared_read(op, s->lo, jv) || shared_read(op, s->hi, jv)))
            return 1;
        for (int k = 0; depth <= 0 && k < s->nindex; k++)
            if (shared_read(op, s->index[k], jv)) return 1;
        int inner = depth - (s->kind == TK_S_FOR);
        if (nested_shared_read(op, s->body, s->nbody, jv, inner) ||
            nested_shared_read(op, s->orelse, s->norelse, jv, depth))
            return 1;
    }
    return 0;
}

/* Jammed rows: a row loop whose body reads, inside a loop nested in
 * another, inputs at indices that do not move with the innermost parallel
 * variable v (attention's keys and values k[b, h, u, d] for queries along
 * t: `for b, h, t, _ in o`, the loop over u holding loops over d) runs 4
 * adjacent iterations along v as unroll-and-jam copies (emit_cpu.c,
 * jammed_rows): each such read is loaded once for the 4, and the copies'
 * reductions and exp() calls are independent work side by side. Not with
 * sums (the copies would reorder their additions), rand(), or more than
 * 32 locals (4 copies of each). */
static void plan_jam(tk_plan *P) {
    const tk_op *op = P->op;
    const tk_opdecl *d = op->decl;
    int jv = -1;
    for (int i = 0; i < d->nloop; i++)
        if (!tk_owned_dim(d->loop_vars[i])) jv = i;
    if (jv < 0 || op->has_sum || op->random || op->nlocals > 32) return;
    if (!nested_shared_read(op, d->body, d->nbody, d->loop_vars[jv], 2)) return;
    P->rows.jam = 4;
    P->rows.jam_var = jv;
}

void plan_rows(tk_plan *P) {
    memset(&P->rows, 0, sizeof P->rows);
    if (!P->row_loop || P->plain || P->checked || P->target != TK_TARGET_C) return;
    /* loops without run-time checks vectorise beside those with (a gather
     * read outside them, a checked store); lanes across iterations and
     * parts only where nothing is checked */
    plan_block(P, P->op->decl->body, P->op->decl->nbody);
    if (P->data_checked || bounds_any_check(P)) return;
    plan_lanes_across(P);
    plan_parts(P);
    if (!P->rows.lanes && !P->rows.parts) plan_jam(P);
}

/* The element-wise form on the CPU whose body has top-level loops, when
 * its narrow body would run them in unroll-and-jam copies (lane tiles
 * refused: locals carried through the loops, or no vector the loops share
 * between group rows): the body printed as a row loop's lanes across
 * iterations instead (plan_lanes_across; emit_cpu.c, cpu_row_loop), V
 * adjacent elements along the innermost dim walking the loops once, their
 * statements omp simd loops over the lanes with exp() as tk_vexpf. RWKV's
 * wkv_backward_wu (f32, B=8 T=256 C=512, one thread): 9.6 ms in 4 jammed
 * copies, 2.3 as lanes; the quadratic WKV 10.8 -> 0.9
 * (bench/results/2026-12-07-cpu-elementwise-lanes.txt).
 * Sets P->across and P->rows; returns P->across. */
int plan_across(tk_plan *P) {
    const tk_opdecl *d = P->op->decl;
    memset(&P->rows, 0, sizeof P->rows);
    P->across = 0;
    if (P->row_loop || P->plain || P->checked || P->data_checked || P->target != TK_TARGET_C) return 0;
    if (d->nloop == 0 || P->op->random || !has_top_level_for(d)) return 0;   /* (rand's counters: the element-wise kernel's) */
    /* every read that moves with the lanes a vector load: a gather across
     * them loses to the copies' loops, which omp simd vectorises along a
     * loop of their own (a dot-product matmul, y[b, n] = sum_k x[b, k] *
     * w[n, k]: 2.3 ms in copies, 59 as lanes) */
    int unit = 0, other = 0;
    lane_loads_stmts(d->body, d->nbody, d->loop_vars[d->nloop - 1], &unit, &other);
    if (other) return 0;
    plan_lanes_across(P);
    P->across = P->rows.lanes > 0;
    return P->across;
}

const tk_row_vec *row_vec_find(const tk_plan *P, const tk_stmt *loop) {
    for (int i = 0; i < P->rows.nvec; i++)
        if (P->rows.vec[i].loop == loop) return &P->rows.vec[i];
    return NULL;
}
