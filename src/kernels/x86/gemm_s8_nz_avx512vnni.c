/*
 * AVX-512 VNNI micro-kernel straight on FRACTAL_NZ strips, for blocks of a few rows (decode):
 * packing the weights would cost as much as the arithmetic done with them, so each step of 4 k
 * loads the four 32-byte strip rows (two vectors), rearranges them in registers with vpermt2b
 * (VBMI) into the vpdpbusd operand order, and uses them at once for up to 4 rows. int4 strips are
 * split into nibbles and re-interleaved first; their column sums (needed by the A8W4 correction)
 * come from one more vpdpbusd against ones.
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <string.h>

#include "kernels/gmm_fast.h"
#include "kernels/x86/parts.h"

#define VBMI __attribute__((target("avx512vbmi")))

/* Bytes ahead of the strip read that are prefetched (into L2: parts.h): the weights stream
 * from DRAM once. */
enum { PREFETCH = 2048 };

static inline __m512i bcast(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm512_set1_epi32(v);
}

static inline void store_acc(int32_t *d, __m512i v, int accumulate)
{
    if (accumulate) v = _mm512_add_epi32(v, _mm512_loadu_si512(d));
    _mm512_storeu_si512(d, v);
}

/* One strip of 32 int8 columns (units u, u + 1), mr <= 4 rows. */
static inline __attribute__((always_inline)) VBMI void
nz_int8(int mr, int64_t kq, const int8_t *x, int64_t ldx, const uint8_t *w, int32_t *acc,
        int64_t ldacc, int accumulate)
{
    const __m512i i0 = qmoe_avx512_strip_index(0), i1 = qmoe_avx512_strip_index(1);
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    __m512i c00 = _mm512_setzero_si512(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
            c30 = c00, c31 = c00;
    for (int64_t q = 0; q < kq; q++) {
        _mm_prefetch((const char *)(w + 128 * q + PREFETCH), QMOE_AVX512_WEIGHT_HINT);
        _mm_prefetch((const char *)(w + 128 * q + PREFETCH + 64), QMOE_AVX512_WEIGHT_HINT);
        __m512i a = _mm512_loadu_si512(w + 128 * q), b = _mm512_loadu_si512(w + 128 * q + 64);
        __m512i w0 = _mm512_xor_si512(_mm512_permutex2var_epi8(a, i0, b), bias);
        __m512i w1 = _mm512_xor_si512(_mm512_permutex2var_epi8(a, i1, b), bias);
        __m512i x0 = bcast(x + 4 * q);
        c00 = _mm512_dpbusd_epi32(c00, w0, x0), c01 = _mm512_dpbusd_epi32(c01, w1, x0);
        if (mr > 1) {
            __m512i x1 = bcast(x + ldx + 4 * q);
            c10 = _mm512_dpbusd_epi32(c10, w0, x1), c11 = _mm512_dpbusd_epi32(c11, w1, x1);
        }
        if (mr > 2) {
            __m512i x2 = bcast(x + 2 * ldx + 4 * q);
            c20 = _mm512_dpbusd_epi32(c20, w0, x2), c21 = _mm512_dpbusd_epi32(c21, w1, x2);
        }
        if (mr > 3) {
            __m512i x3 = bcast(x + 3 * ldx + 4 * q);
            c30 = _mm512_dpbusd_epi32(c30, w0, x3), c31 = _mm512_dpbusd_epi32(c31, w1, x3);
        }
    }
    store_acc(acc, c00, accumulate), store_acc(acc + 16, c01, accumulate);
    if (mr > 1) store_acc(acc + ldacc, c10, accumulate), store_acc(acc + ldacc + 16, c11, accumulate);
    if (mr > 2)
        store_acc(acc + 2 * ldacc, c20, accumulate), store_acc(acc + 2 * ldacc + 16, c21, accumulate);
    if (mr > 3)
        store_acc(acc + 3 * ldacc, c30, accumulate), store_acc(acc + 3 * ldacc + 16, c31, accumulate);
}

/* One strip of 64 int4 columns (4 units), mr <= 4 rows, plus column sums when cs is given. */
static inline __attribute__((always_inline)) VBMI void
nz_int4(int mr, int64_t kq, const int8_t *x, int64_t ldx, const uint8_t *w, int32_t *acc,
        int64_t ldacc, int32_t *cs, int accumulate)
{
    const __m512i i0 = qmoe_avx512_strip_index(0), i1 = qmoe_avx512_strip_index(1);
    const __m512i bias = _mm512_set1_epi8((char)0x88), nib = _mm512_set1_epi8(0x0F);
    const __m512i ones = _mm512_set1_epi8(1);
    __m512i z = _mm512_setzero_si512();
    __m512i c00 = z, c01 = z, c02 = z, c03 = z, c10 = z, c11 = z, c12 = z, c13 = z;
    __m512i c20 = z, c21 = z, c22 = z, c23 = z, c30 = z, c31 = z, c32 = z, c33 = z;
    __m512i s0 = z, s1 = z, s2 = z, s3 = z;
    for (int64_t q = 0; q < kq; q++) {
        _mm_prefetch((const char *)(w + 128 * q + PREFETCH), QMOE_AVX512_WEIGHT_HINT);
        _mm_prefetch((const char *)(w + 128 * q + PREFETCH + 64), QMOE_AVX512_WEIGHT_HINT);
        __m512i a = _mm512_xor_si512(_mm512_loadu_si512(w + 128 * q), bias);
        __m512i b = _mm512_xor_si512(_mm512_loadu_si512(w + 128 * q + 64), bias);
        __m512i alo = _mm512_and_si512(a, nib), ahi = _mm512_and_si512(_mm512_srli_epi16(a, 4), nib);
        __m512i blo = _mm512_and_si512(b, nib), bhi = _mm512_and_si512(_mm512_srli_epi16(b, 4), nib);
        __m512i al = _mm512_unpacklo_epi8(alo, ahi), ah = _mm512_unpackhi_epi8(alo, ahi);
        __m512i bl = _mm512_unpacklo_epi8(blo, bhi), bh = _mm512_unpackhi_epi8(blo, bhi);
        __m512i w0 = _mm512_permutex2var_epi8(al, i0, bl), w1 = _mm512_permutex2var_epi8(ah, i0, bh);
        __m512i w2 = _mm512_permutex2var_epi8(al, i1, bl), w3 = _mm512_permutex2var_epi8(ah, i1, bh);
#define ROW(R, XP)                                                                               \
    {                                                                                            \
        __m512i xr = bcast(XP);                                                                  \
        c##R##0 = _mm512_dpbusd_epi32(c##R##0, w0, xr);                                          \
        c##R##1 = _mm512_dpbusd_epi32(c##R##1, w1, xr);                                          \
        c##R##2 = _mm512_dpbusd_epi32(c##R##2, w2, xr);                                          \
        c##R##3 = _mm512_dpbusd_epi32(c##R##3, w3, xr);                                          \
    }
        ROW(0, x + 4 * q)
        if (mr > 1) ROW(1, x + ldx + 4 * q)
        if (mr > 2) ROW(2, x + 2 * ldx + 4 * q)
        if (mr > 3) ROW(3, x + 3 * ldx + 4 * q)
#undef ROW
        if (cs) {
            s0 = _mm512_dpbusd_epi32(s0, w0, ones), s1 = _mm512_dpbusd_epi32(s1, w1, ones);
            s2 = _mm512_dpbusd_epi32(s2, w2, ones), s3 = _mm512_dpbusd_epi32(s3, w3, ones);
        }
    }
#define OUT(R)                                                                                   \
    store_acc(acc + R * ldacc, c##R##0, accumulate);                                             \
    store_acc(acc + R * ldacc + 16, c##R##1, accumulate);                                        \
    store_acc(acc + R * ldacc + 32, c##R##2, accumulate);                                        \
    store_acc(acc + R * ldacc + 48, c##R##3, accumulate);
    OUT(0)
    if (mr > 1) { OUT(1) }
    if (mr > 2) { OUT(2) }
    if (mr > 3) { OUT(3) }
#undef OUT
    if (cs) {
        store_acc(cs, s0, accumulate), store_acc(cs + 16, s1, accumulate);
        store_acc(cs + 32, s2, accumulate), store_acc(cs + 48, s3, accumulate);
    }
}

#define NZ_FNS(R)                                                                                \
    static VBMI void nz_int8_##R(int64_t kq, const int8_t *x, int64_t ldx, const uint8_t *w,    \
                                 int32_t *acc, int64_t ldacc, int accumulate)                    \
    {                                                                                            \
        nz_int8(R, kq, x, ldx, w, acc, ldacc, accumulate);                                       \
    }                                                                                            \
    static VBMI void nz_int4_##R(int64_t kq, const int8_t *x, int64_t ldx, const uint8_t *w,    \
                                 int32_t *acc, int64_t ldacc, int32_t *cs, int accumulate)       \
    {                                                                                            \
        nz_int4(R, kq, x, ldx, w, acc, ldacc, cs, accumulate);                                   \
    }
NZ_FNS(1) NZ_FNS(2) NZ_FNS(3) NZ_FNS(4)

int qmoe_gemm_nz_avx512(int mr, int nu, int int4, int64_t kq, const int8_t *x, int64_t ldx,
                        const uint8_t *const *src, const int64_t *stride, int32_t *acc,
                        int64_t ldacc, int32_t *cs, int accumulate)
{
    static void (*const f8[4])(int64_t, const int8_t *, int64_t, const uint8_t *, int32_t *,
                               int64_t, int) = {nz_int8_1, nz_int8_2, nz_int8_3, nz_int8_4};
    static void (*const f4[4])(int64_t, const int8_t *, int64_t, const uint8_t *, int32_t *,
                               int64_t, int32_t *, int) = {nz_int4_1, nz_int4_2, nz_int4_3,
                                                           nz_int4_4};
    if (mr < 1 || mr > 4 || !qmoe_avx512_has_vbmi()) return 0;
    if (int4) {
        if (nu != 4 || !qmoe_units_run(src, stride, 0, 4, 8, 32)) return 0;
        f4[mr - 1](kq, x, ldx, src[0], acc, ldacc, cs, accumulate);
        return 1;
    }
    if (nu % 2) return 0;
    for (int u = 0; u < nu; u += 2)
        if (!qmoe_units_run(src, stride, u, 2, 16, 32)) return 0;
    for (int u = 0; u < nu; u += 2)
        f8[mr - 1](kq, x, ldx, src[u], acc + 16 * u, ldacc, accumulate);
    return 1;
}
#endif
