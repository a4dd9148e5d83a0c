/* variants.c - an op's dtype variants as queries: the dtype of each
 * parameter and output in variant v (numbered in mixed radix over the
 * op's independent dtype choices, op->dvars), the variant's float type,
 * and the variant of given dtypes. The checker makes the variants
 * (check.c, make_variants); everything after reads them here. */
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
        if (op->decl->params[i].kind == TK_P_TENSOR && tk_variant_dtype(op, variant, i) == TK_F64)
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
