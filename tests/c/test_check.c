/* test_check.c - specs that parse but are wrong: each must fail to load
 * with its exact "file:line:col: error: message"; a few tricky valid specs
 * must load and report the expected schema. Usage: test_check OPS TESTS */
#include "tk.h"
#include "tk_test.h"

typedef struct bad_spec {
    const char *text;
    const char *error;      /* expected tk_ctx_error, exactly */
} bad_spec;

#define HDR "op f(x: float32[N], n: int) -> y: float32[N]:\n    for i in y:\n"

static const bad_spec k_bad[] = {
    {HDR "        y[i] = x[j]\n", "bad.tk:3:18: error: unknown name 'j'"},
    {HDR "        y[i] = x[i, i]\n", "bad.tk:3:16: error: 'x' takes 1 indices (one per explicit dim), got 2"},
    {HDR "        y[0] = x[i]\n", "bad.tk:3:9: error: an output can only be written at the loop index: y[i]"},
    {HDR "        x[i] = 1.0\n", "bad.tk:3:9: error: input 'x' is read-only"},
    {HDR "        y[i] += x[i]\n", "bad.tk:3:9: error: outputs are write-only: accumulate in a local, then store with '='"},
    {HDR "        s = y[i]\n        y[i] = s\n", "bad.tk:3:13: error: output 'y' is write-only; keep values in a local"},
    {HDR "        n = 3\n        y[i] = x[i]\n",
     "bad.tk:3:9: error: cannot assign to 'n': it is a parameter, dim, tensor or loop variable"},
    {HDR "        k = 1\n        k = 2.5\n        y[i] = x[i]\n",
     "bad.tk:4:9: error: 'k' is an int; converting a float32 needs int(...)"},
    {HDR "        if i:\n            y[i] = x[i]\n",
     "bad.tk:3:12: error: an 'if' condition must be a bool, got int (compare explicitly)"},
    {HDR "        y[i] = x[i * 1.5]\n", "bad.tk:3:20: error: an index must be an int, not float32"},
    {HDR "        y[i] = foo(x[i])\n", "bad.tk:3:16: error: unknown function 'foo'"},
    {HDR "        y[i] = min(x[i])\n", "bad.tk:3:16: error: min() takes 2 arguments, got 1"},
    {HDR "        if True:\n            t = 1\n        y[i] = t\n", "bad.tk:5:16: error: unknown name 't'"},
    {HDR "        for u in range(n):\n            u = 2\n        y[i] = x[i]\n",
     "bad.tk:4:13: error: cannot assign to loop variable 'u'"},
    {HDR "        y[i] = x\n", "bad.tk:3:16: error: tensor 'x' must be indexed, e.g. x[...]"},
    {HDR "        y[i] = x[i] and True\n", "bad.tk:3:21: error: 'and' needs bools, got float32 and bool"},
    {"op f(x: float32[N]) -> y: int32[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:3:16: error: output 'y' (int32) is an int; converting a float32 needs int(...)"},
    {"op f(x: float32[N]) -> y: float32[M]:\n    for i in y:\n        y[i] = 0.0\n",
     "bad.tk:1:35: error: unknown name 'M' in an output dim"},
    {"op f(x: float32[N]) -> y: float32[N]:\n    for i, j in y:\n        y[i] = 0.0\n",
     "bad.tk:2:17: error: 'y' has 1 explicit dims, so the loop needs 1 variables, not 2"},
    {"op f(x: float32[N]) -> y: float32[N]:\n    for i in x:\n        y[i] = 0.0\n",
     "bad.tk:2:14: error: the top-level loop must run over an output, and 'x' is not one"},
    {"op f(x: float32[N], k: q.dtype[N]) -> y: float32[N]:\n    for i in y:\n        y[i] = 0.0\n",
     "bad.tk:1:24: error: 'q.dtype' must name a tensor parameter declared before 'k'"},
    {"op f(x: float32[N], x: int) -> y: float32[N]:\n    for i in y:\n        y[i] = 0.0\n",
     "bad.tk:1:21: error: 'x' is declared twice (first at line 1)"},
    {"op f(x: float32[N, ...]) -> y: float32[N]:\n    for i in y:\n        y[i] = 0.0\n",
     "bad.tk:1:20: error: '...' may only be the first dim of 'x'"},
    {"op f(x: float32[N], h: float? = 1.0) -> y: float32[N]:\n    for i in y:\n        y[i] = 0.0\n",
     "bad.tk:1:21: error: only int parameters can be optional ('int?')"},
    {"op f(x: float32[N], h: int? = N / 2) -> y: float32[N]:\n    for i in y:\n        y[i] = 0.0\n",
     "bad.tk:1:33: error: a default must be an int expression: use '//' instead of '/'"},
    {"op f(x: float32[N]) -> y: float32|float64[N]:\n    for i in y:\n        y[i] = 0.0\n",
     "bad.tk:1:27: error: an output's dtype must be one dtype or 'x.dtype'"},
    {"op f(x: int[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i] * 0.5\n",
     "bad.tk:3:21: error: output 'y' (uint8) is an int; converting a float32 needs int(...) (in the u8 variant)"},
    {"op f(x: float32[N]) -> y: float32[N]:\n    for i in y:\n        y[i] = 0.0\n"
     "op f(x: float32[N]) -> y: float32[N]:\n    for i in y:\n        y[i] = 1.0\n",
     "bad.tk:4:4: error: op 'f' is already defined"},
};

typedef struct good_spec {
    const char *text;
    const char *schema;
} good_spec;

static const good_spec k_good[] = {
    {"op g(x: float[N], flag: bool = True, eps: float = -0.5, n: int = 3) -> y: x.dtype[N]:\n"
     "    for i in y:\n"
     "        v = x[i] if flag else -x[i]\n"
     "        if v > 0.0 and not flag:\n"
     "            v = v * 2\n"
     "        elif v < 0.0:\n"
     "            v = max(v, float(n))\n"
     "        else:\n"
     "            pass\n"
     "        y[i] = sigmoid(v) + eps + abs(floor(v) // 3 % 2) + sqrt(exp(log(2.0))) ** 2\n",
     "g(Tensor x, bool flag=True, float eps=-0.5, int n=3) -> Tensor"},
    {"op two(a: int32[..., K]) -> (p: int64[..., K], q: float32[..., K]):\n"
     "    for k in p:\n"
     "        p[k] = a[k] // 2\n"
     "        q[k] = float32(a[k]) / 2\n",
     "two(Tensor a) -> (Tensor, Tensor)"},
};

int main(void) {
    for (size_t i = 0; i < sizeof k_bad / sizeof k_bad[0]; i++) {
        tk_ctx *ctx = tk_ctx_new();
        int st = tk_load_spec(ctx, "bad.tk", k_bad[i].text, strlen(k_bad[i].text));
        int ok = st != TK_OK && strcmp(tk_ctx_error(ctx), k_bad[i].error) == 0;
        if (!ok)
            fprintf(stderr, "bad spec %zu: expected\n  %s\ngot (status %d)\n  %s\n", i, k_bad[i].error, st,
                    tk_ctx_error(ctx));
        CHECK(ok);
        CHECK(tk_op_count(ctx) == 0);   /* a failed load adds nothing */
        tk_ctx_free(ctx);
    }
    for (size_t i = 0; i < sizeof k_good / sizeof k_good[0]; i++) {
        tk_ctx *ctx = tk_ctx_new();
        int st = tk_load_spec(ctx, "good.tk", k_good[i].text, strlen(k_good[i].text));
        if (st != TK_OK) fprintf(stderr, "good spec %zu: %s\n", i, tk_ctx_error(ctx));
        CHECK(st == TK_OK);
        if (st == TK_OK) {
            CHECK(strcmp(tk_op_schema(tk_op_at(ctx, 0)), k_good[i].schema) == 0);
            for (int t = 0; t < 2; t++) {
                char *src = NULL;
                CHECK(tk_emit(ctx, tk_op_at(ctx, 0), (tk_target)t, &src) == TK_OK && src && strlen(src) > 100);
                tk_free(src);
            }
        }
        tk_ctx_free(ctx);
    }
    return tk_test_report("test_check");
}
