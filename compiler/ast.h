/* ast.h - the syntax tree of a spec module, produced by the parser (parse.c)
 * and annotated by the checker (check.c). All nodes live in a tk_arena owned
 * by the context; nothing here is freed on its own. */
#ifndef TK_AST_H
#define TK_AST_H

#include <stddef.h>
#include <stdint.h>

typedef struct tk_loc {
    int line, col;                  /* 1-based */
} tk_loc;

/* Bump allocator: every allocation lives until tk_arena_free. */
typedef struct tk_arena_block tk_arena_block;
typedef struct tk_arena {
    tk_arena_block *head;
} tk_arena;

void *tk_arena_alloc(tk_arena *a, size_t n);        /* zeroed; NULL on OOM */
char *tk_arena_strndup(tk_arena *a, const char *s, size_t n);
void tk_arena_free(tk_arena *a);

/* Operators of unary, binary and augmented-assignment nodes. ORDER OPC:
 * tk_opc_text in ast.c lists their spellings in this order. */
typedef enum tk_opc {
    TK_OPC_NONE,
    TK_OPC_ADD, TK_OPC_SUB, TK_OPC_MUL, TK_OPC_DIV, TK_OPC_FLOORDIV,
    TK_OPC_MOD, TK_OPC_POW,
    TK_OPC_EQ, TK_OPC_NE, TK_OPC_LT, TK_OPC_LE, TK_OPC_GT, TK_OPC_GE,
    TK_OPC_AND, TK_OPC_OR,
    TK_OPC_NEG, TK_OPC_POS, TK_OPC_NOT,
    TK_OPC_COUNT
} tk_opc;

const char *tk_opc_text(tk_opc op);                 /* "+", "//", "not"... */

typedef enum tk_expr_kind {
    TK_E_INT,       /* ival */
    TK_E_FLOAT,     /* fval */
    TK_E_BOOL,      /* ival: 0 or 1 */
    TK_E_NAME,      /* name */
    TK_E_ELLIPSIS,  /* '...' in a shape */
    TK_E_UNARY,     /* op, args[0] */
    TK_E_BINARY,    /* op, args[0], args[1] */
    TK_E_COND,      /* args[0] if args[1] else args[2] */
    TK_E_CALL,      /* name(args...) */
    TK_E_INDEX      /* name[args...] : tensor element read */
} tk_expr_kind;

/* Value types assigned by the checker. */
typedef enum tk_vtype {
    TK_V_NONE, TK_V_BOOL, TK_V_INT, TK_V_F32, TK_V_F64
} tk_vtype;

/* Operator nodes on any path of an expression tree (a + b + ... counts one a
 * term): the checker and printers recurse that deep. */
#define TK_MAX_EXPR_HEIGHT 1000

typedef struct tk_expr {
    tk_expr_kind kind;
    tk_loc loc;
    tk_opc op;
    int64_t ival;
    double fval;
    const char *name;
    struct tk_expr **args;
    int nargs;
    int height;         /* operator nodes on the longest path down (parse.c: limited) */
    /* checker annotations */
    tk_vtype vtype;     /* value type in the instantiation being checked */
    int ref;            /* NAME/INDEX: index of the symbol it resolves to */
    int is_out;         /* INDEX: a row loop reading back output `ref` (not an input) */
    unsigned data_index; /* INDEX (a read): bit k when index k depends on a tensor's values (a gather) */
} tk_expr;

typedef enum tk_stmt_kind {
    TK_S_PASS,
    TK_S_ASSIGN,    /* name op= value  (op == TK_OPC_NONE for plain '=') */
    TK_S_STORE,     /* name[index...] op= value */
    TK_S_IF,        /* if value: body else orelse (elif: one TK_S_IF in orelse) */
    TK_S_FOR        /* for name in range(lo, hi): body  (lo NULL means 0) */
} tk_stmt_kind;

typedef struct tk_stmt {
    tk_stmt_kind kind;
    tk_loc loc;
    const char *name;
    tk_opc op;
    tk_expr *value;
    tk_expr **index;
    int nindex;
    tk_expr *lo, *hi;
    struct tk_stmt **body;
    int nbody;
    struct tk_stmt **orelse;
    int norelse;
    /* checker annotations */
    int ref;            /* ASSIGN/FOR: local slot; STORE: output index */
    int declares;       /* ASSIGN: 1 if this assignment declares the local */
} tk_stmt;

typedef enum tk_param_kind {
    TK_P_TENSOR, TK_P_INT, TK_P_FLOAT, TK_P_BOOL
} tk_param_kind;

typedef struct tk_param {
    const char *name;
    tk_loc loc;
    tk_param_kind kind;
    /* tensors and outputs */
    unsigned dtype_mask;        /* bit (1u << tk_dtype) per allowed dtype; 0 if dtype_of */
    const char *dtype_of;       /* "x" for x.dtype, else NULL */
    tk_loc dtype_loc;
    tk_expr **dims;             /* TK_E_NAME, TK_E_INT or TK_E_ELLIPSIS (inputs); any expr (outputs) */
    int ndims;
    /* scalars, and optional tensors ('bias: x.dtype[N]? = 0': None reads as that value) */
    int optional;               /* 'int?', 'float?', 'x.dtype[N]?' */
    tk_expr *default_value;     /* NULL if none; an optional tensor's: what its elements read as */
    /* in-place updates (docs/spec.md, In-place parameters) */
    int mut;                    /* a tensor parameter declared 'mut': the op updates it in place */
    int alias;                  /* an output: 1 + the index of the 'mut' parameter it is (the
                                 * parser adds one such output a 'mut' parameter, after the
                                 * declared ones); 0: a new tensor the op returns */
    int scratch;                /* an output declared on a 'scratch' line: allocated for the body,
                                 * not returned (after the returned outputs, before the aliases) */
} tk_param;

/* The items of a 'schedule' line and of TK_CUDA_TUNE (compiler/schedule.c): the
 * CUDA tile shape. Each value is in [lo, hi], a power of two, or a multiple
 * of step when step is not 0. */
#define TK_SCHED_KEYS 10
/* ORDER tk_sched_keys */
enum { TK_SCHED_LANES, TK_SCHED_ROWS, TK_SCHED_WARP_ROWS, TK_SCHED_CHUNK, TK_SCHED_SPLIT, TK_SCHED_LDG, TK_SCHED_TILES,
       TK_SCHED_REGS, TK_SCHED_COOP, TK_SCHED_PARTS };
typedef struct tk_sched_key {
    const char *key;
    long lo, hi;
    int step;
} tk_sched_key;
extern const tk_sched_key tk_sched_keys[TK_SCHED_KEYS];   /* lanes, rows, warp_rows, chunk, split, ldg, tiles, regs, coop, parts */
int tk_sched_find(const char *key, size_t len);              /* its index, -1 if none */
int tk_sched_valid(int k, long long v);                      /* 1 if v fits key k */

#define TK_MAX_AUTO_ORDER 2      /* 'backward auto 2': second derivatives at most (a third op would take
                                  * grad_grad_x as a parameter and as the gradient of its output grad_x) */

typedef struct tk_opdecl {
    const char *name;
    tk_loc loc;
    const char *file;           /* as given to tk_load_spec */
    const char *text;           /* the whole spec file's text (arena copy) */
    tk_param *params;
    int nparams;
    tk_param *outputs;          /* the declared outputs, the scratch tensors, then one a 'mut'
                                 * parameter (alias) */
    int noutputs;
    int nreturns;               /* the declared outputs: what the op returns (0: '->' left out) */
    const char **backward;      /* 'backward a, b': the backward ops' names */
    tk_loc *backward_locs;      /* where each name is written */
    int nbackward;
    int backward_auto;          /* 'backward auto [N]': N (1 without it), the orders of derivatives the
                                 * loader derives (autodiff.c): the backward op, named in backward[0]
                                 * (at backward_locs[0]), and for N > 1 its own, with N - 1 */
    const char *derived_from;   /* a derived backward op: the op it differentiates, else NULL */
    int exact;                  /* a derived op that compares values it computes in two passes (the ties of a
                                 * max or min, a scan's replayed steps): compiled without FMA contraction
                                 * (emit.c, k_exact_begin) */
    const char *auto_file;      /* a derived op with backward_auto: the file backward_locs[0] is in */
    uint64_t float_type_skip;   /* a derived op: bit i when parameter i (an incoming gradient) does not
                                 * count for the float type, which is then its forward's (variants.c) */
    int schedule[TK_SCHED_KEYS]; /* 'schedule lanes=16, ...': the CUDA tile shape, 0: not given */
    tk_loc schedule_loc;        /* the 'schedule' line; line 0: none */
    tk_expr **asserts;          /* 'assert EXPR' lines: int expressions of dims and int/bool
                                 * parameters that must be true (nonzero) at every call */
    tk_loc *assert_locs;        /* where each condition starts */
    int nasserts;
    const char **loop_vars;     /* top-level parallel loop */
    tk_loc *loop_locs;
    int nloop;
    const char *loop_over;      /* the output it iterates over */
    tk_loc loop_loc;
    tk_stmt **body;
    int nbody;
} tk_opdecl;

typedef struct tk_module {
    tk_opdecl **ops;
    int nops;
} tk_module;

struct tk_error;

/* Parses a whole spec file. On error returns NULL with the error (status
 * TK_ERR_SYNTAX, or TK_ERR_NOMEM; its file:line:col) in err (may be NULL). */
tk_module *tk_parse(tk_arena *a, const char *file, const char *text,
                    size_t len, struct tk_error *err);

/* The output that 'mut' parameter i of d is (its alias), -1 when i is not 'mut'. */
int tk_mut_output(const tk_opdecl *d, int param);

/* Whether two expressions are the same text (the same value within one op). */
int tk_expr_equal(const tk_expr *a, const tk_expr *b);

#endif
