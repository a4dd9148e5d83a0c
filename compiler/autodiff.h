/* autodiff.h - the derivation of 'backward auto' ops, shared by its two
 * files (internal to compiler/): autodiff.c (the tape of one iteration, its
 * reverse pass, the element-wise form, the derived op's header) and
 * autodiff_rows.c (row loops: the row's tape, inner loops as blocks). */
#ifndef TK_AUTODIFF_H
#define TK_AUTODIFF_H

#include "core.h"

typedef enum {
    V_TEMP,     /* an operation of the body: node applied to a[0..na) */
    V_READ,     /* a float tensor parameter read at the loop's index (one a parameter) */
    V_LOCAL,    /* a version of a local (an assignment, or a declaration of a leaf): a[0] where guard
                 * holds, else prev */
    V_OUT,      /* a version of an output element (never replayed: it carries an adjoint) */
    V_ROWREF,   /* a block: a value of the row's tape it reads (row_val; no line of its own) */
    V_LOOP      /* the row's tape: an inner loop's end (acc -1) or the value it leaves in an
                 * accumulator (prev: the value before the loop) */
} val_kind;

/* A value's use: a value of the tape (val >= 0) or a leaf's text (a literal,
 * loop variable, dim, scalar parameter). */
typedef struct atom {
    int val;
    const char *text;
    int is_float;
} atom;

typedef struct val {
    val_kind kind;
    const char *name;       /* its local in the derived op */
    int is_float;
    atom guard;             /* made under this guard (text NULL: always) */
    const tk_expr *node;    /* V_TEMP: the operation (kind, op, function) */
    atom a[3];
    int na;
    atom g_then, g_else;    /* V_TEMP of a conditional expression: its arms' guards */
    int prev;               /* V_LOCAL, V_OUT, V_LOOP: the version before, -1 none */
    const char *adj;        /* its adjoint's local, once declared */
    int adj_key;            /* that local's key (its own adjoint's, or the one it took over: take_over) */
    int row_val;            /* V_ROWREF: the value of the row's tape */
    int loop, acc;          /* V_LOOP: the inner loop (ad.loops) and its accumulator (-1: the loop's end) */
    int jac;                /* V_ROWREF in a jacobian block: 1 + its derivative's sum (a value of the row), 0 */
} val;

/* A line of the derived body: it defines key (2 * value, 2 * value + 1 its
 * adjoint; -1: a store of a gradient, always kept). A row's line may be a
 * whole inner loop (its lines after a newline each). */
typedef struct line {
    const char *text;
    int key;
} line;

/* A local and the value it holds. */
typedef struct adlocal {
    const char *name;
    int val;
} adlocal;

/* An accumulator of an inner loop: a local the row made before the loop,
 * which the loop changes only as `s += e`, `s -= e`, `s = s + e`, or
 * `m = max(m, e)`, `m = min(m, e)`. */
enum { ACC_SUM, ACC_MAX, ACC_MIN, ACC_SCAN };   /* ACC_SCAN: a scan's carried local (autodiff_scan.c) */
typedef struct acc {
    const char *name;
    int kind;               /* ACC_* */
    int count;              /* ACC_MAX, ACC_MIN: the row's value counting the ties of the result */
    const char *scratch;    /* ACC_SCAN: the scratch keeping its value as each step starts */
    const char *carrier;    /* ACC_SCAN: the local carrying its adjoint back through the steps */
} acc;

/* An inner loop of a row loop: `for i in range(lo, hi)` at the row's level. */
typedef struct loopinfo {
    const tk_stmt *st;
    const char *lo, *hi;    /* its bounds as the row's values' text ("0" for none) */
    int full;               /* range(D) over the owned dim D: no guard in the gradients' loop */
    int scan;               /* a scan (autodiff_scan.c): its accumulators are ACC_SCAN */
    acc *accs;
    int naccs, capaccs;
    int *after;             /* per accumulator: its V_LOOP (the value after the loop) */
    adlocal *locals;        /* the row's locals where the loop starts */
    int nlocal;
    /* a loop that only sums into one local (no store, no extreme): its sum's
     * derivatives by the row's values it reads, summed in its forward pass
     * (jacs[j].sum: d sum / d jacs[j].of), so that no second pass gives their
     * adjoints their share */
    int jac;
    struct { int of, sum; } *jacs;   /* values of the row */
    int njac, capjac;
} loopinfo;

enum { AD_ELEMENTS, AD_ROW, AD_FWD, AD_SCALARS, AD_GRADS, AD_SCAN };   /* what a tape is (ad.mode) */

typedef struct ad {
    tk_op *op;
    const tk_opdecl *d;
    tk_arena *mem;          /* every string and array below (the row's tape's, for its blocks) */
    tk_error *err;
    int failed;
    const char *pre;        /* the prefix of every name the derivation makes */
    val *vals;
    int nvals, capv;
    line *lines;
    int nlines, capl;
    int read_val[TK_MAX_TENSORS * 4];   /* per parameter: its V_READ, -1 */
    int out_val[TK_MAX_TENSORS];        /* per output: its last version, -1 */
    adlocal *locals;        /* each local's current version */
    int nlocal, caplocal;
    const char *index;      /* "i, j": the loop's variables (a block: '_' as inner) */
    /* row loops (autodiff_rows.c) */
    int mode;               /* AD_* */
    struct ad *row;         /* a block's row tape */
    int owned;              /* the position of '_' among the loop's variables, -1 (nloop: virt) */
    int virt;               /* the row's tape of an element-wise op with inner loops: the row's
                             * index is the loop's, and the dim its inner loops walk (vdim) is
                             * an owned dim after the loop's */
    const tk_expr *vdim;    /* virt: that dim, from the first read in an inner loop */
    int store_loop[TK_MAX_TENSORS];     /* the row's tape: per output, the inner loop that stores it, -1 */
    unsigned char block_read[TK_MAX_TENSORS * 4];   /* the row's tape: read in an inner loop */
    const char *inner_src;  /* a block: the variable of the forward's inner loop it replays */
    const char *inner;      /* a block: that variable in the derived op */
    int *rowref;            /* a block: per value of the row's tape, its V_ROWREF here (-1) */
    loopinfo *loops;        /* the row's tape: its inner loops */
    int nloops, caploops;
    int cur_loop;           /* a block: the loop it replays now */
    int nblocks;            /* the row's tape: blocks made (their names' prefixes) */
    int counting;           /* an AD_FWD block that counts the ties of max and min accumulators */
    int jacobian;           /* an AD_FWD block that also sums its sum's derivatives (loopinfo.jac) */
    const char *pending;    /* the row's tape: a counting pass not emitted yet (its lines), over */
    const char *pending_range;
    struct { atom e; int loop, a, sign; atom g; } *accs;   /* a block: the accumulators' terms (sign: -1 for -=) */
    int naccs, capaccs;
    const char **scratch;   /* the row's tape: the derived op's scratch tensors (a scan's states) */
    int nscratch, capscratch;
} ad;

void ad_fail(ad *s, tk_loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void ad_oom(ad *s);
/* printf into s's arena; "" (and s failed) when memory runs out. */
const char *ad_fmt(ad *s, const char *f, ...) __attribute__((format(printf, 2, 3)));
/* Grows *arr (n used, *cap slots of size sz) for one more; 0 when out of memory. */
int ad_grow(ad *s, void **arr, int n, int *cap, size_t sz);
int ad_is_float_type(tk_vtype t);
const char *ad_expr_str(ad *s, const tk_expr *e);
int ad_new_val(ad *s, val_kind kind, int is_float, atom guard, const char *local);
atom ad_val_atom(ad *s, int k);
atom ad_leaf(const char *text, int is_float);
void ad_emit(ad *s, int key, const char *text);
int ad_find_local(const ad *s, const char *name);
void ad_set_local(ad *s, const char *name, int k);
/* Whether returned output o can be a float tensor (it carries a gradient). */
int ad_output_float(const tk_op *op, int o);
atom ad_read_param(ad *s, int p);
atom ad_flatten(ad *s, const tk_expr *e, atom g);
void ad_walk(ad *s, tk_stmt *const *body, int n, atom g);
void ad_contrib(ad *s, atom target, atom g, int negate, const char *expr);
void ad_take_over(ad *s, atom target, int k);
void ad_partials(ad *s, int k);
/* The seeds (incoming gradients of the outputs stored), then every value's partials in reverse. */
void ad_reverse_values(ad *s);
void ad_store_grads(ad *s);
/* The index tensor tp is read or stored at, as the derived op names it. */
const char *ad_index(ad *s, const tk_param *tp);
void ad_mark_live(ad *s, char *live_line);
int ad_check_index(ad *s, const tk_param *tp, tk_expr *const *args, int nargs, int store, tk_loc loc);
void ad_print_header(ad *s, tk_buf *b);

/* autodiff_rows.c */
/* The derived op of a row loop (one '_'), its body's lines into s (mode
 * AD_ROW), the gradients' reads recorded in s->read_val for the header. */
void ad_rows(ad *s);
/* A block: name is a local of the row's tape (its V_ROWREF), or -1. */
int ad_row_name(ad *s, const char *name);
/* The row's tape meets inner loop st (under guard g). */
void ad_row_for(ad *s, const tk_stmt *st, atom g);
/* A block: `name op= ...` of a local of the row's tape (an accumulator). */
void ad_row_acc(ad *s, const tk_stmt *st, atom g);
/* A block: what accumulator term i (b->accs) adds to the adjoint of its
 * term e, NULL when nothing. */
const char *ad_row_acc_term(ad *b, int i);
/* A block: adds expr (under g) to the adjoint of row value target. */
void ad_row_contrib(ad *b, val *target, atom g, int negate, const char *expr);
/* b: a block of row s, in mode, replaying loop li (-1: none). */
void ad_block_init(ad *s, ad *b, int mode, int li);
/* Block b's live lines, each after a newline and indented as a loop's body; NULL when none is live. */
const char *ad_block_body(ad *b);
/* Block b's index with inner (its variable on the owned dim) as the derived op names it. */
void ad_block_index(ad *s, ad *b, const char *inner);
/* Whether inner loop st runs over the whole owned dim D: `range(D)` or `range(0, D)`. */
int ad_loop_full(const tk_stmt *st, const tk_expr *D);
/* "range(lo, hi)" of loop L. */
const char *ad_loop_range(ad *s, const loopinfo *L);
/* The accumulator of loop L that local name is, -1 if none. */
int ad_find_acc(const loopinfo *L, const char *name);
/* What accumulator statement st is (ACC_SUM, ACC_MAX, ACC_MIN), -1 if none. */
int ad_acc_kind(const tk_stmt *st);
/* Where body[0..n) (top: the loop's own level) reads local name other than as
 * the running value of an accumulator statement of it: that statement, NULL. */
const tk_stmt *ad_reads_running(tk_stmt *const *body, int n, const char *name, int top);
/* The loop output's owned dim (virt: the dim the inner loops read along, NULL until known). */
const tk_expr *ad_owned_dim(const ad *s);

/* autodiff_scan.c */
/* Whether inner loop li (its locals recorded) is a scan, its carried locals
 * then its accumulators (ACC_SCAN); an error where the scan is not one it
 * derives. */
int ad_scan_find(ad *s, int li);
/* The scan's forward pass (the row's line): its steps without stores, each
 * carried local's value kept in a scratch as the step starts. */
void ad_scan_forward(ad *s, int li);
/* A block of the forward pass: assignment st to carried local a (under g). */
void ad_scan_assign(ad *b, const tk_stmt *st, atom g, int a);
/* The scan's reverse pass (the row's line, at its place in the row's). */
void ad_scan_reverse(ad *s, int li);

#endif
