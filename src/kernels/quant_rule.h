/*
 * The one per-token quantization rule of the library (spec, step 4 and "Numeric fidelity").
 * Every kernel's epilogue (reference, portable, AVX2, AVX-VNNI, AVX-512 VNNI, AMX) takes its
 * decisions from here, so they give the same bits on every row, edge rows included:
 *
 *   amax   = max_j |S[j]| over the non-NaN values (0 for an empty row)
 *   scale  = NaN if any S[j] is NaN, else amax / 127 (float32, so it may be +inf, a subnormal,
 *            or 0 when amax / 127 underflows)
 *   output = S[j] / scale rounded half to even, clamped to [-127, 127]  when scale is finite
 *            and non-zero; otherwise 0 for every j (zero row, underflowing row, non-finite row)
 *
 * Vector code may compute amax and the per-element value in SIMD, but must then do exactly what
 * qmoe_qrule_value does (IEEE division, round half to even, clamp before the conversion); the
 * decisions come from qmoe_qrule_scale alone.
 */
#ifndef QMOE_KERNELS_QUANT_RULE_H
#define QMOE_KERNELS_QUANT_RULE_H

#include <math.h>
#include <stdint.h>

/* The row's scale from its amax (over non-NaN |S|) and whether any S was NaN. Returns 1 when
 * the values are to be quantized against *scale, 0 when the output row is all zeros. */
static inline int qmoe_qrule_scale(float amax, int has_nan, float *scale)
{
    float sc = has_nan ? NAN : amax / 127.0f;
    *scale = sc;
    /* 0: the zero row, and also amax / 127 underflowing to 0 (S / 0 would be inf or NaN, and no
     * q times a zero scale gives back anything but 0). Non-finite: the caller's data, output 0. */
    return isfinite(sc) && sc != 0.0f;
}

/* One element against a finite, non-zero scale. The clamp matters for subnormal scales, whose
 * rounding can put amax / scale past 127 (up to about 190). */
static inline int8_t qmoe_qrule_value(float s, float scale)
{
    float q = rintf(s / scale); /* round half to even in the default rounding mode */
    if (q > 127.0f) q = 127.0f;
    if (q < -127.0f) q = -127.0f;
    return (int8_t)q;
}

/* amax / NaN accumulation of one element, as the vector versions do it lane by lane. */
static inline void qmoe_qrule_amax(float s, float *amax, int *has_nan)
{
    float a = fabsf(s);
    if (isnan(a)) *has_nan = 1;
    else if (a > *amax) *amax = a;
}

#endif
