/* Finalize routing rows: each token's K expert rows, weighted and summed in float32 in choice
 * order after the skip inputs, rounded once to the output dtype. */
#include <string.h>

#include "core/status.h"
#include "ops/eltwise/plan.h"

static int64_t row_of(const moe_finalize_plan *p, int64_t i, int64_t j)
{
    int64_t f = p->mode == 0 ? j * p->N + i : i * p->K + j;
    return ((const int32_t *)p->row_idx.data)[f * p->row_idx.st[0]];
}

static int32_t expert_of(const moe_finalize_plan *p, int64_t i, int64_t j)
{
    return ((const int32_t *)p->idx.data)[i * p->idx.st[0] + j * p->idx.st[1]];
}

qmoe_status moe_finalize_check_data(const moe_finalize_plan *p)
{
    for (int64_t i = 0; i < p->N; i++)
        for (int64_t j = 0; j < p->K; j++) {
            int64_t r = row_of(p, i, j);
            if (r < -1 || r >= p->A)
                return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_VALUE, "expandedRowIdx",
                                 "MoeFinalizeRoutingV2: expandedRowIdx for token %lld, choice %lld is "
                                 "%lld; expected -1 or a row of expandedX [0, %lld)",
                                 (long long)i, (long long)j, (long long)r, (long long)p->A);
            if (p->bias.data && r >= 0) {
                int32_t e = expert_of(p, i, j);
                if (e < 0 || e >= p->E)
                    return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_VALUE, "expertIdx",
                                     "MoeFinalizeRoutingV2: expertIdx[%lld][%lld] = %d is not a row of "
                                     "bias [0, %lld)", (long long)i, (long long)j, e, (long long)p->E);
            }
        }
    return QMOE_OK;
}

/* The common case (no bias, contiguous float32 or bf16 rows) in chunks of up to 32 rows, summed by
 * the plan's row sum (kernels/rows_sum.h: the same bits on every CPU). */
static void token_rows(const moe_finalize_plan *p, int64_t i, float *acc)
{
    enum { CHUNK = 32 };
    const char *rows[CHUNK];
    float w[CHUNK];
    int n = 0, bf16 = p->ex.dtype == QMOE_DTYPE_BFLOAT16;
    size_t item = bf16 ? 2 : 4;
    for (int64_t j = 0; j < p->K; j++) {
        int64_t r = row_of(p, i, j);
        if (r < 0) continue; /* routed to no local expert */
        w[n] = p->scales.data ? moe_load(&p->scales, i * p->scales.st[0] + j * p->scales.st[1]) : 1.0f;
        rows[n++] = p->ex.data + (size_t)(r * p->ex.st[0]) * item;
        if (n == CHUNK) p->rows_sum(acc, p->H, rows, w, n, bf16), n = 0;
    }
    if (n) p->rows_sum(acc, p->H, rows, w, n, bf16);
}

void moe_finalize_rows(const moe_finalize_plan *p, int64_t r0, int64_t r1, float *acc)
{
    int64_t H = p->H;
    float *row = acc + H, *brow = row + H; /* scratch: 3H floats */
    for (int64_t i = r0; i < r1; i++) {
        if (p->x1.data) moe_load_row(&p->x1, i * p->x1.st[0], p->x1.st[1], H, acc);
        else memset(acc, 0, (size_t)H * sizeof *acc);
        if (p->x2.data) {
            moe_load_row(&p->x2, i * p->x2.st[0], p->x2.st[1], H, row);
            for (int64_t h = 0; h < H; h++) acc[h] += row[h];
        }
        if (!p->bias.data && p->ex.st[1] == 1 &&
            (p->ex.dtype == QMOE_DTYPE_BFLOAT16 || p->ex.dtype == QMOE_DTYPE_FLOAT32)) {
            token_rows(p, i, acc);
            if (p->out.dtype == QMOE_DTYPE_BFLOAT16 && p->out.st[1] == 1)
                p->bf16_store((uint16_t *)(void *)p->out.data + i * p->out.st[0], acc, H);
            else moe_store_row(&p->out, i * p->out.st[0], p->out.st[1], H, acc);
            continue;
        }
        for (int64_t j = 0; j < p->K; j++) {
            int64_t r = row_of(p, i, j);
            if (r < 0) continue; /* routed to no local expert */
            float w = p->scales.data
                          ? moe_load(&p->scales, i * p->scales.st[0] + j * p->scales.st[1])
                          : 1.0f;
            moe_load_row(&p->ex, r * p->ex.st[0], p->ex.st[1], H, row);
            if (p->bias.data) {
                moe_load_row(&p->bias, expert_of(p, i, j) * p->bias.st[0], p->bias.st[1], H, brow);
                for (int64_t h = 0; h < H; h++) acc[h] += w * (row[h] + brow[h]);
            } else {
                for (int64_t h = 0; h < H; h++) acc[h] += w * row[h];
            }
        }
        moe_store_row(&p->out, i * p->out.st[0], p->out.st[1], H, acc);
    }
}
