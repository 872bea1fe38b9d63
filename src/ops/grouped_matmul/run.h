/*
 * Internals of GroupedMatmul (include/qmoe/grouped_matmul.h): the plan phase one fills
 * (src/ops/grouped_matmul/plan.c) and phase two runs (src/ops/grouped_matmul/run.c). One plain
 * block: an op holds it, each run binds its data into a copy.
 */
#ifndef QMOE_OPS_GROUPED_MATMUL_RUN_H
#define QMOE_OPS_GROUPED_MATMUL_RUN_H

#include "core/gmm_params.h"
#include "kernels/epilogue_dequant.h"
#include "kernels/gemm_driver.h"
#include "ops/eltwise/exec.h"
#include "qmoe/grouped_matmul.h"
#include "runtime/device.h"

typedef enum gmm_path {
    GMM_PATH_INT8 = 0,  /* quantized, float output: the shared GEMM driver + dequant epilogue */
    GMM_PATH_EXACT = 1, /* quantized, plain loops: int32 output, and N odd (no column halves) */
    GMM_PATH_FLOAT = 2, /* float x and weight: a blocked float loop */
} gmm_path;


typedef struct grouped_matmul_plan {
    qmoe_gmm_params p; /* int8 paths: x, weight, scales, per-token scale, G (mode, layout) */
    const qmoe_gemm_isa *isa;
    int32_t path;      /* gmm_path */
    int32_t threads;
    int32_t scaled;    /* GMM_PATH_EXACT: 1 when scale / per_token_scale apply (float output) */
    int32_t pad;
    int64_t M, K, N, E, group_list_type;
    int64_t rb, cb;    /* rows per work item; columns per item (of each half on the driver) */
    moe_view x, w, gl; /* float path: x, weight [E, K, N]; group list (every path) */
    gmm_dequant_out o;
    uint64_t workspace_bytes; /* segment starts and item prefix: 2 * (E + 1) int64 */
    uint64_t slice_bytes;     /* one thread's scratch */
} grouped_matmul_plan;

/* The descriptor's data check (groupList, into the workspace's segment starts) and run. */
qmoe_status qmoe_grouped_matmul_check(const void *plan, void *workspace);
qmoe_status qmoe_grouped_matmul_run(const void *plan, void *workspace, qmoe_device *dev,
                                    int index, int count);


#endif
