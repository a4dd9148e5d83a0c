/* plan.c - the planner's entry (tk_plan_make), the hand-over of a body's
 * plan to the printers (plan_apply), and the plan as text (tk_plan_text,
 * `tkc plan`). The decisions themselves are made by lane_plan
 * (plan_lanes.c), plan_run (plan_run.c), split_plan, mirror_plan and
 * chunk_plan (plan_gpu.c), window_plan (plan_windows.c) and coop_plan
 * (plan_coop.c), which work on a scratch emitter (the state the
 * printers' analyses read); only the planner calls them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit.h"

/* Records the decisions the planning functions left in E. */
static void snapshot(const emitter *E, tk_body_plan *b) {
    b->lanes = E->lanes;
    b->group = E->ngroup;
    b->gdim = E->gdim;
    b->blocks = E->nblocks;
    b->nacc = E->nacc;
    b->vx = E->vx;
    b->vx_any = E->vx_any;
    memcpy(b->vx_loop, E->vx_loop, sizeof b->vx_loop);
    b->nvx_loop = E->nvx_loop;
    b->lane_rev = E->lane_rev;
    memcpy(b->arr, E->arr, sizeof b->arr);
    b->copies = E->ncopies;
    memcpy(b->hoisted, E->hoisted, sizeof b->hoisted);
    memcpy(b->hoisted_local, E->hoisted_local, sizeof b->hoisted_local);
    memcpy(b->def, E->def, sizeof b->def);
    memcpy(b->memo, E->memo, sizeof b->memo);
    b->nmemo = E->nmemo;
    b->segmented = E->segmented;
    b->split = E->split;
    b->split_loop = E->split_loop;
    memcpy(b->split_acc, E->split_acc, sizeof b->split_acc);
    b->mirror = E->mirror;
    b->chunk = E->chunk;
    memcpy(b->vst, E->vst, sizeof b->vst);
}

void plan_apply(emitter *E, const tk_body_plan *b) {
    E->lanes = b->lanes;
    E->ngroup = b->group;
    E->gdim = b->gdim;
    E->nblocks = b->blocks;
    E->nacc = b->nacc;
    E->vx = b->vx;
    E->vx_any = b->vx_any;
    memcpy(E->vx_loop, b->vx_loop, sizeof E->vx_loop);
    E->nvx_loop = b->nvx_loop;
    E->lane_rev = b->lane_rev;
    memcpy(E->arr, b->arr, sizeof E->arr);
    E->ncopies = b->copies;
    memcpy(E->hoisted, b->hoisted, sizeof E->hoisted);
    memcpy(E->hoisted_local, b->hoisted_local, sizeof E->hoisted_local);
    memcpy(E->def, b->def, sizeof E->def);
    memcpy(E->memo, b->memo, sizeof E->memo);
    E->nmemo = b->nmemo;
    E->segmented = b->segmented;
    E->split = b->split;
    E->split_loop = b->split_loop;
    memcpy(E->split_acc, b->split_acc, sizeof E->split_acc);
    E->mirror = b->mirror;
    E->chunk = b->chunk;
    memcpy(E->vst, b->vst, sizeof E->vst);
}

/* A CPU body for `wide` (TK_BODY_*): lane tiles where the body fits them,
 * else unroll-and-jam copies and the run plan; a row loop: neither (one
 * iteration an index, as written). */
static void plan_cpu_body(tk_plan *P, int wide, tk_buf *scratch) {
    emitter E;
    emitter_init(&E, scratch, P);
    E.plain |= P->checked || P->data_checked;   /* checked kernels take the plain form */
    E.wide = wide;
    if (P->row_loop || P->across) {
        snapshot(&E, &P->body[wide]);
        return;
    }
    if (!lane_plan(&E)) {
        const tk_opdecl *d = P->op->decl;
        E.lanes = 0;
        E.ngroup = 1;
        E.gdim = d->nloop - 1;
        E.ncopies = !E.plain && has_top_level_for(d) && d->nloop > 0 ? 4 : 1;
        plan_run(&E);
    }
    snapshot(&E, &P->body[wide]);
}

/* The CUDA kernel: lane tiles (a thread's registers) with split reductions
 * and mirrored tiles, else chunks of the innermost dim, else one element a
 * thread; and how many elements that makes a thread. */
static void plan_cuda(tk_plan *P, tk_buf *scratch) {
    emitter E;
    emitter_init(&E, scratch, P);
    E.plain |= P->checked;   /* checked kernels take the plain form */
    int n = 1;
    if (P->row_loop) {   /* a thread an iteration, or S lanes with schedule coop=S (plan_coop.c) */
        int coop = 0;
        gpu_parts_plan(P);
        if (P->gpu_parts && P->sched[TK_SCHED_COOP] > 1)
            snprintf(P->coop_why, sizeof P->coop_why, "the op runs in parts (parts=%d): a thread a part",
                     P->sched[TK_SCHED_PARTS]);
        else if (!P->checked && !bounds_any_check(P))
            coop = coop_plan(P);
        else if (P->sched[TK_SCHED_COOP] > 1)   /* (a checked store is made by its own lane: keep one a thread) */
            snprintf(P->coop_why, sizeof P->coop_why, "the body has stores checked at run time, or checked mode is on");
        P->per_thread = coop ? -P->coop : 1;
        snapshot(&E, &P->body[0]);
        return;
    }
    if (lane_plan(&E)) {
        split_plan(&E);
        mirror_plan(&E);
        n = E.lanes * E.ngroup;
        if (E.mirror) n *= 2;                                   /* a tile and its mirror image */
        if (E.split) n = n / E.split > 1 ? n / E.split : 1;     /* S threads a tile */
    } else {
        E.lanes = 0;
        E.ngroup = 1;
        E.gdim = P->op->decl->nloop - 1;
        if (chunk_plan(&E)) n = E.chunk;
    }
    P->per_thread = n;
    snapshot(&E, &P->body[0]);
    window_plan(&E, &P->body[0]);
}

tk_status tk_plan_make(tk_ctx *ctx, const tk_op *cop, int variant, tk_target target, unsigned flags,
                       const tk_schedule *sched, tk_plan *P) {
    if (!ctx || !cop || !P || variant < 0 || variant >= cop->nvariants || (unsigned)target > TK_TARGET_CUDA)
        return TK_ERR_INVALID;
    tk_op *op = (tk_op *)cop;    /* tk_check_body annotates the AST for the variant */
    tk_status st = tk_check_body(op, variant, &ctx->error);
    if (st != TK_OK) return st;
    memset(P, 0, sizeof *P);
    P->op = op;
    P->variant = variant;
    P->target = target;
    P->plain = (flags & TK_EMIT_PLAIN) != 0;
    P->row_loop = op->row_loop;
    P->checked = (flags & TK_EMIT_CHECKED) != 0 || op->checked;
    /* gathers: CPU kernels only, until a GPU run has timed them on CUDA */
    P->data_checked = target != TK_TARGET_CUDA && op->data_reads && !P->checked;
    P->cpu = flags & TK_EMIT_CPU_AVX512 ? TK_CPU_AVX512 : flags & TK_EMIT_CPU_AVX2 ? TK_CPU_AVX2
           : flags & TK_EMIT_CPU_BASE ? TK_CPU_BASE : TK_CPU_ANY;
    if (target == TK_TARGET_CUDA)   /* the caller's items, else the spec's schedule line, else the defaults */
        for (int k = 0; k < TK_SCHED_KEYS; k++) {
            int mine = sched ? sched->v[k] : 0;
            P->sched[k] = mine ? mine : op->decl->schedule[k];
            P->sched_from[k] = mine ? 2 : op->decl->schedule[k] ? 1 : 0;
        }
    bounds_plan(P);
    tk_buf scratch = {0};           /* the planning functions print nothing */
    if (target == TK_TARGET_CUDA) {
        plan_cuda(P, &scratch);
    } else {
        if (!P->plain && !P->checked && !P->data_checked) {
            plan_cpu_body(P, TK_BODY_WIDE, &scratch);
            /* the explicit-vector bodies exist where the wide one tiles on them */
            P->wide = !P->row_loop && P->body[TK_BODY_WIDE].lanes > 0 && P->body[TK_BODY_WIDE].vx_any;
            if (P->wide) plan_cpu_body(P, TK_BODY_MID, &scratch);
        }
        /* after them: beside vector bodies the narrow one runs as x86-64-v3
         * or baseline code only (lane_plan's rows read P->wide) */
        plan_cpu_body(P, TK_BODY_NARROW, &scratch);
        /* row loops: their inner loops without run-time checks vectorise
         * (checked accesses are conditional, and record the first failure
         * atomically: plan_rows.c) */
        plan_rows(P);
        /* the element-wise form whose narrow body runs its loops in jammed
         * copies, without vector bodies: lanes across iterations instead
         * (plan_rows.c, plan_across), its body planned again (bare) */
        if (!P->row_loop && !P->wide && P->body[TK_BODY_NARROW].lanes == 0 && plan_across(P))
            plan_cpu_body(P, TK_BODY_NARROW, &scratch);
        /* one CPU: the bodies it compiles (tk_kernel.h: TK_VXW with
         * AVX-512, TK_VXH with AVX2 and FMA but not AVX-512) */
        P->kept[TK_BODY_NARROW] = 1;
        P->kept[TK_BODY_WIDE] = P->wide && (P->cpu == TK_CPU_ANY || P->cpu == TK_CPU_AVX512);
        P->kept[TK_BODY_MID] = P->wide && (P->cpu == TK_CPU_ANY || P->cpu == TK_CPU_AVX2);
    }
    int printed = scratch.len != 0;
    free(scratch.p);
    if (printed) {
        return tk_error_set(&ctx->error, TK_ERR_INVALID, NULL, (tk_loc){0, 0},
                            "tk: internal error: planning %s printed code", op->decl->name);
    }
    return TK_OK;
}

/* ---- the plan as text ------------------------------------------------------------ */

/* The local names set in flags[] (a local slot each), comma-separated. */
static void locals_list(tk_buf *b, const tk_op *op, const unsigned char *flags) {
    int n = 0;
    for (int r = 0; r < op->nlocals; r++)
        if (flags[r]) tk_buf_printf(b, "%s%s", n++ ? ", " : "", op->locals[r].name);
    if (!n) tk_buf_puts(b, "none");
}

static void rows_text(tk_buf *b, const tk_plan *P);

/* One body's tiles (or copies and run plan) as indented lines. */
static void body_text(tk_buf *b, const tk_plan *P, const tk_body_plan *B, int gpu) {
    const tk_opdecl *d = P->op->decl;
    const char *inner = d->nloop ? d->loop_vars[d->nloop - 1] : "-";
    if (!gpu && P->across) {   /* the element-wise form as a row loop's lanes (plan_rows.c, plan_across) */
        tk_buf_puts(b, "    no lane tiles or copies: printed as a row loop (one element an index)\n");
        rows_text(b, P);
        return;
    }
    if (B->lanes) {
        tk_buf_printf(b, "    lane tile: %d lanes along %s%s", B->lanes, inner,
                      gpu ? " (registers of one thread)" : B->vx ? " (explicit vectors)" : B->vx_any ? " (explicit vectors where a loop allows)" : " (omp simd loops)");
        if (B->group > 1) tk_buf_printf(b, " x %d rows along %s", B->group, d->loop_vars[B->gdim]);
        if (B->blocks > 1) tk_buf_printf(b, " x %d lane blocks", B->blocks);
        tk_buf_printf(b, "\n    accumulators a lane: %d\n", B->nacc);
        if (B->lane_rev) tk_buf_puts(b, "    lanes run backwards: the reads descend along the innermost dim\n");
        tk_buf_puts(b, "    locals held per lane: ");
        locals_list(b, P->op, B->arr);
        tk_buf_puts(b, "\n");
        return;
    }
    if (!gpu || B->chunk) {
        if (gpu) tk_buf_printf(b, "    chunk: %d consecutive elements of %s a thread, positions stepped\n", B->chunk, inner);
        else if (B->copies > 1) tk_buf_printf(b, "    no lane tiles; %d copies of the body along %s (unroll and jam)\n",
                                              B->copies, inner);
        else tk_buf_printf(b, "    no lane tiles; one element an iteration of %s\n", inner);
        int nh = 0;
        for (int i = 0; i < d->nbody && i < (int)sizeof B->hoisted; i++) nh += B->hoisted[i];
        tk_buf_printf(b, "    statements hoisted out of the run along %s: %d of %d", inner, nh, d->nbody);
        if (nh) {
            tk_buf_puts(b, " (");
            locals_list(b, P->op, B->hoisted_local);
            tk_buf_puts(b, ")");
        }
        tk_buf_printf(b, "\n    floor divisions stepped along the run: %d%s\n", B->nmemo,
                      B->segmented ? ", in segments of constant quotient" : "");
        if (gpu) {
            int ng = 0;
            for (int i = 0; i < d->noutputs && i < TK_MAX_TENSORS; i++)
                if (B->vst[i]) tk_buf_printf(b, "%s%s", ng++ ? ", " : "    stores gathered in registers: ", d->outputs[i].name);
            if (ng) tk_buf_puts(b, "\n");
        }
        return;
    }
    tk_buf_puts(b, "    one element a thread (grid-stride loop)\n");
}

/* The gathers' line: which reads have indices checked at run time because
 * they depend on a tensor's values (docs/spec.md, Bounds). */
static void data_checked_text(tk_buf *b, const tk_plan *P) {
    if (P->data_checked)
        tk_buf_puts(b, P->row_loop
                           ? "  gathers: read indices that depend on a tensor's values are compared to their dim's "
                             "size (an index out of range is an error); the loops that make such reads run as "
                             "written, the others as planned below\n"
                           : "  gathers: read indices that depend on a tensor's values are compared to their dim's "
                             "size (an index out of range is an error); the plain form\n");
}

/* A row loop's stores: per store, the indices on owned dims proven in range
 * by the loop bounds and those checked at run time (plan_bounds.c). */
static void bounds_text(tk_buf *b, const tk_plan *P) {
    const tk_opdecl *d = P->op->decl;
    for (int i = 0; i < P->nbstores; i++) {
        const tk_stmt *s = P->bstore[i];
        const tk_param *o = &d->outputs[s->ref];
        int skip = o->ndims - s->nindex;
        unsigned ck = store_checks(P, s);
        tk_buf_printf(b, "  store %s at %d:%d: ", o->name, s->loc.line, s->loc.col);
        if (!ck) {
            tk_buf_puts(b, "every index proven in range by the loop bounds, no run-time check\n");
            continue;
        }
        tk_buf_puts(b, "checked at run time on");
        for (int k = 0; k < s->nindex; k++)
            if (ck >> k & 1) {
                const tk_expr *e = o->dims[skip + k];
                tk_buf_printf(b, " dim %d", k);
                if (e->kind == TK_E_NAME) tk_buf_printf(b, " (%s)", e->name);
                if (!(P->bcheck[i] >> k & 1)) tk_buf_puts(b, " [proven; checked mode]");
            }
        tk_buf_puts(b, "\n");
    }
    if (P->checked) tk_buf_puts(b, "  checked mode: every index of every read and store is compared to its dim's "
                                   "size; the plain form\n");
    data_checked_text(b, P);
}

/* A CPU row loop's inner loops vectorised along the row, with their reductions. */
static void rows_text(tk_buf *b, const tk_plan *P) {
    const tk_opdecl *d = P->op->decl;
    if (P->rows.lanes) {
        tk_buf_printf(b, "    lanes: blocks of %d to %d adjacent iterations along %s run together, the sequential loops "
                      "walked once a block (omp simd loops; unit strides, else and for the rest one at a time)\n"
                      "    locals held per lane: ", P->rows.lanes_min, P->rows.lanes, d->loop_vars[d->nloop - 1]);
        locals_list(b, P->op, P->rows.arr);
        tk_buf_puts(b, "\n");
    }
    for (int i = 0; i < P->rows.nvec; i++) {
        const tk_row_vec *v = &P->rows.vec[i];
        tk_buf_printf(b, "    loop over %s at line %d: vectorised along the row (omp simd)", v->loop->name,
                      v->loop->loc.line);
        for (int j = 0; j < v->nred; j++) {
            char k = v->red_op[j];
            tk_buf_printf(b, "%s%s %s", j ? ", " : "; reductions: ",
                          k == '+' ? "sum" : k == '*' ? "product" : k == 'M' ? "max" : "min",
                          P->op->locals[v->red[j]].name);
        }
        tk_buf_puts(b, "\n");
    }
    if (P->rows.parts)
        tk_buf_printf(b, "    in parts: the loop over %s at line %d only adds into the outputs: its range is cut into "
                      "parts (by the inputs' size, at most TK_CPU_PARTS, 16 by default) run on at::parallel_for, part 0 "
                      "into the outputs, the others into copies added after (sums reassociate; the same for any "
                      "thread count)\n",
                      P->rows.parts->name, P->rows.parts->loc.line);
}

/* " (spec)" / " (TK_CUDA_TUNE)" after a schedule item. */
static const char *source_of(int from) { return from == 2 ? " (caller: TK_CUDA_TUNE)" : from == 1 ? " (spec)" : ""; }

/* "  schedule: lanes=8 (spec) ..." or " defaults"; 0 when none is given. */
static int sched_text(tk_buf *b, const tk_plan *P) {
    tk_buf_puts(b, "  schedule:");
    int any = 0;
    for (int k = 0; k < TK_SCHED_KEYS; k++)
        if (P->sched[k]) tk_buf_printf(b, " %s=%d%s", tk_sched_keys[k].key, P->sched[k], source_of(P->sched_from[k])), any = 1;
    tk_buf_puts(b, any ? "\n" : " defaults\n");
    return any;
}

/* The cooperative form of a row loop (plan_coop.c). */
static void coop_text(tk_buf *b, const tk_plan *P) {
    const tk_op *op = P->op;
    tk_buf_printf(b, "  kernel: %d lanes of one warp share an iteration (cooperative rows, schedule coop=%d: "
                  "opt-in, untimed on a GPU)\n", P->coop, P->coop);
    for (int k = 0; k < P->ncoop; k++) {
        const tk_coop_loop *c = &P->coop_loops[k];
        tk_buf_printf(b, "    loop over %s (line %d): dealt over the lanes (%s = lo + lane, lo + lane + %d, ...)",
                      c->loop->name, c->loop->loc.line, c->loop->name, P->coop);
        int n = 0;
        for (int r = 0; r < op->nlocals; r++)
            if (c->acc[r])
                tk_buf_printf(b, "%s%s (%s)", n++ ? ", " : "; reductions by warp shuffles: ", op->locals[r].name,
                              c->acc[r] == TK_COOP_SUM ? "sum" : c->acc[r] == TK_COOP_MAX ? "max" : "min");
        tk_buf_puts(b, "\n");
    }
    tk_buf_puts(b, "    other statements: on every lane (the same values); their stores by lane 0\n");
    if (P->coop_sync)
        tk_buf_puts(b, "    __syncwarp before and after the stores: the body reads outputs back (or stores one from "
                       "the lanes and from lane 0)\n");
    tk_buf_printf(b, "    threads an iteration: %d (the launcher's grid is the domain's size times that)\n", P->coop);
}

/* A tensor read as "name at line:col". */
static void read_text(tk_buf *b, const tk_opdecl *d, const tk_expr *e) {
    tk_buf_printf(b, "%s at %d:%d", e->is_out ? d->outputs[e->ref].name : d->params[e->ref].name, e->loc.line,
                  e->loc.col);
}

/* The GPU tile's sliding windows and streams, per lane loop (plan_windows.c). */
static void windows_text(tk_buf *b, const tk_plan *P, const tk_body_plan *B) {
    const tk_opdecl *d = P->op->decl;
    for (int i = 0; i < B->nwloop; i++) {
        const tk_window_plan *w = &B->wloop[i];
        tk_buf_printf(b, "    loop over %s at line %d: sliding windows (one load a step, not one a lane): ",
                      w->loop->name, w->loop->loc.line);
        for (int k = 0; k < w->nwin; k++) {
            tk_buf_puts(b, k ? ", " : "");
            read_text(b, d, w->win[k]);
        }
        if (w->nstrm) tk_buf_printf(b, "; streams (%d elements a load, unit-stride copy): ", w->strm_w);
        for (int k = 0; k < w->nstrm; k++) {
            tk_buf_puts(b, k ? ", " : "");
            read_text(b, d, w->strm[k]);
            if (w->strm_copy[k] >= 0) tk_buf_printf(b, " (group row %d)", w->strm_copy[k]);
        }
        tk_buf_puts(b, "\n");
    }
}

/* A row loop's plan: its domain and the plain form. */
static void row_text(tk_buf *b, const tk_plan *P) {
    const tk_opdecl *d = P->op->decl;
    const char *ell = P->op->has_ellipsis ? "the batch dims and " : "";
    int np = 0, no = 0;
    tk_buf_puts(b, "  row loop: parallel over ");
    for (int i = 0; i < d->nloop; i++)
        if (!tk_owned_dim(d->loop_vars[i])) tk_buf_printf(b, "%s%s", np++ ? ", " : ell, d->loop_vars[i]);
    if (!np) tk_buf_printf(b, "%s", *ell ? "the batch dims" : "nothing (one iteration)");
    tk_buf_printf(b, "; owns ");
    const tk_param *o = &d->outputs[P->op->loop_out];
    int skip = o->ndims - d->nloop;   /* a leading '...' */
    for (int i = 0; i < d->nloop; i++) {
        if (!tk_owned_dim(d->loop_vars[i])) continue;
        const tk_expr *e = o->dims[skip + i];
        if (e->kind == TK_E_NAME) tk_buf_printf(b, "%s%s", no++ ? ", " : "", e->name);
        else tk_buf_printf(b, "%sdim %d", no++ ? ", " : "", i);
    }
    tk_buf_printf(b, " of %s (its '_' dims)\n", o->name);
    if (P->op->has_sum) {
        int ns = 0;
        tk_buf_puts(b, "  sums (stored with '+=', zeroed by the caller): ");
        for (int i = 0; i < d->noutputs; i++)
            if (P->op->out_sum[i]) tk_buf_printf(b, "%s%s", ns++ ? ", " : "", d->outputs[i].name);
        tk_buf_puts(b, P->target != TK_TARGET_CUDA
                           ? "; the shim runs the index space in parts (by the inputs' size), each adding into its "
                             "own copy, added up after\n"
                       : P->gpu_parts ? "; in parts (below)\n"
                                      : "; the launcher refuses more than one iteration (threads would race; "
                                        "schedule parts=N runs them in parts, untimed)\n");
    }
    bounds_text(b, P);
    if (P->target == TK_TARGET_CUDA) {   /* the schedule line only where one is given */
        tk_buf b2 = {0};
        if (sched_text(&b2, P) && b2.p) tk_buf_puts(b, b2.p);
        free(b2.p);
    }
    if (P->target == TK_TARGET_CUDA && P->coop > 1)
        coop_text(b, P);
    else if (P->target == TK_TARGET_CUDA) {
        if (P->coop_why[0])
            tk_buf_printf(b, "  cooperative rows (coop=%d) not used: %s\n", P->sched[TK_SCHED_COOP], P->coop_why);
        if (!P->gpu_parts && P->sched[TK_SCHED_PARTS] > 1)
            tk_buf_printf(b, "  parts (parts=%d) not used: no output is a sum and no loop runs in parts (its last "
                             "loop only adding into the outputs of a one-iteration row loop)\n",
                          P->sched[TK_SCHED_PARTS]);
        if (P->gpu_parts) {
            int nc = 0;
            tk_buf_printf(b, "  kernel: in parts (parts=%d, untimed): nparts threads, at most %d (the caller's "
                             "choice by the inputs' size), thread p adding into copy p of ",
                          P->gpu_parts, P->gpu_parts);
            for (int i = 0; i < d->noutputs; i++)
                if (P->part_copy[i]) tk_buf_printf(b, "%s%s", nc++ ? ", " : "", d->outputs[i].name);
            if (P->rows.parts)
                tk_buf_printf(b, "; the loop over %s at line %d cut into nparts shares (part 0 alone runs the "
                                 "stores before it)", P->rows.parts->name, P->rows.parts->loc.line);
            else
                tk_buf_puts(b, "; iterations p, p + nparts, ... a thread");
            tk_buf_puts(b, "; the copies added up after (the shim: torch's sum over them)\n");
        } else {
            tk_buf_puts(b, "  kernel: one iteration a thread (grid-stride loop), its loops sequential\n"
                           "    elements a thread computes: 1 iteration (the launcher's grid is the domain's size)\n");
        }
    } else if (P->rows.jam) {
        const char *v = P->op->decl->loop_vars[P->rows.jam_var];
        tk_buf_printf(b, "  body: %d adjacent iterations along %s as unroll-and-jam copies (where the thread's range "
                      "holds them in one row of %s; else one at a time), sharing the reads that do not move with %s: "
                      "their loops run once for every copy where the bounds agree, else a common range and each "
                      "copy's ends\n", P->rows.jam, v, v, v);
        rows_text(b, P);
    } else {
        tk_buf_puts(b, "  body: one iteration an index of at::parallel_for's range, its loops sequential; "
                       "no unroll copies or run plan\n");
        rows_text(b, P);
    }
}

/* The scratch tensors (docs/spec.md, Scratch tensors) and the 'mut'
 * parameters (In-place parameters): outputs the op does not return. */
static void unreturned_text(tk_buf *b, const tk_opdecl *d) {
    int n = 0;
    for (int o = d->nreturns; o < d->noutputs; o++)
        if (d->outputs[o].scratch) tk_buf_printf(b, "%s%s", n++ ? ", " : "  scratch: ", d->outputs[o].name);
    if (n) tk_buf_puts(b, ", allocated for each call (uninitialised) and not returned\n");
    n = 0;
    for (int o = d->nreturns; o < d->noutputs; o++)
        if (d->outputs[o].alias) tk_buf_printf(b, "%s%s", n++ ? ", " : "  in place ('mut'): ", d->outputs[o].name);
    if (n) tk_buf_puts(b, ", loaded and stored through one pointer each into the caller's tensor\n");
}

/* The reads the binder range-checks at each call (reads.c). */
static void ranges_text(tk_buf *b, const tk_op *op) {
    for (int i = 0; i < op->nranges; i++) {
        const tk_expr *e = op->ranges[i].read;
        tk_buf_printf(b, "%s%s[", i ? ", " : "  reads range-checked at each call (their indices against the "
                                             "tensors' dims, before the kernel runs): ", e->name);
        for (int k = 0; k < e->nargs; k++) {
            if (k) tk_buf_puts(b, ", ");
            tk_expr_text(b, e->args[k], 1);
        }
        tk_buf_printf(b, "] at %d:%d", e->loc.line, e->loc.col);
    }
    if (op->nranges) tk_buf_puts(b, "\n");
}

static void plan_text(tk_buf *b, const tk_plan *P) {
    const tk_op *op = P->op;
    const tk_opdecl *d = op->decl;
    int gpu = P->target == TK_TARGET_CUDA;
    tk_buf_printf(b, "plan %s, variant %s (%d of %d), target %s%s\n", d->name, op->variant_codes[P->variant],
                  P->variant + 1, op->nvariants, gpu ? "cuda" : "cpu", P->plain ? ", plain" : "");
    const tk_param *o = &d->outputs[op->loop_out];
    unreturned_text(b, d);
    ranges_text(b, op);
    if (P->row_loop) {
        row_text(b, P);
        return;
    }
    if (P->checked) tk_buf_puts(b, "  checked mode: every index of every read is compared to its dim's size "
                                   "(stores are at the loop variables); the plain form\n");
    data_checked_text(b, P);
    tk_buf_puts(b, "  parallel domain: ");
    for (int i = 0; i < d->nloop; i++) tk_buf_printf(b, "%s%s", i ? ", " : "", d->loop_vars[i]);
    tk_buf_printf(b, "%s over %s's last %d dims", d->nloop ? "" : "(none)", o->name, d->nloop);
    if (d->nloop) tk_buf_printf(b, "; innermost %s", d->loop_vars[d->nloop - 1]);
    tk_buf_puts(b, "\n");
    if (!gpu) {
        static const char *const names[TK_NBODIES] = {"narrow (every instruction set, strided calls)",
                                                     "wide (512-bit vectors, unit strides)",
                                                     "mid (256-bit vectors, unit strides)"};
        static const int order[TK_NBODIES] = {TK_BODY_WIDE, TK_BODY_MID, TK_BODY_NARROW};
        static const char *const cpus[] = {"", "x86-64 without AVX2, or another architecture", "AVX2 and FMA",
                                           "AVX-512"};
        if (P->cpu != TK_CPU_ANY)
            tk_buf_printf(b, "  compiled for the running CPU alone (%s, -march=native): the bodies it runs\n",
                          cpus[P->cpu]);
        if (!P->plain && !P->wide)
            tk_buf_puts(b, "  no explicit-vector bodies: the narrow body serves every CPU\n");
        for (int k = 0; k < TK_NBODIES; k++) {
            int w = order[k];
            if (!P->kept[w]) continue;
            tk_buf_printf(b, "  body %s:\n", names[w]);
            body_text(b, P, &P->body[w], 0);
        }
        return;
    }
    sched_text(b, P);
    const tk_body_plan *B = &P->body[0];
    tk_buf_puts(b, "  kernel:\n");
    body_text(b, P, B, 1);
    if (B->split) {
        tk_buf_printf(b, "    split reduction: %d threads share the loop over %s, adding their sums by warp shuffles "
                      "(", B->split, B->split_loop->name);
        locals_list(b, op, B->split_acc);
        tk_buf_puts(b, ")\n");
    }
    if (B->mirror) tk_buf_printf(b, "    mirrored tiles: a thread takes tile p of a row and tile n - 1 - p\n");
    windows_text(b, P, B);
    if (P->sched[TK_SCHED_COOP] > 1) tk_buf_puts(b, "    coop: for row loops only; not used here\n");
    if (P->sched[TK_SCHED_PARTS] > 1) tk_buf_puts(b, "    parts: for row loops only; not used here\n");
    tk_buf_printf(b, "    elements a thread computes: %d (the launcher's grid is numel / that)\n", P->per_thread);
}

tk_status tk_plan_text(tk_ctx *ctx, const tk_op *op, int variant, tk_target target, unsigned flags,
                       const tk_schedule *sched, char **out) {
    if (!ctx || !op || !out) return TK_ERR_INVALID;
    tk_plan *P = malloc(sizeof *P);
    if (!P) return TK_ERR_NOMEM;
    tk_status st = tk_plan_make(ctx, op, variant, target, flags, sched, P);
    tk_buf b = {0};
    if (st == TK_OK) plan_text(&b, P);
    free(P);
    if (st == TK_OK && (b.oom || !b.p)) st = TK_ERR_NOMEM;
    if (st != TK_OK) {
        free(b.p);
        return st;
    }
    *out = b.p;
    return TK_OK;
}
