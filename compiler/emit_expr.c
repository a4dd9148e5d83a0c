/* emit_expr.c - prints expressions and statements, for every target and
 * variant: names, tensor reads and offsets, calls, operators, assignments,
 * stores, ifs, range loops, and statement blocks. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <limits.h>
#include <string.h>

#include "emit.h"

/* ORDER tk_vtype */
const char *const k_vctype[] = {"void", "int", "tk_i64", "float", "double"};

void line(emitter *E, const char *fmt, ...) {
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

const tk_param *param(const emitter *E, int i) { return &E->op->decl->params[i]; }
const tk_param *output(const emitter *E, int i) { return &E->op->decl->outputs[i]; }
int is_float_vt(tk_vtype t) { return t == TK_V_F32 || t == TK_V_F64; }

int has_ell(const tk_param *p) { return p->ndims > 0 && p->dims[0]->kind == TK_E_ELLIPSIS; }

/* ---- expressions ---------------------------------------------------------- */

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
    if (isinf(v)) {   /* the spec's inf (a literal cannot overflow: lex.c) */
        tk_buf_puts(E->b, v > 0 ? (t == TK_V_F32 ? "TK_INFF" : "TK_INF") : (t == TK_V_F32 ? "(-TK_INFF)" : "(-TK_INF)"));
        return;
    }
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
        if (E->symc && E->nblocks > 1) {   /* lane block tk_r */
            if (E->lane_rev) tk_buf_printf(E->b, "(v_%s + (%d * tk_r + %d - %s))", name, E->lanes, E->lanes - 1, j);
            else tk_buf_printf(E->b, "(v_%s + (%d * tk_r + %s))", name, E->lanes, j);
        } else if (E->lane_rev) tk_buf_printf(E->b, "(v_%s + (%d - %s))", name, off + E->lanes - 1, j);
        else if (off) tk_buf_printf(E->b, "(v_%s + (%d + %s))", name, off, j);
        else tk_buf_printf(E->b, "(v_%s + %s)", name, j);
    } else if (E->lanes && strcmp(name, d->loop_vars[E->gdim]) == 0) {
        if (E->symc && E->ngroup > 1) tk_buf_printf(E->b, "(v_%s + tk_g)", name);
        else if (E->gcopy > 0) tk_buf_printf(E->b, "(v_%s + %d)", name, E->gcopy);
        else tk_buf_printf(E->b, "v_%s", name);
    } else if (E->copy > 0 && strcmp(name, d->loop_vars[E->gdim]) == 0)
        tk_buf_printf(E->b, "(v_%s + %d)", name, E->copy);
    else
        tk_buf_printf(E->b, "v_%s", name);
}

/* A local: each unroll copy has its own, inner loop variables are shared. */
void local_name(emitter *E, const char *name, int ref) {
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
void tensor_offset_n(emitter *E, const tk_expr *e, int n) {
    const tk_param *p = param(E, e->ref);
    if (has_ell(p)) tk_buf_printf(E->b, "o_%s + ", p->name);
    for (int i = 0; i < n; i++) {
        tk_buf_puts(E->b, i ? " + " : "");
        expr(E, e->args[i], TK_V_INT);
        stride(E, p, i);
    }
    if (n == 0) tk_buf_puts(E->b, "0");
}

void tensor_offset(emitter *E, const tk_expr *e) { tensor_offset_n(E, e, e->nargs); }

/* Bounds checks (docs/spec.md, Bounds; the plan decides which): the test
 * that the indices in mask (bit k: index[k]) of an access to tensor slot
 * `slot` (n explicit dims) are in range, tk_ck terms joined by &&. Each
 * names the access's line:col, the tensor, the dim and whether it stores,
 * for the message the caller raises (tk_kerr). */
static void bound_test(emitter *E, int slot, tk_expr *const *index, int n, unsigned mask, tk_loc loc, int store) {
    const char *A = E->tg->args;
    int first = 1;
    for (int k = 0; k < n; k++) {
        if (!(mask >> k & 1)) continue;
        tk_buf_printf(E->b, "%stk_ck(%serr, ", first ? "" : " && ", A);
        expr(E, index[k], TK_V_INT);
        tk_buf_printf(E->b, ", %st[%d].size[%st[%d].ndim - %d], %d, %d, %d)", A, slot, A, slot, n - k, loc.line,
                      loc.col, slot | (store ? 256 : 0) | k << 16);
        first = 0;
    }
}

/* A checked read (TK_EMIT_CHECKED: every index; data-dependent indices of
 * a gather on the CPU): opens "(tests ? " before the element; the caller
 * closes it with " : 0)". Returns whether it opened one. */
static int checked_read_open(emitter *E, const tk_expr *e, int slot) {
    unsigned mask = E->plan->checked ? (1u << e->nargs) - 1 : E->plan->data_checked ? e->data_index : 0;
    if (mask == 0 || e->nargs == 0) return 0;
    tk_buf_puts(E->b, "(");
    bound_test(E, slot, e->args, e->nargs, mask, e->loc, 0);
    tk_buf_puts(E->b, " ? ");
    return 1;
}

/* A stored element of each dtype as the value the body computes with: text before and after it. */
const char *const k_to_value[TK_DTYPE_COUNT] = {   /* ORDER DTYPE */
    "(", "(tk_i64)", "(tk_i64)", "(tk_i64)", "(tk_i64)", "", "tk_f16_to_f32(", "tk_bf16_to_f32(", "", ""};
const char *const k_to_value_end[TK_DTYPE_COUNT] = {" != 0)", "", "", "", "", "", ")", ")", "", ""};

/* A row loop reading back an element of output e->ref that its iteration owns. */
static void output_read(emitter *E, const tk_expr *e) {
    const tk_param *o = output(E, e->ref);
    tk_dtype dt = tk_variant_out_dtype(E->op, E->variant, e->ref);
    const char *pre = E->raw_read ? "" : k_to_value[dt], *post = E->raw_read ? "" : k_to_value_end[dt];
    int ck = checked_read_open(E, e, E->op->out_slot[e->ref]);
    tk_buf_printf(E->b, "%st_%s[", pre, o->name);
    if (has_ell(o)) tk_buf_printf(E->b, "o_%s + ", o->name);
    for (int i = 0; i < e->nargs; i++) {
        tk_buf_puts(E->b, i ? " + " : "");
        expr(E, e->args[i], TK_V_INT);
        stride(E, o, i);
    }
    if (e->nargs == 0) tk_buf_puts(E->b, "0");
    tk_buf_printf(E->b, "]%s", post);
    if (ck) tk_buf_puts(E->b, " : 0)");
}

static void tensor_read(emitter *E, const tk_expr *e) {
    if (e->is_out) {
        output_read(E, e);
        return;
    }
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
        tk_buf_printf(E->b, E->symc && E->ngroup > 1 ? "%stk_rp%d[tk_g][" : "%stk_rp%d[", pre, r);
        expr(E, e->args[e->nargs - 1], TK_V_INT);
        stride(E, p, e->nargs - 1);
        tk_buf_printf(E->b, "]%s", post);
        return;
    }
    if (E->chunk && !p->mut) {   /* GPU chunks: the asm of their vector stores would cost the implicit read-only
                                  * path ('mut': written by this kernel, so not through the read-only cache) */
        tk_buf_printf(E->b, "%s__ldg(&t_%s[", pre, p->name);
        tensor_offset(E, e);
        tk_buf_printf(E->b, "])%s", post);
        return;
    }
    int ck = checked_read_open(E, e, E->op->slot[e->ref]);
    tk_buf_printf(E->b, "%st_%s[", pre, p->name);
    tensor_offset(E, e);
    tk_buf_printf(E->b, "]%s", post);
    if (ck) tk_buf_puts(E->b, " : 0)");
}

static void call_f(emitter *E, const char *f32name, const char *f64name, const tk_expr *e, tk_vtype t) {
    tk_buf_printf(E->b, "%s(", t == TK_V_F32 ? f32name : f64name);
    for (int i = 0; i < e->nargs; i++) {
        tk_buf_puts(E->b, i ? ", " : "");
        expr(E, e->args[i], t);
    }
    tk_buf_puts(E->b, ")");
}

/* Whether float32 exp, tanh, erf and sigmoid print as tk_kernel.h's
 * branch-free forms (tk_vexpf ...), which loops vectorise, where glibc's
 * expf, tanhf and erff are calls they cannot: every CPU kernel but the plain
 * reference (tests/c/test_variants.c compares the two). */
static int cpu_vmaths(const emitter *E) { return !E->tg->gpu && !E->plain; }

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
    if (!strcmp(f, "rand") || !strcmp(f, "randn")) {   /* the batch index: decompose */
        tk_buf_printf(E->b, "tk_%s%s(", f, t == TK_V_F32 ? "f" : "");
        expr(E, e->args[0], TK_V_INT);
        tk_buf_puts(E->b, ", ");
        expr(E, e->args[1], TK_V_INT);
        tk_buf_printf(E->b, ", %s)", E->op->has_ellipsis ? "tk_bi" : "0");
        return;
    }
    if (!strcmp(f, "sigmoid")) {
        call_f(E, cpu_vmaths(E) ? "tk_vsigmoidf" : "tk_sigmoidf", "tk_sigmoid", e, t);
        return;
    }
    char f32[16];
    snprintf(f32, sizeof f32, "%sf", f);
    if (cpu_vmaths(E) && !strcmp(f, "exp")) snprintf(f32, sizeof f32, "tk_vexpf");
    if (cpu_vmaths(E) && (!strcmp(f, "tanh") || !strcmp(f, "erf"))) snprintf(f32, sizeof f32, "tk_v%sf", f);
    call_f(E, f32, f, e, t);
}

/* GPU: the tk_kargs.i slot of divisor e when it is an int scalar or a dim
 * by name (its multiplier is in tk_kargs.idiv, see tk_kdiv), else -1. */
int kdiv_slot(const emitter *E, const tk_expr *e) {
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
    if (e->op == TK_OPC_FLOORDIV) fn = t == TK_V_INT ? "tk_floordiv" : t == TK_V_F32 ? "tk_floordivf_py" : "tk_floordiv_py";
    if (e->op == TK_OPC_MOD) fn = t == TK_V_INT ? "tk_mod" : t == TK_V_F32 ? "tk_fmodf_py" : "tk_fmod_py";
    if (e->op == TK_OPC_POW) fn = t == TK_V_F32 ? "powf" : "pow";
    if (e->op == TK_OPC_MUL && E->tg->gpu && E->op->decl->exact && is_float_vt(t))
        fn = t == TK_V_F32 ? "__fmul_rn" : "__dmul_rn";   /* never contracted (k_exact_begin, emit.c) */
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

/* Whether evaluating e can neither touch memory nor trap (no tensor read,
 * no integer division or modulo), so that both arms of a select may be
 * computed. */
static int cannot_fault(const tk_expr *e) {
    if (!e) return 1;
    if (e->kind == TK_E_INDEX) return 0;
    if (e->kind == TK_E_BINARY && (e->op == TK_OPC_DIV || e->op == TK_OPC_FLOORDIV || e->op == TK_OPC_MOD) &&
        e->vtype != TK_V_F32 && e->vtype != TK_V_F64)
        return 0;
    for (int i = 0; i < e->nargs; i++)
        if (!cannot_fault(e->args[i])) return 0;
    return 1;
}

/* Emits e converted to type want (TK_V_NONE: e's own type). */
void expr(emitter *E, const tk_expr *e, tk_vtype want) {
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
    case TK_E_COND: {
        /* in vectorised loops, a bitwise select where both arms may be
         * computed: GCC turns `c ? 1.0f : e` into branches it then cannot
         * vectorise (wkv with one exp for two: 26 -> 86 ms) */
        int bits = E->vexp && (e->vtype == TK_V_F32 || e->vtype == TK_V_F64) && cannot_fault(e->args[0]) &&
                   cannot_fault(e->args[2]);
        tk_buf_puts(E->b, !bits ? "(" : e->vtype == TK_V_F32 ? "tk_self(" : "tk_seld(");
        expr(E, e->args[1], TK_V_BOOL);
        tk_buf_puts(E->b, bits ? ", " : " ? ");
        expr(E, e->args[0], e->vtype);
        tk_buf_puts(E->b, bits ? ", " : " : ");
        expr(E, e->args[2], e->vtype);
        tk_buf_puts(E->b, ")");
        break;
    }
    case TK_E_BINARY: binary(E, e); break;
    default: break;
    }
    close_conv(E, e->vtype, want);
}

/* ---- statements ----------------------------------------------------------- */

void begin_line(emitter *E) {
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
void store_target(emitter *E, const tk_stmt *s) {
    const tk_param *o = output(E, s->ref);
    tk_buf_printf(E->b, "t_%s[", o->name);
    if (has_ell(o)) tk_buf_printf(E->b, "o_%s + ", o->name);
    for (int i = 0; i < s->nindex; i++) {
        tk_buf_puts(E->b, i ? " + " : "");
        if (E->plan->row_loop) expr(E, s->index[i], TK_V_INT);   /* any index on the dims it owns */
        else loop_var(E, s->index[i]->name);
        stride(E, o, i);
    }
    if (s->nindex == 0) tk_buf_puts(E->b, "0");
    tk_buf_puts(E->b, "]");
}

static void store(emitter *E, const tk_stmt *s) {
    tk_dtype dt = tk_variant_out_dtype(E->op, E->variant, s->ref);
    unsigned checks = store_checks(E->plan, s);
    begin_line(E);
    if (checks) {   /* an index not proven in range (plan_bounds.c): the store happens only when all are */
        tk_buf_puts(E->b, "if (");
        bound_test(E, E->op->out_slot[s->ref], s->index, s->nindex, checks, s->loc, 1);
        tk_buf_puts(E->b, ") ");
    }
    if (E->in_chunk && E->vst[s->ref]) tk_buf_printf(E->b, "tk_o%d.e[tk_k]", s->ref);
    else store_target(E, s);
    tk_buf_puts(E->b, " = ");
    if ((dt == TK_F16 || dt == TK_BF16) && s->value->kind == TK_E_INDEX && !E->plan->checked &&
        !(E->plan->data_checked && s->value->data_index) &&
        (s->value->is_out ? tk_variant_out_dtype(E->op, E->variant, s->value->ref)
                          : tk_variant_dtype(E->op, E->variant, s->value->ref)) == dt) {
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
int reduction_vars(const emitter *E, const tk_stmt *loop, int *refs, int max) {
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
    int n = E->tg->gpu || E->plain || E->plan->checked ? 0 : reduction_vars(E, loop, refs, 16);
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
void range_loop(emitter *E, const tk_stmt *s, const char *lo, const char *hi, int c0, int c1) {
    int vec = E->plan->row_loop && !E->tg->gpu && !E->in_lane && row_vec_open(E, s, c0, c1);   /* CPU row loops: as planned */
    if (!E->plan->row_loop && !E->plan->across) simd_pragma(E, s, c0, c1);
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
    if (vec) row_vec_close(E, s, c0, c1);
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

void block(emitter *E, tk_stmt **body, int n) {
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

/* A row loop in parts (plan_rows.c, plan_parts): part tk_pt of tk_np
 * (declared by the caller: kargs.part of kargs.nparts on the CPU, the
 * thread on CUDA) runs the statements before the parted loop (those that
 * store only in part 0: the others start from the -0.0 or 0 their outputs
 * hold) and its share of the loop's range, the parts' shares as even as
 * integers allow. */
void parted_body(emitter *E) {
    const tk_opdecl *d = E->op->decl;
    const tk_stmt *s = E->plan->rows.parts;
    for (int i = 0; i + 1 < d->nbody; i++) {
        int st = E->plan->rows.part0[i];
        if (st) {
            line(E, "if (tk_pt == 0) {");
            E->indent++;
        }
        block(E, &d->body[i], 1);
        if (st) {
            E->indent--;
            line(E, "}");
        }
    }
    char lo[96], hi[96];
    snprintf(lo, sizeof lo, "r_%s_lo", s->name);
    snprintf(hi, sizeof hi, "r_%s_end", s->name);
    line(E, "{");
    E->indent++;
    begin_line(E);
    tk_buf_puts(E->b, "const tk_i64 tk_phi = ");
    expr(E, s->hi, TK_V_INT);
    tk_buf_puts(E->b, ";\n");
    begin_line(E);
    tk_buf_puts(E->b, "const tk_i64 tk_plo = ");
    if (s->lo) expr(E, s->lo, TK_V_INT);
    else tk_buf_puts(E->b, "0");
    tk_buf_puts(E->b, ";\n");
    line(E, "const tk_i64 tk_pn = tk_phi > tk_plo ? tk_phi - tk_plo : 0, tk_pq = tk_pn / tk_np, tk_pr = tk_pn %% tk_np;");
    line(E, "const tk_i64 %s = tk_plo + tk_pq * tk_pt + tk_mini(tk_pt, tk_pr);", lo);
    line(E, "const tk_i64 %s = %s + tk_pq + (tk_pt < tk_pr);", hi, lo);
    range_loop(E, s, lo, hi, E->copy, E->copy + 1);
    E->indent--;
    line(E, "}");
}
