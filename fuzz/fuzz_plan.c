/*
 * Phase one with arbitrary tensor descriptors: qmoe_tensor_create and
 * qmoe_grouped_matmul_swiglu_quant_workspace_size may only answer 0, 161001, 161002 or 561000, never crash,
 * never read tensor data, never leak; a refused plan leaves *executor as it was.
 *
 * Input: a valid template (mode, layout, per-group, sizes), then a list of mutations, each
 * changing one thing of one tensor (presence, rank, a dim, a stride, dtype, format, data pointer)
 * or of the options. Starting near a valid case lets the fuzzer reach every check of the planner.
 * Every data pointer points into a PROT_NONE region (one per tensor), so a read of tensor data
 * faults.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "fuzz_tensor.h"
#include "ops/grouped_matmul_swiglu_quant/plan.h"
#include "qmoe/qmoe.h"
#include "qmoe/runtime.h"

enum { X, W, BIAS, OFFSET, WS, XS, GL, OUT, OUTS, OUTOFF, SLOTS };

typedef fz_desc desc;

/* One unreadable 1 MiB region per tensor slot: distinct regions, because phase one refuses
 * outputs that share memory with inputs, and a valid template must be able to pass. */
enum { SLOT_BYTES = 1 << 20 };

static void *unreadable_region(int slot) { return fz_unreadable(slot, SLOTS, SLOT_BYTES); }

/* A valid case of one of the six weight layouts, per-channel or per-group. */
static void make_template(fz_input *in, desc *t, qmoe_grouped_matmul_swiglu_quant_options *o)
{
    int layout = (int)fz_range(in, 0, 5); /* int8/int4/int32 x ND/NZ */
    int wdtype = layout / 2 == 0 ? QMOE_DTYPE_INT8 : layout / 2 == 1 ? QMOE_DTYPE_INT4 : QMOE_DTYPE_INT32;
    int nz = layout % 2;
    int a8w4 = wdtype != QMOE_DTYPE_INT8;
    int64_t M = fz_range(in, 0, 40), E = fz_range(in, 1, 8), Eg = fz_range(in, 0, E);
    int64_t K = fz_range(in, 1, 4) * 16;
    int64_t N = nz ? fz_range(in, 1, 3) * (a8w4 ? 64 : 32) : fz_range(in, 1, 24) * (a8w4 ? 8 : 2);
    int64_t G = fz_u8(in) % 2 ? (int64_t[]){1, 2, 4, 8, 16}[fz_range(in, 0, 4)] : 0;

    for (int i = 0; i < SLOTS; i++) memset(&t[i], 0, sizeof t[i]);
    fz_desc_set(&t[X], QMOE_DTYPE_INT8, QMOE_FORMAT_ND, 2, (int64_t[]){M, K});
    if (nz) {
        int64_t cols = a8w4 ? 64 : 32, inner = wdtype == QMOE_DTYPE_INT32 ? 8 : cols;
        fz_desc_set(&t[W], wdtype, QMOE_FORMAT_FRACTAL_NZ, 5, (int64_t[]){E, N / cols, K / 16, 16, inner});
    } else {
        fz_desc_set(&t[W], wdtype, QMOE_FORMAT_ND, 3,
            (int64_t[]){E, K, wdtype == QMOE_DTYPE_INT32 ? N / 8 : N});
    }
    if (a8w4) fz_desc_set(&t[BIAS], QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, 2, (int64_t[]){E, N});
    static const int scale_types[] = {QMOE_DTYPE_FLOAT32, QMOE_DTYPE_FLOAT16, QMOE_DTYPE_BFLOAT16,
                                      QMOE_DTYPE_UINT64, QMOE_DTYPE_INT64};
    int st = scale_types[fz_range(in, 0, a8w4 ? 4 : 2)];
    if (G) fz_desc_set(&t[WS], st, QMOE_FORMAT_ND, 3, (int64_t[]){E, G, N});
    else fz_desc_set(&t[WS], st, QMOE_FORMAT_ND, 2, (int64_t[]){E, N});
    fz_desc_set(&t[XS], QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, 1, (int64_t[]){M});
    fz_desc_set(&t[GL], QMOE_DTYPE_INT64, QMOE_FORMAT_ND, 1, (int64_t[]){Eg});
    fz_desc_set(&t[OUT], QMOE_DTYPE_INT8, QMOE_FORMAT_ND, 2, (int64_t[]){M, N / 2});
    fz_desc_set(&t[OUTS], QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, 1, (int64_t[]){M});
    memset(o, 0, sizeof *o);
    o->group_list_type = fz_u8(in) % 2;
}

static void mutate(fz_input *in, desc *t, qmoe_grouped_matmul_swiglu_quant_options *o, int *null_options)
{
    desc *d;
    switch (fz_desc_step(in, t, SLOTS, 2, &d)) {
    case -1: return; /* a descriptor mutation */
    case 8:
        switch (fz_range(in, 0, 6)) {
        case 0: o->group_list_type = (qmoe_group_list_type)fz_range(in, -2, 3); break;
        case 1: o->force_weight_nz = (int)fz_range(in, -1, 2); break;
        case 2: o->kernel = (qmoe_kernel)fz_range(in, -2, 8); break;
        case 3: o->threads = (int)fz_dim(in); break;
        case 4: o->devices = (int)fz_dim(in); break;
        case 5: o->threads = (int)fz_range(in, -1, 64); break;
        case 6: *null_options = !*null_options; break;
        }
        break;
    case 9: /* a whole new descriptor */
        d->present = 1;
        d->ndim = (int)fz_range(in, 0, QMOE_MAX_DIMS);
        for (int i = 0; i < QMOE_MAX_DIMS; i++) d->shape[i] = fz_dim(in) & 63;
        d->dtype = (int)fz_range(in, 0, 7);
        d->format = (int)fz_range(in, 0, 1);
        break;
    }
}

static qmoe_tensor *create(const desc *d, int slot) { return fz_tensor(d, unreadable_region(slot)); }

/* What a successful plan promises: sizes consistent with each other and a workspace size that
 * did not wrap around. */
static void check_plan(const qmoe_grouped_matmul_swiglu_quant_executor *ex, uint64_t size)
{
    const qmoe_gmm_params *p = qmoe_grouped_matmul_swiglu_quant_executor_params((qmoe_grouped_matmul_swiglu_quant_executor *)(uintptr_t)ex);
    fz_require(qmoe_grouped_matmul_swiglu_quant_executor_kernel(ex) != QMOE_KERNEL_AUTO, "plan without a concrete kernel");
    fz_require(size == p->workspace_bytes, "workspace size differs from the plan's");
    /* K = 0 and N = 0 are accepted (docs/testing.md: zero sizes give the all-zero result) */
    fz_require(p->M >= 0 && p->K >= 0 && p->N >= 0 && p->N == 2 * p->N2, "plan with bad M, K or N");
    fz_require(p->E_groups >= 0 && p->E_groups <= p->E, "plan with E' > E");
    fz_require(p->G > 0 && p->K % p->G == 0 && p->group_k * p->G == p->K, "plan with bad G");
    fz_require(p->threads >= 1 && p->devices >= 1, "plan with no thread or device");
    /* runtime.h: groups of at most QMOE_MAX_DEVICES devices, devices of at most 4096 threads */
    fz_require(p->devices <= QMOE_MAX_DEVICES && p->threads <= 4096, "plan beyond the runtime's limits");
    uint64_t need;
    fz_require(!__builtin_mul_overflow(p->ws_row_bytes, (uint64_t)p->threads, &need) &&
                !__builtin_mul_overflow(need, (uint64_t)p->devices, &need),
            "accepted a plan whose per-thread workspace (row bytes x threads x devices) overflows");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_input in = {data, size, 0};
    desc t[SLOTS];
    qmoe_grouped_matmul_swiglu_quant_options o;
    int null_options = 0;
    make_template(&in, t, &o);
    int mutations = (int)fz_range(&in, 0, 7);
    for (int i = 0; i < mutations; i++) mutate(&in, t, &o, &null_options);
    int null_size_ptr = fz_u8(&in) == 0x5A, null_ex_ptr = fz_u8(&in) == 0xA5;

    qmoe_tensor *ts[SLOTS];
    for (int i = 0; i < SLOTS; i++) ts[i] = create(&t[i], i);

    qmoe_grouped_matmul_swiglu_quant_executor *const sentinel = (qmoe_grouped_matmul_swiglu_quant_executor *)(uintptr_t)0x5e5e5e50;
    qmoe_grouped_matmul_swiglu_quant_executor *ex = sentinel;
    uint64_t ws = 0;
    qmoe_status st = qmoe_grouped_matmul_swiglu_quant_workspace_size(
        ts[X], ts[W], ts[BIAS], ts[OFFSET], ts[WS], ts[XS], ts[GL], ts[OUT], ts[OUTS], ts[OUTOFF],
        null_options ? NULL : &o, null_size_ptr ? NULL : &ws, null_ex_ptr ? NULL : &ex);
    fz_require(fz_documented(st), "workspace_size returned an undocumented status");
    if (st == QMOE_OK) {
        fz_require(ex != sentinel && ex != NULL, "success without an executor");
        fz_require(qmoe_last_error()[0] == '\0', "success left an error message");
        check_plan(ex, ws);
        qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
    } else {
        fz_require(ex == sentinel, "a refused plan changed *executor");
        fz_require(qmoe_last_error()[0] != '\0', "a refused plan gave no message");
    }
    for (int i = 0; i < SLOTS; i++) qmoe_tensor_destroy(ts[i]);
    return 0;
}
