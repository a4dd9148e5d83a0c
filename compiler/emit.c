/* emit.c - renders a checked op as C (CPU) or CUDA C source: the entry
 * points, the GPU tuning knobs, and the kernel skeleton (prologue, index
 * decomposition). The body is the same text for both targets; what differs
 * (function head, how the kernel arguments are reached, the index-space
 * loop) is data in k_targets. The other emit_*.c files print the parts. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>

#include "emit.h"

static const target_desc k_targets[] = {   /* ORDER tk_target */
    {"void ", "(const tk_kargs *a, tk_i64 begin, tk_i64 end)", "a->", "restrict", 0},  /* see cpu_kernel */
    {"extern \"C\" __global__ void ", "(const tk_kargs a)", "a.", "__restrict__", 1},
};

/* ORDER DTYPE: the C type that stores one element. */
const char *const k_ctype[TK_DTYPE_COUNT] = {
    "tk_u8", "tk_u8", "tk_i8", "tk_i16", "tk_i32", "tk_i64", "tk_u16", "tk_u16", "float", "double"};

/* ---- GPU tuning ------------------------------------------------------------------
 * TK_CUDA_TUNE="lanes=8,rows=2,warp_rows=8,chunk=64" overrides the CUDA tile
 * shape the emitter picks: lanes (outputs along the innermost dim a thread
 * computes: 4, 8, 16), rows (group rows a thread computes at most: 1, 2, 4,
 * 8), warp_rows (rows a warp's threads spread over: 1 to 32, a power of two),
 * chunk (bytes of the widest output a loop-free kernel's thread writes:
 * 16 to 128), split (threads that share a tile's top-level reduction
 * loop: 1 to 32, see split_plan) and ldg (bytes of one load of a stream:
 * 4, 8, 16, see stream_find; default 16) and tiles (tiles a thread takes: 1, or 2, a
 * tile and its mirror image along the row, see mirror_plan), and regs (at most
 * that many registers a thread: __maxnreg__, 32 to 248, a multiple of 8; ptxas
 * spills the rest to local memory; not given: as many as ptxas likes, at most
 * 255). Any key may be left out. It is the knob for measuring shapes
 * on a GPU (ci/gpu_tune.py), read at each emission; the emitted source, and so
 * the kernel cache's key, records the shape. A malformed value is an error.
 * An op's 'schedule' line (docs/spec.md) sets the same items for that op;
 * TK_CUDA_TUNE overrides them item by item. The launcher's grid sizing
 * (tk_emit_cuda_per_thread) reads it again: set it before the process's first
 * CUDA call of an op and leave it. */
typedef struct gpu_tune {
    int v[TK_SCHED_KEYS];   /* indexed as tk_sched_keys; 0: not given */
} gpu_tune;
enum { TUNE_LANES, TUNE_ROWS, TUNE_WARP_ROWS, TUNE_CHUNK, TUNE_SPLIT, TUNE_LDG, TUNE_TILES, TUNE_REGS };   /* ORDER tk_sched_keys */

static tk_status gpu_tune_parse(gpu_tune *t, char *err, size_t errsize) {
    memset(t, 0, sizeof *t);
    const char *env = getenv("TK_CUDA_TUNE");
    if (!env || !env[0]) return TK_OK;
    const char *p = env;
    while (*p) {
        size_t n = strcspn(p, "=,");
        int k = tk_sched_find(p, n);
        char *end = NULL;
        const char *digits = p + n + 1;
        long v = (k >= 0 && p[n] == '=' && *digits >= '0' && *digits <= '9') ? strtol(digits, &end, 10) : 0;
        if (k < 0 || !end || (*end && *end != ',') || (*end == ',' && !end[1]) || !tk_sched_valid(k, v) ||
            t->v[k]) {
            snprintf(err, errsize, "TK_CUDA_TUNE=\"%s\": expected key=value items separated by commas, each "
                     "key once: lanes 4..16, rows 1..8, warp_rows 1..32, chunk 16..128 (bytes), split 1..32, ldg 4..16 (bytes), tiles 1..2, each a power of two, regs 32..248, a multiple of 8",
                     env);
            return TK_ERR_INVALID;
        }
        t->v[k] = (int)v;
        p = *end ? end + 1 : end;
    }
    return TK_OK;
}

/* ---- kernel skeleton -------------------------------------------------------- */

int expr_uses(const tk_expr *e, const char *name) {
    if (!e) return 0;
    if ((e->kind == TK_E_NAME || e->kind == TK_E_INDEX) && strcmp(e->name, name) == 0) return 1;
    for (int i = 0; i < e->nargs; i++)
        if (expr_uses(e->args[i], name)) return 1;
    return 0;
}

/* Whether the body reads name (a parameter, dim or tensor). */
static int body_uses(tk_stmt **body, int n, const char *name) {
    for (int i = 0; i < n; i++) {
        const tk_stmt *s = body[i];
        if (expr_uses(s->value, name) || expr_uses(s->lo, name) || expr_uses(s->hi, name)) return 1;
        for (int j = 0; j < s->nindex; j++)
            if (expr_uses(s->index[j], name)) return 1;
        if (body_uses(s->body, s->nbody, name) || body_uses(s->orelse, s->norelse, name)) return 1;
    }
    return 0;
}

int used(const emitter *E, const char *name) {
    return body_uses(E->op->decl->body, E->op->decl->nbody, name);
}

/* Declares element pointers and explicit-dim strides of tensor p in slot. */
static void tensor_prologue(emitter *E, const tk_param *p, int slot, tk_dtype dt, int is_out) {
    const char *A = E->tg->args;
    int n = tk_explicit_dims(p);
    line(E, "%s%s *%s t_%s = (%s%s *)%st[%d].data;", is_out ? "" : "const ", k_ctype[dt],
         E->tg->restrict_kw, p->name, is_out ? "" : "const ", k_ctype[dt], A, slot);
    for (int i = 0; i < n - (E->tg->gpu ? 0 : 1); i++)
        line(E, "const tk_i64 s_%s_%d = %st[%d].stride[%st[%d].ndim - %d];", p->name, i, A, slot, A, slot, n - i);
}

/* Calls fn(p, i) for each tensor (inputs the body reads, then outputs)
 * with at least one explicit dim; i is its slot. */
void each_strided(emitter *E, void (*fn)(emitter *, const tk_param *, int, int), int arg) {
    const tk_op *op = E->op;
    for (int i = 0; i < op->decl->nparams && !E->outputs_only; i++) {
        const tk_param *p = param(E, i);
        if (p->kind == TK_P_TENSOR && used(E, p->name) && tk_explicit_dims(p) > 0) fn(E, p, op->slot[i], arg);
    }
    for (int i = 0; i < op->decl->noutputs; i++)
        if (tk_explicit_dims(output(E, i)) > 0) fn(E, output(E, i), op->out_slot[i], arg);
}

void prologue(emitter *E) {
    const tk_op *op = E->op;
    const tk_opdecl *d = op->decl;
    const char *A = E->tg->args;
    for (int i = 0; i < d->nparams; i++) {
        const tk_param *p = param(E, i);
        if (p->kind == TK_P_TENSOR && used(E, p->name))
            tensor_prologue(E, p, op->slot[i], tk_variant_dtype(op, E->variant, i), 0);
    }
    for (int i = 0; i < d->noutputs; i++)
        tensor_prologue(E, output(E, i), op->out_slot[i], tk_variant_out_dtype(op, E->variant, i), 1);
    for (int i = 0; i < d->nparams; i++) {
        const tk_param *p = param(E, i);
        if (!used(E, p->name)) continue;
        if (p->kind == TK_P_INT) line(E, "const tk_i64 p_%s = %si[%d];", p->name, A, op->slot[i]);
        if (p->kind == TK_P_BOOL) line(E, "const int p_%s = (int)%si[%d];", p->name, A, op->slot[i]);
        if (p->kind == TK_P_FLOAT)
            line(E, "const %s p_%s = (%s)%sf[%d];", k_vctype[E->ftype], p->name, k_vctype[E->ftype], A, op->slot[i]);
    }
    for (int i = 0; i < op->ndims; i++)
        if (used(E, op->dims[i].name)) line(E, "const tk_i64 d_%s = %si[%d];", op->dims[i].name, A, op->dims[i].slot);
    const tk_param *lo = output(E, op->loop_out);
    int lslot = op->out_slot[op->loop_out];
    for (int i = 0; i < d->nloop; i++)
        line(E, "const tk_i64 n_%s = %st[%d].size[%st[%d].ndim - %d];", d->loop_vars[i], A, lslot, A, lslot,
             d->nloop - i);
    (void)lo;
}

/* Splits r (a flat index) into the loop variables (all but the last when
 * inner_last) and the batch offsets of the '...' tensors. */
void decompose(emitter *E, int skip_last) {
    const tk_op *op = E->op;
    const tk_opdecl *d = op->decl;
    const char *A = E->tg->args;
    line(E, "tk_i64 r = %s;", E->gpu_tiles && E->lanes ? "tk_lin" : "lin");
    /* with lane-tile groups the kernel walks its index space with the group
     * dim next to the innermost one (any order covers it; the rows of a group
     * become neighbours) */
    int order[TK_MAX_DIMS + 1], k = 0;
    if (d->nloop > 0) order[k++] = d->nloop - 1;
    if (E->ngroup > 1) order[k++] = E->gdim;
    for (int i = d->nloop - 2; i >= 0; i--)
        if (!(E->ngroup > 1 && i == E->gdim)) order[k++] = i;
    if (E->stepped) {   /* GPU chunks: digits kept by chunk_counters */
        for (int o = 0; o < d->nloop; o++) {
            if (o == 0) line(E, "const tk_i64 v_%s = tk_x0 * %d;", d->loop_vars[order[o]], E->chunk);
            else line(E, "const tk_i64 v_%s = tk_x%d;", d->loop_vars[order[o]], o);
        }
        line(E, "r = tk_x%d;", d->nloop);
    }
    for (int o = 0; o < d->nloop && !E->stepped; o++) {
        int i = order[o];
        const char *v = d->loop_vars[i];
        if (E->tg->gpu) {   /* one (32-bit when it fits) division a dim, the remainder from it */
            char nb[80];
            int scale = 1;   /* tiles: r counts them, v_ is their first element */
            snprintf(nb, sizeof nb, "n_%s", v);
            if (E->gpu_tiles && i == d->nloop - 1) {
                snprintf(nb, sizeof nb, "tk_ntile");
                scale = E->chunk ? E->chunk : E->lanes;
            } else if (E->gpu_tiles && E->ngroup > 1 && i == E->gdim) {
                snprintf(nb, sizeof nb, "tk_ngroup");
                scale = E->ngroup;
            }
            if (E->lanes) {
                /* tiles: once per tile of V x G outputs, so speed does not
                 * matter, and the 64-bit form costs fewer registers (rwkv f32
                 * on sm_90: 96 / 79 instead of 128 / 105; bench/gpu_static.py) */
                line(E, "const tk_i64 v_%s = r %% %s * %d;", v, nb, scale);
                line(E, "r /= %s;", nb);
                continue;
            }
            line(E, "const tk_i64 q_%s = tk_udiv(r, %s);", v, nb);
            if (scale > 1) line(E, "const tk_i64 v_%s = (r - q_%s * %s) * %d;", v, v, nb, scale);
            else line(E, "const tk_i64 v_%s = r - q_%s * %s;", v, v, nb);
            line(E, "r = q_%s;", v);
            continue;
        }
        if (i == d->nloop - 1 && skip_last) line(E, "tk_i64 v_%s = r %% n_%s;", v, v);
        else line(E, "const tk_i64 v_%s = r %% n_%s;", v, v);
        line(E, "r /= n_%s;", v);
    }
    if (!op->has_ellipsis) {
        line(E, "(void)r;");
        return;
    }
    int lslot = op->out_slot[op->loop_out];
    for (int i = 0; i < d->nparams; i++)
        if (param(E, i)->kind == TK_P_TENSOR && has_ell(param(E, i)) && used(E, param(E, i)->name))
            line(E, "tk_i64 o_%s = 0;", param(E, i)->name);
    for (int i = 0; i < d->noutputs; i++) line(E, "tk_i64 o_%s = 0;", output(E, i)->name);
    line(E, "for (tk_i64 bd = %snbatch - 1; bd >= 0; --bd) {", A);
    E->indent++;
    line(E, "const tk_i64 bq = tk_udiv(r, %st[%d].size[bd]);", A, lslot);
    line(E, "const tk_i64 bi = r - bq * %st[%d].size[bd];", A, lslot);
    line(E, "r = bq;");
    for (int i = 0; i < d->nparams; i++)
        if (param(E, i)->kind == TK_P_TENSOR && has_ell(param(E, i)) && used(E, param(E, i)->name))
            line(E, "o_%s += bi * %st[%d].stride[bd];", param(E, i)->name, A, op->slot[i]);
    for (int i = 0; i < d->noutputs; i++)
        line(E, "o_%s += bi * %st[%d].stride[bd];", output(E, i)->name, A, op->out_slot[i]);
    E->indent--;
    line(E, "}");
}

int has_top_level_for(const tk_opdecl *d) {
    for (int i = 0; i < d->nbody; i++)
        if (d->body[i]->kind == TK_S_FOR) return 1;
    return 0;
}

static void kernel(emitter *E) {
    const tk_op *op = E->op;
    tk_buf_printf(E->b, "\n/* %s: ", op->decl->name);
    for (int i = 0; i < op->decl->nparams; i++)
        if (param(E, i)->kind == TK_P_TENSOR)
            tk_buf_printf(E->b, "%s %s, ", param(E, i)->name, tk_dtype_name(tk_variant_dtype(op, E->variant, i)));
    tk_buf_printf(E->b, "computing in %s */\n", E->ftype == TK_V_F64 ? "float64" : "float32");
    if (!E->tg->gpu) {
        cpu_kernel(E);
        return;
    }
    /* (no __launch_bounds__(256, 2): capping a tile kernel at 128 registers
     * spilled rwkv_backward_k, 168 bytes on sm_90 - bench/gpu_static.py) */
    int tiles = lane_plan(E);
    if (tiles) split_plan(E), mirror_plan(E);
    tk_buf_puts(E->b, E->tg->head);
    if (E->tune_regs)   /* at most that many registers a thread (CUDA 12.4+; no __launch_bounds__ here) */
        tk_buf_printf(E->b, "__maxnreg__(%d) ", E->tune_regs);
    tk_buf_printf(E->b, "%s%s {\n", op->kernel_names[E->variant], E->tg->params);
    E->indent = 1;
    prologue(E);
    if (tiles) {
        /* the lanes' addresses: one pointer plus constant offsets */
        gpu_unit_stride_copy(E, gpu_tile_loop);
    } else {
        E->lanes = 0;
        E->ngroup = 1;
        E->gdim = op->decl->nloop - 1;
        if (chunk_plan(E)) gpu_unit_stride_copy(E, gpu_chunk_loop);
        else gpu_loop(E);
    }
    E->indent = 0;
    tk_buf_puts(E->b, "}\n");
}

static void emitter_init(emitter *E, tk_buf *b, const tk_op *op, int variant, tk_target target, unsigned flags,
                         const gpu_tune *tune) {
    memset(E, 0, sizeof *E);
    E->b = b;
    E->op = op;
    E->tg = &k_targets[target];
    E->variant = variant;
    E->ftype = tk_variant_float_type(op, variant) == TK_F64 ? TK_V_F64 : TK_V_F32;
    E->copy = -1;
    E->lane_fix = -1;
    E->ncopies = 1;
    E->gdim = op->decl->nloop - 1;
    E->ngroup = E->nblocks = 1;
    E->plain = (flags & TK_EMIT_PLAIN) != 0;
    if (E->tg->gpu) {   /* TK_CUDA_TUNE, else the spec's schedule line, else the defaults */
        int v[TK_SCHED_KEYS];
        for (int k = 0; k < TK_SCHED_KEYS; k++) v[k] = tune && tune->v[k] ? tune->v[k] : op->decl->schedule[k];
        E->tune_lanes = v[TUNE_LANES];
        E->tune_rows = v[TUNE_ROWS];
        E->tune_warp_rows = v[TUNE_WARP_ROWS];
        E->tune_chunk = v[TUNE_CHUNK];
        E->tune_split = v[TUNE_SPLIT];
        E->tune_ldg = v[TUNE_LDG];
        E->tune_tiles = v[TUNE_TILES];
        E->tune_regs = v[TUNE_REGS];
    }
}

static tk_status emit_variants(tk_ctx *ctx, const tk_op *cop, int first, int last, tk_target target,
                               unsigned flags, char **out) {
    if (!ctx || !cop || !out || (unsigned)target > TK_TARGET_CUDA) return TK_ERR_INVALID;
    tk_op *op = (tk_op *)cop;    /* tk_check_body annotates the AST */
    gpu_tune tune;
    if (target == TK_TARGET_CUDA) {
        tk_status st = gpu_tune_parse(&tune, ctx->err, sizeof ctx->err);
        if (st != TK_OK) return st;
    }
    tk_buf b = {0};
    tk_buf_printf(&b, "/* Generated by tkc %s from %s: op %s. Do not edit. */\n", TK_VERSION, op->decl->file,
                  op->decl->name);
    tk_buf_puts(&b, "#include \"tk_kernel.h\"\n");
    if (target == TK_TARGET_CUDA && (tune.v[TUNE_LANES] || tune.v[TUNE_ROWS] || tune.v[TUNE_WARP_ROWS] ||
                                     tune.v[TUNE_CHUNK] || tune.v[TUNE_SPLIT] || tune.v[TUNE_LDG] ||
                                     tune.v[TUNE_TILES] || tune.v[TUNE_REGS]))
        tk_buf_printf(&b, "/* TK_CUDA_TUNE: lanes=%d rows=%d warp_rows=%d chunk=%d split=%d ldg=%d tiles=%d regs=%d "
                      "(0: default) */\n", tune.v[TUNE_LANES], tune.v[TUNE_ROWS], tune.v[TUNE_WARP_ROWS],
                      tune.v[TUNE_CHUNK], tune.v[TUNE_SPLIT], tune.v[TUNE_LDG], tune.v[TUNE_TILES], tune.v[TUNE_REGS]);
    for (int v = first; v < last; v++) {
        tk_status st = tk_check_body(op, v, ctx->err, sizeof ctx->err);
        if (st != TK_OK) {
            free(b.p);
            return st;
        }
        emitter E;
        emitter_init(&E, &b, op, v, target, flags, target == TK_TARGET_CUDA ? &tune : NULL);
        kernel(&E);
    }
    if (b.oom) {
        free(b.p);
        snprintf(ctx->err, sizeof ctx->err, "out of memory");
        return TK_ERR_NOMEM;
    }
    *out = b.p;
    return TK_OK;
}

tk_status tk_emit(tk_ctx *ctx, const tk_op *op, tk_target target, char **out) {
    return emit_variants(ctx, op, 0, op ? op->nvariants : 0, target, 0, out);
}

tk_status tk_emit_ex(tk_ctx *ctx, const tk_op *op, tk_target target, unsigned flags, char **out) {
    return emit_variants(ctx, op, 0, op ? op->nvariants : 0, target, flags, out);
}

tk_status tk_emit_variant(tk_ctx *ctx, const tk_op *op, int variant, tk_target target, char **out) {
    if (!op || variant < 0 || variant >= op->nvariants) return TK_ERR_INVALID;
    return emit_variants(ctx, op, variant, variant + 1, target, 0, out);
}

int tk_emit_cuda_per_thread(tk_ctx *ctx, const tk_op *cop, int variant) {
    if (!ctx || !cop || variant < 0 || variant >= cop->nvariants) return 0;
    tk_op *op = (tk_op *)cop;    /* tk_check_body annotates the AST */
    if (tk_check_body(op, variant, ctx->err, sizeof ctx->err) != TK_OK) return 0;
    gpu_tune tune;
    if (gpu_tune_parse(&tune, ctx->err, sizeof ctx->err) != TK_OK) return 0;
    tk_buf b = {0};
    emitter E;
    emitter_init(&E, &b, op, variant, TK_TARGET_CUDA, 0, &tune);
    int n = 1;      /* as kernel() decides */
    if (lane_plan(&E)) {
        n = E.lanes * E.ngroup;
        if (mirror_plan(&E)) n *= 2;                                  /* a tile and its mirror image */
        if (split_plan(&E)) n = n / E.split > 1 ? n / E.split : 1;   /* S threads a tile */
    } else {
        E.lanes = 0;
        E.ngroup = 1;
        E.gdim = op->decl->nloop - 1;
        if (chunk_plan(&E)) n = E.chunk;
    }
    free(b.p);
    return n;
}
