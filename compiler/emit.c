/* emit.c - prints a planned op as C (CPU) or CUDA C source: the entry
 * points (plan, then print each variant), and the kernel skeleton
 * (prologue, index decomposition). The body is the same text for both
 * targets; what differs (function head, how the kernel arguments are
 * reached, the index-space loop) is data in k_targets. The decisions come
 * from the plan (plan.h); the other emit_*.c files print the parts. */
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

int declares_tensor(const emitter *E, int i) {
    const tk_param *p = param(E, i);
    return p->kind == TK_P_TENSOR && !p->mut && used(E, p->name);
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
        if (declares_tensor(E, i) && tk_explicit_dims(p) > 0) fn(E, p, op->slot[i], arg);
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
        if (declares_tensor(E, i))
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
    for (int i = 0; i < d->nloop; i++)   /* (a row loop's '_' dims: the body walks them by their dim names) */
        if (!tk_owned_dim(d->loop_vars[i]))
            line(E, "const tk_i64 n_%s = %st[%d].size[%st[%d].ndim - %d];", d->loop_vars[i], A, lslot, A, lslot,
                 d->nloop - i);
    (void)lo;
}

/* Splits r (a flat index) into the loop variables (all but the last when
 * inner_last; a row loop's named ones, its '_' dims are no part of the
 * index space) and the batch offsets of the '...' tensors. */
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
        if (tk_owned_dim(v)) continue;
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
    if (op->random && op->has_ellipsis) line(E, "const tk_i64 tk_bi = r;   /* rand's batch index */");
    if (!op->has_ellipsis) {
        line(E, "(void)r;");
        return;
    }
    int lslot = op->out_slot[op->loop_out];
    for (int i = 0; i < d->nparams; i++)
        if (declares_tensor(E, i) && has_ell(param(E, i))) line(E, "tk_i64 o_%s = 0;", param(E, i)->name);
    for (int i = 0; i < d->noutputs; i++) line(E, "tk_i64 o_%s = 0;", output(E, i)->name);
    line(E, "for (tk_i64 bd = %snbatch - 1; bd >= 0; --bd) {", A);
    E->indent++;
    line(E, "const tk_i64 bq = tk_udiv(r, %st[%d].size[bd]);", A, lslot);
    line(E, "const tk_i64 bi = r - bq * %st[%d].size[bd];", A, lslot);
    line(E, "r = bq;");
    for (int i = 0; i < d->nparams; i++)
        if (declares_tensor(E, i) && has_ell(param(E, i)))
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
    plan_apply(E, &E->plan->body[0]);
    tk_buf_puts(E->b, E->tg->head);
    if (E->tune_regs)   /* at most that many registers a thread (CUDA 12.4+; no __launch_bounds__ here) */
        tk_buf_printf(E->b, "__maxnreg__(%d) ", E->tune_regs);
    tk_buf_printf(E->b, "%s%s {\n", op->kernel_names[E->variant], E->tg->params);
    E->indent = 1;
    prologue(E);
    if (E->plan->coop > 1) {
        gpu_coop_loop(E);   /* a row loop's iterations shared by lanes (plan_coop.c) */
    } else if (E->lanes) {
        /* the lanes' addresses: one pointer plus constant offsets */
        gpu_unit_stride_copy(E, gpu_tile_loop);
    } else {
        if (E->chunk) gpu_unit_stride_copy(E, gpu_chunk_loop);
        else gpu_loop(E);
    }
    E->indent = 0;
    tk_buf_puts(E->b, "}\n");
}

void emitter_init(emitter *E, tk_buf *b, const tk_plan *P) {
    const tk_op *op = P->op;
    memset(E, 0, sizeof *E);
    E->b = b;
    E->op = op;
    E->plan = P;
    E->tg = &k_targets[P->target];
    E->variant = P->variant;
    E->ftype = tk_variant_float_type(op, P->variant) == TK_F64 ? TK_V_F64 : TK_V_F32;
    E->copy = -1;
    E->lane_fix = -1;
    E->ncopies = 1;
    E->gdim = op->decl->nloop - 1;
    E->ngroup = E->nblocks = 1;
    E->plain = P->plain;
    E->tune_lanes = P->sched[TK_SCHED_LANES];
    E->tune_rows = P->sched[TK_SCHED_ROWS];
    E->tune_warp_rows = P->sched[TK_SCHED_WARP_ROWS];
    E->tune_chunk = P->sched[TK_SCHED_CHUNK];
    E->tune_split = P->sched[TK_SCHED_SPLIT];
    E->tune_ldg = P->sched[TK_SCHED_LDG];
    E->tune_tiles = P->sched[TK_SCHED_TILES];
    E->tune_regs = P->sched[TK_SCHED_REGS];
}

/* A derived backward op that compares values it computes in two passes (the
 * ties of a row's max or min, the branches, max and min of a scan's steps,
 * replayed from their states: docs/autograd.md; tk_opdecl.exact)
 * compiles without FMA contraction, tk_kernel.h's helpers included (a
 * helper compiled with other options would not inline): each computation of
 * a value gives the same bits. Under NVRTC its float products print as
 * __fmul_rn and __dmul_rn (emit_expr.c), which are never contracted. */
static const char k_exact_begin[] =
    "#if defined(__clang__) && !defined(__CUDACC__) && !defined(__CUDACC_RTC__)\n"
    "#pragma float_control(push)\n#pragma clang fp contract(off)\n"
    "#elif defined(__GNUC__) && !defined(__CUDACC__) && !defined(__CUDACC_RTC__)\n"
    "#pragma GCC push_options\n#pragma GCC optimize(\"fp-contract=off\")\n#endif\n";
static const char k_exact_end[] =
    "#if defined(__clang__) && !defined(__CUDACC__) && !defined(__CUDACC_RTC__)\n#pragma float_control(pop)\n"
    "#elif defined(__GNUC__) && !defined(__CUDACC__) && !defined(__CUDACC_RTC__)\n#pragma GCC pop_options\n#endif\n";

tk_status tk_emit_scheduled(tk_ctx *ctx, const tk_op *op, int first, int last, tk_target target, unsigned flags,
                            const tk_schedule *sched, char **out, int *per_thread) {
    if (!ctx || !op || !out || (unsigned)target > TK_TARGET_CUDA || first < 0 || last > op->nvariants ||
        first > last)
        return TK_ERR_INVALID;
    const tk_schedule none = {{0}};
    const tk_schedule *s = target == TK_TARGET_CUDA && sched ? sched : &none;
    tk_buf b = {0};
    tk_buf_printf(&b, "/* Generated by tkc %s from %s: op %s. Do not edit. */\n", TK_VERSION, op->decl->file,
                  op->decl->name);
    if (op->decl->exact) tk_buf_puts(&b, k_exact_begin);
    tk_buf_puts(&b, "#include \"tk_kernel.h\"\n");
    const int *v = s->v;
    if (v[TK_SCHED_LANES] || v[TK_SCHED_ROWS] || v[TK_SCHED_WARP_ROWS] || v[TK_SCHED_CHUNK] || v[TK_SCHED_SPLIT] ||
        v[TK_SCHED_LDG] || v[TK_SCHED_TILES] || v[TK_SCHED_REGS] || v[TK_SCHED_COOP] || v[TK_SCHED_PARTS]) {
        tk_buf_printf(&b, "/* TK_CUDA_TUNE: lanes=%d rows=%d warp_rows=%d chunk=%d split=%d ldg=%d tiles=%d regs=%d",
                      v[TK_SCHED_LANES], v[TK_SCHED_ROWS], v[TK_SCHED_WARP_ROWS], v[TK_SCHED_CHUNK],
                      v[TK_SCHED_SPLIT], v[TK_SCHED_LDG], v[TK_SCHED_TILES], v[TK_SCHED_REGS]);
        if (v[TK_SCHED_COOP]) tk_buf_printf(&b, " coop=%d", v[TK_SCHED_COOP]);
        if (v[TK_SCHED_PARTS]) tk_buf_printf(&b, " parts=%d", v[TK_SCHED_PARTS]);
        tk_buf_puts(&b, " (0: default) */\n");
    }
    tk_plan *P = malloc(sizeof *P);
    if (!P) b.oom = 1;
    for (int k = first; k < last && P; k++) {
        tk_status st = tk_plan_make(ctx, op, k, target, flags, s, P);
        if (st != TK_OK) {
            free(P);
            free(b.p);
            return st;
        }
        emitter E;
        emitter_init(&E, &b, P);
        kernel(&E);
        if (per_thread) *per_thread = P->per_thread;
    }
    free(P);
    if (op->decl->exact) tk_buf_puts(&b, k_exact_end);
    if (b.oom) {
        free(b.p);
        return tk_error_set(&ctx->error, TK_ERR_NOMEM, NULL, (tk_loc){0, 0}, "out of memory");
    }
    *out = b.p;
    return TK_OK;
}

/* TK_CUDA_TUNE's schedule into s; a malformed one is ctx's error. */
static tk_status schedule_from_env(tk_ctx *ctx, tk_schedule *s) {
    char msg[512];
    tk_status st = tk_schedule_from_env(s, msg, sizeof msg);
    return st == TK_OK ? TK_OK : tk_error_set(&ctx->error, st, NULL, (tk_loc){0, 0}, "%s", msg);
}

/* tk_emit_scheduled with the schedule of TK_CUDA_TUNE (for CUDA). */
static tk_status emit_env(tk_ctx *ctx, const tk_op *op, int first, int last, tk_target target, unsigned flags,
                          char **out) {
    if (!ctx) return TK_ERR_INVALID;
    tk_schedule s;
    if (target == TK_TARGET_CUDA) {
        tk_status st = schedule_from_env(ctx, &s);
        if (st != TK_OK) return st;
    }
    return tk_emit_scheduled(ctx, op, first, last, target, flags, target == TK_TARGET_CUDA ? &s : NULL, out, NULL);
}

tk_status tk_emit(tk_ctx *ctx, const tk_op *op, tk_target target, char **out) {
    return emit_env(ctx, op, 0, op ? op->nvariants : 0, target, 0, out);
}

tk_status tk_emit_ex(tk_ctx *ctx, const tk_op *op, tk_target target, unsigned flags, char **out) {
    return emit_env(ctx, op, 0, op ? op->nvariants : 0, target, flags, out);
}

tk_status tk_emit_variant(tk_ctx *ctx, const tk_op *op, int variant, tk_target target, char **out) {
    if (!op || variant < 0 || variant >= op->nvariants) return TK_ERR_INVALID;
    return emit_env(ctx, op, variant, variant + 1, target, 0, out);
}

int tk_emit_cpu_parts(tk_ctx *ctx, const tk_op *op, int variant, unsigned flags) {
    if (!ctx || !op || variant < 0 || variant >= op->nvariants) return 0;
    tk_plan *P = malloc(sizeof *P);
    if (!P) return 0;
    int parts = tk_plan_make(ctx, op, variant, TK_TARGET_C, flags, NULL, P) == TK_OK && P->rows.parts != NULL;
    free(P);
    return parts;
}

int tk_emit_cuda_parts(tk_ctx *ctx, const tk_op *op, int variant, const tk_schedule *sched, unsigned *copied,
                       int *parted) {
    if (copied) *copied = 0;
    if (parted) *parted = 0;
    if (!ctx || !op || variant < 0 || variant >= op->nvariants) return 0;
    tk_plan *P = malloc(sizeof *P);
    if (!P) return 0;
    int n = 0;
    if (tk_plan_make(ctx, op, variant, TK_TARGET_CUDA, 0, sched, P) == TK_OK && P->gpu_parts > 1) {
        n = P->gpu_parts;
        for (int o = 0; o < op->decl->noutputs && copied; o++)
            if (P->part_copy[o]) *copied |= 1u << o;
        if (parted) *parted = P->rows.parts != NULL;
    }
    free(P);
    return n;
}

int tk_emit_cuda_per_thread(tk_ctx *ctx, const tk_op *op, int variant) {
    if (!ctx || !op || variant < 0 || variant >= op->nvariants) return 0;
    tk_schedule s;
    if (schedule_from_env(ctx, &s) != TK_OK) return 0;
    tk_plan *P = malloc(sizeof *P);
    if (!P) return 0;
    int n = tk_plan_make(ctx, op, variant, TK_TARGET_CUDA, 0, &s, P) == TK_OK ? P->per_thread : 0;
    free(P);
    return n;
}
