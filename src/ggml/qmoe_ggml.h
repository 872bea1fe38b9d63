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

#include "ggml-backend-impl.h"
#include "ggml-backend.h"
#include "ggml.h"
#include "qmoe/op.h"
#include "qmoe/qmoe.h"
#include "qmoe/runtime.h"
#include "qmoe/weights.h"

#define QG_NAME "QMOE"
#define QG_QK 32            /* values per block of q8_0 and q4_0: one qmoe scale group */
#define QG_Q8_0_BYTES 34    /* fp16 d + 32 int8 */
#define QG_Q4_0_BYTES 18    /* fp16 d + 16 bytes of two nibbles */
#define QG_MAX_EXPERTS 1024 /* qmoe's E limit: more matrices are split into chunks */
#define QG_MAX_COLS 10240   /* qmoe's N limit for prepacked weights: wider ones are split */
#define QG_PLANS 4          /* plans kept per weight chunk (one per row count seen last) */

/* ---- weight decoding (convert.c): the exact integer and scale of every value ---- */

/* 1 for the weight types the backend takes (q8_0, q4_0). */
int qg_type_supported(enum ggml_type type);

/* Decodes one row of K values (K % 32 == 0) of a q8_0 or q4_0 row: q[k] the integer (q8_0 as
 * stored, q4_0 as nibble - 8) and d[k / 32] the block's scale, so value k is exactly q[k] * d. */
void qg_decode_row(enum ggml_type type, const void *row, int64_t K, int8_t *q, float *d);

/* ---- prepacked weights (weights.c) ---- */

/* One piece of a weight: experts [e0, e0 + ne) and columns [n0, n0 + nc) as a qmoe prepacked
 * object of nc + pad columns (pad 1 when nc is odd: qmoe's N is even; the extra column is zero),
 * with the grouped-matmul plans made for it, by row count. */
typedef struct qg_chunk {
    int64_t e0, ne, n0, nc, pad;
    qmoe_weights *w;
    qmoe_tensor *view;
    struct {
        int64_t rows;
        int threads;
        qmoe_op *op;
    } plans[QG_PLANS];
    int next_plan;
} qg_chunk;

/* A weight as one op reads it: where its bytes are, its layout, and its chunks. */
typedef struct qg_weight {
    const uint8_t *data; /* tensor->data of the viewed bytes */
    size_t lo, hi;       /* byte range inside the buffer it was made from */
    enum ggml_type type;
    int64_t ne[4];
    size_t nb[4];
    int64_t K, N, E;     /* E = ne[2] * ne[3] matrices, matrix e = (e % ne[2], e / ne[2]) */
    qg_chunk *chunks;
    int nchunks;
    struct qg_weight *next;
} qg_weight;

/* Builds the prepacked weight of tensor `t` (its data must be readable); NULL on failure with
 * qmoe's message in qmoe_last_error() (qmoe_error_set for the backend's own failures). */
qg_weight *qg_weight_build(const struct ggml_tensor *t, size_t lo, size_t hi);
void qg_weight_free(qg_weight *w);

/* ---- the buffer type and buffers (buffer.c) ---- */

typedef struct qg_buffer {
    uint8_t *base;
    size_t size;
    pthread_mutex_t lock;
    qg_weight *weights; /* converted weights living in this buffer */
} qg_buffer;

ggml_backend_buffer_type_t qg_buffer_type(void);
/* A buffer of the QMOE type (a zero-byte one too); one that holds data (made by alloc_buffer). */
int qg_buffer_is_ours(ggml_backend_buffer_t buffer);
int qg_buffer_holds_data(ggml_backend_buffer_t buffer);
/* The converted weight for tensor t in buffer b (built now if it has not been); NULL on failure. */
qg_weight *qg_buffer_weight(ggml_backend_buffer_t buffer, const struct ggml_tensor *t);

/* ---- the backend (backend.c) and its matmuls (matmul.c) ---- */

enum {
    QG_S_WS,     /* qmoe workspace */
    QG_S_X,      /* gathered activations, float [R, K], rows sorted by matrix */
    QG_S_XQ,     /* their int8 values [R, K] */
    QG_S_XS,     /* per-row scales [R] */
    QG_S_Y,      /* outputs [R, Np] */
    QG_S_ROWS,   /* per routed row: matrix, source row, destination row (int64 x 3) */
    QG_S_PERM,   /* routed rows sorted by matrix [R] */
    QG_S_COUNTS, /* rows per matrix and their starts, int64 [2 E + 1] */
};

typedef struct qg_pool qg_pool;

typedef struct qg_context {
    int n_threads;         /* from ggml_backend_set_n_threads; 0 until set: the online cores */
    int dev_threads;       /* the thread count `device` was made with */
    qmoe_device *device;   /* on ggml's threads (pool.c) */
    qg_pool *pool;         /* the backend's own threads, when not on OpenMP's (pool.c) */
    qmoe_stream *stream;
    /* scratch, grown as needed (QG_S_*) */
    void *scratch[8];
    size_t cap[8];
    struct {
        int64_t rows, K;
        int threads;
        qmoe_op *op;
    } quant[QG_PLANS];
    int next_quant;
} qg_context;

/* 1 when the backend computes this node (MUL_MAT / MUL_MAT_ID of a taken weight type). */
int qg_supports_matmul(const struct ggml_tensor *op);
/* Runs one MUL_MAT or MUL_MAT_ID node; GGML_STATUS_FAILED with the reason logged on error,
 * dst untouched. */
enum ggml_status qg_compute_matmul(qg_context *ctx, struct ggml_tensor *node);
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

#endif
