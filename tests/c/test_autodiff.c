/* test_autodiff.c - 'backward auto' (compiler/autodiff.c): what cannot be
 * derived is a load error with its exact "file:line:col: error: message" and
 * adds no op; what can is a checked op named <op>_backward that the forward
 * names and links, whose text is fixed (a golden), deterministic, loads as a
 * spec of its own, and whose names never take the spec's. The values of
 * derived gradients are tests/python/test_backward_auto.py's; their kernels
 * in every form, test_variants' (tests/specs/autodiff.tk).
 * Usage: test_autodiff OPS TESTS */
#include "core.h"
#include "tk.h"
#include "tk_test.h"

typedef struct bad_spec {
    const char *text;
    const char *error;      /* expected tk_ctx_error, exactly */
} bad_spec;

#define OP "op f(x: float[N]) -> y: x.dtype[N]:\n    backward auto\n    for i in y:\n"
#define ROW "op f(x: float[R, N]) -> y: x.dtype[R, N]:\n    backward auto\n    for r, _ in y:\n"
#define S5 "        s = s * 1.01 + sin(s)\n        s = s * 1.01 + sin(s)\n        s = s * 1.01 + sin(s)\n" \
    "        s = s * 1.01 + sin(s)\n        s = s * 1.01 + sin(s)\n"
#define S20 S5 S5 S5 S5

static const bad_spec k_bad[] = {
    {OP "        y[i] = x[(i + 1) % N]\n",
     "bad.tk:4:16: error: backward auto of 'f': x[((i + 1) % N)]: it differentiates reads at the loop's index [i] "
     "and, of a tensor without '...', at its last variables (a broadcast); write the backward ops of this op"},
    {OP "        s = 0.0\n        for j in range(3):\n            s += x[i]\n        y[i] = s\n",
     "bad.tk:6:18: error: backward auto of 'f': x[i]: it differentiates reads at the loop's index [i, j] and, of "
     "a tensor without '...', at its last variables (a broadcast); write the backward ops of this op"},
    /* the element-wise form with inner loops: a row (the loop's index) and the dim its loops walk */
    {"op f(x: float[R, N], b: x.dtype[R]) -> y: x.dtype[R]:\n    backward auto\n    for r in y:\n        s = 0.0\n"
     "        for i in range(N):\n            s += x[r, i]\n        y[r] = s\n        for i in range(N):\n"
     "            y[r] = x[r, i]\n",
     "bad.tk:9:13: error: backward auto of 'f': 'y' is stored both in an inner loop and outside: it "
     "differentiates an output stored in one inner loop or at the row's level; write the backward ops of this op"},
    {"op f(x: float[R, N], b: x.dtype[R]) -> y: x.dtype[R]:\n    backward auto\n    for r in y:\n        s = 0.0\n"
     "        for i in range(4):\n            s += float(i)\n        y[r] = b[r] * s\n",
     "bad.tk:3:14: error: backward auto of 'f': its inner loops read no tensor: there is no dim along the row to "
     "differentiate; write the backward ops of this op"},
    {"op f(x: float[R, N], n: int32[R, N]) -> y: x.dtype[R, N]:\n    backward auto\n    for r, _ in y:\n"
     "        s = 0.0\n        for i in range(N):\n            s += float(n[r, i])\n        for i in range(N):\n"
     "            y[r, i] = s\n",
     "bad.tk:3:17: error: backward auto of 'f': its inner loops read no float tensor: there is nothing along the "
     "row to differentiate; write the backward ops of this op"},
    {"op f(x: float[R, N], z: x.dtype[R, M]) -> y: x.dtype[R]:\n    backward auto\n    for r in y:\n        s = 0.0\n"
     "        for i in range(N):\n            s += x[r, i]\n        for j in range(M):\n            s += z[r, j]\n"
     "        y[r] = s\n",
     "bad.tk:8:18: error: backward auto of 'f': 'z' is read at j, but its dim 'M' is not dim 'N' of the tensors "
     "its inner loops read, which j runs over: name them alike"},
    /* row loops: what it does not differentiate, each at its place */
    {"op f(x: float[R, N]) -> y: x.dtype[R, N]:\n    backward auto\n    for _, _ in y:\n        for r in range(R):\n"
     "            for i in range(N):\n                y[r, i] = x[r, i]\n",
     "bad.tk:3:17: error: backward auto of 'f': a row loop that owns several dims: it differentiates row loops "
     "that own one dim ('_' once in the loop) and store with '='; write the backward ops of this op"},
    {"op f(x: float[R, N]) -> y: x.dtype[N]:\n    backward auto\n    for _ in y:\n        for r in range(R):\n"
     "            for i in range(N):\n                y[i] += x[r, i]\n",
     "bad.tk:3:14: error: backward auto of 'f': a sum ('+=' into an output): it differentiates row loops that own "
     "one dim ('_' once in the loop) and store with '='; write the backward ops of this op"},
    {ROW "        s = x[r, 0]\n        for i in range(N):\n            y[r, i] = x[r, i] * s\n",
     "bad.tk:4:13: error: backward auto of 'f': x[r, 0]: outside its inner loops a row's tensors are read at the "
     "row's index [r] (along the row: in an inner loop `for i in range(...)`, at [r, i]); write the backward ops "
     "of this op"},
    {ROW "        y[r, 0] = 1.0\n        for i in range(N):\n            y[r, i] = x[r, i]\n",
     "bad.tk:4:9: error: backward auto of 'f': y[r, 0]: outside its inner loops a row's tensors are stored at "
     "the row's index [r] (along the row: in an inner loop `for i in range(...)`, at [r, i]); write the backward "
     "ops of this op"},
    {ROW "        for i in range(N - 1):\n            y[r, i] = x[r, i + 1]\n",
     "bad.tk:5:23: error: backward auto of 'f': x[r, (i + 1)]: it differentiates reads at the loop's index "
     "[r, i] and, of a tensor without '...', at its last variables (a broadcast); write the backward ops of this "
     "op"},
    {ROW "        s = 1.0\n        for i in range(N):\n            s *= x[r, i]\n        for i in range(N):\n"
     "            y[r, i] = s\n",
     "bad.tk:7:9: error: backward auto of 'f': an inner loop after a scan: it differentiates a scan that is the "
     "row's only inner loop; write the backward ops of this op"},
    {ROW "        s = 0.0\n        for i in range(N):\n            if x[r, i] > 0.0:\n                s += x[r, i]\n"
     "        for i in range(N):\n            y[r, i] = s\n",
     "bad.tk:8:9: error: backward auto of 'f': an inner loop after a scan: it differentiates a scan that is the "
     "row's only inner loop; write the backward ops of this op"},
    /* scans (autodiff_scan.c) */
    {ROW "        s = 0.0\n        for i in range(1, N):\n            s += x[r, i]\n            y[r, i] = s\n",
     "bad.tk:5:9: error: backward auto of 'f': a scan over part of the row: it differentiates scans over the "
     "whole owned dim (`range(N)`); write the backward ops of this op"},
    {ROW "        s = 0.0\n        for i in range(N):\n            y[r, i] = s\n        for i in range(N):\n"
     "            s = s * 0.5 + x[r, i]\n            y[r, i] = s\n",
     "bad.tk:7:9: error: backward auto of 'f': a scan after another inner loop: it differentiates a scan that is "
     "the row's only inner loop; write the backward ops of this op"},
    {ROW "        n = 0\n        s = 0.0\n        for i in range(N):\n            n = n * 2 + 1\n"
     "            s = s + x[r, i] * float(n)\n            y[r, i] = s\n",
     "bad.tk:7:13: error: backward auto of 'f': 'n' is not a float and the scan carries it from step to step: it "
     "differentiates scans that carry floats; write the backward ops of this op"},
    {"op f(x: float[R, N]) -> y: x.dtype[R]:\n    backward auto\n    for r in y:\n        s = 0.0\n"
     "        for i in range(N):\n            s = s * 0.5 + x[r, i]\n        y[r] = s\n",
     "bad.tk:5:9: error: backward auto of 'f': a scan in the element-wise form: it differentiates scans in row "
     "loops (`for r, _ in y`, the loop owning the dim the scan walks); write the backward ops of this op"},
    {"op f(x: float[R, N]) -> y: x.dtype[R, N]:\n    backward auto 2\n    for r, _ in y:\n        s = 0.0\n"
     "        for i in range(N):\n            s = s * 0.5 + x[r, i]\n            y[r, i] = s\n",
     "bad.tk:2:14: error: backward auto of 'f_backward': second derivatives of a scan are not derived (its derived "
     "op keeps the scan's states in scratch tensor 'ads0'): use 'backward auto', or write the backward ops of 'f' "
     "(line 4 of its derived op, which `tkc derived` prints)"},
    {ROW "        s = 0.0\n        for i in range(N):\n            s += x[r, i]\n            s = max(s, x[r, i])\n"
     "        for i in range(N):\n            y[r, i] = s\n",
     "bad.tk:7:13: error: backward auto of 'f': 's' is both summed and a max in the inner loop: write the "
     "backward ops of this op"},
    {ROW "        for i in range(N):\n            y[r, i] = x[r, i]\n        for i in range(N):\n"
     "            y[r, i] = y[r, i] * 2.0\n",
     "bad.tk:7:13: error: backward auto of 'f': 'y' is stored in two inner loops (the second reads or overwrites "
     "the first's values): it differentiates an output stored in one inner loop; write the backward ops of this "
     "op"},
    {ROW "        for i in range(N):\n            for j in range(N):\n                y[r, i] = x[r, j]\n",
     "bad.tk:5:13: error: backward auto of 'f': a loop inside a row loop's inner loop: it differentiates one "
     "level of inner loops; write the backward ops of this op"},
    {ROW "        if R > 2:\n            for i in range(N):\n                y[r, i] = x[r, i]\n",
     "bad.tk:5:13: error: backward auto of 'f': an inner loop under an 'if': it differentiates inner loops at "
     "the row's own level; write the backward ops of this op"},
    {"op f(x: mut float[N], d: x.dtype[N]):\n    backward auto\n    for i in x:\n        x[i] = x[i] + d[i]\n",
     "bad.tk:1:6: error: backward auto of 'f': 'mut' parameter 'x': an op that updates in place has no backward"},
    {OP "        y[i] = x[i]\nop f_backward(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:2:14: error: backward auto of 'f': op 'f_backward' is already defined (the derived backward op "
     "takes that name)"},
    {"op f(x: float[N]) -> y: x.dtype[N]:\n    backward auto, g\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:2:14: error: 'backward auto' derives every gradient of 'f': it stands alone on its line"},
    {"op f(x: float[N]) -> y: x.dtype[N]:\n    backward g, auto\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:2:17: error: 'backward auto' derives every gradient of 'f': it stands alone on its line"},
    {"op f(x: float[N]) -> y: x.dtype[N]:\n    backward auto\n    backward g\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:3:5: error: duplicate 'backward' line (list every backward op of 'f' on one line: backward a, b)"},
    {"op f(x: any[N]) -> y: float32[N]:\n    backward auto\n    for i in y:\n        y[i] = float32(x[i])\n",
     "bad.tk:1:6: error: backward auto of 'f': parameter 'x' may be a float or not: give it float dtypes only, "
     "or none"},
    {"op f(x: int32[N]) -> y: float32[N]:\n    backward auto\n    for i in y:\n        y[i] = float32(x[i])\n",
     "bad.tk:1:4: error: backward auto of 'f': 'f' has no float tensor parameter to differentiate"},
    {"op f(x: float[N], n: int32[N]) -> y: float32[N]:\n    backward auto\n    for i in y:\n        y[i] = float32(n[i])\n",
     "bad.tk:1:4: error: backward auto of 'f': the body reads no float tensor parameter: there is nothing to "
     "differentiate"},
    {"op f(x: float[M], z: x.dtype[N]) -> y: x.dtype[N]:\n    backward auto\n    for i in y:\n"
     "        y[i] = x[i] + z[i]\n",
     "bad.tk:4:16: error: backward auto of 'f': 'x' is read at i, but its dim 'M' is not dim 'N' of 'y', which i "
     "runs over: name them alike"},
    {"op f(x: float[..., N], w: float[..., N]) -> y: x.dtype[..., N]:\n    backward auto\n    for i in y:\n"
     "        y[i] = x[i] * w[i]\nop f2(x: float[..., M, N], w: x.dtype[..., N]) -> y: x.dtype[..., M, N]:\n"
     "    backward auto\n    for j, i in y:\n        y[j, i] = x[j, i] * w[i]\n",
     "bad.tk:8:29: error: backward auto of 'f2': w[i]: it differentiates reads at the loop's index [j, i] and, of "
     "a tensor without '...', at its last variables (a broadcast); write the backward ops of this op"},
    {"op f(x: float[N]) -> y: x.dtype[N + 1]:\n    backward auto\n    for i in y:\n        y[i] = 1.0\n",
     "bad.tk:1:35: error: backward auto of 'f': output 'y' has a dim computed from parameters: its gradient, a "
     "parameter of the backward op, needs dims that input tensors name"},
    {"op f(x: float[N], N2: int) -> y: x.dtype[N2, N]:\n    backward auto\n    for a, b in y:\n"
     "        y[a, b] = x[b] * float(a)\n",
     "bad.tk:1:42: error: backward auto of 'f': output 'y' has a dim computed from parameters: its gradient, a "
     "parameter of the backward op, needs dims that input tensors name"},
    /* a refusal of the second derivation is at the user's line, with the line of the derived op */
    {"op f(a: float[N], b: a.dtype[N], c: a.dtype[N], d: a.dtype[N], e: a.dtype[N]) -> y: a.dtype[N]:\n"
     "    backward auto 2\n    for i in y:\n        y[i] = a[i] * b[i] + c[i] * d[i] * e[i]\n",
     "bad.tk:2:14: error: backward auto of 'f_backward': its backward op would take and return 17 tensors "
     "(limit 16) (line 2 of its derived op, which `tkc derived` prints)"},
    /* a body too long for the locals its derived op needs: a clear refusal, not "please report it" */
    {OP "        s = x[i]\n" S20 S20 S20 "        y[i] = s\n",
     "bad.tk:2:14: error: backward auto of 'f': its derived op needs more locals than an op may have (256: it "
     "takes one an operation of the body and one an adjoint): split the op, or write its backward ops"},
    {"op f(x: float[N], n: int32[N]) -> y: int32[N]:\n    backward auto\n    for i in y:\n        y[i] = n[i]\n",
     "bad.tk:3:14: error: backward auto of 'f': the loop's output 'y' is not a float tensor"},
    {"op f(x: float[N], grad_x: x.dtype[N]) -> y: x.dtype[N]:\n    backward auto\n    for i in y:\n"
     "        y[i] = x[i] * grad_x[i]\n",
     "bad.tk:1:19: error: backward auto of 'f': parameter 'grad_x' has the name of a gradient the backward op "
     "takes or returns: rename it"},
    {"op f(x: float[N], grad_y: x.dtype[N]) -> y: x.dtype[N]:\n    backward auto\n    for i in y:\n"
     "        y[i] = x[i] * grad_y[i]\n",
     "bad.tk:1:19: error: backward auto of 'f': parameter 'grad_y' has the name of a gradient the backward op "
     "takes or returns: rename it"},
    {"op f(x: float[N]) -> y: x.dtype[N]:\n    backward auto 2\n    for i in y:\n        y[i] = x[i] * x[i]\n"
     "op f_backward_backward(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:2:14: error: backward auto of 'f_backward': op 'f_backward_backward' is already defined (the "
     "derived backward op takes that name)"},
    {"op f(x: float[N]) -> y: x.dtype[N]:\n    backward auto 4\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:2:19: error: 'backward auto 4': the order of derivatives runs from 1 to 2"},
    {"op f(x: float[N]) -> y: x.dtype[N]:\n    backward auto 3\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:2:19: error: 'backward auto 3': the order of derivatives runs from 1 to 2"},
    {"op f(x: float[N]) -> y: x.dtype[N]:\n    backward auto 2 3\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:2:21: error: expected NEWLINE after 'backward auto N', found '3'"},
    {"op f(x: float[N]) -> y: x.dtype[N]:\n    backward auto\n    scratch t: x.dtype[N]\n    for i in y:\n"
     "        t[i] = x[i]\n        y[i] = x[i]\n",
     "bad.tk:3:13: error: backward auto of 'f': scratch tensor 't': write the backward ops of this op"},
};

/* The backward op of sp, exactly: the tape (a declaration names its value;
 * a float made in a branch is 0 outside it), the incoming gradient in the
 * op's float type, guards, reverse accumulation, dead lines dropped
 * (the else branch's replay of x / beta is not needed),
 * parameters with defaults after the gradient. A local named ad1 moves
 * every derived name to the prefix tk_ad. */
static const char k_sp[] =
    "op sp(x: float[N], beta: float = 1.0) -> y: x.dtype[N]:\n"
    "    backward auto\n"
    "    for i in y:\n"
    "        ad1 = beta * x[i]\n"
    "        y[i] = x[i] if ad1 > 20.0 else log1p(exp(ad1)) / beta\n";
static const char k_sp_backward[] =
    "# derived by 'backward auto' from 'sp' (sp.tk:1)\n"
    "op sp_backward(x: float[N], grad_y: x.dtype[N], beta: float = 1.0)\n"
    "        -> (grad_x: x.dtype[N]):\n"
    "    for i in grad_x:\n"
    "        tk_ad0 = x[i]\n"
    "        tk_ad1 = beta * tk_ad0\n"
    "        tk_ad2 = tk_ad1 > 20.0\n"
    "        tk_ad3 = not tk_ad2\n"
    "        tk_ad4 = exp(tk_ad1) if tk_ad3 else 0.0\n"
    "        tk_add8 = float(grad_y[i])\n"
    "        tk_add0 = tk_add8 if tk_ad2 else 0.0\n"
    "        tk_add6 = tk_add8 if tk_ad3 else 0.0\n"
    "        tk_add5 = (tk_add6 / beta) if tk_ad3 else 0.0\n"
    "        tk_add4 = (tk_add5 / (1.0 + tk_ad4)) if tk_ad3 else 0.0\n"
    "        tk_add1 = (tk_add4 * tk_ad4) if tk_ad3 else 0.0\n"
    "        tk_add0 += (tk_add1 * beta)\n"
    "        grad_x[i] = tk_add0\n";

static int error_fields_ok(const tk_ctx *ctx, int st) {
    const tk_error *e = tk_ctx_last_error(ctx);
    char want[sizeof e->text];
    snprintf(want, sizeof want, "%s:%d:%d: error: %s", e->file, e->line, e->col, e->message);
    return e->status == st && strcmp(e->file, "bad.tk") == 0 && e->line > 0 && e->col > 0 &&
           strcmp(e->text, want) == 0;
}

static void test_bad(void) {
    for (size_t i = 0; i < sizeof k_bad / sizeof k_bad[0]; i++) {
        tk_ctx *ctx = tk_ctx_new();
        int st = tk_load_spec(ctx, "bad.tk", k_bad[i].text, strlen(k_bad[i].text));
        int ok = st != TK_OK && strcmp(tk_ctx_error(ctx), k_bad[i].error) == 0;
        if (!ok)
            fprintf(stderr, "bad spec %zu: expected\n  %s\ngot (status %d)\n  %s\n", i, k_bad[i].error, st,
                    tk_ctx_error(ctx));
        CHECK(ok);
        CHECK(error_fields_ok(ctx, st));
        CHECK(tk_op_count(ctx) == 0);   /* a failed load adds nothing */
        tk_ctx_free(ctx);
    }
}

/* sp's backward: named, linked, its text the golden, its schema; the text
 * loads again as a spec of its own (no forward needed) and derives alike. */
static void test_golden(void) {
    tk_ctx *ctx = tk_ctx_new();
    CHECK(tk_load_spec(ctx, "sp.tk", k_sp, strlen(k_sp)) == TK_OK);
    CHECK(tk_ctx_link(ctx) == TK_OK);
    const tk_op *f = tk_op_find(ctx, "sp"), *b = tk_op_find(ctx, "sp_backward");
    CHECK(f && b && tk_op_count(ctx) == 2);
    if (!f || !b) {
        tk_ctx_free(ctx);
        return;
    }
    CHECK(tk_op_nbackward(f) == 1 && strcmp(tk_op_backward_at(f, 0), "sp_backward") == 0);
    CHECK(b->decl->derived_from && strcmp(b->decl->derived_from, "sp") == 0 && !f->decl->derived_from);
    CHECK(strcmp(b->decl->file, "sp.tk (backward auto of sp)") == 0);
    if (strcmp(b->decl->text, k_sp_backward) != 0) fprintf(stderr, "derived:\n%s", b->decl->text);
    CHECK(strcmp(b->decl->text, k_sp_backward) == 0);
    CHECK(strcmp(tk_op_schema(b), "sp_backward(Tensor x, Tensor grad_y, float beta=1.0) -> Tensor") == 0);
    CHECK(tk_op_backward_target(ctx, f, 0, 0) == 0);   /* grad_x is x's */
    tk_ctx *again = tk_ctx_new();
    CHECK(tk_load_spec(again, "d.tk", b->decl->text, strlen(b->decl->text)) == TK_OK);
    CHECK(tk_load_spec(again, "sp.tk", k_sp, strlen(k_sp)) != TK_OK);   /* sp_backward is taken now */
    tk_ctx_free(again);
    again = tk_ctx_new();
    CHECK(tk_load_spec(again, "sp.tk", k_sp, strlen(k_sp)) == TK_OK);   /* deterministic */
    const tk_op *b2 = tk_op_find(again, "sp_backward");
    CHECK(b2 && strcmp(b2->decl->text, b->decl->text) == 0);
    tk_ctx_free(again);
    tk_ctx_free(ctx);
}

/* Every op of tests/specs/autodiff.tk derives a backward op that links,
 * takes grad_<output> for its float outputs and returns a gradient for each
 * float parameter its forward reads. */
static void test_spec_file(const char *tests) {
    size_t len;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/specs", tests);
    char *text = read_spec(dir, "autodiff.tk", &len);
    CHECK(text != NULL);
    if (!text) return;
    tk_ctx *ctx = tk_ctx_new();
    int st = tk_load_spec(ctx, "autodiff.tk", text, len);
    if (st != TK_OK) fprintf(stderr, "%s\n", tk_ctx_error(ctx));
    CHECK(st == TK_OK && tk_ctx_link(ctx) == TK_OK);
    int derived = 0;
    for (int i = 0; i < tk_op_count(ctx); i++) {
        const tk_op *op = tk_op_at(ctx, i);
        if (op->decl->derived_from) {
            derived++;
            continue;
        }
        const tk_op *b = tk_op_find(ctx, tk_op_backward_at(op, 0));
        CHECK(b && b->decl->derived_from && strcmp(b->decl->derived_from, tk_op_name(op)) == 0);
        CHECK(b && (tk_op_nbackward(b) == 1) == (op->decl->backward_auto == 2));
    }
    CHECK(derived == 7 && tk_op_count(ctx) == 12);   /* two 'backward auto 2': their backward ops' own */
    const tk_op *bb = tk_op_find(ctx, "ad_bias_gelu_backward_backward");
    CHECK(bb && strcmp(bb->decl->derived_from, "ad_bias_gelu_backward") == 0 && tk_op_nbackward(bb) == 0);
    CHECK(bb && strcmp(tk_op_schema(bb), "ad_bias_gelu_backward_backward(Tensor x, Tensor scale, Tensor grad_y, "
                       "Tensor grad_grad_x, Tensor grad_grad_scale, Tensor grad_grad_bias, Tensor? bias=None) -> "
                       "(Tensor, Tensor, Tensor, Tensor)") == 0);
    const tk_op *br = tk_op_find(ctx, "ad_branches_backward");
    CHECK(br && tk_op_noutputs(br) == 1);   /* grad_x only: m is bool, k an int output */
    tk_ctx_free(ctx);
    free(text);
}

/* A row reduction in the element-wise form, derived as a row loop over the
 * dim its inner loops read along: the max's pass; its tie count, the sum and
 * the sum's derivative by the max in one pass; the row's reverse pass; the
 * gradients' pass; the gradient of b, read at the row's index, after it. */
static const char k_lse[] =
    "op lse(x: float[R, N], b: x.dtype[R]) -> y: x.dtype[R]:\n"
    "    backward auto\n"
    "    for r in y:\n"
    "        m = -inf\n"
    "        for i in range(N):\n"
    "            m = max(m, x[r, i])\n"
    "        s = 0.0\n"
    "        for i in range(N):\n"
    "            s += exp(x[r, i] - m)\n"
    "        y[r] = log(s) + m + b[r] * b[r]\n";
static const char k_lse_backward[] =
    "# derived by 'backward auto' from 'lse' (lse.tk:1)\n"
    "op lse_backward(x: float[R, N], b: x.dtype[R], grad_y: x.dtype[R])\n"
    "        -> (grad_x: x.dtype[R, N], grad_b: x.dtype[R]):\n"
    "    for r, _ in grad_x:\n"
    "        ad0 = -inf\n"
    "        ad1_m = ad0\n"
    "        for adi in range(0, N):\n"
    "            adb0_1 = x[r, adi]\n"
    "            ad1_m = max(ad1_m, adb0_1)\n"
    "        ad2 = 1.0 if ad0 == ad1_m else 0.0\n"
    "        ad4_s = 0.0\n"
    "        ad5_s = ad4_s\n"
    "        ad6 = 0.0\n"
    "        for adi in range(0, N):\n"
    "            adb1_1 = x[r, adi]\n"
    "            ad2 += 1.0 if adb1_1 == ad1_m else 0.0\n"
    "            adb2_1 = x[r, adi]\n"
    "            adb2_3 = adb2_1 - ad1_m\n"
    "            adb2_4 = exp(adb2_3)\n"
    "            ad5_s += adb2_4\n"
    "            adb2_d4 = 1.0\n"
    "            adb2_d3 = (adb2_d4 * adb2_4)\n"
    "            ad6 += (-adb2_d3)\n"
    "        ad10 = b[r]\n"
    "        add13 = float(grad_y[r])\n"
    "        add9 = add13\n"
    "        add11 = add13\n"
    "        add10 = (add11 * ad10)\n"
    "        add10 += (add11 * ad10)\n"
    "        add8 = add9\n"
    "        add1 = add9\n"
    "        add5 = (add8 / ad5_s)\n"
    "        add1 += (add5 * ad6)\n"
    "        for adi in range(N):\n"
    "            adb4_1 = x[r, adi]\n"
    "            adb4_4 = adb4_1 - ad1_m\n"
    "            adb4_5 = exp(adb4_4)\n"
    "            adb4_d1 = (add1 / ad2 if adb4_1 == ad1_m else 0.0)\n"
    "            adb4_d5 = add5\n"
    "            adb4_d4 = (adb4_d5 * adb4_5)\n"
    "            adb4_d1 += adb4_d4\n"
    "            grad_x[r, adi] = adb4_d1\n"
    "        grad_b[r] = add10\n";

/* a scan (autodiff_scan.c): its states kept in a scratch, then the steps backwards */
static const char k_sc[] =
    "op sc(x: float[R, N], a: x.dtype[R, N]) -> y: x.dtype[R, N]:\n    backward auto\n    for r, _ in y:\n"
    "        h = 0.0\n        for i in range(N):\n            h = h * a[r, i] + x[r, i]\n            y[r, i] = h\n";
static const char k_sc_backward[] =
    "# derived by 'backward auto' from 'sc' (sc.tk:1)\n"
    "op sc_backward(x: float[R, N], a: x.dtype[R, N], grad_y: x.dtype[R, N])\n"
    "        -> (grad_x: x.dtype[R, N], grad_a: x.dtype[R, N]):\n"
    "    scratch ads0: float[R, N]\n"
    "    for r, _ in grad_x:\n"
    "        ad0_h = 0.0\n"
    "        ad1_h = ad0_h\n"
    "        for adi in range(0, N):\n"
    "            ads0[r, adi] = ad1_h\n"
    "            adb0_1 = a[r, adi]\n"
    "            adb0_2 = ad1_h * adb0_1\n"
    "            adb0_3 = x[r, adi]\n"
    "            adb0_4 = adb0_2 + adb0_3\n"
    "            ad1_h = adb0_4\n"
    "        ada0 = 0.0\n"
    "        for adj in range(N):\n"
    "            adt = N - 1 - adj\n"
    "            adb1_0 = ads0[r, adt]\n"
    "            adb1_1 = a[r, adt]\n"
    "            adb1_d6 = float(grad_y[r, adt])\n"
    "            ada0 += adb1_d6\n"
    "            adb1_d4 = ada0\n"
    "            adb1_d2 = adb1_d4\n"
    "            adb1_d3 = adb1_d4\n"
    "            adb1_d0 = (adb1_d2 * adb1_1)\n"
    "            adb1_d1 = (adb1_d2 * adb1_0)\n"
    "            ada0 = adb1_d0\n"
    "            grad_x[r, adt] = adb1_d3\n"
    "            grad_a[r, adt] = adb1_d1\n";

static void test_golden_scan(void) {
    tk_ctx *ctx = tk_ctx_new();
    CHECK(tk_load_spec(ctx, "sc.tk", k_sc, strlen(k_sc)) == TK_OK);
    CHECK(tk_ctx_link(ctx) == TK_OK);
    const tk_op *b = tk_op_find(ctx, "sc_backward");
    CHECK(b != NULL);
    if (b && strcmp(b->decl->text, k_sc_backward) != 0) fprintf(stderr, "derived:\n%s", b->decl->text);
    CHECK(b && strcmp(b->decl->text, k_sc_backward) == 0);
    tk_ctx *again = tk_ctx_new();   /* the text loads as a spec of its own */
    CHECK(tk_load_spec(again, "d.tk", k_sc_backward, strlen(k_sc_backward)) == TK_OK);
    tk_ctx_free(again);
    tk_ctx_free(ctx);
}

static void test_golden_rows(void) {
    tk_ctx *ctx = tk_ctx_new();
    CHECK(tk_load_spec(ctx, "lse.tk", k_lse, strlen(k_lse)) == TK_OK);
    CHECK(tk_ctx_link(ctx) == TK_OK);
    const tk_op *b = tk_op_find(ctx, "lse_backward");
    CHECK(b != NULL);
    if (b && strcmp(b->decl->text, k_lse_backward) != 0) fprintf(stderr, "derived:\n%s", b->decl->text);
    CHECK(b && strcmp(b->decl->text, k_lse_backward) == 0);
    CHECK(b && strcmp(tk_op_schema(b), "lse_backward(Tensor x, Tensor b, Tensor grad_y) -> (Tensor, Tensor)") == 0);
    tk_ctx *again = tk_ctx_new();   /* the text loads as a spec of its own */
    CHECK(tk_load_spec(again, "d.tk", k_lse_backward, strlen(k_lse_backward)) == TK_OK);
    tk_ctx_free(again);
    tk_ctx_free(ctx);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_autodiff OPS TESTS\n");
        return 2;
    }
    test_bad();
    test_golden();
    test_golden_rows();
    test_golden_scan();
    test_spec_file(argv[2]);
    return tk_test_report("test_autodiff");
}
