/*
 * AVX-512 rearrangement of staged weight rows into packed units (gmm_fast.h), per step of four
 * rows:
 *  - FRACTAL_NZ strips (rows of 32 bytes: 32 int8 columns, or 64 int4 columns): the four rows are
 *    two contiguous vectors and one vpermt2b per output unit gathers byte i of each row (VBMI;
 *    int4 is first split into nibbles and re-interleaved into column order by byte unpacks);
 *  - ND rows of 64 int8 columns: byte and word unpacks and a 4 x 4 transpose of 128-bit lanes
 *    (AVX-512BW only).
 * Other shapes, CPUs without VBMI and the last partial step use the portable code.
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

#include "kernels/cpu_features.h"
#include "kernels/gmm_fast.h"
#include "kernels/x86/parts.h"

int qmoe_avx512_has_vbmi(void)
{
    static int known; /* 0: not yet, 1: yes, 2: no (racing writers store the same value) */
    int k = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (!k) {
        k = qmoe_cpu_features_get().avx512_vbmi ? 1 : 2;
        __atomic_store_n(&known, k, __ATOMIC_RELAXED);
    }
    return k == 1;
}
#define has_vbmi qmoe_avx512_has_vbmi

__m512i qmoe_avx512_strip_index(int half)
{
    uint8_t b[64];
    for (int i = 0; i < 16; i++)
        for (int t = 0; t < 4; t++) b[4 * i + t] = (uint8_t)(16 * half + i + 32 * t);
    return _mm512_loadu_si512(b);
}
#define strip_index qmoe_avx512_strip_index

__attribute__((target("avx512vbmi"))) static void strip_int8(const uint8_t *src, int64_t steps,
                                                             uint8_t *dst, int64_t wstep)
{
    const __m512i i0 = strip_index(0), i1 = strip_index(1), bias = _mm512_set1_epi8((char)0x80);
    for (int64_t q = 0; q < steps; q++) {
        __m512i a = _mm512_loadu_si512(src + 128 * q), b = _mm512_loadu_si512(src + 128 * q + 64);
        uint8_t *o = dst + q * wstep;
        _mm512_storeu_si512(o, _mm512_xor_si512(_mm512_permutex2var_epi8(a, i0, b), bias));
        _mm512_storeu_si512(o + 64, _mm512_xor_si512(_mm512_permutex2var_epi8(a, i1, b), bias));
    }
}

__attribute__((target("avx512vbmi"))) static void strip_int4(const uint8_t *src, int64_t steps,
                                                             uint8_t *dst, int64_t wstep)
{
    const __m512i i0 = strip_index(0), i1 = strip_index(1), bias = _mm512_set1_epi8((char)0x88);
    const __m512i nib = _mm512_set1_epi8(0x0F);
    for (int64_t q = 0; q < steps; q++) {
        __m512i a = _mm512_xor_si512(_mm512_loadu_si512(src + 128 * q), bias);
        __m512i b = _mm512_xor_si512(_mm512_loadu_si512(src + 128 * q + 64), bias);
        __m512i alo = _mm512_and_si512(a, nib), ahi = _mm512_and_si512(_mm512_srli_epi16(a, 4), nib);
        __m512i blo = _mm512_and_si512(b, nib), bhi = _mm512_and_si512(_mm512_srli_epi16(b, 4), nib);
        /* per 128-bit lane, columns in order: lo = [c0-15 | c32-47] of each row, hi = [c16-31 |
         * c48-63] */
        __m512i al = _mm512_unpacklo_epi8(alo, ahi), ah = _mm512_unpackhi_epi8(alo, ahi);
        __m512i bl = _mm512_unpacklo_epi8(blo, bhi), bh = _mm512_unpackhi_epi8(blo, bhi);
        uint8_t *o = dst + q * wstep;
        _mm512_storeu_si512(o, _mm512_permutex2var_epi8(al, i0, bl));
        _mm512_storeu_si512(o + 64, _mm512_permutex2var_epi8(ah, i0, bh));
        _mm512_storeu_si512(o + 128, _mm512_permutex2var_epi8(al, i1, bl));
        _mm512_storeu_si512(o + 192, _mm512_permutex2var_epi8(ah, i1, bh));
    }
}

static inline __m512i row_int8(const uint8_t *row)
{
    return _mm512_xor_si512(_mm512_loadu_si512(row), _mm512_set1_epi8((char)0x80));
}

/* Four units of int8 in rows of 64 bytes at `stride`. */
static void rows64_int8(const uint8_t *src, int64_t stride, int64_t steps, uint8_t *dst,
                        int64_t wstep)
{
    for (int64_t q = 0; q < steps; q++) {
        const uint8_t *s = src + 4 * q * stride;
        __m512i r0 = row_int8(s), r1 = row_int8(s + stride), r2 = row_int8(s + 2 * stride),
                r3 = row_int8(s + 3 * stride);
        __m512i lo01 = _mm512_unpacklo_epi8(r0, r1), hi01 = _mm512_unpackhi_epi8(r0, r1);
        __m512i lo23 = _mm512_unpacklo_epi8(r2, r3), hi23 = _mm512_unpackhi_epi8(r2, r3);
        __m512i a = _mm512_unpacklo_epi16(lo01, lo23), b = _mm512_unpackhi_epi16(lo01, lo23);
        __m512i c = _mm512_unpacklo_epi16(hi01, hi23), d = _mm512_unpackhi_epi16(hi01, hi23);
        __m512i t0 = _mm512_shuffle_i32x4(a, b, 0x44), t1 = _mm512_shuffle_i32x4(a, b, 0xEE);
        __m512i t2 = _mm512_shuffle_i32x4(c, d, 0x44), t3 = _mm512_shuffle_i32x4(c, d, 0xEE);
        uint8_t *o = dst + q * wstep;
        _mm512_storeu_si512(o, _mm512_shuffle_i32x4(t0, t2, 0x88));
        _mm512_storeu_si512(o + 64, _mm512_shuffle_i32x4(t0, t2, 0xDD));
        _mm512_storeu_si512(o + 128, _mm512_shuffle_i32x4(t1, t3, 0x88));
        _mm512_storeu_si512(o + 192, _mm512_shuffle_i32x4(t1, t3, 0xDD));
    }
}

int qmoe_units_run(const uint8_t *const *src, const int64_t *stride, int u, int count,
                  int64_t bytes, int64_t want_stride)
{
    for (int i = 0; i < count; i++)
        if (stride[u + i] != want_stride || src[u + i] != src[u] + i * bytes) return 0;
    return 1;
}

void qmoe_rearrange_avx512(const uint8_t *const *src, const int64_t *stride, int64_t rows,
                           int nub, int int4, uint8_t *dst, int64_t wstep)
{
    int64_t full = rows / 4;
    int done[QMOE_PK_BLOCK] = {0};
    if (full > 0) {
        if (int4) {
            if (nub == 4 && has_vbmi() && qmoe_units_run(src, stride, 0, 4, 8, 32)) {
                strip_int4(src[0], full, dst, wstep);
                done[0] = done[1] = done[2] = done[3] = 1;
            }
        } else if (nub == 4 && qmoe_units_run(src, stride, 0, 4, 16, stride[0]) && stride[0] >= 64) {
            rows64_int8(src[0], stride[0], full, dst, wstep);
            done[0] = done[1] = done[2] = done[3] = 1;
        } else if (has_vbmi()) {
            for (int u = 0; u + 1 < nub; u += 2)
                if (qmoe_units_run(src, stride, u, 2, 16, 32)) {
                    strip_int8(src[u], full, dst + u * QMOE_PK_STEP, wstep);
                    done[u] = done[u + 1] = 1;
                }
        }
    }
    for (int u = 0; u < nub; u++) {
        const uint8_t *s = src[u];
        int64_t skip = done[u] ? 4 * full : 0;
        if (rows > skip) {
            const uint8_t *from = s + skip * stride[u];
            qmoe_rearrange_portable(&from, &stride[u], rows - skip, 1, int4,
                                    dst + (skip / 4) * wstep + u * QMOE_PK_STEP, wstep);
        }
    }
}
#endif
