/*
 * kernel_params of the GroupedMatmulSwigluQuant family: the plain, fixed-size plan that phase one
 * (src/host) computes once and every kernel (src/kernels) executes without re-deriving anything.
 * Both sides include this header; audit both when a field changes.
 */
#ifndef QMOE_CORE_GMM_PARAMS_H
#define QMOE_CORE_GMM_PARAMS_H

#include <stdint.h>

#include "qmoe/qmoe.h"
#include "core/fastdiv.h"

struct qmoe_kernel_entry; /* src/kernels/kernel.h */

typedef enum qmoe_gmm_mode {
    QMOE_MODE_A8W8 = 0,
    QMOE_MODE_A8W4 = 1,
} qmoe_gmm_mode;

/* How the weight bytes are laid out; the logical weight is always W[e][k][n]. */
typedef enum qmoe_wlayout {
    QMOE_W_INT8_ND = 0,  /* [E,K,N] int8 */
    QMOE_W_INT8_NZ = 1,  /* [E,N/32,K/16,16,32] int8 */
    QMOE_W_INT4_ND = 2,  /* [E,K,N] int4 (nibble strides) */
    QMOE_W_INT4_NZ = 3,  /* [E,N/64,K/16,16,64] int4 (nibble strides) */
    QMOE_W_INT32_ND = 4, /* [E,K,N/8] int32 words of 8 int4 */
    QMOE_W_INT32_NZ = 5, /* [E,N/64,K/16,16,8] int32 words of 8 int4 */
} qmoe_wlayout;

/* Scale element types as read by kernels (after dtype validation). */
typedef enum qmoe_scale_type {
    QMOE_SCALE_F32 = 0,
    QMOE_SCALE_F16 = 1,
    QMOE_SCALE_BF16 = 2,
    QMOE_SCALE_U64_F32 = 3, /* low 32 bits of a 64-bit word are float32 bits */
} qmoe_scale_type;

/* The kernels' type for a weight-scale tensor of `dtype` (qmoe_dtype) in `mode`; 0 when the dtype
 * is not a scale type: float32, float16, bfloat16, and for A8W4 also uint64 / int64 (float32 bits
 * in the low word). The one mapping of every planner that takes weight scales. */
static inline int qmoe_scale_type_of(int32_t dtype, int32_t mode, int32_t *type)
{
    switch (dtype) {
    case QMOE_DTYPE_FLOAT32: *type = QMOE_SCALE_F32; return 1;
    case QMOE_DTYPE_FLOAT16: *type = QMOE_SCALE_F16; return 1;
    case QMOE_DTYPE_BFLOAT16: *type = QMOE_SCALE_BF16; return 1;
    case QMOE_DTYPE_UINT64:
    case QMOE_DTYPE_INT64:
        if (mode != QMOE_MODE_A8W4) return 0;
        *type = QMOE_SCALE_U64_F32;
        return 1;
    default: return 0;
    }
}

typedef struct qmoe_gmm_params {
    /* shapes */
    int64_t M, K, N, N2;  /* N2 = N/2 output columns */
    int64_t E, E_groups;  /* experts in weight; entries in groupList (E' <= E) */
    int64_t G, group_k;   /* K groups of the scale (1 for per-channel) and K/G */
    int32_t mode;         /* qmoe_gmm_mode */
    int32_t per_group;    /* weight_scale is [E,G,N] */
    int32_t group_list_type; /* qmoe_group_list_type */
    int32_t kernel;       /* qmoe_kernel chosen by the planner */
    const struct qmoe_kernel_entry *kernel_entry; /* its registry entry: phase one's choice,
                                                     used as is */

    /* operands: base pointers and strides in elements of each tensor's dtype */
    const int8_t *x;
    int64_t x_s[2];
    const void *w;
    int32_t w_layout;     /* qmoe_wlayout */
    int32_t ws_type;      /* qmoe_scale_type */
    int64_t w_s[5];       /* ND uses the first 3 */
    const void *ws;
    int64_t ws_s[3];      /* e, g, n (g stride 0 for per-channel) */
    const float *bias;    /* A8W4 only */
    int64_t bias_s[2];
    const float *xs;
    int64_t xs_s;
    const int64_t *gl;
    int64_t gl_s;
    int8_t *out;
    int64_t out_s[2];
    float *out_scale;
    int64_t out_scale_s;

    /* execution */
    int32_t threads;      /* threads the plan was made for (>= 1) */
    int32_t devices;      /* devices the plan was made for (>= 1) */
    uint64_t workspace_bytes;
    uint64_t ws_row_bytes; /* one S row: N2 floats, rounded up to 64 bytes (the S row stride) */

    /* partition and tiling (src/ops/grouped_matmul_swiglu_quant/partition.h documents the rules; the driver in
     * src/ops/grouped_matmul_swiglu_quant/run.c follows them to the letter) */
    int32_t row_block;      /* rows per block: one staged operand slot, one kernel block call */
    int32_t stage_depth;    /* operand buffers per thread in flight on the copy queue (>= 2) */
    int32_t col_block;      /* column split: columns per part are a multiple of this */
    int32_t col_max_rows;   /* column split when a device has fewer row blocks than parts and at
                               most this many rows; 0: never */
    int32_t rows_per_chunk; /* multi-device chunk (128-byte lines of output and outputScale);
                               0: unsafe to split, device 0 does everything */
    int32_t pad0;
    uint64_t kernel_scratch_bytes; /* qmoe_swiglu_quant_scratch_bytes(k, p, row_block, N2) */
    uint64_t thread_scratch_bytes; /* one thread's scratchpad slice (layout builder) */
    uint64_t device_ws_bytes;      /* workspace bytes per device (column-split S rows) */
    qmoe_fastdiv_t threads_div;    /* by threads: blocks per part */
    qmoe_fastdiv_t devices_div;    /* by devices: chunks per device */
    qmoe_fastdiv_t row_block_div;  /* by row_block: blocks per expert segment */
    /* Per-expert weight lists (src/ops/grouped_matmul_swiglu_quant/weight_list.c). swiglu_limit > 0 clamps C before
     * SwiGLU: activated half to <= limit, linear half to [-limit, limit] (docs/ops/). With
     * w_list set, expert e's weight starts at w_list[e] and its scale at ws_list[e] (the expert
     * strides w_s[0], ws_s[0] are unused); phase two copies the tables into the workspace at
     * list_table_offset, so a queued operator never reads the executor. */
    float swiglu_limit;
    const void *const *w_list;
    const void *const *ws_list;
    uint64_t list_table_offset;
    /* prepacked weights (core/prepack.h) in place of w, ws, bias; NULL: the raw tensors */
    const struct qmoe_weights *pp;
    /* The SwiGLU variant of the operator's options (kernels/swiglu_quant.h qmoe_swiglu_value):
     * alpha 0 is the plain SwiGLU; bias [E, N] float32 rows bias_s0 apart, or NULL. */
    float swiglu_alpha;
    int32_t pad1;
    const float *swiglu_bias;
    int64_t swiglu_bias_s0;
    uint8_t reserved[48]; /* room to grow without changing the size */
} qmoe_gmm_params;

_Static_assert(sizeof(qmoe_gmm_params) == 512, "qmoe_gmm_params is a fixed-size plan");

#endif
