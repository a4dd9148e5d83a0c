/* plan.h - what the planner decides for one kernel, as plain data.
 *
 *   checked op + (variant, target, flags, schedule) --tk_plan_make--> tk_plan
 *   tk_plan --the printers (emit*.c)--> C or CUDA C source
 *
 * The planner makes every decision about the shape of a kernel once: the
 * parallel domain and how it is tiled (lanes, group rows, lane blocks,
 * accumulators, explicit vectors), the run plan of untiled CPU loops
 * (hoisted statements, incremental divisions, segments), and on the GPU
 * split reductions, mirrored tiles, chunks and the elements a thread
 * computes. The printers copy a body's plan into their working state
 * (plan_apply) and print; `tkc plan` prints the plan as text
 * (tk_plan_text in tk.h). Not part of the public API. */
#ifndef TK_PLAN_H
#define TK_PLAN_H

#include "core.h"

/* The bodies of a CPU kernel, indexed by their vector width (the
 * emitter's `wide`): the narrow body (omp simd lane loops, every
 * instruction set and strided calls), the wide one (512-bit explicit
 * vectors) and the mid one (256-bit). A CUDA kernel has one, [0]. */
enum { TK_BODY_NARROW, TK_BODY_WIDE, TK_BODY_MID, TK_NBODIES };
/* the CPUs a CPU kernel is compiled for (tk.h, TK_EMIT_CPU_*): every one
 * (target clones, the run-time choice), or the running one alone */
enum { TK_CPU_ANY, TK_CPU_BASE, TK_CPU_AVX2, TK_CPU_AVX512 };

/* Stores of a row loop whose bounds the plan records; later ones have
 * every index checked. */
#define TK_MAX_BSTORES 64

/* GPU: a lane loop's sliding windows (reads whose element for lane j at
 * u + 1 is lane j -/+ 1's at u, kept in registers) and streams (reads the
 * same in every lane advancing one element a step, loaded 16 bytes at a
 * time in the unit-stride copy); plan_windows.c. */
enum { TK_MAX_WLOOPS = 8 };
typedef struct tk_window_plan {
    const tk_stmt *loop;
    int nwin;
    const tk_expr *win[8];
    int win_shift[8];                   /* -1: lane j takes lane j - 1's value, +1: lane j + 1's */
    int nstrm, strm_w;                  /* strm_w: elements a load */
    const tk_expr *strm[8];
    int strm_copy[8];                   /* the group copy it is read in, -1: every copy */
} tk_window_plan;

/* One body's decisions. Pointers point into the op's (const) AST. */
typedef struct tk_body_plan {
    /* lane tiles: V consecutive elements of the innermost dim times G rows
     * of the group dim gdim, R lane blocks; lanes == 0: no tiles */
    int lanes, group, gdim, blocks;
    int nacc;                           /* accumulators a lane */
    int vx;                             /* every lane loop on explicit vectors */
    int vx_any;                         /* some lane loop on explicit vectors */
    const tk_stmt *vx_loop[32];         /* the lane loops on explicit vectors (wide and mid bodies) */
    int nvx_loop;
    int lane_rev;                       /* lanes run backwards (reads mostly descend) */
    unsigned char arr[TK_MAX_LOCALS];   /* locals held per lane */
    /* no tiles: unroll-and-jam copies along the innermost dim, and the run
     * plan of the innermost dim (emit_cpu.c, plan_run) */
    int copies;
    unsigned char hoisted[256];         /* top-level statement i runs once a run */
    unsigned char hoisted_local[TK_MAX_LOCALS];
    const tk_stmt *def[TK_MAX_LOCALS];  /* top-level single-assignment locals */
    const tk_expr *memo[16];            /* floor divisions computed incrementally */
    int nmemo, segmented;
    /* GPU: split reductions, mirrored tiles, chunks */
    int split;                          /* S threads share the tile's loop split_loop */
    const tk_stmt *split_loop;
    unsigned char split_acc[TK_MAX_LOCALS];
    int mirror;                         /* a thread takes tile p and n - 1 - p */
    int chunk;                          /* K elements a thread, stores gathered in vst */
    const tk_stmt *vst[TK_MAX_TENSORS];
    int nwloop;                         /* lane loops with windows */
    tk_window_plan wloop[TK_MAX_WLOOPS];
} tk_body_plan;

/* A CPU row loop's inner loop that the C compiler may vectorise along the
 * row (plan_rows.c): printed under `#pragma omp simd` with its reductions,
 * exp() as tk_vexpf. */
enum { TK_MAX_ROW_VEC = 32, TK_MAX_ROW_RED = 8 };
typedef struct tk_row_vec {
    const tk_stmt *loop;
    int nred;
    int red[TK_MAX_ROW_RED];            /* the accumulators' local slots */
    char red_op[TK_MAX_ROW_RED];        /* '+' sum, '*' product, 'M' max, 'm' min */
} tk_row_vec;

typedef struct tk_row_plan {
    int nvec;
    tk_row_vec vec[TK_MAX_ROW_VEC];
    /* lanes across adjacent iterations of the innermost (parallel) loop
     * variable, for unit strides: blocks of up to `lanes` iterations (the
     * width chosen at run time: what is left of the row and of the range),
     * at least lanes_min; the rest of the domain one at a time. 0: none */
    int lanes, lanes_min;
    unsigned char arr[TK_MAX_LOCALS];   /* locals held per lane */
    /* a one-iteration row loop whose last statement is a loop that only
     * adds into outputs (plan_parts): that loop's range is cut into
     * kargs.nparts parts run in parallel, each into its own outputs, which
     * the caller adds up (parts > 0); NULL: none */
    const tk_stmt *parts;
    unsigned char part0[256];           /* top-level statement i stores: part 0 alone runs it */
    /* jammed rows (plan_jam): `jam` adjacent iterations of loop variable
     * jam_var (the innermost parallel one) run as unroll-and-jam copies,
     * sharing the loads of the reads that do not move with it. 0: none */
    int jam, jam_var;
} tk_row_plan;

/* CUDA cooperative rows (plan_coop.c): a loop of a row loop's body dealt
 * over the S lanes that share the iteration, and how its reductions are
 * combined after it. */
enum { TK_COOP_SUM = 1, TK_COOP_MAX, TK_COOP_MIN };
#define TK_COOP_LOOPS 16
typedef struct tk_coop_loop {
    const tk_stmt *loop;                /* lane l of S runs iterations lo + l, lo + l + S, ... */
    unsigned char acc[TK_MAX_LOCALS];   /* per local slot: TK_COOP_SUM (s += e), MAX, MIN (m = max(m, e)); 0 */
    int stores;                         /* it stores to an output */
} tk_coop_loop;

typedef struct tk_plan {
    const tk_op *op;
    int variant;
    tk_target target;
    int plain;                          /* TK_EMIT_PLAIN */
    int sched[TK_SCHED_KEYS];           /* CUDA: the items in force (the caller's over the spec's); 0: default */
    int sched_from[TK_SCHED_KEYS];      /* 0 default, 1 the spec's schedule line, 2 the caller's (TK_CUDA_TUNE) */
    tk_body_plan body[TK_NBODIES];
    int wide;                           /* CPU: the wide and mid bodies exist (explicit-vector loops) */
    int cpu;                            /* CPU: TK_CPU_ANY, or the one CPU the kernel is compiled for */
    unsigned char kept[TK_NBODIES];     /* CPU: the bodies the kernel's file carries (all that exist for
                                         * TK_CPU_ANY; else those that CPU runs) */
    int per_thread;                     /* CUDA: elements of the index space a thread computes */
    int row_loop;                       /* a row loop (`for b, _, c in y`): the plain form, one iteration
                                         * (its sequential loops over the '_' dims) a thread or a CPU index;
                                         * no tiles, copies, run plan, chunks, split or mirror */
    int across;                         /* CPU, the element-wise form: printed as a row loop's lanes across
                                         * iterations (rows.lanes; plan_rows.c, plan_across), not in copies */
    /* bounds (plan_bounds.c): a row loop's stores and, per store, the
     * indices not proven in range from the loop bounds (bit k: index k),
     * which the kernel compares to their dim's size before it stores */
    int nbstores;
    const tk_stmt *bstore[TK_MAX_BSTORES];
    unsigned bcheck[TK_MAX_BSTORES];
    int data_checked;                   /* the CPU kernel checks data-dependent read indices
                                         * (tk_expr.data_index; the plain form, as checked) */
    int checked;                        /* TK_EMIT_CHECKED: every index of every read and of a row loop's
                                         * stores is checked at run time; the plain form (no tiles, copies,
                                         * run plan, chunks, split or mirror) */
    tk_row_plan rows;                   /* CPU row loops: the inner loops vectorised along the row */
    /* CUDA, a row loop with 'coop=S' (schedule line or TK_CUDA_TUNE; never a
     * default: untimed): S consecutive lanes of one warp share each
     * iteration (plan_coop.c). coop 0: the plain form; coop_why then says why
     * the form was refused when it was asked for. per_thread is -S. */
    int coop;
    int ncoop;
    tk_coop_loop coop_loops[TK_COOP_LOOPS];
    int coop_sync;                      /* the body reads outputs back, or stores one both from dealt loops
                                         * and from lane 0: __syncwarp around the stores */
    char coop_why[512];
    /* CUDA, a row loop with sums ('+=', any number of iterations) or one in
     * parts (rows.parts), with 'parts=N' (schedule line or TK_CUDA_TUNE;
     * never a default: untimed): kargs.nparts threads (at most N, the
     * caller's choice), thread p running iterations p, p + nparts, ... (in
     * parts: share p of the parted loop) into copy p of the outputs marked
     * in part_copy, which the caller adds up after (docs/gpu.md, Parts);
     * no coop. 0: none */
    int gpu_parts;
    unsigned char part_copy[TK_MAX_TENSORS];   /* per output: copied (the sums; every output in parts) */
} tk_plan;

/* Plans variant `variant` of op for target: annotates the op's AST for the
 * variant (tk_check_body) and fills *plan. sched: the caller's schedule
 * (TK_CUDA_TUNE), NULL for none; it overrides the spec's line item by
 * item. Errors in ctx. */
tk_status tk_plan_make(tk_ctx *ctx, const tk_op *op, int variant, tk_target target, unsigned flags,
                       const tk_schedule *sched, tk_plan *plan);

/* plan_bounds.c: fills P's bounds table (nbstores, bstore, bcheck). */
void bounds_plan(tk_plan *P);
/* 1 if some store of the row loop is checked at run time (or checked mode is on). */
int bounds_any_check(const tk_plan *P);
/* The indices of store s that the kernel checks at run time (bit k: index
 * k): the unproven ones of a row loop's store, every one in checked mode,
 * none in the element-wise form (it stores at its loop variables). */
unsigned store_checks(const tk_plan *P, const tk_stmt *s);

#endif
