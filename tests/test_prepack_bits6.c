/*
 * Prepacked int8 weights kept in 6 bits a value (qmoe_weights_options.value_bits = 6), through the
 * public API:
 *   - for every kernel this CPU prepacks for: weights with values in [-32, 31] (ggml's q6_K
 *     integers) give an object whose outputs are bit-identical to the plain int8 object of the
 *     same weights (1 and 3 threads, 1 to 40 rows: one micro-tile, the per-group kernel of small
 *     groups, blocks of several micro-tiles), made whole or a slice at a time; its records are a
 *     quarter smaller (E K N / 4 bytes fewer where no padding rounds them), and unpack gives the
 *     values back;
 *   - refused with QMOE_ERR_PARAM_INVALID, *out or the object as it was: a value outside
 *     [-32, 31] (named by expert, k and column; in the first slice or a later one), value_bits
 *     other than 0, 6 and 8, value_bits 6 with int4 weights or with a codebook;
 *   - a caller built before the field (struct_size = its offset, 0.3.5's sizeof) gets int8
 *     whatever its struct's tail holds.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qmoe/qmoe.h"
#include "qmoe/weights.h"
#include "support/kernels.h"
#include "support/prepacked.h"
#include "support/testlib.h"

typedef struct wcase {
    int64_t E, K, N, G;
    int8_t *w;
    float *ws;
} wcase;

static void make(qt_rng *r, wcase *c, int64_t E, int64_t K, int64_t N, int64_t G)
{
    c->E = E, c->K = K, c->N = N, c->G = G;
    c->w = malloc((size_t)(E * K * N));
    c->ws = malloc(sizeof(float) * (size_t)(E * G * N));
    for (int64_t i = 0; i < E * K * N; i++) c->w[i] = (int8_t)qt_range(r, -32, 31);
    c->w[0] = -32, c->w[1] = 31; /* both ends, whatever the draw */
    for (int64_t i = 0; i < E * G * N; i++) c->ws[i] = qt_uniform(r, 0.001f, 0.01f);
}

/* Prepacks experts [0, E) of w in slices of `slice` (0: whole) with value_bits `bits`. */
static qmoe_status prepack(const wcase *c, const int8_t *w, int bits, int kernel, int64_t slice,
                           qmoe_weights **out)
{
    qmoe_weights_options o = QMOE_WEIGHTS_OPTIONS_INIT;
    o.kernel = (qmoe_kernel)kernel;
    o.value_bits = bits;
    return qt_prepack_int8(w, c->ws, c->E, c->K, c->N, c->G, &o, slice, out);
}

static void check_same(qt_rng *r, const wcase *c, int kernel, int64_t slice, int exact_bytes, int *ran)
{
    qmoe_weights *plain = NULL, *six = NULL;
    if (prepack(c, c->w, 0, kernel, 0, &plain)) return; /* not a kernel this CPU prepacks for */
    ++*ran;
    qmoe_status st = prepack(c, c->w, 6, kernel, slice, &six);
    CHECK_MSG(st == QMOE_OK, "%s K=%lld N=%lld G=%lld slice %lld: %s", qmoe_kernel_name((qmoe_kernel)kernel),
              (long long)c->K, (long long)c->N, (long long)c->G, (long long)slice, qmoe_last_error());
    if (st) {
        qmoe_weights_destroy(plain);
        return;
    }
    uint64_t b8 = qmoe_weights_bytes(plain), b6 = qmoe_weights_bytes(six), quarter = (uint64_t)(c->E * c->K * c->N) / 4;
    if (exact_bytes)
        CHECK_MSG(b8 - b6 == quarter, "K=%lld N=%lld: %llu bytes against int8's %llu, not %llu fewer",
                  (long long)c->K, (long long)c->N, (unsigned long long)b6, (unsigned long long)b8,
                  (unsigned long long)quarter);
    else
        CHECK_MSG(b6 < b8, "K=%lld N=%lld: %llu bytes, int8's %llu", (long long)c->K, (long long)c->N,
                  (unsigned long long)b6, (unsigned long long)b8);
    int8_t *back = malloc((size_t)(c->K * c->N));
    for (int64_t e = 0; e < c->E; e++) {
        CHECK(qmoe_weights_unpack(six, e, back) == QMOE_OK);
        CHECK_MSG(!memcmp(back, c->w + e * c->K * c->N, (size_t)(c->K * c->N)),
                  "expert %lld: unpacked values differ from the ones given", (long long)e);
    }
    free(back);
    char what[160];
    snprintf(what, sizeof what, "6 bits K=%lld N=%lld G=%lld slice %lld", (long long)c->K, (long long)c->N,
             (long long)c->G, (long long)slice);
    qt_check_same_outputs(r, plain, six, kernel, c->K, c->N, c->E, what);
    qmoe_weights_destroy(plain);
    qmoe_weights_destroy(six);
}

static void check_refusals(qt_rng *r, int kernel)
{
    wcase c;
    make(r, &c, 4, 256, 128, 8);
    qmoe_weights *out = (qmoe_weights *)(uintptr_t)0x1;
    if (prepack(&c, c.w, 0, kernel, 0, &out)) { /* not a kernel this CPU prepacks for */
        free(c.w), free(c.ws);
        return;
    }
    qmoe_weights_destroy(out);
    /* 32 does not fit: expert 3, k 200, column 77 */
    int8_t *bad = malloc((size_t)(c.E * c.K * c.N));
    memcpy(bad, c.w, (size_t)(c.E * c.K * c.N));
    bad[(3 * c.K + 200) * c.N + 77] = 32;
    out = (qmoe_weights *)(uintptr_t)0x1;
    CHECK(prepack(&c, bad, 6, kernel, 0, &out) == QMOE_ERR_PARAM_INVALID && out == (qmoe_weights *)(uintptr_t)0x1);
    CHECK_MSG(strstr(qmoe_last_error(), "expert 3, k 200, column 77 holds 32, outside [-32, 31]") != NULL,
              "message: %s", qmoe_last_error());
    /* -33 in the second slice of two: the append is refused, the object as it was */
    bad[(3 * c.K + 200) * c.N + 77] = c.w[(3 * c.K + 200) * c.N + 77];
    bad[(2 * c.K + 5) * c.N + 127] = -33;
    qmoe_weights_options o = QMOE_WEIGHTS_OPTIONS_INIT;
    o.kernel = (qmoe_kernel)kernel;
    o.value_bits = 6;
    qt_check_bad_append(c.w, bad, c.ws, c.K, c.N, c.G, &o, "expert 0, k 5, column 127 holds -33");
    /* value_bits other than 0, 6, 8; 6 with a codebook; 6 with int4 weights */
    static const int8_t book[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    int64_t wa[3] = {c.E, c.K, c.N}, sa[3] = {c.E, c.G, c.N}, ba[2] = {c.E, c.N};
    qmoe_tensor *tw = qt_tensor(wa, 3, QMOE_DTYPE_INT8, c.w), *ts = qt_tensor(sa, 3, QMOE_DTYPE_FLOAT32, c.ws);
    const int odd[] = {7, -1, 4, 16};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        o.value_bits = odd[i];
        out = (qmoe_weights *)(uintptr_t)0x1;
        CHECK(qmoe_weights_prepack(tw, ts, NULL, &o, &out) == QMOE_ERR_PARAM_INVALID && out == (qmoe_weights *)(uintptr_t)0x1);
        char want[40];
        snprintf(want, sizeof want, "value_bits = %d", odd[i]); /* as given */
        CHECK_MSG(strstr(qmoe_last_error(), want) != NULL, "message: %s", qmoe_last_error());
    }
    o.value_bits = 6;
    o.codebook = book;
    CHECK(qmoe_weights_prepack(tw, ts, NULL, &o, &out) == QMOE_ERR_PARAM_INVALID && out == (qmoe_weights *)(uintptr_t)0x1);
    CHECK_MSG(strstr(qmoe_last_error(), "with a codebook") != NULL, "message: %s", qmoe_last_error());
    o.codebook = NULL;
    qmoe_tensor_destroy(tw);
    uint8_t *packed = calloc((size_t)(c.E * c.K * c.N) / 2, 1);
    float *bias = calloc((size_t)(c.E * c.N), sizeof(float));
    tw = qt_tensor(wa, 3, QMOE_DTYPE_INT4, packed);
    qmoe_tensor *tb = qt_tensor(ba, 2, QMOE_DTYPE_FLOAT32, bias);
    CHECK(qmoe_weights_prepack(tw, ts, tb, &o, &out) == QMOE_ERR_PARAM_INVALID && out == (qmoe_weights *)(uintptr_t)0x1);
    CHECK_MSG(strstr(qmoe_last_error(), "for int8 weights") != NULL, "message: %s", qmoe_last_error());
    qmoe_tensor_destroy(tw);
    qmoe_tensor_destroy(ts);
    qmoe_tensor_destroy(tb);
    free(packed), free(bias), free(bad), free(c.w), free(c.ws);
}

static void check_old_layout(qt_rng *r, int kernel)
{
    wcase c;
    make(r, &c, 2, 256, 128, 16);
    qmoe_weights *plain = NULL, *old = NULL;
    if (prepack(&c, c.w, 0, kernel, 0, &plain)) { /* not a kernel this CPU prepacks for */
        free(c.w), free(c.ws);
        return;
    }
    qmoe_weights_options o = QMOE_WEIGHTS_OPTIONS_INIT;
    o.kernel = (qmoe_kernel)kernel;
    const size_t old_size = offsetof(qmoe_weights_options, value_bits);
    CHECK(old_size == 48 || sizeof(void *) != 8); /* 0.3.5's sizeof on 64-bit targets */
    o.struct_size = (uint32_t)old_size;
    memset((char *)&o + offsetof(qmoe_weights_options, threads) + sizeof(int), 0xA5,
           old_size - offsetof(qmoe_weights_options, threads) - sizeof(int)); /* its padding */
    o.value_bits = 6;
    int64_t wd[3] = {c.E, c.K, c.N}, sd[3] = {c.E, c.G, c.N};
    qmoe_tensor *tw = qt_tensor(wd, 3, QMOE_DTYPE_INT8, c.w), *ts = qt_tensor(sd, 3, QMOE_DTYPE_FLOAT32, c.ws);
    CHECK_MSG(qmoe_weights_prepack(tw, ts, NULL, &o, &old) == QMOE_OK, "%s", qmoe_last_error());
    CHECK(old && qmoe_weights_bytes(old) == qmoe_weights_bytes(plain)); /* int8: value_bits unread */
    qmoe_weights_destroy(old);
    qmoe_weights_destroy(plain);
    qmoe_tensor_destroy(tw);
    qmoe_tensor_destroy(ts);
    free(c.w), free(c.ws);
}

int main(void)
{
    qt_rng r = {20261207};
    int kernels[QT_MAX_KERNELS], nk = qt_kernels(QMOE_KERNEL_PORTABLE, kernels, QT_MAX_KERNELS), ran = 0;
    static const struct { int64_t E, K, N, G; int exact; } cases[] = {
        {3, 256, 256, 16, 1},  /* ggml's q6_K: groups of 16 */
        {2, 512, 160, 1, 0},   /* per channel; columns past a panel */
        {3, 216, 128, 12, 0},  /* groups of 18: K padding in every group */
        {2, 2048, 128, 128, 1},
        {2, 2048, 384, 64, 1}, /* groups of 32, three panels */
    };
    for (int k = 0; k < nk; k++) {
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            wcase c;
            make(&r, &c, cases[i].E, cases[i].K, cases[i].N, cases[i].G);
            check_same(&r, &c, kernels[k], 0, cases[i].exact, &ran);
            if (i == 0) check_same(&r, &c, kernels[k], 2, cases[i].exact, &ran);
            free(c.w), free(c.ws);
        }
        check_refusals(&r, kernels[k]);
        check_old_layout(&r, kernels[k]);
    }
    CHECK_MSG(ran > 0, "no kernel prepacked");
    return qt_finish("prepack_bits6");
}
