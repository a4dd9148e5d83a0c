/* test_golden.c - the generated C and CUDA source of every op in ops/ must
 * equal tests/golden/<spec>.c and .cu byte for byte, and its plans (`tkc
 * plan`, every variant, CPU then CUDA) tests/golden/<spec>.plan. Regenerate the golden
 * files with `make golden` after an intended change to the emitters.
 * Usage: test_golden OPS_DIR TESTS_DIR */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdlib.h>

#include "tk.h"
#include "tk_test.h"

/* A growing string. */
typedef struct {
    char *p;
    size_t len;
} tk_buf_t;

static void append(tk_buf_t *b, const char *s) {
    size_t n = strlen(s);
    char *q = realloc(b->p, b->len + n + 1);
    if (!q) return;
    memcpy(q + b->len, s, n + 1);
    b->p = q;
    b->len += n;
}

/* Emits every op of one spec file for each target and compares with the
 * golden sources, then its plans with the golden plans. */
static void check_spec(const char *ops_dir, const char *tests_dir, const char *name) {
    size_t len;
    char *text = read_spec(ops_dir, name, &len);
    CHECK(text != NULL);
    if (!text) return;
    char file[512], gold_name[512];
    snprintf(file, sizeof file, "ops/%s", name);
    tk_ctx *ctx = tk_ctx_new();
    int st = tk_load_spec(ctx, file, text, len);
    if (st != TK_OK) fprintf(stderr, "%s\n", tk_ctx_error(ctx));
    CHECK(st == TK_OK);
    for (int target = 0; st == TK_OK && target < 2; target++) {
        {
            size_t total = 0;
            char *all = NULL;
            for (int i = 0; i < tk_op_count(ctx); i++) {
                char *src = NULL;
                CHECK(tk_emit(ctx, tk_op_at(ctx, i), (tk_target)target, &src) == TK_OK);
                if (!src) continue;
                size_t n = strlen(src);
                char *p = realloc(all, total + n + 1);
                if (!p) break;
                all = p;
                memcpy(all + total, src, n + 1);
                total += n;
                tk_free(src);
            }
            snprintf(gold_name, sizeof gold_name, "golden/%.*s.%s", (int)(strlen(name) - 3), name,
                     target ? "cu" : "c");
            size_t glen;
            char *gold = read_spec(tests_dir, gold_name, &glen);
            int same = gold && all && glen == total && memcmp(gold, all, total) == 0;
            if (!same)
                fprintf(stderr, "tests/%s differs from the generated source (run `make golden` "
                                "if the change is intended)\n", gold_name);
            CHECK(same);
            free(gold);
            free(all);
        }
    }
    /* the plans (tkc plan --target cpu, then cuda): every variant, the spec's schedule alone */
    tk_buf_t plan = {0};
    for (int target = 0; st == TK_OK && target < 2; target++)
        for (int i = 0; i < tk_op_count(ctx); i++)
            for (int v = 0; v < tk_op_nvariants(tk_op_at(ctx, i)); v++) {
                char *t = NULL;
                CHECK(tk_plan_text(ctx, tk_op_at(ctx, i), v, (tk_target)target, 0, NULL, &t) == TK_OK);
                if (t) append(&plan, t);
                tk_free(t);
            }
    if (st == TK_OK) {
        snprintf(gold_name, sizeof gold_name, "golden/%.*s.plan", (int)(strlen(name) - 3), name);
        size_t glen;
        char *gold = read_spec(tests_dir, gold_name, &glen);
        int same = gold && plan.p && glen == plan.len && memcmp(gold, plan.p, glen) == 0;
        if (!same)
            fprintf(stderr, "tests/%s differs from the plans (run `make golden` if the change is intended)\n",
                    gold_name);
        CHECK(same);
        free(gold);
    }
    free(plan.p);
    tk_ctx_free(ctx);
    free(text);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_golden OPS_DIR TESTS_DIR\n");
        return 2;
    }
    unsetenv("TK_CUDA_TUNE");   /* the goldens are the default tile shapes */
    DIR *d = opendir(argv[1]);
    CHECK(d != NULL);
    int nspecs = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        if (n > 3 && strcmp(e->d_name + n - 3, ".tk") == 0) {
            check_spec(argv[1], argv[2], e->d_name);
            nspecs++;
        }
    }
    if (d) closedir(d);
    CHECK(nspecs >= 2);
    return tk_test_report("test_golden");
}
