/* plan_gpu.c - the planner's CUDA decisions: split reductions (S threads
 * of a warp share a tile's top-level loop), mirrored tiles (a thread takes
 * a tile and its mirror image along the row), and chunks (K consecutive
 * elements a thread for loop-free bodies, stores gathered). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit.h"

/* ---- GPU split reductions -------------------------------------------------------
 * 'schedule split=S' (or TK_CUDA_TUNE): S consecutive threads, lanes of one
 * warp, share each tile. The body's first top-level loop, when its bounds
 * are the same in every lane and copy and its iterations meet only in
 * accumulators (float locals it only adds into, `s += e`, and never reads)
 * and in temporaries (assigned once, at the top of its body, and read
 * nowhere after it), is dealt out: thread r of the S runs iterations
 * lo + r, lo + r + S, ..., its accumulators starting at 0 (thread 0's
 * carry what the body set before the loop); after the loop a butterfly of
 * warp shuffles (__shfl_xor_sync) adds the S partial sums, every thread
 * getting the same bits (each step adds the same two values, in either
 * order), and thread 0 alone runs the rest of the body. A tile that crosses
 * the end of its row deals out its elements instead. The sum is
 * reassociated: S partial sums, each in the spec's order, added pairwise.
 * It is for ops whose outputs are too few to fill the GPU: rwkv_backward_w's
 * C x T outputs each sum the whole batch. The S threads of a tile are
 * consecutive lanes of one warp because the launcher's blocks are multiples
 * of 32 threads (tk_cuda_block_size). */
typedef struct split_scan {
    int writes[TK_MAX_LOCALS], adds[TK_MAX_LOCALS], reads[TK_MAX_LOCALS];
    unsigned char top_set[TK_MAX_LOCALS];   /* first touched by a plain assignment at the top level */
    int stores;
} split_scan;

static void split_reads(const emitter *E, const tk_expr *e, split_scan *sc) {
    if (!e) return;
    if (e->kind == TK_E_NAME)
        for (int r = 0; r < E->op->nlocals; r++)
            if (strcmp(E->op->locals[r].name, e->name) == 0) sc->reads[r]++;
    for (int i = 0; i < e->nargs; i++) split_reads(E, e->args[i], sc);
}

static void split_walk(const emitter *E, tk_stmt **body, int n, int top, split_scan *sc) {
    for (int i = 0; i < n; i++) {
        const tk_stmt *s = body[i];
        split_reads(E, s->value, sc);
        split_reads(E, s->lo, sc);
        split_reads(E, s->hi, sc);
        for (int j = 0; j < s->nindex; j++) split_reads(E, s->index[j], sc);
        if (s->kind == TK_S_STORE) sc->stores++;
        if (s->kind == TK_S_ASSIGN) {
            int r = s->ref;
            if (s->op == TK_OPC_NONE && top && !sc->writes[r] && !sc->reads[r]) sc->top_set[r] = 1;
            sc->writes[r]++;
            sc->adds[r] += s->op == TK_OPC_ADD && !s->declares;
        }
        split_walk(E, s->body, s->nbody, 0, sc);
        split_walk(E, s->orelse, s->norelse, 0, sc);
    }
}

/* Sets E->split and E->split_loop when the tile's top-level loop can be
 * dealt out (see above); after lane_plan. */
int split_plan(emitter *E) {
    const tk_opdecl *d = E->op->decl;
    E->split = 0;
    E->split_loop = NULL;
    if (!E->tg->gpu || !E->lanes || E->tune_split < 2) return 0;
    const tk_stmt *loop = NULL;
    for (int i = 0; i < d->nbody && !loop; i++)
        if (d->body[i]->kind == TK_S_FOR) loop = d->body[i];
    if (!loop || !lane_invariant(E, loop->lo) || !lane_invariant(E, loop->hi)) return 0;
    split_scan in, all;
    memset(&in, 0, sizeof in);
    memset(&all, 0, sizeof all);
    split_walk(E, loop->body, loop->nbody, 1, &in);
    split_walk(E, d->body, d->nbody, 0, &all);
    if (in.stores) return 0;
    int nacc = 0;
    memset(E->split_acc, 0, sizeof E->split_acc);
    for (int r = 0; r < E->op->nlocals; r++) {
        const tk_local *l = &E->op->locals[r];
        if (!in.writes[r] || l->is_loop) continue;
        int acc = in.adds[r] == in.writes[r] && in.reads[r] == 0 && E->arr[r] &&
                  (l->type == TK_V_F32 || l->type == TK_V_F64);
        int tmp = in.writes[r] == 1 && in.top_set[r] && all.reads[r] + all.writes[r] == in.reads[r] + in.writes[r];
        if (!acc && !tmp) return 0;
        E->split_acc[r] = (unsigned char)acc;
        nacc += acc;
    }
    if (nacc == 0) return 0;
    E->split = E->tune_split;
    E->split_loop = loop;
    return 1;
}

/* ---- GPU mirrored tiles -------------------------------------------------------
 * When a loop's bounds move with the innermost variable (rwkv: range(t + 1),
 * range(t, T)), a tile's work grows (or shrinks) along its row: at C = T =
 * 768, rwkv_forward's tile 47 of a row sums 48 times the terms of tile 0.
 * With one tile a thread, a block's 8 warps held tiles 0-7, 8-15, ... 40-47
 * of a row: the block, whose registers stay allocated until its last warp
 * ends, ran as long as its heaviest warp, its warps busy 51 % of that time
 * on average (bench/gpu_warp_model.py). With 'tiles=2' a thread takes tile
 * position p and n - 1 - p of the same row, whose work sums to about the
 * same for every p: every warp of a block does about the same work (the
 * model: blocks 88 % busy; a warp still waits, in each pass, for its
 * slowest thread, as before). The
 * grid-stride loop runs twice (gpu_tiles_head), over the positions p < n/2,
 * then over their mirror images; the middle tile of an odd row is taken
 * once. A warp's threads keep their layout (positions p..p+7 of 4 rows,
 * then their mirror images). Default: 2 when some loop's bounds read the
 * innermost variable (or a local set from it), else 1. */
static int names_uses(tk_stmt **body, int n, const char *v, const tk_expr *e, int depth) {
    if (!e || depth > 4) return 0;
    if (expr_uses(e, v)) return 1;
    for (int i = 0; i < n; i++) {   /* a local set from v, directly or through another */
        const tk_stmt *s = body[i];
        if (s->kind == TK_S_ASSIGN && expr_uses(e, s->name) && names_uses(body, n, v, s->value, depth + 1))
            return 1;
    }
    return 0;
}

static int bounds_move(const emitter *E, tk_stmt **body, int n, const char *v) {
    const tk_opdecl *d = E->op->decl;
    for (int i = 0; i < n; i++) {
        const tk_stmt *s = body[i];
        if (s->kind == TK_S_FOR && (names_uses(d->body, d->nbody, v, s->lo, 0) ||
                                    names_uses(d->body, d->nbody, v, s->hi, 0)))
            return 1;
        if (bounds_move(E, s->body, s->nbody, v) || bounds_move(E, s->orelse, s->norelse, v)) return 1;
    }
    return 0;
}

int mirror_plan(emitter *E) {
    const tk_opdecl *d = E->op->decl;
    E->mirror = 0;
    if (!E->tg->gpu || !E->lanes) return 0;
    if (E->tune_tiles) E->mirror = E->tune_tiles == 2;
    else E->mirror = bounds_move(E, d->body, d->nbody, d->loop_vars[d->nloop - 1]);
    return E->mirror;
}

/* Counts the stores of each output: at the top level, and nested. */
static void count_stores(tk_stmt **body, int n, int top, int *ntop, int *nnested) {
    for (int i = 0; i < n; i++) {
        const tk_stmt *s = body[i];
        if (s->kind == TK_S_STORE) (top ? ntop : nnested)[s->ref]++;
        count_stores(s->body, s->nbody, 0, ntop, nnested);
        count_stores(s->orelse, s->norelse, 0, ntop, nnested);
    }
}

/* Decides the chunk: K, the stepped divisions, the gathered stores;
 * returns 0 when the body does not qualify. */
int chunk_plan(emitter *E) {
    const tk_op *op = E->op;
    const tk_opdecl *d = op->decl;
    E->chunk = 0;
    memset(E->vst, 0, sizeof E->vst);
    if (E->plain || d->nloop == 0 || has_for(d->body, d->nbody) || d->noutputs > TK_MAX_TENSORS) return 0;
    size_t widest = 1;
    for (int i = 0; i < d->noutputs; i++) {
        size_t sz = tk_dtype_size(tk_variant_out_dtype(op, E->variant, i));
        if (sz > widest) widest = sz;
    }
    /* 32 bytes (16 for 1-byte outputs) unless tuned; at most 32 elements */
    const int cbytes = E->tune_chunk ? E->tune_chunk : widest == 1 ? 16 : 32;
    E->chunk = cbytes / (int)widest > 32 ? 32 : cbytes / (int)widest;
    plan_run(E);
    if (!E->segmented) E->nmemo = 0;   /* a numerator that does not grow by one: divided per element */
    E->segmented = 0;
    const char *t = d->loop_vars[d->nloop - 1];
    int ntop[TK_MAX_TENSORS] = {0}, nnested[TK_MAX_TENSORS] = {0};
    count_stores(d->body, d->nbody, 1, ntop, nnested);
    for (int i = 0; i < d->nbody; i++) {
        const tk_stmt *s = d->body[i];
        if (s->kind != TK_S_STORE || ntop[s->ref] != 1 || nnested[s->ref] != 0 || s->nindex == 0) continue;
        int ok = strcmp(s->index[s->nindex - 1]->name, t) == 0;
        for (int k = 0; k < s->nindex - 1; k++) ok = ok && strcmp(s->index[k]->name, t) != 0;
        size_t bytes = (size_t)E->chunk * tk_dtype_size(tk_variant_out_dtype(op, E->variant, s->ref));
        if (ok && bytes % 16 == 0) E->vst[s->ref] = s;
    }
    return 1;
}
