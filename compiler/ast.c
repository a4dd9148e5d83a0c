/* ast.c - the arena that owns every syntax-tree node, operator names,
 * expressions as spec text (for messages), and queries of a declaration's
 * parameters (explicit dims, the output a 'mut' parameter is). */
#include "ast.h"

#include "core.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TK_ARENA_ALIGN 16u
#define TK_ARENA_BLOCK ((size_t)64 * 1024)

struct tk_arena_block {
    tk_arena_block *next;
    size_t used, cap;
    /* data follows the header, aligned to TK_ARENA_ALIGN */
};

/* Size of the block header rounded up to the alignment. */
static size_t header_size(void) {
    size_t h = sizeof(tk_arena_block);
    return (h + TK_ARENA_ALIGN - 1u) & ~(size_t)(TK_ARENA_ALIGN - 1u);
}

/* Returns n zeroed bytes that live until tk_arena_free; NULL on OOM. */
void *tk_arena_alloc(tk_arena *a, size_t n) {
    tk_arena_block *b;
    size_t cap;
    if (n == 0) n = 1;
    if (n > (size_t)-1 / 2) return NULL;
    n = (n + TK_ARENA_ALIGN - 1u) & ~(size_t)(TK_ARENA_ALIGN - 1u);
    b = a->head;
    if (b == NULL || b->cap - b->used < n) {
        cap = n > TK_ARENA_BLOCK ? n : TK_ARENA_BLOCK;
        b = (tk_arena_block *)calloc(1, header_size() + cap);  /* calloc: zeroed */
        if (b == NULL) return NULL;
        b->cap = cap;
        b->used = 0;
        b->next = a->head;
        a->head = b;
    }
    {
        char *p = (char *)b + header_size() + b->used;
        b->used += n;
        return p;
    }
}

/* Copies s[0..n) into the arena with a terminating NUL; NULL on OOM. */
char *tk_arena_strndup(tk_arena *a, const char *s, size_t n) {
    char *d;
    if (n == (size_t)-1) return NULL;
    d = (char *)tk_arena_alloc(a, n + 1);
    if (d == NULL) return NULL;
    if (n > 0) memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

/* Frees every block; the arena is empty (and reusable) afterwards. */
void tk_arena_free(tk_arena *a) {
    tk_arena_block *b = a->head;
    while (b != NULL) {
        tk_arena_block *next = b->next;
        free(b);
        b = next;
    }
    a->head = NULL;
}

/* ORDER OPC */
static const char *const opc_text[TK_OPC_COUNT] = {
    "",
    "+", "-", "*", "/", "//",
    "%", "**",
    "==", "!=", "<", "<=", ">", ">=",
    "and", "or",
    "-", "+", "not",
};

/* Spelling of an operator as written in a spec ("?" if out of range). */
const char *tk_opc_text(tk_opc op) {
    if ((int)op < 0 || op >= TK_OPC_COUNT) return "?";
    return opc_text[op];
}

/* ---- schedule items (ast.h) ---------------------------------------------------- */

const tk_sched_key tk_sched_keys[TK_SCHED_KEYS] = {
    {"lanes", 4, 16, 0}, {"rows", 1, 8, 0},   {"warp_rows", 1, 32, 0}, {"chunk", 16, 128, 0},
    {"split", 1, 32, 0}, {"ldg", 4, 16, 0},   {"tiles", 1, 2, 0},      {"regs", 32, 248, 8},
    {"coop", 1, 32, 0},  {"parts", 1, 65536, 0}};

int tk_sched_find(const char *key, size_t len) {
    for (int k = 0; k < TK_SCHED_KEYS; k++)
        if (strlen(tk_sched_keys[k].key) == len && strncmp(key, tk_sched_keys[k].key, len) == 0) return k;
    return -1;
}

int tk_sched_valid(int k, long long v) {
    if (k < 0 || k >= TK_SCHED_KEYS || v < tk_sched_keys[k].lo || v > tk_sched_keys[k].hi) return 0;
    return tk_sched_keys[k].step ? v % tk_sched_keys[k].step == 0 : (v & (v - 1)) == 0;
}

/* Whether two expressions are the same text (same value in one copy). */
int tk_expr_equal(const tk_expr *a, const tk_expr *b) {
    if (a->kind != b->kind || a->op != b->op || a->nargs != b->nargs || a->ival != b->ival ||
        a->vtype != b->vtype || memcmp(&a->fval, &b->fval, sizeof a->fval) != 0)
        return 0;
    if ((a->name == NULL) != (b->name == NULL) || (a->name && strcmp(a->name, b->name) != 0)) return 0;
    for (int i = 0; i < a->nargs; i++)
        if (!tk_expr_equal(a->args[i], b->args[i])) return 0;
    return 1;
}

/* A float literal that reads back as itself: 17 digits, a '.' or an
 * exponent so it stays a float, `inf` for infinity (the sign is a NEG). */
static void float_spec(tk_buf *b, double v) {
    char t[40];
    if (isinf(v)) {
        tk_buf_puts(b, v < 0 ? "(-inf)" : "inf");
        return;
    }
    snprintf(t, sizeof t, "%.17g", fabs(v));
    if (!strpbrk(t, ".e")) strcat(t, ".0");
    tk_buf_printf(b, v < 0 ? "(-%s)" : "%s", t);
}

/* tk_expr_text, and with exact set tk_expr_spec: the operations of
 * sub-expressions in parentheses (exact: every one, conditionals too). */
static void print_expr(tk_buf *b, const tk_expr *e, int top, int exact) {
    switch (e->kind) {
    case TK_E_INT: tk_buf_printf(b, exact && e->ival < 0 ? "(%lld)" : "%lld", (long long)e->ival); return;
    case TK_E_FLOAT:
        if (exact) float_spec(b, e->fval);
        else tk_buf_printf(b, "%g", e->fval);
        return;
    case TK_E_BOOL: tk_buf_puts(b, e->ival ? "True" : "False"); return;
    case TK_E_NAME: tk_buf_puts(b, e->name); return;
    case TK_E_ELLIPSIS: tk_buf_puts(b, "..."); return;
    case TK_E_UNARY:
        tk_buf_printf(b, "%s%s%s", exact ? "(" : "", tk_opc_text(e->op), e->op == TK_OPC_NOT ? " " : "");
        print_expr(b, e->args[0], 0, exact);
        tk_buf_puts(b, exact ? ")" : "");
        return;
    case TK_E_BINARY:
        tk_buf_puts(b, top ? "" : "(");
        print_expr(b, e->args[0], 0, exact);
        tk_buf_printf(b, " %s ", tk_opc_text(e->op));
        print_expr(b, e->args[1], 0, exact);
        tk_buf_puts(b, top ? "" : ")");
        return;
    case TK_E_COND:
        tk_buf_puts(b, exact ? "(" : "");
        print_expr(b, e->args[0], 0, exact);
        tk_buf_puts(b, " if ");
        print_expr(b, e->args[1], 0, exact);
        tk_buf_puts(b, " else ");
        print_expr(b, e->args[2], 0, exact);
        tk_buf_puts(b, exact ? ")" : "");
        return;
    case TK_E_CALL:
    case TK_E_INDEX:
        tk_buf_printf(b, "%s%c", e->name, e->kind == TK_E_CALL ? '(' : '[');
        for (int i = 0; i < e->nargs; i++) {
            if (i) tk_buf_puts(b, ", ");
            print_expr(b, e->args[i], 0, exact);
        }
        tk_buf_puts(b, e->kind == TK_E_CALL ? ")" : "]");
        return;
    }
}

void tk_expr_text(tk_buf *b, const tk_expr *e, int top) { print_expr(b, e, top, 0); }

void tk_expr_spec(tk_buf *b, const tk_expr *e) { print_expr(b, e, 0, 1); }

int tk_explicit_dims(const tk_param *p) {
    int n = 0;
    for (int i = 0; i < p->ndims; i++)
        if (p->dims[i]->kind != TK_E_ELLIPSIS) n++;
    return n;
}

int tk_mut_output(const tk_opdecl *d, int param) {
    for (int o = d->nreturns; o < d->noutputs; o++)
        if (d->outputs[o].alias == param + 1) return o;
    return -1;
}
