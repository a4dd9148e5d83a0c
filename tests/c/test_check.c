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
    {HDR "        y[i] = x[]\n", "bad.tk:3:16: error: 'x' takes 1 indices (one per explicit dim), got 0"},
    {HDR "        y[0] = x[i]\n", "bad.tk:3:9: error: an output can only be written at the loop index: y[i]"},
    {HDR "        x[i] = 1.0\n", "bad.tk:3:9: error: input 'x' is read-only (declare it 'x: mut ...' to update it in place)"},
    /* in-place parameters ('mut') */
    {"op f(x: mut float32[N], y: float32[N]):\n    for i in x:\n        x[i] = x[i + 1] + y[i]\n",
     "bad.tk:3:16: error: 'x' is updated in place, so an iteration reads only its own element, x[i]: another "
     "iteration may already have written this one (a row loop reads across its own rows)"},
    {"op f(x: mut float32[N]):\n    for i in x:\n        x[i] = 2.0\n        x[i] = x[i] + 1.0\n",
     "bad.tk:4:16: error: 'x' is read after a store to it (or in a loop that stores it): read it once, before the "
     "stores, into a local"},
    {"op f(x: mut float32[N], n: int):\n    for i in x:\n        for k in range(n):\n            s = x[i]\n"
     "            x[i] = s * 2.0\n",
     "bad.tk:4:17: error: 'x' is read after a store to it (or in a loop that stores it): read it once, before the "
     "stores, into a local"},
    {"op f(x: mut float32[N]):\n    for i in x:\n        x[i] += 1.0\n",
     "bad.tk:3:9: error: 'x' is updated in place: write x[...] = x[...] + v (a '+=' store is for new outputs)"},
    {"op f(x: mut float32[..., N]):\n    for _ in x:\n        for i in range(N):\n            x[i] += 1.0\n",
     "bad.tk:4:13: error: 'x' is updated in place: write x[...] = x[...] + v (a '+=' store is for new outputs)"},
    {"op f(x: mut float32[N]):\n    backward g\n    for i in x:\n        x[i] = 1.0\n",
     "bad.tk:2:14: error: 'f' updates 'x' in place ('mut'), so it cannot have backward ops: write it as an op that "
     "returns the new value to differentiate it"},
    {"op f(x: mut float32[N], y: mut float32[N]):\n    for i in x:\n        x[i] = 1.0\n",
     "bad.tk:1:25: error: 'mut' parameter 'y' is never written: the body has no store to it (without 'mut' it is "
     "read-only)"},
    {"op f(x: mut float32[N], y: mut float32[M, N]):\n    for i in x:\n        x[i] = 1.0\n        y[i] = 2.0\n",
     "bad.tk:1:25: error: 'mut' parameter 'y' must have the loop output's rank and batch dims, as every output"},
    {"op f(x: mut float32[N], y: float32[..., N]):\n    for i in x:\n        x[i] = y[i]\n",
     "bad.tk:1:6: error: 'mut' parameter 'x' needs '...' first, like input 'y': the loop runs over the batch dims, "
     "and the output it names has them (a sum over them is another output, stored with '+=' in a row loop: "
     "docs/spec.md, Sums)"},
    {"op f(x: float32[N], n: mut int):\n    for i in x:\n        x[i] = 1.0\n",
     "bad.tk:1:24: error: only a tensor parameter can be 'mut' (updated in place): 'n' has no dims"},
    {"op f(x: float32[N]):\n    for i in x:\n        x[i] = 1.0\n",
     "bad.tk:1:20: error: expected '->' after the parameter list, found ':'"},
    {HDR "        y[i] += x[i]\n", "bad.tk:3:9: error: '+=' into an output makes it a sum, which a row loop takes (a '_' "
                                   "in the loop; docs/spec.md, Sums); here accumulate in a local, then store with '='"},
    {HDR "        y[i] -= x[i]\n", "bad.tk:3:9: error: outputs are write-only: accumulate in a local, then store with '='"},
    {HDR "        s = y[i]\n        y[i] = s\n", "bad.tk:3:13: error: output 'y' is write-only; keep values in a local"},
    {HDR "        n = 3\n        y[i] = x[i]\n",
     "bad.tk:3:9: error: cannot assign to 'n': it is a parameter, dim, tensor or loop variable"},
    {HDR "        k = 1\n        k = 2.5\n        y[i] = x[i]\n",
     "bad.tk:4:9: error: 'k' is an int (from its first assignment, line 3); a float value needs int(...) here, or make 'k' a float from the start ('k = 0.0')"},
    {HDR "        if i:\n            y[i] = x[i]\n",
     "bad.tk:3:12: error: an 'if' condition must be a bool, got int (compare explicitly)"},
    {HDR "        y[i] = x[i * 1.5]\n", "bad.tk:3:20: error: an index must be an int, not float32"},
    {HDR "        y[i] = x[-1]\n",
     "bad.tk:3:18: error: index -1 of 'x' is negative: indices do not wrap as in Python (the last element is the "
     "dim's size - 1)"},
    {HDR "        y[i] = foo(x[i])\n", "bad.tk:3:16: error: unknown function 'foo'"},
    {HDR "        y[i] = min(x[i])\n", "bad.tk:3:16: error: min() takes 2 arguments, got 1"},
    {HDR "        if True:\n            t = 1\n        y[i] = t\n", "bad.tk:5:16: error: unknown name 't'"},
    {HDR "        for u in range(n):\n            u = 2\n        y[i] = x[i]\n",
     "bad.tk:4:13: error: cannot assign to loop variable 'u'"},
    {HDR "        y[i] = x\n", "bad.tk:3:16: error: tensor 'x' must be indexed, with 1 index (one per dim after '...')"},
    {HDR "        y[i] = x[i] and True\n", "bad.tk:3:21: error: 'and' needs bools, got float32 and bool"},
    {"op f(x: float32[N]) -> y: int32[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:3:16: error: output 'y' (int32) is an int; converting a float32 needs int(...)"},
    {"op f(x: float32[N]) -> y: float32[M]:\n    for i in y:\n        y[i] = 0.0\n",
     "bad.tk:1:35: error: unknown name 'M' in an output dim"},
    {"op f(x: float32[N]) -> y: float32[N]:\n    for i, j in y:\n        y[i] = 0.0\n",
     "bad.tk:2:17: error: 'y' has 1 explicit dims, so the loop needs 1 variables, not 2"},
    {"op f(x: float[..., N]) -> y: x.dtype[...]:\n    for i in y:\n        y[i] = 0.0\n",
     "bad.tk:2:14: error: the loop runs over 'y', which has no explicit dim: the loop's output needs at least one "
     "after '...' (loop over another output, or keep a dim of size 1; other outputs may have none)"},
    {"op f(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        s = 0.0\n        for j in range(N):\n"
     "            for j in range(N):\n                s += 1.0\n        y[i] = s\n",
     "bad.tk:5:13: error: loop variable 'j' hides the variable of an enclosing loop"},
    {"op f(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        s = 0.0\n        for i in range(N):\n"
     "            s += 1.0\n        y[i] = s\n",
     "bad.tk:4:9: error: loop variable 'i' hides the variable of the top-level loop"},
    {"op f(x: float32[N]) -> y: float32[N]:\n    for i in x:\n        y[i] = 0.0\n",
     "bad.tk:2:14: error: the top-level loop must run over an output, and 'x' is not one"},
    {"op f(x: float32[N], k: q.dtype[N]) -> y: float32[N]:\n    for i in y:\n        y[i] = 0.0\n",
     "bad.tk:1:24: error: 'q.dtype' must name a tensor parameter declared before 'k'"},
    {"op f(x: float32[N], x: int) -> y: float32[N]:\n    for i in y:\n        y[i] = 0.0\n",
     "bad.tk:1:21: error: 'x' is declared twice (first at line 1)"},
    {"op f(x: float32[N, ...]) -> y: float32[N]:\n    for i in y:\n        y[i] = 0.0\n",
     "bad.tk:1:20: error: '...' may only be the first dim of 'x'"},
    {"op f(x: float32[N], h: bool? = True) -> y: float32[N]:\n    for i in y:\n        y[i] = 0.0\n",
     "bad.tk:1:21: error: a bool parameter cannot be optional (only 'int?', 'float?' and tensors)"},
    /* optional tensors (docs/spec.md, Optional tensors) */
    {"op f(x: float[N], b: x.dtype[N]? ) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:19: error: optional tensor 'b' needs a default, the value its elements read as when it is None: "
     "'b: x.dtype[N]? = 0'"},
    {"op f(x: float[N], b: x.dtype[N] = 0) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:35: error: a tensor parameter has a default only when it is optional: 'b: x.dtype[N]? = 0' "
     "takes None, whose elements then read as 0"},
    {"op f(x: float[N], b: float[M]? = 0) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:22: error: optional tensor 'b' needs one dtype or 'x.dtype' of a tensor that is not optional: "
     "when it is None nothing picks among several"},
    {"op f(x: float[N], b: x.dtype[M]? = 0) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:30: error: dim 'M' is named only by optional tensor 'b': when it is None nothing gives M (name "
     "it in a tensor that is not optional)"},
    {"op f(x: float32[N]? = 0) -> y: float32[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:4: error: every tensor parameter of 'f' is optional: it needs one that is not (torch picks the "
     "CPU or CUDA kernel from it, and the optional ones take their dims from it)"},
    {"op f(x: float[N], b: x.dtype[N]? = 0, c: b.dtype[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:39: error: parameter 'c' has no default but follows 'b', which has one: as in Python, "
     "parameters with defaults come last"},
    {"op f(x: float[N], b: x.dtype[N]? = 0, c: b.dtype[N]? = 1) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:42: error: 'b.dtype': 'b' is optional, and None has no dtype: name a tensor that is not optional"},
    {"op f(x: float[N], b: int64[N]? = 0.5) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:34: error: the default of 'b' must be an integer: 'b' may have an integer or bool dtype"},
    {"op f(x: float[N], b: bool[N]? = 2) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:33: error: the default of bool tensor 'b' must be True or False"},
    {"op f(x: float[N], b: x.dtype[N]? = True) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:36: error: the default of 'b' is True or False only for a bool tensor: give a number"},
    {"op f(x: float[N], b: x.dtype[N]? = N) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:36: error: the default of optional tensor 'b' must be a number such as 0, 1 or -0.5 (what each "
     "of its elements reads as when it is None), not an expression"},
    {"op f(x: float[N], b: mut x.dtype[N]? = 0):\n    for i in b:\n        b[i] = x[i]\n",
     "bad.tk:1:19: error: 'mut' tensor 'b' cannot be optional: the op writes it"},
    {"op f(x: float[N], b: int8[N]? = 1000) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:33: error: the default of 'b', 1000, is outside the range of int8, a dtype 'b' may have"},
    {"op f(x: float[N], b: uint8[N]? = -1) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:34: error: the default of 'b', -1, is outside the range of uint8, a dtype 'b' may have"},
    {"op f(x: float16|float32[N], b: x.dtype[N]? = 1e6) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:46: error: the default of 'b', 1000000, is outside the finite range of float16, a dtype 'b' may have"},
    {"op f(x: float[N], b: int64[N]? = 9007199254740993) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:34: error: the default of 'b', 9007199254740993, is outside the integers a double holds exactly "
     "(2^53) of int64, a dtype 'b' may have"},
    /* float defaults: a number literal, possibly negated, required for 'float?' */
    {"op f(x: float32[N], h: float? = N) -> y: float32[N]:\n    for i in y:\n        y[i] = 0.0\n",
     "bad.tk:1:33: error: the default of float 'h' must be a number such as 1e-5 or -0.5, not an expression"},
    {"op f(x: float32[N], h: float = 2.0 * 3.0) -> y: float32[N]:\n    for i in y:\n        y[i] = 0.0\n",
     "bad.tk:1:36: error: the default of float 'h' must be a number such as 1e-5 or -0.5, not an expression"},
    {"op f(x: float32[N], h: float? = False) -> y: float32[N]:\n    for i in y:\n        y[i] = 0.0\n",
     "bad.tk:1:33: error: the default of float 'h' must be a number such as 1e-5 or -0.5, not an expression"},
    {"op f(x: float32[N], h: float?) -> y: float32[N]:\n    for i in y:\n        y[i] = 0.0\n",
     "bad.tk:1:21: error: optional float 'h' needs a default, which None then means: 'h: float? = 1e-5'"},
    {"op f(x: float32[N], h: int = 0.5) -> y: float32[N]:\n    for i in y:\n        y[i] = 0.0\n",
     "bad.tk:1:30: error: the default of int 'h' must be an integer such as 3 or -1 (use 'h: int? = expr' for one "
     "computed from dims)"},
    {"op f(x: float32[N], h: bool = 1) -> y: float32[N]:\n    for i in y:\n        y[i] = 0.0\n",
     "bad.tk:1:31: error: the default of bool 'h' must be True or False"},
    {"op f(x: float32[N], h: float = 1e999) -> y: float32[N]:\n    for i in y:\n        y[i] = 0.0\n",
     "bad.tk:1:32: error: float literal '1e999' is out of range"},
    /* the variant suffix: only for errors that depend on the dtypes */
    {"op f(x: any[N]) -> y: float32[N]:\n    for i in y:\n        y[i] = gamma(x[i])\n",
     "bad.tk:3:16: error: unknown function 'gamma'"},
    {"op f(x: int32|float32[N]) -> y: float32[N]:\n    for i in y:\n        n = x[i]\n        n = 0.5\n"
     "        y[i] = n\n",
     "bad.tk:4:9: error: 'n' is an int (from its first assignment, line 3); a float value needs int(...) here, or make 'n' a float from the start ('n = 0.0') (in the i32 variant)"},
    {"op f(x: float32|int16[N], k: int[N]) -> y: float32[N]:\n    for i in y:\n        n = x[i] + k[i]\n"
     "        n = 0.5\n        y[i] = n\n",
     "bad.tk:4:9: error: 'n' is an int (from its first assignment, line 3); a float value needs int(...) here, or make 'n' a float from the start ('n = 0.0') (in the i16_u8 variant)"},
    {"op f(x: float32|float64[N]) -> y: int32[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:3:16: error: output 'y' (int32) is an int; converting a float32 needs int(...) (in the f32 variant)"},
    {"op f(x: float32[N], h: int? = N / 2) -> y: float32[N]:\n    for i in y:\n        y[i] = 0.0\n",
     "bad.tk:1:33: error: a default must be an int expression: use '//' instead of '/'"},
    {"op f(x: float32[N]) -> y: float32|float64[N]:\n    for i in y:\n        y[i] = 0.0\n",
     "bad.tk:1:27: error: an output's dtype must be one dtype or 'x.dtype'"},
    {"op f(x: int[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i] * 0.5\n",
     "bad.tk:3:21: error: output 'y' (uint8) is an int; converting a float32 needs int(...) (in the u8 variant)"},
    {"op f(x: float32[N]) -> y: float32[N]:\n    for i in y:\n        y[i] = 0.0\n"
     "op f(x: float32[N]) -> y: float32[N]:\n    for i in y:\n        y[i] = 1.0\n",
     "bad.tk:4:4: error: op 'f' is already defined"},
    /* row loops: every store and read-back indexes each parallel dim with its loop variable */
#define ROW "op f(k: float32[B, T, C]) -> (y: float32[B, T, C], s: float32[C, B]):\n    for b, _, c in y:\n" \
            "        for t in range(T):\n"
    {ROW "            y[b, t, 0] = 1.0\n",
     "bad.tk:4:13: error: store to y[b, t, 0] does not index dim 2 with the loop variable c: two iterations "
     "could write the same element"},
    {ROW "            y[b, t, c + 1] = 1.0\n",
     "bad.tk:4:13: error: store to y[b, t, c + 1] does not index dim 2 with the loop variable c: two iterations "
     "could write the same element"},
    {ROW "            y[c, t, b] = 1.0\n",
     "bad.tk:4:13: error: store to y[c, t, b] does not index dim 0 with the loop variable b: two iterations "
     "could write the same element"},
    {ROW "            v = y[b - 1, t, c]\n            y[b, t, c] = v\n",
     "bad.tk:4:17: error: read of y[b - 1, t, c] does not index dim 0 with the loop variable b: it could read an "
     "element another iteration writes"},
    {ROW "            s[t, b] = 1.0\n",
     "bad.tk:4:13: error: store to s[t, b] does not index any dim with the loop variable c: two iterations could "
     "write the same element"},
    {ROW "            s[c, b] = 1.0\n        if T > 0:\n            s[b, c] = 2.0\n",
     "bad.tk:6:13: error: store to s[b, c] does not index dim 1 with the loop variable b as the access at 4:13 "
     "does: two iterations could write the same element"},
    {ROW "            y[b, t, c] -= 1.0\n",
     "bad.tk:4:13: error: a store takes '=', or '+=' for a sum: to update an element, read it back (y[...] = y[...] - v)"},
    {ROW "            y[b, t, c] += 1.0\n            s[c, b] = 1.0\n        y[b, 0, c] = 0.0\n",
     "bad.tk:4:13: error: output 'y' is stored with both '=' and '+=': '+=' makes it a sum, which starts at zero and "
     "takes only '+=' (docs/spec.md, Sums)"},
    {ROW "            _ = 1\n",
     "bad.tk:4:13: error: '_' marks a dim the iteration owns in the loop header; give the variable a name"},
    {ROW "            y[b, t, c] = float32(_)\n", "bad.tk:4:34: error: unknown name '_'"},
    {ROW "            y[b, t] = 1.0\n", "bad.tk:4:13: error: 'y' takes 3 indices (one per explicit dim), got 2"},
#undef ROW
    {"op f(x: float32[..., N]) -> (y: float32[..., N], s: float32[N]):\n    for _ in y:\n        y[0] = 0.0\n",
     "bad.tk:1:50: error: output 's' has no '...' and the loop output 'y' has: in a row loop every output has "
     "'...' exactly when the loop output has"},
    /* batch dims: an input's '...' needs the loop output's (a sum may drop them) */
    {"op f(x: float[..., N], w: x.dtype[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i] * w[i]\n",
     "bad.tk:1:42: error: output 'y' needs '...' first, like input 'x': the loop runs over the batch dims, and "
     "the output it names has them (a sum over them is another output, stored with '+=' in a row loop: "
     "docs/spec.md, Sums)"},
    {"op f(x: float[..., N]) -> g: x.dtype[N]:\n    for _ in g:\n        for i in range(N):\n"
     "            g[i] = x[i]\n",
     "bad.tk:1:27: error: output 'g' needs '...' first, like input 'x': the loop runs over the batch dims, and "
     "the output it names has them (a sum over them is another output, stored with '+=' in a row loop: "
     "docs/spec.md, Sums)"},
    /* what torch's schemas and torch.ops.tk cannot take */
    {"op f(eps: float = 1e-5, g: float[N]) -> y: g.dtype[N]:\n    for i in y:\n        y[i] = g[i]\n",
     "bad.tk:1:25: error: parameter 'g' has no default but follows 'eps', which has one: as in Python, "
     "parameters with defaults come last"},
    {"op f(x: float[N], k: int? = N, g: float[N]) -> y: g.dtype[N]:\n    for i in y:\n        y[i] = g[i]\n",
     "bad.tk:1:32: error: parameter 'g' has no default but follows 'k', which has one: as in Python, "
     "parameters with defaults come last"},
    {"op f(x: float[N], def: int) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:19: error: 'def' cannot name a parameter: torch's operator schemas reserve it"},
    {"op global(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:4: error: 'global' cannot name an op: torch's operator schemas reserve it"},
    {"op name(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:4: error: 'name' cannot name an op: in Python torch.ops.tk.name is an attribute of the namespace "
     "itself"},
    {"op __call__(x: float[N]) -> y: x.dtype[N]:\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:4: error: '__call__' cannot name an op: in Python torch.ops.tk.__call__ is an attribute of the "
     "namespace itself"},
    {"op f(n: int, d: int) -> c: float32[n, d]:\n    for i, j in c:\n        c[i, j] = 0.0\n",
     "bad.tk:1:4: error: an op needs a tensor parameter: torch picks its CPU or CUDA kernel from its tensor "
     "arguments (a tensor whose shape gives the output's is enough)"},
    {"op f(x: float[N]) -> (y: x.dtype[N], z: x.dtype[N]):\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:1:38: error: output 'z' is never written: the body has no store to it"},
    /* scratch tensors */
    {"op f(x: float32[..., N]) -> y: float32[..., N]:\n    scratch s: float32[..., N]\n    for _ in y:\n"
     "        for i in range(N):\n            s[i] += x[i]\n            y[i] = x[i]\n",
     "bad.tk:2:13: error: scratch tensor 's' is stored only with '+=', which makes it a sum, and nothing reads a sum "
     "(other iterations are adding into it): store it with '='"},
    {"op f(x: float32[N]) -> y: float32[N]:\n    scratch s: float32[N]\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:2:13: error: scratch tensor 's' is never written: the body has no store to it"},
    {"op f(x: float32[N]) -> y: float32[N]:\n    scratch x: float32[N]\n    for i in y:\n        y[i] = 1.0\n"
     "        x[i] = 2.0\n",
     "bad.tk:2:13: error: 'x' is declared twice (first at line 1)"},
    {"op f(x: float32[N]) -> y: float32[N]:\n    scratch y: float32[N]\n    for i in y:\n        y[i] = 1.0\n",
     "bad.tk:2:13: error: 'y' is declared twice (first at line 1)"},
    {"op f(x: float[N]) -> y: x.dtype[N]:\n    scratch s: int[N]\n    for i in y:\n        s[i] = 1\n"
     "        y[i] = 1.0\n",
     "bad.tk:2:16: error: a scratch tensor's dtype must be one dtype, 'x.dtype' or 'float' (the body's float type)"},
    {"op f(x: float[N]) -> y: x.dtype[N]:\n    scratch s: float16|float32[N]\n    for i in y:\n        s[i] = 1.0\n"
     "        y[i] = 1.0\n",
     "bad.tk:2:16: error: a scratch tensor's dtype must be one dtype, 'x.dtype' or 'float' (the body's float type)"},
    {"op f(x: float32[N]) -> y: float32[N]:\n    scratch s: float32\n    for i in y:\n        y[i] = 1.0\n",
     "bad.tk:2:23: error: expected '[' after the output's dtype, found NEWLINE"},
    {"op f(x: float32[N]) -> y: float32[N]:\n    scratch s: float32[N], t: float32[N]\n    for i in y:\n"
     "        y[i] = 1.0\n",
     "bad.tk:2:26: error: expected NEWLINE after the scratch tensor's dims, found ','"},
    {"op f(x: float32[N]) -> y: float32[N]:\n    scratch s: float32[N]\n    for i in y:\n        s[i] = 1.0\n"
     "        y[i] = s[i]\n",
     "bad.tk:5:16: error: scratch tensor 's' is read back only in a row loop (a '_' in the loop; docs/spec.md, Row "
     "loops): here keep values in a local"},
    {"op f(x: float32[N]) -> y: float32[N]:\n    scratch s: float32[M]\n    for i in y:\n        s[i] = 1.0\n"
     "        y[i] = 1.0\n",
     "bad.tk:2:24: error: unknown name 'M' in an output dim"},
    {"op f(x: float32[N]) -> y: float32[N]:\n    for i in y:\n        y[i] = 1.0\n    scratch s: float32[N]\n",
     "bad.tk:4:5: error: expected the end of the op body after the top-level 'for ... in <output>:' loop, found "
     "'scratch'"},
    /* 16 tensors an op, scratch tensors counted: 8 + 2 + 7 is one too many */
    {"op f(a: float32[N], b: float32[N], c: float32[N], d: float32[N], e: float32[N], f2: float32[N], g: float32[N], "
     "h: float32[N]) -> (y: float32[N], z: float32[N]):\n"
     "    scratch s1: float32[N]\n    scratch s2: float32[N]\n    scratch s3: float32[N]\n    scratch s4: float32[N]\n"
     "    scratch s5: float32[N]\n    scratch s6: float32[N]\n    scratch s7: float32[N]\n    for i in y:\n"
     "        y[i] = a[i]\n        z[i] = 1.0\n        s1[i] = 1.0\n        s2[i] = 1.0\n        s3[i] = 1.0\n"
     "        s4[i] = 1.0\n        s5[i] = 1.0\n        s6[i] = 1.0\n        s7[i] = 1.0\n",
     "bad.tk:1:112: error: too many tensors (limit 16 with outputs)"},
};

/* Specs that load but whose backward clause does not link (tk_ctx_link). */
#define FWD "op f(x: float[N], n: int? = N) -> y: x.dtype[N]:\n    backward f_bw\n    for i in y:\n        y[i] = x[i]\n"
#define BW(params, outs) "op f_bw(" params ") -> " outs ":\n    for i in grad_x:\n        grad_x[i] = 0.0\n"

#define FWD_OPT "op f(x: float[N], w: x.dtype[N]? = 1) -> y: x.dtype[N]:\n    backward f_bw\n    for i in y:\n" \
    "        y[i] = x[i] * w[i]\n"

static const bad_spec k_bad_link[] = {
    {FWD, "bad.tk:2:14: error: backward op 'f_bw' of 'f': no such op (is its spec file loaded?)"},
    /* an optional tensor: the backward op takes None too, and it must mean the same there */
    {FWD_OPT BW("grad_y: float[N], w: grad_y.dtype[N]", "grad_x: grad_y.dtype[N]"),
     "bad.tk:2:14: error: backward op 'f_bw' of 'f': parameter 'w' must be optional ('[...]? = 0') like 'w' of 'f' "
     "(it may be None)"},
    {FWD_OPT BW("grad_y: float[N], w: grad_y.dtype[N]? = 0", "grad_x: grad_y.dtype[N]"),
     "bad.tk:2:14: error: backward op 'f_bw' of 'f': parameter 'w' defaults to 0 but 'w' of 'f' to 1 (None passed "
     "for it must mean one value)"},
    /* a forward op's scratch tensor is not an output a backward op can take */
    {"op f(x: float[N]) -> y: x.dtype[N]:\n    backward f_bw\n    scratch s: x.dtype[N]\n    for i in y:\n"
     "        s[i] = x[i]\n        y[i] = x[i]\n"
     "op f_bw(grad_y: float[N], s: grad_y.dtype[N]) -> grad_x: grad_y.dtype[N]:\n    for i in grad_x:\n"
     "        grad_x[i] = 0.0\n",
     "bad.tk:2:14: error: backward op 'f_bw' of 'f': parameter 's' (bad.tk:7:27) is not a parameter of 'f', an output "
     "of 'f' or 'grad_<output>' (grad_y)"},
    {"op f(x: float[N]) -> y: x.dtype[N]:\n    backward f\n    for i in y:\n        y[i] = x[i]\n",
     "bad.tk:2:14: error: backward op 'f' of 'f': an op cannot be its own backward"},
    /* a forward tensor named grad_<output>: a backward op's parameter of that name would be both */
    /* (with backward auto: the derived op's grad_y was read as the output, a wrong gradient) */
    {"op f(x: float[N]) -> (y: x.dtype[N], grad_y: x.dtype[N]):\n    backward auto\n    for i in y:\n"
     "        y[i] = x[i] * x[i]\n        grad_y[i] = 3.0 * x[i]\n",
     "bad.tk:1:38: error: output 'grad_y' of 'f' has the name its backward ops give the incoming gradient of "
     "output 'y': rename it"},
    {"op f(x: float[N], grad_y: x.dtype[N]) -> y: x.dtype[N]:\n    backward f_bw\n    for i in y:\n"
     "        y[i] = x[i] * grad_y[i]\n" BW("grad_y: float[N]", "grad_x: grad_y.dtype[N]"),
     "bad.tk:1:19: error: parameter 'grad_y' of 'f' has the name its backward ops give the incoming gradient of "
     "output 'y': rename it"},
    {"op f(x: float[N]) -> (y: x.dtype[N], grad_y: x.dtype[N]):\n    backward f_bw\n    for i in y:\n"
     "        y[i] = x[i]\n        grad_y[i] = x[i]\n" BW("grad_y: float[N]", "grad_x: grad_y.dtype[N]"),
     "bad.tk:1:38: error: output 'grad_y' of 'f' has the name its backward ops give the incoming gradient of "
     "output 'y': rename it"},
    {FWD BW("x: float[N], g: x.dtype[N]", "grad_x: x.dtype[N]"),
     "bad.tk:2:14: error: backward op 'f_bw' of 'f': parameter 'g' (bad.tk:5:22) is not a parameter of 'f', "
     "an output of 'f' or 'grad_<output>' (grad_y)"},
    {FWD BW("grad_y: float[N], x: int", "grad_x: grad_y.dtype[N]"),
     "bad.tk:2:14: error: backward op 'f_bw' of 'f': parameter 'x' is an int but 'x' is a tensor in 'f'"},
    {FWD BW("grad_y: float[N], n: int", "grad_x: grad_y.dtype[N]"),
     "bad.tk:2:14: error: backward op 'f_bw' of 'f': parameter 'n' must be 'int?' like 'n' of 'f' (it may be None)"},
    {"op f(x: float[N], e: float? = 0.5) -> y: x.dtype[N]:\n    backward f_bw\n    for i in y:\n"
     "        y[i] = x[i]\n" BW("grad_y: float[N], e: float = 0.5", "grad_x: grad_y.dtype[N]"),
     "bad.tk:2:14: error: backward op 'f_bw' of 'f': parameter 'e' must be 'float?' like 'e' of 'f' (it may be "
     "None)"},
    {"op f(x: float[N], e: float? = 0.5) -> y: x.dtype[N]:\n    backward f_bw\n    for i in y:\n"
     "        y[i] = x[i]\n" BW("grad_y: float[N], e: float? = 1e-05", "grad_x: grad_y.dtype[N]"),
     "bad.tk:2:14: error: backward op 'f_bw' of 'f': parameter 'e' defaults to 1e-05 but 'e' of 'f' to 0.5 (None "
     "passed for it must mean one value)"},
    {FWD BW("grad_y: float[N], n: int? = N // 2", "grad_x: grad_y.dtype[N]"),
     "bad.tk:2:14: error: backward op 'f_bw' of 'f': parameter 'n' defaults to 'N // 2' but 'n' of 'f' to 'N' "
     "(None passed for it must mean one value: write the same expression)"},
    {FWD BW("x: float[N]", "grad_x: x.dtype[N]"),
     "bad.tk:2:14: error: backward op 'f_bw' of 'f': it takes no incoming gradient (a parameter named grad_y)"},
    {FWD BW("x: float[N], grad_y: float", "grad_x: float32[1]"),
     "bad.tk:2:14: error: backward op 'f_bw' of 'f': parameter 'grad_y' must be a tensor"},
    {FWD "op f_bw(grad_y: float[N]) -> gx: grad_y.dtype[N]:\n    for i in gx:\n        gx[i] = 0.0\n",
     "bad.tk:2:14: error: backward op 'f_bw' of 'f': output 'gx' must be named grad_<p> for a float tensor "
     "parameter p of 'f'"},
    {"op f(x: float[N]) -> y: x.dtype[N]:\n    backward f_bw, f_bw2\n    for i in y:\n        y[i] = x[i]\n"
     BW("grad_y: float[N]", "grad_x: grad_y.dtype[N]")
     "op f_bw2(grad_y: float[N]) -> grad_x: grad_y.dtype[N]:\n    for i in grad_x:\n        grad_x[i] = 1.0\n",
     "bad.tk:2:20: error: backward op 'f_bw2' of 'f': 'grad_x' is also computed by backward op 'f_bw'"},
    {"op f(x: float[N]) -> (y: x.dtype[N], m: int32[N]):\n    backward f_bw\n    for i in y:\n"
     "        y[i] = x[i]\n        m[i] = i\n"
     BW("grad_m: int32[N]", "grad_x: float32[N]"),
     "bad.tk:2:14: error: backward op 'f_bw' of 'f': 'grad_m' has no gradient: output 'm' of 'f' is not a "
     "float tensor"},
    {"op f(x: float[N], idx: int64[N]) -> y: x.dtype[N]:\n    backward f_bw\n    for i in y:\n"
     "        y[i] = x[idx[i]]\n"
     "op f_bw(grad_y: float[N]) -> (grad_x: grad_y.dtype[N], grad_idx: int64[N]):\n    for i in grad_x:\n"
     "        grad_x[i] = 0.0\n        grad_idx[i] = 0\n",
     "bad.tk:2:14: error: backward op 'f_bw' of 'f': output 'grad_idx' must be named grad_<p> for a float "
     "tensor parameter p of 'f'"},
    /* ranks that could never match at run time */
    {FWD BW("grad_y: float[N], x: float[N, N]", "grad_x: grad_y.dtype[N]"),
     "bad.tk:2:14: error: backward op 'f_bw' of 'f': parameter 'x' (bad.tk:5:27) has 2 dims but parameter 'x' "
     "of 'f' has 1 dim"},
    {FWD BW("grad_y: float[..., N, N]", "grad_x: grad_y.dtype[..., N]"),
     "bad.tk:2:14: error: backward op 'f_bw' of 'f': parameter 'grad_y' (bad.tk:5:9) has '...' and 2 dims but "
     "the gradient of output 'y' of 'f' has 1 dim"},
    /* a gradient may have more leading dims than its parameter (torch sums them), never fewer */
    {"op f(x: float[M, N]) -> y: x.dtype[M, N]:\n    backward f_bw\n    for j, i in y:\n        y[j, i] = x[j, i]\n"
     "op f_bw(grad_y: float[M, N]) -> grad_x: grad_y.dtype[N]:\n    for i in grad_x:\n        grad_x[i] = 0.0\n",
     "bad.tk:2:14: error: backward op 'f_bw' of 'f': output 'grad_x' (bad.tk:5:33) has 1 dim but parameter 'x' "
     "of 'f' has 2 dims"},
    {"op f(x: float[N]) -> (y: x.dtype[N], m: int32[N]):\n    backward f_bw\n    for i in y:\n"
     "        y[i] = x[i]\n        m[i] = i\n"
     BW("grad_y: float[..., N], m: int32[..., 2, N]", "grad_x: grad_y.dtype[..., N]"),
     "bad.tk:2:14: error: backward op 'f_bw' of 'f': parameter 'm' (bad.tk:6:32) has '...' and 2 dims but output "
     "'m' of 'f' has 1 dim"},
    {"op f(x: float[..., M, N]) -> y: x.dtype[..., M, N]:\n    backward f_bw\n    for j, i in y:\n"
     "        y[j, i] = x[j, i]\n"
     "op f_bw(grad_y: float[..., M, N], x: float[N]) -> grad_x: grad_y.dtype[..., M, N]:\n"
     "    for j, i in grad_x:\n        grad_x[j, i] = 0.0\n",
     "bad.tk:2:14: error: backward op 'f_bw' of 'f': parameter 'x' (bad.tk:5:35) has 1 dim but parameter 'x' "
     "of 'f' has '...' and 2 dims"},
};

/* '...' takes any number of dims: a batch-generic backward serves a forward
 * with a fixed rank ([N]) and one with batch dims, and a fixed-rank backward
 * ([B, N]) a forward's [..., N] (it fits 2-d calls). */
static void test_link_batch_generic(void) {
    const char *src =
        "op f1(x: float[N]) -> y: x.dtype[N]:\n    backward g_bw\n    for i in y:\n        y[i] = x[i]\n"
        "op f2(x: float[..., N]) -> y: x.dtype[..., N]:\n    backward g_bw\n    for i in y:\n        y[i] = x[i]\n"
        "op f3(x: float[..., N]) -> y: x.dtype[..., N]:\n    backward h_bw\n    for i in y:\n        y[i] = x[i]\n"
        "op g_bw(grad_y: float[..., N], x: grad_y.dtype[..., N]) -> grad_x: grad_y.dtype[..., N]:\n"
        "    for i in grad_x:\n        grad_x[i] = grad_y[i] * x[i]\n"
        "op h_bw(grad_y: float[B, N]) -> grad_x: grad_y.dtype[B, N]:\n"
        "    for b, i in grad_x:\n        grad_x[b, i] = grad_y[b, i]\n";
    tk_ctx *ctx = tk_ctx_new();
    CHECK(tk_load_spec(ctx, "g.tk", src, strlen(src)) == TK_OK);
    int st = tk_ctx_link(ctx);
    if (st != TK_OK) fprintf(stderr, "link: %s\n", tk_ctx_error(ctx));
    CHECK(st == TK_OK);
    tk_ctx_free(ctx);
}

/* A backward in another file links once both are loaded; the accessors
 * say where each argument comes from and which gradient each output is. */
static void test_link_ok(void) {
    const char *fwd = "op f(x: float[N], idx: int64[N], a: float) -> (y: x.dtype[N], m: int32[N]):\n"
                      "    backward f_bw\n    for i in y:\n        y[i] = a * x[idx[i]]\n        m[i] = i\n";
    const char *bw = "op f_bw(grad_y: float[N], idx: int64[N], y: grad_y.dtype[N], a: float)\n"
                     "        -> grad_x: grad_y.dtype[N]:\n"
                     "    for i in grad_x:\n        grad_x[i] = a * grad_y[i] + 0.0 * y[idx[i]]\n";
    tk_ctx *ctx = tk_ctx_new();
    CHECK(tk_load_spec(ctx, "f.tk", fwd, strlen(fwd)) == TK_OK);
    CHECK(tk_ctx_link(ctx) != TK_OK);                   /* f_bw is not loaded yet */
    CHECK(tk_load_spec(ctx, "f_bw.tk", bw, strlen(bw)) == TK_OK);
    int st = tk_ctx_link(ctx);
    if (st != TK_OK) fprintf(stderr, "link: %s\n", tk_ctx_error(ctx));
    CHECK(st == TK_OK);
    const tk_op *f = tk_op_find(ctx, "f");
    int idx = -1;
    CHECK(tk_op_nbackward(f) == 1 && strcmp(tk_op_backward_at(f, 0), "f_bw") == 0);
    CHECK(tk_op_backward_source(ctx, f, 0, 0, &idx) == TK_GRAD_FROM_GRAD && idx == 0);
    CHECK(tk_op_backward_source(ctx, f, 0, 1, &idx) == TK_GRAD_FROM_PARAM && idx == 1);
    CHECK(tk_op_backward_source(ctx, f, 0, 2, &idx) == TK_GRAD_FROM_OUTPUT && idx == 0);
    CHECK(tk_op_backward_source(ctx, f, 0, 3, &idx) == TK_GRAD_FROM_PARAM && idx == 2);
    CHECK(tk_op_backward_source(ctx, f, 0, 4, &idx) == -1);
    CHECK(tk_op_backward_target(ctx, f, 0, 0) == 0);
    CHECK(tk_op_param_differentiable(f, 0) && !tk_op_param_differentiable(f, 1) && !tk_op_param_differentiable(f, 2));
    tk_ctx_free(ctx);
}

/* Shape programs: what the torch shim evaluates over symbolic sizes. */
static void test_shape_code(void) {
    const char *src = "op s(a: float[..., N, 4], b: a.dtype[M, N], h: int? = N + 2 * M)\n"
                      "        -> o: a.dtype[..., h if h > 0 else -h, N // 2]:\n"
                      "    for i, j in o:\n        o[i, j] = 0.0\n";
    tk_ctx *ctx = tk_ctx_new();
    CHECK(tk_load_spec(ctx, "s.tk", src, strlen(src)) == TK_OK);
    const tk_op *op = tk_op_at(ctx, 0);
    tk_shape_instr code[16];
    CHECK(tk_op_batch_param(op) == 0);
    CHECK(tk_op_shape_has_batch(op, TK_SHAPE_INPUT, 0) && !tk_op_shape_has_batch(op, TK_SHAPE_INPUT, 1));
    CHECK(tk_op_shape_ndims(op, TK_SHAPE_OUTPUT, 0) == 3);
    CHECK(tk_op_shape_code(op, TK_SHAPE_INPUT, 0, 0, code, 16) == 0);    /* '...' */
    CHECK(tk_op_shape_code(op, TK_SHAPE_INPUT, 0, 1, code, 16) == 0);    /* binds N */
    CHECK(tk_op_shape_code(op, TK_SHAPE_INPUT, 0, 2, code, 16) == 1 && code[0].opc == TK_SH_CONST && code[0].a == 4);
    /* b's N must equal a's dim -2 */
    CHECK(tk_op_shape_code(op, TK_SHAPE_INPUT, 1, 1, code, 16) == 1 && code[0].opc == TK_SH_DIM &&
          code[0].a == 0 && code[0].b == -2);
    CHECK(tk_op_shape_code(op, TK_SHAPE_DEFAULT, 2, 0, code, 16) == 5 && code[4].opc == TK_SH_ADD &&
          code[1].opc == TK_SH_CONST && code[2].opc == TK_SH_DIM && code[2].a == 1 && code[2].b == -2);
    /* h if h > 0 else -h: h 0 > JZ(5) h JUMP(7) h NEG */
    int n = tk_op_shape_code(op, TK_SHAPE_OUTPUT, 0, 1, code, 16);
    CHECK(n == 8 && code[0].opc == TK_SH_PARAM && code[0].a == 2 && code[3].opc == TK_SH_JUMP_IF_ZERO &&
          code[3].a == 6 && code[5].opc == TK_SH_JUMP && code[5].a == 8 && code[7].opc == TK_SH_NEG);
    CHECK(tk_op_shape_code(op, TK_SHAPE_OUTPUT, 0, 2, code, 1) == 3);    /* asks for more room */
    CHECK(tk_op_shape_code(op, TK_SHAPE_OUTPUT, 0, 3, code, 16) == -1);
    tk_ctx_free(ctx);
    /* assert lines: their code, their text for errors, and tk_bind's check */
    const char *asrc = "op a(x: float[N], k: int = 2)\n        -> y: x.dtype[N]:\n    assert N % k == 0\n"
                       "    assert k > 1\n    for i in y:\n        y[i] = x[i]\n";
    ctx = tk_ctx_new();
    CHECK(tk_load_spec(ctx, "a.tk", asrc, strlen(asrc)) == TK_OK);
    op = tk_op_at(ctx, 0);
    char text[64];
    CHECK(tk_op_nasserts(op) == 2);
    /* N k % 0 ==: DIM PARAM MOD CONST EQ */
    CHECK(tk_op_shape_code(op, TK_SHAPE_ASSERT, 0, 0, code, 16) == 5 && code[0].opc == TK_SH_DIM &&
          code[1].opc == TK_SH_PARAM && code[2].opc == TK_SH_MOD && code[4].opc == TK_SH_EQ);
    CHECK(tk_op_shape_code(op, TK_SHAPE_ASSERT, 2, 0, code, 16) == -1);
    CHECK(tk_op_assert_text(op, 1, text, sizeof text) == 17 && strcmp(text, "k > 1 (a.tk:4:12)") == 0);
    CHECK(tk_op_assert_text(op, 0, text, 6) > 6 && strcmp(text, "(N % ") == 0);   /* cut, NUL-terminated */
    CHECK(tk_op_assert_text(op, 2, text, sizeof text) == -1);
    float data[6] = {0};
    for (int k = 1; k <= 4; k++) {
        tk_tensor_view v = {0};
        v.data = data, v.dtype = TK_F32, v.ndim = 1, v.sizes[0] = 6, v.strides[0] = 1, v.device = TK_CPU;
        tk_arg args[2] = {tk_arg_tensor(v), tk_arg_int(k)};
        tk_call call;
        tk_status st = tk_bind(op, args, 2, &call);
        CHECK((st == TK_OK) == (k == 2 || k == 3));
        if (k == 1) CHECK(strcmp(call.msg, "tk.a: assert k > 1 (a.tk:4:12) failed with k = 1 (from argument 'k')") == 0);
        if (k == 4)
            CHECK(strcmp(call.msg, "tk.a: assert (N % k) == 0 (a.tk:3:12) failed with N = 6, k = 4 "
                                   "(from arguments 'x', 'k')") == 0);
    }
    tk_ctx_free(ctx);
    /* 'or' stops at a true left side (its code jumps over N % g); one that
     * reads a float has no code (only tk_bind checks it) */
    const char *osrc = "op o(x: float[N], g: int, p: float)\n        -> y: x.dtype[N]:\n"
                       "    assert g == 0 or N % g == 0\n    assert p < 0.5\n    for i in y:\n        y[i] = x[i]\n";
    ctx = tk_ctx_new();
    CHECK(tk_load_spec(ctx, "o.tk", osrc, strlen(osrc)) == TK_OK);
    op = tk_op_at(ctx, 0);
    /* g 0 EQ JZ(6) 1 JUMP(13) | N g MOD 0 EQ 0 NE */
    int on = tk_op_shape_code(op, TK_SHAPE_ASSERT, 0, 0, code, 16);
    CHECK(on == 13 && code[3].opc == TK_SH_JUMP_IF_ZERO && code[3].a == 6 && code[5].opc == TK_SH_JUMP &&
          code[5].a == 13 && code[8].opc == TK_SH_MOD && code[12].opc == TK_SH_NE);
    CHECK(tk_op_shape_code(op, TK_SHAPE_ASSERT, 1, 0, code, 16) == 0);
    for (int g = 0; g <= 4; g++) {
        tk_tensor_view v = {0};
        v.data = data, v.dtype = TK_F32, v.ndim = 1, v.sizes[0] = 6, v.strides[0] = 1, v.device = TK_CPU;
        tk_arg args[3] = {tk_arg_tensor(v), tk_arg_int(g), tk_arg_float(g == 1 ? 0.5 : 0.25)};
        tk_call call;
        CHECK((tk_bind(op, args, 3, &call) == TK_OK) == (g == 0 || g == 2 || g == 3));
        if (g == 1) CHECK(strcmp(call.msg, "tk.o: assert p < 0.5 (o.tk:4:12) failed with p = 0.5 (from argument 'p')") == 0);
    }
    tk_ctx_free(ctx);
}

typedef struct good_spec {
    const char *text;
    const char *schema;
} good_spec;

static const good_spec k_good[] = {
    /* optional tensors: 'Tensor? b=None', with '...', with no dims, with a dtype of its own */
    {"op ot(x: float[..., N], b: x.dtype[N]? = -1.5, m: bool[..., N]? = True, s: float64[]? = 2, k: int32[N]? = 0)\n"
     "        -> y: x.dtype[..., N]:\n"
     "    for i in y:\n"
     "        y[i] = x[i] * s[] + b[i] + float(k[i]) if m[i] else 0.0\n",
     "ot(Tensor x, Tensor? b=None, Tensor? m=None, Tensor? s=None, Tensor? k=None) -> Tensor"},
    {"op oi(x: float[T, T], bias: x.dtype[T, T]? = -inf, u: uint8[T]? = 255, k: int64[T]? = -9007199254740992)\n"
     "        -> y: x.dtype[T, T]:\n"
     "    for i, j in y:\n"
     "        y[i, j] = x[i, j] + bias[i, j] + float(u[j] + k[i])\n",
     "oi(Tensor x, Tensor? bias=None, Tensor? u=None, Tensor? k=None) -> Tensor"},
    /* scratch tensors: not in the schema's returns */
    {"op sc(x: float[..., N]) -> (y: x.dtype[..., N], m: x.dtype[..., 1]):\n"
     "    scratch t: float32[..., N]\n"
     "    scratch u: x.dtype[..., 2]\n"
     "    for _ in y:\n"
     "        for i in range(N):\n"
     "            t[i] = x[N - 1 - i]\n"
     "        u[0] = 0.0\n"
     "        u[1] = 1.0\n"
     "        for i in range(N):\n"
     "            y[i] = t[i] + u[1]\n"
     "        m[0] = u[0]\n",
     "sc(Tensor x) -> (Tensor, Tensor)"},
    {"op sm(p: mut float[N]):\n"
     "    scratch t: p.dtype[N]\n"
     "    for _ in p:\n"
     "        for i in range(N):\n"
     "            t[i] = p[i]\n"
     "        for i in range(N):\n"
     "            p[i] = t[N - 1 - i]\n",
     "sm(Tensor(a!) p) -> ()"},
    /* 'mut' parameters: alias sets in the schema, only the declared outputs returned; a tensor named mut */
    {"op g(p: mut float[..., N], mut: p.dtype[N], s: mut float32[..., N]) -> y: p.dtype[..., N]:\n"
     "    for i in y:\n"
     "        a = p[i] + mut[i]\n"
     "        p[i] = a\n"
     "        s[i] = s[i] * 2.0\n"
     "        y[i] = a\n",
     "g(Tensor(a!) p, Tensor mut, Tensor(b!) s) -> Tensor"},
    {"op g(mut: mut float[N], x: mut.dtype[N]):\n"
     "    for i in mut:\n"
     "        mut[i] = mut[i] + x[i]\n",
     "g(Tensor(a!) mut, Tensor x) -> ()"},
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
     "g(Tensor x, bool flag=True, float eps=-0.5, SymInt n=3) -> Tensor"},
    /* float defaults: the shortest text that reads back, always a float */
    {"op fd(x: float[N], a: float = 1e-5, b: float? = 2, c: float? = -0.0, d: float = 0.1,\n"
     "      e: float = 123456789.125, f: float? = 1e300, g: int? = N, h: float = -7.5e-12) -> y: x.dtype[N]:\n"
     "    for i in y:\n"
     "        y[i] = x[i] * a + b + c + d + e + f + float(g) + h\n",
     "fd(Tensor x, float a=1e-05, float? b=2.0, float? c=-0.0, float d=0.1, float e=123456789.125, "
     "float? f=1e+300, SymInt? g=None, float h=-7.5e-12) -> Tensor"},
    {"op two(a: int32[..., K]) -> (p: int64[..., K], q: float32[..., K]):\n"
     "    for k in p:\n"
     "        p[k] = a[k] // 2\n"
     "        q[k] = float32(a[k]) / 2\n",
     "two(Tensor a) -> (Tensor, Tensor)"},
    /* a row loop: outputs of other ranks, read-back, '_' anywhere */
    {"op scan(k: float[B, T, C]) -> (y: k.dtype[B, T, C], last: k.dtype[C, B]):\n"
     "    for b, _, c in y:\n"
     "        s = 0.0\n"
     "        for t in range(T):\n"
     "            s += k[b, t, c]\n"
     "            y[b, t, c] = s\n"
     "        last[c, b] = y[b, T - 1, c] * 2.0\n",
     "scan(Tensor k) -> (Tensor, Tensor)"},
};

/* A context holding spec `text`, loaded as `file`; NULL (the error printed,
 * the check failed) when it does not load. */
static tk_ctx *load_good(const char *file, const char *text) {
    tk_ctx *ctx = tk_ctx_new();
    int st = tk_load_spec(ctx, file, text, strlen(text));
    if (st != TK_OK) fprintf(stderr, "%s: %s\n", file, tk_ctx_error(ctx));
    CHECK(st == TK_OK);
    if (st == TK_OK) return ctx;
    tk_ctx_free(ctx);
    return NULL;
}

/* A row loop whose output is empty through its owned dim (T = 0) while its
 * parallel dims are huge: the iteration count overflows, an error, not
 * signed overflow (the fuzzer's finding, regressions/bind-row-domain-overflow-fuzz.tk). */
static void test_row_domain_overflow(void) {
    tk_ctx *ctx = load_good("rd.tk", "op rd(k: float32[B, T, C]) -> (y: float32[B, T, C], last: float32[C, B]):\n"
                                     "    for b, _, c in y:\n        last[c, b] = 1.0\n"
                                     "        for t in range(T):\n            y[b, t, c] = k[b, t, c]\n");
    if (!ctx) return;
    int64_t sizes[3] = {3037000500, 0, (int64_t)1 << 62}, strides[3] = {0, 0, 0};
    tk_arg arg = tk_arg_tensor(tk_view(NULL, TK_F32, 3, sizes, strides));
    tk_call call;
    CHECK(tk_bind(tk_op_at(ctx, 0), &arg, 1, &call) != TK_OK);
    CHECK(strstr(call.msg, "output 'y': the row loop over it has too many iterations") != NULL);
    if (!strstr(call.msg, "too many iterations")) fprintf(stderr, "rd.tk: %s\n", call.msg);
    tk_ctx_free(ctx);
}

/* Scratch tensors are outputs after the returned ones and before the 'mut'
 * parameters'; an op with one is not in place (tk_op_in_place). */
static void test_scratch_outputs(void) {
    static const char text[] =
        "op sc(x: float[..., N]) -> y: x.dtype[..., N]:\n"
        "    scratch t: float[..., N]\n"
        "    for _ in y:\n"
        "        for i in range(N):\n"
        "            t[i] = x[i]\n"
        "        for i in range(N):\n"
        "            y[i] = t[N - 1 - i]\n"
        "op sm(p: mut float[N], q: mut p.dtype[N]):\n"
        "    scratch t: p.dtype[N]\n"
        "    for _ in p:\n"
        "        for i in range(N):\n"
        "            t[i] = p[i]\n"
        "        for i in range(N):\n"
        "            p[i] = t[N - 1 - i]\n"
        "            q[i] = t[i]\n";
    /* 15 inputs, each its own dtype variable: the longest variant code (74
     * characters), whole in the kernel's name */
    char wide[2048] = "op wide(";
    for (int i = 0; i < 15; i++)
        snprintf(wide + strlen(wide), sizeof wide - strlen(wide), "%sa%d: bfloat16[N]", i ? ", " : "", i);
    snprintf(wide + strlen(wide), sizeof wide - strlen(wide), ") -> y: float32[N]:\n    for i in y:\n"
             "        y[i] = float32(a0[i]) + float32(a14[i])\n");
    tk_ctx *wctx = load_good("wide.tk", wide);
    if (wctx) {
        const char *code = tk_op_variant_code(tk_op_find(wctx, "wide"), 0);
        CHECK(code && strlen(code) == 74 && strncmp(code + 70, "bf16", 4) == 0);
    }
    tk_ctx_free(wctx);
    tk_ctx *ctx = load_good("sc.tk", text);
    if (ctx) {
        const tk_op *sc = tk_op_find(ctx, "sc"), *sm = tk_op_find(ctx, "sm");
        CHECK(tk_op_noutputs(sc) == 2 && tk_op_nreturns(sc) == 1 && !tk_op_in_place(sc));
        CHECK(!tk_op_output_scratch(sc, 0) && tk_op_output_scratch(sc, 1) && !tk_op_output_scratch(sc, 2));
        CHECK(strcmp(tk_op_output_name(sc, 1), "t") == 0 && tk_op_output_alias(sc, 1) == -1);
        /* 'float': the body's float type, float32 in the float16 and bfloat16 variants */
        for (int v = 0; v < tk_op_nvariants(sc); v++) {
            const char *code = tk_op_variant_code(sc, v);
            CHECK(tk_op_output_dtype(sc, v, 1) == (strcmp(code, "f64") == 0 ? TK_F64 : TK_F32));
            CHECK(tk_op_output_dtype(sc, v, 0) != TK_F32 || strcmp(code, "f32") == 0);
        }
        CHECK(tk_op_noutputs(sm) == 3 && tk_op_nreturns(sm) == 0 && tk_op_in_place(sm));
        CHECK(tk_op_output_scratch(sm, 0) && strcmp(tk_op_output_name(sm, 0), "t") == 0);
        CHECK(tk_op_output_alias(sm, 0) == -1 && tk_op_output_alias(sm, 1) == 0 && tk_op_output_alias(sm, 2) == 1);
        CHECK(!tk_op_output_scratch(sm, 1) && !tk_op_output_scratch(sm, 2));
    }
    tk_ctx_free(ctx);
}

/* tk_op_output_written: 1 only for outputs stored outside every `if` and
 * `for` of the loop body (the shim reuses cached memory for those alone). */
static void test_output_written(void) {
    static const char text[] =
        "op ow(x: float32[N]) -> (a: float32[N], b: float32[N], c: float32[N], d: float32[N]):\n"
        "    for i in a:\n"
        "        if x[i] > 0.0:\n"
        "            b[i] = 1.0\n"
        "        else:\n"
        "            b[i] = 2.0\n"
        "        for j in range(1):\n"
        "            c[i] = 3.0\n"
        "        a[i] = x[i]\n"
        "        if x[i] > 1.0:\n"
        "            d[i] = 4.0\n"
        "        d[i] = 5.0\n";
    tk_ctx *ctx = load_good("ow.tk", text);
    if (ctx) {
        const tk_op *op = tk_op_at(ctx, 0);
        CHECK(tk_op_output_written(op, 0) == 1);   /* a: top level */
        CHECK(tk_op_output_written(op, 1) == 0);   /* b: both branches, but under an if */
        CHECK(tk_op_output_written(op, 2) == 0);   /* c: in a loop (that could run 0 times) */
        CHECK(tk_op_output_written(op, 3) == 1);   /* d: conditional, then top level */
        CHECK(tk_op_output_written(op, 4) == 0 && tk_op_output_written(op, -1) == 0);
        CHECK(tk_op_loop_free(op) == 0);   /* the `for` inside */
    }
    tk_ctx_free(ctx);
    /* tk_op_loop_free: no `for` at any depth (one under an `if` counts) */
    static const char flat[] = "op flat(x: float32[N]) -> y: float32[N]:\n    for i in y:\n"
                               "        if x[i] > 0.0:\n            y[i] = 1.0\n        else:\n"
                               "            y[i] = x[i] * 2.0\n";
    static const char nested[] = "op nested(x: float32[N]) -> y: float32[N]:\n    for i in y:\n"
                                 "        s = 0.0\n        if x[i] > 0.0:\n"
                                 "            for j in range(2):\n                s += 1.0\n        y[i] = s\n";
    const char *texts[2] = {flat, nested};
    for (int t = 0; t < 2; t++) {
        ctx = load_good("lf.tk", texts[t]);
        if (ctx) CHECK(tk_op_loop_free(tk_op_at(ctx, 0)) == (t == 0));
        tk_ctx_free(ctx);
    }
    /* a row loop: never loop-free (index i does not write element i), and a
     * top-level store covers an output only where loop variables index all
     * its dims (last[c, b]; y's owned dim t: no) */
    static const char row[] = "op row(k: float32[B, T, C]) -> (y: float32[B, T, C], last: float32[C, B]):\n"
                              "    for b, _, c in y:\n        y[b, 0, c] = k[b, 0, c]\n        last[c, b] = 1.0\n";
    ctx = load_good("row.tk", row);
    if (ctx) {
        const tk_op *op = tk_op_at(ctx, 0);
        CHECK(tk_op_loop_free(op) == 0);
        CHECK(tk_op_output_written(op, 0) == 0 && tk_op_output_written(op, 1) == 1);
    }
    tk_ctx_free(ctx);
    /* tk_op_memory_bound: loop-free, and no function but the cheap ones, in
     * any expression (a condition, an index, an argument of a cheap one) */
    static const struct { const char *body; int bound; } mb[] = {
        {"        y[i] = 2.0 * x[i]\n", 1},
        {"        y[i] = max(abs(x[i]), float(int(floor(x[i])))) if x[i] > min(0.0, ceil(x[i])) else 0.0\n", 1},
        {"        y[i] = 0.5 * x[i] * (1.0 + erf(x[i]))\n", 0},
        {"        y[i] = x[i] if rand(1, 2) > 0.5 else 0.0\n", 0},
        {"        if exp(x[i]) > 2.0:\n            y[i] = 1.0\n        else:\n            y[i] = 0.0\n", 0},
        {"        y[i] = x[min(i, int(sqrt(float(i))))]\n", 0},
        {"        y[i] = max(0.0, tanh(x[i]))\n", 0},
        {"        y[i] = x[i] ** 2.0\n", 0},
        {"        y[i] = x[i] % 1.5 + x[i] // 2.0\n", 0},
        {"        y[i] = x[(i + 1) % N] + float(i // 2)\n", 1},   /* int // and %: cheap */
        {"        s = 0.0\n        for j in range(2):\n            s += x[i]\n        y[i] = s\n", 0},
    };
    for (size_t t = 0; t < sizeof mb / sizeof mb[0]; t++) {
        char mbt[512];
        snprintf(mbt, sizeof mbt, "op mb(x: float32[N]) -> y: float32[N]:\n    for i in y:\n%s", mb[t].body);
        ctx = load_good("mb.tk", mbt);
        if (ctx) CHECK(tk_op_memory_bound(tk_op_at(ctx, 0)) == mb[t].bound);
        tk_ctx_free(ctx);
    }
    ctx = load_good("row.tk", row);
    if (ctx) CHECK(tk_op_memory_bound(tk_op_at(ctx, 0)) == 0);   /* a row loop */
    tk_ctx_free(ctx);
}

/* The error's fields agree with its status and text: every spec error is
 * at a place in "bad.tk" and its text is "bad.tk:line:col: error: message". */
static int error_fields_ok(const tk_ctx *ctx, int st) {
    const tk_error *e = tk_ctx_last_error(ctx);
    char want[sizeof e->text];
    snprintf(want, sizeof want, "%s:%d:%d: error: %s", e->file, e->line, e->col, e->message);
    int ok = e->status == st && strcmp(e->file, "bad.tk") == 0 && e->line > 0 && e->col > 0 &&
             strcmp(e->text, want) == 0 && strcmp(e->text, tk_ctx_error(ctx)) == 0;
    if (!ok) fprintf(stderr, "error fields: status %d/%d file '%s' %d:%d message '%s'\n", e->status, st, e->file,
                     e->line, e->col, e->message);
    return ok;
}

/* tk_error_from_message: no place, the text is the message; a previous
 * error's place does not survive. */
static void test_error_from_message(void) {
    tk_error e;
    memset(&e, 0x55, sizeof e);
    e.file[sizeof e.file - 1] = 0;
    tk_error_from_message(&e, TK_ERR_NOTFOUND, "tk: no C compiler");
    CHECK(e.status == TK_ERR_NOTFOUND && e.line == 0 && e.col == 0 && e.file[0] == 0);
    CHECK(strcmp(e.message, "tk: no C compiler") == 0 && strcmp(e.text, e.message) == 0);
    tk_error_from_message(&e, TK_ERR_INVALID, NULL);
    CHECK(e.status == TK_ERR_INVALID && e.message[0] == 0 && e.text[0] == 0);
    tk_error_from_message(NULL, TK_ERR_INVALID, "ignored");   /* no crash */
}

int main(void) {
    test_output_written();
    test_scratch_outputs();
    test_row_domain_overflow();
    test_error_from_message();
    CHECK(tk_ctx_last_error(NULL)->status == TK_ERR_INVALID);
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
    for (size_t i = 0; i < sizeof k_bad_link / sizeof k_bad_link[0]; i++) {
        tk_ctx *ctx = tk_ctx_new();
        int st = tk_load_spec(ctx, "bad.tk", k_bad_link[i].text, strlen(k_bad_link[i].text));
        if (st != TK_OK) fprintf(stderr, "bad link spec %zu does not load: %s\n", i, tk_ctx_error(ctx));
        CHECK(st == TK_OK);
        st = tk_ctx_link(ctx);
        int ok = st == TK_ERR_CHECK && strcmp(tk_ctx_error(ctx), k_bad_link[i].error) == 0;
        if (!ok)
            fprintf(stderr, "bad link spec %zu: expected\n  %s\ngot (status %d)\n  %s\n", i, k_bad_link[i].error,
                    st, tk_ctx_error(ctx));
        CHECK(ok);
        CHECK(error_fields_ok(ctx, st));
        tk_ctx_free(ctx);
    }
    test_link_ok();
    test_link_batch_generic();
    test_shape_code();
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
