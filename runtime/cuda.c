/* cuda.c - the CUDA launcher: the driver API opened at run time (dlopen of
 * libcuda.so.1), one loaded module per (op, variant, device), launches on
 * the caller's stream. Compiling goes through nvrtc.c and cache.c.
 *
 * A module is loaded, and a kernel launched, with the device's primary
 * context current: pushed for the duration unless it already is current.
 *
 * Why the driver API and not the runtime's cudaLibraryLoadData: it needs
 * no particular libcudart soname (torch ships one, the system another), it
 * names the context a module lives in (the device's primary context, the
 * one torch's runtime uses), and its few functions are stable since CUDA 4.
 * The driver's types are declared here, so no CUDA header is needed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tk_cuda.h"
#include "msg.h"

typedef int CUresult;               /* CUDA_SUCCESS == 0 */
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef unsigned long long CUdeviceptr;

enum {  /* CUdevice_attribute values (cuda.h) */
    ATTR_SM_COUNT = 16,
    ATTR_CC_MAJOR = 75,
    ATTR_CC_MINOR = 76,
};

/* The driver functions tk uses; ORDER DRIVER_FN: k_driver_names follows. */
typedef struct driver_api {
    CUresult (*init)(unsigned flags);
    CUresult (*driver_version)(int *v);
    CUresult (*device_count)(int *n);
    CUresult (*device_get)(CUdevice *d, int ordinal);
    CUresult (*device_attribute)(int *v, int attr, CUdevice d);
    CUresult (*device_name)(char *name, int len, CUdevice d);
    CUresult (*ctx_retain)(CUcontext *c, CUdevice d);
    CUresult (*ctx_release)(CUdevice d);
    CUresult (*ctx_push)(CUcontext c);
    CUresult (*ctx_pop)(CUcontext *c);
    CUresult (*ctx_current)(CUcontext *c);
    CUresult (*module_load)(CUmodule *m, const void *image);
    CUresult (*module_function)(CUfunction *f, CUmodule m, const char *name);
    CUresult (*module_unload)(CUmodule m);
    CUresult (*launch)(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                       unsigned bz, unsigned shared, CUstream s, void **params, void **extra);
    CUresult (*error_string)(CUresult r, const char **s);
    CUresult (*error_name)(CUresult r, const char **s);
    CUresult (*occupancy)(int *blocks, CUfunction f, int block, size_t dynamic_shared);
    /* a kernel's bounds record (tk_kerr), for kernels with bounds checks */
    CUresult (*mem_alloc)(CUdeviceptr *p, size_t bytes);
    CUresult (*mem_free)(CUdeviceptr p);
    CUresult (*memset_async)(CUdeviceptr p, unsigned char v, size_t n, CUstream s);
    CUresult (*copy_to_host_async)(void *dst, CUdeviceptr src, size_t bytes, CUstream s);
    CUresult (*stream_sync)(CUstream s);
} driver_api;

static const char *const k_driver_names[] = {   /* ORDER DRIVER_FN */
    "cuInit", "cuDriverGetVersion", "cuDeviceGetCount", "cuDeviceGet", "cuDeviceGetAttribute",
    "cuDeviceGetName", "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease_v2", "cuCtxPushCurrent_v2",
    "cuCtxPopCurrent_v2", "cuCtxGetCurrent", "cuModuleLoadData", "cuModuleGetFunction", "cuModuleUnload", "cuLaunchKernel",
    "cuGetErrorString", "cuGetErrorName", "cuOccupancyMaxActiveBlocksPerMultiprocessor",
    "cuMemAlloc_v2", "cuMemFree_v2", "cuMemsetD8Async", "cuMemcpyDtoHAsync_v2", "cuStreamSynchronize",
};
#define DRIVER_NFN (sizeof k_driver_names / sizeof k_driver_names[0])
_Static_assert(sizeof(driver_api) == DRIVER_NFN * sizeof(void *), "k_driver_names and driver_api disagree");

#define MAX_DEVICES 64

typedef struct device {
    int ready;
    CUdevice dev;
    CUcontext ctx;          /* primary context, retained */
    int sm, nsm;            /* compute capability (90), multiprocessors */
    char name[128];
} device;

enum { K_BUILDING, K_READY, K_FAILED };

/* One (op, variant, device) and its loaded module. */
typedef struct kernel {
    const tk_op *op;
    int variant, device;
    int state;
    CUmodule mod;
    CUfunction fn;
    int per_thread;         /* elements a thread computes, as planned (tk_emit_scheduled); -S: S threads an element */
    int checks;             /* its source has bounds checks (tk_ck): a launch passes a device tk_kerr */
    int parts;              /* it runs in parts (tk_emit_cuda_parts): at most that many threads; 0: not */
    unsigned copied;        /* in parts: the outputs each thread adds into its own copy of (bit i: output i) */
    int parted;             /* in parts: the threads share one iteration's parted loop */
    int resident[TK_CUDA_NBLOCKS];  /* blocks of TK_CUDA_BLOCK >> i threads an SM holds (0: unknown) */
    char error[4096];       /* K_FAILED: why */
} kernel;

struct tk_cuda {
    pthread_mutex_t lock;       /* everything below */
    pthread_cond_t built;       /* a kernel left K_BUILDING */
    pthread_mutex_t emit_lock;  /* emitting annotates the op */
    char **nvrtc_dirs;
    int n_nvrtc_dirs;
    char cache_dir[4096];       /* "" : no disk cache */
    int cache_warned;
    char driver_name[1024];
    int debug;
    /* NVRTC and the driver, opened on first need; *_error when that failed */
    int nvrtc_tried;
    tk_nvrtc *nvrtc;
    char nvrtc_error[2048];
    int driver_tried;
    void *driver;
    driver_api cu;
    char driver_error[1024];
    int driver_version, ndevices;
    device devices[MAX_DEVICES];
    kernel **kernels;
    int nkernels, cap;
};

static int env_flag(const char *name) {
    const char *v = getenv(name);
    return v && v[0] && strcmp(v, "0") != 0;
}

/* ---- state ---------------------------------------------------------------- */

static CUresult enter(tk_cuda *cu, const device *d, int *pushed);
static void leave(tk_cuda *cu, int pushed);

tk_cuda *tk_cuda_new(const tk_cuda_options *opt) {
    tk_cuda *cu = calloc(1, sizeof *cu);
    if (!cu) return NULL;
    pthread_mutex_init(&cu->lock, NULL);
    pthread_mutex_init(&cu->emit_lock, NULL);
    pthread_cond_init(&cu->built, NULL);
    int n = opt && opt->nvrtc_dirs ? opt->n_nvrtc_dirs : 0;
    cu->nvrtc_dirs = n > 0 ? calloc((size_t)n, sizeof *cu->nvrtc_dirs) : NULL;
    for (int i = 0; i < n && cu->nvrtc_dirs; i++) {
        cu->nvrtc_dirs[i] = strdup(opt->nvrtc_dirs[i] ? opt->nvrtc_dirs[i] : "");
        if (cu->nvrtc_dirs[i]) cu->n_nvrtc_dirs = i + 1;
        else break;
    }
    if (opt && opt->cache_dir) snprintf(cu->cache_dir, sizeof cu->cache_dir, "%s", opt->cache_dir);
    else tk_cache_default_dir(cu->cache_dir, sizeof cu->cache_dir);
    snprintf(cu->driver_name, sizeof cu->driver_name, "%s", opt && opt->driver ? opt->driver : "libcuda.so.1");
    cu->debug = opt && opt->debug >= 0 ? opt->debug : env_flag("TK_DEBUG");
    return cu;
}

/* Unloads one kernel's module inside its device's context. */
static void unload(tk_cuda *cu, kernel *k) {
    int pushed;
    if (!k->mod || enter(cu, &cu->devices[k->device], &pushed) != 0) return;
    cu->cu.module_unload(k->mod);
    leave(cu, pushed);
}

void tk_cuda_free(tk_cuda *cu) {
    if (!cu) return;
    for (int i = 0; i < cu->nkernels; i++) {
        if (cu->driver) unload(cu, cu->kernels[i]);
        free(cu->kernels[i]);
    }
    free(cu->kernels);
    for (int d = 0; d < MAX_DEVICES && cu->driver; d++)
        if (cu->devices[d].ready) cu->cu.ctx_release(cu->devices[d].dev);
    if (cu->driver) dlclose(cu->driver);
    tk_nvrtc_close(cu->nvrtc);
    for (int i = 0; i < cu->n_nvrtc_dirs; i++) free(cu->nvrtc_dirs[i]);
    free(cu->nvrtc_dirs);
    pthread_cond_destroy(&cu->built);
    pthread_mutex_destroy(&cu->emit_lock);
    pthread_mutex_destroy(&cu->lock);
    free(cu);
}

const char *tk_cuda_cache_dir(const tk_cuda *cu) { return cu->cache_dir; }

unsigned tk_cuda_block_size(int64_t n, int nsm) {
    int64_t want = 4 * (int64_t)(nsm > 0 ? nsm : 1);
    unsigned block = TK_CUDA_BLOCK;
    while (block > TK_CUDA_BLOCK_MIN && n > 0 && (n + block - 1) / block < want) block /= 2;
    return block;
}

unsigned tk_cuda_block_size_occ(int64_t n, int nsm, const int *resident) {
    unsigned base = tk_cuda_block_size(n, nsm), best = base;
    long most = 0;
    for (int i = 0; resident && i < TK_CUDA_NBLOCKS; i++) {
        unsigned b = TK_CUDA_BLOCK >> i;
        long threads = resident[i] > 0 ? (long)resident[i] * b : 0;
        if (b <= base && threads > most) most = threads, best = b;
    }
    return best;
}

unsigned tk_cuda_grid_size(int64_t n, unsigned block, int nsm) {
    if (n <= 0 || block == 0) return 0;
    int64_t blocks = (n + block - 1) / block;
    int64_t cap = 32 * (int64_t)(nsm > 0 ? nsm : 1);
    return (unsigned)(blocks < cap ? blocks : cap);
}

/* ---- the driver ------------------------------------------------------------- */

/* "CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected" */
static const char *cu_error(tk_cuda *cu, CUresult r, char *buf, size_t n) {
    const char *name = NULL, *text = NULL;
    if (cu->cu.error_name) cu->cu.error_name(r, &name);
    if (cu->cu.error_string) cu->cu.error_string(r, &text);
    snprintf(buf, n, "%s: %s", name ? name : "CUDA error", text ? text : "?");
    return buf;
}

/* Makes d's primary context current unless it already is (torch usually
 * made it current on this thread); *pushed says whether leave() must pop. */
static CUresult enter(tk_cuda *cu, const device *d, int *pushed) {
    CUcontext cur = NULL;
    *pushed = 0;
    if (cu->cu.ctx_current(&cur) == 0 && cur == d->ctx) return 0;
    CUresult r = cu->cu.ctx_push(d->ctx);
    *pushed = r == 0;
    return r;
}

static void leave(tk_cuda *cu, int pushed) {
    CUcontext prev;
    if (pushed) cu->cu.ctx_pop(&prev);
}

/* Opens the driver and runs cuInit once; caller holds cu->lock. */
static int ensure_driver(tk_cuda *cu) {
    if (cu->driver_tried) return cu->driver != NULL;
    cu->driver_tried = 1;
    void *lib = dlopen(cu->driver_name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        tk_put(cu->driver_error, sizeof cu->driver_error,
            "%s not found: the NVIDIA driver is not installed or not visible to this process (%s)", cu->driver_name,
            why ? why : "dlopen failed");
        return 0;
    }
    for (size_t i = 0; i < DRIVER_NFN; i++) {
        void *fn = dlsym(lib, k_driver_names[i]);
        if (!fn) {
            tk_put(cu->driver_error, sizeof cu->driver_error, "%s has no %s: driver too old (CUDA 11 or newer needed)",
                cu->driver_name, k_driver_names[i]);
            dlclose(lib);
            memset(&cu->cu, 0, sizeof cu->cu);
            return 0;
        }
        memcpy((char *)&cu->cu + i * sizeof fn, &fn, sizeof fn);
    }
    char err[256];
    CUresult r = cu->cu.init(0);
    if (r == 0) r = cu->cu.device_count(&cu->ndevices);
    if (r != 0) {
        tk_put(cu->driver_error, sizeof cu->driver_error, "cuInit failed: %s", cu_error(cu, r, err, sizeof err));
        dlclose(lib);
        memset(&cu->cu, 0, sizeof cu->cu);
        return 0;
    }
    cu->cu.driver_version(&cu->driver_version);
    if (cu->ndevices > MAX_DEVICES) cu->ndevices = MAX_DEVICES;
    cu->driver = lib;
    return 1;
}

/* Retains device ordinal's primary context and reads its properties;
 * caller holds cu->lock. */
static int ensure_device(tk_cuda *cu, int ordinal, char *why, size_t n) {
    if (ordinal < 0 || ordinal >= cu->ndevices) {
        tk_put(why, n, "no such device (the driver sees %d)", cu->ndevices);
        return 0;
    }
    device *d = &cu->devices[ordinal];
    if (d->ready) return 1;
    char err[256];
    CUresult r = cu->cu.device_get(&d->dev, ordinal);
    if (r == 0) r = cu->cu.device_attribute(&d->sm, ATTR_CC_MAJOR, d->dev);
    int minor = 0;
    if (r == 0) r = cu->cu.device_attribute(&minor, ATTR_CC_MINOR, d->dev);
    if (r == 0) r = cu->cu.device_attribute(&d->nsm, ATTR_SM_COUNT, d->dev);
    if (r == 0 && cu->cu.device_name(d->name, (int)sizeof d->name, d->dev) != 0) d->name[0] = 0;
    if (r == 0) r = cu->cu.ctx_retain(&d->ctx, d->dev);
    if (r != 0) {
        tk_put(why, n, "cannot use the device: %s", cu_error(cu, r, err, sizeof err));
        return 0;
    }
    d->sm = d->sm * 10 + minor;
    d->ready = 1;
    return 1;
}

/* Opens NVRTC once (takes cu->lock). */
static int ensure_nvrtc(tk_cuda *cu) {
    pthread_mutex_lock(&cu->lock);
    if (!cu->nvrtc_tried) {
        cu->nvrtc_tried = 1;
        tk_nvrtc_open((const char *const *)cu->nvrtc_dirs, cu->n_nvrtc_dirs, &cu->nvrtc, cu->nvrtc_error,
                      sizeof cu->nvrtc_error);
    }
    int ok = cu->nvrtc != NULL;
    pthread_mutex_unlock(&cu->lock);
    return ok;
}

/* ---- compiling ------------------------------------------------------------- */

/* The CUDA C of one variant (malloc'd), planned with the schedule of
 * TK_CUDA_TUNE and emitted under emit_lock, and the elements of the index
 * space a thread computes (*per_thread, as planned: the grid's size). */
static char *emit(tk_cuda *cu, tk_ctx *ctx, const tk_op *op, int variant, int *per_thread, int *checks, kernel *k,
                  char *why, size_t n) {
    char *src = NULL;
    pthread_mutex_lock(&cu->emit_lock);
    tk_schedule sched;
    char bad[512];
    if (tk_schedule_from_env(&sched, bad, sizeof bad) != TK_OK) {
        tk_put(why, n, "generating CUDA C failed: %s", bad);
    } else if (tk_emit_scheduled(ctx, op, variant, variant + 1, TK_TARGET_CUDA, 0, &sched, &src, per_thread) !=
               TK_OK) {
        tk_put(why, n, "generating CUDA C failed: %s", tk_ctx_error(ctx));
        src = NULL;
    } else if (k) {   /* (the plan of the source just printed) */
        k->parts = tk_emit_cuda_parts(ctx, op, variant, &sched, &k->copied, &k->parted);
    }
    pthread_mutex_unlock(&cu->emit_lock);
    /* checked kernels and a row loop's unproven stores (the plan's decision,
     * docs/spec.md: Bounds) print calls of tk_ck: the launch needs a record */
    if (src && checks) *checks = strstr(src, "tk_ck(") != NULL;
    return src;
}

/* Stores bin in the disk cache; the first failure is reported once and
 * turns the disk cache off for this process (the op still runs). */
static void store(tk_cuda *cu, const unsigned char *key, const char *label, const tk_binary *bin) {
    char why[1024];
    if (!cu->cache_dir[0] || cu->cache_warned) return;
    if (tk_cache_store(cu->cache_dir, key, tk_nvrtc_version(cu->nvrtc), label, bin, why, sizeof why) == TK_OK) {
        if (cu->debug) fprintf(stderr, "tk: cached %s in %s\n", label, cu->cache_dir);
        return;
    }
    pthread_mutex_lock(&cu->lock);
    int first = !cu->cache_warned;
    cu->cache_warned = 1;
    pthread_mutex_unlock(&cu->lock);
    if (first) fprintf(stderr, "tk: warning: kernel disk cache off for this process: %s (set TK_CACHE_DIR)\n", why);
}

/* The binary of (op, variant) for a device of compute capability sm: from
 * the disk cache, else compiled by NVRTC (and stored). */
static tk_status get_binary(tk_cuda *cu, tk_ctx *ctx, const tk_op *op, int variant, int sm, tk_binary *out,
                            int *cached, int *per_thread, int *checks, kernel *k, char *why, size_t n) {
    *cached = 0;
    if (!ensure_nvrtc(cu)) {
        tk_put(why, n, "%s", cu->nvrtc_error);
        return TK_ERR_NOTFOUND;
    }
    tk_arch arch;
    tk_status st = tk_nvrtc_arch_for(cu->nvrtc, sm, &arch, why, n);
    if (st != TK_OK) return st;
    char *src = emit(cu, ctx, op, variant, per_thread, checks, k, why, n);
    if (!src) return TK_ERR_INVALID;
    char buf[32], label[TK_CACHE_LABEL + 1], reject[1024] = "";
    const char *opts[TK_NVRTC_MAX_OPTIONS];
    int nopts = tk_nvrtc_options(arch, buf, opts);
    unsigned char key[TK_CACHE_KEY_SIZE];
    tk_cache_key(src, tk_nvrtc_version(cu->nvrtc), arch, opts, nopts, key);
    snprintf(label, sizeof label, "%s %s_%d", tk_op_kernel_name(op, variant), arch.ptx ? "compute" : "sm", arch.sm);
    if (cu->cache_dir[0] &&
        tk_cache_load(cu->cache_dir, key, tk_nvrtc_version(cu->nvrtc), out, reject, sizeof reject) == TK_OK) {
        if (cu->debug) fprintf(stderr, "tk: %s: from the disk cache %s\n", label, cu->cache_dir);
        *cached = 1;
        free(src);
        return TK_OK;
    }
    if (cu->debug) {
        if (reject[0]) fprintf(stderr, "tk: %s\n", reject);
        fprintf(stderr, "tk: compiling %s with NVRTC %d.%d (%s), options:", label, tk_nvrtc_version(cu->nvrtc) / 1000,
                tk_nvrtc_version(cu->nvrtc) % 1000 / 10, tk_nvrtc_path(cu->nvrtc));
        for (int i = 0; i < nopts; i++) fprintf(stderr, " %s", opts[i]);
        fprintf(stderr, "\n---- %s.cu ----\n%s---- end of %s.cu ----\n", tk_op_kernel_name(op, variant), src,
                tk_op_kernel_name(op, variant));
    }
    char name[160];
    snprintf(name, sizeof name, "%s.cu", tk_op_kernel_name(op, variant));
    st = tk_nvrtc_compile(cu->nvrtc, src, name, arch, out, why, n);
    free(src);
    if (st == TK_OK) store(cu, key, label, out);
    return st;
}

tk_status tk_cuda_precompile(tk_cuda *cu, tk_ctx *ctx, const tk_op *op, int variant, int sm, int *cached,
                             char *msg, size_t msglen) {
    int dummy;
    if (!cached) cached = &dummy;
    if (!cu || !ctx || !op || variant < 0 || variant >= tk_op_nvariants(op)) return TK_ERR_INVALID;
    char why[4096];
    tk_binary bin;
    tk_status st = get_binary(cu, ctx, op, variant, sm, &bin, cached, NULL, NULL, NULL, why, sizeof why);
    if (st != TK_OK) {
        tk_put(msg, msglen, "tk.%s: cannot compile for sm_%d: %s", tk_op_name(op), sm, why);
        return st;
    }
    tk_binary_free(&bin);
    if (!cu->cache_dir[0] || cu->cache_warned) {
        tk_put(msg, msglen, "tk.%s: compiled for sm_%d, but the disk cache is off", tk_op_name(op), sm);
        return TK_ERR_INVALID;
    }
    return TK_OK;
}

/* ---- kernels ---------------------------------------------------------------- */

/* Compiles and loads k (state K_BUILDING) into its device's context;
 * called without cu->lock. */
static tk_status build(tk_cuda *cu, tk_ctx *ctx, kernel *k, char *why, size_t n) {
    device *d = &cu->devices[k->device];
    tk_binary bin;
    int cached;
    tk_status st = get_binary(cu, ctx, k->op, k->variant, d->sm, &bin, &cached, &k->per_thread, &k->checks, k, why, n);
    if (st != TK_OK) return st;
    if (k->per_thread == 0) k->per_thread = 1;   /* (negative: -S threads an element, cooperative rows) */
    char err[256];
    int pushed;
    CUresult r = enter(cu, d, &pushed);
    if (r == 0) {
        r = cu->cu.module_load(&k->mod, bin.data);
        if (r == 0) r = cu->cu.module_function(&k->fn, k->mod, tk_op_kernel_name(k->op, k->variant));
        /* how many blocks of each size fit an SM with this kernel's registers
         * (tk_cuda_block_size_occ); a failed query leaves the size unknown */
        for (int i = 0; r == 0 && i < TK_CUDA_NBLOCKS; i++)
            if (cu->cu.occupancy(&k->resident[i], k->fn, (int)(TK_CUDA_BLOCK >> i), 0) != 0) k->resident[i] = 0;
        leave(cu, pushed);
    }
    tk_binary_free(&bin);
    if (r == 0 && cu->debug)
        fprintf(stderr, "tk: %s on cuda:%d: %d elements a thread; an SM holds %d/%d/%d blocks of 256/128/64\n",
                tk_op_kernel_name(k->op, k->variant), k->device, k->per_thread, k->resident[0], k->resident[1],
                k->resident[2]);
    if (r != 0) {
        tk_put(why, n, "loading %s for sm_%d failed: %s", tk_op_kernel_name(k->op, k->variant), d->sm,
            cu_error(cu, r, err, sizeof err));
        return TK_ERR_INVALID;
    }
    return TK_OK;
}

/* The table entry for (op, variant, device), created K_BUILDING if new;
 * caller holds cu->lock. NULL when out of memory. */
static kernel *find_or_add(tk_cuda *cu, const tk_op *op, int variant, int dev, int *added) {
    *added = 0;
    for (int i = 0; i < cu->nkernels; i++) {
        kernel *k = cu->kernels[i];
        if (k->op == op && k->variant == variant && k->device == dev) return k;
    }
    if (cu->nkernels == cu->cap) {
        int cap = cu->cap ? 2 * cu->cap : 32;
        kernel **p = realloc(cu->kernels, sizeof *p * (size_t)cap);
        if (!p) return NULL;
        cu->kernels = p;
        cu->cap = cap;
    }
    kernel *k = calloc(1, sizeof *k);
    if (!k) return NULL;
    k->op = op;
    k->variant = variant;
    k->device = dev;
    k->state = K_BUILDING;
    cu->kernels[cu->nkernels++] = k;
    *added = 1;
    return k;
}

/* The loaded kernel of the call's variant on device dev: built by this
 * thread if new (or failed before), else waited for. Caller holds cu->lock;
 * it is released while building. */
static kernel *get_kernel(tk_cuda *cu, tk_ctx *ctx, const tk_call *call, int dev, char *why, size_t n) {
    int added;
    kernel *k = find_or_add(cu, call->op, call->variant, dev, &added);
    if (!k) {
        tk_put(why, n, "out of memory");
        return NULL;
    }
    if (!added && k->state == K_BUILDING) {
        while (k->state == K_BUILDING) pthread_cond_wait(&cu->built, &cu->lock);
        if (k->state == K_READY) return k;
        tk_put(why, n, "%s", k->error);    /* the build this thread waited for failed */
        return NULL;
    }
    if (k->state == K_READY) return k;
    k->state = K_BUILDING;              /* new, or an earlier build failed: try (again) */
    pthread_mutex_unlock(&cu->lock);
    tk_status st = build(cu, ctx, k, why, n);
    pthread_mutex_lock(&cu->lock);
    k->state = st == TK_OK ? K_READY : K_FAILED;
    if (st != TK_OK) tk_put(k->error, sizeof k->error, "%s", why);
    pthread_cond_broadcast(&cu->built);
    return st == TK_OK ? k : NULL;
}

/* The call's loaded kernel on its device (compiled on first use), with
 * *d its device; NULL with msg set when it cannot run. */
static kernel *ready_kernel(tk_cuda *cu, tk_ctx *ctx, const tk_call *call, const device **d, char *msg,
                            size_t msglen) {
    char why[4096] = "";
    const int dev = call->device_index;
    pthread_mutex_lock(&cu->lock);
    kernel *k = NULL;
    if (!ensure_driver(cu)) tk_put(why, sizeof why, "%s", cu->driver_error);
    else if (ensure_device(cu, dev, why, sizeof why)) k = get_kernel(cu, ctx, call, dev, why, sizeof why);
    *d = &cu->devices[dev < 0 || dev >= MAX_DEVICES ? 0 : dev];
    pthread_mutex_unlock(&cu->lock);
    if (!k) tk_put(msg, msglen, "tk.%s: cannot run on cuda:%d: %s", tk_op_name(call->op), dev, why);
    return k;
}

tk_status tk_cuda_parts(tk_cuda *cu, tk_ctx *ctx, const tk_call *call, int *parts, unsigned *copied, int *parted,
                        char *msg, size_t msglen) {
    if (!cu || !ctx || !call || !call->op || call->device != TK_CUDA || !parts || !copied || !parted) {
        tk_put(msg, msglen, "tk_cuda_parts: not a bound call on a CUDA device");
        return TK_ERR_INVALID;
    }
    *parts = 0;
    *copied = 0;
    *parted = 0;
    const device *d;
    kernel *k = ready_kernel(cu, ctx, call, &d, msg, msglen);
    if (!k) return TK_ERR_NOTFOUND;
    *parts = k->parts;
    *copied = k->copied;
    *parted = k->parted;
    return TK_OK;
}

/* A zeroed bounds record in device memory for one launch, ordered on stream. */
static CUresult bounds_record(tk_cuda *cu, CUdeviceptr *p, CUstream stream) {
    CUresult r = cu->cu.mem_alloc(p, sizeof(tk_kerr));
    if (r != 0) {
        *p = 0;
        return r;
    }
    r = cu->cu.memset_async(*p, 0, sizeof(tk_kerr), stream);
    if (r != 0) {
        cu->cu.mem_free(*p);
        *p = 0;
    }
    return r;
}

tk_status tk_cuda_launch(tk_cuda *cu, tk_ctx *ctx, const tk_call *call, void *stream, char *msg,
                         size_t msglen) {
    if (!cu || !ctx || !call || !call->op || call->device != TK_CUDA) {
        tk_put(msg, msglen, "tk_cuda_launch: not a bound call on a CUDA device");
        return TK_ERR_INVALID;
    }
    if (call->kargs.numel <= 0) return TK_OK;
    int unfilled = tk_call_unfilled(call);
    if (unfilled >= 0) {
        tk_put(msg, msglen, "tk.%s: argument '%s' is None, and the memory of its default is not attached (tk_set_fill)",
               tk_op_name(call->op), tk_op_param_name(call->op, unfilled));
        return TK_ERR_INVALID;
    }
    const device *d;
    kernel *k = ready_kernel(cu, ctx, call, &d, msg, msglen);
    if (!k) return TK_ERR_NOTFOUND;
    if (call->kargs.numel > 1 && tk_op_has_sum(call->op) && !k->parts) {   /* its threads would add into one element */
        tk_put(msg, msglen, "tk.%s: a sum ('+=') over %lld iterations: on CUDA an op with a sum runs only when its "
               "loop has one iteration, or in parts (schedule parts=N, or TK_CUDA_TUNE=parts=N; not yet run on a GPU: "
               "docs/gpu.md, Parts)", tk_op_name(call->op), (long long)call->kargs.numel);
        return TK_ERR_INVALID;
    }
    tk_kargs kargs = call->kargs;       /* the kernel's single parameter, by value */
    void *params[] = {&kargs};
    char err[256];
    int pushed;
    tk_kerr rec = {0};
    CUresult r = enter(cu, d, &pushed);
    if (r == 0) {
        CUdeviceptr drec = 0;
        if (k->checks) r = bounds_record(cu, &drec, (CUstream)stream);
        kargs.err = (tk_kerr *)(uintptr_t)drec;
        /* one thread per chunk or tile (fewer when rows are shorter than one), S an element (coop); in
         * parts, nparts threads */
        int64_t items = k->parts           ? (kargs.nparts > 1 ? kargs.nparts : 1)
                        : k->per_thread < 0 ? kargs.numel * -k->per_thread
                                            : kargs.numel / k->per_thread + (kargs.numel % k->per_thread != 0);
        unsigned block = tk_cuda_block_size_occ(items, d->nsm, k->resident);
        /* (grid-stride kernels take a grid capped at 32 blocks an SM; a thread of a kernel in parts runs its
         * part alone, so its grid covers every part) */
        int64_t grid = k->parts ? (items + block - 1) / block : (int64_t)tk_cuda_grid_size(items, block, d->nsm);
        if (grid > 0x7fffffff) {
            tk_put(msg, msglen, "tk.%s: %lld parts is too many for one launch", tk_op_name(call->op),
                   (long long)kargs.nparts);
            if (drec) cu->cu.mem_free(drec);
            leave(cu, pushed);
            return TK_ERR_INVALID;
        }
        if (r == 0)
            r = cu->cu.launch(k->fn, (unsigned)grid, 1, 1, block, 1, 1, 0, (CUstream)stream, params, NULL);
        if (r == 0 && drec) r = cu->cu.copy_to_host_async(&rec, drec, sizeof rec, (CUstream)stream);
        if (r == 0 && drec) r = cu->cu.stream_sync((CUstream)stream);   /* checked launches wait for the kernel */
        if (drec) cu->cu.mem_free(drec);
        leave(cu, pushed);
    }
    if (r != 0) {
        tk_put(msg, msglen, "tk.%s: launching %s on cuda:%d failed: %s", tk_op_name(call->op),
            tk_op_kernel_name(call->op, call->variant), call->device_index, cu_error(cu, r, err, sizeof err));
        return TK_ERR_INVALID;
    }
    if (rec.hit) {   /* a bounds check failed: the message names the access */
        tk_call *copy = malloc(sizeof *copy);
        if (!copy) {
            tk_put(msg, msglen, "tk.%s: an index was out of range (out of memory for the message)", tk_op_name(call->op));
            return TK_ERR_BOUNDS;
        }
        *copy = *call;
        tk_status st = tk_call_bounds_error(copy, &rec);
        tk_put(msg, msglen, "%s", copy->msg);
        free(copy);
        return st;
    }
    return TK_OK;
}

/* ---- describe ------------------------------------------------------------- */

typedef struct describe_buf {
    char *out;
    size_t n;
    uint64_t bytes;
} describe_buf;

static void add(describe_buf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void add(describe_buf *b, const char *fmt, ...) {
    size_t len = strlen(b->out);
    if (len + 1 >= b->n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->out + len, b->n - len, fmt, ap);
    va_end(ap);
}

static void describe_entry(const tk_cache_entry *e, void *user) {
    describe_buf *b = user;
    b->bytes += e->size;
    add(b, "  %-40s %-5s %8.1f kB  NVRTC %d.%d%s\n", e->label, e->is_ptx ? "ptx" : "cubin", (double)e->size / 1e3,
        e->nvrtc_version / 1000, e->nvrtc_version % 1000 / 10, e->valid ? "" : "  (damaged)");
}

void tk_cuda_describe(tk_cuda *cu, char *out, size_t n) {
    if (!out || n == 0) return;
    out[0] = 0;
    describe_buf b = {out, n, 0};
    add(&b, "tk %s\n", TK_VERSION);
    if (ensure_nvrtc(cu)) {
        int v = tk_nvrtc_version(cu->nvrtc);
        add(&b, "nvrtc: %s (NVRTC %d.%d)\n", tk_nvrtc_path(cu->nvrtc), v / 1000, v % 1000 / 10);
    } else {
        add(&b, "nvrtc: not available: %s\n", cu->nvrtc_error);
    }
    pthread_mutex_lock(&cu->lock);
    if (ensure_driver(cu)) {
        add(&b, "driver: %s (CUDA %d.%d), %d device(s)\n", cu->driver_name, cu->driver_version / 1000,
            cu->driver_version % 1000 / 10, cu->ndevices);
        for (int i = 0; i < cu->ndevices; i++) {
            char why[512];
            if (ensure_device(cu, i, why, sizeof why))
                add(&b, "  cuda:%d: %s, sm_%d, %d SMs\n", i, cu->devices[i].name, cu->devices[i].sm, cu->devices[i].nsm);
            else
                add(&b, "  cuda:%d: %s\n", i, why);
        }
    } else {
        add(&b, "driver: not available: %s\n", cu->driver_error);
    }
    pthread_mutex_unlock(&cu->lock);
    if (!cu->cache_dir[0]) {
        add(&b, "cache: off (set TK_CACHE_DIR, XDG_CACHE_HOME or HOME)\n");
        return;
    }
    add(&b, "cache: %s\n", cu->cache_dir);
    int count = tk_cache_list(cu->cache_dir, describe_entry, &b);
    if (count < 0) add(&b, "cached kernels: none (the folder does not exist yet)\n");
    else add(&b, "cached kernels: %d, %.1f kB\n", count, (double)b.bytes / 1e3);
}
