/* test_variants.c - differential test of the code generators: every op of
 * ops/ and tests/specs/ is compiled three times at build time, optimised
 * for the CPU (tk_builtin_* for ops/, the kernels libtk ships, and
 * tkv_opt_* for tests/specs/), plain (tkv_plain_*, no hoisting, segments,
 * unrolling or SIMD), and as CUDA run on the CPU by cuda_emu.h (tkv_cuda_*:
 * lane tiles, group rows, partial tiles, grid-stride loops; tkv_cudat_*: the
 * same in another tile shape, TK_CUDA_TUNE=lanes=4,rows=8,warp_rows=16,
 * chunk=128,split=4,ldg=8,tiles=1,regs=64,coop=8,parts=16 when generated, as
 * schedule lines give: row loops in the cooperative form of 8 lanes an
 * iteration where plan_coop.c allows it, 32 or 4 by tests/specs/coop_rows.tk's
 * lines; sums and parted row loops in parts, 1 to 32 threads adding into
 * copies that are summed after (as the shim does), by tests/specs' lines too;
 * the default shape takes a tile and its mirror image a thread only where
 * loop bounds move with the innermost variable, tiles=2 everywhere), and
 * all of them
 * run on the same random inputs: random sizes, batch dims (broadcast
 * ones among them: a missing leading dim, a dim of size 1), every dtype
 * variant, strided views, random scalars (zero and negative divisors
 * included) and random chunkings of the CPU index space. Outputs must agree
 * with the plain kernel's (exactly for ints and bools; within rounding of
 * reassociated sums for floats) and guard bytes around each output must
 * stay untouched. Under TK_CPU_NARROW (the _narrow and _baseline runs) the
 * CPU kernels alone: the emulated CUDA kernels do not depend on it. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core.h"
#include "tk_test.h"

extern const tk_builtin_spec tk_builtin_specs[];
extern const int tk_builtin_nspecs;
extern const tk_builtin_kernel tk_builtin_kernels[];
extern const int tk_builtin_nkernels;
extern const tk_builtin_spec tkv_opt_specs[], tkv_plain_specs[], tkv_cuda_specs[];
extern const int tkv_opt_nspecs, tkv_plain_nspecs, tkv_cuda_nspecs;
extern const tk_builtin_kernel tkv_opt_kernels[], tkv_plain_kernels[], tkv_cuda_kernels[];
extern const int tkv_opt_nkernels, tkv_plain_nkernels, tkv_cuda_nkernels;
#ifndef TK_VARIANTS_NO_TUNED   /* the sanitizer build leaves the second tile shape out (CMakeLists.txt) */
extern const tk_builtin_spec tkv_cudat_specs[];
extern const int tkv_cudat_nspecs;
extern const tk_builtin_kernel tkv_cudat_kernels[];
extern const int tkv_cudat_nkernels;
#define TK_TUNED_TRIALS 30
#else
#define TK_TUNED_TRIALS 0
#endif
extern long tk_emu_misaligned, tk_emu_vector_stores, tk_emu_vector_loads, tk_emu_shuffles,
    tk_emu_bad_shuffles, tk_emu_syncs;    /* cuda_emu.h */

#define GUARD 64

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_u64(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static int64_t rand_in(int64_t lo, int64_t hi) { return lo + (int64_t)(next_u64() % (uint64_t)(hi - lo + 1)); }

/* Writes a random value of dtype dt at p. */
static void rand_elem(void *p, tk_dtype dt) {
    double f = (double)rand_in(-2000, 2000) / 1000.0;
    int64_t i = rand_in(-60, 60);
    switch (dt) {
    case TK_BOOL: *(uint8_t *)p = (uint8_t)(i & 1); break;
    case TK_U8: *(uint8_t *)p = (uint8_t)rand_in(0, 255); break;
    case TK_I8: *(int8_t *)p = (int8_t)i; break;
    case TK_I16: *(int16_t *)p = (int16_t)i; break;
    case TK_I32: *(int32_t *)p = (int32_t)i; break;
    case TK_I64: *(int64_t *)p = i; break;
    case TK_F16: *(uint16_t *)p = tk_f32_to_f16_soft((float)f); break;
    case TK_BF16: *(uint16_t *)p = tk_f32_to_bf16((float)f); break;
    case TK_F32: *(float *)p = (float)f; break;
    case TK_F64: *(double *)p = f; break;
    default: break;
    }
}

static double elem_as_double(const void *p, tk_dtype dt) {
    switch (dt) {
    case TK_F16: return tk_f16_to_f32_soft(*(const uint16_t *)p);
    case TK_BF16: return tk_bf16_to_f32(*(const uint16_t *)p);
    case TK_F32: return *(const float *)p;
    case TK_F64: return *(const double *)p;
    default: return 0;
    }
}

/* Tolerance of a float output relative to its scale: sums may be
 * reassociated or contracted (FMA) differently. */
static double tolerance(tk_dtype dt) {
    return dt == TK_F64 ? 1e-12 : dt == TK_F32 ? 1e-5 : dt == TK_F16 ? 4e-3 : 3e-2;
}

typedef struct buffer {
    unsigned char *base;    /* GUARD bytes, data, GUARD bytes */
    size_t bytes;
} buffer;

static void *buf_new(buffer *b, size_t bytes, unsigned char fill) {
    b->bytes = bytes;
    b->base = malloc(bytes + 2 * GUARD);
    memset(b->base, fill, bytes + 2 * GUARD);
    return b->base + GUARD;
}

static int guards_intact(const buffer *b, unsigned char fill) {
    for (size_t i = 0; i < GUARD; i++)
        if (b->base[i] != fill || b->base[GUARD + b->bytes + i] != fill) return 0;
    return 1;
}

/* One random call of op variant v; returns 1 if it ran and was compared. */
/* Elements of output a (a kernel under test) that differ from b (the
 * plain kernel's), n of dtype dt. */
static int count_diffs(const unsigned char *a, const unsigned char *b, size_t n, tk_dtype dt) {
    size_t es = tk_dtype_size(dt);
    int bad = 0;
    /* floats: within rounding of the output's scale (normwise; an element
     * that is a small difference of large sums carries the rounding of the
     * sums) */
    double scale = 0;
    for (size_t k = 0; k < n && dt >= TK_F16; k++) {
        double y = fabs(elem_as_double(b + k * es, dt));
        if (y > scale && !isinf(y)) scale = y;
    }
    for (size_t k = 0; k < n; k++) {
        if (dt >= TK_F16) {
            double x = elem_as_double(a + k * es, dt), y = elem_as_double(b + k * es, dt);
            if (!(fabs(x - y) <= tolerance(dt) * (1.0 + scale)) && !(isnan(x) && isnan(y)) && x != y) bad++;
        } else if (memcmp(a + k * es, b + k * es, es) != 0) {
            bad++;
        }
    }
    return bad;
}

/* How a CUDA kernel runs in parts (tk_emit_cuda_parts): at most cap
 * threads (0: not in parts), the outputs it copies, whether the threads
 * share a parted loop. */
typedef struct parts_info {
    int cap, parted;
    unsigned copied;
} parts_info;

/* The identity of a sum in dtype dt at p: -0.0, 0, false. */
static void put_identity(void *p, tk_dtype dt) {
    switch (dt) {
    case TK_F16: *(uint16_t *)p = 0x8000u; break;
    case TK_BF16: *(uint16_t *)p = 0x8000u; break;
    case TK_F32: *(float *)p = -0.0f; break;
    case TK_F64: *(double *)p = -0.0; break;
    default: memset(p, 0, tk_dtype_size(dt)); break;
    }
}

static int64_t elem_as_int(const void *p, tk_dtype dt) {
    switch (dt) {
    case TK_BOOL: case TK_U8: return *(const uint8_t *)p;
    case TK_I8: return *(const int8_t *)p;
    case TK_I16: return *(const int16_t *)p;
    case TK_I32: return *(const int32_t *)p;
    case TK_I64: return *(const int64_t *)p;
    default: return 0;
    }
}

/* out[e] = the sum over the n copies of element e (each total elements
 * apart), as the shim's torch sum: floats in double then rounded once,
 * ints wrapping in their width, bools or'ed. */
static void sum_copies(unsigned char *out, const unsigned char *copies, int64_t n, int64_t total, tk_dtype dt) {
    size_t es = tk_dtype_size(dt);
    for (int64_t e = 0; e < total; e++) {
        double f = 0;
        int64_t i = 0;
        for (int64_t p = 0; p < n; p++) {
            const unsigned char *c = copies + ((size_t)(p * total + e)) * es;
            if (dt >= TK_F16) f += elem_as_double(c, dt);
            else i = dt == TK_BOOL ? (i | elem_as_int(c, dt)) : (int64_t)((uint64_t)i + (uint64_t)elem_as_int(c, dt));
        }
        unsigned char *o = out + (size_t)e * es;
        switch (dt) {
        case TK_F16: *(uint16_t *)o = tk_f32_to_f16_soft((float)f); break;
        case TK_BF16: *(uint16_t *)o = tk_f32_to_bf16((float)f); break;
        case TK_F32: *(float *)o = (float)f; break;
        case TK_F64: *(double *)o = f; break;
        case TK_BOOL: case TK_U8: *(uint8_t *)o = (uint8_t)i; break;
        case TK_I8: *(int8_t *)o = (int8_t)i; break;
        case TK_I16: *(int16_t *)o = (int16_t)i; break;
        case TK_I32: *(int32_t *)o = (int32_t)i; break;
        case TK_I64: *(int64_t *)o = i; break;
        default: break;
        }
    }
}

static long parts_runs;     /* emulated CUDA launches in parts of more than one thread */
static long parts_spread;   /* ... and copied outputs of them with copies past the first written */

/* An int scalar: small, or for the wide_* specs (indices reduced by %)
 * one in four each near +-2^31, any 32-bit value, up to 2^40 */
static int64_t rand_int(const tk_op *op) {
    if (strncmp(tk_op_name(op), "wide_", 5) != 0) return rand_in(-6, 12);
    int64_t sign = rand_in(0, 1) ? 1 : -1;
    switch (rand_in(0, 3)) {
    case 0: return rand_in(-6, 12);
    case 1: return sign * (((int64_t)1 << 31) + rand_in(-3, 3));
    case 2: return rand_in(INT32_MIN, INT32_MAX);
    default: return sign * rand_in(0, (int64_t)1 << 40);
    }
}

static long empty_input_runs;   /* calls that ran with an empty input (and a non-empty output) */

/* TK_CPU_NARROW set (test_variants_narrow, _baseline): the CPU kernels run a
 * narrower body; the emulated CUDA kernels are the same as in the default
 * run, which checks them, so these runs compare the CPU kernels alone */
static int cpu_only;

static int one_trial(const tk_op *opt, const tk_op *plain, const tk_op *cuda, int v, const parts_info *pi) {
    const tk_opdecl *d = opt->decl;
    int64_t dimsize[TK_MAX_INTS];
    /* small sizes, and sometimes sizes that fill lane tiles (16 elements)
     * and groups of rows (8) with remainders, and sizes with several full
     * tiles (CUDA sliding windows: full rounds of 16 steps need t >= 16) */
    for (int j = 0; j < opt->ndims; j++) {
        int64_t r = rand_in(0, 5);
        dimsize[j] = r < 3 ? rand_in(1, 9) : r < 5 ? rand_in(10, 34) : rand_in(35, 70);
    }
    /* one trial in 5: one long dim (CPU lane tiles of 4-row groups are 96
     * elements, single-row tiles with a group dim 128), the others small */
    if (opt->ndims > 0 && rand_in(0, 4) == 0) {
        for (int j = 0; j < opt->ndims; j++) dimsize[j] = rand_in(1, 9);
        dimsize[rand_in(0, opt->ndims - 1)] = rand_in(96, 300);
    }
    /* one trial in 8: a dim of size 0, one in 16 an empty batch. An empty
     * input's data pointer is NULL, so a kernel that reads it crashes: the
     * binder lets it be empty only when the body never reads it (its reads
     * sit in loops whose ranges are then empty, or under false conditions)
     * or nothing runs (an empty output) */
    if (opt->ndims > 0 && rand_in(0, 7) == 0) dimsize[rand_in(0, opt->ndims - 1)] = 0;
    int nb = (int)rand_in(0, 2);
    int64_t bsize[2] = {rand_in(0, 15) == 0 ? 0 : rand_in(1, 3), rand_in(1, 3)};
    tk_arg args[32], args2[32], args3[32];
    buffer inbufs[TK_MAX_TENSORS];
    /* a 'mut' parameter: one copy of its data a generator, each updated in
     * place by its own call and compared as an output, elements between
     * its strided ones included (unit innermost stride where the CUDA
     * kernel runs in parts: copy 0 starts from it, as the shim does) */
    buffer mutbufs[3][TK_MAX_TENSORS * 4];
    int nin = 0, empty_input = 0;
    for (int i = 0; i < d->nparams; i++) {
        const tk_param *p = &d->params[i];
        if (p->kind == TK_P_INT) args[i] = p->optional && rand_in(0, 1) ? tk_arg_none() : tk_arg_int(rand_int(opt));
        else if (p->kind == TK_P_FLOAT) args[i] = tk_arg_float((double)rand_in(-100, 100) / 10.0);
        else if (p->kind == TK_P_BOOL) args[i] = tk_arg_bool((int)rand_in(0, 1));
        if (p->kind != TK_P_TENSOR) continue;
        int ell = p->ndims > 0 && p->dims[0]->kind == TK_E_ELLIPSIS;
        int64_t sizes[TK_MAX_DIMS], strides[TK_MAX_DIMS];
        int nd = 0;
        /* one '...' input in four (not a 'mut' one) broadcasts: it lacks
         * the leading batch dim, or has size 1 in one (read with stride 0) */
        int bcast = ell && !p->mut && nb > 0 ? (int)rand_in(0, 7) : 0;
        if (ell)
            for (int k = bcast == 1 ? 1 : 0; k < nb; k++) sizes[nd++] = bcast == 2 && k == nb - 1 ? 1 : bsize[k];
        for (int k = 0; k < p->ndims; k++) {
            const tk_expr *e = p->dims[k];
            if (e->kind == TK_E_INT) sizes[nd++] = e->ival;
            else if (e->kind == TK_E_NAME) {
                int idx;
                tk_resolve_header(opt, e->name, &idx);
                sizes[nd++] = dimsize[idx];
            }
        }
        /* innermost stride 1 or 2 (every other element), rows packed after it */
        int64_t step = p->mut && pi->cap > 1 ? 1 : rand_in(1, 2), total = 1;
        for (int k = nd - 1; k >= 0; k--) {
            strides[k] = (k == nd - 1 ? step : total);
            total = strides[k] * sizes[k];
        }
        tk_dtype dt = tk_variant_dtype(opt, v, i);
        size_t es = tk_dtype_size(dt);
        unsigned char *data = NULL;   /* (total is 0 when a size is) */
        if (p->mut) {
            static const unsigned char fills[3] = {0xA5, 0x5A, 0xC3};   /* (as the outputs' guards) */
            for (int k = 0; k < 3; k++) {
                mutbufs[k][i].base = NULL;
                mutbufs[k][i].bytes = 0;
                unsigned char *q = total > 0 ? buf_new(&mutbufs[k][i], (size_t)total * es, fills[k]) : NULL;
                if (k == 0) data = q;
                else if (q) memcpy(q, data, (size_t)total * es);
                if (k == 0)
                    for (int64_t e = 0; e < total; e++) rand_elem(data + (size_t)e * es, dt);
            }
        } else if (total > 0) {
            data = buf_new(&inbufs[nin++], (size_t)total * es, 0);
        }
        if (total == 0) empty_input = 1;
        if (!p->mut)
            for (int64_t e = 0; e < total; e++) rand_elem(data + (size_t)e * es, dt);
        args[i] = tk_arg_tensor(tk_view(data, dt, nd, sizes, strides));
    }
    memcpy(args2, args, sizeof args);
    memcpy(args3, args, sizeof args);
    for (int i = 0; i < d->nparams; i++)
        if (d->params[i].mut) {
            args2[i].t.data = mutbufs[1][i].base ? mutbufs[1][i].base + GUARD : NULL;
            args3[i].t.data = mutbufs[2][i].base ? mutbufs[2][i].base + GUARD : NULL;
        }
    tk_call c1, c2, c3;
    int st1 = tk_bind(opt, args, d->nparams, &c1), st2 = tk_bind(plain, args2, d->nparams, &c2);
    int st3 = tk_bind(cuda, args3, d->nparams, &c3);
    CHECK(st1 == st2 && st1 == st3);
    int ran = 0;
    if (st1 == TK_OK && st2 == TK_OK && st3 == TK_OK) {
        buffer out1[TK_MAX_TENSORS], out2[TK_MAX_TENSORS], out3[TK_MAX_TENSORS];
        for (int o = 0; o < c1.noutputs; o++) {
            int m = tk_op_output_alias(opt, o);
            if (m >= 0) {   /* the 'mut' parameter's own copies */
                out1[o] = mutbufs[0][m];
                out2[o] = mutbufs[1][m];
                out3[o] = mutbufs[2][m];
                CHECK(tk_set_output(&c3, o, args3[m].t) == TK_OK);
                CHECK(tk_set_output(&c1, o, args[m].t) == TK_OK);
                CHECK(tk_set_output(&c2, o, args2[m].t) == TK_OK);
                continue;
            }
            int64_t strides[TK_MAX_DIMS], total = 1;
            for (int k = c1.out_ndim[o] - 1; k >= 0; k--) {
                strides[k] = total;
                total *= c1.out_sizes[o][k];
            }
            size_t bytes = (size_t)total * tk_dtype_size(c1.out_dtype[o]);
            void *p1 = buf_new(&out1[o], bytes, 0xA5), *p2 = buf_new(&out2[o], bytes, 0x5A);
            void *p3 = buf_new(&out3[o], bytes, 0xC3);
            if (tk_op_output_sum(opt, o)) {   /* a sum starts at zero (the caller's) */
                memset(p1, 0, bytes);
                memset(p2, 0, bytes);
                memset(p3, 0, bytes);
            }
            CHECK(tk_set_output(&c3, o, tk_view(p3, c3.out_dtype[o], c3.out_ndim[o], c3.out_sizes[o], strides)) == TK_OK);
            CHECK(tk_set_output(&c1, o, tk_view(p1, c1.out_dtype[o], c1.out_ndim[o], c1.out_sizes[o], strides)) == TK_OK);
            CHECK(tk_set_output(&c2, o, tk_view(p2, c2.out_dtype[o], c2.out_ndim[o], c2.out_sizes[o], strides)) == TK_OK);
        }
        /* CUDA in parts: n threads (no more than the emulated grid's 32 or
         * more), each adding into its own copy of the outputs it copies,
         * which start at the identity and are added up after (the shim's
         * run_on_cuda); n = 1 runs straight into the outputs */
        buffer cps[TK_MAX_TENSORS];
        int64_t nparts = pi->cap > 1 && c3.kargs.numel > 0 && !cpu_only ? rand_in(1, 32) : 1, ctotal[TK_MAX_TENSORS];
        for (int o = 0; o < c3.noutputs; o++) {
            cps[o].base = NULL;
            if (nparts < 2 || !(pi->copied >> o & 1u)) continue;
            int64_t strides[TK_MAX_DIMS], total = 1;
            for (int k = c3.out_ndim[o] - 1; k >= 0; k--) {
                strides[k] = total;
                total *= c3.out_sizes[o][k];
            }
            size_t es = tk_dtype_size(c3.out_dtype[o]);
            unsigned char *cp = buf_new(&cps[o], (size_t)(nparts * total) * es, 0x3C);
            for (int64_t e = 0; e < nparts * total; e++) put_identity(cp + (size_t)e * es, c3.out_dtype[o]);
            if (tk_op_output_alias(cuda, o) >= 0)   /* updated in place: copy 0 starts from it (contiguous) */
                memcpy(cp, out3[o].base + GUARD, (size_t)total * es);
            CHECK(tk_set_output(&c3, o, tk_view(cp, c3.out_dtype[o], c3.out_ndim[o], c3.out_sizes[o], strides)) == TK_OK);
            c3.kargs.pstride[o] = total;
            ctotal[o] = total;
        }
        if (nparts > 1) {
            c3.kargs.nparts = nparts;
            parts_runs++;
        }
        /* the whole index space in one call (one thread: the long rows'
         * widest tiles run), and chunks that start and end anywhere, short
         * or of any length */
        int64_t how = rand_in(0, 2), numel = c1.kargs.numel > 1 ? c1.kargs.numel : 1;
        int64_t chunk = how == 0 ? numel : how == 1 ? 40 : rand_in(1, numel);
        for (int64_t b = 0; b < c1.kargs.numel;) {
            int64_t e = b + (how == 0 ? chunk : rand_in(1, chunk));
            if (e > c1.kargs.numel) e = c1.kargs.numel;
            CHECK(tk_run_cpu(&c1, b, e) == TK_OK);
            b = e;
        }
        CHECK(tk_run_cpu(&c2, 0, c2.kargs.numel) == TK_OK);
        if (!cpu_only) CHECK(tk_run_cpu(&c3, 0, c3.kargs.numel) == TK_OK);   /* one emulated launch */
        for (int o = 0; o < c3.noutputs; o++) {
            if (!cps[o].base) continue;
            CHECK(guards_intact(&cps[o], 0x3C));
            /* a thread that added into another's copy would race on a GPU
             * (the emulation runs threads one at a time): count launches
             * whose copies past the first were written */
            size_t es = tk_dtype_size(c3.out_dtype[o]);
            unsigned char idn[16];
            put_identity(idn, c3.out_dtype[o]);
            for (int64_t e = ctotal[o]; e < nparts * ctotal[o]; e++)
                if (memcmp(cps[o].base + GUARD + (size_t)e * es, idn, es) != 0) {
                    parts_spread++;
                    break;
                }
            sum_copies(out3[o].base + GUARD, cps[o].base + GUARD, nparts, ctotal[o], c3.out_dtype[o]);
            free(cps[o].base);
        }
        for (int o = 0; o < c1.noutputs; o++) {
            if (!out1[o].base) continue;   /* an empty 'mut' parameter: no buffer */
            tk_dtype dt = c1.out_dtype[o];
            size_t n = out1[o].bytes / tk_dtype_size(dt);
            const unsigned char *b = out2[o].base + GUARD;
            /* a scratch tensor is not a result: its elements a body leaves
             * unwritten hold each run's poison (what reads it back is compared) */
            int scratch = tk_op_output_scratch(opt, o);
            int bad = scratch ? 0 : count_diffs(out1[o].base + GUARD, b, n, dt);
            int bad_cuda = scratch || cpu_only ? 0 : count_diffs(out3[o].base + GUARD, b, n, dt);
            if (bad)
                fprintf(stderr, "%s (%s) output %d: %d of %zu elements differ from the plain kernel\n", d->name,
                        opt->variant_codes[v], o, bad, n);
            if (bad_cuda)
                fprintf(stderr, "%s (%s) output %d: %d of %zu elements of the CUDA kernel differ from the plain kernel\n",
                        d->name, opt->variant_codes[v], o, bad_cuda, n);
            CHECK(bad == 0 && bad_cuda == 0);
            CHECK(guards_intact(&out1[o], 0xA5) && guards_intact(&out2[o], 0x5A) && guards_intact(&out3[o], 0xC3));
            free(out1[o].base);
            free(out2[o].base);
            free(out3[o].base);
        }
        ran = 1;
        empty_input_runs += empty_input && c1.kargs.numel > 0;
    }
    for (int k = 0; k < nin; k++) free(inbufs[k].base);
    return ran;
}

int main(void) {
    const char *narrow = getenv("TK_CPU_NARROW");
    cpu_only = narrow && narrow[0];
    const int trials = cpu_only ? 160 : 40;   /* calls a variant (the CPU kernels alone take 1/40 of the time) */
    tk_ctx *opt = tk_ctx_new(), *plain = tk_ctx_new(), *cuda = tk_ctx_new(), *cudat = tk_ctx_new();
    int s1 = tk_ctx_add_builtins(opt, tk_builtin_specs, tk_builtin_nspecs, tk_builtin_kernels, tk_builtin_nkernels);
    if (s1 == TK_OK) s1 = tk_ctx_add_builtins(opt, tkv_opt_specs, tkv_opt_nspecs, tkv_opt_kernels, tkv_opt_nkernels);
    int s2 = tk_ctx_add_builtins(plain, tkv_plain_specs, tkv_plain_nspecs, tkv_plain_kernels, tkv_plain_nkernels);
    int s3 = tk_ctx_add_builtins(cuda, tkv_cuda_specs, tkv_cuda_nspecs, tkv_cuda_kernels, tkv_cuda_nkernels);
#ifndef TK_VARIANTS_NO_TUNED
    int s4 = tk_ctx_add_builtins(cudat, tkv_cudat_specs, tkv_cudat_nspecs, tkv_cudat_kernels, tkv_cudat_nkernels);
#else
    int s4 = tk_ctx_add_builtins(cudat, tkv_cuda_specs, tkv_cuda_nspecs, tkv_cuda_kernels, tkv_cuda_nkernels);
#endif
    if (s1 || s2 || s3 || s4)
        fprintf(stderr, "%s%s%s%s\n", tk_ctx_error(opt), tk_ctx_error(plain), tk_ctx_error(cuda), tk_ctx_error(cudat));
    CHECK(s1 == TK_OK && s2 == TK_OK && s3 == TK_OK && s4 == TK_OK);
    CHECK(tk_op_count(opt) >= 9 && tk_op_count(opt) == tk_op_count(plain));
    /* the schedule the other shape's kernels were generated with (CMakeLists.txt) */
    tk_schedule cudat_sched;
#ifdef TK_CUDAT_TUNE
    CHECK(tk_schedule_parse(TK_CUDAT_TUNE, &cudat_sched, NULL, 0) == TK_OK);
#else
    memset(&cudat_sched, 0, sizeof cudat_sched);
#endif
    int total = 0;
    for (int i = 0; i < tk_op_count(opt); i++) {
        const tk_op *a = tk_op_at(opt, i), *b = tk_op_find(plain, tk_op_name(a)), *g = tk_op_find(cuda, tk_op_name(a));
        const tk_op *gt = tk_op_find(cudat, tk_op_name(a));
        CHECK(b != NULL && g != NULL && gt != NULL);
        if (!b || !g || !gt) continue;
        for (int v = 0; v < a->nvariants; v++) {
            int ran = 0, ran_t = 0;
            parts_info pg, pt;
            pg.cap = tk_emit_cuda_parts(cuda, g, v, NULL, &pg.copied, &pg.parted);
            pt.cap = tk_emit_cuda_parts(cudat, gt, v, &cudat_sched, &pt.copied, &pt.parted);
            for (int t = 0; t < trials; t++) ran += one_trial(a, b, g, v, &pg);
            for (int t = 0; t < (cpu_only ? 0 : TK_TUNED_TRIALS); t++)   /* the other tile shape */
                ran_t += one_trial(a, b, gt, v, &pt);
            total += ran + ran_t;
            if (ran < trials / 4)
                fprintf(stderr, "%s (%s): only %d of %d random calls bound\n", tk_op_name(a), a->variant_codes[v], ran,
                        trials);
            CHECK(ran >= trials / 4 && (TK_TUNED_TRIALS == 0 || cpu_only || ran_t >= 7));
        }
    }
    printf("test_variants: %d random calls compared over %d ops, %ld of them with an empty input%s\n", total,
           tk_op_count(opt), empty_input_runs, cpu_only ? " (TK_CPU_NARROW: CPU kernels only)" : "");
    CHECK(empty_input_runs > 0);
    if (!cpu_only) {   /* what the emulated CUDA kernels did */
        /* the CUDA chunks' 16-byte stores ran (aligned rows occur) and never
         * to an address a GPU would fault on */
        printf("test_variants: %ld emulated vector stores, %ld vector loads, %ld misaligned\n", tk_emu_vector_stores,
               tk_emu_vector_loads, tk_emu_misaligned);
        CHECK(tk_emu_vector_stores > 0 && tk_emu_vector_loads > 0 && tk_emu_misaligned == 0);
        /* split reductions (rwkv_backward_w's schedule line; all eligible loops in the other shape) */
        printf("test_variants: %ld emulated warp shuffles, %ld not converged or outside their mask\n", tk_emu_shuffles,
               tk_emu_bad_shuffles);
        CHECK(tk_emu_shuffles > 0 && tk_emu_bad_shuffles == 0);
        /* cooperative rows (tests/specs/coop_rows.tk's schedule lines; coop=8 in
         * the other shape): their lanes met at __syncwarp around the stores */
        printf("test_variants: %ld emulated __syncwarp\n", tk_emu_syncs);
        CHECK(tk_emu_syncs > 0);
        /* sums and parted row loops in parts (tests/specs/sums.tk's schedule
         * lines; parts=16 in the other shape): threads adding into copies */
        printf("test_variants: %ld emulated launches in parts, %ld of their copied outputs written past the first copy\n",
               parts_runs, parts_spread);
        CHECK(parts_runs > 0 && parts_spread > parts_runs / 4);
    }
    tk_ctx_free(opt);
    tk_ctx_free(plain);
    tk_ctx_free(cuda);
    tk_ctx_free(cudat);
    return tk_test_report("test_variants");
}
