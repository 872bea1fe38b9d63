/*
 * The driver of GroupedMatmulSwigluQuant on a device: finds the device's rows, splits them into
 * blocks and parts exactly as the plan says (src/ops/grouped_matmul_swiglu_quant/partition.h), streams each block's
 * operands through the part's copy queue into its scratchpad slice, and calls the kernel with
 * large blocks (many rows x all columns, or all rows x a column range).
 */
#include "ops/grouped_matmul_swiglu_quant/run.h"

#include <string.h>

#include "core/status.h"
#include "ops/grouped_matmul_swiglu_quant/partition.h"
#include "kernels/swiglu_quant.h"
#include "ops/grouped_matmul_swiglu_quant/groups.h"
#include "runtime/copyq.h"
#include "runtime/stream.h"

/* The pipeline faults of src/testing.h exist only in the tests' build; elsewhere FAULT() is 0
 * and the branches are compiled out. */
#ifdef QMOE_TESTING
#include "testing.h"
qmoe_gmm_fault qmoe_gmm_test_fault;
#define FAULT(f) (fault == (f))
#else
#define FAULT(f) 0
#endif

/* What the parts of one device share: a row range, never a device index. */
typedef struct gmm_work {
    const qmoe_gmm_params *p;
    const qmoe_kernel_entry *k;
    int64_t row_start, nrows, nblocks;
    float *s_rows; /* column split: S rows of the range (workspace) */
    int columns;   /* 1: column split; 2: its quantization phase as a separate job */
    int barrier;   /* column split in one job with a barrier between the phases */
} gmm_work;

/* ---------------------------------------------------------------- blocks ---------------------- */

/* Walks the blocks of a row range in order: at most row_block rows, never across an expert. */
typedef struct block_iter {
    const qmoe_gmm_params *p;
    int64_t e, e_start, e_end; /* current expert and its rows */
    int64_t m, r1;             /* next row, end of the range */
} block_iter;

typedef struct block {
    int64_t e, m0, m1;
} block;

static void iter_init(block_iter *it, const qmoe_gmm_params *p, int64_t r0, int64_t r1)
{
    it->p = p;
    it->e = 0;
    it->e_start = 0;
    it->e_end = p->E_groups ? qmoe_gmm_group_end(p, 0, 0) : 0;
    while (it->e_end <= r0 && it->e + 1 < p->E_groups) {
        it->e++;
        it->e_start = it->e_end;
        it->e_end = qmoe_gmm_group_end(p, it->e, it->e_start);
    }
    it->m = r0;
    it->r1 = r1;
}

static block iter_next(block_iter *it)
{
    while (it->m >= it->e_end) { /* past this expert (empty experts are skipped) */
        it->e++;
        it->e_start = it->e_end;
        it->e_end = qmoe_gmm_group_end(it->p, it->e, it->e_start);
    }
    int64_t end = it->e_end < it->r1 ? it->e_end : it->r1;
    if (end - it->m > it->p->row_block) end = it->m + it->p->row_block;
    block b = {it->e, it->m, end};
    it->m = end;
    return b;
}

static int64_t ceil_div_threads(const qmoe_gmm_params *p, int64_t n)
{
    int64_t v = n + p->threads - 1;
    return v <= UINT32_MAX ? qmoe_fastdiv((uint32_t)v, &p->threads_div) : v / p->threads;
}

/* ---------------------------------------------------------------- one part -------------------- */

/* Pushes block b's x rows (when staged) and x scales into one pipeline slot. */
static void stage_block(qmoe_copyq *q, const qmoe_gmm_params *p, block b, int staged, int8_t *xd,
                        float *xsd)
{
    qmoe_copyq_push(q, xd, p->x + b.m0 * p->x_s[0], staged ? (size_t)(b.m1 - b.m0) : 0,
                    (size_t)p->K, (size_t)p->K, (size_t)p->x_s[0]);
    qmoe_copyq_push(q, xsd, p->xs + b.m0 * p->xs_s, (size_t)(b.m1 - b.m0), sizeof(float),
                    sizeof(float), (size_t)p->xs_s * sizeof(float));
}

/* A part's blocks [b0, b1) of the range, computed for columns [j0, j1): operands staged through
 * the copy queue stage_depth deep; S written at s (row stride lds floats) when `s` is given,
 * otherwise into the part's own S block and quantized block by block. */
static void run_blocks(const gmm_work *w, qmoe_thread_ctx *ctx, int64_t b0, int64_t b1,
                       int64_t j0, int64_t j1, float *s, int64_t lds)
{
    const qmoe_gmm_params *p = w->p;
    qmoe_gmm_slice_layout lay = qmoe_gmm_slice_layout_of(p);
    char *slice = ctx->scratch;
    int quantize = s == NULL;
    if (quantize) {
        s = (float *)(slice + lay.s_block);
        lds = (int64_t)(p->ws_row_bytes / sizeof(float));
    }
    qmoe_thread_ctx kctx = *ctx;
    kctx.scratch = slice + lay.kernel;
    kctx.scratch_bytes = p->kernel_scratch_bytes;
    qmoe_copyq *q = ctx->stageq;
    qmoe_gmm_params lp = *p; /* the kernel reads x and x-scale from the staged copies */
    lp.x_s[0] = p->K;
    lp.x_s[1] = 1;
    lp.xs_s = 1;
    int staged = p->x_s[1] == 1 || p->K <= 1;
    int depth = p->stage_depth;
#ifdef QMOE_TESTING
    qmoe_gmm_fault fault = qmoe_gmm_test_fault;
#endif

    block_iter ahead, at;
    iter_init(&ahead, p, w->row_start, w->row_start + w->nrows);
    for (int64_t i = 0; i < b0; i++) iter_next(&ahead);
    at = ahead;

    for (int64_t i = b0; i < b1 && i < b0 + depth; i++) { /* prologue: prime the pipeline */
        block b = iter_next(&ahead);
        int slot = (int)((i - b0) % depth);
        QMOE_TRACE_START(ctx->trace, QMOE_EV_COPY, i);
        int8_t *xd = (int8_t *)(slice + lay.x_stage + (uint64_t)slot * lay.x_slot_bytes);
        float *xsd = (float *)(slice + lay.xs_stage + (uint64_t)slot * lay.xs_slot_bytes);
        stage_block(q, p, b, staged, xd, xsd);
        QMOE_TRACE_STOP(ctx->trace, QMOE_EV_COPY, i);
    }
    for (int64_t i = b0; i < b1; i++) {
        block b = iter_next(&at);
        int slot = (int)((i - b0) % depth);
        int8_t *xd = (int8_t *)(slice + lay.x_stage + (uint64_t)slot * lay.x_slot_bytes);
        float *xsd = (float *)(slice + lay.xs_stage + (uint64_t)slot * lay.xs_slot_bytes);
        int last = i + 1 == b1;
        int pop_late = FAULT(QMOE_GMM_FAULT_READ_BEFORE_POP);
        if (!pop_late) {
            QMOE_TRACE_START(ctx->trace, QMOE_EV_COPY, i);
            if (FAULT(QMOE_GMM_FAULT_POP_OUT_OF_ORDER)) {
                qmoe_copyq_pop_expect(q, xsd);
                qmoe_copyq_pop_expect(q, xd);
            } else {
                qmoe_copyq_pop_expect(q, xd);
                if (!(last && FAULT(QMOE_GMM_FAULT_SKIP_POP))) qmoe_copyq_pop_expect(q, xsd);
            }
            QMOE_TRACE_STOP(ctx->trace, QMOE_EV_COPY, i);
        }
        const qmoe_gmm_params *kp = p;
        int64_t m0 = b.m0, m1 = b.m1;
        if (staged) {
            lp.x = xd;
            lp.xs = xsd;
            kp = &lp;
            m0 = 0;
            m1 = b.m1 - b.m0;
        } /* else x has non-contiguous rows: the kernel reads the operands in place */
        float *sb = quantize ? s : s + (b.m0 - w->row_start) * lds + j0;
        QMOE_TRACE_START(ctx->trace, QMOE_EV_COMPUTE, i);
        qmoe_swiglu_quant_block(w->k, kp, &kctx, b.e, m0, m1, j0, j1, sb, lds);
        QMOE_TRACE_STOP(ctx->trace, QMOE_EV_COMPUTE, i);
        if (pop_late) {
            qmoe_copyq_pop_expect(q, xd);
            qmoe_copyq_pop_expect(q, xsd);
        }
        if (quantize) {
            QMOE_TRACE_START(ctx->trace, QMOE_EV_EPILOGUE, i);
            qmoe_swiglu_quant_rows(w->k, p, s, lds, b.m0, b.m1);
            QMOE_TRACE_STOP(ctx->trace, QMOE_EV_EPILOGUE, i);
        }
        if (i + depth < b1) { /* refill the slot just freed */
            QMOE_TRACE_START(ctx->trace, QMOE_EV_COPY, i + depth);
            stage_block(q, p, iter_next(&ahead), staged, xd, xsd);
            QMOE_TRACE_STOP(ctx->trace, QMOE_EV_COPY, i + depth);
        }
    }
}

/* Row split: a balanced range of rows per part, in blocks, all columns, quantized as they
 * complete. */
static void rows_part(qmoe_thread_ctx *ctx, void *data, int part, int nparts)
{
    (void)nparts;
    const gmm_work *w = data;
    qmoe_row_range r = qmoe_gmm_part_rows(w->p, w->row_start, w->nrows,
                                          qmoe_kernel_row_align(w->k), part, w->p->threads);
    gmm_work pw = *w;
    pw.row_start = r.start;
    pw.nrows = r.count;
    pw.nblocks = qmoe_gmm_count_blocks(w->p, r.start, r.start + r.count);
    if (pw.nblocks) run_blocks(&pw, ctx, 0, pw.nblocks, 0, w->p->N2, NULL, 0);
}

static void columns_compute(const gmm_work *w, qmoe_thread_ctx *ctx, int part)
{
    const qmoe_gmm_params *p = w->p;
    int64_t per = ceil_div_threads(p, p->N2);
    per = (per + p->col_block - 1) / p->col_block * p->col_block;
    int64_t j0 = part * per, j1 = j0 + per < p->N2 ? j0 + per : p->N2;
    if (j0 < j1)
        run_blocks(w, ctx, 0, w->nblocks, j0, j1, w->s_rows,
                   (int64_t)(p->ws_row_bytes / sizeof(float)));
}

static void columns_quantize(const gmm_work *w, qmoe_thread_ctx *ctx, int part)
{
    const qmoe_gmm_params *p = w->p;
    int64_t per = ceil_div_threads(p, w->nrows);
    int64_t r0 = part * per, r1 = r0 + per < w->nrows ? r0 + per : w->nrows;
    if (r0 >= r1) return;
    int64_t lds = (int64_t)(p->ws_row_bytes / sizeof(float));
    QMOE_TRACE_START(ctx->trace, QMOE_EV_EPILOGUE, part);
    qmoe_swiglu_quant_rows(w->k, p, w->s_rows + r0 * lds, lds, w->row_start + r0,
                           w->row_start + r1);
    QMOE_TRACE_STOP(ctx->trace, QMOE_EV_EPILOGUE, part);
}

/* Column split: every block for a column range, then (after the barrier) a share of the rows. */
static void columns_part(qmoe_thread_ctx *ctx, void *data, int part, int nparts)
{
    (void)nparts;
    const gmm_work *w = data;
    if (w->columns == 2) {
        columns_quantize(w, ctx, part);
        return;
    }
    columns_compute(w, ctx, part);
    if (w->barrier) {
        qmoe_workq_barrier(ctx);
        columns_quantize(w, ctx, part);
    }
}

/* ---------------------------------------------------------------- one device ------------------ */

qmoe_status qmoe_gmm_device_run(const void *plan, void *workspace, qmoe_device *dev, int index,
                                int count)
{
    (void)count; /* the split was made for the plan's device count, which the stream runs */
    const qmoe_gmm_params *p = plan;
    /* groupList was checked before this (the descriptor's check, ops/op.c) */
    qmoe_trace_buf *tr = qmoe_device_trace_buf(dev, 0);
    /* The split is the plan's rules applied to those rows (ops/grouped_matmul_swiglu_quant/partition.h): the same pure
     * function of plan and groupList on every device, so the devices' shares tile the rows. */
    QMOE_TRACE_START(tr, QMOE_EV_PLAN, index);
    qmoe_gmm_split split;
    qmoe_gmm_plan_split(p, &split);
    const qmoe_gmm_device_split *sp = &split.dev[index];
    gmm_work w = {
        .p = p,
        .k = p->kernel_entry,
        .row_start = sp->row_start,
        .nrows = sp->nrows,
        .nblocks = sp->nblocks,
        .columns = sp->columns,
    };
    QMOE_TRACE_STOP(tr, QMOE_EV_PLAN, index);
    if (w.nrows == 0) return QMOE_OK;
    if (w.columns) {
        w.s_rows = (float *)((char *)workspace + (uint64_t)index * p->device_ws_bytes);
        w.barrier = p->threads <= qmoe_device_threads(dev); /* a barrier needs one thread per part */
        qmoe_device_run(dev, columns_part, &w, p->threads);
        if (!w.barrier) {
            w.columns = 2;
            qmoe_device_run(dev, columns_part, &w, p->threads);
        }
    } else {
        qmoe_device_run(dev, rows_part, &w, p->threads);
    }
    return qmoe_device_check_queues(dev); /* every push popped, in order */
}
