/* The routing weights the gating operators cannot give, set after them on the same stream: the
 * top-k weights read from the scores without renormalisation (renormalize 0 with sigmoid gating,
 * a selection bias or a scaling factor), and the gated shared expert's weight per token. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "core/halfconv.h"
#include "core/status.h"
#include "core/tensor.h"
#include "layer/internal.h"
#include "ops/op.h"

int moe_layer_gate_path(const qmoe_moe_layer_config *c)
{
    if (c->renormalize) return MOE_GATE_TOPK;
    if (c->gating == QMOE_MOE_GATING_SOFTMAX && !c->correction_bias && c->routed_scaling_factor == 1.0)
        return MOE_GATE_SOFTMAX;
    return MOE_GATE_RAW;
}

static float load(const void *p, qmoe_dtype d, int64_t i)
{
    if (d == QMOE_DTYPE_FLOAT32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return d == QMOE_DTYPE_FLOAT16 ? qmoe_f16_to_f32(h) : qmoe_bf16_to_f32(h);
}

static void store(void *p, qmoe_dtype d, int64_t i, float v)
{
    if (d == QMOE_DTYPE_FLOAT32) ((float *)p)[i] = v;
    else ((uint16_t *)p)[i] = d == QMOE_DTYPE_FLOAT16 ? qmoe_f32_to_f16(v) : qmoe_f32_to_bf16(v);
}

void moe_layer_raw_weights(const float *norm, int64_t T, int64_t E, int64_t K, double rsf, const int32_t *ids,
                           int64_t i0, int64_t i1, void *y, qmoe_dtype yd, int64_t y0, int64_t y1)
{
    float f = (float)rsf;
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < K; j++) {
            int32_t e = ids[t * i0 + j * i1];
            /* ids come from the gating just before: always in [0, E) */
            store(y, yd, t * y0 + j * y1, e >= 0 && e < E ? norm[t * E + e] * f : 0.0f);
        }
}

float moe_layer_shared_weight(const void *hidden, qmoe_dtype hd, int64_t s1, int64_t H, const float *g)
{
    float s = 0.0f;
    for (int64_t h = 0; h < H; h++) s = s + load(hidden, hd, h * s1) * g[h];
    return 1.0f / (1.0f + expf(-s));
}

/* ---------------------------------------------------------------- the operator ---------------- */

enum { A_NORM, A_IDS, A_HIDDEN, A_Y, A_COUNT };

typedef struct weights_plan {
    int64_t T, E, K, K2, H, m, hs0, hs1;
    int32_t yd, hd, raw;
    double rsf;
    const float *sgate; /* the layer's [H] float32 copy, or NULL */
    const float *norm;
    const int32_t *ids;
    const void *hidden;
    void *y;
} weights_plan;

static void weights_bind(void *plan, const qmoe_op *op, void *const *args, void *workspace)
{
    (void)op, (void)workspace;
    weights_plan *p = plan;
    p->norm = args[A_NORM], p->ids = args[A_IDS], p->hidden = args[A_HIDDEN], p->y = args[A_Y];
}

static qmoe_status weights_run(const void *plan, void *workspace, qmoe_device *dev, int index, int count)
{
    (void)workspace, (void)dev, (void)count;
    const weights_plan *p = plan;
    if (index) return QMOE_OK; /* a few values per token: one device does them */
    if (p->raw) moe_layer_raw_weights(p->norm, p->T, p->E, p->K, p->rsf, p->ids, p->K2, 1, p->y, p->yd, p->K2, 1);
    if (p->sgate) {
        size_t item = p->hd == QMOE_DTYPE_FLOAT32 ? 4 : 2;
        for (int64_t t = 0; t < p->T; t++) {
            const char *x = (const char *)p->hidden + (ptrdiff_t)(t * p->hs0) * (ptrdiff_t)item;
            float w = moe_layer_shared_weight(x, p->hd, p->hs1, p->H, p->sgate);
            for (int64_t k = 0; k < p->m; k++) store(p->y, p->yd, t * p->K2 + p->K + k, w);
        }
    }
    return QMOE_OK;
}

static const op_desc weights_desc = {(qmoe_op_type)0, MOE_LAYER_OP "Weights", weights_bind, NULL, weights_run};

qmoe_status moe_layer_weights_op(const qmoe_moe_layer *L, const qmoe_tensor *norm, const qmoe_tensor *ids,
                                 const qmoe_tensor *hidden, const qmoe_tensor *y, qmoe_op **op)
{
    const qmoe_moe_layer_config *c = &L->cfg;
    *op = NULL;
    int raw = norm != NULL;
    if (!raw && !L->sgate) return QMOE_OK;
    weights_plan p;
    memset(&p, 0, sizeof p);
    p.T = qmoe_tensor_dim(hidden, 0), p.E = c->num_experts, p.K = c->top_k, p.m = c->shared_intermediate_size / c->intermediate_size;
    p.K2 = p.K + p.m, p.H = c->hidden_size;
    p.hs0 = qmoe_tensor_stride(hidden, 0), p.hs1 = qmoe_tensor_stride(hidden, 1);
    p.yd = (int32_t)qmoe_tensor_dtype(y), p.hd = (int32_t)qmoe_tensor_dtype(hidden), p.raw = raw;
    p.rsf = c->routed_scaling_factor, p.sgate = L->sgate;
    qmoe_status st = op_new(&weights_desc, &p, sizeof p, A_COUNT, op);
    if (st) return st;
    op_arg_set(*op, A_NORM, "scores", norm, OP_IN);
    op_arg_set(*op, A_IDS, "expertIdx", raw ? ids : NULL, OP_IN);
    op_arg_set(*op, A_HIDDEN, "hidden", L->sgate ? hidden : NULL, OP_IN);
    op_arg_set(*op, A_Y, "weights", y, OP_OUT);
    return QMOE_OK;
}
