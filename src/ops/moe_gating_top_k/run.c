/* Gating rows: softmax top-k (MoeGatingTopKSoftmax) and the DeepSeek-style normalise, bias, group
 * select, top-k and renormalise (MoeGatingTopK). Ties go to the lower expert (or group) index;
 * NaN ranks below every number. */
#include <math.h>

#include "core/status.h"
#include "ops/eltwise/plan.h"

/* new (seen after old, so with a higher index) beats old only when strictly greater */
static int beats(float v, float old) { return v > old || (isnan(old) && !isnan(v)); }

/* The k best of v[0..n) whose mask entry is nonzero (mask NULL: all), best first, into ids. */
static int64_t top_k(const float *v, int64_t n, const unsigned char *mask, int64_t k, int32_t *ids)
{
    int64_t cnt = 0;
    if (k <= 0) return 0;
    for (int64_t e = 0; e < n; e++) {
        if (mask && !mask[e]) continue;
        if (cnt == k && !beats(v[e], v[ids[cnt - 1]])) continue;
        int64_t p = cnt < k ? cnt : k - 1;
        while (p > 0 && beats(v[e], v[ids[p - 1]])) {
            ids[p] = ids[p - 1];
            p--;
        }
        ids[p] = (int32_t)e;
        if (cnt < k) cnt++;
    }
    return cnt;
}

/* softmax of v[0..n) in place (float32, max subtracted first) */
static void softmax(float *v, int64_t n)
{
    float m = -INFINITY;
    for (int64_t e = 0; e < n; e++)
        if (v[e] > m) m = v[e];
    float s = 0.0f;
    for (int64_t e = 0; e < n; e++) {
        v[e] = expf(v[e] - m);
        s += v[e];
    }
    for (int64_t e = 0; e < n; e++) v[e] /= s;
}

static int64_t lead_offset(const moe_view *v, int64_t row) { return moe_row_offset(v, row); }

void moe_gating_softmax_rows(const moe_gating_plan *p, int64_t r0, int64_t r1, void *scratch)
{
    float *v = scratch;
    int32_t *ids = (int32_t *)(v + p->E);
    int nd = p->x.nd;
    int64_t E = p->E, k = p->k;
    for (int64_t r = r0; r < r1; r++) {
        int64_t xo = lead_offset(&p->x, r);
        for (int64_t e = 0; e < E; e++) v[e] = moe_load(&p->x, xo + e * p->x.st[nd - 1]);
        /* exp is increasing, so the logits order the experts exactly as the softmax does */
        top_k(v, E, NULL, k, ids);
        softmax(v, E);
        int finished = 0;
        if (p->finished.data) {
            int64_t fo = 0, rem = r;
            for (int d = nd - 2; d >= 0; d--) {
                fo += (rem % p->x.shape[d]) * p->finished.st[d];
                rem /= p->x.shape[d];
            }
            finished = ((const int8_t *)p->finished.data)[fo] != 0;
        }
        int64_t yo = lead_offset(&p->y, r), io = lead_offset(&p->idx, r),
                ro = lead_offset(&p->row_idx, r);
        for (int64_t j = 0; j < k; j++) {
            moe_store(&p->y, yo + j * p->y.st[nd - 1], v[ids[j]]);
            ((int32_t *)p->idx.data)[io + j * p->idx.st[nd - 1]] = finished ? (int32_t)E : ids[j];
            ((int32_t *)p->row_idx.data)[ro + j * p->row_idx.st[nd - 1]] =
                (int32_t)(j * p->rows + r);
        }
    }
}

void moe_gating_topk_rows(const moe_gating_plan *p, int64_t r0, int64_t r1, void *scratch)
{
    const qmoe_moe_gating_attrs *a = &p->a;
    int64_t E = p->E, k = p->k, G = a->group_count, per = E / G;
    float *norm = scratch, *val = norm + E, *gscore = val + E;
    unsigned char *mask = (unsigned char *)(gscore + G);
    int32_t *ids = (int32_t *)(mask + ((G + 3) / 4 * 4)), *gids = ids; /* groups chosen first */
    float eps = (float)a->eps, factor = (float)a->routed_scaling_factor;
    for (int64_t r = r0; r < r1; r++) {
        for (int64_t e = 0; e < E; e++) norm[e] = moe_load(&p->x, r * p->x.st[0] + e * p->x.st[1]);
        if (a->norm_type == 0) softmax(norm, E);
        else
            for (int64_t e = 0; e < E; e++) norm[e] = 1.0f / (1.0f + expf(-norm[e]));
        for (int64_t e = 0; e < E; e++)
            val[e] = p->bias.data ? norm[e] + moe_load(&p->bias, e * p->bias.st[0]) : norm[e];
        const unsigned char *emask = NULL;
        if (G > 1) {
            for (int64_t g = 0; g < G; g++) {
                int32_t best[2];
                int64_t n = top_k(val + g * per, per, NULL, a->group_select_mode ? 2 : 1, best);
                gscore[g] = val[g * per + best[0]];
                if (a->group_select_mode && n == 2) gscore[g] += val[g * per + best[1]];
            }
            int64_t kg = top_k(gscore, G, NULL, a->k_group, gids);
            for (int64_t g = 0; g < G; g++) mask[g] = 0;
            for (int64_t i = 0; i < kg; i++) mask[gids[i]] = 1;
            emask = mask; /* one flag per group, tested per expert below */
        }
        int64_t cnt = 0;
        for (int64_t e = 0; e < E; e++) { /* top-k over the kept groups' experts */
            if (emask && !emask[e / per]) continue;
            if (cnt == k && !beats(val[e], val[ids[cnt - 1]])) continue;
            int64_t q = cnt < k ? cnt : k - 1;
            while (q > 0 && beats(val[e], val[ids[q - 1]])) {
                ids[q] = ids[q - 1];
                q--;
            }
            ids[q] = (int32_t)e;
            if (cnt < k) cnt++;
        }
        float s = 0.0f;
        for (int64_t j = 0; j < k; j++) s += norm[ids[j]];
        for (int64_t j = 0; j < k; j++) {
            float yj = norm[ids[j]] / (s + eps) * factor;
            moe_store(&p->y, r * p->y.st[0] + j * p->y.st[1], yj);
            ((int32_t *)p->idx.data)[r * p->idx.st[0] + j * p->idx.st[1]] = ids[j];
        }
        if (p->out.data)
            for (int64_t e = 0; e < E; e++)
                ((float *)p->out.data)[r * p->out.st[0] + e * p->out.st[1]] = norm[e];
    }
}
