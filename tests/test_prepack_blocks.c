/*
 * Prepacked weights with scale blocks (qmoe_weights_options.scale_block), through the public API:
 *   - for every kernel this CPU prepacks for, A8W8 and A8W4, groups of several sizes and blocks
 *     that do and do not divide them: scales that are a float32 base times int8 multipliers per
 *     block (the K-quants' d * sc with d of either sign, q6_K's sc = -128, zero blocks and
 *     negative multipliers among them) give an
 *     object whose outputs are bit-identical to the object made from the same scales kept as
 *     float32 (1 and 3 threads, 1 to 40 rows), which holds 3 bytes less per scale plus 4 per
 *     block, and whose unpack_scales returns the scales given, bit for bit;
 *   - the same, made a slice at a time (qmoe_weights_append), and on 1, 2, 3 and every online
 *     core's threads (options.threads);
 *   - refused with QMOE_ERR_PARAM_INVALID, *out or the object as it was: scales that are not
 *     such products (uniform random floats, a -0 and a +0 in one block, a NaN), in the first
 *     slice or a later one;
 *     a negative scale_block, threads out of [0, 4096]; with several threads the error still
 *     names the first bad expert.
 * The scales are built here from integers, not by the library's factoring.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qmoe/qmoe.h"
#include "qmoe/weights.h"
#include "support/kernels.h"
#include "support/prepacked.h"
#include "support/testlib.h"

typedef struct wcase {
    int a8w4;
    int64_t E, K, N, G, B;
    int8_t *w;
    uint8_t *packed;
    float *ws, *bias;
} wcase;

/* Scales of expert blocks as d * sc: d a float16-like value (11 significant bits; now and then
 * a subnormal one or one of 18 bits) of either sign, sc in [0, 63] (q4_K's 6 bits) or, signed
 * (q6_K), in [-128, 127] with one group of most blocks at -128 as ggml's quantizer gives the
 * largest sub-block (so a positive scale needs the multiplier 128 where d < 0: a negative base,
 * and d * 0 a -0); now and then a block of zeros. */
static void block_scales(qt_rng *r, const wcase *c, float *ws, int sgn)
{
    for (int64_t e = 0; e < c->E; e++)
        for (int64_t n = 0; n < c->N; n++)
            for (int64_t g0 = 0; g0 < c->G; g0 += c->B) {
                float d = ldexpf((float)qt_range(r, 1024, 2047), (int)qt_range(r, -22, -14));
                int zero = qt_range(r, 0, 15) == 0, kind = (int)qt_range(r, 0, 15);
                if (kind == 1) /* subnormal bases (products exact: integers times 2^-149) */
                    d = ldexpf((float)qt_range(r, 1, 2047), -149 + (int)qt_range(r, 0, 8));
                if (kind == 2) /* a base of 18 significant bits (times 6-bit sc: exact), 16 for 8-bit sc */
                    d = sgn ? ldexpf((float)qt_range(r, 1 << 15, (1 << 16) - 1), -38)
                            : ldexpf((float)qt_range(r, 1 << 17, (1 << 18) - 1), -40);
                if (qt_range(r, 0, 1)) d = -d;
                const int64_t big = g0 + qt_range(r, 0, c->B - 1); /* the -128 group, when signed */
                const int with128 = sgn && qt_range(r, 0, 7) != 0;
                for (int64_t g = g0; g < g0 + c->B && g < c->G; g++) {
                    int sc = (int)(sgn ? qt_range(r, -128, 127) : qt_range(r, 0, 63));
                    if (with128 && g == big) sc = -128;
                    ws[(e * c->G + g) * c->N + n] = zero ? 0.0f : d * (float)sc;
                }
            }
}

static void make(qt_rng *r, wcase *c, int a8w4, int64_t E, int64_t K, int64_t N, int64_t G, int64_t B)
{
    memset(c, 0, sizeof *c);
    c->a8w4 = a8w4, c->E = E, c->K = K, c->N = N, c->G = G, c->B = B;
    size_t nv = (size_t)(E * K * N);
    c->w = malloc(nv);
    c->packed = malloc(nv / 2 + 1);
    c->ws = malloc(sizeof(float) * (size_t)(E * G * N));
    c->bias = malloc(sizeof(float) * (size_t)(E * N));
    for (size_t i = 0; i < nv; i++) c->w[i] = (int8_t)(a8w4 ? qt_range(r, -8, 7) : qt_range(r, -128, 127));
    if (a8w4) CHECK(qmoe_layout_int4_pack(c->w, (int64_t)nv, c->packed) == QMOE_OK);
    for (int64_t i = 0; i < E * N; i++) c->bias[i] = qt_uniform(r, -1.0f, 1.0f);
    block_scales(r, c, c->ws, !a8w4);
}

static void unmake(wcase *c)
{
    free(c->w);
    free(c->packed);
    free(c->ws);
    free(c->bias);
}

/* Tensors of experts [e0, e0 + ne) with scales ws. */
static void tensors(const wcase *c, const float *ws, int64_t e0, int64_t ne, qmoe_tensor **tw,
                    qmoe_tensor **ts, qmoe_tensor **tb)
{
    int64_t wd[3] = {ne, c->K, c->N}, sd[3] = {ne, c->G, c->N}, bd[2] = {ne, c->N};
    size_t at = (size_t)(e0 * c->K * c->N);
    *tw = c->a8w4 ? qt_tensor(wd, 3, QMOE_DTYPE_INT4, c->packed + at / 2) : qt_tensor(wd, 3, QMOE_DTYPE_INT8, c->w + at);
    *ts = qt_tensor(sd, 3, QMOE_DTYPE_FLOAT32, (void *)(uintptr_t)(ws + e0 * c->G * c->N));
    *tb = c->a8w4 ? qt_tensor(bd, 2, QMOE_DTYPE_FLOAT32, c->bias + e0 * c->N) : NULL;
}

static void free3(qmoe_tensor *a, qmoe_tensor *b, qmoe_tensor *d)
{
    qmoe_tensor_destroy(a);
    qmoe_tensor_destroy(b);
    qmoe_tensor_destroy(d);
}

/* Prepacks c with scales ws in slices of `slice` experts (0: whole) on `threads` threads. */
static qmoe_status prepack(const wcase *c, const float *ws, int kernel, int64_t block, int64_t slice,
                           int threads, qmoe_weights **out)
{
    qmoe_weights_options o = QMOE_WEIGHTS_OPTIONS_INIT;
    o.kernel = (qmoe_kernel)kernel;
    o.threads = threads;
    o.scale_block = block;
    o.experts = slice ? c->E : 0;
    int64_t n0 = slice ? slice : c->E;
    qmoe_tensor *tw, *ts, *tb;
    tensors(c, ws, 0, n0, &tw, &ts, &tb);
    qmoe_status st = qmoe_weights_prepack(tw, ts, tb, &o, out);
    free3(tw, ts, tb);
    for (int64_t e0 = n0; !st && e0 < c->E; e0 += slice) {
        int64_t ne = c->E - e0 < slice ? c->E - e0 : slice;
        tensors(c, ws, e0, ne, &tw, &ts, &tb);
        st = qmoe_weights_append(*out, tw, ts, tb);
        free3(tw, ts, tb);
    }
    return st;
}

/* Blocked and float32 objects of c give the same bits; sizes and unpacked scales as stated. The
 * float32 one is packed on one thread, the blocked one on `threads`. */
static void check_same(qt_rng *r, const wcase *c, int kernel, int64_t slice, int threads, int *ran)
{
    qmoe_weights *plain = NULL, *blk = NULL;
    if (prepack(c, c->ws, kernel, 0, 0, 1, &plain)) return; /* not a kernel this CPU prepacks for */
    ++*ran;
    qmoe_status st = prepack(c, c->ws, kernel, c->B, slice, threads, &blk);
    CHECK_MSG(st == QMOE_OK, "%s %s G=%lld B=%lld slice %lld threads %d: %s", qmoe_kernel_name((qmoe_kernel)kernel),
              c->a8w4 ? "A8W4" : "A8W8", (long long)c->G, (long long)c->B, (long long)slice, threads,
              qmoe_last_error());
    if (st) {
        qmoe_weights_destroy(plain);
        return;
    }
    /* per record (expert, panel of 64 column pairs): G x 128 scales, ceil(G / B) x 128 bases */
    int64_t recs = c->E * ((c->N / 2 + 63) / 64), blocks = (c->G + c->B - 1) / c->B;
    uint64_t want = qmoe_weights_bytes(plain) - (uint64_t)(recs * c->G * 128 * 3) +
                    (uint64_t)(recs * blocks * 128 * 4);
    CHECK_MSG(qmoe_weights_bytes(blk) == want, "G=%lld B=%lld: %llu bytes, %llu expected", (long long)c->G,
              (long long)c->B, (unsigned long long)qmoe_weights_bytes(blk), (unsigned long long)want);
    float *back = malloc(sizeof(float) * (size_t)(c->G * c->N));
    for (int64_t e = 0; e < c->E; e++) {
        CHECK(qmoe_weights_unpack_scales(blk, e, QMOE_DTYPE_FLOAT32, back) == QMOE_OK);
        CHECK_MSG(!memcmp(back, c->ws + e * c->G * c->N, sizeof(float) * (size_t)(c->G * c->N)),
                  "expert %lld: unpacked scales differ from the ones given", (long long)e);
    }
    free(back);
    char what[160];
    snprintf(what, sizeof what, "%s G=%lld B=%lld slice %lld threads %d", c->a8w4 ? "A8W4" : "A8W8",
             (long long)c->G, (long long)c->B, (long long)slice, threads);
    qt_check_same_outputs(r, plain, blk, kernel, c->K, c->N, c->E, what);
    qmoe_weights_destroy(plain);
    qmoe_weights_destroy(blk);
}

/* Scales that do not factor: refused, nothing made or changed. */
static void check_refusals(qt_rng *r, int kernel)
{
    wcase c;
    make(r, &c, 1, 4, 256, 128, 8, 4);
    qmoe_weights *keep = (qmoe_weights *)(uintptr_t)0x1;
    if (prepack(&c, c.ws, kernel, 0, 0, 1, &keep)) { /* not a kernel this CPU prepacks for */
        unmake(&c);
        return;
    }
    qmoe_weights_destroy(keep);
    float *bad = malloc(sizeof(float) * (size_t)(c.E * c.G * c.N));
    for (int v = 0; v < 3; v++) {
        memcpy(bad, c.ws, sizeof(float) * (size_t)(c.E * c.G * c.N));
        int64_t at = (3 * c.G + 5) * c.N + 77; /* expert 3: the second slice of 2 */
        if (v == 0)
            for (int64_t i = 0; i < c.E * c.G * c.N; i++) bad[i] = qt_uniform(r, 0.001f, 0.02f);
        else if (v == 1) /* a -0 and a +0 in one block: base * 0 has one sign */
            bad[at] = -0.0f, bad[at + c.N] = 0.0f;
        else
            bad[at] = NAN;
        for (int threads = 1; threads <= 3; threads += 2) { /* the first bad expert's error, whatever the split */
            qmoe_weights *out = (qmoe_weights *)(uintptr_t)0x1;
            qmoe_status st = prepack(&c, bad, kernel, c.B, 0, threads, &out);
            CHECK_MSG(st == QMOE_ERR_PARAM_INVALID && out == (qmoe_weights *)(uintptr_t)0x1,
                      "scales %d: prepack status %d", v, (int)st);
            CHECK_MSG(strstr(qmoe_last_error(), "int8 multipliers") != NULL, "message: %s", qmoe_last_error());
            CHECK_MSG(strstr(qmoe_last_error(), v == 0 ? "expert 0," : "expert 3, column 77,") != NULL,
                      "threads %d, scales %d: %s", threads, v, qmoe_last_error());
        }
        if (v == 0) continue;
        /* in the second slice: the first slice's object stays, and a good slice then completes it */
        qmoe_weights_options o = QMOE_WEIGHTS_OPTIONS_INIT;
        o.kernel = (qmoe_kernel)kernel;
        o.scale_block = c.B;
        o.experts = c.E;
        qmoe_tensor *tw, *ts, *tb;
        qmoe_weights *pw = NULL;
        tensors(&c, bad, 0, 2, &tw, &ts, &tb);
        CHECK(qmoe_weights_prepack(tw, ts, tb, &o, &pw) == QMOE_OK);
        free3(tw, ts, tb);
        tensors(&c, bad, 2, 2, &tw, &ts, &tb);
        CHECK(qmoe_weights_append(pw, tw, ts, tb) == QMOE_ERR_PARAM_INVALID);
        CHECK_MSG(strstr(qmoe_last_error(), "column 77") != NULL, "message: %s", qmoe_last_error());
        free3(tw, ts, tb);
        tensors(&c, c.ws, 2, 2, &tw, &ts, &tb);
        CHECK(qmoe_weights_append(pw, tw, ts, tb) == QMOE_OK);
        free3(tw, ts, tb);
        float *back = malloc(sizeof(float) * (size_t)(c.G * c.N));
        CHECK(qmoe_weights_unpack_scales(pw, 3, QMOE_DTYPE_FLOAT32, back) == QMOE_OK);
        CHECK(!memcmp(back, c.ws + 3 * c.G * c.N, sizeof(float) * (size_t)(c.G * c.N)));
        free(back);
        qmoe_weights_destroy(pw);
    }
    qmoe_weights *out = (qmoe_weights *)(uintptr_t)0x1;
    CHECK(prepack(&c, c.ws, kernel, -1, 0, 1, &out) == QMOE_ERR_PARAM_INVALID && out == (qmoe_weights *)(uintptr_t)0x1);
    CHECK(prepack(&c, c.ws, kernel, 0, 0, -1, &out) == QMOE_ERR_PARAM_INVALID && out == (qmoe_weights *)(uintptr_t)0x1);
    CHECK(prepack(&c, c.ws, kernel, 0, 0, 4097, &out) == QMOE_ERR_PARAM_INVALID && out == (qmoe_weights *)(uintptr_t)0x1);
    CHECK_MSG(strstr(qmoe_last_error(), "threads = 4097") != NULL, "message: %s", qmoe_last_error());
    free(bad);
    unmake(&c);
}

int main(void)
{
    qt_rng r = {20261205};
    int kernels[QT_MAX_KERNELS], nk = qt_kernels(QMOE_KERNEL_PORTABLE, kernels, QT_MAX_KERNELS), ran = 0;
    static const struct { int a8w4; int64_t E, K, N, G, B; } cases[] = {
        {1, 3, 2048, 256, 64, 8}, /* q4_K: groups of 32, super-blocks of 256 */
        {0, 3, 512, 192, 32, 16}, /* q6_K: groups of 16 */
        {1, 2, 768, 130, 24, 5},  /* a last block shorter, columns past a panel */
        {0, 2, 256, 128, 4, 9},   /* one block holds every group */
    };
    for (int k = 0; k < nk; k++) {
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            wcase c;
            make(&r, &c, cases[i].a8w4, cases[i].E, cases[i].K, cases[i].N, cases[i].G, cases[i].B);
            check_same(&r, &c, kernels[k], 0, 1, &ran);
            check_same(&r, &c, kernels[k], 0, 3, &ran); /* 3 threads: the same bits */
            if (i == 0) check_same(&r, &c, kernels[k], 2, 2, &ran);
            if (i == 0) check_same(&r, &c, kernels[k], 2, 0, &ran); /* every online core */
            unmake(&c);
        }
        check_refusals(&r, kernels[k]);
    }
    CHECK_MSG(ran > 0, "no kernel prepacked");
    return qt_finish("prepack_blocks");
}
