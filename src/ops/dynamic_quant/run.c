/* DynamicQuant rows: x (times the smooth scales) -> int8 and a per-row scale by the library's one
 * quantization rule. */
#include "core/status.h"
#include "ops/eltwise/plan.h"

void moe_quant_rows(const moe_quant_plan *p, int64_t r0, int64_t r1, float *v)
{
    int nd = p->x.nd;
    int64_t xs = p->x.st[nd - 1], ys = p->y.st[nd - 1], H = p->H;
    float *sm = v + H;
    if (p->smooth.data) moe_load_row(&p->smooth, 0, p->smooth.st[0], H, sm);
    for (int64_t r = r0; r < r1; r++) {
        moe_load_row(&p->x, moe_row_offset(&p->x, r), xs, H, v);
        if (p->smooth.data)
            for (int64_t j = 0; j < H; j++) v[j] *= sm[j];
        int64_t so = 0, rem = r; /* scale has x's leading axes */
        for (int d = nd - 2; d >= 0; d--) {
            so += (rem % p->x.shape[d]) * p->scale.st[d];
            rem /= p->x.shape[d];
        }
        p->qrow(v, H, (int8_t *)p->y.data + moe_row_offset(&p->y, r), ys,
                (float *)p->scale.data + so);
    }
}
