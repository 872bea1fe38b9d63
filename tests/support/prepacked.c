#include "support/prepacked.h"

#include <stdlib.h>

#include "support/testlib.h"

qmoe_tensor *qt_tensor(const int64_t *shape, int nd, qmoe_dtype dt, void *data)
{
    qmoe_tensor *t = NULL;
    CHECK(qmoe_tensor_create(shape, nd, NULL, dt, QMOE_FORMAT_ND, data, &t) == QMOE_OK);
    return t;
}

void qt_run_prepacked(qmoe_weights *pw, int kernel, int threads, int64_t M, int64_t K, int64_t N,
                      int64_t E, const int8_t *x, const float *xs, const int64_t *gl, int8_t *q,
                      float *scale)
{
    int64_t xd[2] = {M, K}, od[2] = {M, N / 2};
    qmoe_tensor *view = NULL, *tx = qt_tensor(xd, 2, QMOE_DTYPE_INT8, (void *)(uintptr_t)x);
    qmoe_tensor *txs = qt_tensor(&M, 1, QMOE_DTYPE_FLOAT32, (void *)(uintptr_t)xs);
    qmoe_tensor *tgl = qt_tensor(&E, 1, QMOE_DTYPE_INT64, (void *)(uintptr_t)gl);
    qmoe_tensor *to = qt_tensor(od, 2, QMOE_DTYPE_INT8, q);
    qmoe_tensor *tos = qt_tensor(&M, 1, QMOE_DTYPE_FLOAT32, scale);
    CHECK(qmoe_weights_tensor(pw, &view) == QMOE_OK);
    qmoe_grouped_matmul_swiglu_quant_options o = {.kernel = (qmoe_kernel)kernel, .threads = threads};
    uint64_t wsb = 0;
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    qmoe_status st = qmoe_grouped_matmul_swiglu_quant_workspace_size(tx, view, NULL, NULL, NULL, txs, tgl, to,
                                                                     tos, NULL, &o, &wsb, &ex);
    CHECK_MSG(st == QMOE_OK, "plan: %s", qmoe_last_error());
    if (!st) {
        void *wsp = wsb ? aligned_alloc(64, (wsb + 63) / 64 * 64) : NULL;
        CHECK(qmoe_grouped_matmul_swiglu_quant(wsp, wsb, ex, NULL) == QMOE_OK);
        free(wsp);
    }
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
    qmoe_tensor_destroy(view);
    qmoe_tensor_destroy(tx);
    qmoe_tensor_destroy(txs);
    qmoe_tensor_destroy(tgl);
    qmoe_tensor_destroy(to);
    qmoe_tensor_destroy(tos);
}
