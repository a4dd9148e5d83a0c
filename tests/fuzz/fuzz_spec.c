/* fuzz_spec.c - the libFuzzer harness over the whole front end and both
 * emitters: the input is a spec file's bytes. It is loaded (lexer, parser,
 * checker), linked (backward clauses), and every op that loads is emitted
 * as C (optimised and plain) and CUDA C, its shape programs are compiled,
 * and tk_bind / tk_bind_types run on argument sets derived from the spec
 * and the input: plausible ones, mutated ones, and hostile sizes.
 *
 * Anything but a clean status is a bug: a crash, a sanitizer report, a
 * leak, or a hang. Build (clang): cmake -DTK_FUZZ=ON (see docs/reliability.md);
 * fuzz_replay.c runs the same function over files with any compiler.
 *
 *   build-fuzz/fuzz_spec -dict=tests/fuzz/tk.dict NEW_CORPUS tests/fuzz/corpus */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tk.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A small deterministic stream of choices, seeded by the input's bytes. */
typedef struct rng {
    uint64_t s;
} rng;

static uint64_t next(rng *r) {
    r->s = r->s * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t x = r->s;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    return x ^ (x >> 33);
}

static uint64_t seed_of(const uint8_t *data, size_t size) {
    uint64_t h = 1469598103934665603ull;    /* FNV-1a */
    for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 1099511628211ull;
    return h;
}

/* The size a symbolic dim name gets in the plausible argument set. */
static int64_t name_size(const char *name) {
    uint64_t h = seed_of((const uint8_t *)name, strlen(name));
    return (int64_t)(1 + h % 4);
}

enum { PLAUSIBLE, MUTATED, HOSTILE, NSETS };

static const int64_t k_hostile[] = {
    0, 1, -1, 2, INT64_MAX, INT64_MIN, INT64_MAX / 2, (int64_t)1 << 31, (int64_t)1 << 32,
    ((int64_t)1 << 62) + 1, -((int64_t)1 << 40), 3037000500,
};
#define NHOSTILE ((int)(sizeof k_hostile / sizeof k_hostile[0]))

static int64_t pick_size(rng *r, int set, int64_t plausible) {
    if (set == PLAUSIBLE) return plausible;
    if (set == MUTATED) return (int64_t)(next(r) % 6);
    return k_hostile[next(r) % NHOSTILE];
}

/* The lowest dtype of mask (bool if the mask is empty). */
static tk_dtype first_dtype(unsigned mask) {
    for (int t = 0; t < TK_DTYPE_COUNT; t++)
        if (mask & (1u << t)) return (tk_dtype)t;
    return TK_BOOL;
}

/* Tensor argument i of op for argument set `set`. */
static tk_arg tensor_arg(const tk_op *op, int i, int set, rng *r, const tk_arg *args) {
    static char dummy[64];
    tk_tensor_view v;
    memset(&v, 0, sizeof v);
    v.data = dummy;             /* never read: nothing runs */
    int group = tk_op_param_dtype_group(op, i);
    v.dtype = group >= 0 && group < i ? args[group].t.dtype : first_dtype(tk_op_param_dtypes(op, i));
    if (set != PLAUSIBLE && next(r) % 4 == 0) v.dtype = (tk_dtype)(next(r) % (TK_DTYPE_COUNT + 1));
    int n = tk_op_shape_ndims(op, TK_SHAPE_INPUT, i);
    for (int j = 0; j < n && v.ndim < TK_MAX_DIMS; j++) {
        const char *name = NULL;
        int64_t value = 0;
        int kind = tk_op_param_dim(op, i, j, &name, &value);
        if (kind == TK_DIM_BATCH) {
            int nb = set == PLAUSIBLE ? 1 : (int)(next(r) % 3);
            for (int k = 0; k < nb && v.ndim < TK_MAX_DIMS; k++) v.sizes[v.ndim++] = pick_size(r, set, 2);
        } else {
            v.sizes[v.ndim++] = pick_size(r, set, kind == TK_DIM_NAME ? name_size(name) : value);
        }
    }
    if (set != PLAUSIBLE && next(r) % 8 == 0) v.ndim = (int)(next(r) % (TK_MAX_DIMS + 2)) - 1;
    int64_t stride = 1;
    for (int d = (v.ndim < TK_MAX_DIMS ? v.ndim : TK_MAX_DIMS) - 1; d >= 0; d--) {
        v.strides[d] = stride;
        stride = (int64_t)((uint64_t)stride * (uint64_t)(v.sizes[d] > 0 ? v.sizes[d] : 1));
    }
    if (set != PLAUSIBLE && next(r) % 8 == 0) v.device = TK_CUDA;
    return tk_arg_tensor(v);
}

static tk_arg scalar_arg(const tk_op *op, int i, int set, rng *r) {
    int kind = tk_op_param_kind(op, i);
    int64_t x = set == PLAUSIBLE ? (int64_t)(next(r) % 5) - 1 : k_hostile[next(r) % NHOSTILE];
    if (set != PLAUSIBLE && next(r) % 8 == 0) kind = (int)(next(r) % 4);  /* a wrong kind */
    if (kind == 0) return tk_arg_tensor(tk_view(NULL, TK_F32, 0, NULL, NULL));
    if (kind == 2) return tk_arg_float(set == HOSTILE ? 1e308 * (double)x : (double)x * 0.5);
    if (kind == 3) return tk_arg_bool((int)(x & 1));
    if (tk_op_param_optional(op, i) && next(r) % 2 == 0) return tk_arg_none();
    return tk_arg_int(x);
}

/* Each optional tensor bound as None reads inside the row its caller
 * attaches (tk_call_fill's numel): its farthest element, when it has any,
 * is before the row's end (a None with no elements may have an empty row:
 * its innermost dim 0). (Tensor parameter k has kernel slot k.) */
static void check_fills(const tk_op *op, const tk_call *call, int n) {
    for (int i = 0, slot = 0; i < n; i++) {
        if (tk_op_param_kind(op, i) != 0) continue;
        int64_t numel = 0;
        int none = tk_call_fill(call, i, NULL, &numel, NULL);
        if (none != (int)(call->none >> slot & 1u) || (none && (!tk_op_param_optional(op, i) || numel < 0))) abort();
        const tk_ktensor *t = &call->kargs.t[slot++];
        if (!none) continue;
        int64_t last = 0;
        int empty = 0;
        for (int d = 0; d < t->ndim; d++) {
            if (t->size[d] == 0) empty = 1;
            else last += (t->size[d] - 1) * t->stride[d];
        }
        if (!empty && (last < 0 || last >= numel)) abort();   /* (so numel >= 1 when it has elements) */
    }
}

/* Binds op against each argument set; only the status matters. */
static void fuzz_bind(const tk_op *op, rng *r) {
    enum { MAX_ARGS = TK_MAX_TENSORS * 4 };
    tk_arg args[MAX_ARGS];
    tk_call call;
    int n = tk_op_nparams(op);
    if (n > MAX_ARGS) return;
    for (int set = 0; set < NSETS; set++) {
        for (int i = 0; i < n; i++) {
            args[i] = tk_op_param_kind(op, i) == 0 ? tensor_arg(op, i, set, r, args) : scalar_arg(op, i, set, r);
            if (tk_op_param_kind(op, i) == 0 && next(r) % 3 == 0 && (tk_op_param_optional(op, i) || set != PLAUSIBLE))
                args[i] = tk_arg_none();   /* an optional tensor's None (or, hostile, one where it is not allowed) */
        }
        int nargs = n - (set != PLAUSIBLE && next(r) % 16 == 0);
        (void)tk_bind_types(op, args, nargs, &call);
        if (tk_bind(op, args, nargs, &call) == TK_OK) {
            /* the outputs' sizes are what a caller allocates from */
            for (int o = 0; o < call.noutputs; o++)
                if (call.out_ndim[o] < 0 || call.out_ndim[o] > TK_MAX_DIMS) abort();
            if (call.kargs.numel < 0) abort();
            check_fills(op, &call, n);
        }
    }
}

/* Compiles every shape program of op (what the Meta kernel evaluates). */
static void fuzz_shapes(const tk_op *op) {
    tk_shape_instr code[64];
    for (int w = TK_SHAPE_INPUT; w <= TK_SHAPE_ASSERT; w++) {
        int count = w == TK_SHAPE_OUTPUT ? tk_op_noutputs(op) : w == TK_SHAPE_ASSERT ? tk_op_nasserts(op)
                                                                                     : tk_op_nparams(op);
        for (int i = 0; i < count; i++) {
            char text[64];
            if (w == TK_SHAPE_ASSERT && tk_op_assert_text(op, i, text, sizeof text) < 0) abort();
            int nd = w >= TK_SHAPE_DEFAULT ? 1 : tk_op_shape_ndims(op, (tk_shape_of)w, i);
            for (int j = 0; j < nd; j++) {
                int len = tk_op_shape_code(op, (tk_shape_of)w, i, j, code, 64);
                if (len > 64) {
                    tk_shape_instr *big = malloc(sizeof *big * (size_t)len);
                    if (big && tk_op_shape_code(op, (tk_shape_of)w, i, j, big, len) != len) abort();
                    free(big);
                }
            }
        }
    }
}

static void fuzz_emit(tk_ctx *ctx, const tk_op *op) {
    char *src = NULL;
    if (tk_emit(ctx, op, TK_TARGET_C, &src) == TK_OK && !src) abort();
    tk_free(src);
    src = NULL;
    if (tk_emit(ctx, op, TK_TARGET_CUDA, &src) == TK_OK && !src) abort();
    tk_free(src);
    src = NULL;
    if (tk_emit_ex(ctx, op, TK_TARGET_C, TK_EMIT_PLAIN, &src) == TK_OK && !src) abort();
    tk_free(src);
}

static void fuzz_links(const tk_ctx *ctx, const tk_op *op) {
    for (int b = 0; b < tk_op_nbackward(op); b++) {
        const tk_op *bw = tk_op_find(ctx, tk_op_backward_at(op, b));
        int np = bw ? tk_op_nparams(bw) : 2, no = bw ? tk_op_noutputs(bw) : 2, index;
        for (int j = -1; j <= np; j++) (void)tk_op_backward_source(ctx, op, b, j, &index);
        for (int j = -1; j <= no; j++) (void)tk_op_backward_target(ctx, op, b, j);
    }
}

/* A failed load's error: its status, in fuzz.tk at a place (a syntax or
 * check error), and its text made of its fields. */
static int error_consistent(const tk_ctx *ctx, tk_status st) {
    const tk_error *e = tk_ctx_last_error(ctx);
    char want[sizeof e->text];
    snprintf(want, sizeof want, "%s:%d:%d: error: %s", e->file, e->line, e->col, e->message);
    if (e->status != (int)st || strcmp(e->text, tk_ctx_error(ctx)) != 0) return 0;
    if (st != TK_ERR_SYNTAX && st != TK_ERR_CHECK) return 1;
    return strcmp(e->file, "fuzz.tk") == 0 && e->line > 0 && e->col > 0 && strcmp(e->text, want) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tk_ctx *ctx = tk_ctx_new();
    if (!ctx) return 0;
    rng r = {seed_of(data, size)};
    tk_status st = tk_load_spec(ctx, "fuzz.tk", (const char *)data, size);
    if (st == TK_OK) {
        int linked = tk_ctx_link(ctx) == TK_OK;
        for (int i = 0; i < tk_op_count(ctx); i++) {
            const tk_op *op = tk_op_at(ctx, i);
            if (!tk_op_name(op) || !tk_op_schema(op)) abort();
            fuzz_emit(ctx, op);
            fuzz_shapes(op);
            if (linked) fuzz_links(ctx, op);
            fuzz_bind(op, &r);
        }
    } else if (tk_op_count(ctx) != 0 || tk_ctx_error(ctx)[0] == 0 || !error_consistent(ctx, st)) {
        abort();    /* a failed load adds nothing and says why, and where */
    } else if (strstr(tk_ctx_error(ctx), "the derived op does not check")) {
        abort();    /* 'backward auto' derived a spec that does not check: its bug, not the input's */
    }
    tk_ctx_free(ctx);
    return 0;
}
