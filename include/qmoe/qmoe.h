/*
 * qmoe — the fused MoE operator GroupedMatmulSwigluQuant on CPUs.
 *
 * Public C API: tensors over caller-owned memory, status codes with the vendor's numbers, the
 * two-phase operator (plan once, execute many), and the layout helpers needed to prepare weights.
 * The operator contract is docs/ops/grouped-matmul-swiglu-quant.md; this header documents
 * where qmoe's native API extends it.
 */
#ifndef QMOE_QMOE_H
#define QMOE_QMOE_H

#include <stddef.h>
#include <stdint.h>

#include "qmoe/export.h"
#include "qmoe/version.h" /* QMOE_VERSION_MAJOR, _MINOR, _PATCH, _STRING (generated) */

#ifdef __cplusplus
extern "C" {
#endif

/* The loaded library's version, "major.minor.patch" (QMOE_VERSION_STRING of its build). */
QMOE_API const char *qmoe_version(void);

/* ---------------------------------------------------------------- status ---------------------- */

/* Numbers 0, 161001 and 161002 are the vendor's aclnn codes; the others mirror its runtime and
 * inner-error families. */
typedef enum qmoe_status {
    QMOE_OK = 0,
    QMOE_ERR_PARAM_NULLPTR = 161001, /* a required tensor or out-pointer is NULL */
    QMOE_ERR_PARAM_INVALID = 161002, /* rank, shape, dtype, format, limit, overflow, groupList data */
    QMOE_ERR_RUNTIME = 361001,       /* a device failed, a fence timed out, a stream was cancelled */
    QMOE_ERR_INNER = 561000,         /* out of memory or another internal failure */
} qmoe_status;

/* Last error of the calling thread in words: which argument, which rule, which value.
 * Never NULL; "" after a call that returned QMOE_OK (accessors and destroy functions leave it
 * as it was). Valid until the thread's next call. */
QMOE_API const char *qmoe_last_error(void);

/* A fixed name for a status code, e.g. "QMOE_ERR_PARAM_INVALID". */
QMOE_API const char *qmoe_status_name(qmoe_status status);

/* Which rule an argument broke, for programs that act on errors without parsing the message. */
typedef enum qmoe_error_rule {
    QMOE_RULE_NONE = 0,       /* no error, or one not tied to an argument (QMOE_ERR_RUNTIME...) */
    QMOE_RULE_NULL = 1,       /* a required pointer is NULL */
    QMOE_RULE_RESERVED = 2,   /* a reserved argument is not NULL */
    QMOE_RULE_DTYPE = 3,      /* the element type is not accepted */
    QMOE_RULE_RANK = 4,       /* the number of dimensions is wrong */
    QMOE_RULE_FORMAT = 5,     /* the layout (ND, FRACTAL_NZ) is not accepted */
    QMOE_RULE_SHAPE = 6,      /* a dimension disagrees with another argument or the layout */
    QMOE_RULE_LIMIT = 7,      /* a size is outside the operator's limits, or an overflow */
    QMOE_RULE_OVERLAP = 8,    /* memory overlaps: elements of one output, or output and input */
    QMOE_RULE_OPTION = 9,     /* a field of an options struct is out of range */
    QMOE_RULE_UNSUPPORTED = 10, /* valid, but not on this CPU or build (e.g. a kernel) */
    QMOE_RULE_VALUE = 11,     /* tensor data is out of range (groupList values at phase two) */
    QMOE_RULE_WORKSPACE = 12, /* workspace too small, NULL or misaligned */
} qmoe_error_rule;

/* The last error of the calling thread, structured: the status, the rule, and the argument by
 * the name the vendor API gives it ("x", "weight", "bias", "weightScale", "xScale", "groupList",
 * "output", "outputScale", "offset", "outputOffset", "options", "workspace", ...; "" when the
 * error is not about one argument). `message` is qmoe_last_error(). After a call that returned
 * QMOE_OK: status QMOE_OK, rule QMOE_RULE_NONE, arg "". New fields are only ever appended. */
typedef struct qmoe_error_info {
    qmoe_status status;
    qmoe_error_rule rule;
    const char *arg;     /* never NULL; a static string */
    const char *message; /* never NULL */
} qmoe_error_info;

/* Never NULL; valid (and unchanged) until the calling thread's next qmoe call. */
QMOE_API const qmoe_error_info *qmoe_last_error_info(void);

/* The one error channel: every face (the vendor API, libqmoe_mpi, the ggml backend) records its
 * errors here too, so qmoe_last_error() and qmoe_last_error_info() answer for any call. Records
 * `status`, `rule`, `arg` (a string that outlives the thread's next call, e.g. a literal; NULL:
 * "") and a copy of `message` (NULL: "") as the calling thread's last error; returns status. */
QMOE_API qmoe_status qmoe_error_set(qmoe_status status, qmoe_error_rule rule, const char *arg,
                                    const char *message);

/* As qmoe_error_set for a face passing an error on in its own words: when the calling thread's
 * last error has this status, its rule and argument are kept (the library's own error, reported
 * again by the face); otherwise the rule is QMOE_RULE_NULL for QMOE_ERR_PARAM_NULLPTR and
 * QMOE_RULE_NONE else, with no argument. Returns status. */
QMOE_API qmoe_status qmoe_error_pass(qmoe_status status, const char *message);

/* Clears the calling thread's last error, as a call that succeeds does. */
QMOE_API void qmoe_error_clear(void);

/* A fixed name for a rule, e.g. "QMOE_RULE_SHAPE". */
QMOE_API const char *qmoe_error_rule_name(qmoe_error_rule rule);

/* ---------------------------------------------------------------- tensors --------------------- */

typedef enum qmoe_dtype {
    QMOE_DTYPE_INT8 = 0,
    QMOE_DTYPE_INT4 = 1,  /* two per byte, element i in byte i/2, low nibble when i is even */
    QMOE_DTYPE_INT32 = 2, /* as a weight: 8 int4 per int32, element j in bits [4j, 4j+4) */
    QMOE_DTYPE_INT64 = 3,
    QMOE_DTYPE_UINT64 = 4, /* as an A8W4 weight scale: low 32 bits hold a float32 */
    QMOE_DTYPE_FLOAT32 = 5,
    QMOE_DTYPE_FLOAT16 = 6,
    QMOE_DTYPE_BFLOAT16 = 7,
} qmoe_dtype;

typedef enum qmoe_format {
    QMOE_FORMAT_ND = 0,
    QMOE_FORMAT_FRACTAL_NZ = 1,
} qmoe_format;

#define QMOE_MAX_DIMS 8

typedef struct qmoe_tensor qmoe_tensor;

/* A view over caller-owned memory. `strides` are in elements (int4: nibbles; the int32 view of
 * packed int4: int32 words) and may be NULL for row-major contiguous. Strides must be >= 0.
 * The memory is not copied or owned: it must outlive every executor planned with the tensor.
 * `data` may be NULL only for a tensor with zero elements.
 * Returns QMOE_ERR_PARAM_NULLPTR when `out` is NULL, `shape` is NULL with ndim > 0, or `data` is
 * NULL with elements; QMOE_ERR_PARAM_INVALID for a bad rank, dtype, format, negative size or
 * stride, or a byte extent that overflows; QMOE_ERR_INNER when out of memory. */
QMOE_API qmoe_status qmoe_tensor_create(const int64_t *shape, int ndim, const int64_t *strides,
                               qmoe_dtype dtype, qmoe_format format, void *data,
                               qmoe_tensor **out);
QMOE_API void qmoe_tensor_destroy(qmoe_tensor *tensor); /* NULL is a no-op */

/* Accessors; for a NULL tensor or an axis out of range they return -1 (data: NULL). */
QMOE_API int qmoe_tensor_ndim(const qmoe_tensor *tensor);
QMOE_API int64_t qmoe_tensor_dim(const qmoe_tensor *tensor, int axis);
QMOE_API int64_t qmoe_tensor_stride(const qmoe_tensor *tensor, int axis);
QMOE_API qmoe_dtype qmoe_tensor_dtype(const qmoe_tensor *tensor);
QMOE_API qmoe_format qmoe_tensor_format(const qmoe_tensor *tensor);
QMOE_API void *qmoe_tensor_data(const qmoe_tensor *tensor);

/* ---------------------------------------------------------------- runtime (opaque) ------------ */

/* A device is a group of worker threads with its scratchpad and trace buffers; a stream runs the
 * operators submitted to it in order on a device. See qmoe/runtime.h. */
typedef struct qmoe_device qmoe_device;
typedef struct qmoe_stream qmoe_stream;

/* ---------------------------------------------------------------- the operator ---------------- */

typedef enum qmoe_group_list_type {
    QMOE_GROUP_LIST_CUMSUM = 0, /* g[e] is the end row of expert e (vendor default) */
    QMOE_GROUP_LIST_COUNT = 1,  /* g[e] is the number of rows of expert e (extension) */
} qmoe_group_list_type;

/* The kernels. After QMOE_KERNEL_PORTABLE come the instruction sets, one value each in the
 * order of their entries' ids in the library's one list (src/kernels/isa_list.h; the build
 * checks that the two agree); qmoe_kernel_name() names every value, and "unknown" past the last. */
typedef enum qmoe_kernel {
    QMOE_KERNEL_AUTO = 0,      /* the fastest kernel this CPU runs (QMOE_ISA may lower it) */
    QMOE_KERNEL_REFERENCE = 1, /* the plainly written oracle that follows the spec literally */
    QMOE_KERNEL_PORTABLE = 2,  /* portable C */
    QMOE_KERNEL_AVX2 = 3,
    QMOE_KERNEL_AVX_VNNI = 4,
    QMOE_KERNEL_AVX512_VNNI = 5,
    QMOE_KERNEL_AMX_INT8 = 6,  /* AMX tiles; AVX-512 VNNI for blocks of few rows */
    QMOE_KERNEL_NEON_DOT = 7,  /* ARM64: NEON sdot (ARMv8.2 dot product) */
    QMOE_KERNEL_NEON_I8MM = 8, /* ARM64: NEON usmmla (int8 matrix multiply) */
} qmoe_kernel;

/* Options of phase one. Initialise with QMOE_GROUPED_MATMUL_SWIGLU_QUANT_OPTIONS_INIT (or
 * qmoe_grouped_matmul_swiglu_quant_options_init()), then set what you need: the defaults are the
 * vendor's (cumsum groupList, weight format as declared, fastest kernel, all device threads).
 * `struct_size` lets the struct grow without breaking programs built against an older header: new
 * fields are only ever appended, and the library reads only the first struct_size bytes, taking
 * defaults for the rest. A zeroed struct (struct_size 0) is still valid and means this 0.2 layout
 * with all defaults. A struct_size smaller than the 0.2 layout, or a larger one whose extra bytes
 * (fields this library does not know) are not zero, is QMOE_ERR_PARAM_INVALID. */
typedef struct qmoe_grouped_matmul_swiglu_quant_options {
    uint32_t struct_size; /* sizeof the struct as the caller was compiled; 0: the 0.2 layout */
    qmoe_group_list_type group_list_type;
    int force_weight_nz; /* nonzero: ignore weight's declared format, treat as FRACTAL_NZ (vendor) */
    qmoe_kernel kernel;
    int threads; /* 0: the online cores (divided among `devices`); otherwise this many per device */
    int devices; /* 0 or 1: one device; D > 1: split rows over a group of D devices */
    /* The SwiGLU variant (docs/ops/grouped-matmul-swiglu-quant.md "SwiGLU variants"), with C the
     * dequantized product, a = C[j] (activated half), l = C[j + N/2] (linear half):
     *   swiglu_bias [E, N] float32 (NULL: none) is added first: a += bias[e][j], l += bias[e][j + N/2];
     *   swiglu_limit > 0 clamps a to <= limit and l to [-limit, limit] (0: no clamp);
     *   swiglu_alpha 0: S = silu(a) * l; > 0 (gpt-oss): S = a / (1 + exp(-(alpha * a))) * (l + 1).
     * swiglu_bias is read by every run (not copied): it stays valid while the plan is used. */
    float swiglu_limit;
    float swiglu_alpha;
    const float *swiglu_bias;
} qmoe_grouped_matmul_swiglu_quant_options;

#define QMOE_GROUPED_MATMUL_SWIGLU_QUANT_OPTIONS_INIT                                              \
    {(uint32_t)sizeof(qmoe_grouped_matmul_swiglu_quant_options), QMOE_GROUP_LIST_CUMSUM, 0,         \
     QMOE_KERNEL_AUTO, 0, 0, 0.0f, 0.0f, NULL}

/* Sets *options to QMOE_GROUPED_MATMUL_SWIGLU_QUANT_OPTIONS_INIT. NULL is a no-op. */
QMOE_API void qmoe_grouped_matmul_swiglu_quant_options_init(
    qmoe_grouped_matmul_swiglu_quant_options *options);

typedef struct qmoe_grouped_matmul_swiglu_quant_executor qmoe_grouped_matmul_swiglu_quant_executor;

/*
 * Phase one: validate every argument that does not need device data, choose the kernel, plan the
 * work, and return the workspace size and an executor that holds the plan.
 * Tensors (shapes per the spec): x int8 [M,K]; weight int8 NZ [E,N/32,K/16,16,32], int4 NZ
 * [E,N/64,K/16,16,64], int32 NZ [E,N/64,K/16,16,8], int8/int4 ND [E,K,N] or int32 ND [E,K,N/8];
 * bias float32 [E,N] (A8W4 only, mandatory there); offset reserved (NULL); weight_scale [E,N] or
 * [E,G,N]; x_scale float32 [M]; group_list int64 [E'] (E' <= E); output int8 [M,N/2];
 * output_scale float32 [M]; output_offset reserved (NULL). `options` may be NULL.
 * `output` and `outputScale` must not share memory with any input or with each other (no in-place
 * execution): QMOE_ERR_PARAM_INVALID.
 * On error nothing is allocated, *executor is left as it was, and qmoe_last_error() says why.
 * The tensor objects may be destroyed after this call; their memory must stay valid.
 */
QMOE_API qmoe_status qmoe_grouped_matmul_swiglu_quant_workspace_size(
    const qmoe_tensor *x, const qmoe_tensor *weight, const qmoe_tensor *bias,
    const qmoe_tensor *offset, const qmoe_tensor *weight_scale, const qmoe_tensor *x_scale,
    const qmoe_tensor *group_list, const qmoe_tensor *output, const qmoe_tensor *output_scale,
    const qmoe_tensor *output_offset, const qmoe_grouped_matmul_swiglu_quant_options *options,
    uint64_t *workspace_size,
    qmoe_grouped_matmul_swiglu_quant_executor **executor);

/*
 * Phase two: run. When the operator runs (after the operators queued before it on the stream, which
 * may write groupList), it checks the groupList values (decreasing, negative or past M is
 * QMOE_ERR_PARAM_INVALID with both outputs untouched: reported by this call with a NULL stream, by
 * qmoe_stream_synchronize() otherwise), then computes. `workspace` must hold at least the size
 * phase one returned (it may be NULL when that size is 0) and be aligned for int64 (64 bytes is
 * best; QMOE_ERR_PARAM_INVALID otherwise). `stream` NULL runs synchronously on the process-wide
 * default device (see qmoe/runtime.h); otherwise the operator is queued and its status is also
 * reported by qmoe_stream_synchronize(); the workspace and the tensors' memory must then stay valid
 * until the stream is synchronized, while the executor may be destroyed at once. A native executor
 * may be executed any number of times (the data its tensors point to may change between runs) and
 * must be destroyed with qmoe_grouped_matmul_swiglu_quant_executor_destroy().
 */
QMOE_API qmoe_status qmoe_grouped_matmul_swiglu_quant(
    void *workspace, uint64_t workspace_size, qmoe_grouped_matmul_swiglu_quant_executor *executor,
    qmoe_stream *stream);

/* NULL is a no-op. */
QMOE_API void qmoe_grouped_matmul_swiglu_quant_executor_destroy(
    qmoe_grouped_matmul_swiglu_quant_executor *executor);

/* The kernel phase one chose (never QMOE_KERNEL_AUTO); QMOE_KERNEL_AUTO for a NULL executor. */
QMOE_API qmoe_kernel qmoe_grouped_matmul_swiglu_quant_executor_kernel(
    const qmoe_grouped_matmul_swiglu_quant_executor *executor);
QMOE_API const char *qmoe_kernel_name(qmoe_kernel kernel);

/* ---------------------------------------------------------------- layout helpers -------------- */

/* Logical weights are W[e][k][n] row-major [E,K,N]. int4 values are held unpacked one per int8
 * (in [-8,7]) on the ND side of these helpers, and packed two per byte on the packed side.
 * Each returns QMOE_ERR_PARAM_NULLPTR / QMOE_ERR_PARAM_INVALID (bad sizes, NZ alignment,
 * int4 value out of range) with nothing written. */

/* int8 FRACTAL_NZ [E,N/32,K/16,16,32] <-> ND [E,K,N]; needs K%16==0, N%32==0. */
QMOE_API qmoe_status qmoe_layout_nd_to_nz_int8(const int8_t *nd, int64_t E, int64_t K, int64_t N,
                                               int8_t *nz);
QMOE_API qmoe_status qmoe_layout_nz_to_nd_int8(const int8_t *nz, int64_t E, int64_t K, int64_t N,
                                               int8_t *nd);

/* int4 FRACTAL_NZ [E,N/64,K/16,16,64] packed (E*K*N/2 bytes) <-> ND values; K%16==0, N%64==0. */
QMOE_API qmoe_status qmoe_layout_nd_to_nz_int4(const int8_t *nd_values, int64_t E, int64_t K,
                                               int64_t N, uint8_t *nz_packed);
QMOE_API qmoe_status qmoe_layout_nz_to_nd_int4(const uint8_t *nz_packed, int64_t E, int64_t K,
                                               int64_t N, int8_t *nd_values);

/* int4 packing: `count` values -> (count+1)/2 bytes, low nibble first; an odd tail's high nibble
 * is 0. */
QMOE_API qmoe_status qmoe_layout_int4_pack(const int8_t *values, int64_t count, uint8_t *packed);
QMOE_API qmoe_status qmoe_layout_int4_unpack(const uint8_t *packed, int64_t count, int8_t *values);

/* The int32 view of packed int4: `count` (a multiple of 8) values -> count/8 int32, element j of
 * each word in bits [4j, 4j+4). Byte-identical to qmoe_layout_int4_pack on little-endian machines.
 */
QMOE_API qmoe_status qmoe_layout_int4_pack_int32(const int8_t *values, int64_t count,
                                                 int32_t *words);
QMOE_API qmoe_status qmoe_layout_int4_unpack_int32(const int32_t *words, int64_t count,
                                                   int8_t *values);

/* The A8W4 weight assist matrix (the operator's `bias`), as real callers build it:
 * per-channel (groups == 0, scale [E,N]):  bias[e,n] = 8 * scale[e,n] * sum_k W[e,k,n]
 * per-group   (groups == G, scale [E,G,N]): bias[e,n] = 8 * sum_k W[e,k,n] * scale[e,k/(K/G),n]
 * W is logical ND int4 values [E,K,N] one per int8. Accumulated in double, rounded to float. */
QMOE_API qmoe_status qmoe_layout_weight_assist_matrix(const int8_t *nd_values, int64_t E, int64_t K,
                                                      int64_t N, const float *scale,
                                                      int64_t groups, float *bias);

/* ---------------------------------------------------------------- conversions ----------------- */

/* n values float32 <-> float16 / bfloat16 by the library's rules: rounded to nearest even, NaN
 * stays NaN, widening exact (what the operators read and write). QMOE_ERR_PARAM_NULLPTR for a NULL
 * pointer with n > 0, QMOE_ERR_PARAM_INVALID for n < 0; nothing written on error. */
QMOE_API qmoe_status qmoe_convert_f32_to_f16(const float *src, int64_t n, uint16_t *dst);
QMOE_API qmoe_status qmoe_convert_f16_to_f32(const uint16_t *src, int64_t n, float *dst);
QMOE_API qmoe_status qmoe_convert_f32_to_bf16(const float *src, int64_t n, uint16_t *dst);
QMOE_API qmoe_status qmoe_convert_bf16_to_f32(const uint16_t *src, int64_t n, float *dst);

#ifdef __cplusplus
}
#endif

#ifndef QMOE_NO_DEPRECATED
#include "qmoe/deprecated.h" /* the 0.2 names (docs/api.md, "Migration to 0.3.0") */
#endif

#endif /* QMOE_QMOE_H */
