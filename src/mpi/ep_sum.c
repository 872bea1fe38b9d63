/* Combine's weighted sum in token order: each token's K rows, wherever the exchange left them
 * (home for other ranks' experts, expert_y for the rank's own), in finalize's arithmetic. The
 * tokens are split over threads; a token is summed by one thread in j order, so the bits do not
 * depend on the thread count. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "ep_internal.h"

typedef struct sum_part {
    const qmoe_ep *ep;
    qmoe_dtype y_dtype, out_dtype;
    const unsigned char *y, *home;
    const float *weights;
    void *out;
    float *acc;
    int64_t t0, t1;
} sum_part;

/* acc[h] += w * y[h] over a row of y_dtype (separate multiply and add: -ffp-contract=off). */
static void add_row(float *restrict acc, float w, qmoe_dtype y_dtype,
                    const unsigned char *restrict y, int64_t H)
{
    if (y_dtype == QMOE_DTYPE_FLOAT32) {
        const float *yf = (const float *)(const void *)y;
        for (int64_t h = 0; h < H; h++) acc[h] += w * yf[h];
    } else { /* widened exactly by the public conversions, a chunk at a time */
        enum { CHUNK = 256 };
        float f[CHUNK];
        const uint16_t *yh = (const uint16_t *)(const void *)y;
        for (int64_t h0 = 0; h0 < H; h0 += CHUNK) {
            int64_t n = H - h0 < CHUNK ? H - h0 : CHUNK;
            if (y_dtype == QMOE_DTYPE_BFLOAT16) qmoe_convert_bf16_to_f32(yh + h0, n, f);
            else qmoe_convert_f16_to_f32(yh + h0, n, f);
            for (int64_t h = 0; h < n; h++) acc[h0 + h] += w * f[h];
        }
    }
}

/* Row i = t * K + j: the rank's own in expert_y, a remote one in home (messages) or read in
 * place in its owner's segment (shared memory). */
static const unsigned char *row_at(const sum_part *a, int64_t i, size_t row)
{
    int64_t s = a->ep->route.src[i];
    if (s < 0) return a->y + (size_t)(-1 - s) * row;
    return a->ep->shm ? ep_shm_row(a->ep, a->ep->route.far[i], row) : a->home + (size_t)s * row;
}

static void *sum_tokens(void *arg)
{
    const sum_part *a = arg;
    const int64_t H = a->ep->H, K = a->ep->K;
    const size_t row = (size_t)H * ep_dtype_size(a->y_dtype);
    float *acc = a->acc;
    for (int64_t t = a->t0; t < a->t1; t++) {
        memset(acc, 0, (size_t)H * sizeof *acc);
        for (int64_t j = 0; j < K; j++)
            add_row(acc, a->weights ? a->weights[t * K + j] : 1.0f, a->y_dtype,
                    row_at(a, t * K + j, row), H);
        if (a->out_dtype == QMOE_DTYPE_FLOAT32) {
            memcpy((float *)a->out + t * H, acc, (size_t)H * sizeof *acc);
        } else if (a->out_dtype == QMOE_DTYPE_FLOAT16) {
            qmoe_convert_f32_to_f16(acc, H, (uint16_t *)a->out + t * H);
        } else {
            qmoe_convert_f32_to_bf16(acc, H, (uint16_t *)a->out + t * H);
        }
    }
    return NULL;
}

enum { MAX_PARTS = EP_SUM_MAX_THREADS, MIN_ROWS_PER_PART = 64 }; /* a thread start: ~ a row's sum */

void ep_weighted_sum(const qmoe_ep *ep, qmoe_dtype y_dtype, const void *expert_y, const void *home,
                     const ep_sum_args *a, int64_t t0, int64_t t1)
{
    const int64_t T = t1 - t0, K = ep->K;
    int64_t parts = ep->threads < MAX_PARTS ? ep->threads : MAX_PARTS;
    if (parts > T * K / MIN_ROWS_PER_PART) parts = T * K / MIN_ROWS_PER_PART;
    if (parts < 1) parts = 1;
    sum_part p[MAX_PARTS];
    pthread_t th[MAX_PARTS];
    int started[MAX_PARTS] = {0};
    for (int64_t i = 0; i < parts; i++) {
        p[i] = (sum_part){ep, y_dtype, a->out_dtype, expert_y, home, a->weights, a->out,
                          a->acc + (size_t)i * (size_t)ep->H, t0 + T * i / parts,
                          t0 + T * (i + 1) / parts};
        /* a thread that cannot start: its part runs here below */
        if (i > 0) started[i] = pthread_create(&th[i], NULL, sum_tokens, &p[i]) == 0;
    }
    sum_tokens(&p[0]);
    for (int64_t i = 1; i < parts; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        else sum_tokens(&p[i]);
    }
}
