/* lex.h - the tokenizer of spec files (used by parse.c).
 *
 * Python-style layout: the lexer emits NEWLINE at the end of each logical
 * line, INDENT/DEDENT when the indentation of a line grows/shrinks. Newlines
 * inside (...) and [...] are ignored, blank and comment-only lines are
 * skipped, and a line whose first token is '->' continues the line before.
 * The lexer never reads past len; the text need not be NUL-terminated. */
#ifndef TK_LEX_H
#define TK_LEX_H

#include <stddef.h>
#include <stdint.h>

#include "ast.h"

#define TK_LEX_MAX_DEPTH 200    /* nesting limit: brackets, indentation */

/* ORDER TOKEN: tk_lex_token_text in lex.c follows this order. */
typedef enum tk_token_kind {
    TK_T_EOF, TK_T_ERROR,
    TK_T_NEWLINE, TK_T_INDENT, TK_T_DEDENT,
    TK_T_NAME, TK_T_INT, TK_T_FLOAT,
    /* keywords */
    TK_T_OP, TK_T_FOR, TK_T_IN, TK_T_IF, TK_T_ELIF, TK_T_ELSE,
    TK_T_AND, TK_T_OR, TK_T_NOT, TK_T_TRUE, TK_T_FALSE, TK_T_PASS,
    TK_T_BACKWARD,
    /* operators and punctuation */
    TK_T_PLUS, TK_T_MINUS, TK_T_STAR, TK_T_SLASH, TK_T_DSLASH, TK_T_PERCENT,
    TK_T_DSTAR,
    TK_T_EQ, TK_T_NE, TK_T_LT, TK_T_LE, TK_T_GT, TK_T_GE,
    TK_T_ASSIGN, TK_T_PLUSEQ, TK_T_MINUSEQ, TK_T_STAREQ, TK_T_SLASHEQ,
    TK_T_LPAREN, TK_T_RPAREN, TK_T_LBRACKET, TK_T_RBRACKET,
    TK_T_COMMA, TK_T_COLON, TK_T_DOT, TK_T_ELLIPSIS, TK_T_ARROW,
    TK_T_BAR, TK_T_QUESTION,
    TK_T_COUNT
} tk_token_kind;

typedef struct tk_token {
    tk_token_kind kind;
    tk_loc loc;
    const char *start;          /* spelling in the source (NAME, INT, FLOAT...) */
    size_t len;
    int64_t ival;               /* INT */
    double fval;                /* FLOAT */
} tk_token;

typedef struct tk_lex_state {
    const char *src;
    size_t len, pos;
    int line;
    size_t line_start;          /* offset of the first byte of the line */
    int at_line_start;          /* next call measures indentation */
    int need_newline;           /* tokens were emitted on this logical line */
    int pending;                /* DEDENTs still to emit (<0: one INDENT) */
    int indent[TK_LEX_MAX_DEPTH + 1];
    int nindent;                /* indent[0] == 0 always */
    char brackets[TK_LEX_MAX_DEPTH];
    tk_loc bracket_locs[TK_LEX_MAX_DEPTH];
    int nbrackets;
    tk_loc pending_loc;         /* where pending INDENT/DEDENTs are reported */
    int done;                   /* EOF reached and every DEDENT emitted */
    char msg[160];              /* message of the last TK_T_ERROR token */
} tk_lex_state;

/* Starts lexing src[0..len). */
void tk_lex_init(tk_lex_state *ls, const char *src, size_t len);
/* Reads the next token into *tok; on a lexical error tok->kind is
 * TK_T_ERROR, tok->loc says where and ls->msg says what. */
void tk_lex_next(tk_lex_state *ls, tk_token *tok);
/* Fixed spelling of a token kind: "'('", "'for'", "NEWLINE", "a name"... */
const char *tk_lex_token_text(tk_token_kind k);
/* Describes a token for "found ..." messages ("'foo'", "NEWLINE", ...). */
void tk_lex_describe(const tk_token *tok, char *buf, size_t n);

#endif
