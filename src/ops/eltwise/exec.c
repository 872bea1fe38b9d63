/* The element-wise MoE operators in the operator model (ops/op.h): their arguments (from the
 * plan's views), the data binding, the data rules and the device run that splits rows into the
 * plan's parts on the device's work queue. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/status.h"
#include "core/tensor.h"
#include "ops/eltwise/exec.h"
#include "runtime/stream.h"

typedef struct moe_op {
    const moe_plan *ex; /* the job's bound plan, read in place */
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
    const moe_plan *ex = w->op->ex;
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

static int64_t plan_rows(const moe_plan *ex)
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

/* Index data is checked on the device, when the operators queued before this one on the stream
 * (gating, init routing) have written it; nothing is written on failure. */
static qmoe_status moe_check(const void *plan, void *workspace)
{
    (void)workspace;
    const moe_plan *ex = plan;
    if (ex->kind == MOE_FINALIZE) return moe_finalize_check_data(&ex->u.finalize);
    if (ex->kind == MOE_INIT_ROUTING) return moe_routing_check_data(&ex->u.routing);
    return QMOE_OK;
}

static qmoe_status moe_run(const void *plan, void *workspace, qmoe_device *dev, int index,
                           int count)
{
    (void)index;
    (void)count;
    const moe_op o = {plan, workspace}, *op = &o;
    moe_work w = {op, plan_rows(op->ex), 0};
    if (op->ex->kind == MOE_INIT_ROUTING) {
        const moe_routing_plan *p = &op->ex->u.routing;
        /* the sort is a counting pass over N*K ids: one thread, before the row copies */
        moe_routing_sort(p, op->workspace);
        w.rows = moe_routing_rows_written(p, op->workspace);
        if (p->quant_once && w.rows > 0) { /* each token once, then its K copies are copies */
            /* with a row index per (token, choice) the copies are written right away */
            int scatter = p->a.row_idx_type == 0 && p->escale.data;
            moe_work t = {op, p->N, scatter ? 2 : 1};
            qmoe_device_run(dev, moe_part, &t, op->ex->threads < p->N ? op->ex->threads : (int)p->N);
            if (scatter) return QMOE_OK;
        }
    }
    if (w.rows <= 0) return QMOE_OK;
    int nparts = op->ex->threads;
    if (nparts > w.rows) nparts = (int)w.rows;
    qmoe_device_run(dev, moe_part, &w, nparts);
    return QMOE_OK;
}

/* ---------------------------------------------------------------- arguments ------------------- */

/* One argument: its vendor name, role, and the view of the plan it binds (offset in moe_plan;
 * -1: reserved, never given). */
typedef struct moe_slot {
    const char *name;
    int32_t role;
    int32_t off;
} moe_slot;

#define V(f) (int32_t)offsetof(moe_plan, u.f)
static const moe_slot quant_slots[] = {
    {"x", OP_IN, V(quant.x)}, {"smoothScales", OP_IN, V(quant.smooth)},
    {"y", OP_OUT, V(quant.y)}, {"scale", OP_OUT, V(quant.scale)}};
static const moe_slot softmax_slots[] = {
    {"x", OP_IN, V(gating.x)}, {"finishedOptional", OP_IN, V(gating.finished)},
    {"yOut", OP_OUT, V(gating.y)}, {"expertIdxOut", OP_OUT, V(gating.idx)},
    {"rowIdxOut", OP_OUT, V(gating.row_idx)}};
static const moe_slot topk_slots[] = {
    {"x", OP_IN, V(gating.x)}, {"biasOptional", OP_IN, V(gating.bias)},
    {"yOut", OP_OUT, V(gating.y)}, {"expertIdxOut", OP_OUT, V(gating.idx)},
    {"outOut", OP_OUT, V(gating.out)}};
static const moe_slot routing_slots[] = {
    {"x", OP_IN, V(routing.x)}, {"expertIdx", OP_IN, V(routing.idx)},
    {"scaleOptional", OP_IN, V(routing.scale)}, {"offsetOptional", OP_IN, -1},
    {"expandedXOut", OP_OUT, V(routing.ex)}, {"expandedRowIdxOut", OP_OUT, V(routing.row_idx)},
    {"expertTokensCountOrCumsumOut", OP_OUT, V(routing.tokens)},
    {"expandedScaleOut", OP_OUT, V(routing.escale)}};
static const moe_slot finalize_slots[] = {
    {"expandedX", OP_IN, V(finalize.ex)}, {"expandedRowIdx", OP_IN, V(finalize.row_idx)},
    {"x1Optional", OP_IN, V(finalize.x1)}, {"x2Optional", OP_IN, V(finalize.x2)},
    {"biasOptional", OP_IN, V(finalize.bias)}, {"scalesOptional", OP_IN, V(finalize.scales)},
    {"expertIdxOptional", OP_IN, V(finalize.idx)}, {"out", OP_OUT, V(finalize.out)}};
static const moe_slot swiglu_slots[] = {
    {"x", OP_IN, V(swiglu.x)}, {"out", OP_OUT, V(swiglu.out)}};
#undef V

static const moe_slot *slots_of(int32_t kind, int *n)
{
#define SLOTS(a) (*n = (int)(sizeof a / sizeof a[0]), a)
    switch (kind) {
    case MOE_DYNAMIC_QUANT: return SLOTS(quant_slots);
    case MOE_GATING_SOFTMAX: return SLOTS(softmax_slots);
    case MOE_GATING_TOPK: return SLOTS(topk_slots);
    case MOE_INIT_ROUTING: return SLOTS(routing_slots);
    case MOE_FINALIZE: return SLOTS(finalize_slots);
    default: return SLOTS(swiglu_slots);
    }
#undef SLOTS
}

static moe_view *view_at(void *plan, int32_t off) { return (moe_view *)(void *)((char *)plan + off); }

static void moe_bind(void *plan, const qmoe_op *op, void *const *args, void *workspace)
{
    (void)op;
    (void)workspace;
    int n;
    const moe_slot *sl = slots_of(((moe_plan *)plan)->kind, &n);
    for (int i = 0; i < n; i++)
        if (sl[i].off >= 0 && args[i]) view_at(plan, sl[i].off)->data = args[i];
}

#define DESC(sym, t, vendor) \
    static const op_desc sym = {t, vendor, moe_bind, moe_check, moe_run}
DESC(desc_quant, QMOE_OP_DYNAMIC_QUANT, "DynamicQuant");
DESC(desc_softmax, QMOE_OP_MOE_GATING_TOP_K_SOFTMAX, "MoeGatingTopKSoftmax");
DESC(desc_topk, QMOE_OP_MOE_GATING_TOP_K, "MoeGatingTopK");
DESC(desc_routing, QMOE_OP_MOE_INIT_ROUTING, "MoeInitRouting");
DESC(desc_finalize, QMOE_OP_MOE_FINALIZE_ROUTING, "MoeFinalizeRouting");
DESC(desc_swiglu, QMOE_OP_SWIGLU, "SwiGlu");
#undef DESC

static const op_desc *desc_of(int32_t kind)
{
    switch (kind) {
    case MOE_DYNAMIC_QUANT: return &desc_quant;
    case MOE_GATING_SOFTMAX: return &desc_softmax;
    case MOE_GATING_TOPK: return &desc_topk;
    case MOE_INIT_ROUTING: return &desc_routing;
    case MOE_FINALIZE: return &desc_finalize;
    default: return &desc_swiglu;
    }
}

/* Bytes from a view's first to its last element (0: empty); bounded by its tensor's checks, which
 * bound the extent of tensors with elements only: an empty one is answered before any sum. */
static uint64_t view_bytes(const moe_view *v)
{
    for (int d = 0; d < v->nd; d++)
        if (v->shape[d] == 0) return 0;
    int64_t last = 0;
    for (int d = 0; d < v->nd; d++) last += (v->shape[d] - 1) * v->st[d];
    return (uint64_t)((last + 1) * qmoe_dtype_bits((qmoe_dtype)v->dtype) / 8);
}

/* Whether distinct elements of the view are distinct memory: with its axes sorted by stride,
 * each stride reaches past everything the smaller ones address (axes of one element aside). */
static int view_injective(const moe_view *v)
{
    int order[QMOE_MAX_DIMS], n = 0;
    for (int d = 0; d < v->nd; d++)
        if (v->shape[d] == 0) return 1; /* no elements */
        else if (v->shape[d] > 1) order[n++] = d;
    for (int i = 1; i < n; i++) /* insertion sort by stride: at most 8 axes */
        for (int j = i; j > 0 && v->st[order[j]] < v->st[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    int64_t reach = 0; /* elements the smaller axes address, minus one */
    for (int i = 0; i < n; i++) {
        int64_t st = v->st[order[i]];
        if (st <= reach) return 0;
        reach += (v->shape[order[i]] - 1) * st; /* bounded by the tensor's extent checks */
    }
    return 1;
}

qmoe_status moe_finish_plan(const moe_plan *plan, qmoe_op **out)
{
    int nslots;
    const moe_slot *sl0 = slots_of(plan->kind, &nslots);
    for (int i = 0; i < nslots; i++) {
        /* two elements of one output in one place would be written by two threads at once */
        const moe_view *v = sl0[i].off >= 0 ? view_at((void *)(uintptr_t)plan, sl0[i].off) : NULL;
        if (v && v->data && sl0[i].role == OP_OUT && !view_injective(v))
            return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_OVERLAP, sl0[i].name,
                                 "%s: %s: its strides put two elements in one place",
                                 desc_of(plan->kind)->name, sl0[i].name);
    }
    int n;
    const moe_slot *sl = slots_of(plan->kind, &n);
    qmoe_op *op;
    qmoe_status st = op_new(desc_of(plan->kind), plan, sizeof *plan, n, &op);
    if (st) return st;
    for (int i = 0; i < n; i++) {
        op_arg *a = &op->args[i];
        a->name = sl[i].name;
        const moe_view *v = sl[i].off >= 0 ? view_at(op->plan, sl[i].off) : NULL;
        if (!v || !v->data) continue; /* absent */
        a->role = sl[i].role;
        a->bytes = view_bytes(v);
        a->empty = a->bytes == 0;
    }
    op->workspace_bytes = plan->workspace_bytes;
    op->slice_bytes = plan->slice_bytes;
    *out = op;
    qmoe_clear_error();
    return QMOE_OK;
}

qmoe_status moe_executor_new(qmoe_op *op, const qmoe_tensor *const *tensors,
                             uint64_t *workspace_size, qmoe_moe_executor **executor)
{
    void *ex;
    qmoe_status st = op_executor_new(sizeof(qmoe_moe_executor), op, tensors, workspace_size, &ex);
    if (!st) *executor = ex;
    return st;
}

qmoe_status moe_out_pointers(const char *op, uint64_t *workspace_size,
                             qmoe_moe_executor **executor)
{
    return op_out_pointers(op, workspace_size, executor);
}

qmoe_status moe_op_pointer(const char *name, qmoe_op **op)
{
    if (!op)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "op",
                             "%s: op is a null pointer", name);
    return QMOE_OK;
}

void qmoe_moe_executor_destroy(qmoe_moe_executor *executor)
{
    op_executor_free(executor ? &executor->b : NULL);
}

qmoe_status moe_execute(const char *op, int32_t kind, void *workspace, uint64_t workspace_size,
                        qmoe_moe_executor *executor, qmoe_stream *stream)
{
    if (!executor)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "executor",
                             "%s: executor is a null pointer", op);
    if (executor->b.op->desc != desc_of(kind))
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_VALUE, "executor",
                             "%s: the executor was planned for another operator", op);
    return op_executor_run(op, &executor->b, workspace, workspace_size, stream);
}

/* ---------------------------------------------------------------- the two-phase calls --------- */

qmoe_status qmoe_dynamic_quant(void *workspace, uint64_t workspace_size,
                               qmoe_moe_executor *executor, qmoe_stream *stream)
{
    return moe_execute("DynamicQuant", MOE_DYNAMIC_QUANT, workspace, workspace_size, executor,
                       stream);
}

qmoe_status qmoe_swiglu(void *workspace, uint64_t workspace_size, qmoe_moe_executor *executor,
                        qmoe_stream *stream)
{
    return moe_execute("SwiGlu", MOE_SWIGLU, workspace, workspace_size, executor, stream);
}

qmoe_status qmoe_moe_gating_top_k_softmax(void *workspace, uint64_t workspace_size,
                                          qmoe_moe_executor *executor, qmoe_stream *stream)
{
    return moe_execute("MoeGatingTopKSoftmax", MOE_GATING_SOFTMAX, workspace, workspace_size,
                       executor, stream);
}

qmoe_status qmoe_moe_gating_top_k(void *workspace, uint64_t workspace_size,
                                  qmoe_moe_executor *executor, qmoe_stream *stream)
{
    return moe_execute("MoeGatingTopK", MOE_GATING_TOPK, workspace, workspace_size, executor,
                       stream);
}

qmoe_status qmoe_moe_init_routing(void *workspace, uint64_t workspace_size,
                                  qmoe_moe_executor *executor, qmoe_stream *stream)
{
    return moe_execute("MoeInitRoutingV2", MOE_INIT_ROUTING, workspace, workspace_size, executor,
                       stream);
}

qmoe_status qmoe_moe_finalize_routing(void *workspace, uint64_t workspace_size,
                                      qmoe_moe_executor *executor, qmoe_stream *stream)
{
    return moe_execute("MoeFinalizeRoutingV2", MOE_FINALIZE, workspace, workspace_size, executor,
                       stream);
}
