/* api.c - contexts, op accessors, views and arguments: the parts of the
 * public API (tk.h) that are not checking, binding (bind.c) or emitting.
 * The leaf helpers every file uses are dtype.c and buf.c. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

/* ---- views and arguments ------------------------------------------------- */

tk_tensor_view tk_view(void *data, tk_dtype dtype, int ndim, const int64_t *sizes,
                       const int64_t *strides) {
    tk_tensor_view v;
    memset(&v, 0, sizeof v);
    v.data = data;
    v.dtype = dtype;
    v.ndim = ndim;
    for (int i = 0; i < ndim && i < TK_MAX_DIMS; i++) {   /* (NULL sizes or strides: zeros) */
        v.sizes[i] = sizes ? sizes[i] : 0;
        v.strides[i] = strides ? strides[i] : 0;
    }
    v.device = TK_CPU;
    return v;
}

static tk_arg arg_of_kind(int kind) {
    tk_arg a;
    memset(&a, 0, sizeof a);
    a.kind = kind;
    return a;
}

tk_arg tk_arg_tensor(tk_tensor_view v) {
    tk_arg a = arg_of_kind(TK_P_TENSOR);
    a.t = v;
    return a;
}

tk_arg tk_arg_int(int64_t i) {
    tk_arg a = arg_of_kind(TK_P_INT);
    a.i = i;
    return a;
}

tk_arg tk_arg_none(void) {
    tk_arg a = arg_of_kind(TK_P_INT);
    a.is_none = 1;
    return a;
}

tk_arg tk_arg_float(double f) {
    tk_arg a = arg_of_kind(TK_P_FLOAT);
    a.f = f;
    return a;
}

tk_arg tk_arg_bool(int b) {
    tk_arg a = arg_of_kind(TK_P_BOOL);
    a.i = b != 0;
    return a;
}

/* ---- contexts ------------------------------------------------------------ */

tk_ctx *tk_ctx_new(void) {
    tk_ctx *ctx = calloc(1, sizeof *ctx);
    return ctx;
}

void tk_ctx_free(tk_ctx *ctx) {
    if (!ctx) return;
    tk_arena_free(&ctx->arena);   /* the op tables live in the arena */
    free(ctx);
}

const char *tk_ctx_error(const tk_ctx *ctx) { return ctx ? ctx->error.text : "no context"; }

const tk_error *tk_ctx_last_error(const tk_ctx *ctx) {
    static const tk_error no_context = {TK_ERR_INVALID, 0, 0, "", "no context", "no context"};
    return ctx ? &ctx->error : &no_context;
}

/* Records an error of ctx at file:loc (file NULL: about no spec); returns st. */
static tk_status ctx_fail(tk_ctx *ctx, tk_status st, const char *file, tk_loc loc, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static tk_status ctx_fail(tk_ctx *ctx, tk_status st, const char *file, tk_loc loc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tk_error_setv(&ctx->error, st, file, loc, fmt, ap);
    va_end(ap);
    return st;
}

/* The op table is append-only, so threads may look ops up while one thread
 * loads (tk.h): a larger table is a new arena array (old ones stay valid),
 * filled before it is published, and the count is published last. */
static int op_count(const tk_ctx *ctx) { return __atomic_load_n(&ctx->nops, __ATOMIC_ACQUIRE); }
static tk_op **op_table(const tk_ctx *ctx) { return __atomic_load_n(&ctx->ops, __ATOMIC_ACQUIRE); }

static const tk_op *find_op(const tk_ctx *ctx, const char *name) {
    int n = op_count(ctx);
    tk_op **ops = op_table(ctx);
    for (int i = 0; i < n; i++)
        if (strcmp(ops[i]->decl->name, name) == 0) return ops[i];
    return NULL;
}

/* Appends ops[0..n) to ctx's table (writers are serialised by the caller). */
static tk_status append_ops(tk_ctx *ctx, tk_op *const *ops, int n) {
    tk_op **table = ctx->ops;
    if (ctx->nops + n > ctx->cap) {
        int cap = (ctx->cap ? ctx->cap * 2 : 8) + n;
        table = tk_arena_alloc(&ctx->arena, sizeof *table * (size_t)cap);
        if (!table) return ctx_fail(ctx, TK_ERR_NOMEM, NULL, (tk_loc){0, 0}, "out of memory");
        if (ctx->nops) memcpy(table, ctx->ops, sizeof *table * (size_t)ctx->nops);
        ctx->cap = cap;
    }
    for (int i = 0; i < n; i++) table[ctx->nops + i] = ops[i];
    __atomic_store_n(&ctx->ops, table, __ATOMIC_RELEASE);
    __atomic_store_n(&ctx->nops, ctx->nops + n, __ATOMIC_RELEASE);
    return TK_OK;
}

/* Whether an op named name is loaded or among ops[0..n). */
static int name_taken(const tk_ctx *ctx, tk_op *const *ops, int n, const char *name) {
    int dup = find_op(ctx, name) != NULL;
    for (int j = 0; j < n; j++) dup |= strcmp(ops[j]->decl->name, name) == 0;
    return dup;
}

/* 'backward auto': derives op's backward op (compiler/autodiff.c), checks it
 * into *bw and names it in op's backward clause; ops[0..n): the ops checked
 * with it, whose names it must not take. */
static tk_status derive_backward(tk_ctx *ctx, tk_op *op, tk_op *const *ops, int n, tk_op **bw) {
    tk_opdecl *d = op->decl;
    const char *site = d->auto_file ? d->auto_file : d->file;   /* where 'backward auto' is written */
    char *text = NULL;
    int exact = 0;
    tk_status st = tk_derive_backward(op, &text, &exact, &ctx->error);
    if (st != TK_OK && d->derived_from) {   /* a higher order's refusal: at the user's 'backward auto 2' */
        char why[sizeof ctx->error.text];
        snprintf(why, sizeof why, "%s (line %d of its derived op, which `tkc derived` prints)", ctx->error.message,
                 ctx->error.line);
        return ctx_fail(ctx, (tk_status)ctx->error.status, site, d->backward_locs[0], "%s", why);
    }
    if (st != TK_OK) return st;
    size_t len = strlen(d->file) + strlen(d->name) + 32;
    char *file = tk_arena_alloc(&ctx->arena, len);
    const char **names = tk_arena_alloc(&ctx->arena, sizeof *names);
    if (!file || !names) {
        free(text);
        return ctx_fail(ctx, TK_ERR_NOMEM, d->file, d->loc, "out of memory");
    }
    snprintf(file, len, "%s (backward auto of %s)", d->file, d->name);
    tk_module *m = tk_parse(&ctx->arena, file, text, strlen(text), &ctx->error);
    free(text);
    if (m && m->nops == 1 && name_taken(ctx, ops, n, m->ops[0]->name))
        return ctx_fail(ctx, TK_ERR_CHECK, site, d->backward_locs[0], "backward auto of '%s': op '%s' is "
                        "already defined (the derived backward op takes that name)", d->name, m->ops[0]->name);
    if (m && m->nops == 1) {   /* its incoming gradients do not count for its float type: the forward's */
        tk_opdecl *b = m->ops[0];
        for (int j = 0; j < b->nparams && j < 64; j++) {
            int i = 0;
            while (i < d->nparams && strcmp(d->params[i].name, b->params[j].name) != 0) i++;
            if (i == d->nparams || (i < 64 && (d->float_type_skip >> i & 1u))) b->float_type_skip |= 1ull << j;
        }
    }
    st = !m ? (tk_status)ctx->error.status : m->nops == 1 ? tk_check_op(ctx, m->ops[0], bw) : TK_ERR_CHECK;
    if (st == TK_ERR_NOMEM) return st;
    if (st != TK_OK && strstr(ctx->error.message, "too many local variables"))
        return ctx_fail(ctx, TK_ERR_CHECK, site, d->backward_locs[0], "backward auto of '%s': its derived op needs "
                        "more locals than an op may have (%d: it takes one an operation of the body and one an "
                        "adjoint): split the op, or write its backward ops", d->name, TK_MAX_LOCALS);
    if (st != TK_OK) {   /* the derivation made a spec that does not check: tk's bug, not the user's */
        char why[sizeof ctx->error.text];
        snprintf(why, sizeof why, "%s", ctx->error.text);
        return ctx_fail(ctx, TK_ERR_CHECK, site, d->backward_locs[0], "backward auto of '%s': the derived "
                        "op does not check (%s); please report it with the spec", d->name, why);
    }
    m->ops[0]->derived_from = d->name;
    m->ops[0]->exact = exact;
    m->ops[0]->backward_auto = d->backward_auto - 1;   /* 'backward auto 2': derive the derived op's too */
    m->ops[0]->backward_locs = d->backward_locs;
    m->ops[0]->auto_file = site;
    names[0] = m->ops[0]->name;
    d->backward = names;
    d->nbackward = 1;
    return TK_OK;
}

/* Checks every op of m, and derives the backward ops it asks for (each
 * derived op after the ops it differentiates, so 'backward auto 2' derives
 * the derived one's in turn); adds them all, or none on the first error. */
static tk_status add_module(tk_ctx *ctx, tk_module *m) {
    tk_op *ops[64 * (1 + TK_MAX_AUTO_ORDER)];
    int n = m->nops;
    if (m->nops > 64) return ctx_fail(ctx, TK_ERR_CHECK, m->ops[64]->file, m->ops[64]->loc, "too many ops in one file (limit 64)");
    for (int i = 0; i < m->nops; i++) {
        tk_opdecl *d = m->ops[i];
        if (name_taken(ctx, ops, i, d->name))
            return ctx_fail(ctx, TK_ERR_CHECK, d->file, d->loc, "op '%s' is already defined", d->name);
        tk_status st = tk_check_op(ctx, d, &ops[i]);
        if (st != TK_OK) return st;
    }
    for (int i = 0; i < n; i++)
        if (ops[i]->decl->backward_auto > 0) {
            tk_status st = derive_backward(ctx, ops[i], ops, n, &ops[n]);
            if (st != TK_OK) return st;
            n++;
        }
    return append_ops(ctx, ops, n);
}

tk_status tk_load_spec(tk_ctx *ctx, const char *file, const char *text, size_t len) {
    if (!ctx || !file || (!text && len)) return TK_ERR_INVALID;
    tk_error_clear(&ctx->error);
    tk_module *m = tk_parse(&ctx->arena, file, text ? text : "", len, &ctx->error);
    if (!m) return (tk_status)ctx->error.status;
    return add_module(ctx, m);
}

int tk_op_count(const tk_ctx *ctx) { return ctx ? op_count(ctx) : 0; }

const tk_op *tk_op_at(const tk_ctx *ctx, int i) {
    return ctx && i >= 0 && i < op_count(ctx) ? op_table(ctx)[i] : NULL;
}

const tk_op *tk_op_find(const tk_ctx *ctx, const char *name) {
    return ctx && name ? find_op(ctx, name) : NULL;
}

tk_op *tk_op_find_mut(tk_ctx *ctx, const char *name) {
    return (tk_op *)tk_op_find(ctx, name);
}

const char *tk_op_name(const tk_op *op) { return op ? op->decl->name : NULL; }
const char *tk_op_file(const tk_op *op) { return op ? op->decl->file : NULL; }
void tk_op_set_checked(tk_op *op, int on) {
    if (op) op->checked = on != 0;
}
int tk_op_checked(const tk_op *op) { return op && op->checked; }
const char *tk_op_schema(const tk_op *op) { return op ? op->schema : NULL; }
const char *tk_op_backward(const tk_op *op) { return op && op->decl->nbackward ? op->decl->backward[0] : NULL; }
int tk_op_nbackward(const tk_op *op) { return op ? op->decl->nbackward : 0; }

const char *tk_op_backward_at(const tk_op *op, int i) {
    return op && i >= 0 && i < op->decl->nbackward ? op->decl->backward[i] : NULL;
}
int tk_op_nparams(const tk_op *op) { return op ? op->decl->nparams : 0; }
int tk_op_noutputs(const tk_op *op) { return op ? op->decl->noutputs : 0; }
int tk_op_nvariants(const tk_op *op) { return op ? op->nvariants : 0; }

int tk_op_param_kind(const tk_op *op, int i) {
    return op && i >= 0 && i < op->decl->nparams ? (int)op->decl->params[i].kind : -1;
}

const char *tk_op_param_name(const tk_op *op, int i) {
    return op && i >= 0 && i < op->decl->nparams ? op->decl->params[i].name : NULL;
}

int tk_op_param_optional(const tk_op *op, int i) {
    return op && i >= 0 && i < op->decl->nparams ? op->decl->params[i].optional : 0;
}

unsigned tk_op_param_dtypes(const tk_op *op, int i) {
    if (!op || i < 0 || i >= op->decl->nparams || op->decl->params[i].kind != TK_P_TENSOR) return 0;
    return op->decl->params[op->dtype_root[i]].dtype_mask;
}

int tk_op_param_dim(const tk_op *op, int i, int j, const char **name, int64_t *value) {
    if (!op || i < 0 || i >= op->decl->nparams || op->decl->params[i].kind != TK_P_TENSOR) return -1;
    const tk_param *p = &op->decl->params[i];
    if (j < 0 || j >= p->ndims) return -1;
    const tk_expr *e = p->dims[j];
    if (name) *name = e->kind == TK_E_NAME ? e->name : NULL;
    if (value) *value = e->kind == TK_E_INT ? e->ival : 0;
    if (e->kind == TK_E_ELLIPSIS) return TK_DIM_BATCH;
    return e->kind == TK_E_NAME ? TK_DIM_NAME : TK_DIM_FIXED;
}

const char *tk_op_output_name(const tk_op *op, int i) {
    return op && i >= 0 && i < op->decl->noutputs ? op->decl->outputs[i].name : NULL;
}

int tk_op_param_mut(const tk_op *op, int i) {
    return op && i >= 0 && i < op->decl->nparams && op->decl->params[i].mut;
}

int tk_op_output_alias(const tk_op *op, int i) {
    return op && i >= 0 && i < op->decl->noutputs ? op->decl->outputs[i].alias - 1 : -1;
}

int tk_op_nreturns(const tk_op *op) { return op ? op->decl->nreturns : 0; }
int tk_op_in_place(const tk_op *op) {
    if (!op) return 0;
    for (int i = 0; i < op->decl->noutputs; i++)
        if (op->decl->outputs[i].alias) return 1;
    return 0;
}

int tk_op_output_scratch(const tk_op *op, int i) {
    return op && i >= 0 && i < op->decl->noutputs && op->decl->outputs[i].scratch;
}

int tk_op_output_sum(const tk_op *op, int i) {
    return op && i >= 0 && i < op->decl->noutputs && op->out_sum[i];
}

int tk_op_output_dtype(const tk_op *op, int variant, int i) {
    if (!op || i < 0 || i >= op->decl->noutputs || variant < 0 || variant >= op->nvariants) return -1;
    return (int)tk_variant_out_decl_dtype(op, variant, i);
}

int tk_op_has_sum(const tk_op *op) { return op && op->has_sum; }
int tk_op_random(const tk_op *op) { return op && op->random; }
const char *tk_op_derived_from(const tk_op *op) { return op ? op->decl->derived_from : NULL; }

int tk_op_output_written(const tk_op *op, int i) {
    if (!op || i < 0 || i >= op->decl->noutputs) return 0;
    /* a store at the top level of the loop body runs for every index (the
     * language has no break, continue or return), at that index; in a row
     * loop that covers the output only when loop variables index all its
     * dims (`last[c, b]`), never the dims an iteration owns */
    if (op->row_loop) {
        int n = 0;
        for (int v = 0; v < op->decl->nloop; v++) n += op->row_pos[i][v] >= 0;
        if (n < tk_explicit_dims(&op->decl->outputs[i])) return 0;
    }
    for (int k = 0; k < op->decl->nbody; k++) {
        const tk_stmt *s = op->decl->body[k];
        if (s->kind == TK_S_STORE && strcmp(s->name, op->decl->outputs[i].name) == 0) return 1;
    }
    return 0;
}

static int has_loop(tk_stmt *const *body, int n) {
    for (int k = 0; k < n; k++)
        if (body[k]->kind == TK_S_FOR || has_loop(body[k]->body, body[k]->nbody) ||
            has_loop(body[k]->orelse, body[k]->norelse))
            return 1;
    return 0;
}

int tk_op_loop_free(const tk_op *op) { return op && !op->row_loop && !has_loop(op->decl->body, op->decl->nbody); }

/* Whether operator op on values of type t prints as a call of a maths
 * function: `**` (pow), and float `//` and `%` (floor of a quotient, fmod). */
static int costly_operator(tk_opc op, tk_vtype t) {
    return op == TK_OPC_POW ||
           ((op == TK_OPC_FLOORDIV || op == TK_OPC_MOD) && (t == TK_V_F32 || t == TK_V_F64));
}

/* Whether e costs more than a few instructions an element: a call of any
 * function but min, max, abs, floor, ceil and the conversions (exp, erf,
 * sqrt, rand...), or a costly operator. */
static int costly_call(const tk_expr *e) {
    static const char *const cheap[] = {"min", "max", "abs", "floor", "ceil", "int", "float",
                                        "float32", "float64", "bool", NULL};
    if (!e) return 0;
    if (e->kind == TK_E_CALL) {
        int k = 0;
        while (cheap[k] && strcmp(cheap[k], e->name) != 0) k++;
        if (!cheap[k]) return 1;
    }
    if (e->kind == TK_E_BINARY && costly_operator(e->op, e->vtype)) return 1;
    for (int i = 0; i < e->nargs; i++)
        if (costly_call(e->args[i])) return 1;
    return 0;
}

static int body_costly(tk_stmt *const *body, int n) {
    for (int k = 0; k < n; k++) {
        const tk_stmt *s = body[k];
        if (costly_call(s->value) || costly_call(s->lo) || costly_call(s->hi)) return 1;
        for (int i = 0; i < s->nindex; i++)
            if (costly_call(s->index[i])) return 1;
        if (body_costly(s->body, s->nbody) || body_costly(s->orelse, s->norelse)) return 1;
    }
    return 0;
}

int tk_op_memory_bound(const tk_op *op) { return tk_op_loop_free(op) && !body_costly(op->decl->body, op->decl->nbody); }

const char *tk_op_kernel_name(const tk_op *op, int variant) {
    return op && variant >= 0 && variant < op->nvariants ? op->kernel_names[variant] : NULL;
}

tk_status tk_op_set_cpu_kernel(tk_op *op, int variant, tk_cpu_fn fn) {
    if (!op || variant < 0 || variant >= op->nvariants) return TK_ERR_INVALID;
    __atomic_store_n(&op->cpu_fns[variant], fn, __ATOMIC_RELEASE);
    return TK_OK;
}

tk_status tk_op_set_cpu_parts(tk_op *op, int variant, tk_cpu_fn fn) {
    if (!op || variant < 0 || variant >= op->nvariants) return TK_ERR_INVALID;
    __atomic_store_n(&op->cpu_parts[variant], fn, __ATOMIC_RELEASE);
    return TK_OK;
}

int tk_op_cpu_parts(const tk_op *op, int variant) {
    if (!op || variant < 0 || variant >= op->nvariants) return 0;
    tk_cpu_fn fn = __atomic_load_n(&op->cpu_fns[variant], __ATOMIC_ACQUIRE);
    return fn && fn == __atomic_load_n(&op->cpu_parts[variant], __ATOMIC_ACQUIRE);
}

tk_cpu_fn tk_op_cpu_kernel(const tk_op *op, int variant) {
    return op && variant >= 0 && variant < op->nvariants ? __atomic_load_n(&op->cpu_fns[variant], __ATOMIC_ACQUIRE)
                                                         : NULL;
}

const char *tk_op_variant_code(const tk_op *op, int variant) {
    return op && variant >= 0 && variant < op->nvariants ? op->variant_codes[variant] : NULL;
}
