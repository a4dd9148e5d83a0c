/* parse.c - recursive-descent parser of spec files (grammar: docs/spec.md).
 *
 * Errors unwind with longjmp to tk_parse; every node lives in the arena, so
 * nothing leaks. Nesting (expressions, blocks) is limited to
 * TK_LEX_MAX_DEPTH so that any input terminates without exhausting the
 * stack. */
#include "ast.h"
#include "lex.h"
#include "core.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct parser {
    tk_lex_state ls;
    tk_token tok;               /* current token */
    tk_arena *a;
    const char *file;           /* for messages */
    const char *file_copy;      /* arena copies shared by every op */
    const char *text_copy;
    const char *text;
    size_t len;
    tk_error *err;
    int depth;                  /* current nesting of expressions/blocks */
    jmp_buf fail;
} parser;

/* ---------------------------------------------------------------- errors */

/* Records a syntax error at loc (file:line:col) and unwinds to tk_parse. */
static _Noreturn void error_at(parser *p, tk_loc loc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tk_error_setv(p->err, TK_ERR_SYNTAX, p->file, loc, fmt, ap);
    va_end(ap);
    longjmp(p->fail, 1);
}

/* Records "out of memory" (TK_ERR_NOMEM) and unwinds to tk_parse. */
static _Noreturn void out_of_memory(parser *p) {
    tk_error_set(p->err, TK_ERR_NOMEM, p->file, p->tok.loc, "out of memory");
    longjmp(p->fail, 1);
}

/* Error "expected WHAT, found <tok>" at tok. */
static _Noreturn void error_found(parser *p, const tk_token *tok, const char *what) {
    char found[64];
    if (tok->kind == TK_T_INDENT)
        error_at(p, tok->loc, "unexpected indent");
    tk_lex_describe(tok, found, sizeof found);
    error_at(p, tok->loc, "expected %s, found %s", what, found);
}

/* Error "expected WHAT, found <current token>". */
static _Noreturn void expected(parser *p, const char *what) {
    error_found(p, &p->tok, what);
}

/* ---------------------------------------------------------------- memory */

/* Zeroed arena memory; unwinds with "out of memory" on failure. */
static void *alloc(parser *p, size_t n) {
    void *q = tk_arena_alloc(p->a, n);
    if (q == NULL) out_of_memory(p);
    return q;
}

/* Arena copy of s[0..n). */
static char *copy_str(parser *p, const char *s, size_t n) {
    char *q = tk_arena_strndup(p->a, s, n);
    if (q == NULL) out_of_memory(p);
    return q;
}

/* Returns items with room for one more element (of size bytes) past n. */
static void *grow(parser *p, void *items, int n, int *cap, size_t size) {
    void *q;
    int ncap;
    if (n < *cap) return items;
    if (*cap >= (1 << 24)) error_at(p, p->tok.loc, "too many items in a list");
    ncap = *cap > 0 ? *cap * 2 : 4;
    q = alloc(p, (size_t)ncap * size);
    if (n > 0) memcpy(q, items, (size_t)n * size);
    *cap = ncap;
    return q;
}

/* ---------------------------------------------------------------- tokens */

/* Moves to the next token; lexical errors unwind here. */
static void next(parser *p) {
    tk_lex_next(&p->ls, &p->tok);
    if (p->tok.kind == TK_T_ERROR) error_at(p, p->tok.loc, "%s", p->ls.msg);
}

/* 1 if the current token has kind k. */
static int check(const parser *p, tk_token_kind k) {
    return p->tok.kind == k;
}

/* Consumes the current token if it has kind k; returns 1 if it did. */
static int accept(parser *p, tk_token_kind k) {
    if (p->tok.kind != k) return 0;
    next(p);
    return 1;
}

/* Consumes a token of kind k or fails with "expected WHAT, found ...". */
static void expect(parser *p, tk_token_kind k, const char *what) {
    if (p->tok.kind != k) expected(p, what);
    next(p);
}

/* 1 if the current token is the name word. */
static int is_word(const parser *p, const char *word) {
    size_t n = strlen(word);
    return p->tok.kind == TK_T_NAME && p->tok.len == n &&
           memcmp(p->tok.start, word, n) == 0;
}

/* Consumes a NAME (or fails with "expected WHAT") and returns its copy. */
static const char *expect_name(parser *p, const char *what, tk_loc *loc) {
    const char *s;
    if (p->tok.kind != TK_T_NAME) expected(p, what);
    s = copy_str(p, p->tok.start, p->tok.len);
    if (loc != NULL) *loc = p->tok.loc;
    next(p);
    return s;
}

/* Enters one nesting level at loc; fails past the limit. */
static void enter(parser *p, tk_loc loc) {
    if (++p->depth > TK_LEX_MAX_DEPTH) error_at(p, loc, "nesting too deep");
}

/* Leaves one nesting level. */
static void leave(parser *p) {
    p->depth--;
}

/* ----------------------------------------------------------- expressions */

static tk_expr *parse_expr(parser *p);
static tk_expr *parse_unary(parser *p);

/* New expression node of kind k at loc. */
static tk_expr *new_expr(parser *p, tk_expr_kind k, tk_loc loc) {
    tk_expr *e = (tk_expr *)alloc(p, sizeof *e);
    e->kind = k;
    e->loc = loc;
    return e;
}

/* Sets e's height from its arguments'. The checker and printers recurse
 * over the tree, and a chain of operators (a + b + c ..., built left to
 * right without recursion here) is as deep as it is long: fails past
 * TK_MAX_EXPR_HEIGHT. */
static void set_height(parser *p, tk_expr *e) {
    int h = 0;
    for (int i = 0; i < e->nargs; i++)
        if (e->args[i]->height > h) h = e->args[i]->height;
    e->height = h + 1;
    if (e->height > TK_MAX_EXPR_HEIGHT)
        error_at(p, e->loc, "expression too long: more than %d operations deep (split it with locals)",
                 TK_MAX_EXPR_HEIGHT);
}

/* New node op(a) or op(a, b) (b NULL for unary) at loc. */
static tk_expr *new_op(parser *p, tk_expr_kind k, tk_opc op, tk_loc loc,
                       tk_expr *x, tk_expr *y) {
    tk_expr *e = new_expr(p, k, loc);
    e->op = op;
    e->nargs = y != NULL ? 2 : 1;
    e->args = (tk_expr **)alloc(p, (size_t)e->nargs * sizeof *e->args);
    e->args[0] = x;
    if (y != NULL) e->args[1] = y;
    set_height(p, e);
    return e;
}

/* Parses expr {',' expr} up to the closing token close (consumed);
 * allow_empty permits zero items. ctx names the list in messages. */
static tk_expr **parse_expr_list(parser *p, tk_token_kind close, int allow_empty,
                                 const char *ctx, int *n) {
    tk_expr **items = NULL;
    int cap = 0;
    char what[96];
    *n = 0;
    if (allow_empty && accept(p, close)) return NULL;
    for (;;) {
        items = (tk_expr **)grow(p, items, *n, &cap, sizeof *items);
        items[(*n)++] = parse_expr(p);
        if (accept(p, TK_T_COMMA)) continue;
        if (accept(p, close)) return items;
        snprintf(what, sizeof what, "',' or %s %s", tk_lex_token_text(close), ctx);
        expected(p, what);
    }
}

/* primary := INT | FLOAT | True | False | NAME | NAME '(' args ')'
 *          | NAME '[' exprs ']' | '(' expr ')' */
static tk_expr *parse_primary(parser *p) {
    tk_expr *e;
    tk_loc loc = p->tok.loc;
    char ctx[96];
    switch (p->tok.kind) {
    case TK_T_INT:
        e = new_expr(p, TK_E_INT, loc);
        e->ival = p->tok.ival;
        next(p);
        return e;
    case TK_T_FLOAT:
        e = new_expr(p, TK_E_FLOAT, loc);
        e->fval = p->tok.fval;
        next(p);
        return e;
    case TK_T_TRUE: case TK_T_FALSE:
        e = new_expr(p, TK_E_BOOL, loc);
        e->ival = p->tok.kind == TK_T_TRUE;
        next(p);
        return e;
    case TK_T_NAME:
        e = new_expr(p, TK_E_NAME, loc);
        e->name = expect_name(p, "a name", NULL);
        if (accept(p, TK_T_LPAREN)) {
            e->kind = TK_E_CALL;
            snprintf(ctx, sizeof ctx, "in the call to '%.40s'", e->name);
            e->args = parse_expr_list(p, TK_T_RPAREN, 1, ctx, &e->nargs);
            set_height(p, e);
        } else if (accept(p, TK_T_LBRACKET)) {
            e->kind = TK_E_INDEX;
            snprintf(ctx, sizeof ctx, "in the index of '%.40s'", e->name);
            e->args = parse_expr_list(p, TK_T_RBRACKET, 1, ctx, &e->nargs);
            set_height(p, e);
        } else if (strcmp(e->name, "inf") == 0) {   /* the float literal infinity (-inf: its negation) */
            e->kind = TK_E_FLOAT;
            e->fval = HUGE_VAL;
        }
        return e;
    case TK_T_LPAREN:
        next(p);
        e = parse_expr(p);
        expect(p, TK_T_RPAREN, "')'");
        return e;
    case TK_T_LBRACKET:   /* a Python list: no local arrays in a spec */
        error_at(p, p->tok.loc, "expected an expression, found '[': a spec has no lists or local arrays (keep "
                 "per-element state in an output, or in scalar locals)");
    default:
        expected(p, "an expression");
    }
}

/* power := primary ['**' unary]   (right-associative, binds tighter than a
 * unary minus on its left: -2**2 == -(2**2)) */
static tk_expr *parse_power(parser *p) {
    tk_expr *e = parse_primary(p), *r;
    tk_loc loc = p->tok.loc;
    if (!accept(p, TK_T_DSTAR)) return e;
    enter(p, loc);
    r = parse_unary(p);
    leave(p);
    return new_op(p, TK_E_BINARY, TK_OPC_POW, loc, e, r);
}

/* unary := ('-' | '+') unary | power */
static tk_expr *parse_unary(parser *p) {
    tk_loc loc = p->tok.loc;
    tk_opc op;
    tk_expr *x;
    if (check(p, TK_T_MINUS)) op = TK_OPC_NEG;
    else if (check(p, TK_T_PLUS)) op = TK_OPC_POS;
    else return parse_power(p);
    next(p);
    enter(p, loc);
    x = parse_unary(p);
    leave(p);
    return new_op(p, TK_E_UNARY, op, loc, x, NULL);
}

/* Binary operator of token kind k among the term operators, or NONE. */
static tk_opc term_op(tk_token_kind k) {
    switch (k) {
    case TK_T_STAR: return TK_OPC_MUL;
    case TK_T_SLASH: return TK_OPC_DIV;
    case TK_T_DSLASH: return TK_OPC_FLOORDIV;
    case TK_T_PERCENT: return TK_OPC_MOD;
    default: return TK_OPC_NONE;
    }
}

/* term := unary {('*' | '/' | '//' | '%') unary} */
static tk_expr *parse_term(parser *p) {
    tk_expr *e = parse_unary(p);
    tk_opc op;
    while ((op = term_op(p->tok.kind)) != TK_OPC_NONE) {
        tk_loc loc = p->tok.loc;
        next(p);
        e = new_op(p, TK_E_BINARY, op, loc, e, parse_unary(p));
    }
    return e;
}

/* arith := term {('+' | '-') term} */
static tk_expr *parse_arith(parser *p) {
    tk_expr *e = parse_term(p);
    while (check(p, TK_T_PLUS) || check(p, TK_T_MINUS)) {
        tk_loc loc = p->tok.loc;
        tk_opc op = check(p, TK_T_PLUS) ? TK_OPC_ADD : TK_OPC_SUB;
        next(p);
        e = new_op(p, TK_E_BINARY, op, loc, e, parse_term(p));
    }
    return e;
}

/* Comparison operator of token kind k, or NONE. */
static tk_opc cmp_op(tk_token_kind k) {
    switch (k) {
    case TK_T_EQ: return TK_OPC_EQ;
    case TK_T_NE: return TK_OPC_NE;
    case TK_T_LT: return TK_OPC_LT;
    case TK_T_LE: return TK_OPC_LE;
    case TK_T_GT: return TK_OPC_GT;
    case TK_T_GE: return TK_OPC_GE;
    default: return TK_OPC_NONE;
    }
}

/* cmp := arith [cmpop arith]; a second comparison operator is an error. */
static tk_expr *parse_cmp(parser *p) {
    tk_expr *e = parse_arith(p);
    tk_opc op = cmp_op(p->tok.kind);
    tk_loc loc = p->tok.loc;
    if (op == TK_OPC_NONE) return e;
    next(p);
    e = new_op(p, TK_E_BINARY, op, loc, e, parse_arith(p));
    if (cmp_op(p->tok.kind) != TK_OPC_NONE)
        error_at(p, p->tok.loc, "chained comparisons are not supported "
                 "(write 'a < b and b < c')");
    return e;
}

/* not := 'not' not | cmp */
static tk_expr *parse_not(parser *p) {
    tk_loc loc = p->tok.loc;
    tk_expr *x;
    if (!accept(p, TK_T_NOT)) return parse_cmp(p);
    enter(p, loc);
    x = parse_not(p);
    leave(p);
    return new_op(p, TK_E_UNARY, TK_OPC_NOT, loc, x, NULL);
}

/* and := not {'and' not} */
static tk_expr *parse_and(parser *p) {
    tk_expr *e = parse_not(p);
    while (check(p, TK_T_AND)) {
        tk_loc loc = p->tok.loc;
        next(p);
        e = new_op(p, TK_E_BINARY, TK_OPC_AND, loc, e, parse_not(p));
    }
    return e;
}

/* or := and {'or' and} */
static tk_expr *parse_or(parser *p) {
    tk_expr *e = parse_and(p);
    while (check(p, TK_T_OR)) {
        tk_loc loc = p->tok.loc;
        next(p);
        e = new_op(p, TK_E_BINARY, TK_OPC_OR, loc, e, parse_and(p));
    }
    return e;
}

/* expr := or ['if' or 'else' expr]  -> COND {then, cond, else} at 'if' */
static tk_expr *parse_expr(parser *p) {
    tk_expr *e, *c;
    tk_loc loc = p->tok.loc;
    enter(p, loc);
    e = parse_or(p);
    if (check(p, TK_T_IF)) {
        loc = p->tok.loc;
        next(p);
        c = new_expr(p, TK_E_COND, loc);
        c->nargs = 3;
        c->args = (tk_expr **)alloc(p, 3 * sizeof *c->args);
        c->args[0] = e;
        c->args[1] = parse_or(p);
        expect(p, TK_T_ELSE, "'else' in the conditional expression");
        c->args[2] = parse_expr(p);
        set_height(p, c);
        e = c;
    }
    leave(p);
    return e;
}

/* ------------------------------------------------------------ statements */

static tk_stmt **parse_block(parser *p, int *n);

/* New statement of kind k at loc. */
static tk_stmt *new_stmt(parser *p, tk_stmt_kind k, tk_loc loc) {
    tk_stmt *s = (tk_stmt *)alloc(p, sizeof *s);
    s->kind = k;
    s->loc = loc;
    return s;
}

/* Ends a simple statement: NEWLINE. */
static void end_stmt(parser *p) {
    expect(p, TK_T_NEWLINE, "NEWLINE after the statement");
}

/* Augmented-assignment operator of token kind k; -1 if k is none. */
static int assign_op(tk_token_kind k) {
    switch (k) {
    case TK_T_ASSIGN: return TK_OPC_NONE;
    case TK_T_PLUSEQ: return TK_OPC_ADD;
    case TK_T_MINUSEQ: return TK_OPC_SUB;
    case TK_T_STAREQ: return TK_OPC_MUL;
    case TK_T_SLASHEQ: return TK_OPC_DIV;
    default: return -1;
    }
}

/* NAME op= expr | NAME '[' exprs ']' op= expr */
static tk_stmt *parse_assign(parser *p) {
    tk_stmt *s = new_stmt(p, TK_S_ASSIGN, p->tok.loc);
    int op;
    char what[128];
    s->name = expect_name(p, "a name", NULL);
    if (accept(p, TK_T_LBRACKET)) {
        s->kind = TK_S_STORE;
        snprintf(what, sizeof what, "in the index of '%.40s'", s->name);
        s->index = parse_expr_list(p, TK_T_RBRACKET, 1, what, &s->nindex);
    }
    op = assign_op(p->tok.kind);
    if (op < 0) {
        if (s->kind == TK_S_STORE)
            snprintf(what, sizeof what,
                     "'=', '+=', '-=', '*=' or '/=' after '%.40s[...]'", s->name);
        else
            snprintf(what, sizeof what,
                     "'=', '+=', '-=', '*=', '/=' or '[' after '%.40s'", s->name);
        expected(p, what);
    }
    next(p);
    s->op = (tk_opc)op;
    s->value = parse_expr(p);
    if (s->kind == TK_S_STORE && s->op == TK_OPC_ADD) {
        /* o[idx] += e, a sum store (docs/spec.md, Sums): kept as o[idx] =
         * o[idx] + e, which every printer prints, s->op marking it */
        tk_expr *rd = new_expr(p, TK_E_INDEX, s->loc);
        rd->name = s->name;
        rd->args = s->index;
        rd->nargs = s->nindex;
        set_height(p, rd);
        s->value = new_op(p, TK_E_BINARY, TK_OPC_ADD, s->value->loc, rd, s->value);
    }
    end_stmt(p);
    return s;
}

/* 'if' expr ':' block {'elif' expr ':' block} ['else' ':' block];
 * each elif becomes the only statement of the previous if's orelse. */
static tk_stmt *parse_if(parser *p) {
    tk_stmt *first = NULL, *last = NULL;
    int levels = 0;   /* an elif nests one level deeper (the checker and printers recurse) */
    do {
        tk_stmt *s = new_stmt(p, TK_S_IF, p->tok.loc);
        int is_elif = check(p, TK_T_ELIF);
        if (is_elif) {
            enter(p, p->tok.loc);
            levels++;
        }
        next(p);
        s->value = parse_expr(p);
        expect(p, TK_T_COLON, is_elif ? "':' after the 'elif' condition"
                                      : "':' after the 'if' condition");
        s->body = parse_block(p, &s->nbody);
        if (last == NULL) {
            first = s;
        } else {
            last->orelse = (tk_stmt **)alloc(p, sizeof *last->orelse);
            last->orelse[0] = s;
            last->norelse = 1;
        }
        last = s;
    } while (check(p, TK_T_ELIF));
    if (accept(p, TK_T_ELSE)) {
        expect(p, TK_T_COLON, "':' after 'else'");
        last->orelse = parse_block(p, &last->norelse);
    }
    while (levels-- > 0) leave(p);
    return first;
}

/* 'for' NAME 'in' 'range' '(' expr [',' expr] ')' ':' block */
static tk_stmt *parse_for(parser *p) {
    tk_stmt *s = new_stmt(p, TK_S_FOR, p->tok.loc);
    tk_expr **args;
    tk_loc rloc;
    int n;
    next(p);
    s->name = expect_name(p, "a loop variable name after 'for'", NULL);
    expect(p, TK_T_IN, "'in' after the loop variable");
    if (!is_word(p, "range"))
        expected(p, "'range(...)' after 'in' (inner loops run over a range)");
    rloc = p->tok.loc;
    next(p);
    expect(p, TK_T_LPAREN, "'(' after 'range'");
    args = parse_expr_list(p, TK_T_RPAREN, 1, "in 'range(...)'", &n);
    if (n < 1 || n > 2)
        error_at(p, rloc, "range() takes 1 or 2 arguments, found %d", n);
    if (n == 2) s->lo = args[0];
    s->hi = args[n - 1];
    expect(p, TK_T_COLON, "':' after 'range(...)'");
    s->body = parse_block(p, &s->nbody);
    return s;
}

/* stmt := pass | assignment | store | if | for */
/* Fails at a Python statement the spec language does not have (the
 * lexer reads its keyword as a name), saying what to write instead. */
static void unsupported_statement(parser *p) {
    static const struct { const char *word, *instead; } words[] = {
        {"while", "loops are 'for NAME in range(...)', their bounds known when the loop starts"},
        {"break", "a loop runs its whole range (guard the rest of the body with 'if')"},
        {"continue", "guard the rest of the loop body with 'if'"},
        {"return", "an op stores its outputs ('y[i] = ...') and has no return value"},
        {"def", "a spec file holds ops ('op NAME(...) -> ...:'); write a helper's expression inline"},
        {"assert", "an assert on dims and int parameters goes before the loop ('assert D % 2 == 0'); a check "
                   "on data is a store whose index is out of range when it fails"},
    };
    const char *lead = "is not part of the spec language (docs/spec.md, Grammar)";
    static const char *const python_only[] = {"import", "from", "with", "try", "raise", "del", "global",
                                             "nonlocal", "yield", "lambda", "class"};
    if (p->tok.kind != TK_T_NAME) return;
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strlen(words[i].word) == p->tok.len && memcmp(words[i].word, p->tok.start, p->tok.len) == 0)
            error_at(p, p->tok.loc, "'%s' %s: %s", words[i].word, lead, words[i].instead);
    for (size_t i = 0; i < sizeof python_only / sizeof python_only[0]; i++)
        if (strlen(python_only[i]) == p->tok.len && memcmp(python_only[i], p->tok.start, p->tok.len) == 0)
            error_at(p, p->tok.loc, "'%s' %s", python_only[i], lead);
}

static tk_stmt *parse_stmt(parser *p) {
    tk_stmt *s;
    switch (p->tok.kind) {
    case TK_T_PASS:
        s = new_stmt(p, TK_S_PASS, p->tok.loc);
        next(p);
        end_stmt(p);
        return s;
    case TK_T_NAME:
        unsupported_statement(p);
        return parse_assign(p);
    case TK_T_IF: return parse_if(p);
    case TK_T_FOR: return parse_for(p);
    default: expected(p, "a statement");
    }
}

/* block := NEWLINE INDENT stmt {stmt} DEDENT */
static tk_stmt **parse_block(parser *p, int *n) {
    tk_stmt **items = NULL;
    int cap = 0;
    expect(p, TK_T_NEWLINE, "NEWLINE after ':' (a block starts on the next line)");
    if (!check(p, TK_T_INDENT)) expected(p, "an indented block");
    enter(p, p->tok.loc);
    next(p);
    *n = 0;
    while (!check(p, TK_T_DEDENT)) {
        items = (tk_stmt **)grow(p, items, *n, &cap, sizeof *items);
        items[(*n)++] = parse_stmt(p);
    }
    next(p);
    leave(p);
    return items;
}

/* ------------------------------------------------------- op declarations */

static const struct { const char *word; unsigned mask; } dtype_words[] = {
    {"any", TK_DTYPES_ANY}, {"float", TK_DTYPES_FLOAT}, {"int", TK_DTYPES_INT},
    {"bool", 1u << TK_BOOL}, {"uint8", 1u << TK_U8}, {"int8", 1u << TK_I8},
    {"int16", 1u << TK_I16}, {"int32", 1u << TK_I32}, {"int64", 1u << TK_I64},
    {"float16", 1u << TK_F16}, {"bfloat16", 1u << TK_BF16},
    {"float32", 1u << TK_F32}, {"float64", 1u << TK_F64},
};

#define DTYPE_EXPECTED "a dtype (any, float, int, bool, uint8, int8, int16, " \
    "int32, int64, float16, bfloat16, float32, float64) or 'x.dtype'"

/* Mask of the dtype word in tok; fails naming it if it is not one. */
static unsigned dtype_mask(parser *p, const tk_token *tok) {
    size_t i;
    if (tok->kind == TK_T_NAME)
        for (i = 0; i < sizeof dtype_words / sizeof dtype_words[0]; i++)
            if (strlen(dtype_words[i].word) == tok->len &&
                memcmp(dtype_words[i].word, tok->start, tok->len) == 0)
                return dtype_words[i].mask;
    error_found(p, tok, DTYPE_EXPECTED);
}

/* Scalar kind of a lone dtype word (int, float, bool), or -1. */
static int scalar_kind(const tk_token *tok) {
    if (tok->kind != TK_T_NAME) return -1;
    if (tok->len == 3 && memcmp(tok->start, "int", 3) == 0) return TK_P_INT;
    if (tok->len == 5 && memcmp(tok->start, "float", 5) == 0) return TK_P_FLOAT;
    if (tok->len == 4 && memcmp(tok->start, "bool", 4) == 0) return TK_P_BOOL;
    return -1;
}

/* dtypes := dtype {'|' dtype} | NAME '.' 'dtype'. Fills the mask or
 * dtype_of of prm; returns the scalar kind if it was one scalar word. */
static int parse_dtypes(parser *p, tk_param *prm) {
    tk_token first = p->tok;
    char what[96];
    prm->dtype_loc = first.loc;
    if (first.kind != TK_T_NAME) expected(p, DTYPE_EXPECTED);
    next(p);
    if (accept(p, TK_T_DOT)) {
        prm->dtype_of = copy_str(p, first.start, first.len);
        if (!is_word(p, "dtype")) {
            snprintf(what, sizeof what, "'dtype' after '%.40s.'", prm->dtype_of);
            expected(p, what);
        }
        next(p);
        return -1;
    }
    prm->dtype_mask = dtype_mask(p, &first);
    if (!check(p, TK_T_BAR)) return scalar_kind(&first);
    while (accept(p, TK_T_BAR)) {
        tk_token t = p->tok;
        if (t.kind != TK_T_NAME) expected(p, "a dtype after '|'");
        prm->dtype_mask |= dtype_mask(p, &t);
        next(p);
    }
    return -1;
}

/* dim := '...' | NAME | INT   (inputs);   '...' | expr   (outputs) */
static tk_expr *parse_dim(parser *p, int is_output) {
    tk_expr *e;
    if (check(p, TK_T_ELLIPSIS)) {
        e = new_expr(p, TK_E_ELLIPSIS, p->tok.loc);
        next(p);
        return e;
    }
    if (is_output) return parse_expr(p);
    if (check(p, TK_T_NAME)) {
        e = new_expr(p, TK_E_NAME, p->tok.loc);
        e->name = expect_name(p, "a name", NULL);
        return e;
    }
    if (check(p, TK_T_INT)) {
        e = new_expr(p, TK_E_INT, p->tok.loc);
        e->ival = p->tok.ival;
        next(p);
        return e;
    }
    expected(p, "a dim (a name, an integer or '...')");
}

/* '[' [dim {',' dim}] ']' (at least one dim for outputs) */
static void parse_dims(parser *p, tk_param *prm, int is_output) {
    int cap = 0;
    next(p);                                    /* '[' */
    if (!is_output && accept(p, TK_T_RBRACKET)) return;
    for (;;) {
        prm->dims = (tk_expr **)grow(p, prm->dims, prm->ndims, &cap, sizeof *prm->dims);
        prm->dims[prm->ndims++] = parse_dim(p, is_output);
        if (accept(p, TK_T_COMMA)) continue;
        if (accept(p, TK_T_RBRACKET)) return;
        expected(p, "',' or ']' after a dim");
    }
}

/* param := NAME ':' scalar ['?'] ['=' expr] | NAME ':' ['mut'] dtypes '[' dims ']' ['?'] ['=' expr]
 * outparam := NAME ':' dtypes '[' dim {',' dim} ']' */
static void parse_param(parser *p, tk_param *prm, int is_output) {
    char what[96];
    int sk;
    prm->name = expect_name(p, is_output ? "an output name" : "a parameter name",
                            &prm->loc);
    snprintf(what, sizeof what, "':' after '%.40s'", prm->name);
    expect(p, TK_T_COLON, what);
    if (!is_output && is_word(p, "mut")) {      /* 'mut' dtypes '[' dims ']': updated in place */
        tk_token m = p->tok;
        next(p);
        if (check(p, TK_T_DOT)) {               /* 'mut.dtype': the dtype of a tensor named mut */
            prm->dtype_loc = m.loc;
            prm->dtype_of = copy_str(p, m.start, m.len);
            next(p);
            if (!is_word(p, "dtype")) expected(p, "'dtype' after 'mut.'");
            next(p);
            sk = -1;
        } else {
            prm->mut = 1;
            sk = parse_dtypes(p, prm);
            if (!check(p, TK_T_LBRACKET))
                error_at(p, m.loc, "only a tensor parameter can be 'mut' (updated in place): '%.40s' has no dims",
                         prm->name);
        }
    } else {
        sk = parse_dtypes(p, prm);
    }
    prm->kind = TK_P_TENSOR;
    if (check(p, TK_T_LBRACKET)) {
        parse_dims(p, prm, is_output);
        if (is_output) return;
        if (accept(p, TK_T_QUESTION)) prm->optional = 1;        /* 'bias: x.dtype[N]? = 0' */
        if (accept(p, TK_T_ASSIGN)) prm->default_value = parse_expr(p);
        return;
    }
    if (is_output || sk < 0)
        expected(p, is_output ? "'[' after the output's dtype" : "'[' after the dtype");
    prm->kind = (tk_param_kind)sk;
    prm->dtype_mask = 0;
    if (accept(p, TK_T_QUESTION)) prm->optional = 1;
    if (accept(p, TK_T_ASSIGN)) prm->default_value = parse_expr(p);
}

/* '(' [param {',' param} [',']] ')' */
static void parse_params(parser *p, tk_opdecl *op) {
    int cap = 0;
    expect(p, TK_T_LPAREN, "'(' after the op name");
    while (!accept(p, TK_T_RPAREN)) {
        op->params = (tk_param *)grow(p, op->params, op->nparams, &cap, sizeof *op->params);
        parse_param(p, &op->params[op->nparams++], 0);
        if (accept(p, TK_T_COMMA)) continue;
        if (!check(p, TK_T_RPAREN)) expected(p, "',' or ')' after a parameter");
    }
}

/* outputs := outparam | '(' outparam {',' outparam} ')' */
static void parse_outputs(parser *p, tk_opdecl *op) {
    int cap = 0, paren = accept(p, TK_T_LPAREN);
    for (;;) {
        op->outputs = (tk_param *)grow(p, op->outputs, op->noutputs, &cap, sizeof *op->outputs);
        parse_param(p, &op->outputs[op->noutputs++], 1);
        if (!paren) return;
        if (accept(p, TK_T_RPAREN)) return;
        if (!accept(p, TK_T_COMMA)) expected(p, "',' or ')' after an output");
    }
}

/* Whether some parameter of op is 'mut'. */
static int has_mut(const tk_opdecl *op) {
    for (int i = 0; i < op->nparams; i++)
        if (op->params[i].mut) return 1;
    return 0;
}

/* Appends one output a 'mut' parameter, after the declared ones: the
 * tensor the body stores into, of the parameter's name, dims and dtype
 * (alias: 1 + the parameter's index). */
static void add_mut_outputs(parser *p, tk_opdecl *op) {
    int cap = op->noutputs;
    for (int i = 0; i < op->nparams; i++) {
        const tk_param *m = &op->params[i];
        if (!m->mut) continue;
        op->outputs = (tk_param *)grow(p, op->outputs, op->noutputs, &cap, sizeof *op->outputs);
        tk_param *o = &op->outputs[op->noutputs++];
        memset(o, 0, sizeof *o);
        o->name = m->name;
        o->loc = m->loc;
        o->kind = TK_P_TENSOR;
        o->dtype_of = m->name;
        o->dtype_loc = m->dtype_loc;
        o->alias = i + 1;
        o->ndims = m->ndims;
        o->dims = (tk_expr **)alloc(p, (size_t)(m->ndims > 0 ? m->ndims : 1) * sizeof *o->dims);
        for (int j = 0; j < m->ndims; j++) {     /* (copies: the checker annotates an output's dims) */
            o->dims[j] = (tk_expr *)alloc(p, sizeof *o->dims[j]);
            *o->dims[j] = *m->dims[j];
        }
    }
}

/* parfor := 'for' NAME {',' NAME} 'in' NAME ':' block */
static void parse_parfor(parser *p, tk_opdecl *op) {
    int cap = 0, lcap = 0;
    next(p);                                    /* 'for' */
    for (;;) {
        op->loop_vars = (const char **)grow(p, (void *)op->loop_vars, op->nloop,
                                            &cap, sizeof *op->loop_vars);
        op->loop_locs = (tk_loc *)grow(p, op->loop_locs, op->nloop, &lcap,
                                       sizeof *op->loop_locs);
        op->loop_vars[op->nloop] = expect_name(p, "a loop variable name after 'for'",
                                               &op->loop_locs[op->nloop]);
        op->nloop++;
        if (accept(p, TK_T_IN)) break;
        if (!accept(p, TK_T_COMMA)) expected(p, "',' or 'in' after a loop variable");
    }
    op->loop_over = expect_name(p, "the name of an output after 'in'", &op->loop_loc);
    expect(p, TK_T_COLON, "':' after the top-level 'for ... in <output>'");
    op->body = parse_block(p, &op->nbody);
}

#define PARFOR_EXPECTED "the top-level 'for ... in <output>:' loop"

/* 'backward' NAME {',' NAME} NEWLINE: the ops that compute op's gradients. */
static void parse_backward(parser *p, tk_opdecl *op) {
    tk_loc loc = p->tok.loc;
    int cap = 0, lcap = 0;
    next(p);
    if (op->nbackward > 0 || op->backward_auto)
        error_at(p, loc, "duplicate 'backward' line (list every backward op of '%.40s' "
                 "on one line: backward a, b)", op->name);
    do {
        tk_loc nloc;
        const char *name = expect_name(p, "an op name after 'backward'", &nloc);
        int is_auto = strcmp(name, "auto") == 0;
        if (is_auto && op->nbackward == 0 && (check(p, TK_T_NEWLINE) || check(p, TK_T_INT))) {
            /* derived (compiler/autodiff.c); 'auto 2': its backward op derived too, and so on */
            op->backward_auto = 1;
            if (check(p, TK_T_INT)) {
                if (p->tok.ival < 1 || p->tok.ival > TK_MAX_AUTO_ORDER)
                    error_at(p, p->tok.loc, "'backward auto %lld': the order of derivatives runs from 1 to %d",
                             (long long)p->tok.ival, TK_MAX_AUTO_ORDER);
                op->backward_auto = (int)p->tok.ival;
                next(p);
                if (!check(p, TK_T_NEWLINE)) expected(p, "NEWLINE after 'backward auto N'");
            }
            op->backward_locs = (tk_loc *)grow(p, op->backward_locs, 0, &lcap, sizeof *op->backward_locs);
            op->backward_locs[0] = nloc;
            break;
        }
        if (is_auto || op->backward_auto)
            error_at(p, nloc, "'backward auto' derives every gradient of '%.40s': it stands alone on its line",
                     op->name);
        for (int i = 0; i < op->nbackward; i++)
            if (strcmp(op->backward[i], name) == 0)
                error_at(p, nloc, "backward op '%.40s' is listed twice", name);
        op->backward = (const char **)grow(p, op->backward, op->nbackward, &cap,
                                           sizeof *op->backward);
        op->backward_locs = (tk_loc *)grow(p, op->backward_locs, op->nbackward, &lcap,
                                           sizeof *op->backward_locs);
        op->backward_locs[op->nbackward] = nloc;
        op->backward[op->nbackward++] = name;
    } while (accept(p, TK_T_COMMA));
    expect(p, TK_T_NEWLINE, "',' or NEWLINE after a backward op name");
}

/* 'schedule' NAME '=' INT {',' NAME '=' INT} NEWLINE: the CUDA tile shape
 * (lanes, rows, warp_rows, chunk, split, ldg, tiles, regs, coop; see compiler/schedule.c). 'schedule' is a
 * word only here, where nothing else but 'backward' or the loop may stand. */
static void parse_schedule(parser *p, tk_opdecl *op) {
    tk_loc loc = p->tok.loc;
    next(p);
    if (op->schedule_loc.line != 0)
        error_at(p, loc, "duplicate 'schedule' line (give every item on one line: schedule lanes=16, rows=2)");
    op->schedule_loc = loc;
    do {
        tk_loc kloc = p->tok.loc;
        if (!check(p, TK_T_NAME)) expected(p, "a schedule item (lanes, rows, warp_rows, chunk, split, ldg, tiles, regs, coop or parts)");
        int k = tk_sched_find(p->tok.start, p->tok.len);
        if (k < 0)
            error_at(p, kloc, "unknown schedule item '%.*s' (lanes, rows, warp_rows, chunk, split, ldg, tiles, regs, coop or parts)",
                     (int)(p->tok.len > 40 ? 40 : p->tok.len), p->tok.start);
        if (op->schedule[k]) error_at(p, kloc, "schedule item '%s' is given twice", tk_sched_keys[k].key);
        next(p);
        expect(p, TK_T_ASSIGN, "'=' after a schedule item");
        tk_loc vloc = p->tok.loc;
        if (!check(p, TK_T_INT)) expected(p, "an integer after 'schedule ... ='");
        if (!tk_sched_valid(k, p->tok.ival)) {
            if (tk_sched_keys[k].step)
                error_at(p, vloc, "schedule %s=%lld: expected a multiple of %d from %ld to %ld", tk_sched_keys[k].key,
                         (long long)p->tok.ival, tk_sched_keys[k].step, tk_sched_keys[k].lo, tk_sched_keys[k].hi);
            error_at(p, vloc, "schedule %s=%lld: expected a power of two from %ld to %ld", tk_sched_keys[k].key,
                     (long long)p->tok.ival, tk_sched_keys[k].lo, tk_sched_keys[k].hi);
        }
        op->schedule[k] = (int)p->tok.ival;
        next(p);
    } while (accept(p, TK_T_COMMA));
    expect(p, TK_T_NEWLINE, "',' or NEWLINE after a schedule item");
}

/* 'assert' expr NEWLINE: a condition on the call's dims and int and bool
 * parameters (checked by check.c, evaluated by tk_bind and the shim's Meta
 * kernel). Like 'schedule', a word only here. */
static void parse_assert(parser *p, tk_opdecl *op, int *cap, int *lcap) {
    next(p);
    op->asserts = (tk_expr **)grow(p, op->asserts, op->nasserts, cap, sizeof *op->asserts);
    op->assert_locs = (tk_loc *)grow(p, op->assert_locs, op->nasserts, lcap, sizeof *op->assert_locs);
    op->assert_locs[op->nasserts] = p->tok.loc;
    op->asserts[op->nasserts++] = parse_expr(p);
    if (check(p, TK_T_COMMA))
        error_at(p, p->tok.loc, "an assert takes no message: tk's error names the condition, its line and the "
                 "values in it");
    expect(p, TK_T_NEWLINE, "NEWLINE after the assert's condition");
}

/* 'scratch' NAME ':' dtypes '[' dims ']' NEWLINE: a tensor the op
 * allocates for its body and does not return (docs/spec.md, Scratch
 * tensors), appended to the outputs after the returned ones. Like
 * 'schedule', a word only here. */
static void parse_scratch(parser *p, tk_opdecl *op, int *cap) {
    next(p);
    op->outputs = (tk_param *)grow(p, op->outputs, op->noutputs, cap, sizeof *op->outputs);
    tk_param *o = &op->outputs[op->noutputs];
    parse_param(p, o, 1);
    o->scratch = 1;
    op->noutputs++;
    expect(p, TK_T_NEWLINE, "NEWLINE after the scratch tensor's dims");
}

/* INDENT {'backward' NAME {',' NAME} NEWLINE | schedule | assert | scratch} parfor DEDENT */
static void parse_op_body(parser *p, tk_opdecl *op) {
    int acap = 0, alcap = 0, ocap = op->noutputs;
    if (!check(p, TK_T_INDENT)) expected(p, "an indented op body");
    next(p);
    while (check(p, TK_T_BACKWARD) || is_word(p, "schedule") || is_word(p, "assert") || is_word(p, "scratch")) {
        if (check(p, TK_T_BACKWARD)) parse_backward(p, op);
        else if (is_word(p, "schedule")) parse_schedule(p, op);
        else if (is_word(p, "scratch")) parse_scratch(p, op, &ocap);
        else parse_assert(p, op, &acap, &alcap);
    }
    if (!check(p, TK_T_FOR)) expected(p, PARFOR_EXPECTED);
    parse_parfor(p, op);
    if (!check(p, TK_T_DEDENT))
        expected(p, "the end of the op body after " PARFOR_EXPECTED);
    next(p);
}

/* opdef := 'op' NAME '(' params ')' '->' outputs ':' NEWLINE body */
static tk_opdecl *parse_op(parser *p) {
    tk_opdecl *op = (tk_opdecl *)alloc(p, sizeof *op);
    if (p->text_copy == NULL) {
        p->file_copy = copy_str(p, p->file, strlen(p->file));
        p->text_copy = copy_str(p, p->text, p->len);
    }
    op->file = p->file_copy;
    op->text = p->text_copy;
    next(p);                                    /* 'op' */
    op->name = expect_name(p, "an op name after 'op'", &op->loc);
    parse_params(p, op);
    if (!check(p, TK_T_COLON) || !has_mut(op)) {   /* ':' at once: the op only updates 'mut' parameters */
        expect(p, TK_T_ARROW, has_mut(op) ? "'->' or ':' after the parameter list"
                                          : "'->' after the parameter list");
        parse_outputs(p, op);
    }
    op->nreturns = op->noutputs;
    expect(p, TK_T_COLON, "':' after the output list");
    expect(p, TK_T_NEWLINE, "NEWLINE after the op header");
    parse_op_body(p, op);
    add_mut_outputs(p, op);                     /* (after the scratch tensors) */
    return op;
}

/* module := {opdef} */
static tk_module *parse_module(parser *p) {
    tk_module *m = (tk_module *)alloc(p, sizeof *m);
    int cap = 0;
    next(p);
    while (!check(p, TK_T_EOF)) {
        if (!check(p, TK_T_OP)) expected(p, "'op'");
        m->ops = (tk_opdecl **)grow(p, m->ops, m->nops, &cap, sizeof *m->ops);
        m->ops[m->nops++] = parse_op(p);
    }
    return m;
}

/* Parses a whole spec file; NULL with the error (file:line:col) in err. */
/* text with every carriage return not followed by a line feed (a classic
 * Mac line ending, which Python reads as one too) turned into a line feed,
 * in a's memory, so that line numbers count those lines; text itself when
 * it has none, NULL when out of memory. */
static const char *lone_cr_as_lf(tk_arena *a, const char *text, size_t len) {
    size_t i = 0;
    while (i < len && !(text[i] == '\r' && (i + 1 == len || text[i + 1] != '\n'))) i++;
    if (i == len) return text;
    char *t = tk_arena_alloc(a, len + 1);
    if (!t) return NULL;
    memcpy(t, text, len);
    t[len] = 0;
    for (; i < len; i++)
        if (t[i] == '\r' && (i + 1 == len || t[i + 1] != '\n')) t[i] = '\n';
    return t;
}

tk_module *tk_parse(tk_arena *a, const char *file, const char *text,
                    size_t len, tk_error *err) {
    parser ps;
    memset(&ps, 0, sizeof ps);
    ps.a = a;
    ps.file = file != NULL ? file : "<input>";
    ps.text = text != NULL ? lone_cr_as_lf(a, text, len) : "";
    ps.len = text != NULL ? len : 0;
    if (!ps.text) {
        tk_error_set(err, TK_ERR_NOMEM, ps.file, (tk_loc){0, 0}, "out of memory");
        return NULL;
    }
    ps.err = err;
    tk_error_clear(err);
    tk_lex_init(&ps.ls, ps.text, ps.len);
    ps.tok.loc.line = 1;
    ps.tok.loc.col = 1;
    if (setjmp(ps.fail) != 0) return NULL;
    return parse_module(&ps);
}
