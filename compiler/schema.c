/* schema.c - an op's torch schema text from its declaration:
 * "rwkv_forward(Tensor w, Tensor k, float eps) -> Tensor" (tk_make_schema). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

/* A float as the shortest text that reads back as the same double, with a
 * '.' or an exponent so it reads as a float (1e-05, 0.5, 2.0, -0.0): as
 * Python's repr, which torch's schema parser reads. */
static void float_text(tk_buf *b, double v) {
    char s[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(s, sizeof s, "%.*g", prec, v);
        if (strtod(s, NULL) == v) break;
    }
    if (!strpbrk(s, ".en")) strcat(s, ".0");
    tk_buf_puts(b, s);
}

/* The schema text of scalar parameter p's default (p->default_value set,
 * not an optional int's: that one is '=None'). */
static void schema_default(tk_buf *b, const tk_param *p) {
    const tk_expr *e = p->default_value;
    if (p->kind == TK_P_FLOAT) {
        float_text(b, tk_float_default(p));
        return;
    }
    if (e->kind == TK_E_UNARY) {
        tk_buf_puts(b, "-");
        e = e->args[0];
    }
    if (e->kind == TK_E_INT) tk_buf_printf(b, "%lld", (long long)e->ival);
    else if (e->kind == TK_E_BOOL) tk_buf_puts(b, e->ival ? "True" : "False");
}

/* int parameters are SymInt: under torch.compile(dynamic=True) a pad width
 * or a window length stays symbolic (one graph for every value, as with
 * F.pad) and `t.item()` may be passed; TorchScript reads SymInt as int. */
char *tk_make_schema(const tk_opdecl *d, tk_arena *a) {
    static const char *const types[] = {"Tensor", "SymInt", "float", "bool"}; /* ORDER tk_param_kind */
    tk_buf b = {0};
    int nmut = 0;
    tk_buf_printf(&b, "%s(", d->name);
    for (int i = 0; i < d->nparams; i++) {
        const tk_param *p = &d->params[i];
        tk_buf_printf(&b, "%s%s", i ? ", " : "", types[p->kind]);
        if (p->mut) tk_buf_printf(&b, "(%c!)", 'a' + nmut++);   /* updated in place: alias set a, b, ... */
        tk_buf_printf(&b, "%s %s", p->optional ? "?" : "", p->name);
        if (p->optional && (p->kind == TK_P_INT || p->kind == TK_P_TENSOR)) tk_buf_puts(&b, "=None");
        else if (p->default_value) {
            tk_buf_puts(&b, "=");
            schema_default(&b, p);
        }
    }
    tk_buf_puts(&b, ") -> ");
    if (d->nreturns == 1) tk_buf_puts(&b, "Tensor");   /* (not the scratch tensors nor the 'mut' parameters) */
    else {
        tk_buf_puts(&b, "(");
        for (int i = 0; i < d->nreturns; i++) tk_buf_printf(&b, "%sTensor", i ? ", " : "");
        tk_buf_puts(&b, ")");
    }
    char *s = b.oom ? NULL : tk_arena_strndup(a, b.p, b.len);
    free(b.p);
    return s;
}
