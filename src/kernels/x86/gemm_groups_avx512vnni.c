/*
 * AVX-512 VNNI micro-kernel for small per-group scale groups (ggml's blocks of 32): several
 * whole K groups of one micro-tile, each group's exact int32 products folded at once into float
 * accumulators that stay in registers across the groups (gmm_fast.h, gemm_groups). gemm_fold
 * stores its int32 tile and reloads and stores the float tile after every group, which with 8
 * steps a group cost as much as the products. Sub-tiles of up to 3 rows x 4 units: 12 int32 and
 * 12 float accumulators, 4 weight vectors and a broadcast fit the 32 zmm registers, and each
 * step's 4 units are read whole, in order (6 x 2 ran as fast with the operands in L1 and
 * streamed each half step in its own pass, which the weight stream from DRAM pays for). What
 * is left above the
 * products is the fold's arithmetic itself (docs/performance.md).
 * The fold is fold's arithmetic in its order, group after group: v = (float)(acc - xoff) * xs *
 * ws, f = f + v; a call that starts the row starts f at -0.0, and -0.0 + v is v for every v,
 * the sign of a zero and a NaN's payload included (fold's f = v).
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <string.h>

#include "kernels/gmm_fast.h"
#include "kernels/x86/parts.h"

enum { SR = 3, SU = 4 };     /* sub-tile: rows x units */
enum { PREFETCH = 8192 };    /* bytes ahead of the weight stream, as gemm_pf */

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
    const int8_t *x0 = a->x, *x1 = x0 + a->ldx, *x2 = x1 + a->ldx;
    __m512 f00 = _mm512_set1_ps(-0.0f), f01 = f00, f02 = f00, f03 = f00;
    __m512 f10 = f00, f11 = f00, f12 = f00, f13 = f00, f20 = f00, f21 = f00, f22 = f00, f23 = f00;
#define EACH(M) M(0, 0) M(0, 1) M(0, 2) M(0, 3) M(1, 0) M(1, 1) M(1, 2) M(1, 3) M(2, 0) M(2, 1) M(2, 2) M(2, 3)
#define LOAD(R, U)                                                                               \
    if (!first && mr > R && nu > U) f##R##U = _mm512_loadu_ps(a->f + R * a->ldf + 16 * U);
    EACH(LOAD)
#undef LOAD
    const uint8_t *wp = a->wp;
    const int64_t pf = a->pf; /* at most a step of 4 units: 256 bytes */
    const int64_t ustep = i4 ? 32 : 64;
    for (int64_t g = 0; g < a->ng; g++) {
        const int32_t *xo = a->xoff + g;
        __m512i c00 = _mm512_setzero_si512(), c01 = c00, c02 = c00, c03 = c00;
        __m512i c10 = c00, c11 = c00, c12 = c00, c13 = c00;
        __m512i c20 = c00, c21 = c00, c22 = c00, c23 = c00;
        int64_t k0 = 4 * g * a->kq;
        for (int64_t q = 0; q < a->kq; q++) {
            if (pf > 0) _mm_prefetch((const char *)(wp + PREFETCH), _MM_HINT_T0);
            if (pf > 64) _mm_prefetch((const char *)(wp + PREFETCH + 64), _MM_HINT_T0);
            if (pf > 128) _mm_prefetch((const char *)(wp + PREFETCH + 128), _MM_HINT_T0);
            if (pf > 192) _mm_prefetch((const char *)(wp + PREFETCH + 192), _MM_HINT_T0);
            __m512i w0, w1, w2, w3;
            if (i4) {
                w0 = expand_i4(wp), w1 = w2 = w3 = w0;
                if (nu > 1) w1 = expand_i4(wp + ustep);
                if (nu > 2) w2 = expand_i4(wp + 2 * ustep);
                if (nu > 3) w3 = expand_i4(wp + 3 * ustep);
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
            ROW(0) ROW(1) ROW(2)
#undef ROW
        }
        /* fold this group: (float)(acc - xoff) * xs * ws, left to right; then f + v */
        const float *ws = a->ws + g * a->ws_stride;
#define FOLD(R, U)                                                                               \
    if (mr > R && nu > U) {                                                                      \
        __m512i o = _mm512_set1_epi32(xo[R * a->xoff_stride]);                                   \
        __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(c##R##U, o));                             \
        if (a->xs) v = _mm512_mul_ps(v, _mm512_set1_ps(a->xs[R])); /* a broadcast operand */    \
        v = _mm512_mul_ps(v, _mm512_loadu_ps(ws + 16 * U));                                      \
        f##R##U = _mm512_add_ps(f##R##U, v);                                                     \
    }
        EACH(FOLD)
#undef FOLD
    }
#define OUT(R, U)                                                                                \
    if (mr > R && nu > U) _mm512_storeu_ps(a->f + R * a->ldf + 16 * U, f##R##U);
    EACH(OUT)
#undef OUT
#undef EACH
}

#define SUB_FN(I4, FIRST, R, U)                                                                  \
    static void sub_##I4##FIRST##_##R##x##U(const groups_args *a) { sub_tile(I4, FIRST, R, U, a); }
#define SUB_ROW(I4, FIRST, R)                                                                    \
    SUB_FN(I4, FIRST, R, 1) SUB_FN(I4, FIRST, R, 2) SUB_FN(I4, FIRST, R, 3) SUB_FN(I4, FIRST, R, 4)
#define SUB_ALL(I4, FIRST) SUB_ROW(I4, FIRST, 1) SUB_ROW(I4, FIRST, 2) SUB_ROW(I4, FIRST, 3)
SUB_ALL(0, 0) SUB_ALL(0, 1) SUB_ALL(1, 0) SUB_ALL(1, 1)

typedef void (*sub_fn)(const groups_args *);
#define SUB_PTRS(I4, FIRST, R)                                                                   \
    {sub_##I4##FIRST##_##R##x1, sub_##I4##FIRST##_##R##x2, sub_##I4##FIRST##_##R##x3,             \
     sub_##I4##FIRST##_##R##x4}
#define SUB_TABLE(I4, FIRST) {SUB_PTRS(I4, FIRST, 1), SUB_PTRS(I4, FIRST, 2), SUB_PTRS(I4, FIRST, 3)}
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
