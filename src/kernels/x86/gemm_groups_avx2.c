/*
 * AVX2 micro-kernel for small per-group scale groups (ggml's blocks of 32; gmm_fast.h,
 * gemm_groups): each group's int32 products go from registers straight into the fold, where gemm
 * then fold stored the int32 tile, called the fold per group and reloaded it (int4 groups of 32
 * ran 1.75x the per-channel time on this kernel; docs/performance.md). The products are the AVX2
 * gemm's (gemm_s8_avx2.c): bytes <= 15 (int4 weights, prepacked or expanded) one vpmaddubsw per
 * product summed in int16 for up to RUN steps, int8 bytes one vpmaddubsw a product on the
 * weights' signs (s8_sign_avx2.h), split into nibbles only in a step with a weight -128. Both 8-column
 * halves of a unit at once (4 rows x 2 halves of sums in 8 ymm, each x broadcast serving all
 * their products); the float tile goes through L1 once a group. Group after group, every unit of
 * the call in each, so the weights are read in memory order. The fold is fold's
 * (epilogue_avx2.c): v = (float)(acc - xoff) * xs * ws, f = first ? v : f + v.
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <string.h>

#include "kernels/gmm_fast.h"
#include "kernels/x86/expand_avx2.h"
#include "kernels/x86/parts.h"
#include "kernels/x86/s8_sign_avx2.h"

#if defined(__GNUC__) && !defined(__clang__)
/* gcc 12's partial redundancy elimination has the int16 sums change registers every step: 8
 * vmovdqa beside 8 vpmaddubsw in the groups-of-32 loop (clang: none). Without it: none. */
#pragma GCC optimize("no-tree-pre")
#endif

enum { MR = 4, RUN = 8 };
enum { PREFETCH = 8192 }; /* bytes ahead of the weight stream, as gemm_pf (gemm_s8_avx2.c) */

/* The whole step (every unit of the panel, wstep bytes) PREFETCH ahead, by the group's first
 * unit: each unit reads only its 32 or 64 bytes of a step, and the others find the lines in
 * cache. */
static inline __attribute__((always_inline)) void ahead(const uint8_t *wp, int64_t wstep)
{
    for (int64_t o = 0; o < wstep; o += 64) _mm_prefetch((const char *)wp + PREFETCH + o, _MM_HINT_T0);
}

/* Group g + WS_AHEAD's scale row, the panel's columns from this unit on (ws_stride values):
 * the scales are a stream of their own, a row per group, of which a call reads 16 values, and
 * the one-row kernel waited on them (as the AVX-512 one did: gemm_groups_avx512vnni.c). As an
 * address: past the scales' end it is only ever prefetched, which cannot fault. */
enum { WS_AHEAD = 8 };
static inline __attribute__((always_inline)) void ws_ahead(const void *ws, int kind, int64_t stride,
                                                           int64_t g)
{
    const uintptr_t row = (uintptr_t)qmoe_ws_bytes(kind) * (uintptr_t)stride;
    const uintptr_t p = (uintptr_t)ws + (uintptr_t)(g + WS_AHEAD) * row;
    for (uintptr_t o = 0; o < row; o += 64) _mm_prefetch((const char *)(p + o), _MM_HINT_T0);
}

/* w4: 0 int8 bytes (split), 1 prepacked int4 steps (nibbles), 2 prepacked codes of tbl (looked
 * up, then split), 3 int8 steps of bytes <= 15 (expanded int4); 4 (prepacked 6-bit steps) goes
 * through b6_products */
static inline __attribute__((always_inline)) __m256i half_bytes(int w4, const uint8_t *wp, int h,
                                                                __m256i tb)
{
    const __m256i nib = _mm256_set1_epi8(0x0F);
    if (w4 == 0 || w4 == 3) return _mm256_loadu_si256((const __m256i *)(const void *)(wp + 32 * h));
    __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)wp);
    __m256i n = _mm256_and_si256(h ? _mm256_srli_epi16(v, 4) : v, nib);
    return w4 == 2 ? _mm256_shuffle_epi8(tb, n) : n;
}

/* 8 scales of group g at column c: float32, float16 / bfloat16 bits, or a block's base times its
 * int8 multiplier (the driver's widened values, exactly) */
static inline __attribute__((always_inline)) __m256 scales8(const void *ws, int kind, int64_t at,
                                                            const float *base)
{
    if (kind == 0) return _mm256_loadu_ps((const float *)ws + at);
    if (kind == 3) {
        __m128i q = _mm_loadl_epi64((const __m128i *)(const void *)((const int8_t *)ws + at));
        return _mm256_mul_ps(_mm256_loadu_ps(base), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
    }
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)ws + at));
    return kind == 1 ? _mm256_cvtph_ps(h)
                     : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

typedef struct groups_args {
    int64_t ng, kq;
    const int8_t *x;
    int64_t ldx;
    const uint8_t *wp; /* unit 0, group 0 */
    int64_t ustep;     /* bytes from one unit's step to the next unit's */
    const uint8_t *tbl;
    int64_t wstep;
    const int32_t *xoff;
    int64_t xoff_stride;
    const float *xs;
    const void *ws; /* column 0, group 0 */
    int ws_kind;
    int64_t ws_stride;
    const float *wsb; /* ws_kind 3: group 0's block bases at column 0 */
    int64_t wblk, wb0;
    float *f;
    int64_t ldf;
    int nu, first;
} groups_args;

/* The fold of group g's int32 sums c at columns [col, col + 8), rows r < mr. */
static inline __attribute__((always_inline)) void fold(int mr, int64_t col, int64_t g,
                                                       const __m256i *c, const groups_args *a)
{
    const float *base =
        a->ws_kind == 3 ? a->wsb + (a->wb0 + g) / a->wblk * a->ws_stride + col : NULL;
    const __m256 s = scales8(a->ws, a->ws_kind, g * a->ws_stride + col, base);
    for (int r = 0; r < mr; r++) {
        float *fr = a->f + r * a->ldf + col;
        __m256 v = _mm256_cvtepi32_ps(
            _mm256_sub_epi32(c[r], _mm256_set1_epi32(a->xoff[r * a->xoff_stride + g])));
        if (a->xs) v = _mm256_mul_ps(v, _mm256_set1_ps(a->xs[r]));
        v = _mm256_mul_ps(v, s);
        if (!(a->first && g == 0)) v = _mm256_add_ps(_mm256_loadu_ps(fr), v);
        _mm256_storeu_ps(fr, v);
    }
}

/* Half h of one unit over one group of more than RUN steps of int4 values: int16 sums of RUN
 * steps at a time, widened into c. lead: prefetch every unit's step ahead. */
static inline __attribute__((always_inline)) void half_products(int w4, int mr, int h, int lead,
                                                                const uint8_t *wp, const int8_t *xg,
                                                                __m256i *c, const groups_args *a)
{
    const __m256i one = _mm256_set1_epi16(1), none = _mm256_setzero_si256();
    for (int r = 0; r < mr; r++) c[r] = none;
    for (int64_t q0 = 0; q0 < a->kq; q0 += RUN) {
        const int64_t n = a->kq - q0 < RUN ? a->kq - q0 : RUN;
        __m256i s[MR];
        for (int r = 0; r < mr; r++) s[r] = none;
        for (int64_t q = q0; q < q0 + n; q++, wp += a->wstep) {
            if (lead) ahead(wp, a->wstep);
            const __m256i w = half_bytes(w4, wp, h, none);
            for (int r = 0; r < mr; r++) {
                int32_t xv;
                memcpy(&xv, xg + r * a->ldx + 4 * q, sizeof xv);
                s[r] = _mm256_add_epi16(s[r], _mm256_maddubs_epi16(w, _mm256_set1_epi32(xv)));
            }
        }
        for (int r = 0; r < mr; r++) c[r] = _mm256_add_epi32(c[r], _mm256_madd_epi16(s[r], one));
    }
}

/* int4 values of a group of at most RUN steps (ggml's 32 and 16), both halves at once: each x
 * broadcast serves two products, the int16 sums of 4 rows x 2 halves in 8 registers (named, not
 * an array: gcc then keeps each in one register). */
static inline __attribute__((always_inline)) void narrow_products(int w4, int mr, int lead,
                                                                  const uint8_t *wp,
                                                                  const int8_t *xg, __m256i *c0,
                                                                  __m256i *c1, const groups_args *a)
{
    const __m256i one = _mm256_set1_epi16(1), none = _mm256_setzero_si256();
    const int8_t *x0 = xg, *x1 = x0 + a->ldx, *x2 = x1 + a->ldx, *x3 = x2 + a->ldx;
    __m256i s00 = none, s01 = none, s10 = none, s11 = none, s20 = none, s21 = none, s30 = none,
            s31 = none;
    for (int64_t q = 0; q < a->kq; q++, wp += a->wstep) {
        if (lead) ahead(wp, a->wstep);
        const __m256i w0 = half_bytes(w4, wp, 0, none), w1 = half_bytes(w4, wp, 1, none);
#define ROW(R)                                                                                   \
    if (mr > R) {                                                                                \
        int32_t xv;                                                                              \
        memcpy(&xv, x##R + 4 * q, sizeof xv);                                                    \
        const __m256i b = _mm256_set1_epi32(xv);                                                 \
        s##R##0 = _mm256_add_epi16(s##R##0, _mm256_maddubs_epi16(w0, b));                        \
        s##R##1 = _mm256_add_epi16(s##R##1, _mm256_maddubs_epi16(w1, b));                        \
    }
        ROW(0) ROW(1) ROW(2) ROW(3)
#undef ROW
    }
    c0[0] = _mm256_madd_epi16(s00, one), c1[0] = _mm256_madd_epi16(s01, one);
    c0[1] = _mm256_madd_epi16(s10, one), c1[1] = _mm256_madd_epi16(s11, one);
    c0[2] = _mm256_madd_epi16(s20, one), c1[2] = _mm256_madd_epi16(s21, one);
    c0[3] = _mm256_madd_epi16(s30, one), c1[3] = _mm256_madd_epi16(s31, one);
}

/* 6-bit values of a group, both halves at once: the values v (0..63, the bytes less 96) go to
 * vpmaddubsw as they are (a pair at most 2 * 63 * 128 = 16128, two steps' pairs add up in int16
 * without saturating), so neither the signs' move nor the weight -128 check of int8 bytes; the
 * int32 sums start at 96 times each row's x sum over the group, giving the bytes' products. */
static inline __attribute__((always_inline)) void b6_products(int mr, int lead, const uint8_t *wp,
                                                              const int8_t *xg, const int32_t *off,
                                                              __m256i *c0, __m256i *c1,
                                                              const groups_args *a)
{
    const __m256i one = _mm256_set1_epi16(1), none = _mm256_setzero_si256();
    const int8_t *xr[MR] = {xg, xg + a->ldx, xg + 2 * a->ldx, xg + 3 * a->ldx};
    for (int r = 0; r < mr; r++) c0[r] = c1[r] = _mm256_set1_epi32(off[r] / 128 * 96);
    for (int64_t q0 = 0; q0 < a->kq; q0 += 2) {
        const int64_t n = a->kq - q0 < 2 ? a->kq - q0 : 2;
        __m256i s0[MR], s1[MR];
        for (int r = 0; r < mr; r++) s0[r] = s1[r] = none;
        for (int64_t q = q0; q < q0 + n; q++, wp += a->wstep) {
            if (lead) ahead(wp, a->wstep);
            __m256i v0, v1;
            qmoe_b6_values_ymm(wp, &v0, &v1);
            for (int r = 0; r < mr; r++) {
                int32_t xv;
                memcpy(&xv, xr[r] + 4 * q, sizeof xv);
                const __m256i b = _mm256_set1_epi32(xv);
                s0[r] = _mm256_add_epi16(s0[r], _mm256_maddubs_epi16(v0, b));
                s1[r] = _mm256_add_epi16(s1[r], _mm256_maddubs_epi16(v1, b));
            }
        }
        for (int r = 0; r < mr; r++) {
            c0[r] = _mm256_add_epi32(c0[r], _mm256_madd_epi16(s0[r], one));
            c1[r] = _mm256_add_epi32(c1[r], _mm256_madd_epi16(s1[r], one));
        }
    }
}

/* int8 bytes (or codes looked up) of a group, both halves at once, one vpmaddubsw a product on
 * the weights' signs, or the nibble split for a step holding a weight -128 (s8_sign_avx2.h):
 * the int32 sums of 4 rows x 2 halves in 8 registers, started at off (128 * each row's x sum
 * over the group), each x broadcast serving both halves. */
static inline __attribute__((always_inline)) void split_products(int w4, int mr, int lead,
                                                                 const uint8_t *wp, const int8_t *xg,
                                                                 __m256i tb, const int32_t *off,
                                                                 __m256i *c0, __m256i *c1,
                                                                 const groups_args *a)
{
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    const int8_t *x0 = xg, *x1 = x0 + a->ldx, *x2 = x1 + a->ldx, *x3 = x2 + a->ldx;
    __m256i c00 = _mm256_set1_epi32(off[0]), c10 = _mm256_set1_epi32(off[1]),
            c20 = _mm256_set1_epi32(off[2]), c30 = _mm256_set1_epi32(off[3]);
    __m256i c01 = c00, c11 = c10, c21 = c20, c31 = c30;
    for (int64_t q = 0; q < a->kq; q++, wp += a->wstep) {
        if (lead) ahead(wp, a->wstep);
        const __m256i by0 = half_bytes(w4, wp, 0, tb), by1 = half_bytes(w4, wp, 1, tb);
        if (__builtin_expect(qmoe_s8_signable(by0, by1), 1)) {
            const __m256i w0 = _mm256_xor_si256(by0, flip), w1 = _mm256_xor_si256(by1, flip);
#define ROW(R)                                                                                   \
    if (mr > R) {                                                                                \
        int32_t xv;                                                                              \
        memcpy(&xv, x##R + 4 * q, sizeof xv);                                                    \
        const __m256i b = _mm256_set1_epi32(xv), ax = _mm256_abs_epi8(b);                        \
        c##R##0 = _mm256_add_epi32(c##R##0, qmoe_s8_dot(ax, b, w0));                             \
        c##R##1 = _mm256_add_epi32(c##R##1, qmoe_s8_dot(ax, b, w1));                             \
    }
            ROW(0) ROW(1) ROW(2) ROW(3)
#undef ROW
        } else {
#define ROW(R)                                                                                   \
    if (mr > R) {                                                                                \
        int32_t xv;                                                                              \
        memcpy(&xv, x##R + 4 * q, sizeof xv);                                                    \
        const __m256i b = _mm256_set1_epi32(xv), o = qmoe_s8_dot_off(b);                         \
        c##R##0 = _mm256_add_epi32(c##R##0, _mm256_sub_epi32(qmoe_s8_dot_split(b, by0), o));    \
        c##R##1 = _mm256_add_epi32(c##R##1, _mm256_sub_epi32(qmoe_s8_dot_split(b, by1), o));    \
    }
            ROW(0) ROW(1) ROW(2) ROW(3)
#undef ROW
        }
    }
    c0[0] = c00, c1[0] = c01, c0[1] = c10, c1[1] = c11;
    c0[2] = c20, c1[2] = c21, c0[3] = c30, c1[3] = c31;
}

/* Group after group, and in each every unit: the weights are read in their order in memory
 * (a group's steps of all units are one contiguous run), as gemm then fold read them. */
static inline __attribute__((always_inline)) void tile(int w4, int mr, const groups_args *a)
{
    const __m256i tb =
        w4 == 2 ? _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)a->tbl))
                : _mm256_setzero_si256();
    const int both = (w4 == 1 || w4 == 3) && a->kq <= RUN;
    for (int64_t g = 0; g < a->ng; g++) {
        ws_ahead(a->ws, a->ws_kind, a->ws_stride, g);
        const int8_t *xg = a->x + 4 * g * a->kq;
        int32_t off[MR] = {0, 0, 0, 0}; /* int8: 128 * each row's x sum over the group */
        if (w4 == 0 || w4 == 2 || w4 == 4)
            for (int r = 0; r < mr; r++) off[r] = qmoe_s8_off(xg + r * a->ldx, 4 * a->kq);
        for (int u = 0; u < a->nu; u++) {
            const uint8_t *wp = a->wp + u * a->ustep + g * a->kq * a->wstep;
            __m256i c0[MR], c1[MR];
            if (both) {
                narrow_products(w4, mr, u == 0, wp, xg, c0, c1, a);
            } else if (w4 == 4) {
                b6_products(mr, u == 0, wp, xg, off, c0, c1, a);
            } else if (w4 == 0 || w4 == 2) {
                split_products(w4, mr, u == 0, wp, xg, tb, off, c0, c1, a);
            } else { /* int4 groups of more than RUN steps */
                half_products(w4, mr, 0, u == 0, wp, xg, c0, a);
                half_products(w4, mr, 1, 0, wp, xg, c1, a);
            }
            fold(mr, QMOE_PK_UNIT * u, g, c0, a);
            fold(mr, QMOE_PK_UNIT * u + 8, g, c1, a);
        }
    }
}

#define TILE_FN(W, R)                                                                            \
    static void tile_##W##_##R(const groups_args *a) { tile(W, R, a); }
#define TILE_FNS(W) TILE_FN(W, 1) TILE_FN(W, 2) TILE_FN(W, 3) TILE_FN(W, 4)
TILE_FNS(0) TILE_FNS(1) TILE_FNS(2) TILE_FNS(3) TILE_FNS(4)

typedef void (*tile_fn)(const groups_args *);
static const tile_fn tiles[5][MR] = {{tile_0_1, tile_0_2, tile_0_3, tile_0_4},
                                     {tile_1_1, tile_1_2, tile_1_3, tile_1_4},
                                     {tile_2_1, tile_2_2, tile_2_3, tile_2_4},
                                     {tile_3_1, tile_3_2, tile_3_3, tile_3_4},
                                     {tile_4_1, tile_4_2, tile_4_3, tile_4_4}};

void qmoe_gemm_groups_avx2(int mr, int nu, int i4, const uint8_t *tbl, int64_t ng, int64_t kq,
                           const int8_t *x, int64_t ldx, const uint8_t *wp, int64_t wstep,
                           const int32_t *xoff, int64_t xoff_stride, const float *xs,
                           const void *ws, int ws_kind, int64_t ws_stride, const float *wsb,
                           int64_t wblk, int64_t wb0, float *f, int64_t ldf, int first)
{
    const int64_t ustep = i4 == 4 ? 48 : i4 == 1 || i4 == 2 ? QMOE_PK_STEP / 2 : QMOE_PK_STEP;
    for (int r = 0; r < mr; r += MR) {
        const int rows = mr - r < MR ? mr - r : MR;
        groups_args a = {ng, kq, x + r * ldx, ldx, wp, ustep, tbl, wstep,
                         xoff + r * xoff_stride, xoff_stride, xs ? xs + r : NULL, ws, ws_kind,
                         ws_stride, wsb, wblk, wb0, f + r * ldf, ldf, nu, first};
        tiles[i4][rows - 1](&a);
    }
}
#endif
