/* error.c - the core's one error type (tk_error, tk.h): filling it and its
 * one-line text (a leaf: it calls nothing else of the core). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core.h"

/* Rebuilds e->text from the fields: "file:line:col: error: message",
 * "file: error: message" without a place, the message alone without a file. */
static void format_text(tk_error *e) {
    if (e->file[0] && e->line > 0)
        snprintf(e->text, sizeof e->text, "%s:%d:%d: error: %s", e->file, e->line, e->col, e->message);
    else if (e->file[0])
        snprintf(e->text, sizeof e->text, "%s: error: %s", e->file, e->message);
    else
        snprintf(e->text, sizeof e->text, "%s", e->message);
}

tk_status tk_error_setv(tk_error *e, tk_status st, const char *file, tk_loc loc, const char *fmt, va_list ap) {
    if (!e) return st;
    e->status = st;
    e->line = file ? loc.line : 0;
    e->col = file ? loc.col : 0;
    snprintf(e->file, sizeof e->file, "%s", file ? file : "");
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    format_text(e);
    return st;
}

tk_status tk_error_set(tk_error *e, tk_status st, const char *file, tk_loc loc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tk_error_setv(e, st, file, loc, fmt, ap);
    va_end(ap);
    return st;
}

void tk_error_from_message(tk_error *e, int status, const char *message) {
    tk_error_clear(e);
    tk_error_set(e, (tk_status)status, NULL, (tk_loc){0, 0}, "%s", message ? message : "");
}

void tk_error_append(tk_error *e, const char *fmt, ...) {
    if (!e) return;
    size_t n = strlen(e->message);
    va_list ap;
    va_start(ap, fmt);
    if (n < sizeof e->message) vsnprintf(e->message + n, sizeof e->message - n, fmt, ap);
    va_end(ap);
    format_text(e);
}

void tk_error_clear(tk_error *e) {
    if (e) memset(e, 0, sizeof *e);
}
