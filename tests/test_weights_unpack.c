/*
 * qmoe_weights_unpack (qmoe/weights.h), through the public API: for every kernel this CPU runs,
 * A8W8 and A8W4, per channel and per group (group sizes that are and are not multiples of 4),
 * widths that fill whole panels and ones that do not, the integers read back from the prepacked
 * object are exactly the ones it was made from; NULL arguments and an expert outside [0, E)
 * are refused with the documented codes and leave the output untouched.
 */
#include <stdlib.h>
#include <string.h>

#include "qmoe/qmoe.h"
#include "qmoe/weights.h"
#include "support/kernels.h"
#include "support/testlib.h"

static qt_rng rng = {20261201};

static void one_case(int kernel, int a8w4, int64_t E, int64_t K, int64_t N, int64_t G, int *ran)
{
    size_t nv = (size_t)(E * K * N), ns = (size_t)(E * (G ? G : 1) * N);
    int8_t *w = malloc(nv), *back = malloc((size_t)(K * N));
    uint8_t *packed = malloc(nv / 2 + 1);
    float *scale = malloc(ns * sizeof(float)), *bias = calloc((size_t)(E * N), sizeof(float));
    for (size_t i = 0; i < nv; i++) w[i] = (int8_t)(a8w4 ? qt_range(&rng, -8, 7) : qt_range(&rng, -128, 127));
    for (size_t i = 0; i < ns; i++) scale[i] = qt_uniform(&rng, 0.01f, 0.1f);
    int64_t wshape[3] = {E, K, N}, sg[3] = {E, G, N}, sc[2] = {E, N};
    qmoe_tensor *tw = NULL, *ts = NULL, *tb = NULL;
    qmoe_weights *pw = NULL;
    if (a8w4) {
        CHECK(qmoe_layout_int4_pack(w, (int64_t)nv, packed) == QMOE_OK);
        CHECK(qmoe_tensor_create(wshape, 3, NULL, QMOE_DTYPE_INT4, QMOE_FORMAT_ND, packed, &tw) == QMOE_OK);
        CHECK(qmoe_tensor_create(sc, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, bias, &tb) == QMOE_OK);
    } else {
        CHECK(qmoe_tensor_create(wshape, 3, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, w, &tw) == QMOE_OK);
    }
    CHECK(qmoe_tensor_create(G ? sg : sc, G ? 3 : 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, scale, &ts) ==
          QMOE_OK);
    qmoe_weights_options o = QMOE_WEIGHTS_OPTIONS_INIT;
    o.kernel = (qmoe_kernel)kernel;
    if (qmoe_weights_prepack(tw, ts, tb, &o, &pw) == QMOE_OK) { /* else: not on this CPU */
        ++*ran;
        for (int64_t e = 0; e < E; e++) {
            memset(back, 0x55, (size_t)(K * N));
            CHECK(qmoe_weights_unpack(pw, e, back) == QMOE_OK);
            CHECK_MSG(memcmp(back, w + (size_t)(e * K * N), (size_t)(K * N)) == 0,
                      "%s %s E=%lld K=%lld N=%lld G=%lld: expert %lld unpacks to other integers",
                      qmoe_kernel_name((qmoe_kernel)kernel), a8w4 ? "A8W4" : "A8W8", (long long)E,
                      (long long)K, (long long)N, (long long)G, (long long)e);
        }
        memset(back, 0x55, (size_t)(K * N));
        CHECK(qmoe_weights_unpack(pw, E, back) == QMOE_ERR_PARAM_INVALID);
        CHECK(qmoe_weights_unpack(pw, -1, back) == QMOE_ERR_PARAM_INVALID);
        CHECK(qmoe_weights_unpack(pw, 0, NULL) == QMOE_ERR_PARAM_NULLPTR);
        int untouched = 1;
        for (int64_t i = 0; i < K * N; i++) untouched &= back[i] == 0x55;
        CHECK_MSG(untouched, "a refused unpack wrote its output");
    }
    qmoe_weights_destroy(pw);
    qmoe_tensor_destroy(tw);
    qmoe_tensor_destroy(ts);
    qmoe_tensor_destroy(tb);
    free(w);
    free(back);
    free(packed);
    free(scale);
    free(bias);
}

int main(void)
{
    int ids[QT_MAX_KERNELS];
    int n = qt_kernels(QMOE_KERNEL_PORTABLE, ids, QT_MAX_KERNELS), ran = 0;
    for (int i = 0; i < n; i++)
        for (int a8w4 = 0; a8w4 < 2; a8w4++) {
            one_case(ids[i], a8w4, 3, 64, 130, 4, &ran);  /* groups of 16, a part panel */
            one_case(ids[i], a8w4, 2, 24, 2, 4, &ran);    /* groups of 6: padded to 8 */
            one_case(ids[i], a8w4, 1, 256, 256, 0, &ran); /* per channel, whole panels */
            one_case(ids[i], a8w4, 2, 512, 96, 16, &ran); /* groups of 32 */
        }
    CHECK_MSG(ran >= 8, "only %d cases ran (no kernel prepacks?)", ran);
    CHECK(qmoe_weights_unpack(NULL, 0, (int8_t[1]){0}) == QMOE_ERR_PARAM_NULLPTR);
    return qt_finish("weights_unpack");
}
