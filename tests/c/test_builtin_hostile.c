/* test_builtin_hostile.c - every built-in op's CPU kernels run with hostile
 * scalars: each int parameter takes INT64_MIN, -2**62, -7, -1, 0, 1, 3,
 * 2**62, INT64_MAX (and None where it is optional), every combination; float
 * parameters NaN, +-Inf, 1e308. Tensors are small, each in a malloc of
 * exactly its size, so under ASan (build-asan) a read or write outside any
 * input or output is a report. Each call binds (an error is fine) or runs to
 * completion over its whole index space: no crash, no hang, nothing written
 * outside the outputs. Generated from the spec table: a new op is covered
 * with no change here. Usage: test_builtin_hostile OPS TESTS */
#include <math.h>
#include <stdint.h>

#include "tk.h"
#include "tk_test.h"

extern const tk_builtin_spec tk_builtin_specs[];
extern const int tk_builtin_nspecs;
extern const tk_builtin_kernel tk_builtin_kernels[];
extern const int tk_builtin_nkernels;

#define MAX_PARAMS 32
#define MAX_RUN 100000          /* index-space elements run per call at most */

static const int64_t k_ints[] = {INT64_MIN, -((int64_t)1 << 62), -7, -1, 0, 1, 3, (int64_t)1 << 62, INT64_MAX};
#define NINTS ((int)(sizeof k_ints / sizeof k_ints[0]))
static const double k_floats[] = {NAN, INFINITY, -INFINITY, 1e308, -0.0};
#define NFLOATS ((int)(sizeof k_floats / sizeof k_floats[0]))

typedef struct stats {
    long calls, bound, ran;
} stats;

/* The size of symbolic dim `name` in op: 2, 3, 4... by first appearance. */
static int64_t dim_size(const tk_op *op, const char *name) {
    const char *seen[64];
    int n = 0;
    for (int i = 0; i < tk_op_nparams(op); i++)
        for (int j = 0; j < tk_op_shape_ndims(op, TK_SHAPE_INPUT, i); j++) {
            const char *d;
            if (tk_op_param_dim(op, i, j, &d, NULL) != TK_DIM_NAME) continue;
            int k = 0;
            while (k < n && strcmp(seen[k], d) != 0) k++;
            if (k == n && n < 64) seen[n++] = d;
            if (strcmp(d, name) == 0) return 2 + k;
        }
    return 1;
}

static tk_dtype pick_dtype(unsigned mask) {
    if (mask & (1u << TK_F32)) return TK_F32;
    for (int t = 0; t < TK_DTYPE_COUNT; t++)
        if (mask & (1u << t)) return (tk_dtype)t;
    return TK_F32;
}

/* Input tensor i: a fresh malloc of exactly its bytes, filled with a pattern. */
static tk_arg make_input(const tk_op *op, int i, void **owned) {
    tk_tensor_view v;
    memset(&v, 0, sizeof v);
    v.dtype = pick_dtype(tk_op_param_dtypes(op, i));
    for (int j = 0; j < tk_op_shape_ndims(op, TK_SHAPE_INPUT, i); j++) {
        const char *name;
        int64_t value;
        int k = tk_op_param_dim(op, i, j, &name, &value);
        v.sizes[v.ndim++] = k == TK_DIM_BATCH ? 2 : k == TK_DIM_NAME ? dim_size(op, name) : value;
    }
    int64_t n = 1;
    for (int d = v.ndim - 1; d >= 0; d--) v.strides[d] = n, n *= v.sizes[d];
    size_t bytes = (size_t)n * tk_dtype_size(v.dtype);
    unsigned char *p = malloc(bytes ? bytes : 1);
    for (size_t b = 0; b < bytes; b++) p[b] = (unsigned char)(b * 37 + 11) & 0x3f;   /* small finite values */
    v.data = p;
    *owned = p;
    return tk_arg_tensor(v);
}

/* Binds args; when that works and the output is small, allocates exact
 * outputs and runs the whole index space in two chunks. */
static void call_once(const tk_op *op, const tk_arg *args, int n, stats *st) {
    tk_call call;
    st->calls++;
    tk_status s = tk_bind(op, args, n, &call);
    if (s != TK_OK) {
        int named = strncmp(call.msg, "tk.", 3) == 0 && strstr(call.msg, tk_op_name(op)) != NULL;
        if (!named) fprintf(stderr, "%s: an error that does not name the op: %s\n", tk_op_name(op), call.msg);
        CHECK(s == TK_ERR_ARG && named);
        return;
    }
    st->bound++;
    if (call.kargs.numel > MAX_RUN) return;
    void *outs[8] = {0};
    for (int o = 0; o < call.noutputs; o++) {
        int64_t numel = 1, strides[TK_MAX_DIMS];
        for (int d = call.out_ndim[o] - 1; d >= 0; d--) strides[d] = numel, numel *= call.out_sizes[o][d];
        size_t bytes = (size_t)numel * tk_dtype_size(call.out_dtype[o]);
        outs[o] = malloc(bytes ? bytes : 1);
        CHECK(tk_set_output(&call, o, tk_view(outs[o], call.out_dtype[o], call.out_ndim[o], call.out_sizes[o],
                                              strides)) == TK_OK);
    }
    int64_t mid = call.kargs.numel / 2;
    CHECK(tk_run_cpu(&call, 0, mid) == TK_OK && tk_run_cpu(&call, mid, call.kargs.numel) == TK_OK);
    st->ran++;
    for (int o = 0; o < call.noutputs; o++) free(outs[o]);
}

/* Every combination of hostile values for the scalar parameters from `i` on. */
static void combos(const tk_op *op, tk_arg *args, int i, stats *st) {
    int n = tk_op_nparams(op);
    if (i == n) {
        call_once(op, args, n, st);
        return;
    }
    int kind = tk_op_param_kind(op, i);
    if (kind == 0) {                        /* tensor: already made */
        combos(op, args, i + 1, st);
    } else if (kind == 1) {
        for (int k = 0; k < NINTS; k++) {
            args[i] = tk_arg_int(k_ints[k]);
            combos(op, args, i + 1, st);
        }
        if (tk_op_param_optional(op, i)) {
            args[i] = tk_arg_none();
            combos(op, args, i + 1, st);
        }
    } else if (kind == 2) {
        for (int k = 0; k < NFLOATS; k++) {
            args[i] = tk_arg_float(k_floats[k]);
            combos(op, args, i + 1, st);
        }
    } else {
        for (int b = 0; b < 2; b++) {
            args[i] = tk_arg_bool(b);
            combos(op, args, i + 1, st);
        }
    }
}

int main(void) {
    tk_ctx *ctx = tk_ctx_new();
    int s = tk_ctx_add_builtins(ctx, tk_builtin_specs, tk_builtin_nspecs, tk_builtin_kernels, tk_builtin_nkernels);
    if (s != TK_OK) fprintf(stderr, "%s\n", tk_ctx_error(ctx));
    CHECK(s == TK_OK);
    for (int o = 0; o < tk_op_count(ctx); o++) {
        const tk_op *op = tk_op_at(ctx, o);
        int n = tk_op_nparams(op);
        if (n > MAX_PARAMS) continue;
        tk_arg args[MAX_PARAMS];
        void *owned[MAX_PARAMS] = {0};
        for (int i = 0; i < n; i++)
            if (tk_op_param_kind(op, i) == 0) args[i] = make_input(op, i, &owned[i]);
        stats st = {0, 0, 0};
        combos(op, args, 0, &st);
        printf("%s: %ld calls, %ld bound, %ld ran\n", tk_op_name(op), st.calls, st.bound, st.ran);
        CHECK(st.ran > 0);
        for (int i = 0; i < n; i++) free(owned[i]);
    }
    tk_ctx_free(ctx);
    return tk_test_report("test_builtin_hostile");
}
