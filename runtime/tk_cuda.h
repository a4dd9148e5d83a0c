/* tk_cuda.h - the GPU path of tk: NVRTC (compiles generated CUDA C to a
 * cubin at load time), the on-disk kernel cache, and the CUDA driver
 * launcher. Building or loading this needs no CUDA header and no CUDA
 * library: NVRTC and the driver (libcuda.so.1) are opened with dlopen on
 * first use, and a machine without them gets an error message, not a crash.
 *
 * A worked example: what the shim does for an op called on CUDA tensors.
 *
 *     tk_cuda *cu = tk_cuda_new(NULL);            // once per process
 *     ...
 *     tk_bind(op, args, nargs, &call);            // call.device == TK_CUDA
 *     tk_set_output(&call, 0, out_view);          // device memory
 *     char msg[4096];
 *     if (tk_cuda_launch(cu, ctx, &call, stream, msg, sizeof msg) != TK_OK)
 *         fprintf(stderr, "%s\n", msg);   // "tk.brick_pad: cannot run on cuda:0: ..."
 *     ...
 *     tk_cuda_free(cu);
 *
 * The first launch of (op, variant) on a device emits the variant's CUDA C,
 * finds its cubin in the disk cache or compiles it with NVRTC for the
 * device's arch, and loads it into the device's primary context (the one
 * torch uses). Later launches find the loaded kernel in memory.
 *
 * Environment: TK_NVRTC_PATH (NVRTC library file or folder), TK_CACHE_DIR
 * (default $XDG_CACHE_HOME/tk or ~/.cache/tk), TK_DEBUG=1 (print the
 * generated source and the NVRTC options on every compile). docs/gpu.md
 * says more. */
#ifndef TK_CUDA_H
#define TK_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "tk.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- NVRTC (nvrtc.c) ------------------------------------------------------ */

typedef struct tk_nvrtc tk_nvrtc;

/* A compiled kernel: a cubin (SASS for one arch) or PTX text. */
typedef struct tk_binary {
    void *data;         /* malloc'd; PTX text is NUL-terminated */
    size_t size;        /* bytes of data (PTX: with its NUL) */
    int is_ptx;
} tk_binary;

void tk_binary_free(tk_binary *b);

/* What to compile for: SASS for sm_<arch>, or PTX for compute_<arch>. */
typedef struct tk_arch {
    int sm;             /* major * 10 + minor: 80, 86, 90, 100 */
    int ptx;
} tk_arch;

/* Opens NVRTC. When $TK_NVRTC_PATH is set, only it is tried (a library
 * file, or a folder holding libnvrtc.so*). Otherwise: libnvrtc.so.13,
 * libnvrtc.so.12 and libnvrtc.so in each of dirs, in $CUDA_HOME/lib64 and
 * /usr/local/cuda/lib64, then by name on the system's search path. On
 * failure msg says what was searched and how to get NVRTC. */
tk_status tk_nvrtc_open(const char *const *dirs, int ndirs, tk_nvrtc **out, char *msg, size_t msglen);
void tk_nvrtc_close(tk_nvrtc *nv);            /* frees nv; the library stays loaded */

const char *tk_nvrtc_path(const tk_nvrtc *nv);  /* the file opened, as found */
int tk_nvrtc_version(const tk_nvrtc *nv);      /* 1000 * major + 10 * minor: 13050 */

/* The target for a device of compute capability sm: SASS for sm itself when
 * this NVRTC knows it, else PTX for the newest arch below it (the driver
 * compiles the PTX). TK_ERR_NOTFOUND when NVRTC supports nothing <= sm. */
tk_status tk_nvrtc_arch_for(const tk_nvrtc *nv, int sm, tk_arch *out, char *msg, size_t msglen);

#define TK_NVRTC_MAX_OPTIONS 8
/* The options of a compile for arch: "--std=c++17", "-default-device",
 * "-arch=sm_90"... Fills opts (pointers into opts or to static strings,
 * valid while buf lives) and returns their number. */
int tk_nvrtc_options(tk_arch arch, char buf[32], const char *opts[TK_NVRTC_MAX_OPTIONS]);

/* Compiles src (a program named name, e.g. "tk_brick_pad__f32.cu", which
 * includes "tk_kernel.h") for arch. On failure msg holds NVRTC's log, each
 * error followed by the generated line it points at. */
tk_status tk_nvrtc_compile(tk_nvrtc *nv, const char *src, const char *name, tk_arch arch,
                           tk_binary *out, char *msg, size_t msglen);

/* ---- the disk cache (cache.c) --------------------------------------------- */

#define TK_CACHE_KEY_SIZE 32
#define TK_CACHE_FORMAT 1u      /* version of the file layout */
#define TK_CACHE_LABEL 64       /* bytes of the label stored in a file */

/* Where the cache lives: $TK_CACHE_DIR, else $XDG_CACHE_HOME/tk, else
 * $HOME/.cache/tk. Returns 0 (and "" in out) when none can be named. */
int tk_cache_default_dir(char *out, size_t n);

/* The key of one compile: SHA-256 of the generated source, the kernel ABI
 * header, the NVRTC version, the arch, the options, the tk version and the
 * cache format. */
void tk_cache_key(const char *src, int nvrtc_version, tk_arch arch, const char *const *opts, int nopts,
                  unsigned char key[TK_CACHE_KEY_SIZE]);

/* Reads dir/<hex key>.tkbin. TK_OK: out holds the binary. TK_ERR_NOTFOUND:
 * no usable entry; msg says why when a file was there and was rejected
 * (truncated, corrupted, another NVRTC version or format, another key). */
tk_status tk_cache_load(const char *dir, const unsigned char key[TK_CACHE_KEY_SIZE], int nvrtc_version,
                        tk_binary *out, char *msg, size_t msglen);

/* Writes the entry atomically (a temporary file renamed into place),
 * creating dir if needed. label ("tk_brick_pad__f32 sm_90") is for listing.
 * An error only means the entry was not stored. */
tk_status tk_cache_store(const char *dir, const unsigned char key[TK_CACHE_KEY_SIZE], int nvrtc_version,
                         const char *label, const tk_binary *bin, char *msg, size_t msglen);

/* The path of an entry: dir/<64 hex digits>.tkbin. 0 if it does not fit. */
int tk_cache_path(const char *dir, const unsigned char key[TK_CACHE_KEY_SIZE], char *out, size_t n);

/* One entry as listed: label, payload bytes, NVRTC version, whether valid. */
typedef struct tk_cache_entry {
    char label[TK_CACHE_LABEL + 1];
    uint64_t size;
    int nvrtc_version;
    int is_ptx;
    int valid;          /* header readable and size consistent (checksum not read) */
} tk_cache_entry;

/* Calls fn for each *.tkbin file in dir; returns the number of files, or -1
 * when dir cannot be read. */
int tk_cache_list(const char *dir, void (*fn)(const tk_cache_entry *e, void *user), void *user);

/* ---- the launcher (cuda.c) ------------------------------------------------ */

typedef struct tk_cuda tk_cuda;

typedef struct tk_cuda_options {
    const char *const *nvrtc_dirs;  /* extra folders to search for NVRTC (see tk_nvrtc_open) */
    int n_nvrtc_dirs;
    const char *cache_dir;          /* NULL: tk_cache_default_dir; "": no disk cache */
    const char *driver;             /* NULL: "libcuda.so.1" */
    int debug;                      /* 1: print sources and options; -1: from $TK_DEBUG */
} tk_cuda_options;

/* The process-wide GPU state (loaded libraries, devices, kernels). Opening
 * the libraries waits for first use, so this only fails (NULL) when out of
 * memory. opt may be NULL (defaults, debug from $TK_DEBUG). */
tk_cuda *tk_cuda_new(const tk_cuda_options *opt);
/* Unloads the modules and closes the libraries. No launch may be running. */
void tk_cuda_free(tk_cuda *cu);

/* Launches call (bound, outputs set, device TK_CUDA) on stream (a
 * cudaStream_t or CUstream of call->device_index; NULL: the legacy default
 * stream): one kernel launch, none when the index space is empty. The first
 * launch of the op's variant on that device compiles and loads it; threads
 * arriving meanwhile wait for it. Thread-safe. The op's context is only
 * read, except that emitting annotates the op: nothing else may emit ops of
 * ctx at the same time. Errors read "tk.<op>: cannot run on cuda:N: ...". */
tk_status tk_cuda_launch(tk_cuda *cu, tk_ctx *ctx, const tk_call *call, void *stream, char *msg,
                         size_t msglen);

/* Whether the call's kernel runs in parts (schedule parts=N; docs/gpu.md,
 * Parts), compiling it on first use as tk_cuda_launch would: *parts = N
 * (0: not in parts), *copied = the outputs each thread adds into its own
 * copy of (bit i: output i), *parted = 1 when the threads share one
 * iteration's parted loop. Such a kernel runs kargs.nparts threads (1 when
 * it is 0 or 1), thread p adding into its copy at kargs.pstride[i]
 * elements times p from output i's data; the caller makes the copies (the
 * additive identity in each: -0.0, 0, false) and adds them up after. */
tk_status tk_cuda_parts(tk_cuda *cu, tk_ctx *ctx, const tk_call *call, int *parts, unsigned *copied, int *parted,
                        char *msg, size_t msglen);

/* Compiles variant of op for sm into the disk cache without a GPU (ahead of
 * time, for deployment). *cached is 1 when the entry was already there. */
tk_status tk_cuda_precompile(tk_cuda *cu, tk_ctx *ctx, const tk_op *op, int variant, int sm, int *cached,
                             char *msg, size_t msglen);

/* A few lines for `python -m torch_tk info`: NVRTC, driver and devices,
 * cache folder and its entries. Truncated to n bytes. */
void tk_cuda_describe(tk_cuda *cu, char *out, size_t n);

/* The cache folder in use ("" when disabled). */
const char *tk_cuda_cache_dir(const tk_cuda *cu);

/* Launch shape for n threads' work (elements, chunks or tiles) on a device
 * with nsm multiprocessors. Threads per block: TK_CUDA_BLOCK (256), halved
 * down to TK_CUDA_BLOCK_MIN (64) while that gives fewer than 4 blocks per
 * SM: a small grid (rwkv_backward_w: C x T / 16 tiles) then spreads over
 * every SM in even parts instead of leaving most of them idle for a second,
 * partial wave of large blocks. */
#define TK_CUDA_BLOCK 256
#define TK_CUDA_BLOCK_MIN 64
unsigned tk_cuda_block_size(int64_t n, int nsm);
/* The block size a launch uses, given the kernel's occupancy: resident[i]
 * = blocks of TK_CUDA_BLOCK >> i threads (256, 128, 64) that one SM holds
 * at once (the driver's cuOccupancyMaxActiveBlocksPerMultiprocessor, which
 * counts the kernel's registers), 0 when unknown. Of the sizes no larger
 * than tk_cuda_block_size(n, nsm), the one that keeps the most threads
 * resident, the largest on ties; none known: tk_cuda_block_size(n, nsm).
 * Registers are allocated per warp, and a block is resident whole or not
 * at all: at 168 registers a thread (rwkv_backward_w, sm_90) an SM holds one
 * block of 256 (8 warps) but three of 128 (12). */
#define TK_CUDA_NBLOCKS 3
unsigned tk_cuda_block_size_occ(int64_t n, int nsm, const int *resident);
/* blocks = min(ceil(n / block), 32 * nsm); 0 when n <= 0. The kernels'
 * grid-stride loop covers the rest. */
unsigned tk_cuda_grid_size(int64_t n, unsigned block, int nsm);

#ifdef __cplusplus
}
#endif
#endif
