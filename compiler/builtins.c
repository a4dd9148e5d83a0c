/* builtins.c - loads the specs compiled into a library (the ops/ specs in libtk),
 * attaches their CPU kernels and links their backward ops: the one place
 * that loads, checks and links together. */
#include <stdio.h>
#include <string.h>

#include "core.h"

/* Attaches k's kernel to the op variant it is named for; 0 if none. */
static int attach_kernel(tk_ctx *ctx, const tk_builtin_kernel *k) {
    for (int i = 0; i < ctx->nops; i++)
        for (int v = 0; v < ctx->ops[i]->nvariants; v++)
            if (strcmp(ctx->ops[i]->kernel_names[v], k->name) == 0) {
                ctx->ops[i]->cpu_parts[v] = k->parts ? k->fn : NULL;
                ctx->ops[i]->cpu_fns[v] = k->fn;
                return 1;
            }
    return 0;
}

tk_status tk_ctx_add_builtins(tk_ctx *ctx, const tk_builtin_spec *specs, int nspecs,
                              const tk_builtin_kernel *kernels, int nkernels) {
    if (!ctx || (nspecs > 0 && !specs) || (nkernels > 0 && !kernels)) return TK_ERR_INVALID;
    for (int i = 0; i < nspecs; i++) {
        if (!specs[i].text) return TK_ERR_INVALID;
        tk_status st = tk_load_spec(ctx, specs[i].file, specs[i].text, strlen(specs[i].text));
        if (st != TK_OK) return st;
    }
    for (int k = 0; k < nkernels; k++)
        if (!attach_kernel(ctx, &kernels[k])) {
            return tk_error_set(&ctx->error, TK_ERR_NOTFOUND, NULL, (tk_loc){0, 0},
                                "built-in kernel %s matches no op variant (stale generated code?)", kernels[k].name);
        }
    return tk_ctx_link(ctx);
}
