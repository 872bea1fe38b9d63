/* Init routing on the device: a stable counting sort of the N*K (token, choice) pairs by expert,
 * then the expanded rows (copied, or dynamically quantized) in parallel. Workspace: the sorted
 * flat indices [N*K], the per-expert counts [L] and the number of routed pairs. */
#include <string.h>

#include "core/status.h"
#include "ops/eltwise/plan.h"

static int32_t expert_of(const moe_routing_plan *p, int64_t t)
{
    return ((const int32_t *)p->idx.data)[(t / p->K) * p->idx.st[0] + (t % p->K) * p->idx.st[1]];
}

qmoe_status moe_routing_check_data(const moe_routing_plan *p)
{
    for (int64_t t = 0; t < p->N * p->K; t++) {
        int32_t e = expert_of(p, t);
        if (e < 0 || e >= p->a.expert_num)
            return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_VALUE, "expertIdx",
                             "MoeInitRoutingV2: expertIdx[%lld][%lld] = %d is outside [0, expertNum = %lld)",
                             (long long)(t / p->K), (long long)(t % p->K), e,
                             (long long)p->a.expert_num);
    }
    return QMOE_OK;
}

void moe_routing_sort(const moe_routing_plan *p, void *workspace)
{
    int64_t NK = p->N * p->K, L = p->L, start = p->a.expert_start;
    int64_t *sorted = workspace, *count = sorted + NK;
    memset(count, 0, (size_t)(L + 1) * sizeof *count);
    for (int64_t t = 0; t < NK; t++) {
        int64_t e = expert_of(p, t) - start;
        if (e >= 0 && e < L) count[e]++;
    }
    int64_t kept = 0;
    for (int64_t e = 0; e < L; e++) {
        int64_t c = count[e];
        if (p->tokens.data)
            moe_store_index(&p->tokens, e * p->tokens.st[0],
                            p->a.tokens_mode == QMOE_MOE_TOKENS_COUNT ? c : kept + c);
        count[e] = kept; /* now the first sorted position of expert e */
        kept += c;
    }
    for (int64_t t = 0; t < NK; t++) { /* in t order: stable */
        int64_t e = expert_of(p, t) - start;
        if (e >= 0 && e < L) sorted[count[e]++] = t;
    }
    int32_t *ri = (int32_t *)p->row_idx.data;
    int64_t rs = p->row_idx.st[0];
    if (p->a.row_idx_type == 0) {
        for (int64_t t = 0; t < NK; t++) ri[t * rs] = -1; /* routed to no local expert */
        for (int64_t i = 0; i < kept; i++) ri[sorted[i] * rs] = (int32_t)i;
    } else {
        for (int64_t i = 0; i < NK; i++) ri[i * rs] = i < kept ? (int32_t)sorted[i] : -1;
    }
    count[L] = kept;
}

int64_t moe_routing_rows_written(const moe_routing_plan *p, const void *workspace)
{
    int64_t kept = ((const int64_t *)workspace)[p->N * p->K + p->L];
    return kept < p->A ? kept : p->A;
}

static void copy_row(const moe_view *src, int64_t so, const moe_view *dst, int64_t dof, int64_t H)
{
    int64_t ss = src->st[1], ds = dst->st[1];
    size_t item = src->dtype == QMOE_DTYPE_INT8 ? 1 : src->dtype == QMOE_DTYPE_FLOAT32 ? 4 : 2;
    const char *s = src->data + (size_t)so * item;
    char *d = dst->data + (size_t)dof * item;
    if (ss == 1 && ds == 1) {
        memcpy(d, s, (size_t)H * item);
        return;
    }
    for (int64_t j = 0; j < H; j++) memcpy(d + (size_t)(j * ds) * item, s + (size_t)(j * ss) * item, item);
}

/* Token n's quantized copy in the workspace (quant_once): scales, then rows. */
static float *token_scales(const moe_routing_plan *p, const void *workspace)
{
    return (float *)((char *)(uintptr_t)workspace + p->q_offset);
}

static int8_t *token_row(const moe_routing_plan *p, const void *workspace, int64_t n)
{
    return (int8_t *)((char *)(uintptr_t)workspace + p->q_offset + (uint64_t)(p->N + 1) / 2 * 8) +
           n * p->H;
}

/* v = x[n] (times the smooth row of expert e when given); scratch holds 2H floats. */
static void load_token(const moe_routing_plan *p, int64_t n, int64_t srow, float *v)
{
    moe_load_row(&p->x, n * p->x.st[0], p->x.st[1], p->H, v);
    if (!p->scale.data) return;
    const float *sm = (const float *)p->scale.data + srow * p->scale.st[0];
    int64_t ss = p->scale.st[1];
    for (int64_t j = 0; j < p->H; j++) v[j] *= sm[j * ss];
}

void moe_routing_quant_tokens(const moe_routing_plan *p, void *workspace, int64_t n0, int64_t n1,
                              float *v)
{
    float *scales = token_scales(p, workspace);
    for (int64_t n = n0; n < n1; n++) {
        load_token(p, n, 0, v);
        p->qrow(v, p->H, token_row(p, workspace, n), 1, &scales[n]);
    }
}

void moe_routing_quant_scatter(const moe_routing_plan *p, void *workspace, int64_t n0, int64_t n1, float *v)
{
    float *scales = token_scales(p, workspace);
    const int32_t *ri = (const int32_t *)p->row_idx.data;
    int64_t rs = p->row_idx.st[0], rows = moe_routing_rows_written(p, workspace), xs = p->ex.st[1];
    for (int64_t n = n0; n < n1; n++) {
        int8_t *q = token_row(p, workspace, n);
        load_token(p, n, 0, v);
        p->qrow(v, p->H, q, 1, &scales[n]);
        for (int64_t j = 0; j < p->K; j++) {
            int64_t i = ri[(n * p->K + j) * rs]; /* the expanded row of (n, j), -1: none */
            if (i < 0 || i >= rows) continue;
            int8_t *d = (int8_t *)p->ex.data + i * p->ex.st[0];
            if (xs == 1) memcpy(d, q, (size_t)p->H);
            else
                for (int64_t h = 0; h < p->H; h++) d[h * xs] = q[h];
            ((float *)p->escale.data)[i * p->escale.st[0]] = scales[n];
        }
    }
}

void moe_routing_rows(const moe_routing_plan *p, const void *workspace, int64_t r0, int64_t r1,
                      float *v)
{
    const int64_t *sorted = workspace;
    int dynamic = p->a.quant_mode == QMOE_MOE_QUANT_DYNAMIC;
    for (int64_t i = r0; i < r1; i++) {
        int64_t t = sorted[i], n = t / p->K;
        int64_t xo = n * p->x.st[0], eo = i * p->ex.st[0];
        float *es = p->escale.data ? (float *)p->escale.data + i * p->escale.st[0] : NULL;
        if (!dynamic) {
            copy_row(&p->x, xo, &p->ex, eo, p->H);
            if (es) *es = ((const float *)p->scale.data)[n * p->scale.st[0]];
        } else if (p->quant_once) {
            const int8_t *q = token_row(p, workspace, n);
            int8_t *d = (int8_t *)p->ex.data + eo;
            if (p->ex.st[1] == 1) memcpy(d, q, (size_t)p->H);
            else
                for (int64_t j = 0; j < p->H; j++) d[j * p->ex.st[1]] = q[j];
            *es = token_scales(p, workspace)[n];
        } else {
            load_token(p, n, expert_of(p, t) - p->a.expert_start, v);
            p->qrow(v, p->H, (int8_t *)p->ex.data + eo, p->ex.st[1], es);
        }
    }
}
