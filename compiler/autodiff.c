/* autodiff.c - 'backward auto': derives the backward op of an element-wise
 * op as spec text (docs/autograd.md, Derived backward ops).
 *
 * The op's body is replayed as straight-line code, one local a value
 * (a "tape": every operation and read of the forward, and every assignment
 * but a declaration, which names its value, gets its own local), with its
 * `if` statements and conditional expressions turned into guards: every
 * branch is evaluated (a float made in one is 0 outside it), and a value
 * made under a guard passes gradient only where the guard holds (`(d * b)
 * if g else 0.0`), so a branch not taken adds exactly zero, never 0 * inf =
 * NaN (torch.where's trap). Then
 * the adjoints are accumulated in reverse order, each declared by its first
 * contribution, and every float tensor parameter's adjoint is stored as its
 * gradient. Lines nothing needs are dropped, so a parameter whose value no
 * gradient uses is not read (the shim then saves it for its shape alone).
 *
 * What it differentiates: the element-wise form, `if`, locals, the
 * operators and functions of the language; tensors read at the loop's own
 * index, or (no '...') at its last dims: a broadcast, whose gradient keeps
 * the loop's dims and which torch sums to the tensor's shape. Row loops,
 * and inner loops that reduce a row, are autodiff_rows.c's, on this tape:
 * the row's statements are one, each inner loop's body another (a block).
 * Everything else (gathers, scans, 'mut', scratch) is an error at its
 * place: write those backward ops by hand. The loader (api.c) parses and
 * checks the text, and for 'backward auto 2' derives it in turn. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autodiff.h"

void ad_fail(ad *s, tk_loc loc, const char *fmt, ...) {
    if (s->failed || (s->row && s->row->failed)) return;
    s->failed = 1;
    if (s->row) s->row->failed = 1;
    va_list ap;
    va_start(ap, fmt);
    char msg[640];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tk_error_set(s->err, TK_ERR_CHECK, s->d->file, loc, "backward auto of '%s': %s", s->d->name, msg);
}

void ad_oom(ad *s) {
    if (!s->failed && !(s->row && s->row->failed))
        tk_error_set(s->err, TK_ERR_NOMEM, s->d->file, s->d->loc, "out of memory");
    s->failed = 1;
    if (s->row) s->row->failed = 1;
}

/* printf into s's arena; "" (and s failed) when memory runs out. */
const char *ad_fmt(ad *s, const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    int n = vsnprintf(NULL, 0, f, ap);
    va_end(ap);
    char *p = n >= 0 ? tk_arena_alloc(s->mem, (size_t)n + 1) : NULL;
    if (!p) {
        ad_oom(s);
        return "";
    }
    va_start(ap, f);
    vsnprintf(p, (size_t)n + 1, f, ap);
    va_end(ap);
    return p;
}

/* Grows *arr (n used, *cap slots of size sz) for one more; 0 when out of memory. */
int ad_grow(ad *s, void **arr, int n, int *cap, size_t sz) {
    if (n < *cap) return 1;
    int c = *cap ? *cap * 2 : 64;
    void *p = tk_arena_alloc(s->mem, sz * (size_t)c);
    if (!p) {
        ad_oom(s);
        return 0;
    }
    if (n) memcpy(p, *arr, sz * (size_t)n);
    *arr = p;
    *cap = c;
    return 1;
}

int ad_is_float_type(tk_vtype t) { return t == TK_V_F32 || t == TK_V_F64; }

/* ---- exact spec text of header expressions -------------------------------- */

/* e's exact text in s's arena. */
const char *ad_expr_str(ad *s, const tk_expr *e) {
    tk_buf b = {0};
    tk_expr_spec(&b, e);
    const char *t = b.oom || !b.p ? (ad_oom(s), "") : ad_fmt(s, "%s", b.p);
    free(b.p);
    return t;
}

/* A dtype mask as spec text: a class name or dtypes joined by '|'. */
static void print_mask(tk_buf *b, unsigned mask) {
    if (mask == TK_DTYPES_ANY) { tk_buf_puts(b, "any"); return; }
    if (mask == TK_DTYPES_FLOAT) { tk_buf_puts(b, "float"); return; }
    if (mask == TK_DTYPES_INT) { tk_buf_puts(b, "int"); return; }
    const char *sep = "";
    for (int t = 0; t < TK_DTYPE_COUNT; t++)
        if (mask & (1u << t)) {
            tk_buf_printf(b, "%s%s", sep, tk_dtype_name((tk_dtype)t));
            sep = "|";
        }
}

/* The dtype of a tensor whose dtype is tensor parameter root's: its name
 * when that is one dtype, else `root.dtype`. */
static void print_root_dtype(tk_buf *b, const tk_opdecl *d, int root) {
    unsigned m = d->params[root].dtype_mask;
    if (m && !(m & (m - 1))) print_mask(b, m);
    else tk_buf_printf(b, "%s.dtype", d->params[root].name);
}

static void print_dims(tk_buf *b, const tk_param *p) {
    tk_buf_puts(b, "[");
    for (int i = 0; i < p->ndims; i++) {
        if (i) tk_buf_puts(b, ", ");
        tk_expr_spec(b, p->dims[i]);
    }
    tk_buf_puts(b, "]");
}

/* A forward parameter, declared as the forward declares it. */
static void print_param(tk_buf *b, const tk_param *p) {
    static const char *const scalars[] = {"", "int", "float", "bool"};   /* ORDER tk_param_kind */
    tk_buf_printf(b, "%s: ", p->name);
    if (p->kind != TK_P_TENSOR) {
        tk_buf_printf(b, "%s%s", scalars[p->kind], p->optional ? "?" : "");
    } else {
        if (p->dtype_of) tk_buf_printf(b, "%s.dtype", p->dtype_of);
        else print_mask(b, p->dtype_mask);
        print_dims(b, p);
        if (p->optional) tk_buf_puts(b, "?");
    }
    if (p->default_value) {
        tk_buf_puts(b, " = ");
        tk_expr_spec(b, p->default_value);
    }
}

/* ---- the tape ---------------------------------------------------------- */

int ad_new_val(ad *s, val_kind kind, int is_float, atom guard, const char *local) {
    if (!ad_grow(s, (void **)&s->vals, s->nvals, &s->capv, sizeof *s->vals)) return -1;
    int k = s->nvals++;
    val *v = &s->vals[k];
    memset(v, 0, sizeof *v);
    v->kind = kind;
    v->is_float = is_float;
    v->guard = guard;
    v->prev = -1;
    v->name = local ? ad_fmt(s, "%s%d_%s", s->pre, k, local) : ad_fmt(s, "%s%d", s->pre, k);
    return k;
}

atom ad_val_atom(ad *s, int k) {
    atom a = {k, k >= 0 ? s->vals[k].name : "", k >= 0 && s->vals[k].is_float};
    return a;
}

atom ad_leaf(const char *text, int is_float) {
    atom a = {-1, text, is_float};
    return a;
}

void ad_emit(ad *s, int key, const char *text) {
    if (s->failed || !ad_grow(s, (void **)&s->lines, s->nlines, &s->capl, sizeof *s->lines)) return;
    s->lines[s->nlines].text = text;
    s->lines[s->nlines++].key = key;
}

int ad_find_local(const ad *s, const char *name) {
    for (int i = s->nlocal - 1; i >= 0; i--)
        if (strcmp(s->locals[i].name, name) == 0) return i;
    return -1;
}

/* Points local name at value k. */
void ad_set_local(ad *s, const char *name, int k) {
    int i = ad_find_local(s, name);
    if (i < 0) {
        if (!ad_grow(s, (void **)&s->locals, s->nlocal, &s->caplocal, sizeof *s->locals)) return;
        i = s->nlocal++;
        s->locals[i].name = name;
    }
    s->locals[i].val = k;
}

/* The guard "g and c" (negate: "g and not c"); g's text NULL: always. */
static atom guard_and(ad *s, atom g, atom c, int negate) {
    if (!g.text && !negate) return c;
    int k = ad_new_val(s, V_TEMP, 0, g, NULL);
    if (k < 0) return g;
    if (!g.text) ad_emit(s, 2 * k, ad_fmt(s, "%s = not %s", s->vals[k].name, c.text));
    else ad_emit(s, 2 * k, ad_fmt(s, "%s = %s and %s%s", s->vals[k].name, g.text, negate ? "not " : "", c.text));
    return ad_val_atom(s, k);
}

/* Whether returned output o can be a float tensor (it carries a gradient). */
int ad_output_float(const tk_op *op, int o) {
    int root = op->out_dtype_root[o];
    unsigned m = root >= 0 ? op->decl->params[root].dtype_mask : 1u << op->out_dtype_fixed[o];
    return (m & TK_DTYPES_FLOAT) != 0;
}

/* ---- the forward, as a tape --------------------------------------------- */

/* The variables of the row's index space (the loop's, and virt's owned
 * dim after them): how many. */
static int nvars(const ad *s) { return s->d->nloop + (s->owned == s->d->nloop); }

static ad *row_of(ad *s) { return s->row ? s->row : s; }

/* Variable j as the body names it (a block: the inner loop's on the owned
 * dim) and as the derived op does (derived: 1). */
static const char *loop_var(const ad *s, int j, int derived) {
    if (j != s->owned) return s->d->loop_vars[j];
    if (s->mode == AD_ELEMENTS || s->mode == AD_ROW) return "_";
    return derived ? s->inner : s->inner_src;
}

/* The dim variable j runs over (virt's owned dim: NULL until a read names it). */
static const tk_expr *var_dim(ad *s, int j) {
    const tk_param *lo = &s->d->outputs[s->op->loop_out];
    int out_batch = lo->ndims > 0 && lo->dims[0]->kind == TK_E_ELLIPSIS;
    return j == s->owned && row_of(s)->virt ? row_of(s)->vdim : lo->dims[out_batch + j];
}

/* The variables accesses align with, into idx: every one, but the row's
 * tape leaves out the owned dim (its reads and stores are the row's); how many. */
static int access_vars(const ad *s, int *idx) {
    int m = 0;
    for (int j = 0; j < nvars(s); j++)
        if (!(s->mode == AD_ROW && j == s->owned)) idx[m++] = j;
    return m;
}

/* The index tensor tp is read or stored at: the last variables, one a dim of tp. */
const char *ad_index(ad *s, const tk_param *tp) {
    int idx[TK_MAX_DIMS + 2], m = access_vars(s, idx), k = tk_explicit_dims(tp);
    const char *t = "";
    for (int j = m - k; j < m; j++) t = ad_fmt(s, "%s%s%s", t, j > m - k ? ", " : "", loop_var(s, idx[j], 1));
    return t;
}

/* The V_READ of parameter p (made once, at its first read). */
atom ad_read_param(ad *s, int p) {
    if (s->read_val[p] < 0) {
        atom always = {-1, NULL, 0};
        int k = ad_new_val(s, V_READ, 1, always, NULL);
        if (k < 0) return ad_leaf("0.0", 1);
        s->read_val[p] = k;
        ad_emit(s, 2 * k, ad_fmt(s, "%s = %s[%s]", s->vals[k].name, s->d->params[p].name,
                                 ad_index(s, &s->d->params[p])));
    }
    return ad_val_atom(s, s->read_val[p]);
}

/* The index accesses are at as the body writes it ("r, i"; the row's tape: "r"). */
static const char *body_index(ad *s) {
    int idx[TK_MAX_DIMS + 2], m = access_vars(s, idx);
    const char *t = "";
    for (int j = 0; j < m; j++) t = ad_fmt(s, "%s%s%s", t, j ? ", " : "", loop_var(s, idx[j], 0));
    return t;
}

/* Whether access e (a read of tensor tp; or, store: a store, st's index, to
 * output tp) is at the loop's index, or, a read of a tensor without '...',
 * at its last variables (in a row loop's inner loop: its variable on the
 * owned dim; the row's tape: the row's variables), each indexing a dim of
 * the loop's output of the same name; else an error at the access. */
int ad_check_index(ad *s, const tk_param *tp, tk_expr *const *args, int nargs, int store, tk_loc loc) {
    const tk_opdecl *d = s->d;
    const tk_param *lo = &d->outputs[s->op->loop_out];
    int batch = tp->ndims > 0 && tp->dims[0]->kind == TK_E_ELLIPSIS;
    int out_batch = lo->ndims > 0 && lo->dims[0]->kind == TK_E_ELLIPSIS;
    int idx[TK_MAX_DIMS + 2], n = access_vars(s, idx), k = nargs;
    int ok = k <= n && (!batch || (k == n && out_batch)) && (!store || k == n);
    for (int j = 0; ok && j < k; j++) {
        const char *v = loop_var(s, idx[n - k + j], 0);
        ok = v && args[j]->kind == TK_E_NAME && strcmp(args[j]->name, v) == 0;
    }
    if (ok) {
        for (int j = 0; j < k; j++) {
            const tk_expr *want = var_dim(s, idx[n - k + j]);
            if (!want) {   /* virt: the first read in an inner loop names the dim it walks */
                row_of(s)->vdim = want = tp->dims[batch + j];
            }
            if (!tk_expr_equal(tp->dims[batch + j], want)) {
                tk_buf pd = {0}, od = {0};
                tk_expr_text(&pd, tp->dims[batch + j], 1);
                tk_expr_text(&od, want, 1);
                const char *v = loop_var(s, idx[n - k + j], 0);
                ad_fail(s, loc, "'%s' is %s at %s, but its dim '%s' is not dim '%s' %s, which %s runs over: name "
                        "them alike", tp->name, store ? "stored" : "read", v, pd.p && !pd.oom ? pd.p : "?",
                        od.p && !od.oom ? od.p : "?",
                        idx[n - k + j] == s->owned && row_of(s)->virt ? "of the tensors its inner loops read"
                                                                      : ad_fmt(s, "of '%s'", lo->name), v);
                free(pd.p);
                free(od.p);
                return 0;
            }
        }
        return 1;
    }
    tk_buf b = {0};
    tk_buf_printf(&b, "%s[", tp->name);
    for (int j = 0; j < nargs; j++) {
        if (j) tk_buf_puts(&b, ", ");
        tk_expr_text(&b, args[j], 0);
    }
    tk_buf_puts(&b, "]");
    const char *what = b.p && !b.oom ? b.p : "an access";
    if (s->mode == AD_ROW)
        ad_fail(s, loc, "%s: outside its inner loops a row's tensors are %s at the row's index [%s] (along the "
                "row: in an inner loop `for i in range(...)`, at [%s%si]); write the backward ops of this op",
                what, store ? "stored" : "read", body_index(s), body_index(s), n ? ", " : "");
    else if (store)
        ad_fail(s, loc, "%s: a store it differentiates is at the loop's index [%s]; write the backward ops of "
                "this op", what, body_index(s));
    else
        ad_fail(s, loc, "%s: it differentiates reads at the loop's index [%s] and, of a tensor without '...', "
                "at its last variables (a broadcast); write the backward ops of this op", what,
                s->mode == AD_ELEMENTS ? s->index : body_index(s));
    free(b.p);
    return 0;
}

/* A V_TEMP of node e over atoms a[0..n): its line "t = <e on the atoms>". */
static atom temp(ad *s, const tk_expr *e, const atom *a, int n, atom g) {
    int k = ad_new_val(s, V_TEMP, ad_is_float_type(e->vtype), g, NULL);
    if (k < 0) return ad_leaf("0", 0);
    val *v = &s->vals[k];
    v->node = e;
    v->na = n;
    for (int i = 0; i < n; i++) v->a[i] = a[i];
    const char *rhs = "";
    switch (e->kind) {
    case TK_E_UNARY:
        rhs = ad_fmt(s, "%s%s%s", tk_opc_text(e->op), e->op == TK_OPC_NOT ? " " : "", a[0].text);
        break;
    case TK_E_BINARY: rhs = ad_fmt(s, "%s %s %s", a[0].text, tk_opc_text(e->op), a[1].text); break;
    case TK_E_COND: rhs = ad_fmt(s, "%s if %s else %s", a[0].text, a[1].text, a[2].text); break;
    case TK_E_CALL:
        rhs = n == 1 ? ad_fmt(s, "%s(%s)", e->name, a[0].text) : ad_fmt(s, "%s(%s, %s)", e->name, a[0].text, a[1].text);
        break;
    default: break;
    }
    /* a float made under a guard is 0 where the guard fails: only uses under the guard read it, and so
     * the derived op's own derivative ('backward auto 2') sees the guard and adds 0, not NaN, there */
    if (g.text && v->is_float)
        rhs = ad_fmt(s, e->kind == TK_E_COND ? "(%s) if %s else 0.0" : "%s if %s else 0.0", rhs, g.text);
    ad_emit(s, 2 * k, ad_fmt(s, "%s = %s", v->name, rhs));
    return ad_val_atom(s, k);
}

atom ad_flatten(ad *s, const tk_expr *e, atom g) {
    atom a[3] = {{-1, "", 0}, {-1, "", 0}, {-1, "", 0}};
    if (s->failed) return ad_leaf("0", 0);
    switch (e->kind) {
    case TK_E_INT: case TK_E_FLOAT: case TK_E_BOOL: case TK_E_ELLIPSIS:
        return ad_leaf(ad_expr_str(s, e), e->kind == TK_E_FLOAT);
    case TK_E_NAME: {
        int i = ad_find_local(s, e->name), k;
        if (i >= 0) return ad_val_atom(s, s->locals[i].val);
        if (s->mode == AD_ELEMENTS) return ad_leaf(e->name, ad_is_float_type(e->vtype));
        if (s->inner_src && strcmp(e->name, s->inner_src) == 0) return ad_leaf(s->inner, 0);
        if (s->mode != AD_ROW && (k = ad_row_name(s, e->name)) >= 0) return ad_val_atom(s, k);
        int unused;
        for (int j = 0; j < s->d->nloop; j++)
            if (strcmp(e->name, s->d->loop_vars[j]) == 0) return ad_leaf(e->name, 0);
        if (tk_resolve_header(s->op, e->name, &unused) == TK_SYM_NONE) {
            ad_fail(s, e->loc, "'%s' is made in an inner loop and read after it (its last iteration's value): "
                    "write the backward ops of this op", e->name);
            return ad_leaf("0", 0);
        }
        return ad_leaf(e->name, ad_is_float_type(e->vtype));
    }
    case TK_E_INDEX: {
        int p;
        if (tk_resolve_header(s->op, e->name, &p) != TK_SYM_TENSOR ||
            !ad_check_index(s, &s->d->params[p], e->args, e->nargs, 0, e->loc)) {
            if (!s->failed) ad_fail(s, e->loc, "'%s' is not a tensor parameter read", e->name);
            return ad_leaf("0", 0);
        }
        if (ad_is_float_type(e->vtype)) return ad_read_param(s, p);
        int k = ad_new_val(s, V_TEMP, 0, g, NULL);
        if (k < 0) return ad_leaf("0", 0);
        s->vals[k].node = e;
        ad_emit(s, 2 * k, ad_fmt(s, "%s = %s[%s]", s->vals[k].name, e->name, ad_index(s, &s->d->params[p])));
        return ad_val_atom(s, k);
    }
    case TK_E_UNARY:
        a[0] = ad_flatten(s, e->args[0], g);
        return temp(s, e, a, 1, g);
    case TK_E_BINARY:
        a[0] = ad_flatten(s, e->args[0], g);
        a[1] = ad_flatten(s, e->args[1], g);
        return temp(s, e, a, 2, g);
    case TK_E_COND: {
        a[1] = ad_flatten(s, e->args[1], g);
        atom gt = guard_and(s, g, a[1], 0), ge = guard_and(s, g, a[1], 1);
        a[0] = ad_flatten(s, e->args[0], gt);
        a[2] = ad_flatten(s, e->args[2], ge);
        atom t = temp(s, e, a, 3, g);
        if (t.val >= 0) {
            s->vals[t.val].g_then = gt;
            s->vals[t.val].g_else = ge;
        }
        return t;
    }
    case TK_E_CALL:
        if (e->nargs < 1 || e->nargs > 2) {
            ad_fail(s, e->loc, "'%s' takes %d arguments", e->name, e->nargs);
            return ad_leaf("0", 0);
        }
        for (int i = 0; i < e->nargs; i++) a[i] = ad_flatten(s, e->args[i], g);
        return temp(s, e, a, e->nargs, g);
    }
    return ad_leaf("0", 0);
}

/* `v op= e` as the operation `v op e` (its node made here: the statement has none). */
static atom augmented(ad *s, const tk_stmt *st, atom v, atom e, atom g) {
    tk_expr *bin = tk_arena_alloc(s->mem, sizeof *bin);
    if (!bin) {
        ad_oom(s);
        return e;
    }
    bin->kind = TK_E_BINARY;
    bin->loc = st->loc;
    bin->op = st->op;
    bin->vtype = st->op == TK_OPC_DIV || st->op == TK_OPC_POW || v.is_float || e.is_float ? TK_V_F32 : TK_V_INT;
    atom ab[2] = {v, e};
    return temp(s, bin, ab, 2, g);
}

/* Replays statements body[0..n) under guard g. */
void ad_walk(ad *s, tk_stmt *const *body, int n, atom g) {
    for (int i = 0; i < n && !s->failed; i++) {
        const tk_stmt *st = body[i];
        switch (st->kind) {
        case TK_S_PASS: break;
        case TK_S_FOR:
            if (s->mode == AD_ROW) {
                ad_row_for(s, st, g);
                break;
            }
            if (s->mode == AD_ELEMENTS)
                ad_fail(s, st->loc, "an inner 'for' loop: it differentiates the element-wise form without inner "
                     "loops (and row loops: `for r, _ in y`); write the backward ops of this op");
            else
                ad_fail(s, st->loc, "a loop inside a row loop's inner loop: it differentiates one level of inner "
                     "loops; write the backward ops of this op");
            return;
        case TK_S_IF: {
            atom c = ad_flatten(s, st->value, g);
            atom gt = guard_and(s, g, c, 0), ge = guard_and(s, g, c, 1);
            ad_walk(s, st->body, st->nbody, gt);
            ad_walk(s, st->orelse, st->norelse, ge);
            break;
        }
        case TK_S_ASSIGN: {
            int li = ad_find_local(s, st->name), prev = li >= 0 ? s->locals[li].val : -1;
            if (li < 0 && s->mode >= AD_FWD && ad_row_name(s, st->name) >= 0) {   /* an accumulator */
                ad_row_acc(s, st, g);
                break;
            }
            atom r = ad_flatten(s, st->value, g);
            if (st->op != TK_OPC_NONE && prev >= 0) r = augmented(s, st, ad_val_atom(s, prev), r, g);
            if (prev < 0 && r.val >= 0) {   /* a declaration names its value: no local of its own */
                ad_set_local(s, st->name, r.val);
                break;
            }
            int is_float = ad_is_float_type(s->op->locals[st->ref].type);
            int k = ad_new_val(s, V_LOCAL, is_float, g, st->name);
            if (k < 0) return;
            val *v = &s->vals[k];
            v->a[0] = r;
            v->na = 1;
            v->prev = prev;
            if (prev < 0) {
                ad_emit(s, 2 * k, ad_fmt(s, "%s = %s", v->name, r.text));
            } else {   /* a copy keeps the local's type, so the value converts as the forward's did */
                ad_emit(s, 2 * k, ad_fmt(s, "%s = %s", v->name, s->vals[prev].name));
                ad_emit(s, 2 * k, g.text ? ad_fmt(s, "%s = %s if %s else %s", v->name, r.text, g.text, v->name)
                                      : ad_fmt(s, "%s = %s", v->name, r.text));
            }
            ad_set_local(s, st->name, k);
            break;
        }
        case TK_S_STORE: {
            int o = st->ref;
            if (s->mode != AD_ELEMENTS && o >= 0 &&
                !ad_check_index(s, &s->d->outputs[o], st->index, st->nindex, 1, st->loc))
                return;
            if (s->mode == AD_ROW && o >= 0 && o < TK_MAX_TENSORS && s->store_loop[o] >= 0) {
                ad_fail(s, st->loc, "'%s' is stored both in an inner loop and outside: it differentiates an output "
                        "stored in one inner loop or at the row's level; write the backward ops of this op",
                        s->d->outputs[o].name);
                return;
            }
            if (o < 0 || o >= s->d->nreturns || !ad_output_float(s->op, o) || s->mode == AD_FWD) break;
            atom r = ad_flatten(s, st->value, g);
            int k = ad_new_val(s, V_OUT, 1, g, NULL);
            if (k < 0) return;
            s->vals[k].a[0] = r;
            s->vals[k].na = 1;
            s->vals[k].prev = s->out_val[o];
            s->out_val[o] = k;
            break;
        }
        }
    }
}

/* ---- the reverse pass ---------------------------------------------------- */

/* Adds expr (under guard g; negate: where g does not hold) to the adjoint of
 * target, declaring it at its first contribution. */
void ad_contrib(ad *s, atom target, atom g, int negate, const char *expr) {
    if (target.val < 0 || !s->vals[target.val].is_float || s->failed) return;
    val *t = &s->vals[target.val];
    if (t->kind == V_ROWREF) {
        ad_row_contrib(s, t, g, negate, expr);
        return;
    }
    const char *term = !g.text ? expr : negate ? ad_fmt(s, "0.0 if %s else %s", g.text, expr)
                                               : ad_fmt(s, "%s if %s else 0.0", expr, g.text);
    if (!t->adj) {
        t->adj = ad_fmt(s, "%sd%d", s->pre, target.val);
        t->adj_key = 2 * target.val + 1;   /* (its type: the op's float type or wider, as every D: the seeds') */
        ad_emit(s, t->adj_key, ad_fmt(s, "%s = %s", t->adj, term));
    } else {
        ad_emit(s, t->adj_key, ad_fmt(s, "%s += %s", t->adj, term));
    }
}

/* Passes value k's whole adjoint on to target, k's one operand: target takes
 * over k's adjoint local when it has none yet (no copy line; k's adjoint is
 * not read after its partials), else adds it. */
void ad_take_over(ad *s, atom target, int k) {
    if (target.val < 0 || !s->vals[target.val].is_float || s->failed) return;
    val *t = &s->vals[target.val];
    if (t->adj || t->kind == V_ROWREF) {
        ad_contrib(s, target, ad_leaf(NULL, 0), 0, s->vals[k].adj);
        return;
    }
    t->adj = s->vals[k].adj;
    t->adj_key = s->vals[k].adj_key;
}

/* Template tpl with D, T and A (capitals, alone) replaced by d, t and a. */
static const char *subst(ad *s, const char *tpl, const char *d, const char *t, const char *a) {
    tk_buf b = {0};
    for (const char *p = tpl; *p; p++) {
        const char *r = *p == 'D' ? d : *p == 'T' ? t : *p == 'A' ? a : NULL;
        if (r) tk_buf_puts(&b, r);
        else tk_buf_printf(&b, "%c", *p);
    }
    const char *out = b.oom || !b.p ? (ad_oom(s), "") : ad_fmt(s, "%s", b.p);
    free(b.p);
    return out;
}

/* The partial derivatives of a function call t = f(A[, B]) with adjoint D. */
static void call_partials(ad *s, const val *v, const char *T, const char *D) {
    const char *f = v->node->name, *A = v->a[0].text, *B = v->na > 1 ? v->a[1].text : "";
    atom a = v->a[0], b = v->na > 1 ? v->a[1] : ad_leaf("", 0), g = v->guard;
    static const struct { const char *f, *d; } k_one[] = {
        /* D times d(f(A))/dA, T being f(A) */
        {"exp", "(D * T)"}, {"log", "(D / A)"}, {"sqrt", "(D / (2.0 * T))"},
        {"tanh", "(D * (1.0 - T * T))"}, {"sigmoid", "(D * T * (1.0 - T))"},
        {"sin", "(D * cos(A))"}, {"cos", "(-(D * sin(A)))"}, {"tan", "(D * (1.0 + T * T))"},
        {"asin", "(D / sqrt(1.0 - A * A))"}, {"acos", "(-(D / sqrt(1.0 - A * A)))"},
        {"atan", "(D / (1.0 + A * A))"}, {"sinh", "(D * cosh(A))"}, {"cosh", "(D * sinh(A))"},
        {"erf", "(D * 1.1283791670955126 * exp(-(A * A)))"},      /* 2 / sqrt(pi) */
        {"erfc", "(-(D * 1.1283791670955126 * exp(-(A * A))))"},
        {"log1p", "(D / (1.0 + A))"}, {"expm1", "(D * (T + 1.0))"},
        {"log2", "(D / (A * 0.69314718055994531))"}, {"log10", "(D / (A * 2.3025850929940457))"},
        {"float", "D"}, {"float32", "D"}, {"float64", "D"},
        {"abs", "(D if A > 0.0 else (-D if A < 0.0 else 0.0))"},   /* torch.abs's: 0 at 0 */
    };
    for (size_t i = 0; i < sizeof k_one / sizeof *k_one; i++)
        if (strcmp(f, k_one[i].f) == 0) {
            if (strcmp(k_one[i].d, "D") == 0) ad_take_over(s, a, (int)(v - s->vals));   /* a cast passes it on */
            else ad_contrib(s, a, g, 0, subst(s, k_one[i].d, D, T, A));
            return;
        }
    if (strcmp(f, "min") == 0 || strcmp(f, "max") == 0) {   /* torch.minimum/maximum: a tie splits it */
        const char *lt = f[1] == 'i' ? "<" : ">";
        ad_contrib(s, a, g, 0, ad_fmt(s, "(%s if %s %s %s else (0.5 * %s if %s == %s else 0.0))", D, A, lt, B, D, A, B));
        ad_contrib(s, b, g, 0, ad_fmt(s, "(%s if %s %s %s else (0.5 * %s if %s == %s else 0.0))", D, B, lt, A, D, A, B));
    } else if (strcmp(f, "atan2") == 0) {   /* atan2(A, B): y = A, x = B */
        ad_contrib(s, a, g, 0, ad_fmt(s, "(%s * %s / (%s * %s + %s * %s))", D, B, A, A, B, B));
        ad_contrib(s, b, g, 0, ad_fmt(s, "(-(%s * %s / (%s * %s + %s * %s)))", D, A, A, A, B, B));
    }
    /* floor, ceil, int, bool (not float), rand, randn (no float argument): none */
}

/* Passes value k's adjoint to the values it was made of. */
void ad_partials(ad *s, int k) {
    const val *v = &s->vals[k];
    const char *T = v->name, *D = v->adj;
    atom g = v->guard;
    if (v->kind == V_LOCAL || v->kind == V_OUT) {
        if (v->prev < 0 && (v->kind == V_LOCAL || !g.text)) {   /* a declaration, or a store made always */
            ad_take_over(s, v->a[0], k);
            return;
        }
        ad_contrib(s, v->a[0], g, 0, D);
        if (v->prev >= 0 && g.text) ad_contrib(s, ad_val_atom(s, v->prev), g, 1, D);
        return;
    }
    if (v->kind != V_TEMP || !v->node) return;
    const tk_expr *e = v->node;
    atom a = v->a[0], b = v->na > 1 ? v->a[1] : ad_leaf("", 0);
    const char *A = a.text, *B = b.text;
    if (e->kind == TK_E_UNARY) {
        if (e->op == TK_OPC_NEG) ad_contrib(s, a, g, 0, ad_fmt(s, "(-%s)", D));
        else if (e->op == TK_OPC_POS) ad_take_over(s, a, k);
    } else if (e->kind == TK_E_COND) {
        ad_contrib(s, a, v->g_then, 0, D);
        ad_contrib(s, v->a[2], v->g_else, 0, D);
    } else if (e->kind == TK_E_CALL) {
        call_partials(s, v, T, D);
    } else if (e->kind == TK_E_BINARY) {
        switch (e->op) {
        case TK_OPC_ADD: ad_contrib(s, a, g, 0, D); ad_contrib(s, b, g, 0, D); break;
        case TK_OPC_SUB: ad_contrib(s, a, g, 0, D); ad_contrib(s, b, g, 0, ad_fmt(s, "(-%s)", D)); break;
        case TK_OPC_MUL:
            ad_contrib(s, a, g, 0, ad_fmt(s, "(%s * %s)", D, B));
            ad_contrib(s, b, g, 0, ad_fmt(s, "(%s * %s)", D, A));
            break;
        case TK_OPC_DIV:
            ad_contrib(s, a, g, 0, ad_fmt(s, "(%s / %s)", D, B));
            ad_contrib(s, b, g, 0, ad_fmt(s, "(-(%s * %s / %s))", D, T, B));
            break;
        case TK_OPC_MOD:   /* A % B = A - B * floor(A / B): torch.remainder's */
            ad_contrib(s, a, g, 0, D);
            ad_contrib(s, b, g, 0, ad_fmt(s, "(-(%s * ((%s - %s) / %s)))", D, A, T, B));
            break;
        case TK_OPC_POW:   /* torch.pow's: 0 where the exponent is 0; d/dB 0 where A == 0 and B >= 0 */
            ad_contrib(s, a, g, 0, ad_fmt(s, "(%s * %s * %s ** (%s - 1.0) if %s != 0.0 else 0.0)", D, B, A, B, B));
            ad_contrib(s, b, g, 0, ad_fmt(s, "(0.0 if %s == 0.0 and %s >= 0.0 else %s * %s * log(%s))", A, B, D, T, A));
            break;
        default: break;   /* //, comparisons, and, or: not differentiable */
        }
    }
}

void ad_reverse_values(ad *s) {
    const tk_opdecl *d = s->d;
    for (int o = 0; o < d->nreturns; o++) {   /* the incoming gradients */
        int k = s->out_val[o];
        if (k < 0) continue;
        s->vals[k].adj = ad_fmt(s, "%sd%d", s->pre, k);
        s->vals[k].adj_key = 2 * k + 1;
        /* in the op's float type at least, as every adjoint made from it: a float32 gradient of one output
         * does not round a float64 one another output adds in */
        ad_emit(s, 2 * k + 1, ad_fmt(s, "%s = float(grad_%s[%s])", s->vals[k].adj, d->outputs[o].name, s->index));
    }
    for (int i = 0; i < s->naccs; i++) {   /* a block: what each term gets of its accumulator's adjoint */
        const char *t = ad_row_acc_term(s, i);
        if (t) ad_contrib(s, s->accs[i].e, s->accs[i].g, 0, t);
    }
    for (int k = s->nvals - 1; k >= 0 && !s->failed; k--)
        if (s->vals[k].adj) ad_partials(s, k);
}

/* The gradients' stores: each float tensor parameter read, its adjoint (0 if none). */
void ad_store_grads(ad *s) {
    for (int p = 0; p < s->d->nparams; p++)
        if (s->read_val[p] >= 0) {
            const char *adj = s->vals[s->read_val[p]].adj;
            ad_emit(s, -1, ad_fmt(s, "grad_%s[%s] = %s", s->d->params[p].name, s->index, adj ? adj : "0.0"));
        }
}

/* ---- dead lines ------------------------------------------------------------ */

/* The key of name if the derivation made it (pre<k>, pre<k>_x: 2k; pre d<k>: 2k + 1), else -1. */
static int name_key(const ad *s, const char *p, size_t n) {
    size_t lp = strlen(s->pre);
    if (n <= lp || strncmp(p, s->pre, lp) != 0) return -1;
    p += lp;
    n -= lp;
    int adj = *p == 'd';
    if (adj) p++, n--;
    long k = 0;
    size_t i = 0;
    for (; i < n && p[i] >= '0' && p[i] <= '9'; i++) k = k * 10 + (p[i] - '0');
    if (i == 0 || k >= s->nvals || (i < n && (adj || p[i] != '_'))) return -1;
    return (int)(2 * k + adj);
}

/* Marks lines that a gradient store needs, walking back from the stores. */
void ad_mark_live(ad *s, char *live_line) {
    char *live = tk_arena_alloc(s->mem, 2 * (size_t)s->nvals + 1);
    if (!live) { ad_oom(s); return; }
    for (int i = s->nlines - 1; i >= 0; i--) {
        int key = s->lines[i].key;
        if (key >= 0 && !live[key]) continue;
        live_line[i] = 1;
        for (const char *p = s->lines[i].text; *p;) {
            if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_') {
                const char *q = p;
                while ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || *q == '_') q++;
                int k = name_key(s, p, (size_t)(q - p));
                if (k >= 0) live[k] = 1;
                p = q;
            } else if (*p >= '0' && *p <= '9') {
                while ((*p >= '0' && *p <= '9') || *p == '.' || *p == 'e' || *p == 'E') p++;
            } else {
                p++;
            }
        }
    }
}

/* ---- checks and the header -------------------------------------------------- */

/* Whether some name of d starts with prefix pre. */
static int prefix_taken(const tk_op *op, const char *pre) {
    const tk_opdecl *d = op->decl;
    size_t n = strlen(pre);
    for (int i = 0; i < d->nparams; i++)
        if (strncmp(d->params[i].name, pre, n) == 0) return 1;
    for (int i = 0; i < d->noutputs; i++)
        if (strncmp(d->outputs[i].name, pre, n) == 0) return 1;
    for (int i = 0; i < d->nloop; i++)
        if (strncmp(d->loop_vars[i], pre, n) == 0) return 1;
    for (int i = 0; i < op->ndims; i++)
        if (strncmp(op->dims[i].name, pre, n) == 0) return 1;
    for (int i = 0; i < op->nlocals; i++)
        if (strncmp(op->locals[i].name, pre, n) == 0) return 1;
    return 0;
}

/* Whether name is grad_<t> for a float tensor t of op (a parameter or a
 * returned output): the backward op has a parameter or an output of that name. */
static int gradient_name_taken(const tk_op *op, const char *name) {
    const tk_opdecl *d = op->decl;
    if (strncmp(name, "grad_", 5) != 0) return 0;
    for (int i = 0; i < d->nparams; i++)
        if (tk_op_param_differentiable(op, i) && strcmp(d->params[i].name, name + 5) == 0) return 1;
    for (int o = 0; o < d->nreturns; o++)
        if (ad_output_float(op, o) && strcmp(d->outputs[o].name, name + 5) == 0) return 1;
    return 0;
}

/* What makes an op one auto cannot differentiate, found before the body:
 * an error at its place; 0 then, else 1. */
static int check_form(ad *s) {
    const tk_op *op = s->op;
    const tk_opdecl *d = s->d;
    int ntensors = 0, ngrads = 0, nin = 0;
    if (op->row_loop) {
        int owned = 0;
        for (int j = 0; j < d->nloop; j++)
            if (tk_owned_dim(d->loop_vars[j])) owned++, s->owned = j;
        if (owned != 1 || op->has_sum) {
            ad_fail(s, d->loop_loc, "%s: it differentiates row loops that own one dim ('_' once in the loop) "
                    "and store with '='; write the backward ops of this op",
                    owned != 1 ? "a row loop that owns several dims" : "a sum ('+=' into an output)");
            return 0;
        }
        s->mode = AD_ROW;
    } else if (!tk_op_loop_free(op)) {   /* inner loops in the element-wise form: a row (the loop's index)
                                          * and the dim they walk */
        s->mode = AD_ROW;
        s->virt = 1;
        s->owned = d->nloop;
    }
    for (int i = 0; i < d->nparams; i++) {
        const tk_param *p = &d->params[i];
        unsigned m = p->kind == TK_P_TENSOR ? d->params[op->dtype_root[i]].dtype_mask : 0;
        if (p->kind == TK_P_TENSOR) nin++;
        if (p->mut) ad_fail(s, p->loc, "'mut' parameter '%s': an op that updates in place has no backward", p->name);
        else if ((m & TK_DTYPES_FLOAT) && (m & ~TK_DTYPES_FLOAT))
            ad_fail(s, p->loc, "parameter '%s' may be a float or not: give it float dtypes only, or none", p->name);
        else if (gradient_name_taken(op, p->name))
            ad_fail(s, p->loc, "parameter '%s' has the name of a gradient the backward op takes or returns: "
                 "rename it", p->name);
        ngrads += tk_op_param_differentiable(op, i);
    }
    for (int o = 0; o < d->noutputs && !s->failed; o++) {
        const tk_param *p = &d->outputs[o];
        if (p->scratch && d->derived_from)   /* a scan's derived op keeps the scan's states in scratch tensors */
            ad_fail(s, p->loc, "second derivatives of a scan are not derived (its derived op keeps the scan's "
                    "states in scratch tensor '%s'): use 'backward auto', or write the backward ops of '%s'",
                    p->name, d->derived_from);
        else if (p->scratch)
            ad_fail(s, p->loc, "scratch tensor '%s': write the backward ops of this op", p->name);
        if (o >= d->nreturns) continue;
        for (int j = 0; j < p->ndims; j++) {
            const tk_expr *e = p->dims[j];
            int unused;
            if ((e->kind != TK_E_NAME && e->kind != TK_E_INT && e->kind != TK_E_ELLIPSIS) ||
                (e->kind == TK_E_NAME && tk_resolve_header(op, e->name, &unused) != TK_SYM_DIM))
                ad_fail(s, e->loc, "output '%s' has a dim computed from parameters: its gradient, a parameter of the "
                     "backward op, needs dims that input tensors name", p->name);
        }
        if (ad_output_float(op, o)) ntensors++;
        else if (o == op->loop_out) ad_fail(s, d->loop_loc, "the loop's output '%s' is not a float tensor", p->name);
    }
    if (!ngrads) ad_fail(s, d->loc, "'%s' has no float tensor parameter to differentiate", d->name);
    if (nin + ntensors + ngrads > TK_MAX_TENSORS)
        ad_fail(s, d->loc, "its backward op would take and return %d tensors (limit %d)", nin + ntensors + ngrads,
             TK_MAX_TENSORS);
    return !s->failed;
}

/* The derived op's header and loop line. */
void ad_print_header(ad *s, tk_buf *b) {
    const tk_opdecl *d = s->d;
    const tk_param *lo = &d->outputs[s->op->loop_out];
    tk_buf_printf(b, "op %s_backward(", d->name);
    for (int i = 0; i < d->nparams; i++)   /* the required ones, the gradients, then those with defaults */
        if (!d->params[i].default_value && !d->params[i].optional) {
            print_param(b, &d->params[i]);
            tk_buf_puts(b, ", ");
        }
    const char *sep = "";
    for (int o = 0; o < d->nreturns; o++) {
        const tk_param *p = &d->outputs[o];
        int root = s->op->out_dtype_root[o];
        if (!ad_output_float(s->op, o)) continue;
        tk_buf_printf(b, "%sgrad_%s: ", sep, p->name);
        if (root >= 0) print_root_dtype(b, d, root);
        else tk_buf_puts(b, tk_dtype_name(s->op->out_dtype_fixed[o]));
        print_dims(b, p);
        sep = ", ";
    }
    for (int i = 0; i < d->nparams; i++)
        if (d->params[i].default_value || d->params[i].optional) {
            tk_buf_puts(b, ", ");
            print_param(b, &d->params[i]);
        }
    tk_buf_puts(b, ")\n        -> (");
    sep = "";
    const char *first = NULL;
    for (int p = 0; p < d->nparams; p++)
        if (s->read_val[p] >= 0 || s->block_read[p]) {
            tk_buf_printf(b, "%sgrad_%s: ", sep, d->params[p].name);
            print_root_dtype(b, d, s->op->dtype_root[p]);
            if (s->mode != AD_ROW) {
                print_dims(b, lo);
            } else {   /* read along the row: the row's dims and the owned one; outside: the row's */
                int full = s->block_read[p], owned = (lo->ndims > 0 && lo->dims[0]->kind == TK_E_ELLIPSIS) + s->owned;
                const char *dsep = "";
                tk_buf_puts(b, "[");
                for (int j = 0; j < lo->ndims; j++)
                    if (full || s->virt || j != owned) {
                        tk_buf_puts(b, dsep);
                        tk_expr_spec(b, lo->dims[j]);
                        dsep = ", ";
                    }
                if (full && s->virt && s->vdim) {
                    tk_buf_puts(b, dsep);
                    tk_expr_spec(b, s->vdim);
                }
                tk_buf_puts(b, "]");
            }
            sep = ", ";
            if (!first && (s->mode != AD_ROW || s->block_read[p])) first = d->params[p].name;
        }
    tk_buf_puts(b, "):\n");
    for (int i = 0; i < s->nscratch; i++) {   /* a scan's states (autodiff_scan.c): the loop output's shape */
        tk_buf_printf(b, "    scratch %s: float", s->scratch[i]);
        print_dims(b, lo);
        tk_buf_puts(b, "\n");
    }
    tk_buf_printf(b, "    for %s in grad_%s:\n", s->index, first ? first : "?");
}

tk_status tk_derive_backward(tk_op *op, char **text, int *exact, tk_error *err) {
    ad s;
    tk_arena mem;
    memset(&s, 0, sizeof s);
    memset(&mem, 0, sizeof mem);
    s.mem = &mem;
    s.owned = -1;
    s.op = op;
    s.d = op->decl;
    s.err = err;
    *text = NULL;
    tk_status st = tk_check_body(op, 0, err);   /* value types, local slots (any variant: float or not) */
    if (st != TK_OK) return st;
    for (int i = 0; i < TK_MAX_TENSORS * 4; i++) s.read_val[i] = -1;
    for (int i = 0; i < TK_MAX_TENSORS; i++) s.out_val[i] = -1;
    static const char *const pres[] = {"ad", "tk_ad", "ad_", "zad", "q_ad"};
    for (size_t i = 0; i < sizeof pres / sizeof *pres && !s.pre; i++)
        if (!prefix_taken(op, pres[i])) s.pre = pres[i];
    if (!s.pre) ad_fail(&s, s.d->loc, "its names take every prefix the derivation could use (ad, tk_ad, ad_, zad, q_ad)");
    check_form(&s);
    if (!s.failed) {
        tk_buf ix = {0};
        for (int i = 0; i < s.d->nloop; i++) tk_buf_printf(&ix, "%s%s", i ? ", " : "", s.d->loop_vars[i]);
        if (s.virt) tk_buf_printf(&ix, "%s_", s.d->nloop ? ", " : "");
        s.index = ix.p && !ix.oom ? ad_fmt(&s, "%s", ix.p) : (s.d->nloop ? (ad_oom(&s), "") : "");
        free(ix.p);
    }
    atom always = {-1, NULL, 0};
    if (!s.failed && s.mode == AD_ROW) ad_rows(&s);   /* its lines, reverse pass and stores */
    else if (!s.failed) ad_walk(&s, s.d->body, s.d->nbody, always);
    int some = 0;
    for (int p = 0; p < s.d->nparams; p++) some |= s.read_val[p] >= 0 || s.block_read[p];
    if (!s.failed && !some)
        ad_fail(&s, s.d->loc, "the body reads no float tensor parameter: there is nothing to differentiate");
    if (!s.failed && s.mode != AD_ROW) {
        ad_reverse_values(&s);
        ad_store_grads(&s);
    }
    char *live = s.failed ? NULL : tk_arena_alloc(s.mem, (size_t)s.nlines + 1);
    if (!s.failed && !live) ad_oom(&s);
    if (!s.failed) ad_mark_live(&s, live);
    if (!s.failed) {
        tk_buf b = {0};
        tk_buf_printf(&b, "# derived by 'backward auto' from '%s' (", s.d->name);
        for (const char *f = s.d->file; *f; f++)   /* (a file name with a newline must not end the comment) */
            tk_buf_printf(&b, "%c", (unsigned char)*f < 32 ? '?' : *f);
        tk_buf_printf(&b, ":%d)\n", s.d->loc.line);
        ad_print_header(&s, &b);
        for (int i = 0; i < s.nlines; i++)
            if (live[i]) tk_buf_printf(&b, "        %s\n", s.lines[i].text);
        if (b.oom) {
            free(b.p);
            ad_oom(&s);
        } else {
            *text = b.p;
        }
        for (int l = 0; l < s.nloops && exact; l++) {   /* values computed in two passes compared */
            if (s.loops[l].scan) *exact = 1;   /* (the steps replayed: their branches, max and min) */
            for (int a = 0; a < s.loops[l].naccs; a++)
                if (s.loops[l].accs[a].kind == ACC_MAX || s.loops[l].accs[a].kind == ACC_MIN) *exact = 1;
        }
    }
    tk_arena_free(&mem);
    return s.failed ? (tk_status)err->status : TK_OK;
}
