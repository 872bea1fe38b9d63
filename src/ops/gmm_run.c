/* Single-threaded execution of a plan: expert by expert, row by row. */
#include "ops/gmm_run.h"

#include "kernels/kernel.h"

void qmoe_gmm_rows(const qmoe_gmm_params *p, int64_t e, int64_t m0, int64_t m1, float *row_buf)
{
    const qmoe_kernel_ops *k = qmoe_kernel_lookup(p->kernel);
    qmoe_thread_ctx ctx = {.thread = 0, .nthreads = 1};
    for (int64_t m = m0; m < m1; m++) {
        k->swiglu_block(p, &ctx, e, m, m + 1, 0, p->N2, row_buf, p->N2);
        k->quantize_rows(p, row_buf, p->N2, m, m + 1);
    }
}

qmoe_status qmoe_gmm_run(const qmoe_gmm_params *p, void *workspace, qmoe_stream *stream)
{
    (void)stream;
    int64_t start = 0;
    for (int64_t e = 0; e < p->E_groups; e++) {
        int64_t v = p->gl[e * p->gl_s];
        int64_t end = p->group_list_type == QMOE_GROUP_LIST_COUNT ? start + v : v;
        qmoe_gmm_rows(p, e, start, end, workspace);
        start = end;
    }
    return QMOE_OK;
}
