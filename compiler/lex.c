/* lex.c - the tokenizer of spec files. See lex.h for the layout rules. */
#include "lex.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ORDER TOKEN */
static const char *const token_text[TK_T_COUNT] = {
    "end of file", "an invalid token",
    "NEWLINE", "INDENT", "DEDENT",
    "a name", "an integer", "a float",
    "'op'", "'for'", "'in'", "'if'", "'elif'", "'else'",
    "'and'", "'or'", "'not'", "'True'", "'False'", "'pass'",
    "'backward'",
    "'+'", "'-'", "'*'", "'/'", "'//'", "'%'",
    "'**'",
    "'=='", "'!='", "'<'", "'<='", "'>'", "'>='",
    "'='", "'+='", "'-='", "'*='", "'/='",
    "'('", "')'", "'['", "']'",
    "','", "':'", "'.'", "'...'", "'->'",
    "'|'", "'?'",
};

static const struct { const char *word; tk_token_kind kind; } keywords[] = {
    {"op", TK_T_OP}, {"for", TK_T_FOR}, {"in", TK_T_IN}, {"if", TK_T_IF},
    {"elif", TK_T_ELIF}, {"else", TK_T_ELSE}, {"and", TK_T_AND},
    {"or", TK_T_OR}, {"not", TK_T_NOT}, {"True", TK_T_TRUE},
    {"False", TK_T_FALSE}, {"pass", TK_T_PASS}, {"backward", TK_T_BACKWARD},
};

/* Fixed spelling of a token kind, for "expected ..." messages. */
const char *tk_lex_token_text(tk_token_kind k) {
    if ((int)k < 0 || k >= TK_T_COUNT) return "?";
    return token_text[k];
}

/* Writes "'spelling'" (shortened if long) or the kind's name into buf. */
void tk_lex_describe(const tk_token *tok, char *buf, size_t n) {
    switch (tok->kind) {
    case TK_T_EOF: case TK_T_ERROR: case TK_T_NEWLINE:
    case TK_T_INDENT: case TK_T_DEDENT:
        snprintf(buf, n, "%s", tk_lex_token_text(tok->kind));
        break;
    default:
        if (tok->len > 40)
            snprintf(buf, n, "'%.*s...'", 37, tok->start);
        else
            snprintf(buf, n, "'%.*s'", (int)tok->len, tok->start);
        break;
    }
}

/* Starts lexing src[0..len). */
void tk_lex_init(tk_lex_state *ls, const char *src, size_t len) {
    memset(ls, 0, sizeof *ls);
    ls->src = src;
    ls->len = len;
    ls->line = 1;
    ls->at_line_start = 1;
    ls->indent[0] = 0;
    ls->nindent = 1;
    if (len >= 3 && memcmp(src, "\xef\xbb\xbf", 3) == 0)   /* a UTF-8 byte order mark, as Python skips it */
        ls->pos = ls->line_start = 3;
}

/* 1 if c may start a name. */
static int is_name_start(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

/* 1 if c is a decimal digit. */
static int is_digit(int c) {
    return c >= '0' && c <= '9';
}

/* 1 if c may continue a name. */
static int is_name_char(int c) {
    return is_name_start(c) || is_digit(c);
}

/* Value of hex digit c, or -1. */
static int hex_value(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Byte at offset p, or -1 past the end. */
static int at(const tk_lex_state *ls, size_t p) {
    return p < ls->len ? (unsigned char)ls->src[p] : -1;
}

/* Location of offset p, which lies on the current line. */
static tk_loc loc_of(const tk_lex_state *ls, size_t p) {
    tk_loc l;
    size_t col = p - ls->line_start + 1;
    l.line = ls->line;
    l.col = col > 0x7fffffff ? 0x7fffffff : (int)col;
    return l;
}

/* Makes tok an error token at offset p with message fmt(arg). */
static void lex_error(tk_lex_state *ls, tk_token *tok, size_t p, const char *msg) {
    tok->kind = TK_T_ERROR;
    tok->loc = loc_of(ls, p);
    tok->start = ls->src + (p < ls->len ? p : ls->len);
    tok->len = 0;
    snprintf(ls->msg, sizeof ls->msg, "%s", msg);
}

/* Error for a malformed literal src[s..e): "WHAT 'text'". */
static void literal_error(tk_lex_state *ls, tk_token *tok, size_t s, size_t e,
                          const char *what, const char *tail) {
    char m[160];
    size_t n = e - s;
    if (n > 40)
        snprintf(m, sizeof m, "%s '%.*s...'%s", what, 37, ls->src + s, tail);
    else
        snprintf(m, sizeof m, "%s '%.*s'%s", what, (int)n, ls->src + s, tail);
    lex_error(ls, tok, s, m);
}

/* Consumes the '\n' at pos and starts a new line. */
static void next_line(tk_lex_state *ls) {
    ls->pos++;
    ls->line++;
    ls->line_start = ls->pos;
}

/* Offset just past the name/number characters starting at p. */
static size_t skip_word(const tk_lex_state *ls, size_t p) {
    while (is_name_char(at(ls, p)) || at(ls, p) == '.') p++;
    return p;
}

/* Lexes a hexadecimal integer starting at pos ("0x..."). */
static void lex_hex(tk_lex_state *ls, tk_token *tok) {
    size_t s = ls->pos, p = s + 2;
    uint64_t v = 0;
    int nd = 0, over = 0, d;
    while ((d = hex_value(at(ls, p))) >= 0) {
        if (v > ((uint64_t)INT64_MAX - (uint64_t)d) / 16u) over = 1;
        else v = v * 16u + (uint64_t)d;
        p++;
        nd++;
    }
    if (nd == 0 || is_name_char(at(ls, p)) || at(ls, p) == '.') {
        literal_error(ls, tok, s, skip_word(ls, p), "malformed number", "");
        return;
    }
    if (over) {
        literal_error(ls, tok, s, p, "integer literal",
                      " is too large (the largest is 9223372036854775807)");
        return;
    }
    tok->kind = TK_T_INT;
    tok->ival = (int64_t)v;
    ls->pos = p;
}

/* Converts the float literal src[s..e) with strtod. */
static void float_value(tk_lex_state *ls, tk_token *tok, size_t s, size_t e) {
    char buf[512];
    double v;
    if (e - s >= sizeof buf) {
        literal_error(ls, tok, s, e, "float literal", " is too long");
        return;
    }
    memcpy(buf, ls->src + s, e - s);
    buf[e - s] = '\0';
    v = strtod(buf, NULL);
    if (isinf(v) || isnan(v)) {
        literal_error(ls, tok, s, e, "float literal", " is out of range");
        return;
    }
    tok->kind = TK_T_FLOAT;
    tok->fval = v;
    ls->pos = e;
}

/* Lexes a decimal integer or a float literal starting at pos. */
static void lex_number(tk_lex_state *ls, tk_token *tok) {
    size_t s = ls->pos, p = s;
    int isfloat = 0;
    uint64_t v = 0;
    int over = 0;
    if (at(ls, p) == '0' && (at(ls, p + 1) == 'x' || at(ls, p + 1) == 'X')) {
        lex_hex(ls, tok);
        return;
    }
    while (is_digit(at(ls, p))) {
        uint64_t d = (uint64_t)(at(ls, p) - '0');
        if (v > ((uint64_t)INT64_MAX - d) / 10u) over = 1;
        else v = v * 10u + d;
        p++;
    }
    if (at(ls, p) == '.') {
        isfloat = 1;
        p++;
        while (is_digit(at(ls, p))) p++;
    }
    if (at(ls, p) == 'e' || at(ls, p) == 'E') {
        size_t q = p + 1;
        if (at(ls, q) == '+' || at(ls, q) == '-') q++;
        if (!is_digit(at(ls, q))) {
            literal_error(ls, tok, s, skip_word(ls, p), "malformed number", "");
            return;
        }
        isfloat = 1;
        p = q;
        while (is_digit(at(ls, p))) p++;
    }
    if (is_name_char(at(ls, p)) || at(ls, p) == '.') {
        literal_error(ls, tok, s, skip_word(ls, p), "malformed number", "");
        return;
    }
    if (isfloat) {
        float_value(ls, tok, s, p);
        return;
    }
    if (over) {
        literal_error(ls, tok, s, p, "integer literal",
                      " is too large (the largest is 9223372036854775807)");
        return;
    }
    tok->kind = TK_T_INT;
    tok->ival = (int64_t)v;
    ls->pos = p;
}

/* Lexes a name or keyword starting at pos. */
static void lex_name(tk_lex_state *ls, tk_token *tok) {
    size_t s = ls->pos, p = s, i;
    while (is_name_char(at(ls, p))) p++;
    tok->kind = TK_T_NAME;
    for (i = 0; i < sizeof keywords / sizeof keywords[0]; i++) {
        size_t n = strlen(keywords[i].word);
        if (n == p - s && memcmp(keywords[i].word, ls->src + s, n) == 0) {
            tok->kind = keywords[i].kind;
            break;
        }
    }
    ls->pos = p;
}

/* Opens a bracket at pos (kind '(' or '['); errors past the depth limit. */
static void open_bracket(tk_lex_state *ls, tk_token *tok, tk_token_kind k) {
    if (ls->nbrackets >= TK_LEX_MAX_DEPTH) {
        lex_error(ls, tok, ls->pos, "nesting too deep");
        return;
    }
    ls->brackets[ls->nbrackets] = k == TK_T_LPAREN ? '(' : '[';
    ls->bracket_locs[ls->nbrackets] = loc_of(ls, ls->pos);
    ls->nbrackets++;
    tok->kind = k;
    ls->pos++;
}

/* Sets tok to the operator kind k spelled by n bytes at pos. */
static void punct(tk_lex_state *ls, tk_token *tok, tk_token_kind k, size_t n) {
    tok->kind = k;
    ls->pos += n;
}

/* Picks k2 if the byte after pos is c2, else k1 (one byte). */
static void punct2(tk_lex_state *ls, tk_token *tok, int c2,
                   tk_token_kind k2, tk_token_kind k1) {
    if (at(ls, ls->pos + 1) == c2) punct(ls, tok, k2, 2);
    else punct(ls, tok, k1, 1);
}

/* Error naming the unexpected byte at pos. */
static void bad_char(tk_lex_state *ls, tk_token *tok) {
    char m[128];
    int c = at(ls, ls->pos);
    int n = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 && c < 0xf0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 1;   /* UTF-8 */
    for (int i = 1; i < n && n > 1; i++)
        if ((at(ls, ls->pos + (size_t)i) & 0xc0) != 0x80) n = 1;
    if (c >= 0x20 && c < 0x7f)
        snprintf(m, sizeof m, "invalid character '%c'", c);
    else if (n > 1)   /* quoted as the character itself: the message is UTF-8 */
        snprintf(m, sizeof m, "non-ASCII character '%.*s': names, numbers and operators are ASCII", n,
                 ls->src + ls->pos);
    else
        snprintf(m, sizeof m, "invalid character '\\x%02x'", (unsigned)c);
    lex_error(ls, tok, ls->pos, m);
}

/* Lexes one operator or punctuation token at pos. */
static void lex_punct(tk_lex_state *ls, tk_token *tok) {
    int c = at(ls, ls->pos), c1 = at(ls, ls->pos + 1);
    switch (c) {
    case '+': punct2(ls, tok, '=', TK_T_PLUSEQ, TK_T_PLUS); break;
    case '-':
        if (c1 == '>') punct(ls, tok, TK_T_ARROW, 2);
        else punct2(ls, tok, '=', TK_T_MINUSEQ, TK_T_MINUS);
        break;
    case '*':
        if (c1 == '*') punct(ls, tok, TK_T_DSTAR, 2);
        else punct2(ls, tok, '=', TK_T_STAREQ, TK_T_STAR);
        break;
    case '/':
        if (c1 == '/') punct(ls, tok, TK_T_DSLASH, 2);
        else punct2(ls, tok, '=', TK_T_SLASHEQ, TK_T_SLASH);
        break;
    case '%': punct(ls, tok, TK_T_PERCENT, 1); break;
    case '=': punct2(ls, tok, '=', TK_T_EQ, TK_T_ASSIGN); break;
    case '!':
        if (c1 == '=') punct(ls, tok, TK_T_NE, 2);
        else bad_char(ls, tok);
        break;
    case '<': punct2(ls, tok, '=', TK_T_LE, TK_T_LT); break;
    case '>': punct2(ls, tok, '=', TK_T_GE, TK_T_GT); break;
    case '(': open_bracket(ls, tok, TK_T_LPAREN); break;
    case '[': open_bracket(ls, tok, TK_T_LBRACKET); break;
    case ')': case ']':
        if (ls->nbrackets > 0) ls->nbrackets--;
        punct(ls, tok, c == ')' ? TK_T_RPAREN : TK_T_RBRACKET, 1);
        break;
    case ',': punct(ls, tok, TK_T_COMMA, 1); break;
    case ':': punct(ls, tok, TK_T_COLON, 1); break;
    case '|': punct(ls, tok, TK_T_BAR, 1); break;
    case '?': punct(ls, tok, TK_T_QUESTION, 1); break;
    case '.':
        if (c1 == '.' && at(ls, ls->pos + 2) == '.') punct(ls, tok, TK_T_ELLIPSIS, 3);
        else punct(ls, tok, TK_T_DOT, 1);
        break;
    default: bad_char(ls, tok); break;
    }
}

/* 1 if the rest of the line from p is blank or a comment. */
static int blank_rest(const tk_lex_state *ls, size_t p) {
    int c;
    while ((c = at(ls, p)) == ' ' || c == '\t' || c == '\r') p++;
    return c == -1 || c == '\n' || c == '#';
}

/* Offset of the '\n' ending the line that contains p (or len). */
static size_t line_end(const tk_lex_state *ls, size_t p) {
    while (p < ls->len && ls->src[p] != '\n') p++;
    return p;
}

/* At the start of a line outside brackets: skips blank lines, measures the
 * indentation and queues INDENT/DEDENTs. Returns 0 (tok = error) on error. */
static int start_line(tk_lex_state *ls, tk_token *tok) {
    for (;;) {
        size_t p = ls->pos;
        int col = 0;
        while (at(ls, p) == ' ') {
            p++;
            if (col < 0x7fffffff) col++;
        }
        if (blank_rest(ls, p)) {
            ls->pos = line_end(ls, p);
            if (ls->pos >= ls->len) return 1;
            next_line(ls);
            continue;
        }
        if (at(ls, p) == '\t') {
            lex_error(ls, tok, p, "tab in indentation (indent with spaces)");
            return 0;
        }
        ls->pos = p;
        ls->pending_loc = loc_of(ls, p);
        if (col > ls->indent[ls->nindent - 1]) {
            if (ls->nindent > TK_LEX_MAX_DEPTH) {
                lex_error(ls, tok, p, "nesting too deep");
                return 0;
            }
            ls->indent[ls->nindent++] = col;
            ls->pending = -1;
        } else {
            int n = 0;
            while (ls->nindent > 1 && ls->indent[ls->nindent - 1] > col) {
                ls->nindent--;
                n++;
            }
            if (ls->indent[ls->nindent - 1] != col) {
                lex_error(ls, tok, p,
                          "unindent does not match any outer indentation level");
                return 0;
            }
            ls->pending = n;
        }
        return 1;
    }
}

/* After a '\n' ending a logical line: if the next non-blank line starts with
 * '->', moves pos there and returns 1 (the line continues). */
static int continuation_follows(tk_lex_state *ls) {
    size_t p = ls->pos, ls_start = ls->line_start;
    int line = ls->line, c;
    for (;;) {
        while ((c = at(ls, p)) == ' ' || c == '\t' || c == '\r') p++;
        if (c == '#') {
            p = line_end(ls, p);
            c = at(ls, p);
        }
        if (c == '\n') {
            p++;
            line++;
            ls_start = p;
            continue;
        }
        if (c == '-' && at(ls, p + 1) == '>') {
            ls->pos = p;
            ls->line = line;
            ls->line_start = ls_start;
            return 1;
        }
        return 0;
    }
}

/* Emits the tokens due at the end of the text: NEWLINE, DEDENTs, EOF. */
static void lex_eof(tk_lex_state *ls, tk_token *tok) {
    tok->loc = loc_of(ls, ls->pos);
    tok->start = ls->src + ls->len;
    if (ls->nbrackets > 0) {
        char m[64];
        int i = ls->nbrackets - 1;
        snprintf(m, sizeof m, "'%c' was never closed", ls->brackets[i]);
        snprintf(ls->msg, sizeof ls->msg, "%s", m);
        tok->kind = TK_T_ERROR;
        tok->loc = ls->bracket_locs[i];
        return;
    }
    if (ls->need_newline) {
        ls->need_newline = 0;
        tok->kind = TK_T_NEWLINE;
        return;
    }
    if (ls->nindent > 1) {
        ls->pending = ls->nindent - 2;
        ls->nindent = 1;
        ls->pending_loc = tok->loc;
        tok->kind = TK_T_DEDENT;
        return;
    }
    ls->done = 1;
    tok->kind = TK_T_EOF;
}

/* Emits a queued INDENT or DEDENT; returns 0 if none is queued. */
static int emit_pending(tk_lex_state *ls, tk_token *tok) {
    if (ls->pending == 0) return 0;
    tok->kind = ls->pending < 0 ? TK_T_INDENT : TK_T_DEDENT;
    ls->pending = ls->pending < 0 ? 0 : ls->pending - 1;
    tok->loc = ls->pending_loc;
    tok->start = ls->src + ls->pos;
    return 1;
}

/* Handles the '\n' at pos; returns 1 if it ends a logical line (NEWLINE). */
static int end_of_line(tk_lex_state *ls, tk_token *tok) {
    tk_loc l = loc_of(ls, ls->pos);
    const char *s = ls->src + ls->pos;
    next_line(ls);
    if (ls->nbrackets > 0) return 0;
    if (!ls->need_newline) {
        ls->at_line_start = 1;
        return 0;
    }
    if (continuation_follows(ls)) return 0;
    ls->need_newline = 0;
    ls->at_line_start = 1;
    tok->kind = TK_T_NEWLINE;
    tok->loc = l;
    tok->start = s;
    tok->len = 1;
    return 1;
}

/* Reads the next token into *tok (TK_T_ERROR with ls->msg on errors). */
void tk_lex_next(tk_lex_state *ls, tk_token *tok) {
    int c;
    memset(tok, 0, sizeof *tok);
    if (emit_pending(ls, tok)) return;
    if (ls->done) {
        lex_eof(ls, tok);
        return;
    }
    for (;;) {
        if (ls->at_line_start && ls->nbrackets == 0) {
            ls->at_line_start = 0;
            if (!start_line(ls, tok)) return;
            if (emit_pending(ls, tok)) return;
        }
        while ((c = at(ls, ls->pos)) == ' ' || c == '\t' || c == '\r') ls->pos++;
        if (c == -1) {
            lex_eof(ls, tok);
            return;
        }
        if (c == '#') {
            ls->pos = line_end(ls, ls->pos);
            continue;
        }
        if (c == '\n') {
            if (end_of_line(ls, tok)) return;
            continue;
        }
        break;
    }
    tok->loc = loc_of(ls, ls->pos);
    tok->start = ls->src + ls->pos;
    if (is_name_start(c)) lex_name(ls, tok);
    else if (is_digit(c) || (c == '.' && is_digit(at(ls, ls->pos + 1)))) lex_number(ls, tok);
    else lex_punct(ls, tok);
    if (tok->kind != TK_T_ERROR) {
        tok->len = (size_t)(ls->src + ls->pos - tok->start);
        ls->need_newline = 1;
    }
}
