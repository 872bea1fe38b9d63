/*
 * AVX-512 VNNI micro-kernel for small per-group scale groups (ggml's blocks of 32): several
 * whole K groups of one micro-tile, each group's exact int32 products folded at once into float
 * accumulators that stay in registers across the groups (gmm_fast.h, gemm_groups). gemm_fold
 * stores its int32 tile and reloads and stores the float tile after every group, which with 8
 * steps a group cost as much as the products. Sub-tiles of up to 6 rows x 2 units: 12 int32 and
 * 12 float accumulators, 2 weight vectors and a broadcast fit the 32 zmm registers.
 * The fold is fold's arithmetic in its order, group after group: v = (float)(acc - xoff) * xs *
 * ws, f = f + v; a call that starts the row starts f at -0.0, and -0.0 + v is v for every v,
 * the sign of a zero and a NaN's payload included (fold's f = v).
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <string.h>

#include "kernels/gmm_fast.h"
#include "kernels/x86/parts.h"

enum { SR = 6, SU = 2 };     /* sub-tile: rows x units */
enum { PREFETCH = 2048 };    /* bytes ahead of the weight stream, as gemm_pf */

/* int4 step of a unit (prepacked, core/prepack.h) -> the 64-byte step, as gemm_i4 does. */
static inline __attribute__((always_inline)) __m512i expand_i4(const uint8_t *p)
{
    const __m256i m = _mm256_set1_epi8(0x0F);
    __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)p);
    __m256i lo = _mm256_and_si256(v, m), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

typedef struct groups_args {
    int64_t ng, kq;
    const int8_t *x;
    int64_t ldx;
    const uint8_t *wp; /* unit 0 of the sub-tile */
    int64_t wstep;
    const int32_t *xoff;
    int64_t xoff_stride;
    const float *xs, *ws; /* ws: unit 0 of the sub-tile, group 0 */
    int64_t ws_stride;
    float *f;
    int64_t ldf;
    int64_t pf; /* bytes of each step to prefetch ahead: the whole step for the first sub-tile */
    int first;
} groups_args;

static inline __attribute__((always_inline)) void sub_tile(int i4, int first, int mr, int nu,
                                                           const groups_args *a)
{
    const int8_t *x0 = a->x, *x1 = x0 + a->ldx, *x2 = x1 + a->ldx, *x3 = x2 + a->ldx,
                 *x4 = x3 + a->ldx, *x5 = x4 + a->ldx;
    __m512 f00 = _mm512_set1_ps(-0.0f), f01 = f00, f10 = f00, f11 = f00, f20 = f00, f21 = f00;
    __m512 f30 = f00, f31 = f00, f40 = f00, f41 = f00, f50 = f00, f51 = f00;
#define LOAD(R, U)                                                                               \
    if (!first && mr > R && nu > U) f##R##U = _mm512_loadu_ps(a->f + R * a->ldf + 16 * U);
    LOAD(0, 0) LOAD(0, 1) LOAD(1, 0) LOAD(1, 1) LOAD(2, 0) LOAD(2, 1)
    LOAD(3, 0) LOAD(3, 1) LOAD(4, 0) LOAD(4, 1) LOAD(5, 0) LOAD(5, 1)
#undef LOAD
    const uint8_t *wp = a->wp;
    const int64_t pf = a->pf; /* at most a step of 4 units: 256 bytes */
    for (int64_t g = 0; g < a->ng; g++) {
        const int32_t *xo = a->xoff + g;
        __m512i c00 = _mm512_setzero_si512(), c01 = c00, c10 = c00, c11 = c00, c20 = c00,
                c21 = c00, c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
        int64_t k0 = 4 * g * a->kq;
        for (int64_t q = 0; q < a->kq; q++) {
            if (pf > 0) _mm_prefetch((const char *)(wp + PREFETCH), _MM_HINT_T0);
            if (pf > 64) _mm_prefetch((const char *)(wp + PREFETCH + 64), _MM_HINT_T0);
            if (pf > 128) _mm_prefetch((const char *)(wp + PREFETCH + 128), _MM_HINT_T0);
            if (pf > 192) _mm_prefetch((const char *)(wp + PREFETCH + 192), _MM_HINT_T0);
            __m512i w0, w1;
            if (i4) {
                w0 = expand_i4(wp), w1 = w0;
                if (nu > 1) w1 = expand_i4(wp + 32);
            } else {
                w0 = _mm512_loadu_si512(wp), w1 = w0;
                if (nu > 1) w1 = _mm512_loadu_si512(wp + 64);
            }
            wp += a->wstep;
#define ROW(R)                                                                                   \
    if (mr > R) {                                                                                \
        int32_t xv;                                                                              \
        memcpy(&xv, x##R + k0 + 4 * q, sizeof xv);                                               \
        __m512i b = _mm512_set1_epi32(xv);                                                       \
        c##R##0 = _mm512_dpbusd_epi32(c##R##0, w0, b);                                           \
        if (nu > 1) c##R##1 = _mm512_dpbusd_epi32(c##R##1, w1, b);                               \
    }
            ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5)
#undef ROW
        }
        /* fold this group: (float)acc * xs * ws, left to right; then f + v */
        const float *ws = a->ws + g * a->ws_stride;
        __m512 ws0 = _mm512_loadu_ps(ws), ws1 = ws0;
        if (nu > 1) ws1 = _mm512_loadu_ps(ws + 16);
#define FOLD(R, U)                                                                               \
    if (mr > R && nu > U) {                                                                      \
        __m512i o = _mm512_set1_epi32(xo[R * a->xoff_stride]);                                   \
        __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(c##R##U, o));                             \
        if (a->xs) v = _mm512_mul_ps(v, _mm512_set1_ps(a->xs[R])); /* a broadcast operand */    \
        v = _mm512_mul_ps(v, ws##U);                                                             \
        f##R##U = _mm512_add_ps(f##R##U, v);                                                     \
    }
        FOLD(0, 0) FOLD(0, 1) FOLD(1, 0) FOLD(1, 1) FOLD(2, 0) FOLD(2, 1)
        FOLD(3, 0) FOLD(3, 1) FOLD(4, 0) FOLD(4, 1) FOLD(5, 0) FOLD(5, 1)
#undef FOLD
    }
#define OUT(R, U)                                                                                \
    if (mr > R && nu > U) _mm512_storeu_ps(a->f + R * a->ldf + 16 * U, f##R##U);
    OUT(0, 0) OUT(0, 1) OUT(1, 0) OUT(1, 1) OUT(2, 0) OUT(2, 1)
    OUT(3, 0) OUT(3, 1) OUT(4, 0) OUT(4, 1) OUT(5, 0) OUT(5, 1)
#undef OUT
}

#define SUB_FN(I4, FIRST, R, U)                                                                  \
    static void sub_##I4##FIRST##_##R##x##U(const groups_args *a) { sub_tile(I4, FIRST, R, U, a); }
#define SUB_ROW(I4, FIRST, R) SUB_FN(I4, FIRST, R, 1) SUB_FN(I4, FIRST, R, 2)
#define SUB_ALL(I4, FIRST)                                                                       \
    SUB_ROW(I4, FIRST, 1) SUB_ROW(I4, FIRST, 2) SUB_ROW(I4, FIRST, 3) SUB_ROW(I4, FIRST, 4)     \
    SUB_ROW(I4, FIRST, 5) SUB_ROW(I4, FIRST, 6)
SUB_ALL(0, 0) SUB_ALL(0, 1) SUB_ALL(1, 0) SUB_ALL(1, 1)

typedef void (*sub_fn)(const groups_args *);
#define SUB_PTRS(I4, FIRST, R) {sub_##I4##FIRST##_##R##x1, sub_##I4##FIRST##_##R##x2}
#define SUB_TABLE(I4, FIRST)                                                                     \
    {SUB_PTRS(I4, FIRST, 1), SUB_PTRS(I4, FIRST, 2), SUB_PTRS(I4, FIRST, 3),                     \
     SUB_PTRS(I4, FIRST, 4), SUB_PTRS(I4, FIRST, 5), SUB_PTRS(I4, FIRST, 6)}
static const sub_fn subs[2][2][SR][SU] = {{SUB_TABLE(0, 0), SUB_TABLE(0, 1)},
                                           {SUB_TABLE(1, 0), SUB_TABLE(1, 1)}};

void qmoe_gemm_groups_avx512(int mr, int nu, int i4, int64_t ng, int64_t kq, const int8_t *x,
                             int64_t ldx, const uint8_t *wp, int64_t wstep, const int32_t *xoff,
                             int64_t xoff_stride, const float *xs, const float *ws,
                             int64_t ws_stride, float *f, int64_t ldf, int first)
{
    const int64_t ustep = i4 ? 32 : 64;
    for (int r = 0; r < mr; r += SR)
        for (int u = 0; u < nu; u += SU) {
            int rows = mr - r < SR ? mr - r : SR, units = nu - u < SU ? nu - u : SU;
            /* the first sub-tile prefetches all units of each step (the others find them in
             * cache: the step's lines are read once from memory, in order) */
            groups_args a = {ng, kq, x + r * ldx, ldx, wp + u * ustep, wstep,
                             xoff + r * xoff_stride, xoff_stride, xs ? xs + r : NULL,
                             ws + 16 * u, ws_stride, f + r * ldf + 16 * u, ldf,
                             r == 0 && u == 0 ? nu * ustep : 0, first};
            subs[i4 != 0][first != 0][rows - 1][units - 1](&a);
        }
}
#endif
