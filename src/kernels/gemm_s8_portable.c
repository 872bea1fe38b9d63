/*
 * Portable C micro-kernels over the packed unit layout of gmm_fast.h: the int8 dot product, the
 * weight rearrangement, the per-group fold and the SwiGLU epilogue (libm expf). They serve CPUs
 * without the x86 sets and are the pieces the vector tables reuse where speed does not matter.
 */
#include <math.h>
#include <string.h>

#include "core/gmm_access.h"
#include "kernels/gmm_fast.h"
#include "kernels/peak.h"

static void gemm_portable(int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx,
                          const uint8_t *wp, int64_t wstep, int32_t *acc, int64_t ldacc,
                          int accumulate)
{
    int ncol = nu * QMOE_PK_UNIT;
    for (int r = 0; r < mr; r++) {
        int32_t sum[QMOE_PK_UNIT * QMOE_PK_BLOCK];
        for (int c = 0; c < ncol; c++) sum[c] = accumulate ? acc[r * ldacc + c] : 0;
        const int8_t *xr = x + r * ldx;
        for (int64_t q = 0; q < kq; q++) {
            const uint8_t *w = wp + q * wstep;
            int x0 = xr[4 * q], x1 = xr[4 * q + 1], x2 = xr[4 * q + 2], x3 = xr[4 * q + 3];
            for (int c = 0; c < ncol; c++) {
                const uint8_t *wc = w + (c / QMOE_PK_UNIT) * QMOE_PK_STEP + 4 * (c % QMOE_PK_UNIT);
                sum[c] += x0 * wc[0] + x1 * wc[1] + x2 * wc[2] + x3 * wc[3];
            }
        }
        for (int c = 0; c < ncol; c++) acc[r * ldacc + c] = sum[c];
    }
}

void qmoe_rearrange_portable(const uint8_t *const *src, const int64_t *stride, int64_t rows,
                             int nub, int int4, uint8_t *dst, int64_t wstep)
{
    int64_t steps = (rows + 3) / 4;
    for (int64_t q = 0; q < steps; q++) {
        uint8_t *d = dst + q * wstep;
        for (int u = 0; u < nub; u++)
            for (int t = 0; t < 4; t++) {
                int64_t r = 4 * q + t;
                const uint8_t *row = src[u] + r * stride[u];
                for (int c = 0; c < QMOE_PK_UNIT; c++) {
                    uint8_t v = 0;
                    if (r < rows)
                        v = int4 ? (uint8_t)((((c & 1) ? row[c / 2] >> 4 : row[c / 2]) & 0xF) ^ 0x8)
                                 : (uint8_t)(row[c] ^ 0x80);
                    d[u * QMOE_PK_STEP + 4 * c + t] = v;
                }
            }
    }
}

void qmoe_fold_portable(int64_t rows, int64_t cols, const int32_t *acc, int64_t ldacc,
                        const int32_t *xoff, int64_t xoff_stride, const float *xs,
                        const float *ws, float *f, int64_t ldf, int first)
{
    for (int64_t r = 0; r < rows; r++) {
        int32_t o = xoff[r * xoff_stride];
        for (int64_t c = 0; c < cols; c++) {
            float v = (float)(acc[r * ldacc + c] - o);
            if (xs) v *= xs[r]; /* acc * xScale * ws, left to right */
            v *= ws[c];
            f[r * ldf + c] = first ? v : f[r * ldf + c] + v;
        }
    }
}

/* `clamp` is a constant at both calls below, so each copy is compiled without the other's test. */
static inline void swiglu_rows(int64_t rows, int64_t nc, const float *f, int64_t ldf,
                               int64_t gate, const float *corr, const float *xs, float limit,
                               int clamp, float *s, int64_t lds)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < nc; j++) {
            float a = f[r * ldf + j] + corr[j], g = f[r * ldf + gate + j] + corr[gate + j];
            if (xs) a *= xs[r], g *= xs[r];
            if (clamp) qmoe_swiglu_clamp(limit, &a, &g); /* the reference's own clamp */
            s[r * lds + j] = a / (1.0f + expf(-a)) * g;
        }
}

void qmoe_swiglu_portable(int64_t rows, int64_t nc, const float *f, int64_t ldf, int64_t gate,
                          const float *corr, const float *xs, float limit, float *s, int64_t lds)
{
    if (limit > 0.0f) swiglu_rows(rows, nc, f, ldf, gate, corr, xs, limit, 1, s, lds);
    else swiglu_rows(rows, nc, f, ldf, gate, corr, xs, 0.0f, 0, s, lds);
}

const qmoe_gemm_isa qmoe_isa_portable = {
    .name = "portable",
    .kernel_id = QMOE_KERNEL_PORTABLE,
    .mr = 4,
    .nu = 4,
    .gemm = gemm_portable,
    .rearrange = qmoe_rearrange_portable,
    .fold = qmoe_fold_portable,
    .peak_loop = qmoe_peak_portable,
};
