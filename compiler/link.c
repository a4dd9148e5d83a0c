/* link.c - backward ops: checks that every 'backward a, b' clause names ops
 * that exist and follow the naming convention (tk.h, docs/autograd.md), and
 * answers where a backward op's arguments come from and which gradients it
 * makes. Everything is by name, so nothing is stored: the accessors
 * recompute from the declarations, which tk_ctx_link has checked. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

#define GRAD_PREFIX "grad_"
#define GRAD_PREFIX_LEN 5

static int param_index(const tk_opdecl *d, const char *name) {
    for (int i = 0; i < d->nparams; i++)
        if (strcmp(d->params[i].name, name) == 0) return i;
    return -1;
}

/* A returned output's index by name (scratch tensors and 'mut' parameters are not outputs here). */
static int output_index(const tk_opdecl *d, const char *name) {
    for (int i = 0; i < d->nreturns; i++)
        if (strcmp(d->outputs[i].name, name) == 0) return i;
    return -1;
}

/* The part after "grad_", or NULL if name does not start with it. */
static const char *grad_of(const char *name) {
    return strncmp(name, GRAD_PREFIX, GRAD_PREFIX_LEN) == 0 ? name + GRAD_PREFIX_LEN : NULL;
}

int tk_op_param_dtype_group(const tk_op *op, int i) {
    if (!op || i < 0 || i >= op->decl->nparams || op->decl->params[i].kind != TK_P_TENSOR) return -1;
    return op->dtype_root[i];
}

int tk_op_param_differentiable(const tk_op *op, int i) {
    int root = tk_op_param_dtype_group(op, i);
    return root >= 0 && (op->decl->params[root].dtype_mask & TK_DTYPES_FLOAT) != 0;
}

/* 1 if forward output o can be a float tensor (it can carry a gradient). */
static int output_differentiable(const tk_op *op, int o) {
    int root = op->out_dtype_root[o];
    if (root >= 0) return (op->decl->params[root].dtype_mask & TK_DTYPES_FLOAT) != 0;
    return ((1u << op->out_dtype_fixed[o]) & TK_DTYPES_FLOAT) != 0;
}

/* Backward op b of op, or NULL (bad index or not loaded). */
static const tk_op *backward_op(const tk_ctx *ctx, const tk_op *op, int b) {
    if (!ctx || !op || b < 0 || b >= op->decl->nbackward) return NULL;
    return tk_op_find(ctx, op->decl->backward[b]);
}

int tk_op_backward_source(const tk_ctx *ctx, const tk_op *op, int b, int j, int *index) {
    const tk_op *bw = backward_op(ctx, op, b);
    int unused;
    if (!index) index = &unused;
    if (!bw || j < 0 || j >= bw->decl->nparams) return -1;
    const char *name = bw->decl->params[j].name, *g = grad_of(name);
    int i;
    if ((i = param_index(op->decl, name)) >= 0) {
        *index = i;
        return TK_GRAD_FROM_PARAM;
    }
    if ((i = output_index(op->decl, name)) >= 0) {
        *index = i;
        return TK_GRAD_FROM_OUTPUT;
    }
    if (g && (i = output_index(op->decl, g)) >= 0) {
        *index = i;
        return TK_GRAD_FROM_GRAD;
    }
    return -1;
}

int tk_op_backward_target(const tk_ctx *ctx, const tk_op *op, int b, int j) {
    const tk_op *bw = backward_op(ctx, op, b);
    if (!bw || j < 0 || j >= bw->decl->nreturns) return -1;
    const char *g = grad_of(bw->decl->outputs[j].name);
    int i = g ? param_index(op->decl, g) : -1;
    return i >= 0 && tk_op_param_differentiable(op, i) ? i : -1;
}

/* ---- tk_ctx_link ------------------------------------------------------------ */

/* "file:line:col: error: backward op 'b' of 'f': msg" at the clause's name b;
 * b < 0: "file:line:col: error: msg" at the clause's first name. */
static tk_status link_fail(tk_ctx *ctx, const tk_op *op, int b, const char *fmt, ...) {
    const tk_opdecl *d = op->decl;
    tk_loc loc = d->backward_locs[b < 0 ? 0 : b];
    const char *file = d->auto_file ? d->auto_file : d->file;   /* a derived op's: the 'backward auto 2' line's */
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (b >= 0)
        return tk_error_set(&ctx->error, TK_ERR_CHECK, file, loc, "backward op '%s' of '%s': %s", d->backward[b],
                            d->name, msg);
    return tk_error_set(&ctx->error, TK_ERR_CHECK, file, loc, "%s", msg);
}

/* Whether p's shape starts with '...'; *k: its explicit dims. */
static int rank_of(const tk_param *p, int *k) {
    int batch = p->ndims > 0 && p->dims[0]->kind == TK_E_ELLIPSIS;
    *k = p->ndims - batch;
    return batch;
}

/* "'...' and 2 dims" / "2 dims": what a tensor's declared shape says of its rank */
static void rank_text(const tk_param *p, char *buf, size_t n) {
    int k, batch = rank_of(p, &k);
    snprintf(buf, n, "%s%d dim%s", batch ? "'...' and " : "", k, k == 1 ? "" : "s");
}

/* A backward op's tensor bp (a parameter, or with out set an output) stands
 * for the forward's tensor fp (what = "parameter", "output" or "gradient of
 * output"): refused when no tensor could fit both declared ranks, as every
 * backward call would then fail at run time. '...' takes any number of
 * dims, so a batch-generic backward ([..., N]) serves [N] and [B, N]. A
 * gradient (out) may have more dims than its parameter: torch's autograd
 * sums a gradient over the leading dims its input lacks (a broadcast). */
static tk_status link_rank(tk_ctx *ctx, const tk_op *op, int b, const tk_op *bw, const tk_param *bp, int out,
                           const tk_param *fp, const char *what) {
    int kb, kf, eb = rank_of(bp, &kb), ef = rank_of(fp, &kf);
    int fits = eb && ef ? 1 : eb ? kb <= kf : ef ? kf <= kb : kb == kf;
    if (out) fits = eb || kb >= kf;   /* a gradient may have more leading dims: torch sums them */
    if (fits) return TK_OK;
    char want[48], got[48];
    rank_text(fp, want, sizeof want);
    rank_text(bp, got, sizeof got);
    return link_fail(ctx, op, b, "%s '%s' (%s:%d:%d) has %s but %s '%s' of '%s' has %s", out ? "output" : "parameter",
                     bp->name, bw->decl->file, bp->loc.line, bp->loc.col, got, what, fp->name, op->decl->name, want);
}

/* Whether optional ints a and b default to the same expression (or both to None). */
static int same_default(const tk_param *a, const tk_param *b) {
    if (!a->default_value || !b->default_value) return a->default_value == b->default_value;
    return tk_expr_equal(a->default_value, b->default_value);
}

/* p's default as spec text, "None" for none. */
static void default_text(tk_buf *buf, const tk_param *p) {
    if (p->default_value) tk_expr_text(buf, p->default_value, 1);
    else tk_buf_puts(buf, "None");
}

/* A forward parameter passed to a backward op must keep its kind. */
static tk_status link_param(tk_ctx *ctx, const tk_op *op, int b, const tk_param *bp, const tk_param *fp) {
    static const char *const kinds[] = {"a tensor", "an int", "a float", "a bool"}; /* ORDER tk_param_kind */
    if (bp->kind != fp->kind)
        return link_fail(ctx, op, b, "parameter '%s' is %s but '%s' is %s in '%s'", bp->name, kinds[bp->kind],
                         fp->name, kinds[fp->kind], op->decl->name);
    if (fp->optional && !bp->optional)
        return link_fail(ctx, op, b, "parameter '%s' must be %s like '%s' of '%s' (it may be None)", bp->name,
                         bp->kind == TK_P_FLOAT ? "'float?'" : bp->kind == TK_P_INT ? "'int?'" : "optional ('[...]? = 0')",
                         fp->name, op->decl->name);
    /* None reaches both ops: it must mean one value */
    if (fp->kind == TK_P_TENSOR && fp->optional && tk_tensor_fill(fp) != tk_tensor_fill(bp))
        return link_fail(ctx, op, b, "parameter '%s' defaults to %g but '%s' of '%s' to %g (None passed "
                                     "for it must mean one value)", bp->name, tk_tensor_fill(bp), fp->name,
                         op->decl->name, tk_tensor_fill(fp));
    if (fp->kind == TK_P_FLOAT && fp->optional && bp->optional &&
        tk_float_default(fp) != tk_float_default(bp))
        return link_fail(ctx, op, b, "parameter '%s' defaults to %g but '%s' of '%s' to %g (None passed "
                                     "for it must mean one value)", bp->name, tk_float_default(bp), fp->name,
                         op->decl->name, tk_float_default(fp));
    if (fp->kind == TK_P_INT && fp->optional && bp->optional && !same_default(fp, bp)) {
        tk_buf ft = {0}, bt = {0};
        default_text(&ft, fp);
        default_text(&bt, bp);
        tk_status st = link_fail(ctx, op, b, "parameter '%s' defaults to '%s' but '%s' of '%s' to '%s' (None "
                                             "passed for it must mean one value: write the same expression)",
                                 bp->name, bt.p && !bt.oom ? bt.p : "?", fp->name, op->decl->name,
                                 ft.p && !ft.oom ? ft.p : "?");
        free(ft.p);
        free(bt.p);
        return st;
    }
    return TK_OK;
}

/* Checks backward op b's parameters; sets *takes_grad if one is grad_<out>. */
static tk_status link_params(tk_ctx *ctx, const tk_op *op, int b, const tk_op *bw) {
    int takes_grad = 0;
    for (int j = 0; j < bw->decl->nparams; j++) {
        const tk_param *bp = &bw->decl->params[j];
        int i, src = tk_op_backward_source(ctx, op, b, j, &i);
        if (src == TK_GRAD_FROM_PARAM) {
            tk_status st = link_param(ctx, op, b, bp, &op->decl->params[i]);
            if (st == TK_OK && bp->kind == TK_P_TENSOR)
                st = link_rank(ctx, op, b, bw, bp, 0, &op->decl->params[i], "parameter");
            if (st != TK_OK) return st;
            continue;
        }
        if (src < 0)
            return link_fail(ctx, op, b, "parameter '%s' (%s:%d:%d) is not a parameter of '%s', an output of "
                             "'%s' or 'grad_<output>' (%s%s)", bp->name, bw->decl->file, bp->loc.line,
                             bp->loc.col, op->decl->name, op->decl->name, GRAD_PREFIX,
                             op->decl->outputs[0].name);
        if (bp->kind != TK_P_TENSOR)
            return link_fail(ctx, op, b, "parameter '%s' must be a tensor", bp->name);
        if (src == TK_GRAD_FROM_GRAD) {
            if (!output_differentiable(op, i))
                return link_fail(ctx, op, b, "'%s' has no gradient: output '%s' of '%s' is not a float tensor",
                                 bp->name, op->decl->outputs[i].name, op->decl->name);
            takes_grad = 1;
        }
        tk_status st = link_rank(ctx, op, b, bw, bp, 0, &op->decl->outputs[i],
                                 src == TK_GRAD_FROM_GRAD ? "the gradient of output" : "output");
        if (st != TK_OK) return st;
    }
    if (!takes_grad)
        return link_fail(ctx, op, b, "it takes no incoming gradient (a parameter named %s%s)", GRAD_PREFIX,
                         op->decl->outputs[0].name);
    return TK_OK;
}

/* Checks backward op b's outputs; records which op makes each gradient. */
static tk_status link_outputs(tk_ctx *ctx, const tk_op *op, int b, const tk_op *bw, int *maker) {
    for (int j = 0; j < bw->decl->nreturns; j++) {   /* (its scratch tensors are its own) */
        const char *name = bw->decl->outputs[j].name;
        int i = tk_op_backward_target(ctx, op, b, j);
        if (i < 0)
            return link_fail(ctx, op, b, "output '%s' must be named %s<p> for a float tensor parameter p of '%s'",
                             name, GRAD_PREFIX, op->decl->name);
        if (maker[i] >= 0)
            return link_fail(ctx, op, b, "'%s' is also computed by backward op '%s'", name,
                             op->decl->backward[maker[i]]);
        tk_status st = link_rank(ctx, op, b, bw, &bw->decl->outputs[j], 1, &op->decl->params[i], "parameter");
        if (st != TK_OK) return st;
        maker[i] = b;
    }
    return TK_OK;
}

/* A parameter or returned output of op named grad_<o> for a returned
 * output o: a backward op's parameter of that name would be both the
 * forward's tensor and o's incoming gradient (the forward's tensor would
 * win, silently: a wrong gradient). An error at the name. */
static tk_status link_names(tk_ctx *ctx, const tk_op *op) {
    const tk_opdecl *d = op->decl;
    for (int k = 0; k < d->nparams + d->nreturns; k++) {
        const tk_param *p = k < d->nparams ? &d->params[k] : &d->outputs[k - d->nparams];
        const char *g = grad_of(p->name);
        if (g && output_index(d, g) >= 0)
            return tk_error_set(&ctx->error, TK_ERR_CHECK, d->file, p->loc,
                                "%s '%s' of '%s' has the name its backward ops give the incoming gradient of "
                                "output '%s': rename it", k < d->nparams ? "parameter" : "output", p->name,
                                d->name, g);
    }
    return TK_OK;
}

/* Checks op's backward clause: each op exists and links; a tensor
 * parameter gets its gradient from at most one. */
static tk_status link_op(tk_ctx *ctx, const tk_op *op) {
    const tk_opdecl *d = op->decl;
    int maker[TK_MAX_TENSORS * 4];
    for (int i = 0; i < d->nparams; i++) maker[i] = -1;
    if (d->nbackward > 0) {
        tk_status st = link_names(ctx, op);
        if (st != TK_OK) return st;
    }
    for (int b = 0; b < d->nbackward; b++) {
        const tk_op *bw = tk_op_find(ctx, d->backward[b]);
        if (!bw) return link_fail(ctx, op, b, "no such op (is its spec file loaded?)");
        if (bw == op) return link_fail(ctx, op, b, "an op cannot be its own backward");
        if (tk_op_in_place(bw))
            return link_fail(ctx, op, b, "it updates a 'mut' parameter in place; a backward op returns gradients");
        tk_status st = link_params(ctx, op, b, bw);
        if (st == TK_OK) st = link_outputs(ctx, op, b, bw, maker);
        if (st != TK_OK) return st;
    }
    /* a float tensor parameter no backward op computes the gradient of is
     * not differentiable (a constant table): the shim refuses an input
     * there that requires grad */
    return TK_OK;
}

tk_status tk_ctx_link(tk_ctx *ctx) {
    if (!ctx) return TK_ERR_INVALID;
    for (int i = 0; i < ctx->nops; i++) {
        tk_status st = link_op(ctx, ctx->ops[i]);
        if (st != TK_OK) return st;
    }
    return TK_OK;
}
