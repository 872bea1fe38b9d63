/*
 * AMX-INT8 micro-kernel for small per-group scale groups (ggml's blocks of 32 k; gmm_fast.h,
 * gemm_groups): each group's exact int32 products come from tiles — one TDPBSUD per 16 x 16
 * block and group, A 16 rows x 4 kq bytes, B kq steps of a unit — are stored and folded into the
 * float tile in memory with the fold's arithmetic in its order, group after group: v = (float)
 * (acc - xoff) * xs * ws, f = f + v, a call that starts the row starting f at -0.0 (-0.0 + v is
 * v for every v). On AVX-512 VNNI the products of a group of 32 cost as much as its fold; the
 * tiles make them nearly free, so what is left is the fold (and its C tile round trip).
 * Blocks of 32 rows x 2 units (4 C tiles, 2 A, 2 B), the C tiles of a group stored into one of
 * two buffers so the next group's products can run while this one's fold does. Rows past the
 * last multiple of 16, groups of more than 64 k and prepacked int4 steps (the driver expands
 * them for this table) go to the AVX-512 kernel, which has the same contract and the same bits.
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <stdalign.h>
#include <string.h>

#include "kernels/gmm_fast.h"
#include "kernels/x86/group_scales_avx512.h"
#include "kernels/x86/parts.h"

/* Palette 1: C tiles 0-3 16 rows x 64 bytes, A tiles 4-5 16 rows x 4 kq bytes, B tiles 6-7 kq
 * rows x 64 bytes. */
static void config_for(int64_t kq, uint8_t cfg[64])
{
    memset(cfg, 0, 64);
    cfg[0] = 1;
    for (int t = 0; t < 8; t++) {
        int colsb = t < 4 ? 64 : t < 6 ? (int)(4 * kq) : 64;
        int rows = t < 6 ? 16 : (int)kq;
        cfg[16 + 2 * t] = (uint8_t)colsb;
        cfg[48 + t] = (uint8_t)rows;
    }
}

enum { PF_GROUPS = 8 }; /* 8 groups of 32 k: 8 KB of a 4-unit panel's stream, as PREFETCH */

typedef struct block_args {
    int two_rows, two_units;
    int64_t ng, kq;
    const int8_t *x;
    int64_t ldx;
    const uint8_t *wp; /* the block's first unit */
    int64_t wstep;
    const int32_t *xoff;
    int64_t xoff_stride;
    const float *xs;
    const void *ws; /* the block's first unit, group 0 */
    int ws_kind;
    int64_t ws_stride;
    const float *wsb;
    int64_t wblk, wb0;
    float *f;
    int64_t ldf;
    int first;
} block_args;

/* Group g's products of the block into c (32 x 32 int32, row stride 32). */
static inline __attribute__((always_inline)) void products(const block_args *a, int64_t g, int32_t *c)
{
    const int8_t *x0 = a->x + 4 * g * a->kq;
    const uint8_t *b = a->wp + g * a->kq * a->wstep;
    /* tile loads alone stream weights from memory slowly (performance.md, AMX): ask for the
     * steps PF_GROUPS groups ahead, as the AVX-512 kernel asks PREFETCH bytes ahead */
    const uint8_t *pf = b + PF_GROUPS * a->kq * a->wstep;
    for (int64_t q = 0; q < a->kq; q++) {
        _mm_prefetch((const char *)(pf + q * a->wstep), _MM_HINT_T1);
        if (a->two_units) _mm_prefetch((const char *)(pf + q * a->wstep + 64), _MM_HINT_T1);
    }
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, x0, a->ldx);
    _tile_loadd(6, b, a->wstep);
    _tile_dpbsud(0, 4, 6);
    if (a->two_units) {
        _tile_loadd(7, b + 64, a->wstep);
        _tile_dpbsud(1, 4, 7);
    }
    if (a->two_rows) {
        _tile_loadd(5, x0 + 16 * a->ldx, a->ldx);
        _tile_dpbsud(2, 5, 6);
        if (a->two_units) _tile_dpbsud(3, 5, 7);
    }
    _tile_stored(0, c, 128);
    if (a->two_units) _tile_stored(1, c + 16, 128);
    if (a->two_rows) {
        _tile_stored(2, c + 16 * 32, 128);
        if (a->two_units) _tile_stored(3, c + 16 * 32 + 16, 128);
    }
}

/* Group g's fold of c into the float tile. */
static inline __attribute__((always_inline)) void fold(const block_args *a, int64_t g, const int32_t *c)
{
    const int rows = a->two_rows ? 32 : 16, units = a->two_units ? 2 : 1;
    const int64_t ws_at = g * a->ws_stride;
    const float *base = a->ws_kind == 3 ? a->wsb + (a->wb0 + g) / a->wblk * a->ws_stride : NULL;
    const int start = a->first && g == 0;
    for (int u = 0; u < units; u++) {
        const __m512 s = a->ws_kind == 3 ? qmoe_ws_block_load(a->ws, base, ws_at + 16 * u, 16 * u)
                                         : qmoe_ws_load(a->ws, a->ws_kind, ws_at + 16 * u);
        for (int r = 0; r < rows; r++) {
            __m512i o = _mm512_set1_epi32(a->xoff[r * a->xoff_stride + g]);
            __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_load_si512(c + 32 * r + 16 * u), o));
            if (a->xs) v = _mm512_mul_ps(v, _mm512_set1_ps(a->xs[r]));
            float *d = a->f + r * a->ldf + 16 * u;
            __m512 acc = start ? _mm512_set1_ps(-0.0f) : _mm512_loadu_ps(d);
            _mm512_storeu_ps(d, _mm512_add_ps(acc, _mm512_mul_ps(v, s)));
        }
    }
}

static void block(const block_args *a)
{
    alignas(64) int32_t c[2][32 * 32];
    products(a, 0, c[0]);
    for (int64_t g = 0; g < a->ng; g++) {
        if (g + 1 < a->ng) products(a, g + 1, c[(g + 1) & 1]);
        fold(a, g, c[g & 1]);
    }
}

void qmoe_gemm_groups_amx(int mr, int nu, int i4, const uint8_t *tbl, int64_t ng, int64_t kq,
                          const int8_t *x, int64_t ldx, const uint8_t *wp, int64_t wstep,
                          const int32_t *xoff, int64_t xoff_stride, const float *xs, const void *ws,
                          int ws_kind, int64_t ws_stride, const float *wsb, int64_t wblk,
                          int64_t wb0, float *f, int64_t ldf, int first)
{
    if (i4 == 3) i4 = 0; /* bytes <= 15: the int8 steps' way */
    int tiled = i4 || kq > 16 || ng < 1 ? 0 : mr & ~15;
    if (tiled) {
        alignas(64) uint8_t cfg[64];
        config_for(kq, cfg);
        qmoe_amx_tiles(cfg);
        const size_t es = qmoe_ws_bytes(ws_kind);
        for (int u = 0; u < nu; u += 2)
            for (int r = 0; r < tiled; r += 32) {
                block_args a = {r + 32 <= tiled, u + 1 < nu, ng, kq, x + r * ldx, ldx,
                                wp + u * QMOE_PK_STEP, wstep, xoff + r * xoff_stride, xoff_stride,
                                xs ? xs + r : NULL, (const uint8_t *)ws + es * (size_t)(16 * u),
                                ws_kind, ws_stride, wsb ? wsb + 16 * u : NULL, wblk, wb0,
                                f + r * ldf + 16 * u, ldf, first};
                block(&a);
            }
    }
    if (tiled < mr)
        qmoe_gemm_groups_avx512(mr - tiled, nu, i4, tbl, ng, kq, x + tiled * ldx, ldx, wp, wstep,
                                xoff + tiled * xoff_stride, xoff_stride, xs ? xs + tiled : NULL, ws,
                                ws_kind, ws_stride, wsb, wblk, wb0, f + tiled * ldf, ldf, first);
}
#endif
