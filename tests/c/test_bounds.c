/* test_bounds.c - bounds (docs/spec.md, "Bounds"): which row-loop stores
 * the planner proves in range from the loop bounds (tkc plan's text, and no
 * tk_ck in the kernel), which it leaves to a run-time check; a failing check
 * through the C API (TK_ERR_BOUNDS, the message naming op, file:line:col,
 * tensor, dim and index; the store skipped: a guard zone around the output
 * stays poisoned); checked kernels (tk_op_set_checked) catching a read
 * that the unchecked kernel does not report, and computing what it does;
 * the same two CUDA kernels under tests/c/cuda_emu.h (compiled by `c++`:
 * the device side of the checks, the record as the launcher passes it).
 * Needs `cc` on PATH. Usage: test_bounds OPS_DIR TESTS_DIR */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <dlfcn.h>
#include <unistd.h>

#include "tk.h"
#include "tk_cc.h"
#include "tk_test.h"

/* A row loop over the rows of x whose store is `STORE` inside `LOOP`. */
#define ROW(LOOP, STORE)                                                                    \
    "op f(x: float[..., N], k: int) -> y: x.dtype[..., N]:\n"                               \
    "    for _ in y:\n"                                                                     \
    "        " LOOP "\n"                                                                    \
    "            " STORE "\n"

typedef struct proof_case {
    const char *text;
    int proven;         /* 1: the plan says no run-time check */
} proof_case;

static const proof_case k_proofs[] = {
    {ROW("for i in range(N):", "y[i] = x[i]"), 1},
    {ROW("for i in range(N):", "y[i + 1] = x[i]"), 0},                 /* y[N] at the last i */
    {ROW("for i in range(N - 1):", "y[i + 1] = x[i]"), 1},
    {ROW("for i in range(1, N):", "y[i - 1] = x[i]"), 1},
    {ROW("for i in range(N):", "y[i - 1] = x[i]"), 0},                 /* y[-1] at i = 0 */
    {ROW("for j in range(N):", "y[N - 1 - j] = x[j]"), 1},             /* a reverse walk */
    {ROW("for j in range(N):", "y[N - j] = x[j]"), 0},
    {ROW("for i in range(N):", "y[2 * i] = x[i]"), 0},
    {ROW("for i in range(N // 2):", "y[2 * i] = x[i]"), 0},           /* true, but beyond the proof */
    {ROW("for i in range(N):", "y[k] = x[i]"), 0},                     /* an int parameter: any value */
    {ROW("for i in range(N):", "y[0] = x[i]"), 0},                     /* N may be 0 outside the loop's own facts */
    {ROW("for i in range(k):", "y[i] = x[i]"), 0},
    {ROW("for i in range(N):", "y[min(i + 1, N - 1)] = x[i]"), 0},     /* min/max: not used */
    /* a local bound once: its value's bounds */
    {"op f(x: float[..., N]) -> y: x.dtype[..., N]:\n    for _ in y:\n        for j in range(N):\n"
     "            i = N - 1 - j\n            y[i] = x[j]\n", 1},
    /* ... bound twice alike (a loop variable and a local of one name) */
    {"op f(x: float[..., N]) -> y: x.dtype[..., N]:\n    for _ in y:\n        for t in range(N):\n"
     "            y[t] = x[t]\n        for j in range(N):\n            t = N - 1 - j\n            y[t] = x[t]\n", 1},
    /* ... or changed later: no bound */
    {"op f(x: float[..., N]) -> y: x.dtype[..., N]:\n    for _ in y:\n        i = 0\n        for j in range(N):\n"
     "            y[i] = x[j]\n            i += 1\n", 0},
};

/* The plan's store line of the one-store spec text (f32, CPU); NULL on error. */
static char *plan_of(const char *text) {
    tk_ctx *ctx = tk_ctx_new();
    char *plan = NULL;
    if (tk_load_spec(ctx, "p.tk", text, strlen(text)) != TK_OK) {
        fprintf(stderr, "%s\n", tk_ctx_error(ctx));
    } else {
        const tk_op *op = tk_op_at(ctx, 0);
        for (int v = 0; v < tk_op_nvariants(op); v++)
            if (strcmp(tk_op_variant_code(op, v), "f32") == 0) tk_plan_text(ctx, op, v, TK_TARGET_C, 0, NULL, &plan);
    }
    tk_ctx_free(ctx);
    return plan;
}

static void test_proofs(void) {
    for (size_t i = 0; i < sizeof k_proofs / sizeof k_proofs[0]; i++) {
        char *plan = plan_of(k_proofs[i].text);
        CHECK(plan != NULL);
        if (!plan) continue;
        int none = strstr(plan, "no run-time check") != NULL, checked = strstr(plan, "checked at run time") != NULL;
        if (none != k_proofs[i].proven || checked == k_proofs[i].proven)
            fprintf(stderr, "case %zu: expected %s:\n%s\n%s\n", i, k_proofs[i].proven ? "proven" : "checked",
                    k_proofs[i].text, plan);
        CHECK(none == k_proofs[i].proven && checked != k_proofs[i].proven);
        free(plan);
    }
}

/* The example row loops (and the selective scan's scratch stores) prove every store: their kernels check nothing. */
static void test_examples_proven(const char *tests_dir) {
    static const char *const names[] = {"cumsum.tk", "softmax.tk", "layernorm.tk", "wkv.tk", "selective_scan.tk"};
    char dir[768];
    snprintf(dir, sizeof dir, "%s/../examples/specs", tests_dir);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        size_t len;
        char *text = read_spec(dir, names[i], &len);
        CHECK(text != NULL);
        if (!text) continue;
        tk_ctx *ctx = tk_ctx_new();
        CHECK(tk_load_spec(ctx, names[i], text, len) == TK_OK);
        for (int k = 0; k < tk_op_count(ctx); k++) {
            const tk_op *op = tk_op_at(ctx, k);
            char *plan = NULL, *c = NULL, *cu = NULL;
            CHECK(tk_plan_text(ctx, op, 0, TK_TARGET_C, 0, NULL, &plan) == TK_OK);
            CHECK(tk_emit_variant(ctx, op, 0, TK_TARGET_C, &c) == TK_OK);
            CHECK(tk_emit_variant(ctx, op, 0, TK_TARGET_CUDA, &cu) == TK_OK);
            if (plan && strstr(plan, "checked at run time")) fprintf(stderr, "%s\n", plan);
            CHECK(plan && !strstr(plan, "checked at run time"));
            CHECK(c && !strstr(c, "tk_ck("));
            CHECK(cu && !strstr(cu, "tk_ck("));
            tk_free(plan);
            tk_free(c);
            tk_free(cu);
        }
        tk_ctx_free(ctx);
        free(text);
    }
}

static const char *k_shift =
    "# y[i + 1] = x[i]: y[N] at the last i\n"
    "op shift(x: float[..., N]) -> y: x.dtype[..., N]:\n"
    "    for _ in y:\n"
    "        y[0] = 0.0\n"
    "        for i in range(N):\n"
    "            y[i + 1] = x[i]\n";

static const char *k_peek =
    "# x[i + 1] at the last i reads past the row\n"
    "op peek(x: float[N]) -> y: x.dtype[N]:\n"
    "    for i in y:\n"
    "        y[i] = x[i] + x[i + 1]\n";

static int f32_variant(const tk_op *op) {
    for (int v = 0; v < tk_op_nvariants(op); v++)
        if (strcmp(tk_op_variant_code(op, v), "f32") == 0) return v;
    return -1;
}

/* Loads text into a fresh context and compiles op `name`'s f32 kernel,
 * checked or not. */
static tk_op *compile(tk_cc *cc, tk_ctx *ctx, const char *text, const char *name, int checked) {
    char msg[16384];
    CHECK(tk_load_spec(ctx, "b.tk", text, strlen(text)) == TK_OK);
    tk_op *op = tk_op_find_mut(ctx, name);
    CHECK(op != NULL);
    if (!op) return NULL;
    tk_op_set_checked(op, checked);
    tk_status st = tk_cc_compile_variant(cc, ctx, op, f32_variant(op), msg, sizeof msg);
    if (st != TK_OK) fprintf(stderr, "%s\n", msg);
    CHECK(st == TK_OK);
    return st == TK_OK ? op : NULL;
}

/* shift on 3 rows of 4, its output a view into a poisoned buffer with 8
 * guard floats each side: the out-of-range store raises, and is skipped. */
static void test_store_check(tk_cc *cc) {
    tk_ctx *ctx = tk_ctx_new();
    tk_op *op = compile(cc, ctx, k_shift, "shift", 0);
    if (op) {
        float x[12], buf[8 + 12 + 8];
        for (int i = 0; i < 12; i++) x[i] = (float)(i + 1);
        for (int i = 0; i < 28; i++) buf[i] = NAN;
        int64_t sz[2] = {3, 4}, st[2] = {4, 1};
        tk_arg a = tk_arg_tensor(tk_view(x, TK_F32, 2, sz, st));
        tk_call call;
        CHECK(tk_bind(op, &a, 1, &call) == TK_OK);
        CHECK(tk_set_output(&call, 0, tk_view(buf + 8, TK_F32, 2, sz, st)) == TK_OK);
        CHECK(tk_run_cpu(&call, 0, call.kargs.numel) == TK_ERR_BOUNDS);
        const char *want = "tk.shift: b.tk:6:13: store y[..., 4] out of range: dim 0 (N) has size 4 "
                           "(the store was skipped)";
        if (strcmp(call.msg, want) != 0) fprintf(stderr, "got:  %s\nwant: %s\n", call.msg, want);
        CHECK(strcmp(call.msg, want) == 0);
        for (int i = 0; i < 8; i++) CHECK(isnan(buf[i]) && isnan(buf[20 + i]));   /* the guards */
        for (int r = 0; r < 3; r++)   /* the rows: y[0] = 0, y[i + 1] = x[i] while in range */
            for (int c = 0; c < 4; c++) CHECK(buf[8 + r * 4 + c] == (c == 0 ? 0.0f : x[r * 4 + c - 1]));
    }
    tk_ctx_free(ctx);
}

/* peek: unchecked, the read past the end refuses the call (its range is
 * checked at the call: reads.c, tk_bind); checked, the kernel raises naming
 * the element; in range (a shorter view) both agree. */
static void test_checked_read(tk_cc *cc) {
    tk_ctx *ctx = tk_ctx_new(), *cctx = tk_ctx_new();
    tk_op *plain = compile(cc, ctx, k_peek, "peek", 0), *checked = compile(cc, cctx, k_peek, "peek", 1);
    if (plain && checked) {
        float x[6] = {1, 2, 3, 4, 5, 6}, y[5], yc[5];
        int64_t n = 5, one = 1;
        tk_arg a = tk_arg_tensor(tk_view(x, TK_F32, 1, &n, &one));   /* x[5] exists in memory: no crash */
        tk_call call;
        CHECK(tk_bind(plain, &a, 1, &call) != TK_OK);
        const char *refused = "tk.peek: read x[i + 1] (b.tk:4:23) would reach index 5 of dim 0 of 'x', whose size "
                              "is 5: outside the tensor (index 0 runs over 1..5 for these arguments)";
        if (strcmp(call.msg, refused) != 0) fprintf(stderr, "got:  %s\nwant: %s\n", call.msg, refused);
        CHECK(strcmp(call.msg, refused) == 0);
        for (int i = 0; i < 5; i++) y[i] = x[i] + (i + 1 < 5 ? x[i + 1] : 0.0f);   /* what checked mode gives */
        CHECK(tk_bind(checked, &a, 1, &call) == TK_OK);
        CHECK(tk_set_output(&call, 0, tk_view(yc, TK_F32, 1, &n, &one)) == TK_OK);
        CHECK(tk_run_cpu(&call, 0, call.kargs.numel) == TK_ERR_BOUNDS);
        const char *want = "tk.peek: b.tk:4:23: read x[5] out of range: dim 0 (N) has size 5 (the read gave 0)";
        if (strcmp(call.msg, want) != 0) fprintf(stderr, "got:  %s\nwant: %s\n", call.msg, want);
        CHECK(strcmp(call.msg, want) == 0);
        for (int i = 0; i < 4; i++) CHECK(yc[i] == y[i] && y[i] == x[i] + x[i + 1]);   /* the reads in range */
        CHECK(yc[4] == x[4]);                                                          /* x[5] gave 0 */
    }
    tk_ctx_free(ctx);
    tk_ctx_free(cctx);
}

/* tkc plan --checked's text; checked kernels of the element-wise form
 * carry checks, the unchecked ones none. */
static void test_checked_plan(void) {
    tk_ctx *ctx = tk_ctx_new();
    CHECK(tk_load_spec(ctx, "b.tk", k_peek, strlen(k_peek)) == TK_OK);
    const tk_op *op = tk_op_find(ctx, "peek");
    char *plan = NULL, *c = NULL, *cc = NULL, *cu = NULL;
    CHECK(tk_plan_text(ctx, op, f32_variant(op), TK_TARGET_C, TK_EMIT_CHECKED, NULL, &plan) == TK_OK);
    CHECK(plan && strstr(plan, "checked mode: every index of every read"));
    CHECK(tk_emit_variant(ctx, op, f32_variant(op), TK_TARGET_C, &c) == TK_OK);
    CHECK(c && !strstr(c, "tk_ck("));
    tk_op_set_checked(tk_op_find_mut(ctx, "peek"), 1);
    CHECK(tk_emit_variant(ctx, op, f32_variant(op), TK_TARGET_C, &cc) == TK_OK);
    CHECK(cc && strstr(cc, "tk_ck("));
    CHECK(tk_emit_variant(ctx, op, f32_variant(op), TK_TARGET_CUDA, &cu) == TK_OK);
    CHECK(cu && strstr(cu, "tk_ck("));
    tk_free(plan);
    tk_free(c);
    tk_free(cc);
    tk_free(cu);
    tk_ctx_free(ctx);
}

/* The CUDA kernel of op's f32 variant (checked or not, as op is set) under
 * tests/c/cuda_emu.h: written after that header with a launcher
 * tk_test_launch, compiled by the system C++ compiler into dir, loaded.
 * NULL (and a note) when no C++ compiler runs. */
typedef void (*launch_fn)(const tk_kargs *a);
static launch_fn emu_kernel(tk_ctx *ctx, const tk_op *op, const char *dir, const char *tests_dir) {
    char *src = NULL, path[600], so[600], cmd[3000];
    int v = f32_variant(op);
    CHECK(tk_emit_variant(ctx, op, v, TK_TARGET_CUDA, &src) == TK_OK);
    if (!src) return NULL;
    snprintf(path, sizeof path, "%s/%s_emu.cc", dir, tk_op_name(op));
    snprintf(so, sizeof so, "%s/%s_emu.so", dir, tk_op_name(op));
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return NULL;
    fputs("#include \"cuda_emu.h\"\n", f);
    static const char head[] = "extern \"C\" __global__ ";
    const char *p = src, *q;
    while ((q = strstr(p, head)) != NULL) {   /* a static kernel, as tkc gen-builtin --cuda-emu writes it */
        fwrite(p, 1, (size_t)(q - p), f);
        fputs("static __global__ ", f);
        p = q + sizeof head - 1;
    }
    fputs(p, f);
    fprintf(f, "extern \"C\" void tk_test_launch(const tk_kargs *a) { tk_emu_launch(%s, a, 0, a->numel, 0); }\n",
            tk_op_kernel_name(op, v));
    fclose(f);
    tk_free(src);
    snprintf(cmd, sizeof cmd, "c++ -std=c++17 -O0 -w -shared -fPIC -I%s/c -I%s/../compiler -o %s %s", tests_dir,
             tests_dir, so, path);
    if (system(cmd) != 0) {
        fprintf(stderr, "test_bounds: note: no C++ compiler ran (%s): the CUDA emulation part is skipped\n", cmd);
        return NULL;
    }
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    CHECK(h != NULL);
    if (!h) return NULL;
    return (launch_fn)(uintptr_t)dlsym(h, "tk_test_launch");
}

/* The CUDA kernels under the emulation: shift's unproven store, checked in
 * the device code, is skipped and recorded (the record as the launcher
 * passes it); checked peek reports its read past the end. */
static void test_cuda_emulated(const char *dir, const char *tests_dir) {
    tk_ctx *ctx = tk_ctx_new();
    CHECK(tk_load_spec(ctx, "b.tk", k_shift, strlen(k_shift)) == TK_OK);
    CHECK(tk_load_spec(ctx, "c.tk", k_peek, strlen(k_peek)) == TK_OK);
    tk_op *shift = tk_op_find_mut(ctx, "shift"), *peek = tk_op_find_mut(ctx, "peek");
    tk_op_set_checked(peek, 1);
    launch_fn run_shift = shift ? emu_kernel(ctx, shift, dir, tests_dir) : NULL;
    launch_fn run_peek = run_shift && peek ? emu_kernel(ctx, peek, dir, tests_dir) : NULL;
    if (run_shift && run_peek) {
        float x[12], buf[8 + 12 + 8], y[5];
        for (int i = 0; i < 12; i++) x[i] = (float)(i + 1);
        for (int i = 0; i < 28; i++) buf[i] = NAN;
        int64_t sz[2] = {3, 4}, st[2] = {4, 1}, n = 5, one = 1;
        tk_arg a = tk_arg_tensor(tk_view(x, TK_F32, 2, sz, st));
        tk_call call;
        tk_kerr rec = {0};
        CHECK(tk_bind(shift, &a, 1, &call) == TK_OK);
        CHECK(tk_set_output(&call, 0, tk_view(buf + 8, TK_F32, 2, sz, st)) == TK_OK);
        call.kargs.err = &rec;
        run_shift(&call.kargs);
        CHECK(tk_call_bounds_error(&call, &rec) == TK_ERR_BOUNDS);
        CHECK(strcmp(call.msg, "tk.shift: b.tk:6:13: store y[..., 4] out of range: dim 0 (N) has size 4 "
                               "(the store was skipped)") == 0);
        for (int i = 0; i < 8; i++) CHECK(isnan(buf[i]) && isnan(buf[20 + i]));
        for (int r = 0; r < 3; r++)
            for (int c = 0; c < 4; c++) CHECK(buf[8 + r * 4 + c] == (c == 0 ? 0.0f : x[r * 4 + c - 1]));
        tk_kerr rec2 = {0};
        a = tk_arg_tensor(tk_view(x, TK_F32, 1, &n, &one));
        CHECK(tk_bind(peek, &a, 1, &call) == TK_OK);
        CHECK(tk_set_output(&call, 0, tk_view(y, TK_F32, 1, &n, &one)) == TK_OK);
        call.kargs.err = &rec2;
        run_peek(&call.kargs);
        CHECK(tk_call_bounds_error(&call, &rec2) == TK_ERR_BOUNDS);
        CHECK(strcmp(call.msg, "tk.peek: c.tk:4:23: read x[5] out of range: dim 0 (N) has size 5 "
                               "(the read gave 0)") == 0);
        for (int i = 0; i < 4; i++) CHECK(y[i] == x[i] + x[i + 1]);
        CHECK(y[4] == x[4]);
    }
    tk_ctx_free(ctx);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_bounds OPS_DIR TESTS_DIR\n");
        return 2;
    }
    test_proofs();
    test_examples_proven(argv[2]);
    test_checked_plan();
    char dir[256];
    snprintf(dir, sizeof dir, "%s/tk-test-bounds-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    tk_cc_options opt = {NULL, dir, 0};
    tk_cc *cc = tk_cc_new(&opt);
    test_store_check(cc);
    test_checked_read(cc);
    tk_cc_free(cc);
    test_cuda_emulated(dir, argv[2]);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "test_bounds: could not remove %s\n", dir);
    return tk_test_report("test_bounds");
}
