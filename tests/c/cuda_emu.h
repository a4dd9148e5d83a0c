/* cuda_emu.h - runs tk's generated CUDA kernels on the CPU, for tests on
 * machines without a GPU (test_variants compares them with the plain CPU
 * kernels). `tkc gen-builtin --cuda-emu` writes the CUDA source of every op
 * after this header; it is compiled as C++ by the host compiler. A launch
 * runs every thread of every block one after the other: the kernels use no
 * shared memory and no barriers, so any order of threads is a valid
 * schedule. The grid is small on purpose (1 to 3 blocks of 32 or 64
 * threads, chosen from numel), so that the grid-stride loops wrap.
 *
 * What this checks: the CUDA emitter's index decomposition, tiles, masks,
 * remainders and grid-stride loops, i.e. which elements each thread
 * computes and how. What it does not: device-only helpers (tk_kernel.h's
 * CUDA branches; the host versions run here) and the device compiler,
 * which test_nvrtc covers by compiling every op for sm_80 and sm_90. */
#ifndef TK_CUDA_EMU_H
#define TK_CUDA_EMU_H

#include "tk.h"

struct tk_emu_dim3 {
    unsigned x, y, z;
};
static tk_emu_dim3 threadIdx, blockIdx, blockDim, gridDim;

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(threads, blocks)

/* the read-only load and the streaming store of GPU chunks (emit.c); a
 * vector store to an address that is not a multiple of its size, which a
 * GPU faults on and x86 forgives, is counted in tk_emu_misaligned */
extern "C" {   /* inline: one pair however many generated files include this */
inline long tk_emu_misaligned = 0, tk_emu_vector_stores = 0;
}
template <class T>
static inline T __ldg(const T *p) {
    return *p;
}
template <class T>
static inline void __stcs(T *p, T v) {
    if ((size_t)p % sizeof(T) != 0) tk_emu_misaligned++;
    tk_emu_vector_stores++;
    *p = v;
}

template <class Kernel>
static void tk_emu_launch(Kernel kernel, const tk_kargs *a, tk_i64 begin, tk_i64 end) {
    (void)begin;
    (void)end;   /* a launch covers [0, numel): callers pass the whole range */
    unsigned grid = 1 + (unsigned)(a->numel % 3), block = a->numel % 2 ? 64 : 32;
    gridDim = {grid, 1, 1};
    blockDim = {block, 1, 1};
    for (unsigned b = 0; b < grid; b++)
        for (unsigned t = 0; t < block; t++) {
            blockIdx = {b, 0, 0};
            threadIdx = {t, 0, 0};
            kernel(*a);
        }
}

#endif
