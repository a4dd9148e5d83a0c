/* emit_cuda.c - the CUDA kernel's index-space loops: the grid-stride loop,
 * sliding windows and streamed reads in tile rounds (which reads: the plan,
 * plan_windows.c), the tile loop, chunks with stepped positions and
 * remainders, and the unit-stride copy. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>

#include "emit.h"

/* CUDA, a row loop in parts (plan.h, gpu_parts): thread tk_pt of the
 * kargs.nparts the launch runs adds into copy tk_pt of the outputs it
 * copies (kargs.pstride elements apart), running iterations tk_pt,
 * tk_pt + nparts, ... of an op with sums, or share tk_pt of the parted
 * loop of a one-iteration row loop. The first line marks the kernel for
 * the launcher (runtime/cuda.c), which sizes the grid to nparts threads. */
static void gpu_parts_loop(emitter *E) {
    const char *A = E->tg->args;
    const tk_plan *P = E->plan;
    line(E, "/* tk: runs in parts (kargs.nparts threads, a copy of the copied outputs each) */");
    line(E, "const tk_i64 tk_np = %snparts > 1 ? %snparts : 1;", A, A);
    line(E, "const tk_i64 tk_pt = (tk_i64)blockIdx.x * blockDim.x + threadIdx.x;");
    line(E, "if (tk_pt >= tk_np) return;");
    for (int o = 0; o < E->op->decl->noutputs; o++)
        if (P->part_copy[o]) line(E, "t_%s += tk_pt * %spstride[%d];", output(E, o)->name, A, o);
    if (P->rows.parts) {
        line(E, "for (tk_i64 lin = 0; lin < %snumel; ++lin) {", A);
        E->indent++;
        decompose(E, 0);
        parted_body(E);
    } else {
        line(E, "for (tk_i64 lin = tk_pt; lin < %snumel; lin += tk_np) {", A);
        E->indent++;
        decompose(E, 0);
        block(E, E->op->decl->body, E->op->decl->nbody);
    }
    E->indent--;
    line(E, "}");
}

/* CUDA: a grid-stride loop, one element per iteration. */
void gpu_loop(emitter *E) {
    const char *A = E->tg->args;
    if (E->plan->gpu_parts) {
        gpu_parts_loop(E);
        return;
    }
    line(E, "const tk_i64 end = %snumel;", A);
    line(E, "const tk_i64 step = (tk_i64)gridDim.x * blockDim.x;");
    line(E, "for (tk_i64 lin = (tk_i64)blockIdx.x * blockDim.x + threadIdx.x; lin < end; lin += step) {");
    E->indent++;
    decompose(E, 0);
    block(E, E->op->decl->body, E->op->decl->nbody);
    E->indent--;
    line(E, "}");
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
        int mut = E->op->decl->params[e->ref].mut;   /* (written by this kernel: not the read-only cache) */
        tk_buf_printf(E->b, mut ? "tk_q%d.v = *((const %s *)" : "tk_q%d.v = __ldg((const %s *)", i, vt);
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

int gpu_window_range(emitter *E, const tk_stmt *s, const char *lo, const char *hi) {
    int V = E->lanes;
    const tk_window_plan *w = window_find(E->plan, s);   /* (plan_windows.c) */
    if (!w || w->nwin == 0) return 0;
    E->nwin = w->nwin;
    memcpy(E->win, w->win, sizeof E->win);
    memcpy(E->win_shift, w->win_shift, sizeof E->win_shift);
    E->nstrm = E->unit_copy ? w->nstrm : 0;   /* streams: the unit-stride copy only */
    E->strm_w = E->unit_copy ? w->strm_w : 0;
    memcpy(E->strm, w->strm, sizeof E->strm);
    memcpy(E->strm_copy, w->strm_copy, sizeof E->strm_copy);
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
void gpu_tile_loop(emitter *E) {
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
int chunk_remainder(const emitter *E, const tk_expr *e) {
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
void gpu_chunk_loop(emitter *E) {
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
    for (int i = 0; i < E->nmemo; i++) {
        E->inline_locals = 1;
        begin_line(E);
        tk_buf_printf(E->b, "const tk_i64 tk_n%d = ", i);
        expr(E, E->memo[i]->args[0], TK_V_INT);
        tk_buf_puts(E->b, ";\n");
        E->inline_locals = 0;
    }
    /* (a numerator that would pass INT64_MAX in the chunk wraps: element by element) */
    begin_line(E);
    tk_buf_printf(E->b, "if (v_%s + %d <= n_%s", v, K, v);
    for (int i = 0; i < E->nmemo; i++)
        tk_buf_printf(E->b, " && tk_d%d > 0 && tk_d%d <= 0x7fffffff && tk_n%d <= 0x7fffffffffffffffLL - %d", i, i, i, K);
    tk_buf_puts(E->b, ") {\n");
    E->indent++;
    for (int i = 0; i < E->nmemo; i++) {
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

void gpu_unit_stride_copy(emitter *E, void (*fn)(emitter *)) {
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
