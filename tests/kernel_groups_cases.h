/*
 * The cases of the gemm_groups tests (test_kernel_<isa>_groups.c): the micro-kernel against the
 * table's gemm then fold, group by group, and the driver with and without gemm_groups.
 */
#ifndef QMOE_TEST_KERNEL_GROUPS_CASES_H
#define QMOE_TEST_KERNEL_GROUPS_CASES_H

#include "core/halfconv.h"
#include "test_kernel_common.h"

enum { MAXG = 9, MAXQ = 9, MAXK = 4 * MAXG * MAXQ, MAXR = 40 };

static float scale(qt_rng *r)
{
    int k = (int)qt_range(r, 0, 9);
    if (k == 0) return 0.0f;
    if (k == 1) return -0.0f;
    return qt_uniform(r, -0.02f, 0.02f);
}

/* gemm + fold per group, the reference order; returns 0 on a mismatch */
static int micro_case(const qmoe_gemm_isa *isa, qt_rng *r, int mr, int nu, int i4, int use_xs,
                      int kind, int64_t ng, int64_t kq)
{
    static uint16_t wh[MAXG * 64]; /* kind 1 / 2: the scales' float16 / bfloat16 bits */
    static int8_t wq8[MAXG * 64];  /* kind 3: multipliers of the bases wb, blocks of blk groups */
    static float wb[MAXG * 64];
    const int64_t blk = qt_range(r, 1, 9);
    int64_t K = 4 * ng * kq, wstep = 4 * QMOE_PK_STEP, wstep4 = 4 * QMOE_PK_STEP / 2,
            wstep6 = 4 * 48;
    static int8_t x[MAXR * MAXK];
    static uint8_t w[MAXK / 4 * 4 * QMOE_PK_STEP], w4[MAXK / 4 * 4 * QMOE_PK_STEP / 2],
        w6[MAXK / 4 * 4 * 48];
    static int32_t xoff[MAXR * MAXG], acc[MAXR * 64];
    static float xs[MAXR], ws[MAXG * 64], want[MAXR * 64], got[MAXR * 64], part[MAXR * 64];
    uint8_t tbl[16];
    for (int i = 0; i < 16; i++) tbl[i] = (uint8_t)qt_range(r, 0, 255);
    for (int64_t i = 0; i < MAXR * K; i++) x[i] = (int8_t)qt_range(r, -128, 127);
    for (int64_t q = 0; q < K / 4; q++) {
        uint8_t *d = w4 + q * wstep4, *d6 = w6 + q * wstep6;
        for (int64_t b = 0; b < wstep4; b++) d[b] = (uint8_t)qt_range(r, 0, 255);
        for (int64_t b = 0; b < wstep6; b++) d6[b] = (uint8_t)qt_range(r, 0, 255);
        if (i4 == 4) /* 6 bits, core/prepack.h: 32 bytes of nibbles, 16 of high bit pairs; + 96 */
            for (int u = 0; u < 4; u++)
                for (int b = 0; b < 64; b++) {
                    const uint8_t *lo = d6 + 48 * u, *hi = lo + 32;
                    int v = (b < 32 ? lo[b] & 0xF : lo[b - 32] >> 4) | (hi[b % 16] >> (2 * (b / 16)) & 3) << 4;
                    w[q * wstep + 64 * u + b] = (uint8_t)(v + 96);
                }
        else if (i4 == 2) /* codes: byte b holds the indices of bytes b and 32 + b of the step */
            for (int u = 0; u < 4; u++)
                for (int b = 0; b < 32; b++) {
                    w[q * wstep + 64 * u + b] = tbl[d[32 * u + b] & 0xF];
                    w[q * wstep + 64 * u + 32 + b] = tbl[d[32 * u + b] >> 4];
                }
        else if (i4) /* the expanded steps gemm reads, unit by unit (gemm_i4's format); i4 3
                      * gives them to gemm_groups as they are (int8 steps of bytes <= 15) */
            for (int u = 0; u < 4; u++) isa->expand_i4(d + 32 * u, 1, w + q * wstep + 64 * u);
        else
            for (int64_t b = 0; b < wstep; b++) w[q * wstep + b] = (uint8_t)qt_range(r, 0, 255);
    }
    for (int i = 0; i < MAXR * MAXG; i++) xoff[i] = (int32_t)qt_range(r, -300000, 300000);
    for (int i = 0; i < MAXR; i++) xs[i] = scale(r);
    for (int i = 0; i < MAXG * 64; i++) wb[i] = scale(r);
    for (int i = 0; i < MAXG * 64; i++) {
        ws[i] = scale(r);
        if (kind == 3) { /* base * multiplier, one rounding */
            wq8[i] = (int8_t)qt_range(r, -128, 127);
            ws[i] = wb[i / 64 / blk * 64 + i % 64] * (float)wq8[i];
        }
        if (kind == 2) { /* bfloat16: the float's top half, any sign, zero or subnormal */
            wh[i] = qmoe_f32_to_bf16(ws[i]);
            ws[i] = qmoe_bf16_to_f32(wh[i]);
        } else if (kind == 1) { /* float16 up to 2^7, zeros and subnormals included */
            int k = (int)qt_range(r, 0, 9);
            wh[i] = (uint16_t)(k == 0 ? 0 : k == 1 ? 0x8000u
                                       : (uint32_t)qt_range(r, 0, 1) << 15 | (uint32_t)qt_range(r, 0, 0x5bff));
            ws[i] = qmoe_f16_to_f32(wh[i]);
        }
    }
    const void *wsv = kind == 3 ? (const void *)wq8 : kind ? (const void *)wh : (const void *)ws;
    const size_t es = kind == 3 ? 1 : kind ? 2 : 4;
    const float *wbv = kind == 3 ? wb : NULL;
    const float *xsp = use_xs ? xs : NULL;
    for (int64_t g = 0; g < ng; g++) {
        isa->gemm(mr, nu, kq, x + 4 * g * kq, K, w + g * kq * wstep, wstep, acc, 64, 0);
        isa->fold(mr, 16 * nu, acc, 64, xoff + g, MAXG, xsp, ws + g * 64, want, 64, g == 0);
    }
    const int packed = i4 == 1 || i4 == 2;
    const uint8_t *wq = i4 == 4 ? w6 : packed ? w4 : w;
    int64_t ws_ = i4 == 4 ? wstep6 : packed ? wstep4 : wstep;
    isa->gemm_groups(mr, nu, i4, i4 == 2 ? tbl : NULL, ng, kq, x, K, wq, ws_, xoff, MAXG, xsp, wsv, kind, 64, wbv, blk, 0,
                     got, 64, 1);
    int64_t a = ng / 2; /* two calls: groups [0, a) then [a, ng) continuing the tile */
    if (a > 0)
        isa->gemm_groups(mr, nu, i4, i4 == 2 ? tbl : NULL, a, kq, x, K, wq, ws_, xoff, MAXG, xsp, wsv, kind, 64, wbv, blk, 0,
                         part, 64, 1);
    isa->gemm_groups(mr, nu, i4, i4 == 2 ? tbl : NULL, ng - a, kq, x + 4 * a * kq, K, wq + a * kq * ws_, ws_, xoff + a,
                     MAXG, xsp, (const uint8_t *)wsv + es * (size_t)(a * 64), kind, 64,
                     wbv ? wbv + a / blk * 64 : NULL, blk, a % blk, part, 64, a == 0);
    int ok = 1;
    for (int i = 0; i < mr; i++) {
        ok &= !memcmp(want + 64 * i, got + 64 * i, sizeof(float) * (size_t)(16 * nu));
        ok &= !memcmp(want + 64 * i, part + 64 * i, sizeof(float) * (size_t)(16 * nu));
    }
    return ok;
}

/* One expert of M rows, K in groups of gk, N = 256 (4 column panels of 32 + 32), ND weights
 * (A8W4: int4), float scales per group, the layout kcase_make gives its ND cases. */
static void kcase_make_groups(kcase *c, qt_rng *r, int a8w4, int64_t K, int64_t gk, int64_t M)
{
    memset(c, 0, sizeof *c);
    qmoe_gmm_params *p = &c->p;
    int64_t N = 256, E = 1, G = K / gk;
    oracle_wlayout lay = a8w4 ? ORACLE_W_INT4_ND : ORACLE_W_INT8_ND;
    p->M = M, p->K = K, p->N = N, p->N2 = N / 2, p->E = E, p->E_groups = 1;
    p->G = G, p->group_k = gk, p->per_group = 1;
    p->mode = a8w4 ? QMOE_MODE_A8W4 : QMOE_MODE_A8W8;
    c->w = malloc((size_t)(E * K * N));
    for (int64_t i = 0; i < E * K * N; i++)
        c->w[i] = (int8_t)(a8w4 ? qt_range(r, -8, 7) : qt_range(r, -128, 127));
    c->wst = malloc((size_t)oracle_weight_bytes(lay, E, K, N) + 64);
    oracle_pack_weight(lay, c->w, E, K, N, c->wst);
    p->w = c->wst;
    p->w_layout = a8w4 ? QMOE_W_INT4_ND : QMOE_W_INT8_ND;
    p->w_s[0] = K * N, p->w_s[1] = N, p->w_s[2] = 1;
    c->x = malloc((size_t)(M * K));
    for (int64_t i = 0; i < M * K; i++) c->x[i] = (int8_t)qt_range(r, -128, 127);
    p->x = c->x, p->x_s[0] = K, p->x_s[1] = 1;
    c->ws = malloc(sizeof(float) * (size_t)(E * G * N));
    for (int64_t i = 0; i < E * G * N; i++) c->ws[i] = qt_uniform(r, 0.001f, 0.02f);
    p->ws = c->ws, p->ws_type = QMOE_SCALE_F32;
    p->ws_s[0] = G * N, p->ws_s[1] = N, p->ws_s[2] = 1;
    if (a8w4) {
        c->bias = malloc(sizeof(float) * (size_t)N);
        for (int64_t n = 0; n < N; n++) c->bias[n] = qt_uniform(r, -2.0f, 2.0f);
        p->bias = c->bias, p->bias_s[0] = N, p->bias_s[1] = 1;
    }
    c->xs = malloc(sizeof(float) * (size_t)M);
    for (int64_t i = 0; i < M; i++) c->xs[i] = qt_uniform(r, 0.01f, 0.1f);
    p->xs = c->xs, p->xs_s = 1;
    c->gl = malloc(sizeof(int64_t));
    c->ends = malloc(sizeof(int64_t));
    c->gl[0] = c->ends[0] = M;
    p->gl = c->gl, p->gl_s = 1;
    p->out_s[0] = p->N2, p->out_s[1] = 1, p->out_scale_s = 1;
}

/* One case's experts through the table as it is and through a copy without gemm_groups. */
static int driver_case(int kernel, const qmoe_gemm_isa *isa, kcase *c)
{
    qmoe_gemm_isa plain = *isa;
    plain.gemm_groups = NULL;
    const qmoe_kernel_entry *k = qmoe_kernel_lookup(kernel);
    qmoe_kernel_entry as_is = *k, without = *k;
    as_is.gemm = isa;
    without.gemm = &plain;
    qmoe_gmm_params *p = &c->p;
    int64_t N2 = p->N2;
    int ran = 0;
    for (int64_t e = 0; e < p->E_groups; e++) {
        int64_t m0 = kc_start(c, e), m1 = c->ends[e], rows = m1 - m0;
        if (rows < 1) continue;
        uint64_t bytes = qmoe_swiglu_quant_scratch_bytes(&as_is, p, rows, N2);
        void *sp = aligned_alloc(64, (bytes + 63) & ~(uint64_t)63);
        float *a = calloc((size_t)(rows * N2 + 1), sizeof(float));
        float *b = calloc((size_t)(rows * N2 + 1), sizeof(float));
        qmoe_thread_ctx ctx = {.thread = 0, .nthreads = 1, .scratch = sp, .scratch_bytes = bytes};
        qmoe_swiglu_quant_block(&as_is, p, &ctx, e, m0, m1, 0, N2, a, N2);
        qmoe_swiglu_quant_block(&without, p, &ctx, e, m0, m1, 0, N2, b, N2);
        CHECK_MSG(!memcmp(a, b, sizeof(float) * (size_t)(rows * N2)),
                  "gemm_groups differs from the per-group fold: mode %d G %lld K %lld N %lld "
                  "rows %lld", p->mode, (long long)p->G, (long long)p->K, (long long)p->N,
                  (long long)rows);
        ran++;
        free(sp);
        free(a);
        free(b);
    }
    return ran;
}

/* The micro-kernel alone, rows 1..max_mr, 1-4 units, every step kind (i4 0-3, and 4 where the
 * table says groups_b6), with and without xScale, every scale kind, `tries` random group / step
 * counts each. */
static inline void groups_micro_sweep(const qmoe_gemm_isa *isa, uint64_t seed, int max_mr, int tries)
{
    qt_rng r = {seed};
    long bad = 0, cases = 0;
    const int kinds = isa->groups_b6 ? 5 : 4;
    for (int mr = 1; mr <= max_mr; mr++)
        for (int nu = 1; nu <= 4; nu++)
            for (int i4 = 0; i4 < kinds; i4++)
                for (int use_xs = 0; use_xs < 2; use_xs++)
                    for (int kind = 0; kind < 4; kind++)
                        for (int t = 0; t < tries; t++) {
                            int64_t ng = qt_range(&r, 1, MAXG), kq = qt_range(&r, 1, MAXQ);
                            int ok = micro_case(isa, &r, mr, nu, i4, use_xs, kind, ng, kq);
                            CHECK_MSG(ok, "gemm_groups != gemm + fold: mr %d nu %d i4 %d xs %d "
                                          "scales %d groups %lld steps %lld", mr, nu, i4, use_xs,
                                      kind, (long long)ng, (long long)kq);
                            bad += !ok;
                            cases++;
                        }
    CHECK(cases == (long)max_mr * 4 * kinds * 2 * 4 * tries && bad == 0);
}

/* Through the driver: the kernel sweep's per-group cases, then ggml's groups at K = 1024 (A8W8
 * and A8W4; groups of 32, the last two of 16 as q6_K's), blocks of lo to hi rows: the table as
 * it is against a copy without gemm_groups. */
static inline void groups_driver_sweep(int kernel, const qmoe_gemm_isa *isa, uint64_t seed,
                                       int64_t lo, int64_t hi)
{
    qt_rng r = {seed};
    int grouped = 0;
    for (int i = 0; i < 240; i++) {
        kcase c;
        kcase_make(&c, &r, i);
        if (c.p.G > 1) grouped += driver_case(kernel, isa, &c);
        kcase_free(&c);
    }
    CHECK(grouped > 20); /* the sweep's per-group cases ran */
    for (int i = 0; i < 8; i++) {
        kcase c;
        kcase_make_groups(&c, &r, i % 2, 1024, i < 6 ? 32 : 16, qt_range(&r, lo, hi));
        CHECK(driver_case(kernel, isa, &c) >= 1);
        kcase_free(&c);
    }
}

#endif
