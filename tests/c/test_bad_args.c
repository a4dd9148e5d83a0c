/* test_bad_args.c - the C half of the bad-input matrix (the Python half is
 * tests/python/test_bad_inputs.py): for every op of OPS/*.tk, arguments
 * torch cannot even express (negative sizes, unknown dtypes, too many dims,
 * wrong argument kinds and counts, sizes whose products overflow int64)
 * must make tk_bind fail with TK_ERR_ARG and a message that names the op
 * and the argument. Also the regressions of shape arithmetic the fuzzer
 * found. Usage: test_bad_args OPS TESTS */
#include <dirent.h>
#include <stdint.h>

#include "tk.h"
#include "tk_test.h"

/* A valid call of op: sizes 2, 3, 4... per symbolic dim, one batch dim of
 * size 2, the first allowed dtype, ints 1, floats 0.5, None for int?. */
typedef struct call_args {
    tk_arg a[32];
    int n;
} call_args;

static int64_t dim_size(const tk_op *op, const char *name) {
    /* the same size for the same name wherever it appears */
    static const char *names[32];
    static int count;
    static const tk_op *owner;
    if (owner != op) count = 0, owner = op;
    for (int i = 0; i < count; i++)
        if (strcmp(names[i], name) == 0) return 2 + i;
    if (count < 32) names[count++] = name;
    return 1 + count;
}

static tk_dtype first_dtype(unsigned mask) {
    for (int t = 0; t < TK_DTYPE_COUNT; t++)
        if (mask & (1u << t)) return (tk_dtype)t;
    return TK_F32;
}

static void make_valid(const tk_op *op, call_args *c) {
    static char data[64];
    c->n = tk_op_nparams(op);
    for (int i = 0; i < c->n; i++) {
        int kind = tk_op_param_kind(op, i);
        if (kind == 1) c->a[i] = tk_op_param_optional(op, i) ? tk_arg_none() : tk_arg_int(1);
        else if (kind == 2) c->a[i] = tk_arg_float(0.5);
        else if (kind == 3) c->a[i] = tk_arg_bool(1);
        else {
            tk_tensor_view v;
            memset(&v, 0, sizeof v);
            v.data = data;
            unsigned dt = tk_op_param_dtypes(op, i);
            v.dtype = (dt & (1u << TK_F32)) ? TK_F32 : first_dtype(dt);
            for (int j = 0; j < tk_op_shape_ndims(op, TK_SHAPE_INPUT, i); j++) {
                const char *name;
                int64_t value;
                int k = tk_op_param_dim(op, i, j, &name, &value);
                v.sizes[v.ndim++] = k == TK_DIM_BATCH ? 2 : k == TK_DIM_NAME ? dim_size(op, name) : value;
            }
            int64_t stride = 1;
            for (int d = v.ndim - 1; d >= 0; d--) v.strides[d] = stride, stride *= v.sizes[d];
            c->a[i] = tk_arg_tensor(v);
        }
    }
}

static char prefix_of[128];

/* Binds and expects TK_ERR_ARG with a message that starts with "tk.<op>: "
 * and contains `want` (e.g. "argument 'x'"). */
static void expect_error(const tk_op *op, const call_args *c, int nargs, const char *want, const char *what) {
    tk_call call;
    int st = tk_bind(op, c->a, nargs, &call);
    snprintf(prefix_of, sizeof prefix_of, "tk.%s: ", tk_op_name(op));
    int ok = st == TK_ERR_ARG && strncmp(call.msg, prefix_of, strlen(prefix_of)) == 0 && strstr(call.msg, want);
    if (!ok)
        fprintf(stderr, "%s, %s: expected an error naming %s, got status %d: \"%s\"\n", tk_op_name(op), what,
                want, st, call.msg);
    CHECK(ok);
}

static void test_op(const tk_op *op) {
    call_args c;
    tk_call call;
    char want[160];
    int tensors_before = 0;
    make_valid(op, &c);
    int st = tk_bind(op, c.a, c.n, &call);
    if (st != TK_OK) fprintf(stderr, "%s: the valid call fails: %s\n", tk_op_name(op), call.msg);
    CHECK(st == TK_OK);
    expect_error(op, &c, c.n - 1, "expected", "one argument too few");
    expect_error(op, &c, c.n + 1, "expected", "one argument too many");
    for (int i = 0; i < c.n; i++) {
        const char *name = tk_op_param_name(op, i);
        snprintf(want, sizeof want, "argument '%s'", name);
        call_args bad = c;
        if (tk_op_param_kind(op, i) != 0) {
            bad.a[i] = tk_arg_tensor(tk_view(NULL, TK_F32, 0, NULL, NULL));
            expect_error(op, &bad, c.n, want, "a tensor for a scalar");
            if (tk_op_param_kind(op, i) == 1 && !tk_op_param_optional(op, i)) {
                bad.a[i] = tk_arg_none();
                expect_error(op, &bad, c.n, want, "None for an int");
            }
            continue;
        }
        bad.a[i] = tk_arg_int(3);
        expect_error(op, &bad, c.n, want, "an int for a tensor");
        tk_tensor_view *v = &bad.a[i].t;
        const int unknown[] = {-1, TK_DTYPE_COUNT, 1000};
        for (int u = 0; u < 3; u++) {
            bad = c;
            v->dtype = (tk_dtype)unknown[u];
            expect_error(op, &bad, c.n, want, "an unknown dtype");
        }
        const int ndims[] = {-1, TK_MAX_DIMS + 1, 1 << 30};
        for (int u = 0; u < 3; u++) {
            bad = c;
            v->ndim = ndims[u];
            expect_error(op, &bad, c.n, want, "a bad rank");
        }
        for (int d = 0; d < c.a[i].t.ndim; d++) {
            const int64_t sizes[] = {-1, INT64_MIN};
            for (int u = 0; u < 2; u++) {
                bad = c;
                v->sizes[d] = sizes[u];
                expect_error(op, &bad, c.n, want, "a negative size");
            }
        }
        if (tensors_before++ > 0) {
            bad = c;
            v->device = TK_CUDA;
            v->device_index = 0;
            expect_error(op, &bad, c.n, want, "a tensor on another device");
        }
        bad = c;
        v->device = (tk_device)9;
        expect_error(op, &bad, c.n, want, "a device that is not one");
    }
    /* a call that did not bind is not run, nor given outputs */
    call_args bad = c;
    bad.a[0] = tk_arg_int(3);
    tk_call failed;
    CHECK(tk_bind(op, bad.a, c.n, &failed) != TK_OK);
    tk_tensor_view out = tk_view(NULL, TK_F32, 0, NULL, NULL);
    CHECK(tk_set_output(&failed, 0, out) != TK_OK);
    CHECK(tk_run_cpu(&failed, 0, 1) != TK_OK && strstr(failed.msg, "not bound") != NULL);
    /* nor a call bound to tensors of another device on the CPU */
    if (tk_op_param_kind(op, 0) == 0) {
        bad = c;
        for (int i = 0; i < c.n; i++)
            if (tk_op_param_kind(op, i) == 0) bad.a[i].t.device = TK_META;
        tk_call meta;
        CHECK(tk_bind(op, bad.a, c.n, &meta) == TK_OK);
        CHECK(tk_run_cpu(&meta, 0, 1) != TK_OK && strstr(meta.msg, "not on the CPU") != NULL);
    }
}

/* The accessors take a NULL op (tk_op_find's answer for an unknown name). */
static void test_null_op(void) {
    CHECK(tk_op_name(NULL) == NULL && tk_op_file(NULL) == NULL && tk_op_schema(NULL) == NULL);
    CHECK(tk_op_nparams(NULL) == 0 && tk_op_noutputs(NULL) == 0 && tk_op_nvariants(NULL) == 0);
    CHECK(tk_op_nbackward(NULL) == 0 && tk_op_backward(NULL) == NULL && tk_op_backward_at(NULL, 0) == NULL);
    CHECK(tk_op_param_kind(NULL, 0) == -1 && tk_op_param_name(NULL, 0) == NULL && tk_op_param_optional(NULL, 0) == 0);
    CHECK(tk_op_output_name(NULL, 0) == NULL && tk_op_output_written(NULL, 0) == 0 && tk_op_loop_free(NULL) == 0 &&
          tk_op_memory_bound(NULL) == 0);
    CHECK(tk_op_kernel_name(NULL, 0) == NULL && tk_op_param_read(NULL, 0) == 0);
    tk_dtype dt;
    CHECK(tk_dtype_from_name(NULL, &dt) == 0);
    tk_tensor_view v = tk_view(NULL, TK_F32, 2, NULL, NULL);
    CHECK(v.ndim == 2 && v.sizes[0] == 0 && v.strides[1] == 0);
    CHECK(tk_arg_same_binding(NULL, NULL) == 0);
}

/* Symbolic dims so large that the output's element count overflows int64:
 * an error that names the output and the arguments its shape comes from. */
static void test_overflow(const tk_op *op) {
    call_args c;
    make_valid(op, &c);
    for (int i = 0; i < c.n; i++) {
        if (tk_op_param_kind(op, i) != 0) continue;
        tk_tensor_view *v = &c.a[i].t;
        for (int d = 0; d < v->ndim; d++) v->sizes[d] = (int64_t)1 << 40;
    }
    tk_call call;
    int st = tk_bind(op, c.a, c.n, &call);
    int ok = st == TK_ERR_ARG && strstr(call.msg, "argument") && strncmp(call.msg, "tk.", 3) == 0;
    if (!ok) fprintf(stderr, "%s, sizes 2**40: status %d: \"%s\"\n", tk_op_name(op), st, call.msg);
    CHECK(ok);
}

/* Regressions of the shape evaluator (tk_eval_int) found by fuzz_spec. */
static void test_shape_arith(void) {
    const char *src = "op f(x: float32[N], p: int, h: int? = 1 % p, g: int? = 7 // p)\n"
                      "        -> y: float32[N, h, g]:\n"
                      "    for i, j, k in y:\n        y[i, j, k] = x[i]\n";
    tk_ctx *ctx = tk_ctx_new();
    CHECK(tk_load_spec(ctx, "f.tk", src, strlen(src)) == TK_OK);
    const tk_op *op = tk_op_at(ctx, 0);
    float x[1];
    int64_t n = 1, s = 1;
    tk_arg a[4] = {tk_arg_tensor(tk_view(x, TK_F32, 1, &n, &s)), tk_arg_int(INT64_MIN), tk_arg_none(),
                   tk_arg_int(0)};
    tk_call call;
    /* 1 % INT64_MIN is 1 + INT64_MIN < 0 (Python's sign rule): a negative dim */
    CHECK(tk_bind(op, a, 4, &call) == TK_ERR_ARG);
    CHECK(strstr(call.msg, "dim 1 would be -9223372036854775807; it must be >= 0 (from argument 'p')") != NULL);
    a[1] = tk_arg_int(-1);                  /* x % -1 == 0, x // -1 == -x */
    a[3] = tk_arg_none();
    CHECK(tk_bind(op, a, 4, &call) == TK_ERR_ARG && strstr(call.msg, "dim 2 would be -7") != NULL);
    a[1] = tk_arg_int(-3);                  /* 1 % -3 == -2 */
    a[3] = tk_arg_int(5);
    CHECK(tk_bind(op, a, 4, &call) == TK_ERR_ARG && strstr(call.msg, "dim 1 would be -2") != NULL);
    a[1] = tk_arg_int(3);                   /* 1 % 3 == 1, 7 // 3 == 2 */
    a[3] = tk_arg_none();
    CHECK(tk_bind(op, a, 4, &call) == TK_OK && call.out_sizes[0][1] == 1 && call.out_sizes[0][2] == 2);
    a[1] = tk_arg_int(0);
    CHECK(tk_bind(op, a, 4, &call) == TK_ERR_ARG && strstr(call.msg, "argument 'h'") != NULL);
    tk_ctx_free(ctx);
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "ops";
    tk_ctx *ctx = tk_ctx_new();
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 3, ".tk") != 0) continue;
        char *text = read_spec(dir, e->d_name, &len);
        CHECK(text && tk_load_spec(ctx, e->d_name, text, len) == TK_OK);
        free(text);
    }
    if (d) closedir(d);
    CHECK(tk_op_count(ctx) >= 2);
    for (int i = 0; i < tk_op_count(ctx); i++) {
        test_op(tk_op_at(ctx, i));
        test_overflow(tk_op_at(ctx, i));
    }
    tk_ctx_free(ctx);
    test_shape_arith();
    test_null_op();
    return tk_test_report("test_bad_args");
}
