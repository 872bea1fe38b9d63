/* qmoe moe run's layer from a safetensors file (tools/moe_run_layer.c): the tensors found and
 * checked by name as docs/moe-layer.md "Checkpoint rules" says (qmoe.load_experts applies the same
 * rules), per-expert or fused (transformers 5, gpt-oss). */
#ifndef QMOE_TOOLS_MOE_RUN_LAYER_H
#define QMOE_TOOLS_MOE_RUN_LAYER_H

#include <stddef.h>
#include <stdint.h>

#include "qmoe/qmoe.h"
#include "safetensors_read.h"

enum { NAME_MAX_LEN = 512, RUN_ERR_LEN = 1024 };

/* The layer's tensors, found and checked by name. */
typedef struct layer_in {
    int64_t E, I, H;
    const void **w[3]; /* gate, up, down per expert */
    void **copies;     /* aligned copies of misaligned tensors */
    size_t ncopies;
    const float *bias; /* gate.e_score_correction_bias (F32) or NULL */
    int64_t Is;        /* shared expert's intermediate size (0: none) */
    const void *shared[3];
    qmoe_dtype dtype;
    const void *shared_gate_w;            /* shared_expert_gate.weight [1, H] (Qwen2-MoE) or NULL */
    const void *gate_up_bias, *down_bias; /* gpt-oss: [E, 2I] (gate's I, then up's I), [E, H] */
    int gpt_oss;                          /* the gpt-oss layout (its SwiGLU: limit 7, alpha 1.702) */
} layer_in;

/* The layer under prefix into *L (pointers into the file, or copies *L owns); -1 with err naming
 * what is wrong. */
int moe_run_load_layer(const str_file *f, const char *prefix, layer_in *L, char *err);
void moe_run_free_layer(layer_in *L);

#endif
