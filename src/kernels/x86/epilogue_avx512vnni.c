/*
 * AVX-512 epilogue: the per-group fold of int32 accumulators into float, the fused dequantize +
 * SwiGLU with a vectorized exp, and the per-token int8 quantization.
 *
 * exp: x = n ln2 + r with n = round(x / ln2) and a two-part ln2 (Cody-Waite), e^r by its degree-7
 * Taylor polynomial (|r| <= ln2/2: truncation 5e-9), then vscalefps by 2^n, which also gives inf
 * and 0 for out-of-range x. Error about 1 ulp against libm's expf, far inside the spec's
 * tolerance on the quantized output. Quantization divides and rounds half-to-even exactly as the
 * reference does.
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <math.h>

#include "kernels/gmm_fast.h"
#include "kernels/kernel.h"
#include "kernels/quant_rule.h"
#include "kernels/x86/parts.h"

void qmoe_fold_avx512(int64_t rows, int64_t cols, const int32_t *acc, int64_t ldacc,
                      const int32_t *xoff, int64_t xoff_stride, const float *xs, const float *ws,
                      float *f, int64_t ldf, int first)
{
    for (int64_t r = 0; r < rows; r++) {
        __m512i o = _mm512_set1_epi32(xoff[r * xoff_stride]);
        __m512 x = _mm512_set1_ps(xs ? xs[r] : 1.0f); /* times 1 is exact */
        for (int64_t c = 0; c < cols; c += 16) {
            __m512i a = _mm512_sub_epi32(_mm512_loadu_si512(acc + r * ldacc + c), o);
            /* acc * xScale * ws, left to right (spec) */
            __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(a), x),
                                     _mm512_loadu_ps(ws + c));
            if (!first) v = _mm512_add_ps(_mm512_loadu_ps(f + r * ldf + c), v);
            _mm512_storeu_ps(f + r * ldf + c, v);
        }
    }
}

static inline __m512 exp512(__m512 x)
{
    /* clamp (NaN passes: max/min return their second operand when one is NaN) */
    x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
    x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* `clamp` is a constant at both calls in qmoe_swiglu_avx512: each copy has no test of the other.
 * The clamp is qmoe_swiglu_clamp lane by lane: min_ps(lim, v) is (lim < v ? lim : v) and
 * max_ps(-lim, v) is (-lim > v ? -lim : v), so a NaN v passes through, as in the scalar code. */
static inline __attribute__((always_inline)) void swiglu_rows(int64_t rows, int64_t nc,
                                                              const float *f, int64_t ldf,
                                                              int64_t gate, const float *corr,
                                                              const float *xs, float limit,
                                                              int clamp, float *s, int64_t lds)
{
    const __m512 one = _mm512_set1_ps(1.0f), lim = _mm512_set1_ps(limit),
                 nlim = _mm512_set1_ps(-limit);
    for (int64_t r = 0; r < rows; r++) {
        __m512 x = _mm512_set1_ps(xs ? xs[r] : 1.0f); /* times 1 is exact */
        const float *fr = f + r * ldf;
        for (int64_t j = 0; j < nc; j += 16) {
            __mmask16 m = nc - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (nc - j)) - 1);
            __m512 a = _mm512_mul_ps(_mm512_add_ps(_mm512_loadu_ps(fr + j), _mm512_loadu_ps(corr + j)), x);
            __m512 g = _mm512_mul_ps(
                _mm512_add_ps(_mm512_loadu_ps(fr + gate + j), _mm512_loadu_ps(corr + gate + j)), x);
            if (clamp) {
                a = _mm512_min_ps(lim, a);
                g = _mm512_max_ps(nlim, _mm512_min_ps(lim, g));
            }
            __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), a));
            __m512 v = _mm512_mul_ps(_mm512_div_ps(a, _mm512_add_ps(one, e)), g);
            _mm512_mask_storeu_ps(s + r * lds + j, m, v);
        }
    }
}

void qmoe_swiglu_avx512(int64_t rows, int64_t nc, const float *f, int64_t ldf, int64_t gate,
                        const float *corr, const float *xs, float limit, float *s, int64_t lds)
{
    if (limit > 0.0f) swiglu_rows(rows, nc, f, ldf, gate, corr, xs, limit, 1, s, lds);
    else swiglu_rows(rows, nc, f, ldf, gate, corr, xs, 0.0f, 0, s, lds);
}

void qmoe_quantize_row_avx512(const float *s, int64_t n2, int8_t *out, int64_t out_stride,
                              float *scale)
{
    if (out_stride != 1) {
        qmoe_quantize_row_scalar(s, n2, out, out_stride, scale);
        return;
    }
    __m512 amax = _mm512_setzero_ps();
    __mmask16 nan = 0;
    for (int64_t j = 0; j < n2; j += 16) {
        __mmask16 m = n2 - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n2 - j)) - 1);
        __m512 v = _mm512_abs_ps(_mm512_maskz_loadu_ps(m, s + j));
        nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        amax = _mm512_max_ps(v, amax); /* a NaN v keeps amax */
    }
    float am = _mm512_reduce_max_ps(amax), sc;
    int quantize = qmoe_qrule_scale(am, nan != 0, &sc);
    *scale = sc;
    if (!quantize) {
        for (int64_t j = 0; j < n2; j++) out[j] = 0;
        return;
    }
    const __m512 vsc = _mm512_set1_ps(sc), lim = _mm512_set1_ps(127.0f);
    for (int64_t j = 0; j < n2; j += 16) {
        __mmask16 m = n2 - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n2 - j)) - 1);
        __m512 q = _mm512_div_ps(_mm512_maskz_loadu_ps(m, s + j), vsc);
        q = _mm512_roundscale_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q = _mm512_min_ps(_mm512_max_ps(q, _mm512_sub_ps(_mm512_setzero_ps(), lim)), lim);
        _mm512_mask_cvtsepi32_storeu_epi8(out + j, m, _mm512_cvtps_epi32(q));
    }
}

/* The element-wise routines of the AVX-512 VNNI and AMX kernels (kernel.h). */
const qmoe_eltwise_isa qmoe_eltwise_avx512 = {
    .name = "avx512",
    .swiglu = qmoe_swiglu_avx512,
    .quantize_row = qmoe_quantize_row_avx512,
};
#endif
