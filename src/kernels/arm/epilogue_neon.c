/*
 * NEON epilogue (base aarch64), shared by the dot-product and I8MM tables: per-group fold of the
 * int32 accumulators into float, fused dequantize + SwiGLU with a vectorized exp, and the
 * per-token int8 quantization of the shared rule (kernels/quant_rule.h).
 *
 * Every float step is the x86 epilogues' step in the same order with the same rounding: separate
 * multiplies in the fold (compiled with -ffp-contract=off, so no fmla is formed from them), the
 * exp's Cody-Waite reduction and degree-7 Taylor polynomial in fused multiply-adds, 2^n as
 * 2^(n/2) * 2^(n - n/2) in the exponent bits (the first product exact, the second rounding once,
 * as vscalefps does), IEEE division, round half to even. So S and the int8 rows carry the bits
 * of the AVX2 and AVX-512 epilogues.
 */
#if defined(__aarch64__)
#include <arm_neon.h>
#include <math.h>

#include "kernels/arm/parts.h"
#include "kernels/gmm_fast.h"
#include "kernels/kernel.h"
#include "kernels/quant_rule.h"

void qmoe_fold_neon(int64_t rows, int64_t cols, const int32_t *acc, int64_t ldacc,
                    const int32_t *xoff, int64_t xoff_stride, const float *xs, const float *ws,
                    float *f, int64_t ldf, int first)
{
    for (int64_t r = 0; r < rows; r++) {
        int32x4_t o = vdupq_n_s32(xoff[r * xoff_stride]);
        float32x4_t x = vdupq_n_f32(xs ? xs[r] : 1.0f); /* times 1 is exact */
        const int32_t *ar = acc + r * ldacc;
        float *fr = f + r * ldf;
        int64_t c = 0;
        for (; c + 4 <= cols; c += 4) {
            /* acc * xScale * ws, left to right (spec) */
            float32x4_t v = vcvtq_f32_s32(vsubq_s32(vld1q_s32(ar + c), o));
            v = vmulq_f32(vmulq_f32(v, x), vld1q_f32(ws + c));
            if (!first) v = vaddq_f32(vld1q_f32(fr + c), v);
            vst1q_f32(fr + c, v);
        }
        for (; c < cols; c++) { /* the driver passes whole units; kept for any caller */
            float v = (float)(ar[c] - xoff[r * xoff_stride]);
            if (xs) v *= xs[r];
            v *= ws[c];
            fr[c] = first ? v : fr[c] + v;
        }
    }
}

static inline float32x4_t exp4(float32x4_t x)
{
    /* clamp; NaN passes (vmaxq/vminq return NaN when an operand is NaN) */
    x = vmaxq_f32(vdupq_n_f32(-104.0f), x);
    x = vminq_f32(vdupq_n_f32(89.0f), x);
    float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504088896341f)));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
    r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
    float32x4_t p = vdupq_n_f32(1.0f / 5040.0f);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 720.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 120.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 24.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 6.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    /* n in [-150, 129]: n1 = floor(n / 2) and n - n1 are both in [-75, 65] (NaN converts to 0) */
    int32x4_t ni = vcvtq_s32_f32(n), n1 = vshrq_n_s32(ni, 1), n2 = vsubq_s32(ni, n1);
    int32x4_t bias = vdupq_n_s32(127);
    float32x4_t s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n1, bias), 23));
    float32x4_t s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n2, bias), 23));
    return vmulq_f32(vmulq_f32(p, s1), s2);
}

/* clamp: the swiglu_limit clamp, lane by lane what qmoe_swiglu_clamp does (lim = limit, nlim =
 * -limit; vminq/vmaxq give NaN for a NaN v, as the scalar comparisons keep it) */
static inline __attribute__((always_inline)) float32x4_t swiglu4(
    float32x4_t f_act, float32x4_t c_act, float32x4_t f_gate, float32x4_t c_gate, float32x4_t x,
    int clamp, float32x4_t lim, float32x4_t nlim)
{
    float32x4_t a = vmulq_f32(vaddq_f32(f_act, c_act), x);
    float32x4_t g = vmulq_f32(vaddq_f32(f_gate, c_gate), x);
    if (clamp) {
        a = vminq_f32(lim, a);
        g = vmaxq_f32(nlim, vminq_f32(lim, g));
    }
    float32x4_t e = exp4(vsubq_f32(vdupq_n_f32(0.0f), a));
    return vmulq_f32(vdivq_f32(a, vaddq_f32(vdupq_n_f32(1.0f), e)), g);
}

/* `clamp` is a constant at both calls in qmoe_swiglu_neon: each copy has no test of the other. */
static inline __attribute__((always_inline)) void swiglu_rows(int64_t rows, int64_t nc,
                                                              const float *f, int64_t ldf,
                                                              int64_t gate, const float *corr,
                                                              const float *xs, float limit,
                                                              int clamp, float *s, int64_t lds)
{
    const float32x4_t lim = vdupq_n_f32(limit), nlim = vdupq_n_f32(-limit);
    for (int64_t r = 0; r < rows; r++) {
        float32x4_t x = vdupq_n_f32(xs ? xs[r] : 1.0f); /* times 1 is exact */
        const float *fr = f + r * ldf;
        float *sr = s + r * lds;
        int64_t j = 0;
        for (; j + 4 <= nc; j += 4)
            vst1q_f32(sr + j, swiglu4(vld1q_f32(fr + j), vld1q_f32(corr + j),
                                      vld1q_f32(fr + gate + j), vld1q_f32(corr + gate + j), x,
                                      clamp, lim, nlim));
        if (j < nc) {
            /* the tail through the same vector code, so a column's value never depends on
             * where a block boundary falls */
            float t[4][4] = {{0}}, out[4];
            for (int64_t i = 0; i < nc - j; i++) {
                t[0][i] = fr[j + i];
                t[1][i] = corr[j + i];
                t[2][i] = fr[gate + j + i];
                t[3][i] = corr[gate + j + i];
            }
            vst1q_f32(out, swiglu4(vld1q_f32(t[0]), vld1q_f32(t[1]), vld1q_f32(t[2]),
                                   vld1q_f32(t[3]), x, clamp, lim, nlim));
            for (int64_t i = 0; i < nc - j; i++) sr[j + i] = out[i];
        }
    }
}

void qmoe_swiglu_neon(int64_t rows, int64_t nc, const float *f, int64_t ldf, int64_t gate,
                      const float *corr, const float *xs, float limit, float *s, int64_t lds)
{
    if (limit > 0.0f) swiglu_rows(rows, nc, f, ldf, gate, corr, xs, limit, 1, s, lds);
    else swiglu_rows(rows, nc, f, ldf, gate, corr, xs, 0.0f, 0, s, lds);
}

void qmoe_quantize_row_neon(const float *s, int64_t n2, int8_t *out, int64_t out_stride,
                            float *scale)
{
    int64_t full = n2 & ~(int64_t)7;
    if (out_stride != 1 || full == 0) {
        qmoe_quantize_row_scalar(s, n2, out, out_stride, scale);
        return;
    }
    /* amax over the non-NaN |S| (vmaxnmq keeps the number when one operand is NaN) and whether
     * any S is NaN (a lane unequal to itself) */
    float32x4_t amax = vdupq_n_f32(0.0f);
    uint32x4_t nan = vdupq_n_u32(0);
    for (int64_t j = 0; j < full; j += 4) {
        float32x4_t v = vabsq_f32(vld1q_f32(s + j));
        nan = vorrq_u32(nan, vmvnq_u32(vceqq_f32(v, v)));
        amax = vmaxnmq_f32(amax, v);
    }
    float am = vmaxvq_f32(amax), sc;
    int has_nan = vmaxvq_u32(nan) != 0;
    for (int64_t j = full; j < n2; j++) qmoe_qrule_amax(s[j], &am, &has_nan);
    int quantize = qmoe_qrule_scale(am, has_nan, &sc);
    *scale = sc;
    if (!quantize) {
        for (int64_t j = 0; j < n2; j++) out[j] = 0;
        return;
    }
    /* qmoe_qrule_value lane by lane: IEEE division, round half to even, clamp, then convert
     * (exact: the values are integers in [-127, 127]) */
    const float32x4_t vsc = vdupq_n_f32(sc), hi = vdupq_n_f32(127.0f), lo = vdupq_n_f32(-127.0f);
    for (int64_t j = 0; j < full; j += 8) {
        float32x4_t q0 = vrndnq_f32(vdivq_f32(vld1q_f32(s + j), vsc));
        float32x4_t q1 = vrndnq_f32(vdivq_f32(vld1q_f32(s + j + 4), vsc));
        int32x4_t i0 = vcvtq_s32_f32(vminq_f32(vmaxq_f32(q0, lo), hi));
        int32x4_t i1 = vcvtq_s32_f32(vminq_f32(vmaxq_f32(q1, lo), hi));
        int16x8_t h = vcombine_s16(vmovn_s32(i0), vmovn_s32(i1));
        vst1_s8(out + j, vmovn_s16(h));
    }
    for (int64_t j = full; j < n2; j++) out[j] = qmoe_qrule_value(s[j], sc);
}

/* The element-wise routines of the NEON dot-product and I8MM kernels (kernel.h). */
const qmoe_eltwise_isa qmoe_eltwise_neon = {
    .name = "neon",
    .swiglu = qmoe_swiglu_neon,
    .quantize_row = qmoe_quantize_row_neon,
};
#endif
