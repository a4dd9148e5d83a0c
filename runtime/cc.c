/* cc.c - CPU kernels of run-time specs: emit C, compile it with the system
 * C compiler into a cached shared object, dlopen it, attach the kernels
 * (tk_cc.h). The compiler runs through posix_spawnp with its output
 * captured; nothing here calls system() or exits. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core.h"
#include "sha256.h"
#include "tk_cc.h"
#include "tk_cuda.h"
#include "msg.h"

extern char **environ;

#define MAX_ARGS 64         /* words of the compiler command + ours */
#define OUTPUT_MAX 16384    /* bytes of compiler output kept for a message */

/* as the built-in kernels (CMakeLists.txt, TK_KERNEL_FLAGS) */
static const char *const k_flags[] = {"-O3", "-fwrapv", "-fopenmp-simd", "-ffp-contract=fast", "-fno-math-errno", "-shared", "-fPIC",
                                      "-std=c11"};
#if defined(__x86_64__)
static const char *const k_native_flags[] = {"-march=native", "-DTK_NO_CLONES", "-mprefer-vector-width=512"};
#else
static const char *const k_native_flags[] = {"-march=native", "-DTK_NO_CLONES"};
#endif
#define NFLAGS ((int)(sizeof k_flags / sizeof k_flags[0]))
#define NNATIVE ((int)(sizeof k_native_flags / sizeof k_native_flags[0]))

struct tk_cc {
    char command[1024];         /* as configured: "cc", "ccache gcc" */
    char *words[MAX_ARGS];      /* command split at blanks (into command_words) */
    int nwords;
    char command_words[1024];
    char cache_dir[4096];       /* "" when off */
    char cpu[160];              /* this CPU ("" if unknown: portable flags) */
    int debug;
    pthread_mutex_t lock;       /* identity, warned */
    int identity_state;         /* 0 not asked, 1 known, -1 failed */
    char identity[256];         /* first line of `command --version` */
    char identity_error[1024];
    int warned;                 /* the cache-off warning was printed */
};

/* snprintf that says whether the text fit (paths must not be cut short). */
static int fmt(char *out, size_t n, const char *f, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static int fmt(char *out, size_t n, const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    int w = vsnprintf(out, n, f, ap);
    va_end(ap);
    return w >= 0 && (size_t)w < n;
}

/* ---- the compiler command -------------------------------------------------- */

/* Splits cc->command at blanks into cc->words. */
static void split_command(tk_cc *cc) {
    fmt(cc->command_words, sizeof cc->command_words, "%s", cc->command);
    cc->nwords = 0;
    for (char *p = cc->command_words; *p && cc->nwords < MAX_ARGS - 16;) {
        while (*p == ' ' || *p == '\t') *p++ = 0;
        if (!*p) break;
        cc->words[cc->nwords++] = p;
        while (*p && *p != ' ' && *p != '\t') p++;
    }
}

static const char *env_nonempty(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* This CPU as /proc/cpuinfo names it: model and a hash of its feature
 * flags ("" when unreadable). Kernels built with -march=native are keyed by
 * it, so a cache folder shared between machines never hands one machine
 * another's instructions. */
static void cpu_identity(char *out, size_t n) {
    out[0] = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[8192], model[96] = "", flags[TK_SHA256_SIZE * 2 + 1] = "";
    while (fgets(line, sizeof line, f) && (!model[0] || !flags[0])) {
        char *colon = strchr(line, ':');
        if (!colon) continue;
        const char *value = colon + 1 + (colon[1] == ' ');
        if (!model[0] && (strncmp(line, "model name", 10) == 0 || strncmp(line, "CPU part", 8) == 0)) {
            fmt(model, sizeof model, "%.*s", (int)strcspn(value, "\n"), value);
        } else if (!flags[0] && (strncmp(line, "flags", 5) == 0 || strncmp(line, "Features", 8) == 0)) {
            unsigned char digest[TK_SHA256_SIZE];
            tk_sha256_of(value, strlen(value), digest);
            tk_sha256_hex(digest, flags);
        }
    }
    fclose(f);
    if (flags[0]) fmt(out, n, "%s | %.16s", model, flags);
}

tk_cc *tk_cc_new(const tk_cc_options *opt) {
    tk_cc *cc = calloc(1, sizeof *cc);
    if (!cc) return NULL;
    const char *command = opt && opt->compiler ? opt->compiler : NULL;
    if (!command) command = env_nonempty("TK_CC");
    if (!command) command = env_nonempty("CC");
    fmt(cc->command, sizeof cc->command, "%s", command ? command : "cc");
    split_command(cc);
    int fits = 1;
    if (opt && opt->cache_dir) {
        fits = fmt(cc->cache_dir, sizeof cc->cache_dir, "%s", opt->cache_dir);
    } else {
        char base[4000];
        if (tk_cache_default_dir(base, sizeof base)) fits = fmt(cc->cache_dir, sizeof cc->cache_dir, "%s/cpu", base);
    }
    if (!fits) cc->cache_dir[0] = 0;   /* a path that long: no disk cache */
    cpu_identity(cc->cpu, sizeof cc->cpu);
    const char *dbg = getenv("TK_DEBUG");
    cc->debug = opt && opt->debug >= 0 ? opt->debug : (dbg && *dbg && strcmp(dbg, "0") != 0);
    pthread_mutex_init(&cc->lock, NULL);
    return cc;
}

void tk_cc_lock(tk_cc *cc) {
    if (cc) pthread_mutex_lock(&cc->lock);
}

void tk_cc_unlock(tk_cc *cc) {
    if (cc) pthread_mutex_unlock(&cc->lock);
}

void tk_cc_free(tk_cc *cc) {
    if (!cc) return;
    pthread_mutex_destroy(&cc->lock);
    free(cc);
}

const char *tk_cc_compiler(const tk_cc *cc) { return cc ? cc->command : ""; }
const char *tk_cc_cache_dir(const tk_cc *cc) { return cc ? cc->cache_dir : ""; }

/* ---- running a program ------------------------------------------------------- */

/* Runs argv (searched on PATH) with stdin from /dev/null, stdout and stderr
 * into out (NUL-terminated, truncated to n). Returns the exit status (128 +
 * signal when killed), or -1 with errno when it could not be started. */
static int run(char *const *argv, char *out, size_t n) {
    int fds[2];
    out[0] = 0;
    if (pipe2(fds, O_CLOEXEC) != 0) return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    pid_t pid;
    int err = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (err != 0) {
        close(fds[0]);
        errno = err;
        return -1;
    }
    size_t len = 0;
    char chunk[4096];
    for (;;) {
        ssize_t r = read(fds[0], chunk, sizeof chunk);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        size_t take = (size_t)r < n - 1 - len ? (size_t)r : n - 1 - len;
        memcpy(out + len, chunk, take);
        len += take;
    }
    out[len] = 0;
    close(fds[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return 0;   /* SIGCHLD ignored: no status to read */
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
}

/* What a command that could not start means to the user. */
static void no_compiler(const tk_cc *cc, int err, char *msg, size_t n) {
    tk_put(msg, n, "tk: no C compiler: '%s' could not be run (%s). Run-time specs need one for their CPU "
        "kernels: install gcc or clang, or set TK_CC to a C compiler", cc->command, strerror(err));
}

/* The first line of `command --version`, asked once per tk_cc. 0 (and msg)
 * when the compiler cannot be run. */
static int identity(tk_cc *cc, char *msg, size_t n) {
    pthread_mutex_lock(&cc->lock);
    if (cc->identity_state == 0) {
        char *argv[MAX_ARGS], out[4096];
        int k = 0;
        for (int i = 0; i < cc->nwords; i++) argv[k++] = cc->words[i];
        argv[k++] = "--version";
        argv[k] = NULL;
        int rc = cc->nwords ? run(argv, out, sizeof out) : (errno = ENOENT, -1);
        if (rc < 0) {
            no_compiler(cc, errno, cc->identity_error, sizeof cc->identity_error);
            cc->identity_state = -1;
        } else if (rc != 0) {
            fmt(cc->identity_error, sizeof cc->identity_error,
                     "tk: no C compiler: '%s --version' failed (exit status %d): %.600s", cc->command, rc, out);
            cc->identity_state = -1;
        } else {
            out[strcspn(out, "\n")] = 0;
            fmt(cc->identity, sizeof cc->identity, "%s", out);
            cc->identity_state = 1;
        }
    }
    int ok = cc->identity_state == 1;
    if (!ok) tk_put(msg, n, "%s", cc->identity_error);
    pthread_mutex_unlock(&cc->lock);
    return ok;
}

/* ---- files ------------------------------------------------------------------- */

/* mkdir -p; 0 on failure (errno set). */
static int make_dirs(const char *path) {
    char p[4096];
    fmt(p, sizeof p, "%s", path);
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s) continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) return 0;
        *s = c;
        if (!c) break;
    }
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int write_file(const char *path, const char *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = fwrite(data, 1, len, f) == len;
    return (fclose(f) == 0) && ok;
}

/* A fresh private folder for one compile: in the cache folder when it can be
 * written, else under $TMPDIR or /tmp (the cache is then off for this call).
 * 0 and msg when neither works. */
static int make_build_dir(tk_cc *cc, char *out, size_t n, int *in_cache, char *msg, size_t msglen) {
    *in_cache = 0;
    if (cc->cache_dir[0]) {
        if (make_dirs(cc->cache_dir)) {
            fmt(out, n, "%s/tmp-XXXXXX", cc->cache_dir);
            if (mkdtemp(out)) {
                *in_cache = 1;
                return 1;
            }
        }
        int err = errno;
        pthread_mutex_lock(&cc->lock);
        int first = !cc->warned;
        cc->warned = 1;
        pthread_mutex_unlock(&cc->lock);
        if (first)
            fprintf(stderr, "tk: warning: cannot write the CPU kernel cache %s (%s); compiling in a temporary "
                    "folder instead (set TK_CACHE_DIR)\n", cc->cache_dir, strerror(err));
    }
    const char *tmp = env_nonempty("TMPDIR");
    fmt(out, n, "%s/tk-cc-XXXXXX", tmp ? tmp : "/tmp");
    if (mkdtemp(out)) return 1;
    tk_put(msg, msglen, "tk: cannot make a folder to compile in (%s: %s)", out, strerror(errno));
    return 0;
}

/* Removes the build folder's known files and the folder. */
static void remove_build_dir(const char *dir, const char *hex) {
    char p[4200];
    const char *names[] = {"tk_kernel.h", ".c", ".so"};
    for (int i = 0; i < 3; i++) {
        if (names[i][0] == '.') fmt(p, sizeof p, "%s/%s%s", dir, hex, names[i]);
        else fmt(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
}

/* ---- the compile ---------------------------------------------------------------- */

/* TK_EMIT_CPU_* for kernels compiled with -march=native on this CPU: the
 * bodies such a compile keeps (tk_kernel.h: TK_VXW with AVX-512F, TK_VXH
 * with AVX2 and FMA). 0 (every body) without the native flags. */
unsigned tk_cc_emit_flags(const tk_cc *cc) {
    if (!cc) return 0;
    if (!cc->cpu[0]) return 0;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (__builtin_cpu_supports("avx512f")) return TK_EMIT_CPU_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return TK_EMIT_CPU_AVX2;
#endif
    return TK_EMIT_CPU_BASE;
}

/* The C of every variant of ops[0..nops) as cc compiles it, malloc'd; NULL
 * and msg on error. */
static char *emit_all(const tk_cc *cc, tk_ctx *ctx, tk_op *const *ops, int nops, char *msg, size_t n) {
    tk_buf b = {0};
    for (int i = 0; i < nops; i++) {
        char *src = NULL;
        if (tk_emit_ex(ctx, ops[i], TK_TARGET_C, tk_cc_emit_flags(cc), &src) != TK_OK) {
            tk_put(msg, n, "tk: generating C for %s failed: %s", tk_op_name(ops[i]), tk_ctx_error(ctx));
            free(b.p);
            return NULL;
        }
        tk_buf_puts(&b, src);
        free(src);
    }
    if (b.oom || !b.p) {
        free(b.p);
        tk_put(msg, n, "tk: out of memory");
        return NULL;
    }
    return b.p;
}

/* The cache key of src compiled by cc, as 64 hex digits. */
static void key_of(const tk_cc *cc, const char *src, char hex[2 * TK_SHA256_SIZE + 1]) {
    tk_sha256 s;
    tk_sha256_init(&s);
    const char *parts[] = {"tk-cpu-kernels", TK_VERSION, cc->identity, TK_CC_FLAGS,
                           cc->cpu[0] ? TK_CC_NATIVE_FLAGS : "", cc->cpu, tk_kernel_header(), src};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) tk_sha256_update(&s, parts[i], strlen(parts[i]) + 1);
    unsigned char key[TK_SHA256_SIZE];
    tk_sha256_final(&s, key);
    tk_sha256_hex(key, hex);
}

/* "op a, b" for messages. */
static void op_names(tk_op *const *ops, int nops, char *out, size_t n) {
    size_t len = 0;
    out[0] = 0;
    for (int i = 0; i < nops && len + 1 < n; i++) {
        fmt(out + len, n - len, "%s%s", i ? ", " : "", tk_op_name(ops[i]));
        len += strlen(out + len);
    }
}

/* Compiles src into build/<hex>.so. */
static tk_status compile_file(tk_cc *cc, const char *build, const char *hex, const char *src, const char *what,
                              char *msg, size_t n) {
    char cpath[4200], sopath[4200], hpath[4200];
    fmt(cpath, sizeof cpath, "%s/%s.c", build, hex);
    fmt(sopath, sizeof sopath, "%s/%s.so", build, hex);
    fmt(hpath, sizeof hpath, "%s/tk_kernel.h", build);
    const char *header = tk_kernel_header();
    if (!write_file(hpath, header, strlen(header)) || !write_file(cpath, src, strlen(src))) {
        tk_put(msg, n, "tk: cannot write %s: %s", cpath, strerror(errno));
        return TK_ERR_COMPILE;
    }
    char *argv[MAX_ARGS];
    int k = 0;
    for (int i = 0; i < cc->nwords; i++) argv[k++] = cc->words[i];
    for (int i = 0; i < NFLAGS; i++) argv[k++] = (char *)k_flags[i];
    for (int i = 0; cc->cpu[0] && i < NNATIVE; i++) argv[k++] = (char *)k_native_flags[i];
    argv[k++] = "-o";
    argv[k++] = sopath;
    argv[k++] = cpath;
    argv[k++] = "-lm";
    argv[k] = NULL;
    if (cc->debug) {
        fprintf(stderr, "tk: compiling the CPU kernels of %s:", what);
        for (int i = 0; i < k; i++) fprintf(stderr, " %s", argv[i]);
        fprintf(stderr, "\n---- %s.c ----\n%s---- end of %s.c ----\n", hex, src, hex);
    }
    char *out = malloc(OUTPUT_MAX);
    if (!out) {
        tk_put(msg, n, "tk: out of memory");
        return TK_ERR_NOMEM;
    }
    int rc = run(argv, out, OUTPUT_MAX);
    tk_status st = TK_OK;
    if (rc < 0) {
        no_compiler(cc, errno, msg, n);
        st = TK_ERR_NOTFOUND;
    } else if (rc != 0) {
        tk_put(msg, n, "tk: compiling the CPU kernels of %s failed (%s, exit status %d; TK_DEBUG=1 prints the "
            "source):\n%s", what, cc->command, rc, out);
        st = TK_ERR_COMPILE;
    }
    free(out);
    return st;
}

/* Which kernels a compiled file holds: every variant of ops[0..nops) when
 * variant < 0, else that variant of ops[0] (nops is 1). */
typedef struct kernel_set {
    tk_op *const *ops;
    int nops;
    int variant;
} kernel_set;

/* dlopens path and attaches the kernels of set (all of them found, or
 * none attached); on failure msg says why. */
static tk_status load_kernels(const char *path, const kernel_set *set, char *msg, size_t n) {
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        tk_put(msg, n, "tk: cannot load the compiled kernels %s: %s", path, e ? e : "unknown error");
        return TK_ERR_COMPILE;
    }
    for (int pass = 0; pass < 2; pass++)   /* look every kernel up, then attach them */
        for (int i = 0; i < set->nops; i++) {
            int all = set->variant < 0, first = all ? 0 : set->variant;
            int last = all ? tk_op_nvariants(set->ops[i]) : set->variant + 1;
            for (int v = first; v < last; v++) {
                tk_cpu_fn fn;
                *(void **)&fn = dlsym(lib, tk_op_kernel_name(set->ops[i], v));
                if (!fn) {
                    tk_put(msg, n, "tk: %s has no kernel %s", path, tk_op_kernel_name(set->ops[i], v));
                    return TK_ERR_COMPILE;   /* lib stays loaded: harmless */
                }
                if (!pass) continue;
                /* a kernel that runs its row loop in parts is marked <kernel>_parts (emit_cpu.c) */
                char mark[300];
                fmt(mark, sizeof mark, "%s_parts", tk_op_kernel_name(set->ops[i], v));
                tk_op_set_cpu_parts(set->ops[i], v, dlsym(lib, mark) ? fn : NULL);
                tk_op_set_cpu_kernel(set->ops[i], v, fn);
            }
        }
    return TK_OK;
}

/* Builds <hex>.so and loads it: moved into the cache when the build folder is
 * in it, else loaded from the private folder. */
static tk_status build_and_load(tk_cc *cc, const char *src, const char *hex, const char *what,
                                const kernel_set *set, char *msg, size_t n) {
    char build[4200], sopath[4300], final[4300];   /* cache_dir < 4096 bytes: these fit */
    int in_cache;
    if (!make_build_dir(cc, build, sizeof build, &in_cache, msg, n)) return TK_ERR_COMPILE;
    tk_status st = compile_file(cc, build, hex, src, what, msg, n);
    fmt(sopath, sizeof sopath, "%s/%s.so", build, hex);
    fmt(final, sizeof final, "%s/%s.so", cc->cache_dir, hex);
    if (st == TK_OK && in_cache && rename(sopath, final) != 0) in_cache = 0;
    if (st == TK_OK) st = load_kernels(in_cache ? final : sopath, set, msg, n);
    if (st == TK_OK && cc->debug && in_cache) fprintf(stderr, "tk: cached %s\n", final);
    remove_build_dir(build, hex);   /* a loaded file may be unlinked */
    return st;
}

/* Loads the kernels of set from the cache entry of src, else compiles src
 * into it (or into a private folder) and loads them from there. The
 * compiler's identity is known (identity() succeeded). what names the
 * kernels in messages. */
static tk_status compile_source(tk_cc *cc, const char *src, const char *what, const kernel_set *set, char *msg,
                                size_t msglen) {
    char hex[2 * TK_SHA256_SIZE + 1], cached[4300];
    key_of(cc, src, hex);
    tk_status st = TK_ERR_NOTFOUND;
    if (cc->cache_dir[0]) {
        fmt(cached, sizeof cached, "%s/%s.so", cc->cache_dir, hex);
        if (access(cached, R_OK) == 0) {
            st = load_kernels(cached, set, msg, msglen);
            if (cc->debug)
                fprintf(stderr, "tk: CPU kernels of %s: %s %s\n", what, st == TK_OK ? "from the cache" : "rebuilding:",
                        st == TK_OK ? cached : msg);
        }
    }
    if (st != TK_OK) st = build_and_load(cc, src, hex, what, set, msg, msglen);
    return st;
}

tk_status tk_cc_check(tk_cc *cc, char *msg, size_t msglen) {
    if (msg && msglen) msg[0] = 0;
    if (!cc) return TK_ERR_INVALID;
    return identity(cc, msg, msglen) ? TK_OK : TK_ERR_NOTFOUND;
}

tk_status tk_cc_compile(tk_cc *cc, tk_ctx *ctx, tk_op *const *ops, int nops, char *msg, size_t msglen) {
    if (msg && msglen) msg[0] = 0;
    if (!cc || !ctx || (!ops && nops) || nops < 0) return TK_ERR_INVALID;
    if (nops == 0) return TK_OK;
    char what[512];
    op_names(ops, nops, what, sizeof what);
    if (!identity(cc, msg, msglen)) return TK_ERR_NOTFOUND;
    char *src = emit_all(cc, ctx, ops, nops, msg, msglen);
    if (!src) return TK_ERR_COMPILE;
    kernel_set set = {ops, nops, -1};
    tk_status st = compile_source(cc, src, what, &set, msg, msglen);
    free(src);
    return st;
}

tk_status tk_cc_compile_variant_source(tk_cc *cc, tk_op *op, int variant, const char *src, char *msg,
                                       size_t msglen) {
    if (msg && msglen) msg[0] = 0;
    if (!cc || !op || !src || variant < 0 || variant >= tk_op_nvariants(op)) return TK_ERR_INVALID;
    char what[512];
    fmt(what, sizeof what, "%s (%s)", tk_op_name(op), tk_op_variant_code(op, variant));
    if (!identity(cc, msg, msglen)) return TK_ERR_NOTFOUND;
    kernel_set set = {&op, 1, variant};
    return compile_source(cc, src, what, &set, msg, msglen);
}

tk_status tk_cc_compile_variant(tk_cc *cc, tk_ctx *ctx, tk_op *op, int variant, char *msg, size_t msglen) {
    if (msg && msglen) msg[0] = 0;
    if (!cc || !ctx || !op || variant < 0 || variant >= tk_op_nvariants(op)) return TK_ERR_INVALID;
    char *src = NULL;
    if (tk_emit_scheduled(ctx, op, variant, variant + 1, TK_TARGET_C, tk_cc_emit_flags(cc), NULL, &src, NULL) !=
        TK_OK) {
        tk_put(msg, msglen, "tk: generating C for %s (%s) failed: %s", tk_op_name(op),
               tk_op_variant_code(op, variant), tk_ctx_error(ctx));
        return TK_ERR_COMPILE;
    }
    tk_status st = tk_cc_compile_variant_source(cc, op, variant, src, msg, msglen);
    free(src);
    return st;
}

tk_status tk_cc_load_spec(tk_cc *cc, tk_ctx *ctx, const char *file, const char *text, size_t len, char *msg,
                          size_t msglen) {
    if (msg && msglen) msg[0] = 0;
    if (!cc || !ctx) return TK_ERR_INVALID;
    int first = tk_op_count(ctx);
    tk_status st = tk_load_spec(ctx, file, text, len);
    if (st == TK_OK) st = tk_ctx_link(ctx);
    if (st != TK_OK) {
        tk_put(msg, msglen, "%s", tk_ctx_error(ctx));
        return st;
    }
    int nops = tk_op_count(ctx) - first;
    tk_op **ops = calloc((size_t)(nops > 0 ? nops : 1), sizeof *ops);
    if (!ops) return TK_ERR_NOMEM;
    for (int i = 0; i < nops; i++) ops[i] = (tk_op *)tk_op_at(ctx, first + i);
    st = tk_cc_compile(cc, ctx, ops, nops, msg, msglen);
    free(ops);
    return st;
}
