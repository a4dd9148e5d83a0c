/* test_nvrtc.c - the GPU path without a GPU: every op x variant in ops/ is
 * compiled by NVRTC to a cubin for sm_80 and sm_90; the kernel cache's
 * round trip and its rejection of corrupted, truncated and other-version
 * files; an unwritable cache folder; the errors a machine without the
 * driver or NVRTC gives. NVRTC must be there (`make setup` installs
 * nvidia-cuda-nvrtc): a missing NVRTC fails this test, it does not skip.
 * With $TK_TEST_FAKE_DRIVER naming fake_cuda.c's library (CTest sets it),
 * the launcher runs against that stand-in driver: concurrent first calls
 * load one module, each device gets its own, launch shape and arguments.
 * Usage: test_nvrtc OPS_DIR TESTS_DIR [NVRTC_DIR...] */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sha256.h"
#include "tk.h"
#include "tk_cuda.h"
#include "tk_test.h"

static const char *const *g_dirs;   /* NVRTC folders from the command line */
static int g_ndirs;

/* ---- helpers ---------------------------------------------------------------- */

/* Loads every ops/NAME.tk into one context (a backward may live in another file). */
static tk_ctx *load_ops(const char *ops_dir) {
    tk_ctx *ctx = tk_ctx_new();
    DIR *d = opendir(ops_dir);
    CHECK(d != NULL);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        size_t n = strlen(de->d_name);
        if (n < 4 || strcmp(de->d_name + n - 3, ".tk") != 0) continue;
        size_t len;
        char *text = read_spec(ops_dir, de->d_name, &len), file[512];
        snprintf(file, sizeof file, "ops/%s", de->d_name);
        int st = text ? (int)tk_load_spec(ctx, file, text, len) : (int)TK_ERR_NOTFOUND;
        if (st != TK_OK) fprintf(stderr, "%s: %s\n", file, tk_ctx_error(ctx));
        CHECK(st == TK_OK);
        free(text);
    }
    if (d) closedir(d);
    return ctx;
}

static int contains(const char *s, const char *part) { return s && strstr(s, part) != NULL; }

static char *make_temp_dir(void) {
    char tmpl[] = "/tmp/tk_test_nvrtc_XXXXXX";
    char *d = mkdtemp(tmpl);
    CHECK(d != NULL);
    return d ? strdup(d) : strdup("/tmp");
}

static void remove_tree(const char *dir) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* Flips one byte of the file at offset. */
static void flip_byte(const char *path, long offset) {
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (!f) return;
    fseek(f, offset, SEEK_SET);
    int c = fgetc(f);
    fseek(f, offset, SEEK_SET);
    fputc(c ^ 0x5a, f);
    fclose(f);
}

/* ---- SHA-256 and launch shape ------------------------------------------------ */

static void test_sha256(void) {
    static const struct { const char *in, *hex; } v[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    char hex[65];
    unsigned char d[32];
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        tk_sha256_of(v[i].in, strlen(v[i].in), d);
        tk_sha256_hex(d, hex);
        CHECK(strcmp(hex, v[i].hex) == 0);
    }
    /* one million 'a', fed in uneven pieces */
    tk_sha256 s;
    tk_sha256_init(&s);
    char a[1000];
    memset(a, 'a', sizeof a);
    for (size_t done = 0, step = 1; done < 1000000; done += step, step = step % 997 + 1)
        tk_sha256_update(&s, a, done + step > 1000000 ? 1000000 - done : step);
    tk_sha256_final(&s, d);
    tk_sha256_hex(d, hex);
    CHECK(strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0);
}

static void test_grid_size(void) {
    CHECK(tk_cuda_grid_size(0, 256, 132) == 0);
    CHECK(tk_cuda_grid_size(-5, 256, 132) == 0);
    CHECK(tk_cuda_grid_size(5, 0, 132) == 0);
    CHECK(tk_cuda_grid_size(1, 256, 132) == 1);
    CHECK(tk_cuda_grid_size(256, 256, 132) == 1);
    CHECK(tk_cuda_grid_size(257, 256, 132) == 2);
    CHECK(tk_cuda_grid_size(257, 64, 132) == 5);
    CHECK(tk_cuda_grid_size((int64_t)1 << 40, 256, 132) == 132 * 32);   /* capped: grid-stride loop */
    CHECK(tk_cuda_grid_size(34080256, 256, 132) == 132 * 32);
    /* 256 threads a block while that gives >= 4 blocks per SM, else halved
     * down to 64: a small grid spreads over every SM */
    CHECK(tk_cuda_block_size(294912, 132) == 256);            /* rwkv_forward B=32 C=768 T=768: 1152 blocks */
    CHECK(tk_cuda_block_size(4 * 132 * 256, 132) == 256);
    CHECK(tk_cuda_block_size(4 * 132 * 256 - 256, 132) == 128);
    CHECK(tk_cuda_block_size(73728, 132) == 128);             /* 288 blocks of 256 on 132 SMs: 576 of 128 */
    CHECK(tk_cuda_block_size(36864, 132) == 64);              /* rwkv_backward_w C=768 T=768, 16 lanes */
    CHECK(tk_cuda_block_size(1, 132) == 64 && tk_cuda_block_size(1, 0) == 64);
    CHECK(tk_cuda_block_size(0, 132) == 256);                 /* (no launch) */
    /* with the kernel's occupancy (blocks of 256, 128, 64 an SM holds): the
     * size no larger than that which keeps the most threads resident */
    const int bw[3] = {1, 3, 6}, fwd[3] = {2, 4, 8}, big[3] = {0, 3, 6}, none[3] = {0, 0, 0}, odd[3] = {1, 3, 7};
    CHECK(tk_cuda_block_size_occ(294912, 132, bw) == 128);    /* 168 registers: 384 threads, not 256 */
    CHECK(tk_cuda_block_size_occ(294912, 132, fwd) == 256);   /* 128 registers: 512 threads at any size */
    CHECK(tk_cuda_block_size_occ(294912, 132, big) == 128);   /* 256 does not fit */
    CHECK(tk_cuda_block_size_occ(294912, 132, odd) == 64);
    CHECK(tk_cuda_block_size_occ(294912, 132, none) == 256 && tk_cuda_block_size_occ(294912, 132, NULL) == 256);
    CHECK(tk_cuda_block_size_occ(36864, 132, fwd) == 64);     /* few blocks: never larger than without */
    CHECK(tk_cuda_block_size_occ(73728, 132, bw) == 128 && tk_cuda_block_size_occ(73728, 132, odd) == 64);
}

/* ---- NVRTC --------------------------------------------------------------------- */

static tk_nvrtc *open_nvrtc(void) {
    char msg[4096] = "";
    tk_nvrtc *nv = NULL;
    tk_status st = tk_nvrtc_open(g_dirs, g_ndirs, &nv, msg, sizeof msg);
    if (st != TK_OK) fprintf(stderr, "NVRTC is required for this test (make setup installs it): %s\n", msg);
    CHECK(st == TK_OK);
    if (nv) printf("NVRTC %d.%d from %s\n", tk_nvrtc_version(nv) / 1000, tk_nvrtc_version(nv) % 1000 / 10,
                   tk_nvrtc_path(nv));
    return nv;
}

/* Whether the len bytes at p contain the NUL-terminated string s. */
static int has_bytes(const void *p, size_t len, const char *s) {
    size_t n = strlen(s) + 1;
    for (const char *q = p, *end = q + len; q + n <= end; q++)
        if (memcmp(q, s, n) == 0) return 1;
    return 0;
}

/* One op's program for one arch (a thread: the two archs compile at once). */
typedef struct arch_job {
    tk_nvrtc *nv;
    const tk_op *op;
    const char *src;
    int sm;
    tk_binary bin;
    int ok, kernels;
} arch_job;

static void *compile_arch(void *p) {
    arch_job *j = p;
    char msg[16384] = "", name[160];
    tk_arch arch;
    CHECK(tk_nvrtc_arch_for(j->nv, j->sm, &arch, msg, sizeof msg) == TK_OK);
    CHECK(arch.sm == j->sm && !arch.ptx);
    snprintf(name, sizeof name, "tk_%s.cu", tk_op_name(j->op));
    tk_status st = tk_nvrtc_compile(j->nv, j->src, name, arch, &j->bin, msg, sizeof msg);
    if (st != TK_OK) fprintf(stderr, "%s for sm_%d:\n%s\n", name, j->sm, msg);
    CHECK(st == TK_OK);
    if (st != TK_OK) return NULL;
    j->ok = 1;
    CHECK(j->bin.size > 64 && !j->bin.is_ptx && memcmp(j->bin.data, "\177ELF", 4) == 0);
    for (int v = 0; v < tk_op_nvariants(j->op); v++, j->kernels++)
        if (!has_bytes(j->bin.data, j->bin.size, tk_op_kernel_name(j->op, v))) {
            fprintf(stderr, "%s: no %s in the sm_%d cubin\n", name, tk_op_kernel_name(j->op, v), j->sm);
            CHECK(0);
        }
    return NULL;
}

/* Whether op is one this run compiles: TK_TEST_NVRTC_ONLY=brick_pad, the
 * ops whose name starts so (the sanitizer build: NVRTC's work is the same
 * as in the plain build, which compiles every op, and ASan's allocator
 * makes it 2.5x slower); unset, every op. */
static int compiled_here(const tk_op *op) {
    const char *only = getenv("TK_TEST_NVRTC_ONLY");
    return !only || !only[0] || strncmp(tk_op_name(op), only, strlen(only)) == 0;
}

/* Every op's every variant compiles to an ELF cubin for sm_80 and sm_90:
 * one NVRTC program per op and arch holding all its variants (tk_emit), the
 * cubin must define every kernel. Returns one cubin for the cache tests. */
static tk_binary test_compile_all(tk_nvrtc *nv, tk_ctx *ctx) {
    tk_binary keep = {0};
    static const int sms[] = {80, 90};
    int kernels = 0;
    const char *only = getenv("TK_TEST_NVRTC_ONLY");
    for (int i = 0; i < tk_op_count(ctx); i++) {
        const tk_op *op = tk_op_at(ctx, i);
        if (!compiled_here(op)) continue;
        char *src = NULL;
        CHECK(tk_emit(ctx, op, TK_TARGET_CUDA, &src) == TK_OK);
        if (!src) continue;
        arch_job jobs[2];
        pthread_t th[2];
        for (int a = 0; a < 2; a++) {
            memset(&jobs[a], 0, sizeof jobs[a]);
            jobs[a].nv = nv;
            jobs[a].op = op;
            jobs[a].src = src;
            jobs[a].sm = sms[a];
            CHECK(pthread_create(&th[a], NULL, compile_arch, &jobs[a]) == 0);
        }
        for (int a = 0; a < 2; a++) {
            pthread_join(th[a], NULL);
            kernels += jobs[a].kernels;
            if (!jobs[a].ok) continue;
            tk_binary_free(&keep);
            keep = jobs[a].bin;
        }
        tk_free(src);
    }
    printf("compiled %d kernels (every op%s%s x variant x sm_80, sm_90)\n", kernels, only && only[0] ? " named " : "",
           only && only[0] ? only : "");
    if (only && only[0]) CHECK(kernels >= 2 * 10);   /* brick_pad's 10 dtypes at least */
    else CHECK(kernels >= 2 * 14);       /* brick_pad 10 dtypes + rwkv_forward 4, at least */
    return keep;
}

/* The spec maths that CUDA spells differently from C (<math.h> functions by
 * float type, the literal inf, Python's float //, rand's Philox) compile under NVRTC,
 * float and double. */
static void test_compile_maths(tk_nvrtc *nv) {
    static const char spec[] =
        "op maths(x: float32|float64[N], k: int[N]) -> y: x.dtype[N]:\n"
        "    for i in y:\n"
        "        a = sin(x[i]) + cos(x[i]) + tan(x[i]) + asin(x[i]) + acos(x[i]) + atan(x[i]) + atan2(x[i], k[i])\n"
        "        b = sinh(x[i]) + cosh(x[i]) + erf(x[i]) + erfc(x[i]) + log1p(x[i]) + expm1(x[i])\n"
        "        c = rand(k[i], i) + randn(k[i], i + 1)\n"
        "        y[i] = max(a + b + c + log2(x[i]) + log10(x[i]) + x[i] // 0.5, -inf) if x[i] < inf else inf\n";
    tk_ctx *ctx = tk_ctx_new();
    int loaded = ctx && tk_load_spec(ctx, "maths.tk", spec, sizeof spec - 1) == TK_OK;
    if (ctx && !loaded) fprintf(stderr, "maths.tk: %s\n", tk_ctx_error(ctx));
    CHECK(loaded);
    const tk_op *op = loaded ? tk_op_find(ctx, "maths") : NULL;
    char *src = NULL;
    CHECK(op && tk_emit(ctx, op, TK_TARGET_CUDA, &src) == TK_OK && src);
    CHECK(contains(src, "sinf(") && contains(src, "atan2(") && contains(src, "TK_INFF") && contains(src, "(-TK_INF)") &&
          contains(src, "tk_randf(") && contains(src, "tk_randn("));
    arch_job job;
    memset(&job, 0, sizeof job);
    job.nv = nv;
    job.op = op;
    job.src = src;
    job.sm = 80;
    if (src) compile_arch(&job);
    CHECK(job.ok && job.kernels == tk_op_nvariants(op) && job.kernels >= 2);
    tk_binary_free(&job.bin);
    tk_free(src);
    tk_ctx_free(ctx);
}

/* A compile error quotes NVRTC's log and the generated line it points at. */
static void test_compile_error(tk_nvrtc *nv) {
    const char *src = "#include \"tk_kernel.h\"\n"
                      "extern \"C\" __global__ void k(const tk_kargs a) {\n"
                      "    tk_i64 x = a.numel + undefined_name_here;\n"
                      "}\n";
    char msg[8192] = "";
    tk_binary bin;
    tk_arch arch = {90, 0};
    CHECK(tk_nvrtc_compile(nv, src, "broken.cu", arch, &bin, msg, sizeof msg) == TK_ERR_CHECK);
    CHECK(contains(msg, "failed to compile broken.cu for sm_90"));
    CHECK(contains(msg, "broken.cu(3)"));
    CHECK(contains(msg, "undefined_name_here"));
    CHECK(contains(msg, "broken.cu line 3: tk_i64 x = a.numel + undefined_name_here;"));
    if (!contains(msg, "line 3:")) fprintf(stderr, "message was:\n%s\n", msg);
}

/* An arch NVRTC does not know gets PTX for the newest one below it. */
static void test_arch_choice(tk_nvrtc *nv) {
    tk_arch arch;
    char msg[512];
    CHECK(tk_nvrtc_arch_for(nv, 990, &arch, msg, sizeof msg) == TK_OK);
    CHECK(arch.ptx && arch.sm < 990 && arch.sm >= 90);
    CHECK(tk_nvrtc_arch_for(nv, 10, &arch, msg, sizeof msg) == TK_ERR_NOTFOUND);
    CHECK(contains(msg, "cannot compile for sm_10"));
    /* PTX output compiles too */
    const char *src = "#include \"tk_kernel.h\"\nextern \"C\" __global__ void k(const tk_kargs a) {}\n";
    tk_binary bin;
    tk_arch ptx = {80, 1};
    CHECK(tk_nvrtc_compile(nv, src, "k.cu", ptx, &bin, msg, sizeof msg) == TK_OK);
    CHECK(bin.is_ptx && contains((const char *)bin.data, ".target sm_80"));
    tk_binary_free(&bin);
}

/* ---- the cache ------------------------------------------------------------------ */

static void test_cache_files(const tk_binary *cubin, int version) {
    char *dir = make_temp_dir(), path[4096], msg[1024];
    unsigned char key[TK_CACHE_KEY_SIZE], key2[TK_CACHE_KEY_SIZE];
    const char *opts[TK_NVRTC_MAX_OPTIONS];
    char buf[32];
    tk_arch arch = {90, 0};
    int nopts = tk_nvrtc_options(arch, buf, opts);
    tk_cache_key("source", version, arch, opts, nopts, key);
    tk_cache_key("source", version + 10, arch, opts, nopts, key2);
    CHECK(memcmp(key, key2, sizeof key) != 0);          /* NVRTC version is in the key */
    tk_cache_key("source ", version, arch, opts, nopts, key2);
    CHECK(memcmp(key, key2, sizeof key) != 0);
    tk_arch a80 = {80, 0};
    tk_cache_key("source", version, a80, opts, nopts, key2);
    CHECK(memcmp(key, key2, sizeof key) != 0);
    tk_cache_key("source", version, arch, opts, nopts - 1, key2);
    CHECK(memcmp(key, key2, sizeof key) != 0);

    tk_binary got;
    CHECK(tk_cache_load(dir, key, version, &got, msg, sizeof msg) == TK_ERR_NOTFOUND && msg[0] == 0);
    CHECK(tk_cache_store(dir, key, version, "tk_test__f32 sm_90", cubin, msg, sizeof msg) == TK_OK);
    CHECK(tk_cache_path(dir, key, path, sizeof path));
    CHECK(file_size(path) == (long)(160 + cubin->size));
    /* round trip: identical bytes */
    CHECK(tk_cache_load(dir, key, version, &got, msg, sizeof msg) == TK_OK);
    CHECK(got.size == cubin->size && memcmp(got.data, cubin->data, got.size) == 0 && !got.is_ptx);
    tk_binary_free(&got);
    /* another NVRTC version's file is not used */
    CHECK(tk_cache_load(dir, key, version + 10, &got, msg, sizeof msg) == TK_ERR_NOTFOUND);
    CHECK(contains(msg, "another NVRTC version"));
    /* corrupted payload */
    flip_byte(path, 160 + (long)cubin->size / 2);
    CHECK(tk_cache_load(dir, key, version, &got, msg, sizeof msg) == TK_ERR_NOTFOUND);
    CHECK(contains(msg, "checksum"));
    /* corrupted header */
    CHECK(tk_cache_store(dir, key, version, "x", cubin, msg, sizeof msg) == TK_OK);
    flip_byte(path, 20);
    CHECK(tk_cache_load(dir, key, version, &got, msg, sizeof msg) == TK_ERR_NOTFOUND);
    CHECK(contains(msg, "key differs"));
    flip_byte(path, 2);
    CHECK(tk_cache_load(dir, key, version, &got, msg, sizeof msg) == TK_ERR_NOTFOUND);
    CHECK(contains(msg, "not a tk cache file"));
    /* truncated payload, truncated header */
    CHECK(tk_cache_store(dir, key, version, "x", cubin, msg, sizeof msg) == TK_OK);
    CHECK(truncate(path, 160 + (long)cubin->size - 7) == 0);
    CHECK(tk_cache_load(dir, key, version, &got, msg, sizeof msg) == TK_ERR_NOTFOUND);
    CHECK(contains(msg, "truncated"));
    CHECK(truncate(path, 100) == 0);
    CHECK(tk_cache_load(dir, key, version, &got, msg, sizeof msg) == TK_ERR_NOTFOUND);
    CHECK(contains(msg, "truncated header"));
    /* an unwritable folder (below a regular file: holds for root too) */
    char bad[4200];
    snprintf(bad, sizeof bad, "%s/sub", path);
    CHECK(tk_cache_store(bad, key, version, "x", cubin, msg, sizeof msg) != TK_OK);
    CHECK(contains(msg, "cannot create the cache folder"));
    /* no temporary files are left behind */
    CHECK(tk_cache_store(dir, key, version, "tk_test__f32 sm_90", cubin, msg, sizeof msg) == TK_OK);
    DIR *d = opendir(dir);
    int files = 0, temps = 0;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' && (de->d_name[1] == 0 || de->d_name[1] == '.')) continue;
        files++;
        temps += strncmp(de->d_name, ".tmp", 4) == 0;
    }
    if (d) closedir(d);
    CHECK(files == 1 && temps == 0);
    CHECK(tk_cache_list(dir, NULL, NULL) == 1);
    remove_tree(dir);
    free(dir);
}

/* tk_cuda_precompile: a miss compiles and stores, a hit loads, a damaged
 * file is recompiled and replaced; an unwritable folder still compiles
 * (brick_pad_backward: a small op; a cache entry lives alike for any). */
static void test_precompile(tk_ctx *ctx) {
    char *dir = make_temp_dir(), msg[8192];
    tk_cuda_options opt = {g_dirs, g_ndirs, dir, NULL, 0};
    tk_cuda *cu = tk_cuda_new(&opt);
    const tk_op *op = tk_op_find(ctx, "brick_pad_backward");
    CHECK(cu && op);
    if (!cu || !op) return;
    int cached = -1;
    CHECK(tk_cuda_precompile(cu, ctx, op, 0, 90, &cached, msg, sizeof msg) == TK_OK && cached == 0);
    CHECK(tk_cuda_precompile(cu, ctx, op, 0, 90, &cached, msg, sizeof msg) == TK_OK && cached == 1);
    CHECK(tk_cuda_precompile(cu, ctx, op, 0, 80, &cached, msg, sizeof msg) == TK_OK && cached == 0);
    CHECK(tk_cache_list(dir, NULL, NULL) == 2);
    /* damage every file: each is rejected, recompiled, and replaced */
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.') continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        flip_byte(path, file_size(path) - 3);
    }
    if (d) closedir(d);
    CHECK(tk_cuda_precompile(cu, ctx, op, 0, 90, &cached, msg, sizeof msg) == TK_OK && cached == 0);
    CHECK(tk_cuda_precompile(cu, ctx, op, 0, 90, &cached, msg, sizeof msg) == TK_OK && cached == 1);
    char info[8192];
    tk_cuda_describe(cu, info, sizeof info);
    CHECK(contains(info, "nvrtc: ") && contains(info, "(NVRTC "));
    CHECK(contains(info, dir) && contains(info, "cached kernels: 2"));
    CHECK(contains(info, "tk_brick_pad_backward__"));
    tk_cuda_free(cu);

    char bad[4200];
    snprintf(bad, sizeof bad, "%s/not_a_dir", dir);
    FILE *f = fopen(bad, "w");
    if (f) fclose(f);
    snprintf(bad, sizeof bad, "%s/not_a_dir/tk", dir);
    tk_cuda_options opt2 = {g_dirs, g_ndirs, bad, NULL, 0};
    cu = tk_cuda_new(&opt2);
    CHECK(tk_cuda_precompile(cu, ctx, op, 0, 90, &cached, msg, sizeof msg) != TK_OK);
    CHECK(contains(msg, "compiled for sm_90, but the disk cache is off"));
    tk_cuda_free(cu);
    remove_tree(dir);
    free(dir);
}

typedef struct thread_arg {
    tk_cuda *cu;
    tk_ctx *ctx;
    int failures;
} thread_arg;

static void *precompile_all(void *p) {
    thread_arg *t = p;
    char msg[8192];
    for (int i = 0; i < tk_op_count(t->ctx); i++)
        if (compiled_here(tk_op_at(t->ctx, i)) &&
            tk_cuda_precompile(t->cu, t->ctx, tk_op_at(t->ctx, i), 0, 90, NULL, msg, sizeof msg) != TK_OK) {
            fprintf(stderr, "%s\n", msg);
            t->failures++;
        }
    return NULL;
}

/* Several threads compiling the same kernels at once into one folder
 * (emitting is serialised inside; files are written atomically): variant
 * 0 of each op compiled here. */
static void test_threads(tk_ctx *ctx) {
    char *dir = make_temp_dir();
    tk_cuda_options opt = {g_dirs, g_ndirs, dir, NULL, 0};
    tk_cuda *cu = tk_cuda_new(&opt);
    pthread_t th[3];
    thread_arg args[3];
    for (int i = 0; i < 3; i++) {
        args[i] = (thread_arg){cu, ctx, 0};
        CHECK(pthread_create(&th[i], NULL, precompile_all, &args[i]) == 0);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        CHECK(args[i].failures == 0);
    }
    int ops = 0;
    for (int i = 0; i < tk_op_count(ctx); i++) ops += compiled_here(tk_op_at(ctx, i));
    CHECK(ops >= 2 && tk_cache_list(dir, NULL, NULL) == ops);   /* one file per kernel, no temporaries */
    tk_cuda_free(cu);
    remove_tree(dir);
    free(dir);
}

/* ---- machines without CUDA -------------------------------------------------------- */

/* A bound brick_pad call whose tensors claim to be on cuda:0. */
static int cuda_call(tk_ctx *ctx, tk_call *call) {
    const tk_op *op = tk_op_find(ctx, "brick_pad");
    static float fake[64];
    int64_t tsz[2] = {4, 4}, tst[2] = {4, 1};
    tk_tensor_view tile = tk_view(fake, TK_F32, 2, tsz, tst);
    tile.device = TK_CUDA;
    tk_arg args[6] = {tk_arg_tensor(tile), tk_arg_int(1), tk_arg_int(1), tk_arg_int(1), tk_arg_none(), tk_arg_none()};
    if (!op || tk_bind(op, args, 6, call) != TK_OK) return 0;
    int64_t osz[2] = {6, 6}, ost[2] = {6, 1};
    tk_tensor_view out = tk_view(fake, TK_F32, 2, osz, ost);
    out.device = TK_CUDA;
    return tk_set_output(call, 0, out) == TK_OK;
}

static void test_no_driver(tk_ctx *ctx) {
    tk_call call;
    CHECK(cuda_call(ctx, &call));
    char msg[4096];
    tk_cuda_options opt = {g_dirs, g_ndirs, "", "/nonexistent/libcuda.so.1", 0};
    tk_cuda *cu = tk_cuda_new(&opt);
    CHECK(tk_cuda_launch(cu, ctx, &call, NULL, msg, sizeof msg) == TK_ERR_NOTFOUND);
    CHECK(contains(msg, "tk.brick_pad: cannot run on cuda:0: /nonexistent/libcuda.so.1 not found"));
    CHECK(contains(msg, "NVIDIA driver"));
    printf("without a driver: %s\n", msg);
    /* the second call says the same, without retrying */
    CHECK(tk_cuda_launch(cu, ctx, &call, NULL, msg, sizeof msg) == TK_ERR_NOTFOUND);
    CHECK(contains(msg, "not found"));
    char info[4096];
    tk_cuda_describe(cu, info, sizeof info);
    CHECK(contains(info, "driver: not available") && contains(info, "cache: off"));
    /* an empty index space launches nothing and needs nothing */
    call.kargs.numel = 0;
    CHECK(tk_cuda_launch(cu, ctx, &call, NULL, msg, sizeof msg) == TK_OK);
    /* a CPU call is refused */
    call.device = TK_CPU;
    CHECK(tk_cuda_launch(cu, ctx, &call, NULL, msg, sizeof msg) == TK_ERR_INVALID);
    /* so is one with an optional tensor passed as None whose row is not attached (tk_set_fill) */
    static const char *opt_spec = "op nvrtc_opt(x: float32[N], b: float32[N]? = 1) -> y: float32[N]:\n"
                                  "    for i in y:\n        y[i] = x[i] + b[i]\n";
    tk_ctx *octx = tk_ctx_new();
    CHECK(tk_load_spec(octx, "opt.tk", opt_spec, strlen(opt_spec)) == TK_OK);
    static float dev[8];   /* (never read: no driver) */
    int64_t n = 8, one = 1;
    tk_tensor_view xv = tk_view(dev, TK_F32, 1, &n, &one);
    xv.device = TK_CUDA;
    tk_arg args[2] = {tk_arg_tensor(xv), tk_arg_none()};
    tk_call oc;
    CHECK(tk_bind(tk_op_find(octx, "nvrtc_opt"), args, 2, &oc) == TK_OK);
    CHECK(tk_cuda_launch(cu, octx, &oc, NULL, msg, sizeof msg) == TK_ERR_INVALID);
    CHECK(contains(msg, "tk.nvrtc_opt: argument 'b' is None, and the memory of its default is not attached"));
    CHECK(tk_set_fill(&oc, 1, dev) == TK_OK && tk_cuda_launch(cu, octx, &oc, NULL, msg, sizeof msg) == TK_ERR_NOTFOUND);
    tk_ctx_free(octx);
    tk_cuda_free(cu);

    /* this machine's own libcuda, when it has none (CI) */
    void *real = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (real) {
        dlclose(real);
        return;
    }
    CHECK(cuda_call(ctx, &call));
    cu = tk_cuda_new(NULL);
    CHECK(tk_cuda_launch(cu, ctx, &call, NULL, msg, sizeof msg) == TK_ERR_NOTFOUND);
    CHECK(contains(msg, "tk.brick_pad: cannot run on cuda:0: libcuda.so.1 not found"));
    tk_cuda_free(cu);
}

static void test_no_nvrtc(tk_ctx *ctx) {
    const char *old = getenv("TK_NVRTC_PATH");
    char *saved = old ? strdup(old) : NULL;
    setenv("TK_NVRTC_PATH", "/nonexistent/libnvrtc.so.13", 1);
    char msg[4096];
    tk_nvrtc *nv = NULL;
    CHECK(tk_nvrtc_open(g_dirs, g_ndirs, &nv, msg, sizeof msg) == TK_ERR_NOTFOUND && nv == NULL);
    CHECK(contains(msg, "libnvrtc.so not found (TK_NVRTC_PATH=/nonexistent/libnvrtc.so.13"));
    tk_cuda_options opt = {g_dirs, g_ndirs, "", NULL, 0};
    tk_cuda *cu = tk_cuda_new(&opt);
    CHECK(tk_cuda_precompile(cu, ctx, tk_op_at(ctx, 0), 0, 90, NULL, msg, sizeof msg) == TK_ERR_NOTFOUND);
    CHECK(contains(msg, "cannot compile for sm_90: libnvrtc.so not found"));
    char info[4096];
    tk_cuda_describe(cu, info, sizeof info);
    CHECK(contains(info, "nvrtc: not available: libnvrtc.so not found"));
    tk_cuda_free(cu);
    /* a folder without NVRTC, no override: the message lists what was searched */
    unsetenv("TK_NVRTC_PATH");
    const char *none[] = {"/nonexistent/nvidia/cu13/lib"};
    if (tk_nvrtc_open(none, 1, &nv, msg, sizeof msg) != TK_OK) {
        CHECK(contains(msg, "searched: /nonexistent/nvidia/cu13/lib (no such folder)"));
        CHECK(contains(msg, "install nvidia-cuda-nvrtc or set TK_NVRTC_PATH"));
    } else {
        tk_nvrtc_close(nv);     /* the system has one: only the override case applies */
    }
    if (saved) setenv("TK_NVRTC_PATH", saved, 1);
    free(saved);
}


/* ---- the launcher, against fake_cuda.c ------------------------------------------- */

typedef struct fake_stats {     /* fake_cuda.c's fake_cuda_stats */
    int inits, module_loads, launches, pushes, pops, retains;
    int loads_per_device[2];
    unsigned last_grid, last_block;
    void *last_stream;
    tk_kargs last_kargs;
    char last_function[128];
} fake_stats;

/* rwkv_forward on (fake) device memory of cuda:dev: w (C, T), k (B, C, T). */
static int rwkv_call(tk_ctx *ctx, int dev, int64_t B, int64_t C, int64_t T, tk_call *call) {
    static float fake[1];
    int64_t wsz[2] = {C, T}, wst[2] = {T, 1}, ksz[3] = {B, C, T}, kst[3] = {C * T, T, 1};
    tk_tensor_view w = tk_view(fake, TK_F32, 2, wsz, wst), k = tk_view(fake, TK_F32, 3, ksz, kst);
    w.device = k.device = TK_CUDA;
    w.device_index = k.device_index = dev;
    tk_arg args[3] = {tk_arg_tensor(w), tk_arg_tensor(k), tk_arg_float(0.1)};
    if (tk_bind(tk_op_find(ctx, "rwkv_forward"), args, 3, call) != TK_OK) return 0;
    tk_tensor_view out = k;
    return tk_set_output(call, 0, out) == TK_OK;
}

/* rwkv_backward_w on (fake) device memory of cuda:dev: k, grad_out (B, C, T). */
static int backward_w_call(tk_ctx *ctx, int dev, int64_t B, int64_t C, int64_t T, tk_call *call) {
    static float fake[1];
    int64_t ksz[3] = {B, C, T}, kst[3] = {C * T, T, 1}, wsz[2] = {C, T}, wst[2] = {T, 1};
    tk_tensor_view k = tk_view(fake, TK_F32, 3, ksz, kst), w = tk_view(fake, TK_F32, 2, wsz, wst);
    k.device = w.device = TK_CUDA;
    k.device_index = w.device_index = dev;
    tk_arg args[2] = {tk_arg_tensor(k), tk_arg_tensor(k)};
    if (tk_bind(tk_op_find(ctx, "rwkv_backward_w"), args, 2, call) != TK_OK) return 0;
    return tk_set_output(call, 0, w) == TK_OK;
}

typedef struct launcher {
    tk_cuda *cu;
    tk_ctx *ctx;
    const tk_call *call;
    pthread_barrier_t *start;
    int failures;
} launcher;

static void *launch_once(void *p) {
    launcher *l = p;
    char msg[4096];
    pthread_barrier_wait(l->start);
    if (tk_cuda_launch(l->cu, l->ctx, l->call, (void *)0x5157, msg, sizeof msg) != TK_OK) {
        fprintf(stderr, "%s\n", msg);
        l->failures++;
    }
    return NULL;
}

/* A kernel with bounds checks (a checked op) gets a zeroed record in device
 * memory (NVRTC compiled its device-side tk_ck); a record the kernel filled
 * (the fake driver's stand-in) becomes the call's error, naming the access. */
static void test_fake_bounds(tk_cuda *cu, tk_ctx *ctx, void *lib, fake_stats *st) {
    static const char *peek = "op peek(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i] + x[i + 1]\n";
    char msg[4096];
    tk_status ls = tk_load_spec(ctx, "peek.tk", peek, strlen(peek));
    if (ls != TK_OK) fprintf(stderr, "%s\n", tk_ctx_error(ctx));
    CHECK(ls == TK_OK);
    tk_op *op = tk_op_find_mut(ctx, "peek");
    if (!op) return;
    tk_op_set_checked(op, 1);
    static float fake[1];
    int64_t n = 8, one = 1;
    tk_tensor_view x = tk_view(fake, TK_F32, 1, &n, &one);
    x.device = TK_CUDA;
    tk_arg a = tk_arg_tensor(x);
    tk_call call;
    CHECK(tk_bind(op, &a, 1, &call) == TK_OK);
    CHECK(tk_set_output(&call, 0, x) == TK_OK);
    int launches = st->launches;
    tk_status rc = tk_cuda_launch(cu, ctx, &call, NULL, msg, sizeof msg);
    if (rc != TK_OK) fprintf(stderr, "%s\n", msg);
    CHECK(rc == TK_OK && st->launches == launches + 1);
    CHECK(st->last_kargs.err != NULL && call.kargs.err == NULL);
    void (*fail)(tk_kerr) = NULL;
    *(void **)&fail = dlsym(lib, "fake_cuda_fail_check");
    CHECK(fail != NULL);
    if (!fail) return;
    fail((tk_kerr){1, 3, 23, 0, 8, 8});   /* slot 0 (x), a read, dim 0 */
    CHECK(tk_cuda_launch(cu, ctx, &call, NULL, msg, sizeof msg) == TK_ERR_BOUNDS);
    CHECK(strcmp(msg, "tk.peek: peek.tk:3:23: read x[8] out of range: dim 0 (N) has size 8 (the read gave 0)") == 0);
    /* an unchecked kernel gets no record */
    CHECK(rwkv_call(ctx, 0, 2, 3, 5, &call));
    CHECK(tk_cuda_launch(cu, ctx, &call, NULL, msg, sizeof msg) == TK_OK && st->last_kargs.err == NULL);
}

/* Sums on CUDA (docs/gpu.md, Parts): without schedule parts=N an op that
 * adds into a sum from several iterations is refused; with it the kernel
 * runs kargs.nparts threads (one when it is not set), and tk_cuda_parts
 * says which outputs the caller copies and whether the threads share a
 * parted loop. */
static void test_fake_parts(tk_cuda *cu, tk_ctx *ctx, fake_stats *st) {
    static const char *spec =
        "op colsum(x: float[R, N]) -> (s: x.dtype[N], t: x.dtype[R, 1]):\n"
        "    for r, _ in t:\n        t[r, 0] = x[r, 0]\n        for i in range(N):\n            s[i] += x[r, i]\n"
        "op colsum_p(x: float[R, N]) -> (s: x.dtype[N], t: x.dtype[R, 1]):\n    schedule parts=64\n"
        "    for r, _ in t:\n        t[r, 0] = x[r, 0]\n        for i in range(N):\n            s[i] += x[r, i]\n"
        "op wsum(x: float[R, N]) -> s: x.dtype[N]:\n    schedule parts=256\n    for _ in s:\n"
        "        for i in range(N):\n            s[i] = 0.0\n        for r in range(R):\n"
        "            for i in range(N):\n                s[i] = s[i] + x[r, i]\n";
    char msg[4096];
    tk_status ls = tk_load_spec(ctx, "parts.tk", spec, strlen(spec));
    if (ls != TK_OK) fprintf(stderr, "%s\n", tk_ctx_error(ctx));
    CHECK(ls == TK_OK);
    if (ls != TK_OK) return;
    static float fake[1];
    int64_t xs[2] = {1000, 8}, xst[2] = {8, 1}, n = 8, one = 1, ts[2] = {1000, 1}, tst[2] = {1, 1};
    tk_tensor_view x = tk_view(fake, TK_F32, 2, xs, xst), s = tk_view(fake, TK_F32, 1, &n, &one);
    tk_tensor_view t = tk_view(fake, TK_F32, 2, ts, tst);
    x.device = s.device = t.device = TK_CUDA;
    tk_arg a = tk_arg_tensor(x);
    const char *names[3] = {"colsum", "colsum_p", "wsum"};
    for (int k = 0; k < 3; k++) {
        tk_call call;
        const tk_op *op = tk_op_find(ctx, names[k]);
        CHECK(op && tk_bind(op, &a, 1, &call) == TK_OK);
        if (!op) continue;
        CHECK(tk_set_output(&call, 0, s) == TK_OK && (k == 2 || tk_set_output(&call, 1, t) == TK_OK));
        int parts = -1, parted = -1;
        unsigned copied = 99;
        CHECK(tk_cuda_parts(cu, ctx, &call, &parts, &copied, &parted, msg, sizeof msg) == TK_OK);
        CHECK(parts == (k == 0 ? 0 : k == 1 ? 64 : 256) && copied == (k == 0 ? 0u : 1u) && parted == (k == 2));
        int launches = st->launches;
        tk_status rc = tk_cuda_launch(cu, ctx, &call, NULL, msg, sizeof msg);
        if (k == 0) {   /* 1000 iterations add into s at once: refused, and says how to run it */
            CHECK(rc == TK_ERR_INVALID && st->launches == launches);
            CHECK(contains(msg, "tk.colsum: a sum ('+=') over 1000 iterations") && contains(msg, "schedule parts=N"));
            continue;
        }
        CHECK(rc == TK_OK && st->last_grid == 1 && st->launches == launches + 1);   /* nparts unset: one thread */
        /* every part gets its thread: the grid is not capped at 32 blocks an SM as a grid-stride
         * kernel's is (a part's thread runs it alone) */
        for (long np = 100; np <= 3000000; np += 2999900) {
            call.kargs.nparts = np;
            CHECK(tk_cuda_launch(cu, ctx, &call, NULL, msg, sizeof msg) == TK_OK);
            CHECK((long)st->last_grid * st->last_block >= np && (long)(st->last_grid - 1) * st->last_block < np);
            CHECK(st->last_kargs.nparts == np);
        }
    }
}

static void test_fake_driver(tk_ctx *ctx, const char *driver) {
    void *lib = dlopen(driver, RTLD_NOW | RTLD_LOCAL);
    CHECK(lib != NULL);
    fake_stats *(*get)(void) = NULL;
    if (lib) *(void **)&get = dlsym(lib, "fake_cuda_stats_get");
    CHECK(get != NULL);
    if (!get) return;
    fake_stats *st = get();
    char *dir = make_temp_dir(), msg[4096];
    tk_cuda_options opt = {g_dirs, g_ndirs, dir, driver, 0};
    tk_cuda *cu = tk_cuda_new(&opt);

    /* 8 threads make the first call of one kernel at once: one module */
    tk_call call;
    CHECK(rwkv_call(ctx, 0, 2, 3, 5, &call));
    enum { N = 8 };
    pthread_t th[N];
    launcher ls[N];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, N);
    for (int i = 0; i < N; i++) {
        ls[i] = (launcher){cu, ctx, &call, &start, 0};
        CHECK(pthread_create(&th[i], NULL, launch_once, &ls[i]) == 0);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        CHECK(ls[i].failures == 0);
    }
    pthread_barrier_destroy(&start);
    CHECK(st->inits == 1 && st->module_loads == 1 && st->loads_per_device[0] == 1);
    CHECK(st->launches == N && st->pushes == st->pops);
    CHECK(st->last_grid == 1 && st->last_block == TK_CUDA_BLOCK_MIN && st->last_stream == (void *)0x5157);
    CHECK(memcmp(&st->last_kargs, &call.kargs, sizeof call.kargs) == 0);   /* tk_kargs by value */
    CHECK(strcmp(st->last_function, "tk_rwkv_forward__f32") == 0);
    CHECK(tk_cache_list(dir, NULL, NULL) == 1);

    /* cuda:1 (sm_80) gets its own module */
    CHECK(rwkv_call(ctx, 1, 32, 768, 768, &call));
    CHECK(tk_cuda_launch(cu, ctx, &call, NULL, msg, sizeof msg) == TK_OK);
    CHECK(st->module_loads == 2 && st->loads_per_device[1] == 1 && st->launches == N + 1);
    CHECK(st->last_grid == 32 * 768 * 768 / 64 / TK_CUDA_BLOCK && st->last_block == TK_CUDA_BLOCK);  /* two tiles a thread */
    CHECK(st->last_stream == NULL);
    CHECK(tk_cache_list(dir, NULL, NULL) == 2);      /* sm_80 and sm_90 cubins */
    /* a mid-sized call: one thread per two tiles of 16 x 2 outputs, not per output */
    CHECK(rwkv_call(ctx, 1, 8, 64, 256, &call));
    CHECK(tk_cuda_launch(cu, ctx, &call, NULL, msg, sizeof msg) == TK_OK);
    CHECK(st->last_grid == 8 * 64 * 256 / 64 / 64 && st->last_block == 64);  /* 2048 threads on 108 SMs: blocks of 64 */
    /* blocks sized by occupancy: rwkv_backward_w (168 registers in the fake
     * driver, 8 threads a tile of 16 by its schedule line, two tiles: C x T / 4 threads)
     * keeps 384 threads an SM in blocks of 128, 256 in blocks of 256 */
    CHECK(backward_w_call(ctx, 0, 32, 768, 768, &call));
    CHECK(tk_cuda_launch(cu, ctx, &call, NULL, msg, sizeof msg) == TK_OK);
    CHECK(strcmp(st->last_function, "tk_rwkv_backward_w__f32") == 0);
    CHECK(st->last_block == 128 && st->last_grid == 768 * 768 / 4 / 128);
    CHECK(rwkv_call(ctx, 1, 8, 64, 256, &call));
    /* one launch per call, no new module; the context is pushed only when not current */
    void (*set_current)(int) = NULL;
    *(void **)&set_current = dlsym(lib, "fake_cuda_set_current");
    CHECK(set_current != NULL);
    if (set_current) set_current(1);
    int pushes = st->pushes;
    CHECK(tk_cuda_launch(cu, ctx, &call, NULL, msg, sizeof msg) == TK_OK);
    CHECK(st->module_loads == 3 && st->launches == N + 4 && st->pushes == pushes);
    if (set_current) set_current(-1);
    /* an empty index space launches nothing */
    CHECK(rwkv_call(ctx, 0, 0, 3, 5, &call));
    CHECK(tk_cuda_launch(cu, ctx, &call, NULL, msg, sizeof msg) == TK_OK && st->launches == N + 4);
    /* a device the driver does not have */
    CHECK(rwkv_call(ctx, 2, 1, 1, 1, &call));
    CHECK(tk_cuda_launch(cu, ctx, &call, NULL, msg, sizeof msg) == TK_ERR_NOTFOUND);
    CHECK(contains(msg, "tk.rwkv_forward: cannot run on cuda:2: no such device (the driver sees 2)"));
    char info[8192];
    tk_cuda_describe(cu, info, sizeof info);
    CHECK(contains(info, "(CUDA 13.0), 2 device(s)") && contains(info, "cuda:0: Fake H200, sm_90, 132 SMs"));
    CHECK(contains(info, "cuda:1: Fake A100, sm_80, 108 SMs"));
    tk_cuda_free(cu);

    /* a new process (state) finds the kernel in the disk cache and loads it */
    cu = tk_cuda_new(&opt);
    CHECK(rwkv_call(ctx, 0, 2, 3, 5, &call));
    CHECK(tk_cuda_launch(cu, ctx, &call, NULL, msg, sizeof msg) == TK_OK);
    CHECK(st->module_loads == 4 && tk_cache_list(dir, NULL, NULL) == 3);
    test_fake_bounds(cu, ctx, lib, st);
    test_fake_parts(cu, ctx, st);
    printf("fake driver: %d launches, %d modules loaded, %d context pushes\n", st->launches, st->module_loads,
           st->pushes);
    tk_cuda_free(cu);
    remove_tree(dir);
    free(dir);
    dlclose(lib);
}

/* The variant of op whose kernel is named tk_<op>__<code>, -1 if none. */
static int variant_of(const tk_op *op, const char *code) {
    char want[160];
    snprintf(want, sizeof want, "tk_%s__%s", tk_op_name(op), code);
    for (int v = 0; v < tk_op_nvariants(op); v++)
        if (strcmp(tk_op_kernel_name(op, v), want) == 0) return v;
    return -1;
}

/* Elements a thread, as the CUDA emitter plans them: rwkv tiles of 16
 * (float64: 8) lanes x 2 batch rows, two tiles a thread (a tile and its
 * mirror image: the loops' bounds move with t; backward_w: no group, and 8
 * threads a tile by its schedule line's split=8, so 4 and 2),
 * brick_pad chunks of 32 bytes, brick_pad_backward (loops) one element; with
 * TK_CUDA_TUNE, the shape it names, and 0 for a malformed one. */
static void test_per_thread(tk_ctx *ctx) {
    static const struct {
        const char *op, *code;
        int n;
    } cases[] = {{"rwkv_forward", "f32", 64}, {"rwkv_forward", "f64", 32}, {"rwkv_forward", "bf16", 64},
                 {"rwkv_backward_w", "bf16", 4}, {"rwkv_backward_w", "f64", 2}, {"rwkv_backward_k", "f32", 64},
                 {"brick_pad", "f32", 8},     {"brick_pad", "bf16", 16},   {"brick_pad", "f64", 4},
                 {"brick_pad", "u8", 16},     {"brick_pad_backward", "f32", 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const tk_op *op = tk_op_find(ctx, cases[i].op);
        int v = op ? variant_of(op, cases[i].code) : -1;
        CHECK(v >= 0);
        if (v < 0) continue;
        int n = tk_emit_cuda_per_thread(ctx, op, v);
        if (n != cases[i].n) fprintf(stderr, "%s %s: %d elements a thread, expected %d\n", cases[i].op, cases[i].code, n,
                                     cases[i].n);
        CHECK(n == cases[i].n);
        /* the launcher's way: source and geometry from one plan */
        char *src = NULL;
        int m = 0;
        CHECK(tk_emit_scheduled(ctx, op, v, v + 1, TK_TARGET_CUDA, 0, NULL, &src, &m) == TK_OK);
        CHECK(m == cases[i].n && src != NULL);
        tk_free(src);
    }
    CHECK(tk_emit_cuda_per_thread(ctx, tk_op_find(ctx, "brick_pad"), 999) == 0);
    CHECK(tk_emit_cuda_per_thread(ctx, NULL, 0) == 0);
    const tk_op *fwd = tk_op_find(ctx, "rwkv_forward"), *pad = tk_op_find(ctx, "brick_pad");
    if (fwd && pad) {
        setenv("TK_CUDA_TUNE", "lanes=8,rows=4,warp_rows=16", 1);
        CHECK(tk_emit_cuda_per_thread(ctx, fwd, variant_of(fwd, "f32")) == 64);
        CHECK(tk_emit_cuda_per_thread(ctx, fwd, variant_of(fwd, "bf16")) == 64);
        setenv("TK_CUDA_TUNE", "rows=1", 1);
        CHECK(tk_emit_cuda_per_thread(ctx, fwd, variant_of(fwd, "f32")) == 32);
        setenv("TK_CUDA_TUNE", "tiles=1", 1);   /* one tile a thread */
        CHECK(tk_emit_cuda_per_thread(ctx, fwd, variant_of(fwd, "f32")) == 32);
        setenv("TK_CUDA_TUNE", "tiles=2", 1);   /* brick_pad has no tiles to mirror */
        CHECK(tk_emit_cuda_per_thread(ctx, pad, variant_of(pad, "f32")) == 8);
        setenv("TK_CUDA_TUNE", "tiles=4", 1);
        CHECK(tk_emit_cuda_per_thread(ctx, fwd, variant_of(fwd, "f32")) == 0);
        const tk_op *bw = tk_op_find(ctx, "rwkv_backward_w");
        CHECK(bw != NULL);
        if (bw) {   /* split: threads a tile; rwkv_forward's loop (u < t + 1) cannot be split */
            setenv("TK_CUDA_TUNE", "split=1", 1);
            CHECK(tk_emit_cuda_per_thread(ctx, bw, variant_of(bw, "f32")) == 32);
            setenv("TK_CUDA_TUNE", "split=4", 1);
            CHECK(tk_emit_cuda_per_thread(ctx, bw, variant_of(bw, "f32")) == 8);
            CHECK(tk_emit_cuda_per_thread(ctx, fwd, variant_of(fwd, "f32")) == 64);
            setenv("TK_CUDA_TUNE", "split=32", 1);
            CHECK(tk_emit_cuda_per_thread(ctx, bw, variant_of(bw, "f32")) == 1);
            setenv("TK_CUDA_TUNE", "split=32,tiles=1", 1);
            CHECK(tk_emit_cuda_per_thread(ctx, bw, variant_of(bw, "f32")) == 1);
            setenv("TK_CUDA_TUNE", "split=4,tiles=1", 1);
            CHECK(tk_emit_cuda_per_thread(ctx, bw, variant_of(bw, "f32")) == 4);
        }
        setenv("TK_CUDA_TUNE", "chunk=128", 1);
        CHECK(tk_emit_cuda_per_thread(ctx, pad, variant_of(pad, "f32")) == 32);
        CHECK(tk_emit_cuda_per_thread(ctx, pad, variant_of(pad, "u8")) == 32);   /* at most 32 elements */
        /* cooperative rows: -S, S threads an iteration of a row loop (the
         * spec's coop=8, TK_CUDA_TUNE's over it); a scan refuses the form */
        static const char rows[] = "op coop_sum(x: float[R, N]) -> y: x.dtype[R, N]:\n"
                                   "    schedule coop=8\n"
                                   "    for r, _ in y:\n"
                                   "        s = 0.0\n"
                                   "        for i in range(N):\n"
                                   "            s += x[r, i]\n"
                                   "        for i in range(N):\n"
                                   "            y[r, i] = x[r, i] - s\n"
                                   "op coop_scan(x: float[R, N]) -> y: x.dtype[R, N]:\n"
                                   "    for r, _ in y:\n"
                                   "        s = 0.0\n"
                                   "        for i in range(N):\n"
                                   "            s += x[r, i]\n"
                                   "            y[r, i] = s\n";
        unsetenv("TK_CUDA_TUNE");
        tk_ctx *rc = tk_ctx_new();   /* (its own context: the other tests take every op of ctx) */
        int loaded = rc && tk_load_spec(rc, "coop.tk", rows, sizeof rows - 1) == TK_OK;
        if (rc && !loaded) fprintf(stderr, "coop.tk: %s\n", tk_ctx_error(rc));
        CHECK(loaded);
        const tk_op *cs = loaded ? tk_op_find(rc, "coop_sum") : NULL, *sc = loaded ? tk_op_find(rc, "coop_scan") : NULL;
        CHECK(!loaded || (cs && sc));
        if (cs && sc) {
            CHECK(tk_emit_cuda_per_thread(rc, cs, variant_of(cs, "f32")) == -8);
            CHECK(tk_emit_cuda_per_thread(rc, sc, variant_of(sc, "f32")) == 1);
            setenv("TK_CUDA_TUNE", "coop=32", 1);
            CHECK(tk_emit_cuda_per_thread(rc, cs, variant_of(cs, "f32")) == -32);
            CHECK(tk_emit_cuda_per_thread(rc, sc, variant_of(sc, "f32")) == 1);
            CHECK(tk_emit_cuda_per_thread(ctx, fwd, variant_of(fwd, "f32")) == 64);   /* no row loop: ignored */
            setenv("TK_CUDA_TUNE", "coop=1", 1);
            CHECK(tk_emit_cuda_per_thread(rc, cs, variant_of(cs, "f32")) == 1);
        }
        tk_ctx_free(rc);
        setenv("TK_CUDA_TUNE", "lanes=5", 1);
        CHECK(tk_emit_cuda_per_thread(ctx, fwd, variant_of(fwd, "f32")) == 0);
        char *src = NULL;
        CHECK(tk_emit(ctx, fwd, TK_TARGET_CUDA, &src) == TK_ERR_INVALID && src == NULL);
        CHECK(strstr(tk_ctx_error(ctx), "TK_CUDA_TUNE=\"lanes=5\"") != NULL);
        free(src);
        unsetenv("TK_CUDA_TUNE");
    }
}

/* Prints the seconds since the last call after name (where CI's time goes). */
static void phase(const char *name) {
    static struct timespec last;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (name) printf("time: %s %.1f s\n", name, (double)(now.tv_sec - last.tv_sec) + (double)(now.tv_nsec - last.tv_nsec) * 1e-9);
    last = now;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_nvrtc OPS_DIR TESTS_DIR [NVRTC_DIR...]\n");
        return 2;
    }
    g_dirs = (const char *const *)argv + 3;
    g_ndirs = argc - 3;
    unsetenv("TK_CUDA_TUNE");   /* the default tile shapes are checked */
    phase(NULL);
    test_sha256();
    test_grid_size();
    tk_ctx *ctx = load_ops(argv[1]);
    test_per_thread(ctx);
    test_no_driver(ctx);
    test_no_nvrtc(ctx);
    phase("setup, no driver, no NVRTC");
    tk_nvrtc *nv = open_nvrtc();
    if (nv) {
        tk_binary cubin = test_compile_all(nv, ctx);
        phase("compile all");
        test_compile_error(nv);
        phase("compile error");
        /* (the sanitizer build: NVRTC's work on maths.tk is the plain build's, and took 100 s under ASan) */
        const char *only = getenv("TK_TEST_NVRTC_ONLY");
        if (!only || !only[0]) test_compile_maths(nv);
        else printf("TK_TEST_NVRTC_ONLY: the maths spec's NVRTC compile is the plain build's test\n");
        phase("maths");
        test_arch_choice(nv);
        phase("arch choice");
        if (cubin.data) test_cache_files(&cubin, tk_nvrtc_version(nv));
        tk_binary_free(&cubin);
        test_precompile(ctx);
        phase("cache files, precompile");
        test_threads(ctx);
        phase("threads");
        const char *fake = getenv("TK_TEST_FAKE_DRIVER");
        if (fake && fake[0]) test_fake_driver(ctx, fake);
        else printf("TK_TEST_FAKE_DRIVER unset: launcher test against the fake driver not run\n");
        phase("fake driver");
        tk_nvrtc_close(nv);
    }
    tk_ctx_free(ctx);
    return tk_test_report("test_nvrtc");
}
