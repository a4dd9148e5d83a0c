/* fma_peak.c - the FP32 FMA peak of this CPU, measured: 16 independent
 * vfmadd231ps chains per loop iteration (enough to cover the latency of two
 * FMA pipes), on 512-bit and 256-bit registers, one and two threads. The
 * "floor" the CPU bench rows compare against (bench/README.md).
 *
 *   cc -O2 -fopenmp bench/fma_peak.c -o /tmp/fma_peak && /tmp/fma_peak
 *
 * x86-64 with AVX-512 only (the 512-bit rows fault elsewhere: run with
 * argument "ymm" to skip them). */
#include <omp.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#if defined(__x86_64__)
#define Z(r) "vfmadd231ps %%zmm30, %%zmm31, %%zmm" #r "\n\t"
#define Y(r) "vfmadd231ps %%ymm14, %%ymm15, %%ymm" #r "\n\t"
#define ZREGS "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
              "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm30", "xmm31"

__attribute__((target("avx512f"))) static void run_zmm(long n) {
    __asm__ volatile("vxorps %%xmm30, %%xmm30, %%xmm30\n\tvxorps %%xmm31, %%xmm31, %%xmm31\n1:\n\t"
                     Z(0) Z(1) Z(2) Z(3) Z(4) Z(5) Z(6) Z(7) Z(8) Z(9) Z(10) Z(11) Z(12) Z(13) Z(14) Z(15)
                     "dec %0\n\tjnz 1b\n\t"
                     : "+r"(n)::ZREGS, "memory");
}

__attribute__((target("avx2,fma"))) static void run_ymm(long n) {
    /* 14 chains: ymm14 and ymm15 are the operands */
    __asm__ volatile("vxorps %%xmm14, %%xmm14, %%xmm14\n\tvxorps %%xmm15, %%xmm15, %%xmm15\n1:\n\t"
                     Y(0) Y(1) Y(2) Y(3) Y(4) Y(5) Y(6) Y(7) Y(8) Y(9) Y(10) Y(11) Y(12) Y(13)
                     "dec %0\n\tjnz 1b\n\t"
                     : "+r"(n)::"xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
                       "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "memory");
}

int main(int argc, char **argv) {
    const long iters = 100000000;
    int ymm_only = argc > 1 && strcmp(argv[1], "ymm") == 0;
    for (int w = ymm_only; w < 2; w++)
        for (int nt = 1; nt <= 2; nt++) {
            double t0 = now();
#pragma omp parallel num_threads(nt)
            {
                if (w == 0) run_zmm(iters);
                else run_ymm(iters);
            }
            double t = now() - t0;
            double flop = (double)nt * (double)iters * (w ? 14 * 8 : 16 * 16) * 2;
            printf("%s, %d thread%s: %.1f GFLOP/s FP32\n", w ? "256-bit" : "512-bit", nt, nt > 1 ? "s" : "",
                   flop / t / 1e9);
        }
    return 0;
}
#else
int main(void) {
    printf("fma_peak: x86-64 only\n");
    return 0;
}
#endif
