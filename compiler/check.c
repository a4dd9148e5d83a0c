/* check.c - the checker: resolves names, binds slots, checks shapes and
 * types of an op declaration, and annotates its body for one variant at a
 * time (tk_check_body) so the emitters can read value types off the AST. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

#define MAX_PARAMS ((int)(sizeof(((tk_op *)0)->slot) / sizeof(int)))

static const char *const k_functions[] = {
    "min", "max", "abs", "floor", "ceil", "exp", "log", "sqrt", "tanh",
    "sigmoid", "int", "float", "float32", "float64", "bool", "range", NULL};

/* More of C99's <math.h> (and CUDA's), printed as sinf/sin by float type.
 * Unlike the names above they are not reserved: specs written before them
 * name tables `cos` and `sin` (a call is always NAME '(', so no clash). */
static const char *const k_maths[] = {
    "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh",
    "erf", "erfc", "log1p", "expm1", "log2", "log10", NULL};

/* Counter-based random numbers, rand(seed, n) and randn(seed, n): pure
 * functions of two ints and the batch element (tk_kernel.h, Philox). Not
 * reserved either. */
static const char *const k_random[] = {"rand", "randn", NULL};

typedef struct checker {
    tk_op *op;
    tk_error *err;
    int variant;
    tk_vtype ftype;             /* the op's float type in this variant */
    int scope[TK_MAX_LOCALS];   /* stack of visible locals (indices into op->locals) */
    int nscope;
    int loop_depth;
    tk_loc row_first[TK_MAX_TENSORS];   /* row loops: the first access to each output (line 0: none yet) */
    signed char row_pos[TK_MAX_TENSORS][TK_MAX_DIMS];   /* as tk_op's, found by this check */
    const tk_expr *sum_rd;              /* the read-back of the sum store being checked (o[idx] in o[idx] + e) */
    unsigned mut_stored;                /* element-wise form: bit o when a statement checked so far stores
                                         * 'mut' output o, or an enclosing 'for' does (check_mut_read) */
} checker;

/* Records a check error at loc (the op's file:line:col) in the checker's
 * tk_error; returns TK_ERR_CHECK so callers can `return fail(...)`. */
static tk_status fail(checker *c, tk_loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static tk_status fail(checker *c, tk_loc loc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tk_status s = tk_error_setv(c->err, TK_ERR_CHECK, c->op->decl->file, loc, fmt, ap);
    va_end(ap);
    return s;
}

/* Records "out of memory" for decl's file. */
static tk_status out_of_memory(tk_error *err, const tk_opdecl *decl) {
    tk_loc none = {0, 0};
    return tk_error_set(err, TK_ERR_NOMEM, decl->file, none, "out of memory");
}

#define TRY(x) do { tk_status s_ = (x); if (s_ != TK_OK) return s_; } while (0)

/* Words torch's schema parser reads as keywords: no op or parameter can be
 * named so (the schema `tk::def(Tensor return)` does not parse). */
static const char *const k_schema_keywords[] = {
    "False", "None", "True", "and", "as", "assert", "break", "class", "continue", "def", "del", "elif",
    "else", "for", "global", "if", "import", "in", "is", "not", "or", "pass", "raise", "return", "while",
    "with", "Ellipsis", "NoneType", NULL};

static int is_schema_keyword(const char *name) {
    for (int i = 0; k_schema_keywords[i]; i++)
        if (strcmp(k_schema_keywords[i], name) == 0) return 1;
    return 0;
}

/* Whether torch.ops.tk.<name> is an attribute of the namespace object itself
 * in Python (its name, its op list, a module's dunders), not the op. */
static int is_namespace_attr(const char *name) {
    size_t n = strlen(name);
    return strcmp(name, "name") == 0 || strcmp(name, "_dir") == 0 ||
           (n > 4 && strncmp(name, "__", 2) == 0 && strcmp(name + n - 2, "__") == 0);
}

/* Whether name is in the NULL-terminated list. */
static int in_list(const char *const *list, const char *name) {
    for (int i = 0; list[i]; i++)
        if (strcmp(list[i], name) == 0) return 1;
    return 0;
}

/* Whether name is reserved for a built-in function. */
static int is_function(const char *name) { return in_list(k_functions, name); }

/* What a reserved name is ("a built-in function", "the built-in constant
 * infinity"), or NULL when name is free to name a parameter, dim or local. */
static const char *reserved(const char *name) {
    if (is_function(name)) return "a built-in function";
    if (strcmp(name, "inf") == 0) return "the built-in constant infinity";
    return NULL;
}

static int is_owned(const char *name) { return tk_owned_dim(name); }

static int has_ellipsis(const tk_param *p) {
    return p->ndims > 0 && p->dims[0]->kind == TK_E_ELLIPSIS;
}

tk_sym_kind tk_resolve_header(const tk_op *op, const char *name, int *index) {
    const tk_opdecl *d = op->decl;
    for (int i = 0; i < d->nparams; i++) {
        if (strcmp(d->params[i].name, name) != 0) continue;
        *index = i;
        switch (d->params[i].kind) {
        case TK_P_TENSOR: return TK_SYM_TENSOR;
        case TK_P_FLOAT: return TK_SYM_FLOAT;
        default: return TK_SYM_INT;
        }
    }
    for (int i = 0; i < d->noutputs; i++)
        if (strcmp(d->outputs[i].name, name) == 0) { *index = i; return TK_SYM_OUTPUT; }
    for (int i = 0; i < op->ndims; i++)
        if (strcmp(op->dims[i].name, name) == 0) { *index = i; return TK_SYM_DIM; }
    return TK_SYM_NONE;
}

/* tk_resolve_header for a name that is stored into or looped over: a 'mut'
 * parameter is its output there (TK_SYM_OUTPUT, the alias's index). */
static tk_sym_kind resolve_target(const tk_op *op, const char *name, int *index) {
    tk_sym_kind k = tk_resolve_header(op, name, index);
    if (k == TK_SYM_TENSOR && op->decl->params[*index].mut) {
        *index = tk_mut_output(op->decl, *index);
        return TK_SYM_OUTPUT;
    }
    return k;
}

/* ---- header: parameters, dims, outputs --------------------------------- */

/* Resolves `x.dtype` chains of input tensor p to the dtype variable. */
static tk_status resolve_dtype_of(checker *c, const tk_param *p, int limit, int *root) {
    const tk_opdecl *d = c->op->decl;
    for (int i = 0; i < limit; i++) {
        if (strcmp(d->params[i].name, p->dtype_of) != 0) continue;
        if (d->params[i].kind != TK_P_TENSOR)
            return fail(c, p->dtype_loc, "'%s' is not a tensor, so '%s.dtype' has no meaning",
                        p->dtype_of, p->dtype_of);
        *root = c->op->dtype_root[i];
        return TK_OK;
    }
    return fail(c, p->dtype_loc, "'%s.dtype' must name a tensor parameter declared before '%s'",
                p->dtype_of, p->name);
}

/* Binds the symbolic dims of input tensor i; checks the dim forms. */
static tk_status bind_tensor_dims(checker *c, int i) {
    tk_op *op = c->op;
    const tk_param *p = &op->decl->params[i];
    int axis = 0;
    if (p->ndims - (has_ellipsis(p) ? 1 : 0) > TK_MAX_DIMS)
        return fail(c, p->loc, "tensor '%s' has more than %d dims", p->name, TK_MAX_DIMS);
    memset(op->dim_sym[i], -1, sizeof op->dim_sym[i]);
    for (int j = 0; j < p->ndims; j++) {
        const tk_expr *e = p->dims[j];
        if (e->kind == TK_E_ELLIPSIS) {
            if (j != 0) return fail(c, e->loc, "'...' may only be the first dim of '%s'", p->name);
            op->has_ellipsis = 1;
            continue;
        }
        if (e->kind == TK_E_INT) {
            if (e->ival < 0) return fail(c, e->loc, "a dim size cannot be negative");
            axis++;
            continue;
        }
        if (e->kind != TK_E_NAME)
            return fail(c, e->loc, "an input dim must be a name, an integer or '...' "
                                   "(shape expressions belong to outputs)");
        int idx;
        tk_sym_kind k = tk_resolve_header(op, e->name, &idx);
        if (k == TK_SYM_NONE) {
            if (op->ndims + op->nints >= TK_MAX_INTS)
                return fail(c, e->loc, "too many scalar parameters and dims (limit %d)", TK_MAX_INTS);
            const char *r = reserved(e->name);
            if (r) return fail(c, e->loc, "'%s' is %s and cannot name a dim", e->name, r);
            tk_dimsym *ds = &op->dims[op->ndims++];
            ds->name = e->name;
            ds->param = i;
            ds->axis = axis;
            idx = op->ndims - 1;
        } else if (k != TK_SYM_DIM) {
            return fail(c, e->loc, "dim '%s' has the name of a parameter", e->name);
        }
        op->dim_sym[i][j] = (signed char)idx;
        axis++;
    }
    return TK_OK;
}

/* Checks the op's name, and that names are unique across parameters and
 * outputs and none is a function or, in the schema, a keyword. */
static tk_status check_unique(checker *c) {
    const tk_opdecl *d = c->op->decl;
    if (is_schema_keyword(d->name))
        return fail(c, d->loc, "'%s' cannot name an op: torch's operator schemas reserve it", d->name);
    if (is_namespace_attr(d->name))
        return fail(c, d->loc, "'%s' cannot name an op: in Python torch.ops.tk.%s is an attribute of the "
                               "namespace itself", d->name, d->name);
    int n = d->nparams;   /* the parameters, the outputs and the scratch tensors (a 'mut' parameter's output
                           * has its name) */
    for (int o = 0; o < d->noutputs; o++) n += !d->outputs[o].alias;
    for (int i = 0; i < n; i++) {
        const tk_param *a = i < d->nparams ? &d->params[i] : &d->outputs[i - d->nparams];
        const char *r = reserved(a->name);
        if (r) return fail(c, a->loc, "'%s' is %s and cannot name a parameter", a->name, r);
        if (i < d->nparams && is_schema_keyword(a->name))
            return fail(c, a->loc, "'%s' cannot name a parameter: torch's operator schemas reserve it", a->name);
        for (int j = 0; j < i; j++) {
            const tk_param *b = j < d->nparams ? &d->params[j] : &d->outputs[j - d->nparams];
            if (strcmp(a->name, b->name) == 0)
                return fail(c, a->loc, "'%s' is declared twice (first at line %d)", a->name, b->loc.line);
        }
    }
    return TK_OK;
}

static int count_bits(unsigned m) {
    int n = 0;
    for (; m; m &= m - 1) n++;
    return n;
}

/* Assigns kargs slots and dtype roots to the input parameters. */
static tk_status check_params(checker *c) {
    tk_op *op = c->op;
    tk_opdecl *d = op->decl;
    if (d->nparams > MAX_PARAMS)
        return fail(c, d->loc, "too many parameters (limit %d)", MAX_PARAMS);
    for (int i = 0; i < d->nparams; i++) {
        tk_param *p = &d->params[i];
        if (p->kind == TK_P_TENSOR) {
            if (op->ntensors >= TK_MAX_TENSORS - d->noutputs)
                return fail(c, p->loc, "too many tensors (limit %d with outputs)", TK_MAX_TENSORS);
            op->slot[i] = op->ntensors++;
            op->dtype_src[i] = -1;
            if (p->dtype_of) {
                TRY(resolve_dtype_of(c, p, i, &op->dtype_root[i]));
                for (int j = 0; j < i; j++)
                    if (strcmp(d->params[j].name, p->dtype_of) == 0) op->dtype_src[i] = j;
            } else {
                if (p->dtype_mask == 0) return fail(c, p->dtype_loc, "empty dtype set");
                op->dtype_root[i] = i;
                op->dvars[op->ndvars++] = i;
            }
            TRY(bind_tensor_dims(c, i));
        } else if (p->kind == TK_P_FLOAT) {
            if (op->nfloats >= TK_MAX_FLOATS)
                return fail(c, p->loc, "too many float parameters (limit %d)", TK_MAX_FLOATS);
            op->slot[i] = op->nfloats++;
        } else {
            if (op->nints >= TK_MAX_INTS)
                return fail(c, p->loc, "too many int parameters (limit %d)", TK_MAX_INTS);
            op->slot[i] = op->nints++;
        }
        if (p->optional && p->kind == TK_P_BOOL)
            return fail(c, p->loc, "a bool parameter cannot be optional (only 'int?', 'float?' and tensors)");
    }
    if (op->ntensors == 0)
        return fail(c, d->loc, "an op needs a tensor parameter: torch picks its CPU or CUDA kernel from "
                               "its tensor arguments (a tensor whose shape gives the output's is enough)");
    for (int j = 0; j < op->ndims; j++) op->dims[j].slot = op->nints + j;
    if (op->nints + op->ndims > TK_MAX_INTS)
        return fail(c, d->loc, "too many scalar parameters and dims (limit %d)", TK_MAX_INTS);
    return TK_OK;
}

/* Types an int-valued header expression (defaults, output dims): names may
 * be dims and int/bool parameters (before `limit` when limit >= 0). */
static tk_status check_int_expr(checker *c, const tk_expr *e, int limit, const char *what) {
    int idx;
    switch (e->kind) {
    case TK_E_INT: return TK_OK;
    case TK_E_BOOL: return TK_OK;
    case TK_E_NAME: {
        tk_sym_kind k = tk_resolve_header(c->op, e->name, &idx);
        if (k == TK_SYM_DIM) return TK_OK;
        if (k == TK_SYM_INT) {
            if (limit >= 0 && idx >= limit)
                return fail(c, e->loc, "%s may only use parameters declared before it, not '%s'",
                            what, e->name);
            return TK_OK;
        }
        if (k == TK_SYM_NONE) return fail(c, e->loc, "unknown name '%s' in %s", e->name, what);
        return fail(c, e->loc, "%s must be an int expression of dims and int parameters; "
                               "'%s' is not one", what, e->name);
    }
    case TK_E_UNARY:
        if (e->op == TK_OPC_NOT) return check_int_expr(c, e->args[0], limit, what);
        return check_int_expr(c, e->args[0], limit, what);
    case TK_E_BINARY:
    case TK_E_COND:
        if (e->kind == TK_E_BINARY && (e->op == TK_OPC_DIV || e->op == TK_OPC_POW))
            return fail(c, e->loc, "%s must be an int expression: use '//' instead of '%s'",
                        what, tk_opc_text(e->op));
        for (int i = 0; i < e->nargs; i++) TRY(check_int_expr(c, e->args[i], limit, what));
        return TK_OK;
    case TK_E_CALL:
        if (strcmp(e->name, "min") == 0 || strcmp(e->name, "max") == 0) {
            if (e->nargs != 2) return fail(c, e->loc, "%s() takes 2 arguments", e->name);
        } else if (strcmp(e->name, "abs") == 0) {
            if (e->nargs != 1) return fail(c, e->loc, "abs() takes 1 argument");
        } else {
            return fail(c, e->loc, "%s may only call min, max and abs, not '%s'", what, e->name);
        }
        for (int i = 0; i < e->nargs; i++) TRY(check_int_expr(c, e->args[i], limit, what));
        return TK_OK;
    default:
        return fail(c, e->loc, "%s must be an int expression of dims and int parameters", what);
    }
}

/* Whether e is a number literal, possibly negated: 1e-5, -2, 0.5. */
static int is_number_literal(const tk_expr *e) {
    if (e->kind == TK_E_UNARY && e->op == TK_OPC_NEG) e = e->args[0];
    return e->kind == TK_E_INT || e->kind == TK_E_FLOAT;
}

double tk_float_default(const tk_param *p) {
    const tk_expr *e = p->default_value;
    int neg = e->kind == TK_E_UNARY && e->op == TK_OPC_NEG;
    const tk_expr *lit = neg ? e->args[0] : e;
    double v = lit->kind == TK_E_INT ? (double)lit->ival : lit->fval;
    return neg ? -v : v;
}

/* Checks defaults: optional ints take int expressions of dims and the
 * parameters before them; a float (optional or not) a number literal, an
 * int one read as a float as Python does (`= 1` is 1.0); an optional float
 * needs one (None means it); plain ints and bools a literal of their type. */
static tk_status check_defaults(checker *c) {
    const tk_opdecl *d = c->op->decl;
    const tk_param *first = NULL;   /* the first parameter with a default in the schema */
    for (int i = 0; i < d->nparams; i++) {
        const tk_param *p = &d->params[i];
        const tk_expr *e = p->default_value;
        int has = e != NULL || (p->optional && p->kind == TK_P_INT);   /* 'int?' is '=None' */
        if (has && !first) first = p;
        if (!has && first)
            return fail(c, p->loc, "parameter '%s' has no default but follows '%s', which has one: as in "
                                   "Python, parameters with defaults come last", p->name, first->name);
        if (!e) {
            if (p->optional && p->kind == TK_P_TENSOR)
                return fail(c, p->loc, "optional tensor '%s' needs a default, the value its elements read as "
                                       "when it is None: '%s: x.dtype[N]? = 0'", p->name, p->name);
            if (p->optional && p->kind == TK_P_FLOAT)
                return fail(c, p->loc, "optional float '%s' needs a default, which None then means: "
                                       "'%s: float? = 1e-5'", p->name, p->name);
            continue;
        }
        if (p->kind == TK_P_TENSOR) {   /* (an optional one's: tk_check_optional_tensors) */
            if (!p->optional)
                return fail(c, e->loc, "a tensor parameter has a default only when it is optional: '%s: "
                                       "x.dtype[N]? = 0' takes None, whose elements then read as 0", p->name);
            continue;
        }
        if (p->kind == TK_P_INT && p->optional) {
            TRY(check_int_expr(c, e, i, "a default"));
            continue;
        }
        if (p->kind == TK_P_FLOAT) {
            if (!is_number_literal(e))
                return fail(c, e->loc, "the default of float '%s' must be a number such as 1e-5 or -0.5, "
                                       "not an expression", p->name);
            if (isinf(tk_float_default(p)))
                return fail(c, e->loc, "the default of float '%s' cannot be infinite: torch's operator schemas "
                                       "have no infinity (give a finite number such as 1e30)", p->name);
            continue;
        }
        int neg = e->kind == TK_E_UNARY && e->op == TK_OPC_NEG;
        const tk_expr *lit = neg ? e->args[0] : e;
        if (p->kind == TK_P_BOOL && (lit->kind != TK_E_BOOL || neg))
            return fail(c, e->loc, "the default of bool '%s' must be True or False", p->name);
        if (p->kind == TK_P_INT && lit->kind != TK_E_INT)
            return fail(c, e->loc, "the default of int '%s' must be an integer such as 3 or -1 (use "
                                   "'%s: int? = expr' for one computed from dims)", p->name, p->name);
    }
    return TK_OK;
}

static tk_status check_outputs(checker *c) {
    tk_op *op = c->op;
    const tk_opdecl *d = op->decl;
    if (d->noutputs < 1) return fail(c, d->loc, "an op needs at least one output");
    for (int i = 0; i < d->noutputs; i++) {
        const tk_param *p = &d->outputs[i];
        op->out_slot[i] = op->ntensors + i;
        op->out_dtype_root[i] = -1;
        if (p->dtype_of) {
            TRY(resolve_dtype_of(c, p, d->nparams, &op->out_dtype_root[i]));
        } else if (p->scratch && p->dtype_mask == TK_DTYPES_FLOAT) {   /* 'float': the body's float type */
            op->out_dtype_root[i] = TK_OUT_BODY_FLOAT;
            op->out_dtype_fixed[i] = TK_F32;
        } else {
            if (count_bits(p->dtype_mask) != 1)
                return fail(c, p->dtype_loc, p->scratch ? "a scratch tensor's dtype must be one dtype, 'x.dtype' or "
                            "'float' (the body's float type)" : "an output's dtype must be one dtype or 'x.dtype'");
            for (int t = 0; t < TK_DTYPE_COUNT; t++)
                if (p->dtype_mask == (1u << t)) op->out_dtype_fixed[i] = (tk_dtype)t;
        }
        if (p->ndims - (has_ellipsis(p) ? 1 : 0) > TK_MAX_DIMS)
            return fail(c, p->loc, "output '%s' has more than %d dims", p->name, TK_MAX_DIMS);
        for (int j = 0; j < p->ndims; j++) {
            const tk_expr *e = p->dims[j];
            if (e->kind == TK_E_ELLIPSIS) {
                if (j != 0) return fail(c, e->loc, "'...' may only be the first dim of '%s'", p->name);
                if (!op->has_ellipsis)
                    return fail(c, e->loc, "output '%s' uses '...' but no input does", p->name);
                continue;
            }
            TRY(check_int_expr(c, e, -1, "an output dim"));
        }
    }
    return TK_OK;
}

/* An assert's condition: check_int_expr's forms, which may also read float
 * parameters and literals and divide with '/' (evaluated as Python would;
 * runtime/bind.c). */
static tk_status check_assert_expr(checker *c, const tk_expr *e) {
    int idx;
    switch (e->kind) {
    case TK_E_INT:
    case TK_E_BOOL:
    case TK_E_FLOAT: return TK_OK;
    case TK_E_NAME: {
        tk_sym_kind k = tk_resolve_header(c->op, e->name, &idx);
        if (k == TK_SYM_FLOAT) return TK_OK;
        if (k == TK_SYM_TENSOR || k == TK_SYM_OUTPUT)
            return fail(c, e->loc, "an assert reads dims and int, bool and float parameters; '%s' is a tensor (a "
                        "check on its values is a store whose index is out of range when it fails)", e->name);
        return check_int_expr(c, e, -1, "an assert");
    }
    case TK_E_UNARY: return check_assert_expr(c, e->args[0]);
    case TK_E_BINARY:
    case TK_E_COND:
        if (e->kind == TK_E_BINARY && e->op == TK_OPC_POW) return fail(c, e->loc, "an assert cannot use '**'");
        for (int i = 0; i < e->nargs; i++) TRY(check_assert_expr(c, e->args[i]));
        return TK_OK;
    case TK_E_CALL:
        if (strcmp(e->name, "min") != 0 && strcmp(e->name, "max") != 0 && strcmp(e->name, "abs") != 0)
            return fail(c, e->loc, "an assert may only call min, max and abs, not '%s'", e->name);
        if (e->nargs != (e->name[0] == 'a' ? 1 : 2))
            return fail(c, e->loc, "%s() takes %d argument%s", e->name, e->name[0] == 'a' ? 1 : 2,
                        e->name[0] == 'a' ? "" : "s");
        for (int i = 0; i < e->nargs; i++) TRY(check_assert_expr(c, e->args[i]));
        return TK_OK;
    default:
        return fail(c, e->loc, "an assert reads dims and int, bool and float parameters only");
    }
}

/* The 'assert' lines (a nonzero value holds), evaluated at every call. */
static tk_status check_asserts(checker *c) {
    for (int i = 0; i < c->op->decl->nasserts; i++) TRY(check_assert_expr(c, c->op->decl->asserts[i]));
    return TK_OK;
}

/* Counts the stores to output `name` in body (any depth): sum stores
 * (`+=`) in *sums, the others in *sets. */
static void count_stores(tk_stmt **body, int n, const char *name, int *sums, int *sets) {
    for (int i = 0; i < n; i++) {
        const tk_stmt *s = body[i];
        if (s->kind == TK_S_STORE && strcmp(s->name, name) == 0) {
            if (s->op == TK_OPC_ADD) ++*sums;
            else ++*sets;
        }
        count_stores(s->body, s->nbody, name, sums, sets);
        count_stores(s->orelse, s->norelse, name, sums, sets);
    }
}

/* An op that updates a 'mut' parameter has no backward ops: autograd
 * cannot record a change made in place (the shim refuses such a call on a
 * tensor that requires grad, as an op without backward ops does). */
static tk_status check_mut_params(checker *c) {
    const tk_opdecl *d = c->op->decl;
    for (int i = 0; i < d->nparams; i++)
        if (d->params[i].mut && d->nbackward > 0)
            return fail(c, d->backward_locs[0], "'%s' updates '%s' in place ('mut'), so it cannot have backward "
                        "ops: write it as an op that returns the new value to differentiate it", d->name,
                        d->params[i].name);
    return TK_OK;
}

/* The top-level loop: over an output, one variable per explicit dim. */
static tk_status check_loop(checker *c) {
    tk_op *op = c->op;
    const tk_opdecl *d = op->decl;
    int idx;
    tk_sym_kind k = resolve_target(op, d->loop_over, &idx);
    if (k != TK_SYM_OUTPUT)
        return fail(c, d->loop_loc, "the top-level loop must run over an output, and '%s' is not one",
                    d->loop_over);
    op->loop_out = idx;
    const tk_param *o = &d->outputs[idx];
    int n = tk_explicit_dims(o);
    if (n == 0)   /* [...] alone: nothing for the loop to name */
        return fail(c, d->loop_loc, "the loop runs over '%s', which has no explicit dim: the loop's output needs "
                    "at least one after '...' (loop over another output, or keep a dim of size 1; other outputs "
                    "may have none)", o->name);
    if (d->nloop != n)
        return fail(c, d->loop_loc, "'%s' has %d explicit dims, so the loop needs %d variables, not %d",
                    o->name, n, n, d->nloop);
    if (op->has_ellipsis && !has_ellipsis(o))
        for (int i = 0; i < d->nparams; i++)
            if (d->params[i].kind == TK_P_TENSOR && has_ellipsis(&d->params[i]))
                return fail(c, o->loc, "%s '%s' needs '...' first, like input '%s': the loop runs over "
                                       "the batch dims, and the output it names has them (a sum over them is "
                                       "another output, stored with '+=' in a row loop: docs/spec.md, Sums)",
                            o->alias ? "'mut' parameter" : "output", o->name, d->params[i].name);
    op->row_loop = 0;
    for (int i = 0; i < d->nloop; i++) {
        if (is_owned(d->loop_vars[i])) {   /* '_': a dim the iteration owns */
            op->row_loop = 1;
            continue;
        }
        if (tk_resolve_header(op, d->loop_vars[i], &idx) != TK_SYM_NONE || reserved(d->loop_vars[i]))
            return fail(c, d->loop_locs[i], "loop variable '%s' hides a parameter, dim or function",
                        d->loop_vars[i]);
        for (int j = 0; j < i; j++)
            if (strcmp(d->loop_vars[i], d->loop_vars[j]) == 0)
                return fail(c, d->loop_locs[i], "loop variable '%s' appears twice", d->loop_vars[i]);
    }
    op->has_sum = 0;
    for (int i = 0; i < d->noutputs; i++) {
        int sums = 0, sets = 0;
        count_stores(d->body, d->nbody, d->outputs[i].name, &sums, &sets);
        op->out_sum[i] = op->row_loop && sums > 0 && sets == 0;
        op->out_mixed[i] = op->row_loop && sums > 0 && sets > 0;
        op->has_sum |= op->out_sum[i];
        if (op->out_sum[i] && d->outputs[i].scratch)
            return fail(c, d->outputs[i].loc, "scratch tensor '%s' is stored only with '+=', which makes it a sum, and "
                        "nothing reads a sum (other iterations are adding into it): store it with '='",
                        d->outputs[i].name);
    }
    for (int i = 0; i < d->noutputs; i++) {
        if (op->out_sum[i] && has_ellipsis(o) && !has_ellipsis(&d->outputs[i]))
            continue;   /* a sum over the batch dims too */
        if (op->row_loop && has_ellipsis(&d->outputs[i]) != has_ellipsis(o))   /* they share the batch dims */
            return fail(c, d->outputs[i].loc, "output '%s' %s '...' and the loop output '%s' %s: in a row loop "
                        "every output has '...' exactly when the loop output has", d->outputs[i].name,
                        has_ellipsis(&d->outputs[i]) ? "has" : "has no", o->name, has_ellipsis(o) ? "has" : "has none");
        if (op->row_loop) continue;   /* any rank: the stores say which dims are whose (check_row_access) */
        if (has_ellipsis(&d->outputs[i]) == has_ellipsis(o) && tk_explicit_dims(&d->outputs[i]) == n) continue;
        if (d->outputs[i].alias)
            return fail(c, d->outputs[i].loc, "'mut' parameter '%s' must have the loop output's rank and batch "
                        "dims, as every output", d->outputs[i].name);
        return fail(c, d->outputs[i].loc, "every output must have the loop output's rank");
    }
    return TK_OK;
}

/* ---- body --------------------------------------------------------------- */

static tk_vtype elem_vtype(tk_dtype d) {
    switch (d) {
    case TK_BOOL: return TK_V_BOOL;
    case TK_F64: return TK_V_F64;
    case TK_F16: case TK_BF16: case TK_F32: return TK_V_F32;
    default: return TK_V_INT;
    }
}

static const char *vtype_name(tk_vtype t) {
    static const char *const names[] = {"none", "bool", "int", "float32", "float64"}; /* ORDER tk_vtype */
    return names[t];
}

static int is_num(tk_vtype t) { return t == TK_V_INT || t == TK_V_F32 || t == TK_V_F64; }
static int is_float(tk_vtype t) { return t == TK_V_F32 || t == TK_V_F64; }
static tk_vtype promote(tk_vtype a, tk_vtype b) { return a > b ? a : b; }

static int find_local(const checker *c, const char *name) {
    for (int i = c->nscope - 1; i >= 0; i--)
        if (strcmp(c->op->locals[c->scope[i]].name, name) == 0) return c->scope[i];
    return -1;
}

static int find_loop_var(const tk_opdecl *d, const char *name) {
    for (int i = 0; i < d->nloop; i++)
        if (!is_owned(d->loop_vars[i]) && strcmp(d->loop_vars[i], name) == 0) return i;
    return -1;
}

/* Whether index expression e is loop variable v itself. */
static int is_bare(const tk_expr *e, const char *v) { return e->kind == TK_E_NAME && strcmp(e->name, v) == 0; }

/* Row loops: an access (store or read back) to output o at idx[0..n) is
 * race-free: each parallel loop variable is the whole index of one dim of
 * o, the same dim in every access to o (the loop output: the variable's own
 * dim). Records the dims in c->row_pos[o]; an error at loc otherwise. */
static tk_status check_row_access(checker *c, tk_loc loc, int o, tk_expr **idx, int n, int is_store) {
    tk_op *op = c->op;
    const tk_opdecl *d = op->decl;
    const tk_param *p = &d->outputs[o];
    for (int i = 0; i < d->nloop; i++) {
        const char *v = d->loop_vars[i];
        if (is_owned(v)) continue;
        int want = o == op->loop_out ? i : c->row_pos[o][i], at = want;
        if (at < 0)   /* the first access to o fixes the dim */
            for (int j = 0; j < n && at < 0; j++)
                if (is_bare(idx[j], v)) at = j;
        if (at >= 0 && at < n && is_bare(idx[at], v)) {
            c->row_pos[o][i] = (signed char)at;
            continue;
        }
        tk_buf b = {0};
        tk_buf_printf(&b, "%s[", p->name);
        for (int j = 0; j < n; j++) {
            if (j) tk_buf_puts(&b, ", ");
            tk_expr_text(&b, idx[j], 1);
        }
        tk_buf_puts(&b, "]");
        tk_status st;
        const char *why = is_store ? "two iterations could write the same element"
                                   : "it could read an element another iteration writes";
        const char *what = is_store ? "store to" : "read of", *t = b.p ? b.p : p->name;
        if (want < 0)
            st = fail(c, loc, "%s %s does not index any dim with the loop variable %s: %s", what, t, v, why);
        else if (o == op->loop_out || !c->row_first[o].line)
            st = fail(c, loc, "%s %s does not index dim %d with the loop variable %s: %s", what, t, want, v, why);
        else
            st = fail(c, loc, "%s %s does not index dim %d with the loop variable %s as the access at %d:%d "
                      "does: %s", what, t, want, v, c->row_first[o].line, c->row_first[o].col, why);
        free(b.p);
        return st;
    }
    if (!c->row_first[o].line) c->row_first[o] = loc;
    return TK_OK;
}

static tk_status check_expr(checker *c, tk_expr *e);

static tk_status check_name(checker *c, tk_expr *e) {
    int idx = find_local(c, e->name);
    if (idx >= 0) {
        e->ref = idx;
        e->vtype = c->op->locals[idx].type;
        return TK_OK;
    }
    idx = find_loop_var(c->op->decl, e->name);
    if (idx >= 0) {
        e->ref = idx;
        e->vtype = TK_V_INT;
        return TK_OK;
    }
    switch (tk_resolve_header(c->op, e->name, &idx)) {
    case TK_SYM_INT:
        e->ref = idx;
        e->vtype = c->op->decl->params[idx].kind == TK_P_BOOL ? TK_V_BOOL : TK_V_INT;
        return TK_OK;
    case TK_SYM_FLOAT: e->ref = idx; e->vtype = c->ftype; return TK_OK;
    case TK_SYM_DIM: e->ref = idx; e->vtype = TK_V_INT; return TK_OK;
    case TK_SYM_TENSOR:
    case TK_SYM_OUTPUT: {
        const tk_opdecl *d = c->op->decl;
        const tk_param *p = tk_resolve_header(c->op, e->name, &idx) == TK_SYM_TENSOR ? &d->params[idx]
                                                                                     : &d->outputs[idx];
        int n = tk_explicit_dims(p);
        if (n == 0)
            return fail(c, e->loc, "tensor '%s' must be indexed: %s[] (it has no dims after '...')", e->name,
                        e->name);
        return fail(c, e->loc, "tensor '%s' must be indexed, with %d index%s (one per dim after '...')", e->name,
                    n, n == 1 ? "" : "es");
    }
    default:
        if (is_function(e->name)) return fail(c, e->loc, "'%s' is a function; call it", e->name);
        return fail(c, e->loc, "unknown name '%s'", e->name);
    }
}

/* Checks index list idx[0..n) of tensor `name` with `want` explicit dims: ints. */
static tk_status check_indices(checker *c, tk_loc loc, const char *name, tk_expr **idx, int n, int want) {
    if (n != want)
        return fail(c, loc, "'%s' takes %d indices (one per explicit dim), got %d", name, want, n);
    for (int i = 0; i < n; i++) {
        TRY(check_expr(c, idx[i]));
        if (idx[i]->vtype != TK_V_INT)
            return fail(c, idx[i]->loc, "an index must be an int, not %s", vtype_name(idx[i]->vtype));
    }
    return TK_OK;
}

/* A row loop reads back output o (an element its iteration owns: what an
 * earlier statement stored there, or uninitialised memory). */
static tk_status check_read_back(checker *c, tk_expr *e, int o) {
    const tk_param *p = &c->op->decl->outputs[o];
    if (c->op->out_sum[o] && e != c->sum_rd)
        return fail(c, e->loc, "output '%s' is a sum (every store to it is '+='): it cannot be read, since "
                    "other iterations add into it too (keep what the iteration needs in a local)", e->name);
    TRY(check_indices(c, e->loc, e->name, e->args, e->nargs, tk_explicit_dims(p)));
    if (e != c->sum_rd) TRY(check_row_access(c, e->loc, o, e->args, e->nargs, 0));
    e->ref = o;
    e->is_out = 1;
    e->vtype = elem_vtype(tk_variant_out_dtype(c->op, c->variant, o));
    return TK_OK;
}

/* The value of e when it is a negative integer constant (-1, -(2)), else 0. */
static long long negative_constant(const tk_expr *e) {
    if (e->kind == TK_E_INT && e->ival < 0) return e->ival;
    if (e->kind == TK_E_UNARY && e->op == TK_OPC_NEG && e->args[0]->kind == TK_E_INT && e->args[0]->ival > 0)
        return -e->args[0]->ival;
    return 0;
}

static int at_loop_index(checker *c, tk_expr **idx, int n);
static int stores_to(tk_stmt *const *body, int n, const char *name);

/* Appends the top-level loop's variables, "b, c, t" (for messages). */
static void loop_index_text(checker *c, tk_buf *b) {
    for (int i = 0; i < c->op->decl->nloop; i++) tk_buf_printf(b, "%s%s", i ? ", " : "", c->op->decl->loop_vars[i]);
}

/* A read of 'mut' parameter p (docs/spec.md, In-place parameters). In a
 * row loop it reads back p's output, as any output. In the element-wise
 * form it reads the iteration's own element, before any store to it: the
 * kernels may then load it early, and no iteration reads an element
 * another one writes. */
static tk_status check_mut_read(checker *c, tk_expr *e, int p) {
    int o = tk_mut_output(c->op->decl, p);
    if (c->op->row_loop) return check_read_back(c, e, o);
    if (!at_loop_index(c, e->args, e->nargs)) {
        tk_buf b = {0};
        loop_index_text(c, &b);
        tk_status st = fail(c, e->loc, "'%s' is updated in place, so an iteration reads only its own element, "
                            "%s[%s]: another iteration may already have written this one (a row loop reads "
                            "across its own rows)", e->name, e->name, b.p ? b.p : "");
        free(b.p);
        return st;
    }
    if (c->mut_stored >> o & 1u)
        return fail(c, e->loc, "'%s' is read after a store to it (or in a loop that stores it): read it once, "
                    "before the stores, into a local", e->name);
    return TK_OK;
}

static tk_status check_index(checker *c, tk_expr *e) {
    int idx;
    tk_sym_kind k = tk_resolve_header(c->op, e->name, &idx);
    e->is_out = 0;
    if (k == TK_SYM_TENSOR && c->op->decl->params[idx].mut) {
        TRY(check_mut_read(c, e, idx));
        if (e->is_out) return TK_OK;
    }
    if (k == TK_SYM_OUTPUT && c->op->row_loop) return check_read_back(c, e, idx);
    if (k == TK_SYM_OUTPUT && c->op->decl->outputs[idx].scratch)
        return fail(c, e->loc, "scratch tensor '%s' is read back only in a row loop (a '_' in the loop; "
                    "docs/spec.md, Row loops): here keep values in a local", e->name);
    if (k == TK_SYM_OUTPUT)
        return fail(c, e->loc, "output '%s' is write-only; keep values in a local", e->name);
    if (k != TK_SYM_TENSOR) {
        if (k == TK_SYM_NONE && find_local(c, e->name) < 0 && find_loop_var(c->op->decl, e->name) < 0)
            return fail(c, e->loc, "unknown tensor '%s'", e->name);
        return fail(c, e->loc, "'%s' is not a tensor and cannot be indexed", e->name);
    }
    const tk_param *p = &c->op->decl->params[idx];
    int n = tk_explicit_dims(p);
    if (e->nargs != n)
        return fail(c, e->loc, "'%s' takes %d indices (one per explicit dim), got %d", e->name, n, e->nargs);
    for (int i = 0; i < e->nargs; i++) {
        TRY(check_expr(c, e->args[i]));
        if (e->args[i]->vtype != TK_V_INT)
            return fail(c, e->args[i]->loc, "an index must be an int, not %s", vtype_name(e->args[i]->vtype));
        if (negative_constant(e->args[i]))   /* (reads are unchecked: x[-1] would read before x) */
            return fail(c, e->args[i]->loc, "index %lld of '%s' is negative: indices do not wrap as in Python "
                        "(the last element is the dim's size - 1)", negative_constant(e->args[i]), e->name);
    }
    e->ref = idx;
    e->vtype = elem_vtype(tk_variant_dtype(c->op, c->variant, idx));
    return TK_OK;
}

static tk_status check_unary(checker *c, tk_expr *e) {
    tk_vtype t = e->args[0]->vtype;
    if (e->op == TK_OPC_NOT) {
        if (t != TK_V_BOOL) return fail(c, e->loc, "'not' needs a bool, got %s", vtype_name(t));
        e->vtype = TK_V_BOOL;
        return TK_OK;
    }
    if (!is_num(t)) return fail(c, e->loc, "unary '%s' needs a number, got %s", tk_opc_text(e->op), vtype_name(t));
    e->vtype = t;
    return TK_OK;
}

static tk_status check_binary(checker *c, tk_expr *e) {
    tk_vtype a = e->args[0]->vtype, b = e->args[1]->vtype;
    switch (e->op) {
    case TK_OPC_AND: case TK_OPC_OR:
        if (a != TK_V_BOOL || b != TK_V_BOOL)
            return fail(c, e->loc, "'%s' needs bools, got %s and %s", tk_opc_text(e->op), vtype_name(a), vtype_name(b));
        e->vtype = TK_V_BOOL;
        return TK_OK;
    case TK_OPC_EQ: case TK_OPC_NE:
        if (a == TK_V_BOOL && b == TK_V_BOOL) { e->vtype = TK_V_BOOL; return TK_OK; }
        /* fall through */
    case TK_OPC_LT: case TK_OPC_LE: case TK_OPC_GT: case TK_OPC_GE:
        if (!is_num(a) || !is_num(b))
            return fail(c, e->loc, "'%s' compares numbers, got %s and %s", tk_opc_text(e->op), vtype_name(a), vtype_name(b));
        e->vtype = TK_V_BOOL;
        return TK_OK;
    default:
        break;
    }
    if (!is_num(a) || !is_num(b))
        return fail(c, e->loc, "'%s' needs numbers, got %s and %s", tk_opc_text(e->op), vtype_name(a), vtype_name(b));
    tk_vtype t = promote(a, b);
    if ((e->op == TK_OPC_DIV || e->op == TK_OPC_POW) && !is_float(t)) t = c->ftype;
    e->vtype = t;
    return TK_OK;
}

static tk_status check_cond(checker *c, tk_expr *e) {
    tk_vtype a = e->args[0]->vtype, cond = e->args[1]->vtype, b = e->args[2]->vtype;
    if (cond != TK_V_BOOL) return fail(c, e->args[1]->loc, "a condition must be a bool, got %s", vtype_name(cond));
    if (a == TK_V_BOOL && b == TK_V_BOOL) e->vtype = TK_V_BOOL;
    else if (is_num(a) && is_num(b)) e->vtype = promote(a, b);
    else return fail(c, e->loc, "the two arms of 'if/else' have types %s and %s", vtype_name(a), vtype_name(b));
    return TK_OK;
}

static tk_status check_call(checker *c, tk_expr *e) {
    const char *f = e->name;
    int random = in_list(k_random, f);
    int two = strcmp(f, "min") == 0 || strcmp(f, "max") == 0 || strcmp(f, "atan2") == 0 || random;
    if (!(is_function(f) || in_list(k_maths, f) || random) || strcmp(f, "range") == 0)
        return fail(c, e->loc, strcmp(f, "range") == 0 ? "range() is only allowed in a 'for' loop"
                                                       : "unknown function '%s'", f);
    if (e->nargs != (two ? 2 : 1))
        return fail(c, e->loc, "%s() takes %d argument%s, got %d", f, two ? 2 : 1, two ? "s" : "", e->nargs);
    for (int i = 0; i < e->nargs; i++) TRY(check_expr(c, e->args[i]));
    tk_vtype a = e->args[0]->vtype;
    if (strcmp(f, "bool") == 0) { e->vtype = TK_V_BOOL; return TK_OK; }
    if (strcmp(f, "int") == 0) { e->vtype = TK_V_INT; return TK_OK; }
    if (strcmp(f, "float") == 0) { e->vtype = c->ftype; return TK_OK; }
    if (strcmp(f, "float32") == 0) { e->vtype = TK_V_F32; return TK_OK; }
    if (strcmp(f, "float64") == 0) { e->vtype = TK_V_F64; return TK_OK; }
    if (random) {
        for (int i = 0; i < 2; i++)
            if (e->args[i]->vtype != TK_V_INT)
                return fail(c, e->args[i]->loc, "%s()'s %s must be an int, got %s", f, i ? "counter" : "seed",
                            vtype_name(e->args[i]->vtype));
        c->op->random = 1;
        e->vtype = c->ftype;
        return TK_OK;
    }
    for (int i = 0; i < e->nargs; i++)
        if (!is_num(e->args[i]->vtype))
            return fail(c, e->args[i]->loc, "%s() needs numbers, got %s", f, vtype_name(e->args[i]->vtype));
    if (two) a = promote(a, e->args[1]->vtype);
    if (strcmp(f, "min") == 0 || strcmp(f, "max") == 0 || strcmp(f, "abs") == 0) e->vtype = a;
    else if (strcmp(f, "floor") == 0 || strcmp(f, "ceil") == 0) e->vtype = TK_V_INT;
    else e->vtype = is_float(a) ? a : c->ftype;     /* exp log sqrt tanh sigmoid sin atan2 ... */
    return TK_OK;
}

/* Types e and its children for the current variant; records name refs. */
static tk_status check_expr(checker *c, tk_expr *e) {
    switch (e->kind) {
    case TK_E_INT: e->vtype = TK_V_INT; return TK_OK;
    case TK_E_FLOAT: e->vtype = c->ftype; return TK_OK;
    case TK_E_BOOL: e->vtype = TK_V_BOOL; return TK_OK;
    case TK_E_NAME: return check_name(c, e);
    case TK_E_ELLIPSIS: return fail(c, e->loc, "'...' is only allowed in a shape");
    case TK_E_INDEX: return check_index(c, e);
    case TK_E_CALL: return check_call(c, e);
    default: break;
    }
    for (int i = 0; i < e->nargs; i++) TRY(check_expr(c, e->args[i]));
    if (e->kind == TK_E_UNARY) return check_unary(c, e);
    if (e->kind == TK_E_COND) return check_cond(c, e);
    return check_binary(c, e);
}

/* Whether a value of type from may be stored in a slot of type to. */
static tk_status check_convert(checker *c, tk_loc loc, tk_vtype from, tk_vtype to, const char *what) {
    if (from == to || (is_num(from) && is_float(to)) || (from == TK_V_BOOL && is_num(to))) return TK_OK;
    if (is_float(from) && to == TK_V_INT)
        return fail(c, loc, "%s is an int; converting a %s needs int(...)", what, vtype_name(from));
    return fail(c, loc, "%s is %s and cannot take a %s", what, vtype_name(to), vtype_name(from));
}

static tk_status check_block(checker *c, tk_stmt **body, int n);

static tk_status declare_local(checker *c, tk_stmt *s, tk_vtype t) {
    if (c->op->nlocals >= TK_MAX_LOCALS || c->nscope >= TK_MAX_LOCALS)
        return fail(c, s->loc, "too many local variables (limit %d)", TK_MAX_LOCALS);
    int idx;
    if (tk_resolve_header(c->op, s->name, &idx) != TK_SYM_NONE || find_loop_var(c->op->decl, s->name) >= 0)
        return fail(c, s->loc, "cannot assign to '%s': it is a parameter, dim, tensor or loop variable", s->name);
    const char *r = reserved(s->name);
    if (r) return fail(c, s->loc, "'%s' is %s and cannot name a variable", s->name, r);
    if (c->op->row_loop && is_owned(s->name))
        return fail(c, s->loc, "'_' marks a dim the iteration owns in the loop header; give the variable a name");
    tk_local *l = &c->op->locals[c->op->nlocals];
    l->name = s->name;
    l->type = t;
    l->is_loop = s->kind == TK_S_FOR;
    l->loc = s->loc;
    s->ref = c->op->nlocals++;
    s->declares = 1;
    c->scope[c->nscope++] = s->ref;
    return TK_OK;
}

static tk_status check_assign(checker *c, tk_stmt *s) {
    TRY(check_expr(c, s->value));
    tk_vtype v = s->value->vtype;
    int idx = find_local(c, s->name);
    s->declares = 0;
    if (idx < 0) {
        if (s->op != TK_OPC_NONE) {
            int p;
            if (tk_resolve_header(c->op, s->name, &p) != TK_SYM_NONE || find_loop_var(c->op->decl, s->name) >= 0)
                return fail(c, s->loc, "cannot assign to '%s': it is a parameter, dim, tensor or loop variable", s->name);
            return fail(c, s->loc, "'%s' is used before it is assigned", s->name);
        }
        return declare_local(c, s, v);
    }
    s->ref = idx;
    tk_vtype lt = c->op->locals[idx].type;
    if (s->op != TK_OPC_NONE) {
        if (!is_num(lt) || !is_num(v))
            return fail(c, s->loc, "'%s=' needs numbers", tk_opc_text(s->op));
        tk_vtype r = promote(lt, v);
        if (s->op == TK_OPC_DIV && !is_float(r)) r = c->ftype;
        v = r;
    }
    if (lt == TK_V_INT && is_float(v))   /* `s = 0` then `s += x[i]`: the usual slip */
        return fail(c, s->loc, "'%s' is an int (from its first assignment, line %d); a float value needs "
                               "int(...) here, or make '%s' a float from the start ('%s = 0.0')", s->name,
                    c->op->locals[idx].loc.line, s->name, s->name);
    char what[96];
    snprintf(what, sizeof what, "'%s'", s->name);
    return check_convert(c, s->loc, v, lt, what);
}

static tk_status check_stored_value(checker *c, tk_stmt *s, int idx);

/* Whether idx[0..n) is exactly the top-level loop's variables, in order
 * (the element-wise form's own element). */
static int at_loop_index(checker *c, tk_expr **idx, int n) {
    const tk_opdecl *d = c->op->decl;
    int ok = n == d->nloop;
    for (int i = 0; ok && i < n; i++)
        ok = idx[i]->kind == TK_E_NAME && strcmp(idx[i]->name, d->loop_vars[i]) == 0 &&
             find_local(c, idx[i]->name) < 0;
    return ok;
}

static tk_status check_store(checker *c, tk_stmt *s) {
    const tk_opdecl *d = c->op->decl;
    int idx;
    tk_sym_kind k = resolve_target(c->op, s->name, &idx);
    if (k == TK_SYM_TENSOR)
        return fail(c, s->loc, "input '%s' is read-only (declare it '%s: mut ...' to update it in place)", s->name,
                    s->name);
    if (k != TK_SYM_OUTPUT) return fail(c, s->loc, "'%s' is not an output", s->name);
    if (d->outputs[idx].alias && s->op != TK_OPC_NONE)
        return fail(c, s->loc, "'%s' is updated in place: write %s[...] = %s[...] %s v (a '%s=' store is for new "
                    "outputs)", s->name, s->name, s->name, tk_opc_text(s->op), tk_opc_text(s->op));
    if (c->op->out_mixed[idx])
        return fail(c, s->loc, "output '%s' is stored with both '=' and '+=': '+=' makes it a sum, which "
                    "starts at zero and takes only '+=' (docs/spec.md, Sums)", s->name);
    if (s->op == TK_OPC_ADD && c->op->row_loop) {   /* a sum store: any index, no race (shim/kernels.cpp) */
        TRY(check_indices(c, s->loc, s->name, s->index, s->nindex, tk_explicit_dims(&d->outputs[idx])));
        c->sum_rd = s->value->args[0];
        tk_status st = check_stored_value(c, s, idx);
        c->sum_rd = NULL;
        return st;
    }
    if (s->op != TK_OPC_NONE && c->op->row_loop)
        return fail(c, s->loc, "a store takes '=', or '+=' for a sum: to update an element, read it back "
                    "(%s[...] = %s[...] %s v)", s->name, s->name, tk_opc_text(s->op));
    if (s->op == TK_OPC_ADD)
        return fail(c, s->loc, "'+=' into an output makes it a sum, which a row loop takes (a '_' in the "
                    "loop; docs/spec.md, Sums); here accumulate in a local, then store with '='");
    if (s->op != TK_OPC_NONE)
        return fail(c, s->loc, "outputs are write-only: accumulate in a local, then store with '='");
    if (c->op->row_loop) {
        TRY(check_indices(c, s->loc, s->name, s->index, s->nindex, tk_explicit_dims(&d->outputs[idx])));
        TRY(check_row_access(c, s->loc, idx, s->index, s->nindex, 1));
        return check_stored_value(c, s, idx);
    }
    if (!at_loop_index(c, s->index, s->nindex)) {
        tk_buf b = {0};
        loop_index_text(c, &b);
        tk_status st = fail(c, s->loc, "an output can only be written at the loop index: %s[%s]",
                            s->name, b.p ? b.p : "");
        free(b.p);
        return st;
    }
    TRY(check_stored_value(c, s, idx));
    if (d->outputs[idx].alias) c->mut_stored |= 1u << idx;   /* (after its value: p[i] = p[i] + g) */
    return TK_OK;
}

/* The value of store s to output idx: checked, and convertible to its dtype. */
static tk_status check_stored_value(checker *c, tk_stmt *s, int idx) {
    s->ref = idx;
    TRY(check_expr(c, s->value));
    tk_dtype od = tk_variant_out_dtype(c->op, c->variant, idx);
    tk_vtype ot = elem_vtype(od);
    char what[128];
    snprintf(what, sizeof what, "output '%s' (%s)", s->name, tk_dtype_name(od));
    if (ot == TK_V_F32 && s->value->vtype == TK_V_F64) return TK_OK;   /* narrowing store */
    return check_convert(c, s->value->loc, s->value->vtype, ot, what);
}

static tk_status check_for(checker *c, tk_stmt *s) {
    if (s->lo) {
        TRY(check_expr(c, s->lo));
        if (s->lo->vtype != TK_V_INT) return fail(c, s->lo->loc, "range() bounds must be ints");
    }
    TRY(check_expr(c, s->hi));
    if (s->hi->vtype != TK_V_INT) return fail(c, s->hi->loc, "range() bounds must be ints");
    if (find_loop_var(c->op->decl, s->name) >= 0)
        return fail(c, s->loc, "loop variable '%s' hides the variable of the top-level loop", s->name);
    int prev = find_local(c, s->name);
    if (prev >= 0)
        return fail(c, s->loc, "loop variable '%s' hides %s", s->name,
                    c->op->locals[prev].is_loop ? "the variable of an enclosing loop" : "a local variable");
    int mark = c->nscope;
    TRY(declare_local(c, s, TK_V_INT));
    c->loop_depth++;
    for (int o = c->op->decl->nreturns; o < c->op->decl->noutputs; o++)   /* stored before its next pass reads */
        if (stores_to(s->body, s->nbody, c->op->decl->outputs[o].name)) c->mut_stored |= 1u << o;
    tk_status st = check_block(c, s->body, s->nbody);
    c->loop_depth--;
    c->nscope = mark;
    return st;
}

static tk_status check_stmt(checker *c, tk_stmt *s) {
    switch (s->kind) {
    case TK_S_PASS: return TK_OK;
    case TK_S_ASSIGN: return check_assign(c, s);
    case TK_S_STORE: return check_store(c, s);
    case TK_S_FOR: return check_for(c, s);
    case TK_S_IF: {
        TRY(check_expr(c, s->value));
        if (s->value->vtype != TK_V_BOOL)
            return fail(c, s->value->loc, "an 'if' condition must be a bool, got %s (compare explicitly)",
                        vtype_name(s->value->vtype));
        TRY(check_block(c, s->body, s->nbody));
        return check_block(c, s->orelse, s->norelse);
    }
    }
    return TK_OK;
}

/* Checks a block; locals declared in it are dropped at its end. */
static tk_status check_block(checker *c, tk_stmt **body, int n) {
    int mark = c->nscope;
    for (int i = 0; i < n; i++) TRY(check_stmt(c, body[i]));
    c->nscope = mark;
    return TK_OK;
}

/* tk_check_body; row_pos, if not NULL, gets the row loop's dims of each output. */
static tk_status check_body(tk_op *op, int variant, tk_error *err,
                            signed char (*row_pos)[TK_MAX_DIMS]) {
    checker c;
    memset(&c, 0, sizeof c);
    c.op = op;
    c.err = err;
    c.variant = variant;
    c.ftype = tk_variant_float_type(op, variant) == TK_F64 ? TK_V_F64 : TK_V_F32;
    op->nlocals = 0;
    op->cur_variant = variant;
    memset(c.row_pos, -1, sizeof c.row_pos);
    tk_status st = check_block(&c, op->decl->body, op->decl->nbody);
    if (st == TK_OK && row_pos) memcpy(row_pos, c.row_pos, sizeof c.row_pos);
    return st;
}

tk_status tk_check_body(tk_op *op, int variant, tk_error *err) {
    return check_body(op, variant, err, NULL);
}

/* Loop variables of inner loops must not be assigned: enforce by scanning. */
static tk_status check_loop_vars_readonly(checker *c, tk_stmt **body, int n, const char **vars, int nv) {
    for (int i = 0; i < n; i++) {
        tk_stmt *s = body[i];
        if (s->kind == TK_S_ASSIGN)
            for (int j = 0; j < nv; j++)
                if (strcmp(vars[j], s->name) == 0)
                    return fail(c, s->loc, "cannot assign to loop variable '%s'", s->name);
        if (s->kind == TK_S_FOR) {
            const char *inner[TK_MAX_LOCALS];
            int ni = 0;
            for (int j = 0; j < nv && ni < TK_MAX_LOCALS - 1; j++) inner[ni++] = vars[j];
            inner[ni++] = s->name;
            TRY(check_loop_vars_readonly(c, s->body, s->nbody, inner, ni));
        } else if (s->kind == TK_S_IF) {
            TRY(check_loop_vars_readonly(c, s->body, s->nbody, vars, nv));
            TRY(check_loop_vars_readonly(c, s->orelse, s->norelse, vars, nv));
        }
    }
    return TK_OK;
}

/* Type-checks the body in every variant. The error is the first failing
 * variant's, followed by " (in the f16 variant)" only when it depends on
 * the dtypes: an earlier variant passes, or a later one passes or fails
 * with another message. An error in every variant alike (an unknown name,
 * a write outside the loop index) is the spec's, whatever the dtypes. */
static tk_status check_variants(tk_op *op, tk_error *err) {
    tk_status st = TK_OK;
    int bad = 0;
    /* the first variant records the row loop's dims (the same in every variant) */
    while (bad < op->nvariants && (st = check_body(op, bad, err, bad == 0 ? op->row_pos : NULL)) == TK_OK)
        bad++;
    if (st == TK_OK) return TK_OK;
    int depends = bad > 0;
    tk_error *other = depends || op->nvariants == 1 ? NULL : malloc(sizeof *other);
    if (!depends && op->nvariants > 1 && !other) depends = 1;   /* (out of memory: say which variant) */
    for (int v = bad + 1; !depends && v < op->nvariants; v++)
        depends = tk_check_body(op, v, other) == TK_OK || strcmp(other->text, err->text) != 0;
    free(other);
    if (depends) tk_error_append(err, " (in the %s variant)", op->variant_codes[bad]);
    return st;
}

/* Whether body stores into tensor `name` anywhere. */
static int stores_to(tk_stmt *const *body, int n, const char *name) {
    for (int k = 0; k < n; k++)
        if ((body[k]->kind == TK_S_STORE && strcmp(body[k]->name, name) == 0) ||
            stores_to(body[k]->body, body[k]->nbody, name) || stores_to(body[k]->orelse, body[k]->norelse, name))
            return 1;
    return 0;
}

/* Every output is stored somewhere: one that never is would hand back
 * whatever its memory held. */
static tk_status check_outputs_written(checker *c) {
    const tk_opdecl *d = c->op->decl;
    for (int i = 0; i < d->noutputs; i++)
        if (!stores_to(d->body, d->nbody, d->outputs[i].name))
            return fail(c, d->outputs[i].loc, d->outputs[i].alias ? "'mut' parameter '%s' is never written: the "
                        "body has no store to it (without 'mut' it is read-only)"
                        : d->outputs[i].scratch ? "scratch tensor '%s' is never written: the body has no store to it"
                        : "output '%s' is never written: the body has no store to it", d->outputs[i].name);
    return TK_OK;
}

tk_status tk_check_op(tk_ctx *ctx, tk_opdecl *decl, tk_op **out) {
    tk_error *err = &ctx->error;
    tk_op *op = tk_arena_alloc(&ctx->arena, sizeof *op);
    if (!op) return out_of_memory(err, decl);
    op->decl = decl;
    checker c;
    memset(&c, 0, sizeof c);
    c.op = op;
    c.err = err;
    TRY(check_unique(&c));
    TRY(check_params(&c));
    TRY(check_defaults(&c));
    TRY(tk_check_optional_tensors(op, err));
    TRY(check_outputs(&c));
    TRY(check_asserts(&c));
    TRY(check_mut_params(&c));
    TRY(check_loop(&c));
    TRY(check_loop_vars_readonly(&c, decl->body, decl->nbody, NULL, 0));
    tk_status st = tk_make_variants(op, &ctx->arena, err);
    if (st == TK_ERR_NOMEM) return out_of_memory(err, decl);
    if (st != TK_OK) return st;
    TRY(check_variants(op, err));
    TRY(check_outputs_written(&c));
    tk_find_reads_always(op);
    tk_find_data_reads(op);
    if (tk_rename_reused_locals(op, &ctx->arena) != TK_OK) return out_of_memory(err, decl);
    tk_find_read_ranges(op);
    op->schema = tk_make_schema(decl, &ctx->arena);
    if (!op->schema) return out_of_memory(err, decl);
    *out = op;
    return TK_OK;
}
