/*
 * AVX-512 VNNI int8 micro-kernel: up to 6 rows x 4 units (64 columns) of int32 accumulators in
 * 24 zmm registers. Per step of 4 k: 4 weight vectors (uint8, the packed units) and one
 * embedded-broadcast dword of x per row (int8) feed 24 vpdpbusd.
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <string.h>

#include "kernels/gmm_fast.h"
#include "kernels/peak.h"
#include "kernels/x86/expand_avx512.h"
#include "kernels/x86/parts.h"

enum { MR = 6 };

/* Bytes ahead of the weight stream that the prefetching variants ask for (gemm_pf: the driver's
 * `ahead`): prepacked weights are read from memory once per call. 8 KB (32 steps of a 4-unit
 * panel; past a panel's end, the next panel's or expert's records, which follow it) covers
 * DRAM's latency where 2 KB did not: decode's loop 13.2 -> 11.6 ms, decode A8W4 6.8 -> 5.9,
 * qwen3 (median) 18.4 -> 17.4 (one thread, CPU time, 4 alternated rounds; docs/performance.md).
 * Into L2 (parts.h): with prefetcht0 Qwen3 A8W8 ran 7 % slower on Zen 4, decode within its
 * noise. */
enum { PREFETCH = QMOE_PF_AHEAD };

void qmoe_expand_i4_avx512(const uint8_t *src, int64_t steps, uint8_t *dst)
{
    for (int64_t q = 0; q < steps; q++)
        _mm512_storeu_si512(dst + 64 * q, qmoe_expand_i4_zmm(src + 32 * q));
}

void qmoe_expand_b6_avx512(const uint8_t *src, int64_t steps, uint8_t *dst)
{
    for (int64_t q = 0; q < steps; q++)
        _mm512_storeu_si512(dst + 64 * q, qmoe_expand_b6_zmm(src + 48 * q));
}

void qmoe_expand_c4_avx512(const uint8_t *src, int64_t steps, uint8_t *dst, const uint8_t *tbl)
{
    const __m512i tb = qmoe_code_table_zmm(tbl);
    for (int64_t q = 0; q < steps; q++)
        _mm512_storeu_si512(dst + 64 * q, qmoe_expand_c4_zmm(src + 32 * q, tb));
}

/* The fold's operands (gmm_fast.h, gemm_fold). */
typedef struct fold_to {
    const int32_t *xoff;
    int64_t xoff_stride;
    const float *xs, *ws;
    float *f;
    int64_t ldf;
    int first;
} fold_to;

/* i4: 0 plain bytes, 1 prepacked int4 steps, 2 prepacked codes of tbl; ahead: prefetch the
 * weight stream, each step's lines `ahead` bytes past them (0: none). */
static inline __attribute__((always_inline)) void tile(int i4, int64_t ahead, int mr, int nu,
                                                       int64_t kq, const int8_t *x, int64_t ldx,
                                                       const uint8_t *wp, int64_t wstep,
                                                       const uint8_t *tbl, int32_t *acc,
                                                       int64_t ldacc, int accumulate)
{
    const __m512i tb = i4 == 2 ? qmoe_code_table_zmm(tbl) : _mm512_setzero_si512();
    /* Accumulators start at zero and are added to acc at the end: GCC keeps them in registers
     * only when their initial value does not depend on a run-time condition. */
    __m512i c00 = _mm512_setzero_si512(), c01 = c00, c02 = c00, c03 = c00;
    __m512i c10 = c00, c11 = c00, c12 = c00, c13 = c00, c20 = c00, c21 = c00, c22 = c00, c23 = c00;
    __m512i c30 = c00, c31 = c00, c32 = c00, c33 = c00, c40 = c00, c41 = c00, c42 = c00, c43 = c00;
    __m512i c50 = c00, c51 = c00, c52 = c00, c53 = c00;
    const int8_t *x0 = x, *x1 = x + ldx, *x2 = x + 2 * ldx, *x3 = x + 3 * ldx, *x4 = x + 4 * ldx,
                 *x5 = x + 5 * ldx;
    for (int64_t q = 0; q < kq; q++) {
        __m512i w0, w1, w2, w3;
        if (ahead) {
            int64_t step = i4 ? 32 * nu : 64 * nu;
            for (int64_t o = 0; o < step; o += 64)
                _mm_prefetch((const char *)(wp + ahead + o), QMOE_AVX512_WEIGHT_HINT);
        }
        if (i4 == 2) {
            w0 = qmoe_expand_c4_zmm(wp, tb), w1 = w2 = w3 = w0;
            if (nu > 1) w1 = qmoe_expand_c4_zmm(wp + 32, tb);
            if (nu > 2) w2 = qmoe_expand_c4_zmm(wp + 64, tb);
            if (nu > 3) w3 = qmoe_expand_c4_zmm(wp + 96, tb);
        } else if (i4) {
            w0 = qmoe_expand_i4_zmm(wp), w1 = w2 = w3 = w0;
            if (nu > 1) w1 = qmoe_expand_i4_zmm(wp + 32);
            if (nu > 2) w2 = qmoe_expand_i4_zmm(wp + 64);
            if (nu > 3) w3 = qmoe_expand_i4_zmm(wp + 96);
        } else {
            w0 = _mm512_loadu_si512(wp), w1 = w2 = w3 = w0;
            if (nu > 1) w1 = _mm512_loadu_si512(wp + 64);
            if (nu > 2) w2 = _mm512_loadu_si512(wp + 128);
            if (nu > 3) w3 = _mm512_loadu_si512(wp + 192);
        }
        wp += wstep;
#define ROW(R)                                                                                   \
    if (mr > R) {                                                                                \
        int32_t xv;                                                                              \
        memcpy(&xv, x##R + 4 * q, sizeof xv);                                                    \
        __m512i b = _mm512_set1_epi32(xv);                                                       \
        c##R##0 = _mm512_dpbusd_epi32(c##R##0, w0, b);                                           \
        if (nu > 1) c##R##1 = _mm512_dpbusd_epi32(c##R##1, w1, b);                               \
        if (nu > 2) c##R##2 = _mm512_dpbusd_epi32(c##R##2, w2, b);                               \
        if (nu > 3) c##R##3 = _mm512_dpbusd_epi32(c##R##3, w3, b);                               \
    }
        ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5)
#undef ROW
    }
#define OUT(R, U)                                                                                \
    if (mr > R && nu > U) {                                                                      \
        int32_t *d = acc + R * ldacc + 16 * U;                                                   \
        __m512i v = c##R##U;                                                                     \
        if (accumulate) v = _mm512_add_epi32(v, _mm512_loadu_si512(d));                          \
        _mm512_storeu_si512(d, v);                                                               \
    }
#define OUT_ROW(R) OUT(R, 0) OUT(R, 1) OUT(R, 2) OUT(R, 3)
    OUT_ROW(0) OUT_ROW(1) OUT_ROW(2) OUT_ROW(3) OUT_ROW(4) OUT_ROW(5)
#undef OUT_ROW
#undef OUT
}

/* The tile, stored to an L1 buffer of the caller's stack (GCC keeps the accumulators in
 * registers only with tile's own store), into fo's float tile with qmoe_fold_avx512's operations
 * in its order: v = (float)(acc - xoff) * xs * ws, then f + v. */
static inline __attribute__((always_inline)) void fold_tile(int mr, int nu, const int32_t *t,
                                                            const fold_to *fo)
{
    for (int r = 0; r < mr; r++) {
        __m512i o = _mm512_set1_epi32(fo->xoff[r * fo->xoff_stride]);
        __m512 xs = _mm512_set1_ps(fo->xs ? fo->xs[r] : 1.0f);
        float *d = fo->f + r * fo->ldf;
        for (int u = 0; u < nu; u++) {
            __m512i a = _mm512_sub_epi32(_mm512_load_si512(t + 64 * r + 16 * u), o);
            __m512 v = _mm512_cvtepi32_ps(a);
            if (fo->xs) v = _mm512_mul_ps(v, xs); /* A8W4 passes none: times 1 is skipped */
            v = _mm512_mul_ps(v, _mm512_loadu_ps(fo->ws + 16 * u));
            if (!fo->first) v = _mm512_add_ps(_mm512_loadu_ps(d + 16 * u), v);
            _mm512_storeu_ps(d + 16 * u, v);
        }
    }
}

#define TILE_FN(R, U)                                                                            \
    static void tile_##R##x##U(int64_t kq, const int8_t *x, int64_t ldx, const uint8_t *wp,     \
                               int64_t wstep, int32_t *acc, int64_t ldacc, int accumulate)       \
    {                                                                                            \
        tile(0, 0, R, U, kq, x, ldx, wp, wstep, NULL, acc, ldacc, accumulate);                         \
    }                                                                                            \
    static void tile4_##R##x##U(int64_t kq, const int8_t *x, int64_t ldx, const uint8_t *wp,    \
                                int64_t wstep, int32_t *acc, int64_t ldacc, int accumulate)      \
    {                                                                                            \
        tile(1, PREFETCH, R, U, kq, x, ldx, wp, wstep, NULL, acc, ldacc, accumulate);                         \
    }                                                                                            \
    static void tilec_##R##x##U(int64_t kq, const int8_t *x, int64_t ldx, const uint8_t *wp,    \
                                int64_t wstep, const uint8_t *tbl, int32_t *acc, int64_t ldacc,  \
                                int accumulate)                                                  \
    {                                                                                            \
        tile(2, PREFETCH, R, U, kq, x, ldx, wp, wstep, tbl, acc, ldacc, accumulate);                    \
    }                                                                                            \
    static void tilep_##R##x##U(int64_t kq, const int8_t *x, int64_t ldx, const uint8_t *wp,    \
                                int64_t wstep, int64_t ahead, int32_t *acc, int64_t ldacc,       \
                                int accumulate)                                                  \
    {                                                                                            \
        tile(0, ahead, R, U, kq, x, ldx, wp, wstep, NULL, acc, ldacc, accumulate);            \
    }                                                                                            \
    static void tilef_##R##x##U(int64_t kq, const int8_t *x, int64_t ldx, const uint8_t *wp,    \
                                int64_t wstep, const fold_to *fo)                                \
    {                                                                                            \
        int32_t t[R * 64] __attribute__((aligned(64)));                                          \
        tile(0, PREFETCH, R, U, kq, x, ldx, wp, wstep, NULL, t, 64, 0);                                       \
        fold_tile(R, U, t, fo);                                                                  \
    }
#define TILE_ROW(R) TILE_FN(R, 1) TILE_FN(R, 2) TILE_FN(R, 3) TILE_FN(R, 4)
TILE_ROW(1) TILE_ROW(2) TILE_ROW(3) TILE_ROW(4) TILE_ROW(5) TILE_ROW(6)

typedef void (*tile_fn)(int64_t, const int8_t *, int64_t, const uint8_t *, int64_t, int32_t *,
                        int64_t, int);
#define ROW_PTRS(R) {tile_##R##x1, tile_##R##x2, tile_##R##x3, tile_##R##x4}
static const tile_fn tiles[MR][4] = {ROW_PTRS(1), ROW_PTRS(2), ROW_PTRS(3),
                                     ROW_PTRS(4), ROW_PTRS(5), ROW_PTRS(6)};
#define ROW4_PTRS(R) {tile4_##R##x1, tile4_##R##x2, tile4_##R##x3, tile4_##R##x4}
static const tile_fn tiles4[MR][4] = {ROW4_PTRS(1), ROW4_PTRS(2), ROW4_PTRS(3),
                                      ROW4_PTRS(4), ROW4_PTRS(5), ROW4_PTRS(6)};
typedef void (*tilep_fn)(int64_t, const int8_t *, int64_t, const uint8_t *, int64_t, int64_t,
                         int32_t *, int64_t, int);
#define ROWP_PTRS(R) {tilep_##R##x1, tilep_##R##x2, tilep_##R##x3, tilep_##R##x4}
static const tilep_fn tilesp[MR][4] = {ROWP_PTRS(1), ROWP_PTRS(2), ROWP_PTRS(3),
                                       ROWP_PTRS(4), ROWP_PTRS(5), ROWP_PTRS(6)};

typedef void (*tilec_fn)(int64_t, const int8_t *, int64_t, const uint8_t *, int64_t,
                         const uint8_t *, int32_t *, int64_t, int);
#define ROWC_PTRS(R) {tilec_##R##x1, tilec_##R##x2, tilec_##R##x3, tilec_##R##x4}
static const tilec_fn tilesc[MR][4] = {ROWC_PTRS(1), ROWC_PTRS(2), ROWC_PTRS(3),
                                       ROWC_PTRS(4), ROWC_PTRS(5), ROWC_PTRS(6)};

typedef void (*tilef_fn)(int64_t, const int8_t *, int64_t, const uint8_t *, int64_t,
                         const fold_to *);
#define ROWF_PTRS(R) {tilef_##R##x1, tilef_##R##x2, tilef_##R##x3, tilef_##R##x4}
static const tilef_fn tilesf[MR][4] = {ROWF_PTRS(1), ROWF_PTRS(2), ROWF_PTRS(3),
                                       ROWF_PTRS(4), ROWF_PTRS(5), ROWF_PTRS(6)};

/* gemm of a whole K group folded at once (gmm_fast.h): otherwise the int32 tile is stored into
 * the block's accumulators after every K chunk and folded in a second pass per group. A whole
 * group streams its weights from L2, so the weight prefetch is on. */
static void gemm_fold_avx512(int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx,
                             const uint8_t *wp, int64_t wstep, const int32_t *xoff,
                             int64_t xoff_stride, const float *xs, const float *ws, float *f,
                             int64_t ldf, int first)
{
    fold_to fo = {xoff, xoff_stride, xs, ws, f, ldf, first};
    tilesf[mr - 1][nu - 1](kq, x, ldx, wp, wstep, &fo);
}

/* gemm that prefetches `ahead` bytes past the weight stream (prepacked int8 read in place). */
static void gemm_pf_avx512(int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx,
                           const uint8_t *wp, int64_t wstep, int64_t ahead, int32_t *acc,
                           int64_t ldacc, int accumulate)
{
    tilesp[mr - 1][nu - 1](kq, x, ldx, wp, wstep, ahead, acc, ldacc, accumulate);
}

/* gemm on prepacked int4 steps (32 bytes a unit, unit u at wp + 32 u), expanded in registers:
 * no per-call expansion pass, the weights stream once at half the bytes. */
static void gemm_i4_avx512(int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx,
                           const uint8_t *wp, int64_t wstep, int32_t *acc, int64_t ldacc,
                           int accumulate)
{
    tiles4[mr - 1][nu - 1](kq, x, ldx, wp, wstep, acc, ldacc, accumulate);
}

/* gemm on prepacked codes (gmm_fast.h gemm_c4): gemm_i4's stream, one vpshufb more a vector. */
static void gemm_c4_avx512(int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx,
                           const uint8_t *wp, int64_t wstep, const uint8_t *tbl, int32_t *acc,
                           int64_t ldacc, int accumulate)
{
    tilesc[mr - 1][nu - 1](kq, x, ldx, wp, wstep, tbl, acc, ldacc, accumulate);
}

static void gemm_avx512(int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx,
                        const uint8_t *wp, int64_t wstep, int32_t *acc, int64_t ldacc,
                        int accumulate)
{
    tiles[mr - 1][nu - 1](kq, x, ldx, wp, wstep, acc, ldacc, accumulate);
}

const qmoe_gemm_isa qmoe_isa_avx512_vnni = {
    .name = "avx512_vnni",
    .kernel_id = QMOE_KERNEL_AVX512_VNNI,
    .mr = MR,
    .nu = 4,
    .gemm = gemm_avx512,
    .rearrange = qmoe_rearrange_avx512,
    .fold = qmoe_fold_avx512,
    .gemm_nz = qmoe_gemm_nz_avx512,
    .gemm_i4 = gemm_i4_avx512,
    .gemm_c4 = gemm_c4_avx512,
    .gemm_pf = gemm_pf_avx512,
    .gemm_fold = gemm_fold_avx512,
    .gemm_groups = qmoe_gemm_groups_avx512,
    .expand_i4 = qmoe_expand_i4_avx512,
    .expand_c4 = qmoe_expand_c4_avx512,
    .expand_b6 = qmoe_expand_b6_avx512,
    .groups_b6 = 1,
    .to_bf16 = qmoe_f32_to_bf16_avx512,
    .half_to_f32 = qmoe_half_to_f32_avx512,
    .widen_s8 = qmoe_widen_s8_avx512,
    .peak_loop = qmoe_peak_avx512vnni,
};
#endif
