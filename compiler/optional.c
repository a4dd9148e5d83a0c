/* optional.c - optional tensor parameters (docs/spec.md, Optional tensors):
 * `bias: x.dtype[N]? = 0` takes a tensor or None, and None binds as a
 * tensor of those dims every element of which reads as the default. Here:
 * the checks that make None bindable (every dim and the dtype known from
 * the other arguments) and the default's value. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core.h"

static tk_status fail(const tk_op *op, tk_error *err, tk_loc loc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static tk_status fail(const tk_op *op, tk_error *err, tk_loc loc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tk_status s = tk_error_setv(err, TK_ERR_CHECK, op->decl->file, loc, fmt, ap);
    va_end(ap);
    return s;
}

/* Whether tensor parameter i is optional. */
static int optional_tensor(const tk_opdecl *d, int i) {
    return i >= 0 && i < d->nparams && d->params[i].kind == TK_P_TENSOR && d->params[i].optional;
}

/* Where dim symbol k is written in parameter i. */
static tk_loc dim_loc(const tk_op *op, int i, int k) {
    const tk_param *p = &op->decl->params[i];
    for (int j = 0; j < p->ndims; j++)
        if (p->dims[j]->kind != TK_E_ELLIPSIS && op->dim_sym[i][j] == k) return p->dims[j]->loc;
    return p->loc;
}

/* Whether every bit of mask is among `of`. */
static int within(unsigned mask, unsigned of) { return mask != 0 && (mask & ~of) == 0; }

/* Whether number v, a default (an integer unless every dtype is a float),
 * fits dtype t, neither bool nor int64 (checked as integers): an integer
 * type's range, a float type's finite range (rounded to it, as torch.full
 * rounds) or infinity. */
static int fits(double v, tk_dtype t) {
    static const double lim[TK_DTYPE_COUNT] = {   /* ORDER DTYPE: the largest magnitude */
        [TK_U8] = 255, [TK_I8] = 127, [TK_I16] = 32767, [TK_I32] = 2147483647.0, [TK_F16] = 65504.0,
        [TK_BF16] = 3.3895313892515355e38, [TK_F32] = 3.4028234663852886e38, [TK_F64] = 1.79769313486231570e308};
    if (t >= TK_F16) return isinf(v) || fabs(v) <= lim[t];
    return v >= (t == TK_U8 ? 0.0 : -lim[t] - 1.0) && v <= lim[t];
}

/* Checks optional tensor i's default: a number literal (possibly negated),
 * or True/False, that every dtype it may have holds: an integer one for
 * any dtype (0 or 1 for bool), one with a fraction or exponent only for
 * floats, True/False only for bool; in each dtype's range (fits). */
static tk_status check_fill(const tk_op *op, tk_error *err, int i) {
    const tk_param *p = &op->decl->params[i];
    const tk_expr *e = p->default_value;
    unsigned mask = op->decl->params[op->dtype_root[i]].dtype_mask;
    int neg = e->kind == TK_E_UNARY && e->op == TK_OPC_NEG;
    const tk_expr *lit = neg ? e->args[0] : e;
    if (lit->kind == TK_E_BOOL && !neg) {
        if (!within(mask, 1u << TK_BOOL))
            return fail(op, err, e->loc, "the default of '%s' is True or False only for a bool tensor: give a "
                        "number", p->name);
        return TK_OK;
    }
    if (lit->kind != TK_E_INT && lit->kind != TK_E_FLOAT)
        return fail(op, err, e->loc, "the default of optional tensor '%s' must be a number such as 0, 1 or -0.5 "
                    "(what each of its elements reads as when it is None), not an expression", p->name);
    if (lit->kind == TK_E_FLOAT && !within(mask, TK_DTYPES_FLOAT))
        return fail(op, err, e->loc, "the default of '%s' must be an integer: '%s' may have an integer or bool "
                    "dtype", p->name, p->name);
    if (within(mask, 1u << TK_BOOL) && (neg || lit->ival > 1))
        return fail(op, err, e->loc, "the default of bool tensor '%s' must be True or False", p->name);
    double v = tk_tensor_fill(p);
    int64_t iv = neg ? -lit->ival : lit->ival;   /* (an integer literal's, exactly) */
    char text[48];
    if (lit->kind == TK_E_INT) snprintf(text, sizeof text, "%lld", (long long)iv);
    else snprintf(text, sizeof text, "%.17g", v);
    for (int t = 0; t < TK_DTYPE_COUNT; t++) {
        if (!(mask >> t & 1u) || t == TK_BOOL) continue;
        int ok = t == TK_I64 ? iv >= -(INT64_C(1) << 53) && iv <= (INT64_C(1) << 53) : fits(v, (tk_dtype)t);
        if (!ok)
            return fail(op, err, e->loc, "the default of '%s', %s, is outside the %s of %s, a dtype '%s' may have",
                        p->name, text, t == TK_I64 ? "integers a double holds exactly (2^53)" : t >= TK_F16 ?
                        "finite range" : "range", tk_dtype_name((tk_dtype)t), p->name);
    }
    return TK_OK;
}

/* Checks what None needs of optional tensor i: not 'mut'; one dtype, or
 * that of another tensor (not an optional one: check_dtype_sources); and
 * (tk_check_optional_tensors) dims that other tensors give. */
static tk_status check_one(const tk_op *op, tk_error *err, int i) {
    const tk_opdecl *d = op->decl;
    const tk_param *p = &d->params[i];
    if (p->mut)
        return fail(op, err, p->loc, "'mut' tensor '%s' cannot be optional: the op writes it", p->name);
    if (!p->dtype_of && (p->dtype_mask & (p->dtype_mask - 1u)))
        return fail(op, err, p->dtype_loc, "optional tensor '%s' needs one dtype or 'x.dtype' of a tensor that "
                    "is not optional: when it is None nothing picks among several", p->name);
    return check_fill(op, err, i);
}

/* Checks that no parameter or output takes its dtype from an optional one. */
static tk_status check_dtype_sources(const tk_op *op, tk_error *err) {
    const tk_opdecl *d = op->decl;
    for (int k = 0; k < d->nparams + d->noutputs; k++) {
        const tk_param *p = k < d->nparams ? &d->params[k] : &d->outputs[k - d->nparams];
        if (!p->dtype_of) continue;
        for (int i = 0; i < d->nparams; i++)
            if (optional_tensor(d, i) && strcmp(d->params[i].name, p->dtype_of) == 0)
                return fail(op, err, p->dtype_loc, "'%s.dtype': '%s' is optional, and None has no dtype: name a "
                            "tensor that is not optional", p->dtype_of, p->dtype_of);
    }
    return TK_OK;
}

tk_status tk_check_optional_tensors(tk_op *op, tk_error *err) {
    const tk_opdecl *d = op->decl;
    int any = 0, required = 0;
    for (int i = 0; i < d->nparams; i++) {
        if (d->params[i].kind != TK_P_TENSOR) continue;
        if (!d->params[i].optional) {
            required = 1;
            continue;
        }
        any = 1;
        tk_status st = check_one(op, err, i);
        if (st != TK_OK) return st;
    }
    if (!any) return TK_OK;
    if (!required)
        return fail(op, err, d->loc, "every tensor parameter of '%s' is optional: it needs one that is not (torch "
                    "picks the CPU or CUDA kernel from it, and the optional ones take their dims from it)", d->name);
    tk_status st = check_dtype_sources(op, err);
    if (st != TK_OK) return st;
    for (int k = 0; k < op->ndims; k++) {   /* (a dim binds to the first tensor naming it; the optional come last) */
        int binder = op->dims[k].param;
        if (!optional_tensor(d, binder)) continue;
        return fail(op, err, dim_loc(op, binder, k), "dim '%s' is named only by optional tensor '%s': when it is "
                    "None nothing gives %s (name it in a tensor that is not optional)", op->dims[k].name,
                    d->params[binder].name, op->dims[k].name);
    }
    return TK_OK;
}

double tk_tensor_fill(const tk_param *p) {
    const tk_expr *e = p->default_value;
    if (!e) return 0.0;
    if (e->kind == TK_E_BOOL) return e->ival ? 1.0 : 0.0;
    return tk_float_default(p);
}
