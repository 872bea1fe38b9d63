/*
 * Random, realistic cases. Activations are quantized per token (x = round(a / xScale) with
 * xScale = amax / 127); weights are bell-shaped integers filling the int8 / int4 range, with
 * channel scales chosen so the dequantized sums are O(1): outputs neither saturate nor vanish.
 * Tokens go to experts in uneven, random shares.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "case.h"
#include "cli_size.h"

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r) /* splitmix64 */
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_uniform(rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

/* Triangular on (-1, 1), the sum of two uniforms from one draw: a cheap bell shape. */
static float rng_bell(rng *r)
{
    uint64_t v = rng_next(r);
    return (float)(((double)(v & 0xFFFFFFFFu) + (double)(v >> 32)) * 0x1.0p-32 - 1.0);
}

void gen_defaults(gen_params *p)
{
    memset(p, 0, sizeof *p);
    p->E = 4;
    p->M = 8192;
    p->K = 7168;
    p->N = 4096;
    p->a8w4 = 1;
    p->weight_format = GEN_WEIGHT_NZ;
    p->scale_dtype = GEN_SCALE_F32;
    p->group_list_type = QMOE_GROUP_LIST_CUMSUM;
    p->seed = 1;
    p->max_gib = 16;
}

static int bad(char *err, const char *what)
{
    snprintf(err, CASE_ERR_LEN, "%s", what);
    return -1;
}

static int check_params(const gen_params *p, char *err)
{
    if (p->E < 1 || p->M < 0 || p->K < 1 || p->N < 2)
        return bad(err, "needs E >= 1, M >= 0, K >= 1, N >= 2");
    if (p->N % 2) return bad(err, "N must be even (SwiGLU splits it in halves)");
    if (p->groups < 0 || p->groups > p->K || (p->groups && p->K % p->groups))
        return bad(err, "groups must be 0 (per-channel) or divide K");
    if (p->tail_rows < 0 || p->tail_rows > p->M) return bad(err, "tail rows must be in [0, M]");
    if (p->weight_format == GEN_WEIGHT_NZ && p->K % 16)
        return bad(err, "FRACTAL_NZ weights need K % 16 == 0");
    if (p->weight_format == GEN_WEIGHT_NZ && p->N % (p->a8w4 ? 64 : 32))
        return bad(err, p->a8w4 ? "FRACTAL_NZ int4 weights need N % 64 == 0"
                                : "FRACTAL_NZ int8 weights need N % 32 == 0");
    if (p->a8w4 && p->weight_format == GEN_WEIGHT_ND && p->N % 8)
        return bad(err, "ND int32-packed int4 weights need N % 8 == 0");
    if (!p->a8w4 && p->weight_format == GEN_WEIGHT_ND_INT4)
        return bad(err, "the nd4 weight format (packed int4 bytes) is for a8w4");
    if (!p->a8w4 && p->scale_dtype == GEN_SCALE_U64)
        return bad(err, "uint64 weight scales are for a8w4 only");
    return 0;
}

/* Headers only (case_generate_headers) or zeroed memory. */
static int describe_only;

static int alloc(npy_array *a, npy_dtype dtype, int ndim, const int64_t *shape, const char *name,
                 char *err)
{
    char why[NPY_ERR_LEN];
    if ((describe_only ? npy_describe : npy_alloc)(a, dtype, ndim, shape, why)) {
        snprintf(err, CASE_ERR_LEN, "%s: %s", name, why);
        return -1;
    }
    return 0;
}

/* One token: bell-shaped activations scaled by a per-token magnitude, quantized to int8. */
static void gen_token(rng *r, int64_t K, float *a, int8_t *x, float *x_scale)
{
    float magnitude = (float)(0.5 + 1.5 * rng_uniform(r)), amax = 0.0f;
    for (int64_t k = 0; k < K; k++) {
        a[k] = magnitude * rng_bell(r);
        amax = fmaxf(amax, fabsf(a[k]));
    }
    float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int64_t k = 0; k < K; k++) x[k] = (int8_t)lrintf(a[k] * inv);
    *x_scale = amax > 0.0f ? amax / 127.0f : 1.0f;
}

static int gen_x(const gen_params *p, rng *r, op_case *c, char *err)
{
    int64_t x_shape[2] = {p->M, p->K};
    npy_array row;
    if (alloc(&c->in[CASE_X], NPY_INT8, 2, x_shape, "x", err) ||
        alloc(&c->in[CASE_X_SCALE], NPY_FLOAT32, 1, &p->M, "xScale", err) ||
        alloc(&row, NPY_FLOAT32, 1, &p->K, "x", err))
        return -1;
    int8_t *x = c->in[CASE_X].data;
    float *xs = c->in[CASE_X_SCALE].data;
    for (int64_t m = 0; m < p->M; m++) gen_token(r, p->K, row.data, x + m * p->K, &xs[m]);
    npy_free(&row);
    return 0;
}

static double expert_share(const gen_params *p, rng *r, int64_t e)
{
    double draw = rng_uniform(r);
    return p->empty_experts && e % 3 == 1 ? 0.0 : 0.05 - log(1.0 - draw);
}

/* Expert shares are exponential draws (zero for the empty experts); ends are the rounded-down
 * cumulative shares of the M - tail routed rows, so they never decrease. The first pass sums the
 * shares, the second replays the same draws. */
static int gen_group_list(const gen_params *p, rng *r, op_case *c, char *err)
{
    if (alloc(&c->in[CASE_GROUP_LIST], NPY_INT64, 1, &p->E, "groupList", err)) return -1;
    int64_t *g = c->in[CASE_GROUP_LIST].data, routed = p->M - p->tail_rows, prev = 0;
    rng replay = *r;
    double total = 0.0, cum = 0.0;
    for (int64_t e = 0; e < p->E; e++) total += expert_share(p, r, e);
    for (int64_t e = 0; e < p->E; e++) {
        cum += expert_share(p, &replay, e);
        int64_t end = e == p->E - 1 ? routed : (int64_t)floor((double)routed * (cum / total));
        g[e] = p->group_list_type == QMOE_GROUP_LIST_COUNT ? end - prev : end;
        prev = end;
    }
    return 0;
}

/* Logical weights W[e][k][n], one value per int8: bell-shaped over the int8 or int4 range. */
static int gen_weight_values(const gen_params *p, rng *r, npy_array *nd, char *err)
{
    int64_t shape[3] = {p->E, p->K, p->N};
    if (alloc(nd, NPY_INT8, 3, shape, "weight", err)) return -1;
    int8_t *w = nd->data;
    float range = p->a8w4 ? 8.0f : 127.0f;
    for (int64_t i = 0; i < nd->count; i++) {
        long v = lrintf(rng_bell(r) * range);
        w[i] = (int8_t)(p->a8w4 && v > 7 ? 7 : v);
    }
    return 0;
}

/* Stores one scale in the chosen dtype; returns the float32 the operator will read back. */
static float store_scale(const gen_params *p, npy_array *ws, int64_t i, float v)
{
    switch (p->scale_dtype) {
    case GEN_SCALE_F16:
    case GEN_SCALE_BF16: {
        uint16_t h;
        float back;
        if (p->scale_dtype == GEN_SCALE_F16) {
            qmoe_convert_f32_to_f16(&v, 1, &h);
            qmoe_convert_f16_to_f32(&h, 1, &back);
        } else {
            qmoe_convert_f32_to_bf16(&v, 1, &h);
            qmoe_convert_bf16_to_f32(&h, 1, &back);
        }
        ((uint16_t *)ws->data)[i] = h;
        return back;
    }
    case GEN_SCALE_U64: {
        uint32_t bits;
        memcpy(&bits, &v, sizeof bits);
        ((uint64_t *)ws->data)[i] = bits;
        return v;
    }
    case GEN_SCALE_F32:
        break;
    }
    ((float *)ws->data)[i] = v;
    return v;
}

/* Scales so that each dequantized sum of K products has a standard deviation near 1.5 times the
 * token magnitude: 1.5 / (sqrt(K) * std of the integer weights), jittered per channel. */
static int gen_scales(const gen_params *p, rng *r, op_case *c, npy_array *as_f32, char *err)
{
    static const npy_dtype dtypes[] = {
        [GEN_SCALE_F32] = NPY_FLOAT32,
        [GEN_SCALE_F16] = NPY_FLOAT16,
        [GEN_SCALE_U64] = NPY_UINT64,
        [GEN_SCALE_BF16] = NPY_UINT16,
    };
    int64_t shape[3] = {p->E, p->groups, p->N};
    if (!p->groups) shape[1] = p->N;
    int ndim = p->groups ? 3 : 2;
    npy_array *ws = &c->in[CASE_WEIGHT_SCALE];
    if (alloc(ws, dtypes[p->scale_dtype], ndim, shape, "weightScale", err) ||
        alloc(as_f32, NPY_FLOAT32, ndim, shape, "weightScale", err))
        return -1;
    c->scale_bf16 = p->scale_dtype == GEN_SCALE_BF16;
    double weight_std = (p->a8w4 ? 8.0 : 127.0) * 0.4082; /* triangular: range / sqrt(6) */
    double base = 1.5 / (sqrt((double)p->K) * weight_std);
    float *f = as_f32->data;
    for (int64_t i = 0; i < ws->count; i++)
        f[i] = store_scale(p, ws, i, (float)(base * (0.75 + 0.5 * rng_uniform(r))));
    return 0;
}

static int gen_bias(const gen_params *p, const npy_array *nd, const npy_array *scale, op_case *c,
                    char *err)
{
    int64_t shape[2] = {p->E, p->N};
    if (alloc(&c->in[CASE_BIAS], NPY_FLOAT32, 2, shape, "bias", err)) return -1;
    if (qmoe_layout_weight_assist_matrix(nd->data, p->E, p->K, p->N, scale->data, p->groups,
                                  c->in[CASE_BIAS].data)) {
        snprintf(err, CASE_ERR_LEN, "bias: %s", qmoe_last_error());
        return -1;
    }
    return 0;
}

/* The weight in its stored layout, from the logical values (consumed). */
static int pack_weight(const gen_params *p, npy_array *nd, op_case *c, char *err)
{
    int64_t E = p->E, K = p->K, N = p->N;
    npy_array *w = &c->in[CASE_WEIGHT];
    int64_t nz8[5] = {E, N / 32, K / 16, 16, 32}, nz4[5] = {E, N / 64, K / 16, 16, 8};
    int64_t nd32[3] = {E, K, N / 8}, nd4[3] = {E, K, N / 2};
    qmoe_status st = QMOE_OK;
    if (!p->a8w4 && p->weight_format == GEN_WEIGHT_ND) {
        *w = *nd;
        memset(nd, 0, sizeof *nd);
        return 0;
    }
    if (!p->a8w4) {
        if (alloc(w, NPY_INT8, 5, nz8, "weight", err)) return -1;
        st = qmoe_layout_nd_to_nz_int8(nd->data, E, K, N, w->data);
    } else if (p->weight_format == GEN_WEIGHT_NZ) {
        if (alloc(w, NPY_INT32, 5, nz4, "weight", err)) return -1;
        st = qmoe_layout_nd_to_nz_int4(nd->data, E, K, N, w->data); /* the int32 view: same bytes */
    } else if (p->weight_format == GEN_WEIGHT_ND) {
        if (alloc(w, NPY_INT32, 3, nd32, "weight", err)) return -1;
        st = qmoe_layout_int4_pack_int32(nd->data, nd->count, w->data);
    } else {
        if (alloc(w, NPY_UINT8, 3, nd4, "weight", err)) return -1;
        st = qmoe_layout_int4_pack(nd->data, nd->count, w->data);
        c->weight_int4_nd = 1;
    }
    npy_free(nd);
    if (st) snprintf(err, CASE_ERR_LEN, "weight: %s", qmoe_last_error());
    return st ? -1 : 0;
}

int case_generate(const gen_params *p, op_case *c, char *err)
{
    rng r = {p->seed};
    npy_array nd, scale;
    memset(c, 0, sizeof *c);
    memset(&nd, 0, sizeof nd);
    memset(&scale, 0, sizeof scale);
    c->group_list_type = p->group_list_type;
    int rc = check_params(p, err) || gen_x(p, &r, c, err) || gen_group_list(p, &r, c, err) ||
             gen_weight_values(p, &r, &nd, err) || gen_scales(p, &r, c, &scale, err) ||
             (p->a8w4 && gen_bias(p, &nd, &scale, c, err)) || pack_weight(p, &nd, c, err);
    npy_free(&nd);
    npy_free(&scale);
    if (rc) case_free(c);
    return rc ? -1 : 0;
}

/* The shapes and dtypes case_generate would make, with no memory: the same code paths up to the
 * first write of data. */
static int pack_headers(const gen_params *p, op_case *c, char *err)
{
    int64_t E = p->E, K = p->K, N = p->N;
    int64_t nz8[5] = {E, N / 32, K / 16, 16, 32}, nz4[5] = {E, N / 64, K / 16, 16, 8};
    int64_t nd8[3] = {E, K, N}, nd32[3] = {E, K, N / 8}, nd4[3] = {E, K, N / 2};
    npy_array *w = &c->in[CASE_WEIGHT];
    if (!p->a8w4) {
        int nz = p->weight_format == GEN_WEIGHT_NZ;
        return alloc(w, NPY_INT8, nz ? 5 : 3, nz ? nz8 : nd8, "weight", err);
    }
    if (p->weight_format == GEN_WEIGHT_NZ) return alloc(w, NPY_INT32, 5, nz4, "weight", err);
    if (p->weight_format == GEN_WEIGHT_ND) return alloc(w, NPY_INT32, 3, nd32, "weight", err);
    c->weight_int4_nd = 1;
    return alloc(w, NPY_UINT8, 3, nd4, "weight", err);
}

int case_generate_headers(const gen_params *p, op_case *c, char *err)
{
    static const npy_dtype dtypes[] = {
        [GEN_SCALE_F32] = NPY_FLOAT32,
        [GEN_SCALE_F16] = NPY_FLOAT16,
        [GEN_SCALE_U64] = NPY_UINT64,
        [GEN_SCALE_BF16] = NPY_UINT16,
    };
    int64_t x_shape[2] = {p->M, p->K}, en[2] = {p->E, p->N}, egn[3] = {p->E, p->groups, p->N};
    memset(c, 0, sizeof *c);
    c->group_list_type = p->group_list_type;
    c->scale_bf16 = p->scale_dtype == GEN_SCALE_BF16;
    describe_only = 1;
    int rc = check_params(p, err) || alloc(&c->in[CASE_X], NPY_INT8, 2, x_shape, "x", err) ||
             alloc(&c->in[CASE_X_SCALE], NPY_FLOAT32, 1, &p->M, "xScale", err) ||
             alloc(&c->in[CASE_GROUP_LIST], NPY_INT64, 1, &p->E, "groupList", err) ||
             alloc(&c->in[CASE_WEIGHT_SCALE], dtypes[p->scale_dtype], p->groups ? 3 : 2,
                   p->groups ? egn : en, "weightScale", err) ||
             (p->a8w4 && alloc(&c->in[CASE_BIAS], NPY_FLOAT32, 2, en, "bias", err)) ||
             pack_headers(p, c, err);
    describe_only = 0;
    if (rc) return -1;
    cli_bytes b = {0}; /* every array, the unpacked int8 weight values and float scales too */
    for (int i = 0; i < CASE_INPUTS; i++) cli_bytes_add(&b, (int64_t)c->in[i].nbytes, 1, 1);
    cli_bytes_add(&b, p->E, p->K, p->N);
    cli_bytes_add(&b, (int64_t)c->in[CASE_WEIGHT_SCALE].count, 4, 1);
    char why[CASE_ERR_LEN];
    if (cli_bytes_check(&b, "the case", p->max_gib, why, sizeof why)) {
        snprintf(err, CASE_ERR_LEN, "%s", why);
        return -1;
    }
    return 0;
}
