/* rename.c - locals that reuse a name: the checker's last step, which
 * gives the later of two same-named locals a name of their own, for the
 * code generators (tk_rename_reused_locals). */
#include <stdio.h>
#include <string.h>

#include "core.h"

static void rename_expr(tk_expr *e, int ref, const char *from, const char *to) {
    if (!e) return;
    if (e->kind == TK_E_NAME && e->ref == ref && strcmp(e->name, from) == 0) e->name = to;
    for (int i = 0; i < e->nargs; i++) rename_expr(e->args[i], ref, from, to);
}

static void rename_block(tk_stmt **body, int n, int ref, const char *from, const char *to) {
    for (int i = 0; i < n; i++) {
        tk_stmt *s = body[i];
        if (s->kind == TK_S_ASSIGN && s->ref == ref && strcmp(s->name, from) == 0) s->name = to;
        rename_expr(s->value, ref, from, to);
        rename_expr(s->lo, ref, from, to);
        rename_expr(s->hi, ref, from, to);
        for (int j = 0; j < s->nindex; j++) rename_expr(s->index[j], ref, from, to);
        rename_block(s->body, s->nbody, ref, from, to);
        rename_block(s->orelse, s->norelse, ref, from, to);
    }
}

/* Two locals may share a name in different blocks (a temporary `p` in two
 * sibling loops, or set in both branches of an if). The code generators
 * name C variables by spec name, and a tile declares its per-lane locals
 * together at its top, so the later ones are renamed "<k>_<name>" (k = 1,
 * 2, ...), which no spec name can be: a spec name starts with a letter or
 * '_'. Runs once every variant has checked (errors keep the spec's names);
 * the variants number locals alike, so the refs hold for all of them. */
tk_status tk_rename_reused_locals(tk_op *op, tk_arena *a) {
    const char *spec_name[TK_MAX_LOCALS];   /* as written: the loop renames as it goes */
    for (int r = 0; r < op->nlocals; r++) spec_name[r] = op->locals[r].name;
    for (int r = 0; r < op->nlocals; r++) {
        if (op->locals[r].is_loop) continue;
        int k = 0;
        for (int q = 0; q < r; q++) k += !op->locals[q].is_loop && strcmp(spec_name[q], spec_name[r]) == 0;
        if (k == 0) continue;
        size_t len = strlen(spec_name[r]) + 16;
        char *to = tk_arena_alloc(a, len);
        if (!to) return TK_ERR_NOMEM;
        snprintf(to, len, "%d_%s", k, spec_name[r]);
        rename_block(op->decl->body, op->decl->nbody, r, spec_name[r], to);
        op->locals[r].name = to;
    }
    return TK_OK;
}
