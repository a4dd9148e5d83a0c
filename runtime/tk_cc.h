/* tk_cc.h - CPU kernels for specs loaded at run time: the generated C is
 * compiled by the system C compiler into a shared object, kept in an on-disk
 * cache, and loaded with dlopen (the way TorchInductor's C++ backend works).
 * Built-in ops do not need this: their kernels are compiled into libtk.
 *
 * A worked example: compile a spec and run it on raw pointers.
 *
 *     tk_ctx *ctx = tk_ctx_new();
 *     tk_cc *cc = tk_cc_new(NULL);                // once per process
 *     char msg[8192];
 *     if (tk_cc_load_spec(cc, ctx, "axpy.tk", src, strlen(src), msg, sizeof msg) != TK_OK)
 *         fprintf(stderr, "%s\n", msg);   // spec error (file:line:col) or compiler output
 *     const tk_op *op = tk_op_find(ctx, "axpy");
 *     tk_call call;
 *     tk_bind(op, args, nargs, &call);            // as in tk.h
 *     tk_set_output(&call, 0, tk_view(y, TK_F32, 1, &n, &one));
 *     tk_run_cpu(&call, 0, call.kargs.numel);
 *
 * For CUDA tensors the same op runs through tk_cuda_launch (tk_cuda.h); it
 * needs no C compiler. examples/c_api/example.c is a complete program.
 *
 * The compile: every variant of the ops is emitted with tk_emit into one C
 * file (tk_cc_compile), or one variant of one op with tk_emit_variant
 * (tk_cc_compile_variant: what the PyTorch shim compiles, on an op's first
 * CPU call per dtype), compiled for this machine's CPU (-march=native, no per-ISA clones:
 * a third of the compile time of the portable build; the portable flags when
 * /proc/cpuinfo cannot be read); key = SHA-256 of (that source, tk_kernel.h,
 * the compiler's identity (first line of `cc --version`), the flags, the CPU
 * (model and feature flags), TK_VERSION); the shared object
 * is <cache>/cpu/<key>.so, built in a private folder and renamed into place,
 * so processes racing on one entry never see a partial file. A cached file
 * that does not load is rebuilt. When the cache folder cannot be written
 * the compile happens in a private temporary folder (one warning, the op
 * still loads). Shared objects are never unloaded.
 *
 * Environment (read by tk_cc_new): TK_CC, else CC, else "cc" (a command,
 * arguments allowed: "ccache gcc"); TK_CACHE_DIR (default $XDG_CACHE_HOME/tk
 * or ~/.cache/tk; CPU entries go to its cpu/ folder); TK_DEBUG=1 prints the
 * source and the command of every compile. docs/runtime.md says more. */
#ifndef TK_CC_H
#define TK_CC_H

#include <stddef.h>

#include "tk.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The flags every kernel file is compiled with (and that go into the key),
 * and the flags added when the CPU is known. */
#define TK_CC_FLAGS "-O3 -fwrapv -fopenmp-simd -ffp-contract=fast -fno-math-errno -shared -fPIC -std=c11"
#if defined(__x86_64__)
#define TK_CC_NATIVE_FLAGS "-march=native -DTK_NO_CLONES -mprefer-vector-width=512"
#else
#define TK_CC_NATIVE_FLAGS "-march=native -DTK_NO_CLONES"
#endif

typedef struct tk_cc tk_cc;

typedef struct tk_cc_options {
    const char *compiler;   /* NULL: $TK_CC, else $CC, else "cc" */
    const char *cache_dir;  /* NULL: <tk_cache_default_dir>/cpu; "": no disk cache */
    int debug;              /* 1: print sources and commands; -1: from $TK_DEBUG */
} tk_cc_options;

/* The compiler state (its command, identity and cache folder). The compiler
 * is not run until the first compile, so this fails (NULL) only when out of
 * memory. opt may be NULL (defaults). Thread-safe once made. */
tk_cc *tk_cc_new(const tk_cc_options *opt);
/* Frees cc; the kernels it loaded stay loaded (ops keep pointing at them). */
void tk_cc_free(tk_cc *cc);

/* For fork (pthread_atfork, the torch shim): holds cc's lock so that no
 * thread is inside it when the process forks; released after, on both
 * sides. */
void tk_cc_lock(tk_cc *cc);
void tk_cc_unlock(tk_cc *cc);

const char *tk_cc_compiler(const tk_cc *cc);   /* the command, as configured */
const char *tk_cc_cache_dir(const tk_cc *cc);  /* "" when the disk cache is off */

/* Compiles the CPU kernels of ops[0..nops) (every variant) into one shared
 * object, or finds it in the cache, and attaches them (tk_op_set_cpu_kernel).
 * Emitting annotates the ops: nothing else may emit them meanwhile. Errors
 * (msg): no compiler (TK_ERR_NOTFOUND), the compiler's output for a failed
 * compile, a file that does not load (TK_ERR_COMPILE). */
tk_status tk_cc_compile(tk_cc *cc, tk_ctx *ctx, tk_op *const *ops, int nops, char *msg, size_t msglen);

/* Compiles the CPU kernel of one variant of op (tk_emit_variant: its C
 * alone, a fraction of tk_cc_compile's file), or finds it in the cache (an
 * entry of its own, keyed by that source), and attaches it. For callers
 * that compile a variant when it is first needed (the PyTorch shim does, on
 * an op's first CPU call per dtype). Emitting annotates op: nothing else may
 * emit it meanwhile. Errors as tk_cc_compile; messages name the op and the
 * variant: "tk: compiling the CPU kernels of axpy (f32) failed ...". */
tk_status tk_cc_compile_variant(tk_cc *cc, tk_ctx *ctx, tk_op *op, int variant, char *msg, size_t msglen);

/* The tk_emit_ex flags of the C that cc compiles: TK_EMIT_CPU_* for the
 * running CPU when kernels are compiled for it alone (-march=native; the
 * file then carries only the bodies this CPU runs), else 0. */
unsigned tk_cc_emit_flags(const tk_cc *cc);

/* tk_cc_compile_variant from a source the caller emitted with
 * tk_emit_scheduled(ctx, op2, variant, variant + 1, TK_TARGET_C,
 * tk_cc_emit_flags(cc), NULL, &src, NULL): for callers that
 * emit under a lock of their own and compile outside it. The kernel is
 * attached to op, which may be another context's copy of op2 (same spec
 * text: same kernel names). Thread-safe for different ops or variants; the
 * caller makes sure two threads do not compile the same one (harmless but
 * wasted: the second attaches an identical kernel). */
tk_status tk_cc_compile_variant_source(tk_cc *cc, tk_op *op, int variant, const char *src, char *msg,
                                       size_t msglen);

/* Whether the compiler runs (`command --version`, asked once per tk_cc):
 * TK_OK, or TK_ERR_NOTFOUND with the message tk_cc_compile would give. A
 * cheap check for callers that compile later (a few ms, once). */
tk_status tk_cc_check(tk_cc *cc, char *msg, size_t msglen);

/* tk_load_spec + tk_ctx_link + tk_cc_compile of the ops the spec added: one
 * call from spec text to runnable ops. A spec error (TK_ERR_SYNTAX,
 * TK_ERR_CHECK) is "file:line:col: error: ..." and adds nothing; after a
 * link or compile error the ops stay in ctx without CPU kernels. */
tk_status tk_cc_load_spec(tk_cc *cc, tk_ctx *ctx, const char *file, const char *text, size_t len, char *msg,
                          size_t msglen);

#ifdef __cplusplus
}
#endif
#endif
