/* test_parse.c - tests of the spec lexer and parser (compiler/parse.c).
 * Usage: test_parse OPS_DIR   (parses OPS_DIR/brick_pad.tk, rwkv_forward.tk) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ast.h"
#include "tk.h"

static int failures, checks;

#define CHECK(c) do { checks++; if (!(c)) { failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); } } while (0)

#define CHECK_STR(a, b) do { const char *a_ = (a), *b_ = (b); checks++; \
    if (a_ == NULL || strcmp(a_, b_) != 0) { failures++; \
        fprintf(stderr, "%s:%d: CHECK failed: %s == \"%s\" (got \"%s\")\n", \
                __FILE__, __LINE__, #a, b_, a_ ? a_ : "(null)"); } } while (0)

static tk_arena arena;
static char errbuf[1536];
static tk_error perr;

/* tk_parse into the test arena; the error's text in errbuf. */
static tk_module *parse_n(const char *file, const char *src, size_t len) {
    tk_module *m = tk_parse(&arena, file, src, len, &perr);
    snprintf(errbuf, sizeof errbuf, "%s", perr.text);
    return m;
}

/* Parses src (NUL-terminated) as file "t.tk"; NULL on error (see errbuf). */
static tk_module *parse(const char *src) {
    tk_arena_free(&arena);
    return parse_n("t.tk", src, strlen(src));
}

/* Appends printf-style text to the string buffer b of size n. */
static void append(char *b, size_t n, const char *s) {
    size_t l = strlen(b);
    if (l + 1 < n) snprintf(b + l, n - l, "%s", s);
}

/* Writes e as an S-expression: (- a b), (neg x), (if c a b), f(a b), x[i j]. */
static void expr_str(const tk_expr *e, char *b, size_t n) {
    char t[64];
    int i;
    if (e == NULL) { append(b, n, "NULL"); return; }
    switch (e->kind) {
    case TK_E_INT: snprintf(t, sizeof t, "%lld", (long long)e->ival); append(b, n, t); return;
    case TK_E_FLOAT: snprintf(t, sizeof t, "%gf", e->fval); append(b, n, t); return;
    case TK_E_BOOL: append(b, n, e->ival ? "True" : "False"); return;
    case TK_E_NAME: append(b, n, e->name); return;
    case TK_E_ELLIPSIS: append(b, n, "..."); return;
    case TK_E_UNARY:
        append(b, n, e->op == TK_OPC_NEG ? "(neg " : e->op == TK_OPC_POS ? "(pos " : "(not ");
        expr_str(e->args[0], b, n);
        append(b, n, ")");
        return;
    case TK_E_BINARY:
        append(b, n, "(");
        append(b, n, tk_opc_text(e->op));
        append(b, n, " ");
        expr_str(e->args[0], b, n);
        append(b, n, " ");
        expr_str(e->args[1], b, n);
        append(b, n, ")");
        return;
    case TK_E_COND:
        append(b, n, "(if ");
        expr_str(e->args[1], b, n);
        append(b, n, " ");
        expr_str(e->args[0], b, n);
        append(b, n, " ");
        expr_str(e->args[2], b, n);
        append(b, n, ")");
        return;
    case TK_E_CALL: case TK_E_INDEX:
        append(b, n, e->name);
        append(b, n, e->kind == TK_E_CALL ? "(" : "[");
        for (i = 0; i < e->nargs; i++) {
            if (i > 0) append(b, n, " ");
            expr_str(e->args[i], b, n);
        }
        append(b, n, e->kind == TK_E_CALL ? ")" : "]");
        return;
    }
}

/* expr_str into a static buffer. */
static const char *es(const tk_expr *e) {
    static char b[4096];
    b[0] = '\0';
    expr_str(e, b, sizeof b);
    return b;
}

/* Parses "y[i] = EXPR" inside a minimal op and returns EXPR as a string. */
static const char *parse_expr_str(const char *expr) {
    static char src[4096];
    tk_module *m;
    snprintf(src, sizeof src,
             "op f(x: float[N], a: int, b: int, c: int) -> y: x.dtype[N]:\n"
             "    for i in y:\n"
             "        y[i] = %s\n", expr);
    m = parse(src);
    if (m == NULL) {
        fprintf(stderr, "  parse error: %s\n", errbuf);
        return "(error)";
    }
    return es(m->ops[0]->body[0]->value);
}

/* Reads a whole file into a malloc'd buffer; NULL on failure. */
static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;
    if (f == NULL) return NULL;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return NULL;
    }
    buf = (char *)malloc((size_t)n + 1);
    if (buf != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf != NULL) *len = (size_t)n;
    return buf;
}

/* Parses OPS_DIR/name into the arena; NULL (and a failure) on error. */
static tk_module *parse_op_file(const char *dir, const char *name) {
    char path[1024];
    size_t len = 0;
    char *text;
    tk_module *m;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    text = read_file(path, &len);
    CHECK(text != NULL);
    if (text == NULL) return NULL;
    tk_arena_free(&arena);
    m = parse_n(path, text, len);
    if (m == NULL) fprintf(stderr, "  %s\n", errbuf);
    CHECK(m != NULL);
    if (m != NULL) CHECK(strlen(m->ops[0]->text) == len && memcmp(m->ops[0]->text, text, len) == 0);
    if (m != NULL) CHECK_STR(m->ops[0]->file, path);
    free(text);
    return m;
}

/* Checks the dims of prm spell want ("... TH TW"). */
static void check_dims(const tk_param *prm, const char *want, int line) {
    char b[512] = "";
    int i;
    for (i = 0; i < prm->ndims; i++) {
        if (i > 0) append(b, sizeof b, " ");
        expr_str(prm->dims[i], b, sizeof b);
    }
    checks++;
    if (strcmp(b, want) != 0) {
        failures++;
        fprintf(stderr, "%s:%d: dims of '%s': want \"%s\", got \"%s\"\n",
                __FILE__, line, prm->name, want, b);
    }
}
#define CHECK_DIMS(prm, want) check_dims(prm, want, __LINE__)

static void test_brick_pad(const char *dir) {
    tk_module *m = parse_op_file(dir, "brick_pad.tk");
    tk_opdecl *op;
    tk_stmt **b;
    if (m == NULL) return;
    CHECK(m->nops == 2);    /* brick_pad and brick_pad_backward */
    op = m->ops[0];
    CHECK_STR(op->name, "brick_pad");
    CHECK(op->loc.line == 4 && op->loc.col == 4);
    CHECK(op->nbackward == 1);
    if (op->nbackward == 1) CHECK_STR(op->backward[0], "brick_pad_backward");
    CHECK(op->nparams == 6);
    if (op->nparams != 6) return;
    CHECK_STR(op->params[0].name, "tile");
    CHECK(op->params[0].kind == TK_P_TENSOR);
    CHECK(op->params[0].dtype_mask == TK_DTYPES_ANY);
    CHECK(op->params[0].dtype_of == NULL);
    CHECK_DIMS(&op->params[0], "... TH TW");
    CHECK(op->params[0].dims[0]->kind == TK_E_ELLIPSIS);
    CHECK(op->params[0].dims[1]->kind == TK_E_NAME);
    CHECK(op->params[0].loc.line == 4 && op->params[0].loc.col == 14);
    CHECK_STR(op->params[1].name, "pw");
    CHECK(op->params[1].kind == TK_P_INT && !op->params[1].optional);
    CHECK(op->params[1].default_value == NULL);
    CHECK_STR(op->params[3].name, "stagger");
    CHECK(op->params[3].kind == TK_P_INT);
    CHECK_STR(op->params[4].name, "height");
    CHECK(op->params[4].kind == TK_P_INT && op->params[4].optional == 1);
    CHECK_STR(es(op->params[4].default_value), "(+ TH (* 2 ph))");
    CHECK_STR(op->params[5].name, "width");
    CHECK(op->params[5].optional == 1);
    CHECK_STR(es(op->params[5].default_value), "(+ TW (* 2 pw))");
    CHECK(op->noutputs == 1);
    CHECK_STR(op->outputs[0].name, "out");
    CHECK(op->outputs[0].kind == TK_P_TENSOR);
    CHECK_STR(op->outputs[0].dtype_of, "tile");
    CHECK(op->outputs[0].dtype_mask == 0);
    CHECK(op->outputs[0].loc.line == 6 && op->outputs[0].loc.col == 12);
    CHECK(op->outputs[0].dtype_loc.line == 6 && op->outputs[0].dtype_loc.col == 17);
    CHECK_DIMS(&op->outputs[0], "... height width");
    CHECK(op->nloop == 2);
    CHECK_STR(op->loop_vars[0], "row");
    CHECK_STR(op->loop_vars[1], "col");
    CHECK(op->loop_locs[1].line == 8 && op->loop_locs[1].col == 14);
    CHECK_STR(op->loop_over, "out");
    CHECK(op->loop_loc.line == 8 && op->loop_loc.col == 21);
    CHECK(op->nbody == 7);
    if (op->nbody != 7) return;
    b = op->body;
    CHECK(b[0]->kind == TK_S_ASSIGN && b[0]->op == TK_OPC_NONE);
    CHECK_STR(b[0]->name, "x1");
    CHECK(b[0]->loc.line == 9 && b[0]->loc.col == 9);
    CHECK_STR(es(b[0]->value), "(- col pw)");
    CHECK_STR(es(b[1]->value), "(+ (- (- height 1) row) ph)");
    CHECK_STR(es(b[2]->value), "(// y1 TH)");
    CHECK_STR(es(b[3]->value), "(// (- x1 (* v stagger)) TW)");
    CHECK_STR(es(b[4]->value), "(- (- x1 (* u TW)) (* v stagger))");
    CHECK(b[6]->kind == TK_S_STORE && b[6]->op == TK_OPC_NONE);
    CHECK_STR(b[6]->name, "out");
    CHECK(b[6]->nindex == 2);
    CHECK_STR(es(b[6]->index[0]), "row");
    CHECK_STR(es(b[6]->value), "tile[(- (- TH 1) y2) x2]");
    CHECK(b[6]->value->kind == TK_E_INDEX);
    /* binary nodes sit at their operator: "x1 = col - pw" */
    CHECK(b[0]->value->loc.line == 9 && b[0]->value->loc.col == 18);
}

static void test_rwkv(const char *dir) {
    tk_module *m = parse_op_file(dir, "rwkv_forward.tk");
    tk_opdecl *op;
    tk_stmt *f, *acc;
    if (m == NULL) return;
    CHECK(m->nops == 3);    /* rwkv_forward, rwkv_backward_w, rwkv_backward_k */
    if (m->nops == 3) {     /* rwkv_backward_w's 'schedule warp_rows=2, split=8'; the others have none */
        CHECK(m->ops[1]->schedule_loc.line == 23 && m->ops[1]->schedule_loc.col == 5);
        CHECK(m->ops[1]->schedule[0] == 0 && m->ops[1]->schedule[1] == 0 && m->ops[1]->schedule[2] == 2 &&
              m->ops[1]->schedule[3] == 0 && m->ops[1]->schedule[4] == 8);
        CHECK(m->ops[0]->schedule_loc.line == 0 && m->ops[0]->schedule[2] == 0);
        CHECK(m->ops[2]->schedule_loc.line == 0);
    }
    op = m->ops[0];
    CHECK_STR(op->name, "rwkv_forward");
    CHECK(op->nbackward == 2);
    if (op->nbackward == 2) {
        CHECK_STR(op->backward[0], "rwkv_backward_w");
        CHECK_STR(op->backward[1], "rwkv_backward_k");
        CHECK(op->backward_locs[1].line == 6 && op->backward_locs[1].col == 31);
    }
    CHECK(op->nparams == 3);
    if (op->nparams != 3) return;
    CHECK_STR(op->params[0].name, "w");
    CHECK(op->params[0].kind == TK_P_TENSOR);
    CHECK(op->params[0].dtype_mask == TK_DTYPES_FLOAT);
    CHECK_DIMS(&op->params[0], "C T");
    CHECK_STR(op->params[1].name, "k");
    CHECK(op->params[1].kind == TK_P_TENSOR);
    CHECK_STR(op->params[1].dtype_of, "w");
    CHECK(op->params[1].dtype_mask == 0);
    CHECK_DIMS(&op->params[1], "B C T");
    CHECK_STR(op->params[2].name, "eps");
    CHECK(op->params[2].kind == TK_P_FLOAT);
    CHECK(!op->params[2].optional && op->params[2].default_value == NULL);
    CHECK(op->noutputs == 1);
    CHECK_STR(op->outputs[0].name, "out");
    CHECK_STR(op->outputs[0].dtype_of, "k");
    CHECK_DIMS(&op->outputs[0], "B C T");
    CHECK(op->nloop == 3);
    CHECK_STR(op->loop_vars[2], "t");
    CHECK_STR(op->loop_over, "out");
    CHECK(op->nbody == 3);
    if (op->nbody != 3) return;
    CHECK(op->body[0]->kind == TK_S_ASSIGN);
    CHECK_STR(es(op->body[0]->value), "eps");
    f = op->body[1];
    CHECK(f->kind == TK_S_FOR);
    CHECK_STR(f->name, "u");
    CHECK(f->lo == NULL);
    CHECK_STR(es(f->hi), "(+ t 1)");
    CHECK(f->loc.line == 9 && f->loc.col == 9);
    CHECK(f->nbody == 1);
    if (f->nbody != 1) return;
    acc = f->body[0];
    CHECK(acc->kind == TK_S_ASSIGN && acc->op == TK_OPC_ADD);
    CHECK_STR(acc->name, "s");
    CHECK_STR(es(acc->value), "(* w[c (- (- T 1) (- t u))] k[b c u])");
    /* (T - 1) - (t - u) parses as SUB(SUB(T, 1), SUB(t, u)) */
    {
        tk_expr *ix = acc->value->args[0]->args[1];
        CHECK(ix->kind == TK_E_BINARY && ix->op == TK_OPC_SUB);
        CHECK(ix->args[0]->kind == TK_E_BINARY && ix->args[0]->op == TK_OPC_SUB);
        CHECK_STR(ix->args[0]->args[0]->name, "T");
        CHECK(ix->args[0]->args[1]->kind == TK_E_INT && ix->args[0]->args[1]->ival == 1);
        CHECK(ix->args[1]->kind == TK_E_BINARY && ix->args[1]->op == TK_OPC_SUB);
    }
    CHECK(op->body[2]->kind == TK_S_STORE);
    CHECK(op->body[2]->nindex == 3);
    CHECK_STR(es(op->body[2]->value), "s");
}

static void test_expressions(void) {
    CHECK_STR(parse_expr_str("-2**2"), "(neg (** 2 2))");
    CHECK_STR(parse_expr_str("2**-1"), "(** 2 (neg 1))");
    CHECK_STR(parse_expr_str("2**3**2"), "(** 2 (** 3 2))");
    CHECK_STR(parse_expr_str("a // b % c"), "(% (// a b) c)");
    CHECK_STR(parse_expr_str("a - b - c"), "(- (- a b) c)");
    CHECK_STR(parse_expr_str("a + b * c"), "(+ a (* b c))");
    CHECK_STR(parse_expr_str("-a * b"), "(* (neg a) b)");
    CHECK_STR(parse_expr_str("+a"), "(pos a)");
    CHECK_STR(parse_expr_str("x[i] if c else a"), "(if c x[i] a)");
    CHECK_STR(parse_expr_str("a if b else c if i else 0"), "(if b a (if i c 0))");
    CHECK_STR(parse_expr_str("not a < b and c or i"), "(or (and (not (< a b)) c) i)");
    CHECK_STR(parse_expr_str("a == b"), "(== a b)");
    CHECK_STR(parse_expr_str("a != b + 1"), "(!= a (+ b 1))");
    CHECK_STR(parse_expr_str("max(a, min(b, 0)) / 2.5"), "(/ max(a min(b 0)) 2.5f)");
    CHECK_STR(parse_expr_str("f()"), "f()");
    CHECK_STR(parse_expr_str("0x2a + .5 + 2. + 1e-3 + 1.5E2"), "(+ (+ (+ (+ 42 0.5f) 2f) 0.001f) 150f)");
    CHECK_STR(parse_expr_str("True or False"), "(or True False)");
    CHECK_STR(parse_expr_str("9223372036854775807"), "9223372036854775807");
    CHECK_STR(parse_expr_str("0x7fffffffffffffff"), "9223372036854775807");
    CHECK_STR(parse_expr_str("(a +\n   b) * x[\n i]"), "(* (+ a b) x[i])");
    CHECK_STR(parse_expr_str("not not a"), "(not (not a))");
    CHECK_STR(parse_expr_str("- - a"), "(neg (neg a))");
    CHECK_STR(parse_expr_str("a <= b"), "(<= a b)");
    CHECK_STR(parse_expr_str("a >= b"), "(>= a b)");
    CHECK_STR(parse_expr_str("(a < b) < c"), "(< (< a b) c)");
    /* deep but within the limit */
    {
        char e[512];
        memset(e, '(', 150);
        e[150] = '1';
        memset(e + 151, ')', 150);
        e[301] = '\0';
        CHECK_STR(parse_expr_str(e), "1");
    }
}

static void test_statements(void) {
    tk_module *m = parse(
        "op f(x: float[N], n: int) -> y: x.dtype[N]:\n"
        "    for i in y:\n"
        "        s = 0\n"
        "        s -= 1\n"
        "        s *= 2\n"
        "        s /= 3\n"
        "        if i == 0:\n"
        "            pass\n"
        "        elif i == 1:\n"
        "            s += 1\n"
        "        elif i == 2:\n"
        "            s += 2\n"
        "        else:\n"
        "            s += 3\n"
        "        for u in range(1, n):\n"
        "            if u > 2:\n"
        "                s += x[u]\n"
        "        y[i] += s\n");
    tk_stmt **b, *s;
    CHECK(m != NULL);
    if (m == NULL) { fprintf(stderr, "  %s\n", errbuf); return; }
    b = m->ops[0]->body;
    CHECK(m->ops[0]->nbody == 7);
    CHECK(b[1]->op == TK_OPC_SUB && b[2]->op == TK_OPC_MUL && b[3]->op == TK_OPC_DIV);
    s = b[4];
    CHECK(s->kind == TK_S_IF && s->nbody == 1 && s->body[0]->kind == TK_S_PASS);
    CHECK_STR(es(s->value), "(== i 0)");
    CHECK(s->norelse == 1 && s->orelse[0]->kind == TK_S_IF);
    s = s->orelse[0];
    CHECK(s->loc.line == 9 && s->loc.col == 9);
    CHECK_STR(es(s->value), "(== i 1)");
    CHECK(s->norelse == 1 && s->orelse[0]->kind == TK_S_IF);
    s = s->orelse[0];
    CHECK_STR(es(s->value), "(== i 2)");
    CHECK(s->norelse == 1 && s->orelse[0]->kind == TK_S_ASSIGN);
    CHECK(s->orelse[0]->op == TK_OPC_ADD);
    s = b[5];
    CHECK(s->kind == TK_S_FOR);
    CHECK_STR(es(s->lo), "1");
    CHECK_STR(es(s->hi), "n");
    CHECK(s->nbody == 1 && s->body[0]->kind == TK_S_IF);
    CHECK(b[6]->kind == TK_S_STORE && b[6]->op == TK_OPC_ADD);
}

static void test_valid_odd(void) {
    tk_module *m;
    tk_opdecl *op;
    /* empty file, comments only, blank lines only */
    m = parse("");
    CHECK(m != NULL && m->nops == 0);
    m = parse("# just a comment\n\n   \n  # indented comment\n");
    CHECK(m != NULL && m->nops == 0);
    /* not NUL-terminated: len ends the text */
    tk_arena_free(&arena);
    m = parse_n("t.tk", "op f() -> y: int[1]:\n    for i in y:\n        y[i] = 1\nGARBAGE",
                strlen("op f() -> y: int[1]:\n    for i in y:\n        y[i] = 1\n"));
    CHECK(m != NULL && m->nops == 1);
    /* CR-only line endings (classic Mac, as Python reads them) are lines:
     * a comment ends at its CR, and an error counts the lines */
    m = parse("# header\rop f(x: float[N]) -> y: x.dtype[N]:\r    for i in y:\r\r        y[i] = x[i]\r");
    CHECK(m != NULL && m->nops == 1 && m->ops[0]->nbody == 1 && m->ops[0]->loc.line == 2);
    m = parse("op f(x: float[N]) -> y: x.dtype[N]:\r    for i in y:\r        y[i] = = x[i]\r");
    CHECK(m == NULL && strstr(errbuf, "t.tk:3:16:") != NULL);
    if (m != NULL || !strstr(errbuf, "t.tk:3:16:")) fprintf(stderr, "  CR-only error: %s\n", errbuf);
    m = parse("op f(x: float[N]) -> y: x.dtype[N]:\r\n    for i in y:\r        y[i] = x[i]");   /* mixed */
    CHECK(m != NULL && m->nops == 1);
    /* two ops, comments everywhere, continuation line, no final newline,
     * CRLF, backward, scalar forms, multiple outputs, trailing comma */
    m = parse("# header\r\n"
              "op a(x: float32|float64[N, 4], n: int = 3, e: float = 0.5,\r\n"
              "     h: int?, flag: bool,)   # params\r\n"
              "  # comment between\r\n"
              "\r\n"
              "        -> (y: x.dtype[N, n + 1], z: bool[...]):  # outputs\r\n"
              "    backward a_bw  # grad\r\n"
              "    # comment\r\n"
              "    for i, j in y:   # loop\r\n"
              "\r\n"
              "        # comment\r\n"
              "        y[i, j] = 1   # store\r\n"
              "op b(s: int8[], t: uint8|int16|int32|int64|bool|float16|bfloat16[...]) -> o: float[2]:\n"
              "    for k in o:\n"
              "        o[k] = 1.0");
    CHECK(m != NULL);
    if (m == NULL) { fprintf(stderr, "  %s\n", errbuf); return; }
    CHECK(m->nops == 2);
    op = m->ops[0];
    CHECK_STR(op->name, "a");
    CHECK(op->nparams == 5);
    CHECK(op->params[0].dtype_mask == ((1u << TK_F32) | (1u << TK_F64)));
    CHECK_DIMS(&op->params[0], "N 4");
    CHECK(op->params[0].dims[1]->kind == TK_E_INT);
    CHECK(op->params[1].kind == TK_P_INT && !op->params[1].optional);
    CHECK_STR(es(op->params[1].default_value), "3");
    CHECK(op->params[2].kind == TK_P_FLOAT);
    CHECK_STR(es(op->params[2].default_value), "0.5f");
    CHECK(op->params[3].kind == TK_P_INT && op->params[3].optional);
    CHECK(op->params[3].default_value == NULL);
    CHECK(op->params[4].kind == TK_P_BOOL);
    CHECK(op->noutputs == 2);
    CHECK_DIMS(&op->outputs[0], "N (+ n 1)");
    CHECK(op->outputs[1].dtype_mask == (1u << TK_BOOL));
    CHECK_DIMS(&op->outputs[1], "...");
    CHECK(op->nbackward == 1);
    CHECK_STR(op->backward[0], "a_bw");
    CHECK(op->backward_locs[0].line == 7 && op->backward_locs[0].col == 14);
    CHECK(op->nloop == 2 && op->nbody == 1);
    op = m->ops[1];
    CHECK_STR(op->name, "b");
    CHECK(op->params[0].ndims == 0 && op->params[0].dtype_mask == (1u << TK_I8));
    CHECK(op->params[1].dtype_mask == (TK_DTYPES_ANY & ~((1u << TK_F32) | (1u << TK_F64) | (1u << TK_I8))));
    CHECK(op->outputs[0].dtype_mask == TK_DTYPES_FLOAT);
    CHECK(op->nbody == 1 && op->body[0]->value->kind == TK_E_FLOAT);
    /* the text and file are shared by both ops */
    CHECK(m->ops[0]->text == m->ops[1]->text);
    CHECK_STR(m->ops[1]->file, "t.tk");
    /* dedent of several levels at once, then another op */
    m = parse("op f() -> y: int[1]:\n"
              "    for i in y:\n"
              "        if True:\n"
              "            if False:\n"
              "                pass\n"
              "op g() -> y: int[1]:\n"
              "    for i in y:\n"
              "        pass\n");
    CHECK(m != NULL && m->nops == 2);
}

typedef struct bad_case {
    const char *src;
    const char *err;        /* expected prefix of the message */
} bad_case;

#define H "op f(x: float[N]) -> y: x.dtype[N]:\n"
#define L "    for i in y:\n"

static const bad_case bad_cases[] = {
    /* missing colon */
    {"op f(x: float[N]) -> y: x.dtype[N]\n    for i in y:\n        y[i] = x[i]\n",
     "t.tk:1:35: error: expected ':' after the output list, found NEWLINE"},
    {H L "        if x[i] > 0\n            y[i] = 1\n",
     "t.tk:3:20: error: expected ':' after the 'if' condition, found NEWLINE"},
    /* indentation */
    {H L "        y[i] = x[i]\n            y[i] = 1\n", "t.tk:4:13: error: unexpected indent"},
    {H L "            y[i] = x[i]\n        y[i] = 1\n",
     "t.tk:4:9: error: unindent does not match any outer indentation level"},
    {H L "        if True:\n            y[i] = x[i]\n      y[i] = 1\n",
     "t.tk:5:7: error: unindent does not match any outer indentation level"},
    {H L "\ty[i] = x[i]\n", "t.tk:3:1: error: tab in indentation"},
    {H L "    \t    y[i] = x[i]\n", "t.tk:3:5: error: tab in indentation"},
    {"  op f() -> y: int[1]:\n", "t.tk:1:3: error: unexpected indent"},
    {H "for i in y:\n    y[i] = 1\n", "t.tk:2:1: error: expected an indented op body, found 'for'"},
    {H L "    y[i] = 1\n", "t.tk:3:5: error: expected an indented block, found 'y'"},
    {H L, "t.tk:3:1: error: expected an indented block, found DEDENT"},
    /* unterminated brackets at EOF */
    {"op f(x: float[N]\n", "t.tk:1:5: error: '(' was never closed"},
    {H L "        y[i] = x[(i\n", "t.tk:3:18: error: '(' was never closed"},
    /* unknown characters */
    {H L "        y[i] = x[i] $ 2\n", "t.tk:3:21: error: invalid character '$'"},
    {H L "        y[i] = !x[i]\n", "t.tk:3:16: error: invalid character '!'"},
    {H L "        y[i] = \x01\n", "t.tk:3:16: error: invalid character '\\x01'"},
    /* dtypes */
    {"op f(x: floot[N]) -> y: x.dtype[N]:\n",
     "t.tk:1:9: error: expected a dtype (any, float, int, bool, uint8, int8, int16, int32, "
     "int64, float16, bfloat16, float32, float64) or 'x.dtype', found 'floot'"},
    {"op f(x: float32|int3[N]) -> y: x.dtype[N]:\n", "t.tk:1:17: error: expected a dtype ("},
    {"op f(x: float[N]) -> y: x.type[N]:\n", "t.tk:1:27: error: expected 'dtype' after 'x.', found 'type'"},
    {"op f(x: float32, n: int) -> y: x.dtype[N]:\n",
     "t.tk:1:16: error: expected '[' after the dtype, found ','"},
    {"op f(x: float[N+1]) -> y: x.dtype[N]:\n",
     "t.tk:1:16: error: expected ',' or ']' after a dim, found '+'"},
    /* header */
    {"op f(x: float[N]) y: x.dtype[N]:\n",
     "t.tk:1:19: error: expected '->' after the parameter list, found 'y'"},
    {"op f(x: float[N]) -> :\n", "t.tk:1:22: error: expected an output name, found ':'"},
    {"op f(x: float[N])\n", "t.tk:1:18: error: expected '->' after the parameter list, found NEWLINE"},
    {"op f(x: float[N]) -> y: x.dtype:\n",
     "t.tk:1:32: error: expected '[' after the output's dtype, found ':'"},
    {"op f(x: float[N]) -> y: x.dtype[]:\n", "t.tk:1:33: error: expected an expression, found ']'"},
    {"op f(x: float[N] n: int) -> y: x.dtype[N]:\n",
     "t.tk:1:18: error: expected ',' or ')' after a parameter, found 'n'"},
    {"x = 1\n", "t.tk:1:1: error: expected 'op', found 'x'"},
    /* op body */
    {H "    backward g\n", "t.tk:3:1: error: expected the top-level 'for ... in <output>:' loop, found DEDENT"},
    {H "    z = 1\n" L "        y[i] = x[i]\n",
     "t.tk:2:5: error: expected the top-level 'for ... in <output>:' loop, found 'z'"},
    {H L "        y[i] = x[i]\n    z = 1\n",
     "t.tk:4:5: error: expected the end of the op body after the top-level 'for ... in <output>:' loop, found 'z'"},
    {H "    backward g\n    backward h\n" L "        pass\n",
     "t.tk:3:5: error: duplicate 'backward' line"},
    {H "    backward g, h, g\n" L "        pass\n", "t.tk:2:20: error: backward op 'g' is listed twice"},
    {H "    backward g,\n" L "        pass\n", "t.tk:2:16: error: expected an op name after 'backward', found NEWLINE"},
    {H "    backward g h\n" L "        pass\n",
     "t.tk:2:16: error: expected ',' or NEWLINE after a backward op name, found 'h'"},
    /* schedule lines */
    {H "    schedule lanes=3\n" L "        pass\n", "t.tk:2:20: error: schedule lanes=3: expected a power of two from 4 to 16"},
    {H "    schedule chunk=256\n" L "        pass\n",
     "t.tk:2:20: error: schedule chunk=256: expected a power of two from 16 to 128"},
    {H "    schedule split=64\n" L "        pass\n", "t.tk:2:20: error: schedule split=64: expected a power of two from 1 to 32"},
    {H "    schedule tiles=3\n" L "        pass\n", "t.tk:2:20: error: schedule tiles=3: expected a power of two from 1 to 2"},
    {H "    schedule regs=100\n" L "        pass\n", "t.tk:2:19: error: schedule regs=100: expected a multiple of 8 from 32 to 248"},
    {H "    schedule regs=256\n" L "        pass\n", "t.tk:2:19: error: schedule regs=256: expected a multiple of 8 from 32 to 248"},
    {H "    schedule regs=24\n" L "        pass\n", "t.tk:2:19: error: schedule regs=24: expected a multiple of 8 from 32 to 248"},
    {H "    schedule foo=2\n" L "        pass\n",
     "t.tk:2:14: error: unknown schedule item 'foo' (lanes, rows, warp_rows, chunk, split, ldg, tiles, regs, coop or parts)"},
    {H "    schedule rows=2, rows=4\n" L "        pass\n", "t.tk:2:22: error: schedule item 'rows' is given twice"},
    {H "    schedule parts=3\n" L "        pass\n", "t.tk:2:20: error: schedule parts=3: expected a power of two from 1 to 65536"},
    /* Python statements the language lacks: what to write instead */
    {H L "        while i < 3:\n            pass\n",
     "t.tk:3:9: error: 'while' is not part of the spec language (docs/spec.md, Grammar): loops are 'for NAME in "
     "range(...)', their bounds known when the loop starts"},
    {H L "        break\n",
     "t.tk:3:9: error: 'break' is not part of the spec language (docs/spec.md, Grammar): a loop runs its whole range "
     "(guard the rest of the body with 'if')"},
    {H L "        return y\n",
     "t.tk:3:9: error: 'return' is not part of the spec language (docs/spec.md, Grammar): an op stores its outputs "
     "('y[i] = ...') and has no return value"},
    {H L "        import math\n", "t.tk:3:9: error: 'import' is not part of the spec language (docs/spec.md, Grammar)"},
    {H L "        h = [0.0] * 4\n",
     "t.tk:3:13: error: expected an expression, found '[': a spec has no lists or local arrays (keep per-element "
     "state in an output, or in scalar locals)"},
    {H "    schedule rows 2\n" L "        pass\n", "t.tk:2:19: error: expected '=' after a schedule item, found '2'"},
    {H "    schedule\n" L "        pass\n",
     "t.tk:2:13: error: expected a schedule item (lanes, rows, warp_rows, chunk, split, ldg, tiles, regs, coop or parts), found NEWLINE"},
    {H "    schedule rows=2,\n" L "        pass\n",
     "t.tk:2:21: error: expected a schedule item (lanes, rows, warp_rows, chunk, split, ldg, tiles, regs, coop or parts), found NEWLINE"},
    {H "    schedule rows=x\n" L "        pass\n", "t.tk:2:19: error: expected an integer after 'schedule ... =', found 'x'"},
    {H "    schedule rows=2 lanes=8\n" L "        pass\n",
     "t.tk:2:21: error: expected ',' or NEWLINE after a schedule item, found 'lanes'"},
    {H "    schedule rows=2\n    backward g\n    schedule lanes=8\n" L "        pass\n",
     "t.tk:4:5: error: duplicate 'schedule' line (give every item on one line: schedule lanes=16, rows=2)"},
    {H "    for i in range(3):\n",
     "t.tk:2:19: error: expected ':' after the top-level 'for ... in <output>', found '('"},
    /* inner loops */
    {H L "        for u in range(1, 2, 3):\n            pass\n",
     "t.tk:3:18: error: range() takes 1 or 2 arguments, found 3"},
    {H L "        for u in range():\n            pass\n",
     "t.tk:3:18: error: range() takes 1 or 2 arguments, found 0"},
    {H L "        for u in x:\n            pass\n",
     "t.tk:3:18: error: expected 'range(...)' after 'in' (inner loops run over a range), found 'x'"},
    {H L "        for u, v in range(3):\n            pass\n",
     "t.tk:3:14: error: expected 'in' after the loop variable, found ','"},
    /* expressions */
    {H L "        y[i] = 1 if 0 < i < 3 else 0\n",
     "t.tk:3:27: error: chained comparisons are not supported"},
    {H L "        y[i] = 9223372036854775808\n",
     "t.tk:3:16: error: integer literal '9223372036854775808' is too large"},
    {H L "        y[i] = 0x8000000000000000\n",
     "t.tk:3:16: error: integer literal '0x8000000000000000' is too large"},
    {H L "        y[i] = 12abc\n", "t.tk:3:16: error: malformed number '12abc'"},
    {H L "        y[i] = 1e+\n", "t.tk:3:16: error: malformed number '1e'"},
    {H L "        y[i] = 0x\n", "t.tk:3:16: error: malformed number '0x'"},
    {H L "        y[i] = 1.2.3\n", "t.tk:3:16: error: malformed number '1.2.3'"},
    {H L "        y[i] = 1e999\n", "t.tk:3:16: error: float literal '1e999' is out of range"},
    {H L "        y[i] = )\n", "t.tk:3:16: error: expected an expression, found ')'"},
    {H L "        y[i] =\n", "t.tk:3:15: error: expected an expression, found NEWLINE"},
    {H L "        y[i] = x[i, ]\n", "t.tk:3:21: error: expected an expression, found ']'"},
    {H L "        y[i] = a if b\n", "t.tk:3:22: error: expected 'else' in the conditional expression, found NEWLINE"},
    {H L "        y[i] = max(a b)\n", "t.tk:3:22: error: expected ',' or ')' in the call to 'max', found 'b'"},
    /* statements */
    {H L "        y[i] = x[i] x\n", "t.tk:3:21: error: expected NEWLINE after the statement, found 'x'"},
    {H L "        pass 1\n", "t.tk:3:14: error: expected NEWLINE after the statement, found '1'"},
    {H L "        f(1)\n", "t.tk:3:10: error: expected '=', '+=', '-=', '*=', '/=' or '[' after 'f', found '('"},
    {H L "        y[i] //= 2\n", "t.tk:3:14: error: expected '=', '+=', '-=', '*=' or '/=' after 'y[...]', found '//'"},
    {H L "        if x: y[i] = 1\n", "t.tk:3:15: error: expected NEWLINE after ':' (a block starts on the next line), found 'y'"},
    {H L "        else:\n            pass\n", "t.tk:3:9: error: expected a statement, found 'else'"},
    {H L "        y[i] = 1\n        -> 2\n", "t.tk:4:9: error: expected NEWLINE after the statement, found '->'"},
    {"op f\0(x: int)", "t.tk:1:5: error: expected '(' after the op name, found NEWLINE"},
};

/* Checks that src fails with a message starting with want. */
static void check_bad(const char *src, size_t len, const char *want, int idx) {
    tk_module *m;
    tk_arena_free(&arena);
    errbuf[0] = '\0';
    m = parse_n("t.tk", src, len);
    checks++;
    if (m != NULL || strncmp(errbuf, want, strlen(want)) != 0) {
        failures++;
        fprintf(stderr, "%s: bad case %d: want \"%s...\"\n  got \"%s\"%s\n", __FILE__,
                idx, want, errbuf, m != NULL ? " (parsed OK)" : "");
    }
}

#define DEEP_SIZE ((size_t)1 << 16)

static void test_errors(void) {
    size_t i;
    char *deep;
    for (i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++)
        check_bad(bad_cases[i].src, strlen(bad_cases[i].src), bad_cases[i].err, (int)i);
    /* an embedded NUL inside len is an invalid character */
    check_bad("op f\0(x: int)", 13, "t.tk:1:5: error: invalid character '\\x00'", -1);
    /* deep nesting must not crash */
    deep = (char *)malloc(DEEP_SIZE);
    if (deep == NULL) return;
    snprintf(deep, DEEP_SIZE, H L "        y[i] = ");
    {
        size_t n = strlen(deep);
        memset(deep + n, '(', 1000);
        deep[n + 1000] = '\0';
        strcat(deep, "1");
        n = strlen(deep);
        memset(deep + n, ')', 1000);
        strcpy(deep + n + 1000, "\n");
    }
    check_bad(deep, strlen(deep), "t.tk:3:", -2);
    CHECK(strstr(errbuf, "error: nesting too deep") != NULL);
    {
        const char *fills[] = {"-", "not ", "2**", "x[", "f(", "1 if 1 else ", "max(1, "};
        size_t k;
        for (k = 0; k < sizeof fills / sizeof fills[0]; k++) {
            size_t n, j;
            snprintf(deep, DEEP_SIZE, H L "        y[i] = ");
            for (j = 0; j < 1000 && strlen(deep) + strlen(fills[k]) + 8 < DEEP_SIZE; j++)
                strcat(deep, fills[k]);
            strcat(deep, "1\n");
            n = strlen(deep);
            tk_arena_free(&arena);
            CHECK(parse_n("t.tk", deep, n) == NULL);
            if (strstr(errbuf, "nesting too deep") == NULL) fprintf(stderr, "  fill %d: %s\n", (int)k, errbuf);
            CHECK(strstr(errbuf, "nesting too deep") != NULL);
        }
    }
    /* deeply nested blocks */
    {
        size_t j;
        strcpy(deep, H L);
        for (j = 0; j < 300 && strlen(deep) + j + 20 < DEEP_SIZE; j++) {
            size_t n = strlen(deep);
            memset(deep + n, ' ', 8 + j);
            strcpy(deep + n + 8 + j, "if 1:\n");
        }
        tk_arena_free(&arena);
        CHECK(parse_n("t.tk", deep, strlen(deep)) == NULL);
        CHECK(strstr(errbuf, "nesting too deep") != NULL);
    }
    /* long operator chains (built without recursion, but the checker and
     * printers recurse as deep as the chain is long) and elif chains (each
     * elif one level deeper): an error, not a stack overflow */
    {
        size_t j;
        snprintf(deep, DEEP_SIZE, H L "        y[i] = x[i]");
        for (j = 0; j < 1000 && strlen(deep) + 16 < DEEP_SIZE; j++) strcat(deep, " + x[i]");
        strcat(deep, "\n");
        tk_arena_free(&arena);
        CHECK(parse_n("t.tk", deep, strlen(deep)) == NULL);
        CHECK(strstr(errbuf, "error: expression too long: more than 1000 operations deep") != NULL);
        snprintf(deep, DEEP_SIZE, H L "        y[i] = x[i]");
        for (j = 0; j < 999; j++) strcat(deep, " + x[i]");
        strcat(deep, "\n");
        tk_arena_free(&arena);
        CHECK(parse_n("t.tk", deep, strlen(deep)) != NULL);   /* 999 operators: fine */
        strcpy(deep, H L "        if x[i] > 0.0:\n            y[i] = 0.0\n");
        for (j = 0; j < 300 && strlen(deep) + 64 < DEEP_SIZE; j++)
            strcat(deep, "        elif x[i] > 1.0:\n            y[i] = 1.0\n");
        tk_arena_free(&arena);
        CHECK(parse_n("t.tk", deep, strlen(deep)) == NULL);
        CHECK(strstr(errbuf, "nesting too deep") != NULL);
    }
    free(deep);
    /* a NULL error is allowed */
    tk_arena_free(&arena);
    CHECK(tk_parse(&arena, "t.tk", "op", 2, NULL) == NULL);
    /* the error's fields: status, file, line, col, the message alone, and
     * the text made of them */
    tk_arena_free(&arena);
    CHECK(parse_n("dir/t.tk", "op f() -> y: int[1]:\n    for i in y:\n        y[i] = )\n", 54) == NULL);
    CHECK(perr.status == TK_ERR_SYNTAX);
    CHECK(strcmp(perr.file, "dir/t.tk") == 0);
    CHECK(perr.line == 3 && perr.col == 16);
    CHECK(strncmp(perr.message, "expected", 8) == 0);
    CHECK(strncmp(perr.text, "dir/t.tk:3:16: error: expected", 30) == 0);
    CHECK(strcmp(strstr(perr.text, ": error: ") + 9, perr.message) == 0);
    /* a later good parse clears it */
    tk_arena_free(&arena);
    CHECK(parse_n("t.tk", "", 0) != NULL && perr.status == TK_OK && perr.text[0] == '\0');
}

/* Float parameters with defaults: 'float = lit' and 'float? = lit', a
 * negative literal one unary minus over the literal; the checker decides
 * what a default may be (test_check.c). */
static void test_float_defaults(void) {
    tk_module *m = parse("op f(x: float[N], eps: float? = 1e-5, a: float = -2, b: float? = -0.5) -> y: x.dtype[N]:\n"
                         "    for i in y:\n        y[i] = x[i]\n");
    CHECK(m != NULL && m->nops == 1);
    if (!m || m->nops != 1) return;
    const tk_opdecl *op = m->ops[0];
    CHECK(op->nparams == 4);
    if (op->nparams != 4) return;
    CHECK(op->params[1].kind == TK_P_FLOAT && op->params[1].optional);
    CHECK(op->params[1].default_value->kind == TK_E_FLOAT && op->params[1].default_value->fval == 1e-5);
    CHECK(op->params[1].default_value->loc.line == 1 && op->params[1].default_value->loc.col == 33);
    CHECK(op->params[2].kind == TK_P_FLOAT && !op->params[2].optional);
    CHECK_STR(es(op->params[2].default_value), "(neg 2)");
    CHECK(op->params[3].kind == TK_P_FLOAT && op->params[3].optional);
    CHECK_STR(es(op->params[3].default_value), "(neg 0.5f)");
}

/* Every prefix of a valid spec must parse or fail cleanly. */
static void test_prefixes(void) {
    const char *src =
        "op brick(tile: any[..., TH, TW], pw: int, h: int? = TH + 2 * pw)\n"
        "        -> out: tile.dtype[..., h, TW]:\n"
        "    backward brick_bw\n"
        "    for r, c in out:\n"
        "        v = (r - pw) // TH if r > 0 else -2**2\n"
        "        for u in range(1, c):\n"
        "            if not v >= 0 and True:\n"
        "                v += 1\n"
        "            elif v == 1e-3:\n"
        "                pass\n"
        "            else:\n"
        "                v -= max(u, 0x10)\n"
        "        out[r, c] = tile[TH - 1 - v, .5]\n";
    size_t n = strlen(src), i;
    for (i = 0; i <= n; i++) {
        char *copy = (char *)malloc(i + 1);     /* exact size: ASan sees overreads */
        if (copy == NULL) return;
        memcpy(copy, src, i);
        tk_arena_free(&arena);
        (void)parse_n("t.tk", copy, i);
        free(copy);
    }
    tk_arena_free(&arena);
    CHECK(parse_n("t.tk", src, n) != NULL);
}

/* The caller's schedule (TK_CUDA_TUNE's syntax): items by key, the rest 0;
 * every malformed form refused with the text quoted. */
static void test_schedule_parse(void) {
    tk_schedule s;
    char err[512];
    CHECK(tk_schedule_parse("lanes=8,rows=2,warp_rows=16,chunk=64,split=4,ldg=8,tiles=1,regs=128,coop=16", &s, err,
                            sizeof err) == TK_OK);
    CHECK(s.v[TK_SCHED_LANES] == 8 && s.v[TK_SCHED_ROWS] == 2 && s.v[TK_SCHED_WARP_ROWS] == 16);
    CHECK(s.v[TK_SCHED_CHUNK] == 64 && s.v[TK_SCHED_SPLIT] == 4 && s.v[TK_SCHED_LDG] == 8);
    CHECK(s.v[TK_SCHED_TILES] == 1 && s.v[TK_SCHED_REGS] == 128 && s.v[TK_SCHED_COOP] == 16);
    CHECK(tk_schedule_parse("split=2", &s, err, sizeof err) == TK_OK);
    CHECK(s.v[TK_SCHED_SPLIT] == 2 && s.v[TK_SCHED_LANES] == 0 && s.v[TK_SCHED_REGS] == 0);
    CHECK(tk_schedule_parse("", &s, err, sizeof err) == TK_OK && s.v[TK_SCHED_SPLIT] == 0);
    CHECK(tk_schedule_parse(NULL, &s, err, sizeof err) == TK_OK);
    const char *bad[] = {"lanes=3", "lanes=8,lanes=8", "lane=8", "lanes=", "lanes=8,", "lanes=-8", "regs=100",
                         "coop=3", "coop=64", "chunk=7", "lanes=8 rows=2", "=8", ","};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        CHECK(tk_schedule_parse(bad[i], &s, err, sizeof err) == TK_ERR_INVALID);
        CHECK(strstr(err, bad[i]) != NULL && strstr(err, "TK_CUDA_TUNE") != NULL);
    }
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "ops";
    test_brick_pad(dir);
    test_rwkv(dir);
    test_expressions();
    test_statements();
    test_valid_odd();
    test_errors();
    test_prefixes();
    test_schedule_parse();
    test_float_defaults();
    CHECK_STR(tk_opc_text(TK_OPC_FLOORDIV), "//");
    CHECK_STR(tk_opc_text(TK_OPC_NOT), "not");
    CHECK_STR(tk_opc_text(TK_OPC_GE), ">=");
    tk_arena_free(&arena);
    if (failures > 0) {
        fprintf(stderr, "test_parse: %d of %d checks failed\n", failures, checks);
        return 1;
    }
    printf("test_parse: all %d checks passed\n", checks);
    return 0;
}
