/* shape.c - shape programs: the int expressions of an op's header (input
 * dims, output dims, defaults of 'int?' parameters) compiled to the postfix
 * code of tk.h (tk_shape_instr), for callers that evaluate shapes over their
 * own integer type (the torch shim, over c10::SymInt). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

typedef struct writer {
    const tk_op *op;
    tk_shape_instr *code;
    int cap, n;
} writer;

/* Appends one instruction (counted even past cap); returns its position. */
static int emit(writer *w, tk_shape_opc opc, int64_t a, int b) {
    if (w->n < w->cap) {
        w->code[w->n].opc = (int)opc;
        w->code[w->n].a = a;
        w->code[w->n].b = b;
    }
    return w->n++;
}

static void patch(writer *w, int at, int target) {
    if (at < w->cap) w->code[at].a = target;
}

/* DIM of the binding (param, explicit axis) of symbolic dim d, from the end. */
static void emit_dim(writer *w, const tk_dimsym *d) {
    int nexp = tk_explicit_dims(&w->op->decl->params[d->param]);
    emit(w, TK_SH_DIM, d->param, d->axis - nexp);
}

static tk_shape_opc binary_opc(tk_opc op) {
    switch (op) {
    case TK_OPC_ADD: return TK_SH_ADD;
    case TK_OPC_SUB: return TK_SH_SUB;
    case TK_OPC_MUL: return TK_SH_MUL;
    case TK_OPC_FLOORDIV: return TK_SH_FLOORDIV;
    case TK_OPC_MOD: return TK_SH_MOD;
    case TK_OPC_EQ: return TK_SH_EQ;
    case TK_OPC_NE: return TK_SH_NE;
    case TK_OPC_LT: return TK_SH_LT;
    case TK_OPC_LE: return TK_SH_LE;
    case TK_OPC_GT: return TK_SH_GT;
    case TK_OPC_GE: return TK_SH_GE;
    case TK_OPC_AND: return TK_SH_AND;
    default: return TK_SH_OR;       /* the checker allows no other (check_int_expr) */
    }
}

static void compile(writer *w, const tk_expr *e);

/* e as 0 or 1 (e != 0). */
static void compile_truth(writer *w, const tk_expr *e) {
    compile(w, e);
    emit(w, TK_SH_CONST, 0, 0);
    emit(w, TK_SH_NE, 0, 0);
}

/* Compiles a checked int header expression (check_int_expr's forms). */
static void compile(writer *w, const tk_expr *e) {
    int idx, jz, jmp;
    switch (e->kind) {
    case TK_E_INT:
    case TK_E_BOOL:
        emit(w, TK_SH_CONST, e->ival, 0);
        return;
    case TK_E_NAME:
        if (tk_resolve_header(w->op, e->name, &idx) == TK_SYM_DIM) emit_dim(w, &w->op->dims[idx]);
        else emit(w, TK_SH_PARAM, idx, 0);
        return;
    case TK_E_UNARY:
        compile(w, e->args[0]);
        if (e->op == TK_OPC_NEG) emit(w, TK_SH_NEG, 0, 0);
        else if (e->op == TK_OPC_NOT) emit(w, TK_SH_NOT, 0, 0);
        return;
    case TK_E_BINARY:
        if (e->op == TK_OPC_AND || e->op == TK_OPC_OR) {
            /* Python's short circuit, 0 or 1: a JZ(l) [and: b 0 NE | or: 1] JUMP(end) l: [and: 0 | or: b 0 NE] */
            int and_ = e->op == TK_OPC_AND;
            compile(w, e->args[0]);
            jz = emit(w, TK_SH_JUMP_IF_ZERO, 0, 0);
            if (and_) compile_truth(w, e->args[1]);
            else emit(w, TK_SH_CONST, 1, 0);
            jmp = emit(w, TK_SH_JUMP, 0, 0);
            patch(w, jz, w->n);
            if (and_) emit(w, TK_SH_CONST, 0, 0);
            else compile_truth(w, e->args[1]);
            patch(w, jmp, w->n);
            return;
        }
        compile(w, e->args[0]);
        compile(w, e->args[1]);
        emit(w, binary_opc(e->op), 0, 0);
        return;
    case TK_E_COND:                 /* args[0] if args[1] else args[2] */
        compile(w, e->args[1]);
        jz = emit(w, TK_SH_JUMP_IF_ZERO, 0, 0);
        compile(w, e->args[0]);
        jmp = emit(w, TK_SH_JUMP, 0, 0);
        patch(w, jz, w->n);
        compile(w, e->args[2]);
        patch(w, jmp, w->n);
        return;
    case TK_E_CALL:
        for (int i = 0; i < e->nargs; i++) compile(w, e->args[i]);
        emit(w, strcmp(e->name, "abs") == 0 ? TK_SH_ABS : strcmp(e->name, "min") == 0 ? TK_SH_MIN : TK_SH_MAX, 0, 0);
        return;
    default:
        return;
    }
}

int tk_expr_reads_float(const tk_op *op, const tk_expr *e) {
    int idx;
    if (e->kind == TK_E_FLOAT || (e->kind == TK_E_BINARY && e->op == TK_OPC_DIV)) return 1;
    if (e->kind == TK_E_NAME) return tk_resolve_header(op, e->name, &idx) == TK_SYM_FLOAT;
    for (int i = 0; i < e->nargs; i++)
        if (tk_expr_reads_float(op, e->args[i])) return 1;
    return 0;
}

/* The declared shape (what, i), or NULL. */
static const tk_param *shape_of(const tk_op *op, tk_shape_of what, int i) {
    const tk_opdecl *d = op ? op->decl : NULL;
    if (!d) return NULL;
    if (what == TK_SHAPE_INPUT && i >= 0 && i < d->nparams && d->params[i].kind == TK_P_TENSOR)
        return &d->params[i];
    if (what == TK_SHAPE_OUTPUT && i >= 0 && i < d->noutputs) return &d->outputs[i];
    return NULL;
}

int tk_op_shape_ndims(const tk_op *op, tk_shape_of what, int i) {
    const tk_param *p = shape_of(op, what, i);
    return p ? p->ndims : -1;
}

int tk_op_shape_has_batch(const tk_op *op, tk_shape_of what, int i) {
    const tk_param *p = shape_of(op, what, i);
    return p && p->ndims > 0 && p->dims[0]->kind == TK_E_ELLIPSIS;
}

int tk_op_batch_param(const tk_op *op) {
    for (int i = 0; op && i < op->decl->nparams; i++)
        if (tk_op_shape_has_batch(op, TK_SHAPE_INPUT, i)) return i;
    return -1;
}

/* Input dim j of tensor parameter i: a literal, or a name bound elsewhere. */
static void compile_input_dim(writer *w, int i, int j) {
    const tk_param *p = &w->op->decl->params[i];
    const tk_expr *e = p->dims[j];
    int axis = j - (tk_op_shape_has_batch(w->op, TK_SHAPE_INPUT, i) ? 1 : 0), idx;
    if (e->kind == TK_E_INT) {
        emit(w, TK_SH_CONST, e->ival, 0);
    } else if (e->kind == TK_E_NAME && tk_resolve_header(w->op, e->name, &idx) == TK_SYM_DIM) {
        const tk_dimsym *d = &w->op->dims[idx];
        if (d->param != i || d->axis != axis) emit_dim(w, d);
    }
}

int tk_op_shape_code(const tk_op *op, tk_shape_of what, int i, int j, tk_shape_instr *code, int cap) {
    writer w = {op, code, code ? cap : 0, 0};
    if (what == TK_SHAPE_ASSERT) {
        if (!op || i < 0 || i >= op->decl->nasserts) return -1;
        if (!tk_expr_reads_float(op, op->decl->asserts[i])) compile(&w, op->decl->asserts[i]);
        return w.n;
    }
    if (what == TK_SHAPE_DEFAULT) {
        if (!op || i < 0 || i >= op->decl->nparams || op->decl->params[i].kind != TK_P_INT) return -1;
        if (op->decl->params[i].optional && op->decl->params[i].default_value)
            compile(&w, op->decl->params[i].default_value);
        return w.n;
    }
    const tk_param *p = shape_of(op, what, i);
    if (!p || j < 0 || j >= p->ndims) return -1;
    if (p->dims[j]->kind == TK_E_ELLIPSIS) return 0;
    if (what == TK_SHAPE_INPUT) compile_input_dim(&w, i, j);
    else compile(&w, p->dims[j]);
    return w.n;
}

int tk_op_nasserts(const tk_op *op) { return op ? op->decl->nasserts : 0; }

int tk_op_assert_text(const tk_op *op, int i, char *buf, size_t n) {
    if (!op || i < 0 || i >= op->decl->nasserts) return -1;
    tk_buf b = {0};
    tk_loc at = op->decl->assert_locs[i];
    tk_expr_text(&b, op->decl->asserts[i], 1);
    tk_buf_printf(&b, " (%s:%d:%d)", op->decl->file, at.line, at.col);
    int len = b.oom || !b.p ? 0 : (int)b.len;
    if (n > 0) snprintf(buf, n, "%s", len ? b.p : "");
    free(b.p);
    return len;
}
