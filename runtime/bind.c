/* bind.c - binding a call: validates arguments against an op, evaluates
 * defaults and output shapes with checked 64-bit arithmetic, fills the
 * kernel arguments, and runs a range of the index space on the CPU. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core.h"

static tk_status call_fail(tk_call *call, const char *fmt, ...) {
    va_list ap;
    int n = snprintf(call->msg, sizeof call->msg, "tk.%s: ", call->op->decl->name);
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof call->msg)
        vsnprintf(call->msg + n, sizeof call->msg - (size_t)n, fmt, ap);
    va_end(ap);
    return TK_ERR_ARG;
}

/* The error of a call tk_bind did not bind (tk_set_output, tk_run_cpu, tk_rebind_data refuse it). */
static tk_status not_bound(tk_call *call) {
    return call_fail(call, "the call is not bound (tk_bind failed, or was not called)");
}

/* ---- int expressions ----------------------------------------------------- */

static int floordiv_ok(int64_t a, int64_t b, int64_t *q) {
    if (b == 0) return 0;
    if (b == -1 && a == INT64_MIN) return 0;
    *q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) *q -= 1;
    return 1;
}

static tk_status eval_fail(char *err, size_t errlen, const char *what) {
    snprintf(err, errlen, "%s", what);
    return TK_ERR_ARG;
}

static tk_status eval_binary(tk_opc op, int64_t a, int64_t b, int64_t *r, char *err, size_t errlen) {
    int bad = 0;
    switch (op) {
    case TK_OPC_ADD: bad = __builtin_add_overflow(a, b, r); break;
    case TK_OPC_SUB: bad = __builtin_sub_overflow(a, b, r); break;
    case TK_OPC_MUL: bad = __builtin_mul_overflow(a, b, r); break;
    case TK_OPC_FLOORDIV:
        if (!floordiv_ok(a, b, r)) return eval_fail(err, errlen, "division by zero or overflow");
        break;
    case TK_OPC_MOD:    /* Python's: the sign of b; x % -1 is 0 (INT64_MIN % -1 traps in C) */
        if (b == 0) return eval_fail(err, errlen, "modulo by zero");
        *r = b == -1 ? 0 : a % b;
        if (*r != 0 && ((*r < 0) != (b < 0))) *r += b;
        break;
    case TK_OPC_EQ: *r = a == b; break;
    case TK_OPC_NE: *r = a != b; break;
    case TK_OPC_LT: *r = a < b; break;
    case TK_OPC_LE: *r = a <= b; break;
    case TK_OPC_GT: *r = a > b; break;
    case TK_OPC_GE: *r = a >= b; break;
    case TK_OPC_AND: *r = a && b; break;
    case TK_OPC_OR: *r = a || b; break;
    default: return eval_fail(err, errlen, "unsupported operator");
    }
    return bad ? eval_fail(err, errlen, "integer overflow") : TK_OK;
}

tk_status tk_eval_int(const tk_op *op, const tk_expr *e, const int64_t *islots,
                      const int *ibound, int64_t *out, char *err, size_t errlen) {
    int64_t a, b, c;
    tk_status st;
    switch (e->kind) {
    case TK_E_INT: case TK_E_BOOL: *out = e->ival; return TK_OK;
    case TK_E_NAME: {
        int idx, slot;
        tk_sym_kind k = tk_resolve_header(op, e->name, &idx);
        if (k == TK_SYM_DIM) slot = op->dims[idx].slot;
        else if (k == TK_SYM_INT) slot = op->slot[idx];
        else return eval_fail(err, errlen, "not an int");
        if (!ibound[slot]) {
            snprintf(err, errlen, "'%s' is not known yet", e->name);
            return TK_ERR_ARG;
        }
        *out = islots[slot];
        return TK_OK;
    }
    case TK_E_UNARY:
        if ((st = tk_eval_int(op, e->args[0], islots, ibound, &a, err, errlen))) return st;
        if (e->op == TK_OPC_NOT) *out = !a;
        else if (e->op == TK_OPC_NEG) {
            if (a == INT64_MIN) return eval_fail(err, errlen, "integer overflow");
            *out = -a;
        } else *out = a;
        return TK_OK;
    case TK_E_BINARY:
        if ((st = tk_eval_int(op, e->args[0], islots, ibound, &a, err, errlen))) return st;
        if ((e->op == TK_OPC_AND && !a) || (e->op == TK_OPC_OR && a)) {   /* Python's short circuit */
            *out = a != 0;
            return TK_OK;
        }
        if ((st = tk_eval_int(op, e->args[1], islots, ibound, &b, err, errlen))) return st;
        return eval_binary(e->op, a, b, out, err, errlen);
    case TK_E_COND:
        if ((st = tk_eval_int(op, e->args[1], islots, ibound, &c, err, errlen))) return st;
        return tk_eval_int(op, e->args[c ? 0 : 2], islots, ibound, out, err, errlen);
    case TK_E_CALL:
        if ((st = tk_eval_int(op, e->args[0], islots, ibound, &a, err, errlen))) return st;
        if (e->name[0] == 'a') {    /* abs */
            if (a == INT64_MIN) return eval_fail(err, errlen, "integer overflow");
            *out = a < 0 ? -a : a;
            return TK_OK;
        }
        if ((st = tk_eval_int(op, e->args[1], islots, ibound, &b, err, errlen))) return st;
        *out = strcmp(e->name, "min") == 0 ? (b < a ? b : a) : (b > a ? b : a);
        return TK_OK;
    default:
        return eval_fail(err, errlen, "not an int expression");
    }
}

/* ---- binding ------------------------------------------------------------- */

typedef struct binder {
    tk_call *call;
    const tk_op *op;
    const tk_arg *args;
    int ibound[TK_MAX_INTS];
    int batch_param;        /* first input with '...', -1 if none */
    int nb;                 /* the batch dims: the most any '...' input has */
    int64_t bsize[TK_MAX_DIMS];   /* their broadcast sizes, the innermost first (bsize[0]: dim nb - 1) */
    int bsrc[TK_MAX_DIMS];        /* the input that gave each (its size is not 1, or all are 1) */
    int device_param;       /* first tensor argument, -1 if none */
    int types_only;         /* tk_bind_types: sizes are not known */
} binder;

/* "[2, 3]": the n sizes, cut short with ", ...]" when out (cap >= 32) is too small */
static void sizes_text(const int64_t *sizes, int n, char *out, size_t cap) {
    size_t len = 1;
    int d = 0;
    out[0] = '[';
    for (; d < n && len + 22 + 7 < cap; d++) {   /* a size and its ", " take <= 22; the tail 7 */
        int w = snprintf(out + len, cap - len, "%s%lld", d ? ", " : "", (long long)sizes[d]);
        if (w > 0) len += (size_t)w;
    }
    snprintf(out + len, cap - len, "%s]", d < n ? ", ..." : "");
}

static void dims_text(const tk_param *p, char *out, size_t n) {
    size_t len = 0;
    out[0] = 0;
    for (int j = 0; j < p->ndims && len < n; j++) {
        const tk_expr *e = p->dims[j];
        int w = snprintf(out + len, n - len, "%s", j ? ", " : "");
        if (w > 0) len += (size_t)w;
        if (len >= n) break;
        if (e->kind == TK_E_ELLIPSIS) w = snprintf(out + len, n - len, "...");
        else if (e->kind == TK_E_INT) w = snprintf(out + len, n - len, "%lld", (long long)e->ival);
        else if (e->kind == TK_E_NAME) w = snprintf(out + len, n - len, "%s", e->name);
        else w = snprintf(out + len, n - len, "expr");
        if (w > 0) len += (size_t)w;
    }
}

static const char *device_text(tk_device d, int index, char *buf, size_t n) {
    static const char *const names[] = {"cpu", "cuda", "meta"};
    if (d == TK_CUDA) snprintf(buf, n, "cuda:%d", index);
    else snprintf(buf, n, "%s", (unsigned)d < 3 ? names[d] : "?");
    return buf;
}

/* The dtype of tensor argument i: a None optional one's is its declared
 * one, or that of the tensor its 'x.dtype' names (not optional: checked). */
static tk_dtype arg_dtype(const binder *b, int i) {
    if (!b->args[i].is_none) return b->args[i].t.dtype;
    const tk_param *p = &b->op->decl->params[i];
    if (p->dtype_of) return arg_dtype(b, b->op->dtype_src[i]);
    for (int t = 0; t < TK_DTYPE_COUNT; t++)
        if (p->dtype_mask == (1u << t)) return (tk_dtype)t;
    return TK_DTYPE_COUNT;
}

static tk_status bind_dtype(binder *b, int i) {
    const tk_op *op = b->op;
    const tk_param *p = &op->decl->params[i];
    tk_dtype dt = b->args[i].t.dtype;
    if ((unsigned)dt >= TK_DTYPE_COUNT) return call_fail(b->call, "argument '%s': unknown dtype", p->name);
    if (p->dtype_of) {
        tk_dtype want = b->args[op->dtype_src[i]].t.dtype;
        if (dt != want)
            return call_fail(b->call, "argument '%s': dtype %s must match %s's dtype %s", p->name,
                             tk_dtype_name(dt), p->dtype_of, tk_dtype_name(want));
        return TK_OK;
    }
    if (!(p->dtype_mask & (1u << dt))) {
        char allowed[256] = "";
        size_t len = 0;
        for (int t = 0; t < TK_DTYPE_COUNT; t++)
            if (p->dtype_mask & (1u << t)) {
                int w = snprintf(allowed + len, sizeof allowed - len, "%s%s", len ? ", " : "",
                                 tk_dtype_name((tk_dtype)t));
                if (w > 0 && (size_t)w < sizeof allowed - len) len += (size_t)w;
            }
        return call_fail(b->call, "argument '%s': dtype %s is not supported (expected %s)", p->name,
                         tk_dtype_name(dt), allowed);
    }
    return TK_OK;
}

static tk_status bind_device(binder *b, int i) {
    const tk_tensor_view *v = &b->args[i].t;
    if (v->device != TK_CPU && v->device != TK_CUDA && v->device != TK_META)
        return call_fail(b->call, "argument '%s': device %d is not a tk_device", b->op->decl->params[i].name,
                         (int)v->device);
    if (b->device_param < 0) {
        b->device_param = i;
        b->call->device = v->device;
        b->call->device_index = v->device_index;
        return TK_OK;
    }
    if (v->device != b->call->device || (v->device == TK_CUDA && v->device_index != b->call->device_index)) {
        char d1[32], d2[32];
        return call_fail(b->call, "argument '%s' is on %s but '%s' is on %s", b->op->decl->params[i].name,
                         device_text(v->device, v->device_index, d1, sizeof d1),
                         b->op->decl->params[b->device_param].name,
                         device_text(b->call->device, b->call->device_index, d2, sizeof d2));
    }
    return TK_OK;
}

/* Merges the nb batch dims of '...' input i into the broadcast batch shape,
 * as torch broadcasts: aligned from the innermost, each pair of sizes equal
 * or one of them 1. */
static tk_status broadcast_batch(binder *b, int i, int nb) {
    const tk_tensor_view *v = &b->args[i].t;
    for (int j = 0; j < nb; j++) {
        int64_t s = v->sizes[nb - 1 - j];
        if (j >= b->nb || b->bsize[j] == 1) {
            if (j >= b->nb || s != 1) b->bsrc[j] = i;
            b->bsize[j] = s;
        } else if (s != 1 && s != b->bsize[j]) {
            const tk_param *q = &b->op->decl->params[b->bsrc[j]];
            const tk_tensor_view *w = &b->args[b->bsrc[j]].t;
            int wnb = w->ndim - tk_explicit_dims(q);
            char mine[160], theirs[160];
            sizes_text(v->sizes, nb, mine, sizeof mine);
            sizes_text(w->sizes, wnb, theirs, sizeof theirs);
            return call_fail(b->call, "argument '%s': its batch dims (...) are %s, which do not broadcast with "
                             "those of '%s', %s (%lld against %lld, as torch broadcasts: equal, or one of them 1)",
                             b->op->decl->params[i].name, mine, q->name, theirs, (long long)s,
                             (long long)b->bsize[j]);
        }
    }
    if (nb > b->nb) b->nb = nb;
    return TK_OK;
}

/* None for optional tensor i (docs/spec.md, Optional tensors): its kernel
 * view has the sizes the tensors before it gave its dims (no sizes when
 * types_only), stride 1 along its innermost dim and 0 along the others, so
 * that one row holding the default serves every element; its data comes
 * with tk_set_fill. ('...': no batch dims, expand_batch broadcasts it.) */
static tk_status bind_none(binder *b, int i) {
    const tk_op *op = b->op;
    const tk_param *p = &op->decl->params[i];
    if (!p->optional) return call_fail(b->call, "argument '%s': expected a tensor, got None", p->name);
    tk_ktensor *kt = &b->call->kargs.t[op->slot[i]];
    memset(kt, 0, sizeof *kt);
    b->call->none |= 1u << op->slot[i];
    int nexp = tk_explicit_dims(p), ell = p->ndims - nexp;
    kt->ndim = nexp;
    for (int k = 0; k < nexp && !b->types_only; k++) {
        const tk_expr *e = p->dims[ell + k];
        if (e->kind == TK_E_INT) {
            kt->size[k] = e->ival;
        } else {
            int slot = op->dims[op->dim_sym[i][ell + k]].slot;
            if (!b->ibound[slot])   /* (the tensors that give it come first: they have no default) */
                return call_fail(b->call, "argument '%s' is None and nothing before it gave dim %s", p->name, e->name);
            kt->size[k] = b->call->kargs.i[slot];
        }
        kt->stride[k] = k == nexp - 1;
    }
    return TK_OK;
}

/* Once every argument is bound: each '...' input's kernel view gets all nb
 * batch dims, of the broadcast sizes, with stride 0 where it has size 1 or
 * lacks the dim (read in place, nothing copied). A 'mut' input is written:
 * it must have the whole batch shape itself. */
static tk_status expand_batch(binder *b) {
    const tk_op *op = b->op;
    for (int i = 0; i < op->decl->nparams; i++) {
        const tk_param *p = &op->decl->params[i];
        if (p->kind != TK_P_TENSOR || !(p->ndims > 0 && p->dims[0]->kind == TK_E_ELLIPSIS)) continue;
        if (b->args[i].is_none) {   /* (none of the batch dims: every one broadcast) */
            tk_ktensor *kt = &b->call->kargs.t[op->slot[i]];
            if (b->nb + kt->ndim > TK_MAX_DIMS)
                return call_fail(b->call, "argument '%s': with the broadcast batch dims it would have %d dims, more "
                                 "than the %d supported", p->name, b->nb + (int)kt->ndim, TK_MAX_DIMS);
            for (int k = (int)kt->ndim - 1; k >= 0; k--) {
                kt->size[b->nb + k] = kt->size[k];
                kt->stride[b->nb + k] = kt->stride[k];
            }
            for (int k = 0; k < b->nb; k++) {
                kt->size[k] = b->bsize[b->nb - 1 - k];
                kt->stride[k] = 0;
            }
            kt->ndim += b->nb;
            continue;
        }
        const tk_tensor_view *v = &b->args[i].t;
        int nexp = tk_explicit_dims(p), nbv = v->ndim - nexp, same = nbv == b->nb;
        for (int j = 0; same && j < nbv; j++) same = v->sizes[nbv - 1 - j] == b->bsize[j];
        if (same) continue;
        if (p->mut) {
            char mine[160], all[160];
            int64_t bs[TK_MAX_DIMS];
            for (int k = 0; k < b->nb; k++) bs[k] = b->bsize[b->nb - 1 - k];
            sizes_text(v->sizes, nbv, mine, sizeof mine);
            sizes_text(bs, b->nb, all, sizeof all);
            return call_fail(b->call, "argument '%s' is updated in place ('mut'), so its batch dims (...) must be "
                             "the call's, %s, not %s", p->name, all, mine);
        }
        if (b->nb + nexp > TK_MAX_DIMS)
            return call_fail(b->call, "argument '%s': with the broadcast batch dims it would have %d dims, more "
                             "than the %d supported", p->name, b->nb + nexp, TK_MAX_DIMS);
        tk_ktensor *kt = &b->call->kargs.t[op->slot[i]];
        for (int k = 0; k < b->nb; k++) {
            int j = b->nb - 1 - k, src = nbv - 1 - j;   /* (j from the innermost; src: its dim, if it has it) */
            kt->size[k] = b->bsize[j];
            kt->stride[k] = src >= 0 && v->sizes[src] == b->bsize[j] ? v->strides[src] : 0;
        }
        for (int k = 0; k < nexp; k++) {
            kt->size[b->nb + k] = v->sizes[nbv + k];
            kt->stride[b->nb + k] = v->strides[nbv + k];
        }
        kt->ndim = b->nb + nexp;
    }
    return TK_OK;
}

/* Checks rank, batch shape and explicit dims of tensor argument i. */
static tk_status bind_shape(binder *b, int i) {
    const tk_op *op = b->op;
    const tk_param *p = &op->decl->params[i];
    const tk_tensor_view *v = &b->args[i].t;
    int ell = p->ndims > 0 && p->dims[0]->kind == TK_E_ELLIPSIS;
    int nexp = tk_explicit_dims(p);
    if (v->ndim < 0)
        return call_fail(b->call, "argument '%s': a view with %d dims", p->name, v->ndim);
    if (v->ndim > TK_MAX_DIMS)
        return call_fail(b->call, "argument '%s': %d dims is more than the %d supported", p->name, v->ndim, TK_MAX_DIMS);
    if (ell ? v->ndim < nexp : v->ndim != nexp) {
        char dt[160];
        dims_text(p, dt, sizeof dt);
        return call_fail(b->call, "argument '%s': expected %s%d dims (%s), got %d", p->name,
                         ell ? "at least " : "", nexp, dt, v->ndim);
    }
    for (int d = 0; d < v->ndim; d++)
        if (v->sizes[d] < 0) return call_fail(b->call, "argument '%s': negative size in dim %d", p->name, d);
    int nb = v->ndim - nexp;
    if (ell && b->batch_param < 0) b->batch_param = i;
    if (ell && b->types_only && nb > b->nb) b->nb = nb;
    if (b->types_only) return TK_OK;
    if (ell) {
        tk_status st = broadcast_batch(b, i, nb);
        if (st != TK_OK) return st;
    }
    int axis = 0;
    for (int j = 0; j < p->ndims; j++) {
        const tk_expr *e = p->dims[j];
        if (e->kind == TK_E_ELLIPSIS) continue;
        int64_t size = v->sizes[nb + axis];
        if (e->kind == TK_E_INT && size != e->ival)
            return call_fail(b->call, "argument '%s': dim %d must be %lld, got %lld", p->name, nb + axis,
                             (long long)e->ival, (long long)size);
        if (e->kind == TK_E_NAME) {
            const tk_dimsym *ds = &op->dims[op->dim_sym[i][j]];
            if (!b->ibound[ds->slot]) {
                b->call->kargs.i[ds->slot] = size;
                b->ibound[ds->slot] = 1;
            } else if (b->call->kargs.i[ds->slot] != size) {
                return call_fail(b->call, "argument '%s': dim %d (%s) is %lld but %s gives %s = %lld",
                                 p->name, nb + axis, e->name, (long long)size,
                                 op->decl->params[ds->param].name, e->name,
                                 (long long)b->call->kargs.i[ds->slot]);
            }
        }
        axis++;
    }
    return TK_OK;
}

static tk_status bind_scalar(binder *b, int i) {
    const tk_param *p = &b->op->decl->params[i];
    const tk_arg *a = &b->args[i];
    int slot = b->op->slot[i];
    if (p->kind == TK_P_FLOAT) {
        if (a->kind != TK_P_FLOAT && a->kind != TK_P_INT)
            return call_fail(b->call, "argument '%s': expected a float", p->name);
        if (a->is_none) {   /* 'float? = 1e-5': None means the default */
            if (!p->optional) return call_fail(b->call, "argument '%s': None is not allowed", p->name);
            b->call->kargs.f[slot] = tk_float_default(p);
            return TK_OK;
        }
        b->call->kargs.f[slot] = a->kind == TK_P_INT ? (double)a->i : a->f;
        return TK_OK;
    }
    if (a->kind != TK_P_INT && a->kind != TK_P_BOOL)
        return call_fail(b->call, "argument '%s': expected %s", p->name, p->kind == TK_P_BOOL ? "a bool" : "an int");
    if (a->is_none) {
        if (!p->optional) return call_fail(b->call, "argument '%s': None is not allowed", p->name);
        return TK_OK;   /* default evaluated once all dims are bound */
    }
    b->call->kargs.i[slot] = p->kind == TK_P_BOOL ? (a->i != 0) : a->i;
    b->ibound[slot] = 1;
    return TK_OK;
}

static void mark_sources(const binder *b, const tk_expr *e, int *seen, int depth);
static const char *sources_text(const binder *b, const int *seen, char *buf, size_t n);

static tk_status bind_defaults(binder *b) {
    const tk_opdecl *d = b->op->decl;
    for (int i = 0; i < d->nparams; i++) {
        const tk_param *p = &d->params[i];
        int slot = b->op->slot[i];
        if (p->kind != TK_P_INT || !b->args[i].is_none) continue;
        if (!p->default_value)
            return call_fail(b->call, "argument '%s': None is not allowed (it has no default)", p->name);
        char err[128];
        int64_t v;
        if (tk_eval_int(b->op, p->default_value, b->call->kargs.i, b->ibound, &v, err, sizeof err)) {
            char from[256];
            int seen[TK_MAX_TENSORS * 4] = {0};
            mark_sources(b, p->default_value, seen, 0);
            return call_fail(b->call, "argument '%s': its default cannot be computed: %s%s", p->name, err,
                             sources_text(b, seen, from, sizeof from));
        }
        b->call->kargs.i[slot] = v;
        b->ibound[slot] = 1;
    }
    return TK_OK;
}

/* The values an assert's condition reads, for its error: "D = 63, H = 2". */
typedef struct values_list {
    char text[192];
    size_t len;
    const char *named[16];
    int nnamed;
} values_list;

/* Appends "NAME = value" to v for each dim and int parameter e names that
 * v does not hold yet. */
static void values_text(const binder *b, const tk_expr *e, values_list *v) {
    int idx, slot;
    if (e->kind != TK_E_NAME) {
        for (int i = 0; i < e->nargs; i++) values_text(b, e->args[i], v);
        return;
    }
    tk_sym_kind k = tk_resolve_header(b->op, e->name, &idx);
    if (k == TK_SYM_DIM) slot = b->op->dims[idx].slot;
    else if (k == TK_SYM_INT || k == TK_SYM_FLOAT) slot = b->op->slot[idx];
    else return;
    for (int i = 0; i < v->nnamed; i++)
        if (strcmp(v->named[i], e->name) == 0) return;
    if (v->nnamed == 16) return;
    v->named[v->nnamed++] = e->name;
    size_t room = sizeof v->text - v->len;
    int w = k == TK_SYM_FLOAT ? snprintf(v->text + v->len, room, "%s%s = %.17g", v->len ? ", " : "", e->name,
                                         b->call->kargs.f[slot])
                              : snprintf(v->text + v->len, room, "%s%s = %lld", v->len ? ", " : "", e->name,
                                         (long long)b->call->kargs.i[slot]);
    if (w > 0 && (size_t)w < room) v->len += (size_t)w;
    else v->text[v->len] = 0;
}

/* A value of an assert's condition: an int (dims, int and bool parameters)
 * or a float (float parameters and literals, '/'). */
typedef struct num {
    int isf;
    int64_t i;
    double f;
} num;

static double num_f(num a) { return a.isf ? a.f : (double)a.i; }
static int num_true(num a) { return a.isf ? a.f != 0.0 : a.i != 0; }
static num num_int(int64_t i) { num r = {0, i, 0.0}; return r; }
static num num_float(double f) { num r = {1, 0, f}; return r; }

/* Binary op on a and b, one of them a float (or '/'), as Python computes
 * it; division by zero is an error as in Python. */
static tk_status eval_float_binary(tk_opc op, num a, num b, num *r, char *err, size_t errlen) {
    double x = num_f(a), y = num_f(b);
    switch (op) {
    case TK_OPC_ADD: *r = num_float(x + y); return TK_OK;
    case TK_OPC_SUB: *r = num_float(x - y); return TK_OK;
    case TK_OPC_MUL: *r = num_float(x * y); return TK_OK;
    case TK_OPC_DIV:
    case TK_OPC_FLOORDIV:
    case TK_OPC_MOD:
        if (y == 0.0) return eval_fail(err, errlen, "division by zero");
        *r = num_float(op == TK_OPC_DIV ? x / y : op == TK_OPC_MOD ? tk_fmod_py(x, y) : tk_floordiv_py(x, y));
        return TK_OK;
    case TK_OPC_EQ: *r = num_int(x == y); return TK_OK;
    case TK_OPC_NE: *r = num_int(x != y); return TK_OK;
    case TK_OPC_LT: *r = num_int(x < y); return TK_OK;
    case TK_OPC_LE: *r = num_int(x <= y); return TK_OK;
    case TK_OPC_GT: *r = num_int(x > y); return TK_OK;
    case TK_OPC_GE: *r = num_int(x >= y); return TK_OK;
    case TK_OPC_AND: *r = num_int(num_true(a) && num_true(b)); return TK_OK;
    case TK_OPC_OR: *r = num_int(num_true(a) || num_true(b)); return TK_OK;
    default: return eval_fail(err, errlen, "unsupported operator");
    }
}

/* Evaluates assert condition e (check.c's check_assert_expr forms) on the
 * bound call: a part that reads no float is tk_eval_int's, the rest as
 * Python computes with floats. */
static tk_status eval_num(const binder *b, const tk_expr *e, num *out, char *err, size_t errlen) {
    num x, y;
    tk_status st;
    int idx;
    if (!tk_expr_reads_float(b->op, e)) {
        out->isf = 0;
        return tk_eval_int(b->op, e, b->call->kargs.i, b->ibound, &out->i, err, errlen);
    }
    switch (e->kind) {
    case TK_E_NAME:   /* a float parameter */
        tk_resolve_header(b->op, e->name, &idx);
        *out = num_float(b->call->kargs.f[b->op->slot[idx]]);
        return TK_OK;
    case TK_E_UNARY:
        if ((st = eval_num(b, e->args[0], &x, err, errlen))) return st;
        *out = e->op == TK_OPC_NOT ? num_int(!num_true(x)) : num_float(e->op == TK_OPC_NEG ? -x.f : x.f);
        return TK_OK;
    case TK_E_BINARY:
        if ((st = eval_num(b, e->args[0], &x, err, errlen))) return st;
        if ((e->op == TK_OPC_AND && !num_true(x)) || (e->op == TK_OPC_OR && num_true(x))) {   /* short circuit */
            *out = num_int(num_true(x));
            return TK_OK;
        }
        if ((st = eval_num(b, e->args[1], &y, err, errlen))) return st;
        if (!x.isf && !y.isf && e->op != TK_OPC_DIV) {   /* and/or of int sides */
            out->isf = 0;
            return eval_binary(e->op, x.i, y.i, &out->i, err, errlen);
        }
        return eval_float_binary(e->op, x, y, out, err, errlen);
    case TK_E_COND:
        if ((st = eval_num(b, e->args[1], &x, err, errlen))) return st;
        return eval_num(b, e->args[num_true(x) ? 0 : 2], out, err, errlen);
    case TK_E_CALL:   /* abs, min, max with a float argument */
        if ((st = eval_num(b, e->args[0], &x, err, errlen))) return st;
        if (e->nargs == 1) {
            *out = num_float(fabs(num_f(x)));
            return TK_OK;
        }
        if ((st = eval_num(b, e->args[1], &y, err, errlen))) return st;
        /* like Python's: the second only when strictly less (more) */
        if (strcmp(e->name, "min") == 0) *out = num_f(y) < num_f(x) ? y : x;
        else *out = num_f(y) > num_f(x) ? y : x;
        return TK_OK;
    default:   /* a float literal */
        *out = num_float(e->fval);
        return TK_OK;
    }
}

/* The 'assert' lines, once the dims, scalars and defaults are bound: each
 * must give a nonzero value; the error names the condition, its place, the
 * values in it and the arguments they come from. */
static tk_status check_asserts(binder *b) {
    const tk_opdecl *d = b->op->decl;
    for (int i = 0; i < d->nasserts; i++) {
        char err[128], text[256], from[256];
        num r;
        values_list v = {.len = 0};
        int seen[TK_MAX_TENSORS * 4] = {0};
        tk_status st = eval_num(b, d->asserts[i], &r, err, sizeof err);
        if (st == TK_OK && num_true(r)) continue;
        tk_op_assert_text(b->op, i, text, sizeof text);
        values_text(b, d->asserts[i], &v);
        mark_sources(b, d->asserts[i], seen, 0);
        sources_text(b, seen, from, sizeof from);
        if (st != TK_OK)
            return call_fail(b->call, "assert %s cannot be evaluated: %s%s%s%s", text, err, v.len ? " with " : "",
                             v.text, from);
        return call_fail(b->call, "assert %s failed%s%s%s", text, v.len ? " with " : "", v.text, from);
    }
    return TK_OK;
}

/* Marks in seen[] the arguments whose values expression e reads: the tensor
 * that binds each dim, each int parameter (through its default when it was
 * passed as None). */
static void mark_sources(const binder *b, const tk_expr *e, int *seen, int depth) {
    if (!e || depth > 16) return;
    int idx;
    if (e->kind == TK_E_NAME) {
        tk_sym_kind k = tk_resolve_header(b->op, e->name, &idx);
        if (k == TK_SYM_DIM) seen[b->op->dims[idx].param] = 1;
        else if (k == TK_SYM_INT && b->args[idx].is_none) mark_sources(b, b->op->decl->params[idx].default_value, seen, depth + 1);
        else if (k == TK_SYM_INT || k == TK_SYM_FLOAT) seen[idx] = 1;
        return;
    }
    for (int i = 0; i < e->nargs; i++) mark_sources(b, e->args[i], seen, depth + 1);
}

/* " (from arguments 'a', 'b')" for the arguments marked in seen[]; "" if none. */
static const char *sources_text(const binder *b, const int *seen, char *buf, size_t n) {
    const tk_opdecl *d = b->op->decl;
    int count = 0;
    for (int i = 0; i < d->nparams; i++) count += seen[i] != 0;
    buf[0] = 0;
    if (count == 0) return buf;
    size_t len = (size_t)snprintf(buf, n, " (from argument%s ", count > 1 ? "s" : "");
    for (int i = 0, k = 0; i < d->nparams && len < n; i++)
        if (seen[i]) {
            int w = snprintf(buf + len, n - len, "%s'%s'", k++ ? ", " : "", d->params[i].name);
            if (w > 0) len += (size_t)w;
        }
    if (len + 2 < n) strcat(buf, ")");
    return buf;
}

/* A row loop's index space: the batch dims (the first nb) and the dims the
 * loop names of the loop output; the '_' dims are walked inside an iteration.
 * Empty when every output is (no iteration would write anything; scratch
 * tensors do not count: nothing would see them); -1 when the count
 * overflows (the loop output may be empty through an owned dim, T = 0, while
 * its other dims are huge). */
static int64_t row_domain(const tk_op *op, const tk_call *call, int nb) {
    const tk_opdecl *d = op->decl;
    const int lo = op->loop_out;
    int any = 0;
    for (int o = 0; o < d->noutputs && !any; o++) {
        if (d->outputs[o].scratch) continue;
        int empty = 0;
        for (int j = 0; j < call->out_ndim[o]; j++) empty |= call->out_sizes[o][j] == 0;
        any = !empty;
    }
    if (!any) return 0;
    int64_t n = 1;
    for (int j = 0; j < nb; j++)
        if (__builtin_mul_overflow(n, call->out_sizes[lo][j], &n)) return -1;
    for (int i = 0; i < d->nloop; i++)
        if (!tk_owned_dim(d->loop_vars[i]) && __builtin_mul_overflow(n, call->out_sizes[lo][nb + i], &n)) return -1;
    return n;
}

/* Row loops: every output a loop variable indexes (op->row_pos) has that
 * dim's size of the loop output, so the iterations' stores stay in it. */
static tk_status check_row_dims(binder *b, int nb) {
    const tk_op *op = b->op;
    tk_call *call = b->call;
    const tk_opdecl *d = op->decl;
    const int lo = op->loop_out;
    for (int o = 0; o < d->noutputs; o++)
        for (int i = 0; i < d->nloop; i++) {
            int at = op->row_pos[o][i];
            if (at < 0 || o == lo) continue;
            int64_t mine = call->out_sizes[o][nb + at], want = call->out_sizes[lo][nb + i];
            if (mine != want)
                return call_fail(call, "output '%s': dim %d is %lld, but the loop variable %s that indexes it "
                                 "runs over the loop output '%s''s dim %d (%lld)", d->outputs[o].name, nb + at,
                                 (long long)mine, d->loop_vars[i], d->outputs[lo].name, nb + i, (long long)want);
        }
    return TK_OK;
}

/* Computes each output's shape; all outputs share the loop output's shape
 * (row loops: its batch dims, and the sizes of the dims their loop
 * variables index, check_row_dims). */
/* What an op's output p is called in messages: a scratch tensor (memory
 * the caller gives the body) or an output. */
static const char *out_kind(const tk_param *p) { return p->scratch ? "scratch tensor" : "output"; }

static tk_status bind_outputs(binder *b) {
    const tk_op *op = b->op;
    tk_call *call = b->call;
    const tk_opdecl *d = op->decl;
    int nb = b->nb;
    call->index_work = 1;
    call->noutputs = d->noutputs;
    for (int o = 0; o < d->noutputs; o++) {
        const tk_param *p = &d->outputs[o];
        int nd = 0;
        for (int j = 0; j < p->ndims; j++) {
            const tk_expr *e = p->dims[j];
            if (e->kind == TK_E_ELLIPSIS) {
                if (nb + tk_explicit_dims(p) > TK_MAX_DIMS)
                    return call_fail(call, "%s '%s' would have more than %d dims", out_kind(p), p->name, TK_MAX_DIMS);
                for (int k = 0; k < nb; k++) call->out_sizes[o][nd++] = b->bsize[nb - 1 - k];
                continue;
            }
            char err[128], from[256];
            int64_t v;
            int seen[TK_MAX_TENSORS * 4] = {0};
            tk_status st = tk_eval_int(op, e, call->kargs.i, b->ibound, &v, err, sizeof err);
            if (st != TK_OK || v < 0) mark_sources(b, e, seen, 0);   /* the arguments to blame */
            if (st != TK_OK)
                return call_fail(call, "%s '%s': dim %d cannot be computed: %s%s", out_kind(p), p->name, nd, err,
                                 sources_text(b, seen, from, sizeof from));
            if (v < 0)
                return call_fail(call, "%s '%s': dim %d would be %lld; it must be >= 0%s", out_kind(p), p->name, nd,
                                 (long long)v, sources_text(b, seen, from, sizeof from));
            call->out_sizes[o][nd++] = v;
        }
        call->out_ndim[o] = nd;
        call->out_dtype[o] = tk_variant_out_dtype(op, call->variant, o);
    }
    const int lo = op->loop_out;
    int64_t numel = 1;
    for (int j = 0; j < call->out_ndim[lo]; j++)
        if (__builtin_mul_overflow(numel, call->out_sizes[lo][j], &numel) ||
            numel > INT64_MAX / 16) {
            char from[256];
            int seen[TK_MAX_TENSORS * 4] = {0};
            const tk_param *p = &d->outputs[lo];
            for (int k = 0; k < p->ndims; k++)
                if (p->dims[k]->kind == TK_E_ELLIPSIS)   /* (every '...' input: the batch broadcasts them) */
                    for (int i = 0; i < d->nparams; i++)
                        seen[i] |= d->params[i].kind == TK_P_TENSOR && d->params[i].ndims > 0 &&
                                   d->params[i].dims[0]->kind == TK_E_ELLIPSIS;
                else mark_sources(b, p->dims[k], seen, 0);
            return call_fail(call, "output '%s' is too large (its element count overflows)%s", p->name,
                             sources_text(b, seen, from, sizeof from));
        }
    if (op->row_loop) {
        tk_status st = check_row_dims(b, nb);
        if (st != TK_OK) return st;
        int64_t all = numel;
        numel = row_domain(op, call, nb);
        if (numel < 0)
            return call_fail(call, "output '%s': the row loop over it has too many iterations (their count "
                                   "overflows)", d->outputs[lo].name);
        call->index_work = numel > 0 && all / numel > 1 ? all / numel : 1;
    }
    for (int o = 0; o < d->noutputs && !op->row_loop; o++) {
        int same = call->out_ndim[o] == call->out_ndim[lo];
        for (int j = 0; same && j < call->out_ndim[o]; j++) same = call->out_sizes[o][j] == call->out_sizes[lo][j];
        if (!same) {
            char got[128], want[128];
            sizes_text(call->out_sizes[o], call->out_ndim[o], got, sizeof got);
            sizes_text(call->out_sizes[lo], call->out_ndim[lo], want, sizeof want);
            return call_fail(call, "output '%s' has shape %s, the loop output '%s' %s: in the element-wise form "
                             "every output has the loop output's shape (a row loop, `for _ in ...`, lifts this)",
                             d->outputs[o].name, got, d->outputs[lo].name, want);
        }
    }
    call->kargs.numel = numel;
    call->kargs.nbatch = nb;
    return TK_OK;
}

/* An input with no elements may be passed while the body never reads it:
 * it reads it only inside a `for` whose range is then empty (a mean over
 * an empty row: 0 / 0) or under a condition that is then false, or the
 * output is empty too (nothing runs). An input the body reads in every
 * iteration (op->read_always) cannot be empty when the output is not. */
static tk_status check_empty_inputs(binder *b) {
    if (b->call->kargs.numel == 0) return TK_OK;
    const tk_opdecl *d = b->op->decl;
    for (int i = 0; i < d->nparams; i++) {
        tk_loc at = b->op->read_always[i];
        if (d->params[i].kind != TK_P_TENSOR || at.line == 0) continue;
        const tk_ktensor *kt = &b->call->kargs.t[b->op->slot[i]];   /* (a None one's: its dims) */
        const tk_tensor_view *v = &b->args[i].t;
        int none = b->args[i].is_none, n = none ? (int)kt->ndim : v->ndim;
        for (int k = 0; k < n; k++)
            if ((none ? kt->size[k] : v->sizes[k]) == 0)
                return call_fail(b->call, "argument '%s' has no elements (dim %d is 0) but the output is not "
                                          "empty, and every element reads it (%s:%d:%d)",
                                 d->params[i].name, k, d->file, at.line, at.col);
    }
    return TK_OK;
}

static void fill_tensor(tk_ktensor *kt, const tk_tensor_view *v) {
    memset(kt, 0, sizeof *kt);
    kt->data = v->data;
    kt->ndim = v->ndim;
    for (int d = 0; d < v->ndim; d++) {
        kt->size[d] = v->sizes[d];
        kt->stride[d] = v->strides[d];
    }
}

static tk_status pick_variant(binder *b) {
    const tk_op *op = b->op;
    tk_dtype dv[TK_MAX_TENSORS];
    for (int v = 0; v < op->ndvars; v++) dv[v] = arg_dtype(b, op->dvars[v]);
    b->call->variant = tk_variant_index(op, dv);
    if (b->call->variant < 0) return call_fail(b->call, "no kernel for these dtypes");
    b->call->float_type = tk_variant_float_type(op, b->call->variant);
    return TK_OK;
}

/* Binds the arguments one by one (tk_bind's first half). */
static tk_status bind_args(const tk_op *op, const tk_arg *args, int nargs, tk_call *call, binder *b) {
    if (!call) return TK_ERR_INVALID;
    memset(call, 0, sizeof *call);
    call->op = op;
    if (!op || (nargs && !args)) {
        snprintf(call->msg, sizeof call->msg, "tk: invalid tk_bind call");
        call->op = NULL;
        return TK_ERR_INVALID;
    }
    b->call = call;
    b->op = op;
    b->args = args;
    b->batch_param = -1;
    b->device_param = -1;
    const tk_opdecl *d = op->decl;
    if (nargs != d->nparams)
        return call_fail(call, "expected %d arguments, got %d", d->nparams, nargs);
    for (int i = 0; i < d->nparams; i++) {
        tk_status st;
        if (d->params[i].kind == TK_P_TENSOR) {
            if (args[i].is_none) {
                if ((st = bind_none(b, i))) return st;
                continue;
            }
            if (args[i].kind != TK_P_TENSOR) return call_fail(call, "argument '%s': expected a tensor", d->params[i].name);
            if ((st = bind_dtype(b, i)) || (st = bind_device(b, i)) || (st = bind_shape(b, i))) return st;
            fill_tensor(&call->kargs.t[op->slot[i]], &args[i].t);
        } else if ((st = bind_scalar(b, i))) {
            return st;
        }
    }
    if (!b->types_only) {
        tk_status st = expand_batch(b);
        if (st != TK_OK) return st;
    }
    return pick_variant(b);
}

/* ---- read ranges (compiler/reads.c, tk_find_read_ranges) ----------------- */

typedef struct span {
    int64_t lo, hi;
} span;

/* Loop s's range [*lo, *hi) at this call (its bounds are known at the
 * call: reads.c); 0 when they cannot be computed. */
static int loop_range(const binder *b, const tk_stmt *s, int64_t *lo, int64_t *hi) {
    char err[128];
    *lo = 0;
    return !(s->lo && tk_eval_int(b->op, s->lo, b->call->kargs.i, b->ibound, lo, err, sizeof err)) &&
           !tk_eval_int(b->op, s->hi, b->call->kargs.i, b->ibound, hi, err, sizeof err);
}

/* The value range of linear index e of read range r at this call; 0 when
 * it cannot be computed (an overflow, an error in a known part). */
static int index_span(const binder *b, const tk_read_range *r, const tk_expr *e, span *out) {
    const tk_opdecl *d = b->op->decl;
    char err[128];
    span x, y;
    if (e->kind == TK_E_NAME) {
        for (int j = r->nloops - 1; j >= 0; j--)
            if (strcmp(r->loops[j]->name, e->name) == 0) {
                int64_t lo, hi;
                if (!loop_range(b, r->loops[j], &lo, &hi)) return 0;
                out->lo = lo;
                out->hi = hi - 1;
                return 1;
            }
        for (int i = 0; i < d->nloop; i++)
            if (strcmp(d->loop_vars[i], e->name) == 0) {
                int lo = b->op->loop_out, n = b->call->out_ndim[lo];
                out->lo = 0;
                out->hi = b->call->out_sizes[lo][n - d->nloop + i] - 1;
                return 1;
            }
    }
    if (e->kind == TK_E_BINARY && (e->op == TK_OPC_ADD || e->op == TK_OPC_SUB)) {
        if (!index_span(b, r, e->args[0], &x) || !index_span(b, r, e->args[1], &y)) return 0;
        if (e->op == TK_OPC_ADD)
            return !__builtin_add_overflow(x.lo, y.lo, &out->lo) && !__builtin_add_overflow(x.hi, y.hi, &out->hi);
        return !__builtin_sub_overflow(x.lo, y.hi, &out->lo) && !__builtin_sub_overflow(x.hi, y.lo, &out->hi);
    }
    if (e->kind == TK_E_UNARY && e->op == TK_OPC_NEG && e->args[0]->kind != TK_E_INT) {
        if (!index_span(b, r, e->args[0], &x) || x.lo == INT64_MIN || x.hi == INT64_MIN) return 0;
        out->lo = -x.hi;
        out->hi = -x.lo;
        return 1;
    }
    if (e->kind == TK_E_BINARY && e->op == TK_OPC_MUL &&
        (e->args[0]->kind == TK_E_INT) != (e->args[1]->kind == TK_E_INT)) {
        int64_t c = e->args[0]->kind == TK_E_INT ? e->args[0]->ival : e->args[1]->ival, p, q;
        if (!index_span(b, r, e->args[0]->kind == TK_E_INT ? e->args[1] : e->args[0], &x) ||
            __builtin_mul_overflow(x.lo, c, &p) || __builtin_mul_overflow(x.hi, c, &q))
            return 0;
        out->lo = p < q ? p : q;
        out->hi = p < q ? q : p;
        return 1;
    }
    int64_t v;   /* a value known at the call */
    if (tk_eval_int(b->op, e, b->call->kargs.i, b->ibound, &v, err, sizeof err)) return 0;
    out->lo = out->hi = v;
    return 1;
}

/* Each read range's indices against its tensor's dims, where the loops
 * around it run (reads.c: the extremes are then read): a read outside the
 * tensor refuses the call. Not for a checked op. */
static tk_status check_read_ranges(binder *b) {
    /* (a checked op's kernel compares every index itself, element by element) */
    if (b->call->kargs.numel == 0 || b->op->checked) return TK_OK;
    const tk_op *op = b->op;
    const tk_opdecl *d = op->decl;
    for (int i = 0; i < op->nranges; i++) {
        const tk_read_range *r = &op->ranges[i];
        const tk_arg *a = &b->args[r->param];
        if (a->is_none) continue;   /* (a None tensor reads its fill) */
        int empty = 0;
        for (int j = 0; j < r->nloops && !empty; j++) {
            int64_t lo, hi;
            empty = !loop_range(b, r->loops[j], &lo, &hi) || lo >= hi;   /* (not computable: not checked) */
        }
        if (empty) continue;
        const tk_expr *e = r->read;
        const tk_tensor_view *v = &a->t;
        for (int k = 0; k < e->nargs; k++) {
            span sp;
            if (!index_span(b, r, e->args[k], &sp)) continue;
            int64_t size = v->sizes[v->ndim - e->nargs + k];
            if (sp.lo >= 0 && sp.hi <= size - 1) continue;
            tk_buf t = {0};
            tk_buf_printf(&t, "%s[", e->name);
            for (int m = 0; m < e->nargs; m++) {
                if (m) tk_buf_puts(&t, ", ");
                tk_expr_text(&t, e->args[m], 1);
            }
            tk_buf_puts(&t, "]");
            tk_status st = call_fail(b->call, "read %s (%s:%d:%d) would reach index %lld of dim %d of '%s', whose "
                                     "size is %lld: outside the tensor (index %d runs over %lld..%lld for these "
                                     "arguments)", t.p && !t.oom ? t.p : e->name, d->file, e->loc.line, e->loc.col,
                                     (long long)(sp.lo < 0 ? sp.lo : sp.hi), k, d->params[r->param].name,
                                     (long long)size, k, (long long)sp.lo, (long long)sp.hi);
            free(t.p);
            return st;
        }
    }
    return TK_OK;
}

tk_status tk_bind(const tk_op *op, const tk_arg *args, int nargs, tk_call *call) {
    binder b;
    memset(&b, 0, sizeof b);
    tk_status st = bind_args(op, args, nargs, call, &b);
    if (st == TK_OK && !((st = bind_defaults(&b)) || (st = check_asserts(&b)) || (st = bind_outputs(&b)) ||
                         (st = check_empty_inputs(&b)) || (st = check_read_ranges(&b)))) {
        tk_kargs_divisors(&call->kargs);
        call->bound = 1;
        return TK_OK;
    }
    return st;   /* (call->bound stays 0: tk_set_output and tk_run_cpu refuse the call) */
}

tk_status tk_bind_types(const tk_op *op, const tk_arg *args, int nargs, tk_call *call) {
    binder b;
    memset(&b, 0, sizeof b);
    b.types_only = 1;
    tk_status st = bind_args(op, args, nargs, call, &b);
    if (st != TK_OK) return st;
    const tk_opdecl *d = op->decl;
    int nb = b.nb;   /* (the most batch dims of any '...' input: the broadcast rank) */
    call->noutputs = d->noutputs;
    for (int o = 0; o < d->noutputs; o++) {
        int ell = d->outputs[o].ndims > 0 && d->outputs[o].dims[0]->kind == TK_E_ELLIPSIS;
        call->out_ndim[o] = tk_explicit_dims(&d->outputs[o]) + (ell ? nb : 0);
        if (call->out_ndim[o] > TK_MAX_DIMS)
            return call_fail(call, "output '%s' would have more than %d dims", d->outputs[o].name, TK_MAX_DIMS);
        call->out_dtype[o] = tk_variant_out_dtype(op, call->variant, o);
    }
    return TK_OK;
}

tk_status tk_set_output(tk_call *call, int i, tk_tensor_view v) {
    if (!call || !call->op) return TK_ERR_INVALID;
    if (!call->bound) return not_bound(call);
    if (i < 0 || i >= call->noutputs) return call_fail(call, "no output %d", i);
    if (v.device != call->device) return call_fail(call, "output %d is not on the call's device", i);
    const char *name = call->op->decl->outputs[i].name;
    int same = v.ndim == call->out_ndim[i] && v.dtype == call->out_dtype[i];
    for (int d = 0; same && d < v.ndim; d++) same = v.sizes[d] == call->out_sizes[i][d];
    if (!same) return call_fail(call, "output '%s': the given tensor's shape or dtype is not the bound one", name);
    int m = call->op->decl->outputs[i].alias - 1;
    if (m >= 0 && !call->op->row_loop) {   /* a 'mut' parameter's output: the element-wise kernels read it
                                            * there (a row loop's reads it back: in parts, a copy) */
        const tk_ktensor *in = &call->kargs.t[call->op->slot[m]];
        same = in->data == v.data;
        for (int d = 0; same && d < v.ndim; d++) same = in->stride[d] == v.strides[d];
        if (!same)
            return call_fail(call, "output '%s' is 'mut' parameter '%s': set it to that same tensor", name, name);
    }
    fill_tensor(&call->kargs.t[call->op->out_slot[i]], &v);
    return TK_OK;
}

int tk_arg_same_binding(const tk_arg *a, const tk_arg *b) {
    if (!a || !b) return 0;
    if (a->kind != b->kind || a->is_none != b->is_none) return 0;
    if (a->kind == TK_P_INT || a->kind == TK_P_BOOL) return a->is_none || a->i == b->i;
    if (a->kind == TK_P_FLOAT) return memcmp(&a->f, &b->f, sizeof a->f) == 0; /* bitwise: -0.0, NaN */
    if (a->kind != TK_P_TENSOR) return 0;
    const tk_tensor_view *x = &a->t, *y = &b->t;
    if (x->dtype != y->dtype || x->ndim != y->ndim || x->device != y->device ||
        x->device_index != y->device_index || x->ndim < 0 || x->ndim > TK_MAX_DIMS)
        return 0;
    for (int d = 0; d < x->ndim; d++)
        if (x->sizes[d] != y->sizes[d] || x->strides[d] != y->strides[d]) return 0;
    return 1;
}

tk_status tk_rebind_data(tk_call *call, const tk_arg *args, int nargs) {
    if (!call || !call->op || (nargs && !args)) return TK_ERR_INVALID;
    if (!call->bound) return not_bound(call);
    const tk_op *op = call->op;
    const tk_opdecl *d = op->decl;
    if (nargs != d->nparams) return call_fail(call, "expected %d arguments, got %d", d->nparams, nargs);
    for (int i = 0; i < d->nparams; i++) {
        if (d->params[i].kind != TK_P_TENSOR) continue;
        if (args[i].is_none != !!(call->none >> op->slot[i] & 1u))
            return call_fail(call, "argument '%s': None where the call was bound with a tensor, or the other way",
                             d->params[i].name);
        if (args[i].is_none) {   /* (its fill: tk_set_fill again) */
            call->kargs.t[op->slot[i]].data = NULL;
            continue;
        }
        if (args[i].kind != TK_P_TENSOR) return call_fail(call, "argument '%s': expected a tensor", d->params[i].name);
        call->kargs.t[op->slot[i]].data = args[i].t.data;
    }
    for (int o = 0; o < call->noutputs; o++) call->kargs.t[op->out_slot[o]].data = NULL;
    call->msg[0] = 0;
    return TK_OK;
}

/* Whether t has no elements (a dim of size 0). */
static int ktensor_empty(const tk_ktensor *t) {
    for (int d = 0; d < t->ndim; d++)
        if (t->size[d] == 0) return 1;
    return 0;
}

int tk_call_unfilled(const tk_call *call) {
    if (!call || !call->op || !call->none) return -1;
    for (int i = 0; i < call->op->decl->nparams; i++) {
        if (call->op->decl->params[i].kind != TK_P_TENSOR) continue;   /* (a scalar's slot is not a tensor's) */
        const tk_ktensor *t = &call->kargs.t[call->op->slot[i]];
        if ((call->none >> call->op->slot[i] & 1u) && !t->data && !ktensor_empty(t)) return i;
    }
    return -1;
}

int tk_call_fill(const tk_call *call, int param, tk_dtype *dtype, int64_t *numel, double *value) {
    if (!call || !call->op || !call->bound || param < 0 || param >= call->op->decl->nparams) return 0;
    const tk_op *op = call->op;
    const tk_param *p = &op->decl->params[param];
    if (p->kind != TK_P_TENSOR || !(call->none >> op->slot[param] & 1u)) return 0;
    const tk_ktensor *kt = &call->kargs.t[op->slot[param]];
    if (dtype) *dtype = tk_variant_dtype(op, call->variant, param);
    if (numel) *numel = kt->ndim > 0 && tk_explicit_dims(p) > 0 ? kt->size[kt->ndim - 1] : 1;
    if (value) *value = tk_tensor_fill(p);
    return 1;
}

tk_status tk_set_fill(tk_call *call, int param, void *data) {
    if (!call || !call->op) return TK_ERR_INVALID;
    if (!call->bound) return not_bound(call);
    if (!tk_call_fill(call, param, NULL, NULL, NULL))
        return call_fail(call, "parameter %d is not an optional tensor passed as None", param);
    call->kargs.t[call->op->slot[param]].data = data;
    return TK_OK;
}

tk_status tk_run_cpu(tk_call *call, int64_t begin, int64_t end) {
    if (!call || !call->op) return TK_ERR_INVALID;
    if (!call->bound) return not_bound(call);
    if (call->device != TK_CPU) return call_fail(call, "the call is bound to tensors that are not on the CPU");
    tk_cpu_fn fn = __atomic_load_n(&call->op->cpu_fns[call->variant], __ATOMIC_ACQUIRE);   /* may be attached late */
    if (!fn) return call_fail(call, "no CPU kernel is loaded for %s", call->op->kernel_names[call->variant]);
    if (call->kargs.nparts > 1 && fn != __atomic_load_n(&call->op->cpu_parts[call->variant], __ATOMIC_ACQUIRE))
        return call_fail(call, "the kernel %s does not run in parts (kargs.nparts is %lld)",
                         call->op->kernel_names[call->variant], (long long)call->kargs.nparts);
    if (call->kargs.nparts > 1 && (call->kargs.part < 0 || call->kargs.part >= call->kargs.nparts))
        return call_fail(call, "part %lld is outside [0, %lld)", (long long)call->kargs.part,
                         (long long)call->kargs.nparts);
    if (begin < 0 || end > call->kargs.numel || begin > end)
        return call_fail(call, "range [%lld, %lld) is outside the index space [0, %lld)", (long long)begin,
                         (long long)end, (long long)call->kargs.numel);
    int unfilled = tk_call_unfilled(call);
    if (unfilled >= 0)
        return call_fail(call, "argument '%s' is None, and the memory of its default is not attached (tk_set_fill)",
                         call->op->decl->params[unfilled].name);
    for (int i = 0; i < call->op->decl->nparams; i++)   /* (an empty input may have none) */
        if (call->op->decl->params[i].kind == TK_P_TENSOR && !call->kargs.t[call->op->slot[i]].data &&
            !ktensor_empty(&call->kargs.t[call->op->slot[i]]))
            return call_fail(call, "argument '%s' has elements but no data", call->op->decl->params[i].name);
    for (int o = 0; o < call->noutputs; o++)   /* (an empty output may have no memory: a row loop's T = 0) */
        if (!call->kargs.t[call->op->out_slot[o]].data && call->kargs.numel > 0 &&
            !ktensor_empty(&call->kargs.t[call->op->out_slot[o]]))
            return call_fail(call, "output '%s' is not set", call->op->decl->outputs[o].name);
    if (begin >= end) return TK_OK;
    tk_kerr err = {0};          /* this range's bounds record (see tk_kerr) */
    call->kargs.err = &err;
    fn(&call->kargs, begin, end);
    call->kargs.err = NULL;
    return tk_call_bounds_error(call, &err);
}

/* Writes "name[:, 5, :]" (index at explicit dim `dim` of p) into b. */
static void access_text(char *b, size_t n, const tk_param *p, int dim, int64_t index) {
    int ell = p->ndims > 0 && p->dims[0]->kind == TK_E_ELLIPSIS, at = 0;
    at += snprintf(b + at, n - (size_t)at, "%s[%s", p->name, ell ? "..., " : "");
    for (int k = 0; k < p->ndims - ell && (size_t)at < n; k++) {
        if (k == dim) at += snprintf(b + at, n - (size_t)at, "%s%lld", k ? ", " : "", (long long)index);
        else at += snprintf(b + at, n - (size_t)at, "%s:", k ? ", " : "");
    }
    if ((size_t)at < n) snprintf(b + at, n - (size_t)at, "]");
}

tk_status tk_call_bounds_error(tk_call *call, const tk_kerr *err) {
    if (!call || !call->op || !err || !err->hit) return TK_OK;
    const tk_op *op = call->op;
    const tk_opdecl *d = op->decl;
    int slot = err->what & 255, store = (err->what >> 8) & 1, dim = err->what >> 16;
    const tk_param *p = NULL;
    for (int i = 0; i < d->nparams && !p; i++)
        if (d->params[i].kind == TK_P_TENSOR && op->slot[i] == slot) p = &d->params[i];
    for (int i = 0; i < d->noutputs && !p; i++)
        if (op->out_slot[i] == slot) p = &d->outputs[i];
    if (!p) {
        call_fail(call, "%s:%d:%d: an index is out of range (tensor slot %d, dim %d: %lld, size %lld)", d->file,
                  err->line, err->col, slot, dim, (long long)err->index, (long long)err->size);
        return TK_ERR_BOUNDS;
    }
    int ell = p->ndims > 0 && p->dims[0]->kind == TK_E_ELLIPSIS;
    const tk_expr *de = dim + ell < p->ndims ? p->dims[dim + ell] : NULL;
    char acc[256], dname[80] = "";
    access_text(acc, sizeof acc, p, dim, err->index);
    if (de && de->kind == TK_E_NAME) snprintf(dname, sizeof dname, " (%s)", de->name);
    call_fail(call, "%s:%d:%d: %s %s out of range: dim %d%s has size %lld (%s)", d->file, err->line,
              err->col, store ? "store" : "read", acc, dim, dname, (long long)err->size,
              store ? "the store was skipped" : "the read gave 0");
    return TK_ERR_BOUNDS;
}
