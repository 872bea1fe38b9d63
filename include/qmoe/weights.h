/*
 * Prepacked expert weights: the weights of a MoE layer rearranged once, at load time, into the
 * order the chosen kernel streams, with their scales and (A8W4) correction terms folded in, so
 * every call of the operator skips the per-call repacking that dominates at few rows per expert.
 *
 * The object is used through a tensor view (qmoe_weights_tensor) passed as the operator's
 * `weight`; phase one recognises it. The layout inside is internal and versioned: a view of an
 * object made by another build of qmoe, on a CPU with other features, for another kernel, or for
 * an operator of other K, N, E, weight dtype or scale type, is refused with
 * QMOE_ERR_PARAM_INVALID and a message, never misread. Results are bit-identical to the raw
 * weight path of the same kernel.
 */
#ifndef QMOE_WEIGHTS_H
#define QMOE_WEIGHTS_H

#include <stdint.h>

#include "qmoe/export.h"
#include "qmoe/qmoe.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qmoe_weights qmoe_weights;

/* Options of qmoe_weights_prepack: initialise with QMOE_WEIGHTS_OPTIONS_INIT (or zero it), then set
 * what you need. Defaults: weight format as declared, the kernel QMOE_KERNEL_AUTO picks on this CPU
 * (QMOE_ISA may lower it). `struct_size` works as in qmoe_grouped_matmul_swiglu_quant_options: 0
 * means this first layout, new fields are only ever appended. */
typedef struct qmoe_weights_options {
    uint32_t struct_size; /* sizeof(qmoe_weights_options) as the caller was compiled, or 0 */
    qmoe_kernel kernel;   /* the kernel the object is made for; never QMOE_KERNEL_REFERENCE */
    int force_weight_nz;  /* nonzero: treat weight as FRACTAL_NZ, as the operator option does */
    /* The object's experts; 0: the weight's E. More than that: qmoe_weights_prepack packs the
     * first E and qmoe_weights_append the rest, a slice at a time (since 0.3.1). */
    int64_t experts;
    /* Since 0.3.2. 0: the scales are kept as float32, or 2 bytes each when given as float16 /
     * bfloat16. B > 0: each column's scales are kept in blocks of B groups (the last block may
     * be shorter) as one float32 base and one int8 multiplier per group, when every scale of the
     * weight is exactly base * multiplier in float32 arithmetic (the K-quants' d * sc, for
     * one): 1 byte a group instead of 4, widened per panel as the kernels read them, so the
     * results are the same bits. Scales that are not such products fail with
     * QMOE_ERR_PARAM_INVALID (prepack, or the append of the slice that holds them). */
    int64_t scale_block;
    /* Since 0.3.3. NULL: none. Else 16 int8 values, copied (int8 weights only): every weight
     * value must be one of them, and the object keeps each as the 4-bit index of its first equal
     * entry (the codebook needs 0, the value of the layout's padding): half the weight bytes, the
     * same results (the kernels look the indices up as they read them; qmoe_weights_unpack gives
     * the values back). A weight with another value fails with QMOE_ERR_PARAM_INVALID naming its
     * expert (in the weight given), row and column (prepack, or the append of the slice that
     * holds it). For formats
     * whose values are few and not an int4 range, e.g. MXFP4's E2M1 times 2: {0, 1, 2, 3, 4,
     * 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}, so each index is the format's own code. The
     * codebook {0, 1, ..., 15} (unsigned 4-bit values, ggml's q4_K) is read as int4 weights
     * are, without their offset and with no lookup, on every kernel. */
    const int8_t *codebook;
    /* Since 0.3.5. Threads that pack the experts, in qmoe_weights_prepack and in every
     * qmoe_weights_append of the object: 0, every online core; 1, the calling thread only; at
     * most 4096. They are started and joined within each call, each packing whole experts, so
     * the object is the same bytes for any count. (Callers built before this field get 0.) */
    int threads;
    /* Since 0.3.6. 0 (or 8): int8 weights are kept a byte a value. 6 (int8 weights, no
     * codebook): every weight value must be in [-32, 31], and the object keeps each in 6 bits,
     * 0.75 bytes a value (ggml's q6_K integers, for one); the same results (the driver widens a
     * panel's steps as it reads them; qmoe_weights_unpack gives the values back). A value outside
     * fails with QMOE_ERR_PARAM_INVALID naming its expert (in the weight given), row and column
     * (prepack, or the append of the slice that holds it). Other values, 6 with int4 weights or
     * with a codebook: QMOE_ERR_PARAM_INVALID. (Callers built before this field get 0: it is
     * 64-bit so that it lies past their struct_size, not in the tail padding it counted.) */
    int64_t value_bits;
} qmoe_weights_options;

#define QMOE_WEIGHTS_OPTIONS_INIT {(uint32_t)sizeof(qmoe_weights_options), QMOE_KERNEL_AUTO, 0, 0, 0, NULL, 0, 0}

/*
 * Builds the prepacked weights of the fused operator (GroupedMatmulSwigluQuant) from `weight`
 * (any layout phase one accepts: int8/int4/int32 FRACTAL_NZ or ND, see qmoe.h), `weight_scale`
 * ([E,N] or [E,G,N], any accepted dtype) and, for A8W4, `bias` (float32 [E,N]; NULL for A8W8).
 * Reads the tensors' data once; nothing of theirs is kept. The object holds about the raw
 * weight bytes plus, per column, G scales and one float: the scales as float32, or 2 bytes each
 * when `weight_scale` is float16 or bfloat16 (kept as given and widened exactly as the kernels
 * read them: the same results, half the scale bytes; qmoe_weights_bytes).
 * QMOE_ERR_PARAM_NULLPTR / QMOE_ERR_PARAM_INVALID as phase one for the same tensors (and for
 * the reference kernel, which reads raw weights only), and for options.scale_block < 0 or
 * scales that are not blocks of base * int8 (options.scale_block > 0); QMOE_ERR_INNER when out
 * of memory. On error *out is left as it was.
 */
QMOE_API qmoe_status qmoe_weights_prepack(const qmoe_tensor *weight,
                                          const qmoe_tensor *weight_scale,
                                          const qmoe_tensor *bias,
                                          const qmoe_weights_options *options,
                                          qmoe_weights **out);

/*
 * Packs the next experts of an object made with options.experts larger than its first weight's
 * E: `weight`, `weight_scale` and `bias` are a slice of E' experts, shaped, typed and laid out as
 * the first slice (same K, N, groups, dtypes, format), and become experts [n, n + E') where n
 * were packed before. The object is usable (qmoe_weights_tensor, phase one) once all its experts
 * are in; a caller converting a large weight this way holds one slice of staging at a time.
 * QMOE_ERR_PARAM_NULLPTR for NULL weights, weight or weight_scale; QMOE_ERR_PARAM_INVALID for a
 * slice that does not match, that is more experts than are left, or an object of another build;
 * QMOE_ERR_INNER when out of memory. On error the object is as it was. Not concurrent with any
 * other use of the object.
 */
QMOE_API qmoe_status qmoe_weights_append(qmoe_weights *weights, const qmoe_tensor *weight,
                                         const qmoe_tensor *weight_scale, const qmoe_tensor *bias);

/* The object is read only once made: executors on any threads and devices may share it. */

/* NULL is a no-op. Every executor planned with a view of the object must be destroyed first,
 * and so every call running one (on any thread, or queued on a stream and not yet
 * synchronised) must have finished; destroy is not synchronised with them, so destroying an
 * object another thread is using is undefined behaviour. (The Python PrepackedWeights.close()
 * waits for calls in flight and refuses later ones with QMOE_ERR_PARAM_NULLPTR.) */
QMOE_API void qmoe_weights_destroy(qmoe_weights *weights);

/*
 * A new tensor view of the object, to pass as the operator's `weight` (destroy it with
 * qmoe_tensor_destroy; the object must outlive the executors planned with it). Its shape is the
 * logical [E, K, N], dtype int8 (A8W8) or int4 (A8W4), format ND; its data is the object's.
 * With such a weight the operator's `weight_scale` and `bias` may be NULL (they are folded in);
 * when given they must match the ones the object was made from in shape and dtype (their data is
 * not read again).
 */
QMOE_API qmoe_status qmoe_weights_tensor(const qmoe_weights *weights, qmoe_tensor **out);

/*
 * The integer weights of one expert back out of the object: values int8 [K, N] row-major
 * (values[k * N + n] = W[expert][k][n]; int4 weights as int8 in [-8, 7]), exactly the integers
 * it was made from, whatever the kernel. The scales are not returned (the caller has them).
 * QMOE_ERR_PARAM_NULLPTR for NULL weights or values; QMOE_ERR_PARAM_INVALID for an expert
 * outside [0, E) or not packed yet (qmoe_weights_append), or an object of another build. Reads the object only.
 */
QMOE_API qmoe_status qmoe_weights_unpack(const qmoe_weights *weights, int64_t expert, int8_t *values);

/*
 * The weight scales of one expert back out of the object: scales [G, N] row-major (G = 1 per
 * channel), as the object keeps them: `dtype` QMOE_DTYPE_FLOAT16 or QMOE_DTYPE_BFLOAT16 (the bits
 * given) for an object made from such scales, else QMOE_DTYPE_FLOAT32 (the values the kernels
 * use; for an object made with options.scale_block, base * multiplier). Lets a caller drop its own copy of the scales (since 0.3.1).
 * QMOE_ERR_PARAM_NULLPTR for NULL weights or scales; QMOE_ERR_PARAM_INVALID for an expert outside
 * [0, E) or not packed yet, another dtype, or an object of another build. Reads the object only.
 */
QMOE_API qmoe_status qmoe_weights_unpack_scales(const qmoe_weights *weights, int64_t expert,
                                                qmoe_dtype dtype, void *scales);

/* Bytes the object holds (weights, scales and corrections); 0 for NULL. */
QMOE_API uint64_t qmoe_weights_bytes(const qmoe_weights *weights);

/* The kernel the object was made for; QMOE_KERNEL_AUTO for NULL. */
QMOE_API qmoe_kernel qmoe_weights_kernel(const qmoe_weights *weights);

#ifdef __cplusplus
}
#endif

#endif /* QMOE_WEIGHTS_H */
