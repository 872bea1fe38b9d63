/*
 * AVX-512 VNNI micro-kernel for small per-group scale groups (ggml's blocks of 32): several
 * whole K groups of one micro-tile, each group's exact int32 products folded at once into float
 * accumulators that stay in registers across the groups (gmm_fast.h, gemm_groups). gemm_fold
 * stores its int32 tile and reloads and stores the float tile after every group, which with 8
 * steps a group cost as much as the products. Sub-tiles of 12 int32 and 12 float accumulators
 * (with the weight vectors and a broadcast they fit the 32 zmm registers; shapes below). What
 * is left above the products is the fold's arithmetic itself (docs/performance.md).
 * The fold is fold's arithmetic in its order, group after group: v = (float)(acc - xoff) * xs *
 * ws, f = f + v; a call that starts the row starts f at -0.0, and -0.0 + v is v for every v,
 * the sign of a zero and a NaN's payload included (fold's f = v).
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <string.h>

#include "kernels/gmm_fast.h"
#include "kernels/x86/expand_avx512.h"
#include "kernels/x86/group_scales_avx512.h"
#include "kernels/x86/parts.h"

/* Sub-tiles, rows x units: int8 3 x 4 (a step's four units loaded whole); int4 (and codes, 6
 * bits) 6 x 2, split by units, since each unit's int4 steps are expanded once per sub-tile that
 * reads them: a split by rows (3 + 1 for decode's 4) expanded them twice and ran slower than the
 * per-group fold. */
enum { SR8 = 3, SU8 = 4, SR4 = 6, SU4 = 2 };
enum { PREFETCH = 8192 };    /* bytes ahead of the weight stream, as gemm_pf (into L2: parts.h) */
/* Groups ahead whose scales the first sub-tile prefetches, for all units of the call (the
 * others find them in cache, as the weights): the scales are a stream of their own, a row of
 * the panel's [G][QMOE_PP_LD] block a group, which the hardware did not fetch in time: float32
 * scales made the one-row int4 kernel 2.2x slower than float16 ones, with 64% of its samples on
 * the scale load (docs/performance.md). Eight groups are 8-16 KB of the call's weight stream
 * (int4 / int8, 4 units), about the weights' own PREFETCH distance; 16 measured no better. */
enum { WS_AHEAD = 8 };

typedef struct groups_args {
    int64_t ng, kq;
    const int8_t *x;
    int64_t ldx;
    const uint8_t *wp; /* unit 0 of the sub-tile */
    const uint8_t *tbl; /* codes (i4 2): their table */
    int64_t wstep;
    const int32_t *xoff;
    int64_t xoff_stride;
    const float *xs;
    const void *ws; /* unit 0 of the sub-tile, group 0: float32, 16 bits (ws_kind 1, 2) or int8 (3) */
    int ws_kind;
    int64_t ws_stride;
    const float *wsb; /* ws_kind 3: the bases of group 0's block, unit 0 of the sub-tile */
    int64_t wblk, wb0; /* ws_kind 3: groups per block; group 0's place in its block */
    float *f;
    int64_t ldf;
    int64_t pf;    /* bytes of each step to prefetch: the whole step */
    int64_t ahead; /* how far ahead: PREFETCH in the first sub-tile, the next chunk in the others */
    int64_t wspf;  /* bytes of a group's scales to prefetch WS_AHEAD groups ahead (0: none) */
    int first;
} groups_args;

static inline __attribute__((always_inline)) void sub_tile(int i4, int first, int mr, int nu,
                                                           const groups_args *a)
{
    /* written for up to 6 rows x 4 units; a table instantiates at most 12 accumulators of them
     * (the others are dead code) */
    const int8_t *x0 = a->x, *x1 = x0 + a->ldx, *x2 = x1 + a->ldx, *x3 = x2 + a->ldx,
                 *x4 = x3 + a->ldx, *x5 = x4 + a->ldx;
#define EACH_ROW(M, R) M(R, 0) M(R, 1) M(R, 2) M(R, 3)
#define EACH(M)                                                                                  \
    EACH_ROW(M, 0) EACH_ROW(M, 1) EACH_ROW(M, 2) EACH_ROW(M, 3) EACH_ROW(M, 4) EACH_ROW(M, 5)
#define DECL_F(R, U) __m512 f##R##U = _mm512_set1_ps(-0.0f);
    EACH(DECL_F)
#undef DECL_F
#define LOAD(R, U)                                                                               \
    if (!first && mr > R && nu > U) f##R##U = _mm512_loadu_ps(a->f + R * a->ldf + 16 * U);
    EACH(LOAD)
#undef LOAD
    const uint8_t *wp = a->wp;
    const int64_t pf = a->pf; /* at most a step of 4 units: 256 bytes */
    const uint8_t *pp = wp + a->ahead;
    const int64_t ustep = i4 == 4 ? 48 : i4 ? 32 : 64;
    const __m512i tb = i4 == 2 ? qmoe_code_table_zmm(a->tbl) : _mm512_setzero_si512();
    /* as an address: past the block's end it is only ever prefetched, which cannot fault */
    const uintptr_t wsb = (uintptr_t)(qmoe_ws_bytes(a->ws_kind) * a->ws_stride);
    uintptr_t wsp = (uintptr_t)a->ws + WS_AHEAD * wsb;
    for (int64_t g = 0; g < a->ng; g++) {
        const int32_t *xo = a->xoff + g;
        for (int64_t o = 0; o < a->wspf; o += 64)
            _mm_prefetch((const char *)(wsp + (uintptr_t)o), QMOE_AVX512_WEIGHT_HINT);
        wsp += wsb;
#define DECL_C(R, U) __m512i c##R##U = _mm512_setzero_si512();
        EACH(DECL_C)
#undef DECL_C
        int64_t k0 = 4 * g * a->kq;
        for (int64_t q = 0; q < a->kq; q++) {
            if (pf > 0) _mm_prefetch((const char *)pp, QMOE_AVX512_WEIGHT_HINT);
            if (pf > 64) _mm_prefetch((const char *)(pp + 64), QMOE_AVX512_WEIGHT_HINT);
            if (pf > 128) _mm_prefetch((const char *)(pp + 128), QMOE_AVX512_WEIGHT_HINT);
            if (pf > 192) _mm_prefetch((const char *)(pp + 192), QMOE_AVX512_WEIGHT_HINT);
            pp += a->wstep;
            __m512i w0, w1, w2, w3;
            if (i4 == 4) {
                w0 = qmoe_expand_b6_zmm(wp), w1 = w2 = w3 = w0;
                if (nu > 1) w1 = qmoe_expand_b6_zmm(wp + ustep);
                if (nu > 2) w2 = qmoe_expand_b6_zmm(wp + 2 * ustep);
                if (nu > 3) w3 = qmoe_expand_b6_zmm(wp + 3 * ustep);
            } else if (i4 == 2) {
                w0 = qmoe_expand_c4_zmm(wp, tb), w1 = w2 = w3 = w0;
                if (nu > 1) w1 = qmoe_expand_c4_zmm(wp + ustep, tb);
                if (nu > 2) w2 = qmoe_expand_c4_zmm(wp + 2 * ustep, tb);
                if (nu > 3) w3 = qmoe_expand_c4_zmm(wp + 3 * ustep, tb);
            } else if (i4) {
                w0 = qmoe_expand_i4_zmm(wp), w1 = w2 = w3 = w0;
                if (nu > 1) w1 = qmoe_expand_i4_zmm(wp + ustep);
                if (nu > 2) w2 = qmoe_expand_i4_zmm(wp + 2 * ustep);
                if (nu > 3) w3 = qmoe_expand_i4_zmm(wp + 3 * ustep);
            } else {
                w0 = _mm512_loadu_si512(wp), w1 = w2 = w3 = w0;
                if (nu > 1) w1 = _mm512_loadu_si512(wp + ustep);
                if (nu > 2) w2 = _mm512_loadu_si512(wp + 2 * ustep);
                if (nu > 3) w3 = _mm512_loadu_si512(wp + 3 * ustep);
            }
            wp += a->wstep;
#define ROW(R)                                                                                   \
    if (mr > R) {                                                                                \
        int32_t xv;                                                                              \
        memcpy(&xv, x##R + k0 + 4 * q, sizeof xv);                                               \
        __m512i b = _mm512_set1_epi32(xv);                                                       \
        c##R##0 = _mm512_dpbusd_epi32(c##R##0, w0, b);                                           \
        if (nu > 1) c##R##1 = _mm512_dpbusd_epi32(c##R##1, w1, b);                               \
        if (nu > 2) c##R##2 = _mm512_dpbusd_epi32(c##R##2, w2, b);                               \
        if (nu > 3) c##R##3 = _mm512_dpbusd_epi32(c##R##3, w3, b);                               \
    }
            ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5)
#undef ROW
        }
        /* fold this group: (float)(acc - xoff) * xs * ws, left to right; then f + v. A unit's
         * scales are loaded (and widened) once for all rows, one unit at a time (registers), and
         * xs's test is taken once a unit, not once an accumulator (both cost as much as the
         * fold's own arithmetic: a few % of the loop in L1, docs/performance.md) */
        const int64_t ws_at = g * a->ws_stride;
        const float *base = a->ws_kind == 3 ? a->wsb + (a->wb0 + g) / a->wblk * a->ws_stride : NULL;
#define FOLD(R, U, XS)                                                                           \
    if (mr > R) {                                                                                \
        __m512i o = _mm512_set1_epi32(xo[R * a->xoff_stride]);                                   \
        __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(c##R##U, o));                             \
        if (XS) v = _mm512_mul_ps(v, _mm512_set1_ps(a->xs[R])); /* a broadcast operand */        \
        f##R##U = _mm512_add_ps(f##R##U, _mm512_mul_ps(v, s));                                   \
    }
#define FOLD_UNIT(U)                                                                             \
    if (nu > U) {                                                                                \
        const __m512 s = a->ws_kind == 3 ? qmoe_ws_block_load(a->ws, base, ws_at + 16 * U, 16 * U)      \
                                         : qmoe_ws_load(a->ws, a->ws_kind, ws_at + 16 * U);           \
        if (a->xs) {                                                                             \
            FOLD(0, U, 1) FOLD(1, U, 1) FOLD(2, U, 1) FOLD(3, U, 1) FOLD(4, U, 1) FOLD(5, U, 1)  \
        } else {                                                                                 \
            FOLD(0, U, 0) FOLD(1, U, 0) FOLD(2, U, 0) FOLD(3, U, 0) FOLD(4, U, 0) FOLD(5, U, 0)  \
        }                                                                                        \
    }
        FOLD_UNIT(0) FOLD_UNIT(1) FOLD_UNIT(2) FOLD_UNIT(3)
#undef FOLD_UNIT
#undef FOLD
    }
#define OUT(R, U)                                                                                \
    if (mr > R && nu > U) _mm512_storeu_ps(a->f + R * a->ldf + 16 * U, f##R##U);
    EACH(OUT)
#undef OUT
#undef EACH
#undef EACH_ROW
}

#define SUB_FN(I4, FIRST, R, U)                                                                  \
    static void sub_##I4##FIRST##_##R##x##U(const groups_args *a) { sub_tile(I4, FIRST, R, U, a); }
#define SUB_ROW8(FIRST, R)                                                                       \
    SUB_FN(0, FIRST, R, 1) SUB_FN(0, FIRST, R, 2) SUB_FN(0, FIRST, R, 3) SUB_FN(0, FIRST, R, 4)
#define SUB_ROW4(FIRST, R) SUB_FN(1, FIRST, R, 1) SUB_FN(1, FIRST, R, 2)
#define SUB_ROWC(FIRST, R) SUB_FN(2, FIRST, R, 1) SUB_FN(2, FIRST, R, 2)
#define SUB_ROW6(FIRST, R) SUB_FN(4, FIRST, R, 1) SUB_FN(4, FIRST, R, 2)
#define SUB_ALL8(FIRST) SUB_ROW8(FIRST, 1) SUB_ROW8(FIRST, 2) SUB_ROW8(FIRST, 3)
#define SUB_ALL4(FIRST)                                                                          \
    SUB_ROW4(FIRST, 1) SUB_ROW4(FIRST, 2) SUB_ROW4(FIRST, 3) SUB_ROW4(FIRST, 4)                  \
    SUB_ROW4(FIRST, 5) SUB_ROW4(FIRST, 6)
#define SUB_ALLC(FIRST)                                                                          \
    SUB_ROWC(FIRST, 1) SUB_ROWC(FIRST, 2) SUB_ROWC(FIRST, 3) SUB_ROWC(FIRST, 4)                  \
    SUB_ROWC(FIRST, 5) SUB_ROWC(FIRST, 6)
#define SUB_ALL6(FIRST)                                                                          \
    SUB_ROW6(FIRST, 1) SUB_ROW6(FIRST, 2) SUB_ROW6(FIRST, 3) SUB_ROW6(FIRST, 4)                  \
    SUB_ROW6(FIRST, 5) SUB_ROW6(FIRST, 6)
SUB_ALL8(0) SUB_ALL8(1) SUB_ALL4(0) SUB_ALL4(1) SUB_ALLC(0) SUB_ALLC(1) SUB_ALL6(0) SUB_ALL6(1)

typedef void (*sub_fn)(const groups_args *);
#define PTRS8(FIRST, R)                                                                          \
    {sub_0##FIRST##_##R##x1, sub_0##FIRST##_##R##x2, sub_0##FIRST##_##R##x3, sub_0##FIRST##_##R##x4}
#define PTRS4(FIRST, R) {sub_1##FIRST##_##R##x1, sub_1##FIRST##_##R##x2}
#define PTRSC(FIRST, R) {sub_2##FIRST##_##R##x1, sub_2##FIRST##_##R##x2}
#define PTRS6(FIRST, R) {sub_4##FIRST##_##R##x1, sub_4##FIRST##_##R##x2}
static const sub_fn subs8[2][SR8][SU8] = {{PTRS8(0, 1), PTRS8(0, 2), PTRS8(0, 3)},
                                          {PTRS8(1, 1), PTRS8(1, 2), PTRS8(1, 3)}};
static const sub_fn subs4[2][SR4][SU4] = {
    {PTRS4(0, 1), PTRS4(0, 2), PTRS4(0, 3), PTRS4(0, 4), PTRS4(0, 5), PTRS4(0, 6)},
    {PTRS4(1, 1), PTRS4(1, 2), PTRS4(1, 3), PTRS4(1, 4), PTRS4(1, 5), PTRS4(1, 6)}};
static const sub_fn subsc[2][SR4][SU4] = {
    {PTRSC(0, 1), PTRSC(0, 2), PTRSC(0, 3), PTRSC(0, 4), PTRSC(0, 5), PTRSC(0, 6)},
    {PTRSC(1, 1), PTRSC(1, 2), PTRSC(1, 3), PTRSC(1, 4), PTRSC(1, 5), PTRSC(1, 6)}};

static const sub_fn subs6[2][SR4][SU4] = {
    {PTRS6(0, 1), PTRS6(0, 2), PTRS6(0, 3), PTRS6(0, 4), PTRS6(0, 5), PTRS6(0, 6)},
    {PTRS6(1, 1), PTRS6(1, 2), PTRS6(1, 3), PTRS6(1, 4), PTRS6(1, 5), PTRS6(1, 6)}};

void qmoe_gemm_groups_avx512(int mr, int nu, int i4, const uint8_t *tbl, int64_t ng, int64_t kq,
                             const int8_t *x, int64_t ldx, const uint8_t *wp, int64_t wstep, const int32_t *xoff,
                             int64_t xoff_stride, const float *xs, const void *ws, int ws_kind,
                             int64_t ws_stride, const float *wsb, int64_t wblk, int64_t wb0,
                             float *f, int64_t ldf, int first)
{
    const size_t es = qmoe_ws_bytes(ws_kind);
    if (i4 == 3) i4 = 0; /* bytes <= 15: the int8 steps' way */
    const int64_t ustep = i4 == 4 ? 48 : i4 ? 32 : 64;
    const int sr = i4 ? SR4 : SR8, su = i4 ? SU4 : SU8;
    for (int r = 0; r < mr; r += sr)
        for (int u = 0; u < nu; u += su) {
            int rows = mr - r < sr ? mr - r : sr, units = nu - u < su ? nu - u : su;
            /* The first sub-tile prefetches all units of each step PREFETCH ahead (the others
             * find them in cache); the others prefetch the next chunk's steps (a call covers
             * one chunk, the driver's next call the next one), so memory keeps streaming while
             * they reread this chunk from cache: decode's loop over DRAM did not overlap. */
            int lead = r == 0 && u == 0;
            groups_args a = {ng, kq, x + r * ldx, ldx, wp + u * ustep, tbl, wstep,
                             xoff + r * xoff_stride, xoff_stride, xs ? xs + r : NULL,
                             (const uint8_t *)ws + es * (size_t)(16 * u), ws_kind, ws_stride,
                             wsb ? wsb + 16 * u : NULL, wblk, wb0, f + r * ldf + 16 * u, ldf, nu * ustep,
                             lead ? PREFETCH - u * ustep : ng * kq * wstep - u * ustep,
                             lead ? (int64_t)es * 16 * nu : 0, first};
            if (i4 == 4) subs6[first != 0][rows - 1][units - 1](&a);
            else if (i4 == 2) subsc[first != 0][rows - 1][units - 1](&a);
            else if (i4) subs4[first != 0][rows - 1][units - 1](&a);
            else subs8[first != 0][rows - 1][units - 1](&a);
        }
}
#endif
