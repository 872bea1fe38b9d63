/* Phase two of the element-wise MoE operators: executor and workspace checks, the data rules,
 * and the device run that splits rows into the plan's parts on the device's work queue. */
#include <stdalign.h>
#include <stdint.h>

#include "core/status.h"
#include "ops/moe_exec.h"
#include "runtime/device.h"

typedef struct moe_op {
    qmoe_moe_executor ex;
    void *workspace;
} moe_op;

typedef struct moe_work {
    const moe_op *op;
    int64_t rows;
    int tokens; /* init routing, quant_once: the per-token quantization pass (2: and the copies) */
} moe_work;

static void part_range(int64_t rows, int part, int nparts, int64_t *r0, int64_t *r1)
{
    /* contiguous, balanced shares: the split never changes what a row computes */
    *r0 = rows / nparts * part + (part < rows % nparts ? part : rows % nparts);
    *r1 = *r0 + rows / nparts + (part < rows % nparts ? 1 : 0);
}

static void moe_part(qmoe_thread_ctx *ctx, void *data, int part, int nparts)
{
    const moe_work *w = data;
    const qmoe_moe_executor *ex = &w->op->ex;
    int64_t r0, r1;
    part_range(w->rows, part, nparts, &r0, &r1);
    if (r0 >= r1) return;
    void *scratch = ctx->scratch;
    switch (ex->kind) {
    case MOE_DYNAMIC_QUANT: moe_quant_rows(&ex->u.quant, r0, r1, scratch); break;
    case MOE_GATING_SOFTMAX: moe_gating_softmax_rows(&ex->u.gating, r0, r1, scratch); break;
    case MOE_GATING_TOPK: moe_gating_topk_rows(&ex->u.gating, r0, r1, scratch); break;
    case MOE_INIT_ROUTING:
        if (w->tokens == 2) moe_routing_quant_scatter(&ex->u.routing, w->op->workspace, r0, r1, scratch);
        else if (w->tokens) moe_routing_quant_tokens(&ex->u.routing, w->op->workspace, r0, r1, scratch);
        else moe_routing_rows(&ex->u.routing, w->op->workspace, r0, r1, scratch);
        break;
    case MOE_FINALIZE: moe_finalize_rows(&ex->u.finalize, r0, r1, scratch); break;
    case MOE_SWIGLU: moe_swiglu_rows(&ex->u.swiglu, r0, r1, scratch); break;
    default: break;
    }
}

static int64_t plan_rows(const qmoe_moe_executor *ex)
{
    switch (ex->kind) {
    case MOE_DYNAMIC_QUANT: return ex->u.quant.rows;
    case MOE_GATING_SOFTMAX:
    case MOE_GATING_TOPK: return ex->u.gating.rows;
    case MOE_FINALIZE: return ex->u.finalize.N;
    case MOE_SWIGLU: return ex->u.swiglu.rows;
    default: return 0;
    }
}

static qmoe_status moe_device_run(const void *opdata, qmoe_device *dev, int index, int count)
{
    (void)index;
    (void)count;
    const moe_op *op = opdata;
    moe_work w = {op, plan_rows(&op->ex), 0};
    /* Index data is checked here, on the device, when the operators queued before this one on
     * the stream (gating, init routing) have written it; nothing is written on failure. */
    if (op->ex.kind == MOE_FINALIZE) {
        qmoe_status st = moe_finalize_check_data(&op->ex.u.finalize);
        if (st) return st;
    }
    if (op->ex.kind == MOE_INIT_ROUTING) {
        const moe_routing_plan *p = &op->ex.u.routing;
        qmoe_status st = moe_routing_check_data(p);
        if (st) return st;
        /* the sort is a counting pass over N*K ids: one thread, before the row copies */
        moe_routing_sort(p, op->workspace);
        w.rows = moe_routing_rows_written(p, op->workspace);
        if (p->quant_once && w.rows > 0) { /* each token once, then its K copies are copies */
            /* with a row index per (token, choice) the copies are written right away */
            int scatter = p->a.row_idx_type == 0 && p->escale.data;
            moe_work t = {op, p->N, scatter ? 2 : 1};
            qmoe_device_run(dev, moe_part, &t, op->ex.threads < p->N ? op->ex.threads : (int)p->N);
            if (scatter) return QMOE_OK;
        }
    }
    if (w.rows <= 0) return QMOE_OK;
    int nparts = op->ex.threads;
    if (nparts > w.rows) nparts = (int)w.rows;
    qmoe_device_run(dev, moe_part, &w, nparts);
    return QMOE_OK;
}

qmoe_status moe_execute(const char *op, int32_t kind, void *workspace, uint64_t workspace_size,
                        qmoe_moe_executor *executor, qmoe_stream *stream)
{
    if (!executor) return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "executor", "%s: executor is a null pointer", op);
    if (executor->kind != kind)
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_VALUE, "executor",
                             "%s: the executor was planned for another operator", op);
    if (workspace_size < executor->workspace_bytes)
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_WORKSPACE, "workspaceSize",
                         "%s: workspaceSize = %llu is less than the %llu bytes phase one asked for",
                         op, (unsigned long long)workspace_size,
                         (unsigned long long)executor->workspace_bytes);
    if (!workspace && executor->workspace_bytes)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "workspace", "%s: workspace is a null pointer", op);
    if (executor->workspace_bytes && (uintptr_t)workspace % alignof(int64_t))
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_WORKSPACE, "workspace",
                             "%s: workspace %p is not aligned for int64", op,
                         workspace);
    moe_op o = {*executor, workspace};
    qmoe_status st = qmoe_stream_submit(stream, 1, moe_device_run, &o, sizeof o, executor->slice_bytes);
    if (st == QMOE_OK) qmoe_clear_error();
    return st;
}
