/* dtype.c - the element types: names, short codes and sizes (a leaf: it
 * calls nothing else of the core). */
#include <string.h>

#include "core.h"

/* ORDER DTYPE */
static const struct {
    const char *name, *code;
    size_t size;
} k_dtypes[TK_DTYPE_COUNT] = {
    {"bool", "b8", 1},      {"uint8", "u8", 1},   {"int8", "i8", 1},
    {"int16", "i16", 2},    {"int32", "i32", 4},  {"int64", "i64", 8},
    {"float16", "f16", 2},  {"bfloat16", "bf16", 2},
    {"float32", "f32", 4},  {"float64", "f64", 8},
};

const char *tk_dtype_name(tk_dtype d) {
    return (unsigned)d < TK_DTYPE_COUNT ? k_dtypes[d].name : "?";
}

const char *tk_dtype_code(tk_dtype d) {
    return (unsigned)d < TK_DTYPE_COUNT ? k_dtypes[d].code : "?";
}

size_t tk_dtype_size(tk_dtype d) {
    return (unsigned)d < TK_DTYPE_COUNT ? k_dtypes[d].size : 0;
}

int tk_dtype_from_name(const char *name, tk_dtype *out) {
    if (!name || !out) return 0;
    for (int i = 0; i < TK_DTYPE_COUNT; i++)
        if (strcmp(k_dtypes[i].name, name) == 0) {
            *out = (tk_dtype)i;
            return 1;
        }
    return 0;
}
