/* A 0.2 program builds unchanged against 0.3 (qmoe/deprecated.h maps the 0.2 names to the 0.3
 * ones) and gets the same results as the 0.3 names. Written with the 0.2 names on purpose. */
#include <stdlib.h>
#include <string.h>

#include "qmoe/moe_layer.h"
#include "qmoe/qmoe.h"
#include "qmoe/quantize.h"
#include "qmoe/runtime.h"
#include "support/testlib.h"

int main(void)
{
    enum { E = 2, M = 8, K = 64, N = 64 };
    static int8_t x[M * K], w_nd[E * K * N], w_nz[E * K * N], q_old[M * N / 2], q_new[M * N / 2];
    static float ws[E * N], xs[M], s_old[M], s_new[M];
    int64_t gl[E] = {3, 8};
    qt_rng r = {9};
    for (int i = 0; i < M * K; i++) x[i] = (int8_t)qt_range(&r, -127, 127);
    for (int i = 0; i < E * K * N; i++) w_nd[i] = (int8_t)qt_range(&r, -127, 127);
    for (int i = 0; i < E * N; i++) ws[i] = 1e-3f;
    for (int i = 0; i < M; i++) xs[i] = 1e-2f;
    CHECK(qmoe_nd_to_nz_int8(w_nd, E, K, N, w_nz) == QMOE_OK);     /* 0.2 name */
    int64_t xsh[] = {M, K}, wsh[] = {E, N / 32, K / 16, 16, 32}, ssh[] = {E, N}, msh[] = {M},
            gsh[] = {E}, osh[] = {M, N / 2};
    int8_t *outs[2] = {q_old, q_new};
    float *scales[2] = {s_old, s_new};
    for (int pass = 0; pass < 2; pass++) {
        qmoe_tensor *t[7];
        qmoe_tensor_create(xsh, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, x, &t[0]);
        qmoe_tensor_create(wsh, 5, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_FRACTAL_NZ, w_nz, &t[1]);
        qmoe_tensor_create(ssh, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, ws, &t[2]);
        qmoe_tensor_create(msh, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, xs, &t[3]);
        qmoe_tensor_create(gsh, 1, NULL, QMOE_DTYPE_INT64, QMOE_FORMAT_ND, gl, &t[4]);
        qmoe_tensor_create(osh, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, outs[pass], &t[5]);
        qmoe_tensor_create(msh, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, scales[pass], &t[6]);
        uint64_t size = 0;
        static _Alignas(64) unsigned char work[1 << 20];
        if (pass == 0) { /* the 0.2 names */
            qmoe_op_options o = QMOE_OP_OPTIONS_INIT;
            qmoe_executor *ex = NULL;
            CHECK(qmoe_gmm_swiglu_quant_workspace_size(t[0], t[1], NULL, NULL, t[2], t[3], t[4], t[5],
                                                       t[6], NULL, &o, &size, &ex) == QMOE_OK);
            CHECK(size <= sizeof work && qmoe_gmm_swiglu_quant(work, size, ex, NULL) == QMOE_OK);
            CHECK(qmoe_executor_kernel(ex) != QMOE_KERNEL_AUTO);
            qmoe_executor_destroy(ex);
        } else { /* the 0.3 names */
            qmoe_grouped_matmul_swiglu_quant_options o = QMOE_GROUPED_MATMUL_SWIGLU_QUANT_OPTIONS_INIT;
            qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
            CHECK(qmoe_grouped_matmul_swiglu_quant_workspace_size(t[0], t[1], NULL, NULL, t[2], t[3],
                                                                  t[4], t[5], t[6], NULL, &o, &size,
                                                                  &ex) == QMOE_OK);
            CHECK(size <= sizeof work &&
                  qmoe_grouped_matmul_swiglu_quant(work, size, ex, NULL) == QMOE_OK);
            qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
        }
        for (int i = 0; i < 7; i++) qmoe_tensor_destroy(t[i]);
    }
    CHECK(!memcmp(q_old, q_new, sizeof q_old) && !memcmp(s_old, s_new, sizeof s_old));
    CHECK(qmoe_online_cores() == qmoe_device_online_cores() && qmoe_default_device() != NULL);
    int8_t v[8] = {1, -2, 3, -4, 5, -6, 7, -8};
    uint8_t a[4], b[4];
    CHECK(qmoe_pack_int4(v, 8, a) == QMOE_OK && qmoe_layout_int4_pack(v, 8, b) == QMOE_OK &&
          !memcmp(a, b, 4));
    return qt_finish("deprecated_names");
}
