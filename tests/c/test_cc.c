/* test_cc.c - CPU kernels of run-time specs (runtime/tk_cc.h): a spec
 * compiled by the system C compiler and run through the C API; the disk
 * cache (a second tk_cc finds the entry, a damaged entry is rebuilt, an
 * unwritable folder falls back to a temporary one); one variant at a time
 * (tk_cc_compile_variant: an entry per variant, only that kernel attached,
 * another context's op served from the emitted source); the errors for a
 * missing compiler, a failing compile and a spec error; a kernel that runs
 * its row loop in parts (its mark found, parts adding up to the whole loop,
 * parts of another kernel refused); optional tensors passed as None
 * through the C API (tk_call_fill, tk_set_fill). Needs `cc` on PATH.
 * Usage: test_cc OPS_DIR TESTS_DIR */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tk.h"
#include "tk_cc.h"
#include "tk_test.h"

static const char *k_axpy =
    "# y = a * x + b, elementwise, any float dtype\n"
    "op axpy(x: float[..., N], b: x.dtype[..., N], a: float) -> y: x.dtype[..., N]:\n"
    "    for i in y:\n"
    "        y[i] = a * x[i] + b[i]\n"
    "op axpy_backward_x(grad_y: float[..., N], a: float) -> grad_x: grad_y.dtype[..., N]:\n"
    "    for i in grad_x:\n"
    "        grad_x[i] = a * grad_y[i]\n";

static char cache_root[256];

/* Runs axpy on a (3, 5) float32 x whose storage is transposed (strides 1, 3). */
static void run_axpy(const tk_ctx *ctx) {
    const tk_op *op = tk_op_find(ctx, "axpy");
    CHECK(op != NULL);
    if (!op) return;
    float xs[15], b[15], y[15];
    for (int i = 0; i < 15; i++) {
        xs[i] = (float)i;
        b[i] = 0.5f * (float)i;
        y[i] = NAN;
    }
    int64_t sz[2] = {3, 5}, xst[2] = {1, 3}, st[2] = {5, 1};
    tk_arg args[3] = {tk_arg_tensor(tk_view(xs, TK_F32, 2, sz, xst)), tk_arg_tensor(tk_view(b, TK_F32, 2, sz, st)),
                      tk_arg_float(2.0)};
    tk_call call;
    CHECK(tk_bind(op, args, 3, &call) == TK_OK);
    CHECK(tk_set_output(&call, 0, tk_view(y, TK_F32, 2, sz, st)) == TK_OK);
    CHECK(tk_run_cpu(&call, 0, 7) == TK_OK);   /* two chunks */
    CHECK(tk_run_cpu(&call, 7, call.kargs.numel) == TK_OK);
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 5; c++) CHECK(y[r * 5 + c] == 2.0f * xs[r + 3 * c] + b[r * 5 + c]);
}

static tk_cc *new_cc(const char *compiler, const char *dir) {
    tk_cc_options opt = {compiler, dir, 0};
    return tk_cc_new(&opt);
}

/* Number of *.so files in dir. */
static int count_entries(const char *dir) {
    char cmd[512], out[64] = "";
    snprintf(cmd, sizeof cmd, "ls %s 2>/dev/null | grep -c '\\.so$'", dir);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    if (!fgets(out, sizeof out, p)) out[0] = 0;
    pclose(p);
    return atoi(out);
}

static void test_compile_and_cache(void) {
    char dir[300], msg[16384];
    snprintf(dir, sizeof dir, "%s/cpu", cache_root);
    tk_ctx *ctx = tk_ctx_new();
    tk_cc *cc = new_cc(NULL, dir);
    CHECK(strcmp(tk_cc_cache_dir(cc), dir) == 0);
    tk_status st = tk_cc_load_spec(cc, ctx, "axpy.tk", k_axpy, strlen(k_axpy), msg, sizeof msg);
    if (st != TK_OK) fprintf(stderr, "%s\n", msg);
    CHECK(st == TK_OK);
    CHECK(count_entries(dir) == 1);
    run_axpy(ctx);
    for (int v = 0; v < tk_op_nvariants(tk_op_find(ctx, "axpy_backward_x")); v++)
        CHECK(tk_op_cpu_kernel(tk_op_find(ctx, "axpy_backward_x"), v) != NULL);
    tk_cc_free(cc);
    tk_ctx_free(ctx);

    /* a fresh context and compiler find the entry (same key, nothing added) */
    ctx = tk_ctx_new();
    cc = new_cc(NULL, dir);
    CHECK(tk_cc_load_spec(cc, ctx, "axpy.tk", k_axpy, strlen(k_axpy), msg, sizeof msg) == TK_OK);
    CHECK(count_entries(dir) == 1);
    run_axpy(ctx);
    tk_cc_free(cc);
    tk_ctx_free(ctx);
}

/* A damaged entry does not load: it is rebuilt in place. */
static void test_damaged_entry(void) {
    char dir[300], msg[16384], cmd[700];
    snprintf(dir, sizeof dir, "%s/damaged", cache_root);
    tk_ctx *ctx = tk_ctx_new();
    tk_cc *cc = new_cc(NULL, dir);
    CHECK(tk_cc_load_spec(cc, ctx, "axpy.tk", k_axpy, strlen(k_axpy), msg, sizeof msg) == TK_OK);
    tk_cc_free(cc);
    tk_ctx_free(ctx);
    snprintf(cmd, sizeof cmd, "for f in %s/*.so; do mv \"$f\" \"$f.old\" && head -c 100 \"$f.old\" > \"$f\" && rm \"$f.old\"; done", dir);
    CHECK(system(cmd) == 0);
    ctx = tk_ctx_new();
    cc = new_cc(NULL, dir);
    tk_status st = tk_cc_load_spec(cc, ctx, "axpy.tk", k_axpy, strlen(k_axpy), msg, sizeof msg);
    if (st != TK_OK) fprintf(stderr, "%s\n", msg);
    CHECK(st == TK_OK);
    run_axpy(ctx);
    tk_cc_free(cc);
    tk_ctx_free(ctx);
}

/* A cache folder that cannot be made: compiled in a temporary folder. */
static void test_unwritable_cache(void) {
    char msg[16384];
    tk_ctx *ctx = tk_ctx_new();
    tk_cc *cc = new_cc(NULL, "/proc/tk-cannot-write-here/cpu");
    tk_status st = tk_cc_load_spec(cc, ctx, "axpy.tk", k_axpy, strlen(k_axpy), msg, sizeof msg);
    if (st != TK_OK) fprintf(stderr, "%s\n", msg);
    CHECK(st == TK_OK);
    run_axpy(ctx);
    tk_cc_free(cc);
    tk_ctx_free(ctx);
}

/* The variant of op whose dtype code is code, -1 if none. */
static int variant_of(const tk_op *op, const char *code) {
    for (int v = 0; v < tk_op_nvariants(op); v++)
        if (strcmp(tk_op_variant_code(op, v), code) == 0) return v;
    return -1;
}

/* One variant at a time: its own cache entry, only its kernel attached. */
static void test_compile_variant(void) {
    char dir[300], msg[16384];
    snprintf(dir, sizeof dir, "%s/variants", cache_root);
    tk_ctx *ctx = tk_ctx_new();
    tk_cc *cc = new_cc(NULL, dir);
    CHECK(tk_load_spec(ctx, "axpy.tk", k_axpy, strlen(k_axpy)) == TK_OK);
    CHECK(tk_ctx_link(ctx) == TK_OK);
    CHECK(tk_cc_check(cc, msg, sizeof msg) == TK_OK && msg[0] == 0);
    tk_op *axpy = tk_op_find_mut(ctx, "axpy");
    int f32 = variant_of(axpy, "f32"), f64 = variant_of(axpy, "f64");
    CHECK(f32 >= 0 && f64 >= 0 && f32 != f64 && tk_op_variant_code(axpy, tk_op_nvariants(axpy)) == NULL);
    tk_status st = tk_cc_compile_variant(cc, ctx, axpy, f32, msg, sizeof msg);
    if (st != TK_OK) fprintf(stderr, "%s\n", msg);
    CHECK(st == TK_OK);
    CHECK(count_entries(dir) == 1);
    for (int v = 0; v < tk_op_nvariants(axpy); v++) CHECK((tk_op_cpu_kernel(axpy, v) != NULL) == (v == f32));
    CHECK(tk_op_cpu_kernel(tk_op_find(ctx, "axpy_backward_x"), 0) == NULL);
    run_axpy(ctx);
    CHECK(tk_cc_compile_variant(cc, ctx, axpy, f64, msg, sizeof msg) == TK_OK);
    CHECK(count_entries(dir) == 2);
    CHECK(tk_cc_compile_variant(cc, ctx, axpy, tk_op_nvariants(axpy), msg, sizeof msg) == TK_ERR_INVALID);

    /* a second context's op from the first one's source: the cached entry */
    tk_ctx *other = tk_ctx_new();
    CHECK(tk_load_spec(other, "axpy.tk", k_axpy, strlen(k_axpy)) == TK_OK);
    CHECK(tk_ctx_link(other) == TK_OK);
    char *src = NULL;
    CHECK(tk_emit_variant(ctx, axpy, f32, TK_TARGET_C, &src) == TK_OK);
    tk_op *copy = tk_op_find_mut(other, "axpy");
    CHECK(tk_cc_compile_variant_source(cc, copy, f32, src, msg, sizeof msg) == TK_OK);
    tk_free(src);
    CHECK(count_entries(dir) == 2);
    CHECK(tk_op_cpu_kernel(copy, f32) == tk_op_cpu_kernel(axpy, f32));   /* the same file, loaded once */
    CHECK(tk_op_cpu_kernel(copy, f64) == NULL);
    run_axpy(other);
    tk_ctx_free(other);
    tk_cc_free(cc);

    /* failures name the op and the variant; nothing is attached */
    cc = new_cc("cc -include /nonexistent/tk_missing.h", "");
    tk_op *back = tk_op_find_mut(ctx, "axpy_backward_x");
    int b32 = variant_of(back, "f32");
    CHECK(tk_cc_compile_variant(cc, ctx, back, b32, msg, sizeof msg) == TK_ERR_COMPILE);
    CHECK(strstr(msg, "tk: compiling the CPU kernels of axpy_backward_x (f32) failed (cc -include") == msg);
    CHECK(tk_op_cpu_kernel(back, b32) == NULL);
    tk_cc_free(cc);
    cc = new_cc("/nonexistent/bin/cc", "");
    CHECK(tk_cc_check(cc, msg, sizeof msg) == TK_ERR_NOTFOUND);
    CHECK(strstr(msg, "tk: no C compiler: '/nonexistent/bin/cc' could not be run") == msg);
    CHECK(tk_cc_compile_variant(cc, ctx, back, b32, msg, sizeof msg) == TK_ERR_NOTFOUND);
    tk_cc_free(cc);
    tk_ctx_free(ctx);
}

static void test_errors(void) {
    char msg[16384];
    /* no such compiler */
    tk_ctx *ctx = tk_ctx_new();
    tk_cc *cc = new_cc("/nonexistent/bin/cc", "");
    CHECK(tk_cc_load_spec(cc, ctx, "axpy.tk", k_axpy, strlen(k_axpy), msg, sizeof msg) == TK_ERR_NOTFOUND);
    CHECK(strstr(msg, "tk: no C compiler: '/nonexistent/bin/cc' could not be run (No such file or directory)") == msg);
    CHECK(strstr(msg, "set TK_CC") != NULL);
    CHECK(tk_op_cpu_kernel(tk_op_find(ctx, "axpy"), 0) == NULL);
    tk_cc_free(cc);
    tk_ctx_free(ctx);

    /* the compiler fails: its own message comes back */
    ctx = tk_ctx_new();
    cc = new_cc("cc -include /nonexistent/tk_missing.h", "");
    CHECK(tk_cc_load_spec(cc, ctx, "axpy.tk", k_axpy, strlen(k_axpy), msg, sizeof msg) == TK_ERR_COMPILE);
    CHECK(strstr(msg, "tk: compiling the CPU kernels of axpy, axpy_backward_x failed (cc -include") == msg);
    CHECK(strstr(msg, "tk_missing.h") != NULL);
    tk_cc_free(cc);
    tk_ctx_free(ctx);

    /* a spec error is the loader's, with its location; nothing is compiled */
    ctx = tk_ctx_new();
    cc = new_cc("/nonexistent/bin/cc", "");
    const char *bad = "op f(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[j]\n";
    CHECK(tk_cc_load_spec(cc, ctx, "bad.tk", bad, strlen(bad), msg, sizeof msg) == TK_ERR_CHECK);
    CHECK(strncmp(msg, "bad.tk:3:18: error: ", 20) == 0);
    CHECK(tk_op_count(ctx) == 0);
    tk_cc_free(cc);
    tk_ctx_free(ctx);
}

/* A column sum that runs in parts (plan_rows.c, plan_parts): the kernel
 * is marked, part 0 (the init and its rows) into y plus parts 1 and 2 into
 * zeroed buffers add up to the whole loop, and tk_run_cpu refuses parts of
 * axpy's kernel, which does not run in parts. */
static void test_parts(void) {
    static const char *colsum =
        "op colsum(x: float[R, N]) -> y: x.dtype[N]:\n"
        "    for _ in y:\n"
        "        for i in range(N):\n"
        "            y[i] = 1.0\n"
        "        for r in range(R):\n"
        "            for i in range(N):\n"
        "                y[i] = y[i] + x[r, i]\n";
    char dir[300], msg[16384];
    snprintf(dir, sizeof dir, "%s/parts", cache_root);
    tk_ctx *ctx = tk_ctx_new();
    tk_cc *cc = new_cc(NULL, dir);
    tk_status st = tk_cc_load_spec(cc, ctx, "colsum.tk", colsum, strlen(colsum), msg, sizeof msg);
    if (st != TK_OK) fprintf(stderr, "%s\n", msg);
    CHECK(st == TK_OK);
    CHECK(tk_cc_load_spec(cc, ctx, "axpy.tk", k_axpy, strlen(k_axpy), msg, sizeof msg) == TK_OK);
    const tk_op *op = tk_op_find(ctx, "colsum");
    int f64 = op ? variant_of(op, "f64") : -1;
    CHECK(f64 >= 0 && tk_op_cpu_parts(op, f64) == 1);
    CHECK(tk_op_cpu_parts(tk_op_find(ctx, "axpy"), 0) == 0);
    if (f64 < 0) goto done;
    enum { R = 7, N = 3 };
    double x[R * N], whole[N], y[N], p1[N] = {0}, p2[N] = {0};
    for (int i = 0; i < R * N; i++) x[i] = (double)(i * i % 11) + 0.5;   /* positive: no part sums to 0 */
    int64_t sx[2] = {R, N}, stx[2] = {N, 1}, sy[1] = {N}, sty[1] = {1};
    tk_arg arg = tk_arg_tensor(tk_view(x, TK_F64, 2, sx, stx));
    tk_call call;
    CHECK(tk_bind(op, &arg, 1, &call) == TK_OK);
    CHECK(tk_set_output(&call, 0, tk_view(whole, TK_F64, 1, sy, sty)) == TK_OK);
    CHECK(tk_run_cpu(&call, 0, 1) == TK_OK);   /* nparts 0: the whole loop */
    for (int i = 0; i < N; i++) {
        double want = 1.0;
        for (int r = 0; r < R; r++) want += x[r * N + i];
        CHECK(whole[i] == want);
    }
    double *outs[3] = {y, p1, p2};
    for (int p = 0; p < 3; p++) {
        call.kargs.part = p;
        call.kargs.nparts = 3;
        CHECK(tk_set_output(&call, 0, tk_view(outs[p], TK_F64, 1, sy, sty)) == TK_OK);
        CHECK(tk_run_cpu(&call, 0, 1) == TK_OK);
    }
    for (int i = 0; i < N; i++) CHECK(fabs(y[i] + p1[i] + p2[i] - whole[i]) < 1e-12);
    CHECK(p1[0] != 0.0 && p2[0] != 0.0 && y[0] != whole[0]);   /* each part summed its own rows */
    call.kargs.part = 3;   /* outside [0, nparts) */
    CHECK(tk_run_cpu(&call, 0, 1) != TK_OK && strstr(call.msg, "outside [0, 3)") != NULL);
    const tk_op *ax = tk_op_find(ctx, "axpy");
    float xs[4] = {1, 2, 3, 4}, b[4] = {0}, ys[4];
    int64_t n4 = 4, s1 = 1;
    tk_arg args[3] = {tk_arg_tensor(tk_view(xs, TK_F32, 1, &n4, &s1)), tk_arg_tensor(tk_view(b, TK_F32, 1, &n4, &s1)),
                      tk_arg_float(2.0)};
    CHECK(tk_bind(ax, args, 3, &call) == TK_OK);
    CHECK(tk_set_output(&call, 0, tk_view(ys, TK_F32, 1, &n4, &s1)) == TK_OK);
    call.kargs.nparts = 2;
    CHECK(tk_run_cpu(&call, 0, 4) != TK_OK && strstr(call.msg, "does not run in parts") != NULL);
done:
    tk_cc_free(cc);
    tk_ctx_free(ctx);
}

/* An optional tensor passed as None (tk_arg_none) reads as its default
 * from the row the caller attaches (tk_set_fill); before that the call is
 * refused, and a tensor where one is needed cannot be None. */
static void test_optional_tensors(void) {
    static const char *spec =
        "op scale_shift(x: float[B, N], w: x.dtype[N]? = 2, b: float64[B, N]? = -0.5) -> y: x.dtype[B, N]:\n"
        "    for r, i in y:\n"
        "        y[r, i] = x[r, i] * w[i] + b[r, i]\n";
    char dir[300], msg[16384];
    snprintf(dir, sizeof dir, "%s/optional", cache_root);
    tk_ctx *ctx = tk_ctx_new();
    tk_cc *cc = new_cc(NULL, dir);
    tk_status st = tk_cc_load_spec(cc, ctx, "opt.tk", spec, strlen(spec), msg, sizeof msg);
    if (st != TK_OK) fprintf(stderr, "%s\n", msg);
    CHECK(st == TK_OK);
    const tk_op *op = tk_op_find(ctx, "scale_shift");
    CHECK(op != NULL && strcmp(tk_op_schema(op), "scale_shift(Tensor x, Tensor? w=None, Tensor? b=None) -> Tensor") == 0);
    if (!op) return;
    float x[12], w[4] = {1, -1, 3, 0.25f}, y[12];
    for (int i = 0; i < 12; i++) x[i] = (float)i - 5.0f;
    int64_t sz[2] = {3, 4}, st2[2] = {4, 1}, n = 4, one = 1;
    for (int given = 0; given < 2; given++) {
        tk_arg args[3] = {tk_arg_tensor(tk_view(x, TK_F32, 2, sz, st2)),
                          given ? tk_arg_tensor(tk_view(w, TK_F32, 1, &n, &one)) : tk_arg_none(), tk_arg_none()};
        tk_call call;
        CHECK(tk_bind(op, args, 3, &call) == TK_OK);
        for (int i = 0; i < 12; i++) y[i] = NAN;
        CHECK(tk_set_output(&call, 0, tk_view(y, TK_F32, 2, sz, st2)) == TK_OK);
        CHECK(tk_run_cpu(&call, 0, call.kargs.numel) == TK_ERR_ARG);
        CHECK(strcmp(call.msg, given ? "tk.scale_shift: argument 'b' is None, and the memory of its default is not "
                                       "attached (tk_set_fill)"
                                     : "tk.scale_shift: argument 'w' is None, and the memory of its default is not "
                                       "attached (tk_set_fill)") == 0);
        tk_dtype dt = TK_BOOL;
        int64_t numel = 0;
        double value = 0;
        CHECK(tk_call_fill(&call, 0, &dt, &numel, &value) == 0);   /* a tensor */
        CHECK(tk_call_fill(&call, 1, &dt, &numel, &value) == !given);
        if (!given) CHECK(dt == TK_F32 && numel == 4 && value == 2.0);
        float wrow[4] = {2, 2, 2, 2};
        if (!given) CHECK(tk_set_fill(&call, 1, wrow) == TK_OK);
        else CHECK(tk_set_fill(&call, 1, wrow) == TK_ERR_ARG);
        CHECK(tk_call_fill(&call, 2, &dt, &numel, &value) == 1 && dt == TK_F64 && numel == 4 && value == -0.5);
        double brow[4] = {-0.5, -0.5, -0.5, -0.5};
        CHECK(tk_set_fill(&call, 2, brow) == TK_OK);
        CHECK(tk_run_cpu(&call, 0, call.kargs.numel) == TK_OK);
        for (int i = 0; i < 12; i++) CHECK(y[i] == x[i] * (given ? w[i % 4] : 2.0f) - 0.5f);
    }
    tk_arg bad[3] = {tk_arg_none(), tk_arg_none(), tk_arg_none()};
    tk_call call;
    CHECK(tk_bind(op, bad, 3, &call) == TK_ERR_ARG);
    CHECK(strcmp(call.msg, "tk.scale_shift: argument 'x': expected a tensor, got None") == 0);
    tk_cc_free(cc);
    tk_ctx_free(ctx);
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    snprintf(cache_root, sizeof cache_root, "%s/tk-test-cc-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(cache_root)) {
        perror("mkdtemp");
        return 1;
    }
    test_compile_and_cache();
    test_damaged_entry();
    test_unwritable_cache();
    test_compile_variant();
    test_errors();
    test_parts();
    test_optional_tensors();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", cache_root);
    if (system(cmd) != 0) fprintf(stderr, "test_cc: could not remove %s\n", cache_root);
    return tk_test_report("test_cc");
}
