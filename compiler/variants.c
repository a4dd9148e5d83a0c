/* variants.c - an op's dtype variants as queries: the dtype of each
 * parameter and output in variant v (numbered in mixed radix over the
 * op's independent dtype choices, op->dvars), the variant's float type,
 * and the variant of given dtypes; and their names, which the checker has
 * made once it has found the dvars (tk_make_variants). */
#include <stdio.h>
#include <string.h>

#include "core.h"

/* The n-th set bit's position in mask (-1 when it has fewer). */
static int mask_nth(unsigned mask, int n) {
    for (int t = 0; t < TK_DTYPE_COUNT; t++)
        if (mask & (1u << t)) {
            if (n == 0) return t;
            n--;
        }
    return -1;
}

/* How many bits of mask lie below bit dtype. */
static int mask_pos(unsigned mask, int dtype) {
    int n = 0;
    for (int t = 0; t < dtype; t++)
        if (mask & (1u << t)) n++;
    return n;
}

tk_dtype tk_variant_dtype(const tk_op *op, int variant, int param) {
    int root = op->dtype_root[param];
    int rest = variant;
    for (int v = op->ndvars - 1; v >= 0; v--) {
        unsigned m = op->decl->params[op->dvars[v]].dtype_mask;
        int radix = __builtin_popcount(m);
        if (op->dvars[v] == root) return (tk_dtype)mask_nth(m, rest % radix);
        rest /= radix;
    }
    return TK_F32;
}

tk_dtype tk_variant_out_decl_dtype(const tk_op *op, int variant, int out) {
    if (op->out_dtype_root[out] == TK_OUT_BODY_FLOAT) return tk_variant_float_type(op, variant);
    if (op->out_dtype_root[out] < 0) return op->out_dtype_fixed[out];
    return tk_variant_dtype(op, variant, op->out_dtype_root[out]);
}

tk_dtype tk_variant_out_dtype(const tk_op *op, int variant, int out) {
    tk_dtype d = tk_variant_out_decl_dtype(op, variant, out);
    return op->out_sum[out] && (d == TK_F16 || d == TK_BF16) ? tk_variant_float_type(op, variant) : d;
}

tk_dtype tk_variant_float_type(const tk_op *op, int variant) {
    for (int i = 0; i < op->decl->nparams; i++)
        if (op->decl->params[i].kind == TK_P_TENSOR && !(i < 64 && (op->decl->float_type_skip >> i & 1u)) &&
            tk_variant_dtype(op, variant, i) == TK_F64)
            return TK_F64;
    return TK_F32;
}

int tk_variant_index(const tk_op *op, const tk_dtype *dv) {
    int idx = 0;
    for (int v = 0; v < op->ndvars; v++) {
        unsigned m = op->decl->params[op->dvars[v]].dtype_mask;
        if (!(m & (1u << dv[v]))) return -1;
        idx = idx * __builtin_popcount(m) + mask_pos(m, (int)dv[v]);
    }
    return idx;
}

tk_status tk_make_variants(tk_op *op, tk_arena *a, tk_error *err) {
    long n = 1;
    for (int v = 0; v < op->ndvars; v++) {
        n *= __builtin_popcount(op->decl->params[op->dvars[v]].dtype_mask);
        if (n > TK_MAX_VARIANTS)
            return tk_error_set(err, TK_ERR_CHECK, op->decl->file, op->decl->loc, "more than %d dtype combinations; "
                                "tie dtypes together with 'x.dtype'", TK_MAX_VARIANTS);
    }
    op->nvariants = (int)n;
    op->kernel_names = tk_arena_alloc(a, sizeof(char *) * (size_t)n);
    op->cpu_fns = tk_arena_alloc(a, sizeof(tk_cpu_fn) * (size_t)n);
    op->cpu_parts = tk_arena_alloc(a, sizeof(tk_cpu_fn) * (size_t)n);
    op->variant_codes = tk_arena_alloc(a, sizeof(*op->variant_codes) * (size_t)n);
    if (!op->kernel_names || !op->cpu_fns || !op->cpu_parts || !op->variant_codes) return TK_ERR_NOMEM;
    for (int i = 0; i < op->nvariants; i++) {
        char code[TK_VARIANT_CODE] = "";
        size_t len = 0;
        for (int v = 0; v < op->ndvars; v++) {
            const char *dc = tk_dtype_code(tk_variant_dtype(op, i, op->dvars[v]));
            int w = snprintf(code + len, sizeof code - len, "%s%s", v ? "_" : "", dc);
            if (w < 0 || (size_t)w >= sizeof code - len)   /* (cannot happen: see TK_VARIANT_CODE) */
                return tk_error_set(err, TK_ERR_CHECK, op->decl->file, op->decl->loc,
                                    "internal error: a variant code longer than %d characters", TK_VARIANT_CODE - 1);
            len += (size_t)w;
        }
        if (op->ndvars == 0) snprintf(code, sizeof code, "k");
        memcpy(op->variant_codes[i], code, sizeof code);
        size_t nl = strlen(op->decl->name) + strlen(code) + 8;
        op->kernel_names[i] = tk_arena_alloc(a, nl);
        if (!op->kernel_names[i]) return TK_ERR_NOMEM;
        snprintf(op->kernel_names[i], nl, "tk_%s__%s", op->decl->name, code);
    }
    return TK_OK;
}
