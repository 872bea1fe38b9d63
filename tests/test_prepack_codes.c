/*
 * Prepacked int8 weights kept as 4-bit codes (qmoe_weights_options.codebook), through the public
 * API:
 *   - for every kernel this CPU prepacks for: weights whose values are drawn from a codebook
 *     (MXFP4's E2M1 values times 2, a random one with repeated entries, and {0, 1, ..., 15},
 *     which the driver reads as int4 steps without an offset) give an object whose
 *     outputs are bit-identical to the plain int8 object of the same weights (1 and 3 threads, 1
 *     to 40 rows: the in-register lookups of one micro-tile, the per-group kernel of groups of
 *     32, the expansion of larger blocks), made whole or a slice at a time; it holds the bytes
 *     of an int4 object of that shape, and unpack gives the values back;
 *   - refused with QMOE_ERR_PARAM_INVALID, *out or the object as it was: a value outside the
 *     codebook (named by expert, k and column; in the first slice or a later one; also -1 and 16
 *     with {0, ..., 15}, whose steps are packed without the table), a codebook with int4
 *     weights, a codebook without 0.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qmoe/qmoe.h"
#include "qmoe/weights.h"
#include "support/kernels.h"
#include "support/prepacked.h"
#include "support/testlib.h"

static const int8_t MXFP4X2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
static const int8_t UNSIGNED4[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

typedef struct wcase {
    int64_t E, K, N, G;
    const int8_t *book;
    int8_t *w;
    float *ws;
} wcase;

static void make(qt_rng *r, wcase *c, const int8_t *book, int64_t E, int64_t K, int64_t N, int64_t G)
{
    c->E = E, c->K = K, c->N = N, c->G = G, c->book = book;
    c->w = malloc((size_t)(E * K * N));
    c->ws = malloc(sizeof(float) * (size_t)(E * G * N));
    for (int64_t i = 0; i < E * K * N; i++) c->w[i] = book[qt_range(r, 0, 15)];
    for (int64_t i = 0; i < E * G * N; i++) c->ws[i] = qt_uniform(r, 0.001f, 0.01f);
}

/* Prepacks experts [0, E) of w (scales c->ws) in slices of `slice` (0: whole), with `book`. */
static qmoe_status prepack(const wcase *c, const int8_t *w, const int8_t *book, int kernel,
                           int64_t slice, qmoe_weights **out)
{
    qmoe_weights_options o = QMOE_WEIGHTS_OPTIONS_INIT;
    o.kernel = (qmoe_kernel)kernel;
    o.codebook = book;
    return qt_prepack_int8(w, c->ws, c->E, c->K, c->N, c->G, &o, slice, out);
}

/* The bytes of an A8W4 object of c's shape (int4 values, a bias: the same records and sides). */
static uint64_t int4_bytes(const wcase *c, int kernel)
{
    size_t nv = (size_t)(c->E * c->K * c->N);
    uint8_t *packed = calloc(nv / 2 + 1, 1);
    float *bias = calloc((size_t)(c->E * c->N), sizeof(float));
    int64_t wd[3] = {c->E, c->K, c->N}, sd[3] = {c->E, c->G, c->N}, bd[2] = {c->E, c->N};
    qmoe_tensor *tw = qt_tensor(wd, 3, QMOE_DTYPE_INT4, packed), *ts = qt_tensor(sd, 3, QMOE_DTYPE_FLOAT32, c->ws);
    qmoe_tensor *tb = qt_tensor(bd, 2, QMOE_DTYPE_FLOAT32, bias);
    qmoe_weights_options o = QMOE_WEIGHTS_OPTIONS_INIT;
    o.kernel = (qmoe_kernel)kernel;
    qmoe_weights *pw = NULL;
    CHECK(qmoe_weights_prepack(tw, ts, tb, &o, &pw) == QMOE_OK);
    uint64_t n = qmoe_weights_bytes(pw);
    qmoe_weights_destroy(pw);
    qmoe_tensor_destroy(tw);
    qmoe_tensor_destroy(ts);
    qmoe_tensor_destroy(tb);
    free(packed);
    free(bias);
    return n;
}

static void check_same(qt_rng *r, const wcase *c, int kernel, int64_t slice, int *ran)
{
    qmoe_weights *plain = NULL, *codes = NULL;
    if (prepack(c, c->w, NULL, kernel, 0, &plain)) return; /* not a kernel this CPU prepacks for */
    ++*ran;
    qmoe_status st = prepack(c, c->w, c->book, kernel, slice, &codes);
    CHECK_MSG(st == QMOE_OK, "%s K=%lld N=%lld G=%lld slice %lld: %s", qmoe_kernel_name((qmoe_kernel)kernel),
              (long long)c->K, (long long)c->N, (long long)c->G, (long long)slice, qmoe_last_error());
    if (st) {
        qmoe_weights_destroy(plain);
        return;
    }
    CHECK_MSG(qmoe_weights_bytes(codes) == int4_bytes(c, kernel), "K=%lld N=%lld: %llu bytes, int4's %llu",
              (long long)c->K, (long long)c->N, (unsigned long long)qmoe_weights_bytes(codes),
              (unsigned long long)int4_bytes(c, kernel));
    int8_t *back = malloc((size_t)(c->K * c->N));
    for (int64_t e = 0; e < c->E; e++) {
        CHECK(qmoe_weights_unpack(codes, e, back) == QMOE_OK);
        CHECK_MSG(!memcmp(back, c->w + e * c->K * c->N, (size_t)(c->K * c->N)),
                  "expert %lld: unpacked values differ from the ones given", (long long)e);
    }
    free(back);
    char what[160];
    snprintf(what, sizeof what, "K=%lld N=%lld G=%lld slice %lld", (long long)c->K, (long long)c->N, (long long)c->G, (long long)slice);
    qt_check_same_outputs(r, plain, codes, kernel, c->K, c->N, c->E, what);
    qmoe_weights_destroy(plain);
    qmoe_weights_destroy(codes);
}

/* Weights drawn from `book` with value v at expert 3 (the second slice of 2), k 200, column 77:
 * refused, named, by prepack and by the append of that slice, nothing written. */
static void check_outside(const wcase *c, const int8_t *book, int kernel, int8_t v)
{
    int8_t *bad = malloc((size_t)(c->E * c->K * c->N));
    memcpy(bad, c->w, (size_t)(c->E * c->K * c->N));
    bad[(3 * c->K + 200) * c->N + 77] = v;
    qmoe_weights *out = (qmoe_weights *)(uintptr_t)0x1;
    CHECK(prepack(c, bad, book, kernel, 0, &out) == QMOE_ERR_PARAM_INVALID && out == (qmoe_weights *)(uintptr_t)0x1);
    char want[64];
    snprintf(want, sizeof want, "expert 3, k 200, column 77 holds %d", v);
    CHECK_MSG(strstr(qmoe_last_error(), want) != NULL, "message: %s", qmoe_last_error());
    qmoe_weights_options o = QMOE_WEIGHTS_OPTIONS_INIT;
    o.kernel = (qmoe_kernel)kernel;
    o.codebook = book;
    qt_check_bad_append(c->w, bad, c->ws, c->K, c->N, c->G, &o, "expert 1, k 200, column 77");
    free(bad);
}

static void check_refusals(qt_rng *r, int kernel)
{
    wcase c;
    make(r, &c, MXFP4X2, 4, 256, 128, 8);
    qmoe_weights *out = (qmoe_weights *)(uintptr_t)0x1;
    if (prepack(&c, c.w, NULL, kernel, 0, &out)) { /* not a kernel this CPU prepacks for */
        free(c.w), free(c.ws);
        return;
    }
    qmoe_weights_destroy(out);
    check_outside(&c, MXFP4X2, kernel, 5); /* 5 is not in the codebook */
    /* the codebook {0..15}, packed without its table: -1 and 16 are still refused; padding (K
     * 216 in groups of 18) is not */
    wcase u;
    make(r, &u, UNSIGNED4, 4, 216, 128, 12);
    check_outside(&u, UNSIGNED4, kernel, -1);
    check_outside(&u, UNSIGNED4, kernel, 16);
    free(u.w), free(u.ws);
    /* no 0 in the codebook; a codebook with int4 weights */
    int8_t no_zero[16];
    for (int i = 0; i < 16; i++) no_zero[i] = (int8_t)(i + 1);
    out = (qmoe_weights *)(uintptr_t)0x1;
    CHECK(prepack(&c, c.w, no_zero, kernel, 0, &out) == QMOE_ERR_PARAM_INVALID && out == (qmoe_weights *)(uintptr_t)0x1);
    CHECK_MSG(strstr(qmoe_last_error(), "no 0") != NULL, "message: %s", qmoe_last_error());
    qmoe_weights_options o = QMOE_WEIGHTS_OPTIONS_INIT;
    o.kernel = (qmoe_kernel)kernel;
    o.codebook = MXFP4X2;
    uint8_t *packed = calloc((size_t)(c.E * c.K * c.N) / 2, 1);
    float *bias = calloc((size_t)(c.E * c.N), sizeof(float));
    int64_t wa[3] = {c.E, c.K, c.N}, sa[3] = {c.E, c.G, c.N}, ba[2] = {c.E, c.N};
    qmoe_tensor *tw = qt_tensor(wa, 3, QMOE_DTYPE_INT4, packed), *ts = qt_tensor(sa, 3, QMOE_DTYPE_FLOAT32, c.ws);
    qmoe_tensor *tb = qt_tensor(ba, 2, QMOE_DTYPE_FLOAT32, bias);
    CHECK(qmoe_weights_prepack(tw, ts, tb, &o, &out) == QMOE_ERR_PARAM_INVALID && out == (qmoe_weights *)(uintptr_t)0x1);
    CHECK_MSG(strstr(qmoe_last_error(), "for int8 weights") != NULL, "message: %s", qmoe_last_error());
    qmoe_tensor_destroy(tw);
    qmoe_tensor_destroy(ts);
    qmoe_tensor_destroy(tb);
    free(packed), free(bias), free(c.w), free(c.ws);
}

int main(void)
{
    qt_rng r = {20261206};
    int kernels[QT_MAX_KERNELS], nk = qt_kernels(QMOE_KERNEL_PORTABLE, kernels, QT_MAX_KERNELS), ran = 0;
    int8_t random_book[16];
    for (int i = 0; i < 16; i++) random_book[i] = (int8_t)qt_range(&r, -128, 127);
    random_book[5] = 0;
    random_book[9] = random_book[2]; /* a repeated entry: the first is kept */
    static const struct { int64_t E, K, N, G; int book; } cases[] = {
        {3, 256, 256, 8, 0},  /* ggml's MXFP4 blocks: groups of 32 */
        {2, 512, 160, 1, 1},  /* per channel; columns past a panel */
        {3, 216, 128, 12, 0}, /* groups of 18: K padding in every group */
        {2, 2048, 128, 64, 1},
        {3, 256, 256, 8, 2},  /* ggml's q4_K codes in groups of 32 */
        {2, 512, 160, 1, 2},
        {3, 216, 128, 12, 2},
        {2, 2048, 128, 64, 2},
    };
    const int8_t *books[3] = {MXFP4X2, random_book, UNSIGNED4};
    for (int k = 0; k < nk; k++) {
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            wcase c;
            make(&r, &c, books[cases[i].book], cases[i].E, cases[i].K, cases[i].N, cases[i].G);
            check_same(&r, &c, kernels[k], 0, &ran);
            if (i == 0 || i == 4) check_same(&r, &c, kernels[k], 2, &ran);
            free(c.w), free(c.ws);
        }
        check_refusals(&r, kernels[k]);
    }
    CHECK_MSG(ran > 0, "no kernel prepacked");
    return qt_finish("prepack_codes");
}
