/*
 * Phase one of the element-wise MoE operators (qmoe/moe_ops.h) with arbitrary tensor descriptors
 * and attributes: each *_workspace_size may only answer 0, 161001, 161002 or 561000, never crash,
 * never read tensor data (every data pointer is in a PROT_NONE region), never leak; a refused
 * plan leaves *executor as it was and says why.
 *
 * Input: the operator (first byte), a valid template of it (sizes, dtypes, optional inputs,
 * attributes), then mutations of one tensor descriptor, one attribute or the options.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "fuzz_tensor.h"
#include "qmoe/moe_ops.h"

enum { SLOTS = 8, ATTRS = 12, SLOT_BYTES = 1 << 20 };

typedef fz_desc desc;

static void *unreadable_region(int slot) { return fz_unreadable(slot, SLOTS, SLOT_BYTES); }

static void set(desc *d, int dtype, int ndim, const int64_t *shape)
{
    fz_desc_set(d, dtype, QMOE_FORMAT_ND, ndim, shape);
}
static int float_dtype(fz_input *in)
{
    static const int f[] = {QMOE_DTYPE_FLOAT32, QMOE_DTYPE_FLOAT16, QMOE_DTYPE_BFLOAT16};
    return f[fz_range(in, 0, 2)];
}

/* A valid case of operator `op`: descriptors in t, integer attributes in a. */
static void make_template(fz_input *in, int op, desc *t, int64_t *a)
{
    for (int i = 0; i < SLOTS; i++) memset(&t[i], 0, sizeof t[i]);
    memset(a, 0, sizeof(int64_t) * ATTRS);
    int dt = float_dtype(in);
    int64_t M = fz_range(in, 0, 40), H = fz_range(in, 1, 64), E = fz_range(in, 1, 8) * 8;
    int64_t K = fz_range(in, 1, 8);
    switch (op) {
    case 0: /* dynamic quant: x, smooth, y, scale */
        set(&t[0], dt, 2, (int64_t[]){M, H});
        if (fz_u8(in) & 1) set(&t[1], dt, 1, &H);
        set(&t[2], QMOE_DTYPE_INT8, 2, (int64_t[]){M, H});
        set(&t[3], QMOE_DTYPE_FLOAT32, 1, &M);
        break;
    case 1: /* gating softmax: x, finished, y, idx, row_idx; a[0] = k */
        a[0] = fz_range(in, 0, E);
        set(&t[0], dt, 2, (int64_t[]){M, E});
        if (fz_u8(in) & 1) set(&t[1], QMOE_DTYPE_INT8, 1, &M);
        set(&t[2], dt, 2, (int64_t[]){M, a[0]});
        set(&t[3], QMOE_DTYPE_INT32, 2, (int64_t[]){M, a[0]});
        set(&t[4], QMOE_DTYPE_INT32, 2, (int64_t[]){M, a[0]});
        break;
    case 2: /* gating top-k: x, bias, y, idx, out; a = k, kGroup, groups, mode, renorm, norm, flag */
        a[2] = (int64_t[]){1, 2, 4, 8}[fz_range(in, 0, 3)];
        a[1] = fz_range(in, 1, a[2]);
        a[0] = fz_range(in, 1, E / a[2] * a[1] < 32 ? E / a[2] * a[1] : 32);
        a[3] = fz_range(in, 0, 1);
        a[5] = fz_range(in, 0, 1);
        a[6] = fz_range(in, 0, 1);
        set(&t[0], dt, 2, (int64_t[]){M, E});
        if (fz_u8(in) & 1) set(&t[1], dt, 1, &E);
        set(&t[2], dt, 2, (int64_t[]){M, a[0]});
        set(&t[3], QMOE_DTYPE_INT32, 2, (int64_t[]){M, a[0]});
        if (a[6]) set(&t[4], QMOE_DTYPE_FLOAT32, 2, (int64_t[]){M, E});
        break;
    case 3: { /* init routing: x, idx, scale, offset, ex, row_idx, tokens, escale */
        int dyn = fz_u8(in) & 1;
        a[0] = fz_range(in, 0, 2) ? 0 : fz_range(in, 1, M * K + 1); /* active_num */
        a[1] = E;                                                   /* expert_num */
        a[2] = fz_range(in, 0, 2);                                  /* tokens mode */
        a[3] = dyn ? 1 : -1;
        a[4] = fz_range(in, 0, E - 1);
        a[5] = fz_u8(in) & 1 ? fz_range(in, a[4] + 1, E) : 0; /* range end (0: all) */
        if (!a[5]) a[4] = 0;
        a[6] = fz_range(in, 0, 1);
        int64_t L = a[5] ? a[5] - a[4] : E, NK = M * K;
        int64_t A = a[0] > 0 && a[0] < NK ? a[0] : NK;
        set(&t[0], dt, 2, (int64_t[]){M, H});
        set(&t[1], QMOE_DTYPE_INT32, 2, (int64_t[]){M, K});
        if (fz_u8(in) & 1) {
            if (dyn) set(&t[2], QMOE_DTYPE_FLOAT32, 2, (int64_t[]){fz_u8(in) & 1 ? L : 1, H});
            else set(&t[2], QMOE_DTYPE_FLOAT32, 1, &M);
        }
        set(&t[4], dyn ? QMOE_DTYPE_INT8 : dt, 2, (int64_t[]){A, H});
        set(&t[5], QMOE_DTYPE_INT32, 1, &NK);
        if (a[2]) set(&t[6], fz_u8(in) & 1 ? QMOE_DTYPE_INT32 : QMOE_DTYPE_INT64, 1, &L);
        if (dyn || t[2].present) set(&t[7], QMOE_DTYPE_FLOAT32, 1, &A);
        break;
    }
    case 4: { /* finalize: ex, row_idx, x1, x2, bias, scales, idx, out; a[0] = mode */
        int64_t NK = M * K;
        a[0] = fz_u8(in) & 1 ? 2 : 0;
        set(&t[0], dt, 2, (int64_t[]){NK, H});
        set(&t[1], QMOE_DTYPE_INT32, 1, &NK);
        if (fz_u8(in) & 1) set(&t[2], dt, 2, (int64_t[]){M, H});
        if (fz_u8(in) & 1) set(&t[3], dt, 2, (int64_t[]){M, H});
        int bias = fz_u8(in) & 1;
        if (bias) set(&t[4], dt, 2, (int64_t[]){E, H});
        if (fz_u8(in) & 1) set(&t[5], fz_u8(in) & 1 ? dt : QMOE_DTYPE_FLOAT32, 2, (int64_t[]){M, K});
        if (bias || fz_u8(in) & 1) set(&t[6], QMOE_DTYPE_INT32, 2, (int64_t[]){M, K});
        set(&t[7], dt, 2, (int64_t[]){M, H});
        break;
    }
    default: /* swiglu: x, out; a[0] = dim */
        a[0] = -1;
        set(&t[0], dt, 2, (int64_t[]){M, 2 * H});
        set(&t[1], dt, 2, (int64_t[]){M, H});
        break;
    }
}

/* The caller's options with room behind them: a struct_size past sizeof(qmoe_moe_options)
 * describes a newer caller, whose extra bytes the library reads (and must refuse if set). */
typedef struct grown_options {
    qmoe_moe_options o;
    uint8_t tail[24];
} grown_options;

static void mutate(fz_input *in, desc *t, int64_t *a, grown_options *g, int *null_options)
{
    switch (fz_desc_step(in, t, SLOTS, 3, NULL)) {
    case -1: return; /* a descriptor mutation */
    case 8: a[fz_range(in, 0, ATTRS - 1)] = fz_dim(in); break;
    case 9: a[fz_range(in, 0, ATTRS - 1)] = fz_range(in, -3, 40); break;
    case 10:
        switch (fz_range(in, 0, 3)) {
        case 0: g->o.threads = (int)fz_dim(in); break;
        case 1: g->o.struct_size = (uint32_t)fz_range(in, 0, sizeof *g); break;
        case 2: *null_options = !*null_options; break;
        case 3: g->tail[fz_range(in, 0, sizeof g->tail - 1)] = fz_u8(in); break;
        }
        break;
    }
}

static qmoe_tensor *create(const desc *d, int slot) { return fz_tensor(d, unreadable_region(slot)); }

static qmoe_status plan(int op, qmoe_tensor **t, const int64_t *a, const qmoe_moe_options *o,
                        uint64_t *ws, qmoe_moe_executor **ex)
{
    switch (op) {
    case 0: return qmoe_dynamic_quant_workspace_size(t[0], t[1], t[2], t[3], o, ws, ex);
    case 1:
        return qmoe_moe_gating_top_k_softmax_workspace_size(t[0], t[1], a[0], t[2], t[3], t[4], o,
                                                            ws, ex);
    case 2: {
        qmoe_moe_gating_attrs g = {a[0], a[1], a[2], a[3], a[4], a[5], (int)a[6],
                                   a[7] % 3 ? 1.0 : 2.5, a[8] % 5 ? 1e-20 : 0.0};
        return qmoe_moe_gating_top_k_workspace_size(t[0], t[1], a[11] == 7 ? NULL : &g, t[2], t[3],
                                                    t[4], o, ws, ex);
    }
    case 3: {
        qmoe_moe_routing_attrs r = {.active_num = a[0], .expert_capacity = a[9], .expert_num = a[1],
                                    .drop_pad_mode = a[10], .tokens_mode = (int)a[2],
                                    .quant_mode = (int)a[3], .expert_start = a[4],
                                    .expert_end = a[5], .row_idx_type = (int)a[6]};
        return qmoe_moe_init_routing_workspace_size(t[0], t[1], t[2], t[3], a[11] == 7 ? NULL : &r,
                                                    t[4], t[5], t[6], t[7], o, ws, ex);
    }
    case 4:
        return qmoe_moe_finalize_routing_workspace_size(t[0], t[1], t[2], t[3], t[4], t[5], t[6],
                                                        a[0], t[7], o, ws, ex);
    default: return qmoe_swiglu_workspace_size(t[0], a[0], t[1], o, ws, ex);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_input in = {data, size, 0};
    int op = (int)fz_range(&in, 0, 5);
    desc t[SLOTS];
    int64_t a[ATTRS];
    make_template(&in, op, t, a);
    grown_options g = {QMOE_MOE_OPTIONS_INIT, {0}};
    g.o.threads = (int)fz_range(&in, 0, 8);
    int null_options = 0;
    int mutations = (int)fz_range(&in, 0, 7);
    for (int i = 0; i < mutations; i++) mutate(&in, t, a, &g, &null_options);
    int null_size_ptr = fz_u8(&in) == 0x5A, null_ex_ptr = fz_u8(&in) == 0xA5;

    qmoe_tensor *ts[SLOTS];
    for (int i = 0; i < SLOTS; i++) ts[i] = create(&t[i], i);
    qmoe_moe_executor *const sentinel = (qmoe_moe_executor *)(uintptr_t)0x5e5e5e50;
    qmoe_moe_executor *ex = sentinel;
    uint64_t ws = 0;
    qmoe_status st = plan(op, ts, a, null_options ? NULL : &g.o, null_size_ptr ? NULL : &ws,
                          null_ex_ptr ? NULL : &ex);
    fz_require(fz_documented(st), "workspace_size returned an undocumented status");
    if (st == QMOE_OK) {
        fz_require(ex != sentinel && ex != NULL, "success without an executor");
        fz_require(qmoe_last_error()[0] == '\0', "success left an error message");
        fz_require(op == 3 || ws == 0, "a workspace for an operator that needs none");
        qmoe_moe_executor_destroy(ex);
    } else {
        fz_require(ex == sentinel, "a refused plan changed *executor");
        fz_require(qmoe_last_error()[0] != '\0', "a refused plan gave no message");
    }
    for (int i = 0; i < SLOTS; i++) qmoe_tensor_destroy(ts[i]);
    return 0;
}
