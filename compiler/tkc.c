/* tkc.c - the tk spec compiler's command line.
 *
 *   tkc check SPEC...               parse and check; print each op's schema
 *   tkc derived SPEC...             print the backward ops 'backward auto' derives
 *                                   (docs/autograd.md), as spec text
 *   tkc emit-c [--plain|--checked] [--dtype CODE] [--cpu base|avx2|avx512] SPEC
 *                                   print the C source of every op in SPEC
 *                                   (--dtype: one variant; --cpu: as compiled
 *                                   for one CPU at run time, TK_EMIT_CPU_*)
 *   tkc emit-cuda [--plain|--checked] SPEC print the CUDA C source (--plain: without
 *                                   tiles, windows, hoisting or unrolling;
 *                                   --checked: checked kernels, every index
 *                                   compared to its dim's size, docs/spec.md)
 *   tkc plan [--target cpu|cuda] [--dtype CODE] [--cpu base|avx2|avx512] [--plain] [--checked] SPEC...
 *                                   print what the planner decided for each
 *                                   kernel: tiles, lanes, copies, split
 *                                   reductions, chunks, a thread's elements
 *                                   (--dtype: the variants whose code is CODE,
 *                                   "f32", "f16_i64"...; default every one)
 *   tkc gen-builtin [--plain | --cuda-emu] [--table NAME] [--parts N] -o OUT SPEC...
 *                                   write the built-in kernel table for libtk
 *                                   (--plain: unoptimised kernels named *_plain;
 *                                   --cuda-emu: the CUDA kernels as C++ for
 *                                   tests/c/cuda_emu.h, which runs them on the
 *                                   CPU one thread after another;
 *                                   --table: NAME_specs... instead of tk_builtin_*;
 *                                   --parts N: the kernels go to N files
 *                                   OUT.part0.c ... (OUT.part0.cc ... for
 *                                   OUT.cc; ops balanced by source size, so
 *                                   a parallel build compiles them side by
 *                                   side) and OUT keeps the tables)
 *
 * CUDA kernels (emit-cuda, plan --target cuda, gen-builtin --cuda-emu) take
 * the schedule of TK_CUDA_TUNE (compiler/schedule.c) over the specs' own.
 *
 * Exit status: 0 on success, 1 on a spec error (message on stderr as
 * file:line:col: error: ...), 2 on a usage or I/O error. */
#define _POSIX_C_SOURCE 200809L   /* open_memstream */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

/* TK_CUDA_TUNE, read once by main: the CUDA kernels' schedule */
static tk_schedule g_sched;

#define TKC_MAX_SPEC_BYTES (64 << 20)

/* Reads a whole file of at most TKC_MAX_SPEC_BYTES; NULL (and a message) on error. */
static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "tkc: cannot open %s\n", path);
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *p = malloc(cap);
    while (p) {
        n += fread(p + n, 1, cap - n, f);
        if (n < cap) break;
        if (cap >= TKC_MAX_SPEC_BYTES) {   /* /dev/zero, or not a spec */
            fprintf(stderr, "tkc: %s is larger than %d MiB: not a spec file\n", path, TKC_MAX_SPEC_BYTES >> 20);
            free(p);
            fclose(f);
            return NULL;
        }
        char *q = realloc(p, cap *= 2);
        if (!q) free(p);
        p = q;
    }
    int bad = ferror(f);
    fclose(f);
    if (!p || bad) {
        fprintf(stderr, "tkc: cannot read %s\n", path);
        free(p);
        return NULL;
    }
    p[n < cap ? n : cap - 1] = 0;
    *len = n;
    return p;
}

/* Whether files a and b hold the same bytes (0 when either cannot be read). */
static int same_bytes(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    char x[65536], y[65536];
    while (same) {
        size_t na = fread(x, 1, sizeof x, fa), nb = fread(y, 1, sizeof y, fb);
        if (na != nb || memcmp(x, y, na) != 0) same = 0;
        if (na < sizeof x) break;
    }
    if (same && (ferror(fa) || ferror(fb))) same = 0;
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* Generated files are written to "<path>.tmp" (open_new) and replace path
 * only when their bytes differ (finish_new): the build (ninja's restat)
 * then recompiles no kernel whose source came out the same. */
static FILE *open_new(const char *path, char *tmp, size_t n) {
    if ((size_t)snprintf(tmp, n, "%s.tmp", path) >= n) return NULL;
    return fopen(tmp, "w");
}

/* Closes f (opened by open_new as tmp) and moves it to path unless path
 * already holds the same bytes. 0, or 2 on an I/O error (tmp removed; the
 * error is reported here unless rc already was one). */
static int finish_new(FILE *f, const char *tmp, const char *path, int rc) {
    int failed = rc;
    if (fclose(f) != 0 && rc == 0) rc = 2;
    if (rc == 0 && same_bytes(tmp, path)) return remove(tmp) == 0 ? 0 : 2;
    if (rc == 0 && rename(tmp, path) != 0) rc = 2;
    if (rc && !failed) fprintf(stderr, "tkc: cannot write %s\n", path);
    if (rc) remove(tmp);
    return rc;
}

/* Loads each spec into ctx; keeps the texts for gen-builtin. */
static int load_all(tk_ctx *ctx, int n, char **paths, char **texts) {
    for (int i = 0; i < n; i++) {
        size_t len;
        texts[i] = read_file(paths[i], &len);
        if (!texts[i]) return 2;
        if (tk_load_spec(ctx, paths[i], texts[i], len) != TK_OK) {
            fprintf(stderr, "%s\n", tk_ctx_error(ctx));
            return 1;
        }
    }
    return 0;
}

/* Writes the source of every op; emu: CUDA kernels become static functions
 * (the same names as the CPU kernels they are tested against). */
/* Op op's kernels (variants [first, last)) for target into out; emu: its
 * CUDA kernels static (each emulated file holds its own). Returns 0, 1 on error. */
static int emit_op(tk_ctx *ctx, const tk_op *op, int first, int last, tk_target target, unsigned flags, int emu,
                   FILE *out) {
    static const char head[] = "extern \"C\" __global__ ";
    char *src;
    if (tk_emit_scheduled(ctx, op, first, last, target, flags, &g_sched, &src, NULL) != TK_OK) {
        fprintf(stderr, "%s\n", tk_ctx_error(ctx));
        return 1;
    }
    const char *p = src, *q;
    while (emu && (q = strstr(p, head)) != NULL) {
        fwrite(p, 1, (size_t)(q - p), out);
        fputs("static __global__ ", out);
        p = q + sizeof head - 1;
    }
    fputs(p, out);
    tk_free(src);
    return 0;
}

/* Each emulated CUDA kernel of op behind the CPU kernel type (<kernel>_emu: a
 * launch of the whole index space; static: in the table's own file). */
static int emu_wrappers(tk_ctx *ctx, const tk_op *op, int is_static, FILE *out) {
    for (int v = 0; v < tk_op_nvariants(op); v++) {
        const char *k = tk_op_kernel_name(op, v);
        /* threads as fibers only where they exchange values or meet (warp shuffles, __syncwarp) */
        char *src = NULL;
        if (tk_emit_scheduled(ctx, op, v, v + 1, TK_TARGET_CUDA, 0, &g_sched, &src, NULL) != TK_OK) return 1;
        int fibers = strstr(src, "__shfl") != NULL || strstr(src, "__syncwarp") != NULL;
        free(src);
        fprintf(out, "%svoid %s_emu(const tk_kargs *a, tk_i64 begin, tk_i64 end) "
                     "{ tk_emu_launch(%s, a, begin, end, %d); }\n", is_static ? "static " : "", k, k, fibers);
    }
    return 0;
}

static int emit_all(tk_ctx *ctx, tk_target target, unsigned flags, int emu, const char *dtype, FILE *out) {
    for (int i = 0; i < tk_op_count(ctx); i++) {
        const tk_op *op = tk_op_at(ctx, i);
        int first = 0, last = tk_op_nvariants(op);
        if (dtype) {   /* the variant coded dtype alone */
            while (first < last && strcmp(tk_op_variant_code(op, first), dtype) != 0) first++;
            if (first == last) {
                fprintf(stderr, "tkc: op %s has no variant %s\n", tk_op_name(op), dtype);
                return 1;
            }
            last = first + 1;
        }
        if (emit_op(ctx, op, first, last, target, flags, emu, out)) return 1;
    }
    return 0;
}

static void put_c_string(FILE *out, const char *s) {
    fputs("    \"", out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '\n') fputs(s[1] ? "\\n\"\n    \"" : "\\n", out);
        else if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
        else if (c < 32 || c >= 127) fprintf(out, "\\%03o", c);
        else fputc(c, out);
    }
    fputs("\"", out);
}

/* The name of part k of OUT: "gen/tkv_opt.c" -> "gen/tkv_opt.part2.c",
 * "gen/tkv_cuda.cc" -> "gen/tkv_cuda.part2.cc". */
static char *part_path(const char *outpath, int k) {
    size_t len = strlen(outpath);
    const char *ext = len >= 3 && strcmp(outpath + len - 3, ".cc") == 0 ? ".cc" : ".c";
    if (len >= strlen(ext) && strcmp(outpath + len - strlen(ext), ext) == 0) len -= strlen(ext);
    char *p = malloc(len + 32);
    if (p) snprintf(p, len + 32, "%.*s.part%d%s", (int)len, outpath, k, ext);
    return p;
}

/* Op op's source for a part: its C kernels, or (emu) its emulated CUDA
 * kernels and their launch wrappers. NULL on error (ctx's, printed). */
static char *part_source(tk_ctx *ctx, const tk_op *op, unsigned flags, int emu) {
    char *src = NULL;
    if (!emu) {
        if (tk_emit_ex(ctx, op, TK_TARGET_C, flags, &src) != TK_OK) fprintf(stderr, "%s\n", tk_ctx_error(ctx));
        return src;
    }
    size_t n = 0;
    FILE *f = open_memstream(&src, &n);
    if (!f) return NULL;
    int rc = emit_op(ctx, op, 0, tk_op_nvariants(op), TK_TARGET_CUDA, flags, 1, f) ||
             emu_wrappers(ctx, op, 0, f);
    if (fclose(f) != 0 || rc) {
        free(src);
        return NULL;
    }
    return src;   /* (tk_free is free) */
}

/* Writes the C kernels (emu: the emulated CUDA kernels and their wrappers)
 * of every op into nparts files next to outpath: each op goes whole to the
 * part with the least source so far, largest op first (the compile time
 * follows the source size). Part files left by an earlier run with more
 * parts are not removed; the build names its own. */
static int write_parts(tk_ctx *ctx, unsigned flags, int emu, const char *outpath, int nparts) {
    int nops = tk_op_count(ctx), rc = 0, written = 0;
    char **src = calloc((size_t)nops + 1, sizeof *src);
    int *part = calloc((size_t)nops + 1, sizeof *part);
    size_t *len = calloc((size_t)nops + 1, sizeof *len), *load = calloc((size_t)nparts, sizeof *load);
    if (!src || !part || !len || !load) rc = 2;
    for (int i = 0; i < nops && rc == 0; i++) {
        src[i] = part_source(ctx, tk_op_at(ctx, i), flags, emu);
        if (!src[i]) rc = 1;
        else len[i] = strlen(src[i]);
    }
    for (int done = 0; done < nops && rc == 0; done++) {
        int big = -1;                   /* the largest op not yet placed */
        for (int i = 0; i < nops; i++)
            if (part[i] == 0 && (big < 0 || len[i] > len[big])) big = i;
        int least = 0;
        for (int k = 1; k < nparts; k++)
            if (load[k] < load[least]) least = k;
        part[big] = least + 1;
        load[least] += len[big];
    }
    for (int k = 0; k < nparts && rc == 0; k++) {
        char *path = part_path(outpath, k), tmp[4096];
        FILE *f = path ? open_new(path, tmp, sizeof tmp) : NULL;
        if (!f) {
            fprintf(stderr, "tkc: cannot write %s\n", path ? path : outpath);
            rc = 2;
        } else {
            const char *base = strrchr(outpath, '/');
            fprintf(f, "/* Generated by tkc gen-builtin: part %d of %d of the kernels of %s. Do not edit. */\n"
                       "#include \"%s\"\n", k, nparts, base ? base + 1 : outpath, emu ? "cuda_emu.h" : "tk.h");
            for (int i = 0; i < nops; i++)
                if (part[i] == k + 1) fputs(src[i], f);
            written++;
            rc = finish_new(f, tmp, path, rc);
        }
        free(path);
    }
    for (int k = 0; k < written && rc; k++) {   /* none left half written */
        char *path = part_path(outpath, k);
        if (path) remove(path);
        free(path);
    }
    for (int i = 0; i < nops && src; i++) tk_free(src[i]);
    free(src);
    free(part);
    free(len);
    free(load);
    return rc;
}

/* What the table's entry for a kernel calls: the kernel itself, its plain
 * form, or the launch wrapper of its emulated CUDA kernel. */
static const char *kernel_suffix(unsigned flags, int emu) {
    return emu ? "_emu" : flags & TK_EMIT_PLAIN ? "_plain" : "";
}

static int gen_builtin(tk_ctx *ctx, int n, char **paths, char **texts, unsigned flags, int emu,
                       const char *table, const char *outpath, int nparts, FILE *out) {
    const char *ext = emu ? "extern \"C\" " : "";
    if (emu)
        fputs("/* Generated by tkc gen-builtin --cuda-emu: CUDA kernels run on the CPU. Do not edit. */\n"
              "#include \"cuda_emu.h\"\n", out);
    else
        fputs("/* Generated by tkc gen-builtin: the built-in ops of libtk. Do not edit. */\n"
              "#include \"tk.h\"\n", out);
    int rc;
    if (nparts > 0) {   /* the kernels (emu: their wrappers) are in the parts: declare them here */
        rc = write_parts(ctx, flags, emu, outpath, nparts);
        for (int i = 0; i < tk_op_count(ctx) && rc == 0; i++)
            for (int v = 0; v < tk_op_nvariants(tk_op_at(ctx, i)); v++)
                fprintf(out, "void %s%s(const tk_kargs *a, tk_i64 begin, tk_i64 end);\n",
                        tk_op_kernel_name(tk_op_at(ctx, i), v), kernel_suffix(flags, emu));
    } else {
        rc = emit_all(ctx, emu ? TK_TARGET_CUDA : TK_TARGET_C, flags, emu, NULL, out);
        for (int i = 0; i < tk_op_count(ctx) && emu && rc == 0; i++) rc = emu_wrappers(ctx, tk_op_at(ctx, i), 1, out);
    }
    if (rc) return rc;
    fprintf(out, "\n%sconst tk_builtin_spec %s_specs[] = {\n", ext, table);
    for (int i = 0; i < n; i++) {
        fprintf(out, "    {\"%s\",\n", paths[i]);
        put_c_string(out, texts[i]);
        fputs("},\n", out);
    }
    fprintf(out, "};\n%sconst int %s_nspecs = %d;\n\n", ext, table, n);
    fprintf(out, "%sconst tk_builtin_kernel %s_kernels[] = {\n", ext, table);
    int nk = 0;
    for (int i = 0; i < tk_op_count(ctx); i++)
        for (int v = 0; v < tk_op_nvariants(tk_op_at(ctx, i)); v++, nk++) {
            const char *k = tk_op_kernel_name(tk_op_at(ctx, i), v);
            /* (an emulated CUDA kernel in parts takes kargs.nparts as a CPU kernel in parts does) */
            int parts = emu ? tk_emit_cuda_parts(ctx, tk_op_at(ctx, i), v, &g_sched, NULL, NULL) > 1
                            : tk_emit_cpu_parts(ctx, tk_op_at(ctx, i), v, flags);
            fprintf(out, "    {\"%s\", %s%s, %d},\n", k, k, kernel_suffix(flags, emu), parts);
        }
    fprintf(out, "};\n%sconst int %s_nkernels = %d;\n", ext, table, nk);
    return 0;
}

/* Prints the plan of every variant (or those coded `dtype`) of every op. */
static int plan_all(tk_ctx *ctx, tk_target target, unsigned flags, const char *dtype) {
    for (int i = 0; i < tk_op_count(ctx); i++) {
        const tk_op *op = tk_op_at(ctx, i);
        int shown = 0;
        for (int v = 0; v < tk_op_nvariants(op); v++) {
            if (dtype && strcmp(tk_op_variant_code(op, v), dtype) != 0) continue;
            char *text = NULL;
            if (tk_plan_text(ctx, op, v, target, flags, &g_sched, &text) != TK_OK) {
                fprintf(stderr, "%s\n", tk_ctx_error(ctx));
                return 1;
            }
            fputs(text, stdout);
            tk_free(text);
            shown++;
        }
        if (!shown) {
            fprintf(stderr, "tkc: op %s has no variant %s; its variants:", tk_op_name(op), dtype);
            for (int v = 0; v < tk_op_nvariants(op); v++) fprintf(stderr, " %s", tk_op_variant_code(op, v));
            fputs("\n", stderr);
            return 1;
        }
    }
    return 0;
}

static int usage(void) {
    fputs("usage: tkc check SPEC... | derived SPEC... | emit-c [--plain|--checked] [--dtype CODE] [--cpu base|avx2|avx512] SPEC... |\n"
          "       emit-cuda [--plain|--checked] [--dtype CODE] SPEC... |\n"
          "       plan [--target cpu|cuda] [--dtype CODE] [--cpu base|avx2|avx512] [--plain] [--checked] SPEC... |\n"
          "       gen-builtin [--plain | --cuda-emu] [--table NAME] [--parts N] -o OUT SPEC...\n", stderr);
    return 2;
}

/* The emission flag of `--cpu NAME` (tk.h, TK_EMIT_CPU_*); 0 if unknown. */
static unsigned cpu_flag(const char *name) {
    return !strcmp(name, "base") ? TK_EMIT_CPU_BASE : !strcmp(name, "avx2") ? TK_EMIT_CPU_AVX2
         : !strcmp(name, "avx512") ? TK_EMIT_CPU_AVX512 : 0;
}

int main(int argc, char **argv) {
    if (argc < 3) return usage();
    const char *cmd = argv[1], *outpath = NULL, *table = "tk_builtin";
    unsigned flags = 0;
    int first = 2, emu = 0, nparts = 0;
    tk_target target = TK_TARGET_C;
    const char *dtype = NULL;
    char bad[512];
    if (tk_schedule_from_env(&g_sched, bad, sizeof bad) != TK_OK) {
        fprintf(stderr, "tkc: %s\n", bad);
        return 2;
    }
    if (strcmp(cmd, "plan") == 0) {
        for (; first < argc && argv[first][0] == '-'; first++) {
            if (strcmp(argv[first], "--plain") == 0) flags |= TK_EMIT_PLAIN;
            else if (strcmp(argv[first], "--checked") == 0) flags |= TK_EMIT_CHECKED;
            else if (strcmp(argv[first], "--target") == 0 && first + 1 < argc) {
                const char *tg = argv[++first];
                if (strcmp(tg, "cpu") == 0) target = TK_TARGET_C;
                else if (strcmp(tg, "cuda") == 0) target = TK_TARGET_CUDA;
                else return usage();
            } else if (strcmp(argv[first], "--dtype") == 0 && first + 1 < argc) dtype = argv[++first];
            else if (strcmp(argv[first], "--cpu") == 0 && first + 1 < argc && cpu_flag(argv[first + 1]))
                flags |= cpu_flag(argv[++first]);
            else return usage();
        }
        if (first >= argc) return usage();
    } else if (strcmp(cmd, "gen-builtin") == 0) {
        for (; first < argc && argv[first][0] == '-'; first++) {
            if (strcmp(argv[first], "--plain") == 0) flags |= TK_EMIT_PLAIN;
            else if (strcmp(argv[first], "--cuda-emu") == 0) emu = 1;
            else if (strcmp(argv[first], "--table") == 0 && first + 1 < argc) table = argv[++first];
            else if (strcmp(argv[first], "-o") == 0 && first + 1 < argc) outpath = argv[++first];
            else if (strcmp(argv[first], "--parts") == 0 && first + 1 < argc) {
                char *end;
                long v = strtol(argv[++first], &end, 10);
                if (*end || v < 1 || v > 64) return usage();
                nparts = (int)v;
            } else return usage();
        }
        if (!outpath || first >= argc || (emu && flags)) return usage();
    } else if (strcmp(cmd, "check") && strcmp(cmd, "derived") && strcmp(cmd, "emit-c") && strcmp(cmd, "emit-cuda")) {
        return usage();
    } else if (strcmp(cmd, "check") && strcmp(cmd, "derived")) {   /* emit-c, emit-cuda */
        for (; first < argc && argv[first][0] == '-'; first++) {
            if (strcmp(argv[first], "--plain") == 0) flags |= TK_EMIT_PLAIN;
            else if (strcmp(argv[first], "--checked") == 0) flags |= TK_EMIT_CHECKED;
            else if (strcmp(argv[first], "--dtype") == 0 && first + 1 < argc) dtype = argv[++first];
            else if (strcmp(argv[first], "--cpu") == 0 && first + 1 < argc && cpu_flag(argv[first + 1]) &&
                     strcmp(cmd, "emit-c") == 0)
                flags |= cpu_flag(argv[++first]);
            else return usage();
        }
        if (first >= argc) return usage();
    }
    int n = argc - first;
    tk_ctx *ctx = tk_ctx_new();
    char **texts = calloc((size_t)n, sizeof *texts);
    if (!ctx || !texts) return 2;
    int rc = load_all(ctx, n, argv + first, texts);
    /* check and gen-builtin see every spec: backward clauses must link */
    if (rc == 0 && strcmp(cmd, "emit-c") && strcmp(cmd, "emit-cuda") && strcmp(cmd, "plan") &&
        tk_ctx_link(ctx) != TK_OK) {
        fprintf(stderr, "%s\n", tk_ctx_error(ctx));
        rc = 1;
    }
    if (rc == 0) {
        if (strcmp(cmd, "plan") == 0) {
            rc = plan_all(ctx, target, flags, dtype);
        } else if (strcmp(cmd, "check") == 0) {
            for (int i = 0; i < tk_op_count(ctx); i++) printf("tk::%s\n", tk_op_schema(tk_op_at(ctx, i)));
        } else if (strcmp(cmd, "derived") == 0) {
            for (int i = 0; i < tk_op_count(ctx); i++)
                if (tk_op_at(ctx, i)->decl->derived_from) printf("%s\n", tk_op_at(ctx, i)->decl->text);
        } else if (outpath) {
            char tmp[4096];
            FILE *out = open_new(outpath, tmp, sizeof tmp);
            if (!out) {
                fprintf(stderr, "tkc: cannot write %s\n", outpath);
                rc = 2;
            } else {
                rc = gen_builtin(ctx, n, argv + first, texts, flags, emu, table, outpath, nparts, out);
                rc = finish_new(out, tmp, outpath, rc);
            }
        } else {
            rc = emit_all(ctx, strcmp(cmd, "emit-c") == 0 ? TK_TARGET_C : TK_TARGET_CUDA, flags, 0, dtype, stdout);
        }
    }
    for (int i = 0; i < n; i++) free(texts[i]);
    free(texts);
    tk_ctx_free(ctx);
    return rc;
}
