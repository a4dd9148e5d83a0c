/* tk_kernel.h - the kernel ABI shared by the host (C, C++) and by every
 * generated kernel (C for the CPU, CUDA C through NVRTC). It is embedded in
 * libtk so load-time compilers see the exact same definitions.
 *
 * A generated CPU kernel has the type tk_cpu_fn and computes the elements
 * [begin, end) of its op's flattened index space (the loop output's shape,
 * batch dims first). A CUDA kernel takes tk_kargs by value and covers
 * [0, numel) with a grid-stride loop. Keep this file free of includes that
 * NVRTC lacks. */
#ifndef TK_KERNEL_H
#define TK_KERNEL_H

/* A run-time spec's kernel (compiled with -march=native -DTK_NO_CLONES,
 * runtime/cc.c) on a CPU with AVX2 or AVX-512 takes every unit-stride call
 * in a body compiled with literal unit strides (the wide / mid body, or the
 * body's unit-stride call); the body with the strides as variables serves
 * only strided calls. GCC's unroll-and-jam of that body's per-lane scalar
 * loops cost about 1 s of the ~6.5 s of compiling the rwkv copy and no
 * speed (rwkv copy, k strided: 67.9 / 67.5 ms with it off, 68.3 / 67.9
 * with it on); the other bodies' code is the same without it
 * (bench/results/2026-12-05-cpu-compile-time-2.txt). Versioning loops for
 * stride 1 would save another second but costs strided calls 12 % (the
 * tensors that do have unit strides lose their fast path): kept. Set
 * first, so every function of the file has the same options (inlining
 * stays as it was). libtk's built-in kernels (target clones, run-time
 * choice) are compiled as before. */
#if defined(TK_NO_CLONES) && defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && \
    ((defined(__AVX2__) && defined(__FMA__)) || defined(__AVX512F__)) && !defined(__CUDACC__) && \
    !defined(__CUDACC_RTC__)
#pragma GCC optimize("no-loop-unroll-and-jam")
#endif

#if defined(__CUDACC_RTC__)
typedef signed char tk_i8;
typedef unsigned char tk_u8;
typedef short tk_i16;
typedef int tk_i32;
typedef long long tk_i64;
typedef unsigned long long tk_u64;
typedef unsigned int tk_u32;
typedef unsigned short tk_u16;
#ifndef INT64_MAX   /* NVRTC has no <stdint.h> */
#define INT64_MAX 0x7fffffffffffffffLL
#define INT64_MIN (-0x7fffffffffffffffLL - 1)
#endif
#else
#include <stdint.h>
#include <math.h>
typedef int8_t tk_i8;
typedef uint8_t tk_u8;
typedef int16_t tk_i16;
typedef int32_t tk_i32;
typedef int64_t tk_i64;
typedef uint64_t tk_u64;
typedef uint32_t tk_u32;
typedef uint16_t tk_u16;
#endif

#define TK_MAX_DIMS 8       /* rank limit of any tensor */
#define TK_MAX_TENSORS 16   /* tensor parameters + outputs (scratch tensors too) of one op */
#define TK_MAX_INTS 32      /* int/bool scalars + symbolic dims */
#define TK_MAX_FLOATS 8     /* float scalars */

/* One tensor as a kernel sees it: sizes and strides in elements. */
typedef struct tk_ktensor {
    void *data;
    tk_i64 size[TK_MAX_DIMS];
    tk_i64 stride[TK_MAX_DIMS];
    tk_i64 ndim;
} tk_ktensor;

/* Division by a value fixed for the whole launch, as a multiply (the
 * method of Granlund and Montgomery, 1994): for a divisor 1 <= d <= 2^31 - 1,
 * s = ceil(log2 d) and m = floor(2^32 (2^s - d) / d) + 1, every
 * 0 <= t < 2^31 has t / d = (umulhi(t, m) + t) >> s. m == 0: d is out of
 * that range and the kernel divides. */
typedef struct tk_kdiv {
    tk_u32 m, s;
} tk_kdiv;

/* The first out-of-range access of a launch (checked kernels, and a row
 * loop's stores the planner did not prove in range; docs/spec.md, Bounds):
 * the access that turns hit from 0 to 1 fills the rest, the others only
 * skip their access. The caller zeroes it before the launch and reads it
 * after (tk_run_cpu; the CUDA launcher). */
typedef struct tk_kerr {
    int hit;
    int line, col;      /* of the access in the spec */
    int what;           /* tensor slot (kargs.t) | 256 for a store | explicit dim << 16 */
    tk_i64 index, size;
} tk_kerr;

/* Everything one launch needs. Slot order is fixed by the op's parameter
 * order: t[] holds tensor parameters then outputs; i[] int and bool scalars
 * then symbolic dims (in order of first binding); f[] float scalars. */
typedef struct tk_kargs {
    tk_ktensor t[TK_MAX_TENSORS];
    tk_i64 i[TK_MAX_INTS];
    double f[TK_MAX_FLOATS];
    tk_i64 numel;       /* size of the index space */
    tk_i64 nbatch;      /* number of '...' dims of the loop output */
    tk_i64 part, nparts; /* CPU, a kernel whose row loop runs in parts (plan_rows.c, plan_parts): this
                          * launch runs part `part` of `nparts` of the parted loop, storing into
                          * outputs that hold only its sums (part > 0: filled with -0.0 or 0 by the
                          * caller, who adds them up); nparts 0 or 1: the whole loop (every other
                          * kernel ignores them); CUDA, a kernel that runs in parts (schedule parts=N;
                          * docs/gpu.md): nparts threads, thread p adding into copy p of its outputs */
    tk_i64 pstride[TK_MAX_TENSORS]; /* CUDA in parts: per output, elements from one copy to the next */
    tk_kdiv idiv[TK_MAX_INTS];  /* i[k] as a divisor (tk_kargs_divisors; GPU kernels) */
    tk_kerr *err;       /* where a bounds check records its failure (device memory on CUDA); NULL: nowhere */
} tk_kargs;
/* a CUDA kernel's parameters: at most 4 kB (tk_kargs is the only one) */
typedef char tk_kargs_fits_a_launch[sizeof(tk_kargs) <= 4096 ? 1 : -1];

typedef void (*tk_cpu_fn)(const tk_kargs *a, tk_i64 begin, tk_i64 end);

/* ---- helpers used by generated code ---------------------------------- */

/* CPU kernels are compiled for several instruction sets and the best one is
 * picked at load time (GCC target_clones); bodies are force-inlined into
 * each clone and into their unit-stride specialisation. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(TK_NO_CLONES) && !defined(__CUDACC__) && !defined(__CUDACC_RTC__)
#define TK_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
/* kernels with explicit-vector bodies (emit.c, cpu_kernel): the 512-bit one
 * compiled for x86-64-v4, the 256-bit one for x86-64-v3, picked at run
 * time; the narrow body serves other CPUs */
#define TK_WIDE_DISPATCH 1
#define TK_WIDE_TARGET __attribute__((target("arch=x86-64-v4")))
#define TK_MID_TARGET __attribute__((target("arch=x86-64-v3")))
/* the narrow body of such kernels: strided calls (AVX2 and newer CPUs) and
 * CPUs without AVX2 */
#define TK_NARROW_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
/* whether this CPU runs x86-64-v4 code (and TK_CPU_NARROW is not set) */
static inline int tk_env_narrow(void);
static inline int tk_cpu_wide(void) {
    static int wide = -1;
    if (wide < 0) {
        wide = !tk_env_narrow() && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512cd") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") &&
               __builtin_cpu_supports("bmi2");
    }
    return wide;
}
/* whether it runs x86-64-v3 code (AVX2, FMA, BMI1/2; the level's other
 * features, LZCNT, MOVBE and F16C, come with these on every such CPU) and
 * TK_CPU_NARROW asks for no less */
static inline int tk_cpu_mid(void) {
    static int mid = -1;
    if (mid < 0) {
        mid = tk_env_narrow() < 2 && __builtin_cpu_supports("avx") && __builtin_cpu_supports("avx2") &&
              __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
    }
    return mid;
}
#else
#define TK_CPU_CLONES
#define TK_WIDE_DISPATCH 0
#define TK_WIDE_TARGET
#define TK_MID_TARGET
#define TK_NARROW_CLONES
#endif
#if !defined(__CUDACC__) && !defined(__CUDACC_RTC__)
#include <stdlib.h>
/* TK_CPU_NARROW in the environment: kernels run a narrower body than the
 * CPU could (the tests run each). 0 or unset: the widest; 1 (or avx2): no
 * AVX-512, the 256-bit body; 2 (or baseline): the narrow body, which CPUs
 * without AVX2 run (in the clone GCC's resolver picks for this CPU). Read
 * once per process. */
static inline int tk_env_narrow(void) {
    static int narrow = -1;
    if (narrow < 0) {
        const char *v = getenv("TK_CPU_NARROW");
        narrow = !v || !v[0] || (v[0] == '0' && !v[1]) ? 0
                 : (v[0] == '2' && !v[1]) || __builtin_strcmp(v, "baseline") == 0 ? 2
                                                                                 : 1;
    }
    return narrow;
}
#endif
#if defined(__GNUC__)
#define TK_BODY static inline __attribute__((always_inline))
#else
#define TK_BODY static inline
#endif
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define TK_FN static __device__ __forceinline__
#else
#define TK_FN static inline
#endif
/* The spec's literal inf, in float and double (no <math.h> under NVRTC). */
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define TK_INFF __int_as_float(0x7f800000)
#define TK_INF __longlong_as_double(0x7ff0000000000000LL)
#else
#define TK_INFF __builtin_inff()
#define TK_INF __builtin_inf()
#endif

/* A bounds check: whether 0 <= i < n; if not, records the access in *err
 * when it is the launch's first failure (see tk_kerr). */
TK_FN int tk_ck(tk_kerr *err, tk_i64 i, tk_i64 n, int line, int col, int what) {
    if ((tk_u64)i < (tk_u64)n) return 1;
    if (!err) return 0;
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
    if (atomicCAS(&err->hit, 0, 1) != 0) return 0;
#else
    int zero = 0;
    if (!__atomic_compare_exchange_n(&err->hit, &zero, 1, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return 0;
#endif
    err->line = line;
    err->col = col;
    err->what = what;
    err->index = i;
    err->size = n;
    return 0;
}

/* Truncating a / b (b != 0, b != -1) in 32 bits when both operands fit:
 * a 64-bit division is a long subroutine on the GPU (and slower on x86). */
TK_FN tk_i64 tk_tdiv(tk_i64 a, tk_i64 b) {
    if (a == (tk_i64)(tk_i32)a && b == (tk_i64)(tk_i32)b) return (tk_i64)((tk_i32)a / (tk_i32)b);
    return a / b;
}
/* a / b for a >= 0, b > 0 (flat index decomposition), 32-bit when both fit */
TK_FN tk_i64 tk_udiv(tk_i64 a, tk_i64 b) {
    if (((tk_u64)a | (tk_u64)b) >> 32 == 0) return (tk_i64)((tk_u32)a / (tk_u32)b);
    return a / b;
}
/* Python floor division and modulo; x // 0 and x % 0 give 0, and
 * INT64_MIN // -1 wraps instead of trapping. */
TK_FN tk_i64 tk_floordiv(tk_i64 a, tk_i64 b) {
#ifdef TK_STATIC_POSITIVE_DIVISORS
    /* bench/gpu_static.py's chunk path: the branches a positive divisor takes */
    if (b <= 0) __builtin_unreachable();
#endif
    if (b == 0) return 0;
    if (b == -1) return (tk_i64)(0 - (tk_u64)a);
    tk_i64 q = tk_tdiv(a, b);
    if ((a - q * b != 0) && ((a < 0) != (b < 0))) q -= 1;
    return q;
}
TK_FN tk_i64 tk_mod(tk_i64 a, tk_i64 b) {
    if (b == 0 || b == -1) return 0;
    tk_i64 r = a - tk_tdiv(a, b) * b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}
/* The multiplier of divisor d (tk_kdiv); tk_bind fills tk_kargs.idiv. */
TK_FN tk_kdiv tk_kdiv_make(tk_i64 d) {
    tk_kdiv r;
    r.m = 0;
    r.s = 0;
    if (d < 1 || d > 0x7fffffffLL) return r;
    while (((tk_i64)1 << r.s) < d) r.s++;
    r.m = (tk_u32)((((tk_u64)1 << 32) * (((tk_u64)1 << r.s) - (tk_u64)d)) / (tk_u64)d + 1);
    return r;
}
TK_FN void tk_kargs_divisors(tk_kargs *a) {
    for (int k = 0; k < TK_MAX_INTS; k++) a->idiv[k] = tk_kdiv_make(a->i[k]);
}
TK_FN tk_u32 tk_umulhi(tk_u32 a, tk_u32 b) {
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
    return __umulhi(a, b);
#else
    return (tk_u32)(((tk_u64)a * b) >> 32);
#endif
}
/* a // b and a % b (Python's) where dv is b's multiplier: a multiply and a
 * shift when |a| < 2^31 (a < 0 divides -a - 1, then -q - 1 is the floor) */
TK_FN tk_i64 tk_floordiv_k(tk_i64 a, tk_i64 b, tk_kdiv dv) {
    if (dv.m != 0 && a >= -0x7fffffffLL && a <= 0x7fffffffLL) {
        const tk_u32 neg = (tk_u32)0 - (tk_u32)(a < 0);
        const tk_u32 t = (tk_u32)a ^ neg;
        const tk_u32 q = (tk_umulhi(t, dv.m) + t) >> dv.s;
        return (tk_i64)(tk_i32)(q ^ neg);
    }
    return tk_floordiv(a, b);
}
TK_FN tk_i64 tk_mod_k(tk_i64 a, tk_i64 b, tk_kdiv dv) {
    if (dv.m != 0 && a >= -0x7fffffffLL && a <= 0x7fffffffLL) return a - tk_floordiv_k(a, b, dv) * b;
    return tk_mod(a, b);
}
/* Float a % b as Python: the remainder takes the divisor's sign, a zero
 * one too (-5.0 % 5.0 is 0.0, 5.0 % -5.0 is -0.0). */
TK_FN float tk_fmodf_py(float a, float b) {
    float r = fmodf(a, b);
    if (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) r += b;
    return r == 0.0f ? copysignf(0.0f, b) : r;
}
TK_FN double tk_fmod_py(double a, double b) {
    double r = fmod(a, b);
    if (r != 0.0 && ((r < 0.0) != (b < 0.0))) r += b;
    return r == 0.0 ? copysign(0.0, b) : r;
}
/* Float a // b as Python computes it (CPython's float_divmod): the
 * quotient that goes with tk_fmod_py's remainder, so q * b + r == a holds
 * where floor(a / b) rounds away from it (-1e-300 // 1e300 is -1, 7 // -inf
 * is -1). b == 0 gives floor(a / b), +-inf or NaN, as torch.floor_divide. */
TK_FN float tk_floordivf_py(float a, float b) {
    if (b == 0.0f) return floorf(a / b);
    float m = fmodf(a, b), q = (a - m) / b;
    if (m != 0.0f && ((b < 0.0f) != (m < 0.0f))) q -= 1.0f;
    if (q == 0.0f) return copysignf(0.0f, a / b);
    float f = floorf(q);
    return q - f > 0.5f ? f + 1.0f : f;
}
TK_FN double tk_floordiv_py(double a, double b) {
    if (b == 0.0) return floor(a / b);
    double m = fmod(a, b), q = (a - m) / b;
    if (m != 0.0 && ((b < 0.0) != (m < 0.0))) q -= 1.0;
    if (q == 0.0) return copysign(0.0, a / b);
    double f = floor(q);
    return q - f > 0.5 ? f + 1.0 : f;
}
/* Counter-based random numbers (the spec's rand and randn): Philox4x32-10
 * (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2,
 * 3", SC 2011), the generator of cuRAND and of PyTorch's CUDA ops. Its key
 * is the 64-bit seed, its counter the 64-bit n and the 64-bit batch index
 * b; the four 32-bit words it returns are a pure function of the three, so
 * every thread, lane and code generator computes the same numbers, and a
 * backward op recomputes the forward's from the same seed. */
typedef struct tk_philox {
    tk_u32 w[4];
} tk_philox;
TK_FN tk_philox tk_philox4x32(tk_i64 seed, tk_i64 n, tk_i64 b) {
    tk_u32 k0 = (tk_u32)(tk_u64)seed, k1 = (tk_u32)((tk_u64)seed >> 32);
    tk_u32 c0 = (tk_u32)(tk_u64)n, c1 = (tk_u32)((tk_u64)n >> 32);
    tk_u32 c2 = (tk_u32)(tk_u64)b, c3 = (tk_u32)((tk_u64)b >> 32);
    for (int round = 0; round < 10; round++) {
        tk_u64 p0 = (tk_u64)0xD2511F53u * c0, p1 = (tk_u64)0xCD9E8D57u * c2;
        tk_u32 n0 = (tk_u32)(p1 >> 32) ^ c1 ^ k0, n2 = (tk_u32)(p0 >> 32) ^ c3 ^ k1;
        c1 = (tk_u32)p1;
        c3 = (tk_u32)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    tk_philox r;
    r.w[0] = c0;
    r.w[1] = c1;
    r.w[2] = c2;
    r.w[3] = c3;
    return r;
}
/* rand: uniform in [0, 1), the top 24 (float32) or 53 (float64) bits of
 * the first words, exact multiples of 2^-24 or 2^-53. */
TK_FN float tk_randf(tk_i64 seed, tk_i64 n, tk_i64 b) {
    return (float)(tk_philox4x32(seed, n, b).w[0] >> 8) * 5.9604644775390625e-08f;
}
TK_FN double tk_rand(tk_i64 seed, tk_i64 n, tk_i64 b) {
    tk_philox r = tk_philox4x32(seed, n, b);
    return (double)((((tk_u64)r.w[0] << 32) | r.w[1]) >> 11) * 1.1102230246251565e-16;
}
/* randn: standard normal by Box and Muller, sqrt(-2 log u) cos(2 pi v), u
 * in (0, 1] from the first words and v in [0, 1) from the next. */
TK_FN float tk_randnf(tk_i64 seed, tk_i64 n, tk_i64 b) {
    tk_philox r = tk_philox4x32(seed, n, b);
    float u = (float)((r.w[0] >> 8) + 1) * 5.9604644775390625e-08f;
    float v = (float)(r.w[1] >> 8) * 5.9604644775390625e-08f;
    return sqrtf(-2.0f * logf(u)) * cosf(6.2831853071795865f * v);
}
TK_FN double tk_randn(tk_i64 seed, tk_i64 n, tk_i64 b) {
    tk_philox r = tk_philox4x32(seed, n, b);
    double u = (double)(((((tk_u64)r.w[0] << 32) | r.w[1]) >> 11) + 1) * 1.1102230246251565e-16;
    double v = (double)((((tk_u64)r.w[2] << 32) | r.w[3]) >> 11) * 1.1102230246251565e-16;
    return sqrt(-2.0 * log(u)) * cos(6.2831853071795865 * v);
}
/* Incremental floor division for a loop-invariant divisor: when the
 * numerator is the previous one plus 1 and d > 0, the quotient and remainder
 * are updated instead of divided; anything else divides. CPU only. */
typedef struct tk_divmemo {
    tk_i64 n, q, r, d;
    int ok;
} tk_divmemo;
TK_FN void tk_divmemo_step(tk_divmemo *m, tk_i64 x, tk_i64 d) {
    if (m->ok && d == m->d && d > 0 && m->n != (tk_i64)0x7fffffffffffffffLL && x == m->n + 1) {
        if (++m->r == d) {
            m->r = 0;
            ++m->q;
        }
    } else {
        m->q = tk_floordiv(x, d);
        m->r = tk_mod(x, d);
        m->d = d;
        m->ok = 1;
    }
    m->n = x;
}
TK_FN tk_i64 tk_divmemo_q(tk_divmemo *m, tk_i64 x, tk_i64 d) { tk_divmemo_step(m, x, d); return m->q; }
TK_FN tk_i64 tk_divmemo_r(tk_divmemo *m, tk_i64 x, tk_i64 d) { tk_divmemo_step(m, x, d); return m->r; }

/* float -> int64 like Python int(): truncation; NaN gives 0 and
 * out-of-range values saturate instead of being undefined. */
TK_FN tk_i64 tk_f2i(double x) {
    if (!(x == x)) return 0;
    if (x >= 9223372036854775807.0) return (tk_i64)0x7fffffffffffffffLL;
    if (x <= -9223372036854775808.0) return (tk_i64)(-0x7fffffffffffffffLL - 1);
    return (tk_i64)x;
}
#if defined(__cplusplus)
/* 16 bytes that CUDA kernels store as one vector: GPU chunks gather an
 * output's elements in a union with these (emit.c) and write them with
 * __stcs (st.global.cs.v4; a plain assignment may become 4 scalar stores). */
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
typedef uint4 tk_v16;
typedef uint2 tk_v8;   /* GPU streams' 8-byte loads (emit.c's stream_load; 16: tk_v16, 4: tk_u32) */
#else
struct alignas(16) tk_v16 {
    tk_u32 w[4];
};
struct alignas(8) tk_v8 {
    tk_u32 w[2];
};
#endif
#endif
/* min/max like Python's: min(a, b) is b only when b < a (NaN-safe order). */
TK_FN tk_i64 tk_mini(tk_i64 a, tk_i64 b) { return b < a ? b : a; }
TK_FN tk_i64 tk_maxi(tk_i64 a, tk_i64 b) { return b > a ? b : a; }
TK_FN float tk_minf(float a, float b) { return b < a ? b : a; }
TK_FN float tk_maxf(float a, float b) { return b > a ? b : a; }
TK_FN double tk_mind(double a, double b) { return b < a ? b : a; }
TK_FN double tk_maxd(double a, double b) { return b > a ? b : a; }
TK_FN tk_i64 tk_absi(tk_i64 a) { return a < 0 ? (tk_i64)(0 - (tk_u64)a) : a; }
TK_FN float tk_absf(float a) { return fabsf(a); }
TK_FN double tk_absd(double a) { return fabs(a); }
TK_FN float tk_sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }
TK_FN double tk_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* float32 <-> bits */
TK_FN tk_u32 tk_f2bits(float f) { union { float f; tk_u32 u; } c; c.f = f; return c.u; }
TK_FN float tk_bits2f(tk_u32 u) { union { float f; tk_u32 u; } c; c.u = u; return c.f; }
/* c ? a : b on the bits, with no branch for a compiler to take (CPU row
 * loops' vectorised lane loops, emit_expr.c; both arms already computed) */
TK_FN float tk_self(int c, float a, float b) {
    tk_u32 m = (tk_u32)0 - (tk_u32)(c != 0);
    return tk_bits2f((tk_f2bits(a) & m) | (tk_f2bits(b) & ~m));
}
TK_FN double tk_seld(int c, double a, double b) {
    union { double d; tk_u64 u; } x, y;
    x.d = a;
    y.d = b;
    tk_u64 m = (tk_u64)0 - (tk_u64)(c != 0);
    x.u = (x.u & m) | (y.u & ~m);
    return x.d;
}

/* e^x in float32 without branches or calls, so that a loop calling it
 * vectorises (glibc's expf does not, short of -ffast-math): the float32
 * exp() of every CPU kernel but the plain reference (emit_expr.c,
 * cpu_vmaths); no built-in op calls exp.
 *   Method: x = n ln2 + r with n = round(x / ln2) and |r| <= ln2 / 2, ln2
 * split in a high part with 9 significant bits (n * ln2_hi is exact for
 * |n| < 2^15) and a low part, so r carries no cancellation error; e^r by
 * its Taylor polynomial of degree 7 (truncation < 6e-9 relative on that
 * interval); 2^n put in the exponent bits in two halves, 2^(n - n/2) and
 * 2^(n/2), so that results near the overflow threshold and in the
 * subnormal range are each one rounding of e^r 2^n.
 *   Accuracy (tests/c/test_vexp.c, against float64 exp): within 1.5 ulp
 * of e^x wherever its float32 rounding is a normal number (measured: 0.92
 * with FMA contraction, 1.19 without); subnormal results within 1 unit of
 * 2^-149. x > 88.7228 (ln FLT_MAX) gives +inf, x <
 * -103.98 gives +0, +inf +inf, -inf +0, NaN NaN. The magic constant 1.5 *
 * 2^23 rounds x / ln2 to an integer in float (|x / ln2| < 2^22 after the
 * clamp) and leaves it in t's low bits, so n needs no float-to-int
 * conversion (undefined for NaN). */
TK_FN float tk_vexpf(float x) {
    const float ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;   /* ln2_hi + ln2_lo = ln 2 to 2^-32 */
    const float magic = 12582912.0f;                                 /* 1.5 * 2^23 */
    /* x clamped to [-104, 89] by bitwise selects (tk_self): C's `x < c ?
     * c : x` lets GCC branch to a folded constant and not vectorise; NaN
     * fails both comparisons and passes through */
    x = tk_self(x < -104.0f, -104.0f, x);
    x = tk_self(x > 89.0f, 89.0f, x);
    float t = x * 1.44269504088896341f + magic;
    float n = t - magic;
    float r = (x - n * ln2_hi) - n * ln2_lo;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    tk_u32 ni = tk_f2bits(t) - tk_f2bits(magic);                     /* n mod 2^32, in [-150, 129] */
    tk_u32 h = (tk_u32)((tk_i32)ni >> 1);
    return p * tk_bits2f((h + 127u) << 23) * tk_bits2f((ni - h + 127u) << 23);
}

/* tanh in float32 without branches or calls, so that a loop calling it
 * vectorises (glibc's tanhf does not): the CPU's float32 tanh() outside the
 * plain reference kernels (emit_expr.c).
 *   Method, for a = |x|: below 0.9, a + a^3 P(a^2) with P of degree 6 fitted
 * to tanh's relative error on [0, 0.9] (reweighted least squares toward
 * minimax, float32 coefficients); from 0.9, 1 - 2 / (e^(2a) + 1) with
 * tk_vexpf, which rounds to 1 from a = 9.01 and reaches it exactly when
 * e^(2a) overflows. Both are computed and one is selected bitwise; the sign
 * is x's. Accuracy (tests/c/test_vexp.c, against float64 tanh at every
 * float32 below 10 and beyond): within 2 ulp; +-0 and +-inf exact, NaN NaN. */
TK_FN float tk_vtanhf(float x) {
    float a = fabsf(x), s = a * a;
    float p = -4.85243567e-4f;
    p = p * s + 2.66504590e-3f;
    p = p * s - 8.35351739e-3f;
    p = p * s + 2.17107944e-2f;
    p = p * s - 5.39420061e-2f;
    p = p * s + 1.33331358e-1f;
    p = p * s - 3.33333284e-1f;
    float small = a + (a * s) * p;
    float big = 1.0f - 2.0f / (tk_vexpf(2.0f * a) + 1.0f);
    return copysignf(tk_self(a < 0.9f, small, big), x);
}

/* erf in float32 without branches or calls (glibc's erff does not
 * vectorise either): the CPU's float32 erf() outside the plain reference
 * kernels. For a = |x|: below 0.875, a + a Q(a^2) with Q of degree 6 fitted
 * to erf's relative error; from there 1 - e^(-a^2) R(t), t = 1 / (1 + a / 2),
 * R of degree 8 fitted to erfc's absolute error on [0.875, 4], a clamped
 * to 4 (erf rounds to 1 from 3.92). Fitted as tk_vtanhf's; the sign is x's.
 * Accuracy (tests/c/test_vexp.c): within 2 ulp; +-0, +-inf exact, NaN NaN. */
TK_FN float tk_verff(float x) {
    float a = fabsf(x), s = a * a;
    float q = 8.89248622e-05f;
    q = q * s - 8.25958734e-04f;
    q = q * s + 5.21080941e-03f;
    q = q * s - 2.68631559e-02f;
    q = q * s + 1.12837605e-01f;
    q = q * s - 3.76126379e-01f;
    q = q * s + 1.28379166e-01f;
    float small = a + a * q;
    float b = tk_self(a > 4.0f, 4.0f, a);
    float t = 1.0f / (1.0f + 0.5f * b);
    float r = -3.59683484e-02f;
    r = r * t + 2.79516548e-01f;
    r = r * t - 7.81496704e-01f;
    r = r * t + 9.04854774e-01f;
    r = r * t - 3.37314039e-01f;
    r = r * t + 4.49563473e-01f;
    r = r * t + 2.32146725e-01f;
    r = r * t + 2.89148808e-01f;
    r = r * t - 4.37760551e-04f;
    float big = 1.0f - tk_vexpf(-(b * b)) * r;
    return copysignf(tk_self(a < 0.875f, small, big), x);
}

/* sigmoid in float32 on tk_vexpf: the CPU's float32 sigmoid() outside the
 * plain reference kernels. -inf gives 0, +inf 1, NaN NaN. */
TK_FN float tk_vsigmoidf(float x) { return 1.0f / (1.0f + tk_vexpf(-x)); }

/* bfloat16: upper half of a float32; rounding to nearest even, NaN kept. */
TK_FN float tk_bf16_to_f32(tk_u16 h) { return tk_bits2f((tk_u32)h << 16); }
TK_FN tk_u16 tk_f32_to_bf16(float f) {
    tk_u32 u = tk_f2bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (tk_u16)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (tk_u16)(u >> 16);
}

/* IEEE binary16 <-> float32, rounding to nearest even. The _soft versions
 * are portable bit manipulation with branches (the tests' reference); the
 * CPU kernels use the _lanes ones, the GPU its cvt instructions. Tests
 * check them against the compiler's _Float16 on every half value and on
 * float32 bit patterns (test_builtin_cpu). */
TK_FN float tk_f16_to_f32_soft(tk_u16 h) {
    tk_u32 sign = (tk_u32)(h & 0x8000u) << 16;
    tk_u32 exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1fu) return tk_bits2f(sign | 0x7f800000u | (man << 13));
    if (exp != 0) return tk_bits2f(sign | ((exp + 112u) << 23) | (man << 13));
    if (man == 0) return tk_bits2f(sign);
    /* subnormal: value = man * 2^-24 */
    float v = (float)man * 5.9604644775390625e-8f;
    return sign ? -v : v;
}
TK_FN tk_u16 tk_f32_to_f16_soft(float f) {
    tk_u32 u = tk_f2bits(f);
    tk_u16 sign = (tk_u16)((u >> 16) & 0x8000u);
    tk_u32 a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (tk_u16)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) return (tk_u16)(sign | 0x7c00u);  /* rounds to inf */
    if (a >= 0x38800000u) {                                  /* normal half */
        tk_u32 r = a - 0x38000000u;                          /* rebias 127 -> 15 */
        r += 0xfffu + ((r >> 13) & 1u);
        return (tk_u16)(sign | (r >> 13));
    }
    if (a < 0x33000000u) return sign;                        /* below half of min subnormal */
    {   /* subnormal half: shift the 24-bit significand, round to nearest even */
        tk_u32 e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
        tk_u32 shift = 126u - e;                             /* 14..24 */
        tk_u32 q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q += 1u;
        return (tk_u16)(sign | q);
    }
}

/* The same conversions with masks instead of branches: the CPU's (below),
 * because GCC vectorises them where a loop allows. GCC 12 vectorises no
 * _Float16 conversion without AVX512-FP16 (baseline x86-64 even calls
 * libgcc per element), and one such conversion keeps its whole loop
 * scalar: an element-wise float16 op ran at about a fifth of its bfloat16 speed.
 * Exact like the _soft ones (the same NaN payloads). Subnormal halves go
 * through an integer-to-float conversion one way and the FPU's own rounding
 * at 2^-24 (x + 0.5, round to nearest even) the other; no float32 denormal
 * is an operand that matters, so DAZ/FTZ (torch.set_flush_denormal) does
 * not change a result. */
TK_FN float tk_f16_to_f32_lanes(tk_u16 h) {
    tk_u32 sign = (tk_u32)(h & 0x8000u) << 16, em = h & 0x7fffu;
    tk_u32 infnan = 0u - (tk_u32)(em >= 0x7c00u), sub = 0u - (tk_u32)(em < 0x400u);
    tk_u32 norm = (em << 13) + (112u << 23) + (infnan & (112u << 23));   /* rebias 15 -> 127 (255) */
    tk_u32 s = tk_f2bits((float)(tk_i32)em * 5.9604644775390625e-8f);   /* em * 2^-24 */
    return tk_bits2f((s & sub) | (norm & ~sub) | sign);
}
TK_FN tk_u16 tk_f32_to_f16_lanes(float f) {
    tk_u32 u = tk_f2bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    tk_u32 nan = 0u - (tk_u32)(a > 0x7f800000u), inf = 0u - (tk_u32)(a >= 0x477ff000u);
    tk_u32 sub = 0u - (tk_u32)(a < 0x38800000u);
    tk_u32 r = a - 0x38000000u;                                       /* normal: rebias 127 -> 15 */
    tk_u32 hn = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
    tk_u32 hs = tk_f2bits(tk_bits2f(a) + 0.5f) - 0x3f000000u;        /* ulp of 0.5 = 2^-24 */
    tk_u32 hv = (hs & sub) | (hn & ~sub);
    hv = (0x7c00u & inf) | (hv & ~inf);
    hv = ((0x7e00u | ((a >> 13) & 0x3ffu)) & nan) | (hv & ~nan);
    return (tk_u16)(sign | hv);
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
/* the GPU's conversion instructions (IEEE, round to nearest even): the
 * bit manipulation above cost about 30 instructions a load in tiled loops */
TK_FN float tk_f16_to_f32(tk_u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
TK_FN tk_u16 tk_f32_to_f16(float f) {
    tk_u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
#else
TK_FN float tk_f16_to_f32(tk_u16 h) { return tk_f16_to_f32_lanes(h); }
TK_FN tk_u16 tk_f32_to_f16(float f) { return tk_f32_to_f16_lanes(f); }
#endif


/* Explicit vectors for CPU lane tiles (GNU C vector extensions, GCC and
 * Clang): one 512-bit vector of float32 or float64 lanes, lane masks of the
 * same width (-1 set, 0 clear). Where the compiler has no such extension,
 * TK_VX is 0 and kernels keep their `omp simd` loops. */
#if defined(__GNUC__) && !defined(__CUDACC__) && !defined(__CUDACC_RTC__)
#define TK_VX 1
/* without the run-time choice (TK_WIDE_DISPATCH), kernels take their wide
 * bodies where the compiler targets AVX-512 (-march=native on such a CPU),
 * or everywhere with TK_FORCE_WIDE (the sanitizer build, which checks them
 * on any CPU) */
#if defined(__AVX512F__) || defined(TK_FORCE_WIDE)
#define TK_WIDE_STATIC 1
#endif
/* the 256-bit bodies: compiled where they can be picked (the run-time
 * choice, a compiler targeting AVX2 without AVX-512, TK_FORCE_WIDE) */
#if TK_WIDE_DISPATCH || (defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)) || defined(TK_FORCE_WIDE)
#define TK_VXH 1
#else
#define TK_VXH 0
#endif
/* the 512-bit bodies: compiled only where they can be picked (the run-time
 * choice, a compiler targeting AVX-512, TK_FORCE_WIDE); a run-time spec
 * compiled with -march=native on an AVX2 CPU leaves them out (issue 26:
 * they were half of its compile and nothing could call them) */
#if TK_WIDE_DISPATCH || defined(TK_WIDE_STATIC)
#define TK_VXW 1
#else
#define TK_VXW 0
#endif
/* an explicit-vector loop runs in a function of its own (see emit.c) */
#define TK_NOINLINE __attribute__((noinline, unused))
/* a loop over a tile's copies (group rows, lane blocks) in such a function:
 * unrolled whole, so that its arrays of accumulators, row pointers and loads
 * become registers (emit_vec.c). Defined beforehand (-DTK_UNROLL=), the
 * compiler decides alone: 1 s less to compile the rwkv copy, its calls up to
 * 8 % slower (bench/results/2026-12-06-cpu-vector-loops.txt). */
#if !defined(TK_UNROLL) && defined(__clang__)
#define TK_UNROLL _Pragma("clang loop unroll(full)")
#elif !defined(TK_UNROLL)
#define TK_UNROLL _Pragma("GCC unroll 64")
#endif
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#elif defined(__has_warning)
#if __has_warning("-Wpsabi")
#pragma clang diagnostic ignored "-Wpsabi"
#endif
#endif
typedef float tk_vf32 __attribute__((vector_size(64)));
typedef int tk_vm32 __attribute__((vector_size(64)));
typedef double tk_vf64 __attribute__((vector_size(64)));
typedef long long tk_vm64 __attribute__((vector_size(64)));
/* 256-bit: the x86-64-v3 bodies (h: half) */
typedef float tk_vf32h __attribute__((vector_size(32)));
typedef int tk_vm32h __attribute__((vector_size(32)));
typedef double tk_vf64h __attribute__((vector_size(32)));
typedef long long tk_vm64h __attribute__((vector_size(32)));
#if defined(__clang__) || __GNUC__ >= 12
#define TK_VREV16(v) __builtin_shufflevector(v, v, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define TK_VREV8(v) __builtin_shufflevector(v, v, 7, 6, 5, 4, 3, 2, 1, 0)
#define TK_VREV4(v) __builtin_shufflevector(v, v, 3, 2, 1, 0)
#else
#define TK_VREV16(v) __builtin_shuffle(v, (tk_vm32){15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0})
#define TK_VREV8(v) __builtin_shuffle(v, (tk_vm64){7, 6, 5, 4, 3, 2, 1, 0})
#define TK_VREV8H(v) __builtin_shuffle(v, (tk_vm32h){7, 6, 5, 4, 3, 2, 1, 0})
#define TK_VREV4(v) __builtin_shuffle(v, (tk_vm64h){3, 2, 1, 0})
#endif
#if defined(__clang__) || __GNUC__ >= 12
#define TK_VREV8H(v) TK_VREV8(v)
#endif
/* The extent of a tensor's elements around its data pointer: offsets in
 * [tk_span_lo, tk_span_hi) (empty tensors are never read). */
TK_FN tk_i64 tk_span_lo(const tk_ktensor *t) {
    tk_i64 s = 0;
    for (tk_i64 i = 0; i < t->ndim; i++)
        if (t->size[i] > 0 && t->stride[i] < 0) s += (t->size[i] - 1) * t->stride[i];
    return s;
}
TK_FN tk_i64 tk_span_hi(const tk_ktensor *t) {
    tk_i64 s = 1;
    for (tk_i64 i = 0; i < t->ndim; i++)
        if (t->size[i] > 0 && t->stride[i] > 0) s += (t->size[i] - 1) * t->stride[i];
    return s;
}
/* (helpers that take vectors are macros: GCC notes an ABI change for
 * 64-byte vector parameters in every clone without AVX-512) */
#define TK_VX_DEFINE(S, MS, T, I)                                                              \
    static inline tk_v##S tk_vld_##S(const T *p) { tk_v##S v; __builtin_memcpy(&v, p, sizeof v); return v; } \
    static inline tk_v##MS tk_vld_##MS(const I *p) { tk_v##MS v; __builtin_memcpy(&v, p, sizeof v); return v; }
TK_VX_DEFINE(f32, m32, float, int)
TK_VX_DEFINE(f64, m64, double, long long)
TK_VX_DEFINE(f32h, m32h, float, int)
TK_VX_DEFINE(f64h, m64h, double, long long)
#define tk_vst_f32(p, v) __builtin_memcpy((p), &(v), 64)
#define tk_vst_f64(p, v) __builtin_memcpy((p), &(v), 64)
#define tk_vst_f32h(p, v) __builtin_memcpy((p), &(v), 32)
#define tk_vst_f64h(p, v) __builtin_memcpy((p), &(v), 32)
/* m ? a : b lane by lane */
#define tk_vsel_f32(m, a, b) ((tk_vf32)(((tk_vm32)(a) & (m)) | ((tk_vm32)(b) & ~(m))))
#define tk_vsel_f64(m, a, b) ((tk_vf64)(((tk_vm64)(a) & (m)) | ((tk_vm64)(b) & ~(m))))
#define tk_vrev_f32(v) TK_VREV16(v)
#define tk_vrev_m32(v) TK_VREV16(v)
#define tk_vrev_f64(v) TK_VREV8(v)
#define tk_vrev_m64(v) TK_VREV8(v)
#define tk_vsel_f32h(m, a, b) ((tk_vf32h)(((tk_vm32h)(a) & (m)) | ((tk_vm32h)(b) & ~(m))))
#define tk_vsel_f64h(m, a, b) ((tk_vf64h)(((tk_vm64h)(a) & (m)) | ((tk_vm64h)(b) & ~(m))))
#define tk_vrev_f32h(v) TK_VREV8H(v)
#define tk_vrev_m32h(v) TK_VREV8H(v)
#define tk_vrev_f64h(v) TK_VREV4(v)
#define tk_vrev_m64h(v) TK_VREV4(v)
/* a vector with x in every lane */
#define TK_VSPLAT(VT, N, x) __extension__({ VT tk_s_; const __typeof__(tk_s_[0]) tk_x_ = (x);   \
    for (int tk_q_ = 0; tk_q_ < N; ++tk_q_) tk_s_[tk_q_] = tk_x_;                           \
    tk_s_; })
#define tk_vsplat_f32(x) TK_VSPLAT(tk_vf32, 16, x)
#define tk_vsplat_f64(x) TK_VSPLAT(tk_vf64, 8, x)
#define tk_vsplat_f32h(x) TK_VSPLAT(tk_vf32h, 8, x)
#define tk_vsplat_f64h(x) TK_VSPLAT(tk_vf64h, 4, x)
/* elements off .. off+N-1 of p where m is set (the others unspecified):
 * one load when the window lies in the tensor's extent [lo, hi), else only
 * the lanes that are set */
#define TK_VLDM(VT, MT, N, p, off, lo, hi, m) __extension__({                                  \
    const tk_i64 tk_o_ = (off);                                                                \
    VT tk_v_;                                                                                  \
    if (tk_o_ >= (lo) && tk_o_ <= (hi) - N) {                                                  \
        __builtin_memcpy(&tk_v_, (p) + tk_o_, sizeof tk_v_);                                   \
    } else {                                                                                   \
        MT tk_m_ = (m);                                                                        \
        for (int tk_q_ = 0; tk_q_ < N; ++tk_q_) tk_v_[tk_q_] = tk_m_[tk_q_] ? (p)[tk_o_ + tk_q_] : 0; \
    }                                                                                          \
    tk_v_; })
#define tk_vldm_f32(p, off, lo, hi, m) TK_VLDM(tk_vf32, tk_vm32, 16, p, off, lo, hi, m)
#define tk_vldm_f64(p, off, lo, hi, m) TK_VLDM(tk_vf64, tk_vm64, 8, p, off, lo, hi, m)
#define tk_vldm_f32h(p, off, lo, hi, m) TK_VLDM(tk_vf32h, tk_vm32h, 8, p, off, lo, hi, m)
/* bfloat16 elements widened to float32 lanes (the bits shifted up by 16) */
typedef tk_u16 tk_vu16x16 __attribute__((vector_size(32)));
typedef tk_u16 tk_vu16x8 __attribute__((vector_size(16)));
static inline tk_vu16x16 tk_vld_u16x16(const tk_u16 *p) { tk_vu16x16 v; __builtin_memcpy(&v, p, sizeof v); return v; }
static inline tk_vu16x8 tk_vld_u16x8(const tk_u16 *p) { tk_vu16x8 v; __builtin_memcpy(&v, p, sizeof v); return v; }
#if defined(__clang__) || __GNUC__ >= 9
#define TK_VWIDEN(MT, N, u) __builtin_convertvector(u, MT)
#else
#define TK_VWIDEN(MT, N, u) __extension__({ MT tk_u_; const __typeof__(u) tk_s_ = (u);             \
    for (int tk_q_ = 0; tk_q_ < N; ++tk_q_) tk_u_[tk_q_] = tk_s_[tk_q_];                       \
    tk_u_; })
#endif
/* x86: the 16-bit lanes widen through the instructions made for it
 * (VPMOVZXWD, VCVTPH2PS); GCC splits a 512-bit __builtin_convertvector of
 * 16-bit lanes into 128-bit halves and reinserts them, five shuffles per
 * vector. Only where the vector bodies are compiled for the instruction set
 * (the run-time choice's target attributes, or -mavx512f / -mavx2); the
 * sanitizer build (TK_FORCE_WIDE on any target) takes the generic lines. */
#if defined(__x86_64__) && (TK_WIDE_DISPATCH || defined(__AVX512F__) || defined(__AVX2__))
#include <immintrin.h>
#endif
#if defined(__x86_64__) && (TK_WIDE_DISPATCH || defined(__AVX512F__))
#define TK_VLDB16(p) ((tk_vf32)_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(p))), 16))
#define TK_VLDE16(p) ((tk_vf32)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p))))
#define tk_vbce_f32(x) ((tk_vf32)_mm512_cvtph_ps(_mm256_set1_epi16((short)(x))))
#else
#define TK_VLDB16(p) ((tk_vf32)(TK_VWIDEN(tk_vm32, 16, tk_vld_u16x16(p)) << 16))
#define TK_VLDE16(p) TK_VLDE(tk_vf32, 16, p)
#define tk_vbce_f32(x) tk_vsplat_f32(tk_f16_to_f32(x))
#endif
#if defined(__x86_64__) && (TK_WIDE_DISPATCH || defined(__AVX2__))
#define TK_VLDB8(p) ((tk_vf32h)_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p))), 16))
#define TK_VLDE8(p) ((tk_vf32h)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p))))
#define tk_vbce_f32h(x) ((tk_vf32h)_mm256_cvtph_ps(_mm_set1_epi16((short)(x))))
/* AVX2 broadcasts only from memory or a vector register: the 16 bits in
 * every word (one load-and-broadcast), then the 32-bit lanes shifted */
#define tk_vbcb_f32h(x) ((tk_vf32h)_mm256_slli_epi32(_mm256_set1_epi16((short)(x)), 16))
#else
#define tk_vbcb_f32h(x) ((tk_vf32h)((tk_vm32h){0} + (int)((tk_u32)(x) << 16)))
#define TK_VLDB8(p) ((tk_vf32h)(TK_VWIDEN(tk_vm32h, 8, tk_vld_u16x8(p)) << 16))
#define TK_VLDE8(p) TK_VLDE(tk_vf32h, 8, p)
#define tk_vbce_f32h(x) tk_vsplat_f32h(tk_f16_to_f32(x))
#endif
/* float16 lanes, one by one (the generic lines) */
#define TK_VLDE(VT, N, p) __extension__({ VT tk_e_; const tk_u16 *tk_p_ = (p);                 \
    for (int tk_q_ = 0; tk_q_ < N; ++tk_q_) tk_e_[tk_q_] = tk_f16_to_f32(tk_p_[tk_q_]);        \
    tk_e_; })
#define tk_vldb_f32(p) TK_VLDB16(p)
#define tk_vldb_f32h(p) TK_VLDB8(p)
#define tk_vlde_f32(p) TK_VLDE16(p)
#define tk_vlde_f32h(p) TK_VLDE8(p)
/* a bfloat16 element in every float32 lane: its bits shifted up by 16 in
 * an integer register, then one broadcast (not a move to a vector register
 * and a second broadcast); vector + scalar, which GCC always lowers to one
 * broadcast (a TK_VSPLAT lane loop can stay sixteen inserts in a large
 * function) */
#define tk_vbcb_f32(x) ((tk_vf32)((tk_vm32){0} + (int)((tk_u32)(x) << 16)))
/* masked windows of 16-bit floats: C is B (bfloat16) or E (float16) */
#define TK_VLDM16(VT, MT, N, C, p, off, lo, hi, m) __extension__({                             \
    const tk_i64 tk_o_ = (off);                                                                \
    VT tk_v_;                                                                                  \
    if (tk_o_ >= (lo) && tk_o_ <= (hi) - N) {                                                  \
        tk_v_ = TK_VLD##C##N((p) + tk_o_);                                                     \
    } else {                                                                                   \
        MT tk_m_ = (m);                                                                        \
        for (int tk_q_ = 0; tk_q_ < N; ++tk_q_)                                                \
            tk_v_[tk_q_] = tk_m_[tk_q_] ? TK_VLDM16_##C((p)[tk_o_ + tk_q_]) : 0;               \
    }                                                                                          \
    tk_v_; })
#define TK_VLDM16_B(x) tk_bf16_to_f32(x)
#define TK_VLDM16_E(x) tk_f16_to_f32(x)
#define tk_vldmb_f32(p, off, lo, hi, m) TK_VLDM16(tk_vf32, tk_vm32, 16, B, p, off, lo, hi, m)
#define tk_vldmb_f32h(p, off, lo, hi, m) TK_VLDM16(tk_vf32h, tk_vm32h, 8, B, p, off, lo, hi, m)
#define tk_vldme_f32(p, off, lo, hi, m) TK_VLDM16(tk_vf32, tk_vm32, 16, E, p, off, lo, hi, m)
#define tk_vldme_f32h(p, off, lo, hi, m) TK_VLDM16(tk_vf32h, tk_vm32h, 8, E, p, off, lo, hi, m)
#define tk_vldm_f64h(p, off, lo, hi, m) TK_VLDM(tk_vf64h, tk_vm64h, 4, p, off, lo, hi, m)
#else
#define TK_VX 0
#define TK_VXH 0
#define TK_VXW 0
#endif

#endif
