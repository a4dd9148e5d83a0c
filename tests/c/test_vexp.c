/* test_vexp.c - tk_vexpf (compiler/tk_kernel.h), the vectorisable float32
 * exp of the row loops' vectorised inner loops, against float64 exp (and
 * tk_vtanhf and tk_verff, the CPU's float32 tanh and erf, against float64:
 * test_vtanhf, test_verff): every
 * float32 in [-110, 95] at a stride of 64 bit patterns (about 32 million
 * values, both signs, the subnormal results and both thresholds included),
 * the values around the overflow and underflow thresholds one by one, and
 * the specials. Normal results: within 1.5 ulp of float64 exp (in units of its
 * float32 rounding); subnormal ones: within 1 unit of 2^-149; beyond the thresholds
 * +inf and +0; inf, -inf and NaN as exp gives them; and a loop of calls,
 * which GCC vectorises at -O3, gives what single calls give. Also the
 * bitwise selects tk_self and tk_seld of the same loops. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "tk_kernel.h"
#include "tk_test.h"

static float bits2f(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The error of got in units of the last place of the float32 rounding of
 * exp(x) (normal results), or of 2^-149 (subnormal ones); -1: an
 * overflow/underflow/special mismatch. */
static double ulp_error(float x, float got) {
    double ref = exp((double)x);
    float want = (float)ref;
    if (isinf(want) || want == 0.0f) {
        /* beyond a threshold: +inf or +0, allowing the last representable
         * value on the other side of the boundary */
        if (got == want) return 0.0;
        if (isinf(want) && got == FLT_MAX && x < 88.75f) return 1.0;
        if (want == 0.0f && got == bits2f(1) && x > -104.0f) return 1.0;
        return -1.0;
    }
    if (!isfinite(got)) return -1.0;
    double unit = want < FLT_MIN ? ldexp(1.0, -149) : ldexp(1.0, ilogb(want) - 23);
    return fabs((double)got - ref) / unit;
}

/* The error of tk_vtanhf(x) in units of the last place of the float32
 * rounding of tanh(x) (2^-149 for subnormal results). */
static double tanh_ulp_error(float x) {
    double ref = tanh((double)x);
    float want = (float)ref, got = tk_vtanhf(x);
    if (!isfinite(got)) return 1e9;
    double unit = fabsf(want) < FLT_MIN ? ldexp(1.0, -149) : ldexp(1.0, ilogb(want) - 23);
    return fabs((double)got - ref) / unit;
}

/* The same for tk_verff against float64 erf. */
static double erf_ulp_error(float x) {
    double ref = erf((double)x);
    float want = (float)ref, got = tk_verff(x);
    if (!isfinite(got)) return 1e9;
    double unit = fabsf(want) < FLT_MIN ? ldexp(1.0, -149) : ldexp(1.0, ilogb(want) - 23);
    return fabs((double)got - ref) / unit;
}

/* tk_verff as tk_vtanhf below: [0, 6] at a stride of 16, both signs; the
 * values near the switch at 0.875, the clamp at 4 and where erf reaches 1. */
static void test_verff(void) {
    double worst = 0.0;
    float worst_x = 0.0f;
    long n = 0, bad = 0;
    for (uint32_t u = 0; u <= 0x40c00000u; u += 16) {   /* 0x40c00000 = 6.0f */
        float x = bits2f(u), neg = tk_verff(-x), pos = tk_verff(x);
        double e = erf_ulp_error(x);
        n++;
        if (e > 2.0 || memcmp(&(float){-pos}, &neg, 4) != 0) {
            if (bad++ < 5) fprintf(stderr, "erf x = %.9g: got %.9g, erf %.17g\n", x, pos, erf((double)x));
        } else if (e > worst) {
            worst = e, worst_x = x;
        }
    }
    const float edges[] = {0.875f, 4.0f, 3.92f};
    for (int k = 0; k < 3; k++) {
        float x = edges[k];
        for (int i = 0; i < 4096; i++) x = nextafterf(x, -INFINITY);
        for (int i = 0; i < 8192; i++, x = nextafterf(x, INFINITY)) {
            double e = erf_ulp_error(x);
            n++;
            if (e > 2.0 && bad++ < 10) fprintf(stderr, "erf x = %.9g: got %.9g\n", x, tk_verff(x));
            if (e > worst && e <= 2.0) worst = e, worst_x = x;
        }
    }
    CHECK(bad == 0);
    CHECK(tk_verff(INFINITY) == 1.0f && tk_verff(-INFINITY) == -1.0f && tk_verff(1e30f) == 1.0f);
    CHECK(tk_verff(0.0f) == 0.0f && !signbit(tk_verff(0.0f)) && signbit(tk_verff(-0.0f)));
    CHECK(isnan(tk_verff(NAN)));
    CHECK(fabs((double)tk_verff(FLT_MIN / 8) - erf((double)(FLT_MIN / 8))) <= ldexp(1.0, -149));
    printf("tk_verff: %ld values, worst %.3f ulp (x = %.9g)\n", n, worst, worst_x);
}

/* tk_vtanhf: every float32 in [0, 10] at a stride of 16 bit patterns (and
 * its negation, which must be the exact negative), every value near the
 * switch at 0.9 and where the result reaches 1, within 2 ulp; the specials;
 * a vectorised loop as single calls. */
static void test_vtanhf(void) {
    double worst = 0.0;
    float worst_x = 0.0f;
    long n = 0, bad = 0;
    for (uint32_t u = 0; u <= 0x41200000u; u += 16) {   /* 0x41200000 = 10.0f */
        float x = bits2f(u), neg = tk_vtanhf(-x), pos = tk_vtanhf(x);
        double e = tanh_ulp_error(x);
        n++;
        if (e > 2.0 || memcmp(&(float){-pos}, &neg, 4) != 0) {
            if (bad++ < 5) fprintf(stderr, "tanh x = %.9g: got %.9g, tanh %.17g\n", x, pos, tanh((double)x));
        } else if (e > worst) {
            worst = e, worst_x = x;
        }
    }
    const float edges[] = {0.9f, 9.01f, 1e-4f};
    for (int k = 0; k < 3; k++) {
        float x = edges[k];
        for (int i = 0; i < 4096; i++) x = nextafterf(x, -INFINITY);
        for (int i = 0; i < 8192; i++, x = nextafterf(x, INFINITY)) {
            double e = tanh_ulp_error(x);
            n++;
            if (e > 2.0 && bad++ < 10) fprintf(stderr, "tanh x = %.9g: got %.9g\n", x, tk_vtanhf(x));
            if (e > worst && e <= 2.0) worst = e, worst_x = x;
        }
    }
    CHECK(bad == 0);
    CHECK(tk_vtanhf(INFINITY) == 1.0f && tk_vtanhf(-INFINITY) == -1.0f && tk_vtanhf(50.0f) == 1.0f);
    CHECK(tk_vtanhf(0.0f) == 0.0f && !signbit(tk_vtanhf(0.0f)) && signbit(tk_vtanhf(-0.0f)));
    CHECK(isnan(tk_vtanhf(NAN)) && tk_vtanhf(FLT_MIN / 8) == FLT_MIN / 8);
    enum { N = 4099 };
    static float xs[N], ys[N];
    for (int i = 0; i < N; i++) xs[i] = -12.0f + 24.0f * (float)i / (float)(N - 1);
    xs[7] = NAN, xs[8] = INFINITY, xs[9] = -INFINITY;
    for (int i = 0; i < N; i++) ys[i] = tk_vtanhf(xs[i]);
    int same = 1;
    for (int i = 0; i < N; i++) {
        float one = tk_vtanhf(xs[i]);
        same &= (isnan(one) && isnan(ys[i])) || one == ys[i];
    }
    CHECK(same);
    printf("tk_vtanhf: %ld values, worst %.3f ulp (x = %.9g)\n", n, worst, worst_x);
}

int main(void) {
    double worst = 0.0, worst_sub = 0.0;
    float worst_x = 0.0f;
    long n = 0, bad = 0;
    /* a stride through both signs' bit patterns, |x| up to 110 */
    for (uint32_t sign = 0; sign < 2; sign++)
        for (uint32_t u = 0; u <= 0x42dc0000u; u += 64) {   /* 0x42dc0000 = 110.0f */
            float x = bits2f(u | (sign << 31));
            if (!sign && x > 95.0f) break;
            float got = tk_vexpf(x);
            double e = ulp_error(x, got);
            n++;
            if (e < 0 || e > 1.5) {
                if (bad++ < 5) fprintf(stderr, "x = %.9g: got %.9g, exp %.17g\n", x, got, exp((double)x));
                continue;
            }
            if ((float)exp((double)x) < FLT_MIN) worst_sub = e > worst_sub ? e : worst_sub;
            else if (e > worst) worst = e, worst_x = x;
        }
    /* every float32 near the thresholds */
    const float edges[] = {88.72283935546875f, -87.33654f, -103.27893f, -103.97208f, 0.0f, -0.0f};
    for (int k = 0; k < (int)(sizeof edges / sizeof edges[0]); k++) {
        float x = edges[k];
        for (int i = 0; i < 4096; i++) x = nextafterf(x, -INFINITY);
        for (int i = 0; i < 8192; i++, x = nextafterf(x, INFINITY)) {
            double e = ulp_error(x, tk_vexpf(x));
            n++;
            if (e < 0 || e > 1.5) {
                if (bad++ < 10) fprintf(stderr, "x = %.9g: got %.9g, exp %.17g\n", x, tk_vexpf(x), exp((double)x));
            }
        }
    }
    CHECK(bad == 0);
    /* specials */
    CHECK(tk_vexpf(INFINITY) == INFINITY);
    CHECK(tk_vexpf(-INFINITY) == 0.0f && !signbit(tk_vexpf(-INFINITY)));
    CHECK(isnan(tk_vexpf(NAN)));
    CHECK(isnan(tk_vexpf(-NAN)));
    CHECK(tk_vexpf(0.0f) == 1.0f && tk_vexpf(-0.0f) == 1.0f);
    CHECK(tk_vexpf(1000.0f) == INFINITY && tk_vexpf(-1000.0f) == 0.0f);
    CHECK(tk_vexpf(FLT_MAX) == INFINITY && tk_vexpf(-FLT_MAX) == 0.0f);
    CHECK(fabs((double)tk_vexpf(1.0f) - exp(1.0)) <= 1.5 * FLT_EPSILON * 2.0);
    /* a loop of calls (vectorised at -O3) computes the same values as single calls */
    enum { N = 4099 };
    static float xs[N], ys[N];
    for (int i = 0; i < N; i++) xs[i] = -110.0f + 205.0f * (float)i / (float)(N - 1);
    xs[7] = NAN, xs[8] = INFINITY, xs[9] = -INFINITY;
    for (int i = 0; i < N; i++) ys[i] = tk_vexpf(xs[i]);
    int same = 1;
    for (int i = 0; i < N; i++) {
        float one = tk_vexpf(xs[i]);
        same &= (isnan(one) && isnan(ys[i])) || one == ys[i];
    }
    CHECK(same);
    /* tk_self / tk_seld (the vectorised loops' selects): the chosen arm's
     * bits exactly, NaN, -0 and infinities included; any nonzero c picks a */
    const float fa[] = {1.5f, -0.0f, NAN, INFINITY, -INFINITY, FLT_MIN / 4};
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++) {
            float s1 = tk_self(1, fa[i], fa[j]), s0 = tk_self(0, fa[i], fa[j]), s7 = tk_self(-7, fa[i], fa[j]);
            CHECK(memcmp(&s1, &fa[i], 4) == 0 && memcmp(&s7, &fa[i], 4) == 0 && memcmp(&s0, &fa[j], 4) == 0);
            double da = fa[i], db = fa[j], d1 = tk_seld(1, da, db), d0 = tk_seld(0, da, db);
            CHECK(memcmp(&d1, &da, 8) == 0 && memcmp(&d0, &db, 8) == 0);
        }
    printf("tk_vexpf: %ld values, worst %.3f ulp (x = %.9g) on normal results, %.3f units of 2^-149 on subnormal ones\n",
           n, worst, worst_x, worst_sub);
    CHECK(worst <= 1.5 && worst_sub <= 1.0);
    test_vtanhf();
    test_verff();
    return tk_test_report("test_vexp");
}
