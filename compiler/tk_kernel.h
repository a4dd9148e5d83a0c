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

#if defined(__CUDACC_RTC__)
typedef signed char tk_i8;
typedef unsigned char tk_u8;
typedef short tk_i16;
typedef int tk_i32;
typedef long long tk_i64;
typedef unsigned long long tk_u64;
typedef unsigned int tk_u32;
typedef unsigned short tk_u16;
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
#define TK_MAX_TENSORS 8    /* tensor parameters + outputs of one op */
#define TK_MAX_INTS 32      /* int/bool scalars + symbolic dims */
#define TK_MAX_FLOATS 8     /* float scalars */

/* One tensor as a kernel sees it: sizes and strides in elements. */
typedef struct tk_ktensor {
    void *data;
    tk_i64 size[TK_MAX_DIMS];
    tk_i64 stride[TK_MAX_DIMS];
    tk_i64 ndim;
} tk_ktensor;

/* Everything one launch needs. Slot order is fixed by the op's parameter
 * order: t[] holds tensor parameters then outputs; i[] int and bool scalars
 * then symbolic dims (in order of first binding); f[] float scalars. */
typedef struct tk_kargs {
    tk_ktensor t[TK_MAX_TENSORS];
    tk_i64 i[TK_MAX_INTS];
    double f[TK_MAX_FLOATS];
    tk_i64 numel;       /* size of the index space */
    tk_i64 nbatch;      /* number of '...' dims of the loop output */
} tk_kargs;

typedef void (*tk_cpu_fn)(const tk_kargs *a, tk_i64 begin, tk_i64 end);

/* ---- helpers used by generated code ---------------------------------- */

/* CPU kernels are compiled for several instruction sets and the best one is
 * picked at load time (GCC target_clones); bodies are force-inlined into
 * each clone and into their unit-stride specialisation. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(TK_NO_CLONES) && !defined(__CUDACC__) && !defined(__CUDACC_RTC__)
#define TK_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TK_CPU_CLONES
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

/* Python floor division and modulo; x // 0 and x % 0 give 0, and
 * INT64_MIN // -1 wraps instead of trapping. */
TK_FN tk_i64 tk_floordiv(tk_i64 a, tk_i64 b) {
    if (b == 0) return 0;
    if (b == -1) return (tk_i64)(0 - (tk_u64)a);
    tk_i64 q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;
    return q;
}
TK_FN tk_i64 tk_mod(tk_i64 a, tk_i64 b) {
    if (b == 0 || b == -1) return 0;
    tk_i64 r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}
TK_FN float tk_fmodf_py(float a, float b) {
    float r = fmodf(a, b);
    if (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) r += b;
    return r;
}
TK_FN double tk_fmod_py(double a, double b) {
    double r = fmod(a, b);
    if (r != 0.0 && ((r < 0.0) != (b < 0.0))) r += b;
    return r;
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

/* bfloat16: upper half of a float32; rounding to nearest even, NaN kept. */
TK_FN float tk_bf16_to_f32(tk_u16 h) { return tk_bits2f((tk_u32)h << 16); }
TK_FN tk_u16 tk_f32_to_bf16(float f) {
    tk_u32 u = tk_f2bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (tk_u16)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (tk_u16)(u >> 16);
}

/* IEEE binary16 <-> float32, rounding to nearest even. The _soft versions
 * are portable bit manipulation; on x86-64 GCC the compiler's _Float16 is
 * used instead, which becomes the F16C instructions in the x86-64-v3/v4
 * clones of CPU kernels (tests check the two agree on every value). */
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

#if defined(__FLT16_MAX__) && defined(__x86_64__) && !defined(__CUDACC__) && !defined(__CUDACC_RTC__)
TK_FN float tk_f16_to_f32(tk_u16 h) {
    union { tk_u16 u; _Float16 f; } c;
    c.u = h;
    return (float)c.f;
}
TK_FN tk_u16 tk_f32_to_f16(float f) {
    union { tk_u16 u; _Float16 f; } c;
    c.f = (_Float16)f;
    return c.u;
}
#else
TK_FN float tk_f16_to_f32(tk_u16 h) { return tk_f16_to_f32_soft(h); }
TK_FN tk_u16 tk_f32_to_f16(float f) { return tk_f32_to_f16_soft(f); }
#endif

#endif
