/*
 * qmoe - the grouped matmul of a MoE layer's down projection: GroupedMatmul (the vendor's
 * aclnnGroupedMatmulV4 / npu_grouped_matmul, its MoE subset; contract in
 * docs/ops/grouped-matmul.md).
 *
 * One x [M, K], one stacked weight [E, K, N] (ND or FRACTAL_NZ), a group list that splits x's
 * rows into E consecutive segments (segment e uses weight e), one output [M, N]:
 *
 *   int8 x, int8 / int4 / int32-packed-int4 weight, per_token_scale [M] float32, scale [E, N]
 *   (per channel) or [E, G, N] (per group, K % G == 0):
 *       out[m][n] = sum_g (acc_g[m][n] * pts[m] * scale[e][g][n])  (+ bias[e][n])    (A8W8)
 *       out[m][n] = (sum_g acc_g[m][n] * scale[e][g][n]) * pts[m] (+ bias[e][n])     (A8W4)
 *     acc_g the exact int32 sum of x * w over K group g; bias float32 [E, N] (optional);
 *     out bfloat16, float16 or float32, computed in float32 and rounded once.
 *   int8 x, int8 weight, no scale and no per_token_scale: out int32 = acc (+ bias int32 [E, N]).
 *   float x and weight (all float32, float16 or bfloat16 alike): out (x's dtype) =
 *       x @ w (+ bias, x's dtype or float32), accumulated in float32 in k order.
 *
 * group_list int64 [E]: cumulative row ends (group_list_type 0) or row counts (1), checked when
 * the operator runs (non-decreasing / non-negative, total <= M); rows past the total are not
 * written. Two phases as every qmoe operator: phase one validates and plans without reading
 * tensor data, phase two queues the operator on a stream (NULL: runs it synchronously). A failed
 * call writes nothing and says why in qmoe_last_error(). Results do not depend on the thread count.
 */
#ifndef QMOE_GROUPED_MATMUL_H
#define QMOE_GROUPED_MATMUL_H

#include <stdint.h>

#include "qmoe/export.h"
#include "qmoe/qmoe.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qmoe_grouped_matmul_executor qmoe_grouped_matmul_executor;

/* Options of phase one; NULL or all-zero: the online cores and the fastest kernel. struct_size
 * is sizeof as the caller was compiled (0: this first layout); new fields are only appended. */
typedef struct qmoe_grouped_matmul_options {
    uint32_t struct_size;
    int threads;    /* parts the work is split into (0: the online cores), at most 4096 */
    int32_t kernel; /* qmoe_kernel for the int8 paths (QMOE_KERNEL_AUTO: the fastest) */
} qmoe_grouped_matmul_options;

#define QMOE_GROUPED_MATMUL_OPTIONS_INIT \
    {(uint32_t)sizeof(qmoe_grouped_matmul_options), 0, QMOE_KERNEL_AUTO}

/* Phase one. bias, scale, per_token_scale optional (NULL) as the formulas above say;
 * group_list_type 0 (cumsum) or 1 (count). */
QMOE_API qmoe_status qmoe_grouped_matmul_workspace_size(
    const qmoe_tensor *x, const qmoe_tensor *weight, const qmoe_tensor *bias,
    const qmoe_tensor *scale, const qmoe_tensor *per_token_scale, const qmoe_tensor *group_list,
    int64_t group_list_type, const qmoe_tensor *out, const qmoe_grouped_matmul_options *options,
    uint64_t *workspace_size, qmoe_grouped_matmul_executor **executor);

/* Phase two: the executor is reusable (destroy it with qmoe_grouped_matmul_executor_destroy). */
QMOE_API qmoe_status qmoe_grouped_matmul(void *workspace, uint64_t workspace_size,
                                         qmoe_grouped_matmul_executor *executor,
                                         qmoe_stream *stream);

QMOE_API void qmoe_grouped_matmul_executor_destroy(qmoe_grouped_matmul_executor *executor);

#ifdef __cplusplus
}
#endif

#endif
