/*
 * What the planners learn from prepacked weights (qmoe/weights.h) passed as a weight: the object
 * is checked to be this library's, for this CPU and this operator, and read into the plan. Apart
 * from weights.c (which makes the objects and plans their sources with the planners), so the
 * planners and the maker do not call each other.
 */
#include "core/gmm_params.h"
#include "core/prepack.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/cpu_features.h"

#define INVALID(rule, arg, ...) qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_##rule, arg, __VA_ARGS__)

/* Its address identifies the loaded copy of the library that made an object: a second copy
 * (another build loaded in the same process) refuses objects of the first. */
const char qmoe_pp_build_tag = 1;

/* Every feature the kernels test, on every architecture (kernels/isa_list.h and the helpers). */
uint32_t qmoe_pp_cpu_bits(void) { return qmoe_cpu_features_word(); }

/* ---------------------------------------------------------------- phase one ---------------- */

qmoe_status qmoe_pp_plan_weight(const struct qmoe_weights *pp, qmoe_gmm_params *p, int64_t *Kw)
{
    if (pp->magic != QMOE_PP_MAGIC || pp->version != QMOE_PP_VERSION || pp->build != &qmoe_pp_build_tag)
        return INVALID(UNSUPPORTED, "weight",
                       "weight: prepacked weights of another qmoe build or layout version "
                       "(or a destroyed object); prepack them again with this library");
    if (pp->filled != pp->E)
        return INVALID(UNSUPPORTED, "weight", "weight: %lld of the prepacked object's %lld experts "
                       "are packed; qmoe_weights_append the rest first", (long long)pp->filled,
                       (long long)pp->E);
    if (pp->op != QMOE_PP_OP_SWIGLU)
        return INVALID(UNSUPPORTED, "weight", "weight: prepacked for another operator (%u)", pp->op);
    if (pp->cpu != qmoe_pp_cpu_bits())
        return INVALID(UNSUPPORTED, "weight",
                       "weight: prepacked on a CPU with other features (0x%x, this one 0x%x)",
                       pp->cpu, qmoe_pp_cpu_bits());
    p->mode = pp->mode;
    p->E = pp->E;
    p->N = pp->N;
    p->w = pp->w;
    p->w_layout = pp->src_layout;
    p->pp = pp;
    *Kw = pp->K;
    return QMOE_OK;
}

qmoe_status qmoe_pp_plan_scale(const struct qmoe_weights *pp, int ws_dtype, qmoe_gmm_params *p)
{
    /* ws_dtype < 0: no weightScale given; otherwise phase one checked its shape against E, N */
    if (ws_dtype >= 0) {
        if (ws_dtype != pp->ws_dtype)
            return INVALID(DTYPE, "weightScale",
                           "weightScale: dtype %s, the prepacked weights were made from %s",
                           qmoe_dtype_name((qmoe_dtype)ws_dtype),
                           qmoe_dtype_name((qmoe_dtype)pp->ws_dtype));
        if (p->per_group != pp->per_group || p->G != pp->G)
            return INVALID(SHAPE, "weightScale", "weightScale: %lld groups, the prepacked weights have %lld",
                           (long long)p->G, (long long)pp->G);
    }
    p->per_group = pp->per_group;
    p->G = pp->G;
    p->group_k = pp->gk;
    p->ws = pp->ws;
    p->ws_type = pp->ws_kind;
    p->ws_s[0] = p->ws_s[1] = p->ws_s[2] = 0; /* the driver reads pp's scales */
    return QMOE_OK;
}
