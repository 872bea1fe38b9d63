/*
 * AVX2 int8 micro-kernel without VNNI: up to 4 rows x 1 unit (16 columns, two ymm), a call
 * looping over up to 4 units; per-group scales (ggml's blocks of 32) in gemm_groups_avx2.c.
 * vpmaddubsw multiplies uint8 weights by int8 x and adds pairs into int16 with saturation; with
 * weight bytes u up to 255 a pair can reach 2 * 255 * 128 and saturate. Int8 weights therefore
 * move the signs (s8_sign_avx2.h): |x| times w * sign(x), w = u - 128, cannot saturate, one
 * vpmaddubsw a product (1.2-1.3x the nibble split's speed in L1); a step holding a weight -128
 * splits its bytes into nibbles, w = 16 h + l, as every int8 step did before. Int4 weights
 * (bytes <= 15) need neither: gemm_u4 on expanded steps and gemm_i4 on prepacked nibbles
 * (expanded in registers) do one vpmaddubsw per product. gemm_pf (int8) and gemm_i4, which read
 * prepacked weights in place, prefetch the weight stream ahead: one unit per pass, steps 64 to
 * 256 bytes apart, is a stream the hardware prefetcher alone left at 2-3 GB/s (decode).
 * A pair of products of a byte <= 15 and an int8 is at most 2 * 15 * 128 = 3840 in magnitude,
 * so int4's RUN = 8 steps add up in int16 (vpaddw, at most 30720) before one vpmaddwd widens
 * them into the int32 tile: per product a vpmaddubsw and a vpaddw instead of a vpmaddwd and a
 * vpaddd each time (1.6-1.7x in L1). Int8 widens every step (a pair of its products may reach
 * 32512, so two cannot add in int16). Exact, so the same integers as every other kernel.
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <string.h>

#include "kernels/gmm_fast.h"
#include "kernels/peak.h"
#include "kernels/x86/expand_avx2.h"
#include "kernels/x86/parts.h"
#include "kernels/x86/s8_sign_avx2.h"

enum { MR = 4, RUN = 8 };

/* Bytes ahead of the weight stream that gemm_i4 asks for, and the driver's first micro-tile of
 * gemm_pf (prepacked weights read in place from memory): decode A8W8, one thread, 91-97 -> 41-47
 * ms (2048: 63-76, 4096: 47-50). */
enum { PREFETCH = QMOE_PF_AHEAD };

static inline __attribute__((always_inline)) __m256i bcast_x(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

/* acc (+)= the int16 sums s of rows r < mr, half h (8 columns), widened. */
static inline __attribute__((always_inline)) void flush(int mr, int h, const __m256i *s,
                                                        int32_t *acc, int64_t ldacc, int add)
{
    const __m256i one = _mm256_set1_epi16(1);
    for (int r = 0; r < mr; r++) {
        __m256i v = _mm256_madd_epi16(s[r], one);
        __m256i *p = (__m256i *)(void *)(acc + r * ldacc + 8 * h);
        _mm256_storeu_si256(p, add ? _mm256_add_epi32(_mm256_loadu_si256(p), v) : v);
    }
}

/* w4: 0 int8 bytes (split into nibbles), 1 bytes <= 15 (64-byte steps), 2 prepacked int4 steps
 * (32 bytes, byte i holding bytes i and 32 + i of the 64-byte step in its low and high nibble),
 * 3 int8 bytes read in place (prefetched), 4 prepacked codes (int4's steps, each nibble n
 * standing for byte tbl[n]: looked up with vpshufb, then split as int8 bytes).
 */
static inline __attribute__((always_inline)) void tile(int w4, int mr, int64_t kq, const int8_t *x,
                                                       int64_t ldx, const uint8_t *wp,
                                                       int64_t wstep, const uint8_t *tbl,
                                                       int32_t *acc, int64_t ldacc, int accumulate,
                                                       const int32_t *off, int64_t ahead)
{
    const __m256i nib = _mm256_set1_epi8(0x0F);
    if (w4 == 0 || w4 == 3 || w4 == 4) {
        /* int8: one vpmaddubsw a product on the weights' signs (s8_sign_avx2.h), the nibble
         * split for a step holding a weight -128; c starts at 128 * the row's x sum (off) */
        const __m256i flip = _mm256_set1_epi8((char)0x80);
        __m256i c[MR][2];
        for (int r = 0; r < mr; r++)
            for (int h = 0; h < 2; h++) {
                __m256i o = _mm256_set1_epi32(off[r]);
                c[r][h] = accumulate ? _mm256_add_epi32(o, _mm256_loadu_si256((const __m256i *)(const void *)(acc + r * ldacc + 8 * h)))
                                     : o;
            }
        /* the 16-byte table in both 128-bit lanes (vpshufb looks up within a lane) */
        const __m256i tb =
            w4 == 4 ? _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)tbl))
                    : _mm256_setzero_si256();
        for (int64_t q = 0; q < kq; q++, wp += wstep) {
            if (w4 >= 3 && ahead) _mm_prefetch((const char *)wp + ahead, _MM_HINT_T0);
            __m256i by[2];
            if (w4 == 4) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)wp);
                by[0] = _mm256_shuffle_epi8(tb, _mm256_and_si256(v, nib));
                by[1] = _mm256_shuffle_epi8(tb, _mm256_and_si256(_mm256_srli_epi16(v, 4), nib));
            } else {
                by[0] = _mm256_loadu_si256((const __m256i *)(const void *)wp);
                by[1] = _mm256_loadu_si256((const __m256i *)(const void *)(wp + 32));
            }
            if (__builtin_expect(qmoe_s8_signable(by[0], by[1]), 1)) {
                const __m256i w0 = _mm256_xor_si256(by[0], flip), w1 = _mm256_xor_si256(by[1], flip);
                for (int r = 0; r < mr; r++) {
                    __m256i b = bcast_x(x + r * ldx + 4 * q), ax = _mm256_abs_epi8(b);
                    c[r][0] = _mm256_add_epi32(c[r][0], qmoe_s8_dot(ax, b, w0));
                    c[r][1] = _mm256_add_epi32(c[r][1], qmoe_s8_dot(ax, b, w1));
                }
            } else {
                for (int r = 0; r < mr; r++) {
                    __m256i b = bcast_x(x + r * ldx + 4 * q), o = qmoe_s8_dot_off(b);
                    for (int h = 0; h < 2; h++)
                        c[r][h] = _mm256_add_epi32(c[r][h], _mm256_sub_epi32(qmoe_s8_dot_split(b, by[h]), o));
                }
            }
        }
        for (int r = 0; r < mr; r++)
            for (int h = 0; h < 2; h++)
                _mm256_storeu_si256((__m256i *)(void *)(acc + r * ldacc + 8 * h), c[r][h]);
        return;
    }
    if (kq == 0 && !accumulate) {
        for (int r = 0; r < mr; r++)
            for (int h = 0; h < 2; h++)
                _mm256_storeu_si256((__m256i *)(void *)(acc + r * ldacc + 8 * h), _mm256_setzero_si256());
        return;
    }
    for (int64_t q0 = 0; q0 < kq; q0 += RUN) { /* int4: RUN steps in int16, then widened */
        int n = (int)(kq - q0 < RUN ? kq - q0 : RUN), add = accumulate || q0 > 0;
        const uint8_t *w = wp + q0 * wstep;
        const int8_t *xq = x + 4 * q0;
        __m256i s[2][MR];
        for (int r = 0; r < mr; r++) s[0][r] = s[1][r] = _mm256_setzero_si256();
        for (int q = 0; q < n; q++, w += wstep) {
            __m256i w0, w1;
            if (w4 == 2) { /* read in place from memory: prefetched as gemm_pf does */
                _mm_prefetch((const char *)w + PREFETCH, _MM_HINT_T0);
                __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)w);
                w0 = _mm256_and_si256(v, nib);
                w1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
            } else {
                w0 = _mm256_loadu_si256((const __m256i *)(const void *)w);
                w1 = _mm256_loadu_si256((const __m256i *)(const void *)(w + 32));
            }
            for (int r = 0; r < mr; r++) {
                __m256i b = bcast_x(xq + r * ldx + 4 * q);
                s[0][r] = _mm256_add_epi16(s[0][r], _mm256_maddubs_epi16(w0, b));
                s[1][r] = _mm256_add_epi16(s[1][r], _mm256_maddubs_epi16(w1, b));
            }
        }
        flush(mr, 0, s[0], acc, ldacc, add);
        flush(mr, 1, s[1], acc, ldacc, add);
    }
}

#define TILE_FN(W, R)                                                                            \
    static void tile_##W##_##R(int64_t kq, const int8_t *x, int64_t ldx, const uint8_t *wp,     \
                               int64_t wstep, const uint8_t *tbl, int32_t *acc, int64_t ldacc,   \
                               int accumulate, const int32_t *off, int64_t ahead)                \
    {                                                                                            \
        tile(W, R, kq, x, ldx, wp, wstep, tbl, acc, ldacc, accumulate, off, ahead);              \
    }
#define TILE_FNS(W) TILE_FN(W, 1) TILE_FN(W, 2) TILE_FN(W, 3) TILE_FN(W, 4)
TILE_FNS(0) TILE_FNS(1) TILE_FNS(2) TILE_FNS(3) TILE_FNS(4)

typedef void (*tile_fn)(int64_t, const int8_t *, int64_t, const uint8_t *, int64_t,
                        const uint8_t *, int32_t *, int64_t, int, const int32_t *, int64_t);
static const tile_fn tiles[5][MR] = {{tile_0_1, tile_0_2, tile_0_3, tile_0_4},
                                     {tile_1_1, tile_1_2, tile_1_3, tile_1_4},
                                     {tile_2_1, tile_2_2, tile_2_3, tile_2_4},
                                     {tile_3_1, tile_3_2, tile_3_3, tile_3_4},
                                     {tile_4_1, tile_4_2, tile_4_3, tile_4_4}};

/* ahead: the prefetch distance of w4 3 (gemm_pf) and 4 (codes); the others take none or their own */
static inline void run(int w4, int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx,
                       const uint8_t *wp, int64_t wstep, int64_t ahead, const uint8_t *tbl,
                       int32_t *acc, int64_t ldacc, int accumulate)
{
    int64_t ustep = w4 == 2 || w4 == 4 ? QMOE_PK_STEP / 2 : QMOE_PK_STEP;
    int32_t off[MR] = {0, 0, 0, 0}; /* int8: 128 * each row's x sum, once for every unit */
    if (w4 == 0 || w4 == 3 || w4 == 4)
        for (int r = 0; r < mr; r++) off[r] = qmoe_s8_off(x + r * ldx, 4 * kq);
    for (int u = 0; u < nu; u++)
        tiles[w4][mr - 1](kq, x, ldx, wp + u * ustep, wstep, tbl, acc + u * QMOE_PK_UNIT, ldacc,
                          accumulate, off, ahead);
}

/* Prepacked int4 steps -> the 64-byte steps gemm reads (gmm_fast.h, expand_i4). */
void qmoe_expand_i4_avx2(const uint8_t *src, int64_t steps, uint8_t *dst)
{
    const __m256i nib = _mm256_set1_epi8(0x0F);
    for (int64_t q = 0; q < steps; q++, src += 32, dst += QMOE_PK_STEP) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)src);
        _mm256_storeu_si256((__m256i *)(void *)dst, _mm256_and_si256(v, nib));
        _mm256_storeu_si256((__m256i *)(void *)(dst + 32), _mm256_and_si256(_mm256_srli_epi16(v, 4), nib));
    }
}

/* Prepacked 6-bit steps -> the 64-byte steps (gmm_fast.h, expand_b6): the portable loop of
 * gemm_driver.c, built for x86-64's SSE2, made 6-bit prompts 1.2-1.5x the int8 time here. */
void qmoe_expand_b6_avx2(const uint8_t *src, int64_t steps, uint8_t *dst)
{
    const __m256i b = _mm256_set1_epi8(96);
    for (int64_t q = 0; q < steps; q++, src += 48, dst += QMOE_PK_STEP) {
        __m256i v0, v1;
        qmoe_b6_values_ymm(src, &v0, &v1);
        _mm256_storeu_si256((__m256i *)(void *)dst, _mm256_add_epi8(v0, b));
        _mm256_storeu_si256((__m256i *)(void *)(dst + 32), _mm256_add_epi8(v1, b));
    }
}

/* Prepacked codes -> the 64-byte steps gemm reads (gmm_fast.h, expand_c4): nibbles looked up. */
void qmoe_expand_c4_avx2(const uint8_t *src, int64_t steps, uint8_t *dst, const uint8_t *tbl)
{
    const __m256i nib = _mm256_set1_epi8(0x0F),
                  tb = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)tbl));
    for (int64_t q = 0; q < steps; q++, src += 32, dst += QMOE_PK_STEP) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)src);
        _mm256_storeu_si256((__m256i *)(void *)dst, _mm256_shuffle_epi8(tb, _mm256_and_si256(v, nib)));
        _mm256_storeu_si256((__m256i *)(void *)(dst + 32),
                            _mm256_shuffle_epi8(tb, _mm256_and_si256(_mm256_srli_epi16(v, 4), nib)));
    }
}

static void gemm_avx2(int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx, const uint8_t *wp,
                      int64_t wstep, int32_t *acc, int64_t ldacc, int accumulate)
{
    run(0, mr, nu, kq, x, ldx, wp, wstep, 0, NULL, acc, ldacc, accumulate);
}

static void gemm_pf_avx2(int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx,
                         const uint8_t *wp, int64_t wstep, int64_t ahead, int32_t *acc,
                         int64_t ldacc, int accumulate)
{
    run(3, mr, nu, kq, x, ldx, wp, wstep, ahead, NULL, acc, ldacc, accumulate);
}

static void gemm_u4_avx2(int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx,
                         const uint8_t *wp, int64_t wstep, int32_t *acc, int64_t ldacc,
                         int accumulate)
{
    run(1, mr, nu, kq, x, ldx, wp, wstep, 0, NULL, acc, ldacc, accumulate);
}

static void gemm_i4_avx2(int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx,
                         const uint8_t *wp, int64_t wstep, int32_t *acc, int64_t ldacc,
                         int accumulate)
{
    run(2, mr, nu, kq, x, ldx, wp, wstep, 0, NULL, acc, ldacc, accumulate);
}

static void gemm_c4_avx2(int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx,
                         const uint8_t *wp, int64_t wstep, const uint8_t *tbl, int32_t *acc,
                         int64_t ldacc, int accumulate)
{
    run(4, mr, nu, kq, x, ldx, wp, wstep, PREFETCH, tbl, acc, ldacc, accumulate);
}

const qmoe_gemm_isa qmoe_isa_avx2 = {
    .name = "avx2",
    .kernel_id = QMOE_KERNEL_AVX2,
    .mr = MR,
    .nu = 4, /* its calls loop over units; gemm_groups goes group by group across them */
    .gemm = gemm_avx2,
    .gemm_u4 = gemm_u4_avx2,
    .gemm_pf = gemm_pf_avx2,
    .gemm_i4 = gemm_i4_avx2,
    .gemm_c4 = gemm_c4_avx2,
    .gemm_groups = qmoe_gemm_groups_avx2,
    .groups_b6 = 1,
    .groups_k_one = 32, /* decode A8W4 G 32: 16 groups a call 11.3-13.8 ms, one 9.6-9.7 (int8:
                           * one 31-32 ms, 16 as before, 22-30: it keeps the driver's chunk) */
    .expand_i4 = qmoe_expand_i4_avx2,
    .expand_c4 = qmoe_expand_c4_avx2,
    .expand_b6 = qmoe_expand_b6_avx2,
    .rearrange = qmoe_rearrange_avx2,
    .fold = qmoe_fold_avx2,
    .half_to_f32 = qmoe_half_to_f32_avx2,
    .peak_loop = qmoe_peak_avx2,
};
#endif
