/*
 * 256-bit epilogue (AVX2 + FMA), shared by the AVX2 and AVX-VNNI tables: per-group fold, fused
 * dequantize + SwiGLU with a vectorized exp, per-token int8 quantization.
 *
 * exp as in the AVX-512 epilogue (Cody-Waite reduction, degree-7 Taylor polynomial, the same
 * clamp to [-104, 89]), with 2^n built in the exponent bits as 2^(n/2) * 2^(n - n/2), both halves
 * normal floats: the first product is exact and the second rounds once, to a subnormal, 0 or inf
 * where e^x is out of range, so the result has the bits of the AVX-512 exp (vscalefps) for every
 * x. A row whose activated half is all very negative then gives S = -0 (the zero row) in every
 * kernel, not a tiny scale of its own here.
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <math.h>

#include "kernels/gmm_fast.h"
#include "kernels/kernel.h"
#include "kernels/quant_rule.h"
#include "kernels/x86/parts.h"

void qmoe_fold_avx2(int64_t rows, int64_t cols, const int32_t *acc, int64_t ldacc,
                    const int32_t *xoff, int64_t xoff_stride, const float *xs, const float *ws,
                    float *f, int64_t ldf, int first)
{
    for (int64_t r = 0; r < rows; r++) {
        __m256i o = _mm256_set1_epi32(xoff[r * xoff_stride]);
        __m256 x = _mm256_set1_ps(xs ? xs[r] : 1.0f); /* times 1 is exact */
        for (int64_t c = 0; c < cols; c += 8) {
            __m256i a = _mm256_sub_epi32(
                _mm256_loadu_si256((const __m256i *)(acc + r * ldacc + c)), o);
            /* acc * xScale * ws, left to right (spec) */
            __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(a), x),
                                     _mm256_loadu_ps(ws + c));
            if (!first) v = _mm256_add_ps(_mm256_loadu_ps(f + r * ldf + c), v);
            _mm256_storeu_ps(f + r * ldf + c, v);
        }
    }
}

static inline __m256 exp256(__m256 x)
{
    x = _mm256_max_ps(_mm256_set1_ps(-104.0f), x); /* NaN passes (second operand) */
    x = _mm256_min_ps(_mm256_set1_ps(89.0f), x);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* n in [-150, 129]: n1 = floor(n / 2) and n - n1 are both in [-75, 65] */
    __m256i ni = _mm256_cvtps_epi32(n), n1 = _mm256_srai_epi32(ni, 1);
    __m256i n2 = _mm256_sub_epi32(ni, n1), bias = _mm256_set1_epi32(127);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

/* clamp: the swiglu_limit clamp with lim = limit and nlim = -limit, lane by lane what
 * qmoe_swiglu_clamp does: min_ps(lim, v) is (lim < v ? lim : v) and max_ps(nlim, v) is
 * (nlim > v ? nlim : v), so a NaN v passes through both, as in the scalar comparisons. */
static inline __attribute__((always_inline)) __m256 swiglu8(__m256 f_act, __m256 c_act,
                                                            __m256 f_gate, __m256 c_gate, __m256 x,
                                                            int clamp, __m256 lim, __m256 nlim)
{
    __m256 a = _mm256_mul_ps(_mm256_add_ps(f_act, c_act), x);
    __m256 g = _mm256_mul_ps(_mm256_add_ps(f_gate, c_gate), x);
    if (clamp) {
        a = _mm256_min_ps(lim, a);
        g = _mm256_max_ps(nlim, _mm256_min_ps(lim, g));
    }
    __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), a));
    return _mm256_mul_ps(_mm256_div_ps(a, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), g);
}

/* `clamp` is a constant at both calls in qmoe_swiglu_avx2: each copy has no test of the other. */
static inline __attribute__((always_inline)) void swiglu_rows(int64_t rows, int64_t nc,
                                                              const float *f, int64_t ldf,
                                                              int64_t gate, const float *corr,
                                                              const float *xs, float limit,
                                                              int clamp, float *s, int64_t lds)
{
    const __m256 lim = _mm256_set1_ps(limit), nlim = _mm256_set1_ps(-limit);
    for (int64_t r = 0; r < rows; r++) {
        __m256 x = _mm256_set1_ps(xs ? xs[r] : 1.0f); /* times 1 is exact */
        const float *fr = f + r * ldf;
        float *sr = s + r * lds;
        int64_t j = 0;
        for (; j + 8 <= nc; j += 8)
            _mm256_storeu_ps(sr + j, swiglu8(_mm256_loadu_ps(fr + j), _mm256_loadu_ps(corr + j),
                                             _mm256_loadu_ps(fr + gate + j),
                                             _mm256_loadu_ps(corr + gate + j), x, clamp, lim,
                                             nlim));
        if (j < nc) {
            /* the tail through the same vector code, so a column's value never depends on
             * where a block boundary falls */
            float t[4][8] = {{0}}, out[8];
            for (int64_t i = 0; i < nc - j; i++) {
                t[0][i] = fr[j + i];
                t[1][i] = corr[j + i];
                t[2][i] = fr[gate + j + i];
                t[3][i] = corr[gate + j + i];
            }
            _mm256_storeu_ps(out, swiglu8(_mm256_loadu_ps(t[0]), _mm256_loadu_ps(t[1]),
                                          _mm256_loadu_ps(t[2]), _mm256_loadu_ps(t[3]), x,
                                          clamp, lim, nlim));
            for (int64_t i = 0; i < nc - j; i++) sr[j + i] = out[i];
        }
    }
}

void qmoe_swiglu_avx2(int64_t rows, int64_t nc, const float *f, int64_t ldf, int64_t gate,
                      const float *corr, const float *xs, float limit, float *s, int64_t lds)
{
    if (limit > 0.0f) swiglu_rows(rows, nc, f, ldf, gate, corr, xs, limit, 1, s, lds);
    else swiglu_rows(rows, nc, f, ldf, gate, corr, xs, 0.0f, 0, s, lds);
}

void qmoe_quantize_row_avx2(const float *s, int64_t n2, int8_t *out, int64_t out_stride,
                            float *scale)
{
    int64_t full = n2 & ~(int64_t)7;
    if (out_stride != 1 || full == 0) {
        qmoe_quantize_row_scalar(s, n2, out, out_stride, scale);
        return;
    }
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 amax = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
    for (int64_t j = 0; j < full; j += 8) {
        __m256 v = _mm256_and_ps(_mm256_loadu_ps(s + j), absmask);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        amax = _mm256_max_ps(v, amax);
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, amax);
    float am = 0.0f, sc;
    int has_nan = !_mm256_testz_ps(nan, nan);
    for (int i = 0; i < 8; i++) am = lanes[i] > am ? lanes[i] : am;
    for (int64_t j = full; j < n2; j++) qmoe_qrule_amax(s[j], &am, &has_nan);
    int quantize = qmoe_qrule_scale(am, has_nan, &sc);
    *scale = sc;
    if (!quantize) {
        for (int64_t j = 0; j < n2; j++) out[j] = 0;
        return;
    }
    const __m256 vsc = _mm256_set1_ps(sc), hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
    for (int64_t j = 0; j < full; j += 8) {
        __m256 q = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(s + j), vsc),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256i i = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(q, lo), hi));
        __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
        _mm_storel_epi64((__m128i *)(out + j), _mm_packs_epi16(w, w));
    }
    for (int64_t j = full; j < n2; j++) out[j] = qmoe_qrule_value(s[j], sc);
}

/* The element-wise routines of the AVX2 and AVX-VNNI kernels (kernel.h). */
const qmoe_eltwise_isa qmoe_eltwise_avx2 = {
    .name = "avx2",
    .swiglu = qmoe_swiglu_avx2,
    .quantize_row = qmoe_quantize_row_avx2,
};
#endif
