/* tk_test.h - the few helpers the C tests share: CHECK counts failures and
 * names the failing line; read_spec loads a file from the ops directory. */
#ifndef TK_TEST_H
#define TK_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tk_test_failures;

#define CHECK(cond)                                                        \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            tk_test_failures++;                                            \
        }                                                                  \
    } while (0)

/* Reads dir/name into a malloc'd NUL-terminated string (NULL on error). */
static inline char *read_spec(const char *dir, const char *name, size_t *len) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p) p[n] = 0;
    *len = (size_t)n;
    return p;
}

static inline int tk_test_report(const char *name) {
    if (tk_test_failures) fprintf(stderr, "%s: %d check(s) failed\n", name, tk_test_failures);
    else printf("%s: all checks passed\n", name);
    return tk_test_failures != 0;
}

#endif
