/* emit.h - internal to the emitters (emit*.c): the emitter state, shared
 * tables, and the functions one emitter file calls in another. Not part of
 * the public API (tk.h). */
#ifndef TK_EMIT_H
#define TK_EMIT_H

#include <stdint.h>

#include "core.h"
#include "plan.h"

typedef struct tk_target_desc {
    const char *head;       /* before the kernel name */
    const char *params;     /* the parameter list */
    const char *args;       /* how fields of tk_kargs are reached */
    const char *restrict_kw;
    int gpu;
} target_desc;

typedef struct emitter {
    tk_buf *b;
    const tk_op *op;
    const tk_plan *plan;            /* the decisions (plan.h): the printers copy a body's into the fields below */
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
    const char *lane_n;             /* lane loops run tk_j < this (a run-time count of at most V); NULL: V */
    int lane_rev;                   /* lane tk_j is element V - 1 - tk_j of its block */
    int nblocks;                    /* R: blocks of V lanes per tile (copies along the innermost dim) */
    int nacc;                       /* accumulators per lane (lane_plan) */
    int vx;                         /* tiles on explicit vectors: R may exceed 1 */
    int vx_any;                     /* some lane loop runs on explicit vectors (the wide bodies exist) */
    const tk_stmt *vx_loop[32];     /* the lane loops that do (plan_lanes.c, lane_plan) */
    int nvx_loop;
    int gcopy, rcopy;               /* the copy being emitted: group row g, lane block r */
    const char *mask;               /* assignments take effect only where this holds */
    int lane_fix;                   /* >= 0: lane index printed instead of tk_j (vector addresses) */
    const char *vmask;              /* explicit vectors: the lane mask of this copy, NULL: all lanes */
    const tk_expr *vload[16];       /* explicit vectors: reads loaded once for the group rows, tk_ld<i> */
    int nvload;
    const tk_expr *row[32];         /* explicit vectors: broadcast reads through a row pointer tk_rp<i> */
    int nrow;                       /* (unit last-dim stride; one per group row) */
    /* explicit-vector functions (vx_loop): a tile's copies are loops over
     * tk_g (group row) and tk_r (lane block), their values arrays indexed
     * by them; loop variables and row pointers are printed with those
     * indices */
    int symc;
    int vld_arr;                    /* hoisted loads are arrays tk_ld<i>[tk_r] (the loop over every copy) */
    const unsigned char *vx_acc;    /* locals held per copy, x_<name>[copy] (the others: per-copy temporaries) */
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
    int vexp;                       /* CPU row loops: printing a vectorised inner loop (exp() is tk_vexpf) */
} emitter;

/* GPU lane tiles: rows a warp's threads spread over (see gpu_tiles_head) */
#define TK_ROWS 4

/* ORDER DTYPE: the C type that stores one element. */
extern const char *const k_ctype[TK_DTYPE_COUNT];
extern const char *const k_vctype[];
extern const char *const k_to_value[TK_DTYPE_COUNT];
extern const char *const k_to_value_end[TK_DTYPE_COUNT];

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

/* emit.c */
/* A fresh emitter for plan P, printing into b (the planner's scratch
 * emitter: b NULL). */
void emitter_init(emitter *E, tk_buf *b, const tk_plan *P);
int expr_uses(const tk_expr *e, const char *name);
int used(const emitter *E, const char *name);
/* Whether the kernel declares tensor parameter i's pointer, strides and
 * batch offset: the body reads it, and it is not 'mut' (a 'mut' one is read
 * through its output's, t_<name>: one pointer for its loads and stores). */
int declares_tensor(const emitter *E, int i);
void each_strided(emitter *E, void (*fn)(emitter *, const tk_param *, int, int), int arg);
void prologue(emitter *E);
void decompose(emitter *E, int skip_last);
int has_top_level_for(const tk_opdecl *d);

/* plan.c */
/* Copies a body's plan into E's working fields (the printers may vary
 * them while printing, e.g. the group rows of a remainder). */
void plan_apply(emitter *E, const tk_body_plan *b);

/* plan_lanes.c */
int lane_invariant(const emitter *E, const tk_expr *e);
int expr_count(const tk_expr *e, const char *name);
int stmt_count(tk_stmt **body, int nb, const char *name);
void assigned_locals(tk_stmt **body, int n, unsigned char *out);
int lane_coef(const tk_expr *e, const char *v, int64_t *coef);
int lane_blocks(const emitter *E, int G);
int lane_plan(emitter *E);
/* Counts the reads in body[0..n) that use lane variable v: in their last
 * index alone with coefficient +-1 (vector loads, *unit), or otherwise
 * (gathers across the lanes, *other). */
void lane_loads_stmts(tk_stmt **body, int n, const char *v, int *unit, int *other);

/* plan_run.c */
void plan_run(emitter *E);

/* plan_rows.c */
/* Fills P->rows (a CPU row loop, not plain; else leaves it empty). */
void plan_rows(tk_plan *P);
/* The element-wise form's loops as lanes across iterations (sets P->across
 * and P->rows); returns P->across. */
int plan_across(tk_plan *P);
/* The vectorised-loop plan of inner loop `loop`, NULL when it runs as written. */
const tk_row_vec *row_vec_find(const tk_plan *P, const tk_stmt *loop);
/* Fills P->gpu_parts, part_copy and (in parts) rows.parts: a CUDA row loop
 * with sums or in parts under schedule parts=N > 1; else clears them. */
void gpu_parts_plan(tk_plan *P);

/* plan_coop.c */
/* Decides P's cooperative form (P->coop, its dealt loops) for a row loop
 * with schedule coop=S > 1; 0 with P->coop_why set when it is refused. */
int coop_plan(tk_plan *P);

/* plan_gpu.c */
int split_plan(emitter *E);
int mirror_plan(emitter *E);
int chunk_plan(emitter *E);
/* plan_windows.c */
void window_plan(emitter *E, tk_body_plan *b);
const tk_window_plan *window_find(const tk_plan *P, const tk_stmt *loop);

/* emit_expr.c */
void line(emitter *E, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
const tk_param *param(const emitter *E, int i);
const tk_param *output(const emitter *E, int i);
int is_float_vt(tk_vtype t);
int has_ell(const tk_param *p);
void local_name(emitter *E, const char *name, int ref);
void tensor_offset_n(emitter *E, const tk_expr *e, int n);
void tensor_offset(emitter *E, const tk_expr *e);
int kdiv_slot(const emitter *E, const tk_expr *e);
void expr(emitter *E, const tk_expr *e, tk_vtype want);
void begin_line(emitter *E);
void store_target(emitter *E, const tk_stmt *s);
int reduction_vars(const emitter *E, const tk_stmt *loop, int *refs, int max);
void range_loop(emitter *E, const tk_stmt *s, const char *lo, const char *hi, int c0, int c1);
/* A row loop in parts: part tk_pt of tk_np (the caller declares both) runs
 * the statements before the parted loop that part 0 alone runs, and its
 * share of the loop (plan.h, rows.parts). */
void parted_body(emitter *E);
void block(emitter *E, tk_stmt **body, int n);

/* emit_cpu.c */
void run_block(emitter *E, int hoisted);
int has_for(tk_stmt **body, int n);
void stride_cond(emitter *E, const tk_param *p, int slot, int arg);
int unit_stride_test(emitter *E, const char *extra);
void cpu_kernel(emitter *E);
int row_vec_open(emitter *E, const tk_stmt *loop, int c0, int c1);
void row_vec_close(emitter *E, const tk_stmt *loop, int c0, int c1);

/* emit_lanes.c */
void set_copy(emitter *E, int c);
int bound_set(const emitter *E, int c, int nb);
void lane_head(emitter *E, int simd);
void lane_open(emitter *E, int simd);
void lane_close(emitter *E);
void lane_stmts(emitter *E, tk_stmt **body, int n);
void lane_range(emitter *E, const tk_stmt *s, const char *lo, const char *hi, int masked, int nb);
int group_invariant(const emitter *E, const tk_expr *e);

/* emit_vec.c */
int vx_loop_ok(emitter *E, const tk_stmt *s);
/* Whether the plan put lane loop s on explicit vectors. */
int vx_loop_planned(const emitter *E, const tk_stmt *s);
int row_match(const emitter *E, const tk_expr *e);
void vx_loop(emitter *E, const tk_stmt *s, int nb);

/* emit_tile.c */
void tile_block(emitter *E, tk_stmt **body, int n);
void tile(emitter *E);

/* emit_cuda.c */
void gpu_loop(emitter *E);
int gpu_window_range(emitter *E, const tk_stmt *s, const char *lo, const char *hi);
void gpu_tile_loop(emitter *E);
int chunk_remainder(const emitter *E, const tk_expr *e);
void gpu_chunk_loop(emitter *E);
void gpu_unit_stride_copy(emitter *E, void (*fn)(emitter *));

/* emit_coop.c */
void gpu_coop_loop(emitter *E);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
