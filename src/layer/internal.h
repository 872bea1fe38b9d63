/* The MoE layer's insides shared by its files: moe_layer.c (create, forward) and
 * moe_layer_shard.c (shards and the forward's pieces run by expert parallelism). */
#ifndef QMOE_OPS_MOE_LAYER_INTERNAL_H
#define QMOE_OPS_MOE_LAYER_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "ops/eltwise/exec.h"
#include "qmoe/grouped_matmul.h"
#include "qmoe/moe_layer.h"
#include "qmoe/moe_ops.h"
#include "qmoe/op.h"
#include "qmoe/weights.h"

#define MOE_LAYER_OP "MoeLayer"

/* What a plan was made for: the shapes, strides and dtypes of the forward's tensors (hidden,
 * logits or ids, weights, out) and which forward; never their data or the workspace. */
typedef struct plan_key {
    struct {
        int64_t dtype, d0, d1, s0, s1;
    } t[4];
    int64_t routed;
} plan_key;

/* The five operators of a forward, planned once for a plan_key (qmoe/op.h), each run with the
 * forward's data. */
typedef struct layer_plan {
    qmoe_op *gate, *weights, *route, *gu, *down, *fin; /* weights: route_weights.c (or NULL) */
    uint64_t ops_bytes; /* the largest operator workspace */
} layer_plan;

/* The experts of a shard (qmoe_moe_layer_experts): gate/up and down for R rows. */
typedef struct experts_key {
    int64_t rows, y_dtype, x_s0, y_s0, xs_s0, gl_s0;
} experts_key;

typedef struct experts_plan {
    qmoe_op *gu, *down;
    uint64_t hs_off, ops_off, need; /* the workspace: int8 [R, I], float32 [R], the ops' scratch */
} experts_plan;

void moe_experts_plan_free(experts_plan *p);

struct qmoe_moe_layer {
    qmoe_moe_layer_config cfg;
    qmoe_weights *w13, *w2;
    qmoe_tensor *t13, *t2; /* views of the prepacked objects */
    float *bias;           /* [E] selection bias, or NULL */
    float *sgate;          /* [H] the shared expert's gate (float32), or NULL */
    float *gubias, *dbias; /* [E + m, 2I], [E + m, H] expert biases (float32; shared rows 0), or NULL */
    /* The last forward's plan: a forward with the same shapes (an engine's steady state, any
     * data and workspace) reuses it and allocates nothing. Taken with trylock: a forward that finds it
     * busy (another thread's) plans on its own. */
    pthread_mutex_t lock;
    int cached;
    plan_key key;
    layer_plan plan;
    int experts_cached; /* the same for the experts of a shard (expert parallelism) */
    experts_key experts_key;
    experts_plan experts;
    /* A shard (qmoe_moe_layer_create_shard*): the routed experts it holds, ascending; their
     * weights are experts 0 .. nheld - 1 of w13 / w2 (then the shared expert's chunks). */
    int64_t nheld;
    int32_t *held; /* NULL: all num_experts */
};

int moe_layer_is_float(qmoe_dtype d);
/* Experts the shared expert runs as (chunks of I). */
int64_t moe_layer_n_shared(const qmoe_moe_layer_config *c);
/* The configuration checked and completed (defaults) into *c. */
qmoe_status moe_layer_check_config(const qmoe_moe_layer_config *in, qmoe_moe_layer_config *c);
/* The configuration and the pointers of a layer made from float weights (whole or shard). */
qmoe_status moe_layer_check_float_args(const qmoe_moe_layer_config *config, qmoe_moe_layer_config *c,
                                       const void *const *gate, const void *const *up,
                                       const void *const *down, qmoe_moe_layer **layer);
/* A tensor view of `shape` at base + off (the workspace's intermediates). */
qmoe_status moe_layer_tensor_at(uintptr_t base, uint64_t off, qmoe_dtype d, int nd, const int64_t *shape,
                                qmoe_tensor **t);
/* A descriptor with t's shape, strides and dtype (rank 1 or 2; NULL for NULL): the layer's plans
 * are made from shapes only. */
qmoe_status moe_layer_desc_of(const qmoe_tensor *t, qmoe_tensor **d);
/* t is [rows, cols] (rows < 0: any row count). */
qmoe_status moe_layer_check_2d(const qmoe_tensor *t, const char *arg, int64_t rows, int64_t cols);

/* How the forward gates (route_weights.c): the softmax operator (softmax, no renormalisation,
 * bias or scaling), MoeGatingTopK (renormalised), or MoeGatingTopK writing its scores, the
 * weights then read from them (moe_layer_raw_weights). */
enum { MOE_GATE_SOFTMAX, MOE_GATE_TOPK, MOE_GATE_RAW };
int moe_layer_gate_path(const qmoe_moe_layer_config *c);
/* y[t, j] = norm[t, ids[t, j]] * rsf (float32, rounded to yd) for j < K (element strides
 * i0, i1 of ids and y0, y1 of y). */
void moe_layer_raw_weights(const float *norm, int64_t T, int64_t E, int64_t K, double rsf, const int32_t *ids,
                           int64_t i0, int64_t i1, void *y, qmoe_dtype yd, int64_t y0, int64_t y1);
/* sigmoid(hidden row . g) (config.shared_expert_gate's rule); s1: the row's element stride. */
float moe_layer_shared_weight(const void *hidden, qmoe_dtype hd, int64_t s1, int64_t H, const float *g);
/* The forward's weights step on the stream: raw weights from norm [T, E] float32 (NULL: none)
 * and ids; the shared columns of y [T, K + m] from hidden when the layer has a shared gate.
 * *op NULL when there is nothing to do. */
qmoe_status moe_layer_weights_op(const qmoe_moe_layer *L, const qmoe_tensor *norm, const qmoe_tensor *ids,
                                 const qmoe_tensor *hidden, const qmoe_tensor *y, qmoe_op **op);

#endif
