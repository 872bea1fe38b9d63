/*
 * The qmoe ggml backend's internal interface (libggml-qmoe.so). It is built against one llama.cpp
 * tree's ggml headers (ggml-backend-impl.h is not installed, so the backend fits exactly that
 * release) and, on the qmoe side, only qmoe's public headers. See docs/ggml.md.
 */
#ifndef QMOE_GGML_H
#define QMOE_GGML_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ggml-backend-impl.h"
#include "ggml-backend.h"
#include "ggml.h"
#include "qmoe/op.h"
#include "qmoe/qmoe.h"
#include "qmoe/runtime.h"
#include "qmoe/weights.h"

#define QG_NAME "QMOE"
#define QG_MAX_EXPERTS 1024 /* qmoe's E limit: more matrices are split into chunks */
#define QG_MAX_COLS 10240   /* qmoe's N limit for prepacked weights: wider ones are split */
#define QG_SLICE 8          /* matrices converted at a time (weights.c build_chunk) */
#define QG_MIN_Y_BYTES (8 << 20) /* the K-quants' min term outputs a pass (matmul.c) */
#define QG_Y_BYTES (8 << 20)     /* a node's float outputs a pass of sorted rows (qg_pass_rows) */
#define QG_TILE 64          /* rows decoded before their columns are written (weights.c gather) */
#define QG_PLANS 4          /* plans kept per weight chunk (one per row count seen last) */

/* ---- weight decoding (convert.c): the exact integer and scale of every value ---- */

/* A weight type the backend takes: ggml blocks of `blk` values in `bytes` bytes, as qmoe
 * integers (int4 or int8) with one float scale per group of `gs` values; `side` bytes per block
 * hold the rest (scales, mins) verbatim. mins: the K-quants with a dmin·m term, whose unsigned
 * integers are kept as they are (q5_K's in int8, q4_K's as codes 0..15; qg_decode_row).
 * scaled: the side bytes are the block's one scale (q8_0, q4_0: its fp16; mxfp4: its e8m0), so
 * they are not kept: qg_side_of_scale rebuilds them from the prepacked object's scales. */
typedef struct qg_format {
    enum ggml_type type;
    int blk, bytes, gs, int4, side, mins, scaled;
} qg_format;

/* NULL for the types the backend does not take (q8_0, q4_0, mxfp4, q6_K, q4_K, q5_K). */
const qg_format *qg_format_of(enum ggml_type type);
/* The 16 integers a format's 4-bit codes decode to, in code order (mxfp4's e2m1 doubled), for
 * qmoe_weights_options.codebook: the object then keeps the codes, 4 bits a value; NULL for the
 * formats whose integers are not such codes. */
const int8_t *qg_codebook(enum ggml_type type);
int qg_type_supported(enum ggml_type type);

/* Decodes one row of K values (K % blk == 0): q[k] the integer and s[k / gs] its group's scale,
 * side (NULL: not wanted) the blocks' side bytes [K / blk][side]. Value k is exactly q[k] * s
 * without a min term; for q4_K / q5_K (mins) it is s_j q[k] - dmin m_j (sub-block j = k / 32),
 * the second term added by the matmul from activation sums. */
void qg_decode_row(enum ggml_type type, const void *row, int64_t K, int8_t *q, float *s, uint8_t *side);
/* The side bytes of a `scaled` format's block from its scale s (exactly a value decoding gives). */
void qg_side_of_scale(enum ggml_type type, float s, uint8_t *side);
/* fp16 bits of f, the inverse of qg_half for every value qg_half gives (NaN payloads too). */
uint16_t qg_half_bits(float f);
/* The inverse: the row's bytes from its integers and side bytes. */
void qg_encode_row(enum ggml_type type, const int8_t *q, const uint8_t *side, int64_t K, void *row);
/* How many values of an mxfp4 row hold the code -0 (which decodes to the integer 0, as +0
 * does), each marked in bits (bit k of byte k / 8; NULL: only counted); 0 for other types. */
int64_t qg_row_negative_zeros(enum ggml_type type, const void *row, int64_t K, uint8_t *bits);
/* The inverse, after qg_encode_row (which writes code 0 for every zero): code 8 where bits says. */
void qg_row_put_negative_zeros(enum ggml_type type, const uint8_t *bits, int64_t K, void *row);
/* q4_K / q5_K: the 8 six-bit scales and mins of a super-block's 12 bytes, and back. */
void qg_kq_unpack(const uint8_t *q12, uint8_t *sc, uint8_t *m);
void qg_kq_pack(const uint8_t *sc, const uint8_t *m, uint8_t *q12);
/* fp16 bits to float, exactly as ggml_fp16_to_fp32 (inline: the min term's loop reads two per
 * super-block and column) */
static inline float qg_half(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, em = h & 0x7fffu, bits;
    float f;
    if (em >= 0x7c00u) { /* inf / NaN: payload kept */
        bits = sign | 0x7f800000u | (em & 0x3ffu) << 13;
        memcpy(&f, &bits, sizeof f);
        return f;
    }
    bits = em << 13; /* normal and subnormal halves alike: rescale the exponent by 2^112 */
    memcpy(&f, &bits, sizeof f);
    f *= 0x1p112f;
    memcpy(&bits, &f, sizeof f);
    bits |= sign;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* ---- prepacked weights (weights.c) ---- */

/* Grouped-matmul plans of one prepacked object, by row count (the last QG_PLANS seen). */
typedef struct qg_plans {
    struct {
        int64_t rows, ld; /* row count, and output row stride in floats */
        int threads;
        qmoe_op *op;
    } p[QG_PLANS];
    int next;
} qg_plans;

/* One piece of a weight: experts [e0, e0 + ne) and columns [n0, n0 + nc) as a qmoe prepacked
 * object of nc + pad columns (pad 1 when nc is odd: qmoe's N is even; the extra column is zero),
 * with the grouped-matmul plans made for it. q4_K / q5_K also have the min object: their 6-bit
 * m_j as an int8 weight [ne, K/32, ncp] in groups of 8 (one super-block) with scales -dmin, which
 * multiplies each row's int8 group sums (matmul.c); their sc_j are the main object's scales over
 * d (or in qg_weight.ksc). */
typedef struct qg_chunk {
    int64_t e0, ne, n0, nc, pad;
    /* a paired weight's (qg_weight.mate): the object is its gate and up side by side, this
     * tensor's columns from `col`, pad the mate's after a gate's (col 0, pad nc) or none after an
     * up's (col nc, pad 0). 0 otherwise. The object's columns: col + nc + pad (qg_chunk_cols). */
    int64_t col;
    qmoe_dtype wdt;      /* the dtype of w's scales (the narrowest that holds them: weights.c) */
    qmoe_dtype mdt;      /* the dtype of mw's scales */
    qmoe_weights *w, *mw;
    qmoe_tensor *view, *mview;
    qg_plans plans, mplans;
    qg_plans fplans; /* a paired gate's fused GroupedMatmulSwigluQuant plans (moe_ffn.c) */
} qg_chunk;

static inline int64_t qg_chunk_cols(const qg_chunk *c) { return c->col + c->nc + c->pad; }

/* The min object's rows (K of its grouped matmul): the m_j, one a sub-block of 32. */
static inline int64_t qg_min_rows(int64_t K) { return K / 32; }

/* A weight as one op reads it: where its bytes are, its layout, and its chunks. */
typedef struct qg_weight {
    const uint8_t *data; /* tensor->data of the viewed bytes */
    size_t lo, hi;       /* byte range inside the buffer it was made from */
    enum ggml_type type;
    const qg_format *fmt;
    int64_t ne[4];
    size_t nb[4];
    int64_t K, N, E;     /* E = ne[2] * ne[3] matrices, matrix e = (e % ne[2], e / ne[2]) */
    int64_t G;           /* qmoe scale groups per column: K / fmt->gs */
    /* what the prepacked integers do not hold, to give ggml's bytes back (get_tensor):
     * side: the blocks' side bytes [E][N][K / blk][fmt->side] (all but q4_K / q5_K); for q6_K
     * only until the weight is built: where its object's scales over d give every sc back, side
     * goes and kd [E][K / 256][N] keeps d alone (weights.c, slim_side);
     * q4_K / q5_K: fp16 d, dmin [E][K / 256][N], the m_j in the min objects and the sc_j in
     * ksc [E][K / 32][N]; after the build ksc is NULL where the main object's scales over d
     * give every sc_j back, kdmin NULL where the min object's scales (-dmin) give dmin back */
    uint8_t *side;
    uint16_t *kd, *kdmin;
    uint8_t *ksc;
    /* mxfp4's -0 codes, which the integers cannot tell from +0: bit k of row r = m N + n
     * (matrix m, column n) at bit r K + k; allocated for every mxfp4 weight and freed when it
     * holds none (a file llama-quantize wrote), so its untouched pages never cost memory */
    uint8_t *negzero;
    int64_t n_negzero;
    /* the other half of a gate / up pair sharing one prepacked object (qg_weight_build_pair),
     * NULL otherwise; the object goes with the last of the two */
    struct qg_weight *mate;
    /* the A8W4 object's assist matrix is the weights' own, as the fused operator reads it (pairs,
     * ffn_gate_up_exps tensors); zero otherwise (GroupedMatmul does not read it) */
    int assist;
    int released;        /* the buffer's whole pages inside [lo, hi) were given back (buffer.c) */
    qg_chunk *chunks;
    int nchunks;
    /* held while one context plans and runs this weight: the chunks' plan caches are shared by
     * every backend context (llama.cpp contexts on one model), and a plan evicted by one must not
     * be running in another */
    pthread_mutex_t run;
    int run_ready;
    struct qg_weight *next;
} qg_weight;

/* Builds the prepacked weight of tensor `t` from `bytes` (t's bytes in ggml's layout: t->data, or
 * the caller's copy of them in set_tensor); NULL on failure with qmoe's message in
 * qmoe_last_error() (qmoe_error_set for the backend's own failures). */
qg_weight *qg_weight_build(const struct ggml_tensor *t, const void *bytes, size_t lo, size_t hi);
/* A layer's gate and up weights (t[0] the gate, t[1] the up: same type, shape and layout, one
 * chunk each, no min term) as one prepacked object [E, K, 2 I], gate columns first, with the
 * A8W4 assist matrix the fused operator reads, so GroupedMatmulSwigluQuant runs them as one
 * (moe_ffn.c); each weight is one of w[2], mates of each other. own[i]: t[i]'s bytes are the
 * buffer's own pages, dropped (madvise) a slice at a time as they are read, so the pair's
 * conversion holds little more than the object it makes; own[i] becomes 2 once any of them
 * were dropped. 0 on failure (qmoe's message set), nothing made. */
int qg_weight_build_pair(const struct ggml_tensor *const t[2], const void *const bytes[2],
                         const size_t lo[2], const size_t hi[2], int own[2], qg_weight *w[2]);
/* 1 when the two tensors can be paired: a gate and up of one layer as qg_weight_build_pair takes. */
int qg_pairable(const struct ggml_tensor *a, const struct ggml_tensor *b);
void qg_weight_free(qg_weight *w);
/* 1 when the weight's rows are its bytes [lo, hi) back to back (a whole tensor, no view). */
int qg_weight_contiguous(const qg_weight *w);
/* ggml's bytes of buffer range [a, z) that belong to the (contiguous) weight, regenerated from the
 * prepacked integers and the side arrays, into out (out[0] is buffer offset a); bytes outside the
 * weight are not written. QMOE_ERR_INNER when out of memory. */
qmoe_status qg_weight_encode(const qg_weight *w, size_t a, size_t z, uint8_t *out);

/* ---- the buffer type and buffers (buffer.c) ---- */

typedef struct qg_buffer {
    uint8_t *base;      /* anonymous pages, `mapped` bytes */
    size_t size, mapped;
    pthread_mutex_t lock;
    qg_weight *weights; /* converted weights living in this buffer */
    void *pending;      /* weights whose bytes are arriving in pieces (buffer.c) */
    void *waiting;      /* a layer's gate or up weight, its bytes here until its mate arrives */
} qg_buffer;

ggml_backend_buffer_type_t qg_buffer_type(void);
/* A buffer of the QMOE type (a zero-byte one too); one that holds data (made by alloc_buffer). */
int qg_buffer_is_ours(ggml_backend_buffer_t buffer);
int qg_buffer_holds_data(ggml_backend_buffer_t buffer);
/* Drops the whole pages of [data, data + size) from the process when they lie in a read-only,
 * shared file mapping (which reads the same afterwards); 1 when it did (source.c). */
int qg_source_release(const void *data, size_t size);
/* The converted weight for tensor t in buffer b (built now if it has not been); NULL on failure. */
qg_weight *qg_buffer_weight(ggml_backend_buffer_t buffer, const struct ggml_tensor *t);

/* ---- the backend (backend.c) and its matmuls (matmul.c) ---- */

enum {
    QG_S_WS,     /* qmoe workspace */
    QG_S_X,      /* gathered activations, float [<= 256, K]: a block of rows sorted by matrix */
    QG_S_XQ,     /* their int8 values [R, K] */
    QG_S_XS,     /* per-row scales [R] */
    QG_S_Y,      /* outputs [P, Np] of a pass of P rows */
    QG_S_ROWS,   /* per routed row: matrix, source row, destination row (int64 x 3) */
    QG_S_PERM,   /* routed rows sorted by matrix [R] */
    QG_S_COUNTS, /* rows per matrix and their starts, int64 [2 E + 1] */
    QG_S_MIN,    /* q4_K / q5_K min term: the rows' group sums, low and high parts as rows of
                  * one grouped matmul, int8 [2 R, 2 K/32], their scales and counts */
    QG_S_MINY,   /* and the min object's outputs, float [2 P, Np] for a pass of P rows */
    QG_S_GU,     /* the SwiGLU pattern (moe_ffn.c): gate | up outputs, float [P, 2 Np], and its
                  * SwiGLU h [P, I] after them; then the down projection's outputs over both */
    QG_S_HQ,     /* that, quantized per row: int8 [P, I] (the fused operator's: [R, I]) */
    QG_S_HS,     /* and its scales [P] ([R]) */
    QG_S_WIN,    /* a window's rows per matrix and their starts, int64 [2 E + 1] */
    QG_S_SLOTS
};

typedef struct qg_pool qg_pool;

typedef struct qg_context {
    int n_threads;         /* from ggml_backend_set_n_threads; 0 until set: the online cores */
    int fuse;              /* run the MoE FFN as one (QMOE_GGML_FUSE, read when the backend is made) */
    int dev_threads;       /* the thread count `device` was made with */
    qmoe_device *device;   /* on ggml's threads (pool.c) */
    qg_pool *pool;         /* the backend's own threads, when not on OpenMP's (pool.c) */
    qmoe_stream *stream;
    /* scratch, grown as needed (QG_S_*) */
    void *scratch[QG_S_SLOTS];
    size_t cap[QG_S_SLOTS];
    /* the plans of the small row-wise operators (dynamic quant, SwiGLU), by shape */
    struct {
        int kind;
        int64_t rows, K, ld;
        int threads;
        qmoe_op *op;
    } small[2 * QG_PLANS];
    int next_small;
} qg_context;

/* One routed row: which matrix, which row of b it reads, which row of dst it writes. */
typedef struct qg_row {
    int64_t mat;
    const uint8_t *src;
    uint8_t *dst;
    const float *mul; /* NULL, or the factor the row is written times (a MUL node taken along) */
} qg_row;

/* The routed rows of one MUL_MAT_ID / MUL_MAT node, sorted by matrix (perm[s]: the row at sorted
 * place s; counts[e] rows of matrix e from start[e]), gathered and quantized per row once:
 * xq int8 [R, K], xs [R]. Every array is the context's scratch, valid until the next node. */
typedef struct qg_acts {
    int64_t R, K;
    qg_row *rows;
    int64_t *perm, *counts, *start;
    int8_t *xq;
    float *xs;
} qg_acts;

/* Makes the context's qmoe device for its thread count; the threads it runs on. 0 on failure. */
int qg_context_ready(qg_context *ctx);
/* The converted weight of a node whose weight the backend takes; NULL (qmoe's error set) if not. */
qg_weight *qg_node_weight(const struct ggml_tensor *node);
/* Routes, sorts, gathers and quantizes the node's activations into a (R = 0: nothing to do). */
int qg_acts_prepare(qg_context *ctx, const struct ggml_tensor *node, const qg_weight *w, qg_acts *a);
/* The grouped matmul by w of a's sorted rows [s0, s0 + n) (a window: a pass of rows, or all R),
 * whose int8 rows and scales are xq / xs (sorted row s0 at xq, K = w->K): row s0 + i of the
 * window gets w->N (+ pad) columns at row i of y (ld floats apart) from column 0; q4_K / q5_K's
 * min term included. A row's values do not depend on the rows beside it: any window gives the
 * same bits. */
int qg_weight_run(qg_context *ctx, qg_weight *w, const qg_acts *a, int64_t s0, int64_t n,
                  const int8_t *xq, const float *xs, float *y, int64_t ld);
/* Rows of a pass whose outputs, row_bytes a row, fit QG_Y_BYTES: in [1, R] (R > 0). At a
 * 512-token prompt through Qwen3's FFN all rows at once were 36 MiB of floats. */
int64_t qg_pass_rows(int64_t R, size_t row_bytes);
/* The columns qg_weight_run writes per row: N and its pad, or a paired weight's gate and up
 * (2 I); w's own columns start at qg_weight_col(w). */
int64_t qg_weight_out_cols(const qg_weight *w);
int64_t qg_weight_col(const qg_weight *w);
/* I when w's one object holds gate | up, I columns each, as GroupedMatmulSwigluQuant reads them:
 * a paired gate (its mate the up), or one ffn_gate_up_exps tensor of 2 I columns; no min term.
 * 0 otherwise. */
int64_t qg_weight_fusable(const qg_weight *w);
/* The fused GroupedMatmulSwigluQuant of rows a->xq / a->xs (sorted as a) by such a weight wg:
 * h = SwiGLU(gate, up) as int8 rows hq [R, I] with scales hs [R]. */
int qg_weight_swiglu_quant(qg_context *ctx, qg_weight *wg, const qg_acts *a, int8_t *hq, float *hs);
/* Row i of y (ld floats apart, N columns) to rows[perm[s0 + i]].dst, i < n. */
void qg_scatter(qg_context *ctx, const qg_acts *a, int64_t s0, int64_t n, const float *y, int64_t ld,
                int64_t N);
/* Plans of the small row-wise operators (matmul.c): kind 0 the dynamic quant of floats [R, K]
 * (ld apart) into int8 [R, K] + scales [R]; kind 1 the SwiGLU of [R, 2 K] (ld apart, gate columns
 * first) into floats [R, K]. NULL (qmoe's error set) on failure. */
qmoe_op *qg_small_plan(qg_context *ctx, int kind, int64_t R, int64_t K, int64_t ld, int threads);
/* The threads a row-wise operator over R x K values runs on (few values: one, without waking
 * ggml's threads). */
int qg_small_threads(const qg_context *ctx, int64_t R, int64_t K);
/* Runs one planned operator with its args on the context's stream and waits for it; 0 on failure. */
int qg_run(qg_context *ctx, qmoe_op *op, void **args, int nargs);
/* The context's scratch slot grown to at least `bytes` (contents lost when it grows); NULL when
 * out of memory. */
void *qg_scratch(qg_context *ctx, int slot, size_t bytes);
/* a * b * c bytes in *out; 0 when that does not fit in a size_t. */
int qg_bytes3(int64_t a, int64_t b, size_t c, size_t *out);
/* Logs what failed with qmoe's message; GGML_STATUS_FAILED. */
enum ggml_status qg_failed(const char *what);

/* ---- element-wise nodes (elementwise.c) ---- */

/* 1 for a SwiGLU node of float32 rows (taken wherever it is). */
int qg_supports_glu(const struct ggml_tensor *op);
/* 1 when the backend computes this GLU / ADD / MUL / ADD_ID node: float32, and (but SwiGLU) an
 * input made by a matmul the backend takes or by another node taken here. */
int qg_supports_elementwise(const struct ggml_tensor *op);
/* Runs one such node as ggml's CPU does; GGML_STATUS_FAILED with the reason logged, dst untouched. */
enum ggml_status qg_compute_elementwise(qg_context *ctx, struct ggml_tensor *node);

/* ---- the MoE FFN pattern (moe_ffn.c) ---- */

/* 0 when QMOE_GGML_FUSE=0: the MoE FFN's nodes then run one by one (for comparison; default 1). */
int qg_fuse_moe(void);
/* The node after node j when it is MUL(node j, s) that the MUL_MAT_ID at j can write itself (its
 * rows times s's values: node j has no other reader, s is one value per row); else NULL. */
struct ggml_tensor *qg_mul_after(const struct ggml_cgraph *g, int j);
/* Routed rows (a MUL_MAT_ID's, in its order) written to mul's rows, times mul's factors. */
void qg_rows_to_mul(qg_acts *a, const struct ggml_tensor *mul);
/* At node i of the graph: the nodes of llama.cpp's MoE FFN {gate MUL_MAT_ID, up MUL_MAT_ID, GLU
 * swiglu[, down MUL_MAT_ID]} run as one, returning how many nodes it took (0: no pattern here).
 * *st is the status when it took some. */
int qg_compute_moe_ffn(qg_context *ctx, struct ggml_cgraph *graph, int i, enum ggml_status *st);

/* ---- the kernel qmoe runs here, and the dense weights taken because of it (kernel.c) ---- */

/* 1 when dense 2-D weights go to the backend at load: QMOE_GGML_DENSE=1 yes, =0 no; otherwise
 * where the kernel qmoe runs here is AVX-512 VNNI or AMX. */
int qg_take_dense(void);
/* The kernel qmoe runs int8 grouped matmuls with on this CPU (QMOE_KERNEL_AUTO if it cannot
 * tell), found once without starting any thread (kernel.c). */
qmoe_kernel qg_kernel(void);
/* 1: weights whose integers are a format's codes (qg_codebook) are kept as the codes, where
 * qmoe's kernel reads them in place; 0: as int8. */
int qg_take_codes(void);
/* 1: q6_K's integers are kept in 6 bits (qmoe_weights_options.value_bits) where qmoe's kernel
 * is AVX-512 VNNI, or QMOE_GGML_BITS6=1; 0: as int8 (QMOE_GGML_BITS6=0, the other kernels). */
int qg_take_bits6(void);
/* 1 when the backend computes this node (MUL_MAT / MUL_MAT_ID of a taken weight type). */
int qg_supports_matmul(const struct ggml_tensor *op);
/* Runs one MUL_MAT or MUL_MAT_ID node, writing MUL node mul (qg_mul_after) instead of node's own
 * output when mul is not NULL; GGML_STATUS_FAILED with the reason logged on error, dst untouched. */
enum ggml_status qg_compute_matmul(qg_context *ctx, struct ggml_tensor *node, struct ggml_tensor *mul);
void qg_context_release(qg_context *ctx);

/* qmoe's device on ggml's threads (pool.c): inside `omp parallel num_threads(threads)` when the
 * llama.cpp build uses OpenMP (QG_OPENMP), else on a pool of the backend's own that sleeps
 * between jobs. Call with the previous device destroyed; sets dev_threads. */
qmoe_status qg_device_create(qg_context *ctx, int threads, qmoe_device **device);
qg_pool *qg_pool_create(int threads);
void qg_pool_destroy(qg_pool *pool); /* NULL is a no-op */
int qg_uses_openmp(void);
/* Runs fn(arg, t, n) for every t in [0, n), n = the device's threads, on the threads qmoe's parts
 * run on (all at once); for the backend's own per-row work between qmoe's operators. */
void qg_parallel(qg_context *ctx, void (*fn)(void *arg, int t, int n), void *arg);

/* Logs "qmoe: <what>: <qmoe_last_error()>" through ggml's logger. */
void qg_log_error(const char *what);
/* Logs "qmoe: <name>: <what>" at ggml's debug level (what the backend decided about a tensor). */
void qg_log_debug(const char *what, const char *name);

#endif
