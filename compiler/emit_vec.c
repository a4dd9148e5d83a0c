/* emit_vec.c - explicit vectors (GNU C vector extensions) in CPU lane
 * tiles, and skewed lane blocks: the loops outlined into functions of their
 * own for the wide (512-bit) and mid (256-bit) CPU bodies. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>

#include "emit.h"

/* ---- explicit vectors in lane tiles ---------------------------------------------
 * A lane loop whose body is float arithmetic on lane-contiguous reads of
 * unit-stride tensors and on values that are the same in every lane is
 * written with GNU C vectors (TK_VX in tk_kernel.h) instead of an `omp simd`
 * loop: one vector register per accumulator of each copy, one load per
 * contiguous read shared by the copies, and the edges of lanes' ranges as
 * selects under a lane mask. Each lane still sums in the spec's order. The
 * omp simd form stays for other compilers and non-unit strides.
 *
 * The tile's copies are printed once, as loops over the group rows (tk_g)
 * and the lane blocks (tk_r) marked TK_UNROLL, with the per-copy values in
 * arrays indexed by them (x_<local>[copy], row pointers tk_rp<i>[tk_g],
 * loads tk_ld<i>[tk_r], lane ranges tk_lr[set]): the C compiler unrolls the
 * loops whole and keeps the arrays in registers (scalar replacement), the
 * same code as the copies written out, at a fraction of the text. */

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
int vx_loop_ok(emitter *E, const tk_stmt *s) {
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

/* The index of a copy from the loop variables tk_g and tk_r, as C text in
 * out: of the copy (rows 1), or of its lane block alone (rows 0; the bound
 * sets of tiles whose bounds ignore the group row). */
static void vx_index(const emitter *E, int rows, char *out, size_t n) {
    int G = rows ? E->ngroup : 1, R = E->nblocks;
    if (G > 1 && R > 1) snprintf(out, n, "tk_g * %d + tk_r", R);
    else if (G > 1) snprintf(out, n, "tk_g");
    else if (R > 1) snprintf(out, n, "tk_r");
    else snprintf(out, n, "0");
}

/* The index of the copy being printed. */
static void vx_copy_index(emitter *E) {
    char idx[32];
    vx_index(E, 1, idx, sizeof idx);
    tk_buf_puts(E->b, idx);
}

/* The current copy's vector of local `name` (ref): x_<name>[copy] for the
 * locals held per copy, x_<name> for the per-copy temporaries of the loop
 * body. */
static void vx_local(emitter *E, const char *name, int ref) {
    if (E->vx_acc[ref]) {
        tk_buf_printf(E->b, "x_%s[", name);
        vx_copy_index(E);
        tk_buf_puts(E->b, "]");
    } else {
        tk_buf_printf(E->b, "x_%s", name);
    }
}

static void vx_expr(emitter *E, const tk_expr *e) {
    for (int i = 0; i < E->nvload; i++)
        if (tk_expr_equal(E->vload[i], e)) {
            tk_buf_printf(E->b, E->vld_arr ? "tk_ld%d[tk_r]" : "tk_ld%d", i);
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
    case TK_E_NAME: vx_local(E, e->name, e->ref); break;
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
    if (a->declares && !E->vx_acc[a->ref]) {
        tk_buf_printf(E->b, "tk_v%s ", S);
        vx_local(E, a->name, a->ref);
        tk_buf_puts(E->b, " = ");
        vx_value(E, a->value);
    } else if (!E->vmask && a->op == TK_OPC_NONE) {
        vx_local(E, a->name, a->ref);
        tk_buf_puts(E->b, " = ");
        vx_value(E, a->value);
    } else if (!E->vmask) {
        vx_local(E, a->name, a->ref);
        tk_buf_printf(E->b, " %s= ", tk_opc_text(a->op));
        vx_expr(E, a->value);
    } else {
        vx_local(E, a->name, a->ref);
        tk_buf_printf(E->b, " = tk_vsel_%s(%s, ", S, E->vmask);
        if (a->op == TK_OPC_NONE) {
            vx_value(E, a->value);
        } else {
            vx_local(E, a->name, a->ref);
            tk_buf_printf(E->b, " %s ", tk_opc_text(a->op));
            vx_expr(E, a->value);
        }
        tk_buf_puts(E->b, ", ");
        vx_local(E, a->name, a->ref);
        tk_buf_puts(E->b, ")");
    }
    tk_buf_puts(E->b, ";\n");
}

/* Row pointers: a broadcast read (the same element in every lane) whose
 * last index alone moves with the loop reads through a pointer to its row,
 * set once per copy before the loop: the loop then keeps one pointer per
 * row in a register instead of recomputing (or spilling) full offsets. */
int row_match(const emitter *E, const tk_expr *e) {
    for (int i = 0; i < E->nrow; i++) {
        const tk_expr *r = E->row[i];
        if (r->ref != e->ref || r->nargs != e->nargs) continue;
        int same = 1;
        for (int k = 0; same && k < e->nargs - 1; k++) same = tk_expr_equal(r->args[k], e->args[k]);
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
    const char *T = k_ctype[tk_variant_dtype(E->op, E->variant, e->ref)];
    if (E->ngroup > 1) {   /* one per group row (a broadcast read is the same in every lane block) */
        line(E, "const %s *tk_rp%d[%d];", T, E->nrow, E->ngroup);
        begin_line(E);
        tk_buf_printf(E->b, "TK_UNROLL for (int tk_g = 0; tk_g < %d; ++tk_g) tk_rp%d[tk_g] = t_%s + (", E->ngroup,
                      E->nrow, param(E, e->ref)->name);
    } else {
        begin_line(E);
        tk_buf_printf(E->b, "const %s *const tk_rp%d = t_%s + (", T, E->nrow, param(E, e->ref)->name);
    }
    tensor_offset_n(E, e, e->nargs - 1);   /* the row: all but the last index */
    tk_buf_puts(E->b, ");\n");
    E->row[E->nrow++] = e;
}

/* Declares the row pointers of lane loop s (arrays over the group rows). */
static void vx_rows(emitter *E, const tk_stmt *s) {
    E->nrow = 0;
    set_copy(E, 0);
    for (int i = 0; i < s->nbody; i++) vx_rows_in(E, s->body[i]->value, s->name);
}

/* Loads a vector read of the loop body that the group rows share, once:
 * where 0, inside the loop over the lane blocks (tk_ld<i>); 1, for every
 * block, as an array tk_ld<i>[tk_r] filled by a loop of its own; 2, lane
 * block 0's (the skewed walk, where every block reads what block 0 does). */
static void vx_hoist_one(emitter *E, const tk_expr *e, void *arg) {
    int where = *(int *)arg;
    if (!group_invariant(E, e) || E->nvload == 16) return;
    for (int i = 0; i < E->nvload; i++)
        if (tk_expr_equal(E->vload[i], e)) return;
    if (where == 1) line(E, "tk_v%s tk_ld%d[%d];", vx_sfx(E), E->nvload, E->nblocks);
    begin_line(E);
    if (where == 1)
        tk_buf_printf(E->b, "TK_UNROLL for (int tk_r = 0; tk_r < %d; ++tk_r) tk_ld%d[tk_r] = ", E->nblocks, E->nvload);
    else tk_buf_printf(E->b, "const tk_v%s tk_ld%d = ", vx_sfx(E), E->nvload);
    E->symc = where != 2;   /* block 0: printed as copy 0 */
    vx_load(E, e);
    E->symc = 1;
    tk_buf_puts(E->b, ";\n");
    E->vload[E->nvload++] = e;
}

static void vx_hoist(emitter *E, const tk_stmt *s, int where) {
    E->nvload = 0;
    E->vld_arr = where == 1;
    set_copy(E, 0);
    for (int i = 0; i < s->nbody; i++) vx_reads(E, s->body[i]->value, vx_hoist_one, &where);
}

/* Opens `for (tk_<v> ...)` over n copies when n > 1 (returns whether it
 * did: the caller closes it with vx_end). */
static int vx_for(emitter *E, const char *v, int n) {
    if (n <= 1) return 0;
    line(E, "TK_UNROLL for (int %s = 0; %s < %d; ++%s) {", v, v, n, v);
    E->indent++;
    return 1;
}

static void vx_end(emitter *E, int opened) {
    if (!opened) return;
    E->indent--;
    line(E, "}");
}

static void vx_span(emitter *E, const tk_expr *e, void *arg) {
    unsigned char *seen = arg;
    if (e->ref < 0 || e->ref >= 64 || seen[e->ref]) return;
    seen[e->ref] = 1;
    const tk_param *p = param(E, e->ref);
    line(E, "const tk_i64 tk_zl_%s = tk_span_lo(&%st[%d]), tk_zh_%s = tk_span_hi(&%st[%d]);", p->name,
         E->tg->args, E->op->slot[e->ref], p->name, E->tg->args, E->op->slot[e->ref]);
}

/* The body for every copy (all 1) or, inside the loops over the nb bound
 * sets (vx_sets_open), for the copies of the set; under mask m (NULL:
 * every lane). */
static void vx_set_body(emitter *E, const tk_stmt *s, int all, int nb, const char *m) {
    int og = 0, orr = 0;
    E->vmask = m;
    if (all) {
        vx_hoist(E, s, E->nblocks > 1);
        og = vx_for(E, "tk_g", E->ngroup);
        orr = vx_for(E, "tk_r", E->nblocks);
    } else if (nb == E->nblocks) {   /* a set per lane block: its group rows */
        vx_hoist(E, s, 0);
        og = vx_for(E, "tk_g", E->ngroup);
    }
    set_copy(E, 0);
    for (int i = 0; i < s->nbody; i++) vx_assign(E, s->body[i]);
    vx_end(E, orr);
    vx_end(E, og);
    E->vmask = NULL;
    E->nvload = 0;
    E->vld_arr = 0;
}

/* The lane ranges of the bound set the loops of vx_sets_open are at (nb
 * sets: one per lane block, or one per copy): tk_lr[set], tk_hr[set]. */
static void vx_set_ranges(const emitter *E, int nb, char *lr, char *hr, size_t n) {
    char set[32];
    vx_index(E, nb != E->nblocks, set, sizeof set);
    snprintf(lr, n, "tk_lr[%s]", set);
    snprintf(hr, n, "tk_hr[%s]", set);
}

/* Opens the loops over the nb bound sets (lane blocks, or every copy);
 * returns which it opened (bit 0 tk_g, bit 1 tk_r) for vx_sets_close. */
static int vx_sets_open(emitter *E, int nb) {
    int g = nb != E->nblocks && vx_for(E, "tk_g", E->ngroup);
    int r = vx_for(E, "tk_r", E->nblocks);
    return g | r << 1;
}

static void vx_sets_close(emitter *E, int opened) {
    vx_end(E, opened >> 1 & 1);
    vx_end(E, opened & 1);
}

/* The current bound set's lane ranges folded (nb sets): [tk_ua, tk_ub)
 * where some lane is on, [tk_uc, tk_ud) where every lane is (offsets from
 * tk_mn). */
static void vx_fold_bounds(emitter *E, int nb) {
    const char *I = E->ftype == TK_V_F64 ? "long long" : "int";
    char lr[48], hr[48];
    vx_set_ranges(E, nb, lr, hr, sizeof lr);
    line(E, "%s tk_ua = %s[0], tk_ub = %s[0], tk_uc = %s[0], tk_ud = %s[0];", I, lr, hr, lr, hr);
    line(E, "for (int tk_q = 1; tk_q < %d; ++tk_q) {", E->lanes);
    E->indent++;
    line(E, "tk_ua = %s[tk_q] < tk_ua ? %s[tk_q] : tk_ua;", lr, lr);
    line(E, "tk_ub = %s[tk_q] > tk_ub ? %s[tk_q] : tk_ub;", hr, hr);
    line(E, "tk_uc = %s[tk_q] > tk_uc ? %s[tk_q] : tk_uc;", lr, lr);
    line(E, "tk_ud = %s[tk_q] < tk_ud ? %s[tk_q] : tk_ud;", hr, hr);
    E->indent--;
    line(E, "}");
}

/* The lane mask m at loop variable s, from the lanes' ranges tk_xl, tk_xh:
 * lr <= ur < hr from the signs of ur - lr and ur - hr (no vector compares:
 * GCC lowers those lane by lane in target clones). */
static void vx_lane_mask(emitter *E, const tk_stmt *s, const char *m) {
    const char *I = E->ftype == TK_V_F64 ? "long long" : "int";
    int sh = E->ftype == TK_V_F64 ? 63 : 31;
    line(E, "const %s tk_ur = (%s)(v_%s - tk_mn);", I, I, s->name);
    line(E, "const tk_v%s %s = ~((tk_ur - tk_xl) >> %d) & ((tk_ur - tk_xh) >> %d);", vx_msfx(E), m, sh, sh);
}

/* u over [lo, hi) on vectors. Masked: each bound set runs on its own, in a
 * loop over the sets (its lanes' sums stay in order; sets share nothing),
 * over the part of [lo, hi) where any of its lanes is on: where all are,
 * without selects; elsewhere lanes outside their own range keep their
 * values. */
static void vx_range(emitter *E, const tk_stmt *s, const char *lo, const char *hi, int masked, int nb) {
    line(E, "{");
    E->indent++;
    if (!masked) {
        line(E, "for (tk_i64 v_%s = %s; v_%s < %s; ++v_%s) {", s->name, lo, s->name, hi, s->name);
        E->indent++;
        vx_set_body(E, s, 1, nb, NULL);
        E->indent--;
        line(E, "}");
    } else {
        const char *M = vx_msfx(E);
        unsigned char seen[64] = {0};
        for (int i = 0; i < s->nbody; i++) vx_reads(E, s->body[i]->value, vx_span, seen);
        int opened = vx_sets_open(E, nb);
        char lr[48], hr[48];
        vx_set_ranges(E, nb, lr, hr, sizeof lr);
        line(E, "{");
        E->indent++;
        line(E, "const tk_v%s tk_xl = tk_vld_%s(%s), tk_xh = tk_vld_%s(%s);", M, M, lr, M, hr);
        vx_fold_bounds(E, nb);
        line(E, "const tk_i64 tk_a = tk_maxi(%s, tk_mn + tk_ua), tk_b = tk_mini(%s, tk_mn + tk_ub);", lo, hi);
        line(E, "tk_i64 tk_c = tk_maxi(tk_a, tk_mn + tk_uc), tk_d = tk_mini(tk_b, tk_mn + tk_ud);");
        line(E, "if (tk_c >= tk_d) tk_c = tk_d = tk_b > tk_a ? tk_b : tk_a;");
        for (int part = 0; part < 3; part++) {
            static const char *const from[] = {"tk_a", "tk_c", "tk_d"}, *const to[] = {"tk_c", "tk_d", "tk_b"};
            line(E, "for (tk_i64 v_%s = %s; v_%s < %s; ++v_%s) {", s->name, from[part], s->name, to[part],
                 s->name);
            E->indent++;
            if (part == 1) {
                vx_set_body(E, s, 0, nb, NULL);
            } else {
                vx_lane_mask(E, s, "tk_m");
                vx_set_body(E, s, 0, nb, "tk_m");
            }
            E->indent--;
            line(E, "}");
        }
        E->indent--;
        line(E, "}");
        vx_sets_close(E, opened);
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

/* The skewed walk (vx_skewed_loop) in loops: the blocks' values in arrays
 * indexed by tk_r (per-block bounds tk_a[r] .. tk_d[r], tk_il[r],
 * tk_ih[r]), the stretches between two blocks' bounds a loop over tk_s, in
 * each step a loop over the blocks skipping those that are off. The loops
 * that touch accumulators are TK_UNROLL (unrolled, the arrays are registers
 * and the tests of which blocks are on constants); the bookkeeping loops
 * (the blocks' bounds, the checks) stay rolled: unrolled too, rwkv's B=3
 * forward (single rows, the skewed functions) ran 8-15 % slower in libtk
 * (bench/results/2026-12-06-cpu-vector-loops.txt). */

/* Block tk_r's u over [from[tk_r], to[tk_r]) under its lane mask, for every
 * block. */
static void vx_skew_masked(emitter *E, const tk_stmt *s, const char *from, const char *to) {
    const char *M = vx_msfx(E);
    int o = vx_for(E, "tk_r", E->nblocks);
    line(E, "const tk_v%s tk_xl = tk_vld_%s(tk_lr[tk_r]), tk_xh = tk_vld_%s(tk_hr[tk_r]);", M, M, M);
    line(E, "for (tk_i64 v_%s = %s[tk_r]; v_%s < %s[tk_r]; ++v_%s) {", s->name, from, s->name, to, s->name);
    E->indent++;
    vx_lane_mask(E, s, "tk_m");
    vx_set_body(E, s, 0, E->nblocks, "tk_m");
    E->indent--;
    line(E, "}");
    vx_end(E, o);
}

/* One step tk_i of the skewed walk: block 0's windows loaded once at
 * u = tk_i (under mask m, NULL: none), then the body of each block tk_r at
 * u = tk_i + tk_r * D, but where C condition skip holds (NULL: none); cond:
 * only the blocks whose unmasked range [tk_il, tk_ih) holds tk_i (skipping
 * the step when none does). The loop over the blocks always has constant
 * bounds, so that a compiler unrolls it whole even where it does not
 * unroll the loop around it (tk_s): every index of x_<local> is then a
 * constant, and the arrays stay in registers (Clang's SROA, GCC's SRA). */
static void vx_skew_step(emitter *E, const tk_stmt *s, int D, const char *skip, int cond, const char *m) {
    if (cond) {
        line(E, "int tk_any = 0;");
        line(E, "TK_UNROLL for (int tk_r = 0; tk_r < %d; ++tk_r) tk_any |= tk_i >= tk_il[tk_r] && tk_i < tk_ih[tk_r];",
             E->nblocks);
        line(E, "if (!tk_any) continue;");
    }
    line(E, "const tk_i64 v_%s = tk_i;", s->name);
    if (m) vx_lane_mask(E, s, m);
    E->vmask = m;
    vx_hoist(E, s, 2);   /* block 0's loads (every block reads the same addresses at its own u) */
    line(E, "TK_UNROLL for (int tk_r = 0; tk_r < %d; ++tk_r) {", E->nblocks);
    E->indent++;
    if (skip) line(E, "if (%s) continue;", skip);
    if (cond) line(E, "if (tk_i < tk_il[tk_r] || tk_i >= tk_ih[tk_r]) continue;");
    line(E, "const tk_i64 v_%s = tk_i + tk_r * %d;", s->name, D);
    set_copy(E, 0);
    for (int i = 0; i < s->nbody; i++) vx_assign(E, s->body[i]);
    E->indent--;
    line(E, "}");
    E->vmask = NULL;
    E->nvload = 0;
}

/* Steps tk_i of [lo, hi) (C expressions), the blocks but where skip holds. */
static void vx_skew_steps_loop(emitter *E, const tk_stmt *s, int D, const char *lo, const char *hi, const char *skip,
                               int cond, const char *m) {
    line(E, "for (tk_i64 tk_i = %s; tk_i < %s; ++tk_i) {", lo, hi);
    E->indent++;
    vx_skew_step(E, s, D, skip, cond, m);
    E->indent--;
    line(E, "}");
}

static void vx_skewed_loop(emitter *E, const tk_stmt *s, int D) {
    int R = E->nblocks;
    unsigned char seen[64] = {0};
    line(E, "{");
    E->indent++;
    for (int i = 0; i < s->nbody; i++) vx_reads(E, s->body[i]->value, vx_span, seen);
    /* [a, b): some lane of block r on; [c, d): every lane; [il, ih): [c, d) in steps i */
    line(E, "tk_i64 tk_a[%d], tk_b[%d], tk_c[%d], tk_d[%d], tk_il[%d], tk_ih[%d];", R, R, R, R, R, R);
    line(E, "for (int tk_r = 0; tk_r < %d; ++tk_r) {", R);
    E->indent++;
    vx_fold_bounds(E, R);
    line(E, "tk_a[tk_r] = tk_maxi(tk_mn, tk_mn + tk_ua);");
    line(E, "tk_b[tk_r] = tk_mini(tk_mx, tk_mn + tk_ub);");
    line(E, "tk_c[tk_r] = tk_maxi(tk_a[tk_r], tk_mn + tk_uc);");
    line(E, "tk_d[tk_r] = tk_mini(tk_b[tk_r], tk_mn + tk_ud);");
    line(E, "if (tk_c[tk_r] >= tk_d[tk_r]) tk_c[tk_r] = tk_d[tk_r] = tk_b[tk_r] > tk_a[tk_r] ? tk_b[tk_r] : tk_a[tk_r];");
    line(E, "tk_il[tk_r] = tk_c[tk_r] - tk_r * %d, tk_ih[tk_r] = tk_d[tk_r] - tk_r * %d;", D, D);
    E->indent--;
    line(E, "}");
    vx_skew_masked(E, s, "tk_a", "tk_c");
    line(E, "tk_i64 tk_imin = tk_il[0], tk_imax = tk_ih[0], tk_ia = tk_il[0], tk_ib = tk_ih[0];");
    line(E, "for (int tk_r = 1; tk_r < %d; ++tk_r) {", R);
    E->indent++;
    line(E, "tk_imin = tk_mini(tk_imin, tk_il[tk_r]);");
    line(E, "tk_imax = tk_maxi(tk_imax, tk_ih[tk_r]);");
    line(E, "tk_ia = tk_maxi(tk_ia, tk_il[tk_r]);");
    line(E, "tk_ib = tk_mini(tk_ib, tk_ih[tk_r]);");
    E->indent--;
    line(E, "}");
    /* blocks p(0), p(1), ... in decreasing order of their ranges in i (D > 0:
     * block r starts r * D earlier, so typically 0, 1, ...): then the blocks
     * on before the common part are p(s..R-1), after it p(0..s-1), a fixed
     * set over each stretch between two bounds, and no step tests which.
     * p(s) is s for D > 0, R - 1 - s for D < 0. */
    char lo[48], hi[48], skip[48];
    line(E, "int tk_mono = tk_ia < tk_ib;");
    line(E, "for (int tk_s = 1; tk_s < %d; ++tk_s)", R);
    if (D > 0) line(E, "    tk_mono &= tk_il[tk_s - 1] >= tk_il[tk_s] && tk_ih[tk_s - 1] >= tk_ih[tk_s];");
    else line(E, "    tk_mono &= tk_il[%d - tk_s] >= tk_il[%d - tk_s] && tk_ih[%d - tk_s] >= tk_ih[%d - tk_s];", R, R - 1, R, R - 1);
    line(E, "if (tk_mono) {");
    E->indent++;
    for (int before = 1; before >= 0; before--) {
        /* stretch s: steps [x[p(s)], x[p(s - 1)]) */
        const char *x = before ? "tk_il" : "tk_ih";
        if (D > 0) {
            snprintf(lo, sizeof lo, "%s[tk_s]", x);
            snprintf(hi, sizeof hi, "%s[tk_s - 1]", x);
        } else {
            snprintf(lo, sizeof lo, "%s[%d - tk_s]", x, R - 1);
            snprintf(hi, sizeof hi, "%s[%d - tk_s]", x, R);
        }
        /* its blocks: before, p(s..R-1); after, p(0..s-1) */
        if (before && D > 0) snprintf(skip, sizeof skip, "tk_r < tk_s");
        else if (before) snprintf(skip, sizeof skip, "tk_r >= %d - tk_s", R);
        else if (D > 0) snprintf(skip, sizeof skip, "tk_r >= tk_s");
        else snprintf(skip, sizeof skip, "tk_r < %d - tk_s", R);
        line(E, "TK_UNROLL for (int tk_s = %d; tk_s >= 1; --tk_s)", R - 1);
        E->indent++;
        vx_skew_steps_loop(E, s, D, lo, hi, skip, 0, NULL);
        E->indent--;
        if (before) vx_skew_steps_loop(E, s, D, "tk_ia", "tk_ib", NULL, 0, NULL);
    }
    E->indent--;
    line(E, "} else {");
    E->indent++;
    line(E, "if (tk_ia >= tk_ib) tk_ia = tk_ib = tk_imin;");
    vx_skew_steps_loop(E, s, D, "tk_imin", "tk_ia", NULL, 1, NULL);
    vx_skew_steps_loop(E, s, D, "tk_ia", "tk_ib", NULL, 0, NULL);
    vx_skew_steps_loop(E, s, D, "tk_ib", "tk_imax", NULL, 1, NULL);
    E->indent--;
    line(E, "}");
    /* the masked tails: skewed too when every block's equals block 0's
     * shifted by r * D (the same steps of i, the same lane mask) */
    line(E, "int tk_tail = 1;");
    line(E, "for (int tk_r = 1; tk_r < %d; ++tk_r) {", R);
    E->indent++;
    line(E, "tk_tail &= tk_d[tk_r] - tk_r * %d == tk_d[0] && tk_b[tk_r] - tk_r * %d == tk_b[0];", D, D);
    line(E, "for (int tk_q = 0; tk_q < %d; ++tk_q) tk_tail &= tk_hr[tk_r][tk_q] - tk_r * %d == tk_hr[0][tk_q];",
         E->lanes, D);
    E->indent--;
    line(E, "}");
    line(E, "if (tk_tail) {");
    E->indent++;
    line(E, "const tk_v%s tk_xl = tk_vld_%s(tk_lr[0]), tk_xh = tk_vld_%s(tk_hr[0]);", vx_msfx(E), vx_msfx(E),
         vx_msfx(E));
    vx_skew_steps_loop(E, s, D, "tk_d[0]", "tk_b[0]", NULL, 0, "tk_m");
    E->indent--;
    line(E, "} else {");
    E->indent++;
    vx_skew_masked(E, s, "tk_d", "tk_b");
    E->indent--;
    line(E, "}");
    E->indent--;
    line(E, "}");
}

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
            if (declares_tensor(E, i) && has_ell(param(E, i)))
                tk_buf_printf(E->b, arg ? ", o_%s" : ", tk_i64 o_%s", param(E, i)->name);
        for (int i = 0; i < d->noutputs; i++) tk_buf_printf(E->b, arg ? ", o_%s" : ", tk_i64 o_%s", output(E, i)->name);
        if (op->random) tk_buf_puts(E->b, arg ? ", tk_bi" : ", tk_i64 tk_bi");
    }
}

/* The whole loop on vectors: `if (unit strides) outlined(...); else`
 * before the omp simd form (which follows the else). The loop runs in a
 * function of its own, compiled per instruction set: in the kernel's body,
 * among its other loops, GCC's register allocator spills the accumulators
 * and row pointers that a small function keeps in registers. */
void vx_loop(emitter *E, const tk_stmt *s, int nb) {
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
    int skew = vx_skew(E, s, nb);
    E->symc = 1;
    E->vx_acc = used_local;
    /* per-lane locals the loop reads or sets: arrays over the copies, in
     * registers for the loop */
    for (int r = 0; r < E->op->nlocals; r++)
        if (used_local[r]) {
            const char *nm = E->op->locals[r].name;
            begin_line(E);
            tk_buf_printf(E->b, "%s *const v_%s[%d] = {", k_vctype[E->op->locals[r].type], nm, N);
            for (int c = 0; c < N; c++) tk_buf_printf(E->b, "%sv_%s_%d", c ? ", " : "", nm, c);
            tk_buf_puts(E->b, "};\n");
            line(E, "tk_v%s x_%s[%d];", S, nm, N);
            line(E, "TK_UNROLL for (int tk_q = 0; tk_q < %d; ++tk_q) x_%s[tk_q] = tk_vld_%s(v_%s[tk_q]);", N, nm, S,
                 nm);
        }
    {   /* the bound sets' lane ranges, indexed by set */
        const char *I = E->ftype == TK_V_F64 ? "long long" : "int";
        for (int h = 0; h < 2; h++) {
            begin_line(E);
            tk_buf_printf(E->b, "const %s *const tk_%cr[%d] = {", I, h ? 'h' : 'l', nb);
            for (int k = 0; k < nb; k++) tk_buf_printf(E->b, "%stk_%cr%d", k ? ", " : "", h ? 'h' : 'l', k);
            tk_buf_puts(E->b, "};\n");
        }
    }
    vx_rows(E, s);
    if (skew) {
        vx_skewed_loop(E, s, skew);
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
            line(E, "TK_UNROLL for (int tk_q = 0; tk_q < %d; ++tk_q) tk_vst_%s(v_%s[tk_q], x_%s[tk_q]);", N, S,
                 E->op->locals[r].name, E->op->locals[r].name);
    E->symc = 0;
    E->vx_acc = NULL;
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
