/*
 * Edge rows of the quantization step and of the dequantization order, shared by
 * tests/test_edge_rows.c (every kernel through the registry, in blocks of every size) and
 * tests/test_hostile.c (every kernel through the public API):
 * all-zero rows (zero x, zero xScale, zero weight scale, Swish underflowing to -0), rows whose
 * amax / 127 underflows in float32, subnormal output scales (whose rounding pushes values past
 * 127: the clamp), subnormal weight and x scales, NaN/Inf in xScale and in the weight scale,
 * rows that saturate at +-127 or overflow to inf, K at its limits, the two
 * reproductions (K = 1, ws = 1e-11, xScale = 1.4e-11; ws = 1e37, xScale = [0, 1e-30]), and
 * per-group weight scales (the overflow order per group, A8W4 groups).
 *
 * Every case is built so that S is the same float in every correct kernel: each activated value
 * a is either tiny (e^-a rounds to 1, Swish(a) = a / 2), large (e^-a rounds to 0 next to 1,
 * Swish(a) = a), very negative (e^-a = inf, Swish(a) = -0) or non-finite, never in between where
 * exp implementations may differ by an ulp; A8W4 cases use power-of-two scales, so the vendor's
 * nibble-split formula and the simplified one are both exact. The expected bits then follow from
 * the spec, computed here: C in the spec's order (A8W8: acc * xScale * ws, left to right, in
 * float32, per group summed in group order), Swish in float32, and step 4 written out again (not
 * the library's quant_rule.h).
 */
#ifndef QMOE_TEST_EDGE_ROWS_H
#define QMOE_TEST_EDGE_ROWS_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { EDGE_MAX_E = 4 };

typedef struct edge_case {
    const char *name;
    int a8w4, nz;    /* weight storage: int8/int4, ND or FRACTAL_NZ */
    int64_t M, K, N, E;
    int64_t G;       /* 0: per-channel weight scale [E,N]; else per-group [E,G,N] */
    int64_t ends[EDGE_MAX_E]; /* cumulative groupList; the last one is M */
    int8_t *x;       /* [M][K] */
    int8_t *w;       /* logical [E][K][N] */
    float *ws;       /* [E][max(G,1)][N] */
    float *bias;     /* [E][N], A8W4: the assist matrix 8 * sum_k W * ws (exact here) */
    float *xs;       /* [M] */
    int8_t *q;       /* expected output [M][N/2] */
    float *scale;    /* expected outputScale [M] */
} edge_case;

static void *edge_alloc(size_t n)
{
    void *p = calloc(n ? n : 1, 1);
    if (!p) abort();
    return p;
}

static void edge_shape_g(edge_case *c, const char *name, int a8w4, int nz, int64_t M, int64_t K,
                         int64_t N, int64_t E, int64_t G)
{
    memset(c, 0, sizeof *c);
    c->name = name, c->a8w4 = a8w4, c->nz = nz;
    c->M = M, c->K = K, c->N = N, c->E = E, c->G = G;
    int64_t GG = G ? G : 1;
    for (int64_t e = 0; e < E; e++) c->ends[e] = M * (e + 1) / E;
    c->x = edge_alloc((size_t)(M * K));
    c->w = edge_alloc((size_t)(E * K * N));
    c->ws = edge_alloc(sizeof(float) * (size_t)(E * GG * N));
    c->bias = edge_alloc(sizeof(float) * (size_t)(E * N));
    c->xs = edge_alloc(sizeof(float) * (size_t)M);
    c->q = edge_alloc((size_t)(M * N / 2));
    c->scale = edge_alloc(sizeof(float) * (size_t)M);
}

static void edge_shape(edge_case *c, const char *name, int a8w4, int nz, int64_t M, int64_t K,
                       int64_t N, int64_t E)
{
    edge_shape_g(c, name, a8w4, nz, M, K, N, E, 0);
}

static void edge_free(edge_case *c)
{
    free(c->x), free(c->w), free(c->ws), free(c->bias), free(c->xs), free(c->q), free(c->scale);
}

#define EX(m, k) c->x[(m) * c->K + (k)]
#define EW(e, k, n) c->w[((e) * c->K + (k)) * c->N + (n)]
#define EGROUPS(c) ((c)->G ? (c)->G : 1)
#define EWSG(e, g, n) c->ws[((e) * EGROUPS(c) + (g)) * c->N + (n)]
#define EWS(e, n) EWSG(e, 0, n)

/* C[m][n] of expert e as the spec writes it. */
static float edge_c(const edge_case *c, int64_t e, int64_t m, int64_t n)
{
    int64_t G = EGROUPS(c), gk = c->K / G;
    float cf = 0.0f;
    double sum = 0.0, corr = 0.0;
    for (int64_t g = 0; g < G; g++) {
        int64_t acc = 0, wsum = 0;
        for (int64_t k = g * gk; k < (g + 1) * gk; k++) {
            acc += (int64_t)EX(m, k) * EW(e, k, n);
            wsum += EW(e, k, n);
        }
        /* A8W8: acc * xScale * ws, left to right, float32; groups summed in order */
        float t = (float)acc * c->xs[m] * EWSG(e, g, n);
        cf = g == 0 ? t : cf + t;
        sum += (double)acc * EWSG(e, g, n);
        corr -= 8.0 * (double)wsum * EWSG(e, g, n);
    }
    if (!c->a8w4) return cf;
    /* (sum x*W*ws + bias - 8 * sum W*ws) * xScale: exact for power-of-two scales */
    return (float)((sum + ((double)c->bias[e * c->N + n] + corr)) * (double)c->xs[m]);
}

/* The expected outputs of every row (all rows belong to an expert here). */
static void edge_expect(edge_case *c)
{
    int64_t N2 = c->N / 2;
    float *s = edge_alloc(sizeof(float) * (size_t)(N2 + 1));
    for (int64_t e = 0, m = 0; e < c->E; e++)
        for (; m < c->ends[e]; m++) {
            float amax = 0.0f;
            int nan = 0;
            for (int64_t j = 0; j < N2; j++) {
                float a = edge_c(c, e, m, j), g = edge_c(c, e, m, N2 + j);
                s[j] = a / (1.0f + expf(-a)) * g;
                if (isnan(s[j])) nan = 1;
                else if (fabsf(s[j]) > amax) amax = fabsf(s[j]);
            }
            /* step 4: a NaN row's scale is NaN; amax / 127 == 0 (zero or underflowing row) and
             * non-finite scales give an all-zero output row */
            float sc = nan ? NAN : amax / 127.0f;
            c->scale[m] = sc;
            for (int64_t j = 0; j < N2; j++) {
                int8_t v = 0;
                if (isfinite(sc) && sc != 0.0f) {
                    float t = nearbyintf(s[j] / sc);
                    v = (int8_t)(t > 127.0f ? 127 : t < -127.0f ? -127 : (int)t);
                }
                c->q[m * N2 + j] = v;
            }
        }
    free(s);
}

/* Fills the A8W4 assist matrix from W and ws, as callers build it. */
static void edge_bias(edge_case *c)
{
    for (int64_t e = 0; e < c->E; e++)
        for (int64_t n = 0; n < c->N; n++) {
            double b = 0.0;
            for (int64_t k = 0; k < c->K; k++)
                b += 8.0 * EW(e, k, n) * (double)EWSG(e, k / (c->K / EGROUPS(c)), n);
            c->bias[e * c->N + n] = (float)b;
        }
}

/* Case `id` (0, 1, ...); returns 0 past the last one. Expected outputs are filled in. */
static int edge_make(edge_case *c, int id)
{
    switch (id) {
    case 0: /* the underflowing row: amax / 127 == 0 in float32 (20 rows: AMX blocks) */
        edge_shape(c, "issue: amax/127 underflows (K=1, ws=1e-11, xScale=1.4e-11)", 0, 0, 20, 1,
                   32, 1);
        for (int64_t m = 0; m < c->M; m++) EX(m, 0) = 1, c->xs[m] = 1.4e-11f;
        for (int64_t n = 0; n < c->N; n++) EW(0, 0, n) = 1, EWS(0, n) = 1e-11f;
        break;
    case 1: /* the overflow order: acc * ws overflows, acc * xScale * ws does not */
        edge_shape(c, "issue: ws=1e37, xScale=[0,1e-30], K=N=64", 0, 1, 20, 64, 64, 1);
        for (int64_t m = 0; m < c->M; m++) {
            for (int64_t k = 0; k < c->K; k++) EX(m, k) = 1;
            c->xs[m] = m % 2 ? 1e-30f : 0.0f;
        }
        for (int64_t k = 0; k < c->K; k++)
            for (int64_t n = 0; n < c->N; n++) EW(0, k, n) = 1;
        for (int64_t n = 0; n < c->N; n++) EWS(0, n) = 1e37f;
        break;
    case 2: /* a ladder of xScale over 2^-8 .. 2^31: S == 0, underflowing, subnormal and normal
             * scales (a subnormal scale's rounding puts values past 127: the clamp); row 0 has a
             * subnormal xScale */
        edge_shape(c, "scale ladder: zero, underflowing, subnormal, normal scales", 0, 0, 40, 1,
                   64, 1);
        for (int64_t m = 0; m < c->M; m++)
            EX(m, 0) = (int8_t)(1 + m % 3), c->xs[m] = ldexpf(1.4e-11f, (int)m - 8);
        c->xs[0] = 1e-40f;
        for (int64_t n = 0; n < c->N; n++)
            EW(0, 0, n) = (int8_t)(n < 32 ? 1 + n % 5 : n % 7 - 3), EWS(0, n) = 1e-11f;
        break;
    case 3: /* all-zero rows of every kind: x row 0, xScale 0, Swish(a) = -0 for a = -3e31,
             * weight scales 0 in the gate half */
        edge_shape(c, "all-zero rows (x, xScale, Swish -> -0, ws = 0)", 0, 1, 24, 32, 64, 2);
        for (int64_t m = 0; m < c->M; m++) {
            for (int64_t k = 0; k < c->K; k++) EX(m, k) = (int8_t)(m % 3 == 0 ? 0 : 1 + k % 4);
            c->xs[m] = m % 3 == 1 ? 0.0f : 1.0f;
        }
        for (int64_t e = 0; e < 2; e++)
            for (int64_t k = 0; k < c->K; k++)
                for (int64_t n = 0; n < c->N; n++) {
                    EW(e, k, n) = (int8_t)(n < 32 ? -1 - (k + n) % 3 : 1 + n % 5);
                    EWS(e, n) = e == 0 ? (n < 32 ? 1e30f : 1.0f) : (n < 32 ? 1.0f : 0.0f);
                }
        break;
    case 4: /* subnormal weight scale on the activated half, x scales normal and subnormal */
        edge_shape(c, "subnormal weight scales and xScale", 0, 1, 18, 16, 64, 1);
        for (int64_t m = 0; m < c->M; m++) {
            for (int64_t k = 0; k < c->K; k++) EX(m, k) = (int8_t)(1 + (m + k) % 7);
            c->xs[m] = m % 3 == 2 ? 3e-39f : m % 2 ? 0.5f : 1.0f;
        }
        for (int64_t k = 0; k < c->K; k++)
            for (int64_t n = 0; n < c->N; n++) EW(0, k, n) = (int8_t)(n < 32 ? 1 + (k + n) % 5 : (k + n) % 9 - 4);
        for (int64_t n = 0; n < c->N; n++) EWS(0, n) = n < 32 ? 1e-40f : 1e30f;
        break;
    case 5: /* NaN and +-Inf in xScale (a zero x row with xScale inf: 0 * inf = NaN) */
        edge_shape(c, "NaN/Inf in xScale", 0, 1, 20, 16, 64, 1);
        for (int64_t m = 0; m < c->M; m++) {
            for (int64_t k = 0; k < c->K; k++) EX(m, k) = (int8_t)(m == 7 ? 0 : 100 + (m + k) % 20);
            static const float v[] = {NAN, INFINITY, -INFINITY, 0.02f};
            c->xs[m] = m == 7 ? INFINITY : v[m % 4];
        }
        for (int64_t k = 0; k < c->K; k++)
            for (int64_t n = 0; n < c->N; n++)
                EW(0, k, n) = (int8_t)(n < 32 ? 50 + n % 20 : (k * 7 + n * 13) % 255 - 127);
        for (int64_t n = 0; n < c->N; n++) EWS(0, n) = 1.0f;
        break;
    case 6: /* NaN / +Inf / -Inf in one weight-scale column of an expert */
        edge_shape(c, "NaN/Inf in the weight scale", 0, 1, 24, 16, 64, 4);
        for (int64_t m = 0; m < c->M; m++) {
            for (int64_t k = 0; k < c->K; k++) EX(m, k) = (int8_t)(100 + (m + k) % 20);
            c->xs[m] = 0.02f;
        }
        for (int64_t e = 0; e < 4; e++) {
            for (int64_t k = 0; k < c->K; k++)
                for (int64_t n = 0; n < c->N; n++)
                    EW(e, k, n) = (int8_t)(n < 32 ? 50 + n % 20 : (k * 7 + n * 13 + e) % 255 - 127);
            for (int64_t n = 0; n < c->N; n++) EWS(e, n) = 1.0f;
        }
        EWS(0, 3) = NAN, EWS(1, 5) = INFINITY, EWS(2, 40) = -INFINITY; /* expert 3 stays clean */
        break;
    case 7: /* saturating rows: the row maximum at exactly +-127, values near it, and rows whose
             * S overflows to inf (scale inf, output 0) */
        edge_shape(c, "saturating rows (+-127) and S overflowing to inf", 0, 1, 20, 32, 64, 1);
        for (int64_t m = 0; m < c->M; m++) {
            for (int64_t k = 0; k < c->K; k++) EX(m, k) = (int8_t)(m % 2 ? 127 : 90 + k % 30);
            c->xs[m] = m % 5 == 3 ? 1e17f : m % 5 == 4 ? 1e13f : 0.01f;
        }
        for (int64_t k = 0; k < c->K; k++)
            for (int64_t n = 0; n < c->N; n++)
                EW(0, k, n) = (int8_t)(n < 32 ? 1 + (n * 5) % 127 : n % 2 ? -128 : 127 - n);
        for (int64_t n = 0; n < c->N; n++) EWS(0, n) = 1.0f;
        break;
    case 8: /* K = 65520 (A8W8 limit): acc near 2^30 */
        edge_shape(c, "huge K, A8W8 (K = 65520)", 0, 1, 17, 65520, 32, 1);
        for (int64_t m = 0; m < c->M; m++) {
            for (int64_t k = 0; k < c->K; k++) EX(m, k) = (int8_t)(m % 3 == 0 ? 127 : m % 3 == 1 ? 1 + k % 127 : -128 * (k % 2));
            c->xs[m] = m % 3 == 2 ? -1e-6f : 1e-6f; /* -128 x -128: a positive again */
        }
        for (int64_t k = 0; k < c->K; k++)
            for (int64_t n = 0; n < c->N; n++)
                EW(0, k, n) = (int8_t)(n < 16 ? (k % 2 ? 127 - n : 0) : n % 2 ? -128 : 127);
        for (int64_t n = 0; n < c->N; n++) EWS(0, n) = 1.0f;
        break;
    case 9: /* K = 19984 (A8W4 limit), power-of-two scales; |acc| < 2^24, so every partial sum
             * of either A8W4 formula is exact */
        edge_shape(c, "huge K, A8W4 (K = 19984)", 1, 1, 17, 19984, 64, 1);
        for (int64_t m = 0; m < c->M; m++) {
            for (int64_t k = 0; k < c->K; k++) EX(m, k) = (int8_t)(m % 2 ? 127 : 1 + k % 127);
            c->xs[m] = ldexpf(1.0f, -2 - (int)(m % 4));
        }
        for (int64_t k = 0; k < c->K; k++)
            for (int64_t n = 0; n < c->N; n++) EW(0, k, n) = (int8_t)(n < 32 ? 3 : n % 2 ? -4 : 3);
        for (int64_t n = 0; n < c->N; n++) EWS(0, n) = ldexpf(1.0f, -10);
        break;
    case 10: /* A8W4 small rows: underflowing, subnormal scale, zero, NaN, Inf (power-of-two
              * scales, so both A8W4 formulas are exact) and a NaN weight scale in expert 2 */
        edge_shape(c, "A8W4: underflowing, subnormal, zero, NaN/Inf rows", 1, 1, 24, 16, 64, 3);
        for (int64_t m = 0; m < c->M; m++) {
            for (int64_t k = 0; k < c->K; k++) EX(m, k) = (int8_t)(1 + k % 3);
            static const int pw[] = {-40, -36, -30, -20, 0};
            int i = (int)(m % 6);
            c->xs[m] = i < 5 ? ldexpf(1.0f, pw[i]) : m % 12 == 5 ? 0.0f : NAN;
        }
        c->xs[11] = INFINITY;
        for (int64_t e = 0; e < 3; e++)
            for (int64_t k = 0; k < c->K; k++)
                for (int64_t n = 0; n < c->N; n++)
                    EW(e, k, n) = (int8_t)(n < 32 ? 1 + n % 7 : n % 15 - 7);
        for (int64_t e = 0; e < 3; e++)
            for (int64_t n = 0; n < c->N; n++) EWS(e, n) = ldexpf(1.0f, -40);
        EWS(2, 2) = NAN;
        break;
    case 11: /* per-group scales: the overflow order per group (acc_g * ws_g alone would
              * overflow), a zero group scale, xScale 0 and 1e-30 */
        edge_shape_g(c, "per-group (G=2) ws near FLT_MAX, xScale=[0,1e-30]", 0, 1, 20, 64, 64, 1, 2);
        for (int64_t m = 0; m < c->M; m++) {
            for (int64_t k = 0; k < c->K; k++) EX(m, k) = (int8_t)(1 + (m + k) % 3);
            c->xs[m] = m % 2 ? 1e-30f : 0.0f;
        }
        for (int64_t k = 0; k < c->K; k++)
            for (int64_t n = 0; n < c->N; n++) EW(0, k, n) = (int8_t)(n < 32 ? 1 + n % 4 : n % 5 - 2);
        for (int64_t n = 0; n < c->N; n++)
            EWSG(0, 0, n) = 1e37f, EWSG(0, 1, n) = n % 8 == 3 ? 0.0f : 3e36f;
        break;
    case 12: /* A8W4 per-group (G=4) power-of-two scales: underflowing, subnormal-scale, zero,
              * normal and NaN rows */
        edge_shape_g(c, "A8W4 per-group (G=4): underflowing, subnormal, zero, NaN rows", 1, 1, 20,
                     64, 64, 1, 4);
        for (int64_t m = 0; m < c->M; m++) {
            for (int64_t k = 0; k < c->K; k++) EX(m, k) = (int8_t)(1 + (m + k) % 4);
            static const int pw[] = {-44, -40, -34, -20, 0};
            c->xs[m] = m == 19 ? NAN : m % 6 == 5 ? 0.0f : ldexpf(1.0f, pw[m % 6 % 5]);
        }
        for (int64_t k = 0; k < c->K; k++)
            for (int64_t n = 0; n < c->N; n++) EW(0, k, n) = (int8_t)(n < 32 ? 1 + n % 7 : n % 15 - 7);
        for (int64_t g = 0; g < 4; g++)
            for (int64_t n = 0; n < c->N; n++) EWSG(0, g, n) = ldexpf(1.0f, -40 + (int)g);
        break;
    default:
        return 0;
    }
    if (c->a8w4) edge_bias(c);
    edge_expect(c);
    return 1;
}

#undef EX
#undef EW
#undef EWS
#undef EWSG

#endif
