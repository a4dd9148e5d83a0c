/* test_builtin_cpu.c - runs the built-in ops' generated CPU kernels through
 * the C API on plain buffers and compares them with C references written
 * from the formulas in docs/seed_ops.md. Outputs are poisoned first so
 * unwritten elements show. Usage: test_builtin_cpu OPS_DIR TESTS_DIR */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "tk.h"
#include "tk_test.h"

extern const tk_builtin_spec tk_builtin_specs[];
extern const int tk_builtin_nspecs;
extern const tk_builtin_kernel tk_builtin_kernels[];
extern const int tk_builtin_nkernels;

static uint64_t rng = 88172645463325252ull;
static uint64_t next_u64(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static int64_t rand_in(int64_t lo, int64_t hi) { return lo + (int64_t)(next_u64() % (uint64_t)(hi - lo + 1)); }
static float rand_f(void) { return (float)(next_u64() >> 40) / (float)(1 << 24); }

static int64_t floor_div(int64_t a, int64_t b) { return (int64_t)floor((double)a / (double)b); }

/* Reference brick_pad for one (row, col): the seed's mapping. */
static void brick_src(int64_t row, int64_t col, int64_t H, int64_t TH, int64_t TW, int64_t pw, int64_t ph,
                      int64_t s, int64_t *ti, int64_t *tj) {
    int64_t x1 = col - pw, y1 = H - 1 - row + ph;
    int64_t v = floor_div(y1, TH);
    int64_t u = floor_div(x1 - v * s, TW);
    int64_t x2 = x1 - u * TW - v * s, y2 = y1 - u * 0 - v * TH;
    *ti = TH - 1 - y2;
    *tj = x2;
}

/* brick_pad on float32 tiles: batch dims, explicit sizes, non-contiguous
 * (transposed storage) tiles, chunked runs. */
static void test_brick_pad(const tk_op *op) {
    for (int trial = 0; trial < 60; trial++) {
        int64_t TH = rand_in(1, 7), TW = rand_in(1, 7), pw = rand_in(-3, 12), ph = rand_in(-3, 12);
        int64_t s = rand_in(-20, 20), nb = rand_in(1, 3), transposed = trial % 2;
        int64_t H = TH + 2 * ph, W = TW + 2 * pw;
        int explicit_hw = trial % 3 == 0;
        if (explicit_hw) { H = rand_in(0, 20); W = rand_in(0, 20); }
        if (H < 0 || W < 0) continue;
        float *tile = malloc(sizeof(float) * (size_t)(nb * TH * TW));
        for (int64_t i = 0; i < nb * TH * TW; i++) tile[i] = rand_f();
        /* storage (nb, TW, TH) viewed as (nb, TH, TW) when transposed */
        int64_t tsz[3] = {nb, TH, TW}, tst[3] = {TH * TW, TW, 1};
        if (transposed) { tst[1] = 1; tst[2] = TH; }
        size_t n = (size_t)(nb * H * W);
        float *out = malloc(sizeof(float) * (n ? n : 1));
        for (size_t i = 0; i < n; i++) out[i] = NAN;
        tk_arg args[6] = {tk_arg_tensor(tk_view(tile, TK_F32, 3, tsz, tst)), tk_arg_int(pw), tk_arg_int(ph),
                          tk_arg_int(s), explicit_hw ? tk_arg_int(H) : tk_arg_none(),
                          explicit_hw ? tk_arg_int(W) : tk_arg_none()};
        tk_call call;
        int st = tk_bind(op, args, 6, &call);
        CHECK(st == TK_OK);
        if (st != TK_OK) { fprintf(stderr, "%s\n", call.msg); free(tile); free(out); continue; }
        CHECK(call.out_ndim[0] == 3 && call.out_sizes[0][0] == nb && call.out_sizes[0][1] == H &&
              call.out_sizes[0][2] == W);
        int64_t osz[3] = {nb, H, W}, ost[3] = {H * W, W, 1};
        CHECK(tk_set_output(&call, 0, tk_view(out, TK_F32, 3, osz, ost)) == TK_OK);
        /* run in uneven chunks, as a parallel-for would */
        for (int64_t b = 0; b < call.kargs.numel;) {
            int64_t e = b + rand_in(1, 17);
            if (e > call.kargs.numel) e = call.kargs.numel;
            CHECK(tk_run_cpu(&call, b, e) == TK_OK);
            b = e;
        }
        int bad = 0;
        for (int64_t bi = 0; bi < nb; bi++)
            for (int64_t r = 0; r < H; r++)
                for (int64_t c = 0; c < W; c++) {
                    int64_t ti, tj;
                    brick_src(r, c, H, TH, TW, pw, ph, s, &ti, &tj);
                    float want = tile[bi * TH * TW + ti * tst[1] + tj * tst[2]];
                    float got = out[(bi * H + r) * W + c];
                    if (!(ti >= 0 && ti < TH && tj >= 0 && tj < TW) || memcmp(&want, &got, 4) != 0) bad++;
                }
        CHECK(bad == 0);
        free(tile);
        free(out);
    }
}

/* rwkv_forward in float32 and float64 against a float64 loop. */
/* Reference rwkv_forward for one (b, c, t), in float64: the formula. */
static double rwkv_ref(const double *w, const double *k, int64_t C, int64_t T, int64_t b, int64_t c, int64_t t,
                       double eps) {
    double s = eps;
    for (int64_t u = 0; u <= t; u++) s += w[c * T + (T - 1) - (t - u)] * k[(b * C + c) * T + u];
    return s;
}

static void test_rwkv(const tk_op *op, tk_dtype dt) {
    enum { B = 3, C = 5, T = 17 };
    double *w = malloc(sizeof(double) * C * T), *k = malloc(sizeof(double) * B * C * T);
    for (int64_t i = 0; i < C * T; i++) w[i] = rand_f();
    for (int64_t i = 0; i < B * C * T; i++) k[i] = rand_f();
    size_t es = tk_dtype_size(dt);
    char *wb = malloc(es * C * T), *kb = malloc(es * B * C * T), *ob = malloc(es * B * C * T);
    for (int64_t i = 0; i < C * T; i++) {
        if (dt == TK_F32) ((float *)wb)[i] = (float)w[i];
        else ((double *)wb)[i] = w[i];
    }
    for (int64_t i = 0; i < B * C * T; i++) {
        if (dt == TK_F32) ((float *)kb)[i] = (float)k[i];
        else ((double *)kb)[i] = k[i];
        if (dt == TK_F32) ((float *)ob)[i] = NAN;
        else ((double *)ob)[i] = NAN;
    }
    int64_t wsz[2] = {C, T}, wst[2] = {T, 1}, ksz[3] = {B, C, T}, kst[3] = {(int64_t)C * T, T, 1};
    tk_arg args[3] = {tk_arg_tensor(tk_view(wb, dt, 2, wsz, wst)), tk_arg_tensor(tk_view(kb, dt, 3, ksz, kst)),
                      tk_arg_float(0.1)};
    tk_call call;
    CHECK(tk_bind(op, args, 3, &call) == TK_OK);
    CHECK(tk_set_output(&call, 0, tk_view(ob, dt, 3, ksz, kst)) == TK_OK);
    CHECK(tk_run_cpu(&call, 0, call.kargs.numel) == TK_OK);
    double maxerr = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t t = 0; t < T; t++) {
                double s = rwkv_ref(w, k, C, T, b, c, t, 0.1);
                int64_t i = (b * C + c) * T + t;
                double got = dt == TK_F32 ? ((float *)ob)[i] : ((double *)ob)[i];
                double err = fabs(got - s) / fabs(s);
                if (!(err <= maxerr)) maxerr = isnan(err) ? INFINITY : err;
            }
    CHECK(maxerr < (dt == TK_F32 ? 1e-5 : 1e-13));
    free(w); free(k); free(wb); free(kb); free(ob);
}

static int bind_error(const tk_op *op, const tk_arg *args, int n, const char *want) {
    tk_call call;
    int st = tk_bind(op, args, n, &call);
    int ok = st == TK_ERR_ARG && strstr(call.msg, want) != NULL;
    if (!ok) fprintf(stderr, "expected error containing \"%s\", got status %d: \"%s\"\n", want, st, call.msg);
    return ok;
}

static void test_bind_errors(const tk_op *bp, const tk_op *rw) {
    float buf[64] = {0};
    int64_t s2[2] = {4, 8}, st2[2] = {8, 1}, s3[3] = {2, 5, 8}, st3[3] = {40, 8, 1}, s1[1] = {8}, st1[1] = {1};
    tk_arg w = tk_arg_tensor(tk_view(buf, TK_F32, 2, s2, st2));
    tk_arg k_badc = tk_arg_tensor(tk_view(buf, TK_F32, 3, s3, st3));
    tk_arg eps = tk_arg_float(0.1);
    tk_arg a1[3] = {w, k_badc, eps};
    CHECK(bind_error(rw, a1, 3, "tk.rwkv_forward: argument 'k': dim 1 (C) is 5 but w gives C = 4"));
    tk_arg a2[3] = {tk_arg_tensor(tk_view(buf, TK_F32, 1, s1, st1)), k_badc, eps};
    CHECK(bind_error(rw, a2, 3, "tk.rwkv_forward: argument 'w': expected 2 dims (C, T), got 1"));
    tk_arg a3[3] = {tk_arg_tensor(tk_view(buf, TK_I32, 2, s2, st2)), k_badc, eps};
    CHECK(bind_error(rw, a3, 3, "argument 'w': dtype int32 is not supported (expected float16, bfloat16, float32, float64)"));
    int64_t s3ok[3] = {2, 4, 8};
    tk_arg a4[3] = {w, tk_arg_tensor(tk_view(buf, TK_F64, 3, s3ok, st3)), eps};
    CHECK(bind_error(rw, a4, 3, "argument 'k': dtype float64 must match w's dtype float32"));
    CHECK(bind_error(rw, a4, 2, "tk.rwkv_forward: expected 3 arguments, got 2"));
    tk_arg a5[3] = {w, tk_arg_tensor(tk_view(buf, TK_F32, 3, s3ok, st3)), eps};
    a5[1].t.device = TK_META;
    CHECK(bind_error(rw, a5, 3, "argument 'k' is on meta but 'w' is on cpu"));
    /* brick_pad: empty tile with a non-empty output, negative size, overflow */
    int64_t e2[2] = {0, 8};
    tk_arg b1[6] = {tk_arg_tensor(tk_view(buf, TK_F32, 2, e2, st2)), tk_arg_int(1), tk_arg_int(1), tk_arg_int(0),
                    tk_arg_none(), tk_arg_none()};
    CHECK(bind_error(bp, b1, 6, "tk.brick_pad: argument 'tile' has no elements"));
    tk_arg b2[6] = {w, tk_arg_int(-9), tk_arg_int(1), tk_arg_int(0), tk_arg_none(), tk_arg_none()};
    CHECK(bind_error(bp, b2, 6, "tk.brick_pad: output 'out': dim 1 would be -10; it must be >= 0"));
    tk_arg b3[6] = {w, tk_arg_int(INT64_MAX / 2), tk_arg_int(1), tk_arg_int(0), tk_arg_none(), tk_arg_none()};
    CHECK(bind_error(bp, b3, 6, "argument 'width': its default cannot be computed: integer overflow"));
    tk_arg b4[6] = {w, tk_arg_int(0), tk_arg_int(0), tk_arg_int(0), tk_arg_int(INT64_MAX / 4), tk_arg_int(1000)};
    CHECK(bind_error(bp, b4, 6, "output 'out' is too large"));
}

/* Empty inputs that no iteration reads: rwkv_backward_w sums over the
 * batch, so with no batch rows its gradient (C, T) is 0; the inputs' data
 * pointers are NULL (a read would crash). brick_pad reads its tile in every
 * iteration: an empty tile with a non-empty output stays an error, and so
 * does None for rwkv_forward's eps (a plain float). */
static void test_empty_inputs(const tk_ctx *ctx, const tk_op *bp, const tk_op *rw) {
    enum { C = 3, T = 7 };
    const tk_op *bw = tk_op_find(ctx, "rwkv_backward_w");
    CHECK(bw != NULL);
    if (!bw) return;
    int64_t sz[3] = {0, C, T}, st[3] = {C * T, T, 1}, osz[2] = {C, T}, ost[2] = {T, 1};
    tk_arg args[2] = {tk_arg_tensor(tk_view(NULL, TK_F32, 3, sz, st)), tk_arg_tensor(tk_view(NULL, TK_F32, 3, sz, st))};
    float out[C * T];
    for (int i = 0; i < C * T; i++) out[i] = NAN;
    tk_call call;
    CHECK(tk_bind(bw, args, 2, &call) == TK_OK && call.kargs.numel == C * T);
    CHECK(tk_set_output(&call, 0, tk_view(out, TK_F32, 2, osz, ost)) == TK_OK);
    CHECK(tk_run_cpu(&call, 0, call.kargs.numel) == TK_OK);
    int zeros = 0;
    for (int i = 0; i < C * T; i++) zeros += out[i] == 0.0f;
    CHECK(zeros == C * T);
    int64_t e2[2] = {3, 0}, st2[2] = {1, 1};
    tk_arg b1[6] = {tk_arg_tensor(tk_view(NULL, TK_F32, 2, e2, st2)), tk_arg_int(1), tk_arg_int(1), tk_arg_int(0),
                    tk_arg_none(), tk_arg_none()};
    CHECK(bind_error(bp, b1, 6, "tk.brick_pad: argument 'tile' has no elements (dim 1 is 0) but the output is not "
                                "empty, and every element reads it (ops/brick_pad.tk:15:25)"));
    float buf[C * T] = {0};
    int64_t wsz[2] = {C, T}, ksz[3] = {1, C, T};
    tk_arg r1[3] = {tk_arg_tensor(tk_view(buf, TK_F32, 2, wsz, ost)), tk_arg_tensor(tk_view(buf, TK_F32, 3, ksz, st)),
                    tk_arg_none()};
    CHECK(bind_error(rw, r1, 3, "tk.rwkv_forward: argument 'eps': None is not allowed"));
}

/* tk_arg_same_binding tells apart everything a bind depends on, and a call
 * re-targeted with tk_rebind_data computes from the new data (poisoned
 * output, float64 reference) with its outputs cleared until set again. */
static void test_rebind(const tk_op *rw) {
    enum { B = 2, C = 3, T = 9 };
    double w1[C * T], k1[B * C * T], w2[C * T], k2[B * C * T], out[B * C * T];
    for (int i = 0; i < C * T; i++) { w1[i] = rand_f(); w2[i] = rand_f() - 0.5; }
    for (int i = 0; i < B * C * T; i++) { k1[i] = rand_f(); k2[i] = rand_f() + 1.0; }
    int64_t wsz[2] = {C, T}, wst[2] = {T, 1}, ksz[3] = {B, C, T}, kst[3] = {C * T, T, 1};
    tk_arg a1[3] = {tk_arg_tensor(tk_view(w1, TK_F64, 2, wsz, wst)), tk_arg_tensor(tk_view(k1, TK_F64, 3, ksz, kst)),
                    tk_arg_float(0.25)};
    tk_arg a2[3] = {tk_arg_tensor(tk_view(w2, TK_F64, 2, wsz, wst)), tk_arg_tensor(tk_view(k2, TK_F64, 3, ksz, kst)),
                    tk_arg_float(0.25)};
    for (int i = 0; i < 3; i++) CHECK(tk_arg_same_binding(&a1[i], &a2[i]));
    /* what makes two arguments bind differently */
    tk_arg x = a1[0];
    x.t.dtype = TK_F32;
    CHECK(!tk_arg_same_binding(&a1[0], &x));
    x = a1[0]; x.t.sizes[1] = T - 1;
    CHECK(!tk_arg_same_binding(&a1[0], &x));
    x = a1[0]; x.t.strides[0] = T + 1;
    CHECK(!tk_arg_same_binding(&a1[0], &x));
    x = a1[0]; x.t.device = TK_CUDA;
    CHECK(!tk_arg_same_binding(&a1[0], &x));
    x = a1[0]; x.t.device = TK_CUDA;
    tk_arg y = x; y.t.device_index = 1;
    CHECK(tk_arg_same_binding(&x, &x) && !tk_arg_same_binding(&x, &y));
    x = a1[0]; x.t.ndim = 1;
    CHECK(!tk_arg_same_binding(&a1[0], &x));
    tk_arg f0 = tk_arg_float(0.0), fm0 = tk_arg_float(-0.0), fnan = tk_arg_float(NAN);
    CHECK(!tk_arg_same_binding(&f0, &fm0) && tk_arg_same_binding(&fnan, &fnan));
    tk_arg i3 = tk_arg_int(3), i4 = tk_arg_int(4), none = tk_arg_none(), b1 = tk_arg_bool(1), none2 = tk_arg_none();
    CHECK(!tk_arg_same_binding(&i3, &i4) && !tk_arg_same_binding(&i3, &none) && tk_arg_same_binding(&none, &none2));
    tk_arg i1 = tk_arg_int(1);
    CHECK(!tk_arg_same_binding(&i1, &b1) && !tk_arg_same_binding(&a1[2], &i3));

    tk_call call;
    CHECK(tk_bind(rw, a1, 3, &call) == TK_OK);
    tk_call again = call;
    CHECK(tk_rebind_data(&again, a2, 3) == TK_OK);
    CHECK(tk_run_cpu(&again, 0, again.kargs.numel) == TK_ERR_ARG);  /* outputs cleared */
    for (int i = 0; i < B * C * T; i++) out[i] = NAN;
    CHECK(tk_set_output(&again, 0, tk_view(out, TK_F64, 3, ksz, kst)) == TK_OK);
    CHECK(tk_run_cpu(&again, 0, again.kargs.numel) == TK_OK);
    double maxerr = 0;
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++)
            for (int t = 0; t < T; t++) {
                double s = rwkv_ref(w2, k2, C, T, b, c, t, 0.25);
                double err = fabs(out[(b * C + c) * T + t] - s);
                if (!(err <= maxerr)) maxerr = isnan(err) ? INFINITY : err;
            }
    CHECK(maxerr < 1e-12);
    /* misuse: wrong count, a scalar where a tensor was bound */
    tk_arg bad[3] = {a2[2], a2[1], a2[2]};
    CHECK(tk_rebind_data(&again, a2, 2) == TK_ERR_ARG && strstr(again.msg, "expected 3 arguments") != NULL);
    CHECK(tk_rebind_data(&again, bad, 3) == TK_ERR_ARG && strstr(again.msg, "argument 'w': expected a tensor") != NULL);
    CHECK(tk_rebind_data(NULL, a2, 3) == TK_ERR_INVALID);
}

/* Every float16 bit pattern converts like the compiler's _Float16. */
static void test_half_conversions(void) {
#if defined(__FLT16_MAX__)
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        _Float16 x;
        uint16_t hb = (uint16_t)h;
        memcpy(&x, &hb, 2);
        float want = (float)x, got = tk_f16_to_f32_soft(hb), lanes = tk_f16_to_f32_lanes(hb);
        if (memcmp(&want, &got, 4) != 0 && !(isnan(want) && isnan(got))) bad++;
        if (memcmp(&got, &lanes, 4) != 0) bad++;   /* bit for bit, NaN payloads too */
    }
    CHECK(bad == 0);
    bad = 0;
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = (uint32_t)next_u64();
        float f;
        memcpy(&f, &u, 4);
        if (isnan(f)) continue;
        _Float16 x = (_Float16)f;
        uint16_t want;
        memcpy(&want, &x, 2);
        if (tk_f32_to_f16_soft(f) != want || tk_f32_to_f16(f) != want || tk_f32_to_f16_lanes(f) != want) bad++;
    }
    CHECK(bad == 0);
    /* the branch-free one against _soft on every 7th float32 bit pattern,
     * NaNs included, and on the edges of each case */
    bad = 0;
    for (uint64_t x = 0; x < (1ull << 32); x += 7) {
        float f = tk_bits2f((uint32_t)x);
        if (tk_f32_to_f16_lanes(f) != tk_f32_to_f16_soft(f)) bad++;
    }
    static const uint32_t edges[] = {0x33000000u, 0x33000001u, 0x337fffffu, 0x387fefffu, 0x387ff000u,
                                     0x38800000u, 0x477fefffu, 0x477ff000u, 0x7f800000u, 0x7f800001u,
                                     0x7fc00000u, 0x00000001u, 0x007fffffu, 0x3f800000u};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        for (uint32_t sgn = 0; sgn < 2; sgn++) {
            float f = tk_bits2f(edges[i] | (sgn << 31));
            if (tk_f32_to_f16_lanes(f) != tk_f32_to_f16_soft(f)) bad++;
        }
    CHECK(bad == 0);
#endif
    /* bfloat16: round to nearest even */
    CHECK(tk_f32_to_bf16(tk_bits2f(0x3f808000u)) == 0x3f80);   /* tie, even stays */
    CHECK(tk_f32_to_bf16(tk_bits2f(0x3f818000u)) == 0x3f82);   /* tie, odd rounds up */
    CHECK(tk_f32_to_bf16(tk_bits2f(0x3f808001u)) == 0x3f81);
    CHECK(tk_bf16_to_f32(0x3f80) == 1.0f);
    CHECK(isnan(tk_bf16_to_f32(tk_f32_to_bf16(NAN))));
}

static void test_python_division(void) {
    CHECK(tk_floordiv(-7, 2) == -4 && tk_floordiv(7, -2) == -4 && tk_floordiv(7, 2) == 3);
    CHECK(tk_mod(-7, 2) == 1 && tk_mod(7, -2) == -1 && tk_mod(-6, 3) == 0);
    CHECK(tk_floordiv(5, 0) == 0 && tk_mod(5, 0) == 0);
    CHECK(tk_floordiv(INT64_MIN, -1) == INT64_MIN);
    CHECK(tk_f2i(NAN) == 0 && tk_f2i(1e300) == INT64_MAX && tk_f2i(-2.7) == -2);
}

/* GPU kernels divide by a launch-wide int scalar or dim with tk_kargs.idiv
 * (a multiply and a shift; tk_kdiv): the same floor and modulo as
 * tk_floordiv and tk_mod for every numerator, in and out of the multiply's
 * range (|a| < 2^31), for divisors in it and out of it (no multiplier). */
static void test_launch_divisors(void) {
    uint64_t x = 0x243F6A8885A308D3ull;
    long bad = 0, n = 0;
    const int64_t edges[] = {0, 1, 2, 3, 7, 641, 65535, 65536, 65537, 0x3fffffff, 0x40000000, 0x40000001,
                             0x7ffffffe, 0x7fffffff, 0x80000000LL, -1, -2, -3, -0x7fffffffLL, -0x80000000LL,
                             (int64_t)1 << 40, -((int64_t)1 << 40)};
    const int ne = (int)(sizeof edges / sizeof edges[0]);
    for (int64_t d = -3; d < 2600 + 3 * ne; d++) {   /* small and edge divisors; numerators near 0 and the edges */
        int64_t dv = d < 2600 ? d : edges[(d - 2600) / 3] + (d - 2600) % 3 - 1;
        tk_kdiv k = tk_kdiv_make(dv);
        if ((k.m != 0) != (dv >= 1 && dv <= 0x7fffffff)) bad++;
        for (int64_t a = -700; a <= 700; a++) {
            n++;
            bad += tk_floordiv_k(a, dv, k) != tk_floordiv(a, dv) || tk_mod_k(a, dv, k) != tk_mod(a, dv);
        }
        for (int e = 0; e < ne; e++)
            for (int64_t off = -2; off <= 2; off++) {
                int64_t a = edges[e] + off;
                n++;
                bad += tk_floordiv_k(a, dv, k) != tk_floordiv(a, dv) || tk_mod_k(a, dv, k) != tk_mod(a, dv);
            }
    }
    for (int i = 0; i < 2000000; i++) {   /* random 31-bit and wider divisors and numerators */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int64_t dv = (int64_t)(x % 0x7fffffffull) + 1;
        if (i % 3 == 0) dv = (int64_t)(x >> 40) + 1;
        if (i % 101 == 0) dv = -dv;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int64_t a = (int64_t)(x >> (i % 5 == 0 ? 0 : 32)) - (i % 2 ? (int64_t)1 << 31 : 0);
        tk_kdiv k = tk_kdiv_make(dv);
        n++;
        bad += tk_floordiv_k(a, dv, k) != tk_floordiv(a, dv) || tk_mod_k(a, dv, k) != tk_mod(a, dv);
    }
    CHECK(bad == 0);
    CHECK(n > 5000000);
    tk_kargs ka;
    memset(&ka, 0, sizeof ka);
    ka.i[0] = 48, ka.i[1] = 0, ka.i[2] = -5;
    tk_kargs_divisors(&ka);
    CHECK(ka.idiv[0].m != 0 && ka.idiv[0].s == 6 && ka.idiv[1].m == 0 && ka.idiv[2].m == 0);
}

int main(void) {
    tk_ctx *ctx = tk_ctx_new();
    CHECK(ctx != NULL);
    int st = tk_ctx_add_builtins(ctx, tk_builtin_specs, tk_builtin_nspecs, tk_builtin_kernels, tk_builtin_nkernels);
    if (st != TK_OK) fprintf(stderr, "%s\n", tk_ctx_error(ctx));
    CHECK(st == TK_OK);
    const tk_op *bp = tk_op_find(ctx, "brick_pad"), *rw = tk_op_find(ctx, "rwkv_forward");
    CHECK(bp && rw);
    if (bp && rw) {
        CHECK(strcmp(tk_op_schema(bp), "brick_pad(Tensor tile, SymInt pw, SymInt ph, SymInt stagger, "
                                        "SymInt? height=None, SymInt? width=None) -> Tensor") == 0);
        CHECK(strcmp(tk_op_schema(rw), "rwkv_forward(Tensor w, Tensor k, float eps) -> Tensor") == 0);
        CHECK(tk_op_nvariants(bp) == TK_DTYPE_COUNT && tk_op_nvariants(rw) == 4);
        test_brick_pad(bp);
        test_rwkv(rw, TK_F32);
        test_rwkv(rw, TK_F64);
        test_bind_errors(bp, rw);
        test_rebind(rw);
        test_empty_inputs(ctx, bp, rw);
    }
    test_half_conversions();
    test_python_division();
    test_launch_divisors();
    tk_ctx_free(ctx);
    return tk_test_report("test_builtin_cpu");
}
