/* cache.c - the on-disk kernel cache: one file per compiled kernel, named by
 * the SHA-256 key of everything that went into the compile.
 *
 * File layout (integers little-endian), TK_CACHE_FORMAT 1:
 *     0   magic "TKCACHE\n"       8 bytes
 *     8   format                  u32
 *    12   NVRTC version           u32   (1000 * major + 10 * minor)
 *    16   key                     32 bytes
 *    48   kind                    u32   (0 cubin, 1 PTX)
 *    52   reserved                u32   (0)
 *    56   payload size            u64
 *    64   SHA-256 of the payload  32 bytes
 *    96   label                   64 bytes, NUL-padded ("tk_brick_pad__f32 sm_90")
 *   160   payload
 * A file is used only if every field matches and the payload's checksum
 * holds; anything else is a miss, and the recompiled kernel replaces it.
 * Files are written to a temporary name and renamed: readers never see a
 * partial file. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sha256.h"
#include "tk_cuda.h"

#define HEADER_SIZE 160
static const char k_magic[8] = {'T', 'K', 'C', 'A', 'C', 'H', 'E', '\n'};

typedef struct header {
    uint32_t format, nvrtc_version, kind;
    unsigned char key[TK_CACHE_KEY_SIZE];
    uint64_t size;
    unsigned char sum[TK_SHA256_SIZE];
    char label[TK_CACHE_LABEL + 1];
} header;

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static void encode(const header *h, unsigned char out[HEADER_SIZE]) {
    memset(out, 0, HEADER_SIZE);
    memcpy(out, k_magic, 8);
    put_u32(out + 8, h->format);
    put_u32(out + 12, h->nvrtc_version);
    memcpy(out + 16, h->key, TK_CACHE_KEY_SIZE);
    put_u32(out + 48, h->kind);
    put_u64(out + 56, h->size);
    memcpy(out + 64, h->sum, TK_SHA256_SIZE);
    memcpy(out + 96, h->label, strnlen(h->label, TK_CACHE_LABEL));
}

/* 0 unless the magic is there. */
static int decode(const unsigned char in[HEADER_SIZE], header *h) {
    if (memcmp(in, k_magic, 8) != 0) return 0;
    h->format = get_u32(in + 8);
    h->nvrtc_version = get_u32(in + 12);
    memcpy(h->key, in + 16, TK_CACHE_KEY_SIZE);
    h->kind = get_u32(in + 48);
    h->size = get_u64(in + 56);
    memcpy(h->sum, in + 64, TK_SHA256_SIZE);
    memcpy(h->label, in + 96, TK_CACHE_LABEL);
    h->label[TK_CACHE_LABEL] = 0;
    return 1;
}

int tk_cache_default_dir(char *out, size_t n) {
    const char *dir = getenv("TK_CACHE_DIR");
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int len = -1;
    if (dir && dir[0]) len = snprintf(out, n, "%s", dir);
    else if (xdg && xdg[0] == '/') len = snprintf(out, n, "%s/tk", xdg);   /* XDG: absolute only */
    else if (home && home[0]) len = snprintf(out, n, "%s/.cache/tk", home);
    if (len < 0 || (size_t)len >= n) {
        if (n) out[0] = 0;
        return 0;
    }
    return 1;
}

static void hash_str(tk_sha256 *s, const char *text) {
    tk_sha256_update(s, text, strlen(text) + 1);   /* with the NUL: "ab"+"c" != "a"+"bc" */
}

void tk_cache_key(const char *src, int nvrtc_version, tk_arch arch, const char *const *opts, int nopts,
                  unsigned char key[TK_CACHE_KEY_SIZE]) {
    char text[64];
    tk_sha256 s;
    tk_sha256_init(&s);
    snprintf(text, sizeof text, "tk %s cache %u", TK_VERSION, TK_CACHE_FORMAT);
    hash_str(&s, text);
    hash_str(&s, src);
    hash_str(&s, tk_kernel_header());
    snprintf(text, sizeof text, "nvrtc %d %s_%d", nvrtc_version, arch.ptx ? "compute" : "sm", arch.sm);
    hash_str(&s, text);
    for (int i = 0; i < nopts; i++) hash_str(&s, opts[i]);
    tk_sha256_final(&s, key);
}

int tk_cache_path(const char *dir, const unsigned char key[TK_CACHE_KEY_SIZE], char *out, size_t n) {
    char hex[2 * TK_SHA256_SIZE + 1];
    tk_sha256_hex(key, hex);
    int len = snprintf(out, n, "%s/%s.tkbin", dir, hex);
    return len > 0 && (size_t)len < n;
}

/* Reads the whole of f after the header into a malloc'd buffer of h->size
 * bytes; 0 with msg when the file is shorter or longer. */
static int read_payload(FILE *f, const header *h, void **out, char *msg, size_t msglen) {
    if (h->size == 0 || h->size > ((uint64_t)1 << 32)) {
        snprintf(msg, msglen, "payload size %llu is not plausible", (unsigned long long)h->size);
        return 0;
    }
    char *p = malloc((size_t)h->size + 1);
    if (!p) {
        snprintf(msg, msglen, "out of memory");
        return 0;
    }
    size_t got = fread(p, 1, (size_t)h->size + 1, f);
    if (got != h->size) {
        snprintf(msg, msglen, "%s: payload is %zu bytes, header says %llu", got < h->size ? "truncated" : "too long",
                 got, (unsigned long long)h->size);
        free(p);
        return 0;
    }
    *out = p;
    return 1;
}

/* Opens path for reading if it is a regular file; NULL otherwise (a FIFO
 * would block fopen, a folder or device file is no entry). */
static FILE *open_regular(const char *path) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    FILE *f = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? fdopen(fd, "rb") : NULL;
    if (!f) close(fd);
    return f;
}

/* Why h does not describe the entry asked for ("" if it does). */
static const char *mismatch(const header *h, const unsigned char *key, int nvrtc_version) {
    if (h->format != TK_CACHE_FORMAT) return "written by another tk cache format";
    if ((int)h->nvrtc_version != nvrtc_version) return "written by another NVRTC version";
    if (memcmp(h->key, key, TK_CACHE_KEY_SIZE) != 0) return "its key differs from its name";
    if (h->kind > 1) return "unknown payload kind";
    return "";
}

tk_status tk_cache_load(const char *dir, const unsigned char key[TK_CACHE_KEY_SIZE], int nvrtc_version,
                        tk_binary *out, char *msg, size_t msglen) {
    char path[4096], why[256] = "";
    memset(out, 0, sizeof *out);
    if (msglen) msg[0] = 0;
    if (!dir || !dir[0] || !tk_cache_path(dir, key, path, sizeof path)) return TK_ERR_NOTFOUND;
    FILE *f = open_regular(path);
    if (!f) return TK_ERR_NOTFOUND;
    unsigned char raw[HEADER_SIZE];
    header h;
    void *payload = NULL;
    if (fread(raw, 1, HEADER_SIZE, f) != HEADER_SIZE) snprintf(why, sizeof why, "truncated header");
    else if (!decode(raw, &h)) snprintf(why, sizeof why, "not a tk cache file");
    else if (mismatch(&h, key, nvrtc_version)[0]) snprintf(why, sizeof why, "%s", mismatch(&h, key, nvrtc_version));
    else if (read_payload(f, &h, &payload, why, sizeof why)) {
        unsigned char sum[TK_SHA256_SIZE];
        tk_sha256_of(payload, (size_t)h.size, sum);
        if (memcmp(sum, h.sum, sizeof sum) != 0) snprintf(why, sizeof why, "checksum mismatch (corrupted)");
    }
    fclose(f);
    if (why[0]) {
        free(payload);
        snprintf(msg, msglen, "cache file %s rejected: %s", path, why);
        return TK_ERR_NOTFOUND;
    }
    out->data = payload;
    out->size = (size_t)h.size;
    out->is_ptx = h.kind == 1;
    if (out->is_ptx) ((char *)payload)[h.size] = 0;     /* read_payload left room for it */
    return TK_OK;
}

/* mkdir -p path (mode 0755); 0 with errno set on failure. */
static int make_dirs(const char *path) {
    char p[4096];
    int len = snprintf(p, sizeof p, "%s", path);
    if (len <= 0 || (size_t)len >= sizeof p) {
        errno = ENAMETOOLONG;
        return 0;
    }
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) return 0;
        *s = '/';
    }
    if (mkdir(p, 0755) != 0 && errno != EEXIST) return 0;
    struct stat st;
    if (stat(p, &st) != 0) return 0;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return 0;
    }
    return 1;
}

/* Writes header and payload to a fresh temporary file in dir, then renames
 * it to path. */
static int write_atomic(const char *dir, const char *path, const unsigned char *head, const tk_binary *bin,
                        char *msg, size_t msglen) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s/.tmp-XXXXXX", dir);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        snprintf(msg, msglen, "cannot create a file in %s: %s", dir, strerror(errno));
        return 0;
    }
    FILE *f = fdopen(fd, "wb");
    int ok = f && fwrite(head, 1, HEADER_SIZE, f) == HEADER_SIZE && fwrite(bin->data, 1, bin->size, f) == bin->size;
    int err = errno;
    if (f) ok = (fclose(f) == 0) && ok;
    else close(fd);
    if (ok) {
        (void)chmod(tmp, 0644);
        ok = rename(tmp, path) == 0;
        err = errno;
    }
    if (!ok) {
        unlink(tmp);
        snprintf(msg, msglen, "cannot write %s: %s", path, strerror(err));
    }
    return ok;
}

tk_status tk_cache_store(const char *dir, const unsigned char key[TK_CACHE_KEY_SIZE], int nvrtc_version,
                         const char *label, const tk_binary *bin, char *msg, size_t msglen) {
    char path[4096];
    if (msglen) msg[0] = 0;
    if (!dir || !dir[0] || !bin || !bin->data || bin->size == 0) return TK_ERR_INVALID;
    if (!tk_cache_path(dir, key, path, sizeof path)) {
        snprintf(msg, msglen, "cache folder name too long");
        return TK_ERR_INVALID;
    }
    if (!make_dirs(dir)) {
        snprintf(msg, msglen, "cannot create the cache folder %s: %s", dir, strerror(errno));
        return TK_ERR_INVALID;
    }
    header h;
    memset(&h, 0, sizeof h);
    h.format = TK_CACHE_FORMAT;
    h.nvrtc_version = (uint32_t)nvrtc_version;
    memcpy(h.key, key, TK_CACHE_KEY_SIZE);
    h.kind = bin->is_ptx ? 1u : 0u;
    h.size = bin->size;
    tk_sha256_of(bin->data, bin->size, h.sum);
    snprintf(h.label, sizeof h.label, "%s", label ? label : "");
    unsigned char raw[HEADER_SIZE];
    encode(&h, raw);
    return write_atomic(dir, path, raw, bin, msg, msglen) ? TK_OK : TK_ERR_INVALID;
}

/* Fills e from the file at path (its header and size). */
static void list_one(const char *path, tk_cache_entry *e) {
    memset(e, 0, sizeof *e);
    FILE *f = open_regular(path);
    if (!f) return;
    unsigned char raw[HEADER_SIZE];
    header h;
    struct stat st;
    if (fread(raw, 1, HEADER_SIZE, f) == HEADER_SIZE && decode(raw, &h) && fstat(fileno(f), &st) == 0) {
        memcpy(e->label, h.label, sizeof e->label);
        e->size = h.size;
        e->nvrtc_version = (int)h.nvrtc_version;
        e->is_ptx = h.kind == 1;
        e->valid = h.format == TK_CACHE_FORMAT && (uint64_t)st.st_size == HEADER_SIZE + h.size;
    }
    fclose(f);
}

int tk_cache_list(const char *dir, void (*fn)(const tk_cache_entry *e, void *user), void *user) {
    DIR *d = dir && dir[0] ? opendir(dir) : NULL;
    if (!d) return -1;
    int count = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (len < 7 || strcmp(de->d_name + len - 6, ".tkbin") != 0 || de->d_name[0] == '.') continue;
        char path[4600];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        tk_cache_entry e;
        list_one(path, &e);
        if (!e.label[0]) snprintf(e.label, sizeof e.label, "%.*s", (int)(len - 6), de->d_name);
        if (fn) fn(&e, user);
        count++;
    }
    closedir(d);
    return count;
}
