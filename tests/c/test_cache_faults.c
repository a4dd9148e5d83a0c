/* test_cache_faults.c - the NVRTC kernel disk cache (runtime/cache.c) under
 * faults: every truncation and every flipped byte of an entry, entries that
 * are folders, FIFOs or device files, headers that claim huge payloads, a
 * missing, read-only or full cache folder (a tiny tmpfs when this process
 * may mount one, and a file-size limit always), 4 processes compiling the
 * same kernel at once, and one kernel's file under another's name. Each
 * case either recompiles, works without the disk cache, or fails with a
 * message; none crashes, hangs, or returns bytes that are not the entry's.
 * (test_nvrtc.c has the basic round trip and rejection cases.)
 * Usage: test_cache_faults OPS_DIR TESTS_DIR [NVRTC_DIR...] */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tk.h"
#include "tk_cuda.h"
#include "tk_test.h"

#define HEADER 160              /* cache.c's header size */
#define HANG_SECONDS 20         /* a case that takes longer has hung */

static const char *const *g_dirs;
static int g_ndirs;

static int contains(const char *s, const char *part) { return s && strstr(s, part) != NULL; }

static char *temp_dir(void) {
    char tmpl[] = "/tmp/tk_cache_faults_XXXXXX";
    char *d = mkdtemp(tmpl);
    CHECK(d != NULL);
    return strdup(d ? d : "/tmp");
}

static void remove_tree(const char *dir) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* Files in dir whose name starts with prefix (".tmp": leftovers of a failed write). */
static int count_files(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d)) != NULL;)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    if (d) closedir(d);
    return n;
}

static unsigned char *read_all(const char *path, long *n) {
    *n = file_size(path);
    FILE *f = fopen(path, "rb");
    unsigned char *p = *n >= 0 && f ? malloc((size_t)*n + 1) : NULL;
    if (p && fread(p, 1, (size_t)*n, f) != (size_t)*n) {
        free(p);
        p = NULL;
    }
    if (f) fclose(f);
    return p;
}

static void write_all(const char *path, const unsigned char *p, long n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(p, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
}

/* Runs fn(arg) in a child process with an alarm: 0 if it exited cleanly
 * with status 0 in time, else a message on stderr. A crash or hang in the
 * cache shows here as a failed check instead of killing the test. */
static int in_child(const char *what, void (*fn)(void *), void *arg) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(HANG_SECONDS);
        fn(arg);
        _exit(tk_test_failures ? 1 : 0);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
    fprintf(stderr, "%s: %s %d\n", what, WIFSIGNALED(status) ? "killed by signal" : "exit status",
            WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    return 1;
}

/* ---- the cache files alone (no NVRTC) ------------------------------------------- */

static unsigned char g_key[TK_CACHE_KEY_SIZE];
static tk_binary g_bin;                 /* a stand-in payload */
static const int k_version = 13000;

static void make_payload(size_t n) {
    static unsigned char data[1 << 16];
    for (size_t i = 0; i < n && i < sizeof data; i++) data[i] = (unsigned char)(i * 131 + 7);
    memcpy(data, "\x7f" "ELF", 4);
    g_bin.data = data;
    g_bin.size = n < sizeof data ? n : sizeof data;
    g_bin.is_ptx = 0;
    const char *opts[1] = {"-arch=sm_90"};
    tk_arch arch = {90, 0};
    tk_cache_key("faults", k_version, arch, opts, 1, g_key);
}

/* Loads the entry: either a miss, or exactly the stored payload. 1 on a hit. */
static int load_is_right_or_miss(const char *dir, const char *what) {
    tk_binary got;
    char msg[4600];
    tk_status st = tk_cache_load(dir, g_key, k_version, &got, msg, sizeof msg);
    if (st != TK_OK) {
        CHECK(st == TK_ERR_NOTFOUND);
        return 0;
    }
    /* is_ptx only labels listings: cuModuleLoadData detects the image's format */
    int same = got.size == g_bin.size && memcmp(got.data, g_bin.data, got.size) == 0;
    if (!same) fprintf(stderr, "%s: the cache returned bytes that are not the entry's\n", what);
    CHECK(same);
    tk_binary_free(&got);
    return 1;
}

/* Every truncation and every single flipped bit pattern of a stored entry:
 * a miss, or the right payload (label and reserved bytes are not checked). */
static void test_every_damage(void) {
    char *dir = temp_dir(), path[4200], msg[4600];
    make_payload(700);
    CHECK(tk_cache_store(dir, g_key, k_version, "tk_faults sm_90", &g_bin, msg, sizeof msg) == TK_OK);
    CHECK(tk_cache_path(dir, g_key, path, sizeof path));
    long n;
    unsigned char *good = read_all(path, &n);
    CHECK(good != NULL && n == HEADER + 700);
    if (!good) return;
    int hits = 0;
    for (long len = 0; len < n; len++) {
        write_all(path, good, len);
        hits += load_is_right_or_miss(dir, "truncated");
    }
    CHECK(hits == 0);
    int loaded_flipped = 0;
    for (long at = 0; at < n; at++)
        for (int bit = 0; bit < 8; bit += 3) {
            good[at] ^= (unsigned char)(1u << bit);
            write_all(path, good, n);
            good[at] ^= (unsigned char)(1u << bit);
            if (load_is_right_or_miss(dir, "flipped")) loaded_flipped += at < 48 || (at >= 56 && at < 96) || at >= 160;
        }
    CHECK(loaded_flipped == 0);     /* only kind, reserved and label bytes may change unnoticed */
    /* one byte appended */
    unsigned char *longer = malloc((size_t)n + 1);
    memcpy(longer, good, (size_t)n);
    longer[n] = 0;
    write_all(path, longer, n + 1);
    CHECK(load_is_right_or_miss(dir, "appended") == 0);
    free(longer);
    /* headers that claim absurd payloads: refused without reading them */
    const uint64_t claims[] = {0, 1, 699, 701, (uint64_t)1 << 32, ((uint64_t)1 << 32) + 1, UINT64_MAX};
    for (size_t i = 0; i < sizeof claims / sizeof claims[0]; i++) {
        unsigned char copy[HEADER + 700];
        memcpy(copy, good, sizeof copy);
        for (int b = 0; b < 8; b++) copy[56 + b] = (unsigned char)(claims[i] >> (8 * b));
        write_all(path, copy, n);
        CHECK(load_is_right_or_miss(dir, "claimed size") == 0);
    }
    free(good);
    remove_tree(dir);
    free(dir);
}

/* The entry's path is a folder, a FIFO, /dev/zero, /dev/urandom or a
 * dangling link: a miss (never a hang on the FIFO), and storing either
 * replaces it or says why. */
static void special_entries(void *unused) {
    (void)unused;
    char *dir = temp_dir(), path[4200], msg[4600];
    make_payload(300);
    CHECK(tk_cache_path(dir, g_key, path, sizeof path));
    const char *kinds[] = {"folder", "fifo", "zero", "urandom", "dangling"};
    for (int k = 0; k < 5; k++) {
        remove_tree(path);
        unlink(path);
        int made = 0;
        if (k == 0) made = mkdir(path, 0755) == 0;
        if (k == 1) made = mkfifo(path, 0644) == 0;
        if (k == 2) made = symlink("/dev/zero", path) == 0;
        if (k == 3) made = symlink("/dev/urandom", path) == 0;
        if (k == 4) made = symlink("/nonexistent/tk/entry", path) == 0;
        CHECK(made);
        CHECK(load_is_right_or_miss(dir, kinds[k]) == 0);
        tk_status st = tk_cache_store(dir, g_key, k_version, "x", &g_bin, msg, sizeof msg);
        if (st == TK_OK) CHECK(load_is_right_or_miss(dir, kinds[k]) == 1);
        else CHECK(contains(msg, "cannot write"));
        CHECK(count_files(dir, ".tmp") == 0);
    }
    remove_tree(dir);
    free(dir);
}

/* A missing folder is created (with its parents); one below a file is not. */
static void test_missing_dir(void) {
    char *dir = temp_dir(), sub[4200], msg[4600];
    make_payload(100);
    snprintf(sub, sizeof sub, "%s/a/b/c", dir);
    CHECK(tk_cache_load(sub, g_key, k_version, &(tk_binary){0}, msg, sizeof msg) == TK_ERR_NOTFOUND);
    CHECK(tk_cache_list(sub, NULL, NULL) == -1);
    CHECK(tk_cache_store(sub, g_key, k_version, "x", &g_bin, msg, sizeof msg) == TK_OK);
    CHECK(load_is_right_or_miss(sub, "created folder") == 1);
    remove_tree(dir);
    free(dir);
}

/* Mounts a tmpfs of `size` (ro: read-only) on a fresh folder; NULL if this
 * process may not mount (not root, or a container without the capability). */
static char *mount_tmpfs(const char *options) {
    char *dir = temp_dir();
    if (mount("tk_cache_faults", dir, "tmpfs", strstr(options, "ro") ? MS_RDONLY : 0, options) != 0) {
        remove_tree(dir);
        free(dir);
        return NULL;
    }
    return dir;
}

static void unmount_tmpfs(char *dir) {
    CHECK(umount(dir) == 0);
    remove_tree(dir);
    free(dir);
}

/* A read-only folder: storing fails with a message, loading misses. As
 * root, permissions do not stop writes, so a read-only tmpfs is used. */
static void test_read_only_dir(void) {
    char msg[4600], *dir = NULL;
    make_payload(200);
    if (geteuid() == 0) {
        dir = mount_tmpfs("ro,size=64k");
        if (!dir) {
            printf("read-only folder: skipped (cannot mount a tmpfs here)\n");
            return;
        }
    } else {
        dir = temp_dir();
        CHECK(chmod(dir, 0555) == 0);
    }
    CHECK(tk_cache_store(dir, g_key, k_version, "x", &g_bin, msg, sizeof msg) != TK_OK);
    CHECK(contains(msg, "cannot create a file in") && contains(msg, dir));
    CHECK(load_is_right_or_miss(dir, "read-only") == 0);
    if (geteuid() == 0) {
        unmount_tmpfs(dir);
    } else {
        chmod(dir, 0755);
        remove_tree(dir);
        free(dir);
    }
}

/* A full disk: a 16 kB tmpfs and a 60 kB entry. The store fails with the
 * system's reason and leaves no temporary file; smaller entries still fit. */
static void test_full_tmpfs(void) {
    char msg[4600], *dir = mount_tmpfs("size=16k");
    if (!dir) {
        printf("full tmpfs: skipped (cannot mount a tmpfs here)\n");
        return;
    }
    make_payload(60000);
    CHECK(tk_cache_store(dir, g_key, k_version, "x", &g_bin, msg, sizeof msg) != TK_OK);
    CHECK(contains(msg, "No space left on device"));
    CHECK(count_files(dir, ".tmp") == 0 && count_files(dir, "") == 0);
    CHECK(load_is_right_or_miss(dir, "full disk") == 0);
    make_payload(1000);
    CHECK(tk_cache_store(dir, g_key, k_version, "x", &g_bin, msg, sizeof msg) == TK_OK);
    CHECK(load_is_right_or_miss(dir, "after full disk") == 1);
    unmount_tmpfs(dir);
}

/* The same with a file-size limit (works unprivileged): writes past it fail
 * with EFBIG once SIGXFSZ is ignored. */
static void file_size_limit(void *unused) {
    (void)unused;
    char msg[4600], *dir = temp_dir();
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {8192, 8192};
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    make_payload(60000);
    CHECK(tk_cache_store(dir, g_key, k_version, "x", &g_bin, msg, sizeof msg) != TK_OK);
    CHECK(contains(msg, "cannot write"));
    CHECK(count_files(dir, "") == 0);
    CHECK(load_is_right_or_miss(dir, "file size limit") == 0);
    remove_tree(dir);
    free(dir);
}

/* ---- compiling (NVRTC), several processes ---------------------------------------- */

static tk_ctx *load_ops(const char *ops_dir) {
    tk_ctx *ctx = tk_ctx_new();
    DIR *d = opendir(ops_dir);
    CHECK(d != NULL);
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        size_t n = strlen(e->d_name), len;
        if (n < 4 || strcmp(e->d_name + n - 3, ".tk") != 0) continue;
        char *text = read_spec(ops_dir, e->d_name, &len);
        CHECK(text && tk_load_spec(ctx, e->d_name, text, len) == TK_OK);
        free(text);
    }
    if (d) closedir(d);
    CHECK(tk_ctx_link(ctx) == TK_OK);
    return ctx;
}

typedef struct job {
    tk_ctx *ctx;
    const char *dir;
    int start_fd;           /* read end of the start pipe */
    const char *op;
    int variant;
} job;

/* One process: waits for the start signal, compiles into the shared cache. */
static void compile_job(void *p) {
    job *j = p;
    char c, msg[8192];
    if (read(j->start_fd, &c, 1) != 1) _exit(3);
    tk_cuda_options opt = {g_dirs, g_ndirs, j->dir, NULL, 0};
    tk_cuda *cu = tk_cuda_new(&opt);
    int cached = -1;
    tk_status st = tk_cuda_precompile(cu, j->ctx, tk_op_find(j->ctx, j->op), j->variant, 90, &cached, msg, sizeof msg);
    if (st != TK_OK) fprintf(stderr, "process %d: %s\n", (int)getpid(), msg);
    CHECK(st == TK_OK);
    tk_cuda_free(cu);
}

/* 4 processes compile the same kernel into one folder at once: all
 * succeed, one entry remains, it loads, and no temporary file is left. */
static void test_four_processes(tk_ctx *ctx) {
    char *dir = temp_dir(), msg[8192];
    int fds[2];
    CHECK(pipe(fds) == 0);
    job j = {ctx, dir, fds[0], "rwkv_forward", 0};
    pid_t pids[4];
    fflush(NULL);
    for (int i = 0; i < 4; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            close(fds[1]);
            alarm(120);
            compile_job(&j);
            _exit(tk_test_failures ? 1 : 0);
        }
    }
    close(fds[0]);
    CHECK(write(fds[1], "GGGG", 4) == 4);   /* go */
    close(fds[1]);
    for (int i = 0; i < 4; i++) {
        int status = 0;
        CHECK(waitpid(pids[i], &status, 0) == pids[i] && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    CHECK(tk_cache_list(dir, NULL, NULL) == 1 && count_files(dir, ".tmp") == 0);
    tk_cuda_options opt = {g_dirs, g_ndirs, dir, NULL, 0};
    tk_cuda *cu = tk_cuda_new(&opt);
    int cached = -1;
    CHECK(tk_cuda_precompile(cu, ctx, tk_op_find(ctx, "rwkv_forward"), 0, 90, &cached, msg, sizeof msg) == TK_OK);
    CHECK(cached == 1);
    tk_cuda_free(cu);
    remove_tree(dir);
    free(dir);
}

/* The files of the entries in dir, by label ("tk_rwkv_forward__f32 sm_90"). */
typedef struct found {
    const char *label;
    int valid;
} found;

static void find_label(const tk_cache_entry *e, void *user) {
    found *f = user;
    if (strcmp(e->label, f->label) == 0) f->valid = e->valid;
}

/* Another kernel's valid file under this kernel's name is rejected (its
 * key differs), recompiled and replaced: never loaded as this kernel. */
static void test_wrong_kernel_file(tk_ctx *ctx) {
    char *dir = temp_dir(), msg[8192];
    tk_cuda_options opt = {g_dirs, g_ndirs, dir, NULL, 0};
    tk_cuda *cu = tk_cuda_new(&opt);
    const tk_op *op = tk_op_find(ctx, "rwkv_forward");
    int cached = -1;
    CHECK(tk_cuda_precompile(cu, ctx, op, 0, 90, &cached, msg, sizeof msg) == TK_OK);
    CHECK(tk_cuda_precompile(cu, ctx, op, 1, 90, &cached, msg, sizeof msg) == TK_OK);
    /* the two files, in name order */
    char paths[2][4400];
    int n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d)) != NULL;)
        if (e->d_name[0] != '.' && n < 2) snprintf(paths[n++], sizeof paths[0], "%s/%s", dir, e->d_name);
    if (d) closedir(d);
    CHECK(n == 2);
    if (n == 2) {
        long len;
        unsigned char *a = read_all(paths[0], &len);
        write_all(paths[1], a, len);        /* both names now hold the first kernel */
        free(a);
        for (int v = 0; v < 2; v++) {
            CHECK(tk_cuda_precompile(cu, ctx, op, v, 90, &cached, msg, sizeof msg) == TK_OK);
            CHECK(tk_cuda_precompile(cu, ctx, op, v, 90, &cached, msg, sizeof msg) == TK_OK && cached == 1);
        }
        CHECK(tk_cache_list(dir, NULL, NULL) == 2);
        char label[128];
        snprintf(label, sizeof label, "%s sm_90", tk_op_kernel_name(op, 1));
        found f = {label, 0};
        tk_cache_list(dir, find_label, &f);
        CHECK(f.valid == 1);
    }
    tk_cuda_free(cu);
    remove_tree(dir);
    free(dir);
}

/* A disk that fills while compiling: precompile (whose job is the disk)
 * says the cache is off; the kernel itself still compiled. */
static void test_full_disk_compile(tk_ctx *ctx) {
    char msg[8192], *dir = mount_tmpfs("size=4k");
    if (!dir) {
        printf("full disk while compiling: skipped (cannot mount a tmpfs here)\n");
        return;
    }
    tk_cuda_options opt = {g_dirs, g_ndirs, dir, NULL, 0};
    tk_cuda *cu = tk_cuda_new(&opt);
    tk_status st = tk_cuda_precompile(cu, ctx, tk_op_find(ctx, "rwkv_forward"), 0, 90, NULL, msg, sizeof msg);
    CHECK(st != TK_OK && contains(msg, "disk cache is off"));
    CHECK(count_files(dir, ".tmp") == 0);
    tk_cuda_free(cu);
    unmount_tmpfs(dir);
}

/* With the stand-in driver (fake_cuda.c): launches work from a read-only,
 * full or missing cache folder, without the disk cache. */
static void test_launch_without_disk(tk_ctx *ctx, const char *driver) {
    static float fake[1];
    int64_t wsz[2] = {3, 5}, wst[2] = {5, 1}, ksz[3] = {2, 3, 5}, kst[3] = {15, 5, 1};
    tk_tensor_view w = tk_view(fake, TK_F32, 2, wsz, wst), k = tk_view(fake, TK_F32, 3, ksz, kst);
    w.device = k.device = TK_CUDA;
    tk_arg args[3] = {tk_arg_tensor(w), tk_arg_tensor(k), tk_arg_float(0.1)};
    tk_call call;
    CHECK(tk_bind(tk_op_find(ctx, "rwkv_forward"), args, 3, &call) == TK_OK);
    CHECK(tk_set_output(&call, 0, k) == TK_OK);
    char *dirs[3] = {mount_tmpfs("ro,size=64k"), mount_tmpfs("size=4k"), NULL};
    char *base = temp_dir(), missing[4200];
    snprintf(missing, sizeof missing, "%s/not/yet", base);
    const char *names[3] = {"read-only", "full", "missing"};
    for (int i = 0; i < 3; i++) {
        const char *dir = i == 2 ? missing : dirs[i];
        if (!dir) continue;
        char msg[8192];
        tk_cuda_options opt = {g_dirs, g_ndirs, dir, driver, 0};
        tk_cuda *cu = tk_cuda_new(&opt);
        tk_status st = tk_cuda_launch(cu, ctx, &call, NULL, msg, sizeof msg);
        if (st != TK_OK) fprintf(stderr, "%s cache folder: %s\n", names[i], msg);
        CHECK(st == TK_OK);
        CHECK(tk_cuda_launch(cu, ctx, &call, NULL, msg, sizeof msg) == TK_OK);
        tk_cuda_free(cu);
    }
    CHECK(tk_cache_list(missing, NULL, NULL) == 1);
    for (int i = 0; i < 2; i++)
        if (dirs[i]) unmount_tmpfs(dirs[i]);
    remove_tree(base);
    free(base);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_cache_faults OPS_DIR TESTS_DIR [NVRTC_DIR...]\n");
        return 2;
    }
    g_dirs = (const char *const *)argv + 3;
    g_ndirs = argc - 3;
    test_every_damage();
    CHECK(in_child("special entries", special_entries, NULL) == 0);
    test_missing_dir();
    test_read_only_dir();
    test_full_tmpfs();
    CHECK(in_child("file size limit", file_size_limit, NULL) == 0);

    char msg[4096];
    tk_nvrtc *nv = NULL;
    if (tk_nvrtc_open(g_dirs, g_ndirs, &nv, msg, sizeof msg) != TK_OK) {
        fprintf(stderr, "NVRTC is required for the compiling cases (make setup installs it): %s\n", msg);
        return 1;
    }
    tk_nvrtc_close(nv);
    tk_ctx *ctx = load_ops(argv[1]);
    test_four_processes(ctx);
    test_wrong_kernel_file(ctx);
    test_full_disk_compile(ctx);
    const char *fake = getenv("TK_TEST_FAKE_DRIVER");
    if (fake && fake[0]) test_launch_without_disk(ctx, fake);
    tk_ctx_free(ctx);
    return tk_test_report("test_cache_faults");
}
