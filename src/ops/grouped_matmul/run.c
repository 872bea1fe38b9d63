/*
 * Phase two of GroupedMatmul: the group list check (on the device, after the operators queued
 * before it wrote it), then the work split. Work items are (expert, block of rb rows, block of
 * columns), numbered expert by expert, row block by row block, and handed out to the parts in
 * contiguous, balanced ranges; what an element computes never depends on the split.
 */
#include <stdalign.h>
#include <stdint.h>

#include "core/gmm_access.h"
#include "core/status.h"
#include "ops/grouped_matmul/run.h"
#include "runtime/stream.h"

#define OP "GroupedMatmul"

typedef struct gmm_work {
    const grouped_matmul_plan *ex;
    const int64_t *start; /* [E + 1]: segment e is rows [start[e], start[e + 1]) */
    const int64_t *pre;   /* [E + 1]: items before expert e */
    int64_t ncb, cb, ncols; /* column blocks per row block, their width, columns split */
} gmm_work;

/* Exact int32 accumulators, then the fold's float formula element by element (int32 output:
 * acc + bias). The same float operations, in the same order, as the driver's fold and the
 * dequant epilogue. */
static void exact_block(const grouped_matmul_plan *ex, int64_t e, int64_t m0, int64_t m1,
                        int64_t n0, int64_t n1)
{
    const qmoe_gmm_params *p = &ex->p;
    const moe_view *out = &ex->o.out;
    for (int64_t m = m0; m < m1; m++)
        for (int64_t n = n0; n < n1; n++) {
            int64_t o = m * out->st[0] + n * out->st[1];
            if (!ex->scaled) {
                int32_t acc = 0;
                for (int64_t k = 0; k < p->K; k++) acc += qmoe_x_get(p, m, k) * qmoe_w_get(p, e, k, n);
                if (ex->o.bias.data)
                    acc += ((const int32_t *)ex->o.bias.data)[e * ex->o.bias.st[0] + n * ex->o.bias.st[1]];
                ((int32_t *)out->data)[o] = acc;
                continue;
            }
            float xs = p->xs[m * p->xs_s], f = 0.0f;
            for (int64_t g = 0; g < p->G; g++) {
                int32_t acc = 0;
                for (int64_t k = g * p->group_k; k < (g + 1) * p->group_k; k++)
                    acc += qmoe_x_get(p, m, k) * qmoe_w_get(p, e, k, n);
                float ws = qmoe_ws_get(p, e, g, n);
                float v = p->mode == QMOE_MODE_A8W8 ? (float)acc * xs * ws : (float)acc * ws;
                f = g == 0 ? v : f + v;
            }
            if (p->mode == QMOE_MODE_A8W4) f *= xs;
            if (ex->o.bias.data)
                f += ((const float *)ex->o.bias.data)[e * ex->o.bias.st[0] + n * ex->o.bias.st[1]];
            moe_store(out, o, f);
        }
}

/* float32 accumulation in k order, one rounding to the output dtype. */
static void float_block(const grouped_matmul_plan *ex, int64_t e, int64_t m0, int64_t m1,
                        int64_t n0, int64_t n1)
{
    const moe_view *x = &ex->x, *w = &ex->w, *b = &ex->o.bias, *out = &ex->o.out;
    for (int64_t m = m0; m < m1; m++)
        for (int64_t n = n0; n < n1; n++) {
            float acc = 0.0f;
            int64_t xo = m * x->st[0], wo = e * w->st[0] + n * w->st[2];
            for (int64_t k = 0; k < ex->K; k++)
                acc += moe_load(x, xo + k * x->st[1]) * moe_load(w, wo + k * w->st[1]);
            if (b->data) acc += moe_load(b, e * b->st[0] + n * b->st[1]);
            moe_store(out, m * out->st[0] + n * out->st[1], acc);
        }
}

static void gmm_part(qmoe_thread_ctx *ctx, void *data, int part, int nparts)
{
    const gmm_work *w = data;
    const grouped_matmul_plan *ex = w->ex;
    int64_t total = w->pre[ex->E];
    int64_t i0 = total / nparts * part + (part < total % nparts ? part : total % nparts);
    int64_t i1 = i0 + total / nparts + (part < total % nparts ? 1 : 0);
    int64_t e = 0;
    for (int64_t i = i0; i < i1; i++) {
        while (w->pre[e + 1] <= i) e++; /* items are numbered expert by expert */
        int64_t local = i - w->pre[e], rbi = local / w->ncb, cbi = local % w->ncb;
        int64_t m0 = w->start[e] + rbi * ex->rb;
        int64_t m1 = m0 + ex->rb < w->start[e + 1] ? m0 + ex->rb : w->start[e + 1];
        int64_t j0 = cbi * w->cb, j1 = j0 + w->cb < w->ncols ? j0 + w->cb : w->ncols;
        if (ex->path == GMM_PATH_INT8) {
            qmoe_gemm_block B = {ex->isa, &ex->p, ctx, e, m0, m1, j0, j1,
                                 qmoe_epilogue_dequant, (void *)(uintptr_t)&ex->o, 0, NULL};
            qmoe_gemm_run(&B);
        } else if (ex->path == GMM_PATH_EXACT) {
            exact_block(ex, e, m0, m1, j0, j1);
        } else {
            float_block(ex, e, m0, m1, j0, j1);
        }
    }
}

qmoe_status qmoe_grouped_matmul_check(const void *plan, void *workspace)
{
    const grouped_matmul_plan *ex = plan;
    int64_t *start = workspace;
    /* The group list, checked before anything is written; a count is range-checked before it is
     * added, so the running total never overflows. */
    int64_t at = 0;
    start[0] = 0;
    for (int64_t e = 0; e < ex->E; e++) {
        int64_t v = moe_load_index(&ex->gl, e * ex->gl.st[0]);
        if (ex->group_list_type == 1 && (v < 0 || v > ex->M))
            return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_VALUE, "groupList",
                                 OP ": groupList[%lld] = %lld; a count must be 0 to M = %lld",
                                 (long long)e, (long long)v, (long long)ex->M);
        int64_t end = ex->group_list_type == 0 ? v : at + v; /* at, v <= M: no overflow */
        if (end < at || end > ex->M)
            return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_VALUE, "groupList",
                                 OP ": groupList[%lld] = %lld; %s must stay within %lld to M = %lld",
                                 (long long)e, (long long)v,
                                 ex->group_list_type == 0 ? "the cumulative sum" : "the running total",
                                 (long long)at, (long long)ex->M);
        at = end;
        start[e + 1] = end;
    }
    return QMOE_OK;
}

qmoe_status qmoe_grouped_matmul_run(const void *plan, void *workspace, qmoe_device *dev,
                                    int index, int count)
{
    (void)index;
    (void)count;
    const grouped_matmul_plan *ex = plan;
    int64_t *start = workspace, *pre = start + ex->E + 1; /* start: written by the check */
    /* Column blocks: enough items for every part twice over, at least 64 columns each. */
    gmm_work w = {ex, start, pre, 1, 0, ex->path == GMM_PATH_INT8 ? ex->N / 2 : ex->N};
    int64_t rblocks = 0;
    for (int64_t e = 0; e < ex->E; e++) rblocks += (start[e + 1] - start[e] + ex->rb - 1) / ex->rb;
    if (rblocks == 0 || w.ncols == 0) return QMOE_OK;
    int64_t want = (2 * (int64_t)ex->threads + rblocks - 1) / rblocks;
    int64_t most = (w.ncols + 63) / 64;
    w.ncb = want < most ? want : most;
    w.cb = ((w.ncols + w.ncb - 1) / w.ncb + 63) / 64 * 64;
    w.ncb = (w.ncols + w.cb - 1) / w.cb;
    pre[0] = 0;
    for (int64_t e = 0; e < ex->E; e++)
        pre[e + 1] = pre[e] + (start[e + 1] - start[e] + ex->rb - 1) / ex->rb * w.ncb;
    int64_t items = pre[ex->E];
    int nparts = ex->threads < items ? ex->threads : (int)items;
    qmoe_device_run(dev, gmm_part, &w, nparts);
    return QMOE_OK;
}

qmoe_status qmoe_grouped_matmul(void *workspace, uint64_t workspace_size,
                                qmoe_grouped_matmul_executor *executor, qmoe_stream *stream)
{
    return op_executor_run(OP, executor ? &executor->b : NULL, workspace, workspace_size, stream);
}

void qmoe_grouped_matmul_executor_destroy(qmoe_grouped_matmul_executor *executor)
{
    op_executor_free(executor ? &executor->b : NULL);
}
