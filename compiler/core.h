/* core.h - internal definitions shared by the checker, the binder and the
 * emitters. Not part of the public API (tk.h). */
#ifndef TK_CORE_H
#define TK_CORE_H

#include <stdarg.h>

#include "ast.h"
#include "tk.h"

#define TK_MAX_VARIANTS 256
#define TK_MAX_LOCALS 256
#define TK_VARIANT_CODE 96   /* a variant's code: a dtype code (at most 4 chars) and '_' a dtype variable,
                              * at most TK_MAX_TENSORS - 1 of them, and a NUL */
typedef char tk_variant_code_fits[TK_VARIANT_CODE >= 5 * (TK_MAX_TENSORS - 1) + 1 ? 1 : -1];

/* What a name in an op resolves to. */
typedef enum tk_sym_kind {
    TK_SYM_NONE,
    TK_SYM_TENSOR,      /* input tensor parameter */
    TK_SYM_OUTPUT,      /* output tensor */
    TK_SYM_INT,         /* int or bool scalar parameter: kargs.i[slot] */
    TK_SYM_FLOAT,       /* float scalar parameter: kargs.f[slot] */
    TK_SYM_DIM,         /* symbolic dim: kargs.i[slot] */
    TK_SYM_LOOP,        /* top-level loop variable: slot = loop position */
    TK_SYM_LOCAL        /* local variable or inner loop variable: slot */
} tk_sym_kind;

/* A symbolic dim and the first (tensor, dim) that binds it. */
typedef struct tk_local {
    const char *name;
    tk_vtype type;
    int is_loop;        /* an inner for-loop variable */
    tk_loc loc;         /* its first assignment */
} tk_local;

typedef struct tk_dimsym {
    const char *name;
    int slot;           /* kargs.i[] */
    int param;          /* binding tensor parameter */
    int axis;           /* its explicit-dim position */
} tk_dimsym;

/* A read the binder range-checks (tk_op.ranges): the read, its tensor
 * parameter, and the inner loops around it, outermost first. */
#define TK_MAX_READ_RANGES 32
typedef struct tk_read_range {
    const tk_expr *read;
    int param;
    int nloops;
    const tk_stmt *loops[8];
} tk_read_range;

struct tk_op {
    tk_opdecl *decl;
    char *schema;
    /* per parameter (decl->params): kargs slot, tensor dtype root */
    int slot[TK_MAX_TENSORS * 4];
    int dtype_src[TK_MAX_TENSORS * 4];   /* the parameter named by `x.dtype`, -1 if none */
    signed char dim_sym[TK_MAX_TENSORS * 4][TK_MAX_DIMS + 1];  /* dims[j]: index in dims[] or -1 */
    int dtype_root[TK_MAX_TENSORS * 4];  /* tensor param whose dtype it shares (itself if a class) */
    int out_slot[TK_MAX_TENSORS];
    int out_dtype_root[TK_MAX_TENSORS];  /* -1 if a concrete dtype; TK_OUT_BODY_FLOAT: a scratch tensor
                                          * declared 'float', the body's float type in each variant */
    tk_dtype out_dtype_fixed[TK_MAX_TENSORS];
    int ntensors, nints, nfloats;        /* input tensor params, int slots used by scalars */
    tk_dimsym dims[TK_MAX_INTS];
    int ndims;
    int has_ellipsis;                    /* some input uses '...' */
    int random;                          /* the body calls rand or randn (their counter takes the batch
                                          * index, tk_bi, when has_ellipsis: decompose) */
    int loop_out;                        /* index of the output the loop runs over */
    /* a row loop (`for b, _, c in y`: some loop names are '_'): the
     * iteration owns the '_' dims of the loop output; row_pos[o][i] is the
     * explicit dim of output o that loop variable i indexes in every store
     * to o (-1: '_', or o is never stored) */
    int row_loop;
    int checked;                         /* tk_op_set_checked: kernels emitted with TK_EMIT_CHECKED */
    int data_reads;                      /* some read's index depends on a tensor's values (tk_expr.data_index) */
    signed char row_pos[TK_MAX_TENSORS][TK_MAX_DIMS];
    /* per output: a sum (a row loop's output every store of which is
     * `o[...] += e`): it starts at zero, every iteration adds into it,
     * and nothing reads it (docs/spec.md, Sums) */
    unsigned char out_sum[TK_MAX_TENSORS];
    unsigned char out_mixed[TK_MAX_TENSORS];  /* stored with both '+=' and '=': an error at its stores */
    int has_sum;                         /* some output is a sum */
    int dvars[TK_MAX_TENSORS];           /* tensor params that are dtype variables */
    int ndvars;
    int nvariants;
    char **kernel_names;                 /* per variant */
    tk_cpu_fn *cpu_fns;                  /* per variant, NULL if none */
    tk_cpu_fn *cpu_parts;                /* per variant: cpu_fns' kernel when it runs its row loop in
                                          * parts (tk_op_set_cpu_parts), else NULL */
    char (*variant_codes)[TK_VARIANT_CODE];  /* per variant: "f32", "f16_i64"... */
    /* per parameter: where the loop body reads tensor parameter i in every
     * iteration (outside every `for` and `if`, the arms of a conditional
     * expression and the right side of and/or): its first such read; line
     * 0 when it has none, so that an empty tensor is never read (tk_bind) */
    tk_loc read_always[TK_MAX_TENSORS * 4];
    /* reads whose index range the binder computes exactly at every call and
     * compares to the tensor's dims (reads.c, tk_find_read_ranges): each
     * index linear in loop variables that run over whole ranges known at
     * the call, the read made wherever those loops run */
    int nranges;
    tk_read_range ranges[TK_MAX_READ_RANGES];
    /* scratch of the last tk_check_body: locals and their types */
    tk_local locals[TK_MAX_LOCALS];
    int nlocals;
    int cur_variant;
};

struct tk_ctx {
    tk_arena arena;
    tk_op **ops;
    int nops, cap;
    tk_error error;     /* the last load/link/emit error (tk_ctx_last_error) */
};

/* ---- errors (error.c) ----------------------------------------------------
 * Fill e: the status, the place (file NULL: not about a spec; loc.line 0:
 * not about a place in it) and the printf-formatted message; return st, so
 * callers can `return tk_error_set(...)`. A NULL e is ignored. */
tk_status tk_error_set(tk_error *e, tk_status st, const char *file, tk_loc loc, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
tk_status tk_error_setv(tk_error *e, tk_status st, const char *file, tk_loc loc, const char *fmt, va_list ap);
/* Appends to e's message (and text). */
void tk_error_append(tk_error *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tk_error_clear(tk_error *e);

/* Variant v's dtype for tensor parameter p (an input). */
tk_dtype tk_variant_dtype(const tk_op *op, int variant, int param);
/* The dtype output i is declared with in variant v. */
#define TK_OUT_BODY_FLOAT (-2)
tk_dtype tk_variant_out_decl_dtype(const tk_op *op, int variant, int out);
/* The dtype variant v's kernel keeps output i in (tk_call.out_dtype): the
 * declared one, except a sum declared float16 or bfloat16, which the kernel
 * adds into in the variant's float type (float32 or float64); the caller
 * rounds it to its dtype once, after (docs/spec.md, Sums). */
tk_dtype tk_variant_out_dtype(const tk_op *op, int variant, int out);
/* The op's float type in variant v: TK_F64 if a float tensor input is float64. */
tk_dtype tk_variant_float_type(const tk_op *op, int variant);
/* Allocates op's variants (one per combination of its dvars' dtypes) and
 * names them tk_<op>__<code>_<code>...; TK_ERR_CHECK (in err, at the op)
 * beyond TK_MAX_VARIANTS, TK_ERR_NOMEM when out of memory. */
tk_status tk_make_variants(tk_op *op, tk_arena *a, tk_error *err);
/* Variant index of a tuple of dvar dtypes; -1 if not allowed. */
int tk_variant_index(const tk_op *op, const tk_dtype *dvar_dtypes);

/* Checks decl and builds op (allocated in ctx's arena). Type-checks every
 * variant. Returns TK_OK or an error (at its file:line:col) in ctx->error. */
tk_status tk_check_op(tk_ctx *ctx, tk_opdecl *decl, tk_op **out);

/* rename.c: two locals of one name in different blocks; the later ones are
 * renamed "<k>_<name>" (after every variant checked). TK_ERR_NOMEM or TK_OK. */
tk_status tk_rename_reused_locals(tk_op *op, tk_arena *a);

/* Annotates decl's body for one variant (value types, symbol refs, local
 * slots). Used by tk_check_op for every variant and by the emitters. */
tk_status tk_check_body(tk_op *op, int variant, tk_error *err);


/* The value of float parameter p's default (p->default_value is set: a
 * number literal, possibly negated, as tk_check_op checked). */
double tk_float_default(const tk_param *p);

/* optional.c: checks the optional tensor parameters of op (docs/spec.md,
 * Optional tensors) once its parameters and defaults are checked: each has
 * one dtype or that of a tensor that is not optional, dims that such a
 * tensor names (their symbols then bind to it), a default its dtypes hold;
 * TK_ERR_CHECK (in err, at its file:line:col) if not. */
tk_status tk_check_optional_tensors(tk_op *op, tk_error *err);
/* What every element of optional tensor p reads as when it is None. */
double tk_tensor_fill(const tk_param *p);

/* autodiff.c: the spec text (malloc'd, in *text) of the backward op of op
 * ('backward auto', docs/autograd.md), named <op>_backward; TK_ERR_CHECK in
 * err, at what it cannot differentiate (a row loop, an inner loop, a
 * gather...), or TK_ERR_NOMEM. op is checked. */
tk_status tk_derive_backward(tk_op *op, char **text, int *exact, tk_error *err);

/* schema.c: the torch schema of decl ("f(Tensor x, SymInt n=3) -> Tensor",
 * no namespace), in a's memory; NULL when out of memory. */
char *tk_make_schema(const tk_opdecl *d, tk_arena *a);

/* Resolves a header-level name (param, output, dim); TK_SYM_NONE if none. */
tk_sym_kind tk_resolve_header(const tk_op *op, const char *name, int *index);

/* Evaluates an int shape/default expression with dims and int params bound
 * in ints_by_slot; err gets a message on overflow. */
tk_status tk_eval_int(const tk_op *op, const tk_expr *e, const int64_t *islots,
                      const int *ibound, int64_t *out, char *err, size_t errlen);
/* Whether header expression e (an assert's condition) reads a float: a
 * float parameter or literal, or '/'. Such a condition has no shape code
 * (shape.c); tk_bind evaluates it on the call's values. */
int tk_expr_reads_float(const tk_op *op, const tk_expr *e);

/* Growable string used by the emitters. */
typedef struct tk_buf {
    char *p;
    size_t len, cap;
    int oom;
} tk_buf;
void tk_buf_puts(tk_buf *b, const char *s);
/* reads.c: the read annotations tk_check_op makes once the body checks:
 * op->read_always (reads every iteration makes) and tk_expr.data_index with
 * op->data_reads (gathers). */
void tk_find_reads_always(tk_op *op);
void tk_find_data_reads(tk_op *op);
void tk_find_read_ranges(tk_op *op);
/* plan_bounds.c: whether int index e on a tensor's dim `dim` lies in
 * 0 .. dim - 1 for every value of the dims and loop variables (an interval
 * analysis over affine forms of the dims; conservative). */
int tk_index_proven(const tk_op *op, const tk_expr *e, const tk_expr *dim);
/* Appends e as spec text (for messages); top: no parentheses around it (check.c). */
void tk_expr_text(tk_buf *b, const tk_expr *e, int top);
/* Appends e as spec text that parses back to e (autodiff.c): every
 * operation in parentheses, floats to 17 digits. */
void tk_expr_spec(tk_buf *b, const tk_expr *e);
void tk_buf_printf(tk_buf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

int tk_explicit_dims(const tk_param *p);   /* dims other than '...' */

/* Whether a top-level loop name is '_': a dim of the loop output that the
 * iteration owns (a row loop) rather than a parallel variable. */
static inline int tk_owned_dim(const char *loop_name) { return loop_name[0] == '_' && loop_name[1] == 0; }

#endif
