/* SwiGLU rows: out = silu(A) * B, A and B the halves of x along the planned axis, in float32 with
 * the same expression as the fused operator's epilogue. */
#include <math.h>
#include <string.h>

#include "core/status.h"
#include "ops/eltwise/plan.h"

void moe_swiglu_rows(const moe_swiglu_plan *p, int64_t r0, int64_t r1, float *scratch)
{
    int nd = p->x.nd, last = nd - 1;
    int64_t n = p->out.shape[last];
    int64_t bshift = p->half * p->x.st[p->dim]; /* from an A element to its B partner */
    int vector = p->dim == last;
    float *f = scratch, *zero = f + 2 * n, *s = zero + 2 * n; /* 5n floats */
    if (vector) memset(zero, 0, (size_t)(2 * n) * sizeof *zero);
    for (int64_t r = r0; r < r1; r++) {
        int64_t xo = 0, oo = 0, rem = r;
        for (int d = last - 1; d >= 0; d--) {
            int64_t i = rem % p->out.shape[d];
            rem /= p->out.shape[d];
            xo += i * p->x.st[d];
            oo += i * p->out.st[d];
        }
        if (vector) { /* the row's halves are A then B: the kernels' SwiGLU over float rows */
            moe_load_row(&p->x, xo, p->x.st[last], 2 * n, f);
            p->sw(1, n, f, 2 * n, n, zero, NULL, 0.0f, s, n); /* no clamp */
            moe_store_row(&p->out, oo, p->out.st[last], n, s);
            continue;
        }
        for (int64_t j = 0; j < n; j++) {
            int64_t a_off = xo + j * p->x.st[last];
            float a = moe_load(&p->x, a_off), b = moe_load(&p->x, a_off + bshift);
            float swish = a / (1.0f + expf(-a));
            moe_store(&p->out, oo + j * p->out.st[last], swish * b);
        }
    }
}
