/* tk.h - the public C API of the tk spec compiler.
 *
 * A worked example: compile a spec and run it on plain buffers.
 *
 *     tk_ctx *ctx = tk_ctx_new();
 *     const char *src =
 *         "op scale(x: float32[N], a: float) -> y: float32[N]:\n"
 *         "    for i in y:\n"
 *         "        y[i] = a * x[i]\n";
 *     if (tk_load_spec(ctx, "scale.tk", src, strlen(src)) != TK_OK)
 *         fprintf(stderr, "%s\n", tk_ctx_error(ctx));   // file:line:col: error: ...
 *     const tk_op *op = tk_op_find(ctx, "scale");
 *
 *     float x[4] = {1, 2, 3, 4}, y[4];
 *     int64_t n = 4, st = 1;
 *     tk_arg args[2] = {tk_arg_tensor(tk_view(x, TK_F32, 1, &n, &st)),
 *                       tk_arg_float(2.0)};
 *     tk_call call;
 *     if (tk_bind(op, args, 2, &call) != TK_OK) puts(call.msg);
 *     tk_set_output(&call, 0, tk_view(y, TK_F32, 1, &n, &st));
 *     tk_run_cpu(&call, 0, call.kargs.numel);           // y = {2, 4, 6, 8}
 *     tk_ctx_free(ctx);
 *
 * tk_run_cpu needs a kernel for the op: built-in ops get theirs at build
 * time (tk_ctx_add_builtins); tk_emit generates C or CUDA C for any op.
 *
 * Errors: every fallible call returns a tk_status; loading, linking and
 * emitting leave a tk_error in the context (tk_ctx_last_error: status,
 * file, line, col, message; tk_ctx_error: the same as one line of text),
 * binding and running a message in call->msg.
 * Nothing here exits, aborts or keeps global state. A context may be read
 * from several threads, also while one thread loads more specs into it (the
 * op table is append-only and tk_op pointers stay valid); loads are
 * serialised by the caller; tk_call is per call.
 *
 * Specs loaded at run time get their CPU kernels from the system C compiler:
 * tk_cc.h (tk_cc_load_spec). */
#ifndef TK_H
#define TK_H

#include <stddef.h>
#include <stdint.h>

#include "tk_kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TK_VERSION "0.1.0"

typedef enum tk_status {
    TK_OK = 0,
    TK_ERR_SYNTAX,      /* malformed spec text */
    TK_ERR_CHECK,       /* well-formed but wrong: names, types, shapes */
    TK_ERR_ARG,         /* a call's arguments do not fit the op */
    TK_ERR_NOMEM,
    TK_ERR_NOTFOUND,    /* no such op or kernel */
    TK_ERR_INVALID,     /* misuse of the API */
    TK_ERR_COMPILE,     /* the C compiler failed, or its output did not load */
    TK_ERR_BOUNDS       /* a kernel's bounds check failed (docs/spec.md, Bounds) */
} tk_status;

/* ORDER DTYPE: tk_dtype_name / tk_dtype_code in dtype.c follow this order. */
typedef enum tk_dtype {
    TK_BOOL, TK_U8, TK_I8, TK_I16, TK_I32, TK_I64,
    TK_F16, TK_BF16, TK_F32, TK_F64,
    TK_DTYPE_COUNT
} tk_dtype;

#define TK_DTYPES_ANY ((1u << TK_DTYPE_COUNT) - 1u)
#define TK_DTYPES_FLOAT ((1u << TK_F16) | (1u << TK_BF16) | (1u << TK_F32) | (1u << TK_F64))
#define TK_DTYPES_INT ((1u << TK_U8) | (1u << TK_I8) | (1u << TK_I16) | (1u << TK_I32) | (1u << TK_I64))

const char *tk_dtype_name(tk_dtype d);  /* "float32"; torch's name without "torch." */
const char *tk_dtype_code(tk_dtype d);  /* "f32": suffix of kernel names */
size_t tk_dtype_size(tk_dtype d);
int tk_dtype_from_name(const char *name, tk_dtype *out);  /* 1 if known */

typedef enum tk_device { TK_CPU = 0, TK_CUDA = 1, TK_META = 2 } tk_device;

/* A strided tensor (DLPack-shaped): sizes and strides in elements. */
typedef struct tk_tensor_view {
    void *data;
    tk_dtype dtype;
    int ndim;
    int64_t sizes[TK_MAX_DIMS];
    int64_t strides[TK_MAX_DIMS];
    tk_device device;
    int device_index;
} tk_tensor_view;

typedef struct tk_arg {
    int kind;           /* tk_param_kind: TENSOR, INT, FLOAT, BOOL (ast.h order) */
    int is_none;        /* an optional parameter passed as None (tk_arg_none) */
    int64_t i;          /* INT and BOOL */
    double f;           /* FLOAT */
    tk_tensor_view t;   /* TENSOR */
} tk_arg;

tk_tensor_view tk_view(void *data, tk_dtype dtype, int ndim,
                       const int64_t *sizes, const int64_t *strides);
tk_arg tk_arg_tensor(tk_tensor_view v);
tk_arg tk_arg_int(int64_t i);
tk_arg tk_arg_none(void);
tk_arg tk_arg_float(double f);
tk_arg tk_arg_bool(int b);

typedef struct tk_ctx tk_ctx;
typedef struct tk_op tk_op;

tk_ctx *tk_ctx_new(void);                   /* NULL only when out of memory */
void tk_ctx_free(tk_ctx *ctx);
const char *tk_ctx_error(const tk_ctx *ctx); /* last load/emit error as text, "" if none */

/* The core's one error type: what failed, where in a spec, and why. Every
 * load, check, link and emit error of a context is one of these
 * (tk_ctx_last_error); callers read the fields (the Python package does,
 * through the shim) instead of parsing the text. */
typedef struct tk_error {
    int status;             /* tk_status; TK_OK when there is no error */
    int line, col;          /* 1-based place in `file`; 0 when not about a place */
    char file[256];         /* the spec's file name; "" when not about a spec */
    char message[1024];     /* the message alone: "unknown name 'q'" */
    char text[1536];        /* "file:line:col: error: message" (the parts there are) */
} tk_error;

/* The context's last error; status TK_OK (and "" texts) if none. */
const tk_error *tk_ctx_last_error(const tk_ctx *ctx);
/* Fills *e with an error about no place in a spec: status and message (the
 * text is the message alone). For a host that reports its own failures in
 * the same type (the PyTorch shim does). A NULL e is ignored. */
void tk_error_from_message(tk_error *e, int status, const char *message);

/* Parses and checks a spec file and adds its ops to ctx. On error nothing
 * is added and the message reads "file:line:col: error: ...". */
tk_status tk_load_spec(tk_ctx *ctx, const char *file, const char *text, size_t len);

int tk_op_count(const tk_ctx *ctx);
const tk_op *tk_op_at(const tk_ctx *ctx, int i);
const tk_op *tk_op_find(const tk_ctx *ctx, const char *name);

const char *tk_op_name(const tk_op *op);
const char *tk_op_file(const tk_op *op);
const char *tk_op_schema(const tk_op *op);  /* "name(Tensor x, ...) -> Tensor" */
const char *tk_op_backward(const tk_op *op); /* the first backward op's name, NULL if none */
int tk_op_nbackward(const tk_op *op);          /* ops named by 'backward a, b' */
const char *tk_op_backward_at(const tk_op *op, int i);
int tk_op_nparams(const tk_op *op);
int tk_op_param_kind(const tk_op *op, int i);     /* tk_param_kind */
const char *tk_op_param_name(const tk_op *op, int i);
int tk_op_param_optional(const tk_op *op, int i);
int tk_op_noutputs(const tk_op *op);
const char *tk_op_output_name(const tk_op *op, int i);
/* In-place parameters (docs/spec.md): a tensor parameter declared 'mut' is
 * also an output, after the declared ones and the scratch tensors, of its
 * name: the kernel loads and
 * stores it through that output's slot. Set that output (tk_set_output) to
 * the same tensor as the parameter, which must not overlap itself (no
 * stride-0 dims) nor any other argument. The op returns its first
 * tk_op_nreturns outputs. */
int tk_op_param_mut(const tk_op *op, int i);      /* 1 if tensor parameter i is 'mut' */
int tk_op_output_alias(const tk_op *op, int i);   /* the 'mut' parameter output i is, -1 for a new tensor */
int tk_op_nreturns(const tk_op *op);              /* the outputs the op returns (the first ones) */
int tk_op_in_place(const tk_op *op);              /* 1 if some parameter is 'mut' */
int tk_op_random(const tk_op *op);                /* 1 if the body draws rand() or randn() (docs/spec.md) */
/* A backward op derived by 'backward auto': the name of the op it
 * differentiates; NULL for an op the spec text writes. */
const char *tk_op_derived_from(const tk_op *op);
/* 1 if output i is a scratch tensor (a 'scratch' line; docs/spec.md, Scratch
 * tensors): the caller gives it memory of its dims and dtype, uninitialised,
 * that the op's body uses and the op does not return. They follow the
 * returned outputs and precede the 'mut' parameters' outputs. */
int tk_op_output_scratch(const tk_op *op, int i);
/* 1 when the op writes every element of output i: its loop body stores it
 * outside any `if` or `for`; 0 when some element may stay unwritten (a store
 * under a condition only), which then holds whatever the memory held. */
int tk_op_output_written(const tk_op *op, int i);
/* 1 if output i is a sum (docs/spec.md, Sums: a row loop's output stored
 * only with '+='): the caller zeroes it before the kernel runs, and runs
 * the ranges of the index space that add into one buffer one after
 * another (the shim gives parts of the range their own buffers and adds
 * them up). */
int tk_op_output_sum(const tk_op *op, int i);
/* Output i's dtype as declared in variant v: the tensor the op returns.
 * A sum declared float16 or bfloat16 is kept in float32 (float64 when an
 * input is) while the kernel adds into it: tk_call.out_dtype says so, and
 * the caller rounds it to this dtype after. -1 for a bad i or v. */
int tk_op_output_dtype(const tk_op *op, int variant, int i);
int tk_op_has_sum(const tk_op *op);   /* 1 if some output is a sum (tk_cuda_launch refuses such an op
                                        * whose loop has more than one iteration, its threads would race,
                                        * unless its kernel runs in parts: tk_cuda_parts) */
/* 1 when the op's loop body has no `for`: index i of the index space
 * writes element i of each output. 0 for a row loop (its iterations own
 * rows, and its outputs may differ in shape). */
int tk_op_loop_free(const tk_op *op);
/* 1 when the op is loop-free and its body calls no function but min, max,
 * abs, floor, ceil and the conversions, and has no `**` and no float `//`
 * or `%`: its speed is that of its memory traffic (brick_pad, a scale),
 * where an erf or a random draw per element (gelu, dropout) makes it
 * compute-bound. 0 for NULL. */
int tk_op_memory_bound(const tk_op *op);
/* 1 when the body reads an element of tensor parameter i; 0 when it only
 * takes the tensor's shape (brick_pad_backward's tile: TH and TW), or for
 * a scalar or a bad i. The autograd shim saves only the shape of such a
 * tensor for a backward op. */
int tk_op_param_read(const tk_op *op, int i);
/* Tensor parameter i's dtype group: the parameter whose dtype it shares
 * through 'x.dtype' chains (itself for a dtype class); -1 for a scalar. */
int tk_op_param_dtype_group(const tk_op *op, int i);
/* 1 if tensor parameter i accepts a float dtype (it can carry a gradient). */
int tk_op_param_differentiable(const tk_op *op, int i);
/* Tensor parameter i's allowed dtypes, a mask of (1u << tk_dtype) bits (its
 * dtype group's for 'x.dtype'); 0 for a scalar or a bad i. */
unsigned tk_op_param_dtypes(const tk_op *op, int i);
/* Declared dim j of tensor parameter i (0 <= j < tk_op_shape_ndims(op,
 * TK_SHAPE_INPUT, i)): TK_DIM_BATCH for '...', TK_DIM_NAME (a symbolic dim:
 * *name) or TK_DIM_FIXED (a literal size: *value); -1 for a bad (i, j).
 * name and value may be NULL. */
enum { TK_DIM_BATCH, TK_DIM_NAME, TK_DIM_FIXED };
int tk_op_param_dim(const tk_op *op, int i, int j, const char **name, int64_t *value);

/* ---- backward ops (docs/autograd.md) ----------------------------------------
 * An op names the ops that compute its gradients ('backward a, b'). They are
 * matched by name: a backward op's parameter is one of the forward op's
 * parameters (same name, same kind), 'grad_<output>' (the incoming gradient
 * of a forward output) or a forward output by name; its outputs are named
 * 'grad_<param>' for float forward tensor parameters, each made by at most
 * one backward op (a parameter none makes is not differentiable: the shim
 * refuses an input there that requires grad). tk_ctx_link checks every op of ctx against
 * this (call it once all spec files are loaded: a backward may live in
 * another file); the accessors below read the links it checked. */
tk_status tk_ctx_link(tk_ctx *ctx);

typedef enum tk_grad_source {
    TK_GRAD_FROM_PARAM,     /* forward parameter `index` */
    TK_GRAD_FROM_GRAD,      /* incoming gradient of forward output `index` */
    TK_GRAD_FROM_OUTPUT     /* forward output `index` (saved) */
} tk_grad_source;

/* Where parameter j of backward op b (0 <= b < tk_op_nbackward) comes from;
 * -1 if b, j or the names do not link. */
int tk_op_backward_source(const tk_ctx *ctx, const tk_op *op, int b, int j, int *index);
/* The forward parameter whose gradient output j of backward op b is; -1 if none. */
int tk_op_backward_target(const tk_ctx *ctx, const tk_op *op, int b, int j);

/* ---- shape programs -----------------------------------------------------------
 * The int expressions of an op's header (input dims, output dims, defaults of
 * 'int?' parameters) as postfix code, so a caller can evaluate them over its
 * own integer type: the torch shim's Meta kernel evaluates them over
 * c10::SymInt for symbolic shapes. A stack machine: */
typedef enum tk_shape_opc {
    TK_SH_CONST,        /* push a */
    TK_SH_DIM,          /* push the size of tensor parameter a's dim b (b < 0: from the end) */
    TK_SH_PARAM,        /* push int/bool parameter a; if None, run its TK_SHAPE_DEFAULT code */
    TK_SH_NEG, TK_SH_NOT, TK_SH_ABS,                        /* x -> f(x) */
    TK_SH_ADD, TK_SH_SUB, TK_SH_MUL, TK_SH_FLOORDIV,        /* x y -> x op y; // and % */
    TK_SH_MOD, TK_SH_EQ, TK_SH_NE, TK_SH_LT, TK_SH_LE,      /*   as in Python */
    TK_SH_GT, TK_SH_GE, TK_SH_AND, TK_SH_OR, TK_SH_MIN, TK_SH_MAX,
    TK_SH_JUMP_IF_ZERO, /* pop x; if x == 0 continue at instruction a */
    TK_SH_JUMP          /* continue at instruction a */
} tk_shape_opc;

typedef struct tk_shape_instr {
    int opc;            /* tk_shape_opc */
    int b;
    int64_t a;
} tk_shape_instr;

typedef enum tk_shape_of {
    TK_SHAPE_INPUT,     /* (i, j): tensor parameter i's dim j: what its size must equal */
    TK_SHAPE_OUTPUT,    /* (i, j): output i's dim j */
    TK_SHAPE_DEFAULT,   /* (i, -): the default of 'int?' parameter i */
    TK_SHAPE_ASSERT     /* (i, -): the condition of assert line i (nonzero: it holds); no code (0)
                         * for one that reads a float, which only tk_bind checks */
} tk_shape_of;

/* Entries of a declared shape ('...' counts as one); whether it starts with '...'. */
int tk_op_shape_ndims(const tk_op *op, tk_shape_of what, int i);
int tk_op_shape_has_batch(const tk_op *op, tk_shape_of what, int i);
/* Writes the code of one shape entry into code[0..cap) and returns its
 * length (call again with more room if it is > cap); 0 for '...' (the batch
 * dims: those of every '...' input, broadcast as torch broadcasts) and for a
 * dim that binds a name (nothing to check); -1 for a bad (what, i, j). */
int tk_op_shape_code(const tk_op *op, tk_shape_of what, int i, int j,
                     tk_shape_instr *code, int cap);
/* The first tensor parameter with '...' dims, -1 if none. */
int tk_op_batch_param(const tk_op *op);
/* The op's 'assert' lines (docs/spec.md, Asserts): how many; the text of
 * assert i for an error, "(D % 2) == 0 (rotary.tk:11:12)", into buf (cut to
 * n - 1 characters); its length, -1 for a bad i. */
int tk_op_nasserts(const tk_op *op);
int tk_op_assert_text(const tk_op *op, int i, char *buf, size_t n);

/* Kernels: one per combination of the op's dtype variables (variant). */
int tk_op_nvariants(const tk_op *op);
const char *tk_op_kernel_name(const tk_op *op, int variant); /* "tk_rwkv_forward__f32" */
/* A kernel may be attached while other threads run the op (a variant
 * compiled on its first call): set and get are a release store and an
 * acquire load, and tk_run_cpu reads the kernel the same way. */
tk_status tk_op_set_cpu_kernel(tk_op *op, int variant, tk_cpu_fn fn);
tk_cpu_fn tk_op_cpu_kernel(const tk_op *op, int variant);  /* NULL if none */
/* A CPU kernel that runs its row loop in parts (docs/spec.md, Row loops:
 * the generated C marks it with a constant <kernel>_parts): declared with
 * the kernel itself (before tk_op_set_cpu_kernel). tk_op_cpu_parts: 1 when
 * the variant's kernel is that one, so a caller may run it as kargs.nparts
 * parts (tk_run_cpu checks the same, and refuses parts of another kernel). */
tk_status tk_op_set_cpu_parts(tk_op *op, int variant, tk_cpu_fn fn);
int tk_op_cpu_parts(const tk_op *op, int variant);
const char *tk_op_variant_code(const tk_op *op, int variant); /* "f32", "f16_i64"; NULL if none */
tk_op *tk_op_find_mut(tk_ctx *ctx, const char *name);
/* Checked kernels (TK_EMIT_CHECKED) for every later emit of op: what a
 * caller sets before the op's first kernel is made (the PyTorch shim: for
 * torch_tk.kernel(..., checked=True) and TK_CHECKED=1). 0 by default. */
void tk_op_set_checked(tk_op *op, int on);
int tk_op_checked(const tk_op *op);

/* A bound call: validated arguments, output shapes, kernel arguments. */
typedef struct tk_call {
    const tk_op *op;
    int variant;
    tk_dtype float_type;                        /* TK_F32 or TK_F64 */
    int noutputs;
    tk_dtype out_dtype[TK_MAX_TENSORS];
    int out_ndim[TK_MAX_TENSORS];
    int64_t out_sizes[TK_MAX_TENSORS][TK_MAX_DIMS];
    tk_device device;
    int device_index;
    tk_kargs kargs;
    int64_t index_work;                         /* elements of the loop output one index of
                                                 * kargs.numel covers: 1, or a row loop's row */
    char msg[512];                              /* error of the last call on this struct */
    int bound;                                  /* 1 once tk_bind succeeded (tk_set_output, tk_run_cpu) */
    unsigned none;                              /* bit kargs slot: an optional tensor passed as None */
} tk_call;

/* Checks args against the op (count, kinds, dtypes, ranks, symbolic dims,
 * devices), evaluates defaults and output shapes. Errors name the op and the
 * argument: "tk.rwkv_forward: argument 'k': expected 3 dims (B, C, T), got 2". */
tk_status tk_bind(const tk_op *op, const tk_arg *args, int nargs, tk_call *call);
/* The checks of tk_bind that do not depend on sizes (count, kinds, dtypes,
 * ranks, devices); fills op, variant, float_type, noutputs, out_dtype and
 * out_ndim. For callers whose sizes are symbolic (the shim's Meta kernel),
 * which check dims and compute output shapes with tk_op_shape_code. */
tk_status tk_bind_types(const tk_op *op, const tk_arg *args, int nargs, tk_call *call);
/* Whether a and b bind alike: the same kind and value, or for tensors the
 * same dtype, sizes, strides and device (data pointers aside). tk_bind's
 * result depends on nothing else, so a caller that keeps the arguments of
 * a bound call can reuse it for arguments that bind alike (tk_rebind_data). */
int tk_arg_same_binding(const tk_arg *a, const tk_arg *b);
/* Points a call bound by tk_bind at new data: args must bind alike, one by
 * one, with the arguments the call was bound with (the caller checks that
 * with tk_arg_same_binding). Sets the tensor parameters' data pointers and
 * clears the outputs, which tk_set_output then attaches again. */
tk_status tk_rebind_data(tk_call *call, const tk_arg *args, int nargs);
/* Optional tensors (docs/spec.md, Optional tensors: 'bias: x.dtype[N]? = 0'):
 * tk_arg_none() binds as a tensor of the declared dims every element of
 * which is the default, read from one row the caller provides on the call's
 * device. tk_call_fill: whether parameter `param` of a bound call is such a
 * None, and then what that row is: numel elements of dtype, each value.
 * tk_set_fill attaches it (after tk_bind, tk_rebind_data; before running):
 *
 *     if (tk_call_fill(&call, 2, &dt, &n, &v)) { fill n elements of dt at row with v;
 *                                                tk_set_fill(&call, 2, row); } */
int tk_call_fill(const tk_call *call, int param, tk_dtype *dtype, int64_t *numel, double *value);
tk_status tk_set_fill(tk_call *call, int param, void *data);
/* The first such parameter whose row is not attached while it has elements
 * (tk_run_cpu and tk_cuda_launch refuse the call then), -1 if none. */
int tk_call_unfilled(const tk_call *call);
/* Attaches output i (shape and dtype must be those tk_bind computed). */
tk_status tk_set_output(tk_call *call, int i, tk_tensor_view v);
/* Runs elements [begin, end) of the index space with the op's CPU kernel.
 * A bounds check that failed in the kernel (docs/spec.md, Bounds) gives
 * TK_ERR_BOUNDS with tk_call_bounds_error's message. */
tk_status tk_run_cpu(tk_call *call, int64_t begin, int64_t end);
/* The message of a failed bounds check, recorded by a kernel in *err (see
 * tk_kerr), into call->msg: "tk.<op>: <file>:<line>:<col>: store y[:, 5]
 * out of range: dim 1 (T) has size 5 (the store was skipped)". Returns
 * TK_ERR_BOUNDS, or TK_OK when err records nothing. */
tk_status tk_call_bounds_error(tk_call *call, const tk_kerr *err);

typedef enum tk_target { TK_TARGET_C, TK_TARGET_CUDA } tk_target;

/* Generates the source of every variant of op for target. *out is malloc'd
 * (free with tk_free); it includes "tk_kernel.h" (tk_kernel_header()). */
tk_status tk_emit(tk_ctx *ctx, const tk_op *op, tk_target target, char **out);
/* Emission options (flags of tk_emit_ex). TK_EMIT_PLAIN: the CPU kernels
 * without the optimising transformations (no hoisting, segments, unroll,
 * SIMD pragmas or clones), named <kernel>_plain: the reference the
 * optimised kernels are tested against. */
#define TK_EMIT_PLAIN 1u
/* TK_EMIT_CHECKED: checked kernels (docs/spec.md, Bounds): every index of
 * every tensor read and of a row loop's stores is compared to its dim's
 * size; the first out-of-range access of a launch is recorded in
 * *kargs.err and skipped (a read gives 0), and the caller reports it
 * (tk_run_cpu; tk_kerr_message). The plain form, under the usual names. */
#define TK_EMIT_CHECKED 2u
/* TK_EMIT_CPU_BASE, TK_EMIT_CPU_AVX2, TK_EMIT_CPU_AVX512 (one at most): CPU
 * kernels compiled for the running CPU alone (-march=native -DTK_NO_CLONES,
 * runtime/cc.c), which has no AVX2, AVX2 and FMA, or AVX-512F: the file
 * carries only the bodies such a CPU runs (the narrow one; the 256-bit one
 * with AVX2; the 512-bit one with AVX-512), and the narrow body's tiles are
 * sized for its registers. No flag: every body, for libtk's built-in
 * kernels (target clones and the run-time choice). */
#define TK_EMIT_CPU_BASE 4u
#define TK_EMIT_CPU_AVX2 8u
#define TK_EMIT_CPU_AVX512 16u
tk_status tk_emit_ex(tk_ctx *ctx, const tk_op *op, tk_target target, unsigned flags, char **out);
/* Generates one variant only. */
tk_status tk_emit_variant(tk_ctx *ctx, const tk_op *op, int variant,
                          tk_target target, char **out);
/* How many elements of the index space one thread of the variant's CUDA
 * kernel computes when the grid has a thread for every grid-stride
 * iteration (1; a chunk of K; a tile of V x G, twice that for mirrored
 * tiles, over S for split ones, at least 1): the launcher sizes its grid by
 * numel / that; -S where S threads share each element (a row loop's
 * cooperative form, schedule coop=S): numel * S threads. 0 on error
 * (tk_ctx_error). */
int tk_emit_cuda_per_thread(tk_ctx *ctx, const tk_op *op, int variant);
/* 1 when the variant's CPU kernel emitted with flags runs its row loop in
 * parts (tk_op_set_cpu_parts; its C defines <kernel>_parts). */
int tk_emit_cpu_parts(tk_ctx *ctx, const tk_op *op, int variant, unsigned flags);
void tk_free(void *p);

/* A CUDA schedule: the items of a spec's `schedule` line, in the order of
 * tk_sched_keys (lanes, rows, warp_rows, chunk, split, ldg, tiles, regs, coop, parts;
 * docs/spec.md); 0: not given. */
typedef struct tk_schedule {
    int v[10];
} tk_schedule;
/* The CUDA kernel of the variant under sched (NULL: the spec's schedule
 * line alone) runs in parts (schedule parts=N; docs/gpu.md, Parts): N, the
 * most threads it may run as, with *copied the outputs each thread adds
 * into its own copy of (bit i: output i) and *parted 1 when the threads
 * share one iteration's parted loop (else each runs iterations p, p +
 * nparts, ...); 0 when it does not (then *copied and *parted are 0). */
int tk_emit_cuda_parts(tk_ctx *ctx, const tk_op *op, int variant, const tk_schedule *sched, unsigned *copied,
                       int *parted);
/* Parses text in TK_CUDA_TUNE's syntax ("lanes=8,rows=2"; "" or NULL: no
 * item) into *s. A malformed item is TK_ERR_INVALID with a message in err. */
tk_status tk_schedule_parse(const char *text, tk_schedule *s, char *err, size_t errlen);
/* tk_schedule_parse of the environment's TK_CUDA_TUNE. */
tk_status tk_schedule_from_env(tk_schedule *s, char *err, size_t errlen);
/* The source of variants [first, last) of op for target with the caller's
 * schedule sched (NULL: the spec's alone), and for CUDA the elements of the
 * index space one thread computes (*per_thread, may be NULL; as
 * tk_emit_cuda_per_thread; the last variant's). tk_emit, tk_emit_ex and
 * tk_emit_variant are this with the schedule of TK_CUDA_TUNE. */
tk_status tk_emit_scheduled(tk_ctx *ctx, const tk_op *op, int first, int last, tk_target target, unsigned flags,
                            const tk_schedule *sched, char **out, int *per_thread);
/* The plan of variant `variant` of op for target, as text (`tkc plan`): how
 * the printers will tile and lay out each kernel body, and why. *out is
 * malloc'd (tk_free). */
tk_status tk_plan_text(tk_ctx *ctx, const tk_op *op, int variant, tk_target target, unsigned flags,
                       const tk_schedule *sched, char **out);

/* The text of tk_kernel.h, as compiled into the library. */
const char *tk_kernel_header(void);

/* Built-in ops compiled into this library: their spec text and CPU kernels.
 * Defined by the generated tk_builtin.c; absent from the plain core. */
typedef struct tk_builtin_kernel {
    const char *name;       /* tk_<op>__<dtypes> */
    tk_cpu_fn fn;
    int parts;              /* fn runs its row loop in parts (tk_op_set_cpu_parts) */
} tk_builtin_kernel;
typedef struct tk_builtin_spec {
    const char *file;       /* "ops/brick_pad.tk" */
    const char *text;
} tk_builtin_spec;

/* Loads every spec, attaches every kernel given, then links (tk_ctx_link). */
tk_status tk_ctx_add_builtins(tk_ctx *ctx, const tk_builtin_spec *specs, int nspecs,
                              const tk_builtin_kernel *kernels, int nkernels);

#ifdef __cplusplus
}
#endif
#endif
