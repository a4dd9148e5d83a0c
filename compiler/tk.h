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
 * Errors: every fallible call returns a tk_status; the message is in
 * tk_ctx_error(ctx) (loading, emitting) or call->msg (binding, running).
 * Nothing here exits, aborts or keeps global state. A context may be read
 * from several threads once loading is done; tk_call is per call. */
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
    TK_ERR_INVALID      /* misuse of the API */
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
    int is_none;        /* an optional int passed as None */
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
const char *tk_ctx_error(const tk_ctx *ctx); /* last load/emit error, "" if none */

/* Parses and checks a spec file and adds its ops to ctx. On error nothing
 * is added and the message reads "file:line:col: error: ...". */
tk_status tk_load_spec(tk_ctx *ctx, const char *file, const char *text, size_t len);

int tk_op_count(const tk_ctx *ctx);
const tk_op *tk_op_at(const tk_ctx *ctx, int i);
const tk_op *tk_op_find(const tk_ctx *ctx, const char *name);

const char *tk_op_name(const tk_op *op);
const char *tk_op_file(const tk_op *op);
const char *tk_op_schema(const tk_op *op);  /* "name(Tensor x, ...) -> Tensor" */
const char *tk_op_backward(const tk_op *op); /* NULL if none */
int tk_op_nparams(const tk_op *op);
int tk_op_param_kind(const tk_op *op, int i);     /* tk_param_kind */
const char *tk_op_param_name(const tk_op *op, int i);
int tk_op_param_optional(const tk_op *op, int i);
int tk_op_noutputs(const tk_op *op);
const char *tk_op_output_name(const tk_op *op, int i);

/* Kernels: one per combination of the op's dtype variables (variant). */
int tk_op_nvariants(const tk_op *op);
const char *tk_op_kernel_name(const tk_op *op, int variant); /* "tk_rwkv_forward__f32" */
tk_status tk_op_set_cpu_kernel(tk_op *op, int variant, tk_cpu_fn fn);
tk_op *tk_op_find_mut(tk_ctx *ctx, const char *name);

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
    char msg[512];                              /* error of the last call on this struct */
} tk_call;

/* Checks args against the op (count, kinds, dtypes, ranks, symbolic dims,
 * devices), evaluates defaults and output shapes. Errors name the op and the
 * argument: "tk.rwkv_forward: argument 'k': expected 3 dims (B, C, T), got 2". */
tk_status tk_bind(const tk_op *op, const tk_arg *args, int nargs, tk_call *call);
/* Attaches output i (shape and dtype must be those tk_bind computed). */
tk_status tk_set_output(tk_call *call, int i, tk_tensor_view v);
/* Runs elements [begin, end) of the index space with the op's CPU kernel. */
tk_status tk_run_cpu(tk_call *call, int64_t begin, int64_t end);

typedef enum tk_target { TK_TARGET_C, TK_TARGET_CUDA } tk_target;

/* Generates the source of every variant of op for target. *out is malloc'd
 * (free with tk_free); it includes "tk_kernel.h" (tk_kernel_header()). */
tk_status tk_emit(tk_ctx *ctx, const tk_op *op, tk_target target, char **out);
/* Generates one variant only. */
tk_status tk_emit_variant(tk_ctx *ctx, const tk_op *op, int variant,
                          tk_target target, char **out);
void tk_free(void *p);

/* The text of tk_kernel.h, as compiled into the library. */
const char *tk_kernel_header(void);

/* Built-in ops compiled into this library: their spec text and CPU kernels.
 * Defined by the generated tk_builtin.c; absent from the plain core. */
typedef struct tk_builtin_kernel {
    const char *name;       /* tk_<op>__<dtypes> */
    tk_cpu_fn fn;
} tk_builtin_kernel;
typedef struct tk_builtin_spec {
    const char *file;       /* "ops/brick_pad.tk" */
    const char *text;
} tk_builtin_spec;

/* Loads every spec and attaches every kernel given. */
tk_status tk_ctx_add_builtins(tk_ctx *ctx, const tk_builtin_spec *specs, int nspecs,
                              const tk_builtin_kernel *kernels, int nkernels);

#ifdef __cplusplus
}
#endif
#endif
