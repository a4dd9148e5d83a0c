/* nvrtc.c - NVRTC opened at run time (dlopen): finding the library, the
 * arch to compile for, and compiling generated CUDA C to a cubin (or PTX).
 * The few NVRTC types are declared here, so no CUDA header is needed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tk_cuda.h"
#include "msg.h"

typedef int nvrtcResult;            /* NVRTC_SUCCESS == 0 */
typedef struct _nvrtcProgram *nvrtcProgram;

/* The NVRTC functions tk uses; ORDER NVRTC_FN: k_nvrtc_names follows. */
typedef struct nvrtc_api {
    nvrtcResult (*version)(int *major, int *minor);
    nvrtcResult (*num_archs)(int *n);
    nvrtcResult (*archs)(int *archs);
    nvrtcResult (*create)(nvrtcProgram *p, const char *src, const char *name, int nheaders,
                          const char *const *headers, const char *const *include_names);
    nvrtcResult (*compile)(nvrtcProgram p, int nopts, const char *const *opts);
    nvrtcResult (*log_size)(nvrtcProgram p, size_t *n);
    nvrtcResult (*log)(nvrtcProgram p, char *log);
    nvrtcResult (*cubin_size)(nvrtcProgram p, size_t *n);
    nvrtcResult (*cubin)(nvrtcProgram p, char *cubin);
    nvrtcResult (*ptx_size)(nvrtcProgram p, size_t *n);
    nvrtcResult (*ptx)(nvrtcProgram p, char *ptx);
    nvrtcResult (*destroy)(nvrtcProgram *p);
    const char *(*error_string)(nvrtcResult r);
} nvrtc_api;

static const char *const k_nvrtc_names[] = {   /* ORDER NVRTC_FN */
    "nvrtcVersion", "nvrtcGetNumSupportedArchs", "nvrtcGetSupportedArchs", "nvrtcCreateProgram",
    "nvrtcCompileProgram", "nvrtcGetProgramLogSize", "nvrtcGetProgramLog", "nvrtcGetCUBINSize",
    "nvrtcGetCUBIN", "nvrtcGetPTXSize", "nvrtcGetPTX", "nvrtcDestroyProgram", "nvrtcGetErrorString",
};
/* Functions that old NVRTCs lack: the arch list (11.2+) and CUBIN (11.1+). */
static int optional_fn(int i) { return i == 1 || i == 2 || i == 7 || i == 8; }

#define NVRTC_NFN (sizeof k_nvrtc_names / sizeof k_nvrtc_names[0])
_Static_assert(sizeof(nvrtc_api) == NVRTC_NFN * sizeof(void *), "k_nvrtc_names and nvrtc_api disagree");
#define MAX_ARCHS 64

struct tk_nvrtc {
    void *lib;
    void *builtins;         /* libnvrtc-builtins, preloaded from lib's folder (or NULL) */
    char path[1024];
    nvrtc_api api;
    int major, minor;
    int archs[MAX_ARCHS];   /* sm numbers NVRTC compiles SASS for, ascending */
    int narchs;             /* 0: unknown (old NVRTC), assume any */
};

/* Library names tried in each folder and on the system path, newest first. */
static const char *const k_lib_names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
#define NLIB_NAMES 3

/* Appends text to msg (size n), truncating. */
static void append(char *msg, size_t n, const char *text) {
    size_t len = strlen(msg);
    if (len + 1 < n) snprintf(msg + len, n - len, "%s", text);
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Resolves every function into nv->api, slot by slot in ORDER NVRTC_FN
 * (POSIX lets a dlsym result be stored as a function pointer); 0 and a
 * message if a required one is missing. */
static int resolve(tk_nvrtc *nv, char *msg, size_t msglen) {
    for (size_t i = 0; i < NVRTC_NFN; i++) {
        void *fn = dlsym(nv->lib, k_nvrtc_names[i]);
        memcpy((char *)&nv->api + i * sizeof fn, &fn, sizeof fn);
        if (!fn && !optional_fn((int)i)) {
            tk_put(msg, msglen, "%s has no %s: not a usable NVRTC", nv->path, k_nvrtc_names[i]);
            return 0;
        }
    }
    return 1;
}

/* Reads the version and the list of supported archs. */
static void query(tk_nvrtc *nv) {
    if (nv->api.version(&nv->major, &nv->minor) != 0) nv->major = nv->minor = 0;
    int n = 0;
    if (nv->api.num_archs && nv->api.archs && nv->api.num_archs(&n) == 0 && n > 0 && n <= MAX_ARCHS &&
        nv->api.archs(nv->archs) == 0)
        nv->narchs = n;
}

/* dlopens path; on failure appends it to the searched list. */
static void *try_open(const char *path, char *searched, size_t n) {
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        struct stat st;
        const char *why = dlerror();
        append(searched, n, searched[0] ? ", " : "");
        append(searched, n, path);
        if (strchr(path, '/') && stat(path, &st) == 0 && why) {  /* there, but unusable: say why */
            append(searched, n, " (");
            append(searched, n, why);
            append(searched, n, ")");
        }
    }
    return lib;
}

/* Tries each library name in folder dir. */
static void *open_in_dir(const char *dir, char *path, size_t pathlen, char *searched, size_t n) {
    if (!dir || !dir[0]) return NULL;
    if (!is_dir(dir)) {
        append(searched, n, searched[0] ? ", " : "");
        append(searched, n, dir);
        append(searched, n, " (no such folder)");
        return NULL;
    }
    for (int i = 0; i < NLIB_NAMES; i++) {
        snprintf(path, pathlen, "%s/%s", dir, k_lib_names[i]);
        struct stat st;
        if (stat(path, &st) != 0) continue;
        void *lib = try_open(path, searched, n);
        if (lib) return lib;
    }
    append(searched, n, searched[0] ? ", " : "");
    append(searched, n, dir);
    return NULL;
}

/* Finds and dlopens the library, filling nv->path; NULL with msg if none. */
static void *find_library(tk_nvrtc *nv, const char *const *dirs, int ndirs, char *msg, size_t msglen) {
    char searched[2048] = "";
    const char *env = getenv("TK_NVRTC_PATH");
    if (env && env[0]) {    /* an explicit choice: nothing else is tried */
        void *lib;
        if (is_dir(env)) {
            lib = open_in_dir(env, nv->path, sizeof nv->path, searched, sizeof searched);
        } else {
            snprintf(nv->path, sizeof nv->path, "%s", env);
            lib = try_open(env, searched, sizeof searched);
        }
        if (!lib)
            tk_put(msg, msglen, "libnvrtc.so not found (TK_NVRTC_PATH=%s; searched: %s); point TK_NVRTC_PATH "
                             "at an NVRTC library or the folder holding it, or unset it", env, searched);
        return lib;
    }
    for (int i = 0; i < ndirs; i++) {
        void *lib = open_in_dir(dirs[i], nv->path, sizeof nv->path, searched, sizeof searched);
        if (lib) return lib;
    }
    const char *cuda_home = getenv("CUDA_HOME");
    if (cuda_home && cuda_home[0]) {
        char d[1024];
        snprintf(d, sizeof d, "%s/lib64", cuda_home);
        void *lib = open_in_dir(d, nv->path, sizeof nv->path, searched, sizeof searched);
        if (lib) return lib;
    }
    if (is_dir("/usr/local/cuda/lib64")) {
        void *lib = open_in_dir("/usr/local/cuda/lib64", nv->path, sizeof nv->path, searched, sizeof searched);
        if (lib) return lib;
    }
    for (int i = 0; i < NLIB_NAMES; i++) {
        snprintf(nv->path, sizeof nv->path, "%s", k_lib_names[i]);
        void *lib = try_open(k_lib_names[i], searched, sizeof searched);
        if (lib) return lib;
    }
    tk_put(msg, msglen, "libnvrtc.so not found (searched: %s); install nvidia-cuda-nvrtc or set TK_NVRTC_PATH",
        searched);
    return NULL;
}

/* Loads libnvrtc-builtins.so.<major>.<minor> from the folder NVRTC came
 * from. NVRTC dlopens it by name at the first compile, which relies on
 * NVRTC's own RUNPATH; when dlopen is intercepted (ASan) that lookup fails
 * with NVRTC_ERROR_BUILTIN_OPERATION_FAILURE. Loaded first, it is found by
 * its soname. A miss is harmless: NVRTC then searches as usual. */
static void preload_builtins(tk_nvrtc *nv) {
    Dl_info info;
    void *fn;
    memcpy(&fn, &nv->api.version, sizeof fn);
    if (!dladdr(fn, &info) || !info.dli_fname || !strchr(info.dli_fname, '/')) return;
    const char *slash = strrchr(info.dli_fname, '/');
    char path[1200];
    snprintf(path, sizeof path, "%.*s/libnvrtc-builtins.so.%d.%d", (int)(slash - info.dli_fname), info.dli_fname,
             nv->major, nv->minor);
    nv->builtins = dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

tk_status tk_nvrtc_open(const char *const *dirs, int ndirs, tk_nvrtc **out, char *msg, size_t msglen) {
    if (!out) return TK_ERR_INVALID;
    *out = NULL;
    tk_nvrtc *nv = calloc(1, sizeof *nv);
    if (!nv) {
        tk_put(msg, msglen, "out of memory");
        return TK_ERR_NOMEM;
    }
    nv->lib = find_library(nv, dirs, ndirs, msg, msglen);
    if (!nv->lib || !resolve(nv, msg, msglen)) {
        if (nv->lib) dlclose(nv->lib);
        free(nv);
        return TK_ERR_NOTFOUND;
    }
    query(nv);
    preload_builtins(nv);
    *out = nv;
    return TK_OK;
}

/* The libraries stay loaded: NVRTC's static constructors allocate memory
 * that unloading would leak (and a later tk_nvrtc_open reuses them). */
void tk_nvrtc_close(tk_nvrtc *nv) {
    free(nv);
}

const char *tk_nvrtc_path(const tk_nvrtc *nv) { return nv->path; }

int tk_nvrtc_version(const tk_nvrtc *nv) { return nv->major * 1000 + nv->minor * 10; }

tk_status tk_nvrtc_arch_for(const tk_nvrtc *nv, int sm, tk_arch *out, char *msg, size_t msglen) {
    out->sm = sm;
    out->ptx = 0;
    if (nv->narchs == 0) return TK_OK;
    int best = 0;
    for (int i = 0; i < nv->narchs; i++) {
        if (nv->archs[i] == sm) return TK_OK;
        if (nv->archs[i] < sm && nv->archs[i] > best) best = nv->archs[i];
    }
    if (best == 0) {
        tk_put(msg, msglen, "NVRTC %d.%d cannot compile for sm_%d (its oldest arch is sm_%d)", nv->major,
            nv->minor, sm, nv->archs[0]);
        return TK_ERR_NOTFOUND;
    }
    out->sm = best;     /* NVRTC older than the GPU: PTX the driver compiles */
    out->ptx = 1;
    return TK_OK;
}

int tk_nvrtc_options(tk_arch arch, char buf[32], const char *opts[TK_NVRTC_MAX_OPTIONS]) {
    snprintf(buf, 32, "-arch=%s_%d", arch.ptx ? "compute" : "sm", arch.sm);
    int n = 0;
    opts[n++] = "--std=c++17";
    opts[n++] = "-default-device";
    opts[n++] = buf;
    return n;
}

/* ---- compile logs ---------------------------------------------------------- */

/* Copies line number lineno (1-based) of text into out; 0 if there is none. */
static int nth_line(const char *text, long lineno, char *out, size_t n) {
    const char *p = text;
    for (long i = 1; i < lineno && p; i++) {
        p = strchr(p, '\n');
        if (p) p++;
    }
    if (!p || !*p || lineno < 1) return 0;
    const char *e = strchr(p, '\n');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    while (len > 0 && (*p == ' ' || *p == '\t')) p++, len--;
    snprintf(out, n, "%.*s", (int)(len < n ? len : n - 1), p);
    return 1;
}

/* Appends NVRTC's log to msg; after every "<file>(N): ..." line that names
 * the program or tk_kernel.h, the source line N it points at. */
static void append_log(char *msg, size_t msglen, const char *log, const char *name, const char *src) {
    const char *p = log;
    size_t name_len = strlen(name);
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len > 0) {
            char line[1024];
            snprintf(line, sizeof line, "\n  %.*s", (int)(len < 1000 ? len : 1000), p);
            append(msg, msglen, line);
            const char *text = NULL, *file = NULL;
            size_t skip = 0;
            if (len > name_len && strncmp(p, name, name_len) == 0 && p[name_len] == '(') {
                text = src, file = name, skip = name_len;
            } else if (strncmp(p, "tk_kernel.h(", 12) == 0) {
                text = tk_kernel_header(), file = "tk_kernel.h", skip = 11;
            }
            char code[512];
            if (text && nth_line(text, strtol(p + skip + 1, NULL, 10), code, sizeof code)) {
                snprintf(line, sizeof line, "\n      %s line %ld: %s", file, strtol(p + skip + 1, NULL, 10), code);
                append(msg, msglen, line);
            }
        }
        if (!e) break;
        p = e + 1;
    }
}

/* Copies the program's log into msg after a first line naming the failure. */
static void compile_error(tk_nvrtc *nv, nvrtcProgram prog, nvrtcResult r, const char *src, const char *name,
                          tk_arch arch, char *msg, size_t msglen) {
    tk_put(msg, msglen, "NVRTC %d.%d failed to compile %s for %s_%d (%s):", nv->major, nv->minor, name,
        arch.ptx ? "compute" : "sm", arch.sm, nv->api.error_string ? nv->api.error_string(r) : "error");
    size_t n = 0;
    if (nv->api.log_size(prog, &n) != 0 || n == 0) return;
    char *log = malloc(n + 1);
    if (!log) return;
    if (nv->api.log(prog, log) == 0) {
        log[n] = 0;
        append_log(msg, msglen, log, name, src);
    }
    free(log);
}

/* Fetches the cubin or the PTX of a compiled program. */
static tk_status fetch_output(tk_nvrtc *nv, nvrtcProgram prog, tk_arch arch, tk_binary *out, char *msg,
                              size_t msglen) {
    nvrtcResult (*size_fn)(nvrtcProgram, size_t *) = arch.ptx ? nv->api.ptx_size : nv->api.cubin_size;
    nvrtcResult (*get_fn)(nvrtcProgram, char *) = arch.ptx ? nv->api.ptx : nv->api.cubin;
    if (!size_fn || !get_fn) {
        tk_put(msg, msglen, "NVRTC %d.%d cannot produce cubins (needs 11.1 or newer)", nv->major, nv->minor);
        return TK_ERR_NOTFOUND;
    }
    size_t n = 0;
    if (size_fn(prog, &n) != 0 || n == 0) {
        tk_put(msg, msglen, "NVRTC produced no %s", arch.ptx ? "PTX" : "cubin");
        return TK_ERR_INVALID;
    }
    out->data = malloc(n);
    if (!out->data) {
        tk_put(msg, msglen, "out of memory");
        return TK_ERR_NOMEM;
    }
    if (get_fn(prog, out->data) != 0) {
        tk_binary_free(out);
        tk_put(msg, msglen, "NVRTC could not return the %s", arch.ptx ? "PTX" : "cubin");
        return TK_ERR_INVALID;
    }
    out->size = n;
    out->is_ptx = arch.ptx;
    return TK_OK;
}

tk_status tk_nvrtc_compile(tk_nvrtc *nv, const char *src, const char *name, tk_arch arch, tk_binary *out,
                           char *msg, size_t msglen) {
    if (!nv || !src || !name || !out) return TK_ERR_INVALID;
    memset(out, 0, sizeof *out);
    const char *header = tk_kernel_header(), *header_name = "tk_kernel.h";
    nvrtcProgram prog = NULL;
    nvrtcResult r = nv->api.create(&prog, src, name, 1, &header, &header_name);
    if (r != 0) {
        tk_put(msg, msglen, "nvrtcCreateProgram failed: %s", nv->api.error_string ? nv->api.error_string(r) : "?");
        return TK_ERR_NOMEM;
    }
    char buf[32];
    const char *opts[TK_NVRTC_MAX_OPTIONS];
    int nopts = tk_nvrtc_options(arch, buf, opts);
    r = nv->api.compile(prog, nopts, opts);
    tk_status st = TK_OK;
    if (r != 0) {
        compile_error(nv, prog, r, src, name, arch, msg, msglen);
        st = TK_ERR_CHECK;
    } else {
        st = fetch_output(nv, prog, arch, out, msg, msglen);
    }
    nv->api.destroy(&prog);
    return st;
}

void tk_binary_free(tk_binary *b) {
    if (!b) return;
    free(b->data);
    b->data = NULL;
    b->size = 0;
}
