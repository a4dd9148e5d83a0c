/* fake_cuda.c - a stand-in for libcuda.so.1 with the driver functions tk
 * uses, so test_nvrtc can run the launcher (module table, one compile per
 * (op, variant, device) under concurrent first calls, launch shape, kernel
 * arguments) on a machine without a GPU. Two devices: cuda:0 is sm_90 with
 * 132 SMs, cuda:1 sm_80 with 108. Modules must be ELF cubins; nothing runs.
 * Occupancy: kernels named *backward_w* take 168 registers a thread, the
 * others 128, on SMs of 65,536 registers, 64 warps and 32 blocks.
 * fake_cuda_stats() returns the counters the test checks. Device memory
 * is host memory; fake_cuda_fail_check(rec) makes the next launch that
 * passes a bounds record (tk_kargs.err) find rec in it, as a kernel whose
 * check failed would leave it. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tk_kernel.h"

typedef int CUresult;
typedef int CUdevice;

typedef struct fake_cuda_stats {
    int inits, module_loads, launches, pushes, pops, retains;
    int loads_per_device[2];
    unsigned last_grid, last_block;
    void *last_stream;
    tk_kargs last_kargs;
    char last_function[128];
} fake_cuda_stats;

static fake_cuda_stats g_stats;     /* a test double: plain process state */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int g_stack[8];     /* this thread's context stack: device numbers */
static __thread int g_depth;
static __thread int g_current = -1; /* device of the current context, -1 none */

#define EXPORT __attribute__((visibility("default")))
enum { OK = 0, INVALID_VALUE = 1, INVALID_IMAGE = 200, NOT_FOUND = 500 };

EXPORT fake_cuda_stats *fake_cuda_stats_get(void);
EXPORT CUresult cuInit(unsigned flags);
EXPORT CUresult cuDriverGetVersion(int *v);
EXPORT CUresult cuDeviceGetCount(int *n);
EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal);
EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d);
EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d);
EXPORT CUresult cuDevicePrimaryCtxRetain(void **ctx, CUdevice d);
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d);
EXPORT CUresult cuCtxPushCurrent_v2(void *ctx);
EXPORT CUresult cuCtxPopCurrent_v2(void **ctx);
EXPORT CUresult cuCtxGetCurrent(void **ctx);
EXPORT void fake_cuda_set_current(int device);
EXPORT CUresult cuModuleLoadData(void **mod, const void *image);
EXPORT CUresult cuModuleGetFunction(void **fn, void *mod, const char *name);
EXPORT CUresult cuModuleUnload(void *mod);
EXPORT CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shared, void *stream, void **params, void **extra);
EXPORT CUresult cuGetErrorString(CUresult r, const char **s);
EXPORT CUresult cuGetErrorName(CUresult r, const char **s);
EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, void *f, int block, size_t shared);
EXPORT void fake_cuda_fail_check(tk_kerr rec);
EXPORT CUresult cuMemAlloc_v2(unsigned long long *p, size_t bytes);
EXPORT CUresult cuMemFree_v2(unsigned long long p);
EXPORT CUresult cuMemsetD8Async(unsigned long long p, unsigned char v, size_t n, void *stream);
EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, unsigned long long src, size_t bytes, void *stream);
EXPORT CUresult cuStreamSynchronize(void *stream);

static tk_kerr g_fail;              /* what the next launch with a bounds record writes into it */
void fake_cuda_fail_check(tk_kerr rec) {
    pthread_mutex_lock(&g_lock);
    g_fail = rec;
    pthread_mutex_unlock(&g_lock);
}

static char g_contexts[2];          /* their addresses are the two contexts */
static char g_names[64][128];       /* function handles: the names, by slot */
static int g_nnames;

fake_cuda_stats *fake_cuda_stats_get(void) { return &g_stats; }

CUresult cuInit(unsigned flags) {
    (void)flags;
    g_stats.inits++;
    return OK;
}
CUresult cuDriverGetVersion(int *v) { *v = 13000; return OK; }
CUresult cuDeviceGetCount(int *n) { *n = 2; return OK; }
CUresult cuDeviceGet(CUdevice *d, int ordinal) {
    if (ordinal < 0 || ordinal > 1) return INVALID_VALUE;
    *d = ordinal;
    return OK;
}
CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
    switch (attr) {
    case 16: *v = d == 0 ? 132 : 108; return OK;   /* SM count */
    case 75: *v = d == 0 ? 9 : 8; return OK;       /* compute capability */
    case 76: *v = 0; return OK;
    default: return INVALID_VALUE;
    }
}
CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
    strncpy(name, d == 0 ? "Fake H200" : "Fake A100", (size_t)len);
    return OK;
}
CUresult cuDevicePrimaryCtxRetain(void **ctx, CUdevice d) {
    *ctx = &g_contexts[d];
    g_stats.retains++;
    return OK;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
    (void)d;
    return OK;
}
CUresult cuCtxPushCurrent_v2(void *ctx) {
    if (g_depth == 8) return INVALID_VALUE;
    g_stack[g_depth++] = g_current;
    g_current = (int)((char *)ctx - g_contexts);
    pthread_mutex_lock(&g_lock);
    g_stats.pushes++;
    pthread_mutex_unlock(&g_lock);
    return OK;
}
CUresult cuCtxPopCurrent_v2(void **ctx) {
    if (g_depth == 0) return INVALID_VALUE;
    *ctx = g_current >= 0 ? &g_contexts[g_current] : NULL;
    g_current = g_stack[--g_depth];
    pthread_mutex_lock(&g_lock);
    g_stats.pops++;
    pthread_mutex_unlock(&g_lock);
    return OK;
}
CUresult cuCtxGetCurrent(void **ctx) {
    *ctx = g_current >= 0 ? &g_contexts[g_current] : NULL;
    return OK;
}
/* What torch's runtime does when a thread uses a device: makes its primary context current. */
void fake_cuda_set_current(int device) { g_current = device; }
CUresult cuModuleLoadData(void **mod, const void *image) {
    if (g_current < 0) return INVALID_VALUE;            /* no context pushed */
    if (memcmp(image, "\177ELF", 4) != 0) return INVALID_IMAGE;
    pthread_mutex_lock(&g_lock);
    g_stats.module_loads++;
    g_stats.loads_per_device[g_current]++;
    pthread_mutex_unlock(&g_lock);
    *mod = (void *)image;   /* any non-null handle */
    return OK;
}
CUresult cuModuleGetFunction(void **fn, void *mod, const char *name) {
    (void)mod;
    pthread_mutex_lock(&g_lock);
    int slot = g_nnames < 64 ? g_nnames++ : 63;
    strncpy(g_names[slot], name, sizeof g_names[slot] - 1);
    pthread_mutex_unlock(&g_lock);
    *fn = g_names[slot];
    return OK;
}
CUresult cuModuleUnload(void *mod) {
    (void)mod;
    return OK;
}
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *stream, void **params, void **extra) {
    if (g_current < 0 || gy != 1 || gz != 1 || by != 1 || bz != 1 || shared != 0 || extra) return INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    g_stats.launches++;
    g_stats.last_grid = gx;
    g_stats.last_block = bx;
    g_stats.last_stream = stream;
    memcpy(&g_stats.last_kargs, params[0], sizeof g_stats.last_kargs);
    strncpy(g_stats.last_function, (const char *)f, sizeof g_stats.last_function - 1);
    if (g_fail.hit && g_stats.last_kargs.err) {   /* the failing bounds check fake_cuda_fail_check set up */
        *g_stats.last_kargs.err = g_fail;
        g_fail.hit = 0;
    }
    pthread_mutex_unlock(&g_lock);
    return OK;
}
CUresult cuGetErrorString(CUresult r, const char **s) {
    *s = r == OK ? "no error" : "fake error";
    return OK;
}
CUresult cuGetErrorName(CUresult r, const char **s) {
    *s = r == OK ? "CUDA_SUCCESS" : "CUDA_ERROR_FAKE";
    return OK;
}
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, void *f, int block, size_t shared) {
    if (g_current < 0 || !blocks || block <= 0 || block % 32 || shared) return INVALID_VALUE;
    int regs = strstr((const char *)f, "backward_w") ? 168 : 128;
    int warp_regs = (regs * 32 + 255) / 256 * 256;      /* allocated a warp at a time */
    int warps = 65536 / warp_regs < 64 ? 65536 / warp_regs : 64;
    int n = warps / (block / 32);
    *blocks = n < 32 ? n : 32;
    return OK;
}

/* device memory (a kernel's bounds record): host memory here */
CUresult cuMemAlloc_v2(unsigned long long *p, size_t bytes) {
    void *m = malloc(bytes);
    if (!m) return INVALID_VALUE;
    *p = (unsigned long long)(uintptr_t)m;
    return OK;
}
CUresult cuMemFree_v2(unsigned long long p) {
    free((void *)(uintptr_t)p);
    return OK;
}
CUresult cuMemsetD8Async(unsigned long long p, unsigned char v, size_t n, void *stream) {
    (void)stream;
    memset((void *)(uintptr_t)p, v, n);
    return OK;
}
CUresult cuMemcpyDtoHAsync_v2(void *dst, unsigned long long src, size_t bytes, void *stream) {
    (void)stream;
    memcpy(dst, (const void *)(uintptr_t)src, bytes);
    return OK;
}
CUresult cuStreamSynchronize(void *stream) {
    (void)stream;
    return OK;
}
