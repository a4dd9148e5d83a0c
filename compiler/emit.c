/* emit.c - renders a checked op as C (CPU) or CUDA C source. The body is
 * the same text for both targets; what differs (function head, how the
 * kernel arguments are reached, the index-space loop) is data in k_targets. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>

#include "core.h"

typedef struct tk_target_desc {
    const char *head;       /* before the kernel name */
    const char *params;     /* the parameter list */
    const char *args;       /* how fields of tk_kargs are reached */
    const char *restrict_kw;
    int gpu;
} target_desc;

static const target_desc k_targets[] = {   /* ORDER tk_target */
    {"void ", "(const tk_kargs *a, tk_i64 begin, tk_i64 end)", "a->", "restrict", 0},  /* see cpu_kernel */
    {"extern \"C\" __global__ void ", "(const tk_kargs a)", "a.", "__restrict__", 1},
};

typedef struct emitter {
    tk_buf *b;
    const tk_op *op;
    const target_desc *tg;
    int variant;
    tk_vtype ftype;
    int indent;
    int copy;           /* unroll-and-jam copy being emitted, -1 outside */
    int ncopies;        /* copies of the body per step of the innermost dim */
    int nconds;         /* scratch: terms of the unit-stride test written */
    /* CPU plan for one run of the innermost dim (see plan_run) */
    unsigned char hoisted[256];     /* top-level statement i runs once per run */
    const tk_expr *memo[16];        /* floor divisions computed incrementally */
    int nmemo;
    int segmented;                  /* memo sites become per-segment constants */
    int in_segment;                 /* emitting the body of a segment loop */
    int seg_iv;                     /* ... an omp simd one: the innermost loop variable is tk_c0 + tk_i */
    const tk_stmt *def[TK_MAX_LOCALS];  /* top-level single-assignment locals */
    int inline_locals;              /* name_ref expands def[] (segment starts) */
    int plain;                      /* TK_EMIT_PLAIN */
    int wide;                       /* explicit vectors (see cpu_kernel): 1 512-bit, 2 256-bit; 0 none */
    const char *shared[8];          /* loop variables shared by all jam copies */
    int nshared;
    unsigned char hoisted_local[TK_MAX_LOCALS];
    int gdim;                       /* loop variable the copies offset (jam: the innermost) */
    /* CPU lane tiles (see lane_plan): V consecutive elements of the innermost
     * dim run as the lanes of SIMD loops over tk_j, times G copies along the
     * group dim gdim whose rows share loads */
    int lanes;                      /* V; 0: no lane tiles */
    int ngroup;                     /* G; 1: no group */
    int in_lane;                    /* emitting inside a lane loop */
    int lane_rev;                   /* lane tk_j is element V - 1 - tk_j of its block */
    int nblocks;                    /* R: blocks of V lanes per tile (copies along the innermost dim) */
    int nacc;                       /* accumulators per lane (lane_plan) */
    int vx;                         /* tiles on explicit vectors: R may exceed 1 */
    int gcopy, rcopy;               /* the copy being emitted: group row g, lane block r */
    const char *mask;               /* assignments take effect only where this holds */
    int lane_fix;                   /* >= 0: lane index printed instead of tk_j (vector addresses) */
    const char *vmask;              /* explicit vectors: the lane mask of this copy, NULL: all lanes */
    const tk_expr *vload[16];       /* explicit vectors: reads loaded once per lane block ... */
    int vload_r[16];                /* ... of this lane block, as tk_ld<i> */
    int nvload;
    const tk_expr *row[32];         /* explicit vectors: broadcast reads through a row pointer ... */
    int row_copy[32];               /* ... of this copy, tk_rp<i> (unit last-dim stride) */
    int nrow;
    tk_buf *pre;                    /* functions emitted before the kernel's body (explicit-vector loops) */
    int nvx;                        /* explicit-vector loops outlined so far */
    unsigned char arr[TK_MAX_LOCALS];   /* local held per lane (an array) */
    int gpu_tiles;                  /* GPU: the grid-stride loop walks lane tiles (see gpu_tile_loop) */
    /* GPU: sliding windows (see gpu_window_range): reads whose element for
     * lane j at u + 1 is lane j -/+ 1's at u, kept in registers tk_w<i> */
    const tk_expr *win[8];
    int win_shift[8];               /* -1: lane j takes lane j - 1's value, +1: lane j + 1's */
    int nwin, win_on;
    int win_rot;                    /* in an unrolled round of V steps: window slots renamed by tk_p, not shifted */
    /* GPU streams (see stream_find): lane-invariant reads advancing one
     * element a step, loaded 16 bytes at a time in the rounds */
    const tk_expr *strm[8];
    int strm_copy[8];               /* the group copy it is read in, -1: every copy (group-invariant) */
    int nstrm, strm_on, strm_w;     /* strm_w: elements in 16 bytes */
    int unit_copy;                  /* emitting the unit-stride copy of the GPU tile loop */
    /* GPU chunks (see gpu_chunk_loop): K consecutive elements of the
     * innermost dim per iteration, divisions stepped, stores gathered */
    int chunk;                      /* K; 0: one element per iteration */
    int in_chunk;                   /* emitting the unrolled body of a full chunk */
    const tk_stmt *vst[TK_MAX_TENSORS];  /* output i's store, gathered in registers tk_o<i> (NULL: stored directly) */
    int raw_read;                   /* tensor_read gives the stored element, unconverted */
    /* GPU tile shape (gpu_tune; 0: the defaults below) */
    int tune_lanes, tune_rows, tune_warp_rows, tune_chunk, tune_split, tune_ldg, tune_tiles, tune_regs;
    int mirror;                     /* GPU tiles: a thread takes tile positions p and n - 1 - p (mirror_plan) */
    /* GPU split reductions (see split_plan): S threads share a tile, dealing
     * out the iterations of the body's top-level loop split_loop */
    int split;                      /* S; 0 or 1: one thread a tile */
    const tk_stmt *split_loop;
    unsigned char split_acc[TK_MAX_LOCALS];   /* its accumulators */
    int outputs_only;               /* each_strided: the outputs only */
    int stepped;                    /* GPU chunks: the loop variables come from counters tk_x<k> (chunk_counters) */
} emitter;

/* ORDER DTYPE: the C type that stores one element. */
static const char *const k_ctype[TK_DTYPE_COUNT] = {
    "tk_u8", "tk_u8", "tk_i8", "tk_i16", "tk_i32", "tk_i64", "tk_u16", "tk_u16", "float", "double"};

/* GPU lane tiles: rows a warp's threads spread over (see gpu_tiles_head) */
#define TK_ROWS 4

/* ---- GPU tuning ------------------------------------------------------------------
 * TK_CUDA_TUNE="lanes=8,rows=2,warp_rows=8,chunk=64" overrides the CUDA tile
 * shape the emitter picks: lanes (outputs along the innermost dim a thread
 * computes: 4, 8, 16), rows (group rows a thread computes at most: 1, 2, 4,
 * 8), warp_rows (rows a warp's threads spread over: 1 to 32, a power of two),
 * chunk (bytes of the widest output a loop-free kernel's thread writes:
 * 16 to 128), split (threads that share a tile's top-level reduction
 * loop: 1 to 32, see split_plan) and ldg (bytes of one load of a stream:
 * 4, 8, 16, see stream_find; default 16) and tiles (tiles a thread takes: 1, or 2, a
 * tile and its mirror image along the row, see mirror_plan), and regs (at most
 * that many registers a thread: __maxnreg__, 32 to 248, a multiple of 8; ptxas
 * spills the rest to local memory; not given: as many as ptxas likes, at most
 * 255). Any key may be left out. It is the knob for measuring shapes
 * on a GPU (ci/gpu_tune.py), read at each emission; the emitted source, and so
 * the kernel cache's key, records the shape. A malformed value is an error.
 * An op's 'schedule' line (docs/spec.md) sets the same items for that op;
 * TK_CUDA_TUNE overrides them item by item. The launcher's grid sizing
 * (tk_emit_cuda_per_thread) reads it again: set it before the process's first
 * CUDA call of an op and leave it. */
typedef struct gpu_tune {
    int v[TK_SCHED_KEYS];   /* indexed as tk_sched_keys; 0: not given */
} gpu_tune;
enum { TUNE_LANES, TUNE_ROWS, TUNE_WARP_ROWS, TUNE_CHUNK, TUNE_SPLIT, TUNE_LDG, TUNE_TILES, TUNE_REGS };   /* ORDER tk_sched_keys */

static tk_status gpu_tune_parse(gpu_tune *t, char *err, size_t errsize) {
    memset(t, 0, sizeof *t);
    const char *env = getenv("TK_CUDA_TUNE");
    if (!env || !env[0]) return TK_OK;
    const char *p = env;
    while (*p) {
        size_t n = strcspn(p, "=,");
        int k = tk_sched_find(p, n);
        char *end = NULL;
        const char *digits = p + n + 1;
        long v = (k >= 0 && p[n] == '=' && *digits >= '0' && *digits <= '9') ? strtol(digits, &end, 10) : 0;
        if (k < 0 || !end || (*end && *end != ',') || (*end == ',' && !end[1]) || !tk_sched_valid(k, v) ||
            t->v[k]) {
            snprintf(err, errsize, "TK_CUDA_TUNE=\"%s\": expected key=value items separated by commas, each "
                     "key once: lanes 4..16, rows 1..8, warp_rows 1..32, chunk 16..128 (bytes), split 1..32, ldg 4..16 (bytes), tiles 1..2, each a power of two, regs 32..248, a multiple of 8",
                     env);
            return TK_ERR_INVALID;
        }
        t->v[k] = (int)v;
        p = *end ? end + 1 : end;
    }
    return TK_OK;
}

/* ORDER tk_vtype */
static const char *const k_vctype[] = {"void", "int", "tk_i64", "float", "double"};

static void line(emitter *E, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void line(emitter *E, const char *fmt, ...) {
    for (int i = 0; i < E->indent; i++) tk_buf_puts(E->b, "    ");
    va_list ap;
    va_start(ap, fmt);
    char tmp[1024];
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof tmp) {
        tk_buf_puts(E->b, tmp);
    } else if (n >= 0) {
        char *big = malloc((size_t)n + 1);
        if (!big) {
            E->b->oom = 1;
            return;
        }
        va_start(ap, fmt);
        vsnprintf(big, (size_t)n + 1, fmt, ap);
        va_end(ap);
        tk_buf_puts(E->b, big);
        free(big);
    }
    tk_buf_puts(E->b, "\n");
}

static const tk_param *param(const emitter *E, int i) { return &E->op->decl->params[i]; }
static const tk_param *output(const emitter *E, int i) { return &E->op->decl->outputs[i]; }
static int is_float_vt(tk_vtype t) { return t == TK_V_F32 || t == TK_V_F64; }

static int has_ell(const tk_param *p) { return p->ndims > 0 && p->dims[0]->kind == TK_E_ELLIPSIS; }

/* ---- expressions ---------------------------------------------------------- */

static void expr(emitter *E, const tk_expr *e, tk_vtype want);

/* Emits text converting a value of type from (already in the buffer via
 * the callback) to type to. */
static void open_conv(emitter *E, tk_vtype from, tk_vtype to) {
    if (from == to || to == TK_V_NONE) return;
    if (to == TK_V_BOOL) tk_buf_puts(E->b, "((");
    else tk_buf_printf(E->b, "((%s)(", k_vctype[to]);
}

static void close_conv(emitter *E, tk_vtype from, tk_vtype to) {
    if (from == to || to == TK_V_NONE) return;
    tk_buf_puts(E->b, to == TK_V_BOOL ? ") != 0)" : "))");
}

static void float_lit(emitter *E, double v, tk_vtype t) {
    char s[64];
    snprintf(s, sizeof s, t == TK_V_F32 ? "%.9g" : "%.17g", v);
    if (!strpbrk(s, ".eEni")) strcat(s, ".0");
    tk_buf_puts(E->b, s);
    if (t == TK_V_F32) tk_buf_puts(E->b, "f");
}

/* A top-level loop variable; in copy j the innermost one reads t + j (lane
 * tiles: lane tk_j reads t + tk_j and copy g the group variable + g). */
static void loop_var(emitter *E, const char *name) {
    const tk_opdecl *d = E->op->decl;
    if (E->seg_iv && strcmp(name, d->loop_vars[d->nloop - 1]) == 0) {
        tk_buf_puts(E->b, "(tk_c0 + tk_i)");
    } else if (E->in_lane && strcmp(name, d->loop_vars[d->nloop - 1]) == 0) {
        int off = E->rcopy * E->lanes;
        char j[16] = "tk_j";
        if (E->lane_fix >= 0) snprintf(j, sizeof j, "%d", E->lane_fix);
        if (E->lane_rev) tk_buf_printf(E->b, "(v_%s + (%d - %s))", name, off + E->lanes - 1, j);
        else if (off) tk_buf_printf(E->b, "(v_%s + (%d + %s))", name, off, j);
        else tk_buf_printf(E->b, "(v_%s + %s)", name, j);
    } else if (E->lanes && strcmp(name, d->loop_vars[E->gdim]) == 0) {
        if (E->gcopy > 0) tk_buf_printf(E->b, "(v_%s + %d)", name, E->gcopy);
        else tk_buf_printf(E->b, "v_%s", name);
    } else if (E->copy > 0 && strcmp(name, d->loop_vars[E->gdim]) == 0)
        tk_buf_printf(E->b, "(v_%s + %d)", name, E->copy);
    else
        tk_buf_printf(E->b, "v_%s", name);
}

/* A local: each unroll copy has its own, inner loop variables are shared. */
static void local_name(emitter *E, const char *name, int ref) {
    if (E->copy >= 0 && !E->op->locals[ref].is_loop)
        tk_buf_printf(E->b, "v_%s_%d%s", name, E->copy, E->in_lane && E->arr[ref] ? "[tk_j]" : "");
    else tk_buf_printf(E->b, "v_%s", name);
}

static void name_ref(emitter *E, const tk_expr *e) {
    int idx;
    for (int i = 0; i < E->op->decl->nloop; i++)
        if (strcmp(E->op->decl->loop_vars[i], e->name) == 0) {
            loop_var(E, e->name);
            return;
        }
    tk_sym_kind k = tk_resolve_header(E->op, e->name, &idx);
    if (k == TK_SYM_DIM) tk_buf_printf(E->b, "d_%s", e->name);
    else if (k == TK_SYM_INT || k == TK_SYM_FLOAT) tk_buf_printf(E->b, "p_%s", e->name);
    else if (E->inline_locals && E->def[e->ref] && !E->hoisted_local[e->ref]) {
        tk_buf_puts(E->b, "(");
        expr(E, E->def[e->ref]->value, E->op->locals[e->ref].type);
        tk_buf_puts(E->b, ")");
    } else local_name(E, e->name, e->ref);
}

/* " * stride" of explicit dim i of p. */
static void stride(emitter *E, const tk_param *p, int i) {
    tk_buf_printf(E->b, " * s_%s_%d", p->name, i);
}

/* The element offset of e's first n indices (with the batch offset). */
static void tensor_offset_n(emitter *E, const tk_expr *e, int n) {
    const tk_param *p = param(E, e->ref);
    if (has_ell(p)) tk_buf_printf(E->b, "o_%s + ", p->name);
    for (int i = 0; i < n; i++) {
        tk_buf_puts(E->b, i ? " + " : "");
        expr(E, e->args[i], TK_V_INT);
        stride(E, p, i);
    }
    if (n == 0) tk_buf_puts(E->b, "0");
}

static void tensor_offset(emitter *E, const tk_expr *e) { tensor_offset_n(E, e, e->nargs); }

static int row_match(const emitter *E, const tk_expr *e);

/* A stored element of each dtype as the value the body computes with: text before and after it. */
static const char *const k_to_value[TK_DTYPE_COUNT] = {   /* ORDER DTYPE */
    "(", "(tk_i64)", "(tk_i64)", "(tk_i64)", "(tk_i64)", "", "tk_f16_to_f32(", "tk_bf16_to_f32(", "", ""};
static const char *const k_to_value_end[TK_DTYPE_COUNT] = {" != 0)", "", "", "", "", "", ")", ")", "", ""};

static void tensor_read(emitter *E, const tk_expr *e) {
    const tk_param *p = param(E, e->ref);
    tk_dtype dt = tk_variant_dtype(E->op, E->variant, e->ref);
    const char *pre = E->raw_read ? "" : k_to_value[dt], *post = E->raw_read ? "" : k_to_value_end[dt];
    for (int i = 0; E->win_on && E->in_lane && i < E->nwin; i++)
        if (E->win[i] == e) {
            if (!E->win_rot) tk_buf_printf(E->b, "tk_w%d[tk_j]", i);
            else if (E->win_shift[i] < 0) tk_buf_printf(E->b, "tk_w%d[(tk_j + %d - tk_p) %% %d]", i, E->lanes, E->lanes);
            else tk_buf_printf(E->b, "tk_w%d[(tk_j + tk_p) %% %d]", i, E->lanes);
            return;
        }
    for (int i = 0; E->strm_on && E->in_lane && i < E->nstrm; i++)
        if (E->strm[i] == e && (E->strm_copy[i] < 0 || E->strm_copy[i] == E->gcopy)) {
            tk_buf_printf(E->b, "tk_sv%d[tk_p]", i);
            return;
        }
    int r = row_match(E, e);
    if (r >= 0) {   /* through the copy's row pointer: unit stride along the last dim */
        tk_buf_printf(E->b, "%stk_rp%d[", pre, r);
        expr(E, e->args[e->nargs - 1], TK_V_INT);
        stride(E, p, e->nargs - 1);
        tk_buf_printf(E->b, "]%s", post);
        return;
    }
    if (E->chunk) {   /* GPU chunks: the asm of their vector stores would cost the implicit read-only path */
        tk_buf_printf(E->b, "%s__ldg(&t_%s[", pre, p->name);
        tensor_offset(E, e);
        tk_buf_printf(E->b, "])%s", post);
        return;
    }
    tk_buf_printf(E->b, "%st_%s[", pre, p->name);
    tensor_offset(E, e);
    tk_buf_printf(E->b, "]%s", post);
}

static void call_f(emitter *E, const char *f32name, const char *f64name, const tk_expr *e, tk_vtype t) {
    tk_buf_printf(E->b, "%s(", t == TK_V_F32 ? f32name : f64name);
    for (int i = 0; i < e->nargs; i++) {
        tk_buf_puts(E->b, i ? ", " : "");
        expr(E, e->args[i], t);
    }
    tk_buf_puts(E->b, ")");
}

static void call(emitter *E, const tk_expr *e) {
    const char *f = e->name;
    tk_vtype a = e->args[0]->vtype, t = e->vtype;
    static const char *const sfx[] = {"", "i", "i", "f", "d"};     /* ORDER tk_vtype */
    if (!strcmp(f, "int") || !strcmp(f, "float") || !strcmp(f, "float32") || !strcmp(f, "float64") ||
        !strcmp(f, "bool")) {
        if (t == TK_V_INT && is_float_vt(a)) {
            tk_buf_puts(E->b, "tk_f2i(");
            expr(E, e->args[0], TK_V_F64);
            tk_buf_puts(E->b, ")");
        } else {
            expr(E, e->args[0], t);
        }
        return;
    }
    if (!strcmp(f, "min") || !strcmp(f, "max") || !strcmp(f, "abs")) {
        tk_buf_printf(E->b, "tk_%s%s(", f, sfx[t]);
        for (int i = 0; i < e->nargs; i++) {
            tk_buf_puts(E->b, i ? ", " : "");
            expr(E, e->args[i], t);
        }
        tk_buf_puts(E->b, ")");
        return;
    }
    if (!strcmp(f, "floor") || !strcmp(f, "ceil")) {
        if (!is_float_vt(a)) {
            expr(E, e->args[0], TK_V_INT);
            return;
        }
        tk_buf_puts(E->b, "tk_f2i(");
        char f32[16];
        snprintf(f32, sizeof f32, "%sf", f);
        call_f(E, f32, f, e, a);
        tk_buf_puts(E->b, ")");
        return;
    }
    if (!strcmp(f, "sigmoid")) {
        call_f(E, "tk_sigmoidf", "tk_sigmoid", e, t);
        return;
    }
    char f32[16];
    snprintf(f32, sizeof f32, "%sf", f);
    call_f(E, f32, f, e, t);
}

static int chunk_remainder(const emitter *E, const tk_expr *e);

/* GPU: the tk_kargs.i slot of divisor e when it is an int scalar or a dim
 * by name (its multiplier is in tk_kargs.idiv, see tk_kdiv), else -1. */
static int kdiv_slot(const emitter *E, const tk_expr *e) {
    int idx;
    if (E->plain || e->kind != TK_E_NAME || e->vtype != TK_V_INT) return -1;   /* plain: the reference */
    for (int i = 0; i < E->op->decl->nloop; i++)
        if (strcmp(E->op->decl->loop_vars[i], e->name) == 0) return -1;
    tk_sym_kind k = tk_resolve_header(E->op, e->name, &idx);
    if (k == TK_SYM_DIM) return E->op->dims[idx].slot;
    if (k == TK_SYM_INT && param(E, idx)->kind == TK_P_INT) return E->op->slot[idx];
    return -1;
}

static void binary(emitter *E, const tk_expr *e) {
    tk_vtype a = e->args[0]->vtype, b = e->args[1]->vtype;
    tk_vtype t = a > b ? a : b;     /* operand type */
    if (e->op == TK_OPC_AND || e->op == TK_OPC_OR) t = TK_V_BOOL;
    if ((e->op == TK_OPC_DIV || e->op == TK_OPC_POW) && !is_float_vt(t)) t = E->ftype;
    const char *fn = NULL;
    int rem = chunk_remainder(E, e);
    if (rem >= 0) {
        tk_buf_printf(E->b, "(tk_i64)tk_r%d", rem);
        return;
    }
    for (int i = 0; i < E->nmemo; i++)
        if (E->memo[i] == e && E->in_segment) {
            const char *v = E->op->decl->loop_vars[E->op->decl->nloop - 1];
            if (e->op == TK_OPC_MOD && E->seg_iv) tk_buf_printf(E->b, "(tk_r%d + tk_i)", i);
            else if (e->op == TK_OPC_MOD) tk_buf_printf(E->b, "(tk_r%d + (v_%s - tk_c0))", i, v);
            else tk_buf_printf(E->b, "tk_q%d", i);
            return;
        } else if (E->memo[i] == e && E->in_chunk) {
            tk_buf_printf(E->b, e->op == TK_OPC_MOD ? "(tk_i64)tk_r%d" : "tk_q%d", i);
            return;
        } else if (E->memo[i] == e && !E->segmented && !E->tg->gpu) {
            tk_buf_printf(E->b, "tk_divmemo_%c(&tk_dm%d, ", e->op == TK_OPC_MOD ? 'r' : 'q', i);
            expr(E, e->args[0], TK_V_INT);
            tk_buf_puts(E->b, ", ");
            expr(E, e->args[1], TK_V_INT);
            tk_buf_puts(E->b, ")");
            return;
        }
    int ks = t == TK_V_INT && E->tg->gpu ? kdiv_slot(E, e->args[1]) : -1;
    if (ks >= 0 && (e->op == TK_OPC_FLOORDIV || e->op == TK_OPC_MOD)) {   /* by a launch-wide divisor */
        tk_buf_printf(E->b, "%s(", e->op == TK_OPC_MOD ? "tk_mod_k" : "tk_floordiv_k");
        expr(E, e->args[0], t);
        tk_buf_puts(E->b, ", ");
        expr(E, e->args[1], t);
        tk_buf_printf(E->b, ", %sidiv[%d])", E->tg->args, ks);
        return;
    }
    if (e->op == TK_OPC_FLOORDIV) fn = t == TK_V_INT ? "tk_floordiv" : NULL;
    if (e->op == TK_OPC_MOD) fn = t == TK_V_INT ? "tk_mod" : t == TK_V_F32 ? "tk_fmodf_py" : "tk_fmod_py";
    if (e->op == TK_OPC_POW) fn = t == TK_V_F32 ? "powf" : "pow";
    if (e->op == TK_OPC_FLOORDIV && !fn) {
        tk_buf_puts(E->b, t == TK_V_F32 ? "floorf(" : "floor(");
        expr(E, e->args[0], t);
        tk_buf_puts(E->b, " / ");
        expr(E, e->args[1], t);
        tk_buf_puts(E->b, ")");
        return;
    }
    if (fn) {
        tk_buf_printf(E->b, "%s(", fn);
        expr(E, e->args[0], t);
        tk_buf_puts(E->b, ", ");
        expr(E, e->args[1], t);
        tk_buf_puts(E->b, ")");
        return;
    }
    static const char *const text[TK_OPC_COUNT] = {   /* ORDER OPC */
        "", "+", "-", "*", "/", "", "", "", "==", "!=", "<", "<=", ">", ">=", "&&", "||", "", "", ""};
    tk_buf_puts(E->b, "(");
    expr(E, e->args[0], t);
    tk_buf_printf(E->b, " %s ", text[e->op]);
    expr(E, e->args[1], t);
    tk_buf_puts(E->b, ")");
}

/* Emits e converted to type want (TK_V_NONE: e's own type). */
static void expr(emitter *E, const tk_expr *e, tk_vtype want) {
    open_conv(E, e->vtype, want);
    switch (e->kind) {
    case TK_E_INT: tk_buf_printf(E->b, "%lldLL", (long long)e->ival); break;
    case TK_E_BOOL: tk_buf_puts(E->b, e->ival ? "1" : "0"); break;
    case TK_E_FLOAT: float_lit(E, e->fval, e->vtype); break;
    case TK_E_NAME: name_ref(E, e); break;
    case TK_E_INDEX: tensor_read(E, e); break;
    case TK_E_CALL: call(E, e); break;
    case TK_E_UNARY:
        tk_buf_puts(E->b, e->op == TK_OPC_NOT ? "(!" : e->op == TK_OPC_NEG ? "(-" : "(+");
        expr(E, e->args[0], e->vtype);
        tk_buf_puts(E->b, ")");
        break;
    case TK_E_COND:
        tk_buf_puts(E->b, "(");
        expr(E, e->args[1], TK_V_BOOL);
        tk_buf_puts(E->b, " ? ");
        expr(E, e->args[0], e->vtype);
        tk_buf_puts(E->b, " : ");
        expr(E, e->args[2], e->vtype);
        tk_buf_puts(E->b, ")");
        break;
    case TK_E_BINARY: binary(E, e); break;
    default: break;
    }
    close_conv(E, e->vtype, want);
}

/* ---- statements ----------------------------------------------------------- */

static void block(emitter *E, tk_stmt **body, int n);
static int expr_uses(const tk_expr *e, const char *name);

static void begin_line(emitter *E) {
    for (int i = 0; i < E->indent; i++) tk_buf_puts(E->b, "    ");
}

/* A masked assignment (lane tiles): name = mask ? value : name, where
 * value is what the assignment computes; a declared temporary gets 0 where
 * the mask is off (it is only read under the same mask). */
static void masked_assign(emitter *E, const tk_stmt *s) {
    tk_vtype lt = E->op->locals[s->ref].type;
    begin_line(E);
    if (s->declares && !(E->in_lane && E->arr[s->ref])) {
        tk_buf_printf(E->b, "%s ", k_vctype[lt]);
        local_name(E, s->name, s->ref);
        tk_buf_printf(E->b, " = (%s) ? (", E->mask);
        expr(E, s->value, lt);
        tk_buf_printf(E->b, ") : (%s)0;\n", k_vctype[lt]);
        return;
    }
    local_name(E, s->name, s->ref);
    tk_buf_printf(E->b, " = (%s) ? ", E->mask);
    if (s->op == TK_OPC_NONE) {
        tk_buf_puts(E->b, "(");
        expr(E, s->value, lt);
        tk_buf_puts(E->b, ")");
    } else {
        tk_vtype r = lt > s->value->vtype ? lt : s->value->vtype;
        if (s->op == TK_OPC_DIV && !is_float_vt(r)) r = E->ftype;
        tk_buf_printf(E->b, "(%s)((%s)", k_vctype[lt], k_vctype[r]);
        local_name(E, s->name, s->ref);
        tk_buf_printf(E->b, " %s (", tk_opc_text(s->op));
        expr(E, s->value, r);
        tk_buf_puts(E->b, "))");
    }
    tk_buf_puts(E->b, " : ");
    local_name(E, s->name, s->ref);
    tk_buf_puts(E->b, ";\n");
}

static void assign(emitter *E, const tk_stmt *s) {
    tk_vtype lt = E->op->locals[s->ref].type;
    if (E->mask) {
        masked_assign(E, s);
        return;
    }
    begin_line(E);
    if (s->declares) {
        if (!(E->in_lane && E->arr[s->ref])) tk_buf_printf(E->b, "%s ", k_vctype[lt]);
        local_name(E, s->name, s->ref);
        tk_buf_puts(E->b, " = ");
        expr(E, s->value, lt);
    } else if (s->op == TK_OPC_NONE) {
        local_name(E, s->name, s->ref);
        tk_buf_puts(E->b, " = ");
        expr(E, s->value, lt);
    } else {
        tk_vtype r = lt > s->value->vtype ? lt : s->value->vtype;
        if (s->op == TK_OPC_DIV && !is_float_vt(r)) r = E->ftype;
        local_name(E, s->name, s->ref);
        if (r == lt) {
            tk_buf_printf(E->b, " %s= ", tk_opc_text(s->op));
            expr(E, s->value, lt);
        } else {
            tk_buf_printf(E->b, " = (%s)((%s)", k_vctype[lt], k_vctype[r]);
            local_name(E, s->name, s->ref);
            tk_buf_printf(E->b, " %s ", tk_opc_text(s->op));
            expr(E, s->value, r);
            tk_buf_puts(E->b, ")");
        }
    }
    tk_buf_puts(E->b, ";\n");
}

/* The element of output s->ref that store s writes: t_out[offset]. */
static void store_target(emitter *E, const tk_stmt *s) {
    const tk_param *o = output(E, s->ref);
    tk_buf_printf(E->b, "t_%s[", o->name);
    if (has_ell(o)) tk_buf_printf(E->b, "o_%s + ", o->name);
    for (int i = 0; i < s->nindex; i++) {
        tk_buf_puts(E->b, i ? " + " : "");
        loop_var(E, s->index[i]->name);
        stride(E, o, i);
    }
    if (s->nindex == 0) tk_buf_puts(E->b, "0");
    tk_buf_puts(E->b, "]");
}

static void store(emitter *E, const tk_stmt *s) {
    tk_dtype dt = tk_variant_out_dtype(E->op, E->variant, s->ref);
    begin_line(E);
    if (E->in_chunk && E->vst[s->ref]) tk_buf_printf(E->b, "tk_o%d.e[tk_k]", s->ref);
    else store_target(E, s);
    tk_buf_puts(E->b, " = ");
    if ((dt == TK_F16 || dt == TK_BF16) && s->value->kind == TK_E_INDEX &&
        tk_variant_dtype(E->op, E->variant, s->value->ref) == dt) {
        /* a 16-bit float copied as it is: the round trip through float32 is exact */
        E->raw_read = 1;
        expr(E, s->value, s->value->vtype);
        E->raw_read = 0;
        tk_buf_puts(E->b, ";\n");
        return;
    }
    switch (dt) {
    case TK_F16: tk_buf_puts(E->b, "tk_f32_to_f16("); expr(E, s->value, TK_V_F32); tk_buf_puts(E->b, ")"); break;
    case TK_BF16: tk_buf_puts(E->b, "tk_f32_to_bf16("); expr(E, s->value, TK_V_F32); tk_buf_puts(E->b, ")"); break;
    case TK_F32: expr(E, s->value, TK_V_F32); break;
    case TK_F64: expr(E, s->value, TK_V_F64); break;
    case TK_BOOL: tk_buf_puts(E->b, "(tk_u8)"); expr(E, s->value, TK_V_BOOL); break;
    default:
        tk_buf_printf(E->b, "(%s)", k_ctype[dt]);
        expr(E, s->value, TK_V_INT);
        break;
    }
    tk_buf_puts(E->b, ";\n");
}

static void if_stmt(emitter *E, const tk_stmt *s, int is_elif) {
    if (!is_elif) begin_line(E);
    tk_buf_puts(E->b, "if (");
    expr(E, s->value, TK_V_BOOL);
    tk_buf_puts(E->b, ") {\n");
    E->indent++;
    block(E, s->body, s->nbody);
    E->indent--;
    begin_line(E);
    tk_buf_puts(E->b, "}");
    if (s->norelse == 1 && s->orelse[0]->kind == TK_S_IF) {
        tk_buf_puts(E->b, " else ");
        if_stmt(E, s->orelse[0], 1);
        return;
    }
    if (s->norelse > 0) {
        tk_buf_puts(E->b, " else {\n");
        E->indent++;
        block(E, s->orelse, s->norelse);
        E->indent--;
        begin_line(E);
        tk_buf_puts(E->b, "}");
    }
    tk_buf_puts(E->b, "\n");
}

/* The accumulators of a loop body that only declares loop-local temporaries
 * and adds into outer locals that it never reads (`s += expr`): such a loop
 * may be vectorised with a reassociated sum. Returns their count, 0 if the
 * body has another shape. */
static int reduction_vars(const emitter *E, const tk_stmt *loop, int *refs, int max) {
    int n = 0;
    for (int i = 0; i < loop->nbody; i++) {
        const tk_stmt *s = loop->body[i];
        if (s->kind != TK_S_ASSIGN) return 0;
        if (s->declares) continue;
        if (s->op != TK_OPC_ADD || E->op->locals[s->ref].is_loop) return 0;
        int seen = 0;
        for (int j = 0; j < n; j++) seen |= refs[j] == s->ref;
        if (!seen) {
            if (n == max) return 0;
            refs[n++] = s->ref;
        }
    }
    for (int j = 0; j < n; j++)
        for (int i = 0; i < loop->nbody; i++)
            if (expr_uses(loop->body[i]->value, E->op->locals[refs[j]].name)) return 0;
    return n;
}

/* `#pragma omp simd reduction(+: ...)` over the accumulators of copies
 * [c0, c1) (c0 == -1: no unroll copies). C target only. */
static void simd_pragma(emitter *E, const tk_stmt *loop, int c0, int c1) {
    int refs[16];
    int n = E->tg->gpu || E->plain ? 0 : reduction_vars(E, loop, refs, 16);
    if (n == 0) return;
    begin_line(E);
    tk_buf_puts(E->b, "#pragma omp simd reduction(+:");
    int saved = E->copy, first = 1;
    for (int c = c0; c < (c0 < 0 ? 0 : c1); c++)
        for (int j = 0; j < n; j++) {
            E->copy = c;
            tk_buf_puts(E->b, first ? "" : ", ");
            local_name(E, E->op->locals[refs[j]].name, refs[j]);
            first = 0;
        }
    E->copy = saved;
    tk_buf_puts(E->b, ")\n");
}

/* for (v = lo; v < hi; ++v) { body } with lo, hi given as text. */
static void range_loop(emitter *E, const tk_stmt *s, const char *lo, const char *hi, int c0, int c1) {
    simd_pragma(E, s, c0, c1);
    line(E, "for (tk_i64 v_%s = %s; v_%s < %s; ++v_%s) {", s->name, lo, s->name, hi, s->name);
    E->indent++;
    int saved = E->copy;
    for (int c = c0; c < (c0 < 0 ? c0 + 1 : c1); c++) {
        E->copy = c;
        block(E, s->body, s->nbody);
    }
    E->copy = saved;
    E->indent--;
    line(E, "}");
}

/* A range loop in its own block, so that its bounds are evaluated once and
 * sibling loops may reuse the variable's name. The bounds are r_<var>_lo and
 * r_<var>_end: with v_ they were the names of locals called <var>_lo. */
static void for_stmt(emitter *E, const tk_stmt *s) {
    char lo[96], hi[96], sfx[16] = "";
    if (E->copy >= 0) snprintf(sfx, sizeof sfx, "_%d", E->copy);
    snprintf(hi, sizeof hi, "r_%s_end%s", s->name, sfx);
    line(E, "{");
    E->indent++;
    begin_line(E);
    tk_buf_printf(E->b, "const tk_i64 %s = ", hi);
    expr(E, s->hi, TK_V_INT);
    tk_buf_puts(E->b, ";\n");
    if (s->lo) {
        snprintf(lo, sizeof lo, "r_%s_lo%s", s->name, sfx);
        begin_line(E);
        tk_buf_printf(E->b, "const tk_i64 %s = ", lo);
        expr(E, s->lo, TK_V_INT);
        tk_buf_puts(E->b, ";\n");
    } else {
        snprintf(lo, sizeof lo, "0");
    }
    range_loop(E, s, lo, hi, E->copy, E->copy + 1);
    E->indent--;
    line(E, "}");
}

/* Unroll-and-jam of a top-level loop across the body copies: each copy j
 * runs [lo_j, hi_j); the part common to all copies runs as one loop whose
 * body holds every copy (loads of copy-invariant values are shared and the
 * accumulators are independent), the rest per copy before and after it. */
/* Whether e has the same value in every unroll copy: it reads neither the
 * innermost loop variable nor a local other than a shared loop variable. */
static int copy_invariant(const emitter *E, const tk_expr *e) {
    if (!e) return 1;
    if (e->kind == TK_E_NAME) {
        const tk_opdecl *d = E->op->decl;
        int idx;
        if (strcmp(e->name, d->loop_vars[d->nloop - 1]) == 0) return 0;
        for (int i = 0; i < d->nloop; i++)
            if (strcmp(e->name, d->loop_vars[i]) == 0) return 1;
        if (tk_resolve_header(E->op, e->name, &idx) != TK_SYM_NONE) return 1;
        for (int i = 0; i < E->nshared; i++)
            if (strcmp(E->shared[i], e->name) == 0) return 1;
        return 0;
    }
    for (int i = 0; i < e->nargs; i++)
        if (!copy_invariant(E, e->args[i])) return 0;
    return 1;
}

static void jammed_for(emitter *E, const tk_stmt *s);

/* Statements of a jammed region: loops are jammed, the rest copied. */
static void jam_block(emitter *E, tk_stmt **body, int n) {
    for (int i = 0; i < n; i++) {
        if (body[i]->kind == TK_S_FOR) {
            jammed_for(E, body[i]);
            continue;
        }
        for (int c = 0; c < E->ncopies; c++) {
            E->copy = c;
            block(E, &body[i], 1);
        }
    }
}

/* A loop whose bounds are the same in every copy runs once for all of
 * them, with the copies' statements (and jammed inner loops) inside. */
static void shared_for(emitter *E, const tk_stmt *s) {
    int refs[16];
    E->copy = 0;
    line(E, "{");
    E->indent++;
    begin_line(E);
    tk_buf_printf(E->b, "const tk_i64 r_%s_lo = ", s->name);
    if (s->lo) expr(E, s->lo, TK_V_INT);
    else tk_buf_puts(E->b, "0");
    tk_buf_printf(E->b, ", r_%s_end = ", s->name);
    expr(E, s->hi, TK_V_INT);
    tk_buf_puts(E->b, ";\n");
    char lo[96], hi[96];
    snprintf(lo, sizeof lo, "r_%s_lo", s->name);
    snprintf(hi, sizeof hi, "r_%s_end", s->name);
    E->shared[E->nshared++] = s->name;
    if (reduction_vars(E, s, refs, 16) > 0) {
        range_loop(E, s, lo, hi, 0, E->ncopies);
    } else {
        line(E, "for (tk_i64 v_%s = %s; v_%s < %s; ++v_%s) {", s->name, lo, s->name, hi, s->name);
        E->indent++;
        jam_block(E, s->body, s->nbody);
        E->indent--;
        line(E, "}");
    }
    E->nshared--;
    E->indent--;
    line(E, "}");
}

static void jammed_for(emitter *E, const tk_stmt *s) {
    int U = E->ncopies;
    if (copy_invariant(E, s->lo) && copy_invariant(E, s->hi) && E->nshared < 8) {
        shared_for(E, s);
        return;
    }
    line(E, "{");
    E->indent++;
    for (int c = 0; c < U; c++) {
        E->copy = c;
        begin_line(E);
        tk_buf_printf(E->b, "const tk_i64 lo_%d = ", c);
        if (s->lo) expr(E, s->lo, TK_V_INT);
        else tk_buf_puts(E->b, "0");
        tk_buf_printf(E->b, ", hi_%d = ", c);
        expr(E, s->hi, TK_V_INT);
        tk_buf_puts(E->b, ";\n");
    }
    E->copy = 0;
    begin_line(E);
    tk_buf_puts(E->b, "tk_i64 lo = lo_0, hi = hi_0;\n");
    for (int c = 1; c < U; c++) line(E, "lo = tk_maxi(lo, lo_%d), hi = tk_mini(hi, hi_%d);", c, c);
    line(E, "if (lo <= hi) {");
    E->indent++;
    char a[32], b[32];
    for (int c = 0; c < U; c++) {
        snprintf(a, sizeof a, "lo_%d", c);
        range_loop(E, s, a, "lo", c, c + 1);
    }
    range_loop(E, s, "lo", "hi", 0, U);
    for (int c = 0; c < U; c++) {
        snprintf(b, sizeof b, "hi_%d", c);
        range_loop(E, s, "hi", b, c, c + 1);
    }
    E->indent--;
    line(E, "} else {");
    E->indent++;
    for (int c = 0; c < U; c++) {
        snprintf(a, sizeof a, "lo_%d", c);
        snprintf(b, sizeof b, "hi_%d", c);
        range_loop(E, s, a, b, c, c + 1);
    }
    E->indent--;
    line(E, "}");
    E->indent--;
    line(E, "}");
    E->copy = 0;
}

/* The body unrolled ncopies times along the innermost loop variable. */
static void jammed_body(emitter *E) {
    jam_block(E, E->op->decl->body, E->op->decl->nbody);
    E->copy = -1;
}

static int has_top_level_for(const tk_opdecl *d);

/* ---- CPU lane tiles ----------------------------------------------------------
 * A tile is V consecutive elements of the innermost dim (the lanes) times G
 * rows of the group dim. Every statement runs inside `#pragma omp simd` loops
 * over the lane index tk_j, so the vector lanes are the elements of the
 * innermost dim, each summing in the order the spec says (no reassociation);
 * the G copies of a statement share the loads that do not depend on the group
 * dim (for rwkv: one w vector feeds the FMAs of G batch rows). Locals live in
 * per-lane arrays; an inner loop whose bounds differ between lanes runs its
 * common range unmasked and the rest with a per-lane condition. */

/* Whether statements hold no loop. */
static int lane_simple(tk_stmt **body, int n) {
    for (int i = 0; i < n; i++) {
        if (body[i]->kind == TK_S_FOR) return 0;
        if (body[i]->kind == TK_S_IF &&
            !(lane_simple(body[i]->body, body[i]->nbody) && lane_simple(body[i]->orelse, body[i]->norelse)))
            return 0;
    }
    return 1;
}

/* Whether e has the same value in every lane and copy of a tile. */
static int lane_invariant(const emitter *E, const tk_expr *e) {
    if (!e) return 1;
    if (e->kind == TK_E_NAME) {
        const tk_opdecl *d = E->op->decl;
        int idx;
        if (strcmp(e->name, d->loop_vars[d->nloop - 1]) == 0) return 0;
        if (E->ngroup > 1 && strcmp(e->name, d->loop_vars[E->gdim]) == 0) return 0;
        for (int i = 0; i < d->nloop; i++)
            if (strcmp(e->name, d->loop_vars[i]) == 0) return 1;
        if (tk_resolve_header(E->op, e->name, &idx) != TK_SYM_NONE) return 1;
        for (int i = 0; i < E->nshared; i++)
            if (strcmp(E->shared[i], e->name) == 0) return 1;
        return 0;
    }
    for (int i = 0; i < e->nargs; i++)
        if (!lane_invariant(E, e->args[i])) return 0;
    return 1;
}

/* Occurrences of local name (read or assigned) in statements. */
static int expr_count(const tk_expr *e, const char *name) {
    if (!e) return 0;
    int n = e->kind == TK_E_NAME && strcmp(e->name, name) == 0;
    for (int i = 0; i < e->nargs; i++) n += expr_count(e->args[i], name);
    return n;
}

static int stmt_count(tk_stmt **body, int nb, const char *name) {
    int n = 0;
    for (int i = 0; i < nb; i++) {
        const tk_stmt *s = body[i];
        n += s->kind == TK_S_ASSIGN && strcmp(s->name, name) == 0;
        n += expr_count(s->value, name) + expr_count(s->lo, name) + expr_count(s->hi, name);
        n += stmt_count(s->body, s->nbody, name) + stmt_count(s->orelse, s->norelse, name);
    }
    return n;
}

/* Assigned locals of statements, marked in out[]. */
static void assigned_locals(tk_stmt **body, int n, unsigned char *out) {
    for (int i = 0; i < n; i++) {
        if (body[i]->kind == TK_S_ASSIGN) out[body[i]->ref] = 1;
        assigned_locals(body[i]->body, body[i]->nbody, out);
        assigned_locals(body[i]->orelse, body[i]->norelse, out);
    }
}

/* Whether statements read a tensor with no index naming the group variable
 * (shared by the copies), and one that names it. */
static void group_reads(const tk_expr *e, const char *g, int *shared, int *own) {
    if (!e) return;
    if (e->kind == TK_E_INDEX) {
        int uses = 0;
        for (int i = 0; i < e->nargs; i++) uses |= expr_uses(e->args[i], g);
        *(uses ? own : shared) = 1;
    }
    for (int i = 0; i < e->nargs; i++) group_reads(e->args[i], g, shared, own);
}

static void group_reads_stmts(tk_stmt **body, int n, const char *g, int *shared, int *own) {
    for (int i = 0; i < n; i++) {
        group_reads(body[i]->value, g, shared, own);
        group_reads_stmts(body[i]->body, body[i]->nbody, g, shared, own);
        group_reads_stmts(body[i]->orelse, body[i]->norelse, g, shared, own);
    }
}

/* The coefficient of loop variable v in int expression e, when e is
 * coef * v + (terms without v) built from + - and literal factors;
 * returns 0 when it is not of that form. */
static int lane_coef(const tk_expr *e, const char *v, int64_t *coef) {
    int64_t a, b;
    switch (e->kind) {
    case TK_E_INT: *coef = 0; return 1;
    case TK_E_NAME: *coef = strcmp(e->name, v) == 0; return 1;
    case TK_E_UNARY:
        if (e->op != TK_OPC_NEG || !lane_coef(e->args[0], v, &a)) return 0;
        *coef = -a;
        return 1;
    case TK_E_BINARY:
        if (e->op == TK_OPC_ADD || e->op == TK_OPC_SUB) {
            if (!lane_coef(e->args[0], v, &a) || !lane_coef(e->args[1], v, &b)) return 0;
            *coef = e->op == TK_OPC_ADD ? a + b : a - b;
            return 1;
        }
        if (e->op == TK_OPC_MUL && e->args[0]->kind == TK_E_INT && lane_coef(e->args[1], v, &b)) {
            *coef = e->args[0]->ival * b;
            return 1;
        }
        if (e->op == TK_OPC_MUL && e->args[1]->kind == TK_E_INT && lane_coef(e->args[0], v, &a)) {
            *coef = e->args[1]->ival * a;
            return 1;
        }
        return 0;
    default:
        return !expr_uses(e, v) ? (*coef = 0, 1) : 0;
    }
}

/* Sum over the tensor reads of e of the direction (+1, -1) in which their
 * innermost index moves with the lanes. */
static int lane_dir(const tk_expr *e, const char *v) {
    if (!e) return 0;
    int n = 0;
    int64_t c;
    if (e->kind == TK_E_INDEX && e->nargs > 0 && lane_coef(e->args[e->nargs - 1], v, &c))
        n += c < 0 ? -1 : c > 0;
    for (int i = 0; i < e->nargs; i++) n += lane_dir(e->args[i], v);
    return n;
}

static int lane_dir_stmts(tk_stmt **body, int nb, const char *v) {
    int n = 0;
    for (int i = 0; i < nb; i++) {
        n += lane_dir(body[i]->value, v);
        n += lane_dir_stmts(body[i]->body, body[i]->nbody, v) + lane_dir_stmts(body[i]->orelse, body[i]->norelse, v);
    }
    return n;
}

typedef struct lane_info {
    tk_stmt *loops[32];     /* loops whose bounds differ between lanes */
    int nloops;
    const char *outer[32][8];   /* the shared loops around each */
    int nouter[32];
} lane_info;

/* Whether statements fit a tile: at each level, loops with lane-invariant
 * bounds hold tile statements, other loops only loop-free statements. */
static int lane_walk(emitter *E, tk_stmt **body, int n, lane_info *li) {
    for (int i = 0; i < n; i++) {
        tk_stmt *s = body[i];
        if (s->kind == TK_S_IF && !lane_simple(&s, 1)) return 0;
        if (s->kind != TK_S_FOR) continue;
        if (lane_invariant(E, s->lo) && lane_invariant(E, s->hi)) {
            if (E->nshared == 8) return 0;
            E->shared[E->nshared++] = s->name;
            int ok = lane_walk(E, s->body, s->nbody, li);
            E->nshared--;
            if (!ok) return 0;
        } else {
            if (!lane_simple(s->body, s->nbody) || li->nloops == 32) return 0;
            for (int k = 0; k < E->nshared; k++) li->outer[li->nloops][k] = E->shared[k];
            li->nouter[li->nloops] = E->nshared;
            li->loops[li->nloops++] = s;
        }
    }
    return 1;
}

static int vx_loop_ok(emitter *E, const tk_stmt *s);

/* Decides the tile: V lanes, the group dim and G, the locals held per lane.
 * Returns 0 when the body does not fit (then unroll-and-jam applies). */

/* R for a tile of G group rows: with explicit vectors, about 24
 * accumulator vectors of the 32 AVX-512 registers (12 of the 16 AVX2 ones),
 * each broadcast of a group row feeding R of them. */
static int lane_blocks(const emitter *E, int G) {
    if (!E->vx) return 1;
    int r = (E->wide == 2 ? 12 : 24) / (E->nacc * G);
    return r < 1 ? 1 : r > 8 ? 8 : r;
}

static int lane_plan(emitter *E) {
    const tk_opdecl *d = E->op->decl;
    lane_info li;
    memset(&li, 0, sizeof li);
    if (E->plain || d->nloop == 0 || !has_top_level_for(d)) return 0;
    E->ngroup = 1;
    if (!lane_walk(E, d->body, d->nbody, &li) || li.nloops == 0) return 0;
    /* locals: per lane, except temporaries that live inside one lane loop */
    memset(E->arr, 0, sizeof E->arr);
    for (int r = 0; r < E->op->nlocals; r++) E->arr[r] = !E->op->locals[r].is_loop;
    unsigned char acc[TK_MAX_LOCALS] = {0};
    for (int k = 0; k < li.nloops; k++) {
        unsigned char in[TK_MAX_LOCALS] = {0};
        assigned_locals(li.loops[k]->body, li.loops[k]->nbody, in);
        for (int r = 0; r < E->op->nlocals; r++) {
            if (!in[r] || E->op->locals[r].is_loop) continue;
            const char *nm = E->op->locals[r].name;
            if (stmt_count(d->body, d->nbody, nm) == stmt_count(li.loops[k]->body, li.loops[k]->nbody, nm))
                E->arr[r] = 0;
            else acc[r] = 1;
        }
    }
    int nacc = 0;
    for (int r = 0; r < E->op->nlocals; r++) nacc += acc[r];
    if (nacc == 0) nacc = 1;
    /* the group dim: an outer loop variable some lane-loop read ignores and
     * another one reads */
    E->gdim = d->nloop - 1;
    for (int v = 0; v < d->nloop - 1 && E->gdim == d->nloop - 1; v++) {
        int shared = 0, own = 0;
        for (int k = 0; k < li.nloops; k++)
            group_reads_stmts(li.loops[k]->body, li.loops[k]->nbody, d->loop_vars[v], &shared, &own);
        if (shared && own) E->gdim = v;
    }
    /* CPU: one 512-bit vector. GPU: the lanes are registers of one thread
     * (thread coarsening), 16 outputs along the innermost dim (float64: 8)
     * times 2 group rows: a lane-invariant load feeds 16 FMAs, a
     * group-invariant one 2. Measured on an H200 (ci/gpu_tune.py, 15 shapes,
     * bench/results/2026-12-04-gpu-h200-tune.json): 4 rows took 255
     * registers (f32), one block of 8 warps an SM, and rwkv_forward ran in
     * 0.913 ms; 2 rows, 128 registers, 0.784 ms (with 4 warp rows, see
     * gpu_tiles_head: 0.687); 1 row or 8 lanes were slower (1.1-2.0 ms). */
    int vec = E->tg->gpu ? (E->ftype == TK_V_F64 ? 8 : 16) : E->ftype == TK_V_F64 ? 8 : 16;
    int gmax = E->tg->gpu ? 2 : 8;
    if (E->tg->gpu && E->tune_lanes) vec = E->tune_lanes;
    if (E->tg->gpu && E->tune_rows) gmax = E->tune_rows;
    if (E->wide == 2) {   /* one 256-bit vector; 4 group rows x 3 lane blocks */
        vec /= 2;
        gmax = 4;
    }
    if (E->gdim != d->nloop - 1) {
        E->ngroup = nacc >= gmax ? 1 : gmax / nacc;
        /* group copies vary the group variable: the bounds must still fit */
        li.nloops = 0;
        if (E->ngroup == 1 || !lane_walk(E, d->body, d->nbody, &li)) {
            E->ngroup = 1;
            E->gdim = d->nloop - 1;
        }
    }
    /* one vector of lanes (the accumulators stay in registers); lanes run
     * backwards when the reads in lane loops mostly do, so that they load
     * ascending memory */
    E->lanes = vec;
    /* copies: about 8 independent accumulator vectors (two FMA pipes of
     * 4 cycles), a group row's broadcast feeding R lane blocks */
    int dir = 0;
    for (int k = 0; k < li.nloops; k++)
        dir += lane_dir_stmts(li.loops[k]->body, li.loops[k]->nbody, d->loop_vars[d->nloop - 1]);
    E->lane_rev = dir < 0 && !E->tg->gpu;
    /* R lane blocks when every lane loop runs on explicit vectors (which
     * stay in registers; the omp simd form's arrays do not): about 24
     * accumulator vectors of the 32 AVX-512 registers, each broadcast of a
     * group row feeding R of them */
    E->nblocks = 1;
    int vx = E->wide;
    for (int k = 0; vx && k < li.nloops; k++) {
        for (int i = 0; i < li.nouter[k]; i++) E->shared[i] = li.outer[k][i];
        E->nshared = li.nouter[k];
        vx = vx_loop_ok(E, li.loops[k]);
        E->nshared = 0;
    }
    E->nacc = nacc;
    E->vx = vx;
    E->nblocks = lane_blocks(E, E->ngroup);
    return 1;
}

/* Selects copy c of a tile: group row c / R, lane block c % R. */
static void set_copy(emitter *E, int c) {
    E->copy = c;
    E->gcopy = c / E->nblocks;
    E->rcopy = c % E->nblocks;
}

/* The bound set of copy c: one per lane block when bounds ignore the
 * group row, else one per copy. */
static int bound_set(const emitter *E, int c, int nb) { return nb == E->nblocks ? c % E->nblocks : c; }

/* The head of a loop over the lanes: on the GPU always unrolled, so that
 * per-lane arrays become registers. */
static void lane_head(emitter *E, int simd) {
    if (E->tg->gpu) line(E, "#pragma unroll");
    else if (simd) line(E, "#pragma omp simd");
}

static void lane_open(emitter *E, int simd) {
    lane_head(E, simd);
    line(E, "for (int tk_j = 0; tk_j < %d; ++tk_j) {", E->lanes);
    E->indent++;
    E->in_lane = 1;
}

static void lane_close(emitter *E) {
    E->in_lane = 0;
    E->indent--;
    line(E, "}");
}

/* Statements for every copy, statement by statement (copies share loads). */
static void lane_stmts(emitter *E, tk_stmt **body, int n) {
    for (int i = 0; i < n; i++)
        for (int c = 0; c < E->ngroup * E->nblocks; c++) {
            set_copy(E, c);
            block(E, &body[i], 1);
        }
}

static void tile_block(emitter *E, tk_stmt **body, int n);

/* u over [lo, hi) with the lane loop inside; masked: lanes outside their
 * own range skip the body (tested on 32-bit offsets from tk_mn, so that the
 * test vectorises along with float lanes). */
static int gpu_window_range(emitter *E, const tk_stmt *s, const char *lo, const char *hi);

static void lane_range(emitter *E, const tk_stmt *s, const char *lo, const char *hi, int masked, int nb) {
    if (!masked && E->tg->gpu && gpu_window_range(E, s, lo, hi)) return;
    line(E, "for (tk_i64 v_%s = %s; v_%s < %s; ++v_%s) {", s->name, lo, s->name, hi, s->name);
    E->indent++;
    if (masked)
        line(E, "const %s tk_ur = (%s)(v_%s - tk_mn);", E->ftype == TK_V_F64 ? "long long" : "int",
             E->ftype == TK_V_F64 ? "long long" : "int", s->name);
    lane_open(E, 1);
    int flat = 1;
    for (int i = 0; i < s->nbody; i++) flat &= s->body[i]->kind == TK_S_ASSIGN;
    if (!masked) {
        lane_stmts(E, s->body, s->nbody);
    } else if (flat) {
        /* assignments only: each selects its new value by the mask (no
         * masked stores, which would keep the loop from vectorising) */
        char cond[64];
        E->mask = cond;
        for (int i = 0; i < s->nbody; i++)
            for (int c = 0; c < E->ngroup * E->nblocks; c++) {
                int k = bound_set(E, c, nb);
                snprintf(cond, sizeof cond, "tk_lr%d[tk_j] <= tk_ur && tk_ur < tk_hr%d[tk_j]", k, k);
                set_copy(E, c);
                block(E, &s->body[i], 1);
            }
        E->mask = NULL;
    } else {
        for (int c = 0; c < E->ngroup * E->nblocks; c++) {
            int k = bound_set(E, c, nb);
            line(E, "if (tk_lr%d[tk_j] <= tk_ur && tk_ur < tk_hr%d[tk_j]) {", k, k);
            E->indent++;
            set_copy(E, c);
            block(E, s->body, s->nbody);
            E->indent--;
            line(E, "}");
        }
    }
    lane_close(E);
    E->indent--;
    line(E, "}");
}

/* Whether e reads neither the group variable nor a local (its value is the
 * same in every copy of a lane). */
static int group_invariant(const emitter *E, const tk_expr *e) {
    if (!e) return 1;
    if (E->ngroup == 1) return 1;
    if (e->kind == TK_E_NAME) {
        const tk_opdecl *d = E->op->decl;
        int idx;
        if (strcmp(e->name, d->loop_vars[E->gdim]) == 0) return 0;
        for (int i = 0; i < d->nloop; i++)
            if (strcmp(e->name, d->loop_vars[i]) == 0) return 1;
        if (tk_resolve_header(E->op, e->name, &idx) != TK_SYM_NONE) return 1;
        for (int i = 0; i < E->nshared; i++)
            if (strcmp(E->shared[i], e->name) == 0) return 1;
        return 0;
    }
    for (int i = 0; i < e->nargs; i++)
        if (!group_invariant(E, e->args[i])) return 0;
    return 1;
}

/* ---- explicit vectors in lane tiles ---------------------------------------------
 * A lane loop whose body is float arithmetic on lane-contiguous reads of
 * unit-stride tensors and on values that are the same in every lane is
 * written with GNU C vectors (TK_VX in tk_kernel.h) instead of an `omp simd`
 * loop: one vector register per accumulator of each copy, one load per
 * contiguous read shared by the copies, and the edges of lanes' ranges as
 * selects under a lane mask. Each lane still sums in the spec's order. The
 * omp simd form stays for other compilers and non-unit strides. */

/* Whether e has the same value in every lane of a copy (it may differ
 * between group rows). */
static int vx_uniform(const emitter *E, const tk_expr *e) {
    if (!e) return 1;
    if (e->kind == TK_E_NAME) {
        const tk_opdecl *d = E->op->decl;
        int idx;
        if (strcmp(e->name, d->loop_vars[d->nloop - 1]) == 0) return 0;
        for (int i = 0; i < d->nloop; i++)
            if (strcmp(e->name, d->loop_vars[i]) == 0) return 1;
        if (tk_resolve_header(E->op, e->name, &idx) != TK_SYM_NONE) return 1;
        for (int i = 0; i < E->nshared; i++)
            if (strcmp(E->shared[i], e->name) == 0) return 1;
        return 0;
    }
    for (int i = 0; i < e->nargs; i++)
        if (!vx_uniform(E, e->args[i])) return 0;
    return 1;
}

/* Whether e's names other than v are uniform (lane_coef takes any term
 * without v). */
static int vx_uniform_but(const emitter *E, const tk_expr *e, const char *v) {
    if (!e) return 1;
    if (e->kind == TK_E_NAME) return strcmp(e->name, v) == 0 || vx_uniform(E, e);
    for (int i = 0; i < e->nargs; i++)
        if (!vx_uniform_but(E, e->args[i], v)) return 0;
    return 1;
}

/* Whether tensor read e loads consecutive elements across the lanes (when
 * its last dim has stride 1): every index uniform but the last, which moves
 * by +-1 with the innermost loop variable; elements of the op's float type,
 * or bfloat16 / float16 ones widened to float32 (a shift; VCVTPH2PS). *dir: +1 when memory
 * ascends with the lane index, -1 when it descends. */
static int vx_read(const emitter *E, const tk_expr *e, int *dir) {
    const char *v = E->op->decl->loop_vars[E->op->decl->nloop - 1];
    tk_dtype want = E->ftype == TK_V_F64 ? TK_F64 : TK_F32;
    int64_t c;
    if (e->kind != TK_E_INDEX || e->nargs == 0) return 0;
    tk_dtype dt = tk_variant_dtype(E->op, E->variant, e->ref);
    if (dt != want && !((dt == TK_BF16 || dt == TK_F16) && want == TK_F32)) return 0;
    for (int i = 0; i < e->nargs - 1; i++)
        if (!vx_uniform(E, e->args[i])) return 0;
    const tk_expr *last = e->args[e->nargs - 1];
    if (!lane_coef(last, v, &c) || (c != 1 && c != -1) || !vx_uniform_but(E, last, v)) return 0;
    *dir = E->lane_rev ? (int)-c : (int)c;
    return 1;
}

/* Whether e can be computed as a vector of the op's float type (or is
 * uniform, a scalar broadcast where it meets a vector). */
static int vx_expr_ok(const emitter *E, const tk_expr *e) {
    int dir;
    if (vx_uniform(E, e)) return 1;
    if (e->vtype != E->ftype) return 0;
    switch (e->kind) {
    case TK_E_INDEX: return vx_read(E, e, &dir);
    case TK_E_NAME: return E->op->locals[e->ref].type == E->ftype && !E->op->locals[e->ref].is_loop;
    case TK_E_UNARY:
        return (e->op == TK_OPC_NEG || e->op == TK_OPC_POS) && vx_expr_ok(E, e->args[0]);
    case TK_E_BINARY:
        if (e->op != TK_OPC_ADD && e->op != TK_OPC_SUB && e->op != TK_OPC_MUL && e->op != TK_OPC_DIV) return 0;
        for (int i = 0; i < 2; i++)
            if (!vx_uniform(E, e->args[i]) && (e->args[i]->vtype != E->ftype || !vx_expr_ok(E, e->args[i])))
                return 0;
        return 1;
    default: return 0;
    }
}

/* Whether the body of lane loop s can run on explicit vectors. */
static int vx_loop_ok(emitter *E, const tk_stmt *s) {
    if (E->tg->gpu || E->nshared == 8) return 0;
    E->shared[E->nshared++] = s->name;
    int ok = 1;
    for (int i = 0; ok && i < s->nbody; i++) {
        const tk_stmt *a = s->body[i];
        if (a->kind != TK_S_ASSIGN) {
            ok = 0;
            break;
        }
        const tk_local *l = &E->op->locals[a->ref];
        tk_vtype r = a->value->vtype > l->type ? a->value->vtype : l->type;
        if (a->op == TK_OPC_DIV && !is_float_vt(r)) r = E->ftype;
        ok = !l->is_loop && l->type == E->ftype && r == E->ftype &&
             (a->op == TK_OPC_NONE || a->op == TK_OPC_ADD || a->op == TK_OPC_SUB || a->op == TK_OPC_MUL ||
              a->op == TK_OPC_DIV) &&
             vx_expr_ok(E, a->value);
    }
    E->nshared--;
    return ok;
}

/* the vector types' suffixes (tk_kernel.h): h for the 256-bit ones */
static const char *vx_sfx(const emitter *E) {
    return E->ftype == TK_V_F64 ? (E->wide == 2 ? "f64h" : "f64") : (E->wide == 2 ? "f32h" : "f32");
}
static const char *vx_msfx(const emitter *E) {
    return E->ftype == TK_V_F64 ? (E->wide == 2 ? "m64h" : "m64") : (E->wide == 2 ? "m32h" : "m32");
}

/* Tensor reads of e that load lane vectors: calls fn for each. */
static void vx_reads(emitter *E, const tk_expr *e, void (*fn)(emitter *, const tk_expr *, void *), void *arg) {
    int dir;
    if (!e || vx_uniform(E, e)) return;
    if (e->kind == TK_E_INDEX && vx_read(E, e, &dir)) {
        fn(E, e, arg);
        return;
    }
    for (int i = 0; i < e->nargs; i++) vx_reads(E, e->args[i], fn, arg);
}

static void vx_expr(emitter *E, const tk_expr *e);
static int expr_equal(const tk_expr *a, const tk_expr *b);

/* The suffix of a 16-bit float read's widening helpers in tk_kernel.h:
 * b (bfloat16), e (float16), none for other dtypes. */
static const char *half_sfx(const emitter *E, const tk_expr *e) {
    tk_dtype dt = tk_variant_dtype(E->op, E->variant, e->ref);
    return dt == TK_BF16 ? "b" : dt == TK_F16 ? "e" : "";
}

/* A lane vector of tensor read e (masked: only lanes of E->vmask). */
static void vx_load(emitter *E, const tk_expr *e) {
    int dir = 1;
    vx_read(E, e, &dir);
    const tk_param *p = param(E, e->ref);
    const char *S = vx_sfx(E);
    const char *B = half_sfx(E, e);   /* widened */
    if (dir < 0) tk_buf_printf(E->b, "tk_vrev_%s(", S);
    E->in_lane = 1;
    E->lane_fix = dir > 0 ? 0 : E->lanes - 1;   /* the lane at the lowest address */
    if (E->vmask) {
        tk_buf_printf(E->b, "tk_vldm%s_%s(t_%s, ", B, S, p->name);
        tensor_offset(E, e);
        tk_buf_printf(E->b, ", tk_zl_%s, tk_zh_%s, ", p->name, p->name);
        if (dir < 0) tk_buf_printf(E->b, "tk_vrev_%s(%s))", vx_msfx(E), E->vmask);
        else tk_buf_printf(E->b, "%s)", E->vmask);
    } else {
        tk_buf_printf(E->b, "tk_vld%s_%s(&t_%s[", B, S, p->name);
        tensor_offset(E, e);
        tk_buf_puts(E->b, "])");
    }
    E->lane_fix = -1;
    E->in_lane = 0;
    if (dir < 0) tk_buf_puts(E->b, ")");
}

static void vx_expr(emitter *E, const tk_expr *e) {
    for (int i = 0; i < E->nvload; i++)
        if (E->vload_r[i] == E->rcopy && expr_equal(E->vload[i], e)) {
            tk_buf_printf(E->b, "tk_ld%d", i);
            return;
        }
    if (vx_uniform(E, e)) {
        if (e->kind == TK_E_INDEX && E->ftype == TK_V_F32 && *half_sfx(E, e)) {
            /* a 16-bit float broadcast: widened in the vector unit */
            tk_buf_printf(E->b, "tk_vbc%s_%s(", half_sfx(E, e), vx_sfx(E));
            E->raw_read = 1;
            expr(E, e, e->vtype);
            E->raw_read = 0;
            tk_buf_puts(E->b, ")");
            return;
        }
        expr(E, e, E->ftype);
        return;
    }
    switch (e->kind) {
    case TK_E_INDEX: vx_load(E, e); break;
    case TK_E_NAME: tk_buf_printf(E->b, "x_%s_%d", e->name, E->copy); break;
    case TK_E_UNARY:
        tk_buf_puts(E->b, e->op == TK_OPC_NEG ? "(-" : "(+");
        vx_expr(E, e->args[0]);
        tk_buf_puts(E->b, ")");
        break;
    case TK_E_BINARY:
        tk_buf_puts(E->b, "(");
        vx_expr(E, e->args[0]);
        tk_buf_printf(E->b, " %s ", tk_opc_text(e->op));
        vx_expr(E, e->args[1]);
        tk_buf_puts(E->b, ")");
        break;
    default: break;
    }
}

/* A value as a vector: uniform ones are broadcast (exactly, lane by lane). */
static void vx_value(emitter *E, const tk_expr *e) {
    if (vx_uniform(E, e)) {
        tk_buf_printf(E->b, "tk_vsplat_%s(", vx_sfx(E));
        expr(E, e, E->ftype);
        tk_buf_puts(E->b, ")");
    } else {
        vx_expr(E, e);
    }
}

/* One assignment of the current copy; under E->vmask, accumulators keep
 * their value in lanes that are off (temporaries are only read under the
 * same mask). */
static void vx_assign(emitter *E, const tk_stmt *a) {
    const char *S = vx_sfx(E);
    begin_line(E);
    if (a->declares) {
        tk_buf_printf(E->b, "tk_v%s x_%s_%d = ", S, a->name, E->copy);
        vx_value(E, a->value);
    } else if (!E->vmask && a->op == TK_OPC_NONE) {
        tk_buf_printf(E->b, "x_%s_%d = ", a->name, E->copy);
        vx_value(E, a->value);
    } else if (!E->vmask) {
        tk_buf_printf(E->b, "x_%s_%d %s= ", a->name, E->copy, tk_opc_text(a->op));
        vx_expr(E, a->value);
    } else {
        tk_buf_printf(E->b, "x_%s_%d = tk_vsel_%s(%s, ", a->name, E->copy, S, E->vmask);
        if (a->op == TK_OPC_NONE) {
            vx_value(E, a->value);
        } else {
            tk_buf_printf(E->b, "x_%s_%d %s ", a->name, E->copy, tk_opc_text(a->op));
            vx_expr(E, a->value);
        }
        tk_buf_printf(E->b, ", x_%s_%d)", a->name, E->copy);
    }
    tk_buf_puts(E->b, ";\n");
}

/* Whether two expressions are the same text (same value in one copy). */
static int expr_equal(const tk_expr *a, const tk_expr *b) {
    if (a->kind != b->kind || a->op != b->op || a->nargs != b->nargs || a->ival != b->ival ||
        a->vtype != b->vtype || memcmp(&a->fval, &b->fval, sizeof a->fval) != 0)
        return 0;
    if ((a->name == NULL) != (b->name == NULL) || (a->name && strcmp(a->name, b->name) != 0)) return 0;
    for (int i = 0; i < a->nargs; i++)
        if (!expr_equal(a->args[i], b->args[i])) return 0;
    return 1;
}

/* Row pointers: a broadcast read (the same element in every lane) whose
 * last index alone moves with the loop reads through a pointer to its row,
 * set once per copy before the loop: the loop then keeps one pointer per
 * row in a register instead of recomputing (or spilling) full offsets. */
static int row_match(const emitter *E, const tk_expr *e) {
    for (int i = 0; i < E->nrow; i++) {
        const tk_expr *r = E->row[i];
        if (E->row_copy[i] != E->copy || r->ref != e->ref || r->nargs != e->nargs) continue;
        int same = 1;
        for (int k = 0; same && k < e->nargs - 1; k++) same = expr_equal(r->args[k], e->args[k]);
        if (same) return i;
    }
    return -1;
}

static void vx_rows_in(emitter *E, const tk_expr *e, const char *v) {
    if (!e) return;
    for (int i = 0; i < e->nargs; i++) vx_rows_in(E, e->args[i], v);
    if (e->kind != TK_E_INDEX || e->nargs == 0 || E->nrow == 32 || !vx_uniform(E, e) ||
        !expr_uses(e->args[e->nargs - 1], v) || row_match(E, e) >= 0)
        return;
    for (int i = 0; i < e->nargs - 1; i++)
        if (expr_uses(e->args[i], v)) return;
    begin_line(E);
    tk_buf_printf(E->b, "const %s *const tk_rp%d = t_%s + (", k_ctype[tk_variant_dtype(E->op, E->variant, e->ref)],
                  E->nrow, param(E, e->ref)->name);
    tensor_offset_n(E, e, e->nargs - 1);   /* the row: all but the last index */
    tk_buf_puts(E->b, ");\n");
    E->row[E->nrow] = e;
    E->row_copy[E->nrow++] = E->copy;
}

/* Declares the row pointers of every copy for lane loop s. */
static void vx_rows(emitter *E, const tk_stmt *s) {
    E->nrow = 0;
    for (int c = 0; c < E->ngroup * E->nblocks; c++) {
        set_copy(E, c);
        for (int i = 0; i < s->nbody; i++) vx_rows_in(E, s->body[i]->value, s->name);
    }
}

/* Loads the vector reads of the loop body that all group rows of lane block
 * r share, once (for copies of bound set k, or all when k < 0). */
static void vx_hoist_one(emitter *E, const tk_expr *e, void *arg) {
    int r = *(int *)arg;
    if (!group_invariant(E, e) || E->nvload == 16) return;
    for (int i = 0; i < E->nvload; i++)
        if (E->vload_r[i] == r && expr_equal(E->vload[i], e)) return;
    set_copy(E, r);
    begin_line(E);
    tk_buf_printf(E->b, "const tk_v%s tk_ld%d = ", vx_sfx(E), E->nvload);
    vx_load(E, e);
    tk_buf_puts(E->b, ";\n");
    E->vload[E->nvload] = e;
    E->vload_r[E->nvload++] = r;
}

static void vx_hoist(emitter *E, const tk_stmt *s, int k, int nb) {
    E->nvload = 0;
    for (int r = 0; r < E->nblocks; r++) {
        if (k >= 0 && bound_set(E, r, nb) != k) continue;
        for (int i = 0; i < s->nbody; i++) vx_reads(E, s->body[i]->value, vx_hoist_one, &r);
    }
}

static void vx_span(emitter *E, const tk_expr *e, void *arg) {
    unsigned char *seen = arg;
    if (e->ref < 0 || e->ref >= 64 || seen[e->ref]) return;
    seen[e->ref] = 1;
    const tk_param *p = param(E, e->ref);
    line(E, "const tk_i64 tk_zl_%s = tk_span_lo(&%st[%d]), tk_zh_%s = tk_span_hi(&%st[%d]);", p->name,
         E->tg->args, E->op->slot[e->ref], p->name, E->tg->args, E->op->slot[e->ref]);
}

/* The body once for the copies of bound set k (all when k < 0), under
 * mask m (NULL: every lane). */
static void vx_set_body(emitter *E, const tk_stmt *s, int k, int nb, const char *m) {
    int N = E->ngroup * E->nblocks;
    E->vmask = m;
    if (k < 0 || nb == E->nblocks) vx_hoist(E, s, k, nb);
    for (int i = 0; i < s->nbody; i++)
        for (int c = 0; c < N; c++)
            if (k < 0 || bound_set(E, c, nb) == k) {
                set_copy(E, c);
                vx_assign(E, s->body[i]);
            }
    E->vmask = NULL;
    E->nvload = 0;
}

/* Bound set k's lane ranges folded: [tk_ua, tk_ub) where some lane is on,
 * [tk_uc, tk_ud) where every lane is (offsets from tk_mn). */
static void vx_fold_bounds(emitter *E, int k) {
    const char *I = E->ftype == TK_V_F64 ? "long long" : "int";
    line(E, "%s tk_ua = tk_lr%d[0], tk_ub = tk_hr%d[0], tk_uc = tk_lr%d[0], tk_ud = tk_hr%d[0];", I, k, k, k, k);
    line(E, "for (int tk_q = 1; tk_q < %d; ++tk_q) {", E->lanes);
    E->indent++;
    line(E, "tk_ua = tk_lr%d[tk_q] < tk_ua ? tk_lr%d[tk_q] : tk_ua;", k, k);
    line(E, "tk_ub = tk_hr%d[tk_q] > tk_ub ? tk_hr%d[tk_q] : tk_ub;", k, k);
    line(E, "tk_uc = tk_lr%d[tk_q] > tk_uc ? tk_lr%d[tk_q] : tk_uc;", k, k);
    line(E, "tk_ud = tk_hr%d[tk_q] < tk_ud ? tk_hr%d[tk_q] : tk_ud;", k, k);
    E->indent--;
    line(E, "}");
}

/* The lane mask m at loop variable s, from the lanes' ranges x_lr, x_hr:
 * lr <= ur < hr from the signs of ur - lr and ur - hr (no vector compares:
 * GCC lowers those lane by lane in target clones). */
static void vx_lane_mask(emitter *E, const tk_stmt *s, const char *m) {
    const char *I = E->ftype == TK_V_F64 ? "long long" : "int";
    int sh = E->ftype == TK_V_F64 ? 63 : 31;
    line(E, "const %s tk_ur = (%s)(v_%s - tk_mn);", I, I, s->name);
    line(E, "const tk_v%s %s = ~((tk_ur - x_lr) >> %d) & ((tk_ur - x_hr) >> %d);", vx_msfx(E), m, sh, sh);
}

/* u over [lo, hi) on vectors. Masked: each bound set runs on its own (its
 * lanes' sums stay in order; sets share nothing), over the part of
 * [lo, hi) where any of its lanes is on: where all are, without selects;
 * elsewhere lanes outside their own range keep their values. */
static void vx_range(emitter *E, const tk_stmt *s, const char *lo, const char *hi, int masked, int nb) {
    line(E, "{");
    E->indent++;
    if (!masked) {
        line(E, "for (tk_i64 v_%s = %s; v_%s < %s; ++v_%s) {", s->name, lo, s->name, hi, s->name);
        E->indent++;
        vx_set_body(E, s, -1, nb, NULL);
        E->indent--;
        line(E, "}");
    } else {
        const char *M = vx_msfx(E);
        unsigned char seen[64] = {0};
        for (int i = 0; i < s->nbody; i++) vx_reads(E, s->body[i]->value, vx_span, seen);
        for (int k = 0; k < nb; k++) {
            line(E, "{");
            E->indent++;
            line(E, "const tk_v%s x_lr = tk_vld_%s(tk_lr%d), x_hr = tk_vld_%s(tk_hr%d);", M, M, k, M, k);
            vx_fold_bounds(E, k);
            line(E, "const tk_i64 tk_a = tk_maxi(%s, tk_mn + tk_ua), tk_b = tk_mini(%s, tk_mn + tk_ub);", lo, hi);
            line(E, "tk_i64 tk_c = tk_maxi(tk_a, tk_mn + tk_uc), tk_d = tk_mini(tk_b, tk_mn + tk_ud);");
            line(E, "if (tk_c >= tk_d) tk_c = tk_d = tk_b > tk_a ? tk_b : tk_a;");
            for (int part = 0; part < 3; part++) {
                static const char *const from[] = {"tk_a", "tk_c", "tk_d"}, *const to[] = {"tk_c", "tk_d", "tk_b"};
                line(E, "for (tk_i64 v_%s = %s; v_%s < %s; ++v_%s) {", s->name, from[part], s->name, to[part],
                     s->name);
                E->indent++;
                if (part == 1) {
                    vx_set_body(E, s, k, nb, NULL);
                } else {
                    vx_lane_mask(E, s, "tk_m");
                    vx_set_body(E, s, k, nb, "tk_m");
                }
                E->indent--;
                line(E, "}");
            }
            E->indent--;
            line(E, "}");
        }
    }
    E->indent--;
    line(E, "}");
}

/* ---- skewed lane blocks ---------------------------------------------------------
 * Without a group, each FMA of a tile needs its own lane vector load (R lane
 * blocks load R windows per step of the loop), most of them split across
 * cache lines: the load ports, not the FMAs, set the pace. When every lane
 * read's innermost index is ct * t + cu * u + (terms of neither) with
 * ct, cu = +-1 (rwkv: (T - 1) - (t - u)), lane block r (t + V * r) at
 * u + r * D reads what block 0 reads at u, for D = -ct * cu * V. The loop
 * then walks i, block r taking u = i + r * D: one load per step feeds all R
 * blocks. Each block still runs its own u in increasing order (its masked
 * head, its unmasked range, its masked tail), so each lane sums in the
 * spec's order. Returns D, or 0 when the reads do not allow it. */
static void vx_skew_read(emitter *E, const tk_expr *e, void *arg) {
    int *d = arg;
    const char *t = E->op->decl->loop_vars[E->op->decl->nloop - 1];
    const char *u = E->shared[E->nshared - 1];
    const tk_expr *last = e->args[e->nargs - 1];
    int64_t ct, cu;
    for (int i = 0; i < e->nargs - 1; i++)
        if (expr_uses(e->args[i], u)) *d = 0;
    if (*d == 0 || !lane_coef(last, t, &ct) || !lane_coef(last, u, &cu) || (ct != 1 && ct != -1) ||
        (cu != 1 && cu != -1)) {
        *d = 0;
        return;
    }
    int want = (int)(-ct * cu) * E->lanes;
    if (*d == INT_MIN) *d = want;
    else if (*d != want) *d = 0;
}

static int vx_skew(emitter *E, const tk_stmt *s, int nb) {
    if (E->tg->gpu || E->ngroup != 1 || E->nblocks < 2 || nb != E->nblocks) return 0;
    int d = INT_MIN;
    for (int i = 0; i < s->nbody && d != 0; i++) vx_reads(E, s->body[i]->value, vx_skew_read, &d);
    return d == INT_MIN ? 0 : d;
}

/* Block k's u over [from, to) under its lane mask. */
static void vx_masked_part(emitter *E, const tk_stmt *s, int k, int nb, const char *from, const char *to) {
    const char *M = vx_msfx(E);
    line(E, "{");
    E->indent++;
    line(E, "const tk_v%s x_lr = tk_vld_%s(tk_lr%d), x_hr = tk_vld_%s(tk_hr%d);", M, M, k, M, k);
    line(E, "for (tk_i64 v_%s = %s%d; v_%s < %s%d; ++v_%s) {", s->name, from, k, s->name, to, k, s->name);
    E->indent++;
    vx_lane_mask(E, s, "tk_m");
    vx_set_body(E, s, k, nb, "tk_m");
    E->indent--;
    line(E, "}");
    E->indent--;
    line(E, "}");
}

/* Steps i of [lo, hi) of the skewed walk for the blocks in mask `on` (bit
 * r: block r); cond: test which blocks are on (their unmasked ranges
 * [tk_il, tk_ih) in i) instead. m: a lane mask (block 0's, which every
 * block's equals there), NULL: none. */
static void vx_skew_steps(emitter *E, const tk_stmt *s, int D, const char *lo, const char *hi, int cond,
                          unsigned on, const char *m) {
    int R = E->nblocks;
    line(E, "for (tk_i64 tk_i = %s; tk_i < %s; ++tk_i) {", lo, hi);
    E->indent++;
    if (cond) {
        for (int r = 0; r < R; r++) line(E, "const int tk_on%d = tk_i >= tk_il%d && tk_i < tk_ih%d;", r, r, r);
        begin_line(E);
        tk_buf_puts(E->b, "if (!(tk_on0");
        for (int r = 1; r < R; r++) tk_buf_printf(E->b, " | tk_on%d", r);
        tk_buf_puts(E->b, ")) continue;\n");
    }
    /* the windows, loaded once at block 0's u = i (valid: some block is on
     * over all its lanes, or over the lanes of the mask, and reads the same
     * addresses) */
    line(E, "const tk_i64 v_%s = tk_i;", s->name);
    if (m) vx_lane_mask(E, s, m);
    E->vmask = m;
    vx_hoist(E, s, 0, R);
    int n0 = E->nvload;
    for (int r = 1; r < R; r++)
        for (int i = 0; i < n0 && E->nvload < 16; i++) {
            line(E, "const tk_v%s tk_ld%d = tk_ld%d;", vx_sfx(E), E->nvload, i);
            E->vload[E->nvload] = E->vload[i];
            E->vload_r[E->nvload++] = r;
        }
    for (int r = 0; r < R; r++) {
        if (!cond && !(on >> r & 1)) continue;
        line(E, cond ? "if (tk_on%d) {" : "{", r);
        E->indent++;
        if (r > 0) line(E, "const tk_i64 v_%s = tk_i + %d;", s->name, r * D);
        set_copy(E, r);
        for (int i = 0; i < s->nbody; i++) vx_assign(E, s->body[i]);
        E->indent--;
        line(E, "}");
    }
    E->vmask = NULL;
    E->nvload = 0;
    E->indent--;
    line(E, "}");
}

/* u over [tk_mn, tk_mx) with skewed blocks: each block's masked head, the
 * skewed walk over the blocks' unmasked ranges (where all blocks are on, no
 * tests), each block's masked tail. */
static void vx_skewed(emitter *E, const tk_stmt *s, int nb, int D) {
    int R = E->nblocks;
    unsigned char seen[64] = {0};
    line(E, "{");
    E->indent++;
    for (int i = 0; i < s->nbody; i++) vx_reads(E, s->body[i]->value, vx_span, seen);
    for (int k = 0; k < R; k++) {
        /* [a, b): some lane on; [c, d): every lane on */
        line(E, "tk_i64 tk_a%d, tk_b%d, tk_c%d, tk_d%d;", k, k, k, k);
        line(E, "{");
        E->indent++;
        vx_fold_bounds(E, k);
        line(E, "tk_a%d = tk_maxi(tk_mn, tk_mn + tk_ua);", k);
        line(E, "tk_b%d = tk_mini(tk_mx, tk_mn + tk_ub);", k);
        line(E, "tk_c%d = tk_maxi(tk_a%d, tk_mn + tk_uc);", k, k);
        line(E, "tk_d%d = tk_mini(tk_b%d, tk_mn + tk_ud);", k, k);
        line(E, "if (tk_c%d >= tk_d%d) tk_c%d = tk_d%d = tk_b%d > tk_a%d ? tk_b%d : tk_a%d;", k, k, k, k, k, k,
             k, k);
        E->indent--;
        line(E, "}");
    }
    for (int k = 0; k < R; k++) vx_masked_part(E, s, k, nb, "tk_a", "tk_c");
    for (int k = 0; k < R; k++) line(E, "const tk_i64 tk_il%d = tk_c%d - %d, tk_ih%d = tk_d%d - %d;", k, k, k * D, k, k, k * D);
    line(E, "tk_i64 tk_imin = tk_il0, tk_imax = tk_ih0, tk_ia = tk_il0, tk_ib = tk_ih0;");
    for (int k = 1; k < R; k++) {
        line(E, "tk_imin = tk_mini(tk_imin, tk_il%d);", k);
        line(E, "tk_imax = tk_maxi(tk_imax, tk_ih%d);", k);
        line(E, "tk_ia = tk_maxi(tk_ia, tk_il%d);", k);
        line(E, "tk_ib = tk_mini(tk_ib, tk_ih%d);", k);
    }
    unsigned all = (1u << R) - 1;
    /* blocks p(0), p(1), ... in decreasing order of their ranges in i (D > 0:
     * block r starts r * D earlier, so typically 0, 1, ...): then the blocks
     * on before the common part are p(j..R-1), after it p(0..j-1), a fixed
     * set over each stretch between two bounds, and no step tests which */
#define P(j) (D > 0 ? (j) : R - 1 - (j))
    line(E, "int tk_mono = tk_ia < tk_ib;");
    for (int j = 1; j < R; j++)
        line(E, "tk_mono &= tk_il%d >= tk_il%d && tk_ih%d >= tk_ih%d;", P(j - 1), P(j), P(j - 1), P(j));
    line(E, "if (tk_mono) {");
    E->indent++;
    for (int j = R - 1; j >= 1; j--) {
        char lo[32], hi[32];
        snprintf(lo, sizeof lo, "tk_il%d", P(j));
        snprintf(hi, sizeof hi, "tk_il%d", P(j - 1));
        unsigned on = 0;
        for (int q = j; q < R; q++) on |= 1u << P(q);
        vx_skew_steps(E, s, D, lo, hi, 0, on, NULL);
    }
    vx_skew_steps(E, s, D, "tk_ia", "tk_ib", 0, all, NULL);
    for (int j = R - 1; j >= 1; j--) {
        char lo[32], hi[32];
        snprintf(lo, sizeof lo, "tk_ih%d", P(j));
        snprintf(hi, sizeof hi, "tk_ih%d", P(j - 1));
        unsigned on = 0;
        for (int q = 0; q < j; q++) on |= 1u << P(q);
        vx_skew_steps(E, s, D, lo, hi, 0, on, NULL);
    }
#undef P
    E->indent--;
    line(E, "} else {");
    E->indent++;
    line(E, "if (tk_ia >= tk_ib) tk_ia = tk_ib = tk_imin;");
    vx_skew_steps(E, s, D, "tk_imin", "tk_ia", 1, all, NULL);
    vx_skew_steps(E, s, D, "tk_ia", "tk_ib", 0, all, NULL);
    vx_skew_steps(E, s, D, "tk_ib", "tk_imax", 1, all, NULL);
    E->indent--;
    line(E, "}");
    /* the masked tails: skewed too when every block's equals block 0's
     * shifted by r * D (the same steps of i, the same lane mask) */
    line(E, "int tk_tail = 1;");
    for (int k = 1; k < R; k++) {
        line(E, "tk_tail &= tk_d%d - %d == tk_d0 && tk_b%d - %d == tk_b0;", k, k * D, k, k * D);
        line(E, "for (int tk_q = 0; tk_q < %d; ++tk_q) tk_tail &= tk_hr%d[tk_q] - %d == tk_hr0[tk_q];", E->lanes, k,
             k * D);
    }
    line(E, "if (tk_tail) {");
    E->indent++;
    line(E, "const tk_v%s x_lr = tk_vld_%s(tk_lr0), x_hr = tk_vld_%s(tk_hr0);", vx_msfx(E), vx_msfx(E), vx_msfx(E));
    vx_skew_steps(E, s, D, "tk_d0", "tk_b0", 0, all, "tk_m");
    E->indent--;
    line(E, "} else {");
    E->indent++;
    for (int k = 0; k < R; k++) vx_masked_part(E, s, k, nb, "tk_d", "tk_b");
    E->indent--;
    line(E, "}");
    E->indent--;
    line(E, "}");
}

static int used(const emitter *E, const char *name);
static void each_strided(emitter *E, void (*fn)(emitter *, const tk_param *, int, int), int arg);
static void prologue(emitter *E);

/* In an outlined loop: the innermost strides, 1 (the wide body that calls
 * it runs with unit innermost strides only; see cpu_kernel). */
static void vx_unit_stride(emitter *E, const tk_param *p, int slot, int arg) {
    (void)slot;
    (void)arg;
    line(E, "const tk_i64 s_%s_%d = 1;", p->name, tk_explicit_dims(p) - 1);
}

/* The values an outlined loop takes from the tile: arg 0 prints the
 * parameter list, 1 the call's arguments. */
static void vx_args(emitter *E, const tk_stmt *s, const unsigned char *used_local, int nb, int arg) {
    const tk_op *op = E->op;
    const tk_opdecl *d = op->decl;
    const char *I = E->ftype == TK_V_F64 ? "long long" : "int";
    int N = E->ngroup * E->nblocks;
    tk_buf_puts(E->b, arg ? "a" : "const tk_kargs *a");
    for (int i = 0; i < d->nloop; i++) tk_buf_printf(E->b, arg ? ", v_%s" : ", tk_i64 v_%s", d->loop_vars[i]);
    for (int i = 0; i < E->nshared; i++)
        if (strcmp(E->shared[i], s->name) != 0) tk_buf_printf(E->b, arg ? ", v_%s" : ", tk_i64 v_%s", E->shared[i]);
    for (int r = 0; r < op->nlocals; r++)
        if (used_local[r])
            for (int c = 0; c < N; c++) {
                tk_buf_puts(E->b, ", ");
                if (!arg) tk_buf_printf(E->b, "%s *restrict ", k_vctype[op->locals[r].type]);
                tk_buf_printf(E->b, "v_%s_%d", op->locals[r].name, c);
            }
    for (int k = 0; k < nb; k++) {
        if (arg) tk_buf_printf(E->b, ", tk_lr%d, tk_hr%d", k, k);
        else tk_buf_printf(E->b, ", const %s *tk_lr%d, const %s *tk_hr%d", I, k, I, k);
    }
    tk_buf_puts(E->b, arg ? ", tk_L, tk_H, tk_mn, tk_mx" : ", tk_i64 tk_L, tk_i64 tk_H, tk_i64 tk_mn, tk_i64 tk_mx");
    if (op->has_ellipsis) {
        for (int i = 0; i < d->nparams; i++)
            if (param(E, i)->kind == TK_P_TENSOR && has_ell(param(E, i)) && used(E, param(E, i)->name))
                tk_buf_printf(E->b, arg ? ", o_%s" : ", tk_i64 o_%s", param(E, i)->name);
        for (int i = 0; i < d->noutputs; i++) tk_buf_printf(E->b, arg ? ", o_%s" : ", tk_i64 o_%s", output(E, i)->name);
    }
}

/* The whole loop on vectors: `if (unit strides) outlined(...); else`
 * before the omp simd form (which follows the else). The loop runs in a
 * function of its own, compiled per instruction set: in the kernel's body,
 * among its other loops, GCC's register allocator spills the accumulators
 * and row pointers that a small function keeps in registers. */
static void vx_loop(emitter *E, const tk_stmt *s, int nb) {
    int N = E->ngroup * E->nblocks;
    const char *S = vx_sfx(E);
    unsigned char used_local[TK_MAX_LOCALS] = {0}, set[TK_MAX_LOCALS] = {0};
    char fname[160];
    snprintf(fname, sizeof fname, "%s_v%c%d", E->op->kernel_names[E->variant], E->wide == 2 ? 'y' : 'x', E->nvx++);
    for (int r = 0; r < E->op->nlocals; r++)
        if (E->arr[r] && stmt_count(s->body, s->nbody, E->op->locals[r].name)) used_local[r] = 1;
    assigned_locals(s->body, s->nbody, set);
    /* the call */
    begin_line(E);
    tk_buf_printf(E->b, "%s(", fname);
    vx_args(E, s, used_local, nb, 1);
    tk_buf_puts(E->b, ");\n");
    /* the function, emitted ahead of the kernel's body */
    tk_buf *body = E->b, fn = {0};
    int indent = E->indent;
    E->b = &fn;
    E->indent = 0;
    line(E, E->wide == 2 ? "#if TK_VXH" : "#if TK_VX");
    line(E, "#pragma GCC diagnostic push");
    line(E, "#pragma GCC diagnostic ignored \"-Wunused-variable\"");
    line(E, "#pragma GCC diagnostic ignored \"-Wunused-parameter\"");
    begin_line(E);
    tk_buf_printf(E->b, "static %s TK_NOINLINE void %s(", E->wide == 2 ? "TK_MID_TARGET" : "TK_WIDE_TARGET", fname);
    vx_args(E, s, used_local, nb, 0);
    tk_buf_puts(E->b, ");\n");
    begin_line(E);
    tk_buf_printf(E->b, "static %s TK_NOINLINE void %s(", E->wide == 2 ? "TK_MID_TARGET" : "TK_WIDE_TARGET", fname);
    vx_args(E, s, used_local, nb, 0);
    tk_buf_puts(E->b, ") {\n");
    E->indent = 1;
    prologue(E);
    each_strided(E, vx_unit_stride, 0);
    E->shared[E->nshared++] = s->name;
    /* per-lane locals the loop reads or sets: in registers for the loop */
    for (int r = 0; r < E->op->nlocals; r++)
        if (used_local[r])
            for (int c = 0; c < N; c++)
                line(E, "tk_v%s x_%s_%d = tk_vld_%s(v_%s_%d);", S, E->op->locals[r].name, c, S,
                     E->op->locals[r].name, c);
    vx_rows(E, s);
    int skew = vx_skew(E, s, nb);
    if (skew) {
        vx_skewed(E, s, nb, skew);
    } else {
        line(E, "if (tk_L < tk_H) {");
        E->indent++;
        vx_range(E, s, "tk_mn", "tk_L", 1, nb);
        vx_range(E, s, "tk_L", "tk_H", 0, nb);
        vx_range(E, s, "tk_H", "tk_mx", 1, nb);
        E->indent--;
        line(E, "} else {");
        E->indent++;
        vx_range(E, s, "tk_mn", "tk_mx", 1, nb);
        E->indent--;
        line(E, "}");
    }
    for (int r = 0; r < E->op->nlocals; r++)
        if (used_local[r] && set[r])
            for (int c = 0; c < N; c++)
                line(E, "tk_vst_%s(v_%s_%d, x_%s_%d);", S, E->op->locals[r].name, c, E->op->locals[r].name, c);
    E->nrow = 0;
    E->nshared--;
    E->indent = 0;
    line(E, "}");
    line(E, "#pragma GCC diagnostic pop");
    line(E, "#endif");
    if (fn.oom) body->oom = 1;
    else if (fn.p) tk_buf_puts(E->pre, fn.p);
    free(fn.p);
    E->b = body;
    E->indent = indent;
}

/* GPU: V - 1 steps of loop s from `from`, unrolled, lane j running the
 * body where `cond` (of tk_j and the step tk_m: constants once unrolled)
 * holds. */
static void triangle(emitter *E, const tk_stmt *s, const char *from, const char *cond) {
    line(E, "#pragma unroll");
    line(E, "for (int tk_m = 0; tk_m < %d; ++tk_m) {", E->lanes - 1);
    E->indent++;
    line(E, "const tk_i64 v_%s = %s + tk_m;", s->name, from);
    lane_open(E, 1);
    int flat = 1;
    for (int i = 0; i < s->nbody; i++) flat &= s->body[i]->kind == TK_S_ASSIGN;
    if (flat) {
        E->mask = cond;
        lane_stmts(E, s->body, s->nbody);
        E->mask = NULL;
    } else {
        line(E, "if (%s) {", cond);
        E->indent++;
        lane_stmts(E, s->body, s->nbody);
        E->indent--;
        line(E, "}");
    }
    lane_close(E);
    E->indent--;
    line(E, "}");
}

/* GPU: the per-lane offsets, then the masked head, the unmasked common
 * range and the masked tail; without a common range the head is all of
 * [tk_mn, tk_mx) (one masked copy of the body less than the CPU form). */
static void gpu_masked_ranges(emitter *E, const tk_stmt *s, int nb) {
    int V = E->lanes;
    for (int g = 0; g < nb; g++) line(E, "int tk_lr%d[%d], tk_hr%d[%d];", g, V, g, V);
    lane_open(E, 0);
    for (int g = 0; g < nb; g++) {
        line(E, "tk_lr%d[tk_j] = (int)(tk_mini(tk_maxi(tk_lo%d[tk_j], tk_mn), tk_mx) - tk_mn);", g, g);
        line(E, "tk_hr%d[tk_j] = (int)(tk_mini(tk_maxi(tk_hi%d[tk_j], tk_mn), tk_mx) - tk_mn);", g, g);
    }
    lane_close(E);
    /* triangles: lane j's range starting at tk_mn + j (head) or ending at
     * tk_H + j (tail), around a common range, make a head or tail of V - 1
     * steps in which lane j runs from step j on (head) or until step j
     * (tail): unrolled, whether a lane runs is known when compiling, so no
     * step tests or selects per lane (rwkv: u < t + 1, range(t, T)) */
    line(E, "int tk_sh = tk_L < tk_H, tk_st = tk_L < tk_H;");
    lane_open(E, 0);
    for (int g = 0; g < nb; g++) {
        line(E, "tk_sh &= tk_lo%d[tk_j] == tk_mn + tk_j;", g);
        line(E, "tk_st &= tk_hi%d[tk_j] == tk_H + tk_j;", g);
    }
    lane_close(E);
    line(E, "if (!(tk_L < tk_H)) tk_L = tk_H = tk_mx;");
    line(E, "if (tk_sh) {");
    E->indent++;
    triangle(E, s, "tk_mn", "tk_j <= tk_m");
    E->indent--;
    line(E, "} else {");
    E->indent++;
    lane_range(E, s, "tk_mn", "tk_L", 1, nb);
    E->indent--;
    line(E, "}");
    lane_range(E, s, "tk_L", "tk_H", 0, nb);
    line(E, "if (tk_st) {");
    E->indent++;
    triangle(E, s, "tk_H", "tk_j > tk_m");
    E->indent--;
    line(E, "} else {");
    E->indent++;
    lane_range(E, s, "tk_H", "tk_mx", 1, nb);
    E->indent--;
    line(E, "}");
}

/* A loop whose bounds differ between lanes: each lane's range [lo, hi) is
 * computed, their common part runs unmasked, the rest masked; lanes whose
 * ranges barely overlap (or lie far apart) run one after the other. */
static void tile_lane_for(emitter *E, const tk_stmt *s) {
    int N = E->ngroup * E->nblocks, V = E->lanes;
    int nb = group_invariant(E, s->lo) && group_invariant(E, s->hi) ? E->nblocks : N;   /* bound sets */
    line(E, "{");
    E->indent++;
    for (int g = 0; g < nb; g++) line(E, "tk_i64 tk_lo%d[%d], tk_hi%d[%d];", g, V, g, V);
    lane_open(E, 1);
    for (int g = 0; g < nb; g++) {
        set_copy(E, g);
        begin_line(E);
        tk_buf_printf(E->b, "tk_lo%d[tk_j] = ", g);
        if (s->lo) expr(E, s->lo, TK_V_INT);
        else tk_buf_puts(E->b, "0");
        tk_buf_printf(E->b, ";\n");
        begin_line(E);
        tk_buf_printf(E->b, "tk_hi%d[tk_j] = ", g);
        expr(E, s->hi, TK_V_INT);
        tk_buf_printf(E->b, ";\n");
    }
    lane_close(E);
    line(E, "tk_i64 tk_L = tk_lo0[0], tk_H = tk_hi0[0], tk_mn = INT64_MAX, tk_mx = INT64_MIN;");
    if (!E->tg->gpu) line(E, "double tk_work = 0;");   /* the lane-by-lane test (CPU) */
    lane_head(E, 0);
    line(E, "for (int tk_j = 0; tk_j < %d; ++tk_j) {", V);
    E->indent++;
    for (int g = 0; g < nb; g++) {
        line(E, "tk_L = tk_maxi(tk_L, tk_lo%d[tk_j]), tk_H = tk_mini(tk_H, tk_hi%d[tk_j]);", g, g);
        line(E, "if (tk_lo%d[tk_j] < tk_hi%d[tk_j]) {", g, g);
        E->indent++;
        line(E, "tk_mn = tk_mini(tk_mn, tk_lo%d[tk_j]), tk_mx = tk_maxi(tk_mx, tk_hi%d[tk_j]);", g, g);
        if (!E->tg->gpu) line(E, "tk_work += (double)tk_hi%d[tk_j] - (double)tk_lo%d[tk_j];", g, g);
        E->indent--;
        line(E, "}");
    }
    E->indent--;
    line(E, "}");
    /* lanes whose ranges barely overlap run one by one (CPU; on the GPU
     * the masked form always: less code for NVRTC, and a thread's lanes
     * are neighbours) */
    if (E->tg->gpu) {
        line(E, "if (tk_mn < tk_mx) {");
        E->indent++;
        gpu_masked_ranges(E, s, nb);
        E->indent--;
        line(E, "}");
        E->indent--;
        line(E, "}");
        return;
    }
    line(E, "if (tk_mn < tk_mx && (((double)tk_mx - (double)tk_mn) * %d > 2.0 * tk_work + %d || "
            "(double)tk_mx - (double)tk_mn > 1e9)) {", V * nb, 4 * V * nb);
    E->indent++;
    lane_open(E, 0);
    for (int c = 0; c < N; c++) {
        int k = bound_set(E, c, nb);
        set_copy(E, c);
        line(E, "for (tk_i64 v_%s = tk_lo%d[tk_j]; v_%s < tk_hi%d[tk_j]; ++v_%s) {", s->name, k, s->name, k, s->name);
        E->indent++;
        block(E, s->body, s->nbody);
        E->indent--;
        line(E, "}");
    }
    lane_close(E);
    E->indent--;
    line(E, "} else if (tk_mn < tk_mx) {");
    E->indent++;
    const char *mi = E->ftype == TK_V_F64 ? "long long" : "int";   /* lane offsets as wide as the lanes */
    for (int g = 0; g < nb; g++) line(E, "%s tk_lr%d[%d], tk_hr%d[%d];", mi, g, V, g, V);
    lane_open(E, 1);
    for (int g = 0; g < nb; g++) {
        /* empty lanes get an empty offset range */
        line(E, "tk_lr%d[tk_j] = (%s)(tk_mini(tk_maxi(tk_lo%d[tk_j], tk_mn), tk_mx) - tk_mn);", g, mi, g);
        line(E, "tk_hr%d[tk_j] = (%s)(tk_mini(tk_maxi(tk_hi%d[tk_j], tk_mn), tk_mx) - tk_mn);", g, mi, g);
    }
    lane_close(E);
    if (E->wide && vx_loop_ok(E, s)) {
        vx_loop(E, s, nb);   /* the wide body has unit strides: no omp simd form */
    } else {
        line(E, "{");
        E->indent++;
        line(E, "if (tk_L < tk_H) {");
        E->indent++;
        lane_range(E, s, "tk_mn", "tk_L", 1, nb);
        lane_range(E, s, "tk_L", "tk_H", 0, nb);
        lane_range(E, s, "tk_H", "tk_mx", 1, nb);
        E->indent--;
        line(E, "} else {");
        E->indent++;
        lane_range(E, s, "tk_mn", "tk_mx", 1, nb);
        E->indent--;
        line(E, "}");
        E->indent--;
        line(E, "}");
    }
    E->indent--;
    line(E, "}");
    E->indent--;
    line(E, "}");
}

/* A loop with the same bounds in every lane and copy. */
static void tile_shared_for(emitter *E, const tk_stmt *s) {
    set_copy(E, 0);
    line(E, "{");
    E->indent++;
    begin_line(E);
    tk_buf_printf(E->b, "const tk_i64 r_%s_lo = ", s->name);
    if (s->lo) expr(E, s->lo, TK_V_INT);
    else tk_buf_puts(E->b, "0");
    tk_buf_printf(E->b, ", r_%s_end = ", s->name);
    expr(E, s->hi, TK_V_INT);
    tk_buf_puts(E->b, ";\n");
    if (s == E->split_loop)   /* thread tk_sub of the tile's S (split_plan) */
        line(E, "for (tk_i64 v_%s = r_%s_lo + tk_sub; v_%s < r_%s_end; v_%s += %d) {", s->name, s->name, s->name,
             s->name, s->name, E->split);
    else
        line(E, "for (tk_i64 v_%s = r_%s_lo; v_%s < r_%s_end; ++v_%s) {", s->name, s->name, s->name, s->name, s->name);
    E->indent++;
    E->shared[E->nshared++] = s->name;
    tile_block(E, s->body, s->nbody);
    E->nshared--;
    E->indent--;
    line(E, "}");
    E->indent--;
    line(E, "}");
}

static void tile_block(emitter *E, tk_stmt **body, int n) {
    int i = 0;
    while (i < n) {
        if (body[i]->kind != TK_S_FOR) {
            int k = i;
            while (k < n && body[k]->kind != TK_S_FOR) k++;
            lane_open(E, 1);
            lane_stmts(E, body + i, k - i);
            lane_close(E);
            i = k;
            continue;
        }
        const tk_stmt *s = body[i++];
        if (lane_invariant(E, s->lo) && lane_invariant(E, s->hi)) tile_shared_for(E, s);
        else tile_lane_for(E, s);
    }
}

/* ---- GPU split reductions -------------------------------------------------------
 * 'schedule split=S' (or TK_CUDA_TUNE): S consecutive threads, lanes of one
 * warp, share each tile. The body's first top-level loop, when its bounds
 * are the same in every lane and copy and its iterations meet only in
 * accumulators (float locals it only adds into, `s += e`, and never reads)
 * and in temporaries (assigned once, at the top of its body, and read
 * nowhere after it), is dealt out: thread r of the S runs iterations
 * lo + r, lo + r + S, ..., its accumulators starting at 0 (thread 0's
 * carry what the body set before the loop); after the loop a butterfly of
 * warp shuffles (__shfl_xor_sync) adds the S partial sums, every thread
 * getting the same bits (each step adds the same two values, in either
 * order), and thread 0 alone runs the rest of the body. A tile that crosses
 * the end of its row deals out its elements instead. The sum is
 * reassociated: S partial sums, each in the spec's order, added pairwise.
 * It is for ops whose outputs are too few to fill the GPU: rwkv_backward_w's
 * C x T outputs each sum the whole batch. The S threads of a tile are
 * consecutive lanes of one warp because the launcher's blocks are multiples
 * of 32 threads (tk_cuda_block_size). */
typedef struct split_scan {
    int writes[TK_MAX_LOCALS], adds[TK_MAX_LOCALS], reads[TK_MAX_LOCALS];
    unsigned char top_set[TK_MAX_LOCALS];   /* first touched by a plain assignment at the top level */
    int stores;
} split_scan;

static void split_reads(const emitter *E, const tk_expr *e, split_scan *sc) {
    if (!e) return;
    if (e->kind == TK_E_NAME)
        for (int r = 0; r < E->op->nlocals; r++)
            if (strcmp(E->op->locals[r].name, e->name) == 0) sc->reads[r]++;
    for (int i = 0; i < e->nargs; i++) split_reads(E, e->args[i], sc);
}

static void split_walk(const emitter *E, tk_stmt **body, int n, int top, split_scan *sc) {
    for (int i = 0; i < n; i++) {
        const tk_stmt *s = body[i];
        split_reads(E, s->value, sc);
        split_reads(E, s->lo, sc);
        split_reads(E, s->hi, sc);
        for (int j = 0; j < s->nindex; j++) split_reads(E, s->index[j], sc);
        if (s->kind == TK_S_STORE) sc->stores++;
        if (s->kind == TK_S_ASSIGN) {
            int r = s->ref;
            if (s->op == TK_OPC_NONE && top && !sc->writes[r] && !sc->reads[r]) sc->top_set[r] = 1;
            sc->writes[r]++;
            sc->adds[r] += s->op == TK_OPC_ADD && !s->declares;
        }
        split_walk(E, s->body, s->nbody, 0, sc);
        split_walk(E, s->orelse, s->norelse, 0, sc);
    }
}

/* Sets E->split and E->split_loop when the tile's top-level loop can be
 * dealt out (see above); after lane_plan. */
static int split_plan(emitter *E) {
    const tk_opdecl *d = E->op->decl;
    E->split = 0;
    E->split_loop = NULL;
    if (!E->tg->gpu || !E->lanes || E->tune_split < 2) return 0;
    const tk_stmt *loop = NULL;
    for (int i = 0; i < d->nbody && !loop; i++)
        if (d->body[i]->kind == TK_S_FOR) loop = d->body[i];
    if (!loop || !lane_invariant(E, loop->lo) || !lane_invariant(E, loop->hi)) return 0;
    split_scan in, all;
    memset(&in, 0, sizeof in);
    memset(&all, 0, sizeof all);
    split_walk(E, loop->body, loop->nbody, 1, &in);
    split_walk(E, d->body, d->nbody, 0, &all);
    if (in.stores) return 0;
    int nacc = 0;
    memset(E->split_acc, 0, sizeof E->split_acc);
    for (int r = 0; r < E->op->nlocals; r++) {
        const tk_local *l = &E->op->locals[r];
        if (!in.writes[r] || l->is_loop) continue;
        int acc = in.adds[r] == in.writes[r] && in.reads[r] == 0 && E->arr[r] &&
                  (l->type == TK_V_F32 || l->type == TK_V_F64);
        int tmp = in.writes[r] == 1 && in.top_set[r] && all.reads[r] + all.writes[r] == in.reads[r] + in.writes[r];
        if (!acc && !tmp) return 0;
        E->split_acc[r] = (unsigned char)acc;
        nacc += acc;
    }
    if (nacc == 0) return 0;
    E->split = E->tune_split;
    E->split_loop = loop;
    return 1;
}

/* ---- GPU mirrored tiles -------------------------------------------------------
 * When a loop's bounds move with the innermost variable (rwkv: range(t + 1),
 * range(t, T)), a tile's work grows (or shrinks) along its row: at C = T =
 * 768, rwkv_forward's tile 47 of a row sums 48 times the terms of tile 0.
 * With one tile a thread, a block's 8 warps held tiles 0-7, 8-15, ... 40-47
 * of a row: the block, whose registers stay allocated until its last warp
 * ends, ran as long as its heaviest warp, its warps busy 51 % of that time
 * on average (bench/gpu_warp_model.py). With 'tiles=2' a thread takes tile
 * position p and n - 1 - p of the same row, whose work sums to about the
 * same for every p: every warp of a block does about the same work (the
 * model: blocks 88 % busy; a warp still waits, in each pass, for its
 * slowest thread, as before). The
 * grid-stride loop runs twice (gpu_tiles_head), over the positions p < n/2,
 * then over their mirror images; the middle tile of an odd row is taken
 * once. A warp's threads keep their layout (positions p..p+7 of 4 rows,
 * then their mirror images). Default: 2 when some loop's bounds read the
 * innermost variable (or a local set from it), else 1. */
static int names_uses(tk_stmt **body, int n, const char *v, const tk_expr *e, int depth) {
    if (!e || depth > 4) return 0;
    if (expr_uses(e, v)) return 1;
    for (int i = 0; i < n; i++) {   /* a local set from v, directly or through another */
        const tk_stmt *s = body[i];
        if (s->kind == TK_S_ASSIGN && expr_uses(e, s->name) && names_uses(body, n, v, s->value, depth + 1))
            return 1;
    }
    return 0;
}

static int bounds_move(const emitter *E, tk_stmt **body, int n, const char *v) {
    const tk_opdecl *d = E->op->decl;
    for (int i = 0; i < n; i++) {
        const tk_stmt *s = body[i];
        if (s->kind == TK_S_FOR && (names_uses(d->body, d->nbody, v, s->lo, 0) ||
                                    names_uses(d->body, d->nbody, v, s->hi, 0)))
            return 1;
        if (bounds_move(E, s->body, s->nbody, v) || bounds_move(E, s->orelse, s->norelse, v)) return 1;
    }
    return 0;
}

static int mirror_plan(emitter *E) {
    const tk_opdecl *d = E->op->decl;
    E->mirror = 0;
    if (!E->tg->gpu || !E->lanes) return 0;
    if (E->tune_tiles) E->mirror = E->tune_tiles == 2;
    else E->mirror = bounds_move(E, d->body, d->nbody, d->loop_vars[d->nloop - 1]);
    return E->mirror;
}

/* Every accumulator of the split loop, each copy and lane: set to 0, or
 * (shuffle) added its partner's value at lane distance tk_o. */
static void split_accs(emitter *E, int shuffle) {
    lane_open(E, 0);
    for (int r = 0; r < E->op->nlocals; r++) {
        if (!E->split_acc[r]) continue;
        for (int c = 0; c < E->ngroup * E->nblocks; c++) {
            set_copy(E, c);
            begin_line(E);
            local_name(E, E->op->locals[r].name, r);
            if (shuffle) {
                tk_buf_puts(E->b, " += __shfl_xor_sync(tk_smask, ");
                local_name(E, E->op->locals[r].name, r);
                tk_buf_puts(E->b, ", tk_o);\n");
            } else {
                tk_buf_puts(E->b, " = 0;\n");
            }
        }
    }
    lane_close(E);
}

/* The body with its top-level loop dealt out over the tile's S threads. */
static void split_body(emitter *E) {
    const tk_opdecl *d = E->op->decl;
    int k = 0;
    while (d->body[k] != E->split_loop) k++;
    tile_block(E, d->body, k);
    line(E, "if (tk_sub != 0) {   /* thread 0 carries the sums so far */");
    E->indent++;
    split_accs(E, 0);
    E->indent--;
    line(E, "}");
    tile_block(E, d->body + k, 1);
    line(E, "{   /* the S partial sums, added pairwise by warp shuffles */");
    E->indent++;
    if (E->split == 32) line(E, "const unsigned tk_smask = 0xffffffffu;");
    else line(E, "const unsigned tk_smask = 0x%xu << (threadIdx.x & %d);", (1u << E->split) - 1, 32 - E->split);
    line(E, "#pragma unroll");
    line(E, "for (int tk_o = 1; tk_o < %d; tk_o *= 2) {", E->split);
    E->indent++;
    split_accs(E, 1);
    E->indent--;
    line(E, "}");
    E->indent--;
    line(E, "}");
    if (k + 1 < d->nbody) {
        line(E, "if (tk_sub == 0) {");
        E->indent++;
        tile_block(E, d->body + k + 1, d->nbody - k - 1);
        E->indent--;
        line(E, "}");
    }
}

/* One tile: the per-lane locals of every copy, then the body. */
static void tile(emitter *E) {
    line(E, "{");
    E->indent++;
    for (int r = 0; r < E->op->nlocals; r++) {
        if (!E->arr[r]) continue;
        for (int c = 0; c < E->ngroup * E->nblocks; c++)
            line(E, "%s v_%s_%d[%d];", k_vctype[E->op->locals[r].type], E->op->locals[r].name, c, E->lanes);
    }
    if (E->split_loop) split_body(E);
    else tile_block(E, E->op->decl->body, E->op->decl->nbody);
    set_copy(E, 0);
    E->copy = -1;
    E->indent--;
    line(E, "}");
}

static void block(emitter *E, tk_stmt **body, int n) {
    for (int i = 0; i < n; i++) {
        const tk_stmt *s = body[i];
        switch (s->kind) {
        case TK_S_PASS: break;
        case TK_S_ASSIGN: assign(E, s); break;
        case TK_S_STORE: store(E, s); break;
        case TK_S_IF: if_stmt(E, s, 0); break;
        case TK_S_FOR: for_stmt(E, s); break;
        }
    }
}

/* ---- kernel skeleton -------------------------------------------------------- */

static int expr_uses(const tk_expr *e, const char *name) {
    if (!e) return 0;
    if ((e->kind == TK_E_NAME || e->kind == TK_E_INDEX) && strcmp(e->name, name) == 0) return 1;
    for (int i = 0; i < e->nargs; i++)
        if (expr_uses(e->args[i], name)) return 1;
    return 0;
}

/* Whether the body reads name (a parameter, dim or tensor). */
static int body_uses(tk_stmt **body, int n, const char *name) {
    for (int i = 0; i < n; i++) {
        const tk_stmt *s = body[i];
        if (expr_uses(s->value, name) || expr_uses(s->lo, name) || expr_uses(s->hi, name)) return 1;
        for (int j = 0; j < s->nindex; j++)
            if (expr_uses(s->index[j], name)) return 1;
        if (body_uses(s->body, s->nbody, name) || body_uses(s->orelse, s->norelse, name)) return 1;
    }
    return 0;
}

static int used(const emitter *E, const char *name) {
    return body_uses(E->op->decl->body, E->op->decl->nbody, name);
}

/* Declares element pointers and explicit-dim strides of tensor p in slot. */
static void tensor_prologue(emitter *E, const tk_param *p, int slot, tk_dtype dt, int is_out) {
    const char *A = E->tg->args;
    int n = tk_explicit_dims(p);
    line(E, "%s%s *%s t_%s = (%s%s *)%st[%d].data;", is_out ? "" : "const ", k_ctype[dt],
         E->tg->restrict_kw, p->name, is_out ? "" : "const ", k_ctype[dt], A, slot);
    for (int i = 0; i < n - (E->tg->gpu ? 0 : 1); i++)
        line(E, "const tk_i64 s_%s_%d = %st[%d].stride[%st[%d].ndim - %d];", p->name, i, A, slot, A, slot, n - i);
}

/* Calls fn(p, i) for each tensor (inputs the body reads, then outputs)
 * with at least one explicit dim; i is its slot. */
static void each_strided(emitter *E, void (*fn)(emitter *, const tk_param *, int, int), int arg) {
    const tk_op *op = E->op;
    for (int i = 0; i < op->decl->nparams && !E->outputs_only; i++) {
        const tk_param *p = param(E, i);
        if (p->kind == TK_P_TENSOR && used(E, p->name) && tk_explicit_dims(p) > 0) fn(E, p, op->slot[i], arg);
    }
    for (int i = 0; i < op->decl->noutputs; i++)
        if (tk_explicit_dims(output(E, i)) > 0) fn(E, output(E, i), op->out_slot[i], arg);
}

static void prologue(emitter *E) {
    const tk_op *op = E->op;
    const tk_opdecl *d = op->decl;
    const char *A = E->tg->args;
    for (int i = 0; i < d->nparams; i++) {
        const tk_param *p = param(E, i);
        if (p->kind == TK_P_TENSOR && used(E, p->name))
            tensor_prologue(E, p, op->slot[i], tk_variant_dtype(op, E->variant, i), 0);
    }
    for (int i = 0; i < d->noutputs; i++)
        tensor_prologue(E, output(E, i), op->out_slot[i], tk_variant_out_dtype(op, E->variant, i), 1);
    for (int i = 0; i < d->nparams; i++) {
        const tk_param *p = param(E, i);
        if (!used(E, p->name)) continue;
        if (p->kind == TK_P_INT) line(E, "const tk_i64 p_%s = %si[%d];", p->name, A, op->slot[i]);
        if (p->kind == TK_P_BOOL) line(E, "const int p_%s = (int)%si[%d];", p->name, A, op->slot[i]);
        if (p->kind == TK_P_FLOAT)
            line(E, "const %s p_%s = (%s)%sf[%d];", k_vctype[E->ftype], p->name, k_vctype[E->ftype], A, op->slot[i]);
    }
    for (int i = 0; i < op->ndims; i++)
        if (used(E, op->dims[i].name)) line(E, "const tk_i64 d_%s = %si[%d];", op->dims[i].name, A, op->dims[i].slot);
    const tk_param *lo = output(E, op->loop_out);
    int lslot = op->out_slot[op->loop_out];
    for (int i = 0; i < d->nloop; i++)
        line(E, "const tk_i64 n_%s = %st[%d].size[%st[%d].ndim - %d];", d->loop_vars[i], A, lslot, A, lslot,
             d->nloop - i);
    (void)lo;
}

/* Splits r (a flat index) into the loop variables (all but the last when
 * inner_last) and the batch offsets of the '...' tensors. */
static void decompose(emitter *E, int skip_last) {
    const tk_op *op = E->op;
    const tk_opdecl *d = op->decl;
    const char *A = E->tg->args;
    line(E, "tk_i64 r = %s;", E->gpu_tiles && E->lanes ? "tk_lin" : "lin");
    /* with lane-tile groups the kernel walks its index space with the group
     * dim next to the innermost one (any order covers it; the rows of a group
     * become neighbours) */
    int order[TK_MAX_DIMS + 1], k = 0;
    if (d->nloop > 0) order[k++] = d->nloop - 1;
    if (E->ngroup > 1) order[k++] = E->gdim;
    for (int i = d->nloop - 2; i >= 0; i--)
        if (!(E->ngroup > 1 && i == E->gdim)) order[k++] = i;
    if (E->stepped) {   /* GPU chunks: digits kept by chunk_counters */
        for (int o = 0; o < d->nloop; o++) {
            if (o == 0) line(E, "const tk_i64 v_%s = tk_x0 * %d;", d->loop_vars[order[o]], E->chunk);
            else line(E, "const tk_i64 v_%s = tk_x%d;", d->loop_vars[order[o]], o);
        }
        line(E, "r = tk_x%d;", d->nloop);
    }
    for (int o = 0; o < d->nloop && !E->stepped; o++) {
        int i = order[o];
        const char *v = d->loop_vars[i];
        if (E->tg->gpu) {   /* one (32-bit when it fits) division a dim, the remainder from it */
            char nb[80];
            int scale = 1;   /* tiles: r counts them, v_ is their first element */
            snprintf(nb, sizeof nb, "n_%s", v);
            if (E->gpu_tiles && i == d->nloop - 1) {
                snprintf(nb, sizeof nb, "tk_ntile");
                scale = E->chunk ? E->chunk : E->lanes;
            } else if (E->gpu_tiles && E->ngroup > 1 && i == E->gdim) {
                snprintf(nb, sizeof nb, "tk_ngroup");
                scale = E->ngroup;
            }
            if (E->lanes) {
                /* tiles: once per tile of V x G outputs, so speed does not
                 * matter, and the 64-bit form costs fewer registers (rwkv f32
                 * on sm_90: 96 / 79 instead of 128 / 105; bench/gpu_static.py) */
                line(E, "const tk_i64 v_%s = r %% %s * %d;", v, nb, scale);
                line(E, "r /= %s;", nb);
                continue;
            }
            line(E, "const tk_i64 q_%s = tk_udiv(r, %s);", v, nb);
            if (scale > 1) line(E, "const tk_i64 v_%s = (r - q_%s * %s) * %d;", v, v, nb, scale);
            else line(E, "const tk_i64 v_%s = r - q_%s * %s;", v, v, nb);
            line(E, "r = q_%s;", v);
            continue;
        }
        if (i == d->nloop - 1 && skip_last) line(E, "tk_i64 v_%s = r %% n_%s;", v, v);
        else line(E, "const tk_i64 v_%s = r %% n_%s;", v, v);
        line(E, "r /= n_%s;", v);
    }
    if (!op->has_ellipsis) {
        line(E, "(void)r;");
        return;
    }
    int lslot = op->out_slot[op->loop_out];
    for (int i = 0; i < d->nparams; i++)
        if (param(E, i)->kind == TK_P_TENSOR && has_ell(param(E, i)) && used(E, param(E, i)->name))
            line(E, "tk_i64 o_%s = 0;", param(E, i)->name);
    for (int i = 0; i < d->noutputs; i++) line(E, "tk_i64 o_%s = 0;", output(E, i)->name);
    line(E, "for (tk_i64 bd = %snbatch - 1; bd >= 0; --bd) {", A);
    E->indent++;
    line(E, "const tk_i64 bq = tk_udiv(r, %st[%d].size[bd]);", A, lslot);
    line(E, "const tk_i64 bi = r - bq * %st[%d].size[bd];", A, lslot);
    line(E, "r = bq;");
    for (int i = 0; i < d->nparams; i++)
        if (param(E, i)->kind == TK_P_TENSOR && has_ell(param(E, i)) && used(E, param(E, i)->name))
            line(E, "o_%s += bi * %st[%d].stride[bd];", param(E, i)->name, A, op->slot[i]);
    for (int i = 0; i < d->noutputs; i++)
        line(E, "o_%s += bi * %st[%d].stride[bd];", output(E, i)->name, A, op->out_slot[i]);
    E->indent--;
    line(E, "}");
}

static int has_top_level_for(const tk_opdecl *d) {
    for (int i = 0; i < d->nbody; i++)
        if (d->body[i]->kind == TK_S_FOR) return 1;
    return 0;
}

/* ---- CPU plan: loop-invariant statements and incremental divisions ------- */

/* Whether e has the same value for every element of a run of the innermost
 * loop variable: it reads neither that variable nor a local outside
 * uniform[]. */
static int is_uniform(const emitter *E, const tk_expr *e, const unsigned char *uniform) {
    const tk_opdecl *d = E->op->decl;
    if (e->kind == TK_E_NAME) {
        if (strcmp(e->name, d->loop_vars[d->nloop - 1]) == 0) return 0;
        for (int i = 0; i < d->nloop; i++)
            if (strcmp(e->name, d->loop_vars[i]) == 0) return 1;
        int idx;
        if (tk_resolve_header(E->op, e->name, &idx) != TK_SYM_NONE) return 1;
        return uniform[e->ref];
    }
    for (int i = 0; i < e->nargs; i++)
        if (!is_uniform(E, e->args[i], uniform)) return 0;
    return 1;
}

static void count_assigns(tk_stmt **body, int n, int *count) {
    for (int i = 0; i < n; i++) {
        const tk_stmt *s = body[i];
        if (s->kind == TK_S_ASSIGN) count[s->ref]++;
        count_assigns(s->body, s->nbody, count);
        count_assigns(s->orelse, s->norelse, count);
    }
}

/* Collects int floor divisions and modulos with a uniform divisor and a
 * varying numerator: along a run the numerator usually grows by one. */
static void find_memo_sites(emitter *E, const tk_expr *e, const unsigned char *uniform) {
    if (!e) return;
    if (e->kind == TK_E_BINARY && (e->op == TK_OPC_FLOORDIV || e->op == TK_OPC_MOD) &&
        e->args[0]->vtype == TK_V_INT && e->args[1]->vtype == TK_V_INT &&
        is_uniform(E, e->args[1], uniform) && !is_uniform(E, e->args[0], uniform) &&
        E->nmemo < (int)(sizeof E->memo / sizeof E->memo[0]))
        E->memo[E->nmemo++] = e;
    for (int i = 0; i < e->nargs; i++) find_memo_sites(E, e->args[i], uniform);
}

/* The coefficient of the innermost loop variable t in int expression e when
 * e = coef * t + (uniform); 0 if e is not of that form. Memo sites count
 * as uniform (constant within a segment). */
static int affine(const emitter *E, const tk_expr *e, const unsigned char *uniform, int64_t *coef) {
    const tk_opdecl *d = E->op->decl;
    int64_t a, b;
    if (e->vtype != TK_V_INT) return 0;
    for (int i = 0; i < E->nmemo; i++)
        if (E->memo[i] == e) {
            if (e->op == TK_OPC_MOD) return affine(E, e->args[0], uniform, coef);
            *coef = 0;
            return 1;
        }
    if (is_uniform(E, e, uniform)) {
        *coef = 0;
        return 1;
    }
    switch (e->kind) {
    case TK_E_NAME:
        if (strcmp(e->name, d->loop_vars[d->nloop - 1]) == 0) {
            *coef = 1;
            return 1;
        }
        return E->def[e->ref] && affine(E, E->def[e->ref]->value, uniform, coef);
    case TK_E_UNARY:
        if (e->op != TK_OPC_NEG || !affine(E, e->args[0], uniform, &a)) return 0;
        *coef = -a;
        return 1;
    case TK_E_BINARY:
        if (e->op != TK_OPC_ADD && e->op != TK_OPC_SUB && e->op != TK_OPC_MUL) return 0;
        if (!affine(E, e->args[0], uniform, &a) || !affine(E, e->args[1], uniform, &b)) return 0;
        if (e->op == TK_OPC_MUL) {      /* only a literal factor keeps a known coefficient */
            const tk_expr *lit = a == 0 ? e->args[0] : e->args[1];
            if (a != 0 && b != 0) return 0;
            if (a == 0 && b == 0) { *coef = 0; return 1; }
            if (lit->kind != TK_E_INT) return 0;
            *coef = (a ? a : b) * lit->ival;
            return 1;
        }
        *coef = e->op == TK_OPC_ADD ? a + b : a - b;
        return 1;
    default:
        return 0;
    }
}

/* Whether e (a site's numerator) can be evaluated at a segment start: only
 * t, uniform values and top-level single-assignment locals, no other site. */
static int inlinable(const emitter *E, const tk_expr *e, const unsigned char *uniform) {
    for (int i = 0; i < E->nmemo; i++)
        if (E->memo[i] == e) return 0;
    if (e->kind == TK_E_NAME && !is_uniform(E, e, uniform)) {
        const tk_opdecl *d = E->op->decl;
        if (strcmp(e->name, d->loop_vars[d->nloop - 1]) == 0) return 1;
        return E->def[e->ref] && inlinable(E, E->def[e->ref]->value, uniform);
    }
    for (int i = 0; i < e->nargs; i++)
        if (!inlinable(E, e->args[i], uniform)) return 0;
    return 1;
}

/* Segments apply when every memo site sits in a top-level statement, has a
 * numerator growing by exactly 1 per element and can be evaluated ahead. */
static int plan_segments(emitter *E, const unsigned char *uniform) {
    if (E->nmemo == 0) return 0;
    for (int i = 0; i < E->nmemo; i++) {
        int64_t c;
        if (!affine(E, E->memo[i]->args[0], uniform, &c) || c != 1) return 0;
        if (!inlinable(E, E->memo[i]->args[0], uniform)) return 0;
    }
    return 1;
}

/* Plans one run of the innermost loop: top-level single-assignment locals
 * with uniform values are computed once per run (hoisted), and floor
 * divisions of top-level statements by uniform divisors are memoised. */
static void plan_run(emitter *E) {
    const tk_opdecl *d = E->op->decl;
    unsigned char uniform[TK_MAX_LOCALS] = {0};
    int count[TK_MAX_LOCALS] = {0};
    memset(E->hoisted, 0, sizeof E->hoisted);
    memset(E->hoisted_local, 0, sizeof E->hoisted_local);
    memset(E->def, 0, sizeof E->def);
    E->nmemo = 0;
    E->segmented = 0;
    if ((E->tg->gpu && !E->chunk) || E->plain || d->nloop == 0 || E->ncopies > 1 ||
        d->nbody > (int)sizeof E->hoisted)
        return;
    count_assigns(d->body, d->nbody, count);
    for (int i = 0; i < d->nbody; i++) {
        const tk_stmt *s = d->body[i];
        if (s->kind != TK_S_ASSIGN || !s->declares || count[s->ref] != 1) continue;
        E->def[s->ref] = s;
        if (is_uniform(E, s->value, uniform)) {
            E->hoisted[i] = 1;
            E->hoisted_local[s->ref] = 1;
            uniform[s->ref] = 1;
        }
    }
    for (int i = 0; i < d->nbody; i++) {
        const tk_stmt *s = d->body[i];
        if (!E->hoisted[i] && (s->kind == TK_S_ASSIGN || s->kind == TK_S_STORE)) find_memo_sites(E, s->value, uniform);
    }
    E->segmented = plan_segments(E, uniform);
}

/* The top-level statements, those in (hoisted == 1) or out of the run loop. */
static void run_block(emitter *E, int hoisted) {
    const tk_opdecl *d = E->op->decl;
    for (int i = 0; i < d->nbody; i++)
        if (E->hoisted[i] == hoisted) block(E, &d->body[i], 1);
}

/* Whether body has a loop, at any depth (CPU segments, GPU chunks). */
static int has_for(tk_stmt **body, int n) {
    for (int i = 0; i < n; i++)
        if (body[i]->kind == TK_S_FOR || has_for(body[i]->body, body[i]->nbody) ||
            has_for(body[i]->orelse, body[i]->norelse))
            return 1;
    return 0;
}

/* Splits the run into segments in which every memo site's quotient is
 * constant (its numerator grows by one per element and the divisor is
 * positive), so the segment loop has no division and vectorises. Quotients
 * and remainders are divided once per run and stepped per segment. The
 * plain loop after it finishes the run when a divisor is not positive. */
static void segments(emitter *E) {
    const char *v = E->op->decl->loop_vars[E->op->decl->nloop - 1];
    for (int i = 0; i < E->nmemo; i++) {
        const tk_expr *e = E->memo[i];
        begin_line(E);
        tk_buf_printf(E->b, "const tk_i64 tk_d%d = ", i);
        expr(E, e->args[1], TK_V_INT);
        tk_buf_printf(E->b, ";\n");
        E->inline_locals = 1;
        begin_line(E);
        tk_buf_printf(E->b, "const tk_i64 tk_n%d = ", i);
        expr(E, e->args[0], TK_V_INT);
        tk_buf_printf(E->b, ";\n");
        E->inline_locals = 0;
        line(E, "tk_i64 tk_q%d = tk_floordiv(tk_n%d, tk_d%d), tk_r%d = tk_mod(tk_n%d, tk_d%d);", i, i, i, i, i, i);
    }
    begin_line(E);
    tk_buf_puts(E->b, "if (");
    for (int i = 0; i < E->nmemo; i++) tk_buf_printf(E->b, "%stk_d%d > 0", i ? " && " : "", i);
    tk_buf_puts(E->b, ") {\n");
    E->indent++;
    line(E, "while (lin < stop) {");
    E->indent++;
    line(E, "tk_i64 seg = stop - lin;");
    for (int i = 0; i < E->nmemo; i++) line(E, "seg = tk_mini(seg, tk_d%d - tk_r%d);", i, i);
    if (has_for(E->op->decl->body, E->op->decl->nbody)) {
        line(E, "const tk_i64 seg_end = lin + seg, tk_c0 = v_%s;", v);
        line(E, "(void)tk_c0;");
        line(E, "for (; lin < seg_end; ++lin, ++v_%s) {", v);
        E->indent++;
        E->in_segment = 1;
        run_block(E, 0);
        E->in_segment = 0;
        E->indent--;
        line(E, "}");
    } else {
        /* A straight-line body (brick_pad's copy): a canonical `omp simd`
         * loop. Elements are independent (outputs are written at the loop
         * index only), and without the pragma GCC guards the vector loop
         * with alias checks and a remainder cascade that cost brick_pad's
         * 32-element segments a third of their time. */
        line(E, "const tk_i64 tk_c0 = v_%s;", v);
        line(E, "#pragma omp simd");
        line(E, "for (tk_i64 tk_i = 0; tk_i < seg; ++tk_i) {");
        E->indent++;
        E->in_segment = E->seg_iv = 1;   /* v is tk_c0 + tk_i here (GCC: 20% faster than v as the counter) */
        run_block(E, 0);
        E->in_segment = E->seg_iv = 0;
        E->indent--;
        line(E, "}");
        line(E, "v_%s += seg, lin += seg;", v);
    }
    for (int i = 0; i < E->nmemo; i++) {
        line(E, "tk_r%d += seg;", i);
        line(E, "if (tk_r%d == tk_d%d) tk_r%d = 0, ++tk_q%d;", i, i, i, i);
    }
    E->indent--;
    line(E, "}");
    E->indent--;
    line(E, "}");
}

/* CPU lane tiles over E->ngroup whole rows of the group dim at once (the
 * rows of one run of the innermost dim, then the next G - 1): tiles of
 * step elements, then the row ends one element (times G) at a time. */
static void group_rows(emitter *E, int step) {
    const tk_opdecl *d = E->op->decl;
    const char *v = d->loop_vars[d->nloop - 1], *gv = d->loop_vars[E->gdim];
    int G = E->ngroup;
    line(E, "if (v_%s == 0 && v_%s <= n_%s - %d && (end - lin) / %d >= n_%s) {", v, gv, gv, G, G, v);
    E->indent++;
    line(E, "for (; v_%s <= n_%s - %d; v_%s += %d)", v, v, step, v, step);
    E->indent++;
    tile(E);
    E->indent--;
    line(E, "for (; v_%s < n_%s; ++v_%s) {", v, v, v);
    E->indent++;
    for (int g = 0; g < G; g++) {
        E->copy = E->gcopy = g;
        E->rcopy = 0;
        line(E, "{");
        E->indent++;
        block(E, d->body, d->nbody);
        E->indent--;
        line(E, "}");
    }
    E->copy = -1;
    E->gcopy = 0;
    E->indent--;
    line(E, "}");
    line(E, "lin += %d * n_%s;", G, v);
    line(E, "continue;");
    E->indent--;
    line(E, "}");
}

/* CPU: decompose once per run of the innermost dim, then walk it; bodies
 * with a top-level loop walk it ncopies elements at a time (unroll-and-jam). */
static void cpu_loop(emitter *E) {
    const tk_opdecl *d = E->op->decl;
    line(E, "for (tk_i64 lin = begin; lin < end;) {");
    E->indent++;
    decompose(E, 1);
    if (d->nloop > 0) {
        const char *v = d->loop_vars[d->nloop - 1];
        run_block(E, 1);
        if (!E->segmented)
            for (int i = 0; i < E->nmemo; i++) line(E, "tk_divmemo tk_dm%d = {0, 0, 0, 0, 0};", i);
        line(E, "const tk_i64 stop = end - lin < n_%s - v_%s ? end : lin + (n_%s - v_%s);", v, v, v, v);
        if (E->segmented) segments(E);
        if (E->lanes) {
            int G = E->ngroup, R = E->nblocks, step = E->lanes * E->nblocks;
            /* whole rows of G group rows, then of G / 2 (a batch of 4, or
             * the 4 rows a batch of 12 leaves: each w vector still feeds
             * 4 rows' FMAs), then single rows */
            for (int g = G; g > 1; g = g / 2 >= 4 ? g / 2 : 1) {
                E->ngroup = g;
                E->nblocks = lane_blocks(E, g);
                group_rows(E, E->lanes * E->nblocks);
            }
            E->ngroup = 1;
            /* single rows: with a group dim, tiles of as many lane blocks as
             * one row takes (their loads skew, see vx_skewed), then of the
             * group's R for what is left of the row */
            int R1 = lane_blocks(E, 1);
            if (G > 1 && R1 > R) {
                E->nblocks = R1;
                line(E, "for (; lin + %d <= stop; lin += %d, v_%s += %d)", E->lanes * R1, E->lanes * R1, v,
                     E->lanes * R1);
                E->indent++;
                tile(E);
                E->indent--;
            }
            E->nblocks = R;
            line(E, "for (; lin + %d <= stop; lin += %d, v_%s += %d)", step, step, v, step);
            E->indent++;
            tile(E);
            E->indent--;
            E->ngroup = G;
        } else if (E->ncopies > 1) {
            line(E, "for (; lin + %d <= stop; lin += %d, v_%s += %d) {", E->ncopies, E->ncopies, v, E->ncopies);
            E->indent++;
            jammed_body(E);
            E->indent--;
            line(E, "}");
        }
        line(E, "for (; lin < stop; ++lin, ++v_%s) {", v);
    } else {
        line(E, "for (const tk_i64 stop = lin + 1; lin < stop; ++lin) {");
    }
    E->indent++;
    run_block(E, 0);
    E->indent--;
    line(E, "}");
    E->indent--;
    line(E, "}");
}

static void stride_param(emitter *E, const tk_param *p, int slot, int arg) {
    (void)slot;
    (void)arg;
    tk_buf_printf(E->b, ", tk_i64 s_%s_%d", p->name, tk_explicit_dims(p) - 1);
}

static void stride_load(emitter *E, const tk_param *p, int slot, int arg) {
    (void)arg;
    line(E, "const tk_i64 s_%s_%d = a->t[%d].stride[a->t[%d].ndim - 1];", p->name, tk_explicit_dims(p) - 1,
         slot, slot);
}

static void stride_cond(emitter *E, const tk_param *p, int slot, int arg) {
    (void)slot;
    (void)arg;
    tk_buf_printf(E->b, "%ss_%s_%d == 1", E->nconds++ ? " && " : "", p->name, tk_explicit_dims(p) - 1);
}

/* Prints `if (s_x_N == 1 && ...)` over the strided tensors' innermost
 * strides and then the condition extra (no newline); returns 0, printing
 * nothing, when there is none. */
static int unit_stride_test(emitter *E, const char *extra) {
    size_t mark = E->b->len;
    begin_line(E);
    tk_buf_puts(E->b, "if (");
    size_t cond = E->b->len;
    E->nconds = 0;
    each_strided(E, stride_cond, 0);
    if (extra && extra[0]) tk_buf_printf(E->b, "%s%s", E->b->len == cond ? "" : " && ", extra);
    if (E->b->len == cond) {
        E->b->len = mark;
        E->b->p[mark] = 0;
        return 0;
    }
    tk_buf_puts(E->b, ")");
    return 1;
}

static void stride_arg(emitter *E, const tk_param *p, int slot, int unit) {
    (void)slot;
    if (unit) tk_buf_puts(E->b, ", 1");
    else tk_buf_printf(E->b, ", s_%s_%d", p->name, tk_explicit_dims(p) - 1);
}

/* One force-inlined body taking the innermost strides (wide: the plan for
 * 512-bit (1) or 256-bit (2) vectors, with explicit-vector loops and
 * several lane blocks). */
static void cpu_body(emitter *E, const char *suffix, int wide) {
    const char *name = E->op->kernel_names[E->variant];
    tk_buf_printf(E->b, "TK_BODY void %s%s%s(const tk_kargs *a, tk_i64 begin, tk_i64 end", name,
                  E->plain ? "_plain" : "", suffix);
    each_strided(E, stride_param, 0);
    tk_buf_puts(E->b, ") {\n");
    E->indent = 1;
    E->wide = wide;
    prologue(E);
    E->lanes = 0;
    E->ngroup = E->nblocks = 1;
    E->gdim = E->op->decl->nloop - 1;
    if (!lane_plan(E)) {
        E->lanes = 0;
        E->ngroup = 1;
        E->gdim = E->op->decl->nloop - 1;
        E->ncopies = !E->plain && has_top_level_for(E->op->decl) && E->op->decl->nloop > 0 ? 4 : 1;
        plan_run(E);
    }
    cpu_loop(E);
    E->indent = 0;
    tk_buf_puts(E->b, "}\n");
}

/* Calls body `suffix`: with literal unit strides when they are 1 (so the
 * innermost accesses vectorise), else with the strides; `strided` names
 * the body for the second case. */
static void stride_dispatch(emitter *E, const char *suffix, const char *strided) {
    const char *name = E->op->kernel_names[E->variant], *sfx = E->plain ? "_plain" : "";
    each_strided(E, stride_load, 0);
    if (!unit_stride_test(E, NULL)) {       /* no strided tensor: one call */
        line(E, "%s%s%s(a, begin, end);", name, sfx, suffix);
    } else {
        tk_buf_puts(E->b, "\n");
        E->indent++;
        begin_line(E);
        tk_buf_printf(E->b, "%s%s%s(a, begin, end", name, sfx, suffix);
        each_strided(E, stride_arg, 1);
        tk_buf_puts(E->b, ");\n");
        E->indent--;
        line(E, "else");
        E->indent++;
        begin_line(E);
        tk_buf_printf(E->b, "%s%s%s(a, begin, end", name, sfx, strided);
        each_strided(E, stride_arg, 0);
        tk_buf_puts(E->b, ");\n");
        E->indent--;
    }
}

/* A call of body `suffix` with unit (literal 1) or variable strides. */
static void body_call(emitter *E, const char *suffix, int unit) {
    begin_line(E);
    tk_buf_printf(E->b, "%s%s%s(a, begin, end", E->op->kernel_names[E->variant], E->plain ? "_plain" : "", suffix);
    each_strided(E, stride_arg, unit);
    tk_buf_puts(E->b, ");\n");
}

static void buf_move(tk_buf *to, tk_buf *from) {
    if (from->oom) to->oom = 1;
    else if (from->p) tk_buf_puts(to, from->p);
    free(from->p);
    memset(from, 0, sizeof *from);
}

/* The CPU kernel: force-inlined bodies and an entry that picks one. The
 * narrow body (16-lane tiles in omp simd loops) is compiled per instruction
 * set (GCC target_clones); where its tiles have explicit-vector loops, a
 * wide body (512-bit vectors, several lane blocks, the loops outlined)
 * serves AVX-512 CPUs and a mid one (256-bit vectors, its own tile plan:
 * fewer accumulators for the 16 AVX2 registers) x86-64-v3 CPUs, both for
 * unit strides; the narrow body then serves the rest (baseline x86-64) and
 * strided calls. */
static void cpu_kernel(emitter *E) {
    const char *name = E->op->kernel_names[E->variant];
    const char *sfx = E->plain ? "_plain" : "", *clones = E->plain ? "" : "TK_CPU_CLONES ";
    emitter init = *E;
    tk_buf *out = E->b, wpre = {0}, wbody = {0}, mpre = {0}, mbody = {0}, nbody = {0};
    int wide = 0;
    if (!E->plain) {
        E->pre = &wpre;
        E->b = &wbody;
        cpu_body(E, "_wbody", 1);
        wide = E->nvx > 0;
        if (wide) {
            *E = init;
            E->pre = &mpre;
            E->b = &mbody;
            cpu_body(E, "_mbody", 2);
        }
    }
    *E = init;
    E->pre = out;
    E->b = &nbody;
    cpu_body(E, "_body", 0);
    E->b = out;
    if (wide) {   /* GNU C vectors: only where TK_VXW (TK_VXH) */
        tk_buf_puts(out, "#if TK_VXW\n");
        buf_move(out, &wpre);
        buf_move(out, &wbody);
        tk_buf_puts(out, "#endif\n#if TK_VXH\n");
        buf_move(out, &mpre);
        buf_move(out, &mbody);
        tk_buf_puts(out, "#endif\n");
    }
    free(wpre.p);
    free(wbody.p);
    free(mpre.p);
    free(mbody.p);
    buf_move(out, &nbody);
    E->indent = 0;
    if (!wide) {
        tk_buf_printf(E->b, "%svoid %s%s%s;\n", clones, name, sfx, E->tg->params);
        tk_buf_printf(E->b, "%svoid %s%s%s {\n", clones, name, sfx, E->tg->params);
        E->indent = 1;
        stride_dispatch(E, "_body", "_body");
        E->indent = 0;
        tk_buf_puts(E->b, "}\n");
        return;
    }
    /* the explicit-vector bodies take unit strides only; the narrow body,
     * with the strides as variables (no unit-stride copy of it: AVX2 and
     * AVX-512 CPUs run the others then), strided calls and CPUs without
     * AVX2 */
    line(E, "#if TK_WIDE_DISPATCH");
    line(E, "static TK_WIDE_TARGET void %s_wide%s {", name, E->tg->params);
    E->indent = 1;
    body_call(E, "_wbody", 1);
    E->indent = 0;
    line(E, "}");
    line(E, "static TK_MID_TARGET void %s_mid%s {", name, E->tg->params);
    E->indent = 1;
    body_call(E, "_mbody", 1);
    E->indent = 0;
    line(E, "}");
    line(E, "static TK_NARROW_CLONES void %s_narrow%s {", name, E->tg->params);
    E->indent = 1;
    each_strided(E, stride_load, 0);
    body_call(E, "_body", 0);
    E->indent = 0;
    line(E, "}");
    line(E, "void %s%s;", name, E->tg->params);
    line(E, "void %s%s {", name, E->tg->params);
    E->indent = 1;
    each_strided(E, stride_load, 0);
    int test = unit_stride_test(E, NULL);
    if (test) tk_buf_puts(E->b, " {\n");
    else line(E, "{");
    E->indent++;
    line(E, "if (tk_cpu_wide()) {");
    line(E, "    %s_wide(a, begin, end);", name);
    line(E, "    return;");
    line(E, "}");
    line(E, "if (tk_cpu_mid()) {");
    line(E, "    %s_mid(a, begin, end);", name);
    line(E, "    return;");
    line(E, "}");
    E->indent--;
    line(E, "}");
    line(E, "%s_narrow(a, begin, end);", name);
    E->indent = 0;
    line(E, "}");
    line(E, "#else");
    line(E, "void %s%s;", name, E->tg->params);
    line(E, "void %s%s {", name, E->tg->params);
    E->indent = 1;
    each_strided(E, stride_load, 0);
    line(E, "#if defined(TK_WIDE_STATIC) || TK_VXH");
    test = unit_stride_test(E, NULL);
    if (test) tk_buf_puts(E->b, " {\n");
    else line(E, "{");
    E->indent++;
    line(E, "#if defined(TK_WIDE_STATIC)");
    line(E, "if (tk_env_narrow() == 0) {");
    E->indent++;
    body_call(E, "_wbody", 1);
    line(E, "return;");
    E->indent--;
    line(E, "}");
    line(E, "#endif");
    line(E, "#if TK_VXH");
    line(E, "if (tk_env_narrow() < 2) {");
    E->indent++;
    body_call(E, "_mbody", 1);
    line(E, "return;");
    E->indent--;
    line(E, "}");
    line(E, "#endif");
    E->indent--;
    line(E, "}");
    line(E, "#endif");
    body_call(E, "_body", 0);
    E->indent = 0;
    line(E, "}");
    line(E, "#endif");
}

/* CUDA: a grid-stride loop, one element per iteration. */
static void gpu_loop(emitter *E) {
    const char *A = E->tg->args;
    line(E, "const tk_i64 end = %snumel;", A);
    line(E, "const tk_i64 step = (tk_i64)gridDim.x * blockDim.x;");
    line(E, "for (tk_i64 lin = (tk_i64)blockIdx.x * blockDim.x + threadIdx.x; lin < end; lin += step) {");
    E->indent++;
    decompose(E, 0);
    block(E, E->op->decl->body, E->op->decl->nbody);
    E->indent--;
    line(E, "}");
}

static void stride_cond(emitter *E, const tk_param *p, int slot, int arg);

/* ---- GPU sliding windows -------------------------------------------------------
 * In the unmasked range of a lane loop over u, a read whose index is
 * a*t + b*u + (lane-invariant terms) along one dim (t: the lanes' variable)
 * with b = -a or b = a, and lane-invariant elsewhere, gives lane j at u + 1
 * the element lane j - 1 (or j + 1) read at u. Such a read is loaded once per
 * lane at the start of the range, then each step shifts the registers by
 * one lane and loads the one new element: one load per step instead of one
 * per lane (rwkv: the w row). Only reads every lane makes at every u qualify
 * (unconditional statements, not under `if`, a conditional expression or
 * the right side of and/or), so no load leaves the spec's own reads. */

/* Whether every name of e other than t and u is the same in every lane. */
static int win_rest_ok(const emitter *E, const tk_expr *e, const char *t, const char *u) {
    if (!e) return 1;
    if (e->kind == TK_E_NAME) return !strcmp(e->name, t) || !strcmp(e->name, u) || lane_invariant(E, e);
    for (int i = 0; i < e->nargs; i++)
        if (!win_rest_ok(E, e->args[i], t, u)) return 0;
    return 1;
}

/* Whether tensor read e slides with the lanes along loop variable u; *shift as in win_shift. */
static int win_read(const emitter *E, const tk_expr *e, const char *u, int *shift) {
    const tk_opdecl *d = E->op->decl;
    const char *t = d->loop_vars[d->nloop - 1];
    tk_dtype dt = tk_variant_dtype(E->op, E->variant, e->ref);
    if (dt != TK_F16 && dt != TK_BF16 && dt != TK_F32 && dt != TK_F64) return 0;
    /* (lane-invariant names are group-invariant too: lane_invariant rejects the group variable) */
    int k = -1;
    for (int i = 0; i < e->nargs; i++) {
        if (!expr_uses(e->args[i], t) && !expr_uses(e->args[i], u)) {
            if (!lane_invariant(E, e->args[i])) return 0;
            continue;
        }
        if (k >= 0) return 0;
        k = i;
    }
    int64_t a, b;
    if (k < 0 || !lane_coef(e->args[k], t, &a) || !lane_coef(e->args[k], u, &b) || a == 0) return 0;
    if (!win_rest_ok(E, e->args[k], t, u)) return 0;
    if (b == -a) *shift = -1;
    else if (b == a) *shift = 1;
    else return 0;
    return 1;
}

static void win_find(emitter *E, const tk_expr *e, const char *u) {
    if (!e || e->kind == TK_E_COND) return;
    if (e->kind == TK_E_BINARY && (e->op == TK_OPC_AND || e->op == TK_OPC_OR)) {
        win_find(E, e->args[0], u);
        return;
    }
    int shift;
    if (e->kind == TK_E_INDEX && win_read(E, e, u, &shift)) {
        for (int i = 0; i < E->nwin; i++)
            if (expr_equal(E->win[i], e)) return;
        if (E->nwin < 8) {
            E->win_shift[E->nwin] = shift;
            E->win[E->nwin++] = e;
        }
        return;
    }
    for (int i = 0; i < e->nargs; i++) win_find(E, e->args[i], u);
}

/* Loads every window's element of lane `lane` (-1: of every lane, tk_j). */
static void win_load(emitter *E, int lane) {
    int strm_on = E->strm_on;
    E->strm_on = 0;   /* (the element of the next step: not this step's stream registers) */
    for (int i = 0; i < E->nwin; i++) {
        int l = lane < 0 ? -1 : E->win_shift[i] < 0 ? 0 : E->lanes - 1;   /* the lane with no predecessor */
        E->lane_fix = l;
        begin_line(E);
        if (l < 0) tk_buf_printf(E->b, "tk_w%d[tk_j] = ", i);
        else if (!E->win_rot) tk_buf_printf(E->b, "tk_w%d[%d] = ", i, l);
        else if (E->win_shift[i] < 0) tk_buf_printf(E->b, "tk_w%d[%d - tk_p] = ", i, E->lanes - 1);  /* lane 0 after step tk_p */
        else tk_buf_printf(E->b, "tk_w%d[tk_p] = ", i);                                             /* lane V-1 after step tk_p */
        expr(E, E->win[i], E->ftype);
        tk_buf_puts(E->b, ";\n");
    }
    E->lane_fix = -1;
    E->strm_on = strm_on;
}

/* The unmasked range [lo, hi) of lane loop s with sliding windows; returns
 * 0 (nothing emitted) when no read slides. */
/* One step of a window range: the body in every lane, then the windows'
 * elements for the next step (rot: into the slot a round of unrolled steps
 * just dropped; else shifting the registers one lane). */
static void win_step(emitter *E, const tk_stmt *s, const char *hi, int rot) {
    int V = E->lanes;
    E->win_rot = rot;
    lane_open(E, 1);
    E->win_on = 1;
    lane_stmts(E, s->body, s->nbody);
    E->win_on = 0;
    lane_close(E);
    if (rot) line(E, "if (tk_p + 1 < %d || v_%s + 1 < %s) {", V, s->name, hi);
    else line(E, "if (v_%s + 1 < %s) {", s->name, hi);
    E->indent++;
    line(E, "const tk_i64 tk_nx = v_%s + 1;", s->name);
    for (int i = 0; !rot && i < E->nwin; i++) {
        line(E, "#pragma unroll");
        if (E->win_shift[i] < 0) line(E, "for (int tk_j = %d; tk_j > 0; --tk_j) tk_w%d[tk_j] = tk_w%d[tk_j - 1];", V - 1, i, i);
        else line(E, "for (int tk_j = 0; tk_j < %d; ++tk_j) tk_w%d[tk_j] = tk_w%d[tk_j + 1];", V - 1, i, i);
    }
    line(E, "const tk_i64 v_%s = tk_nx;", s->name);
    E->in_lane = 1;
    set_copy(E, 0);
    win_load(E, 0);
    E->in_lane = 0;
    E->win_rot = 0;
    E->indent--;
    line(E, "}");
}

/* ---- GPU streams ------------------------------------------------------------------
 * In a round of V steps (gpu_window_range) a read that is the same in every
 * lane and whose last index grows by one a step (rwkv_forward: k[b, c, u],
 * one per group row; rwkv_backward_k: grad_out[b, c, t2]) reads V
 * consecutive elements of one row: in the unit-stride copy they are loaded
 * 16 bytes at a time (__ldg of a tk_v16: ld.global.nc.v4, 4 float32 or 8
 * bfloat16 a load instead of one) into registers tk_sv<i>[V], from which
 * step tk_p takes its element. The rounds need every such read's first
 * address 16-byte aligned: a tile first runs single steps (shifted, as the
 * last ones) until they all are, at most 16 / element bytes - 1 of them;
 * when no start aligns them all (rows of odd lengths), the rounds load
 * element by element as before. A warp's load then asks L1 for its rows
 * once every 4 steps instead of every step (the H200's L1 was 65-92 %
 * busy with these kernels' loads, docs/gpu.md). Only reads that every step
 * of the spec evaluates (top-level assignments of the loop body, outside
 * conditional expressions) qualify, so no load leaves the spec's own reads. */

/* Names a stream's index may use: lane-invariant ones, the group variable,
 * and (allow_u) the loop variable u. */
static int stream_names_ok(const emitter *E, const tk_expr *e, const char *u, int allow_u) {
    if (!e) return 1;
    if (e->kind == TK_E_NAME) {
        const tk_opdecl *d = E->op->decl;
        if (!strcmp(e->name, u)) return allow_u;
        if (E->ngroup > 1 && !strcmp(e->name, d->loop_vars[E->gdim])) return 1;
        return lane_invariant(E, e);
    }
    for (int i = 0; i < e->nargs; i++)
        if (!stream_names_ok(E, e->args[i], u, allow_u)) return 0;
    return 1;
}

static void stream_find(emitter *E, const tk_expr *e, const char *u) {
    if (!e || e->kind == TK_E_COND) return;
    if (e->kind == TK_E_BINARY && (e->op == TK_OPC_AND || e->op == TK_OPC_OR)) {
        stream_find(E, e->args[0], u);
        return;
    }
    if (e->kind == TK_E_INDEX && e->nargs > 0) {
        const tk_opdecl *d = E->op->decl;
        const char *t = d->loop_vars[d->nloop - 1];
        tk_dtype dt = tk_variant_dtype(E->op, E->variant, e->ref);
        int size = (int)tk_dtype_size(dt), ok = dt == TK_F16 || dt == TK_BF16 || dt == TK_F32 || dt == TK_F64;
        int bytes = E->tune_ldg ? E->tune_ldg : 16, W = bytes / size;
        ok = ok && W >= 2;
        int64_t b;
        const tk_expr *last = e->args[e->nargs - 1];
        for (int i = 0; ok && i < e->nargs - 1; i++) ok = !expr_uses(e->args[i], u) && stream_names_ok(E, e->args[i], u, 0);
        ok = ok && !expr_uses(last, t) && stream_names_ok(E, last, u, 1) && lane_coef(last, u, &b) && b == 1;
        ok = ok && E->lanes % W == 0 && (E->strm_w == 0 || E->strm_w == W);
        for (int i = 0; ok && i < E->nwin; i++) ok = E->win[i] != e && !expr_equal(E->win[i], e);
        if (ok) {
            int gi = group_invariant(E, e);
            for (int c = 0; c < (gi ? 1 : E->ngroup); c++) {
                int dup = 0;
                for (int i = 0; i < E->nstrm; i++) dup |= expr_equal(E->strm[i], e) && E->strm_copy[i] == (gi ? -1 : c);
                if (dup || E->nstrm == 8) continue;
                E->strm_copy[E->nstrm] = gi ? -1 : c;
                E->strm[E->nstrm++] = e;
                E->strm_w = W;
            }
            return;
        }
    }
    for (int i = 0; i < e->nargs; i++) stream_find(E, e->args[i], u);
}

/* The address of stream i's element at v_<u>, as text (int: as a tk_u64). */
static void stream_addr(emitter *E, int i, int as_int) {
    const tk_expr *e = E->strm[i];
    set_copy(E, E->strm_copy[i] < 0 ? 0 : E->strm_copy[i]);
    tk_buf_printf(E->b, "%s&t_%s[", as_int ? "(tk_u64)" : "", param(E, e->ref)->name);
    tensor_offset(E, e);
    tk_buf_puts(E->b, "]");
}

/* The type of one load of a stream: ldg bytes (tk_kernel.h; uint4, uint2, unsigned on the GPU). */
static const char *stream_vtype(const emitter *E) {
    int bytes = E->tune_ldg ? E->tune_ldg : 16;
    return bytes == 16 ? "tk_v16" : bytes == 8 ? "tk_v8" : "tk_u32";
}

/* At a round's step tk_p divisible by W: the next W elements of every
 * stream, in one load each. */
static void stream_load(emitter *E) {
    int W = E->strm_w;
    const char *vt = stream_vtype(E);
    line(E, "if (tk_p %% %d == 0) {", W);
    E->indent++;
    for (int i = 0; i < E->nstrm; i++) {
        const tk_expr *e = E->strm[i];
        tk_dtype dt = tk_variant_dtype(E->op, E->variant, e->ref);
        line(E, "union { %s v; %s e[%d]; } tk_q%d;", vt, k_ctype[dt], W, i);
        begin_line(E);
        tk_buf_printf(E->b, "tk_q%d.v = __ldg((const %s *)", i, vt);
        stream_addr(E, i, 0);
        tk_buf_puts(E->b, ");\n");
        line(E, "#pragma unroll");
        line(E, "for (int tk_m = 0; tk_m < %d; ++tk_m) tk_sv%d[tk_p + tk_m] = %stk_q%d.e[tk_m]%s;", W, i,
             k_to_value[dt], i, k_to_value_end[dt]);
    }
    E->indent--;
    line(E, "}");
    set_copy(E, 0);
}

/* One round of V steps, unrolled (with the streams' loads when strm_on). */
static void win_round(emitter *E, const tk_stmt *s, const char *hi) {
    int V = E->lanes;
    line(E, "#pragma unroll");
    line(E, "for (int tk_p = 0; tk_p < %d; ++tk_p) {", V);
    E->indent++;
    line(E, "const tk_i64 v_%s = tk_u0 + tk_p;", s->name);
    if (E->strm_on) stream_load(E);
    win_step(E, s, hi, 1);
    E->indent--;
    line(E, "}");
}

static int gpu_window_range(emitter *E, const tk_stmt *s, const char *lo, const char *hi) {
    int V = E->lanes;
    E->nwin = 0;
    for (int i = 0; i < s->nbody; i++)
        if (s->body[i]->kind == TK_S_ASSIGN) win_find(E, s->body[i]->value, s->name);
    if (E->nwin == 0) return 0;
    E->nstrm = E->strm_w = 0;
    for (int i = 0; E->unit_copy && i < s->nbody; i++)
        if (s->body[i]->kind == TK_S_ASSIGN) stream_find(E, s->body[i]->value, s->name);
    const char *ct = k_vctype[E->ftype];
    line(E, "if (%s < %s) {", lo, hi);
    E->indent++;
    for (int i = 0; i < E->nwin; i++) line(E, "%s tk_w%d[%d];", ct, i, V);
    line(E, "{");
    E->indent++;
    line(E, "const tk_i64 v_%s = %s;", s->name, lo);
    lane_open(E, 0);
    set_copy(E, 0);
    win_load(E, -1);
    lane_close(E);
    E->indent--;
    line(E, "}");
    /* Full rounds of V steps, unrolled: the window's registers are renamed
     * by the step (slot (j -/+ tk_p) mod V), so no step moves them, and the
     * loads of a round take constant offsets from one address. */
    line(E, "tk_i64 tk_u0 = %s;", lo);
    if (E->nstrm) {   /* streams: single steps until their addresses are 16-byte aligned, then 16-byte loads */
        line(E, "int tk_pk = -1;   /* single steps before the streams align */");
        line(E, "#pragma unroll");
        line(E, "for (int tk_k = 0; tk_k < %d; ++tk_k) {", E->strm_w);
        E->indent++;
        line(E, "const tk_i64 v_%s = tk_u0 + tk_k;", s->name);
        begin_line(E);
        tk_buf_puts(E->b, "if (tk_pk < 0 && ((");
        for (int i = 0; i < E->nstrm; i++) {
            if (i) tk_buf_puts(E->b, " | ");
            stream_addr(E, i, 1);
        }
        set_copy(E, 0);
        tk_buf_printf(E->b, ") & %d) == 0) tk_pk = tk_k;\n", (E->tune_ldg ? E->tune_ldg : 16) - 1);
        E->indent--;
        line(E, "}");
        line(E, "if (tk_pk >= 0 && tk_u0 + tk_pk + %d <= %s) {", V, hi);
        E->indent++;
        line(E, "for (tk_i64 v_%s = tk_u0; v_%s < tk_u0 + tk_pk; ++v_%s) {", s->name, s->name, s->name);
        E->indent++;
        win_step(E, s, hi, 0);
        E->indent--;
        line(E, "}");
        line(E, "tk_u0 += tk_pk;");
        line(E, "for (; tk_u0 + %d <= %s; tk_u0 += %d) {", V, hi, V);
        E->indent++;
        for (int i = 0; i < E->nstrm; i++)
            line(E, "%s tk_sv%d[%d];", tk_variant_dtype(E->op, E->variant, E->strm[i]->ref) == TK_F64 ? "double" : "float",
                 i, V);
        E->strm_on = 1;
        win_round(E, s, hi);
        E->strm_on = 0;
        E->indent--;
        line(E, "}");
        E->indent--;
        line(E, "}");
    }
    line(E, "for (; tk_u0 + %d <= %s; tk_u0 += %d) {", V, hi, V);
    E->indent++;
    win_round(E, s, hi);
    E->indent--;
    line(E, "}");
    /* the last steps (fewer than V), from slot = lane again: shifted */
    line(E, "for (tk_i64 v_%s = tk_u0; v_%s < %s; ++v_%s) {", s->name, s->name, hi, s->name);
    E->indent++;
    win_step(E, s, hi, 0);
    E->indent--;
    line(E, "}");
    E->indent--;
    line(E, "}");
    E->nwin = 0;
    E->nstrm = E->strm_w = 0;
    return 1;
}

/* The innermost stride of p as the literal 1 (shadowing the variable). */
static void unit_stride_decl(emitter *E, const tk_param *p, int slot, int arg) {
    (void)slot;
    (void)arg;
    line(E, "const tk_i64 s_%s_%d = 1;", p->name, tk_explicit_dims(p) - 1);
}

/* The size of digit k (< nloop): chunks in a row, then the loop variables
 * from the second innermost out. */
static void chunk_digit_size(const emitter *E, int k, char *nb, size_t n) {
    const tk_opdecl *d = E->op->decl;
    if (k == 0) snprintf(nb, n, "tk_ntile");
    else snprintf(nb, n, "n_%s", d->loop_vars[d->nloop - 1 - k]);
}

/* GPU chunks: the grid-stride loop's position as digits, tk_x0 the chunk
 * in its row, tk_x<k> the k-th loop variable in decompose's order,
 * tk_x<nloop> the rest (the '...' dims, decomposed per chunk); and the
 * step's digits tk_s<k>. Each thread divides twice a dim once, then adds
 * digits with carries (chunk_advance) instead of dividing every chunk: the
 * divisions were a third of brick_pad's instructions. */
static void chunk_counters(emitter *E) {
    const tk_opdecl *d = E->op->decl;
    for (int k = 0; k <= d->nloop; k++) line(E, "tk_i64 tk_x%d = 0, tk_s%d = 0;", k, k);
    line(E, "if (end > 0) {   /* every size is positive */");
    E->indent++;
    line(E, "tk_i64 tk_a = (tk_i64)blockIdx.x * blockDim.x + threadIdx.x, tk_b = step, tk_qa, tk_qb;");
    for (int k = 0; k < d->nloop; k++) {
        char nb[80];
        chunk_digit_size(E, k, nb, sizeof nb);
        line(E, "tk_qa = tk_udiv(tk_a, %s), tk_qb = tk_udiv(tk_b, %s);", nb, nb);
        line(E, "tk_x%d = tk_a - tk_qa * %s, tk_s%d = tk_b - tk_qb * %s;", k, nb, k, nb);
        line(E, "tk_a = tk_qa, tk_b = tk_qb;");
    }
    line(E, "tk_x%d = tk_a, tk_s%d = tk_b;", d->nloop, d->nloop);
    E->indent--;
    line(E, "}");
}

/* The next grid-stride position: digit k gains tk_s<k> and the carry; a
 * digit stays under its size, so one subtraction normalises it. */
static void chunk_advance(emitter *E) {
    const tk_opdecl *d = E->op->decl;
    line(E, "{");
    E->indent++;
    line(E, "int tk_cy = 0;");
    for (int k = 0; k < d->nloop; k++) {
        char nb[80];
        chunk_digit_size(E, k, nb, sizeof nb);
        line(E, "tk_x%d += tk_s%d + tk_cy;", k, k);
        line(E, "tk_cy = tk_x%d >= %s;", k, nb);
        line(E, "if (tk_cy) tk_x%d -= %s;", k, nb);
    }
    line(E, "tk_x%d += tk_s%d + tk_cy;", d->nloop, d->nloop);
    E->indent--;
    line(E, "}");
}

/* Opens a grid-stride loop over tiles of V consecutive elements of the
 * innermost dim times G rows of the group dim (G = 1: none), ceil(n / V)
 * tiles a row, and decomposes the tile's index into its first element's
 * loop variables. */
static void gpu_tiles_head(emitter *E, int V, int G) {
    const tk_opdecl *d = E->op->decl;
    const char *A = E->tg->args;
    const char *v = d->loop_vars[d->nloop - 1], *g = d->loop_vars[E->gdim];
    line(E, "const tk_i64 tk_ntile = (n_%s + %d) / %d;", v, V - 1, V);
    if (G > 1) line(E, "const tk_i64 tk_ngroup = (n_%s + %d) / %d;", g, G - 1, G);
    /* rows: every dim but the innermost, G rows of the group dim as one */
    begin_line(E);
    tk_buf_printf(E->b, "const tk_i64 tk_nrow = n_%s == 0", v);
    if (G > 1) tk_buf_printf(E->b, " || n_%s == 0", g);
    tk_buf_printf(E->b, " ? 0 : %snumel / n_%s", A, v);
    if (G > 1) tk_buf_printf(E->b, " / n_%s * tk_ngroup", g);
    tk_buf_puts(E->b, ";\n");
    if (!E->lanes) {
        line(E, "const tk_i64 end = tk_nrow * tk_ntile;");
    } else {
        /* lane tiles: consecutive threads take TK_ROWS rows (all dims but the
         * innermost, groups counted once) at the same tile position, then
         * the next position. A row's tiles differ in work when lane ranges
         * do (rwkv: u < t + 1, a tile's work grows along the row), and a
         * warp runs as long as its longest thread: 32 tiles of one row kept
         * rwkv_forward's warps 57% busy, 4 tiles of 8 rows 94%
         * (bench/gpu_warp_model.py). On an H200, 8 tiles of 4 rows ran
         * fastest (ci/gpu_tune.py: rwkv_forward f32 0.687 ms; 8 rows 0.784,
         * 2 rows 0.80-0.87, 16 and 32 rows 1.2-2.2): the rows are batch
         * groups of one channel, so a warp's w loads touch 8 positions of one
         * row and its k loads 4 rows. */
        const int R = E->tune_warp_rows ? E->tune_warp_rows : TK_ROWS;
        const char *npos = "tk_ntile";
        if (E->mirror) {   /* positions p and n - 1 - p a thread (mirror_plan) */
            line(E, "const tk_i64 tk_npair = (tk_ntile + 1) / 2;");
            npos = "tk_npair";
        }
        if (E->split > 1)   /* S threads a tile (split_plan) */
            line(E, "const tk_i64 end = (tk_nrow + %d) / %d * %d * %s * %d;", R - 1, R, R, npos, E->split);
        else
            line(E, "const tk_i64 end = (tk_nrow + %d) / %d * %d * %s;", R - 1, R, R, npos);
    }
    line(E, "const tk_i64 step = (tk_i64)gridDim.x * blockDim.x;");
    if (E->stepped) chunk_counters(E);
    if (E->lanes && E->mirror) {   /* the tiles at p, then their mirror images (a loop around the
                                    * grid-stride loop: one inside it took 40 more registers) */
        line(E, "#pragma unroll 1");
        line(E, "for (int tk_h = 0; tk_h < 2; ++tk_h) {");
        E->indent++;
    }
    line(E, "for (tk_i64 lin = (tk_i64)blockIdx.x * blockDim.x + threadIdx.x; lin < end; lin += step) {");
    E->indent++;
    if (E->lanes) {
        const int R = E->tune_warp_rows ? E->tune_warp_rows : TK_ROWS;
        const char *L = "lin";
        if (E->split > 1) {   /* the tile's threads are S consecutive ones */
            line(E, "const tk_i64 tk_l = lin / %d;", E->split);
            line(E, "const int tk_sub = (int)(lin %% %d);", E->split);
            L = "tk_l";
        }
        /* R rows at one position (of npos a row), then the next position */
        const char *npos = E->mirror ? "tk_npair" : "tk_ntile";
        line(E, "const tk_i64 tk_row = %s / %d / %s * %d + %s %% %d;", L, R, npos, R, L, R);
        line(E, "if (tk_row >= tk_nrow) continue;");
        if (E->mirror) {
            line(E, "const tk_i64 tk_pp = %s / %d %% tk_npair;", L, R);
            line(E, "const tk_i64 tk_pos = tk_h ? tk_ntile - 1 - tk_pp : tk_pp;");
            line(E, "if (tk_h && tk_pos == tk_pp) continue;   /* the middle tile of an odd row */");
            line(E, "const tk_i64 tk_lin = tk_row * tk_ntile + tk_pos;");
        } else {
            line(E, "const tk_i64 tk_lin = tk_row * tk_ntile + %s / %d %% tk_ntile;", L, R);
        }
    }
    E->gpu_tiles = 1;
    decompose(E, 0);
    E->gpu_tiles = 0;
}

/* CUDA with lane tiles (thread coarsening): each iteration of the
 * grid-stride loop is one tile, V consecutive elements of the innermost dim
 * times G rows of the group dim, computed by one thread in registers (the
 * lane loops are unrolled). The tiles cover each row with ceil(n / V) of
 * them; a tile that crosses the end of its row or group runs element by
 * element instead, so remainders are exact. */
static void gpu_tile_loop(emitter *E) {
    const tk_opdecl *d = E->op->decl;
    const char *v = d->loop_vars[d->nloop - 1], *g = d->loop_vars[E->gdim];
    int V = E->lanes, G = E->ngroup;
    gpu_tiles_head(E, V, G);
    begin_line(E);
    tk_buf_printf(E->b, "if (v_%s + %d <= n_%s", v, V, v);
    if (G > 1) tk_buf_printf(E->b, " && v_%s + %d <= n_%s", g, G, g);
    tk_buf_puts(E->b, ") {\n");
    E->indent++;
    tile(E);
    E->indent--;
    line(E, "} else {");
    E->indent++;
    /* the partial tile: its elements one by one, each with its own loop variables */
    if (G > 1) {
        line(E, "const tk_i64 tk_g0 = v_%s;", g);
        line(E, "for (tk_i64 tk_g = tk_g0; tk_g < tk_mini(tk_g0 + %d, n_%s); ++tk_g) {", G, g);
        E->indent++;
        line(E, "const tk_i64 v_%s = tk_g;", g);
    }
    line(E, "const tk_i64 tk_t0 = v_%s;", v);
    if (E->split > 1)   /* the tile's S threads deal out its elements */
        line(E, "for (tk_i64 tk_t = tk_t0 + tk_sub; tk_t < tk_mini(tk_t0 + %d, n_%s); tk_t += %d) {", V, v, E->split);
    else
        line(E, "for (tk_i64 tk_t = tk_t0; tk_t < tk_mini(tk_t0 + %d, n_%s); ++tk_t) {", V, v);
    E->indent++;
    line(E, "const tk_i64 v_%s = tk_t;", v);
    int lanes = E->lanes;
    E->lanes = 0;      /* plain statements: locals are scalars, no lane offsets */
    block(E, d->body, d->nbody);
    E->lanes = lanes;
    E->indent--;
    line(E, "}");
    if (G > 1) {
        E->indent--;
        line(E, "}");
    }
    E->indent--;
    line(E, "}");
    E->indent--;
    line(E, "}");
    if (E->mirror) {   /* the loop over the tiles and their mirror images */
        E->indent--;
        line(E, "}");
    }
}

/* ---- GPU chunks -----------------------------------------------------------------
 * For loop-free bodies (element-wise maps such as brick_pad): each iteration
 * of the grid-stride loop computes a chunk of K consecutive elements of the
 * innermost dim (32 bytes of the widest output, 16 for 1-byte outputs; at most 32), so
 * the per-row work (index decomposition, statements that do not depend on
 * the innermost variable) runs once per chunk, and every floor division or
 * modulo whose numerator grows by one per element is divided once per chunk
 * and then stepped (the CPU's segments, one element at a time). An output
 * that the body stores exactly once, unconditionally, is gathered in
 * registers and written with 16-byte stores when its row is contiguous and
 * aligned. A chunk that crosses the end of its row runs element by element.
 * Bodies with loops keep one element per thread: they have few, heavy
 * elements and need the threads. */

/* Counts the stores of each output: at the top level, and nested. */
static void count_stores(tk_stmt **body, int n, int top, int *ntop, int *nnested) {
    for (int i = 0; i < n; i++) {
        const tk_stmt *s = body[i];
        if (s->kind == TK_S_STORE) (top ? ntop : nnested)[s->ref]++;
        count_stores(s->body, s->nbody, 0, ntop, nnested);
        count_stores(s->orelse, s->norelse, 0, ntop, nnested);
    }
}

/* Decides the chunk: K, the stepped divisions, the gathered stores;
 * returns 0 when the body does not qualify. */
static int chunk_plan(emitter *E) {
    const tk_op *op = E->op;
    const tk_opdecl *d = op->decl;
    E->chunk = 0;
    memset(E->vst, 0, sizeof E->vst);
    if (E->plain || d->nloop == 0 || has_for(d->body, d->nbody) || d->noutputs > TK_MAX_TENSORS) return 0;
    size_t widest = 1;
    for (int i = 0; i < d->noutputs; i++) {
        size_t sz = tk_dtype_size(tk_variant_out_dtype(op, E->variant, i));
        if (sz > widest) widest = sz;
    }
    /* 32 bytes (16 for 1-byte outputs) unless tuned; at most 32 elements */
    const int cbytes = E->tune_chunk ? E->tune_chunk : widest == 1 ? 16 : 32;
    E->chunk = cbytes / (int)widest > 32 ? 32 : cbytes / (int)widest;
    plan_run(E);
    if (!E->segmented) E->nmemo = 0;   /* a numerator that does not grow by one: divided per element */
    E->segmented = 0;
    const char *t = d->loop_vars[d->nloop - 1];
    int ntop[TK_MAX_TENSORS] = {0}, nnested[TK_MAX_TENSORS] = {0};
    count_stores(d->body, d->nbody, 1, ntop, nnested);
    for (int i = 0; i < d->nbody; i++) {
        const tk_stmt *s = d->body[i];
        if (s->kind != TK_S_STORE || ntop[s->ref] != 1 || nnested[s->ref] != 0 || s->nindex == 0) continue;
        int ok = strcmp(s->index[s->nindex - 1]->name, t) == 0;
        for (int k = 0; k < s->nindex - 1; k++) ok = ok && strcmp(s->index[k]->name, t) != 0;
        size_t bytes = (size_t)E->chunk * tk_dtype_size(tk_variant_out_dtype(op, E->variant, s->ref));
        if (ok && bytes % 16 == 0) E->vst[s->ref] = s;
    }
    return 1;
}

/* ---- remainders spelled out (GPU chunks) -------------------------------------
 * A spec that divides by hand writes the remainder of a memo site out:
 * brick_pad's x2 = x1 - u*TW - v*stagger is (x1 - v*stagger) - u*TW with
 * u = (x1 - v*stagger) // TW, i.e. tk_r0, which the chunk steps anyway.
 * An int expression equal to N - q*D as a polynomial (N // D a memo site,
 * q its quotient) is emitted as tk_r<i>: the identity holds in 64-bit
 * wrapping arithmetic too, and the quotient's multiply and the subtractions
 * go. Polynomials: up to 16 terms of up to 4 factors; a factor is a loop
 * variable, a scalar, a dim, a hoisted local, a memo quotient, or any other
 * int node by identity; other top-level single-assignment locals are
 * expanded (as the memo's numerator is), and an expression reading a local
 * assigned more than once is never matched. */
typedef struct { int kind; const void *p; } poly_atom;   /* kind 0 name, 1 memo quotient, 2 node */
typedef struct { int64_t c; int n; poly_atom f[4]; } poly_term;
typedef struct { int n; poly_term t[16]; } poly;

static int atom_cmp(const poly_atom *a, const poly_atom *b) {
    if (a->kind != b->kind) return a->kind < b->kind ? -1 : 1;
    if (a->kind == 0) return strcmp((const char *)a->p, (const char *)b->p);
    return a->p == b->p ? 0 : (uintptr_t)a->p < (uintptr_t)b->p ? -1 : 1;
}

static int term_same(const poly_term *a, const poly_term *b) {
    if (a->n != b->n) return 0;
    for (int i = 0; i < a->n; i++)
        if (atom_cmp(&a->f[i], &b->f[i]) != 0) return 0;
    return 1;
}

/* Adds c * t to p; 0 when p is full. */
static int poly_add_term(poly *p, const poly_term *t, int64_t c) {
    int64_t k = (int64_t)((uint64_t)t->c * (uint64_t)c);
    for (int i = 0; i < p->n; i++)
        if (term_same(&p->t[i], t)) {
            p->t[i].c = (int64_t)((uint64_t)p->t[i].c + (uint64_t)k);
            if (p->t[i].c == 0) p->t[i] = p->t[--p->n];
            return 1;
        }
    if (k == 0) return 1;
    if (p->n == 16) return 0;
    p->t[p->n] = *t;
    p->t[p->n++].c = k;
    return 1;
}

static int poly_add(poly *p, const poly *q, int64_t c) {
    for (int i = 0; i < q->n; i++)
        if (!poly_add_term(p, &q->t[i], c)) return 0;
    return 1;
}

static int poly_mul(poly *out, const poly *a, const poly *b) {
    out->n = 0;
    for (int i = 0; i < a->n; i++)
        for (int j = 0; j < b->n; j++) {
            poly_term t;
            if (a->t[i].n + b->t[j].n > 4) return 0;
            t.c = (int64_t)((uint64_t)a->t[i].c * (uint64_t)b->t[j].c);
            t.n = 0;
            for (int k = 0; k < a->t[i].n; k++) t.f[t.n++] = a->t[i].f[k];
            for (int k = 0; k < b->t[j].n; k++) {   /* insertion keeps the factors sorted */
                int at = t.n;
                while (at > 0 && atom_cmp(&t.f[at - 1], &b->t[j].f[k]) > 0) at--;
                memmove(&t.f[at + 1], &t.f[at], (size_t)(t.n - at) * sizeof t.f[0]);
                t.f[at] = b->t[j].f[k];
                t.n++;
            }
            if (!poly_add_term(out, &t, 1)) return 0;
        }
    return 1;
}

static void poly_atom_of(poly *p, int kind, const void *ptr) {
    p->n = 1;
    p->t[0].c = 1;
    p->t[0].n = 1;
    p->t[0].f[0].kind = kind;
    p->t[0].f[0].p = ptr;
}

/* The polynomial of int expression e; 0 when it does not fit. */
static int poly_of(const emitter *E, const tk_expr *e, poly *p, int depth) {
    poly a, b;
    p->n = 0;
    if (e->vtype != TK_V_INT || depth > 32) return 0;
    for (int i = 0; i < E->nmemo; i++)
        if (E->memo[i] == e) {
            if (e->op == TK_OPC_FLOORDIV) {
                poly_atom_of(p, 1, e);
                return 1;
            }
            /* a memo'd modulo: N - q*D (its own quotient) */
            if (!poly_of(E, e->args[0], p, depth + 1) || !poly_of(E, e->args[1], &a, depth + 1)) return 0;
            poly_atom_of(&b, 1, e);
            poly q;
            return poly_mul(&q, &b, &a) && poly_add(p, &q, -1);
        }
    switch (e->kind) {
    case TK_E_INT:
        if (e->ival == 0) return 1;
        p->n = 1;
        p->t[0].c = e->ival;
        p->t[0].n = 0;
        return 1;
    case TK_E_NAME: {
        int idx;
        const tk_opdecl *d = E->op->decl;
        int is_var = 0;
        for (int i = 0; i < d->nloop; i++) is_var |= strcmp(d->loop_vars[i], e->name) == 0;
        if (!is_var && tk_resolve_header(E->op, e->name, &idx) == TK_SYM_NONE) {
            /* a local: a hoisted one is one value for the chunk; another
             * single-assignment one is its definition; one assigned more
             * than once may differ from where a definition read it */
            if (!E->def[e->ref] || E->op->locals[e->ref].type != TK_V_INT) return 0;
            if (!E->hoisted_local[e->ref]) return poly_of(E, E->def[e->ref]->value, p, depth + 1);
        }
        poly_atom_of(p, 0, e->name);
        return 1;
    }
    case TK_E_UNARY:
        if (e->op != TK_OPC_NEG && e->op != TK_OPC_POS) break;
        return poly_of(E, e->args[0], &a, depth + 1) && poly_add(p, &a, e->op == TK_OPC_NEG ? -1 : 1);
    case TK_E_BINARY:
        if (e->op != TK_OPC_ADD && e->op != TK_OPC_SUB && e->op != TK_OPC_MUL) break;
        if (!poly_of(E, e->args[0], &a, depth + 1) || !poly_of(E, e->args[1], &b, depth + 1)) return 0;
        if (e->op == TK_OPC_MUL) return poly_mul(p, &a, &b);
        return poly_add(p, &a, 1) && poly_add(p, &b, e->op == TK_OPC_SUB ? -1 : 1);
    default:
        break;
    }
    poly_atom_of(p, 2, e);
    return 1;
}

/* The memo site whose remainder e equals, or -1. */
static int chunk_remainder(const emitter *E, const tk_expr *e) {
    if (!E->in_chunk || e->vtype != TK_V_INT || e->kind != TK_E_BINARY ||
        (e->op != TK_OPC_ADD && e->op != TK_OPC_SUB))
        return -1;
    poly x, n, dd, q, prod;
    if (!poly_of(E, e, &x, 0)) return -1;
    for (int i = 0; i < E->nmemo; i++) {
        if (E->memo[i]->op != TK_OPC_FLOORDIV) continue;
        if (!poly_of(E, E->memo[i]->args[0], &n, 0) || !poly_of(E, E->memo[i]->args[1], &dd, 0)) continue;
        poly_atom_of(&q, 1, E->memo[i]);
        if (!poly_mul(&prod, &q, &dd) || !poly_add(&n, &prod, -1) || !poly_add(&n, &x, -1)) continue;
        if (n.n == 0) return i;
    }
    return -1;
}

/* Writes gathered output i of a full chunk (v_ is its first element) in
 * 16-byte stores: this copy of the loop runs only on aligned rows. */
static void chunk_store(emitter *E, int i) {
    const char *ct = k_ctype[tk_variant_out_dtype(E->op, E->variant, i)];
    size_t bytes = (size_t)E->chunk * tk_dtype_size(tk_variant_out_dtype(E->op, E->variant, i));
    line(E, "{");
    E->indent++;
    begin_line(E);
    tk_buf_printf(E->b, "%s *tk_p = &", ct);
    store_target(E, E->vst[i]);
    tk_buf_puts(E->b, ";\n");
    for (int q = 0; q < (int)(bytes / 16); q++) line(E, "__stcs((tk_v16 *)tk_p + %d, tk_o%d.v[%d]);", q, i, q);
    E->indent--;
    line(E, "}");
}

/* CUDA with chunks: the grid-stride loop walks chunks, ceil(n / K) a row. */
static void gpu_chunk_loop(emitter *E) {
    const tk_opdecl *d = E->op->decl;
    const char *v = d->loop_vars[d->nloop - 1];
    int K = E->chunk;
    E->stepped = 1;
    gpu_tiles_head(E, K, 1);
    E->stepped = 0;
    run_block(E, 1);
    for (int i = 0; i < E->nmemo; i++) {
        begin_line(E);
        tk_buf_printf(E->b, "const tk_i64 tk_d%d = ", i);
        expr(E, E->memo[i]->args[1], TK_V_INT);
        tk_buf_puts(E->b, ";\n");
    }
    begin_line(E);
    tk_buf_printf(E->b, "if (v_%s + %d <= n_%s", v, K, v);
    for (int i = 0; i < E->nmemo; i++) tk_buf_printf(E->b, " && tk_d%d > 0 && tk_d%d <= 0x7fffffff", i, i);
    tk_buf_puts(E->b, ") {\n");
    E->indent++;
    for (int i = 0; i < E->nmemo; i++) {
        E->inline_locals = 1;
        begin_line(E);
        tk_buf_printf(E->b, "const tk_i64 tk_n%d = ", i);
        expr(E, E->memo[i]->args[0], TK_V_INT);
        tk_buf_puts(E->b, ";\n");
        E->inline_locals = 0;
        /* the remainder steps in 32 bits (the divisor fits) */
        int ks = kdiv_slot(E, E->memo[i]->args[1]);
        if (ks >= 0) line(E, "tk_i64 tk_q%d = tk_floordiv_k(tk_n%d, tk_d%d, %sidiv[%d]);", i, i, i, E->tg->args, ks);
        else line(E, "tk_i64 tk_q%d = tk_floordiv(tk_n%d, tk_d%d);", i, i, i);
        line(E, "tk_u32 tk_r%d = (tk_u32)(tk_n%d - tk_q%d * tk_d%d);", i, i, i, i);
        line(E, "const tk_u32 tk_e%d = (tk_u32)tk_d%d;", i, i);
    }
    for (int i = 0; i < d->noutputs; i++) {
        if (!E->vst[i]) continue;
        size_t bytes = (size_t)K * tk_dtype_size(tk_variant_out_dtype(E->op, E->variant, i));
        line(E, "union { tk_v16 v[%d]; %s e[%d]; } tk_o%d;", (int)(bytes / 16),
             k_ctype[tk_variant_out_dtype(E->op, E->variant, i)], K, i);
    }
    line(E, "const tk_i64 tk_c0 = v_%s;", v);
    line(E, "#pragma unroll");
    line(E, "for (int tk_k = 0; tk_k < %d; ++tk_k) {", K);
    E->indent++;
    line(E, "const tk_i64 v_%s = tk_c0 + tk_k;", v);
    E->in_chunk = 1;
    run_block(E, 0);
    E->in_chunk = 0;
    for (int i = 0; i < E->nmemo; i++) line(E, "if (++tk_r%d == tk_e%d) tk_r%d = 0, ++tk_q%d;", i, i, i, i);
    E->indent--;
    line(E, "}");
    for (int i = 0; i < d->noutputs; i++)
        if (E->vst[i]) chunk_store(E, i);
    E->indent--;
    line(E, "} else {");
    E->indent++;
    /* a partial chunk (or a divisor that is not positive): element by element */
    line(E, "const tk_i64 tk_t0 = v_%s;", v);
    line(E, "for (tk_i64 tk_t = tk_t0; tk_t < tk_mini(tk_t0 + %d, n_%s); ++tk_t) {", K, v);
    E->indent++;
    line(E, "const tk_i64 v_%s = tk_t;", v);
    run_block(E, 0);
    E->indent--;
    line(E, "}");
    E->indent--;
    line(E, "}");
    chunk_advance(E);
    E->indent--;
    line(E, "}");
}

/* A grid-stride loop (fn) with a copy for unit innermost strides, where
 * the compiler sees the literal 1. GPU chunks gather stores only in that
 * copy, and only where every row of the gathered outputs starts on 16
 * bytes (tk_al<i>; then so does every chunk): the other copy stores element
 * by element. */
/* each_strided: counts the tensors in E->nconds */
static void count_strided(emitter *E, const tk_param *p, int slot, int arg) {
    (void)p;
    (void)slot;
    (void)arg;
    E->nconds++;
}

static void gpu_unit_stride_copy(emitter *E, void (*fn)(emitter *)) {
    char extra[512] = "";
    const tk_stmt *vst[TK_MAX_TENSORS];
    memcpy(vst, E->vst, sizeof vst);
    for (int i = 0; i < E->op->decl->noutputs; i++) {
        size_t n = strlen(extra);
        if (!vst[i]) continue;
        /* (inline: passing a.t[i] to a function costs the loads' read-only path) */
        int slot = E->op->out_slot[i];
        const char *A = E->tg->args;
        line(E, "int tk_al%d = ((tk_u64)%st[%d].data & 15) == 0;", i, A, slot);
        line(E, "for (tk_i64 tk_i = 0; tk_i < %st[%d].ndim - 1; ++tk_i)", A, slot);
        line(E, "    if (%st[%d].size[tk_i] != 1 && ((%st[%d].stride[tk_i] * %d) & 15) != 0) tk_al%d = 0;", A, slot, A,
             slot, (int)tk_dtype_size(tk_variant_out_dtype(E->op, E->variant, i)), i);
        snprintf(extra + n, sizeof extra - n, "%stk_al%d", n ? " && " : "", i);
    }
    memset(E->vst, 0, sizeof E->vst);
    if (!unit_stride_test(E, extra)) {
        fn(E);
        return;
    }
    tk_buf_puts(E->b, " {\n");
    E->indent++;
    each_strided(E, unit_stride_decl, 0);
    memcpy(E->vst, vst, sizeof vst);
    E->unit_copy = 1;
    fn(E);
    E->unit_copy = 0;
    memset(E->vst, 0, sizeof E->vst);
    E->indent--;
    /* chunks: a third copy for unit-stride outputs and strided inputs (the
     * seed's brick_pad tile is a rot90 view): the stores stay 16-byte
     * vectors, only the gather's addresses take the strides */
    E->nconds = 0;
    each_strided(E, count_strided, 0);
    const int nall = E->nconds;
    E->nconds = 0;
    E->outputs_only = 1;
    each_strided(E, count_strided, 0);
    E->outputs_only = 0;
    const int nout = E->nconds;
    if (fn == gpu_chunk_loop && nout > 0 && nall > nout && extra[0]) {
        begin_line(E);
        tk_buf_puts(E->b, "} else if (");
        E->nconds = 0;
        E->outputs_only = 1;
        each_strided(E, stride_cond, 0);
        if (extra[0]) tk_buf_printf(E->b, " && %s", extra);
        tk_buf_puts(E->b, ") {\n");
        E->indent++;
        each_strided(E, unit_stride_decl, 0);
        E->outputs_only = 0;
        memcpy(E->vst, vst, sizeof vst);
        fn(E);
        memset(E->vst, 0, sizeof E->vst);
        E->indent--;
    }
    line(E, "} else {");
    E->indent++;
    fn(E);
    E->indent--;
    line(E, "}");
}

static void kernel(emitter *E) {
    const tk_op *op = E->op;
    tk_buf_printf(E->b, "\n/* %s: ", op->decl->name);
    for (int i = 0; i < op->decl->nparams; i++)
        if (param(E, i)->kind == TK_P_TENSOR)
            tk_buf_printf(E->b, "%s %s, ", param(E, i)->name, tk_dtype_name(tk_variant_dtype(op, E->variant, i)));
    tk_buf_printf(E->b, "computing in %s */\n", E->ftype == TK_V_F64 ? "float64" : "float32");
    if (!E->tg->gpu) {
        cpu_kernel(E);
        return;
    }
    /* (no __launch_bounds__(256, 2): capping a tile kernel at 128 registers
     * spilled rwkv_backward_k, 168 bytes on sm_90 - bench/gpu_static.py) */
    int tiles = lane_plan(E);
    if (tiles) split_plan(E), mirror_plan(E);
    tk_buf_puts(E->b, E->tg->head);
    if (E->tune_regs)   /* at most that many registers a thread (CUDA 12.4+; no __launch_bounds__ here) */
        tk_buf_printf(E->b, "__maxnreg__(%d) ", E->tune_regs);
    tk_buf_printf(E->b, "%s%s {\n", op->kernel_names[E->variant], E->tg->params);
    E->indent = 1;
    prologue(E);
    if (tiles) {
        /* the lanes' addresses: one pointer plus constant offsets */
        gpu_unit_stride_copy(E, gpu_tile_loop);
    } else {
        E->lanes = 0;
        E->ngroup = 1;
        E->gdim = op->decl->nloop - 1;
        if (chunk_plan(E)) gpu_unit_stride_copy(E, gpu_chunk_loop);
        else gpu_loop(E);
    }
    E->indent = 0;
    tk_buf_puts(E->b, "}\n");
}

static void emitter_init(emitter *E, tk_buf *b, const tk_op *op, int variant, tk_target target, unsigned flags,
                         const gpu_tune *tune) {
    memset(E, 0, sizeof *E);
    E->b = b;
    E->op = op;
    E->tg = &k_targets[target];
    E->variant = variant;
    E->ftype = tk_variant_float_type(op, variant) == TK_F64 ? TK_V_F64 : TK_V_F32;
    E->copy = -1;
    E->lane_fix = -1;
    E->ncopies = 1;
    E->gdim = op->decl->nloop - 1;
    E->ngroup = E->nblocks = 1;
    E->plain = (flags & TK_EMIT_PLAIN) != 0;
    if (E->tg->gpu) {   /* TK_CUDA_TUNE, else the spec's schedule line, else the defaults */
        int v[TK_SCHED_KEYS];
        for (int k = 0; k < TK_SCHED_KEYS; k++) v[k] = tune && tune->v[k] ? tune->v[k] : op->decl->schedule[k];
        E->tune_lanes = v[TUNE_LANES];
        E->tune_rows = v[TUNE_ROWS];
        E->tune_warp_rows = v[TUNE_WARP_ROWS];
        E->tune_chunk = v[TUNE_CHUNK];
        E->tune_split = v[TUNE_SPLIT];
        E->tune_ldg = v[TUNE_LDG];
        E->tune_tiles = v[TUNE_TILES];
        E->tune_regs = v[TUNE_REGS];
    }
}

static tk_status emit_variants(tk_ctx *ctx, const tk_op *cop, int first, int last, tk_target target,
                               unsigned flags, char **out) {
    if (!ctx || !cop || !out || (unsigned)target > TK_TARGET_CUDA) return TK_ERR_INVALID;
    tk_op *op = (tk_op *)cop;    /* tk_check_body annotates the AST */
    gpu_tune tune;
    if (target == TK_TARGET_CUDA) {
        tk_status st = gpu_tune_parse(&tune, ctx->err, sizeof ctx->err);
        if (st != TK_OK) return st;
    }
    tk_buf b = {0};
    tk_buf_printf(&b, "/* Generated by tkc %s from %s: op %s. Do not edit. */\n", TK_VERSION, op->decl->file,
                  op->decl->name);
    tk_buf_puts(&b, "#include \"tk_kernel.h\"\n");
    if (target == TK_TARGET_CUDA && (tune.v[TUNE_LANES] || tune.v[TUNE_ROWS] || tune.v[TUNE_WARP_ROWS] ||
                                     tune.v[TUNE_CHUNK] || tune.v[TUNE_SPLIT] || tune.v[TUNE_LDG] ||
                                     tune.v[TUNE_TILES] || tune.v[TUNE_REGS]))
        tk_buf_printf(&b, "/* TK_CUDA_TUNE: lanes=%d rows=%d warp_rows=%d chunk=%d split=%d ldg=%d tiles=%d regs=%d "
                      "(0: default) */\n", tune.v[TUNE_LANES], tune.v[TUNE_ROWS], tune.v[TUNE_WARP_ROWS],
                      tune.v[TUNE_CHUNK], tune.v[TUNE_SPLIT], tune.v[TUNE_LDG], tune.v[TUNE_TILES], tune.v[TUNE_REGS]);
    for (int v = first; v < last; v++) {
        tk_status st = tk_check_body(op, v, ctx->err, sizeof ctx->err);
        if (st != TK_OK) {
            free(b.p);
            return st;
        }
        emitter E;
        emitter_init(&E, &b, op, v, target, flags, target == TK_TARGET_CUDA ? &tune : NULL);
        kernel(&E);
    }
    if (b.oom) {
        free(b.p);
        snprintf(ctx->err, sizeof ctx->err, "out of memory");
        return TK_ERR_NOMEM;
    }
    *out = b.p;
    return TK_OK;
}

tk_status tk_emit(tk_ctx *ctx, const tk_op *op, tk_target target, char **out) {
    return emit_variants(ctx, op, 0, op ? op->nvariants : 0, target, 0, out);
}

tk_status tk_emit_ex(tk_ctx *ctx, const tk_op *op, tk_target target, unsigned flags, char **out) {
    return emit_variants(ctx, op, 0, op ? op->nvariants : 0, target, flags, out);
}

tk_status tk_emit_variant(tk_ctx *ctx, const tk_op *op, int variant, tk_target target, char **out) {
    if (!op || variant < 0 || variant >= op->nvariants) return TK_ERR_INVALID;
    return emit_variants(ctx, op, variant, variant + 1, target, 0, out);
}

int tk_emit_cuda_per_thread(tk_ctx *ctx, const tk_op *cop, int variant) {
    if (!ctx || !cop || variant < 0 || variant >= cop->nvariants) return 0;
    tk_op *op = (tk_op *)cop;    /* tk_check_body annotates the AST */
    if (tk_check_body(op, variant, ctx->err, sizeof ctx->err) != TK_OK) return 0;
    gpu_tune tune;
    if (gpu_tune_parse(&tune, ctx->err, sizeof ctx->err) != TK_OK) return 0;
    tk_buf b = {0};
    emitter E;
    emitter_init(&E, &b, op, variant, TK_TARGET_CUDA, 0, &tune);
    int n = 1;      /* as kernel() decides */
    if (lane_plan(&E)) {
        n = E.lanes * E.ngroup;
        if (mirror_plan(&E)) n *= 2;                                  /* a tile and its mirror image */
        if (split_plan(&E)) n = n / E.split > 1 ? n / E.split : 1;   /* S threads a tile */
    } else {
        E.lanes = 0;
        E.ngroup = 1;
        E.gdim = op->decl->nloop - 1;
        if (chunk_plan(&E)) n = E.chunk;
    }
    free(b.p);
    return n;
}
