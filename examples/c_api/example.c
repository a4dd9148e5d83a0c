/* example.c - tk from C, without PyTorch: compile a spec at run time and run
 * it on raw buffers described DLPack-style (data pointer, dtype, sizes and
 * strides in elements), on the CPU and, when there is a GPU, on CUDA.
 *
 * The op is rotary position embedding (examples/specs/rotary.tk). Attention
 * projections come out as (B, T, H, D) and RoPE wants (B, H, T, D): the
 * example passes the transposed *view* (strides of the (B, T, H, D) buffer),
 * no copy, and checks every element against a plain C loop.
 *
 * Build and run (CTest does this as `c_api_example`):
 *   cmake --build build --target c_api_example
 *   build/c_api_example examples/specs/rotary.tk [NVRTC_DIR...]
 * or by hand:
 *   cc -std=c11 -Icompiler examples/c_api/example.c build/libtkcore.a -lm -ldl -lpthread
 * The CUDA part needs the NVIDIA driver (libcuda.so.1) and NVRTC (searched
 * in the NVRTC_DIRs given, then as tk_cuda.h says; TK_NVRTC_PATH names it).
 * Without a driver or a GPU it is skipped.
 * Exit status 0 when every result matches. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tk.h"
#include "tk_cc.h"
#include "tk_cuda.h"

enum { B = 2, T = 5, H = 3, D = 8 };

/* Reads a whole file (NUL-terminated) into a malloc'd buffer. */
static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p) p[n] = 0;
    *len = (size_t)n;
    return p;
}

/* The inputs: qkv (B, T, H, D) storage, cos and sin tables (T, D). */
static float q_btHD[B * T * H * D], cos_t[T * D], sin_t[T * D];

static void make_inputs(void) {
    for (int i = 0; i < B * T * H * D; i++) q_btHD[i] = sinf(0.37f * (float)i) * 2.0f;
    for (int t = 0; t < T; t++)
        for (int d = 0; d < D; d++) {
            double inv_freq = pow(10000.0, -(double)(2 * (d % (D / 2))) / D);
            cos_t[t * D + d] = (float)cos(t * inv_freq);
            sin_t[t * D + d] = (float)sin(t * inv_freq);
        }
}

/* q[b, h, t, d] of the (B, H, T, D) view of the (B, T, H, D) buffer. */
static float q_at(int b, int h, int t, int d) { return q_btHD[((b * T + t) * H + h) * D + d]; }

/* The reference: q * cos + rotate_half(q) * sin, into out (B, H, T, D) contiguous. */
static void rotary_reference(float *out) {
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++)
                for (int d = 0; d < D; d++) {
                    float r = d < D / 2 ? -q_at(b, h, t, d + D / 2) : q_at(b, h, t, d - D / 2);
                    out[((b * H + h) * T + t) * D + d] = q_at(b, h, t, d) * cos_t[t * D + d] + r * sin_t[t * D + d];
                }
}

/* Binds (q view, cos, sin) placed at the given data pointers on `device`. */
static int bind(const tk_op *op, void *q, void *cs, void *sn, void *out, tk_device device, tk_call *call) {
    int64_t qsz[4] = {B, H, T, D}, qst[4] = {T * H * D, D, H * D, 1};   /* the transposed view */
    int64_t tsz[2] = {T, D}, tst[2] = {D, 1};
    int64_t ost[4] = {H * T * D, T * D, D, 1};
    tk_tensor_view views[4] = {tk_view(q, TK_F32, 4, qsz, qst), tk_view(cs, TK_F32, 2, tsz, tst),
                               tk_view(sn, TK_F32, 2, tsz, tst), tk_view(out, TK_F32, 4, qsz, ost)};
    for (int i = 0; i < 4; i++) views[i].device = device;
    tk_arg args[3] = {tk_arg_tensor(views[0]), tk_arg_tensor(views[1]), tk_arg_tensor(views[2])};
    if (tk_bind(op, args, 3, call) != TK_OK || tk_set_output(call, 0, views[3]) != TK_OK) {
        fprintf(stderr, "%s\n", call->msg);
        return 0;
    }
    return 1;
}

static int compare(const char *what, const float *got, const float *want, int n) {
    double worst = 0;
    for (int i = 0; i < n; i++) worst = fmax(worst, fabs((double)got[i] - (double)want[i]));
    printf("%-5s max |tk - reference| = %.3g over %d elements\n", what, worst, n);
    return worst <= 1e-5;
}

/* ---- CUDA: device memory through the driver, opened at run time ---------- */

typedef unsigned long long cu_ptr;
typedef struct cuda_driver {
    int (*init)(unsigned);
    int (*device_count)(int *);
    int (*device_get)(int *, int);
    int (*ctx_retain)(void **, int);
    int (*ctx_push)(void *);
    int (*ctx_pop)(void **);
    int (*mem_alloc)(cu_ptr *, size_t);
    int (*mem_free)(cu_ptr);
    int (*htod)(cu_ptr, const void *, size_t);
    int (*dtoh)(void *, cu_ptr, size_t);
    int (*sync)(void);
} cuda_driver;

/* Opens libcuda.so.1; 0 when there is no driver or no device. */
static int open_driver(cuda_driver *cu) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return 0;
#define LOAD(field, name) \
    if (!(*(void **)&cu->field = dlsym(lib, name))) return 0
    LOAD(init, "cuInit");
    LOAD(device_count, "cuDeviceGetCount");
    LOAD(device_get, "cuDeviceGet");
    LOAD(ctx_retain, "cuDevicePrimaryCtxRetain");
    LOAD(ctx_push, "cuCtxPushCurrent_v2");
    LOAD(ctx_pop, "cuCtxPopCurrent_v2");
    LOAD(mem_alloc, "cuMemAlloc_v2");
    LOAD(mem_free, "cuMemFree_v2");
    LOAD(htod, "cuMemcpyHtoD_v2");
    LOAD(dtoh, "cuMemcpyDtoH_v2");
    LOAD(sync, "cuCtxSynchronize");
#undef LOAD
    int n = 0;
    return cu->init(0) == 0 && cu->device_count(&n) == 0 && n > 0;
}

static int run_cuda(tk_ctx *ctx, const tk_op *op, const float *want, char **nvrtc_dirs, int ndirs) {
    cuda_driver cu;
    if (!open_driver(&cu)) {
        printf("cuda  skipped: no NVIDIA driver or no GPU\n");
        return 1;
    }
    int dev;
    void *pctx, *prev;
    cu_ptr q, cs, sn, out;
    static float got[B * H * T * D];
    int ok = cu.device_get(&dev, 0) == 0 && cu.ctx_retain(&pctx, dev) == 0 && cu.ctx_push(pctx) == 0;
    ok = ok && cu.mem_alloc(&q, sizeof q_btHD) == 0 && cu.mem_alloc(&cs, sizeof cos_t) == 0 &&
         cu.mem_alloc(&sn, sizeof sin_t) == 0 && cu.mem_alloc(&out, sizeof got) == 0;
    ok = ok && cu.htod(q, q_btHD, sizeof q_btHD) == 0 && cu.htod(cs, cos_t, sizeof cos_t) == 0 &&
         cu.htod(sn, sin_t, sizeof sin_t) == 0;
    if (!ok) {
        fprintf(stderr, "cuda: driver calls failed\n");
        return 0;
    }
    tk_call call;
    if (!bind(op, (void *)(uintptr_t)q, (void *)(uintptr_t)cs, (void *)(uintptr_t)sn, (void *)(uintptr_t)out,
              TK_CUDA, &call))
        return 0;
    tk_cuda_options opt = {(const char *const *)nvrtc_dirs, ndirs, NULL, NULL, -1};
    tk_cuda *gpu = tk_cuda_new(&opt);   /* NVRTC: TK_NVRTC_PATH, nvrtc_dirs, CUDA_HOME, the system path */
    char msg[16384];
    if (tk_cuda_launch(gpu, ctx, &call, NULL, msg, sizeof msg) != TK_OK) {   /* NULL: the default stream */
        fprintf(stderr, "%s\n", msg);
        return 0;
    }
    ok = cu.sync() == 0 && cu.dtoh(got, out, sizeof got) == 0;
    cu.mem_free(q), cu.mem_free(cs), cu.mem_free(sn), cu.mem_free(out);
    cu.ctx_pop(&prev);
    tk_cuda_free(gpu);
    return ok && compare("cuda", got, want, B * H * T * D);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s examples/specs/rotary.tk [NVRTC_DIR...]\n", argv[0]);
        return 2;
    }
    size_t len;
    char *text = read_file(argv[1], &len);
    if (!text) {
        fprintf(stderr, "cannot read %s\n", argv[1]);
        return 2;
    }
    /* 1. compile: parse, check, link backward ops, C compiler -> cached .so */
    tk_ctx *ctx = tk_ctx_new();
    tk_cc *cc = tk_cc_new(NULL);   /* TK_CC / CC / cc, TK_CACHE_DIR */
    char msg[16384];
    if (tk_cc_load_spec(cc, ctx, argv[1], text, len, msg, sizeof msg) != TK_OK) {
        fprintf(stderr, "%s\n", msg);   /* file:line:col: error: ... or the compiler's output */
        return 1;
    }
    const tk_op *op = tk_op_find(ctx, "rotary");
    printf("loaded tk::%s\n", tk_op_schema(op));

    /* 2. run on the CPU: bind the views, attach the output, run the index space */
    static float want[B * H * T * D], got[B * H * T * D];
    make_inputs();
    rotary_reference(want);
    tk_call call;
    if (!bind(op, q_btHD, cos_t, sin_t, got, TK_CPU, &call)) return 1;
    if (tk_run_cpu(&call, 0, call.kargs.numel) != TK_OK) {   /* or chunks from several threads */
        fprintf(stderr, "%s\n", call.msg);
        return 1;
    }
    int ok = compare("cpu", got, want, B * H * T * D);

    /* 3. the same op on CUDA: the CUDA C is emitted and compiled by NVRTC on first launch */
    ok = run_cuda(ctx, op, want, argv + 2, argc - 2) && ok;

    tk_cc_free(cc);
    tk_ctx_free(ctx);
    free(text);
    puts(ok ? "ok" : "MISMATCH");
    return ok ? 0 : 1;
}
