/* qmoe_moe_combine: processed rows back to their tokens' ranks, weighted sum over k. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/halfconv.h"
#include "ep_internal.h"

/* Round to nearest even; NaN stays a quiet NaN (as qmoe_moe_finalize_routing stores bf16). */
static uint16_t f32_to_bf16(float f)
{
    uint32_t b = qmoe_f32_to_bits(f);
    uint32_t r = (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16, qn = (b >> 16) | 0x40u;
    return (uint16_t)((b & 0x7FFFFFFFu) > 0x7F800000u ? qn : r);
}

static float load(qmoe_dtype dt, const unsigned char *row, int64_t h)
{
    uint16_t u;
    switch (dt) {
    case QMOE_DTYPE_FLOAT32: {
        float f;
        memcpy(&f, row + (size_t)h * 4, 4);
        return f;
    }
    case QMOE_DTYPE_BFLOAT16: memcpy(&u, row + (size_t)h * 2, 2); return qmoe_bf16_to_f32(u);
    default: memcpy(&u, row + (size_t)h * 2, 2); return qmoe_f16_to_f32(u);
    }
}

/* acc[h] += w * y[h] over a row of y_dtype. */
static void add_row(float *acc, float w, qmoe_dtype y_dtype, const unsigned char *y, int64_t H)
{
    if (y_dtype == QMOE_DTYPE_FLOAT32) {
        const float *yf = (const float *)(const void *)y;
        for (int64_t h = 0; h < H; h++) acc[h] += w * yf[h];
    } else {
        for (int64_t h = 0; h < H; h++) acc[h] += w * load(y_dtype, y, h);
    }
}

qmoe_status qmoe_moe_combine(qmoe_ep *ep, qmoe_dtype y_dtype, const void *expert_y, int64_t rows,
                             const float *weights, qmoe_dtype out_dtype, void *out)
{
    if (!ep) return ep_fail(QMOE_ERR_PARAM_NULLPTR, "ep is NULL"); /* no communicator to agree on */
    const ep_route *rt = &ep->route;
    const int64_t H = ep->H, K = ep->K;
    qmoe_status st = QMOE_OK;
    if (out_dtype != QMOE_DTYPE_FLOAT32 && out_dtype != QMOE_DTYPE_BFLOAT16 &&
        out_dtype != QMOE_DTYPE_FLOAT16)
        st = ep_fail(QMOE_ERR_PARAM_INVALID, "out_dtype %d is not FLOAT32, FLOAT16 or BFLOAT16",
                     (int)out_dtype);
    else if (ep->dispatched && rt->tokens > 0 && !out)
        st = ep_fail(QMOE_ERR_PARAM_NULLPTR, "out is NULL with %lld tokens", (long long)rt->tokens);
    float *acc = ep_alloc((size_t)H, sizeof(float));
    if (st == QMOE_OK && !acc) st = ep_fail(QMOE_ERR_INNER, "out of memory");
    st = ep_send_home(ep, st, y_dtype, expert_y, rows, 0);
    if (st != QMOE_OK) goto done;

    /* Each token's choices in k order, accumulated in float32 from 0: finalize's arithmetic. */
    const unsigned char *rbuf = ep->home;
    const size_t row = (size_t)H * ep_dtype_size(y_dtype);
    for (int64_t t = 0; t < rt->tokens; t++) {
        memset(acc, 0, (size_t)H * sizeof *acc);
        for (int64_t j = 0; j < K; j++)
            add_row(acc, weights ? weights[t * K + j] : 1.0f, y_dtype,
                    rbuf + (size_t)rt->slot[t * K + j] * row, H);
        if (out_dtype == QMOE_DTYPE_FLOAT32) {
            memcpy((float *)out + t * H, acc, (size_t)H * sizeof *acc);
        } else if (out_dtype == QMOE_DTYPE_FLOAT16) {
            uint16_t *o = (uint16_t *)out + t * H;
            for (int64_t h = 0; h < H; h++) o[h] = qmoe_f32_to_f16(acc[h]);
        } else {
            uint16_t *o = (uint16_t *)out + t * H;
            for (int64_t h = 0; h < H; h++) o[h] = f32_to_bf16(acc[h]);
        }
    }
    ep_clear_error();
done:
    free(acc);
    return st;
}

qmoe_status ep_send_home(qmoe_ep *ep, qmoe_status st, qmoe_dtype y_dtype, const void *expert_y,
                         int64_t rows, int64_t extra)
{
    const ep_route *rt = &ep->route;
    const int64_t H = ep->H, K = ep->K;
    size_t ys = ep_dtype_size(y_dtype), row = (size_t)H * ys;
    if (st != QMOE_OK) {
        /* the caller's own checks failed: agree on that below */
    } else if (!ep->dispatched) {
        st = ep_fail(QMOE_ERR_PARAM_INVALID, "combine before any successful dispatch");
    } else if (!ys || y_dtype == QMOE_DTYPE_INT8 || (int64_t)row > INT_MAX) {
        st = ep_fail(QMOE_ERR_PARAM_INVALID, "y_dtype %d is not FLOAT32, FLOAT16 or BFLOAT16",
                     (int)y_dtype);
    } else if (rows != rt->recv_total) {
        st = ep_fail(QMOE_ERR_PARAM_INVALID, "rows %lld: the dispatch delivered %lld",
                     (long long)rows, (long long)rt->recv_total);
    } else if (rows > 0 && !expert_y) {
        st = ep_fail(QMOE_ERR_PARAM_NULLPTR, "expert_y is NULL with %lld rows", (long long)rows);
    }
    const int64_t n = st == QMOE_OK ? rt->tokens * K : 0, m = st == QMOE_OK ? rows : 0;
    int *sc = ep_alloc((size_t)ep->size, 2 * sizeof(int)); /* counts without the rank's own */
    if (st == QMOE_OK && (!sc || !ep_reserve(&ep->home, &ep->home_cap, (size_t)(n + extra), row) ||
                          !ep_reserve(&ep->stage, &ep->stage_cap, (size_t)m, row)))
        st = ep_fail(QMOE_ERR_INNER, "out of memory for %lld + %lld rows", (long long)m,
                     (long long)n);
    if ((st = ep_agree(ep->comm, st)) != QMOE_OK) {
        free(sc);
        return st;
    }

    /* Back to source-major staging (the layout each source sent), then home in send order; the
     * rank's own rows straight home. */
    unsigned char *home = ep->home;
    if (m > 0) ep_regroup(ep, rt, row, 0, expert_y, ep->stage, home + (size_t)rt->sdispls[ep->rank] * row);
    ep_without_self(ep, rt->rcounts, sc);
    ep_without_self(ep, rt->scounts, sc + ep->size);
    MPI_Datatype y_row;
    MPI_Type_contiguous((int)row, MPI_BYTE, &y_row);
    MPI_Type_commit(&y_row);
    MPI_Alltoallv(ep->stage, sc, rt->rdispls, y_row, home, sc + ep->size, rt->sdispls, y_row,
                  ep->comm);
    MPI_Type_free(&y_row);
    free(sc);
    return QMOE_OK;
}
