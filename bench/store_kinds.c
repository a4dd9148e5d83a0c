/* store_kinds.c - what the CPU's stores cost for an output the size of
 * brick_pad's seed configuration (4144 x 8224 float32, 136 MB), one thread:
 * the machine facts behind two decisions of the CPU emitter (bench/LOG.md).
 *
 *   1. Plain 512-bit stores, streaming (non-temporal) stores and memset, into
 *      pages already touched ("warm") and into pages fresh from mmap, as a
 *      tk op's output is: torch's CPU allocator hands out a new mapping for
 *      every large tensor, so each call takes the page faults.
 *   2. brick_pad's access pattern: rows made of 32-float segments, each a copy
 *      of one tile row from a shifted start ("segments", what the generated
 *      kernel does), against aligned 16-float output blocks loaded from a
 *      doubled copy of the tile row ("blocks", one store per block whatever
 *      the segment boundaries).
 *
 *   cc -O2 -o /tmp/store_kinds bench/store_kinds.c && /tmp/store_kinds
 *
 * x86-64 with AVX-512 only (the machine this project benchmarks on). */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

enum { H = 4144, W = 8224, TH = 48, TW = 32, STAGGER = 10, REPEAT = 7 };
static const size_t N = (size_t)H * W;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

__attribute__((target("avx512f"), noinline)) static void fill(float *p, int kind, float v) {
    __m512 x = _mm512_set1_ps(v);
    if (kind == 0)
        for (size_t i = 0; i < N; i += 16) _mm512_store_ps(p + i, x);
    else if (kind == 1) {
        for (size_t i = 0; i < N; i += 16) _mm512_stream_ps(p + i, x);
        _mm_sfence();
    } else {
        memset(p, (int)v, N * sizeof(float));
    }
}

__attribute__((target("avx512f"), noinline)) static void brick(float *out, const float *tile, int blocks) {
    for (long r = 0; r < H; r++) {
        const float *trow = tile + (r % TH) * TW;
        float *orow = out + r * W;
        long off = (r * STAGGER) % TW;
        if (!blocks) {
            for (long c = 0; c < W;) {
                long ph = (c + off) % TW, n = TW - ph < W - c ? TW - ph : W - c;
                for (long i = 0; i < n; i++) orow[c + i] = trow[ph + i];
                c += n;
            }
        } else {
            float dbl[2 * TW + 16];
            memcpy(dbl, trow, TW * sizeof(float));
            memcpy(dbl + TW, trow, TW * sizeof(float));
            memcpy(dbl + 2 * TW, trow, 16 * sizeof(float));
            long c = 0;
            for (; c + 16 <= W; c += 16) _mm512_storeu_ps(orow + c, _mm512_loadu_ps(dbl + (c + off) % TW));
            for (; c < W; c++) orow[c] = trow[(c + off) % TW];
        }
    }
}

static float *map(void) {   /* 64-byte aligned: a fresh mapping is page aligned */
    void *p = mmap(NULL, N * sizeof(float), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    return p;
}

static void report(const char *what, double *t) {   /* median of REPEAT */
    for (int i = 0; i < REPEAT; i++)
        for (int j = i + 1; j < REPEAT; j++)
            if (t[j] < t[i]) {
                double x = t[i];
                t[i] = t[j];
                t[j] = x;
            }
    double m = t[REPEAT / 2];
    printf("%-34s %8.2f ms %7.2f GB/s\n", what, m * 1e3, (double)N * sizeof(float) / m / 1e9);
}

int main(void) {
    static const char *const kinds[] = {"plain stores", "streaming stores", "memset"};
    double t[REPEAT];
    char what[64];
    printf("136 MB written, one thread, median of %d\n", REPEAT);
    for (int kind = 0; kind < 3; kind++) {
        for (int fresh = 1; fresh >= 0; fresh--) {
            float *p = fresh ? NULL : map();
            if (!fresh) fill(p, 0, 0);
            for (int i = 0; i < REPEAT; i++) {
                if (fresh) p = map();
                double t0 = now();
                fill(p, kind, (float)i);
                t[i] = now() - t0;
                if (fresh) munmap(p, N * sizeof(float));
            }
            if (!fresh) munmap(p, N * sizeof(float));
            snprintf(what, sizeof what, "%s, %s pages", kinds[kind], fresh ? "fresh" : "warm");
            report(what, t);
        }
    }
    float tile[TH * TW];
    for (int i = 0; i < TH * TW; i++) tile[i] = (float)i;
    float *out = map();
    fill(out, 0, 0);
    for (int blocks = 0; blocks < 2; blocks++) {
        for (int i = 0; i < REPEAT; i++) {
            double t0 = now();
            brick(out, tile, blocks);
            t[i] = now() - t0;
        }
        report(blocks ? "brick rows as aligned blocks, warm" : "brick rows as segments, warm", t);
    }
    munmap(out, N * sizeof(float));
    return 0;
}
