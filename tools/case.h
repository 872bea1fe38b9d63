/*
 * One operator case held as arrays: what `qmoe run` loads from .npy files, what `qmoe gen` writes
 * and what `qmoe demo` builds in memory. Turning a case into tensors and running it through the
 * public two-phase API lives here once, for every subcommand.
 */
#ifndef QMOE_TOOLS_CASE_H
#define QMOE_TOOLS_CASE_H

#include <stdint.h>

#include "npy.h"
#include "qmoe/qmoe.h"
#include "qmoe/weights.h"

#define CASE_ERR_LEN 512

enum case_input {
    CASE_X,
    CASE_WEIGHT,
    CASE_BIAS,
    CASE_WEIGHT_SCALE,
    CASE_X_SCALE,
    CASE_GROUP_LIST,
    CASE_INPUTS
};

/* Per input: its `qmoe run` option, its name in the spec (and in qmoe_last_error messages), and
 * the file name `qmoe gen` gives it. */
typedef struct case_input_info {
    const char *option;
    const char *tensor;
    const char *file;
} case_input_info;

extern const case_input_info case_inputs[CASE_INPUTS];

typedef struct op_case {
    npy_array in[CASE_INPUTS];       /* in[CASE_BIAS].data == NULL: no bias (A8W8) */
    const char *source[CASE_INPUTS]; /* file names for error messages; NULL when built in memory */
    int weight_int4_nd;              /* weight is [E, K, N/2] bytes of packed int4 (ND int4) */
    int scale_bf16;                  /* a <u2 weight scale holds bfloat16 bits */
    qmoe_group_list_type group_list_type;
} op_case;

void case_free(op_case *c);

/* Reads the header of every input whose source is set (shapes and dtypes, no data: in[i].data
 * stays NULL), checking each file's size against its header; err: "FILE: reason". */
int case_load_headers(op_case *c, char *err);

/* Loads every input whose source is set (the bias is optional); err: "FILE: reason". */
int case_load(op_case *c, char *err);

/* The case of one row m of c routed to expert e: views of x and xScale at row m, the same
 * weights, and a cumsum groupList [0, ..., 0, 1] of e + 1 entries. Free with case_free. */
int case_row(const op_case *c, int64_t m, int64_t e, op_case *row, char *err);

/* The end row of every expert (cumulative), whatever the groupList type; `ends` has
 * in[CASE_GROUP_LIST].count entries. The values are not checked. */
void case_group_ends(const op_case *c, int64_t *ends);

/* ------------------------------------------------------------------ execution ---------------- */

typedef struct case_exec {
    qmoe_grouped_matmul_swiglu_quant_executor *executor;
    void *workspace;
    uint64_t workspace_size;
    npy_array out;       /* int8 [M, N/2], zero-filled before the run */
    npy_array out_scale; /* float32 [M], zero-filled before the run */
    qmoe_weights *weights; /* case_plan_prepacked: the prepacked weights the executor reads */
} case_exec;

/* Phase one on the shapes alone (the inputs may be headers only, see case_load_headers and
 * case_generate_headers; an input counts as present when it has data, a source or a rank): every
 * rule that needs no data is checked before any input is read or output allocated, so a refused
 * case costs no memory. The tensors point into an inaccessible address-space reservation the size
 * of the real arrays, which phase one never reads. */
int case_check(const op_case *c, const qmoe_grouped_matmul_swiglu_quant_options *options, char *err);

/* Phase one: allocates the zeroed outputs, builds the tensors, plans with `options` (its
 * group_list_type is taken from the case) and allocates the workspace. */
int case_plan(const op_case *c, const qmoe_grouped_matmul_swiglu_quant_options *options, case_exec *ex, char *err);

/* The same with the weight prepacked first (qmoe/weights.h) for options->kernel; the operator
 * then gets the object's view and no weight scale or bias. */
int case_plan_prepacked(const op_case *c, const qmoe_grouped_matmul_swiglu_quant_options *options, case_exec *ex,
                        char *err);

/* Phase two on `stream` (NULL: synchronous). */
int case_launch(const op_case *c, case_exec *ex, qmoe_stream *stream, char *err);

/* Formats qmoe_last_error() for a failed status, naming the input file when the message starts
 * with a tensor name ("weightScale: ..." or "groupList[1] ..."). */
void case_error(const op_case *c, qmoe_status st, char *err);

void case_exec_free(case_exec *ex);

/* ------------------------------------------------------------------ random cases ------------- */

typedef enum gen_weight_format {
    GEN_WEIGHT_NZ,      /* FRACTAL_NZ: int8 5-D (A8W8) or int32-packed int4 5-D (A8W4) */
    GEN_WEIGHT_ND,      /* ND: int8 [E,K,N] (A8W8) or int32-packed int4 [E,K,N/8] (A8W4) */
    GEN_WEIGHT_ND_INT4, /* ND packed int4 bytes uint8 [E,K,N/2] (A8W4; run --weight-int4-nd) */
} gen_weight_format;

typedef enum gen_scale_dtype {
    GEN_SCALE_F32,
    GEN_SCALE_F16,
    GEN_SCALE_U64,
    GEN_SCALE_BF16
} gen_scale_dtype;

typedef struct gen_params {
    int64_t E, M, K, N;
    int64_t groups;    /* 0: per-channel weight scale [E,N]; G: per-group [E,G,N] */
    int64_t tail_rows; /* rows past the last group */
    int a8w4;
    int empty_experts; /* leave every third expert (1, 4, ...) without tokens */
    gen_weight_format weight_format;
    gen_scale_dtype scale_dtype;
    qmoe_group_list_type group_list_type;
    uint64_t seed;
    int64_t max_gib; /* case_generate_headers refuses a case whose memory would exceed it */
} gen_params;

/* The vendor sample: E=4, M=8192, K=7168, N=4096, A8W4 per-channel, NZ int32-packed weights. */
void gen_defaults(gen_params *p);

/* A random, realistic case: tokens spread unevenly over the experts, weights and activations
 * quantized with amax/127-style scales so outputs are neither saturated nor zero, and for A8W4
 * the bias computed with qmoe_layout_weight_assist_matrix. */
int case_generate(const gen_params *p, op_case *c, char *err);

/* The arrays case_generate would make, as headers only (no memory, nothing to free): for
 * case_check before generating, so a case the operator refuses costs no memory. Also refuses a
 * case whose arrays (and the unpacked weight made on the way) would take over p->max_gib GiB. */
int case_generate_headers(const gen_params *p, op_case *c, char *err);

#endif
