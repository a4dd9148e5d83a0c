/* cuda_emu.h - runs tk's generated CUDA kernels on the CPU, for tests on
 * machines without a GPU (test_variants compares them with the plain CPU
 * kernels). `tkc gen-builtin --cuda-emu` writes the CUDA source of every op
 * after this header; it is compiled as C++ by the host compiler. A launch
 * runs the threads of each block one after the other. In kernels with warp
 * shuffles (split reductions, emit.c's split_plan; tkc passes fibers = 1)
 * each thread is a fiber (ucontext) that runs until it ends or reaches a
 * shuffle: a shuffle is two rounds in which every live thread of the block
 * runs to its next shuffle or its end, the first publishing its value, the
 * second reading its partner's; a __syncwarp (cooperative rows) is two such
 * rounds too, so no thread passes it before every thread of its mask
 * reached it. (ASan warns once that it does not fully
 * support swapcontext; the switches are annotated for it.) A shuffle whose partner is outside its mask, or that has
 * not reached the same shuffle (not converged), is counted in
 * tk_emu_bad_shuffles. The grid is small on purpose (1 to 3 blocks of 32 or
 * 64 threads, chosen from numel), so that the grid-stride loops wrap.
 *
 * What this checks: the CUDA emitter's index decomposition, tiles, masks,
 * remainders, grid-stride loops and the split reductions' shuffles, i.e.
 * which elements each thread computes and how. What it does not:
 * device-only helpers (tk_kernel.h's CUDA branches; the host versions run
 * here) and the device compiler, which test_nvrtc covers by compiling every
 * op for sm_80 and sm_90. */
#ifndef TK_CUDA_EMU_H
#define TK_CUDA_EMU_H

#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include "tk.h"

struct tk_emu_dim3 {
    unsigned x, y, z;
};
static tk_emu_dim3 threadIdx, blockIdx, blockDim, gridDim;

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(threads, blocks)
#define __maxnreg__(n)

/* the read-only load and the streaming store of GPU chunks (emit.c); a
 * vector load or store at an address that is not a multiple of its size,
 * which a GPU faults on and x86 forgives, is counted in tk_emu_misaligned */
extern "C" {   /* inline: one pair however many generated files include this */
inline long tk_emu_misaligned = 0, tk_emu_vector_stores = 0, tk_emu_vector_loads = 0;
}
/* the products of derived ops (emit_expr.c), never contracted on a GPU: here
 * the op's pragmas (k_exact_begin, emit.c) keep GCC from contracting them */
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
template <class T>
static inline T __ldg(const T *p) {
    return *p;
}
/* the 16-, 8- and 4-byte loads of GPU streams (emit.c's stream_load):
 * counted, and any from an address that is not a multiple of its size */
template <class V>
static inline V tk_emu_vector_load(const V *p) {
    if ((size_t)p % sizeof(V) != 0) tk_emu_misaligned++;
    tk_emu_vector_loads++;
    V v;
    memcpy(&v, (const void *)p, sizeof v);
    return v;
}
static inline tk_v16 __ldg(const tk_v16 *p) { return tk_emu_vector_load(p); }
static inline tk_v8 __ldg(const tk_v8 *p) { return tk_emu_vector_load(p); }
static inline tk_u32 __ldg(const tk_u32 *p) { return tk_emu_vector_load(p); }
template <class T>
static inline void __stcs(T *p, T v) {
    if ((size_t)p % sizeof(T) != 0) tk_emu_misaligned++;
    tk_emu_vector_stores++;
    *p = v;
}

/* ---- fibers: one a thread of the block being run ---- */
#if defined(__SANITIZE_ADDRESS__)
#define TK_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TK_EMU_ASAN 1
#endif
#endif
#ifdef TK_EMU_ASAN   /* tell ASan which stack each switch lands on */
#include <sanitizer/common_interface_defs.h>
#endif

enum { TK_EMU_MAX_BLOCK = 64, TK_EMU_STACK = 128 * 1024 };
struct tk_emu_fiber {
    ucontext_t ctx;
    int done;
    long shuffles;                  /* shuffles reached */
    unsigned char slot[16];         /* the value this thread publishes */
};
static ucontext_t tk_emu_main;
static tk_emu_fiber tk_emu_fibers[TK_EMU_MAX_BLOCK];
static char *tk_emu_stacks;
static int tk_emu_cur = -1;   /* the fiber running, -1: none (no shuffles) */
static void (*tk_emu_entry_fn)(const tk_kargs *);
static const tk_kargs *tk_emu_entry_args;
#ifdef TK_EMU_ASAN
static const void *tk_emu_main_bottom;
static size_t tk_emu_main_size;
#endif
extern "C" {
inline long tk_emu_shuffles = 0, tk_emu_bad_shuffles = 0, tk_emu_syncs = 0;
}

/* From the running fiber back to the scheduler; ending: it will not resume. */
static void tk_emu_to_main(int ending) {
#ifdef TK_EMU_ASAN
    void *fake = NULL;
    __sanitizer_start_switch_fiber(ending ? NULL : &fake, tk_emu_main_bottom, tk_emu_main_size);
    if (ending) return;   /* uc_link switches */
    swapcontext(&tk_emu_fibers[tk_emu_cur].ctx, &tk_emu_main);
    __sanitizer_finish_switch_fiber(fake, &tk_emu_main_bottom, &tk_emu_main_size);
#else
    if (!ending) swapcontext(&tk_emu_fibers[tk_emu_cur].ctx, &tk_emu_main);
#endif
}

static void tk_emu_entry() {
#ifdef TK_EMU_ASAN
    __sanitizer_finish_switch_fiber(NULL, &tk_emu_main_bottom, &tk_emu_main_size);
#endif
    tk_emu_entry_fn(tk_emu_entry_args);
    tk_emu_fibers[tk_emu_cur].done = 1;
    tk_emu_to_main(1);
}

/* From the scheduler into fiber t. */
static void tk_emu_resume(int t) {
    tk_emu_cur = t;
    threadIdx = {(unsigned)t, 0, 0};
#ifdef TK_EMU_ASAN
    void *fake = NULL;
    __sanitizer_start_switch_fiber(&fake, tk_emu_stacks + (size_t)t * TK_EMU_STACK, TK_EMU_STACK);
    swapcontext(&tk_emu_main, &tk_emu_fibers[t].ctx);
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#else
    swapcontext(&tk_emu_main, &tk_emu_fibers[t].ctx);
#endif
}

/* Whether thread t of the block is in its warp's mask and has reached the
 * same shuffle or __syncwarp (the n-th) as the caller, me. */
static int tk_emu_converged(int me, int t, unsigned mask, long n) {
    return t >= 0 && t < (int)blockDim.x && (me & ~31) == (t & ~31) && (mask >> (me & 31) & 1) &&
           (mask >> (t & 31) & 1) && tk_emu_fibers[t].shuffles == n && !tk_emu_fibers[t].done;
}

/* The value of thread `other` at this shuffle (the caller's v published). */
template <class T>
static T tk_emu_exchange(unsigned mask, T v, int other) {
    static_assert(sizeof(T) <= 16, "shuffled value too large");
    if (tk_emu_cur < 0) abort();   /* a shuffle in a kernel tkc said has none */
    int me = tk_emu_cur;
    tk_emu_fiber *f = &tk_emu_fibers[me];
    memcpy(f->slot, &v, sizeof v);
    f->shuffles++;
    tk_emu_to_main(0);   /* every live thread publishes */
    T r = v;
    if (!tk_emu_converged(me, other, mask, f->shuffles)) tk_emu_bad_shuffles++;
    else memcpy(&r, tk_emu_fibers[other].slot, sizeof r), tk_emu_shuffles++;
    tk_emu_to_main(0);   /* every live thread reads before anyone publishes again */
    return r;
}

/* __shfl_xor_sync: lane ^ laneMask's value at the same shuffle. */
template <class T>
static T __shfl_xor_sync(unsigned mask, T v, int laneMask) {
    return tk_emu_exchange(mask, v, tk_emu_cur ^ laneMask);
}

/* __shfl_sync: lane srcLane's value of the caller's group of `width` lanes. */
template <class T>
static T __shfl_sync(unsigned mask, T v, int srcLane, int width = 32) {
    return tk_emu_exchange(mask, v, (tk_emu_cur & ~(width - 1)) + (srcLane & (width - 1)));
}

/* __syncwarp: every thread of mask reaches it before any goes on (the
 * cooperative rows' stores, emit_coop.c); one that does not is counted in
 * tk_emu_bad_shuffles. */
static void __syncwarp(unsigned mask) {
    if (tk_emu_cur < 0) abort();   /* a __syncwarp in a kernel tkc said has none */
    int me = tk_emu_cur;
    tk_emu_fiber *f = &tk_emu_fibers[me];
    f->shuffles++;
    tk_emu_to_main(0);   /* every live thread runs to its next meeting point */
    for (int t = (me & ~31); t < (me & ~31) + 32 && t < (int)blockDim.x; t++)
        if ((mask >> (t & 31) & 1) && !tk_emu_converged(me, t, mask, f->shuffles)) tk_emu_bad_shuffles++;
    tk_emu_syncs++;
    tk_emu_to_main(0);
}

template <class Kernel>
static void tk_emu_launch(Kernel kernel, const tk_kargs *a, tk_i64 begin, tk_i64 end, int fibers) {
    (void)begin;
    (void)end;   /* a launch covers [0, numel): callers pass the whole range */
    unsigned grid = 1 + (unsigned)(a->numel % 3), block = a->numel % 2 ? 64 : 32;
    gridDim = {grid, 1, 1};
    blockDim = {block, 1, 1};
    if (!fibers) {   /* no shuffles: any order of threads is a valid schedule */
        tk_emu_cur = -1;
        for (unsigned b = 0; b < grid; b++)
            for (unsigned t = 0; t < block; t++) {
                blockIdx = {b, 0, 0};
                threadIdx = {t, 0, 0};
                kernel(*a);
            }
        return;
    }
    if (!tk_emu_stacks) tk_emu_stacks = (char *)malloc((size_t)TK_EMU_MAX_BLOCK * TK_EMU_STACK);
    if (!tk_emu_stacks) abort();
    static Kernel the_kernel;
    the_kernel = kernel;
    tk_emu_entry_fn = [](const tk_kargs *k) { the_kernel(*k); };
    tk_emu_entry_args = a;
    for (unsigned b = 0; b < grid; b++) {
        blockIdx = {b, 0, 0};
        for (unsigned t = 0; t < block; t++) {
            tk_emu_fiber *f = &tk_emu_fibers[t];
            f->done = 0;
            f->shuffles = 0;
            getcontext(&f->ctx);
            f->ctx.uc_stack.ss_sp = tk_emu_stacks + (size_t)t * TK_EMU_STACK;
            f->ctx.uc_stack.ss_size = TK_EMU_STACK;
            f->ctx.uc_link = &tk_emu_main;
            makecontext(&f->ctx, tk_emu_entry, 0);
        }
        /* rounds: each live thread runs to its next shuffle or its end */
        for (int live = 1; live;) {
            live = 0;
            for (unsigned t = 0; t < block; t++)
                if (!tk_emu_fibers[t].done) {
                    tk_emu_resume((int)t);
                    live |= !tk_emu_fibers[t].done;
                }
        }
    }
}

#endif
